/*
 * flash_forward_cpu.cl - the portable FlashAttention forward's CPU path: exact attention by tiles
 * and an online softmax, in plain OpenCL C 1.2, with one work-item per query row and float8
 * arithmetic. The host prepends common.cl.
 *
 * Why a file of its own: the portable forward has three paths, one file each, chosen by the planner
 * (lib/forward_plan.c). This one is for CPU devices (PoCL, Intel's CPU runtime): the planner builds
 * it for devices of type CPU, or for any device with the tuning setting portable.cpu_path=1 (=0
 * gives a CPU the GPU paths), when a row has one work-item and B is a multiple of 8; GPUs never
 * build it. Its plans report the kernel variant "flash_forward_portable", as the lane path's do. A
 * forward with few query rows per K/V head (decoding) takes flash_decode_cpu.cl instead. The rules
 * all three paths share are common.cl's, beside FORWARD_PARAMS.
 *
 * The CPU path. PoCL runs a work-group as a loop over its work-items between barriers, with one
 * work-item per row (TPR = 1, the CPU plan); there the lane path's steps cost more in barriers, in
 * per-work-item state kept across them, and in scalar loads than in arithmetic. This kernel
 * instead
 * keeps its tiles as fp32, K transposed (kf[HEAD_DIM][BLOCK]) and V padded to a multiple of 8
 * columns (vf[BLOCK][HD8]), and has two barriers per tile:
 *   C1  every read of kf and vf of the previous tile is finished; the work-group loads them;
 *   C2  kf and vf are complete; each work-item then does all of its row's work for the tile alone
 *       (a row's scores, maximum and probabilities are its own when TPR == 1): scores on 8 keys at
 *       a time (float8 fused multiply-adds down the transposed K tile), the online-softmax update,
 *       and P V on 8 output columns at a time, the accumulator held in float8 registers.
 * The rules (visibility, transforms, the -INFINITY guards, l == 0 rows) are the lane path's
 * (common.cl's). The Oclgrind driver runs this path through portable.cpu_path=1.
 *
 * Defines: HEAD_DIM, BLOCK (a multiple of 8), the storage types and feature switches of common.cl
 * (VARLEN included), WITH_LSE, SPLIT, PACK (1: the CPU path does not pack GQA heads).
 */
#ifndef SPLIT
#error "a forward kernel is built with SPLIT and PACK (lib/dispatch_util.c, clflash_forward_defines)"
#endif
#if BLOCK % 8 != 0
#error "the CPU path scores 8 keys at a time: BLOCK must be a multiple of 8"
#endif
#if PACK > 1
#error "only the register-tiled path packs GQA heads"
#endif

#define WG_SIZE BLOCK /* one work-item per row */
#define HD8 ((HEAD_DIM + 7) / 8 * 8)

#if SOFTCAP || BIAS || ALIBI
/* common.cl's transform_score on eight consecutive keys key0 .. key0 + 7 of query i (natural-log
 * units in and out), for the CPU path's tiles that the row sees whole: float8 arithmetic that a
 * CPU runs in vector registers, where the per-key loop called a scalar tanh per score (PoCL,
 * n = 2048, d = 64: softcap cost 3.5 times the plain call). tanh is common.cl's tanh8. bias_at
 * is the bias of key key0 of the row. */
static inline float8 transform_scores8(float8 raw, float scale, float softcap, __global const float *bias_at,
                                       float alibi_slope, uint i, uint key0, uint seq_q, long diag_k)
{
#if SOFTCAP
    /* scale / softcap in one product: one step less in the chain that bounds the loop */
    float8 s = softcap * tanh8(raw * (scale / softcap));
#else
    float8 s = raw * scale;
#endif
#if BIAS
    s += vload8(0, bias_at);
#else
    (void)bias_at;
#endif
#if ALIBI
    /* d - j for j = key0 .. key0 + 7, exact in float below 2^24 as the scalar form's */
    const float dist = (float)((long)i + diag_k - (long)seq_q - (long)key0);
    s -= alibi_slope * fabs((float8)(dist) - (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f));
#else
    (void)alibi_slope;
    (void)i;
    (void)key0;
    (void)seq_q;
    (void)diag_k;
#endif
    return s;
}
#endif

/* The work-group's indices along the grid's three dimensions: (query block and part, head, batch
 * entry). With VARLEN they are a permutation of get_group_id's in which the head, not the batch
 * entry, varies slowest in the order work-groups are numbered (dimension 0 fastest); the blocks of
 * one (entry, head) stay consecutive, so a thread keeps streaming the same K and V. Why: PoCL's
 * pthread scheduler hands a thread up to 256 consecutive work-groups per thread of the device at
 * once, and in launch order such a run held whole sequences (the entry varies slowest): with
 * mixed lengths one of two threads took 60% of the work in its first run, and a packed call took
 * 1.17-1.19x the same sequences in separate calls. Every head has the same work, so runs over
 * heads balance. The grid is a full product, so each (block, head, entry) comes once. */
