/*
 * nv_tma_probe.cl - whether Hopper's tensor memory accelerator (TMA) runs from OpenCL through the
 * library's sm_90a PTX binary path, with a tensor map the kernel builds itself (test_sm90a's tma
 * case; not part of the library).
 *
 * Why: cp.async.bulk.tensor copies a whole 2-D box of global memory into shared memory, swizzled
 * the way wgmma reads it, with one instruction and an mbarrier, which is how FlashAttention-3 and
 * cuDNN feed Hopper's tensor cores. It needs a tensor map, a 128-byte object that CUDA's driver
 * API encodes on the host and OpenCL has no call for. PTX's tensormap.replace (sm_90a) sets every
 * field of one in shared memory, so a kernel can build it from zeros, copy it to global memory
 * with tensormap.cp_fenceproxy and acquire it with fence.proxy.tensormap before its first copy.
 * If that works here, nv_wgmma_forward's producer can stream K and V tiles through TMA.
 *
 * One warp: zeroes a map in local memory, sets it to a rank-2 tensor of 16-bit elements (width x
 * height, rows row_bytes >> stride_shift apart as the field is given: PTX ISA 8.5 and earlier
 * needed the stride in 16-byte units, a ptxas workaround other compilers apply), a box of
 * TMA_BOX_W x TMA_BOX_H elements, the 128-byte swizzle and zero fill; copies it to map[0..15];
 * loads the box at element (x0, y0) into a 1024-byte aligned tile; and writes the tile's bytes, as
 * they lie in local memory, to out. The host knows where the 128-byte swizzle puts each element
 * (16-byte chunk c of row r at chunk c ^ (r % 8)) and which elements lie outside the tensor (zero).
 *
 * The sm_90a instructions are PTX comments behind the marker "// sm90a: ", as in
 * cl/nv_sm90a_probe.cl.
 */

#define TMA_BOX_W 64 /* 16-bit elements: one 128-byte row, the swizzle's width */
#define TMA_BOX_H 8  /* rows: one 1024-byte swizzle atom */

/* The address of p in the shared window, as PTX's shared-space operands take it. */
static inline uint tma_shared_addr(__local const void *p)
{
    return (uint)(size_t)p;
}

__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void nv_tma_probe(__global const ushort *src, uint width,
                                                                              uint height, ulong row_bytes,
                                                                              uint stride_shift, __global ulong *map,
                                                                              int x0, int y0, __global ushort *out)
{
    __local uint map_words[32] __attribute__((aligned(128)));
    __local ushort tile[TMA_BOX_W * TMA_BOX_H] __attribute__((aligned(1024)));
    __local ulong bar[1] __attribute__((aligned(8)));
    const uint lid = get_local_id(0);
    const uint m = tma_shared_addr(map_words), t = tma_shared_addr(tile), b = tma_shared_addr(bar);

    map_words[lid] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        const ulong stride = row_bytes >> stride_shift;
        /* rank 2 is written as 1 (the field counts from zero); elemtype 1 = .u16, interleave 0 =
         * none, swizzle 3 = 128 bytes, fill 0 = zeros (PTX ISA, "Tensormap new_val validity") */
        __asm__ __volatile__("// sm90a: tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
                             "// sm90a: tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n"
                             "// sm90a: tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, %2;\n"
                             "// sm90a: tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %3;\n"
                             "// sm90a: tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %4;\n"
                             "// sm90a: tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %5;\n"
                             "// sm90a: tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %6;\n"
                             "// sm90a: tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, 1;\n"
                             "// sm90a: tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, 1;\n"
                             "// sm90a: tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], 1;\n"
                             "// sm90a: tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 0;\n"
                             "// sm90a: tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n"
                             "// sm90a: tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 0;\n"
                             :
                             : "r"(m), "l"((ulong)(size_t)src), "r"((uint)TMA_BOX_W), "r"((uint)TMA_BOX_H),
                               "r"(width), "r"(height), "l"(stride)
                             : "memory");
        __asm__ __volatile__("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b) : "memory");
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the whole warp: the map to global memory, released to the tensormap proxy, then acquired */
    const ulong g = (ulong)(size_t)map;
    __asm__ __volatile__("// sm90a: tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu"
                         ".sync.aligned [%0], [%1], 128;\n"
                         "// sm90a: fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n"
                         "fence.proxy.async.shared::cta;\n" ::"l"(g),
                         "r"(m)
                         : "memory");
    if (lid == 0)
        __asm__ __volatile__("// sm90a: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                             "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                             " [%2], [%3, {%4, %5}], [%0];\n" ::"r"(b),
                             "r"((uint)(TMA_BOX_W * TMA_BOX_H * 2)), "r"(t), "l"(g), "r"(x0), "r"(y0)
                             : "memory");
    /* every work-item waits for phase 0 of the mbarrier: the box is in */
    uint done = 0;
    while (!done)
        __asm__ __volatile__("{\n"
                             ".reg .pred p;\n"
                             "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                             "selp.u32 %0, 1, 0, p;\n"
                             "}\n"
                             : "=r"(done)
                             : "r"(b)
                             : "memory");
    for (uint i = lid; i < TMA_BOX_W * TMA_BOX_H; i += 32)
        out[i] = tile[i];
}
