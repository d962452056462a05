/*
 * ring_varlen.c - packed sequences in the ring (clflash_ring_desc.cu_seqlens): the checks of the
 * packing fields, the one host read of the cumulative lengths with its collective agreement, the
 * calls of a (query chunk, key chunk) pair, and the small buffers that make each call a
 * clflash variable-length batch.
 *
 * Why each pair is one variable-length call over the WHOLE query chunk and key chunk: a call must
 * write every row of its query chunk's O and lse (the forward merges whole chunks) and, in the
 * backward, every row of its key chunk's dK/dV (they are summed over whole chunks). As entries of
 * a clflash variable-length batch, the sequences with tokens in either chunk cover both: a sequence
 * with queries but no keys here gets O = 0 and lse = -INFINITY (a part the merge ignores) and
 * dQ = 0, one with keys but no queries dK = dV = 0. Sequences are contiguous and disjoint, so two
 * different chunks share at most one sequence, and a chunk against itself has every sequence's
 * piece on both sides with the same positions: in either case one diagonal_offset places the
 * diagonal of every entry that has both queries and keys. A pair of different chunks that share
 * no sequence (or whose one shared sequence the causal or window rule hides) makes no call.
 *
 * Why the lengths are read on the host: they decide which calls exist, on every rank alike, so
 * they are compared across the ranks before anything is enqueued (as the block table of a paged
 * shard is checked before it is used).
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SEQS ((uint32_t)INT32_MAX - 1u) /* num_seqs + 1 values fit an MPI count */

clflash_status ring_varlen_check(clflash_context *ctx, const clflash_ring_desc *d)
{
    if (d->cu_seqlens == NULL) {
        if (d->num_seqs)
            return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "num_seqs is %u but cu_seqlens is NULL", d->num_seqs);
        return CLFLASH_SUCCESS;
    }
    if (d->num_seqs == 0 || d->num_seqs > MAX_SEQS)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "num_seqs %u with cu_seqlens: it must be 1 .. %u", d->num_seqs,
                         MAX_SEQS);
    if (d->batch != 1)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "batch %u with cu_seqlens: packed sequences are one batch "
                         "entry (batch 1)", d->batch);
    if (d->key_lengths || d->bias || d->block_table)
        return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "packed sequences (cu_seqlens) do not take %s",
                         d->key_lengths ? "key_lengths" : d->bias ? "a bias" : "a paged K/V shard (block_table)");
    return ring_check_buffer(ctx, d->cu_seqlens, ((uint64_t)d->num_seqs + 1) * sizeof(int32_t), "cu_seqlens");
}

clflash_status ring_varlen_read(clflash_context *ctx, const clflash_ring_desc *d, int32_t **cu)
{
    *cu = NULL;
    if (d->cu_seqlens == NULL)
        return CLFLASH_SUCCESS;
    const size_t n = (size_t)d->num_seqs + 1;
    int32_t *c = malloc(n * sizeof *c);
    if (c == NULL)
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for cu_seqlens (%zu int32s)", n);
    const cl_int err =
        clEnqueueReadBuffer(clflash_context_queue(ctx), d->cu_seqlens, CL_TRUE, 0, n * sizeof *c, c, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        free(c);
        return ring_fail(err, "reading cu_seqlens: %d", err);
    }
    clflash_status st = CLFLASH_SUCCESS;
    if (c[0] != 0)
        st = ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens[0] is %d, not 0", (int)c[0]);
    for (size_t i = 1; i < n && st == CLFLASH_SUCCESS; i++)
        if (c[i] < c[i - 1])
            st = ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens decreases at entry %zu (%d after %d)", i,
                           (int)c[i], (int)c[i - 1]);
    if (st != CLFLASH_SUCCESS) {
        free(c);
        return st;
    }
    *cu = c;
    return CLFLASH_SUCCESS;
}

/* The sequence that holds position p (cu[s] <= p < cu[s + 1]; p < seq_total): the last s with
 * cu[s] <= p, which skips the empty sequences that start at p. */
