/*
 * test_naive.c - the naive path (S materialized in the storage dtype) equals the fp64 reference
 * and equals the flash path on the same inputs, f32 and f16, causal and not, GQA, seq_q != seq_k,
 * strided O with gaps; and it refuses a score matrix larger than the device's maximum allocation
 * without writing anything.
 */
#include "check_common.h"

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16
#define CAUSAL CLFLASH_CAUSAL

static const shape_t shapes_naive[] = {
    {1, 1, 0, 1, 1, 64, F32, 0, 0.0f},
    {1, 1, 0, 37, 37, 64, F32, 0, 0.0f},
    {1, 1, 0, 13, 97, 64, F32, 0, 0.0f},
    {1, 1, 0, 131, 7, 64, F32, 0, 0.0f},
    {2, 4, 2, 37, 53, 64, F32, 0, 0.0f},
    {1, 2, 0, 67, 131, 64, F32, 0, 1.0f},
    {1, 1, 0, 13, 97, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F32, CAUSAL, 0.0f},
    {2, 4, 2, 33, 45, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 37, 53, 7, F32, 0, 0.0f},
    {1, 1, 0, 37, 37, 64, F16, 0, 0.0f},
    {2, 4, 2, 37, 53, 64, F16, 0, 0.0f},
    {1, 1, 0, 13, 97, 64, F16, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F16, CAUSAL, 0.0f},
    {1, 1, 0, 41, 29, 7, F16, CAUSAL, 0.0f},
};

static ref_tol sum_tol(ref_tol a, ref_tol b)
{
    ref_tol r = {a.atol + b.atol, a.rtol + b.rtol};
    return r;
}

/* naive vs reference, flash vs reference, and naive vs flash on the same inputs */
static void naive_equals_flash(const clflash_attention_desc *d, uint64_t seed, int with_lse)
{
    clflash_context *c = test_context(NULL);
    th_case naive, flash;
    char what[200], msg[2400];
    th_desc_str(d, what, sizeof what);
    run_and_check_case(c, d, TH_NAIVE, 1, with_lse, seed, &naive);
    run_and_check_case(c, d, TH_FLASH, 1, with_lse, seed, &flash);
    const ref_tol to = sum_tol(ref_tol_o(d->dtype, REF_PATH_NAIVE), ref_tol_o(d->dtype, REF_PATH_FLASH));
    const ref_tol tl = sum_tol(ref_tol_lse(d->dtype, REF_PATH_NAIVE), ref_tol_lse(d->dtype, REF_PATH_FLASH));
    ck_assert_msg(th_check_same(&naive, &flash, with_lse, to, tl, msg, sizeof msg) == 0, "naive vs flash, %s: %s",
                  what, msg);
    th_case_free(&naive);
    th_case_free(&flash);
    clflash_context_free(c);
}

START_TEST(naive_shapes)
{
    const clflash_attention_desc d = shape_desc(&shapes_naive[_i]);
    naive_equals_flash(&d, 7000 + (uint64_t)_i, 1);
}
END_TEST

START_TEST(naive_strided_and_no_lse)
{
    /* O with gaps after every row and between heads; K in [b][s][h][d]; lse not requested */
    clflash_attention_desc d = th_desc(2, 4, 2, 29, 37, 64, _i ? F16 : F32, _i ? CAUSAL : 0);
    d.o = (clflash_layout){3, 0, 29 * 67 + 5, 67};
    d.k = (clflash_layout){0, 37 * 2 * 64, 64, 2 * 64};
    naive_equals_flash(&d, 7100 + (uint64_t)_i, 0);
    naive_equals_flash(&d, 7200 + (uint64_t)_i, 1);
}
END_TEST

/* One head's S larger than CL_DEVICE_MAX_MEM_ALLOC_SIZE: seq 2^19 x 2^19 x 4 bytes = 1 TiB, with
 * head_dim 1 so that Q, K, V and O are only 2 MiB each. */
START_TEST(naive_score_matrix_too_large)
{
    clflash_context *c = test_context(NULL);
    cl_ulong max_alloc = 0;
    ck_assert_int_eq(clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                                     &max_alloc, NULL),
                     CL_SUCCESS);
    const uint32_t n = 1u << 19;
    ck_assert(clflash_score_matrix_bytes(n, n, 4) > max_alloc);
    const clflash_attention_desc d = th_desc(1, 1, 0, n, n, 1, F32, 0);
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 7300), 0);
    const clflash_status st = th_run_device(c, &t, TH_NAIVE, 1, NULL);
    ck_assert_msg(st == CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE, "got %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_msg(strlen(clflash_last_error_detail()) > 0, "no detail for the error");
    ck_assert_msg(th_outputs_untouched(&t), "O or lse was written");
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

static Suite *naive_suite(void)
{
    Suite *s = suite_create("naive");
    TCase *tc = tcase_create("naive_vs_flash_vs_reference");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, naive_shapes, 0, N_OF(shapes_naive));
    tcase_add_loop_test(tc, naive_strided_and_no_lse, 0, 2);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("limits");
    tcase_set_timeout(tl, TEST_TIMEOUT_S);
    tcase_add_test(tl, naive_score_matrix_too_large);
    suite_add_tcase(s, tl);
    return s;
}

int main(void)
{
    return run_suite(naive_suite());
}
