/*
 * clflash_tune.c - clflash-tune: finds the forward's (or with --backward the backward's) kernel
 * parameters for one shape on the user's own device and writes them as a rule of a tuning file
 * (CLFLASH_TUNING_FILE).
 *
 * Why: the planners' choices were measured on the devices we have; on an AMD, Intel or other GPU
 * they are a guess. The tool plans the shape to learn which kernel runs it, sweeps that kernel's
 * tuning parameters (clflash_context_set_tuning), and for each candidate checks the result twice
 * before it times it: on a small check shape against an fp64 reference computed here, and on the
 * timed shape against the planner's own configuration. Only candidates that pass both can win.
 * The winner is written as the parameters its plan reported, under conditions for this device,
 * dtype and head_dim, so that loading the file reproduces the plan.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_common.h"
#include "bench_flash.h"
#include "tool_common.h"
#include "tune_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TRIES 64

typedef struct {
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim, warmup;
    clflash_dtype dtype;
    int causal, candidates_only, backward;
    double min_time, tolerance; /* tolerance 0: by dtype */
    const char *device, *out;
    const char *tries[MAX_TRIES];
    size_t ntries, max_candidates;
} tune_options;

static void help(FILE *f)
{
    fputs("Usage: clflash-tune [options]\n"
          "\n"
          "Plans a forward call of the given shape (with --backward a backward call), sweeps the\n"
          "tuning parameters of the kernel that runs it (see clflash_context_set_tuning in clflash.h),\n"
          "checks each candidate against an fp64 reference on a small shape (O, or dQ, dK and dV)\n"
          "and against the planner's configuration on this shape,\n"
          "times the ones that pass, and prints the fastest as a tuning rule for this device, dtype\n"
          "and head_dim (appended to --out FILE, which CLFLASH_TUNING_FILE can then name).\n"
          "\n"
          "  --batch N          batch entries (default 4)\n"
          "  --heads-q N        query heads (default 16)\n"
          "  --heads-kv N       K/V heads, dividing --heads-q (default: --heads-q)\n"
          "  --seq-q N          queries per head (default 4096)\n"
          "  --seq-k N          keys per head (default: --seq-q)\n"
          "  --head-dim D       head dimension (default 128)\n"
          "  --dtype T          f32, f16 or bf16 (default f16)\n"
          "  --causal           causal masking\n"
          "  --backward         tune the backward's gradient kernel (O and lse from the forward, once)\n"
          "  --device STR       as clflash-bench --device\n"
          "  --try SPEC         a candidate setting to try (repeatable, up to 64); without it the\n"
          "                     tool's own candidates for the kernel\n"
          "  --max-candidates N at most N of the tool's candidates (default: all)\n"
          "  --candidates-only  the planner's configuration is measured but cannot win\n"
          "  --min-time S       seconds of back-to-back calls per candidate (default 0.3)\n"
          "  --warmup N         untimed calls per candidate (default 2)\n"
          "  --tolerance T      the checks' tolerance, |x - ref| <= T * (1 + |ref|) (default by dtype,\n"
          "                     twice as large for the backward)\n"
          "  --out FILE         append the winning rule to FILE\n",
          f);
}

