/*
 * bench_features.c - `clflash-bench --features`: times the forward (or with --backward the
 * backward) with each score feature (causal, sliding window, softcap, ALiBi, an additive bias, key
 * lengths) on one shape, beside the plain call measured in the same run, and reports what each
 * feature costs for the work it leaves.
 *
 * Why a mode of its own: a feature changes both the work (a window or key lengths hide pairs) and
 * the cost per pair (a tanh per score, a bias read per score). Comparing times alone would credit a
 * window for the pairs it skips; this mode counts the visible (query, key) pairs of every case
 * exactly on the host and reports the time per visible pair against the plain call's, which is the
 * figure a feature's cost target is about. Times are back to back (calls enqueued one after
 * another, then clFinish, divided by their number), as PyTorch's CUDA-event timings are.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#endif

#include "bench_features.h"
#include "bench_common.h"
#include "tool_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LENGTHS 64

/* What a case switches on. */
enum {
    F_CAUSAL = 1,
    F_WINDOW = 2,
    F_SOFTCAP = 4,
    F_ALIBI = 8,
    F_BIAS_SHARED = 16, /* one [seq][seq] fp32 bias for every batch entry and head */
    F_BIAS_FULL = 32,   /* a [batch][heads][seq][seq] fp32 bias */
    F_KEYLEN = 64,
    F_BIAS_GRAD = 128,  /* with --backward: also dBias (bias_grad), in the shared bias's layout */
    F_BIAS_KEYS = 256   /* one [seq] fp32 bias, a key's, for every batch entry, head and query row */
};

static const struct {
    const char *name;
    unsigned features;
} known_cases[] = {
    {"plain", 0},
    {"causal", F_CAUSAL},
    {"causal-window", F_CAUSAL | F_WINDOW},
    {"window", F_WINDOW},
    {"softcap", F_SOFTCAP},
    {"causal-softcap", F_CAUSAL | F_SOFTCAP},
    {"alibi", F_ALIBI},
    {"causal-alibi", F_CAUSAL | F_ALIBI},
    {"keylens", F_KEYLEN},
    {"bias", F_BIAS_SHARED},
    {"bias-full", F_BIAS_FULL},
    {"bias-grad", F_BIAS_SHARED | F_BIAS_GRAD},
    {"bias-keys", F_BIAS_KEYS},
};
#define N_KNOWN (sizeof known_cases / sizeof known_cases[0])
#define DEFAULT_CASES "plain,causal,causal-window,softcap,alibi,keylens,causal-softcap,bias"

typedef struct {
    uint32_t batch, heads, heads_kv, seq, head_dim, window;
    float softcap;
    uint32_t lengths[MAX_LENGTHS]; /* key lengths, cycled over the batch (0: the defaults) */
    size_t nlengths;
    size_t cases[N_KNOWN];
    size_t ncases;
    clflash_dtype dtype;
    int json;
    int backward; /* --backward: time clflash_backward (after one forward with lse) */
    const char *device, *build_options, *tuning;
    uint32_t warmup;
    double min_time;
} features_options;

