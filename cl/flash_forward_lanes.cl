/*
 * flash_forward_lanes.cl - the portable FlashAttention forward's lane-per-row path: exact attention
 * by tiles and an online softmax, in plain OpenCL C 1.2, with TPR work-items per query row. The
 * host prepends common.cl.
 *
 * Why a file of its own: the portable forward has three paths, one file each, chosen by the planner
 * (lib/forward_plan.c). This one is the original GPU path, kept so that it and the register-tiled
 * path (flash_forward_regtile.cl, the GPU default) can both be measured: it is built where the CPU
 * path (flash_forward_cpu.cl) does not apply and the context forces threads_per_row or the tuning
 * setting portable.regtile=0 asks for it (see clflash.h). Its plans report the kernel variant
 * "flash_forward_portable". The rules all three paths share (the log2 domain, visible_keys, the
 * skipped key tiles, the -INFINITY guards, rows that see no key, split-KV and GQA packing) are
 * common.cl's, beside FORWARD_PARAMS.
 *
 * The lane-per-row path. One work-group computes BLOCK query rows of one (batch, head). TPR
 * work-items share each row (work-item lid owns row lid / TPR, lane t = lid % TPR), so the
 * work-group has BLOCK*TPR items.
 * The grid is (query blocks * BLOCK*TPR, heads_q, batch): the blocks of one head run side by side
 * and share its K and V in cache.
 * Local tiles:
 *   qt[BLOCK][LDS_STRIDE]   the Q block, storage bits, loaded once;
 *   kt[HEAD_DIM][KT_STRIDE] the current K block, transposed, so a lane's keys are consecutive;
 *   vt[BLOCK][LDS_STRIDE]   the current V block, storage bits;
 *   pt[BLOCK][P_STRIDE]     the current block of probabilities, fp32, key-major (pt[j][row]);
 *   rowmax[BLOCK][TPR]      each lane's partial maximum of its row's scores.
 * The strides are padded by the host so that neighbouring rows fall in different memory banks.
 * The score loop runs over head_dim outside and keys inside: each Q element is loaded once for
 * BLOCK/TPR independent accumulators, which a GPU keeps in registers and PoCL vectorizes.
 * Per K/V tile, with the barrier that protects each step:
 *   B1  every read of kt, vt, pt, rowmax of the previous tile (and the qt stores) is finished;
 *       the work-group loads kt and vt.
 *   B2  kt and vt are complete; each lane scores keys lane, lane+TPR, ... of its row into
 *       registers and publishes its partial maximum in rowmax.
 *   B3  rowmax is complete; each lane folds it into the running max m, writes exp2(s - m) for its
 *       keys into pt.
 *   B4  pt is complete; each lane rescales its output columns (lane, lane+TPR, ...) and adds
 *       P V for them; every lane of a row sums the same pt row in the same order, so the running
 *       sum l is identical in all of them.
 * Each score costs one local load per fused multiply-add (kt), and so does P V (vt): this path is
 * bound by local-memory bandwidth on GPUs (13.7 TFLOP/s fp32 on an H200 at d = 64).
 *
 * Defines: HEAD_DIM, BLOCK, TPR (work-items per row, a power of two dividing BLOCK), LDS_STRIDE,
 * KT_STRIDE, P_STRIDE, the storage types and feature switches of common.cl (VARLEN included),
 * WITH_LSE, SPLIT, PACK.
 */
#ifndef SPLIT
#error "a forward kernel is built with SPLIT and PACK (lib/dispatch_util.c, clflash_forward_defines)"
#endif
#if PACK > 1
#error "only the register-tiled path packs GQA heads"
#endif

#define WG_SIZE (BLOCK * TPR)
#define KEYS_PER_LANE (BLOCK / TPR)
#define COLS_PER_LANE ((HEAD_DIM + TPR - 1) / TPR)

