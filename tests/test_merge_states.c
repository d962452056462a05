/*
 * test_merge_states.c - clflash_merge_states against an fp64 merge of the same parts: one part,
 * several, empty (-inf) parts, rows with every part empty, NaN parts, strided and gapped layouts,
 * f32/f16/bf16 parts and outputs; that it is deterministic; and the checks it makes before
 * enqueueing anything.
 */
#include "check_common.h"

#include <math.h>

typedef struct {
    clflash_merge_desc m;
    size_t ps, os;                /* element sizes of the parts and of O */
    uint64_t part_elems, o_elems; /* host array lengths */
    uint64_t lse_floats, rows;
    float *part_f;                /* the parts' values (storage-rounded), NaN in gaps */
    void *part;                   /* the same in part_dtype */
    float *part_lse;
    void *o;                      /* pre-filled with the sentinel */
    float *lse;
    double *ref_o, *ref_lse;      /* dense [row][c], [row] */
} merge_case;

static float to_storage(clflash_dtype t, float x, void *dst, uint64_t i)
{
    if (t == CLFLASH_F32) {
        ((float *)dst)[i] = x;
        return x;
    }
    const uint16_t h = t == CLFLASH_F16 ? ref_f32_to_f16(x) : ref_f32_to_bf16(x);
    ((uint16_t *)dst)[i] = h;
    return t == CLFLASH_F16 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h);
}

static double from_storage(clflash_dtype t, const void *src, uint64_t i)
{
    if (t == CLFLASH_F32)
        return ((const float *)src)[i];
    const uint16_t h = ((const uint16_t *)src)[i];
    return t == CLFLASH_F16 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h);
}

/* lse_kind, four entries, part p taking entry p % 4: 0 random, 1 -inf, 2 -inf on every third row,
 * 3 NaN on row 1 */
static void case_init(merge_case *t, const clflash_merge_desc *m, const int *lse_kind, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->m = *m;
    const clflash_dtype out = m->dtype ? m->dtype : m->part_dtype;
    t->ps = clflash_dtype_size(m->part_dtype);
    t->os = clflash_dtype_size(out);
    t->rows = (uint64_t)m->batch * m->heads * m->seq;
    const uint64_t one = ref_extent(&m->part_o, m->batch, m->heads, m->seq, m->head_dim);
    const uint64_t pstride = m->part_o_stride ? m->part_o_stride : one;
    const uint64_t lstride = m->part_lse_stride ? m->part_lse_stride : t->rows;
    t->part_elems = (m->parts - 1) * pstride + one;
    t->lse_floats = (m->parts - 1) * lstride + t->rows;
    t->o_elems = ref_extent(&m->o, m->batch, m->heads, m->seq, m->head_dim);
    t->part_f = malloc(t->part_elems * sizeof(float));
    t->part = calloc(t->part_elems, t->ps);
    t->part_lse = malloc(t->lse_floats * sizeof(float));
    t->o = malloc(t->o_elems * t->os);
    t->lse = malloc(t->rows * sizeof(float));
    t->ref_o = calloc(t->rows * m->head_dim, sizeof(double));
    t->ref_lse = calloc(t->rows, sizeof(double));
    ck_assert(t->part_f && t->part && t->part_lse && t->o && t->lse && t->ref_o && t->ref_lse);
    for (uint64_t i = 0; i < t->part_elems; i++)
        t->part_f[i] = to_storage(m->part_dtype, NAN, t->part, i); /* gaps: NaN, never to be read */
    for (uint64_t i = 0; i < t->lse_floats; i++)
        t->part_lse[i] = NAN;
    ref_rng r;
    ref_rng_seed(&r, seed);
    const ref_strides ps = ref_resolve_layout(&m->part_o, m->heads, m->seq, m->head_dim);
    for (uint32_t p = 0; p < m->parts; p++)
        for (uint64_t row = 0; row < t->rows; row++) {
            const uint32_t i = (uint32_t)(row % m->seq), h = (uint32_t)(row / m->seq % m->heads),
                           b = (uint32_t)(row / m->seq / m->heads);
            float l = (float)(4.0 * ref_rng_uniform(&r));
            const int kind = lse_kind[p % 4]; /* shapes with more parts repeat their four kinds */
            if (kind == 1 || (kind == 2 && row % 3 == 0))
                l = -INFINITY;
            if (kind == 3 && row == 1)
                l = NAN;
            t->part_lse[p * lstride + row] = l;
            for (uint32_t c = 0; c < m->head_dim; c++) {
                const uint64_t at = p * pstride + ref_index(&ps, b, h, i, c);
                /* an empty part's O is never read: make it poison */
                const float x = l == -INFINITY ? NAN : (float)ref_rng_uniform(&r);
                t->part_f[at] = to_storage(m->part_dtype, x, t->part, at);
            }
        }
    /* the reference */
    for (uint64_t row = 0; row < t->rows; row++) {
        const uint32_t i = (uint32_t)(row % m->seq), h = (uint32_t)(row / m->seq % m->heads),
                       b = (uint32_t)(row / m->seq / m->heads);
        double top = -INFINITY;
        int nan = 0;
        for (uint32_t p = 0; p < m->parts; p++) {
            const double l = t->part_lse[p * lstride + row];
            nan |= isnan(l);
            if (l > top)
                top = l;
        }
        double sum = 0.0;
        for (uint32_t p = 0; p < m->parts; p++) {
            const double l = t->part_lse[p * lstride + row];
            if (l == -INFINITY || isnan(l))
                continue;
            const double w = exp(l - top);
            sum += w;
            for (uint32_t c = 0; c < m->head_dim; c++)
                t->ref_o[row * m->head_dim + c] += w * t->part_f[p * pstride + ref_index(&ps, b, h, i, c)];
        }
        for (uint32_t c = 0; c < m->head_dim; c++)
            t->ref_o[row * m->head_dim + c] = nan ? NAN : sum == 0.0 ? 0.0 : t->ref_o[row * m->head_dim + c] / sum;
        t->ref_lse[row] = nan ? NAN : sum == 0.0 ? -INFINITY : top + log(sum);
    }
}

