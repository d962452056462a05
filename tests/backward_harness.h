/*
 * backward_harness.h - one backward test case from start to finish: inputs (Q, K, V, dO) laid out as
 * a descriptor says, the forward's O and lse, outputs pre-filled with a sentinel, the library run
 * through device buffers (flash or naive backward), the fp64 reference gradients, and the checks
 * (values within tolerance, exact zeros where nothing is seen, the outputs' gaps untouched).
 *
 * Independent of Check so that the Oclgrind driver can use it too. F32, F16 and BF16 storage.
 */
#ifndef CLFLASH_TEST_BACKWARD_HARNESS_H
#define CLFLASH_TEST_BACKWARD_HARNESS_H

#include "reference.h"

#include <stddef.h>

/* ---- the fp64 reference gradients -------------------------------------------------------------- */
/* q, k, v, d_o hold the values the device sees, at the positions d->q, d->k, d->v, d->o describe.
 * Writes the gradients of attention (dO = d_o) as dense [batch][heads][seq][head_dim] arrays:
 * dq for the query heads, dk and dv for the kv heads (summed over each group's query heads). Per
 * row: P_j = exp(s_j - lse) over the keys it sees, dP_j = dO.v_j, D = sum_j P_j dP_j,
 * dS_j = P_j (dP_j - D); dq += scale dS_j k_j, dk_j += scale dS_j q, dv_j += P_j dO. A row that sees
 * no key contributes nothing. If key_seen is not NULL it receives, per [batch][heads_kv][seq_k] key,
 * 1 if some query sees it. */
void ref_attention_backward(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                            const float *d_o, double *dq, double *dk, double *dv, unsigned char *key_seen);

/* The same with every feature of the descriptor (window, softcap) and of x (bias, ALiBi slopes, key
 * lengths; x may be NULL), as ref_attention_ex defines them. With f the score transform
 * (ref_transform_score) of s = scale * q.k: P_j = exp(f(s_j) - lse), dS_j = P_j (dP_j - D) f'(s_j),
 * and the products as above (scale dS_j k_j, scale dS_j q, P_j dO). The slopes get no gradient.
 * If dbias is not NULL it receives the bias gradient at the bias layout's positions
 * (tb_bias_extent(d) elements, zeroed first): P_j (dP_j - D) of each visible pair added at its bias
 * element, so that broadcast dimensions sum; bias_seen (if not NULL, as many bytes) gets 1 at each
 * element some pair adds to (its term may be exactly 0: a row with one visible key has P = 1 and
 * dP = D). A row whose visible scores are all -inf contributes nothing; key_seen counts a key as
 * seen only through a pair whose score is not -inf (a -inf bias gives P = 0 exactly). */
void ref_attention_backward_ex(const clflash_attention_desc *d, const float *q, const float *k, const float *v,
                               const float *d_o, const ref_extras *x, double *dq, double *dk, double *dv,
                               double *dbias, unsigned char *bias_seen, unsigned char *key_seen);

/* ---- one case ------------------------------------------------------------------------------------ */
typedef struct {
    clflash_attention_desc d;
    size_t esize;
    uint32_t heads_kv;
    uint64_t nq, nk, nv, no;         /* elements of each host array: its layout's extent (dO like O) */
    size_t nrows;                    /* batch * heads_q * seq_q */
    float *qf, *kf, *vf, *dof;       /* values as the device sees them, at layout positions; NaN in gaps */
    void *q, *k, *v, *d_o;           /* the same in the storage type */
    void *o;                         /* the reference O rounded to the storage type, NaN in gaps */
    float *lse;                      /* the reference lse as float */
    void *dq, *dk, *dv;              /* outputs (storage type), pre-filled with the sentinel */
    double *ref_o, *ref_lse;         /* dense fp64 forward */
    double *ref_dq, *ref_dk, *ref_dv; /* dense fp64 gradients */
    unsigned char *key_seen;         /* [batch][heads_kv][seq_k] */
    /* The descriptor's optional inputs as host copies (NULL = absent); d's cl_mem members stay NULL
     * and tb_run creates the buffers. */
    float *bias;                     /* tb_bias_extent(&d) floats */
    uint64_t bias_n;
    float *slopes;                   /* [heads_q] */
    int32_t *lens;                   /* [batch] */
    double *ref_dbias;               /* with a bias: the reference dBias at the bias layout's positions */
    unsigned char *ref_dbias_seen;   /* with a bias: 1 where some pair adds to the reference dBias */
    int bias_grad;                   /* 1: tb_run asks the backward for dBias (set it after init) */
    float *dbias;                    /* with bias_grad: dBias as read back (bias_n floats, sentinel in gaps) */
} tb_case;

