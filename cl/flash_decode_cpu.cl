/*
 * flash_decode_cpu.cl - the forward for few query rows on CPU devices (PoCL): decoding, where each
 * K/V head's keys are read once for all the rows that use them. The host prepends common.cl.
 *
 * Why a kernel of its own: the portable kernel's CPU path gives every query row a work-item and
 * every work-group B rows, so a decoding step (one query, a few GQA heads) computes dozens of
 * padding rows per useful one and reads K and V once per query head. Here one work-item (the
 * work-group is one work-item: PoCL runs it as a plain function on one thread) owns DEC_ROWS rows
 * of DEC_KV_HEADS consecutive K/V heads of one batch entry: the packed rows of common.cl, query
 * r / PACK of head h0 + r % PACK (PACK = the GQA group times DEC_KV_HEADS), so all heads of a GQA
 * group share it. It streams its keys straight from global memory in order (a CPU's prefetchers
 * and caches do what local tiles do on a GPU), DEC_KEYS keys at a time, and for each key the rows
 * of its K/V heads one head after another:
 *   scores    each float8 of a key row is loaded (and converted to fp32) once and multiplied with
 *             every row's Q, held pre-scaled in fp32 (float8 fused multiply-adds along head_dim);
 *   softmax   the online update per row over the chunk, 8 keys per vector: one rescale of O and l
 *             per row and chunk;
 *   P V       column by column (float8) over the chunk's value rows, each loaded once for every
 *             row, with the rows' O in registers.
 * No local memory and no barrier. Split-KV (SPLIT) and the parts it writes are common.cl's
 * split_part; the grid is (row blocks x n_splits, heads_kv / DEC_KV_HEADS, batch).
 *
 * DEC_KV_HEADS > 1 is for caches whose heads lie side by side within each key (token-major, as
 * [batch][seq][heads][d] or pages of [slot][head][d]): one K/V head's consecutive keys are then
 * heads x d elements apart, a stride a CPU's prefetchers do not follow across pages (on PoCL, two
 * cores: 6 GB/s against 15 for the same cache head-major), while the key's rows of every head
 * together are one contiguous run, read here in order. DEC_KV_HEADS = 1 is the one-head work-item.
 *
 * The rules are the portable kernel's: visible_keys per row (causal, window and key lengths, all
 * bottom-right), the key range of the whole block skipped outside, scores in log2 units (the host
 * folds log2(e) into score_scale when there is no softcap, bias or ALiBi; with them the natural
 * score is transformed, then multiplied by log2(e)), -INFINITY guards, a row that sees no key gets
 * O = 0 and lse = -INFINITY, a key a row does not see adds nothing (p = 0 skips it), O times
 * out_scale (int8's V scale) in the output type.
 *
 * Defines: HEAD_DIM, DEC_ROWS (rows per work-item, a multiple of PACK), DEC_KEYS (keys per chunk),
 * DEC_KV_HEADS (K/V heads per work-item), PACK (the GQA group times DEC_KV_HEADS), the storage types
 * and the feature switches of common.cl (VARLEN included), WITH_LSE, SPLIT.
 */
#ifndef SPLIT
#error "a forward kernel is built with SPLIT and PACK (lib/dispatch_util.c, clflash_forward_defines)"
#endif

#define HD8 ((HEAD_DIM + 7) / 8)
#define DEC_KEYS8 ((DEC_KEYS + 7) / 8)
#if !defined(DEC_KV_HEADS) || PACK % DEC_KV_HEADS != 0 || DEC_ROWS % PACK != 0
#error "DEC_KV_HEADS divides PACK, and DEC_ROWS is a multiple of PACK (lib/cpu_decode_plan.c)"
#endif
#define HEAD_ROWS (DEC_ROWS / DEC_KV_HEADS) /* the rows of one K/V head */
#define GROUP_ROWS (PACK / DEC_KV_HEADS)    /* ... of one query: its GQA group */

