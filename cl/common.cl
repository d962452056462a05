/*
 * common.cl - the storage-type helpers and masking rules every clflash kernel uses, prepended to
 * each kernel file.
 *
 * Why one file: Q, K, V and O are stored as fp32, fp16, bf16 or int8 but all math is fp32, and the
 * conversions and the visibility rules must be identical in every kernel.
 *
 * Every helper function of the portable kernel files is `static inline`: OpenCL C 1.2 follows C99,
 * where a plain `inline` function is an inline definition only, and a compiler that does not inline
 * a call to it leaves an undefined symbol (tests/kernel_linkage.cmake builds each file at -O0 to
 * check).
 *
 * Input storage (Q, K, V, and any tensor of the same type): the host defines exactly one of
 * CLFLASH_DTYPE_F32, _F16, _BF16, _I8. Buffers and local tiles hold the raw bits (`bits_t`), so
 * copying a tile into local memory converts nothing; load_g / load_l convert one element to float
 * from global / local memory; store_g writes one (not for int8). fp16 goes through vload_half /
 * vstore_half, which need no cl_khr_fp16 (PoCL and NVIDIA report none). int8 loads the stored
 * integer; the host folds the per-tensor scales into the score scale and the output scale.
 *
 * Output storage (O, the naive path's score matrix, dBias): the host defines exactly one of
 * CLFLASH_OUT_F32, _F16 or _BF16. store_o / load_o write and read one element.
 *
 * Nothing here has a default: every switch and parameter a kernel reads comes from the host's -D
 * options (lib/dispatch_util.c for the dtype, output and feature switches; each kernel's planner for
 * the rest), and a build without one stops at an #error naming the file that sets it.
 */
static inline float bf16_to_float(ushort u)
{
    return as_float((uint)u << 16);
}
/* Round to nearest, ties to even; NaN stays a (quiet) NaN. */
static inline ushort float_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

#if defined(CLFLASH_DTYPE_F32)
#define bits_t float
#define zero_bits 0.0f
#define load_g(p, i) ((p)[i])
#define load_l(p, i) ((p)[i])
#define store_g(p, i, x) ((p)[i] = (x))
#define CLFLASH_IN_KIND 1
#elif defined(CLFLASH_DTYPE_F16)
#define bits_t ushort
#define zero_bits ((ushort)0)
#define load_g(p, i) vload_half((i), (__global const half *)(p))
#define load_l(p, i) vload_half((i), (__local const half *)(p))
#define store_g(p, i, x) vstore_half_rte((x), (i), (__global half *)(p))
#define CLFLASH_IN_KIND 2
#elif defined(CLFLASH_DTYPE_BF16)
#define bits_t ushort
#define zero_bits ((ushort)0)
#define load_g(p, i) bf16_to_float((p)[i])
#define load_l(p, i) bf16_to_float((p)[i])
#define store_g(p, i, x) ((p)[i] = float_to_bf16(x))
#define CLFLASH_IN_KIND 3
#elif defined(CLFLASH_DTYPE_I8)
#define bits_t char
#define zero_bits ((char)0)
#define load_g(p, i) ((float)(p)[i])
#define load_l(p, i) ((float)(p)[i])
#define CLFLASH_IN_KIND 4
#else
#error "define one of CLFLASH_DTYPE_F32, CLFLASH_DTYPE_F16, CLFLASH_DTYPE_BF16, CLFLASH_DTYPE_I8"
#endif

#if defined(CLFLASH_OUT_F32) + defined(CLFLASH_OUT_F16) + defined(CLFLASH_OUT_BF16) != 1
#error "define one of CLFLASH_OUT_F32, CLFLASH_OUT_F16, CLFLASH_OUT_BF16 (lib/dispatch_util.c)"
#endif
#if defined(CLFLASH_OUT_F32)
#define out_t float
#define load_o(p, i) ((p)[i])
#define store_o(p, i, x) ((p)[i] = (x))
#elif defined(CLFLASH_OUT_F16)
#define out_t ushort
#define load_o(p, i) vload_half((i), (__global const half *)(p))
#define store_o(p, i, x) vstore_half_rte((x), (i), (__global half *)(p))
#else
#define out_t ushort
#define load_o(p, i) bf16_to_float((p)[i])
#define store_o(p, i, x) ((p)[i] = float_to_bf16(x))
#endif