/* TPR work-items per query row. The body is a function, always inlined (common.cl's PATH_FUNCTION);
 * its local arrays are declared in the kernel below, at kernel scope as OpenCL C 1.2 requires. */
PATH_FUNCTION void flash_forward_lanes_body(FORWARD_PARAMS, __local bits_t *qt, __local bits_t *kt, __local bits_t *vt,
                                            __local float *pt, __local float *rowmax)
{
    const uint lid = get_local_id(0);
    const uint row = lid / TPR;
    const uint lane = lid % TPR;
    const uint q0 = query_block_index(get_group_id(0), n_splits) * BLOCK;
    const uint h = get_group_id(1);
    const uint b = get_group_id(2);
    const uint hk = h / group;
    const uint qi = q0 + row; /* this row's query index; may be >= n_q in the last block */
    /* the entry's queries and keys: n_q from packed row q_first, n_k from k_first (common.cl's
     * seq_span; seq_q and seq_k, from row 0, without VARLEN) */
    uint q_first, k_first;
    const uint n_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_first);
    const uint n_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_first);
    /* A block past a short sequence's queries (VARLEN) visits no key tile and stores nothing (no
     * early return: see flash_forward_regtile.cl). */
    const bool live = q0 < n_q;

    const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, q_first);
    const ulong kbase = kv_head_base(k_off, k_bs, k_hs, b, hk) + (ulong)k_first * k_ss;
    const ulong vbase = kv_head_base(v_off, v_bs, v_hs, b, hk) + (ulong)k_first * v_ss;
    __global const int *const pages = kv_page_row(block_table, pages_per_seq, b);

    for (uint idx = lid; idx < BLOCK * HEAD_DIM; idx += WG_SIZE) {
        const uint r = idx / HEAD_DIM, c = idx % HEAD_DIM;
        qt[r * LDS_STRIDE + c] = (q0 + r < n_q) ? q[qbase + (ulong)(q0 + r) * q_ss + c] : zero_bits;
    }

    /* The key tiles the block visits (block_key_range) and the keys this row sees, [lo, hi). */
    const uint key_len = batch_key_len(key_lens, b, n_k);
    const long diag_k = diagonal_keys(key_len, n_k, diag_offset);
    long lo, hi;
    uint key_begin = 0, key_end = 0;
    if (live)
        block_key_range(q0, BLOCK, n_q, diag_k, key_len, win_left, win_right, BLOCK, &key_begin, &key_end);
    split_part(get_group_id(0), n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);
    visible_keys(min(qi, max(n_q, 1u) - 1), n_q, diag_k, key_len, win_left, win_right, &lo, &hi);
    const float slope = alibi_slope(alibi, h);
#if BIAS
    const ulong bias_row = bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs + (ulong)min(qi, max(n_q, 1u) - 1) * bias_rs;