static void case_reset(merge_case *t)
{
    for (uint64_t i = 0; i < t->o_elems; i++)
        if (t->os == 4)
            ((uint32_t *)t->o)[i] = TH_SENTINEL_F32;
        else
            ((uint16_t *)t->o)[i] = TH_SENTINEL_F16;
    for (uint64_t i = 0; i < t->rows; i++)
        memcpy(&t->lse[i], &(uint32_t){TH_SENTINEL_LSE}, 4);
}

static void case_free(merge_case *t)
{
    free(t->part_f);
    free(t->part);
    free(t->part_lse);
    free(t->o);
    free(t->lse);
    free(t->ref_o);
    free(t->ref_lse);
}

static cl_mem buffer_from(clflash_context *c, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem b = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return b;
}

/* Runs the merge through device buffers; reads O and lse back. */
static clflash_status run_merge(clflash_context *c, merge_case *t, int with_lse)
{
    cl_mem bp = buffer_from(c, t->part, t->part_elems * t->ps);
    cl_mem bl = buffer_from(c, t->part_lse, t->lse_floats * sizeof(float));
    cl_mem bo = buffer_from(c, t->o, t->o_elems * t->os);
    cl_mem blse = buffer_from(c, t->lse, t->rows * sizeof(float));
    cl_event done = NULL;
    const clflash_status st =
        clflash_merge_states(c, &t->m, NULL, bp, bl, bo, with_lse ? blse : NULL, 0, NULL, &done);
    cl_command_queue q = clflash_context_queue(c);
    if (done) {
        clWaitForEvents(1, &done);
        clReleaseEvent(done);
    }
    ck_assert_int_eq(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, t->o_elems * t->os, t->o, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(q, blse, CL_TRUE, 0, t->rows * sizeof(float), t->lse, 0, NULL, NULL),
                     CL_SUCCESS);
    clReleaseMemObject(bp);
    clReleaseMemObject(bl);
    clReleaseMemObject(bo);
    clReleaseMemObject(blse);
    return st;
}

