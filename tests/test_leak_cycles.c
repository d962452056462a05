/*
 * test_leak_cycles.c - 1000 create/free cycles of a context, and 1000 calls of each call path
 * (plan, forward, forward_naive, forward_host, a failing backward), must not grow what clflash
 * holds.
 *
 * How it is measured, three ways:
 *  - exactly: this executable links the static library with --wrap (fault_inject.h), so every heap
 *    block and every OpenCL object (context, queue, buffer, program, kernel, event) that clflash
 *    creates is counted. After the warm-up call (which fills the program cache) the counts must not
 *    move over the 1000 calls, and after clflash_context_free they must be back at zero;
 *  - loosely: the process's resident set may not grow by more than RSS_SLACK_MIB between the end
 *    of the warm-up (call 100) and call 1000 (not checked under AddressSanitizer, whose quarantine
 *    holds freed memory on purpose); this also covers memory the OpenCL runtime holds for us;
 *  - by LeakSanitizer, when the sanitizer tree runs this executable (tests/lsan.supp hides only
 *    the OpenCL drivers' own leaks: PoCL's and LLVM's, NVIDIA's).
 */
#include "check_common.h"
#include "fault_inject.h"

#include <unistd.h>

#define CYCLES 1000
#define WARMUP 100
#define RSS_SLACK_MIB 8

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static long rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct {
    long blocks;
    long cl[FI_CL_KINDS];
} counts;

static counts now(void)
{
    counts s;
    s.blocks = fi_live_blocks();
    for (int i = 0; i < FI_CL_KINDS; i++)
        s.cl[i] = fi_cl_live((fi_cl_kind)i);
    return s;
}

static void expect_same(const counts *a, const counts *b, const char *when)
{
    static const char *const names[FI_CL_KINDS] = {"context", "queue", "mem", "program", "kernel", "event"};
    ck_assert_msg(a->blocks == b->blocks, "%s: %+ld live heap blocks", when, b->blocks - a->blocks);
    for (int i = 0; i < FI_CL_KINDS; i++)
        ck_assert_msg(a->cl[i] == b->cl[i], "%s: %+ld live cl_%s objects", when, b->cl[i] - a->cl[i], names[i]);
}

static void check_rss(long at_warmup, long at_end, const char *what)
{
    const long grew = at_end - at_warmup;
    fprintf(stderr, "%s: RSS %ld KiB after %d cycles, %ld KiB after %d (%+ld KiB)%s\n", what, at_warmup, WARMUP, at_end,
            CYCLES, grew, UNDER_ASAN ? "; not checked under ASan" : "");
    if (!UNDER_ASAN)
        ck_assert_msg(grew <= RSS_SLACK_MIB * 1024L, "%s: RSS grew by %ld KiB over %d cycles", what, grew,
                      CYCLES - WARMUP);
}

START_TEST(context_create_free)
{
    const counts start = now();
    long rss_warm = 0;
    for (int i = 0; i < CYCLES; i++) {
        clflash_context *c = NULL;
        const clflash_status st = clflash_context_create_default(NULL, &c);
        ck_assert_msg(st == CLFLASH_SUCCESS, "cycle %d: %s (%s)", i, clflash_status_string(st),
                      clflash_last_error_detail());
        clflash_context_free(c);
        if (i + 1 == WARMUP)
            rss_warm = rss_kib();
    }
    const counts end = now();
    expect_same(&start, &end, "after 1000 context create/free cycles");
    check_rss(rss_warm, rss_kib(), "context create/free");
}
END_TEST

enum { P_PLAN, P_FORWARD, P_NAIVE, P_HOST, P_BACKWARD_INVALID, P_COUNT };
static const char *const path_names[P_COUNT] = {"clflash_plan_attention", "clflash_forward", "clflash_forward_naive",
                                                "clflash_forward_host", "clflash_backward (invalid: no lse)"};

typedef struct {
    th_case t;
    cl_mem q, k, v, o, lse, d_o, dq, dk, dv;
} bufs;

