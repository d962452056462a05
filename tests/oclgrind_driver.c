/*
 * oclgrind_driver.c - runs the flash and naive kernels at small shapes and checks them against the
 * fp64 reference; meant to run under `oclgrind --data-races --uninitialized` (run_oclgrind.cmake),
 * which then reports races, out-of-bounds accesses and uses of uninitialised values that PoCL
 * silently tolerates.
 *
 * Forced blocks of 8 and 16 give several K/V tiles per row at these sizes, so the loop that reloads
 * the local tiles runs more than once: that is where a missing barrier shows. Exit status 0 only if
 * every case ran and matched. Prints no word that the wrapper treats as an Oclgrind report.
 * With a case index it runs only that case (the wrapper runs each case in its own process).
 * The main context forces the portable paths (the ones GPUs run); the cases marked cpu_path force
 * the CPU paths (flash_forward_cpu.cl and flash_backward.cl's, the ones PoCL runs) in a context of
 * their own. Paged caches, clflash_append_kv and variable-length batches with hostile cumulative
 * lengths (forward and backward) have cases of their own after those.
 */
#define _POSIX_C_SOURCE 200809L /* snprintf in strict C */
#include "backward_harness.h"
#include "component.h"
#include "harness.h"
#include "paged_harness.h"
#include "varlen_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    th_algo algo;
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
    clflash_dtype dtype;
    uint32_t flags, block;
    int strided_o;
    int cpu_path; /* tuning portable.cpu_path=1: 1 with one work-item per row forced (the CPU path,
                     flash_forward_cpu.cl), 2 with the planner's choice (few rows: flash_decode_cpu.cl) */
    const char *regtile; /* portable.regtile for the register-tiled path (NULL: the planner's tiles) */
    uint32_t splits;     /* num_splits (0: the planner's) */
} driver_case;

static const driver_case cases[] = {
    {TH_FLASH, 1, 2, 1, 37, 29, 16, CLFLASH_F32, 0, 0, 0, 0, NULL, 0},
    {TH_FLASH, 1, 1, 0, 37, 29, 16, CLFLASH_F32, CLFLASH_CAUSAL, 16, 1, 0, NULL, 0},
    {TH_FLASH, 1, 1, 0, 5, 37, 7, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 0, NULL, 0},
    {TH_FLASH, 2, 2, 2, 29, 37, 16, CLFLASH_F16, CLFLASH_CAUSAL, 16, 0, 0, NULL, 0},
    {TH_FLASH, 1, 1, 0, 37, 5, 7, CLFLASH_F16, 0, 0, 1, 0, NULL, 0},
    {TH_FLASH, 1, 1, 0, 37, 11, 16, CLFLASH_F16, CLFLASH_CAUSAL, 0, 0, 0, NULL, 0},
    {TH_NAIVE, 1, 2, 1, 37, 29, 16, CLFLASH_F32, CLFLASH_CAUSAL, 0, 1, 0, NULL, 0},
    {TH_NAIVE, 1, 1, 0, 5, 37, 7, CLFLASH_F16, 0, 0, 0, 0, NULL, 0},
    {TH_NAIVE, 1, 1, 0, 13, 13, 7, CLFLASH_F32, 0, 0, 0, 0, NULL, 0},
    {TH_NAIVE, 1, 1, 0, 37, 11, 16, CLFLASH_F16, CLFLASH_CAUSAL, 0, 0, 0, NULL, 0},
    /* the CPU path: several K/V tiles per row (B = 8, 16), an odd head_dim (padded V columns),
     * f32 and f16 storage, a strided O, causal and fully visible tiles */
    {TH_FLASH, 1, 2, 1, 37, 29, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 1, NULL, 0},
    {TH_FLASH, 1, 1, 0, 5, 37, 7, CLFLASH_F32, 0, 16, 1, 1, NULL, 0},
    {TH_FLASH, 2, 2, 2, 29, 37, 12, CLFLASH_F16, CLFLASH_CAUSAL, 16, 0, 1, NULL, 0},
    /* the register-tiled path in shapes other than the planner's: 2 rows per work-item, 4 per row
     * group and 8-row query blocks over forced 8-key tiles (many tiles and blocks); 1 row, a B of 5
     * (a partial row group of keys), d = 7 and a strided O; 16 work-items per row group over 8-key
     * tiles (key slots past B) */
    {TH_FLASH, 1, 2, 1, 37, 29, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 0, "2x4x8", 0},
    {TH_FLASH, 1, 1, 0, 5, 37, 7, CLFLASH_F16, 0, 0, 1, 0, "1x2x8x5", 0},
    {TH_FLASH, 2, 2, 2, 29, 37, 16, CLFLASH_F16, CLFLASH_CAUSAL, 0, 0, 0, "4x16x32x8", 0},
    /* split-KV: the parts and their merge (merge_states.cl) on each path, with GQA packing on the
     * register-tiled one: 3 parts over 8-key tiles (parts of several tiles, one partly empty),
     * more parts than tiles, causal decode rows */
    {TH_FLASH, 1, 4, 2, 3, 37, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 0, "4x4x8x8", 3},
    {TH_FLASH, 2, 2, 1, 1, 29, 7, CLFLASH_F16, 0, 0, 1, 0, NULL, 9},
    {TH_FLASH, 1, 2, 1, 5, 41, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 1, NULL, 3},
    /* the CPU decoding kernel: GQA rows of one K/V head, chunks of 8 keys, a partial last chunk, an
     * odd head_dim (element loads), f16 (vector loads), its parts and their merge */
    {TH_FLASH, 1, 4, 1, 3, 37, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 2, NULL, 0},
    {TH_FLASH, 2, 4, 2, 1, 29, 7, CLFLASH_F16, 0, 8, 1, 2, NULL, 3},
    {TH_FLASH, 1, 2, 2, 2, 45, 16, CLFLASH_F16, 0, 0, 0, 2, NULL, 4},
};

#define N_FORWARD_CASES (sizeof cases / sizeof cases[0])

