/*
 * clflash_query.c - the `clflash-query` tool: what OpenCL devices are here, how much local memory
 * each has, which tile size B clflash's planner picks on each, and the tile arithmetic of the README's figures.
 *
 * Why it exists: users arrive with the README's figures in mind ("the 32 MiB score matrix becomes a
 * 56 KiB tile", "B = 256 does not fit 192 KiB in fp16 but fits in int8") and need a way to check
 * those figures, and to see what the library will actually do on their own hardware, without
 * writing code. It lists every device with the "P:D" index that CLFLASH_DEVICE accepts, plans a
 * forward call on each exactly as an application would (clflash_plan_attention), and, with
 * --local-mem, is a pure calculator of the tile rule that needs no device at all. --backward adds
 * the backward pass: its tile rule in the calculator and clflash_plan_backward's plan per device.
 * Tables are for people; --json is for scripts. It uses only clflash.h and plain OpenCL 1.2 calls.
 */
#include "tool_common.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

#define PROG "clflash-query"
#define DEFAULT_HEAD_DIM 128u
#define DEFAULT_PLAN_SEQ 4096u

/* The tile table's rows, used when --local-mem is given without --seq. */
static const uint64_t table_seqs[] = {1024, 4096, 8192, 16384};

/* ============================================================================================
 * Small helpers.
 * ========================================================================================== */

/* Whether the space-separated list `list` contains exactly the token `tok`. */
static int has_token(const char *list, const char *tok)
{
    size_t tlen = strlen(tok);
    const char *p = list;
    while (*p) {
        size_t n;
        while (*p && isspace((unsigned char)*p))
            p++;
        n = 0;
        while (p[n] && !isspace((unsigned char)p[n]))
            n++;
        if (n == tlen && strncmp(p, tok, n) == 0)
            return 1;
        p += n;
    }
    return 0;
}

/* ============================================================================================
 * Number formatting: exact human sizes and the reduction factor.
 * ========================================================================================== */

/* "57344 B (56 KiB)", or just "512 B" below one KiB; "overflow" for a saturated count. */
static void format_bytes(uint64_t bytes, char *out, size_t cap)
{
    char unit[48];
    if (bytes == UINT64_MAX) {
        snprintf(out, cap, "overflow (more than 2^64-1 B)");
        return;
    }
    if (bytes < 1024) {
        snprintf(out, cap, "%" PRIu64 " B", bytes);
        return;
    }
    format_unit(bytes, unit, sizeof unit);
    snprintf(out, cap, "%" PRIu64 " B (%s)", bytes, unit);
}

/* ============================================================================================
 * The tile table: one row per sequence length.
 * ========================================================================================== */

typedef struct {
    uint64_t local_mem, head_dim, elem, block, max_block;
    clflash_dtype dtype;
    int backward; /* --backward: the backward rule (4*B*d + 2*B*B) * s instead of the forward's */
} calc_params;

typedef struct {
    uint64_t seq, score_bytes, tile_bytes, tiles, pairs, kv_passes;
    int fits;
    char reduction[48];       /* an exact integer when B divides n, else the shortest double */
    char reduction_human[48]; /* the same, or rounded to two decimals and marked "~" */
} table_row;

static void compute_row(const calc_params *p, uint64_t n, table_row *r)
{
    uint64_t b = p->block; /* 1 .. 2^32-1, and n is 1 .. 2^32-1: no product below overflows */
    r->seq = n;
    r->score_bytes = clflash_score_matrix_bytes(n, n, p->elem);
    r->tile_bytes = p->backward ? clflash_backward_tile_bytes(b, p->head_dim, p->elem)
                                : clflash_tile_bytes(b, p->head_dim, p->elem);
    r->fits = r->tile_bytes != UINT64_MAX && r->tile_bytes <= p->local_mem;
    r->tiles = n / b + (n % b != 0);
    r->pairs = r->tiles * r->tiles;
    r->kv_passes = r->tiles;
    if (n % b == 0) {
        uint64_t q = n / b;
        snprintf(r->reduction, sizeof r->reduction, "%" PRIu64, q * q);
        memcpy(r->reduction_human, r->reduction, sizeof r->reduction);
    } else {
        double v = ((double)n * (double)n) / ((double)b * (double)b);
        const char *dot;
        format_exact(v, r->reduction, sizeof r->reduction);
        dot = strchr(r->reduction, '.');
        if (dot && strlen(dot + 1) <= 3 && strchr(r->reduction, 'e') == NULL)
            memcpy(r->reduction_human, r->reduction, sizeof r->reduction);
        else
            snprintf(r->reduction_human, sizeof r->reduction_human, "~%.2f", v);
    }
}

/* ---- a text table whose columns size themselves ------------------------------------------ */

typedef struct {
    size_t ncols;
    const char *const *headers;
    const int *right; /* 1 = right-aligned column */
    char **cells;     /* row-major, ncols per row */
    size_t ncells, cap;
} text_table;

static void table_cell(text_table *t, const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    s = xvprintf(fmt, ap);
    va_end(ap);
    if (t->ncells == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->cells = xrealloc(t->cells, t->cap * sizeof *t->cells);
    }
    t->cells[t->ncells++] = s;
}

