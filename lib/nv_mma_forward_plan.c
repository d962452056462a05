/*
 * nv_mma_forward_plan.c - decides whether a forward call can run on NVIDIA's tensor cores
 * (cl/nv_mma_forward.cl), and plans and builds that kernel.
 *
 * Why separate from forward_plan.c: the tensor-core kernel has its own eligibility rules (device,
 * dtype, head_dim up to 256) and its own shape constraints (B a multiple of 16, one warp per 16
 * query rows, head_dim padded to a multiple of 16, rows copied element by element where they are
 * not 16-byte aligned), while the tile rule is the same. forward_plan.c asks
 * here first and falls back to the portable kernel whenever this file says no.
 *
 * With few queries (decoding) it packs the query heads of a GQA group into one work-group's rows,
 * so each K/V tile is read once for all of them, and splits the keys into parts (split-KV) when the
 * work-groups would not fill the device; the kernel's last part of each block then merges them
 * (fused_merge_fits), or cl/merge_states.cl does where they do not fit.
 *
 * B obeys the tile rule, (3*B*d + B*B) * s <= budget, exactly like the portable kernel's, and
 * the built kernel's real local bytes must fit the budget too. The kernel keeps Q and the score
 * block in registers and double-buffers K and V in local memory (4 * B * (d + 8) * s bytes; a
 * decoding work-group of one warp pipelines more stages of smaller tiles: stages_for), so
 * its real bytes differ from the rule's count; where they do not fit, B steps down by 16 (at
 * d = 128 in fp16 the rule allows 48 and the kernel runs 32 against 48 KiB). Its query block
 * (block_q) is separate from B: up to 128 rows, held in registers.
 */
#include "internal.h"

#include <stdio.h>

#define KERNEL_NAME "nv_mma_forward"
static const char variant_name[] = "nv_mma_forward";

/* Largest B the kernel takes: S lives in registers (B / 2 floats per lane). */
#define NV_MAX_BLOCK 64u
#define NV_MAX_HEAD_DIM 256u

const char *clflash_nv_mma_refusal(const clflash_context *c, const clflash_problem *p)
{
    if (c->portable_only)
        return "the portable kernel was asked for";
    if (c->info.device_class != CLFLASH_CLASS_NVIDIA_GPU || c->info.nv_cc_major < 8)
        return "not an NVIDIA device of compute capability 8.0 or later";
    if (p->dtype != CLFLASH_F16 && p->dtype != CLFLASH_BF16)
        return "the dtype is not F16 or BF16";
    if (p->out_dtype != p->dtype)
        return "O's type differs from the input type";
    if (p->head_dim > NV_MAX_HEAD_DIM)
        return "head_dim is above 256";
    if (p->block != 0 && (p->block % 16 != 0 || p->block > NV_MAX_BLOCK))
        return "the forced block is not a multiple of 16 up to 64";
    if (p->block_table != NULL && !clflash_nv_rows_aligned(p))
        return "a paged KV cache whose rows are not all 16-byte aligned";
    return NULL;
}

/* The tensor-core kernels' HEAD_DIM: head_dim rounded up to a multiple of 16 (the mma's k step);
 * the padding columns are zeros in local memory. */
uint32_t clflash_nv_padded_dim(const clflash_problem *p)
{
    return (p->head_dim + 15) / 16 * 16;
}

/* 1 if cp.async can copy every row of Q, K, V and O in 16-byte pieces (the kernel's NV_ALIGNED):
 * head_dim and every offset and stride multiples of 8 elements; else rows go element by element. */
int clflash_nv_rows_aligned(const clflash_problem *p)
{
    return p->head_dim % 8 == 0 && clflash_aligned8(&p->q) && clflash_aligned8(&p->k) && clflash_aligned8(&p->v) &&
           clflash_aligned8(&p->o);
}

int clflash_bias_pairs(const clflash_problem *p)
{
    const clflash_strides *b = &p->bias_strides;
    return p->bias != NULL && (b->offset | b->batch_stride | b->head_stride | b->seq_stride) % 2 == 0;
}

