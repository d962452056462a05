/*
 * test_ring.c - clflash_ring_forward and clflash_ring_backward under mpirun: every rank compares its
 * O and lse (and, for the backward cases, dq, dk, dv and two runs' bits) with the fp64
 * reference attention of the whole sequence (tests/reference.c), computed on every rank from the
 * same seeded inputs, for contiguous shards (even, uneven with a one-token rank, given to the ranks
 * out of order) and the zigzag mapping, causal and not, sliding windows, ALiBi, key lengths (ragged,
 * 0, past the sequence, negative; all ending early, when the calls of key chunks past every length
 * must be left out, which the ring's call counts show; none reaching a key) and all of them with softcap, an additive bias (this rank's rows
 * against the whole sequence's keys: strided with gaps, broadcast over batch and heads or over rows,
 * with -INFINITY entries and fully masked rows, with a window and softcap), MHA, GQA and MQA, F32,
 * F16 and BF16, odd head_dim, token-major layouts with gaps (gaps of the inputs hold NaN, which must never be read;
 * gaps of O hold a sentinel, which must never be written), paged K/V shards (block_table: pages of 1,
 * 3 or 16 rows in a shuffled order, spare pages and the last page's unused slots NaN, on every rank
 * or the odd ones only), and packed sequences (cu_seqlens, against the reference of the whole
 * sequence with a block-diagonal mask: sequences across shards and chunks, longer than a shard, of
 * 1 and 0 tokens). Then the collective checks: ranks that
 * disagree on a field (or on CLFLASH_RING_TRANSPORT), or one rank's own error, make every rank
 * return the same status, and no caller buffer is written. The transport (MPI messages or the
 * node-local shared window) is the environment's: tests/CMakeLists.txt runs the file under both.
 *
 * Not a Check suite: Check forks a child per test, which MPI does not allow. Each case prints one
 * line per failing rank; the program exits 1 when any case failed on any rank.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, strdup */
#include "backward_harness.h"
#include "clflash_mpi.h"
#include "reference.h"
#include "ring_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int P, R; /* ranks, this rank */
/* The communicator the accuracy cases call the ring on: MPI_COMM_WORLD, or for a while one of its
 * own (the ring keeps its node-local window with the communicator; freeing it releases that) */
static MPI_Comm case_comm = MPI_COMM_WORLD;
static clflash_context *ctx;
/* The packed sequences of the case running now (clflash_ring_desc.cu_seqlens): their lengths, ended
 * by -1, clipped to the whole sequence, and a last sequence of the tokens left; NULL: no packing */
static const int32_t *case_seqs;

typedef struct {
    const char *name;
    uint32_t batch, heads_q, heads_kv, head_dim;
    clflash_dtype dtype;
    uint32_t flags, mapping;
    uint32_t total;      /* contiguous: tokens of the whole sequence; zigzag: tokens per chunk */
    int weights[4];      /* contiguous: relative shard sizes; -1 = exactly one token; 0 = even */
    int reversed;        /* contiguous: rank P-1 holds the first shard, rank 0 the last */
    int token_major;     /* [batch][seq][heads][head_dim] layouts with gaps */
    int with_lse;
    float softcap;       /* 0 = off */
    uint32_t window_left, window_right; /* with CLFLASH_WINDOW in flags */
    int alibi;           /* slopes 0.3, 0.15, 0.075, ... per query head */
    int key_lengths;     /* a key_lengths_kind */
    int bias;            /* a ring_bias_kind */
    int dbias;           /* backward: ask for the bias gradient (clflash_ring_desc.bias_grad) too */
} ring_case;

/* The key lengths of a case, per batch entry in turn. */
enum key_lengths_kind {
    KL_NONE,   /* no key lengths */
    KL_RAGGED, /* 3/5 of the sequence plus one, 0, past the sequence, negative */
    KL_SHORT,  /* 2/5 of the sequence, 0, 1/5 plus one, 1: the later key chunks reach no entry */
    KL_EMPTY   /* 0 and negative: no row has a key (the calls all run; O = 0, lse = -inf) */
};

/* A forward case whose K/V shards are paged (clflash_ring_desc.block_table). */
typedef struct {
    ring_case c;
    uint32_t page_size;
    int odd_only;        /* only the odd ranks page, the even ones pass tensors */
} paged_case;

/* The bias of a case. Every rank holds its rows of the whole sequence's bias, which the reference
 * sees as one [batch][heads_q][total][total] tensor (with the same broadcast bits). */
typedef enum {
    RB_NONE,
    RB_STRIDED,  /* the shard's bias at an offset with gaps after each row and head (NaN there);
                    every 7th element of the whole bias -INFINITY */
    RB_BCAST_BH, /* broadcast over batch and heads: one [seq_local][total] per rank */
    RB_MASKED,   /* every 5th element -INFINITY, and head 0 of batch entry 0 fully masked (every
                    key -INFINITY) at the positions p with p % 11 == 4 */
    RB_BCAST_ROWS /* broadcast over rows: one row of total keys per (batch, head), at an offset */
} ring_bias_kind;

/* The window, ALiBi slopes and key lengths of a case: host copies for the reference, buffers for
 * the ring (this rank's own, with the same values on every rank). */
typedef struct {
    float slopes[16];
    int32_t lengths[8];
    cl_mem slopes_buf, lengths_buf;
    float *bias;              /* the whole sequence's, for the reference */
    uint32_t bias_broadcast;
    clflash_layout bias_layout; /* this rank's */
    uint64_t bias_n;          /* floats of this rank's bias buffer (its layout's extent) */
    cl_mem bias_buf;          /* this rank's rows, in bias_layout */
    float *mask;              /* packed sequences: [total][total], 0 within a sequence, -inf across,
                                 the reference's bias (broadcast over batch and heads) */
    uint32_t num_seqs;
    cl_mem cu_buf;            /* packed sequences: the ring's cu_seqlens */
    ref_extras x;
} case_extras;

static uint64_t position(const ring_case *c, uint32_t i, uint64_t offset);

/* Strides of a bias layout over [batch][heads][rows][keys] as clflash_attention_desc and
 * clflash_ring_desc define them: defaults for zero strides, then the broadcast ones 0. */
static ref_strides bias_strides(const clflash_layout *l, uint32_t heads, uint32_t rows, uint32_t keys, uint32_t bcast)
{
    ref_strides s = ref_resolve_layout(l, heads, rows, keys);
    if (bcast & CLFLASH_BROADCAST_BATCH)
        s.batch_stride = 0;
    if (bcast & CLFLASH_BROADCAST_HEADS)
        s.head_stride = 0;
    if (bcast & CLFLASH_BROADCAST_ROWS)
        s.seq_stride = 0;
    return s;
}

static uint64_t bias_extent(const ref_strides *s, uint32_t batch, uint32_t heads, uint32_t rows, uint32_t keys)
{
    return s->offset + (batch - 1u) * s->batch_stride + (heads - 1u) * s->head_stride + (rows - 1u) * s->seq_stride +
           keys;
}

/* The whole sequence's bias (e->bias, dense but for broadcast dimensions) and this rank's n rows
 * of it (rows at the positions of the case's mapping, every key position), in e->bias_layout. */
static int bias_make(const ring_case *c, uint32_t total, uint32_t n, uint64_t offset, case_extras *e)
{
    const uint32_t bcast = c->bias == RB_BCAST_BH     ? CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS
                           : c->bias == RB_BCAST_ROWS ? CLFLASH_BROADCAST_ROWS
                                                      : 0;
    const clflash_layout dense = {0, 0, 0, 0};
    const ref_strides gs = bias_strides(&dense, c->heads_q, total, total, bcast);
    const uint64_t gn = bias_extent(&gs, c->batch, c->heads_q, total, total);
    e->bias = malloc(gn * sizeof(float));
    if (e->bias == NULL)
        return 0;
    ref_rng rng;
    ref_rng_seed(&rng, 31);
    for (uint64_t i = 0; i < gn; i++) {
        e->bias[i] = 2.0f * (float)ref_rng_uniform(&rng);
        if ((c->bias == RB_STRIDED && i % 7 == 3) || (c->bias == RB_MASKED && i % 5 == 1))
            e->bias[i] = -INFINITY;
    }
    if (c->bias == RB_MASKED)
        for (uint32_t p = 4; p < total; p += 11)
            for (uint32_t j = 0; j < total; j++)
                e->bias[ref_index(&gs, 0, 0, p, j)] = -INFINITY;
    e->bias_broadcast = bcast;
    memset(&e->bias_layout, 0, sizeof e->bias_layout);
    if (c->bias == RB_STRIDED) {
        e->bias_layout.offset = 3;
        e->bias_layout.seq_stride = total + 2;
        e->bias_layout.head_stride = (uint64_t)n * (total + 2) + 1;
    } else if (c->bias == RB_BCAST_ROWS) {
        e->bias_layout.offset = 5;
        e->bias_layout.head_stride = total + 3;
    }
    const ref_strides ls = bias_strides(&e->bias_layout, c->heads_q, n, total, bcast);
    const uint64_t ln = bias_extent(&ls, c->batch, c->heads_q, n, total);
    e->bias_n = ln;
    float *mine = malloc(ln * sizeof(float));
    if (mine == NULL)
        return 0;
    for (uint64_t i = 0; i < ln; i++)
        mine[i] = NAN; /* gaps: never to be read */
    for (uint32_t b = 0; b < c->batch; b++)
        for (uint32_t h = 0; h < c->heads_q; h++)
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t j = 0; j < total; j++) {
                    const uint32_t p = (uint32_t)position(c, i, offset);
                    mine[ref_index(&ls, b, h, i, j)] = e->bias[ref_index(&gs, b, h, p, j)];
                }
    cl_int err;
    e->bias_buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, ln * sizeof(float),
                                 mine, &err);
    free(mine);
    e->x.bias = e->bias;
    return err == CL_SUCCESS;
}

