/*
 * ring_backward.cl - the three small kernels of clflash_ring_backward (lib/mpi/ring_backward.c),
 * which clflash's public API has no call for: compacting the caller's Q, adding a gradient partial
 * that clflash_backward wrote in the storage type into an fp32 accumulator, and writing an fp32
 * accumulator into the caller's tensor in the storage type. Embedded into clflash_mpi at build time
 * (cmake/embed_cl.cmake) and built by the component itself with clCreateProgramWithSource, once per
 * call.
 *
 * The host defines RING_F32, RING_F16 or RING_BF16 (the storage type). f16 goes through
 * vload_half / vstore_half_rte, which need no cl_khr_fp16; bf16 rounds to nearest even as
 * cl/common.cl does. One work-item per element, no local memory, no barriers: a 1-D grid of
 * exactly n work-items (the host passes no work-group size).
 *
 * Tensors named "compact" are [heads'][rows][d] with heads' the product of the leading dimensions
 * (batch times heads, or 2 * batch * heads_kv for a K/V shard, V after K).
 */
#if defined(RING_F32)
typedef float store_t;
#define load_s(p, i) ((p)[i])
#define store_s(p, i, x) ((p)[i] = (x))
#elif defined(RING_F16)
typedef half store_t;
#define load_s(p, i) vload_half((i), (p))
#define store_s(p, i, x) vstore_half_rte((x), (i), (p))
#elif defined(RING_BF16)
typedef ushort store_t;
#define load_s(p, i) as_float((uint)(p)[i] << 16)
static inline ushort ring_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
#define store_s(p, i, x) ((p)[i] = ring_to_bf16(x))
#else
#error "ring_backward.cl: the host defines RING_F32, RING_F16 or RING_BF16 (lib/mpi/ring_backward.c)"
#endif

/* Element e of a compact [heads][rows][d] tensor, at its place in a clflash_layout
 * (offset, batch_stride, head_stride, seq_stride) of a [batch][heads][rows][d] tensor. */
static inline ulong ring_at(ulong e, uint heads, uint rows, uint d, ulong off, ulong bs, ulong hs, ulong ss)
{
    const ulong c = e % d, i = e / d % rows, bh = e / d / rows;
    return off + bh / heads * bs + bh % heads * hs + i * ss + c;
}

/* dst (compact) = src (layout off, bs, hs, ss); n = batch * heads * rows * d. Through fp32, which
 * is exact for every storage type (half can only be moved by vload/vstore without cl_khr_fp16). */
__kernel void ring_gather(__global store_t *dst, __global const store_t *src, ulong n, uint heads, uint rows, uint d,
                          ulong off, ulong bs, ulong hs, ulong ss)
{
    const ulong e = get_global_id(0);
    if (e < n)
        store_s(dst, e, load_s(src, ring_at(e, heads, rows, d, off, bs, hs, ss)));
}

/* acc += part over rows row0 .. row0 + len - 1 of compact [nbh][rows][d] tensors (the same
 * geometry for both); n = nbh * len * d. */
__kernel void ring_accumulate(__global float *acc, __global const store_t *part, ulong n, uint rows, uint row0,
                              uint len, uint d)
{
    const ulong e = get_global_id(0);
    if (e >= n)
        return;
    const ulong c = e % d, i = e / d % len, bh = e / d / len;
    const ulong at = (bh * rows + row0 + i) * d + c;
    acc[at] += load_s(part, at);
}

/* dst (layout off, bs, hs, ss, in the storage type) = src (compact fp32, from element src_off);
 * n = batch * heads * rows * d. Gaps of dst are not written. */
__kernel void ring_scatter(__global store_t *dst, __global const float *src, ulong src_off, ulong n, uint heads,
                           uint rows, uint d, ulong off, ulong bs, ulong hs, ulong ss)
{
    const ulong e = get_global_id(0);
    if (e < n)
        store_s(dst, ring_at(e, heads, rows, d, off, bs, hs, ss), src[src_off + e]);
}
