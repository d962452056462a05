/*
 * traffic.c - the cost models: the global-memory bytes flash and naive attention must move for a
 * descriptor, and the device memory the naive path allocates for its score matrix and temporaries.
 *
 * Why: FlashAttention's claim is about memory movement, and clflash-bench prints these figures next to
 * the measured time so the claim can be checked against the device's bandwidth. The models count
 * what our kernels are designed to move from and to global memory, not what caches absorb.
 */
#include "internal.h"

#define mul clflash_mul_sat /* saturating at UINT64_MAX (tile_math.c) */
#define add clflash_add_sat

/* The keys query i sees, [lo, hi), by the same rules as cl/common.cl's visible_keys (causal and
 * window; key lengths and a variable-length batch's lengths live on the device and are taken as
 * seq_k and seq_q here). */
static void visible_keys(const clflash_problem *p, uint64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t d = (int64_t)i + (int64_t)p->seq_k - (int64_t)p->seq_q + p->diagonal_offset;
    int64_t l = 0, h = p->seq_k;
    if ((p->flags & CLFLASH_CAUSAL) && d + 1 < h)
        h = d + 1;
    if (p->flags & CLFLASH_WINDOW) {
        if (d - (int64_t)p->window_left > l)
            l = d - (int64_t)p->window_left;
        if (d + (int64_t)p->window_right + 1 < h)
            h = d + (int64_t)p->window_right + 1;
    }
    *lo = l < h ? l : h;
    *hi = h;
}

/* Key rows the flash kernel loads for one (batch, head): for each Q block, the whole tiles from
 * the one holding its first row's first visible key to its last row's last visible key. */
static uint64_t flash_key_rows(const clflash_problem *p, uint32_t block)
{
    const uint64_t tiles_q = ((uint64_t)p->seq_q + block - 1) / block;
    uint64_t rows = 0;
    for (uint64_t t = 0; t < tiles_q; t++) {
        const uint64_t q_last = (t + 1) * block < p->seq_q ? (t + 1) * block - 1 : p->seq_q - 1;
        int64_t first_lo, first_hi, last_lo, last_hi;
        visible_keys(p, t * block, &first_lo, &first_hi);
        visible_keys(p, q_last, &last_lo, &last_hi);
        const uint64_t begin = first_lo <= 0 ? 0 : (uint64_t)first_lo / block * block;
        if (last_hi > (int64_t)begin)
            rows += ((uint64_t)last_hi - begin + block - 1) / block * block;
    }
    return rows;
}

uint64_t clflash_traffic_bytes(const clflash_attention_desc *d, clflash_algo algo, uint32_t block)
{
    clflash_problem p;
    uint64_t bh, q_o, kv, total;
    clflash_status st = clflash_resolve_desc(d, &p);
    clflash_clear_detail(); /* a model query is not a failed call */
    if (st != CLFLASH_SUCCESS)
        return 0;
    bh = (uint64_t)p.batch * p.heads_q;
    q_o = add(mul(mul(mul(bh, p.seq_q), p.head_dim), p.elem_size),       /* Q read */
              mul(mul(mul(bh, p.seq_q), p.head_dim), p.out_elem_size)); /* O written */
    if (p.bias) /* the bias: one float read per score */
        q_o = add(q_o, mul(bh, clflash_score_matrix_bytes(p.seq_q, p.seq_k, sizeof(float))));
    if (algo == CLFLASH_ALGO_FLASH) {
        if (block == 0)
            return 0;
        kv = mul(mul(mul(bh, flash_key_rows(&p, block)), p.head_dim), 2 * p.elem_size);
        return add(q_o, kv);
    }
    if (algo == CLFLASH_ALGO_NAIVE && !p.varlen) {
        kv = mul(mul(mul((uint64_t)p.batch * p.heads_kv, p.seq_k), p.head_dim), 2 * p.elem_size);
        total = add(q_o, kv);
        /* O goes through a temporary: written there, read back, written to the caller's layout */
        total = add(total, mul(2, mul(mul(mul(bh, p.seq_q), p.head_dim), p.out_elem_size)));
        return add(total, mul(5, mul(bh, clflash_score_matrix_bytes(p.seq_q, p.seq_k, p.out_elem_size))));
    }
    return 0;
}

uint64_t clflash_naive_heads_per_chunk(const clflash_problem *p, uint64_t max_alloc)
{
    const uint64_t per_head = clflash_score_matrix_bytes(p->seq_q, p->seq_k, p->out_elem_size);
    const uint64_t total = (uint64_t)p->batch * p->heads_q;
    uint64_t chunk;
    if (per_head == 0 || per_head > max_alloc)
        return 0;
    chunk = max_alloc / per_head;
    if (chunk > total)
        chunk = total;
    if (chunk > CLFLASH_MAX_GRID_DIM)
        chunk = CLFLASH_MAX_GRID_DIM;
    return chunk;
}

uint64_t clflash_naive_workspace_bytes(const clflash_context *c, const clflash_attention_desc *d)
{
    clflash_problem p;
    uint64_t ok = clflash_check_context(c) == CLFLASH_SUCCESS && clflash_resolve_desc(d, &p) == CLFLASH_SUCCESS;
    clflash_clear_detail();
    if (!ok)
        return 0;
    const uint64_t chunk = clflash_naive_heads_per_chunk(&p, c->info.max_alloc_size);
    if (chunk == 0)
        return 0;
    const uint64_t rows = (uint64_t)p.batch * p.heads_q * p.seq_q;
    /* the score matrices of one chunk of heads, the temporary O and (with lse) the temporary lse */
    return add(add(mul(chunk, clflash_score_matrix_bytes(p.seq_q, p.seq_k, p.out_elem_size)),
                   mul(mul(rows, p.head_dim), p.out_elem_size)),
               mul(rows, sizeof(float)));
}
