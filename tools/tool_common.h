/*
 * tool_common.h - what clflash-query and clflash-bench share: allocation that never returns NULL,
 * command-line parsing helpers, number formatting, OpenCL string queries, and a small JSON writer.
 *
 * Why: both tools parse options the same way, escape JSON the same way and name sizes the same way;
 * one copy keeps their behaviour identical. Not part of the library: compiled into each tool. Each
 * tool calls tool_set_name() first, so messages start with its own name.
 */
#ifndef CLFLASH_TOOL_COMMON_H
#define CLFLASH_TOOL_COMMON_H

#include "clflash.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL_EXIT_USAGE 2

/* The program name used in messages ("clflash-bench"); a static string. */
void tool_set_name(const char *name);
const char *tool_name(void);

/* ---- allocation: print "<tool>: out of host memory" and exit(1) instead of returning NULL ---- */
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s); /* NULL is copied as "" */
char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvprintf(const char *fmt, va_list ap);

/* ---- command line ---------------------------------------------------------------------------- */
/* Prints "<tool>: message" and the --help hint on stderr; returns TOOL_EXIT_USAGE. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reads argv[*i]: "-h"/"--help" calls help(stdout) and "--version" prints the versions, and both
 * return 0; a name in `flags` (a NULL-terminated list) returns -1 with *name set and *value NULL; a
 * name in `valued` returns -1 with *value taken after '=' or from the next argument (*i then
 * advances past it); anything else prints a usage error and returns TOOL_EXIT_USAGE. */
int tool_next_option(int argc, char **argv, int *i, const char *const *flags, const char *const *valued,
                     void (*help)(FILE *), const char **name, const char **value);
/* "<tool> X.Y.Z (clflash library A.B.C)" on stdout. */
void tool_print_version(void);
/* A decimal whole number: digits only (no sign, space or suffix), no overflow, in [lo, hi]. */
int parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* If arg is --name or --name=value, returns 1 and sets *inline_value (NULL for the first form). */
int option_is(const char *arg, const char *name, const char **inline_value);
/* Calls item(ctx, text) for each comma-separated item of s; 0 if s or an item is empty or item()
 * refuses it. */
int each_item(const char *s, int (*item)(void *ctx, const char *text), void *ctx);
/* "f32", "f16", "bf16", "i8" or "unknown"; parse_dtype reads the same names back. */
const char *dtype_name(clflash_dtype t);
int parse_dtype(const char *s, clflash_dtype *out);

/* ---- formatting -------------------------------------------------------------------------------- */
/* "56 KiB", "1.5 KiB", "512 B": the largest binary unit the value reaches; exact when the quotient
 * has at most three decimals (trailing zeros dropped), otherwise two decimals marked "~". */
void format_unit(uint64_t bytes, char *out, size_t cap);
/* The shortest %g form of v that reads back as the same double (valid JSON for finite v). */
void format_exact(double v, char *out, size_t cap);
/* s left- or right-aligned in width columns. */
void print_padded(FILE *f, const char *s, size_t width, int right);
/* Removes leading and trailing white space in place (drivers pad names). */
void trim(char *s);

/* ---- OpenCL ------------------------------------------------------------------------------------ */
/* A string property of a platform (is_platform) or device, trimmed, in a new allocation; *out is
 * NULL on failure. */
cl_int cl_info_string(int is_platform, void *handle, cl_uint param, char **out);

/* ---- JSON: pretty-printed, two spaces per level, strings escaped, invalid UTF-8 as U+FFFD ------ */
#define JSON_MAX_DEPTH 16
typedef struct {
    FILE *f;
    int depth;
    int has_items[JSON_MAX_DEPTH];
} json_writer;

void json_string(FILE *f, const char *s); /* a quoted, escaped JSON string */
/* key is NULL inside arrays and for the top-level value. */
void json_open(json_writer *w, const char *key, char bracket);
void json_close(json_writer *w, char bracket);
void json_str(json_writer *w, const char *key, const char *s); /* NULL writes null */
void json_u64(json_writer *w, const char *key, uint64_t v);
void json_opt_u64(json_writer *w, const char *key, int have, uint64_t v); /* null unless have */
void json_i64(json_writer *w, const char *key, int64_t v);
void json_num(json_writer *w, const char *key, int have, double v); /* null unless have and finite */
void json_bool(json_writer *w, const char *key, int b);
void json_raw(json_writer *w, const char *key, const char *text); /* already valid JSON */

#endif /* CLFLASH_TOOL_COMMON_H */