/* Backward cases (cl/flash_backward.cl, cl/naive_backward.cl): forced blocks of 8 and 16 give
 * several K/V blocks and query blocks per work-group, so both gradient kernels reload their tiles
 * many times; `lanes` > 0 forces that many work-items per block row (as GPUs use) in a context of
 * its own. The feature fields (zero = off) add a sliding window, softcap (with its scale), a bias
 * of a tb_bias_kind (TB_BIAS_BCAST: shared by batch and heads, with -inf entries), ALiBi and key
 * lengths (TB_LENS_RAGGED: one batch entry of length 0); with forced B = 8 the skipped block
 * ranges of both kinds of work-group begin and end inside the sequences. */
typedef struct {
    tb_algo algo;
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
    clflash_dtype dtype;
    uint32_t flags, block, lanes;
    int strided;
    uint32_t window_left, window_right;
    float scale, softcap;
    tb_bias_kind bias;
    int alibi;
    tb_lens_kind lens;
    int cpu_path; /* as the forward's cpu_path cases: flash_backward.cl's CPU path */
} backward_case;

#define WC (CLFLASH_WINDOW | CLFLASH_CAUSAL)
#define NO_FEATURES 0, 0, 0.0f, 0.0f, TB_NO_BIAS, 0, TB_NO_LENS

static const backward_case bcases[] = {
    {TB_FLASH, 1, 2, 1, 19, 23, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 1, NO_FEATURES, 0},
    {TB_FLASH, 1, 1, 0, 23, 11, 7, CLFLASH_F16, CLFLASH_CAUSAL, 8, 0, 0, NO_FEATURES, 0},
    {TB_FLASH, 2, 2, 2, 13, 29, 16, CLFLASH_F32, 0, 0, 0, 0, NO_FEATURES, 0},
    {TB_FLASH, 1, 1, 0, 29, 17, 16, CLFLASH_F16, 0, 16, 0, 1, NO_FEATURES, 0},
    {TB_FLASH, 1, 2, 1, 21, 19, 16, CLFLASH_F32, CLFLASH_CAUSAL, 8, 4, 0, NO_FEATURES, 0},
    {TB_FLASH, 1, 1, 0, 17, 13, 7, CLFLASH_F16, 0, 8, 8, 0, NO_FEATURES, 0},
    {TB_NAIVE, 1, 2, 1, 19, 23, 16, CLFLASH_F32, CLFLASH_CAUSAL, 0, 0, 1, NO_FEATURES, 0},
    {TB_NAIVE, 1, 1, 0, 23, 11, 7, CLFLASH_F16, CLFLASH_CAUSAL, 0, 0, 0, NO_FEATURES, 0},
    /* each feature through each path, in f32 and in f16 or bf16 */
    {TB_FLASH, 1, 2, 1, 19, 23, 8, CLFLASH_F32, WC, 8, 0, 0, 5, 2, 0.0f, 0.0f, TB_NO_BIAS, 0, TB_NO_LENS, 0},
    {TB_NAIVE, 1, 2, 1, 19, 23, 8, CLFLASH_F16, WC, 0, 0, 0, 5, 2, 0.0f, 0.0f, TB_NO_BIAS, 0, TB_NO_LENS, 0},
    {TB_FLASH, 1, 2, 1, 17, 13, 8, CLFLASH_F16, 0, 8, 0, 0, 0, 0, 1.5f, 3.0f, TB_NO_BIAS, 0, TB_NO_LENS, 0},
    {TB_NAIVE, 1, 2, 1, 17, 13, 8, CLFLASH_F32, 0, 0, 0, 0, 0, 0, 1.5f, 3.0f, TB_NO_BIAS, 0, TB_NO_LENS, 0},
    {TB_FLASH, 2, 2, 1, 11, 19, 8, CLFLASH_BF16, 0, 8, 0, 0, 0, 0, 0.0f, 0.0f, TB_BIAS_BCAST, 0, TB_NO_LENS, 0},
    {TB_NAIVE, 2, 2, 1, 11, 19, 8, CLFLASH_F32, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, TB_BIAS_BCAST, 0, TB_NO_LENS, 0},
    {TB_FLASH, 1, 2, 1, 19, 17, 8, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 0, 0, 0, 0.0f, 0.0f, TB_NO_BIAS, 1, TB_NO_LENS, 0},
    {TB_NAIVE, 1, 2, 1, 19, 17, 8, CLFLASH_BF16, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, TB_NO_BIAS, 1, TB_NO_LENS, 0},
    {TB_FLASH, 2, 2, 1, 13, 19, 8, CLFLASH_F16, 0, 8, 0, 0, 0, 0, 0.0f, 0.0f, TB_NO_BIAS, 0, TB_LENS_RAGGED, 0},
    {TB_NAIVE, 2, 2, 1, 13, 19, 8, CLFLASH_F32, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, TB_NO_BIAS, 0, TB_LENS_RAGGED, 0},
    /* dBias (bias_grad, on every flash case with a bias): per element, summed over the rows (and heads) */
    {TB_FLASH, 1, 2, 0, 13, 21, 8, CLFLASH_F16, 0, 8, 0, 0, 0, 0, 0.0f, 2.0f, TB_BIAS_FULL, 0, TB_NO_LENS, 0},
    {TB_FLASH, 2, 2, 1, 19, 11, 8, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 0, 0, 0, 0.0f, 0.0f, TB_BIAS_KEYS, 0, TB_NO_LENS, 0},
    /* everything at once */
    {TB_FLASH, 2, 2, 1, 17, 19, 8, CLFLASH_BF16, WC, 8, 0, 0, 6, 1, 1.0f, 2.5f, TB_BIAS_BCAST, 1, TB_LENS_RAGGED, 0},
    {TB_NAIVE, 2, 2, 1, 17, 19, 8, CLFLASH_F16, WC, 0, 0, 0, 6, 1, 1.0f, 2.5f, TB_BIAS_BCAST, 1, TB_LENS_RAGGED, 0},
    /* diagonals at each entry's key length (CLFLASH_ALIGN_TO_KEY_LENGTH), portable and CPU paths */
    {TB_FLASH, 4, 2, 1, 5, 19, 8, CLFLASH_F16, WC | CLFLASH_ALIGN_TO_KEY_LENGTH, 8, 0, 0, 3, 0, 0.0f, 0.0f, TB_NO_BIAS, 1,
     TB_LENS_RAGGED, 0},
    {TB_FLASH, 4, 2, 1, 5, 19, 8, CLFLASH_F32, CLFLASH_CAUSAL | CLFLASH_ALIGN_TO_KEY_LENGTH, 8, 0, 0, 0, 0, 0.0f, 0.0f,
     TB_NO_BIAS, 1, TB_LENS_RAGGED, 1},
    /* the CPU path (portable.cpu_path=1, one work-item per row) of the backward and, through the
     * device forward these cases use, of the forward: several key and query blocks per group (B = 8,
     * 16), GQA, head_dims 7 and 12 (padded tile columns), strided, f32, f16 and bf16, and features
     * with and without the transforms (softcap, bias and ALiBi on whole and masked tiles) */
    {TB_FLASH, 1, 2, 1, 19, 23, 7, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 1, NO_FEATURES, 1},
    {TB_FLASH, 1, 1, 0, 29, 17, 16, CLFLASH_F16, 0, 16, 0, 0, NO_FEATURES, 1},
    {TB_FLASH, 2, 2, 1, 13, 19, 8, CLFLASH_F32, WC, 8, 0, 1, 5, 2, 0.0f, 0.0f, TB_NO_BIAS, 0, TB_LENS_RAGGED, 1},
    {TB_FLASH, 2, 2, 1, 17, 19, 12, CLFLASH_BF16, WC, 8, 0, 0, 6, 1, 1.0f, 2.5f, TB_BIAS_BCAST, 1, TB_LENS_RAGGED, 1},
    {TB_FLASH, 1, 2, 1, 21, 27, 16, CLFLASH_F32, 0, 8, 0, 0, 0, 0, 0.0f, 3.0f, TB_BIAS_BCAST, 1, TB_NO_LENS, 1},
    /* the CPU path's dBias (bias_grad_cpu.cl): per element, and summed over the rows and heads */
    {TB_FLASH, 1, 2, 0, 13, 71, 8, CLFLASH_F16, 0, 8, 0, 0, 0, 0, 0.0f, 2.0f, TB_BIAS_FULL, 0, TB_NO_LENS, 1},
    {TB_FLASH, 2, 2, 1, 67, 11, 8, CLFLASH_F32, CLFLASH_CAUSAL, 8, 0, 0, 0, 0, 0.0f, 0.0f, TB_BIAS_KEYS, 0, TB_NO_LENS,
     1},
};

