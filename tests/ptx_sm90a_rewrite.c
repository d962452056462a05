/*
 * ptx_sm90a_rewrite.c - rewrites a PTX file for sm_90a as lib/sm90a.c does at run time, so that the
 * NVPTX compile matrix (kernel_nvptx.cmake) can assemble the kernels that carry "// sm90a: " lines
 * with ptxas -arch=sm_90a on a machine without a GPU.
 *
 *   ptx_sm90a_rewrite [--as-nvidia [--reqntid N]] IN OUT
 *
 * --as-nvidia first gives clang's PTX the header NVIDIA's OpenCL writes on Hopper (`.version 9.0`,
 * `.target sm_90, texmode_independent`, driver 580): clang 15 emits `.target sm_80` at most, and the
 * rewrite takes only PTX for sm_90; instructions of PTX ISA 8.3 (tensormap.replace) need the
 * version. --reqntid N adds the `.reqntid N, 1, 1` NVIDIA's compiler writes for
 * reqd_work_group_size(N, 1, 1), which clang leaves out, so that ptxas fits the registers to N
 * work-items as the driver's does. Exit status 0, or 1 with the rewrite's reason.
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
    const int as_nvidia = argc >= 4 && strcmp(argv[1], "--as-nvidia") == 0;
    const int reqntid = as_nvidia && argc == 6 && strcmp(argv[2], "--reqntid") == 0 ? atoi(argv[3]) : 0;
    const int first = 1 + as_nvidia + (reqntid > 0 ? 2 : 0); /* IN; OUT after it */
    if (argc != first + 2 || (as_nvidia && argc == 6 && reqntid <= 0)) {
        fprintf(stderr, "usage: ptx_sm90a_rewrite [--as-nvidia [--reqntid N]] IN OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[first], "rb");
    if (in == NULL) {
        perror(argv[first]);
        return 1;
    }
    fseek(in, 0, SEEK_END);
    const long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    const size_t room = (size_t)(size > 0 ? size : 0) + 128;
    char *text = calloc(room, 1);
    if (text == NULL || fread(text, 1, (size_t)size, in) != (size_t)size) {
        fprintf(stderr, "ptx_sm90a_rewrite: cannot read %s\n", argv[first]);
        return 1;
    }
    fclose(in);
    if (as_nvidia) {
        replace_line(text, room, ".version ", ".version 9.0");
        replace_line(text, room, ".target ", ".target sm_90, texmode_independent");
    }
    if (reqntid > 0) {
        char directive[40];
        snprintf(directive, sizeof directive, ".reqntid %d, 1, 1", reqntid);
        char *with = clflash_ptx_entry_directive(text, directive);
        if (with == NULL) {
            fprintf(stderr, "ptx_sm90a_rewrite: out of memory\n");
            return 1;
        }
        free(text);
        text = with;
    }
    char *out = NULL, why[300] = "";
    const int markers = clflash_sm90a_rewrite(text, strlen(text), &out, why, sizeof why);
    free(text);
    if (markers < 0) {
        fprintf(stderr, "ptx_sm90a_rewrite: %s: %s\n", argv[first], why);
        return 1;
    }
    FILE *o = fopen(argv[first + 1], "wb");
    if (o == NULL || fputs(out, o) < 0 || fclose(o) != 0) {
        fprintf(stderr, "ptx_sm90a_rewrite: cannot write %s\n", argv[first + 1]);
        return 1;
    }
    free(out);
    printf("%d lines\n", markers);
    return 0;
}
