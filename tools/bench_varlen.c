/*
 * bench_varlen.c - `clflash-bench --varlen`: times one variable-length call (packed Q, K, V with
 * cu_seqlens) over sequences of mixed lengths against the same sequences run as separate batch-1
 * calls, forward or (--backward) backward, after checking that the two give the same result.
 *
 * Why a mode of its own: packing a batch's sequences is worth it only if one call over the packed
 * tokens costs no more than the calls it replaces (the target: within 1.1x of their time). The
 * separate calls read and write the very same packed buffers through layout offsets, so both cases
 * do the same work on the same bytes and their ratio shows only what packing costs or saves: one
 * launch instead of many, a grid sized by the longest sequence, the short sequences' idle tiles.
 * Two times per case: back to back (calls enqueued one after another, then clFinish, divided by
 * their number, as the other modes and PyTorch's CUDA-event timings measure) and, where the queue
 * has profiling times, the device's own time of the calls without the gaps between them. --json
 * carries the shape so that tools/torch_varlen_bench.py can time PyTorch's varlen attention on it.
 */
#include "bench_varlen.h"
#include "bench_common.h"
#include "bench_flash.h" /* element_value (bench_inputs.c) */
#include "tool_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 1024
/* 17 lengths from 100 to 4000 in a fixed, shuffled order (26140 tokens): a prefill batch of mixed
 * requests, long and short side by side */
#define DEFAULT_LENGTHS "100,3900,420,1750,2600,180,960,4000,310,1280,2210,640,3350,150,870,2900,520"
/* device-time repetitions per case (the median is reported) */
#define DEVICE_REPS 11

enum { CASE_VARLEN, CASE_SEPARATE, NUM_CASES };
static const char *const case_names[NUM_CASES] = {"varlen", "separate"};

typedef struct {
    uint32_t lengths[MAX_SEQS];
    size_t nseq;
    uint32_t heads, heads_kv, head_dim;
    clflash_dtype dtype;
    int causal, backward, json;
    const char *device, *build_options, *tuning;
    uint32_t warmup;
    double min_time;
} varlen_options;

static void help(FILE *f)
{
    fputs("Usage: clflash-bench --varlen [options]\n"
          "\n"
          "Times clflash_forward (with --backward clflash_backward) on a variable-length batch:\n"
          "sequences of mixed lengths packed one after another into [total][heads][head_dim]\n"
          "tensors (cu_seqlens_q = cu_seqlens_k, query length = key length per sequence), as\n"
          "  varlen    one call over the packed batch (seq_q = seq_k = the longest length)\n"
          "  separate  one batch-1 call per sequence on the same packed buffers (layout offsets),\n"
          "            all enqueued back to back; the figure is the whole set's\n"
          "Before timing, O of both (with --backward also dQ, dK and dV) is compared at the\n"
          "first, middle and last row of every sequence: 'check: ok', or the largest difference\n"
          "(times max(1, the largest value)) and exit status 1 when it exceeds 1e-4 (f32), 1e-2\n"
          "(f16) or 6e-2 (bf16).\n"
          "  ms        back to back: calls enqueued one after another, then clFinish, divided by\n"
          "            their number (per set for separate)\n"
          "  device    the device's own time, summed over the set's calls (profiling clock: from a\n"
          "            marker enqueued just before each call to the end of its last kernel), the\n"
          "            median of 11 sets; '-' where the queue gives no profiling times\n"
          "  TFLOP/s   4 * head_dim * visible (query, key) pairs / ms, pairs counted per sequence\n"
          "            (causal: bottom-right, i.e. ordinary causal here); the backward 2.5x that\n"
          "  kernel    what the planner chose (clflash_plan_attention, clflash_plan_backward); for\n"
          "            separate the distinct choices over the sequences, joined by '+'\n"
          "and the ratio varlen / separate of both times.\n"
          "\n"
          "Options:\n"
          "  --lengths L[,L...]  the sequences' lengths, 1 to 1024 of them (default 17 lengths\n"
          "                      from 100 to 4000: " DEFAULT_LENGTHS ")\n"
          "  --heads H           query heads (default 16)\n"
          "  --heads-kv H        K/V heads, dividing --heads (default: --heads)\n"
          "  --head-dim D        (default 128)\n"
          "  --dtype T           f32, f16 or bf16 (default f16)\n"
          "  --causal            causal masking\n"
          "  --backward          time clflash_backward (dO random, O and lse from one forward)\n"
          "  --device STR        as clflash-bench --device\n"
          "  --build-options S   extra OpenCL build options for clflash's kernels\n"
          "  --tune SPEC         tuning settings (clflash_context_options.tuning), as clflash-bench --tune\n"
          "  --warmup N          untimed calls (sets) first (default 3)\n"
          "  --min-time S        seconds of back-to-back calls per case (default 1.0)\n"
          "  --json              one JSON object instead of a table (tools/torch_varlen_bench.py\n"
          "                      reads it)\n",
          f);
}

