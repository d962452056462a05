/*
 * test_alloc_faults.c - failure injection into clflash's own allocations and OpenCL calls, without
 * touching lib/: this executable links the STATIC library with -Wl,--wrap=malloc,... (see
 * fault_inject.h and reliability.cmake), so every heap allocation and OpenCL object creation or
 * enqueue made by clflash's code goes through counters that can fail the k-th one.
 *
 * For each public entry point (context create, create_default, plan, forward, forward_naive,
 * forward_host (with two split-KV parts, so that its scratch and merge paths fail too), the
 * build-log path, backward (with a bias and bias_grad, so that the dBias kernel fails too)) and
 * k = 1, 2, 3, ...: fail the k-th heap allocation (or the k-th OpenCL creation/enqueue, with
 * CL_OUT_OF_HOST_MEMORY) inside the call; then require
 *   - a failure status: CLFLASH_ERROR_OUT_OF_HOST_MEMORY for a heap failure, the injected OpenCL
 *     error (or clflash's out-of-memory status) for an OpenCL one, with a detail message;
 *   - nothing kept: the wrapped heap blocks and the OpenCL objects alive are what they were before
 *     the call (and, after the context is freed, what they were before it was created);
 *   - the caller's outputs untouched (O and lse, or dQ, read back after the queue drained);
 *   - the context still usable: the next call on the same context, uninjected, succeeds and gives
 *     the same bits as a call on a context that never saw a failure (whose forward results are
 *     checked against the fp64 reference), and leaves nothing behind;
 * until k passes the number of allocations the call makes: that run must succeed.
 *
 * What a device with a slow compiler pays for is OpenCL contexts and program builds, so they are
 * spent only where the code under test makes them:
 *   - the two create entry points get a fresh context per k (create_default creates the OpenCL
 *     context itself; create wraps one OpenCL context per loop);
 *   - every call path gets one OpenCL context per loop, and two walks over k:
 *     the cold walk runs the call on a clflash context whose program cache is empty (a sibling
 *     created with clflash_context_create on the loop's OpenCL context: a queue, no build), so the
 *     cache-miss paths (options string, cache entry, clCreateProgramWithSource, clBuildProgram
 *     and its log) fail too. The sibling is kept while failures leave nothing in its cache, so
 *     each next call on it shows whether the failure left the cache usable; a failure that left a
 *     program cached is followed by a check call on the same sibling, then a fresh sibling. Once a
 *     failure leaves every program the call needs in the cache, the remaining k reach only code
 *     that runs after the builds, which is the warm walk's: the cold walk stops there.
 *     The warm walk runs the call on the loop's one context with its cache filled, over every k of
 *     a warm call, with the strict check that nothing at all is kept (not even cache entries);
 *   - the build-log path builds with an invalid option on a fresh sibling per k (a failed build is
 *     never cached), and the check call on the same sibling must fail the same way with a new log.
 * Each test prints what it cost: OpenCL contexts created, programs built, seconds.
 *
 * Also the documented CL_OUT_OF_RESOURCES retry: a refused launch makes clflash_forward step B
 * down and succeed; a device that refuses every launch gets the error after a bounded number of
 * attempts; a forced B is never stepped down.
 *
 * A test case that finds a library bug fails with the exact k and call; see the report at the end
 * of each message ("k = ..."). The whole executable is also run by the sanitizer tree, so a crash
 * or a leak on any failure path is reported by ASan/LSan as well.
 */
#include "check_common.h"
#include "fault_inject.h"

#include <math.h>
#include <stdarg.h>
#include <time.h>

enum { EP_CREATE, EP_CREATE_DEFAULT, EP_PLAN, EP_FORWARD, EP_NAIVE, EP_HOST, EP_BUILD_LOG, EP_BACKWARD, EP_COUNT };
static const char *const ep_names[EP_COUNT] = {"clflash_context_create", "clflash_context_create_default",
                                               "clflash_plan_attention", "clflash_forward",
                                               "clflash_forward_naive", "clflash_forward_host",
                                               "build failure and clflash_context_build_log", "clflash_backward"};

static const char bad_build_options[] = "-this-is-not-an-option";

/* Everything one loop (an entry point, heap or OpenCL failures) shares. */
typedef struct {
    int ep;
    clflash_context *home; /* the loop's context: its OpenCL context and device are everyone's */
    th_case t;
    cl_mem q, k, v, o, lse, d_o, dq, dk, dv;
    cl_mem bias, dbias; /* the backward's bias and bias_grad (so that its dBias path fails too) */
    /* What a call on a context that never saw a failure returned: O and lse (forward paths),
     * dQ, dK and dV (backward), the plan (plan). */
    unsigned char *good[3];
    size_t good_bytes[3];
    clflash_plan good_plan;
    /* The build-log path: the newest log after the previous call on the context under test. */
    const char *last_log;
} env_t;

static clflash_attention_desc fault_desc(void)
{
    /* GQA, causal, odd lengths: every code path of a call, at a size that builds and runs fast */
    return th_desc(1, 2, 1, 13, 17, 8, CLFLASH_F32, CLFLASH_CAUSAL);
}