/* Feature switches (0 or 1), set by the host for every kernel (lib/dispatch_util.c,
 * clflash_feature_defines), those that take no features included; WITH_LSE: 1 where the kernel
 * writes the rows' lse. */
#if !defined(CAUSAL) || !defined(WINDOW) || !defined(SOFTCAP) || !defined(BIAS) || !defined(ALIBI) || \
    !defined(KEYLEN) || !defined(KEYLEN_DIAGONAL) || !defined(VARLEN) || !defined(WITH_LSE)
#error "CAUSAL, WINDOW, SOFTCAP, BIAS, ALIBI, KEYLEN, KEYLEN_DIAGONAL, VARLEN and WITH_LSE are set by the host (lib/dispatch_util.c)"
#endif

/* Element (b, h, i, c) of a tensor with the given strides (in elements). */
static inline ulong tensor_index(ulong offset, ulong batch_stride, ulong head_stride, ulong seq_stride,
                                 uint b, uint h, uint i)
{
    return offset + (ulong)b * batch_stride + (ulong)h * head_stride + (ulong)i * seq_stride;
}

/* ---- variable-length packed batches (clflash.h, "Variable-length batches") ---------------------
 * VARLEN=1: the batch's sequences are packed into tensors of total_q query rows and total_k key
 * rows whose layouts have no batch stride (the host checks it is 0), and batch entry b's rows are
 * cu[b] .. cu[b + 1] - 1 of them (cu: the int32[batch + 1] cumulative lengths). A kernel takes
 * its entry's first row and length from seq_span and then works on the sequence as on an
 * ordinary entry of that many rows, its row 0 being the packed row `first`: since the batch
 * stride is 0, tensor_index(..., b, h, first + i) is packed row first + i. The values come from
 * device memory the host cannot check: each is clamped into [0, total], and the length is
 * max(0, hi - lo) cut to `longest` (the descriptor's seq_q or seq_k, which sized the grid), so
 * first + length <= total whatever they are. VARLEN=0: the first row is 0 and the length
 * `longest`, today's arithmetic exactly; cu and total are not read. */
static inline uint seq_span(__global const int *cu, uint b, uint total, uint longest, uint *first)
{
#if VARLEN
    const int lo = clamp(cu[b], 0, (int)total), hi = clamp(cu[b + 1], 0, (int)total);
    *first = (uint)lo;
    return min((uint)max(hi - lo, 0), longest);
#else
    (void)cu;
    (void)b;
    (void)total;
    *first = 0;
    return longest;
#endif
}

/* The index of row 0 of (batch entry b, query head h) in lse (and in the backward's D, which has
 * lse's layout): [batch][heads_q][seq_q], or with VARLEN [heads_q][total_q] at the sequence's
 * first packed row q_first (FlashAttention's varlen layout). Row i is this plus i. */
static inline ulong lse_row0(uint b, uint h, uint heads_q, uint seq_q, uint total_q, uint q_first)
{
#if VARLEN
    (void)b;
    (void)seq_q;
    return (ulong)h * total_q + q_first;
#else
    (void)total_q;
    (void)q_first;
    return ((ulong)b * heads_q + h) * seq_q;
#endif
}

/* Causal visibility alone: query i sees key j iff j <= i + diag_k - seq_q (diagonal_keys). */
static inline bool key_visible(uint i, uint j, uint seq_q, long diag_k)
{
#if CAUSAL
    return (long)j <= (long)i + diag_k - (long)seq_q;
#else
    return true;
#endif
}