#define N_BACKWARD_CASES (sizeof bcases / sizeof bcases[0])

/* Paged KV caches (paged_harness.h): pages of 4 and 8 keys (several per tile), a last page partly
 * filled, table entries out of the pool (negative, INT32_MAX, num_pages) where no key is visible and
 * on a visible page, shared pages, an unaligned pool, split parts; on each path: the register tiles
 * (the shared context), the lane path, the CPU path and the CPU decoding kernel. */
typedef enum { PAGED_REGTILE, PAGED_LANES, PAGED_CPU, PAGED_CPU_DECODE } paged_path;
static const struct {
    pg_spec spec;
    paged_path path;
} pcases[] = {
    {{3, 4, 2, 1, 37, 16, 8, CLFLASH_F32, 0, 0, 0, 3, PG_HEAD_MAJOR, 1, 0, 1, 0, 0}, PAGED_REGTILE},
    {{2, 2, 1, 5, 29, 7, 4, CLFLASH_F16, CLFLASH_CAUSAL | CLFLASH_ALIGN_TO_KEY_LENGTH, 0, 0, 0, PG_ODD, 1, 0, 1, 0, 1},
     PAGED_LANES},
    /* slot-major pages with two K/V heads: the CPU decoding kernel takes both heads per work-item */
    {{3, 4, 2, 2, 41, 16, 8, CLFLASH_F32, 0, 0, 0, 2, PG_SLOT_MAJOR, 1, 1, 1, 0, 0}, PAGED_CPU_DECODE},
    {{2, 2, 2, 9, 23, 8, 16, CLFLASH_F16, CLFLASH_CAUSAL, 0, 0, 0, PG_HEAD_MAJOR, 0, 0, 1, 1, 0}, PAGED_CPU},
};

#define N_PAGED_CASES (sizeof pcases / sizeof pcases[0])

/* clflash_append_kv (cl/kv_append.cl): a paged cache of 4-key pages with lengths and table entries
 * that send rows outside the cache and the pool (they must be dropped), rotary on keys and queries,
 * the lengths advanced; and a contiguous one with interleaved rotary over part of head_dim. The
 * values are checked by test_kv_append; here every access is checked, and the lengths. */
static const struct {
    uint32_t page_size, head_dim, rotary_dim, interleaved;
    clflash_dtype dtype;
} acases[] = {{4, 8, 8, 0, CLFLASH_F16}, {0, 12, 4, 1, CLFLASH_F32}};

#define N_APPEND_CASES (sizeof acases / sizeof acases[0])

/* Variable-length packed batches (varlen_harness.h) with hostile cumulative lengths: decreasing,
 * negative and past the total, a first row that is not 0, rows no sequence covers, sequences cut
 * to seq_q and seq_k, empty ones; ranges that do not overlap (overlapping ones write the same rows
 * from two work-groups, a race clflash.h allows). The forward with split parts (the merge packs
 * them) on the register tiles and on the CPU path, the backward on the GPU and the CPU kernels. */
static const int32_t vl_cu_q[7] = {4, 9, 2000000000, -5, 3, 1, 1}, vl_cu_k[7] = {10, 30, 2000000000, -1, 6, 2, 2};
static const struct {
    int backward, cpu_path;
    clflash_dtype dtype;
    uint32_t flags, splits;
    int odd_layout;
} vcases[] = {
    {0, 0, CLFLASH_F32, CLFLASH_CAUSAL, 2, 0},
    {0, 1, CLFLASH_F16, 0, 0, 1},
    {1, 0, CLFLASH_F16, CLFLASH_CAUSAL, 0, 1},
    {1, 1, CLFLASH_F32, CLFLASH_CAUSAL, 0, 0},
};
#define N_VARLEN_CASES (sizeof vcases / sizeof vcases[0])

