/*
 * cpu_decode_plan.c - plans the CPU decoding kernel (cl/flash_decode_cpu.cl): a forward with few
 * query rows per K/V head (decoding) on a device that takes the portable kernel's CPU path.
 *
 * Why separate from forward_plan.c: the kernel has a shape of its own, one work-item per work-group
 * holding every packed row (query x GQA head) of one K/V head, or of several where the cache is
 * token-major (kv_heads_per_item), with no local memory, so its plan has nothing to fit but the tile
 * rule's B (the keys it takes per chunk, the CPU path's B).
 */
#include "internal.h"

#include <stdio.h>

#define KERNEL_NAME "flash_decode_cpu"

#define DEC_KEYS_MAX 32u

/* A work-item's rows when it takes several K/V heads, and their rows times head_dim (its Q and O
 * state in fp32 is 8 bytes per element: 64 KiB at most). */
#define SLOT_ROWS_MAX 64u
#define SLOT_STATE_MAX 8192u

int clflash_kv_token_major(const clflash_problem *p)
{
    return p->heads_kv > 1 && p->k.head_stride < p->k.seq_stride && p->v.head_stride < p->v.seq_stride;
}

/* The K/V heads each work-item takes: 1, or with a token-major cache (the heads of a key side by side)
 * the most that divide heads_kv within the row limits, so that a work-item reads each key's rows of
 * those heads as one run in order instead of one head's rows a slot apart (PoCL, two cores, heads
 * 32/8, d = 128, seq_k 32768, f32: 6 GB/s one head per work-item; see docs/performance/pocl.md). */
static uint32_t kv_heads_per_item(const clflash_problem *p)
{
    uint32_t best = 1;
    if (!clflash_kv_token_major(p))
        return best;
    for (uint32_t h = 2; h <= p->heads_kv; h++) {
        const uint64_t rows = (uint64_t)p->seq_q * p->group * h;
        if (p->heads_kv % h == 0 && rows <= SLOT_ROWS_MAX && rows * p->head_dim <= SLOT_STATE_MAX)
            best = h;
    }
    return best;
}

int clflash_cpu_decode_applies(const clflash_problem *p)
{
    return (uint64_t)p->seq_q * p->group <= CLFLASH_DECODE_MAX_ROWS;
}

clflash_status clflash_plan_cpu_decode(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t block,
                                       clflash_flash_kernel *out)
{
    const uint32_t heads = kv_heads_per_item(p), pack = p->group * heads;
    const uint32_t rows = p->seq_q * pack; /* all packed rows of the work-item's K/V heads */
    /* keys per chunk: a forced B, else at most 32 (PoCL, 2 cores, d = 128, f32 and f16: chunks of 8
     * to 32 keys read K and V at the same rate within the run-to-run spread) */
    const uint32_t keys = p->block ? block : block < DEC_KEYS_MAX ? block : DEC_KEYS_MAX;
    uint32_t tenths_per_unit, min_keys; /* the portable kernel's CPU rule */
    clflash_portable_split_rule(c, &tenths_per_unit, &min_keys);
    const uint32_t splits =
        clflash_split_count(c, p, (uint64_t)p->batch * (p->heads_kv / heads), tenths_per_unit, min_keys);
    char defines[512], features[300];
    cl_program prog;
    cl_int err;
    clflash_status st;
    clflash_forward_defines(p, with_lse, splits, pack, features, sizeof features);
    snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D DEC_ROWS=%u -D DEC_KEYS=%u -D DEC_KV_HEADS=%u", features,
             p->head_dim, rows, keys, heads);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_FLASH_DECODE_CPU, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    cl_kernel kernel = clCreateKernel(prog, KERNEL_NAME, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", KERNEL_NAME);
    clflash_fill_plan(&out->plan, p, clflash_tile_bytes, c->local_mem_budget, keys, rows, 0, KERNEL_NAME, 1, 1);
    clflash_tune_report(&out->plan, "portable.cpu_path=1");
    out->plan.kv_passes = 1; /* each K/V head's keys are read once for all its rows */
    out->kernel = kernel;
    clflash_set_split(out, p, splits, pack);
    return CLFLASH_SUCCESS;
}
