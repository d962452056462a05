/*
 * paged_harness.h - one paged-KV-cache forward case from start to finish: K and V written into a
 * shuffled pool of pages in a given layout, the block table (shared pages, spare pages, entries
 * out of the pool where asked), the same keys gathered into ordinary contiguous tensors by the
 * rule clflash.h documents, the fp64 reference on those, and a run of clflash_forward on the pool.
 *
 * Why a harness of its own: the paged call describes K and V as pools, so the shared harness's
 * tensors do not fit it; and the Oclgrind driver runs the same cases as the Check suite. Independent
 * of Check: functions report by return value and a message buffer.
 */
#ifndef CLFLASH_TEST_PAGED_HARNESS_H
#define CLFLASH_TEST_PAGED_HARNESS_H

#include "reference.h"

#include <stddef.h>

/* How the pool's pages are laid out. */
typedef enum {
    PG_HEAD_MAJOR, /* [page][head][slot][head_dim]: the contiguous default (zero strides) */
    PG_SLOT_MAJOR, /* [page][slot][head][head_dim], FlashAttention's and vLLM's */
    PG_ODD         /* slot-major with an offset of 3 and 3 spare elements per slot and 5 per page:
                      no row on 16 bytes */
} pg_layout;

typedef struct {
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim, page_size;
    clflash_dtype dtype;               /* F32, F16 or BF16 */
    uint32_t flags;                    /* CLFLASH_CAUSAL, _WINDOW, _ALIGN_TO_KEY_LENGTH */
    uint32_t window_left, window_right;
    uint32_t num_splits;
    pg_layout layout;
    int ragged;                        /* key lengths seq_k, 1, seq_k / 2 + 1, 0, seq_k + 9, ... */
    int shared_prefix;                 /* every entry's first page is entry 0's */
    int hostile;                       /* table entries out of the pool (-3, INT32_MAX, num_pages),
                                          past each length and on one visible page */
    int alibi;
    uint32_t extra_columns;            /* table columns past the ones seq_k needs */
} pg_spec;

typedef struct {
    pg_spec s;
    clflash_attention_desc d;          /* the paged call (buffers set by pg_run) */
    clflash_attention_desc contiguous; /* the same keys as [batch][heads_kv][seq_k][d] tensors */
    uint32_t pages_per_seq, num_pages;
    size_t esize;
    uint64_t nq, npool;                /* elements of Q and of each pool */
    void *q, *k_pool, *v_pool;         /* storage type */
    void *k_flat, *v_flat;             /* the gathered keys in the storage type (contiguous) */
    float *qf, *kf, *vf;               /* dequantised Q and gathered K, V for the reference */
    int32_t *table;                    /* [batch][pages_per_seq] */
    int32_t *lens;                     /* [batch], or NULL */
    float *slopes;                     /* [heads_q], or NULL */
    double *ref_o, *ref_lse;
    void *o;                           /* [batch][heads_q][seq_q][d] in the storage type */
    float *lse;
} pg_case;

/* Builds a case; 0, or -1 if memory ran out or the spec is not one the harness makes. */
int pg_case_init(pg_case *c, const pg_spec *s, uint64_t seed);
void pg_case_free(pg_case *c);

/* Runs clflash_forward on the pool (contiguous = 0) or on the gathered tensors (1), on the
 * context's queue, and reads O and lse into c->o and c->lse; *kernel and *splits (if not NULL)
 * receive the plan's kernel and part count. Returns the library's status or an OpenCL error. */
clflash_status pg_run(clflash_context *ctx, pg_case *c, int contiguous, const char **kernel, uint32_t *splits);

/* Checks c->o and c->lse against the reference with tolerance `to` for O; 0 if all hold, else the
 * number of failures with the first described in msg. */
int pg_check(const pg_case *c, ref_tol to, char *msg, size_t msg_len);

/* "f16 b3 h8/2 q1 k300 page 16 slot-major ragged shared hostile splits 3" */
const char *pg_spec_str(const pg_spec *s, char *buf, size_t n);

#endif /* CLFLASH_TEST_PAGED_HARNESS_H */
