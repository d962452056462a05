/*
 * naive_attention.cl - the baseline: attention that materializes the score matrix.
 * The host prepends common.cl and enqueues three kernels per group of heads, then one naive_store:
 *   naive_scores   S = scale * Q K^T, then softcap, bias and ALiBi; keys a query does not see
 *                  (causal, window, key padding: common.cl's visible_keys) are -INFINITY. S is
 *                  stored in the output type in a temporary [heads][seq_q][seq_k] buffer: the
 *                  O(n^2) bytes flash never writes;
 *   naive_softmax  reads each S row twice (max and sum, then normalise) and writes P over it;
 *   naive_pv       O = P V / rowsum(P): dividing by the sum of the stored P undoes its rounding
 *                  in f16 or bf16 (which could otherwise push O = 65504 to infinity).
 * naive_softmax and naive_pv write the call's own temporaries (lse and O, contiguous); one
 * naive_store at the end copies them to the caller's lse and O. It is the only command of a call
 * that writes a caller buffer, and the host enqueues it only once every command before it was
 * enqueued, so a failed call writes no caller buffer (see lib/naive.c).
 * The two products are 16x16 tiled matrix products through local memory (TS = 16): every
 * work-item loads one element of each tile, B1 makes the tiles complete before they are read, and
 * B2 keeps the next load from overwriting a tile that is still being read.
 */
#define TS 16

__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
naive_scores(__global const bits_t *q, __global const bits_t *k, __global out_t *s, uint seq_q,
             uint seq_k, uint heads_q, uint group, uint bh0, float scale, ulong q_off, ulong q_bs,
             ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss, uint win_left,
             uint win_right, int diag_offset, float softcap, __global const float *bias, ulong bias_off, ulong bias_bs,
             ulong bias_hs, ulong bias_rs, __global const float *alibi, __global const int *key_lens)
{
    __local float qs[TS][TS + 1];
    __local float ks[TS][TS + 1];
    const uint tx = get_local_id(0), ty = get_local_id(1);
    const uint j0 = get_group_id(0) * TS, i0 = get_group_id(1) * TS;
    const uint hb = get_group_id(2), bh = bh0 + hb;
    const uint b = bh / heads_q, h = bh % heads_q, hk = h / group;
    const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, 0);
    const ulong kbase = tensor_index(k_off, k_bs, k_hs, k_ss, b, hk, 0);

    float acc = 0.0f;
    /* one tile of columns at a time: unrolled, the loads of every tile are hoisted and spill on
     * RDNA 3 and GCN (clang 15, 128 VGPRs for a wave32 work-group of 256) */
#pragma unroll 1
    for (uint c0 = 0; c0 < HEAD_DIM; c0 += TS) {
        const uint c = c0 + tx;
        qs[ty][tx] = (i0 + ty < seq_q && c < HEAD_DIM) ? load_g(q, qbase + (ulong)(i0 + ty) * q_ss + c) : 0.0f;
        ks[ty][tx] = (j0 + ty < seq_k && c < HEAD_DIM) ? load_g(k, kbase + (ulong)(j0 + ty) * k_ss + c) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
        for (uint cc = 0; cc < TS; cc++)
            acc = fma(qs[ty][cc], ks[tx][cc], acc);
        barrier(CLK_LOCAL_MEM_FENCE); /* B2 */
    }
    const uint i = i0 + ty, j = j0 + tx;
    if (i < seq_q && j < seq_k) {
        const uint key_len = batch_key_len(key_lens, b, seq_k);
        const long diag_k = diagonal_keys(key_len, seq_k, diag_offset);
        long lo, hi;
        visible_keys(i, seq_q, diag_k, key_len, win_left, win_right, &lo, &hi);
        float x = -INFINITY;
        if ((long)j >= lo && (long)j < hi) {
#if BIAS
            const float bias_v = bias[bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs + (ulong)i * bias_rs + j];
#else
            const float bias_v = 0.0f;
#endif
const float slope = alibi_slope(alibi, h);
            x = transform_score(acc * scale, softcap, bias_v, slope, i, j, seq_q, diag_k);
        }
        store_o(s, ((ulong)hb * seq_q + i) * seq_k + j, x);
    }
}

/* One work-group per row; the grid is (SOFTMAX_WG * seq_q, heads). Each work-item keeps a running (max, sum) over its strided share of the
 * row; a tree in local memory combines them (a barrier after every level); then the row is
 * normalised in place. A row with no visible key gets P = 0 and lse = -INFINITY. */