static int add_length(void *ctx, const char *text)
{
    varlen_options *o = ctx;
    uint64_t v;
    if (o->nseq == MAX_SEQS || !parse_uint(text, 1, CLFLASH_MAX_SEQ_Q, &v))
        return 0;
    o->lengths[o->nseq++] = (uint32_t)v;
    return 1;
}

static int parse(int argc, char **argv, varlen_options *o)
{
    static const char *const flags[] = {"--varlen", "--causal", "--backward", "--json", NULL};
    static const char *const valued[] = {"--lengths", "--heads",         "--heads-kv", "--head-dim", "--dtype",
                                         "--device",  "--build-options", "--tune",     "--warmup",   "--min-time",
                                         NULL};
    for (int i = 1; i < argc; i++) {
        const char *name, *val;
        const int rc = tool_next_option(argc, argv, &i, flags, valued, help, &name, &val);
        if (rc >= 0)
            return rc;
        if (strcmp(name, "--varlen") == 0)
            continue;
        if (strcmp(name, "--causal") == 0) {
            o->causal = 1;
        } else if (strcmp(name, "--backward") == 0) {
            o->backward = 1;
        } else if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--lengths") == 0) {
            o->nseq = 0;
            if (!each_item(val, add_length, o))
                return usage_error("--lengths wants 1 to %d whole numbers from 1 to %u, not '%s'", MAX_SEQS,
                                   CLFLASH_MAX_SEQ_Q, val);
        } else if (strcmp(name, "--dtype") == 0) {
            if (!parse_dtype(val, &o->dtype) || o->dtype == CLFLASH_I8)
                return usage_error("--dtype wants f32, f16 or bf16, not '%s'", val);
        } else if (strcmp(name, "--device") == 0) {
            o->device = val;
        } else if (strcmp(name, "--build-options") == 0) {
            o->build_options = val;
        } else if (strcmp(name, "--tune") == 0) {
            o->tuning = val;
        } else if (strcmp(name, "--min-time") == 0) {
            char *end;
            o->min_time = strtod(val, &end);
            if (*end != '\0' || !(o->min_time >= 0.0) || o->min_time > 3600.0)
                return usage_error("--min-time wants seconds from 0 to 3600, not '%s'", val);
        } else {
            const int is_warmup = strcmp(name, "--warmup") == 0;
            const uint64_t lo = is_warmup ? 0 : 1;
            const uint64_t hi = is_warmup                            ? 100000u
                                : strcmp(name, "--head-dim") == 0 ? CLFLASH_MAX_HEAD_DIM
                                                                  : CLFLASH_MAX_HEADS;
            uint64_t v;
            if (!parse_uint(val, lo, hi, &v))
                return usage_error("%s wants a whole number from %" PRIu64 " to %" PRIu64 ", not '%s'", name, lo, hi,
                                   val);
            uint32_t *field = strcmp(name, "--heads") == 0      ? &o->heads
                              : strcmp(name, "--heads-kv") == 0 ? &o->heads_kv
                              : strcmp(name, "--head-dim") == 0 ? &o->head_dim
                                                                : &o->warmup;
            *field = (uint32_t)v;
        }
    }
    if (o->heads_kv == 0)
        o->heads_kv = o->heads;
    if (o->heads % o->heads_kv != 0)
        return usage_error("--heads-kv %u does not divide --heads %u", o->heads_kv, o->heads);
    if (o->nseq == 0 && !each_item(DEFAULT_LENGTHS, add_length, o))
        return usage_error("internal: the default lengths do not parse");
    uint64_t total = 0;
    for (size_t i = 0; i < o->nseq; i++)
        total += o->lengths[i];
    if (total > (uint64_t)INT32_MAX)
        return usage_error("the lengths add up to %" PRIu64 " tokens; a packed batch holds at most %d", total,
                           INT32_MAX);
    return -1;
}

