/*
 * grad_accumulate.c - enqueues cl/grad_accumulate.cl's kernels for clflash's components
 * (component.h): a caller's tensor gathered into a compact one, a compact partial added into an
 * fp32 accumulator, an fp32 accumulator scattered into a caller's tensor in its storage type, zeros
 * written into a caller's fp32 tensor.
 *
 * Why here and not in the component: the kernels are built through the library's program cache
 * (once per context and storage type, common.cl's storage helpers prepended, the context's build
 * options applied) like every cl/ file, and kept as cached kernel objects across calls.
 */
#include "component.h"
#include "internal.h"

#include <stdio.h>

#define GRAD_GROUP 64 /* work-items per group; the grid is rounded up to it */

typedef enum { GRAD_GATHER, GRAD_ACCUMULATE, GRAD_SCATTER, GRAD_ZERO } grad_kernel;
static const char *const kernel_names[] = {"grad_gather", "grad_accumulate", "grad_scatter", "grad_zero"};

/* What a kernel is built for; the plan cache's key (the first word keeps it apart from other
 * kernels' keys). */
typedef struct {
    uint32_t magic, which, dtype;
} grad_build;

static clflash_status make_kernel(clflash_context *c, const void *arg, cl_kernel *kernel)
{
    const grad_build *gb = arg;
    char defines[300];
    cl_program prog;
    cl_int err;
    clflash_status st;
    clflash_problem as_built = {0}; /* every feature switch off */
    as_built.dtype = (clflash_dtype)gb->dtype;
    as_built.out_dtype = (clflash_dtype)gb->dtype;
    clflash_feature_defines(&as_built, 0, defines, sizeof defines);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_GRAD_ACCUMULATE, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, kernel_names[gb->which], &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", kernel_names[gb->which]);
    return CLFLASH_SUCCESS;
}

static clflash_status check_common(clflash_context *c, cl_command_queue queue, clflash_dtype t, cl_mem a, cl_mem b,
                                   uint64_t lead, uint32_t rows, uint32_t head_dim)
{
    clflash_status st = clflash_check_context(c);
    if (st != CLFLASH_SUCCESS)
        return st;
    if (queue == NULL || a == NULL || b == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "a queue or buffer is NULL");
    if (t != CLFLASH_F32 && t != CLFLASH_F16 && t != CLFLASH_BF16)
        return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "dtype %d is not F32, F16 or BF16", (int)t);
    if (lead == 0 || rows == 0 || head_dim == 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "a dimension is 0");
    return CLFLASH_SUCCESS;
}

/* Sets the arguments and enqueues n work-items (rounded up to the group) of kernel `which`. */
static clflash_status launch(clflash_context *c, cl_command_queue queue, clflash_dtype t, grad_kernel which,
                             const clflash_arg *args, size_t nargs, uint64_t n)
{
    const grad_build gb = {0x47524144u /* "GRAD" */, (uint32_t)which, (uint32_t)t};
    cl_kernel kernel;
    clflash_plan_entry *entry;
    clflash_status st = clflash_cached_kernel(c, (const uint32_t *)&gb, sizeof gb / sizeof(uint32_t), make_kernel, &gb,
                                              &kernel, &entry);
    if (st != CLFLASH_SUCCESS)
        return st;
    size_t local = GRAD_GROUP, most = 0;
    cl_int err = clGetKernelWorkGroupInfo(kernel, c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most, NULL);
    while (err == CL_SUCCESS && local > 1 && local > most)
        local /= 2;
    const size_t global = (size_t)((n + local - 1) / local * local);
    if (err == CL_SUCCESS)
        err = clflash_set_args(kernel, 0, args, nargs);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL);
    clflash_cached_kernel_done(c, entry, kernel);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "enqueueing %s failed", kernel_names[which]);
    return CLFLASH_SUCCESS;
}

/* The checks of a call on a caller's tensor in layout l (NULL: the contiguous default), and its
 * strides resolved into *r. */
static clflash_status check_laid_out(clflash_context *c, cl_command_queue queue, clflash_dtype t, cl_mem dst, cl_mem src,
                                     const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t rows,
                                     uint32_t head_dim, clflash_strides *r)
{
    clflash_clear_detail();
    const clflash_status st = check_common(c, queue, t, dst, src, (uint64_t)batch * heads, rows, head_dim);
    if (st != CLFLASH_SUCCESS)
        return st;
    const clflash_layout none = {0, 0, 0, 0};
    if (!clflash_resolve_strides(l ? l : &none, heads, rows, head_dim, r))
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "a default stride of the layout overflows");
    return CLFLASH_SUCCESS;
}

