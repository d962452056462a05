/*
 * harness.c - builds, runs and checks one attention test case (see harness.h).
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t lse_sentinel_bits = TH_SENTINEL_LSE;

static void *xcalloc(uint64_t n, size_t size)
{
    return calloc(n ? (size_t)n : 1, size);
}

float th_load(const th_case *t, const void *base, uint64_t idx)
{
    if (t->d.dtype == CLFLASH_F32)
        return ((const float *)base)[idx];
    return ref_f16_to_f32(((const uint16_t *)base)[idx]);
}

static void store(const th_case *t, void *base, uint64_t idx, float x)
{
    if (t->d.dtype == CLFLASH_F32)
        ((float *)base)[idx] = x;
    else
        ((uint16_t *)base)[idx] = ref_f32_to_f16(x);
}

/* Fills one input tensor: NaN everywhere (so a read of a gap poisons the result), then a random
 * value at every element of the layout; f and raw hold the same (storage-rounded) values. */
static void fill_input(const th_case *t, ref_rng *r, const clflash_layout *l, uint32_t heads,
                       uint32_t seq, uint64_t n, double amplitude, float *f, void *raw)
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
                    f[idx] = th_load(t, raw, idx);
                }
}

int th_case_init(th_case *t, const clflash_attention_desc *d, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->d = *d;
    const uint32_t hkv = ref_heads_kv(d);
    t->esize = d->dtype == CLFLASH_F32 ? 4 : 2;
    t->nq = ref_extent(&d->q, d->batch, d->heads_q, d->seq_q, d->head_dim);
    t->nk = ref_extent(&d->k, d->batch, hkv, d->seq_k, d->head_dim);
    t->nv = ref_extent(&d->v, d->batch, hkv, d->seq_k, d->head_dim);
    t->no = ref_extent(&d->o, d->batch, d->heads_q, d->seq_q, d->head_dim);
    t->nlse = (size_t)d->batch * d->heads_q * d->seq_q;
    const size_t dense = t->nlse * d->head_dim;

    t->qf = xcalloc(t->nq, sizeof(float));
    t->kf = xcalloc(t->nk, sizeof(float));
    t->vf = xcalloc(t->nv, sizeof(float));
    t->q = xcalloc(t->nq, t->esize);
    t->k = xcalloc(t->nk, t->esize);
    t->v = xcalloc(t->nv, t->esize);
    t->o = xcalloc(t->no, t->esize);
    t->lse = xcalloc(t->nlse, sizeof(float));
    t->ref_o = xcalloc(dense, sizeof(double));
    t->ref_lse = xcalloc(t->nlse, sizeof(double));
    t->o_mask = xcalloc(t->no, 1);
    if (!t->qf || !t->kf || !t->vf || !t->q || !t->k || !t->v || !t->o || !t->lse || !t->ref_o ||
        !t->ref_lse || !t->o_mask) {
        th_case_free(t);
        return -1;
    }

    ref_rng r;
    ref_rng_seed(&r, seed);
    /* Q twice as wide as K: scores spread over a few units, so the softmax is not flat and every
     * key's weight matters. */
    fill_input(t, &r, &d->q, d->heads_q, d->seq_q, t->nq, 2.0, t->qf, t->q);
    fill_input(t, &r, &d->k, hkv, d->seq_k, t->nk, 1.0, t->kf, t->k);
    fill_input(t, &r, &d->v, hkv, d->seq_k, t->nv, 1.0, t->vf, t->v);

    const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, d->head_dim);
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t c = 0; c < d->head_dim; c++)
                    t->o_mask[ref_index(&os, b, h, i, c)] = 1;
    th_case_reset_outputs(t);
    return 0;
}

void th_case_free(th_case *t)
{
    free(t->qf);
    free(t->kf);
    free(t->vf);
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->o);
    free(t->lse);
    free(t->ref_o);
    free(t->ref_lse);
    free(t->o_mask);
    free(t->key_lens);
    memset(t, 0, sizeof *t);
}