/* The (query, key) pairs one head of a sequence sees: query i sees key j < len_k, and with causal
 * masking (aligned bottom-right, as clflash.h's "Variable-length batches" says) only j <= i +
 * len_k - len_q. */
static uint64_t visible_pairs(uint32_t len_q, uint32_t len_k, int causal)
{
    uint64_t pairs = 0;
    for (uint32_t i = 0; i < len_q; i++) {
        int64_t seen = len_k;
        if (causal && seen > (int64_t)i + len_k - len_q + 1)
            seen = (int64_t)i + len_k - len_q + 1;
        if (seen > 0)
            pairs += (uint64_t)seen;
    }
    return pairs;
}

/* The packed tensors and both cases' outputs. Index CASE_VARLEN or CASE_SEPARATE picks a case's. */
typedef struct {
    cl_mem q, k, v, cu_seqlens, d_o;
    cl_mem o[NUM_CASES];
    cl_mem dq[NUM_CASES], dk[NUM_CASES], dv[NUM_CASES]; /* --backward */
    cl_mem lse_packed;                                  /* --backward: the varlen call's [heads][total] */
    cl_mem *lse_seq; /* --backward: the separate calls' lse, one [heads][length] buffer per sequence */
    size_t nseq;
} buffers;

static void free_buffers(buffers *b)
{
    cl_mem fixed[] = {b->q, b->k, b->v, b->cu_seqlens, b->d_o, b->lse_packed};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i])
            clReleaseMemObject(fixed[i]);
    for (int c = 0; c < NUM_CASES; c++) {
        cl_mem per_case[] = {b->o[c], b->dq[c], b->dk[c], b->dv[c]};
        for (size_t i = 0; i < 4; i++)
            if (per_case[i])
                clReleaseMemObject(per_case[i]);
    }
    for (size_t i = 0; b->lse_seq && i < b->nseq; i++)
        if (b->lse_seq[i])
            clReleaseMemObject(b->lse_seq[i]);
    free(b->lse_seq);
}

/* Creates the buffers and fills Q, K, V and dO with fixed random data (the same seeds as the other
 * modes) and cu_seqlens with `cu`. */
static cl_int make_buffers(cl_context ctx, cl_command_queue qu, const varlen_options *o, const int32_t *cu,
                           buffers *b)
{
    const size_t s = clflash_dtype_size(o->dtype);
    const uint64_t total = (uint64_t)cu[o->nseq];
    const uint64_t nq = total * o->heads * o->head_dim, nk = total * o->heads_kv * o->head_dim;
    const uint64_t largest = (nq > nk ? nq : nk) * s;
    cl_int e = CL_SUCCESS;
    if (largest > SIZE_MAX)
        return CL_OUT_OF_HOST_MEMORY;
    void *host = malloc((size_t)largest);
    b->nseq = o->nseq;
    b->lse_seq = calloc(o->nseq, sizeof *b->lse_seq);
    if (host == NULL || b->lse_seq == NULL) {
        free(host);
        return CL_OUT_OF_HOST_MEMORY;
    }
#define MAKE(field, bytes)                                                                                           \
    if (e == CL_SUCCESS)                                                                                             \
    b->field = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)(bytes), NULL, &e)
    MAKE(q, nq * s);
    MAKE(k, nk * s);
    MAKE(v, nk * s);
    MAKE(cu_seqlens, sizeof(int32_t) * (o->nseq + 1));
    for (int c = 0; c < NUM_CASES; c++) {
        MAKE(o[c], nq * s);
        if (o->backward) {
            MAKE(dq[c], nq * s);
            MAKE(dk[c], nk * s);
            MAKE(dv[c], nk * s);
        }
    }
    if (o->backward) {
        MAKE(d_o, nq * s);
        MAKE(lse_packed, nq / o->head_dim * sizeof(float));
        for (size_t i = 0; i < o->nseq; i++)
            MAKE(lse_seq[i], (uint64_t)o->heads * o->lengths[i] * sizeof(float));
    }