/* Row i of K/V head u's rows (i < HEAD_ROWS): query i / GROUP_ROWS, head u * GROUP_ROWS + i %
 * GROUP_ROWS of the packed heads (with one K/V head, row i itself). */
static inline uint head_row(uint u, uint i)
{
    return i / GROUP_ROWS * PACK + u * GROUP_ROWS + i % GROUP_ROWS;
}

/* Elements 8 c8 .. 8 c8 + 7 of the row at `at` of Q, K or V as fp32 (zeros past HEAD_DIM): one
 * vector load where the storage type has one, else element by element through load_g. */
static inline float8 load8(__global const bits_t *src, ulong at, uint c8)
{
#if HEAD_DIM % 8 == 0 && defined(CLFLASH_DTYPE_F32)
    return vload8(0, src + at + 8 * c8);
#elif HEAD_DIM % 8 == 0 && defined(CLFLASH_DTYPE_F16)
    return vload_half8(0, (__global const half *)(src + at + 8 * c8));
#elif HEAD_DIM % 8 == 0 && defined(CLFLASH_DTYPE_BF16)
    return as_float8(convert_uint8(vload8(0, src + at + 8 * c8)) << 16);
#else
    float t[8];
    for (uint e = 0; e < 8; e++)
        t[e] = 8 * c8 + e < HEAD_DIM ? load_g(src, at + 8 * c8 + e) : 0.0f;
    return vload8(0, t);
#endif
}

/* The portable forward's arguments (common.cl: the host sets them by position). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void flash_decode_cpu(FORWARD_PARAMS)
{
    const uint b = get_group_id(2);
    uint h0, hk;
    group_heads(group, &h0, &hk);
    hk = h0 / group; /* the first of the DEC_KV_HEADS K/V heads */
    /* the entry's queries and keys: n_q from packed row q_first, n_k from k_first (common.cl's
     * seq_span; seq_q and seq_k, from row 0, without VARLEN) */
    uint q_first, k_first;
    const uint n_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_first);
    const uint n_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_first);
    const uint rows_total = n_q * PACK;
    const uint row0 = query_block_index(get_group_id(0), n_splits) * DEC_ROWS;
    if (row0 >= rows_total) /* rows past a short sequence's queries (VARLEN): nothing to do */
        return;
    const uint rows = min((uint)DEC_ROWS, rows_total - row0); /* this work-item's rows */

    const uint key_len = batch_key_len(key_lens, b, n_k);
    const long diag_k = diagonal_keys(key_len, n_k, diag_offset);
    uint key_begin, key_end;
    {
        const uint first = ROW_QUERY(row0), last = ROW_QUERY(row0 + rows - 1);
        block_key_range(first, last - first + 1, n_q, diag_k, key_len, win_left, win_right, DEC_KEYS, &key_begin,
                        &key_end);
    }
    split_part(get_group_id(0), n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);

    /* Each row's Q (fp32, times score_scale), query, head, visible keys, bias row and slope. */
    float8 qr[DEC_ROWS][HD8];
    uint qi_r[DEC_ROWS], h_r[DEC_ROWS];
    long lo_r[DEC_ROWS], hi_r[DEC_ROWS];
#if BIAS
    ulong bias_row[DEC_ROWS];