/* Which keys query i sees, as the half-open range [*lo, *hi). Every rule is aligned to the
 * query's diagonal key d = i + diag_k - seq_q, where diag_k is diagonal_keys' (seq_k bottom-right,
 * moved by the descriptor's diagonal_offset):
 *   CAUSAL:  keys j <= d;
 *   WINDOW:  d - window_left <= j <= d + window_right (set by the host through WIN_LEFT and
 *            WIN_RIGHT, runtime arguments, so one build serves every width);
 *   key_len: keys j < key_len (key padding; the host passes seq_k when there is none).
 * The range is empty when hi <= lo; lo is at most key_len (a diagonal moved past the keys must not
 * put it further). Both ends grow with i, which lets a block of queries skip whole key tiles. */
static inline void visible_keys(uint i, uint seq_q, long diag_k, uint key_len, uint win_left, uint win_right,
                                long *lo, long *hi)
{
    const long d = (long)i + diag_k - (long)seq_q;
    long l = 0, h = (long)key_len;
#if CAUSAL
    h = min(h, d + 1);
#endif
#if WINDOW
    l = max(l, d - (long)win_left);
    h = min(h, d + (long)win_right + 1);
#endif
    (void)d;
    (void)win_left;
    (void)win_right;
    *lo = min(l, (long)key_len);
    *hi = h;
}

/* The keys batch entry b has: its key length clamped to [0, seq_k] with KEYLEN, else seq_k. */
static inline uint batch_key_len(__global const int *key_lens, uint b, uint seq_k)
{
#if KEYLEN
    return (uint)clamp(key_lens[b], 0, (int)seq_k);
#else
    (void)key_lens;
    (void)b;
    return seq_k;
#endif
}

/* The key count query rows align their diagonal to, the `diag_k` that visible_keys,
 * block_key_range, key_block_queries and the ALiBi distance take: the buffer's seq_k, or with
 * KEYLEN_DIAGONAL (CLFLASH_ALIGN_TO_KEY_LENGTH) the entry's own key length, plus diag_offset (the
 * descriptor's diagonal_offset, a runtime argument: 0 keeps the bottom-right rule), so that query
 * i's diagonal key is i + key_len - seq_q + diag_offset. Signed: the diagonal may lie before key 0
 * or past the last key. */
static inline long diagonal_keys(uint key_len, uint seq_k, int diag_offset)
{
#if KEYLEN_DIAGONAL
    (void)seq_k;
    return (long)key_len + diag_offset;
#else
    (void)key_len;
    return (long)seq_k + diag_offset;
#endif
}

/* The key tiles a block of query rows q0 .. q0 + rows - 1 (those below seq_q) must visit: keys
 * [*begin, *end), begin a multiple of `tile`. Both ends of visible_keys grow with the query index,
 * so the tiles before the first row's lo and from the last row's hi on are invisible to the whole
 * block: they are skipped, not computed and masked. */
static inline void block_key_range(uint q0, uint rows, uint seq_q, long diag_k, uint key_len, uint win_left,
                                   uint win_right, uint tile, uint *begin, uint *end)
{
    long first_lo, first_hi, last_lo, last_hi;
    visible_keys(q0, seq_q, diag_k, key_len, win_left, win_right, &first_lo, &first_hi);
    visible_keys(min(q0 + rows, seq_q) - 1, seq_q, diag_k, key_len, win_left, win_right, &last_lo, &last_hi);
    *begin = first_lo <= 0 ? 0u : (uint)first_lo / tile * tile;
    *end = last_hi <= (long)*begin ? *begin : (uint)last_hi;
}

/* The queries that can see a key of [k0, k_end) (k0 < k_end): [*q_begin, *q_end), empty when
 * equal; visible_keys inverted over a block of keys. With d = i + diag_k - seq_q, query i sees key
 * j only if j < key_len, j <= d (CAUSAL) and d - win_left <= j <= d + win_right (WINDOW), so the
 * first query is bounded by the block's first key and the last by its last key. For one key
 * (k_end = k0 + 1) the range is exact; for a block it is the union of its keys' ranges. */