/* n and offset: this rank's rows and (contiguous) first position, for the bias. */
static int extras_make(const ring_case *c, uint32_t total, uint32_t n, uint64_t offset, case_extras *e)
{
    memset(e, 0, sizeof *e);
    cl_int err = CL_SUCCESS;
    if (c->bias && !bias_make(c, total, n, offset, e))
        return 0;
    if (c->alibi) {
        for (uint32_t h = 0; h < c->heads_q; h++)
            e->slopes[h] = 0.3f / (float)(1u << (h % 8));
        e->slopes_buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                       c->heads_q * sizeof(float), e->slopes, &err);
        e->x.alibi_slopes = e->slopes;
    }
    if (c->key_lengths && err == CL_SUCCESS) {
        const int32_t pattern[3][4] = {{(int32_t)(total * 3 / 5 + 1), 0, (int32_t)total + 999, -5},
                                       {(int32_t)(total * 2 / 5), 0, (int32_t)(total / 5 + 1), 1},
                                       {0, -5, 0, -1}};
        for (uint32_t b = 0; b < c->batch; b++)
            e->lengths[b] = pattern[c->key_lengths - KL_RAGGED][b % 4];
        e->lengths_buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                        c->batch * sizeof(int32_t), e->lengths, &err);
        e->x.key_lengths = e->lengths;
    }
    if (case_seqs && err == CL_SUCCESS) {
        int32_t cu[40] = {0};
        uint32_t s = 0;
        for (; s < 38 && case_seqs[s] >= 0; s++)
            cu[s + 1] = cu[s] + case_seqs[s] < (int32_t)total ? cu[s] + case_seqs[s] : (int32_t)total;
        cu[++s] = (int32_t)total; /* the tokens left */
        e->num_seqs = s;
        e->mask = malloc((size_t)total * total * sizeof(float));
        if (e->mask == NULL)
            return 0;
        for (uint32_t q = 0, sq = 0; q < total; q++) {
            while ((uint32_t)cu[sq + 1] <= q)
                sq++;
            for (uint32_t k = 0; k < total; k++)
                e->mask[(size_t)q * total + k] = k >= (uint32_t)cu[sq] && k < (uint32_t)cu[sq + 1] ? 0.0f : -INFINITY;
        }
        e->x.bias = e->mask;
        e->cu_buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   (s + 1) * sizeof(int32_t), cu, &err);
    }
    return err == CL_SUCCESS;
}

/* The case's rules on the reference's descriptor of the whole sequence and on the ring's. */
static void extras_apply(const ring_case *c, const case_extras *e, clflash_attention_desc *whole, clflash_ring_desc *rd)
{
    whole->window_left = rd->window_left = c->window_left;
    whole->window_right = rd->window_right = c->window_right;
    rd->alibi_slopes = e->slopes_buf;
    rd->key_lengths = e->lengths_buf;
    rd->bias = e->bias_buf;
    rd->bias_layout = e->bias_layout;
    whole->bias_broadcast = rd->bias_broadcast = e->bias_broadcast; /* the reference's bias is dense */
    rd->cu_seqlens = e->cu_buf;
    rd->num_seqs = e->num_seqs;
    if (e->mask) /* the reference sees packing as a block-diagonal mask */
        whole->bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS;
}

static void extras_free(case_extras *e)
{
    if (e->slopes_buf)
        clReleaseMemObject(e->slopes_buf);
    if (e->lengths_buf)
        clReleaseMemObject(e->lengths_buf);
    if (e->bias_buf)
        clReleaseMemObject(e->bias_buf);
    if (e->cu_buf)
        clReleaseMemObject(e->cu_buf);
    free(e->bias);
    free(e->mask);
}

/* ---- the token map of a case ------------------------------------------------------------------ */
static void shard_sizes(const ring_case *c, uint32_t *rows, uint64_t *offset)
{
    if (c->mapping == CLFLASH_RING_ZIGZAG) {
        for (int r = 0; r < P; r++) {
            rows[r] = 2 * c->total;
            offset[r] = 0;
        }
        return;
    }
    uint32_t fixed = 0, wsum = 0;
    for (int r = 0; r < P; r++) {
        const int w = c->weights[r % 4];
        if (w < 0)
            fixed += 1;
        else
            wsum += w ? (uint32_t)w : 1u;
    }
    uint32_t left = c->total - fixed, last_free = 0;
    for (int r = 0; r < P; r++) {
        const int w = c->weights[r % 4];
        rows[r] = w < 0 ? 1 : (c->total - fixed) * (w ? (uint32_t)w : 1u) / wsum;
        if (w >= 0) {
            left -= rows[r];
            last_free = (uint32_t)r;
        }
    }
    rows[last_free] += left; /* the rounding remainder */
    uint64_t at = 0;
    for (int i = 0; i < P; i++) {
        const int r = c->reversed ? P - 1 - i : i;
        offset[r] = at;
        at += rows[r];
    }
}

/* Global position of row i of this rank's shard. */
static uint64_t position(const ring_case *c, uint32_t i, uint64_t offset)
{
    if (c->mapping == CLFLASH_RING_CONTIGUOUS)
        return offset + i;
    const uint32_t ch = c->total;
    return i < ch ? (uint64_t)R * ch + i : (uint64_t)(2 * P - 1 - R) * ch + (i - ch);
}

static clflash_layout shard_layout(const ring_case *c, uint32_t heads, uint32_t rows)
{
    clflash_layout l = {0, 0, 0, 0};
    if (c->token_major) {
        l.head_stride = c->head_dim + 1;             /* a gap after each head's row */
        l.seq_stride = heads * l.head_stride + 2;    /* and after each token */
        l.batch_stride = rows * l.seq_stride + 5;    /* and after each batch entry */
        l.offset = 7;
    }
    return l;
}

/* ---- one case ------------------------------------------------------------------------------------ */
typedef struct {
    size_t elems, bytes;
    void *host;
    cl_mem buf;
} tensor;

static int make_tensor(tensor *t, clflash_dtype dt, const clflash_layout *l, uint32_t batch, uint32_t heads,
                       uint32_t rows, uint32_t d, const float *global, uint32_t total, const ring_case *c,
                       uint64_t offset, int sentinel)
{
    t->elems = ref_extent(l, batch, heads, rows, d);
    t->bytes = t->elems * clflash_dtype_size(dt);
    t->host = malloc(t->bytes);
    if (!t->host)
        return 0;
    for (size_t i = 0; i < t->elems; i++) {
        if (sentinel && dt == CLFLASH_F32)
            memcpy((float *)t->host + i, &(uint32_t){0xc6f5ab9au}, 4);
        else if (sentinel)
            ((uint16_t *)t->host)[i] = 0xf7a9u;
        else
            ref_store(dt, t->host, i, NAN); /* gaps of inputs: never to be read */
    }
    if (global) {
        const ref_strides s = ref_resolve_layout(l, heads, rows, d);
        for (uint32_t b = 0; b < batch; b++)
            for (uint32_t h = 0; h < heads; h++)
                for (uint32_t i = 0; i < rows; i++) {
                    const uint64_t p = position(c, i, offset);
                    for (uint32_t x = 0; x < d; x++)
                        ref_store(dt, t->host, ref_index(&s, b, h, i, x),
                                  global[(((uint64_t)b * heads + h) * total + p) * d + x]);
                }
    }
    cl_int err;
    t->buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t->bytes, t->host, &err);
    return err == CL_SUCCESS;
}

static void free_tensor(tensor *t)
{
    if (t->buf)
        clReleaseMemObject(t->buf);
    free(t->host);
    memset(t, 0, sizeof *t);
}

/* A paged K/V shard (clflash_ring_desc.block_table) for this rank's n rows, in *p: the block table
 * (pages_per_seq = the pages used + 1, the last column -3 or far past the pool: never to be read)
 * and the pool's size (the used pages and 3 more); the used pages lie in a shuffled order. */
typedef struct {
    uint32_t page_size, used, pages_per_seq, num_pages;
    int32_t *table; /* [batch][pages_per_seq] */
    cl_mem table_buf;
} paged;

static int paged_make(paged *p, uint32_t batch, uint32_t n, uint32_t page_size)
{
    p->page_size = page_size;
    p->used = (n + page_size - 1) / page_size;
    p->pages_per_seq = p->used + 1;
    p->num_pages = batch * p->used + 3;
    p->table = malloc(sizeof(int32_t) * batch * p->pages_per_seq);
    uint32_t *perm = malloc(sizeof(uint32_t) * p->num_pages);
    if (!p->table || !perm) {
        free(perm);
        return 0;
    }
    ref_rng rng;
    ref_rng_seed(&rng, 77 + (uint64_t)R);
    for (uint32_t i = 0; i < p->num_pages; i++)
        perm[i] = i;
    for (uint32_t i = p->num_pages - 1; i > 0; i--) {
        const uint32_t j = (uint32_t)(ref_rng_next(&rng) % (i + 1u)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (uint32_t b = 0; b < batch; b++) {
        for (uint32_t q = 0; q < p->used; q++)
            p->table[b * p->pages_per_seq + q] = (int32_t)perm[b * p->used + q];
        p->table[b * p->pages_per_seq + p->used] = b % 2 ? -3 : (int32_t)p->num_pages + 100;
    }
    free(perm);
    cl_int err;
    p->table_buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                  sizeof(int32_t) * batch * p->pages_per_seq, p->table, &err);
    return err == CL_SUCCESS;
}

static void paged_free(paged *p)
{
    if (p->table_buf)
        clReleaseMemObject(p->table_buf);
    free(p->table);
    memset(p, 0, sizeof *p);
}

/* A pool (layout l over num_pages pages of page_size slots) holding this rank's shard of global as
 * p's table says; every other element (pages not used, slots past the shard's end) NaN. */
static int make_pool(tensor *t, clflash_dtype dt, const clflash_layout *l, const paged *p, uint32_t batch,
                     uint32_t heads, uint32_t n, uint32_t d, const float *global, uint32_t total, const ring_case *c,
                     uint64_t offset)
{
    t->elems = ref_extent(l, p->num_pages, heads, p->page_size, d);
    t->bytes = t->elems * clflash_dtype_size(dt);
    t->host = malloc(t->bytes);
    if (!t->host)
        return 0;
    for (size_t i = 0; i < t->elems; i++)
        ref_store(dt, t->host, i, NAN);
    const ref_strides s = ref_resolve_layout(l, heads, p->page_size, d);
    for (uint32_t b = 0; b < batch; b++)
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t page = (uint32_t)p->table[b * p->pages_per_seq + i / p->page_size];
            const uint64_t pos = position(c, i, offset);
            for (uint32_t h = 0; h < heads; h++)
                for (uint32_t x = 0; x < d; x++)
                    ref_store(dt, t->host, ref_index(&s, page, h, i % p->page_size, x),
                              global[(((uint64_t)b * heads + h) * total + pos) * d + x]);
        }
    cl_int err;
    t->buf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t->bytes, t->host, &err);
    return err == CL_SUCCESS;
}

/* Inputs of the whole sequence, rounded to the storage type (what the device will see). */
static float *inputs(uint64_t n, clflash_dtype dt, uint64_t seed)
{
    float *x = malloc(n * sizeof(float));
    ref_rng rng;
    ref_rng_seed(&rng, seed);
    uint16_t scratch;
    for (uint64_t i = 0; i < n; i++)
        x[i] = dt == CLFLASH_F32 ? (float)ref_rng_uniform(&rng) : ref_store(dt, &scratch, 0, (float)ref_rng_uniform(&rng));
    return x;
}

static ref_tol tol_o(clflash_dtype t)
{
    if (t == CLFLASH_BF16) /* 8 bits of mantissa: two roundings of 2^-9 relative, and the inputs' */
        return (ref_tol){4e-3, 2e-2};
    return ref_tol_o(t, REF_PATH_FLASH);
}

