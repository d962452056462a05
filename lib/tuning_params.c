/*
 * tuning_params.c - the named kernel parameters a user may set instead of the planners' choices,
 * where those settings come from, and how a call's problem sees them.
 *
 * Why one mechanism: the planners choose every parameter from the device and the shape, which is
 * right for the devices they were measured on and a guess elsewhere. A user of another device (or
 * clflash-tune, which sweeps the parameters and checks each candidate against the reference) must
 * be able to set them without rebuilding, scoped to a device, a dtype and a head_dim range, and to
 * see which values a plan used. Settings come, in this order (later wins), from clflash's built-in
 * rules (tuning_builtin.c), the tuning file named by CLFLASH_TUNING_FILE, the context option
 * `tuning`, the environment variable CLFLASH_TUNE and clflash_context_set_tuning; all are read and
 * checked once, when they are given, never per call. Syntax and parameters are documented at clflash_context_set_tuning in clflash.h.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parameter: its name, the range a setting may give it, and its default: `value`, or where the
 * default depends on the device or the problem, the rule that gives it (each rule lives beside the
 * measurements behind it; clflash.h's clflash_context_set_tuning and docs/tuning.md say what each
 * parameter sets). Planners read a parameter only through clflash_tune_value (portable.regtile, a
 * shape rather than a number, through clflash_tune_regtile), so the defaults are here and nowhere
 * else. */
typedef struct {
    const char *name;
    int32_t lo, hi;
    int32_t value;
    clflash_tune_default rule;
} tune_param;

/* Indexed by clflash_tune_key; portable.regtile is parsed by its own rule (lo and hi unused) and its
 * default is clflash_default_regtile. */
