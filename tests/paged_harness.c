/*
 * paged_harness.c - see paged_harness.h. The pool's pages are handed out in a shuffled order, a
 * few stay spare, and the gathered tensors follow clflash.h's rule exactly (entries clamped into
 * the pool), so the reference needs to know nothing about pages.
 */
#define _POSIX_C_SOURCE 200809L /* snprintf in strict C */
#include "paged_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PG_SENTINEL_F32 0xc6f5ab9au
#define PG_SENTINEL_16 0xf7a9u

static void copy_elem(size_t esize, void *dst, uint64_t di, const void *src, uint64_t si)
{
    memcpy((char *)dst + di * esize, (const char *)src + si * esize, esize);
}

/* The pool layout of a spec (clflash.h's "Paged KV caches": the page in place of the batch). */
static clflash_layout pool_layout(const pg_spec *s)
{
    const uint64_t d = s->head_dim, h = s->heads_kv;
    clflash_layout l = {0, 0, 0, 0};
    if (s->layout == PG_SLOT_MAJOR) {
        l.seq_stride = h * d;
        l.head_stride = d;
        l.batch_stride = s->page_size * h * d;
    } else if (s->layout == PG_ODD) {
        l.offset = 3;
        l.seq_stride = h * d + 3;
        l.head_stride = d;
        l.batch_stride = s->page_size * l.seq_stride + 5;
    }
    return l;
}

static int32_t key_length(const pg_spec *s, uint32_t b)
{
    const int32_t sk = (int32_t)s->seq_k, pattern[5] = {sk, 1, sk / 2 + 1, 0, sk + 9};
    return pattern[b % 5];
}