static void help(FILE *f)
{
    fputs("Usage: clflash-bench --features [options]\n"
          "\n"
          "Times clflash_forward (with --backward clflash_backward) with each score feature on one\n"
          "shape (seq_q = seq_k = seq, contiguous [batch][heads][seq][head_dim] tensors) and the\n"
          "plain call in the same run.\n"
          "  ms        per call, back to back (calls enqueued one after another, then clFinish)\n"
          "  pairs     visible (query, key) pairs of the call, counted on the host\n"
          "  TFLOP/s   4 * head_dim * pairs / ms (the backward: 10 * head_dim * pairs, five products\n"
          "            against two)\n"
          "  cost      (ms / plain ms) / (pairs / plain pairs): the time per visible pair against\n"
          "            the plain call's (1.00 = the feature is free; a window is not credited for\n"
          "            the pairs it hides), on the same kernel: where the planner gives a case\n"
          "            another kernel than the plain call's (on Hopper, a window), the plain call\n"
          "            is timed again in a second context whose CLFLASH_WGMMA puts it there, and the\n"
          "            cost is marked *\n"
          "\n"
          "Cases (--cases, comma-separated; default " DEFAULT_CASES "):\n"
          "  plain, causal, window (window_left = window_right = --window), causal-window (window_left\n"
          "  = --window), softcap, causal-softcap, alibi, causal-alibi (slopes 2^-(1 + h % 8)), keylens\n"
          "  (--key-lengths), bias (one [seq][seq] fp32 bias broadcast over batch and heads), bias-full\n"
          "  ([batch][heads][seq][seq]), bias-keys (one [seq] fp32 bias of the keys, broadcast over batch,\n"
          "  heads and query rows, as a key-padding bias), bias-grad (bias, and with --backward its\n"
          "  gradient too)\n"
          "\n"
          "Options:\n"
          "  --batch B             (default 4)\n"
          "  --heads H             query heads (default 16)\n"
          "  --heads-kv H          K/V heads, dividing --heads (default: --heads)\n"
          "  --seq N               query and key length (default 4096)\n"
          "  --head-dim D          (default 128)\n"
          "  --dtype T             f32, f16 or bf16 (default f16)\n"
          "  --window W            the window's width (default 1024)\n"
          "  --softcap X           (default 50)\n"
          "  --key-lengths L[,L]   key lengths, cycled over the batch (default seq, 0.73 seq, seq / 2,\n"
          "                        seq: 4096,3000,2048,4096 at 4096)\n"
          "  --cases C[,C...]      which cases, in order\n"
          "  --device STR          as clflash-bench --device\n"
          "  --build-options S     extra OpenCL build options for clflash's kernels\n"
          "  --tune SPEC           tuning settings (clflash_context_options.tuning), as clflash-bench --tune\n"
          "  --warmup N            untimed calls first (default 3)\n"
          "  --min-time S          seconds of back-to-back calls per case (default 1.0)\n"
          "  --backward            time clflash_backward (dO random, O and lse from one forward)\n"
          "  --json                one JSON object instead of a table\n",
          f);
}

static int add_length(void *ctx, const char *text)
{
    features_options *o = ctx;
    uint64_t v;
    if (o->nlengths == MAX_LENGTHS || !parse_uint(text, 0, CLFLASH_MAX_SEQ_K, &v))
        return 0;
    o->lengths[o->nlengths++] = (uint32_t)v;
    return 1;
}

static int add_case(void *ctx, const char *text)
{
    features_options *o = ctx;
    for (size_t i = 0; i < N_KNOWN; i++)
        if (strcmp(text, known_cases[i].name) == 0 && o->ncases < N_KNOWN) {
            o->cases[o->ncases++] = i;
            return 1;
        }
    return 0;
}

