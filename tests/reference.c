/*
 * reference.c - the fp64 CPU attention and the helpers every test shares (see reference.h).
 *
 * The reference is deliberately naive: per query row it finds the maximum visible score, sums
 * exp(score - max), and forms the weighted sum of V, all in double. It never tiles and never
 * rescales, so it shares no code path (and no bug) with either kernel.
 */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fp16 ------------------------------------------------------------------------------------ */

uint16_t ref_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;

    if (ax >= 0x7f800000u) /* inf, or NaN (kept quiet, with the top payload bits) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x0200u | ((ax >> 13) & 0x03ffu) : 0u));
    if (ax >= 0x477ff000u) /* >= 65520: halfway to 2^16 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half or zero */
        if (ax <= 0x33000000u) /* <= 2^-25: the tie at 2^-25 rounds to the even 0 */
            return sign;
        /* value / 2^-24 = m * 2^(e - 126), with 14 <= 126 - e <= 24 */
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x007fffffu) | 0x00800000u;
        const unsigned shift = 126u - e;
        uint32_t qv = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (qv & 1u)))
            qv++;
        return (uint16_t)(sign | qv); /* a carry into bit 10 is the smallest normal: correct */
    }
    /* normal: rebias the exponent (127 - 15 = 112) and round the 13 dropped mantissa bits */
    uint32_t h = (ax - 0x38000000u) >> 13;
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a mantissa carry bumps the exponent, which is also correct */
    return (uint16_t)(sign | h);
}

float ref_f16_to_f32(uint16_t h)
{
    const unsigned e = (h >> 10) & 0x1fu;
    const unsigned m = h & 0x03ffu;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? (double)NAN : (double)INFINITY;
    else
        v = ldexp((double)(m | 0x0400u), (int)e - 25);
    return (float)((h & 0x8000u) ? -v : v);
}

uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float ref_bf16_to_f32(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ref_store(clflash_dtype t, void *buf, uint64_t i, float x)
{
    if (t == CLFLASH_F32) {
        ((float *)buf)[i] = x;
        return x;
    }
    uint16_t *h = buf;
    h[i] = t == CLFLASH_F16 ? ref_f32_to_f16(x) : ref_f32_to_bf16(x);
    return t == CLFLASH_F16 ? ref_f16_to_f32(h[i]) : ref_bf16_to_f32(h[i]);
}

float ref_load(clflash_dtype t, const void *buf, uint64_t i)
{
    if (t == CLFLASH_F32)
        return ((const float *)buf)[i];
    const uint16_t h = ((const uint16_t *)buf)[i];
    return t == CLFLASH_F16 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h);
}

/* ---- PRNG ------------------------------------------------------------------------------------ */

void ref_rng_seed(ref_rng *r, uint64_t seed)
{
    r->state = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
}

