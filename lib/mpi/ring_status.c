/*
 * ring_status.c - the MPI component's error reporting: its thread-local detail sentence, the
 * message of its own status codes, and the struct_size rule of clflash.h applied to its descriptor.
 *
 * Why its own: the component uses clflash's public API (and lib/component.h), so it cannot write
 * clflash's detail string; a failing clflash call's own detail is copied into this one instead.
 */
#include "ring_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char ring_detail[512];

void ring_clear_detail(void)
{
    ring_detail[0] = '\0';
}

clflash_status ring_fail(clflash_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ring_detail, sizeof ring_detail, fmt, ap);
    va_end(ap);
    return st;
}

const char *clflash_ring_last_error_detail(void)
{
    return ring_detail;
}

const char *clflash_ring_status_string(clflash_status s)
{
    if (s == CLFLASH_RING_ERROR_MPI)
        return "an MPI call failed";
    return clflash_status_string(s);
}

clflash_status ring_check_struct_size(const void *s, uint32_t struct_size, size_t first, size_t known)
{
    if (struct_size == 0 || struct_size < first || struct_size > 4096)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "struct_size is %u (this library takes %zu .. 4096)",
                         struct_size, first);
    const unsigned char *b = s;
    for (size_t i = known; i < struct_size; i++)
        if (b[i] != 0)
            return ring_fail(CLFLASH_ERROR_UNSUPPORTED,
                             "byte %zu of the descriptor is set, a field this library (struct of %zu bytes) does "
                             "not know", i, known);
    return CLFLASH_SUCCESS;
}
