/*
 * nv_wgmma_forward_plan.c - decides whether a forward call runs cl/nv_wgmma_forward.cl (Hopper's
 * wgmma, through the sm_90a PTX binary path of sm90a.c), and plans and builds it.
 *
 * The kernel is assembled for sm_90a in CI and right on an H200 and an H100, where it runs head_dim
 * 128 above FlashAttention-2's rate and at 1.15-1.25x nv_mma_forward's (docs/performance/h200.md). It
 * is chosen when all of these hold: the call is one the tensor-core forward takes
 * (clflash_nv_mma_refusal) and in this kernel's scope (shape_refusal; a bias only in the producer
 * loop with turns and without ALiBi, clflash_nv_wgmma_refusal); the context's mode
 * (CLFLASH_WGMMA when it was created: clflash.h) allows it, which by default means a call of the
 * kinds where it was measured faster than nv_mma_forward (auto_refusal); and the context's device
 * runs the sm_90a path right (clflash_sm90a_available: an NVIDIA device of compute capability 9.0
 * whose driver built and ran the probe kernel). forward_plan.c asks here first and plans
 * nv_mma_forward whenever this file says no or any step fails (a build through the sm_90a path, a
 * kernel whose local memory or work-group does not fit), so the plan always names the kernel that
 * runs. With CLFLASH_WGMMA=0, or for calls outside its scope, nothing here runs, not even the probe.
 *
 * The shape: warpgroups of 128 work-items, each owning 64 query rows; three per work-group beside
 * the producer (192 rows; four at head_dim 64 without one), fewer where seq_q needs fewer
 * (nv_wgmma.warpgroups sets it). B (keys per tile) 64 at head_dim 64 and 32 at 128 (the tuning key
 * nv_wgmma.block caps it; 16 at head_dims above 128, padded to 256, with two warpgroups at most and
 * through TMA only), so that the K and V tiles fit the 48 KiB of an H200 beside the bytes the
 * driver adds (4 there): the loops fed by a producer warpgroup (below; the pipelined one,
 * nv_wgmma.pipeline=1, always is) keep a ring of 3 K tiles and one of 2 V tiles, 5 B head_dim 2
 * bytes = 40 KiB at (64, 64) and (128, 32), 80 KiB at (128, 64), which is why head_dim 128 stays at
 * 32; the loop that waits for every product without a producer two stages of a K and a V tile,
 * 32 KiB (nv_wgmma.stages asks for up to 6; each B then takes the most stages whose built kernel
 * fits, down to 2). 32 where 64 does not fit the
 * budget or the device refused it at enqueue (below_block). Q and O are staged through the same
 * array, padded rows of up to 128 of the work-group's rows at a time (18 KiB at head_dim 64, 34 KiB
 * at 128), which the tiles overwrite.
 *
 * The producer (nv_wgmma.producer, 1 by default, and with nv_wgmma.pipeline=1) adds
 * one more warpgroup that copies the tiles, beside at most three consumers (two pipelined), and two
 * 8-byte mbarriers a ring slot. Its registers: the work-group gets 65536 / work-items a work-item at
 * launch (rounded down to 8, at most 248: what ptxas allocates for .reqntid with .minnctapersm 1), the
 * producer keeps WG_PRODUCER_REGS, and the consumers share the rest (kernel_defines). Its tiles
 * come through the tensor memory accelerator (nv_wgmma.tma, 1 by default; WG_TMA) where (head_dim,
 * B) is (128, 32), (64, 64) or (256, 16): then each work-group builds its K and V tensor maps in
 * 256 bytes of a scratch buffer from the context's pool (plan.workspace_bytes; forward.c passes it). With TMA and
 * nv_wgmma.persistent=1 the kernel is the persistent one (nv_wgmma_forward_persistent): at most one
 * work-group per compute unit (nv_wgmma.work_groups caps them), each taking block after block and
 * building two pairs of maps, 512 bytes.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define KERNEL_NAME "nv_wgmma_forward"
#define PERSISTENT_KERNEL_NAME "nv_wgmma_forward_persistent" /* WG_PERSIST */
static const char variant_name[] = "nv_wgmma_forward";
#define WGMMA_KV_TILES 5u /* the producer's rings: 3 K slots and 2 V slots */
/* The producer warpgroup's registers a work-item (nv_wgmma.producer=1): with 24 ptxas spilled 16
 * bytes of its loop (CUDA 13.0), with 32 and 40 nothing. 32 leaves three consumer warpgroups 160
 * each instead of 152: on an H100 (2026-12-06) 1.05x faster at head_dim 128, causal or not. */
