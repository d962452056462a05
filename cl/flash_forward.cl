/*
 * flash_forward.cl - the portable FlashAttention forward kernel: exact attention by tiles and an
 * online softmax, in plain OpenCL C 1.2, for any device. The host prepends common.cl.
 *
 * Three paths share one kernel signature and one set of rules; the host's defines pick one, and
 * each is a function of its own (forward_lanes, forward_regtile, forward_cpu) that the kernel calls
 * with the path's local arrays:
 *   RT=1              the register-tiled path, the GPU default (described second below);
 *   CLFLASH_CPU_PATH  the CPU path, for PoCL (described third);
 *   neither           the lane-per-row path, described first: the original GPU path, kept so
 *                     that both can be measured (CLFLASH_REGTILE=0, see clflash.h).
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
 * Scores are kept in the log2 domain so that exp2 does the work: without softcap, bias or ALiBi
 * the host passes score_scale = scale * log2(e) (times the int8 scales); with them it passes the
 * natural scale, and the transformed score is multiplied by log2(e) here. The visible keys of a
 * row (causal, sliding window, key padding) are a range [lo, hi) from common.cl's visible_keys;
 * key tiles outside the block's union of ranges are never loaded. O is scaled by out_scale (the
 * int8 V scale, else 1) and stored in the output type.
 * The running max starts at -INFINITY; a row that has seen no visible key yet uses 0 as its
 * reference so that no exp2(-inf - -inf) is ever formed. A row that sees no key at all ends with
 * l = 0 and writes O = 0 and lse = -INFINITY.
 * Each score costs one local load per fused multiply-add (kt), and so does P V (vt): this path is
 * bound by local-memory bandwidth on GPUs (13.7 TFLOP/s fp32 on an H200 at d = 64).
 */
/*
 * The register-tiled path (RT=1). Like a tuned SGEMM, each work-item computes a small block of S
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
 *   red[BLOCK_Q][RT_TC]           per-work-item row maxima of a tile; after the last tile, the
 *                                 per-work-item parts of the row sums.
 * Per tile, S costs RT_RM + RT_RN float4 loads per 4 * RT_RM * RT_RN fused multiply-adds, and
 * P V costs RT_RM / 4 + RT_VC float4 loads per 4 * RT_RM * RT_VC (RT_RM = 4, RT_TC = 8: at
 * d = 64, B = 48, 10 loads per 96 FMAs and 3 per 32; at d = 128, B = 16, 6 per 32 and 5 per 64).
 * Per K/V tile, with the barrier that protects each step:
 *   R1  every read of kv (V) and pt of the previous tile is finished (and the qs stores are
 *       ordered before R2); the work-group loads K into kv.
 *   R2  kv holds K; each work-item computes its RT_RM x RT_RN scores in registers, masks and
 *       transforms them, and publishes its per-row maxima in red.
 *   R3  red is complete and every read of K is finished; the work-group loads V into kv; each
 *       work-item folds the row maxima into m (the same in all work-items of a row group, which
 *       read the same red entries in the same order), rescales its O block and its part of l,
 *       and writes its probabilities into pt.
 *   R4  pt and V are complete; each work-item adds P V for its rows and columns over all BLOCK
 *       keys of the tile.
 *   R5  (after the last tile) red holds the parts of l (its last reads came before R4); each
 *       work-item sums its rows' parts and writes its block of O, and lse when tc == 0.
 * Masks: a work-item whose rows all see every key of a tile (the tile lies inside the
 * intersection of their [lo, hi) ranges) skips the per-score mask and, in P V, the per-key test;
 * otherwise a key a row does not see gets p = 0 and adds nothing (p == 0 skips the multiply, so a
 * NaN in its V stays out), as in the lane path. In such a fully visible tile, a visible key whose
 * probability underflows to 0 still multiplies its V (an Inf or NaN there gives NaN; the lane
 * path skips it). Rows past seq_q see nothing and are not stored. The local bytes are not the
 * users' rule's: B obeys (3*B*d + B*B)*s <= budget, and the planner also checks the bytes above,
 * 16 * (BLOCK_Q * (RT_D4 + 1) + BLOCK * (RT_KW + 1) + BLOCK * RT_PS4) + 4 * BLOCK_Q * RT_TC,
 * against the budget, shrinking B, then BLOCK_Q, until they fit.
 * Every feature of the lane path works here, with its rules (above: the log2 domain, the skipped
 * key tiles, visible_keys, the -INFINITY guards, O = 0 and lse = -inf for rows that see no key).
 */
