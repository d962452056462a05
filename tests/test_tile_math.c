/*
 * test_tile_math.c - the pure functions, no device: every figure of the README's tile table, the max_block
 * rules, overflow saturation, dtype sizes, versions and status strings. Also checks the test
 * suite's own helpers (fp16 conversion, the fp64 reference on hand-computed cases) so that a
 * failure elsewhere can be trusted to be the library's.
 */
#include "reference.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

/* ---- tile figures ------------------------------------------------------------------------------ */

START_TEST(naive_vs_tile)
{
    ck_assert_uint_eq(clflash_score_matrix_bytes(4096, 4096, 2), 33554432u);
    ck_assert_uint_eq(clflash_score_matrix_bytes(4096, 4096, 2), 32 * MIB);
    ck_assert_uint_eq(clflash_tile_bytes(64, 128, 2), 57344u);
    ck_assert_uint_eq(clflash_tile_bytes(64, 128, 2), 56 * KIB);
    /* (3*64*128 + 64^2) * 2 = (24576 + 4096) * 2 */
    ck_assert_uint_eq(clflash_tile_bytes(64, 128, 1) * 2, 57344u);
}
END_TEST

/* The README's tile table: n, naive matrix, tiles per axis at B = 64, reduction (n/B)^2. */
static const struct {
    uint64_t n, matrix, tiles, reduction;
} tile_table[] = {
    {1024, 2 * MIB, 16, 256},
    {4096, 32 * MIB, 64, 4096},
    {8192, 128 * MIB, 128, 16384},
    {16384, 512 * MIB, 256, 65536},
};

START_TEST(tile_table_rows)
{
    const uint64_t n = tile_table[_i].n, B = 64;
    ck_assert_uint_eq(clflash_score_matrix_bytes(n, n, clflash_dtype_size(CLFLASH_F16)), tile_table[_i].matrix);
    const uint64_t tiles = (n + B - 1) / B;
    ck_assert_uint_eq(tiles, tile_table[_i].tiles);
    ck_assert_uint_eq(tiles * tiles, tile_table[_i].reduction);
    /* the tile never grows with n */
    ck_assert_uint_eq(clflash_tile_bytes(B, 128, clflash_dtype_size(CLFLASH_F16)), 56 * KIB);
}
END_TEST

START_TEST(budget_192k)
{
    const uint64_t budget = 192 * KIB;
    ck_assert_uint_eq(budget, 196608u);
    ck_assert_uint_eq(clflash_tile_bytes(256, 128, 2), 327680u);
    ck_assert(clflash_tile_bytes(256, 128, 2) > budget); /* fp16: does not fit */
    ck_assert_uint_eq(clflash_tile_bytes(256, 128, 1), 163840u);
    ck_assert(clflash_tile_bytes(256, 128, 1) <= budget); /* int8: fits */
    ck_assert_uint_eq(clflash_tile_bytes(256, 128, clflash_dtype_size(CLFLASH_I8)), 163840u);
    ck_assert_uint_eq(clflash_max_block(196608, 128, 2), 160u);
    /* 160 fits, the next multiple of 16 does not */
    ck_assert(clflash_tile_bytes(160, 128, 2) <= budget);
    ck_assert(clflash_tile_bytes(176, 128, 2) > budget);
}
END_TEST

/* ---- max_block rules --------------------------------------------------------------------------- */

/* The rule written out the slow way: the largest multiple of 16 that fits, else the largest of
 * 8, 4, 2, 1 that fits, else 0. */
static uint64_t slow_max_block(uint64_t budget, uint64_t d, uint64_t s)
{
    if (d == 0 || s == 0)
        return 0;
    uint64_t best = 0;
    for (uint64_t b = 16; clflash_tile_bytes(b, d, s) <= budget; b += 16)
        best = b;
    if (best)
        return best;
    static const uint64_t small[] = {8, 4, 2, 1};
    for (int i = 0; i < 4; i++)
        if (clflash_tile_bytes(small[i], d, s) <= budget)
            return small[i];
    return 0;
}