#define WG_PRODUCER_REGS 32u

/* The kernel's HEAD_DIM for p: head_dim padded to 64, 128 or 256 (cl/nv_wgmma_forward.cl's D_REAL is
 * head_dim itself: the padding columns are zeros in the tiles and in Q's registers). */
static uint32_t padded_dim(const clflash_problem *p)
{
    return p->head_dim <= 64 ? 64u : p->head_dim <= 128 ? 128u : 256u;
}

/* Why the kernel's scope excludes p (a static string), or NULL: what cl/nv_wgmma_forward.cl takes. */
static const char *shape_refusal(const clflash_problem *p)
{
    if (p->dtype != CLFLASH_F16 && p->dtype != CLFLASH_BF16)
        return "the dtype is not F16 or BF16";
    if (p->out_dtype != p->dtype)
        return "O's type differs from the input type";
    if (p->head_dim > 256 || p->head_dim % 8 != 0)
        return "head_dim is above 256 or not a multiple of 8";
    if (!clflash_nv_rows_aligned(p))
        return "a row of Q, K, V or O does not start on 16 bytes";
    if (p->block_table != NULL)
        return "a paged KV cache";
    if (p->varlen)
        return "a variable-length batch";
    if (p->num_splits > 1)
        return "split-KV was asked for";
    if (p->block != 0)
        return "a forced block";
    return NULL;
}

/* The query rows a head needs before the default mode takes this kernel: nv_mma_forward's block. */
#define WGMMA_AUTO_MIN_ROWS 128u

/* Why the default mode (CLFLASH_WGMMA unset) leaves p, in this kernel's scope, to nv_mma_forward: the
 * kinds of call where nv_mma_forward was measured as fast or faster (H100, 2026-12-06, n = 4096,
 * docs/performance/h200.md), or NULL. (Head_dim 64 runs here since its producer loop streams the
 * tiles through TMA: 358.5 TFLOP/s against nv_mma_forward's 291.5, causal 315.3 against 263.8.)
 * - A sliding window narrower than WGMMA_AUTO_MIN_WINDOW keys (left + right; left alone with the
 *   causal mask): this kernel's 192-row blocks compute more pairs per visible pair than
 *   nv_mma_forward's 64-row ones (1.19 against 1.06 for a causal window of 1024), the more the
 *   narrower the window. At 1024 the faster products win: 0.375 against 0.472 ms (n = 4096, batch
 *   4, 16 heads, head_dim 128); narrower windows were not measured and stay on nv_mma_forward.
 * - Fewer than 128 query rows a head, or a call nv_mma_forward splits or packs (clflash_nv_mma_
 *   splits_or_packs): decoding and short prompts, where reading K and V bounds the time and
 *   nv_mma_forward spreads the keys over the device; this kernel never splits them.
 * - A head_dim below WGMMA_AUTO_MIN_HEAD_DIM: padded to 64, it computes 1.6 times or more the
 *   columns it needs, where nv_mma_forward pads to a multiple of 16. The padded head_dims above it
 *   run here: on an H100 (2026-12-07, n = 4096, batch 4, 16 heads, f16) head_dim 96 in 0.983 ms
 *   against nv_mma_forward's 1.539, 80 in 0.974 against 1.234, 40 in 0.661 against 0.909.
 * - A head_dim from 136 to WGMMA_AUTO_MIN_WIDE_HEAD_DIM: padded to 256, it computes 1.3 to 1.9 times
 *   the columns nv_mma_forward computes (a multiple of 32); not measured. From 192 on it runs here:
 *   on an H100 (2026-12-07, n = 4096, batch 4, 8 heads, f16) head_dim 256 in 1.282 ms against
 *   nv_mma_forward's 2.199 (0.725 against 1.138 causal), 192 in 1.220 against 2.076.
 * A bias (without ALiBi: not in the scope) runs here too: 1.954 ms against nv_mma_forward's 2.248 for
 * a [n][n] bias shared by batch and heads, 2.176 against 2.468 for [b][h][n][n] (head_dim 128, the
 * same run). */