static const tune_param params[CLFLASH_TUNE_COUNT] = {
    [CLFLASH_TUNE_PORTABLE_REGTILE] = {"portable.regtile", 0, 0, 0, NULL},
    [CLFLASH_TUNE_PORTABLE_CPU_PATH] = {"portable.cpu_path", 0, 1, 0, clflash_default_cpu_path},
    [CLFLASH_TUNE_PORTABLE_LARGE_GRF] = {"portable.large_grf", 0, 1, 0, NULL},
    [CLFLASH_TUNE_PORTABLE_MAX_BLOCK] = {"portable.max_block", 1, 1024, 0, clflash_default_max_block},
    [CLFLASH_TUNE_PORTABLE_THREADS_PER_ROW] = {"portable.threads_per_row", 1, 64, 0, clflash_default_threads_per_row},
    [CLFLASH_TUNE_PORTABLE_MAX_WORK_GROUP] = {"portable.max_work_group", 1, 1024, 0, clflash_default_max_work_group},
    [CLFLASH_TUNE_BACKWARD_MAX_BLOCK] = {"portable_backward.max_block", 1, 1024, 0, clflash_default_max_block},
    [CLFLASH_TUNE_BACKWARD_THREADS_PER_ROW] = {"portable_backward.threads_per_row", 1, 64, 0,
                                               clflash_default_threads_per_row},
    [CLFLASH_TUNE_BACKWARD_MAX_WORK_GROUP] = {"portable_backward.max_work_group", 1, 1024, 0,
                                              clflash_default_max_work_group},
    [CLFLASH_TUNE_BACKWARD_AMD_WAVES] = {"portable_backward.amd_waves", 0, 16, 0, NULL}, /* 0: the compiler's choice */
    /* B 64 at most: the tensor-core forward keeps S in registers, B / 2 floats per lane */
    [CLFLASH_TUNE_NV_FORWARD_BLOCK] = {"nv_forward.block", 16, 64, 64, NULL},
    [CLFLASH_TUNE_NV_FORWARD_WARPS] = {"nv_forward.warps", 1, 16, 0, clflash_nv_default_warps},
    [CLFLASH_TUNE_NV_FORWARD_MTILES] = {"nv_forward.mtiles", 1, 4, 0, clflash_nv_default_mtiles},
    [CLFLASH_TUNE_NV_FORWARD_STAGES] = {"nv_forward.stages", 2, 8, 0, clflash_nv_default_stages},
    /* the merge in the flash kernel's launch where its weights fit (nv_mma_forward_plan.c) */
    [CLFLASH_TUNE_NV_FORWARD_FUSED_MERGE] = {"nv_forward.fused_merge", 0, 1, 1, NULL},
    [CLFLASH_TUNE_NV_FORWARD_RESCALE_THRESH] = {"nv_forward.rescale_thresh", -1, 126, 0,
                                                clflash_nv_default_rescale_thresh},
    [CLFLASH_TUNE_NV_FORWARD_Q_DIRECT] = {"nv_forward.q_direct", 0, 1, 0, clflash_nv_default_q_direct},
    /* the fused merge's loads (cl/nv_mma_forward.cl has the measurements) */
    [CLFLASH_TUNE_NV_FORWARD_MERGE_GROUP] = {"nv_forward.merge_group", 1, 8, 4, NULL},
    [CLFLASH_TUNE_NV_FORWARD_MERGE_PARTS] = {"nv_forward.merge_parts", 1, 16, 8, NULL},
    [CLFLASH_TUNE_NV_FORWARD_MERGE_LSE_BATCH] = {"nv_forward.merge_lse_batch", 1, 16, 8, NULL},
    [CLFLASH_TUNE_NV_FORWARD_MERGE_PREFETCH] = {"nv_forward.merge_prefetch", 0, 1, 1, NULL},
    /* the bias staged in local memory beside K and V (nv_mma_forward_plan.c's bias_staged) */
    [CLFLASH_TUNE_NV_FORWARD_BIAS_STAGED] = {"nv_forward.bias_staged", 0, 1, 1, NULL},
    /* with the causal mask, the query blocks that run side by side over every head before the
     * next ones (cl/nv_mma_common.cl's chunked_block_order) */
    [CLFLASH_TUNE_NV_FORWARD_Q_CHUNK] = {"nv_forward.q_chunk", 1, 65536, 1, NULL},
    [CLFLASH_TUNE_NV_BACKWARD_BLOCK] = {"nv_backward.block", 16, 64, 64, NULL},
    [CLFLASH_TUNE_NV_BACKWARD_WARPS] = {"nv_backward.warps", 1, 16, 4, NULL},
    /* 0: no register cap (a setting gives 32..255) */
    [CLFLASH_TUNE_NV_BACKWARD_MAXRREGCOUNT] = {"nv_backward.maxrregcount", 32, 255, 0, NULL},
    [CLFLASH_TUNE_NV_BACKWARD_STREAM] = {"nv_backward.stream", 0, 1, 0, clflash_nv_default_bwd_stream},
    /* the work-groups that run side by side over every head and batch entry before the next ones
     * (0: the launch's order; cl/nv_mma_backward.cl's NV_BWD_CHUNK) */
    [CLFLASH_TUNE_NV_BACKWARD_CHUNK] = {"nv_backward.chunk", 0, 65536, 0, clflash_nv_default_bwd_chunk},
    /* the Hopper forward (nv_wgmma_forward_plan.c): its pipelined loop (with a producer
     * warpgroup) or the one that waits for every product; B 32 or 64 (a value between steps down to
     * 32) */
    [CLFLASH_TUNE_NV_WGMMA_PIPELINE] = {"nv_wgmma.pipeline", 0, 1, 0, NULL},
    [CLFLASH_TUNE_NV_WGMMA_BLOCK] = {"nv_wgmma.block", 32, 64, 64, NULL},
    /* warpgroups per work-group (0: four at head_dim 64, three at 128, fewer where seq_q needs
     * fewer) and the waiting loop's K/V stages (a count that does not fit the local memory steps
     * down) */
    [CLFLASH_TUNE_NV_WGMMA_WARPGROUPS] = {"nv_wgmma.warpgroups", 1, 4, 0, NULL},
    [CLFLASH_TUNE_NV_WGMMA_STAGES] = {"nv_wgmma.stages", 2, 6, 2, NULL},
    /* a producer warpgroup that streams the K/V tiles through mbarriers, so that the warpgroups do
     * not meet at a barrier every tile (1 at head_dim 128; the pipelined loop always has one) */
    [CLFLASH_TUNE_NV_WGMMA_PRODUCER] = {"nv_wgmma.producer", 0, 1, 0, clflash_nv_wgmma_default_producer},
    /* the producer's tiles through the tensor memory accelerator (head_dim 128 with a producer) */
    [CLFLASH_TUNE_NV_WGMMA_TMA] = {"nv_wgmma.tma", 0, 1, 1, NULL},
    /* its TMA loop as one work-group per SM that takes block after block (off: on an H100 1.00x to
     * 1.03x slower than a work-group per block but at head_dim 64 with the causal mask,
     * docs/performance/h200.md) */
    [CLFLASH_TUNE_NV_WGMMA_PERSISTENT] = {"nv_wgmma.persistent", 0, 1, 0, NULL},
    /* ... and how many work-groups it launches at most (0: one per compute unit) */
    [CLFLASH_TUNE_NV_WGMMA_WORK_GROUPS] = {"nv_wgmma.work_groups", 0, 65536, 0, NULL},
    /* the query blocks of a chunk that run side by side over every head before the next chunk's
     * (0: the planner's, nv_wgmma_forward_plan.c's q_chunk) */
    [CLFLASH_TUNE_NV_WGMMA_Q_CHUNK] = {"nv_wgmma.q_chunk", 0, 65536, 0, NULL},
};

