/*
 * nv_wgmma_forward.cl - the forward pass on Hopper's warpgroup tensor-core instructions (wgmma),
 * built through the library's sm_90a PTX binary path (lib/sm90a.c). Assembled for
 * sm_90a in CI (tests/kernel_nvptx.cmake); the three loops below (WG_PIPE 0 and 1, WG_PRODUCER)
 * matched the fp64 reference on an H100 (2026-12-06, `test_nv_mma wgmma`: 68 of 68 each, the score
 * features included; the default loops 74 of 74 once the table had its window rows, and with one
 * O group, lazy rescaling and 160 registers a consumer; 80 of 80 with softcap at head_dim 128; 80
 * of 80 with the producer's tiles through TMA, WG_TMA, at head_dim 128 and 64; 80 of 80 with the
 * consumers' turns, with TMA and with cp.async; 2026-12-07, head_dim 256 and those padded to it,
 * 32 of 32).
 * The producer loop with TMA and turns, the default, runs at 1.4x nv_mma_forward's speed at
 * head_dim 64 and 1.55x at 128 (1.36-1.39x FlashAttention-2 at both, ahead of flex_attention);
 * with cp.async copies it ran 1.2x at 128, the waiting loop 1.01-1.03x at 64; the pipelined loop
 * is slower than all of them (docs/performance/h200.md). The planner
 * (lib/nv_wgmma_forward_plan.c) chooses it only where clflash_sm90a_available says yes, the call is
 * in scope (below) and the mode CLFLASH_WGMMA sets takes it (by default calls without a window and
 * with enough rows: nv_wgmma_forward_plan.c's auto_refusal). Everything else, and
 * every failure on the way, runs nv_mma_forward.
 *
 * Scope: f16 and bf16, head_dim 64, 128 or 256, or any multiple of 8 below 256 padded to the next of
 * them (D_REAL the tensors' head_dim, HEAD_DIM the padded one: Q's padding columns are zeros in
 * registers, K's and V's zeros in the tiles, O's are not stored, so the products add nothing for
 * them), rows of Q, K, V and O on 16 bytes (NV_ALIGNED), causal
 * or not, GQA (one query head per work-group, its K/V head hg / group), lse, and the score rules
 * of common.cl: sliding windows, softcap, ALiBi, key lengths and the diagonal's offset and
 * alignment; a bias in the producer loop with turns (read into registers, wg_load_bias).
 * The tiles a block does not see are skipped (block_key_range), the masks applied only on those
 * some row sees in part; with the causal mask or a window, in the producer loop with turns, each
 * warpgroup skips the products of the tiles its own rows do not see and masks by its own rows
 * (WG_OWN_ROWS). No paged caches, variable-length batches, split-KV or head packing: the
 * host never builds it with them (the #error below).
 *
 * Work: a work-group of WARPGROUPS warpgroups (128 work-items each) owns BLOCK_Q = 64 * WARPGROUPS
 * query rows of one (batch, head); warpgroup wg owns rows 64 wg .. 64 wg + 63, warp w of it rows
 * 16 w .. 16 w + 15 of those. Every K/V tile copied into local memory serves all BLOCK_Q rows, so
 * more warpgroups read fewer bytes from L2 per product (the host takes 3 beside the producer, 4 at
 * head_dim 64 without one: what the registers allow at one work-group per SM). For each key tile of BLOCK keys:
 *   S = Q K^T     wgmma m64n32k16 (BLOCK / 32 of them per k-step, one per 32 keys), A = Q from
 *                 registers (loaded once), B = the K tile in local memory through a descriptor,
 *                 fp32 accumulators, HEAD_DIM / 16 k-steps in one wgmma group;
 *   softmax       online, on the accumulators: the four lanes of a quad hold a row's values
 *                 (row max by shfl.sync), as in nv_mma_forward.cl; a row's reference maximum
 *                 moves only when a score passes it by more than 2^8 (WG_SLACK), and O and l
 *                 are rescaled only then;
 *   O += P V      P packed to f16/bf16 pairs in registers is the A operand (the S accumulator
 *                 layout is the A fragment layout), B = the V tile through a descriptor with the
 *                 transpose bit (V is stored [key][d], N-major for this product), wgmma m64n64k16,
 *                 fp32 accumulators in registers.
 * Every group of wgmma is fenced (wgmma.fence: its A registers and accumulators were written by
 * ordinary instructions) and committed inside one asm statement. Three loops, chosen by WG_PIPE and
 * WG_PRODUCER:
 *
 * WG_PIPE 0 waits for each group (wgmma.wait_group 0) in the asm statement that issues it, so that
 * the compiler never sees an accumulator before it is complete; O += P V is one group. The
 * tensor cores then idle during every softmax (about 170 instructions a tile) unless the other
 * warpgroups of the SM fill them.
 *
 * WG_PRODUCER 1 (nv_wgmma.producer, 1 by default) is WG_PIPE 0's loop without its
 * copies and barriers: one more warpgroup, the producer, streams K and V into rings of their own (3
 * K slots, 2 V slots) and hands each slot over through mbarriers (a full and an empty one a slot),
 * so that the consumer warpgroups never meet at a barrier of the work-group, each goes on to the
 * next tile as soon as it is in, and K streams up to two tiles ahead of the products. Its
 * consumers issue O += P V of one tile and S of the next as one pair and take turns at it
 * (wg_consume_in_turns), so that one warpgroup's products run during the others' softmaxes. The
 * producer keeps WG_PRODUCER_REGS registers (setmaxnreg.dec) and gives the rest to the consumers
 * (setmaxnreg.inc to WG_CONSUMER_REGS, which the host computes from the registers the work-group
 * gets at launch: asking for more than those never returns). With WG_TMA (nv_wgmma.tma, 1 by default
 * where (HEAD_DIM, BLOCK) is (128, 32), (64, 64) or (256, 16)) one work-item of the producer issues
 * each tile as whole boxes through the tensor memory accelerator instead (wg_tma_produce below), which the
 * wgmma descriptors read in the 128-byte swizzle: on an H100 the copies, not the products or the
 * softmax, had bounded the cp.async loop (384 TFLOP/s; 528 with the copies left out), and TMA
 * lifted it to 480 at head_dim 128.
 *
 * WG_PIPE 1 (nv_wgmma.pipeline=1; the default is 0) overlaps products with softmaxes
 * (FlashAttention-3's intra-warpgroup pipelining, without its ping-pong), fed by the producer's
 * rings (WG_PIPE implies WG_PRODUCER); its registers allow two consumer warpgroups. On an H100 it
 * ran at 263 TFLOP/s against the producer loop's 346 (head_dim 128, n = 4096): two warpgroups' rows
 * per K/V tile instead of three cost more than the overlap gains. Two key tiles a trip, j
 * and j + 1, S in two register sets: sa holds S of the even tiles, sb of the odd ones. A trip starts with S(j) complete in sa and no
 * group in flight:
 *     issue S(j + 1) -> sb;  softmax(j) on sa, O *= alpha, P(j) -> pa;  issue O += P(j) V(j)
 *     wait_group 1                        S(j + 1) complete; O(j) may still run
 *     issue S(j + 2) -> sa;  softmax(j + 1) on sb, P(j + 1) -> pb  (O not touched: in flight)
 *     wait_group 1                        O(j) complete; S(j + 2) may still run
 *     O *= alpha;  issue O += P(j + 1) V(j + 1);  wait_group 0
 * so three products of every four run during a softmax; the fourth is waited for at the end of the
 * trip, because ptxas (CUDA 13.0) was seen to serialise every product of the loop when a group
 * stayed in flight over its back edge. O += P V is one group there (both 64-column slabs at head_dim 128), since the
 * waits count groups. Past the last tile S(j + 2) is still issued, on a stale K slot, and nothing
 * reads it: the second wait then always has exactly one group behind it. An odd tile count ends
 * with the last tile alone. The PTX ISA forbids touching the accumulators or A registers of a group
 * in flight; the compiler sees separate asm statements, so after each wait the registers of the
 * groups it completed pass through empty volatile asm statements as "+f"/"+r" operands (wg_keep_s,
 * wg_keep_o): every later read takes its value from there, after the wait, and the A words of
 * O += P V (pa, pb) stay live, so their registers are not reused, until the group is complete.
 *
 * S is never one m64n64k16 product, though B = 64 would allow it: when the S group and the O group
 * are both m64n64k16 with A in registers, ptxas (CUDA 13.0, and the H200 driver's 580 JIT) gives
 * P's A words the registers of Q's A words, which the loop still needs: from the second key tile
 * on S was P of the tile before times K (every H200 result of head_dim 64 with more than 64 keys,
 * reproduced exactly by that model). With S in m64n32k16 products, the pairing that head_dim 128
 * runs right, ptxas keeps Q in registers of its own.
 *
 * Fragments (PTX ISA, "Register Fragments" of wgmma .m64nNk16; CUTLASS's ALayout_64x16 and
 * CLayout_64xN say the same): with g = lane / 4, t = lane % 4, warp w of the warpgroup,
 *   A (4 x 32-bit): word 0 row 16w + g, columns 2t, 2t + 1; word 1 row + 8; words 2 and 3 the same
 *                   columns + 8 (the mma.sync m16n8k16 A fragment, one per warp);
 *   D (N / 2 floats): d[4j], d[4j + 1] row 16w + g, columns 8j + 2t, 8j + 2t + 1; d[4j + 2],
 *                   d[4j + 3] the same columns of row 16w + g + 8.
 * So P's A fragment for keys 16u .. 16u + 15 is pack(d[8u], d[8u+1]), pack(d[8u+2], d[8u+3]),
 * pack(d[8u+4], d[8u+5]), pack(d[8u+6], d[8u+7]).
 *
 * Local memory (with WG_TMA the tiles' layout is the one at wg_desc_sw128 instead). K and V tiles
 * of BLOCK keys x HEAD_DIM: with WG_PRODUCER a ring of K_SLOTS (3) K
 * tiles and one of V_SLOTS (2) V tiles (tile t in K slot t % 3 and V slot t % 2; 40 KiB at
 * (HEAD_DIM, BLOCK) = (64, 64) and (128, 32)), else STAGES (2) stages of a K tile and its V tile
 * (32 KiB). Each is written by cp.async in the byte layout the descriptors describe: no swizzle
 * ("interleave"), 8 x 8 core matrices of 16-bit elements, each 8 rows of 16 bytes, 128 contiguous
 * bytes. A tile is kept chunk-major: the 16-byte piece of key n holding columns 8c .. 8c + 7 lies at
 *     tile + c * (16 BLOCK) + n * 16   (bytes),
 * so core matrix (keys 8r .. 8r + 7, columns 8c .. 8c + 7) starts at tile + c * 16 BLOCK + 128 r.
 * A descriptor (64 bits) holds: bits 0-13 start address / 16 (of the shared window, 18 bits), bits
 * 16-29 the leading dimension byte offset (LBO) / 16, bits 32-45 the stride dimension byte offset
 * (SBO) / 16, bits 49-51 base offset 0, bits 62-63 swizzle 0 (none). In the canonical layouts
 * without swizzle, LBO is the distance between core matrices neighbouring in K and SBO between
 * those neighbouring in M or N, for both major-nesses (CUTLASS's make_gmma_desc, INTERLEAVE; the
 * PTX ISA's table of strides, in 128-bit units: K-major "the stride from the first column to the
 * second column of the 8x2 tile", MN-major interleave "from the first 8 columns to the next 8",
 * columns being K there). The H200 agrees (swapping LBO and SBO breaks even one key tile):
 *   K-major (S = Q K^T, B = K^T: K is d, N the keys; the transpose bit 0): core rows are keys
 *     (N), each 16 bytes of 8 columns (K). LBO = 16 BLOCK (the next 8 columns), SBO = 128 (the
 *     next 8 keys); k-step kk (columns 16kk ..) starts at chunk 2kk: start + kk * 32 BLOCK bytes,
 *     and its keys 32 .. 63 four SBO (512 bytes) on.
 *   MN-major (O += P V, B = V: K is the keys, N is d; the transpose bit 1): core rows are keys
 *     (K), each 16 bytes of 8 columns (N, contiguous). LBO = 128 (the next 8 keys), SBO = 16 BLOCK
 *     (the next 8 columns); k-step u (keys 16u ..) starts 256 u bytes on, and the 64 columns from
 *     64 sl (the group for slab sl) at chunk 8 sl, 128 sl BLOCK bytes on.
 * Worked example, HEAD_DIM 128, BLOCK 32, a K tile at shared address 0x0400: k-step 3 starts at
 * 0x0400 + 3 * 1024 = 0x1000, descriptor 0x0000_0008_0020_0100 (start 0x100 = 0x1000 / 16, LBO 512 / 16 =
 * 0x20, SBO 128 / 16 = 8); its core matrix for keys 8 .. 15 and columns 56 .. 63 is at 0x1000 +
 * 512 + 128 = 0x1280, key 9's columns 56 .. 63 at 0x1290: the piece cp.async wrote for key 9,
 * chunk 7 (0x0400 + 7 * 512 + 9 * 16 = 0x1290). The V tile beside it (0x2400, BLOCK * HEAD_DIM * 2
 * = 8 KiB on) for slab 1, k-step 1: start 0x2400 + 128 * 1 * 32 + 256 = 0x3500, LBO 128, SBO 512,
 * descriptor 0x0000_0020_0008_0350. Every core matrix is 128 contiguous bytes, 16-byte aligned, so
 * wgmma reads each without bank conflicts; cp.async writes are spread over the banks by giving the
 * 8 work-items of each quarter warp 8 different keys of one chunk (wg_stream_tile).
 *
 * Barriers and proxies. wgmma reads local memory through the async proxy and cp.async writes it
 * through the generic one, so each work-item, once its copies are complete (cp.async.wait_group),
 * issues fence.proxy.async.shared::cta before the barrier that makes them everybody's; the barrier
 * also tells that every warpgroup's wgmma reads it waited for before it are complete, so that
 * their slots may be refilled. WG_PIPE 0: nv_mma_forward's pipeline, tiles j + 1 .. j + STAGES - 1
 * stream in while tile j is computed, one barrier per tile, which frees the stage of tile j - 1
 * (the loop without a producer).
 * WG_PRODUCER (both its loops): each of the producer's work-items arrives on a slot's full mbarrier through
 * cp.async.mbarrier.arrive.noinc, which fires once its copies are complete; each consumer work-item
 * waits on full, fences the async proxy itself (fence.proxy.async after the wait: the copies'
 * writes, made visible by the mbarrier, before its wgmma reads), and once its products of the slot
 * are complete (wgmma.wait_group 0 in the waiting loop; in the pipelined one the wait that completes
 * the group that read it) arrives on its empty mbarrier, which the producer waits on before it
 * refills the slot. The consumers read their Q fragments from global memory (no staging,
 * so no barrier), and synchronise the epilogue among themselves (named barrier 1), the producer
 * having ended.
 * Q is staged once through the same memory (rows padded by 16 bytes, as nv_mma_forward's; Q_PASS =
 * at most 128 rows at a time, since three or four warpgroups' rows would not fit) and read into A
 * fragments with ldmatrix, an ordinary read: a barrier before the tiles overwrite it. O passes
 * through it at the end, Q_PASS rows at a time after a barrier, for 16-byte coalesced stores.
 *
 * With CAUSAL the query blocks that see the most keys are launched first. A row with no visible
 * key ends with l = 0 and gets O = 0, lse = -inf. Keys at or past seq_k are zero-filled and masked.
 *
 * WG_PERSIST (nv_wgmma.persistent=1, with TMA) builds nv_wgmma_forward_persistent at
 * the end of the file instead of nv_wgmma_forward: the producer loop with TMA as one work-group per
 * SM that takes block after block, so that the producer streams a block's first tiles while the
 * consumers finish the one before.
 *
 * Head_dim 256 (HEAD_DIM 256: the host's from 136 up) runs in the producer loop with TMA only, one
 * block a work-group (not WG_PERSIST), with B = 16: S is sixteen m64n16k16 k-steps over the tile's
 * four boxes and O += P V four m64n64k16 slabs, one a box, in one group each; its rings hold 5 x 8
 * KiB. Q (64 words) and O (128 floats) fill two consumers' registers beside the producer (232 a
 * work-item), so the host gives it no softcap and no bias, whose registers spill there; Q and O
 * pass through local memory 64 rows at a time (Q_PASS).
 *
 * Defines: HEAD_DIM (64, 128 or 256), D_REAL (a multiple of 8, at most HEAD_DIM), NV_ALIGNED 1, BLOCK
 * (32 or 64; 16 at HEAD_DIM 256), WARPS = 4 * (WARPGROUPS + WG_PRODUCER), WARPGROUPS (1 to 4: the consumers with
 * WG_PRODUCER), STAGES (read by the waiting loop without a producer only), WG_PIPE (0 or 1; 1 with
 * WG_PRODUCER, and at HEAD_DIM 128 with BLOCK 32 only), WG_PRODUCER (0 or 1; then WG_PRODUCER_REGS
 * and WG_CONSUMER_REGS), WG_TMA (0 or 1, with WG_PRODUCER; then the kernel takes one more argument,
 * tma_maps), WG_Q_CHUNK (chunked_block_order's chunk; 0: all query blocks),
 * WG_PERSIST (0 or 1, with WG_TMA and WG_PIPE 0; then the kernel is
 * nv_wgmma_forward_persistent, which takes the batch size after tma_maps), CLFLASH_DTYPE_F16 or
 * _BF16, CAUSAL, WINDOW, SOFTCAP, ALIBI, KEYLEN, KEYLEN_DIAGONAL, WITH_LSE, BIAS (not with ALiBi), VARLEN 0,
 * SPLIT 0, PACK 1, PAGED 0. The helpers (copy16_async, load_matrix_x4, pack_pair, exp2_ftz,
 * lane_xor, stage_rows; THREADS, ROW_STRIDE, CHUNKS, K_STEPS) come from nv_mma_common.cl, which the
 * host puts before this file. */