#endif

    float m = -INFINITY; /* running max of this row's scores, log2 domain */
    float l = 0.0f;      /* running sum of exp2(score - m) */
    float acc[COLS_PER_LANE];
    for (uint cc = 0; cc < COLS_PER_LANE; cc++)
        acc[cc] = 0.0f;

    for (uint k0 = key_begin; k0 < key_end; k0 += BLOCK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
        for (uint idx = lid; idx < BLOCK * HEAD_DIM; idx += WG_SIZE) {
            const uint r = idx / HEAD_DIM, c = idx % HEAD_DIM;
            const bool in = k0 + r < n_k;
            kt[c * KT_STRIDE + r] = in ? k[kv_row(kbase, k_bs, k_ss, pages, num_pages, k0 + r) + c] : zero_bits;
            vt[r * LDS_STRIDE + c] = in ? v[kv_row(vbase, v_bs, v_ss, pages, num_pages, k0 + r) + c] : zero_bits;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* B2 */

        float s[KEYS_PER_LANE];
        for (uint kk = 0; kk < KEYS_PER_LANE; kk++)
            s[kk] = 0.0f;
        /* c outer, keys inner: one Q element serves KEYS_PER_LANE independent accumulators, and
         * the inner loop reads consecutive keys of the transposed K tile. */
        for (uint c = 0; c < HEAD_DIM; c++) {
            const float qc = load_l(qt, row * LDS_STRIDE + c);
            for (uint kk = 0; kk < KEYS_PER_LANE; kk++)
                s[kk] = fma(qc, load_l(kt, c * KT_STRIDE + lane + kk * TPR), s[kk]);
        }
        float lane_max = -INFINITY;
        for (uint kk = 0; kk < KEYS_PER_LANE; kk++) {
            const uint key = k0 + lane + kk * TPR;
            const bool visible = qi < n_q && (long)key >= lo && (long)key < hi;
#if SOFTCAP || BIAS || ALIBI
#if BIAS
            const float bias_v = visible ? bias[bias_row + key] : 0.0f;
#else
            const float bias_v = 0.0f;
#endif
            const float x = transform_score(s[kk] * score_scale, softcap, bias_v, slope, qi, key, n_q, diag_k) * M_LOG2E_F;
#else
            const float x = s[kk] * score_scale; /* score_scale includes log2(e) */
#endif
            s[kk] = visible ? x : -INFINITY;
            lane_max = fmax(lane_max, s[kk]);
        }
        rowmax[row * TPR + lane] = lane_max;
        barrier(CLK_LOCAL_MEM_FENCE); /* B3 */

        float tile_max = -INFINITY;
        for (uint u = 0; u < TPR; u++)
            tile_max = fmax(tile_max, rowmax[row * TPR + u]);
        const float m_new = fmax(m, tile_max);
        const float ref = (m_new == -INFINITY) ? 0.0f : m_new;
        const float alpha = exp2(m - ref); /* 0 while nothing was seen: l and acc are 0 then */
        for (uint kk = 0; kk < KEYS_PER_LANE; kk++)
            pt[(lane + kk * TPR) * P_STRIDE + row] = exp2(s[kk] - ref);
        m = m_new;
        barrier(CLK_LOCAL_MEM_FENCE); /* B4 */

        float tile_sum = 0.0f;
        for (uint cc = 0; cc < COLS_PER_LANE; cc++)
            acc[cc] *= alpha;
        for (uint j = 0; j < BLOCK; j++) {
            const float p = pt[j * P_STRIDE + row];
            tile_sum += p;
            if (p == 0.0f)
                continue; /* a key this row does not see adds nothing, not even a NaN of its V */
            for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
                const uint c = lane + cc * TPR;
                if (c < HEAD_DIM)
                    acc[cc] = fma(p, load_l(vt, j * LDS_STRIDE + c), acc[cc]);
            }
        }
        l = l * alpha + tile_sum;
    }

    if (qi < n_q) {
        /* l == 0: the row saw no key (O = 0, lse = -inf). A NaN in an input the row sees makes l
         * NaN, and the NaN reaches O and lse. */
        const float inv = l == 0.0f ? 0.0f : out_scale / l;
        const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, out_first(q_first) + qi);
        for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
            const uint c = lane + cc * TPR;
            if (c < HEAD_DIM)
                store_o(o, obase + c, acc[cc] * inv);
        }
#if WITH_LSE
        if (lane == 0)
            lse[out_lse_row0(b, h, heads_q, seq_q, total_q, q_first) + qi] =
                l == 0.0f ? -INFINITY : (m + log2(l)) * M_LN2_F;
#endif
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flash_forward_lanes(FORWARD_PARAMS)
{
    __local bits_t qt[BLOCK * LDS_STRIDE];
    __local bits_t kt[HEAD_DIM * KT_STRIDE]; /* transposed: kt[c][j] */
    __local bits_t vt[BLOCK * LDS_STRIDE];
    __local float pt[BLOCK * P_STRIDE];
    __local float rowmax[BLOCK * TPR];

    flash_forward_lanes_body(FORWARD_ARGS, qt, kt, vt, pt, rowmax);
}
