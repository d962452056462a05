/*
 * kv_append.cl - clflash_append_kv's kernels: a decoding step's new key and value rows written into
 * a KV cache (contiguous or paged) at each sequence's length, the rotary position embedding applied
 * to the new keys and, in place, to the step's queries; then, if asked, the lengths advanced.
 *
 * Why its own file: it moves rows, it computes no attention; the attention kernels read what it
 * writes. The host prepends common.cl (storage types) and passes every switch:
 *   HEAD_DIM, ROT_HALF (rotary_dim / 2, 0 for none), INTERLEAVED (1: pairs (2j, 2j + 1), 0: pairs
 *   (j, j + ROT_HALF)), PAGED (1: the cache is a pool of PAGE_SIZE-key pages through a block table).
 * append_rows' grid: dimension 0 a flat index over (row, unit), dimension 1 the part (0 keys,
 * 1 values, 2 queries). A row has UNITS units: ROT_HALF rotary pairs, then the HEAD_DIM - 2 ROT_HALF
 * other columns one each; every element of a row belongs to one unit, so each work-item reads and
 * writes its own elements only (the queries, rotated in place, race with nothing). Rows are
 * (batch, head, token) with the token fastest. A row is placed at position p = cache_lengths[b] +
 * token; lengths and table entries come from device memory, so a key or value row whose position
 * is negative, at or past the capacity, or on a page whose entry is outside the pool is dropped, and
 * a row whose position is outside the rotary tables is not rotated (clflash.h, clflash_append_kv).
 */
#if !defined(HEAD_DIM) || !defined(ROT_HALF) || !defined(INTERLEAVED) || !defined(PAGED) || \
    (PAGED && !defined(PAGE_SIZE))
#error "HEAD_DIM, ROT_HALF, INTERLEAVED, PAGED (and PAGE_SIZE when paged) are set by the host (lib/append.c)"
#endif
#if 2 * ROT_HALF > HEAD_DIM
#error "rotary_dim is at most head_dim"
#endif

#define UNITS (HEAD_DIM - ROT_HALF)

/* The two columns of rotary pair j. */
static inline void rotary_pair(uint j, uint *c0, uint *c1)
{
#if INTERLEAVED
    *c0 = 2 * j;
    *c1 = 2 * j + 1;
#else
    *c0 = j;
    *c1 = j + ROT_HALF;
#endif
}

/* Where row (b, h) of the cache at position `pos` starts, or -1 if the row is dropped. */
static inline long cache_row(long pos, uint b, uint h, ulong capacity, __global const int *table, uint pages_per_seq,
                             uint num_pages, ulong off, ulong bs, ulong hs, ulong ss)
{
    if (pos < 0 || (ulong)pos >= capacity)
        return -1;
#if PAGED
    const int page = table[(ulong)b * pages_per_seq + (ulong)pos / PAGE_SIZE];
    if (page < 0 || (uint)page >= num_pages)
        return -1;
    return (long)(off + (ulong)page * bs + (ulong)h * hs + (ulong)pos % PAGE_SIZE * ss);
#else
    (void)table;
    (void)pages_per_seq;
    (void)num_pages;
    return (long)(off + (ulong)b * bs + (ulong)h * hs + (ulong)pos * ss);
#endif
}

__kernel void append_rows(__global bits_t *q, __global const bits_t *k_new, __global const bits_t *v_new,
                          __global bits_t *k_cache, __global bits_t *v_cache, __global const int *cache_lengths,
                          __global const int *table, __global const float *rot_cos, __global const float *rot_sin,
                          uint heads_kv, uint heads_q, uint new_tokens, ulong capacity, uint pages_per_seq,
                          uint num_pages, uint rotary_positions, ulong rows_kv, ulong rows_q, ulong kn_off,
                          ulong kn_bs, ulong kn_hs, ulong kn_ss, ulong vn_off, ulong vn_bs, ulong vn_hs, ulong vn_ss,
                          ulong kc_off, ulong kc_bs, ulong kc_hs, ulong kc_ss, ulong vc_off, ulong vc_bs,
                          ulong vc_hs, ulong vc_ss, ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss)
{
    const uint part = get_global_id(1); /* 0 keys, 1 values, 2 queries */
    const ulong flat = get_global_id(0), row = flat / UNITS;
    const uint unit = (uint)(flat % UNITS);
    const uint heads = part == 2 ? heads_q : heads_kv;
    if (row >= (part == 2 ? rows_q : rows_kv))
        return;
    const uint token = (uint)(row % new_tokens), h = (uint)(row / new_tokens % heads);
    const uint b = (uint)(row / new_tokens / heads);
    const long pos = (long)cache_lengths[b] + (long)token;

    /* source and destination of the row's elements */
    __global const bits_t *src;
    __global bits_t *dst;
    long from, to;
    if (part == 2) {
        src = q;
        dst = q;
        from = to = (long)(q_off + (ulong)b * q_bs + (ulong)h * q_hs + (ulong)token * q_ss);
    } else {
        const int keys = part == 0;
        src = keys ? k_new : v_new;
        dst = keys ? k_cache : v_cache;
        from = (long)(keys ? kn_off + (ulong)b * kn_bs + (ulong)h * kn_hs + (ulong)token * kn_ss
                           : vn_off + (ulong)b * vn_bs + (ulong)h * vn_hs + (ulong)token * vn_ss);
        to = keys ? cache_row(pos, b, h, capacity, table, pages_per_seq, num_pages, kc_off, kc_bs, kc_hs, kc_ss)
                  : cache_row(pos, b, h, capacity, table, pages_per_seq, num_pages, vc_off, vc_bs, vc_hs, vc_ss);
        if (to < 0)
            return;
    }
    if (unit >= ROT_HALF) { /* a column past the rotary ones: copied */
        const uint c = unit + ROT_HALF;
        if (part != 2)
            store_g(dst, to + c, load_g(src, from + c));
        return;
    }
#if ROT_HALF > 0
    uint c0, c1;
    rotary_pair(unit, &c0, &c1);
    float x = load_g(src, from + c0), y = load_g(src, from + c1);
    if (part != 1 && pos >= 0 && pos < (long)rotary_positions) {
        const ulong at = (ulong)pos * ROT_HALF + unit;
        const float cs = rot_cos[at], sn = rot_sin[at];
        const float rx = x * cs - y * sn, ry = y * cs + x * sn;
        x = rx;
        y = ry;
    } else if (part == 2) {
        return; /* a query outside the tables stays as it is */
    }
    store_g(dst, to + c0, x);
    store_g(dst, to + c1, y);
#else
    (void)rot_cos;
    (void)rot_sin;
    (void)rotary_positions;
#endif
}

/* CLFLASH_APPEND_ADVANCE_LENGTHS: cache_lengths[b] += new_tokens (wrapping as int32), one work-item
 * per entry, enqueued after append_rows so that every row was placed by the old lengths. */
__kernel void append_advance(__global int *cache_lengths, uint batch, uint new_tokens)
{
    const uint b = get_global_id(0);
    if (b < batch)
        cache_lengths[b] = as_int(as_uint(cache_lengths[b]) + new_tokens);
}
