/*
 * ring_geometry.c - what a ring call checks before anything is enqueued, and the geometry every
 * rank agrees on: each rank's own checks (arguments, ranges, buffers), then one MPI_Allgather of
 * every rank's shape fields and local status, from which every rank computes the same verdict and
 * the same map of shards (chunks of global positions per rank); with a bias, one more agreement on
 * its size, which depends on seq_total.
 *
 * Why collective: a rank that returned early on its own error would leave the others blocked in
 * the ring. Every decision here is a function of the gathered data only, so all ranks return the
 * same status.
 */
#include "ring_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The descriptor of 0.5's first clflash_mpi.h: the smallest struct_size taken. */
#define RING_DESC_FIRST_SIZE sizeof(clflash_ring_desc)

clflash_layout ring_resolve_layout(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t head_dim)
{
    clflash_layout r = *l;
    if (r.seq_stride == 0)
        r.seq_stride = head_dim;
    if (r.head_stride == 0)
        r.head_stride = (uint64_t)seq * r.seq_stride;
    if (r.batch_stride == 0)
        r.batch_stride = (uint64_t)heads * r.head_stride;
    return r;
}

clflash_layout ring_layout_rows(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t head_dim,
                                uint32_t row)
{
    clflash_layout r = ring_resolve_layout(l, heads, seq, head_dim);
    r.offset += (uint64_t)row * r.seq_stride;
    return r;
}

/* a * b + c, or UINT64_MAX when it overflows (or an input already did). */
static uint64_t mul_add(uint64_t a, uint64_t b, uint64_t c)
{
    if (a == UINT64_MAX || c == UINT64_MAX || (b != 0 && a > (UINT64_MAX - c) / b))
        return UINT64_MAX;
    return a * b + c;
}

/* Bytes a buffer needs for tensor l (resolved): its last element's end. (head_dim is the length of
 * the contiguous last dimension: seq_total for a bias.) */
static uint64_t extent_bytes(const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t seq,
                             uint64_t head_dim, size_t elem)
{
    uint64_t e = mul_add(batch - 1u, l->batch_stride, l->offset);
    e = mul_add(heads - 1u, l->head_stride, e);
    e = mul_add(seq - 1u, l->seq_stride, e);
    e = mul_add(1, head_dim, e);
    return mul_add(e, elem, 0);
}

clflash_layout ring_bias_layout(const clflash_ring_desc *d, uint64_t seq_total)
{
    clflash_layout r = d->bias_layout;
    if (r.seq_stride == 0)
        r.seq_stride = seq_total;
    if (r.head_stride == 0) /* an overflow leaves UINT64_MAX, which the extent then reports */
        r.head_stride = mul_add(d->seq_local, r.seq_stride, 0);
    if (r.batch_stride == 0)
        r.batch_stride = mul_add(d->heads_q, r.head_stride, 0);
    if (d->bias_broadcast & CLFLASH_BROADCAST_BATCH)
        r.batch_stride = 0;
    if (d->bias_broadcast & CLFLASH_BROADCAST_HEADS)
        r.head_stride = 0;
    if (d->bias_broadcast & CLFLASH_BROADCAST_ROWS)
        r.seq_stride = 0;
    return r;
}

