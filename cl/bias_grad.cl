/*
 * bias_grad.cl - the bias gradient of the backward pass (clflash_attention_desc.bias_grad): each
 * dBias element is the sum of dS = P (dP - D) over every (batch entry, head, query row) the bias
 * element is added to (its broadcast dimensions), in a fixed order, so the result is deterministic.
 *
 * Why a kernel of its own: the gradient kernels' work-groups own rows of dQ or of dK and dV, while a
 * bias element shared over batch entries, heads or rows collects terms from pairs that many of
 * those work-groups compute. Without atomics the sum needs a work-group that owns the element and
 * visits its pairs in order. This one recomputes S = Q K^T and dP = dO V^T for its tile (half the
 * score work of the backward) from the forward's lse and the backward's D, and needs no memory
 * beyond its local tiles; every device runs it (it is the portable reference, not tuned).
 *
 * A work-group owns TQ x TK = 64 x 64 dBias elements of one (batch entry, head) of the bias layout
 * (one row of TK elements when the rows are broadcast). Work-item (r, c) = (lid / 16, lid % 16)
 * computes the RM x RN = 4 x 4 pairs (query q0 + r + 16 m, key k0 + c + 16 n) of each query tile,
 * from Q, dO, K and V staged in local memory DC columns at a time (each value read from local
 * memory serves four pairs), for each (batch entry, head) the element covers in ascending order and
 * with the rows broadcast for each query tile in ascending order, and keeps its sums in registers;
 * with the rows broadcast a key's sum is then its work-items' own rows in order, then the 16
 * work-items of the key in order. A pair its query does not see (common.cl's visible_keys: causal,
 * window, key length) adds nothing, nor does a row whose lse is -inf or a pair whose score is -inf
 * (P = 0). Query tiles that see no key of the tile are skipped, by the loop's bounds (PoCL
 * miscompiled the same skip written as a branch around the tile's barriers). The score is
 * common.cl's transform_score (softcap, then the bias, then ALiBi), so P is the portable kernels';
 * the bias's own gradient is dS itself (it is added after the softcap).
 *
 * Defines: HEAD_DIM, the storage type (CLFLASH_DTYPE_F32, _F16 or _BF16), CAUSAL, WINDOW, SOFTCAP,
 * ALIBI, KEYLEN (common.cl's feature switches; BIAS is on), and BCAST_BATCH, BCAST_HEADS,
 * BCAST_ROWS (1 for each dimension the bias is shared over).
 */

#define TQ 64          /* query rows of a tile */
#define TK 64          /* keys of a tile */
#define RM 4           /* rows per work-item: r + 16 m, m < RM */
#define RN 4           /* keys per work-item: c + 16 n, n < RN */
#define DC 16          /* columns of head_dim staged at a time */
#define WG 256         /* work-items per work-group: 16 x 16 */

#if !defined(BCAST_BATCH) || !defined(BCAST_HEADS) || !defined(BCAST_ROWS)
#error "BCAST_BATCH, BCAST_HEADS and BCAST_ROWS are set by the host (lib/bias_grad.c)"
#endif

/* Stages rows row0 .. row0 + n - 1 (those below `limit`, else zeros), columns c0 .. c0 + DC - 1 (those
 * below HEAD_DIM, else zeros) of two tensors with the same rows into local tiles as floats. */
static inline void stage_columns(__local float *xt, __local float *yt, __global const bits_t *x, ulong x_base,
                                 ulong x_ss, __global const bits_t *y, ulong y_base, ulong y_ss, uint row0, uint n,
                                 uint limit, uint c0)
{
    for (uint i = get_local_id(0); i < n * DC; i += WG) {
        const uint rr = i / DC, cc = i % DC, col = c0 + cc;
        const bool in = row0 + rr < limit && col < HEAD_DIM;
        xt[rr * (DC + 1) + cc] = in ? load_g(x, x_base + (ulong)(row0 + rr) * x_ss + col) : 0.0f;
        yt[rr * (DC + 1) + cc] = in ? load_g(y, y_base + (ulong)(row0 + rr) * y_ss + col) : 0.0f;
    }
}

/* The shape, layouts and features every term needs. */
typedef struct {
    uint seq_q, seq_k, heads_q, win_left, win_right;
    int diag_offset; /* the descriptor's diagonal_offset (common.cl's diagonal_keys) */
    float scale, softcap;
    ulong q_off, q_bs, q_hs, q_ss, k_off, k_bs, k_hs, k_ss, v_off, v_bs, v_hs, v_ss, o_off, o_bs, o_hs, o_ss;
    ulong bias_off, bias_bs, bias_hs, bias_rs;
} bg_args;