#undef MAKE
    const struct {
        cl_mem buf;
        uint64_t count;
        uint64_t seed;
    } fills[4] = {{b->q, nq, 1}, {b->k, nk, 2}, {b->v, nk, 3}, {b->d_o, nq, 5}};
    for (int i = 0; i < 4 && e == CL_SUCCESS; i++) {
        if (fills[i].buf == NULL)
            continue;
        bench_fill_random(host, (size_t)fills[i].count, o->dtype, fills[i].seed);
        e = clEnqueueWriteBuffer(qu, fills[i].buf, CL_TRUE, 0, (size_t)(fills[i].count * s), host, 0, NULL, NULL);
    }
    if (e == CL_SUCCESS)
        e = clEnqueueWriteBuffer(qu, b->cu_seqlens, CL_TRUE, 0, sizeof(int32_t) * (o->nseq + 1), cu, 0, NULL, NULL);
    free(host);
    return e;
}

/* One case's calls (one for varlen, one per sequence for separate), what the planner chose for
 * them, and their times. */
typedef struct {
    bench_call *calls;
    size_t ncalls;
    clflash_status status;
    char detail[256];
    char kernel[160]; /* the planner's kernel, or the distinct ones joined by '+' */
    double ms, ms_device; /* per set; ms_device 0 without profiling times */
    unsigned sets;
} case_run;

static void fail_case(case_run *r, clflash_status st)
{
    r->status = st;
    snprintf(r->detail, sizeof r->detail, "%s", clflash_last_error_detail());
}

/* Appends name to the '+'-separated list unless the list holds it already (or it would not fit). */
static void add_name(char *list, size_t cap, const char *name)
{
    const size_t n = strlen(name), used = strlen(list);
    for (const char *p = list; *p != '\0'; p += strcspn(p, "+"), p += *p == '+')
        if (strncmp(p, name, n) == 0 && (p[n] == '+' || p[n] == '\0'))
            return;
    if (used + n + 2 <= cap)
        snprintf(list + used, cap - used, "%s%s", used ? "+" : "", name);
}

/* Plans each call of the case and collects the distinct kernel names. */
static void plan_case(clflash_context *c, int backward, case_run *r)
{
    r->kernel[0] = '\0';
    for (size_t i = 0; i < r->ncalls; i++) {
        clflash_plan plan = {.struct_size = sizeof plan};
        const clflash_status st = backward ? clflash_plan_backward(c, r->calls[i].d, &plan)
                                           : clflash_plan_attention(c, r->calls[i].d, &plan);
        if (st != CLFLASH_SUCCESS) {
            fail_case(r, st);
            return;
        }
        add_name(r->kernel, sizeof r->kernel, plan.kernel);
    }
}

/* Enqueues the case's calls once; stops at the first that fails. */
static clflash_status enqueue_set(const case_run *r, int forward_with_lse)
{
    for (size_t i = 0; i < r->ncalls; i++) {
        bench_call call = r->calls[i];
        if (forward_with_lse)
            call.d_o = NULL; /* the backward's forward: same buffers, lse written */
        const clflash_status st = bench_enqueue(&call, NULL);
        if (st != CLFLASH_SUCCESS)
            return st;
    }
    return CLFLASH_SUCCESS;
}

static double median(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n ? v[n / 2] : 0.0;
}

/* The device's time of one set in ms: per call, from the end of a marker enqueued just before it
 * to the end of its last kernel, summed over the set (so the gaps between calls, where the host
 * enqueues the next, do not count); the median of DEVICE_REPS sets. 0 without profiling times. */
static double device_ms(const case_run *r, cl_command_queue qu)
{
    double per_set[DEVICE_REPS];
    for (int rep = 0; rep < DEVICE_REPS; rep++) {
        double sum = 0.0;
        int timed = 1;
        for (size_t i = 0; i < r->ncalls && timed; i++) {
            cl_event before = NULL, done = NULL;
            cl_ulong t_before = 0, t_done = 0;
            timed = clEnqueueMarkerWithWaitList(qu, 0, NULL, &before) == CL_SUCCESS &&
                    bench_enqueue(&r->calls[i], &done) == CLFLASH_SUCCESS && clWaitForEvents(1, &done) == CL_SUCCESS &&
                    clGetEventProfilingInfo(before, CL_PROFILING_COMMAND_END, sizeof t_before, &t_before, NULL) ==
                        CL_SUCCESS &&
                    clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof t_done, &t_done, NULL) ==
                        CL_SUCCESS &&
                    t_done > t_before;
            sum += timed ? (double)(t_done - t_before) * 1e-6 : 0.0;
            if (before)
                clReleaseEvent(before);
            if (done)
                clReleaseEvent(done);
        }
        clFinish(qu);
        if (!timed)
            return 0.0;
        per_set[rep] = sum;
    }
    return median(per_set, DEVICE_REPS);
}

