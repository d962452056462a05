/*
 * plan_common.c - what the planners (forward_plan.c and nv_mma_forward_plan.c for the forward,
 * backward_plan.c for the backward) share: the valid block sizes, how to step down after a
 * refusal, how many lanes share a row, the bank-friendly row stride of a local tile, reading
 * what a built kernel really needs, filling in the plan they report, and whether the portable
 * kernels take their CPU path.
 *
 * Why one file: the forward and backward plans must round, step and pad B the same way, so that a
 * block the tile calculator prints is one both passes accept, and must judge a built kernel by
 * the same numbers.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int32_t clflash_default_cpu_path(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)p;
    (void)f;
    return c->info.device_class == CLFLASH_CLASS_CPU;
}

int clflash_wants_cpu_path(const clflash_context *c, const clflash_problem *p)
{
    return clflash_tune_value(c, p, CLFLASH_TUNE_PORTABLE_CPU_PATH, NULL) != 0;
}

uint64_t clflash_split_workspace_bytes(const clflash_problem *p, uint32_t splits)
{
    const uint64_t rows = clflash_mul_sat(clflash_mul_sat(p->batch, p->heads_q), p->seq_q);
    return clflash_mul_sat(clflash_mul_sat(splits, rows), clflash_mul_sat(p->head_dim + 1u, sizeof(float)));
}

void clflash_portable_split_rule(const clflash_context *c, uint32_t *tenths_per_unit, uint32_t *min_keys)
{
    const int cpu = c->info.device_class == CLFLASH_CLASS_CPU;
    *tenths_per_unit = cpu ? 20 : 40;
    *min_keys = cpu ? 1024 : 256;
}

uint32_t clflash_split_count(const clflash_context *c, const clflash_problem *p, uint64_t groups,
                             uint32_t tenths_per_unit, uint32_t min_split_keys)
{
    if (p->num_splits != 0)
        return p->num_splits;
    const uint64_t target = ((uint64_t)c->info.compute_units * tenths_per_unit + 9) / 10;
    if (groups == 0 || groups >= target)
        return 1;
    uint64_t s = (target + groups - 1) / groups;
    const uint64_t by_keys = p->seq_k / min_split_keys;
    if (s > by_keys)
        s = by_keys;
    if (s > CLFLASH_MAX_SPLITS)
        s = CLFLASH_MAX_SPLITS;
    if (s < 2 || clflash_split_workspace_bytes(p, (uint32_t)s) > c->info.max_alloc_size / 8)
        return 1;
    return (uint32_t)s;
}

void clflash_set_split(clflash_flash_kernel *out, const clflash_problem *p, uint32_t splits, uint32_t pack)
{
    const uint32_t block = out->plan.block;
    out->plan.splits = splits;
    out->plan.packed_heads = pack;
    out->plan.workspace_bytes = (splits > 1 ? clflash_split_workspace_bytes(p, splits) : 0) +
                                out->tma_map_groups * CLFLASH_TMA_MAP_SLOT_BYTES;
    if (splits > 1) {
        const uint64_t per = ((uint64_t)p->seq_k + splits - 1) / splits;
        out->split_keys = (uint32_t)((per + block - 1) / block * block);
    } else {
        out->split_keys = p->seq_k;
    }
}

uint32_t clflash_block_step_down(uint32_t b)
{
    return b > 16 ? (b - 1) / 16 * 16 : b / 2;
}

uint32_t clflash_preferred_lanes(const clflash_tuning *tune, uint32_t block)
{
    return clflash_block_lanes(block, tune->threads_per_row,
                               tune->max_work_group > block ? tune->max_work_group : block);
}

clflash_status clflash_check_forced_block(const clflash_context *c, uint32_t block, uint64_t tile_bytes,
                                          const char *tile_name, uint32_t below_block)
{
    const uint64_t budget = c->local_mem_budget;
    if (tile_bytes > budget)
        return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                            "block %u needs a %llu-byte %s; the local memory budget is %llu bytes", block,
                            (unsigned long long)tile_bytes, tile_name, (unsigned long long)budget);
    if (block > c->info.max_work_group_size)
        return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                            "block %u needs %u work-items; the device allows %zu per group", block, block,
                            c->info.max_work_group_size);
    if (below_block && block >= below_block)
        return clflash_fail(CL_OUT_OF_RESOURCES, "the device refused the forced block %u at enqueue", block);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_next_candidate(const char *what, const clflash_tuning *tune, uint32_t *block, uint32_t *lanes,
                                      cl_ulong local_bytes, uint64_t budget, size_t max_wg, int forced)
{
    if (local_bytes <= budget && *lanes > 1) {
        *lanes /= 2; /* too many work-items for the kernel: fewer lanes per row */
        return CLFLASH_SUCCESS;
    }
    if (forced)
        return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                            "block %u: the built %s needs %llu bytes of local memory (budget %llu) and %u "
                            "work-items (it allows %zu)",
                            *block, what, (unsigned long long)local_bytes, (unsigned long long)budget,
                            *block * *lanes, max_wg);
    *block = clflash_block_step_down(*block);
    if (*block == 0)
        return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "no block size fits the device's %s limits", what);
    *lanes = clflash_preferred_lanes(tune, *block);
    return CLFLASH_SUCCESS;
}

uint32_t clflash_block_round(uint64_t b)
{
    if (b >= 16)
        return (uint32_t)(b > 4096 ? 4096 : b / 16 * 16);
    return b >= 8 ? 8 : b >= 4 ? 4 : b >= 2 ? 2 : (uint32_t)b;
}

