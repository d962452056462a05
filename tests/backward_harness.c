/*
 * backward_harness.c - builds, runs and checks one backward test case (see backward_harness.h),
 * and the fp64 reference gradients.
 *
 * The reference is the textbook one, in double: per query row it recomputes the softmax over the
 * keys the row sees, forms dP, D = sum P*dP and dS, and scatters the three products. It shares no
 * code with the kernels (which take D from O and recompute P from lse in tiles), and the Check suite
 * validates it against finite differences of ref_attention.
 */
#include "backward_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bits the outputs are pre-filled with; any change means the library wrote there. */
#define SENTINEL_F32 0xc6f5ab9au  /* -31445.8 */
#define SENTINEL_F16 0xf7a9u      /* -31376 */
#define SENTINEL_BF16 0xc6f5u     /* -31360 */

/* ---- the reference ------------------------------------------------------------------------------ */

void ref_attention_backward(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                            const float *d_o, double *dq, double *dk, double *dv, unsigned char *key_seen)
{
    ref_attention_backward_ex(d, q, k, v, d_o, NULL, dq, dk, dv, NULL, NULL, key_seen);
}

void ref_attention_backward_ex(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                               const float *d_o, const ref_extras *x, double *dq, double *dk, double *dv,
                               double *dbias, unsigned char *bias_seen, unsigned char *key_seen)
{
    const uint32_t hkv = ref_heads_kv(d), group = d->heads_q / hkv, D = d->head_dim;
    const ref_strides qs = ref_resolve_layout(&d->q, d->heads_q, d->seq_q, D);
    const ref_strides ks = ref_resolve_layout(&d->k, hkv, d->seq_k, D);
    const ref_strides vs = ref_resolve_layout(&d->v, hkv, d->seq_k, D);
    const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, D);
    const ref_strides bs = ref_resolve_bias_layout(d);
    const double scale = ref_scale(d);
    double *s = malloc(sizeof(double) * d->seq_k), *dp = malloc(sizeof(double) * d->seq_k);
    double *g = malloc(sizeof(double) * d->seq_k);
    if (!s || !dp || !g) {
        fprintf(stderr, "reference backward: out of memory\n");
        abort();
    }
    memset(dq, 0, sizeof(double) * d->batch * d->heads_q * d->seq_q * D);
    memset(dk, 0, sizeof(double) * d->batch * hkv * d->seq_k * D);
    memset(dv, 0, sizeof(double) * d->batch * hkv * d->seq_k * D);
    if (key_seen)
        memset(key_seen, 0, (size_t)d->batch * hkv * d->seq_k);
    if (dbias)
        memset(dbias, 0, sizeof(double) * tb_bias_extent(d));
    if (bias_seen)
        memset(bias_seen, 0, tb_bias_extent(d));

    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++) {
            const uint32_t hk = h / group;
            for (uint32_t i = 0; i < d->seq_q; i++) {
                int64_t lo, hi;
                ref_visible_keys(d, x, b, i, &lo, &hi);
                double m = -INFINITY, sum = 0.0, dsum = 0.0;
                for (int64_t j = lo; j < hi; j++) {
                    double dot = 0.0, dpo = 0.0;
                    for (uint32_t c = 0; c < D; c++) {
                        dot += (double)q[ref_index(&qs, b, h, i, c)] * (double)k[ref_index(&ks, b, hk, (uint32_t)j, c)];
                        dpo += (double)d_o[ref_index(&os, b, h, i, c)] * (double)v[ref_index(&vs, b, hk, (uint32_t)j, c)];
                    }
                    s[j] = ref_transform_score(d, x, &bs, b, h, i, (uint32_t)j, dot * scale, &g[j]);
                    dp[j] = dpo;
                    if (s[j] > m)
                        m = s[j];
                }
                if (m == -INFINITY)
                    continue; /* the row sees no key (or only -inf scores): lse = -inf, no gradient */
                for (int64_t j = lo; j < hi; j++)
                    sum += exp(s[j] - m);
                const double lse = m + log(sum);
                for (int64_t j = lo; j < hi; j++)
                    dsum += exp(s[j] - lse) * dp[j];
                double *dqrow = dq + (((size_t)b * d->heads_q + h) * d->seq_q + i) * D;
                for (int64_t j = lo; j < hi; j++) {
                    if (s[j] == -INFINITY)
                        continue; /* P = 0 exactly (a -inf bias): no term, and the key is not seen here */
                    /* dS is the gradient with respect to the scaled score scale * q.k (before the
                     * softcap), so the chain rule through scale * q.k adds the scale once. */
                    const double p = exp(s[j] - lse), ds = p * (dp[j] - dsum) * g[j];
                    const size_t krow = (((size_t)b * hkv + hk) * d->seq_k + (size_t)j);
                    if (dbias) /* the bias is added after the softcap: its gradient has no f' */
                        dbias[ref_index(&bs, b, h, i, (uint32_t)j)] += p * (dp[j] - dsum);
                    if (bias_seen)
                        bias_seen[ref_index(&bs, b, h, i, (uint32_t)j)] = 1;
                    if (key_seen)
                        key_seen[krow] = 1;
                    for (uint32_t c = 0; c < D; c++) {
                        dqrow[c] += scale * ds * (double)k[ref_index(&ks, b, hk, (uint32_t)j, c)];
                        dk[krow * D + c] += scale * ds * (double)q[ref_index(&qs, b, h, i, c)];
                        dv[krow * D + c] += p * (double)d_o[ref_index(&os, b, h, i, c)];
                    }
                }
            }
        }
    free(s);
    free(dp);
    free(g);
}