static int parse(int argc, char **argv, features_options *o)
{
    static const char *const flags[] = {"--features", "--json", "--backward", NULL};
    static const char *const valued[] = {"--batch",       "--heads",  "--heads-kv",    "--seq",
                                         "--head-dim",    "--dtype",  "--window",      "--softcap",
                                         "--key-lengths", "--cases",  "--device",      "--build-options", "--tune",
                                         "--warmup",      "--min-time", NULL};
    for (int i = 1; i < argc; i++) {
        const char *name, *val;
        uint64_t v = 0;
        const int rc = tool_next_option(argc, argv, &i, flags, valued, help, &name, &val);
        if (rc >= 0)
            return rc;
        if (strcmp(name, "--features") == 0)
            continue;
        if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--backward") == 0) {
            o->backward = 1;
        } else if (strcmp(name, "--dtype") == 0) {
            if (!parse_dtype(val, &o->dtype) || o->dtype == CLFLASH_I8)
                return usage_error("--dtype wants f32, f16 or bf16, not '%s'", val);
        } else if (strcmp(name, "--device") == 0) {
            o->device = val;
        } else if (strcmp(name, "--build-options") == 0) {
            o->build_options = val;
        } else if (strcmp(name, "--tune") == 0) {
            o->tuning = val;
        } else if (strcmp(name, "--key-lengths") == 0) {
            o->nlengths = 0;
            if (!each_item(val, add_length, o))
                return usage_error("--key-lengths wants up to %d whole numbers from 0 to %u, not '%s'", MAX_LENGTHS,
                                   CLFLASH_MAX_SEQ_K, val);
        } else if (strcmp(name, "--cases") == 0) {
            o->ncases = 0;
            if (!each_item(val, add_case, o))
                return usage_error("--cases wants names from: plain, causal, window, causal-window, softcap, "
                                   "causal-softcap, alibi, causal-alibi, keylens, bias, bias-full, bias-grad; "
                                   "not '%s'",
                                   val);
        } else if (strcmp(name, "--softcap") == 0 || strcmp(name, "--min-time") == 0) {
            char *end;
            const double x = strtod(val, &end);
            const int is_cap = strcmp(name, "--softcap") == 0;
            if (*end != '\0' || !(is_cap ? x > 0.0 : x >= 0.0) || x > (is_cap ? 1e6 : 3600.0))
                return usage_error("%s wants %s, not '%s'", name,
                                   is_cap ? "a positive number up to 1e6" : "seconds from 0 to 3600", val);
            if (strcmp(name, "--softcap") == 0)
                o->softcap = (float)x;
            else
                o->min_time = x;
        } else {
            const uint64_t hi = strcmp(name, "--head-dim") == 0 ? CLFLASH_MAX_HEAD_DIM
                                : strcmp(name, "--seq") == 0 || strcmp(name, "--window") == 0 ? 1u << 20
                                : strcmp(name, "--warmup") == 0                               ? 100000u
                                                                                              : 65535u;
            const uint64_t lo = strcmp(name, "--warmup") == 0 || strcmp(name, "--window") == 0 ? 0 : 1;
            if (!parse_uint(val, lo, hi, &v))
                return usage_error("%s wants a whole number from %" PRIu64 " to %" PRIu64 ", not '%s'", name, lo, hi,
                                   val);
            uint32_t *field = strcmp(name, "--batch") == 0      ? &o->batch
                              : strcmp(name, "--heads") == 0    ? &o->heads
                              : strcmp(name, "--heads-kv") == 0 ? &o->heads_kv
                              : strcmp(name, "--seq") == 0      ? &o->seq
                              : strcmp(name, "--head-dim") == 0 ? &o->head_dim
                              : strcmp(name, "--window") == 0   ? &o->window
                                                                : &o->warmup;
            *field = (uint32_t)v;
        }
    }
    if (o->heads_kv == 0)
        o->heads_kv = o->heads;
    if (o->heads % o->heads_kv != 0)
        return usage_error("--heads-kv %u does not divide --heads %u", o->heads_kv, o->heads);
    if (o->ncases == 0 && !each_item(DEFAULT_CASES, add_case, o))
        return usage_error("internal: the default cases do not parse");
    if (o->nlengths == 0) {
        const uint32_t n = o->seq;
        const uint32_t defaults[4] = {n, (uint32_t)((uint64_t)n * 3000 / 4096), n / 2, n};
        memcpy(o->lengths, defaults, sizeof defaults);
        o->nlengths = 4;
    }
    return -1;
}

/* The visible (query, key) pairs of the call, over every batch entry and query head. */
static uint64_t visible_pairs(const clflash_attention_desc *d, const int32_t *lens)
{
    uint64_t pairs = 0;
    for (uint32_t b = 0; b < d->batch; b++) {
        const int64_t len = lens ? (lens[b] < 0 ? 0 : lens[b] > (int64_t)d->seq_k ? (int64_t)d->seq_k : lens[b]) : d->seq_k;
        for (uint32_t i = 0; i < d->seq_q; i++) {
            const int64_t diag = (int64_t)i + d->seq_k - d->seq_q;
            int64_t lo = 0, hi = len;
            if ((d->flags & CLFLASH_CAUSAL) && hi > diag + 1)
                hi = diag + 1;
            if (d->flags & CLFLASH_WINDOW) {
                if (lo < diag - (int64_t)d->window_left)
                    lo = diag - (int64_t)d->window_left;
                if (hi > diag + (int64_t)d->window_right + 1)
                    hi = diag + (int64_t)d->window_right + 1;
            }
            if (hi > lo)
                pairs += (uint64_t)(hi - lo);
        }
    }
    return pairs * d->heads_q;
}

typedef struct {
    size_t which;
    clflash_status status;
    char detail[256];
    clflash_plan plan;
    uint64_t pairs;
    double ms;
    unsigned calls;
} case_row;

typedef struct {
    cl_mem q, k, v, o, bias_shared, bias_full, slopes, lens, bias_grad;
    cl_mem d_o, lse, dq, dk, dv; /* --backward */
    int32_t *host_lens;
} buffers;

