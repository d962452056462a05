/*
 * naive_backward.cl - the textbook attention backward on the materialized path, the baseline the
 * flash backward is measured against. The host prepends common.cl and, per chunk of query heads
 * (as many as one allocation of each matrix allows, and at most half the device's global memory
 * for all of them), enqueues:
 *   naive_bwd_products  P = exp(f(scale * Q K^T) - lse) (0 where masked or lse = -inf), with f the
 *                       forward's score transform (softcap, bias, ALiBi: common.cl), and
 *                       dP = dO V^T, both fp32, into two [heads][seq_q][seq_k] buffers; with
 *                       softcap also f' = 1 - tanh^2(s / softcap) into a third;
 *   naive_bwd_softmax   per row D = sum_j P*dP, then dS = P * (dP - D) (times f' with softcap)
 *                       written over dP: the gradient with respect to the scaled score;
 *   naive_bwd_dq        dS K into an fp32 accumulator [batch*heads_q][seq_q][head_dim];
 *   naive_bwd_dkdv      for each kv head whose group has query heads in the chunk:
 *                       dS^T Q and P^T dO over those heads, into fp32 accumulators
 *                       [batch*heads_kv][seq_k][head_dim] (the chunk holding a group's first head
 *                       writes, later chunks add: a fixed order, so the result is deterministic);
 * and finally naive_bwd_store writes dQ = scale * acc_q, dK = scale * acc_k and dV = acc_v in the
 * storage type and layouts: the only kernel that touches the caller's outputs, so a call that fails
 * part-way through its enqueues has written none of them.
 * D is formed from the matrices themselves (the softmax Jacobian), so no kernel here reads O: the
 * call checks the O buffer like the others, and dO is addressed with O's layout, but O's values
 * are never used, which makes this path a second opinion on the flash path's D = rowsum(dO*O).
 * Which keys a query sees is common.cl's visible_keys (causal, window, key lengths), as in the
 * forward; unseen pairs get P = 0 and so add nothing. Bias and ALiBi get no gradient.
 *
 * The products are 16x16 tiled through local memory (TS = 16): every work-item loads one element
 * of each tile, B1 makes the tiles complete before they are read, and B2 keeps the next load from
 * overwriting a tile that is still being read. The row kernel reduces through local memory with a
 * barrier after every level.
 */
#define TS 16

__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
naive_bwd_products(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                   __global const bits_t *d_o, __global const float *lse, __global float *pm,
                   __global float *dpm, uint seq_q, uint seq_k, uint heads_q, uint group, uint bh0,
                   float scale, ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss, ulong k_off,
                   ulong k_bs, ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs, ulong v_hs,
                   ulong v_ss, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, uint win_left,
                   uint win_right, int diag_offset, float softcap, __global const float *bias, ulong bias_off,
                   ulong bias_bs, ulong bias_hs, ulong bias_rs, __global const float *alibi,
                   __global const int *key_lens, __global float *gm)
{
    __local float qs[TS][TS + 1];
    __local float ks[TS][TS + 1];
    __local float os[TS][TS + 1];
    __local float vs[TS][TS + 1];
    const uint tx = get_local_id(0), ty = get_local_id(1);
    const uint j0 = get_group_id(0) * TS, i0 = get_group_id(1) * TS;
    const uint hb = get_group_id(2), bh = bh0 + hb;
    const uint b = bh / heads_q, h = bh % heads_q, hk = h / group;
    const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, 0);
    const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, 0);
    const ulong kbase = tensor_index(k_off, k_bs, k_hs, k_ss, b, hk, 0);
    const ulong vbase = tensor_index(v_off, v_bs, v_hs, v_ss, b, hk, 0);

    float s = 0.0f, dp = 0.0f;
    /* one tile of columns at a time: unrolled, the loads of every tile are hoisted and spill on
     * RDNA 3 and GCN (clang 15, 128 VGPRs for a wave32 work-group of 256) */