static uint32_t seq_at(const ring_geometry *g, uint64_t p)
{
    uint32_t lo = 0, hi = g->num_seqs; /* cu[lo] <= p < cu[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)g->cu[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Positions of run c inside sequence s, as a run (len 0 when they do not meet). */
static ring_chunk piece(const ring_geometry *g, uint32_t s, const ring_chunk *c)
{
    const uint64_t first = (uint64_t)g->cu[s] > c->pos ? (uint64_t)g->cu[s] : c->pos;
    const uint64_t end = (uint64_t)g->cu[s + 1] < c->pos + c->len ? (uint64_t)g->cu[s + 1] : c->pos + c->len;
    ring_chunk r = {first, (uint32_t)(first - c->pos) + c->row, 0};
    if (end > first)
        r.len = (uint32_t)(end - first);
    return r;
}

int ring_varlen_calls(const ring_geometry *g, const ring_chunk *q, const ring_shard *kv, ring_call out[2])
{
    const uint32_t flags = g->flags & (CLFLASH_CAUSAL | CLFLASH_WINDOW);
    int n = 0;
    for (int i = 0; i < kv->nchunks; i++) {
        const ring_chunk *k = &kv->chunk[i];
        if (k->pos == q->pos) { /* the chunk against itself: every piece on its own diagonal */
            out[n++] = (ring_call){k->row, k->len, flags, 0, k->pos};
            continue;
        }
        /* the one sequence that can have tokens in both: the one holding the later chunk's first
         * token, if it reaches back into the earlier chunk */
        const ring_chunk *early = k->pos < q->pos ? k : q, *late = k->pos < q->pos ? q : k;
        const uint32_t s = seq_at(g, late->pos);
        if ((uint64_t)g->cu[s] >= early->pos + early->len)
            continue;
        const ring_chunk qp = piece(g, s, q), kp = piece(g, s, k);
        if (!ring_pair_visible(g, &qp, &kp))
            continue;
        const int64_t off = ((int64_t)qp.pos - (int64_t)kp.pos) - ((int64_t)kp.len - (int64_t)qp.len);
        if (off < -(int64_t)CLFLASH_MAX_SEQ_K || off > (int64_t)CLFLASH_MAX_SEQ_K)
            return -1;
        out[n++] = (ring_call){k->row, k->len, flags, (int32_t)off, k->pos};
    }
    return n;
}

/* The entries of the pair (query chunk q, key chunk k): the non-empty sequences with tokens in q
 * or k, in order, as cumulative lengths of their pieces in q (cq) and in k (ck), which start at 0
 * and end at q->len and k->len. Returns the count; *max_q, *max_k the longest pieces. cq and ck
 * may be NULL (count only). */
static uint32_t entries_of(const ring_geometry *g, const ring_chunk *q, const ring_chunk *k, int32_t *cq, int32_t *ck,
                           uint32_t *max_q, uint32_t *max_k)
{
    uint32_t range[2][2] = {{seq_at(g, q->pos), seq_at(g, q->pos + q->len - 1)},
                            {seq_at(g, k->pos), seq_at(g, k->pos + k->len - 1)}};
    if (range[1][0] < range[0][0]) { /* the earlier range first */
        const uint32_t a = range[0][0], b = range[0][1];
        range[0][0] = range[1][0];
        range[0][1] = range[1][1];
        range[1][0] = a;
        range[1][1] = b;
    }
    uint32_t n = 0, sq = 0, sk = 0;
    *max_q = *max_k = 0;
    if (cq)
        cq[0] = ck[0] = 0;
    for (int r = 0; r < 2; r++) {
        const uint32_t from = r == 1 && range[1][0] <= range[0][1] ? range[0][1] + 1 : range[r][0];
        for (uint32_t s = from; s <= range[r][1]; s++) {
            if (g->cu[s + 1] == g->cu[s])
                continue; /* empty: in neither chunk */
            const uint32_t lq = piece(g, s, q).len, lk = piece(g, s, k).len;
            sq += lq;
            sk += lk;
            *max_q = lq > *max_q ? lq : *max_q;
            *max_k = lk > *max_k ? lk : *max_k;
            n++;
            if (cq) {
                cq[n] = (int32_t)sq;
                ck[n] = (int32_t)sk;
            }
        }
    }
    return n;
}

clflash_status ring_varlen_agree(MPI_Comm comm, ring_geometry *g, int32_t *cu)
{
    if (g->num_seqs == 0) {
        free(cu);
        return CLFLASH_SUCCESS;
    }
    const int count = (int)g->num_seqs + 1; /* every rank passed ring_varlen_read: cu is not NULL */
    int32_t *first = malloc((size_t)count * sizeof *first);
    clflash_status mine = CLFLASH_SUCCESS;
    /* every rank must take part in the broadcast: agree first that every rank has the memory */
    clflash_status st = ring_agree_status(
        comm, first ? CLFLASH_SUCCESS : ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for cu_seqlens"),
        "cu_seqlens");
    if (st == CLFLASH_SUCCESS) {
        if (g->rank == 0)
            memcpy(first, cu, (size_t)count * sizeof *first);
        if (MPI_Bcast(first, count, MPI_INT32_T, 0, comm) != MPI_SUCCESS)
            mine = ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Bcast of cu_seqlens failed");
        for (int i = 0; i < count && mine == CLFLASH_SUCCESS; i++)
            if (cu[i] != first[i])
                mine = ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens[%d] is %d, rank 0's is %d", i, (int)cu[i],
                                 (int)first[i]);
        if (mine == CLFLASH_SUCCESS && (uint64_t)cu[count - 1] != g->seq_total)
            mine = ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens[%u] is %d, not seq_total (%llu)", g->num_seqs,
                             (int)cu[count - 1], (unsigned long long)g->seq_total);
        st = ring_agree_status(comm, mine, "cu_seqlens");
    }
    free(first);
    g->cu = cu;
    /* the calls: the same verdict on every rank, from agreed data only */
    for (int a = 0; a < g->size && st == CLFLASH_SUCCESS; a++)
        for (int c = 0; c < g->shards[a].nchunks && st == CLFLASH_SUCCESS; c++)
            for (int b = 0; b < g->size && st == CLFLASH_SUCCESS; b++) {
                const ring_chunk *q = &g->shards[a].chunk[c];
                ring_call call[2];
                const int n = ring_varlen_calls(g, q, &g->shards[b], call);
                if (n < 0)
                    st = ring_fail(CLFLASH_ERROR_UNSUPPORTED, "rank %d's chunk %d against rank %d's shard: a "
                                   "diagonal_offset beyond CLFLASH_MAX_SEQ_K (the sequence is too long)", a, c, b);
                for (int j = 0; j < n && st == CLFLASH_SUCCESS; j++) {
                    const ring_chunk k = {call[j].k_pos, call[j].k_row, call[j].k_len};
                    uint32_t mq, mk;
                    const uint32_t e = entries_of(g, q, &k, NULL, NULL, &mq, &mk);
                    if (e > CLFLASH_MAX_BATCH)
                        st = ring_fail(CLFLASH_ERROR_UNSUPPORTED, "rank %d's chunk %d and the key chunk at position "
                                       "%llu hold %u packed sequences, above CLFLASH_MAX_BATCH (%u)", a, c,
                                       (unsigned long long)k.pos, e, CLFLASH_MAX_BATCH);
                }
            }
    if (st != CLFLASH_SUCCESS) {
        free(g->cu);
        g->cu = NULL;
    }
    return st;
}