/* A case with key lengths (unpaged) runs its ring calls with a clflash_ring_stats attached (the
 * timed path), whose call counts say how many calls the ring left out; over all ranks some must be
 * left out exactly when the lengths end early (KL_SHORT: every key chunk past 2/5 of the sequence
 * reaches no entry). Collective over case_comm. */
static void check_skipped(const ring_case *c, const clflash_ring_stats *s, clflash_status st, const char *what,
                          int *fail, char *msg, size_t cap)
{
    int mine = st == CLFLASH_SUCCESS && s->status == CLFLASH_SUCCESS ? s->skipped : -1, sum = 0, worst = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, case_comm);
    MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MIN, case_comm);
    if (*fail || worst < 0)
        return; /* the call or its timing failed somewhere: reported by the rank itself */
    if ((c->key_lengths == KL_SHORT) != (sum > 0)) {
        *fail = 1;
        snprintf(msg, cap, "%s: %d calls left out over the ring (this rank %d of %d), %s", what, sum, s->skipped,
                 s->calls + s->skipped, c->key_lengths == KL_SHORT ? "some expected" : "none expected");
    }
}

/* Runs case c, with K/V pools of page_size (0 = tensors) on every rank or on the odd ones (odd_only);
 * returns this rank's failures (0 or 1) and prints why. */
static int run_case_paged(const ring_case *c, uint32_t page_size, int odd_only)
{
    uint32_t rows[64] = {0};
    uint64_t offs[64] = {0};
    shard_sizes(c, rows, offs);
    const uint32_t total = c->mapping == CLFLASH_RING_ZIGZAG ? 2 * (uint32_t)P * c->total : c->total;
    const uint32_t hkv = c->heads_kv ? c->heads_kv : c->heads_q, d = c->head_dim, n = rows[R];
    float *gq = inputs((uint64_t)c->batch * c->heads_q * total * d, c->dtype, 11);
    float *gk = inputs((uint64_t)c->batch * hkv * total * d, c->dtype, 12);
    float *gv = inputs((uint64_t)c->batch * hkv * total * d, c->dtype, 13);
    clflash_attention_desc whole = {.struct_size = sizeof whole};
    whole.batch = c->batch;
    whole.heads_q = c->heads_q;
    whole.heads_kv = c->heads_kv;
    whole.seq_q = whole.seq_k = total;
    whole.head_dim = d;
    whole.dtype = c->dtype;
    whole.flags = c->flags;
    whole.softcap = c->softcap;
    clflash_ring_desc rd = {.struct_size = sizeof rd};
    case_extras ex;
    int ok = extras_make(c, total, n, offs[R], &ex);
    extras_apply(c, &ex, &whole, &rd);
    double *ro = malloc(sizeof(double) * c->batch * c->heads_q * total * d);
    double *rl = malloc(sizeof(double) * c->batch * c->heads_q * total);
    ref_attention_ex(&whole, gq, gk, gv, &ex.x, ro, rl);

    rd.batch = c->batch;
    rd.heads_q = c->heads_q;
    rd.heads_kv = c->heads_kv;
    rd.head_dim = d;
    rd.dtype = c->dtype;
    rd.flags = c->flags;
    rd.softcap = c->softcap;
    rd.mapping = c->mapping;
    rd.seq_local = n;
    rd.seq_offset = offs[R];
    rd.seq_total = R % 2 ? total : 0; /* 0 and the true total mean the same */
    rd.q = shard_layout(c, c->heads_q, n);
    rd.k = rd.v = shard_layout(c, hkv, n);
    rd.o = shard_layout(c, c->heads_q, n);
    tensor tq = {0}, tk = {0}, tv = {0}, to = {0};
    ok = ok && make_tensor(&tq, c->dtype, &rd.q, c->batch, c->heads_q, n, d, gq, total, c, offs[R], 0) &&
             make_tensor(&tk, c->dtype, &rd.k, c->batch, hkv, n, d, gk, total, c, offs[R], 0) &&
             make_tensor(&tv, c->dtype, &rd.v, c->batch, hkv, n, d, gv, total, c, offs[R], 0) &&
             make_tensor(&to, c->dtype, &rd.o, c->batch, c->heads_q, n, d, NULL, total, c, offs[R], 1);
    paged pg = {0};
    tensor pk = {0}, pv = {0};
    if (ok && page_size && (!odd_only || R % 2)) { /* K and V from pools instead */
        rd.k = rd.v = shard_layout(c, hkv, page_size);
        ok = paged_make(&pg, c->batch, n, page_size) &&
             make_pool(&pk, c->dtype, &rd.k, &pg, c->batch, hkv, n, d, gk, total, c, offs[R]) &&
             make_pool(&pv, c->dtype, &rd.v, &pg, c->batch, hkv, n, d, gv, total, c, offs[R]);
        rd.block_table = pg.table_buf;
        rd.page_size = pg.page_size;
        rd.pages_per_seq = pg.pages_per_seq;
        rd.num_pages = pg.num_pages;
    }
    const size_t nl = (size_t)c->batch * c->heads_q * n;
    float *lse = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++)
        lse[i] = NAN;
    cl_mem lbuf = NULL;
    if (ok && c->with_lse) {
        cl_int err;
        lbuf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nl * sizeof(float),
                              lse, &err);
        ok = err == CL_SUCCESS;
    }
    int fail = 0;
    char msg[600] = "";
    if (!ok) {
        snprintf(msg, sizeof msg, "setting up the buffers failed");
        fail = 1;
    }
    /* every rank calls, even one whose setup failed (its NULL buffers make the call fail collectively) */
    clflash_ring_stats stats;
    memset(&stats, 0, sizeof stats);
    const int counted = c->key_lengths && page_size == 0;
    clflash_ring_stats_attach(counted ? &stats : NULL);
    const clflash_status st = clflash_ring_forward(ctx, case_comm, &rd, tq.buf, rd.block_table ? pk.buf : tk.buf,
                                                   rd.block_table ? pv.buf : tv.buf, to.buf, lbuf);
    clflash_ring_stats_attach(NULL);
    if (!fail && st != CLFLASH_SUCCESS) {
        snprintf(msg, sizeof msg, "clflash_ring_forward: %s (%s)", clflash_ring_status_string(st),
                 clflash_ring_last_error_detail());
        fail = 1;
    }
    if (counted)
        check_skipped(c, &stats, st, "clflash_ring_forward", &fail, msg, sizeof msg);
    if (!fail) {
        clEnqueueReadBuffer(clflash_context_queue(ctx), to.buf, CL_TRUE, 0, to.bytes, to.host, 0, NULL, NULL);
        if (lbuf)
            clEnqueueReadBuffer(clflash_context_queue(ctx), lbuf, CL_TRUE, 0, nl * sizeof(float), lse, 0, NULL, NULL);
        const ref_strides os = ref_resolve_layout(&rd.o, c->heads_q, n, d);
        const ref_tol to_ = tol_o(c->dtype), tl = ref_tol_lse(c->dtype, REF_PATH_FLASH);
        double worst = 0.0;
        size_t bad = 0;
        unsigned char *written = calloc(to.elems, 1);
        for (uint32_t b = 0; b < c->batch; b++)
            for (uint32_t h = 0; h < c->heads_q; h++)
                for (uint32_t i = 0; i < n; i++) {
                    const uint64_t p = position(c, i, offs[R]);
                    const uint64_t row = ((uint64_t)b * c->heads_q + h) * total + p;
                    for (uint32_t x = 0; x < d; x++) {
                        const uint64_t at = ref_index(&os, b, h, i, x);
                        written[at] = 1;
                        const double got = ref_load(c->dtype, to.host, at), want = ro[row * d + x];
                        if (fabs(got - want) > worst || isnan(got))
                            worst = isnan(got) ? INFINITY : fabs(got - want);
                        if (!ref_close(got, want, to_) && bad++ == 0)
                            snprintf(msg, sizeof msg, "O[b%u h%u row %u (position %llu) c%u] = %.7g, reference %.7g",
                                     b, h, i, (unsigned long long)p, x, got, want);
                    }
                    if (c->with_lse) {
                        const double got = lse[((uint64_t)b * c->heads_q + h) * n + i], want = rl[row];
                        if (!ref_close(got, want, tl) && bad++ == 0)
                            snprintf(msg, sizeof msg, "lse[b%u h%u row %u (position %llu)] = %.9g, reference %.9g", b,
                                     h, i, (unsigned long long)p, got, want);
                    }
                }
        for (size_t i = 0; i < to.elems; i++) /* O's gaps keep the sentinel */
            if (!written[i]) {
                const int kept = c->dtype == CLFLASH_F32 ? ((uint32_t *)to.host)[i] == 0xc6f5ab9au
                                                         : ((uint16_t *)to.host)[i] == 0xf7a9u;
                if (!kept && bad++ == 0)
                    snprintf(msg, sizeof msg, "O's gap element %zu was written", i);
            }
        free(written);
        if (bad) {
            fail = 1;
            char tail[96];
            snprintf(tail, sizeof tail, "; %zu bad values, largest |error| of O %.3g", bad, worst);
            strncat(msg, tail, sizeof msg - strlen(msg) - 1);
        }
    }
    if (fail)
        printf("  rank %d of %d: FAIL %s: %s\n", R, P, c->name, msg);
    fflush(stdout);
    free_tensor(&tq);
    free_tensor(&tk);
    free_tensor(&tv);
    free_tensor(&to);
    free_tensor(&pk);
    free_tensor(&pv);
    paged_free(&pg);
    if (lbuf)
        clReleaseMemObject(lbuf);
    extras_free(&ex);
    free(lse);
    free(gq);
    free(gk);
    free(gv);
    free(ro);
    free(rl);
    return fail;
}

static int run_case(const ring_case *c)
{
    return run_case_paged(c, 0, 0);
}

/* ---- the backward ------------------------------------------------------------------------------ */
/* Compares one gradient tensor of this rank (t, layout l, heads heads, n rows) with the dense fp64
 * reference of the whole sequence (ref, [batch][heads][total][d]): values within tb_tol (atol
 * scaled by the tensor's largest |value| when above 1, as tests/backward_harness.c does), gaps
 * keeping the sentinel. Returns the number of bad elements; the first is described in msg. */