int pg_case_init(pg_case *c, const pg_spec *s, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    if (s->page_size == 0 || s->heads_kv == 0 || s->heads_q % s->heads_kv != 0 ||
        (s->dtype != CLFLASH_F32 && s->dtype != CLFLASH_F16 && s->dtype != CLFLASH_BF16))
        return -1;
    c->s = *s;
    c->esize = clflash_dtype_size(s->dtype);
    c->pages_per_seq = (s->seq_k + s->page_size - 1) / s->page_size + s->extra_columns;
    c->num_pages = s->batch * c->pages_per_seq + 2; /* two spare pages no entry names */
    const uint32_t b_n = s->batch, hq = s->heads_q, hk = s->heads_kv, sq = s->seq_q, sk = s->seq_k, d = s->head_dim;

    clflash_attention_desc base = {.struct_size = sizeof base};
    base.batch = b_n;
    base.heads_q = hq;
    base.heads_kv = hk;
    base.seq_q = sq;
    base.seq_k = sk;
    base.head_dim = d;
    base.dtype = s->dtype;
    base.flags = s->flags;
    base.window_left = s->window_left;
    base.window_right = s->window_right;
    base.num_splits = s->num_splits;
    c->contiguous = base;
    c->d = base;
    c->d.k = c->d.v = pool_layout(s);
    c->d.page_size = s->page_size;
    c->d.pages_per_seq = c->pages_per_seq;
    c->d.num_pages = c->num_pages;

    const ref_strides ps = ref_resolve_layout(&c->d.k, hk, s->page_size, d);
    c->nq = (uint64_t)b_n * hq * sq * d;
    c->npool = ps.offset + (uint64_t)(c->num_pages - 1) * ps.batch_stride + (uint64_t)(hk - 1) * ps.head_stride +
               (uint64_t)(s->page_size - 1) * ps.seq_stride + d;
    const uint64_t nflat = (uint64_t)b_n * hk * sk * d, rows = (uint64_t)b_n * hq * sq;
    c->q = malloc(c->nq * c->esize);
    c->k_pool = calloc(c->npool, c->esize);
    c->v_pool = calloc(c->npool, c->esize);
    c->k_flat = malloc(nflat * c->esize);
    c->v_flat = malloc(nflat * c->esize);
    c->qf = malloc(c->nq * sizeof(float));
    c->kf = malloc(nflat * sizeof(float));
    c->vf = malloc(nflat * sizeof(float));
    c->table = malloc((size_t)b_n * c->pages_per_seq * sizeof(int32_t));
    c->ref_o = malloc(rows * d * sizeof(double));
    c->ref_lse = malloc(rows * sizeof(double));
    c->o = malloc(rows * d * c->esize);
    c->lse = malloc(rows * sizeof(float));
    if (s->ragged)
        c->lens = malloc(b_n * sizeof(int32_t));
    if (s->alibi)
        c->slopes = malloc(hq * sizeof(float));
    uint32_t *perm = malloc(c->num_pages * sizeof(uint32_t));
    if (!c->q || !c->k_pool || !c->v_pool || !c->k_flat || !c->v_flat || !c->qf || !c->kf || !c->vf || !c->table ||
        !c->ref_o || !c->ref_lse || !c->o || !c->lse || (s->ragged && !c->lens) || (s->alibi && !c->slopes) || !perm) {
        free(perm);
        pg_case_free(c);
        return -1;
    }

    ref_rng r;
    ref_rng_seed(&r, seed);
    for (uint64_t i = 0; i < c->nq; i++)
        c->qf[i] = ref_store(s->dtype, c->q, i, (float)(2.0 * ref_rng_uniform(&r)));
    /* every element of both pools, gaps included, holds a value: a read of a wrong page or slot
     * changes the result */
    for (uint64_t i = 0; i < c->npool; i++) {
        ref_store(s->dtype, c->k_pool, i, (float)ref_rng_uniform(&r));
        ref_store(s->dtype, c->v_pool, i, (float)ref_rng_uniform(&r));
    }
    /* the table: pages in a shuffled order */
    for (uint32_t i = 0; i < c->num_pages; i++)
        perm[i] = i;
    for (uint32_t i = c->num_pages - 1; i > 0; i--) {
        const uint32_t j = (uint32_t)(ref_rng_next(&r) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t b = 0; b < b_n; b++)
        for (uint32_t p = 0; p < c->pages_per_seq; p++)
            c->table[(size_t)b * c->pages_per_seq + p] = (int32_t)perm[(size_t)b * c->pages_per_seq + p];
    free(perm);
    if (s->shared_prefix)
        for (uint32_t b = 1; b < b_n; b++)
            c->table[(size_t)b * c->pages_per_seq] = c->table[0];
    if (c->lens)
        for (uint32_t b = 0; b < b_n; b++)
            c->lens[b] = key_length(s, b);
    if (s->hostile) {
        static const int32_t bad[3] = {-3, INT32_MAX, 0}; /* 0 stands for num_pages */
        unsigned n = 0;
        for (uint32_t b = 0; b < b_n; b++) {
            const int64_t len = c->lens ? (int64_t)c->lens[b] : (int64_t)sk;
            for (uint32_t p = 0; p < c->pages_per_seq; p++)
                if ((int64_t)p * s->page_size >= len) {
                    const int32_t v = bad[n++ % 3];
                    c->table[(size_t)b * c->pages_per_seq + p] = v ? v : (int32_t)c->num_pages;
                }
        }
        /* one page entry 0 sees, past the pool: it reads the pool's last page */
        const uint32_t visible_pages = (sk + s->page_size - 1) / s->page_size;
        c->table[visible_pages - 1] = (int32_t)c->num_pages + 5;
    }
    /* the gathered tensors, by clflash.h's rule */
    for (uint32_t b = 0; b < b_n; b++)
        for (uint32_t h = 0; h < hk; h++)
            for (uint32_t j = 0; j < sk; j++) {
                int64_t page = c->table[(size_t)b * c->pages_per_seq + j / s->page_size];
                page = page < 0 ? 0 : page >= c->num_pages ? c->num_pages - 1 : page;
                const uint64_t from = ps.offset + (uint64_t)page * ps.batch_stride + (uint64_t)h * ps.head_stride +
                                      (uint64_t)(j % s->page_size) * ps.seq_stride;
                const uint64_t to = (((uint64_t)b * hk + h) * sk + j) * d;
                for (uint32_t e = 0; e < d; e++) {
                    copy_elem(c->esize, c->k_flat, to + e, c->k_pool, from + e);
                    copy_elem(c->esize, c->v_flat, to + e, c->v_pool, from + e);
                    c->kf[to + e] = ref_load(s->dtype, c->k_flat, to + e);
                    c->vf[to + e] = ref_load(s->dtype, c->v_flat, to + e);
                }
            }
    if (c->slopes)
        for (uint32_t h = 0; h < hq; h++)
            c->slopes[h] = 0.25f / (float)(h + 1);
    const ref_extras x = {NULL, c->slopes, c->lens};
    ref_attention_ex(&c->contiguous, c->qf, c->kf, c->vf, &x, c->ref_o, c->ref_lse);
    return 0;
}

void pg_case_free(pg_case *c)
{
    free(c->q), free(c->k_pool), free(c->v_pool), free(c->k_flat), free(c->v_flat);
    free(c->qf), free(c->kf), free(c->vf), free(c->table), free(c->lens), free(c->slopes);
    free(c->ref_o), free(c->ref_lse), free(c->o), free(c->lse);
    memset(c, 0, sizeof *c);
}

static cl_mem upload(cl_context ctx, const void *host, size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, err);
}

