/*
 * nv_mma_backward.cl - the backward pass's gradient kernel on NVIDIA tensor cores (inline PTX
 * mma.sync, ldmatrix, cp.async), in FlashAttention-2's manner but without atomics. Chosen by the
 * planner where the tensor-core forward is (NVIDIA, compute capability >= 8.0, fp16 or bf16,
 * head_dim up to 256, padded to a multiple of 16 inside (of 32 above 128), any layout), with
 * every feature of the descriptor (causal, sliding window, softcap, bias, ALiBi, key lengths);
 * the portable cl/flash_backward.cl does everything else and computes D = rowsum(dO * O) first
 * for both (its flash_backward_rowdot kernel).
 *
 * Why a separate file: the portable gradient kernel runs on CUDA cores at a few TFLOP/s; here the
 * five products of the backward run on tensor cores, with the gradients accumulated in fp32
 * registers.
 *
 * One launch, two kinds of work-group, as in the portable kernel, so each gradient element has
 * exactly one writer and the result is deterministic:
 *   groups [0, tiles_k)          dK and dV of ROWS = 16 * WARPS keys of one kv head. Warp w owns
 *                                16 keys and keeps their K and V rows in registers as mma A
 *                                fragments (above head_dim 128 two warps share 16 keys, each
 *                                with half of the columns, and ROWS = 8 * WARPS: D_SPLIT below).
 *                                Query tiles of BLOCK rows (Q, dO, and the rows' lse and D)
 *                                stream through local memory, double-buffered with cp.async,
 *                                over every query head of the kv head's group. Per 16
 *                                queries: S^T = K Q^T and dP^T = V dO^T (mma), P^T = exp2(S^T *
 *                                scale - lse) from the saved statistics, dS^T = P^T (dP^T - D),
 *                                then dV += P^T dO and dK += dS^T Q (mma, P^T and dS^T packed to
 *                                f16/bf16 in registers, dO and Q read with ldmatrix.trans).
 *   groups [tiles_k, ...)        dQ of ROWS queries of one query head. Warp w keeps 16 rows of Q
 *                                and dO in registers; K and V tiles of BLOCK keys stream through
 *                                local memory, double-buffered. Per 16 keys: S = Q K^T, dP = dO V^T,
 *                                P, dS = P (dP - D), dQ += dS K (K read with ldmatrix.trans).
 * dK and dQ are multiplied by the natural scale at the end (dS is the gradient of the scaled
 * score). A key group visits only the query tiles from the first query that sees one of its keys
 * to the last (common.cl's visible_keys rules: CAUSAL, WINDOW, the batch entry's key length), and
 * a query group only the key tiles its rows see (block_key_range); only the tiles that some pair
 * sees in part are masked per pair. A row whose lse is -inf (it saw no key) gets P = 0, so dQ = 0
 * there; a key no query sees gets dK = dV = 0. Rows past seq_q and keys past seq_k or the key
 * length are zero-filled in local memory (never loaded) and masked or not stored. A
 * variable-length batch (VARLEN) runs each entry as an ordinary entry of its sequence's lengths
 * from its first packed rows (mma_bwd_args); groups past them return at once.
 *
 * Score transforms (SOFTCAP, BIAS, ALIBI) are applied in log2 units by the same operations as in
 * nv_mma_forward.cl (nv_mma_scores.cl's feature_scores), so P recomputed from the forward's lse is the forward's; the
 * softcap's derivative 1 - tanh^2 multiplies dS. A key group reads the bias of its pairs as
 * columns of S^T (eight 4-byte loads per lane and 16 queries, each 32 bytes of one bias row
 * across the warp), a query group as rows, two keys per load (common bias_pair). Neither writes a
 * bias gradient.
 *
 * Rounding, compared with the portable kernel (documented in clflash.h): P and dS are rounded to
 * the storage type before their products, as FlashAttention-2 does; the sums are fp32.
 *
 * Local memory: max(4 * BLOCK, 2 * ROWS) rows of HEAD_DIM + 8 halves (two buffers of two tiles;
 * the key or query rows at the start and the outputs at the end pass through the same rows),
 * 4 * BLOCK floats (two buffers of the tile rows' lse and D) and, with D_SPLIT 2, 2 KiB per warp
 * and 16 rows of a tile for the partial products the warps of a pair swap (42 KB at head_dim 256,
 * BLOCK 16, 4 warps).
 *
 * Defines: HEAD_DIM (multiple of 16, <= 128, or of 32, <= 256, with D_SPLIT 2; with D_REAL,
 * nv_mma_common.cl's, the tensors' own head_dim below it: columns past D_REAL are zeros in local
 * memory and are not stored; with
 * NV_ALIGNED 0 rows are copied and stored element by element), BLOCK (query rows per tile of a key group and keys
 * per tile of a query group, multiple of 16), WARPS, CAUSAL, WINDOW, SOFTCAP, BIAS, BIAS_PAIRS,
 * ALIBI, KEYLEN, VARLEN, CLFLASH_DTYPE_F16 or _BF16; D_SPLIT (1, or 2 above head_dim 128: warps per 16
 * rows, WARPS a multiple of it);
 * NV_BWD_STREAM (below; the host's default is in lib/nv_mma_backward_plan.c, the
 * nv_backward.stream tuning setting overrides it). The PTX
 * helpers and THREADS, ROW_STRIDE, CHUNKS, K_STEPS, D_TILES come from nv_mma_common.cl, the score
 * recomputation (row_products, feature_scores, probabilities, masks) from nv_mma_scores.cl, and the
 * streamed tiles' layout, copies and products (TILE_ROW, tile_scores, tile_accumulate, tile_stream,
 * tiles_arrived) from nv_mma_backward_tiles.cl.
 */

