/*
 * clflash_bench.c - the `clflash-bench` tool: times clflash's flash attention against the naive
 * attention that materializes the score matrix, on the same device, inputs and shapes.
 *
 * Why it exists: the seeds promise that tiling attention through local memory removes the
 * n x n score matrix from device memory and cuts global-memory traffic from O(n^2) to
 * O(n * n/B). A user should be able to check that claim on their own hardware with one command,
 * and see it stated plainly: how long each algorithm takes, how many bytes each is modeled to
 * move, how much scratch memory each allocates, where naive stops fitting at all, and that the two
 * agree on the result. It measures honestly (warm-up runs first, then enough timed runs to fill a
 * minimum time, median with min and max reported beside it, wall clock from enqueue to clFinish)
 * and reports the device's facts next to the numbers so results can be compared across machines.
 * Tables are for people; --csv and --json are for scripts. It uses only clflash.h and plain
 * OpenCL 1.2 calls.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#endif

#include "tool_common.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _WIN32
#include <windows.h>
#endif

#define PROG "clflash-bench"
#define MIN_RUNS 3u
#define MAX_RUNS 1000u
#define MAX_WARMUP 1000000u
#define DEFAULT_SEQ 4096u
#define DEFAULT_HEAD_DIM 64u
#define DEFAULT_HEADS 2u
#define DEFAULT_WARMUP 2u
#define DEFAULT_MIN_TIME 1.0
#define MAX_MIN_TIME 86400.0

/* ============================================================================================
 * Host helpers: memory, strings, clocks, the environment.
 * ========================================================================================== */

/* Seconds on a monotonic clock (only differences mean anything). */
static double now_seconds(void)
{
#ifdef _WIN32
    LARGE_INTEGER freq, count;
    QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&count);
    return (double)count.QuadPart / (double)freq.QuadPart;
#else
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        fprintf(stderr, PROG ": clock_gettime(CLOCK_MONOTONIC) failed: %s\n", strerror(errno));
        exit(1);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#endif
}

static int set_env(const char *name, const char *value)
{
#ifdef _WIN32
    return _putenv_s(name, value) == 0;
#else
    return setenv(name, value, 1) == 0;
#endif
}

/* a*b, or 0 with *overflow set when the product does not fit 64 bits. */
static uint64_t mul_checked(uint64_t a, uint64_t b, int *overflow)
{
    if (a != 0 && b > UINT64_MAX / a) {
        *overflow = 1;
        return 0;
    }
    return a * b;
}

/* ============================================================================================
 * Inputs: a deterministic generator and the fp16 conversions.
 * ========================================================================================== */

/* SplitMix64: small, fast, and the same sequence on every platform. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1]: 53 random bits scaled to [0, 2), shifted down by one. */
static float random_unit(uint64_t *state)
{
    return (float)((double)(next_random(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* IEEE binary32 -> binary16 bits, rounding to nearest, ties to even; overflow gives infinity,
 * NaN stays a (quiet) NaN, tiny values become subnormals or signed zero. */
static uint16_t float_to_half(float f)
{
    uint32_t x, sign, exp, mant, h, rem;
    int e;
    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000u;
    exp = (x >> 23) & 0xFFu;
    mant = x & 0x7FFFFFu;
    if (exp == 0xFFu) /* infinity or NaN */
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u | (mant >> 13) : 0u));
    e = (int)exp - 127 + 15; /* the half's biased exponent */
    if (e >= 31)
        return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {
        /* a half subnormal counts units of 2^-24: the 24-bit significand shifted right 14 - e */
        uint32_t m = mant | 0x800000u, shift, half;
        if (e < -10)
            return (uint16_t)sign; /* below 2^-25: rounds to zero */
        shift = (uint32_t)(14 - e);
        h = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u)))
            h++; /* may carry into the smallest normal, which is the right answer */
        return (uint16_t)(sign | h);
    }
    h = ((uint32_t)e << 10) | (mant >> 13);
    rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is correct, up to infinity */
    return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h)
{
    uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    float f;
    if (exp == 0)
        f = ldexpf((float)mant, -24);
    else if (exp == 31)
        f = mant ? NAN : INFINITY;
    else
        f = ldexpf((float)(mant | 0x400u), (int)exp - 25);
    return (h & 0x8000u) ? -f : f;
}

