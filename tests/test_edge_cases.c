/*
 * test_edge_cases.c - numerical edge cases against the fp64 reference, through the flash path
 * (device buffers and clflash_forward_host) and the naive path:
 *
 *  - logits up to +-1e4 (a large positive or negative scale): the online softmax must not
 *    overflow, and the error stays within what fp32 logits allow (bound derived below);
 *  - all-equal scores (Q = 0, or every key the same vector): a uniform average, exact lse;
 *  - fp16 inputs near 65504: V near +-65504 (O must stay finite), V = 65504 everywhere (O exactly
 *    65504, not inf), and Q, K of magnitude 60000 whose logits reach 1.4e10 (flash) or 3e4 (naive,
 *    whose score matrix is stored in fp16 and so cannot hold a logit above 65504);
 *  - rows fully masked by causal alignment (seq_q > seq_k): O exactly 0, lse exactly -inf, also
 *    with several query and key tiles and forced small blocks;
 *  - a NaN in one row of Q, K or V, and what it reaches (documented here, checked exactly):
 *      Q row i: query row i's O is all NaN and its lse is NaN; every other row is right;
 *      K row j: every query row that sees key j (causal: i >= j - (seq_k - seq_q)) gets O and
 *               lse NaN; rows that do not see key j are right, even in the same tiles;
 *      V row j: rows that see key j get O all NaN but a right lse (lse needs only Q and K);
 *               rows that do not see key j are right;
 *      V[j][c] only: only column c of the rows that see key j is NaN.
 *    A NaN never turns into a finite value or into the "no key" answer (O = 0, lse = -inf).
 * Rows that a sliding window, key padding or a -inf bias masks entirely are tested with those
 * features (test_features.c, test_nv_mma.c).
 */
#include "check_common.h"

#include <math.h>

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16

/* How a case is run: the flash kernel on device buffers, the flash kernel through the host
 * convenience call, or the naive path on device buffers. */
enum { VIA_DEVICE, VIA_HOST, VIA_NAIVE, VIA_COUNT };
static const char *const via_names[VIA_COUNT] = {"flash (device buffers)", "flash (clflash_forward_host)", "naive"};

static clflash_status run_via(clflash_context *c, th_case *t, int via, int with_lse)
{
    if (via == VIA_HOST)
        return th_run_host(c, t, with_lse);
    return th_run_device(c, t, via == VIA_NAIVE ? TH_NAIVE : TH_FLASH, with_lse, NULL);
}

/* 1 if the flash path of d runs on an NVIDIA tensor-core kernel (nv_mma_forward, or the Hopper
 * nv_wgmma_forward), which rounds P to the storage type and multiplies a masked key's P of 0 with
 * its V row (see clflash_plan_attention). */
static int tensor_core_flash(clflash_context *c, const clflash_attention_desc *d, int via)
{
    clflash_plan p = {.struct_size = sizeof p};
    return via != VIA_NAIVE && clflash_plan_attention(c, d, &p) == CLFLASH_SUCCESS &&
           (strcmp(p.kernel, "nv_mma_forward") == 0 || strcmp(p.kernel, "nv_wgmma_forward") == 0);
}

static ref_path path_of(int via)
{
    return via == VIA_NAIVE ? REF_PATH_NAIVE : REF_PATH_FLASH;
}

/* Writes x into the case at host index idx (storage and dequantised copies). */
static void put(th_case *t, void *raw, float *f, uint64_t idx, float x)
{
    if (t->d.dtype == F32)
        ((float *)raw)[idx] = x;
    else
        ((uint16_t *)raw)[idx] = ref_f32_to_f16(x);
    f[idx] = th_load(t, raw, idx);
}

typedef enum { T_Q, T_K, T_V } tensor_id;