clflash_status ring_check_buffer(clflash_context *ctx, cl_mem m, uint64_t need, const char *name)
{
    cl_context mc = NULL;
    cl_mem_object_type type = 0;
    size_t size = 0;
    if (clGetMemObjectInfo(m, CL_MEM_TYPE, sizeof type, &type, NULL) != CL_SUCCESS || type != CL_MEM_OBJECT_BUFFER ||
        clGetMemObjectInfo(m, CL_MEM_CONTEXT, sizeof mc, &mc, NULL) != CL_SUCCESS || mc != clflash_context_cl(ctx) ||
        clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is not a buffer of the context", name);
    if (need == UINT64_MAX)
        return ring_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the layout of %s addresses more than 2^64 bytes", name);
    if ((uint64_t)size < need)
        return ring_fail(CLFLASH_ERROR_BUFFER_TOO_SMALL, "%s has %zu bytes, its layout needs %llu", name, size,
                         (unsigned long long)need);
    return CLFLASH_SUCCESS;
}

clflash_status ring_check_tensor(clflash_context *ctx, cl_mem m, const clflash_layout *l, uint32_t batch,
                                 uint32_t heads, uint32_t rows, uint32_t head_dim, clflash_dtype t, const char *name)
{
    if (m == NULL)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s must not be NULL", name);
    const clflash_layout r = ring_resolve_layout(l, heads, rows, head_dim);
    return ring_check_buffer(ctx, m, extent_bytes(&r, batch, heads, rows, head_dim, clflash_dtype_size(t)), name);
}

clflash_status ring_check_local(clflash_context *ctx, const clflash_ring_desc *in, cl_mem q, cl_mem k, cl_mem v,
                                cl_mem o, cl_mem lse)
{
    if (ctx == NULL || in == NULL)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, ctx == NULL ? "ctx is NULL" : "the descriptor is NULL");
    clflash_status st = ring_check_struct_size(in, in->struct_size, RING_DESC_FIRST_SIZE, sizeof *in);
    if (st)
        return st;
    const clflash_ring_desc *d = in;
    if (q == NULL || k == NULL || v == NULL || o == NULL)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "q, k, v and o must not be NULL");
    if (d->batch == 0 || d->batch > CLFLASH_MAX_BATCH || d->heads_q == 0 || d->heads_q > CLFLASH_MAX_HEADS ||
        d->head_dim == 0 || d->seq_local == 0 || d->seq_local > CLFLASH_MAX_SEQ_Q)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "batch %u, heads_q %u, head_dim %u, seq_local %u: each must be "
                         "at least 1 and at most its limit", d->batch, d->heads_q, d->head_dim, d->seq_local);
    if (d->heads_kv != 0 && d->heads_q % d->heads_kv != 0)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "heads_kv %u does not divide heads_q %u", d->heads_kv, d->heads_q);
    if (d->head_dim > CLFLASH_MAX_HEAD_DIM)
        return ring_fail(CLFLASH_ERROR_HEAD_DIM_UNSUPPORTED, "head_dim %u is above %u", d->head_dim,
                         CLFLASH_MAX_HEAD_DIM);
    if (d->dtype != CLFLASH_F32 && d->dtype != CLFLASH_F16 && d->dtype != CLFLASH_BF16)
        return ring_fail(CLFLASH_ERROR_INVALID_DTYPE, "dtype %d: the ring takes F32, F16 or BF16", (int)d->dtype);
    if (!isfinite(d->scale))
        return ring_fail(CLFLASH_ERROR_INVALID_SCALE, "scale is not finite");
    const float softcap = d->softcap;
    if (!isfinite(softcap) || softcap < 0.0f)
        return ring_fail(CLFLASH_ERROR_INVALID_SCALE, "softcap must be finite and >= 0");
    if (d->flags & ~CLFLASH_KNOWN_FLAGS)
        return ring_fail(CLFLASH_ERROR_INVALID_FLAGS, "unknown bits in flags 0x%x", d->flags);
    if (d->flags & CLFLASH_ALIGN_TO_KEY_LENGTH)
        return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "the ring does not take CLFLASH_ALIGN_TO_KEY_LENGTH (flags 0x%x): "
                         "its queries are the whole sequence", d->flags);
    if (!(d->flags & CLFLASH_WINDOW) && (d->window_left || d->window_right))
        return ring_fail(CLFLASH_ERROR_INVALID_FLAGS, "window_left/window_right are set but flags lack CLFLASH_WINDOW");
    if (d->mapping != CLFLASH_RING_CONTIGUOUS && d->mapping != CLFLASH_RING_ZIGZAG)
        return ring_fail(CLFLASH_ERROR_INVALID_FLAGS, "unknown mapping %u", d->mapping);
    if (d->mapping == CLFLASH_RING_ZIGZAG && d->seq_offset != 0)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "seq_offset must be 0 with the zigzag mapping");
    if (o == q || o == k || o == v)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "o must not be the same buffer as q, k or v");
    if (lse && (lse == q || lse == k || lse == v || lse == o))
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse must be a buffer of its own");
    if ((st = ring_paged_check(d)))
        return st;
    const cl_mem extra[5] = {d->alibi_slopes, d->key_lengths, d->bias, d->block_table, d->cu_seqlens};
    static const char *const extra_name[5] = {"alibi_slopes", "key_lengths", "bias", "block_table", "cu_seqlens"};
    for (int i = 0; i < 5; i++)
        if (extra[i] && (extra[i] == o || extra[i] == lse))
            return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s must not be the same buffer as o or lse",
                             extra_name[i]);
    if (d->bias_broadcast & ~(uint32_t)(CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS | CLFLASH_BROADCAST_ROWS))
        return ring_fail(CLFLASH_ERROR_INVALID_FLAGS, "bias_broadcast 0x%x has unknown bits", d->bias_broadcast);
    if (d->bias == NULL && (d->bias_broadcast || d->bias_layout.offset || d->bias_layout.batch_stride ||
                            d->bias_layout.head_stride || d->bias_layout.seq_stride))
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_layout or bias_broadcast is set but bias is NULL");
    const uint32_t hkv = d->heads_kv ? d->heads_kv : d->heads_q;
    const size_t s = clflash_dtype_size(d->dtype);
    const struct {
        cl_mem m;
        const clflash_layout *l;
        uint32_t heads;
        const char *name;
    } t[4] = {{q, &d->q, d->heads_q, "q"}, {k, &d->k, hkv, "k"}, {v, &d->v, hkv, "v"}, {o, &d->o, d->heads_q, "o"}};
    for (int i = 0; i < 4; i++) {
        /* a paged K or V is a pool of num_pages pages of page_size rows */
        const int pool = d->block_table && (i == 1 || i == 2);
        const uint32_t outer = pool ? d->num_pages : d->batch, rows = pool ? d->page_size : d->seq_local;
        const clflash_layout r = ring_resolve_layout(t[i].l, t[i].heads, rows, d->head_dim);
        if ((st = ring_check_buffer(ctx, t[i].m, extent_bytes(&r, outer, t[i].heads, rows, d->head_dim, s), t[i].name)))
            return st;
    }
    if (d->block_table && (st = ring_check_buffer(ctx, d->block_table,
                                             (uint64_t)d->batch * d->pages_per_seq * sizeof(int32_t), "block_table")))
        return st;
    if (lse && (st = ring_check_buffer(ctx, lse, (uint64_t)d->batch * d->heads_q * d->seq_local * sizeof(float),
                                       "lse")))
        return st;
    if (d->alibi_slopes && (st = ring_check_buffer(ctx, d->alibi_slopes, (uint64_t)d->heads_q * sizeof(float),
                                              "alibi_slopes")))
        return st;
    if (d->key_lengths &&
        (st = ring_check_buffer(ctx, d->key_lengths, (uint64_t)d->batch * sizeof(int32_t), "key_lengths")))
        return st;
    /* the bias's size needs seq_total, which is known only once every rank's shard is: checked
     * after the agreement (check_bias_size) */
    if (d->bias && (st = ring_check_buffer(ctx, d->bias, 0, "bias")))
        return st;
    return ring_varlen_check(ctx, d);
}

