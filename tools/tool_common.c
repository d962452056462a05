/*
 * tool_common.c - the helpers clflash-query and clflash-bench share (see tool_common.h): allocation,
 * option parsing, number formatting, OpenCL string queries and the JSON writer.
 */
#include "tool_common.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *prog_name = "clflash-tool";

void tool_set_name(const char *name)
{
    prog_name = name;
}

const char *tool_name(void)
{
    return prog_name;
}

/* ============================================================================================
 * Allocation.
 * ========================================================================================== */

_Noreturn static void die_oom(void)
{
    fprintf(stderr, "%s: out of host memory\n", prog_name);
    exit(1);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        die_oom();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        die_oom();
    return q;
}

char *xstrdup(const char *s)
{
    size_t n;
    char *d;
    if (s == NULL)
        s = "";
    n = strlen(s);
    d = xmalloc(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

char *xvprintf(const char *fmt, va_list ap)
{
    va_list again;
    int n;
    char *s;
    va_copy(again, ap);
    n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) {
        fprintf(stderr, "%s: internal formatting error\n", prog_name);
        exit(1);
    }
    s = xmalloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    return s;
}

char *xprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    s = xvprintf(fmt, ap);
    va_end(ap);
    return s;
}

/* ============================================================================================
 * Command line.
 * ========================================================================================== */

int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", prog_name);
    return TOOL_EXIT_USAGE;
}

int parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v;
    if (s == NULL || *s == '\0')
        return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

int option_is(const char *arg, const char *name, const char **inline_value)
{
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0 || (arg[n] != '\0' && arg[n] != '='))
        return 0;
    *inline_value = arg[n] == '=' ? arg + n + 1 : NULL;
    return 1;
}

int tool_next_option(int argc, char **argv, int *i, const char *const *flags, const char *const *valued,
                     void (*help)(FILE *), const char **name, const char **value)
{
    const char *arg = argv[*i];
    *name = *value = NULL;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        help(stdout);
        return 0;
    }
    if (strcmp(arg, "--version") == 0) {
        tool_print_version();
        return 0;
    }
    for (size_t k = 0; flags[k]; k++)
        if (strcmp(arg, flags[k]) == 0) {
            *name = flags[k];
            return -1;
        }
    for (size_t k = 0; valued[k]; k++)
        if (option_is(arg, valued[k], value)) {
            *name = valued[k];
            break;
        }
    if (*name == NULL)
        return usage_error(arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", arg);
    if (*value == NULL) {
        if (*i + 1 >= argc)
            return usage_error("option '%s' needs a value", *name);
        *value = argv[++*i];
    }
    return -1;
}

void tool_print_version(void)
{
    printf("%s %d.%d.%d (clflash library %s)\n", prog_name, CLFLASH_VERSION_MAJOR, CLFLASH_VERSION_MINOR,
           CLFLASH_VERSION_PATCH, clflash_version_string());
}

int each_item(const char *s, int (*item)(void *ctx, const char *text), void *ctx)
{
    const char *p = s;
    if (*p == '\0')
        return 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *text = xmalloc(len + 1);
        int ok;
        memcpy(text, p, len);
        text[len] = '\0';
        ok = len > 0 && item(ctx, text);
        free(text);
        if (!ok)
            return 0;
        if (comma == NULL)
            return 1;
        p = comma + 1;
    }
}

const char *dtype_name(clflash_dtype t)
{
    switch (t) {
    case CLFLASH_F32: return "f32";
    case CLFLASH_F16: return "f16";
    case CLFLASH_BF16: return "bf16";
    case CLFLASH_I8: return "i8";
    default: return "unknown";
    }
}

int parse_dtype(const char *s, clflash_dtype *out)
{
    static const clflash_dtype all[] = {CLFLASH_F32, CLFLASH_F16, CLFLASH_BF16, CLFLASH_I8};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, dtype_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}

/* ============================================================================================
 * Formatting.
 * ========================================================================================== */

void format_unit(uint64_t bytes, char *out, size_t cap)
{
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    uint64_t unit = 1024;
    size_t k = 0;
    uint64_t whole, rem;

    if (bytes < 1024) {
        snprintf(out, cap, "%" PRIu64 " B", bytes);
        return;
    }
    while (k + 1 < sizeof names / sizeof names[0] && bytes / unit >= 1024) {
        unit *= 1024;
        k++;
    }
    whole = bytes / unit;
    rem = bytes % unit; /* < 2^50, so rem * 1000 cannot overflow */
    if (rem == 0) {
        snprintf(out, cap, "%" PRIu64 " %s", whole, names[k]);
    } else if (rem * 1000 % unit == 0) {
        char frac[8];
        size_t n;
        snprintf(frac, sizeof frac, "%03u", (unsigned)(rem * 1000 / unit));
        n = strlen(frac);
        while (n > 1 && frac[n - 1] == '0')
            frac[--n] = '\0';
        snprintf(out, cap, "%" PRIu64 ".%s %s", whole, frac, names[k]);
    } else {
        snprintf(out, cap, "~%.2f %s", (double)bytes / (double)unit, names[k]);
    }
}

