/*
 * bench_report.c - clflash-bench's reports for its main mode: the table for people (with the plan,
 * the device's facts and a summary) and the JSON and CSV for scripts.
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
 * Formatting numbers for people, and exactly for scripts.
 * ========================================================================================== */

const char *algo_name(bench_algo a)
{
    return a == ALGO_FLASH ? "flash" : a == ALGO_NAIVE ? "naive" : "blas";
}

/* Milliseconds with about four significant digits. */
void format_ms(double ms, char *out, size_t cap)
{
    if (ms >= 100.0)
        snprintf(out, cap, "%.1f", ms);
    else if (ms >= 10.0)
        snprintf(out, cap, "%.2f", ms);
    else if (ms >= 1.0)
        snprintf(out, cap, "%.3f", ms);
    else
        snprintf(out, cap, "%.4f", ms);
}

/* ============================================================================================
 * Human output.
 * ========================================================================================== */

enum { COL_ALGO, COL_N, COL_MEDIAN, COL_MIN, COL_MAX, COL_RUNS, COL_TFLOPS, COL_TRAFFIC, COL_GBPS, COL_B,
       COL_SCRATCH, COL_SCORES, COL_RSS, COL_FWD, COL_RATIO, COL_DIFF, COL_STATUS, NCOLS };
#define CELL 48

static void print_plan(const clflash_plan *p, int backward)
{
    char buf[64], tile[64];
    printf("  block (B)          %" PRIu32 "\n", p->block);
    printf("  threads per row    %" PRIu32 "\n", p->threads_per_row);
    printf("  work-group size    %" PRIu32 "\n", p->work_group_size);
    format_unit(p->tile_bytes, buf, sizeof buf);
    printf("  tile bytes         %" PRIu64 " (%s)%s\n", p->tile_bytes, buf,
           backward ? ", by the backward rule (4*B*d + 2*B*B) * s" : "");
    format_unit(p->kernel_local_bytes, buf, sizeof buf);
    printf("  kernel local bytes %" PRIu64 " (%s)\n", p->kernel_local_bytes, buf);
    format_unit(p->local_mem_budget, buf, sizeof buf);
    printf("  local mem budget   %" PRIu64 " (%s)\n", p->local_mem_budget, buf);
    printf("  kernel             %s\n", p->kernel ? p->kernel : "(none)");
    printf("  tuning             %s\n", p->tuning[0] ? p->tuning : "(none)");
    printf("  tiles_q            %" PRIu64 "\n", p->tiles_q);
    printf("  kv_passes          %" PRIu64 "\n", p->kv_passes);
    if (!backward) {
        format_unit(p->score_matrix_bytes, buf, sizeof buf);
        format_unit(p->tile_bytes, tile, sizeof tile);
        printf("  score matrix/head  %s (what naive writes per head) vs one %s tile\n", buf, tile);
    }
}