/* float -> bf16 bits, round to nearest even (NaN stays NaN). */
static uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_float(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* count values in [-1, 1] from `seed`, stored as dtype t. */
static void fill_random(void *dst, size_t count, clflash_dtype t, uint64_t seed)
{
    uint64_t state = seed;
    if (t == CLFLASH_F16 || t == CLFLASH_BF16) {
        uint16_t *p = dst;
        for (size_t i = 0; i < count; i++)
            p[i] = t == CLFLASH_F16 ? float_to_half(random_unit(&state)) : float_to_bf16(random_unit(&state));
    } else {
        float *p = dst;
        for (size_t i = 0; i < count; i++)
            p[i] = random_unit(&state);
    }
}

static double element_value(const void *src, size_t i, clflash_dtype t)
{
    if (t == CLFLASH_F16)
        return (double)half_to_float(((const uint16_t *)src)[i]);
    if (t == CLFLASH_BF16)
        return (double)bf16_to_float(((const uint16_t *)src)[i]);
    return (double)((const float *)src)[i];
}

/* ============================================================================================
 * Formatting numbers for people, and exactly for scripts.
 * ========================================================================================== */

static const char *algo_name(clflash_algo a)
{
    return a == CLFLASH_ALGO_FLASH ? "flash" : "naive";
}

/* Milliseconds with about four significant digits. */
static void format_ms(double ms, char *out, size_t cap)
{
    if (ms >= 100.0)
        snprintf(out, cap, "%.1f", ms);
    else if (ms >= 10.0)
        snprintf(out, cap, "%.2f", ms);
    else if (ms >= 1.0)
        snprintf(out, cap, "%.3f", ms);
    else
        snprintf(out, cap, "%.4f", ms);
}

/* ============================================================================================
 * Command line.
 * ========================================================================================== */

typedef struct {
    clflash_algo algos[2];
    size_t nalgo;
    uint32_t *seqs;
    size_t nseq, seq_cap;
    uint32_t head_dim, batch, heads, block;
    int have_block;
    clflash_dtype dtype;
    int causal, csv, json, no_check;
    const char *device;
    uint32_t warmup;
    double min_time;
} options;

static void print_help(FILE *f)
{
    fputs("Usage: " PROG " [options]\n"
          "\n"
          "Times clflash's flash attention (clflash_forward: tiles in local memory, no score\n"
          "matrix) against naive attention (clflash_forward_naive: writes the n x n score matrix\n"
          "to device memory, softmaxes it, multiplies by V) on one OpenCL device, with\n"
          "seq_q = seq_k = n and contiguous [batch][heads][n][head_dim] tensors filled with\n"
          "deterministic pseudo-random values in [-1, 1].\n"
          "\n"
          "Each (n, algorithm) is run --warmup times untimed, then repeated until --min-time\n"
          "seconds have passed (at least 3, at most 1000 timed runs). One run is timed as wall\n"
          "clock from the enqueue to clFinish; the median is reported with the min and max.\n"
          "  TFLOP/s  = 4 * batch * heads * n * n * head_dim / median time (halved with --causal)\n"
          "  GB/s     = modeled bytes / median time, where modeled bytes is\n"
          "             clflash_traffic_bytes(): the global-memory traffic each algorithm must move\n"
          "  scratch  = device memory the call allocates besides Q, K, V, O: none for flash, the\n"
          "             score matrices for naive (clflash_naive_workspace_bytes)\n"
          "With both algorithms, flash's output is then compared with naive's on the same inputs\n"
          "and the largest absolute difference is reported (skip with --no-check).\n"
          "\n",
          f);
    fputs("Options:\n"
          "  --algo A[,A]       flash, naive or both (default flash,naive)\n"
          "  --seq N[,N...]     sequence lengths n (default 4096); may be repeated\n"
          "  --head-dim D       head dimension, 1 to 256 (default 64)\n"
          "  --dtype T          storage type: f32, f16 or bf16 (default f32); the math is fp32\n"
          "  --batch B          batch size (default 1)\n"
          "  --heads H          heads (default 2)\n"
          "  --causal           causal masking\n"
          "  --device STR       the device: \"P:D\" (as clflash-query lists them) or a\n"
          "                     case-insensitive part of the platform or device name; sets\n"
          "                     CLFLASH_DEVICE. Default: CLFLASH_DEVICE, else the first GPU,\n"
          "                     else the first device\n"
          "  --warmup N         untimed runs before timing (default 2)\n"
          "  --min-time S       seconds of timed runs per measurement (default 1.0)\n"
          "  --block B          force the flash tile size B (the plan fails if B does not fit)\n"
          "  --csv              print CSV: a header row and one row per result\n"
          "  --json             print one JSON object: device, results, date, clflash_version\n"
          "  --no-check         do not compare flash's output with naive's\n"
          "  --version          print the tool's and library's versions\n"
          "  -h, --help         print this help\n"
          "Options take their value as the next argument or after '='. Progress goes to stderr.\n"
          "\n"
          "A naive run that fails for lack of memory (its score matrix exceeds the device's\n"
          "largest allocation, or an allocation fails) is reported as a failed row and the sweep\n"
          "goes on: showing where naive stops fitting is part of the point.\n"
          "\n"
          "Exit status: 0 on success (naive rows may have failed for lack of memory), 1 if the\n"
          "device cannot be opened or queried, or any other run or check failed, 2 on a usage\n"
          "error.\n"
          "\n"
          "Examples:\n"
          "  " PROG "\n"
          "  " PROG " --seq 1024,2048,4096,8192 --dtype f16 --head-dim 128 --json\n"
          "  " PROG " --algo flash --seq 16384 --causal --device 0:0\n",
          f);
}

/* A plain decimal number of seconds: digits, at most one '.', an optional exponent
 * ("1", "0.25", ".5", "2e-1"); no sign, hex, inf or nan. */
static int parse_seconds(const char *s, double *out)
{
    const char *p = s;
    size_t digits = 0;
    char *end = NULL;
    double v;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p != '\0')
        return 0;
    errno = 0;
    v = strtod(s, &end);
    if (errno == ERANGE || *end != '\0' || !(v >= 0.0) || v > MAX_MIN_TIME)
        return 0;
    *out = v;
    return 1;
}

static int add_seq(void *ctx, const char *text)
{
    options *o = ctx;
    uint64_t v;
    if (!parse_uint(text, 1, UINT32_MAX, &v))
        return 0;
    if (o->nseq == o->seq_cap) {
        o->seq_cap = o->seq_cap ? 2 * o->seq_cap : 8;
        o->seqs = xrealloc(o->seqs, o->seq_cap * sizeof *o->seqs);
    }
    o->seqs[o->nseq++] = (uint32_t)v;
    return 1;
}

static int add_algo(void *ctx, const char *text)
{
    options *o = ctx;
    clflash_algo a;
    if (strcmp(text, "flash") == 0)
        a = CLFLASH_ALGO_FLASH;
    else if (strcmp(text, "naive") == 0)
        a = CLFLASH_ALGO_NAIVE;
    else
        return 0;
    for (size_t i = 0; i < o->nalgo; i++)
        if (o->algos[i] == a)
            return 0; /* named twice */
    o->algos[o->nalgo++] = a;
    return 1;
}