/* ---- storage types -------------------------------------------------------------------------------- */

float tb_load(const tb_case *t, const void *base, uint64_t idx)
{
    switch (t->d.dtype) {
    case CLFLASH_F32: return ((const float *)base)[idx];
    case CLFLASH_F16: return ref_f16_to_f32(((const uint16_t *)base)[idx]);
    default: return ref_bf16_to_f32(((const uint16_t *)base)[idx]);
    }
}

static void store(const tb_case *t, void *base, uint64_t idx, float x)
{
    switch (t->d.dtype) {
    case CLFLASH_F32: ((float *)base)[idx] = x; break;
    case CLFLASH_F16: ((uint16_t *)base)[idx] = ref_f32_to_f16(x); break;
    default: ((uint16_t *)base)[idx] = ref_f32_to_bf16(x); break;
    }
}

static int is_sentinel(const tb_case *t, const void *base, uint64_t idx)
{
    if (t->esize == 4)
        return ((const uint32_t *)base)[idx] == SENTINEL_F32;
    return ((const uint16_t *)base)[idx] == (t->d.dtype == CLFLASH_F16 ? SENTINEL_F16 : SENTINEL_BF16);
}

static void fill_sentinel(const tb_case *t, void *base, uint64_t n)
{
    const uint32_t s32 = SENTINEL_F32;
    const uint16_t s16 = t->d.dtype == CLFLASH_F16 ? SENTINEL_F16 : SENTINEL_BF16;
    for (uint64_t i = 0; i < n; i++) {
        if (t->esize == 4)
            memcpy((char *)base + i * 4, &s32, 4);
        else
            memcpy((char *)base + i * 2, &s16, 2);
    }
}

/* ---- one case ------------------------------------------------------------------------------------- */

static void *xcalloc(uint64_t n, size_t size)
{
    return calloc(n ? (size_t)n : 1, size);
}

/* NaN everywhere (a read of a gap poisons the result), then a random value at every element of the
 * layout; f and raw hold the same storage-rounded values. */
static void fill_input(const tb_case *t, ref_rng *r, const clflash_layout *l, uint32_t heads, uint32_t seq,
                       uint64_t n, double amplitude, float *f, void *raw)
{
    const ref_strides s = ref_resolve_layout(l, heads, seq, t->d.head_dim);
    for (uint64_t i = 0; i < n; i++) {
        f[i] = NAN;
        store(t, raw, i, NAN);
    }
    for (uint32_t b = 0; b < t->d.batch; b++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < seq; i++)
                for (uint32_t c = 0; c < t->d.head_dim; c++) {
                    const uint64_t idx = ref_index(&s, b, h, i, c);
                    store(t, raw, idx, (float)(amplitude * ref_rng_uniform(r)));
                    f[idx] = tb_load(t, raw, idx);
                }
}

int tb_case_init(tb_case *t, const clflash_attention_desc *d, uint64_t seed)
{
    return tb_case_init_ex(t, d, NULL, seed);
}

uint64_t tb_bias_extent(const clflash_attention_desc *d)
{
    const ref_strides s = ref_resolve_bias_layout(d);
    return s.offset + (uint64_t)(d->batch - 1) * s.batch_stride + (uint64_t)(d->heads_q - 1) * s.head_stride +
           (uint64_t)(d->seq_q - 1) * s.seq_stride + d->seq_k;
}

