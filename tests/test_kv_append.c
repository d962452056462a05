/*
 * test_kv_append.c - clflash_append_kv: new key and value rows written into contiguous and paged
 * caches at each sequence's length, the rotary embedding in both forms (half-split and
 * interleaved, over all or part of head_dim) on the new keys and, in place, on the queries, the
 * lengths advanced; against a host computation of what every element of the cache, the queries
 * and the lengths must hold afterwards (rows copied and elements not written: the same bits;
 * rotated ones within one unit of the storage type's rounding). Lengths and table entries out of
 * range (negative, past the capacity, pages outside the pool) drop their rows and touch nothing
 * else; positions past the rotary tables are left unrotated. Then one decoding step end to end
 * (append, then clflash_forward with the advanced lengths and CLFLASH_ALIGN_TO_KEY_LENGTH) against
 * the fp64 reference, and the call's refusals.
 */
#include "check_common.h"

#include <math.h>
#include <stdint.h>

typedef struct {
    uint32_t batch, heads_kv, heads_q, new_tokens, head_dim, capacity, page_size;
    clflash_dtype dtype;
    uint32_t rotary_dim;
    int interleaved, with_q, advance, hostile, odd_new; /* odd_new: k_new/v_new as [b][t][h][d] + gaps */
} append_case;

static const append_case cases[] = {
    {3, 2, 0, 1, 16, 40, 0, CLFLASH_F32, 0, 0, 0, 0, 0, 0},        /* plain copy, one token */
    {4, 2, 4, 3, 32, 50, 0, CLFLASH_F16, 32, 0, 1, 1, 1, 0},       /* half-split over all of d, q, hostile lengths */
    {5, 2, 8, 2, 64, 0, 16, CLFLASH_BF16, 32, 1, 1, 1, 1, 1},      /* paged, interleaved over half of d, bad pages */
    {3, 1, 2, 5, 24, 0, 7, CLFLASH_F16, 8, 0, 1, 0, 0, 1},         /* pages of 7: rows across pages */
    {2, 3, 3, 1, 128, 0, 64, CLFLASH_F32, 128, 1, 1, 1, 0, 0},     /* decoding step, paged */
};

typedef struct {
    append_case s;
    clflash_append_desc d;
    size_t esize;
    uint32_t pages_per_seq, num_pages;
    uint64_t n_new, n_cache, n_q, n_tab; /* n_cache: the layout's extent plus one more batch entry (or
                                            page) of guard, which no write may reach */
    void *k_new, *v_new, *k_cache, *v_cache, *q;     /* inputs as uploaded */
    void *k_want, *v_want, *q_want;                  /* what the call must leave */
    unsigned char *k_rot, *q_rot;                    /* 1 where an element of the want arrays was rotated */
    int32_t *lens, *lens_want, *table;
    float *cos_t, *sin_t;
    uint32_t positions;
} append_run;

static uint64_t idx(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t d, uint32_t b, uint32_t h,
                    uint32_t i, uint32_t c)
{
    const ref_strides s = ref_resolve_layout(l, heads, seq, d);
    return ref_index(&s, b, h, i, c);
}