/* One rule: the conditions it applies under and the values it sets or clears. */
struct clflash_tune_rule {
    char device[128];             /* a case-insensitive part of the device's name; "" = any */
    uint32_t classes;             /* bit per clflash_device_class; 0 = any */
    uint32_t dtypes;              /* bit per clflash_dtype; 0 = any */
    uint32_t dim_lo, dim_hi;      /* head_dim range; 0, 0 = any */
    clflash_tune_values values;   /* set: bits of keys given a value */
    uint64_t cleared;             /* bits of keys given an empty value (back to the planner's) */
};

const char *clflash_tune_name(clflash_tune_key k)
{
    return k < CLFLASH_TUNE_COUNT ? params[k].name : "?";
}

static int parse_int(const char *s, size_t n, long lo, long hi, long *out)
{
    char buf[24];
    char *end;
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!(isdigit((unsigned char)buf[0]) || (buf[0] == '-' && isdigit((unsigned char)buf[1]))))
        return 0;
    errno = 0;
    const long v = strtol(buf, &end, 10);
    if (*end != '\0' || errno != 0 || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int is_pow2_upto(long v, long top)
{
    return v >= 1 && v <= top && (v & (v - 1)) == 0;
}

/* portable.regtile: "0" (the lane-per-row path) or RMxTCxBQ[xB] (see clflash.h). */
static int parse_regtile(const char *s, size_t n, uint32_t out[4])
{
    long v[4] = {0, 0, 0, 0};
    int count = 0;
    size_t i = 0;
    if (n == 1 && s[0] == '0') {
        memset(out, 0, 4 * sizeof *out);
        return 1;
    }
    while (count < 4) {
        size_t j = i;
        while (j < n && s[j] != 'x')
            j++;
        if (!parse_int(s + i, j - i, 1, 4096, &v[count++]))
            return 0;
        if (j == n)
            break;
        i = j + 1;
        if (count == 4)
            return 0;
    }
    if (count < 3 || !is_pow2_upto(v[0], 8) || !is_pow2_upto(v[1], 32) || v[2] < v[0] || v[2] > 256 ||
        v[2] % v[0] != 0)
        return 0;
    for (int k = 0; k < 4; k++)
        out[k] = (uint32_t)v[k];
    return 1;
}

static int parse_dtypes(const char *s, size_t n, uint32_t *mask)
{
    static const struct {
        const char *name;
        clflash_dtype t;
    } names[] = {{"f32", CLFLASH_F32}, {"f16", CLFLASH_F16}, {"bf16", CLFLASH_BF16}, {"i8", CLFLASH_I8}};
    size_t i = 0;
    *mask = 0;
    while (i < n) { /* names joined by '|' */
        size_t j = i;
        int found = 0;
        while (j < n && s[j] != '|')
            j++;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (strlen(names[k].name) == j - i && strncmp(names[k].name, s + i, j - i) == 0) {
                *mask |= 1u << names[k].t;
                found = 1;
            }
        if (!found)
            return 0;
        i = j + 1;
    }
    return *mask != 0 && s[n - 1] != '|';
}

static const char *const class_names[] = {
    [CLFLASH_CLASS_CPU] = "cpu",           [CLFLASH_CLASS_NVIDIA_GPU] = "nvidia_gpu",
    [CLFLASH_CLASS_AMD_GPU] = "amd_gpu",   [CLFLASH_CLASS_INTEL_GPU] = "intel_gpu",
    [CLFLASH_CLASS_OTHER_GPU] = "other_gpu", [CLFLASH_CLASS_OTHER] = "other",
};

/* class=NAME[|NAME...]: device classes (lib/device_info.c decides a device's). */
static int parse_classes(const char *s, size_t n, uint32_t *mask)
{
    size_t i = 0;
    *mask = 0;
    while (i < n) {
        size_t j = i;
        int found = 0;
        while (j < n && s[j] != '|')
            j++;
        for (size_t k = 0; k < sizeof class_names / sizeof class_names[0]; k++)
            if (strlen(class_names[k]) == j - i && strncmp(class_names[k], s + i, j - i) == 0) {
                *mask |= 1u << k;
                found = 1;
            }
        if (!found)
            return 0;
        i = j + 1;
    }
    return *mask != 0 && s[n - 1] != '|';
}

static int parse_dims(const char *s, size_t n, uint32_t *lo, uint32_t *hi)
{
    const char *dash = memchr(s, '-', n);
    long a, b;
    if (dash == NULL) {
        if (!parse_int(s, n, 1, CLFLASH_MAX_HEAD_DIM, &a))
            return 0;
        b = a;
    } else if (!parse_int(s, (size_t)(dash - s), 1, CLFLASH_MAX_HEAD_DIM, &a) ||
               !parse_int(dash + 1, n - (size_t)(dash - s) - 1, 1, CLFLASH_MAX_HEAD_DIM, &b) || b < a) {
        return 0;
    }
    *lo = (uint32_t)a;
    *hi = (uint32_t)b;
    return 1;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && isspace((unsigned char)**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* One item, "key=value", into rule r. 0 (with the detail) if it is not valid. */
static int parse_item(const char *s, size_t n, const char *where, struct clflash_tune_rule *r)
{
    const char *eq = memchr(s, '=', n);
    const char *key = s, *val;
    size_t kn, vn;
    if (eq == NULL) {
        clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s: \"%.*s\" is not key=value", where, (int)n, s);
        return 0;
    }
    kn = (size_t)(eq - s);
    val = eq + 1;
    vn = n - kn - 1;
    trim(&key, &kn);
    trim(&val, &vn);
    if (kn == 6 && strncmp(key, "device", 6) == 0) {
        if (vn == 0 || vn >= sizeof r->device) {
            clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s: device= needs a part of a device's name (at most %zu characters)",
                         where, sizeof r->device - 1);
            return 0;
        }
        memcpy(r->device, val, vn);
        r->device[vn] = '\0';
        return 1;
    }
    if (kn == 5 && strncmp(key, "dtype", 5) == 0) {
        if (!parse_dtypes(val, vn, &r->dtypes)) {
            clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s: dtype=\"%.*s\" is not f32, f16, bf16 or i8 (joined by |)",
                         where, (int)vn, val);
            return 0;
        }
        return 1;
    }
    if (kn == 5 && strncmp(key, "class", 5) == 0) {
        if (vn == 0 || !parse_classes(val, vn, &r->classes)) {
            clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS,
                         "%s: class=\"%.*s\" is not cpu, nvidia_gpu, amd_gpu, intel_gpu, other_gpu or other (joined "
                         "by |)",
                         where, (int)vn, val);
            return 0;
        }
        return 1;
    }
    if (kn == 8 && strncmp(key, "head_dim", 8) == 0) {
        if (vn == 0 || !parse_dims(val, vn, &r->dim_lo, &r->dim_hi)) {
            clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s: head_dim=\"%.*s\" is not N or LO-HI within 1..%u", where,
                         (int)vn, val, CLFLASH_MAX_HEAD_DIM);
            return 0;
        }
        return 1;
    }
    for (int k = 0; k < CLFLASH_TUNE_COUNT; k++) {
        if (strlen(params[k].name) != kn || strncmp(params[k].name, key, kn) != 0)
            continue;
        const uint64_t bit = CLFLASH_TUNE_BIT(k);
        if (vn == 0) {
            r->cleared |= bit;
            r->values.set &= ~bit;
            return 1;
        }
        long v = 0;
        const int ok = k == CLFLASH_TUNE_PORTABLE_REGTILE ? parse_regtile(val, vn, r->values.regtile)
                                                          : parse_int(val, vn, params[k].lo, params[k].hi, &v);
        if (!ok) {
            if (k == CLFLASH_TUNE_PORTABLE_REGTILE)
                clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS,
                             "%s: portable.regtile=\"%.*s\" is not 0 or RMxTCxBQ[xB] (RM a power of two up to 8, "
                             "TC one up to 32, BQ a multiple of RM up to 256, B up to 4096)",
                             where, (int)vn, val);
            else
                clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s: %s=\"%.*s\" is not an integer in %d..%d", where,
                             params[k].name, (int)vn, val, params[k].lo, params[k].hi);
            return 0;
        }
        r->values.value[k] = (int32_t)v;
        r->values.set |= bit;
        r->cleared &= ~bit;
        return 1;
    }
    clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS,
                 "%s: \"%.*s\" is not a tuning parameter (see clflash_context_set_tuning in clflash.h)", where, (int)kn,
                 key);
    return 0;
}