static inline void cpu_group(uint *g0, uint *h, uint *b)
{
#if VARLEN
    const uint n0 = get_num_groups(0), n1 = get_num_groups(1), n2 = get_num_groups(2);
    const uint lin = get_group_id(0) + n0 * (get_group_id(1) + n1 * get_group_id(2));
    *g0 = lin % n0;
    *b = lin / n0 % n2;
    *h = lin / n0 / n2;
#else
    *g0 = get_group_id(0);
    *h = get_group_id(1);
    *b = get_group_id(2);
#endif
}

/* One work-item per query row. The body is a function, always inlined (common.cl's PATH_FUNCTION);
 * its local arrays are declared in the kernel below, at kernel scope as OpenCL C 1.2 requires. */
PATH_FUNCTION void flash_forward_cpu_body(FORWARD_PARAMS, __local float *kf, __local float *vf)
{
    const uint lid = get_local_id(0); /* = the row: one work-item per row */
    uint g0, h, b;
    cpu_group(&g0, &h, &b);
    const uint q0 = query_block_index(g0, n_splits) * BLOCK;
    const uint hk = h / group;
    const uint qi = q0 + lid;
    /* the entry's queries and keys: n_q from packed row q_first, n_k from k_first (common.cl's
     * seq_span; seq_q and seq_k, from row 0, without VARLEN) */
    uint q_first, k_first;
    const uint n_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_first);
    const uint n_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_first);
    /* A block past a short sequence's queries (VARLEN) visits no key tile and stores nothing (no
     * early return: see flash_forward_regtile.cl). */
    const bool live = q0 < n_q;

    const ulong kbase = kv_head_base(k_off, k_bs, k_hs, b, hk) + (ulong)k_first * k_ss;
    const ulong vbase = kv_head_base(v_off, v_bs, v_hs, b, hk) + (ulong)k_first * v_ss;
    __global const int *const pages = kv_page_row(block_table, pages_per_seq, b);

    /* This row of Q as fp32 (zeros past n_q); the padding columns of vf are zero once and for all
     * (no tile load writes them). C1 of the first tile orders these stores before any read. */
    float qrow[HEAD_DIM];
    {
        const ulong qrow_at = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, q_first + min(qi, max(n_q, 1u) - 1));
        for (uint c = 0; c < HEAD_DIM; c++)
            qrow[c] = qi < n_q ? load_g(q, qrow_at + c) : 0.0f;
    }
#if HD8 > HEAD_DIM
    for (uint idx = lid; idx < BLOCK * (HD8 - HEAD_DIM); idx += WG_SIZE)
        vf[idx / (HD8 - HEAD_DIM) * HD8 + HEAD_DIM + idx % (HD8 - HEAD_DIM)] = 0.0f;
#endif

    const uint key_len = batch_key_len(key_lens, b, n_k);
    const long diag_k = diagonal_keys(key_len, n_k, diag_offset);
    long lo, hi;
    uint key_begin = 0, key_end = 0;
    if (live)
        block_key_range(q0, BLOCK, n_q, diag_k, key_len, win_left, win_right, BLOCK, &key_begin, &key_end);
    split_part(g0, n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);
    visible_keys(min(qi, max(n_q, 1u) - 1), n_q, diag_k, key_len, win_left, win_right, &lo, &hi);
    const float slope = alibi_slope(alibi, h);
#if BIAS
    const ulong bias_row = bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs + (ulong)min(qi, max(n_q, 1u) - 1) * bias_rs;
