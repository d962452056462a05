/*
 * nv_mma_bias_grad.cl - the backward's bias gradient (clflash_attention_desc.bias_grad) on NVIDIA
 * tensor cores: each dBias element is the sum of dS = P (dP - D) over every (batch entry, head,
 * query row) the bias element is added to (its broadcast dimensions), in a fixed order, so the
 * result is deterministic. The planner takes it wherever the tensor-core backward runs
 * (nv_mma_backward.cl) at head_dim up to 128; bias_grad.cl is the portable version of the same
 * sums.
 *
 * Why a kernel of its own: a bias shared over batch entries, heads or rows collects terms from
 * pairs that many gradient work-groups compute; without atomics the sum needs a work-group that
 * owns the element and visits its pairs in order. Here S = Q K^T and dP = dO V^T of each visited
 * tile are mma.sync products (nv_mma_scores.cl's row_products) instead of the portable kernel's
 * CUDA-core loops, and P and dS come from nv_mma_scores.cl's operations, so they are the
 * tensor-core backward's (before its rounding of dS to the storage type, which dBias does not
 * need: the sums are fp32 from fp32 dS).
 *
 * A work-group owns TQ x TK = (16 * WARPS) x BLOCK dBias elements of one (batch entry, head) of the
 * bias layout (one row of TK elements when the rows are broadcast); the grid is bias_grad.cl's.
 * For each (batch entry, head) it covers, in ascending order, and with the rows broadcast each
 * query tile in ascending order, it stages the TQ query rows of Q and TK key rows of K in local
 * memory, multiplies (warp w: query rows 16 w .. 16 w + 15, all TK keys), then the same rows of dO
 * and V (dO's copies go out before the S products, over Q's rows, which the warps then hold as
 * fragments); each lane keeps its pairs' sums in registers (rows g and g + 8 of its warp's 16, keys
 * 8 n + 2t and + 1: the mma accumulator layout). With the rows broadcast a key's sum is each lane's
 * two rows, then the warp's 8 row lanes (a butterfly, the same order every run), then the warps in
 * order. Pairs its query does not see (common.cl's visible_keys: causal, window, key length) get
 * the score -inf, so P = 0 and they add nothing; so do rows whose lse is -inf and rows past seq_q
 * (lse offset +inf). Query tiles that see no key of the tile are skipped by the loop's bounds. Keys
 * at or past the key length are never loaded (zeros in local memory).
 *
 * Local memory: (TQ + TK) rows of HEAD_DIM + 8 halves (35 KB at d = 128) and WARPS * TK floats.
 *
 * Defines: HEAD_DIM (a multiple of 16), D_REAL and NV_ALIGNED (nv_mma_common.cl's: the tensors'
 * head_dim, padded to HEAD_DIM with zeros, and whether rows are copied 16 bytes at a time), BLOCK
 * (TK, a multiple of 16), WARPS, CLFLASH_DTYPE_F16 or _BF16, CAUSAL, WINDOW, SOFTCAP, ALIBI,
 * KEYLEN, BIAS (1), BIAS_PAIRS, and BCAST_BATCH, BCAST_HEADS, BCAST_ROWS (1 for each dimension
 * the bias is shared over).
 */

#define TQ (16 * WARPS) /* query rows of a tile: 16 per warp */
#define TK BLOCK        /* keys of a tile */
#define N_BLOCKS (TK / 8) /* n8 accumulator blocks of a warp's 16 x TK products */
#if TK % 16 != 0
#error "BLOCK must be a multiple of 16"
#endif

#if !defined(BCAST_BATCH) || !defined(BCAST_HEADS) || !defined(BCAST_ROWS)
#error "BCAST_BATCH, BCAST_HEADS and BCAST_ROWS are set by the host (lib/bias_grad.c)"
#endif

/* The shape, layouts and features every term needs. */
typedef struct {
    uint seq_q, seq_k, heads_q, group, win_left, win_right;
    int diag_offset; /* the descriptor's diagonal_offset (common.cl's diagonal_keys) */
    ulong q_off, q_bs, q_hs, q_ss, k_off, k_bs, k_hs, k_ss, v_off, v_bs, v_hs, v_ss, o_off, o_bs, o_hs, o_ss;
    ulong bias_off, bias_bs, bias_hs, bias_rs;
} nbg_args;