static int same_or_both_nan(double got, double want, ref_tol tol)
{
    if (isnan(want))
        return isnan(got);
    return ref_close(got, want, tol);
}

/* Checks O and lse against the reference, and that O's gaps (and lse without with_lse) are untouched. */
static void check_case(const merge_case *t, int with_lse, const char *what)
{
    const clflash_merge_desc *m = &t->m;
    const clflash_dtype out = m->dtype ? m->dtype : m->part_dtype;
    /* the merge is fp32 sums of a few terms, then one rounding to O's type */
    const ref_tol tol = out == CLFLASH_F32 ? (ref_tol){2e-6, 2e-6}
                        : out == CLFLASH_F16 ? (ref_tol){1e-3, 2e-3}
                                             : (ref_tol){8e-3, 1e-2};
    const ref_tol tl = {2e-6, 2e-6};
    const ref_strides os = ref_resolve_layout(&m->o, m->heads, m->seq, m->head_dim);
    unsigned char *inside = calloc(t->o_elems, 1);
    ck_assert_ptr_nonnull(inside);
    for (uint64_t row = 0; row < t->rows; row++) {
        const uint32_t i = (uint32_t)(row % m->seq), h = (uint32_t)(row / m->seq % m->heads),
                       b = (uint32_t)(row / m->seq / m->heads);
        for (uint32_t c = 0; c < m->head_dim; c++) {
            const uint64_t at = ref_index(&os, b, h, i, c);
            inside[at] = 1;
            const double got = from_storage(out, t->o, at), want = t->ref_o[row * m->head_dim + c];
            ck_assert_msg(same_or_both_nan(got, want, tol), "%s: row %llu col %u: O %.8g, expected %.8g", what,
                          (unsigned long long)row, c, got, want);
        }
        if (with_lse)
            ck_assert_msg(same_or_both_nan(t->lse[row], t->ref_lse[row], tl), "%s: row %llu: lse %.8g, expected %.8g",
                          what, (unsigned long long)row, t->lse[row], t->ref_lse[row]);
        else
            ck_assert_msg(memcmp(&t->lse[row], &(uint32_t){TH_SENTINEL_LSE}, 4) == 0, "%s: lse written", what);
    }
    for (uint64_t k = 0; k < t->o_elems; k++)
        if (!inside[k]) {
            const int untouched = t->os == 4 ? ((const uint32_t *)t->o)[k] == TH_SENTINEL_F32
                                             : ((const uint16_t *)t->o)[k] == TH_SENTINEL_F16;
            ck_assert_msg(untouched, "%s: O's gap element %llu was written", what, (unsigned long long)k);
        }
    free(inside);
}

static clflash_merge_desc base_merge(uint32_t parts, uint32_t batch, uint32_t heads, uint32_t seq, uint32_t d,
                                     clflash_dtype pt, clflash_dtype out)
{
    clflash_merge_desc m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    m.parts = parts;
    m.batch = batch;
    m.heads = heads;
    m.seq = seq;
    m.head_dim = d;
    m.part_dtype = pt;
    m.dtype = out;
    return m;
}

typedef struct {
    uint32_t parts, batch, heads, seq, d;
    clflash_dtype pt, out;
    int kinds[4];
    int strided;
} merge_shape;

