/*
 * clflash_ring_bench.c - clflash-ring-bench: times clflash_ring_forward and clflash_ring_backward
 * under mpirun and reports, per ring step, how long the device computed and how long the
 * transfers took, how much of the transfer time compute hid, and the efficiency against one rank
 * doing the whole sequence alone (clflash_forward / clflash_backward on rank 0's device).
 *
 * Why a program of its own rather than a clflash-bench mode: it needs MPI (mpirun, MPI_Init), and
 * clflash-bench must keep running on machines without it; this one is built only where
 * clflash_mpi is. The per-step figures come from the ring's optional timing (lib/mpi/ring_stats.h):
 * OpenCL profiling markers around each step's kernels, the uploads' profiling, and the time MPI
 * took to deliver each message. The definitions the report uses:
 *   transfer (alone) = the same bytes moved with nothing else running, by the transport the ring
 *              took: one step's K/V shard sent to rank r + 1 and received from r - 1 (MPI_Sendrecv)
 *              and uploaded, or (the node-local window) uploaded from rank r - 1's segment of a
 *              shared-memory window; backward: plus the fp32 dK/dV accumulator sent and
 *              received (or, shared, taken from rank r - 1's segment), uploaded and read back;
 *              times the P - 1 steps that move data while another computes; the slowest rank's;
 *   exposed  = on one rank, the device's wait between steps (backward: plus the accumulator's
 *              device segment, which includes any wait for its bytes);
 *   overlap  = 1 - exposed / transfer, clamped to [0, 1]; the worst rank's;
 *   efficiency = one rank's time for the whole sequence / (P x the slowest rank's ring time).
 * The in-ring MPI times (posting to arrival) are reported too, but they include waiting for the
 * neighbour to get to its send, so they are not the transfer's cost.
 * Times are medians over --reps calls after --warmup calls. Inputs are random; results are not
 * checked here (tests/test_ring.c does that).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "clflash_mpi.h"
#include "ring_stats.h"
#include "tool_common.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The per-rank, per-pass figures gathered to rank 0: call_s, device_s, status, then per step the
 * six fields of clflash_ring_step_stats. */
#define STEP_FIELDS 6
#define HEAD_FIELDS 3

typedef struct {
    uint32_t seq, batch, heads, heads_kv, head_dim, reps, warmup;
    clflash_dtype dtype;
    int causal, zigzag, forward, backward, single, json;
    const char *device;
} options;

static void help(FILE *f)
{
    fprintf(f,
            "usage: mpirun -n P clflash-ring-bench [options]\n"
            "Times clflash_ring_forward and clflash_ring_backward over P ranks: per-step compute and\n"
            "transfer times, the share of transfer time hidden behind compute, and the efficiency\n"
            "against one rank doing the whole sequence alone.\n"
            "  --seq N           tokens of the whole sequence (default 2048; zigzag: a multiple of 2P)\n"
            "  --batch N         (default 1)\n"
            "  --heads N         query heads (default 8)\n"
            "  --heads-kv N      K/V heads (default: --heads)\n"
            "  --head-dim N      (default 64)\n"
            "  --dtype T         f32, f16 or bf16 (default f16)\n"
            "  --causal | --no-causal   (default causal)\n"
            "  --mapping M       zigzag or contiguous (default zigzag)\n"
            "  --pass P          forward, backward or both (default both)\n"
            "  --reps N          timed calls (default 5), --warmup N untimed calls first (default 1)\n"
            "  --no-single       skip the one-rank run (and the efficiency)\n"
            "  --device SEL      CLFLASH_DEVICE for every rank; %%r in it becomes the rank\n"
            "  --json            JSON on rank 0's stdout instead of the table\n"
            "  --help, --version\n");
}

