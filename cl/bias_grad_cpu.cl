/*
 * bias_grad_cpu.cl - the bias gradient's CPU path: bias_grad.cl's sums (each dBias element the sum
 * of dS = P (dP - D) over the (batch entry, head, query row) terms it is added to, in a fixed
 * order), laid out for a CPU. The host prepends common.cl.
 *
 * Why a file of its own: bias_grad.cl stages 16 columns of its tiles at a time for a 16 x 16 grid
 * of work-items, a GPU's layout. PoCL runs a work-group as a loop over its work-items between
 * barriers, and there that kernel took 2.5 times as long as the whole backward it belongs to (n =
 * 2048, d = 64, f32, 2 cores). lib/bias_grad.c builds this one where the backward takes its CPU path
 * (clflash_wants_cpu_path: devices of type CPU, or the tuning setting portable.cpu_path=1) and its
 * tiles fit the local memory budget; the grid and the arguments are bias_grad.cl's, with TQ
 * work-items a group.
 *
 * A work-group owns the TK keys k0 .. k0 + TK - 1 of one key tile and, without BCAST_ROWS, the TQ
 * rows of one row tile, of one (batch entry, head) of the bias layout, as in bias_grad.cl.
 * Work-item lid owns query row t * TQ + lid of each query tile t it visits. For each (batch entry,
 * head) the element covers, in ascending order, the key tile's K and V rows are staged as fp32 and
 * transposed (kT, vT: [HEAD_DIM][TK]) between two barriers, where some query tile sees them; then
 * each work-item alone, for each query tile in ascending order (its row tile, or with BCAST_ROWS
 * every tile whose rows may see the keys), loads its query's Q and dO rows, forms S and dP against
 * the TK keys 8 keys at a time (float8 fused multiply-adds down the transposed tiles), P with the
 * forward's transforms (common.cl's transformed_prob8) and adds dS to its TK sums, held in float8
 * registers. Pairs the row does not see add nothing (common.cl's visible_keys: causal, window,
 * key length), nor do rows whose lse is -inf or that lie past seq_q, nor pairs whose bias is -inf;
 * keys past seq_k are zeros in the tiles, and the bias is read only for pairs the row sees.
 * Without BCAST_ROWS each work-item then writes its row of sums; with it the sums of a key are
 * added over the work-items in order, through local memory.
 *
 * Defines: HEAD_DIM, the storage type (CLFLASH_DTYPE_F32, _F16 or _BF16), CAUSAL, WINDOW, SOFTCAP,
 * ALIBI, KEYLEN (common.cl's feature switches; BIAS is on), and BCAST_BATCH, BCAST_HEADS,
 * BCAST_ROWS (1 for each dimension the bias is shared over).
 */

#define TQ 64 /* query rows of a tile: one work-item each */
#define TK 64 /* keys of a tile: TK / 8 float8 sums per work-item */
#define WG TQ /* work-items per work-group */
#if TK != WG
#error "a work-item stages one key row of the tile: TK must equal the work-group size"
#endif

#if !defined(BCAST_BATCH) || !defined(BCAST_HEADS) || !defined(BCAST_ROWS)
#error "BCAST_BATCH, BCAST_HEADS and BCAST_ROWS are set by the host (lib/bias_grad.c)"
#endif

/* The shape, layouts and features every term needs. */
typedef struct {
    uint seq_q, seq_k, heads_q, win_left, win_right;
    float scale, softcap;
    ulong q_off, q_bs, q_hs, q_ss, o_off, o_bs, o_hs, o_ss;
    ulong bias_off, bias_bs, bias_hs, bias_rs;
} bgc_args;

/* Work-item lid stages key row k0 + lid of K and V (zeros at or past seq_k) into column lid of kT
 * and vT, as fp32. */
static inline void stage_keys(__local float *kT, __local float *vT, __global const bits_t *k, ulong k_row0,
                              ulong k_ss, __global const bits_t *v, ulong v_row0, ulong v_ss, uint k0, uint seq_k)
{
    const uint lid = get_local_id(0), key = k0 + lid;
    const bool in = key < seq_k;
    const ulong kr = k_row0 + (ulong)min(key, seq_k - 1) * k_ss, vr = v_row0 + (ulong)min(key, seq_k - 1) * v_ss;
    for (uint c = 0; c < HEAD_DIM; c++) {
        kT[c * TK + lid] = in ? load_g(k, kr + c) : 0.0f;
        vT[c * TK + lid] = in ? load_g(v, vr + c) : 0.0f;
    }
}