#pragma unroll 1
    for (uint c0 = 0; c0 < HEAD_DIM; c0 += TS) {
        const uint c = c0 + tx;
        const bool qin = i0 + ty < seq_q && c < HEAD_DIM, kin = j0 + ty < seq_k && c < HEAD_DIM;
        qs[ty][tx] = qin ? load_g(q, qbase + (ulong)(i0 + ty) * q_ss + c) : 0.0f;
        os[ty][tx] = qin ? load_g(d_o, obase + (ulong)(i0 + ty) * o_ss + c) : 0.0f;
        ks[ty][tx] = kin ? load_g(k, kbase + (ulong)(j0 + ty) * k_ss + c) : 0.0f;
        vs[ty][tx] = kin ? load_g(v, vbase + (ulong)(j0 + ty) * v_ss + c) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
        for (uint cc = 0; cc < TS; cc++) {
            s = fma(qs[ty][cc], ks[tx][cc], s);
            dp = fma(os[ty][cc], vs[tx][cc], dp);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* B2 */
    }
    const uint i = i0 + ty, j = j0 + tx;
    if (i < seq_q && j < seq_k) {
        const float l = lse[(ulong)bh * seq_q + i];
        const uint key_len = batch_key_len(key_lens, b, seq_k);
        const long diag_k = diagonal_keys(key_len, seq_k, diag_offset);
        long lo, hi;
        visible_keys(i, seq_q, diag_k, key_len, win_left, win_right, &lo, &hi);
        const bool seen = l != -INFINITY && (long)j >= lo && (long)j < hi;
        const ulong at = ((ulong)hb * seq_q + i) * seq_k + j;
        float p = 0.0f, slope = 1.0f;
        if (seen) {
#if SOFTCAP || BIAS || ALIBI
#if BIAS
            const float bias_v = bias[bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs + (ulong)i * bias_rs + j];
#else
            const float bias_v = 0.0f;
#endif
const float slope_h = alibi_slope(alibi, h);
            p = exp(transform_score_grad(s * scale, softcap, bias_v, slope_h, i, j, seq_q, diag_k, &slope) - l);
#else
            p = exp(s * scale - l);
#endif
        }
        pm[at] = p;
        dpm[at] = dp;
#if SOFTCAP
        gm[at] = slope;
#endif
    }
    (void)win_left;
    (void)win_right;
    (void)softcap;
    (void)bias;
    (void)bias_off;
    (void)bias_bs;
    (void)bias_hs;
    (void)bias_rs;
    (void)alibi;
    (void)key_lens;
    (void)gm;
}

/* One work-group per row; the grid is (SOFTMAX_WG * seq_q, heads). Each work-item sums its
 * strided share of P*dP, a tree in local memory adds the shares (a barrier after every level),
 * and the row's dS is written over dP (times the softcap derivative gm when SOFTCAP). */
