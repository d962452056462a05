/*
 * bench_decode.c - `clflash-bench --decode`: times decoding, a few new queries against a long KV
 * cache, and reports the bytes of K and V it reads per second beside what the device can stream,
 * both measured in the same run.
 *
 * Why a mode of its own: decoding is bound by memory bandwidth, not by the matrix rate the rest of
 * clflash-bench reports, and its shapes differ (seq_q << seq_k, GQA, ragged cache lengths). Two
 * times per shape: back to back (many calls enqueued, then clFinish: what an inference loop sees
 * and what PyTorch's CUDA-event timings report) and isolated wall clock (one call, then clFinish,
 * which adds the host's per-call cost and the launch latency). The reference bandwidths: clEnqueueCopyBuffer over a buffer
 * of at least 256 MiB (bytes read plus bytes written), and on a CPU device the host's own
 * streaming read with one thread per compute unit.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "bench_decode.h"
#include "bench_common.h"
#include "tool_common.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 32

typedef struct {
    uint32_t batch, heads_q, heads_kv, seq_q, head_dim, splits;
    uint32_t page_size; /* 0: contiguous K and V; else a paged cache of such pages */
    int head_major;     /* the pool's pages [head][slot][d] rather than [slot][head][d] */
    int token_major;    /* contiguous K and V [batch][seq][heads][d] rather than [batch][heads][seq][d] */
    uint32_t seq_k[MAX_SEQS];
    size_t nseq;
    clflash_dtype dtype;
    int causal, ragged, json;
    const char *device, *build_options, *tuning;
    uint32_t warmup;
    double min_time;
} decode_options;

static void help(FILE *f)
{
    fputs("Usage: clflash-bench --decode [options]\n"
          "\n"
          "Times clflash_forward on decoding shapes: seq_q new queries per sequence against seq_k\n"
          "cached keys (contiguous [batch][heads][seq][head_dim] tensors, or a paged cache), and\n"
          "reports the bytes of K and V read per second (the keys each batch entry sees, once per\n"
          "K/V head: what bounds decoding) beside the device's copy bandwidth measured in the same\n"
          "run.\n"
          "  ms/call   back to back: calls enqueued one after another, then clFinish, divided by\n"
          "            their number\n"
          "  isolated  one call, then clFinish (wall clock)\n"
          "  device    the device's own time of one call (profiling clock): from the queue reaching\n"
          "            it (a marker enqueued just before) to the end of its last kernel; '-' where\n"
          "            the queue gives no profiling times\n"
          "  call/dev  ms/call over device: what each call costs beyond its kernels (1.00 = none)\n"
          "  last      the device time of the call's last kernel alone (with splits, the merge; the\n"
          "            rest of 'device' is the parts' kernel and the gap between the two)\n"

          "GB/s uses the back-to-back time. copy GB/s = 2 * bytes / time of clEnqueueCopyBuffer (read\n"
          "and written); on a CPU device also the host's streaming read with one thread per compute\n"
          "unit.\n"
          "\n"
          "Options:\n"
          "  --batch B          sequences (default 1)\n"
          "  --heads-q H        query heads (default 32)\n"
          "  --heads-kv H       K/V heads, dividing heads-q (default 8)\n"
          "  --seq-q N          new queries per sequence (default 1)\n"
          "  --seq-k N[,N...]   cached keys (default 4096,32768,131072)\n"
          "  --head-dim D       head dimension (default 128)\n"
          "  --dtype T          f32, f16 or bf16 (default f16)\n"
          "  --causal           causal masking (the new queries see the cache and each other)\n"
          "  --ragged           key_lengths: entry b of the batch has seq_k - b * seq_k / (2 * batch) keys\n"
          "  --splits N         num_splits: 0 the planner (default), 1 none, N parts\n"
          "  --page-size P      a paged KV cache of P-key pages (block_table), the pages of each\n"
          "                     sequence scattered over the pool in a shuffled order\n"
          "  --page-layout L    slot (default: pages [slot][head][head_dim], FlashAttention's and\n"
          "                     vLLM's) or head ([head][slot][head_dim])\n"
          "  --kv-layout L      contiguous K and V: head (default, [batch][heads][seq][head_dim]) or\n"
          "                     token ([batch][seq][heads][head_dim], FlashAttention's)\n"
          "  --device STR       as clflash-bench --device\n"
          "  --build-options S  extra OpenCL build options for clflash's kernels\n"
          "  --tune SPEC        tuning settings (clflash_context_options.tuning), as clflash-bench --tune\n"
          "  --warmup N         untimed calls first (default 5)\n"
          "  --min-time S       seconds of back-to-back calls per shape (default 1.0)\n"
          "  --json             one JSON object instead of a table\n",
          f);
}