ref_extras tb_extras(const tb_case *t)
{
    const ref_extras x = {t->bias, t->slopes, t->lens};
    return x;
}

/* Copies n elements of size `size` (NULL stays NULL); returns 0 or -1 when memory ran out. */
static int copy_extra(void **dst, const void *src, uint64_t n, size_t size)
{
    *dst = NULL;
    if (!src)
        return 0;
    *dst = malloc(n * size);
    if (!*dst)
        return -1;
    memcpy(*dst, src, n * size);
    return 0;
}

int tb_case_init_ex(tb_case *t, const clflash_attention_desc *d, const ref_extras *x, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    if (d->dtype != CLFLASH_F32 && d->dtype != CLFLASH_F16 && d->dtype != CLFLASH_BF16)
        return -1;
    t->d = *d;
    t->d.bias = t->d.alibi_slopes = t->d.key_lengths = NULL; /* tb_run makes them from the host copies */
    if (x) {
        void *bias, *slopes, *lens;
        t->bias_n = x->bias ? tb_bias_extent(d) : 0;
        const int e1 = copy_extra(&bias, x->bias, t->bias_n, sizeof(float));
        const int e2 = copy_extra(&slopes, x->alibi_slopes, d->heads_q, sizeof(float));
        const int e3 = copy_extra(&lens, x->key_lengths, d->batch, sizeof(int32_t));
        t->bias = bias;
        t->slopes = slopes;
        t->lens = lens;
        if (e1 || e2 || e3) {
            tb_case_free(t);
            return -1;
        }
    }
    t->esize = clflash_dtype_size(d->dtype);
    t->heads_kv = ref_heads_kv(d);
    t->nq = ref_extent(&d->q, d->batch, d->heads_q, d->seq_q, d->head_dim);
    t->nk = ref_extent(&d->k, d->batch, t->heads_kv, d->seq_k, d->head_dim);
    t->nv = ref_extent(&d->v, d->batch, t->heads_kv, d->seq_k, d->head_dim);
    t->no = ref_extent(&d->o, d->batch, d->heads_q, d->seq_q, d->head_dim);
    t->nrows = (size_t)d->batch * d->heads_q * d->seq_q;
    const size_t dense_q = t->nrows * d->head_dim;
    const size_t dense_k = (size_t)d->batch * t->heads_kv * d->seq_k * d->head_dim;

    t->qf = xcalloc(t->nq, sizeof(float));
    t->kf = xcalloc(t->nk, sizeof(float));
    t->vf = xcalloc(t->nv, sizeof(float));
    t->dof = xcalloc(t->no, sizeof(float));
    t->q = xcalloc(t->nq, t->esize);
    t->k = xcalloc(t->nk, t->esize);
    t->v = xcalloc(t->nv, t->esize);
    t->d_o = xcalloc(t->no, t->esize);
    t->o = xcalloc(t->no, t->esize);
    t->lse = xcalloc(t->nrows, sizeof(float));
    t->dq = xcalloc(t->nq, t->esize);
    t->dk = xcalloc(t->nk, t->esize);
    t->dv = xcalloc(t->nv, t->esize);
    t->ref_o = xcalloc(dense_q, sizeof(double));
    t->ref_lse = xcalloc(t->nrows, sizeof(double));
    t->ref_dq = xcalloc(dense_q, sizeof(double));
    t->ref_dk = xcalloc(dense_k, sizeof(double));
    t->ref_dv = xcalloc(dense_k, sizeof(double));
    t->key_seen = xcalloc((uint64_t)d->batch * t->heads_kv * d->seq_k, 1);
    if (!t->qf || !t->kf || !t->vf || !t->dof || !t->q || !t->k || !t->v || !t->d_o || !t->o || !t->lse || !t->dq ||
        !t->dk || !t->dv || !t->ref_o || !t->ref_lse || !t->ref_dq || !t->ref_dk || !t->ref_dv || !t->key_seen) {
        tb_case_free(t);
        return -1;
    }

    ref_rng r;
    ref_rng_seed(&r, seed);
    fill_input(t, &r, &d->q, d->heads_q, d->seq_q, t->nq, 2.0, t->qf, t->q);
    fill_input(t, &r, &d->k, t->heads_kv, d->seq_k, t->nk, 1.0, t->kf, t->k);
    fill_input(t, &r, &d->v, t->heads_kv, d->seq_k, t->nv, 1.0, t->vf, t->v);
    fill_input(t, &r, &d->o, d->heads_q, d->seq_q, t->no, 1.0, t->dof, t->d_o);

    const ref_extras xs = tb_extras(t);
    ref_attention_ex(d, t->qf, t->kf, t->vf, &xs, t->ref_o, t->ref_lse);
    {   /* O as the forward would store it, NaN in its gaps */
        const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, d->head_dim);
        for (uint64_t i = 0; i < t->no; i++)
            store(t, t->o, i, NAN);
        for (uint32_t b = 0; b < d->batch; b++)
            for (uint32_t h = 0; h < d->heads_q; h++)
                for (uint32_t i = 0; i < d->seq_q; i++) {
                    const size_t row = ((size_t)b * d->heads_q + h) * d->seq_q + i;
                    for (uint32_t c = 0; c < d->head_dim; c++)
                        store(t, t->o, ref_index(&os, b, h, i, c), (float)t->ref_o[row * d->head_dim + c]);
                }
        for (size_t i = 0; i < t->nrows; i++)
            t->lse[i] = (float)t->ref_lse[i];
    }
    if (t->bias && (!(t->ref_dbias = xcalloc(t->bias_n, sizeof(double))) ||
                    !(t->ref_dbias_seen = xcalloc(t->bias_n, 1)))) {
        tb_case_free(t);
        return -1;
    }
    ref_attention_backward_ex(d, t->qf, t->kf, t->vf, t->dof, &xs, t->ref_dq, t->ref_dk, t->ref_dv, t->ref_dbias,
                              t->ref_dbias_seen, t->key_seen);
    tb_reset_outputs(t);
    return 0;
}