static int same_conditions(const clflash_tune_rule *a, const clflash_tune_rule *b)
{
    return strcmp(a->device, b->device) == 0 && a->classes == b->classes && a->dtypes == b->dtypes &&
           a->dim_lo == b->dim_lo && a->dim_hi == b->dim_hi;
}

/* Applies rule b after rule a as one rule in a: the same result for every call (cleared values
 * first, then the values set), so that settings given again and again do not grow the list. */
static void merge_into(clflash_tune_rule *a, const clflash_tune_rule *b)
{
    a->values.set = (a->values.set & ~b->cleared) | b->values.set;
    a->cleared |= b->cleared;
    for (int k = 0; k < CLFLASH_TUNE_COUNT; k++)
        if (b->values.set & CLFLASH_TUNE_BIT(k))
            a->values.value[k] = b->values.value[k];
    if (b->values.set & CLFLASH_TUNE_BIT(CLFLASH_TUNE_PORTABLE_REGTILE))
        memcpy(a->values.regtile, b->values.regtile, sizeof a->values.regtile);
}

/* Appends the rules of `spec` (rules separated by ';', items by ',') to *list, each merged into the
 * one before it when their conditions are the same; the caller discards *list unless all of spec
 * is valid. */
static clflash_status parse_spec(const char *spec, const char *where, clflash_tune_rule **list, uint32_t *count)
{
    const size_t len = strlen(spec);
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && spec[i] != ';')
            continue;
        clflash_tune_rule r;
        int items = 0;
        memset(&r, 0, sizeof r);
        for (size_t a = start, b = start; b <= i; b++) {
            if (b < i && spec[b] != ',')
                continue;
            const char *s = spec + a;
            size_t n = b - a;
            trim(&s, &n);
            if (n > 0) {
                if (!parse_item(s, n, where, &r))
                    return CLFLASH_ERROR_INVALID_OPTIONS;
                items++;
            }
            a = b + 1;
        }
        start = i + 1;
        if (items == 0)
            continue;
        if (*count > 0 && same_conditions(&(*list)[*count - 1], &r)) {
            merge_into(&(*list)[*count - 1], &r);
            continue;
        }
        if (*count >= CLFLASH_MAX_TUNE_RULES)
            return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s: more than %u tuning rules in all", where,
                                CLFLASH_MAX_TUNE_RULES);
        clflash_tune_rule *grown = realloc(*list, (*count + 1) * sizeof **list);
        if (grown == NULL)
            return clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating tuning rules failed");
        *list = grown;
        grown[(*count)++] = r;
    }
    return CLFLASH_SUCCESS;
}