START_TEST(max_block_small_cases)
{
    /* d = 128, fp16: tile(1) = 770, tile(2) = 1544, tile(4) = 3104, tile(8) = 6272,
     * tile(15) = 11970, tile(16) = 12800 */
    ck_assert_uint_eq(clflash_tile_bytes(1, 128, 2), 770u);
    ck_assert_uint_eq(clflash_tile_bytes(16, 128, 2), 12800u);
    ck_assert_uint_eq(clflash_max_block(12800, 128, 2), 16u);
    ck_assert_uint_eq(clflash_max_block(12799, 128, 2), 8u); /* 15 fits but is no multiple of 16 */
    ck_assert_uint_eq(clflash_max_block(6272, 128, 2), 8u);
    ck_assert_uint_eq(clflash_max_block(6271, 128, 2), 4u);
    ck_assert_uint_eq(clflash_max_block(3104, 128, 2), 4u);
    ck_assert_uint_eq(clflash_max_block(3103, 128, 2), 2u);
    ck_assert_uint_eq(clflash_max_block(1544, 128, 2), 2u);
    ck_assert_uint_eq(clflash_max_block(1543, 128, 2), 1u);
    ck_assert_uint_eq(clflash_max_block(770, 128, 2), 1u);
    ck_assert_uint_eq(clflash_max_block(769, 128, 2), 0u);
    ck_assert_uint_eq(clflash_max_block(0, 128, 2), 0u);
    /* head_dim 0 or bytes 0: 0, whatever the budget */
    ck_assert_uint_eq(clflash_max_block(196608, 0, 2), 0u);
    ck_assert_uint_eq(clflash_max_block(196608, 128, 0), 0u);
    ck_assert_uint_eq(clflash_max_block(UINT64_MAX, 0, 0), 0u);
    /* a 31-block fits but the answer is 16 */
    ck_assert_uint_eq(clflash_max_block(clflash_tile_bytes(31, 64, 4), 64, 4), 16u);
    ck_assert_uint_eq(clflash_max_block(clflash_tile_bytes(32, 64, 4), 64, 4), 32u);
}
END_TEST

START_TEST(max_block_matches_rule)
{
    static const uint64_t dims[] = {1, 7, 64, 128, 256};
    static const uint64_t sizes[] = {1, 2, 4};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t si = 0; si < 3; si++)
            for (uint64_t budget = 0; budget <= 600000; budget += 997) {
                const uint64_t got = clflash_max_block(budget, dims[di], sizes[si]);
                const uint64_t want = slow_max_block(budget, dims[di], sizes[si]);
                ck_assert_msg(got == want, "max_block(%llu, %llu, %llu) = %llu, rule says %llu",
                              (unsigned long long)budget, (unsigned long long)dims[di],
                              (unsigned long long)sizes[si], (unsigned long long)got, (unsigned long long)want);
            }
}
END_TEST

START_TEST(max_block_huge_budget)
{
    /* B*B + 3B <= 2^64 - 1 gives B just under 2^32; the answer is a multiple of 16 whose tile fits
     * and the next one's does not. */
    const uint64_t b = clflash_max_block(UINT64_MAX, 1, 1);
    ck_assert(b % 16 == 0);
    ck_assert(b >= (1ull << 32) - 32 && b < (1ull << 32));
    ck_assert(clflash_tile_bytes(b, 1, 1) < UINT64_MAX);
    ck_assert(clflash_tile_bytes(b + 16, 1, 1) == UINT64_MAX); /* saturated: counts as not fitting */
    /* a head_dim so large that not even B = 1 fits */
    ck_assert_uint_eq(clflash_max_block(UINT64_MAX, UINT64_MAX / 2, 4), 0u);
}
END_TEST

/* ---- overflow and zeros ------------------------------------------------------------------------ */

