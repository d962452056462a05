/*
 * tune_reference.h - the fp64 attention clflash-tune checks its candidates against
 * (tools/tune_reference.c).
 */
#ifndef CLFLASH_TUNE_REFERENCE_H
#define CLFLASH_TUNE_REFERENCE_H

#include <clflash.h>

#include <stddef.h>
#include <stdint.h>

/* The shape of a check: contiguous [batch][heads][seq][head_dim] tensors, K and V with heads_kv
 * heads, the scale 1/sqrt(head_dim), causal aligned bottom-right. */
typedef struct {
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
    clflash_dtype dtype;
    int causal;
} tune_shape;

/* O of attention in fp64 from Q, K and V in the shape's dtype ([batch][heads_q][seq_q][head_dim]
 * values); a row that sees no key gets O = 0. */
void tune_reference_forward(const tune_shape *s, const void *q, const void *k, const void *v, double *out);

/* dQ, dK and dV of attention in fp64 from Q, K, V and dO in the shape's dtype: P recomputed
 * exactly, D = rowsum(dO * O), dS = P (dP - D); dK and dV sum the query heads of each K/V head.
 * dq holds batch * heads_q * seq_q * head_dim values, dk and dv batch * heads_kv * seq_k *
 * head_dim. A row that sees no key adds nothing. */
void tune_reference_backward(const tune_shape *s, const void *q, const void *k, const void *v, const void *d_o,
                             double *dq, double *dk, double *dv);

#endif /* CLFLASH_TUNE_REFERENCE_H */