static int parse(int argc, char **argv, tune_options *o)
{
    static const char *const flags[] = {"--causal", "--candidates-only", "--backward", NULL};
    static const char *const valued[] = {"--batch",  "--heads-q",   "--heads-kv", "--seq-q",          "--seq-k",
                                         "--head-dim", "--dtype",   "--device",   "--try",            "--min-time",
                                         "--warmup", "--tolerance", "--out",      "--max-candidates", NULL};
    int heads_kv_set = 0, seq_k_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *name, *val;
        const int rc = tool_next_option(argc, argv, &i, flags, valued, help, &name, &val);
        if (rc >= 0)
            return rc;
        uint64_t v = 0;
        uint32_t *field = NULL;
        uint64_t lo = 1, hi = 1u << 30;
        if (strcmp(name, "--causal") == 0) {
            o->causal = 1;
        } else if (strcmp(name, "--candidates-only") == 0) {
            o->candidates_only = 1;
        } else if (strcmp(name, "--backward") == 0) {
            o->backward = 1;
        } else if (strcmp(name, "--dtype") == 0) {
            if (!parse_dtype(val, &o->dtype) || o->dtype == CLFLASH_I8)
                return usage_error("--dtype wants f32, f16 or bf16, not '%s'", val);
        } else if (strcmp(name, "--device") == 0) {
            o->device = val;
        } else if (strcmp(name, "--out") == 0) {
            o->out = val;
        } else if (strcmp(name, "--try") == 0) {
            if (o->ntries == MAX_TRIES)
                return usage_error("at most %d --try options", MAX_TRIES);
            o->tries[o->ntries++] = val;
        } else if (strcmp(name, "--min-time") == 0 || strcmp(name, "--tolerance") == 0) {
            char *end;
            const double x = strtod(val, &end);
            if (*end != '\0' || !(x >= 0.0) || x > 100.0)
                return usage_error("%s wants a decimal number from 0 to 100, not '%s'", name, val);
            if (name[2] == 'm')
                o->min_time = x;
            else
                o->tolerance = x;
        } else if (strcmp(name, "--max-candidates") == 0) {
            if (!parse_uint(val, 1, 100000, &v))
                return usage_error("--max-candidates wants a whole number from 1, not '%s'", val);
            o->max_candidates = (size_t)v;
        } else {
            if (strcmp(name, "--batch") == 0) field = &o->batch, hi = CLFLASH_MAX_BATCH;
            else if (strcmp(name, "--heads-q") == 0) field = &o->heads_q, hi = CLFLASH_MAX_HEADS;
            else if (strcmp(name, "--heads-kv") == 0) field = &o->heads_kv, hi = CLFLASH_MAX_HEADS, heads_kv_set = 1;
            else if (strcmp(name, "--seq-q") == 0) field = &o->seq_q, hi = CLFLASH_MAX_SEQ_Q;
            else if (strcmp(name, "--seq-k") == 0) field = &o->seq_k, hi = CLFLASH_MAX_SEQ_K, seq_k_set = 1;
            else if (strcmp(name, "--head-dim") == 0) field = &o->head_dim, hi = CLFLASH_MAX_HEAD_DIM;
            else field = &o->warmup, lo = 0, hi = 1000;
            if (!parse_uint(val, lo, hi, &v))
                return usage_error("%s wants a whole number from %llu to %llu, not '%s'", name,
                                   (unsigned long long)lo, (unsigned long long)hi, val);
            *field = (uint32_t)v;
        }
    }
    if (!heads_kv_set)
        o->heads_kv = o->heads_q;
    if (!seq_k_set)
        o->seq_k = o->seq_q;
    if (o->heads_q % o->heads_kv != 0)
        return usage_error("--heads-kv %u does not divide --heads-q %u", o->heads_kv, o->heads_q);
    if (o->tolerance == 0.0)
        o->tolerance = (o->dtype == CLFLASH_F32 ? 2e-4 : o->dtype == CLFLASH_F16 ? 4e-3 : 2.5e-2) * (o->backward ? 2 : 1);
    return -1;
}

/* ---- candidates ------------------------------------------------------------------------------- */

typedef struct {
    char **spec;
    size_t n, cap;
} spec_list;

static void add_spec(spec_list *l, char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->spec = xrealloc(l->spec, l->cap * sizeof *l->spec);
    }
    l->spec[l->n++] = s;
}

/* The register tiles of the portable kernel's GPU path: RM rows per work-item, TC work-items per
 * row group, BQ query rows per work-group, work-groups of 32 to max_wg work-items; on an Intel GPU
 * (large_grf) each also in the 256-register mode. */
static void regtile_candidates(spec_list *l, size_t max_wg, const char *prefix, int large_grf)
{
    static const unsigned rms[] = {1, 2, 4, 8}, tcs[] = {4, 8, 16, 32}, bqs[] = {16, 32, 64, 128};
    add_spec(l, xprintf("%sportable.regtile=0", prefix));
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t q = 0; q < 4; q++) {
                const unsigned wg = bqs[q] / rms[a] * tcs[b];
                if (bqs[q] % rms[a] == 0 && wg >= 32 && wg <= max_wg)
                    for (int grf = 0; grf <= large_grf; grf++)
                        add_spec(l, xprintf("%sportable.regtile=%ux%ux%u%s", prefix, rms[a], tcs[b], bqs[q],
                                            grf ? ",portable.large_grf=1" : ""));
            }
}

