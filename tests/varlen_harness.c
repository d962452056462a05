/*
 * varlen_harness.c - see varlen_harness.h. The reference knows nothing of packing: each sequence's
 * rows are gathered into an ordinary batch-1 problem (tests/reference.c and the backward harness's
 * fp64 gradients), and the results are scattered back to the packed rows the sequence covers.
 */
#define _POSIX_C_SOURCE 200809L /* snprintf in strict C */
#include "varlen_harness.h"

#include "backward_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VL_SENTINEL_F32 0xc6f5ab9au
#define VL_SENTINEL_16 0xf7a9u
#define VL_SENTINEL_LSE (-777.0f)

enum { UNWRITTEN = 0, CHECKED = 1, ANY = 2 };

static int is_sentinel(size_t esize, const void *buf, uint64_t i)
{
    if (esize == 4) {
        uint32_t u;
        memcpy(&u, (const char *)buf + i * 4, 4);
        return u == VL_SENTINEL_F32;
    }
    return ((const uint16_t *)buf)[i] == VL_SENTINEL_16;
}

static void fill_sentinel(size_t esize, void *buf, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (esize == 4)
            ((uint32_t *)buf)[i] = VL_SENTINEL_F32;
        else
            ((uint16_t *)buf)[i] = VL_SENTINEL_16;
    }
}

/* A packed tensor's layout: token-major by default (zero strides), or head-major with an offset,
 * padded rows and spare rows between heads. */
static clflash_layout packed_layout(const vl_spec *s, uint32_t total, int kv)
{
    clflash_layout l = {0, 0, 0, 0};
    if (s->odd_layout) {
        const uint64_t pad = kv ? 3 : 1;
        l.offset = kv ? 3 : 5;
        l.seq_stride = s->head_dim + pad;
        l.head_stride = (uint64_t)(total + 2) * l.seq_stride;
    }
    return l;
}

/* The element (t, h, c) of a packed tensor, the library's defaults for zero strides. */
typedef struct {
    uint64_t off, hs, ss;
} vl_strides;

static vl_strides strides_of(const clflash_layout *l, uint32_t heads, uint32_t head_dim)
{
    const vl_strides r = {l->offset, l->head_stride ? l->head_stride : head_dim,
                          l->seq_stride ? l->seq_stride : (uint64_t)heads * head_dim};
    return r;
}

static uint64_t at(const vl_strides *s, uint32_t t, uint32_t h, uint32_t c)
{
    return s->off + (uint64_t)t * s->ss + (uint64_t)h * s->hs + c;
}

uint32_t vl_cumulate(const int32_t *lens, uint32_t n, uint32_t lead, int32_t *cu)
{
    cu[0] = (int32_t)lead;
    for (uint32_t b = 0; b < n; b++)
        cu[b + 1] = cu[b] + lens[b];
    return (uint32_t)cu[n];
}

/* clflash.h's rule: values clamped into [0, total], length max(0, hi - lo); *raw gets it uncut. */
static void span(const int32_t *cu, uint32_t b, uint32_t total, uint32_t *first, uint32_t *raw)
{
    const int64_t top = total, lo = cu[b] < 0 ? 0 : cu[b] > top ? top : cu[b];
    const int64_t hi = cu[b + 1] < 0 ? 0 : cu[b + 1] > top ? top : cu[b + 1];
    *first = (uint32_t)lo;
    *raw = hi > lo ? (uint32_t)(hi - lo) : 0;
}

void vl_case_free(vl_case *c)
{
    free(c->cu_q), free(c->cu_k), free(c->q_first), free(c->q_len), free(c->k_first), free(c->k_len);
    free(c->q), free(c->k), free(c->v), free(c->d_o), free(c->slopes), free(c->o), free(c->lse);
    free(c->o_in), free(c->lse_in), free(c->dq), free(c->dk), free(c->dv);
    free(c->ref_o), free(c->ref_lse), free(c->ref_dq), free(c->ref_dk), free(c->ref_dv);
    free(c->q_state), free(c->k_state), free(c->lse_state);
    memset(c, 0, sizeof *c);
}

/* The state of row t of a tensor covered by `count` sequences. */
static unsigned char state_of(unsigned count)
{
    return count == 0 ? UNWRITTEN : count == 1 ? CHECKED : ANY;
}

