/*
 * test_plan.c - the planner: its fields follow the tile rule; a forced B is used exactly (and the
 * results stay right) or refused with CLFLASH_ERROR_TILE_TOO_LARGE without writing anything; a
 * context's local_mem_budget caps the plan (49152 plans as a 48 KiB GPU would, and results still
 * match at d = 128); the README's tile table through the planner.
 */
#include "check_common.h"

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16
#define CAUSAL CLFLASH_CAUSAL

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

static size_t device_max_wg(clflash_context *c)
{
    size_t v = 0;
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof v, &v, NULL);
    return v;
}

/* Every field of a plan that the header defines, for descriptor d planned against `budget`. */
static void check_plan_fields(clflash_context *c, const clflash_attention_desc *d, const clflash_plan *p,
                              uint64_t budget)
{
    char what[200];
    th_desc_str(d, what, sizeof what);
    const uint64_t s = clflash_dtype_size(d->dtype);
    ck_assert_msg(p->block >= 1, "%s: block %u", what, p->block);
    if (d->block)
        ck_assert_msg(p->block == d->block, "%s: forced block %u, plan has %u", what, d->block, p->block);
    ck_assert_msg(p->tile_bytes == clflash_tile_bytes(p->block, d->head_dim, s), "%s: tile_bytes %llu for B=%u",
                  what, (unsigned long long)p->tile_bytes, p->block);
    ck_assert_msg(p->local_mem_budget == budget, "%s: local_mem_budget %llu, expected %llu", what,
                  (unsigned long long)p->local_mem_budget, (unsigned long long)budget);
    ck_assert_msg(p->tile_bytes <= p->local_mem_budget, "%s: tile %llu > budget %llu", what,
                  (unsigned long long)p->tile_bytes, (unsigned long long)p->local_mem_budget);
    ck_assert_msg(p->kernel_local_bytes <= p->local_mem_budget, "%s: kernel local %llu > budget %llu", what,
                  (unsigned long long)p->kernel_local_bytes, (unsigned long long)p->local_mem_budget);
    /* (0 is possible: PoCL 5.0 reports CL_KERNEL_LOCAL_MEM_SIZE = 0 for these kernels) */
    if (!d->block)
        ck_assert_msg(p->block <= clflash_max_block(budget, d->head_dim, s), "%s: B=%u above max_block %llu", what,
                      p->block, (unsigned long long)clflash_max_block(budget, d->head_dim, s));
    ck_assert_msg(p->score_matrix_bytes == (uint64_t)d->seq_q * d->seq_k * s, "%s: score_matrix_bytes %llu", what,
                  (unsigned long long)p->score_matrix_bytes);
    ck_assert_msg(p->score_matrix_bytes == clflash_score_matrix_bytes(d->seq_q, d->seq_k, s), "%s", what);
    ck_assert_msg(p->tiles_q == ceil_div(d->seq_q, p->block), "%s: tiles_q %llu for B=%u", what,
                  (unsigned long long)p->tiles_q, p->block);
    ck_assert_msg(p->tiles_k == ceil_div(d->seq_k, p->block), "%s: tiles_k %llu for B=%u", what,
                  (unsigned long long)p->tiles_k, p->block);
    ck_assert_msg(p->kernel != NULL && p->kernel[0] != '\0', "%s: no kernel name", what);
    ck_assert_msg(p->threads_per_row >= 1, "%s: threads_per_row %u", what, p->threads_per_row);
    ck_assert_msg(p->packed_heads >= 1 && (p->packed_heads == 1 || p->packed_heads == d->heads_q / (d->heads_kv ? d->heads_kv : d->heads_q)),
                  "%s: packed_heads %u", what, p->packed_heads);
    ck_assert_msg(p->kv_passes == ceil_div((uint64_t)d->seq_q * p->packed_heads, p->block_q),
                  "%s: kv_passes %llu for block_q %u, %u packed heads", what, (unsigned long long)p->kv_passes,
                  p->block_q, p->packed_heads);
    if (strcmp(p->kernel, "nv_mma_forward") == 0) { /* whole warps, query rows in 16-row slices */
        ck_assert_msg(p->block_q % 16 == 0 && p->work_group_size % 32 == 0, "%s: block_q %u, work group %u", what,
                      p->block_q, p->work_group_size);
    } else if (strcmp(p->kernel, "nv_wgmma_forward") == 0) { /* warpgroups of 128 items, 64 rows each */
        ck_assert_msg(p->block_q % 64 == 0 && p->work_group_size % 128 == 0, "%s: block_q %u, work group %u", what,
                      p->block_q, p->work_group_size);
    } else if (strcmp(p->kernel, "flash_forward_regtile") == 0) { /* row groups of threads_per_row items */
        ck_assert_msg(p->block_q >= 1 && p->work_group_size % p->threads_per_row == 0 &&
                          p->work_group_size / p->threads_per_row <= p->block_q,
                      "%s: block_q %u, work group %u, %u per row group", what, p->block_q, p->work_group_size,
                      p->threads_per_row);
    } else if (strcmp(p->kernel, "flash_decode_cpu") == 0) { /* one work-item for all rows of a K/V head */
        ck_assert_msg(p->block_q == d->seq_q * p->packed_heads && p->work_group_size == 1 && p->threads_per_row == 1,
                      "%s: block_q %u, work group %u, %u per row", what, p->block_q, p->work_group_size,
                      p->threads_per_row);
    } else {
        ck_assert_msg(p->block_q == p->block && p->kv_passes == p->tiles_q, "%s: block_q %u for B=%u", what,
                      p->block_q, p->block);
        ck_assert_msg(p->work_group_size == p->block * p->threads_per_row, "%s: work_group_size %u != %u * %u",
                      what, p->work_group_size, p->block, p->threads_per_row);
    }
    ck_assert_msg(p->work_group_size <= device_max_wg(c), "%s: work group %u above the device's %zu", what,
                  p->work_group_size, device_max_wg(c));
}