clflash_status ring_varlen_init(ring_varlen *v, clflash_context *ctx, const ring_geometry *g, const ring_chunk *q,
                                int nq)
{
    memset(v, 0, sizeof *v);
    if (g->cu == NULL)
        return CLFLASH_SUCCESS;
    const size_t most = (size_t)nq * 2 * (size_t)g->size;
    v->q_pos = malloc(most * sizeof *v->q_pos);
    v->k_pos = malloc(most * sizeof *v->k_pos);
    v->entries = malloc(most * sizeof *v->entries);
    v->max_q = malloc(most * sizeof *v->max_q);
    v->max_k = malloc(most * sizeof *v->max_k);
    v->cu_q = calloc(most, sizeof *v->cu_q);
    v->cu_k = calloc(most, sizeof *v->cu_k);
    if (!v->q_pos || !v->k_pos || !v->entries || !v->max_q || !v->max_k || !v->cu_q || !v->cu_k)
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for the packed sequences' calls");
    for (int i = 0; i < nq; i++)
        for (int r = 0; r < g->size; r++) {
            ring_call c[2];
            const int n = ring_varlen_calls(g, &q[i], &g->shards[r], c); /* >= 0: agreed */
            for (int j = 0; j < n; j++) {
                const ring_chunk k = {c[j].k_pos, c[j].k_row, c[j].k_len};
                uint32_t mq, mk;
                const uint32_t e = entries_of(g, &q[i], &k, NULL, NULL, &mq, &mk);
                int32_t *cq = malloc(2 * ((size_t)e + 1) * sizeof *cq);
                if (cq == NULL)
                    return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for a call's cu_seqlens");
                int32_t *ck = cq + e + 1;
                entries_of(g, &q[i], &k, cq, ck, &mq, &mk);
                const int at = v->n++;
                v->q_pos[at] = q[i].pos;
                v->k_pos[at] = k.pos;
                v->entries[at] = e;
                v->max_q[at] = mq;
                v->max_k[at] = mk;
                cl_int err = CL_SUCCESS, err2 = CL_SUCCESS;
                const size_t bytes = ((size_t)e + 1) * sizeof *cq;
                v->cu_q[at] = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                                             cq, &err);
                v->cu_k[at] = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                                             ck, &err2);
                free(cq);
                if (err != CL_SUCCESS || err2 != CL_SUCCESS)
                    return ring_fail(err != CL_SUCCESS ? err : err2, "clCreateBuffer of a call's cu_seqlens: %d",
                                     err != CL_SUCCESS ? err : err2);
            }
        }
    return CLFLASH_SUCCESS;
}