int vl_case_init(vl_case *c, const vl_spec *s, int backward, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    if (s->batch == 0 || s->heads_kv == 0 || s->heads_q % s->heads_kv != 0 || s->total_q == 0 || s->total_k == 0 ||
        (s->dtype != CLFLASH_F32 && s->dtype != CLFLASH_F16 && s->dtype != CLFLASH_BF16))
        return -1;
    c->s = *s;
    c->esize = clflash_dtype_size(s->dtype);
    const uint32_t B = s->batch, hq = s->heads_q, hk = s->heads_kv, D = s->head_dim;
    const uint32_t tq = s->total_q, tk = s->total_k;
    c->cu_q = malloc((B + 1) * sizeof(int32_t));
    c->cu_k = malloc((B + 1) * sizeof(int32_t));
    c->q_first = malloc(B * sizeof(uint32_t));
    c->q_len = malloc(B * sizeof(uint32_t));
    c->k_first = malloc(B * sizeof(uint32_t));
    c->k_len = malloc(B * sizeof(uint32_t));
    if (!c->cu_q || !c->cu_k || !c->q_first || !c->q_len || !c->k_first || !c->k_len) {
        vl_case_free(c);
        return -1;
    }
    memcpy(c->cu_q, s->cu_q, (B + 1) * sizeof(int32_t));
    memcpy(c->cu_k, s->cu_k, (B + 1) * sizeof(int32_t));
    c->s.cu_q = c->cu_q;
    c->s.cu_k = c->cu_k;

    /* each sequence's rows, cut to the longest the descriptor gives (or the longest there is) */
    uint32_t longest_q = 1, longest_k = 1;
    for (uint32_t b = 0; b < B; b++) {
        span(c->cu_q, b, tq, &c->q_first[b], &c->q_len[b]);
        span(c->cu_k, b, tk, &c->k_first[b], &c->k_len[b]);
        longest_q = c->q_len[b] > longest_q ? c->q_len[b] : longest_q;
        longest_k = c->k_len[b] > longest_k ? c->k_len[b] : longest_k;
    }
    if (s->seq_q)
        longest_q = s->seq_q;
    if (s->seq_k)
        longest_k = s->seq_k;
    for (uint32_t b = 0; b < B; b++) {
        c->q_len[b] = c->q_len[b] < longest_q ? c->q_len[b] : longest_q;
        c->k_len[b] = c->k_len[b] < longest_k ? c->k_len[b] : longest_k;
    }

    clflash_attention_desc d = {.struct_size = sizeof d};
    d.batch = B;
    d.heads_q = hq;
    d.heads_kv = hk;
    d.seq_q = longest_q;
    d.seq_k = longest_k;
    d.head_dim = D;
    d.dtype = s->dtype;
    d.flags = s->flags;
    d.window_left = s->window_left;
    d.window_right = s->window_right;
    d.softcap = s->softcap;
    d.num_splits = s->num_splits;
    d.q = d.o = packed_layout(s, tq, 0);
    d.k = d.v = packed_layout(s, tk, 1);
    d.total_q = tq;
    d.total_k = tk;
    c->d = d;

    const vl_strides qs = strides_of(&d.q, hq, D), ks = strides_of(&d.k, hk, D);
    c->nq = at(&qs, tq - 1, hq - 1, 0) + D;
    c->nk = at(&ks, tk - 1, hk - 1, 0) + D;
    c->nlse = (uint64_t)hq * tq;
    const size_t es = c->esize;
    c->q = malloc(c->nq * es);
    c->d_o = malloc(c->nq * es);
    c->o = malloc(c->nq * es);
    c->o_in = malloc(c->nq * es);
    c->dq = malloc(c->nq * es);
    c->k = malloc(c->nk * es);
    c->v = malloc(c->nk * es);
    c->dk = malloc(c->nk * es);
    c->dv = malloc(c->nk * es);
    c->lse = malloc(c->nlse * sizeof(float));
    c->lse_in = malloc(c->nlse * sizeof(float));
    c->ref_o = calloc(c->nq, sizeof(double));
    c->ref_dq = calloc(c->nq, sizeof(double));
    c->ref_dk = calloc(c->nk, sizeof(double));
    c->ref_dv = calloc(c->nk, sizeof(double));
    c->ref_lse = calloc(c->nlse, sizeof(double));
    c->q_state = calloc(c->nq, 1);
    c->k_state = calloc(c->nk, 1);
    c->lse_state = calloc(c->nlse, 1);
    if (s->alibi)
        c->slopes = malloc(hq * sizeof(float));
    unsigned *count_q = calloc(tq, sizeof(unsigned)), *count_k = calloc(tk, sizeof(unsigned));
    if (!c->q || !c->d_o || !c->o || !c->o_in || !c->dq || !c->k || !c->v || !c->dk || !c->dv || !c->lse ||
        !c->lse_in || !c->ref_o || !c->ref_dq || !c->ref_dk || !c->ref_dv || !c->ref_lse || !c->q_state ||
        !c->k_state || !c->lse_state || (s->alibi && !c->slopes) || !count_q || !count_k) {
        free(count_q);
        free(count_k);
        vl_case_free(c);
        return -1;
    }
    if (c->slopes)
        for (uint32_t h = 0; h < hq; h++)
            c->slopes[h] = 0.3f / (float)(h + 1);

    /* which sequences write each row: O, lse and dQ rows those with queries, dK and dV rows those
     * with keys (their keys get dK = dV = 0 even without queries) */
    for (uint32_t b = 0; b < B; b++) {
        if (c->q_len[b])
            for (uint32_t i = 0; i < c->q_len[b]; i++)
                count_q[c->q_first[b] + i]++;
        for (uint32_t j = 0; j < c->k_len[b]; j++)
            count_k[c->k_first[b] + j]++;
    }

    /* inputs: NaN everywhere (gaps and rows no sequence covers), values on the covered rows */
    ref_rng r;
    ref_rng_seed(&r, seed);
    for (uint64_t i = 0; i < c->nq; i++) {
        ref_store(s->dtype, c->q, i, NAN);
        ref_store(s->dtype, c->d_o, i, NAN);
        ref_store(s->dtype, c->o_in, i, NAN);
    }
    for (uint64_t i = 0; i < c->nk; i++) {
        ref_store(s->dtype, c->k, i, NAN);
        ref_store(s->dtype, c->v, i, NAN);
    }
    for (uint64_t i = 0; i < c->nlse; i++)
        c->lse_in[i] = NAN;
    for (uint32_t t = 0; t < tq; t++)
        for (uint32_t h = 0; h < hq; h++)
            for (uint32_t e = 0; e < D; e++) {
                const uint64_t i = at(&qs, t, h, e);
                if (count_q[t]) {
                    ref_store(s->dtype, c->q, i, (float)(2.0 * ref_rng_uniform(&r)));
                    ref_store(s->dtype, c->d_o, i, (float)ref_rng_uniform(&r));
                }
                c->q_state[i] = state_of(count_q[t]);
                if (e == 0)
                    c->lse_state[(uint64_t)h * tq + t] = state_of(count_q[t]);
            }
    for (uint32_t t = 0; t < tk; t++)
        for (uint32_t h = 0; h < hk; h++)
            for (uint32_t e = 0; e < D; e++) {
                const uint64_t i = at(&ks, t, h, e);
                if (count_k[t]) {
                    ref_store(s->dtype, c->k, i, (float)ref_rng_uniform(&r));
                    ref_store(s->dtype, c->v, i, (float)ref_rng_uniform(&r));
                }
                c->k_state[i] = state_of(count_k[t]);
            }
    free(count_q);
    free(count_k);

    /* the reference, one batch-1 problem per sequence */
    int failed = 0;
    for (uint32_t b = 0; b < B && !failed; b++) {
        const uint32_t nq = c->q_len[b], nk = c->k_len[b], fq = c->q_first[b], fk = c->k_first[b];
        if (nq == 0)
            continue; /* its keys' dK, dV stay 0 (calloc) */
        clflash_attention_desc one = {.struct_size = sizeof one};
        one.batch = 1;
        one.heads_q = hq;
        one.heads_kv = hk;
        one.seq_q = nq;
        one.seq_k = nk ? nk : 1;
        one.head_dim = D;
        one.dtype = s->dtype;
        one.flags = s->flags;
        one.window_left = s->window_left;
        one.window_right = s->window_right;
        one.softcap = s->softcap;
        const size_t rq = (size_t)hq * nq * D, rk = (size_t)hk * one.seq_k * D;
        float *qd = malloc(rq * sizeof(float)), *dod = malloc(rq * sizeof(float));
        float *kd = malloc(rk * sizeof(float)), *vd = malloc(rk * sizeof(float));
        double *o1 = malloc(rq * sizeof(double)), *l1 = malloc((size_t)hq * nq * sizeof(double));
        double *dq1 = malloc(rq * sizeof(double)), *dk1 = malloc(rk * sizeof(double)), *dv1 = malloc(rk * sizeof(double));
        if (!qd || !dod || !kd || !vd || !o1 || !l1 || !dq1 || !dk1 || !dv1) {
            failed = 1;
        } else {
            for (uint32_t h = 0; h < hq; h++)
                for (uint32_t i = 0; i < nq; i++)
                    for (uint32_t e = 0; e < D; e++) {
                        const size_t to = ((size_t)h * nq + i) * D + e;
                        qd[to] = ref_load(s->dtype, c->q, at(&qs, fq + i, h, e));
                        dod[to] = ref_load(s->dtype, c->d_o, at(&qs, fq + i, h, e));
                    }
            for (uint32_t h = 0; h < hk; h++)
                for (uint32_t j = 0; j < nk; j++)
                    for (uint32_t e = 0; e < D; e++) {
                        const size_t to = ((size_t)h * nk + j) * D + e;
                        kd[to] = ref_load(s->dtype, c->k, at(&ks, fk + j, h, e));
                        vd[to] = ref_load(s->dtype, c->v, at(&ks, fk + j, h, e));
                    }
            if (nk) {
                const ref_extras x = {NULL, c->slopes, NULL};
                ref_attention_ex(&one, qd, kd, vd, &x, o1, l1);
                if (backward)
                    ref_attention_backward_ex(&one, qd, kd, vd, dod, &x, dq1, dk1, dv1, NULL, NULL, NULL);
            } else { /* no keys: O = 0, lse = -inf, no gradient */
                memset(o1, 0, rq * sizeof(double));
                memset(dq1, 0, rq * sizeof(double));
                for (size_t i = 0; i < (size_t)hq * nq; i++)
                    l1[i] = -INFINITY;
            }
            for (uint32_t h = 0; h < hq; h++)
                for (uint32_t i = 0; i < nq; i++) {
                    const uint64_t li = (uint64_t)h * tq + fq + i;
                    c->ref_lse[li] = l1[(size_t)h * nq + i];
                    c->lse_in[li] = (float)l1[(size_t)h * nq + i];
                    for (uint32_t e = 0; e < D; e++) {
                        const uint64_t to = at(&qs, fq + i, h, e);
                        const size_t from = ((size_t)h * nq + i) * D + e;
                        c->ref_o[to] = o1[from];
                        c->ref_dq[to] = dq1[from];
                        ref_store(s->dtype, c->o_in, to, (float)o1[from]);
                    }
                }
            if (backward)
                for (uint32_t h = 0; h < hk && nk; h++)
                    for (uint32_t j = 0; j < nk; j++)
                        for (uint32_t e = 0; e < D; e++) {
                            const uint64_t to = at(&ks, fk + j, h, e);
                            const size_t from = ((size_t)h * nk + j) * D + e;
                            c->ref_dk[to] = dk1[from];
                            c->ref_dv[to] = dv1[from];
                        }
        }
        free(qd), free(dod), free(kd), free(vd), free(o1), free(l1), free(dq1), free(dk1), free(dv1);
    }
    if (failed) {
        vl_case_free(c);
        return -1;
    }
    return 0;
}