static cl_mem from_host(cl_context ctx, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

/* A blocking write returns once the host bytes are copied, which the OpenCL specification does not
 * say is once the buffer holds them: the clFinish completes the write, so that a read through
 * another context's queue (the next call may run on a fresh sibling) cannot see what the buffer
 * held before, which would look as if the failed call had written it. */
static void write_buffer(clflash_context *c, cl_mem m, const void *host, size_t bytes)
{
    ck_assert_int_eq(clEnqueueWriteBuffer(clflash_context_queue(c), m, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clFinish(clflash_context_queue(c)), CL_SUCCESS);
}

static void read_buffer(clflash_context *c, cl_mem m, void *host, size_t bytes)
{
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), m, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                     CL_SUCCESS);
}

static int is_call_path(int ep)
{
    return ep != EP_CREATE && ep != EP_CREATE_DEFAULT;
}

static int device_outputs(int ep)
{
    return ep == EP_FORWARD || ep == EP_NAIVE || ep == EP_BACKWARD;
}

/* The loop's context, case and buffers; nothing is armed. For the backward, O and lse are the
 * reference forward's (so that the gradients are finite numbers) and dO is Q's values. */
static void loop_setup(int ep, env_t *e)
{
    memset(e, 0, sizeof *e);
    e->ep = ep;
    const clflash_attention_desc d = fault_desc();
    ck_assert_int_eq(th_case_init(&e->t, &d, 77), 0);
    th_case_reference(&e->t);
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    if (ep == EP_BUILD_LOG)
        opt.build_options = bad_build_options;
    if (ep == EP_CREATE_DEFAULT)
        return; /* the call makes its own */
    e->home = test_context(&opt);
    if (!device_outputs(ep))
        return;
    th_case *t = &e->t;
    cl_context ctx = clflash_context_cl(e->home);
    e->q = from_host(ctx, t->q, t->nq * t->esize);
    e->k = from_host(ctx, t->k, t->nk * t->esize);
    e->v = from_host(ctx, t->v, t->nv * t->esize);
    if (ep != EP_BACKWARD) {
        e->o = from_host(ctx, t->o, t->no * t->esize);
        e->lse = from_host(ctx, t->lse, t->nlse * 4);
        return;
    }
    float *o = malloc(t->no * 4), *lse = malloc(t->nlse * 4);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(lse);
    for (uint64_t i = 0; i < t->no; i++)
        o[i] = (float)t->ref_o[i]; /* f32, contiguous: O's layout is the reference's dense one */
    for (size_t i = 0; i < t->nlse; i++)
        lse[i] = (float)t->ref_lse[i];
    e->o = from_host(ctx, o, t->no * 4);
    e->lse = from_host(ctx, lse, t->nlse * 4);
    free(o);
    free(lse);
    e->d_o = from_host(ctx, t->q, t->nq * t->esize);
    {   /* a small bias, so that the reference's lse still gives finite gradients */
        const clflash_attention_desc d = fault_desc();
        const size_t n = (size_t)d.batch * d.heads_q * d.seq_q * d.seq_k;
        float *b = malloc(n * 4);
        ck_assert_ptr_nonnull(b);
        for (size_t i = 0; i < n; i++)
            b[i] = 0.05f * (float)((int)(i % 7) - 3) / 3.0f;
        e->bias = from_host(ctx, b, n * 4);
        e->dbias = from_host(ctx, b, n * 4);
        free(b);
    }
    e->dq = from_host(ctx, t->q, t->nq * t->esize);
    e->dk = from_host(ctx, t->k, t->nk * t->esize);
    e->dv = from_host(ctx, t->v, t->nv * t->esize);
}

static void loop_teardown(env_t *e)
{
    cl_mem *all[] = {&e->q, &e->k, &e->v, &e->o, &e->lse, &e->d_o, &e->dq, &e->dk, &e->dv, &e->bias, &e->dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i])
            clReleaseMemObject(*all[i]);
    for (int i = 0; i < 3; i++)
        free(e->good[i]);
    clflash_context_free(e->home);
    th_case_free(&e->t);
}