/* Index of element (b, h, i, c) of Q, K or V in the case's host arrays. */
static uint64_t at(const th_case *t, tensor_id which, uint32_t b, uint32_t h, uint32_t i, uint32_t c)
{
    const clflash_attention_desc *d = &t->d;
    const uint32_t hkv = ref_heads_kv(d);
    const ref_strides s = which == T_Q ? ref_resolve_layout(&d->q, d->heads_q, d->seq_q, d->head_dim)
                          : which == T_K ? ref_resolve_layout(&d->k, hkv, d->seq_k, d->head_dim)
                                         : ref_resolve_layout(&d->v, hkv, d->seq_k, d->head_dim);
    return ref_index(&s, b, h, i, c);
}

static void set_elem(th_case *t, tensor_id which, uint32_t b, uint32_t h, uint32_t i, uint32_t c, float x)
{
    void *raw = which == T_Q ? t->q : which == T_K ? t->k : t->v;
    float *f = which == T_Q ? t->qf : which == T_K ? t->kf : t->vf;
    put(t, raw, f, at(t, which, b, h, i, c), x);
}

/* Sets every element of one tensor with fn(b, h, i, c). */
static void fill(th_case *t, tensor_id which, float (*fn)(uint32_t, uint32_t, uint32_t, uint32_t, void *), void *arg)
{
    const clflash_attention_desc *d = &t->d;
    const uint32_t heads = which == T_Q ? d->heads_q : ref_heads_kv(d);
    const uint32_t seq = which == T_Q ? d->seq_q : d->seq_k;
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < seq; i++)
                for (uint32_t c = 0; c < d->head_dim; c++)
                    set_elem(t, which, b, h, i, c, fn(b, h, i, c, arg));
}

static void expect_ok(int bad, const char *what, const char *msg)
{
    ck_assert_msg(!bad, "%s: %s", what, msg);
}

/* Runs an already filled case (reference computed from its current inputs) and checks it with
 * the standard tolerances widened by extra_o and extra_lse (absolute). */
static void run_checked(clflash_context *c, th_case *t, int via, double extra_o, double extra_lse, const char *label)
{
    char what[300], msg[2400];
    snprintf(what, sizeof what, "%s, %s", label, via_names[via]);
    th_case_reference(t);
    th_case_reset_outputs(t);
    const clflash_status st = run_via(c, t, via, 1);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    /* every output finite (or -inf lse for rows that see no key) */
    const clflash_attention_desc *d = &t->d;
    const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, d->head_dim);
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++) {
                const size_t row = ((size_t)b * d->heads_q + h) * d->seq_q + i;
                for (uint32_t cc = 0; cc < d->head_dim; cc++) {
                    const float x = th_load(t, t->o, ref_index(&os, b, h, i, cc));
                    ck_assert_msg(isfinite(x), "%s: O[%u][%u][%u][%u] = %g", what, b, h, i, cc, (double)x);
                }
                ck_assert_msg(isfinite(t->lse[row]) || (isinf(t->ref_lse[row]) && t->lse[row] == -INFINITY),
                              "%s: lse of row %zu is %g", what, row, (double)t->lse[row]);
            }
    if (extra_o == 0.0 && extra_lse == 0.0) {
        expect_ok(th_check(t, 1, path_of(via), msg, sizeof msg) != 0, what, msg);
        return;
    }
    /* widened comparison */
    const size_t dense = t->nlse * d->head_dim;
    double *got = malloc(sizeof(double) * dense);
    ck_assert_ptr_nonnull(got);
    size_t n = 0;
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t cc = 0; cc < d->head_dim; cc++)
                    got[n++] = th_load(t, t->o, ref_index(&os, b, h, i, cc));
    ref_tol to = ref_tol_o(d->dtype, path_of(via)), tl = ref_tol_lse(d->dtype, path_of(via));
    to.atol += extra_o;
    tl.atol += extra_lse;
    expect_ok(ref_compare("O", got, t->ref_o, dense, to, msg, sizeof msg) != 0, what, msg);
    for (size_t r = 0; r < t->nlse; r++)
        got[r] = t->lse[r];
    expect_ok(ref_compare("lse", got, t->ref_lse, t->nlse, tl, msg, sizeof msg) != 0, what, msg);
    free(got);
}

/* ---- logits up to +-1e4 ------------------------------------------------------------------------- */