/* The fields gathered from every rank, in this order. */
enum { F_STATUS, F_BATCH, F_HEADS_Q, F_HEADS_KV, F_HEAD_DIM, F_DTYPE, F_SCALE, F_FLAGS, F_MAPPING, F_SOFTCAP,
       F_WINDOW_LEFT, F_WINDOW_RIGHT, F_HAS_ALIBI, F_HAS_KEY_LENGTHS, F_HAS_BIAS, F_HAS_BIAS_GRAD,
       F_BIAS_BROADCAST, F_NUM_SEQS, /* the last field every rank must agree on */
       F_SEQ_TOTAL, F_SEQ_LOCAL, F_SEQ_OFFSET, F_COUNT };

static const struct {
    const char *name;
    clflash_status st;
} agreed[] = {
    [F_BATCH] = {"batch", CLFLASH_ERROR_INVALID_SHAPE},       [F_HEADS_Q] = {"heads_q", CLFLASH_ERROR_INVALID_SHAPE},
    [F_HEADS_KV] = {"heads_kv", CLFLASH_ERROR_INVALID_SHAPE}, [F_HEAD_DIM] = {"head_dim", CLFLASH_ERROR_INVALID_SHAPE},
    [F_DTYPE] = {"dtype", CLFLASH_ERROR_INVALID_DTYPE},       [F_SCALE] = {"scale (bits)", CLFLASH_ERROR_INVALID_SCALE},
    [F_FLAGS] = {"flags", CLFLASH_ERROR_INVALID_FLAGS},       [F_MAPPING] = {"mapping", CLFLASH_ERROR_INVALID_FLAGS},
    [F_SOFTCAP] = {"softcap (bits)", CLFLASH_ERROR_INVALID_SCALE},
    [F_WINDOW_LEFT] = {"window_left", CLFLASH_ERROR_INVALID_FLAGS},
    [F_WINDOW_RIGHT] = {"window_right", CLFLASH_ERROR_INVALID_FLAGS},
    [F_HAS_ALIBI] = {"alibi_slopes (whether given)", CLFLASH_ERROR_INVALID_ARGUMENT},
    [F_HAS_KEY_LENGTHS] = {"key_lengths (whether given)", CLFLASH_ERROR_INVALID_ARGUMENT},
    [F_HAS_BIAS] = {"bias (whether given)", CLFLASH_ERROR_INVALID_ARGUMENT},
    [F_HAS_BIAS_GRAD] = {"bias_grad (whether given)", CLFLASH_ERROR_INVALID_ARGUMENT},
    [F_BIAS_BROADCAST] = {"bias_broadcast", CLFLASH_ERROR_INVALID_FLAGS},
    [F_NUM_SEQS] = {"num_seqs (0: no cu_seqlens)", CLFLASH_ERROR_INVALID_ARGUMENT},
    [F_SEQ_TOTAL] = {"seq_total", CLFLASH_ERROR_INVALID_SHAPE},
};

