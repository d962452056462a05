/*
 * backward.c - clflash_backward: the checks every backward entry point shares, and the dispatch of
 * the flash backward (cl/flash_backward.cl): the D = rowsum(dO * O) kernel into a temporary, then
 * one launch of the gradient kernel whose work-groups over K/V blocks write dK and dV and whose
 * work-groups over Q blocks write dQ, chained by an event.
 *
 * Why this shape: each gradient element has exactly one writer, so the result is deterministic
 * without atomics; the price is that P and dS are recomputed by both kinds of work-group (each
 * scores every visible block pair once). The first kernel writes only clflash's temporary and the
 * second is a single enqueue, so a call that fails at enqueue has written no caller buffer (the
 * D kernel, if already enqueued, still runs into the temporary; the header says so). With a bias
 * gradient its kernel (bias_grad.c) runs between the two, chained by events too; if the gradient
 * kernel's enqueue then fails, dBias alone is written. If the
 * device refuses the planned tile at enqueue (CL_OUT_OF_RESOURCES) and B was not forced, the
 * gradient kernel is planned again below that B, a bounded number of times, as clflash_forward does.
 */
#include "internal.h"

#define MAX_ENQUEUE_RETRIES 3

typedef struct {
    cl_mem buf;
    const clflash_strides *s;
    uint32_t batch, heads, seq; /* outer dimensions: packed (1, total) for a variable-length batch */
    const char *name;
} tensor_ref;

clflash_status clflash_validate_backward_call(clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue,
                                              cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq,
                                              cl_mem dk, cl_mem dv, cl_uint num_wait, const cl_event *wait,
                                              clflash_problem *p, cl_command_queue *queue_out)
{
    clflash_status st;
    if ((st = clflash_validate_call(c, d, queue, q, k, v, o, NULL, num_wait, wait, p, queue_out)) != CLFLASH_SUCCESS ||
        (st = clflash_check_backward_features(p)) != CLFLASH_SUCCESS)
        return st;
    if (lse == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse is NULL; the backward pass needs the forward's lse");

    /* K and V are never paged here (refused above): kv_batch and kv_seq are (batch, seq_k), or packed */
    const tensor_ref in[5] = {{q, &p->q, p->q_batch, p->heads_q, p->q_seq, "q"},
                              {k, &p->k, p->kv_batch, p->heads_kv, p->kv_seq, "k"},
                              {v, &p->v, p->kv_batch, p->heads_kv, p->kv_seq, "v"},
                              {o, &p->o, p->q_batch, p->heads_q, p->q_seq, "o"},
                              {d_o, &p->o, p->q_batch, p->heads_q, p->q_seq, "d_o"}};
    const tensor_ref out[3] = {{dq, &p->q, p->q_batch, p->heads_q, p->q_seq, "dq"},
                               {dk, &p->k, p->kv_batch, p->heads_kv, p->kv_seq, "dk"},
                               {dv, &p->v, p->kv_batch, p->heads_kv, p->kv_seq, "dv"}};
    if ((st = clflash_check_buffer(d_o, clflash_q_extent_bytes(p, &p->o, p->elem_size), "d_o")) ||
        (st = clflash_check_buffer(lse, clflash_lse_floats(p) * sizeof(float), "lse")))
        return st;
    for (int i = 0; i < 3; i++)
        if ((st = clflash_check_buffer(out[i].buf, clflash_tensor_extent_bytes(out[i].s, out[i].batch, out[i].heads,
                                                                               out[i].seq, p->head_dim, p->elem_size),
                                       out[i].name)))
            return st;
    for (int i = 0; i < 3; i++) {
        if (!clflash_output_disjoint(out[i].s, out[i].batch, out[i].heads, out[i].seq, p->head_dim))
            return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT,
                                "the layout of %s (as %s's) makes rows or heads overlap; an output needs a layout "
                                "whose elements are distinct",
                                out[i].name, out[i].name + 1);
        if (lse == out[i].buf)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse and %s are the same buffer", out[i].name);
        /* The descriptor's own inputs are read while the outputs are written. */
        if (out[i].buf == p->bias || out[i].buf == p->alibi_slopes || out[i].buf == p->key_lengths ||
            out[i].buf == p->cu_seqlens_q || out[i].buf == p->cu_seqlens_k)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is the same buffer as the descriptor's %s",
                                out[i].name,
                                out[i].buf == p->bias           ? "bias"
                                : out[i].buf == p->alibi_slopes ? "alibi_slopes"
                                : out[i].buf == p->key_lengths  ? "key_lengths"
                                                                : "cu_seqlens");
    }
    {
        const cl_mem others[9] = {q, k, v, o, d_o, lse, dq, dk, dv};
        if ((st = clflash_check_bias_grad(p, others, 9)) != CLFLASH_SUCCESS)
            return st;
    }
    /* An output must not overlap an input or another output that shares its buffer (byte ranges
     * from the first to one past the last element; interleaved layouts count as overlapping). */
    for (int i = 0; i < 3; i++) {
        const uint64_t of = out[i].s->offset * p->elem_size;
        const uint64_t oe = clflash_tensor_extent_bytes(out[i].s, out[i].batch, out[i].heads, out[i].seq, p->head_dim,
                                                        p->elem_size);
        for (int j = 0; j < 5 + i; j++) {
            const tensor_ref *t = j < 5 ? &in[j] : &out[j - 5];
            if (t->buf != out[i].buf)
                continue;
            const uint64_t f = t->s->offset * p->elem_size;
            const uint64_t e = clflash_tensor_extent_bytes(t->s, t->batch, t->heads, t->seq, p->head_dim, p->elem_size);
            if (f < oe && of < e)
                return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "%s overlaps %s in the same buffer", out[i].name,
                                    t->name);
        }
    }
    return CLFLASH_SUCCESS;
}