/*
 * The CPU path. PoCL runs a work-group as a loop over its work-items between barriers, with one
 * work-item per row (TPR = 1, the CPU plan); there the lane path's steps cost more in barriers, in
 * per-work-item state kept across them, and in scalar loads than in arithmetic. When the host
 * defines CLFLASH_CPU_PATH=1 (the planner does for devices of type CPU) and TPR == 1 and BLOCK is
 * a multiple of 8, the kernel below instead
 * keeps its tiles as fp32, K transposed (kf[HEAD_DIM][BLOCK]) and V padded to a multiple of 8
 * columns (vf[BLOCK][HD8]), and has two barriers per tile:
 *   C1  every read of kf and vf of the previous tile is finished; the work-group loads them;
 *   C2  kf and vf are complete; each work-item then does all of its row's work for the tile alone
 *       (a row's scores, maximum and probabilities are its own when TPR == 1): scores on 8 keys at
 *       a time (float8 fused multiply-adds down the transposed K tile), the online-softmax update,
 *       and P V on 8 output columns at a time, the accumulator held in float8 registers.
 * The rules (visibility, transforms, the -INFINITY guards, l == 0 rows) are the lane path's. A
 * CLFLASH_CPU_PATH=1 or =0 in the context's build_options forces the choice (the Oclgrind driver
 * runs this path so); on a GPU build nothing here is compiled.
 */
/*
 * Split-KV and GQA packing (common.cl): every path takes its query block from
 * query_block_index(n_splits) and, with SPLIT, narrows its key tiles to its part and writes the
 * part's fp32 O and lse (split_part). Only the register-tiled path packs the query heads of a GQA
 * group into its rows (PACK > 1); its per-row query, head, bias row and ALiBi slope come from the
 * packed row.
 */
#ifndef CLFLASH_CPU_PATH
#define CLFLASH_CPU_PATH 0
#endif
#ifndef RT
#define RT 0
#endif
#if !RT && CLFLASH_CPU_PATH && TPR == 1 && BLOCK % 8 == 0
#define CLFLASH_USE_CPU_PATH 1
#define HD8 ((HEAD_DIM + 7) / 8 * 8)
#else
#define CLFLASH_USE_CPU_PATH 0
#endif

#if PACK > 1 && !RT
#error "only the register-tiled path packs GQA heads"
#endif

#if RT
#define RT_TR (BLOCK_Q / RT_RM)                                 /* row groups */
#define WG_SIZE (RT_TR * RT_TC)
#define RT_RN ((BLOCK + RT_TC - 1) / RT_TC)                     /* keys per work-item */
#define RT_D4 ((HEAD_DIM + 3) / 4)                              /* float4 columns of Q and K */
#define RT_VC ((HEAD_DIM + 4 * RT_TC - 1) / (4 * RT_TC))        /* float4 columns of O per work-item */
#define RT_KW (RT_D4 > RT_VC * RT_TC ? RT_D4 : RT_VC * RT_TC)  /* float4 columns of a kv row */
#define RT_QS4 (RT_D4 + 1)                                      /* row strides in float4, padded */
#define RT_KS4 (RT_KW + 1)
#define RT_PS4 ((BLOCK_Q + 3) / 4 + 1)
#else
#define WG_SIZE (BLOCK * TPR)
#define KEYS_PER_LANE (BLOCK / TPR)
#define COLS_PER_LANE ((HEAD_DIM + TPR - 1) / TPR)
#endif

