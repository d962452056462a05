/*
 * forward_plan.c - chooses the tile size B for a call, by the tile rule and then by the real kernel.
 *
 * The rule: one tile holds a Q block, a K block, a V block and the B x B score block,
 * (3*B*d + B*B) * s bytes, and must fit the local memory (the device's, or the context's smaller
 * budget). The planner takes the largest B that fits, caps it by the device class's preference and
 * by the sequence lengths, builds the kernel for it, and then asks the built kernel what it really
 * uses (CL_KERNEL_LOCAL_MEM_SIZE includes padding and the driver's own bytes, 4 on NVIDIA) and how
 * many work-items it can run (CL_KERNEL_WORK_GROUP_SIZE). If the kernel does not fit, it first
 * halves the lanes per row, then steps B down. A forced B is used exactly or refused.
 *
 * Which path of the portable forward, a kernel file each: CPU devices take the CPU path
 * (cl/flash_forward_cpu.cl); other devices the register-tiled path (cl/flash_forward_regtile.cl),
 * whose query block (block_q) is separate from B and whose real local arrays (Q, one K-or-V tile
 * and P in fp32) are counted here before building: B steps down while they do not fit, and block_q
 * halves when no B of 16 or more fits. The lane-per-row path (cl/flash_forward_lanes.cl) remains
 * for a context that forces threads_per_row and for the tuning setting portable.regtile=0 (which
 * can also set the micro-tiles; see clflash.h).
 *
 * Split-KV and GQA packing (clflash.h): every path can split the keys into parts, and the
 * register-tiled path packs a GQA group's query heads into one work-group's rows when they fit its
 * query block. Both are decided before the kernel is built (they change its defines).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernels of the three files, and the variant names the plans report (the CPU and lane paths
 * share one). */
#define LANES_KERNEL "flash_forward_lanes"
#define REGTILE_KERNEL "flash_forward_regtile"
#define CPU_KERNEL "flash_forward_cpu"

static const char variant_name[] = "flash_forward_portable";
static const char regtile_name[] = "flash_forward_regtile";

/* The CPU path (fp32 K and V tiles; see cl/flash_forward_cpu.cl) where the device class or the
 * portable.cpu_path setting asks for it and one work-item holds a row of a block of 8k rows. */
static int cpu_path(const clflash_context *c, const clflash_problem *p, uint32_t block, uint32_t lanes)
{
    return clflash_wants_cpu_path(c, p) && lanes == 1 && block % 8 == 0;
}

/* ---- the register-tiled path ----------------------------------------------------------------- */
/* Every work-item computes an rm x (B / tc) block of scores and an rm x (4 * ceil(d / (4 tc)))
 * block of O; rm * bq / rm = bq query rows per work-group, bq / rm * tc work-items. */
typedef struct {
    uint32_t rm, tc, bq, block_cap; /* block_cap 0: none */
} regtile_cfg;

void clflash_default_regtile(const clflash_context *c, const clflash_problem *p, uint32_t out[4])
{
    (void)c;
    out[0] = 4;
    out[1] = p->head_dim > 128 ? 16 : 8; /* at most 16 float4 accumulators of O per row */
    out[2] = p->head_dim > 128 ? 32 : 64;
    out[3] = 0;
}

/* portable.regtile (clflash_default_regtile unless a setting gives it; see clflash.h): 0 for the
 * lane-per-row path, RMxTCxBQ[xB] for these micro-tiles, query rows and a cap on B (checked when
 * it was set). Returns 0 for the lane path, 1 for register tiles in *cfg. */
static int regtile_choice(const clflash_context *c, const clflash_problem *p, regtile_cfg *cfg)
{
    uint32_t v[4];
    if (c->threads_per_row != 0) /* the caller forces lanes per row: the lane path has them */
        return 0;
    clflash_tune_regtile(c, p, v);
    if (v[0] == 0)
        return 0;
    cfg->rm = v[0];
    cfg->tc = v[1];
    cfg->bq = v[2];
    cfg->block_cap = v[3];
    return 1;
}

/* Bytes of the register-tiled path's local arrays (see cl/flash_forward_regtile.cl): Q (bq rows),
 * one K-or-V tile (B rows), P (B x bq) in fp32 with rows padded by one float4, and bq * tc floats
 * for the row reductions. */
