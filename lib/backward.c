/*
 * backward.c - clflash_backward. The gradient kernels are not written yet (issue "Backward pass"),
 * so this validates every argument exactly as the finished function will (the forward's checks,
 * plus d_o like o, dq/dk/dv like q/k/v, and a required lse) and then reports
 * CLFLASH_ERROR_UNSUPPORTED without enqueueing anything, as the header documents.
 */
#include "internal.h"

clflash_status clflash_backward(clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue,
                                cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq,
                                cl_mem dk, cl_mem dv, cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    clflash_problem p;
    cl_command_queue qu;
    clflash_status st;
    (void)done;
    clflash_clear_detail();
    if ((st = clflash_validate_call(c, d, queue, q, k, v, o, NULL, num_wait, wait, &p, &qu)) != CLFLASH_SUCCESS)
        return st;
    if (lse == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse is NULL; the backward pass needs the forward's lse");
    if ((st = clflash_check_buffer(d_o, clflash_tensor_extent_bytes(&p.o, p.batch, p.heads_q, p.seq_q, p.head_dim, p.elem_size), "d_o")) ||
        (st = clflash_check_buffer(lse, (uint64_t)p.batch * p.heads_q * p.seq_q * sizeof(float), "lse")) ||
        (st = clflash_check_buffer(dq, clflash_tensor_extent_bytes(&p.q, p.batch, p.heads_q, p.seq_q, p.head_dim, p.elem_size), "dq")) ||
        (st = clflash_check_buffer(dk, clflash_tensor_extent_bytes(&p.k, p.batch, p.heads_kv, p.seq_k, p.head_dim, p.elem_size), "dk")) ||
        (st = clflash_check_buffer(dv, clflash_tensor_extent_bytes(&p.v, p.batch, p.heads_kv, p.seq_k, p.head_dim, p.elem_size), "dv")))
        return st;
    return clflash_fail(CLFLASH_ERROR_UNSUPPORTED, "clflash_backward is not implemented in clflash %s",
                        clflash_version_string());
}