/* Adds this work-item's terms of query tile q0 and key tile k0 of (b, h) to acc: for its pairs
 * (q0 + r + 16 m, k0 + c + 16 n), dS = P (dP - D), or nothing where the pair does not exist, its query
 * does not see the key, the row's lse is -inf or P is 0. Every work-item of the group calls it (it
 * stages the tiles, with barriers). */
static inline void tile_terms(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                              __global const bits_t *d_o, __global const float *lse, __global const float *dvec,
                              __global const float *bias, __local float *qt, __local float *dot, __local float *kt,
                              __local float *vt, uint q0, uint k0, uint b, uint h, uint hk, uint key_len, float slope,
                              const bg_args *a, float acc[RM][RN])
{
    const uint r = get_local_id(0) / 16, c = get_local_id(0) % 16;
    float s[RM][RN], dp[RM][RN];
    for (uint m = 0; m < RM; m++)
        for (uint n = 0; n < RN; n++)
            s[m][n] = dp[m][n] = 0.0f;
    for (uint c0 = 0; c0 < HEAD_DIM; c0 += DC) {
        barrier(CLK_LOCAL_MEM_FENCE); /* every work-item is done with the previous columns */
        stage_columns(qt, dot, q, a->q_off + (ulong)b * a->q_bs + (ulong)h * a->q_hs, a->q_ss, d_o,
                      a->o_off + (ulong)b * a->o_bs + (ulong)h * a->o_hs, a->o_ss, q0, TQ, a->seq_q, c0);
        stage_columns(kt, vt, k, a->k_off + (ulong)b * a->k_bs + (ulong)hk * a->k_hs, a->k_ss, v,
                      a->v_off + (ulong)b * a->v_bs + (ulong)hk * a->v_hs, a->v_ss, k0, TK, a->seq_k, c0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint cc = 0; cc < DC; cc++) {
            float qv[RM], gv[RM], kv[RN], vv[RN];
            for (uint m = 0; m < RM; m++) {
                qv[m] = qt[(r + 16 * m) * (DC + 1) + cc];
                gv[m] = dot[(r + 16 * m) * (DC + 1) + cc];
            }
            for (uint n = 0; n < RN; n++) {
                kv[n] = kt[(c + 16 * n) * (DC + 1) + cc];
                vv[n] = vt[(c + 16 * n) * (DC + 1) + cc];
            }
            for (uint m = 0; m < RM; m++)
                for (uint n = 0; n < RN; n++) {
                    s[m][n] = fma(qv[m], kv[n], s[m][n]);
                    dp[m][n] = fma(gv[m], vv[n], dp[m][n]);
                }
        }
    }
    /* the terms, computed with the indices clamped into the tensors and kept only where they count
     * (no branches around the values carried over the barriers above) */
    const long diag_k = diagonal_keys(key_len, a->seq_k, a->diag_offset);
    for (uint m = 0; m < RM; m++) {
        const uint qi = q0 + r + 16 * m, qc = min(qi, a->seq_q - 1);
        long lo, hi;
        visible_keys(qc, a->seq_q, diag_k, key_len, a->win_left, a->win_right, &lo, &hi);
        const ulong row = ((ulong)b * a->heads_q + h) * a->seq_q + qc;
        const float l = lse[row], d_row = dvec[row];
        __global const float *bias_row = bias + a->bias_off + (ulong)b * a->bias_bs + (ulong)h * a->bias_hs +
                                         (ulong)qc * a->bias_rs;
        for (uint n = 0; n < RN; n++) {
            const uint kj = k0 + c + 16 * n, kc = min(kj, a->seq_k - 1);
            const float f = transform_score(s[m][n] * a->scale, a->softcap, bias_row[kc], slope, qc, kc, a->seq_q,
                                            diag_k);
            const float p = exp2(fma(f, M_LOG2E_F, -l * M_LOG2E_F));
            const int counts = qi < a->seq_q && kj < a->seq_k && (long)kj >= lo && (long)kj < hi &&
                               l != -INFINITY && p > 0.0f;
            acc[m][n] += counts ? p * (dp[m][n] - d_row) : 0.0f;
        }
    }
}

/* The query tiles [*t_lo, *t_hi) with a row that may see a key of [k0, k_end) (common.cl's
 * key_block_queries; a superset is harmless: every pair is still tested). */
