/*
 * flash_backward.cl - the portable FlashAttention backward pass: dQ, dK and dV by recomputing the
 * probabilities tile by tile from Q, K and the forward's lse, never storing a seq_q x seq_k matrix.
 * The host prepends common.cl and enqueues two kernels on one queue:
 *   flash_backward_rowdot  D_i = sum_c dO[i][c] * O[i][c] in fp32, one work-item per query row,
 *                          into a float buffer the host owns, laid out as lse ([batch][heads_q]
 *                          [seq_q], or [heads_q][total_q] for a variable-length batch);
 *   flash_backward_grads   one launch with two kinds of work-group:
 *     dK/dV groups (group id 0 < tiles_k, id 1 < heads_kv): one K/V block of one kv head; it loops
 *       over the query heads of the head's group and, for each, over the query blocks that see any
 *       of its keys, and writes that block of dK and dV;
 *     dQ groups (group id 0 >= tiles_k): one Q block of one query head; it loops over the key
 *       blocks its rows see and writes that block of dQ.
 *   The two kinds are independent (both only read Q, K, V, dO, lse and D), so one launch holds
 *   both: it keeps the GPU busy through the other kind's tail, and a call whose enqueue fails has
 *   written nothing (two launches could fail between them).
 * Each gradient element has exactly one writer that sums its terms in a fixed order, so the
 * results are the same bits on every run (no atomics). Both kinds recompute, for a key j and a
 * query i the row sees, with x = q_i.k_j and f the forward's score transform (common.cl's
 * transform_score: softcap, then bias and ALiBi; the identity without them),
 *   P = exp(f(scale * x) - lse_i),  dP = dO_i.v_j,  dS = P * (dP - D_i) * f'(scale * x)
 * and accumulate dV_j += P dO_i, dK_j += scale dS q_i, or dQ_i += scale dS k_j, in fp32: dS is the
 * gradient with respect to the scaled score before the transform, and the scale of
 * s = scale * x enters once, when dK and dQ are stored. f' is 1 - tanh^2(s / softcap) with softcap
 * and 1 otherwise (bias and ALiBi are additive; neither gets a gradient).
 * Probabilities are formed in the log2 domain, exp2(f(s) * log2(e) - lse_i*log2(e)). A row
 * whose lse is -INFINITY sees no key: its P is 0 without ever forming exp2(-inf - -inf), its dQ is
 * 0, and it adds nothing to dK and dV. Keys no query sees get dK = dV = 0; so do keys every
 * query sees only through a -INFINITY bias (their P is exactly 0).
 * Which keys a query sees is common.cl's visible_keys (causal, sliding window, key lengths), as in
 * the forward. Both ends of a query's range grow with the query index, so a dQ group loops only
 * over the key blocks between its first row's first key and its last row's last key, and a dK/dV
 * group only over the query blocks from the first query that can see its first key to the last
 * that can see its last key (visible_queries); the rest are skipped, not computed and masked.
 *
 * Work-groups have BLOCK*TPR work-items: work-item lid owns block row lid / TPR (a key in a dK/dV
 * group, a query in a dQ group), and its lane t = lid % TPR owns the head_dim columns t, t+TPR, ...
 * of that row's accumulators and, while scoring, the partner rows t, t+TPR, ... of the other block.
 *
 * Local tiles (one set, used differently by the two kinds):
 *   rows_a[BLOCK][LDS_STRIDE], rows_b[BLOCK][LDS_STRIDE]  storage bits, row-major, loaded once:
 *                                        dK/dV: the K and V block;  dQ: the Q and dO block;
 *   cols_a[HEAD_DIM][T_STRIDE], cols_b[HEAD_DIM][T_STRIDE]  storage bits, transposed (so a lane's
 *                                        partner rows are consecutive), reloaded per partner block:
 *                                        dK/dV: the Q and dO block;  dQ: the K and V block;
 *   pt[BLOCK][P_STRIDE], dst[BLOCK][P_STRIDE]  P and dS of the block pair, fp32, key-major
 *                                        (pt[j][i]); dQ groups use only dst;
 *   row_lse[BLOCK], row_d[BLOCK]         dK/dV: lse (log2 domain) and D of the current query rows.
 * Per partner block, with the barrier that protects each step:
 *   B1  every read of cols_a, cols_b, pt, dst, row_lse, row_d for the previous block (and the
 *       rows_a, rows_b stores) is finished; the work-group loads cols_a, cols_b (and row_lse, row_d).
 *   B2  they are complete; each lane scores its row against its partner rows (S and dP together)
 *       and writes P and dS (dQ: dS only) into pt and dst.
 *   B3  pt and dst are complete; each lane adds P^T dO and dS^T Q into its dV and dK columns
 *       (dQ: dS K into its dQ columns).
 * Every barrier is reached by all work-items of a group the same number of times: the branch on
 * the kind and every loop bound depend only on the group ids and the kernel arguments (and, with
 * VARLEN, the batch entry's cumulative lengths, which all work-items of a group read alike).
 *
 * Variable-length batches (VARLEN, clflash.h): both kernels take their batch entry's first rows and
 * lengths from common.cl's seq_span and work on the sequence as on an entry of that many queries
 * and keys (bwd_args), its lse and D rows at lse_row0; groups past its keys (dK/dV) or queries
 * (dQ) return at once.
 *
 * Measuring aid: the host passes CLFLASH_BWD_SKIP_DQ=0 and CLFLASH_BWD_SKIP_DKDV=0; a context whose
 * build options add -D CLFLASH_BWD_SKIP_DQ=1 (or _SKIP_DKDV=1), which follow the host's defines and
 * so redefine it, builds a kernel whose groups of that kind return at once, so that each kind can
 * be timed alone.
 */