int th_case_set_key_lengths(th_case *t, const int32_t *lens)
{
    free(t->key_lens);
    t->key_lens = malloc(sizeof(int32_t) * t->d.batch);
    if (t->key_lens == NULL)
        return -1;
    memcpy(t->key_lens, lens, sizeof(int32_t) * t->d.batch);
    return 0;
}

void th_case_reset_outputs(th_case *t)
{
    const uint32_t s32 = TH_SENTINEL_F32;
    const uint16_t s16 = TH_SENTINEL_F16;
    for (uint64_t i = 0; i < t->no; i++) {
        if (t->esize == 4)
            memcpy((char *)t->o + i * 4, &s32, 4);
        else
            memcpy((char *)t->o + i * 2, &s16, 2);
    }
    for (size_t i = 0; i < t->nlse; i++)
        memcpy(&t->lse[i], &lse_sentinel_bits, 4);
}

void th_case_reference(th_case *t)
{
    const ref_extras x = {NULL, NULL, t->key_lens};
    ref_attention_ex(&t->d, t->qf, t->kf, t->vf, &x, t->ref_o, t->ref_lse);
}

clflash_status th_run_host(clflash_context *c, th_case *t, int with_lse)
{
    return clflash_forward_host(c, &t->d, t->q, t->k, t->v, t->o, with_lse ? t->lse : NULL);
}

static cl_mem make_buffer(cl_context ctx, cl_mem_flags flags, void *host, size_t bytes, cl_int *err)
{
    return clCreateBuffer(ctx, flags | CL_MEM_COPY_HOST_PTR, bytes, host, err);
}

clflash_status th_run_device(clflash_context *c, th_case *t, th_algo algo, int with_lse,
                             cl_command_queue queue)
{
    cl_context ctx = clflash_context_cl(c);
    cl_command_queue rq = queue ? queue : clflash_context_queue(c);
    cl_int e1 = CL_SUCCESS, e2 = CL_SUCCESS, e3 = CL_SUCCESS, e4 = CL_SUCCESS, e5 = CL_SUCCESS;
    cl_mem q = make_buffer(ctx, CL_MEM_READ_ONLY, t->q, t->nq * t->esize, &e1);
    cl_mem k = make_buffer(ctx, CL_MEM_READ_ONLY, t->k, t->nk * t->esize, &e2);
    cl_mem v = make_buffer(ctx, CL_MEM_READ_ONLY, t->v, t->nv * t->esize, &e3);
    cl_mem o = make_buffer(ctx, CL_MEM_READ_WRITE, t->o, t->no * t->esize, &e4);
    cl_mem lse = with_lse ? make_buffer(ctx, CL_MEM_READ_WRITE, t->lse, t->nlse * sizeof(float), &e5) : NULL;
    cl_int e6 = CL_SUCCESS;
    cl_mem lens = t->key_lens ? make_buffer(ctx, CL_MEM_READ_ONLY, t->key_lens, sizeof(int32_t) * t->d.batch, &e6) : NULL;
    clflash_status st = e1 ? e1 : e2 ? e2 : e3 ? e3 : e4 ? e4 : e5 ? e5 : e6;
    if (st == CL_SUCCESS) {
        cl_event done = NULL;
        clflash_attention_desc d = t->d;
        if (lens)
            d.key_lengths = lens;
        if (algo == TH_FLASH)
            st = clflash_forward(c, &d, queue, q, k, v, o, lse, 0, NULL, &done);
        else
            st = clflash_forward_naive(c, &d, queue, q, k, v, o, lse, 0, NULL, &done);
        if (st == CLFLASH_SUCCESS) {
            cl_int we = done ? clWaitForEvents(1, &done) : CL_INVALID_EVENT;
            if (done)
                clReleaseEvent(done);
            if (we != CL_SUCCESS)
                st = we;
        }
        /* read back even after an error: the caller checks that nothing was written */
        cl_int re = clEnqueueReadBuffer(rq, o, CL_TRUE, 0, t->no * t->esize, t->o, 0, NULL, NULL);
        if (re == CL_SUCCESS && lse)
            re = clEnqueueReadBuffer(rq, lse, CL_TRUE, 0, t->nlse * sizeof(float), t->lse, 0, NULL, NULL);
        if (st == CLFLASH_SUCCESS)
            st = re;
    }
    if (q) clReleaseMemObject(q);
    if (k) clReleaseMemObject(k);
    if (v) clReleaseMemObject(v);
    if (o) clReleaseMemObject(o);
    if (lse) clReleaseMemObject(lse);
    if (lens) clReleaseMemObject(lens);
    return st;
}