static const shape_t plan_shapes[] = {
    {1, 1, 0, 131, 97, 64, F32, 0, 0.0f},
    {2, 4, 2, 37, 53, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 1, 1, 64, F16, 0, 0.0f},
    {1, 2, 1, 37, 53, 128, F16, 0, 0.0f},
    {1, 1, 0, 37, 53, 7, F32, 0, 0.0f},
    {1, 1, 0, 53, 37, 256, F32, CAUSAL, 0.0f},
};

START_TEST(plan_fields)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&plan_shapes[_i]);
    clflash_plan p, again;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    ck_assert_str_eq(clflash_last_error_detail(), "");
    check_plan_fields(c, &d, &p, th_device_local_mem(c));
    /* the same descriptor plans the same way */
    memset(&again, 0, sizeof again);
    again.struct_size = sizeof again;
    ck_assert_int_eq(clflash_plan_attention(c, &d, &again), CLFLASH_SUCCESS);
    ck_assert_uint_eq(again.block, p.block);
    ck_assert_uint_eq(again.threads_per_row, p.threads_per_row);
    ck_assert_str_eq(again.kernel, p.kernel);
    clflash_context_free(c);
}
END_TEST

/* ---- forced B ---------------------------------------------------------------------------------- */

static const struct {
    uint32_t block;
    shape_t s;
} forced[] = {
    {16, {1, 2, 0, 37, 45, 64, F32, 0, 0.0f}},
    {1, {1, 1, 0, 13, 9, 64, F32, 0, 0.0f}},
    {8, {2, 2, 1, 37, 29, 64, F32, CAUSAL, 0.0f}},
    {48, {1, 1, 0, 97, 131, 64, F32, 0, 0.0f}},
    {16, {1, 1, 0, 45, 37, 64, F16, CAUSAL, 0.0f}},
};

