/*
 * dispatch_util.c - small helpers the dispatchers share: setting a list of kernel arguments and
 * the dtype and feature -D defines, and the feature arguments the flash and naive kernels share.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

cl_int clflash_set_args(cl_kernel k, cl_uint first, const clflash_arg *args, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cl_int err = clSetKernelArg(k, first + (cl_uint)i, args[i].size, args[i].value);
        if (err != CL_SUCCESS)
            return err;
    }
    return CL_SUCCESS;
}

const char *clflash_dtype_define(clflash_dtype t)
{
    switch (t) {
    case CLFLASH_F32: return "-D CLFLASH_DTYPE_F32";
    case CLFLASH_F16: return "-D CLFLASH_DTYPE_F16";
    case CLFLASH_BF16: return "-D CLFLASH_DTYPE_BF16";
    case CLFLASH_I8: return "-D CLFLASH_DTYPE_I8";
    default: return "";
    }
}

const char *clflash_out_define(clflash_dtype t)
{
    switch (t) {
    case CLFLASH_F16: return "-D CLFLASH_OUT_F16";
    case CLFLASH_BF16: return "-D CLFLASH_OUT_BF16";
    default: return "-D CLFLASH_OUT_F32";
    }
}

/* Only with key_lengths and a rule that has a diagonal, so that other calls share the programs
 * they had. */
int clflash_keylen_diagonal(const clflash_problem *p)
{
    return (p->flags & CLFLASH_ALIGN_TO_KEY_LENGTH) && p->key_lengths != NULL &&
           ((p->flags & (CLFLASH_CAUSAL | CLFLASH_WINDOW)) || p->alibi_slopes != NULL);
}

void clflash_feature_defines(const clflash_problem *p, int with_lse, char *buf, size_t size)
{
    snprintf(buf, size,
             "%s %s -D CAUSAL=%d -D WINDOW=%d -D SOFTCAP=%d -D BIAS=%d -D ALIBI=%d -D KEYLEN=%d -D KEYLEN_DIAGONAL=%d "
             "-D VARLEN=%d -D WITH_LSE=%d",
             clflash_dtype_define(p->dtype), clflash_out_define(p->out_dtype), (p->flags & CLFLASH_CAUSAL) ? 1 : 0,
             (p->flags & CLFLASH_WINDOW) ? 1 : 0, p->softcap != 0.0f, p->bias != NULL, p->alibi_slopes != NULL,
             p->key_lengths != NULL, clflash_keylen_diagonal(p), p->varlen ? 1 : 0, with_lse ? 1 : 0);
}

void clflash_forward_defines(const clflash_problem *p, int with_lse, uint32_t splits, uint32_t pack, char *buf,
                             size_t size)
{
    clflash_problem as_built = *p;
    if (splits > 1)
        as_built.out_dtype = CLFLASH_F32; /* the parts are fp32, and every part has its lse */
    clflash_feature_defines(&as_built, with_lse || splits > 1, buf, size);
    const size_t n = strlen(buf);
    snprintf(buf + n, size - n, " -D SPLIT=%d -D PACK=%u -D PAGED=%d", splits > 1, pack, p->block_table != NULL);
    if (p->block_table) {
        const size_t m = strlen(buf);
        snprintf(buf + m, size - m, " -D PAGE_SIZE=%u", p->page_size);
    }
}

cl_int clflash_set_feature_args(cl_kernel k, cl_uint first, const clflash_problem *p, int include_out_scale)
{
    const cl_uint wl = p->window_left, wr = p->window_right;
    const cl_ulong bl[4] = {p->bias_strides.offset, p->bias_strides.batch_stride, p->bias_strides.head_stride,
                            p->bias_strides.seq_stride};
    const cl_int offset = p->diagonal_offset;
    const clflash_arg head[] = {{sizeof(cl_uint), &wl},
                                {sizeof(cl_uint), &wr},
                                {sizeof(cl_int), &offset},
                                {sizeof(float), &p->softcap},
                                {sizeof(float), &p->v_scale}};
    const size_t n_head = include_out_scale ? 5 : 4;
    const clflash_arg tail[] = {{sizeof(cl_mem), p->bias ? &p->bias : NULL},
                                {sizeof(cl_ulong), &bl[0]},
                                {sizeof(cl_ulong), &bl[1]},
                                {sizeof(cl_ulong), &bl[2]},
                                {sizeof(cl_ulong), &bl[3]},
                                {sizeof(cl_mem), p->alibi_slopes ? &p->alibi_slopes : NULL},
                                {sizeof(cl_mem), p->key_lengths ? &p->key_lengths : NULL}};
    cl_int err = clflash_set_args(k, first, head, n_head);
    if (err == CL_SUCCESS)
        err = clflash_set_args(k, first + (cl_uint)n_head, tail, sizeof tail / sizeof tail[0]);
    return err;
}

cl_int clflash_set_varlen_args(cl_kernel k, cl_uint first, const clflash_problem *p)
{
    const cl_uint total_q = p->total_q, total_k = p->total_k;
    const clflash_arg args[] = {{sizeof(cl_mem), p->cu_seqlens_q ? &p->cu_seqlens_q : NULL},
                                {sizeof(cl_mem), p->cu_seqlens_k ? &p->cu_seqlens_k : NULL},
                                {sizeof(cl_uint), &total_q},
                                {sizeof(cl_uint), &total_k}};
    return clflash_set_args(k, first, args, sizeof args / sizeof args[0]);
}