int tb_case_init_features(tb_case *t, const clflash_attention_desc *d_in, tb_bias_kind bias_kind, int alibi,
                          tb_lens_kind lens_kind, uint64_t seed)
{
    clflash_attention_desc d = *d_in;
    float *bias = NULL, *slopes = NULL;
    int32_t *lens = NULL;
    int ret = -1;
    memset(t, 0, sizeof *t);
    d.bias_layout = (clflash_layout){0, 0, 0, 0};
    d.bias_broadcast = 0;
    if (bias_kind == TB_BIAS_FULL)
        d.bias_layout.offset = 3;
    else if (bias_kind == TB_BIAS_BCAST)
        d.bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS;
    else if (bias_kind == TB_BIAS_KEYS)
        d.bias_broadcast = CLFLASH_BROADCAST_HEADS | CLFLASH_BROADCAST_ROWS;
    if (bias_kind != TB_NO_BIAS) {
        const uint64_t n = tb_bias_extent(&d);
        const ref_strides bs = ref_resolve_bias_layout(&d);
        ref_rng r;
        ref_rng_seed(&r, seed ^ 0xb1a5);
        if (!(bias = malloc(n * sizeof(float))))
            goto out;
        for (uint64_t i = 0; i < n; i++) {
            bias[i] = 2.0f * (float)ref_rng_uniform(&r);
            if ((bias_kind == TB_BIAS_FULL && i % 7 == 3) || (bias_kind == TB_BIAS_BCAST && i % 5 == 2))
                bias[i] = -INFINITY;
        }
        for (uint32_t b = 0; b < d.batch; b++)
            for (uint32_t h = 0; h < d.heads_q; h++)
                for (uint32_t i = 0; i < d.seq_q; i++)
                    for (uint32_t j = 0; j < d.seq_k; j++)
                        if ((bias_kind == TB_BIAS_KEYS && j % 6 == 5) || (bias_kind == TB_BIAS_DEAD_ROWS && i % 4 == 1))
                            bias[bs.offset + b * bs.batch_stride + h * bs.head_stride + i * bs.seq_stride + j] =
                                -INFINITY;
    }
    if (alibi) {
        if (!(slopes = malloc(d.heads_q * sizeof(float))))
            goto out;
        for (uint32_t h = 0; h < d.heads_q; h++)
            slopes[h] = ldexpf(1.0f, -(int)h - 1);
    }
    if (lens_kind != TB_NO_LENS) {
        const int32_t ragged[4] = {(int32_t)(d.seq_k + 1) / 2, 0, (int32_t)d.seq_k + 5, 1};
        if (!(lens = malloc(d.batch * sizeof(int32_t))))
            goto out;
        for (uint32_t b = 0; b < d.batch; b++)
            lens[b] = lens_kind == TB_LENS_ZERO ? 0 : ragged[b % 4];
    }
    {
        const ref_extras x = {bias, slopes, lens};
        ret = tb_case_init_ex(t, &d, &x, seed);
    }
out:
    free(bias);
    free(slopes);
    free(lens);
    return ret;
}

