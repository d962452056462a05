/*
 * bench_inputs.c - clflash-bench's inputs for its main mode: a deterministic generator, the fp16 and
 * bf16 conversions, and reading an element back as a double for the checks.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#endif

#include "bench_flash.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ============================================================================================
 * Inputs: a deterministic generator and the fp16 conversions.
 * ========================================================================================== */

/* SplitMix64: small, fast, and the same sequence on every platform. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1]: 53 random bits scaled to [0, 2), shifted down by one. */
static float random_unit(uint64_t *state)
{
    return (float)((double)(next_random(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* IEEE binary32 -> binary16 bits, rounding to nearest, ties to even; overflow gives infinity,
 * NaN stays a (quiet) NaN, tiny values become subnormals or signed zero. */
static uint16_t float_to_half(float f)
{
    uint32_t x, sign, exp, mant, h, rem;
    int e;
    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000u;
    exp = (x >> 23) & 0xFFu;
    mant = x & 0x7FFFFFu;
    if (exp == 0xFFu) /* infinity or NaN */
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u | (mant >> 13) : 0u));
    e = (int)exp - 127 + 15; /* the half's biased exponent */
    if (e >= 31)
        return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {
        /* a half subnormal counts units of 2^-24: the 24-bit significand shifted right 14 - e */
        uint32_t m = mant | 0x800000u, shift, half;
        if (e < -10)
            return (uint16_t)sign; /* below 2^-25: rounds to zero */
        shift = (uint32_t)(14 - e);
        h = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u)))
            h++; /* may carry into the smallest normal, which is the right answer */
        return (uint16_t)(sign | h);
    }
    h = ((uint32_t)e << 10) | (mant >> 13);
    rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is correct, up to infinity */
    return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h)
{
    uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    float f;
    if (exp == 0)
        f = ldexpf((float)mant, -24);
    else if (exp == 31)
        f = mant ? NAN : INFINITY;
    else
        f = ldexpf((float)(mant | 0x400u), (int)exp - 25);
    return (h & 0x8000u) ? -f : f;
}

/* float -> bf16 bits, round to nearest even (NaN stays NaN). */
static uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_float(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* count values in [-1, 1] from `seed`, stored as dtype t. */
void fill_random(void *dst, size_t count, clflash_dtype t, uint64_t seed)
{
    uint64_t state = seed;
    if (t == CLFLASH_F16 || t == CLFLASH_BF16) {
        uint16_t *p = dst;
        for (size_t i = 0; i < count; i++)
            p[i] = t == CLFLASH_F16 ? float_to_half(random_unit(&state)) : float_to_bf16(random_unit(&state));
    } else {
        float *p = dst;
        for (size_t i = 0; i < count; i++)
            p[i] = random_unit(&state);
    }
}

double element_value(const void *src, size_t i, clflash_dtype t)
{
    if (t == CLFLASH_F16)
        return (double)half_to_float(((const uint16_t *)src)[i]);
    if (t == CLFLASH_BF16)
        return (double)bf16_to_float(((const uint16_t *)src)[i]);
    return (double)((const float *)src)[i];
}