/* Keeps the rules whose device conditions match a device of this name and class (all do but those
 * naming another device or class), so that resolving a call looks at conditions on the problem
 * only. */
static void keep_device_rules(const char *name, clflash_device_class cls, clflash_tune_rule *list, uint32_t *count)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < *count; i++)
        if ((list[i].device[0] == '\0' || clflash_contains_nocase(name, list[i].device)) &&
            (list[i].classes == 0 || (list[i].classes & 1u << cls)))
            list[kept++] = list[i];
    *count = kept;
}

/* The built-in rules (tuning_builtin.c), parsed like a user's: a rule that does not parse is a
 * defect of the library, reported as such. */
static clflash_status read_builtin(clflash_tune_rule **list, uint32_t *count)
{
    char where[64];
    for (uint32_t i = 0; i < clflash_builtin_rule_count(); i++) {
        snprintf(where, sizeof where, "clflash's built-in tuning rule %u", i + 1);
        clflash_status st = parse_spec(clflash_builtin_rule(i), where, list, count);
        if (st != CLFLASH_SUCCESS)
            return st;
    }
    return CLFLASH_SUCCESS;
}

/* The tuning file: one rule per line, '#' to the end of a line a comment. */
static clflash_status read_file(const char *path, clflash_tune_rule **list, uint32_t *count)
{
    FILE *f = fopen(path, "r");
    char line[1024], where[300];
    unsigned lineno = 0;
    if (f == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "CLFLASH_TUNING_FILE \"%s\" cannot be opened: %s", path,
                            strerror(errno));
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        const size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(f)) {
            fclose(f);
            return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s:%u: the line is longer than %zu characters", path,
                                lineno, sizeof line - 2);
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        if (strchr(line, ';') != NULL) {
            fclose(f);
            return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "%s:%u: one rule per line (no ';')", path, lineno);
        }
        snprintf(where, sizeof where, "%s:%u", path, lineno);
        clflash_status st = parse_spec(line, where, list, count);
        if (st != CLFLASH_SUCCESS) {
            fclose(f);
            return st;
        }
    }
    const int failed = ferror(f);
    fclose(f);
    if (failed) /* a directory, an I/O error */
        return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "CLFLASH_TUNING_FILE \"%s\" cannot be read", path);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_tune_load(clflash_context *c, const char *option_spec)
{
    clflash_tune_rule *list = NULL;
    uint32_t count = 0;
    clflash_status st = CLFLASH_SUCCESS;
    const char *file = getenv("CLFLASH_TUNING_FILE"), *env = getenv("CLFLASH_TUNE");
    st = read_builtin(&list, &count);
    if (st == CLFLASH_SUCCESS && file != NULL && file[0] != '\0')
        st = read_file(file, &list, &count);
    if (st == CLFLASH_SUCCESS && option_spec != NULL)
        st = parse_spec(option_spec, "the tuning option", &list, &count);
    if (st == CLFLASH_SUCCESS && env != NULL)
        st = parse_spec(env, "CLFLASH_TUNE", &list, &count);
    if (st != CLFLASH_SUCCESS) {
        free(list);
        return st;
    }
    keep_device_rules(c->info.name, c->info.device_class, list, &count);
    c->tune_rules = list;
    c->tune_count = count;
    return CLFLASH_SUCCESS;
}

