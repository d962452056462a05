/*
 * bench_options.c - clflash-bench's command line for its main mode: the help text, the options and
 * their checks (bench_flash.h).
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
 * Command line.
 * ========================================================================================== */

static void print_help(FILE *f)
{
    fputs("Usage: " PROG " [options]\n"
          "\n"
          "Times clflash's flash attention (clflash_forward: tiles in local memory, no score\n"
          "matrix) against naive attention (clflash_forward_naive: writes the n x n score matrix\n"
          "to device memory, softmaxes it, multiplies by V) on one OpenCL device and, with\n"
          "--algo blas, against attention on the host's BLAS, with seq_q = seq_k = n and\n"
          "contiguous [batch][heads][n][head_dim] tensors filled with deterministic\n"
          "pseudo-random values in [-1, 1].\n"
          "\n"
          "Each (n, algorithm) is run --warmup times untimed, then repeated until --min-time\n"
          "seconds have passed (at least 3, at most 1000 timed runs). One run is timed as wall\n"
          "clock from the enqueue to clFinish (blas: the call); the median is reported with the\n"
          "min and max.\n"
          "  TFLOP/s  = 4 * batch * heads * n * n * head_dim / median time (halved with --causal);\n"
          "             with --backward the backward counts 2.5 times that\n"
          "  GB/s     = modeled bytes / median time, where modeled bytes is\n"
          "             clflash_traffic_bytes(): the global-memory traffic each algorithm must move\n"
          "             (blas moves its scores as naive does; no model for the backward)\n"
          "  scratch  = memory the call allocates besides its inputs and outputs: none for flash,\n"
          "             the score matrices for naive (clflash_naive_workspace_bytes), one head's\n"
          "             fp32 score matrix for blas\n"
          "  peak RSS = the process's peak resident set after the row's runs (getrusage\n"
          "             ru_maxrss). It is a high-water mark of the whole process, so it is clean\n"
          "             only for the first algorithm: to compare, run one --algo per invocation.\n"
          "             It includes the kernel compiler's peak on a cold kernel cache and, on a\n"
          "             CPU device such as PoCL, the device buffers (they live in host memory)\n"
          "Then the outputs are compared on the same inputs: flash against naive, blas against\n"
          "flash (or naive), and the largest absolute difference is reported (skip with\n"
          "--no-check). A difference above the tolerance times max(1, the largest |value|) fails\n"
          "the row and the exit status: 1e-4 for f32, 1e-2 for f16, 6e-2 for bf16, or --tolerance.\n"
          "\n"
          "--algo blas: S = scale * Q K^T by cblas_sgemm per head, a row softmax in C, O = P V by\n"
          "cblas_sgemm; fp32 only, on the host, with the BLAS's own threads (OpenBLAS: all cores\n"
          "unless OPENBLAS_NUM_THREADS says otherwise). Built only when CMake found a BLAS with\n"
          "cblas.h.\n"
          "--backward: times clflash_backward (flash) and clflash_backward_naive (naive), each\n"
          "after the same algorithm's forward with lse, which is timed too: the table reports\n"
          "backward / forward time (the cost of the deterministic, atomic-free backward).\n"
          "\n",
          f);
    fputs("Options:\n"
          "  --algo A[,A...]    flash, naive, blas (default flash,naive)\n"
          "  --backward         time the backward pass (flash and naive) instead of the forward\n"
          "  --seq N[,N...]     sequence lengths n (default 4096); may be repeated\n"
          "  --head-dim D       head dimension, 1 to 256 (default 64)\n"
          "  --dtype T          storage type: f32, f16 or bf16 (default f32); the math is fp32\n"
          "  --batch B          batch size (default 1)\n"
          "  --heads H          heads (default 2)\n"
          "  --causal           causal masking\n"
          "  --device STR       the device: \"P:D\" (as clflash-query lists them) or a\n"
          "                     case-insensitive part of the platform's or device's name or vendor; sets\n"
          "                     CLFLASH_DEVICE. Default: CLFLASH_DEVICE, else the first GPU,\n"
          "                     else the first device\n"
          "  --warmup N         untimed runs before timing (default 2)\n"
          "  --min-time S       seconds of timed runs per measurement (default 1.0)\n"
          "  --block B          force the flash tile size B (the plan fails if B does not fit)\n"
          "  --build-options S  extra OpenCL build options for clflash's kernels\n"
          "                     (clflash_context_options.build_options)\n"
          "  --tune SPEC        tuning settings (clflash_context_options.tuning; see\n"
          "                     clflash_context_set_tuning in clflash.h), e.g. \"portable.cpu_path=0\"\n"
          "                     to time the GPU paths on a CPU (the register tiles; with\n"
          "                     \"portable.cpu_path=0,portable.regtile=0\" the lane-per-row path)\n"
          "  --csv              print CSV: a header row and one row per result\n"
          "  --json             print one JSON object: device, config, results, date, version\n"
          "  --no-check         do not compare the outputs\n"
          "  --tolerance T      the comparison's tolerance, above 0 and at most 1 (default by dtype)\n"
          "  --decode           decoding instead (few queries, a long KV cache; GB/s of K/V read):\n"
          "                     see clflash-bench --decode --help\n"
          "  --features         each score feature (causal, window, softcap, ALiBi, bias, key\n"
          "                     lengths) beside the plain call: see clflash-bench --features --help\n"
          "  --varlen           a variable-length (packed, cu_seqlens) prefill batch against the same\n"
          "                     sequences as separate calls: see clflash-bench --varlen --help\n"
          "  --version          print the tool's and library's versions\n"
          "  -h, --help         print this help\n"
          "Options take their value as the next argument or after '='. Progress goes to stderr.\n"
          "\n"
          "A naive or blas run that fails for lack of memory (its score matrix exceeds the\n"
          "device's largest allocation, or an allocation fails) is reported as a failed row and\n"
          "the sweep goes on: showing where the materialized baselines stop fitting is part of\n"
          "the point.\n"
          "\n"
          "Exit status: 0 on success (naive or blas rows may have failed for lack of memory), 1 if\n"
          "the device cannot be opened or queried, or any other run or check failed, 2 on a usage\n"
          "error.\n"
          "\n"
          "Examples:\n"
          "  " PROG "\n"
          "  " PROG " --seq 1024,2048,4096,8192 --dtype f16 --head-dim 128 --json\n"
          "  " PROG " --algo flash,naive,blas --seq 4096 --head-dim 64 --dtype f32 --heads 2\n"
          "  " PROG " --algo flash --seq 8192 --csv        (peak RSS of flash alone)\n"
          "  " PROG " --backward --seq 1024,4096\n"
          "  " PROG " --algo flash --seq 16384 --causal --device 0:0\n",
          f);
}

