/*
 * nv_mma_backward_plan.c - decides whether a backward call's gradient kernel can run on NVIDIA's
 * tensor cores (cl/nv_mma_backward.cl), and plans and builds it.
 *
 * Why separate from backward_plan.c: the tensor-core kernel has the forward tensor-core
 * kernel's eligibility rules (every feature included; head dims up to 256, padded to a multiple
 * of 16 inside the kernel, rows not 16-byte aligned copied element by element), and its own
 * shape: above head_dim 128 two warps share each 16 rows, each holding half of the columns (the
 * kernel's D_SPLIT; head dims there padded to a multiple of 32), so that a warp's K, V and dK and
 * dV sums fit its registers at any head_dim. B is
 * the streamed tile (query rows of a key group, keys of a query group) and obeys the backward rule
 * (4*B*d + 2*B*B) * s, while each work-group's own 16 * WARPS keys or queries (block_q) live in
 * registers. backward_plan.c plans the portable kernels first (their D kernel serves both, and
 * their gradient kernel is the fallback) and then asks here.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL_NAME "nv_mma_backward"
static const char variant_name[] = "nv_mma_backward";

#define NV_BWD_SPLIT_ABOVE 128u /* head dims above this split each 16 rows' columns between two warps */

const char *clflash_nv_mma_backward_refusal(const clflash_context *c, const clflash_problem *p)
{
    return clflash_nv_mma_refusal(c, p); /* head_dim up to 256, as the forward */
}

/* The kernel's D_SPLIT: warps that share 16 rows. */
static uint32_t column_split(const clflash_problem *p)
{
    return p->head_dim > NV_BWD_SPLIT_ABOVE ? 2u : 1u;
}

/* The kernel's HEAD_DIM: head_dim padded to a multiple of 16, or of 32 where two warps take half
 * of it each (a half must be whole k16 steps). */
static uint32_t padded_dim(const clflash_problem *p)
{
    const uint32_t unit = 16 * column_split(p);
    return (p->head_dim + unit - 1) / unit * unit;
}

/* Bytes of the kernel's local arrays: max(4B, 2 * block_q) rows of d + 8 halves (d padded as
 * padded_dim), 4B floats, and the swap slots of add_partner_share (2 KiB per warp and 16 rows of
 * B with two warps per 16 rows, else one float4 per warp). */
static cl_ulong counted_local_bytes(const clflash_problem *p, uint32_t block, uint32_t block_q, uint32_t warps)
{
    const uint64_t rows = 4ull * block > 2ull * block_q ? 4ull * block : 2ull * block_q;
    const uint64_t swap_slots = column_split(p) > 1 ? block / 16 * 4 * 32 : 1;
    return rows * (padded_dim(p) + 8) * p->elem_size + 4ull * block * sizeof(float) + warps * swap_slots * 16;
}

/* The kernel's NV_BWD_STREAM: the tuning table's default of nv_backward.stream (see
 * cl/nv_mma_backward.cl for the measurement behind it), or the setting. */
int32_t clflash_nv_default_bwd_stream(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)c;
    (void)f;
    return padded_dim(p) >= 128;
}

static int bwd_stream(const clflash_context *c, const clflash_problem *p)
{
    return clflash_tune_value(c, p, CLFLASH_TUNE_NV_BACKWARD_STREAM, NULL) != 0;
}

/* The kernel's NV_BWD_CHUNK: the tuning table's default of nv_backward.chunk, or the setting.
 * Chunks of 16 group indices over every head and batch entry where a bias is given, or where the
 * causal mask or a window limits the keys and no key lengths do (nor a packed batch's lengths); 0, the
 * launch's order, otherwise.
 * Measured on an H100 (f16, head_dim 128, n = 4096, batch 4, 16 heads, chunk 16 against 0 in two
 * alternated rounds; docs/performance/h200.md, "The backward's work-groups in chunks"): a [n][n]
 * bias broadcast over batch and heads 7.80-8.03 ms against 9.39-9.40, a full [b][h][n][n] bias
 * 8.02-8.26 against 9.51-9.65, with its gradient 12.39-12.68 against 14.04-14.11, a key bias
 * 7.50-7.54 against 7.66-7.77; causal 3.54-3.63 against 3.61-3.74 (with 4 kv heads 3.49 against
 * 3.83), a window of 1024 on both sides 3.20-3.27 against 3.30-3.40; plain 6.45-6.46 against
 * 6.26-6.37, and key lengths 5.61-5.70 against 5.38-5.42, which keep 0. */
int32_t clflash_nv_default_bwd_chunk(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)c;
    (void)f;
    const int masked = (p->flags & (CLFLASH_CAUSAL | CLFLASH_WINDOW)) != 0 && p->key_lengths == NULL && !p->varlen;
    return p->bias != NULL || masked ? 16 : 0;
}

static uint32_t bwd_chunk(const clflash_context *c, const clflash_problem *p)
{
    return (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_BACKWARD_CHUNK, NULL);
}