static cl_int make_buffers(clflash_context *c, cl_command_queue qu, const features_options *o, buffers *b)
{
    const size_t s = clflash_dtype_size(o->dtype);
    const uint64_t nq = (uint64_t)o->batch * o->heads * o->seq * o->head_dim;
    const uint64_t nk = (uint64_t)o->batch * o->heads_kv * o->seq * o->head_dim;
    const uint64_t n_shared = (uint64_t)o->seq * o->seq;
    int full = 0, grad = 0;
    for (size_t i = 0; i < o->ncases; i++) {
        full |= (known_cases[o->cases[i]].features & F_BIAS_FULL) != 0;
        grad |= (known_cases[o->cases[i]].features & F_BIAS_GRAD) != 0;
    }
    const uint64_t n_full = full ? n_shared * o->batch * o->heads : 0;
    uint64_t largest = n_shared * 4; /* the host staging buffer: the largest of Q, K and the shared bias */
    if ((nq > nk ? nq : nk) * s > largest)
        largest = (nq > nk ? nq : nk) * s;
    cl_context ctx = clflash_context_cl(c);
    cl_int e = CL_SUCCESS;
    void *host = malloc((size_t)largest);
    float *slopes = malloc(sizeof(float) * o->heads);
    b->host_lens = malloc(sizeof(int32_t) * o->batch);
    if (host == NULL || slopes == NULL || b->host_lens == NULL) {
        free(host);
        free(slopes);
        return CL_OUT_OF_HOST_MEMORY;
    }
#define MAKE(field, bytes)                                                                                           \
    if (e == CL_SUCCESS)                                                                                             \
    b->field = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)(bytes), NULL, &e)
    MAKE(q, nq * s);
    MAKE(k, nk * s);
    MAKE(v, nk * s);
    MAKE(o, nq * s);
    MAKE(bias_shared, n_shared * 4);
    if (full)
        MAKE(bias_full, n_full * 4);
    if (grad && o->backward)
        MAKE(bias_grad, n_shared * 4);
    MAKE(slopes, sizeof(float) * o->heads);
    MAKE(lens, sizeof(int32_t) * o->batch);
    if (o->backward) {
        MAKE(d_o, nq * s);
        MAKE(lse, (uint64_t)o->batch * o->heads * o->seq * sizeof(float));
        MAKE(dq, nq * s);
        MAKE(dk, nk * s);
        MAKE(dv, nk * s);
    }
#undef MAKE
    if (e == CL_SUCCESS) {
        bench_fill_random(host, (size_t)nq, o->dtype, 1);
        e = clEnqueueWriteBuffer(qu, b->q, CL_TRUE, 0, (size_t)(nq * s), host, 0, NULL, NULL);
    }
    if (e == CL_SUCCESS) {
        bench_fill_random(host, (size_t)nk, o->dtype, 2);
        e = clEnqueueWriteBuffer(qu, b->k, CL_TRUE, 0, (size_t)(nk * s), host, 0, NULL, NULL);
    }
    if (e == CL_SUCCESS) {
        bench_fill_random(host, (size_t)nk, o->dtype, 3);
        e = clEnqueueWriteBuffer(qu, b->v, CL_TRUE, 0, (size_t)(nk * s), host, 0, NULL, NULL);
    }
    if (e == CL_SUCCESS && o->backward) {
        bench_fill_random(host, (size_t)nq, o->dtype, 5);
        e = clEnqueueWriteBuffer(qu, b->d_o, CL_TRUE, 0, (size_t)(nq * s), host, 0, NULL, NULL);
    }
    if (e == CL_SUCCESS) {
        bench_fill_random(host, (size_t)n_shared, CLFLASH_F32, 4);
        e = clEnqueueWriteBuffer(qu, b->bias_shared, CL_TRUE, 0, (size_t)(n_shared * 4), host, 0, NULL, NULL);
    }
    if (e == CL_SUCCESS && full) {
        const float zero = 0.0f;
        e = clEnqueueFillBuffer(qu, b->bias_full, &zero, sizeof zero, 0, (size_t)(n_full * 4), 0, NULL, NULL);
    }
    for (uint32_t h = 0; h < o->heads; h++)
        slopes[h] = ldexpf(1.0f, -(int)(1 + h % 8));
    for (uint32_t i = 0; i < o->batch; i++)
        b->host_lens[i] = (int32_t)o->lengths[i % o->nlengths];
    if (e == CL_SUCCESS)
        e = clEnqueueWriteBuffer(qu, b->slopes, CL_TRUE, 0, sizeof(float) * o->heads, slopes, 0, NULL, NULL);
    if (e == CL_SUCCESS)
        e = clEnqueueWriteBuffer(qu, b->lens, CL_TRUE, 0, sizeof(int32_t) * o->batch, b->host_lens, 0, NULL, NULL);
    free(host);
    free(slopes);
    return e;
}

