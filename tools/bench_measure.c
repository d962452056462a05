/*
 * bench_measure.c - clflash-bench's main mode at work: the device's facts, the device tensors, one
 * call of each algorithm, the timed runs, and the comparison of the algorithms' outputs.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#endif

#include "bench_flash.h"
#ifdef CLFLASH_BENCH_BLAS
#include "bench_blas.h"
#endif

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
 * Host helpers: a clock and a checked product.
 * ========================================================================================== */

/* Seconds on a monotonic clock (only differences mean anything). */
double now_seconds(void)
{
#ifdef _WIN32
    LARGE_INTEGER freq, count;
    QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&count);
    return (double)count.QuadPart / (double)freq.QuadPart;
#else
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        fprintf(stderr, PROG ": clock_gettime(CLOCK_MONOTONIC) failed: %s\n", strerror(errno));
        exit(1);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#endif
}

/* a*b, or 0 with *overflow set when the product does not fit 64 bits. */
uint64_t mul_checked(uint64_t a, uint64_t b, int *overflow)
{
    if (a != 0 && b > UINT64_MAX / a) {
        *overflow = 1;
        return 0;
    }
    return a * b;
}

/* ============================================================================================
 * The device's facts.
 * ========================================================================================== */

/* Reads every fact; on failure names the query in *what and returns its error. */
cl_int read_facts(cl_device_id dev, device_facts *f, const char **what)
{
    cl_int err;
#define STRING_FACT(param, field)                                                                  \
    if ((err = cl_info_string(0, dev, param, &f->field)) != CL_SUCCESS) {                              \
        *what = "clGetDeviceInfo(" #param ")";                                                     \
        return err;                                                                                \
    }
#define SCALAR_FACT(param, field)                                                                  \
    if ((err = clGetDeviceInfo(dev, param, sizeof f->field, &f->field, NULL)) != CL_SUCCESS) {    \
        *what = "clGetDeviceInfo(" #param ")";                                                     \
        return err;                                                                                \
    }
    STRING_FACT(CL_DEVICE_NAME, name)
    STRING_FACT(CL_DEVICE_VENDOR, vendor)
    STRING_FACT(CL_DRIVER_VERSION, driver)
    STRING_FACT(CL_DEVICE_VERSION, version)
    SCALAR_FACT(CL_DEVICE_MAX_COMPUTE_UNITS, compute_units)
    SCALAR_FACT(CL_DEVICE_LOCAL_MEM_SIZE, local_mem)
    SCALAR_FACT(CL_DEVICE_MAX_MEM_ALLOC_SIZE, max_alloc)
    SCALAR_FACT(CL_DEVICE_GLOBAL_MEM_SIZE, global_mem)
#undef STRING_FACT
#undef SCALAR_FACT
    return CL_SUCCESS;
}

void free_facts(device_facts *f)
{
    free(f->name);
    free(f->vendor);
    free(f->driver);
    free(f->version);
}

/* ============================================================================================
 * Measuring.
 * ========================================================================================== */

static void set_failure(result *r, clflash_status st, const char *detail)
{
    r->status = st;
    free(r->detail);
    r->detail = xstrdup(detail && *detail ? detail : "");
}

/* A baseline running out of memory is one of the outcomes the tool exists to show. */
static int is_capacity_failure(clflash_status st)
{
    return st == CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE || st == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
           st == CL_OUT_OF_RESOURCES || st == CL_OUT_OF_HOST_MEMORY || st == CL_INVALID_BUFFER_SIZE ||
           st == CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
}

int has_algo(const options *o, bench_algo a)
{
    for (size_t i = 0; i < o->nalgo; i++)
        if (o->algos[i] == a)
            return 1;
    return 0;
}

void describe_desc(const options *o, uint32_t n, clflash_attention_desc *d)
{
    memset(d, 0, sizeof *d); /* contiguous layouts, scale 1/sqrt(d), heads_kv = heads */
    d->struct_size = sizeof *d;
    d->batch = o->batch;
    d->heads_q = o->heads;
    d->seq_q = d->seq_k = n;
    d->head_dim = o->head_dim;
    d->dtype = o->dtype;
    d->flags = o->causal ? CLFLASH_CAUSAL : 0u;
    d->block = o->have_block ? o->block : 0u;
}

/* Floating-point operations of one call: 4*b*h*n*n*d for the forward (two matrix products),
 * halved for causal; the backward counts 2.5 times that (five products against two). */