#endif

    float m = -INFINITY; /* running max of this row's scores, log2 domain */
    float l = 0.0f;      /* running sum of exp2(score - m) */
    float8 acc[HD8 / 8];
    for (uint d8 = 0; d8 < HD8 / 8; d8++)
        acc[d8] = (float8)(0.0f);

    for (uint k0 = key_begin; k0 < key_end; k0 += BLOCK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* C1 */
        {
            /* work-item lid loads key row k0 + lid of K (into column lid of kf) and of V */
            const bool in = k0 + lid < n_k;
            const ulong krow = kv_row(kbase, k_bs, k_ss, pages, num_pages, min(k0 + lid, n_k - 1));
            const ulong vrow = kv_row(vbase, v_bs, v_ss, pages, num_pages, min(k0 + lid, n_k - 1));
            for (uint c = 0; c < HEAD_DIM; c++) {
                kf[c * BLOCK + lid] = in ? load_g(k, krow + c) : 0.0f;
                vf[lid * HD8 + c] = in ? load_g(v, vrow + c) : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* C2 */

        /* scores of this row against the tile's keys, 8 keys per float8 */
        float s[BLOCK];
        {
            float8 s8[BLOCK / 8];
            for (uint k8 = 0; k8 < BLOCK / 8; k8++)
                s8[k8] = (float8)(0.0f);
            for (uint c = 0; c < HEAD_DIM; c++) {
                const float8 qc = (float8)(qrow[c]);
#pragma unroll
                for (uint k8 = 0; k8 < BLOCK / 8; k8++) /* unrolled: s8 stays in registers */
                    s8[k8] = fma(qc, vload8(k8, kf + c * BLOCK), s8[k8]);
            }
            for (uint k8 = 0; k8 < BLOCK / 8; k8++)
                vstore8(s8[k8], k8, s);
        }
        float tile_max = -INFINITY;
#if !(SOFTCAP || BIAS || ALIBI)
        if (qi < n_q && (long)k0 >= lo && (long)k0 + BLOCK <= hi) {
            /* every key of the tile is visible and there is no transform: 8 at a time */
            float8 mx = (float8)(-INFINITY);
            for (uint k8 = 0; k8 < BLOCK / 8; k8++) {
                const float8 x = vload8(k8, s) * score_scale; /* score_scale includes log2(e) */
                vstore8(x, k8, s);
                mx = fmax(mx, x);
            }
            const float4 m4 = fmax(mx.lo, mx.hi);
            tile_max = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
        } else
#else
        if (qi < n_q && k0 + BLOCK <= n_k) {
            /* the tile's keys all exist (so their biases are inside the caller's buffer): the
             * transforms 8 keys at a time, then the keys the row does not see masked */
            const int lo_i = (int)clamp(lo, 0L, (long)n_k), hi_i = (int)clamp(hi, 0L, (long)n_k);
            float8 mx = (float8)(-INFINITY);
            for (uint k8 = 0; k8 < BLOCK / 8; k8++) {
#if BIAS
                __global const float *bias_at = bias + bias_row + k0 + 8 * k8;
#else
                __global const float *bias_at = bias;
#endif
                float8 x = transform_scores8(vload8(k8, s), score_scale, softcap, bias_at, slope, qi, k0 + 8 * k8, n_q,
                                             diag_k) * M_LOG2E_F;
                const int8 key = (int8)((int)(k0 + 8 * k8)) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
                x = select((float8)(-INFINITY), x, key >= (int8)(lo_i) && key < (int8)(hi_i));
                vstore8(x, k8, s);
                mx = fmax(mx, x);
            }
            const float4 m4 = fmax(mx.lo, mx.hi);
            tile_max = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
        } else
#endif
        {
            for (uint kk = 0; kk < BLOCK; kk++) {
                const uint key = k0 + kk;
                const bool visible = qi < n_q && (long)key >= lo && (long)key < hi;
#if SOFTCAP || BIAS || ALIBI
#if BIAS
                const float bias_v = visible ? bias[bias_row + key] : 0.0f;
#else
                const float bias_v = 0.0f;
#endif
                const float x = transform_score(s[kk] * score_scale, softcap, bias_v, slope, qi, key, n_q, diag_k) * M_LOG2E_F;
#else
                const float x = s[kk] * score_scale;
#endif
                s[kk] = visible ? x : -INFINITY;
                tile_max = fmax(tile_max, s[kk]);
            }
        }

        const float m_new = fmax(m, tile_max);
        const float ref = (m_new == -INFINITY) ? 0.0f : m_new;
        const float alpha = exp2(m - ref); /* 0 while nothing was seen: l and acc are 0 then */
        float8 sum8 = (float8)(0.0f);
        for (uint k8 = 0; k8 < BLOCK / 8; k8++) {
            const float8 p = exp2_normal8(vload8(k8, s) - ref);
            vstore8(p, k8, s);
            sum8 += p;
        }
        const float4 sum4 = sum8.lo + sum8.hi;
        const float tile_sum = (sum4.x + sum4.y) + (sum4.z + sum4.w);
        m = m_new;

        {
            /* a copy of the accumulator that does not outlive the tile, so that it can stay in
             * registers through the key loop (acc itself is kept across the barriers) */
            float8 a[HD8 / 8];
#pragma unroll
            for (uint d8 = 0; d8 < HD8 / 8; d8++)
                a[d8] = acc[d8] * alpha;
            for (uint j = 0; j < BLOCK; j++) {
                const float p = s[j];
                if (p == 0.0f)
                    continue; /* a key this row does not see adds nothing, not even a NaN of its V */
                const float8 pj = (float8)(p);
#pragma unroll
                for (uint d8 = 0; d8 < HD8 / 8; d8++)
                    a[d8] = fma(pj, vload8(d8, vf + j * HD8), a[d8]);
            }
#pragma unroll
            for (uint d8 = 0; d8 < HD8 / 8; d8++)
                acc[d8] = a[d8];
        }
        l = l * alpha + tile_sum;
    }

    if (qi < n_q) {
        const float inv = l == 0.0f ? 0.0f : out_scale / l;
        const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, out_first(q_first) + qi);
        float out[HD8];
        for (uint d8 = 0; d8 < HD8 / 8; d8++)
            vstore8(acc[d8] * inv, d8, out);
        for (uint c = 0; c < HEAD_DIM; c++)
            store_o(o, obase + c, out[c]);
#if WITH_LSE
        lse[out_lse_row0(b, h, heads_q, seq_q, total_q, q_first) + qi] = l == 0.0f ? -INFINITY : (m + log2(l)) * M_LN2_F;
#endif
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flash_forward_cpu(FORWARD_PARAMS)
{
    __local float kf[HEAD_DIM * BLOCK]; /* transposed: kf[c][j] */
    __local float vf[BLOCK * HD8];

    flash_forward_cpu_body(FORWARD_ARGS, kf, vf);
}
