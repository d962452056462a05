/*
 * test_alloc_faults.c - failure injection into clflash's own allocations and OpenCL calls, without
 * touching lib/: this executable links the STATIC library with -Wl,--wrap=malloc,... (see
 * fault_inject.h and reliability.cmake), so every heap allocation and OpenCL object creation or
 * enqueue made by clflash's code goes through counters that can fail the k-th one.
 *
 * For each public entry point (context create, create_default, plan, forward, forward_naive,
 * forward_host, the build-log path, backward) and k = 1, 2, 3, ...:
 *   set up (context, buffers) with nothing armed; fail the k-th heap allocation (or the k-th
 *   OpenCL creation/enqueue, with CL_OUT_OF_HOST_MEMORY) inside the call; then require
 *     - a failure status: CLFLASH_ERROR_OUT_OF_HOST_MEMORY for a heap failure, the injected OpenCL
 *       error (or clflash's out-of-memory status) for an OpenCL one, with a detail message;
 *     - nothing kept: the wrapped heap blocks and the OpenCL objects alive are what they were
 *       before the call (and, after the context is freed, what they were before the setup);
 *     - the caller's outputs untouched (O and lse read back after the queue drained);
 *   until k passes the number of allocations the call makes: that run must succeed.
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

enum { EP_CREATE, EP_CREATE_DEFAULT, EP_PLAN, EP_FORWARD, EP_NAIVE, EP_HOST, EP_BUILD_LOG, EP_BACKWARD, EP_COUNT };
static const char *const ep_names[EP_COUNT] = {"clflash_context_create", "clflash_context_create_default",
                                               "clflash_plan_attention", "clflash_forward",
                                               "clflash_forward_naive", "clflash_forward_host",
                                               "build failure and clflash_context_build_log", "clflash_backward"};

/* Everything one attempt needs. */
typedef struct {
    cl_context cl_ctx;   /* for EP_CREATE */
    cl_device_id cl_dev;
    clflash_context *c;  /* the context under test (created by the call for the create entry points) */
    th_case t;
    cl_mem q, k, v, o, lse, d_o, dq, dk, dv;
    cl_event done;
} env_t;

static clflash_attention_desc fault_desc(void)
{
    /* GQA, causal, odd lengths: every code path of a call, at a size that builds and runs fast */
    return th_desc(1, 2, 1, 13, 17, 8, CLFLASH_F32, CLFLASH_CAUSAL);
}