static double call_flops(const options *o, const clflash_attention_desc *d)
{
    double flops = 4.0 * d->batch * d->heads_q * (double)d->seq_q * (double)d->seq_k * d->head_dim;
    if (o->causal)
        flops *= 0.5;
    return o->backward ? 2.5 * flops : flops;
}

/* Bytes clflash_backward_naive allocates, by its documented rule: an fp32 P and dP matrix for as
 * many heads at a time as one allocation (and a quarter of the device's memory) allows, and fp32
 * accumulators for dQ, dK and dV. UINT64_MAX when it does not fit 64 bits. */
static uint64_t naive_backward_temp_bytes(const bench *bn, const clflash_attention_desc *d)
{
    int overflow = 0;
    const uint64_t per_head = clflash_score_matrix_bytes(d->seq_q, d->seq_k, sizeof(float));
    const uint64_t total = (uint64_t)d->batch * d->heads_q;
    uint64_t chunk, acc;
    if (per_head == UINT64_MAX || per_head == 0 || per_head > bn->facts.max_alloc)
        return UINT64_MAX;
    chunk = bn->facts.max_alloc / per_head;
    if (bn->facts.global_mem / 4 / per_head < chunk)
        chunk = bn->facts.global_mem / 4 / per_head;
    if (chunk > total)
        chunk = total;
    if (chunk > 65535)
        chunk = 65535;
    if (chunk == 0)
        chunk = 1;
    acc = mul_checked(3 * sizeof(float), mul_checked(mul_checked(total, d->seq_q, &overflow), d->head_dim,
                                                     &overflow), &overflow);
    return overflow ? UINT64_MAX : 2 * chunk * per_head + acc;
}

/* The process's peak resident set so far (getrusage's ru_maxrss), in bytes; 0 where unknown. */
static uint64_t peak_rss_bytes(void)
{
#ifdef CLFLASH_BENCH_HAVE_RUSAGE
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0)
        return (uint64_t)ru.ru_maxrss * 1024u; /* kilobytes on Linux and the BSDs */
#endif
    return 0;
}

static cl_int release_mem(cl_mem *m)
{
    cl_int err = CL_SUCCESS;
    if (*m)
        err = clReleaseMemObject(*m);
    *m = NULL;
    return err;
}

static void release_tensors(bench *bn, tensors *t)
{
    cl_mem *all[9] = {&t->q, &t->k, &t->v, &t->o, &t->d_o, &t->lse, &t->dq, &t->dk, &t->dv};
    for (int i = 0; i < 9; i++) {
        cl_int err = release_mem(all[i]);
        if (err != CL_SUCCESS) {
            fprintf(stderr, PROG ": clReleaseMemObject failed with %d (%s)\n", (int)err,
                    clflash_status_string(err));
            bn->failed = 1;
        }
    }
    free(t->hq);
    free(t->hk);
    free(t->hv);
    free(t->ho);
    free(t->scores);
    t->hq = t->hk = t->hv = t->ho = t->scores = NULL;
}

/* A device buffer of `bytes`, written from `host` when it is not NULL. */
static cl_int make_buffer(bench *bn, cl_mem_flags flags, size_t bytes, const void *host, cl_mem *out,
                          const char *name, char **detail)
{
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(bn->cl, flags, bytes, NULL, &err);
    if (err == CL_SUCCESS && *out == NULL)
        err = CL_INVALID_MEM_OBJECT;
    if (err != CL_SUCCESS) {
        *detail = xprintf("clCreateBuffer for %s (%zu bytes) failed", name, bytes);
        return err;
    }
    if (host && (err = clEnqueueWriteBuffer(bn->queue, *out, CL_TRUE, 0, bytes, host, 0, NULL, NULL)) !=
                    CL_SUCCESS)
        *detail = xprintf("writing %s (%zu bytes) to the device failed", name, bytes);
    return err;
}

/* Allocates the device tensors (Q, K, V, O; with --backward also dO, lse, dQ, dK, dV) and writes
 * the inputs; with blas keeps fp32 copies of Q, K, V on the host and allocates its output and score
 * matrix (a failure there only fails the blas row). On failure returns the status with *detail set
 * and leaves nothing allocated. */
