/*
 * bench_blas.h - the CPU user's alternative to flash attention, for clflash-bench's `--algo blas`:
 * materialized attention built on a tuned BLAS (S = scale * Q K^T with cblas_sgemm, a row softmax
 * in C, O = P V with cblas_sgemm), fp32 only.
 *
 * Compiled only when CMake found a BLAS with a cblas.h (CLFLASH_BENCH_BLAS defined); without it
 * bench_blas_name() returns NULL and the bench says that blas was not built.
 */
#ifndef CLFLASH_BENCH_BLAS_H
#define CLFLASH_BENCH_BLAS_H

#include <stddef.h>
#include <stdint.h>

/* "OpenBLAS 0.3.21 ... (2 threads)" or "cblas (<library>)": what was linked; NULL when not built. */
const char *bench_blas_name(void);

/* Threads the BLAS uses (0 when it cannot say). */
int bench_blas_threads(void);

/* For each of `heads` independent heads (q, k, v, o each [heads][n][d], contiguous fp32):
 *   S = scale * Q K^T  (cblas_sgemm into s, n x n floats: the one matrix it allocates, reused per head)
 *   P = softmax of each row of S, over the keys j <= i when causal (the masked part is set to 0),
 *       the rows split over as many threads as the BLAS uses
 *   O = P V            (cblas_sgemm), each row then divided by its softmax sum.
 * s must hold n * n floats. */
void bench_blas_attention(const float *q, const float *k, const float *v, float *o, size_t heads,
                          uint32_t n, uint32_t d, float scale, int causal, float *s);

#endif /* CLFLASH_BENCH_BLAS_H */
