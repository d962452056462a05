/*
 * clflash_bench.c - the `clflash-bench` tool: times clflash's flash attention against the naive
 * attention that materializes the score matrix, on the same device, inputs and shapes, and
 * optionally against materialized attention on the host's BLAS (bench_blas.c) and, with
 * --backward, the backward passes.
 *
 * Why it exists: FlashAttention's promise is that tiling attention through local memory removes the
 * n x n score matrix from device memory and cuts global-memory traffic from O(n^2) to
 * O(n * n/B). A user should be able to check that claim on their own hardware with one command,
 * and see it stated plainly: how long each algorithm takes, how many bytes each is modeled to
 * move, how much scratch memory each allocates, where naive stops fitting at all, and that the two
 * agree on the result. It measures honestly (warm-up runs first, then enough timed runs to fill a
 * minimum time, median with min and max reported beside it, wall clock from enqueue to clFinish)
 * and reports the device's facts next to the numbers so results can be compared across machines.
 * Tables are for people; --csv and --json are for scripts. It uses only clflash.h and plain
 * OpenCL 1.2 calls.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#endif

#include "bench_decode.h"
#include "bench_features.h"
#include "bench_varlen.h"
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

static int set_env(const char *name, const char *value)
{
#ifdef _WIN32
    return _putenv_s(name, value) == 0;
#else
    return setenv(name, value, 1) == 0;
#endif
}

/* ============================================================================================
 * main
 * ========================================================================================== */

static int run(const options *o)
{
    bench bn;
    clflash_status st;
    const char *what = NULL;
    cl_int err;
    char date[32] = "unknown";
    time_t wall = time(NULL);
    struct tm *utc = wall == (time_t)-1 ? NULL : gmtime(&wall);

    if (utc == NULL || strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", utc) == 0)
        strcpy(date, "unknown");

    memset(&bn, 0, sizeof bn);
    bn.opt = o;
    if (clflash_version_number() != CLFLASH_VERSION_NUMBER)
        fprintf(stderr, PROG ": warning: built against clflash %d.%d.%d but running with %s\n",
                CLFLASH_VERSION_MAJOR, CLFLASH_VERSION_MINOR, CLFLASH_VERSION_PATCH,
                clflash_version_string());
    if (o->device && !set_env("CLFLASH_DEVICE", o->device)) {
        fprintf(stderr, PROG ": could not set CLFLASH_DEVICE for --device\n");
        return 1;
    }
    {
        clflash_context_options copt;
        memset(&copt, 0, sizeof copt);
        copt.struct_size = sizeof copt;
        copt.build_options = o->build_options;
        copt.tuning = o->tuning;
        st = clflash_context_create_default(&copt, &bn.ctx);
    }
    if (st != CLFLASH_SUCCESS) {
        fprintf(stderr, PROG ": cannot open an OpenCL device: %s (%d): %s\n",
                clflash_status_string(st), (int)st, clflash_last_error_detail());
        return 1;
    }
    bn.cl = clflash_context_cl(bn.ctx);
    bn.queue = clflash_context_queue(bn.ctx);
    err = read_facts(clflash_context_device(bn.ctx), &bn.facts, &what);
    if (err != CL_SUCCESS) {
        fprintf(stderr, PROG ": %s failed with %d (%s)\n", what, (int)err, clflash_status_string(err));
        free_facts(&bn.facts);
        clflash_context_free(bn.ctx);
        return 1;
    }

    bn.nresults = o->nseq * o->nalgo;
    bn.results = xmalloc(bn.nresults * sizeof *bn.results);
    memset(bn.results, 0, bn.nresults * sizeof *bn.results);

    if (!o->json && !o->csv)
        print_header(&bn);
    for (size_t si = 0; si < o->nseq; si++)
        bench_seq(&bn, si);

    if (o->json) {
        print_json(&bn, date);
    } else if (o->csv) {
        print_csv(&bn);
    } else {
        print_table(&bn);
        print_summary(&bn);
    }

    for (size_t i = 0; i < bn.nresults; i++) {
        free(bn.results[i].detail);
        free(bn.results[i].check_error);
    }
    free(bn.results);
    free_facts(&bn.facts);
    clflash_context_free(bn.ctx);
    return bn.failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc;

    tool_set_name(PROG);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--decode") == 0)
            return bench_decode_main(argc, argv);
        else if (strcmp(argv[i], "--features") == 0)
            return bench_features_main(argc, argv);
        else if (strcmp(argv[i], "--varlen") == 0)
            return bench_varlen_main(argc, argv);
    memset(&o, 0, sizeof o);
    o.head_dim = DEFAULT_HEAD_DIM;
    o.dtype = CLFLASH_F32;
    o.batch = 1;
    o.heads = DEFAULT_HEADS;
    o.warmup = DEFAULT_WARMUP;
    o.min_time = DEFAULT_MIN_TIME;

    rc = parse_args(argc, argv, &o);
    if (rc < 0)
        rc = run(&o);
    free(o.seqs);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs(PROG ": error writing to standard output\n", stderr);
        return rc == TOOL_EXIT_USAGE ? rc : 1;
    }
    return rc;
}