/* Prints a Markdown-compatible table (it renders as the README's tables do) and frees the cells. */
static void table_print_free(text_table *t, FILE *f, const char *indent)
{
    size_t *w = xmalloc(t->ncols * sizeof *w);
    for (size_t c = 0; c < t->ncols; c++)
        w[c] = strlen(t->headers[c]);
    for (size_t i = 0; i < t->ncells; i++)
        if (strlen(t->cells[i]) > w[i % t->ncols])
            w[i % t->ncols] = strlen(t->cells[i]);

    fputs(indent, f);
    for (size_t c = 0; c < t->ncols; c++) {
        fputs("| ", f);
        print_padded(f, t->headers[c], w[c], t->right[c]);
        fputc(' ', f);
    }
    fputs("|\n", f);
    fputs(indent, f);
    for (size_t c = 0; c < t->ncols; c++) {
        fputc('|', f);
        for (size_t i = 0; i < w[c] + 1; i++)
            fputc('-', f);
        fputc(t->right[c] ? ':' : '-', f);
    }
    fputs("|\n", f);
    for (size_t i = 0; i < t->ncells; i++) {
        if (i % t->ncols == 0)
            fputs(indent, f);
        fputs("| ", f);
        print_padded(f, t->cells[i], w[i % t->ncols], t->right[i % t->ncols]);
        fputc(' ', f);
        if (i % t->ncols == t->ncols - 1)
            fputs("|\n", f);
    }
    for (size_t i = 0; i < t->ncells; i++)
        free(t->cells[i]);
    free(t->cells);
    free(w);
    t->cells = NULL;
    t->ncells = t->cap = 0;
}

/* The human tile table for p over the given sequence lengths. */
static void print_tile_table(const calc_params *p, const uint64_t *seqs, size_t nseq, const char *indent)
{
    static const int right[] = {1, 0, 0, 0, 1, 1, 1, 1};
    char *tile_header = xprintf("one tile (B=%" PRIu64 ")", p->block);
    const char *headers[8];
    text_table t = {8, headers, right, NULL, 0, 0};
    headers[0] = "n";
    headers[1] = "score matrix per head";
    headers[2] = tile_header;
    headers[3] = "fits";
    headers[4] = "tiles/axis";
    headers[5] = "tile pairs";
    headers[6] = "K/V passes";
    headers[7] = "reduction (n/B)^2";
    for (size_t i = 0; i < nseq; i++) {
        table_row r;
        char score[96], tile[96];
        compute_row(p, seqs[i], &r);
        format_bytes(r.score_bytes, score, sizeof score);
        format_bytes(r.tile_bytes, tile, sizeof tile);
        table_cell(&t, "%" PRIu64, r.seq);
        table_cell(&t, "%s", score);
        table_cell(&t, "%s", tile);
        table_cell(&t, "%s", r.fits ? "yes" : "NO");
        table_cell(&t, "%" PRIu64, r.tiles);
        table_cell(&t, "%" PRIu64, r.pairs);
        table_cell(&t, "%" PRIu64, r.kv_passes);
        table_cell(&t, "%sx", r.reduction_human);
    }
    table_print_free(&t, stdout, indent);
    free(tile_header);
}

/* ============================================================================================
 * JSON.
 * ========================================================================================== */

/* A byte count the library saturated to UINT64_MAX is written as null: it is not a real size. */
static void json_bytes(json_writer *w, const char *key, uint64_t v)
{
    json_opt_u64(w, key, v != UINT64_MAX, v);
}

/* One tile-table row as a JSON object with every documented key (docs/tools.md). */
static void json_table_row(json_writer *w, const char *key, const calc_params *p, uint64_t n)
{
    table_row r;
    compute_row(p, n, &r);
    json_open(w, key, '{');
    if (p->backward)
        json_str(w, "pass", "backward");
    json_u64(w, "local_mem_bytes", p->local_mem);
    json_u64(w, "head_dim", p->head_dim);
    json_str(w, "dtype", dtype_name(p->dtype));
    json_u64(w, "bytes_per_elem", p->elem);
    json_u64(w, "block", p->block);
    json_bytes(w, "tile_bytes", r.tile_bytes);
    json_bool(w, "fits", r.fits);
    json_u64(w, "seq", r.seq);
    json_bytes(w, "score_matrix_bytes", r.score_bytes);
    json_u64(w, "tiles_per_axis", r.tiles);
    json_u64(w, "tile_pairs", r.pairs);
    json_u64(w, "kv_passes", r.kv_passes);
    json_raw(w, "reduction", r.reduction);
    json_u64(w, "max_block", p->max_block);
    json_close(w, '}');
}

/* ============================================================================================
 * Command line.
 * ========================================================================================== */

typedef struct {
    int json, no_plan, backward;
    int have_block, have_local_mem, have_budget, have_seq;
    uint64_t head_dim, block, local_mem, budget;
    clflash_dtype dtype;
    uint64_t *seqs;
    size_t nseq, seq_cap;
} options;