/* ROWS: keys of a key group, queries of a query group. With D_SPLIT 2 (the host's, above head_dim
 * 128; nv_mma_scores.cl) warps 2s and 2s + 1 share rows 16s .. 16s + 15, each holding SHARE_DIM
 * columns of them (its share: the first or the second half) in its fragments and sums. */
#define ROWS (16 * WARPS / D_SPLIT)
#if WARPS % D_SPLIT != 0
#error "WARPS must be a multiple of D_SPLIT (the host steps nv_backward.warps down to one)"
#endif

/* Measuring aid, as in flash_backward.cl: the host passes both switches as 0; -D CLFLASH_BWD_SKIP_DQ=1
 * (or _SKIP_DKDV=1) in a context's build options follows them, redefines one, and makes the groups
 * of that kind return at once, so that each kind can be timed alone. */
#if !defined(CLFLASH_BWD_SKIP_DQ) || !defined(CLFLASH_BWD_SKIP_DKDV)
#error "CLFLASH_BWD_SKIP_DQ and CLFLASH_BWD_SKIP_DKDV are set by the host (lib/nv_mma_backward_plan.c)"
#endif
#define TILE_ROWS (4 * BLOCK > 2 * ROWS ? 4 * BLOCK : 2 * ROWS)
#define CHUNK_STEPS (BLOCK / 16) /* 16-row pieces of a streamed tile */

/* With D_SPLIT 2, S and dP of a 16-column piece are sums over both shares: each warp of a pair
 * writes its part to its slot (piece c of the tile, SWAP_SLOTS float4 per warp), and after a
 * barrier adds its partner's, so both hold the same sums (a + b = b + a exactly). Every work-item
 * calls it at the same point of the loop. A slot is written again only in the next tile, after the
 * loop's barrier, by which time its reader is done with it. */
#define SWAP_SLOTS (D_SPLIT > 1 ? CHUNK_STEPS * 4 * 32 : 1)
static inline void add_partner_share(__local float4 *swap, uint c, float4 *s0, float4 *s1, float4 *dp0, float4 *dp1)
{
#if D_SPLIT > 1
    const uint lane = get_local_id(0) % 32, warp = get_local_id(0) / 32;
    __local float4 *mine = swap + warp * SWAP_SLOTS + c * 128 + lane;
    __local const float4 *theirs = swap + (warp ^ 1) * SWAP_SLOTS + c * 128 + lane;
    mine[0] = *s0;
    mine[32] = *s1;
    mine[64] = *dp0;
    mine[96] = *dp1;
    barrier(CLK_LOCAL_MEM_FENCE);
    *s0 += theirs[0];
    *s1 += theirs[32];
    *dp0 += theirs[64];
    *dp1 += theirs[96];
#else
    (void)swap;
    (void)c;
    (void)s0;
    (void)s1;
    (void)dp0;
    (void)dp1;
#endif
}

/* The shape and the layouts, as the kernel received them; for a variable-length batch (VARLEN) the
 * batch entry's: seq_q and seq_k its lengths, the offsets at its first packed rows (the layouts'
 * batch strides are 0), total_q and q_row for its lse and D rows (lse_rows). */
typedef struct {
    uint seq_q, seq_k, heads_q, group;
    float scale_log2, scale;
    ulong q_off, q_bs, q_hs, q_ss, k_off, k_bs, k_hs, k_ss, v_off, v_bs, v_hs, v_ss, o_off, o_bs, o_hs, o_ss;
    uint key_len; /* the batch entry's (seq_k without key lengths) */
    long diag_k;  /* common.cl's diagonal_keys (signed: the diagonal offset moves it) */
    uint win_left, win_right;
    float softcap;
    ulong bias_off, bias_bs, bias_hs, bias_rs;
    uint total_q, q_row;
} mma_bwd_args;

/* Row 0 of (batch entry b, query head h) in lse and D: common.cl's lse_row0. */
static inline ulong lse_rows(const mma_bwd_args *a, uint b, uint h)
{
    return lse_row0(b, h, a->heads_q, a->seq_q, a->total_q, a->q_row);
}

/* RANGES: a pair's visibility needs visible_keys (a window or key lengths); causal alone is
 * written out. TRANSFORMS comes from nv_mma_scores.cl. */
#define RANGES (WINDOW || KEYLEN)

/* The queries that can see a key of [k0, k_end): common.cl's key_block_queries with the call's
 * rules (exact for one key). */
static inline void key_range_queries(const mma_bwd_args *a, uint k0, uint k_end, uint *first, uint *end)
{
    key_block_queries(k0, k_end, a->seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, first, end);
}

/* visible_keys of query i with the call's rules. */
static inline void query_keys(const mma_bwd_args *a, uint i, long *lo, long *hi)
{
    visible_keys(i, a->seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, lo, hi);
}

/* The prologue both kinds of work-group share: ROWS rows from row0 of two tensors (x at x_base,
 * y at y_base; rows at or past `rows` as zeros) pass through local memory into this warp's 16
 * rows' A fragments (of its share of the columns), which the work-group keeps for the whole call.
 * On return the staging rows are free again. */
