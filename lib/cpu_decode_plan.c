/*
 * cpu_decode_plan.c - plans the CPU decoding kernel (cl/flash_decode_cpu.cl): a forward with few
 * query rows per K/V head (decoding) on a device that takes the portable kernel's CPU path.
 *
 * Why separate from forward_plan.c: the kernel has a shape of its own, one work-item per work-group
 * holding every packed row (query x GQA head) of one K/V head, with no local memory, so its plan
 * has nothing to fit but the tile rule's B (the keys it takes per chunk, the CPU path's B).
 */
#include "internal.h"

#include <stdio.h>

#define KERNEL_NAME "flash_decode_cpu"

#define DEC_KEYS_MAX 32u

int clflash_cpu_decode_applies(const clflash_problem *p)
{
    return (uint64_t)p->seq_q * p->group <= CLFLASH_DECODE_MAX_ROWS;
}

clflash_status clflash_plan_cpu_decode(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t block,
                                       clflash_flash_kernel *out)
{
    const uint32_t rows = p->seq_q * p->group; /* all of one K/V head's packed rows */
    /* keys per chunk: a forced B, else at most 32 (PoCL, 2 cores, d = 128, f32 and f16: chunks of 8
     * to 32 keys read K and V at the same rate within the run-to-run spread) */
    const uint32_t keys = p->block ? block : block < DEC_KEYS_MAX ? block : DEC_KEYS_MAX;
    uint32_t tenths_per_unit, min_keys; /* the portable kernel's CPU rule */
    clflash_portable_split_rule(c, &tenths_per_unit, &min_keys);
    const uint32_t splits = clflash_split_count(c, p, (uint64_t)p->batch * p->heads_kv, tenths_per_unit, min_keys);
    char defines[512], features[300];
    cl_program prog;
    cl_int err;
    clflash_status st;
    clflash_forward_defines(p, with_lse, splits, p->group, features, sizeof features);
    snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D DEC_ROWS=%u -D DEC_KEYS=%u", features, p->head_dim, rows,
             keys);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_FLASH_DECODE_CPU, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    cl_kernel kernel = clCreateKernel(prog, KERNEL_NAME, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", KERNEL_NAME);
    clflash_fill_plan(&out->plan, p, clflash_tile_bytes, c->local_mem_budget, keys, rows, 0, KERNEL_NAME, 1, 1);
    clflash_tune_report(&out->plan, "portable.cpu_path=1");
    out->plan.kv_passes = 1; /* each K/V head's keys are read once for all its rows */
    out->kernel = kernel;
    clflash_set_split(out, p, splits, p->group);
    return CLFLASH_SUCCESS;
}
