/*
 * bench_common.h - what clflash-bench's timing modes (bench_decode.c, bench_features.c) share: a
 * monotonic clock, deterministic input data and the context they run on.
 */
#ifndef CLFLASH_BENCH_COMMON_H
#define CLFLASH_BENCH_COMMON_H

#include "clflash.h"

#include <stddef.h>
#include <stdint.h>

/* Seconds of CLOCK_MONOTONIC. */
double bench_now(void);

/* n values in [-1, 1) from a fixed LCG seeded with `seed`, stored as t (F32, F16 or BF16; the
 * conversions truncate, which is fine for timing inputs). */
void bench_fill_random(void *dst, size_t n, clflash_dtype t, uint64_t seed);

/* The default context (after setting CLFLASH_DEVICE to `device` when it is not NULL) with the given
 * build options; on failure prints why on stderr and returns NULL. */
clflash_context *bench_open_context(const char *device, const char *build_options);

#endif /* CLFLASH_BENCH_COMMON_H */