/* The portable kernels' preferences on their lane path (GPU) or CPU path: a cap on B, and on the
 * lane path the work-items per row (B x lanes within max_wg). */
static void preference_candidates(spec_list *l, size_t max_wg, const char *prefix, int lanes)
{
    static const unsigned blocks[] = {16, 32, 64, 128}, tprs[] = {1, 2, 4, 8, 16, 32};
    for (size_t b = 0; b < 4; b++) {
        if (!lanes) {
            add_spec(l, xprintf("%sportable.max_block=%u", prefix, blocks[b]));
            continue;
        }
        for (size_t t = 0; t < 6; t++)
            if (blocks[b] * tprs[t] <= max_wg)
                add_spec(l, xprintf("%sportable.max_block=%u,portable.threads_per_row=%u,portable.max_work_group=%u",
                                    prefix, blocks[b], tprs[t], blocks[b] * tprs[t]));
    }
}

/* The tensor-core forward: a cap on B, warps, 16-row slices per warp, K/V stages. With split parts
 * (decoding) the work-groups are small and the merge matters: one or two warps, deeper pipelines,
 * the merge kernel or the fused merge with its load shapes. */
/* The Hopper forward's loops: with and without a producer warpgroup (the waiting loop's tiles by
 * TMA or by cp.async; the pipelined loop has no TMA), pipelined or not, one to three consumer
 * warpgroups (the planner clamps what a loop cannot take). */
static void nv_wgmma_candidates(spec_list *l)
{
    for (unsigned pipe = 0; pipe <= 1; pipe++)
        for (unsigned prod = 0; prod <= 1; prod++)
            for (unsigned tma = 0; tma <= (prod && !pipe); tma++)
                for (unsigned wgs = 1; wgs <= 3; wgs++)
                    add_spec(l, xprintf("nv_wgmma.pipeline=%u,nv_wgmma.producer=%u,nv_wgmma.tma=%u,"
                                        "nv_wgmma.warpgroups=%u",
                                        pipe, prod, tma, wgs));
}

static void nv_forward_candidates(spec_list *l, int split)
{
    static const unsigned blocks[] = {16, 32, 48, 64}, warps[] = {1, 2, 4, 8}, mtiles[] = {1, 2}, stages[] = {2, 3, 4};
    static const unsigned groups[] = {2, 4, 8}, parts[] = {4, 8, 16};
    if (split) {
        for (size_t b = 0; b < 2; b++)
            for (unsigned w = 1; w <= 2; w++)
                for (unsigned s = 2; s <= 5; s++) {
                    const char *base = "nv_forward.block=%u,nv_forward.warps=%u,nv_forward.mtiles=1,nv_forward.stages=%u";
                    char *head = xprintf(base, blocks[b], w, s);
                    add_spec(l, xprintf("%s,nv_forward.fused_merge=0", head));
                    for (size_t g = 0; g < 3; g++)
                        for (size_t u = 0; u < 3; u++)
                            add_spec(l, xprintf("%s,nv_forward.fused_merge=1,nv_forward.merge_group=%u,"
                                                "nv_forward.merge_parts=%u",
                                                head, groups[g], parts[u]));
                    free(head);
                }
        return;
    }
    for (size_t b = 0; b < 4; b++)
        for (size_t w = 0; w < 4; w++)
            for (size_t m = 0; m < 2; m++)
                for (size_t s = 0; s < 3; s++)
                    add_spec(l, xprintf("nv_forward.block=%u,nv_forward.warps=%u,nv_forward.mtiles=%u,nv_forward.stages=%u",
                                        blocks[b], warps[w], mtiles[m], stages[s]));
}

/* The backward's gradient kernels: on tensor cores a cap on B, warps and how the dK/dV groups copy
 * Q and dO; the portable kernel's B and work-items per row (B x lanes within max_wg), on a CPU also
 * on its CPU path (one work-item per row). */
static void nv_backward_candidates(spec_list *l)
{
    static const unsigned blocks[] = {16, 32, 48, 64}, warps[] = {2, 4, 8};
    for (size_t b = 0; b < 4; b++)
        for (size_t w = 0; w < 3; w++)
            for (int stream = 0; stream <= 1; stream++)
                add_spec(l, xprintf("nv_backward.block=%u,nv_backward.warps=%u,nv_backward.stream=%d", blocks[b],
                                    warps[w], stream));
}