void print_header(const bench *bn)
{
    const options *o = bn->opt;
    const device_facts *f = &bn->facts;
    char buf[64];
    clflash_attention_desc d;
    clflash_plan plan = {.struct_size = sizeof plan};
    clflash_status st;

    printf("clflash-bench (clflash %s): ", clflash_version_string());
    for (size_t a = 0; a < o->nalgo; a++)
        printf("%s%s", a ? " vs " : "", algo_name(o->algos[a]));
    printf(" attention, %s\n\n", o->backward ? "backward (forward timed too)" : "forward");
    printf("Device\n");
    printf("  name               %s\n", f->name);
    printf("  vendor             %s\n", f->vendor);
    printf("  driver             %s\n", f->driver);
    printf("  version            %s\n", f->version);
    printf("  compute units      %u\n", (unsigned)f->compute_units);
    format_unit(f->local_mem, buf, sizeof buf);
    printf("  local memory       %s\n", buf);
    format_unit(f->max_alloc, buf, sizeof buf);
    printf("  max alloc          %s\n", buf);
    format_unit(f->global_mem, buf, sizeof buf);
    printf("  global memory      %s\n", buf);
#ifdef CLFLASH_BENCH_BLAS
    if (has_algo(o, ALGO_BLAS)) {
        printf("\nBLAS (host, fp32)\n");
        printf("  library            %s\n", bench_blas_name());
        if (bench_blas_threads() > 0)
            printf("  threads            %d\n", bench_blas_threads());
    }
#endif

    describe_desc(o, o->seqs[0], &d);
    memset(&plan, 0, sizeof plan);
    plan.struct_size = sizeof plan;
    printf("\n%s plan for batch %" PRIu32 ", heads %" PRIu32 ", n %" PRIu32 ", head_dim %" PRIu32
           ", %s%s%s\n",
           o->backward ? "Backward" : "Forward", o->batch, o->heads, o->seqs[0], o->head_dim,
           dtype_name(o->dtype), o->causal ? ", causal" : "", o->have_block ? ", --block forced" : "");
    st = o->backward ? clflash_plan_backward(bn->ctx, &d, &plan) : clflash_plan_attention(bn->ctx, &d, &plan);
    if (st == CLFLASH_SUCCESS)
        print_plan(&plan, o->backward);
    else
        printf("  failed: %s (%d): %s\n", clflash_status_string(st), (int)st,
               clflash_last_error_detail());
    printf("\nTiming: %u warm-up run%s, then timed runs for at least %g s (%u to %u runs); "
           "each is wall clock from enqueue to clFinish\n\n",
           (unsigned)o->warmup, o->warmup == 1 ? "" : "s", o->min_time, MIN_RUNS, MAX_RUNS);
    fflush(stdout);
}