static const merge_shape shapes[] = {
    {1, 1, 1, 1, 1, CLFLASH_F32, 0, {0}, 0},                    /* size 1 everywhere */
    {1, 2, 3, 5, 64, CLFLASH_F32, 0, {0}, 0},                   /* one part: O itself */
    {2, 1, 4, 7, 128, CLFLASH_F32, CLFLASH_F16, {0, 0}, 0},      /* fp32 parts, f16 out (the split path) */
    {3, 2, 2, 13, 37, CLFLASH_F32, CLFLASH_BF16, {0, 2, 0}, 1},  /* odd head_dim, some -inf, strided */
    {4, 1, 3, 11, 96, CLFLASH_F16, CLFLASH_F16, {1, 0, 2, 0}, 1}, /* an all-empty part */
    {2, 1, 1, 9, 16, CLFLASH_F32, 0, {1, 1}, 0},                 /* every part empty: O = 0, lse = -inf */
    {3, 1, 2, 4, 24, CLFLASH_F32, 0, {0, 3, 0}, 0},              /* a NaN lse reaches its row only */
    {4, 3, 1, 17, 256, CLFLASH_BF16, CLFLASH_F32, {0, 2, 2, 0}, 0},
    /* more parts than the kernel's loads in flight (16) and than a row's lanes */
    {33, 1, 4, 1, 128, CLFLASH_F32, CLFLASH_F16, {0, 2, 0, 0}, 0}, /* a decoding step's merge */
    {37, 2, 3, 5, 5, CLFLASH_F32, CLFLASH_BF16, {0, 2, 1, 0}, 1},
    {CLFLASH_MAX_SPLITS, 1, 2, 3, 3, CLFLASH_F16, CLFLASH_F32, {2, 0, 0, 1}, 0},
};

START_TEST(merge_matches_reference)
{
    const merge_shape *s = &shapes[_i];
    clflash_context *c = test_context(NULL);
    clflash_merge_desc m = base_merge(s->parts, s->batch, s->heads, s->seq, s->d, s->pt, s->out);
    if (s->strided) {
        /* parts [b][s][h][d] with 3 elements of padding per row and a gap between parts; O with gaps */
        const uint64_t D = s->d;
        m.part_o = (clflash_layout){5, (uint64_t)s->seq * s->heads * (D + 3), D + 3, s->heads * (D + 3)};
        m.part_o_stride = (uint64_t)s->batch * s->seq * s->heads * (D + 3) + 11;
        m.part_lse_stride = (uint64_t)s->batch * s->heads * s->seq + 7;
        m.o = (clflash_layout){2, 0, 0, D + 1};
    }
    for (int with_lse = 0; with_lse < 2; with_lse++) {
        merge_case t;
        case_init(&t, &m, s->kinds, 40 + (uint64_t)_i);
        case_reset(&t);
        const clflash_status st = run_merge(c, &t, with_lse);
        ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
        char what[64];
        snprintf(what, sizeof what, "shape %d%s", _i, with_lse ? "" : " no-lse");
        check_case(&t, with_lse, what);
        /* deterministic: the same parts give the same bits */
        void *first = malloc(t.o_elems * t.os);
        memcpy(first, t.o, t.o_elems * t.os);
        case_reset(&t);
        ck_assert_int_eq(run_merge(c, &t, with_lse), CLFLASH_SUCCESS);
        ck_assert_msg(memcmp(first, t.o, t.o_elems * t.os) == 0, "%s: a second run gave other bits", what);
        free(first);
        case_free(&t);
    }
    clflash_context_free(c);
}
END_TEST