static int parse_options(int argc, char **argv, options *o)
{
    static const char *const flags[] = {"--causal", "--no-causal", "--no-single", "--json", NULL};
    static const char *const valued[] = {"--seq",    "--batch",  "--heads", "--heads-kv", "--head-dim", "--dtype",
                                         "--mapping", "--pass",  "--reps",  "--warmup",   "--device",   NULL};
    *o = (options){2048, 1, 8, 0, 64, 5, 1, CLFLASH_F16, 1, 1, 1, 1, 1, 0, NULL};
    for (int i = 1; i < argc; i++) {
        const char *name, *value;
        const int r = tool_next_option(argc, argv, &i, flags, valued, help, &name, &value);
        if (r >= 0)
            return r == 0 ? -1 : r;
        uint64_t n = 0;
        if (strcmp(name, "--causal") == 0 || strcmp(name, "--no-causal") == 0) {
            o->causal = strcmp(name, "--causal") == 0;
        } else if (strcmp(name, "--no-single") == 0) {
            o->single = 0;
        } else if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--dtype") == 0) {
            if (!parse_dtype(value, &o->dtype) || o->dtype == CLFLASH_I8)
                return usage_error("--dtype must be f32, f16 or bf16, not '%s'", value);
        } else if (strcmp(name, "--mapping") == 0) {
            if (strcmp(value, "zigzag") != 0 && strcmp(value, "contiguous") != 0)
                return usage_error("--mapping must be zigzag or contiguous, not '%s'", value);
            o->zigzag = strcmp(value, "zigzag") == 0;
        } else if (strcmp(name, "--pass") == 0) {
            if (strcmp(value, "forward") != 0 && strcmp(value, "backward") != 0 && strcmp(value, "both") != 0)
                return usage_error("--pass must be forward, backward or both, not '%s'", value);
            o->forward = strcmp(value, "backward") != 0;
            o->backward = strcmp(value, "forward") != 0;
        } else if (strcmp(name, "--device") == 0) {
            o->device = value;
        } else {
            const uint64_t lo = strcmp(name, "--warmup") == 0 ? 0 : 1;
            if (!parse_uint(value, lo, 1u << 30, &n))
                return usage_error("%s must be a whole number from %llu, not '%s'", name, (unsigned long long)lo,
                                   value);
            uint32_t *dst = strcmp(name, "--seq") == 0        ? &o->seq
                            : strcmp(name, "--batch") == 0    ? &o->batch
                            : strcmp(name, "--heads") == 0    ? &o->heads
                            : strcmp(name, "--heads-kv") == 0 ? &o->heads_kv
                            : strcmp(name, "--head-dim") == 0 ? &o->head_dim
                            : strcmp(name, "--reps") == 0     ? &o->reps
                                                              : &o->warmup;
            *dst = (uint32_t)n;
        }
    }
    if (o->heads_kv == 0)
        o->heads_kv = o->heads;
    return 0;
}

/* A device buffer of n elements of t filled with random values (seeded), or NULL (printed). */
static cl_mem random_buffer(clflash_context *c, uint64_t n, clflash_dtype t, uint64_t seed)
{
    const size_t bytes = (size_t)n * clflash_dtype_size(t);
    void *h = xmalloc(bytes ? bytes : 1);
    bench_fill_random(h, (size_t)n, t, seed);
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes ? bytes : 1, h,
                              &err);
    free(h);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "%s: clCreateBuffer of %zu bytes failed (%d)\n", tool_name(), bytes, err);
        return NULL;
    }
    return m;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One rank's figures of one pass: HEAD_FIELDS, then STEP_FIELDS per step, each the median over the
 * timed calls. */