/* The gradient kernel's arguments (the portable and the tensor-core kernel take the same): nine
 * buffers, the shape, the number of key groups, the scales, the q, k, v and o layouts, the
 * feature arguments the forward kernels take too (window, softcap, bias, ALiBi, key lengths;
 * clflash_set_feature_args without the output scale), and a variable-length batch's. */
static cl_int set_grad_args(cl_kernel kernel, const cl_mem *bufs, const clflash_problem *p, uint64_t tiles_k)
{
    const cl_uint nbuf = 9, seq_q = p->seq_q, seq_k = p->seq_k, heads_q = p->heads_q, heads_kv = p->heads_kv,
                  group = p->group, tk = (cl_uint)tiles_k;
    const float scale_log2 = (float)((double)p->scale * 1.4426950408889634);
    const cl_ulong lay[16] = {p->q.offset, p->q.batch_stride, p->q.head_stride, p->q.seq_stride,
                              p->k.offset, p->k.batch_stride, p->k.head_stride, p->k.seq_stride,
                              p->v.offset, p->v.batch_stride, p->v.head_stride, p->v.seq_stride,
                              p->o.offset, p->o.batch_stride, p->o.head_stride, p->o.seq_stride};
    const clflash_arg args[] = {{sizeof(cl_uint), &seq_q},   {sizeof(cl_uint), &seq_k},
                                {sizeof(cl_uint), &heads_q}, {sizeof(cl_uint), &heads_kv},
                                {sizeof(cl_uint), &group},   {sizeof(cl_uint), &tk},
                                {sizeof(float), &scale_log2}, {sizeof(float), &p->scale}};
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; err == CL_SUCCESS && i < nbuf; i++)
        err = clSetKernelArg(kernel, i, sizeof(cl_mem), &bufs[i]);
    if (err == CL_SUCCESS)
        err = clflash_set_args(kernel, nbuf, args, sizeof args / sizeof args[0]);
    for (cl_uint i = 0; err == CL_SUCCESS && i < 16; i++)
        err = clSetKernelArg(kernel, nbuf + 8 + i, sizeof(cl_ulong), &lay[i]);
    if (err == CL_SUCCESS)
        err = clflash_set_feature_args(kernel, nbuf + 8 + 16, p, 0);
    if (err == CL_SUCCESS)
        err = clflash_set_varlen_args(kernel, nbuf + 8 + 16 + CLFLASH_FEATURE_ARGS - 1, p);
    return err;
}

static cl_int set_rowdot_args(cl_kernel kernel, cl_mem o, cl_mem d_o, cl_mem dvec, const clflash_problem *p)
{
    const cl_uint seq_q = p->seq_q, heads_q = p->heads_q;
    const cl_ulong lay[4] = {p->o.offset, p->o.batch_stride, p->o.head_stride, p->o.seq_stride};
    const cl_uint total_q = p->total_q;
    const clflash_arg args[] = {{sizeof(cl_mem), &o},      {sizeof(cl_mem), &d_o},        {sizeof(cl_mem), &dvec},
                                {sizeof(cl_uint), &seq_q}, {sizeof(cl_uint), &heads_q},   {sizeof(cl_ulong), &lay[0]},
                                {sizeof(cl_ulong), &lay[1]}, {sizeof(cl_ulong), &lay[2]}, {sizeof(cl_ulong), &lay[3]},
                                {sizeof(cl_mem), p->cu_seqlens_q ? &p->cu_seqlens_q : NULL},
                                {sizeof(cl_uint), &total_q}};
    return clflash_set_args(kernel, 0, args, sizeof args / sizeof args[0]);
}