/* Builds the inputs and the expected results of case s. */
static void build(append_run *r, const append_case *s, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->s = *s;
    const uint32_t b_n = s->batch, hk = s->heads_kv, hq = s->heads_q ? s->heads_q : s->heads_kv, n = s->new_tokens,
                   d = s->head_dim;
    const int paged = s->page_size != 0;
    r->esize = s->dtype == CLFLASH_F32 ? 4 : 2;
    r->pages_per_seq = paged ? 6 : 0;
    r->num_pages = paged ? b_n * r->pages_per_seq + 1 : 0;
    const uint32_t capacity = paged ? r->pages_per_seq * s->page_size : s->capacity;
    clflash_append_desc *a = &r->d;
    *a = (clflash_append_desc){.struct_size = sizeof *a};
    a->batch = b_n;
    a->heads_kv = hk;
    a->heads_q = s->heads_q;
    a->new_tokens = n;
    a->head_dim = d;
    a->dtype = s->dtype;
    a->flags = (s->advance ? CLFLASH_APPEND_ADVANCE_LENGTHS : 0) | (s->interleaved ? CLFLASH_ROTARY_INTERLEAVED : 0);
    a->capacity = s->capacity;
    a->page_size = s->page_size;
    a->pages_per_seq = r->pages_per_seq;
    a->num_pages = r->num_pages;
    a->rotary_dim = s->rotary_dim;
    if (s->odd_new) /* [batch][token][head][d] with a gap of 3 after each row and an offset of 5 */
        a->k_new = a->v_new = (clflash_layout){5, (uint64_t)n * (hk * d + 3), d, hk * d + 3};
    if (paged) /* [page][slot][head][d] */
        a->k_cache = a->v_cache = (clflash_layout){0, (uint64_t)s->page_size * hk * d, d, hk * d};
    const uint32_t cache_b = paged ? r->num_pages : b_n, cache_s = paged ? s->page_size : capacity;
    r->n_new = ref_extent(&a->k_new, b_n, hk, n, d);
    r->n_cache = ref_extent(&a->k_cache, cache_b, hk, cache_s, d) +
                 ref_resolve_layout(&a->k_cache, hk, cache_s, d).batch_stride;
    r->n_q = ref_extent(&a->q, b_n, hq, n, d);
    r->positions = capacity - 2; /* the last two positions have no rotary angle */
    r->k_new = malloc(r->n_new * r->esize), r->v_new = malloc(r->n_new * r->esize);
    r->k_cache = malloc(r->n_cache * r->esize), r->v_cache = malloc(r->n_cache * r->esize);
    r->k_want = malloc(r->n_cache * r->esize), r->v_want = malloc(r->n_cache * r->esize);
    r->q = malloc(r->n_q * r->esize), r->q_want = malloc(r->n_q * r->esize);
    r->k_rot = calloc(r->n_cache, 1), r->q_rot = calloc(r->n_q, 1);
    r->lens = malloc(b_n * 4), r->lens_want = malloc(b_n * 4);
    r->n_tab = paged ? (uint64_t)b_n * r->pages_per_seq : 1;
    r->table = malloc(r->n_tab * 4);
    r->cos_t = malloc((size_t)r->positions * (d / 2 + 1) * 4), r->sin_t = malloc((size_t)r->positions * (d / 2 + 1) * 4);
    ck_assert(r->k_new && r->v_new && r->k_cache && r->v_cache && r->k_want && r->v_want && r->q && r->q_want &&
              r->k_rot && r->q_rot && r->lens && r->lens_want && r->table && r->cos_t && r->sin_t);
    ref_rng g;
    ref_rng_seed(&g, seed);
    for (uint64_t i = 0; i < r->n_new; i++) {
        ref_store(s->dtype, r->k_new, i, (float)ref_rng_uniform(&g));
        ref_store(s->dtype, r->v_new, i, (float)ref_rng_uniform(&g));
    }
    for (uint64_t i = 0; i < r->n_cache; i++) {
        ref_store(s->dtype, r->k_cache, i, (float)(3.0 + ref_rng_uniform(&g)));
        ref_store(s->dtype, r->v_cache, i, (float)(-3.0 + ref_rng_uniform(&g)));
    }
    for (uint64_t i = 0; i < r->n_q; i++)
        ref_store(s->dtype, r->q, i, (float)(2.0 * ref_rng_uniform(&g)));
    for (uint32_t p = 0; p < r->positions; p++)
        for (uint32_t j = 0; j < s->rotary_dim / 2; j++) { /* RoPE's angles: p * 10000^(-2j / rotary_dim) */
            const double angle = p * pow(10000.0, -2.0 * j / (double)s->rotary_dim);
            r->cos_t[(size_t)p * (s->rotary_dim / 2) + j] = (float)cos(angle);
            r->sin_t[(size_t)p * (s->rotary_dim / 2) + j] = (float)sin(angle);
        }
    /* lengths: mostly valid; with `hostile` also negative, past the capacity and at its edge */
    for (uint32_t b = 0; b < b_n; b++) {
        static const int32_t hostile[4] = {-2, 0, 0, 0};
        r->lens[b] = (int32_t)((b * 7 + 3) % (capacity - n));
        if (s->hostile) {
            if (b % 4 == 0)
                r->lens[b] = hostile[0];
            else if (b % 4 == 1)
                r->lens[b] = (int32_t)capacity + 3;
            else if (b % 4 == 2)
                r->lens[b] = (int32_t)capacity - 1; /* the first token fits, the rest are dropped */
        }
        r->lens_want[b] = s->advance ? (int32_t)((uint32_t)r->lens[b] + n) : r->lens[b];
    }
    /* the table: pages in reverse order; with `hostile` some entries outside the pool */
    for (uint64_t i = 0; i < r->n_tab; i++)
        r->table[i] = paged ? (int32_t)(r->num_pages - 1 - i) : 0;
    if (paged && s->hostile) /* the pages some new rows land on: outside the pool */
        for (uint32_t b = 0; b < b_n; b++) {
            static const int32_t bad[3] = {-1, 0, INT32_MAX}; /* 0 stands for num_pages */
            if (r->lens[b] >= 0 && (uint32_t)r->lens[b] < capacity)
                r->table[(uint64_t)b * r->pages_per_seq + (uint32_t)r->lens[b] / s->page_size] =
                    bad[b % 3] ? bad[b % 3] : (int32_t)r->num_pages;
        }

    /* the expected results */
    memcpy(r->k_want, r->k_cache, r->n_cache * r->esize);
    memcpy(r->v_want, r->v_cache, r->n_cache * r->esize);
    memcpy(r->q_want, r->q, r->n_q * r->esize);
    const uint32_t half = s->rotary_dim / 2;
    for (uint32_t b = 0; b < b_n; b++)
        for (uint32_t t = 0; t < n; t++) {
            const int64_t pos = (int64_t)r->lens[b] + t;
            const int rotated = half && pos >= 0 && pos < (int64_t)r->positions;
            for (int part = 0; part < 3; part++) {
                const uint32_t heads = part == 2 ? hq : hk;
                if (part == 2 && !s->with_q)
                    continue;
                for (uint32_t h = 0; h < heads; h++) {
                    /* where the row goes (queries: in place) */
                    int64_t to_b = -1, to_s = 0;
                    if (part == 2) {
                        to_b = b;
                        to_s = t;
                    } else if (pos >= 0 && pos < capacity) {
                        if (!paged) {
                            to_b = b;
                            to_s = pos;
                        } else {
                            const int32_t page = r->table[(uint64_t)b * r->pages_per_seq + pos / s->page_size];
                            if (page >= 0 && (uint32_t)page < r->num_pages) {
                                to_b = page;
                                to_s = pos % s->page_size;
                            }
                        }
                    }
                    if (to_b < 0)
                        continue;
                    const void *src = part == 0 ? r->k_new : part == 1 ? r->v_new : r->q;
                    void *dst = part == 0 ? r->k_want : part == 1 ? r->v_want : r->q_want;
                    unsigned char *rot = part == 0 ? r->k_rot : part == 2 ? r->q_rot : NULL;
                    const clflash_layout *sl = part == 2 ? &a->q : part == 0 ? &a->k_new : &a->v_new;
                    const clflash_layout *dl = part == 2 ? &a->q : part == 0 ? &a->k_cache : &a->v_cache;
                    const uint32_t d_heads = heads, d_seq = part == 2 ? n : cache_s;
                    float row[256];
                    for (uint32_t c = 0; c < d; c++)
                        row[c] = ref_load(s->dtype, src, idx(sl, heads, n, d, b, h, t, c));
                    if (part != 1 && rotated)
                        for (uint32_t j = 0; j < half; j++) {
                            const uint32_t c0 = s->interleaved ? 2 * j : j, c1 = s->interleaved ? 2 * j + 1 : j + half;
                            const float cs = r->cos_t[(size_t)pos * half + j], sn = r->sin_t[(size_t)pos * half + j];
                            const float x = row[c0], y = row[c1];
                            row[c0] = x * cs - y * sn;
                            row[c1] = y * cs + x * sn;
                            if (rot) {
                                rot[idx(dl, d_heads, d_seq, d, (uint32_t)to_b, h, (uint32_t)to_s, c0)] = 1;
                                rot[idx(dl, d_heads, d_seq, d, (uint32_t)to_b, h, (uint32_t)to_s, c1)] = 1;
                            }
                        }
                    for (uint32_t c = 0; c < d; c++)
                        ref_store(s->dtype, dst, idx(dl, d_heads, d_seq, d, (uint32_t)to_b, h, (uint32_t)to_s, c), row[c]);
                }
            }
        }
}

