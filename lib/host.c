/*
 * host.c - clflash_forward_host: attention on host arrays for callers who do not manage OpenCL
 * buffers. It copies Q, K, V in, runs clflash_forward on the context's queue, reads O and lse into
 * staging memory, and only when all of that succeeded copies O's own elements (never its gaps) and
 * lse into the caller's arrays.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* 1 if the tensor's elements fill its extent with no gaps. */
static int dense(const clflash_strides *s, uint32_t heads, uint32_t seq, uint32_t head_dim, uint32_t batch)
{
    return (seq == 1 || s->seq_stride == head_dim) && (heads == 1 || s->head_stride == (uint64_t)seq * head_dim) &&
           (batch == 1 || s->batch_stride == (uint64_t)heads * seq * head_dim);
}

/* Reads O's elements from the device into `dst`, a host array with O's layout. */
static cl_int read_output(cl_command_queue qu, cl_mem buf, const clflash_problem *p, void *dst)
{
    const clflash_strides *s = &p->o;
    const size_t es = p->out_elem_size;
    if (dense(s, p->heads_q, p->q_seq, p->head_dim, p->q_batch)) {
        size_t first = (size_t)(s->offset * es);
        size_t bytes = (size_t)((uint64_t)p->q_batch * p->heads_q * p->q_seq * p->head_dim * es);
        return clEnqueueReadBuffer(qu, buf, CL_FALSE, first, bytes, (char *)dst + first, 0, NULL, NULL);
    }
    for (uint32_t b = 0; b < p->q_batch; b++)
        for (uint32_t h = 0; h < p->heads_q; h++) {
            const size_t origin = (size_t)((s->offset + b * s->batch_stride + h * s->head_stride) * es);
            const size_t pitch = (size_t)((p->q_seq > 1 ? s->seq_stride : p->head_dim) * es);
            const size_t buf_origin[3] = {origin, 0, 0}, region[3] = {p->head_dim * es, p->q_seq, 1};
            cl_int err = clEnqueueReadBufferRect(qu, buf, CL_FALSE, buf_origin, buf_origin, region, pitch, 0, pitch,
                                                 0, dst, 0, NULL, NULL);
            if (err != CL_SUCCESS)
                return err;
        }
    return CL_SUCCESS;
}

/* Copies O's elements (and nothing between them) from the staging array to the caller's. */
static void copy_output(const clflash_problem *p, const void *stage, void *o)
{
    const clflash_strides *s = &p->o;
    const size_t es = p->out_elem_size, row = p->head_dim * es;
    for (uint32_t b = 0; b < p->q_batch; b++)
        for (uint32_t h = 0; h < p->heads_q; h++)
            for (uint32_t i = 0; i < p->q_seq; i++) {
                const size_t at = (size_t)((s->offset + b * s->batch_stride + h * s->head_stride + i * s->seq_stride) * es);
                memcpy((char *)o + at, (const char *)stage + at, row);
            }
}

clflash_status clflash_forward_host(clflash_context *c, const clflash_attention_desc *d, const void *q,
                                    const void *k, const void *v, void *o, float *lse)
{
    clflash_problem p;
    clflash_status st;
    cl_mem bq = NULL, bk = NULL, bv = NULL, bo = NULL, blse = NULL;
    cl_int err = CL_SUCCESS;
    uint64_t nq, nk, nv, no, nlse;

    clflash_clear_detail();
    if ((st = clflash_check_context(c)) != CLFLASH_SUCCESS || (st = clflash_resolve_desc(d, &p)) != CLFLASH_SUCCESS)
        return st;
    if (!q || !k || !v || !o)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is NULL", !q ? "q" : !k ? "k" : !v ? "v" : "o");
    nq = clflash_q_extent_bytes(&p, &p.q, p.elem_size); /* packed: total_q rows */
    nk = clflash_kv_extent_bytes(&p, &p.k); /* paged: the pools; packed: total_k rows */
    nv = clflash_kv_extent_bytes(&p, &p.v);
    no = clflash_q_extent_bytes(&p, &p.o, p.out_elem_size);
    nlse = clflash_lse_floats(&p) * sizeof(float);
    if (nq > SIZE_MAX || nk > SIZE_MAX || nv > SIZE_MAX || no > SIZE_MAX)
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "a tensor is larger than this host can address");

    bq = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)nq, (void *)q, &err);
    if (!err) bk = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)nk, (void *)k, &err);
    if (!err) bv = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)nv, (void *)v, &err);
    /* A variable-length batch writes only the rows its sequences cover: the others keep the
     * caller's values, so O and lse start as the caller's arrays. */
    if (!err) bo = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE | (p.varlen ? CL_MEM_COPY_HOST_PTR : 0), (size_t)no,
                                  p.varlen ? o : NULL, &err);
    if (!err && lse) blse = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE | (p.varlen ? CL_MEM_COPY_HOST_PTR : 0),
                                           (size_t)nlse, p.varlen ? (void *)lse : NULL, &err);
    if (err != CL_SUCCESS) {
        st = clflash_fail(err, "allocating device buffers for clflash_forward_host failed");
    } else if ((st = clflash_forward(c, d, NULL, bq, bk, bv, bo, blse, 0, NULL, NULL)) == CLFLASH_SUCCESS) {
        /* Everything is read into staging memory first and copied into o and lse only when every
         * step succeeded, so a failure leaves the caller's arrays untouched. */
        void *stage_o = malloc((size_t)no);
        float *stage_lse = lse ? malloc((size_t)nlse) : NULL;
        if (stage_o == NULL || (lse && stage_lse == NULL)) {
            st = clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating host staging memory failed");
        } else {
            err = read_output(c->queue, bo, &p, stage_o);
            if (err == CL_SUCCESS && lse)
                err = clEnqueueReadBuffer(c->queue, blse, CL_FALSE, 0, (size_t)nlse, stage_lse, 0, NULL, NULL);
            /* Wait even after a failed enqueue: reads already enqueued must finish before the
             * staging memory is freed. */
            {
                const cl_int fin = clFinish(c->queue);
                if (err == CL_SUCCESS)
                    err = fin;
            }
            if (err != CL_SUCCESS) {
                st = clflash_fail(err, "running or reading back clflash_forward_host failed");
            } else {
                copy_output(&p, stage_o, o);
                if (lse)
                    memcpy(lse, stage_lse, (size_t)nlse);
            }
        }
        free(stage_o);
        free(stage_lse);
    }
    if (bq) clReleaseMemObject(bq);
    if (bk) clReleaseMemObject(bk);
    if (bv) clReleaseMemObject(bv);
    if (bo) clReleaseMemObject(bo);
    if (blse) clReleaseMemObject(blse);
    return st;
}