static int add_seq_k(void *ctx, const char *text)
{
    decode_options *o = ctx;
    uint64_t v;
    if (o->nseq == MAX_SEQS || !parse_uint(text, 1, CLFLASH_MAX_SEQ_K, &v))
        return 0;
    o->seq_k[o->nseq++] = (uint32_t)v;
    return 1;
}

static int parse(int argc, char **argv, decode_options *o)
{
    static const char *const flags[] = {"--decode", "--causal", "--ragged", "--json", NULL};
    static const char *const valued[] = {"--batch", "--heads-q", "--heads-kv", "--seq-q", "--seq-k",
                                         "--head-dim", "--dtype", "--splits", "--device", "--build-options", "--tune",
                                         "--warmup", "--min-time", "--page-size", "--page-layout", "--kv-layout",
                                         NULL};
    for (int i = 1; i < argc; i++) {
        const char *name, *val;
        uint64_t v = 0;
        const int rc = tool_next_option(argc, argv, &i, flags, valued, help, &name, &val);
        if (rc >= 0)
            return rc;
        if (strcmp(name, "--decode") == 0)
            continue;
        if (strcmp(name, "--causal") == 0) {
            o->causal = 1;
        } else if (strcmp(name, "--ragged") == 0) {
            o->ragged = 1;
        } else if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--seq-k") == 0) {
            o->nseq = 0;
            if (!each_item(val, add_seq_k, o))
                return usage_error("--seq-k wants up to %d whole numbers from 1 to %u, not '%s'", MAX_SEQS,
                                   CLFLASH_MAX_SEQ_K, val);
        } else if (strcmp(name, "--dtype") == 0) {
            if (!parse_dtype(val, &o->dtype) || o->dtype == CLFLASH_I8)
                return usage_error("--dtype wants f32, f16 or bf16, not '%s'", val);
        } else if (strcmp(name, "--page-layout") == 0) {
            if (strcmp(val, "slot") != 0 && strcmp(val, "head") != 0)
                return usage_error("--page-layout wants slot or head, not '%s'", val);
            o->head_major = strcmp(val, "head") == 0;
        } else if (strcmp(name, "--kv-layout") == 0) {
            if (strcmp(val, "token") != 0 && strcmp(val, "head") != 0)
                return usage_error("--kv-layout wants head or token, not '%s'", val);
            o->token_major = strcmp(val, "token") == 0;
        } else if (strcmp(name, "--device") == 0) {
            o->device = val;
        } else if (strcmp(name, "--build-options") == 0) {
            o->build_options = val;
        } else if (strcmp(name, "--tune") == 0) {
            o->tuning = val;
        } else if (strcmp(name, "--min-time") == 0) {
            char *end;
            o->min_time = strtod(val, &end);
            if (*end != '\0' || !(o->min_time >= 0.0) || o->min_time > 3600.0)
                return usage_error("--min-time wants seconds from 0 to 3600, not '%s'", val);
        } else {
            const uint64_t hi = strcmp(name, "--head-dim") == 0 ? CLFLASH_MAX_HEAD_DIM
                                : strcmp(name, "--splits") == 0 ? CLFLASH_MAX_SPLITS
                                : strcmp(name, "--page-size") == 0 ? CLFLASH_MAX_PAGE_SIZE
                                : strcmp(name, "--warmup") == 0 ? 100000u
                                                                 : 65535u;
            const uint64_t lo = strcmp(name, "--splits") == 0 || strcmp(name, "--warmup") == 0 ? 0 : 1;
            if (!parse_uint(val, lo, hi, &v))
                return usage_error("%s wants a whole number from %" PRIu64 " to %" PRIu64 ", not '%s'", name, lo, hi,
                                   val);
            uint32_t *field = strcmp(name, "--batch") == 0      ? &o->batch
                              : strcmp(name, "--heads-q") == 0  ? &o->heads_q
                              : strcmp(name, "--heads-kv") == 0 ? &o->heads_kv
                              : strcmp(name, "--seq-q") == 0    ? &o->seq_q
                              : strcmp(name, "--head-dim") == 0 ? &o->head_dim
                              : strcmp(name, "--splits") == 0   ? &o->splits
                              : strcmp(name, "--page-size") == 0 ? &o->page_size
                                                                : &o->warmup;
            *field = (uint32_t)v;
        }
    }
    if (o->heads_q % o->heads_kv != 0)
        return usage_error("--heads-kv %u does not divide --heads-q %u", o->heads_kv, o->heads_q);
    return -1;
}