static clflash_status make_tensors(bench *bn, const clflash_attention_desc *d, tensors *t,
                                   char **detail)
{
    static const char *const names[4] = {"Q", "K", "V", "dO"};
    const options *o = bn->opt;
    const int blas = has_algo(o, ALGO_BLAS);
    const size_t elem = clflash_dtype_size(d->dtype);
    int overflow = 0;
    uint64_t count = mul_checked(mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q,
                                             &overflow),
                                 d->head_dim, &overflow);
    uint64_t bytes = mul_checked(count, elem, &overflow);
    uint64_t rows = mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q, &overflow);
    void *host;
    cl_int err = CL_SUCCESS;

    memset(t, 0, sizeof *t);
    if (overflow || bytes > SIZE_MAX || rows > SIZE_MAX / sizeof(float)) {
        *detail = xstrdup("one tensor's size does not fit this host's address space");
        return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (bytes > bn->facts.max_alloc) {
        *detail = xprintf("each of Q, K, V, O needs %" PRIu64 " bytes; the device's largest "
                          "allocation is %" PRIu64, bytes, (uint64_t)bn->facts.max_alloc);
        return CL_INVALID_BUFFER_SIZE;
    }
    t->count = (size_t)count;
    t->bytes = (size_t)bytes;
    t->lse_bytes = (size_t)rows * sizeof(float);
    for (int i = 0; i < (o->backward ? 4 : 3) && err == CL_SUCCESS; i++) {
        cl_mem *dst = i == 0 ? &t->q : i == 1 ? &t->k : i == 2 ? &t->v : &t->d_o;
        host = malloc(t->bytes);
        if (host == NULL) {
            *detail = xprintf("allocating %" PRIu64 " bytes of host memory for the inputs failed", bytes);
            release_tensors(bn, t);
            return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        }
        /* a different stream per tensor, the same for every run of the tool */
        fill_random(host, t->count, d->dtype, UINT64_C(0x636C666C61736800) + (uint64_t)i);
        err = make_buffer(bn, CL_MEM_READ_ONLY, t->bytes, host, dst, names[i], detail);
        if (blas && i < 3 && err == CL_SUCCESS) /* blas is fp32 only: the host copy is its input */
            *(i == 0 ? &t->hq : i == 1 ? &t->hk : &t->hv) = host;
        else
            free(host);
    }
    if (err == CL_SUCCESS)
        err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->o, "O", detail);
    if (err == CL_SUCCESS && o->backward) {
        err = make_buffer(bn, CL_MEM_READ_WRITE, t->lse_bytes, NULL, &t->lse, "lse", detail);
        if (err == CL_SUCCESS)
            err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->dq, "dQ", detail);
        if (err == CL_SUCCESS)
            err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->dk, "dK", detail);
        if (err == CL_SUCCESS)
            err = make_buffer(bn, CL_MEM_READ_WRITE, t->bytes, NULL, &t->dv, "dV", detail);
    }
    if (err != CL_SUCCESS) {
        release_tensors(bn, t);
        return err;
    }
    if (blas) {
        uint64_t score_bytes = clflash_score_matrix_bytes(d->seq_q, d->seq_k, sizeof(float));
        t->scores_status = CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        t->ho = malloc(t->bytes);
        if (t->ho && score_bytes <= SIZE_MAX && (t->scores = malloc((size_t)score_bytes)) != NULL)
            t->scores_status = CLFLASH_SUCCESS;
    }
    return CLFLASH_SUCCESS;
}

/* The blas algorithm on the host copies of the inputs (bench_blas.c), into t->ho. */
static void bench_blas_run(const tensors *t, const clflash_attention_desc *d, int causal)
{
#ifdef CLFLASH_BENCH_BLAS
    bench_blas_attention(t->hq, t->hk, t->hv, t->ho, (size_t)d->batch * d->heads_q, d->seq_q, d->head_dim,
                         (float)(1.0 / sqrt((double)d->head_dim)), causal, t->scores);
#else
    (void)t;
    (void)d;
    (void)causal;
#endif
}

/* One call of `algo` (its backward when `backward`) to completion; *seconds gets its wall time
 * from the enqueue (or the BLAS call) to clFinish (or its return). */
