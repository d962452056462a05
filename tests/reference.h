/*
 * reference.h - what every clflash test compares against: an fp64 CPU attention that reads the
 * same descriptor and layouts as the library, host-side fp16 conversion, a deterministic PRNG,
 * and a tolerance check with an explicit absolute and relative part per storage type.
 *
 * Why fp64 and a separate implementation: the library does fp32 math in tiles with an online
 * softmax; the reference does the textbook three passes (max, sum, weighted sum) in double, so
 * the only shared assumption is the meaning of the descriptor, as documented in clflash.h.
 * Nothing here uses OpenCL; the Oclgrind driver and the Check suites both link it.
 */
#ifndef CLFLASH_TEST_REFERENCE_H
#define CLFLASH_TEST_REFERENCE_H

#include "clflash.h"

#include <stddef.h>
#include <stdint.h>

/* ---- fp16 on the host ------------------------------------------------------------------------ */
/* float -> IEEE binary16 bits, round to nearest, ties to even; overflow gives +-inf, NaN stays NaN. */
uint16_t ref_f32_to_f16(float f);
/* IEEE binary16 bits -> float (exact). */
float ref_f16_to_f32(uint16_t h);
/* float -> bfloat16 bits, round to nearest, ties to even; NaN stays NaN. */
uint16_t ref_f32_to_bf16(float f);
/* bfloat16 bits -> float (exact). */
float ref_bf16_to_f32(uint16_t h);
/* Element i of a buffer of F32, F16 or BF16 storage: ref_store writes x rounded to the type and
 * returns the value stored, as float; ref_load reads one. */
float ref_store(clflash_dtype t, void *buf, uint64_t i, float x);
float ref_load(clflash_dtype t, const void *buf, uint64_t i);

/* ---- deterministic inputs -------------------------------------------------------------------- */
typedef struct {
    uint64_t state;
} ref_rng;

void ref_rng_seed(ref_rng *r, uint64_t seed);
uint64_t ref_rng_next(ref_rng *r);   /* splitmix64 */
double ref_rng_uniform(ref_rng *r);  /* uniform in [-1, 1) */

/* ---- layouts --------------------------------------------------------------------------------- */
/* A clflash_layout with its zero strides replaced by their contiguous defaults (clflash.h). */
typedef struct {
    uint64_t offset, batch_stride, head_stride, seq_stride;
} ref_strides;

ref_strides ref_resolve_layout(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t head_dim);
/* Index of element (b, h, i, c). */
uint64_t ref_index(const ref_strides *s, uint32_t b, uint32_t h, uint32_t i, uint32_t c);
/* Elements a host array must hold for this layout: the last element's index + 1. */
uint64_t ref_extent(const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t seq,
                    uint32_t head_dim);

/* heads_kv with 0 resolved to heads_q. */
uint32_t ref_heads_kv(const clflash_attention_desc *d);
/* The scale the descriptor means: d->scale, or 1/sqrt(head_dim) when it is 0. */
double ref_scale(const clflash_attention_desc *d);

/* ---- the reference attention ------------------------------------------------------------------ */
/* q, k, v hold dequantised values at the positions d->q, d->k, d->v describe (for fp16 inputs:
 * the fp16-rounded values). Writes o as a dense [batch][heads_q][seq_q][head_dim] array and, if
 * lse is not NULL, lse as [batch][heads_q][seq_q]: the natural log of the sum of exp(scaled
 * score) over the keys the row sees. A row that sees no key gets O = 0 and lse = -INFINITY.
 * Honours GQA (query head h reads kv head h / (heads_q / heads_kv)) and bottom-right causal
 * masking (query i sees key j iff j <= i + seq_k - seq_q). */
void ref_attention(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                   double *o, double *lse);

/* Host copies of the descriptor's optional inputs (the descriptor holds them as cl_mem). NULL
 * members are absent. The bias is indexed with ref_resolve_bias_layout(d). */
typedef struct {
    const float *bias;
    const float *alibi_slopes;  /* [heads_q] */
    const int32_t *key_lengths; /* [batch] */
} ref_extras;

/* The bias layout's strides: zero strides take their defaults (row = seq_k, head = seq_q rows,
 * batch = heads_q heads), then the dimensions d->bias_broadcast names get stride 0. */
ref_strides ref_resolve_bias_layout(const clflash_attention_desc *d);

/* ref_attention with every feature of the descriptor: causal, window, softcap, and, from x, the
 * bias, ALiBi slopes and key lengths (x may be NULL). Scores are scale * q.k of the dequantised
 * inputs, then softcap, + bias, - slope * |diag - j|; a row whose visible scores are all -inf (or
 * that sees no key) gets O = 0 and lse = -inf. */
void ref_attention_ex(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                      const ref_extras *x, double *o, double *lse);

/* The keys query i of batch entry b sees, as [*lo, *hi) (empty when *hi <= *lo): key lengths (from
 * x, which may be NULL), causal and window, every rule aligned bottom-right as in clflash.h. */
void ref_visible_keys(const clflash_attention_desc *d, const ref_extras *x, uint32_t b, uint32_t i, int64_t *lo,
                      int64_t *hi);

/* The score of query i and key j of (b, h) from the scaled dot product s = scale * q.k: softcap,
 * then + bias (bs = ref_resolve_bias_layout(d)), then - slope * |diag - j|. If dfds is not NULL it
 * receives the derivative of the score with respect to s: 1 - tanh^2(s / softcap) with softcap, else 1. */
double ref_transform_score(const clflash_attention_desc *d, const ref_extras *x, const ref_strides *bs, uint32_t b,
                           uint32_t h, uint32_t i, uint32_t j, double s, double *dfds);

/* ---- tolerances ------------------------------------------------------------------------------- */
/* A value passes when |got - ref| <= atol + rtol * |ref|. Infinities must match exactly, and a
 * NaN never passes. The chosen values and why are in reference.c. */
typedef struct {
    double atol, rtol;
} ref_tol;

typedef enum { REF_PATH_FLASH, REF_PATH_NAIVE } ref_path;

/* Tolerance for O and for lse, by storage type and algorithm. */
ref_tol ref_tol_o(clflash_dtype t, ref_path p);
ref_tol ref_tol_lse(clflash_dtype t, ref_path p);

int ref_close(double got, double ref, ref_tol t);

/* Compares n values; returns the number that fail. If any fail and msg is not NULL, writes a
 * one-line description of the first failure and the largest error into msg. */
size_t ref_compare(const char *what, const double *got, const double *ref, size_t n, ref_tol t,
                   char *msg, size_t msg_len);

#endif /* CLFLASH_TEST_REFERENCE_H */