__kernel __attribute__((reqd_work_group_size(SOFTMAX_WG, 1, 1))) void
naive_softmax(__global out_t *s, __global float *lse, uint seq_q, uint seq_k, uint bh0)
{
    __local float red_m[SOFTMAX_WG];
    __local float red_l[SOFTMAX_WG];
    const uint lid = get_local_id(0);
    const uint i = get_group_id(0), hb = get_group_id(1);
    __global out_t *row = s + ((ulong)hb * seq_q + i) * seq_k;

    float m = -INFINITY, l = 0.0f;
    for (uint j = lid; j < seq_k; j += SOFTMAX_WG) {
        const float x = load_o(row, j);
        if (x > m) {
            l = l * exp(m - x) + 1.0f;
            m = x;
        } else if (x != -INFINITY) {
            l += exp(x - m);
        }
    }
    red_m[lid] = m;
    red_l[lid] = l;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint stride = SOFTMAX_WG / 2; stride > 0; stride >>= 1) {
        if (lid < stride) {
            const float m1 = red_m[lid], m2 = red_m[lid + stride];
            const float mm = fmax(m1, m2);
            /* both maxima -inf: the sums are 0, or NaN from a NaN score, which must survive */
            red_l[lid] = mm == -INFINITY ? red_l[lid] + red_l[lid + stride]
                                         : red_l[lid] * exp(m1 - mm) + red_l[lid + stride] * exp(m2 - mm);
            red_m[lid] = mm;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    /* row_sum == 0: no visible key (P = 0, lse = -inf); a NaN score makes row_sum NaN, and the NaN
     * reaches P and lse. */
    const float row_max = red_m[0], row_sum = red_l[0];
    const float inv = row_sum == 0.0f ? 0.0f : 1.0f / row_sum;
    for (uint j = lid; j < seq_k; j += SOFTMAX_WG)
        store_o(row, j, row_sum == 0.0f ? 0.0f : exp(load_o(row, j) - row_max) * inv);
#if WITH_LSE
    if (lid == 0)
        lse[(ulong)(bh0 + hb) * seq_q + i] = row_sum == 0.0f ? -INFINITY : row_max + log(row_sum);
#else
    (void)lse;
#endif
}

__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
naive_pv(__global const out_t *p, __global const bits_t *v, __global out_t *o, uint seq_q,
         uint seq_k, uint heads_q, uint group, uint bh0, ulong v_off, ulong v_bs, ulong v_hs,
         ulong v_ss, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, float out_scale)
{
    __local float ps[TS][TS + 1];
    __local float vs[TS][TS + 1];
    const uint tx = get_local_id(0), ty = get_local_id(1);
    const uint c0 = get_group_id(0) * TS, i0 = get_group_id(1) * TS;
    const uint hb = get_group_id(2), bh = bh0 + hb;
    const uint b = bh / heads_q, h = bh % heads_q, hk = h / group;
    const ulong vbase = tensor_index(v_off, v_bs, v_hs, v_ss, b, hk, 0);
    const ulong prow = ((ulong)hb * seq_q + i0 + ty) * seq_k;

    float acc = 0.0f, p_sum = 0.0f;
    for (uint j0 = 0; j0 < seq_k; j0 += TS) {
        ps[ty][tx] = (i0 + ty < seq_q && j0 + tx < seq_k) ? load_o(p, prow + j0 + tx) : 0.0f;
        vs[ty][tx] = (j0 + ty < seq_k && c0 + tx < HEAD_DIM) ? load_g(v, vbase + (ulong)(j0 + ty) * v_ss + c0 + tx) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
        for (uint jj = 0; jj < TS; jj++) {
            p_sum += ps[ty][jj];
            if (ps[ty][jj] != 0.0f) /* an unseen key adds nothing, not even a NaN of its V */
                acc = fma(ps[ty][jj], vs[jj][tx], acc);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* B2 */
    }
    const uint i = i0 + ty, c = c0 + tx;
    if (i < seq_q && c < HEAD_DIM)
        store_o(o, tensor_index(o_off, o_bs, o_hs, o_ss, b, h, i) + c,
                p_sum == 0.0f ? 0.0f : acc * (out_scale / p_sum));
}

/* The call's last command: its temporaries (O as [batch][heads][seq_q][HEAD_DIM] in the output
 * type, lse as [batch][heads][seq_q]) copied to the caller's O (any layout) and lse, element for
 * element (no rounding: the same type). A grid-stride loop over rows * HEAD_DIM elements. */
__kernel void naive_store(__global const out_t *o_tmp, __global const float *lse_tmp, __global out_t *o,
                          __global float *lse, uint heads_q, uint seq_q, ulong rows, ulong o_off, ulong o_bs,
                          ulong o_hs, ulong o_ss)
{
    for (ulong e = get_global_id(0); e < rows * HEAD_DIM; e += get_global_size(0)) {
        const ulong row = e / HEAD_DIM;
        const uint c = (uint)(e % HEAD_DIM);
        const uint i = (uint)(row % seq_q), h = (uint)(row / seq_q % heads_q), b = (uint)(row / seq_q / heads_q);
        o[tensor_index(o_off, o_bs, o_hs, o_ss, b, h, i) + c] = o_tmp[e];
#if WITH_LSE
        if (c == 0)
            lse[row] = lse_tmp[row];
#endif
    }
#if !WITH_LSE
    (void)lse_tmp;
    (void)lse;
#endif
}