/* The scale that makes the largest |logit| of the case exactly `target`, and the worst-case error
 * of one logit as the kernels compute it: the fp32 dot product of d terms (at most (d + 2) u of
 * sum |q_c k_c|, u = 2^-24, with the scale folded in), plus, on the naive path, rounding the stored
 * score to the storage type (2^-24 or 2^-11 of |logit|). */
static void logit_bounds(const th_case *t, double target, int naive, double *scale, double *delta)
{
    const clflash_attention_desc *d = &t->d;
    const uint32_t hkv = ref_heads_kv(d), group = d->heads_q / hkv;
    double max_dot = 0.0, max_abs = 0.0;
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t j = 0; j < d->seq_k; j++) {
                    double dot = 0.0, abs_dot = 0.0;
                    for (uint32_t cc = 0; cc < d->head_dim; cc++) {
                        const double x = (double)t->qf[at(t, T_Q, b, h, i, cc)] * t->kf[at(t, T_K, b, h / group, j, cc)];
                        dot += x;
                        abs_dot += fabs(x);
                    }
                    max_dot = fmax(max_dot, fabs(dot));
                    max_abs = fmax(max_abs, abs_dot);
                }
    *scale = target / max_dot;
    const double u = ldexp(1.0, -24);
    *delta = fabs(*scale) * max_abs * (d->head_dim + 4) * u + target * 2 * u;
    if (naive)
        *delta += target * (d->dtype == F16 ? ldexp(1.0, -11) : u);
}

/* _i: bit 0 f16, bit 1 negative scale, bits 2-3 via. */
START_TEST(logits_up_to_1e4)
{
    const int via = (_i >> 2) % VIA_COUNT;
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 2, 1, 33, 47, 16, (_i & 1) ? F16 : F32, CLFLASH_CAUSAL);
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 4000 + (uint64_t)_i), 0);
    double scale, delta;
    logit_bounds(&t, 1e4, via == VIA_NAIVE, &scale, &delta);
    t.d.scale = (float)((_i & 2) ? -scale : scale);
    /* |dO| <= (e^(2 delta) - 1) max|V| for logits perturbed by at most delta; |d lse| <= delta */
    const double extra_o = expm1(2 * delta) * 1.0, extra_lse = delta;
    char label[160];
    snprintf(label, sizeof label, "%s scale %g (|logit| <= 1e4, error bound %.3g)", (_i & 1) ? "f16" : "f32",
             (double)t.d.scale, delta);
    run_checked(c, &t, via, extra_o, extra_lse, label);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- all-equal scores ----------------------------------------------------------------------------- */

static float zero_fn(uint32_t b, uint32_t h, uint32_t i, uint32_t c, void *arg)
{
    (void)b, (void)h, (void)i, (void)c, (void)arg;
    return 0.0f;
}

static float same_key_fn(uint32_t b, uint32_t h, uint32_t i, uint32_t c, void *arg)
{
    (void)b, (void)h, (void)i, (void)arg;
    return 0.25f * (float)((int)(c % 7) - 3); /* one vector, the same for every key */
}

/* _i: bit 0 f16, bit 1 causal, bit 2 "Q = 0" (else "every key equal"), bits 3-4 via. */
START_TEST(all_equal_scores)
{
    const int via = (_i >> 3) % VIA_COUNT;
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(2, 2, 1, 40, 70, 16, (_i & 1) ? F16 : F32, (_i & 2) ? CLFLASH_CAUSAL : 0);
    d.block = via == VIA_NAIVE ? 0 : 16; /* several key tiles whose maxima are all equal */
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 4100 + (uint64_t)_i), 0);
    if (_i & 4)
        fill(&t, T_Q, zero_fn, NULL);
    else
        fill(&t, T_K, same_key_fn, NULL);
    run_checked(c, &t, via, 0.0, 0.0, (_i & 4) ? "Q = 0 (every score 0)" : "every key the same (equal scores per row)");
    /* the uniform answer is also what the reference says: lse = score + log(#keys seen) */
    if (_i & 4) {
        for (uint32_t i = 0; i < d.seq_q; i++) {
            const double seen = (_i & 2) ? fmin((double)i + d.seq_k - d.seq_q + 1, d.seq_k) : d.seq_k;
            ck_assert_msg(fabs(t.ref_lse[i] - log(seen)) < 1e-12, "reference lse of row %u", i);
        }
    }
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- fp16 near 65504 ------------------------------------------------------------------------------ */

