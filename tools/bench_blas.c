/*
 * bench_blas.c - materialized attention on a tuned BLAS, the baseline a CPU user would otherwise
 * reach for (see bench_blas.h). Two cblas_sgemm calls per head and a row softmax in between.
 *
 * Why a hand-written exp: glibc's expf is not vectorized without -ffast-math, and the softmax would
 * then spend more time in n*n scalar expf calls than the two sgemms spend together, which would make
 * the baseline look slower than a CPU user's real alternative. vexp_nonpositive() is a range
 * reduction to [-ln2/2, ln2/2] and a degree-6 polynomial (about 1 ulp) on eight floats at a time
 * (GCC/Clang vector extensions); the maxima and sums keep eight partial lanes. With GCC on x86-64
 * the softmax is also compiled for Haswell (AVX2, FMA) next to the baseline and chosen at load
 * time, so the binary still runs on any x86-64.
 *
 * Threads: the sgemms use the BLAS's threads (OpenBLAS: every core, or OPENBLAS_NUM_THREADS); the
 * softmax splits the rows over as many POSIX threads (one per online processor with another BLAS).
 */
#include "bench_blas.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SOFTMAX_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define SOFTMAX_CLONES
#endif

#define LANES 8
#define MAX_SOFTMAX_THREADS 64

const char *bench_blas_name(void)
{
    static char name[256];
#ifdef CLFLASH_BENCH_OPENBLAS
    snprintf(name, sizeof name, "%s", openblas_get_config());
    {
        size_t n = strlen(name);
        while (n > 0 && name[n - 1] == ' ')
            name[--n] = '\0';
    }
#else
    snprintf(name, sizeof name, "cblas (%s)", CLFLASH_BENCH_BLAS_LIBRARY);
#endif
    return name;
}

int bench_blas_threads(void)
{
#ifdef CLFLASH_BENCH_OPENBLAS
    return openblas_get_num_threads();
#else
    return 0;
#endif
}

/* Eight floats as one value (GCC and Clang vector extensions): the softmax's loops are written
 * on these so that they are vectorized whatever the optimizer decides. */
typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

static inline vf8 splat(float x)
{
    return (vf8){x, x, x, x, x, x, x, x};
}

static inline vf8 vmax(vf8 a, vf8 b)
{
    const vi8 a_larger = a > b; /* all ones where a > b */
    return (vf8)(((vi8)a & a_larger) | ((vi8)b & ~a_larger));
}

/* e^x for x <= 0 (the scores minus their row maximum): x = k ln2 + r with |r| <= ln2/2, e^r by a
 * degree-6 polynomial, 2^k put into the exponent bits. Below -87 the input is clamped there (the
 * result, under 2^-125, is nothing against a row sum of at least 1). */