#endif
    float slope_r[DEC_ROWS];
    long max_lo = 0, min_hi = n_k; /* the keys every row sees */
    for (uint r = 0; r < DEC_ROWS; r++) {
        const uint row = row0 + min(r, rows - 1);
        qi_r[r] = ROW_QUERY(row);
        h_r[r] = ROW_HEAD(h0, row);
        const ulong q_at = tensor_index(q_off, q_bs, q_hs, q_ss, b, h_r[r], q_first + qi_r[r]);
        for (uint c8 = 0; c8 < HD8; c8++)
            qr[r][c8] = load8(q, q_at, c8) * score_scale;
        visible_keys(qi_r[r], n_q, diag_k, key_len, win_left, win_right, &lo_r[r], &hi_r[r]);
        if (r >= rows)
            hi_r[r] = 0; /* a row past the last one sees nothing */
        max_lo = max(max_lo, lo_r[r]);
        min_hi = min(min_hi, hi_r[r]);
#if BIAS
        bias_row[r] = bias_off + (ulong)b * bias_bs + (ulong)h_r[r] * bias_hs + (ulong)qi_r[r] * bias_rs;
#endif
#if ALIBI
        slope_r[r] = alibi[h_r[r]];
#else
        slope_r[r] = 0.0f;
#endif
    }

    float m[DEC_ROWS], l[DEC_ROWS];
    float8 acc[DEC_ROWS][HD8];
    for (uint r = 0; r < DEC_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (uint c8 = 0; c8 < HD8; c8++)
            acc[r][c8] = (float8)(0.0f);
    }
    ulong kbase[DEC_KV_HEADS], vbase[DEC_KV_HEADS];
    for (uint u = 0; u < DEC_KV_HEADS; u++) {
        kbase[u] = kv_head_base(k_off, k_bs, k_hs, b, hk + u) + (ulong)k_first * k_ss;
        vbase[u] = kv_head_base(v_off, v_bs, v_hs, b, hk + u) + (ulong)k_first * v_ss;
    }
    __global const int *const pages = kv_page_row(block_table, pages_per_seq, b);

    for (uint k0 = key_begin; k0 < key_end; k0 += DEC_KEYS) {
        const uint n = min((uint)DEC_KEYS, key_end - k0);
        float s[DEC_ROWS][DEC_KEYS8 * 8]; /* whole float8s: keys past n are -inf */
        for (uint r = 0; r < DEC_ROWS; r++)
            for (uint j = n; j < DEC_KEYS8 * 8; j++)
                s[r][j] = -INFINITY;
        /* scores: each K element is loaded once, into a register, for every row of its head */
        for (uint j = 0; j < n; j++) {
            const uint key = k0 + j;
            for (uint u = 0; u < DEC_KV_HEADS; u++) {
                const ulong at = kv_row(kbase[u], k_bs, k_ss, pages, num_pages, key);
                /* two accumulators per row (even and odd float8s), unrolled over the rows, so that the
                 * chains of dependent multiply-adds are short and live in registers */
                float8 d8[HEAD_ROWS], e8[HEAD_ROWS];
#pragma unroll
                for (uint i = 0; i < HEAD_ROWS; i++)
                    d8[i] = e8[i] = (float8)(0.0f);
                for (uint c8 = 0; c8 + 1 < HD8; c8 += 2) {
                    const float8 k8 = load8(k, at, c8), k9 = load8(k, at, c8 + 1);
#pragma unroll
                    for (uint i = 0; i < HEAD_ROWS; i++) {
                        d8[i] = fma(qr[head_row(u, i)][c8], k8, d8[i]);
                        e8[i] = fma(qr[head_row(u, i)][c8 + 1], k9, e8[i]);
                    }
                }
#if HD8 % 2
                {
                    const float8 k8 = load8(k, at, HD8 - 1);
#pragma unroll
                    for (uint i = 0; i < HEAD_ROWS; i++)
                        d8[i] = fma(qr[head_row(u, i)][HD8 - 1], k8, d8[i]);
                }
#endif
#pragma unroll
                for (uint i = 0; i < HEAD_ROWS; i++) {
                    const uint r = head_row(u, i);
                    const float8 t8 = d8[i] + e8[i];
                    const float4 d4 = t8.lo + t8.hi;
                    const float dot = (d4.x + d4.y) + (d4.z + d4.w);
                    const bool visible = (long)key >= lo_r[r] && (long)key < hi_r[r];
#if SOFTCAP || BIAS || ALIBI
#if BIAS
                    const float bias_v = visible ? bias[bias_row[r] + key] : 0.0f;
#else
                    const float bias_v = 0.0f;
#endif
                    const float x =
                        transform_score(dot, softcap, bias_v, slope_r[r], qi_r[r], key, n_q, diag_k) * M_LOG2E_F;
#else
                    const float x = dot; /* score_scale, already in Q, includes log2(e) */
#endif
                    s[r][j] = visible ? x : -INFINITY;
                }
            }
        }
        for (uint r = 0; r < DEC_ROWS; r++) {
            /* 8 keys at a time: the maximum, then exp2 on whole vectors */
            float8 mx8 = (float8)(-INFINITY);
            for (uint j8 = 0; j8 < DEC_KEYS8; j8++)
                mx8 = fmax(mx8, vload8(j8, s[r]));
            const float4 mx4 = fmax(mx8.lo, mx8.hi);
            const float mx = fmax(fmax(mx4.x, mx4.y), fmax(mx4.z, mx4.w));
            const float m_new = fmax(m[r], mx);
            const float ref = m_new == -INFINITY ? 0.0f : m_new;
            if (m_new > m[r]) { /* a larger maximum: rescale what was summed (0 while nothing was) */
                const float alpha = exp2(m[r] - ref);
                l[r] *= alpha;
                for (uint c8 = 0; c8 < HD8; c8++)
                    acc[r][c8] *= alpha;
                m[r] = m_new;
            }
            float8 sum8 = (float8)(0.0f);
            for (uint j8 = 0; j8 < DEC_KEYS8; j8++) {
                const float8 p8 = exp2_normal8(vload8(j8, s[r]) - ref);
                vstore8(p8, j8, s[r]);
                sum8 += p8;
            }
            const float4 sum4 = sum8.lo + sum8.hi;
            l[r] += (sum4.x + sum4.y) + (sum4.z + sum4.w);
        }
        /* P V: each float8 of a value row is loaded once, for every row. A key a row does not
         * see adds nothing (p = 0 is skipped, so a NaN of its V stays out), except in a chunk every
         * row sees entirely, where a p that underflowed to 0 still multiplies its V. */
        const bool full = (long)k0 >= max_lo && (long)(k0 + n) <= min_hi;
        for (uint j = 0; j < n; j++) {
            for (uint u = 0; u < DEC_KV_HEADS; u++) {
                const ulong at = kv_row(vbase[u], v_bs, v_ss, pages, num_pages, k0 + j);
                float p[HEAD_ROWS];
                int skip[HEAD_ROWS];
#pragma unroll
                for (uint i = 0; i < HEAD_ROWS; i++) {
                    p[i] = s[head_row(u, i)][j];
                    skip[i] = !full && p[i] == 0.0f;
                }
                for (uint c8 = 0; c8 < HD8; c8++) {
                    const float8 v8 = load8(v, at, c8);
#pragma unroll
                    for (uint i = 0; i < HEAD_ROWS; i++) {
                        const uint r = head_row(u, i);
                        acc[r][c8] = skip[i] ? acc[r][c8] : fma((float8)(p[i]), v8, acc[r][c8]);
                    }
                }
            }
        }
    }

    for (uint r = 0; r < rows; r++) {
        /* l == 0: the row saw no key (O = 0, lse = -inf); a NaN the row sees reaches O and lse */
        const float inv = l[r] == 0.0f ? 0.0f : out_scale / l[r];
        const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h_r[r], out_first(q_first) + qi_r[r]);
        float out[HD8 * 8];
        for (uint c8 = 0; c8 < HD8; c8++)
            vstore8(acc[r][c8] * inv, c8, out);
        for (uint c = 0; c < HEAD_DIM; c++)
            store_o(o, obase + c, out[c]);
#if WITH_LSE
        lse[out_lse_row0(b, h_r[r], heads_q, seq_q, total_q, q_first) + qi_r[r]] =
            l[r] == 0.0f ? -INFINITY : (m[r] + log2(l[r])) * M_LN2_F;
#endif
    }
#if !WITH_LSE
    (void)lse;
#endif
}