#if CLFLASH_USE_CPU_PATH && (SOFTCAP || BIAS || ALIBI)
/* common.cl's transform_score on eight consecutive keys key0 .. key0 + 7 of query i (natural-log
 * units in and out), for the CPU path's tiles that the row sees whole: float8 arithmetic that a
 * CPU runs in vector registers, where the per-key loop called a scalar tanh per score (PoCL,
 * n = 2048, d = 64: softcap cost 3.5 times the plain call). tanh(x) is 1 - 2 / (1 + e^(2x)),
 * within a few units of 2^-24 absolute (what a softmax sees), +-1 where e^(2x) overflows or
 * underflows. bias_at is the bias of key key0 of the row. */
static inline float8 transform_scores8(float8 s, float softcap, __global const float *bias_at, float alibi_slope,
                                       uint i, uint key0, uint seq_q, uint seq_k)
{
#if SOFTCAP
    s = softcap * (1.0f - 2.0f / (1.0f + exp2(s * (2.0f * M_LOG2E_F / softcap))));
#endif
#if BIAS
    s += vload8(0, bias_at);
#else
    (void)bias_at;
#endif
#if ALIBI
    /* d - j for j = key0 .. key0 + 7, exact in float below 2^24 as the scalar form's */
    const float dist = (float)((long)i + (long)seq_k - (long)seq_q - (long)key0);
    s -= alibi_slope * fabs((float8)(dist) - (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f));
#else
    (void)alibi_slope;
    (void)i;
    (void)key0;
    (void)seq_q;
    (void)seq_k;
#endif
    return s;
}
#endif

/* The kernel's arguments (the host sets them by position: forward.c), which each path's function
 * takes first. */
#define FORWARD_PARAMS \
    __global const bits_t *q, __global const bits_t *k, __global const bits_t *v, \
    __global out_t *o, __global float *lse, uint seq_q, uint seq_k, uint heads_q, uint group, \
    float score_scale, ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, \
    ulong k_hs, ulong k_ss, ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss, ulong o_off, \
    ulong o_bs, ulong o_hs, ulong o_ss, uint win_left, uint win_right, float softcap, \
    float out_scale, __global const float *bias, ulong bias_off, ulong bias_bs, ulong bias_hs, \
    ulong bias_rs, __global const float *alibi, __global const int *key_lens, uint n_splits, \
    uint split_keys
#define FORWARD_ARGS \
    q, k, v, o, lse, seq_q, seq_k, heads_q, group, score_scale, q_off, q_bs, q_hs, q_ss, k_off, \
    k_bs, k_hs, k_ss, v_off, v_bs, v_hs, v_ss, o_off, o_bs, o_hs, o_ss, win_left, win_right, \
    softcap, out_scale, bias, bias_off, bias_bs, bias_hs, bias_rs, alibi, key_lens, n_splits, \
    split_keys
/* A path's function, always inlined into the kernel: PoCL 3.1 (LLVM 15) computed wrong results
 * for the register-tiled and lane paths when their functions, which contain barriers, stayed calls
 * (test_forward's gpu_paths and test_split_kv on PoCL; Oclgrind and the H200 were right). */
#define PATH_FUNCTION static inline __attribute__((always_inline))