/* A plain decimal number of seconds: digits, at most one '.', an optional exponent
 * ("1", "0.25", ".5", "2e-1"); no sign, hex, inf or nan. */
static int parse_seconds(const char *s, double *out)
{
    const char *p = s;
    size_t digits = 0;
    char *end = NULL;
    double v;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p != '\0')
        return 0;
    errno = 0;
    v = strtod(s, &end);
    if (errno == ERANGE || *end != '\0' || !(v >= 0.0) || v > MAX_MIN_TIME)
        return 0;
    *out = v;
    return 1;
}

static int add_seq(void *ctx, const char *text)
{
    options *o = ctx;
    uint64_t v;
    if (!parse_uint(text, 1, UINT32_MAX, &v))
        return 0;
    if (o->nseq == o->seq_cap) {
        o->seq_cap = o->seq_cap ? 2 * o->seq_cap : 8;
        o->seqs = xrealloc(o->seqs, o->seq_cap * sizeof *o->seqs);
    }
    o->seqs[o->nseq++] = (uint32_t)v;
    return 1;
}

static int add_algo(void *ctx, const char *text)
{
    options *o = ctx;
    bench_algo a;
    if (strcmp(text, "flash") == 0)
        a = ALGO_FLASH;
    else if (strcmp(text, "naive") == 0)
        a = ALGO_NAIVE;
    else if (strcmp(text, "blas") == 0)
        a = ALGO_BLAS;
    else
        return 0;
    for (size_t i = 0; i < o->nalgo; i++)
        if (o->algos[i] == a)
            return 0; /* named twice */
    o->algos[o->nalgo++] = a;
    return 1;
}

