/*
 * harness.h - one attention test case from start to finish: inputs laid out as a descriptor
 * says, outputs pre-filled with a sentinel, the library run through the host convenience call or
 * through device buffers, the fp64 reference, and the checks (values within tolerance, rows with
 * no visible key exactly O = 0 and lse = -inf, O's gaps untouched).
 *
 * Independent of Check so that the Oclgrind driver can use it too; functions report problems by
 * return value plus a message buffer.
 */
#ifndef CLFLASH_TEST_HARNESS_H
#define CLFLASH_TEST_HARNESS_H

#include "reference.h"

#include <stddef.h>

/* Bits the outputs are pre-filled with; any change means the library wrote there. */
#define TH_SENTINEL_F32 0xc6f5ab9au /* -31445.8 */
#define TH_SENTINEL_F16 0xf7a9u     /* -31376 */
#define TH_SENTINEL_LSE 0xc4424000u /* -777.0f */

typedef struct {
    clflash_attention_desc d;
    size_t esize;                /* bytes per element of d.dtype (fp32 storage for BF16/I8 is not made) */
    uint64_t nq, nk, nv, no;     /* elements of each host array: its layout's extent */
    size_t nlse;                 /* batch * heads_q * seq_q */
    float *qf, *kf, *vf;         /* dequantised inputs at layout positions; NaN in the gaps */
    void *q, *k, *v;             /* the same in the storage type */
    void *o;                     /* storage type, pre-filled with the sentinel */
    float *lse;                  /* pre-filled with the sentinel */
    double *ref_o, *ref_lse;     /* dense [b][h][i][c] and [b][h][i] */
    unsigned char *o_mask;       /* 1 where an element of o belongs to O's layout */
    int32_t *key_lens;           /* [batch] key lengths passed as d.key_lengths, or NULL (none) */
} th_case;

/* Allocates and fills a case for d (F32 or F16 storage; other dtypes get F16-sized arrays so that
 * validation tests can pass real pointers). Q is uniform in [-2, 2), K and V in [-1, 1). Returns 0,
 * or -1 if memory ran out. */
int th_case_init(th_case *t, const clflash_attention_desc *d, uint64_t seed);
void th_case_free(th_case *t);
/* Gives the case key lengths (copied; [batch]): th_run_device passes them as d.key_lengths and
 * th_case_reference honours them. Returns 0, or -1 if memory ran out. */
int th_case_set_key_lengths(th_case *t, const int32_t *lens);
/* Refills o and lse with the sentinel. */
void th_case_reset_outputs(th_case *t);
/* Computes ref_o and ref_lse. */
void th_case_reference(th_case *t);

/* clflash_forward_host on the case (lse passed only if with_lse). */
clflash_status th_run_host(clflash_context *c, th_case *t, int with_lse);

/* Which entry point th_run_device calls. */
typedef enum { TH_FLASH, TH_NAIVE } th_algo;

/* Creates device buffers from the host arrays (O and lse initialised from the sentinel-filled
 * host copies), calls clflash_forward or clflash_forward_naive on `queue` (NULL = the context's),
 * waits for the returned event, and reads the whole O buffer and lse back into the host arrays.
 * On a library error the buffers are still read back, so untouched checks work. Returns the
 * library's status, or the OpenCL error of the test's own calls. */
clflash_status th_run_device(clflash_context *c, th_case *t, th_algo algo, int with_lse,
                             cl_command_queue queue);

/* Checks O (and lse if with_lse) against the reference with tolerances for the dtype and path,
 * rows with no visible key (exact O = 0, lse = -inf), and O's gaps. Returns 0 if all hold, else
 * writes a description into msg and returns the number of failing checks. */
int th_check(const th_case *t, int with_lse, ref_path path, char *msg, size_t msg_len);

/* Compares the O and lse of two runs of the same case (a and b were initialised from the same
 * descriptor) with the sum of both paths' tolerances. */
int th_check_same(const th_case *a, const th_case *b, int with_lse, ref_tol to, ref_tol tl, char *msg,
                  size_t msg_len);

/* 1 if every element of o and lse still holds the sentinel. */
int th_outputs_untouched(const th_case *t);

/* O element at host index idx, as float. */
float th_load(const th_case *t, const void *base, uint64_t idx);

/* A descriptor with the given shape and contiguous layouts. */
clflash_attention_desc th_desc(uint32_t batch, uint32_t heads_q, uint32_t heads_kv, uint32_t seq_q,
                               uint32_t seq_k, uint32_t head_dim, clflash_dtype dtype, uint32_t flags);

/* "f32 b2 h4/2 q37 k53 d64 causal scale=0 block=0 [strided]" */
const char *th_desc_str(const clflash_attention_desc *d, char *buf, size_t n);

/* clflash_context_create_default(opt, out): CLFLASH_DEVICE picks the device. */
clflash_status th_context(const clflash_context_options *opt, clflash_context **out);

/* CL_DEVICE_LOCAL_MEM_SIZE of the context's device (0 on error). */
uint64_t th_device_local_mem(clflash_context *c);

#endif /* CLFLASH_TEST_HARNESS_H */