/* Issues the copies of `rows` rows from row0 of x (rows at or past `limit` as zeros) into dst. */
static inline void issue_rows(__local ushort *dst, __global const ushort *x, ulong base, ulong ss, uint row0, uint rows,
                              uint limit)
{
    stage_rows(dst, x, base, ss, row0, rows, limit);
    async_commit();
}

/* Waits for this work-item's copies, then for every work-item's (the tiles are complete). */
static inline void tiles_ready(void)
{
    async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* This warp's 16 rows' A fragments of `a` times the TK rows of yt, transposed: out[n] holds keys
 * 8n .. 8n + 7. */
static inline void warp_products(const uint4 *a, __local const ushort *yt, float4 out[N_BLOCKS])
{
#pragma unroll
    for (uint c = 0; c < TK / 16; c++)
        row_products(a, yt + c * 16 * ROW_STRIDE, &out[2 * c], &out[2 * c + 1]);
}

/* x where P is nonzero, else 0: a pair that does not count adds exactly nothing (as in bias_grad.cl). */
static inline float4 counted(float4 ds, float4 p)
{
    return (float4)(p.x != 0.0f ? ds.x : 0.0f, p.y != 0.0f ? ds.y : 0.0f, p.z != 0.0f ? ds.z : 0.0f,
                    p.w != 0.0f ? ds.w : 0.0f);
}

/* Adds this lane's terms of query tile q0 and key tile k0 of (b, h) to acc. Every work-item of the
 * group calls it (it stages the tiles, with barriers). */
static inline void tile_terms(const nbg_args *a, __global const ushort *q, __global const ushort *k,
                              __global const ushort *v, __global const ushort *d_o, __global const float *lse,
                              __global const float *dvec, __global const float *bias, __local ushort *xt,
                              __local ushort *yt, uint q0, uint k0, uint b, uint h, uint key_len, float slope_l2,
                              const score_consts *sc, float4 acc[N_BLOCKS])
{
    const uint lane = get_local_id(0) % 32, warp = get_local_id(0) / 32;
    const uint g = lane / 4, t = lane % 4;
    const uint hk = h / a->group;
    const ulong q_base = a->q_off + (ulong)b * a->q_bs + (ulong)h * a->q_hs;
    const ulong o_base = a->o_off + (ulong)b * a->o_bs + (ulong)h * a->o_hs;
    const ulong k_base = a->k_off + (ulong)b * a->k_bs + (ulong)hk * a->k_hs;
    const ulong v_base = a->v_off + (ulong)b * a->v_bs + (ulong)hk * a->v_hs;
    const long diag_k = diagonal_keys(key_len, a->seq_k, a->diag_offset);
    const long shift = diag_k - (long)a->seq_q;
    /* The lane's rows g and g + 8 of the warp's 16 (rows past seq_q read the last row's data: their
     * lse offset is +inf, so P = 0). Their statistics are loaded first, so that the loads overlap
     * the copies of Q and K. */
    const uint row_lo = q0 + warp * 16 + g, row_hi = row_lo + 8;
    const uint rl = min(row_lo, a->seq_q - 1), rh = min(row_hi, a->seq_q - 1);
    const ulong bh = (ulong)b * a->heads_q + h;
    const float off_lo = row_lo < a->seq_q ? lse_offset(lse[bh * a->seq_q + rl]) : INFINITY;
    const float off_hi = row_hi < a->seq_q ? lse_offset(lse[bh * a->seq_q + rh]) : INFINITY;
    const float4 offs = (float4)(off_lo, off_lo, off_hi, off_hi);
    const float4 dd = (float4)(dvec[bh * a->seq_q + rl], dvec[bh * a->seq_q + rl], dvec[bh * a->seq_q + rh],
                               dvec[bh * a->seq_q + rh]);
    long lo_lo, hi_lo, lo_hi, hi_hi;
    visible_keys(rl, a->seq_q, diag_k, key_len, a->win_left, a->win_right, &lo_lo, &hi_lo);
    visible_keys(rh, a->seq_q, diag_k, key_len, a->win_left, a->win_right, &lo_hi, &hi_hi);
    __global const float *bias_head = bias + a->bias_off + (ulong)b * a->bias_bs + (ulong)h * a->bias_hs;
    __global const float *bias_lo = bias_head + (ulong)rl * a->bias_rs;
    __global const float *bias_hi = bias_head + (ulong)rh * a->bias_rs;

    float4 s[N_BLOCKS], dp[N_BLOCKS];
    uint4 frag[K_STEPS];
    /* Q and K; Q's rows go to registers, and dO's copies into their place go out before S is
     * computed, V's into K's place after it; the bias is read and S transformed and masked while
     * those copies are in flight. */
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the previous tiles */
    issue_rows(xt, q, q_base, a->q_ss, q0, TQ, a->seq_q);
    issue_rows(yt, k, k_base, a->k_ss, k0, TK, key_len);
    tiles_ready();
    load_row_fragments(xt, warp * 16, frag);
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has Q's fragments */
    issue_rows(xt, d_o, o_base, a->o_ss, q0, TQ, a->seq_q);
    warp_products(frag, yt, s);
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with K */
    issue_rows(yt, v, v_base, a->v_ss, k0, TK, key_len);
#pragma unroll
    for (uint n = 0; n < N_BLOCKS; n++) {
        const uint key = k0 + 8 * n + 2 * t; /* x, z: key; y, w: key + 1 */
        const float2 b_lo = bias_pair(bias_lo, key, a->seq_k), b_hi = bias_pair(bias_hi, key, a->seq_k);
        const float dist_lo = (float)((long)row_lo + shift - (long)key);
        const float dist_hi = (float)((long)row_hi + shift - (long)key);
        float4 grad; /* the softcap's derivative: not part of dBias (the bias is added after it) */
        const float4 x = feature_scores(s[n], (float4)(b_lo.x, b_lo.y, b_hi.x, b_hi.y),
                                        (float4)(dist_lo, dist_lo - 1.0f, dist_hi, dist_hi - 1.0f), slope_l2, sc,
                                        &grad);
        (void)grad;
        const long kl = (long)key;
        s[n] = mask_scores(x, (int4)(in_range(kl, lo_lo, hi_lo), in_range(kl + 1, lo_lo, hi_lo),
                                     in_range(kl, lo_hi, hi_hi), in_range(kl + 1, lo_hi, hi_hi)),
                           -INFINITY);
    }
    tiles_ready();
    load_row_fragments(xt, warp * 16, frag);
    warp_products(frag, yt, dp);
#pragma unroll
    for (uint n = 0; n < N_BLOCKS; n++) {
        float4 p, ds;
        probabilities(s[n], dp[n], offs, dd, 1.0f, &p, &ds); /* scores are in log2 units (TRANSFORMS) */
        acc[n] += counted(ds, p);
    }
}

/* The query tiles [*t_lo, *t_hi) with a row that may see a key of [k0, k_end) (a superset is
 * harmless: every pair is still tested). */
static inline void seeing_tiles(const nbg_args *a, uint k0, uint k_end, uint key_len, uint *t_lo, uint *t_hi)
{
    uint qb, qe;
    key_block_queries(k0, k_end, a->seq_q, diagonal_keys(key_len, a->seq_k, a->diag_offset), key_len, a->win_left,
                      a->win_right, &qb, &qe);
    *t_lo = qb / TQ;
    *t_hi = (qe + TQ - 1) / TQ;
}

/* The grid is (row tiles * key tiles * THREADS, heads of the bias layout, batch entries of the
 * bias layout): 1 for a broadcast dimension, and one row tile when the rows are broadcast. The
 * arguments are bias_grad.cl's. */
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
nv_mma_bias_grad(__global const ushort *q, __global const ushort *k, __global const ushort *v,
                 __global const ushort *d_o, __global const float *lse, __global const float *dvec,
                 __global const float *bias, __global float *dbias, __global const float *alibi,
                 __global const int *key_lens, uint batch, uint heads_q, uint group, uint seq_q, uint seq_k,
                 uint key_tiles, float scale, float softcap, uint win_left, uint win_right, int diag_offset,
                 ulong q_off, ulong q_bs,
                 ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs,
                 ulong v_hs, ulong v_ss, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, ulong bias_off,
                 ulong bias_bs, ulong bias_hs, ulong bias_rs)
{
    /* uint4 elements: cp.async and ldmatrix need 16-byte aligned rows */
    __local uint4 words[(TQ + TK) * ROW_STRIDE / 8];
    __local ushort *const xt = (__local ushort *)words; /* Q, then dO */
    __local ushort *const yt = xt + TQ * ROW_STRIDE;     /* K, then V */
    __local float sums[WARPS * TK];                      /* with the rows broadcast: [warp][key] */
    const nbg_args a = {seq_q, seq_k, heads_q, group, win_left, win_right, diag_offset, q_off, q_bs, q_hs, q_ss,
                        k_off, k_bs,  k_hs,    k_ss,  v_off,    v_bs,      v_hs,     v_ss,    o_off,   o_bs,
                        o_hs,  o_ss,  bias_off, bias_bs, bias_hs, bias_rs};
    const score_consts sc = make_score_consts(scale, softcap);
    const uint lane = get_local_id(0) % 32, warp = get_local_id(0) / 32;
    const uint g = lane / 4, t = lane % 4;
    const uint row_tile = get_group_id(0) / key_tiles, k0 = get_group_id(0) % key_tiles * TK;
    const uint k_end = min(k0 + TK, seq_k);
    const bias_grad_cover cov =
        bias_grad_group_cover(BCAST_BATCH, BCAST_HEADS, BCAST_ROWS, batch, heads_q, (seq_q + TQ - 1) / TQ, row_tile);
    (void)alibi;

    float4 acc[N_BLOCKS];
#pragma unroll
    for (uint n = 0; n < N_BLOCKS; n++)
        acc[n] = (float4)(0.0f);
    for (uint b = cov.b_first; b < cov.b_end; b++) {
        const uint key_len = batch_key_len(key_lens, b, seq_k);
        for (uint h = cov.h_first; h < cov.h_end; h++) {
#if ALIBI
            const float slope_l2 = alibi[h] * M_LOG2E_F;
#else
            const float slope_l2 = 0.0f;
#endif
            uint t_lo, t_hi;
            seeing_tiles(&a, k0, k_end, key_len, &t_lo, &t_hi);
            t_lo = max(t_lo, cov.t_first);
            t_hi = min(t_hi, cov.t_end);
            for (uint qt = t_lo; qt < t_hi; qt++)
                tile_terms(&a, q, k, v, d_o, lse, dvec, bias, xt, yt, qt * TQ, k0, b, h, key_len, slope_l2, &sc,
                           acc);
        }
    }

#if BCAST_ROWS
    /* each key's sum: the lane's two rows, the warp's 8 row lanes (g), then the warps in order */
#pragma unroll
    for (uint n = 0; n < N_BLOCKS; n++) {
        float c0 = acc[n].x + acc[n].z, c1 = acc[n].y + acc[n].w;
        for (uint mask = 4; mask < 32; mask *= 2) {
            c0 += lane_xor(c0, mask);
            c1 += lane_xor(c1, mask);
        }
        if (g == 0) {
            sums[warp * TK + 8 * n + 2 * t] = c0;
            sums[warp * TK + 8 * n + 2 * t + 1] = c1;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint j = get_local_id(0); j < TK; j += THREADS) {
        float total = 0.0f;
        for (uint w = 0; w < WARPS; w++)
            total += sums[w * TK + j];
        if (k0 + j < seq_k)
            dbias[bias_off + (ulong)cov.ob * bias_bs + (ulong)cov.oh * bias_hs + k0 + j] = total;
    }
#else
    (void)sums;
    const uint row_lo = row_tile * TQ + warp * 16 + g, row_hi = row_lo + 8;
    __global float *const out = dbias + bias_off + (ulong)cov.ob * bias_bs + (ulong)cov.oh * bias_hs;
#pragma unroll
    for (uint n = 0; n < N_BLOCKS; n++) {
        const uint key = k0 + 8 * n + 2 * t;
        if (row_lo < seq_q) {
            if (key < seq_k)
                out[(ulong)row_lo * bias_rs + key] = acc[n].x;
            if (key + 1 < seq_k)
                out[(ulong)row_lo * bias_rs + key + 1] = acc[n].y;
        }
        if (row_hi < seq_q) {
            if (key < seq_k)
                out[(ulong)row_hi * bias_rs + key] = acc[n].z;
            if (key + 1 < seq_k)
                out[(ulong)row_hi * bias_rs + key + 1] = acc[n].w;
        }
    }
#endif
}