/* Warm-up sets, then the back-to-back time and the device time. */
static void time_case(const varlen_options *o, cl_command_queue qu, case_run *r)
{
    double one_set = 0.0;
    for (uint32_t w = 0; w < o->warmup + 1; w++) {
        const double t0 = bench_now();
        const clflash_status st = enqueue_set(r, 0);
        if (st != CLFLASH_SUCCESS) {
            fail_case(r, st);
            return;
        }
        clFinish(qu);
        one_set = bench_now() - t0;
    }
    /* batches of about 50 ms of sets */
    r->ms = bench_back_to_back_set(r->calls, r->ncalls, one_set, 0.05, 1000, o->min_time, &r->sets) * 1e3;
    r->ms_device = device_ms(r, qu);
}

/* Compares row `row` (width elements) of the two packed buffers, folding max |a - b| and max |b|
 * into *diff and *ref (a NaN difference makes *diff infinite). */
static cl_int compare_row(cl_command_queue qu, cl_mem a, cl_mem b, uint64_t row, uint64_t width, clflash_dtype t,
                          void *ha, void *hb, double *diff, double *ref)
{
    const size_t s = clflash_dtype_size(t), bytes = (size_t)(width * s);
    cl_int e = clEnqueueReadBuffer(qu, a, CL_TRUE, (size_t)(row * width * s), bytes, ha, 0, NULL, NULL);
    if (e == CL_SUCCESS)
        e = clEnqueueReadBuffer(qu, b, CL_TRUE, (size_t)(row * width * s), bytes, hb, 0, NULL, NULL);
    for (size_t i = 0; e == CL_SUCCESS && i < (size_t)width; i++) {
        const double x = element_value(ha, i, t), y = element_value(hb, i, t);
        const double d = fabs(x - y);
        if (!(d <= *diff))
            *diff = isnan(d) ? INFINITY : d;
        if (fabs(y) > *ref)
            *ref = fabs(y);
    }
    return e;
}

/* The check: the varlen case's outputs against the separate calls' at the first, middle and last
 * row of every sequence. */
typedef struct {
    int ran, ok;
    size_t rows;       /* rows compared per tensor */
    double error;      /* the largest max |a - b| / max(1, max |b|) over the tensors */
    const char *worst; /* the tensor it was found in */
    double tolerance;
    cl_int cl_error;
} check_result;

static void check_outputs(const varlen_options *o, cl_command_queue qu, const buffers *b, const int32_t *cu,
                          check_result *r)
{
    const uint64_t wq = (uint64_t)o->heads * o->head_dim, wk = (uint64_t)o->heads_kv * o->head_dim;
    const size_t s = clflash_dtype_size(o->dtype);
    const struct {
        const char *name;
        const cl_mem *pair;
        uint64_t width;
    } tensors[4] = {{"O", b->o, wq}, {"dQ", b->dq, wq}, {"dK", b->dk, wk}, {"dV", b->dv, wk}};
    void *ha = malloc((size_t)(wq > wk ? wq : wk) * s), *hb = malloc((size_t)(wq > wk ? wq : wk) * s);
    memset(r, 0, sizeof *r);
    r->tolerance = o->dtype == CLFLASH_F32 ? 1e-4 : o->dtype == CLFLASH_F16 ? 1e-2 : 6e-2;
    r->worst = "O";
    if (ha == NULL || hb == NULL) {
        r->cl_error = CL_OUT_OF_HOST_MEMORY;
        free(ha);
        free(hb);
        return;
    }
    for (int t = 0; t < (o->backward ? 4 : 1) && r->cl_error == CL_SUCCESS; t++) {
        double diff = 0.0, ref = 0.0;
        size_t rows = 0;
        for (size_t i = 0; i < o->nseq && r->cl_error == CL_SUCCESS; i++) {
            const uint64_t first = (uint64_t)cu[i], len = o->lengths[i];
            const uint64_t picks[3] = {first, first + len / 2, first + len - 1};
            for (int p = 0; p < 3 && r->cl_error == CL_SUCCESS; p++) {
                if (p > 0 && picks[p] == picks[p - 1])
                    continue;
                r->cl_error = compare_row(qu, tensors[t].pair[CASE_VARLEN], tensors[t].pair[CASE_SEPARATE], picks[p],
                                          tensors[t].width, o->dtype, ha, hb, &diff, &ref);
                rows++;
            }
        }
        const double error = diff / (ref > 1.0 ? ref : 1.0);
        if (t == 0 || !(error <= r->error)) {
            r->error = error;
            r->worst = tensors[t].name;
        }
        r->rows = rows;
    }
    free(ha);
    free(hb);
    r->ran = r->cl_error == CL_SUCCESS;
    r->ok = r->ran && r->error <= r->tolerance;
}