#define WGMMA_AUTO_MIN_WINDOW 1024u
#define WGMMA_AUTO_MIN_HEAD_DIM 40u
#define WGMMA_AUTO_MIN_WIDE_HEAD_DIM 192u

int clflash_nv_wgmma_wide_window(const clflash_problem *p)
{
    const uint64_t width = (uint64_t)p->window_left + ((p->flags & CLFLASH_CAUSAL) ? 0u : p->window_right);
    return (p->flags & CLFLASH_WINDOW) && width >= WGMMA_AUTO_MIN_WINDOW;
}

static const char *auto_refusal(const clflash_context *c, const clflash_problem *p)
{
    if (p->head_dim > 128 && p->head_dim < WGMMA_AUTO_MIN_WIDE_HEAD_DIM)
        return "a head_dim from 136 to 184 (padded to 256 here; nv_mma_forward pads to a multiple of 32)";
    if (p->head_dim < WGMMA_AUTO_MIN_HEAD_DIM)
        return "a head_dim below 40 (padded to 64 here; nv_mma_forward pads to a multiple of 16)";
    if ((p->flags & CLFLASH_WINDOW) && !clflash_nv_wgmma_wide_window(p))
        return "a sliding window narrower than 1024 keys (faster on nv_mma_forward, whose blocks are smaller)";
    if (p->seq_q < WGMMA_AUTO_MIN_ROWS || clflash_nv_mma_splits_or_packs(c, p))
        return "too few query rows to fill the device without split-KV (faster on nv_mma_forward)";
    return NULL;
}

static int pipelined(const clflash_context *c, const clflash_problem *p);
static int producer(const clflash_context *c, const clflash_problem *p);
static int tma(const clflash_context *c, const clflash_problem *p, uint32_t block);

/* B at head_dim 256: the rings' five tiles of 16 keys are 40 KiB. */
#define WIDE_DIM_BLOCK 16u

/* Why the kernel cannot run p's head_dim above 128 (padded to 256) in the loop the tuning asks for, or
 * NULL: it has them in the producer loop with turns and its copies through TMA, one block a
 * work-group, only (cl/nv_wgmma_forward.cl's #error). */
static const char *wide_loop_refusal(const clflash_context *c, const clflash_problem *p)
{
    if (padded_dim(p) != 256)
        return NULL;
    if (!producer(c, p) || pipelined(c, p) || !tma(c, p, WIDE_DIM_BLOCK) ||
        clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_PERSISTENT, NULL))
        return "a head_dim above 128 outside the producer loop with turns and its copies through TMA "
               "(nv_wgmma.producer=0, pipeline=1, warpgroups=4, tma=0 or persistent=1, or K or V rows a "
               "tensor map cannot describe)";
    return NULL;
}

const char *clflash_nv_wgmma_refusal(const clflash_context *c, const clflash_problem *p)
{
    if (c->wgmma_mode == CLFLASH_WGMMA_OFF)
        return "turned off (CLFLASH_WGMMA=0 when the context was created)";
    const char *why = clflash_nv_mma_refusal(c, p);
    if (why != NULL)
        return why;
    if (c->info.nv_cc_major != 9 || c->info.nv_cc_minor != 0)
        return "not an NVIDIA device of compute capability 9.0";
    if ((why = shape_refusal(p)) != NULL)
        return why;
    const int other_loop = !producer(c, p) || pipelined(c, p); /* not the producer loop with turns */
    if (p->bias != NULL && other_loop)
        return "a bias outside the producer loop with turns (nv_wgmma.producer=0 or nv_wgmma.pipeline=1)";
    if (p->head_dim != padded_dim(p) && other_loop)
        return "a padded head_dim outside the producer loop with turns (nv_wgmma.producer=0 or "
               "nv_wgmma.pipeline=1: not yet run on a GPU with one)";
    if ((why = wide_loop_refusal(c, p)) != NULL)
        return why;
    if (padded_dim(p) == 256 && (p->softcap != 0.0f || p->bias != NULL))
        return "softcap or a bias at a head_dim above 128 (their registers spill beside O's 128 a work-item)";
    if (p->bias != NULL && p->alibi_slopes != NULL)
        return "a bias with ALiBi (their registers spill beside the causal mask at head_dim 128)";
    return c->wgmma_mode == CLFLASH_WGMMA_AUTO ? auto_refusal(c, p) : NULL;
}

