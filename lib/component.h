/*
 * component.h - what libclflash offers its own optional components (clflash_mpi, lib/mpi/) and the
 * test drivers beyond clflash.h: small device operations those components need and the public API
 * has no call for, run through the library's program cache like every other kernel.
 *
 * Why not clflash.h: these are building blocks of one component's algorithm, not a promise to
 * applications. The functions are exported from the shared library (a component is a library of
 * its own and links it), but this header is not installed and they carry no compatibility promise
 * beyond the release they came with: a component checks at run time that it runs with the
 * clflash release it was built with (clflash_component_check_version).
 */
#ifndef CLFLASH_COMPONENT_H
#define CLFLASH_COMPONENT_H

#include "clflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CLFLASH_SUCCESS when the library linked at run time is the release this header came with, else
 * CLFLASH_ERROR_UNSUPPORTED (and a detail naming both versions). */
static inline clflash_status clflash_component_check_version(void)
{
    return clflash_version_number() == CLFLASH_VERSION_NUMBER ? CLFLASH_SUCCESS : CLFLASH_ERROR_UNSUPPORTED;
}

/* ---- component_slots.c: state a component keeps as long as the context ---------------------------
 * A component may attach one piece of data to a context under a key of its own (the address of a
 * static object of the component): clflash_context_free calls its release, once, after the
 * context's queue has finished and before the queue and the OpenCL context are released, so
 * release may still enqueue on clflash_context_queue(c) and wait. Up to 4 components per context.
 * The component guards its data itself (the calls here only attach and find it, under the
 * context's lock). */

/* The data attached under key, or NULL (none, or c NULL or not live). */
CLFLASH_API void *clflash_component_data(clflash_context *c, const void *key);

/* Attaches data under key: CLFLASH_SUCCESS; if the key holds data already, that data stays and
 * *existing (when not NULL) receives it, status CLFLASH_SUCCESS too (the caller then releases its
 * own); CLFLASH_ERROR_INVALID_ARGUMENT for a NULL context, key, data or release, or when every
 * slot is taken. */
CLFLASH_API clflash_status clflash_component_attach(clflash_context *c, const void *key, void *data,
                                                    void (*release)(void *data), void **existing);

/* ---- grad_accumulate.c: fp32 sums of gradient partials (cl/grad_accumulate.cl) ------------------
 * Tensors named compact are [nbh][rows][head_dim] with nothing between elements (nbh the product of
 * the leading dimensions: batch * heads). A caller's tensor is [batch][heads][rows][head_dim] as
 * clflash_layout says (zero strides: the contiguous defaults). Each call enqueues one kernel on
 * `queue` (not NULL; a queue of c's context and device) after the queue's earlier work, with no
 * wait list and no event: in-order queues order them. Buffers are not checked for size here (the
 * component checks its callers' buffers and sizes its own). Statuses: CLFLASH_SUCCESS,
 * CLFLASH_ERROR_INVALID_ARGUMENT (NULL context, queue or buffer), CLFLASH_ERROR_INVALID_DTYPE (not
 * F32, F16 or BF16), CLFLASH_ERROR_INVALID_SHAPE (a dimension 0, rows past the tensor),
 * CLFLASH_ERROR_INVALID_LAYOUT (a default stride that overflows), a build
 * failure, or OpenCL's error; clflash_last_error_detail says more. */

/* dst (compact, dtype, starting at element dst_off) = src (dtype, layout l). */
CLFLASH_API clflash_status clflash_grad_gather(clflash_context *c, cl_command_queue queue, clflash_dtype dtype,
                                               cl_mem dst, uint64_t dst_off, cl_mem src, const clflash_layout *l,
                                               uint32_t batch, uint32_t heads, uint32_t rows, uint32_t head_dim);

/* acc (compact fp32) += part (compact, part_dtype; F32 adds one accumulator into another) over rows
 * row0 .. row0 + len - 1 of both; each element is one fp32 addition, so the bits depend only on
 * the values and the order of the calls. */
CLFLASH_API clflash_status clflash_grad_accumulate(clflash_context *c, cl_command_queue queue, clflash_dtype part_dtype,
                                                   cl_mem acc, cl_mem part, uint64_t nbh, uint32_t rows, uint32_t row0,
                                                   uint32_t len, uint32_t head_dim);

/* dst (dtype, layout l; its gaps untouched) = src (compact fp32 [batch * heads][rows][head_dim]
 * starting at element src_off), rounded to nearest even. */
CLFLASH_API clflash_status clflash_grad_scatter(clflash_context *c, cl_command_queue queue, clflash_dtype dtype,
                                                cl_mem dst, const clflash_layout *l, uint32_t batch, uint32_t heads,
                                                uint32_t rows, uint32_t head_dim, cl_mem src, uint64_t src_off);

/* dst (fp32, layout l; its gaps untouched) = 0 over [batch][heads][rows][head_dim]. */
CLFLASH_API clflash_status clflash_grad_zero(clflash_context *c, cl_command_queue queue, cl_mem dst,
                                             const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t rows,
                                             uint32_t head_dim);

#ifdef __cplusplus
}
#endif

#endif /* CLFLASH_COMPONENT_H */