/* cl/grad_accumulate.cl (component.h; clflash_mpi's ring backward): a caller's tensor with gaps
 * (an offset, a row stride past head_dim, heads and batch strides past the rows) gathered into a
 * compact one; a partial in the storage type and then an fp32 one added into an fp32 accumulator
 * over a range of rows inside the tensor; the accumulator scattered back into a tensor with gaps
 * (a sentinel in them must survive); with f32, the laid-out tensor zeroed (grad_zero: the ring's
 * bias gradient of pairs no call meets), its gaps keeping their values. Element counts that are
 * not multiples of the work-group,
 * and one tensor of a single element; buffers of exactly the bytes the tensors need, so that any
 * access past them is Oclgrind's report. */
static const struct {
    clflash_dtype dtype;
    uint32_t batch, heads, rows, head_dim, row0, len;
} gcases[] = {
    {CLFLASH_F32, 2, 3, 7, 5, 2, 3},
    {CLFLASH_F16, 1, 1, 1, 1, 0, 1},
    {CLFLASH_BF16, 3, 2, 11, 13, 0, 11},
};
#define N_GRAD_CASES (sizeof gcases / sizeof gcases[0])

/* diagonal_offset (clflash_attention_desc): rows of bcases again with their diagonal moved, so that
 * rows see no key, every key, or a window away from the corner: the GPU kernels (window; ALiBi),
 * the naive backward with every feature, the CPU path (aligned to key lengths; window with key
 * lengths; every transform). */
static const struct {
    size_t row;
    int32_t offset;
} ocases[] = {{8, -6}, {14, 7}, {21, 5}, {23, -3}, {26, 4}, {27, -5}};

#define N_OFFSET_CASES (sizeof ocases / sizeof ocases[0])
#define N_CASES                                                                                                    \
    (N_FORWARD_CASES + N_BACKWARD_CASES + N_PAGED_CASES + N_APPEND_CASES + N_VARLEN_CASES + N_GRAD_CASES +          \
     N_OFFSET_CASES)