/* Both cases' outputs, once: the forward (with lse for --backward), then with --backward the
 * backward; then the check. */
static clflash_status run_once(const varlen_options *o, cl_command_queue qu, case_run cases[NUM_CASES], int *which)
{
    for (int pass = 0; pass < (o->backward ? 2 : 1); pass++)
        for (int c = 0; c < NUM_CASES; c++) {
            const clflash_status st = enqueue_set(&cases[c], o->backward && pass == 0);
            if (st != CLFLASH_SUCCESS) {
                *which = c;
                return st;
            }
        }
    clFinish(qu);
    return CLFLASH_SUCCESS;
}

static void print_varlen_json(const varlen_options *o, const char *dev_name, uint64_t total, uint64_t pairs, double flops,
                       const case_run cases[NUM_CASES], const check_result *check)
{
    json_writer w = {stdout, 0, {0}};
    json_open(&w, NULL, '{');
    json_str(&w, "tool", "clflash-bench --varlen");
    json_str(&w, "pass", o->backward ? "backward" : "forward");
    json_str(&w, "version", clflash_version_string());
    json_str(&w, "device", dev_name);
    json_open(&w, "config", '{');
    json_open(&w, "lengths", '[');
    for (size_t i = 0; i < o->nseq; i++)
        json_u64(&w, NULL, o->lengths[i]);
    json_close(&w, ']');
    json_u64(&w, "total", total);
    json_u64(&w, "heads", o->heads);
    json_u64(&w, "heads_kv", o->heads_kv);
    json_u64(&w, "head_dim", o->head_dim);
    json_str(&w, "dtype", dtype_name(o->dtype));
    json_bool(&w, "causal", o->causal);
    json_bool(&w, "backward", o->backward);
    json_close(&w, '}');
    json_u64(&w, "pairs", pairs);
    json_open(&w, "check", '{');
    json_bool(&w, "ok", check->ok);
    json_num(&w, "error", check->ran, check->error);
    json_str(&w, "worst", check->ran ? check->worst : NULL);
    json_num(&w, "tolerance", 1, check->tolerance);
    json_u64(&w, "rows", check->rows);
    json_close(&w, '}');
    for (int c = 0; c < NUM_CASES; c++) {
        const case_run *r = &cases[c];
        json_open(&w, case_names[c], '{');
        json_str(&w, "status", clflash_status_string(r->status));
        json_u64(&w, "calls", r->ncalls);
        if (r->status == CLFLASH_SUCCESS) {
            json_str(&w, "kernel", r->kernel);
            json_num(&w, "ms", r->ms > 0, r->ms);
            json_num(&w, "ms_device", r->ms_device > 0, r->ms_device);
            json_num(&w, "tflops", r->ms > 0, flops / (r->ms * 1e-3) / 1e12);
            json_u64(&w, "sets", r->sets);
        } else {
            json_str(&w, "detail", r->detail);
        }
        json_close(&w, '}');
    }
    const case_run *v = &cases[CASE_VARLEN], *s = &cases[CASE_SEPARATE];
    const int both = v->status == CLFLASH_SUCCESS && s->status == CLFLASH_SUCCESS && v->ms > 0 && s->ms > 0;
    json_num(&w, "ratio", both, both ? v->ms / s->ms : 0.0);
    json_num(&w, "ratio_device", both && v->ms_device > 0 && s->ms_device > 0,
             both && s->ms_device > 0 ? v->ms_device / s->ms_device : 0.0);
    json_close(&w, '}');
    fputc('\n', stdout);
}

