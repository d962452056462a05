/*
 * test_paged_kv.c - the forward on a paged KV cache (clflash.h, "Paged KV caches") against the
 * fp64 reference of the same keys gathered into ordinary tensors: page sizes 1 to 256 (odd ones
 * too), last pages partly filled, both pool layouts and an unaligned one, pages shared between
 * sequences, pools in shuffled order with spare pages, ragged lengths (0, 1, past seq_k), the
 * length-aligned causal rule with several queries per sequence, windows, ALiBi, GQA and MQA,
 * split-KV parts, decode and prefill, f32, f16 and bf16; table entries out of the pool (documented
 * as clamped); on every path (the device's default: on PoCL the CPU path and its decoding kernel,
 * on an NVIDIA GPU the tensor cores; the register-tiled and the lane-per-row GPU paths). Where
 * the paged call and the same keys as tensors run the same kernel with the same parts, their bits
 * must be equal. Then validation: every refusal, and that a refused call writes nothing.
 */
#include "check_common.h"
#include "paged_harness.h"

#include <stdint.h>

static const char *const path_names[N_PATHS] = {"default", "register tiles", "lanes"};

#define C CLFLASH_CAUSAL
#define W CLFLASH_WINDOW
#define A CLFLASH_ALIGN_TO_KEY_LENGTH
/* batch, heads q/kv, seq q/k, head_dim, page, dtype, flags, window, splits, layout, ragged, shared,
 * hostile, alibi, extra table columns */
static const pg_spec cases[] = {
    {3, 4, 2, 1, 300, 16, 16, CLFLASH_F32, 0, 0, 0, 0, PG_HEAD_MAJOR, 1, 0, 0, 0, 0},     /* decode, ragged */
    {3, 8, 2, 1, 1000, 64, 32, CLFLASH_F16, 0, 0, 0, 3, PG_SLOT_MAJOR, 1, 1, 0, 0, 0},    /* parts, shared prefix */
    {2, 4, 4, 5, 200, 32, 64, CLFLASH_BF16, C | A, 0, 0, 0, PG_SLOT_MAJOR, 1, 0, 0, 0, 1}, /* a 5-token step */
    {5, 4, 2, 7, 333, 64, 128, CLFLASH_F16, C | W | A, 40, 0, 0, PG_HEAD_MAJOR, 1, 0, 0, 1, 0},
    {2, 2, 1, 17, 257, 7, 256, CLFLASH_F32, C, 0, 0, 0, PG_ODD, 0, 0, 0, 0, 0}, /* one page, odd d */
    {4, 8, 2, 1, 777, 64, 7, CLFLASH_F16, 0, 0, 0, 5, PG_SLOT_MAJOR, 1, 0, 1, 0, 0},       /* page of 7, bad entries */
    {1, 1, 1, 1, 1, 16, 16, CLFLASH_F32, 0, 0, 0, 0, PG_HEAD_MAJOR, 0, 0, 0, 0, 0},        /* size 1 */
    {5, 8, 1, 3, 500, 32, 16, CLFLASH_BF16, C | A, 0, 0, 0, PG_ODD, 1, 0, 1, 0, 0},        /* MQA, unaligned rows */
    {2, 4, 2, 64, 300, 64, 32, CLFLASH_F16, C, 0, 0, 0, PG_HEAD_MAJOR, 0, 0, 0, 0, 2},     /* prefill */
    {3, 32, 8, 1, 4099, 128, 16, CLFLASH_F16, 0, 0, 0, 0, PG_SLOT_MAJOR, 1, 1, 1, 0, 0},   /* decode, GQA 4 */
    {2, 4, 1, 2, 600, 128, 1, CLFLASH_F32, C | A, 0, 0, 2, PG_HEAD_MAJOR, 1, 0, 0, 0, 0},  /* a key per page */
    {2, 16, 8, 1, 2000, 128, 256, CLFLASH_BF16, W | A, 300, 0, 0, PG_SLOT_MAJOR, 1, 0, 0, 1, 0},
};
#undef C
#undef W
#undef A
#define N_CASES N_OF(cases)