void print_table(const bench *bn)
{
    static const char *const headers[NCOLS] = {
        "algo", "n", "median ms", "min ms", "max ms", "runs", "TFLOP/s", "modeled traffic", "GB/s", "B",
        "scratch", "scores/head", "peak RSS", "fwd ms", "bwd/fwd", "max |diff|", "status"};
    static const int right[NCOLS] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    const int backward = bn->opt->backward;
    char(*cells)[NCOLS][CELL] = xmalloc(bn->nresults * sizeof *cells);
    size_t width[NCOLS];
    int show[NCOLS];
    size_t nfail = 0;

    for (int k = 0; k < NCOLS; k++) /* no traffic model for the backward; no ratio for the forward */
        show[k] = backward ? k != COL_TRAFFIC && k != COL_GBPS : k != COL_FWD && k != COL_RATIO;
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        char *c[NCOLS];
        for (int k = 0; k < NCOLS; k++) {
            c[k] = cells[i][k];
            strcpy(c[k], "-");
        }
        snprintf(c[COL_ALGO], CELL, "%s", algo_name(r->algo));
        snprintf(c[COL_N], CELL, "%" PRIu32, r->seq);
        if (r->status == CLFLASH_SUCCESS) {
            format_ms(r->ms_median, c[COL_MEDIAN], CELL);
            format_ms(r->ms_min, c[COL_MIN], CELL);
            format_ms(r->ms_max, c[COL_MAX], CELL);
            snprintf(c[COL_RUNS], CELL, "%u", r->runs);
            snprintf(c[COL_TFLOPS], CELL, "%.4g", r->tflops);
            if (r->modeled_bytes)
                snprintf(c[COL_GBPS], CELL, "%.4g", r->gbps);
            if (r->peak_rss)
                format_unit(r->peak_rss, c[COL_RSS], CELL);
            if (r->have_fwd) {
                format_ms(r->fwd_ms_median, c[COL_FWD], CELL);
                if (r->fwd_ms_median > 0.0)
                    snprintf(c[COL_RATIO], CELL, "%.2f", r->ms_median / r->fwd_ms_median);
            }
            strcpy(c[COL_STATUS], r->check_error ? "check failed" : "ok");
        } else {
            nfail++;
            snprintf(c[COL_STATUS], CELL, "failed (%zu)", nfail);
        }
        if (r->modeled_bytes)
            format_unit(r->modeled_bytes, c[COL_TRAFFIC], CELL);
        if (r->have_plan)
            snprintf(c[COL_B], CELL, "%" PRIu32, r->plan.block);
        if (r->have_temp)
            format_unit(r->temp_bytes, c[COL_SCRATCH], CELL);
        if (r->score_matrix_bytes != UINT64_MAX)
            format_unit(r->score_matrix_bytes, c[COL_SCORES], CELL);
        if (r->checked)
            snprintf(c[COL_DIFF], CELL, "%.2g vs %s", r->max_abs_diff, r->compared_with);
        else if (r->check_error)
            strcpy(c[COL_DIFF], "see below");
    }

    for (int k = 0; k < NCOLS; k++) {
        width[k] = strlen(headers[k]);
        for (size_t i = 0; i < bn->nresults; i++)
            if (strlen(cells[i][k]) > width[k])
                width[k] = strlen(cells[i][k]);
    }
    for (size_t i = 0; i <= bn->nresults; i++) { /* the header row, then one row per result */
        int first = 1;
        for (int k = 0; k < NCOLS; k++) {
            if (!show[k])
                continue;
            fputs(first ? "" : "  ", stdout);
            first = 0;
            print_padded(stdout, i == 0 ? headers[k] : cells[i - 1][k], k == NCOLS - 1 ? 0 : width[k], right[k]);
        }
        putchar('\n');
    }
    free(cells);

    nfail = 0;
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        if (r->status != CLFLASH_SUCCESS) {
            nfail++;
            printf("(%zu) %s n=%" PRIu32 ": %s (%d)%s%s\n", nfail, algo_name(r->algo), r->seq,
                   clflash_status_string(r->status), (int)r->status,
                   r->detail && *r->detail ? ": " : "", r->detail ? r->detail : "");
        }
        if (r->check_error)
            printf("check %s n=%" PRIu32 ": %s\n", algo_name(r->algo), r->seq, r->check_error);
    }
    if (backward)
        printf("\nTFLOP/s counts the backward as 2.5x the forward's 4*b*h*n*n*d; fwd ms: the same algorithm's "
               "forward (with lse); bwd/fwd: backward time / forward time.");
    else
        printf("\nmodeled traffic: global-memory bytes each algorithm must move (clflash_traffic_bytes; "
               "blas moves its scores as naive does).");
    printf(" scratch: memory the call allocates besides its inputs and outputs. peak RSS: the process's "
           "high-water mark after that row (getrusage), so it is clean only for the first algorithm of a run.\n");
}

/* A time and the factor against another: "123.4 ms" or "failed (...)". */
static void print_time(const result *r)
{
    char ms[32];
    if (r->status == CLFLASH_SUCCESS) {
        format_ms(r->ms_median, ms, sizeof ms);
        printf(" %s %s ms", algo_name(r->algo), ms);
        if (r->have_fwd && r->fwd_ms_median > 0.0)
            printf(" (%.2fx its forward)", r->ms_median / r->fwd_ms_median);
    } else {
        printf(" %s failed (%s)", algo_name(r->algo), clflash_status_string(r->status));
    }
}

/* "n=4096: flash 123.4 ms, naive 234.5 ms, blas 99.0 ms -> flash is 1.90x faster than naive, ...;
 * memory: ...; largest differences ..." */
