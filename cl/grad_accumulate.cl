/*
 * grad_accumulate.cl - fp32 sums of gradient partials, and the moves between a caller's tensor
 * layout and the compact tensors those sums live in. The host prepends common.cl.
 *
 * Why a file of its own: clflash_backward writes its gradients in the storage type and in the
 * layouts of its inputs, so a caller that adds up the gradients of several calls (clflash_mpi's
 * ring backward: one clflash_backward per query chunk and key shard) needs four things the
 * attention kernels do not do: a caller's tensor copied into a compact one (grad_gather), a
 * compact partial added into an fp32 accumulator over a range of rows (grad_accumulate), and an
 * fp32 accumulator written out into a caller's tensor in the storage type (grad_scatter), and
 * zeros written into a caller's fp32 tensor (grad_zero: the ring's bias gradient for pairs no call
 * meets). Keeping the sums in fp32 avoids rounding the running sum at every step.
 * lib/grad_accumulate.c enqueues them for clflash's components (lib/component.h).
 *
 * Storage: CLFLASH_DTYPE_x (F32, F16 or BF16; load_g / store_g), the type of the tensors that are
 * not fp32 accumulators; built with CLFLASH_DTYPE_F32 grad_accumulate adds one fp32 accumulator
 * into another. One work-item per element, no local memory and no barriers, so no work-item reads
 * what another writes; the grid is rounded up to the work-group size and every kernel returns for
 * the work-items past n. Element e of a compact [nbh][rows][d] tensor is (column e % d, row e / d %
 * rows, leading index e / d / rows); in a caller's [batch][heads][rows][d] tensor the leading index
 * is batch * heads + head.
 */

/* Where element e of a compact [batch * heads][rows][d] tensor is in a tensor laid out as
 * (off, bs, hs, ss). */
static inline ulong grad_at(ulong e, uint heads, uint rows, uint d, ulong off, ulong bs, ulong hs, ulong ss)
{
    const ulong c = e % d, i = e / d % rows, bh = e / d / rows;
    return off + bh / heads * bs + bh % heads * hs + i * ss + c;
}

/* dst (compact, from element dst_off) = src (layout off, bs, hs, ss); n = batch * heads * rows * d.
 * Through fp32, which holds every storage type's values exactly (half moves only by vload/vstore
 * without cl_khr_fp16). */
__kernel void grad_gather(__global bits_t *dst, __global const bits_t *src, ulong dst_off, ulong n, uint heads,
                          uint rows, uint d, ulong off, ulong bs, ulong hs, ulong ss)
{
    const ulong e = get_global_id(0);
    if (e < n)
        store_g(dst, dst_off + e, load_g(src, grad_at(e, heads, rows, d, off, bs, hs, ss)));
}

/* acc += part over rows row0 .. row0 + len - 1 of two compact [nbh][rows][d] tensors of the same
 * geometry; n = nbh * len * d. Each element is one fp32 addition, so the result does not depend
 * on the grid. */
__kernel void grad_accumulate(__global float *acc, __global const bits_t *part, ulong n, uint rows, uint row0, uint len,
                              uint d)
{
    const ulong e = get_global_id(0);
    if (e >= n)
        return;
    const ulong c = e % d, i = e / d % len, bh = e / d / len;
    const ulong at = (bh * rows + row0 + i) * d + c;
    acc[at] += load_g(part, at);
}

/* dst (layout off, bs, hs, ss, storage type) = src (compact fp32, from element src_off); n = batch
 * * heads * rows * d. The gaps of dst are not written. */
__kernel void grad_scatter(__global bits_t *dst, __global const float *src, ulong src_off, ulong n, uint heads,
                           uint rows, uint d, ulong off, ulong bs, ulong hs, ulong ss)
{
    const ulong e = get_global_id(0);
    if (e < n)
        store_g(dst, grad_at(e, heads, rows, d, off, bs, hs, ss), src[src_off + e]);
}

/* dst (layout off, bs, hs, ss, fp32) = 0; n = batch * heads * rows * d. The gaps of dst are not
 * written. */
__kernel void grad_zero(__global float *dst, ulong n, uint heads, uint rows, uint d, ulong off, ulong bs, ulong hs,
                        ulong ss)
{
    const ulong e = get_global_id(0);
    if (e < n)
        dst[grad_at(e, heads, rows, d, off, bs, hs, ss)] = 0.0f;
}
