/*
 * common.cl - the storage-type helpers every clflash kernel uses, prepended to each kernel file.
 *
 * Why one file: Q, K, V and O are stored as fp32, fp16 or bf16 but all math is fp32, and the
 * conversions must be identical in every kernel. The host defines exactly one of
 * CLFLASH_DTYPE_F32, CLFLASH_DTYPE_F16, CLFLASH_DTYPE_BF16. fp16 goes through vload_half /
 * vstore_half, which need no cl_khr_fp16 (PoCL and NVIDIA report none); buffers and local tiles hold
 * the raw bits (`bits_t`), so copying a tile into local memory converts nothing.
 */
#if defined(CLFLASH_DTYPE_F32)
#define bits_t float
#define zero_bits 0.0f
#define load_g(p, i) ((p)[i])
#define load_l(p, i) ((p)[i])
#define store_g(p, i, x) ((p)[i] = (x))
#elif defined(CLFLASH_DTYPE_F16)
#define bits_t ushort
#define zero_bits ((ushort)0)
#define load_g(p, i) vload_half((i), (__global const half *)(p))
#define load_l(p, i) vload_half((i), (__local const half *)(p))
#define store_g(p, i, x) vstore_half_rte((x), (i), (__global half *)(p))
#elif defined(CLFLASH_DTYPE_BF16)
#define bits_t ushort
#define zero_bits ((ushort)0)
inline float bf16_to_float(ushort u)
{
    return as_float((uint)u << 16);
}
/* Round to nearest, ties to even; NaN stays a (quiet) NaN. */
inline ushort float_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
#define load_g(p, i) bf16_to_float((p)[i])
#define load_l(p, i) bf16_to_float((p)[i])
#define store_g(p, i, x) ((p)[i] = float_to_bf16(x))
#else
#error "define one of CLFLASH_DTYPE_F32, CLFLASH_DTYPE_F16, CLFLASH_DTYPE_BF16"
#endif

/* Element (b, h, i, c) of a tensor with the given strides (in elements). */
inline ulong tensor_index(ulong offset, ulong batch_stride, ulong head_stride, ulong seq_stride,
                          uint b, uint h, uint i)
{
    return offset + (ulong)b * batch_stride + (ulong)h * head_stride + (ulong)i * seq_stride;
}

/* Causal visibility, bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q. */
inline bool key_visible(uint i, uint j, uint seq_q, uint seq_k)
{
#if CAUSAL
    return (long)j <= (long)i + (long)seq_k - (long)seq_q;
#else
    return true;
#endif
}