/* A clflash context on the loop's OpenCL context and device, with an empty program cache. */
static clflash_context *sibling(const env_t *e)
{
    clflash_context_options opt;
    clflash_context *s = NULL;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    if (e->ep == EP_BUILD_LOG)
        opt.build_options = bad_build_options;
    const clflash_status st =
        clflash_context_create(clflash_context_cl(e->home), clflash_context_device(e->home), &opt, &s);
    ck_assert_msg(st == CLFLASH_SUCCESS, "clflash_context_create: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    return s;
}

/* One call of the entry point. The create entry points use the loop's OpenCL context and device
 * (create) or find their own (create_default) and return the context in *created; the others run
 * on c. */
static clflash_status call(env_t *e, clflash_context *c, clflash_context **created, cl_event *done,
                           clflash_plan *plan)
{
    const clflash_attention_desc d = fault_desc();
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    memset(plan, 0, sizeof *plan);
    plan->struct_size = sizeof *plan;
    opt.build_options = "-DCLFLASH_FAULT_TEST=1"; /* a string the context must copy */
    switch (e->ep) {
    case EP_CREATE:
        return clflash_context_create(clflash_context_cl(e->home), clflash_context_device(e->home), &opt, created);
    case EP_CREATE_DEFAULT: return clflash_context_create_default(&opt, created);
    case EP_PLAN:
    case EP_BUILD_LOG: return clflash_plan_attention(c, &d, plan);
    case EP_FORWARD: return clflash_forward(c, &d, NULL, e->q, e->k, e->v, e->o, e->lse, 0, NULL, done);
    case EP_NAIVE: return clflash_forward_naive(c, &d, NULL, e->q, e->k, e->v, e->o, e->lse, 0, NULL, done);
    case EP_HOST: { /* through the split-KV path: the scratch pool and the merge kernel fail too */
        clflash_attention_desc split = d;
        split.num_splits = 2;
        return clflash_forward_host(c, &split, e->t.q, e->t.k, e->t.v, e->t.o, e->t.lse);
    }
    case EP_BACKWARD: { /* with a bias and its gradient: the bias-gradient kernel fails too */
        clflash_attention_desc with_bias = d;
        with_bias.bias = e->bias;
        with_bias.bias_grad = e->dbias;
        return clflash_backward(c, &with_bias, NULL, e->q, e->k, e->v, e->o, e->d_o, e->lse, e->dq, e->dk, e->dv, 0,
                                NULL, done);
    }
    default: return CLFLASH_ERROR_INVALID_ARGUMENT;
    }
}

static void wait_release(cl_event *done)
{
    if (*done) {
        clWaitForEvents(1, done);
        clReleaseEvent(*done);
        *done = NULL;
    }
}

/* Puts back what the outputs held before any call (the sentinel, or dQ, dK, dV's starting values),
 * so that the next failed call can be checked for writing them. */
static void restore_outputs(env_t *e, clflash_context *c)
{
    th_case *t = &e->t;
    th_case_reset_outputs(t);
    if (e->ep == EP_FORWARD || e->ep == EP_NAIVE) {
        write_buffer(c, e->o, t->o, t->no * t->esize);
        write_buffer(c, e->lse, t->lse, t->nlse * 4);
    } else if (e->ep == EP_BACKWARD) {
        write_buffer(c, e->dq, t->q, t->nq * t->esize);
        write_buffer(c, e->dk, t->k, t->nk * t->esize);
        write_buffer(c, e->dv, t->v, t->nv * t->esize);
    }
}

/* Field by field: the struct has padding, which a copy need not keep. */
static int same_plan(const clflash_plan *a, const clflash_plan *b)
{
    return a->block == b->block && a->tile_bytes == b->tile_bytes && a->local_mem_budget == b->local_mem_budget &&
           a->kernel_local_bytes == b->kernel_local_bytes && a->score_matrix_bytes == b->score_matrix_bytes &&
           a->tiles_q == b->tiles_q && a->tiles_k == b->tiles_k && a->kv_passes == b->kv_passes &&
           a->kernel == b->kernel && a->threads_per_row == b->threads_per_row &&
           a->work_group_size == b->work_group_size && a->block_q == b->block_q;
}

/* After a call that returned CLFLASH_SUCCESS on c (done = its event, plan = its plan): NULL if the
 * result is right, else what is wrong. `pristine`: c never saw a failure; its forward results are
 * checked against the reference and its bits become the ones every later call must reproduce. The
 * outputs are restored afterwards. */
static const char *result_wrong(env_t *e, clflash_context *c, cl_event *done, const clflash_plan *plan,
                                int pristine, char *msg, size_t n)
{
    th_case *t = &e->t;
    const char *wrong = NULL;
    unsigned char *got[3] = {NULL, NULL, NULL};
    size_t bytes[3] = {0, 0, 0};
    cl_mem from[3] = {NULL, NULL, NULL};
    wait_release(done);
    msg[0] = '\0';
    switch (e->ep) {
    case EP_PLAN:
        if (pristine)
            e->good_plan = *plan;
        else if (!same_plan(plan, &e->good_plan))
            wrong = "the plan differs from a fresh context's";
        return wrong;
    case EP_FORWARD:
    case EP_NAIVE:
        from[0] = e->o;
        from[1] = e->lse;
        bytes[0] = t->no * t->esize;
        bytes[1] = t->nlse * 4;
        break;
    case EP_HOST:
        bytes[0] = t->no * t->esize;
        bytes[1] = t->nlse * 4;
        break;
    case EP_BACKWARD:
        from[0] = e->dq;
        from[1] = e->dk;
        from[2] = e->dv;
        bytes[0] = t->nq * t->esize;
        bytes[1] = t->nk * t->esize;
        bytes[2] = t->nv * t->esize;
        break;
    default: return "no result to check";
    }
    for (int i = 0; i < 3; i++) {
        if (!bytes[i])
            continue;
        got[i] = malloc(bytes[i]);
        ck_assert_ptr_nonnull(got[i]);
        if (from[i])
            read_buffer(c, from[i], got[i], bytes[i]);
        else
            memcpy(got[i], i == 0 ? t->o : (const void *)t->lse, bytes[i]);
    }
    if (pristine) {
        if (e->ep != EP_BACKWARD) { /* against the fp64 reference */
            memcpy(t->o, got[0], bytes[0]);
            memcpy(t->lse, got[1], bytes[1]);
            if (th_check(t, 1, e->ep == EP_NAIVE ? REF_PATH_NAIVE : REF_PATH_FLASH, msg, n) != 0)
                wrong = msg;
        } else { /* the backward has its own suite; here its results must at least be numbers */
            for (int i = 0; i < 3 && !wrong; i++)
                for (size_t j = 0; j < bytes[i] / 4 && !wrong; j++)
                    if (!isfinite(((const float *)got[i])[j]))
                        wrong = "a gradient is not finite";
        }
        for (int i = 0; i < 3; i++) {
            e->good[i] = got[i];
            e->good_bytes[i] = bytes[i];
            got[i] = NULL;
        }
    } else {
        static const char *const names[2][3] = {{"O", "lse", ""}, {"dQ", "dK", "dV"}};
        for (int i = 0; i < 3 && !wrong; i++)
            if (bytes[i] && memcmp(got[i], e->good[i], bytes[i]) != 0) {
                snprintf(msg, n, "%s differs from what a fresh context computes",
                         names[e->ep == EP_BACKWARD][i]);
                wrong = msg;
            }
    }
    for (int i = 0; i < 3; i++)
        free(got[i]);
    restore_outputs(e, c);
    return wrong;
}

/* NULL if the caller-visible outputs of a failed call on c still hold what they held before it,
 * else which output changed. */
static const char *outputs_written(env_t *e, clflash_context *c)
{
    if (!c)
        return NULL;
    clFinish(clflash_context_queue(c)); /* anything still pending lands now */
    th_case *t = &e->t;
    if (e->ep == EP_HOST) {
        int o_same = 1;
        for (uint64_t i = 0; i < t->no && o_same; i++)
            o_same = ((const uint32_t *)t->o)[i] == TH_SENTINEL_F32;
        if (!o_same)
            return "o (host array)";
        return th_outputs_untouched(t) ? NULL : "lse (host array)";
    }
    if (!device_outputs(e->ep))
        return NULL;
    const size_t ob = t->no * t->esize, lb = t->nlse * 4;
    unsigned char *o = malloc(ob), *l = malloc(lb);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(l);
    const char *written = NULL;
    if (e->ep == EP_BACKWARD) { /* the gradients must keep the inputs they were initialised from */
        const size_t qb = t->nq * t->esize;
        unsigned char *g = malloc(qb);
        ck_assert_ptr_nonnull(g);
        read_buffer(c, e->dq, g, qb);
        if (memcmp(g, t->q, qb) != 0)
            written = "dq";
        free(g);
    } else {
        read_buffer(c, e->o, o, ob);
        read_buffer(c, e->lse, l, lb);
        written = memcmp(o, t->o, ob) != 0 ? "o buffer" : memcmp(l, t->lse, lb) != 0 ? "lse buffer" : NULL;
    }
    free(o);
    free(l);
    return written;
}

typedef struct {
    long blocks;
    long cl[FI_CL_KINDS];
} snapshot;

static snapshot take(void)
{
    snapshot s;
    s.blocks = fi_live_blocks();
    for (int i = 0; i < FI_CL_KINDS; i++)
        s.cl[i] = fi_cl_live((fi_cl_kind)i);
    return s;
}

/* The same snapshot with what the context's caches may legitimately add (programs, the plan cache's
 * kernel objects, the scratch pool's buffers with the event and queue of their last use, and their
 * heap entries, which the context keeps until clflash_context_free) taken from `base`. A real leak
 * still shows after the context is freed. */
static snapshot without_cache(snapshot s, const snapshot *base)
{
    s.blocks = base->blocks;
    s.cl[FI_CL_PROGRAM] = base->cl[FI_CL_PROGRAM];
    s.cl[FI_CL_KERNEL] = base->cl[FI_CL_KERNEL];
    s.cl[FI_CL_MEM] = base->cl[FI_CL_MEM];
    s.cl[FI_CL_EVENT] = base->cl[FI_CL_EVENT];
    s.cl[FI_CL_QUEUE] = base->cl[FI_CL_QUEUE];
    return s;
}

/* "" if equal, else what differs. */
static const char *diff(const snapshot *a, const snapshot *b, char *buf, size_t n)
{
    static const char *const names[FI_CL_KINDS] = {"context", "queue", "mem", "program", "kernel", "event"};
    size_t used = 0;
    buf[0] = '\0';
    if (a->blocks != b->blocks)
        used += (size_t)snprintf(buf + used, n - used, "%ld heap blocks ", b->blocks - a->blocks);
    for (int i = 0; i < FI_CL_KINDS && used + 1 < n; i++)
        if (a->cl[i] != b->cl[i])
            used += (size_t)snprintf(buf + used, n - used, "%ld cl_%s ", b->cl[i] - a->cl[i], names[i]);
    return buf;
}

/* Collects the problems of one loop: every k is tried, and all problems are reported at the end. */
typedef struct {
    int count;
    char text[3000];
} problems;

static void problem(problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems *p, const char *fmt, ...)
{
    const size_t used = strlen(p->text);
    if (p->count++ < 8 && used + 2 < sizeof p->text) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->text + used, sizeof p->text - used - 1, fmt, ap);
        va_end(ap);
        strcat(p->text, "\n");
    }
}

