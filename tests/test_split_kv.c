/*
 * test_split_kv.c - the forward's split-KV (flash-decoding) path and GQA packing against the fp64
 * reference: forced split counts of 1, 2, 3, 7 and more parts than key tiles, the planner's own
 * choice, seq_k = 1, seq_q 1 to 16, GQA and MQA, causal, ragged key lengths (0, 1, past seq_k,
 * negative), on each path of the portable kernel; that a fixed split count gives the same bits for
 * a request whatever batch it is computed in; what the plan reports; and num_splits' validation.
 *
 * The paths: the context's default (on PoCL the CPU path), the register-tiled GPU path (tuning
 * setting portable.cpu_path=0; it packs GQA heads), and the lane-per-row path (threads_per_row).
 */
#include "check_common.h"

typedef struct {
    uint32_t batch, hq, hkv, sq, sk, d;
    clflash_dtype t;
    uint32_t flags;
} split_shape;

static const split_shape shapes[] = {
    {1, 4, 1, 1, 1, 16, CLFLASH_F32, 0},                 /* seq_k = 1: parts past the only key are empty */
    {1, 8, 2, 1, 523, 64, CLFLASH_F32, 0},               /* decode, GQA 4 */
    {2, 4, 4, 3, 301, 32, CLFLASH_F16, CLFLASH_CAUSAL},  /* no GQA, causal */
    {1, 6, 1, 16, 257, 48, CLFLASH_F32, CLFLASH_CAUSAL}, /* MQA, 16 queries */
    {3, 4, 2, 7, 97, 7, CLFLASH_F16, 0},                 /* odd head_dim, prime lengths */
    {1, 2, 1, 5, 3, 16, CLFLASH_F32, CLFLASH_CAUSAL},    /* seq_k < seq_q: rows that see nothing */
};
static const uint32_t split_counts[] = {1, 2, 3, 7, 64};

START_TEST(forced_splits)
{
    const int per_path = N_OF(shapes) * N_OF(split_counts);
    const path_kind path = (path_kind)(_i / per_path);
    const split_shape *s = &shapes[_i % per_path / N_OF(split_counts)];
    const uint32_t splits = split_counts[_i % N_OF(split_counts)];
    clflash_context *c = path_context(path);
    clflash_attention_desc d = th_desc(s->batch, s->hq, s->hkv, s->sq, s->sk, s->d, s->t, s->flags);
    d.num_splits = splits;
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.splits, splits);
    ck_assert_uint_eq(p.workspace_bytes, splits > 1 ? (uint64_t)splits * s->batch * s->hq * s->sq * (s->d + 1) * 4 : 0);
    run_and_check(c, &d, TH_FLASH, 1, 1, 300 + (uint64_t)_i);
    run_and_check(c, &d, TH_FLASH, 1, 0, 301 + (uint64_t)_i); /* without lse: the merge writes O only */
    clflash_context_free(c);
}
END_TEST

/* Ragged lengths, with the planner's split count and with 3 parts. */
START_TEST(ragged_lengths)
{
    const path_kind path = (path_kind)(_i / 2);
    clflash_context *c = path_context(path);
    clflash_attention_desc d = th_desc(6, 8, 2, _i % 2 ? 4 : 1, 2100, 32, CLFLASH_F32, _i % 2 ? CLFLASH_CAUSAL : 0);
    const int32_t lens[6] = {2100, 0, 1, 1300, 5000, -7}; /* past seq_k and negative are clamped */
    for (int forced = 0; forced < 2; forced++) {
        d.num_splits = forced ? 3 : 0;
        th_case t;
        char what[200], msg[2400];
        th_desc_str(&d, what, sizeof what);
        ck_assert_int_eq(th_case_init(&t, &d, 77 + (uint64_t)_i), 0);
        ck_assert_int_eq(th_case_set_key_lengths(&t, lens), 0);
        th_case_reference(&t);
        const clflash_status st = th_run_device(c, &t, TH_FLASH, 1, NULL);
        ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
        ck_assert_msg(th_check(&t, 1, REF_PATH_FLASH, msg, sizeof msg) == 0, "%s ragged: %s", what, msg);
        th_case_free(&t);
    }
    clflash_context_free(c);
}
END_TEST