clflash_status clflash_context_set_tuning(clflash_context *c, const char *spec)
{
    clflash_status st;
    clflash_clear_detail();
    if ((st = clflash_check_context(c)) != CLFLASH_SUCCESS)
        return st;
    if (spec == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "spec is NULL");
    pthread_mutex_lock(&c->tune_lock);
    clflash_tune_rule *list = NULL;
    uint32_t count = 0;
    if (c->tune_count > 0) {
        if ((list = malloc(c->tune_count * sizeof *list)) == NULL) {
            pthread_mutex_unlock(&c->tune_lock);
            return clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating tuning rules failed");
        }
        memcpy(list, c->tune_rules, c->tune_count * sizeof *list);
        count = c->tune_count;
    }
    if ((st = parse_spec(spec, "clflash_context_set_tuning", &list, &count)) == CLFLASH_SUCCESS) {
        keep_device_rules(c->info.name, c->info.device_class, list, &count);
        free(c->tune_rules);
        c->tune_rules = list;
        c->tune_count = count;
    } else {
        free(list);
    }
    pthread_mutex_unlock(&c->tune_lock);
    return st;
}

/* Applies the rules that match (dtype, head_dim), in order, to *v. */
static void apply_rules(const clflash_tune_rule *rules, uint32_t count, clflash_dtype dtype, uint32_t head_dim,
                        clflash_tune_values *v)
{
    for (uint32_t i = 0; i < count; i++) {
        const clflash_tune_rule *r = &rules[i];
        if ((r->dtypes && !(r->dtypes & 1u << dtype)) || (r->dim_hi && (head_dim < r->dim_lo || head_dim > r->dim_hi)))
            continue;
        v->set &= ~r->cleared;
        for (int k = 0; k < CLFLASH_TUNE_COUNT; k++)
            if (r->values.set & CLFLASH_TUNE_BIT(k))
                v->value[k] = r->values.value[k];
        if (r->values.set & CLFLASH_TUNE_BIT(CLFLASH_TUNE_PORTABLE_REGTILE))
            memcpy(v->regtile, r->values.regtile, sizeof v->regtile);
        v->set |= r->values.set;
    }
    for (int k = 0; k < CLFLASH_TUNE_COUNT; k++) /* the same settings give the same bytes (plan_cache.c) */
        if (!(v->set & CLFLASH_TUNE_BIT(k)))
            v->value[k] = 0;
    if (!(v->set & CLFLASH_TUNE_BIT(CLFLASH_TUNE_PORTABLE_REGTILE)))
        memset(v->regtile, 0, sizeof v->regtile);
}