/* The kernel's BIAS_STAGED (nv_forward.bias_staged, 1 by default; 0 reads the bias into registers
 * with one slice per warp): a bias whose offset and strides are multiples of 4 floats (so that its
 * rows' 16-byte pieces can be copied by cp.async) is staged in local memory beside the K/V tiles
 * when the block has two slices per warp, at head dims up to 128. Measured on the H200 and H100
 * (n = 4096, d = 128, f16, batch 4, 16 heads, 2026-12-05; docs/performance/h200.md): with the bias
 * in registers (one slice per warp) the call moved 12 bytes per (row, key) from L2 (K and V for 64
 * rows, and the bias) at about 4.8 TB/s, L2's limit, and took 2.6 ms against 1.7 without a bias
 * (the same loop with a constant in place of the bias loads: 1.9, the one-slice kernel's own
 * time). Staged, two slices share each K/V byte: 8 bytes per (row, key).
 * A bias with a row stride of 0 (one row of the keys for every query, a key-padding bias) stays in
 * registers: staged, every row of every block copied the same bytes, and on an H100 (2026-12-07,
 * the shape above) the call took 5.60 ms against 2.16 in registers (2.29 against 2.51 for a
 * [n][n] bias, staged or not). */
static int bias_staged(const clflash_problem *p, uint32_t m_tiles)
{
    const clflash_strides *b = &p->bias_strides;
    return p->bias != NULL && clflash_tune_value(NULL, p, CLFLASH_TUNE_NV_FORWARD_BIAS_STAGED, NULL) == 1 &&
           (b->offset | b->batch_stride | b->head_stride | b->seq_stride) % 4 == 0 && b->seq_stride != 0 &&
           m_tiles >= 2 && clflash_nv_padded_dim(p) <= 128;
}

/* Query heads packed into one work-group's rows: all heads of a GQA group when their rows for the
 * whole of seq_q fit one work-group (128 rows), else none. */
#define NV_PACK_ROWS 128u
static uint32_t pack_for(const clflash_problem *p)
{
    return p->group > 1 && (uint64_t)p->seq_q * p->group <= NV_PACK_ROWS ? p->group : 1;
}

/* Split-KV: parts until the device holds this many work-groups per compute unit (in tenths), each
 * part at least this many keys. Measured on the H200 (f16, d = 128, heads 32/8 at batch 1 and 8,
 * 32/32): forced part counts that give about 2 to 2.5 work-groups per SM were the fastest of 1 to
 * 128 parts; with the merge in the flash kernel's launch (2026-12-02), batch 1, seq_k 32768 and
 * 131072: 40 parts (2.4 per SM) 2.73 and 3.69 to 3.72 TB/s against 2.67 and 3.56 for 33 (2 per
 * SM) and 2.63 and 3.63 for 44; batch 8 (5 parts) and 32/32 heads (10 against 9) the same. */
#define NV_TENTHS_PER_UNIT 24u
#define NV_MIN_SPLIT_KEYS 256u

/* 1 where the masks take registers that two 16-row slices per warp do not leave at head_dims 65 to
 * 128: a sliding window, or the causal mask with softcap or ALiBi. There NVIDIA's compiler spills
 * (84 to 112 bytes at d = 128, read with -cl-nv-verbose on the H100 and H200, driver 580; the causal
 * mask alone spills 84 bytes too, but runs faster with two slices all the same), and one slice per
 * warp runs faster. H200, n = 4096, d = 128, f16, batch 4, 16 heads, 2026-12-05, two slices against
 * one (`clflash-bench --features --cases ... [--tune nv_forward.mtiles=1]`, one run): causal + window
 * 1024 0.541 against 0.462 ms, causal + softcap 1.145 against 1.028, causal + ALiBi 1.039 against
 * 0.992, the causal mask alone 0.951 against 1.151. */
static int masks_crowd_two_slices(const clflash_problem *p)
{
    const int causal = (p->flags & CLFLASH_CAUSAL) != 0;
    if (clflash_nv_padded_dim(p) <= 64)
        return 0;
    return (p->flags & CLFLASH_WINDOW) != 0 || (causal && (p->softcap != 0.0f || p->alibi_slopes != NULL));
}

/* How the work-group's query rows are laid out by default: `warps` warps of `m_tiles` 16-row
 * slices each. Measured on the H200 (n = 4096, f16; see docs/performance/h200.md): 4 warps of 2
 * slices (128 rows) beat 3 to 8 warps of one slice at d = 64 and 128, because each K or V fragment
 * read from local memory then feeds two mma instead of one. Few rows (seq_q, times the packed
 * heads) get fewer, so that decoding (seq_q = 1) does not compute 127 rows of padding. These are
 * the tuning table's defaults of nv_forward.warps and nv_forward.mtiles (see clflash.h). */