uint64_t ref_rng_next(ref_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ref_rng_uniform(ref_rng *r)
{
    /* 53 random bits -> [0, 1) -> [-1, 1) */
    return (double)(ref_rng_next(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* ---- layouts --------------------------------------------------------------------------------- */

ref_strides ref_resolve_layout(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t head_dim)
{
    ref_strides s;
    s.offset = l->offset;
    s.seq_stride = l->seq_stride ? l->seq_stride : head_dim;
    s.head_stride = l->head_stride ? l->head_stride : (uint64_t)seq * s.seq_stride;
    s.batch_stride = l->batch_stride ? l->batch_stride : (uint64_t)heads * s.head_stride;
    return s;
}

uint64_t ref_index(const ref_strides *s, uint32_t b, uint32_t h, uint32_t i, uint32_t c)
{
    return s->offset + (uint64_t)b * s->batch_stride + (uint64_t)h * s->head_stride +
           (uint64_t)i * s->seq_stride + c;
}

uint64_t ref_extent(const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t seq,
                    uint32_t head_dim)
{
    const ref_strides s = ref_resolve_layout(l, heads, seq, head_dim);
    return ref_index(&s, batch - 1, heads - 1, seq - 1, head_dim - 1) + 1;
}

uint32_t ref_heads_kv(const clflash_attention_desc *d)
{
    return d->heads_kv ? d->heads_kv : d->heads_q;
}

double ref_scale(const clflash_attention_desc *d)
{
    return d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)d->head_dim);
}

/* ---- the reference attention ------------------------------------------------------------------ */

ref_strides ref_resolve_bias_layout(const clflash_attention_desc *d)
{
    ref_strides s = ref_resolve_layout(&d->bias_layout, d->heads_q, d->seq_q, d->seq_k);
    if (d->bias_broadcast & CLFLASH_BROADCAST_BATCH) s.batch_stride = 0;
    if (d->bias_broadcast & CLFLASH_BROADCAST_HEADS) s.head_stride = 0;
    if (d->bias_broadcast & CLFLASH_BROADCAST_ROWS) s.seq_stride = 0;
    return s;
}

void ref_attention(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                   double *o, double *lse)
{
    ref_attention_ex(d, q, k, v, NULL, o, lse);
}

/* Batch entry b's keys: its key length clamped to [0, seq_k], else seq_k. */
static int64_t ref_key_len(const clflash_attention_desc *d, const ref_extras *x, uint32_t b)
{
    if (!x || !x->key_lengths)
        return d->seq_k;
    const int64_t len = x->key_lengths[b];
    return len < 0 ? 0 : len < (int64_t)d->seq_k ? len : (int64_t)d->seq_k;
}

/* Query i's diagonal key in batch entry b: i + seq_k - seq_q, or with CLFLASH_ALIGN_TO_KEY_LENGTH
 * i + key_len - seq_q; plus diagonal_offset. */
static int64_t ref_diagonal(const clflash_attention_desc *d, const ref_extras *x, uint32_t b, uint32_t i)
{
    const int64_t keys = (d->flags & CLFLASH_ALIGN_TO_KEY_LENGTH) ? ref_key_len(d, x, b) : (int64_t)d->seq_k;
    return (int64_t)i + keys - (int64_t)d->seq_q + d->diagonal_offset;
}

void ref_visible_keys(const clflash_attention_desc *d, const ref_extras *x, uint32_t b, uint32_t i, int64_t *lo,
                      int64_t *hi)
{
    const int64_t diag = ref_diagonal(d, x, b, i);
    int64_t l = 0, h = ref_key_len(d, x, b);
    if ((d->flags & CLFLASH_CAUSAL) && diag + 1 < h)
        h = diag + 1;
    if (d->flags & CLFLASH_WINDOW) {
        if (diag - (int64_t)d->window_left > l)
            l = diag - (int64_t)d->window_left;
        if (diag + (int64_t)d->window_right + 1 < h)
            h = diag + (int64_t)d->window_right + 1;
    }
    *lo = l;
    *hi = h;
}

double ref_transform_score(const clflash_attention_desc *d, const ref_extras *x, const ref_strides *bs, uint32_t b,
                           uint32_t h, uint32_t i, uint32_t j, double s, double *dfds)
{
    double g = 1.0;
    if (d->softcap != 0.0f) {
        const double t = tanh(s / (double)d->softcap);
        s = (double)d->softcap * t;
        g = 1.0 - t * t;
    }
    if (x && x->bias)
        s += (double)x->bias[bs->offset + b * bs->batch_stride + h * bs->head_stride + i * bs->seq_stride + j];
    if (x && x->alibi_slopes) {
        s -= (double)x->alibi_slopes[h] * fabs((double)(ref_diagonal(d, x, b, i) - (int64_t)j));
    }
    if (dfds)
        *dfds = g;
    return s;
}

void ref_attention_ex(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                      const ref_extras *x, double *o, double *lse)
{
    const uint32_t hkv = ref_heads_kv(d);
    const uint32_t group = d->heads_q / hkv;
    const uint32_t D = d->head_dim;
    const ref_strides qs = ref_resolve_layout(&d->q, d->heads_q, d->seq_q, D);
    const ref_strides ks = ref_resolve_layout(&d->k, hkv, d->seq_k, D);
    const ref_strides vs = ref_resolve_layout(&d->v, hkv, d->seq_k, D);
    const ref_strides bs = ref_resolve_bias_layout(d);
    const double scale = ref_scale(d);
    double *s = malloc(sizeof(double) * d->seq_k);
    if (!s) {
        fprintf(stderr, "reference: out of memory\n");
        abort();
    }

    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++) {
            const uint32_t hk = h / group;
            for (uint32_t i = 0; i < d->seq_q; i++) {
                const size_t row = ((size_t)b * d->heads_q + h) * d->seq_q + i;
                double *orow = o + row * D;
                int64_t lo, hi;
                ref_visible_keys(d, x, b, i, &lo, &hi);
                double m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    double dot = 0.0;
                    for (uint32_t c = 0; c < D; c++)
                        dot += (double)q[ref_index(&qs, b, h, i, c)] *
                               (double)k[ref_index(&ks, b, hk, (uint32_t)j, c)];
                    const double sc = ref_transform_score(d, x, &bs, b, h, i, (uint32_t)j, dot * scale, NULL);
                    s[j] = sc;
                    if (sc > m)
                        m = sc;
                }
                for (uint32_t c = 0; c < D; c++)
                    orow[c] = 0.0;
                if (m == -INFINITY) { /* no key, or every visible score is -inf */
                    if (lse)
                        lse[row] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = lo; j < hi; j++) {
                    const double p = exp(s[j] - m);
                    sum += p;
                    for (uint32_t c = 0; c < D; c++)
                        orow[c] += p * (double)v[ref_index(&vs, b, hk, (uint32_t)j, c)];
                }
                for (uint32_t c = 0; c < D; c++)
                    orow[c] /= sum;
                if (lse)
                    lse[row] = m + log(sum);
            }
        }
    free(s);
}