void print_summary(const bench *bn)
{
    const options *o = bn->opt;
    printf("\nSummary\n");
    for (size_t si = 0; si < o->nseq; si++) {
        const result *row[NUM_ALGOS] = {NULL, NULL, NULL};
        const result *flash, *naive, *any = NULL;
        char io[32], per_head[32], temp[32];
        for (size_t a = 0; a < o->nalgo; a++) {
            const result *r = &bn->results[si * o->nalgo + a];
            row[r->algo] = r;
            any = any ? any : r;
        }
        flash = row[ALGO_FLASH];
        naive = row[ALGO_NAIVE];
        printf("n=%" PRIu32 ":%s", o->seqs[si], o->backward ? " backward" : "");
        for (size_t a = 0; a < o->nalgo; a++) {
            if (a)
                putchar(',');
            print_time(&bn->results[si * o->nalgo + a]);
        }
        for (int a = ALGO_NAIVE; a < NUM_ALGOS; a++) {
            const result *r = row[a];
            if (flash && r && flash->status == CLFLASH_SUCCESS && r->status == CLFLASH_SUCCESS &&
                flash->ms_median > 0.0) {
                double ratio = r->ms_median / flash->ms_median;
                printf(a == ALGO_NAIVE || !naive ? " -> flash is " : ", ");
                if (ratio >= 1.0)
                    printf("%.2fx faster than %s", ratio, algo_name(r->algo));
                else
                    printf("%.2fx slower than %s", 1.0 / ratio, algo_name(r->algo));
            }
        }
        /* memory: the score matrices the baselines need, and what flash needs instead */
        {
            int have_io = any->io_bytes != UINT64_MAX, have_score = any->score_matrix_bytes != UINT64_MAX;
            format_unit(any->io_bytes, io, sizeof io);
            format_unit(any->score_matrix_bytes, per_head, sizeof per_head);
            printf("; memory: ");
            if (naive && naive->have_temp && have_score) {
                format_unit(naive->temp_bytes, temp, sizeof temp);
                printf("naive %s %s %s(%s of scores per head)", naive->status == CLFLASH_SUCCESS ? "needs" : "would need",
                       temp, o->backward ? "of P and dP matrices and accumulators " : "of scores ", per_head);
            } else if (have_score) {
                printf("naive would need %s of scores per head", per_head);
                if (naive && naive->status == CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE) {
                    format_unit(bn->facts.max_alloc, temp, sizeof temp);
                    printf(" (more than the device's %s max allocation)", temp);
                }
            } else {
                printf("naive's score matrix does not fit 64 bits");
            }
            if (have_io)
                printf(" on top of the %s of Q/K/V/O", io);
            if (row[ALGO_BLAS] && row[ALGO_BLAS]->have_temp) {
                format_unit(row[ALGO_BLAS]->temp_bytes, temp, sizeof temp);
                printf(", blas %s (one head's fp32 scores)", temp);
            }
            if (o->backward && flash && flash->have_temp) {
                format_unit(flash->temp_bytes, temp, sizeof temp);
                printf(", flash %s (one float per query row)", temp);
            } else {
                printf(", flash %s", flash ? "none" : "would need none");
            }
        }
        for (size_t a = 0; a < o->nalgo; a++) {
            const result *r = &bn->results[si * o->nalgo + a];
            if (r->checked)
                printf("; largest |%s - %s| = %.2g", algo_name(r->algo), r->compared_with, r->max_abs_diff);
            else if (r->check_error)
                printf("; %s check failed: %s", algo_name(r->algo), r->check_error);
        }
        if (o->no_check)
            printf("; not compared (--no-check)");
        printf("\n");
    }
}

/* ============================================================================================
 * JSON and CSV output.
 * ========================================================================================== */

