/*
 * backward_plan.c - the choice of B for the backward kernels.
 *
 * The rule (tile_math.c): the backward kernels hold a Q, a K, a V and a dO block and the B x B probability and
 * dS blocks, (4*B*d + 2*B*B) * s bytes, the same kind of count as the forward's (3*B*d + B*B) * s.
 * The planner takes the largest B that fits the local memory (the device's, or the context's
 * smaller budget), caps it by the device class's preference, the work-group limits and the
 * sequence lengths, builds the kernels, and then asks the gradient kernel what it really uses
 * (CL_KERNEL_LOCAL_MEM_SIZE: P and dS are fp32 and rows are padded, so more than the rule) and how
 * many work-items it can run (CL_KERNEL_WORK_GROUP_SIZE). If either does not fit it first halves
 * the lanes per row, then steps B down. A forced B is used exactly or refused.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static const char variant_name[] = "flash_backward_portable";

clflash_status clflash_check_backward_features(const clflash_problem *p)
{
    /* An out_dtype other than dtype is refused earlier (INVALID_DTYPE) unless the input is i8. */
    if (p->dtype == CLFLASH_I8)
        return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                            "the backward pass does not support i8 storage (f32, f16 and bf16 storage with every mask "
                            "and score transform are supported)");
    return clflash_refuse_paged(p, "the backward pass");
}

/* The gradient kernel's CPU path (fp32 tiles, float8 accumulators; see cl/flash_backward.cl) where
 * the device class or the portable.cpu_path setting asks for it, as the forward's. */
static int cpu_path(const clflash_context *c, const clflash_problem *p, uint32_t block, uint32_t lanes)
{
    return clflash_wants_cpu_path(c, p) && lanes == 1 && block % 8 == 0;
}

/* clflash's own count of the gradient kernel's __local arrays (flash_backward.cl: rows_a, rows_b,
 * cols_a, cols_b, pt, dst, row_lse, row_d; CPU path: ta, tb, ra, rb, row_lse, row_d), used when a
 * driver reports less (PoCL 5.0 reports 0 for static local arrays). Before the lanes are known
 * (lanes == 0) it counts the portable path. */
static cl_ulong counted_local_bytes(const clflash_context *c, const clflash_problem *p, uint32_t block,
                                    uint32_t lanes)
{
    if (lanes && cpu_path(c, p, block, lanes))
        return 4ull * (2ull * p->head_dim * block + 2ull * block * ((p->head_dim + 7) / 8 * 8) + 2ull * block);
    const uint64_t padded = block | 1u;
    const uint64_t tiles = (2ull * block * clflash_lds_stride(p->head_dim, p->elem_size) + 2ull * p->head_dim * padded) *
                           p->elem_size;
    return tiles + 2ull * 4 * block * padded + 2ull * 4 * block;
}

static void release_kernels(clflash_backward_kernels *k)
{
    if (k->rowdot) clReleaseKernel(k->rowdot);
    if (k->grads) clReleaseKernel(k->grads);
    k->rowdot = k->grads = NULL;
}

void clflash_backward_kernels_release(clflash_backward_kernels *k)
{
    if (k)
        release_kernels(k);
}

/* Builds the kernels for (B, lanes) and reads what the gradient kernel really needs. */
static clflash_status build_variant(clflash_context *c, const clflash_problem *p, uint32_t block, uint32_t lanes,
                                    uint32_t rowdot_wg, clflash_backward_kernels *out, cl_ulong *local_bytes,
                                    size_t *max_wg)
{
    char defines[512], features[256], shape[240];
    cl_program prog;
    cl_int e1, e2;
    clflash_status st;
    clflash_feature_defines(p, 0, features, sizeof features);
    clflash_backward_shape_defines(c, p, block, lanes, rowdot_wg, shape, sizeof shape);
    snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u %s", features, p->head_dim, shape);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_FLASH_BACKWARD, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    out->rowdot = clCreateKernel(prog, "flash_backward_rowdot", &e1);
    out->grads = clCreateKernel(prog, "flash_backward_grads", &e2);
    if (e1 || e2) {
        release_kernels(out);
        return clflash_fail(e1 ? e1 : e2, "creating the backward kernels failed");
    }
    if ((st = clflash_read_kernel_limits(c, out->grads, counted_local_bytes(c, p, block, lanes), local_bytes,
                                         max_wg)) != CLFLASH_SUCCESS)
        release_kernels(out);
    return st;
}

/* The B the planner tries first when none is forced: the rule's largest B within the budget,
 * capped by the class's preference, the work-group limit and the sequence lengths, stepped down
 * until the kernel's own arrays fit; 0 when not even B = 1 fits. */
static uint32_t first_block(const clflash_context *c, const clflash_problem *p, const clflash_tuning *tune,
                            uint32_t below_block)
{
    const uint32_t cap = tune->max_block < tune->max_work_group ? tune->max_block : tune->max_work_group;
    uint32_t block = clflash_block_round(clflash_block_cap(
        clflash_backward_max_block(c->local_mem_budget, p->head_dim, p->elem_size), cap, p, below_block));
    /* The kernel's own arrays (P and dS in fp32, padded rows) exceed the rule: step down before
     * building, since a driver may refuse to build a kernel whose static local arrays do not fit
     * (NVIDIA's does) rather than report their size. */
    while (block > 0 && counted_local_bytes(c, p, block, 0) > c->local_mem_budget)
        block = clflash_block_step_down(block);
    return block;
}

/* The D kernel's work-group: 64 work-items, fewer where the device allows fewer. */
static uint32_t rowdot_group(const clflash_context *c)
{
    uint32_t wg = 64;
    while (wg > 1 && wg > c->info.max_work_group_size)
        wg /= 2;
    return wg;
}