static void free_buffers(buffers *b)
{
    cl_mem all[] = {b->q, b->k, b->v, b->o, b->bias_shared, b->bias_full, b->slopes, b->lens,
                    b->d_o, b->lse, b->dq, b->dk, b->dv, b->bias_grad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(b->host_lens);
}

static void run_case(clflash_context *c, cl_command_queue qu, const features_options *o, const buffers *b,
                     size_t which, case_row *r)
{
    const unsigned f = known_cases[which].features;
    clflash_attention_desc d = {.struct_size = sizeof d};
    memset(r, 0, sizeof *r);
    r->which = which;
    r->plan.struct_size = sizeof r->plan;
    d.batch = o->batch;
    d.heads_q = o->heads;
    d.heads_kv = o->heads_kv;
    d.seq_q = d.seq_k = o->seq;
    d.head_dim = o->head_dim;
    d.dtype = o->dtype;
    d.flags = (f & F_CAUSAL ? CLFLASH_CAUSAL : 0u) | (f & F_WINDOW ? CLFLASH_WINDOW : 0u);
    if (f & F_WINDOW) {
        d.window_left = o->window;
        d.window_right = f & F_CAUSAL ? 0 : o->window;
    }
    if (f & F_SOFTCAP)
        d.softcap = o->softcap;
    if (f & F_ALIBI)
        d.alibi_slopes = b->slopes;
    if (f & F_BIAS_SHARED) {
        d.bias = b->bias_shared;
        d.bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS;
    }
    if (f & F_BIAS_KEYS) {
        d.bias = b->bias_shared;
        d.bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS | CLFLASH_BROADCAST_ROWS;
    }
    if (f & F_BIAS_FULL)
        d.bias = b->bias_full;
    if (f & F_BIAS_GRAD)
        d.bias_grad = b->bias_grad; /* NULL without --backward: the forward ignores it anyway */
    if (f & F_KEYLEN)
        d.key_lengths = b->lens;
    r->pairs = visible_pairs(&d, f & F_KEYLEN ? b->host_lens : NULL);
    r->status = o->backward ? clflash_plan_backward(c, &d, &r->plan) : clflash_plan_attention(c, &d, &r->plan);
    /* the backward's O and lse: one forward */
    if (r->status == CLFLASH_SUCCESS && o->backward &&
        (r->status = clflash_forward(c, &d, qu, b->q, b->k, b->v, b->o, b->lse, 0, NULL, NULL)) == CLFLASH_SUCCESS)
        clFinish(qu);
    if (r->status != CLFLASH_SUCCESS) {
        snprintf(r->detail, sizeof r->detail, "%s", clflash_last_error_detail());
        return;
    }
    const bench_call call = {c, &d, qu, b->q, b->k, b->v, b->o, o->backward ? b->d_o : NULL, b->lse, b->dq, b->dk,
                             b->dv};
    double t_one = 0.0;
    for (uint32_t w = 0; w < o->warmup + 1; w++) {
        const double t0 = bench_now();
        r->status = o->backward ? clflash_backward(c, &d, qu, b->q, b->k, b->v, b->o, b->d_o, b->lse, b->dq, b->dk,
                                                   b->dv, 0, NULL, NULL)
                                : clflash_forward(c, &d, qu, b->q, b->k, b->v, b->o, NULL, 0, NULL, NULL);
        if (r->status != CLFLASH_SUCCESS) {
            snprintf(r->detail, sizeof r->detail, "%s", clflash_last_error_detail());
            return;
        }
        clFinish(qu);
        t_one = bench_now() - t0;
    }
    /* batches of about 50 ms of calls */
    r->ms = bench_back_to_back(&call, t_one, 0.05, 1000, o->min_time, &r->calls) * 1e3;
}

/* The plain call timed on `kernel`, for a case the planner gives another kernel than the plain
 * call's (on a Hopper GPU the default plans the wgmma forward for the plain call and
 * nv_mma_forward for a window), so that its cost is against the same kernel: a second clflash
 * context on the same OpenCL context and device, with CLFLASH_WGMMA (read when a context is
 * created) set to "0" or "1", whichever plans the plain call on that kernel; *mode names it. 0 if
 * neither does. */
static int plain_on_kernel(clflash_context *c, const features_options *o, const buffers *b, size_t plain_which,
                           const char *kernel, case_row *out, const char **mode)
{
    static const char *const modes[] = {"0", "1"};
    const char *const was = getenv("CLFLASH_WGMMA");
    char saved[64] = "";
    if (was != NULL)
        snprintf(saved, sizeof saved, "%s", was);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        clflash_context_options copt = {.struct_size = sizeof copt};
        copt.build_options = o->build_options;
        copt.tuning = o->tuning;
        clflash_context *alt = NULL;
        clflash_status st = CLFLASH_ERROR_INVALID_ARGUMENT;
        if (setenv("CLFLASH_WGMMA", modes[m], 1) == 0)
            st = clflash_context_create(clflash_context_cl(c), clflash_context_device(c), &copt, &alt);
        if (was != NULL)
            setenv("CLFLASH_WGMMA", saved, 1);
        else
            unsetenv("CLFLASH_WGMMA");
        if (st != CLFLASH_SUCCESS)
            continue;
        case_row r;
        run_case(alt, clflash_context_queue(alt), o, b, plain_which, &r);
        clflash_context_free(alt);
        if (r.status == CLFLASH_SUCCESS && strcmp(r.plan.kernel, kernel) == 0) {
            *out = r;
            *mode = modes[m];
            return 1;
        }
    }
    return 0;
}