/* s[j] = x . kT[.][j] and dp[j] = g . vT[.][j] for the TK staged keys, 8 keys a float8, both
 * products in one pass down the columns. */
static inline void row_scores(const float *x, const float *g, __local const float *kT, __local const float *vT,
                              float8 *s, float8 *dp)
{
    float8 st[TK / 8], pt[TK / 8]; /* copies that do not outlive the call, so that they stay in registers */
    for (uint j8 = 0; j8 < TK / 8; j8++)
        st[j8] = pt[j8] = (float8)(0.0f);
    for (uint c = 0; c < HEAD_DIM; c++) {
        const float8 xc = (float8)(x[c]), gc = (float8)(g[c]);
#pragma unroll
        for (uint j8 = 0; j8 < TK / 8; j8++) {
            st[j8] = fma(xc, vload8(j8, kT + c * TK), st[j8]);
            pt[j8] = fma(gc, vload8(j8, vT + c * TK), pt[j8]);
        }
    }
    for (uint j8 = 0; j8 < TK / 8; j8++) {
        s[j8] = st[j8];
        dp[j8] = pt[j8];
    }
}

/* Adds to acc the terms dS of query qi (of batch entry b, head h) against the staged keys k0 ..
 * k0 + TK - 1: nothing where qi >= seq_q, the row's lse is -inf, or the row does not see the key. */
static inline void add_row_terms(float8 *acc, __global const bits_t *q, __global const bits_t *d_o,
                                 __global const float *lse, __global const float *dvec, __global const float *bias,
                                 __local const float *kT, __local const float *vT, const bgc_args *a, uint b, uint h,
                                 uint qi, uint k0, uint key_len, long diag_k, float slope_h)
{
    const bool row_in = qi < a->seq_q;
    const uint qc = min(qi, a->seq_q - 1);
    const ulong qr = a->q_off + (ulong)b * a->q_bs + (ulong)h * a->q_hs + (ulong)qc * a->q_ss;
    const ulong gr = a->o_off + (ulong)b * a->o_bs + (ulong)h * a->o_hs + (ulong)qc * a->o_ss;
    float x[HEAD_DIM], g[HEAD_DIM];
    for (uint c = 0; c < HEAD_DIM; c++) {
        x[c] = row_in ? load_g(q, qr + c) : 0.0f;
        g[c] = row_in ? load_g(d_o, gr + c) : 0.0f;
    }
    const ulong row = ((ulong)b * a->heads_q + h) * a->seq_q + qc;
    const float l = lse[row], d_row = dvec[row];
    const float l2 = row_in && l != -INFINITY ? l * M_LOG2E_F : -INFINITY;
    long lo, hi;
    visible_keys(qc, a->seq_q, diag_k, key_len, a->win_left, a->win_right, &lo, &hi);
    const ulong bias_row = a->bias_off + (ulong)b * a->bias_bs + (ulong)h * a->bias_hs + (ulong)qc * a->bias_rs;

    float8 s[TK / 8], dp[TK / 8];
    row_scores(x, g, kT, vT, s, dp);
    for (uint j8 = 0; j8 < TK / 8; j8++) {
        float extra[8]; /* transformed_prob8's: the pair's bias, or -INFINITY where the row does not see the key */
        for (uint e = 0; e < 8; e++) {
            const uint key = k0 + 8 * j8 + e;
            const bool seen = l2 != -INFINITY && key < a->seq_k && (long)key >= lo && (long)key < hi;
            extra[e] = seen ? bias[bias_row + key] : -INFINITY;
        }
        /* ALiBi's d - j of keys k0 + 8 * j8 .. + 7, exact in float below 2^24 */
        const float dist0 = (float)((long)qi + diag_k - (long)a->seq_q - (long)(k0 + 8 * j8));
        float8 slope; /* softcap's derivative: not part of the bias's gradient, which is added after it */
        const float8 p = transformed_prob8(s[j8], (float8)(l2), vload8(0, extra),
                                           (float8)(dist0) - (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f),
                                           a->scale, a->softcap, slope_h, &slope);
        acc[j8] += p * (dp[j8] - (float8)(d_row));
    }
}