static int time_ring(const options *o, int backward, clflash_context *c, MPI_Comm comm, const clflash_ring_desc *d,
                     cl_mem *t, int P, double *out, char transport[8], int *pinned)
{
    const unsigned reps = o->reps, nf = HEAD_FIELDS + STEP_FIELDS * (unsigned)P;
    double *all = xmalloc(sizeof(double) * nf * reps), *col = xmalloc(sizeof(double) * reps);
    clflash_ring_step_stats *steps = xmalloc(sizeof *steps * (size_t)P);
    clflash_ring_stats stats = {0};
    stats.cap = P;
    stats.step = steps;
    clflash_status st = CLFLASH_SUCCESS, timing = CLFLASH_SUCCESS;
    for (unsigned i = 0; i < o->warmup + reps && st == CLFLASH_SUCCESS; i++) {
        const int timed = i >= o->warmup;
        clflash_ring_stats_attach(timed ? &stats : NULL);
        /* the forward's outputs o (t[3]) and lse (t[4]) feed the backward */
        st = backward ? clflash_ring_backward(c, comm, d, t[0], t[1], t[2], t[3], t[5], t[4], t[6], t[7], t[8])
                      : clflash_ring_forward(c, comm, d, t[0], t[1], t[2], t[3], t[4]);
        clflash_ring_stats_attach(NULL);
        if (!timed || st != CLFLASH_SUCCESS)
            continue;
        if (stats.status != CLFLASH_SUCCESS && timing == CLFLASH_SUCCESS)
            timing = stats.status;
        memcpy(transport, stats.transport, sizeof stats.transport);
        *pinned = stats.pinned;
        double *row = all + (size_t)(i - o->warmup) * nf;
        row[0] = stats.call_s;
        row[1] = stats.device_s;
        row[2] = 0.0;
        for (int s = 0; s < P; s++) {
            const clflash_ring_step_stats *x = &steps[s];
            double *f = row + HEAD_FIELDS + STEP_FIELDS * s;
            f[0] = x->compute_s, f[1] = x->acc_s, f[2] = x->wait_s;
            f[3] = x->kv_mpi_s, f[4] = x->kv_upload_s, f[5] = x->acc_mpi_s;
        }
    }
    if (st != CLFLASH_SUCCESS)
        fprintf(stderr, "%s: %s failed: %s (%s)\n", tool_name(),
                backward ? "clflash_ring_backward" : "clflash_ring_forward", clflash_ring_status_string(st),
                clflash_ring_last_error_detail());
    for (unsigned f = 0; f < nf; f++) {
        for (unsigned r = 0; r < reps; r++)
            col[r] = st == CLFLASH_SUCCESS ? all[(size_t)r * nf + f] : 0.0;
        out[f] = median(col, reps);
    }
    out[2] = st != CLFLASH_SUCCESS ? (double)st : (double)timing; /* the status, as a number */
    free(all), free(col), free(steps);
    return st != CLFLASH_SUCCESS;
}

/* Rank 0's device alone on the whole sequence: the median of reps calls of clflash_forward with lse,
 * or of clflash_backward after it; seconds, or -1 if it failed (printed). */