static float big_v_fn(uint32_t b, uint32_t h, uint32_t i, uint32_t c, void *arg)
{
    (void)arg;
    const uint32_t x = (b * 131u + h * 71u + i * 37u + c * 11u) % 97u;
    const float mag = 60000.0f + 5504.0f * (float)x / 96.0f; /* 60000 .. 65504 */
    return (x % 2) ? mag : -mag;
}

static float max_v_fn(uint32_t b, uint32_t h, uint32_t i, uint32_t c, void *arg)
{
    (void)b, (void)h, (void)i, (void)c, (void)arg;
    return 65504.0f;
}

/* +-60000 by a sign pattern unique to row i (distinct rows of Q; K = Q). */
static float sign_row_fn(uint32_t b, uint32_t h, uint32_t i, uint32_t c, void *arg)
{
    (void)b, (void)h, (void)arg;
    const uint32_t pattern = (i + 1u) * 2654435761u; /* distinct for i < 2^16 */
    return ((pattern >> (c % 32)) & 1u) ? 60000.0f : -60000.0f;
}

/* _i: bits 0-1 kind (0: V near +-65504, 1: V = 65504 with Q = 0, 2: Q = K = +-60000), bit 2 causal,
 * bits 3-4 via. */
START_TEST(fp16_near_65504)
{
    const int kind = _i & 3, via = (_i >> 3) % VIA_COUNT;
    if (kind == 3)
        return;
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(1, 2, 2, 29, 29, 16, F16, (_i & 4) ? CLFLASH_CAUSAL : 0);
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 4200 + (uint64_t)_i), 0);
    const char *label = "";
    double extra_o = 0.0;
    if (kind == 0) {
        fill(&t, T_V, big_v_fn, NULL);
        label = "V near +-65504";
        /* O can be near 0 while its terms are near 65504: the fp32 sum of seq_k such terms is off by
         * up to seq_k * 2^-24 * 65504 * 2 (about 0.35); the naive path stores P in fp16, which moves
         * O by up to 2^-11 of sum |p v| <= 65504 * 2^-11 (32), and so does the tensor-core kernel */
        extra_o = via == VIA_NAIVE || tensor_core_flash(c, &d, via) ? 65504.0 * ldexp(1.0, -10) : 1.0;
    } else if (kind == 1) {
        fill(&t, T_V, max_v_fn, NULL);
        fill(&t, T_Q, zero_fn, NULL);
        label = "V = 65504, uniform weights";
    } else {
        fill(&t, T_Q, sign_row_fn, NULL);
        fill(&t, T_K, sign_row_fn, NULL);
        /* Flash: the default scale, logits about 1.4e10 (fp32 math). Naive: S is stored in fp16, so the
         * logits must stay below 65504: about 3e4. Either way row i's own key wins by a margin far
         * above any rounding, so the reference is one-hot: O = V row i, lse = the largest logit. */
        t.d.scale = via == VIA_NAIVE ? (float)(3e4 / (60000.0 * 60000.0 * 16)) : 0.0f;
        label = via == VIA_NAIVE ? "Q = K = +-60000, logits up to 3e4" : "Q = K = +-60000, logits up to 1.4e10";
    }
    run_checked(c, &t, via, extra_o, 0.0, label);
    if (kind == 1) { /* exactly 65504, not rounded up to infinity */
        for (uint64_t i = 0; i < t.no; i++)
            ck_assert_msg(((const uint16_t *)t.o)[i] == 0x7bffu, "O[%llu] = 0x%04x, want 65504 (0x7bff)",
                          (unsigned long long)i, ((const uint16_t *)t.o)[i]);
    }
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- rows fully masked by causal alignment --------------------------------------------------------- */