static void print_help(FILE *f)
{
    fputs("Usage: " PROG " [options]\n"
          "\n"
          "Lists every OpenCL platform and device with the P:D index that CLFLASH_DEVICE accepts,\n"
          "its local memory, work-group and allocation limits and fp16/fp64/subgroup support, and\n"
          "the tile size B that clflash's planner picks on it for a forward call (this builds the\n"
          "kernel). With --local-mem it is instead a calculator of the tile rule and needs no\n"
          "device:\n"
          "  score matrix per head = n * n * s      one tile = (3*B*d + B*B) * s\n"
          "  tiles per axis = ceil(n / B)           tile pairs = tiles^2\n"
          "  K/V passes = tiles per axis            reduction = (n/B)^2\n"
          "where s is the dtype's bytes per element and d the head dimension.\n"
          "\n",
          f);
    fputs("Options:\n"
          "  --head-dim D       head dimension d (default 128; at most 256 when planning)\n"
          "  --dtype T          storage type: f32, f16, bf16 or i8 (default f16)\n"
          "  --seq N[,N...]     sequence lengths n (seq_q = seq_k); may be repeated. The first one\n"
          "                     is what devices plan for (default 4096). With --local-mem the\n"
          "                     default is 1024,4096,8192,16384\n"
          "  --block B          B for the table rows (default: the largest B that fits);\n"
          "                     the planner still chooses its own B\n"
          "  --local-mem BYTES  calculator mode: plan against BYTES of local memory, no OpenCL\n"
          "  --budget BYTES     device mode: cap the local memory the planner may use\n"
          "                     (clflash_context_options.local_mem_budget; 0 = the device's)\n"
          "  --no-plan          device mode: only list devices, do not plan or build kernels\n"
          "  --backward         the backward pass too: its tile rule (4*B*d + 2*B*B) * s (a Q, K,\n"
          "                     V and dO block and the B x B P and dS blocks) in the calculator and\n"
          "                     the table, and clflash_plan_backward's plan beside the forward's\n"
          "  --json             print JSON instead of tables\n"
          "  --version          print the tool's and library's versions\n"
          "  -h, --help         print this help\n"
          "In device mode --seq or --block also print the table for each device's local memory\n"
          "(capped by --budget). Options take their value as the next argument or after '='.\n"
          "\n"
          "Exit status: 0 on success, 1 if no OpenCL platform is found or an OpenCL query fails,\n"
          "2 on a usage error.\n"
          "\n"
          "Examples:\n"
          "  " PROG "\n"
          "  " PROG " --head-dim 64 --dtype f32 --budget 49152\n"
          "  " PROG " --local-mem 196608 --head-dim 128 --dtype f16 --block 64 --seq 1024,4096\n"
          "  " PROG " --json --local-mem 196608 --block 256 --dtype i8 --seq 4096\n"
          "  " PROG " --backward --local-mem 49152 --head-dim 128 --dtype f16 --seq 4096\n",
          f);
}

/* One sequence length from --seq's list; 0 on a bad item. */
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
    o->seqs[o->nseq++] = v;
    return 1;
}

