/*
 * nv_sm90a_probe.cl - one warpgroup (128 work-items) multiplies a 64 x 16 f16 matrix A, held in
 * registers, by a 16 x 8 matrix B of ones in local memory with Hopper's wgmma, and writes its part
 * of the fp32 product. lib/sm90a.c runs it once per context to learn whether the device and its
 * driver run kernels built through the sm_90a PTX binary path, and run them right, before any
 * kernel that needs the path is chosen.
 *
 * Why a kernel of its own: every step of that path can fail quietly on a driver that behaves
 * otherwise than NVIDIA's 580 series (a binary that is not PTX, a target other than sm_90, a binary
 * refused at build time or computing something else); a product whose every value is known settles
 * all of them at once, in well under a millisecond.
 *
 * The sm_90a instructions are written as PTX comments behind the marker "// sm90a: " (lib/sm90a.c
 * explains the path): NVIDIA's OpenCL compiler, which targets sm_90 where they are refused, copies
 * them into the PTX with their operands (%0, %1, ...) replaced by the registers it chose, and the
 * library then removes the markers and retargets the PTX to sm_90a.
 *
 * The values: A(i, k) = (i + 3 k) % 7 - 3, so that each row of the product, the sum of its row of A
 * in every column, differs from its neighbours' and every value is exact in f16 and fp32. Warp w of
 * the warpgroup holds rows 16 w .. 16 w + 15 of A as mma.m16n8k16 holds its A fragment (the PTX
 * ISA's register fragment of A for wgmma at m64 k16): lane (g = lane / 4, t = lane % 4) has rows g
 * and g + 8, columns 2t, 2t + 1, 2t + 8 and 2t + 9. Its four results are columns 2t and 2t + 1 of
 * rows 16 w + g and 16 w + g + 8, stored at out[4 * id .. 4 * id + 3]. B is given by a shared
 * memory matrix descriptor without swizzling; with all ones its layout does not change the product.
 */

#define PROBE_B_HALVES 2048 /* 4 KiB of ones: every address the descriptor can reach */

static inline ushort probe_a_half(uint i, uint k)
{
    /* (i + 3k) % 7 - 3, in -3 .. 3, as its f16 bit pattern */
    const int v = (int)((i + 3 * k) % 7) - 3, mag = v < 0 ? -v : v;
    const ushort bits = mag == 0 ? 0x0000 : mag == 1 ? 0x3c00 : mag == 2 ? 0x4000 : 0x4200;
    return v < 0 ? (ushort)(bits | 0x8000u) : bits;
}

static inline uint probe_a_pair(uint i, uint k)
{
    return (uint)probe_a_half(i, k) | ((uint)probe_a_half(i, k + 1) << 16);
}

__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void nv_sm90a_probe(__global float *out)
{
    __local ushort b_tile[PROBE_B_HALVES] __attribute__((aligned(256)));
    const uint id = get_local_id(0), warp = id / 32, lane = id % 32, g = lane / 4, t = lane % 4;
    for (uint e = id; e < PROBE_B_HALVES; e += 128)
        b_tile[e] = (ushort)0x3c00u; /* 1.0 in f16 */
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the generic proxy's stores, before the async proxy (wgmma) reads them */
    __asm__ __volatile__("fence.proxy.async.shared::cta;\n" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE);

    const uint row = 16 * warp + g;
    const uint a0 = probe_a_pair(row, 2 * t), a1 = probe_a_pair(row + 8, 2 * t);
    const uint a2 = probe_a_pair(row, 2 * t + 8), a3 = probe_a_pair(row + 8, 2 * t + 8);
    /* the descriptor: start address / 16 (bits 0-13), leading byte offset / 16 (16-29), stride byte
     * offset / 16 (32-45), no swizzle (bits 62-63 = 0) */
    const uint at = (uint)(size_t)b_tile;
    const ulong desc = (ulong)((at & 0x3ffffu) >> 4) | ((ulong)(128u >> 4) << 16) | ((ulong)(256u >> 4) << 32);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    const uint accumulate = 0; /* scale-d false: D = A B */
    __asm__ __volatile__("// sm90a: {\n"
                         "// sm90a: .reg .pred acc;\n"
                         "// sm90a: setp.ne.b32 acc, %9, 0;\n"
                         "// sm90a: wgmma.fence.sync.aligned;\n"
                         "// sm90a: wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, "
                         "{%4, %5, %6, %7}, %8, acc, 1, 1, 0;\n"
                         "// sm90a: wgmma.commit_group.sync.aligned;\n"
                         "// sm90a: wgmma.wait_group.sync.aligned 0;\n"
                         "// sm90a: }\n"
                         : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(accumulate)
                         : "memory");
    vstore4((float4)(d0, d1, d2, d3), id, out);
}
