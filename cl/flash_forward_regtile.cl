/*
 * flash_forward_regtile.cl - the portable FlashAttention forward's register-tiled path: exact
 * attention by tiles and an online softmax, in plain OpenCL C 1.2, with blocks of scores and of O
 * in each work-item's registers. The host prepends common.cl.
 *
 * Why a file of its own: the portable forward has three paths, one file each, chosen by the planner
 * (lib/forward_plan.c). This one is the GPU default: it is built wherever the CPU path
 * (flash_forward_cpu.cl) does not apply, unless the context forces threads_per_row or the tuning
 * setting portable.regtile=0 asks for the lane-per-row path (flash_forward_lanes.cl); so on GPUs
 * (on NVIDIA ones when the tensor-core kernel, nv_mma_forward.cl, does not apply), and on CPU
 * devices with portable.cpu_path=0 or a B that is not a multiple of 8. portable.regtile=RMxTCxBQ[xB]
 * sets its micro-tiles (see clflash.h). Its plans report the kernel variant "flash_forward_regtile".
 * The rules all three paths share are common.cl's, beside FORWARD_PARAMS.
 *
 * The register-tiled path. Like a tuned SGEMM, each work-item computes a small block of S
 * and of O from operands it loads once into registers, so one local load feeds several fused
 * multiply-adds. A work-group holds BLOCK_Q query rows (the plan's block_q, which may exceed B);
 * its RT_TR x RT_TC work-items form row groups: work-item (tr, tc) owns rows tr, tr + RT_TR, ...
 * (RT_RM rows; strided so that a warp's Q loads hit different banks), key slots tc, tc + RT_TC,
 * ... of each tile (RT_RN = BLOCK / RT_TC, rounded up; slots at or past BLOCK are empty), and the
 * float4 columns tc, tc + RT_TC, ... of O (RT_VC of them). All tiles are fp32 whatever the
 * storage type (converted once, when loaded from global memory), in float4 rows padded by one
 * float4 against bank conflicts:
 *   qs[BLOCK_Q][4 * (RT_D4 + 1)]  the Q block, loaded once; columns past HEAD_DIM are 0;
 *   kv[BLOCK][4 * (RT_KW + 1)]    the current K tile, then the current V tile (one buffer: K is
 *                                 dead once S is in registers); columns past HEAD_DIM are 0;
 *   pt[BLOCK][4 * RT_PS4]         P, key-major, indexed by (tr, i) rather than by row, so that a
 *                                 work-item's RT_RM probabilities of one key are one float4;
 *   red[BLOCK_Q][RT_TC]           per-work-item row maxima of a tile, then each row's maximum in
 *                                 all its slots (fold_row_maxima); after the last tile, the
 *                                 per-work-item parts of the row sums.
 * Per tile, S costs RT_RM + RT_RN float4 loads per 4 * RT_RM * RT_RN fused multiply-adds, and
 * P V costs RT_RM / 4 + RT_VC float4 loads per 4 * RT_RM * RT_VC (RT_RM = 4, RT_TC = 8: at
 * d = 64, B = 48, 10 loads per 96 FMAs and 3 per 32; at d = 128, B = 16, 6 per 32 and 5 per 64).
 * Per K/V tile, with the barrier that protects each step:
 *   R1  every read of kv (V) and pt of the previous tile is finished (and the qs stores are
 *       ordered before R2); the work-group loads K into kv.
 *   R2  kv holds K; each work-item computes its RT_RM x RT_RN scores in registers, masks and
 *       transforms them, and publishes its per-row maxima in red.
 *   R3  red is complete and every read of K is finished; the work-group loads V into kv, and
 *       work-item r < BLOCK_Q replaces row r's maxima in red by their maximum (fold_row_maxima).
 *   R3b the rows' maxima are in red; each work-item reads its rows' where it wrote its own and
 *       folds them into m (so m is the same in all work-items of a row group), rescales its O
 *       block and its part of l, and writes its probabilities into pt.
 *   R4  pt and V are complete; each work-item adds P V for its rows and columns over all BLOCK
 *       keys of the tile.
 *   R5  (after the last tile) red holds the parts of l (its last reads came before R4); each
 *       work-item sums its rows' parts and writes its block of O, and lse when tc == 0.
 * Folding each row's maxima once, by one work-item, rather than in every work-item of the row
 * group keeps one local address per row live across the key loop instead of RT_TC / 4 (Intel's
 * compiler, which gives this kernel 128 registers at SIMD8, spilled them). The row sums, after
 * the loop, are still added up by every work-item of the row: folded like the maxima they made
 * clang's RDNA 3 code (wave32, 128 VGPRs) spill 15 to 31.
 * Masks: when every row of the block sees every key of a tile (the tile lies inside the
 * intersection of their [lo, hi) ranges), the work-group skips the per-score mask and, in P V,
 * the per-key test; otherwise a key a row does not see gets p = 0 and adds nothing (p == 0 skips
 * the multiply, so a NaN in its V stays out), as in the lane path. In such a fully visible tile, a
 * visible key whose probability underflows to 0 still multiplies its V (an Inf or NaN there gives
 * NaN; the lane path skips it). Rows past seq_q are not stored. The local bytes are not the
 * tile rule's: B obeys (3*B*d + B*B)*s <= budget, and the planner also checks the bytes above,
 * 16 * (BLOCK_Q * (RT_D4 + 1) + BLOCK * (RT_KW + 1) + BLOCK * RT_PS4) + 4 * BLOCK_Q * RT_TC,
 * against the budget, shrinking B, then BLOCK_Q, until they fit.
 * Every feature of the lane path works here, with the same rules (common.cl: the log2 domain, the
 * skipped key tiles, visible_keys, the -INFINITY guards, O = 0 and lse = -inf for rows that see no
 * key). This is the one path that packs a GQA group's query heads into its rows (PACK > 1).
 *
 * Defines: HEAD_DIM, BLOCK, BLOCK_Q, RT_RM, RT_TC, the storage types and feature switches of
 * common.cl (VARLEN included), WITH_LSE, SPLIT, PACK.
 */