/* Appends to msg (kept NUL-terminated). */
static void append(char *msg, size_t len, const char *fmt, const char *a)
{
    size_t used = strlen(msg);
    if (used + 1 < len)
        snprintf(msg + used, len - used, fmt, a);
}

int th_check(const th_case *t, int with_lse, ref_path path, char *msg, size_t msg_len)
{
    const clflash_attention_desc *d = &t->d;
    const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, d->head_dim);
    const size_t dense = t->nlse * d->head_dim;
    double *got = malloc(sizeof(double) * (dense ? dense : 1));
    char part[768];
    int failures = 0;
    msg[0] = '\0';
    if (!got) {
        snprintf(msg, msg_len, "out of host memory");
        return 1;
    }

    size_t masked_bad = 0, first_masked = 0;
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++) {
                const size_t row = ((size_t)b * d->heads_q + h) * d->seq_q + i;
                for (uint32_t c = 0; c < d->head_dim; c++) {
                    got[row * d->head_dim + c] = th_load(t, t->o, ref_index(&os, b, h, i, c));
                    /* a row that sees no key must be exactly 0, not merely small */
                    if (isinf(t->ref_lse[row]) && got[row * d->head_dim + c] != 0.0 && masked_bad++ == 0)
                        first_masked = row;
                }
            }
    if (ref_compare("O", got, t->ref_o, dense, ref_tol_o(d->dtype, path), part, sizeof part)) {
        failures++;
        append(msg, msg_len, "%s; ", part);
    }
    if (masked_bad) {
        failures++;
        snprintf(part, sizeof part, "%zu O values of fully masked rows are not exactly 0 (first row %zu)",
                 masked_bad, first_masked);
        append(msg, msg_len, "%s; ", part);
    }

    if (with_lse) {
        for (size_t r = 0; r < t->nlse; r++)
            got[r] = t->lse[r];
        if (ref_compare("lse", got, t->ref_lse, t->nlse, ref_tol_lse(d->dtype, path), part, sizeof part)) {
            failures++;
            append(msg, msg_len, "%s; ", part);
        }
    }

    size_t gap_bad = 0, first_gap = 0;
    for (uint64_t i = 0; i < t->no; i++) {
        if (t->o_mask[i])
            continue;
        const int same = t->esize == 4 ? ((const uint32_t *)t->o)[i] == TH_SENTINEL_F32
                                        : ((const uint16_t *)t->o)[i] == TH_SENTINEL_F16;
        if (!same && gap_bad++ == 0)
            first_gap = (size_t)i;
    }
    if (gap_bad) {
        failures++;
        snprintf(part, sizeof part, "%zu elements in O's gaps were written (first at index %zu)", gap_bad,
                 first_gap);
        append(msg, msg_len, "%s; ", part);
    }
    free(got);
    return failures;
}