static void release(append_run *r)
{
    void *all[] = {r->k_new, r->v_new, r->k_cache, r->v_cache, r->k_want, r->v_want, r->q, r->q_want, r->k_rot,
                   r->q_rot, r->lens, r->lens_want, r->table, r->cos_t, r->sin_t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static cl_mem upload(clflash_context *ctx, const void *p, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)p, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

static void download(clflash_context *ctx, cl_mem m, void *p, size_t bytes)
{
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(ctx), m, CL_TRUE, 0, bytes, p, 0, NULL, NULL),
                     CL_SUCCESS);
}

/* Compares n elements: exact where rot is NULL or 0, else within the storage type's rounding of the
 * rotation (fp32 products on the device may be fused). Returns the failures, the first in msg. */
static int compare(const append_run *r, const char *what, const void *got, const void *want,
                   const unsigned char *rot, uint64_t n, char *msg, size_t len)
{
    const double rel = r->s.dtype == CLFLASH_F32 ? 1e-6 : r->s.dtype == CLFLASH_F16 ? 1e-3 : 8e-3;
    int bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        const int same = memcmp((const char *)got + i * r->esize, (const char *)want + i * r->esize, r->esize) == 0;
        if (same)
            continue;
        const double g = ref_load(r->s.dtype, got, i), w = ref_load(r->s.dtype, want, i);
        if (rot && rot[i] && fabs(g - w) <= 1e-6 + rel * fabs(w))
            continue;
        if (bad++ == 0)
            snprintf(msg, len, "%s[%llu] = %.7g, expected %.7g%s", what, (unsigned long long)i, g, w,
                     rot && rot[i] ? " (rotated)" : "");
    }
    return bad;
}