/* AMD_WAVES: 0, or the occupancy (waves per SIMD) clang's AMD back end schedules the gradient
 * kernel for (portable_backward.amd_waves; see cl/flash_backward.cl). */
void clflash_backward_shape_defines(const clflash_context *c, const clflash_problem *p, uint32_t block, uint32_t lanes,
                                    uint32_t rowdot_wg, char *buf, size_t size)
{
    snprintf(buf, size,
             "-D BLOCK=%u -D TPR=%u -D LDS_STRIDE=%u -D T_STRIDE=%u -D P_STRIDE=%u -D ROWDOT_WG=%u -D AMD_WAVES=%d "
             "-D CLFLASH_CPU_PATH=%d " CLFLASH_BWD_SKIP_DEFINES,
             block, lanes, clflash_lds_stride(p->head_dim, p->elem_size), block | 1u, block | 1u, rowdot_wg,
             (int)clflash_tune_value(c, p, CLFLASH_TUNE_BACKWARD_AMD_WAVES, NULL), cpu_path(c, p, block, lanes));
}

int clflash_backward_first_candidate(const clflash_context *c, const clflash_problem *p, uint32_t first[3])
{
    const clflash_tuning tune = clflash_tuning_for_backward(c, p);
    const uint32_t block = p->block != 0 ? 0 : first_block(c, p, &tune, 0);
    if (block == 0)
        return 0;
    first[0] = block;
    first[1] = clflash_preferred_lanes(&tune, block);
    first[2] = rowdot_group(c);
    return 1;
}

static clflash_status plan_portable(clflash_context *c, const clflash_problem *p, uint32_t below_block,
                                    clflash_backward_kernels *out)
{
    const uint64_t budget = c->local_mem_budget;
    const clflash_tuning tune = clflash_tuning_for_backward(c, p);
    const int forced = p->block != 0;
    const uint32_t rowdot_wg = rowdot_group(c);
    uint32_t block;
    clflash_status st;

    if ((st = clflash_check_backward_features(p)) != CLFLASH_SUCCESS)
        return st;
    if (forced) {
        if ((st = clflash_check_forced_block(c, p->block,
                                             clflash_backward_tile_bytes(p->block, p->head_dim, p->elem_size),
                                             "backward tile", below_block)) != CLFLASH_SUCCESS)
            return st;
        if (counted_local_bytes(c, p, p->block, 0) > budget)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                "block %u: the backward kernel's local arrays need %llu bytes; the local memory "
                                "budget is %llu bytes",
                                p->block, (unsigned long long)counted_local_bytes(c, p, p->block, 0),
                                (unsigned long long)budget);
        block = p->block;
    } else {
        block = first_block(c, p, &tune, below_block);
        if (block == 0)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                "even a 1-row backward tile of head_dim %u does not fit the %llu-byte local memory "
                                "budget",
                                p->head_dim, (unsigned long long)budget);
    }

    for (uint32_t lanes = clflash_preferred_lanes(&tune, block);;) {
        clflash_backward_kernels k = {0};
        cl_ulong local_bytes = 0;
        size_t max_wg = 0;
        if ((st = build_variant(c, p, block, lanes, rowdot_wg, &k, &local_bytes, &max_wg)) != CLFLASH_SUCCESS)
            return st;
        if (local_bytes <= budget && (size_t)block * lanes <= max_wg) {
            *out = k;
            out->rowdot_wg = rowdot_wg;
            clflash_fill_plan(&out->plan, p, clflash_backward_tile_bytes, budget, block, block, local_bytes,
                              variant_name, lanes, block * lanes);
            clflash_tune_report(&out->plan, "portable.cpu_path=%d", cpu_path(c, p, block, lanes));
            clflash_tune_report_portable(&out->plan, p, 1);
            out->key_groups = out->plan.tiles_k;
            out->query_groups = out->plan.tiles_q;
            return CLFLASH_SUCCESS;
        }
        release_kernels(&k);
        if ((st = clflash_next_candidate("backward kernel", &tune, &block, &lanes, local_bytes, budget, max_wg,
                                         forced)) != CLFLASH_SUCCESS)
            return st;
    }
}

/* The portable kernels first: their D kernel serves both variants, and their gradient kernel is
 * the fallback. Then the tensor-core gradient kernel where the device and the problem allow it; a
 * tile that does not fit it or a build it fails keeps the portable plan. */
clflash_status clflash_plan_backward_kernels(clflash_context *c, const clflash_problem *p, uint32_t below_block,
                                             clflash_backward_kernels *out)
{
    clflash_status st = plan_portable(c, p, below_block, out);
    if (st != CLFLASH_SUCCESS || clflash_nv_mma_backward_refusal(c, p) != NULL)
        return st;
    st = clflash_plan_nv_mma_backward(c, p, below_block, out);
    if (st == CLFLASH_ERROR_TILE_TOO_LARGE || st == CLFLASH_ERROR_BUILD_FAILED) {
        clflash_clear_detail();
        return CLFLASH_SUCCESS;
    }
    if (st != CLFLASH_SUCCESS)
        release_kernels(out);
    return st;
}

clflash_status clflash_plan_backward(clflash_context *c, const clflash_attention_desc *d, clflash_plan *out)
{
    clflash_problem p;
    clflash_backward_kernels k;
    clflash_status st;
    clflash_clear_detail();
    if ((st = clflash_resolve_for_context(c, d, &p)) != CLFLASH_SUCCESS ||
        (st = clflash_check_plan_out(out)) != CLFLASH_SUCCESS)
        return st;
    if ((st = clflash_plan_backward_kernels(c, &p, 0, &k)) != CLFLASH_SUCCESS)
        return st;
    release_kernels(&k);
    clflash_write_plan(out, &k.plan);
    return CLFLASH_SUCCESS;
}