/*
 * The CPU path. PoCL runs a work-group as a loop over its work-items between barriers, one
 * work-item per row (TPR = 1, the CPU plan), and the steps above then cost more in barriers, in
 * per-work-item state kept across them and in scalar loads than in arithmetic. When the host
 * defines CLFLASH_CPU_PATH=1 (lib/backward_plan.c does for devices of type CPU) and TPR == 1
 * and BLOCK is a multiple of 8, flash_backward_grads instead keeps its tiles as fp32 and has two
 * barriers per partner block. With HD8 = HEAD_DIM rounded up to a multiple of 8, its local arrays
 * (the same set for both kinds of group, used differently) are
 *   ta[HEAD_DIM][BLOCK], tb[HEAD_DIM][BLOCK]  the partner block transposed, for scoring 8 partner
 *                                rows at a time:  dK/dV: Q and dO;  dQ: K and V;
 *   ra[BLOCK][HD8], rb[BLOCK][HD8]  the partner block row-major, its padding columns zero, for
 *                                adding 8 gradient columns at a time:  dK/dV: Q and dO;  dQ: K (rb
 *                                unused);
 *   row_lse[BLOCK], row_d[BLOCK]  dK/dV: lse (log2 domain) and D of the current query rows.
 * A work-item keeps its own row (dK/dV: its key's K and V row; dQ: its query's Q and dO row) in
 * fp32 private arrays and its gradient rows in float8 accumulators. Per partner block:
 *   C1  every read of the arrays for the previous block is finished; work-item lid loads partner
 *       row lid into both layouts (and row_lse, row_d);
 *   C2  they are complete; each work-item does all of its row's work for the block alone: S and
 *       dP against the block's rows (float8 fused multiply-adds down the transposed tiles), P and
 *       dS on 8 pairs at a time (with softcap, bias or ALiBi: which pairs the row sees and their
 *       biases first, pair by pair, then common.cl's transformed_prob8), then dV += P dO and
 *       dK += dS Q (dQ += dS K) on 8 columns at a time, skipping the partner rows whose P (dS) is
 *       0, which add nothing.
 * The rules (which pairs are seen, the transforms and f', the -INFINITY lse rows, the skipped
 * block ranges) are those above; each gradient element still has one writer summing in a fixed
 * order. The host passes CLFLASH_CPU_PATH (1 or 0) with every build (lib/backward_plan.c: the
 * device class or the portable.cpu_path setting); on a GPU build nothing here is compiled.
 */
#ifndef CLFLASH_CPU_PATH
#error "CLFLASH_CPU_PATH is set by the host (lib/backward_plan.c)"
#endif
#if CLFLASH_CPU_PATH && TPR == 1 && BLOCK % 8 == 0
#define CLFLASH_USE_CPU_PATH 1
#define HD8 ((HEAD_DIM + 7) / 8 * 8)
#else
#define CLFLASH_USE_CPU_PATH 0
#endif
#define WG_SIZE (BLOCK * TPR)

#define PARTNERS_PER_LANE (BLOCK / TPR)
#define COLS_PER_LANE ((HEAD_DIM + TPR - 1) / TPR)
#if !defined(CLFLASH_BWD_SKIP_DQ) || !defined(CLFLASH_BWD_SKIP_DKDV)
#error "CLFLASH_BWD_SKIP_DQ and CLFLASH_BWD_SKIP_DKDV are set by the host (lib/backward_plan.c)"
#endif

__kernel __attribute__((reqd_work_group_size(ROWDOT_WG, 1, 1))) void
flash_backward_rowdot(__global const bits_t *o, __global const bits_t *d_o, __global float *dvec,
                      uint seq_q, uint heads_q, ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss,
                      __global const int *cu_seqlens_q, uint total_q)
{
    const uint i = get_global_id(0);
    const uint h = get_group_id(1);
    const uint b = get_group_id(2);
    uint q_first; /* VARLEN: the sequence's rows (common.cl's seq_span); row 0 and seq_q without */
    const uint n_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_first);
    if (i >= n_q)
        return;
    const ulong base = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, q_first + i);
    float acc = 0.0f;
    for (uint c = 0; c < HEAD_DIM; c++)
        acc = fma(load_g(d_o, base + c), load_g(o, base + c), acc);
    dvec[lse_row0(b, h, heads_q, seq_q, total_q, q_first) + i] = acc;
}

/* The shape, layout and feature arguments both kinds of group read; seq_q and seq_k are this
 * batch entry's (with VARLEN its sequence's lengths, whose rows start at packed rows q_first and
 * k_first of the tensors and q_first of lse's [heads_q][total_q] rows; without, the arguments and
 * 0), key_len is its key count (seq_k without key lengths), diag_k the key count its diagonal is
 * aligned to (common.cl's diagonal_keys). */
typedef struct {
    uint seq_q, seq_k, heads_q, group;
    float scale_log2, scale;
    ulong q_off, q_bs, q_hs, q_ss, k_off, k_bs, k_hs, k_ss, v_off, v_bs, v_hs, v_ss, o_off, o_bs, o_hs, o_ss;
    uint key_len;
    long diag_k; /* signed: diagonal_keys moves it by the host's diagonal offset */
    uint win_left, win_right;
    float softcap;
    ulong bias_off, bias_bs, bias_hs, bias_rs;
    uint q_first, k_first, total_q;
} bwd_args;

/* P of a (query qi, key kj) pair the row sees, from the raw dot product x = q.k and the row's lse
 * in the log2 domain (l2); *slope receives f'(scale * x) (see the top of the file). bias_row is
 * the row's first bias element, slope_h the head's ALiBi slope and dist ALiBi's distance
 * qi + diag_k - seq_q - kj (all three unused without their feature). The caller forms dist from a
 * part it keeps across its loop and a part that changes: formed here from qi and kj, the
 * compiler kept a copy of the invariant part per unrolled partner (Intel's, for Xe-LP: four
 * 64-bit values, and the gradient kernel spilled at d = 128 with every feature). */