void tb_case_free(tb_case *t)
{
    void *all[] = {t->qf, t->kf, t->vf, t->dof, t->q, t->k, t->v, t->d_o, t->o, t->lse, t->dq, t->dk, t->dv,
                   t->ref_o, t->ref_lse, t->ref_dq, t->ref_dk, t->ref_dv, t->key_seen, t->bias, t->slopes, t->lens,
                   t->ref_dbias, t->ref_dbias_seen, t->dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    memset(t, 0, sizeof *t);
}

void tb_reset_outputs(tb_case *t)
{
    fill_sentinel(t, t->dq, t->nq);
    fill_sentinel(t, t->dk, t->nk);
    fill_sentinel(t, t->dv, t->nv);
}

static cl_mem make_buffer(cl_context ctx, cl_mem_flags flags, void *host, size_t bytes, cl_int *err)
{
    return clCreateBuffer(ctx, flags | CL_MEM_COPY_HOST_PTR, bytes, host, err);
}

clflash_status tb_run(clflash_context *c, tb_case *t, tb_algo algo, int device_forward, cl_command_queue queue)
{
    cl_context ctx = clflash_context_cl(c);
    cl_command_queue rq = queue ? queue : clflash_context_queue(c);
    cl_int e[10] = {0};
    const size_t es = t->esize;
    cl_mem q = make_buffer(ctx, CL_MEM_READ_ONLY, t->q, t->nq * es, &e[0]);
    cl_mem k = make_buffer(ctx, CL_MEM_READ_ONLY, t->k, t->nk * es, &e[1]);
    cl_mem v = make_buffer(ctx, CL_MEM_READ_ONLY, t->v, t->nv * es, &e[2]);
    cl_mem o = make_buffer(ctx, CL_MEM_READ_WRITE, t->o, t->no * es, &e[3]);
    cl_mem d_o = make_buffer(ctx, CL_MEM_READ_ONLY, t->d_o, t->no * es, &e[4]);
    cl_mem lse = make_buffer(ctx, CL_MEM_READ_WRITE, t->lse, t->nrows * sizeof(float), &e[5]);
    cl_mem dq = make_buffer(ctx, CL_MEM_READ_WRITE, t->dq, t->nq * es, &e[6]);
    cl_mem dk = make_buffer(ctx, CL_MEM_READ_WRITE, t->dk, t->nk * es, &e[7]);
    cl_mem dv = make_buffer(ctx, CL_MEM_READ_WRITE, t->dv, t->nv * es, &e[8]);
    /* the descriptor's optional inputs, from the case's host copies */
    clflash_attention_desc d = t->d;
    cl_mem extra[3] = {NULL, NULL, NULL};
    if (t->bias)
        d.bias = extra[0] = make_buffer(ctx, CL_MEM_READ_ONLY, t->bias, t->bias_n * sizeof(float), &e[9]);
    if (t->slopes && e[9] == CL_SUCCESS)
        d.alibi_slopes = extra[1] = make_buffer(ctx, CL_MEM_READ_ONLY, t->slopes, d.heads_q * sizeof(float), &e[9]);
    if (t->lens && e[9] == CL_SUCCESS)
        d.key_lengths = extra[2] = make_buffer(ctx, CL_MEM_READ_ONLY, t->lens, d.batch * sizeof(int32_t), &e[9]);
    /* dBias, pre-filled with the sentinel */
    cl_mem dbias = NULL;
    cl_int e_bias = CL_SUCCESS;
    if (t->bias_grad && t->bias) {
        free(t->dbias);
        t->dbias = malloc(t->bias_n * sizeof(float));
        if (t->dbias == NULL) {
            e_bias = CL_OUT_OF_HOST_MEMORY;
        } else {
            const uint32_t s32 = SENTINEL_F32;
            for (uint64_t i = 0; i < t->bias_n; i++)
                memcpy(&t->dbias[i], &s32, 4);
            d.bias_grad = dbias = make_buffer(ctx, CL_MEM_READ_WRITE, t->dbias, t->bias_n * sizeof(float), &e_bias);
        }
    }
    clflash_status st = e_bias;
    for (int i = 0; i < 10 && st == CL_SUCCESS; i++)
        st = e[i];
    if (st == CL_SUCCESS && device_forward) {
        cl_event fwd = NULL;
        st = clflash_forward(c, &d, queue, q, k, v, o, lse, 0, NULL, &fwd);
        if (st == CLFLASH_SUCCESS) {
            st = clWaitForEvents(1, &fwd);
            clReleaseEvent(fwd);
        }
    }
    if (st == CL_SUCCESS) {
        cl_event done = NULL;
        if (algo == TB_FLASH)
            st = clflash_backward(c, &d, queue, q, k, v, o, d_o, lse, dq, dk, dv, 0, NULL, &done);
        else
            st = clflash_backward_naive(c, &d, queue, q, k, v, o, d_o, lse, dq, dk, dv, 0, NULL, &done);
        if (st == CLFLASH_SUCCESS) {
            const cl_int we = done ? clWaitForEvents(1, &done) : CL_INVALID_EVENT;
            if (done)
                clReleaseEvent(done);
            if (we != CL_SUCCESS)
                st = we;
        }
        /* read back even after an error: the caller checks that nothing was written */
        cl_int re = clEnqueueReadBuffer(rq, dq, CL_TRUE, 0, t->nq * es, t->dq, 0, NULL, NULL);
        if (re == CL_SUCCESS)
            re = clEnqueueReadBuffer(rq, dk, CL_TRUE, 0, t->nk * es, t->dk, 0, NULL, NULL);
        if (re == CL_SUCCESS)
            re = clEnqueueReadBuffer(rq, dv, CL_TRUE, 0, t->nv * es, t->dv, 0, NULL, NULL);
        if (re == CL_SUCCESS && dbias)
            re = clEnqueueReadBuffer(rq, dbias, CL_TRUE, 0, t->bias_n * sizeof(float), t->dbias, 0, NULL, NULL);
        if (st == CLFLASH_SUCCESS)
            st = re;
    }
    if (dbias)
        clReleaseMemObject(dbias);
    cl_mem all[9] = {q, k, v, o, d_o, lse, dq, dk, dv};
    for (int i = 0; i < 9; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    for (int i = 0; i < 3; i++)
        if (extra[i])
            clReleaseMemObject(extra[i]);
    return st;
}

/* ---- tolerances -------------------------------------------------------------------------------------
 * |got - ref| <= atol * max(1, max|ref|) + rtol * |ref|, max over the tensor. Inputs are uniform
 * in [-2, 2) (Q) and [-1, 1) (K, V, dO), the default scale keeps scores within a few units, and
 * dK and dV sum up to seq_q * group terms, so the tensor's own magnitude sets the absolute part.
 *
 * f32: every product and sum is fp32 (relative error ~1e-7 per operation), P comes from an fp32
 * lse (|lse| <~ 10, so the exponent is off by ~1e-6) and D from O rounded to fp32; sums of a few
 * hundred terms stay within ~1e-5 of the tensor's scale. atol 5e-5 and rtol 5e-4 leave a margin of
 * about ten and still catch a dropped tile, a wrong mask or a missing scale (errors of 1e-2 and up).
 * f16: the inputs are exact, but D is formed from O rounded to fp16 (each term off by 2^-11, so D by
 * up to ~2^-11 * sqrt(d) typically), which moves every dS of the row by P * dD; the outputs are
 * rounded to fp16 (2^-11 relative). atol 4e-3, rtol 4e-3.
 * bf16: the same with 8 mantissa bits (2^-9 per rounding): atol 3e-2, rtol 1.6e-2.
 * The features keep these bounds: a bias in [-2, 2) and ALiBi only shift scores (P stays <= 1, and
 * a -inf entry gives P = 0 exactly); softcap adds one fp32 tanh (a few ulp) and a factor
 * 1 - tanh^2 <= 1. A dropped or extra key, a wrong derivative or a missing bias still moves the
 * gradients by 1e-2 or more (the mutations tried on the features cases all failed them). */
ref_tol tb_tol(clflash_dtype t)
{
    ref_tol r = {5e-5, 5e-4};
    if (t == CLFLASH_F16) {
        r.atol = 4e-3;
        r.rtol = 4e-3;
    } else if (t == CLFLASH_BF16) {
        r.atol = 3e-2;
        r.rtol = 1.6e-2;
    }
    return r;
}

/* Appends to msg (kept NUL-terminated). */
static void append(char *msg, size_t len, const char *text)
{
    const size_t used = strlen(msg);
    if (used + 1 < len)
        snprintf(msg + used, len - used, "%s; ", text);
}

/* Gathers one output tensor densely; counts gap elements that are not the sentinel. */
static void gather(const tb_case *t, const void *buf, uint64_t n, const clflash_layout *l, uint32_t heads,
                   uint32_t seq, double *dense, size_t *gap_bad)
{
    const ref_strides s = ref_resolve_layout(l, heads, seq, t->d.head_dim);
    unsigned char *mask = xcalloc(n, 1);
    size_t at = 0;
    for (uint32_t b = 0; b < t->d.batch; b++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < seq; i++)
                for (uint32_t c = 0; c < t->d.head_dim; c++) {
                    const uint64_t idx = ref_index(&s, b, h, i, c);
                    dense[at++] = tb_load(t, buf, idx);
                    if (mask)
                        mask[idx] = 1;
                }
    *gap_bad = 0;
    for (uint64_t i = 0; mask && i < n; i++)
        if (!mask[i] && !is_sentinel(t, buf, i))
            (*gap_bad)++;
    free(mask);
}

static double max_abs(const double *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m)
            m = fabs(x[i]);
    return m;
}

/* dBias against the reference: the elements the bias layout addresses within tolerance (exactly 0
 * where the reference has no term), every other element still the sentinel. */
static int check_bias_grad(const tb_case *t, char *msg, size_t msg_len)
{
    const clflash_attention_desc *d = &t->d;
    const ref_strides bs = ref_resolve_bias_layout(d);
    unsigned char *addressed = xcalloc(t->bias_n, 1);
    double *got = xcalloc(t->bias_n, sizeof(double)), *want = xcalloc(t->bias_n, sizeof(double));
    char part[900];
    int failures = 0;
    if (!addressed || !got || !want) {
        free(addressed);
        free(got);
        free(want);
        append(msg, msg_len, "dBias: out of host memory");
        return 1;
    }
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t j = 0; j < d->seq_k; j++)
                    addressed[ref_index(&bs, b, h, i, j)] = 1;
    size_t n = 0, zero_bad = 0, gap_bad = 0;
    uint32_t sentinel;
    for (uint64_t i = 0; i < t->bias_n; i++) {
        memcpy(&sentinel, &t->dbias[i], 4);
        if (!addressed[i]) {
            gap_bad += sentinel != SENTINEL_F32;
            continue;
        }
        if (!t->ref_dbias_seen[i] && t->dbias[i] != 0.0f)
            zero_bad++;
        got[n] = t->dbias[i];
        want[n] = t->ref_dbias[i];
        n++;
    }
    ref_tol tol = tb_tol(d->dtype);
    const double mx = max_abs(want, n);
    tol.atol *= mx > 1.0 ? mx : 1.0;
    if (ref_compare("dBias", got, want, n, tol, part, sizeof part)) {
        failures++;
        append(msg, msg_len, part);
    }
    if (zero_bad) {
        failures++;
        snprintf(part, sizeof part, "dBias: %zu elements no pair adds to are not exactly 0", zero_bad);
        append(msg, msg_len, part);
    }
    if (gap_bad) {
        failures++;
        snprintf(part, sizeof part, "dBias: %zu elements in the bias layout's gaps were written", gap_bad);
        append(msg, msg_len, part);
    }
    free(addressed);
    free(got);
    free(want);
    return failures;
}