/* The grid is bias_grad.cl's: (row tiles * key tiles * WG, heads of the bias layout, batch entries
 * of the bias layout), 1 for a broadcast dimension and one row tile when the rows are broadcast. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
bias_grad_cpu(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v, __global const bits_t *d_o,
              __global const float *lse, __global const float *dvec, __global const float *bias,
              __global float *dbias, __global const float *alibi, __global const int *key_lens, uint batch,
              uint heads_q, uint group, uint seq_q, uint seq_k, uint key_tiles, float scale, float softcap,
              uint win_left, uint win_right, int diag_offset, ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss,
              ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss,
              ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, ulong bias_off, ulong bias_bs, ulong bias_hs,
              ulong bias_rs)
{
    __local float kT[HEAD_DIM * TK], vT[HEAD_DIM * TK];
#if BCAST_ROWS
    __local float parts[TK * WG]; /* [key][work-item]: the work-items' sums of each key */
#endif
    const bgc_args a = {seq_q, seq_k, heads_q, win_left, win_right, scale, softcap, q_off, q_bs, q_hs, q_ss,
                        o_off, o_bs,  o_hs,    o_ss,     bias_off,  bias_bs, bias_hs, bias_rs};
    const uint lid = get_local_id(0);
    const uint row_tile = get_group_id(0) / key_tiles, k0 = get_group_id(0) % key_tiles * TK;
    const uint k_end = min(k0 + TK, seq_k);
    const bias_grad_cover cov =
        bias_grad_group_cover(BCAST_BATCH, BCAST_HEADS, BCAST_ROWS, batch, heads_q, (seq_q + TQ - 1) / TQ, row_tile);

    float8 acc[TK / 8];
    for (uint j8 = 0; j8 < TK / 8; j8++)
        acc[j8] = (float8)(0.0f);
    for (uint b = cov.b_first; b < cov.b_end; b++) {
        const uint key_len = batch_key_len(key_lens, b, seq_k);
        const long diag_k = diagonal_keys(key_len, seq_k, diag_offset);
        /* the query tiles with a row that may see a key of the tile (common.cl's key_block_queries) */
        uint qb, qe;
        key_block_queries(k0, k_end, seq_q, diag_k, key_len, win_left, win_right, &qb, &qe);
        const uint t_lo = max(qb / TQ, cov.t_first), t_hi = min((qe + TQ - 1) / TQ, cov.t_end);
        for (uint h = cov.h_first; h < cov.h_end; h++) {
            const uint hk = h / group;
            /* staged only where a tile sees the keys: a loop of 0 or 1 trips, not a branch, around
             * the barriers (PoCL wants its barriers out of branches) */
            for (uint once = t_lo < t_hi ? 0u : 1u; once < 1u; once++) {
                barrier(CLK_LOCAL_MEM_FENCE); /* every work-item is done with the previous keys */
                stage_keys(kT, vT, k, k_off + (ulong)b * k_bs + (ulong)hk * k_hs, k_ss, v,
                           v_off + (ulong)b * v_bs + (ulong)hk * v_hs, v_ss, k0, seq_k);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            const float slope_h = alibi_slope(alibi, h);
            for (uint t = t_lo; t < t_hi; t++)
                add_row_terms(acc, q, d_o, lse, dvec, bias, kT, vT, &a, b, h, t * TQ + lid, k0, key_len, diag_k,
                              slope_h);
        }
    }

    float sums[TK];
    for (uint j8 = 0; j8 < TK / 8; j8++)
        vstore8(acc[j8], j8, sums);
    const ulong out0 = bias_off + (ulong)cov.ob * bias_bs + (ulong)cov.oh * bias_hs;
#if BCAST_ROWS
    /* each key's sum: the work-items' own rows (summed above, tile by tile), then the work-items in
     * order; work-item lid adds key lid's */
    for (uint j = 0; j < TK; j++)
        parts[j * WG + lid] = sums[j];
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = 0.0f;
    for (uint r = 0; r < WG; r++)
        total += parts[lid * WG + r];
    if (k0 + lid < seq_k)
        dbias[out0 + k0 + lid] = total;
#else
    const uint oi = row_tile * TQ + lid;
    for (uint j = 0; j < TK && oi < seq_q; j++)
        if (k0 + j < seq_k)
            dbias[out0 + (ulong)oi * bias_rs + k0 + j] = sums[j];
#endif
}