static void default_rows(const clflash_problem *p, uint32_t *warps, uint32_t *m_tiles)
{
    const uint64_t rows = (uint64_t)p->seq_q * pack_for(p);
    if (rows <= 16) {
        *warps = 1;
        *m_tiles = 1;
    } else if ((p->bias != NULL && !bias_staged(p, 2)) || masks_crowd_two_slices(p)) {
        /* one slice per warp: the registers a tile's bias takes (and the next tile's, loaded ahead)
         * do not fit beside two slices (H200, n = 4096, d = 128, the bias loaded in the same tile:
         * 4.95 ms with two slices, 3.41 with one), nor do those of the masks above */
        *m_tiles = 1;
        *warps = rows >= 64 ? 4 : (uint32_t)(rows + 15) / 16;
    } else {
        *m_tiles = clflash_nv_padded_dim(p) > 128 ? 1 : 2; /* at d = 256 one slice already holds 200 registers */
        *warps = rows >= 128 ? 4 : (uint32_t)(rows + 31) / 32;
    }
}

int32_t clflash_nv_default_warps(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    uint32_t warps, m_tiles;
    (void)c;
    (void)f;
    default_rows(p, &warps, &m_tiles);
    return (int32_t)warps;
}

int32_t clflash_nv_default_mtiles(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    uint32_t warps, m_tiles;
    (void)c;
    (void)f;
    default_rows(p, &warps, &m_tiles);
    return (int32_t)m_tiles;
}

/* Bytes of the kernel's local array: `stages` K and V tiles of B rows, each row padded by 16 bytes,
 * and after them, with BIAS_STAGED, `stages` bias tiles (the kernel's BIAS_ROW floats a row, whole
 * K/V rows in all); Q and O are staged through the same array, which grows if the work-group's
 * query rows need more. */
static cl_ulong counted_local_bytes(const clflash_problem *p, uint32_t block, uint32_t warps, uint32_t m_tiles,
                                    uint32_t stages)
{
    const uint64_t block_q = 16ull * warps * m_tiles, row_bytes = (clflash_nv_padded_dim(p) + 8ull) * p->elem_size;
    /* BIAS_STAGED: stages bias tiles of block_q rows of B + 8 floats after the K/V tiles */
    const uint64_t bias_bytes = bias_staged(p, m_tiles) ? (uint64_t)stages * block_q * (block + 8) * sizeof(float) : 0;
    const uint64_t tiles = 2ull * stages * block * row_bytes + (bias_bytes + row_bytes - 1) / row_bytes * row_bytes;
    const uint64_t q_rows = block_q * row_bytes;
    return q_rows > tiles ? q_rows : tiles;
}

/* The K/V pipeline's depth (the kernel's STAGES) for a block of B keys: 2 (double buffering) for
 * work-groups of several warps, whose tiles keep the tensor cores busy while the next one loads.
 * A work-group of one warp (decoding: at most 16 query rows) computes little per tile and waits on
 * memory: it takes NV_DECODE_STAGES where the local memory budget holds them. Measured on the H200
 * (f16, d = 128, 2026-12-01; decode_block then picks B = 16): 3 stages against 2 (B = 32) gave
 * 1.02x to 1.05x at batch 1, heads 32/8, seq_k 32768 and 131072, and the same at batch 8 and with
 * 32/32 heads; 5 stages gave a further 1.02x at batch 1 but 0.90x to 0.96x at batch 8 (seq_k 8192)
 * and 32/32 heads, so 3 is the default (the tuning table's default of nv_forward.stages, which
 * sets the depth instead). A depth that does not fit falls back to what does. */
#define NV_DECODE_STAGES 3u
int32_t clflash_nv_default_stages(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)c;
    (void)p;
    return f->warps == 1 ? NV_DECODE_STAGES : 2;
}

static uint32_t stages_for(const clflash_context *c, const clflash_problem *p, uint32_t warps, uint32_t m_tiles,
                           uint32_t block, uint64_t budget)
{
    const clflash_tune_facts facts = {.warps = warps};
    uint32_t want = (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_STAGES, &facts);
    while (want > 2 && counted_local_bytes(p, block, warps, m_tiles, want) > budget)
        want--;
    return want;
}

