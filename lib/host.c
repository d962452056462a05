/*
 * host.c - clflash_forward_host: attention on host arrays for callers who do not manage OpenCL
 * buffers. It copies Q, K, V in, runs clflash_forward on the context's queue, and copies back only
 * O's own elements (row by row for a strided O, so its gaps are never written) and lse.
 */
#include "internal.h"

#include <string.h>

/* 1 if the tensor's elements fill its extent with no gaps. */
static int dense(const clflash_strides *s, uint32_t heads, uint32_t seq, uint32_t head_dim, uint32_t batch)
{
    return (seq == 1 || s->seq_stride == head_dim) && (heads == 1 || s->head_stride == (uint64_t)seq * head_dim) &&
           (batch == 1 || s->batch_stride == (uint64_t)heads * seq * head_dim);
}

static cl_int read_output(cl_command_queue qu, cl_mem buf, const clflash_problem *p, void *o)
{
    const clflash_strides *s = &p->o;
    const size_t es = p->elem_size;
    if (dense(s, p->heads_q, p->seq_q, p->head_dim, p->batch)) {
        size_t first = (size_t)(s->offset * es);
        size_t bytes = (size_t)((uint64_t)p->batch * p->heads_q * p->seq_q * p->head_dim * es);
        return clEnqueueReadBuffer(qu, buf, CL_FALSE, first, bytes, (char *)o + first, 0, NULL, NULL);
    }
    for (uint32_t b = 0; b < p->batch; b++)
        for (uint32_t h = 0; h < p->heads_q; h++) {
            const size_t origin = (size_t)((s->offset + b * s->batch_stride + h * s->head_stride) * es);
            const size_t pitch = (size_t)((p->seq_q > 1 ? s->seq_stride : p->head_dim) * es);
            const size_t buf_origin[3] = {origin, 0, 0}, region[3] = {p->head_dim * es, p->seq_q, 1};
            cl_int err = clEnqueueReadBufferRect(qu, buf, CL_FALSE, buf_origin, buf_origin, region, pitch, 0, pitch,
                                                 0, o, 0, NULL, NULL);
            if (err != CL_SUCCESS)
                return err;
        }
    return CL_SUCCESS;
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
    nq = clflash_tensor_extent_bytes(&p.q, p.batch, p.heads_q, p.seq_q, p.head_dim, p.elem_size);
    nk = clflash_tensor_extent_bytes(&p.k, p.batch, p.heads_kv, p.seq_k, p.head_dim, p.elem_size);
    nv = clflash_tensor_extent_bytes(&p.v, p.batch, p.heads_kv, p.seq_k, p.head_dim, p.elem_size);
    no = clflash_tensor_extent_bytes(&p.o, p.batch, p.heads_q, p.seq_q, p.head_dim, p.elem_size);
    nlse = (uint64_t)p.batch * p.heads_q * p.seq_q * sizeof(float);
    if (nq > SIZE_MAX || nk > SIZE_MAX || nv > SIZE_MAX || no > SIZE_MAX)
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "a tensor is larger than this host can address");

    bq = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)nq, (void *)q, &err);
    if (!err) bk = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)nk, (void *)k, &err);
    if (!err) bv = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)nv, (void *)v, &err);
    if (!err) bo = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)no, NULL, &err);
    if (!err && lse) blse = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)nlse, NULL, &err);
    if (err != CL_SUCCESS) {
        st = clflash_fail(err, "allocating device buffers for clflash_forward_host failed");
    } else if ((st = clflash_forward(c, d, NULL, bq, bk, bv, bo, blse, 0, NULL, NULL)) == CLFLASH_SUCCESS) {
        /* Wait for the kernel first, so that a failure leaves o and lse untouched. */
        if ((err = clFinish(c->queue)) == CL_SUCCESS && (err = read_output(c->queue, bo, &p, o)) == CL_SUCCESS &&
            lse)
            err = clEnqueueReadBuffer(c->queue, blse, CL_FALSE, 0, (size_t)nlse, lse, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clFinish(c->queue);
        if (err != CL_SUCCESS)
            st = clflash_fail(err, "running or reading back clflash_forward_host failed");
    }
    if (bq) clReleaseMemObject(bq);
    if (bk) clReleaseMemObject(bk);
    if (bv) clReleaseMemObject(bv);
    if (bo) clReleaseMemObject(bo);
    if (blse) clReleaseMemObject(blse);
    return st;
}