/* ---- the reference bandwidths ---------------------------------------------------------------- */
static double copy_gbps(cl_context ctx, cl_command_queue q, uint64_t bytes)
{
    cl_int e1, e2;
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &e1);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &e2);
    double best = 0.0;
    if (e1 == CL_SUCCESS && e2 == CL_SUCCESS && clEnqueueFillBuffer(q, a, &(cl_uint){0x3c003c00u}, 4, 0, (size_t)bytes,
                                                                     0, NULL, NULL) == CL_SUCCESS) {
        clEnqueueCopyBuffer(q, a, b, 0, 0, (size_t)bytes, 0, NULL, NULL); /* first touch */
        clFinish(q);
        for (int rep = 0; rep < 5; rep++) {
            const double t0 = bench_now();
            for (int i = 0; i < 4; i++)
                clEnqueueCopyBuffer(q, a, b, 0, 0, (size_t)bytes, 0, NULL, NULL);
            clFinish(q);
            const double gbps = 4.0 * 2.0 * (double)bytes / (bench_now() - t0) / 1e9;
            if (gbps > best)
                best = gbps;
        }
    }
    if (e1 == CL_SUCCESS)
        clReleaseMemObject(a);
    if (e2 == CL_SUCCESS)
        clReleaseMemObject(b);
    return best;
}

typedef struct {
    const float *p;
    size_t n;
    double sum;
} read_part;

static void *read_thread(void *arg)
{
    read_part *r = arg;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= r->n; i += 4) {
        s0 += r->p[i];
        s1 += r->p[i + 1];
        s2 += r->p[i + 2];
        s3 += r->p[i + 3];
    }
    r->sum = (double)s0 + s1 + s2 + s3;
    return NULL;
}

/* The host's streaming read with `threads` threads over 512 MiB, best of 5. */
static double host_read_gbps(unsigned threads)
{
    const size_t n = (size_t)128 << 20; /* floats */
    float *p = malloc(n * sizeof *p);
    pthread_t tid[64];
    read_part parts[64];
    double best = 0.0;
    if (p == NULL)
        return 0.0;
    if (threads > 64)
        threads = 64;
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(i & 7);
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = bench_now();
        for (unsigned t = 0; t < threads; t++) {
            parts[t].p = p + n / threads * t;
            parts[t].n = n / threads;
            pthread_create(&tid[t], NULL, read_thread, &parts[t]);
        }
        double sum = 0.0;
        for (unsigned t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            sum += parts[t].sum;
        }
        const double gbps = (double)n * sizeof *p / (bench_now() - t0) / 1e9;
        if (gbps > best && sum > 0.0)
            best = gbps;
    }
    free(p);
    return best;
}