/* Memory for a gather of n bytes: the caller's small buffer, else the heap. Every rank must take
 * part in the collective that follows, or the others block; a rank that cannot get the memory
 * (a few bytes per rank) therefore aborts the job with MPI_Abort, the one way out that no rank
 * waits on. */
static void *gather_memory(MPI_Comm comm, void *small, size_t small_bytes, size_t n)
{
    if (n <= small_bytes)
        return small;
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "clflash_mpi: no memory for a gather of %zu bytes; aborting the job\n", n);
        MPI_Abort(comm, 1);
    }
    return p;
}

clflash_status ring_agree_status(MPI_Comm comm, clflash_status mine, const char *phase)
{
    int size = 0, rank = 0, small[256];
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    int *all = gather_memory(comm, small, sizeof small, sizeof(int) * (size_t)size);
    int mine_int = mine;
    clflash_status st = CLFLASH_SUCCESS;
    if (MPI_Allgather(&mine_int, 1, MPI_INT, all, 1, MPI_INT, comm) != MPI_SUCCESS) {
        st = ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Allgather of the statuses (%s) failed", phase);
    } else {
        for (int r = 0; r < size && st == CLFLASH_SUCCESS; r++)
            if (all[r] != 0) {
                st = all[r];
                if (r == rank) {
                    char own[400];
                    snprintf(own, sizeof own, "%s", clflash_ring_last_error_detail());
                    ring_fail(st, "rank %d (%s): %s", r, phase, own);
                } else {
                    ring_fail(st, "rank %d failed (%s): %s", r, phase, clflash_ring_status_string(st));
                }
            }
    }
    if (all != small)
        free(all);
    return st;
}