#ifndef WG_PRODUCER
#define WG_PRODUCER 0
#endif
#ifndef WG_TMA
#define WG_TMA 0
#endif
#ifndef WG_PERSIST
#define WG_PERSIST 0
#endif
#ifndef WG_Q_CHUNK
#error "WG_Q_CHUNK is set by the host (lib/nv_wgmma_forward_plan.c)"
#endif
#if !defined(WARPGROUPS) || !defined(STAGES) || !defined(WG_PIPE) || WARPS != 4 * (WARPGROUPS + WG_PRODUCER)
#error "WARPGROUPS, STAGES, WG_PIPE, WG_PRODUCER and WARPS = 4 * (WARPGROUPS + WG_PRODUCER) are set by the host (lib/nv_wgmma_forward_plan.c)"
#endif
#if WG_PRODUCER && (!defined(WG_PRODUCER_REGS) || !defined(WG_CONSUMER_REGS))
#error "the producer warpgroup (WG_PRODUCER) needs WG_PRODUCER_REGS and WG_CONSUMER_REGS"
#endif
#if WG_PIPE && !WG_PRODUCER
#error "the pipelined loop (WG_PIPE) is fed by the producer warpgroup (WG_PRODUCER)"
#endif
#if (HEAD_DIM != 64 && HEAD_DIM != 128 && HEAD_DIM != 256) || D_REAL > HEAD_DIM || D_REAL % 8 != 0 || !NV_ALIGNED
#error "nv_wgmma_forward takes head_dims that are multiples of 8, padded to 64, 128 or 256, with 16-byte aligned rows"
#endif
#if HEAD_DIM == 256 ? BLOCK != 16 : BLOCK != 32 && BLOCK != 64
#error "nv_wgmma_forward takes BLOCK 32 or 64, and 16 at head_dim 256"
#endif
#if HEAD_DIM == 256 && (!WG_TMA || WG_PERSIST)
#error "head_dim 256 runs in the producer loop with TMA copies, a block a work-group (WG_TMA, not WG_PERSIST)"
#endif
#if VARLEN || SPLIT || PACK != 1 || PAGED
#error "nv_wgmma_forward takes no variable-length batch, split-KV, head packing or paged cache (lib/nv_wgmma_forward_plan.c)"
#endif
#if BIAS && (!WG_PRODUCER || WG_PIPE)
#error "nv_wgmma_forward takes a bias in the producer loop with turns (WG_PRODUCER, not WG_PIPE)"
#endif
#if STAGES < 2
#error "STAGES must be at least 2"
#endif
#if WG_TMA && (!WG_PRODUCER || WG_PIPE || HEAD_DIM * BLOCK != 4096)
#error "the TMA copies (WG_TMA) feed the producer loop at (head_dim, BLOCK) (128, 32), (64, 64) or (256, 16)"
#endif

#define BLOCK_Q (64 * WARPGROUPS)
#define TILE_HALVES (BLOCK * HEAD_DIM)     /* one K or V tile */
#define STAGE_HALVES (2 * TILE_HALVES)     /* a K tile and its V tile */
/* rows of Q (and O) staged at a time: 64 at head_dim 256, whose 128 padded rows take 66 KiB */
#define Q_PASS (HEAD_DIM == 256 ? 64 : BLOCK_Q > 128 ? 128 : BLOCK_Q)
#define Q_HALVES (Q_PASS * ROW_STRIDE)     /* Q (and O) staged in padded rows */
#if WG_PRODUCER
#define K_SLOTS 3                          /* the K ring: tiles t .. t + 2 */
#define V_SLOTS 2                          /* the V ring: tiles t and t + 1 */
#define WG_RING_CYCLE 12                   /* tiles after which both rings' slots and phases repeat */
#define KV_HALVES ((K_SLOTS + V_SLOTS) * TILE_HALVES)
#else
#define KV_HALVES (STAGES * STAGE_HALVES)
#endif
#define LOCAL_HALVES (KV_HALVES > Q_HALVES ? KV_HALVES : Q_HALVES)
#define S_ACC (BLOCK / 2)                  /* S accumulators per work-item */
/* Head_dims 72 .. 96, padded to 128 (WG_D96): S takes 6 k-steps, not 8, and O 96 columns, not 128
 * (the slab of columns 64 .. 95 one m64n32k16 a k-step), since the padding past 96 adds nothing;
 * the tiles keep head_dim 128's layout. */
#ifndef WG_TRIM
#define WG_TRIM 1 /* 0 (a build option): head_dims 72 .. 96 computed as 128, to compare */
#endif
#define WG_D96 (WG_TRIM && HEAD_DIM == 128 && D_REAL <= 96)
#define QK_STEPS (WG_D96 ? 6 : K_STEPS)    /* k-steps of S = Q K^T: Q's A words, 4 a step */
#define O_COLS (WG_D96 ? 96 : HEAD_DIM)    /* columns of O computed */
#define O_ACC (O_COLS / 2)                 /* O accumulators per work-item */
#define O_SLABS (HEAD_DIM / 64)            /* slabs of O += P V, 64 columns each */
#define WG_SLACK 8.0f                      /* log2 of how far a score may pass its row's reference */
#define P_STEPS (BLOCK / 16)               /* k16 steps of O += P V */
#define PIECES (BLOCK * CHUNKS)            /* 16-byte pieces of a tile */
#if CHUNKS % 4 != 0
#error "a tile's pieces are copied in runs of 4 chunks"
#endif

/* The operand types in the wgmma mnemonics. */
#if defined(CLFLASH_DTYPE_F16)
#define WG_T "f16"
#else
#define WG_T "bf16"
#endif

/* ---- the wgmma groups -------------------------------------------------------------------------
 * Each text is one asm statement's: a PTX scope, the descriptors of the group's k-steps (the first
 * an operand, each next one the previous plus the constant step, the "n" operand), wgmma.fence,
 * the wgmma.mma_async of every k-step, and `end`: commit, and wait for it or not (WG_END_WAIT,
 * WG_END_ASYNC below). Operands: the accumulators first (%0
 * ..), then the A words of every k-step, four each, then the first descriptor and the step; the S
 * group also takes the byte offset / 16 of keys 32 .. 63 (h<k>: the k-step's descriptor plus it),
 * used where BLOCK is 64: the second m64n32k16 of each k-step writes accumulators 16 .. 31 (keys
 * 32 .. 63, the same fragment layout as one m64n64k16). The S group's first product (of each 32
 * keys) overwrites the accumulators (scale-d false: a predicate set from an A word compared with
 * itself), the others add; the O groups always add. The trailing immediates are scale-a 1,
 * scale-b 1 and the transpose of B: 0 (K, K-major) or 1 (V, N-major). */
#if BLOCK == 32 && QK_STEPS == 4
#define WG_S_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<4>;\n" \
    "// sm90a: setp.ne.b32 over, %16, %16;\n" \
    "// sm90a: setp.eq.b32 acc, %16, %16;\n" \
    "// sm90a: mov.b64 k0, %32;\n" \
    "// sm90a: add.s64 k1, k0, %33;\n" \
    "// sm90a: add.s64 k2, k1, %33;\n" \
    "// sm90a: add.s64 k3, k2, %33;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%20, %21, %22, %23}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%24, %25, %26, %27}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%28, %29, %30, %31}, k3, acc, 1, 1, 0;\n" \
    end
#elif BLOCK == 32 && QK_STEPS == 8
#define WG_S_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<8>;\n" \
    "// sm90a: setp.ne.b32 over, %16, %16;\n" \
    "// sm90a: setp.eq.b32 acc, %16, %16;\n" \
    "// sm90a: mov.b64 k0, %48;\n" \
    "// sm90a: add.s64 k1, k0, %49;\n" \
    "// sm90a: add.s64 k2, k1, %49;\n" \
    "// sm90a: add.s64 k3, k2, %49;\n" \
    "// sm90a: add.s64 k4, k3, %49;\n" \
    "// sm90a: add.s64 k5, k4, %49;\n" \
    "// sm90a: add.s64 k6, k5, %49;\n" \
    "// sm90a: add.s64 k7, k6, %49;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%20, %21, %22, %23}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%24, %25, %26, %27}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%28, %29, %30, %31}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%32, %33, %34, %35}, k4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%36, %37, %38, %39}, k5, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%40, %41, %42, %43}, k6, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%44, %45, %46, %47}, k7, acc, 1, 1, 0;\n" \
    end
#elif BLOCK == 32 && QK_STEPS == 6
#define WG_S_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<6>;\n" \
    "// sm90a: setp.ne.b32 over, %16, %16;\n" \
    "// sm90a: setp.eq.b32 acc, %16, %16;\n" \
    "// sm90a: mov.b64 k0, %40;\n" \
    "// sm90a: add.s64 k1, k0, %41;\n" \
    "// sm90a: add.s64 k2, k1, %41;\n" \
    "// sm90a: add.s64 k3, k2, %41;\n" \
    "// sm90a: add.s64 k4, k3, %41;\n" \
    "// sm90a: add.s64 k5, k4, %41;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%20, %21, %22, %23}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%24, %25, %26, %27}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%28, %29, %30, %31}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%32, %33, %34, %35}, k4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%36, %37, %38, %39}, k5, acc, 1, 1, 0;\n" \
    end
#elif BLOCK == 64 && QK_STEPS == 4
#define WG_S_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<4>;\n" \
    "// sm90a: .reg .b64 h<4>;\n" \
    "// sm90a: setp.ne.b32 over, %32, %32;\n" \
    "// sm90a: setp.eq.b32 acc, %32, %32;\n" \
    "// sm90a: mov.b64 k0, %48;\n" \
    "// sm90a: add.s64 k1, k0, %49;\n" \
    "// sm90a: add.s64 k2, k1, %49;\n" \
    "// sm90a: add.s64 k3, k2, %49;\n" \
    "// sm90a: add.s64 h0, k0, %50;\n" \
    "// sm90a: add.s64 h1, k1, %50;\n" \
    "// sm90a: add.s64 h2, k2, %50;\n" \
    "// sm90a: add.s64 h3, k3, %50;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%32, %33, %34, %35}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, h0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%36, %37, %38, %39}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%36, %37, %38, %39}, h1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%40, %41, %42, %43}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%40, %41, %42, %43}, h2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%44, %45, %46, %47}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%44, %45, %46, %47}, h3, acc, 1, 1, 0;\n" \
    end
#elif BLOCK == 64 && QK_STEPS == 8
#define WG_S_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<8>;\n" \
    "// sm90a: .reg .b64 h<8>;\n" \
    "// sm90a: setp.ne.b32 over, %32, %32;\n" \
    "// sm90a: setp.eq.b32 acc, %32, %32;\n" \
    "// sm90a: mov.b64 k0, %64;\n" \
    "// sm90a: add.s64 k1, k0, %65;\n" \
    "// sm90a: add.s64 k2, k1, %65;\n" \
    "// sm90a: add.s64 k3, k2, %65;\n" \
    "// sm90a: add.s64 k4, k3, %65;\n" \
    "// sm90a: add.s64 k5, k4, %65;\n" \
    "// sm90a: add.s64 k6, k5, %65;\n" \
    "// sm90a: add.s64 k7, k6, %65;\n" \
    "// sm90a: add.s64 h0, k0, %66;\n" \
    "// sm90a: add.s64 h1, k1, %66;\n" \
    "// sm90a: add.s64 h2, k2, %66;\n" \
    "// sm90a: add.s64 h3, k3, %66;\n" \
    "// sm90a: add.s64 h4, k4, %66;\n" \
    "// sm90a: add.s64 h5, k5, %66;\n" \
    "// sm90a: add.s64 h6, k6, %66;\n" \
    "// sm90a: add.s64 h7, k7, %66;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%32, %33, %34, %35}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, h0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%36, %37, %38, %39}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%36, %37, %38, %39}, h1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%40, %41, %42, %43}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%40, %41, %42, %43}, h2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%44, %45, %46, %47}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%44, %45, %46, %47}, h3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%48, %49, %50, %51}, k4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%48, %49, %50, %51}, h4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%52, %53, %54, %55}, k5, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%52, %53, %54, %55}, h5, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%56, %57, %58, %59}, k6, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%56, %57, %58, %59}, h6, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%60, %61, %62, %63}, k7, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%60, %61, %62, %63}, h7, acc, 1, 1, 0;\n" \
    end
#endif
#if WG_TMA && QK_STEPS == 6
/* WG_S_TMA_TEXT (below) at WG_D96: k-steps 0 .. 3 in the first box, 4 and 5 in the second. */
#define WG_S_TMA_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<6>;\n" \
    "// sm90a: setp.ne.b32 over, %16, %16;\n" \
    "// sm90a: setp.eq.b32 acc, %16, %16;\n" \
    "// sm90a: mov.b64 k0, %40;\n" \
    "// sm90a: add.s64 k1, k0, %41;\n" \
    "// sm90a: add.s64 k2, k1, %41;\n" \
    "// sm90a: add.s64 k3, k2, %41;\n" \
    "// sm90a: add.s64 k4, k0, %42;\n" \
    "// sm90a: add.s64 k5, k4, %41;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%20, %21, %22, %23}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%24, %25, %26, %27}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%28, %29, %30, %31}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%32, %33, %34, %35}, k4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%36, %37, %38, %39}, k5, acc, 1, 1, 0;\n" \
    end
#elif WG_TMA && K_STEPS == 8
/* The S group on K tiles in the 128-byte swizzle (WG_TMA, head_dim 128): k-steps 0 .. 3 read
 * columns 0 .. 63 of the tile's first box, 32 bytes apart (%49 / 16), and k-steps 4 .. 7 the second
 * box, %50 / 16 on. (At head_dim 64 WG_S_TEXT serves: one box, k-steps 32 bytes apart, keys 32 .. 63
 * four 1024-byte key groups on.) */
#define WG_S_TMA_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<8>;\n" \
    "// sm90a: setp.ne.b32 over, %16, %16;\n" \
    "// sm90a: setp.eq.b32 acc, %16, %16;\n" \
    "// sm90a: mov.b64 k0, %48;\n" \
    "// sm90a: add.s64 k1, k0, %49;\n" \
    "// sm90a: add.s64 k2, k1, %49;\n" \
    "// sm90a: add.s64 k3, k2, %49;\n" \
    "// sm90a: add.s64 k4, k0, %50;\n" \
    "// sm90a: add.s64 k5, k4, %49;\n" \
    "// sm90a: add.s64 k6, k5, %49;\n" \
    "// sm90a: add.s64 k7, k6, %49;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%20, %21, %22, %23}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%24, %25, %26, %27}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%28, %29, %30, %31}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%32, %33, %34, %35}, k4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%36, %37, %38, %39}, k5, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%40, %41, %42, %43}, k6, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%44, %45, %46, %47}, k7, acc, 1, 1, 0;\n" \
    end
#elif WG_TMA && K_STEPS == 16
/* The S group at head_dim 256 (BLOCK 16, WG_TMA): sixteen m64n16k16 k-steps, four in each of the
 * tile's four boxes (k-steps 32 bytes apart, %73 / 16; the next box %74 / 16 on). Operands: the 8
 * accumulators, the 64 A words, the first descriptor, the two steps. */
#define WG_S256_TMA_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred over, acc;\n" \
    "// sm90a: .reg .b64 k<16>;\n" \
    "// sm90a: setp.ne.b32 over, %8, %8;\n" \
    "// sm90a: setp.eq.b32 acc, %8, %8;\n" \
    "// sm90a: mov.b64 k0, %72;\n" \
    "// sm90a: add.s64 k1, k0, %73;\n" \
    "// sm90a: add.s64 k2, k1, %73;\n" \
    "// sm90a: add.s64 k3, k2, %73;\n" \
    "// sm90a: add.s64 k4, k0, %74;\n" \
    "// sm90a: add.s64 k5, k4, %73;\n" \
    "// sm90a: add.s64 k6, k5, %73;\n" \
    "// sm90a: add.s64 k7, k6, %73;\n" \
    "// sm90a: add.s64 k8, k4, %74;\n" \
    "// sm90a: add.s64 k9, k8, %73;\n" \
    "// sm90a: add.s64 k10, k9, %73;\n" \
    "// sm90a: add.s64 k11, k10, %73;\n" \
    "// sm90a: add.s64 k12, k8, %74;\n" \
    "// sm90a: add.s64 k13, k12, %73;\n" \
    "// sm90a: add.s64 k14, k13, %73;\n" \
    "// sm90a: add.s64 k15, k14, %73;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, k0, over, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%12, %13, %14, %15}, k1, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%16, %17, %18, %19}, k2, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%20, %21, %22, %23}, k3, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%24, %25, %26, %27}, k4, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%28, %29, %30, %31}, k5, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%32, %33, %34, %35}, k6, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%36, %37, %38, %39}, k7, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%40, %41, %42, %43}, k8, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%44, %45, %46, %47}, k9, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%48, %49, %50, %51}, k10, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%52, %53, %54, %55}, k11, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%56, %57, %58, %59}, k12, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%60, %61, %62, %63}, k13, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%64, %65, %66, %67}, k14, acc, 1, 1, 0;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n16k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%68, %69, %70, %71}, k15, acc, 1, 1, 0;\n" \
    end
