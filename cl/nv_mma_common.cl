/*
 * nv_mma_common.cl - the NVIDIA tensor-core building blocks both tensor-core kernels use, as inline
 * PTX: mma.sync m16n8k16 with fp32 accumulators, ldmatrix (plain and transposed), cp.async with
 * zero fill, the f16/bf16 pair conversion and the warp shuffle. The host puts this file between
 * common.cl and nv_mma_forward.cl or nv_mma_backward.cl; no other device sees it.
 *
 * Why a file of its own: the forward and the backward kernel stage rows and multiply fragments the
 * same way, and the fragment layouts (PTX ISA, checked on the H200: see DEVICE.md) are written down
 * once, here.
 *
 * Defines it needs, all from the host: HEAD_DIM (a multiple of 16), WARPS, BLOCK (keys per streamed
 * tile), and CLFLASH_DTYPE_F16 or CLFLASH_DTYPE_BF16; BIAS (common.cl's feature switch) and
 * BIAS_PAIRS for bias_pair; D_REAL, the tensors' own head_dim, at most HEAD_DIM (HEAD_DIM itself
 * unless the head dim is padded): local rows hold HEAD_DIM columns, those at or past D_REAL zeros,
 * so that they add nothing to a product; NV_ALIGNED, 1 where every row of Q, K, V and O starts on
 * 16 bytes and D_REAL is a multiple of 8, else 0: rows are then copied element by element with
 * ordinary loads instead of cp.async's 16-byte pieces.
 */

#if !defined(D_REAL) || !defined(NV_ALIGNED) || !defined(BIAS_PAIRS)
#error "D_REAL, NV_ALIGNED and BIAS_PAIRS are set by the host (lib/nv_mma_forward_plan.c, nv_mma_backward_plan.c, bias_grad.c)"
#endif
#if D_REAL > HEAD_DIM || (NV_ALIGNED && D_REAL % 8 != 0)
#error "D_REAL must be at most HEAD_DIM, and a multiple of 8 with NV_ALIGNED"
#endif

#define THREADS (32 * WARPS)
#define ROW_STRIDE (HEAD_DIM + 8)     /* halves per local row: 16 bytes of padding */
#define CHUNKS (HEAD_DIM / 8)         /* 16-byte pieces of one row */
#define K_STEPS (HEAD_DIM / 16)       /* k16 steps of a product over head_dim */
#define D_TILES (HEAD_DIM / 8)        /* n8 tiles of a row block over head_dim */
#if defined(CLFLASH_DTYPE_F16)
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define CVT_PAIR "cvt.rn.f16x2.f32"
#elif defined(CLFLASH_DTYPE_BF16)
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define CVT_PAIR "cvt.rn.bf16x2.f32"
#else
#error "the tensor-core kernels need CLFLASH_DTYPE_F16 or CLFLASH_DTYPE_BF16"
#endif

/* The order of a launch's query blocks, n_q of them for each of n_hb (head, batch) entries: block
 * lin (the launch's linear work-group index) takes query block *qi of entry *hb. The blocks of one
 * chunk of `chunk` query blocks (0, or more than n_q: all of them) run over every entry, the query
 * block varying fastest, before the next chunk's; blocks close in lin run side by side and share
 * what they read in the L2 cache (an entry's K and V, a bias broadcast over the entries). A kernel
 * with the causal mask counts *qi from the last rows back, so that the blocks that see the most
 * keys come first. */
static inline void chunked_block_order(uint lin, uint n_q, uint n_hb, uint chunk, uint *qi, uint *hb)
{
    const uint c = chunk == 0 || chunk > n_q ? n_q : chunk;
    const uint first = lin / (c * n_hb) * c, rem = lin % (c * n_hb); /* the chunk's first query block */
    const uint size = min(c, n_q - first);
    *qi = first + rem % size;
    *hb = rem / size;
}

/* The shared-window address of a local pointer, as PTX's .shared instructions take it. */
static inline uint shared_addr(__local const ushort *p)
{
    return (uint)(size_t)p;
}

/* NV_CP_L2_PREFETCH: the bytes L2 fetches around each 16-byte copy (PTX's .L2::128B prefetch size;
 * 0 for none, or 64, 128, 256; a build option overrides it). On the H200 (2026-12-05, f16,
 * d = 128; docs/performance/h200.md) 128 read K and V 1.4% to 3.3% faster than none when decoding
 * and 256 3% to 5% slower; the forward and backward at n = 4096 moved by less than 1%. */