START_TEST(append_against_host)
{
    const append_case *s = &cases[_i];
    append_run r;
    build(&r, s, 700 + (uint64_t)_i);
    clflash_context *ctx = test_context(NULL);
    cl_mem kn = upload(ctx, r.k_new, r.n_new * r.esize), vn = upload(ctx, r.v_new, r.n_new * r.esize);
    cl_mem kc = upload(ctx, r.k_cache, r.n_cache * r.esize), vc = upload(ctx, r.v_cache, r.n_cache * r.esize);
    cl_mem q = s->with_q ? upload(ctx, r.q, r.n_q * r.esize) : NULL;
    cl_mem lens = upload(ctx, r.lens, s->batch * 4);
    cl_mem table = s->page_size ? upload(ctx, r.table, r.n_tab * 4) : NULL;
    const size_t rot_bytes = (size_t)r.positions * (s->rotary_dim / 2) * 4;
    cl_mem cs = s->rotary_dim ? upload(ctx, r.cos_t, rot_bytes) : NULL, sn = s->rotary_dim ? upload(ctx, r.sin_t, rot_bytes) : NULL;
    clflash_append_desc d = r.d;
    d.cache_lengths = lens;
    d.block_table = table;
    d.rotary_cos = cs;
    d.rotary_sin = sn;
    d.rotary_positions = s->rotary_dim ? r.positions : 0;
    const clflash_status st = clflash_append_kv(ctx, &d, NULL, q, kn, vn, kc, vc, 0, NULL, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "case %d: %s (%s)", _i, clflash_status_string(st), clflash_last_error_detail());
    void *k_got = malloc(r.n_cache * r.esize), *v_got = malloc(r.n_cache * r.esize), *q_got = malloc(r.n_q * r.esize);
    int32_t lens_got[8];
    ck_assert(k_got && v_got && q_got && s->batch <= 8);
    download(ctx, kc, k_got, r.n_cache * r.esize);
    download(ctx, vc, v_got, r.n_cache * r.esize);
    download(ctx, lens, lens_got, s->batch * 4);
    char msg[300] = "";
    ck_assert_msg(compare(&r, "k_cache", k_got, r.k_want, r.k_rot, r.n_cache, msg, sizeof msg) == 0, "case %d: %s", _i,
                  msg);
    ck_assert_msg(compare(&r, "v_cache", v_got, r.v_want, NULL, r.n_cache, msg, sizeof msg) == 0, "case %d: %s", _i, msg);
    if (q) {
        download(ctx, q, q_got, r.n_q * r.esize);
        ck_assert_msg(compare(&r, "q", q_got, r.q_want, r.q_rot, r.n_q, msg, sizeof msg) == 0, "case %d: %s", _i, msg);
    }
    ck_assert_msg(memcmp(lens_got, r.lens_want, s->batch * 4) == 0, "case %d: the lengths are not as expected", _i);
    const cl_mem all[] = {kn, vn, kc, vc, q, lens, table, cs, sn};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(k_got), free(v_got), free(q_got);
    release(&r);
    clflash_context_free(ctx);
}
END_TEST