/* Returns -1 to go on, or an exit status (0 after --help/--version, 2 on a usage error). */
static int parse_args(int argc, char **argv, options *o)
{
    static const char *const flags[] = {"--json", "--no-plan", "--backward", NULL};
    static const char *const valued[] = {"--head-dim", "--dtype", "--seq", "--block",
                                         "--local-mem", "--budget", NULL};
    for (int i = 1; i < argc; i++) {
        const char *val, *name;

        int rc = tool_next_option(argc, argv, &i, flags, valued, print_help, &name, &val);
        if (rc >= 0)
            return rc;
        if (strcmp(name, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(name, "--no-plan") == 0) {
            o->no_plan = 1;
        } else if (strcmp(name, "--backward") == 0) {
            o->backward = 1;
        } else if (strcmp(name, "--head-dim") == 0) {
            if (!parse_uint(val, 0, UINT32_MAX, &o->head_dim) || o->head_dim == 0)
                return usage_error("--head-dim wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
        } else if (strcmp(name, "--dtype") == 0) {
            if (!parse_dtype(val, &o->dtype))
                return usage_error("--dtype wants f32, f16, bf16 or i8, not '%s'", val);
        } else if (strcmp(name, "--seq") == 0) {
            if (!each_item(val, add_seq, o))
                return usage_error("--seq wants comma-separated whole numbers from 1 to %" PRIu32
                                   ", not '%s'", UINT32_MAX, val);
            o->have_seq = 1;
        } else if (strcmp(name, "--block") == 0) {
            if (!parse_uint(val, 0, UINT32_MAX, &o->block) || o->block == 0)
                return usage_error("--block wants a whole number from 1 to %" PRIu32 ", not '%s'",
                                   UINT32_MAX, val);
            o->have_block = 1;
        } else if (strcmp(name, "--local-mem") == 0) {
            if (!parse_uint(val, 0, UINT64_MAX, &o->local_mem))
                return usage_error("--local-mem wants a number of bytes, not '%s'", val);
            o->have_local_mem = 1;
        } else { /* --budget */
            if (!parse_uint(val, 0, UINT64_MAX, &o->budget))
                return usage_error("--budget wants a number of bytes, not '%s'", val);
            o->have_budget = 1;
        }
    }

    if (o->have_local_mem && o->have_budget)
        return usage_error("--budget applies to devices; with --local-mem the budget is that value");
    if (o->have_local_mem && o->no_plan)
        return usage_error("--no-plan applies to devices; --local-mem never plans on a device");
    if (!o->have_local_mem && !o->no_plan && o->head_dim > CLFLASH_MAX_HEAD_DIM)
        return usage_error("--head-dim %" PRIu64 " is larger than clflash supports (%u); use "
                           "--local-mem for the pure calculation or --no-plan to only list devices",
                           o->head_dim, CLFLASH_MAX_HEAD_DIM);
    return -1;
}

/* ============================================================================================
 * Calculator mode (--local-mem): pure functions only, no OpenCL.
 * ========================================================================================== */

static int run_calculator(const options *o)
{
    calc_params p;
    const uint64_t *seqs = o->nseq ? o->seqs : table_seqs;
    size_t nseq = o->nseq ? o->nseq : sizeof table_seqs / sizeof table_seqs[0];

    p.local_mem = o->local_mem;
    p.head_dim = o->head_dim;
    p.dtype = o->dtype;
    p.elem = clflash_dtype_size(o->dtype);
    p.backward = o->backward;
    p.max_block = o->backward ? clflash_backward_max_block(o->local_mem, o->head_dim, p.elem)
                              : clflash_max_block(o->local_mem, o->head_dim, p.elem);
    p.block = o->have_block ? o->block : p.max_block;
    if (p.elem == 0) {
        fprintf(stderr, PROG ": the library reports no size for dtype %s\n", dtype_name(o->dtype));
        return 1;
    }
    if (p.block == 0) {
        fprintf(stderr,
                PROG ": no block size B fits %" PRIu64 " bytes of local memory with head_dim %" PRIu64
                     " and %s (even B = 1 needs %" PRIu64 " bytes); pass --block to print the table "
                     "anyway\n",
                o->local_mem, o->head_dim, dtype_name(o->dtype),
                o->backward ? clflash_backward_tile_bytes(1, o->head_dim, p.elem)
                            : clflash_tile_bytes(1, o->head_dim, p.elem));
        return 1;
    }

    if (o->json) {
        json_writer w = {stdout, 0, {0}};
        if (nseq == 1) {
            json_table_row(&w, NULL, &p, seqs[0]);
        } else {
            json_open(&w, NULL, '{');
            json_open(&w, "rows", '[');
            for (size_t i = 0; i < nseq; i++)
                json_table_row(&w, NULL, &p, seqs[i]);
            json_close(&w, ']');
            json_close(&w, '}');
        }
        return 0;
    }

    {
        char lm[96], tile[96];
        uint64_t tb = p.backward ? clflash_backward_tile_bytes(p.block, p.head_dim, p.elem)
                                 : clflash_tile_bytes(p.block, p.head_dim, p.elem);
        int fits = tb != UINT64_MAX && tb <= p.local_mem;
        format_bytes(p.local_mem, lm, sizeof lm);
        format_bytes(tb, tile, sizeof tile);
        printf("clflash tile calculator (no device)\n");
        printf("  local memory   %s\n", lm);
        printf("  head_dim d     %" PRIu64 "\n", p.head_dim);
        printf("  dtype          %s (s = %" PRIu64 " byte%s per element)\n", dtype_name(p.dtype),
               p.elem, p.elem == 1 ? "" : "s");
        printf("  max_block      %" PRIu64 " (the largest B whose tile fits)\n", p.max_block);
        printf("  block B        %" PRIu64 "%s\n", p.block,
               o->have_block ? " (from --block)" : " (max_block)");
        if (p.backward)
            printf("  backward tile  (4*%" PRIu64 "*%" PRIu64 " + 2*%" PRIu64 "^2) * %" PRIu64 " = %s: %s\n",
                   p.block, p.head_dim, p.block, p.elem, tile, fits ? "fits" : "does NOT fit");
        else
            printf("  one tile       (3*%" PRIu64 "*%" PRIu64 " + %" PRIu64 "^2) * %" PRIu64 " = %s: %s\n",
                   p.block, p.head_dim, p.block, p.elem, tile,
                   fits ? "fits" : "does NOT fit");
        printf("\n");
        print_tile_table(&p, seqs, nseq, "");
    }
    return 0;
}

/* ============================================================================================
 * Device mode: list platforms and devices, plan on each.
 * ========================================================================================== */

typedef struct {
    char *name, *vendor, *version;
} platform_report;

typedef struct {
    char *name, *vendor, *driver, *version, *extensions;
    cl_device_type type;
    cl_uint compute_units;
    cl_ulong local_mem, max_alloc, global_mem;
    cl_device_local_mem_type local_type;
    size_t max_wg;
    int fp16, fp64, subgroups;
    char *error; /* the first failed query, NULL if none */

    int planned;
    clflash_status plan_status;
    clflash_plan plan;
    char *plan_detail;    /* the failure's detail ("" if none) */
    char *plan_build_log; /* a failed build's log, NULL otherwise */

    int bw_planned; /* --backward: clflash_plan_backward's result, as above */
    clflash_status bw_status;
    clflash_plan bw_plan;
    char *bw_detail, *bw_build_log;
} device_report;

static char *cl_error_text(const char *call, cl_int err)
{
    return xprintf("%s failed with %d (%s)", call, (int)err, clflash_status_string(err));
}

/* Keeps the first error of a device's queries; a failed string becomes "". */
static void note(device_report *r, const char *what, cl_int err)
{
    if (err != CL_SUCCESS && r->error == NULL)
        r->error = cl_error_text(what, err);
}

static void dev_string(device_report *r, cl_device_id dev, cl_uint param, const char *what, char **out)
{
    cl_int err = cl_info_string(0, dev, param, out);
    note(r, what, err);
    if (*out == NULL)
        *out = xstrdup("");
}

#define DEV_SCALAR(r, dev, param, var) \
    note((r), "clGetDeviceInfo(" #param ")", clGetDeviceInfo((dev), (param), sizeof(var), &(var), NULL))

static void read_device(cl_device_id dev, device_report *r)
{
    dev_string(r, dev, CL_DEVICE_NAME, "clGetDeviceInfo(CL_DEVICE_NAME)", &r->name);
    dev_string(r, dev, CL_DEVICE_VENDOR, "clGetDeviceInfo(CL_DEVICE_VENDOR)", &r->vendor);
    dev_string(r, dev, CL_DRIVER_VERSION, "clGetDeviceInfo(CL_DRIVER_VERSION)", &r->driver);
    dev_string(r, dev, CL_DEVICE_VERSION, "clGetDeviceInfo(CL_DEVICE_VERSION)", &r->version);
    dev_string(r, dev, CL_DEVICE_EXTENSIONS, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS)", &r->extensions);
    DEV_SCALAR(r, dev, CL_DEVICE_TYPE, r->type);
    DEV_SCALAR(r, dev, CL_DEVICE_MAX_COMPUTE_UNITS, r->compute_units);
    DEV_SCALAR(r, dev, CL_DEVICE_LOCAL_MEM_SIZE, r->local_mem);
    DEV_SCALAR(r, dev, CL_DEVICE_LOCAL_MEM_TYPE, r->local_type);
    DEV_SCALAR(r, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, r->max_wg);
    DEV_SCALAR(r, dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, r->max_alloc);
    DEV_SCALAR(r, dev, CL_DEVICE_GLOBAL_MEM_SIZE, r->global_mem);
    r->fp16 = has_token(r->extensions, "cl_khr_fp16");
    r->fp64 = has_token(r->extensions, "cl_khr_fp64");
    r->subgroups = has_token(r->extensions, "cl_khr_subgroups") ||
                   has_token(r->extensions, "cl_intel_subgroups");
}

/* Plans a forward call on the device the way an application would. */
static void plan_device(cl_platform_id platform, cl_device_id dev, const options *o, device_report *r)
{
    cl_context_properties props[3];
    cl_context ctx;
    cl_int err = CL_SUCCESS;
    clflash_context_options copt;
    clflash_context *c = NULL;
    clflash_attention_desc desc;
    clflash_status st;

    r->planned = 1;
    props[0] = CL_CONTEXT_PLATFORM;
    props[1] = (cl_context_properties)platform;
    props[2] = 0;
    ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
    if (err != CL_SUCCESS || ctx == NULL) {
        r->plan_status = err != CL_SUCCESS ? err : CL_INVALID_CONTEXT;
        r->plan_detail = xstrdup("clCreateContext failed for this device");
        return;
    }

    memset(&copt, 0, sizeof copt);
    copt.struct_size = sizeof copt;
    copt.local_mem_budget = o->budget;
    st = clflash_context_create(ctx, dev, o->have_budget ? &copt : NULL, &c);
    if (st == CLFLASH_SUCCESS) {
        memset(&desc, 0, sizeof desc);
        desc.struct_size = sizeof desc;
        desc.batch = 1;
        desc.heads_q = 1;
        desc.seq_q = desc.seq_k = (uint32_t)(o->nseq ? o->seqs[0] : DEFAULT_PLAN_SEQ);
        desc.head_dim = (uint32_t)o->head_dim;
        desc.dtype = o->dtype;
        memset(&r->plan, 0, sizeof r->plan);
        r->plan.struct_size = sizeof r->plan;
        st = clflash_plan_attention(c, &desc, &r->plan);
        if (o->backward) {
            r->bw_planned = 1;
            memset(&r->bw_plan, 0, sizeof r->bw_plan);
            r->bw_plan.struct_size = sizeof r->bw_plan;
            r->bw_status = clflash_plan_backward(c, &desc, &r->bw_plan);
            if (r->bw_status != CLFLASH_SUCCESS) {
                r->bw_detail = xstrdup(clflash_last_error_detail());
                if (r->bw_status == CLFLASH_ERROR_BUILD_FAILED)
                    r->bw_build_log = xstrdup(clflash_context_build_log(c));
            }
        }
    }
    r->plan_status = st;
    if (st != CLFLASH_SUCCESS) {
        /* copy the detail before any other clflash call replaces it */
        r->plan_detail = xstrdup(clflash_last_error_detail());
        if (st == CLFLASH_ERROR_BUILD_FAILED && c != NULL)
            r->plan_build_log = xstrdup(clflash_context_build_log(c));
    }
    clflash_context_free(c);
    err = clReleaseContext(ctx);
    if (err != CL_SUCCESS)
        note(r, "clReleaseContext", err);
}

static void free_device(device_report *r)
{
    free(r->name);
    free(r->vendor);
    free(r->driver);
    free(r->version);
    free(r->extensions);
    free(r->error);
    free(r->plan_detail);
    free(r->plan_build_log);
    free(r->bw_detail);
    free(r->bw_build_log);
}

/* "CPU", "GPU|DEFAULT", ...: every bit of a cl_device_type. */
static char *type_text(cl_device_type t)
{
    static const struct {
        cl_device_type bit;
        const char *name;
    } bits[] = {{CL_DEVICE_TYPE_CPU, "CPU"},
                {CL_DEVICE_TYPE_GPU, "GPU"},
                {CL_DEVICE_TYPE_ACCELERATOR, "ACCELERATOR"},
                {CL_DEVICE_TYPE_CUSTOM, "CUSTOM"},
                {CL_DEVICE_TYPE_DEFAULT, "DEFAULT"}};
    char *s = xstrdup("");
    cl_device_type rest = t;
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        if (t & bits[i].bit) {
            char *n = xprintf("%s%s%s", s, *s ? "|" : "", bits[i].name);
            free(s);
            s = n;
            rest &= ~bits[i].bit;
        }
    if (rest != 0 || *s == '\0') {
        char *n = xprintf("%s%s0x%" PRIx64, s, *s ? "|" : "", (uint64_t)rest);
        free(s);
        s = n;
    }
    return s;
}

static const char *local_type_text(cl_device_local_mem_type t)
{
    switch (t) {
    case CL_LOCAL: return "local";
    case CL_GLOBAL: return "global";
    case CL_NONE: return "none";
    default: return "unknown";
    }
}

static char *plan_error_text(const device_report *r)
{
    if (r->plan_detail && r->plan_detail[0])
        return xprintf("%s (%d): %s", clflash_status_string(r->plan_status), (int)r->plan_status,
                         r->plan_detail);
    return xprintf("%s (%d)", clflash_status_string(r->plan_status), (int)r->plan_status);
}

/* The local memory a device's tile table is computed against: the device's, capped by --budget. */
static calc_params device_calc(const options *o, const device_report *r)
{
    calc_params p;
    p.local_mem = (uint64_t)r->local_mem;
    if (o->have_budget && o->budget != 0 && o->budget < p.local_mem)
        p.local_mem = o->budget;
    p.head_dim = o->head_dim;
    p.dtype = o->dtype;
    p.elem = clflash_dtype_size(o->dtype);
    p.backward = o->backward;
    p.max_block = o->backward ? clflash_backward_max_block(p.local_mem, p.head_dim, p.elem)
                              : clflash_max_block(p.local_mem, p.head_dim, p.elem);
    p.block = o->have_block ? o->block : p.max_block;
    return p;
}

static void print_device_human(const options *o, cl_uint pi, cl_uint di, const device_report *r)
{
    char buf[96];
    char *type = type_text(r->type);
    printf("\n  Device %u:%u  %s\n", (unsigned)pi, (unsigned)di, r->name);
    if (r->error)
        printf("    error                %s\n", r->error);
    printf("    vendor               %s\n", r->vendor);
    printf("    type                 %s\n", type);
    printf("    driver version       %s\n", r->driver);
    printf("    device version       %s\n", r->version);
    printf("    compute units        %u\n", (unsigned)r->compute_units);
    format_bytes((uint64_t)r->local_mem, buf, sizeof buf);
    printf("    local memory         %s, type %s\n", buf, local_type_text(r->local_type));
    printf("    max work-group size  %zu\n", r->max_wg);
    format_bytes((uint64_t)r->max_alloc, buf, sizeof buf);
    printf("    max mem alloc        %s\n", buf);
    format_bytes((uint64_t)r->global_mem, buf, sizeof buf);
    printf("    global memory        %s\n", buf);
    printf("    cl_khr_fp16          %s\n", r->fp16 ? "yes" : "no");
    printf("    cl_khr_fp64          %s\n", r->fp64 ? "yes" : "no");
    printf("    subgroups            %s\n", r->subgroups ? "yes" : "no");
    free(type);

    if (r->planned) {
        printf("    plan (head_dim %" PRIu64 ", %s, seq_q = seq_k = %" PRIu64 ", budget: %s):\n",
               o->head_dim, dtype_name(o->dtype), o->nseq ? o->seqs[0] : (uint64_t)DEFAULT_PLAN_SEQ,
               (o->have_budget && o->budget) ? "--budget" : "device");
        if (r->plan_status == CLFLASH_SUCCESS) {
            const clflash_plan *pl = &r->plan;
            printf("      block (B)          %u\n", (unsigned)pl->block);
            printf("      query rows/group   %u\n", (unsigned)pl->block_q);
            format_bytes(pl->tile_bytes, buf, sizeof buf);
            printf("      tile bytes         %s\n", buf);
            format_bytes(pl->kernel_local_bytes, buf, sizeof buf);
            printf("      kernel local bytes %s\n", buf);
            format_bytes(pl->local_mem_budget, buf, sizeof buf);
            printf("      local mem budget   %s\n", buf);
            printf("      threads per row    %u\n", (unsigned)pl->threads_per_row);
            printf("      work-group size    %u\n", (unsigned)pl->work_group_size);
            printf("      kernel             %s\n", pl->kernel ? pl->kernel : "(none)");
            printf("      tuning             %s\n", pl->tuning[0] ? pl->tuning : "(none)");
        } else {
            char *e = plan_error_text(r);
            printf("      failed: %s\n", e);
            free(e);
            if (r->plan_build_log && r->plan_build_log[0])
                printf("      build log:\n%s\n", r->plan_build_log);
        }
    }
    if (r->bw_planned) {
        printf("    backward plan (clflash_plan_backward, same shape):\n");
        if (r->bw_status == CLFLASH_SUCCESS) {
            const clflash_plan *pl = &r->bw_plan;
            printf("      block (B)          %u\n", (unsigned)pl->block);
            format_bytes(pl->tile_bytes, buf, sizeof buf);
            printf("      backward tile      %s  (4*B*d + 2*B*B) * s\n", buf);
            format_bytes(pl->kernel_local_bytes, buf, sizeof buf);
            printf("      kernel local bytes %s\n", buf);
            printf("      threads per row    %u\n", (unsigned)pl->threads_per_row);
            printf("      work-group size    %u\n", (unsigned)pl->work_group_size);
            printf("      kernel             %s\n", pl->kernel ? pl->kernel : "(none)");
            printf("      tuning             %s\n", pl->tuning[0] ? pl->tuning : "(none)");
        } else {
            printf("      failed: %s (%d): %s\n", clflash_status_string(r->bw_status), (int)r->bw_status,
                   r->bw_detail ? r->bw_detail : "");
            if (r->bw_build_log && r->bw_build_log[0])
                printf("      build log:\n%s\n", r->bw_build_log);
        }
    }

    if (o->have_seq || o->have_block) {
        calc_params p = device_calc(o, r);
        const uint64_t *seqs = o->nseq ? o->seqs : table_seqs;
        size_t nseq = o->nseq ? o->nseq : sizeof table_seqs / sizeof table_seqs[0];
        format_bytes(p.local_mem, buf, sizeof buf);
        printf("    tile table (local memory %s, max_block %" PRIu64 "):\n", buf, p.max_block);
        if (p.block == 0 || p.elem == 0)
            printf("      no block size fits\n");
        else
            print_tile_table(&p, seqs, nseq, "      ");
    }
}

/* A plan as an object; the backward's has no score matrix of its own to report. */
static void json_plan(json_writer *w, const char *key, const clflash_plan *pl, int with_score)
{
    json_open(w, key, '{');
    json_u64(w, "block", pl->block);
    json_u64(w, "block_q", pl->block_q);
    json_bytes(w, "tile_bytes", pl->tile_bytes);
    json_u64(w, "kernel_local_bytes", pl->kernel_local_bytes);
    json_u64(w, "local_mem_budget", pl->local_mem_budget);
    json_str(w, "kernel", pl->kernel);
    json_str(w, "tuning", pl->tuning);
    json_u64(w, "threads_per_row", pl->threads_per_row);
    json_u64(w, "work_group_size", pl->work_group_size);
    if (with_score)
        json_bytes(w, "score_matrix_bytes", pl->score_matrix_bytes);
    json_u64(w, "tiles_q", pl->tiles_q);
    json_u64(w, "tiles_k", pl->tiles_k);
    json_u64(w, "kv_passes", pl->kv_passes);
    json_close(w, '}');
}

static void print_device_json(json_writer *w, const options *o, cl_uint pi, cl_uint di,
                              const platform_report *pr, const device_report *r)
{
    char *type = type_text(r->type);
    char *id = xprintf("%u:%u", (unsigned)pi, (unsigned)di);
    json_open(w, NULL, '{');
    json_u64(w, "platform_index", pi);
    json_u64(w, "device_index", di);
    json_str(w, "id", id);
    json_str(w, "platform", pr->name);
    json_str(w, "platform_vendor", pr->vendor);
    json_str(w, "platform_version", pr->version);
    json_str(w, "name", r->name);
    json_str(w, "vendor", r->vendor);
    json_str(w, "type", type);
    json_str(w, "driver", r->driver);
    json_str(w, "device_version", r->version);
    json_u64(w, "compute_units", r->compute_units);
    json_u64(w, "local_mem_bytes", (uint64_t)r->local_mem);
    json_str(w, "local_mem_type", local_type_text(r->local_type));
    json_u64(w, "max_work_group_size", (uint64_t)r->max_wg);
    json_u64(w, "max_alloc_bytes", (uint64_t)r->max_alloc);
    json_u64(w, "global_mem_bytes", (uint64_t)r->global_mem);
    json_bool(w, "fp16", r->fp16);
    json_bool(w, "fp64", r->fp64);
    json_bool(w, "subgroups", r->subgroups);
    if (r->error)
        json_str(w, "error", r->error);
    free(type);
    free(id);

    if (r->planned) {
        if (r->plan_status == CLFLASH_SUCCESS) {
            json_plan(w, "plan", &r->plan, 1);
        } else {
            char *e = plan_error_text(r);
            json_str(w, "plan_error", e);
            json_i64(w, "plan_status", r->plan_status);
            if (r->plan_build_log)
                json_str(w, "plan_build_log", r->plan_build_log);
            free(e);
        }
    }
    if (r->bw_planned) {
        if (r->bw_status == CLFLASH_SUCCESS) {
            json_plan(w, "backward_plan", &r->bw_plan, 0);
        } else {
            json_str(w, "backward_plan_error", r->bw_detail ? r->bw_detail : "");
            json_i64(w, "backward_plan_status", r->bw_status);
            if (r->bw_build_log)
                json_str(w, "backward_plan_build_log", r->bw_build_log);
        }
    }

    if (o->have_seq || o->have_block) {
        calc_params p = device_calc(o, r);
        const uint64_t *seqs = o->nseq ? o->seqs : table_seqs;
        size_t nseq = o->nseq ? o->nseq : sizeof table_seqs / sizeof table_seqs[0];
        if (p.block == 0 || p.elem == 0) {
            json_str(w, "rows_error", "no block size fits");
        } else {
            json_open(w, "rows", '[');
            for (size_t i = 0; i < nseq; i++)
                json_table_row(w, NULL, &p, seqs[i]);
            json_close(w, ']');
        }
    }
    json_close(w, '}');
}

static int run_devices(const options *o)
{
    cl_uint np = 0;
    cl_platform_id *platforms;
    cl_int err;
    int failed = 0;
    json_writer w = {stdout, 0, {0}};

    err = clGetPlatformIDs(0, NULL, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0)) {
        fputs(PROG ": no OpenCL platform found (is an OpenCL driver / ICD installed? On Debian, "
              "pocl-opencl-icd provides a CPU device)\n",
              stderr);
        return 1;
    }
    if (err != CL_SUCCESS) {
        fprintf(stderr, PROG ": clGetPlatformIDs failed with %d (%s)\n", (int)err,
                clflash_status_string(err));
        return 1;
    }
    platforms = xmalloc(np * sizeof *platforms);
    err = clGetPlatformIDs(np, platforms, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, PROG ": clGetPlatformIDs failed with %d (%s)\n", (int)err,
                clflash_status_string(err));
        free(platforms);
        return 1;
    }

    if (o->json) {
        json_open(&w, NULL, '{');
        json_str(&w, "clflash_version", clflash_version_string());
        if (!o->no_plan) {
            json_open(&w, "plan_request", '{');
            json_u64(&w, "head_dim", o->head_dim);
            json_str(&w, "dtype", dtype_name(o->dtype));
            json_u64(&w, "seq", o->nseq ? o->seqs[0] : (uint64_t)DEFAULT_PLAN_SEQ);
            json_u64(&w, "local_mem_budget", o->have_budget ? o->budget : 0);
            json_close(&w, '}');
        }
        json_open(&w, "devices", '[');
    } else {
        printf("clflash %s: %u OpenCL platform%s (P:D below is the index CLFLASH_DEVICE accepts)\n",
               clflash_version_string(), (unsigned)np, np == 1 ? "" : "s");
    }

    for (cl_uint p = 0; p < np; p++) {
        platform_report pr = {NULL, NULL, NULL};
        cl_uint nd = 0;
        cl_device_id *devs = NULL;
        char *perr = NULL;

        err = cl_info_string(1, platforms[p], CL_PLATFORM_NAME, &pr.name);
        if (err != CL_SUCCESS && perr == NULL)
            perr = cl_error_text("clGetPlatformInfo(CL_PLATFORM_NAME)", err);
        err = cl_info_string(1, platforms[p], CL_PLATFORM_VENDOR, &pr.vendor);
        if (err != CL_SUCCESS && perr == NULL)
            perr = cl_error_text("clGetPlatformInfo(CL_PLATFORM_VENDOR)", err);
        err = cl_info_string(1, platforms[p], CL_PLATFORM_VERSION, &pr.version);
        if (err != CL_SUCCESS && perr == NULL)
            perr = cl_error_text("clGetPlatformInfo(CL_PLATFORM_VERSION)", err);
        if (pr.name == NULL)
            pr.name = xstrdup("");
        if (pr.vendor == NULL)
            pr.vendor = xstrdup("");
        if (pr.version == NULL)
            pr.version = xstrdup("");

        err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
        if (err == CL_DEVICE_NOT_FOUND) {
            nd = 0;
        } else if (err != CL_SUCCESS) {
            if (perr == NULL)
                perr = cl_error_text("clGetDeviceIDs", err);
            nd = 0;
        } else if (nd > 0) {
            devs = xmalloc(nd * sizeof *devs);
            err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL);
            if (err != CL_SUCCESS) {
                if (perr == NULL)
                    perr = cl_error_text("clGetDeviceIDs", err);
                nd = 0;
            }
        }
        if (perr) {
            failed = 1;
            fprintf(stderr, PROG ": platform %u: %s\n", (unsigned)p, perr);
        }

        if (!o->json) {
            printf("\nPlatform %u: %s\n", (unsigned)p, pr.name);
            printf("  vendor   %s\n", pr.vendor);
            printf("  version  %s\n", pr.version);
            if (perr)
                printf("  error    %s\n", perr);
            if (nd == 0)
                printf("  (no devices)\n");
        }

        for (cl_uint d = 0; d < nd; d++) {
            device_report r;
            memset(&r, 0, sizeof r);
            read_device(devs[d], &r);
            if (!o->no_plan)
                plan_device(platforms[p], devs[d], o, &r);
            if (r.error) {
                failed = 1;
                fprintf(stderr, PROG ": device %u:%u: %s\n", (unsigned)p, (unsigned)d, r.error);
            }
            if (o->json)
                print_device_json(&w, o, p, d, &pr, &r);
            else
                print_device_human(o, p, d, &r);
            fflush(stdout);
            free_device(&r);
        }
        free(devs);
        free(perr);
        free(pr.name);
        free(pr.vendor);
        free(pr.version);
    }

    if (o->json) {
        json_close(&w, ']');
        json_close(&w, '}');
    }
    free(platforms);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc;

    tool_set_name(PROG);
    memset(&o, 0, sizeof o);
    o.head_dim = DEFAULT_HEAD_DIM;
    o.dtype = CLFLASH_F16;

    rc = parse_args(argc, argv, &o);
    if (rc < 0)
        rc = o.have_local_mem ? run_calculator(&o) : run_devices(&o);
    free(o.seqs);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs(PROG ": error writing to standard output\n", stderr);
        return rc == TOOL_EXIT_USAGE ? rc : 1;
    }
    return rc;
}