static void shard_of(const uint64_t *f, const ring_geometry *g, int r, ring_shard *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->rows = (uint32_t)f[F_SEQ_LOCAL];
    if (g->mapping == CLFLASH_RING_CONTIGUOUS) {
        sh->nchunks = 1;
        sh->chunk[0] = (ring_chunk){f[F_SEQ_OFFSET], 0, sh->rows};
    } else {
        const uint32_t c = sh->rows / 2;
        sh->nchunks = 2;
        sh->chunk[0] = (ring_chunk){(uint64_t)r * c, 0, c};
        sh->chunk[1] = (ring_chunk){(uint64_t)(2 * g->size - 1 - r) * c, c, c};
    }
}

static int by_offset(const void *a, const void *b)
{
    const uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* The verdict from the gathered fields (all[r * F_COUNT + field]); the same on every rank. */
static clflash_status decide(const uint64_t *all, ring_geometry *g)
{
    const int P = g->size;
    if (P < 1)
        return ring_fail(CLFLASH_RING_ERROR_MPI, "the communicator has %d ranks", P);
    for (int r = 0; r < P; r++) {
        const uint64_t *f = all + (size_t)r * F_COUNT;
        if (f[F_STATUS] != 0) {
            const clflash_status st = (clflash_status)(int64_t)f[F_STATUS];
            if (r == g->rank) {
                char own[400];
                snprintf(own, sizeof own, "%s", clflash_ring_last_error_detail());
                return ring_fail(st, "rank %d: %s", r, own);
            }
            return ring_fail(st, "rank %d failed its own checks: %s", r, clflash_ring_status_string(st));
        }
    }
    for (int r = 1; r < P; r++)
        for (int i = F_BATCH; i <= F_NUM_SEQS; i++)
            if (all[(size_t)r * F_COUNT + i] != all[i])
                return ring_fail(agreed[i].st, "rank %d: %s is %llu, rank 0's is %llu", r, agreed[i].name,
                                 (unsigned long long)all[(size_t)r * F_COUNT + i], (unsigned long long)all[i]);
    g->batch = (uint32_t)all[F_BATCH];
    g->heads_q = (uint32_t)all[F_HEADS_Q];
    g->heads_kv = (uint32_t)all[F_HEADS_KV];
    g->head_dim = (uint32_t)all[F_HEAD_DIM];
    g->dtype = (clflash_dtype)all[F_DTYPE];
    uint32_t bits = (uint32_t)all[F_SCALE];
    memcpy(&g->scale, &bits, sizeof bits);
    g->flags = (uint32_t)all[F_FLAGS];
    g->mapping = (uint32_t)all[F_MAPPING];
    bits = (uint32_t)all[F_SOFTCAP];
    memcpy(&g->softcap, &bits, sizeof bits);
    g->window_left = (uint32_t)all[F_WINDOW_LEFT];
    g->window_right = (uint32_t)all[F_WINDOW_RIGHT];
    g->has_alibi = all[F_HAS_ALIBI] != 0;
    g->has_key_lengths = all[F_HAS_KEY_LENGTHS] != 0;
    g->has_bias = all[F_HAS_BIAS] != 0;
    g->has_bias_grad = all[F_HAS_BIAS_GRAD] != 0;
    g->bias_broadcast = (uint32_t)all[F_BIAS_BROADCAST];
    g->num_seqs = (uint32_t)all[F_NUM_SEQS];
    g->per_pair = (g->flags & CLFLASH_WINDOW) || g->has_alibi || g->has_key_lengths || g->has_bias;
    uint64_t sum = 0;
    g->max_rows = 0;
    for (int r = 0; r < P; r++) {
        const uint32_t rows = (uint32_t)all[(size_t)r * F_COUNT + F_SEQ_LOCAL];
        sum += rows; /* at most 2^31 ranks of 2^20 rows: no overflow */
        if (rows > g->max_rows)
            g->max_rows = rows;
    }
    for (int r = 0; r < P; r++) { /* 0 means the sum; any other value must be it */
        const uint64_t t = all[(size_t)r * F_COUNT + F_SEQ_TOTAL];
        if (t != 0 && t != sum)
            return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "rank %d: seq_total is %llu, the shards hold %llu tokens", r,
                             (unsigned long long)t, (unsigned long long)sum);
    }
    g->seq_total = sum;
    if (g->mapping == CLFLASH_RING_ZIGZAG) {
        const uint64_t c = sum / (2u * (uint64_t)P);
        if (sum % (2u * (uint64_t)P) != 0)
            return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "zigzag: %llu tokens are not a multiple of 2 * %d ranks",
                             (unsigned long long)sum, P);
        for (int r = 0; r < P; r++)
            if (all[(size_t)r * F_COUNT + F_SEQ_LOCAL] != 2 * c)
                return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "zigzag: rank %d holds %llu rows, not 2 * %llu", r,
                                 (unsigned long long)all[(size_t)r * F_COUNT + F_SEQ_LOCAL], (unsigned long long)c);
    } else {
        uint64_t *order = malloc(sizeof(uint64_t) * 3 * (size_t)P);
        if (order == NULL)
            return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no memory for the shard map");
        for (int r = 0; r < P; r++) {
            order[3 * r] = all[(size_t)r * F_COUNT + F_SEQ_OFFSET];
            order[3 * r + 1] = all[(size_t)r * F_COUNT + F_SEQ_LOCAL];
            order[3 * r + 2] = (uint64_t)r;
        }
        qsort(order, (size_t)P, 3 * sizeof(uint64_t), by_offset);
        uint64_t next = 0;
        for (int i = 0; i < P; i++) {
            if (order[3 * i] != next) {
                const uint64_t at = order[3 * i], who = order[3 * i + 2];
                free(order);
                return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "contiguous shards: rank %llu starts at position %llu "
                                 "where position %llu is expected (shards must cover the sequence exactly once)",
                                 (unsigned long long)who, (unsigned long long)at, (unsigned long long)next);
            }
            next += order[3 * i + 1];
        }
        free(order);
    }
    g->shards = calloc((size_t)P, sizeof *g->shards);
    if (g->shards == NULL)
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no memory for the shard map");
    for (int r = 0; r < P; r++)
        shard_of(all + (size_t)r * F_COUNT, g, r, &g->shards[r]);
    /* every pair must give calls (one causal call or none for both mappings without per_pair;
     * diagonal offsets in range with it), and every query chunk at least one call (its own
     * diagonal is always visible), so that its O is written. Packed sequences: ring_varlen_agree
     * checks their calls once every rank has the lengths */
    ring_call call[2];
    for (int a = 0; a < P && g->num_seqs == 0; a++)
        for (int c = 0; c < g->shards[a].nchunks; c++) {
            int calls = 0;
            for (int b = 0; b < P; b++) {
                const int n = ring_calls(g, &g->shards[a].chunk[c], &g->shards[b], call);
                if (n < 0)
                    return ring_fail(CLFLASH_ERROR_UNSUPPORTED, g->per_pair ? "rank %d's chunk %d against rank %d's "
                                     "shard: a diagonal_offset beyond CLFLASH_MAX_SEQ_K (the sequence is too long)"
                                     : "rank %d's chunk %d against rank %d's shard is not one causal call", a, c, b);
                calls += n;
            }
            if (calls == 0)
                return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "rank %d's chunk %d sees no key chunk", a, c);
        }
    return CLFLASH_SUCCESS;
}