/* Allocates and fills a case (Q uniform in [-2, 2), K, V and dO in [-1, 1)) and computes the
 * reference forward and gradients. Returns 0, or -1 if memory ran out or the dtype is not
 * F32, F16 or BF16. */
int tb_case_init(tb_case *t, const clflash_attention_desc *d, uint64_t seed);
/* The same with the optional inputs of x (bias over d's bias_layout and bias_broadcast, ALiBi slopes,
 * key lengths; x may be NULL), which are copied; d's own bias, alibi_slopes and key_lengths are
 * ignored. The reference forward and gradients honour every feature. */
int tb_case_init_ex(tb_case *t, const clflash_attention_desc *d, const ref_extras *x, uint64_t seed);
/* Optional inputs a test asks for by kind (tb_case_init_features). Biases are uniform in [-2, 2)
 * with -inf entries:
 *   TB_BIAS_FULL       one per (b, h, i, j), offset 3, every 7th entry -inf;
 *   TB_BIAS_BCAST      shared by batch entries and heads (a [seq_q][seq_k] mask), every 5th -inf;
 *   TB_BIAS_KEYS       one per (b, j), shared by heads and rows (a padding-style mask); keys
 *                      j % 6 == 5 are -inf, so they get dK = dV = 0;
 *   TB_BIAS_DEAD_ROWS  one per (b, h, i, j); rows i % 4 == 1 are all -inf: lse = -inf, dQ = 0.
 * Key lengths: TB_LENS_RAGGED cycles (seq_k + 1) / 2, 0, seq_k + 5 (clamped to seq_k by the
 * library), 1 over the batch; TB_LENS_ZERO is 0 everywhere (every gradient is 0). ALiBi slopes are
 * 2^-(h+1). */
typedef enum { TB_NO_BIAS, TB_BIAS_FULL, TB_BIAS_BCAST, TB_BIAS_KEYS, TB_BIAS_DEAD_ROWS } tb_bias_kind;
typedef enum { TB_NO_LENS, TB_LENS_RAGGED, TB_LENS_ZERO } tb_lens_kind;

/* tb_case_init_ex with generated optional inputs: sets d's bias_layout offset (TB_BIAS_FULL) or
 * bias_broadcast for the kind (replacing what d had), and makes the bias, slopes (alibi != 0) and
 * key lengths. Returns 0, or -1 as tb_case_init. */
int tb_case_init_features(tb_case *t, const clflash_attention_desc *d, tb_bias_kind bias, int alibi,
                          tb_lens_kind lens, uint64_t seed);

/* Floats a host bias for d's bias layout must hold (its last element + 1). */
uint64_t tb_bias_extent(const clflash_attention_desc *d);
/* The case's optional inputs as the reference takes them. */
ref_extras tb_extras(const tb_case *t);
void tb_case_free(tb_case *t);
/* Refills dq, dk, dv with the sentinel. */
void tb_reset_outputs(tb_case *t);

typedef enum { TB_FLASH, TB_NAIVE } tb_algo;

/* Creates device buffers from the host arrays and calls clflash_backward (TB_FLASH) or
 * clflash_backward_naive on `queue` (NULL = the context's), waits for the returned event and reads
 * the whole dq, dk, dv buffers back. With device_forward, O and lse are first computed by
 * clflash_forward on the device (the realistic pipeline) instead of taken from the reference.
 * On a library error the buffers are still read back, so untouched checks work. Returns the
 * library's status, or the OpenCL error of the harness's own calls. */
clflash_status tb_run(clflash_context *c, tb_case *t, tb_algo algo, int device_forward, cl_command_queue queue);

/* Tolerance for the gradients, by storage type: |got - ref| <= atol * max(1, max|ref|) + rtol * |ref|,
 * with max|ref| taken over the tensor. The values and why are in backward_harness.c. */
ref_tol tb_tol(clflash_dtype t);

/* Checks dq, dk, dv against the reference (values within tb_tol, exact zeros for rows that see no
 * key and keys no row sees, gaps untouched), and with bias_grad dBias (within tb_tol against the
 * reference, exactly 0 where no pair adds to it, the bias layout's gaps untouched). Returns 0 if all
 * hold, else describes the failures in msg and returns their number. */
int tb_check(const tb_case *t, char *msg, size_t msg_len);

/* Compares the outputs of two runs of the same case bit for bit (exact = 1) or within twice
 * tb_tol (exact = 0). Returns 0 if they agree. */
int tb_compare_runs(const tb_case *a, const tb_case *b, int exact, char *msg, size_t msg_len);

/* 1 if every element of dq, dk and dv still holds the sentinel. */
int tb_outputs_untouched(const tb_case *t);

/* Element idx of a host array in the case's storage type, as float. */
float tb_load(const tb_case *t, const void *base, uint64_t idx);

#endif /* CLFLASH_TEST_BACKWARD_HARNESS_H */
