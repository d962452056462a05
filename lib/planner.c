/*
 * planner.c - chooses the tile size B for a call, by the users' rule and then by the real kernel.
 *
 * The rule: one tile holds a Q block, a K block, a V block and the B x B score block,
 * (3*B*d + B*B) * s bytes, and must fit the local memory (the device's, or the context's smaller
 * budget). The planner takes the largest B that fits, caps it by the device class's preference and
 * by the sequence lengths, builds the kernel for it, and then asks the built kernel what it really
 * uses (CL_KERNEL_LOCAL_MEM_SIZE includes padding and the driver's own bytes, 4 on NVIDIA) and how
 * many work-items it can run (CL_KERNEL_WORK_GROUP_SIZE). If the kernel does not fit, it first
 * halves the lanes per row, then steps B down. A forced B is used exactly or refused.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define KERNEL_NAME "flash_forward"
static const char variant_name[] = "flash_forward_portable";

/* CPU devices take the kernel's CPU path (fp32 K and V tiles; see cl/flash_forward.cl), unless
 * the caller's build options choose with CLFLASH_CPU_PATH. */
static int cpu_path(const clflash_context *c, uint32_t block, uint32_t lanes)
{
    return c->info.device_class == CLFLASH_CLASS_CPU && strstr(c->build_options, "CLFLASH_CPU_PATH") == NULL &&
           lanes == 1 && block % 8 == 0;
}

/* clflash's own count of the flash kernel's __local arrays (portable: qt, kt, vt, pt, rowmax; CPU
 * path: kf, vf), used when a driver reports less (PoCL 5.0 reports 0 for static local arrays). */
static cl_ulong counted_local_bytes(const clflash_context *c, const clflash_problem *p, uint32_t block,
                                    uint32_t lanes)
{
    if (cpu_path(c, block, lanes))
        return 4ull * block * (p->head_dim + (p->head_dim + 7) / 8 * 8);
    const uint64_t rows = 2ull * block * clflash_lds_stride(p->head_dim, p->elem_size); /* qt, vt */
    const uint64_t tiles = (rows + (uint64_t)p->head_dim * (block | 1u)) * p->elem_size;  /* + kt */
    return tiles + 4ull * block * (block | 1u) + 4ull * block * lanes;
}

/* Builds the kernel for (B, lanes) and reads what it really needs. */
static clflash_status build_variant(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t block,
                                    uint32_t lanes, cl_kernel *kernel, cl_ulong *local_bytes, size_t *max_wg)
{
    char defines[512], features[256];
    cl_program prog;
    cl_int err;
    clflash_status st;
    clflash_feature_defines(p, with_lse, features, sizeof features);
    snprintf(defines, sizeof defines,
             "%s%s -D HEAD_DIM=%u -D BLOCK=%u -D TPR=%u -D LDS_STRIDE=%u -D KT_STRIDE=%u -D P_STRIDE=%u", features,
             cpu_path(c, block, lanes) ? " -D CLFLASH_CPU_PATH=1" : "", p->head_dim, block, lanes,
             clflash_lds_stride(p->head_dim, p->elem_size), block | 1u, block | 1u);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_FLASH_FORWARD, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, KERNEL_NAME, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", KERNEL_NAME);
    if ((st = clflash_read_kernel_limits(c, *kernel, counted_local_bytes(c, p, block, lanes), local_bytes, max_wg)) !=
        CLFLASH_SUCCESS) {
        clReleaseKernel(*kernel);
        *kernel = NULL;
    }
    return st;
}

static void fill_plan(const clflash_problem *p, uint64_t budget, uint32_t block, uint32_t lanes,
                      cl_ulong local_bytes, clflash_plan *plan)
{
    plan->block = block;
    plan->tile_bytes = clflash_tile_bytes(block, p->head_dim, p->elem_size);
    plan->local_mem_budget = budget;
    plan->kernel_local_bytes = local_bytes;
    plan->score_matrix_bytes = clflash_score_matrix_bytes(p->seq_q, p->seq_k, p->out_elem_size);
    plan->tiles_q = ((uint64_t)p->seq_q + block - 1) / block;
    plan->tiles_k = ((uint64_t)p->seq_k + block - 1) / block;
    plan->kv_passes = plan->tiles_q;
    plan->kernel = variant_name;
    plan->threads_per_row = lanes;
    plan->work_group_size = block * lanes;
    plan->block_q = block;
}