#ifndef SPLIT
#error "a forward kernel is built with SPLIT and PACK (lib/dispatch_util.c, clflash_forward_defines)"
#endif
#define RT_TR (BLOCK_Q / RT_RM)                                 /* row groups */
#define WG_SIZE (RT_TR * RT_TC)
#define RT_RN ((BLOCK + RT_TC - 1) / RT_TC)                     /* keys per work-item */
#define RT_D4 ((HEAD_DIM + 3) / 4)                              /* float4 columns of Q and K */
#define RT_VC ((HEAD_DIM + 4 * RT_TC - 1) / (4 * RT_TC))        /* float4 columns of O per work-item */
#define RT_KW (RT_D4 > RT_VC * RT_TC ? RT_D4 : RT_VC * RT_TC)  /* float4 columns of a kv row */
#define RT_QS4 (RT_D4 + 1)                                      /* row strides in float4, padded */
#define RT_KS4 (RT_KW + 1)
#define RT_PS4 ((BLOCK_Q + 3) / 4 + 1)

/* Each row's RT_TC maxima in red replaced by their maximum, in every slot of the row, so that each
 * work-item reads its rows' where it wrote its own. Work-item r folds row r, and no other reads it. */
static inline void fold_row_maxima(__local float *red, uint lid)
{
    for (uint r = lid; r < BLOCK_Q; r += WG_SIZE) {
        float t = red[r * RT_TC];
        for (uint u = 1; u < RT_TC; u++)
            t = fmax(t, red[r * RT_TC + u]);
        for (uint u = 0; u < RT_TC; u++)
            red[r * RT_TC + u] = t;
    }
}

/* RT_RM rows x keys per work-item. The body is a function, always inlined (common.cl's PATH_FUNCTION);
 * its local arrays are declared in the kernel below, at kernel scope as OpenCL C 1.2 requires. */