int th_check_same(const th_case *a, const th_case *b, int with_lse, ref_tol to, ref_tol tl, char *msg,
                  size_t msg_len)
{
    const clflash_attention_desc *d = &a->d;
    const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, d->head_dim);
    const size_t dense = a->nlse * d->head_dim;
    double *ga = malloc(sizeof(double) * (dense ? dense : 1));
    double *gb = malloc(sizeof(double) * (dense ? dense : 1));
    char part[768];
    int failures = 0;
    msg[0] = '\0';
    if (!ga || !gb) {
        free(ga);
        free(gb);
        snprintf(msg, msg_len, "out of host memory");
        return 1;
    }
    size_t n = 0;
    for (uint32_t bb = 0; bb < d->batch; bb++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t c = 0; c < d->head_dim; c++, n++) {
                    const uint64_t idx = ref_index(&os, bb, h, i, c);
                    ga[n] = th_load(a, a->o, idx);
                    gb[n] = th_load(b, b->o, idx);
                }
    if (ref_compare("O (first vs second)", ga, gb, dense, to, part, sizeof part)) {
        failures++;
        append(msg, msg_len, "%s; ", part);
    }
    if (with_lse) {
        for (size_t r = 0; r < a->nlse; r++) {
            ga[r] = a->lse[r];
            gb[r] = b->lse[r];
        }
        if (ref_compare("lse (first vs second)", ga, gb, a->nlse, tl, part, sizeof part)) {
            failures++;
            append(msg, msg_len, "%s; ", part);
        }
    }
    free(ga);
    free(gb);
    return failures;
}

int th_outputs_untouched(const th_case *t)
{
    for (uint64_t i = 0; i < t->no; i++) {
        const int same = t->esize == 4 ? ((const uint32_t *)t->o)[i] == TH_SENTINEL_F32
                                        : ((const uint16_t *)t->o)[i] == TH_SENTINEL_F16;
        if (!same)
            return 0;
    }
    for (size_t i = 0; i < t->nlse; i++)
        if (memcmp(&t->lse[i], &lse_sentinel_bits, 4) != 0)
            return 0;
    return 1;
}

clflash_attention_desc th_desc(uint32_t batch, uint32_t heads_q, uint32_t heads_kv, uint32_t seq_q,
                               uint32_t seq_k, uint32_t head_dim, clflash_dtype dtype, uint32_t flags)
{
    clflash_attention_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.batch = batch;
    d.heads_q = heads_q;
    d.heads_kv = heads_kv;
    d.seq_q = seq_q;
    d.seq_k = seq_k;
    d.head_dim = head_dim;
    d.dtype = dtype;
    d.flags = flags;
    return d;
}

static int layout_is_default(const clflash_layout *l)
{
    return !l->offset && !l->batch_stride && !l->head_stride && !l->seq_stride;
}

const char *th_desc_str(const clflash_attention_desc *d, char *buf, size_t n)
{
    const char *dt = d->dtype == CLFLASH_F32 ? "f32" : d->dtype == CLFLASH_F16 ? "f16"
                   : d->dtype == CLFLASH_BF16 ? "bf16" : d->dtype == CLFLASH_I8 ? "i8" : "dtype?";
    int strided = !layout_is_default(&d->q) || !layout_is_default(&d->k) || !layout_is_default(&d->v) ||
                  !layout_is_default(&d->o);
    snprintf(buf, n, "%s b%u h%u/%u q%u k%u d%u%s%s%s scale=%g block=%u%s", dt, d->batch, d->heads_q,
             d->heads_kv, d->seq_q, d->seq_k, d->head_dim, (d->flags & CLFLASH_CAUSAL) ? " causal" : "",
             (d->flags & CLFLASH_WINDOW) ? " window" : "",
             (d->flags & CLFLASH_ALIGN_TO_KEY_LENGTH) ? " aligned-to-key-lengths" : "", (double)d->scale, d->block,
             strided ? " strided" : "");
    return buf;
}

clflash_status th_context(const clflash_context_options *opt, clflash_context **out)
{
    return clflash_context_create_default(opt, out);
}

uint64_t th_device_local_mem(clflash_context *c)
{
    cl_ulong v = 0;
    if (clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_LOCAL_MEM_SIZE, sizeof v, &v, NULL) != CL_SUCCESS)
        return 0;
    return v;
}