#ifndef NV_CP_L2_PREFETCH
#define NV_CP_L2_PREFETCH 128
#endif
#if NV_CP_L2_PREFETCH == 0
#define CP_PREFETCH ""
#elif NV_CP_L2_PREFETCH == 64
#define CP_PREFETCH ".L2::64B"
#elif NV_CP_L2_PREFETCH == 128
#define CP_PREFETCH ".L2::128B"
#elif NV_CP_L2_PREFETCH == 256
#define CP_PREFETCH ".L2::256B"
#else
#error "NV_CP_L2_PREFETCH must be 0, 64, 128 or 256"
#endif

/* Copies 16 bytes from global to local without passing through registers; `bytes` < 16 fills the
 * rest with zeros (0 reads nothing). */
static inline void copy16_async(__local ushort *dst, __global const ushort *src, uint bytes)
{
    __asm__ __volatile__("cp.async.cg.shared.global" CP_PREFETCH " [%0], [%1], 16, %2;\n"
                         :
                         : "r"(shared_addr(dst)), "l"((ulong)src), "r"(bytes)
                         : "memory");
}

static inline void async_commit(void)
{
    __asm__ __volatile__("cp.async.commit_group;\n" ::: "memory");
}

/* Waits for every copy this work-item issued; a barrier then makes all of them visible. */
static inline void async_wait_all(void)
{
    __asm__ __volatile__("cp.async.wait_group 0;\n" ::: "memory");
}

/* Waits until at most `pending` (a constant) of this work-item's most recent commit groups are
 * still in flight: the older ones are complete. */
#define async_wait_pending(pending) __asm__ __volatile__("cp.async.wait_group %0;\n" ::"n"(pending) : "memory")

/* Four 8x8 matrices of 16-bit elements; lanes 8j..8j+7 give the row addresses of matrix j, and
 * word j of lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of matrix j. */