#if CLFLASH_USE_CPU_PATH
/* The CPU path (described above): one work-item per query row. */
PATH_FUNCTION void forward_cpu(FORWARD_PARAMS, __local float *kf, __local float *vf)
{

    const uint lid = get_local_id(0); /* = the row: one work-item per row */
    const uint q0 = query_block_index(n_splits) * BLOCK;
    const uint h = get_group_id(1);
    const uint b = get_group_id(2);
    const uint bh = b * heads_q + h;
    const uint hk = h / group;
    const uint qi = q0 + lid;

    const ulong kbase = tensor_index(k_off, k_bs, k_hs, k_ss, b, hk, 0);
    const ulong vbase = tensor_index(v_off, v_bs, v_hs, v_ss, b, hk, 0);

    /* This row of Q as fp32 (zeros past seq_q); the padding columns of vf are zero once and for all
     * (no tile load writes them). C1 of the first tile orders these stores before any read. */
    float qrow[HEAD_DIM];
    {
        const ulong qrow_at = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, min(qi, seq_q - 1));
        for (uint c = 0; c < HEAD_DIM; c++)
            qrow[c] = qi < seq_q ? load_g(q, qrow_at + c) : 0.0f;
    }
#if HD8 > HEAD_DIM
    for (uint idx = lid; idx < BLOCK * (HD8 - HEAD_DIM); idx += WG_SIZE)
        vf[idx / (HD8 - HEAD_DIM) * HD8 + HEAD_DIM + idx % (HD8 - HEAD_DIM)] = 0.0f;
#endif

    const uint key_len = batch_key_len(key_lens, b, seq_k);
    long lo, hi;
    uint key_begin, key_end;
    block_key_range(q0, BLOCK, seq_q, seq_k, key_len, win_left, win_right, BLOCK, &key_begin, &key_end);
    split_part(n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);
    visible_keys(min(qi, seq_q - 1), seq_q, seq_k, key_len, win_left, win_right, &lo, &hi);
#if ALIBI
    const float slope = alibi[h];
#else
    const float slope = 0.0f;
