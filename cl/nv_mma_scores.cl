/*
 * nv_mma_scores.cl - recomputing scores and probabilities on NVIDIA tensor cores from the forward's
 * saved statistics: S = Q K^T and dP = dO V^T of 16 rows (mma.sync), the score transforms
 * (softcap, bias, ALiBi) in log2 units by nv_mma_forward.cl's operations, masks, P = exp2(S - lse)
 * and dS = P (dP - D). The host puts this file after nv_mma_common.cl and before
 * nv_mma_backward.cl (the gradients) or nv_mma_bias_grad.cl (the bias gradient).
 *
 * Why a file of its own: both kernels that follow it must give the same P and dS for a pair as the
 * forward's P, so the operations are written once.
 *
 * Defines it needs: nv_mma_common.cl's, and SOFTCAP, BIAS, ALIBI (common.cl's feature switches).
 */

/* TRANSFORMS: some score transform is on, and scores are carried in log2 units before P (with the
 * natural scale from the host, as nv_mma_forward.cl takes it). */
#define TRANSFORMS (SOFTCAP || BIAS || ALIBI)

/* D_SPLIT (set by the host: 2 for nv_mma_backward.cl above head_dim 128, else 1): the warps that
 * share 16 rows, each holding SHARE_DIM = HEAD_DIM / D_SPLIT of their columns, so that K, V and the
 * dK and dV sums of 16 keys fit a warp's registers at any head_dim up to 256. The products below
 * are over one such share; the caller passes tiles offset to its first column. */
#ifndef D_SPLIT
#error "D_SPLIT is set by the host (lib/nv_mma_backward_plan.c, bias_grad.c)"
#endif
#define SHARE_DIM (HEAD_DIM / D_SPLIT)
#define SHARE_STEPS (SHARE_DIM / 16) /* k16 steps of a product over one share */
#define SHARE_TILES (SHARE_DIM / 8)  /* n8 tiles of a share */

/* The first column of this warp's share. */
static inline uint share_column(void)
{
    return get_local_id(0) / 32 % D_SPLIT * SHARE_DIM;
}

/* The constants of feature_scores, per call. */
typedef struct {
    float scale2;   /* the scale in log2 units */
    float cap2;     /* the softcap in log2 units */
    float cap_in;   /* softcap_log2's argument per unit of the raw product: 2 log2(e) scale2 / cap2 */
    float inv_cap2; /* 1 / cap2 */
} score_consts;

static inline score_consts make_score_consts(float scale, float softcap)
{
    score_consts c;
    c.scale2 = scale * M_LOG2E_F;
    c.cap2 = softcap * M_LOG2E_F;
    c.cap_in = SOFTCAP ? c.scale2 * 2.0f * M_LOG2E_F / c.cap2 : 0.0f;
    c.inv_cap2 = SOFTCAP ? 1.0f / c.cap2 : 0.0f;
    return c;
}

/* Four scores in log2 units from their raw products x, as nv_mma_forward.cl computes them:
 * softcap (softcap_log2), then the bias (natural units), then ALiBi (slope_l2, the head's slope in
 * log2 units, times |dist|, each pair's distance from its query's diagonal key). *grad receives
 * the derivative of the transformed natural score by the scaled one: 1 - tanh^2 with SOFTCAP
 * (tanh = score / cap2), else 1. */
static inline float4 feature_scores(float4 x, float4 bias, float4 dist, float slope_l2, const score_consts *c,
                                    float4 *grad)
{
    float4 s;
#if SOFTCAP
    s = (float4)(softcap_log2(x.x * c->cap_in, c->cap2), softcap_log2(x.y * c->cap_in, c->cap2),
                 softcap_log2(x.z * c->cap_in, c->cap2), softcap_log2(x.w * c->cap_in, c->cap2));
    const float4 th = s * c->inv_cap2;
    *grad = fma(-th, th, (float4)(1.0f));
#else
    s = x * c->scale2;
    *grad = (float4)(1.0f);
#endif
#if BIAS
    s = fma(bias, (float4)(M_LOG2E_F), s);
#endif
#if ALIBI
    s = fma((float4)(-slope_l2), fabs(dist), s);
#endif
    (void)bias;
    (void)dist;
    (void)slope_l2;
    return s;
}