START_TEST(merge_refuses)
{
    clflash_context *c = test_context(NULL);
    const int kinds[4] = {0, 0, 0, 0};
    const clflash_merge_desc good = base_merge(2, 1, 2, 3, 8, CLFLASH_F32, 0);
    merge_case t;
    case_init(&t, &good, kinds, 9);
    cl_mem bp = buffer_from(c, t.part, t.part_elems * t.ps);
    cl_mem bl = buffer_from(c, t.part_lse, t.lse_floats * sizeof(float));
    cl_mem bo = buffer_from(c, t.o, t.o_elems * t.os);
    cl_mem blse = buffer_from(c, t.lse, t.rows * sizeof(float));
    cl_mem small = buffer_from(c, t.o, 4);
    struct {
        const char *what;
        clflash_merge_desc m;
        cl_mem part, plse, o, lse;
        clflash_status want;
    } bad[16];
    int n = 0;
#define BAD(w, field, value, st)                                                                   \
    do {                                                                                           \
        bad[n].what = w;                                                                           \
        bad[n].m = good;                                                                           \
        bad[n].m.field = value;                                                                    \
        bad[n].part = bp, bad[n].plse = bl, bad[n].o = bo, bad[n].lse = blse;                      \
        bad[n].want = st;                                                                          \
        n++;                                                                                       \
    } while (0)
    BAD("struct_size 0", struct_size, 0, CLFLASH_ERROR_INVALID_ARGUMENT);
    BAD("parts 0", parts, 0, CLFLASH_ERROR_INVALID_SHAPE);
    BAD("parts above the maximum", parts, CLFLASH_MAX_SPLITS + 1, CLFLASH_ERROR_INVALID_SHAPE);
    BAD("seq 0", seq, 0, CLFLASH_ERROR_INVALID_SHAPE);
    BAD("head_dim 257", head_dim, 257, CLFLASH_ERROR_INVALID_SHAPE);
    BAD("part_dtype i8", part_dtype, CLFLASH_I8, CLFLASH_ERROR_INVALID_DTYPE);
    BAD("dtype 77", dtype, (clflash_dtype)77, CLFLASH_ERROR_INVALID_DTYPE);
    BAD("o rows overlap", o.seq_stride, 4, CLFLASH_ERROR_INVALID_LAYOUT);
    BAD("offset overflow", part_o.offset, UINT64_MAX - 3, CLFLASH_ERROR_INVALID_LAYOUT);
    BAD("parts past the buffer", part_o_stride, 1000, CLFLASH_ERROR_BUFFER_TOO_SMALL);
    BAD("lse parts past the buffer", part_lse_stride, 1000, CLFLASH_ERROR_BUFFER_TOO_SMALL);
    BAD("o too small", batch, 1, CLFLASH_ERROR_INVALID_ARGUMENT); /* patched below */
    bad[n - 1].o = small;
    bad[n - 1].want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
    BAD("lse is part_lse", batch, 1, CLFLASH_ERROR_INVALID_ARGUMENT);
    bad[n - 1].lse = bl;
    BAD("o is part_lse", batch, 1, CLFLASH_ERROR_INVALID_ARGUMENT);
    bad[n - 1].o = bl;
    BAD("o overlaps the parts", batch, 1, CLFLASH_ERROR_INVALID_LAYOUT);
    bad[n - 1].o = bp;
    BAD("NULL part_o", batch, 1, CLFLASH_ERROR_INVALID_ARGUMENT);
    bad[n - 1].part = NULL;
#undef BAD
    for (int i = 0; i < n; i++) {
        cl_event ev = NULL;
        const clflash_status st =
            clflash_merge_states(c, &bad[i].m, NULL, bad[i].part, bad[i].plse, bad[i].o, bad[i].lse, 0, NULL, &ev);
        ck_assert_msg(st == bad[i].want, "%s: got %d (%s), expected %d", bad[i].what, st, clflash_last_error_detail(),
                      bad[i].want);
        ck_assert_msg(clflash_last_error_detail()[0] != '\0', "%s: no detail", bad[i].what);
        ck_assert_ptr_null(ev);
    }
    ck_assert_int_eq(clflash_merge_states(NULL, &good, NULL, bp, bl, bo, blse, 0, NULL, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_merge_states(c, NULL, NULL, bp, bl, bo, blse, 0, NULL, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_merge_states(c, &good, NULL, bp, bl, bo, blse, 1, NULL, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT);
    /* o in the parts' buffer, past them: fine */
    ck_assert_int_eq(clflash_merge_states(c, &good, NULL, bp, bl, bo, NULL, 0, NULL, NULL), CLFLASH_SUCCESS);
    clFinish(clflash_context_queue(c));
    for (int i = 0; i < 5; i++)
        clReleaseMemObject((cl_mem[]){bp, bl, bo, blse, small}[i]);
    case_free(&t);
    clflash_context_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("merge_states");
    TCase *tc = tcase_create("merge");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, merge_matches_reference, 0, N_OF(shapes));
    tcase_add_test(tc, merge_refuses);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