#endif
#if BIAS
    const ulong bias_row = bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs + (ulong)min(qi, seq_q - 1) * bias_rs;
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
            const bool in = k0 + lid < seq_k;
            const ulong krow = kbase + (ulong)min(k0 + lid, seq_k - 1) * k_ss;
            const ulong vrow = vbase + (ulong)min(k0 + lid, seq_k - 1) * v_ss;
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
        if (qi < seq_q && (long)k0 >= lo && (long)k0 + BLOCK <= hi) {
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
        if (qi < seq_q && k0 + BLOCK <= seq_k) {
            /* the tile's keys all exist (so their biases are inside the caller's buffer): the
             * transforms 8 keys at a time, then the keys the row does not see masked */
            const int lo_i = (int)clamp(lo, 0L, (long)seq_k), hi_i = (int)clamp(hi, 0L, (long)seq_k);
            float8 mx = (float8)(-INFINITY);
            for (uint k8 = 0; k8 < BLOCK / 8; k8++) {
#if BIAS
                __global const float *bias_at = bias + bias_row + k0 + 8 * k8;
#else
                __global const float *bias_at = bias;
#endif
                float8 x = transform_scores8(vload8(k8, s) * score_scale, softcap, bias_at, slope, qi, k0 + 8 * k8, seq_q,
                                             seq_k) * M_LOG2E_F;
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
                const bool visible = qi < seq_q && (long)key >= lo && (long)key < hi;
#if SOFTCAP || BIAS || ALIBI
#if BIAS
                const float bias_v = visible ? bias[bias_row + key] : 0.0f;
#else
                const float bias_v = 0.0f;
#endif
                const float x = transform_score(s[kk] * score_scale, softcap, bias_v, slope, qi, key, seq_q, seq_k) * M_LOG2E_F;
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

    if (qi < seq_q) {
        const float inv = l == 0.0f ? 0.0f : out_scale / l;
        const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, qi);
        float out[HD8];
        for (uint d8 = 0; d8 < HD8 / 8; d8++)
            vstore8(acc[d8] * inv, d8, out);
        for (uint c = 0; c < HEAD_DIM; c++)
            store_o(o, obase + c, out[c]);
#if WITH_LSE
        lse[(ulong)bh * seq_q + qi] = l == 0.0f ? -INFINITY : (m + log2(l)) * M_LN2_F;
#endif
    }
}
#elif RT
/* The register-tiled path (described above): RT_RM rows x keys per work-item. */
PATH_FUNCTION void forward_regtile(FORWARD_PARAMS, __local float4 *qs4, __local float4 *kv4, __local float4 *pt4,
                                   __local float *red)
{
    __local float *const qs = (__local float *)qs4;
    __local float *const kv = (__local float *)kv4;
    __local float *const pt = (__local float *)pt4;

    const uint lid = get_local_id(0);
    const uint tc = lid % RT_TC; /* key slots tc, tc + RT_TC, ...; float4 columns of O likewise */
    const uint tr = lid / RT_TC; /* rows tr, tr + RT_TR, ... of the query block */
    /* The block's rows are packed rows (common.cl: PACK query heads per query; row = query with
     * PACK = 1): q0 is the first, rows_total the number of (query, head) rows the grid covers. */
    const uint q0 = query_block_index(n_splits) * BLOCK_Q;
    const uint rows_total = seq_q * PACK;
    const uint b = get_group_id(2);
    uint h0, hk;
    group_heads(group, &h0, &hk);

    const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h0, 0);
    const ulong kbase = tensor_index(k_off, k_bs, k_hs, k_ss, b, hk, 0);
    const ulong vbase = tensor_index(v_off, v_bs, v_hs, v_ss, b, hk, 0);

    /* Q as fp32, zero past the last row and in the padding columns (they meet zeros of K). R2 of
     * the first tile orders these stores before any read. */
    for (uint idx = lid; idx < BLOCK_Q * 4 * RT_D4; idx += WG_SIZE) {
        const uint r = idx / (4 * RT_D4), c = idx % (4 * RT_D4), row = q0 + r;
        const ulong at = qbase + (ulong)(row % PACK) * q_hs + (ulong)ROW_QUERY(row) * q_ss + c;
        qs[r * 4 * RT_QS4 + c] = (row < rows_total && c < HEAD_DIM) ? load_g(q, at) : 0.0f;
    }

    const uint key_len = batch_key_len(key_lens, b, seq_k);
    uint key_begin, key_end;
    {
        const uint first = ROW_QUERY(q0), last = ROW_QUERY(min(q0 + BLOCK_Q, rows_total) - 1);
        block_key_range(first, last - first + 1, seq_q, seq_k, key_len, win_left, win_right, BLOCK, &key_begin,
                        &key_end);
    }
    split_part(n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);

    /* This work-item's rows: their query, head and visible keys [lo_r, hi_r) (empty for rows past
     * the last), and the keys all of them see, [max_lo, min_hi): a tile inside it needs no mask. */
    uint lo_r[RT_RM], hi_r[RT_RM], qi_r[RT_RM], h_r[RT_RM];
    uint max_lo = 0, min_hi = seq_k;
#if BIAS
    ulong bias_row[RT_RM];
#endif
#pragma unroll
    for (uint i = 0; i < RT_RM; i++) {
        const uint row = q0 + tr + RT_TR * i;
        const uint qi = ROW_QUERY(min(row, rows_total - 1));
        qi_r[i] = qi;
        h_r[i] = ROW_HEAD(h0, min(row, rows_total - 1));
        long lo, hi;
        visible_keys(qi, seq_q, seq_k, key_len, win_left, win_right, &lo, &hi);
        if (row >= rows_total)
            hi = 0;
        lo_r[i] = (uint)clamp(lo, 0L, (long)seq_k);
        hi_r[i] = (uint)clamp(hi, 0L, (long)seq_k);
        max_lo = max(max_lo, lo_r[i]);
        min_hi = min(min_hi, hi_r[i]);
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
                (k0 + r < seq_k && c < HEAD_DIM) ? load_g(k, kbase + (ulong)(k0 + r) * k_ss + c) : 0.0f;
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

        /* every key of the tile visible to every row of this work-item: no mask needed */
        const bool full = k0 >= max_lo && k0 + BLOCK <= min_hi;
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
                const uint qi = qi_r[i];
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
                    const bool visible = (BLOCK % RT_TC == 0 || tc + RT_TC * j < BLOCK) && key >= lo_r[i] && key < hi_r[i];
#if SOFTCAP || BIAS || ALIBI
#if BIAS
                    const float bias_v = visible ? bias[bias_row[i] + key] : 0.0f;
#else
                    const float bias_v = 0.0f;
#endif
                    const float x = transform_score(s[i][j] * score_scale, softcap, bias_v, slope, qi, key, seq_q, seq_k) * M_LOG2E_F;
#else
                    const float x = s[i][j] * score_scale;
#endif
                    s[i][j] = visible ? x : -INFINITY;
                    mx[i] = fmax(mx[i], s[i][j]);
                }
                (void)qi;
                (void)slope;
            }
        }