/* ---- tolerances -------------------------------------------------------------------------------
 * Inputs are drawn uniform in [-2, 2) for Q and [-1, 1) for K and V (harness.c), so |V| <= 1,
 * |O| <= 1, and with the default scale the scores stay within a few units.
 *
 * f32, flash and naive, O: fp32 dot products and exp2 carry relative errors of a few 1e-7, which
 * move O by ~1e-6 at most here. atol 2e-5 + rtol 2e-4 leaves a 10x margin and still catches a
 * dropped key, a wrong rescale or a wrong mask, which move O by 1e-3 .. 1e-1.
 * f32 lse: |lse| is at most ~15 here and fp32 gives ~1e-6; atol 2e-5 + rtol 2e-5.
 *
 * f16 flash, O: the inputs are exactly the fp16 values the reference uses and the math is fp32,
 * so the error is the final rounding to fp16, at most 2^-11 |O| (rtol 2e-3 covers it 4x). A
 * tensor-core fast path may also round P to fp16 before P V, which adds at most
 * 2^-11 * max|V| = 4.9e-4 absolute: atol 5e-4 covers that worst case (typical errors are
 * several times smaller because they do not all align).
 * f16 flash lse: computed in fp32 from exact inputs, so the f32 tolerance applies.
 *
 * f16 naive: S and P are stored in fp16. Each score is off by up to 2^-11 |s| (|s| <~ 4 here:
 * ~2e-3), which moves each p by the same relative amount; P's storage adds 2^-11 and O's another
 * 2^-11. O: atol 3e-3 + rtol 1e-2. lse is off by at most max|s error|: atol 2e-3 + rtol 1e-3. */
ref_tol ref_tol_o(clflash_dtype t, ref_path p)
{
    ref_tol r = {2e-5, 2e-4};
    if (t == CLFLASH_F16) {
        r.atol = p == REF_PATH_NAIVE ? 3e-3 : 5e-4;
        r.rtol = p == REF_PATH_NAIVE ? 1e-2 : 2e-3;
    }
    return r;
}

ref_tol ref_tol_lse(clflash_dtype t, ref_path p)
{
    ref_tol r = {2e-5, 2e-5};
    if (t == CLFLASH_F16 && p == REF_PATH_NAIVE) {
        r.atol = 2e-3;
        r.rtol = 1e-3;
    }
    return r;
}

int ref_close(double got, double ref, ref_tol t)
{
    if (isnan(got) || isnan(ref))
        return 0;
    if (isinf(ref) || isinf(got))
        return got == ref;
    return fabs(got - ref) <= t.atol + t.rtol * fabs(ref);
}

size_t ref_compare(const char *what, const double *got, const double *ref, size_t n, ref_tol t,
                   char *msg, size_t msg_len)
{
    size_t bad = 0, first = 0, worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        if (ref_close(got[i], ref[i], t))
            continue;
        if (bad++ == 0)
            first = i;
        /* how far past its own bound each failure is; NaN and inf mismatches count as huge */
        double excess = fabs(got[i] - ref[i]) / (t.atol + t.rtol * fabs(ref[i]));
        if (!(excess == excess) || isinf(excess))
            excess = HUGE_VAL;
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (bad && msg && msg_len)
        snprintf(msg, msg_len,
                 "%s: %zu of %zu values outside |got-ref| <= %g + %g*|ref|; first [%zu] got %.9g ref %.9g; "
                 "worst [%zu] got %.9g ref %.9g",
                 what, bad, n, t.atol, t.rtol, first, got[first], ref[first], worst, got[worst], ref[worst]);
    return bad;
}