/* ---- one shape ----------------------------------------------------------------------------------- */
typedef struct {
    uint32_t seq_k;
    clflash_status status;
    char detail[256];
    clflash_plan plan;
    uint64_t kv_bytes;
    double ms_call, ms_isolated, ms_device; /* ms_device: 0 where the queue gave no profiling times */
    double ms_last;                         /* the last kernel's own time (0 likewise) */
    unsigned calls;
} decode_row;

static double median(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n ? v[n / 2] : 0.0;
}

static void run_shape(clflash_context *c, cl_command_queue prof, const decode_options *o, uint32_t seq_k,
                      decode_row *r)
{
    const size_t s = clflash_dtype_size(o->dtype);
    const uint64_t nq = (uint64_t)o->batch * o->heads_q * o->seq_q * o->head_dim;
    /* paged: each sequence's pages, all of them distinct pages of the pool */
    const uint32_t pages_per_seq = o->page_size ? (seq_k + o->page_size - 1) / o->page_size : 0;
    const uint64_t num_pages = (uint64_t)o->batch * pages_per_seq;
    const uint64_t nk = o->page_size ? num_pages * o->page_size * o->heads_kv * o->head_dim
                                     : (uint64_t)o->batch * o->heads_kv * seq_k * o->head_dim;
    cl_context ctx = clflash_context_cl(c);
    cl_int e[6] = {0};
    void *host = malloc((size_t)(nk > nq ? nk : nq) * s);
    int32_t *lens = malloc(sizeof(int32_t) * o->batch);
    int32_t *table = malloc(sizeof(int32_t) * (num_pages ? num_pages : 1));
    memset(r, 0, sizeof *r);
    r->seq_k = seq_k;
    r->plan.struct_size = sizeof r->plan;
    if (host == NULL || lens == NULL || table == NULL) {
        r->status = CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        snprintf(r->detail, sizeof r->detail, "host memory for the inputs");
        free(host);
        free(lens);
        free(table);
        return;
    }
    cl_mem q = clCreateBuffer(ctx, CL_MEM_READ_ONLY, (size_t)(nq * s), NULL, &e[0]);
    cl_mem k = clCreateBuffer(ctx, CL_MEM_READ_ONLY, (size_t)(nk * s), NULL, &e[1]);
    cl_mem v = clCreateBuffer(ctx, CL_MEM_READ_ONLY, (size_t)(nk * s), NULL, &e[2]);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)(nq * s), NULL, &e[3]);
    cl_mem lb = clCreateBuffer(ctx, CL_MEM_READ_ONLY, sizeof(int32_t) * o->batch, NULL, &e[4]);
    cl_mem tb = clCreateBuffer(ctx, CL_MEM_READ_ONLY, sizeof(int32_t) * (num_pages ? num_pages : 1), NULL, &e[5]);
    clflash_attention_desc d = {.struct_size = sizeof d};
    d.batch = o->batch;
    d.heads_q = o->heads_q;
    d.heads_kv = o->heads_kv;
    d.seq_q = o->seq_q;
    d.seq_k = seq_k;
    d.head_dim = o->head_dim;
    d.dtype = o->dtype;
    d.flags = o->causal ? CLFLASH_CAUSAL : 0;
    d.num_splits = o->splits;
    uint64_t keys = 0;
    for (uint32_t b = 0; b < o->batch; b++) {
        lens[b] = o->ragged ? (int32_t)(seq_k - (uint64_t)b * seq_k / (2u * o->batch)) : (int32_t)seq_k;
        keys += (uint64_t)lens[b];
    }
    if (o->ragged)
        d.key_lengths = lb;
    if (o->token_major && !o->page_size) { /* [batch][seq][heads][d] */
        const uint64_t hd = o->head_dim, hk = o->heads_kv;
        d.k = d.v = (clflash_layout){0, seq_k * hk * hd, hd, hk * hd};
    }
    if (o->page_size) {
        d.block_table = tb;
        d.page_size = o->page_size;
        d.pages_per_seq = pages_per_seq;
        d.num_pages = (uint32_t)num_pages;
        const uint64_t hd = o->head_dim, hk = o->heads_kv;
        if (!o->head_major) /* [page][slot][head][d] */
            d.k = d.v = (clflash_layout){0, o->page_size * hk * hd, hd, hk * hd};
        /* the pool's pages in a shuffled order (a fixed permutation) */
        for (uint64_t i = 0; i < num_pages; i++)
            table[i] = (int32_t)i;
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (uint64_t i = num_pages; i > 1; i--) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const uint64_t j = (x >> 33) % i;
            const int32_t t = table[i - 1];
            table[i - 1] = table[j];
            table[j] = t;
        }
    }
    r->kv_bytes = 2 * keys * o->heads_kv * o->head_dim * s;
    for (int i = 0; i < 6; i++)
        if (e[i] != CL_SUCCESS) {
            r->status = e[i];
            snprintf(r->detail, sizeof r->detail, "creating the device buffers failed");
            goto done;
        }
    bench_fill_random(host, (size_t)nq, o->dtype, 1);
    clEnqueueWriteBuffer(prof, q, CL_TRUE, 0, (size_t)(nq * s), host, 0, NULL, NULL);
    bench_fill_random(host, (size_t)nk, o->dtype, 2);
    clEnqueueWriteBuffer(prof, k, CL_TRUE, 0, (size_t)(nk * s), host, 0, NULL, NULL);
    bench_fill_random(host, (size_t)nk, o->dtype, 3);
    clEnqueueWriteBuffer(prof, v, CL_TRUE, 0, (size_t)(nk * s), host, 0, NULL, NULL);
    clEnqueueWriteBuffer(prof, lb, CL_TRUE, 0, sizeof(int32_t) * o->batch, lens, 0, NULL, NULL);
    if (num_pages)
        clEnqueueWriteBuffer(prof, tb, CL_TRUE, 0, sizeof(int32_t) * num_pages, table, 0, NULL, NULL);

    if ((r->status = clflash_plan_attention(c, &d, &r->plan)) != CLFLASH_SUCCESS) {
        snprintf(r->detail, sizeof r->detail, "%s", clflash_last_error_detail());
        goto done;
    }
    for (uint32_t w = 0; w < o->warmup + 1; w++)
        if ((r->status = clflash_forward(c, &d, prof, q, k, v, out, NULL, 0, NULL, NULL)) != CLFLASH_SUCCESS) {
            snprintf(r->detail, sizeof r->detail, "%s", clflash_last_error_detail());
            goto done;
        }
    clFinish(prof);

    /* isolated calls: wall clock from the call to clFinish; and the device's own time of the call,
     * from the queue reaching it (a marker enqueued just before) to the end of its last kernel (the
     * event clflash_forward returns), by the profiling queue's clock */
    double wall[21], dev[21], last[21];
    int profiled = 1;
    for (int i = 0; i < 21; i++) {
        cl_event before = NULL, after = NULL;
        cl_ulong t_before = 0, t_after = 0, t_start = 0;
        clFinish(prof);
        const double t0 = bench_now();
        clEnqueueMarkerWithWaitList(prof, 0, NULL, &before);
        clflash_forward(c, &d, prof, q, k, v, out, NULL, 0, NULL, &after);
        clFinish(prof);
        wall[i] = (bench_now() - t0) * 1e3;
        profiled &= before != NULL && after != NULL &&
                    clGetEventProfilingInfo(before, CL_PROFILING_COMMAND_END, sizeof t_before, &t_before, NULL) ==
                        CL_SUCCESS &&
                    clGetEventProfilingInfo(after, CL_PROFILING_COMMAND_END, sizeof t_after, &t_after, NULL) ==
                        CL_SUCCESS &&
                    clGetEventProfilingInfo(after, CL_PROFILING_COMMAND_START, sizeof t_start, &t_start, NULL) ==
                        CL_SUCCESS &&
                    t_after > t_before && t_after >= t_start;
        dev[i] = profiled ? (double)(t_after - t_before) * 1e-6 : 0.0;
        last[i] = profiled ? (double)(t_after - t_start) * 1e-6 : 0.0;
        if (before)
            clReleaseEvent(before);
        if (after)
            clReleaseEvent(after);
    }
    r->ms_isolated = median(wall, 21);
    r->ms_device = profiled ? median(dev, 21) : 0.0;
    r->ms_last = profiled ? median(last, 21) : 0.0;

    /* back to back: batches of about 20 ms of calls until min_time has passed */
    const bench_call call = {.c = c, .d = &d, .queue = prof, .q = q, .k = k, .v = v, .o = out};
    r->ms_call = bench_back_to_back(&call, r->ms_isolated * 1e-3, 0.02, 2000, o->min_time, &r->calls) * 1e3;