static inline float pair_prob(float x, float l2, const bwd_args *a, __global const float *bias, ulong bias_row,
                              float slope_h, uint kj, long dist, float *slope)
{
#if SOFTCAP || BIAS || ALIBI
#if BIAS
    const float bias_v = bias[bias_row + kj];
#else
    const float bias_v = 0.0f;
#endif
    /* softcap and bias as transform_score_grad applies them, then ALiBi */
    float f = transform_score_grad(x * a->scale, a->softcap, bias_v, 0.0f, 0, 0, 0, 0, slope);
#if ALIBI
    f -= slope_h * fabs((float)dist);
#else
    (void)slope_h;
    (void)dist;
#endif
    return exp2_normal(fma(f, M_LOG2E_F, -l2));
#else
    (void)bias;
    (void)bias_row;
    (void)slope_h;
    (void)kj;
    (void)dist;
    *slope = 1.0f;
    return exp2_normal(fma(x, a->scale_log2, -l2));
#endif
}

/* The queries that can see a key of [k0, k_end) (k0 < k_end <= seq_k): common.cl's
 * key_block_queries. A superset of the pairs is harmless (every pair is still tested with
 * visible_keys); a subset would drop terms. */
static inline void visible_queries(uint k0, uint k_end, const bwd_args *a, uint *q_begin, uint *q_end)
{
    key_block_queries(k0, k_end, a->seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, q_begin, q_end);
}

/* A dQ row's lse in the log2 domain (-inf past seq_q) and, in *d_row, its D (0 past seq_q). The dQ
 * work-groups read them inside their key loop, after its barrier, not once before it: Intel's CPU
 * OpenCL compiler (2026.2) gave every work-item of a group the values work-item 63 had read before
 * a loop with barriers, and every dQ came out NaN or wrong. */
static inline float row_lse_log2(__global const float *lse, __global const float *dvec, ulong lrow, uint qi,
                                 uint seq_q, float *d_row)
{
    *d_row = qi < seq_q ? dvec[lrow + qi] : 0.0f;
    return qi < seq_q ? lse[lrow + qi] * M_LOG2E_F : -INFINITY;
}

/* Where one (batch entry b, query head h) starts: its rows of Q (q) and of O and dO (o), its row 0
 * in lse and D (lse: common.cl's lse_row0), its first bias element (bias) and its ALiBi slope (0
 * without ALiBi). Every kind of work-group, GPU or CPU, reads them the same way. */
typedef struct {
    ulong q, o, lse, bias;
    float slope;
} head_bases;
static inline head_bases bases_of_head(const bwd_args *a, __global const float *alibi, uint b, uint h)
{
    head_bases hb;
    hb.q = tensor_index(a->q_off, a->q_bs, a->q_hs, a->q_ss, b, h, a->q_first);
    hb.o = tensor_index(a->o_off, a->o_bs, a->o_hs, a->o_ss, b, h, a->q_first);
    hb.lse = lse_row0(b, h, a->heads_q, a->seq_q, a->total_q, a->q_first);
    hb.bias = a->bias_off + (ulong)b * a->bias_bs + (ulong)h * a->bias_hs;
    hb.slope = alibi_slope(alibi, h);
    return hb;
}

/* The first K and V elements of K/V head hk of batch entry b (its sequence's first key row). */
static inline void bases_of_kv(const bwd_args *a, uint b, uint hk, ulong *kbase, ulong *vbase)
{
    *kbase = tensor_index(a->k_off, a->k_bs, a->k_hs, a->k_ss, b, hk, a->k_first);
    *vbase = tensor_index(a->v_off, a->v_bs, a->v_hs, a->v_ss, b, hk, a->k_first);
}

/* The GPU paths' tiles: rows r0 .. r0 + BLOCK - 1 of two tensors with the same rows (x at xbase,
 * y at ybase, rows xs and ys apart) into local tiles, zeros at rows not below `limit`; element
 * (r, c) goes to [r * rs + c * cs] (rs = LDS_STRIDE, cs = 1 for a row-major tile; rs = 1,
 * cs = T_STRIDE for a transposed one). */
static inline void stage_tile_pair(__local bits_t *xt, __local bits_t *yt, uint rs, uint cs, __global const bits_t *x,
                                   ulong xbase, ulong xs, __global const bits_t *y, ulong ybase, ulong ys, uint r0,
                                   uint limit)
{
    for (uint idx = get_local_id(0); idx < BLOCK * HEAD_DIM; idx += WG_SIZE) {
        const uint r = idx / HEAD_DIM, c = idx % HEAD_DIM;
        const bool in = r0 + r < limit;
        xt[r * rs + c * cs] = in ? x[xbase + (ulong)(r0 + r) * xs + c] : zero_bits;
        yt[r * rs + c * cs] = in ? y[ybase + (ulong)(r0 + r) * ys + c] : zero_bits;
    }
}

/* Row `row` of two tensors with the same rows (x at xbase, y at ybase, rows xs and ys apart) as
 * floats into private arrays, zeros where `row` is not below `limit` (the CPU path's own rows). */
static inline void load_row_pair(float *x, float *y, __global const bits_t *xt, ulong xbase, ulong xs,
                                 __global const bits_t *yt, ulong ybase, ulong ys, uint row, uint limit)
{
    const ulong xr = xbase + (ulong)min(row, limit - 1) * xs;
    const ulong yr = ybase + (ulong)min(row, limit - 1) * ys;
    for (uint c = 0; c < HEAD_DIM; c++) {
        x[c] = row < limit ? load_g(xt, xr + c) : 0.0f;
        y[c] = row < limit ? load_g(yt, yr + c) : 0.0f;
    }
}