/* Runs grad case n; returns 1 on a failure (printed). */
static int run_grad_case(clflash_context *c, size_t n)
{
    const clflash_dtype t = gcases[n].dtype;
    const uint32_t B = gcases[n].batch, H = gcases[n].heads, R = gcases[n].rows, D = gcases[n].head_dim;
    const uint32_t r0 = gcases[n].row0, len = gcases[n].len;
    const size_t es = clflash_dtype_size(t), nc = (size_t)B * H * R * D; /* compact elements */
    /* the laid-out tensor: 3 elements before it, rows of D + 2, a gap of one row after each head's
     * rows and of 5 elements after each batch entry */
    const clflash_layout l = {3, (uint64_t)H * (R + 1) * (D + 2) + 5, (uint64_t)(R + 1) * (D + 2), D + 2};
    const size_t nl = (size_t)ref_extent(&l, B, H, R, D);
    const ref_strides ls = ref_resolve_layout(&l, H, R, D);
    unsigned char *src = malloc(nl * es), *part = malloc(nc * es), *got = malloc(nl * es);
    unsigned char *out0 = malloc(nl * es);
    float *acc = malloc(nc * sizeof(float)), *acc2 = malloc(nc * sizeof(float)), *accg = malloc(nc * sizeof(float));
    unsigned char *gath = malloc(nc * es);
    if (!src || !part || !got || !out0 || !acc || !acc2 || !accg || !gath) {
        printf("FAILED: out of host memory\n");
        free(src), free(part), free(got), free(out0), free(acc), free(acc2), free(accg), free(gath);
        return 1;
    }
    ref_rng rng;
    ref_rng_seed(&rng, 9900 + n);
    for (size_t i = 0; i < nl; i++) {
        ref_store(t, src, i, (float)ref_rng_uniform(&rng));
        ref_store(t, out0, i, 77.0f); /* the sentinel of dst's gaps */
    }
    for (size_t i = 0; i < nc; i++) {
        ref_store(t, part, i, (float)ref_rng_uniform(&rng));
        acc[i] = (float)ref_rng_uniform(&rng);
        acc2[i] = (float)ref_rng_uniform(&rng) * 0.001f;
    }
    cl_int err = CL_SUCCESS;
    cl_context ctx = clflash_context_cl(c);
    cl_command_queue qu = clflash_context_queue(c);
    const cl_mem_flags f = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
    cl_mem m_src = clCreateBuffer(ctx, f, nl * es, src, &err), m_part = clCreateBuffer(ctx, f, nc * es, part, &err);
    cl_mem m_acc = clCreateBuffer(ctx, f, nc * sizeof(float), acc, &err);
    cl_mem m_acc2 = clCreateBuffer(ctx, f, nc * sizeof(float), acc2, &err);
    cl_mem m_dst = clCreateBuffer(ctx, f, nl * es, out0, &err);
    /* gathered from element GATHER_OFF of a buffer of exactly that many more elements */
    enum { GATHER_OFF = 2 };
    cl_mem m_gath = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (nc + GATHER_OFF) * es, NULL, &err);
    clflash_status st = err;
    if (st == CLFLASH_SUCCESS)
        st = clflash_grad_gather(c, qu, t, m_gath, GATHER_OFF, m_src, &l, B, H, R, D);
    if (st == CLFLASH_SUCCESS)
        st = clflash_grad_accumulate(c, qu, t, m_acc, m_part, (uint64_t)B * H, R, r0, len, D);
    if (st == CLFLASH_SUCCESS) /* an fp32 partial: every row */
        st = clflash_grad_accumulate(c, qu, CLFLASH_F32, m_acc, m_acc2, (uint64_t)B * H, R, 0, R, D);
    if (st == CLFLASH_SUCCESS) /* the accumulator's batch entries after the first, as a tensor of B - 1 entries */
        st = clflash_grad_scatter(c, qu, t, m_dst, &l, B > 1 ? B - 1 : 1, H, R, D, m_acc,
                                  B > 1 ? (uint64_t)H * R * D : 0);
    if (st == CLFLASH_SUCCESS)
        st = clEnqueueReadBuffer(qu, m_gath, CL_TRUE, GATHER_OFF * es, nc * es, gath, 0, NULL, NULL);
    if (st == CLFLASH_SUCCESS)
        st = clEnqueueReadBuffer(qu, m_acc, CL_TRUE, 0, nc * sizeof(float), accg, 0, NULL, NULL);
    if (st == CLFLASH_SUCCESS)
        st = clEnqueueReadBuffer(qu, m_dst, CL_TRUE, 0, nl * es, got, 0, NULL, NULL);
    unsigned char *zeroed = NULL; /* f32: m_src after grad_zero */
    if (st == CLFLASH_SUCCESS && t == CLFLASH_F32 && (zeroed = malloc(nl * es)) != NULL) {
        st = clflash_grad_zero(c, qu, m_src, &l, B, H, R, D);
        if (st == CLFLASH_SUCCESS)
            st = clEnqueueReadBuffer(qu, m_src, CL_TRUE, 0, nl * es, zeroed, 0, NULL, NULL);
    }
    char what[160], msg[300] = "";
    snprintf(what, sizeof what, "grad_accumulate %s batch %u heads %u rows %u head_dim %u, rows %u..%u",
             t == CLFLASH_F32 ? "f32" : t == CLFLASH_F16 ? "f16" : "bf16", B, H, R, D, r0, r0 + len - 1);
    /* gather: exact; accumulate: the fp64 sums within one fp32 rounding per addition (and the rows
     * outside the range only the fp32 partial's); scatter: the accumulator rounded once to the type,
     * and dst's gaps and the rows of other entries untouched */
    for (uint32_t b = 0; b < B && st == CLFLASH_SUCCESS && !msg[0]; b++)
        for (uint32_t h = 0; h < H && !msg[0]; h++)
            for (uint32_t i = 0; i < R && !msg[0]; i++)
                for (uint32_t d = 0; d < D && !msg[0]; d++) {
                    const size_t e = (((size_t)b * H + h) * R + i) * D + d, at = (size_t)ref_index(&ls, b, h, i, d);
                    const int in_range = i >= r0 && i < r0 + len;
                    const double want =
                        (double)acc[e] + (in_range ? (double)ref_load(t, part, e) : 0.0) + (double)acc2[e];
                    /* dst entry b holds acc entry b + 1 (B > 1) */
                    const size_t scattered_from = B > 1 ? e + (size_t)H * R * D : e;
                    const int scattered = B > 1 ? b + 1 < B : 1;
                    if (ref_load(t, gath, e) != ref_load(t, src, at))
                        snprintf(msg, sizeof msg, "gather: element (%u,%u,%u,%u) is %g, not %g", b, h, i, d,
                                 (double)ref_load(t, gath, e), (double)ref_load(t, src, at));
                    else if (!(fabs((double)accg[e] - want) <= 2.5e-7 * (fabs(want) + 2.0)))
                        snprintf(msg, sizeof msg, "accumulate: element (%u,%u,%u,%u) is %.9g, not %.9g", b, h, i, d,
                                 (double)accg[e], want);
                    else if (scattered && scattered_from < nc) {
                        float tmp[1];
                        const float expect = ref_store(t, tmp, 0, accg[scattered_from]);
                        if (ref_load(t, got, at) != expect)
                            snprintf(msg, sizeof msg, "scatter: element (%u,%u,%u,%u) is %g, not %g", b, h, i, d,
                                     (double)ref_load(t, got, at), (double)expect);
                    } else if (ref_load(t, got, at) != 77.0f) {
                        snprintf(msg, sizeof msg, "scatter wrote element (%u,%u,%u,%u) outside its tensor", b, h, i, d);
                    }
                }
    for (size_t i = 0; i < nl && st == CLFLASH_SUCCESS && !msg[0]; i++) { /* the gaps keep the sentinel */
        const uint64_t in_entry = (i - l.offset) % ls.batch_stride, in_head = in_entry % ls.head_stride;
        const int in_gap = i < l.offset || in_entry >= (uint64_t)H * ls.head_stride ||
                           in_head >= (uint64_t)R * ls.seq_stride || in_head % ls.seq_stride >= D;
        if (in_gap && ref_load(t, got, i) != 77.0f)
            snprintf(msg, sizeof msg, "scatter wrote the gap at element %zu", i);
        if (zeroed && ref_load(t, zeroed, i) != (in_gap ? ref_load(t, src, i) : 0.0f))
            snprintf(msg, sizeof msg, "grad_zero: element %zu%s is %g", i, in_gap ? " (a gap)" : "",
                     (double)ref_load(t, zeroed, i));
    }
    free(zeroed);
    int failed = 1;
    if (st != CLFLASH_SUCCESS)
        printf("FAILED %s: %s (%s)\n", what, clflash_status_string(st), clflash_last_error_detail());
    else if (msg[0])
        printf("MISMATCH %s: %s\n", what, msg);
    else
        failed = 0, printf("ok %s\n", what);
    fflush(stdout);
    const cl_mem all[] = {m_src, m_part, m_acc, m_acc2, m_dst, m_gath};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(src), free(part), free(got), free(out0), free(acc), free(acc2), free(accg), free(gath);
    return failed;
}