/* One armed call: fails the k-th heap allocation (cl_mode 0) or OpenCL creation/enqueue
 * (cl_mode 1) inside it. Returns whether the failure fired; *detail gets the detail message. */
static int armed_call(env_t *e, clflash_context *c, int cl_mode, long k, clflash_status *st,
                      clflash_context **created, cl_event *done, clflash_plan *plan, char *detail, size_t n)
{
    fi_arm(cl_mode ? 0 : k, cl_mode ? k : 0, CL_OUT_OF_HOST_MEMORY);
    *st = call(e, c, created, done, plan);
    const int fired = cl_mode ? fi_cl_fired() : fi_alloc_fired();
    fi_disarm();
    snprintf(detail, n, "%s", clflash_last_error_detail());
    return fired;
}

/* The checks on a call that an injected failure made fail (see the top of the file). */
static void check_failure(env_t *e, clflash_context *c, int cl_mode, clflash_status st, const char *detail,
                          clflash_context *created, cl_event done, const char *what, problems *pr)
{
    const int ep = e->ep;
    int ok_status;
    if (ep == EP_BUILD_LOG) /* keeping the log is best effort: the build still fails with its status */
        ok_status = st == CLFLASH_ERROR_BUILD_FAILED || st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY ||
                    (cl_mode && st == CL_OUT_OF_HOST_MEMORY);
    else if (cl_mode)
        ok_status = st == CL_OUT_OF_HOST_MEMORY || st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    else
        ok_status = st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    if (!ok_status)
        problem(pr, "%s: the injected failure was answered with %d %s (%s)", what, st, clflash_status_string(st),
                detail);
    else if (strlen(detail) == 0 && ep != EP_BUILD_LOG)
        problem(pr, "%s: failed without a detail message", what);
    if (!is_call_path(ep) && st != CLFLASH_SUCCESS && created != NULL)
        problem(pr, "%s: *out was set by a failing create", what);
    if (device_outputs(ep) && st != CLFLASH_SUCCESS && done != NULL)
        problem(pr, "%s: *done was set by a failing call", what);
    if (ep == EP_BUILD_LOG && clflash_context_build_log(c) == NULL)
        problem(pr, "%s: clflash_context_build_log returned NULL", what);
    const char *written = st != CLFLASH_SUCCESS ? outputs_written(e, c) : NULL;
    if (written)
        problem(pr, "%s (%s): the failed call wrote the caller's %s after returning", what, clflash_status_string(st),
                written);
}