#pragma unroll
        for (uint i = 0; i < RT_RM; i++)
            red[(tr * RT_RM + i) * RT_TC + tc] = mx[i];
        barrier(CLK_LOCAL_MEM_FENCE); /* R3 */

        /* K is no longer read: V takes its place (ordered before the P V reads by R4) */
        for (uint idx = lid; idx < BLOCK * 4 * RT_VC * RT_TC; idx += WG_SIZE) {
            const uint r = idx / (4 * RT_VC * RT_TC), c = idx % (4 * RT_VC * RT_TC);
            kv[r * 4 * RT_KS4 + c] =
                (k0 + r < seq_k && c < HEAD_DIM) ? load_g(v, vbase + (ulong)(k0 + r) * v_ss + c) : 0.0f;
        }
#pragma unroll
        for (uint i = 0; i < RT_RM; i++) {
            float tile_max = -INFINITY;
            for (uint u = 0; u < RT_TC; u++)
                tile_max = fmax(tile_max, red[(tr * RT_RM + i) * RT_TC + u]);
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
        red[(tr * RT_RM + i) * RT_TC + tc] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE); /* R5 */
#pragma unroll
    for (uint i = 0; i < RT_RM; i++) {
        const uint qi = qi_r[i], h = h_r[i];
        if (q0 + tr + RT_TR * i < rows_total) {
            float lt = 0.0f;
            for (uint u = 0; u < RT_TC; u++)
                lt += red[(tr * RT_RM + i) * RT_TC + u];
            /* lt == 0: the row saw no key (O = 0, lse = -inf); a NaN the row sees reaches O and lse */
            const float inv = lt == 0.0f ? 0.0f : out_scale / lt;
            const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, qi);
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
                lse[((ulong)b * heads_q + h) * seq_q + qi] = lt == 0.0f ? -INFINITY : (m[i] + log2(lt)) * M_LN2_F;
#endif
        }
    }
}
#else
/* The lane-per-row path (described above): TPR work-items per query row. */
PATH_FUNCTION void forward_lanes(FORWARD_PARAMS, __local bits_t *qt, __local bits_t *kt, __local bits_t *vt,
                                 __local float *pt, __local float *rowmax)
{

    const uint lid = get_local_id(0);
    const uint row = lid / TPR;
    const uint lane = lid % TPR;
    const uint q0 = query_block_index(n_splits) * BLOCK;
    const uint h = get_group_id(1);
    const uint b = get_group_id(2);
    const uint bh = b * heads_q + h;
    const uint hk = h / group;
    const uint qi = q0 + row; /* this row's query index; may be >= seq_q in the last block */

    const ulong qbase = tensor_index(q_off, q_bs, q_hs, q_ss, b, h, 0);
    const ulong kbase = tensor_index(k_off, k_bs, k_hs, k_ss, b, hk, 0);
    const ulong vbase = tensor_index(v_off, v_bs, v_hs, v_ss, b, hk, 0);

    for (uint idx = lid; idx < BLOCK * HEAD_DIM; idx += WG_SIZE) {
        const uint r = idx / HEAD_DIM, c = idx % HEAD_DIM;
        qt[r * LDS_STRIDE + c] = (q0 + r < seq_q) ? q[qbase + (ulong)(q0 + r) * q_ss + c] : zero_bits;
    }

    /* The key tiles the block visits (block_key_range) and the keys this row sees, [lo, hi). */
    const uint key_len = batch_key_len(key_lens, b, seq_k);
    long lo, hi;
    uint key_begin, key_end;
    block_key_range(q0, BLOCK, seq_q, seq_k, key_len, win_left, win_right, BLOCK, &key_begin, &key_end);
    split_part(n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);
    visible_keys(min(qi, seq_q - 1), seq_q, seq_k, key_len, win_left, win_right, &lo, &hi);
#if ALIBI
    const float slope = alibi[h];
#else
    const float slope = 0.0f;
#endif
#if BIAS
    const ulong bias_row = bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs + (ulong)min(qi, seq_q - 1) * bias_rs;
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
            const bool in = k0 + r < seq_k;
            kt[c * KT_STRIDE + r] = in ? k[kbase + (ulong)(k0 + r) * k_ss + c] : zero_bits;
            vt[r * LDS_STRIDE + c] = in ? v[vbase + (ulong)(k0 + r) * v_ss + c] : zero_bits;
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
            const bool visible = qi < seq_q && (long)key >= lo && (long)key < hi;
#if SOFTCAP || BIAS || ALIBI
#if BIAS
            const float bias_v = visible ? bias[bias_row + key] : 0.0f;
#else
            const float bias_v = 0.0f;
#endif
            const float x = transform_score(s[kk] * score_scale, softcap, bias_v, slope, qi, key, seq_q, seq_k) * M_LOG2E_F;
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

    if (qi < seq_q) {
        /* l == 0: the row saw no key (O = 0, lse = -inf). A NaN in an input the row sees makes l
         * NaN, and the NaN reaches O and lse. */
        const float inv = l == 0.0f ? 0.0f : out_scale / l;
        const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, qi);
        for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
            const uint c = lane + cc * TPR;
            if (c < HEAD_DIM)
                store_o(o, obase + c, acc[cc] * inv);
        }