/* _i: case * N_PATHS + path. */
START_TEST(paged_against_reference)
{
    const pg_spec *s = &cases[_i / N_PATHS];
    const path_kind path = (path_kind)(_i % N_PATHS);
    char what[256], msg[512];
    snprintf(what, sizeof what, "%s, %s path", pg_spec_str(s, msg, sizeof msg), path_names[path]);
    clflash_context *ctx = path_context(path);
    pg_case c;
    ck_assert_msg(pg_case_init(&c, s, 5000 + (uint64_t)_i) == 0, "%s: out of host memory", what);
    const char *kernel = NULL, *flat_kernel = NULL;
    uint32_t splits = 0, flat_splits = 0;
    clflash_status st = pg_run(ctx, &c, 0, &kernel, &splits);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    if (s->num_splits)
        ck_assert_uint_eq(splits, s->num_splits);
    /* bf16 O keeps 8 bits of mantissa (and the tensor cores round P to bf16): as test_features */
    const ref_tol to = s->dtype == CLFLASH_BF16 ? (ref_tol){4e-3, 1.2e-2} : ref_tol_o(s->dtype, REF_PATH_FLASH);
    ck_assert_msg(pg_check(&c, to, msg, sizeof msg) == 0, "%s (%s, %u parts): %s", what, kernel, splits, msg);

    /* the same keys as tensors: on the same kernel with the same parts, the same bits */
    const uint64_t rows = (uint64_t)s->batch * s->heads_q * s->seq_q;
    void *o = malloc(rows * s->head_dim * c.esize);
    float *lse = malloc(rows * sizeof(float));
    ck_assert(o && lse);
    memcpy(o, c.o, rows * s->head_dim * c.esize);
    memcpy(lse, c.lse, rows * sizeof(float));
    st = pg_run(ctx, &c, 1, &flat_kernel, &flat_splits);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s as tensors: %s (%s)", what, clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_msg(pg_check(&c, to, msg, sizeof msg) == 0, "%s as tensors (%s): %s", what, flat_kernel, msg);
    if (strcmp(kernel, flat_kernel) == 0 && splits == flat_splits) {
        ck_assert_msg(memcmp(o, c.o, rows * s->head_dim * c.esize) == 0, "%s: O differs from the tensors' (%s)", what,
                      kernel);
        ck_assert_msg(memcmp(lse, c.lse, rows * sizeof(float)) == 0, "%s: lse differs from the tensors' (%s)", what,
                      kernel);
    }
    free(o);
    free(lse);
    pg_case_free(&c);
    clflash_context_free(ctx);
}
END_TEST

/* ---- validation ---------------------------------------------------------------------------------- */

/* A small valid paged call (f32, batch 2, heads 2/1, seq_q 1, seq_k 40, d 8, pages of 16, three
 * per sequence, six in the pool) and its buffers; each check below changes one thing. */
typedef struct {
    clflash_context *ctx;
    clflash_attention_desc d;
    cl_mem q, k, v, o, lse, table;
} small_call;

static void small_init(small_call *s)
{
    s->ctx = test_context(NULL);
    s->d = th_desc(2, 2, 1, 1, 40, 8, CLFLASH_F32, 0);
    s->d.page_size = 16;
    s->d.pages_per_seq = 3;
    s->d.num_pages = 6;
    s->q = test_buffer(s->ctx, 2 * 2 * 8 * 4);
    s->k = test_buffer(s->ctx, 6 * 16 * 8 * 4);
    s->v = test_buffer(s->ctx, 6 * 16 * 8 * 4);
    s->o = test_buffer(s->ctx, 2 * 2 * 8 * 4);
    s->lse = test_buffer(s->ctx, 2 * 2 * 4);
    s->table = test_buffer(s->ctx, 2 * 3 * 4);
    s->d.block_table = s->table;
}

static void small_free(small_call *s)
{
    const cl_mem all[6] = {s->q, s->k, s->v, s->o, s->lse, s->table};
    for (int i = 0; i < 6; i++)
        clReleaseMemObject(all[i]);
    clflash_context_free(s->ctx);
}

static clflash_status small_forward(small_call *s, const clflash_attention_desc *d, cl_mem k, cl_mem o)
{
    return clflash_forward(s->ctx, d, NULL, s->q, k, s->v, o, s->lse, 0, NULL, NULL);
}

