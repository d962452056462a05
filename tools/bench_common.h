/*
 * bench_common.h - what clflash-bench's timing modes (bench_decode.c, bench_features.c,
 * bench_varlen.c) share: a monotonic clock, deterministic input data, the context they run on and
 * the back-to-back timing loop.
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
clflash_context *bench_open_context(const char *device, const char *build_options, const char *tuning);

/* One call as the timing modes repeat it: clflash_forward(c, d, queue, q, k, v, o, lse) (lse NULL for
 * none), or with d_o set clflash_backward(c, d, queue, q, k, v, o, d_o, lse, dq, dk, dv). */
typedef struct {
    clflash_context *c;
    const clflash_attention_desc *d;
    cl_command_queue queue;
    cl_mem q, k, v, o;
    cl_mem d_o, lse, dq, dk, dv; /* the backward's (d_o NULL: the forward) */
} bench_call;

/* Back-to-back timing: batches of calls, each enqueued one after another and then finished, until
 * min_time seconds have passed and at least three batches ran. A batch holds about batch_s seconds
 * of calls by one_call_s (one call's time; 100 calls if that is not positive), at most max_per.
 * Returns the fastest batch's seconds per call and adds the calls made to *calls. */
double bench_back_to_back(const bench_call *call, double one_call_s, double batch_s, unsigned max_per,
                          double min_time, unsigned *calls);

/* The same for a set of ncalls different calls that together are one unit of work (a batch's
 * sequences run one call each): each repetition enqueues the whole set in order, and the result
 * is the fastest batch's seconds per set; one_set_s is one set's time, and *sets counts the sets
 * made. bench_back_to_back is this with a set of one call. */
double bench_back_to_back_set(const bench_call *calls, size_t ncalls, double one_set_s, double batch_s,
                              unsigned max_per, double min_time, unsigned *sets);

/* Enqueues one call (no wait list; *done receives its event unless done is NULL); returns clflash's
 * status. */
clflash_status bench_enqueue(const bench_call *call, cl_event *done);

#endif /* CLFLASH_BENCH_COMMON_H */