PATH_FUNCTION void flash_forward_regtile_body(FORWARD_PARAMS, __local float4 *qs4, __local float4 *kv4,
                                              __local float4 *pt4, __local float *red)
{
    __local float *const qs = (__local float *)qs4;
    __local float *const kv = (__local float *)kv4;
    __local float *const pt = (__local float *)pt4;

    const uint lid = get_local_id(0);
    const uint tc = lid % RT_TC; /* key slots tc, tc + RT_TC, ...; float4 columns of O likewise */
    const uint tr = lid / RT_TC; /* rows tr, tr + RT_TR, ... of the query block */
    __local float *const my_red = red + tr * RT_RM * RT_TC + tc; /* red[tr * RT_RM + i][tc] at i * RT_TC */
    /* The block's rows are packed rows (common.cl: PACK query heads per query; row = query with
     * PACK = 1): q0 is the first, rows_total the number of (query, head) rows the grid covers. */
    const uint q0 = query_block_index(get_group_id(0), n_splits) * BLOCK_Q;
    const uint b = get_group_id(2);
    /* the entry's queries and keys: n_q from packed row q_first, n_k from k_first (common.cl's
     * seq_span; seq_q and seq_k, from row 0, without VARLEN) */
    uint q_first, k_first;
    const uint n_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_first);
    const uint n_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_first);
    const uint rows_total = n_q * PACK;
    /* A block past a short sequence's queries (VARLEN) visits no key tile and stores nothing. It
     * does not return early: with that return PoCL 3.1 (LLVM 15) computed rows of other blocks of
     * this kernel as if they saw no key. */
    const bool live = q0 < rows_total;
    uint h0, hk;
    group_heads(group, &h0, &hk);

    const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h0, q_first);
    const ulong kbase = kv_head_base(k_off, k_bs, k_hs, b, hk) + (ulong)k_first * k_ss;
    const ulong vbase = kv_head_base(v_off, v_bs, v_hs, b, hk) + (ulong)k_first * v_ss;
    __global const int *const pages = kv_page_row(block_table, pages_per_seq, b);

    /* Q as fp32, zero past the last row and in the padding columns (they meet zeros of K). R2 of
     * the first tile orders these stores before any read. */
    for (uint idx = lid; idx < BLOCK_Q * 4 * RT_D4; idx += WG_SIZE) {
        const uint r = idx / (4 * RT_D4), c = idx % (4 * RT_D4), row = q0 + r;
        const ulong at = qbase + (ulong)(row % PACK) * q_hs + (ulong)ROW_QUERY(row) * q_ss + c;
        qs[r * 4 * RT_QS4 + c] = (row < rows_total && c < HEAD_DIM) ? load_g(q, at) : 0.0f;
    }

    const uint key_len = batch_key_len(key_lens, b, n_k);
    const long diag_k = diagonal_keys(key_len, n_k, diag_offset);
    uint key_begin = 0, key_end = 0;
    /* the keys every row of the block sees, [full_lo, full_hi): both ends of visible_keys grow with
     * the query, so they are the last row's lo and the first row's hi. A tile inside needs no mask. */
    uint full_lo = 0, full_hi = 0;
    if (live) {
        const uint first = ROW_QUERY(q0), last = ROW_QUERY(min(q0 + BLOCK_Q, rows_total) - 1);
        block_key_range(first, last - first + 1, n_q, diag_k, key_len, win_left, win_right, BLOCK, &key_begin,
                        &key_end);
        long lo, hi, unused;
        visible_keys(last, n_q, diag_k, key_len, win_left, win_right, &lo, &unused);
        visible_keys(first, n_q, diag_k, key_len, win_left, win_right, &unused, &hi);
        full_lo = (uint)clamp(lo, 0L, (long)n_k);
        full_hi = (uint)clamp(hi, 0L, (long)n_k);
    }
    split_part(get_group_id(0), n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);

    /* This work-item's rows: their head and, where a mask or ALiBi needs it, their diagonal key
     * d = query + diag_k - n_q. As in common.cl's visible_keys, the row sees key j iff j < key_len
     * (<= n_k), j <= d (CAUSAL) and d - win_left <= j <= d + win_right (WINDOW); the kernel keeps
     * d rather than the row's [lo, hi), since d - j is ALiBi's distance too. Rows past the last
     * take the last row's mask (their Q is zero) and are not stored. Every value kept here stays in
     * registers across the key loop, and each one counts: with per-row [lo, hi) bounds, per-row
     * tile maxima read from red and ALiBi's distance formed apart from the mask's, Intel's
     * compiler spilled this kernel at d = 128 with the features (docs/portability.md). */
    uint h_r[RT_RM];