START_TEST(paged_validation)
{
    small_call s;
    small_init(&s);
    clflash_attention_desc d = s.d;
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_SUCCESS);
    ck_assert_int_eq(clFinish(clflash_context_queue(s.ctx)), CL_SUCCESS);

    d = s.d;
    d.block_table = NULL;
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "block_table is NULL"));
    const uint32_t bad_sizes[3] = {0, CLFLASH_MAX_PAGE_SIZE + 1, 2}; /* 2: 3 pages of 2 hold 6 < 40 keys */
    for (int i = 0; i < 3; i++) {
        d = s.d;
        d.page_size = bad_sizes[i];
        ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_INVALID_SHAPE);
    }
    d = s.d;
    d.num_pages = 0;
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_INVALID_SHAPE);
    d = s.d;
    d.pages_per_seq = 0;
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_INVALID_SHAPE);
    d = s.d;
    d.seq_k = 49; /* 3 pages of 16 */
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "pages_per_seq"));
    d = s.d;
    d.pages_per_seq = 4; /* the table holds 2 x 3 */
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "block_table"));
    d = s.d;
    d.num_pages = 7; /* the pools hold 6 pages */
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    d = s.d;
    d.k.batch_stride = 16 * 8 + 1; /* a page stride past what the pool holds */
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    d = s.d;
    d.block_table = s.o;
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_INVALID_ARGUMENT);

    /* the naive forward and the backward refuse a paged cache, the planner takes it */
    d = s.d;
    ck_assert_int_eq(clflash_forward_naive(s.ctx, &d, NULL, s.q, s.k, s.v, s.o, s.lse, 0, NULL, NULL),
                     CLFLASH_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "paged"));
    cl_mem dq = test_buffer(s.ctx, 2 * 2 * 8 * 4), dk = test_buffer(s.ctx, 6 * 16 * 8 * 4), dv = test_buffer(s.ctx, 6 * 16 * 8 * 4),
           d_o = test_buffer(s.ctx, 2 * 2 * 8 * 4);
    ck_assert_int_eq(clflash_backward(s.ctx, &d, NULL, s.q, s.k, s.v, s.o, d_o, s.lse, dq, dk, dv, 0, NULL, NULL),
                     CLFLASH_ERROR_UNSUPPORTED);
    clReleaseMemObject(dq), clReleaseMemObject(dk), clReleaseMemObject(dv), clReleaseMemObject(d_o);
    clflash_plan plan = {.struct_size = sizeof plan};
    ck_assert_int_eq(clflash_plan_attention(s.ctx, &d, &plan), CLFLASH_SUCCESS);
    ck_assert_uint_ge(plan.block, 1);
    small_free(&s);
}
END_TEST

/* A refused call writes nothing: O keeps what it held. */
START_TEST(refused_call_writes_nothing)
{
    small_call s;
    small_init(&s);
    float sentinel[32];
    for (int i = 0; i < 32; i++)
        sentinel[i] = -31.0f - (float)i;
    cl_command_queue qu = clflash_context_queue(s.ctx);
    ck_assert_int_eq(clEnqueueWriteBuffer(qu, s.o, CL_TRUE, 0, sizeof sentinel, sentinel, 0, NULL, NULL), CL_SUCCESS);
    clflash_attention_desc d = s.d;
    d.num_pages = 7;
    ck_assert_int_eq(small_forward(&s, &d, s.k, s.o), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    float back[32];
    ck_assert_int_eq(clEnqueueReadBuffer(qu, s.o, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(memcmp(back, sentinel, sizeof back), 0);
    small_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("paged_kv");
    TCase *tc = tcase_create("paged");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, paged_against_reference, 0, (int)N_CASES * N_PATHS);
    suite_add_tcase(s, tc);
    TCase *tv = tcase_create("validation");
    tcase_set_timeout(tv, TEST_TIMEOUT_S);
    tcase_add_test(tv, paged_validation);
    tcase_add_test(tv, refused_call_writes_nothing);
    suite_add_tcase(s, tv);
    return run_suite(s);
}