clflash_status pg_run(clflash_context *ctx, pg_case *c, int contiguous, const char **kernel, uint32_t *splits)
{
    const pg_spec *s = &c->s;
    const uint64_t rows = (uint64_t)s->batch * s->heads_q * s->seq_q;
    const uint64_t nflat = (uint64_t)s->batch * s->heads_kv * s->seq_k * s->head_dim;
    const uint64_t nkv = contiguous ? nflat : c->npool;
    for (uint64_t i = 0; i < rows * s->head_dim; i++) {
        if (c->esize == 4)
            ((uint32_t *)c->o)[i] = PG_SENTINEL_F32;
        else
            ((uint16_t *)c->o)[i] = PG_SENTINEL_16;
    }
    for (uint64_t i = 0; i < rows; i++)
        c->lse[i] = -777.0f;
    cl_context cl = clflash_context_cl(ctx);
    cl_int err = CL_SUCCESS;
    cl_mem q = upload(cl, c->q, c->nq * c->esize, &err);
    cl_mem k = upload(cl, contiguous ? c->k_flat : c->k_pool, nkv * c->esize, &err);
    cl_mem v = upload(cl, contiguous ? c->v_flat : c->v_pool, nkv * c->esize, &err);
    cl_mem o = upload(cl, c->o, rows * s->head_dim * c->esize, &err);
    cl_mem lse = upload(cl, c->lse, rows * sizeof(float), &err);
    cl_mem table = contiguous ? NULL : upload(cl, c->table, (size_t)s->batch * c->pages_per_seq * sizeof(int32_t), &err);
    cl_mem lens = c->lens ? upload(cl, c->lens, s->batch * sizeof(int32_t), &err) : NULL;
    cl_mem slopes = c->slopes ? upload(cl, c->slopes, s->heads_q * sizeof(float), &err) : NULL;
    clflash_status st = err;
    if (err == CL_SUCCESS) {
        clflash_attention_desc d = contiguous ? c->contiguous : c->d;
        d.block_table = table;
        d.key_lengths = lens;
        d.alibi_slopes = slopes;
        clflash_plan plan = {.struct_size = sizeof plan};
        st = clflash_plan_attention(ctx, &d, &plan);
        if (st == CLFLASH_SUCCESS) {
            if (kernel)
                *kernel = plan.kernel;
            if (splits)
                *splits = plan.splits;
            st = clflash_forward(ctx, &d, NULL, q, k, v, o, lse, 0, NULL, NULL);
        }
        cl_command_queue qu = clflash_context_queue(ctx);
        err = clEnqueueReadBuffer(qu, o, CL_TRUE, 0, rows * s->head_dim * c->esize, c->o, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(qu, lse, CL_TRUE, 0, rows * sizeof(float), c->lse, 0, NULL, NULL);
        if (st == CLFLASH_SUCCESS)
            st = err;
    }
    const cl_mem all[8] = {q, k, v, o, lse, table, lens, slopes};
    for (int i = 0; i < 8; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    return st;
}

int pg_check(const pg_case *c, ref_tol to, char *msg, size_t msg_len)
{
    const pg_spec *s = &c->s;
    const ref_tol tl = ref_tol_lse(s->dtype, REF_PATH_FLASH);
    const uint64_t rows = (uint64_t)s->batch * s->heads_q * s->seq_q;
    int bad = 0;
    if (msg_len)
        msg[0] = '\0';
    for (uint64_t row = 0; row < rows; row++) {
        for (uint32_t e = 0; e < s->head_dim; e++) {
            const uint64_t i = row * s->head_dim + e;
            const double got = ref_load(s->dtype, c->o, i);
            if (!ref_close(got, c->ref_o[i], to) && bad++ == 0)
                snprintf(msg, msg_len, "O[row %llu][%u] = %.7g, reference %.7g", (unsigned long long)row, e, got,
                         c->ref_o[i]);
        }
        if (!ref_close(c->lse[row], c->ref_lse[row], tl) && bad++ == 0)
            snprintf(msg, msg_len, "lse[row %llu] = %.8g, reference %.8g", (unsigned long long)row, c->lse[row],
                     c->ref_lse[row]);
    }
    return bad;
}

const char *pg_spec_str(const pg_spec *s, char *buf, size_t n)
{
    static const char *const layouts[3] = {"head-major", "slot-major", "odd"};
    snprintf(buf, n, "%s b%u h%u/%u q%u k%u d%u page %u %s%s%s%s%s%s%s%s splits %u",
             s->dtype == CLFLASH_F32 ? "f32" : s->dtype == CLFLASH_F16 ? "f16" : "bf16", s->batch, s->heads_q,
             s->heads_kv, s->seq_q, s->seq_k, s->head_dim, s->page_size, layouts[s->layout],
             (s->flags & CLFLASH_CAUSAL) ? " causal" : "", (s->flags & CLFLASH_WINDOW) ? " window" : "",
             (s->flags & CLFLASH_ALIGN_TO_KEY_LENGTH) ? " aligned" : "", s->ragged ? " ragged" : "",
             s->shared_prefix ? " shared" : "", s->hostile ? " hostile" : "", s->alibi ? " alibi" : "",
             s->num_splits);
    return buf;
}