static inline void key_block_queries(uint k0, uint k_end, uint seq_q, long diag_k, uint key_len, uint win_left,
                                     uint win_right, uint *q_begin, uint *q_end)
{
    const long shift = diag_k - (long)seq_q;
    long qb = 0, qe = k0 < key_len ? (long)seq_q : 0; /* a block wholly past the key length: none */
#if CAUSAL
    qb = max(qb, (long)k0 - shift);
#endif
#if WINDOW
    qb = max(qb, (long)k0 - shift - (long)win_right);
    qe = min(qe, (long)k_end + (long)win_left - shift);
#endif
    (void)k_end;
    (void)shift;
    (void)win_left;
    (void)win_right;
    qb = min(qb, (long)seq_q);
    *q_begin = (uint)qb;
    *q_end = (uint)max(qb, qe);
}

/* exp2(x), with the results below 2^-126 (the smallest normal float: x < -126) flushed to zero.
 * The CPU paths form their probabilities with it (the portable backward on every path): such a
 * term is at most 2^-126 of its row's largest, far below what the fp32 sums of them resolve, and a
 * subnormal operand costs an x86 core a microcode assist in every multiply that reads it (PoCL, n = 2048, d = 64, f32: non-causal ALiBi,
 * whose far keys fall there, took 2.2x the plain forward; 1.07x with -cl-denorms-are-zero). A NaN
 * stays NaN, -inf gives 0. */
static inline float exp2_normal(float x)
{
    return x < -126.0f ? 0.0f : exp2(x);
}

static inline float8 exp2_normal8(float8 x)
{
    const int8 tiny = x < (float8)(-126.0f);
    /* exp2 of the flushed lanes is not formed at all: some exp2s take a slow path on the way to a
     * subnormal result */
    return select(exp2(select(x, (float8)(-126.0f), tiny)), (float8)(0.0f), tiny);
}

/* tanh on 8 lanes, for the CPU paths' softcap: x P(x^2) / Q(x^2) with P and Q of degree 4, on x
 * clamped to [-9, 9] (where tanh is 1 within 3.1e-8). The coefficients are a least-squares fit of
 * the absolute error on [0, 9]; tools/fit_tanh.py prints them and evaluates the function as here
 * on every seventh float of [0, 13.5]: within 3.4e-7 of tanh (5.7 units of 2^-24), the order of
 * the rounding of the fp32 score that softcap multiplies by it. A NaN stays NaN.
 * Why not 1 - 2 / (1 + e^(2x)): its exp2 is some twenty dependent vector instructions before the
 * division; here P and Q are evaluated side by side, each in three steps (Estrin's scheme), and
 * the CPU kernels' loops over 8 pairs are bound by that chain's latency (PoCL, n = 2048, d = 64,
 * f32, softcap against the plain call: forward 1.12 -> 1.08, backward 1.13 -> 1.10-1.11; with no
 * tanh at all the same paths cost 1.01 and 1.02). */
static inline float8 tanh8(float8 x)
{
    const float8 c = clamp(x, -9.0f, 9.0f), z = c * c;
    const float8 z2 = z * z;
    /* every operand a float8: OpenCL C's fma takes no scalar beside a vector */
    const float8 p = fma(fma((float8)(1.3184563e-08f), z2, fma((float8)(2.0472085e-05f), z, (float8)(3.4865979e-03f))),
                         z2, fma((float8)(1.3373211e-01f), z, (float8)(9.9999988e-01f)));
    const float8 q = fma(fma((float8)(7.7028056e-07f), z2, fma((float8)(3.2714114e-04f), z, (float8)(2.5842041e-02f))),
                         z2, fma((float8)(4.6706507e-01f), z, (float8)(1.0f)));
    return select(c * p / q, x, isnan(x));
}

/* The score of (query i, key j) after the optional transforms, in natural-log units (softcap
 * cap * tanh(s / cap), then the additive bias, then ALiBi -slope * |d - j|), and in *slope its
 * derivative with respect to s (the forward's transform_score is this without it, so that P
 * recomputed in the backward matches the forward's lse). Bias and ALiBi are additive, so only
 * softcap bends it: d(cap * tanh(s / cap))/ds = 1 - tanh^2(s / cap). */