START_TEST(overflow_saturates)
{
    ck_assert(clflash_score_matrix_bytes(UINT64_MAX, 2, 1) == UINT64_MAX);
    ck_assert(clflash_score_matrix_bytes(1ull << 32, 1ull << 32, 1) == UINT64_MAX); /* 2^64 */
    ck_assert(clflash_score_matrix_bytes(1ull << 31, 1ull << 32, 2) == UINT64_MAX);
    ck_assert(clflash_score_matrix_bytes(1ull << 31, 1ull << 31, 2) == (1ull << 63)); /* exact */
    ck_assert(clflash_score_matrix_bytes(2, 3, UINT64_MAX) == UINT64_MAX);
    ck_assert(clflash_tile_bytes(UINT64_MAX, 1, 1) == UINT64_MAX);
    ck_assert(clflash_tile_bytes(1ull << 32, 1, 1) == UINT64_MAX);              /* B*B = 2^64 */
    ck_assert(clflash_tile_bytes(1ull << 31, 1, 1) == (1ull << 62) + 3 * (1ull << 31)); /* exact */
    ck_assert(clflash_tile_bytes(1, UINT64_MAX / 3 + 1, 1) == UINT64_MAX);      /* 3*B*d */
    ck_assert(clflash_tile_bytes(1ull << 22, 1ull << 22, 1ull << 22) == UINT64_MAX); /* 2^68 */
    ck_assert(clflash_tile_bytes(1ull << 20, 1ull << 20, 1ull << 20) == (1ull << 62));     /* exact */
    ck_assert(clflash_tile_bytes(64, 128, UINT64_MAX) == UINT64_MAX);
}
END_TEST

START_TEST(zeros)
{
    ck_assert_uint_eq(clflash_score_matrix_bytes(0, 4096, 2), 0u);
    ck_assert_uint_eq(clflash_score_matrix_bytes(4096, 0, 2), 0u);
    ck_assert_uint_eq(clflash_score_matrix_bytes(UINT64_MAX, UINT64_MAX, 0), 0u);
    ck_assert_uint_eq(clflash_tile_bytes(0, 128, 2), 0u);
    ck_assert_uint_eq(clflash_tile_bytes(64, 0, 2), 8192u); /* only the B x B block */
    ck_assert_uint_eq(clflash_tile_bytes(64, 128, 0), 0u);
}
END_TEST

START_TEST(dtype_sizes)
{
    ck_assert_uint_eq(clflash_dtype_size(CLFLASH_F32), 4u);
    ck_assert_uint_eq(clflash_dtype_size(CLFLASH_F16), 2u);
    ck_assert_uint_eq(clflash_dtype_size(CLFLASH_BF16), 2u);
    ck_assert_uint_eq(clflash_dtype_size(CLFLASH_I8), 1u);
    ck_assert_uint_eq(clflash_dtype_size((clflash_dtype)0), 0u);
    ck_assert_uint_eq(clflash_dtype_size((clflash_dtype)5), 0u);
    ck_assert_uint_eq(clflash_dtype_size((clflash_dtype)99), 0u);
    ck_assert_uint_eq(clflash_dtype_size((clflash_dtype)-1), 0u);
}
END_TEST

/* ---- versions and status strings --------------------------------------------------------------- */

START_TEST(versions)
{
    char want[64];
    ck_assert_uint_eq(clflash_version_number(), CLFLASH_VERSION_NUMBER);
    ck_assert_uint_eq(CLFLASH_VERSION_NUMBER,
                      CLFLASH_VERSION_MAJOR * 10000 + CLFLASH_VERSION_MINOR * 100 + CLFLASH_VERSION_PATCH);
    snprintf(want, sizeof want, "%d.%d.%d", CLFLASH_VERSION_MAJOR, CLFLASH_VERSION_MINOR, CLFLASH_VERSION_PATCH);
    ck_assert_ptr_nonnull(clflash_version_string());
    ck_assert_str_eq(clflash_version_string(), want);
}
END_TEST

