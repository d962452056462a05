/*
 * clflash_bench.c - the `clflash-bench` tool: times clflash's flash attention against the naive
 * attention that materializes the score matrix, on the same device, inputs and shapes, and
 * optionally against materialized attention on the host's BLAS (bench_blas.c) and, with
 * --backward, the backward passes.
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

#include "bench_decode.h"
#include "bench_features.h"
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
#else
#include <sys/resource.h> /* getrusage: the peak resident set */
#define CLFLASH_BENCH_HAVE_RUSAGE 1
#endif

#ifdef CLFLASH_BENCH_BLAS
#include "bench_blas.h"
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

/* What the bench can time. flash and naive are clflash's own; blas is bench_blas.c's. */
typedef enum { ALGO_FLASH, ALGO_NAIVE, ALGO_BLAS } bench_algo;
#define NUM_ALGOS 3

static const char *algo_name(bench_algo a)
{
    return a == ALGO_FLASH ? "flash" : a == ALGO_NAIVE ? "naive" : "blas";
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
    bench_algo algos[NUM_ALGOS];
    size_t nalgo;
    int backward; /* --backward: time clflash_backward and clflash_backward_naive */
    uint32_t *seqs;
    size_t nseq, seq_cap;
    uint32_t head_dim, batch, heads, block;
    int have_block;
    clflash_dtype dtype;
    int causal, csv, json, no_check;
    const char *device;
    const char *build_options; /* --build-options: extra clBuildProgram options, NULL for none */
    uint32_t warmup;
    double min_time;
    double tolerance; /* --tolerance: the largest |difference| allowed, times max(1, max |value|); 0 = by dtype */
} options;