/* gather (dst compact from element compact_off, src laid out) or scatter (dst laid out, src compact
 * fp32 from element compact_off): the two kernels take the same arguments */
static clflash_status move(clflash_context *c, cl_command_queue queue, clflash_dtype t, grad_kernel which, cl_mem dst,
                           cl_mem src, uint64_t compact_off, const clflash_layout *l, uint32_t batch, uint32_t heads,
                           uint32_t rows, uint32_t head_dim)
{
    clflash_strides r;
    const clflash_status st = check_laid_out(c, queue, t, dst, src, l, batch, heads, rows, head_dim, &r);
    if (st != CLFLASH_SUCCESS)
        return st;
    const cl_ulong n = (cl_ulong)batch * heads * rows * head_dim, co = compact_off;
    const cl_uint h = heads, rw = rows, d = head_dim;
    const cl_ulong off = r.offset, bs = r.batch_stride, hs = r.head_stride, ss = r.seq_stride;
    const clflash_arg a[] = {{sizeof(cl_mem), &dst}, {sizeof(cl_mem), &src}, {sizeof co, &co}, {sizeof n, &n},
                             {sizeof h, &h},         {sizeof rw, &rw},       {sizeof d, &d},   {sizeof off, &off},
                             {sizeof bs, &bs},       {sizeof hs, &hs},       {sizeof ss, &ss}};
    return launch(c, queue, t, which, a, sizeof a / sizeof a[0], n);
}

clflash_status clflash_grad_gather(clflash_context *c, cl_command_queue queue, clflash_dtype dtype, cl_mem dst,
                                   uint64_t dst_off, cl_mem src, const clflash_layout *l, uint32_t batch,
                                   uint32_t heads, uint32_t rows, uint32_t head_dim)
{
    return move(c, queue, dtype, GRAD_GATHER, dst, src, dst_off, l, batch, heads, rows, head_dim);
}

clflash_status clflash_grad_scatter(clflash_context *c, cl_command_queue queue, clflash_dtype dtype, cl_mem dst,
                                    const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t rows,
                                    uint32_t head_dim, cl_mem src, uint64_t src_off)
{
    return move(c, queue, dtype, GRAD_SCATTER, dst, src, src_off, l, batch, heads, rows, head_dim);
}

clflash_status clflash_grad_accumulate(clflash_context *c, cl_command_queue queue, clflash_dtype part_dtype, cl_mem acc,
                                       cl_mem part, uint64_t nbh, uint32_t rows, uint32_t row0, uint32_t len,
                                       uint32_t head_dim)
{
    clflash_clear_detail();
    clflash_status st = check_common(c, queue, part_dtype, acc, part, nbh, rows, head_dim);
    if (st != CLFLASH_SUCCESS)
        return st;
    if (len == 0 || row0 > rows || len > rows - row0)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%u rows from row %u are not within the tensor's %u rows", len,
                            row0, rows);
    const cl_ulong n = (cl_ulong)nbh * len * head_dim;
    const cl_uint r = rows, r0 = row0, l = len, d = head_dim;
    const clflash_arg a[] = {{sizeof(cl_mem), &acc}, {sizeof(cl_mem), &part}, {sizeof n, &n}, {sizeof r, &r},
                             {sizeof r0, &r0},       {sizeof l, &l},          {sizeof d, &d}};
    return launch(c, queue, part_dtype, GRAD_ACCUMULATE, a, sizeof a / sizeof a[0], n);
}

clflash_status clflash_grad_zero(clflash_context *c, cl_command_queue queue, cl_mem dst, const clflash_layout *l,
                                 uint32_t batch, uint32_t heads, uint32_t rows, uint32_t head_dim)
{
    clflash_strides r;
    const clflash_status st = check_laid_out(c, queue, CLFLASH_F32, dst, dst, l, batch, heads, rows, head_dim, &r);
    if (st != CLFLASH_SUCCESS)
        return st;
    const cl_ulong n = (cl_ulong)batch * heads * rows * head_dim;
    const cl_uint h = heads, rw = rows, d = head_dim;
    const cl_ulong off = r.offset, bs = r.batch_stride, hs = r.head_stride, ss = r.seq_stride;
    const clflash_arg a[] = {{sizeof(cl_mem), &dst}, {sizeof n, &n},     {sizeof h, &h},   {sizeof rw, &rw},
                             {sizeof d, &d},         {sizeof off, &off}, {sizeof bs, &bs}, {sizeof hs, &hs},
                             {sizeof ss, &ss}};
    return launch(c, queue, CLFLASH_F32, GRAD_ZERO, a, sizeof a / sizeof a[0], n);
}