#if CAUSAL || WINDOW || ALIBI
    long diag_r[RT_RM];
#endif
#if BIAS
    ulong bias_row[RT_RM];
#endif
#pragma unroll
    for (uint i = 0; i < RT_RM; i++) {
        const uint row = min(q0 + tr + RT_TR * i, max(rows_total, 1u) - 1);
        const uint qi = ROW_QUERY(row);
        h_r[i] = ROW_HEAD(h0, row);
#if CAUSAL || WINDOW || ALIBI
        diag_r[i] = (long)qi + diag_k - (long)n_q;
#endif
#if BIAS
        bias_row[i] = bias_off + (ulong)b * bias_bs + (ulong)h_r[i] * bias_hs + (ulong)qi * bias_rs;
#endif
    }

    float m[RT_RM]; /* running max of each row's scores, log2 domain (equal in the row's work-items) */
    float l[RT_RM]; /* this work-item's part of the running sum: its own keys' exp2(score - m) */
    float4 acc[RT_RM][RT_VC];
#pragma unroll
    for (uint i = 0; i < RT_RM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (uint cq = 0; cq < RT_VC; cq++)
            acc[i][cq] = (float4)(0.0f);
    }

    for (uint k0 = key_begin; k0 < key_end; k0 += BLOCK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* R1 */
        for (uint idx = lid; idx < BLOCK * 4 * RT_D4; idx += WG_SIZE) {
            const uint r = idx / (4 * RT_D4), c = idx % (4 * RT_D4);
            kv[r * 4 * RT_KS4 + c] =
                (k0 + r < n_k && c < HEAD_DIM) ? load_g(k, kv_row(kbase, k_bs, k_ss, pages, num_pages, k0 + r) + c)
                                                  : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* R2 */

        /* S = Q K^T for RT_RM rows x RT_RN keys: per float4 column, RT_RM + RT_RN local loads
         * feed 4 * RT_RM * RT_RN fused multiply-adds. */
        float s[RT_RM][RT_RN];
#pragma unroll
        for (uint i = 0; i < RT_RM; i++)
#pragma unroll
            for (uint j = 0; j < RT_RN; j++)
                s[i][j] = 0.0f;
        for (uint c4 = 0; c4 < RT_D4; c4++) {
            float4 a[RT_RM], kb[RT_RN];
#pragma unroll
            for (uint i = 0; i < RT_RM; i++)
                a[i] = qs4[(tr + RT_TR * i) * RT_QS4 + c4];
#pragma unroll
            for (uint j = 0; j < RT_RN; j++)
                kb[j] = kv4[min(tc + RT_TC * j, (uint)BLOCK - 1) * RT_KS4 + c4];
#pragma unroll
            for (uint i = 0; i < RT_RM; i++)
#pragma unroll
                for (uint j = 0; j < RT_RN; j++) {
                    float t = fma(a[i].x, kb[j].x, s[i][j]);
                    t = fma(a[i].y, kb[j].y, t);
                    t = fma(a[i].z, kb[j].z, t);
                    s[i][j] = fma(a[i].w, kb[j].w, t);
                }
        }

        /* every key of the tile visible to every row of the block: no mask needed */
        const bool full = k0 >= full_lo && k0 + BLOCK <= full_hi;
        float mx[RT_RM];
#pragma unroll
        for (uint i = 0; i < RT_RM; i++)
            mx[i] = -INFINITY;
#if !(SOFTCAP || BIAS || ALIBI)
        if (full) {
#pragma unroll
            for (uint i = 0; i < RT_RM; i++)
#pragma unroll
                for (uint j = 0; j < RT_RN; j++) {
                    const bool slot = BLOCK % RT_TC == 0 || tc + RT_TC * j < BLOCK;
                    s[i][j] = slot ? s[i][j] * score_scale : -INFINITY; /* score_scale includes log2(e) */
                    mx[i] = fmax(mx[i], s[i][j]);
                }
        } else
#endif
        {
#pragma unroll
            for (uint i = 0; i < RT_RM; i++) {
                /* the row's ALiBi slope, read here in the tile loop: read once before it, Intel's CPU
                 * OpenCL compiler (2026.2) gave the packed rows of other heads one head's slope */
#if ALIBI
                const float slope = alibi[h_r[i]];
#else
                const float slope = 0.0f;
#endif
#pragma unroll
                for (uint j = 0; j < RT_RN; j++) {
                    const uint key = k0 + tc + RT_TC * j;
#if CAUSAL || WINDOW || ALIBI
                    const long rel = diag_r[i] - (long)key; /* the row's diagonal key minus this key */
#endif
                    const bool visible = (BLOCK % RT_TC == 0 || tc + RT_TC * j < BLOCK) && key < key_len
#if CAUSAL
                                         && rel >= 0
#endif
#if WINDOW
                                         && rel <= (long)win_left && rel >= -(long)win_right
#endif
                        ;
#if SOFTCAP || BIAS || ALIBI
#if BIAS
                    const float bias_v = visible ? bias[bias_row[i] + key] : 0.0f;
#else
                    const float bias_v = 0.0f;
#endif
                    /* softcap and bias as transform_score applies them, then ALiBi from rel */
                    float x = transform_score(s[i][j] * score_scale, softcap, bias_v, 0.0f, 0, 0, 0, 0);
#if ALIBI
                    x -= slope * fabs((float)rel);
#endif
                    x *= M_LOG2E_F;
#else
                    const float x = s[i][j] * score_scale;
#endif
                    s[i][j] = visible ? x : -INFINITY;
                    mx[i] = fmax(mx[i], s[i][j]);
                }
                (void)slope;
            }
        }
#pragma unroll
        for (uint i = 0; i < RT_RM; i++)
            my_red[i * RT_TC] = mx[i];
        barrier(CLK_LOCAL_MEM_FENCE); /* R3 */

        fold_row_maxima(red, lid);
        /* K is no longer read: V takes its place (ordered before the P V reads by R4) */
        for (uint idx = lid; idx < BLOCK * 4 * RT_VC * RT_TC; idx += WG_SIZE) {
            const uint r = idx / (4 * RT_VC * RT_TC), c = idx % (4 * RT_VC * RT_TC);
            kv[r * 4 * RT_KS4 + c] =
                (k0 + r < n_k && c < HEAD_DIM) ? load_g(v, kv_row(vbase, v_bs, v_ss, pages, num_pages, k0 + r) + c)
                                                  : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* R3b */
#pragma unroll
        for (uint i = 0; i < RT_RM; i++) {
            const float tile_max = my_red[i * RT_TC];
            const float m_new = fmax(m[i], tile_max);
            const float ref = (m_new == -INFINITY) ? 0.0f : m_new;
            const float alpha = exp2(m[i] - ref); /* 0 while nothing was seen: l and acc are 0 then */
            m[i] = m_new;
            float part = 0.0f;
#pragma unroll
            for (uint j = 0; j < RT_RN; j++) {
                s[i][j] = exp2(s[i][j] - ref);
                part += s[i][j];
            }
            l[i] = l[i] * alpha + part;
#pragma unroll
            for (uint cq = 0; cq < RT_VC; cq++)
                acc[i][cq] *= alpha;
        }
#pragma unroll
        for (uint j = 0; j < RT_RN; j++) {
            if (BLOCK % RT_TC == 0 || tc + RT_TC * j < BLOCK) {
#if RT_RM % 4 == 0
#pragma unroll
                for (uint i4 = 0; i4 < RT_RM / 4; i4++)
                    pt4[(tc + RT_TC * j) * RT_PS4 + tr * (RT_RM / 4) + i4] =
                        (float4)(s[4 * i4][j], s[4 * i4 + 1][j], s[4 * i4 + 2][j], s[4 * i4 + 3][j]);
#else
#pragma unroll
                for (uint i = 0; i < RT_RM; i++)
                    pt[(tc + RT_TC * j) * 4 * RT_PS4 + tr * RT_RM + i] = s[i][j];
#endif
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* R4 */

        /* O += P V for RT_RM rows x RT_VC float4 columns: per key, RT_RM / 4 + RT_VC local loads
         * feed 4 * RT_RM * RT_VC fused multiply-adds. */
        for (uint j = 0; j < BLOCK; j++) {
            float p[RT_RM];
#if RT_RM % 4 == 0
#pragma unroll
            for (uint i4 = 0; i4 < RT_RM / 4; i4++) {
                const float4 p4 = pt4[j * RT_PS4 + tr * (RT_RM / 4) + i4];
                p[4 * i4] = p4.x;
                p[4 * i4 + 1] = p4.y;
                p[4 * i4 + 2] = p4.z;
                p[4 * i4 + 3] = p4.w;
            }
#else
#pragma unroll
            for (uint i = 0; i < RT_RM; i++)
                p[i] = pt[j * 4 * RT_PS4 + tr * RT_RM + i];
#endif
            if (full) {
#pragma unroll
                for (uint cq = 0; cq < RT_VC; cq++) {
                    const float4 vv = kv4[j * RT_KS4 + cq * RT_TC + tc];
#pragma unroll
                    for (uint i = 0; i < RT_RM; i++)
                        acc[i][cq] = fma((float4)(p[i]), vv, acc[i][cq]);
                }
            } else {
#pragma unroll
                for (uint cq = 0; cq < RT_VC; cq++) {
                    const float4 vv = kv4[j * RT_KS4 + cq * RT_TC + tc];
#pragma unroll
                    for (uint i = 0; i < RT_RM; i++)
                        if (p[i] != 0.0f) /* a key this row does not see adds nothing, not even a NaN of its V */
                            acc[i][cq] = fma((float4)(p[i]), vv, acc[i][cq]);
                }
            }
        }
    }

    /* The row sums: each work-item holds the part over its own key slots. The last reads of red
     * came before R4 of the last tile (or there was no tile). */
#pragma unroll
    for (uint i = 0; i < RT_RM; i++)
        my_red[i * RT_TC] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE); /* R5 */
#pragma unroll
    for (uint i = 0; i < RT_RM; i++) {
        const uint row = q0 + tr + RT_TR * i, qi = ROW_QUERY(row), h = ROW_HEAD(h0, row);
        if (row < rows_total) {
            float lt = 0.0f;
            for (uint u = 0; u < RT_TC; u++)
                lt += red[(tr * RT_RM + i) * RT_TC + u];
            /* lt == 0: the row saw no key (O = 0, lse = -inf); a NaN the row sees reaches O and lse */
            const float inv = lt == 0.0f ? 0.0f : out_scale / lt;
            const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, out_first(q_first) + qi);
#pragma unroll
            for (uint cq = 0; cq < RT_VC; cq++) {
                const uint c = (cq * RT_TC + tc) * 4;
                const float4 x = acc[i][cq] * inv;
                if (c < HEAD_DIM)
                    store_o(o, obase + c, x.x);
                if (c + 1 < HEAD_DIM)
                    store_o(o, obase + c + 1, x.y);
                if (c + 2 < HEAD_DIM)
                    store_o(o, obase + c + 2, x.z);
                if (c + 3 < HEAD_DIM)
                    store_o(o, obase + c + 3, x.w);
            }
#if WITH_LSE
            if (tc == 0)
                lse[out_lse_row0(b, h, heads_q, seq_q, total_q, q_first) + qi] =
                    lt == 0.0f ? -INFINITY : (m[i] + log2(lt)) * M_LN2_F;
#endif
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flash_forward_regtile(FORWARD_PARAMS)
{
    __local float4 qs4[BLOCK_Q * RT_QS4]; /* qs[r][c]: the Q block, fp32 */
    __local float4 kv4[BLOCK * RT_KS4];   /* kv[j][c]: the K tile, then the V tile, fp32 */
    __local float4 pt4[BLOCK * RT_PS4];   /* pt[j][tr * RT_RM + i]: P, key-major */
    __local float red[BLOCK_Q * RT_TC];   /* red[tr * RT_RM + i][tc]: per-work-item maxima, then sums */

    flash_forward_regtile_body(FORWARD_ARGS, qs4, kv4, pt4, red);
}