/* 1 for the pipelined loop (WG_PIPE 1), 0 for the one that waits for every product. */
static int pipelined(const clflash_context *c, const clflash_problem *p)
{
    return clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_PIPELINE, NULL) != 0;
}

/* nv_wgmma.producer's default: 1. On an H100 (2026-12-06, n = 4096, batch 4, 16 heads, f16;
 * docs/performance/h200.md) the producer loop with its tiles through TMA ran head_dim 128 at
 * 480-483 TFLOP/s against 383-385 with cp.async and 277-278 for the waiting loop, and head_dim 64
 * at 358.5 against 326.0 with cp.async and 300.1 for the waiting loop of four warpgroups (causal
 * 315.3, 286.0, 267.6). */
int32_t clflash_nv_wgmma_default_producer(const clflash_context *c, const clflash_problem *p,
                                          const clflash_tune_facts *f)
{
    (void)c;
    (void)p;
    (void)f;
    return 1;
}

/* 1 where a producer warpgroup streams the tiles (WG_PRODUCER): nv_wgmma.producer, or the pipelined
 * loop, which it always feeds. Not beside four consumer warpgroups (nv_wgmma.warpgroups=4) of the
 * waiting loop: they would get 112 registers a work-item, and ptxas (CUDA 13.0) serialises the
 * products of its consumers' turns there (C7512). */
static int producer(const clflash_context *c, const clflash_problem *p)
{
    if (pipelined(c, p))
        return 1;
    return clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_PRODUCER, NULL) != 0 &&
           clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_WARPGROUPS, NULL) != 4;
}

/* Warpgroups per work-group: nv_wgmma.warpgroups where set, else as many as the register file
 * holds at one work-group per SM (three beside the producer, 160 registers a work-item; four at
 * head_dim 64 without a producer, 118-124; two for the pipelined loop, 232 beside its producer;
 * two above head_dim 128 unless set to 1, since Q's and O's registers leave no room for three),
 * each K/V tile then serving 128 to 256 query rows, but no more than seq_q's rows need. */
static uint32_t warpgroups_for(const clflash_context *c, const clflash_problem *p)
{
    const int32_t set = clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_WARPGROUPS, NULL);
    if (padded_dim(p) == 256) /* O's 128 registers a work-item: two consumers at most */
        return set == 1 || p->seq_q <= 64 ? 1u : 2u;
    if (set >= 1 && set <= 4)
        return (uint32_t)set;
    /* the pipelined loop holds 168-232 registers a work-item: two warpgroups at most; beside a
     * producer, four consumer warpgroups of the waiting loop get 104 (640 work-items at launch hold
     * 96 each), where head_dim 64 spills */
    const uint32_t most = pipelined(c, p) ? 2u : padded_dim(p) == 64 && !producer(c, p) ? 4u : 3u;
    const uint64_t needed = ((uint64_t)p->seq_q + 63) / 64;
    return needed < most ? (uint32_t)needed : most;
}

/* 1 where K's and V's rows are ones a tensor map can describe: apart by at least one row and by
 * less than 2^40 bytes (the map's stride field). */
int clflash_nv_wgmma_tma_strides(const clflash_problem *p)
{
    const uint64_t most = (1ull << 40) / 2;
    return p->k.seq_stride >= p->head_dim && p->v.seq_stride >= p->head_dim && p->k.seq_stride < most &&
           p->v.seq_stride < most;
}

/* 1 where the producer's tiles come through the tensor memory accelerator (WG_TMA): nv_wgmma.tma,
 * for the producer loop at (head_dim, B) (128, 32), (64, 64) or (256, 16), the ones the kernel
 * builds it for, and K and V rows that a tensor map can describe (clflash_nv_wgmma_tma_strides). */
static int tma(const clflash_context *c, const clflash_problem *p, uint32_t block)
{
    return producer(c, p) && !pipelined(c, p) && padded_dim(p) * block == 4096 && clflash_nv_wgmma_tma_strides(p) &&
           clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_TMA, NULL) != 0;
}

/* The call's blocks of block_q query rows: one per work-group, or what the persistent kernel's
 * work-groups share. */
static uint64_t query_blocks(const clflash_problem *p, uint64_t block_q)
{
    return ((uint64_t)p->seq_q + block_q - 1) / block_q * p->heads_q * p->batch;
}