/* For a dQ work-group's query block from q0: the key blocks it visits, [*key_begin, *key_end)
 * (block_key_range), and the keys its query qi sees, [*lo, *hi) (visible_keys; a qi past seq_q
 * takes the last query's, and its row adds nothing). */
static inline void dq_key_ranges(const bwd_args *a, uint q0, uint qi, uint *key_begin, uint *key_end, long *lo,
                                 long *hi)
{
    block_key_range(q0, BLOCK, a->seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, BLOCK, key_begin,
                    key_end);
    visible_keys(min(qi, a->seq_q - 1), a->seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, lo, hi);
}

/* dK and dV for keys k0 .. k0+BLOCK-1 of kv head hk of batch entry b. */
static inline void dkdv_block(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                              __global const bits_t *d_o, __global const float *lse, __global const float *dvec,
                              __global bits_t *dk, __global bits_t *dv, __global const float *bias,
                              __global const float *alibi, const bwd_args *a, uint k0, uint hk, uint b,
                              __local bits_t *kt, __local bits_t *vt, __local bits_t *qT, __local bits_t *doT,
                              __local float *pt, __local float *dst, __local float *row_lse, __local float *row_d)
{
    const uint lid = get_local_id(0);
    const uint jr = lid / TPR; /* this work-item's key within the block */
    const uint lane = lid % TPR;
    const uint kj = k0 + jr;
    const uint seq_q = a->seq_q, seq_k = a->seq_k;

    ulong kbase, vbase;
    bases_of_kv(a, b, hk, &kbase, &vbase);
    stage_tile_pair(kt, vt, LDS_STRIDE, 1, k, kbase, a->k_ss, v, vbase, a->v_ss, k0, seq_k);

    /* Queries outside [q_start, q_end) see none of this block's keys: their blocks are skipped
     * rather than computed and masked. */
    uint q_start, q_end;
    visible_queries(k0, min(k0 + BLOCK, seq_k), a, &q_start, &q_end);

    float acc_k[COLS_PER_LANE], acc_v[COLS_PER_LANE];
    for (uint cc = 0; cc < COLS_PER_LANE; cc++)
        acc_k[cc] = acc_v[cc] = 0.0f;
    /* ALiBi's distance for query qi is qi - key_shift (pair_prob) */
    const long key_shift = (long)kj + (long)seq_q - a->diag_k;

    for (uint g = 0; g < a->group; g++) {
        const head_bases hb = bases_of_head(a, alibi, b, hk * a->group + g);
        const ulong lrow = hb.lse, qbase = hb.q, obase = hb.o, bias_head = hb.bias;
        const float slope_h = hb.slope;
        for (uint q0 = q_start; q0 < q_end; q0 += BLOCK) {
            barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
            stage_tile_pair(qT, doT, 1, T_STRIDE, q, qbase, a->q_ss, d_o, obase, a->o_ss, q0, seq_q);
            for (uint r = lid; r < BLOCK; r += WG_SIZE) {
                const bool in = q0 + r < seq_q;
                row_lse[r] = in ? lse[lrow + q0 + r] * M_LOG2E_F : -INFINITY;
                row_d[r] = in ? dvec[lrow + q0 + r] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* B2 */

            float s[PARTNERS_PER_LANE], dp[PARTNERS_PER_LANE];
            for (uint rr = 0; rr < PARTNERS_PER_LANE; rr++)
                s[rr] = dp[rr] = 0.0f;
            /* c outer, query rows inner: one K and one V element serve all of the lane's rows. */
            for (uint c = 0; c < HEAD_DIM; c++) {
                const float kc = load_l(kt, jr * LDS_STRIDE + c);
                const float vc = load_l(vt, jr * LDS_STRIDE + c);
                for (uint rr = 0; rr < PARTNERS_PER_LANE; rr++) {
                    const uint i = lane + rr * TPR;
                    s[rr] = fma(load_l(qT, c * T_STRIDE + i), kc, s[rr]);
                    dp[rr] = fma(load_l(doT, c * T_STRIDE + i), vc, dp[rr]);
                }
            }
            for (uint rr = 0; rr < PARTNERS_PER_LANE; rr++) {
                const uint i = lane + rr * TPR;
                const uint qi = q0 + i;
                const float l2 = row_lse[i];
                long lo, hi;
                visible_keys(min(qi, seq_q - 1), seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, &lo, &hi);
                const bool seen = qi < seq_q && l2 != -INFINITY && (long)kj >= lo && (long)kj < hi;
                float slope = 1.0f, p = 0.0f;
                if (seen)
                    p = pair_prob(s[rr], l2, a, bias, bias_head + (ulong)qi * a->bias_rs, slope_h, kj,
                                  (long)qi - key_shift, &slope);
                pt[jr * P_STRIDE + i] = p;
                dst[jr * P_STRIDE + i] = p * (dp[rr] - row_d[i]) * slope;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* B3 */

            const uint rows = min((uint)BLOCK, seq_q - q0); /* rows past seq_q add only zeros */
            for (uint i = 0; i < rows; i++) {
                const float p = pt[jr * P_STRIDE + i];
                const float ds = dst[jr * P_STRIDE + i];
                for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
                    const uint c = lane + cc * TPR;
                    if (c < HEAD_DIM) {
                        acc_v[cc] = fma(p, load_l(doT, c * T_STRIDE + i), acc_v[cc]);
                        acc_k[cc] = fma(ds, load_l(qT, c * T_STRIDE + i), acc_k[cc]);
                    }
                }
            }
        }
    }

    if (kj < seq_k) {
        const ulong dkrow = kbase + (ulong)kj * a->k_ss;
        const ulong dvrow = vbase + (ulong)kj * a->v_ss;
        for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
            const uint c = lane + cc * TPR;
            if (c < HEAD_DIM) {
                store_g(dk, dkrow + c, acc_k[cc] * a->scale);
                store_g(dv, dvrow + c, acc_v[cc]);
            }
        }
    }
}