/* Returns -1 to go on, or an exit status (0 after --help/--version, 2 on a usage error). */
int parse_args(int argc, char **argv, options *o)
{
    static const char *const flags[] = {"--causal", "--csv", "--json", "--no-check", "--backward", NULL};
    static const char *const valued[] = {"--algo",   "--seq",    "--head-dim", "--dtype",
                                         "--batch",  "--heads",  "--device",   "--warmup",
                                         "--min-time", "--block", "--build-options", "--tune", "--tolerance", NULL};
    for (int i = 1; i < argc; i++) {
        const char *val, *name;
        uint64_t v;

        int rc = tool_next_option(argc, argv, &i, flags, valued, print_help, &name, &val);
        if (rc >= 0)
            return rc;
        if (strcmp(name, "--causal") == 0) {
            o->causal = 1;
        } else if (strcmp(name, "--csv") == 0) {
            o->csv = 1;
        } else if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--no-check") == 0) {
            o->no_check = 1;
        } else if (strcmp(name, "--backward") == 0) {
            o->backward = 1;
        } else if (strcmp(name, "--algo") == 0) {
            if (!each_item(val, add_algo, o))
                return usage_error("--algo wants a list of flash, naive and blas (each at most "
                                   "once), not '%s'", val);
        } else if (strcmp(name, "--seq") == 0) {
            if (!each_item(val, add_seq, o))
                return usage_error("--seq wants comma-separated whole numbers from 1 to %" PRIu32
                                   ", not '%s'", UINT32_MAX, val);
        } else if (strcmp(name, "--head-dim") == 0) {
            if (!parse_uint(val, 1, CLFLASH_MAX_HEAD_DIM, &v))
                return usage_error("--head-dim wants a whole number from 1 to %u, not '%s'",
                                   CLFLASH_MAX_HEAD_DIM, val);
            o->head_dim = (uint32_t)v;
        } else if (strcmp(name, "--dtype") == 0) {
            if (strcmp(val, "f32") == 0)
                o->dtype = CLFLASH_F32;
            else if (strcmp(val, "f16") == 0)
                o->dtype = CLFLASH_F16;
            else if (strcmp(val, "bf16") == 0)
                o->dtype = CLFLASH_BF16;
            else
                return usage_error("--dtype wants f32, f16 or bf16, not '%s'", val);
        } else if (strcmp(name, "--batch") == 0) {
            if (!parse_uint(val, 1, UINT32_MAX, &v))
                return usage_error("--batch wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->batch = (uint32_t)v;
        } else if (strcmp(name, "--heads") == 0) {
            if (!parse_uint(val, 1, UINT32_MAX, &v))
                return usage_error("--heads wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->heads = (uint32_t)v;
        } else if (strcmp(name, "--device") == 0) {
            if (*val == '\0')
                return usage_error("--device wants \"P:D\" or part of a device or platform name");
            o->device = val;
        } else if (strcmp(name, "--warmup") == 0) {
            if (!parse_uint(val, 0, MAX_WARMUP, &v))
                return usage_error("--warmup wants a whole number from 0 to %u, not '%s'",
                                   MAX_WARMUP, val);
            o->warmup = (uint32_t)v;
        } else if (strcmp(name, "--min-time") == 0) {
            if (!parse_seconds(val, &o->min_time))
                return usage_error("--min-time wants seconds as a plain decimal number from 0 to "
                                   "%.0f, not '%s'", MAX_MIN_TIME, val);
        } else if (strcmp(name, "--build-options") == 0) {
            o->build_options = val;
        } else if (strcmp(name, "--tune") == 0) {
            o->tuning = val;
        } else if (strcmp(name, "--tolerance") == 0) {
            char *end;
            o->tolerance = strtod(val, &end);
            if (*end != '\0' || !(o->tolerance > 0.0) || o->tolerance > 1.0)
                return usage_error("--tolerance wants a number above 0, at most 1, not '%s'", val);
        } else { /* --block */
            if (!parse_uint(val, 1, UINT32_MAX, &v))
                return usage_error("--block wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->block = (uint32_t)v;
            o->have_block = 1;
        }
    }
    if (o->csv && o->json)
        return usage_error("--csv and --json exclude each other");
    if (o->nalgo == 0) {
        o->algos[0] = ALGO_FLASH;
        o->algos[1] = ALGO_NAIVE;
        o->nalgo = 2;
    }
    for (size_t i = 0; i < o->nalgo; i++) {
        if (o->algos[i] != ALGO_BLAS)
            continue;
#ifndef CLFLASH_BENCH_BLAS
        return usage_error("--algo blas was not built into this " PROG ": CMake found no BLAS with a "
                           "cblas.h when it was configured (on Debian: apt-get install libopenblas-dev, "
                           "then configure and build again)");
#endif
        if (o->backward)
            return usage_error("--algo blas has no backward; --backward times flash and naive");
        if (o->dtype != CLFLASH_F32)
            return usage_error("--algo blas is fp32 only; use --dtype f32");
    }
    if (o->nseq == 0) {
        char text[16];
        snprintf(text, sizeof text, "%u", DEFAULT_SEQ);
        if (!add_seq(o, text))
            return usage_error("internal error: bad default sequence length");
    }
    return -1;
}