#if WITH_LSE
        if (lane == 0)
            lse[(ulong)bh * seq_q + qi] = l == 0.0f ? -INFINITY : (m + log2(l)) * M_LN2_F;
#endif
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flash_forward(FORWARD_PARAMS)
{
    /* Each path's local arrays are declared here (OpenCL C 1.2 allows __local variables only at
     * kernel scope) and passed to the path's function. */
#if CLFLASH_USE_CPU_PATH
    __local float kf[HEAD_DIM * BLOCK]; /* transposed: kf[c][j] */
    __local float vf[BLOCK * HD8];
    forward_cpu(FORWARD_ARGS, kf, vf);
#elif RT
    __local float4 qs4[BLOCK_Q * RT_QS4]; /* qs[r][c]: the Q block, fp32 */
    __local float4 kv4[BLOCK * RT_KS4];   /* kv[j][c]: the K tile, then the V tile, fp32 */
    __local float4 pt4[BLOCK * RT_PS4];   /* pt[j][tr * RT_RM + i]: P, key-major */
    __local float red[BLOCK_Q * RT_TC];   /* red[tr * RT_RM + i][tc]: per-work-item maxima, then sums */
    forward_regtile(FORWARD_ARGS, qs4, kv4, pt4, red);
#else
    __local bits_t qt[BLOCK * LDS_STRIDE];
    __local bits_t kt[HEAD_DIM * KT_STRIDE]; /* transposed: kt[c][j] */
    __local bits_t vt[BLOCK * LDS_STRIDE];
    __local float pt[BLOCK * P_STRIDE];
    __local float rowmax[BLOCK * TPR];
    forward_lanes(FORWARD_ARGS, qt, kt, vt, pt, rowmax);
#endif
}