#endif
#if BLOCK == 32
#define WG_PV_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred acc;\n" \
    "// sm90a: .reg .b64 v<2>;\n" \
    "// sm90a: setp.eq.b32 acc, %32, %32;\n" \
    "// sm90a: mov.b64 v0, %40;\n" \
    "// sm90a: add.s64 v1, v0, %41;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, v0, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%36, %37, %38, %39}, v1, acc, 1, 1, 1;\n" \
    end
#elif BLOCK == 64
#define WG_PV_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred acc;\n" \
    "// sm90a: .reg .b64 v<4>;\n" \
    "// sm90a: setp.eq.b32 acc, %32, %32;\n" \
    "// sm90a: mov.b64 v0, %48;\n" \
    "// sm90a: add.s64 v1, v0, %49;\n" \
    "// sm90a: add.s64 v2, v1, %49;\n" \
    "// sm90a: add.s64 v3, v2, %49;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, v0, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%36, %37, %38, %39}, v1, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%40, %41, %42, %43}, v2, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%44, %45, %46, %47}, v3, acc, 1, 1, 1;\n" \
    end
#endif

/* Operand lists: "=f" or "+f" for floats a[i] .. a[i + n - 1], "r" for words. */
#define WG_OUT4(a, i) "=f"(a[(i)]), "=f"(a[(i) + 1]), "=f"(a[(i) + 2]), "=f"(a[(i) + 3])
#define WG_OUT16(a, i) WG_OUT4(a, i), WG_OUT4(a, (i) + 4), WG_OUT4(a, (i) + 8), WG_OUT4(a, (i) + 12)
#define WG_OUT32(a, i) WG_OUT16(a, i), WG_OUT16(a, (i) + 16)
#define WG_ACC4(a, i) "+f"(a[(i)]), "+f"(a[(i) + 1]), "+f"(a[(i) + 2]), "+f"(a[(i) + 3])
#define WG_ACC16(a, i) WG_ACC4(a, i), WG_ACC4(a, (i) + 4), WG_ACC4(a, (i) + 8), WG_ACC4(a, (i) + 12)
#define WG_ACC32(a, i) WG_ACC16(a, i), WG_ACC16(a, (i) + 16)
#define WG_IN4(w, i) "r"(w[(i)]), "r"(w[(i) + 1]), "r"(w[(i) + 2]), "r"(w[(i) + 3])
#define WG_IN8(w, i) WG_IN4(w, i), WG_IN4(w, (i) + 4)
#define WG_IN16(w, i) WG_IN8(w, i), WG_IN8(w, (i) + 8)
#define WG_IN32(w, i) WG_IN16(w, i), WG_IN16(w, (i) + 16)
#if S_ACC == 8
#define WG_S_OUT(s) WG_OUT4(s, 0), WG_OUT4(s, 4)
#elif S_ACC == 16
#define WG_S_OUT(s) WG_OUT16(s, 0)
#else
#define WG_S_OUT(s) WG_OUT32(s, 0)
#endif
#if QK_STEPS == 4
#define WG_Q_IN(q) WG_IN16(q, 0)
#elif QK_STEPS == 6
#define WG_Q_IN(q) WG_IN16(q, 0), WG_IN8(q, 16)
#elif QK_STEPS == 16
#define WG_Q_IN(q) WG_IN32(q, 0), WG_IN32(q, 32)
#else
#define WG_Q_IN(q) WG_IN32(q, 0)
#endif
#if P_STEPS == 1
#define WG_P_IN(p) WG_IN4(p, 0)
#elif P_STEPS == 2
#define WG_P_IN(p) WG_IN8(p, 0)
#else
#define WG_P_IN(p) WG_IN16(p, 0)
#endif
#define WG_KEEP4(w, i) "+r"(w[(i)]), "+r"(w[(i) + 1]), "+r"(w[(i) + 2]), "+r"(w[(i) + 3])
#define WG_KEEP8(w, i) WG_KEEP4(w, i), WG_KEEP4(w, (i) + 4)

/* The end of every group's text: commit it, and wait for it (the loop of WG_PIPE 0) or leave it in
 * flight (WG_PIPE 1, where a later wg_wait completes it). */
#define WG_END_WAIT \
    "// sm90a: wgmma.commit_group.sync.aligned;\n" \
    "// sm90a: wgmma.wait_group.sync.aligned 0;\n" \
    "// sm90a: }\n"
#define WG_END_ASYNC \
    "// sm90a: wgmma.commit_group.sync.aligned;\n" \
    "// sm90a: }\n"

#if O_SLABS == 2
#if BLOCK != 32
#error "head_dim 128 takes BLOCK 32 (five tiles of B 64 are 80 KiB)"
#endif
/* O += P V over all 128 columns of O as one group (one wait for both slabs; WG_PIPE 1 counts
 * groups in its waits): the
 * slab of columns 64 .. 127 writes accumulators 32 .. 63 from V's chunk 8 on (%74: its offset / 16
 * from the first descriptor). Operands: the 64 accumulators, P's 8 A words, the descriptor, the
 * k-step's offset / 16 (%73), the slab's. */
#define WG_PV2_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred acc;\n" \
    "// sm90a: .reg .b64 v<4>;\n" \
    "// sm90a: setp.eq.b32 acc, %64, %64;\n" \
    "// sm90a: mov.b64 v0, %72;\n" \
    "// sm90a: add.s64 v1, v0, %73;\n" \
    "// sm90a: add.s64 v2, v0, %74;\n" \
    "// sm90a: add.s64 v3, v2, %73;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%64, %65, %66, %67}, v0, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%68, %69, %70, %71}, v1, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, v2, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%68, %69, %70, %71}, v3, acc, 1, 1, 1;\n" \
    end
#endif

#if O_SLABS == 4
/* O += P V at head_dim 256 (BLOCK 16: one k-step of 16 keys) as one group: slab s, columns 64 s ..
 * 64 s + 63 into accumulators 32 s .. 32 s + 31, reads V's box s (%133 / 16 apart). Operands: the
 * 128 accumulators, P's 4 A words, the descriptor, the step between boxes. */
#define WG_PV4_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred acc;\n" \
    "// sm90a: .reg .b64 v<4>;\n" \
    "// sm90a: setp.eq.b32 acc, %128, %128;\n" \
    "// sm90a: mov.b64 v0, %132;\n" \
    "// sm90a: add.s64 v1, v0, %133;\n" \
    "// sm90a: add.s64 v2, v1, %133;\n" \
    "// sm90a: add.s64 v3, v2, %133;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%128, %129, %130, %131}, v0, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%128, %129, %130, %131}, v1, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, {%128, %129, %130, %131}, v2, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, v3, acc, 1, 1, 1;\n" \
    end
#endif

#if WG_D96
/* O += P V over columns 0 .. 95 (WG_D96) as one group: the slab of columns 64 .. 95 is one
 * m64n32k16 a k-step into accumulators 32 .. 47. Operands: the 48 accumulators, P's 8 A words, the
 * descriptor, the k-step's offset / 16 (%57), the slab's (%58). */
#define WG_PV96_TEXT(end) \
    "// sm90a: {\n" \
    "// sm90a: .reg .pred acc;\n" \
    "// sm90a: .reg .b64 v<4>;\n" \
    "// sm90a: setp.eq.b32 acc, %48, %48;\n" \
    "// sm90a: mov.b64 v0, %56;\n" \
    "// sm90a: add.s64 v1, v0, %57;\n" \
    "// sm90a: add.s64 v2, v0, %58;\n" \
    "// sm90a: add.s64 v3, v2, %57;\n" \
    "// sm90a: wgmma.fence.sync.aligned;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%48, %49, %50, %51}, v0, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_T "." WG_T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%52, %53, %54, %55}, v1, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, v2, acc, 1, 1, 1;\n" \
    "// sm90a: wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_T "." WG_T " {%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%52, %53, %54, %55}, v3, acc, 1, 1, 1;\n" \
    end
#endif

/* The descriptors' byte offsets (the file's comment). Defaults, not host defines: a session on a
 * Hopper GPU can try another reading of the PTX ISA's LBO and SBO through the build options
 * (CLFLASH_TEST_BUILD_OPTIONS="-D WG_V_LBO=... -D WG_V_SBO=..." for test_nv_mma wgmma) without an edit. */
#ifndef WG_K_LBO
#define WG_K_LBO (16 * BLOCK) /* K: the next 8 columns (d) */
#endif
#ifndef WG_K_SBO
#define WG_K_SBO 128 /* K: the next 8 keys */
#endif
#ifndef WG_V_LBO
#define WG_V_LBO 128 /* V: the next 8 keys */
#endif
#ifndef WG_V_SBO
#define WG_V_SBO (16 * BLOCK) /* V: the next 8 columns (d) */
#endif

/* A shared memory matrix descriptor without swizzle (the file's comment): start address, LBO and
 * SBO in bytes, each a multiple of 16. */
static inline ulong wg_desc(__local const ushort *start, uint lbo, uint sbo)
{
    return (ulong)((shared_addr(start) & 0x3ffffu) >> 4) | ((ulong)(lbo >> 4) << 16) | ((ulong)(sbo >> 4) << 32);
}

#if WG_TMA
/* K and V tiles as the tensor memory accelerator writes them (WG_TMA): each tile is HEAD_DIM / 64
 * boxes of BLOCK keys x 64 columns (4 KiB at head_dim 128: columns 0 .. 63, then 64 .. 127; one box
 * of 8 KiB at 64), a box's key n at byte 128 n,
 * its 16-byte chunk c at chunk c ^ (n % 8) (the 128-byte swizzle, on 1024-byte aligned boxes). The
 * descriptors (swizzle mode 1, base offset 0): K-major for K, the 8-key groups 1024 bytes apart (SBO;
 * LBO unused, 1), a k-step 32 bytes further in its box; N-major for V, the 8-key groups 1024 bytes
 * apart (SBO) and the next 64 columns a box on (LBO, unused by an N of 64), a k-step of 16 keys 2048
 * bytes on. */
#define WG_BOX_BYTES (BLOCK * 128)
static inline ulong wg_desc_sw128(__local const ushort *start, uint lbo, uint sbo)
{
    return wg_desc(start, lbo, sbo) | (1ul << 62);
}
#endif

/* The descriptors of a K tile and of a V tile (the file's comment; wg_desc_sw128 with WG_TMA). */
static inline ulong wg_k_desc(__local const ushort *tile)
{
#if WG_TMA
    return wg_desc_sw128(tile, 16, 1024);
#else
    return wg_desc(tile, WG_K_LBO, WG_K_SBO);
#endif
}

static inline ulong wg_v_desc(__local const ushort *tile)
{
#if WG_TMA
    return wg_desc_sw128(tile, WG_BOX_BYTES, 1024);
#else
    return wg_desc(tile, WG_V_LBO, WG_V_SBO);
#endif
}

/* The S group over one K tile (every k-step) into s, from q the warpgroup's A words (4 per
 * k-step) and desc the tile's descriptor, ending with `end` (WG_END_WAIT or WG_END_ASYNC). */
#if WG_TMA && K_STEPS == 16
#define WG_SCORES_ASM(s, q, desc, end) \
    __asm__ __volatile__(WG_S256_TMA_TEXT(end) \
                         : WG_S_OUT(s) : WG_Q_IN(q), "l"(desc), "n"(2), "n"(WG_BOX_BYTES / 16) : "memory")
#elif WG_TMA && (K_STEPS == 8 || QK_STEPS == 6)
#define WG_SCORES_ASM(s, q, desc, end) \
    __asm__ __volatile__(WG_S_TMA_TEXT(end) \
                         : WG_S_OUT(s) : WG_Q_IN(q), "l"(desc), "n"(2), "n"(WG_BOX_BYTES / 16) : "memory")
#elif WG_TMA
#define WG_SCORES_ASM(s, q, desc, end) \
    __asm__ __volatile__(WG_S_TEXT(end) : WG_S_OUT(s) : WG_Q_IN(q), "l"(desc), "n"(2), "n"(4 * 1024 / 16) : "memory")
#else
#define WG_SCORES_ASM(s, q, desc, end) \
    __asm__ __volatile__(WG_S_TEXT(end) \
                         : WG_S_OUT(s) : WG_Q_IN(q), "l"(desc), "n"(2 * BLOCK), "n"(4 * WG_K_SBO / 16) \
                         : "memory")
#endif

/* s = Q K^T over one K tile (every k-step): q the warpgroup's A words (4 per k-step), tile the K
 * tile. Returns when the products are complete (the loop of WG_PIPE 0). */
static inline void wg_scores(float s[S_ACC], const uint q[4 * QK_STEPS], __local const ushort *tile)
{
    const ulong desc = wg_k_desc(tile);
    WG_SCORES_ASM(s, q, desc, WG_END_WAIT);
}

/* o += P V, every column of O in one group: p the A words of P (4 per 16 keys), tile the V tile.
 * Returns when the products are complete (the loop of WG_PIPE 0). One group and one wait for both
 * slabs at head_dim 128: on an H100 344-347 TFLOP/s against 338-339 with a group and a wait a slab
 * (docs/performance/h200.md). */
#if O_SLABS == 4
/* one k-step of 16 keys; the slabs a box apart (WG_TMA) */
#define WG_VALUES_ASM(o, p, desc, end) \
    __asm__ __volatile__(WG_PV4_TEXT(end) \
                         : WG_ACC32(o, 0), WG_ACC32(o, 32), WG_ACC32(o, 64), WG_ACC32(o, 96) \
                         : WG_P_IN(p), "l"(desc), "n"(WG_BOX_BYTES / 16) \
                         : "memory")
#elif O_SLABS == 1
/* a k-step of 16 keys 256 bytes on, 2048 in the 128-byte swizzle (WG_TMA) */
#define WG_VALUES_ASM(o, p, desc, end) \
    __asm__ __volatile__(WG_PV_TEXT(end) : WG_ACC32(o, 0) : WG_P_IN(p), "l"(desc), "n"(WG_TMA ? 128 : 16) : "memory")
#elif WG_D96 && WG_TMA
#define WG_VALUES_ASM(o, p, desc, end) \
    __asm__ __volatile__(WG_PV96_TEXT(end) \
                         : WG_ACC32(o, 0), WG_ACC16(o, 32) : WG_P_IN(p), "l"(desc), "n"(2048 / 16), \
                           "n"(WG_BOX_BYTES / 16) \
                         : "memory")
#elif WG_D96
#define WG_VALUES_ASM(o, p, desc, end) \
    __asm__ __volatile__(WG_PV96_TEXT(end) \
                         : WG_ACC32(o, 0), WG_ACC16(o, 32) : WG_P_IN(p), "l"(desc), "n"(16), "n"(64 * BLOCK * 2 / 16) \
                         : "memory")
#elif WG_TMA
/* a k-step of 16 keys 2048 bytes on, the slab of columns 64 .. 127 a box on */
#define WG_VALUES_ASM(o, p, desc, end) \
    __asm__ __volatile__(WG_PV2_TEXT(end) \
                         : WG_ACC32(o, 0), WG_ACC32(o, 32) : WG_P_IN(p), "l"(desc), "n"(2048 / 16), \
                           "n"(WG_BOX_BYTES / 16) \
                         : "memory")
#else
#define WG_VALUES_ASM(o, p, desc, end) \
    __asm__ __volatile__(WG_PV2_TEXT(end) \
                         : WG_ACC32(o, 0), WG_ACC32(o, 32) : WG_P_IN(p), "l"(desc), "n"(16), "n"(64 * BLOCK * 2 / 16) \
                         : "memory")
#endif
static inline void wg_values(float o[O_ACC], const uint p[4 * P_STEPS], __local const ushort *tile)
{
    const ulong desc = wg_v_desc(tile);
    WG_VALUES_ASM(o, p, desc, WG_END_WAIT);
}

#if WG_PRODUCER
/* The same two products left in flight (the loops fed by the producer): each is one committed
 * wgmma group that a later wg_wait completes. Until then neither its accumulators (s, o) nor its A
 * words (q, p) may be read or written by anything; the wg_keep_* after that wait hand them back to
 * the compiler. */
static inline void wg_scores_issue(float s[S_ACC], const uint q[4 * QK_STEPS], __local const ushort *tile)
{
    const ulong desc = wg_k_desc(tile);
    WG_SCORES_ASM(s, q, desc, WG_END_ASYNC);
}

/* O += P V, every column of O in one group (both slabs at head_dim 128). */
static inline void wg_values_issue(float o[O_ACC], const uint p[4 * P_STEPS], __local const ushort *tile)
{
    const ulong desc = wg_v_desc(tile);
    WG_VALUES_ASM(o, p, desc, WG_END_ASYNC);
}

/* Waits until at most n (a constant) of this warpgroup's wgmma groups are in flight: the older ones
 * are complete. */
#define wg_wait(n) __asm__ __volatile__("// sm90a: wgmma.wait_group.sync.aligned %0;\n" ::"n"(n) : "memory")

/* After a wg_wait: the registers of the groups it completed, as if that point wrote them, so that
 * the compiler neither reads an accumulator nor reuses an A word before it (both asm statements are
 * volatile and keep their order; everything that reads these values reads them from here). */
static inline void wg_keep_s(float s[S_ACC])
{
#if S_ACC == 8
    __asm__ __volatile__("" : WG_ACC4(s, 0), WG_ACC4(s, 4));
#elif S_ACC == 16
    __asm__ __volatile__("" : WG_ACC16(s, 0));
#else
    __asm__ __volatile__("" : WG_ACC16(s, 0));
    __asm__ __volatile__("" : WG_ACC16(s, 16));
#endif
}