static void print_varlen_table(const varlen_options *o, const char *dev_name, uint64_t total, double flops,
                        const case_run cases[NUM_CASES], const check_result *check)
{
    uint32_t shortest = o->lengths[0], longest = o->lengths[0];
    for (size_t i = 1; i < o->nseq; i++) {
        shortest = o->lengths[i] < shortest ? o->lengths[i] : shortest;
        longest = o->lengths[i] > longest ? o->lengths[i] : longest;
    }
    printf("clflash-bench --varlen%s (clflash %s) on %s\n", o->backward ? " --backward" : "",
           clflash_version_string(), dev_name);
    printf("%zu sequences, %" PRIu64 " tokens (%u to %u), heads %u/%u, head_dim %u, %s%s\nlengths", o->nseq, total,
           shortest, longest, o->heads, o->heads_kv, o->head_dim, dtype_name(o->dtype), o->causal ? ", causal" : "");
    for (size_t i = 0; i < o->nseq; i++)
        printf("%s%u", i ? "," : " ", o->lengths[i]);
    printf("\n");
    if (check->ran && check->ok)
        printf("check: ok (%s at %zu rows, largest difference %.3g, tolerance %.3g)\n",
               o->backward ? "O, dQ, dK, dV" : "O", check->rows, check->error, check->tolerance);
    else if (check->ran)
        printf("check: mismatch: %s differs by %.3g (tolerance %.3g, %zu rows compared)\n", check->worst,
               check->error, check->tolerance, check->rows);
    else
        printf("check: not run\n");
    printf("\n%-9s %6s  %-40s %10s %10s %9s\n", "case", "calls", "kernel", "ms", "device", "TFLOP/s");
    for (int c = 0; c < NUM_CASES; c++) {
        const case_run *r = &cases[c];
        if (r->status != CLFLASH_SUCCESS) {
            printf("%-9s %6zu  failed: %s (%s)\n", case_names[c], r->ncalls, clflash_status_string(r->status),
                   r->detail);
            continue;
        }
        printf("%-9s %6zu  %-40s %10.4f ", case_names[c], r->ncalls, r->kernel, r->ms);
        if (r->ms_device > 0)
            printf("%10.4f", r->ms_device);
        else
            printf("%10s", "-");
        printf(" %9.3f\n", flops / (r->ms * 1e-3) / 1e12);
    }
    const case_run *v = &cases[CASE_VARLEN], *s = &cases[CASE_SEPARATE];
    if (v->status == CLFLASH_SUCCESS && s->status == CLFLASH_SUCCESS && v->ms > 0 && s->ms > 0) {
        printf("\nvarlen / separate: %.3f back to back", v->ms / s->ms);
        if (v->ms_device > 0 && s->ms_device > 0)
            printf(", %.3f device", v->ms_device / s->ms_device);
        printf("\n");
    }
}