/* The check of an uninjected call on c: a success with the right result, or for the build-log
 * path the build failure with a new, non-empty log. Returns 1 if it holds. */
static int uninjected_ok(env_t *e, clflash_context *c, clflash_status st, const char *detail, cl_event *done,
                         const clflash_plan *plan, int pristine, const char *what, problems *pr)
{
    char msg[2400];
    if (e->ep == EP_BUILD_LOG) {
        const char *log = clflash_context_build_log(c);
        if (st != CLFLASH_ERROR_BUILD_FAILED)
            problem(pr, "%s: got %s instead of the build failure", what, clflash_status_string(st));
        else if (!log || strlen(log) == 0 || log == e->last_log)
            problem(pr, "%s: the build failed but kept no new log", what);
        else
            return 1;
        return 0;
    }
    if (st != CLFLASH_SUCCESS) {
        wait_release(done);
        problem(pr, "%s: got %s (%s)", what, clflash_status_string(st), detail);
        return 0;
    }
    const char *wrong = result_wrong(e, c, done, plan, pristine, msg, sizeof msg);
    if (wrong) {
        problem(pr, "%s: %s", what, wrong);
        return 0;
    }
    return 1;
}

/* The create entry points: a fresh context per k (made by the call), as a user's would be. */
static long creation_walk(env_t *e, int cl_mode, problems *pr)
{
    char what[256], buf[256], detail[512];
    long k;
    for (k = 1;; k++) {
        ck_assert_msg(k < 5000, "%s: still failing after %ld injections", ep_names[e->ep], k);
        const snapshot before = take();
        clflash_context *created = NULL;
        cl_event done = NULL;
        clflash_plan plan = {.struct_size = sizeof plan};
        clflash_status st;
        const int fired = armed_call(e, NULL, cl_mode, k, &st, &created, &done, &plan, detail, sizeof detail);
        snprintf(what, sizeof what, "%s, %s k = %ld", ep_names[e->ep], cl_mode ? "OpenCL call" : "heap allocation", k);
        if (!fired) { /* k is past the last allocation of the call: it must simply work */
            ck_assert_msg(st == CLFLASH_SUCCESS && created, "%s: no injection, got %s (%s)", what,
                          clflash_status_string(st), detail);
            clflash_context_free(created);
            const snapshot end = take();
            if (strlen(diff(&before, &end, buf, sizeof buf)) != 0)
                problem(pr, "%s: after freeing the context, %s remain", what, buf);
            return k - 1;
        }
        check_failure(e, created, cl_mode, st, detail, created, done, what, pr);
        if (st != CLFLASH_SUCCESS) {
            const snapshot after = take();
            if (strlen(diff(&before, &after, buf, sizeof buf)) != 0)
                problem(pr, "%s: the failed call kept %s", what, buf);
        }
        clflash_context_free(created);
        const snapshot end = take();
        if (strlen(diff(&before, &end, buf, sizeof buf)) != 0)
            problem(pr, "%s: after freeing everything, %s remain", what, buf);
    }
}