static const shape_t masked_shapes[] = {
    {1, 1, 0, 37, 5, 16, F32, CLFLASH_CAUSAL, 0.0f},
    {1, 2, 1, 20, 1, 8, F32, CLFLASH_CAUSAL, 0.0f},
    {2, 2, 2, 70, 33, 16, F16, CLFLASH_CAUSAL, 0.0f},
    {1, 1, 0, 64, 16, 16, F32, CLFLASH_CAUSAL, 0.0f}, /* the masked rows fill whole query blocks */
};

/* _i: shape, then block (0: planner, 1: 16, 2: 1), then via. */
START_TEST(causal_fully_masked_rows)
{
    const int s = _i % N_OF(masked_shapes), blk = (_i / N_OF(masked_shapes)) % 3,
              via = (_i / N_OF(masked_shapes) / 3) % VIA_COUNT;
    if (via == VIA_NAIVE && blk != 0)
        return; /* the naive path has no block */
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = shape_desc(&masked_shapes[s]);
    d.block = blk == 0 ? 0 : blk == 1 ? 16 : 1;
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 4300 + (uint64_t)_i), 0);
    run_checked(c, &t, via, 0.0, 0.0, "seq_q > seq_k, causal"); /* th_check: O exactly 0, lse exactly -inf */
    uint32_t masked = 0;
    for (size_t r = 0; r < t.nlse; r++)
        masked += isinf(t.ref_lse[r]) != 0;
    ck_assert_msg(masked > 0, "the shape has no fully masked row");
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- NaN inputs ---------------------------------------------------------------------------------- */

enum { NAN_Q_ROW, NAN_K_ROW, NAN_V_ROW, NAN_V_ELEM, NAN_KINDS };
static const char *const nan_names[NAN_KINDS] = {"NaN row of Q", "NaN row of K", "NaN row of V", "one NaN in V"};

/* _i: kind, then f16, then via, then block (planner or forced 16). The shape has two batch
 * entries and GQA: the poisoned row is in batch 0, kv head 0 (query heads 0 and 1 read it); batch 1
 * must stay clean. */