/* Returns -1 to go on, or an exit status (0 after --help/--version, 2 on a usage error). */
static int parse_args(int argc, char **argv, options *o)
{
    static const char *const flags[] = {"--causal", "--csv", "--json", "--no-check", NULL};
    static const char *const valued[] = {"--algo",   "--seq",    "--head-dim", "--dtype",
                                         "--batch",  "--heads",  "--device",   "--warmup",
                                         "--min-time", "--block", NULL};
    for (int i = 1; i < argc; i++) {
        const char *val, *name;
        uint64_t v;

        int rc = tool_next_option(argc, argv, &i, flags, valued, print_help, &name, &val);
        if (rc >= 0)
            return rc;
        if (strcmp(name, "--causal") == 0) {
            o->causal = 1;
        } else if (strcmp(name, "--csv") == 0) {
            o->csv = 1;
        } else if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--no-check") == 0) {
            o->no_check = 1;
        } else if (strcmp(name, "--algo") == 0) {
            if (!each_item(val, add_algo, o))
                return usage_error("--algo wants flash, naive or flash,naive (each at most once), "
                                   "not '%s'", val);
        } else if (strcmp(name, "--seq") == 0) {
            if (!each_item(val, add_seq, o))
                return usage_error("--seq wants comma-separated whole numbers from 1 to %" PRIu32
                                   ", not '%s'", UINT32_MAX, val);
        } else if (strcmp(name, "--head-dim") == 0) {
            if (!parse_uint(val, 1, CLFLASH_MAX_HEAD_DIM, &v))
                return usage_error("--head-dim wants a whole number from 1 to %u, not '%s'",
                                   CLFLASH_MAX_HEAD_DIM, val);
            o->head_dim = (uint32_t)v;
        } else if (strcmp(name, "--dtype") == 0) {
            if (strcmp(val, "f32") == 0)
                o->dtype = CLFLASH_F32;
            else if (strcmp(val, "f16") == 0)
                o->dtype = CLFLASH_F16;
            else if (strcmp(val, "bf16") == 0)
                o->dtype = CLFLASH_BF16;
            else
                return usage_error("--dtype wants f32, f16 or bf16, not '%s'", val);
        } else if (strcmp(name, "--batch") == 0) {
            if (!parse_uint(val, 1, UINT32_MAX, &v))
                return usage_error("--batch wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->batch = (uint32_t)v;
        } else if (strcmp(name, "--heads") == 0) {
            if (!parse_uint(val, 1, UINT32_MAX, &v))
                return usage_error("--heads wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->heads = (uint32_t)v;
        } else if (strcmp(name, "--device") == 0) {
            if (*val == '\0')
                return usage_error("--device wants \"P:D\" or part of a device or platform name");
            o->device = val;
        } else if (strcmp(name, "--warmup") == 0) {
            if (!parse_uint(val, 0, MAX_WARMUP, &v))
                return usage_error("--warmup wants a whole number from 0 to %u, not '%s'",
                                   MAX_WARMUP, val);
            o->warmup = (uint32_t)v;
        } else if (strcmp(name, "--min-time") == 0) {
            if (!parse_seconds(val, &o->min_time))
                return usage_error("--min-time wants seconds as a plain decimal number from 0 to "
                                   "%.0f, not '%s'", MAX_MIN_TIME, val);
        } else { /* --block */
            if (!parse_uint(val, 1, UINT32_MAX, &v))
                return usage_error("--block wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->block = (uint32_t)v;
            o->have_block = 1;
        }
    }
    if (o->csv && o->json)
        return usage_error("--csv and --json exclude each other");
    if (o->nalgo == 0) {
        o->algos[0] = CLFLASH_ALGO_FLASH;
        o->algos[1] = CLFLASH_ALGO_NAIVE;
        o->nalgo = 2;
    }
    if (o->nseq == 0) {
        char text[16];
        snprintf(text, sizeof text, "%u", DEFAULT_SEQ);
        if (!add_seq(o, text))
            return usage_error("internal error: bad default sequence length");
    }
    return -1;
}

/* ============================================================================================
 * The device's facts.
 * ========================================================================================== */

typedef struct {
    char *name, *vendor, *driver, *version;
    cl_uint compute_units;
    cl_ulong local_mem, max_alloc, global_mem;
} device_facts;

/* Reads every fact; on failure names the query in *what and returns its error. */
static cl_int read_facts(cl_device_id dev, device_facts *f, const char **what)
{
    cl_int err;
#define STRING_FACT(param, field)                                                                  \
    if ((err = cl_info_string(0, dev, param, &f->field)) != CL_SUCCESS) {                              \
        *what = "clGetDeviceInfo(" #param ")";                                                     \
        return err;                                                                                \
    }
#define SCALAR_FACT(param, field)                                                                  \
    if ((err = clGetDeviceInfo(dev, param, sizeof f->field, &f->field, NULL)) != CL_SUCCESS) {    \
        *what = "clGetDeviceInfo(" #param ")";                                                     \
        return err;                                                                                \
    }
    STRING_FACT(CL_DEVICE_NAME, name)
    STRING_FACT(CL_DEVICE_VENDOR, vendor)
    STRING_FACT(CL_DRIVER_VERSION, driver)
    STRING_FACT(CL_DEVICE_VERSION, version)
    SCALAR_FACT(CL_DEVICE_MAX_COMPUTE_UNITS, compute_units)
    SCALAR_FACT(CL_DEVICE_LOCAL_MEM_SIZE, local_mem)
    SCALAR_FACT(CL_DEVICE_MAX_MEM_ALLOC_SIZE, max_alloc)
    SCALAR_FACT(CL_DEVICE_GLOBAL_MEM_SIZE, global_mem)
#undef STRING_FACT
#undef SCALAR_FACT
    return CL_SUCCESS;
}

static void free_facts(device_facts *f)
{
    free(f->name);
    free(f->vendor);
    free(f->driver);
    free(f->version);
}

/* ============================================================================================
 * Measuring.
 * ========================================================================================== */

typedef clflash_status (*forward_fn)(clflash_context *, const clflash_attention_desc *,
                                     cl_command_queue, cl_mem, cl_mem, cl_mem, cl_mem, cl_mem,
                                     cl_uint, const cl_event *, cl_event *);

/* One row of the report: one algorithm at one sequence length. */
typedef struct {
    clflash_algo algo;
    uint32_t seq;
    clflash_status status; /* CLFLASH_SUCCESS, or why the row failed */
    char *detail;          /* the failure in one sentence; NULL when ok */
    int expected;          /* a naive run that failed for lack of memory */
    unsigned runs;
    double ms_median, ms_min, ms_max, tflops, gbps;
    uint64_t modeled_bytes; /* 0 when the model has no answer */
    uint64_t io_bytes, score_matrix_bytes;
    int have_temp;
    uint64_t temp_bytes;
    int have_plan; /* flash rows whose plan succeeded */
    clflash_plan plan;
    int checked; /* flash rows: max_abs_diff holds the comparison with naive */
    double max_abs_diff;
    char *check_error; /* flash rows: why the comparison has no number */
} result;

typedef struct {
    cl_mem q, k, v, o;
    size_t bytes; /* of each */
    size_t count; /* elements of each */
} tensors;

typedef struct {
    const options *opt;
    clflash_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    device_facts facts;
    result *results; /* nseq * nalgo, sequence-major */
    size_t nresults, done;
    double times[MAX_RUNS];
    int failed; /* something other than an expected naive failure went wrong */
} bench;

static void set_failure(result *r, clflash_status st, const char *detail)
{
    r->status = st;
    free(r->detail);
    r->detail = xstrdup(detail && *detail ? detail : "");
}

/* Naive attention running out of memory is one of the outcomes the tool exists to show. */
static int is_capacity_failure(clflash_status st)
{
    return st == CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE || st == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
           st == CL_OUT_OF_RESOURCES || st == CL_OUT_OF_HOST_MEMORY || st == CL_INVALID_BUFFER_SIZE ||
           st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
}

static void describe_desc(const options *o, uint32_t n, clflash_attention_desc *d)
{
    memset(d, 0, sizeof *d); /* contiguous layouts, scale 1/sqrt(d), heads_kv = heads */
    d->batch = o->batch;
    d->heads_q = o->heads;
    d->seq_q = d->seq_k = n;
    d->head_dim = o->head_dim;
    d->dtype = o->dtype;
    d->flags = o->causal ? CLFLASH_CAUSAL : 0u;
    d->block = o->have_block ? o->block : 0u;
}

static cl_int release_mem(cl_mem *m)
{
    cl_int err = CL_SUCCESS;
    if (*m)
        err = clReleaseMemObject(*m);
    *m = NULL;
    return err;
}

static void release_tensors(bench *bn, tensors *t)
{
    cl_mem *all[4] = {&t->q, &t->k, &t->v, &t->o};
    for (int i = 0; i < 4; i++) {
        cl_int err = release_mem(all[i]);
        if (err != CL_SUCCESS) {
            fprintf(stderr, PROG ": clReleaseMemObject failed with %d (%s)\n", (int)err,
                    clflash_status_string(err));
            bn->failed = 1;
        }
    }
}

/* Allocates Q, K, V, O and writes the inputs. On failure returns the status with *detail set and
 * leaves nothing allocated. */
static clflash_status make_tensors(bench *bn, const clflash_attention_desc *d, tensors *t,
                                   char **detail)
{
    static const char *const names[3] = {"Q", "K", "V"};
    cl_mem *in[3] = {&t->q, &t->k, &t->v};
    const size_t elem = clflash_dtype_size(d->dtype);
    int overflow = 0;
    uint64_t count = mul_checked(mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q,
                                             &overflow),
                                 d->head_dim, &overflow);
    uint64_t bytes = mul_checked(count, elem, &overflow);
    void *host;
    cl_int err = CL_SUCCESS;

    memset(t, 0, sizeof *t);
    if (overflow || bytes > SIZE_MAX) {
        *detail = xstrdup("one tensor's size does not fit this host's address space");
        return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (bytes > bn->facts.max_alloc) {
        *detail = xprintf("each of Q, K, V, O needs %" PRIu64 " bytes; the device's largest "
                          "allocation is %" PRIu64, bytes, (uint64_t)bn->facts.max_alloc);
        return CL_INVALID_BUFFER_SIZE;
    }
    t->count = (size_t)count;
    t->bytes = (size_t)bytes;
    host = malloc(t->bytes);
    if (host == NULL) {
        *detail = xprintf("allocating %" PRIu64 " bytes of host memory for the inputs failed", bytes);
        return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    }
    for (int i = 0; i < 3; i++) {
        /* a different stream per tensor, the same for every run of the tool */
        fill_random(host, t->count, d->dtype, UINT64_C(0x636C666C61736800) + (uint64_t)i);
        *in[i] = clCreateBuffer(bn->cl, CL_MEM_READ_ONLY, t->bytes, NULL, &err);
        if (err == CL_SUCCESS && *in[i] == NULL)
            err = CL_INVALID_MEM_OBJECT;
        if (err != CL_SUCCESS) {
            *detail = xprintf("clCreateBuffer for %s (%" PRIu64 " bytes) failed", names[i], bytes);
            break;
        }
        err = clEnqueueWriteBuffer(bn->queue, *in[i], CL_TRUE, 0, t->bytes, host, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            *detail = xprintf("writing %s (%" PRIu64 " bytes) to the device failed", names[i], bytes);
            break;
        }
    }
    free(host);
    if (err == CL_SUCCESS) {
        t->o = clCreateBuffer(bn->cl, CL_MEM_READ_WRITE, t->bytes, NULL, &err);
        if (err == CL_SUCCESS && t->o == NULL)
            err = CL_INVALID_MEM_OBJECT;
        if (err != CL_SUCCESS)
            *detail = xprintf("clCreateBuffer for O (%" PRIu64 " bytes) failed", bytes);
    }
    if (err != CL_SUCCESS) {
        release_tensors(bn, t);
        return err;
    }
    return CLFLASH_SUCCESS;
}

/* One call to completion; *seconds gets its wall time from the enqueue to clFinish. */
static int run_once(bench *bn, forward_fn fn, const clflash_attention_desc *d, const tensors *t,
                    result *r, double *seconds)
{
    double t0 = now_seconds(), t1;
    clflash_status st = fn(bn->ctx, d, NULL, t->q, t->k, t->v, t->o, NULL, 0, NULL, NULL);
    cl_int err;
    if (st != CLFLASH_SUCCESS) {
        set_failure(r, st, clflash_last_error_detail());
        return 0;
    }
    err = clFinish(bn->queue);
    t1 = now_seconds();
    if (err != CL_SUCCESS) {
        char *msg = xprintf("clFinish after clflash_forward%s failed",
                            r->algo == CLFLASH_ALGO_NAIVE ? "_naive" : "");
        set_failure(r, err, msg);
        free(msg);
        return 0;
    }
    if (seconds)
        *seconds = t1 - t0;
    return 1;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Warm-up, then timed runs until min_time has passed (MIN_RUNS .. MAX_RUNS of them). */
static void time_algo(bench *bn, const clflash_attention_desc *d, const tensors *t, result *r)
{
    const options *o = bn->opt;
    forward_fn fn = r->algo == CLFLASH_ALGO_FLASH ? clflash_forward : clflash_forward_naive;
    unsigned n = 0;
    double start, flops;

    for (uint32_t w = 0; w < o->warmup; w++)
        if (!run_once(bn, fn, d, t, r, NULL))
            return;
    start = now_seconds();
    while (n < MIN_RUNS || (n < MAX_RUNS && now_seconds() - start < o->min_time)) {
        if (!run_once(bn, fn, d, t, r, &bn->times[n]))
            return;
        n++;
    }
    qsort(bn->times, n, sizeof bn->times[0], compare_double);
    r->runs = n;
    r->ms_min = bn->times[0] * 1e3;
    r->ms_max = bn->times[n - 1] * 1e3;
    r->ms_median = (n % 2 ? bn->times[n / 2] : 0.5 * (bn->times[n / 2 - 1] + bn->times[n / 2])) * 1e3;
    flops = 4.0 * d->batch * d->heads_q * (double)d->seq_q * (double)d->seq_k * d->head_dim;
    if (o->causal)
        flops *= 0.5;
    if (r->ms_median > 0.0) {
        r->tflops = flops / (r->ms_median * 1e-3) / 1e12;
        if (r->modeled_bytes)
            r->gbps = (double)r->modeled_bytes / (r->ms_median * 1e-3) / 1e9;
    }
}

/* Runs both algorithms once on the same inputs and compares their outputs; the answer goes on the
 * flash row. O is filled with NaN bit patterns first, so an output that was not written shows. */
static void check_shape(bench *bn, const clflash_attention_desc *d, const tensors *t, result *flash_row)
{
    static const forward_fn fns[2] = {clflash_forward, clflash_forward_naive};
    static const char *const names[2] = {"flash", "naive"};
    const cl_uchar nan_byte = 0xFF; /* all-ones is a NaN in f32 and f16 alike */
    void *out[2] = {NULL, NULL};
    size_t nonfinite[2] = {0, 0};
    double worst = 0.0;

    for (int a = 0; a < 2; a++) {
        clflash_status st;
        cl_int err;
        out[a] = malloc(t->bytes);
        if (out[a] == NULL) {
            flash_row->check_error = xprintf("allocating %zu bytes of host memory for %s's output "
                                             "failed", t->bytes, names[a]);
            goto done;
        }
        err = clEnqueueFillBuffer(bn->queue, t->o, &nan_byte, 1, 0, t->bytes, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            flash_row->check_error = xprintf("clEnqueueFillBuffer on O failed with %d (%s)",
                                             (int)err, clflash_status_string(err));
            goto done;
        }
        st = fns[a](bn->ctx, d, NULL, t->q, t->k, t->v, t->o, NULL, 0, NULL, NULL);
        if (st != CLFLASH_SUCCESS) {
            flash_row->check_error = xprintf("%s failed: %s (%d): %s", names[a],
                                             clflash_status_string(st), (int)st,
                                             clflash_last_error_detail());
            goto done;
        }
        err = clEnqueueReadBuffer(bn->queue, t->o, CL_TRUE, 0, t->bytes, out[a], 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clFinish(bn->queue);
        if (err != CL_SUCCESS) {
            flash_row->check_error = xprintf("reading %s's output failed with %d (%s)", names[a],
                                             (int)err, clflash_status_string(err));
            goto done;
        }
    }
    for (size_t i = 0; i < t->count; i++) {
        double f = element_value(out[0], i, d->dtype), g = element_value(out[1], i, d->dtype);
        nonfinite[0] += !isfinite(f);
        nonfinite[1] += !isfinite(g);
        if (isfinite(f) && isfinite(g) && fabs(f - g) > worst)
            worst = fabs(f - g);
    }
    if (nonfinite[0] || nonfinite[1]) {
        flash_row->check_error = xprintf("non-finite outputs (NaN, infinity or never written): "
                                         "flash %zu, naive %zu of %zu",
                                         nonfinite[0], nonfinite[1], t->count);
    } else {
        flash_row->checked = 1;
        flash_row->max_abs_diff = worst;
    }
done:
    if (flash_row->check_error)
        bn->failed = 1;
    free(out[0]);
    free(out[1]);
}

static void progress_start(bench *bn, const result *r)
{
    fprintf(stderr, "[%zu/%zu] %s n=%" PRIu32 " ... ", bn->done + 1, bn->nresults,
            algo_name(r->algo), r->seq);
    fflush(stderr);
}

static void progress_end(bench *bn, const result *r)
{
    char ms[32];
    bn->done++;
    if (r->status == CLFLASH_SUCCESS) {
        format_ms(r->ms_median, ms, sizeof ms);
        fprintf(stderr, "%s ms median of %u runs\n", ms, r->runs);
    } else {
        fprintf(stderr, "failed: %s\n", clflash_status_string(r->status));
    }
}

/* Everything for one sequence length: plan, tensors, each algorithm, the comparison. */
static void bench_seq(bench *bn, size_t si)
{
    const options *o = bn->opt;
    const uint32_t n = o->seqs[si];
    result *rows = bn->results + si * o->nalgo;
    result *flash = NULL, *naive = NULL;
    clflash_attention_desc d;
    clflash_plan plan;
    clflash_status plan_st, st;
    char *plan_detail = NULL, *tensor_detail = NULL;
    tensors t;
    uint64_t score, io;
    int overflow = 0;

    describe_desc(o, n, &d);
    memset(&plan, 0, sizeof plan);
    plan_st = clflash_plan_attention(bn->ctx, &d, &plan);
    if (plan_st != CLFLASH_SUCCESS)
        plan_detail = xstrdup(clflash_last_error_detail());
    score = plan_st == CLFLASH_SUCCESS
                ? plan.score_matrix_bytes
                : clflash_score_matrix_bytes(n, n, clflash_dtype_size(o->dtype));
    io = mul_checked(4, mul_checked(mul_checked(mul_checked(o->batch, o->heads, &overflow), n, &overflow),
                                    mul_checked(o->head_dim, clflash_dtype_size(o->dtype), &overflow),
                                    &overflow),
                     &overflow);

    for (size_t a = 0; a < o->nalgo; a++) {
        result *r = &rows[a];
        r->algo = o->algos[a];
        r->seq = n;
        r->io_bytes = overflow ? UINT64_MAX : io;
        r->score_matrix_bytes = score;
        if (r->algo == CLFLASH_ALGO_FLASH) {
            flash = r;
            r->have_temp = 1;
            r->temp_bytes = 0;
            if (plan_st == CLFLASH_SUCCESS) {
                r->have_plan = 1;
                r->plan = plan;
                r->modeled_bytes = clflash_traffic_bytes(&d, CLFLASH_ALGO_FLASH, plan.block);
            }
        } else {
            naive = r;
            r->temp_bytes = clflash_naive_workspace_bytes(bn->ctx, &d);
            r->have_temp = r->temp_bytes != 0;
            r->modeled_bytes = clflash_traffic_bytes(&d, CLFLASH_ALGO_NAIVE,
                                                     plan_st == CLFLASH_SUCCESS ? plan.block : 0u);
        }
        if (r->modeled_bytes == UINT64_MAX)
            r->modeled_bytes = 0;
    }

    st = make_tensors(bn, &d, &t, &tensor_detail);
    for (size_t a = 0; a < o->nalgo; a++) {
        result *r = &rows[a];
        progress_start(bn, r);
        if (st != CLFLASH_SUCCESS)
            set_failure(r, st, tensor_detail);
        else if (r->algo == CLFLASH_ALGO_FLASH && plan_st != CLFLASH_SUCCESS)
            set_failure(r, plan_st, plan_detail);
        else
            time_algo(bn, &d, &t, r);
        if (r->status != CLFLASH_SUCCESS) {
            r->expected = r->algo == CLFLASH_ALGO_NAIVE && is_capacity_failure(r->status);
            if (!r->expected)
                bn->failed = 1;
        }
        progress_end(bn, r);
    }
    if (st == CLFLASH_SUCCESS && flash && naive && !o->no_check && flash->status == CLFLASH_SUCCESS &&
        naive->status == CLFLASH_SUCCESS) {
        fprintf(stderr, "[check] n=%" PRIu32 ": flash against naive ... ", n);
        fflush(stderr);
        check_shape(bn, &d, &t, flash);
        if (flash->checked)
            fprintf(stderr, "largest |difference| %.2g\n", flash->max_abs_diff);
        else
            fprintf(stderr, "failed: %s\n", flash->check_error);
    }
    if (st == CLFLASH_SUCCESS)
        release_tensors(bn, &t);
    free(plan_detail);
    free(tensor_detail);
}

/* ============================================================================================
 * Human output.
 * ========================================================================================== */

#define NCOLS 14
#define CELL 48

static void print_plan(const clflash_plan *p)
{
    char buf[64], tile[64];
    printf("  block (B)          %" PRIu32 "\n", p->block);
    printf("  threads per row    %" PRIu32 "\n", p->threads_per_row);
    printf("  work-group size    %" PRIu32 "\n", p->work_group_size);
    format_unit(p->tile_bytes, buf, sizeof buf);
    printf("  tile bytes         %" PRIu64 " (%s)\n", p->tile_bytes, buf);
    format_unit(p->kernel_local_bytes, buf, sizeof buf);
    printf("  kernel local bytes %" PRIu64 " (%s)\n", p->kernel_local_bytes, buf);
    format_unit(p->local_mem_budget, buf, sizeof buf);
    printf("  local mem budget   %" PRIu64 " (%s)\n", p->local_mem_budget, buf);
    printf("  kernel             %s\n", p->kernel ? p->kernel : "(none)");
    printf("  tiles_q            %" PRIu64 "\n", p->tiles_q);
    printf("  kv_passes          %" PRIu64 "\n", p->kv_passes);
    format_unit(p->score_matrix_bytes, buf, sizeof buf);
    format_unit(p->tile_bytes, tile, sizeof tile);
    printf("  score matrix/head  %s (what naive writes per head) vs one %s tile\n", buf, tile);
}

static void print_header(const bench *bn)
{
    const options *o = bn->opt;
    const device_facts *f = &bn->facts;
    char buf[64];
    clflash_attention_desc d;
    clflash_plan plan;
    clflash_status st;

    printf("clflash-bench (clflash %s): flash vs naive attention\n\n", clflash_version_string());
    printf("Device\n");
    printf("  name               %s\n", f->name);
    printf("  vendor             %s\n", f->vendor);
    printf("  driver             %s\n", f->driver);
    printf("  version            %s\n", f->version);
    printf("  compute units      %u\n", (unsigned)f->compute_units);
    format_unit(f->local_mem, buf, sizeof buf);
    printf("  local memory       %s\n", buf);
    format_unit(f->max_alloc, buf, sizeof buf);
    printf("  max alloc          %s\n", buf);
    format_unit(f->global_mem, buf, sizeof buf);
    printf("  global memory      %s\n", buf);

    describe_desc(o, o->seqs[0], &d);
    memset(&plan, 0, sizeof plan);
    printf("\nPlan for batch %" PRIu32 ", heads %" PRIu32 ", n %" PRIu32 ", head_dim %" PRIu32
           ", %s%s%s\n",
           o->batch, o->heads, o->seqs[0], o->head_dim, dtype_name(o->dtype),
           o->causal ? ", causal" : "", o->have_block ? ", --block forced" : "");
    st = clflash_plan_attention(bn->ctx, &d, &plan);
    if (st == CLFLASH_SUCCESS)
        print_plan(&plan);
    else
        printf("  failed: %s (%d): %s\n", clflash_status_string(st), (int)st,
               clflash_last_error_detail());
    printf("\nTiming: %u warm-up run%s, then timed runs for at least %g s (%u to %u runs); "
           "each is wall clock from enqueue to clFinish\n\n",
           (unsigned)o->warmup, o->warmup == 1 ? "" : "s", o->min_time, MIN_RUNS, MAX_RUNS);
    fflush(stdout);
}

static void print_table(const bench *bn)
{
    static const char *const headers[NCOLS] = {
        "algo", "n", "median ms", "min ms", "max ms", "runs", "TFLOP/s", "modeled traffic",
        "GB/s", "B", "scratch", "scores/head", "max |diff|", "status"};
    static const int right[NCOLS] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    char(*cells)[NCOLS][CELL] = xmalloc(bn->nresults * sizeof *cells);
    size_t width[NCOLS];
    size_t nfail = 0;

    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        char *c[NCOLS];
        for (int k = 0; k < NCOLS; k++) {
            c[k] = cells[i][k];
            strcpy(c[k], "-");
        }
        snprintf(c[0], CELL, "%s", algo_name(r->algo));
        snprintf(c[1], CELL, "%" PRIu32, r->seq);
        if (r->status == CLFLASH_SUCCESS) {
            format_ms(r->ms_median, c[2], CELL);
            format_ms(r->ms_min, c[3], CELL);
            format_ms(r->ms_max, c[4], CELL);
            snprintf(c[5], CELL, "%u", r->runs);
            snprintf(c[6], CELL, "%.4g", r->tflops);
            if (r->modeled_bytes)
                snprintf(c[8], CELL, "%.4g", r->gbps);
            strcpy(c[13], "ok");
        } else {
            nfail++;
            snprintf(c[13], CELL, "failed (%zu)", nfail);
        }
        if (r->modeled_bytes)
            format_unit(r->modeled_bytes, c[7], CELL);
        if (r->have_plan)
            snprintf(c[9], CELL, "%" PRIu32, r->plan.block);
        if (r->have_temp)
            format_unit(r->temp_bytes, c[10], CELL);
        if (r->score_matrix_bytes != UINT64_MAX)
            format_unit(r->score_matrix_bytes, c[11], CELL);
        if (r->checked)
            snprintf(c[12], CELL, "%.2g", r->max_abs_diff);
        else if (r->check_error)
            strcpy(c[12], "see below");
    }

    for (int k = 0; k < NCOLS; k++) {
        width[k] = strlen(headers[k]);
        for (size_t i = 0; i < bn->nresults; i++)
            if (strlen(cells[i][k]) > width[k])
                width[k] = strlen(cells[i][k]);
    }
    for (int k = 0; k < NCOLS; k++) {
        fputs(k ? "  " : "", stdout);
        print_padded(stdout, headers[k], k == NCOLS - 1 ? 0 : width[k], right[k]);
    }
    putchar('\n');
    for (size_t i = 0; i < bn->nresults; i++) {
        for (int k = 0; k < NCOLS; k++) {
            fputs(k ? "  " : "", stdout);
            print_padded(stdout, cells[i][k], k == NCOLS - 1 ? 0 : width[k], right[k]);
        }
        putchar('\n');
    }
    free(cells);

    nfail = 0;
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        if (r->status != CLFLASH_SUCCESS) {
            nfail++;
            printf("(%zu) %s n=%" PRIu32 ": %s (%d)%s%s\n", nfail, algo_name(r->algo), r->seq,
                   clflash_status_string(r->status), (int)r->status,
                   r->detail && *r->detail ? ": " : "", r->detail ? r->detail : "");
        }
        if (r->check_error)
            printf("check n=%" PRIu32 ": %s\n", r->seq, r->check_error);
    }
    printf("\nmodeled traffic: global-memory bytes each algorithm must move (clflash_traffic_bytes);"
           " scratch: device memory the call allocates besides Q, K, V and O.\n");
}

/* "n=4096: flash 123.4 ms, naive 234.5 ms -> flash is 1.90x faster; memory: ..." */
static void print_summary(const bench *bn)
{
    const options *o = bn->opt;
    printf("\nSummary\n");
    for (size_t si = 0; si < o->nseq; si++) {
        const result *flash = NULL, *naive = NULL;
        char ms[32], io[32], per_head[32], temp[32];
        for (size_t a = 0; a < o->nalgo; a++) {
            const result *r = &bn->results[si * o->nalgo + a];
            if (r->algo == CLFLASH_ALGO_FLASH)
                flash = r;
            else
                naive = r;
        }
        printf("n=%" PRIu32 ":", o->seqs[si]);
        for (int k = 0; k < 2; k++) {
            const result *r = k == 0 ? flash : naive;
            if (r == NULL)
                continue;
            if (r->status == CLFLASH_SUCCESS) {
                format_ms(r->ms_median, ms, sizeof ms);
                printf("%s %s %s ms", k == 1 && flash ? "," : "", algo_name(r->algo), ms);
            } else {
                printf("%s %s failed (%s)", k == 1 && flash ? "," : "", algo_name(r->algo),
                       clflash_status_string(r->status));
            }
        }
        if (flash && naive && flash->status == CLFLASH_SUCCESS && naive->status == CLFLASH_SUCCESS &&
            flash->ms_median > 0.0) {
            double ratio = naive->ms_median / flash->ms_median;
            if (ratio >= 1.0)
                printf(" -> flash is %.2fx faster", ratio);
            else
                printf(" -> flash is %.2fx slower", 1.0 / ratio);
        }
        /* memory: the same for both rows of this n */
        {
            const result *r = flash ? flash : naive;
            int have_io = r->io_bytes != UINT64_MAX, have_score = r->score_matrix_bytes != UINT64_MAX;
            format_unit(r->io_bytes, io, sizeof io);
            format_unit(r->score_matrix_bytes, per_head, sizeof per_head);
            printf("; memory: ");
            if (naive && naive->have_temp && have_score) {
                format_unit(naive->temp_bytes, temp, sizeof temp);
                printf("naive %s %s of scores (%s per head)", naive->status == CLFLASH_SUCCESS
                       ? "needs" : "would need", temp, per_head);
            } else if (have_score) {
                printf("naive would need %s of scores per head", per_head);
                if (naive && naive->status == CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE) {
                    format_unit(bn->facts.max_alloc, temp, sizeof temp);
                    printf(" (more than the device's %s max allocation)", temp);
                }
            } else {
                printf("naive's score matrix does not fit 64 bits");
            }
            if (have_io)
                printf(" on top of the %s of Q/K/V/O", io);
            printf(", flash %s", flash ? "none" : "would need none");
        }
        if (flash && naive) {
            if (flash->checked)
                printf("; largest |flash - naive| = %.2g", flash->max_abs_diff);
            else if (flash->check_error)
                printf("; check failed: %s", flash->check_error);
            else if (o->no_check)
                printf("; not compared (--no-check)");
            else
                printf("; not compared");
        }
        printf("\n");
    }
}

/* ============================================================================================
 * JSON and CSV output.
 * ========================================================================================== */

static void print_json(const bench *bn, const char *date)
{
    const options *o = bn->opt;
    const device_facts *f = &bn->facts;
    json_writer j;
    memset(&j, 0, sizeof j);
    j.f = stdout;

    json_open(&j, NULL, '{');
    json_str(&j, "clflash_version", clflash_version_string());
    json_str(&j, "date", date);
    json_open(&j, "device", '{');
    json_str(&j, "name", f->name);
    json_str(&j, "vendor", f->vendor);
    json_str(&j, "driver", f->driver);
    json_str(&j, "version", f->version);
    json_u64(&j, "compute_units", f->compute_units);
    json_u64(&j, "local_mem_bytes", f->local_mem);
    json_u64(&j, "max_alloc_bytes", f->max_alloc);
    json_u64(&j, "global_mem_bytes", f->global_mem);
    json_close(&j, '}');
    json_open(&j, "config", '{');
    json_u64(&j, "warmup", o->warmup);
    json_num(&j, "min_time_s", 1, o->min_time);
    json_u64(&j, "min_runs", MIN_RUNS);
    json_u64(&j, "max_runs", MAX_RUNS);
    json_bool(&j, "check", !o->no_check);
    json_opt_u64(&j, "forced_block", o->have_block, o->block);
    json_str(&j, "device_request", o->device);
    json_str(&j, "timing", "wall clock from enqueue to clFinish, one call per run");
    json_close(&j, '}');
    json_open(&j, "results", '[');
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        const int ok = r->status == CLFLASH_SUCCESS;
        json_open(&j, NULL, '{');
        json_str(&j, "algo", algo_name(r->algo));
        json_u64(&j, "seq", r->seq);
        json_u64(&j, "head_dim", o->head_dim);
        json_str(&j, "dtype", dtype_name(o->dtype));
        json_u64(&j, "batch", o->batch);
        json_u64(&j, "heads", o->heads);
        json_bool(&j, "causal", o->causal);
        json_num(&j, "ms_median", ok, r->ms_median);
        json_num(&j, "ms_min", ok, r->ms_min);
        json_num(&j, "ms_max", ok, r->ms_max);
        json_opt_u64(&j, "runs", ok, r->runs);
        json_num(&j, "tflops", ok, r->tflops);
        json_opt_u64(&j, "modeled_bytes", r->modeled_bytes != 0, r->modeled_bytes);
        json_num(&j, "gbps", ok && r->modeled_bytes != 0, r->gbps);
        json_opt_u64(&j, "temp_bytes", r->have_temp, r->temp_bytes);
        json_opt_u64(&j, "io_bytes", r->io_bytes != UINT64_MAX, r->io_bytes);
        json_opt_u64(&j, "score_matrix_bytes", r->score_matrix_bytes != UINT64_MAX, r->score_matrix_bytes);
        json_opt_u64(&j, "block", r->have_plan, r->plan.block);
        json_num(&j, "max_abs_diff", r->checked, r->max_abs_diff);
        json_str(&j, "status", ok ? "ok" : clflash_status_string(r->status));
        json_i64(&j, "status_code", r->status);
        json_str(&j, "error_detail", ok ? NULL : r->detail);
        json_bool(&j, "expected_failure", r->expected);
        json_str(&j, "check_error", r->check_error);
        json_str(&j, "kernel", r->have_plan ? r->plan.kernel : NULL);
        json_opt_u64(&j, "threads_per_row", r->have_plan, r->plan.threads_per_row);
        json_opt_u64(&j, "work_group_size", r->have_plan, r->plan.work_group_size);
        json_opt_u64(&j, "tile_bytes", r->have_plan, r->plan.tile_bytes);
        json_opt_u64(&j, "kernel_local_bytes", r->have_plan, r->plan.kernel_local_bytes);
        json_opt_u64(&j, "tiles_q", r->have_plan, r->plan.tiles_q);
        json_opt_u64(&j, "kv_passes", r->have_plan, r->plan.kv_passes);
        json_close(&j, '}');
    }
    json_close(&j, ']');
    json_close(&j, '}');
}

/* A CSV field, quoted when it holds a comma, quote or line break (RFC 4180). */
static void csv_field(const char *s, int last)
{
    if (strpbrk(s, ",\"\r\n")) {
        putchar('"');
        for (const char *p = s; *p; p++) {
            if (*p == '"')
                putchar('"');
            putchar(*p);
        }
        putchar('"');
    } else {
        fputs(s, stdout);
    }
    putchar(last ? '\n' : ',');
}

static void csv_u64(int have, uint64_t v)
{
    if (have)
        printf("%" PRIu64, v);
    putchar(',');
}

static void csv_num(int have, double v)
{
    char buf[40] = "";
    if (have && isfinite(v))
        format_exact(v, buf, sizeof buf);
    fputs(buf, stdout);
    putchar(',');
}

static void print_csv(const bench *bn)
{
    const options *o = bn->opt;
    printf("device,algo,seq,head_dim,dtype,batch,heads,causal,ms_median,ms_min,ms_max,runs,tflops,"
           "modeled_bytes,gbps,temp_bytes,io_bytes,score_matrix_bytes,block,max_abs_diff,status\n");
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        const int ok = r->status == CLFLASH_SUCCESS;
        csv_field(bn->facts.name, 0);
        csv_field(algo_name(r->algo), 0);
        printf("%" PRIu32 ",%" PRIu32 ",%s,%" PRIu32 ",%" PRIu32 ",%d,", r->seq, o->head_dim,
               dtype_name(o->dtype), o->batch, o->heads, o->causal);
        csv_num(ok, r->ms_median);
        csv_num(ok, r->ms_min);
        csv_num(ok, r->ms_max);
        csv_u64(ok, r->runs);
        csv_num(ok, r->tflops);
        csv_u64(r->modeled_bytes != 0, r->modeled_bytes);
        csv_num(ok && r->modeled_bytes != 0, r->gbps);
        csv_u64(r->have_temp, r->temp_bytes);
        csv_u64(r->io_bytes != UINT64_MAX, r->io_bytes);
        csv_u64(r->score_matrix_bytes != UINT64_MAX, r->score_matrix_bytes);
        csv_u64(r->have_plan, r->plan.block);
        csv_num(r->checked, r->max_abs_diff);
        csv_field(ok ? "ok" : clflash_status_string(r->status), 1);
    }
}