static cl_ulong regtile_bytes(const clflash_problem *p, const regtile_cfg *r, uint32_t block)
{
    const uint64_t d4 = (p->head_dim + 3) / 4, vc = (p->head_dim + 4ull * r->tc - 1) / (4ull * r->tc);
    const uint64_t kw = d4 > vc * r->tc ? d4 : vc * r->tc;
    return 16 * ((uint64_t)r->bq * (d4 + 1) + (uint64_t)block * (kw + 1) + (uint64_t)block * ((r->bq + 3) / 4 + 1)) +
           4ull * r->bq * r->tc;
}

/* Intel's compiler option for 256 registers a thread instead of 128 (portable.large_grf). */
#define INTEL_LARGE_GRF " -cl-intel-256-GRF-per-thread"

/* Builds the register-tiled kernel. *large_grf: 1 to ask for Intel's 256-register mode, and on
 * return whether the kernel has it: a compiler that refuses the option (every other vendor's does)
 * gets the kernel without it, and the failed build's log stays in the context's. */
static clflash_status build_regtile(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t splits,
                                    uint32_t pack, uint32_t block, const regtile_cfg *r, cl_kernel *kernel,
                                    cl_ulong *local_bytes, size_t *max_wg, int *large_grf)
{
    char defines[560], features[300];
    cl_program prog;
    cl_int err;
    clflash_status st;
    clflash_forward_defines(p, with_lse, splits, pack, features, sizeof features);
    const int n = snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D BLOCK=%u -D BLOCK_Q=%u -D RT_RM=%u -D RT_TC=%u",
                           features, p->head_dim, block, r->bq, r->rm, r->tc);
    if (*large_grf && n > 0 && (size_t)n + sizeof INTEL_LARGE_GRF <= sizeof defines) {
        memcpy(defines + n, INTEL_LARGE_GRF, sizeof INTEL_LARGE_GRF);
        st = clflash_get_program(c, CLFLASH_SOURCE_FLASH_FORWARD_REGTILE, defines, &prog);
        if (st != CLFLASH_SUCCESS && st != CLFLASH_ERROR_BUILD_FAILED)
            return st;
        if (st == CLFLASH_ERROR_BUILD_FAILED) { /* the option refused: the kernel without it */
            clflash_clear_detail();
            defines[n] = '\0';
            *large_grf = 0;
        }
    } else {
        *large_grf = 0;
    }
    if (!*large_grf &&
        (st = clflash_get_program(c, CLFLASH_SOURCE_FLASH_FORWARD_REGTILE, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, REGTILE_KERNEL, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", REGTILE_KERNEL);
    if ((st = clflash_read_kernel_limits(c, *kernel, regtile_bytes(p, r, block), local_bytes, max_wg)) !=
        CLFLASH_SUCCESS) {
        clReleaseKernel(*kernel);
        *kernel = NULL;
    }
    return st;
}

/* Plans the register-tiled path from `start` (B by the rule, or the forced B): the query rows
 * first (bq halves only when no B of at least min(start, 16) fits), then B steps down. With `first`
 * (a dry run), builds nothing and stores the first candidate's RM, TC, BQ and B there. */
static clflash_status plan_regtile(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t start,
                                   int forced, regtile_cfg cfg, clflash_flash_kernel *out, uint32_t first[4])
{
    const uint64_t budget = c->local_mem_budget;
    /* a GQA group's query heads share the work-group when all their rows fit one query block */
    const uint32_t pack = p->group > 1 && (uint64_t)p->seq_q * p->group <= cfg.bq ? p->group : 1;
    const uint64_t packed_rows = (uint64_t)p->seq_q * pack;
    const uint32_t rows = (uint32_t)((packed_rows + cfg.rm - 1) / cfg.rm * cfg.rm); /* no more than needed */
    const uint32_t bq0 = cfg.bq < rows ? cfg.bq : rows;
    uint32_t tenths_per_unit, min_keys;
    clflash_portable_split_rule(c, &tenths_per_unit, &min_keys);
    const uint32_t splits = clflash_split_count(
        c, p, (uint64_t)p->batch * (p->heads_q / pack) * ((packed_rows + bq0 - 1) / bq0), tenths_per_unit, min_keys);
    if (!forced && cfg.block_cap && start > cfg.block_cap)
        start = cfg.block_cap;
    const uint32_t floor16 = start < 16 ? start : 16;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t bq = bq0; bq >= cfg.rm; bq = bq / 2 / cfg.rm * cfg.rm) {
            regtile_cfg r = cfg;
            r.bq = bq;
            const uint32_t wg = bq / cfg.rm * cfg.tc;
            if (wg > c->info.max_work_group_size)
                continue;
            for (uint32_t block = start; block >= 1; block = clflash_block_step_down(block)) {
                if ((forced || (pass == 0) == (block >= floor16)) && regtile_bytes(p, &r, block) <= budget) {
                    if (first) {
                        first[0] = cfg.rm;
                        first[1] = cfg.tc;
                        first[2] = bq;
                        first[3] = block;
                        return CLFLASH_SUCCESS;
                    }
                    cl_kernel kernel = NULL;
                    cl_ulong local_bytes = 0;
                    size_t max_wg = 0;
                    int large_grf = clflash_tune_value(c, p, CLFLASH_TUNE_PORTABLE_LARGE_GRF, NULL);
                    clflash_status st = build_regtile(c, p, with_lse, splits, pack, block, &r, &kernel, &local_bytes,
                                                      &max_wg, &large_grf);
                    if (st != CLFLASH_SUCCESS)
                        return st;
                    if (local_bytes <= budget && wg <= max_wg) {
                        clflash_fill_plan(&out->plan, p, clflash_tile_bytes, budget, block, bq, local_bytes,
                                          regtile_name, cfg.tc, wg);
                        if (cfg.block_cap)
                            clflash_tune_report(&out->plan, "portable.cpu_path=0,portable.regtile=%ux%ux%ux%u", cfg.rm,
                                                cfg.tc, bq, cfg.block_cap);
                        else
                            clflash_tune_report(&out->plan, "portable.cpu_path=0,portable.regtile=%ux%ux%u", cfg.rm,
                                                cfg.tc, bq);
                        if (p->tune.set & CLFLASH_TUNE_BIT(CLFLASH_TUNE_PORTABLE_LARGE_GRF)) /* what it asked for, got */
                            clflash_tune_report(&out->plan, ",portable.large_grf=%d", large_grf);
                        clflash_tune_report_portable(&out->plan, p, 0);
                        out->plan.kv_passes = (packed_rows + bq - 1) / bq;
                        out->kernel = kernel;
                        clflash_set_split(out, p, splits, pack);
                        return CLFLASH_SUCCESS;
                    }
                    clReleaseKernel(kernel);
                }
                if (forced)
                    break;
            }
        }
        if (forced)
            break;
    }
    if (forced)
        return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                            "block %u: the register-tiled kernel does not fit the %llu-byte local memory budget or "
                            "the device's work-group limits with any query block",
                            start, (unsigned long long)budget);
    return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "no block size fits the register-tiled kernel's limits");
}

