/*
 * ring_pairs.c - the calls of a query chunk against a travelling K/V shard, as the forward and the
 * backward enqueue them. With the causal rule alone (or none) they are ring_visible's: at most one
 * call per (query chunk, shard), unchanged from the ring's first version. With a sliding window,
 * ALiBi, key lengths or a bias every (query chunk, key chunk) pair is a call of its own, with
 * clflash_attention_desc.diagonal_offset putting the causal rule, the window and ALiBi's distance
 * at the whole sequence's diagonal, its key lengths relative to the key chunk, and the bias layout's
 * offset at the pair's first element. Packed sequences (cu_seqlens) have pairs of their own,
 * ring_varlen.c's.
 *
 * Why per key chunk: ALiBi, key lengths and the bias depend on each key's global position, which a
 * call can only express through one diagonal offset, one set of key lengths and one bias offset
 * per key run; a zigzag shard's two chunks are far apart in the sequence, so they cannot share a
 * call.
 */
#include "ring_internal.h"

/* Whether some (query, key) pair of the two chunks passes the causal and window rules, from the
 * range of key - query distances the chunks span. */
int ring_pair_visible(const ring_geometry *g, const ring_chunk *q, const ring_chunk *k)
{
    const int64_t nearest = (int64_t)k->pos - (int64_t)(q->pos + q->len - 1); /* smallest key - query */
    const int64_t farthest = (int64_t)(k->pos + k->len - 1) - (int64_t)q->pos; /* largest */
    int64_t right = INT64_MAX, left = INT64_MAX; /* allowed: -left <= key - query <= right */
    if (g->flags & CLFLASH_WINDOW) {
        right = g->window_right;
        left = g->window_left;
    }
    if ((g->flags & CLFLASH_CAUSAL) && right > 0)
        right = 0;
    return nearest <= right && farthest >= -left;
}

int ring_calls(const ring_geometry *g, const ring_chunk *q, const ring_shard *kv, ring_call out[2])
{
    if (g->num_seqs) /* packed sequences: their own pairs */
        return ring_varlen_calls(g, q, kv, out);
    if (!g->per_pair) /* never with a bias: its columns need a call per key chunk */
        return ring_visible(q, kv, (g->flags & CLFLASH_CAUSAL) != 0, &out[0]);
    const int diagonal_rules = (g->flags & (CLFLASH_CAUSAL | CLFLASH_WINDOW)) != 0 || g->has_alibi;
    int n = 0;
    for (int i = 0; i < kv->nchunks; i++) {
        const ring_chunk *k = &kv->chunk[i];
        if (!ring_pair_visible(g, q, k))
            continue;
        /* positions are below 2^31 * 2^20 and lengths below 2^30: no overflow in int64 */
        const int64_t off = diagonal_rules ? ((int64_t)q->pos - (int64_t)k->pos) - ((int64_t)k->len - (int64_t)q->len)
                                           : 0;
        if (off < -(int64_t)CLFLASH_MAX_SEQ_K || off > (int64_t)CLFLASH_MAX_SEQ_K)
            return -1;
        out[n++] = (ring_call){k->row, k->len, g->flags & (CLFLASH_CAUSAL | CLFLASH_WINDOW), (int32_t)off, k->pos};
    }
    return n;
}

void ring_call_rules(clflash_attention_desc *a, const ring_geometry *g, const ring_chunk *q, const ring_call *c,
                     cl_mem key_lengths)
{
    a->flags = c->flags;
    a->diagonal_offset = c->diagonal_offset;
    if (c->flags & CLFLASH_WINDOW) {
        a->window_left = g->window_left;
        a->window_right = g->window_right;
    }
    a->alibi_slopes = g->alibi_slopes;
    a->key_lengths = key_lengths;
    if (g->bias) {
        /* the call's element (b, h, i, j) is the caller's (b, h, q->row + i, c->k_pos + j): only the
         * offset moves (a broadcast seq_stride is 0, so every row stays on the one shared row). The
         * strides are passed resolved, so that clflash does not take the call's seq_q and seq_k for
         * their defaults; broadcast ones are 0 and bias_broadcast keeps them so. The caller's
         * buffer holds the whole [seq_local][seq_total] extent (checked after the agreement,
         * ring_geometry.c), which contains every call's, so no offset leaves it. */
        a->bias = g->bias;
        a->bias_layout = g->bias_layout;
        a->bias_layout.offset += (uint64_t)q->row * g->bias_layout.seq_stride + c->k_pos;
        a->bias_broadcast = g->bias_broadcast;
    }
}