static size_t check_grad(const ring_case *c, const char *name, const tensor *t, const clflash_layout *l,
                         uint32_t heads, uint32_t n, uint64_t offset, const double *ref, uint32_t total, char *msg,
                         size_t msg_len)
{
    const uint32_t d = c->head_dim;
    const uint64_t dense = (uint64_t)c->batch * heads * total * d;
    double mx = 0.0;
    for (uint64_t i = 0; i < dense; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    ref_tol tol = tb_tol(c->dtype);
    tol.atol *= mx > 1.0 ? mx : 1.0;
    const ref_strides st = ref_resolve_layout(l, heads, n, d);
    unsigned char *written = calloc(t->elems, 1);
    size_t bad = 0;
    for (uint32_t b = 0; b < c->batch; b++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < n; i++) {
                const uint64_t p = position(c, i, offset);
                for (uint32_t x = 0; x < d; x++) {
                    const uint64_t at = ref_index(&st, b, h, i, x);
                    written[at] = 1;
                    const double got = ref_load(c->dtype, t->host, at),
                                 want = ref[(((uint64_t)b * heads + h) * total + p) * d + x];
                    if (!ref_close(got, want, tol) && bad++ == 0)
                        snprintf(msg, msg_len, "%s[b%u h%u row %u (position %llu) c%u] = %.7g, reference %.7g", name, b,
                                 h, i, (unsigned long long)p, x, got, want);
                }
            }
    for (size_t i = 0; i < t->elems; i++)
        if (!written[i]) {
            const int kept = c->dtype == CLFLASH_F32 ? ((uint32_t *)t->host)[i] == 0xc6f5ab9au
                                                     : ((uint16_t *)t->host)[i] == 0xf7a9u;
            if (!kept && bad++ == 0)
                snprintf(msg, msg_len, "%s's gap element %zu was written", name, i);
        }
    free(written);
    return bad;
}

/* Compares this rank's dBias (got, in e->bias_layout over its n rows against every key) with the
 * fp64 reference of the whole sequence (ref, at the positions of the dense bias layout of whole,
 * broadcast dimensions summed): values within tb_tol (atol scaled as check_grad does), exactly 0
 * where the reference has no term (seen 0: hidden pairs, -inf biases, key chunks a query chunk
 * never meets), gaps of the layout keeping the sentinel. Returns the number of bad elements. */
static size_t check_dbias(const ring_case *c, const case_extras *e, const float *got, uint32_t n, uint64_t offset,
                          const clflash_attention_desc *whole, const double *ref, const unsigned char *seen, char *msg,
                          size_t msg_len)
{
    const uint32_t total = whole->seq_q;
    const ref_strides gs = ref_resolve_bias_layout(whole);
    const ref_strides ls = bias_strides(&e->bias_layout, c->heads_q, n, total, e->bias_broadcast);
    const uint64_t ref_n = tb_bias_extent(whole);
    double mx = 0.0;
    for (uint64_t i = 0; i < ref_n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    ref_tol tol = tb_tol(c->dtype);
    tol.atol *= mx > 1.0 ? mx : 1.0;
    unsigned char *written = calloc(e->bias_n, 1);
    size_t bad = 0;
    for (uint32_t b = 0; b < c->batch; b++)
        for (uint32_t h = 0; h < c->heads_q; h++)
            for (uint32_t i = 0; i < n; i++) {
                const uint64_t p = position(c, i, offset);
                for (uint32_t j = 0; j < total; j++) {
                    const uint64_t at = ref_index(&ls, b, h, i, j), want_at = ref_index(&gs, b, h, (uint32_t)p, j);
                    written[at] = 1;
                    const double g = got[at], want = ref[want_at];
                    if ((!ref_close(g, want, tol) || (!seen[want_at] && g != 0.0)) && bad++ == 0)
                        snprintf(msg, msg_len, "dBias[b%u h%u row %u (position %llu) key %u] = %.7g, reference %.7g%s",
                                 b, h, i, (unsigned long long)p, j, g, want, seen[want_at] ? "" : " (no term)");
                }
            }
    for (uint64_t i = 0; i < e->bias_n; i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], 4);
        if (!written[i] && bits != 0xc6f5ab9au && bad++ == 0)
            snprintf(msg, msg_len, "dBias's gap element %llu was written", (unsigned long long)i);
    }
    free(written);
    return bad;
}

/* Runs the forward, then clflash_ring_backward twice: every rank compares its dq, dk, dv (and with
 * c->dbias its dBias) with the fp64 reference backward of the whole sequence, and the two runs must
 * give the same bits. */