/* clflash's own count of the flash kernel's __local arrays (portable: qt, kt, vt, pt, rowmax; CPU
 * path: kf, vf), used when a driver reports less (PoCL 5.0 reports 0 for static local arrays). */
static cl_ulong counted_local_bytes(const clflash_context *c, const clflash_problem *p, uint32_t block,
                                    uint32_t lanes)
{
    if (cpu_path(c, p, block, lanes))
        return 4ull * block * (p->head_dim + (p->head_dim + 7) / 8 * 8);
    const uint64_t rows = 2ull * block * clflash_lds_stride(p->head_dim, p->elem_size); /* qt, vt */
    const uint64_t tiles = (rows + (uint64_t)p->head_dim * (block | 1u)) * p->elem_size;  /* + kt */
    return tiles + 4ull * block * (block | 1u) + 4ull * block * lanes;
}

void clflash_lanes_shape_defines(const clflash_problem *p, uint32_t block, uint32_t lanes, char *buf, size_t size)
{
    snprintf(buf, size, "-D BLOCK=%u -D TPR=%u -D LDS_STRIDE=%u -D KT_STRIDE=%u -D P_STRIDE=%u", block, lanes,
             clflash_lds_stride(p->head_dim, p->elem_size), block | 1u, block | 1u);
}

/* Builds the kernel for (B, lanes), the CPU path's or the lane path's, and reads what it really
 * needs. */