int bench_features_main(int argc, char **argv)
{
    features_options o;
    memset(&o, 0, sizeof o);
    o.batch = 4;
    o.heads = 16;
    o.seq = 4096;
    o.head_dim = 128;
    o.window = 1024;
    o.softcap = 50.0f;
    o.dtype = CLFLASH_F16;
    o.warmup = 3;
    o.min_time = 1.0;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    clflash_context *c = bench_open_context(o.device, o.build_options, o.tuning);
    if (c == NULL)
        return 1;
    cl_command_queue qu = clflash_context_queue(c);
    buffers b;
    memset(&b, 0, sizeof b);
    cl_int err = make_buffers(c, qu, &o, &b);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "%s --features: creating the inputs failed (%d)\n", tool_name(), err);
        free_buffers(&b);
        clflash_context_free(c);
        return 1;
    }
    char *dev_name = NULL;
    cl_info_string(0, clflash_context_device(c), CL_DEVICE_NAME, &dev_name);

    case_row rows[N_KNOWN];
    const case_row *plain = NULL;
    int failed = 0;
    for (size_t i = 0; i < o.ncases; i++) {
        fprintf(stderr, "%s --features: %s\n", tool_name(), known_cases[o.cases[i]].name);
        run_case(c, qu, &o, &b, o.cases[i], &rows[i]);
        failed |= rows[i].status != CLFLASH_SUCCESS;
        if (known_cases[o.cases[i]].features == 0 && rows[i].status == CLFLASH_SUCCESS)
            plain = &rows[i];
    }
    /* each case's cost is against the plain call on its own kernel: timed again where it differs,
     * once a kernel (plain_found 0: no setting puts the plain call there, so no cost) */
    case_row plain_on[N_KNOWN];
    const char *plain_kernel[N_KNOWN], *plain_mode[N_KNOWN];
    int plain_found[N_KNOWN];
    size_t n_plain_on = 0;
    const case_row *base[N_KNOWN];
    for (size_t i = 0; i < o.ncases; i++) {
        base[i] = plain;
        if (plain == NULL || rows[i].status != CLFLASH_SUCCESS || strcmp(rows[i].plan.kernel, plain->plan.kernel) == 0)
            continue;
        size_t k = 0;
        while (k < n_plain_on && strcmp(plain_kernel[k], rows[i].plan.kernel) != 0)
            k++;
        if (k == n_plain_on) {
            fprintf(stderr, "%s --features: plain on %s\n", tool_name(), rows[i].plan.kernel);
            plain_kernel[k] = rows[i].plan.kernel;
            plain_found[k] =
                plain_on_kernel(c, &o, &b, plain->which, rows[i].plan.kernel, &plain_on[k], &plain_mode[k]);
            n_plain_on++;
        }
        base[i] = plain_found[k] ? &plain_on[k] : NULL;
    }
    /* FLOPs per visible pair: two products of 2 * head_dim, five in the backward */
    const double flops_per_pair = (o.backward ? 10.0 : 4.0) * o.head_dim;
    /* (ms / plain ms) / (pairs / plain pairs), the plain call on the case's kernel */