void print_json(const bench *bn, const char *date)
{
    const options *o = bn->opt;
    const device_facts *f = &bn->facts;
    json_writer j;
    memset(&j, 0, sizeof j);
    j.f = stdout;

    json_open(&j, NULL, '{');
    json_str(&j, "clflash_version", clflash_version_string());
    json_str(&j, "date", date);
    json_open(&j, "device", '{');
    json_str(&j, "name", f->name);
    json_str(&j, "vendor", f->vendor);
    json_str(&j, "driver", f->driver);
    json_str(&j, "version", f->version);
    json_u64(&j, "compute_units", f->compute_units);
    json_u64(&j, "local_mem_bytes", f->local_mem);
    json_u64(&j, "max_alloc_bytes", f->max_alloc);
    json_u64(&j, "global_mem_bytes", f->global_mem);
    json_close(&j, '}');
    json_open(&j, "config", '{');
    json_u64(&j, "warmup", o->warmup);
    json_num(&j, "min_time_s", 1, o->min_time);
    json_u64(&j, "min_runs", MIN_RUNS);
    json_u64(&j, "max_runs", MAX_RUNS);
    json_bool(&j, "check", !o->no_check);
    json_opt_u64(&j, "forced_block", o->have_block, o->block);
    json_str(&j, "device_request", o->device);
    json_str(&j, "build_options", o->build_options);
    json_str(&j, "tuning", o->tuning);
    json_str(&j, "timing", "wall clock from enqueue to clFinish, one call per run");
    json_str(&j, "pass", o->backward ? "backward" : "forward");
    json_str(&j, "flops", o->backward ? "2.5 * 4*b*h*n*n*d (halved for causal)" : "4*b*h*n*n*d (halved for causal)");
    json_str(&j, "peak_rss", "getrusage ru_maxrss after each row: the process's high-water mark so far");
#ifdef CLFLASH_BENCH_BLAS
    json_str(&j, "blas", has_algo(o, ALGO_BLAS) ? bench_blas_name() : NULL);
    json_opt_u64(&j, "blas_threads", has_algo(o, ALGO_BLAS) && bench_blas_threads() > 0,
                 (uint64_t)bench_blas_threads());
#else
    json_str(&j, "blas", NULL);
    json_opt_u64(&j, "blas_threads", 0, 0);
#endif
    json_close(&j, '}');
    json_open(&j, "results", '[');
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        const int ok = r->status == CLFLASH_SUCCESS;
        json_open(&j, NULL, '{');
        json_str(&j, "algo", algo_name(r->algo));
        json_u64(&j, "seq", r->seq);
        json_u64(&j, "head_dim", o->head_dim);
        json_str(&j, "dtype", dtype_name(o->dtype));
        json_u64(&j, "batch", o->batch);
        json_u64(&j, "heads", o->heads);
        json_bool(&j, "causal", o->causal);
        json_num(&j, "ms_median", ok, r->ms_median);
        json_num(&j, "ms_min", ok, r->ms_min);
        json_num(&j, "ms_max", ok, r->ms_max);
        json_opt_u64(&j, "runs", ok, r->runs);
        json_num(&j, "tflops", ok, r->tflops);
        json_opt_u64(&j, "modeled_bytes", r->modeled_bytes != 0, r->modeled_bytes);
        json_num(&j, "gbps", ok && r->modeled_bytes != 0, r->gbps);
        json_opt_u64(&j, "temp_bytes", r->have_temp, r->temp_bytes);
        json_opt_u64(&j, "io_bytes", r->io_bytes != UINT64_MAX, r->io_bytes);
        json_opt_u64(&j, "score_matrix_bytes", r->score_matrix_bytes != UINT64_MAX, r->score_matrix_bytes);
        json_opt_u64(&j, "block", r->have_plan, r->plan.block);
        json_num(&j, "max_abs_diff", r->checked, r->max_abs_diff);
        json_str(&j, "compared_with", r->checked ? r->compared_with : NULL);
        json_str(&j, "pass", o->backward ? "backward" : "forward");
        json_opt_u64(&j, "peak_rss_bytes", r->peak_rss != 0, r->peak_rss);
        json_num(&j, "fwd_ms_median", r->have_fwd, r->fwd_ms_median);
        json_num(&j, "bwd_fwd_ratio", ok && r->have_fwd && r->fwd_ms_median > 0.0,
                 r->fwd_ms_median > 0.0 ? r->ms_median / r->fwd_ms_median : 0.0);
        json_str(&j, "status", ok ? (r->check_error ? "check failed" : "ok") : clflash_status_string(r->status));
        json_i64(&j, "status_code", r->status);
        json_str(&j, "error_detail", ok ? NULL : r->detail);
        json_bool(&j, "expected_failure", r->expected);
        json_str(&j, "check_error", r->check_error);
        json_str(&j, "kernel", r->have_plan ? r->plan.kernel : NULL);
        json_str(&j, "tuning", r->have_plan ? r->plan.tuning : NULL);
        json_opt_u64(&j, "threads_per_row", r->have_plan, r->plan.threads_per_row);
        json_opt_u64(&j, "work_group_size", r->have_plan, r->plan.work_group_size);
        json_opt_u64(&j, "tile_bytes", r->have_plan, r->plan.tile_bytes);
        json_opt_u64(&j, "kernel_local_bytes", r->have_plan, r->plan.kernel_local_bytes);
        json_opt_u64(&j, "tiles_q", r->have_plan, r->plan.tiles_q);
        json_opt_u64(&j, "kv_passes", r->have_plan, r->plan.kv_passes);
        json_close(&j, '}');
    }
    json_close(&j, ']');
    json_close(&j, '}');
}

