/*
 * struct_size.c - reading and writing the caller-allocated structs (clflash_context_options,
 * clflash_attention_desc, clflash_plan) by their leading struct_size, so that programs built
 * against an older or a newer header than the library's both work (clflash.h, "struct_size").
 *
 * Why one file: every public entry point that takes one of these structs copies it into a
 * full-size, zero-filled struct of the library's own layout first, and writes a plan out the same
 * way, so no other code ever touches a caller's struct past what its struct_size covers.
 */
#include "internal.h"

#include <string.h>

/* The sizes of 0.5.0's structs, the first with struct_size: a caller's struct_size may not be
 * smaller. Fields added later lie past these ends. */
const size_t clflash_options_min_size = offsetof(clflash_context_options, portable_only) + sizeof(uint32_t);
const size_t clflash_desc_min_size = offsetof(clflash_attention_desc, key_lengths) + sizeof(cl_mem);
const size_t clflash_plan_min_size = offsetof(clflash_plan, block_q) + sizeof(uint32_t);
const size_t clflash_merge_desc_min_size = sizeof(clflash_merge_desc); /* new in 0.5.0 */
const size_t clflash_append_desc_min_size = sizeof(clflash_append_desc); /* new in 0.5.0 */

/* A struct_size above this is taken for an uninitialised field, not a struct. */
#define MAX_STRUCT_SIZE 4096u

static clflash_status check_size(uint32_t size, size_t min_size, clflash_status bad, const char *what)
{
    if (size == 0)
        return clflash_fail(bad, "%s->struct_size is 0; set it to sizeof the struct", what);
    if (size < min_size || size > MAX_STRUCT_SIZE)
        return clflash_fail(bad, "%s->struct_size is %u; it must be between %zu (clflash 0.5.0's struct) and %u",
                            what, size, min_size, MAX_STRUCT_SIZE);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_read_struct(const void *src, size_t own_size, size_t min_size, void *dst,
                                   clflash_status bad, const char *what)
{
    uint32_t size;
    clflash_status st;
    memcpy(&size, src, sizeof size);
    if ((st = check_size(size, min_size, bad, what)) != CLFLASH_SUCCESS)
        return st;
    memset(dst, 0, own_size);
    memcpy(dst, src, size < own_size ? size : own_size);
    for (size_t i = own_size; i < size; i++)
        if (((const unsigned char *)src)[i] != 0)
            return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                                "%s sets byte %zu of %u, past the %zu bytes this clflash (%s) knows: a field of a "
                                "newer version is set",
                                what, i, size, own_size, clflash_version_string());
    return CLFLASH_SUCCESS;
}

clflash_status clflash_check_plan_out(const clflash_plan *out)
{
    if (out == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "out is NULL");
    return check_size(out->struct_size, clflash_plan_min_size, CLFLASH_ERROR_INVALID_ARGUMENT, "out");
}

void clflash_write_plan(clflash_plan *out, const clflash_plan *plan)
{
    const uint32_t size = out->struct_size;
    const size_t known = size < sizeof *plan ? size : sizeof *plan;
    unsigned char *dst = (unsigned char *)out;
    memcpy(dst + sizeof size, (const unsigned char *)plan + sizeof size, known - sizeof size);
    if (size > known)
        memset(dst + known, 0, size - known);
}