done:
    for (int i = 0; i < 6; i++)
        if (e[i] == CL_SUCCESS)
            clReleaseMemObject((cl_mem[]){q, k, v, out, lb, tb}[i]);
    free(host);
    free(lens);
    free(table);
}

int bench_decode_main(int argc, char **argv)
{
    decode_options o = {1, 32, 8, 1, 128, 0, 0, 0, 0, {4096, 32768, 131072}, 3, CLFLASH_F16, 0, 0, 0, NULL, NULL, NULL, 5,
                        1.0};
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    clflash_context *c = bench_open_context(o.device, o.build_options, o.tuning);
    if (c == NULL)
        return 1;
    cl_int err;
    cl_command_queue prof = clCreateCommandQueue(clflash_context_cl(c), clflash_context_device(c),
                                                 CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "%s: creating a command queue failed (%d)\n", tool_name(), err);
        clflash_context_free(c);
        return 1;
    }
    char *dev_name = NULL;
    cl_device_type type = 0;
    cl_uint units = 0;
    cl_info_string(0, clflash_context_device(c), CL_DEVICE_NAME, &dev_name);
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);

    uint64_t largest = 0;
    for (size_t i = 0; i < o.nseq; i++) {
        const uint64_t kv = 2ull * o.batch * o.heads_kv * o.seq_k[i] * o.head_dim * clflash_dtype_size(o.dtype);
        if (kv > largest)
            largest = kv;
    }
    uint64_t copy_bytes = largest > (256ull << 20) ? largest : (256ull << 20);
    if (copy_bytes > (1ull << 30))
        copy_bytes = 1ull << 30;
    fprintf(stderr, "%s --decode: measuring the copy bandwidth\n", tool_name());
    const double copy = copy_gbps(clflash_context_cl(c), prof, copy_bytes);
    const double host_read = (type & CL_DEVICE_TYPE_CPU) ? host_read_gbps(units) : 0.0;

    decode_row rows[MAX_SEQS];
    int failed = 0;
    for (size_t i = 0; i < o.nseq; i++) {
        fprintf(stderr, "%s --decode: seq_k %u\n", tool_name(), o.seq_k[i]);
        run_shape(c, prof, &o, o.seq_k[i], &rows[i]);
        failed |= rows[i].status != CLFLASH_SUCCESS;
    }

    if (o.json) {
        json_writer w = {stdout, 0, {0}};
        json_open(&w, NULL, '{');
        json_str(&w, "tool", "clflash-bench --decode");
        json_str(&w, "version", clflash_version_string());
        json_str(&w, "device", dev_name);
        json_u64(&w, "compute_units", units);
        json_num(&w, "copy_gbps", 1, copy);
        json_num(&w, "host_read_gbps", host_read > 0, host_read);
        json_open(&w, "config", '{');
        json_u64(&w, "batch", o.batch);
        json_u64(&w, "heads_q", o.heads_q);
        json_u64(&w, "heads_kv", o.heads_kv);
        json_u64(&w, "seq_q", o.seq_q);
        json_u64(&w, "head_dim", o.head_dim);
        json_str(&w, "dtype", dtype_name(o.dtype));
        json_bool(&w, "causal", o.causal);
        json_bool(&w, "ragged", o.ragged);
        json_u64(&w, "num_splits", o.splits);
        json_u64(&w, "page_size", o.page_size);
        if (o.page_size)
            json_str(&w, "page_layout", o.head_major ? "head" : "slot");
        else
            json_str(&w, "kv_layout", o.token_major ? "token" : "head");
        json_close(&w, '}');
        json_open(&w, "rows", '[');
        for (size_t i = 0; i < o.nseq; i++) {
            const decode_row *r = &rows[i];
            json_open(&w, NULL, '{');
            json_u64(&w, "seq_k", r->seq_k);
            json_str(&w, "status", clflash_status_string(r->status));
            if (r->status == CLFLASH_SUCCESS) {
                json_str(&w, "kernel", r->plan.kernel);
                json_u64(&w, "splits", r->plan.splits);
                json_u64(&w, "packed_heads", r->plan.packed_heads);
                json_u64(&w, "block", r->plan.block);
                json_u64(&w, "block_q", r->plan.block_q);
                json_u64(&w, "kv_bytes", r->kv_bytes);
                json_num(&w, "ms_call", 1, r->ms_call);
                json_num(&w, "ms_isolated", 1, r->ms_isolated);
                json_num(&w, "ms_device", r->ms_device > 0, r->ms_device);
                json_num(&w, "ms_last_kernel", r->ms_device > 0, r->ms_last);
                json_num(&w, "kv_gbps", 1, (double)r->kv_bytes / (r->ms_call * 1e-3) / 1e9);
                json_u64(&w, "calls", r->calls);
            } else {
                json_str(&w, "detail", r->detail);
            }
            json_close(&w, '}');
        }
        json_close(&w, ']');
        json_close(&w, '}');
        fputc('\n', stdout);
    } else {
        printf("clflash-bench --decode (clflash %s) on %s, %u compute units\n", clflash_version_string(), dev_name,
               units);
        printf("batch %u, heads %u/%u, seq_q %u, head_dim %u, %s%s%s, num_splits %u", o.batch, o.heads_q, o.heads_kv,
               o.seq_q, o.head_dim, dtype_name(o.dtype), o.causal ? ", causal" : "", o.ragged ? ", ragged" : "",
               o.splits);
        if (o.page_size)
            printf(", paged: %u-key pages, %s-major", o.page_size, o.head_major ? "head" : "slot");
        else
            printf(", %s-major K/V", o.token_major ? "token" : "head");
        printf("\n");
        printf("copy bandwidth %.1f GB/s (read + written)", copy);
        if (host_read > 0)
            printf(", host streaming read %.1f GB/s (%u threads)", host_read, units);
        printf("\n\n%8s  %-22s %6s %6s %10s %10s %10s %10s %8s %8s %8s\n", "seq_k", "kernel", "splits", "packed",
               "K/V MB", "ms/call", "isolated", "device", "call/dev", "last", "GB/s");
        for (size_t i = 0; i < o.nseq; i++) {
            const decode_row *r = &rows[i];
            if (r->status != CLFLASH_SUCCESS) {
                printf("%8u  failed: %s (%s)\n", r->seq_k, clflash_status_string(r->status), r->detail);
                continue;
            }
            printf("%8u  %-22s %6u %6u %10.1f %10.4f %10.4f ", r->seq_k, r->plan.kernel, r->plan.splits,
                   r->plan.packed_heads, (double)r->kv_bytes / 1e6, r->ms_call, r->ms_isolated);
            if (r->ms_device > 0)
                printf("%10.4f %8.2f %8.4f", r->ms_device, r->ms_call / r->ms_device, r->ms_last);
            else
                printf("%10s %8s %8s", "-", "-", "-");
            printf(" %8.1f\n", (double)r->kv_bytes / (r->ms_call * 1e-3) / 1e9);
        }
    }
    free(dev_name);
    clReleaseCommandQueue(prof);
    clflash_context_free(c);
    return failed ? 1 : 0;
}
