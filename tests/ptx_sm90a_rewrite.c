/*
 * ptx_sm90a_rewrite.c - rewrites a PTX file for sm_90a as lib/sm90a.c does at run time, so that the
 * NVPTX compile matrix (kernel_nvptx.cmake) can assemble the kernels that carry "// sm90a: " lines
 * with ptxas -arch=sm_90a on a machine without a GPU.
 *
 *   ptx_sm90a_rewrite [--as-nvidia] IN OUT
 *
 * --as-nvidia first gives clang's PTX the header NVIDIA's OpenCL writes on Hopper (`.version 8.0`,
 * `.target sm_90, texmode_independent`): clang 15 emits `.target sm_80` at most, and the rewrite
 * takes only PTX for sm_90. Exit status 0, or 1 with the rewrite's reason.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replaces the first line that starts with `prefix` by `line` (text is NUL-terminated, with room). */
static void replace_line(char *text, size_t room, const char *prefix, const char *line)
{
    char *at = strstr(text, prefix);
    if (at == NULL || (at != text && at[-1] != '\n'))
        return;
    char *end = strchr(at, '\n');
    const size_t tail = end ? strlen(end) : 0, head = (size_t)(at - text);
    if (head + strlen(line) + tail + 1 > room)
        return;
    memmove(at + strlen(line), end ? end : at + strlen(at), tail + 1);
    memcpy(at, line, strlen(line));
}

int main(int argc, char **argv)
{
    const int as_nvidia = argc == 4 && strcmp(argv[1], "--as-nvidia") == 0;
    if (argc != 3 + as_nvidia) {
        fprintf(stderr, "usage: ptx_sm90a_rewrite [--as-nvidia] IN OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1 + as_nvidia], "rb");
    if (in == NULL) {
        perror(argv[1 + as_nvidia]);
        return 1;
    }
    fseek(in, 0, SEEK_END);
    const long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    const size_t room = (size_t)(size > 0 ? size : 0) + 128;
    char *text = calloc(room, 1);
    if (text == NULL || fread(text, 1, (size_t)size, in) != (size_t)size) {
        fprintf(stderr, "ptx_sm90a_rewrite: cannot read %s\n", argv[1 + as_nvidia]);
        return 1;
    }
    fclose(in);
    if (as_nvidia) {
        replace_line(text, room, ".version ", ".version 8.0");
        replace_line(text, room, ".target ", ".target sm_90, texmode_independent");
    }
    char *out = NULL, why[300] = "";
    const int markers = clflash_sm90a_rewrite(text, strlen(text), &out, why, sizeof why);
    free(text);
    if (markers < 0) {
        fprintf(stderr, "ptx_sm90a_rewrite: %s: %s\n", argv[1 + as_nvidia], why);
        return 1;
    }
    FILE *o = fopen(argv[2 + as_nvidia], "wb");
    if (o == NULL || fputs(out, o) < 0 || fclose(o) != 0) {
        fprintf(stderr, "ptx_sm90a_rewrite: cannot write %s\n", argv[2 + as_nvidia]);
        return 1;
    }
    free(out);
    printf("%d lines\n", markers);
    return 0;
}