static cl_mem mk(clflash_context *c, void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

static void bufs_make(clflash_context *c, const clflash_attention_desc *d, bufs *b)
{
    memset(b, 0, sizeof *b);
    ck_assert_int_eq(th_case_init(&b->t, d, 5), 0);
    th_case *t = &b->t;
    b->q = mk(c, t->q, t->nq * t->esize);
    b->k = mk(c, t->k, t->nk * t->esize);
    b->v = mk(c, t->v, t->nv * t->esize);
    b->o = mk(c, t->o, t->no * t->esize);
    b->lse = mk(c, t->lse, t->nlse * 4);
    b->d_o = mk(c, t->o, t->no * t->esize);
    b->dq = mk(c, t->q, t->nq * t->esize);
    b->dk = mk(c, t->k, t->nk * t->esize);
    b->dv = mk(c, t->v, t->nv * t->esize);
}

static void bufs_free(bufs *b)
{
    cl_mem all[] = {b->q, b->k, b->v, b->o, b->lse, b->d_o, b->dq, b->dk, b->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    th_case_free(&b->t);
}

/* One call of a path; waits for device work. */
static void one_call(clflash_context *c, const clflash_attention_desc *d, bufs *b, int path, int i)
{
    clflash_status st = CLFLASH_SUCCESS;
    cl_event done = NULL;
    clflash_plan p = {.struct_size = sizeof p};
    switch (path) {
    case P_PLAN: st = clflash_plan_attention(c, d, &p); break;
    case P_FORWARD: st = clflash_forward(c, d, NULL, b->q, b->k, b->v, b->o, b->lse, 0, NULL, &done); break;
    case P_NAIVE: st = clflash_forward_naive(c, d, NULL, b->q, b->k, b->v, b->o, b->lse, 0, NULL, &done); break;
    case P_HOST: st = clflash_forward_host(c, d, b->t.q, b->t.k, b->t.v, b->t.o, b->t.lse); break;
    case P_BACKWARD_INVALID:
        st = clflash_backward(c, d, NULL, b->q, b->k, b->v, b->o, b->d_o, NULL, b->dq, b->dk, b->dv, 0, NULL, &done);
        ck_assert_msg(st == CLFLASH_ERROR_INVALID_ARGUMENT, "call %d: %s (%s)", i, clflash_status_string(st),
                      clflash_last_error_detail());
        ck_assert_ptr_null(done);
        return;
    default: break;
    }
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s, call %d: %s (%s)", path_names[path], i, clflash_status_string(st),
                  clflash_last_error_detail());
    if (done) {
        ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
    }
}

static clflash_attention_desc cycle_desc(void)
{
    return th_desc(1, 2, 1, 13, 17, 8, CLFLASH_F32, CLFLASH_CAUSAL);
}

START_TEST(call_path_cycles)
{
    const counts start = now();
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = cycle_desc();
    bufs b;
    bufs_make(c, &d, &b);
    one_call(c, &d, &b, _i, -1); /* builds and caches the program */
    const counts warm = now();
    long rss_warm = 0;
    for (int i = 0; i < CYCLES; i++) {
        one_call(c, &d, &b, _i, i);
        if (i + 1 == WARMUP)
            rss_warm = rss_kib();
    }
    ck_assert_int_eq(clFinish(clflash_context_queue(c)), CL_SUCCESS);
    const counts after = now();
    char when[160];
    snprintf(when, sizeof when, "%s: after %d calls, compared with after the first", path_names[_i], CYCLES);
    expect_same(&warm, &after, when);
    check_rss(rss_warm, rss_kib(), path_names[_i]);
    bufs_free(&b);
    clflash_context_free(c);
    const counts end = now();
    snprintf(when, sizeof when, "%s: after freeing the context", path_names[_i]);
    expect_same(&start, &end, when);
}
END_TEST

/* Steady-state decoding: after the first call, a split-KV forward (its parts in the scratch pool,
 * the merge kernel, GQA packing) and a plain one create no buffer, kernel or program at all. */
START_TEST(steady_calls_create_nothing)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 8, 2, 1, 3000, 16, CLFLASH_F32, 0);
    d.num_splits = _i ? 4 : 1;
    bufs b;
    bufs_make(c, &d, &b);
    one_call(c, &d, &b, P_FORWARD, -1);
    one_call(c, &d, &b, P_PLAN, -1);
    const long mem = fi_cl_created(FI_CL_MEM), kernels = fi_cl_created(FI_CL_KERNEL), built = fi_programs_built();
    for (int i = 0; i < 200; i++) {
        one_call(c, &d, &b, P_FORWARD, i);
        if (i % 50 == 0)
            one_call(c, &d, &b, P_PLAN, i);
    }
    /* and back to back on the one in-order queue, none waited for: the parts' buffers are reused
     * while the device still runs the calls before */
    for (int i = 0; i < 200; i++) {
        const clflash_status st = clflash_forward(c, &d, NULL, b.q, b.k, b.v, b.o, b.lse, 0, NULL, NULL);
        ck_assert_msg(st == CLFLASH_SUCCESS, "back-to-back call %d: %s", i, clflash_last_error_detail());
    }
    ck_assert_int_eq(clFinish(clflash_context_queue(c)), CL_SUCCESS);
    ck_assert_msg(fi_cl_created(FI_CL_MEM) == mem && fi_cl_created(FI_CL_KERNEL) == kernels &&
                      fi_programs_built() == built,
                  "num_splits %u: 400 calls after the first created %ld buffers, %ld kernels, %ld programs", d.num_splits,
                  fi_cl_created(FI_CL_MEM) - mem, fi_cl_created(FI_CL_KERNEL) - kernels, fi_programs_built() - built);
    bufs_free(&b);
    clflash_context_free(c);
}
END_TEST

/* A context per cycle that runs every path once: the cache is filled and released each time. */
START_TEST(context_with_every_path)
{
    const counts start = now();
    const clflash_attention_desc d = cycle_desc();
    for (int i = 0; i < 40; i++) {
        clflash_context *c = test_context(NULL);
        bufs b;
        bufs_make(c, &d, &b);
        for (int p = 0; p < P_COUNT; p++)
            one_call(c, &d, &b, p, i);
        bufs_free(&b);
        clflash_context_free(c);
    }
    const counts end = now();
    expect_same(&start, &end, "after 40 contexts that ran every path");
}
END_TEST

static Suite *leak_suite(void)
{
    Suite *s = suite_create("leak_cycles");
    TCase *tc = tcase_create("cycles");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, context_create_free);
    tcase_add_loop_test(tc, call_path_cycles, 0, P_COUNT);
    tcase_add_test(tc, context_with_every_path);
    tcase_add_loop_test(tc, steady_calls_create_nothing, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(leak_suite());
}