static clflash_status build_variant(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t splits,
                                    uint32_t block, uint32_t lanes, cl_kernel *kernel, cl_ulong *local_bytes,
                                    size_t *max_wg)
{
    char defines[512], features[300];
    cl_program prog;
    cl_int err;
    clflash_status st;
    const int cpu = cpu_path(c, p, block, lanes);
    const char *const name = cpu ? CPU_KERNEL : LANES_KERNEL;
    clflash_forward_defines(p, with_lse, splits, 1, features, sizeof features);
    if (cpu) { /* one work-item per row, fp32 tiles: no lanes or strides to pass */
        snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D BLOCK=%u", features, p->head_dim, block);
    } else {
        char shape[120];
        clflash_lanes_shape_defines(p, block, lanes, shape, sizeof shape);
        snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u %s", features, p->head_dim, shape);
    }
    if ((st = clflash_get_program(c, cpu ? CLFLASH_SOURCE_FLASH_FORWARD_CPU : CLFLASH_SOURCE_FLASH_FORWARD_LANES,
                                  defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", name);
    if ((st = clflash_read_kernel_limits(c, *kernel, counted_local_bytes(c, p, block, lanes), local_bytes, max_wg)) !=
        CLFLASH_SUCCESS) {
        clReleaseKernel(*kernel);
        *kernel = NULL;
    }
    return st;
}

/* B by the tile rule for the local memory budget, capped by the device class's preference, the
 * sequence lengths and below_block (a B the device refused at enqueue); 0 if no tile fits. */
static uint32_t rule_block(const clflash_context *c, const clflash_problem *p, const clflash_tuning *tune,
                           uint32_t below_block)
{
    const uint32_t cap = tune->max_block < tune->max_work_group ? tune->max_block : tune->max_work_group;
    return clflash_block_round(
        clflash_block_cap(clflash_max_block(c->local_mem_budget, p->head_dim, p->elem_size), cap, p, below_block));
}

static clflash_status plan_kernel(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t below_block,
                                  clflash_flash_kernel *out)
{
    const uint64_t budget = c->local_mem_budget;
    const clflash_tuning tune = clflash_tuning_for_context(c, p);
    const int forced = p->block != 0;
    uint32_t block;

    memset(out, 0, sizeof *out);
    if (clflash_nv_mma_refusal(c, p) == NULL) {
        clflash_status st;
        /* The Hopper kernel, where the context's mode (CLFLASH_WGMMA) and its scope take the call and
         * the device's sm_90a path works; whatever fails on the way, the tensor-core kernel below
         * (nv_wgmma_forward_plan.c). */
        if (clflash_nv_wgmma_refusal(c, p) == NULL && clflash_sm90a_available(c, NULL)) {
            st = clflash_plan_nv_wgmma(c, p, with_lse, below_block, out);
            if (st == CLFLASH_SUCCESS)
                return st;
            clflash_clear_detail(); /* a failed build's log is kept */
            memset(out, 0, sizeof *out);
        }
        st = clflash_plan_nv_mma(c, p, with_lse, below_block, out);
        if (st != CLFLASH_ERROR_TILE_TOO_LARGE && st != CLFLASH_ERROR_BUILD_FAILED)
            return st;
        clflash_clear_detail(); /* the portable kernel is the fallback (a failed build's log is kept) */
        memset(out, 0, sizeof *out);
    }

    if (forced) {
        const clflash_status st = clflash_check_forced_block(
            c, p->block, clflash_tile_bytes(p->block, p->head_dim, p->elem_size), "tile", below_block);
        if (st != CLFLASH_SUCCESS)
            return st;
        block = p->block;
    } else {
        block = rule_block(c, p, &tune, below_block);
        if (block == 0)
            return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE,
                                "even a 1-row tile of head_dim %u does not fit the %llu-byte local memory budget",
                                p->head_dim, (unsigned long long)budget);
    }

    /* decoding on a CPU: the kernel that reads each K/V head once for all its query rows */
    if (c->threads_per_row == 0 && cpu_path(c, p, block, 1) && clflash_cpu_decode_applies(p))
        return clflash_plan_cpu_decode(c, p, with_lse, block, out);

    {
        regtile_cfg rcfg;
        if (!cpu_path(c, p, block, clflash_preferred_lanes(&tune, block)) && regtile_choice(c, p, &rcfg))
            return plan_regtile(c, p, with_lse, block, forced, rcfg, out, NULL);
    }

    uint32_t tenths_per_unit, min_keys;
    clflash_portable_split_rule(c, &tenths_per_unit, &min_keys);
    const uint32_t splits = clflash_split_count(
        c, p, (uint64_t)p->batch * p->heads_q * ((p->seq_q + block - 1) / block), tenths_per_unit, min_keys);
    for (uint32_t lanes = clflash_preferred_lanes(&tune, block);;) {
        cl_kernel kernel = NULL;
        cl_ulong local_bytes = 0;
        size_t max_wg = 0;
        clflash_status st = build_variant(c, p, with_lse, splits, block, lanes, &kernel, &local_bytes, &max_wg);
        if (st != CLFLASH_SUCCESS)
            return st;
        if (local_bytes <= budget && (size_t)block * lanes <= max_wg) {
            clflash_fill_plan(&out->plan, p, clflash_tile_bytes, budget, block, block, local_bytes, variant_name,
                              lanes, block * lanes);
            clflash_tune_report(&out->plan, cpu_path(c, p, block, lanes) ? "portable.cpu_path=1"
                                                                          : "portable.cpu_path=0,portable.regtile=0");
            clflash_tune_report_portable(&out->plan, p, 0);
            out->kernel = kernel;
            clflash_set_split(out, p, splits, 1);
            return CLFLASH_SUCCESS;
        }
        clReleaseKernel(kernel);
        if ((st = clflash_next_candidate("kernel", &tune, &block, &lanes, local_bytes, budget, max_wg, forced)) !=
            CLFLASH_SUCCESS)
            return st;
    }
}

int clflash_regtile_first_candidate(clflash_context *c, const clflash_problem *p, uint32_t first[4])
{
    const clflash_tuning tune = clflash_tuning_for_context(c, p);
    const uint32_t block = rule_block(c, p, &tune, 0);
    regtile_cfg cfg;
    if (block == 0 || p->block != 0 ||
        cpu_path(c, p, block, clflash_preferred_lanes(&tune, block)) ||
        !regtile_choice(c, p, &cfg))
        return 0;
    return plan_regtile(c, p, 0, block, 0, cfg, NULL, first) == CLFLASH_SUCCESS;
}

int clflash_lanes_first_candidate(const clflash_context *c, const clflash_problem *p, uint32_t first[2])
{
    const clflash_tuning tune = clflash_tuning_for_context(c, p);
    const uint32_t block = rule_block(c, p, &tune, 0);
    if (block == 0 || p->block != 0)
        return 0;
    const uint32_t lanes =
        clflash_block_lanes(block, tune.threads_per_row, tune.max_work_group > block ? tune.max_work_group : block);
    if (cpu_path(c, p, block, lanes))
        return 0;
    first[0] = block;
    first[1] = lanes;
    return 1;
}

clflash_status clflash_plan_flash(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t below_block,
                                  clflash_flash_kernel *out)
{
    clflash_status st;
    if (below_block == 0) {
        st = clflash_cached_plan(c, p, with_lse, plan_kernel, out);
    } else {
        st = plan_kernel(c, p, with_lse, below_block, out);
        out->entry = NULL;
    }
    if (st == CLFLASH_SUCCESS && out->plan.workspace_bytes > c->info.max_alloc_size) {
        clflash_flash_kernel_done(c, out);
        return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                            "%u splits need %llu bytes of partial results; the device's largest allocation is %llu",
                            out->plan.splits, (unsigned long long)out->plan.workspace_bytes,
                            (unsigned long long)c->info.max_alloc_size);
    }
    return st;
}

clflash_status clflash_plan_attention(clflash_context *c, const clflash_attention_desc *d, clflash_plan *out)
{
    clflash_problem p;
    clflash_flash_kernel fk;
    clflash_status st;
    clflash_clear_detail();
    if ((st = clflash_resolve_for_context(c, d, &p)) != CLFLASH_SUCCESS ||
        (st = clflash_check_plan_out(out)) != CLFLASH_SUCCESS)
        return st;
    if ((st = clflash_plan_flash(c, &p, 0, 0, &fk)) != CLFLASH_SUCCESS)
        return st;
    clflash_flash_kernel_done(c, &fk);
    clflash_write_plan(out, &fk.plan);
    return CLFLASH_SUCCESS;
}