uint64_t ring_bias_extent_bytes(const ring_geometry *g, uint32_t seq_local)
{
    return extent_bytes(&g->bias_layout, g->batch, g->heads_q, seq_local, g->seq_total, sizeof(float));
}

/* Whether no two elements the bias layout l addresses over [batch][heads][rows][keys] share an
 * address, counting each broadcast dimension (stride 0) once: the dimensions of more than one
 * element, innermost (smallest stride) first, must each step past everything the inner ones span. */
static int bias_disjoint(const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t rows, uint64_t keys)
{
    uint64_t count[3] = {batch, heads, rows}, stride[3] = {l->batch_stride, l->head_stride, l->seq_stride};
    for (int i = 0; i < 3; i++)
        if (stride[i] == 0)
            count[i] = 1;
    for (int i = 0; i < 3; i++) /* sort by stride, ascending */
        for (int j = i + 1; j < 3; j++)
            if (stride[j] < stride[i]) {
                const uint64_t s = stride[i], c = count[i];
                stride[i] = stride[j];
                count[i] = count[j];
                stride[j] = s;
                count[j] = c;
            }
    uint64_t span = keys; /* elements from the first to one past the last of the inner dimensions */
    for (int i = 0; i < 3; i++) {
        if (count[i] <= 1)
            continue;
        if (stride[i] < span)
            return 0;
        span = mul_add(count[i] - 1, stride[i], span);
    }
    return 1;
}