static inline void wg_keep_o(float o[O_ACC], uint p[4 * P_STEPS])
{
    __asm__ __volatile__("" : WG_ACC16(o, 0));
    __asm__ __volatile__("" : WG_ACC16(o, 16));
#if O_ACC >= 48
    __asm__ __volatile__("" : WG_ACC16(o, 32));
#endif
#if O_ACC >= 64
    __asm__ __volatile__("" : WG_ACC16(o, 48));
#endif
#if O_ACC == 128
    __asm__ __volatile__("" : WG_ACC16(o, 64));
    __asm__ __volatile__("" : WG_ACC16(o, 80));
    __asm__ __volatile__("" : WG_ACC16(o, 96));
    __asm__ __volatile__("" : WG_ACC16(o, 112));
#endif
#if P_STEPS == 1
    __asm__ __volatile__("" : WG_KEEP4(p, 0));
#else
    __asm__ __volatile__("" : WG_KEEP8(p, 0));
#endif
#if P_STEPS == 4
    __asm__ __volatile__("" : WG_KEEP8(p, 8));
#endif
}
#endif

/* The generic proxy's writes of this work-item to local memory (its completed cp.async copies),
 * ordered before later reads by the async proxy (wgmma) of any work-item that synchronises with it. */
static inline void fence_proxy_async(void)
{
    __asm__ __volatile__("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#if WG_PRODUCER
/* ---- mbarriers (WG_PRODUCER): the producer warpgroup and the consumer warpgroups hand the ring
 * slots over without a barrier of the whole work-group. Each slot has a full mbarrier, on which the
 * producer's 128 work-items each arrive once their copies into the slot are complete, and an empty
 * one, on which every consumer work-item arrives once its products have read the slot. Phases
 * alternate 0, 1, 0, ... with each use of a slot: use u = tile / slots waits for parity u % 2. */
static inline uint mbar_addr(__local const ulong *bar)
{
    return (uint)(size_t)bar;
}

static inline void mbar_init(__local ulong *bar, uint count)
{
    __asm__ __volatile__("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar_addr(bar)), "r"(count) : "memory");
}

static inline void mbar_arrive(__local ulong *bar)
{
    __asm__ __volatile__("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mbar_addr(bar)) : "memory");
}

/* 1 once the phase of the given parity is complete. */
static inline uint mbar_try_wait(__local ulong *bar, uint parity)
{
    uint done;
    __asm__ __volatile__("{\n"
                         ".reg .pred p;\n"
                         "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n"
                         "}\n"
                         : "=r"(done)
                         : "r"(mbar_addr(bar)), "r"(parity)
                         : "memory");
    return done;
}

/* Arrives on bar once every copy this work-item has issued so far is complete (the arrival is one
 * of the count given at init: .noinc). */
static inline void mbar_arrive_on_copies(__local ulong *bar)
{
    __asm__ __volatile__("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mbar_addr(bar)) : "memory");
}

static inline void mbar_wait(__local ulong *bar, uint parity)
{
    while (!mbar_try_wait(bar, parity))
        ;
}
#endif

/* The consumer warpgroups' work-items, and a barrier of theirs alone: with WG_PRODUCER the producer
 * warpgroup has ended by the epilogue (named barrier 1), else the work-group's barrier. */
#define CONSUMER_THREADS (128 * WARPGROUPS)
static inline void consumers_sync(void)
{
#if WG_PRODUCER
    __asm__ __volatile__("bar.sync 1, %0;\n" ::"n"(CONSUMER_THREADS) : "memory");
#else
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
}

/* ---- the K/V stream ------------------------------------------------------------------------------
 * One stream per tensor (K, V): each wg_stream_tile copies its next tile of BLOCK keys. Piece p of a
 * tile (p = id, id + THREADS, ...) is key 8 (b % (BLOCK / 8)) + p % 8 and chunk 4 (b / (BLOCK / 8))
 * + p / 8 % 4, b = p / 32: each quarter warp writes 8 keys of one chunk (128 contiguous bytes: no
 * bank conflict) and each warp reads 8 keys' 64 contiguous bytes (whole 32-byte sectors). Keys at or
 * past seq_k read nothing and become zeros. */
typedef struct {
    __global const ushort *next; /* the next tile's first key */
    __global const ushort *any;  /* a valid address for the copies that read nothing */
    ulong ss;
    long keys_left; /* keys of the tensor from the next tile's first key */
} wg_stream;

static inline uint wg_piece_key(uint p)
{
    return 8 * (p / 32 % (BLOCK / 8)) + p % 8;
}

static inline uint wg_piece_chunk(uint p)
{
    return 4 * (p / 32 / (BLOCK / 8)) + p / 8 % 4;
}

/* The stream of keys first_key .. keys - 1 of the head at base (keys: the entry's key length). */
static inline wg_stream wg_stream_start(__global const ushort *x, ulong base, ulong ss, uint first_key, uint keys)
{
    wg_stream st;
    st.next = x + base + (ulong)first_key * ss;
    st.any = x + base;
    st.ss = ss;
    st.keys_left = (long)keys - (long)first_key;
    return st;
}

/* The work-items that copy the tiles: the producer warpgroup's 128 (WG_PRODUCER), else all of them. */
#if WG_PRODUCER
#define COPIERS 128
#define COPIER_ID (get_local_id(0) % 128)
#else
#define COPIERS THREADS
#define COPIER_ID get_local_id(0)
#endif

/* Issues the copies of the stream's next tile into dst (not committed). */
static inline void wg_stream_tile(wg_stream *st, __local ushort *dst)
{
#pragma unroll
    for (uint i = 0; i < (PIECES + COPIERS - 1) / COPIERS; i++) {
        const uint p = COPIER_ID + i * COPIERS, key = wg_piece_key(p), chunk = wg_piece_chunk(p);
        if (PIECES % COPIERS != 0 && p >= PIECES)
            break; /* three warpgroups: the pieces do not divide evenly */
        const int in = (long)key < st->keys_left && chunk * 8 < D_REAL; /* padding columns: zeros */
        copy16_async(dst + chunk * 8 * BLOCK + key * 8, in ? st->next + (ulong)key * st->ss + chunk * 8 : st->any,
                     in ? 16u : 0u);
    }
    st->next += (ulong)BLOCK * st->ss;
    st->keys_left -= BLOCK;
}

#if WG_TMA
/* ---- the producer through the tensor memory accelerator (WG_TMA) ------------------------------
 * Instead of 128 work-items issuing 16-byte cp.async copies, one work-item of the producer issues
 * each tile as HEAD_DIM / 64 box copies (cp.async.bulk.tensor), which the TMA unit writes into the slot in the
 * 128-byte swizzle and counts on the slot's full mbarrier (expect_tx: the tile's bytes). The copies
 * need a tensor map per tensor, a 128-byte object in global memory that OpenCL cannot make on the
 * host: the producer's first warp builds K's and V's in local memory from zeros with
 * tensormap.replace (rank 2: D_REAL columns x the entry's key length, rows the tensor's row stride
 * apart, boxes of 64 columns x BLOCK keys, 16-bit elements, rows past the key length and columns
 * past D_REAL zeros: the TMA unit fills a box's elements outside the tensor with zeros and counts
 * them with the box's bytes), copies
 * them to this work-group's 256 bytes of tma_maps (the host's scratch) and acquires them for the
 * tensormap proxy (tests/nv_tma_probe.cl proved each step on an H100). */

/* Lane 0: the map of the 2-D tensor at base (D_REAL columns, `rows` keys, row_bytes apart) in m. */
static inline void wg_tma_build_map(__local uint *m, __global const ushort *base, uint rows, ulong row_bytes)
{
    /* rank 2 is written as 1 (the field counts from zero); elemtype 1 = .u16, interleave 0 = none,
     * swizzle 3 = 128 bytes, fill 0 = zeros (PTX ISA, "Tensormap new_val validity") */
    __asm__ __volatile__("// sm90a: tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
                         "// sm90a: tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n"
                         "// sm90a: tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, 64;\n"
                         "// sm90a: tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %2;\n"
                         "// sm90a: tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %3;\n"
                         "// sm90a: tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %4;\n"
                         "// sm90a: tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %5;\n"
                         "// sm90a: tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, 1;\n"
                         "// sm90a: tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, 1;\n"
                         "// sm90a: tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], 1;\n"
                         "// sm90a: tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 0;\n"
                         "// sm90a: tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n"
                         "// sm90a: tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 0;\n"
                         :
                         : "r"(shared_addr((__local const ushort *)m)), "l"((ulong)(size_t)base), "r"((uint)BLOCK),
                           "r"((uint)D_REAL), "r"(rows), "l"(row_bytes)
                         : "memory");
}

/* The whole warp: the map in m to g, released to the tensormap proxy, then acquired by it. */
static inline void wg_tma_publish_map(__global ulong *g, __local const uint *m)
{
    __asm__ __volatile__("// sm90a: tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu"
                         ".sync.aligned [%0], [%1], 128;\n"
                         "// sm90a: fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"((ulong)(size_t)g),
                         "r"(shared_addr((__local const ushort *)m))
                         : "memory");
}

/* One work-item: the tile of keys key0 .. key0 + BLOCK - 1 through map into dst (HEAD_DIM / 64
 * boxes), counted on bar, which expects the tile's bytes and takes this arrival. */
static inline void wg_tma_tile(__local ushort *dst, __global const ulong *map, int key0, __local ulong *bar)
{
#if HEAD_DIM == 256
    __asm__ __volatile__("// sm90a: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%2], [%3, {0, %4}], [%0];\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%5], [%3, {64, %4}], [%0];\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%6], [%3, {128, %4}], [%0];\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%7], [%3, {192, %4}], [%0];\n" ::"r"(mbar_addr(bar)),
                         "n"(4 * WG_BOX_BYTES), "r"(shared_addr(dst)), "l"((ulong)(size_t)map), "r"(key0),
                         "r"(shared_addr(dst) + WG_BOX_BYTES), "r"(shared_addr(dst) + 2 * WG_BOX_BYTES),
                         "r"(shared_addr(dst) + 3 * WG_BOX_BYTES)
                         : "memory");
#elif HEAD_DIM == 128
    __asm__ __volatile__("// sm90a: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%2], [%3, {0, %4}], [%0];\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%5], [%3, {64, %4}], [%0];\n" ::"r"(mbar_addr(bar)),
                         "n"(2 * WG_BOX_BYTES), "r"(shared_addr(dst)), "l"((ulong)(size_t)map), "r"(key0),
                         "r"(shared_addr(dst) + WG_BOX_BYTES)
                         : "memory");
#else
    __asm__ __volatile__("// sm90a: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                         "// sm90a: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%2], [%3, {0, %4}], [%0];\n" ::"r"(mbar_addr(bar)),
                         "n"(WG_BOX_BYTES), "r"(shared_addr(dst)), "l"((ulong)(size_t)map), "r"(key0)
                         : "memory");
#endif
}
#endif

#if WG_PRODUCER
/* ALiBi's bias grows toward each row's diagonal, and so do a row's scores when its keys come in
 * order from the first: the reference maximum then moves, and O is rescaled, on nearly every tile
 * of the heads with steep slopes. With WG_ROTATE (ALiBi in the TMA loop with turns, whose producer
 * can take the tiles in any order) a block takes its tiles from the one holding its first row's
 * diagonal (wg_first_tile) to its last, then from its first on (wg_tile_key): every row meets
 * its largest scores within the block's first few tiles, and the rest stay below them. */
#define WG_ROTATE (ALIBI && WG_TMA && WG_PRODUCER && !WG_PIPE)

/* The block's tile to take first: the one holding the diagonal key of the block's first row, row0
 * (clamped to the block's n_tiles from key_begin); 0 without WG_ROTATE. */
static inline uint wg_first_tile(uint row0, uint seq_q, long diag_k, uint key_begin, uint n_tiles)
{
#if WG_ROTATE
    const long d = (long)row0 + diag_k - (long)seq_q - (long)key_begin; /* common.cl's visible_keys' d */
    return d <= 0 || n_tiles == 0 ? 0u : (uint)min(d / BLOCK, (long)n_tiles - 1);
#else
    (void)row0, (void)seq_q, (void)diag_k, (void)key_begin, (void)n_tiles;
    return 0u;
#endif
}

/* The first key of the j-th tile a block takes (j < n_tiles), from tile `first` round. */
static inline uint wg_tile_key(uint key_begin, uint j, uint first, uint n_tiles)
{
#if WG_ROTATE
    const uint r = j + first;
    return key_begin + (r >= n_tiles ? r - n_tiles : r) * BLOCK;
#else
    (void)first, (void)n_tiles;
    return key_begin + j * BLOCK;
#endif
}

/* Where the producer's tiles come from: K's and V's streams (cp.async), or their tensor maps and the
 * block's first key (WG_TMA). */
typedef struct {
#if WG_TMA
    __global const ulong *maps; /* K's map, then V's, 16 words each */
    uint key_begin;
#if WG_ROTATE
    uint first, n_tiles; /* wg_tile_key's */
#endif
#else
    wg_stream *k, *v;
#endif
} wg_tile_source;

#if WG_TMA
/* The TMA source of a block's n_tiles tiles from key_begin, taken from tile `first` round. */
static inline wg_tile_source wg_tma_source(__global const ulong *maps, uint key_begin, uint first, uint n_tiles)
{
#if WG_ROTATE
    wg_tile_source src = {maps, key_begin, first, n_tiles};
#else
    (void)first, (void)n_tiles;
    wg_tile_source src = {maps, key_begin};
#endif
    return src;
}

/* The first key of the j-th tile of src. */
static inline uint wg_source_key(const wg_tile_source *src, uint j)
{
#if WG_ROTATE
    return wg_tile_key(src->key_begin, j, src->first, src->n_tiles);
#else
    return wg_tile_key(src->key_begin, j, 0u, 0u);
#endif
}
#endif

/* Copies tile `tile` of K (v 0) or V (v 1) into slot `slot` of ring; the slot's full mbarrier
 * (bars[2 slot]) hears when it is in. cp.async: this work-item's pieces, then
 * cp.async.mbarrier.arrive.noinc, which arrives once its copies so far are complete, so the
 * producer never waits for its own copies; WG_TMA: the tile's boxes, counted on that mbarrier. */
static inline void wg_copy_tile(wg_tile_source *src, uint v, uint tile, __local ushort *ring, __local ulong *bars,
                                uint slot)
{
#if WG_TMA
    wg_tma_tile(ring + slot * TILE_HALVES, src->maps + 16 * v, (int)wg_source_key(src, tile), bars + 2 * slot);
#else
    (void)tile;
    wg_stream_tile(v ? src->v : src->k, ring + slot * TILE_HALVES);
    async_commit();
    mbar_arrive_on_copies(bars + 2 * slot);
#endif
}

/* The producer's schedule: K(t) into K slot t % K_SLOTS, then V(t - 1) into V slot (t - 1) %
 * V_SLOTS, each once its slot's empty mbarrier says every consumer is done with the tile before in
 * it. The slots and the mbarriers' phases count on from the tiles the rings took before this
 * block's (the persistent kernel's earlier blocks; none otherwise): `before` of them modulo
 * WG_RING_CYCLE, and `primed` once there were at least WG_RING_CYCLE, when every slot has been
 * used and each copy waits for its slot. */
static inline void wg_produce_tiles(wg_tile_source *src, __local ushort *k_ring, __local ushort *v_ring,
                                    __local ulong *k_bars, __local ulong *v_bars, uint n_tiles, uint before,
                                    int primed)
{
    for (uint t = 0; t <= n_tiles; t++) {
        if (t < n_tiles) {
            const uint g = before + t, slot = g % K_SLOTS;
            if (primed || g >= K_SLOTS)
                mbar_wait(k_bars + 2 * slot + 1, (g / K_SLOTS - 1) % 2);
            wg_copy_tile(src, 0, t, k_ring, k_bars, slot);
        }
        if (t >= 1) {
            const uint g = before + t - 1, slot = g % V_SLOTS;
            if (primed || g >= V_SLOTS)
                mbar_wait(v_bars + 2 * slot + 1, (g / V_SLOTS - 1) % 2);
            wg_copy_tile(src, 1, t - 1, v_ring, v_bars, slot);
        }
    }
}

#if WG_TMA
/* The producer's first warp (lane: its work-item's lane) builds a block's K and V tensor maps into
 * maps[0 .. 31] (K, then V) through m (64 words of local memory). */
static inline void wg_tma_make_maps(__global ulong *maps, __local uint *m, __global const ushort *k_head,
                                    __global const ushort *v_head, uint keys, ulong k_row_bytes, ulong v_row_bytes,
                                    uint lane)
{
    m[lane] = 0u;
    m[lane + 32] = 0u;
    __asm__ __volatile__("bar.warp.sync 0xffffffff;\n" ::: "memory");
    if (lane == 0) {
        wg_tma_build_map(m, k_head, keys, k_row_bytes);
        wg_tma_build_map(m + 32, v_head, keys, v_row_bytes);
    }
    __asm__ __volatile__("bar.warp.sync 0xffffffff;\n" ::: "memory");
    wg_tma_publish_map(maps, m);
    wg_tma_publish_map(maps + 16, m + 32);
}

/* The producer's first warp: builds the block's maps (wg_tma_make_maps), then its first work-item
 * streams the tiles (wg_produce_tiles). */
static inline void wg_tma_produce(__global ulong *maps, __local uint *m, __global const ushort *k_head,
                                  __global const ushort *v_head, uint keys, ulong k_row_bytes, ulong v_row_bytes,
                                  uint key_begin, __local ushort *k_ring, __local ushort *v_ring,
                                  __local ulong *k_bars, __local ulong *v_bars, uint n_tiles, uint first)
{
    const uint lane = get_local_id(0) % 32;
    wg_tma_make_maps(maps, m, k_head, v_head, keys, k_row_bytes, v_row_bytes, lane);
    if (lane != 0)
        return;
    wg_tile_source src = wg_tma_source(maps, key_begin, first, n_tiles);
    wg_produce_tiles(&src, k_ring, v_ring, k_bars, v_bars, n_tiles, 0, 0);
}
#else
/* The producer warpgroup's loop: it keeps WG_PRODUCER_REGS registers (setmaxnreg.dec), gives the
 * rest to the consumers, and its 128 work-items stream the tiles with cp.async. */
static inline void wg_produce(wg_stream *ks, wg_stream *vs, __local ushort *k_ring, __local ushort *v_ring,
                              __local ulong *k_bars, __local ulong *v_bars, uint n_tiles)
{
    __asm__ __volatile__("// sm90a: setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PRODUCER_REGS) : "memory");
    wg_tile_source src = {ks, vs};
    wg_produce_tiles(&src, k_ring, v_ring, k_bars, v_bars, n_tiles, 0, 0);
    async_wait_all(); /* no copy outlives its work-item */
}
#endif
#endif

/* ---- the online softmax of one tile -----------------------------------------------------------
 * On the S accumulators of tile `tile`: scale, mask, the running maxima m and sums l of the lane's
 * two rows (r_lo, r_lo + 8), P packed into p (A words of O += P V: keys 16u .. 16u + 15 from S's n8
 * blocks 2u and 2u + 1), and the factors alpha that O must be multiplied by before P V is added (the
 * caller does that, where O is not in flight). s[4n], s[4n + 1] are keys key0 + 8n + 2t, + 1 of row
 * r_lo; s[4n + 2], s[4n + 3] the same keys of row r_lo + 8. */
typedef struct {
    float m_lo, m_hi; /* running maxima (log2 units) */
    float l_lo, l_hi; /* this lane's part of the row sums */
    float alpha_lo, alpha_hi;
} wg_rows;

/* WG_BIAS_NATURAL: a bias alone (no softcap, no ALiBi) is added in natural units, fma(s, scale,
 * bias), so that log2(e) rides in the exponent's fma (one multiply a score fewer); other transformed
 * scores are in log2 units. WG_TRANSFORMED_SCALE is the scale wg_softmax_finish takes for them. */
#define WG_BIAS_NATURAL (BIAS && !SOFTCAP && !ALIBI)
#if WG_BIAS_NATURAL
#define WG_TRANSFORMED_SCALE M_LOG2E_F
#else
#define WG_TRANSFORMED_SCALE 1.0f
#endif

/* WG_OWN_ROWS: the warpgroups of the producer loop with turns each take the tiles their own rows
 * see and the masks of those rows (wg_consume), where the warpgroups' rows see different tiles
 * (the causal mask, a window) and the order of the tiles is the keys' (not WG_ROTATE's). Not at
 * head_dim 256 nor with a bias, where the registers are short. */
#define WG_OWN_ROWS (WG_PRODUCER && !WG_PIPE && (CAUSAL || WINDOW) && HEAD_DIM <= 128 && !BIAS && !WG_ROTATE)

/* The score rules of a lane, the same for every tile (wg_softmax): the keys [no_mask_lo,
 * no_mask_hi) every row of the block sees (a tile inside them needs no mask), the first and last
 * key each of the lane's two rows sees (common.cl's visible_keys; the last below the first where
 * it sees none), all clamped to [-1, key length], and the scale and the transforms' constants in
 * log2 units. Ints: keys are below 2^30 (CLFLASH_MAX_SEQ_K), and registers are scarce at head_dim
 * 128. */
typedef struct {
    int no_mask_lo, no_mask_hi;
    int first_lo, last_lo, first_hi, last_hi; /* row r_lo's, row r_lo + 8's */
    float scale2;                              /* the score scale in log2 units */
#if SOFTCAP
    float cap_in, cap2; /* softcap_log2's: 2 log2(e) scale2 / cap2 on the raw product, cap2 = cap log2(e) */
#endif
#if ALIBI
    float slope;           /* the work-group's query head's ALiBi slope, in log2 units */
    long diag_lo, diag_hi; /* the rows' diagonal keys */
#endif
#if BIAS
    __global const float *bias_lo, *bias_hi; /* the bias rows of r_lo and r_lo + 8 (wg_bias_rows) */
    uint bias_keys;                          /* the keys a bias row holds: seq_k */
#endif
} wg_rules;

/* ---- a block's keys and score rules -------------------------------------------------------------
 * The keys the block of rows row0 .. row0 + BLOCK_Q - 1 (those below seq_q) sees, [*key_begin,
 * *key_end): those below the key length, with CAUSAL up to its last row's diagonal, with WINDOW
 * (common.cl's visible_keys and block_key_range) from the tile holding its first row's first key. */
static inline void wg_block_keys(uint row0, uint seq_q, long diag_k, uint key_len, uint win_left, uint win_right,
                                 uint *key_begin, uint *key_end)
{
    const uint q_first = row0, q_last = min(row0 + BLOCK_Q, seq_q) - 1;
    *key_begin = 0;
    *key_end = key_len;
#if WINDOW
    block_key_range(q_first, q_last - q_first + 1, seq_q, diag_k, key_len, win_left, win_right, BLOCK, key_begin,
                    key_end);
#elif CAUSAL
    {
        const long end = (long)q_last + diag_k - (long)seq_q + 1; /* past the last row's diagonal */
        *key_end = end <= 0 ? 0u : (uint)min(end, (long)key_len);
    }
#else
    (void)q_first, (void)q_last, (void)diag_k, (void)win_left, (void)win_right;
#endif
}

/* The score rules of the lane whose rows are r_lo and r_lo + 8, in the block of rows from row0 of
 * query head h. A tile needs masks only where some row sees part of it: from the last row's first
 * key on and up to the first row's last key every row sees every key (both ends grow with the
 * row). */
static inline __attribute__((always_inline)) wg_rules wg_rules_for(uint row0, uint r_lo, uint seq_q, long diag_k,
                                                                   uint key_len, uint win_left, uint win_right,
                                                                   float score_scale, float softcap,
                                                                   __global const float *alibi, uint h)
{
    const uint q_first = row0, q_last = min(row0 + BLOCK_Q, seq_q) - 1;
    wg_rules ru;
    {
        const long len = (long)key_len;
        long lo, hi;
        visible_keys(q_first, seq_q, diag_k, key_len, win_left, win_right, &lo, &hi);
        ru.no_mask_hi = (int)clamp(hi, -1L, len);
        visible_keys(q_last, seq_q, diag_k, key_len, win_left, win_right, &lo, &hi);
        ru.no_mask_lo = (int)clamp(lo, -1L, len);
        visible_keys(r_lo, seq_q, diag_k, key_len, win_left, win_right, &lo, &hi);
        ru.first_lo = (int)clamp(lo, -1L, len);
        ru.last_lo = (int)clamp(hi - 1, -1L, len);
        visible_keys(r_lo + 8, seq_q, diag_k, key_len, win_left, win_right, &lo, &hi);
        ru.first_hi = (int)clamp(lo, -1L, len);
        ru.last_hi = (int)clamp(hi - 1, -1L, len);
    }
    /* with a transform the host passes the scale in natural-log units (as the portable kernel
     * takes it), else already times log2(e) */
#if WG_BIAS_NATURAL
    ru.scale2 = score_scale; /* natural units: wg_transform adds the bias, the exponent's fma takes log2(e) */
#elif SOFTCAP || ALIBI || BIAS
    ru.scale2 = score_scale * M_LOG2E_F;
#else
    ru.scale2 = score_scale;
#endif
#if SOFTCAP
    ru.cap2 = softcap * M_LOG2E_F;
    ru.cap_in = ru.scale2 * 2.0f * M_LOG2E_F / ru.cap2;
#else
    (void)softcap;
#endif
#if ALIBI
    const long shift = diag_k - (long)seq_q; /* query i's diagonal key is i + shift */
    ru.slope = alibi[h] * M_LOG2E_F;         /* one query head a work-group */
    ru.diag_lo = (long)r_lo + shift;
    ru.diag_hi = (long)r_lo + 8 + shift;
#else
    (void)alibi, (void)h;
#endif
    return ru;
}

/* ---- the bias (BIAS) ----------------------------------------------------------------------------
 * Each lane reads the biases of its own scores, keys key0 + 8n + 2t and + 1 of rows r_lo and r_lo +
 * 8, two keys a load (bias_pair: one 8-byte load with BIAS_PAIRS), into registers: a tile of the
 * block's 192 rows would take 24 KiB of local memory beside the 40 KiB of K and V rings. The loop
 * with turns issues a tile's loads before it waits for its turn and its products, so that they
 * arrive meanwhile (wg_consume_in_turns). */
#if BIAS
typedef struct {
    float2 lo[BLOCK / 8], hi[BLOCK / 8];
} wg_bias;

/* The bias rows of the lane's rows r_lo and r_lo + 8 from `rows` (the bias at the work-group's batch
 * entry and head, row 0, key 0; rs floats a row); a row past seq_q reads row seq_q - 1 (its
 * results are never stored), so that no read leaves the bias's rows. */
static inline void wg_bias_rows(wg_rules *ru, __global const float *rows, ulong rs, uint r_lo, uint seq_q,
                                uint seq_k)
{
    ru->bias_lo = rows + (ulong)min(r_lo, seq_q - 1) * rs;
    ru->bias_hi = rows + (ulong)min(r_lo + 8, seq_q - 1) * rs;
    ru->bias_keys = seq_k;
}

static inline void wg_load_bias(wg_bias *bt, const wg_rules *ru, uint key0, uint t)
{
    /* the whole tile inside the rows: unclamped loads (not with softcap, where the second copy of
     * the loads made ptxas spill 16 bytes at head_dim 128) */
    if (!SOFTCAP && key0 + BLOCK <= ru->bias_keys) {
        __global const float *lo = ru->bias_lo + key0 + 2 * t, *hi = ru->bias_hi + key0 + 2 * t;
#pragma unroll
        for (uint n = 0; n < BLOCK / 8; n++) {
            bt->lo[n] = bias_pair_inside(lo, 8 * n);
            bt->hi[n] = bias_pair_inside(hi, 8 * n);
        }
        return;
    }
    /* the last tile of a row whose keys end inside it: each pair clamped */
#pragma unroll
    for (uint n = 0; n < BLOCK / 8; n++) {
        bt->lo[n] = bias_pair(ru->bias_lo, key0 + 8 * n + 2 * t, ru->bias_keys);
        bt->hi[n] = bias_pair(ru->bias_hi, key0 + 8 * n + 2 * t, ru->bias_keys);
    }
}

/* The bias of score e (0..3) of the lane's n8 block n, in the accumulators' order. */
static inline float wg_bias_at(const wg_bias *bt, uint n, uint e)
{
    const float2 b = e < 2 ? bt->lo[n] : bt->hi[n];
    return e % 2 ? b.y : b.x;
}
#else
typedef struct {
    int none;
} wg_bias;

static inline void wg_bias_rows(wg_rules *ru, __global const float *rows, ulong rs, uint r_lo, uint seq_q,
                                uint seq_k)
{
    (void)ru, (void)rows, (void)rs, (void)r_lo, (void)seq_q, (void)seq_k;
}

static inline void wg_load_bias(wg_bias *bt, const wg_rules *ru, uint key0, uint t)
{
    (void)bt, (void)ru, (void)key0, (void)t;
}

static inline float wg_bias_at(const wg_bias *bt, uint n, uint e)
{
    (void)bt, (void)n, (void)e;
    return 0.0f;
}
#endif
#define WG_NO_BIAS ((const wg_bias *)0) /* the loops that take no bias (the #error above) */

/* The rest of a tile's softmax, from the lane's maxima of s on: the row maxima over the quad, the
 * reference maxima and the factors alpha, P = 2^(scale s - reference), the row sums and P packed.
 * s holds scores in log2 units divided by scale (> 0): the masked and transformed scores with
 * scale 1, or raw products with the score scale (wg_softmax_open), so that the scale rides in the
 * exponent's fma. */
static inline __attribute__((always_inline)) void wg_softmax_finish(float s[S_ACC], uint p[4 * P_STEPS],
                                                                    wg_rows *rw, float max_lo, float max_hi,
                                                                    float scale)
{
    max_lo = fmax(max_lo, lane_xor(max_lo, 1));
    max_lo = fmax(max_lo, lane_xor(max_lo, 2));
    max_hi = fmax(max_hi, lane_xor(max_hi, 1));
    max_hi = fmax(max_hi, lane_xor(max_hi, 2));
    max_lo *= scale; /* scaling is monotonic: the maximum of the scaled scores */
    max_hi *= scale;
    /* a row that has seen no key keeps -inf and exponentiates against 0: exp2(-inf) = 0 */
    /* The reference maxima move only when a score passes them by more than 2^8 (WG_SLACK), so
     * that most tiles leave O as it is (wg_rescale): P is then at most 2^8, which f16, bf16 and the
     * fp32 sums hold, and O / l and the lse are the same whatever the reference. */
    const float new_lo = max_lo > rw->m_lo + WG_SLACK ? max_lo : rw->m_lo;
    const float new_hi = max_hi > rw->m_hi + WG_SLACK ? max_hi : rw->m_hi;
    const float ref_lo = new_lo == -INFINITY ? 0.0f : new_lo, ref_hi = new_hi == -INFINITY ? 0.0f : new_hi;
    rw->alpha_lo = exp2_ftz(rw->m_lo - ref_lo);
    rw->alpha_hi = exp2_ftz(rw->m_hi - ref_hi);
    rw->m_lo = new_lo;
    rw->m_hi = new_hi;
#if WG_PRODUCER
#pragma unroll
    for (uint n = 0; n < BLOCK / 8; n++) {
        s[4 * n] = exp2_ftz(fma(s[4 * n], scale, -ref_lo));
        s[4 * n + 1] = exp2_ftz(fma(s[4 * n + 1], scale, -ref_lo));
        s[4 * n + 2] = exp2_ftz(fma(s[4 * n + 2], scale, -ref_hi));
        s[4 * n + 3] = exp2_ftz(fma(s[4 * n + 3], scale, -ref_hi));
    }
    float sum_lo = s[0] + s[1], sum_hi = s[2] + s[3];
#pragma unroll
    for (uint n = 1; n < BLOCK / 8; n++) {
        sum_lo += s[4 * n] + s[4 * n + 1];
        sum_hi += s[4 * n + 2] + s[4 * n + 3];
    }
#else
    /* the same sums (0 + x is x), in the order the loop without a producer was proven in */
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (uint n = 0; n < BLOCK / 8; n++) {
        s[4 * n] = exp2_ftz(fma(s[4 * n], scale, -ref_lo));
        s[4 * n + 1] = exp2_ftz(fma(s[4 * n + 1], scale, -ref_lo));
        s[4 * n + 2] = exp2_ftz(fma(s[4 * n + 2], scale, -ref_hi));
        s[4 * n + 3] = exp2_ftz(fma(s[4 * n + 3], scale, -ref_hi));
        sum_lo += s[4 * n] + s[4 * n + 1];
        sum_hi += s[4 * n + 2] + s[4 * n + 3];
    }
#endif
    rw->l_lo = rw->l_lo * rw->alpha_lo + sum_lo;
    rw->l_hi = rw->l_hi * rw->alpha_hi + sum_hi;
#pragma unroll
    for (uint u = 0; u < P_STEPS; u++) {
        p[4 * u] = pack_pair(s[8 * u], s[8 * u + 1]);
        p[4 * u + 1] = pack_pair(s[8 * u + 2], s[8 * u + 3]);
        p[4 * u + 2] = pack_pair(s[8 * u + 4], s[8 * u + 5]);
        p[4 * u + 3] = pack_pair(s[8 * u + 6], s[8 * u + 7]);
    }
}

/* The score transforms of one product, in log2 units: the scale, or softcap; then ALiBi, given the
 * distance from the row's diagonal to the lane's first key of the tile and the key's offset. */
static inline __attribute__((always_inline)) float wg_transform(float s, const wg_rules *ru, float dist, int key,
                                                                float bias)
{
#if SOFTCAP
    float x = softcap_log2(s * ru->cap_in, ru->cap2);
#elif WG_BIAS_NATURAL
    float x = fma(s, ru->scale2, bias); /* natural units (WG_TRANSFORMED_SCALE); -inf stays -inf */
#else
    float x = s * ru->scale2;
#endif
#if BIAS && !WG_BIAS_NATURAL
    x = fma(bias, M_LOG2E_F, x); /* -inf stays -inf: the key is masked */
#elif !BIAS
    (void)bias;
#endif
#if ALIBI
    x = fma(-ru->slope, fabs(dist - (float)key), x);
#else
    (void)dist, (void)key;
#endif
    return x;
}

/* A tile some row of the block sees only in part: the transforms, then the masks (common.cl's
 * order), then wg_softmax_finish. key0: the tile's first key; bt: its biases (BIAS). */
static inline __attribute__((always_inline)) void wg_softmax_masked(float s[S_ACC], uint p[4 * P_STEPS],
                                                                    wg_rows *rw, uint key0, const wg_rules *ru,
                                                                    uint t, const wg_bias *bt)
{
    /* The first and last key each of the lane's rows sees, relative to its first key key0 + 2t,
     * clamped to [0, BLOCK] and [-1, BLOCK]. */
#if WG_PRODUCER
    const int pair0 = (int)(key0 + 2 * t);
    const int first_lo = clamp(ru->first_lo - pair0, 0, BLOCK), last_lo = clamp(ru->last_lo - pair0, -1, BLOCK);
    const int first_hi = clamp(ru->first_hi - pair0, 0, BLOCK), last_hi = clamp(ru->last_hi - pair0, -1, BLOCK);
#else
    /* every tile comes here (wg_softmax): one every row sees whole keeps all its keys */
    int first_lo = 0, first_hi = 0, last_lo = BLOCK, last_hi = BLOCK;
    const int pair0 = (int)(key0 + 2 * t);
    if ((int)key0 < ru->no_mask_lo || (int)(key0 + BLOCK) > ru->no_mask_hi) {
        first_lo = clamp(ru->first_lo - pair0, 0, BLOCK);
        last_lo = clamp(ru->last_lo - pair0, -1, BLOCK);
        first_hi = clamp(ru->first_hi - pair0, 0, BLOCK);
        last_hi = clamp(ru->last_hi - pair0, -1, BLOCK);
    }
#endif
#if ALIBI
    /* the distance from each row's diagonal to the lane's first key (exact below 2^24) */
    const float dist_lo = (float)(ru->diag_lo - pair0), dist_hi = (float)(ru->diag_hi - pair0);
#else
    const float dist_lo = 0.0f, dist_hi = 0.0f;
#endif
    float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
    for (uint n = 0; n < BLOCK / 8; n++) {
#pragma unroll
        for (uint e = 0; e < 4; e++) {
            const int key = (int)(8 * n + e % 2);
            const float x = wg_transform(s[4 * n + e], ru, e < 2 ? dist_lo : dist_hi, key, wg_bias_at(bt, n, e));
            s[4 * n + e] =
                key >= (e < 2 ? first_lo : first_hi) && key <= (e < 2 ? last_lo : last_hi) ? x : -INFINITY;
        }
        max_lo = fmax(max_lo, fmax(s[4 * n], s[4 * n + 1]));
        max_hi = fmax(max_hi, fmax(s[4 * n + 2], s[4 * n + 3]));
    }
    wg_softmax_finish(s, p, rw, max_lo, max_hi, WG_TRANSFORMED_SCALE);
}

/* A tile every row of the block sees whole (no mask). Without transforms the maxima are taken of
 * the raw products and the scale (made positive by the caller, which moves a negative one into
 * Q's signs) applied in the exponent: one fma a score instead of a multiply and a subtraction. */
static inline __attribute__((always_inline)) void wg_softmax_open(float s[S_ACC], uint p[4 * P_STEPS], wg_rows *rw,
                                                                  uint key0, const wg_rules *ru, uint t,
                                                                  const wg_bias *bt)
{
#if SOFTCAP || ALIBI || BIAS
#if ALIBI
    const int pair0 = (int)(key0 + 2 * t);
    const float dist_lo = (float)(ru->diag_lo - pair0), dist_hi = (float)(ru->diag_hi - pair0);
#else
    const float dist_lo = 0.0f, dist_hi = 0.0f;
    (void)key0, (void)t;
#endif
#pragma unroll
    for (uint n = 0; n < BLOCK / 8; n++)
#pragma unroll
        for (uint e = 0; e < 4; e++)
            s[4 * n + e] = wg_transform(s[4 * n + e], ru, e < 2 ? dist_lo : dist_hi, (int)(8 * n + e % 2),
                                        wg_bias_at(bt, n, e));
    const float scale = WG_TRANSFORMED_SCALE;
#else
    (void)key0, (void)t, (void)bt;
    const float scale = ru->scale2;
#endif
    float max_lo = fmax(s[0], s[1]), max_hi = fmax(s[2], s[3]);
#pragma unroll
    for (uint n = 1; n < BLOCK / 8; n++) {
        max_lo = fmax(max_lo, fmax(s[4 * n], s[4 * n + 1]));
        max_hi = fmax(max_hi, fmax(s[4 * n + 2], s[4 * n + 3]));
    }
    wg_softmax_finish(s, p, rw, max_lo, max_hi, scale);
}

/* always inlined: called three times in the pipelined loop, and its arrays must stay registers.
 * key0: the tile's first key. The loops fed by a producer take the masks only where some row of
 * the block sees part of the tile (wg_softmax_open elsewhere: on an H100, 1.05x faster at head_dim
 * 128). The loop without one (head_dim 64's, four warpgroups of 128 registers a work-item) sends
 * every tile through wg_softmax_masked, open bounds where every row sees the tile: two copies of
 * the transforms spill there (32 bytes at head_dim 64 with softcap and ALiBi), and without
 * transforms it ran slower with the open path (one run on an H100, n = 4096: 283.6 against 297.6
 * TFLOP/s, causal 262.6 against 267.1). bt: the tile's biases (BIAS; WG_NO_BIAS from the loops that
 * take no bias). */
static inline __attribute__((always_inline)) void wg_softmax(float s[S_ACC], uint p[4 * P_STEPS], wg_rows *rw,
                                                             uint key0, const wg_rules *ru, uint t,
                                                             const wg_bias *bt)
{
#if !WG_PRODUCER
    wg_softmax_masked(s, p, rw, key0, ru, t, bt);
#else
    if ((int)key0 < ru->no_mask_lo || (int)(key0 + BLOCK) > ru->no_mask_hi)
        wg_softmax_masked(s, p, rw, key0, ru, t, bt);
    else
        wg_softmax_open(s, p, rw, key0, ru, t, bt);
#endif
}

/* O *= alpha, per row; nothing where both of the lane's rows kept their reference maxima. */
static inline void wg_rescale(float o[O_ACC], const wg_rows *rw)
{
    if (rw->alpha_lo == 1.0f && rw->alpha_hi == 1.0f)
        return;
#pragma unroll
    for (uint i = 0; i < O_ACC; i += 4) {
        o[i] *= rw->alpha_lo;
        o[i + 1] *= rw->alpha_lo;
        o[i + 2] *= rw->alpha_hi;
        o[i + 3] *= rw->alpha_hi;
    }
}

#if WG_PRODUCER
/* This warp's A fragments of Q straight from global memory (the loops fed by a producer): words 0
 * and 2 row r_lo, 1 and 3 row r_lo + 8; columns 2t, 2t + 1 of each k-step, + 8 for words 2 and 3
 * (zeros past seq_q). */
static inline void wg_load_q(uint qa[4 * QK_STEPS], __global const ushort *q, ulong q_base, ulong q_ss, uint r_lo,
                             uint t, uint seq_q)
{
#pragma unroll
    for (uint kk = 0; kk < QK_STEPS; kk++)
#pragma unroll
        for (uint w = 0; w < 4; w++) {
            const uint row = r_lo + 8 * (w % 2), col = 16 * kk + 8 * (w / 2) + 2 * t;
            const int in = row < seq_q && col < D_REAL; /* padding columns: zeros */
            qa[4 * kk + w] = in ? *(__global const uint *)(q + q_base + (ulong)row * q_ss + col) : 0u;
        }
}

/* wg_softmax_open scales inside the exponent, which takes a positive scale: a negative one becomes
 * Q's signs (exact in f16 and bf16), so the products change sign instead. Nothing with a score
 * transform, whose scale stays outside. */
static inline void wg_positive_scale(uint qa[4 * QK_STEPS], wg_rules *ru)
{
#if !(SOFTCAP || ALIBI || BIAS)
    if (ru->scale2 < 0.0f) {
#pragma unroll
        for (uint i = 0; i < 4 * QK_STEPS; i++)
            qa[i] ^= 0x80008000u;
        ru->scale2 = -ru->scale2;
    }
#else
    (void)qa, (void)ru;
#endif
}
#endif

/* The row sums of the lane's rows r_lo and r_lo + 8 into *l_lo, *l_hi (the four lanes of a quad
 * hold parts of the same rows' sums), and with WITH_LSE their log-sum-exps at lse[lse0 + row]
 * (-inf for a row that saw no key), rows below seq_q only. */
static inline void wg_row_sums(const wg_rows *rw, __global float *lse, ulong lse0, uint r_lo, uint t, uint seq_q,
                               float *l_lo, float *l_hi)
{
    float lo = rw->l_lo, hi = rw->l_hi;
    lo += lane_xor(lo, 1);
    lo += lane_xor(lo, 2);
    hi += lane_xor(hi, 1);
    hi += lane_xor(hi, 2);
#if WITH_LSE
    if (t == 0) {
        if (r_lo < seq_q)
            lse[lse0 + r_lo] = lo == 0.0f ? -INFINITY : (rw->m_lo + log2(lo)) * M_LN2_F;
        if (r_lo + 8 < seq_q)
            lse[lse0 + r_lo + 8] = hi == 0.0f ? -INFINITY : (rw->m_hi + log2(hi)) * M_LN2_F;
    }
#else
    (void)lse, (void)lse0, (void)r_lo, (void)t, (void)seq_q;
#endif
    *l_lo = lo;
    *l_hi = hi;
}

#if WG_PRODUCER && !WG_PIPE
/* After a slot's full mbarrier: the cp.async copies' writes before wgmma reads them through the
 * async proxy (fence_proxy_async); nothing with WG_TMA, whose unit writes through that proxy itself. */
static inline void wg_fence_copies(void)
{
#if !WG_TMA
    fence_proxy_async();
#endif
}

/* The turn of tile j's pair (WG_PRODUCER's consumers, j >= 1): taken on named barrier 2 + wg and
 * passed on to the next warpgroup's. */
static inline void wg_turn_take(int turns, uint wg)
{
    if (turns)
        __asm__ __volatile__("bar.sync %0, %1;\n" ::"r"(2 + wg), "n"(256) : "memory");
}

static inline void wg_turn_pass(int turns, uint wg)
{
    if (turns)
        __asm__ __volatile__("bar.arrive %0, %1;\n" ::"r"(2 + (wg + 1) % WARPGROUPS), "n"(256) : "memory");
}

/* Tile j (the ring's tile gk = before + j) where the warpgroup computes nothing: it waits for K(j)
 * and V(j - 1), takes its turn and frees both, as the tiles it computes do. */
static inline void wg_pass_tile(__local ulong *k_bars, __local ulong *v_bars, uint before, uint j, int turns, uint wg)
{
    const uint gk = before + j, kslot = gk % K_SLOTS;
    mbar_wait(k_bars + 2 * kslot, (gk / K_SLOTS) % 2);
    if (j > 0) {
        const uint gv = gk - 1, vslot = gv % V_SLOTS;
        mbar_wait(v_bars + 2 * vslot, (gv / V_SLOTS) % 2);
        wg_turn_take(turns, wg);
        wg_turn_pass(turns, wg);
        mbar_arrive(v_bars + 2 * vslot + 1);
    }
    mbar_arrive(k_bars + 2 * kslot + 1);
}

/* The producer loop's consumer warpgroup wg (WG_PRODUCER, WG_PIPE 0): S(0) and its softmax, then for
 * each next tile j one wgmma group pair, O += P(j - 1) V(j - 1) and S(j), issued together and waited
 * for once, then softmax(j); O += P V of the last tile at the end. The consumers issue their pairs
 * in turns (FlashAttention-3's ping-pong, over WARPGROUPS consumers): warpgroup wg waits on named
 * barrier 2 + wg before it issues and arrives on the next one's, 2 + (wg + 1) % WARPGROUPS, after,
 * so that the tensor cores take the warpgroups' products one pair after another while the others
 * run their softmaxes. The last warpgroup arrives once before the loop (the first turn is
 * warpgroup 0's), and warpgroup 0 takes the last warpgroup's last arrival after it, so each
 * barrier ends as it began; every consumer has the same tile count, so the turns match. One
 * warpgroup alone takes no turns. On an H100 (n = 4096, f16) the turns ran 1.03-1.04x faster than
 * the loop that waited for S and O += P V apart, 1.07x with the causal mask and 1.13x at head_dim 64
 * (docs/performance/h200.md). K(j) is in K slot j % K_SLOTS, V(j) in V slot j % V_SLOTS; each slot is
 * freed on its empty mbarrier once the group that read it is complete. Tile j is the j-th the block
 * takes, from tile `first` round (wg_tile_key; in key order but with WG_ROTATE). The warpgroup
 * computes tiles j_lo .. j_hi - 1 only (all of them unless WG_OWN_ROWS: wg_consume): before and
 * after them it waits for each tile, takes its turn and frees the tile's slots (wg_pass_tile), and
 * S of its first tile and O += P V of its last are each a turn of their own. */
static inline __attribute__((always_inline)) void
wg_consume_in_turns(float acc[O_ACC], const uint qa[4 * QK_STEPS], wg_rows *rw, const wg_rules *ru, uint t, uint wg,
                    __local const ushort *k_ring, __local const ushort *v_ring, __local ulong *k_bars,
                    __local ulong *v_bars, uint key_begin, uint n_tiles, uint first, uint before, uint j_lo,
                    uint j_hi)
{
    const int turns = WARPGROUPS > 1 && n_tiles > 1;
    float s[S_ACC];
    uint pa[4 * P_STEPS];
    wg_bias bt; /* the tile's biases (BIAS), loaded before its waits */
    uint j = 0;
    for (; j < j_lo; j++)
        wg_pass_tile(k_bars, v_bars, before, j, turns, wg);
    if (j < j_hi) { /* S of the first tile alone, in a turn unless it is the block's first */
        const uint g0 = before + j, k0slot = g0 % K_SLOTS, v0slot = (g0 - 1) % V_SLOTS;
        wg_load_bias(&bt, ru, wg_tile_key(key_begin, j, first, n_tiles), t);
        mbar_wait(k_bars + 2 * k0slot, (g0 / K_SLOTS) % 2);
        if (j > 0)
            mbar_wait(v_bars + 2 * v0slot, ((g0 - 1) / V_SLOTS) % 2);
        wg_fence_copies();
        wg_turn_take(turns && j > 0, wg);
        wg_scores(s, qa, k_ring + k0slot * TILE_HALVES);
        wg_turn_pass(turns && j > 0, wg);
        if (j > 0)
            mbar_arrive(v_bars + 2 * v0slot + 1);
        mbar_arrive(k_bars + 2 * k0slot + 1);
        wg_softmax(s, pa, rw, wg_tile_key(key_begin, j, first, n_tiles), ru, t, &bt);
        wg_rescale(acc, rw);
        for (j++; j < j_hi; j++) {
            const uint gk = before + j, gv = before + j - 1, kslot = gk % K_SLOTS, vslot = gv % V_SLOTS;
            wg_load_bias(&bt, ru, wg_tile_key(key_begin, j, first, n_tiles), t);
            mbar_wait(k_bars + 2 * kslot, (gk / K_SLOTS) % 2);
            mbar_wait(v_bars + 2 * vslot, (gv / V_SLOTS) % 2);
            wg_fence_copies();
            wg_turn_take(turns, wg);
            wg_values_issue(acc, pa, v_ring + vslot * TILE_HALVES);
            wg_scores_issue(s, qa, k_ring + kslot * TILE_HALVES);
            wg_turn_pass(turns, wg);
            wg_wait(0);
            wg_keep_s(s);
            wg_keep_o(acc, pa);
            mbar_arrive(v_bars + 2 * vslot + 1);
            mbar_arrive(k_bars + 2 * kslot + 1);
            wg_softmax(s, pa, rw, wg_tile_key(key_begin, j, first, n_tiles), ru, t, &bt);
            wg_rescale(acc, rw);
        }
        /* O += P V of the last tile: in the next tile's turn (WG_OWN_ROWS: a warpgroup whose
         * rows see no more tiles), or at the end */
        const uint gv = before + j - 1, vslot = gv % V_SLOTS;
        if (WG_OWN_ROWS && j < n_tiles) {
            const uint gk = before + j, kslot = gk % K_SLOTS;
            mbar_wait(k_bars + 2 * kslot, (gk / K_SLOTS) % 2);
            mbar_wait(v_bars + 2 * vslot, (gv / V_SLOTS) % 2);
            wg_fence_copies();
            wg_turn_take(turns, wg);
            wg_values(acc, pa, v_ring + vslot * TILE_HALVES);
            wg_turn_pass(turns, wg);
            mbar_arrive(v_bars + 2 * vslot + 1);
            mbar_arrive(k_bars + 2 * kslot + 1);
            j++;
        } else {
            mbar_wait(v_bars + 2 * vslot, (gv / V_SLOTS) % 2);
            wg_fence_copies();
            wg_values(acc, pa, v_ring + vslot * TILE_HALVES);
            mbar_arrive(v_bars + 2 * vslot + 1);
            return;
        }
    }
    for (; j < n_tiles; j++)
        wg_pass_tile(k_bars, v_bars, before, j, turns, wg);
    if (WG_OWN_ROWS && n_tiles > 0) { /* the last V tile, which no product here read */
        const uint gv = before + n_tiles - 1, vslot = gv % V_SLOTS;
        mbar_wait(v_bars + 2 * vslot, (gv / V_SLOTS) % 2);
        mbar_arrive(v_bars + 2 * vslot + 1);
    }
}

#if WG_OWN_ROWS
/* Warpgroup wg's tiles [*j_lo, *j_hi) of the block's n_tiles from key_begin (those some row of its
 * 64 rows from row0 + 64 wg sees) and its no-mask keys in *ru (those every row of it sees; both
 * ends of visible_keys grow with the row). None where its rows lie past seq_q. */
static inline __attribute__((always_inline)) void wg_own_tiles(wg_rules *ru, uint *j_lo, uint *j_hi, uint wg, uint row0,
                                                               uint seq_q, long diag_k, uint key_len, uint win_left,
                                                               uint win_right, uint key_begin, uint n_tiles)
{
    const uint q_first = row0 + 64 * wg, q_last = min(q_first + 64, seq_q) - 1;
    const long len = (long)key_len;
    long first_lo, first_hi, last_lo, last_hi;
    visible_keys(q_first, seq_q, diag_k, key_len, win_left, win_right, &first_lo, &first_hi);
    visible_keys(q_last, seq_q, diag_k, key_len, win_left, win_right, &last_lo, &last_hi);
    ru->no_mask_hi = (int)clamp(first_hi, -1L, len);
    ru->no_mask_lo = (int)clamp(last_lo, -1L, len);
    const long lo = first_lo - (long)key_begin, hi = last_hi - (long)key_begin;
    *j_lo = lo <= 0 ? 0u : (uint)min(lo / BLOCK, (long)n_tiles);
    *j_hi = q_first >= seq_q || hi <= 0 ? 0u : (uint)min((hi + BLOCK - 1) / BLOCK, (long)n_tiles);
    if (*j_hi < *j_lo)
        *j_hi = *j_lo;
}
#endif

/* The consumer loop for warpgroup wg (wg_consume_in_turns). With WG_OWN_ROWS each warpgroup runs a
 * copy of its own, its index a constant there, on the tiles its rows see (wg_own_tiles): every
 * branch inside is then the same for all work-items of the work-group, not only of the warpgroup.
 * On an H100 the same ranges reckoned from each work-item's row made the causal forward 1.05-1.2x
 * slower, presumably because NVIDIA's compiler must then treat the loop's branches as divergent
 * (docs/performance/h200.md). */
static inline __attribute__((always_inline)) void
wg_consume(float acc[O_ACC], const uint qa[4 * QK_STEPS], wg_rows *rw, const wg_rules *ru, uint t, uint wg,
           __local const ushort *k_ring, __local const ushort *v_ring, __local ulong *k_bars, __local ulong *v_bars,
           uint key_begin, uint n_tiles, uint first, uint before, uint row0, uint seq_q, long diag_k, uint key_len,
           uint win_left, uint win_right)
{
#if WG_OWN_ROWS
    wg_rules own = *ru;
    uint j_lo, j_hi;
    if (wg == 0) {
        wg_own_tiles(&own, &j_lo, &j_hi, 0, row0, seq_q, diag_k, key_len, win_left, win_right, key_begin, n_tiles);
        wg_consume_in_turns(acc, qa, rw, &own, t, 0, k_ring, v_ring, k_bars, v_bars, key_begin, n_tiles, first,
                            before, j_lo, j_hi);
    } else if (WARPGROUPS > 2 && wg == 2) {
        wg_own_tiles(&own, &j_lo, &j_hi, 2, row0, seq_q, diag_k, key_len, win_left, win_right, key_begin, n_tiles);
        wg_consume_in_turns(acc, qa, rw, &own, t, 2, k_ring, v_ring, k_bars, v_bars, key_begin, n_tiles, first,
                            before, j_lo, j_hi);
    } else {
        wg_own_tiles(&own, &j_lo, &j_hi, 1, row0, seq_q, diag_k, key_len, win_left, win_right, key_begin, n_tiles);
        wg_consume_in_turns(acc, qa, rw, &own, t, 1, k_ring, v_ring, k_bars, v_bars, key_begin, n_tiles, first,
                            before, j_lo, j_hi);
    }
#else
    (void)row0, (void)seq_q, (void)diag_k, (void)key_len, (void)win_left, (void)win_right;
    wg_consume_in_turns(acc, qa, rw, ru, t, wg, k_ring, v_ring, k_bars, v_bars, key_begin, n_tiles, first, before, 0,
                        n_tiles);
#endif
}

/* The turns' start and end around the blocks of a consumer warpgroup wg (wg_consume_in_turns): the
 * last warpgroup arrives once on warpgroup 0's barrier before the first turn, and warpgroup 0 takes
 * that barrier's last arrival after the last turn, so each barrier ends as it began. Between them
 * the turns pass round and round, across blocks too, since every consumer takes as many turns
 * in a block. */
static inline void wg_turns_open(uint wg)
{
    if (WARPGROUPS > 1 && wg == WARPGROUPS - 1)
        __asm__ __volatile__("bar.arrive 2, %0;\n" ::"n"(256) : "memory");
}

static inline void wg_turns_close(uint wg)
{
    if (WARPGROUPS > 1 && wg == 0)
        __asm__ __volatile__("bar.sync 2, %0;\n" ::"n"(256) : "memory");
}
#endif

/* Block lin of the call's n_q query blocks x heads_q x batch (n_hb = heads_q batch): batch entry
 * *b, query head *h, first row *row0, in chunked_block_order with chunks of WG_Q_CHUNK. */
static inline void wg_block_at(uint lin, uint n_q, uint heads_q, uint n_hb, uint *b, uint *h, uint *row0)
{
    uint qi, hb;
    chunked_block_order(lin, n_q, n_hb, WG_Q_CHUNK, &qi, &hb);
    *h = hb % heads_q;
    *b = hb / heads_q;
#if CAUSAL
    *row0 = (n_q - 1 - qi) * BLOCK_Q;
#else
    *row0 = qi * BLOCK_Q;
#endif
}

#if !WG_PERSIST /* nv_wgmma_forward_persistent below instead */
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void nv_wgmma_forward(__global const ushort *q, __global const ushort *k, __global const ushort *v,
                      __global ushort *o, __global float *lse, uint seq_q, uint seq_k, uint heads_q, uint group,
                      float score_scale,
                      ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss,
                      ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss,
                      ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss,
                      ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, uint win_left, uint win_right, int diag_offset,
                      float softcap,
                      float out_scale, __global const float *bias, ulong bias_off, ulong bias_bs, ulong bias_hs,
                      ulong bias_rs, __global const float *alibi, __global const int *key_lens, uint n_splits,
                      uint split_keys, __global const int *block_table, uint pages_per_seq, uint num_pages,
                      __global const int *cu_seqlens_q, __global const int *cu_seqlens_k, uint total_q, uint total_k
#if WG_TMA
                      ,
                      __global ulong *tma_maps /* 32 words a work-group: its K and V tensor maps */
#endif
)
{
    /* The K and V tiles (the ring slots with WG_PIPE, else the stages), and before them Q, after them
     * O, staged in padded rows from 0. 128-byte alignment: every descriptor's start is on 16 bytes;
     * 1024 with WG_TMA: the 128-byte swizzle's boxes start on 1024 bytes. */
#if WG_TMA
    __local uint4 local_words[LOCAL_HALVES / 8] __attribute__((aligned(1024)));
    __local uint map_words[64] __attribute__((aligned(128))); /* the tensor maps being built */
#else
    __local uint4 local_words[LOCAL_HALVES / 8] __attribute__((aligned(128)));
#endif
#if WG_PRODUCER
    __local ulong mbars[2 * (K_SLOTS + V_SLOTS)]; /* full and empty of each K slot, then of each V slot */
#endif
    __local ushort *const tiles = (__local ushort *)local_words;
    /* what this kernel does not take (the #error above) */
    (void)out_scale, (void)split_keys;
    (void)block_table;
    (void)pages_per_seq, (void)num_pages, (void)cu_seqlens_q, (void)cu_seqlens_k, (void)total_q, (void)total_k;

    const uint lane = get_local_id(0) % 32, warp = get_local_id(0) / 32; /* warp of the work-group */
    const uint g = lane / 4, t = lane % 4;
#if CAUSAL || WG_Q_CHUNK
    const uint n_q = get_num_groups(0), n_h = get_num_groups(1), n_hb = n_h * get_num_groups(2);
    uint b, h, row0;
    wg_block_at(get_group_id(0) + n_q * (get_group_id(1) + n_h * get_group_id(2)), n_q, n_h, n_hb, &b, &h, &row0);
#else /* the same order, read from the grid */
    const uint h = get_group_id(1), b = get_group_id(2);
    const uint row0 = get_group_id(0) * BLOCK_Q;
#endif
    (void)n_splits;
    const uint hk = h / group;
    const ulong q_base = q_off + (ulong)b * q_bs + (ulong)h * q_hs;
    const ulong k_base = k_off + (ulong)b * k_bs + (ulong)hk * k_hs;
    const ulong v_base = v_off + (ulong)b * v_bs + (ulong)hk * v_hs;
    const uint key_len = batch_key_len(key_lens, b, seq_k);
    const long diag_k = diagonal_keys(key_len, seq_k, diag_offset);
    const uint r_lo = row0 + 16 * warp + g;       /* the lane's rows: r_lo and r_lo + 8 */

#if WG_PRODUCER
    if (get_local_id(0) == 0)
        for (uint u = 0; u < K_SLOTS + V_SLOTS; u++) {
            mbar_init(mbars + 2 * u, WG_TMA ? 1 : 128);     /* full: the producer's copies */
            mbar_init(mbars + 2 * u + 1, 128 * WARPGROUPS); /* empty: every consumer work-item */
        }
    /* the barrier below orders the initialisation before every use */
#endif
    /* Q: global -> local (rows past seq_q zeros) -> this warp's A fragments, kept for the call;
     * Q_PASS rows at a time (three or four warpgroups' rows would not fit local memory at once). */
    uint qa[4 * QK_STEPS];
#if WG_PRODUCER
    /* the consumers read their Q fragments from global memory after setmaxnreg (below) */
    barrier(CLK_LOCAL_MEM_FENCE);
#else
#pragma unroll
    for (uint pass = 0; pass < BLOCK_Q; pass += Q_PASS) {
        const uint rows = min((uint)Q_PASS, (uint)BLOCK_Q - pass);
        if (pass > 0)
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous pass's rows are read */
        stage_rows(tiles, q, q_base, q_ss, row0 + pass, rows, seq_q);
        async_commit();
        async_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (16 * warp - pass < rows) {
            /* ldmatrix x4, matrix j = lane / 8: rows + 8 for j = 1, 3, columns + 8 for j = 2, 3 */
            __local const ushort *src =
                tiles + (16 * warp - pass + lane % 8 + (lane / 8) % 2 * 8) * ROW_STRIDE + lane / 16 * 8;
#pragma unroll
            for (uint kk = 0; kk < QK_STEPS; kk++) {
                const uint4 w = load_matrix_x4(src + kk * 16);
                qa[4 * kk] = w.x;
                qa[4 * kk + 1] = w.y;
                qa[4 * kk + 2] = w.z;
                qa[4 * kk + 3] = w.w;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* Q's staging area becomes the K and V tiles */
#endif

    /* the keys this block sees and the lane's score rules */
    uint key_begin, key_end;
    wg_block_keys(row0, seq_q, diag_k, key_len, win_left, win_right, &key_begin, &key_end);
    wg_rules ru =
        wg_rules_for(row0, r_lo, seq_q, diag_k, key_len, win_left, win_right, score_scale, softcap, alibi, h);
    wg_bias_rows(&ru, bias + bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs, bias_rs, r_lo, seq_q, seq_k);
    const uint n_tiles = (key_end - key_begin + BLOCK - 1) / BLOCK;

    float acc[O_ACC];
#pragma unroll
    for (uint i = 0; i < O_ACC; i++)
        acc[i] = 0.0f;
    wg_rows rw = {-INFINITY, -INFINITY, 0.0f, 0.0f, 1.0f, 1.0f};
    wg_stream ks = wg_stream_start(k, k_base, k_ss, key_begin, key_len);
    wg_stream vs = wg_stream_start(v, v_base, v_ss, key_begin, key_len);

#if WG_PRODUCER
    /* The producer warpgroup (the last) runs wg_produce and ends; each slot has a full and an empty
     * mbarrier (mbars[2 slot], mbars[2 slot + 1]; K slots first). A consumer waits on full, fences
     * the async proxy (wgmma reads what the copies wrote) and arrives on empty once the group that
     * read the slot is complete, so the consumers drift apart by up to a tile instead of meeting at
     * a barrier every tile; their epilogue synchronises them alone (consumers_sync). They take
     * WG_CONSUMER_REGS registers (setmaxnreg) and read their Q fragments from global memory after
     * it: held across it, ptxas kept them in the launch's registers and serialised the products
     * (C7512). */
    __local ushort *const k_ring = tiles, *const v_ring = tiles + K_SLOTS * TILE_HALVES;
    __local ulong *const k_bars = mbars, *const v_bars = mbars + 2 * K_SLOTS;
    if (warp >= 4 * WARPGROUPS) {
#if WG_TMA
        __asm__ __volatile__("// sm90a: setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PRODUCER_REGS) : "memory");
        if (warp == 4 * WARPGROUPS) {
            const uint group =
                get_group_id(0) + get_num_groups(0) * (get_group_id(1) + get_num_groups(1) * get_group_id(2));
            wg_tma_produce(tma_maps + 32 * (ulong)group, map_words, k + k_base, v + v_base, key_len, 2 * k_ss,
                           2 * v_ss, key_begin, k_ring, v_ring, k_bars, v_bars, n_tiles,
                           wg_first_tile(row0, seq_q, diag_k, key_begin, n_tiles));
        }
        (void)ks, (void)vs;
#else
        wg_produce(&ks, &vs, k_ring, v_ring, k_bars, v_bars, n_tiles);
#endif
        return; /* the epilogue below is the consumers' (consumers_sync) */
    }
    __asm__ __volatile__("// sm90a: setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CONSUMER_REGS) : "memory");
    wg_load_q(qa, q, q_base, q_ss, r_lo, t, seq_q);
    wg_positive_scale(qa, &ru);
#endif
#if WG_PIPE
    /* The pipelined consumers (the trip above, "WG_PIPE 1"): K(t) in K slot t % K_SLOTS, V(t) in V
     * slot t % V_SLOTS, each waited for on its full mbarrier and freed on its empty one once the
     * group that read it is complete. */
    float sa[S_ACC], sb[S_ACC];
    uint pa[4 * P_STEPS], pb[4 * P_STEPS];
    if (n_tiles > 0) {
        mbar_wait(k_bars, 0);
        fence_proxy_async();
        wg_scores_issue(sa, qa, k_ring);
        wg_wait(0);
        wg_keep_s(sa);
        mbar_arrive(k_bars + 1);
    }
    uint j = 0;
    for (; j + 1 < n_tiles; j += 2) {
        const uint k1 = (j + 1) % K_SLOTS, k2 = (j + 2) % K_SLOTS, v0 = j % V_SLOTS, v1 = (j + 1) % V_SLOTS;
        mbar_wait(k_bars + 2 * k1, (j + 1) / K_SLOTS % 2);
        fence_proxy_async();
        wg_scores_issue(sb, qa, k_ring + k1 * TILE_HALVES); /* S(j + 1) in flight */
        wg_softmax(sa, pa, &rw, key_begin + j * BLOCK, &ru, t, WG_NO_BIAS);
        wg_rescale(acc, &rw);
        mbar_wait(v_bars + 2 * v0, j / V_SLOTS % 2);
        fence_proxy_async();
        wg_values_issue(acc, pa, v_ring + v0 * TILE_HALVES); /* O(j) in flight */
        wg_wait(1);                                          /* S(j + 1) is complete */
        wg_keep_s(sb);
        mbar_arrive(k_bars + 2 * k1 + 1);

        if (j + 2 < n_tiles) {
            mbar_wait(k_bars + 2 * k2, (j + 2) / K_SLOTS % 2);
            fence_proxy_async();
        }
        /* S(j + 2) in flight; past the last tile a product of a slot no copy writes again, that
         * nothing reads */
        wg_scores_issue(sa, qa, k_ring + k2 * TILE_HALVES);
        wg_softmax(sb, pb, &rw, key_begin + (j + 1) * BLOCK, &ru, t, WG_NO_BIAS);
        wg_wait(1); /* O(j) is complete */
        wg_keep_o(acc, pa);
        mbar_arrive(v_bars + 2 * v0 + 1);
        wg_rescale(acc, &rw);
        mbar_wait(v_bars + 2 * v1, (j + 1) / V_SLOTS % 2);
        fence_proxy_async();
        wg_values_issue(acc, pb, v_ring + v1 * TILE_HALVES); /* O(j + 1) in flight */
        wg_wait(0);
        wg_keep_s(sa);
        wg_keep_o(acc, pb);
        mbar_arrive(v_bars + 2 * v1 + 1);
        if (j + 2 < n_tiles)
            mbar_arrive(k_bars + 2 * k2 + 1);
    }
    if (j < n_tiles) { /* an odd count: the last tile alone, S(j) complete in sa */
        const uint v0 = j % V_SLOTS;
        wg_softmax(sa, pa, &rw, key_begin + j * BLOCK, &ru, t, WG_NO_BIAS);
        wg_rescale(acc, &rw);
        mbar_wait(v_bars + 2 * v0, j / V_SLOTS % 2);
        fence_proxy_async();
        wg_values_issue(acc, pa, v_ring + v0 * TILE_HALVES);
        wg_wait(0);
        wg_keep_o(acc, pa);
    }
#elif WG_PRODUCER
    if (n_tiles > 1)
        wg_turns_open(warp / 4);
    wg_consume(acc, qa, &rw, &ru, t, warp / 4, k_ring, v_ring, k_bars, v_bars, key_begin, n_tiles,
               wg_first_tile(row0, seq_q, diag_k, key_begin, n_tiles), 0, row0, seq_q, diag_k, key_len, win_left,
               win_right);
    if (n_tiles > 1)
        wg_turns_close(warp / 4);
#else
    /* tiles 0 .. STAGES - 2 first, one commit group each (empty past the last tile); stage u holds
     * a K tile at halves u * STAGE_HALVES and its V tile TILE_HALVES on */
#pragma unroll
    for (uint u = 0; u + 1 < STAGES; u++) {
        if (u < n_tiles) {
            wg_stream_tile(&ks, tiles + u * STAGE_HALVES);
            wg_stream_tile(&vs, tiles + u * STAGE_HALVES + TILE_HALVES);
        }
        async_commit();
    }
    uint stage = 0; /* j % STAGES */
    for (uint j = 0; j < n_tiles; j++) {
        async_wait_pending(STAGES - 2); /* this work-item's copies of tile j are complete */
        fence_proxy_async();            /* ... and ordered before wgmma's reads of them */
        barrier(CLK_LOCAL_MEM_FENCE);   /* tile j is in; every warpgroup is done with tile j - 1 */
        const uint refill = stage == 0 ? STAGES - 1 : stage - 1;
        if (j + STAGES - 1 < n_tiles) {
            wg_stream_tile(&ks, tiles + refill * STAGE_HALVES);
            wg_stream_tile(&vs, tiles + refill * STAGE_HALVES + TILE_HALVES);
        }
        async_commit();
        __local const ushort *k_tile = tiles + stage * STAGE_HALVES;
        __local const ushort *v_tile = k_tile + TILE_HALVES;
        stage = stage + 1 == STAGES ? 0 : stage + 1;

        float s[S_ACC];
        uint pa[4 * P_STEPS];
        wg_scores(s, qa, k_tile);
        wg_softmax(s, pa, &rw, key_begin + j * BLOCK, &ru, t, WG_NO_BIAS);
        wg_rescale(acc, &rw);
        wg_values(acc, pa, v_tile);
    }
#endif
    float l_lo, l_hi;
    wg_row_sums(&rw, lse, ((ulong)b * heads_q + h) * seq_q, r_lo, t, seq_q, &l_lo, &l_hi);

    /* O: registers -> local (this warp's rows, padded) -> 16-byte coalesced stores, Q_PASS rows at
     * a time. */
    const float inv_lo = l_lo == 0.0f ? 0.0f : 1.0f / l_lo, inv_hi = l_hi == 0.0f ? 0.0f : 1.0f / l_hi;
    const ulong o_base = o_off + (ulong)b * o_bs + (ulong)h * o_hs;
#pragma unroll
    for (uint pass = 0; pass < BLOCK_Q; pass += Q_PASS) {
        const uint rows = min((uint)Q_PASS, (uint)BLOCK_Q - pass);
        consumers_sync(); /* every warpgroup is done with the last tile (the pass before) */
        if (16 * warp - pass < rows) {
            __local uint *dst = (__local uint *)(tiles + (16 * warp - pass + g) * ROW_STRIDE + 2 * t);
#pragma unroll
            for (uint n = 0; n < O_COLS / 8; n++) {
                dst[n * 4] = pack_pair(acc[4 * n] * inv_lo, acc[4 * n + 1] * inv_lo);
                dst[n * 4 + 8 * ROW_STRIDE / 2] = pack_pair(acc[4 * n + 2] * inv_hi, acc[4 * n + 3] * inv_hi);
            }
        }
        consumers_sync();
        for (uint c = get_local_id(0); c < rows * CHUNKS; c += CONSUMER_THREADS) {
            const uint r = c / CHUNKS, piece = c % CHUNKS;
            if (row0 + pass + r < seq_q && piece * 8 < D_REAL)
                *(__global uint4 *)(o + o_base + (ulong)(row0 + pass + r) * o_ss + piece * 8) =
                    *(__local const uint4 *)(tiles + r * ROW_STRIDE + piece * 8);
        }
    }
}
#endif

#if WG_PERSIST
/* ---- the persistent kernel (WG_PERSIST, nv_wgmma.persistent) ------------------------------------
 * nv_wgmma_forward_persistent runs the producer loop in turns (WG_PRODUCER, WG_PIPE 0) as one
 * work-group per SM: the host launches at most as many work-groups as the device has compute units,
 * and work-group w of G takes one block of each round of G blocks (wg_round_block; block lin is the
 * query block, head and batch entry that nv_wgmma_forward's work-group lin takes; with CAUSAL the
 * blocks that see the most keys come first). One work-group holds an SM's registers, so a work-group per
 * block leaves the SM idle from one block's last product to the next one's first: its launch, Q,
 * the tensor maps, the first tiles' latency, O's stores. Here the producer streams the next
 * block's first tiles while the consumers finish the block before, and the rings, their mbarriers'
 * phases and the consumers' turns run on across blocks (`before`: the tiles of the work-group's
 * blocks so far, modulo WG_RING_CYCLE).
 * O goes from registers straight to global memory (the tiles' memory holds the next block's tiles
 * by then): the four work-items of a quad write 16 contiguous bytes of a row.
 * Its tiles come through TMA (WG_TMA). Each block's K and V tensor maps (they name its batch entry, K/V head and key
 * length) are built into one of the work-group's two pairs of map slots, alternately, counting the
 * blocks that have tiles. Before the producer rebuilds a pair it waits on that pair's block-done
 * mbarrier for the block that used it before, on which every consumer work-item arrives once its
 * last product of the block is complete: no copy reads a map while it is rewritten. */
#if !WG_PRODUCER || WG_PIPE || !WG_TMA
#error "WG_PERSIST takes the producer loop in turns with its tiles through TMA (WG_PRODUCER, WG_TMA, WG_PIPE 0)"
#endif

/* The block work-group w of G takes in its round k (the blocks kG .. kG + G - 1, one each): w in
 * the even rounds, G - 1 - w in the odd ones, so that with CAUSAL, whose blocks come longest first,
 * a work-group's long block of one round meets a short one in the next. */
static inline uint wg_round_block(uint k, uint w, uint groups)
{
    return k * groups + (k % 2 ? groups - 1 - w : w);
}

/* A word of the lane's quad partner lane ^ mask. */
static inline uint quad_xor(uint x, uint mask)
{
    uint r;
    __asm__ __volatile__("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\n" : "=r"(r) : "r"(x), "r"(mask));
    return r;
}

/* The 4 x 4 words of a quad transposed: lane t holds w[k] = M[t][k] and gets M[k][t] (two
 * butterfly stages: the 2 x 2 blocks off the diagonal swap between lanes t and t ^ 2, then each
 * 2 x 2 block transposes between t and t ^ 1). */
static inline void quad_transpose(uint w[4], uint t)
{
    const int hi = (t & 2) != 0, lo = (t & 1) != 0;
    uint r0 = quad_xor(hi ? w[0] : w[2], 2), r1 = quad_xor(hi ? w[1] : w[3], 2);
    w[0] = hi ? r0 : w[0];
    w[1] = hi ? r1 : w[1];
    w[2] = hi ? w[2] : r0;
    w[3] = hi ? w[3] : r1;
    r0 = quad_xor(lo ? w[0] : w[1], 1);
    r1 = quad_xor(lo ? w[2] : w[3], 1);
    w[0] = lo ? r0 : w[0];
    w[2] = lo ? r1 : w[2];
    w[1] = lo ? w[1] : r0;
    w[3] = lo ? w[3] : r1;
}

/* O of the lane's rows r_lo and r_lo + 8 (those below seq_q), divided by their sums l_lo, l_hi
 * (0 for a row that saw no key), from registers to the rows at o + o_base, o_ss apart. The lanes of
 * a quad hold 4 bytes each of every 16 of a row (columns 8n + 2t, + 1); a transpose within the quad
 * gives lane t the 16 bytes of columns 8 (4m + t) .. + 7 for each 32 columns from 32m, so that each
 * lane stores 16 bytes and a warp's store writes whole 64-byte pieces of 8 rows. */
static inline void wg_store_o(__global ushort *o, ulong o_base, ulong o_ss, const float acc[O_ACC], float l_lo,
                              float l_hi, uint r_lo, uint t, uint seq_q)
{
    const float inv_lo = l_lo == 0.0f ? 0.0f : 1.0f / l_lo, inv_hi = l_hi == 0.0f ? 0.0f : 1.0f / l_hi;
    __global uint4 *lo_row = (__global uint4 *)(o + o_base + (ulong)r_lo * o_ss + 8 * t);
    __global uint4 *hi_row = (__global uint4 *)(o + o_base + (ulong)(r_lo + 8) * o_ss + 8 * t);
#pragma unroll
    for (uint m = 0; m < O_COLS / 32; m++) {
        uint w[4], x[4];
#pragma unroll
        for (uint k = 0; k < 4; k++) {
            const uint n = 4 * m + k;
            w[k] = pack_pair(acc[4 * n] * inv_lo, acc[4 * n + 1] * inv_lo);
            x[k] = pack_pair(acc[4 * n + 2] * inv_hi, acc[4 * n + 3] * inv_hi);
        }
        quad_transpose(w, t);
        quad_transpose(x, t);
        const int column_in = 32 * m + 8 * t < D_REAL; /* padding columns are not stored */
        if (r_lo < seq_q && column_in)
            lo_row[4 * m] = (uint4)(w[0], w[1], w[2], w[3]);
        if (r_lo + 8 < seq_q && column_in)
            hi_row[4 * m] = (uint4)(x[0], x[1], x[2], x[3]);
    }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void nv_wgmma_forward_persistent(__global const ushort *q, __global const ushort *k, __global const ushort *v,
                                 __global ushort *o, __global float *lse, uint seq_q, uint seq_k, uint heads_q,
                                 uint group, float score_scale,
                                 ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss,
                                 ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss,
                                 ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss,
                                 ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, uint win_left, uint win_right,
                                 int diag_offset, float softcap,
                                 float out_scale, __global const float *bias, ulong bias_off, ulong bias_bs,
                                 ulong bias_hs, ulong bias_rs, __global const float *alibi,
                                 __global const int *key_lens, uint n_splits, uint split_keys,
                                 __global const int *block_table, uint pages_per_seq, uint num_pages,
                                 __global const int *cu_seqlens_q, __global const int *cu_seqlens_k, uint total_q,
                                 uint total_k,
                                 __global ulong *tma_maps, /* 64 words a work-group: two pairs of K and V maps */
                                 uint batch)
{
    __local uint4 local_words[KV_HALVES / 8] __attribute__((aligned(1024)));
    __local uint map_words[64] __attribute__((aligned(128))); /* the tensor maps being built */
    __local ulong mbars[2 * (K_SLOTS + V_SLOTS) + 2]; /* full and empty a slot, then the two block-done */
    /* what this kernel does not take (the #error at the top) */
    (void)out_scale, (void)split_keys;
    (void)block_table, (void)n_splits;
    (void)pages_per_seq, (void)num_pages, (void)cu_seqlens_q, (void)cu_seqlens_k, (void)total_q, (void)total_k;

    __local ushort *const k_ring = (__local ushort *)local_words, *const v_ring = k_ring + K_SLOTS * TILE_HALVES;
    __local ulong *const k_bars = mbars, *const v_bars = mbars + 2 * K_SLOTS;
    const uint lane = get_local_id(0) % 32, warp = get_local_id(0) / 32;
    const uint n_q = (seq_q + BLOCK_Q - 1) / BLOCK_Q, n_hb = heads_q * batch, blocks = n_q * n_hb;
    const uint first = get_group_id(0), stride = get_num_groups(0);
    if (get_local_id(0) == 0) {
        for (uint u = 0; u < K_SLOTS + V_SLOTS; u++) {
            mbar_init(mbars + 2 * u, 1);                    /* full: the producer's box copies */
            mbar_init(mbars + 2 * u + 1, 128 * WARPGROUPS); /* empty: every consumer work-item */
        }
        mbar_init(mbars + 2 * (K_SLOTS + V_SLOTS), CONSUMER_THREADS);     /* block-done, even map uses */
        mbar_init(mbars + 2 * (K_SLOTS + V_SLOTS) + 1, CONSUMER_THREADS); /* odd ones */
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    if (warp >= 4 * WARPGROUPS) { /* the producer warpgroup: its first warp builds the maps, one work-item copies */
        __asm__ __volatile__("// sm90a: setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PRODUCER_REGS) : "memory");
        if (warp != 4 * WARPGROUPS)
            return;
        __local ulong *const done = mbars + 2 * (K_SLOTS + V_SLOTS);
        __global ulong *const pairs = tma_maps + 64 * (ulong)first;
        uint before = 0, uses = 0; /* the tiles so far modulo WG_RING_CYCLE; the blocks with tiles so far */
        int primed = 0;
        for (uint rd = 0; rd * stride < blocks; rd++) {
            const uint lin = wg_round_block(rd, first, stride);
            if (lin >= blocks)
                continue;
            uint b, h, row0, key_begin, key_end;
            wg_block_at(lin, n_q, heads_q, n_hb, &b, &h, &row0);
            const uint hk = h / group, key_len = batch_key_len(key_lens, b, seq_k);
            const long diag_k = diagonal_keys(key_len, seq_k, diag_offset);
            wg_block_keys(row0, seq_q, diag_k, key_len, win_left, win_right, &key_begin, &key_end);
            const uint n_tiles = (key_end - key_begin + BLOCK - 1) / BLOCK;
            if (n_tiles == 0)
                continue;
            __global ulong *const maps = pairs + 32 * (uses % 2);
            if (uses >= 2) /* the block that used these maps before is complete */
                mbar_wait(done + uses % 2, (uses / 2 - 1) % 2);
            wg_tma_make_maps(maps, map_words, k + k_off + (ulong)b * k_bs + (ulong)hk * k_hs,
                             v + v_off + (ulong)b * v_bs + (ulong)hk * v_hs, key_len, 2 * k_ss, 2 * v_ss, lane);
            if (lane == 0) {
                wg_tile_source src =
                    wg_tma_source(maps, key_begin, wg_first_tile(row0, seq_q, diag_k, key_begin, n_tiles), n_tiles);
                wg_produce_tiles(&src, k_ring, v_ring, k_bars, v_bars, n_tiles, before, primed);
            }
            __asm__ __volatile__("bar.warp.sync 0xffffffff;\n" ::: "memory");
            primed = primed || before + n_tiles >= WG_RING_CYCLE;
            before = (before + n_tiles) % WG_RING_CYCLE;
            uses++;
        }
        return;
    }

    /* the consumer warpgroups */
    __asm__ __volatile__("// sm90a: setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CONSUMER_REGS) : "memory");
    const uint g = lane / 4, t = lane % 4, wg = warp / 4;
    uint before = 0, uses = 0;
    wg_turns_open(wg);
    for (uint rd = 0; rd * stride < blocks; rd++) {
        const uint lin = wg_round_block(rd, first, stride);
        if (lin >= blocks)
            continue;
        uint b, h, row0, key_begin, key_end;
        wg_block_at(lin, n_q, heads_q, n_hb, &b, &h, &row0);
        const uint key_len = batch_key_len(key_lens, b, seq_k);
        const long diag_k = diagonal_keys(key_len, seq_k, diag_offset);
        const uint r_lo = row0 + 16 * warp + g; /* the lane's rows: r_lo and r_lo + 8 */
        wg_block_keys(row0, seq_q, diag_k, key_len, win_left, win_right, &key_begin, &key_end);
        const uint n_tiles = (key_end - key_begin + BLOCK - 1) / BLOCK;
        wg_rules ru =
            wg_rules_for(row0, r_lo, seq_q, diag_k, key_len, win_left, win_right, score_scale, softcap, alibi, h);
        wg_bias_rows(&ru, bias + bias_off + (ulong)b * bias_bs + (ulong)h * bias_hs, bias_rs, r_lo, seq_q, seq_k);
        uint qa[4 * QK_STEPS];
        wg_load_q(qa, q, q_off + (ulong)b * q_bs + (ulong)h * q_hs, q_ss, r_lo, t, seq_q);
        wg_positive_scale(qa, &ru);
        float acc[O_ACC];
#pragma unroll
        for (uint i = 0; i < O_ACC; i++)
            acc[i] = 0.0f;
        wg_rows rw = {-INFINITY, -INFINITY, 0.0f, 0.0f, 1.0f, 1.0f};
        wg_consume(acc, qa, &rw, &ru, t, wg, k_ring, v_ring, k_bars, v_bars, key_begin, n_tiles,
                   wg_first_tile(row0, seq_q, diag_k, key_begin, n_tiles), before, row0, seq_q, diag_k, key_len,
                   win_left, win_right);
        before = (before + n_tiles) % WG_RING_CYCLE;
        if (n_tiles > 0) { /* this block's maps are free once every consumer is here */
            mbar_arrive(mbars + 2 * (K_SLOTS + V_SLOTS) + uses % 2);
            uses++;
        }
        float l_lo, l_hi;
        wg_row_sums(&rw, lse, ((ulong)b * heads_q + h) * seq_q, r_lo, t, seq_q, &l_lo, &l_hi);
        wg_store_o(o, o_off + (ulong)b * o_bs + (ulong)h * o_hs, o_ss, acc, l_lo, l_hi, r_lo, t, seq_q);
    }
    wg_turns_close(wg);
}
#endif