static inline void load_group_fragments(__local ushort *tiles, __global const ushort *x, ulong x_base, ulong x_ss,
                                        __global const ushort *y, ulong y_base, ulong y_ss, uint row0, uint rows,
                                        uint4 *x_frag, uint4 *y_frag)
{
    stage_rows(tiles, x, x_base, x_ss, row0, ROWS, rows);
    stage_rows(tiles + ROWS * ROW_STRIDE, y, y_base, y_ss, row0, ROWS, rows);
    async_commit();
    async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint warp = get_local_id(0) / 32, slab = warp / D_SPLIT, col0 = warp % D_SPLIT * SHARE_DIM;
    load_row_fragments(tiles + col0, slab * 16, x_frag);
    load_row_fragments(tiles + ROWS * ROW_STRIDE + col0, slab * 16, y_frag);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Writes a warp's 16 x SHARE_DIM accumulator block, times `mul`, as storage-type rows `row` ..
 * `row` + 15 of a local tile (lane rows g and g + 8, columns 8 dt + 2t and + 1 of the share). */
static inline void park_rows(__local ushort *tile, uint row, const float4 *acc, float mul)
{
    const uint lane = get_local_id(0) % 32;
    __local uint *dst = (__local uint *)(tile + (row + lane / 4) * ROW_STRIDE + share_column() + 2 * (lane % 4));
#pragma unroll
    for (uint dt = 0; dt < SHARE_TILES; dt++) {
        dst[dt * 4] = pack_pair(acc[dt].x * mul, acc[dt].y * mul);
        dst[dt * 4 + 8 * ROW_STRIDE / 2] = pack_pair(acc[dt].z * mul, acc[dt].w * mul);
    }
}

/* Stores `rows` local rows to a tensor's rows row0 .. (those below `limit`), columns below D_REAL:
 * 16 bytes at a time, or with NV_ALIGNED 0 element by element. */
static inline void store_rows(__global ushort *dst, ulong base, ulong seq_stride, __local const ushort *tile, uint row0,
                       uint rows, uint limit)
{
#if NV_ALIGNED
    for (uint c = get_local_id(0); c < rows * CHUNKS; c += THREADS) {
        const uint r = c / CHUNKS, piece = c % CHUNKS;
        if (row0 + r < limit && piece * 8 < D_REAL)
            *(__global uint4 *)(dst + base + (ulong)(row0 + r) * seq_stride + piece * 8) =
                *(__local const uint4 *)(tile + r * ROW_STRIDE + piece * 8);
    }
#else
    for (uint e = get_local_id(0); e < rows * D_REAL; e += THREADS) {
        const uint r = e / D_REAL, col = e % D_REAL;
        if (row0 + r < limit)
            dst[base + (ulong)(row0 + r) * seq_stride + col] = tile[r * ROW_STRIDE + col];
    }
#endif
}

/* Two 16 x 8 accumulator blocks (columns 0..7, 8..15) as one 16 x 16 A fragment. */
static inline uint4 as_fragment(float4 x0, float4 x1)
{
    return (uint4)(pack_pair(x0.x, x0.y), pack_pair(x0.z, x0.w), pack_pair(x1.x, x1.y), pack_pair(x1.z, x1.w));
}

/* P and dS of a 16-column piece (two 16 x 8 blocks: x0 the first 8 columns, x1 the next) as A
 * fragments: probabilities of each block, dS times the softcap's derivative grad with SOFTCAP. */
static inline void chunk_probabilities(float4 s0, float4 s1, float4 dp0, float4 dp1, float4 off0, float4 off1,
                                       float4 dd0, float4 dd1, float4 grad0, float4 grad1, float p_scale,
                                       uint4 *p_frag, uint4 *ds_frag)
{
    float4 p0, p1, g0, g1;
    probabilities(s0, dp0, off0, dd0, p_scale, &p0, &g0);
    probabilities(s1, dp1, off1, dd1, p_scale, &p1, &g1);
#if SOFTCAP
    g0 *= grad0;
    g1 *= grad1;
#endif
    (void)grad0;
    (void)grad1;
    *p_frag = as_fragment(p0, p1);
    *ds_frag = as_fragment(g0, g1);
}

/* NV_BWD_STREAM: 1 copies a key group's Q and dO tiles through tile_stream (per-work-item pointers,
 * restarted at each query head), 0 through stage_rows (a division and a 64-bit multiply per 16-byte
 * copy). On the H200 (f16, n = 4096 and 16384) the stream gave 1.03x to 1.05x at head_dim 128 and
 * 0.92x to 1.02x at 64, so the host's default is head_dim >= 128. */
/* NV_BWD_CHUNK (the host's nv_backward.chunk): 0 runs the launch in its order, every group of one
 * head and batch entry (the dK/dV groups, then the dQ groups) after another, so that groups running
 * side by side share their head's Q, dO, K and V in the L2 cache; C > 0 runs chunks of C group
 * indices over every head and batch entry, so that they share what the heads share (a bias
 * broadcast over them). The host's default and the measurements behind it:
 * lib/nv_mma_backward_plan.c's clflash_nv_default_bwd_chunk. */
#ifndef NV_BWD_CHUNK
#error "NV_BWD_CHUNK is set by the host (lib/nv_mma_backward_plan.c)"
#endif
#ifndef NV_BWD_STREAM
#error "NV_BWD_STREAM is set by the host (lib/nv_mma_backward_plan.c)"
#endif

/* Issues the copies of query tile `it` (head hk * group + it / per_head, rows q_first + (it %
 * per_head) * BLOCK ..) of Q and dO into buffer u, and stores its rows' lse offsets and D. With
 * NV_BWD_STREAM the copies come from *qs, which restarts at each head's first tile. */
static inline void stage_query_tile(const mma_bwd_args *a, __global const ushort *q, __global const ushort *d_o,
                             __global const float *lse, __global const float *dvec, __local ushort *tiles,
                             __local float *stats, uint b, uint hk, uint q_first, uint per_head, uint it, uint u,
                             tile_stream *qs)
{
    const uint h = hk * a->group + it / per_head;
    const uint q0 = q_first + (it % per_head) * BLOCK;
#if NV_BWD_STREAM
    if (it % per_head == 0)
        *qs = tile_stream_start_at(q, a->q_off + (ulong)b * a->q_bs + (ulong)h * a->q_hs, a->q_ss, d_o,
                                   a->o_off + (ulong)b * a->o_bs + (ulong)h * a->o_hs, a->o_ss, a->seq_q, q_first);
    tile_stream_next(qs, tiles + 2 * u * BLOCK * ROW_STRIDE);
#else
    (void)qs;
    const ulong q_base = a->q_off + (ulong)b * a->q_bs + (ulong)h * a->q_hs;
    const ulong o_base = a->o_off + (ulong)b * a->o_bs + (ulong)h * a->o_hs;
    stage_rows(tiles + 2 * u * BLOCK * ROW_STRIDE, q, q_base, a->q_ss, q0, BLOCK, a->seq_q);
    stage_rows(tiles + (2 * u + 1) * BLOCK * ROW_STRIDE, d_o, o_base, a->o_ss, q0, BLOCK, a->seq_q);
#endif
    async_commit();
    for (uint i = get_local_id(0); i < BLOCK; i += THREADS) {
        const uint qi = q0 + i;
        const ulong at = lse_rows(a, b, h) + qi;
        stats[2 * u * BLOCK + i] = qi < a->seq_q ? lse_offset(lse[at]) : INFINITY;
        stats[(2 * u + 1) * BLOCK + i] = qi < a->seq_q ? dvec[at] : 0.0f;
    }
}

/* The bias of a key group's pairs in one 16-query piece, as S^T's accumulator blocks hold them:
 * keys k_lo and k_hi (rows g, g + 8) of queries qa and qa + 1 in *b0 (x, y: k_lo; z, w: k_hi) and of
 * qa + 8, qa + 9 in *b1. Queries past seq_q read row seq_q - 1 (their P is 0); the keys come
 * clamped to seq_k - 1 by the caller. */
#if BIAS
static inline void key_group_bias(__global const float *head, const mma_bwd_args *a, uint qa, uint k_lo, uint k_hi,
                                  float4 *b0, float4 *b1)
{
    const uint last = a->seq_q - 1;
    __global const float *r0 = head + (ulong)min(qa, last) * a->bias_rs;
    __global const float *r1 = head + (ulong)min(qa + 1, last) * a->bias_rs;
    __global const float *r8 = head + (ulong)min(qa + 8, last) * a->bias_rs;
    __global const float *r9 = head + (ulong)min(qa + 9, last) * a->bias_rs;
    *b0 = (float4)(r0[k_lo], r1[k_lo], r0[k_hi], r1[k_hi]);
    *b1 = (float4)(r8[k_lo], r9[k_lo], r8[k_hi], r9[k_hi]);
}

/* key_group_bias for every 16-query piece of the tile of queries q0 .. q0 + BLOCK - 1 of query head
 * h, into registers: issued a tile ahead, so that its latency hides behind a tile's products. */
static inline void key_group_bias_tile(float4 dst[CHUNK_STEPS][2], const mma_bwd_args *a, __global const float *bias,
                                       uint b, uint h, uint q0, uint k_lo, uint k_hi)
{
    __global const float *head = bias + a->bias_off + (ulong)b * a->bias_bs + (ulong)h * a->bias_hs;
    const uint t = get_local_id(0) % 4;
#pragma unroll
    for (uint c = 0; c < CHUNK_STEPS; c++)
        key_group_bias(head, a, q0 + c * 16 + 2 * t, k_lo, k_hi, &dst[c][0], &dst[c][1]);
}
#endif

/* dK and dV of keys kv0 .. kv0 + ROWS - 1 of kv head hk of batch entry b. */
static inline void key_group(const mma_bwd_args *a, __global const ushort *q, __global const ushort *k,
                      __global const ushort *v, __global const ushort *d_o, __global const float *lse,
                      __global const float *dvec, __global ushort *dk, __global ushort *dv,
                      __global const float *bias, __global const float *alibi, __local ushort *tiles,
                      __local float *stats, __local float4 *swap, uint kv0, uint hk, uint b)
{
    const uint lane = get_local_id(0) % 32, slab = get_local_id(0) / 32 / D_SPLIT;
    const uint g = lane / 4, t = lane % 4;
    const ulong k_base = a->k_off + (ulong)b * a->k_bs + (ulong)hk * a->k_hs;
    const ulong v_base = a->v_off + (ulong)b * a->v_bs + (ulong)hk * a->v_hs;
    const long shift = a->diag_k - (long)a->seq_q; /* query i's diagonal key is i + shift */
    /* P's exponent: the raw product times p_scale; with transforms the scores come in log2 units */
    const float p_scale = TRANSFORMS ? 1.0f : a->scale_log2;
    const float hidden = hidden_score(p_scale); /* the score of a masked pair */
    const score_consts sc = make_score_consts(a->scale, a->softcap);
    (void)sc;
    (void)bias;
    (void)alibi;

    /* K and V (keys past the key length as zeros): global -> local -> this warp's A fragments; the
     * staging rows become the query tiles. */
    uint4 kf[SHARE_STEPS], vf[SHARE_STEPS];
    load_group_fragments(tiles, k, k_base, a->k_ss, v, v_base, a->v_ss, kv0, a->key_len, kf, vf);

    /* The queries that see a key of the group. */
    uint q_first, q_end;
    key_range_queries(a, kv0, min(kv0 + ROWS, a->seq_k), &q_first, &q_end);
    const uint per_head = (q_end - q_first + BLOCK - 1) / BLOCK;
    const uint steps = per_head * a->group;

    float4 dk_acc[SHARE_TILES], dv_acc[SHARE_TILES];
#pragma unroll
    for (uint dt = 0; dt < SHARE_TILES; dt++)
        dk_acc[dt] = dv_acc[dt] = (float4)(0.0f);
    /* The lane's keys: rows g and g + 8 of the warp's 16 (the rows of S^T). */
    const long key_lo = (long)(kv0 + slab * 16 + g), key_hi = key_lo + 8;
#if RANGES
    uint qlo_lo, qhi_lo, qlo_hi, qhi_hi; /* the queries that see each of the lane's keys */
    key_range_queries(a, (uint)key_lo, (uint)key_lo + 1, &qlo_lo, &qhi_lo);
    key_range_queries(a, (uint)key_hi, (uint)key_hi + 1, &qlo_hi, &qhi_hi);
#endif
#if BIAS
    /* the tile's bias, loaded a tile ahead (key_group_bias_tile) */
    const uint bias_lo = min((uint)key_lo, a->seq_k - 1), bias_hi = min((uint)key_hi, a->seq_k - 1);
    float4 bias_t[CHUNK_STEPS][2];
    if (steps > 0)
        key_group_bias_tile(bias_t, a, bias, b, hk * a->group, q_first, bias_lo, bias_hi);
#endif

    tile_stream qs; /* NV_BWD_STREAM: the current head's Q and dO */
    if (steps > 0)
        stage_query_tile(a, q, d_o, lse, dvec, tiles, stats, b, hk, q_first, per_head, 0, 0, &qs);
    for (uint it = 0; it < steps; it++) {
        const uint u = it % 2;
        const uint q0 = q_first + (it % per_head) * BLOCK;
        tiles_arrived();
        barrier(CLK_LOCAL_MEM_FENCE); /* tile it is in; every warp is done with tile it - 1 */
        if (it + 1 < steps)
            stage_query_tile(a, q, d_o, lse, dvec, tiles, stats, b, hk, q_first, per_head, it + 1, 1 - u, &qs);
        __local const ushort *q_rows = tiles + 2 * u * BLOCK * ROW_STRIDE;
        __local const ushort *do_rows = q_rows + BLOCK * ROW_STRIDE;
        __local const float *offs = stats + 2 * u * BLOCK, *ds_row = offs + BLOCK;
        /* A tile needs masks only where some pair of its queries and the group's keys is not
         * visible: both ends of visible_keys grow with the query, so every pair is visible when the
         * tile's last query's first key is at or before the group's first key and its first query's
         * last key at or after the group's last key. */
        int masked = 0;
#if RANGES
        {
            long lo_last, hi_first, unused;
            query_keys(a, min(q0 + BLOCK, a->seq_q) - 1, &lo_last, &unused);
            query_keys(a, q0, &unused, &hi_first);
            masked = lo_last > (long)kv0 || hi_first < (long)(kv0 + ROWS);
        }
#elif CAUSAL
        masked = (long)(kv0 + ROWS - 1) > (long)q0 + shift;
#endif
#if ALIBI
        const uint h = hk * a->group + it / per_head; /* the tile's query head */
        const float slope_l2 = alibi[h] * M_LOG2E_F;
#else
        const float slope_l2 = 0.0f;
#endif
        (void)slope_l2;
#pragma unroll
        for (uint c = 0; c < CHUNK_STEPS; c++) {
            /* Columns are queries: s0 holds queries 16c + 2t (x, z) and + 1 (y, w), s1 the same + 8. */
            const uint col = c * 16 + 2 * t;
            float4 bias0 = (float4)(0.0f), bias1 = (float4)(0.0f);
#if BIAS
            bias0 = bias_t[c][0];
            bias1 = bias_t[c][1];
#endif
            float4 s0, s1, dp0, dp1;
            tile_scores(kf, q_rows + TILE_ROW(c * 16) + share_column(), &s0, &s1);
            tile_scores(vf, do_rows + TILE_ROW(c * 16) + share_column(), &dp0, &dp1);
            add_partner_share(swap, c, &s0, &s1, &dp0, &dp1);
            const float4 off0 = (float4)(offs[col], offs[col + 1], offs[col], offs[col + 1]);
            const float4 off1 = (float4)(offs[col + 8], offs[col + 9], offs[col + 8], offs[col + 9]);
            const float4 dd0 = (float4)(ds_row[col], ds_row[col + 1], ds_row[col], ds_row[col + 1]);
            const float4 dd1 = (float4)(ds_row[col + 8], ds_row[col + 9], ds_row[col + 8], ds_row[col + 9]);
            float4 grad0 = (float4)(1.0f), grad1 = (float4)(1.0f);
#if TRANSFORMS
            /* each pair's distance from its query's diagonal key (exact below 2^24) */
            const float dist = (float)((long)(q0 + col) + shift - key_lo);
            const float4 dist0 = (float4)(dist, dist + 1.0f, dist - 8.0f, dist - 7.0f);
            s0 = feature_scores(s0, bias0, dist0, slope_l2, &sc, &grad0);
            s1 = feature_scores(s1, bias1, dist0 + 8.0f, slope_l2, &sc, &grad1);
#endif
#if BIAS
            /* the tile's bias is used: the next tile's loads go out now */
            if (c == CHUNK_STEPS - 1 && it + 1 < steps)
                key_group_bias_tile(bias_t, a, bias, b, hk * a->group + (it + 1) / per_head,
                                    q_first + ((it + 1) % per_head) * BLOCK, bias_lo, bias_hi);
#endif
            (void)bias0;
            (void)bias1;
            if (masked) {
#if RANGES
                const long qa = (long)(q0 + col);
                s0 = mask_scores(s0, (int4)(in_range(qa, qlo_lo, qhi_lo), in_range(qa + 1, qlo_lo, qhi_lo),
                                            in_range(qa, qlo_hi, qhi_hi), in_range(qa + 1, qlo_hi, qhi_hi)), hidden);
                s1 = mask_scores(s1, (int4)(in_range(qa + 8, qlo_lo, qhi_lo), in_range(qa + 9, qlo_lo, qhi_lo),
                                            in_range(qa + 8, qlo_hi, qhi_hi), in_range(qa + 9, qlo_hi, qhi_hi)),
                                 hidden);
#else
                const long d0 = (long)(q0 + col) + shift; /* the diagonal key of query col */
                s0 = mask_scores(s0, (int4)(key_lo <= d0, key_lo <= d0 + 1, key_hi <= d0, key_hi <= d0 + 1), hidden);
                s1 = mask_scores(s1, (int4)(key_lo <= d0 + 8, key_lo <= d0 + 9, key_hi <= d0 + 8, key_hi <= d0 + 9),
                                 hidden);
#endif
            }
            uint4 p_frag, ds_frag;
            chunk_probabilities(s0, s1, dp0, dp1, off0, off1, dd0, dd1, grad0, grad1, p_scale, &p_frag, &ds_frag);
            tile_accumulate(dv_acc, p_frag, do_rows + TILE_ROW(c * 16));
            tile_accumulate(dk_acc, ds_frag, q_rows + TILE_ROW(c * 16));
        }
    }

    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last tile */
    park_rows(tiles, slab * 16, dk_acc, a->scale);
    park_rows(tiles + ROWS * ROW_STRIDE, slab * 16, dv_acc, 1.0f);
    barrier(CLK_LOCAL_MEM_FENCE);
    store_rows(dk, k_base, a->k_ss, tiles, kv0, ROWS, a->seq_k);
    store_rows(dv, v_base, a->v_ss, tiles + ROWS * ROW_STRIDE, kv0, ROWS, a->seq_k);
}

#if BIAS
/* The bias of a query group's pairs for the key tile key0 .. key0 + BLOCK - 1 as S's accumulator
 * blocks hold them (rows lo: x, y; hi: z, w; keys 16c + 2t, + 1 in [c][0], + 8, + 9 in [c][1]),
 * two keys per load (bias_pair), into registers a tile ahead as key_group_bias_tile. */
static inline void query_group_bias_tile(float4 dst[CHUNK_STEPS][2], __global const float *row_lo,
                                         __global const float *row_hi, uint key0, uint seq_k)
{
    const uint t = get_local_id(0) % 4;
    if (key0 + BLOCK <= seq_k) { /* the whole tile inside the rows */
        __global const float *lo = row_lo + key0 + 2 * t, *hi = row_hi + key0 + 2 * t;
#pragma unroll
        for (uint c = 0; c < CHUNK_STEPS; c++) {
            const float2 l0 = bias_pair_inside(lo, c * 16), h0 = bias_pair_inside(hi, c * 16);
            const float2 l8 = bias_pair_inside(lo, c * 16 + 8), h8 = bias_pair_inside(hi, c * 16 + 8);
            dst[c][0] = (float4)(l0.x, l0.y, h0.x, h0.y);
            dst[c][1] = (float4)(l8.x, l8.y, h8.x, h8.y);
        }
        return;
    }
#pragma unroll
    for (uint c = 0; c < CHUNK_STEPS; c++) {
        const uint key = key0 + c * 16 + 2 * t;
        const float2 l0 = bias_pair(row_lo, key, seq_k), h0 = bias_pair(row_hi, key, seq_k);
        const float2 l8 = bias_pair(row_lo, key + 8, seq_k), h8 = bias_pair(row_hi, key + 8, seq_k);
        dst[c][0] = (float4)(l0.x, l0.y, h0.x, h0.y);
        dst[c][1] = (float4)(l8.x, l8.y, h8.x, h8.y);
    }
}
#endif

/* dQ of queries qr0 .. qr0 + ROWS - 1 of query head h of batch entry b. */
static inline void query_group(const mma_bwd_args *a, __global const ushort *q, __global const ushort *k,
                        __global const ushort *v, __global const ushort *d_o, __global const float *lse,
                        __global const float *dvec, __global ushort *dq, __global const float *bias,
                        __global const float *alibi, __local ushort *tiles, __local float4 *swap, uint qr0, uint h,
                        uint b)
{
    const uint lane = get_local_id(0) % 32, slab = get_local_id(0) / 32 / D_SPLIT;
    const uint g = lane / 4, t = lane % 4;
    const uint hk = h / a->group;
    const ulong q_base = a->q_off + (ulong)b * a->q_bs + (ulong)h * a->q_hs;
    const ulong o_base = a->o_off + (ulong)b * a->o_bs + (ulong)h * a->o_hs;
    const ulong k_base = a->k_off + (ulong)b * a->k_bs + (ulong)hk * a->k_hs;
    const ulong v_base = a->v_off + (ulong)b * a->v_bs + (ulong)hk * a->v_hs;
    const long shift = a->diag_k - (long)a->seq_q;
    const float p_scale = TRANSFORMS ? 1.0f : a->scale_log2; /* as in key_group */
    const float hidden = hidden_score(p_scale);
    const score_consts sc = make_score_consts(a->scale, a->softcap);
    (void)sc;
    (void)bias;
    (void)alibi;

    /* Q and dO: global -> local -> this warp's A fragments; the staging rows become the key tiles. */
    uint4 qf[SHARE_STEPS], df[SHARE_STEPS];
    load_group_fragments(tiles, q, q_base, a->q_ss, d_o, o_base, a->o_ss, qr0, a->seq_q, qf, df);

    /* The lane's rows g and g + 8 of the warp's 16: lse offsets and D. */
    const uint row_lo = qr0 + slab * 16 + g, row_hi = row_lo + 8;
    const ulong bh = lse_rows(a, b, h);
    const float off_lo = row_lo < a->seq_q ? lse_offset(lse[bh + row_lo]) : INFINITY;
    const float off_hi = row_hi < a->seq_q ? lse_offset(lse[bh + row_hi]) : INFINITY;
    const float d_lo = row_lo < a->seq_q ? dvec[bh + row_lo] : 0.0f;
    const float d_hi = row_hi < a->seq_q ? dvec[bh + row_hi] : 0.0f;
    const float4 offs = (float4)(off_lo, off_lo, off_hi, off_hi), dd = (float4)(d_lo, d_lo, d_hi, d_hi);

    /* The keys the group sees: with RANGES block_key_range's tiles and each lane row's own range;
     * else all, or with CAUSAL up to its last row's diagonal. */
    const uint row_last = min(qr0 + ROWS, a->seq_q) - 1;
    uint key_begin = 0, key_end = a->seq_k;
#if RANGES
    long first_hi, last_lo, lo_lo, hi_lo, lo_hi, hi_hi, unused;
    block_key_range(qr0, ROWS, a->seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, BLOCK, &key_begin,
                    &key_end);
    query_keys(a, qr0, &unused, &first_hi);
    query_keys(a, row_last, &last_lo, &unused);
    query_keys(a, row_lo, &lo_lo, &hi_lo);
    query_keys(a, row_hi, &lo_hi, &hi_hi);
#elif CAUSAL
    {
        const long end = (long)row_last + shift + 1;
        key_end = end <= 0 ? 0u : (uint)min(end, (long)a->seq_k);
    }
#endif
    (void)row_last;
    const uint n_tiles = (key_end - key_begin + BLOCK - 1) / BLOCK;

#if BIAS
    /* the bias rows of the lane's rows (rows past seq_q read the last; their P is 0) */
    __global const float *bias_head = bias + a->bias_off + (ulong)b * a->bias_bs + (ulong)h * a->bias_hs;
    __global const float *bias_row_lo = bias_head + (ulong)min(row_lo, a->seq_q - 1) * a->bias_rs;
    __global const float *bias_row_hi = bias_head + (ulong)min(row_hi, a->seq_q - 1) * a->bias_rs;
    float4 bias_t[CHUNK_STEPS][2]; /* the tile's bias, loaded a tile ahead */
    if (n_tiles > 0)
        query_group_bias_tile(bias_t, bias_row_lo, bias_row_hi, key_begin, a->seq_k);
#endif
#if ALIBI
    const float slope_l2 = alibi[h] * M_LOG2E_F;
#else
    const float slope_l2 = 0.0f;
#endif
    (void)slope_l2;

    float4 dq_acc[SHARE_TILES];
#pragma unroll
    for (uint dt = 0; dt < SHARE_TILES; dt++)
        dq_acc[dt] = (float4)(0.0f);

    /* keys at or past the key length are never read: they become zeros */
    tile_stream stream = tile_stream_start_at(k, k_base, a->k_ss, v, v_base, a->v_ss, a->key_len, key_begin);
    if (n_tiles > 0) {
        tile_stream_next(&stream, tiles);
        async_commit();
    }
    for (uint j = 0; j < n_tiles; j++) {
        const uint key0 = key_begin + j * BLOCK;
        tiles_arrived();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (j + 1 < n_tiles) {
            tile_stream_next(&stream, tiles + ((j + 1) % 2) * 2 * BLOCK * ROW_STRIDE);
            async_commit();
        }
        __local const ushort *k_rows = tiles + (j % 2) * 2 * BLOCK * ROW_STRIDE;
        __local const ushort *v_rows = k_rows + BLOCK * ROW_STRIDE;
#if RANGES
        /* every row of the group sees every key of the tile (as key_group's test) */
        const int masked = (long)key0 < last_lo || (long)(key0 + BLOCK) > first_hi;
#else
        int masked = key0 + BLOCK > a->seq_k;
#if CAUSAL
        masked |= (long)(key0 + BLOCK - 1) > (long)qr0 + shift;
#endif
#endif
#pragma unroll
        for (uint c = 0; c < CHUNK_STEPS; c++) {
            /* Columns are keys: 16c + 2t (x, z) and + 1 (y, w); s1 the same + 8. */
            const uint key = key0 + c * 16 + 2 * t;
            float4 bias0 = (float4)(0.0f), bias1 = (float4)(0.0f);
#if BIAS
            bias0 = bias_t[c][0];
            bias1 = bias_t[c][1];
#endif
            float4 s0, s1, dp0, dp1;
            tile_scores(qf, k_rows + TILE_ROW(c * 16) + share_column(), &s0, &s1);
            tile_scores(df, v_rows + TILE_ROW(c * 16) + share_column(), &dp0, &dp1);
            add_partner_share(swap, c, &s0, &s1, &dp0, &dp1);
            float4 grad0 = (float4)(1.0f), grad1 = (float4)(1.0f);
#if TRANSFORMS
            const float dist_lo = (float)((long)row_lo + shift - (long)key);
            const float dist_hi = (float)((long)row_hi + shift - (long)key);
            const float4 dist0 = (float4)(dist_lo, dist_lo - 1.0f, dist_hi, dist_hi - 1.0f);
            s0 = feature_scores(s0, bias0, dist0, slope_l2, &sc, &grad0);
            s1 = feature_scores(s1, bias1, dist0 - 8.0f, slope_l2, &sc, &grad1);
#endif
#if BIAS
            if (c == CHUNK_STEPS - 1 && j + 1 < n_tiles) /* as in key_group */
                query_group_bias_tile(bias_t, bias_row_lo, bias_row_hi, key0 + BLOCK, a->seq_k);
#endif
            (void)bias0;
            (void)bias1;
            if (masked) {
#if RANGES
                const long kl = (long)key;
                s0 = mask_scores(s0, (int4)(in_range(kl, lo_lo, hi_lo), in_range(kl + 1, lo_lo, hi_lo),
                                            in_range(kl, lo_hi, hi_hi), in_range(kl + 1, lo_hi, hi_hi)), hidden);
                s1 = mask_scores(s1, (int4)(in_range(kl + 8, lo_lo, hi_lo), in_range(kl + 9, lo_lo, hi_lo),
                                            in_range(kl + 8, lo_hi, hi_hi), in_range(kl + 9, lo_hi, hi_hi)), hidden);
#else
                const long kl = (long)key, lim = (long)a->seq_k - 1;
#if CAUSAL
                const long e_lo = min((long)row_lo + shift, lim), e_hi = min((long)row_hi + shift, lim);
#else
                const long e_lo = lim, e_hi = lim;
#endif
                s0 = mask_scores(s0, (int4)(kl <= e_lo, kl + 1 <= e_lo, kl <= e_hi, kl + 1 <= e_hi), hidden);
                s1 = mask_scores(s1, (int4)(kl + 8 <= e_lo, kl + 9 <= e_lo, kl + 8 <= e_hi, kl + 9 <= e_hi), hidden);
#endif
            }
            uint4 p_frag, ds_frag; /* P is not needed here */
            chunk_probabilities(s0, s1, dp0, dp1, offs, offs, dd, dd, grad0, grad1, p_scale, &p_frag, &ds_frag);
            tile_accumulate(dq_acc, ds_frag, k_rows + TILE_ROW(c * 16));
        }
    }

    barrier(CLK_LOCAL_MEM_FENCE);
    park_rows(tiles, slab * 16, dq_acc, a->scale);
    barrier(CLK_LOCAL_MEM_FENCE);
    store_rows(dq, q_base, a->q_ss, tiles, qr0, ROWS, a->seq_q);
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
nv_mma_backward(__global const ushort *q, __global const ushort *k, __global const ushort *v,
                __global const ushort *d_o, __global const float *lse, __global const float *dvec,
                __global ushort *dq, __global ushort *dk, __global ushort *dv, uint seq_q, uint seq_k, uint heads_q,
                uint heads_kv, uint group, uint tiles_k, float scale_log2, float scale, ulong q_off, ulong q_bs,
                ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs,
                ulong v_hs, ulong v_ss, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, uint win_left,
                uint win_right, int diag_offset, float softcap, __global const float *bias, ulong bias_off,
                ulong bias_bs,
                ulong bias_hs, ulong bias_rs, __global const float *alibi, __global const int *key_lens,
                __global const int *cu_seqlens_q, __global const int *cu_seqlens_k, uint total_q, uint total_k)
{
    /* uint4 elements: cp.async and ldmatrix need 16-byte aligned rows */
    __local uint4 words[TILE_ROWS * ROW_STRIDE / 8 + BLOCK];
    __local ushort *const tiles = (__local ushort *)words;
    __local float *const stats = (__local float *)(words + TILE_ROWS * ROW_STRIDE / 8);
    __local float4 swap[WARPS * SWAP_SLOTS]; /* add_partner_share's, with D_SPLIT 2 */
    uint grp = get_group_id(0), head = get_group_id(1), b = get_group_id(2);
#if NV_BWD_CHUNK
    {
        /* chunks of NV_BWD_CHUNK groups over every head and batch entry (nv_mma_common.cl's
         * chunked_block_order), so that groups reading the same bias columns or rows run together */
        const uint n_g = get_num_groups(0), n_h = get_num_groups(1);
        uint gi, hb;
        chunked_block_order(grp + n_g * (head + n_h * b), n_g, n_h * get_num_groups(2), NV_BWD_CHUNK, &gi, &hb);
        grp = gi;
        head = hb % n_h;
        b = hb / n_h;
    }
#endif
    /* The entry's queries and keys (VARLEN: its sequence's, from packed rows q_row and k_row; common.cl's
     * seq_span), which the groups treat as an ordinary entry's; seq_q and seq_k from row 0 without. */
    uint q_row, k_row;
    const uint len_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_row);
    const uint len_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_row);
    const uint key_len = batch_key_len(key_lens, b, len_k);
    const mma_bwd_args a = {len_q,
                            len_k,
                            heads_q,
                            group,
                            scale_log2,
                            scale,
                            q_off + (ulong)q_row * q_ss,
                            q_bs,
                            q_hs,
                            q_ss,
                            k_off + (ulong)k_row * k_ss,
                            k_bs,
                            k_hs,
                            k_ss,
                            v_off + (ulong)k_row * v_ss,
                            v_bs,
                            v_hs,
                            v_ss,
                            o_off + (ulong)q_row * o_ss,
                            o_bs,
                            o_hs,
                            o_ss,
                            key_len,
                            diagonal_keys(key_len, len_k, diag_offset),
                            win_left,
                            win_right,
                            softcap,
                            bias_off,
                            bias_bs,
                            bias_hs,
                            bias_rs,
                            total_q,
                            q_row};
    if (grp < tiles_k) {
        /* key groups exist per kv head; with VARLEN a group past its sequence's keys has none */
        if (head >= heads_kv || CLFLASH_BWD_SKIP_DKDV || (VARLEN && grp * ROWS >= len_k))
            return;
        key_group(&a, q, k, v, d_o, lse, dvec, dk, dv, bias, alibi, tiles, stats, swap, grp * ROWS, head,
                  b);
    } else if (!CLFLASH_BWD_SKIP_DQ && !(VARLEN && (grp - tiles_k) * ROWS >= len_q)) {
        query_group(&a, q, k, v, d_o, lse, dvec, dq, bias, alibi, tiles, swap, (grp - tiles_k) * ROWS,
                    head, b);
    }
}
