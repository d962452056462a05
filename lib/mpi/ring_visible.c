/*
 * ring_visible.c - which keys of a travelling K/V shard a chunk of queries sees, as at most one
 * clflash_forward call. Positions are global (the whole sequence's); clflash_forward's causal rule
 * is bottom-right aligned over its own seq_q x seq_k, so a chunk on the diagonal becomes a causal
 * call only when the query chunk and the key rows end at the same position.
 *
 * Why a rule of its own: the contiguous and zigzag mappings give different patterns (for zigzag the
 * second query chunk at step 0 sees the first key chunk whole and the second up to its diagonal,
 * one causal call over both), and the backward needs the same pairs. It serves the causal rule
 * alone; windows, ALiBi and key lengths take ring_pairs.c's one call per key chunk.
 */
#include "ring_internal.h"

int ring_visible(const ring_chunk *q, const ring_shard *kv, int causal, ring_call *out)
{
    if (!causal) {
        *out = (ring_call){0, kv->rows, 0, 0, 0};
        return 1;
    }
    const uint64_t q_first = q->pos, q_last = q->pos + q->len - 1;
    int started = 0, diagonal = 0, ended = 0;
    uint32_t k_row = 0, k_end = 0;
    uint64_t diag_end = 0, diag_first = 0;
    for (int i = 0; i < kv->nchunks; i++) {
        const ring_chunk *c = &kv->chunk[i];
        const uint64_t c_first = c->pos, c_last = c->pos + c->len - 1;
        if (c_first > q_last) { /* entirely in the future: hidden */
            if (started)
                ended = 1;
            continue;
        }
        /* some key of c is visible to some query */
        if (ended || diagonal || (started && c->row != k_end))
            return -1; /* two separate runs, or keys after a diagonal chunk */
        if (!started) {
            started = 1;
            k_row = c->row;
        }
        k_end = c->row + c->len;
        if (c_last > q_first) { /* not wholly in the past: a diagonal chunk */
            diagonal = 1;
            diag_end = c_last + 1;
            diag_first = c_first;
        }
    }
    if (!started)
        return 0;
    if (diagonal) {
        /* bottom-right alignment is exact when both end together, and earlier (whole) chunks stay
         * visible to every query when no query precedes the diagonal chunk's first key */
        if (q_last + 1 != diag_end || (k_row != k_end - (uint32_t)(diag_end - diag_first) && q_first < diag_first))
            return -1;
    }
    *out = (ring_call){k_row, k_end - k_row, diagonal ? CLFLASH_CAUSAL : 0u, 0, 0};
    return 1;
}