/* One decoding step end to end on a paged cache: append 2 new tokens (rotary, half-split) to each
 * of 3 sequences, advancing the lengths, then attend with those lengths, causal and aligned to
 * them; against the fp64 reference of the keys the cache then holds and the rotated queries.
 * _i: 0 f32, 1 f16. */
START_TEST(decode_step)
{
    const clflash_dtype t = _i ? CLFLASH_F16 : CLFLASH_F32;
    const uint32_t B = 3, HQ = 4, HK = 2, N = 2, D = 32, P = 16;
    const append_case s = {B, HK, HQ, N, D, 0, P, t, D, 0, 1, 1, 0, 0};
    append_run r;
    build(&r, &s, 31 + (uint64_t)_i); /* pages in reverse order, lengths (7b + 3) % (capacity - N) */
    const uint32_t PPS = r.pages_per_seq, cap = PPS * P;
    clflash_context *ctx = test_context(NULL);
    cl_mem kn = upload(ctx, r.k_new, r.n_new * r.esize), vn = upload(ctx, r.v_new, r.n_new * r.esize);
    cl_mem kc = upload(ctx, r.k_cache, r.n_cache * r.esize), vc = upload(ctx, r.v_cache, r.n_cache * r.esize);
    cl_mem q = upload(ctx, r.q, r.n_q * r.esize), lens = upload(ctx, r.lens, B * 4), table = upload(ctx, r.table, r.n_tab * 4);
    const size_t rot_bytes = (size_t)r.positions * (D / 2) * 4;
    cl_mem cs = upload(ctx, r.cos_t, rot_bytes), sn = upload(ctx, r.sin_t, rot_bytes);
    clflash_append_desc a = r.d;
    a.cache_lengths = lens;
    a.block_table = table;
    a.rotary_cos = cs;
    a.rotary_sin = sn;
    a.rotary_positions = r.positions;
    ck_assert_int_eq(clflash_append_kv(ctx, &a, NULL, q, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_SUCCESS);

    clflash_attention_desc d = th_desc(B, HQ, HK, N, cap, D, t, CLFLASH_CAUSAL | CLFLASH_ALIGN_TO_KEY_LENGTH);
    d.k = d.v = a.k_cache;
    d.block_table = table;
    d.page_size = P;
    d.pages_per_seq = PPS;
    d.num_pages = r.num_pages;
    d.key_lengths = lens;
    const uint64_t rows = (uint64_t)B * HQ * N;
    cl_int err;
    cl_mem o = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, rows * D * r.esize, NULL, &err);
    cl_mem lse = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, rows * 4, NULL, &err);
    const clflash_status st = clflash_forward(ctx, &d, NULL, q, kc, vc, o, lse, 0, NULL, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    void *o_got = malloc(rows * D * r.esize);
    float *lse_got = malloc(rows * 4);
    ck_assert(o_got && lse_got);
    download(ctx, o, o_got, rows * D * r.esize);
    download(ctx, lse, lse_got, rows * 4);

    /* the reference: the expected cache gathered per sequence, the expected rotated queries */
    float *kf = malloc((size_t)B * HK * cap * D * 4), *vf = malloc((size_t)B * HK * cap * D * 4), *qf = malloc(rows * D * 4);
    double *ro = malloc(rows * D * sizeof(double)), *rl = malloc(rows * sizeof(double));
    ck_assert(kf && vf && qf && ro && rl);
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t h = 0; h < HK; h++)
            for (uint32_t j = 0; j < cap; j++)
                for (uint32_t c = 0; c < D; c++) {
                    const uint32_t page = (uint32_t)r.table[b * PPS + j / P];
                    const uint64_t from = idx(&a.k_cache, HK, P, D, page, h, j % P, c);
                    const uint64_t to = (((uint64_t)b * HK + h) * cap + j) * D + c;
                    kf[to] = ref_load(t, r.k_want, from);
                    vf[to] = ref_load(t, r.v_want, from);
                }
    for (uint64_t i = 0; i < rows * D; i++)
        qf[i] = ref_load(t, r.q_want, i);
    clflash_attention_desc ref_d = th_desc(B, HQ, HK, N, cap, D, t, d.flags);
    const ref_extras x = {NULL, NULL, r.lens_want};
    ref_attention_ex(&ref_d, qf, kf, vf, &x, ro, rl);
    const ref_tol to = ref_tol_o(t, REF_PATH_FLASH), tl = {1e-3, 1e-4}; /* rotated q: a unit of rounding */
    for (uint64_t i = 0; i < rows * D; i++)
        ck_assert_msg(ref_close(ref_load(t, o_got, i), ro[i], to), "O[%llu] = %g, reference %g", (unsigned long long)i,
                      ref_load(t, o_got, i), ro[i]);
    for (uint64_t i = 0; i < rows; i++)
        ck_assert_msg(ref_close(lse_got[i], rl[i], tl), "lse[%llu] = %g, reference %g", (unsigned long long)i,
                      lse_got[i], rl[i]);
    const cl_mem all[] = {kn, vn, kc, vc, q, lens, table, cs, sn, o, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free(o_got), free(lse_got), free(kf), free(vf), free(qf), free(ro), free(rl);
    release(&r);
    clflash_context_free(ctx);
}
END_TEST