/* For a one-warp work-group, the block whose pipeline keeps the most keys in flight
 * ((stages - 1) * B) within the budget, the smaller block on a tie; others keep B. */
static uint32_t decode_block(const clflash_context *c, const clflash_problem *p, uint32_t warps, uint32_t m_tiles,
                             uint32_t b, uint64_t budget)
{
    if (warps != 1)
        return b;
    uint32_t best = b, best_keys = 0;
    for (uint32_t block = 16; block <= b; block += 16) {
        const uint32_t stages = stages_for(c, p, warps, m_tiles, block, budget);
        if (counted_local_bytes(p, block, warps, m_tiles, stages) <= budget && (stages - 1) * block > best_keys) {
            best = block;
            best_keys = (stages - 1) * block;
        }
    }
    return best;
}

/* Split-KV's merge in the flash kernel's own launch (its FUSED_MERGE: the last part of each query
 * block to finish merges the block's parts) rather than in a merge kernel launched after it. Measured
 * on the H200 (f16, d = 128, heads 32/8, 2026-12-01, see docs/performance/h200.md): the launch it saves
 * cost up to 10 us of a 50 us decoding call. It needs the block's parts' weights in the kernel's local
 * array (block_q * (splits + 1) floats); the setting nv_forward.fused_merge=0 turns it off. */
static int fused_merge_fits(const clflash_context *c, const clflash_problem *p, uint32_t splits, uint32_t block,
                            uint32_t warps, uint32_t m_tiles, uint32_t stages)
{
    const uint32_t block_q = 16 * warps * m_tiles;
    return splits > 1 && clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_FUSED_MERGE, NULL) == 1 &&
           (uint64_t)block_q * (splits + 1u) * sizeof(float) <= counted_local_bytes(p, block, warps, m_tiles, stages);
}

/* The kernel's NV_RESCALE_THRESH and NV_Q_DIRECT: the tuning table's defaults of
 * nv_forward.rescale_thresh and .q_direct (see cl/nv_mma_forward.cl for the measurements behind
 * them), or the settings. Direct Q loads read whole column pairs of 4-byte aligned rows: without
 * them (padded head dims, unaligned rows) Q is staged whatever the setting. */
int32_t clflash_nv_default_rescale_thresh(const clflash_context *c, const clflash_problem *p,
                                          const clflash_tune_facts *f)
{
    (void)c;
    (void)f;
    return clflash_nv_padded_dim(p) >= 128 ? 8 : -1;
}

int32_t clflash_nv_default_q_direct(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)c;
    (void)f;
    return p->head_dim <= 64;
}

static int32_t rescale_thresh(const clflash_context *c, const clflash_problem *p)
{
    return clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_RESCALE_THRESH, NULL);
}

static int q_direct(const clflash_context *c, const clflash_problem *p)
{
    if (clflash_nv_padded_dim(p) != p->head_dim || !clflash_nv_rows_aligned(p))
        return 0;
    return clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_Q_DIRECT, NULL) != 0;
}

/* The kernel's NV_Q_CHUNK (the causal mask's block order): nv_forward.q_chunk. */
static uint32_t q_chunk(const clflash_context *c, const clflash_problem *p)
{
    return (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_Q_CHUNK, NULL);
}

/* The fused merge's MERGE_GROUP, MERGE_UNROLL_PARTS, MERGE_LSE_BATCH and MERGE_PREFETCH (see
 * cl/nv_mma_forward.cl), or the nv_forward.merge_* settings. */
typedef struct {
    int group, parts, lse_batch, prefetch;
} merge_shape;

static merge_shape merge_shape_for(const clflash_context *c, const clflash_problem *p)
{
    merge_shape m;
    m.group = (int)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_MERGE_GROUP, NULL);
    m.parts = (int)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_MERGE_PARTS, NULL);
    m.lse_batch = (int)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_MERGE_LSE_BATCH, NULL);
    m.prefetch = (int)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_MERGE_PREFETCH, NULL);
    return m;
}

