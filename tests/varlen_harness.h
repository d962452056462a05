/*
 * varlen_harness.h - one variable-length packed batch (clflash.h, "Variable-length batches") from
 * start to finish: packed Q, K, V (and dO) in a token-major or an odd head-major layout, the
 * cumulative lengths as the device gets them (well-formed or hostile), each sequence's rows found
 * by the documented clamping rule, the fp64 reference run on every sequence as a batch-1 problem
 * of its own (its rows gathered), and runs of clflash_forward and clflash_backward with their
 * checks.
 *
 * What the checks expect of each packed row: covered by exactly one sequence, that sequence's
 * reference; covered by none, the sentinel it was filled with (the library never writes it);
 * covered by several (hostile lengths whose ranges overlap), anything (clflash.h leaves it
 * unspecified). Rows no sequence covers hold NaN in every input, so a kernel that reads one gets
 * NaN into its results.
 *
 * Independent of Check so that the Oclgrind driver runs the same cases; functions report by return
 * value and a message buffer.
 */
#ifndef CLFLASH_TEST_VARLEN_HARNESS_H
#define CLFLASH_TEST_VARLEN_HARNESS_H

#include "reference.h"

#include <stddef.h>

typedef struct {
    clflash_dtype dtype;            /* F32, F16 or BF16 */
    uint32_t batch, heads_q, heads_kv, head_dim;
    uint32_t seq_q, seq_k;          /* the descriptor's longest lengths; 0: the longest sequence's */
    const int32_t *cu_q, *cu_k;     /* [batch + 1], as the device gets them */
    uint32_t total_q, total_k;
    uint32_t flags, window_left, window_right;
    float softcap;
    int alibi;                      /* slopes 0.3 / (h + 1) */
    uint32_t num_splits;
    int odd_layout;                 /* head-major packed tensors with an offset and padded rows and
                                       heads (no row on 16 bytes), else the token-major default */
} vl_spec;

typedef struct {
    vl_spec s;
    int32_t *cu_q, *cu_k;           /* copies of the spec's */
    clflash_attention_desc d;       /* the call (buffers set by the runs) */
    size_t esize;
    uint32_t *q_first, *q_len, *k_first, *k_len; /* [batch]: each sequence's rows by clflash.h's rule */
    uint64_t nq, nk;                /* elements of the Q-like (Q, O, dO, dQ) and K-like host arrays */
    uint64_t nlse;                  /* heads_q * total_q */
    void *q, *k, *v, *d_o;          /* inputs in the storage type */
    float *slopes;                  /* [heads_q] or NULL */
    void *o;                        /* the forward's O as read back */
    float *lse;                     /* its lse as read back */
    void *o_in;                     /* the backward's O: the reference rounded (NaN off the sequences) */
    float *lse_in;                  /* its lse: the reference's */
    void *dq, *dk, *dv;             /* the backward's outputs as read back */
    double *ref_o, *ref_lse, *ref_dq, *ref_dk, *ref_dv; /* per element of the host arrays */
    unsigned char *q_state, *k_state, *lse_state; /* per element: 0 sentinel, 1 checked, 2 any */
} vl_case;

/* Cumulative lengths of n sequences that start at row `lead`: cu[0] = lead, cu[b + 1] = cu[b] +
 * lens[b]; returns cu[n]. */
uint32_t vl_cumulate(const int32_t *lens, uint32_t n, uint32_t lead, int32_t *cu);

/* Builds a case and its reference (with the backward's when `backward`); 0, or -1 if memory ran
 * out or the spec is not one the harness makes. */
int vl_case_init(vl_case *c, const vl_spec *s, int backward, uint64_t seed);
void vl_case_free(vl_case *c);

/* Fills the case's O and lse with the sentinel vl_check_forward expects where nothing is written. */
void vl_reset_forward_outputs(vl_case *c);
/* Runs clflash_forward on the case (O and lse pre-filled with the sentinel) and reads O and lse
 * back; *kernel and *splits (if not NULL) receive the plan's. Returns the library's status or an
 * OpenCL error. */
clflash_status vl_run_forward(clflash_context *ctx, vl_case *c, const char **kernel, uint32_t *splits);
/* Checks the forward's O and lse; 0 if all hold, else the number of failures, the first in msg. */
int vl_check_forward(const vl_case *c, char *msg, size_t msg_len);

/* Runs clflash_backward on the case (O and lse the reference's; dQ, dK, dV pre-filled with the
 * sentinel) and reads the gradients back; *kernel (if not NULL) receives the backward plan's. */
clflash_status vl_run_backward(clflash_context *ctx, vl_case *c, const char **kernel);
/* Checks dQ, dK and dV; 0 if all hold, else the number of failures, the first in msg. */
int vl_check_backward(const vl_case *c, char *msg, size_t msg_len);

/* "f16 b17 h4/2 d64 causal window 16/0 alibi softcap splits 3 odd" */
const char *vl_spec_str(const vl_spec *s, char *buf, size_t n);

#endif /* CLFLASH_TEST_VARLEN_HARNESS_H */