static inline float transform_score_grad(float s, float softcap, float bias, float alibi_slope, uint i, uint j,
                                         uint seq_q, long diag_k, float *slope)
{
#if SOFTCAP
    const float t = tanh(s / softcap);
    s = softcap * t;
    *slope = fma(-t, t, 1.0f);
#else
    *slope = 1.0f;
#endif
#if BIAS
    s += bias;
#endif
#if ALIBI
    s -= alibi_slope * fabs((float)((long)i + diag_k - (long)seq_q - (long)j));
#endif
    (void)softcap;
    (void)bias;
    (void)alibi_slope;
    (void)i;
    (void)j;
    (void)seq_q;
    (void)diag_k;
    return s;
}

#if SOFTCAP || BIAS || ALIBI
/* transform_score_grad and P on 8 pairs, for the CPU paths (flash_backward.cl's, bias_grad_cpu.cl):
 * x the raw dot products, l2 their rows' lse (log2 domain), extra their biases (0 without a bias)
 * or -INFINITY for a pair the row does not see (P = 0 there), dist ALiBi's d - j; *slope receives
 * f'. float8 arithmetic that a CPU runs in vector registers, where the pair-by-pair loop called a
 * scalar tanh per pair (PoCL, n = 2048, d = 64, f32: softcap cost 3.4x to 5x the plain backward).
 * tanh is tanh8, as in the forward's CPU path. */
static inline float8 transformed_prob8(float8 x, float8 l2, float8 extra, float8 dist, float scale, float softcap,
                                       float slope_h, float8 *slope)
{
#if SOFTCAP
    /* scale / softcap in one product: one step less in the chain that bounds the callers' loops */
    const float8 t = tanh8(x * (scale / softcap));
    float8 f = softcap * t;
    *slope = fma(-t, t, (float8)(1.0f));
#else
    float8 f = x * scale;
    *slope = (float8)(1.0f);
    (void)softcap;
#endif
    const int8 unseen = extra == (float8)(-INFINITY);
    f += select(extra, (float8)(0.0f), unseen);
#if ALIBI
    f -= slope_h * fabs(dist);
#else
    (void)dist;
    (void)slope_h;
#endif
    return select(exp2_normal8(fma(f, (float8)(M_LOG2E_F), -l2)), (float8)(0.0f), unseen);
}
#endif

/* Head h's ALiBi slope; 0 without ALIBI (alibi is then not read). */
static inline float alibi_slope(__global const float *alibi, uint h)
{
#if ALIBI
    return alibi[h];
#else
    (void)alibi;
    (void)h;
    return 0.0f;
#endif
}

/* What a work-group of the bias gradient (bias_grad.cl, nv_mma_bias_grad.cl) sums. Both run the
 * grid lib/bias_grad.c launches: row tiles * key tiles work-groups along dimension 0, the bias
 * layout's heads along 1 and its batch entries along 2, so a work-group writes dBias elements of
 * batch entry ob = get_group_id(2) and head oh = get_group_id(1). It sums them over the batch
 * entries [b_first, b_end), query heads [h_first, h_end) and query tiles [t_first, t_end) they
 * are added to: all of a dimension the bias is broadcast over (bcast_batch, bcast_heads,
 * bcast_rows: the kernels' BCAST_* defines), else only its own entry, head and row_tile. */
typedef struct {
    uint ob, oh;
    uint b_first, b_end, h_first, h_end, t_first, t_end;
} bias_grad_cover;

static inline bias_grad_cover bias_grad_group_cover(bool bcast_batch, bool bcast_heads, bool bcast_rows, uint batch,
                                                    uint heads_q, uint row_tiles, uint row_tile)
{
    bias_grad_cover v;
    v.ob = get_group_id(2);
    v.oh = get_group_id(1);
    v.b_first = bcast_batch ? 0 : v.ob;
    v.b_end = bcast_batch ? batch : v.ob + 1;
    v.h_first = bcast_heads ? 0 : v.oh;
    v.h_end = bcast_heads ? heads_q : v.oh + 1;
    v.t_first = bcast_rows ? 0 : row_tile;
    v.t_end = bcast_rows ? row_tiles : row_tile + 1;
    return v;
}