/* The kernel's defines for one candidate: the feature and split switches, then its shape and parameters. */
static void kernel_defines(const clflash_context *c, const clflash_problem *p, int with_lse, uint32_t splits,
                           uint32_t pack, uint32_t block, uint32_t warps, uint32_t m_tiles, uint32_t stages, int fused,
                           char *buf, size_t size)
{
    char features[300], merge[128];
    clflash_forward_defines(p, with_lse, splits, pack, features, sizeof features);
    const merge_shape m = merge_shape_for(c, p);
    merge[0] = '\0';
    if (fused)
        snprintf(merge, sizeof merge, " -D MERGE_GROUP=%d -D MERGE_UNROLL_PARTS=%d -D MERGE_LSE_BATCH=%d -D MERGE_PREFETCH=%d",
                 m.group, m.parts, m.lse_batch, m.prefetch);
    snprintf(buf, size,
             "%s -D HEAD_DIM=%u -D D_REAL=%u -D NV_ALIGNED=%d -D BLOCK=%u -D WARPS=%u -D M_TILES=%u -D STAGES=%u "
             "-D BIAS_PAIRS=%d -D BIAS_STAGED=%d -D FUSED_MERGE=%d -D WITH_OUT_LSE=%d -D NV_RESCALE_THRESH=%d "
             "-D NV_Q_DIRECT=%d -D NV_Q_CHUNK=%u%s",
             features, clflash_nv_padded_dim(p), p->head_dim, clflash_nv_rows_aligned(p), block, warps, m_tiles, stages,
             clflash_bias_pairs(p), bias_staged(p, m_tiles), fused, fused && with_lse, (int)rescale_thresh(c, p),
             q_direct(c, p), q_chunk(c, p), merge);
}

static clflash_status build(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t splits, uint32_t pack,
                            uint32_t block, uint32_t warps, uint32_t m_tiles, uint32_t stages, int fused,
                            cl_kernel *kernel, cl_ulong *local_bytes, size_t *max_wg)
{
    char defines[640];
    cl_program prog;
    cl_int err;
    clflash_status st;
    kernel_defines(c, p, with_lse, splits, pack, block, warps, m_tiles, stages, fused, defines, sizeof defines);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_NV_MMA_FORWARD, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, KERNEL_NAME, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", KERNEL_NAME);
    if ((st = clflash_read_kernel_limits(c, *kernel, counted_local_bytes(p, block, warps, m_tiles, stages),
                                         local_bytes, max_wg)) !=
        CLFLASH_SUCCESS) {
        clReleaseKernel(*kernel);
        *kernel = NULL;
    }
    return st;
}

/* What the planner decides before it builds anything: the query heads packed per work-group, the
 * work-group's warps and 16-row slices, the split parts, and the first B it tries (0: none fits;
 * a forced B that does not fit is reported by the caller). */
typedef struct {
    uint32_t pack, warps, m_tiles, splits, block;
} first_choice;
static first_choice first_candidate(const clflash_context *c, const clflash_problem *p, uint32_t below_block)
{
    const uint64_t budget = c->local_mem_budget;
    first_choice f;
    uint64_t b;
    if (p->block != 0) {
        b = p->block;
    } else {
        /* nv_forward.block: a tuning cap, 16..64 */
        b = clflash_block_cap(clflash_max_block(budget, p->head_dim, p->elem_size),
                              (uint64_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_BLOCK, NULL), p, below_block);
        b = b / 16 * 16;
    }
    f.pack = pack_for(p);
    const uint64_t rows = (uint64_t)p->seq_q * f.pack;
    f.warps = (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_WARPS, NULL); /* independent of B */
    f.m_tiles = (uint32_t)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_MTILES, NULL);
    const uint32_t block_q = 16 * f.warps * f.m_tiles;
    const uint64_t groups = (uint64_t)p->batch * (p->heads_q / f.pack) * ((rows + block_q - 1) / block_q);
    f.splits = clflash_split_count(c, p, groups, NV_TENTHS_PER_UNIT, NV_MIN_SPLIT_KEYS);
    if (p->block == 0)
        b = decode_block(c, p, f.warps, f.m_tiles, (uint32_t)b, budget);
    f.block = (uint32_t)b;
    return f;
}

int clflash_nv_mma_splits_or_packs(const clflash_context *c, const clflash_problem *p)
{
    const first_choice f = first_candidate(c, p, 0);
    return f.splits > 1 || f.pack > 1;
}