/* dQ for queries q0 .. q0+BLOCK-1 of query head h of batch entry b. */
static inline void dq_block(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                            __global const bits_t *d_o, __global const float *lse, __global const float *dvec,
                            __global bits_t *dq, __global const float *bias, __global const float *alibi,
                            const bwd_args *a, uint q0, uint h, uint b, __local bits_t *qt,
                            __local bits_t *dorow, __local bits_t *kT, __local bits_t *vT, __local float *dst)
{
    const uint lid = get_local_id(0);
    const uint row = lid / TPR;
    const uint lane = lid % TPR;
    const uint hk = h / a->group;
    const uint qi = q0 + row;
    const uint seq_q = a->seq_q, seq_k = a->seq_k;
    const head_bases hb = bases_of_head(a, alibi, b, h);
    const ulong lrow = hb.lse, qbase = hb.q, obase = hb.o;
    const float slope_h = hb.slope;
    ulong kbase, vbase;
    bases_of_kv(a, b, hk, &kbase, &vbase);
    stage_tile_pair(qt, dorow, LDS_STRIDE, 1, q, qbase, a->q_ss, d_o, obase, a->o_ss, q0, seq_q);
    long lo, hi;
    uint key_begin, key_end;
    dq_key_ranges(a, q0, qi, &key_begin, &key_end, &lo, &hi);
    const ulong bias_row = hb.bias + (ulong)min(qi, seq_q - 1) * a->bias_rs;
    /* ALiBi's distance for key j is query_diag - j (pair_prob) */
    const long query_diag = (long)qi + a->diag_k - (long)seq_q;

    float acc[COLS_PER_LANE];
    for (uint cc = 0; cc < COLS_PER_LANE; cc++)
        acc[cc] = 0.0f;

    for (uint k0 = key_begin; k0 < key_end; k0 += BLOCK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* B1 */
        stage_tile_pair(kT, vT, 1, T_STRIDE, k, kbase, a->k_ss, v, vbase, a->v_ss, k0, seq_k);
        barrier(CLK_LOCAL_MEM_FENCE); /* B2 */
        float d_row;
        const float l2 = row_lse_log2(lse, dvec, lrow, qi, seq_q, &d_row);

        float s[PARTNERS_PER_LANE], dp[PARTNERS_PER_LANE];
        for (uint kk = 0; kk < PARTNERS_PER_LANE; kk++)
            s[kk] = dp[kk] = 0.0f;
        for (uint c = 0; c < HEAD_DIM; c++) {
            const float qc = load_l(qt, row * LDS_STRIDE + c);
            const float oc = load_l(dorow, row * LDS_STRIDE + c);
            for (uint kk = 0; kk < PARTNERS_PER_LANE; kk++) {
                const uint j = lane + kk * TPR;
                s[kk] = fma(qc, load_l(kT, c * T_STRIDE + j), s[kk]);
                dp[kk] = fma(oc, load_l(vT, c * T_STRIDE + j), dp[kk]);
            }
        }
        for (uint kk = 0; kk < PARTNERS_PER_LANE; kk++) {
            const uint j = lane + kk * TPR;
            const uint key = k0 + j;
            const bool seen = qi < seq_q && l2 != -INFINITY && (long)key >= lo && (long)key < hi;
            float slope = 1.0f, p = 0.0f;
            if (seen)
                p = pair_prob(s[kk], l2, a, bias, bias_row, slope_h, key, query_diag - (long)key, &slope);
            dst[j * P_STRIDE + row] = p * (dp[kk] - d_row) * slope;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* B3 */

        const uint keys = min((uint)BLOCK, seq_k - k0); /* keys past seq_k add only zeros */
        for (uint j = 0; j < keys; j++) {
            const float ds = dst[j * P_STRIDE + row];
            for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
                const uint c = lane + cc * TPR;
                if (c < HEAD_DIM)
                    acc[cc] = fma(ds, load_l(kT, c * T_STRIDE + j), acc[cc]);
            }
        }
    }

    if (qi < seq_q) {
        const ulong dqrow = qbase + (ulong)qi * a->q_ss;
        for (uint cc = 0; cc < COLS_PER_LANE; cc++) {
            const uint c = lane + cc * TPR;
            if (c < HEAD_DIM)
                store_g(dq, dqrow + c, acc[cc] * a->scale);
        }
    }
}

#if CLFLASH_USE_CPU_PATH
/* s[i] = x . cols[.][i] for the BLOCK rows of a transposed tile, 8 rows per float8. */
static inline void cpu_scores(const float *x, __local const float *cols, float *s)
{
    float8 s8[BLOCK / 8];
    for (uint i8 = 0; i8 < BLOCK / 8; i8++)
        s8[i8] = (float8)(0.0f);
    for (uint c = 0; c < HEAD_DIM; c++) {
        const float8 xc = (float8)(x[c]);
#pragma unroll
        for (uint i8 = 0; i8 < BLOCK / 8; i8++) /* unrolled: s8 stays in registers */
            s8[i8] = fma(xc, vload8(i8, cols + c * BLOCK), s8[i8]);
    }
    for (uint i8 = 0; i8 < BLOCK / 8; i8++)
        vstore8(s8[i8], i8, s);
}

/* acc += w[r] * rows[r] over rows r < n whose weight is not 0 (a 0 weight adds nothing). */
static inline void cpu_add_rows(float8 *acc, const float *w, __local const float *rows, uint n)
{
    /* a copy that does not outlive the call, so that it can stay in registers through the loop */
    float8 t[HD8 / 8];
#pragma unroll
    for (uint d8 = 0; d8 < HD8 / 8; d8++)
        t[d8] = acc[d8];
    for (uint r = 0; r < n; r++) {
        const float wr = w[r];
        if (wr == 0.0f)
            continue;
        const float8 w8 = (float8)(wr);
#pragma unroll
        for (uint d8 = 0; d8 < HD8 / 8; d8++)
            t[d8] = fma(w8, vload8(d8, rows + r * HD8), t[d8]);
    }
#pragma unroll
    for (uint d8 = 0; d8 < HD8 / 8; d8++)
        acc[d8] = t[d8];
}