/* 1 where key j is in [lo, hi). */
static inline int in_range(long j, long lo, long hi)
{
    return j >= lo && j < hi;
}

/* A row's lse as the exponent offset in the log2 domain: +inf for a row that saw no key (or is
 * past seq_q), so that every P of it is exp2(-inf) = 0. */
static inline float lse_offset(float lse_natural)
{
    return lse_natural == -INFINITY ? INFINITY : lse_natural * M_LOG2E_F;
}

/* Loads 16 rows' A fragments (rows `row` .. `row` + 15 of a tile in local memory) for every k16
 * step over one share of head_dim: matrix j = lane / 8 takes rows + 8 for j = 1, 3 and columns + 8 for
 * j = 2, 3. */
static inline void load_row_fragments(__local const ushort *tile, uint row, uint4 *frag)
{
    const uint lane = get_local_id(0) % 32;
    __local const ushort *src = tile + (row + lane % 8 + (lane / 8) % 2 * 8) * ROW_STRIDE + lane / 16 * 8;
#pragma unroll
    for (uint kk = 0; kk < SHARE_STEPS; kk++)
        frag[kk] = load_matrix_x4(src + kk * 16);
}

/* (x0, x1) = A (16 x SHARE_DIM, registers) times 16 rows of a local tile, transposed: the 16 x 16
 * products S = Q K^T, dP = dO V^T and their transposes (with D_SPLIT > 1 one share's part of
 * them); x0 holds columns 0..7, x1 8..15. */
static inline void row_products(const uint4 *a, __local const ushort *rows, float4 *x0, float4 *x1)
{
    const uint lane = get_local_id(0) % 32;
    __local const ushort *src = rows + (lane / 16 * 8 + lane % 8) * ROW_STRIDE + (lane / 8) % 2 * 8;
    float4 s0 = (float4)(0.0f), s1 = (float4)(0.0f);
#pragma unroll
    for (uint kk = 0; kk < SHARE_STEPS; kk++) {
        const uint4 f = load_matrix_x4(src + kk * 16);
        s0 = mma_16x8x16(a[kk], f.x, f.y, s0);
        s1 = mma_16x8x16(a[kk], f.z, f.w, s1);
    }
    *x0 = s0;
    *x1 = s1;
}

/* P and dS of one 16 x 8 accumulator block, element by element: P = exp2(S * scale_log2 - off)
 * from the saved statistics and dS = P (dP - D). off and dd hold each element's lse offset and D
 * (they belong to the element's query: a row, or a column of a transposed block). A masked pair
 * comes in with S = hidden_score(scale_log2), so its P and dS are 0. */
static inline void probabilities(float4 s, float4 dp, float4 off, float4 dd, float scale_log2, float4 *p, float4 *ds)
{
    float4 pr;
    pr.x = exp2_ftz(fma(s.x, scale_log2, -off.x));
    pr.y = exp2_ftz(fma(s.y, scale_log2, -off.y));
    pr.z = exp2_ftz(fma(s.z, scale_log2, -off.z));
    pr.w = exp2_ftz(fma(s.w, scale_log2, -off.w));
    *p = pr;
    *ds = pr * (dp - dd);
}

/* The score a masked pair gets: infinite with the sign that makes S * scale_log2 = -inf, so that
 * P = 0 (+inf for a negative scale; the scale is never 0). */
static inline float hidden_score(float scale_log2)
{
    return scale_log2 < 0.0f ? INFINITY : -INFINITY;
}

/* S with the pairs whose `visible` is 0 set to `hidden` (hidden_score). */
static inline float4 mask_scores(float4 s, int4 visible, float hidden)
{
    return (float4)(visible.x ? s.x : hidden, visible.y ? s.y : hidden, visible.z ? s.z : hidden,
                    visible.w ? s.w : hidden);
}