static void portable_backward_candidates(spec_list *l, size_t max_wg, int cpu)
{
    static const unsigned blocks[] = {8, 16, 32, 64}, tprs[] = {1, 2, 4, 8, 16};
    for (size_t b = 0; b < 4; b++) {
        if (cpu)
            add_spec(l, xprintf("portable.cpu_path=1,portable_backward.max_block=%u", blocks[b]));
        for (size_t t = 0; t < 5; t++)
            if (blocks[b] * tprs[t] <= max_wg)
                add_spec(l, xprintf("portable.cpu_path=0,portable_backward.max_block=%u,"
                                    "portable_backward.threads_per_row=%u,portable_backward.max_work_group=%u",
                                    blocks[b], tprs[t], blocks[b] * tprs[t]));
    }
}

/* ---- device buffers (the check shape's fp64 reference: tools/tune_reference.c) ------------------ */

typedef struct {
    clflash_attention_desc d;
    cl_mem q, k, v, o;
    cl_mem d_o, lse, dq, dk, dv; /* --backward: O and lse from one forward, dO random */
    void *host_q, *host_k, *host_v, *host_do;
    size_t nq, nk; /* elements */
    size_t nout;   /* elements a run reads back: O (nq), or dQ, dK, dV (nq + 2 nk) */
} problem;

static clflash_attention_desc make_desc(const tune_options *o, uint32_t batch, uint32_t seq_q, uint32_t seq_k)
{
    clflash_attention_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.batch = batch;
    d.heads_q = o->heads_q;
    d.heads_kv = o->heads_kv;
    d.seq_q = seq_q;
    d.seq_k = seq_k;
    d.head_dim = o->head_dim;
    d.dtype = o->dtype;
    d.flags = o->causal ? CLFLASH_CAUSAL : 0;
    return d;
}

static int make_problem(clflash_context *c, const tune_options *o, uint32_t batch, uint32_t seq_q, uint32_t seq_k,
                        uint64_t seed, problem *p)
{
    const size_t es = clflash_dtype_size(o->dtype);
    cl_int err = CL_SUCCESS;
    memset(p, 0, sizeof *p);
    p->d = make_desc(o, batch, seq_q, seq_k);
    p->nq = (size_t)batch * o->heads_q * seq_q * o->head_dim;
    p->nk = (size_t)batch * o->heads_kv * seq_k * o->head_dim;
    p->host_q = xmalloc(p->nq * es);
    p->host_k = xmalloc(p->nk * es);
    p->host_v = xmalloc(p->nk * es);
    fill_random(p->host_q, p->nq, o->dtype, seed);
    fill_random(p->host_k, p->nk, o->dtype, seed + 1);
    fill_random(p->host_v, p->nk, o->dtype, seed + 2);
    const cl_context ctx = clflash_context_cl(c);
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    p->q = clCreateBuffer(ctx, in, p->nq * es, p->host_q, &err);
    if (err == CL_SUCCESS)
        p->k = clCreateBuffer(ctx, in, p->nk * es, p->host_k, &err);
    if (err == CL_SUCCESS)
        p->v = clCreateBuffer(ctx, in, p->nk * es, p->host_v, &err);
    if (err == CL_SUCCESS)
        p->o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, p->nq * es, NULL, &err);
    p->nout = p->nq;
    if (err == CL_SUCCESS && o->backward) {
        const size_t rows = (size_t)batch * o->heads_q * seq_q;
        p->nout = p->nq + 2 * p->nk;
        p->host_do = xmalloc(p->nq * es);
        fill_random(p->host_do, p->nq, o->dtype, seed + 3);
        p->d_o = clCreateBuffer(ctx, in, p->nq * es, p->host_do, &err);
        if (err == CL_SUCCESS)
            p->lse = clCreateBuffer(ctx, CL_MEM_READ_WRITE, rows * sizeof(float), NULL, &err);
        if (err == CL_SUCCESS)
            p->dq = clCreateBuffer(ctx, CL_MEM_READ_WRITE, p->nq * es, NULL, &err);
        if (err == CL_SUCCESS)
            p->dk = clCreateBuffer(ctx, CL_MEM_READ_WRITE, p->nk * es, NULL, &err);
        if (err == CL_SUCCESS)
            p->dv = clCreateBuffer(ctx, CL_MEM_READ_WRITE, p->nk * es, NULL, &err);
        if (err == CL_SUCCESS) { /* O and lse once, with the context's settings before any candidate */
            const clflash_status st = clflash_forward(c, &p->d, NULL, p->q, p->k, p->v, p->o, p->lse, 0, NULL, NULL);
            if (st != CLFLASH_SUCCESS) {
                fprintf(stderr, "%s: the forward for the backward's O and lse failed: %s (%s)\n", tool_name(),
                        clflash_status_string(st), clflash_last_error_detail());
                return 0;
            }
        }
    }
    if (err != CL_SUCCESS)
        fprintf(stderr, "%s: allocating %zu + 2 x %zu elements on the device failed (%d)\n", tool_name(), p->nq, p->nk,
                (int)err);
    return err == CL_SUCCESS;
}