/* 1 where the TMA loop runs as nv_wgmma_forward_persistent (WG_PERSIST): one work-group per SM
 * taking block after block (nv_wgmma.persistent=1; 0 by default), for calls of fewer than 2^31
 * blocks (the kernel counts them in 32 bits). */
static int persistent(const clflash_context *c, const clflash_problem *p, int with_tma)
{
    return with_tma && query_blocks(p, 64ull * warpgroups_for(c, p)) < (1ull << 31) &&
           clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_PERSISTENT, NULL) != 0;
}

/* The persistent kernel's work-groups for a call of `blocks` query blocks: nv_wgmma.work_groups, or
 * one per compute unit, and no more than there are blocks. */
static uint32_t persistent_work_groups(const clflash_context *c, const clflash_problem *p, uint64_t blocks)
{
    const int32_t set = clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_WORK_GROUPS, NULL);
    const uint64_t units = set > 0 ? (uint64_t)set : c->info.compute_units > 0 ? c->info.compute_units : 1;
    return (uint32_t)(blocks < units ? blocks : units);
}

/* The kernel's WG_Q_CHUNK (cl/nv_wgmma_forward.cl's wg_block_at, nv_mma_common.cl's
 * chunked_block_order): nv_wgmma.q_chunk where set, else WGMMA_CAUSAL_Q_CHUNK with the causal mask
 * at head_dims up to 128 (the last four query blocks of every head and batch entry, then the four
 * before them), one at 256 (every head's last block first), and all of a head's blocks without the
 * mask (one head after another). Measured on an H100 (2026-12-07, batch 4, 16 heads, n = 4096, f16,
 * `clflash-bench --features --cases causal --tune nv_wgmma.q_chunk=C`, alternated): causal at
 * head_dim 128 0.570-0.581 ms with chunks of 4 or 8 against 0.588-0.609 with one (2: 0.587-0.601);
 * 64 (32 heads) 0.729-0.733 against 0.760-0.772; 16 batch entries of n = 1024 0.243 against 0.275;
 * bf16 0.559-0.567 against 0.568-0.569; batch 1 at n = 16384 1.89-1.95 either way; 256 (8 heads)
 * 0.681 against 0.664-0.667. Causal window, softcap and ALiBi moved within the runs' noise, and
 * without the mask chunks of 1 to 11 were as fast or slower (a [n][n] bias shared by the heads
 * 1.50-1.60 ms with chunks of 8 against 1.54-1.58 with all 22). */
#define WGMMA_CAUSAL_Q_CHUNK 4u
static uint32_t q_chunk(const clflash_context *c, const clflash_problem *p)
{
    const int32_t set = clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_Q_CHUNK, NULL);
    if (set > 0)
        return (uint32_t)set;
    if (!(p->flags & CLFLASH_CAUSAL))
        return 0u;
    return padded_dim(p) <= 128 ? WGMMA_CAUSAL_Q_CHUNK : 1u;
}

/* The waiting loop's K/V tile pairs (WG_PIPE 0 without a producer): nv_wgmma.stages, 2 to 6 (the
 * tuning table's range); 2 for the loops with rings of their own, which do not read it. */
static uint32_t wanted_stages(const clflash_context *c, const clflash_problem *p)
{
    if (producer(c, p))
        return 2u;
    return (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_STAGES, NULL);
}

/* Bytes of the kernel's local array: the K and V tiles of B rows (unpadded: the descriptors'
 * layout), WGMMA_KV_TILES of them in rings (cl/nv_wgmma_forward.cl's K_SLOTS + V_SLOTS: the loops
 * with a producer), else `stages` pairs, or the Q rows staged at a time (the
 * work-group's, at most 128; 64 at head_dim 256) padded by 16 bytes, whichever is larger; and the producer loop's
 * mbarriers, two of 8 bytes a ring slot (and two more in the persistent kernel, which stages no
 * Q: persist). */
static cl_ulong counted_local_bytes(const clflash_problem *p, uint32_t block, uint32_t warpgroups,
                                    uint32_t stages, int prod, int persist)
{
    const uint64_t n_tiles = prod ? WGMMA_KV_TILES : 2ull * stages;
    const uint64_t tiles = n_tiles * block * padded_dim(p) * p->elem_size;
    const uint64_t q_rows = (padded_dim(p) == 256 ? 64ull : warpgroups > 2 ? 128ull : 64ull * warpgroups) *
                            (padded_dim(p) + 8) * p->elem_size;
    if (persist)
        return tiles + 16ull * (WGMMA_KV_TILES + 1);
    return (tiles > q_rows ? tiles : q_rows) + (prod ? 16ull * WGMMA_KV_TILES : 0);
}