/* The score of (query i, key j) after the optional transforms, in natural-log units:
 * softcap (cap * tanh(s / cap)), then the additive bias, then ALiBi (-slope * |d - j|):
 * transform_score_grad without its derivative (which the compiler drops). */
static inline float transform_score(float s, float softcap, float bias, float alibi_slope, uint i, uint j,
                                    uint seq_q, long diag_k)
{
    float slope;
    return transform_score_grad(s, softcap, bias, alibi_slope, i, j, seq_q, diag_k, &slope);
}

/* ---- split-KV and GQA packing (the forward kernels) -------------------------------------------
 * SPLIT=1: the keys are cut into n_splits parts of split_keys keys (a multiple of every tile); the
 * work-group's part is get_group_id(0) % n_splits and its query block get_group_id(0) / n_splits.
 * Its O goes to part `part` of the host's fp32 parts, whose layout the host passes as O's (parts
 * lie batch * heads_q * seq_q * HEAD_DIM elements apart), and its lse, always, to
 * lse[part][batch][heads_q][seq_q]. Without SPLIT, n_splits is 1 and nothing moves.
 * PACK > 1: the work-group's rows are the PACK query heads of one K/V head (grid dimension 1
 * counts K/V heads, and PACK is the GQA group): packed row r is query r / PACK of head
 * h0 + r % PACK, h0 = PACK * the K/V head. Consecutive rows share a query, so a block's rows still
 * see key ranges that grow with the row. PACK = 1 is the unpacked kernel (row r = query r).
 */
#if defined(SPLIT) != defined(PACK)
#error "SPLIT and PACK are set together (lib/dispatch_util.c, clflash_forward_defines)"
#endif
#ifdef SPLIT /* the forward kernels; the others are built without SPLIT and PACK */
#define ROW_QUERY(r) ((r) / PACK)
#define ROW_HEAD(h0, r) ((h0) + (r) % PACK)

/* The work-group's query block (in packed rows), from g0, its index along grid dimension 0
 * (get_group_id(0), or flash_forward_cpu.cl's permuted one); and its heads: h0 its first query
 * head, hk its K/V head. */
static inline uint query_block_index(uint g0, uint n_splits)
{
    return g0 / n_splits;
}
static inline void group_heads(uint group, uint *h0, uint *hk)
{
#if PACK > 1
    (void)group;
    *hk = get_group_id(1);
    *h0 = *hk * PACK;
#else
    *h0 = get_group_id(1);
    *hk = *h0 / group;
#endif
}

/* With SPLIT, narrows the key range [*begin, *end) to the part of the work-group whose index along
 * grid dimension 0 is g0 (begin stays a multiple of the tile: both it and the part's start are) and
 * moves O's offset and lse to the part. */
static inline void split_part(uint g0, uint n_splits, uint split_keys, uint heads_q, uint seq_q, uint *begin,
                              uint *end, ulong *o_off, __global float **lse)
{
#if SPLIT
    const uint part = g0 % n_splits;
    const ulong lo = (ulong)part * split_keys, hi = lo + split_keys;
    *begin = (uint)max((ulong)*begin, min(lo, (ulong)*end));
    *end = (uint)max((ulong)*begin, min((ulong)*end, hi));
    const ulong rows_all = (ulong)get_num_groups(2) * heads_q * seq_q;
#ifdef D_REAL
    *o_off += part * rows_all * D_REAL; /* the tensor-core forward pads HEAD_DIM; parts are D_REAL wide */
#else
    *o_off += part * rows_all * HEAD_DIM;
#endif
    *lse += part * rows_all;
#else
    (void)g0;
    (void)n_splits;
    (void)split_keys;
    (void)heads_q;
    (void)seq_q;
    (void)begin;
    (void)end;
    (void)o_off;
    (void)lse;
#endif
}