static void free_problem(problem *p)
{
    if (p->q) clReleaseMemObject(p->q);
    if (p->k) clReleaseMemObject(p->k);
    if (p->v) clReleaseMemObject(p->v);
    if (p->o) clReleaseMemObject(p->o);
    const cl_mem grads[] = {p->d_o, p->lse, p->dq, p->dk, p->dv};
    for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++)
        if (grads[i])
            clReleaseMemObject(grads[i]);
    free(p->host_q);
    free(p->host_k);
    free(p->host_v);
    free(p->host_do);
}

/* One call as the timing repeats it: the forward, or with d_o the backward. */
static clflash_status call_once(clflash_context *c, const problem *p)
{
    if (p->d_o)
        return clflash_backward(c, &p->d, NULL, p->q, p->k, p->v, p->o, p->d_o, p->lse, p->dq, p->dk, p->dv, 0, NULL,
                                NULL);
    return clflash_forward(c, &p->d, NULL, p->q, p->k, p->v, p->o, NULL, 0, NULL, NULL);
}

/* Runs the problem's call once and reads its output back into out (nout elements of the dtype: O,
 * or dQ, dK and dV one after another). */
static clflash_status run_once(clflash_context *c, problem *p, void *out)
{
    const clflash_status st = call_once(c, p);
    if (st != CLFLASH_SUCCESS)
        return st;
    const size_t es = clflash_dtype_size(p->d.dtype);
    const cl_command_queue queue = clflash_context_queue(c);
    cl_int err;
    if (p->d_o) {
        char *at = out;
        err = clEnqueueReadBuffer(queue, p->dq, CL_TRUE, 0, p->nq * es, at, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(queue, p->dk, CL_TRUE, 0, p->nk * es, at + p->nq * es, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(queue, p->dv, CL_TRUE, 0, p->nk * es, at + (p->nq + p->nk) * es, 0, NULL, NULL);
    } else {
        err = clEnqueueReadBuffer(queue, p->o, CL_TRUE, 0, p->nq * es, out, 0, NULL, NULL);
    }
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : (clflash_status)err;
}

/* The plan of the problem's call: clflash_plan_attention, or with --backward clflash_plan_backward. */
static clflash_status plan_call(clflash_context *c, const tune_options *o, const clflash_attention_desc *d,
                                clflash_plan *p)
{
    return o->backward ? clflash_plan_backward(c, d, p) : clflash_plan_attention(c, d, p);
}

/* The largest |x - ref| / (1 + |ref|) over n elements (NaN if any is not finite). */
static double worst_error(const void *x, clflash_dtype t, const void *ref, clflash_dtype ref_t, const double *ref64,
                          size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double a = element_value(x, i, t), b = ref64 ? ref64[i] : element_value(ref, i, ref_t);
        const double e = fabs(a - b) / (1.0 + fabs(b));
        if (!(e == e) || isinf(a))
            return NAN;
        if (e > worst)
            worst = e;
    }
    return worst;
}

/* ---- the sweep ------------------------------------------------------------------------------------ */

typedef struct {
    char tuning[sizeof(((clflash_plan *)0)->tuning)];
    double seconds;
} tried;

static const char *param_keys(const char *kernel)
{
    if (strcmp(kernel, "nv_mma_backward") == 0)
        return "nv_backward.block=,nv_backward.warps=,nv_backward.maxrregcount=,nv_backward.stream=,nv_backward.chunk=";
    if (strcmp(kernel, "flash_backward_portable") == 0)
        return "portable.cpu_path=,portable_backward.max_block=,portable_backward.threads_per_row=,"
               "portable_backward.max_work_group=";
    if (strcmp(kernel, "nv_wgmma_forward") == 0)
        return "nv_wgmma.pipeline=,nv_wgmma.producer=,nv_wgmma.tma=,nv_wgmma.warpgroups=,nv_wgmma.block=,"
               "nv_wgmma.stages=";
    if (strcmp(kernel, "nv_mma_forward") == 0)
        return "nv_forward.block=,nv_forward.warps=,nv_forward.mtiles=,nv_forward.stages=,nv_forward.fused_merge=,"
               "nv_forward.merge_group=,nv_forward.merge_parts=,nv_forward.merge_lse_batch=,nv_forward.merge_prefetch=";
    return "portable.cpu_path=,portable.regtile=,portable.large_grf=,portable.max_block=,portable.threads_per_row=,"
           "portable.max_work_group=";
}

int main(int argc, char **argv)
{
    tune_options o;
    memset(&o, 0, sizeof o);
    o.batch = 4;
    o.heads_q = 16;
    o.seq_q = 4096;
    o.head_dim = 128;
    o.dtype = CLFLASH_F16;
    o.min_time = 0.3;
    o.warmup = 2;
    tool_set_name("clflash-tune");
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;

    clflash_context *c = bench_open_context(o.device, NULL, NULL);
    if (c == NULL)
        return 1;
    char device_name[256] = "";
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_NAME, sizeof device_name - 1, device_name, NULL);
    device_name[strcspn(device_name, ",;#")] = '\0'; /* a part of the name is a condition: no separators */
    trim(device_name);
    size_t max_wg = 0;
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    char vendor[256] = "";
    cl_device_type type = 0;
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_TYPE, sizeof type, &type, NULL);
    const int intel_gpu = strstr(vendor, "Intel") != NULL && (type & CL_DEVICE_TYPE_GPU) != 0;

    const clflash_attention_desc shape = make_desc(&o, o.batch, o.seq_q, o.seq_k);
    clflash_plan def = {.struct_size = sizeof def};
    clflash_status st = plan_call(c, &o, &shape, &def);
    if (st != CLFLASH_SUCCESS) {
        fprintf(stderr, "%s: the shape cannot be planned: %s (%s)\n", tool_name(), clflash_status_string(st),
                clflash_last_error_detail());
        clflash_context_free(c);
        return 1;
    }
    const char *const clear = param_keys(def.kernel);

    spec_list cands = {0};
    if (o.ntries) {
        for (size_t i = 0; i < o.ntries; i++)
            add_spec(&cands, xstrdup(o.tries[i]));
    } else if (strcmp(def.kernel, "nv_mma_backward") == 0) {
        nv_backward_candidates(&cands);
    } else if (o.backward) {
        portable_backward_candidates(&cands, max_wg, (type & CL_DEVICE_TYPE_CPU) != 0);
    } else if (strcmp(def.kernel, "nv_wgmma_forward") == 0) {
        nv_wgmma_candidates(&cands);
    } else if (strcmp(def.kernel, "nv_mma_forward") == 0) {
        nv_forward_candidates(&cands, def.splits > 1);
    } else if (strcmp(def.kernel, "flash_forward_regtile") == 0 || (type & CL_DEVICE_TYPE_CPU) == 0) {
        /* a GPU: the register tiles, and the lane path's B and work-items per row */
        regtile_candidates(&cands, max_wg, "portable.cpu_path=0,", intel_gpu);
        preference_candidates(&cands, max_wg, "portable.cpu_path=0,portable.regtile=0,", 1);
    } else { /* the CPU paths (flash_forward_portable, flash_decode_cpu): the CPU path or the GPU paths */
        add_spec(&cands, xstrdup("portable.cpu_path=1"));
        preference_candidates(&cands, max_wg, "portable.cpu_path=1,", 0);
        regtile_candidates(&cands, max_wg, "portable.cpu_path=0,", intel_gpu);
    }
    const size_t ncand = o.max_candidates && cands.n > o.max_candidates ? o.max_candidates : cands.n;

    /* the check shape: the same heads, dtype, head_dim and mask, few rows, keys not a multiple of B */
    /* 37 query rows; 131 where the call runs on the Hopper kernel, which by default takes only calls
     * of 128 rows a head or more (131 keys stay too few for nv_mma_forward to split them) */
    const uint32_t rows = strcmp(def.kernel, "nv_wgmma_forward") == 0 ? 131 : 37;
    const uint32_t check_q = o.seq_q < rows ? o.seq_q : rows, check_k = o.seq_k < 131 ? o.seq_k : 131;
    problem big, small;
    if (!make_problem(c, &o, o.batch, o.seq_q, o.seq_k, 1234, &big) ||
        !make_problem(c, &o, 1, check_q, check_k, 99, &small)) {
        clflash_context_free(c);
        return 1;
    }
    const size_t es = clflash_dtype_size(o.dtype);
    double *ref = xmalloc(small.nout * sizeof *ref);
    const tune_shape check = {1, o.heads_q, o.heads_kv, check_q, check_k, o.head_dim, o.dtype, o.causal};
    if (o.backward)
        tune_reference_backward(&check, small.host_q, small.host_k, small.host_v, small.host_do, ref, ref + small.nq,
                                ref + small.nq + small.nk);
    else
        tune_reference_forward(&check, small.host_q, small.host_k, small.host_v, ref);
    void *out_def = xmalloc(big.nout * es), *out = xmalloc(big.nout * es), *out_small = xmalloc(small.nout * es);

    printf("device      %s\n", device_name);
    printf("shape       batch %u, heads %u/%u, seq_q %u, seq_k %u, head_dim %u, %s%s%s\n", o.batch, o.heads_q,
           o.heads_kv, o.seq_q, o.seq_k, o.head_dim, dtype_name(o.dtype), o.causal ? ", causal" : "",
           o.backward ? ", backward" : "");
    printf("kernel      %s, planner's settings %s\n", def.kernel, def.tuning[0] ? def.tuning : "(none)");
    printf("candidates  %zu; checked on batch 1, seq_q %u, seq_k %u against fp64 (tolerance %g)\n", ncand,
           check_q, check_k, o.tolerance);
    {
        clflash_plan cp = {.struct_size = sizeof cp};
        if (plan_call(c, &o, &small.d, &cp) == CLFLASH_SUCCESS && strcmp(cp.kernel, def.kernel) != 0)
            printf("warning: the check shape runs on %s, not %s: only the agreement on the whole shape checks the "
                   "candidates' kernel\n",
                   cp.kernel, def.kernel);
    }
    printf("\n");

    /* the planner's configuration first (with the settings the context already has, a tuning file's
     * among them: the configuration "def" reports): the agreement check's reference and the time to
     * beat; each candidate below then sets every parameter of the kernel */
    bench_call call = {c, &big.d, clflash_context_queue(c), big.q, big.k, big.v, big.o, big.d_o, big.lse, big.dq, big.dk,
                       big.dv};
    unsigned calls = 0;
    double def_s = -1.0;
    if ((st = run_once(c, &big, out_def)) == CLFLASH_SUCCESS) {
        for (uint32_t w = 0; w < o.warmup; w++)
            call_once(c, &big);
        def_s = bench_back_to_back(&call, 0.0, 0.05, 1000, o.min_time, &calls);
    }
    if (def_s < 0) {
        fprintf(stderr, "%s: the planner's configuration failed: %s (%s)\n", tool_name(), clflash_status_string(st),
                clflash_last_error_detail());
        clflash_context_free(c);
        return 1;
    }
    const double def_small = run_once(c, &small, out_small) == CLFLASH_SUCCESS
                                 ? worst_error(out_small, o.dtype, NULL, o.dtype, ref, small.nout)
                                 : NAN;
    if (!(def_small <= o.tolerance))
        printf("warning: the planner's configuration differs from the fp64 reference by %.2e on the check shape\n",
               def_small);
    printf("%-10s %-9s %-9s %s\n", "ms", "check", "agrees", "settings the plan reports");
    printf("%-10.4f %-9s %-9s %s  (the planner's)\n", def_s * 1e3, "-", "-", def.tuning);

    tried *seen = xmalloc((ncand + 1) * sizeof *seen);
    size_t nseen = 0, passed = 0;
    tried best = {"", o.candidates_only ? INFINITY : def_s};
    if (!o.candidates_only)
        snprintf(best.tuning, sizeof best.tuning, "%s", def.tuning);
    for (size_t i = 0; i < ncand; i++) {
        char *spec = xprintf("%s,%s", clear, cands.spec[i]);
        clflash_plan p = {.struct_size = sizeof p};
        st = clflash_context_set_tuning(c, spec);
        free(spec);
        if (st == CLFLASH_SUCCESS)
            st = plan_call(c, &o, &shape, &p);
        if (st != CLFLASH_SUCCESS) {
            printf("%-10s %-9s %-9s %s: %s\n", "-", "refused", "-", cands.spec[i], clflash_last_error_detail());
            continue;
        }
        int dup = !o.candidates_only && strcmp(p.tuning, def.tuning) == 0;
        for (size_t k = 0; k < nseen && !dup; k++)
            dup = strcmp(seen[k].tuning, p.tuning) == 0;
        if (dup)
            continue; /* stepped down to a configuration already measured */
        snprintf(seen[nseen++].tuning, sizeof seen[0].tuning, "%s", p.tuning);
        double e_small = NAN, e_big = NAN;
        if (run_once(c, &small, out_small) == CLFLASH_SUCCESS)
            e_small = worst_error(out_small, o.dtype, NULL, o.dtype, ref, small.nout);
        if (run_once(c, &big, out) == CLFLASH_SUCCESS)
            e_big = worst_error(out, o.dtype, out_def, o.dtype, NULL, big.nout);
        const int ok_small = e_small <= o.tolerance, ok_big = e_big <= 2 * o.tolerance;
        char cs[24], cb[24];
        snprintf(cs, sizeof cs, ok_small ? "ok" : "FAIL %.1e", e_small);
        snprintf(cb, sizeof cb, ok_big ? "ok" : "FAIL %.1e", e_big);
        if (!ok_small || !ok_big) {
            printf("%-10s %-9s %-9s %s\n", "-", cs, cb, p.tuning);
            continue;
        }
        for (uint32_t w = 0; w < o.warmup; w++)
            call_once(c, &big);
        const double s = bench_back_to_back(&call, 0.0, 0.05, 1000, o.min_time, &calls);
        passed++;
        printf("%-10.4f %-9s %-9s %s\n", s * 1e3, cs, cb, p.tuning);
        fflush(stdout);
        if (s < best.seconds) {
            best.seconds = s;
            snprintf(best.tuning, sizeof best.tuning, "%s", p.tuning);
        }
    }
    if (best.tuning[0])
        printf("\nbest        %s: %.4f ms, %.3fx the planner's %.4f ms (%zu of %zu candidates passed both checks)\n",
               best.tuning, best.seconds * 1e3, def_s / best.seconds, def_s * 1e3, passed, nseen);

    rc = 0;
    if (passed == 0 && (nseen > 0 || o.candidates_only)) { /* (none seen: all were the planner's) */
        fprintf(stderr, "%s: no candidate passed the checks\n", tool_name());
        rc = 1;
    } else if (o.out) {
        FILE *f = fopen(o.out, "a");
        char date[32] = "";
        const time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
        if (f == NULL || fprintf(f,
                                 "# clflash-tune %s, %s: batch %u, heads %u/%u, seq_q %u, seq_k %u%s%s: %.4f ms "
                                 "(the planner's %.4f)\ndevice=%s,dtype=%s,head_dim=%u,%s\n",
                                 clflash_version_string(), date, o.batch, o.heads_q, o.heads_kv, o.seq_q, o.seq_k,
                                 o.causal ? ", causal" : "", o.backward ? ", backward" : "", best.seconds * 1e3, def_s * 1e3, device_name,
                                 dtype_name(o.dtype), o.head_dim, best.tuning) < 0 ||
            fclose(f) != 0) {
            fprintf(stderr, "%s: writing %s failed\n", tool_name(), o.out);
            rc = 1;
        } else {
            printf("written     to %s (load it with CLFLASH_TUNING_FILE=%s)\n", o.out, o.out);
        }
    }
    for (size_t i = 0; i < cands.n; i++)
        free(cands.spec[i]);
    free(cands.spec);
    free(seen);
    free(ref);
    free(out_def);
    free(out);
    free(out_small);
    free_problem(&big);
    free_problem(&small);
    clflash_context_free(c);
    return rc;
}