static inline void seeing_tiles(uint k0, uint k_end, uint key_len, const bg_args *a, uint *t_lo, uint *t_hi)
{
    uint qb, qe;
    key_block_queries(k0, k_end, a->seq_q, diagonal_keys(key_len, a->seq_k, a->diag_offset), key_len, a->win_left,
                      a->win_right, &qb, &qe);
    *t_lo = qb / TQ;
    *t_hi = (qe + TQ - 1) / TQ;
}

/* The grid is (row tiles * key tiles * WG, heads of the bias layout, batch entries of the bias
 * layout): 1 for a broadcast dimension, and one row tile when the rows are broadcast. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
bias_grad(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v, __global const bits_t *d_o,
          __global const float *lse, __global const float *dvec, __global const float *bias, __global float *dbias,
          __global const float *alibi, __global const int *key_lens, uint batch, uint heads_q, uint group,
          uint seq_q, uint seq_k, uint key_tiles, float scale, float softcap, uint win_left, uint win_right,
          int diag_offset, ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, ulong k_hs,
          ulong k_ss, ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss,
          ulong bias_off, ulong bias_bs, ulong bias_hs, ulong bias_rs)
{
    __local float qt[TQ * (DC + 1)], dot[TQ * (DC + 1)], kt[TK * (DC + 1)], vt[TK * (DC + 1)];
    __local float sums[16 * TK]; /* with the rows broadcast: [key][r] partial sums */
    const bg_args a = {seq_q, seq_k, heads_q, win_left, win_right, diag_offset, scale, softcap, q_off, q_bs, q_hs, q_ss,
                       k_off, k_bs,  k_hs,    k_ss,     v_off,     v_bs,  v_hs,    v_ss,  o_off, o_bs, o_hs,
                       o_ss,  bias_off, bias_bs, bias_hs, bias_rs};
    const uint lid = get_local_id(0), r = lid / 16, c = lid % 16;
    const uint row_tile = get_group_id(0) / key_tiles, k0 = get_group_id(0) % key_tiles * TK;
    const uint k_end = min(k0 + TK, seq_k);
    const bias_grad_cover cov =
        bias_grad_group_cover(BCAST_BATCH, BCAST_HEADS, BCAST_ROWS, batch, heads_q, (seq_q + TQ - 1) / TQ, row_tile);
    (void)alibi;

    float acc[RM][RN];
    for (uint m = 0; m < RM; m++)
        for (uint n = 0; n < RN; n++)
            acc[m][n] = 0.0f;
    for (uint b = cov.b_first; b < cov.b_end; b++) {
        const uint key_len = batch_key_len(key_lens, b, seq_k);
        for (uint h = cov.h_first; h < cov.h_end; h++) {
            const float slope = alibi_slope(alibi, h);
            /* only the query tiles whose rows can see a key of [k0, k_end): the loop bounds, not a
             * branch, skip the rest (PoCL wants its barriers out of branches) */
            uint t_lo, t_hi;
            seeing_tiles(k0, k_end, key_len, &a, &t_lo, &t_hi);
            t_lo = max(t_lo, cov.t_first);
            t_hi = min(t_hi, cov.t_end);
            for (uint t = t_lo; t < t_hi; t++)
                tile_terms(q, k, v, d_o, lse, dvec, bias, qt, dot, kt, vt, t * TQ, k0, b, h, h / group, key_len, slope,
                           &a, acc);
        }
    }

#if BCAST_ROWS
    /* each key's sum: the work-item's own rows in order, then the 16 work-items of the key in order */
    for (uint n = 0; n < RN; n++) {
        float own = 0.0f;
        for (uint m = 0; m < RM; m++)
            own += acc[m][n];
        sums[(c + 16 * n) * 16 + r] = own;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (r == 0)
        for (uint n = 0; n < RN; n++) {
            const uint kj = k0 + c + 16 * n;
            float total = 0.0f;
            for (uint rr = 0; rr < 16; rr++)
                total += sums[(c + 16 * n) * 16 + rr];
            if (kj < seq_k)
                dbias[bias_off + (ulong)cov.ob * bias_bs + (ulong)cov.oh * bias_hs + kj] = total;
        }
#else
    (void)sums;
    for (uint m = 0; m < RM; m++) {
        const uint oi = row_tile * TQ + r + 16 * m;
        for (uint n = 0; n < RN; n++) {
            const uint kj = k0 + c + 16 * n;
            if (oi < seq_q && kj < seq_k)
                dbias[bias_off + (ulong)cov.ob * bias_bs + (ulong)cov.oh * bias_hs + (ulong)oi * bias_rs + kj] =
                    acc[m][n];
        }
    }
#endif
}