#define COST(r, p) ((r)->ms / (p)->ms / ((double)(r)->pairs / (double)(p)->pairs))
    if (o.json) {
        json_writer w = {stdout, 0, {0}};
        json_open(&w, NULL, '{');
        json_str(&w, "tool", "clflash-bench --features");
        json_str(&w, "pass", o.backward ? "backward" : "forward");
        json_str(&w, "version", clflash_version_string());
        json_str(&w, "device", dev_name);
        json_open(&w, "config", '{');
        json_u64(&w, "batch", o.batch);
        json_u64(&w, "heads_q", o.heads);
        json_u64(&w, "heads_kv", o.heads_kv);
        json_u64(&w, "seq", o.seq);
        json_u64(&w, "head_dim", o.head_dim);
        json_str(&w, "dtype", dtype_name(o.dtype));
        json_u64(&w, "window", o.window);
        json_num(&w, "softcap", 1, o.softcap);
        json_close(&w, '}');
        json_open(&w, "rows", '[');
        for (size_t i = 0; i < o.ncases; i++) {
            const case_row *r = &rows[i];
            json_open(&w, NULL, '{');
            json_str(&w, "case", known_cases[r->which].name);
            json_str(&w, "status", clflash_status_string(r->status));
            if (r->status == CLFLASH_SUCCESS) {
                json_str(&w, "kernel", r->plan.kernel);
                json_u64(&w, "block", r->plan.block);
                json_u64(&w, "pairs", r->pairs);
                json_num(&w, "ms", 1, r->ms);
                json_num(&w, "tflops", 1, flops_per_pair * (double)r->pairs / (r->ms * 1e-3) / 1e12);
                json_num(&w, "cost", base[i] != NULL, base[i] ? COST(r, base[i]) : 0.0);
                if (base[i] != NULL && base[i] != plain)
                    json_num(&w, "plain_ms_same_kernel", 1, base[i]->ms);
                json_u64(&w, "calls", r->calls);
            } else {
                json_str(&w, "detail", r->detail);
            }
            json_close(&w, '}');
        }
        json_close(&w, ']');
        json_close(&w, '}');
        fputc('\n', stdout);
    } else {
        printf("clflash-bench --features%s (clflash %s) on %s\n", o.backward ? " --backward" : "",
               clflash_version_string(), dev_name);
        printf("batch %u, heads %u/%u, seq %u, head_dim %u, %s; window %u, softcap %g, key lengths", o.batch, o.heads,
               o.heads_kv, o.seq, o.head_dim, dtype_name(o.dtype), o.window, (double)o.softcap);
        for (size_t i = 0; i < o.nlengths; i++)
            printf("%s%u", i ? "," : " ", o.lengths[i]);
        printf("\n\n%-16s %-24s %6s %14s %10s %9s %6s\n", "case", "kernel", "B", "pairs", "ms", "TFLOP/s", "cost");
        for (size_t i = 0; i < o.ncases; i++) {
            const case_row *r = &rows[i];
            if (r->status != CLFLASH_SUCCESS) {
                printf("%-16s failed: %s (%s)\n", known_cases[r->which].name, clflash_status_string(r->status),
                       r->detail);
                continue;
            }
            printf("%-16s %-24s %6u %14" PRIu64 " %10.4f %9.1f", known_cases[r->which].name, r->plan.kernel,
                   r->plan.block, r->pairs, r->ms, flops_per_pair * (double)r->pairs / (r->ms * 1e-3) / 1e12);
            if (base[i])
                printf(" %6.2f%s", COST(r, base[i]), base[i] != plain ? "*" : "");
            printf("\n");
        }
        for (size_t k = 0; k < n_plain_on; k++)
            if (plain_found[k])
                printf("* against the plain call on %s: %.4f ms (a context with CLFLASH_WGMMA=%s)\n",
                       plain_on[k].plan.kernel, plain_on[k].ms, plain_mode[k]);
    }
#undef COST
    free(dev_name);
    free_buffers(&b);
    clflash_context_free(c);
    return failed ? 1 : 0;
}