/* Request A alone (batch 1) and as batch entry 1 of three: with a fixed split count the bits agree. */
START_TEST(fixed_splits_batch_independent)
{
    const path_kind path = (path_kind)_i;
    clflash_context *c = path_context(path);
    clflash_attention_desc one = th_desc(1, 8, 2, 1, 1500, 64, CLFLASH_F16, CLFLASH_CAUSAL);
    one.num_splits = 5;
    clflash_attention_desc three = one;
    three.batch = 3;
    th_case a, b;
    ck_assert_int_eq(th_case_init(&a, &one, 5), 0);
    ck_assert_int_eq(th_case_init(&b, &three, 6), 0);
    /* contiguous layouts: batch entry 1 of b is a's only entry */
    memcpy((char *)b.q + a.nq * a.esize, a.q, a.nq * a.esize);
    memcpy((char *)b.k + a.nk * a.esize, a.k, a.nk * a.esize);
    memcpy((char *)b.v + a.nv * a.esize, a.v, a.nv * a.esize);
    ck_assert_int_eq(th_run_device(c, &a, TH_FLASH, 1, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(th_run_device(c, &b, TH_FLASH, 1, NULL), CLFLASH_SUCCESS);
    ck_assert_msg(memcmp((char *)b.o + a.no * a.esize, a.o, a.no * a.esize) == 0,
                  "O of the request differs between batch 1 and batch 3 with num_splits = 5");
    ck_assert_msg(memcmp(b.lse + a.nlse, a.lse, a.nlse * sizeof(float)) == 0, "lse differs likewise");
    /* and a second run gives the same bits */
    void *first = malloc(a.no * a.esize);
    memcpy(first, a.o, a.no * a.esize);
    th_case_reset_outputs(&a);
    ck_assert_int_eq(th_run_device(c, &a, TH_FLASH, 1, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(memcmp(first, a.o, a.no * a.esize), 0);
    free(first);
    th_case_free(&a);
    th_case_free(&b);
    clflash_context_free(c);
}
END_TEST

/* Token-major K and V ([batch][seq][heads][d], the heads of a key side by side): on a CPU the
 * decoding kernel takes every K/V head of a sequence in one work-item (packed_heads = heads_q) and
 * reads whole key slots. Checked against the reference on every path, with the planner's parts and
 * with forced ones, at odd shapes: three K/V heads, MHA, several queries with causal and a window,
 * a head_dim that is not a multiple of 8, one key. */
static const struct {
    uint32_t batch, hq, hkv, sq, sk, d, flags, splits;
    clflash_dtype t;
    int window;
} token_major_cases[] = {
    {2, 12, 3, 1, 301, 40, 0, 0, CLFLASH_F32, 0},
    {1, 8, 8, 2, 77, 64, CLFLASH_CAUSAL, 3, CLFLASH_F16, 0},
    {3, 6, 2, 3, 129, 21, CLFLASH_CAUSAL | CLFLASH_WINDOW, 0, CLFLASH_F16, 1},
    {1, 4, 2, 1, 1, 16, 0, 0, CLFLASH_F32, 0},
};

START_TEST(token_major_decode)
{
    const __typeof__(token_major_cases[0]) *tc = &token_major_cases[_i / N_PATHS];
    clflash_context *c = path_context((path_kind)(_i % N_PATHS));
    clflash_attention_desc d = th_desc(tc->batch, tc->hq, tc->hkv, tc->sq, tc->sk, tc->d, tc->t, tc->flags);
    const uint64_t hd = tc->d;
    d.q = d.o = (clflash_layout){0, (uint64_t)tc->sq * tc->hq * hd, hd, tc->hq * hd};
    d.k = d.v = (clflash_layout){0, (uint64_t)tc->sk * tc->hkv * hd, hd, tc->hkv * hd};
    d.num_splits = tc->splits;
    if (tc->window)
        d.window_left = 50;
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    if (strcmp(p.kernel, "flash_decode_cpu") == 0) /* all K/V heads of a sequence in one work-item */
        ck_assert_uint_eq(p.packed_heads, tc->hq);
    th_case t;
    char what[200], msg[2400];
    th_desc_str(&d, what, sizeof what);
    ck_assert_int_eq(th_case_init(&t, &d, 900 + (uint64_t)_i), 0);
    th_case_reference(&t);
    const clflash_status st = th_run_device(c, &t, TH_FLASH, 1, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(th_check(&t, 1, REF_PATH_FLASH, msg, sizeof msg) == 0, "%s token-major (%s): %s", what, p.kernel,
                  msg);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

START_TEST(plan_reports_splits_and_packing)
{
    clflash_context *c = path_context(PATH_REGTILE);
    clflash_plan p = {.struct_size = sizeof p};
    /* one K/V head, one query, 16384 keys: too few work-groups for any device, so the planner splits */
    clflash_attention_desc d = th_desc(1, 4, 1, 1, 16384, 64, CLFLASH_F32, 0);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(p.kernel, "flash_forward_regtile");
    ck_assert_uint_gt(p.splits, 1);
    ck_assert_uint_eq(p.packed_heads, 4); /* the four query heads of the K/V head share its rows */
    ck_assert_uint_eq(p.workspace_bytes, (uint64_t)p.splits * 4 * (64 + 1) * 4);
    run_and_check(c, &d, TH_FLASH, 1, 1, 11);
    /* 1 = never */
    d.num_splits = 1;
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.splits, 1);
    ck_assert_uint_eq(p.workspace_bytes, 0);
    /* enough work-groups of their own: no split */
    d = th_desc(64, 32, 32, 512, 16384, 64, CLFLASH_F32, 0);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.splits, 1);
    ck_assert_uint_eq(p.packed_heads, 1);
    /* the backward ignores num_splits */
    d = th_desc(1, 2, 1, 3, 40, 16, CLFLASH_F32, 0);
    d.num_splits = 4;
    ck_assert_int_eq(clflash_plan_backward(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.splits, 0);
    clflash_context_free(c);
}
END_TEST

START_TEST(num_splits_validation)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 2, 1, 1, 50, 16, CLFLASH_F32, 0);
    clflash_plan p = {.struct_size = sizeof p};
    d.num_splits = CLFLASH_MAX_SPLITS + 1;
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_ERROR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "num_splits"));
    d.num_splits = CLFLASH_MAX_SPLITS;
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.splits, CLFLASH_MAX_SPLITS);
    run_and_check(c, &d, TH_FLASH, 1, 1, 3);
    clflash_context_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("split_kv");
    TCase *tc = tcase_create("split_kv");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, forced_splits, 0, N_PATHS * N_OF(shapes) * N_OF(split_counts));
    tcase_add_loop_test(tc, ragged_lengths, 0, 2 * N_PATHS);
    tcase_add_loop_test(tc, fixed_splits_batch_independent, 0, N_PATHS);
    tcase_add_loop_test(tc, token_major_decode, 0, N_PATHS * (int)N_OF(token_major_cases));
    tcase_add_test(tc, plan_reports_splits_and_packing);
    tcase_add_test(tc, num_splits_validation);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