clflash_status clflash_backward(clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue,
                                cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq,
                                cl_mem dk, cl_mem dv, cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    clflash_problem p;
    cl_command_queue qu;
    clflash_status st;
    cl_int err = CL_SUCCESS;
    cl_mem dvec;
    cl_event pre = NULL, last = NULL;
    uint32_t below = 0;

    clflash_clear_detail();
    if ((st = clflash_validate_backward_call(c, d, queue, q, k, v, o, d_o, lse, dq, dk, dv, num_wait, wait, &p,
                                             &qu)) != CLFLASH_SUCCESS)
        return st;

    /* Plan (and build) before allocating, so that a planning error leaves nothing behind. */
    clflash_backward_kernels bk;
    if ((st = clflash_plan_backward_kernels(c, &p, 0, &bk)) != CLFLASH_SUCCESS)
        return st;
    const uint64_t rows = clflash_lse_floats(&p); /* D has lse's layout */
    dvec = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)(rows * sizeof(float)), NULL, &err);
    if (err != CL_SUCCESS) {
        clflash_backward_kernels_release(&bk);
        return clflash_fail(err, "allocating the %llu-byte D buffer failed", (unsigned long long)(rows * sizeof(float)));
    }

    {
        const size_t wg = bk.rowdot_wg;
        const size_t global[3] = {((size_t)p.seq_q + wg - 1) / wg * wg, p.heads_q, p.batch}, local[3] = {wg, 1, 1};
        err = set_rowdot_args(bk.rowdot, o, d_o, dvec, &p);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(qu, bk.rowdot, 3, NULL, global, local, num_wait, wait, &pre);
        if (err != CL_SUCCESS) {
            clflash_backward_kernels_release(&bk);
            clReleaseMemObject(dvec);
            return clflash_fail(err, "enqueueing the backward's D kernel failed");
        }
    }

    /* dBias (optional) from the same D, then the gradient kernel after it: its event is the call's */
    cl_event bias_done = NULL;
    if (p.bias_grad) {
        const cl_mem inputs[5] = {q, k, v, d_o, lse};
        if ((st = clflash_enqueue_bias_grad(c, &p, qu, inputs, dvec, 1, &pre, &bias_done)) != CLFLASH_SUCCESS) {
            clflash_backward_kernels_release(&bk);
            clReleaseEvent(pre);
            clReleaseMemObject(dvec);
            return st;
        }
    }

    for (int attempt = 0;; attempt++) {
        const size_t wgs = bk.plan.work_group_size;
        const size_t global[3] = {(size_t)(bk.key_groups + bk.query_groups) * wgs, p.heads_q, p.batch};
        const size_t local[3] = {wgs, 1, 1};
        const cl_mem bufs[9] = {q, k, v, d_o, lse, dvec, dq, dk, dv};
        cl_event e = NULL;
        err = set_grad_args(bk.grads, bufs, &p, bk.key_groups);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(qu, bk.grads, 3, NULL, global, local, 1, bias_done ? &bias_done : &pre, &e);
        const clflash_plan plan = bk.plan;
        clflash_backward_kernels_release(&bk);
        if (err == CL_SUCCESS) {
            last = e;
            break;
        }
        if (err == CL_OUT_OF_RESOURCES && p.block == 0 && attempt < MAX_ENQUEUE_RETRIES && plan.block > 1) {
            below = plan.block; /* the device refused this tile: plan a smaller one */
            if ((st = clflash_plan_backward_kernels(c, &p, below, &bk)) == CLFLASH_SUCCESS)
                continue;
        } else {
            st = clflash_fail(err, "enqueueing the backward's gradient kernel (B = %u) failed", plan.block);
        }
        if (bias_done)
            clReleaseEvent(bias_done);
        clReleaseEvent(pre);
        clReleaseMemObject(dvec);
        return st;
    }
    clReleaseEvent(pre);
    clReleaseMemObject(dvec); /* freed by OpenCL once the enqueued kernels are done with it */
    if (bias_done)
        clReleaseEvent(bias_done);
    if (done)
        *done = last;
    else
        clReleaseEvent(last);
    return CLFLASH_SUCCESS;
}