static double time_single(const options *o, int backward, clflash_context *c)
{
    clflash_attention_desc a = {.struct_size = sizeof a};
    a.batch = o->batch, a.heads_q = o->heads, a.heads_kv = o->heads_kv;
    a.seq_q = a.seq_k = o->seq, a.head_dim = o->head_dim, a.dtype = o->dtype;
    a.flags = o->causal ? CLFLASH_CAUSAL : 0;
    const uint64_t nq = (uint64_t)o->batch * o->heads * o->seq * o->head_dim,
                   nk = (uint64_t)o->batch * o->heads_kv * o->seq * o->head_dim;
    cl_mem m[9] = {random_buffer(c, nq, o->dtype, 11), random_buffer(c, nk, o->dtype, 12),
                   random_buffer(c, nk, o->dtype, 13), random_buffer(c, nq, o->dtype, 14),
                   random_buffer(c, (uint64_t)o->batch * o->heads * o->seq, CLFLASH_F32, 15),
                   random_buffer(c, nq, o->dtype, 16), random_buffer(c, nq, o->dtype, 17),
                   random_buffer(c, nk, o->dtype, 18), random_buffer(c, nk, o->dtype, 19)};
    double result = -1.0, *times = xmalloc(sizeof(double) * o->reps);
    int ok = 1;
    for (int i = 0; i < 9; i++)
        ok = ok && m[i] != NULL;
    cl_command_queue qu = clflash_context_queue(c);
    clflash_status st = ok ? clflash_forward(c, &a, qu, m[0], m[1], m[2], m[3], m[4], 0, NULL, NULL) : CLFLASH_SUCCESS;
    if (ok && st == CLFLASH_SUCCESS)
        st = clFinish(qu);
    for (unsigned i = 0; ok && st == CLFLASH_SUCCESS && i < o->warmup + o->reps; i++) {
        const double t0 = bench_now();
        st = backward ? clflash_backward(c, &a, qu, m[0], m[1], m[2], m[3], m[5], m[4], m[6], m[7], m[8], 0, NULL, NULL)
                      : clflash_forward(c, &a, qu, m[0], m[1], m[2], m[3], m[4], 0, NULL, NULL);
        if (st == CLFLASH_SUCCESS)
            st = clFinish(qu);
        if (i >= o->warmup)
            times[i - o->warmup] = bench_now() - t0;
    }
    if (ok && st == CLFLASH_SUCCESS)
        result = median(times, o->reps);
    else if (ok)
        fprintf(stderr, "%s: one rank alone (%s): %s (%s)\n", tool_name(),
                backward ? "clflash_backward" : "clflash_forward", clflash_status_string(st),
                clflash_last_error_detail());
    for (int i = 0; i < 9; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    free(times);
    return result;
}

/* The K/V part of one step through the node-local window, as the ring's shared transport does it:
 * each rank uploads its left neighbour's shard straight from that rank's segment (win and left_seg,
 * set up by the caller). Through MPI messages: the shard sent to the right and received from the
 * left (MPI_Sendrecv), then uploaded. */
static cl_int move_kv(cl_command_queue qu, cl_mem dev, size_t n, const unsigned char *left_seg, unsigned char *out,
                      unsigned char *in, int left, int right)
{
    if (left_seg != NULL)
        return clEnqueueWriteBuffer(qu, dev, CL_TRUE, 0, n, left_seg, 0, NULL, NULL);
    for (size_t at = 0; at < n; at += (size_t)1 << 30) {
        const int piece = (int)(n - at < ((size_t)1 << 30) ? n - at : (size_t)1 << 30);
        MPI_Sendrecv(out + at, piece, MPI_BYTE, right, 7, in + at, piece, MPI_BYTE, left, 7, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
    return clEnqueueWriteBuffer(qu, dev, CL_TRUE, 0, n, in, 0, NULL, NULL);
}

/* Every rank (collective): the median over reps of moving one step's bytes around the ring with
 * nothing else running, as the definitions at the top say, through the transport the ring used
 * (shared: the K/V shard from the neighbour's segment of a shared-memory window); the slowest
 * rank's, in seconds. */
static double time_transfer(const options *o, int backward, clflash_context *c, int P, int shared, int pinned)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const uint64_t rows = (o->seq + (uint32_t)P - 1) / (uint32_t)P;
    const uint64_t kv = 2 * (uint64_t)o->batch * o->heads_kv * rows * o->head_dim;
    const size_t kv_bytes = (size_t)(kv * clflash_dtype_size(o->dtype)), acc_bytes = (size_t)(kv * sizeof(float));
    const size_t most = backward ? acc_bytes : kv_bytes;
    unsigned char *out = xmalloc(most), *in = xmalloc(most);
    memset(out, 0, most);
    const int right = (rank + 1) % P, left = (rank + P - 1) % P;
    MPI_Win win = MPI_WIN_NULL;
    unsigned char *left_seg = NULL, *own_seg = NULL; /* shared: the K/V shard, then (backward) the accumulator */
    if (shared) {
        const size_t seg_bytes = kv_bytes + (backward ? acc_bytes : 0);
        MPI_Aint size = 0;
        int unit = 0;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        if (MPI_Win_allocate_shared((MPI_Aint)seg_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &own_seg, &win) !=
                MPI_SUCCESS ||
            MPI_Win_shared_query(win, left, &size, &unit, &left_seg) != MPI_SUCCESS || left_seg == NULL) {
            fprintf(stderr, "%s: no shared-memory window for the transfer alone\n", tool_name());
            free(out), free(in);
            return -1.0;
        }
        memset(own_seg, 0, seg_bytes);
        MPI_Win_fence(0, win);
    }
    cl_int err = CL_SUCCESS;
    cl_mem dev = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, most, NULL, &err);
    cl_command_queue qu = clflash_context_queue(c);
    cl_mem pin[2] = {NULL, NULL}; /* pinned: the segments registered as the ring registers them */
    if (shared && pinned && err == CL_SUCCESS) {
        const size_t seg_bytes = kv_bytes + (backward ? acc_bytes : 0);
        pin[0] = clCreateBuffer(clflash_context_cl(c), CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, seg_bytes, own_seg, &err);
        if (err == CL_SUCCESS)
            pin[1] = clCreateBuffer(clflash_context_cl(c), CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, seg_bytes,
                                    left_seg, &err);
    }
    double *t = xmalloc(sizeof(double) * o->reps), result = 0.0;
    for (unsigned i = 0; i < o->warmup + o->reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        if (err == CL_SUCCESS)
            err = move_kv(qu, dev, kv_bytes, left_seg, out, in, left, right);
        if (backward && shared) { /* the fp32 accumulator: from the left's segment, back into the own
                                     (the timing's: the neighbour may be writing it meanwhile) */
            if (err == CL_SUCCESS)
                err = clEnqueueWriteBuffer(qu, dev, CL_TRUE, 0, acc_bytes, left_seg + kv_bytes, 0, NULL, NULL);
            if (err == CL_SUCCESS)
                err = clEnqueueReadBuffer(qu, dev, CL_TRUE, 0, acc_bytes, own_seg + kv_bytes, 0, NULL, NULL);
        } else if (backward) { /* the fp32 accumulator: MPI messages, then uploaded and read back */
            for (size_t at = 0; at < acc_bytes; at += (size_t)1 << 30) {
                const int piece = (int)(acc_bytes - at < ((size_t)1 << 30) ? acc_bytes - at : (size_t)1 << 30);
                MPI_Sendrecv(out + at, piece, MPI_BYTE, right, 8, in + at, piece, MPI_BYTE, left, 8, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
            }
            if (err == CL_SUCCESS)
                err = clEnqueueWriteBuffer(qu, dev, CL_TRUE, 0, acc_bytes, in, 0, NULL, NULL);
            if (err == CL_SUCCESS)
                err = clEnqueueReadBuffer(qu, dev, CL_TRUE, 0, acc_bytes, out, 0, NULL, NULL);
        }
        if (i >= o->warmup)
            t[i - o->warmup] = MPI_Wtime() - t0;
    }
    double mine = err == CL_SUCCESS ? median(t, o->reps) * (P - 1) : -1.0;
    MPI_Allreduce(&mine, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) /* before the memory they cover goes */
        if (pin[i] != NULL)
            clReleaseMemObject(pin[i]);
    if (win != MPI_WIN_NULL)
        MPI_Win_free(&win);
    if (dev)
        clReleaseMemObject(dev);
    free(out), free(in), free(t);
    return result;
}

/* Rank 0: the report of one pass from every rank's figures (P rows of HEAD_FIELDS + STEP_FIELDS * P). */
static void report(const options *o, json_writer *w, int backward, int P, const double *fig, double single_s,
                   double transfer, const char *transport, int pinned)
{
    const unsigned nf = HEAD_FIELDS + STEP_FIELDS * (unsigned)P;
    double call = 0.0, exposed = 0.0; /* the slowest rank's call, the most exposed rank's time */
    clflash_status st = CLFLASH_SUCCESS;
    for (int r = 0; r < P; r++) {
        const double *f = fig + (size_t)r * nf;
        double mine = 0.0;
        call = f[0] > call ? f[0] : call;
        if (f[2] != 0.0 && st == CLFLASH_SUCCESS)
            st = (clflash_status)f[2];
        for (int s = 0; s < P; s++) {
            const double *x = f + HEAD_FIELDS + STEP_FIELDS * s;
            mine += x[2] + x[1];
        }
        exposed = mine > exposed ? mine : exposed;
    }
    const int have_overlap = transfer > 0.0 && st == CLFLASH_SUCCESS;
    double overlap = have_overlap ? 1.0 - exposed / transfer : 0.0;
    overlap = overlap < 0.0 ? 0.0 : overlap > 1.0 ? 1.0 : overlap;
    const int have_eff = single_s > 0.0 && call > 0.0;
    const double eff = have_eff ? single_s / ((double)P * call) : 0.0;
    const char *name = backward ? "backward" : "forward";
    if (w) {
        json_open(w, NULL, '{');
        json_str(w, "pass", name);
        json_str(w, "timing_status", st == CLFLASH_SUCCESS ? "ok" : clflash_ring_status_string(st));
        json_str(w, "transport", transport);
        json_num(w, "pinned", 1, (double)pinned);
        json_num(w, "ring_ms", 1, call * 1e3);
        json_num(w, "single_rank_ms", have_eff, single_s * 1e3);
        json_num(w, "efficiency", have_eff, eff);
        json_num(w, "transfer_alone_ms", transfer >= 0.0, transfer * 1e3);
        json_num(w, "exposed_ms", 1, exposed * 1e3);
        json_num(w, "overlap", have_overlap, overlap);
        json_open(w, "ranks", '[');
        for (int r = 0; r < P; r++) {
            const double *f = fig + (size_t)r * nf;
            json_open(w, NULL, '{');
            json_i64(w, "rank", r);
            json_num(w, "call_ms", 1, f[0] * 1e3);
            json_num(w, "device_ms", 1, f[1] * 1e3);
            double mine = 0.0;
            for (int s = 0; s < P; s++)
                mine += f[HEAD_FIELDS + STEP_FIELDS * s + 2] + f[HEAD_FIELDS + STEP_FIELDS * s + 1];
            json_num(w, "exposed_ms", 1, mine * 1e3);
            json_open(w, "steps", '[');
            for (int s = 0; s < P; s++) {
                const double *x = f + HEAD_FIELDS + STEP_FIELDS * s;
                json_open(w, NULL, '{');
                json_i64(w, "step", s);
                json_num(w, "compute_ms", 1, x[0] * 1e3);
                json_num(w, "kv_mpi_ms", 1, x[3] * 1e3);
                json_num(w, "kv_upload_ms", 1, x[4] * 1e3);
                json_num(w, "acc_mpi_ms", 1, x[5] * 1e3);
                json_num(w, "acc_device_ms", 1, x[1] * 1e3);
                json_num(w, "wait_ms", 1, x[2] * 1e3);
                json_close(w, '}');
            }
            json_close(w, ']');
            json_close(w, '}');
        }
        json_close(w, ']');
        json_close(w, '}');
        return;
    }
    printf("\n%s: %.3f ms per call (slowest rank, median of %u)", name, call * 1e3, o->reps);
    if (have_eff)
        printf("; one rank alone %.3f ms; efficiency %.0f%%", single_s * 1e3, eff * 100.0);
    printf("\n  K/V transport %s%s; transfer alone %.3f ms, exposed %.3f ms (most exposed rank)", transport,
           pinned ? " (segments pinned)" : "",
           transfer * 1e3, exposed * 1e3);
    if (have_overlap)
        printf(": %.0f%% of the transfer hidden", overlap * 100.0);
    else if (st != CLFLASH_SUCCESS)
        printf("; no timing (%s)", clflash_ring_status_string(st));
    printf("\n  step  compute_ms  wait_ms  acc_dev_ms  in-ring: kv_mpi_ms  kv_upload_ms  acc_mpi_ms"
           "   [slowest rank per column]\n");
    for (int s = 0; s < P; s++) {
        double m[STEP_FIELDS] = {0};
        for (int r = 0; r < P; r++) {
            const double *x = fig + (size_t)r * nf + HEAD_FIELDS + STEP_FIELDS * s;
            for (int k = 0; k < STEP_FIELDS; k++)
                m[k] = x[k] > m[k] ? x[k] : m[k];
        }
        printf("  %4d  %10.3f  %7.3f  %10.3f  %18.3f  %12.3f  %10.3f\n", s, m[0] * 1e3, m[2] * 1e3, m[1] * 1e3,
               m[3] * 1e3, m[4] * 1e3, m[5] * 1e3);
    }
}

int main(int argc, char **argv)
{
    tool_set_name("clflash-ring-bench");
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "%s: MPI_Init failed\n", tool_name());
        return 1;
    }
    int rank = 0, P = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    char *device = NULL;
    if (o.device) { /* %r -> the rank */
        const char *at = strstr(o.device, "%r");
        device = at ? xprintf("%.*s%d%s", (int)(at - o.device), o.device, rank, at + 2) : xstrdup(o.device);
    }
    if (o.zigzag && o.seq % (2u * (unsigned)P) != 0) {
        if (rank == 0)
            fprintf(stderr, "%s: --seq %u is not a multiple of 2P = %d (zigzag); use --mapping contiguous\n",
                    tool_name(), o.seq, 2 * P);
        MPI_Finalize();
        return TOOL_EXIT_USAGE;
    }
    if (o.seq < (uint32_t)P) {
        if (rank == 0)
            fprintf(stderr, "%s: --seq %u is below the %d ranks\n", tool_name(), o.seq, P);
        MPI_Finalize();
        return TOOL_EXIT_USAGE;
    }
    clflash_context *c = bench_open_context(device, NULL, NULL);
    int failed = c == NULL, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        clflash_context_free(c);
        free(device);
        MPI_Finalize();
        return 1;
    }
    /* contiguous: rank r holds an equal share, the first seq % P ranks one token more */
    const uint32_t local = o.seq / (uint32_t)P + (!o.zigzag && (uint32_t)rank < o.seq % (uint32_t)P);
    uint64_t offset = 0;
    for (int r = 0; r < rank && !o.zigzag; r++)
        offset += o.seq / (uint32_t)P + ((uint32_t)r < o.seq % (uint32_t)P);
    clflash_ring_desc d = {.struct_size = sizeof d};
    d.batch = o.batch, d.heads_q = o.heads, d.heads_kv = o.heads_kv, d.head_dim = o.head_dim, d.dtype = o.dtype;
    d.flags = o.causal ? CLFLASH_CAUSAL : 0;
    d.mapping = o.zigzag ? CLFLASH_RING_ZIGZAG : CLFLASH_RING_CONTIGUOUS;
    d.seq_local = local;
    d.seq_offset = o.zigzag ? 0 : offset;
    d.seq_total = o.seq;
    const uint64_t nq = (uint64_t)o.batch * o.heads * local * o.head_dim,
                   nk = (uint64_t)o.batch * o.heads_kv * local * o.head_dim;
    const uint64_t seed = 1000u * (uint64_t)rank;
    /* q k v o lse d_o dq dk dv */
    cl_mem t[9] = {random_buffer(c, nq, o.dtype, seed + 1), random_buffer(c, nk, o.dtype, seed + 2),
                   random_buffer(c, nk, o.dtype, seed + 3), random_buffer(c, nq, o.dtype, seed + 4),
                   random_buffer(c, (uint64_t)o.batch * o.heads * local, CLFLASH_F32, seed + 5),
                   random_buffer(c, nq, o.dtype, seed + 6), random_buffer(c, nq, o.dtype, seed + 7),
                   random_buffer(c, nk, o.dtype, seed + 8), random_buffer(c, nk, o.dtype, seed + 9)};
    for (int i = 0; i < 9; i++)
        failed |= t[i] == NULL;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const unsigned nf = HEAD_FIELDS + STEP_FIELDS * (unsigned)P;
    double *mine = xmalloc(sizeof(double) * nf), *fig = rank == 0 ? xmalloc(sizeof(double) * nf * (size_t)P) : NULL;
    json_writer jw = {stdout, 0, {0}};
    json_writer *w = o.json && rank == 0 ? &jw : NULL;
    if (!any && rank == 0) {
        char *dev_name = NULL;
        cl_info_string(0, clflash_context_device(c), CL_DEVICE_NAME, &dev_name);
        const char *mapping = o.zigzag ? "zigzag" : "contiguous";
        if (w) {
            json_open(w, NULL, '{');
            json_str(w, "tool", tool_name());
            json_str(w, "clflash_version", clflash_version_string());
            json_str(w, "device", dev_name);
            json_i64(w, "ranks", P);
            json_u64(w, "seq", o.seq);
            json_u64(w, "batch", o.batch);
            json_u64(w, "heads_q", o.heads);
            json_u64(w, "heads_kv", o.heads_kv);
            json_u64(w, "head_dim", o.head_dim);
            json_str(w, "dtype", dtype_name(o.dtype));
            json_bool(w, "causal", o.causal);
            json_str(w, "mapping", mapping);
            json_u64(w, "reps", o.reps);
            json_open(w, "passes", '[');
        } else {
            printf("clflash-ring-bench: %d ranks, seq %u (%s), batch %u, heads %u/%u, head_dim %u, %s, %s\n", P,
                   o.seq, mapping, o.batch, o.heads, o.heads_kv, o.head_dim, dtype_name(o.dtype),
                   o.causal ? "causal" : "not causal");
            printf("device (rank 0): %s\n", dev_name ? dev_name : "?");
        }
        free(dev_name);
    }
    for (int pass = 0; pass < 2 && !any; pass++) {
        const int backward = pass == 1;
        if (backward ? !o.backward : !o.forward)
            continue;
        /* the backward needs the forward's o and lse: one untimed forward first */
        if (backward && !o.forward)
            failed |= clflash_ring_forward(c, MPI_COMM_WORLD, &d, t[0], t[1], t[2], t[3], t[4]) != CLFLASH_SUCCESS;
        char transport[8] = "";
        int pinned = 0;
        failed |= time_ring(&o, backward, c, MPI_COMM_WORLD, &d, t, P, mine, transport, &pinned);
        MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any)
            break;
        MPI_Gather(mine, (int)nf, MPI_DOUBLE, fig, (int)nf, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        const double transfer = time_transfer(&o, backward, c, P, strcmp(transport, "shared") == 0, pinned);
        double single = -1.0;
        if (o.single && rank == 0)
            single = time_single(&o, backward, c);
        MPI_Barrier(MPI_COMM_WORLD); /* the other ranks idle while rank 0 runs alone */
        if (rank == 0)
            report(&o, w, backward, P, fig, single, transfer, transport, pinned);
    }
    if (w && !any) {
        json_close(w, ']');
        json_close(w, '}');
    }
    fflush(stdout);
    for (int i = 0; i < 9; i++)
        if (t[i])
            clReleaseMemObject(t[i]);
    free(mine), free(fig), free(device);
    clflash_context_free(c);
    MPI_Finalize();
    return any ? 1 : 0;
}