static int run_backward_case(const ring_case *c)
{
    uint32_t rows[64] = {0};
    uint64_t offs[64] = {0};
    shard_sizes(c, rows, offs);
    const uint32_t total = c->mapping == CLFLASH_RING_ZIGZAG ? 2 * (uint32_t)P * c->total : c->total;
    const uint32_t hkv = c->heads_kv ? c->heads_kv : c->heads_q, d = c->head_dim, n = rows[R];
    const uint64_t nq_all = (uint64_t)c->batch * c->heads_q * total * d, nk_all = (uint64_t)c->batch * hkv * total * d;
    float *gq = inputs(nq_all, c->dtype, 21), *gk = inputs(nk_all, c->dtype, 22), *gv = inputs(nk_all, c->dtype, 23);
    float *gdo = inputs(nq_all, c->dtype, 24);
    clflash_attention_desc whole = {.struct_size = sizeof whole};
    whole.batch = c->batch;
    whole.heads_q = c->heads_q;
    whole.heads_kv = c->heads_kv;
    whole.seq_q = whole.seq_k = total;
    whole.head_dim = d;
    whole.dtype = c->dtype;
    whole.flags = c->flags;
    whole.softcap = c->softcap;
    clflash_ring_desc rd = {.struct_size = sizeof rd};
    case_extras ex;
    int ok = extras_make(c, total, n, offs[R], &ex);
    extras_apply(c, &ex, &whole, &rd);
    double *rdq = malloc(sizeof(double) * nq_all), *rdk = malloc(sizeof(double) * nk_all),
           *rdv = malloc(sizeof(double) * nk_all), *rdb = NULL;
    unsigned char *rdb_seen = NULL;
    if (c->dbias) {
        rdb = malloc(sizeof(double) * tb_bias_extent(&whole));
        rdb_seen = malloc(tb_bias_extent(&whole));
    }
    ref_attention_backward_ex(&whole, gq, gk, gv, gdo, &ex.x, rdq, rdk, rdv, rdb, rdb_seen, NULL);

    rd.batch = c->batch;
    rd.heads_q = c->heads_q;
    rd.heads_kv = c->heads_kv;
    rd.head_dim = d;
    rd.dtype = c->dtype;
    rd.flags = c->flags;
    rd.softcap = c->softcap;
    rd.mapping = c->mapping;
    rd.seq_local = n;
    rd.seq_offset = offs[R];
    rd.q = shard_layout(c, c->heads_q, n);
    rd.k = rd.v = shard_layout(c, hkv, n);
    rd.o = shard_layout(c, c->heads_q, n);
    tensor tq = {0}, tk = {0}, tv = {0}, to = {0}, tdo = {0}, tdq[2] = {{0}}, tdk[2] = {{0}}, tdv[2] = {{0}};
    ok = ok && make_tensor(&tq, c->dtype, &rd.q, c->batch, c->heads_q, n, d, gq, total, c, offs[R], 0) &&
             make_tensor(&tk, c->dtype, &rd.k, c->batch, hkv, n, d, gk, total, c, offs[R], 0) &&
             make_tensor(&tv, c->dtype, &rd.v, c->batch, hkv, n, d, gv, total, c, offs[R], 0) &&
             make_tensor(&to, c->dtype, &rd.o, c->batch, c->heads_q, n, d, NULL, total, c, offs[R], 1) &&
             make_tensor(&tdo, c->dtype, &rd.o, c->batch, c->heads_q, n, d, gdo, total, c, offs[R], 0);
    for (int run = 0; run < 2; run++)
        ok = ok && make_tensor(&tdq[run], c->dtype, &rd.q, c->batch, c->heads_q, n, d, NULL, total, c, offs[R], 1) &&
             make_tensor(&tdk[run], c->dtype, &rd.k, c->batch, hkv, n, d, NULL, total, c, offs[R], 1) &&
             make_tensor(&tdv[run], c->dtype, &rd.v, c->batch, hkv, n, d, NULL, total, c, offs[R], 1);
    const size_t nl = (size_t)c->batch * c->heads_q * n;
    cl_mem lbuf = NULL, dbias_buf[2] = {NULL, NULL};
    float *dbias[2] = {NULL, NULL};
    if (ok) {
        cl_int err;
        lbuf = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, nl * sizeof(float), NULL, &err);
        ok = err == CL_SUCCESS;
    }
    for (int run = 0; run < 2 && ok && c->dbias; run++) { /* dBias pre-filled with the sentinel */
        dbias[run] = malloc(ex.bias_n * sizeof(float));
        ok = dbias[run] != NULL;
        for (uint64_t i = 0; ok && i < ex.bias_n; i++)
            memcpy(&dbias[run][i], &(uint32_t){0xc6f5ab9au}, 4);
        cl_int err = CL_SUCCESS;
        if (ok)
            dbias_buf[run] = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                            ex.bias_n * sizeof(float), dbias[run], &err);
        ok = ok && err == CL_SUCCESS;
    }
    int fail = 0;
    char msg[600] = "";
    if (!ok) {
        snprintf(msg, sizeof msg, "setting up the buffers failed");
        fail = 1;
    }
    clflash_status st = clflash_ring_forward(ctx, case_comm, &rd, tq.buf, tk.buf, tv.buf, to.buf, lbuf);
    if (!fail && st != CLFLASH_SUCCESS) {
        snprintf(msg, sizeof msg, "clflash_ring_forward: %s (%s)", clflash_ring_status_string(st),
                 clflash_ring_last_error_detail());
        fail = 1;
    }
    for (int run = 0; run < 2; run++) {
        rd.bias_grad = dbias_buf[run];
        clflash_ring_stats stats; /* the first run counts its calls (check_skipped) */
        memset(&stats, 0, sizeof stats);
        const int counted = c->key_lengths && run == 0;
        clflash_ring_stats_attach(counted ? &stats : NULL);
        st = clflash_ring_backward(ctx, case_comm, &rd, tq.buf, tk.buf, tv.buf, to.buf, tdo.buf, lbuf,
                                   tdq[run].buf, tdk[run].buf, tdv[run].buf);
        clflash_ring_stats_attach(NULL);
        if (!fail && st != CLFLASH_SUCCESS) {
            snprintf(msg, sizeof msg, "clflash_ring_backward (run %d): %s (%s)", run + 1,
                     clflash_ring_status_string(st), clflash_ring_last_error_detail());
            fail = 1;
        }
        if (counted)
            check_skipped(c, &stats, st, "clflash_ring_backward", &fail, msg, sizeof msg);
        if (!fail) {
            const cl_command_queue cq = clflash_context_queue(ctx);
            clEnqueueReadBuffer(cq, tdq[run].buf, CL_TRUE, 0, tdq[run].bytes, tdq[run].host, 0, NULL, NULL);
            clEnqueueReadBuffer(cq, tdk[run].buf, CL_TRUE, 0, tdk[run].bytes, tdk[run].host, 0, NULL, NULL);
            clEnqueueReadBuffer(cq, tdv[run].buf, CL_TRUE, 0, tdv[run].bytes, tdv[run].host, 0, NULL, NULL);
            if (dbias_buf[run])
                clEnqueueReadBuffer(cq, dbias_buf[run], CL_TRUE, 0, ex.bias_n * sizeof(float), dbias[run], 0, NULL,
                                    NULL);
        }
    }
    if (!fail) {
        size_t bad = check_grad(c, "dQ", &tdq[0], &rd.q, c->heads_q, n, offs[R], rdq, total, msg, sizeof msg);
        if (!bad)
            bad = check_grad(c, "dK", &tdk[0], &rd.k, hkv, n, offs[R], rdk, total, msg, sizeof msg);
        if (!bad)
            bad = check_grad(c, "dV", &tdv[0], &rd.v, hkv, n, offs[R], rdv, total, msg, sizeof msg);
        if (!bad && c->dbias)
            bad = check_dbias(c, &ex, dbias[0], n, offs[R], &whole, rdb, rdb_seen, msg, sizeof msg);
        if (bad) {
            fail = 1;
            char tail[64];
            snprintf(tail, sizeof tail, "; %zu bad values", bad);
            strncat(msg, tail, sizeof msg - strlen(msg) - 1);
        } else if (memcmp(tdq[0].host, tdq[1].host, tdq[0].bytes) || memcmp(tdk[0].host, tdk[1].host, tdk[0].bytes) ||
                   memcmp(tdv[0].host, tdv[1].host, tdv[0].bytes) ||
                   (c->dbias && memcmp(dbias[0], dbias[1], ex.bias_n * sizeof(float)))) {
            fail = 1;
            snprintf(msg, sizeof msg, "two runs gave different bits");
        }
    }
    if (fail)
        printf("  rank %d of %d: FAIL backward %s: %s\n", R, P, c->name, msg);
    fflush(stdout);
    tensor *all[] = {&tq, &tk, &tv, &to, &tdo, &tdq[0], &tdq[1], &tdk[0], &tdk[1], &tdv[0], &tdv[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free_tensor(all[i]);
    if (lbuf)
        clReleaseMemObject(lbuf);
    for (int run = 0; run < 2; run++) {
        if (dbias_buf[run])
            clReleaseMemObject(dbias_buf[run]);
        free(dbias[run]);
    }
    extras_free(&ex);
    free(gq);
    free(gk);
    free(gv);
    free(gdo);
    free(rdq);
    free(rdk);
    free(rdv);
    free(rdb);
    free(rdb_seen);
    return fail;
}

/* ---- collective checks ------------------------------------------------------------------------ */
typedef enum {
    BAD_HEADS,
    BAD_HEAD_DIM,
    BAD_STRUCT_SIZE,
    BAD_GAP,
    BAD_ZIGZAG_TOTAL,
    BAD_DTYPE,
    BAD_HEADS_KV,
    BAD_SOFTCAP,
    BAD_WINDOW,      /* every rank a window, one rank's right width different */
    BAD_SLOPES,      /* every rank but one passes ALiBi slopes */
    BAD_KEY_LENGTHS, /* one rank alone passes key lengths */
    BAD_ALIGN,       /* one rank sets CLFLASH_ALIGN_TO_KEY_LENGTH (with key lengths on every rank) */
    BAD_TRANSPORT,   /* one rank's CLFLASH_RING_TRANSPORT is not a known value */
    BAD_TRANSPORT_MIX, /* one rank's CLFLASH_RING_TRANSPORT is mpi, the others' shared */
    BAD_PIN,         /* one rank's CLFLASH_RING_PIN is not a known value */
    BAD_BIAS,         /* every rank but one passes a bias */
    BAD_BIAS_BCAST,   /* every rank a bias, one rank's broadcast over heads */
    BAD_BIAS_SMALL,   /* every rank a bias, one rank's a float short of its layout */
    BAD_BIAS_OUTPUT,  /* one rank's bias is its o (forward) or dq (backward) */
    BAD_PAGED,        /* one rank pages its K/V shard (valid in the forward; the backward refuses it) */
    BAD_PAGE_ENTRY,   /* one rank's block table names a page past its pools */
    /* backward only (the forward ignores bias_grad): */
    BAD_BIAS_GRAD,         /* every rank a bias, every rank but one a bias_grad */
    BAD_BIAS_GRAD_ALIAS,   /* every rank a bias and a bias_grad, one rank's bias_grad is its dk */
    BAD_BIAS_GRAD_SMALL,   /* every rank a bias and a bias_grad, one rank's bias_grad a float short */
    BAD_BIAS_GRAD_NO_BIAS, /* no bias anywhere, one rank passes a bias_grad */
    /* packed sequences (cu_seqlens {0, 5, seq_total} on every rank but where said): */
    BAD_NUM_SEQS,          /* one rank's num_seqs 3 ({0, 5, 9, seq_total}) */
    BAD_CU_VALUES,         /* one rank's {0, 6, seq_total}, valid alone */
    BAD_CU_DECREASING,     /* one rank's {0, seq_total, 5} */
    BAD_CU_LAST,           /* every rank's {0, 5, seq_total - 1} */
    BAD_CU_KEY_LENGTHS     /* every rank's with key lengths */
} bad_kind;

/* The environment variables a collective check sets on some ranks for one call. */
enum { ENV_TRANSPORT, ENV_PIN, ENV_COUNT };
static const char *const env_names[ENV_COUNT] = {"CLFLASH_RING_TRANSPORT", "CLFLASH_RING_PIN"};

/* Sets env_names[which] for one call (value NULL: unset), or puts back what the test was started
 * with (restore). */
static void ring_env(int which, const char *value, int restore)
{
    static int saved[ENV_COUNT];
    static char *start[ENV_COUNT];
    if (!saved[which]) {
        const char *v = getenv(env_names[which]);
        start[which] = v ? strdup(v) : NULL;
        saved[which] = 1;
    }
    if (restore)
        value = start[which];
    if (value)
        setenv(env_names[which], value, 1);
    else
        unsetenv(env_names[which]);
}

/* Rank `who` (or every rank) gets a descriptor that breaks a rule; every rank must return `want`,
 * and no rank's O or lse may be written. */
/* One rank's descriptor differs (kind) from the others': every rank must return want, and no output
 * buffer may be written, through clflash_ring_forward or (backward) clflash_ring_backward. */
static int run_invalid(const char *name, bad_kind kind, int who, clflash_status want, int backward)
{
    const uint32_t n = 12, d = 16, hq = 4;
    clflash_ring_desc rd = {.struct_size = sizeof rd};
    rd.batch = 1;
    rd.heads_q = hq;
    rd.heads_kv = 2;
    rd.head_dim = d;
    rd.dtype = CLFLASH_F32;
    rd.flags = CLFLASH_CAUSAL;
    rd.seq_local = n;
    rd.seq_offset = (uint64_t)R * n;
    if (R == who) {
        switch (kind) {
        case BAD_HEADS: rd.heads_q = hq - 2; break; /* 2: still valid alone (heads_kv divides it) */
        case BAD_HEAD_DIM: rd.head_dim = d - 1; break;
        case BAD_STRUCT_SIZE: rd.struct_size = 3; break;
        case BAD_GAP: rd.seq_offset += 1; break;
        case BAD_DTYPE: rd.dtype = CLFLASH_F16; break;
        case BAD_HEADS_KV: rd.heads_kv = 1; break;
        case BAD_SOFTCAP: rd.softcap = 3.0f; break; /* valid alone; the others have none */
        case BAD_WINDOW: rd.window_right = 1; break;
        case BAD_ALIGN: rd.flags |= CLFLASH_ALIGN_TO_KEY_LENGTH; break;
        case BAD_TRANSPORT: ring_env(ENV_TRANSPORT, "ring", 0); break;
        case BAD_PIN: ring_env(ENV_PIN, "pinned", 0); break;
        case BAD_BIAS_BCAST: rd.bias_broadcast = CLFLASH_BROADCAST_HEADS; break; /* valid alone */
        case BAD_ZIGZAG_TOTAL: case BAD_SLOPES: case BAD_KEY_LENGTHS: case BAD_TRANSPORT_MIX: case BAD_BIAS:
        case BAD_BIAS_SMALL: case BAD_BIAS_OUTPUT: case BAD_PAGED: case BAD_PAGE_ENTRY: case BAD_BIAS_GRAD:
        case BAD_BIAS_GRAD_ALIAS: case BAD_BIAS_GRAD_SMALL: case BAD_BIAS_GRAD_NO_BIAS: case BAD_NUM_SEQS:
        case BAD_CU_VALUES: case BAD_CU_DECREASING: case BAD_CU_LAST: case BAD_CU_KEY_LENGTHS: break;
        }
    }
    if (kind == BAD_TRANSPORT_MIX)
        ring_env(ENV_TRANSPORT, R == who ? "mpi" : "shared", 0);
    if (kind == BAD_WINDOW) {
        rd.flags |= CLFLASH_WINDOW;
        rd.window_left = 4;
    }
    if (kind == BAD_ZIGZAG_TOTAL) { /* 2P chunks of 6 tokens, and one token more on rank `who` */
        rd.mapping = CLFLASH_RING_ZIGZAG;
        rd.seq_offset = 0;
        if (R == who)
            rd.seq_local += 1;
    }
    /* buffers large enough for the valid shape, so that only the disagreement is wrong */
    const size_t elems = (size_t)hq * (n + 1) * d, lse_n = (size_t)hq * (n + 1);
    float *sent = malloc(elems * sizeof(float)), *back = malloc(elems * sizeof(float));
    for (size_t i = 0; i < elems; i++)
        sent[i] = (float)i * 0.001f;
    cl_int err;
    cl_mem q = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * 4, sent, &err);
    cl_mem k = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * 4, sent, &err);
    cl_mem v = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * 4, sent, &err);
    cl_mem o = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * 4, sent, &err);
    cl_mem l = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, lse_n * 4, sent, &err);
    /* slopes and key lengths, valid in themselves (sent's first values, 0 and 0.001 ...) */
    cl_mem extra = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, hq * 4, sent, &err);
    if ((kind == BAD_SLOPES && R != who) || kind == BAD_WINDOW)
        rd.alibi_slopes = extra;
    if ((kind == BAD_KEY_LENGTHS && R == who) || kind == BAD_ALIGN)
        rd.key_lengths = extra;
    /* a bias of this rank's rows against every key: [1][hq][n][n * P] floats (one short on `who`
     * with BAD_BIAS_SMALL) */
    const size_t bias_n = (size_t)hq * n * n * (size_t)P - (kind == BAD_BIAS_SMALL && R == who);
    float *zeros = calloc(bias_n, sizeof(float));
    const int grad_kind = kind >= BAD_BIAS_GRAD && kind <= BAD_BIAS_GRAD_NO_BIAS,
              with_bias = (kind >= BAD_BIAS && kind <= BAD_BIAS_OUTPUT) || (grad_kind && kind != BAD_BIAS_GRAD_NO_BIAS);
    cl_mem bias = NULL;
    if (with_bias && zeros)
        bias = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bias_n * 4, zeros,
                              &err);
    if (with_bias && !(kind == BAD_BIAS && R == who))
        rd.bias = bias;
    /* a bias_grad of the same size (one float short on `who` with BAD_BIAS_GRAD_SMALL), holding 7s
     * that must stay */
    const size_t dbias_n = (size_t)hq * n * n * (size_t)P - (kind == BAD_BIAS_GRAD_SMALL && R == who);
    float *sevens = malloc(dbias_n * sizeof(float));
    for (size_t i = 0; sevens && i < dbias_n; i++)
        sevens[i] = 7.0f;
    cl_mem dbias = NULL;
    if (grad_kind && sevens)
        dbias = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, dbias_n * 4, sevens,
                               &err);
    if (grad_kind && !(kind == BAD_BIAS_GRAD && R == who) && !(kind == BAD_BIAS_GRAD_NO_BIAS && R != who))
        rd.bias_grad = dbias;
    /* 3 pages of 4 rows make the shard of 12; k and v hold 3 such pages; BAD_PAGE_ENTRY's last
     * entry is page 3, one past them */
    const int32_t pages[3] = {2, 0, kind == BAD_PAGE_ENTRY ? 3 : 1};
    cl_mem table = NULL;
    if ((kind == BAD_PAGED || kind == BAD_PAGE_ENTRY) && R == who) {
        table = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof pages,
                               (void *)pages, &err);
        rd.block_table = table;
        rd.page_size = 4;
        rd.pages_per_seq = 3;
        rd.num_pages = 3;
    }
    if (kind == BAD_BIAS_OUTPUT && R == who && !backward)
        rd.bias = o;
    cl_mem cu = NULL;
    if (kind >= BAD_NUM_SEQS) {
        const int32_t total = (int32_t)(n * (uint32_t)P);
        int32_t vals[4] = {0, 5, total, 0};
        rd.num_seqs = 2;
        if (kind == BAD_NUM_SEQS && R == who) {
            vals[2] = 9;
            vals[3] = total;
            rd.num_seqs = 3;
        }
        if (kind == BAD_CU_VALUES && R == who)
            vals[1] = 6;
        if (kind == BAD_CU_DECREASING && R == who) {
            vals[1] = total;
            vals[2] = 5;
        }
        if (kind == BAD_CU_LAST)
            vals[2] = total - 1;
        if (kind == BAD_CU_KEY_LENGTHS)
            rd.key_lengths = extra;
        cu = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof vals, vals, &err);
        rd.cu_seqlens = cu;
    }
    cl_mem grads[4] = {NULL, NULL, NULL, NULL}; /* d_o, dq, dk, dv */
    clflash_status st;
    if (backward) {
        for (int i = 0; i < 4; i++)
            grads[i] = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * 4, sent,
                                      &err);
        if (kind == BAD_BIAS_OUTPUT && R == who)
            rd.bias = grads[1];
        if (kind == BAD_BIAS_GRAD_ALIAS && R == who)
            rd.bias_grad = grads[2];
        st = clflash_ring_backward(ctx, MPI_COMM_WORLD, &rd, q, k, v, o, grads[0], l, grads[1], grads[2], grads[3]);
    } else {
        st = clflash_ring_forward(ctx, MPI_COMM_WORLD, &rd, q, k, v, o, l);
    }
    ring_env(ENV_TRANSPORT, NULL, 1);
    ring_env(ENV_PIN, NULL, 1);
    int fail = 0;
    char msg[600] = "";
    if (st != want) {
        fail = 1;
        snprintf(msg, sizeof msg, "returned %s (%s), expected %s", clflash_ring_status_string(st),
                 clflash_ring_last_error_detail(), clflash_ring_status_string(want));
    }
    int all[64];
    int mine = st;
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < P; r++)
        if (all[r] != mine && !fail) {
            fail = 1;
            snprintf(msg, sizeof msg, "rank %d returned %d, this rank %d", r, all[r], mine);
        }
    clEnqueueReadBuffer(clflash_context_queue(ctx), o, CL_TRUE, 0, elems * 4, back, 0, NULL, NULL);
    if (!fail && memcmp(back, sent, elems * 4) != 0) {
        fail = 1;
        snprintf(msg, sizeof msg, "o was written");
    }
    clEnqueueReadBuffer(clflash_context_queue(ctx), l, CL_TRUE, 0, lse_n * 4, back, 0, NULL, NULL);
    if (!fail && memcmp(back, sent, lse_n * 4) != 0) {
        fail = 1;
        snprintf(msg, sizeof msg, "lse was written");
    }
    for (int i = 1; i < 4 && backward; i++) {
        clEnqueueReadBuffer(clflash_context_queue(ctx), grads[i], CL_TRUE, 0, elems * 4, back, 0, NULL, NULL);
        if (!fail && memcmp(back, sent, elems * 4) != 0) {
            fail = 1;
            snprintf(msg, sizeof msg, "%s was written", i == 1 ? "dq" : i == 2 ? "dk" : "dv");
        }
    }
    if (dbias) {
        float *got = malloc(dbias_n * sizeof(float));
        clEnqueueReadBuffer(clflash_context_queue(ctx), dbias, CL_TRUE, 0, dbias_n * 4, got, 0, NULL, NULL);
        if (!fail && (!got || memcmp(got, sevens, dbias_n * 4) != 0)) {
            fail = 1;
            snprintf(msg, sizeof msg, "bias_grad was written");
        }
        free(got);
        clReleaseMemObject(dbias);
    }
    free(sevens);
    if (fail)
        printf("  rank %d of %d: FAIL %s: %s\n", R, P, name, msg);
    else if (R == 0)
        printf("  (%s: every rank returned %s: %s)\n", name, clflash_ring_status_string(st),
               clflash_ring_last_error_detail());
    fflush(stdout);
    clReleaseMemObject(q);
    clReleaseMemObject(k);
    clReleaseMemObject(v);
    clReleaseMemObject(o);
    clReleaseMemObject(l);
    clReleaseMemObject(extra);
    if (bias)
        clReleaseMemObject(bias);
    if (table)
        clReleaseMemObject(table);
    if (cu)
        clReleaseMemObject(cu);
    free(zeros);
    for (int i = 0; i < 4; i++)
        if (grads[i] != NULL)
            clReleaseMemObject(grads[i]);
    free(sent);
    free(back);
    return fail;
}