int tb_check(const tb_case *t, char *msg, size_t msg_len)
{
    const clflash_attention_desc *d = &t->d;
    const size_t D = d->head_dim;
    const size_t dense_q = t->nrows * D, dense_k = (size_t)d->batch * t->heads_kv * d->seq_k * D;
    double *got = malloc(sizeof(double) * (dense_q > dense_k ? dense_q : dense_k));
    char part[900];
    int failures = 0;
    msg[0] = '\0';
    if (!got) {
        snprintf(msg, msg_len, "out of host memory");
        return 1;
    }
    const struct {
        const char *name;
        const void *buf;
        uint64_t n;
        const clflash_layout *l;
        uint32_t heads, seq;
        const double *ref;
        size_t dense;
    } outs[3] = {{"dQ", t->dq, t->nq, &d->q, d->heads_q, d->seq_q, t->ref_dq, dense_q},
                 {"dK", t->dk, t->nk, &d->k, t->heads_kv, d->seq_k, t->ref_dk, dense_k},
                 {"dV", t->dv, t->nv, &d->v, t->heads_kv, d->seq_k, t->ref_dv, dense_k}};
    for (int w = 0; w < 3; w++) {
        size_t gap_bad = 0, zero_bad = 0;
        gather(t, outs[w].buf, outs[w].n, outs[w].l, outs[w].heads, outs[w].seq, got, &gap_bad);
        ref_tol tol = tb_tol(d->dtype);
        const double mx = max_abs(outs[w].ref, outs[w].dense);
        tol.atol *= mx > 1.0 ? mx : 1.0;
        if (ref_compare(outs[w].name, got, outs[w].ref, outs[w].dense, tol, part, sizeof part)) {
            failures++;
            append(msg, msg_len, part);
        }
        /* rows that see no key (dQ) and keys no row sees (dK, dV) must be exactly 0 */
        for (size_t r = 0; r < outs[w].dense / D; r++) {
            const int unseen = w == 0 ? isinf(t->ref_lse[r]) : !t->key_seen[r];
            for (size_t c = 0; unseen && c < D; c++)
                if (got[r * D + c] != 0.0)
                    zero_bad++;
        }
        if (zero_bad) {
            failures++;
            snprintf(part, sizeof part, "%s: %zu values of rows that see nothing are not exactly 0", outs[w].name,
                     zero_bad);
            append(msg, msg_len, part);
        }
        if (gap_bad) {
            failures++;
            snprintf(part, sizeof part, "%s: %zu elements in the layout's gaps were written", outs[w].name, gap_bad);
            append(msg, msg_len, part);
        }
    }
    free(got);
    if (t->bias_grad && t->bias)
        failures += check_bias_grad(t, msg, msg_len);
    return failures;
}