static inline uint4 load_matrix_x4(__local const ushort *row)
{
    uint a, b, c, d;
    __asm__ __volatile__("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                         : "r"(shared_addr(row)));
    return (uint4)(a, b, c, d);
}

/* The same, transposed: word j of lane l receives rows 2 (l % 4) and 2 (l % 4) + 1 of column
 * l / 4 of matrix j. */
static inline uint4 load_matrix_x4_trans(__local const ushort *row)
{
    uint a, b, c, d;
    __asm__ __volatile__("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                         : "r"(shared_addr(row)));
    return (uint4)(a, b, c, d);
}

/* acc += A (16x16, row) * B (16x8, col), one warp. A fragment: words 0 and 2 hold row g, 1 and 3
 * row g + 8; words 0 and 1 columns 2t, 2t + 1, words 2 and 3 the same + 8 (g = lane / 4,
 * t = lane % 4). B: k = 2t, 2t + 1 in word 0, + 8 in word 1, column g. acc: rows g (x, y) and
 * g + 8 (z, w), columns 2t and 2t + 1. */
static inline float4 mma_16x8x16(uint4 a, uint b0, uint b1, float4 acc)
{
    float d0 = acc.x, d1 = acc.y, d2 = acc.z, d3 = acc.w;
    __asm__ __volatile__(MMA_OP " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                         : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
    return (float4)(d0, d1, d2, d3);
}

/* Two floats as one word of the storage type, `lo` in the low half (rounded to nearest even). */
static inline uint pack_pair(float lo, float hi)
{
    uint r;
    __asm__(CVT_PAIR " %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x by the special-function unit, results below 2^-126 flushed to 0 (what CUDA's exp2f gives
 * with fast math). OpenCL's native_exp2 becomes the non-flushing ex2.approx.f32, which sm_90 wraps
 * in extra instructions for subnormals: 7% slower forward on the H200 (f16, d = 128, n = 4096). */
static inline float exp2_ftz(float x)
{
    float r;
    __asm__("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

/* A softcapped score in log2 units: cap2 * tanh(s2 / cap2) for the score s2 and cap cap2 (both
 * in log2 units), given y = 2 log2(e) s2 / cap2, as cap2 - 2 cap2 / (1 + 2^y) (tanh(x) =
 * 1 - 2 / (1 + e^(2x))). From exp2_ftz and the reciprocal it is within a few units of 2^-24 * cap2
 * of the exact value (an absolute error, which is what the softmax sees), and +-cap2 at the ends,
 * where 2^y overflows to infinity or flushes to 0. PTX's tanh.approx.f32 would save an
 * instruction but is good only to 2^-11 relative: at a cap of 50 it moves a score by up to 0.02. */
static inline float softcap_log2(float y, float cap2)
{
    return fma(native_recip(1.0f + exp2_ftz(y)), -2.0f * cap2, cap2);
}

#if BIAS
/* The bias of keys j and j + 1 of one row (row[j], row[j + 1]); keys past seq_k (a last tile's
 * padding, masked later) read key seq_k - 1. With BIAS_PAIRS (the host found the bias offset and
 * strides even, so row + j is 8-byte aligned for even j) one 8-byte load. */
static inline float2 bias_pair(__global const float *row, uint j, uint seq_k)
{
#if BIAS_PAIRS
    if (j + 1 < seq_k)
        return *(__global const float2 *)(row + j);
#endif
    return (float2)(row[min(j, seq_k - 1)], row[min(j + 1, seq_k - 1)]);
}

/* bias_pair where the caller knows that j + 1 < seq_k (its whole tile is inside the row): no
 * clamps, so that a tile's loads are one address and constant offsets. In nv_wgmma_forward on an
 * H100 (f16, d = 128, n = 4096) that made a [n][n] bias broadcast over batch and heads 1.2x faster
 * than clamping every pair. */
static inline float2 bias_pair_inside(__global const float *row, uint j)
{
#if BIAS_PAIRS
    return *(__global const float2 *)(row + j);
#else
    return (float2)(row[j], row[j + 1]);
#endif
}
#endif

/* 1 in every lane if `pred` is nonzero in any lane of the warp. */
static inline int warp_any(int pred)
{
    int r;
    __asm__ __volatile__("{\n .reg .pred p;\n setp.ne.s32 p, %1, 0;\n vote.sync.any.pred p, p, 0xffffffff;\n"
                         " selp.s32 %0, 1, 0, p;\n}\n"
                         : "=r"(r)
                         : "r"(pred));
    return r;
}

/* x combined with the value of lane (lane ^ mask) of the same warp. */
static inline float lane_xor(float x, uint mask)
{
    float r;
    __asm__ __volatile__("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\n" : "=f"(r) : "f"(x), "r"(mask));
    return r;
}

#if !NV_ALIGNED
/* Copies element (r, c) of `rows` rows (from `row0`) to dst[r * ROW_STRIDE + c] for every
 * c < HEAD_DIM: element c of row row0 + r where c < D_REAL and row0 + r < limit, else 0. Row x
 * starts at src[base + (x % pack) * head_stride + (x / pack) * seq_stride]: pack is 1 for rows of
 * one head, the forward's PACK for its packed query heads (common.cl). Ordinary loads and local
 * stores, done when it returns (a barrier then makes them visible): 16 loads a work-item, each of a
 * valid element (base itself for padding), go out before their stores. */
#define BY_ELEMENT_BATCH 16
static inline void copy_rows_by_element(__local ushort *dst, __global const ushort *src, ulong base, ulong head_stride,
                                 ulong seq_stride, uint row0, uint rows, uint limit, uint pack)
{
    const uint n = rows * HEAD_DIM;
    for (uint e0 = 0; e0 < n; e0 += BY_ELEMENT_BATCH * THREADS) {
        ushort x[BY_ELEMENT_BATCH];
#pragma unroll
        for (uint u = 0; u < BY_ELEMENT_BATCH; u++) {
            const uint e = e0 + u * THREADS + get_local_id(0), r = e / HEAD_DIM, c = e % HEAD_DIM;
            const uint row = row0 + r;
            const int in = e < n && c < D_REAL && row < limit;
            const ulong at = (ulong)(row % pack) * head_stride + (ulong)(row / pack) * seq_stride;
            x[u] = src[in ? base + at + c : base];
        }
#pragma unroll
        for (uint u = 0; u < BY_ELEMENT_BATCH; u++) {
            const uint e = e0 + u * THREADS + get_local_id(0), r = e / HEAD_DIM, c = e % HEAD_DIM;
            if (e < n)
                dst[r * ROW_STRIDE + c] = c < D_REAL && row0 + r < limit ? x[u] : (ushort)0;
        }
    }
}
#endif

/* Issues the copies of `rows` rows (from `row0`) of one (batch, head) of a tensor into `dst`; rows
 * at or past `limit` become zeros (and columns at or past D_REAL). Every work-item takes every
 * THREADS-th 16-byte chunk (without NV_ALIGNED, every THREADS-th element, copied at once). */
static inline void stage_rows(__local ushort *dst, __global const ushort *src, ulong base, ulong seq_stride, uint row0,
                       uint rows, uint limit)
{
#if NV_ALIGNED
    for (uint c = get_local_id(0); c < rows * CHUNKS; c += THREADS) {
        const uint r = c / CHUNKS, piece = c % CHUNKS;
        const int inside = row0 + r < limit && piece * 8 < D_REAL;
        const ulong at = base + (inside ? (ulong)(row0 + r) * seq_stride + piece * 8 : 0);
        copy16_async(dst + r * ROW_STRIDE + piece * 8, src + at, inside ? 16u : 0u);
    }
#else
    copy_rows_by_element(dst, src, base, 0, seq_stride, row0, rows, limit, 1);
#endif
}

/* Streaming K and V tiles of BLOCK keys into local memory, tile after tile (the forward, and the
 * backward's query groups; the backward's key groups stream Q and dO tiles the same way). Where THREADS is a multiple of CHUNKS and a tile's pieces a multiple
 * of THREADS (with 4 warps: head_dim 16, 32, 64, 128 and 256), each work-item copies the same
 * 16-byte piece of rows r, r + ROW_STEP, ... of every tile from pointers it advances by one tile
 * per call: a few additions per copy instead of stage_rows' division and 64-bit multiply (the
 * forward ran 1.05x to 1.15x faster on the H200). Elsewhere stage_rows does it. Needs BLOCK. */
#if NV_ALIGNED && THREADS % CHUNKS == 0 && (BLOCK * CHUNKS) % THREADS == 0
#define STREAM_BY_POINTERS 1
#define ROW_STEP (THREADS / CHUNKS)
#endif

typedef struct {
#ifdef STREAM_BY_POINTERS
    __global const ushort *k, *v;         /* this work-item's first row of the next tile */
    __global const ushort *k_any, *v_any; /* a valid address for the copies that read nothing */
    ulong k_step, v_step;                 /* ROW_STEP rows */
    uint local_piece;                     /* this work-item's first piece within a tile */
    long rows_left;                       /* rows of the tensor from this work-item's next row */
#else
    __global const ushort *k, *v;
    ulong k_base, v_base, k_ss, v_ss;
    uint key0, seq_k;
#endif
} kv_stream;

/* A stream whose first tile starts at row `first` (the backward's key groups stream Q and dO). */
static inline kv_stream kv_stream_start_at(__global const ushort *k, ulong k_base, ulong k_ss, __global const ushort *v,
                                    ulong v_base, ulong v_ss, uint seq_k, uint first)
{
    kv_stream st;
#ifdef STREAM_BY_POINTERS
    const uint row = get_local_id(0) / CHUNKS, piece = get_local_id(0) % CHUNKS;
    st.k = k + k_base + (ulong)(first + row) * k_ss + piece * 8;
    st.v = v + v_base + (ulong)(first + row) * v_ss + piece * 8;
    st.k_any = k + k_base;
    st.v_any = v + v_base;
    st.k_step = (ulong)ROW_STEP * k_ss;
    st.v_step = (ulong)ROW_STEP * v_ss;
    st.local_piece = row * ROW_STRIDE + piece * 8;
    /* a piece at or past D_REAL (padding) never reads: its rows are never "left" */
    st.rows_left = piece * 8 < D_REAL ? (long)seq_k - (long)first - (long)row : LONG_MIN / 2;
#else
    st.k = k;
    st.v = v;
    st.k_base = k_base;
    st.v_base = v_base;
    st.k_ss = k_ss;
    st.v_ss = v_ss;
    st.key0 = first;
    st.seq_k = seq_k;
#endif
    return st;
}

static inline kv_stream kv_stream_start(__global const ushort *k, ulong k_base, ulong k_ss, __global const ushort *v,
                                 ulong v_base, ulong v_ss, uint seq_k)
{
    return kv_stream_start_at(k, k_base, k_ss, v, v_base, v_ss, seq_k, 0);
}

/* Issues the copies of the next K tile into dst and its V tile into dst + BLOCK rows; keys at or
 * past seq_k become zeros. */
static inline void kv_stream_next(kv_stream *st, __local ushort *dst)
{
#ifdef STREAM_BY_POINTERS
    dst += st->local_piece;
#pragma unroll
    for (uint i = 0; i < BLOCK / ROW_STEP; i++) {
        const int in = (long)(i * ROW_STEP) < st->rows_left;
        copy16_async(dst + i * ROW_STEP * ROW_STRIDE, in ? st->k + i * st->k_step : st->k_any, in ? 16u : 0u);
        copy16_async(dst + (BLOCK + i * ROW_STEP) * ROW_STRIDE, in ? st->v + i * st->v_step : st->v_any,
                     in ? 16u : 0u);
    }
    st->k += (BLOCK / ROW_STEP) * st->k_step;
    st->v += (BLOCK / ROW_STEP) * st->v_step;
    st->rows_left -= BLOCK;
#else
    stage_rows(dst, st->k, st->k_base, st->k_ss, st->key0, BLOCK, st->seq_k);
    stage_rows(dst + BLOCK * ROW_STRIDE, st->v, st->v_base, st->v_ss, st->key0, BLOCK, st->seq_k);
    st->key0 += BLOCK;
#endif
}