int bench_varlen_main(int argc, char **argv)
{
    varlen_options o;
    memset(&o, 0, sizeof o);
    o.heads = 16;
    o.head_dim = 128;
    o.dtype = CLFLASH_F16;
    o.warmup = 3;
    o.min_time = 1.0;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;

    /* the packing: cumulative lengths, the longest, and the visible pairs over all heads */
    int32_t cu[MAX_SEQS + 1];
    uint32_t longest = 0;
    uint64_t pairs = 0;
    cu[0] = 0;
    for (size_t i = 0; i < o.nseq; i++) {
        cu[i + 1] = cu[i] + (int32_t)o.lengths[i];
        longest = o.lengths[i] > longest ? o.lengths[i] : longest;
        pairs += visible_pairs(o.lengths[i], o.lengths[i], o.causal) * o.heads;
    }
    const uint64_t total = (uint64_t)cu[o.nseq];
    /* FLOPs per visible pair: two products of 2 * head_dim, five in the backward */
    const double flops = (o.backward ? 10.0 : 4.0) * o.head_dim * (double)pairs;

    clflash_context *c = bench_open_context(o.device, o.build_options, o.tuning);
    if (c == NULL)
        return 1;
    cl_int err;
    /* a queue with profiling times, for the device column; everything runs on it */
    cl_command_queue qu = clCreateCommandQueue(clflash_context_cl(c), clflash_context_device(c),
                                               CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "%s --varlen: creating a command queue failed (%d)\n", tool_name(), err);
        clflash_context_free(c);
        return 1;
    }
    buffers b;
    memset(&b, 0, sizeof b);
    err = make_buffers(clflash_context_cl(c), qu, &o, cu, &b);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "%s --varlen: creating the inputs failed (%d: %s)\n", tool_name(), err,
                clflash_status_string(err));
        free_buffers(&b);
        clReleaseCommandQueue(qu);
        clflash_context_free(c);
        return 1;
    }
    char *dev_name = NULL;
    cl_info_string(0, clflash_context_device(c), CL_DEVICE_NAME, &dev_name);

    /* the descriptors: one packed call, and one batch-1 call per sequence whose layouts start at
     * the sequence's first row of the same token-major [total][heads][head_dim] tensors
     * (offset, batch_stride (unused at batch 1), head_stride, seq_stride) */
    clflash_attention_desc varlen_desc = {.struct_size = sizeof varlen_desc};
    varlen_desc.batch = (uint32_t)o.nseq;
    varlen_desc.heads_q = o.heads;
    varlen_desc.heads_kv = o.heads_kv;
    varlen_desc.seq_q = varlen_desc.seq_k = longest;
    varlen_desc.head_dim = o.head_dim;
    varlen_desc.dtype = o.dtype;
    varlen_desc.flags = o.causal ? CLFLASH_CAUSAL : 0u;
    varlen_desc.cu_seqlens_q = varlen_desc.cu_seqlens_k = b.cu_seqlens;
    varlen_desc.total_q = varlen_desc.total_k = (uint32_t)total;
    clflash_attention_desc *seq_desc = xmalloc(o.nseq * sizeof *seq_desc);
    bench_call *calls = xmalloc((o.nseq + 1) * sizeof *calls);
    const uint64_t hd = o.head_dim, wq = o.heads * hd, wk = o.heads_kv * hd;
    for (size_t i = 0; i < o.nseq; i++) {
        clflash_attention_desc *d = &seq_desc[i];
        *d = varlen_desc;
        d->batch = 1;
        d->seq_q = d->seq_k = o.lengths[i];
        d->cu_seqlens_q = d->cu_seqlens_k = NULL;
        d->total_q = d->total_k = 0;
        d->q = d->o = (clflash_layout){(uint64_t)cu[i] * wq, 0, hd, wq};
        d->k = d->v = (clflash_layout){(uint64_t)cu[i] * wk, 0, hd, wk};
    }
    case_run cases[NUM_CASES];
    memset(cases, 0, sizeof cases);
    for (int k = 0; k < NUM_CASES; k++) {
        cases[k].calls = k == CASE_VARLEN ? calls : calls + 1;
        cases[k].ncalls = k == CASE_VARLEN ? 1 : o.nseq;
        for (size_t i = 0; i < cases[k].ncalls; i++)
            cases[k].calls[i] = (bench_call){c, k == CASE_VARLEN ? &varlen_desc : &seq_desc[i], qu,
                                             b.q, b.k, b.v, b.o[k],
                                             o.backward ? b.d_o : NULL,
                                             !o.backward ? NULL : k == CASE_VARLEN ? b.lse_packed : b.lse_seq[i],
                                             b.dq[k], b.dk[k], b.dv[k]};
    }

    int failed = 0;
    check_result check;
    memset(&check, 0, sizeof check);
    for (int k = 0; k < NUM_CASES; k++) {
        plan_case(c, o.backward, &cases[k]);
        failed |= cases[k].status != CLFLASH_SUCCESS;
    }
    if (!failed) {
        int which = 0;
        const clflash_status st = run_once(&o, qu, cases, &which);
        if (st != CLFLASH_SUCCESS) {
            fail_case(&cases[which], st);
            failed = 1;
        }
    }
    if (!failed) {
        check_outputs(&o, qu, &b, cu, &check);
        if (check.cl_error != CL_SUCCESS)
            fprintf(stderr, "%s --varlen: reading the outputs back failed (%d)\n", tool_name(), check.cl_error);
        failed |= !check.ok;
        for (int k = 0; k < NUM_CASES; k++) {
            fprintf(stderr, "%s --varlen: %s\n", tool_name(), case_names[k]);
            time_case(&o, qu, &cases[k]);
            failed |= cases[k].status != CLFLASH_SUCCESS;
        }
    }

    if (o.json)
        print_varlen_json(&o, dev_name, total, pairs, flops, cases, &check);
    else
        print_varlen_table(&o, dev_name, total, flops, cases, &check);

    free(seq_desc);
    free(calls);
    free(dev_name);
    free_buffers(&b);
    clReleaseCommandQueue(qu);
    clflash_context_free(c);
    return failed ? 1 : 0;
}