/* This rank's bias (and, with has_bias_grad, its bias_grad) against the bias layout over
 * [batch][heads_q][seq_local][seq_total] (its broadcast strides 0, as clflash counts a bias's
 * extent); ring_check_local (and the backward's own check) has seen that they are buffers of ctx. */
static clflash_status check_bias_size(const clflash_ring_desc *d, const ring_geometry *g)
{
    const uint64_t need = ring_bias_extent_bytes(g, d->seq_local);
    if (need == UINT64_MAX)
        return ring_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the layout of bias addresses more than 2^64 bytes");
    for (int i = 0; i < 1 + g->has_bias_grad; i++) {
        const cl_mem m = i ? d->bias_grad : d->bias;
        const char *name = i ? "bias_grad" : "bias";
        size_t size = 0;
        if (clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
            return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is not a buffer of the context", name);
        if ((uint64_t)size < need)
            return ring_fail(CLFLASH_ERROR_BUFFER_TOO_SMALL, "%s has %zu bytes, the bias layout over %u x %u x %u x "
                             "%llu needs %llu", name, size, d->batch, d->heads_q, d->seq_local,
                             (unsigned long long)g->seq_total, (unsigned long long)need);
    }
    if (g->has_bias_grad && !bias_disjoint(&g->bias_layout, d->batch, d->heads_q, d->seq_local, g->seq_total))
        return ring_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the bias layout makes elements of bias_grad overlap; as an "
                         "output it needs distinct elements (each one a sum over the broadcast dimensions)");
    return CLFLASH_SUCCESS;
}