static int run_once(bench *bn, bench_algo algo, int backward, const clflash_attention_desc *d,
                    const tensors *t, result *r, double *seconds)
{
    const options *o = bn->opt;
    double t0 = now_seconds(), t1;
    clflash_status st = CLFLASH_SUCCESS;
    cl_int err = CL_SUCCESS;
    const char *what;

    if (algo == ALGO_BLAS) {
        bench_blas_run(t, d, o->causal);
        what = NULL;
    } else if (backward) {
        st = (algo == ALGO_FLASH ? clflash_backward : clflash_backward_naive)(
            bn->ctx, d, NULL, t->q, t->k, t->v, t->o, t->d_o, t->lse, t->dq, t->dk, t->dv, 0, NULL, NULL);
        what = algo == ALGO_FLASH ? "clflash_backward" : "clflash_backward_naive";
    } else {
        st = (algo == ALGO_FLASH ? clflash_forward : clflash_forward_naive)(
            bn->ctx, d, NULL, t->q, t->k, t->v, t->o, t->lse, 0, NULL, NULL);
        what = algo == ALGO_FLASH ? "clflash_forward" : "clflash_forward_naive";
    }
    if (st != CLFLASH_SUCCESS) {
        set_failure(r, st, clflash_last_error_detail());
        return 0;
    }
    if (what)
        err = clFinish(bn->queue);
    t1 = now_seconds();
    if (err != CL_SUCCESS) {
        char *msg = xprintf("clFinish after %s failed", what);
        set_failure(r, err, msg);
        free(msg);
        return 0;
    }
    if (seconds)
        *seconds = t1 - t0;
    return 1;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Warm-up, then timed runs until min_time has passed (MIN_RUNS .. MAX_RUNS of them); the median,
 * min and max in milliseconds. 0 if a run failed (r says why). */
static int time_runs(bench *bn, bench_algo algo, int backward, const clflash_attention_desc *d,
                     const tensors *t, result *r, double *median, double *min, double *max, unsigned *runs)
{
    const options *o = bn->opt;
    unsigned n = 0;
    double start;

    for (uint32_t w = 0; w < o->warmup; w++)
        if (!run_once(bn, algo, backward, d, t, r, NULL))
            return 0;
    start = now_seconds();
    while (n < MIN_RUNS || (n < MAX_RUNS && now_seconds() - start < o->min_time)) {
        if (!run_once(bn, algo, backward, d, t, r, &bn->times[n]))
            return 0;
        n++;
    }
    qsort(bn->times, n, sizeof bn->times[0], compare_double);
    *runs = n;
    *min = bn->times[0] * 1e3;
    *max = bn->times[n - 1] * 1e3;
    *median = (n % 2 ? bn->times[n / 2] : 0.5 * (bn->times[n / 2 - 1] + bn->times[n / 2])) * 1e3;
    return 1;
}

/* Times one row: the forward, or with --backward the algorithm's forward (which also leaves the O
 * and lse its backward reads) and then its backward. */
static void time_algo(bench *bn, const clflash_attention_desc *d, const tensors *t, result *r)
{
    const options *o = bn->opt;
    double lo, hi;
    unsigned n;

    if (o->backward) {
        if (!time_runs(bn, r->algo, 0, d, t, r, &r->fwd_ms_median, &lo, &hi, &n))
            return;
        r->have_fwd = 1;
    }
    if (!time_runs(bn, r->algo, o->backward, d, t, r, &r->ms_median, &r->ms_min, &r->ms_max, &r->runs))
        return;
    r->peak_rss = peak_rss_bytes();
    if (r->ms_median > 0.0) {
        r->tflops = call_flops(o, d) / (r->ms_median * 1e-3) / 1e12;
        if (r->modeled_bytes)
            r->gbps = (double)r->modeled_bytes / (r->ms_median * 1e-3) / 1e9;
    }
}

/* ---- checking one algorithm's output against another's ---------------------------------------- */

/* Runs `algo` once more with its outputs first filled with NaN bit patterns (so an element that was
 * not written shows) and copies them to new host arrays: O, or dQ, dK, dV with --backward. Returns
 * NULL with *error set on failure. */
static void **read_outputs(bench *bn, bench_algo algo, const clflash_attention_desc *d, const tensors *t,
                           size_t *nout, char **error)
{
    const int backward = bn->opt->backward;
    const cl_mem bufs[3] = {backward ? t->dq : t->o, t->dk, t->dv};
    const cl_uchar nan_byte = 0xFF; /* all-ones is a NaN in f32, f16 and bf16 alike */
    void **out;
    clflash_status st;
    cl_int err = CL_SUCCESS;
    result scratch;

    *nout = backward ? 3 : 1;
    out = xmalloc(3 * sizeof *out);
    out[0] = out[1] = out[2] = NULL;
    if (algo == ALGO_BLAS) {
        bench_blas_run(t, d, bn->opt->causal);
        out[0] = xmalloc(t->bytes);
        memcpy(out[0], t->ho, t->bytes);
        return out;
    }
    for (size_t i = 0; i < *nout && err == CL_SUCCESS; i++)
        err = clEnqueueFillBuffer(bn->queue, bufs[i], &nan_byte, 1, 0, t->bytes, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        *error = xprintf("clEnqueueFillBuffer failed with %d (%s)", (int)err, clflash_status_string(err));
        goto fail;
    }
    memset(&scratch, 0, sizeof scratch);
    if (!run_once(bn, algo, backward, d, t, &scratch, NULL)) {
        st = scratch.status;
        *error = xprintf("%s failed: %s (%d): %s", algo_name(algo), clflash_status_string(st), (int)st,
                         scratch.detail ? scratch.detail : "");
        free(scratch.detail);
        goto fail;
    }
    for (size_t i = 0; i < *nout && err == CL_SUCCESS; i++) {
        out[i] = malloc(t->bytes);
        if (out[i] == NULL) {
            *error = xprintf("allocating %zu bytes of host memory for %s's output failed", t->bytes,
                             algo_name(algo));
            goto fail;
        }
        err = clEnqueueReadBuffer(bn->queue, bufs[i], CL_TRUE, 0, t->bytes, out[i], 0, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        *error = xprintf("reading %s's output failed with %d (%s)", algo_name(algo), (int)err,
                         clflash_status_string(err));
        goto fail;
    }
    return out;
fail:
    for (int i = 0; i < 3; i++)
        free(out[i]);
    free(out);
    return NULL;
}

static void free_outputs(void **out)
{
    if (out == NULL)
        return;
    for (int i = 0; i < 3; i++)
        free(out[i]);
    free(out);
}

/* The largest |a - b| over every output into r, or r->check_error when an output is not finite. */
/* The largest |difference| two algorithms' outputs may show, as a fraction of max(1, the largest
 * |value| of the output compared with): by the storage type, a few of its roundings beyond what the
 * two orders of summation give (fp32: flash and naive differ by about 1e-7 at n = 4096). */
static double default_tolerance(clflash_dtype t)
{
    return t == CLFLASH_F16 ? 1e-2 : t == CLFLASH_BF16 ? 6e-2 : 1e-4;
}

/* The largest |a - b| over every output into r; r->check_error when an output is not finite or
 * the difference is above the tolerance (--tolerance, else default_tolerance) times
 * max(1, max |b|). */
static void compare_outputs(void *const *a, void *const *b, size_t nout, const tensors *t,
                            const clflash_attention_desc *d, bench_algo with, double tolerance, result *r)
{
    size_t nonfinite[2] = {0, 0};
    double worst = 0.0, largest = 0.0;
    for (size_t k = 0; k < nout; k++)
        for (size_t i = 0; i < t->count; i++) {
            double f = element_value(a[k], i, d->dtype), g = element_value(b[k], i, d->dtype);
            nonfinite[0] += !isfinite(f);
            nonfinite[1] += !isfinite(g);
            if (isfinite(f) && isfinite(g) && fabs(f - g) > worst)
                worst = fabs(f - g);
            if (isfinite(g) && fabs(g) > largest)
                largest = fabs(g);
        }
    r->compared_with = algo_name(with);
    if (nonfinite[0] || nonfinite[1]) {
        r->check_error = xprintf("non-finite outputs (NaN, infinity or never written): %s %zu, %s %zu of %zu",
                                 algo_name(r->algo), nonfinite[0], algo_name(with), nonfinite[1],
                                 nout * t->count);
        return;
    }
    r->checked = 1;
    r->max_abs_diff = worst;
    const double tol = tolerance > 0.0 ? tolerance : default_tolerance(d->dtype);
    const double limit = tol * (largest > 1.0 ? largest : 1.0);
    if (!(worst <= limit))
        r->check_error = xprintf("mismatch: the largest |%s - %s| is %.3g, above the tolerance %.3g (%g of "
                                 "max(1, the largest |%s| value %.3g))",
                                 algo_name(r->algo), algo_name(with), worst, limit, tol, algo_name(with), largest);
}

/* Compares the algorithms of one sequence length on the same inputs: flash against naive (on the
 * flash row) and blas against flash, or against naive without flash (on the blas row). With
 * --backward, flash's forward first writes the O and lse both backwards then read, and the
 * comparison covers dQ, dK and dV. */
static void check_seq(bench *bn, const clflash_attention_desc *d, const tensors *t, result *rows)
{
    const options *o = bn->opt;
    void **out[NUM_ALGOS] = {NULL, NULL, NULL};
    result *row[NUM_ALGOS] = {NULL, NULL, NULL};
    size_t nout = 1;

    for (size_t a = 0; a < o->nalgo; a++)
        if (rows[a].status == CLFLASH_SUCCESS)
            row[rows[a].algo] = &rows[a];
    if (o->backward && row[ALGO_FLASH]) {
        result scratch;
        memset(&scratch, 0, sizeof scratch);
        if (!run_once(bn, ALGO_FLASH, 0, d, t, &scratch, NULL)) {
            row[ALGO_FLASH]->check_error = xprintf("the forward before the check failed: %s",
                                                   scratch.detail ? scratch.detail : "");
            free(scratch.detail);
            bn->failed = 1;
            return;
        }
    }
    for (int a = 0; a < NUM_ALGOS; a++) {
        char *error = NULL;
        if (row[a] == NULL)
            continue;
        out[a] = read_outputs(bn, (bench_algo)a, d, t, &nout, &error);
        if (out[a] == NULL) {
            row[a]->check_error = error;
            bn->failed = 1;
        }
    }
    if (out[ALGO_FLASH] && out[ALGO_NAIVE])
        compare_outputs(out[ALGO_FLASH], out[ALGO_NAIVE], nout, t, d, ALGO_NAIVE, o->tolerance, row[ALGO_FLASH]);
    if (out[ALGO_BLAS] && (out[ALGO_FLASH] || out[ALGO_NAIVE])) {
        bench_algo with = out[ALGO_FLASH] ? ALGO_FLASH : ALGO_NAIVE;
        compare_outputs(out[ALGO_BLAS], out[with], nout, t, d, with, o->tolerance, row[ALGO_BLAS]);
    }
    for (int a = 0; a < NUM_ALGOS; a++) {
        if (row[a] && row[a]->check_error)
            bn->failed = 1;
        free_outputs(out[a]);
    }
}

static void progress_start(bench *bn, const result *r)
{
    fprintf(stderr, "[%zu/%zu] %s%s n=%" PRIu32 " ... ", bn->done + 1, bn->nresults, algo_name(r->algo),
            bn->opt->backward ? " backward" : "", r->seq);
    fflush(stderr);
}

static void progress_end(bench *bn, const result *r)
{
    char ms[32];
    bn->done++;
    if (r->status == CLFLASH_SUCCESS) {
        format_ms(r->ms_median, ms, sizeof ms);
        fprintf(stderr, "%s ms median of %u runs", ms, r->runs);
        if (r->have_fwd) {
            format_ms(r->fwd_ms_median, ms, sizeof ms);
            fprintf(stderr, " (forward %s ms)", ms);
        }
        fputc('\n', stderr);
    } else {
        fprintf(stderr, "failed: %s\n", clflash_status_string(r->status));
    }
}

/* Fills what a row knows before it runs: the memory it allocates and the traffic model. */
static void describe_row(bench *bn, const clflash_attention_desc *d, const clflash_plan *plan,
                         clflash_status plan_st, result *r)
{
    const options *o = bn->opt;
    int overflow = 0;
    uint64_t rows = mul_checked(mul_checked(d->batch, d->heads_q, &overflow), d->seq_q, &overflow);
    switch (r->algo) {
    case ALGO_FLASH:
        /* the forward allocates nothing; the backward its D vector, one float per query row */
        r->temp_bytes = o->backward ? mul_checked(rows, sizeof(float), &overflow) : 0;
        r->have_temp = !overflow;
        if (plan_st == CLFLASH_SUCCESS) {
            r->have_plan = 1;
            r->plan = *plan;
            if (!o->backward)
                /* K and V are read once per query block: block_q rows (B, except on tensor cores) */
                r->modeled_bytes =
                    clflash_traffic_bytes(d, CLFLASH_ALGO_FLASH, plan->block_q ? plan->block_q : plan->block);
        }
        break;
    case ALGO_NAIVE:
        r->temp_bytes = o->backward ? naive_backward_temp_bytes(bn, d) : clflash_naive_workspace_bytes(bn->ctx, d);
        r->have_temp = r->temp_bytes != 0 && r->temp_bytes != UINT64_MAX;
        if (!o->backward)
            r->modeled_bytes = clflash_traffic_bytes(d, CLFLASH_ALGO_NAIVE,
                                                     plan_st == CLFLASH_SUCCESS ? plan->block : 0u);
        break;
    case ALGO_BLAS:
        /* one head's fp32 score matrix, reused head after head; it moves S as naive does (written,
         * read for the maximum, read and written as P, read by P V), so naive's model applies */
        r->temp_bytes = clflash_score_matrix_bytes(d->seq_q, d->seq_k, sizeof(float));
        r->have_temp = r->temp_bytes != UINT64_MAX;
        r->modeled_bytes = clflash_traffic_bytes(d, CLFLASH_ALGO_NAIVE, 0u);
        break;
    }
    if (r->modeled_bytes == UINT64_MAX)
        r->modeled_bytes = 0;
}

/* Everything for one sequence length: plan, tensors, each algorithm, the comparison. */
void bench_seq(bench *bn, size_t si)
{
    const options *o = bn->opt;
    const uint32_t n = o->seqs[si];
    result *rows = bn->results + si * o->nalgo;
    clflash_attention_desc d;
    clflash_plan plan = {.struct_size = sizeof plan};
    clflash_status plan_st, st;
    char *plan_detail = NULL, *tensor_detail = NULL;
    tensors t;
    uint64_t score, io;
    int overflow = 0, ok = 0;

    describe_desc(o, n, &d);
    memset(&plan, 0, sizeof plan);
    plan.struct_size = sizeof plan;
    plan_st = o->backward ? clflash_plan_backward(bn->ctx, &d, &plan) : clflash_plan_attention(bn->ctx, &d, &plan);
    if (plan_st != CLFLASH_SUCCESS)
        plan_detail = xstrdup(clflash_last_error_detail());
    score = clflash_score_matrix_bytes(n, n, clflash_dtype_size(o->dtype));
    io = mul_checked(4, mul_checked(mul_checked(mul_checked(o->batch, o->heads, &overflow), n, &overflow),
                                    mul_checked(o->head_dim, clflash_dtype_size(o->dtype), &overflow),
                                    &overflow),
                     &overflow);

    for (size_t a = 0; a < o->nalgo; a++) {
        result *r = &rows[a];
        r->algo = o->algos[a];
        r->seq = n;
        r->io_bytes = overflow ? UINT64_MAX : io;
        r->score_matrix_bytes = score;
        describe_row(bn, &d, &plan, plan_st, r);
    }

    st = make_tensors(bn, &d, &t, &tensor_detail);
    for (size_t a = 0; a < o->nalgo; a++) {
        result *r = &rows[a];
        progress_start(bn, r);
        if (st != CLFLASH_SUCCESS)
            set_failure(r, st, tensor_detail);
        else if (r->algo == ALGO_FLASH && plan_st != CLFLASH_SUCCESS)
            set_failure(r, plan_st, plan_detail);
        else if (r->algo == ALGO_BLAS && t.scores_status != CLFLASH_SUCCESS)
            set_failure(r, t.scores_status, "allocating the host score matrix or output for blas failed");
        else
            time_algo(bn, &d, &t, r);
        if (r->status != CLFLASH_SUCCESS) {
            r->expected = r->algo != ALGO_FLASH && is_capacity_failure(r->status);
            if (!r->expected)
                bn->failed = 1;
        } else {
            ok++;
        }
        progress_end(bn, r);
    }
    if (st == CLFLASH_SUCCESS && !o->no_check && ok >= 2) {
        fprintf(stderr, "[check] n=%" PRIu32 ": comparing %s ... ", n, o->backward ? "dQ, dK, dV" : "O");
        fflush(stderr);
        check_seq(bn, &d, &t, rows);
        for (size_t a = 0, said = 0; a < o->nalgo; a++) {
            if (rows[a].checked)
                fprintf(stderr, "%slargest |%s - %s| %.2g", said++ ? ", " : "", algo_name(rows[a].algo),
                        rows[a].compared_with, rows[a].max_abs_diff);
            else if (rows[a].check_error)
                fprintf(stderr, "%s%s failed: %s", said++ ? ", " : "", algo_name(rows[a].algo),
                        rows[a].check_error);
        }
        fputc('\n', stderr);
    }
    if (st == CLFLASH_SUCCESS)
        release_tensors(bn, &t);
    free(plan_detail);
    free(tensor_detail);
}