/* The first B to try: 64 at head_dim 64, 32 at 128, at most nv_wgmma.block (rounded down to 32
 * or 64), 16 at 256; then 32 (next_block); 0 when none is left below below_block (0: no such limit). */
static uint32_t first_block(const clflash_context *c, const clflash_problem *p, uint32_t below_block)
{
    if (padded_dim(p) == 256)
        return below_block == 0 || WIDE_DIM_BLOCK < below_block ? WIDE_DIM_BLOCK : 0u;
    const uint32_t cap = clflash_tune_value(c, p, CLFLASH_TUNE_NV_WGMMA_BLOCK, NULL) >= 64 ? 64u : 32u;
    const uint32_t b = padded_dim(p) == 64 && cap == 64 ? 64u : 32u;
    if (below_block == 0 || b < below_block)
        return b;
    return 32u < below_block ? 32u : 0u;
}

static uint32_t next_block(uint32_t block)
{
    return block == 64 ? 32u : 0u;
}

static void kernel_defines(const clflash_context *c, const clflash_problem *p, int with_lse, int pipe, uint32_t block,
                           uint32_t warpgroups, uint32_t stages, int prod, int with_tma, int persist, char *buf,
                           size_t size)
{
    char features[300];
    clflash_forward_defines(p, with_lse, 1, 1, features, sizeof features);
    snprintf(buf, size,
             "%s -D HEAD_DIM=%u -D D_REAL=%u -D NV_ALIGNED=1 -D BLOCK=%u -D WARPS=%u -D WARPGROUPS=%u -D STAGES=%u "
             "-D WG_PIPE=%d -D WG_PRODUCER=%d -D BIAS_PAIRS=%d -D WG_Q_CHUNK=%u%s%s",
             features, padded_dim(p), p->head_dim, block, 4 * (warpgroups + (prod ? 1 : 0)), warpgroups, stages, pipe,
             prod, clflash_bias_pairs(p), q_chunk(c, p), with_tma ? " -D WG_TMA=1" : "",
             persist ? " -D WG_PERSIST=1" : "");
    if (prod) { /* the registers a work-item gets at launch (a multiple of 8), and what the consumers
                 * take once the producer has given back all but WG_PRODUCER_REGS: setmaxnreg.inc
                 * waits until the work-group's own registers (base a work-item at launch, not the
                 * SM's 65536) can hold it, so asking for more than they hold never returns */
        const uint32_t threads = 128 * (warpgroups + 1);
        const uint32_t base = 65536 / threads / 8 * 8 > 255 ? 248 : 65536 / threads / 8 * 8;
        uint32_t consumer = (base * threads - 128 * WG_PRODUCER_REGS) / (128 * warpgroups) / 8 * 8;
        consumer = consumer > 248 ? 248 : consumer;
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, " -D WG_PRODUCER_REGS=%u -D WG_CONSUMER_REGS=%u", WG_PRODUCER_REGS,
                 consumer);
    }
}

int clflash_nv_wgmma_first_defines(const clflash_context *c, const clflash_problem *p, int with_lse, char *buf,
                                   size_t size)
{
    if (shape_refusal(p) != NULL || wide_loop_refusal(c, p) != NULL)
        return 0;
    const uint32_t wgs = warpgroups_for(c, p);
    const int pipe = pipelined(c, p), prod = producer(c, p);
    for (uint32_t block = first_block(c, p, 0); block != 0; block = next_block(block)) {
        const int with_tma = tma(c, p, block), persist = persistent(c, p, with_tma);
        for (uint32_t stages = wanted_stages(c, p); stages >= 2; stages--)
            if (counted_local_bytes(p, block, wgs, stages, prod, persist) <= c->local_mem_budget) {
                kernel_defines(c, p, with_lse, pipe, block, wgs, stages, prod, with_tma, persist, buf, size);
                return 1;
            }
    }
    return 0;
}

/* Builds the kernel of one (B, stages) and plans it into out if the built kernel fits the device:
 * CLFLASH_SUCCESS with *fits 1, or with *fits 0 when its local memory or work-group does not fit
 * (out untouched); another status when a step fails. */