/* Runs varlen case n; returns 1 on a failure (printed). */
static int run_varlen_case(clflash_context *shared, size_t n)
{
    clflash_context *c = shared;
    clflash_status st;
    if (vcases[n].cpu_path) {
        clflash_context_options opt = {.struct_size = sizeof opt};
        opt.tuning = "portable.cpu_path=1";
        opt.threads_per_row = 1;
        if ((st = th_context(&opt, &c)) != CLFLASH_SUCCESS) {
            printf("FAILED: no context: %s (%s)\n", clflash_status_string(st), clflash_last_error_detail());
            return 1;
        }
    }
    vl_spec s = {0};
    s.dtype = vcases[n].dtype;
    s.batch = 6;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.head_dim = 8;
    s.seq_q = 6;
    s.seq_k = 18;
    s.cu_q = vl_cu_q;
    s.cu_k = vl_cu_k;
    s.total_q = 16;
    s.total_k = 40;
    s.flags = vcases[n].flags;
    s.num_splits = vcases[n].splits;
    s.odd_layout = vcases[n].odd_layout;
    char what[256], spec[200], msg[600];
    snprintf(what, sizeof what, "varlen %s %s, hostile lengths%s", vcases[n].backward ? "backward" : "forward",
             vl_spec_str(&s, spec, sizeof spec), vcases[n].cpu_path ? ", cpu-path" : "");
    vl_case t;
    const char *kernel = "";
    int failed = 1;
    if (vl_case_init(&t, &s, vcases[n].backward, 9800 + n) != 0) {
        printf("FAILED: out of host memory\n");
    } else if ((st = vcases[n].backward ? vl_run_backward(c, &t, &kernel) : vl_run_forward(c, &t, &kernel, NULL)) !=
               CLFLASH_SUCCESS) {
        printf("FAILED %s: %s (%s)\n", what, clflash_status_string(st), clflash_last_error_detail());
    } else if (vcases[n].backward ? vl_check_backward(&t, msg, sizeof msg) : vl_check_forward(&t, msg, sizeof msg)) {
        printf("MISMATCH %s (%s): %s\n", what, kernel, msg);
    } else {
        printf("ok %s (%s)\n", what, kernel);
        failed = 0;
    }
    fflush(stdout);
    vl_case_free(&t);
    if (c != shared)
        clflash_context_free(c);
    return failed;
}

/* Runs append case n; returns 1 on a failure (printed). */
static int run_append_case(clflash_context *c, size_t n)
{
    const uint32_t B = 4, HK = 2, HQ = 4, N = 3, D = acases[n].head_dim, P = acases[n].page_size, PPS = 3;
    const uint32_t pages = B * PPS, cap = P ? PPS * P : 10, positions = 9;
    const size_t es = clflash_dtype_size(acases[n].dtype);
    const size_t n_new = (size_t)B * HK * N * D, n_q = (size_t)B * HQ * N * D;
    const size_t n_cache = (size_t)(P ? pages * P : B * cap) * HK * D;
    int32_t lens[4] = {-1, 2, (int32_t)cap - 2, (int32_t)cap + 1}, table[12];
    for (uint32_t i = 0; i < pages; i++)
        table[i] = (int32_t)(pages - 1 - i);
    table[PPS + 0] = -7;                      /* entry 1's first page */
    table[2 * PPS + PPS - 1] = (int32_t)pages; /* entry 2's last page */
    float rot[9 * 4];
    for (uint32_t i = 0; i < 9 * 4; i++)
        rot[i] = 0.5f + 0.01f * (float)i;
    unsigned char *bytes = calloc(n_cache * es + n_q * es + 2 * n_new * es, 1);
    if (bytes == NULL) {
        printf("FAILED: out of host memory\n");
        return 1;
    }
    cl_int err = CL_SUCCESS;
    cl_context ctx = clflash_context_cl(c);
    const cl_mem_flags f = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
    cl_mem kn = clCreateBuffer(ctx, f, n_new * es, bytes, &err), vn = clCreateBuffer(ctx, f, n_new * es, bytes, &err);
    cl_mem kc = clCreateBuffer(ctx, f, n_cache * es, bytes, &err), vc = clCreateBuffer(ctx, f, n_cache * es, bytes, &err);
    cl_mem q = clCreateBuffer(ctx, f, n_q * es, bytes, &err), lb = clCreateBuffer(ctx, f, sizeof lens, lens, &err);
    cl_mem tb = clCreateBuffer(ctx, f, sizeof table, table, &err);
    cl_mem cs = clCreateBuffer(ctx, f, sizeof rot, rot, &err), sn = clCreateBuffer(ctx, f, sizeof rot, rot, &err);
    clflash_append_desc d = {.struct_size = sizeof d};
    d.batch = B;
    d.heads_kv = HK;
    d.heads_q = HQ;
    d.new_tokens = N;
    d.head_dim = D;
    d.dtype = acases[n].dtype;
    d.flags = CLFLASH_APPEND_ADVANCE_LENGTHS | (acases[n].interleaved ? CLFLASH_ROTARY_INTERLEAVED : 0);
    d.capacity = P ? 0 : cap;
    if (P) {
        d.block_table = tb;
        d.page_size = P;
        d.pages_per_seq = PPS;
        d.num_pages = pages;
    }
    d.cache_lengths = lb;
    d.rotary_dim = acases[n].rotary_dim;
    d.rotary_positions = positions;
    d.rotary_cos = cs;
    d.rotary_sin = sn;
    clflash_status st = err;
    int32_t back[4] = {0};
    if (err == CL_SUCCESS && (st = clflash_append_kv(c, &d, NULL, q, kn, vn, kc, vc, 0, NULL, NULL)) == CLFLASH_SUCCESS)
        st = clEnqueueReadBuffer(clflash_context_queue(c), lb, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL);
    int failed = 1;
    if (st != CLFLASH_SUCCESS)
        printf("FAILED append case %zu: %s (%s)\n", n, clflash_status_string(st), clflash_last_error_detail());
    else if (back[0] != lens[0] + (int32_t)N || back[3] != lens[3] + (int32_t)N)
        printf("MISMATCH append case %zu: lengths %d, %d after the call\n", n, back[0], back[3]);
    else
        failed = 0, printf("ok append %s %s d%u rotary %u%s\n", P ? "paged" : "contiguous",
                           d.dtype == CLFLASH_F16 ? "f16" : "f32", D, d.rotary_dim, acases[n].interleaved ? " interleaved" : "");
    fflush(stdout);
    const cl_mem all[] = {kn, vn, kc, vc, q, lb, tb, cs, sn};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(bytes);
    return failed;
}