uint64_t clflash_block_cap(uint64_t b, uint64_t cap, const clflash_problem *p, uint32_t below_block)
{
    const uint64_t longest = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    if (b > cap)
        b = cap;
    if (b > (longest + 15) / 16 * 16) /* a block beyond the sequences only computes padding */
        b = (longest + 15) / 16 * 16;
    if (below_block && b >= below_block)
        b = below_block - 1;
    return b;
}

uint32_t clflash_block_lanes(uint32_t block, uint32_t want, uint32_t max_wg)
{
    uint32_t t = 1;
    while (t * 2 <= want && block % (t * 2) == 0 && (uint64_t)block * t * 2 <= max_wg)
        t *= 2;
    return t;
}

uint32_t clflash_lds_stride(uint32_t head_dim, size_t elem_size)
{
    const uint32_t per_word = (uint32_t)(4 / elem_size);
    uint32_t words = (uint32_t)((head_dim * elem_size + 3) / 4);
    if (words % 2 == 0)
        words++;
    return words * per_word;
}

/* How many times a kernel's real static local memory the implementation reports as its
 * CL_KERNEL_LOCAL_MEM_SIZE: 1 for most, 2 for Mesa's rusticl 22.3 on llvmpipe (measured there:
 * 4096 to 32000 static bytes read 8192 to 64000, and kernels whose report exceeded the device's
 * 32 KiB ran and gave the right results). Read from a probe kernel with a 1 KiB local array, once
 * per context and only when needed (clflash_read_kernel_limits); 1 if the probe cannot be built. */
#define PROBE_LOCAL_BYTES 1024u
static uint32_t local_report_factor(clflash_context *c)
{
    const char *src = "__kernel void clflash_local_probe(__global float *o)\n"
                                   "{\n"
                                   "    __local float t[256];\n"
                                   "    t[get_local_id(0) % 256] = (float)get_local_id(0);\n"
                                   "    barrier(CLK_LOCAL_MEM_FENCE);\n"
                                   "    o[get_global_id(0)] = t[(get_local_id(0) + 1) % 256];\n"
                                   "}\n";
    pthread_mutex_lock(&c->lock);
    uint32_t factor = c->local_report_factor;
    pthread_mutex_unlock(&c->lock);
    if (factor != 0)
        return factor;
    factor = 1;
    cl_int err;
    cl_program prog = clCreateProgramWithSource(c->ctx, 1, &src, NULL, &err);
    if (err == CL_SUCCESS && clBuildProgram(prog, 1, &c->dev, "", NULL, NULL) == CL_SUCCESS) {
        cl_kernel k = clCreateKernel(prog, "clflash_local_probe", &err);
        cl_ulong reported = 0;
        if (err == CL_SUCCESS &&
            clGetKernelWorkGroupInfo(k, c->dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof reported, &reported, NULL) ==
                CL_SUCCESS &&
            reported >= 2 * PROBE_LOCAL_BYTES && reported % PROBE_LOCAL_BYTES == 0 && reported <= 8 * PROBE_LOCAL_BYTES)
            factor = (uint32_t)(reported / PROBE_LOCAL_BYTES);
        if (err == CL_SUCCESS)
            clReleaseKernel(k);
        pthread_mutex_lock(&c->lock);
        c->local_report_factor = factor;
        pthread_mutex_unlock(&c->lock);
    }
    if (prog != NULL)
        clReleaseProgram(prog);
    return factor;
}

clflash_status clflash_read_kernel_limits(clflash_context *c, cl_kernel kernel, cl_ulong counted,
                                          cl_ulong *local_bytes, size_t *max_wg)
{
    cl_int err;
    if ((err = clGetKernelWorkGroupInfo(kernel, c->dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof *local_bytes, local_bytes,
                                        NULL)) != CL_SUCCESS ||
        (err = clGetKernelWorkGroupInfo(kernel, c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof *max_wg, max_wg, NULL)) !=
            CL_SUCCESS)
        return clflash_fail(err, "clGetKernelWorkGroupInfo failed");
    /* A report above the budget where clflash's own count fits may be an implementation's
     * overstatement: divided by the factor a probe kernel shows (never below the count). */
    if (*local_bytes > c->local_mem_budget && counted <= c->local_mem_budget) {
        const uint32_t factor = local_report_factor(c);
        if (factor > 1)
            *local_bytes /= factor;
    }
    if (*local_bytes < counted)
        *local_bytes = counted;
    return CLFLASH_SUCCESS;
}

void clflash_fill_plan(clflash_plan *plan, const clflash_problem *p, clflash_tile_rule rule, uint64_t budget,
                       uint32_t block, uint32_t block_q, cl_ulong local_bytes, const char *kernel,
                       uint32_t threads_per_row, uint32_t work_group_size)
{
    memset(plan, 0, sizeof *plan);
    plan->struct_size = sizeof *plan;
    plan->block = block;
    plan->tile_bytes = rule(block, p->head_dim, p->elem_size);
    plan->local_mem_budget = budget;
    plan->kernel_local_bytes = local_bytes;
    plan->score_matrix_bytes = clflash_score_matrix_bytes(p->seq_q, p->seq_k, p->out_elem_size);
    plan->tiles_q = ((uint64_t)p->seq_q + block - 1) / block;
    plan->tiles_k = ((uint64_t)p->seq_k + block - 1) / block;
    plan->kv_passes = ((uint64_t)p->seq_q + block_q - 1) / block_q;
    plan->kernel = kernel;
    plan->threads_per_row = threads_per_row;
    plan->work_group_size = work_group_size;
    plan->block_q = block_q;
}