START_TEST(forced_block)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = shape_desc(&forced[_i].s);
    d.block = forced[_i].block;
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "block %u: %s (%s)", d.block, clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_uint_eq(p.block, forced[_i].block);
    check_plan_fields(c, &d, &p, th_device_local_mem(c));
    run_and_check(c, &d, TH_FLASH, 0, 1, 8000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* A forced B whose tile cannot fit: refused by the planner and by both forward calls, nothing
 * written. (3*4096*256 + 4096^2) * 4 bytes = 76 MiB of local memory. */
START_TEST(forced_block_too_large)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 1, 0, 37, 37, 256, _i ? F16 : F32, 0);
    d.block = 4096;
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_ERROR_TILE_TOO_LARGE, "plan: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_msg(strlen(clflash_last_error_detail()) > 0, "plan: no detail");

    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 8100), 0);
    st = th_run_host(c, &t, 1);
    ck_assert_msg(st == CLFLASH_ERROR_TILE_TOO_LARGE, "forward_host: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_msg(strlen(clflash_last_error_detail()) > 0, "forward_host: no detail");
    ck_assert_msg(th_outputs_untouched(&t), "forward_host wrote O or lse");
    st = th_run_device(c, &t, TH_FLASH, 1, NULL);
    ck_assert_msg(st == CLFLASH_ERROR_TILE_TOO_LARGE, "forward: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_msg(th_outputs_untouched(&t), "forward wrote O or lse");
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- local memory budget ------------------------------------------------------------------------ */

/* 49152 plans as a 48 KiB GPU would; the results at d = 128 still match. */
START_TEST(budget_48k)
{
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.local_mem_budget = 49152;
    clflash_context *c = test_context(&opt);
    const int f16 = _i & 1;
    clflash_attention_desc d = th_desc(2, 2, 1, 67, 45, 128, f16 ? F16 : F32, (_i & 2) ? CAUSAL : 0);
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    const uint64_t budget = th_device_local_mem(c) < 49152 ? th_device_local_mem(c) : 49152;
    ck_assert_uint_eq(p.local_mem_budget, budget);
    ck_assert(p.tile_bytes <= 49152);
    ck_assert(p.kernel_local_bytes <= 49152);
    check_plan_fields(c, &d, &p, budget);
    run_and_check(c, &d, TH_FLASH, 0, 1, 8200 + (uint64_t)_i);
    run_and_check(c, &d, TH_FLASH, 1, 1, 8300 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* The register-tiled GPU path against a 48 KiB budget (the H200's): B by the tile rule, then
 * B and the query block shrink until its real local arrays fit. Expected: d = 64 keeps 64 query
 * rows with B = 48 (f16's rule allows 64, whose arrays need 54,272 bytes); d = 128 runs B = 16
 * (f32's rule allows no more; f16's 48 and 32 need 74,240 and 61,440 bytes). The bytes are
 * clflash's count, 16 * (64 * (d/4 + 1) + B * (d/4 + 1) + B * 17) + 4 * 64 * 8, which PoCL's
 * report may exceed but not undercut. */
START_TEST(regtile_budget_48k)
{
    static const struct { uint32_t d; clflash_dtype t; uint32_t block; uint64_t bytes; } want[] = {
        {64, F32, 48, 45568}, {64, F16, 48, 45568}, {128, F32, 16, 48640}, {128, F16, 16, 48640}};
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.local_mem_budget = 49152;
    opt.tuning = "portable.cpu_path=0";
    opt.portable_only = 1; /* on NVIDIA, f16 would go to the tensor-core kernel */
    clflash_context *c = test_context(&opt);
    clflash_attention_desc d = th_desc(1, 2, 0, 4096, 4096, want[_i].d, want[_i].t, 0);
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    ck_assert_str_eq(p.kernel, "flash_forward_regtile");
    ck_assert_uint_eq(p.block, want[_i].block);
    ck_assert_uint_eq(p.block_q, 64);
    ck_assert_uint_eq(p.work_group_size, 128);
    ck_assert_uint_eq(p.threads_per_row, 8);
    ck_assert_uint_eq(p.kv_passes, 4096 / 64);
    ck_assert_msg(p.kernel_local_bytes >= want[_i].bytes && p.kernel_local_bytes <= 49152, "local bytes %llu",
                  (unsigned long long)p.kernel_local_bytes);
    check_plan_fields(c, &d, &p, 49152);
    clflash_context_free(c);
}
END_TEST

/* A budget above the device's is the device's. */
START_TEST(budget_above_device)
{
    clflash_context *probe = test_context(NULL);
    const uint64_t dev = th_device_local_mem(probe);
    clflash_context_free(probe);
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.local_mem_budget = dev + (1ull << 30);
    clflash_context *c = test_context(&opt);
    const clflash_attention_desc d = th_desc(1, 1, 0, 131, 97, 64, F32, 0);
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    check_plan_fields(c, &d, &p, dev);
    clflash_context_free(c);
}
END_TEST

/* A budget in which not even B = 1 fits (tile(1, 64, 4) = 772 bytes): the planner refuses. */
START_TEST(budget_too_small)
{
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.local_mem_budget = 512;
    clflash_context *c = test_context(&opt);
    const clflash_attention_desc d = th_desc(1, 1, 0, 13, 13, 64, F32, 0);
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_ERROR_TILE_TOO_LARGE, "%s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 8400), 0);
    ck_assert_int_eq(th_run_host(c, &t, 1), CLFLASH_ERROR_TILE_TOO_LARGE);
    ck_assert_msg(th_outputs_untouched(&t), "forward_host wrote O or lse");
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- the tile table through the planner --------------------------------------------------------- */

/* n = 1024 .. 16384, B = 64 forced, d = 128, fp16: the plan's figures are the README's. Planning never
 * looks at buffers, so n = 16384 costs nothing. On a device with less local memory than the
 * 56 KiB tile (a 48 KiB GPU), B = 64 must be refused instead. */
START_TEST(tile_table_plan)
{
    static const uint64_t n[] = {1024, 4096, 8192, 16384};
    static const uint64_t mib[] = {2, 32, 128, 512};
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 1, 0, (uint32_t)n[_i], (uint32_t)n[_i], 128, F16, 0);
    d.block = 64;
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    if (th_device_local_mem(c) < 57344) {
        ck_assert_int_eq(st, CLFLASH_ERROR_TILE_TOO_LARGE);
    } else {
        ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
        ck_assert_uint_eq(p.tile_bytes, 57344u);
        ck_assert_uint_eq(p.score_matrix_bytes, mib[_i] * 1024 * 1024);
        ck_assert_uint_eq(p.tiles_q, n[_i] / 64);
        ck_assert_uint_eq(p.tiles_k, n[_i] / 64);
        ck_assert_uint_eq(p.kv_passes, n[_i] / 64);
        ck_assert_uint_eq(p.tiles_q * p.tiles_k, (n[_i] / 64) * (n[_i] / 64));
    }
    clflash_context_free(c);
}
END_TEST

/* More shapes than the context's plan cache holds (256): every plan still succeeds, and a call of a
 * shape planned past the cache's end, and of one inside it, still gives the reference's result. */
START_TEST(more_shapes_than_the_plan_cache)
{
    clflash_context *c = test_context(NULL);
    clflash_plan p = {.struct_size = sizeof p};
    for (uint32_t sq = 1; sq <= 300; sq++) {
        const clflash_attention_desc d = th_desc(1, 1, 0, sq, 40, 8, F32, 0);
        ck_assert_msg(clflash_plan_attention(c, &d, &p) == CLFLASH_SUCCESS, "seq_q %u: %s", sq,
                      clflash_last_error_detail());
    }
    const clflash_attention_desc late = th_desc(1, 1, 0, 299, 40, 8, F32, 0), early = th_desc(1, 1, 0, 3, 40, 8, F32, 0);
    run_and_check(c, &late, TH_FLASH, 1, 1, 5);
    run_and_check(c, &early, TH_FLASH, 1, 1, 6);
    clflash_context_free(c);
}
END_TEST

static Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("fields");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, plan_fields, 0, N_OF(plan_shapes));
    tcase_add_loop_test(tc, tile_table_plan, 0, 4);
    tcase_add_test(tc, more_shapes_than_the_plan_cache);
    suite_add_tcase(s, tc);

    TCase *tb = tcase_create("forced_block");
    tcase_set_timeout(tb, TEST_TIMEOUT_S);
    tcase_add_loop_test(tb, forced_block, 0, N_OF(forced));
    tcase_add_loop_test(tb, forced_block_too_large, 0, 2);
    suite_add_tcase(s, tb);

    TCase *tm = tcase_create("local_mem_budget");
    tcase_set_timeout(tm, TEST_TIMEOUT_S);
    tcase_add_loop_test(tm, budget_48k, 0, 4);
    tcase_add_loop_test(tm, regtile_budget_48k, 0, 4);
    tcase_add_test(tm, budget_above_device);
    tcase_add_test(tm, budget_too_small);
    suite_add_tcase(s, tm);
    return s;
}

int main(void)
{
    return run_suite(plan_suite());
}