/* Runs backward case n with its diagonal moved by offset; returns 1 on a failure (printed). */
static int run_backward_case(clflash_context *shared, size_t n, int32_t offset)
{
    const backward_case *k = &bcases[n];
    clflash_context *c = shared;
    clflash_status st;
    if (k->lanes || k->cpu_path) {
        clflash_context_options opt = {.struct_size = sizeof opt};
        opt.threads_per_row = k->cpu_path ? 1 : k->lanes;
        if (k->cpu_path)
            opt.tuning = "portable.cpu_path=1";
        if ((st = th_context(&opt, &c)) != CLFLASH_SUCCESS) {
            printf("FAILED: no context: %s (%s)\n", clflash_status_string(st), clflash_last_error_detail());
            return 1;
        }
    }
    clflash_attention_desc d =
        th_desc(k->batch, k->heads_q, k->heads_kv, k->seq_q, k->seq_k, k->head_dim, k->dtype, k->flags);
    d.block = k->block;
    d.window_left = k->window_left;
    d.window_right = k->window_right;
    d.scale = k->scale;
    d.softcap = k->softcap;
    d.diagonal_offset = offset;
    if (k->strided) { /* gaps after every row of dQ (and Q), dK and dV */
        d.q = (clflash_layout){3, 0, 0, k->head_dim + 2};
        d.k = (clflash_layout){1, 0, 0, k->head_dim + 1};
        d.v = (clflash_layout){0, 0, 0, k->head_dim + 3};
    }
    char what[200], msg[3000];
    th_desc_str(&d, what, sizeof what);
    if (k->lanes)
        snprintf(what + strlen(what), sizeof what - strlen(what), " lanes=%u", k->lanes);
    if (k->cpu_path) /* the gradients come from the device's own forward, on the CPU path too */
        snprintf(what + strlen(what), sizeof what - strlen(what), " cpu-path, device forward");
    if (d.flags & CLFLASH_WINDOW)
        snprintf(what + strlen(what), sizeof what - strlen(what), " window=%u,%u", k->window_left, k->window_right);
    if (k->softcap != 0.0f)
        snprintf(what + strlen(what), sizeof what - strlen(what), " softcap=%g", (double)k->softcap);
    if (k->bias || k->alibi || k->lens)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s%s",
                 k->bias ? (k->algo == TB_FLASH ? " bias (and dBias)" : " bias") : "",
                 k->alibi ? " alibi" : "", k->lens ? " key-lengths" : "");
    if (offset != 0)
        snprintf(what + strlen(what), sizeof what - strlen(what), " diagonal_offset=%d", (int)offset);
    const char *algo = k->algo == TB_FLASH ? "backward" : "naive backward";
    tb_case t;
    int failed = 0;
    if (tb_case_init_features(&t, &d, k->bias, k->alibi, k->lens, 9500 + n) != 0) {
        printf("FAILED: out of host memory\n");
        failed = 1;
    } else if ((t.bias_grad = k->algo == TB_FLASH && t.bias != NULL, /* dBias too (the naive path refuses it) */
                (st = tb_run(c, &t, k->algo, k->cpu_path, NULL))) != CLFLASH_SUCCESS) {
        printf("FAILED %s %s: %s (%s)\n", algo, what, clflash_status_string(st), clflash_last_error_detail());
        failed = 1;
    } else if (tb_check(&t, msg, sizeof msg)) {
        printf("MISMATCH %s %s: %s\n", algo, what, msg);
        failed = 1;
    } else {
        printf("ok %s %s\n", algo, what);
    }
    fflush(stdout);
    tb_case_free(&t);
    if (c != shared)
        clflash_context_free(c);
    return failed;
}

/* Runs paged case n; returns 1 on a failure (printed). */
static int run_paged_case(clflash_context *shared, size_t n)
{
    static const char *const paths[4] = {"register tiles", "lanes", "cpu-path", "cpu decode"};
    static const char *const kernels[4] = {"flash_forward_regtile", "flash_forward_portable", "flash_forward_portable",
                                           "flash_decode_cpu"};
    const paged_path path = pcases[n].path;
    clflash_context *c = shared;
    clflash_status st;
    if (path != PAGED_REGTILE) {
        clflash_context_options opt = {.struct_size = sizeof opt};
        opt.tuning = path == PAGED_LANES ? "portable.cpu_path=0" : "portable.cpu_path=1";
        opt.threads_per_row = path == PAGED_LANES ? 4 : path == PAGED_CPU ? 1 : 0;
        if ((st = th_context(&opt, &c)) != CLFLASH_SUCCESS) {
            printf("FAILED: no context: %s (%s)\n", clflash_status_string(st), clflash_last_error_detail());
            return 1;
        }
    }
    char what[256], spec[200], msg[600];
    snprintf(what, sizeof what, "%s, %s", pg_spec_str(&pcases[n].spec, spec, sizeof spec), paths[path]);
    pg_case t;
    const char *kernel = "";
    int failed = 1;
    if (pg_case_init(&t, &pcases[n].spec, 9700 + n) != 0) {
        printf("FAILED: out of host memory\n");
    } else if ((st = pg_run(c, &t, 0, &kernel, NULL)) != CLFLASH_SUCCESS) {
        printf("FAILED paged %s: %s (%s)\n", what, clflash_status_string(st), clflash_last_error_detail());
    } else if (strcmp(kernel, kernels[path]) != 0) {
        printf("FAILED paged %s: planned %s, not %s\n", what, kernel, kernels[path]);
    } else if (pg_check(&t, pcases[n].spec.dtype == CLFLASH_F16 ? ref_tol_o(CLFLASH_F16, REF_PATH_FLASH)
                                                                : ref_tol_o(CLFLASH_F32, REF_PATH_FLASH),
                        msg, sizeof msg)) {
        printf("MISMATCH paged %s: %s\n", what, msg);
    } else {
        printf("ok paged %s\n", what);
        failed = 0;
    }
    fflush(stdout);
    pg_case_free(&t);
    if (c != shared)
        clflash_context_free(c);
    return failed;
}