void format_exact(double v, char *out, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

void print_padded(FILE *f, const char *s, size_t width, int right)
{
    size_t n = strlen(s);
    if (right)
        for (size_t i = n; i < width; i++)
            fputc(' ', f);
    fputs(s, f);
    if (!right)
        for (size_t i = n; i < width; i++)
            fputc(' ', f);
}

void trim(char *s)
{
    size_t len = strlen(s), start = 0;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        s[--len] = '\0';
    while (start < len && isspace((unsigned char)s[start]))
        start++;
    if (start > 0)
        memmove(s, s + start, len - start + 1);
}

/* ============================================================================================
 * OpenCL.
 * ========================================================================================== */

cl_int cl_info_string(int is_platform, void *handle, cl_uint param, char **out)
{
    size_t n = 0;
    char *s;
    cl_int err;
    *out = NULL;
    err = is_platform ? clGetPlatformInfo((cl_platform_id)handle, param, 0, NULL, &n)
                      : clGetDeviceInfo((cl_device_id)handle, param, 0, NULL, &n);
    if (err != CL_SUCCESS)
        return err;
    s = xmalloc(n + 1);
    if (n > 0) {
        err = is_platform ? clGetPlatformInfo((cl_platform_id)handle, param, n, s, NULL)
                          : clGetDeviceInfo((cl_device_id)handle, param, n, s, NULL);
        if (err != CL_SUCCESS) {
            free(s);
            return err;
        }
    }
    s[n] = '\0';
    trim(s);
    *out = s;
    return CL_SUCCESS;
}

/* ============================================================================================
 * JSON.
 * ========================================================================================== */

/* Length of the valid UTF-8 sequence at p (2..4), or 0 if it is not one. */
static size_t utf8_seq_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0; /* no overlong forms */
    else if (c == 0xED)
        hi = 0x9F; /* no surrogates */
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F; /* nothing above U+10FFFF */
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

void json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            p++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            p++;
        } else if (c < 0x80) {
            fputc((int)c, f);
            p++;
        } else {
            size_t n = utf8_seq_len(p);
            if (n) {
                fwrite(p, 1, n, f);
                p += n;
            } else {
                fputs("\\ufffd", f);
                p++;
            }
        }
    }
    fputc('"', f);
}

/* Separator, newline and indentation before a value, then its key inside an object. */
static void json_prefix(json_writer *w, const char *key)
{
    if (w->depth > 0) {
        if (w->has_items[w->depth])
            fputc(',', w->f);
        w->has_items[w->depth] = 1;
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++)
            fputs("  ", w->f);
    }
    if (key) {
        json_string(w->f, key);
        fputs(": ", w->f);
    }
}

void json_open(json_writer *w, const char *key, char bracket)
{
    json_prefix(w, key);
    fputc(bracket, w->f);
    if (w->depth + 1 >= JSON_MAX_DEPTH) {
        fprintf(stderr, "%s: internal error: JSON nested too deeply\n", prog_name);
        exit(1);
    }
    w->depth++;
    w->has_items[w->depth] = 0;
}

void json_close(json_writer *w, char bracket)
{
    if (w->has_items[w->depth]) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth - 1; i++)
            fputs("  ", w->f);
    }
    fputc(bracket, w->f);
    w->depth--;
    if (w->depth == 0)
        fputc('\n', w->f);
}

void json_str(json_writer *w, const char *key, const char *s)
{
    json_prefix(w, key);
    if (s)
        json_string(w->f, s);
    else
        fputs("null", w->f);
}

void json_u64(json_writer *w, const char *key, uint64_t v)
{
    json_opt_u64(w, key, 1, v);
}

void json_opt_u64(json_writer *w, const char *key, int have, uint64_t v)
{
    json_prefix(w, key);
    if (have)
        fprintf(w->f, "%" PRIu64, v);
    else
        fputs("null", w->f);
}

void json_i64(json_writer *w, const char *key, int64_t v)
{
    json_prefix(w, key);
    fprintf(w->f, "%" PRId64, v);
}

void json_num(json_writer *w, const char *key, int have, double v)
{
    char buf[40];
    json_prefix(w, key);
    if (have && isfinite(v)) {
        format_exact(v, buf, sizeof buf);
        fputs(buf, w->f);
    } else {
        fputs("null", w->f);
    }
}

void json_bool(json_writer *w, const char *key, int b)
{
    json_prefix(w, key);
    fputs(b ? "true" : "false", w->f);
}

void json_raw(json_writer *w, const char *key, const char *text)
{
    json_prefix(w, key);
    fputs(text, w->f);
}