static void print_help(FILE *f)
{
    fputs("Usage: " PROG " [options]\n"
          "\n"
          "Times clflash's flash attention (clflash_forward: tiles in local memory, no score\n"
          "matrix) against naive attention (clflash_forward_naive: writes the n x n score matrix\n"
          "to device memory, softmaxes it, multiplies by V) on one OpenCL device and, with\n"
          "--algo blas, against attention on the host's BLAS, with seq_q = seq_k = n and\n"
          "contiguous [batch][heads][n][head_dim] tensors filled with deterministic\n"
          "pseudo-random values in [-1, 1].\n"
          "\n"
          "Each (n, algorithm) is run --warmup times untimed, then repeated until --min-time\n"
          "seconds have passed (at least 3, at most 1000 timed runs). One run is timed as wall\n"
          "clock from the enqueue to clFinish (blas: the call); the median is reported with the\n"
          "min and max.\n"
          "  TFLOP/s  = 4 * batch * heads * n * n * head_dim / median time (halved with --causal);\n"
          "             with --backward the backward counts 2.5 times that\n"
          "  GB/s     = modeled bytes / median time, where modeled bytes is\n"
          "             clflash_traffic_bytes(): the global-memory traffic each algorithm must move\n"
          "             (blas moves its scores as naive does; no model for the backward)\n"
          "  scratch  = memory the call allocates besides its inputs and outputs: none for flash,\n"
          "             the score matrices for naive (clflash_naive_workspace_bytes), one head's\n"
          "             fp32 score matrix for blas\n"
          "  peak RSS = the process's peak resident set after the row's runs (getrusage\n"
          "             ru_maxrss). It is a high-water mark of the whole process, so it is clean\n"
          "             only for the first algorithm: to compare, run one --algo per invocation.\n"
          "             It includes the kernel compiler's peak on a cold kernel cache and, on a\n"
          "             CPU device such as PoCL, the device buffers (they live in host memory)\n"
          "Then the outputs are compared on the same inputs: flash against naive, blas against\n"
          "flash (or naive), and the largest absolute difference is reported (skip with\n"
          "--no-check). A difference above the tolerance times max(1, the largest |value|) fails\n"
          "the row and the exit status: 1e-4 for f32, 1e-2 for f16, 6e-2 for bf16, or --tolerance.\n"
          "\n"
          "--algo blas: S = scale * Q K^T by cblas_sgemm per head, a row softmax in C, O = P V by\n"
          "cblas_sgemm; fp32 only, on the host, with the BLAS's own threads (OpenBLAS: all cores\n"
          "unless OPENBLAS_NUM_THREADS says otherwise). Built only when CMake found a BLAS with\n"
          "cblas.h.\n"
          "--backward: times clflash_backward (flash) and clflash_backward_naive (naive), each\n"
          "after the same algorithm's forward with lse, which is timed too: the table reports\n"
          "backward / forward time (the cost of the deterministic, atomic-free backward).\n"
          "\n",
          f);
    fputs("Options:\n"
          "  --algo A[,A...]    flash, naive, blas (default flash,naive)\n"
          "  --backward         time the backward pass (flash and naive) instead of the forward\n"
          "  --seq N[,N...]     sequence lengths n (default 4096); may be repeated\n"
          "  --head-dim D       head dimension, 1 to 256 (default 64)\n"
          "  --dtype T          storage type: f32, f16 or bf16 (default f32); the math is fp32\n"
          "  --batch B          batch size (default 1)\n"
          "  --heads H          heads (default 2)\n"
          "  --causal           causal masking\n"
          "  --device STR       the device: \"P:D\" (as clflash-query lists them) or a\n"
          "                     case-insensitive part of the platform's or device's name or vendor; sets\n"
          "                     CLFLASH_DEVICE. Default: CLFLASH_DEVICE, else the first GPU,\n"
          "                     else the first device\n"
          "  --warmup N         untimed runs before timing (default 2)\n"
          "  --min-time S       seconds of timed runs per measurement (default 1.0)\n"
          "  --block B          force the flash tile size B (the plan fails if B does not fit)\n"
          "  --build-options S  extra OpenCL build options for clflash's kernels\n"
          "                     (clflash_context_options.build_options), e.g. \"-D CLFLASH_CPU_PATH=0\"\n"
          "                     to time the GPU paths on a CPU (the register tiles; with the\n"
          "                     environment's CLFLASH_REGTILE=0 the lane-per-row path)\n"
          "  --csv              print CSV: a header row and one row per result\n"
          "  --json             print one JSON object: device, config, results, date, version\n"
          "  --no-check         do not compare the outputs\n"
          "  --tolerance T      the comparison's tolerance, above 0 and at most 1 (default by dtype)\n"
          "  --decode           decoding instead (few queries, a long KV cache; GB/s of K/V read):\n"
          "                     see clflash-bench --decode --help\n"
          "  --features         each score feature (causal, window, softcap, ALiBi, bias, key\n"
          "                     lengths) beside the plain call: see clflash-bench --features --help\n"
          "  --version          print the tool's and library's versions\n"
          "  -h, --help         print this help\n"
          "Options take their value as the next argument or after '='. Progress goes to stderr.\n"
          "\n"
          "A naive or blas run that fails for lack of memory (its score matrix exceeds the\n"
          "device's largest allocation, or an allocation fails) is reported as a failed row and\n"
          "the sweep goes on: showing where the materialized baselines stop fitting is part of\n"
          "the point.\n"
          "\n"
          "Exit status: 0 on success (naive or blas rows may have failed for lack of memory), 1 if\n"
          "the device cannot be opened or queried, or any other run or check failed, 2 on a usage\n"
          "error.\n"
          "\n"
          "Examples:\n"
          "  " PROG "\n"
          "  " PROG " --seq 1024,2048,4096,8192 --dtype f16 --head-dim 128 --json\n"
          "  " PROG " --algo flash,naive,blas --seq 4096 --head-dim 64 --dtype f32 --heads 2\n"
          "  " PROG " --algo flash --seq 8192 --csv        (peak RSS of flash alone)\n"
          "  " PROG " --backward --seq 1024,4096\n"
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
    bench_algo a;
    if (strcmp(text, "flash") == 0)
        a = ALGO_FLASH;
    else if (strcmp(text, "naive") == 0)
        a = ALGO_NAIVE;
    else if (strcmp(text, "blas") == 0)
        a = ALGO_BLAS;
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
    static const char *const flags[] = {"--causal", "--csv", "--json", "--no-check", "--backward", NULL};
    static const char *const valued[] = {"--algo",   "--seq",    "--head-dim", "--dtype",
                                         "--batch",  "--heads",  "--device",   "--warmup",
                                         "--min-time", "--block", "--build-options", "--tolerance", NULL};
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
        } else if (strcmp(name, "--backward") == 0) {
            o->backward = 1;
        } else if (strcmp(name, "--algo") == 0) {
            if (!each_item(val, add_algo, o))
                return usage_error("--algo wants a list of flash, naive and blas (each at most "
                                   "once), not '%s'", val);
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
        } else if (strcmp(name, "--build-options") == 0) {
            o->build_options = val;
        } else if (strcmp(name, "--tolerance") == 0) {
            char *end;
            o->tolerance = strtod(val, &end);
            if (*end != '\0' || !(o->tolerance > 0.0) || o->tolerance > 1.0)
                return usage_error("--tolerance wants a number above 0, at most 1, not '%s'", val);
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
        o->algos[0] = ALGO_FLASH;
        o->algos[1] = ALGO_NAIVE;
        o->nalgo = 2;
    }
    for (size_t i = 0; i < o->nalgo; i++) {
        if (o->algos[i] != ALGO_BLAS)
            continue;
#ifndef CLFLASH_BENCH_BLAS
        return usage_error("--algo blas was not built into this " PROG ": CMake found no BLAS with a "
                           "cblas.h when it was configured (on Debian: apt-get install libopenblas-dev, "
                           "then configure and build again)");
#endif
        if (o->backward)
            return usage_error("--algo blas has no backward; --backward times flash and naive");
        if (o->dtype != CLFLASH_F32)
            return usage_error("--algo blas is fp32 only; use --dtype f32");
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

/* One row of the report: one algorithm at one sequence length. */
typedef struct {
    bench_algo algo;
    uint32_t seq;
    clflash_status status; /* CLFLASH_SUCCESS, or why the row failed */
    char *detail;          /* the failure in one sentence; NULL when ok */
    int expected;          /* a naive or blas run that failed for lack of memory */
    unsigned runs;
    double ms_median, ms_min, ms_max, tflops, gbps;
    double fwd_ms_median;   /* --backward: the same algorithm's forward (with lse), for the ratio */
    int have_fwd;
    uint64_t modeled_bytes; /* 0 when the model has no answer */
    uint64_t io_bytes, score_matrix_bytes;
    int have_temp;
    uint64_t temp_bytes;
    uint64_t peak_rss; /* the process's high-water mark after this row's runs; 0 if unknown */
    int have_plan;     /* flash rows whose plan succeeded */
    clflash_plan plan;
    int checked;              /* max_abs_diff holds the comparison with compared_with */
    const char *compared_with; /* the algorithm this row's output was compared against */
    double max_abs_diff;
    char *check_error; /* why the comparison has no number */
} result;

typedef struct {
    cl_mem q, k, v, o;
    cl_mem d_o, lse, dq, dk, dv; /* --backward only */
    size_t bytes;                /* of each of q, k, v, o, d_o, dq, dk, dv */
    size_t count;                /* elements of each */
    size_t lse_bytes;
    float *hq, *hk, *hv, *ho; /* blas only: the same inputs on the host, and its output */
    float *scores;            /* blas only: its n x n score matrix */
    clflash_status scores_status; /* why scores is NULL when blas was asked for */
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
    int failed; /* something other than an expected capacity failure went wrong */
} bench;

static void set_failure(result *r, clflash_status st, const char *detail)
{
    r->status = st;
    free(r->detail);
    r->detail = xstrdup(detail && *detail ? detail : "");
}

/* A baseline running out of memory is one of the outcomes the tool exists to show. */
static int is_capacity_failure(clflash_status st)
{
    return st == CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE || st == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
           st == CL_OUT_OF_RESOURCES || st == CL_OUT_OF_HOST_MEMORY || st == CL_INVALID_BUFFER_SIZE ||
           st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
}

static int has_algo(const options *o, bench_algo a)
{
    for (size_t i = 0; i < o->nalgo; i++)
        if (o->algos[i] == a)
            return 1;
    return 0;
}

static void describe_desc(const options *o, uint32_t n, clflash_attention_desc *d)
{
    memset(d, 0, sizeof *d); /* contiguous layouts, scale 1/sqrt(d), heads_kv = heads */
    d->struct_size = sizeof *d;
    d->batch = o->batch;
    d->heads_q = o->heads;
    d->seq_q = d->seq_k = n;
    d->head_dim = o->head_dim;
    d->dtype = o->dtype;
    d->flags = o->causal ? CLFLASH_CAUSAL : 0u;
    d->block = o->have_block ? o->block : 0u;
}

/* Floating-point operations of one call: 4*b*h*n*n*d for the forward (two matrix products),
 * halved for causal; the backward counts 2.5 times that (five products against two). */
static double call_flops(const options *o, const clflash_attention_desc *d)
{
    double flops = 4.0 * d->batch * d->heads_q * (double)d->seq_q * (double)d->seq_k * d->head_dim;
    if (o->causal)
        flops *= 0.5;
    return o->backward ? 2.5 * flops : flops;
}

/* Bytes clflash_backward_naive allocates, by its documented rule: an fp32 P and dP matrix for as
 * many heads at a time as one allocation (and a quarter of the device's memory) allows, and fp32
 * accumulators for dQ, dK and dV. UINT64_MAX when it does not fit 64 bits. */
static uint64_t naive_backward_temp_bytes(const bench *bn, const clflash_attention_desc *d)
{
    int overflow = 0;
    const uint64_t per_head = clflash_score_matrix_bytes(d->seq_q, d->seq_k, sizeof(float));
    const uint64_t total = (uint64_t)d->batch * d->heads_q;
    uint64_t chunk, acc;
    if (per_head == UINT64_MAX || per_head == 0 || per_head > bn->facts.max_alloc)
        return UINT64_MAX;
    chunk = bn->facts.max_alloc / per_head;
    if (bn->facts.global_mem / 4 / per_head < chunk)
        chunk = bn->facts.global_mem / 4 / per_head;
    if (chunk > total)
        chunk = total;
    if (chunk > 65535)
        chunk = 65535;
    if (chunk == 0)
        chunk = 1;
    acc = mul_checked(3 * sizeof(float), mul_checked(mul_checked(total, d->seq_q, &overflow), d->head_dim,
                                                     &overflow), &overflow);
    return overflow ? UINT64_MAX : 2 * chunk * per_head + acc;
}

/* The process's peak resident set so far (getrusage's ru_maxrss), in bytes; 0 where unknown. */
static uint64_t peak_rss_bytes(void)
{
#ifdef CLFLASH_BENCH_HAVE_RUSAGE
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0)
        return (uint64_t)ru.ru_maxrss * 1024u; /* kilobytes on Linux and the BSDs */
#endif
    return 0;
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
    cl_mem *all[9] = {&t->q, &t->k, &t->v, &t->o, &t->d_o, &t->lse, &t->dq, &t->dk, &t->dv};
    for (int i = 0; i < 9; i++) {
        cl_int err = release_mem(all[i]);
        if (err != CL_SUCCESS) {
            fprintf(stderr, PROG ": clReleaseMemObject failed with %d (%s)\n", (int)err,
                    clflash_status_string(err));
            bn->failed = 1;
        }
    }
    free(t->hq);
    free(t->hk);
    free(t->hv);
    free(t->ho);
    free(t->scores);
    t->hq = t->hk = t->hv = t->ho = t->scores = NULL;
}

/* A device buffer of `bytes`, written from `host` when it is not NULL. */
static cl_int make_buffer(bench *bn, cl_mem_flags flags, size_t bytes, const void *host, cl_mem *out,
                          const char *name, char **detail)
{
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(bn->cl, flags, bytes, NULL, &err);
    if (err == CL_SUCCESS && *out == NULL)
        err = CL_INVALID_MEM_OBJECT;
    if (err != CL_SUCCESS) {
        *detail = xprintf("clCreateBuffer for %s (%zu bytes) failed", name, bytes);
        return err;
    }
    if (host && (err = clEnqueueWriteBuffer(bn->queue, *out, CL_TRUE, 0, bytes, host, 0, NULL, NULL)) !=
                    CL_SUCCESS)
        *detail = xprintf("writing %s (%zu bytes) to the device failed", name, bytes);
    return err;
}

/* Allocates the device tensors (Q, K, V, O; with --backward also dO, lse, dQ, dK, dV) and writes
 * the inputs; with blas keeps fp32 copies of Q, K, V on the host and allocates its output and score
 * matrix (a failure there only fails the blas row). On failure returns the status with *detail set
 * and leaves nothing allocated. */
static clflash_status make_tensors(bench *bn, const clflash_attention_desc *d, tensors *t,
                                   char **detail)
{
    static const char *const names[4] = {"Q", "K", "V", "dO"};
    const options *o = bn->opt;
    const int blas = has_algo(o, ALGO_BLAS);
    const size_t elem = clflash_dtype_size(d->dtype);
    int overflow = 0;
    uint64_t count = mul_checked(mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q,
                                             &overflow),
                                 d->head_dim, &overflow);
    uint64_t bytes = mul_checked(count, elem, &overflow);
    uint64_t rows = mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q, &overflow);
    void *host;
    cl_int err = CL_SUCCESS;

    memset(t, 0, sizeof *t);
    if (overflow || bytes > SIZE_MAX || rows > SIZE_MAX / sizeof(float)) {
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
    t->lse_bytes = (size_t)rows * sizeof(float);
    for (int i = 0; i < (o->backward ? 4 : 3) && err == CL_SUCCESS; i++) {
        cl_mem *dst = i == 0 ? &t->q : i == 1 ? &t->k : i == 2 ? &t->v : &t->d_o;
        host = malloc(t->bytes);
        if (host == NULL) {
            *detail = xprintf("allocating %" PRIu64 " bytes of host memory for the inputs failed", bytes);
            release_tensors(bn, t);
            return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        }
        /* a different stream per tensor, the same for every run of the tool */
        fill_random(host, t->count, d->dtype, UINT64_C(0x636C666C61736800) + (uint64_t)i);
        err = make_buffer(bn, CL_MEM_READ_ONLY, t->bytes, host, dst, names[i], detail);
        if (blas && i < 3 && err == CL_SUCCESS) /* blas is fp32 only: the host copy is its input */
            *(i == 0 ? &t->hq : i == 1 ? &t->hk : &t->hv) = host;
        else
            free(host);
    }
    if (err == CL_SUCCESS)
        err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->o, "O", detail);
    if (err == CL_SUCCESS && o->backward) {
        err = make_buffer(bn, CL_MEM_READ_WRITE, t->lse_bytes, NULL, &t->lse, "lse", detail);
        if (err == CL_SUCCESS)
            err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->dq, "dQ", detail);
        if (err == CL_SUCCESS)
            err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->dk, "dK", detail);
        if (err == CL_SUCCESS)
            err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->dv, "dV", detail);
    }
    if (err != CL_SUCCESS) {
        release_tensors(bn, t);
        return err;
    }
    if (blas) {
        uint64_t score_bytes = clflash_score_matrix_bytes(d->seq_q, d->seq_k, sizeof(float));
        t->scores_status = CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        t->ho = malloc(t->bytes);
        if (t->ho && score_bytes <= SIZE_MAX && (t->scores = malloc((size_t)score_bytes)) != NULL)
            t->scores_status = CLFLASH_SUCCESS;
    }
    return CLFLASH_SUCCESS;
}