/* No argument: every case. "--count": print how many there are. A number: only that case. */
int main(int argc, char **argv)
{
    size_t first = 0, last = N_CASES;
    if (argc > 1 && strcmp(argv[1], "--count") == 0) {
        printf("%zu\n", N_CASES);
        return 0;
    }
    if (argc > 1) {
        char *end;
        const unsigned long i = strtoul(argv[1], &end, 10);
        if (*end || i >= N_CASES) {
            printf("usage: %s [--count | case index below %zu]\n", argv[0], N_CASES);
            return 2;
        }
        first = i;
        last = i + 1;
    }
    clflash_context *c = NULL;
    /* Oclgrind is a CPU-type device, which the planner would give the CPU path (flash_forward_cpu.cl);
     * the portable path is the one GPUs run, so it is what these cases check (the cpu_path cases
     * check the other). */
    clflash_context_options portable = {.struct_size = sizeof portable};
    portable.tuning = "portable.cpu_path=0";
    clflash_status st = th_context(&portable, &c);
    if (st != CLFLASH_SUCCESS) {
        printf("FAILED: no context: %s (%s)\n", clflash_status_string(st), clflash_last_error_detail());
        return 1;
    }
    char name[256] = "";
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    printf("device: %s\n", name);
    int failures = 0;
    for (size_t n = first; n < last; n++) {
        if (n >= N_CASES - N_OFFSET_CASES) {
            const size_t o = n - (N_CASES - N_OFFSET_CASES);
            failures += run_backward_case(c, ocases[o].row, ocases[o].offset);
            continue;
        }
        if (n >= N_FORWARD_CASES + N_BACKWARD_CASES + N_PAGED_CASES + N_APPEND_CASES + N_VARLEN_CASES) {
            failures += run_grad_case(c, n - (N_FORWARD_CASES + N_BACKWARD_CASES + N_PAGED_CASES + N_APPEND_CASES +
                                              N_VARLEN_CASES));
            continue;
        }
        if (n >= N_FORWARD_CASES + N_BACKWARD_CASES + N_PAGED_CASES + N_APPEND_CASES) {
            failures += run_varlen_case(c, n - N_FORWARD_CASES - N_BACKWARD_CASES - N_PAGED_CASES - N_APPEND_CASES);
            continue;
        }
        if (n >= N_FORWARD_CASES + N_BACKWARD_CASES + N_PAGED_CASES) {
            failures += run_append_case(c, n - N_FORWARD_CASES - N_BACKWARD_CASES - N_PAGED_CASES);
            continue;
        }
        if (n >= N_FORWARD_CASES + N_BACKWARD_CASES) {
            failures += run_paged_case(c, n - N_FORWARD_CASES - N_BACKWARD_CASES);
            continue;
        }
        if (n >= N_FORWARD_CASES) {
            failures += run_backward_case(c, n - N_FORWARD_CASES, 0);
            continue;
        }
        const driver_case *k = &cases[n];
        clflash_attention_desc d =
            th_desc(k->batch, k->heads_q, k->heads_kv, k->seq_q, k->seq_k, k->head_dim, k->dtype, k->flags);
        d.block = k->block;
        d.num_splits = k->splits;
        if (k->strided_o) /* two-element gaps after every O row, three before the first */
            d.o = (clflash_layout){3, 0, 0, k->head_dim + 2};
        char what[200], msg[2400];
        th_desc_str(&d, what, sizeof what);
        clflash_context *cc = c;
        if (k->cpu_path) {
            clflash_context_options opt = {.struct_size = sizeof opt};
            opt.tuning = "portable.cpu_path=1";
            opt.threads_per_row = k->cpu_path == 1 ? 1 : 0;
            if ((st = th_context(&opt, &cc)) != CLFLASH_SUCCESS) {
                printf("FAILED: no context: %s (%s)\n", clflash_status_string(st), clflash_last_error_detail());
                return 1;
            }
            snprintf(what + strlen(what), sizeof what - strlen(what), " cpu-path");
            clflash_plan p = {.struct_size = sizeof p};
            const char *want = k->cpu_path == 2 ? "flash_decode_cpu" : "flash_forward_portable";
            if (clflash_plan_attention(cc, &d, &p) != CLFLASH_SUCCESS || strcmp(p.kernel, want) != 0) {
                printf("FAILED flash %s: not planned as %s\n", what, want);
                failures++;
                clflash_context_free(cc);
                continue;
            }
        }
        char regtile[48];
        snprintf(regtile, sizeof regtile, "portable.regtile=%s", k->regtile ? k->regtile : "");
        if ((st = clflash_context_set_tuning(cc, regtile)) != CLFLASH_SUCCESS) {
            printf("FAILED flash %s: %s: %s (%s)\n", what, regtile, clflash_status_string(st), clflash_last_error_detail());
            failures++;
            if (cc != c)
                clflash_context_free(cc);
            continue;
        }
        if (k->regtile) {
            /* the configuration must be the one planned: the register-tiled kernel, its row groups, a
             * query block no larger than asked (short sequences shrink it) */
            unsigned rm = 0, tc = 0, bq = 0;
            clflash_plan p = {.struct_size = sizeof p};
            snprintf(what + strlen(what), sizeof what - strlen(what), " regtile=%s", k->regtile);
            if (sscanf(k->regtile, "%ux%ux%u", &rm, &tc, &bq) != 3 || clflash_plan_attention(c, &d, &p) != CLFLASH_SUCCESS ||
                strcmp(p.kernel, "flash_forward_regtile") != 0 || p.block_q > bq || p.threads_per_row != tc) {
                printf("FAILED flash %s: not planned as asked\n", what);
                failures++;
                continue;
            }
        }
        th_case t;
        if (th_case_init(&t, &d, 9000 + n) != 0) {
            printf("FAILED: out of host memory\n");
            return 1;
        }
        th_case_reference(&t);
        st = th_run_device(cc, &t, k->algo, 1, NULL);
        const char *algo = k->algo == TH_FLASH ? "flash" : "naive";
        if (st != CLFLASH_SUCCESS) {
            printf("FAILED %s %s: %s (%s)\n", algo, what, clflash_status_string(st), clflash_last_error_detail());
            failures++;
        } else if (th_check(&t, 1, k->algo == TH_FLASH ? REF_PATH_FLASH : REF_PATH_NAIVE, msg, sizeof msg)) {
            printf("MISMATCH %s %s: %s\n", algo, what, msg);
            failures++;
        } else {
            printf("ok %s %s\n", algo, what);
        }
        fflush(stdout);
        th_case_free(&t);
        if (cc != c)
            clflash_context_free(cc);
    }
    clflash_context_free(c);
    printf("%d of %zu cases failed\n", failures, last - first);
    return failures ? 1 : 0;
}