__kernel __attribute__((reqd_work_group_size(SOFTMAX_WG, 1, 1))) void
naive_bwd_softmax(__global const float *pm, __global float *dpm, uint seq_q, uint seq_k,
                  __global const float *gm)
{
    __local float red[SOFTMAX_WG];
    const uint lid = get_local_id(0);
    const uint i = get_group_id(0), hb = get_group_id(1);
    const ulong row = ((ulong)hb * seq_q + i) * seq_k;

    float sum = 0.0f;
    for (uint j = lid; j < seq_k; j += SOFTMAX_WG)
        sum = fma(pm[row + j], dpm[row + j], sum);
    red[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint stride = SOFTMAX_WG / 2; stride > 0; stride >>= 1) {
        if (lid < stride)
            red[lid] += red[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float d = red[0];
    for (uint j = lid; j < seq_k; j += SOFTMAX_WG) {
#if SOFTCAP
        dpm[row + j] = pm[row + j] * (dpm[row + j] - d) * gm[row + j];
#else
        dpm[row + j] = pm[row + j] * (dpm[row + j] - d);
#endif
    }
    (void)gm;
}

/* acc_q[bh][i][c] = sum_j dS[i][j] K[j][c]; grid (head_dim, seq_q, heads) rounded up to TS. */
__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
naive_bwd_dq(__global const float *dsm, __global const bits_t *k, __global float *acc_q, uint seq_q,
             uint seq_k, uint heads_q, uint group, uint bh0, ulong k_off, ulong k_bs, ulong k_hs,
             ulong k_ss)
{
    __local float ds[TS][TS + 1];
    __local float ks[TS][TS + 1];
    const uint tx = get_local_id(0), ty = get_local_id(1);
    const uint c0 = get_group_id(0) * TS, i0 = get_group_id(1) * TS;
    const uint hb = get_group_id(2), bh = bh0 + hb;
    const uint b = bh / heads_q, h = bh % heads_q, hk = h / group;
    const ulong kbase = tensor_index(k_off, k_bs, k_hs, k_ss, b, hk, 0);
    const ulong srow = ((ulong)hb * seq_q + i0 + ty) * seq_k;

    float acc = 0.0f;
    for (uint j0 = 0; j0 < seq_k; j0 += TS) {
        ds[ty][tx] = (i0 + ty < seq_q && j0 + tx < seq_k) ? dsm[srow + j0 + tx] : 0.0f;
        ks[ty][tx] = (j0 + ty < seq_k && c0 + tx < HEAD_DIM) ? load_g(k, kbase + (ulong)(j0 + ty) * k_ss + c0 + tx) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
        for (uint jj = 0; jj < TS; jj++)
            acc = fma(ds[ty][jj], ks[jj][tx], acc);
        barrier(CLK_LOCAL_MEM_FENCE); /* B2 */
    }
    const uint i = i0 + ty, c = c0 + tx;
    if (i < seq_q && c < HEAD_DIM)
        acc_q[((ulong)bh * seq_q + i) * HEAD_DIM + c] = acc;
}

/* For kv group G = g0 + get_group_id(2) (G = b * heads_kv + hk, whose query heads are the
 * flattened heads G*group .. G*group+group-1): over the heads of the group that lie in this
 * chunk [bh0, bh0 + heads), accumulates dK[j][c] = sum dS[i][j] Q[i][c] and
 * dV[j][c] = sum P[i][j] dO[i][c]; grid (seq_k, head_dim) rounded up to TS (keys first: seq_k
 * may exceed what a later grid dimension allows), local ty = key, tx = column. */
__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
naive_bwd_dkdv(__global const float *pm, __global const float *dsm, __global const bits_t *q,
               __global const bits_t *d_o, __global float *acc_k, __global float *acc_v, uint seq_q,
               uint seq_k, uint heads_q, uint group, uint bh0, uint heads, uint g0, ulong q_off,
               ulong q_bs, ulong q_hs, ulong q_ss, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss)
{
    __local float ps[TS][TS + 1];  /* ps[i][j] */
    __local float dss[TS][TS + 1]; /* dss[i][j] */
    __local float qs[TS][TS + 1];  /* qs[i][c] */
    __local float os[TS][TS + 1];  /* os[i][c] */
    const uint tx = get_local_id(0), ty = get_local_id(1);
    const uint j0 = get_group_id(0) * TS, c0 = get_group_id(1) * TS;
    const uint G = g0 + get_group_id(2);
    const uint first = G * group, lo = max(first, bh0), hi = min(first + group, bh0 + heads);

    float ak = 0.0f, av = 0.0f;
    for (uint bh = lo; bh < hi; bh++) {
        const uint b = bh / heads_q, h = bh % heads_q, hb = bh - bh0;
        const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, 0);
        const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, 0);
        for (uint i0 = 0; i0 < seq_q; i0 += TS) {
            const ulong at = ((ulong)hb * seq_q + i0 + ty) * seq_k + j0 + tx;
            const bool pin = i0 + ty < seq_q && j0 + tx < seq_k;
            const bool cin = i0 + ty < seq_q && c0 + tx < HEAD_DIM;
            ps[ty][tx] = pin ? pm[at] : 0.0f;
            dss[ty][tx] = pin ? dsm[at] : 0.0f;
            qs[ty][tx] = cin ? load_g(q, qbase + (ulong)(i0 + ty) * q_ss + c0 + tx) : 0.0f;
            os[ty][tx] = cin ? load_g(d_o, obase + (ulong)(i0 + ty) * o_ss + c0 + tx) : 0.0f;
            barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
            for (uint ii = 0; ii < TS; ii++) {
                ak = fma(dss[ii][ty], qs[ii][tx], ak);
                av = fma(ps[ii][ty], os[ii][tx], av);
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* B2 */
        }
    }
    const uint j = j0 + ty, c = c0 + tx;
    if (lo < hi && j < seq_k && c < HEAD_DIM) {
        const ulong at = ((ulong)G * seq_k + j) * HEAD_DIM + c;
        if (lo == first) { /* this chunk holds the group's first head */
            acc_k[at] = ak;
            acc_v[at] = av;
        } else {
            acc_k[at] += ak;
            acc_v[at] += av;
        }
    }
}

/* dq = scale * acc_q, dk = scale * acc_k, dv = acc_v, in the storage type and the q, k and v
 * layouts; grid (max(seq_q, seq_k), head_dim, heads_q) with the first two rounded up to TS: work-item
 * (r, c, h) writes row r of query head h and, if h < heads_kv, row r of kv head h, for every batch
 * entry. */
__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
naive_bwd_store(__global const float *acc_q, __global const float *acc_k, __global const float *acc_v,
                __global bits_t *dq, __global bits_t *dk, __global bits_t *dv, uint batch, uint seq_q,
                uint seq_k, uint heads_q, uint heads_kv, float scale, ulong q_off, ulong q_bs, ulong q_hs,
                ulong q_ss, ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs,
                ulong v_hs, ulong v_ss)
{
    const uint r = get_global_id(0), c = get_global_id(1), h = get_global_id(2);
    if (c >= HEAD_DIM)
        return;
    for (uint b = 0; b < batch; b++) {
        if (r < seq_q) {
            const ulong at = (((ulong)b * heads_q + h) * seq_q + r) * HEAD_DIM + c;
            store_g(dq, tensor_index(q_off, q_bs, q_hs, q_ss, b, h, r) + c, acc_q[at] * scale);
        }
        if (r < seq_k && h < heads_kv) {
            const ulong at = (((ulong)b * heads_kv + h) * seq_k + r) * HEAD_DIM + c;
            store_g(dk, tensor_index(k_off, k_bs, k_hs, k_ss, b, h, r) + c, acc_k[at] * scale);
            store_g(dv, tensor_index(v_off, v_bs, v_hs, v_ss, b, h, r) + c, acc_v[at]);
        }
    }
}