static const struct {
    clflash_status code;
    const char *name;
} own_codes[] = {
#define TEST_STATUS_ENTRY_(name, value, message) {name, #name},
    CLFLASH_STATUS_LIST(TEST_STATUS_ENTRY_)
#undef TEST_STATUS_ENTRY_
};
#define N_OWN (sizeof own_codes / sizeof own_codes[0])

START_TEST(status_own_codes)
{
    ck_assert_int_eq(CLFLASH_SUCCESS, 0);
    ck_assert(N_OWN >= 16);
    for (size_t i = 0; i < N_OWN; i++) {
        const char *s = clflash_status_string(own_codes[i].code);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strlen(s) > 0, "%s has an empty message", own_codes[i].name);
        ck_assert_msg(strcmp(s, "unknown status") != 0, "%s is 'unknown status'", own_codes[i].name);
        if (own_codes[i].code != 0)
            ck_assert_msg(own_codes[i].code <= -2000, "%s = %d is not in clflash's range", own_codes[i].name,
                          own_codes[i].code);
        for (size_t j = 0; j < i; j++) {
            ck_assert_msg(own_codes[i].code != own_codes[j].code, "%s and %s share a value", own_codes[i].name,
                          own_codes[j].name);
            ck_assert_msg(strcmp(s, clflash_status_string(own_codes[j].code)) != 0,
                          "%s and %s have the same message", own_codes[i].name, own_codes[j].name);
        }
    }
}
END_TEST

