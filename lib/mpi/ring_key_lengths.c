/*
 * ring_key_lengths.c - the caller's key lengths, given in positions of the whole sequence, turned
 * into what each call of the ring needs: for a call over the key chunk at global position pos
 * with len rows, int32[batch] of clamp(L[b] - pos, 0, len), in a small device buffer per key
 * chunk, created once per ring call and released at its end. A key chunk that lies wholly past
 * every batch entry's length has nothing to attend to: its calls are left out (ring_calls_live),
 * unless a query chunk would be left with no call at all, whose calls then all run (they give
 * that chunk's rows O = 0 and lse = -inf, as clflash_forward does for a row without keys).
 *
 * Why on the host: the values are batch int32s, read once with a blocking read; clamping them
 * here (in 64-bit arithmetic) means a negative or huge length from the caller is never used as
 * anything but a bound, and every call's buffer holds values within its own keys. Leaving out a
 * call of no keys changes no result: its part would have lse = -inf (a merge weight of exactly 0)
 * and zero gradients.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

/* Whether some chunk of q has a call with key chunk k of shard kv. */
static int chunk_used(const ring_geometry *g, const ring_chunk *q, int nq, const ring_shard *kv, const ring_chunk *k)
{
    for (int i = 0; i < nq; i++) {
        ring_call c[2];
        const int n = ring_calls(g, &q[i], kv, c);
        for (int j = 0; j < n; j++)
            if (c[j].k_pos == k->pos)
                return 1;
    }
    return 0;
}

/* Whether the key chunk at pos lies past every batch entry's length (0 for a chunk without a buffer). */
static int chunk_empty(const ring_key_lengths *kl, uint64_t pos)
{
    for (int i = 0; i < kl->n; i++)
        if (kl->pos[i] == pos)
            return kl->empty[i];
    return 0;
}

static cl_mem upload(clflash_context *ctx, const int32_t *all, uint32_t batch, uint64_t total, const ring_chunk *k,
                     int32_t *scratch, unsigned char *empty, clflash_status *st)
{
    *empty = 1;
    for (uint32_t b = 0; b < batch; b++) {
        int64_t L = all[b];
        L = L < 0 ? 0 : L > (int64_t)total ? (int64_t)total : L;
        int64_t mine = L - (int64_t)k->pos;
        mine = mine < 0 ? 0 : mine > (int64_t)k->len ? (int64_t)k->len : mine;
        scratch[b] = (int32_t)mine;
        if (mine > 0)
            *empty = 0;
    }
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                              (size_t)batch * sizeof(int32_t), scratch, &err);
    if (err != CL_SUCCESS) {
        *st = ring_fail(err, "clCreateBuffer of the key lengths of the key chunk at position %llu: %d",
                        (unsigned long long)k->pos, err);
        return NULL;
    }
    return m;
}

clflash_status ring_key_lengths_init(ring_key_lengths *kl, clflash_context *ctx, cl_command_queue cq,
                                     const ring_geometry *g, const ring_chunk *q, int nq)
{
    memset(kl, 0, sizeof *kl);
    if (g->key_lengths == NULL)
        return CLFLASH_SUCCESS;
    const size_t most = 2 * (size_t)g->size;
    int32_t *all = malloc(2 * sizeof(int32_t) * g->batch);
    kl->pos = malloc(most * sizeof *kl->pos);
    kl->buf = calloc(most, sizeof *kl->buf);
    kl->empty = calloc(most, sizeof *kl->empty);
    if (all == NULL || kl->pos == NULL || kl->buf == NULL || kl->empty == NULL) {
        free(all);
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for the key lengths");
    }
    const cl_int err = clEnqueueReadBuffer(cq, g->key_lengths, CL_TRUE, 0, sizeof(int32_t) * g->batch, all, 0, NULL,
                                           NULL);
    if (err != CL_SUCCESS) {
        free(all);
        return ring_fail(err, "reading key_lengths: %d", err);
    }
    clflash_status st = CLFLASH_SUCCESS;
    for (int r = 0; r < g->size && st == CLFLASH_SUCCESS; r++)
        for (int c = 0; c < g->shards[r].nchunks && st == CLFLASH_SUCCESS; c++) {
            const ring_chunk *k = &g->shards[r].chunk[c];
            if (!chunk_used(g, q, nq, &g->shards[r], k))
                continue;
            cl_mem m = upload(ctx, all, g->batch, g->seq_total, k, all + g->batch, &kl->empty[kl->n], &st);
            if (m != NULL) {
                kl->pos[kl->n] = k->pos;
                kl->buf[kl->n++] = m;
            }
        }
    free(all);
    /* the query chunks every one of whose calls meets an empty key chunk keep them all */
    for (int i = 0; i < nq && i < 2; i++) {
        int live = 0;
        for (int r = 0; r < g->size && !live; r++) {
            ring_call c[2];
            const int n = ring_calls(g, &q[i], &g->shards[r], c);
            for (int j = 0; j < n; j++)
                live |= !chunk_empty(kl, c[j].k_pos);
        }
        if (!live)
            kl->keep_all[kl->n_keep++] = q[i].pos;
    }
    return st;
}

int ring_calls_live(const ring_geometry *g, const ring_key_lengths *kl, const ring_chunk *q, const ring_shard *kv,
                    ring_call out[2])
{
    const int n = ring_calls(g, q, kv, out);
    if (n <= 0 || kl->n == 0)
        return n;
    for (int i = 0; i < kl->n_keep; i++)
        if (kl->keep_all[i] == q->pos)
            return n;
    int live = 0;
    for (int j = 0; j < n; j++)
        if (!chunk_empty(kl, out[j].k_pos))
            out[live++] = out[j];
    return live;
}

cl_mem ring_key_lengths_at(const ring_key_lengths *kl, uint64_t pos)
{
    for (int i = 0; i < kl->n; i++)
        if (kl->pos[i] == pos)
            return kl->buf[i];
    return NULL;
}

void ring_key_lengths_free(ring_key_lengths *kl)
{
    for (int i = 0; i < kl->n; i++)
        clReleaseMemObject(kl->buf[i]);
    free(kl->pos);
    free(kl->buf);
    free(kl->empty);
    memset(kl, 0, sizeof *kl);
}