/* The cold walk of a call path (see the top of the file). Returns the number of failures injected. */
static long cold_walk(env_t *e, int cl_mode, problems *pr)
{
    char what[256], buf[256], detail[512], detail2[512];
    clflash_context *s = NULL;
    snapshot s_first = take();
    long k;
    for (k = 1;; k++) {
        ck_assert_msg(k < 5000, "%s: still failing after %ld injections", ep_names[e->ep], k);
        if (!s) {
            s_first = take();
            s = sibling(e);
            e->last_log = clflash_context_build_log(s);
        }
        snprintf(what, sizeof what, "%s, %s k = %ld (empty program cache)", ep_names[e->ep],
                 cl_mode ? "OpenCL call" : "heap allocation", k);
        const snapshot before = take();
        cl_event done = NULL;
        clflash_plan plan = {.struct_size = sizeof plan};
        clflash_status st;
        const int fired = armed_call(e, s, cl_mode, k, &st, NULL, &done, &plan, detail, sizeof detail);
        if (!fired) { /* k is past the last allocation of the call: it must simply work */
            uninjected_ok(e, s, st, detail, &done, &plan, 0, what, pr);
            break;
        }
        check_failure(e, s, cl_mode, st, detail, NULL, done, what, pr);
        wait_release(&done);
        snapshot after = take();
        const long cached = after.cl[FI_CL_PROGRAM] - before.cl[FI_CL_PROGRAM];
        /* A failure after a successful build keeps the program in the cache (the context's until
         * clflash_context_free), and a failed build keeps its log: those heap blocks and programs
         * are the context's. The check after freeing the sibling still catches any real leak. */
        if (cl_mode || e->ep == EP_BUILD_LOG || cached > 0)
            after = without_cache(after, &before);
        if (st != CLFLASH_SUCCESS && strlen(diff(&before, &after, buf, sizeof buf)) != 0)
            problem(pr, "%s: the failed call kept %s", what, buf);
        if (cached <= 0 && e->ep != EP_BUILD_LOG)
            continue; /* the cache gained nothing: the next k runs on this sibling, as cold as before */

        /* The same sibling, uninjected: must work (a half-made cache entry would show here). */
        const snapshot pre = take();
        e->last_log = clflash_context_build_log(s);
        st = call(e, s, NULL, &done, &plan);
        snprintf(detail2, sizeof detail2, "%s", clflash_last_error_detail());
        snprintf(what, sizeof what, "%s, the call after %s k = %ld on the same context", ep_names[e->ep],
                 cl_mode ? "OpenCL call" : "heap allocation", k);
        uninjected_ok(e, s, st, detail2, &done, &plan, 0, what, pr);
        const long built_after = take().cl[FI_CL_PROGRAM] - pre.cl[FI_CL_PROGRAM];
        clflash_context_free(s);
        s = NULL;
        const snapshot end = take();
        if (strlen(diff(&s_first, &end, buf, sizeof buf)) != 0)
            problem(pr, "%s: after freeing the context, %s remain", what, buf);
        if (e->ep != EP_BUILD_LOG && built_after == 0) {
            k++; /* counted as injected below */
            break; /* the failed call had cached every program the call needs */
        }
    }
    if (s) {
        clflash_context_free(s);
        const snapshot end = take();
        if (strlen(diff(&s_first, &end, buf, sizeof buf)) != 0)
            problem(pr, "%s, %s k = %ld: after freeing the context, %s remain", ep_names[e->ep],
                    cl_mode ? "OpenCL call" : "heap allocation", k, buf);
    }
    return k - 1;
}