/* ============================================================================================
 * main
 * ========================================================================================== */

static int run(const options *o)
{
    bench bn;
    clflash_status st;
    const char *what = NULL;
    cl_int err;
    char date[32] = "unknown";
    time_t wall = time(NULL);
    struct tm *utc = wall == (time_t)-1 ? NULL : gmtime(&wall);

    if (utc == NULL || strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", utc) == 0)
        strcpy(date, "unknown");

    memset(&bn, 0, sizeof bn);
    bn.opt = o;
    if (clflash_version_number() != CLFLASH_VERSION_NUMBER)
        fprintf(stderr, PROG ": warning: built against clflash %d.%d.%d but running with %s\n",
                CLFLASH_VERSION_MAJOR, CLFLASH_VERSION_MINOR, CLFLASH_VERSION_PATCH,
                clflash_version_string());
    if (o->device && !set_env("CLFLASH_DEVICE", o->device)) {
        fprintf(stderr, PROG ": could not set CLFLASH_DEVICE for --device\n");
        return 1;
    }
    st = clflash_context_create_default(NULL, &bn.ctx);
    if (st != CLFLASH_SUCCESS) {
        fprintf(stderr, PROG ": cannot open an OpenCL device: %s (%d): %s\n",
                clflash_status_string(st), (int)st, clflash_last_error_detail());
        return 1;
    }
    bn.cl = clflash_context_cl(bn.ctx);
    bn.queue = clflash_context_queue(bn.ctx);
    err = read_facts(clflash_context_device(bn.ctx), &bn.facts, &what);
    if (err != CL_SUCCESS) {
        fprintf(stderr, PROG ": %s failed with %d (%s)\n", what, (int)err, clflash_status_string(err));
        free_facts(&bn.facts);
        clflash_context_free(bn.ctx);
        return 1;
    }

    bn.nresults = o->nseq * o->nalgo;
    bn.results = xmalloc(bn.nresults * sizeof *bn.results);
    memset(bn.results, 0, bn.nresults * sizeof *bn.results);

    if (!o->json && !o->csv)
        print_header(&bn);
    for (size_t si = 0; si < o->nseq; si++)
        bench_seq(&bn, si);

    if (o->json) {
        print_json(&bn, date);
    } else if (o->csv) {
        print_csv(&bn);
    } else {
        print_table(&bn);
        print_summary(&bn);
    }

    for (size_t i = 0; i < bn.nresults; i++) {
        free(bn.results[i].detail);
        free(bn.results[i].check_error);
    }
    free(bn.results);
    free_facts(&bn.facts);
    clflash_context_free(bn.ctx);
    return bn.failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc;

    tool_set_name(PROG);
    memset(&o, 0, sizeof o);
    o.head_dim = DEFAULT_HEAD_DIM;
    o.dtype = CLFLASH_F32;
    o.batch = 1;
    o.heads = DEFAULT_HEADS;
    o.warmup = DEFAULT_WARMUP;
    o.min_time = DEFAULT_MIN_TIME;

    rc = parse_args(argc, argv, &o);
    if (rc < 0)
        rc = run(&o);
    free(o.seqs);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs(PROG ": error writing to standard output\n", stderr);
        return rc == TOOL_EXIT_USAGE ? rc : 1;
    }
    return rc;
}