/* Stores an fp32 gradient row, times mul, in the storage type. */
static inline void cpu_store_row(__global bits_t *dst, ulong at, const float8 *acc, float mul)
{
    float out[HD8];
    for (uint d8 = 0; d8 < HD8 / 8; d8++)
        vstore8(acc[d8] * mul, d8, out);
    for (uint c = 0; c < HEAD_DIM; c++)
        store_g(dst, at + c, out[c]);
}

/* dK and dV for keys k0 .. k0+BLOCK-1 of kv head hk of batch entry b; work-item lid owns key
 * k0 + lid. */
static inline void dkdv_block_cpu(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                                  __global const bits_t *d_o, __global const float *lse, __global const float *dvec,
                                  __global bits_t *dk, __global bits_t *dv, __global const float *bias,
                                  __global const float *alibi, const bwd_args *a, uint k0, uint hk, uint b,
                                  __local float *qT, __local float *doT, __local float *qf, __local float *dof,
                                  __local float *row_lse, __local float *row_d)
{
    const uint lid = get_local_id(0);
    const uint kj = k0 + lid;
    const uint seq_q = a->seq_q, seq_k = a->seq_k;
    ulong kbase, vbase;
    bases_of_kv(a, b, hk, &kbase, &vbase);

    float krow[HEAD_DIM], vrow[HEAD_DIM]; /* zeros past seq_k */
    load_row_pair(krow, vrow, k, kbase, a->k_ss, v, vbase, a->v_ss, kj, seq_k);
#if HD8 > HEAD_DIM
    /* the padding columns are zero once and for all (no load writes them); C1 orders these stores
     * before any read */
    for (uint idx = lid; idx < BLOCK * (HD8 - HEAD_DIM); idx += WG_SIZE) {
        const uint at = idx / (HD8 - HEAD_DIM) * HD8 + HEAD_DIM + idx % (HD8 - HEAD_DIM);
        qf[at] = 0.0f;
        dof[at] = 0.0f;
    }
#endif

    uint q_start, q_end;
    visible_queries(k0, min(k0 + BLOCK, seq_k), a, &q_start, &q_end);

    float8 acc_k[HD8 / 8], acc_v[HD8 / 8];
    for (uint d8 = 0; d8 < HD8 / 8; d8++)
        acc_k[d8] = acc_v[d8] = (float8)(0.0f);

    for (uint g = 0; g < a->group; g++) {
        const head_bases hb = bases_of_head(a, alibi, b, hk * a->group + g);
        const ulong lrow = hb.lse, qbase = hb.q, obase = hb.o, bias_head = hb.bias;
        const float slope_h = hb.slope;
        for (uint q0 = q_start; q0 < q_end; q0 += BLOCK) {
            barrier(CLK_LOCAL_MEM_FENCE); /* C1 */
            {
                /* work-item lid loads query row q0 + lid (zeros past seq_q) */
                const uint qi = q0 + lid;
                const bool in = qi < seq_q;
                const ulong qr = qbase + (ulong)min(qi, seq_q - 1) * a->q_ss;
                const ulong orr = obase + (ulong)min(qi, seq_q - 1) * a->o_ss;
                for (uint c = 0; c < HEAD_DIM; c++) {
                    const float xq = in ? load_g(q, qr + c) : 0.0f;
                    const float xo = in ? load_g(d_o, orr + c) : 0.0f;
                    qT[c * BLOCK + lid] = xq;
                    doT[c * BLOCK + lid] = xo;
                    qf[lid * HD8 + c] = xq;
                    dof[lid * HD8 + c] = xo;
                }
                row_lse[lid] = in ? lse[lrow + qi] * M_LOG2E_F : -INFINITY;
                row_d[lid] = in ? dvec[lrow + qi] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* C2 */

            float p[BLOCK], ds[BLOCK];
            cpu_scores(krow, qT, p);  /* S, into p */
            cpu_scores(vrow, doT, ds); /* dP, into ds */
#if SOFTCAP || BIAS || ALIBI
            float extra[BLOCK]; /* transformed_prob8's: the pair's bias (0 without), -INFINITY if not seen */
#endif
            for (uint i = 0; i < BLOCK; i++) {
                const uint qi = q0 + i;
                const float l2 = row_lse[i];
                long lo, hi;
                visible_keys(min(qi, seq_q - 1), seq_q, a->diag_k, a->key_len, a->win_left, a->win_right, &lo, &hi);
                const bool seen = qi < seq_q && l2 != -INFINITY && (long)kj >= lo && (long)kj < hi;
#if BIAS
                extra[i] = seen ? bias[bias_head + (ulong)qi * a->bias_rs + kj] : -INFINITY;
#elif SOFTCAP || ALIBI
                extra[i] = seen ? 0.0f : -INFINITY;
#else
                p[i] = seen ? fma(p[i], a->scale_log2, -l2) : -INFINITY; /* exp2 of it below */
#endif
            }
#if SOFTCAP || BIAS || ALIBI
            for (uint i8 = 0; i8 < BLOCK / 8; i8++) {
                /* ALiBi's d - j of rows q0 + 8 * i8 .. + 7, exact in float below 2^24 */
                const float dist0 = (float)((long)(q0 + 8 * i8) + a->diag_k - (long)seq_q - (long)kj);
                float8 slope;
                const float8 p8 = transformed_prob8(
                    vload8(i8, p), vload8(i8, row_lse), vload8(i8, extra),
                    (float8)(dist0) + (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f), a->scale, a->softcap,
                    slope_h, &slope);
                vstore8(p8, i8, p);
                vstore8(p8 * (vload8(i8, ds) - vload8(i8, row_d)) * slope, i8, ds);
            }
#else
            (void)bias;
            (void)bias_head;
            (void)slope_h;
            for (uint i8 = 0; i8 < BLOCK / 8; i8++) {
                const float8 p8 = exp2_normal8(vload8(i8, p)); /* 0 where not seen */
                vstore8(p8, i8, p);
                vstore8(p8 * (vload8(i8, ds) - vload8(i8, row_d)), i8, ds);
            }
#endif
            const uint rows = min((uint)BLOCK, seq_q - q0); /* rows past seq_q add only zeros */
            cpu_add_rows(acc_v, p, dof, rows);
            cpu_add_rows(acc_k, ds, qf, rows);
        }
    }

    if (kj < seq_k) {
        cpu_store_row(dk, kbase + (ulong)kj * a->k_ss, acc_k, a->scale);
        cpu_store_row(dv, vbase + (ulong)kj * a->v_ss, acc_v, 1.0f);
    }
}

/* dQ for queries q0 .. q0+BLOCK-1 of query head h of batch entry b; work-item lid owns query
 * q0 + lid. */
static inline void dq_block_cpu(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                                __global const bits_t *d_o, __global const float *lse, __global const float *dvec,
                                __global bits_t *dq, __global const float *bias, __global const float *alibi,
                                const bwd_args *a, uint q0, uint h, uint b, __local float *kT, __local float *vT,
                                __local float *kf)
{
    const uint lid = get_local_id(0);
    const uint hk = h / a->group;
    const uint qi = q0 + lid;
    const uint seq_q = a->seq_q, seq_k = a->seq_k;
    const head_bases hb = bases_of_head(a, alibi, b, h);
    const ulong lrow = hb.lse, qbase = hb.q, obase = hb.o;
    const float slope_h = hb.slope;
    ulong kbase, vbase;
    bases_of_kv(a, b, hk, &kbase, &vbase);

    float qrow[HEAD_DIM], orow[HEAD_DIM]; /* zeros past seq_q */
    load_row_pair(qrow, orow, q, qbase, a->q_ss, d_o, obase, a->o_ss, qi, seq_q);
#if HD8 > HEAD_DIM
    for (uint idx = lid; idx < BLOCK * (HD8 - HEAD_DIM); idx += WG_SIZE)
        kf[idx / (HD8 - HEAD_DIM) * HD8 + HEAD_DIM + idx % (HD8 - HEAD_DIM)] = 0.0f;
#endif
    long lo, hi;
    uint key_begin, key_end;
    dq_key_ranges(a, q0, qi, &key_begin, &key_end, &lo, &hi);
    const ulong bias_row = hb.bias + (ulong)min(qi, seq_q - 1) * a->bias_rs;

    float8 acc[HD8 / 8];
    for (uint d8 = 0; d8 < HD8 / 8; d8++)
        acc[d8] = (float8)(0.0f);

    for (uint k0 = key_begin; k0 < key_end; k0 += BLOCK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* C1 */
        {
            /* work-item lid loads key row k0 + lid of K and V (zeros past seq_k) */
            const uint kr_i = k0 + lid;
            const bool in = kr_i < seq_k;
            const ulong kr = kbase + (ulong)min(kr_i, seq_k - 1) * a->k_ss;
            const ulong vr = vbase + (ulong)min(kr_i, seq_k - 1) * a->v_ss;
            for (uint c = 0; c < HEAD_DIM; c++) {
                const float xk = in ? load_g(k, kr + c) : 0.0f;
                kT[c * BLOCK + lid] = xk;
                kf[lid * HD8 + c] = xk;
                vT[c * BLOCK + lid] = in ? load_g(v, vr + c) : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* C2 */
        float d_row;
        const float l2 = row_lse_log2(lse, dvec, lrow, qi, seq_q, &d_row);

        float s[BLOCK], ds[BLOCK];
        cpu_scores(qrow, kT, s);
        cpu_scores(orow, vT, ds); /* dP, into ds */
#if SOFTCAP || BIAS || ALIBI
        float extra[BLOCK]; /* transformed_prob8's: the pair's bias (0 without), -INFINITY if not seen */
#endif
        for (uint j = 0; j < BLOCK; j++) {
            const uint key = k0 + j;
            const bool seen = qi < seq_q && l2 != -INFINITY && (long)key >= lo && (long)key < hi;
#if BIAS
            extra[j] = seen ? bias[bias_row + key] : -INFINITY;
#elif SOFTCAP || ALIBI
            extra[j] = seen ? 0.0f : -INFINITY;
#else
            s[j] = seen ? fma(s[j], a->scale_log2, -l2) : -INFINITY; /* exp2 of it below */
#endif
        }
#if SOFTCAP || BIAS || ALIBI
        for (uint j8 = 0; j8 < BLOCK / 8; j8++) {
            /* ALiBi's d - j of keys k0 + 8 * j8 .. + 7, exact in float below 2^24 */
            const float dist0 = (float)((long)qi + a->diag_k - (long)seq_q - (long)(k0 + 8 * j8));
            float8 slope;
            const float8 p8 = transformed_prob8(
                vload8(j8, s), (float8)(l2), vload8(j8, extra),
                (float8)(dist0) - (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f), a->scale, a->softcap,
                slope_h, &slope);
            vstore8(p8 * (vload8(j8, ds) - (float8)(d_row)) * slope, j8, ds);
        }
#else
        (void)bias;
        (void)bias_row;
        (void)slope_h;
        for (uint j8 = 0; j8 < BLOCK / 8; j8++) {
            const float8 p8 = exp2_normal8(vload8(j8, s)); /* 0 where not seen */
            vstore8(p8 * (vload8(j8, ds) - (float8)(d_row)), j8, ds);
        }
#endif
        const uint keys = min((uint)BLOCK, seq_k - k0); /* keys past seq_k add only zeros */
        cpu_add_rows(acc, ds, kf, keys);
    }

    if (qi < seq_q)
        cpu_store_row(dq, qbase + (ulong)qi * a->q_ss, acc, a->scale);
}
#endif /* CLFLASH_USE_CPU_PATH */

/* The grid is ((tiles_k + tiles_q) * WG_SIZE, heads_q, batch). */
/* AMD_WAVES (the host's, portable_backward.amd_waves): 0, or the occupancy in waves per SIMD that
 * clang's AMD back end schedules the gradient kernel for (amdgpu_waves_per_eu(N, N); other
 * compilers do not see it). Set where that compiler's own target spills: clang 15 on RDNA 3 keeps
 * the f32 kernel at head_dim 256 (B 8, TPR 8) to 128 VGPRs and spills 18 of them, at 2 waves per
 * SIMD; told to schedule for the 2 it gets anyway, it needs 112 and spills none. */
#ifndef AMD_WAVES
#error "AMD_WAVES is set by the host (lib/backward_plan.c)"
#endif
#if AMD_WAVES > 0 && defined(__AMDGCN__)
#define GRADS_ATTRIBUTES reqd_work_group_size(WG_SIZE, 1, 1), amdgpu_waves_per_eu(AMD_WAVES, AMD_WAVES)
#else
#define GRADS_ATTRIBUTES reqd_work_group_size(WG_SIZE, 1, 1)
#endif
__kernel __attribute__((GRADS_ATTRIBUTES)) void
flash_backward_grads(__global const bits_t *q, __global const bits_t *k, __global const bits_t *v,
                     __global const bits_t *d_o, __global const float *lse, __global const float *dvec,
                     __global bits_t *dq, __global bits_t *dk, __global bits_t *dv, uint seq_q, uint seq_k,
                     uint heads_q, uint heads_kv, uint group, uint tiles_k, float scale_log2, float scale,
                     ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss, ulong k_off, ulong k_bs, ulong k_hs,
                     ulong k_ss, ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss, ulong o_off, ulong o_bs,
                     ulong o_hs, ulong o_ss, uint win_left, uint win_right, int diag_offset, float softcap,
                     __global const float *bias, ulong bias_off, ulong bias_bs, ulong bias_hs, ulong bias_rs,
                     __global const float *alibi, __global const int *key_lens, __global const int *cu_seqlens_q,
                     __global const int *cu_seqlens_k, uint total_q, uint total_k)
{
#if CLFLASH_USE_CPU_PATH
    __local float ta[HEAD_DIM * BLOCK];
    __local float tb[HEAD_DIM * BLOCK];
    __local float ra[BLOCK * HD8];
    __local float rb[BLOCK * HD8];
    __local float row_lse[BLOCK];
    __local float row_d[BLOCK];
#else
    __local bits_t rows_a[BLOCK * LDS_STRIDE];
    __local bits_t rows_b[BLOCK * LDS_STRIDE];
    __local bits_t cols_a[HEAD_DIM * T_STRIDE];
    __local bits_t cols_b[HEAD_DIM * T_STRIDE];
    __local float pt[BLOCK * P_STRIDE];
    __local float dst[BLOCK * P_STRIDE];
    __local float row_lse[BLOCK];
    __local float row_d[BLOCK];
#endif

    const uint blk = get_group_id(0), h = get_group_id(1), b = get_group_id(2);
    /* the entry's queries and keys: n_q from packed row q_first, n_k from k_first (common.cl's
     * seq_span; seq_q and seq_k, from row 0, without VARLEN) */
    uint q_first, k_first;
    const uint n_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_first);
    const uint n_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_first);
    const uint key_len = batch_key_len(key_lens, b, n_k);
    const long diag_k = diagonal_keys(key_len, n_k, diag_offset);
    const bwd_args a = {n_q,    n_k,     heads_q, group,   scale_log2, scale,    q_off,     q_bs,
                        q_hs,   q_ss,    k_off,   k_bs,    k_hs,       k_ss,     v_off,     v_bs,
                        v_hs,   v_ss,    o_off,   o_bs,    o_hs,       o_ss,     key_len,   diag_k,
                        win_left, win_right, softcap, bias_off, bias_bs, bias_hs, bias_rs, q_first,
                        k_first, total_q};
    /* Blocks past a short sequence's keys or queries (VARLEN) have nothing to write. */
    if (blk < tiles_k) {
        if (h >= heads_kv || CLFLASH_BWD_SKIP_DKDV || blk * BLOCK >= n_k) /* dK/dV groups exist per kv head */
            return;
#if CLFLASH_USE_CPU_PATH
        dkdv_block_cpu(q, k, v, d_o, lse, dvec, dk, dv, bias, alibi, &a, blk * BLOCK, h, b, ta, tb, ra, rb, row_lse,
                       row_d);
#else
        dkdv_block(q, k, v, d_o, lse, dvec, dk, dv, bias, alibi, &a, blk * BLOCK, h, b, rows_a, rows_b, cols_a,
                   cols_b, pt, dst, row_lse, row_d);
#endif
    } else {
        if (CLFLASH_BWD_SKIP_DQ || (blk - tiles_k) * BLOCK >= n_q)
            return;
#if CLFLASH_USE_CPU_PATH
        dq_block_cpu(q, k, v, d_o, lse, dvec, dq, bias, alibi, &a, (blk - tiles_k) * BLOCK, h, b, ta, tb, ra);
#else
        dq_block(q, k, v, d_o, lse, dvec, dq, bias, alibi, &a, (blk - tiles_k) * BLOCK, h, b, rows_a, rows_b, cols_a,
                 cols_b, dst);
#endif
    }
}