static clflash_status try_build(clflash_context *c, const clflash_problem *p, int with_lse, int pipe, uint32_t block,
                                uint32_t wgs, uint32_t stages, clflash_flash_kernel *out, int *fits)
{
    const uint64_t budget = c->local_mem_budget;
    const int prod = producer(c, p);
    const uint32_t threads = 128 * (wgs + (prod ? 1 : 0)), block_q = 64 * wgs;
    const int with_tma = tma(c, p, block), persist = persistent(c, p, with_tma);
    const cl_ulong counted = counted_local_bytes(p, block, wgs, stages, prod, persist);
    *fits = 0;
    if (counted > budget)
        return CLFLASH_SUCCESS; /* cannot fit: not built */
    char defines[640];
    cl_program prog;
    cl_int err;
    kernel_defines(c, p, with_lse, pipe, block, wgs, stages, prod, with_tma, persist, defines, sizeof defines);
    clflash_status st = clflash_get_program_sm90a(c, CLFLASH_SOURCE_NV_WGMMA_FORWARD, defines, &prog);
    if (st != CLFLASH_SUCCESS)
        return st;
    const char *const name = persist ? PERSISTENT_KERNEL_NAME : KERNEL_NAME;
    cl_kernel kernel = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", name);
    cl_ulong local_bytes = 0;
    size_t max_wg = 0;
    if ((st = clflash_read_kernel_limits(c, kernel, counted, &local_bytes, &max_wg)) != CLFLASH_SUCCESS) {
        clReleaseKernel(kernel);
        return st;
    }
    /* NVIDIA's driver reports 256 work-items for every kernel of a program built from PTX, whatever
     * its registers; the kernel's reqd_work_group_size (PTX .reqntid) makes ptxas fit its registers
     * to THREADS, so the device's own limit is the one that holds (3 and 4 warpgroups ran on an
     * H100 where the kernel reported 256). */
    (void)max_wg;
    if (local_bytes > budget || threads > c->info.max_work_group_size) {
        clReleaseKernel(kernel);
        return CLFLASH_SUCCESS;
    }
    /* threads_per_row 2: a warpgroup's 128 work-items share its 64 rows */
    clflash_fill_plan(&out->plan, p, clflash_tile_bytes, budget, block, block_q, local_bytes, variant_name, 2, threads);
    out->kernel = kernel;
    /* WG_TMA: two 128-byte tensor maps a work-group, built by the kernel in the context's scratch;
     * persistent: two pairs a work-group, and a work-group per compute unit at most */
    const uint64_t blocks = query_blocks(p, block_q);
    out->persistent_groups = persist ? persistent_work_groups(c, p, blocks) : 0;
    out->tma_map_groups = persist ? 2ull * out->persistent_groups : with_tma ? blocks : 0;
    clflash_set_split(out, p, 1, 1);
    clflash_tune_report(&out->plan,
                        "nv_wgmma.pipeline=%d,nv_wgmma.block=%u,nv_wgmma.warpgroups=%u,nv_wgmma.stages=%u,"
                        "nv_wgmma.producer=%d,nv_wgmma.tma=%d,nv_wgmma.persistent=%d,nv_wgmma.q_chunk=%u",
                        pipe, block, wgs, stages, prod, with_tma, persist, q_chunk(c, p));
    if (persist)
        clflash_tune_report(&out->plan, ",nv_wgmma.work_groups=%u", out->persistent_groups);
    *fits = 1;
    return CLFLASH_SUCCESS;
}

clflash_status clflash_plan_nv_wgmma(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t below_block,
                                     clflash_flash_kernel *out)
{
    const uint32_t wgs = warpgroups_for(c, p);
    const int pipe = pipelined(c, p);
    /* the largest B first, and for each B the most stages (the loops with rings have one count) */
    for (uint32_t block = first_block(c, p, below_block); block != 0; block = next_block(block))
        for (uint32_t stages = wanted_stages(c, p); stages >= 2; stages--) {
            int fits = 0;
            const clflash_status st = try_build(c, p, with_lse, pipe, block, wgs, stages, out, &fits);
            if (st != CLFLASH_SUCCESS || fits)
                return st;
        }
    return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "no block fits the wgmma kernel's limits");
}