/* The blas algorithm on the host copies of the inputs (bench_blas.c), into t->ho. */
static void bench_blas_run(const tensors *t, const clflash_attention_desc *d, int causal)
{
#ifdef CLFLASH_BENCH_BLAS
    bench_blas_attention(t->hq, t->hk, t->hv, t->ho, (size_t)d->batch * d->heads_q, d->seq_q, d->head_dim,
                         (float)(1.0 / sqrt((double)d->head_dim)), causal, t->scores);
#else
    (void)t;
    (void)d;
    (void)causal;
#endif
}

/* One call of `algo` (its backward when `backward`) to completion; *seconds gets its wall time
 * from the enqueue (or the BLAS call) to clFinish (or its return). */
static int run_once(bench *bn, bench_algo algo, int backward, const clflash_attention_desc *d,
                    const tensors *t, result *r, double *seconds)
{
    const options *o = bn->opt;
    double t0 = now_seconds(), t1;
    clflash_status st = CLFLASH_SUCCESS;
    cl_int err = CL_SUCCESS;
    const char *what;

    if (algo == ALGO_BLAS) {
        bench_blas_run(t, d, o->causal);
        what = NULL;
    } else if (backward) {
        st = (algo == ALGO_FLASH ? clflash_backward : clflash_backward_naive)(
            bn->ctx, d, NULL, t->q, t->k, t->v, t->o, t->d_o, t->lse, t->dq, t->dk, t->dv, 0, NULL, NULL);
        what = algo == ALGO_FLASH ? "clflash_backward" : "clflash_backward_naive";
    } else {
        st = (algo == ALGO_FLASH ? clflash_forward : clflash_forward_naive)(
            bn->ctx, d, NULL, t->q, t->k, t->v, t->o, t->lse, 0, NULL, NULL);
        what = algo == ALGO_FLASH ? "clflash_forward" : "clflash_forward_naive";
    }
    if (st != CLFLASH_SUCCESS) {
        set_failure(r, st, clflash_last_error_detail());
        return 0;
    }
    if (what)
        err = clFinish(bn->queue);
    t1 = now_seconds();
    if (err != CL_SUCCESS) {
        char *msg = xprintf("clFinish after %s failed", what);
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

/* Warm-up, then timed runs until min_time has passed (MIN_RUNS .. MAX_RUNS of them); the median,
 * min and max in milliseconds. 0 if a run failed (r says why). */
static int time_runs(bench *bn, bench_algo algo, int backward, const clflash_attention_desc *d,
                     const tensors *t, result *r, double *median, double *min, double *max, unsigned *runs)
{
    const options *o = bn->opt;
    unsigned n = 0;
    double start;

    for (uint32_t w = 0; w < o->warmup; w++)
        if (!run_once(bn, algo, backward, d, t, r, NULL))
            return 0;
    start = now_seconds();
    while (n < MIN_RUNS || (n < MAX_RUNS && now_seconds() - start < o->min_time)) {
        if (!run_once(bn, algo, backward, d, t, r, &bn->times[n]))
            return 0;
        n++;
    }
    qsort(bn->times, n, sizeof bn->times[0], compare_double);
    *runs = n;
    *min = bn->times[0] * 1e3;
    *max = bn->times[n - 1] * 1e3;
    *median = (n % 2 ? bn->times[n / 2] : 0.5 * (bn->times[n / 2 - 1] + bn->times[n / 2])) * 1e3;
    return 1;
}

/* Times one row: the forward, or with --backward the algorithm's forward (which also leaves the O
 * and lse its backward reads) and then its backward. */
static void time_algo(bench *bn, const clflash_attention_desc *d, const tensors *t, result *r)
{
    const options *o = bn->opt;
    double lo, hi;
    unsigned n;

    if (o->backward) {
        if (!time_runs(bn, r->algo, 0, d, t, r, &r->fwd_ms_median, &lo, &hi, &n))
            return;
        r->have_fwd = 1;
    }
    if (!time_runs(bn, r->algo, o->backward, d, t, r, &r->ms_median, &r->ms_min, &r->ms_max, &r->runs))
        return;
    r->peak_rss = peak_rss_bytes();
    if (r->ms_median > 0.0) {
        r->tflops = call_flops(o, d) / (r->ms_median * 1e-3) / 1e12;
        if (r->modeled_bytes)
            r->gbps = (double)r->modeled_bytes / (r->ms_median * 1e-3) / 1e9;
    }
}

/* ---- checking one algorithm's output against another's ---------------------------------------- */

/* Runs `algo` once more with its outputs first filled with NaN bit patterns (so an element that was
 * not written shows) and copies them to new host arrays: O, or dQ, dK, dV with --backward. Returns
 * NULL with *error set on failure. */
static void **read_outputs(bench *bn, bench_algo algo, const clflash_attention_desc *d, const tensors *t,
                           size_t *nout, char **error)
{
    const int backward = bn->opt->backward;
    const cl_mem bufs[3] = {backward ? t->dq : t->o, t->dk, t->dv};
    const cl_uchar nan_byte = 0xFF; /* all-ones is a NaN in f32, f16 and bf16 alike */
    void **out;
    clflash_status st;
    cl_int err = CL_SUCCESS;
    result scratch;

    *nout = backward ? 3 : 1;
    out = xmalloc(3 * sizeof *out);
    out[0] = out[1] = out[2] = NULL;
    if (algo == ALGO_BLAS) {
        bench_blas_run(t, d, bn->opt->causal);
        out[0] = xmalloc(t->bytes);
        memcpy(out[0], t->ho, t->bytes);
        return out;
    }
    for (size_t i = 0; i < *nout && err == CL_SUCCESS; i++)
        err = clEnqueueFillBuffer(bn->queue, bufs[i], &nan_byte, 1, 0, t->bytes, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        *error = xprintf("clEnqueueFillBuffer failed with %d (%s)", (int)err, clflash_status_string(err));
        goto fail;
    }
    memset(&scratch, 0, sizeof scratch);
    if (!run_once(bn, algo, backward, d, t, &scratch, NULL)) {
        st = scratch.status;
        *error = xprintf("%s failed: %s (%d): %s", algo_name(algo), clflash_status_string(st), (int)st,
                         scratch.detail ? scratch.detail : "");
        free(scratch.detail);
        goto fail;
    }
    for (size_t i = 0; i < *nout && err == CL_SUCCESS; i++) {
        out[i] = malloc(t->bytes);
        if (out[i] == NULL) {
            *error = xprintf("allocating %zu bytes of host memory for %s's output failed", t->bytes,
                             algo_name(algo));
            goto fail;
        }
        err = clEnqueueReadBuffer(bn->queue, bufs[i], CL_TRUE, 0, t->bytes, out[i], 0, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        *error = xprintf("reading %s's output failed with %d (%s)", algo_name(algo), (int)err,
                         clflash_status_string(err));
        goto fail;
    }
    return out;
fail:
    for (int i = 0; i < 3; i++)
        free(out[i]);
    free(out);
    return NULL;
}

static void free_outputs(void **out)
{
    if (out == NULL)
        return;
    for (int i = 0; i < 3; i++)
        free(out[i]);
    free(out);
}

/* The largest |a - b| over every output into r, or r->check_error when an output is not finite. */
/* The largest |difference| two algorithms' outputs may show, as a fraction of max(1, the largest
 * |value| of the output compared with): by the storage type, a few of its roundings beyond what the
 * two orders of summation give (fp32: flash and naive differ by about 1e-7 at n = 4096). */
static double default_tolerance(clflash_dtype t)
{
    return t == CLFLASH_F16 ? 1e-2 : t == CLFLASH_BF16 ? 6e-2 : 1e-4;
}

/* The largest |a - b| over every output into r; r->check_error when an output is not finite or
 * the difference is above the tolerance (--tolerance, else default_tolerance) times
 * max(1, max |b|). */
static void compare_outputs(void *const *a, void *const *b, size_t nout, const tensors *t,
                            const clflash_attention_desc *d, bench_algo with, double tolerance, result *r)
{
    size_t nonfinite[2] = {0, 0};
    double worst = 0.0, largest = 0.0;
    for (size_t k = 0; k < nout; k++)
        for (size_t i = 0; i < t->count; i++) {
            double f = element_value(a[k], i, d->dtype), g = element_value(b[k], i, d->dtype);
            nonfinite[0] += !isfinite(f);
            nonfinite[1] += !isfinite(g);
            if (isfinite(f) && isfinite(g) && fabs(f - g) > worst)
                worst = fabs(f - g);
            if (isfinite(g) && fabs(g) > largest)
                largest = fabs(g);
        }
    r->compared_with = algo_name(with);
    if (nonfinite[0] || nonfinite[1]) {
        r->check_error = xprintf("non-finite outputs (NaN, infinity or never written): %s %zu, %s %zu of %zu",
                                 algo_name(r->algo), nonfinite[0], algo_name(with), nonfinite[1],
                                 nout * t->count);
        return;
    }
    r->checked = 1;
    r->max_abs_diff = worst;
    const double tol = tolerance > 0.0 ? tolerance : default_tolerance(d->dtype);
    const double limit = tol * (largest > 1.0 ? largest : 1.0);
    if (!(worst <= limit))
        r->check_error = xprintf("mismatch: the largest |%s - %s| is %.3g, above the tolerance %.3g (%g of "
                                 "max(1, the largest |%s| value %.3g))",
                                 algo_name(r->algo), algo_name(with), worst, limit, tol, algo_name(with), largest);
}

/* Compares the algorithms of one sequence length on the same inputs: flash against naive (on the
 * flash row) and blas against flash, or against naive without flash (on the blas row). With
 * --backward, flash's forward first writes the O and lse both backwards then read, and the
 * comparison covers dQ, dK and dV. */
static void check_seq(bench *bn, const clflash_attention_desc *d, const tensors *t, result *rows)
{
    const options *o = bn->opt;
    void **out[NUM_ALGOS] = {NULL, NULL, NULL};
    result *row[NUM_ALGOS] = {NULL, NULL, NULL};
    size_t nout = 1;

    for (size_t a = 0; a < o->nalgo; a++)
        if (rows[a].status == CLFLASH_SUCCESS)
            row[rows[a].algo] = &rows[a];
    if (o->backward && row[ALGO_FLASH]) {
        result scratch;
        memset(&scratch, 0, sizeof scratch);
        if (!run_once(bn, ALGO_FLASH, 0, d, t, &scratch, NULL)) {
            row[ALGO_FLASH]->check_error = xprintf("the forward before the check failed: %s",
                                                   scratch.detail ? scratch.detail : "");
            free(scratch.detail);
            bn->failed = 1;
            return;
        }
    }
    for (int a = 0; a < NUM_ALGOS; a++) {
        char *error = NULL;
        if (row[a] == NULL)
            continue;
        out[a] = read_outputs(bn, (bench_algo)a, d, t, &nout, &error);
        if (out[a] == NULL) {
            row[a]->check_error = error;
            bn->failed = 1;
        }
    }
    if (out[ALGO_FLASH] && out[ALGO_NAIVE])
        compare_outputs(out[ALGO_FLASH], out[ALGO_NAIVE], nout, t, d, ALGO_NAIVE, o->tolerance, row[ALGO_FLASH]);
    if (out[ALGO_BLAS] && (out[ALGO_FLASH] || out[ALGO_NAIVE])) {
        bench_algo with = out[ALGO_FLASH] ? ALGO_FLASH : ALGO_NAIVE;
        compare_outputs(out[ALGO_BLAS], out[with], nout, t, d, with, o->tolerance, row[ALGO_BLAS]);
    }
    for (int a = 0; a < NUM_ALGOS; a++) {
        if (row[a] && row[a]->check_error)
            bn->failed = 1;
        free_outputs(out[a]);
    }
}

static void progress_start(bench *bn, const result *r)
{
    fprintf(stderr, "[%zu/%zu] %s%s n=%" PRIu32 " ... ", bn->done + 1, bn->nresults, algo_name(r->algo),
            bn->opt->backward ? " backward" : "", r->seq);
    fflush(stderr);
}

static void progress_end(bench *bn, const result *r)
{
    char ms[32];
    bn->done++;
    if (r->status == CLFLASH_SUCCESS) {
        format_ms(r->ms_median, ms, sizeof ms);
        fprintf(stderr, "%s ms median of %u runs", ms, r->runs);
        if (r->have_fwd) {
            format_ms(r->fwd_ms_median, ms, sizeof ms);
            fprintf(stderr, " (forward %s ms)", ms);
        }
        fputc('\n', stderr);
    } else {
        fprintf(stderr, "failed: %s\n", clflash_status_string(r->status));
    }
}

/* Fills what a row knows before it runs: the memory it allocates and the traffic model. */
static void describe_row(bench *bn, const clflash_attention_desc *d, const clflash_plan *plan,
                         clflash_status plan_st, result *r)
{
    const options *o = bn->opt;
    int overflow = 0;
    uint64_t rows = mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q, &overflow);
    switch (r->algo) {
    case ALGO_FLASH:
        /* the forward allocates nothing; the backward its D vector, one float per query row */
        r->temp_bytes = o->backward ? mul_checked(rows, sizeof(float), &overflow) : 0;
        r->have_temp = !overflow;
        if (plan_st == CLFLASH_SUCCESS) {
            r->have_plan = 1;
            r->plan = *plan;
            if (!o->backward)
                /* K and V are read once per query block: block_q rows (B, except on tensor cores) */
                r->modeled_bytes =
                    clflash_traffic_bytes(d, CLFLASH_ALGO_FLASH, plan->block_q ? plan->block_q : plan->block);
        }
        break;
    case ALGO_NAIVE:
        r->temp_bytes = o->backward ? naive_backward_temp_bytes(bn, d) : clflash_naive_workspace_bytes(bn->ctx, d);
        r->have_temp = r->temp_bytes != 0 && r->temp_bytes != UINT64_MAX;
        if (!o->backward)
            r->modeled_bytes = clflash_traffic_bytes(d, CLFLASH_ALGO_NAIVE,
                                                     plan_st == CLFLASH_SUCCESS ? plan->block : 0u);
        break;
    case ALGO_BLAS:
        /* one head's fp32 score matrix, reused head after head; it moves S as naive does (written,
         * read for the maximum, read and written as P, read by P V), so naive's model applies */
        r->temp_bytes = clflash_score_matrix_bytes(d->seq_q, d->seq_k, sizeof(float));
        r->have_temp = r->temp_bytes != UINT64_MAX;
        r->modeled_bytes = clflash_traffic_bytes(d, CLFLASH_ALGO_NAIVE, 0u);
        break;
    }
    if (r->modeled_bytes == UINT64_MAX)
        r->modeled_bytes = 0;
}

/* Everything for one sequence length: plan, tensors, each algorithm, the comparison. */
static void bench_seq(bench *bn, size_t si)
{
    const options *o = bn->opt;
    const uint32_t n = o->seqs[si];
    result *rows = bn->results + si * o->nalgo;
    clflash_attention_desc d;
    clflash_plan plan = {.struct_size = sizeof plan};
    clflash_status plan_st, st;
    char *plan_detail = NULL, *tensor_detail = NULL;
    tensors t;
    uint64_t score, io;
    int overflow = 0, ok = 0;

    describe_desc(o, n, &d);
    memset(&plan, 0, sizeof plan);
    plan.struct_size = sizeof plan;
    plan_st = o->backward ? clflash_plan_backward(bn->ctx, &d, &plan) : clflash_plan_attention(bn->ctx, &d, &plan);
    if (plan_st != CLFLASH_SUCCESS)
        plan_detail = xstrdup(clflash_last_error_detail());
    score = clflash_score_matrix_bytes(n, n, clflash_dtype_size(o->dtype));
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
        describe_row(bn, &d, &plan, plan_st, r);
    }

    st = make_tensors(bn, &d, &t, &tensor_detail);
    for (size_t a = 0; a < o->nalgo; a++) {
        result *r = &rows[a];
        progress_start(bn, r);
        if (st != CLFLASH_SUCCESS)
            set_failure(r, st, tensor_detail);
        else if (r->algo == ALGO_FLASH && plan_st != CLFLASH_SUCCESS)
            set_failure(r, plan_st, plan_detail);
        else if (r->algo == ALGO_BLAS && t.scores_status != CLFLASH_SUCCESS)
            set_failure(r, t.scores_status, "allocating the host score matrix or output for blas failed");
        else
            time_algo(bn, &d, &t, r);
        if (r->status != CLFLASH_SUCCESS) {
            r->expected = r->algo != ALGO_FLASH && is_capacity_failure(r->status);
            if (!r->expected)
                bn->failed = 1;
        } else {
            ok++;
        }
        progress_end(bn, r);
    }
    if (st == CLFLASH_SUCCESS && !o->no_check && ok >= 2) {
        fprintf(stderr, "[check] n=%" PRIu32 ": comparing %s ... ", n, o->backward ? "dQ, dK, dV" : "O");
        fflush(stderr);
        check_seq(bn, &d, &t, rows);
        for (size_t a = 0, said = 0; a < o->nalgo; a++) {
            if (rows[a].checked)
                fprintf(stderr, "%slargest |%s - %s| %.2g", said++ ? ", " : "", algo_name(rows[a].algo),
                        rows[a].compared_with, rows[a].max_abs_diff);
            else if (rows[a].check_error)
                fprintf(stderr, "%s%s failed: %s", said++ ? ", " : "", algo_name(rows[a].algo),
                        rows[a].check_error);
        }
        fputc('\n', stderr);
    }
    if (st == CLFLASH_SUCCESS)
        release_tensors(bn, &t);
    free(plan_detail);
    free(tensor_detail);
}

/* ============================================================================================
 * Human output.
 * ========================================================================================== */

enum { COL_ALGO, COL_N, COL_MEDIAN, COL_MIN, COL_MAX, COL_RUNS, COL_TFLOPS, COL_TRAFFIC, COL_GBPS, COL_B,
       COL_SCRATCH, COL_SCORES, COL_RSS, COL_FWD, COL_RATIO, COL_DIFF, COL_STATUS, NCOLS };
#define CELL 48

static void print_plan(const clflash_plan *p, int backward)
{
    char buf[64], tile[64];
    printf("  block (B)          %" PRIu32 "\n", p->block);
    printf("  threads per row    %" PRIu32 "\n", p->threads_per_row);
    printf("  work-group size    %" PRIu32 "\n", p->work_group_size);
    format_unit(p->tile_bytes, buf, sizeof buf);
    printf("  tile bytes         %" PRIu64 " (%s)%s\n", p->tile_bytes, buf,
           backward ? ", by the backward rule (4*B*d + 2*B*B) * s" : "");
    format_unit(p->kernel_local_bytes, buf, sizeof buf);
    printf("  kernel local bytes %" PRIu64 " (%s)\n", p->kernel_local_bytes, buf);
    format_unit(p->local_mem_budget, buf, sizeof buf);
    printf("  local mem budget   %" PRIu64 " (%s)\n", p->local_mem_budget, buf);
    printf("  kernel             %s\n", p->kernel ? p->kernel : "(none)");
    printf("  tiles_q            %" PRIu64 "\n", p->tiles_q);
    printf("  kv_passes          %" PRIu64 "\n", p->kv_passes);
    if (!backward) {
        format_unit(p->score_matrix_bytes, buf, sizeof buf);
        format_unit(p->tile_bytes, tile, sizeof tile);
        printf("  score matrix/head  %s (what naive writes per head) vs one %s tile\n", buf, tile);
    }
}

static void print_header(const bench *bn)
{
    const options *o = bn->opt;
    const device_facts *f = &bn->facts;
    char buf[64];
    clflash_attention_desc d;
    clflash_plan plan = {.struct_size = sizeof plan};
    clflash_status st;

    printf("clflash-bench (clflash %s): ", clflash_version_string());
    for (size_t a = 0; a < o->nalgo; a++)
        printf("%s%s", a ? " vs " : "", algo_name(o->algos[a]));
    printf(" attention, %s\n\n", o->backward ? "backward (forward timed too)" : "forward");
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
#ifdef CLFLASH_BENCH_BLAS
    if (has_algo(o, ALGO_BLAS)) {
        printf("\nBLAS (host, fp32)\n");
        printf("  library            %s\n", bench_blas_name());
        if (bench_blas_threads() > 0)
            printf("  threads            %d\n", bench_blas_threads());
    }
#endif

    describe_desc(o, o->seqs[0], &d);
    memset(&plan, 0, sizeof plan);
    plan.struct_size = sizeof plan;
    printf("\n%s plan for batch %" PRIu32 ", heads %" PRIu32 ", n %" PRIu32 ", head_dim %" PRIu32
           ", %s%s%s\n",
           o->backward ? "Backward" : "Forward", o->batch, o->heads, o->seqs[0], o->head_dim,
           dtype_name(o->dtype), o->causal ? ", causal" : "", o->have_block ? ", --block forced" : "");
    st = o->backward ? clflash_plan_backward(bn->ctx, &d, &plan) : clflash_plan_attention(bn->ctx, &d, &plan);
    if (st == CLFLASH_SUCCESS)
        print_plan(&plan, o->backward);
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
        "algo", "n", "median ms", "min ms", "max ms", "runs", "TFLOP/s", "modeled traffic", "GB/s", "B",
        "scratch", "scores/head", "peak RSS", "fwd ms", "bwd/fwd", "max |diff|", "status"};
    static const int right[NCOLS] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    const int backward = bn->opt->backward;
    char(*cells)[NCOLS][CELL] = xmalloc(bn->nresults * sizeof *cells);
    size_t width[NCOLS];
    int show[NCOLS];
    size_t nfail = 0;

    for (int k = 0; k < NCOLS; k++) /* no traffic model for the backward; no ratio for the forward */
        show[k] = backward ? k != COL_TRAFFIC && k != COL_GBPS : k != COL_FWD && k != COL_RATIO;
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        char *c[NCOLS];
        for (int k = 0; k < NCOLS; k++) {
            c[k] = cells[i][k];
            strcpy(c[k], "-");
        }
        snprintf(c[COL_ALGO], CELL, "%s", algo_name(r->algo));
        snprintf(c[COL_N], CELL, "%" PRIu32, r->seq);
        if (r->status == CLFLASH_SUCCESS) {
            format_ms(r->ms_median, c[COL_MEDIAN], CELL);
            format_ms(r->ms_min, c[COL_MIN], CELL);
            format_ms(r->ms_max, c[COL_MAX], CELL);
            snprintf(c[COL_RUNS], CELL, "%u", r->runs);
            snprintf(c[COL_TFLOPS], CELL, "%.4g", r->tflops);
            if (r->modeled_bytes)
                snprintf(c[COL_GBPS], CELL, "%.4g", r->gbps);
            if (r->peak_rss)
                format_unit(r->peak_rss, c[COL_RSS], CELL);
            if (r->have_fwd) {
                format_ms(r->fwd_ms_median, c[COL_FWD], CELL);
                if (r->fwd_ms_median > 0.0)
                    snprintf(c[COL_RATIO], CELL, "%.2f", r->ms_median / r->fwd_ms_median);
            }
            strcpy(c[COL_STATUS], r->check_error ? "check failed" : "ok");
        } else {
            nfail++;
            snprintf(c[COL_STATUS], CELL, "failed (%zu)", nfail);
        }
        if (r->modeled_bytes)
            format_unit(r->modeled_bytes, c[COL_TRAFFIC], CELL);
        if (r->have_plan)
            snprintf(c[COL_B], CELL, "%" PRIu32, r->plan.block);
        if (r->have_temp)
            format_unit(r->temp_bytes, c[COL_SCRATCH], CELL);
        if (r->score_matrix_bytes != UINT64_MAX)
            format_unit(r->score_matrix_bytes, c[COL_SCORES], CELL);
        if (r->checked)
            snprintf(c[COL_DIFF], CELL, "%.2g vs %s", r->max_abs_diff, r->compared_with);
        else if (r->check_error)
            strcpy(c[COL_DIFF], "see below");
    }

    for (int k = 0; k < NCOLS; k++) {
        width[k] = strlen(headers[k]);
        for (size_t i = 0; i < bn->nresults; i++)
            if (strlen(cells[i][k]) > width[k])
                width[k] = strlen(cells[i][k]);
    }
    for (size_t i = 0; i <= bn->nresults; i++) { /* the header row, then one row per result */
        int first = 1;
        for (int k = 0; k < NCOLS; k++) {
            if (!show[k])
                continue;
            fputs(first ? "" : "  ", stdout);
            first = 0;
            print_padded(stdout, i == 0 ? headers[k] : cells[i - 1][k], k == NCOLS - 1 ? 0 : width[k], right[k]);
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
            printf("check %s n=%" PRIu32 ": %s\n", algo_name(r->algo), r->seq, r->check_error);
    }
    if (backward)
        printf("\nTFLOP/s counts the backward as 2.5x the forward's 4*b*h*n*n*d; fwd ms: the same algorithm's "
               "forward (with lse); bwd/fwd: backward time / forward time.");
    else
        printf("\nmodeled traffic: global-memory bytes each algorithm must move (clflash_traffic_bytes; "
               "blas moves its scores as naive does).");
    printf(" scratch: memory the call allocates besides its inputs and outputs. peak RSS: the process's "
           "high-water mark after that row (getrusage), so it is clean only for the first algorithm of a run.\n");
}