clflash_status clflash_plan_flash(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t below_block,
                                  clflash_flash_kernel *out)
{
    const uint64_t budget = c->local_mem_budget;
    const clflash_tuning tune = clflash_tuning_for_context(c, p);
    const int forced = p->block != 0;
    uint32_t block;

    if (clflash_nv_mma_refusal(c, p) == NULL) {
        clflash_status st = clflash_plan_nv_mma(c, p, with_lse, below_block, out);
        if (st != CLFLASH_ERROR_TILE_TOO_LARGE && st != CLFLASH_ERROR_BUILD_FAILED)
            return st;
        clflash_clear_detail(); /* the portable kernel is the fallback (a failed build's log is kept) */
    }

    if (forced) {
        uint64_t tile = clflash_tile_bytes(p->block, p->head_dim, p->elem_size);
        if (tile > budget)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                "block %u needs a %llu-byte tile; the local memory budget is %llu bytes", p->block,
                                (unsigned long long)tile, (unsigned long long)budget);
        if (p->block > c->info.max_work_group_size)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                "block %u needs %u work-items; the device allows %zu per group", p->block, p->block,
                                c->info.max_work_group_size);
        if (below_block && p->block >= below_block)
            return clflash_fail(CL_OUT_OF_RESOURCES, "the device refused the forced block %u at enqueue", p->block);
        block = p->block;
    } else {
        const uint32_t cap = tune.max_block < tune.max_work_group ? tune.max_block : tune.max_work_group;
        block = clflash_block_round(
            clflash_block_cap(clflash_max_block(budget, p->head_dim, p->elem_size), cap, p, below_block));
        if (block == 0)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                "even a 1-row tile of head_dim %u does not fit the %llu-byte local memory budget",
                                p->head_dim, (unsigned long long)budget);
    }

    for (;;) {
        /* The class's work-group cap is a preference; a forced block may exceed it (one lane). */
        uint32_t lanes = clflash_block_lanes(block, tune.threads_per_row,
                                             tune.max_work_group > block ? tune.max_work_group : block);
        for (;;) {
            cl_kernel kernel = NULL;
            cl_ulong local_bytes = 0;
            size_t max_wg = 0;
            clflash_status st = build_variant(c, p, with_lse, block, lanes, &kernel, &local_bytes, &max_wg);
            if (st != CLFLASH_SUCCESS)
                return st;
            if (local_bytes <= budget && (size_t)block * lanes <= max_wg) {
                fill_plan(p, budget, block, lanes, local_bytes, &out->plan);
                out->kernel = kernel;
                out->feature_args = 1;
                return CLFLASH_SUCCESS;
            }
            clReleaseKernel(kernel);
            if (local_bytes <= budget && lanes > 1) {
                lanes /= 2; /* too many work-items for this kernel: fewer lanes per row */
                continue;
            }
            if (forced)
                return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                    "block %u: the built kernel needs %llu bytes of local memory (budget %llu) "
                                    "and %u work-items (kernel allows %zu)",
                                    block, (unsigned long long)local_bytes, (unsigned long long)budget,
                                    block * lanes, max_wg);
            break;
        }
        block = clflash_block_step_down(block);
        if (block == 0)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "no block size fits the device's kernel limits");
    }
}

clflash_status clflash_plan_attention(clflash_context *c, const clflash_attention_desc *d, clflash_plan *out)
{
    clflash_problem p;
    clflash_flash_kernel fk;
    clflash_status st;
    clflash_clear_detail();
    if ((st = clflash_check_context(c)) != CLFLASH_SUCCESS || (st = clflash_resolve_desc(d, &p)) != CLFLASH_SUCCESS)
        return st;
    if (out == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "out is NULL");
    if ((st = clflash_plan_flash(c, &p, 0, 0, &fk)) != CLFLASH_SUCCESS)
        return st;
    clReleaseKernel(fk.kernel);
    *out = fk.plan;
    return CLFLASH_SUCCESS;
}
