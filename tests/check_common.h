/*
 * check_common.h - what the device test suites share on top of the harness: a shape table entry,
 * a context that fails the test instead of returning an error, "run this descriptor and compare
 * with the reference" as one call, and main().
 *
 * Every test creates its own context: Check forks a child per test, and OpenCL state must never
 * cross a fork. PoCL's on-disk kernel cache (POCL_CACHE_DIR, set by CTest) keeps this cheap.
 */
#ifndef CLFLASH_TEST_CHECK_COMMON_H
#define CLFLASH_TEST_CHECK_COMMON_H

#include "harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generous: PoCL compiles each kernel variant on first use, and a cold cache on a 2-core machine
 * is slow. CK_TIMEOUT_MULTIPLIER still scales it. */
#define TEST_TIMEOUT_S 600

typedef struct {
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
    clflash_dtype dtype;
    uint32_t flags;
    float scale;
} shape_t;

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static inline clflash_attention_desc shape_desc(const shape_t *s)
{
    clflash_attention_desc d =
        th_desc(s->batch, s->heads_q, s->heads_kv, s->seq_q, s->seq_k, s->head_dim, s->dtype, s->flags);
    d.scale = s->scale;
    return d;
}

static inline clflash_context *test_context(const clflash_context_options *opt)
{
    clflash_context *c = NULL;
    const clflash_status st = th_context(opt, &c);
    ck_assert_msg(st == CLFLASH_SUCCESS && c != NULL, "clflash_context_create_default: %s (%s)",
                  clflash_status_string(st), clflash_last_error_detail());
    return c;
}

/* An uninitialised read-write buffer of the context, or the test fails. */
static inline cl_mem test_buffer(clflash_context *ctx, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

/* The portable forward's paths a suite runs on: the context's default (on PoCL the CPU path), the
 * register-tiled GPU path (tuning setting portable.cpu_path=0) and the lane-per-row path
 * (threads_per_row). */
typedef enum { PATH_DEFAULT, PATH_REGTILE, PATH_LANES, N_PATHS } path_kind;

static inline clflash_context *path_context(path_kind k)
{
    clflash_context_options opt = {.struct_size = sizeof opt};
    if (k != PATH_DEFAULT)
        opt.tuning = "portable.cpu_path=0";
    if (k == PATH_LANES)
        opt.threads_per_row = 4;
    return test_context(&opt);
}

/* Runs d through the host call (device = 0) or device buffers (device = 1; flash or naive),
 * checks it against the reference and returns the case for further checks (free it with
 * th_case_free). */
static inline void run_and_check_case(clflash_context *c, const clflash_attention_desc *d, th_algo algo,
                                      int device, int with_lse, uint64_t seed, th_case *t)
{
    char what[200], msg[2400];
    th_desc_str(d, what, sizeof what);
    ck_assert_msg(th_case_init(t, d, seed) == 0, "%s: out of host memory", what);
    th_case_reference(t);
    clflash_status st;
    if (device)
        st = th_run_device(c, t, algo, with_lse, NULL);
    else
        st = th_run_host(c, t, with_lse);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s%s%s: %s (%s)", algo == TH_NAIVE ? "naive " : "", what,
                  with_lse ? "" : " no-lse", clflash_status_string(st), clflash_last_error_detail());
    const int bad = th_check(t, with_lse, algo == TH_NAIVE ? REF_PATH_NAIVE : REF_PATH_FLASH, msg, sizeof msg);
    ck_assert_msg(bad == 0, "%s%s%s via %s: %s", algo == TH_NAIVE ? "naive " : "", what, with_lse ? "" : " no-lse",
                  device ? "device buffers" : "clflash_forward_host", msg);
}

static inline void run_and_check(clflash_context *c, const clflash_attention_desc *d, th_algo algo, int device,
                                 int with_lse, uint64_t seed)
{
    th_case t;
    run_and_check_case(c, d, algo, device, with_lse, seed, &t);
    th_case_free(&t);
}

static inline int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* CLFLASH_TEST_CHECK_COMMON_H */