/* After a rank's first failure, its context's build log (if a program failed to build), so that a
 * build failure on a CI machine can be read from the test's output. */
static void print_build_log_once(void)
{
    static int printed;
    const char *log = clflash_context_build_log(ctx);
    if (printed || !log || !log[0])
        return;
    printed = 1;
    fprintf(stderr, "  rank %d of %d: build log:\n%.4000s\n", R, P, log);
}

static int report(const char *name, int fail)
{
    if (fail)
        print_build_log_once();
    int failed = 0;
    MPI_Allreduce(&fail, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (R == 0)
        printf("%s %s (%d of %d ranks failed)\n", failed ? "FAIL" : "ok  ", name, failed, P);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    return failed != 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    if (P > 64) {
        if (R == 0)
            fprintf(stderr, "test_ring: at most 64 ranks\n");
        MPI_Finalize();
        return 1;
    }
    clflash_status st = clflash_context_create_default(NULL, &ctx);
    int bad = st != CLFLASH_SUCCESS, any = 0;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (bad) {
        fprintf(stderr, "rank %d: clflash_context_create_default: %s\n", R, clflash_status_string(st));
        MPI_Finalize();
        return 1;
    }
    static const ring_case cases[] = {
        {"contiguous even, f32, not causal, MHA, d 32", 1, 2, 0, 32, CLFLASH_F32, 0, CLFLASH_RING_CONTIGUOUS, 160,
         {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven (one rank of 1 token), causal, f32, GQA 4/2, d 33, lse", 2, 4, 2, 33, CLFLASH_F32,
         CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 150, {5, -1, 3, 7}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven (rank 0 of 1 token), shards in reverse rank order, causal, f16, MQA 3/1, d 33, "
         "token-major layouts with gaps, lse", 1, 3, 1, 33, CLFLASH_F16, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 131,
         {-1, 4, 2, 3}, 1, 1, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven, not causal, f16, GQA 4/2, d 16, no lse", 2, 4, 2, 16, CLFLASH_F16, 0,
         CLFLASH_RING_CONTIGUOUS, 101, {5, -1, 3, 7}, 0, 0, 0, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal, f32, GQA 4/2, d 16, lse", 2, 4, 2, 16, CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 24,
         {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal, f16, MHA, d 33, token-major layouts with gaps, lse", 1, 2, 2, 33, CLFLASH_F16,
         CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 17, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, not causal, f32, MQA 3/1, d 33", 1, 3, 1, 33, CLFLASH_F32, 0, CLFLASH_RING_ZIGZAG, 10,
         {0, 0, 0, 0}, 0, 0, 0, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven, causal, bf16, GQA 4/2, d 16, lse", 1, 4, 2, 16, CLFLASH_BF16, CLFLASH_CAUSAL,
         CLFLASH_RING_CONTIGUOUS, 120, {2, 3, -1, 1}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal, f32, GQA 4/2, d 33, softcap 0.5 (most scores capped), lse", 1, 4, 2, 33, CLFLASH_F32,
         CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 11, {0, 0, 0, 0}, 0, 0, 1, 0.5f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven (one rank of 1 token), not causal, f16, MHA, d 16, softcap 2, lse", 1, 2, 0, 16,
         CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 97, {5, -1, 3, 7}, 0, 1, 1, 2.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal window 5/0 (narrower than a chunk), f32, GQA 4/2, d 16, lse", 1, 4, 2, 16, CLFLASH_F32,
         CLFLASH_CAUSAL | CLFLASH_WINDOW, CLFLASH_RING_ZIGZAG, 12, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 5, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven (one rank of 1 token), window 7/3 not causal, f16, MHA, d 33, lse", 1, 2, 0, 33,
         CLFLASH_F16, CLFLASH_WINDOW, CLFLASH_RING_CONTIGUOUS, 90, {5, -1, 3, 7}, 0, 0, 1, 0.0f, 7, 3, 0, 0, RB_NONE,
         0},
        {"zigzag, ALiBi not causal, f32, MHA, d 16, lse", 1, 2, 0, 16, CLFLASH_F32, 0, CLFLASH_RING_ZIGZAG, 8,
         {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 1, 0, RB_NONE, 0},
        {"contiguous uneven, ALiBi causal, bf16, GQA 4/2, d 32, lse", 1, 4, 2, 32, CLFLASH_BF16, CLFLASH_CAUSAL,
         CLFLASH_RING_CONTIGUOUS, 101, {2, 3, -1, 1}, 0, 0, 1, 0.0f, 0, 0, 1, 0, RB_NONE, 0},
        {"contiguous uneven, shards in reverse rank order, key lengths (ragged, 0, past the end, negative), "
         "causal, f32, MQA 3/1, d 16, lse", 4, 3, 1, 16, CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 70,
         {5, -1, 3, 7}, 1, 0, 1, 0.0f, 0, 0, 0, 1, RB_NONE, 0},
        {"zigzag, key lengths (ragged, 0, past the end), not causal, f16, MHA, d 16, lse", 3, 2, 0, 16, CLFLASH_F16,
         0, CLFLASH_RING_ZIGZAG, 9, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 1, RB_NONE, 0},
        {"contiguous uneven, key lengths ending at 2/5 of the sequence (the later key chunks left out), causal, f32, "
         "GQA 4/2, d 16, lse", 3, 4, 2, 16, CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 70, {2, 3, -1, 1}, 0,
         0, 1, 0.0f, 0, 0, 0, KL_SHORT, RB_NONE, 0},
        {"zigzag, key lengths ending at 2/5 of the sequence, not causal, ALiBi, f16, MHA, d 16, token-major layouts "
         "with gaps, lse", 2, 2, 0, 16, CLFLASH_F16, 0, CLFLASH_RING_ZIGZAG, 9, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 1,
         KL_SHORT, RB_NONE, 0},
        {"zigzag, key lengths 0 and negative (no row has a key), causal, f32, GQA 4/2, d 16, lse", 2, 4, 2, 16,
         CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, KL_EMPTY, RB_NONE,
         0},
        {"zigzag, causal window 9/0, ALiBi, key lengths and softcap 2, f32, GQA 4/2, d 33, token-major layouts "
         "with gaps, lse", 3, 4, 2, 33, CLFLASH_F32, CLFLASH_CAUSAL | CLFLASH_WINDOW, CLFLASH_RING_ZIGZAG, 10,
         {0, 0, 0, 0}, 0, 1, 1, 2.0f, 9, 0, 1, 1, RB_NONE, 0},
        {"zigzag, bias (strided with gaps, some -inf), causal, f32, GQA 4/2, d 16, lse", 2, 4, 2, 16, CLFLASH_F32,
         CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 10, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_STRIDED, 0},
        {"contiguous uneven (one rank of 1 token), shards in reverse rank order, bias broadcast over batch and "
         "heads, not causal, f16, GQA 4/2, d 33, lse", 2, 4, 2, 33, CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 83,
         {5, -1, 3, 7}, 1, 0, 1, 0.0f, 0, 0, 0, 0, RB_BCAST_BH, 0},
        {"contiguous uneven, bias with -inf entries and fully masked rows, causal, f32, MHA, d 32, lse", 1, 2, 0, 32,
         CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 75, {2, 3, -1, 1}, 0, 0, 1, 0.0f, 0, 0, 0, 0,
         RB_MASKED, 0},
        {"zigzag, bias broadcast over rows, not causal, f16, MQA 3/1, d 16, token-major layouts with gaps, lse", 2, 3,
         1, 16, CLFLASH_F16, 0, CLFLASH_RING_ZIGZAG, 9, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 0, 0, RB_BCAST_ROWS, 0},
        {"zigzag, causal window 5/0, softcap 2, ALiBi and a bias (strided with gaps, some -inf), f32, GQA 4/2, d 33, "
         "token-major layouts with gaps, lse", 1, 4, 2, 33, CLFLASH_F32, CLFLASH_CAUSAL | CLFLASH_WINDOW,
         CLFLASH_RING_ZIGZAG, 12, {0, 0, 0, 0}, 0, 1, 1, 2.0f, 5, 0, 1, 0, RB_STRIDED, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        any |= report(cases[i].name, run_case(&cases[i]));
    static const paged_case paged_cases[] = {
        /* paged own shards (block_table): pages in a shuffled order, a pool larger than needed, the
         * last page partly used, on every rank or on the odd ranks only */
        {{"paged (page 3, every rank), contiguous uneven (one rank of 1 token), causal, f32, GQA 4/2, d 33, lse", 2,
         4, 2, 33, CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 61, {5, -1, 3, 7}, 0, 0, 1, 0.0f, 0, 0, 0,
         0, RB_NONE, 0}, 3, 0},
        {{"paged (page 16, odd ranks), zigzag, causal, f16, MHA, d 33, token-major pools with gaps, lse", 2, 2, 2, 33,
         CLFLASH_F16, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 10, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
         16, 1},
        {{"paged (page 1, every rank), contiguous uneven, shards in reverse rank order, not causal, f16, GQA 4/2, "
         "d 16", 2, 4, 2, 16, CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 37, {2, 3, -1, 1}, 1, 0, 0, 0.0f, 0, 0, 0, 0,
         RB_NONE, 0}, 1, 0},
        {{"paged (page 16, every rank), zigzag, not causal, f32, MQA 3/1, d 16, lse", 1, 3, 1, 16, CLFLASH_F32, 0,
         CLFLASH_RING_ZIGZAG, 12, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0}, 16, 0},
        {{"paged (page 3, every rank), zigzag, causal window 5/0 and key lengths, f32, GQA 4/2, d 16, token-major "
         "pools with gaps, lse", 3, 4, 2, 16, CLFLASH_F32, CLFLASH_CAUSAL | CLFLASH_WINDOW, CLFLASH_RING_ZIGZAG, 8,
         {0, 0, 0, 0}, 0, 1, 1, 0.0f, 5, 0, 0, 1, RB_NONE, 0}, 3, 0},
        {{"paged (page 3, odd ranks), contiguous uneven, key lengths and ALiBi, causal, f16, GQA 4/2, d 32, lse", 3, 4,
         2, 32, CLFLASH_F16, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 70, {5, -1, 3, 7}, 0, 0, 1, 0.0f, 0, 0, 1, 1,
         RB_NONE, 0}, 3, 1},
    };
    for (size_t i = 0; i < sizeof paged_cases / sizeof paged_cases[0]; i++)
        any |= report(paged_cases[i].c.name,
                      run_case_paged(&paged_cases[i].c, paged_cases[i].page_size, paged_cases[i].odd_only));
    static const ring_case backward_cases[] = {
        {"contiguous uneven (one rank of 1 token), causal, f32, GQA 4/2, d 33", 2, 4, 2, 33, CLFLASH_F32,
         CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 90, {5, -1, 3, 7}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven, shards in reverse rank order, not causal, f16, MQA 3/1, d 16, token-major layouts "
         "with gaps", 1, 3, 1, 16, CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 77, {-1, 4, 2, 3}, 1, 1, 1, 0.0f, 0, 0, 0,
         0, RB_NONE, 0},
        {"zigzag, causal, f32, GQA 4/2, d 16", 1, 4, 2, 16, CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 12,
         {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal, f16, GQA 4/2, d 33, token-major layouts with gaps", 1, 4, 2, 33, CLFLASH_F16,
         CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 9, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, not causal, f32, MHA, d 32", 2, 2, 0, 32, CLFLASH_F32, 0, CLFLASH_RING_ZIGZAG, 8, {0, 0, 0, 0}, 0,
         0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous even, causal, bf16, GQA 4/2, d 16", 1, 4, 2, 16, CLFLASH_BF16, CLFLASH_CAUSAL,
         CLFLASH_RING_CONTIGUOUS, 64, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal, f32, GQA 4/2, d 33, softcap 0.5", 1, 4, 2, 33, CLFLASH_F32, CLFLASH_CAUSAL,
         CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 0, 1, 0.5f, 0, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven (one rank of 1 token), not causal, f16, GQA 4/2, d 16, softcap 2", 1, 4, 2, 16,
         CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 71, {5, -1, 3, 7}, 0, 1, 1, 2.0f, 0, 0, 0, 0, RB_NONE, 0},
        {"zigzag, causal window 5/0 (narrower than a chunk), f32, GQA 4/2, d 16", 1, 4, 2, 16, CLFLASH_F32,
         CLFLASH_CAUSAL | CLFLASH_WINDOW, CLFLASH_RING_ZIGZAG, 8, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 5, 0, 0, 0, RB_NONE, 0},
        {"contiguous uneven (one rank of 1 token), window 6/2 not causal, ALiBi, f16, MHA, d 16", 1, 2, 0, 16,
         CLFLASH_F16, CLFLASH_WINDOW, CLFLASH_RING_CONTIGUOUS, 71, {5, -1, 3, 7}, 0, 0, 1, 0.0f, 6, 2, 1, 0, RB_NONE,
         0},
        {"zigzag, key lengths (ragged, 0, past the end), causal, f32, MQA 3/1, d 16", 3, 3, 1, 16, CLFLASH_F32,
         CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 1, RB_NONE, 0},
        {"contiguous uneven, key lengths ending at 2/5 of the sequence (the later key chunks left out), causal, f32, "
         "GQA 4/2, d 16", 3, 4, 2, 16, CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 66, {2, 3, -1, 1}, 0, 0,
         1, 0.0f, 0, 0, 0, KL_SHORT, RB_NONE, 0},
        {"zigzag, key lengths ending at 2/5 of the sequence and a bias (strided with gaps, some -inf), not causal, "
         "f32, MQA 3/1, d 16", 2, 3, 1, 16, CLFLASH_F32, 0, CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0,
         0, KL_SHORT, RB_STRIDED, 1},
        {"zigzag, key lengths 0 and negative (no row has a key), not causal, f16, MHA, d 16", 2, 2, 0, 16,
         CLFLASH_F16, 0, CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, KL_EMPTY, RB_NONE, 0},
        {"contiguous uneven, shards in reverse rank order, window 10/4 not causal, ALiBi, key lengths and softcap "
         "2, f32, GQA 4/2, d 33, token-major layouts with gaps", 4, 4, 2, 33, CLFLASH_F32, CLFLASH_WINDOW,
         CLFLASH_RING_CONTIGUOUS, 66, {2, 3, -1, 1}, 1, 1, 1, 2.0f, 10, 4, 1, 1, RB_NONE, 0},
        {"zigzag, bias (strided with gaps, some -inf), causal, f32, GQA 4/2, d 16", 1, 4, 2, 16, CLFLASH_F32,
         CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 8, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_STRIDED, 1},
        {"contiguous uneven (one rank of 1 token), shards in reverse rank order, bias broadcast over batch and "
         "heads, not causal, f16, GQA 4/2, d 16", 2, 4, 2, 16, CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 71,
         {5, -1, 3, 7}, 1, 0, 1, 0.0f, 0, 0, 0, 0, RB_BCAST_BH, 1},
        {"contiguous uneven, bias with -inf entries and fully masked rows, causal, f32, MHA, d 33", 1, 2, 0, 33,
         CLFLASH_F32, CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 66, {2, 3, -1, 1}, 0, 0, 1, 0.0f, 0, 0, 0, 0,
         RB_MASKED, 1},
        {"zigzag, window 6/2 not causal, softcap 2 and a bias (strided with gaps, some -inf), f32, MQA 3/1, d 16, "
         "token-major layouts with gaps", 1, 3, 1, 16, CLFLASH_F32, CLFLASH_WINDOW, CLFLASH_RING_ZIGZAG, 7,
         {0, 0, 0, 0}, 0, 1, 1, 2.0f, 6, 2, 0, 0, RB_STRIDED, 1},
        {"zigzag, bias broadcast over rows (summed over the ranks), causal, f16, GQA 4/2, d 16, token-major layouts "
         "with gaps", 2, 4, 2, 16, CLFLASH_F16, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 6, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0,
         0, 0, 0, RB_BCAST_ROWS, 1},
        {"contiguous uneven (one rank of 1 token), shards in reverse rank order, window 5/3 not causal, bias "
         "broadcast over rows (summed over the ranks), f32, MHA, d 16", 1, 2, 0, 16, CLFLASH_F32, CLFLASH_WINDOW,
         CLFLASH_RING_CONTIGUOUS, 53, {5, -1, 3, 7}, 1, 0, 1, 0.0f, 5, 3, 0, 0, RB_BCAST_ROWS, 1},
    };
    for (size_t i = 0; i < sizeof backward_cases / sizeof backward_cases[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "backward: %s (%sand determinism)", backward_cases[i].name,
                 backward_cases[i].dbias ? "dBias " : "");
        any |= report(name, run_backward_case(&backward_cases[i]));
    }
    /* packed sequences (cu_seqlens), forward and backward against the reference of the whole
     * packed sequence (a block-diagonal mask): sequences across shard and chunk boundaries, longer
     * than a shard, of 1 token and of 0 */
    static const int32_t seqs_a[] = {7, 1, 0, 30, 0, 2, 1, -1}, seqs_b[] = {3, 0, 1, 12, 9, 1, -1},
                         seqs_c[] = {10, 1, 0, 5, 17, -1}, seqs_d[] = {0, 1, 40, 3, 0, -1};
    static const struct {
        ring_case c;
        const int32_t *seqs;
        int backward;
    } packed_cases[] = {
        {{"packed sequences, contiguous uneven, causal, f32, GQA 4/2, d 16, lse", 1, 4, 2, 16, CLFLASH_F32,
          CLFLASH_CAUSAL, CLFLASH_RING_CONTIGUOUS, 61, {2, 3, -1, 1}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
         seqs_a, 0},
        {{"packed sequences, zigzag, causal, f16, MHA, d 32, token-major layouts with gaps, lse", 1, 2, 0, 32,
          CLFLASH_F16, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
         seqs_b, 0},
        {{"packed sequences, zigzag, window 4/2 not causal, ALiBi, f32, GQA 4/2, d 16, lse", 1, 4, 2, 16, CLFLASH_F32,
          CLFLASH_WINDOW, CLFLASH_RING_ZIGZAG, 8, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 4, 2, 1, 0, RB_NONE, 0},
         seqs_c, 0},
        {{"packed sequences, contiguous uneven, shards in reverse rank order, not causal, softcap 2, f16, MQA 3/1, "
          "d 16, lse", 1, 3, 1, 16, CLFLASH_F16, 0, CLFLASH_RING_CONTIGUOUS, 57, {5, -1, 3, 7}, 1, 0, 1, 2.0f, 0, 0, 0,
          0, RB_NONE, 0},
         seqs_d, 0},
        {{"packed sequences, contiguous uneven, causal, f32, GQA 4/2, d 16", 1, 4, 2, 16, CLFLASH_F32, CLFLASH_CAUSAL,
          CLFLASH_RING_CONTIGUOUS, 61, {2, 3, -1, 1}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
         seqs_a, 1},
        {{"packed sequences, zigzag, causal, f16, GQA 4/2, d 16, token-major layouts with gaps", 1, 4, 2, 16,
          CLFLASH_F16, CLFLASH_CAUSAL, CLFLASH_RING_ZIGZAG, 7, {0, 0, 0, 0}, 0, 1, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
         seqs_b, 1},
        {{"packed sequences, contiguous uneven, shards in reverse rank order, window 6/2 not causal, ALiBi, f32, MHA, "
          "d 16", 1, 2, 0, 16, CLFLASH_F32, CLFLASH_WINDOW, CLFLASH_RING_CONTIGUOUS, 57, {5, -1, 3, 7}, 1, 0, 1, 0.0f,
          6, 2, 1, 0, RB_NONE, 0},
         seqs_d, 1},
        {{"packed sequences, zigzag, not causal, f32, MQA 3/1, d 16", 1, 3, 1, 16, CLFLASH_F32, 0, CLFLASH_RING_ZIGZAG,
          8, {0, 0, 0, 0}, 0, 0, 1, 0.0f, 0, 0, 0, 0, RB_NONE, 0},
         seqs_c, 1},
    };
    for (size_t i = 0; i < sizeof packed_cases / sizeof packed_cases[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "%s%s", packed_cases[i].backward ? "backward (and determinism): " : "",
                 packed_cases[i].c.name);
        case_seqs = packed_cases[i].seqs;
        any |= report(name, packed_cases[i].backward ? run_backward_case(&packed_cases[i].c)
                                                     : run_case(&packed_cases[i].c));
        case_seqs = NULL;
    }
    /* the same cases on communicators of their own, each freed after its calls: the window kept
     * with the first goes with MPI_Comm_free, the second gets a new one (of a new size) */
    for (int round = 0; round < 2; round++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &case_comm);
        const ring_case *fc = &cases[round ? 2 : 0], *bc = &backward_cases[round ? 0 : 2];
        char name[240];
        snprintf(name, sizeof name, "on a communicator of its own (%d): %s", round + 1, fc->name);
        any |= report(name, run_case(fc));
        snprintf(name, sizeof name, "on a communicator of its own (%d): backward: %s", round + 1, bc->name);
        any |= report(name, run_backward_case(bc));
        MPI_Comm_free(&case_comm);
        case_comm = MPI_COMM_WORLD;
    }
    const int last = P - 1;
    for (int backward = 0; backward < 2; backward++) {
        const char *const pre = backward ? "backward: " : "";
        char what[120];
#define INVALID(label, tag, kind, who, want)                                                                      \
    (snprintf(what, sizeof what, "%s%s", pre, label), report(what, run_invalid(tag, kind, who, want, backward)))
        any |= INVALID("ranks disagree on heads_q", "heads_q", BAD_HEADS, last, CLFLASH_ERROR_INVALID_SHAPE);
        any |= INVALID("ranks disagree on head_dim", "head_dim", BAD_HEAD_DIM, 0, CLFLASH_ERROR_INVALID_SHAPE);
        any |= INVALID("ranks disagree on heads_kv", "heads_kv", BAD_HEADS_KV, last, CLFLASH_ERROR_INVALID_SHAPE);
        any |= INVALID("ranks disagree on dtype", "dtype", BAD_DTYPE, last, CLFLASH_ERROR_INVALID_DTYPE);
        any |= INVALID("ranks disagree on softcap", "softcap", BAD_SOFTCAP, last, CLFLASH_ERROR_INVALID_SCALE);
        any |= INVALID("one rank's bad struct_size", "struct_size", BAD_STRUCT_SIZE, last,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("contiguous shards with a gap", "gap", BAD_GAP, last, CLFLASH_ERROR_INVALID_SHAPE);
        any |= INVALID("zigzag shard of the wrong size", "zigzag", BAD_ZIGZAG_TOTAL, 0, CLFLASH_ERROR_INVALID_SHAPE);
        any |= INVALID("ranks disagree on window_right", "window", BAD_WINDOW, last, CLFLASH_ERROR_INVALID_FLAGS);
        any |= INVALID("one rank without ALiBi slopes", "alibi_slopes", BAD_SLOPES, 0, CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("one rank alone with key lengths", "key_lengths", BAD_KEY_LENGTHS, last,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("one rank with CLFLASH_ALIGN_TO_KEY_LENGTH", "align", BAD_ALIGN, 0, CLFLASH_ERROR_UNSUPPORTED);
        any |= INVALID("one rank's CLFLASH_RING_TRANSPORT unknown", "transport", BAD_TRANSPORT, last,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("ranks disagree on CLFLASH_RING_TRANSPORT", "transport mix", BAD_TRANSPORT_MIX, 0,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("one rank's CLFLASH_RING_PIN unknown", "pin", BAD_PIN, last,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("one rank without a bias", "bias", BAD_BIAS, 0, CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("ranks disagree on bias_broadcast", "bias_broadcast", BAD_BIAS_BCAST, last,
                       CLFLASH_ERROR_INVALID_FLAGS);
        any |= INVALID("one rank's bias a float too small", "bias size", BAD_BIAS_SMALL, last,
                       CLFLASH_ERROR_BUFFER_TOO_SMALL);
        any |= INVALID("one rank's bias is an output buffer", "bias output", BAD_BIAS_OUTPUT, 0,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        /* the forward refuses the entry past the pools before anything is enqueued; the backward
         * refuses any block table first */
        any |= INVALID("one rank's block table names a page past its pools", "block table entry", BAD_PAGE_ENTRY,
                       last, backward ? CLFLASH_ERROR_UNSUPPORTED : CLFLASH_ERROR_INVALID_ARGUMENT);
        if (backward) {
            any |= INVALID("one rank pages its K/V shard", "paged", BAD_PAGED, 0, CLFLASH_ERROR_UNSUPPORTED);
            any |= INVALID("one rank without a bias_grad", "bias_grad", BAD_BIAS_GRAD, last,
                           CLFLASH_ERROR_INVALID_ARGUMENT);
            any |= INVALID("one rank's bias_grad is its dk", "bias_grad alias", BAD_BIAS_GRAD_ALIAS, 0,
                           CLFLASH_ERROR_INVALID_ARGUMENT);
            any |= INVALID("one rank's bias_grad a float too small", "bias_grad size", BAD_BIAS_GRAD_SMALL, last,
                           CLFLASH_ERROR_BUFFER_TOO_SMALL);
            any |= INVALID("one rank's bias_grad without a bias", "bias_grad without bias", BAD_BIAS_GRAD_NO_BIAS, 0,
                           CLFLASH_ERROR_INVALID_ARGUMENT);
        }
        any |= INVALID("ranks disagree on num_seqs", "num_seqs", BAD_NUM_SEQS, last, CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("ranks disagree on cu_seqlens", "cu_seqlens values", BAD_CU_VALUES, last,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("one rank's cu_seqlens decreases", "cu_seqlens decreasing", BAD_CU_DECREASING, 0,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("cu_seqlens ends before seq_total", "cu_seqlens last", BAD_CU_LAST, 0,
                       CLFLASH_ERROR_INVALID_ARGUMENT);
        any |= INVALID("cu_seqlens with key lengths", "cu_seqlens key_lengths", BAD_CU_KEY_LENGTHS, 0,
                       CLFLASH_ERROR_UNSUPPORTED);
#undef INVALID
    }
    clflash_context_free(ctx);
    MPI_Finalize();
    if (R == 0)
        printf("%s\n", any ? "test_ring: FAILED" : "test_ring: all cases passed");
    return any ? 1 : 0;
}