/* The warm walk of a call path on the loop's context, whose cache holds what the call needs. */
static long warm_walk(env_t *e, int cl_mode, problems *pr)
{
    char what[256], buf[256], detail[512], detail2[512];
    long k;
    for (k = 1;; k++) {
        ck_assert_msg(k < 5000, "%s: still failing after %ld injections", ep_names[e->ep], k);
        snprintf(what, sizeof what, "%s, %s k = %ld (warm program cache)", ep_names[e->ep],
                 cl_mode ? "OpenCL call" : "heap allocation", k);
        const snapshot before = take();
        cl_event done = NULL;
        clflash_plan plan = {.struct_size = sizeof plan};
        clflash_status st;
        const int fired = armed_call(e, e->home, cl_mode, k, &st, NULL, &done, &plan, detail, sizeof detail);
        if (!fired) {
            uninjected_ok(e, e->home, st, detail, &done, &plan, 0, what, pr);
            const snapshot end = take();
            if (strlen(diff(&before, &end, buf, sizeof buf)) != 0)
                problem(pr, "%s: a successful call on a warm context kept %s", what, buf);
            break;
        }
        check_failure(e, e->home, cl_mode, st, detail, NULL, done, what, pr);
        wait_release(&done);
        const snapshot after = take(); /* strict: the cache was warm, so nothing may be added */
        if (st != CLFLASH_SUCCESS && strlen(diff(&before, &after, buf, sizeof buf)) != 0)
            problem(pr, "%s: the failed call kept %s", what, buf);
        st = call(e, e->home, NULL, &done, &plan);
        snprintf(detail2, sizeof detail2, "%s", clflash_last_error_detail());
        snprintf(what, sizeof what, "%s, the call after %s k = %ld on the same warm context", ep_names[e->ep],
                 cl_mode ? "OpenCL call" : "heap allocation", k);
        uninjected_ok(e, e->home, st, detail2, &done, &plan, 0, what, pr);
        const snapshot end = take();
        if (strlen(diff(&before, &end, buf, sizeof buf)) != 0)
            problem(pr, "%s: the context holds %s more than before the failed call", what, buf);
    }
    return k - 1;
}

/* The loop described at the top. cl_mode 0: heap allocations; 1: OpenCL creations/enqueues. */
static void fault_loop(int ep, int cl_mode)
{
    const char *name = ep_names[ep];
    const char *kind = cl_mode ? "OpenCL calls" : "heap allocations";
    char buf[256];
    problems pr;
    memset(&pr, 0, sizeof pr);
    const snapshot start = take();
    env_t e;
    loop_setup(ep, &e);
    if (!is_call_path(ep)) {
        const long n = creation_walk(&e, cl_mode, &pr);
        fprintf(stderr, "%s: %ld %s failed one at a time, %d problem(s)\n", name, n, kind, pr.count);
    } else {
        /* The loop's context, never injected: its result is the one every later call must give. */
        char detail[512];
        cl_event done = NULL;
        clflash_plan plan = {.struct_size = sizeof plan};
        e.last_log = clflash_context_build_log(e.home);
        const clflash_status st = call(&e, e.home, NULL, &done, &plan);
        snprintf(detail, sizeof detail, "%s", clflash_last_error_detail());
        char what[200];
        snprintf(what, sizeof what, "%s on a fresh context, no injection", name);
        if (!uninjected_ok(&e, e.home, st, detail, &done, &plan, 1, what, &pr))
            ck_abort_msg("%s", pr.text);
        const long cold = cold_walk(&e, cl_mode, &pr);
        const long warm = ep == EP_BUILD_LOG ? 0 : warm_walk(&e, cl_mode, &pr);
        fprintf(stderr, "%s: %ld %s failed one at a time with an empty program cache, %ld with a warm one, %d problem(s)\n",
                name, cold, kind, warm, pr.count);
    }
    loop_teardown(&e);
    const snapshot end = take();
    if (strlen(diff(&start, &end, buf, sizeof buf)) != 0)
        problem(&pr, "%s: after the last run, %s remain", name, buf);
    ck_assert_msg(pr.count == 0, "%d problem(s) (first 8):\n%s", pr.count, pr.text);
}

START_TEST(heap_failures)
{
    fault_loop(_i, 0);
}
END_TEST

START_TEST(opencl_failures)
{
    fault_loop(_i, 1);
}
END_TEST

/* ---- CL_OUT_OF_RESOURCES at enqueue --------------------------------------------------------------- */

/* One refused launch: clflash_forward plans a smaller B, launches again, and the result is right. */
START_TEST(refused_launch_steps_block_down)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = th_desc(1, 2, 1, 37, 41, 16, CLFLASH_F32, CLFLASH_CAUSAL);
    const snapshot before = take();
    fi_fail_ndrange(1, CL_OUT_OF_RESOURCES);
    run_and_check(c, &d, TH_FLASH, 1, 1, 91);
    const long launches = fi_ndrange_calls();
    fi_fail_ndrange(0, 0);
    ck_assert_msg(launches == 2, "expected the refused launch and one retry, saw %ld launches", launches);
    char buf[256];
    const snapshot after = without_cache(take(), &before);
    ck_assert_msg(strlen(diff(&before, &after, buf, sizeof buf)) == 0, "the retry kept %s", buf);
    clflash_context_free(c);
}
END_TEST

/* A device that refuses every launch: the error after a bounded number of attempts, nothing kept,
 * nothing written. _i = 0: planner's B (retries), 1: forced B (no retry), 2: the naive path. */