int clflash_nv_forward_first_defines(const clflash_context *c, const clflash_problem *p, int with_lse, char *buf,
                                     size_t size)
{
    const first_choice f = first_candidate(c, p, 0);
    for (uint32_t block = f.block; block >= 16; block -= 16) {
        const uint32_t stages = stages_for(c, p, f.warps, f.m_tiles, block, c->local_mem_budget);
        if (counted_local_bytes(p, block, f.warps, f.m_tiles, stages) > c->local_mem_budget && p->block == 0)
            continue; /* as the planner: not built */
        kernel_defines(c, p, with_lse, f.splits, f.pack, block, f.warps, f.m_tiles, stages,
                       fused_merge_fits(c, p, f.splits, block, f.warps, f.m_tiles, stages), buf, size);
        return 1;
    }
    return 0;
}

clflash_status clflash_plan_nv_mma(clflash_context *c, const clflash_problem *p, int with_lse, uint32_t below_block,
                                   clflash_flash_kernel *out)
{
    const uint64_t budget = c->local_mem_budget;
    if (p->block != 0 &&
        (clflash_tile_bytes(p->block, p->head_dim, p->elem_size) > budget || (below_block && p->block >= below_block)))
        return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "the forced block %u does not fit", p->block);
    const first_choice f = first_candidate(c, p, below_block);
    const uint64_t b = f.block;
    const uint32_t warps = f.warps, m_tiles = f.m_tiles, pack = f.pack, splits = f.splits;
    const uint64_t rows = (uint64_t)p->seq_q * pack;
    const uint32_t threads = 32 * warps; /* one warp per 16 query rows */
    const uint32_t block_q = 16 * warps * m_tiles;
    for (uint32_t block = (uint32_t)b; block >= 16; block -= 16) {
        cl_kernel kernel = NULL;
        cl_ulong local_bytes = 0;
        size_t max_wg = 0;
        const uint32_t stages = stages_for(c, p, warps, m_tiles, block, budget);
        if (counted_local_bytes(p, block, warps, m_tiles, stages) > budget && p->block == 0)
            continue; /* cannot fit: no need to build it */
        const int fused = fused_merge_fits(c, p, splits, block, warps, m_tiles, stages);
        clflash_status st = build(c, p, with_lse, splits, pack, block, warps, m_tiles, stages, fused, &kernel,
                                  &local_bytes, &max_wg);
        if (st != CLFLASH_SUCCESS)
            return st;
        if (local_bytes <= budget && threads <= max_wg) {
            /* threads_per_row 2: a warp's 32 lanes share its 16 rows */
            clflash_fill_plan(&out->plan, p, clflash_tile_bytes, budget, block, block_q, local_bytes, variant_name, 2,
                              threads);
            clflash_tune_report(&out->plan,
                                "nv_forward.block=%u,nv_forward.warps=%u,nv_forward.mtiles=%u,nv_forward.stages=%u,"
                                "nv_forward.fused_merge=%d,nv_forward.rescale_thresh=%d,nv_forward.q_direct=%d%s",
                                block, warps, m_tiles, stages,
                                splits > 1 ? fused
                                           : (int)clflash_tune_value(c, p, CLFLASH_TUNE_NV_FORWARD_FUSED_MERGE, NULL),
                                (int)rescale_thresh(c, p), q_direct(c, p),
                                bias_staged(p, m_tiles) ? ",nv_forward.bias_staged=1" : "");
            if (fused) {
                const merge_shape m = merge_shape_for(c, p);
                clflash_tune_report(&out->plan,
                                    ",nv_forward.merge_group=%d,nv_forward.merge_parts=%d,nv_forward.merge_lse_batch=%d,"
                                    "nv_forward.merge_prefetch=%d",
                                    m.group, m.parts, m.lse_batch, m.prefetch);
            }
            out->plan.kv_passes = (rows + block_q - 1) / block_q;
            out->kernel = kernel;
            out->merge_tickets = fused ? (uint64_t)p->batch * (p->heads_q / pack) * out->plan.kv_passes : 0;
            clflash_set_split(out, p, splits, pack);
            return CLFLASH_SUCCESS;
        }
        clReleaseKernel(kernel);
        if (p->block != 0)
            break;
    }
    return clflash_fail(CLFLASH_ERROR_TILE_TOO_LARGE, "no block fits the tensor-core kernel's limits");
}
