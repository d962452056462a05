/*
 * bench_common.c - the clock, the input data, the context and the back-to-back timing loop that
 * clflash-bench's timing modes share (bench_common.h), written once so that --decode, --features
 * and --varlen time and fill alike.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "bench_common.h"
#include "tool_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_fill_random(void *dst, size_t n, clflash_dtype t, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float x = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (t == CLFLASH_F32) {
            ((float *)dst)[i] = x;
        } else {
            uint32_t u;
            memcpy(&u, &x, 4);
            /* bf16 keeps the top half, f16 is built from it */
            if (t == CLFLASH_BF16) {
                ((uint16_t *)dst)[i] = (uint16_t)(u >> 16);
            } else {
                const uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xffu;
                ((uint16_t *)dst)[i] = e < 113 ? (uint16_t)sign : (uint16_t)(sign | ((e - 112) << 10) | ((u >> 13) & 0x3ffu));
            }
        }
    }
}

clflash_context *bench_open_context(const char *device, const char *build_options, const char *tuning)
{
    if (device && setenv("CLFLASH_DEVICE", device, 1) != 0) {
        fprintf(stderr, "%s: setting CLFLASH_DEVICE failed\n", tool_name());
        return NULL;
    }
    clflash_context_options copt = {.struct_size = sizeof copt};
    copt.build_options = build_options;
    copt.tuning = tuning;
    clflash_context *c = NULL;
    const clflash_status st = clflash_context_create_default(&copt, &c);
    if (st != CLFLASH_SUCCESS) {
        fprintf(stderr, "%s: no device: %s (%s)\n", tool_name(), clflash_status_string(st), clflash_last_error_detail());
        return NULL;
    }
    return c;
}

clflash_status bench_enqueue(const bench_call *call, cl_event *done)
{
    if (call->d_o != NULL)
        return clflash_backward(call->c, call->d, call->queue, call->q, call->k, call->v, call->o, call->d_o,
                                call->lse, call->dq, call->dk, call->dv, 0, NULL, done);
    return clflash_forward(call->c, call->d, call->queue, call->q, call->k, call->v, call->o, call->lse, 0, NULL,
                           done);
}

double bench_back_to_back_set(const bench_call *calls, size_t ncalls, double one_set_s, double batch_s,
                              unsigned max_per, double min_time, unsigned *sets)
{
    unsigned per = one_set_s > 0 ? (unsigned)(batch_s / one_set_s) : 100;
    if (per < 1)
        per = 1;
    if (per > max_per)
        per = max_per;
    double best = 1e30, total = 0.0;
    unsigned made = 0;
    while (total < min_time || made < 3 * per) {
        const double t0 = bench_now();
        for (unsigned i = 0; i < per; i++)
            for (size_t j = 0; j < ncalls; j++)
                bench_enqueue(&calls[j], NULL);
        clFinish(calls[0].queue);
        const double t = bench_now() - t0;
        total += t;
        made += per;
        if (t / per < best)
            best = t / per;
    }
    *sets += made;
    return best;
}

double bench_back_to_back(const bench_call *call, double one_call_s, double batch_s, unsigned max_per,
                          double min_time, unsigned *calls)
{
    return bench_back_to_back_set(call, 1, one_call_s, batch_s, max_per, min_time, calls);
}