START_TEST(status_opencl_codes)
{
    static const struct {
        cl_int code;
        const char *name;
    } cl_codes[] = {
        {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
        {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
        {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
        {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
        {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
        {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
        {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
        {CL_INVALID_DEVICE, "CL_INVALID_DEVICE"},
        {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
        {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
        {CL_INVALID_BUILD_OPTIONS, "CL_INVALID_BUILD_OPTIONS"},
        {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
        {CL_INVALID_EVENT_WAIT_LIST, "CL_INVALID_EVENT_WAIT_LIST"},
        {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
    };
    ck_assert_int_eq(CL_OUT_OF_RESOURCES, -5);
    for (size_t i = 0; i < sizeof cl_codes / sizeof cl_codes[0]; i++) {
        const char *s = clflash_status_string(cl_codes[i].code);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strstr(s, cl_codes[i].name) != NULL, "status %d: '%s' does not name %s", cl_codes[i].code, s,
                      cl_codes[i].name);
    }
    /* every OpenCL 1.2 code that has a message has its own, distinct from clflash's */
    for (int a = -1; a >= -70; a--) {
        const char *sa = clflash_status_string(a);
        ck_assert_ptr_nonnull(sa);
        if (strcmp(sa, "unknown status") == 0)
            continue;
        for (int b = a + 1; b <= -1; b++)
            ck_assert_msg(strcmp(sa, clflash_status_string(b)) != 0, "codes %d and %d share '%s'", a, b, sa);
        for (size_t j = 0; j < N_OWN; j++)
            ck_assert_msg(strcmp(sa, clflash_status_string(own_codes[j].code)) != 0,
                          "OpenCL code %d and %s share '%s'", a, own_codes[j].name, sa);
    }
}
END_TEST

START_TEST(status_unknown)
{
    static const int unknown[] = {12345, 1, -1999, -2100, -100000, 2147483647, -2147483647 - 1};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = clflash_status_string(unknown[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strcmp(s, "unknown status") == 0, "status %d: '%s'", unknown[i], s);
    }
}
END_TEST

/* ---- the suite's own helpers ------------------------------------------------------------------- */

START_TEST(helper_fp16_roundtrip)
{
    /* every non-NaN half converts to float and back to itself */
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ref_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ck_assert(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff));
            ck_assert(isnan(ref_f16_to_f32(ref_f32_to_f16(f))));
            continue;
        }
        ck_assert_msg(ref_f32_to_f16(f) == h, "half 0x%04x -> %g -> 0x%04x", h, (double)f, ref_f32_to_f16(f));
    }
}
END_TEST

START_TEST(helper_fp16_rounding)
{
    ck_assert_uint_eq(ref_f32_to_f16(1.0f), 0x3c00u);
    ck_assert_uint_eq(ref_f32_to_f16(-2.0f), 0xc000u);
    ck_assert_uint_eq(ref_f32_to_f16(65504.0f), 0x7bffu);
    ck_assert_uint_eq(ref_f32_to_f16(65519.0f), 0x7bffu);
    ck_assert_uint_eq(ref_f32_to_f16(65520.0f), 0x7c00u); /* tie to even: up to infinity */
    ck_assert_uint_eq(ref_f32_to_f16(1e9f), 0x7c00u);
    ck_assert_uint_eq(ref_f32_to_f16(-INFINITY), 0xfc00u);
    ck_assert_uint_eq(ref_f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00u);               /* tie, even below */
    ck_assert_uint_eq(ref_f32_to_f16(1.0f + 3.0f / 2048.0f), 0x3c02u);               /* tie, even above */
    ck_assert_uint_eq(ref_f32_to_f16(1.0f + 1.0f / 2048.0f + 1.0f / 65536.0f), 0x3c01u); /* above the tie */
    ck_assert_uint_eq(ref_f32_to_f16(ldexpf(1.0f, -24)), 0x0001u);                   /* smallest subnormal */
    ck_assert_uint_eq(ref_f32_to_f16(ldexpf(1.0f, -25)), 0x0000u);                   /* tie to even 0 */
    ck_assert_uint_eq(ref_f32_to_f16(ldexpf(1.5f, -25)), 0x0001u);
    ck_assert_uint_eq(ref_f32_to_f16(ldexpf(3.0f, -25)), 0x0002u);                   /* 1.5 ulp: tie to 2 */
    ck_assert_uint_eq(ref_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400u);                /* up into the normals */
    ck_assert_uint_eq(ref_f32_to_f16(-0.0f), 0x8000u);
    ck_assert_uint_eq(ref_f32_to_f16(ldexpf(1.0f, -30)), 0x0000u);
    ck_assert(isnan(ref_f16_to_f32(ref_f32_to_f16(NAN))));
}
END_TEST

START_TEST(helper_reference_by_hand)
{
    /* 1 query, 2 keys, d = 1, scale 1: scores q*k = 1*0 and 1*ln(3) -> weights 1/4, 3/4 */
    float q[1] = {1.0f}, k[2] = {0.0f, (float)log(3.0)}, v[2] = {4.0f, 8.0f};
    double o[1], lse[1];
    clflash_attention_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.batch = d.heads_q = d.seq_q = d.head_dim = 1;
    d.seq_k = 2;
    d.dtype = CLFLASH_F32;
    d.scale = 1.0f;
    ref_attention(&d, q, k, v, o, lse);
    ck_assert_double_eq_tol(o[0], 0.25 * 4.0 + 0.75 * 8.0, 1e-6);
    ck_assert_double_eq_tol(lse[0], log(1.0 + 3.0), 1e-6);

    /* causal, seq_q 3 > seq_k 2: query 0 sees nothing, query 1 sees key 0, query 2 sees both */
    float q3[3] = {1.0f, 1.0f, 1.0f};
    double o3[3], lse3[3];
    d.seq_q = 3;
    d.flags = CLFLASH_CAUSAL;
    ref_attention(&d, q3, k, v, o3, lse3);
    ck_assert(o3[0] == 0.0 && isinf(lse3[0]) && lse3[0] < 0);
    ck_assert_double_eq_tol(o3[1], 4.0, 1e-12);
    ck_assert_double_eq_tol(lse3[1], 0.0, 1e-12);
    ck_assert_double_eq_tol(o3[2], 7.0, 1e-6);

    /* GQA and strides: 2 query heads on 1 kv head, Q in [seq][heads][d] order, default scale */
    clflash_attention_desc g;
    memset(&g, 0, sizeof g);
    g.struct_size = sizeof g;
    g.batch = 1;
    g.heads_q = 2;
    g.heads_kv = 1;
    g.seq_q = 1;
    g.seq_k = 2;
    g.head_dim = 4;
    g.dtype = CLFLASH_F32;
    g.q.head_stride = 4;
    g.q.seq_stride = 8;
    float gq[8] = {0, 0, 0, 0, 1, 1, 1, 1}; /* head 0: zeros (uniform weights), head 1: ones */
    float gk[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    float gv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    double go[8], gl[2];
    ref_attention(&g, gq, gk, gv, go, gl);
    ck_assert_double_eq_tol(go[0], 3.0, 1e-12); /* mean of 1 and 5 */
    ck_assert_double_eq_tol(gl[0], log(2.0), 1e-12);
    /* head 1: scores 0 and 4 * 0.5 = 2 */
    const double w1 = exp(2.0) / (1.0 + exp(2.0));
    ck_assert_double_eq_tol(go[4], (1 - w1) * 1 + w1 * 5, 1e-12);
    ck_assert_double_eq_tol(gl[1], log(1.0 + exp(2.0)), 1e-12);
}
END_TEST

START_TEST(helper_layouts_and_tolerance)
{
    clflash_layout l = {0, 0, 0, 0};
    ck_assert_uint_eq(ref_extent(&l, 2, 3, 5, 7), 2 * 3 * 5 * 7);
    clflash_layout bshd = {0, 5 * 3 * 7, 7, 3 * 7}; /* [b][s][h][d] */
    ck_assert_uint_eq(ref_extent(&bshd, 2, 3, 5, 7), 2 * 3 * 5 * 7);
    clflash_layout pad = {11, 0, 0, 9};
    ck_assert_uint_eq(ref_extent(&pad, 2, 3, 5, 7), 11 + 1 * (3 * 45) + 2 * 45 + 4 * 9 + 7);

    ref_tol t = {1e-3, 1e-2};
    ck_assert(ref_close(1.0105, 1.0, t));
    ck_assert(!ref_close(1.0115, 1.0, t));
    ck_assert(ref_close(-INFINITY, -INFINITY, t));
    ck_assert(!ref_close(-1e30, -INFINITY, t));
    ck_assert(!ref_close(NAN, 0.0, t));
    ck_assert(!ref_close(NAN, NAN, t));
    char msg[256];
    double got[3] = {1, 2, 3}, ref[3] = {1, 2.5, 3};
    ck_assert_uint_eq(ref_compare("x", got, ref, 3, t, msg, sizeof msg), 1u);
    ck_assert(strstr(msg, "[1]") != NULL);
}
END_TEST

static Suite *tile_math_suite(void)
{
    Suite *s = suite_create("tile_math");
    TCase *tc = tcase_create("pure");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, naive_vs_tile);
    tcase_add_loop_test(tc, tile_table_rows, 0, (int)(sizeof tile_table / sizeof tile_table[0]));
    tcase_add_test(tc, budget_192k);
    tcase_add_test(tc, max_block_small_cases);
    tcase_add_test(tc, max_block_matches_rule);
    tcase_add_test(tc, max_block_huge_budget);
    tcase_add_test(tc, overflow_saturates);
    tcase_add_test(tc, zeros);
    tcase_add_test(tc, dtype_sizes);
    tcase_add_test(tc, versions);
    tcase_add_test(tc, status_own_codes);
    tcase_add_test(tc, status_opencl_codes);
    tcase_add_test(tc, status_unknown);
    suite_add_tcase(s, tc);

    TCase *th = tcase_create("test_helpers");
    tcase_set_timeout(th, 120);
    tcase_add_test(th, helper_fp16_roundtrip);
    tcase_add_test(th, helper_fp16_rounding);
    tcase_add_test(th, helper_reference_by_hand);
    tcase_add_test(th, helper_layouts_and_tolerance);
    suite_add_tcase(s, th);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tile_math_suite());
    srunner_run_all(sr, CK_ENV);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