clflash_status ring_geometry_agree(MPI_Comm comm, const clflash_ring_desc *d, clflash_status local, int backward,
                                   ring_geometry *g)
{
    memset(g, 0, sizeof *g);
    MPI_Comm_size(comm, &g->size);
    MPI_Comm_rank(comm, &g->rank);
    uint64_t mine[F_COUNT] = {0};
    mine[F_STATUS] = (uint64_t)(int64_t)local;
    if (local == CLFLASH_SUCCESS) {
        uint32_t bits;
        memcpy(&bits, &d->scale, sizeof bits);
        mine[F_BATCH] = d->batch;
        mine[F_HEADS_Q] = d->heads_q;
        mine[F_HEADS_KV] = d->heads_kv ? d->heads_kv : d->heads_q;
        mine[F_HEAD_DIM] = d->head_dim;
        mine[F_DTYPE] = (uint64_t)d->dtype;
        mine[F_SCALE] = bits;
        mine[F_FLAGS] = d->flags;
        mine[F_MAPPING] = d->mapping;
        const float softcap = d->softcap;
        memcpy(&bits, &softcap, sizeof bits);
        mine[F_SOFTCAP] = bits;
        mine[F_WINDOW_LEFT] = d->window_left;
        mine[F_WINDOW_RIGHT] = d->window_right;
        mine[F_HAS_ALIBI] = d->alibi_slopes != NULL;
        mine[F_HAS_KEY_LENGTHS] = d->key_lengths != NULL;
        mine[F_HAS_BIAS] = d->bias != NULL;
        mine[F_HAS_BIAS_GRAD] = backward && d->bias_grad != NULL; /* the forward ignores it */
        mine[F_BIAS_BROADCAST] = d->bias_broadcast;
        mine[F_NUM_SEQS] = d->cu_seqlens ? d->num_seqs : 0;
        mine[F_SEQ_TOTAL] = d->seq_total;
        mine[F_SEQ_LOCAL] = d->seq_local;
        mine[F_SEQ_OFFSET] = d->seq_offset;
    }
    uint64_t small[64 * F_COUNT];
    uint64_t *all = gather_memory(comm, small, sizeof small, sizeof(uint64_t) * F_COUNT * (size_t)g->size);
    clflash_status st;
    int some_bias = 0; /* from the gathered fields: the same on every rank */
    if (MPI_Allgather(mine, F_COUNT, MPI_UINT64_T, all, F_COUNT, MPI_UINT64_T, comm) != MPI_SUCCESS) {
        st = ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Allgather of the shapes failed");
    } else {
        for (int r = 0; r < g->size; r++)
            some_bias |= all[(size_t)r * F_COUNT + F_HAS_BIAS] != 0;
        st = decide(all, g);
    }
    if (st == CLFLASH_SUCCESS) { /* this rank's own buffers (whether each is given is agreed) */
        g->alibi_slopes = d->alibi_slopes;
        g->key_lengths = d->key_lengths;
        g->bias = d->bias;
        g->bias_grad = g->has_bias_grad ? d->bias_grad : NULL;
        if (g->has_bias)
            g->bias_layout = ring_bias_layout(d, g->seq_total);
    }
    /* the bias's size needs the agreed seq_total: a collective of its own, made by every rank
     * where some rank passes a bias, whatever decide gave this rank */
    if (some_bias && st == CLFLASH_SUCCESS) {
        st = ring_agree_status(comm, check_bias_size(d, g), "the bias's size");
    } else if (some_bias) { /* the same failure on every rank already: take part, keep its detail */
        char keep[400];
        snprintf(keep, sizeof keep, "%s", clflash_ring_last_error_detail());
        ring_agree_status(comm, st, "the bias's size");
        ring_fail(st, "%s", keep);
    }
    if (all != small)
        free(all);
    if (st)
        ring_geometry_free(g);
    return st;
}

void ring_geometry_free(ring_geometry *g)
{
    free(g->shards);
    g->shards = NULL;
    free(g->cu);
    g->cu = NULL;
}

clflash_status ring_mpi_ready(MPI_Comm comm)
{
    int init = 0, fini = 0;
    if (comm == MPI_COMM_NULL)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init || MPI_Finalized(&fini) != MPI_SUCCESS || fini)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "MPI is not initialised (or already finalised)");
    return CLFLASH_SUCCESS;
}

clflash_status ring_join(MPI_Comm comm, const clflash_ring_desc *d, clflash_status local, int backward,
                         MPI_Comm *ring_comm, ring_geometry *g)
{
    if (MPI_Comm_dup(comm, ring_comm) != MPI_SUCCESS)
        return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Comm_dup failed");
    const clflash_status st = ring_geometry_agree(*ring_comm, d, local, backward, g);
    if (st != CLFLASH_SUCCESS)
        MPI_Comm_free(ring_comm);
    return st;
}