/* A time and the factor against another: "123.4 ms" or "failed (...)". */
static void print_time(const result *r)
{
    char ms[32];
    if (r->status == CLFLASH_SUCCESS) {
        format_ms(r->ms_median, ms, sizeof ms);
        printf(" %s %s ms", algo_name(r->algo), ms);
        if (r->have_fwd && r->fwd_ms_median > 0.0)
            printf(" (%.2fx its forward)", r->ms_median / r->fwd_ms_median);
    } else {
        printf(" %s failed (%s)", algo_name(r->algo), clflash_status_string(r->status));
    }
}

/* "n=4096: flash 123.4 ms, naive 234.5 ms, blas 99.0 ms -> flash is 1.90x faster than naive, ...;
 * memory: ...; largest differences ..." */
static void print_summary(const bench *bn)
{
    const options *o = bn->opt;
    printf("\nSummary\n");
    for (size_t si = 0; si < o->nseq; si++) {
        const result *row[NUM_ALGOS] = {NULL, NULL, NULL};
        const result *flash, *naive, *any = NULL;
        char io[32], per_head[32], temp[32];
        for (size_t a = 0; a < o->nalgo; a++) {
            const result *r = &bn->results[si * o->nalgo + a];
            row[r->algo] = r;
            any = any ? any : r;
        }
        flash = row[ALGO_FLASH];
        naive = row[ALGO_NAIVE];
        printf("n=%" PRIu32 ":%s", o->seqs[si], o->backward ? " backward" : "");
        for (size_t a = 0; a < o->nalgo; a++) {
            if (a)
                putchar(',');
            print_time(&bn->results[si * o->nalgo + a]);
        }
        for (int a = ALGO_NAIVE; a < NUM_ALGOS; a++) {
            const result *r = row[a];
            if (flash && r && flash->status == CLFLASH_SUCCESS && r->status == CLFLASH_SUCCESS &&
                flash->ms_median > 0.0) {
                double ratio = r->ms_median / flash->ms_median;
                printf(a == ALGO_NAIVE || !naive ? " -> flash is " : ", ");
                if (ratio >= 1.0)
                    printf("%.2fx faster than %s", ratio, algo_name(r->algo));
                else
                    printf("%.2fx slower than %s", 1.0 / ratio, algo_name(r->algo));
            }
        }
        /* memory: the score matrices the baselines need, and what flash needs instead */
        {
            int have_io = any->io_bytes != UINT64_MAX, have_score = any->score_matrix_bytes != UINT64_MAX;
            format_unit(any->io_bytes, io, sizeof io);
            format_unit(any->score_matrix_bytes, per_head, sizeof per_head);
            printf("; memory: ");
            if (naive && naive->have_temp && have_score) {
                format_unit(naive->temp_bytes, temp, sizeof temp);
                printf("naive %s %s %s(%s of scores per head)", naive->status == CLFLASH_SUCCESS ? "needs" : "would need",
                       temp, o->backward ? "of P and dP matrices and accumulators " : "of scores ", per_head);
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
            if (row[ALGO_BLAS] && row[ALGO_BLAS]->have_temp) {
                format_unit(row[ALGO_BLAS]->temp_bytes, temp, sizeof temp);
                printf(", blas %s (one head's fp32 scores)", temp);
            }
            if (o->backward && flash && flash->have_temp) {
                format_unit(flash->temp_bytes, temp, sizeof temp);
                printf(", flash %s (one float per query row)", temp);
            } else {
                printf(", flash %s", flash ? "none" : "would need none");
            }
        }
        for (size_t a = 0; a < o->nalgo; a++) {
            const result *r = &bn->results[si * o->nalgo + a];
            if (r->checked)
                printf("; largest |%s - %s| = %.2g", algo_name(r->algo), r->compared_with, r->max_abs_diff);
            else if (r->check_error)
                printf("; %s check failed: %s", algo_name(r->algo), r->check_error);
        }
        if (o->no_check)
            printf("; not compared (--no-check)");
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
    json_str(&j, "build_options", o->build_options);
    json_str(&j, "timing", "wall clock from enqueue to clFinish, one call per run");
    json_str(&j, "pass", o->backward ? "backward" : "forward");
    json_str(&j, "flops", o->backward ? "2.5 * 4*b*h*n*n*d (halved for causal)" : "4*b*h*n*n*d (halved for causal)");
    json_str(&j, "peak_rss", "getrusage ru_maxrss after each row: the process's high-water mark so far");
#ifdef CLFLASH_BENCH_BLAS
    json_str(&j, "blas", has_algo(o, ALGO_BLAS) ? bench_blas_name() : NULL);
    json_opt_u64(&j, "blas_threads", has_algo(o, ALGO_BLAS) && bench_blas_threads() > 0,
                 (uint64_t)bench_blas_threads());
#else
    json_str(&j, "blas", NULL);
    json_opt_u64(&j, "blas_threads", 0, 0);
#endif
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
        json_str(&j, "compared_with", r->checked ? r->compared_with : NULL);
        json_str(&j, "pass", o->backward ? "backward" : "forward");
        json_opt_u64(&j, "peak_rss_bytes", r->peak_rss != 0, r->peak_rss);
        json_num(&j, "fwd_ms_median", r->have_fwd, r->fwd_ms_median);
        json_num(&j, "bwd_fwd_ratio", ok && r->have_fwd && r->fwd_ms_median > 0.0,
                 r->fwd_ms_median > 0.0 ? r->ms_median / r->fwd_ms_median : 0.0);
        json_str(&j, "status", ok ? (r->check_error ? "check failed" : "ok") : clflash_status_string(r->status));
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
           "modeled_bytes,gbps,temp_bytes,io_bytes,score_matrix_bytes,block,max_abs_diff,status,pass,"
           "peak_rss_bytes,fwd_ms_median,bwd_fwd_ratio,tile_bytes,compared_with\n");
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
        csv_field(ok ? (r->check_error ? "check failed" : "ok") : clflash_status_string(r->status), 0);
        csv_field(o->backward ? "backward" : "forward", 0);
        csv_u64(r->peak_rss != 0, r->peak_rss);
        csv_num(r->have_fwd, r->fwd_ms_median);
        csv_num(ok && r->have_fwd && r->fwd_ms_median > 0.0,
                r->fwd_ms_median > 0.0 ? r->ms_median / r->fwd_ms_median : 0.0);
        csv_u64(r->have_plan, r->plan.tile_bytes);
        csv_field(r->checked ? r->compared_with : "", 1);
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
    {
        clflash_context_options copt;
        memset(&copt, 0, sizeof copt);
        copt.struct_size = sizeof copt;
        copt.build_options = o->build_options;
        st = clflash_context_create_default(&copt, &bn.ctx);
    }
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
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--decode") == 0)
            return bench_decode_main(argc, argv);
        else if (strcmp(argv[i], "--features") == 0)
            return bench_features_main(argc, argv);
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