/* The kernel's defines for (block, warps): the feature switches, then its shape and parameters. */
static void kernel_defines(const clflash_context *c, const clflash_problem *p, uint32_t block, uint32_t warps,
                           char *buf, size_t size)
{
    char features[256];
    clflash_feature_defines(p, 0, features, sizeof features);
    snprintf(buf, size,
             "%s -D HEAD_DIM=%u -D D_REAL=%u -D D_SPLIT=%u -D NV_ALIGNED=%d -D BLOCK=%u -D WARPS=%u "
             "-D BIAS_PAIRS=%d -D NV_BWD_STREAM=%d -D NV_BWD_CHUNK=%u " CLFLASH_BWD_SKIP_DEFINES,
             features, padded_dim(p), p->head_dim, column_split(p), clflash_nv_rows_aligned(p), block, warps,
             clflash_bias_pairs(p), bwd_stream(c, p), bwd_chunk(c, p));
}

static clflash_status build(clflash_context *c, const clflash_problem *p, uint32_t block, uint32_t warps,
                            cl_kernel *kernel, cl_ulong *local_bytes, size_t *max_wg)
{
    char defines[640], shape[560];
    cl_program prog;
    cl_int err;
    clflash_status st;
    kernel_defines(c, p, block, warps, shape, sizeof shape);
    /* 0: no cap */
    const uint32_t regs = (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_BACKWARD_MAXRREGCOUNT, NULL);
    char reg_option[48] = "";
    if (regs)
        snprintf(reg_option, sizeof reg_option, " -cl-nv-maxrregcount=%u", regs);
    snprintf(defines, sizeof defines, "%s%s", shape, reg_option);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_NV_MMA_BACKWARD, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, KERNEL_NAME, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", KERNEL_NAME);
    if ((st = clflash_read_kernel_limits(c, *kernel, counted_local_bytes(p, block, 16 * warps / column_split(p), warps),
                                         local_bytes,
                                         max_wg)) != CLFLASH_SUCCESS) {
        clReleaseKernel(*kernel);
        *kernel = NULL;
    }
    return st;
}

/* The warps per work-group and the first B the planner tries (0: none). */
static uint32_t first_candidate(const clflash_context *c, const clflash_problem *p, uint32_t below_block,
                                uint32_t *warps_out)
{
    const uint32_t split = column_split(p);
    /* with two warps per 16 rows an odd setting steps down to an even count (at least 2), as
     * other values the kernel's limits refuse step down; the plan reports the count it ran with */
    uint32_t warps = (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_BACKWARD_WARPS, NULL);
    warps = warps / split * split;
    if (warps == 0)
        warps = split;
    *warps_out = warps;
    if (p->block != 0)
        return p->block; /* the portable planner has checked it against the rule and below_block */
    const uint64_t b = clflash_block_cap(clflash_backward_max_block(c->local_mem_budget, p->head_dim, p->elem_size),
                                         (uint64_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_BACKWARD_BLOCK, NULL),
                                         p, below_block);
    return (uint32_t)(b / 16 * 16);
}

int clflash_nv_backward_first_defines(const clflash_context *c, const clflash_problem *p, char *buf, size_t size)
{
    uint32_t warps;
    const uint32_t block = first_candidate(c, p, 0, &warps);
    if (block < 16)
        return 0;
    kernel_defines(c, p, block, warps, buf, size);
    return 1;
}

clflash_status clflash_plan_nv_mma_backward(clflash_context *c, const clflash_problem *p, uint32_t below_block,
                                            clflash_backward_kernels *out)
{
    const uint64_t budget = c->local_mem_budget;
    const uint32_t split = column_split(p);
    uint32_t warps;
    const uint64_t b = first_candidate(c, p, below_block, &warps);
    const uint32_t rows = 16 * warps / split; /* keys of a key group, queries of a query group */
    for (uint32_t block = (uint32_t)b; block >= 16; block -= 16) {
        cl_kernel kernel = NULL;
        cl_ulong local_bytes = 0;
        size_t max_wg = 0;
        clflash_status st = build(c, p, block, warps, &kernel, &local_bytes, &max_wg);
        if (st != CLFLASH_SUCCESS)
            return st;
        if (local_bytes <= budget && 32u * warps <= max_wg) {
            clReleaseKernel(out->grads);
            out->grads = kernel;
            /* threads_per_row 2: a warp's 32 lanes share its 16 rows (times the warps per 16 rows) */
            clflash_fill_plan(&out->plan, p, clflash_backward_tile_bytes, budget, block, rows, local_bytes,
                              variant_name, 2 * split, 32u * warps);
            clflash_tune_report(&out->plan,
                                "nv_backward.block=%u,nv_backward.warps=%u,nv_backward.stream=%d,nv_backward.chunk=%u",
                                block, warps, bwd_stream(c, p), bwd_chunk(c, p));
            const int32_t regs = clflash_tune_value(c, p, CLFLASH_TUNE_NV_BACKWARD_MAXRREGCOUNT, NULL);
            if (regs != 0)
                clflash_tune_report(&out->plan, ",nv_backward.maxrregcount=%d", (int)regs);
            out->key_groups = ((uint64_t)p->seq_k + rows - 1) / rows;
            out->query_groups = ((uint64_t)p->seq_q + rows - 1) / rows;
            return CLFLASH_SUCCESS;
        }
        clReleaseKernel(kernel);
        if (p->block != 0)
            break;
    }
    return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "no block fits the tensor-core gradient kernel's limits");
}