START_TEST(nan_confined)
{
    const int kind = _i % NAN_KINDS, f16 = (_i / NAN_KINDS) % 2, via = (_i / NAN_KINDS / 2) % VIA_COUNT,
              forced = (_i / NAN_KINDS / 2 / VIA_COUNT) % 2;
    if (via == VIA_NAIVE && forced)
        return;
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = th_desc(2, 2, 1, 40, 45, 16, f16 ? F16 : F32, CLFLASH_CAUSAL);
    d.block = forced ? 16 : 0;
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 4400 + (uint64_t)_i), 0);
    th_case_reference(&t); /* from the clean inputs: what every unaffected row must give */

    const uint32_t row = 21;     /* the poisoned query or key row */
    const uint32_t col = 5;      /* the poisoned column for NAN_V_ELEM */
    const int64_t shift = (int64_t)d.seq_k - d.seq_q;
    for (uint32_t cc = 0; cc < d.head_dim; cc++) {
        if (kind == NAN_Q_ROW) set_elem(&t, T_Q, 0, 1, row, cc, NAN);
        if (kind == NAN_K_ROW) set_elem(&t, T_K, 0, 0, row, cc, NAN);
        if (kind == NAN_V_ROW || (kind == NAN_V_ELEM && cc == col)) set_elem(&t, T_V, 0, 0, row, cc, NAN);
    }
    th_case_reset_outputs(&t);
    const clflash_status st = run_via(c, &t, via, 1);
    char what[200];
    snprintf(what, sizeof what, "%s, %s, %s%s", nan_names[kind], f16 ? "f16" : "f32", via_names[via],
             forced ? ", block 16" : "");
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());

    const ref_strides os = ref_resolve_layout(&d.o, d.heads_q, d.seq_q, d.head_dim);
    const ref_tol to = ref_tol_o(d.dtype, path_of(via)), tl = ref_tol_lse(d.dtype, path_of(via));
    const int spread = (kind == NAN_V_ROW || kind == NAN_V_ELEM) && tensor_core_flash(c, &d, via);
    size_t wrong = 0;
    char first[400] = "";
    for (uint32_t b = 0; b < d.batch; b++)
        for (uint32_t h = 0; h < d.heads_q; h++)
            for (uint32_t i = 0; i < d.seq_q; i++) {
                const size_t r = ((size_t)b * d.heads_q + h) * d.seq_q + i;
                /* which outputs the NaN must reach */
                int o_nan = 0, lse_nan = 0, only_col = 0;
                if (kind == NAN_Q_ROW)
                    o_nan = lse_nan = (b == 0 && h == 1 && i == row);
                else /* K or V row `row` of kv head 0 in batch 0: every query head of batch 0 that sees it */
                    o_nan = b == 0 && (int64_t)row <= (int64_t)i + shift;
                if (kind == NAN_K_ROW)
                    lse_nan = o_nan;
                if (kind == NAN_V_ELEM)
                    only_col = 1;
                /* The tensor-core kernel may also spread a V NaN to rows of batch 0 that share the
                 * key tile without seeing the key (never to batch 1). */
                const int may_nan = spread && b == 0;
                for (uint32_t cc = 0; cc < d.head_dim; cc++) {
                    const double got = th_load(&t, t.o, ref_index(&os, b, h, i, cc));
                    const int want_nan = o_nan && (!only_col || cc == col);
                    const int ok = want_nan ? isnan(got)
                                            : (ref_close(got, t.ref_o[r * d.head_dim + cc], to) ||
                                               (may_nan && isnan(got) && (!only_col || cc == col)));
                    if (!ok && wrong++ == 0)
                        snprintf(first, sizeof first, "O[b%u][h%u][row %u][col %u] = %g, want %s%g", b, h, i, cc, got,
                                 want_nan ? "NaN, not " : "", want_nan ? got : t.ref_o[r * d.head_dim + cc]);
                }
                const double gl = t.lse[r];
                const int ok = lse_nan ? isnan(gl) : ref_close(gl, t.ref_lse[r], tl);
                if (!ok && wrong++ == 0)
                    snprintf(first, sizeof first, "lse[b%u][h%u][row %u] = %g, want %s%g", b, h, i, gl,
                             lse_nan ? "NaN, not " : "", lse_nan ? gl : t.ref_lse[r]);
            }
    ck_assert_msg(wrong == 0, "%s: %zu outputs wrong; first: %s", what, wrong, first);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

static Suite *edge_suite(void)
{
    Suite *s = suite_create("edge_cases");
    TCase *tl = tcase_create("large_logits");
    tcase_set_timeout(tl, TEST_TIMEOUT_S);
    tcase_add_loop_test(tl, logits_up_to_1e4, 0, 4 * VIA_COUNT);
    suite_add_tcase(s, tl);
    TCase *te = tcase_create("equal_scores");
    tcase_set_timeout(te, TEST_TIMEOUT_S);
    tcase_add_loop_test(te, all_equal_scores, 0, 8 * VIA_COUNT);
    suite_add_tcase(s, te);
    TCase *th = tcase_create("fp16_max");
    tcase_set_timeout(th, TEST_TIMEOUT_S);
    tcase_add_loop_test(th, fp16_near_65504, 0, 8 * VIA_COUNT);
    suite_add_tcase(s, th);
    TCase *tm = tcase_create("fully_masked");
    tcase_set_timeout(tm, TEST_TIMEOUT_S);
    tcase_add_loop_test(tm, causal_fully_masked_rows, 0, N_OF(masked_shapes) * 3 * VIA_COUNT);
    suite_add_tcase(s, tm);
    TCase *tn = tcase_create("nan");
    tcase_set_timeout(tn, TEST_TIMEOUT_S);
    tcase_add_loop_test(tn, nan_confined, 0, NAN_KINDS * 2 * VIA_COUNT * 2);
    suite_add_tcase(s, tn);
    return s;
}

int main(void)
{
    return run_suite(edge_suite());
}