static inline vf8 vexp_nonpositive(vf8 x)
{
    const vf8 round_magic = splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    vf8 kf, r, p, scale;
    vi8 bits;
    x = vmax(x, splat(-87.0f));
    kf = (x * splat(1.44269504088896341f) + round_magic) - round_magic; /* round(x / ln2) */
    r = (x - kf * splat(0.693145751953125f)) - kf * splat(1.428606765330187e-06f);
    p = splat(1.0f / 720.0f);
    p = p * r + splat(1.0f / 120.0f);
    p = p * r + splat(1.0f / 24.0f);
    p = p * r + splat(1.0f / 6.0f);
    p = p * r + splat(0.5f);
    p = p * r + splat(1.0f);
    p = p * r + splat(1.0f);
    bits = (__builtin_convertvector(kf, vi8) + 127) << 23; /* 2^k, k in [-126, 0] */
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* The same for one float (the tail of a row). */
static inline float exp_nonpositive(float x)
{
    vf8 v = vexp_nonpositive(splat(x));
    return v[0];
}

/* Row softmax in place over row[0, len), scaled so that it sums to 1; row[len, n) set to 0. */
SOFTMAX_CLONES static void softmax_row(float *row, uint32_t len, uint32_t n)
{
    const uint32_t body = len / LANES * LANES;
    vf8 acc = splat(-INFINITY), x, vm, vinv;
    float m = -INFINITY, sum = 0.0f, inv;
    uint32_t j;

    for (j = 0; j < body; j += LANES) {
        memcpy(&x, row + j, sizeof x);
        acc = vmax(acc, x);
    }
    for (int l = 0; l < LANES; l++)
        m = acc[l] > m ? acc[l] : m;
    for (; j < len; j++)
        m = row[j] > m ? row[j] : m;

    vm = splat(m);
    acc = splat(0.0f);
    for (j = 0; j < body; j += LANES) {
        memcpy(&x, row + j, sizeof x);
        x = vexp_nonpositive(x - vm);
        memcpy(row + j, &x, sizeof x);
        acc += x;
    }
    for (int l = 0; l < LANES; l++)
        sum += acc[l];
    for (; j < len; j++) {
        row[j] = exp_nonpositive(row[j] - m);
        sum += row[j];
    }

    inv = 1.0f / sum;
    vinv = splat(inv);
    for (j = 0; j < body; j += LANES) {
        memcpy(&x, row + j, sizeof x);
        x *= vinv;
        memcpy(row + j, &x, sizeof x);
    }
    for (; j < len; j++)
        row[j] *= inv;
    for (; j < n; j++)
        row[j] = 0.0f;
}

/* The rows [row0, row1) of one head's n x n score matrix, for one thread. */
typedef struct {
    float *s;
    uint32_t n, row0, row1;
    int causal;
} softmax_job;

static void *softmax_rows(void *arg)
{
    const softmax_job *job = arg;
    for (uint32_t i = job->row0; i < job->row1; i++)
        softmax_row(job->s + (size_t)i * job->n, job->causal ? i + 1 : job->n, job->n);
    return NULL;
}

/* Threads for the softmax: as many as the BLAS uses, else one per online processor. */
static int softmax_threads(void)
{
    int t = bench_blas_threads();
    if (t <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        t = online > 0 ? (int)online : 1;
    }
    return t > MAX_SOFTMAX_THREADS ? MAX_SOFTMAX_THREADS : t;
}

/* Every row of S, split over the threads; with causal masking row i has i + 1 keys, so the split
 * points are at n * sqrt(k / threads), which gives each thread about the same number of scores. */
static void softmax_all(float *s, uint32_t n, int causal)
{
    softmax_job jobs[MAX_SOFTMAX_THREADS];
    pthread_t threads[MAX_SOFTMAX_THREADS];
    int started[MAX_SOFTMAX_THREADS];
    int t = softmax_threads();
    if ((uint32_t)t > n / 16)
        t = n / 16 > 0 ? (int)(n / 16) : 1;
    for (int k = 0; k < t; k++) {
        const double f0 = (double)k / t, f1 = (double)(k + 1) / t;
        jobs[k].s = s;
        jobs[k].n = n;
        jobs[k].causal = causal;
        jobs[k].row0 = (uint32_t)(n * (causal ? sqrt(f0) : f0));
        jobs[k].row1 = k + 1 == t ? n : (uint32_t)(n * (causal ? sqrt(f1) : f1));
    }
    for (int k = 1; k < t; k++) /* a thread that cannot start leaves its rows to this one */
        started[k] = pthread_create(&threads[k], NULL, softmax_rows, &jobs[k]) == 0;
    softmax_rows(&jobs[0]);
    for (int k = 1; k < t; k++) {
        if (started[k])
            pthread_join(threads[k], NULL);
        else
            softmax_rows(&jobs[k]);
    }
}

void bench_blas_attention(const float *q, const float *k, const float *v, float *o, size_t heads,
                          uint32_t n, uint32_t d, float scale, int causal, float *s)
{
    const size_t per_head = (size_t)n * d;
    for (size_t h = 0; h < heads; h++) {
        const float *qh = q + h * per_head, *kh = k + h * per_head, *vh = v + h * per_head;
        float *oh = o + h * per_head;
        /* S[n][n] = scale * Q[n][d] K[n][d]^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)d, scale, qh, (int)d, kh,
                    (int)d, 0.0f, s, (int)n);
        softmax_all(s, n, causal);
        /* O[n][d] = P[n][n] V[n][d] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)d, (int)n, 1.0f, s, (int)n, vh,
                    (int)d, 0.0f, oh, (int)d);
    }
}