/* Where a forward kernel writes its rows of (batch entry b, query head h): O's row i is
 * tensor_index(o_off, o_bs, o_hs, o_ss, b, h, out_first(q_first) + i) and lse's
 * out_lse_row0(...) + i. A variable-length batch's rows are packed (q_first, lse_row0), except
 * that split parts (SPLIT) are the host's padded [batch][heads_q][seq_q] rows, which the merge
 * kernel packs. */
static inline uint out_first(uint q_first)
{
#if VARLEN && !SPLIT
    return q_first;
#else
    (void)q_first;
    return 0;
#endif
}
static inline ulong out_lse_row0(uint b, uint h, uint heads_q, uint seq_q, uint total_q, uint q_first)
{
#if SPLIT
    (void)total_q;
    (void)q_first;
    return ((ulong)b * heads_q + h) * seq_q;
#else
    return lse_row0(b, h, heads_q, seq_q, total_q, q_first);
#endif
}

/* ---- a paged KV cache (the forward kernels) ------------------------------------------------------
 * PAGED=1: K and V are pools of pages of PAGE_SIZE keys (clflash.h, "Paged KV caches"). The host
 * passes their layouts with the page in place of the batch (k_bs, v_bs step from one page to the
 * next) and block_table, int32[batch][pages_per_seq]: key j of batch entry b is slot
 * j % PAGE_SIZE of page block_table[b * pages_per_seq + j / PAGE_SIZE]. The host guarantees
 * seq_k <= pages_per_seq * PAGE_SIZE, so every key below seq_k has its entry in b's row; the
 * entries themselves come from device memory the host cannot check, so each is clamped into
 * [0, num_pages): a bad one reads some page of the pool, never memory outside it. PAGED=0: K and
 * V are ordinary tensors and the three arguments are not read. */
#if !defined(PAGED) || (PAGED && !defined(PAGE_SIZE))
#error "PAGED (and PAGE_SIZE when paged) are set by the host (lib/dispatch_util.c, clflash_forward_defines)"
#endif

/* Batch entry b's row of the block table (PAGED), or NULL. */
static inline __global const int *kv_page_row(__global const int *block_table, uint pages_per_seq, uint b)
{
#if PAGED
    return block_table + (ulong)b * pages_per_seq;
#else
    (void)block_table;
    (void)pages_per_seq;
    (void)b;
    return 0;
#endif
}

/* The first element of K/V head hk of batch entry b: its row 0, or with PAGED its place within
 * every page (the page itself comes with each key, kv_row). */
static inline ulong kv_head_base(ulong offset, ulong batch_stride, ulong head_stride, uint b, uint hk)
{
#if PAGED
    (void)batch_stride;
    (void)b;
    return offset + (ulong)hk * head_stride;
#else
    return offset + (ulong)b * batch_stride + (ulong)hk * head_stride;
#endif
}

/* The first element of key `key`'s row, from its head's base (kv_head_base): base + key *
 * seq_stride, or with PAGED slot key % PAGE_SIZE of the page the entry's table row names.
 * page_stride is the layout's batch stride; pages is the entry's table row (kv_page_row). */
static inline ulong kv_row(ulong base, ulong page_stride, ulong seq_stride, __global const int *pages, uint num_pages,
                           uint key)
{
#if PAGED
    const uint page = (uint)clamp(pages[key / PAGE_SIZE], 0, (int)num_pages - 1);
    return base + (ulong)page * page_stride + (ulong)(key % PAGE_SIZE) * seq_stride;
#else
    (void)page_stride;
    (void)pages;
    (void)num_pages;
    return base + (ulong)key * seq_stride;
#endif
}

