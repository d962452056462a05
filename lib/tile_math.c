/*
 * tile_math.c - the tile rules as pure functions: dtype sizes, the score matrix a naive
 * implementation materializes, one flash tile's bytes (the forward's (3*B*d + B*B) * s and the
 * backward's (4*B*d + 2*B*B) * s), and the largest B that fits a budget under each.
 *
 * Why separate: these are the tile calculator (the README's figures). They need no device, are exact in 64-bit integer
 * arithmetic, saturate to UINT64_MAX instead of wrapping, and are what clflash-query prints.
 */
#include "clflash.h"

#include <math.h>

size_t clflash_dtype_size(clflash_dtype t)
{
    switch (t) {
    case CLFLASH_F32: return 4;
    case CLFLASH_F16: return 2;
    case CLFLASH_BF16: return 2;
    case CLFLASH_I8: return 1;
    default: return 0;
    }
}

uint64_t clflash_mul_sat(uint64_t a, uint64_t b)
{
    if (a != 0 && b > UINT64_MAX / a)
        return UINT64_MAX;
    return a * b;
}

uint64_t clflash_add_sat(uint64_t a, uint64_t b)
{
    return (b > UINT64_MAX - a) ? UINT64_MAX : a + b;
}

uint64_t clflash_score_matrix_bytes(uint64_t seq_q, uint64_t seq_k, uint64_t bytes_per_score)
{
    return clflash_mul_sat(clflash_mul_sat(seq_q, seq_k), bytes_per_score);
}

uint64_t clflash_tile_bytes(uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem)
{
    uint64_t qkv = clflash_mul_sat(clflash_mul_sat(3, block), head_dim);
    uint64_t scores = clflash_mul_sat(block, block);
    return clflash_mul_sat(clflash_add_sat(qkv, scores), bytes_per_elem);
}

uint64_t clflash_backward_tile_bytes(uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem)
{
    const uint64_t blocks = clflash_mul_sat(clflash_mul_sat(4, block), head_dim);
    const uint64_t squares = clflash_mul_sat(2, clflash_mul_sat(block, block));
    return clflash_mul_sat(clflash_add_sat(blocks, squares), bytes_per_elem);
}

typedef uint64_t (*tile_rule)(uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem);

/* Whether B's tile fits the budget, in exact saturating arithmetic. */
static int fits(tile_rule rule, uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem, uint64_t budget)
{
    const uint64_t t = rule(block, head_dim, bytes_per_elem);
    return t != UINT64_MAX && t <= budget; /* a tile too large to count never fits */
}

/* The largest B whose tile (sq * B*B + lin * d * B) * s fits the budget, as the rule computes it:
 * the positive root of the quadratic, estimated in long double (no overflow for any input) and
 * corrected with exact integer checks; then a multiple of 16, else 8, 4, 2 or 1, else 0. */
static uint64_t largest_block(tile_rule rule, long double sq, long double lin, uint64_t local_mem_bytes,
                              uint64_t head_dim, uint64_t bytes_per_elem)
{
    static const uint64_t small[] = {8, 4, 2, 1};
    if (head_dim == 0 || bytes_per_elem == 0)
        return 0;
    const long double x = (long double)(local_mem_bytes / bytes_per_elem);
    const long double c = lin * (long double)head_dim;
    const long double root = (sqrtl(c * c + 4.0L * sq * x) - c) / (2.0L * sq);
    uint64_t b = root >= 18446744073709551615.0L ? UINT64_MAX : (uint64_t)root;
    while (b > 0 && !fits(rule, b, head_dim, bytes_per_elem, local_mem_bytes))
        b--;
    while (b < UINT64_MAX && fits(rule, b + 1, head_dim, bytes_per_elem, local_mem_bytes))
        b++;
    if (b >= 16)
        return b - b % 16;
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
        if (small[i] <= b)
            return small[i];
    return 0;
}

uint64_t clflash_max_block(uint64_t local_mem_bytes, uint64_t head_dim, uint64_t bytes_per_elem)
{
    return largest_block(clflash_tile_bytes, 1.0L, 3.0L, local_mem_bytes, head_dim, bytes_per_elem);
}

uint64_t clflash_backward_max_block(uint64_t local_mem_bytes, uint64_t head_dim, uint64_t bytes_per_elem)
{
    return largest_block(clflash_backward_tile_bytes, 2.0L, 4.0L, local_mem_bytes, head_dim, bytes_per_elem);
}