int tb_compare_runs(const tb_case *a, const tb_case *b, int exact, char *msg, size_t msg_len)
{
    const void *pa[3] = {a->dq, a->dk, a->dv}, *pb[3] = {b->dq, b->dk, b->dv};
    const uint64_t n[3] = {a->nq, a->nk, a->nv};
    const char *names[3] = {"dQ", "dK", "dV"};
    int failures = 0;
    char part[900];
    msg[0] = '\0';
    for (int w = 0; w < 3; w++) {
        if (exact) {
            if (memcmp(pa[w], pb[w], n[w] * a->esize) != 0) {
                uint64_t i = 0;
                while (i < n[w] && memcmp((const char *)pa[w] + i * a->esize, (const char *)pb[w] + i * a->esize,
                                          a->esize) == 0)
                    i++;
                snprintf(part, sizeof part, "%s differs first at element %llu: %.9g vs %.9g", names[w],
                         (unsigned long long)i, (double)tb_load(a, pa[w], i), (double)tb_load(b, pb[w], i));
                append(msg, msg_len, part);
                failures++;
            }
            continue;
        }
        double *ga = malloc(sizeof(double) * (n[w] ? n[w] : 1)), *gb = malloc(sizeof(double) * (n[w] ? n[w] : 1));
        if (!ga || !gb) {
            free(ga);
            free(gb);
            snprintf(msg, msg_len, "out of host memory");
            return 1;
        }
        size_t m = 0;
        for (uint64_t i = 0; i < n[w]; i++) {
            if (is_sentinel(a, pa[w], i) && is_sentinel(b, pb[w], i))
                continue; /* a gap in both */
            ga[m] = tb_load(a, pa[w], i);
            gb[m] = tb_load(b, pb[w], i);
            m++;
        }
        ref_tol tol = tb_tol(a->d.dtype);
        const double mx = max_abs(gb, m);
        tol.atol *= 2.0 * (mx > 1.0 ? mx : 1.0);
        tol.rtol *= 2.0;
        if (ref_compare(names[w], ga, gb, m, tol, part, sizeof part)) {
            append(msg, msg_len, part);
            failures++;
        }
        free(ga);
        free(gb);
    }
    return failures;
}

int tb_outputs_untouched(const tb_case *t)
{
    const void *p[3] = {t->dq, t->dk, t->dv};
    const uint64_t n[3] = {t->nq, t->nk, t->nv};
    for (int w = 0; w < 3; w++)
        for (uint64_t i = 0; i < n[w]; i++)
            if (!is_sentinel(t, p[w], i))
                return 0;
    return 1;
}
