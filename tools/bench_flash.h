/*
 * bench_flash.h - what the parts of clflash-bench's main mode share (flash attention timed against
 * the naive attention and, where built, a BLAS-based one): its options, the device's facts, the
 * rows of its report and the state of a run, and the functions each part offers the others.
 *
 * Why several files: the mode parses a command line (bench_options.c), makes deterministic inputs
 * (bench_inputs.c), runs, times and checks the calls (bench_measure.c) and reports them as a table
 * for people or JSON and CSV for scripts (bench_report.c); clflash_bench.c's main ties them
 * together and hands --decode, --features and --varlen to their own files. Not part of the library.
 */
#ifndef CLFLASH_BENCH_FLASH_H
#define CLFLASH_BENCH_FLASH_H

#include "tool_common.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef _WIN32
#include <windows.h>
#else
#include <sys/resource.h> /* getrusage: the peak resident set */
#define CLFLASH_BENCH_HAVE_RUSAGE 1
#endif

#define PROG "clflash-bench"
#define MIN_RUNS 3u
#define MAX_RUNS 1000u
#define MAX_WARMUP 1000000u
#define DEFAULT_SEQ 4096u
#define DEFAULT_HEAD_DIM 64u
#define DEFAULT_HEADS 2u
#define DEFAULT_WARMUP 2u
#define DEFAULT_MIN_TIME 1.0
#define MAX_MIN_TIME 86400.0

/* What the bench can time. flash and naive are clflash's own; blas is bench_blas.c's. */
typedef enum { ALGO_FLASH, ALGO_NAIVE, ALGO_BLAS } bench_algo;
#define NUM_ALGOS 3

typedef struct {
    bench_algo algos[NUM_ALGOS];
    size_t nalgo;
    int backward; /* --backward: time clflash_backward and clflash_backward_naive */
    uint32_t *seqs;
    size_t nseq, seq_cap;
    uint32_t head_dim, batch, heads, block;
    int have_block;
    clflash_dtype dtype;
    int causal, csv, json, no_check;
    const char *device;
    const char *build_options; /* --build-options: extra clBuildProgram options, NULL for none */
    const char *tuning;        /* --tune: tuning settings, NULL for none */
    uint32_t warmup;
    double min_time;
    double tolerance; /* --tolerance: the largest |difference| allowed, times max(1, max |value|); 0 = by dtype */
} options;

typedef struct {
    char *name, *vendor, *driver, *version;
    cl_uint compute_units;
    cl_ulong local_mem, max_alloc, global_mem;
} device_facts;

/* One row of the report: one algorithm at one sequence length. */
typedef struct {
    bench_algo algo;
    uint32_t seq;
    clflash_status status; /* CLFLASH_SUCCESS, or why the row failed */
    char *detail;          /* the failure in one sentence; NULL when ok */
    int expected;          /* a naive or blas run that failed for lack of memory */
    unsigned runs;
    double ms_median, ms_min, ms_max, tflops, gbps;
    double fwd_ms_median;   /* --backward: the same algorithm's forward (with lse), for the ratio */
    int have_fwd;
    uint64_t modeled_bytes; /* 0 when the model has no answer */
    uint64_t io_bytes, score_matrix_bytes;
    int have_temp;
    uint64_t temp_bytes;
    uint64_t peak_rss; /* the process's high-water mark after this row's runs; 0 if unknown */
    int have_plan;     /* flash rows whose plan succeeded */
    clflash_plan plan;
    int checked;              /* max_abs_diff holds the comparison with compared_with */
    const char *compared_with; /* the algorithm this row's output was compared against */
    double max_abs_diff;
    char *check_error; /* why the comparison has no number */
} result;

typedef struct {
    cl_mem q, k, v, o;
    cl_mem d_o, lse, dq, dk, dv; /* --backward only */
    size_t bytes;                /* of each of q, k, v, o, d_o, dq, dk, dv */
    size_t count;                /* elements of each */
    size_t lse_bytes;
    float *hq, *hk, *hv, *ho; /* blas only: the same inputs on the host, and its output */
    float *scores;            /* blas only: its n x n score matrix */
    clflash_status scores_status; /* why scores is NULL when blas was asked for */
} tensors;

typedef struct {
    const options *opt;
    clflash_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    device_facts facts;
    result *results; /* nseq * nalgo, sequence-major */
    size_t nresults, done;
    double times[MAX_RUNS];
    int failed; /* something other than an expected capacity failure went wrong */
} bench;

/* bench_options.c: the command line. Returns -1 to go on, or an exit status (0 after --help or
 * --version, 2 on a usage error). */
int parse_args(int argc, char **argv, options *o);

/* bench_inputs.c: count values in [-1, 1] from `seed`, stored as dtype t; element i as a double. */
void fill_random(void *dst, size_t count, clflash_dtype t, uint64_t seed);
double element_value(const void *src, size_t i, clflash_dtype t);

/* bench_measure.c: the device's facts (on failure the query's name in *what), whether an algorithm
 * was asked for, the descriptor of a row's shape, one sequence length's rows timed and checked, a
 * monotonic clock in seconds, a product that reports overflow. */
cl_int read_facts(cl_device_id dev, device_facts *f, const char **what);
void free_facts(device_facts *f);
int has_algo(const options *o, bench_algo a);
void describe_desc(const options *o, uint32_t n, clflash_attention_desc *d);
void bench_seq(bench *bn, size_t si);
double now_seconds(void);
uint64_t mul_checked(uint64_t a, uint64_t b, int *overflow);

/* bench_report.c: names and milliseconds for people; the table (its header, rows and summary), JSON
 * and CSV. */
const char *algo_name(bench_algo a);
void format_ms(double ms, char *out, size_t cap);
void print_header(const bench *bn);
void print_table(const bench *bn);
void print_summary(const bench *bn);
void print_json(const bench *bn, const char *date);
void print_csv(const bench *bn);

#endif /* CLFLASH_BENCH_FLASH_H */