START_TEST(refused_launches_give_up)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 2, 1, 37, 41, 16, CLFLASH_F32, CLFLASH_CAUSAL);
    if (_i == 1)
        d.block = 16;
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 92), 0);
    const snapshot before = take();
    fi_fail_ndrange(-1, CL_OUT_OF_RESOURCES);
    const clflash_status st = th_run_device(c, &t, _i == 2 ? TH_NAIVE : TH_FLASH, 1, NULL);
    const long launches = fi_ndrange_calls();
    fi_fail_ndrange(0, 0);
    ck_assert_msg(st == CL_OUT_OF_RESOURCES, "got %s (%s)", clflash_status_string(st), clflash_last_error_detail());
    if (_i == 0)
        ck_assert_msg(launches >= 2 && launches <= 8, "%ld launches: expected a few retries, bounded", launches);
    else
        ck_assert_msg(launches == 1, "%ld launches: a %s must not be retried", launches,
                      _i == 1 ? "forced block" : "naive launch");
    ck_assert_msg(th_outputs_untouched(&t), "O or lse was written");
    char buf[256];
    const snapshot after = without_cache(take(), &before);
    ck_assert_msg(strlen(diff(&before, &after, buf, sizeof buf)) == 0, "the failed call kept %s", buf);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- an implementation that overstates its kernels' local memory ------------------------------ */

/* Mesa's rusticl 22.3 reports twice each kernel's static local memory as CL_KERNEL_LOCAL_MEM_SIZE;
 * here every report is doubled and the budget is 32 KiB (llvmpipe's): the forward and backward
 * plans must be those of the true reports (before, the backward fell from B = 32 to 8), and the
 * forward must still give the right result. */
START_TEST(doubled_local_report)
{
    const clflash_attention_desc d = th_desc(1, 2, 1, 37, 41, 64, CLFLASH_F32, CLFLASH_CAUSAL);
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.local_mem_budget = 32768;
    clflash_plan want_f = {.struct_size = sizeof want_f}, want_b = want_f, got_f = want_f, got_b = want_f;
    clflash_context *c = test_context(&opt);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &want_f), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_backward(c, &d, &want_b), CLFLASH_SUCCESS);
    clflash_context_free(c);
    fi_scale_kernel_local(2);
    c = test_context(&opt);
    const clflash_status sf = clflash_plan_attention(c, &d, &got_f), sb = clflash_plan_backward(c, &d, &got_b);
    if (sf == CLFLASH_SUCCESS && sb == CLFLASH_SUCCESS)
        run_and_check(c, &d, TH_FLASH, 1, 1, 93);
    fi_scale_kernel_local(1);
    clflash_context_free(c);
    ck_assert_int_eq(sf, CLFLASH_SUCCESS);
    ck_assert_int_eq(sb, CLFLASH_SUCCESS);
    ck_assert_msg(got_f.block == want_f.block && strcmp(got_f.kernel, want_f.kernel) == 0,
                  "forward: B = %u (%s) with doubled reports, %u (%s) without", got_f.block, got_f.kernel,
                  want_f.block, want_f.kernel);
    ck_assert_msg(got_b.block == want_b.block && strcmp(got_b.kernel, want_b.kernel) == 0,
                  "backward: B = %u (%s) with doubled reports, %u (%s) without", got_b.block, got_b.kernel,
                  want_b.block, want_b.kernel);
}
END_TEST

/* ---- what each test costs (contexts and builds are what a slow device pays for) ------------------ */
static struct timespec cost_start;

static void cost_setup(void)
{
    clock_gettime(CLOCK_MONOTONIC, &cost_start);
}

static void cost_report(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double s = (double)(now.tv_sec - cost_start.tv_sec) + 1e-9 * (double)(now.tv_nsec - cost_start.tv_nsec);
    fprintf(stderr, "cost: %ld OpenCL context(s) created, %ld program build(s) (%ld of them failed), %.2f s\n",
            fi_contexts_created(), fi_programs_built(), fi_builds_failed(), s);
}

static Suite *faults_suite(void)
{
    Suite *s = suite_create("alloc_faults");
    TCase *th = tcase_create("heap");
    tcase_set_timeout(th, TEST_TIMEOUT_S);
    tcase_add_checked_fixture(th, cost_setup, cost_report);
    tcase_add_loop_test(th, heap_failures, 0, EP_COUNT);
    suite_add_tcase(s, th);
    TCase *tc = tcase_create("opencl");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_checked_fixture(tc, cost_setup, cost_report);
    tcase_add_loop_test(tc, opencl_failures, 0, EP_COUNT);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("out_of_resources");
    tcase_set_timeout(tr, TEST_TIMEOUT_S);
    tcase_add_checked_fixture(tr, cost_setup, cost_report);
    tcase_add_test(tr, refused_launch_steps_block_down);
    tcase_add_loop_test(tr, refused_launches_give_up, 0, 3);
    tcase_add_test(tr, doubled_local_report);
    suite_add_tcase(s, tr);
    return s;
}

int main(void)
{
    return run_suite(faults_suite());
}