static cl_mem upload(cl_context ctx, const void *host, size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, err);
}

static void release_all(cl_mem *m, int n)
{
    for (int i = 0; i < n; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
}

void vl_reset_forward_outputs(vl_case *c)
{
    fill_sentinel(c->esize, c->o, c->nq);
    for (uint64_t i = 0; i < c->nlse; i++)
        c->lse[i] = VL_SENTINEL_LSE;
}

clflash_status vl_run_forward(clflash_context *ctx, vl_case *c, const char **kernel, uint32_t *splits)
{
    const size_t es = c->esize;
    vl_reset_forward_outputs(c);
    cl_context cl = clflash_context_cl(ctx);
    cl_int err = CL_SUCCESS;
    cl_mem m[8] = {NULL};
    m[0] = upload(cl, c->q, c->nq * es, &err);
    m[1] = upload(cl, c->k, c->nk * es, &err);
    m[2] = upload(cl, c->v, c->nk * es, &err);
    m[3] = upload(cl, c->o, c->nq * es, &err);
    m[4] = upload(cl, c->lse, c->nlse * sizeof(float), &err);
    m[5] = upload(cl, c->cu_q, (c->s.batch + 1) * sizeof(int32_t), &err);
    m[6] = upload(cl, c->cu_k, (c->s.batch + 1) * sizeof(int32_t), &err);
    if (c->slopes)
        m[7] = upload(cl, c->slopes, c->s.heads_q * sizeof(float), &err);
    clflash_status st = err;
    if (err == CL_SUCCESS) {
        clflash_attention_desc d = c->d;
        d.cu_seqlens_q = m[5];
        d.cu_seqlens_k = m[6];
        d.alibi_slopes = m[7];
        clflash_plan plan = {.struct_size = sizeof plan};
        st = clflash_plan_attention(ctx, &d, &plan);
        if (st == CLFLASH_SUCCESS) {
            if (kernel)
                *kernel = plan.kernel;
            if (splits)
                *splits = plan.splits;
            st = clflash_forward(ctx, &d, NULL, m[0], m[1], m[2], m[3], m[4], 0, NULL, NULL);
        }
        cl_command_queue qu = clflash_context_queue(ctx);
        err = clEnqueueReadBuffer(qu, m[3], CL_TRUE, 0, c->nq * es, c->o, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(qu, m[4], CL_TRUE, 0, c->nlse * sizeof(float), c->lse, 0, NULL, NULL);
        if (st == CLFLASH_SUCCESS)
            st = err;
    }
    release_all(m, 8);
    return st;
}

clflash_status vl_run_backward(clflash_context *ctx, vl_case *c, const char **kernel)
{
    const size_t es = c->esize;
    fill_sentinel(es, c->dq, c->nq);
    fill_sentinel(es, c->dk, c->nk);
    fill_sentinel(es, c->dv, c->nk);
    cl_context cl = clflash_context_cl(ctx);
    cl_int err = CL_SUCCESS;
    cl_mem m[12] = {NULL};
    m[0] = upload(cl, c->q, c->nq * es, &err);
    m[1] = upload(cl, c->k, c->nk * es, &err);
    m[2] = upload(cl, c->v, c->nk * es, &err);
    m[3] = upload(cl, c->o_in, c->nq * es, &err);
    m[4] = upload(cl, c->d_o, c->nq * es, &err);
    m[5] = upload(cl, c->lse_in, c->nlse * sizeof(float), &err);
    m[6] = upload(cl, c->dq, c->nq * es, &err);
    m[7] = upload(cl, c->dk, c->nk * es, &err);
    m[8] = upload(cl, c->dv, c->nk * es, &err);
    m[9] = upload(cl, c->cu_q, (c->s.batch + 1) * sizeof(int32_t), &err);
    m[10] = upload(cl, c->cu_k, (c->s.batch + 1) * sizeof(int32_t), &err);
    if (c->slopes)
        m[11] = upload(cl, c->slopes, c->s.heads_q * sizeof(float), &err);
    clflash_status st = err;
    if (err == CL_SUCCESS) {
        clflash_attention_desc d = c->d;
        d.cu_seqlens_q = m[9];
        d.cu_seqlens_k = m[10];
        d.alibi_slopes = m[11];
        clflash_plan plan = {.struct_size = sizeof plan};
        st = clflash_plan_backward(ctx, &d, &plan);
        if (st == CLFLASH_SUCCESS) {
            if (kernel)
                *kernel = plan.kernel;
            st = clflash_backward(ctx, &d, NULL, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], 0, NULL,
                                  NULL);
        }
        cl_command_queue qu = clflash_context_queue(ctx);
        err = clEnqueueReadBuffer(qu, m[6], CL_TRUE, 0, c->nq * es, c->dq, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(qu, m[7], CL_TRUE, 0, c->nk * es, c->dk, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(qu, m[8], CL_TRUE, 0, c->nk * es, c->dv, 0, NULL, NULL);
        if (st == CLFLASH_SUCCESS)
            st = err;
    }
    release_all(m, 12);
    return st;
}

/* Checks n elements of `got` (storage type) against ref by state; counts failures, the first
 * described in msg. */
static int check_tensor(const vl_case *c, const char *what, const void *got, const double *ref,
                        const unsigned char *state, uint64_t n, ref_tol tol, char *msg, size_t msg_len, int bad)
{
    for (uint64_t i = 0; i < n; i++) {
        if (state[i] == UNWRITTEN && !is_sentinel(c->esize, got, i)) {
            if (bad++ == 0)
                snprintf(msg, msg_len, "%s[%llu] = %.7g was written; no sequence covers its row", what,
                         (unsigned long long)i, ref_load(c->s.dtype, got, i));
        } else if (state[i] == CHECKED && !ref_close(ref_load(c->s.dtype, got, i), ref[i], tol)) {
            if (bad++ == 0)
                snprintf(msg, msg_len, "%s[%llu] = %.7g, reference %.7g", what, (unsigned long long)i,
                         ref_load(c->s.dtype, got, i), ref[i]);
        }
    }
    return bad;
}

int vl_check_forward(const vl_case *c, char *msg, size_t msg_len)
{
    const ref_tol to = c->s.dtype == CLFLASH_BF16 ? (ref_tol){4e-3, 1.2e-2} : ref_tol_o(c->s.dtype, REF_PATH_FLASH);
    const ref_tol tl = ref_tol_lse(c->s.dtype, REF_PATH_FLASH);
    if (msg_len)
        msg[0] = '\0';
    int bad = check_tensor(c, "O", c->o, c->ref_o, c->q_state, c->nq, to, msg, msg_len, 0);
    for (uint64_t i = 0; i < c->nlse; i++) {
        const uint32_t h = (uint32_t)(i / c->s.total_q), t = (uint32_t)(i % c->s.total_q);
        if (c->lse_state[i] == UNWRITTEN && c->lse[i] != VL_SENTINEL_LSE) {
            if (bad++ == 0)
                snprintf(msg, msg_len, "lse[h %u][t %u] = %.8g was written; no sequence covers its row", h, t,
                         c->lse[i]);
        } else if (c->lse_state[i] == CHECKED && !ref_close(c->lse[i], c->ref_lse[i], tl)) {
            if (bad++ == 0)
                snprintf(msg, msg_len, "lse[h %u][t %u] = %.8g, reference %.8g", h, t, c->lse[i], c->ref_lse[i]);
        }
    }
    return bad;
}

/* The backward harness's tolerance, its absolute part scaled by the tensor's largest checked value. */
static ref_tol grad_tol(const vl_case *c, const double *ref, const unsigned char *state, uint64_t n)
{
    double mx = 0.0;
    for (uint64_t i = 0; i < n; i++)
        if (state[i] == CHECKED && fabs(ref[i]) > mx)
            mx = fabs(ref[i]);
    ref_tol t = tb_tol(c->s.dtype);
    t.atol *= mx > 1.0 ? mx : 1.0;
    return t;
}

int vl_check_backward(const vl_case *c, char *msg, size_t msg_len)
{
    if (msg_len)
        msg[0] = '\0';
    int bad = check_tensor(c, "dQ", c->dq, c->ref_dq, c->q_state, c->nq, grad_tol(c, c->ref_dq, c->q_state, c->nq),
                           msg, msg_len, 0);
    bad = check_tensor(c, "dK", c->dk, c->ref_dk, c->k_state, c->nk, grad_tol(c, c->ref_dk, c->k_state, c->nk), msg,
                       msg_len, bad);
    bad = check_tensor(c, "dV", c->dv, c->ref_dv, c->k_state, c->nk, grad_tol(c, c->ref_dv, c->k_state, c->nk), msg,
                       msg_len, bad);
    return bad;
}

const char *vl_spec_str(const vl_spec *s, char *buf, size_t n)
{
    char win[40] = "";
    if (s->flags & CLFLASH_WINDOW)
        snprintf(win, sizeof win, " window %u/%u", s->window_left, s->window_right);
    snprintf(buf, n, "%s b%u h%u/%u d%u total %u/%u%s%s%s%s splits %u%s",
             s->dtype == CLFLASH_F32 ? "f32" : s->dtype == CLFLASH_F16 ? "f16" : "bf16", s->batch, s->heads_q,
             s->heads_kv, s->head_dim, s->total_q, s->total_k, (s->flags & CLFLASH_CAUSAL) ? " causal" : "", win,
             s->alibi ? " alibi" : "", s->softcap != 0.0f ? " softcap" : "", s->num_splits,
             s->odd_layout ? " odd layout" : "");
    return buf;
}