void ring_varlen_rules(clflash_attention_desc *a, const ring_varlen *v, const ring_chunk *q, const ring_call *c)
{
    for (int i = 0; i < v->n; i++) {
        if (v->q_pos[i] != q->pos || v->k_pos[i] != c->k_pos)
            continue;
        a->batch = v->entries[i];
        a->seq_q = v->max_q[i];
        a->seq_k = v->max_k[i];
        a->cu_seqlens_q = v->cu_q[i];
        a->cu_seqlens_k = v->cu_k[i];
        a->total_q = q->len;
        a->total_k = c->k_len;
        a->q.batch_stride = a->k.batch_stride = a->v.batch_stride = a->o.batch_stride = 0; /* resolved: batch 1 */
        return;
    }
}

clflash_layout ring_varlen_layout(const clflash_attention_desc *a, const clflash_layout *l, uint32_t heads,
                                  uint32_t rows, uint32_t head_dim)
{
    clflash_layout r = ring_resolve_layout(l, heads, rows, head_dim);
    if (a->cu_seqlens_q != NULL)
        r.batch_stride = 0;
    return r;
}

void ring_varlen_free(ring_varlen *v)
{
    for (int i = 0; i < v->n; i++) {
        if (v->cu_q[i])
            clReleaseMemObject(v->cu_q[i]);
        if (v->cu_k[i])
            clReleaseMemObject(v->cu_k[i]);
    }
    free(v->q_pos);
    free(v->k_pos);
    free(v->entries);
    free(v->max_q);
    free(v->max_k);
    free(v->cu_q);
    free(v->cu_k);
    memset(v, 0, sizeof *v);
}