START_TEST(append_validation)
{
    clflash_context *ctx = test_context(NULL);
    cl_int err;
    cl_context cl = clflash_context_cl(ctx);
    cl_mem kn = clCreateBuffer(cl, CL_MEM_READ_WRITE, 2 * 2 * 1 * 8 * 4, NULL, &err);
    cl_mem vn = clCreateBuffer(cl, CL_MEM_READ_WRITE, 2 * 2 * 1 * 8 * 4, NULL, &err);
    cl_mem kc = clCreateBuffer(cl, CL_MEM_READ_WRITE, 2 * 2 * 10 * 8 * 4, NULL, &err);
    cl_mem vc = clCreateBuffer(cl, CL_MEM_READ_WRITE, 2 * 2 * 10 * 8 * 4, NULL, &err);
    cl_mem lens = clCreateBuffer(cl, CL_MEM_READ_WRITE, 2 * 4, NULL, &err);
    cl_mem tab = clCreateBuffer(cl, CL_MEM_READ_WRITE, 64 * 4, NULL, &err);
    clflash_append_desc base = {.struct_size = sizeof base};
    base.batch = 2;
    base.heads_kv = 2;
    base.new_tokens = 1;
    base.head_dim = 8;
    base.dtype = CLFLASH_F32;
    base.capacity = 10;
    base.cache_lengths = lens;
    ck_assert_int_eq(clflash_append_kv(ctx, &base, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(clFinish(clflash_context_queue(ctx)), CL_SUCCESS);

    clflash_append_desc d = base;
    d.cache_lengths = NULL;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    d = base;
    d.dtype = CLFLASH_I8;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_DTYPE);
    d = base;
    d.capacity = 11; /* the caches hold 10 */
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    d = base;
    d.capacity = 0;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_SHAPE);
    d = base;
    d.rotary_dim = 3;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_SHAPE);
    d = base;
    d.rotary_dim = 8;
    d.rotary_positions = 4;
    d.rotary_cos = tab; /* no sin */
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    d = base;
    d.flags = CLFLASH_ROTARY_INTERLEAVED;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_FLAGS);
    d = base;
    d.flags = 1u << 7;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_FLAGS);
    d = base;
    d.page_size = 4;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    d = base;
    d.block_table = tab;
    d.page_size = 5;
    d.pages_per_seq = 2;
    d.num_pages = 4; /* capacity 10 = 2 x 5: fine; 3 pages per sequence would not be */
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(clFinish(clflash_context_queue(ctx)), CL_SUCCESS);
    d.pages_per_seq = 3;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_SHAPE);
    d = base;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, kc, 0, NULL, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT); /* the two caches overlap */
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kc, vn, kc, vc, 0, NULL, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT); /* the new keys overlap the cache */
    d.cache_lengths = kc;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    d = base;
    d.struct_size = 8;
    ck_assert_int_eq(clflash_append_kv(ctx, &d, NULL, NULL, kn, vn, kc, vc, 0, NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    const cl_mem all[] = {kn, vn, kc, vc, lens, tab};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    clflash_context_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_append");
    TCase *tc = tcase_create("append");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, append_against_host, 0, N_OF(cases));
    tcase_add_loop_test(tc, decode_step, 0, 2);
    tcase_add_test(tc, append_validation);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