static cl_mem from_host(cl_context ctx, void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

static void first_device(cl_platform_id *plat, cl_device_id *dev)
{
    cl_uint n = 0;
    ck_assert_int_eq(clGetPlatformIDs(1, plat, &n), CL_SUCCESS);
    ck_assert_int_eq(clGetDeviceIDs(*plat, CL_DEVICE_TYPE_ALL, 1, dev, NULL), CL_SUCCESS);
}

static void setup(int ep, env_t *e)
{
    memset(e, 0, sizeof *e);
    const clflash_attention_desc d = fault_desc();
    ck_assert_int_eq(th_case_init(&e->t, &d, 77), 0);
    if (ep == EP_CREATE) {
        cl_platform_id plat;
        cl_int err;
        first_device(&plat, &e->cl_dev);
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
        e->cl_ctx = clCreateContext(props, 1, &e->cl_dev, NULL, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        return;
    }
    if (ep == EP_CREATE_DEFAULT)
        return;
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    if (ep == EP_BUILD_LOG)
        opt.build_options = "-this-is-not-an-option";
    e->c = test_context(&opt);
    if (ep == EP_FORWARD || ep == EP_NAIVE || ep == EP_BACKWARD) {
        cl_context ctx = clflash_context_cl(e->c);
        th_case *t = &e->t;
        e->q = from_host(ctx, t->q, t->nq * t->esize);
        e->k = from_host(ctx, t->k, t->nk * t->esize);
        e->v = from_host(ctx, t->v, t->nv * t->esize);
        e->o = from_host(ctx, t->o, t->no * t->esize);
        e->lse = from_host(ctx, t->lse, t->nlse * 4);
        if (ep == EP_BACKWARD) {
            e->d_o = from_host(ctx, t->o, t->no * t->esize);
            e->dq = from_host(ctx, t->q, t->nq * t->esize);
            e->dk = from_host(ctx, t->k, t->nk * t->esize);
            e->dv = from_host(ctx, t->v, t->nv * t->esize);
        }
    }
}

static clflash_status call(int ep, env_t *e)
{
    const clflash_attention_desc d = fault_desc();
    clflash_context_options opt;
    clflash_plan p;
    memset(&opt, 0, sizeof opt);
    opt.build_options = "-DCLFLASH_FAULT_TEST=1"; /* a string the context must copy */
    switch (ep) {
    case EP_CREATE: return clflash_context_create(e->cl_ctx, e->cl_dev, &opt, &e->c);
    case EP_CREATE_DEFAULT: return clflash_context_create_default(&opt, &e->c);
    case EP_PLAN:
    case EP_BUILD_LOG: return clflash_plan_attention(e->c, &d, &p);
    case EP_FORWARD: return clflash_forward(e->c, &d, NULL, e->q, e->k, e->v, e->o, e->lse, 0, NULL, &e->done);
    case EP_NAIVE:
        return clflash_forward_naive(e->c, &d, NULL, e->q, e->k, e->v, e->o, e->lse, 0, NULL, &e->done);
    case EP_HOST: return clflash_forward_host(e->c, &d, e->t.q, e->t.k, e->t.v, e->t.o, e->t.lse);
    case EP_BACKWARD:
        return clflash_backward(e->c, &d, NULL, e->q, e->k, e->v, e->o, e->d_o, e->lse, e->dq, e->dk, e->dv, 0, NULL,
                                &e->done);
    default: return CLFLASH_ERROR_INVALID_ARGUMENT;
    }
}

/* NULL if the caller-visible outputs of the call still hold what setup put there, else which
 * output changed. */
static const char *outputs_written(int ep, env_t *e)
{
    if (!e->c)
        return NULL;
    clFinish(clflash_context_queue(e->c)); /* anything still pending lands now */
    if (ep == EP_HOST) {
        th_case *t = &e->t;
        int o_same = 1;
        for (uint64_t i = 0; i < t->no && o_same; i++)
            o_same = ((const uint32_t *)t->o)[i] == TH_SENTINEL_F32;
        if (!o_same)
            return "o (host array)";
        return th_outputs_untouched(t) ? NULL : "lse (host array)";
    }
    if (ep != EP_FORWARD && ep != EP_NAIVE && ep != EP_BACKWARD)
        return NULL;
    th_case *t = &e->t;
    cl_command_queue qu = clflash_context_queue(e->c);
    const size_t ob = t->no * t->esize, lb = t->nlse * 4;
    unsigned char *o = malloc(ob), *l = malloc(lb);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(l);
    const char *written = NULL;
    if (ep == EP_BACKWARD) { /* the gradients must keep the inputs they were initialised from */
        const size_t qb = t->nq * t->esize;
        unsigned char *g = malloc(qb);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(clEnqueueReadBuffer(qu, e->dq, CL_TRUE, 0, qb, g, 0, NULL, NULL), CL_SUCCESS);
        if (memcmp(g, t->q, qb) != 0)
            written = "dq";
        free(g);
    } else {
        ck_assert_int_eq(clEnqueueReadBuffer(qu, e->o, CL_TRUE, 0, ob, o, 0, NULL, NULL), CL_SUCCESS);
        ck_assert_int_eq(clEnqueueReadBuffer(qu, e->lse, CL_TRUE, 0, lb, l, 0, NULL, NULL), CL_SUCCESS);
        written = memcmp(o, t->o, ob) != 0 ? "o buffer" : memcmp(l, t->lse, lb) != 0 ? "lse buffer" : NULL;
    }
    free(o);
    free(l);
    return written;
}

static void teardown(env_t *e)
{
    if (e->done) {
        clWaitForEvents(1, &e->done);
        clReleaseEvent(e->done);
    }
    cl_mem *all[] = {&e->q, &e->k, &e->v, &e->o, &e->lse, &e->d_o, &e->dq, &e->dk, &e->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i])
            clReleaseMemObject(*all[i]);
    clflash_context_free(e->c);
    if (e->cl_ctx)
        clReleaseContext(e->cl_ctx);
    th_case_free(&e->t);
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

/* The same snapshot with what the program cache may legitimately add (programs and their heap
 * entries, which the context keeps until clflash_context_free) taken from `base`. */
static snapshot without_cache(snapshot s, const snapshot *base)
{
    s.blocks = base->blocks;
    s.cl[FI_CL_PROGRAM] = base->cl[FI_CL_PROGRAM];
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

/* 1 if backward runs in this build (it was "not implemented" before the backward issue). */
static int backward_supported(void)
{
    env_t e;
    setup(EP_BACKWARD, &e);
    const clflash_status st = call(EP_BACKWARD, &e);
    teardown(&e);
    return st == CLFLASH_SUCCESS;
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

/* The loop described at the top. cl_mode 0: heap allocations; 1: OpenCL creations/enqueues. */
static void fault_loop(int ep, int cl_mode)
{
    const char *name = ep_names[ep];
    char what[256], buf[256];
    problems pr;
    memset(&pr, 0, sizeof pr);
    if (ep == EP_BACKWARD && !backward_supported()) {
        fprintf(stderr, "%s: not implemented in this build; nothing to inject into\n", name);
        return;
    }
    const snapshot start = take();
    long k;
    for (k = 1;; k++) {
        ck_assert_msg(k < 5000, "%s: still failing after %ld injections", name, k);
        const snapshot first = take();
        env_t e;
        setup(ep, &e);
        const snapshot before = take();
        fi_arm(cl_mode ? 0 : k, cl_mode ? k : 0, CL_OUT_OF_HOST_MEMORY);
        const clflash_status st = call(ep, &e);
        const int fired = cl_mode ? fi_cl_fired() : fi_alloc_fired();
        fi_disarm();
        char detail[512];
        snprintf(detail, sizeof detail, "%s", clflash_last_error_detail());
        snprintf(what, sizeof what, "%s, %s k = %ld", name, cl_mode ? "OpenCL call" : "heap allocation", k);

        if (!fired) { /* k is past the last allocation of the call: it must simply work */
            if (ep == EP_BUILD_LOG) {
                ck_assert_msg(st == CLFLASH_ERROR_BUILD_FAILED, "%s: no injection, got %s", what,
                              clflash_status_string(st));
                const char *log = clflash_context_build_log(e.c);
                ck_assert_msg(log && strlen(log) > 0, "%s: no injection, but the build log is empty", what);
            } else {
                ck_assert_msg(st == CLFLASH_SUCCESS, "%s: no injection, got %s (%s)", what, clflash_status_string(st),
                              detail);
            }
            teardown(&e);
            break;
        }

        /* an injected failure must be reported */
        int ok_status;
        if (ep == EP_BUILD_LOG) /* keeping the log is best effort: the build still fails with its status */
            ok_status = st == CLFLASH_ERROR_BUILD_FAILED || st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY ||
                        (cl_mode && st == CL_OUT_OF_HOST_MEMORY);
        else if (cl_mode)
            ok_status = st == CL_OUT_OF_HOST_MEMORY || st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        else
            ok_status = st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        if (!ok_status)
            problem(&pr, "%s: the injected failure was answered with %d %s (%s)", what, st, clflash_status_string(st),
                    detail);
        else if (strlen(detail) == 0 && ep != EP_BUILD_LOG)
            problem(&pr, "%s: failed without a detail message", what);
        if ((ep == EP_CREATE || ep == EP_CREATE_DEFAULT) && st != CLFLASH_SUCCESS && e.c != NULL)
            problem(&pr, "%s: *out was set by a failing create", what);
        if ((ep == EP_FORWARD || ep == EP_NAIVE || ep == EP_BACKWARD) && st != CLFLASH_SUCCESS && e.done != NULL)
            problem(&pr, "%s: *done was set by a failing call", what);
        if (ep == EP_BUILD_LOG && clflash_context_build_log(e.c) == NULL)
            problem(&pr, "%s: clflash_context_build_log returned NULL", what);

        /* Nothing may stay behind but the program cache's entries, which a failure after a
         * successful build keeps (they are the context's until clflash_context_free). */
        snapshot after = take();
        /* the build-log path keeps its log; a call that built a program keeps it in the cache
         * (whose heap entries are then indistinguishable here; the check after freeing the
         * context below still catches any real leak) */
        if (cl_mode || ep == EP_BUILD_LOG || st == CLFLASH_SUCCESS || after.cl[FI_CL_PROGRAM] > before.cl[FI_CL_PROGRAM])
            after = without_cache(after, &before);
        if (st != CLFLASH_SUCCESS && strlen(diff(&before, &after, buf, sizeof buf)) != 0)
            problem(&pr, "%s: the failed call kept %s", what, buf);
        const char *written = st != CLFLASH_SUCCESS ? outputs_written(ep, &e) : NULL;
        if (written)
            problem(&pr, "%s (%s): the failed call wrote the caller's %s after returning", what,
                    clflash_status_string(st), written);
        teardown(&e);
        const snapshot end = take();
        if (strlen(diff(&first, &end, buf, sizeof buf)) != 0)
            problem(&pr, "%s: after freeing everything, %s remain", what, buf);
    }
    const snapshot end = take();
    if (strlen(diff(&start, &end, buf, sizeof buf)) != 0)
        problem(&pr, "%s: after the last run, %s remain", name, buf);
    fprintf(stderr, "%s: %ld %s failed one at a time, %d problem(s)\n", name, k - 1,
            cl_mode ? "OpenCL calls" : "heap allocations", pr.count);
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

static Suite *faults_suite(void)
{
    Suite *s = suite_create("alloc_faults");
    TCase *th = tcase_create("heap");
    tcase_set_timeout(th, TEST_TIMEOUT_S);
    tcase_add_loop_test(th, heap_failures, 0, EP_COUNT);
    suite_add_tcase(s, th);
    TCase *tc = tcase_create("opencl");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, opencl_failures, 0, EP_COUNT);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("out_of_resources");
    tcase_set_timeout(tr, TEST_TIMEOUT_S);
    tcase_add_test(tr, refused_launch_steps_block_down);
    tcase_add_loop_test(tr, refused_launches_give_up, 0, 3);
    suite_add_tcase(s, tr);
    return s;
}

int main(void)
{
    return run_suite(faults_suite());
}