/* A CSV field, quoted when it holds a comma, quote or line break (RFC 4180). */
static void csv_field(const char *s, int last)
{
    if (strpbrk(s, ",\"\r\n")) {
        putchar('"');
        for (const char *p = s; *p; p++) {
            if (*p == '"')
                putchar('"');
            putchar(*p);
        }
        putchar('"');
    } else {
        fputs(s, stdout);
    }
    putchar(last ? '\n' : ',');
}

static void csv_u64(int have, uint64_t v)
{
    if (have)
        printf("%" PRIu64, v);
    putchar(',');
}

static void csv_num(int have, double v)
{
    char buf[40] = "";
    if (have && isfinite(v))
        format_exact(v, buf, sizeof buf);
    fputs(buf, stdout);
    putchar(',');
}

void print_csv(const bench *bn)
{
    const options *o = bn->opt;
    printf("device,algo,seq,head_dim,dtype,batch,heads,causal,ms_median,ms_min,ms_max,runs,tflops,"
           "modeled_bytes,gbps,temp_bytes,io_bytes,score_matrix_bytes,block,max_abs_diff,status,pass,"
           "peak_rss_bytes,fwd_ms_median,bwd_fwd_ratio,tile_bytes,compared_with\n");
    for (size_t i = 0; i < bn->nresults; i++) {
        const result *r = &bn->results[i];
        const int ok = r->status == CLFLASH_SUCCESS;
        csv_field(bn->facts.name, 0);
        csv_field(algo_name(r->algo), 0);
        printf("%" PRIu32 ",%" PRIu32 ",%s,%" PRIu32 ",%" PRIu32 ",%d,", r->seq, o->head_dim,
               dtype_name(o->dtype), o->batch, o->heads, o->causal);
        csv_num(ok, r->ms_median);
        csv_num(ok, r->ms_min);
        csv_num(ok, r->ms_max);
        csv_u64(ok, r->runs);
        csv_num(ok, r->tflops);
        csv_u64(r->modeled_bytes != 0, r->modeled_bytes);
        csv_num(ok && r->modeled_bytes != 0, r->gbps);
        csv_u64(r->have_temp, r->temp_bytes);
        csv_u64(r->io_bytes != UINT64_MAX, r->io_bytes);
        csv_u64(r->score_matrix_bytes != UINT64_MAX, r->score_matrix_bytes);
        csv_u64(r->have_plan, r->plan.block);
        csv_num(r->checked, r->max_abs_diff);
        csv_field(ok ? (r->check_error ? "check failed" : "ok") : clflash_status_string(r->status), 0);
        csv_field(o->backward ? "backward" : "forward", 0);
        csv_u64(r->peak_rss != 0, r->peak_rss);
        csv_num(r->have_fwd, r->fwd_ms_median);
        csv_num(ok && r->have_fwd && r->fwd_ms_median > 0.0,
                r->fwd_ms_median > 0.0 ? r->ms_median / r->fwd_ms_median : 0.0);
        csv_u64(r->have_plan, r->plan.tile_bytes);
        csv_field(r->checked ? r->compared_with : "", 1);
    }
}