void clflash_tune_resolve(clflash_context *c, clflash_problem *p)
{
    memset(&p->tune, 0, sizeof p->tune);
    pthread_mutex_lock(&c->tune_lock);
    apply_rules(c->tune_rules, c->tune_count, p->dtype, p->head_dim, &p->tune);
    pthread_mutex_unlock(&c->tune_lock);
}

clflash_status clflash_tune_builtin_values(const char *device_name, clflash_device_class cls, clflash_dtype dtype,
                                           uint32_t head_dim, clflash_tune_values *v)
{
    clflash_tune_rule *list = NULL;
    uint32_t count = 0;
    const clflash_status st = read_builtin(&list, &count);
    memset(v, 0, sizeof *v);
    if (st == CLFLASH_SUCCESS) {
        keep_device_rules(device_name, cls, list, &count);
        apply_rules(list, count, dtype, head_dim, v);
    }
    free(list);
    return st;
}

clflash_status clflash_tune_apply_spec(const char *spec, const char *device_name, clflash_device_class cls,
                                      clflash_dtype dtype, uint32_t head_dim, clflash_tune_values *v)
{
    clflash_tune_rule *list = NULL;
    uint32_t count = 0;
    const clflash_status st = parse_spec(spec, "tuning_table --tune", &list, &count);
    if (st == CLFLASH_SUCCESS) {
        keep_device_rules(device_name, cls, list, &count);
        apply_rules(list, count, dtype, head_dim, v);
    }
    free(list);
    return st;
}

void clflash_tune_free(clflash_context *c)
{
    free(c->tune_rules);
    c->tune_rules = NULL;
    c->tune_count = 0;
}

int32_t clflash_tune_value(const clflash_context *c, const clflash_problem *p, clflash_tune_key k,
                           const clflash_tune_facts *f)
{
    if (p->tune.set & CLFLASH_TUNE_BIT(k))
        return p->tune.value[k];
    return params[k].rule ? params[k].rule(c, p, f) : params[k].value;
}

void clflash_tune_regtile(const clflash_context *c, const clflash_problem *p, uint32_t out[4])
{
    if (p->tune.set & CLFLASH_TUNE_BIT(CLFLASH_TUNE_PORTABLE_REGTILE))
        memcpy(out, p->tune.regtile, 4 * sizeof *out);
    else
        clflash_default_regtile(c, p, out);
}

void clflash_tune_report(clflash_plan *plan, const char *fmt, ...)
{
    const size_t n = strnlen(plan->tuning, sizeof plan->tuning);
    va_list ap;
    va_start(ap, fmt);
    if (n < sizeof plan->tuning)
        vsnprintf(plan->tuning + n, sizeof plan->tuning - n, fmt, ap);
    va_end(ap);
}