/* ---- the portable forward: its kernels' arguments and rules -------------------------------------
 * The portable forward has three paths, a kernel file each: flash_forward_lanes.cl (lane per row),
 * flash_forward_regtile.cl (register tiles, the GPU default) and flash_forward_cpu.cl (CPU
 * devices). They share these rules:
 * Scores are kept in the log2 domain so that exp2 does the work: without softcap, bias or ALiBi
 * the host passes score_scale = scale * log2(e) (times the int8 scales); with them it passes the
 * natural scale, and the transformed score is multiplied by log2(e) in the kernel. The visible keys
 * of a row (causal, sliding window, key padding) are a range [lo, hi) from visible_keys; key tiles
 * outside the block's union of ranges are never loaded (block_key_range). O is scaled by out_scale
 * (the int8 V scale, else 1) and stored in the output type.
 * The running max starts at -INFINITY; a row that has seen no visible key yet uses 0 as its
 * reference so that no exp2(-inf - -inf) is ever formed. A row that sees no key at all ends with
 * l = 0 and writes O = 0 and lse = -INFINITY.
 * Variable-length batches (VARLEN): every path first takes its sequence's first rows and lengths
 * (seq_span), visits no key tile and stores nothing when its query block is past the sequence's
 * queries (the paths with barriers do not return early: see flash_forward_regtile.cl; the CPU
 * decoding kernel, which has none, does), and uses those lengths wherever a plain call uses seq_q
 * and seq_k (visibility, masks, ALiBi, loads), the first rows in its Q, K, V bases, and
 * out_first / out_lse_row0 for its stores.
 * Split-KV and GQA packing (above): every path takes its query block from
 * query_block_index(n_splits) and, with SPLIT, narrows its key tiles to its part and writes the
 * part's fp32 O and lse (split_part). Only the register-tiled path packs the query heads of a GQA
 * group into its rows (PACK > 1); its per-row query, head, bias row and ALiBi slope come from the
 * packed row.
 *
 * FORWARD_PARAMS: the arguments of the forward kernels, in order. The host sets them by position
 * (lib/forward.c, set_flash_args), so every kernel clflash_forward launches takes exactly these:
 * the three paths above and the CPU decoding kernel (flash_decode_cpu.cl); the tensor-core kernel
 * (nv_mma_forward.cl) takes the same leading arguments, spelled out in its own file, and more after
 * them.
 */
#define FORWARD_PARAMS \
    __global const bits_t *q, __global const bits_t *k, __global const bits_t *v, \
    __global out_t *o, __global float *lse, uint seq_q, uint seq_k, uint heads_q, uint group, \
    float score_scale, ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, \
    ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss, ulong o_off, \
    ulong o_bs, ulong o_hs, ulong o_ss, uint win_left, uint win_right, int diag_offset, float softcap, \
    float out_scale, __global const float *bias, ulong bias_off, ulong bias_bs, ulong bias_hs, \
    ulong bias_rs, __global const float *alibi, __global const int *key_lens, uint n_splits, \
    uint split_keys, __global const int *block_table, uint pages_per_seq, uint num_pages, \
    __global const int *cu_seqlens_q, __global const int *cu_seqlens_k, uint total_q, uint total_k

/* FORWARD_ARGS: FORWARD_PARAMS's names, for a kernel that passes them on to its body. */
#define FORWARD_ARGS \
    q, k, v, o, lse, seq_q, seq_k, heads_q, group, score_scale, q_off, q_bs, q_hs, q_ss, k_off, \
    k_bs, k_hs, k_ss, v_off, v_bs, v_hs, v_ss, o_off, o_bs, o_hs, o_ss, win_left, win_right, \
    diag_offset, softcap, out_scale, bias, bias_off, bias_bs, bias_hs, bias_rs, alibi, key_lens, n_splits, \
    split_keys, block_table, pages_per_seq, num_pages, cu_seqlens_q, cu_seqlens_k, total_q, total_k

/* PATH_FUNCTION: a forward path's body, a function always inlined into its kernel, which declares
 * the path's local arrays (OpenCL C 1.2 allows them only at kernel scope) and passes them in.
 * Always inlined because PoCL 3.1 (LLVM 15) computed wrong results when such a function, which
 * holds barriers, stayed a call; and because clang's AMD back end allocates registers better for
 * the body as a function (forward-lanes d = 64 on gfx1100: 64 VGPRs instead of 100 with the body
 * written in the kernel itself; tests/kernel_resources.cmake prints the counts). */
#define PATH_FUNCTION static inline __attribute__((always_inline))
#endif /* SPLIT */
