/*
 * nv_mma_forward.cl - the forward pass on NVIDIA tensor cores, through inline PTX (mma.sync,
 * ldmatrix, cp.async, shfl.sync), in FlashAttention-2's manner. Chosen by the planner only on
 * NVIDIA devices of compute capability >= 8.0, for fp16 and bf16 storage, any head_dim up to 256
 * and any layout, with every feature of the descriptor (causal, sliding window, softcap, bias, ALiBi,
 * key lengths), GQA, paged KV caches, lse, any seq_q and seq_k; everything else runs the portable
 * kernels (cl/flash_forward_*.cl), which stay the reference. Its variable-length path (below) is
 * built by the compile matrices but not planned yet (lib/nv_mma_forward_plan.c).
 *
 * Why a separate file: the portable kernel does one local-memory load per FMA and stays near the
 * CUDA-core rate; the tensor cores are an order of magnitude faster and OpenCL reaches them only
 * through PTX, which only NVIDIA's compiler accepts.
 *
 * The work-group owns BLOCK_Q = 16 * M_TILES * WARPS query rows of one (batch, head); warp w owns
 * M_TILES slices of 16 rows and keeps them in registers as mma A fragments for the whole call. For
 * each tile of BLOCK keys:
 *   S = Q K^T        mma.sync m16n8k16, fp32 accumulators in registers; each K fragment read with
 *                    ldmatrix feeds the warp's M_TILES slices;
 *   online softmax   each row's values live in the 4 lanes of a quad: shfl.sync reduces the row
 *                    maximum, the row sum stays per lane until the end; at head_dim >= 128
 *                    O is rescaled only when a row maximum grew by more than a factor 2^8
 *                    (NV_RESCALE_THRESH);
 *   O += P V         P is packed to f16/bf16 pairs in registers (the S accumulator layout is the
 *                    A fragment layout), V read with ldmatrix.trans; O stays in fp32 registers.
 * Local memory holds STAGES (2 unless the host asks for more) K and V tiles, each BLOCK x HEAD_DIM
 * in the storage type with rows padded by 16 bytes so that the 8 rows of an ldmatrix fall in
 * distinct banks. cp.async fills them: tiles j + 1 .. j + STAGES - 1 stream in while tile j is
 * computed, with one barrier per tile; each work-item
 * copies from pointers it advances tile by tile (kv_stream). Q is staged through the same memory
 * once at the start (at head_dim <= 64 its fragments are loaded from global memory instead, while
 * the first tile streams in: NV_Q_DIRECT), and O passes through it at the end so that the stores
 * are 16-byte and coalesced.
 *
 * Masks. A block visits the key tiles from the one holding its first row's first visible key to its
 * last row's last one (common.cl's visible_keys: key length, CAUSAL, WINDOW); the tiles outside
 * them are never loaded. Only the tiles that some row of the block sees in part are masked: there
 * each lane's rows get a first and a last key (32-bit, relative to the lane's first pair), against
 * which the pairs' key offsets are compared; the other tiles run without masks.
 *
 * Scores are in log2 units and exp2 is ex2.approx.ftz. Without transforms the host folds log2(e)
 * into score_scale; with SOFTCAP, BIAS or ALIBI it passes the natural scale (as the portable kernel
 * takes it) and each transform is carried into log2 units here (softcap_log2 for the cap; the bias
 * and the slopes times log2(e)), in common.cl's order: softcap, then the bias, then ALiBi. With BIAS
 * each lane reads its rows' biases for a tile into registers one tile ahead, two keys per 8-byte load
 * when the host found the bias offset and strides even (BIAS_PAIRS); the planner gives a bias one
 * 16-row slice per warp, which leaves the registers for it. With BIAS_STAGED (the host found the
 * offset and strides multiples of 4 floats) the bias tile of the whole block is copied into local
 * memory beside its K and V tiles instead, by cp.async in the same commit group (bias_stream_next),
 * and each lane reads its values there: no registers hold a bias between tiles, so the block keeps
 * two slices per warp and each K/V byte read from L2 serves 128 rows, not 64 (the bias was bound by
 * L2's bandwidth: see lib/nv_mma_forward_plan.c).
 * With CAUSAL the query blocks that see the most keys are launched first.
 * A row with no visible key ends with l = 0 and gets O = 0, lse = -inf. Unlike the portable kernel,
 * a masked key's P (0) is still multiplied with its V row inside a tile, so a NaN in V row j reaches
 * every row of the same query block that shares j's key tile (see clflash.h).
 *
 * Decoding (common.cl's SPLIT and PACK): with PACK > 1 the block's rows are the query heads of one
 * K/V head (row r is query r / PACK of head h0 + r % PACK), so each K/V tile is read once for the
 * whole GQA group; with SPLIT the block visits only its part of the keys and writes that part's O
 * in fp32 and its lse straight from registers (no staging, no barrier) for the merge kernel. With
 * KEYLEN, keys at or past the batch entry's length are neither loaded nor seen: the tiles past it
 * are skipped, and in the tile that crosses it the missing rows are zero-filled and masked.
 *
 * Variable-length batches (VARLEN, common.cl's seq_span): each block takes its sequence's first
 * packed rows and lengths, reckons visibility, masks and ALiBi in them, and reads and writes from
 * those rows; the grid covers the longest sequence, and a block past its own sequence's queries
 * returns at once. Split parts stay in the host's padded rows; the merge packs them.
 *
 * Head dims that are not multiples of 16 run padded: HEAD_DIM is the next multiple of 16, D_REAL the
 * tensors' own (nv_mma_common.cl): the padding columns of Q, K and V are zeros in local memory and
 * O's are not stored; rows that cp.async cannot copy in 16-byte pieces (NV_ALIGNED 0) are copied
 * element by element, without the overlap of the asynchronous copies.
 *
 * Defines: HEAD_DIM (multiple of 16), BLOCK (keys per tile, multiple of 16), WARPS, M_TILES, STAGES,
 * D_REAL, NV_ALIGNED,
 * CAUSAL, WINDOW, SOFTCAP, BIAS, BIAS_PAIRS, BIAS_STAGED, ALIBI, KEYLEN, VARLEN, SPLIT, PACK, WITH_LSE,
 * CLFLASH_DTYPE_F16 or CLFLASH_DTYPE_BF16, NV_RESCALE_THRESH, NV_Q_DIRECT and NV_Q_CHUNK (below; the host's
 * defaults are in lib/nv_mma_forward_plan.c, the nv_forward.* tuning settings override them). The
 * PTX helpers (mma_16x8x16, load_matrix_x4, copy16_async, kv_stream, ...) and THREADS, ROW_STRIDE,
 * CHUNKS, K_STEPS, D_TILES come from nv_mma_common.cl, which the host puts before this file.
 */

#ifndef SPLIT
#error "a forward kernel is built with SPLIT and PACK (lib/dispatch_util.c, clflash_forward_defines)"
#endif
/* M_TILES (16-row slices per warp), STAGES, FUSED_MERGE and WITH_OUT_LSE: the host's
 * (lib/nv_mma_forward_plan.c), like every parameter below. */
#if !defined(M_TILES) || !defined(STAGES) || !defined(FUSED_MERGE) || !defined(WITH_OUT_LSE)
#error "M_TILES, STAGES, FUSED_MERGE and WITH_OUT_LSE are set by the host (lib/nv_mma_forward_plan.c)"
#endif
/* NV_RESCALE_THRESH (log2 units): a row's reference maximum, against which P = exp2(s - m) is taken,
 * moves only when some row of the warp sees a score more than this above its own; until then P may
 * reach 2^NV_RESCALE_THRESH (exact, in fp32 and f16/bf16 alike) and O and l are not rescaled. -1
 * rescales every tile. At head_dim >= 128 the rescale is 4 * M_TILES * HEAD_DIM / 8 multiplies per
 * lane and tile, and skipping it gave 1.05x to 1.1x on the H200; at 64 the warp vote cost more
 * than it saved, so the host's default is 8 at head_dim >= 128, else -1. */
#ifndef NV_RESCALE_THRESH
#error "NV_RESCALE_THRESH is set by the host (lib/nv_mma_forward_plan.c)"
#endif

/* NV_Q_DIRECT: 1 loads Q's A fragments from global memory straight into registers while the first
 * K and V tile streams in; 0 stages Q through local memory first (a barrier and a wait before the
 * first tile). On the H200 (f16, n = 1024..16384) direct loads gave 1.02x to 1.05x at head_dim 64
 * and 0.96x to 0.98x at 128, so the host's default is head_dim <= 64. */
#ifndef NV_Q_DIRECT
#error "NV_Q_DIRECT is set by the host (lib/nv_mma_forward_plan.c)"
#endif
#if D_REAL != HEAD_DIM || !NV_ALIGNED /* the direct loads read whole column pairs of 4-byte aligned rows */
#undef NV_Q_DIRECT
#define NV_Q_DIRECT 0
#endif

/* NV_Q_CHUNK: with the causal mask, the query blocks taken side by side over every head and batch
 * entry, the last rows first (nv_mma_common.cl's chunked_block_order). */
#ifndef NV_Q_CHUNK
#error "NV_Q_CHUNK is set by the host (lib/nv_mma_forward_plan.c)"
#endif

/* STAGES: K/V tiles in local memory, STAGES - 1 of them in flight while one is computed. The host
 * asks for 2 (double buffering) except when decoding, whose work-groups have little to compute per
 * tile and keep more bytes in flight with deeper pipelines of smaller tiles (nv_mma_forward_plan.c). */
#if STAGES < 2
#error "STAGES must be at least 2"
#endif

#define BLOCK_Q (16 * M_TILES * WARPS)
#define S_TILES (BLOCK / 8)           /* n8 tiles of S (keys) */
#define O_TILES D_TILES               /* n8 tiles of O (columns) */
#define STAGE_HALVES (2 * BLOCK * ROW_STRIDE) /* one stage: a K tile and its V tile */
#ifndef BIAS_STAGED
#define BIAS_STAGED 0
#endif
#if BIAS_STAGED && !BIAS
#error "BIAS_STAGED stages a bias"
#endif
/* BIAS_STAGED: after the STAGES K/V stages, STAGES bias tiles of BLOCK_Q rows of BIAS_ROW floats (BLOCK
 * keys and 8 of padding: a quarter warp's 8-byte reads of 4 rows then fall in distinct banks). */
#define BIAS_ROW (BLOCK + 8)
#define BIAS_TILE_FLOATS (BLOCK_Q * BIAS_ROW)
#define BIAS_ROWS_LOCAL (BIAS_STAGED * (STAGES * BIAS_TILE_FLOATS * 2 + ROW_STRIDE - 1) / ROW_STRIDE) /* in K/V rows */
#define KV_AND_BIAS_ROWS (2 * STAGES * BLOCK + BIAS_ROWS_LOCAL)
#define LOCAL_ROWS (BLOCK_Q > KV_AND_BIAS_ROWS ? BLOCK_Q : KV_AND_BIAS_ROWS) /* the tiles, or Q staged */

#if PAGED
/* K and V tiles from a paged cache (common.cl's PAGED), the stream kv_stream is for tensors. The
 * table entries a tile needs are read when the tile before it is issued and used one call later,
 * so their latency passes behind a tile's computation instead of holding up the copies. Keys at or
 * past `limit` and the padding columns read nothing and become zeros. Rows of 16 bytes only: the
 * planner sends other layouts to the portable kernel.
 * Where every tile lies in one page (PAGE_SIZE a multiple of BLOCK: tiles start at multiples of
 * BLOCK) and kv_stream copies by pointers (STREAM_BY_POINTERS), one entry serves the whole tile and
 * each work-item copies its piece of rows r, r + ROW_STEP, ... from one pointer, as kv_stream
 * does (decoding with pages of 16 keys or more). Elsewhere each of a work-item's pieces
 * lid, lid + THREADS, ... of a tile has its own entry and address. */
#if !NV_ALIGNED
#error "a paged KV cache on the tensor cores needs NV_ALIGNED (lib/nv_mma_forward_plan.c)"
#endif
#if defined(STREAM_BY_POINTERS) && PAGE_SIZE % BLOCK == 0
#define PAGED_WHOLE_TILES 1
#define PAGED_ITEMS 1
#else
#define PAGED_WHOLE_TILES 0
#define PAGED_ITEMS ((BLOCK * CHUNKS + THREADS - 1) / THREADS) /* pieces per work-item and tile */
#endif
typedef struct {
    __global const ushort *k, *v;
    ulong k_base, v_base, k_page, v_page, k_ss, v_ss; /* head bases in a page, page and slot strides */
    __global const int *pages;                       /* the batch entry's table row */
    uint num_pages, key0, limit;
    uint page[PAGED_ITEMS]; /* the pool pages of tile key0: its one page, or each piece's row's */
} paged_stream;

static inline uint paged_entry(const paged_stream *st, uint key)
{
    return key < st->limit ? (uint)clamp(st->pages[key / PAGE_SIZE], 0, (int)st->num_pages - 1) : 0u;
}

static inline void paged_lookup(paged_stream *st)
{
#if PAGED_WHOLE_TILES
    st->page[0] = paged_entry(st, st->key0);
#else
#pragma unroll
    for (uint i = 0; i < PAGED_ITEMS; i++) {
        const uint c = get_local_id(0) + i * THREADS;
        st->page[i] = c < BLOCK * CHUNKS ? paged_entry(st, st->key0 + c / CHUNKS) : 0u;
    }
#endif
}

static inline paged_stream paged_stream_start(__global const ushort *k, ulong k_base, ulong k_page, ulong k_ss,
                                              __global const ushort *v, ulong v_base, ulong v_page, ulong v_ss,
                                              __global const int *pages, uint num_pages, uint limit, uint first)
{
    paged_stream st;
    st.k = k;
    st.v = v;
    st.k_base = k_base;
    st.v_base = v_base;
    st.k_page = k_page;
    st.v_page = v_page;
    st.k_ss = k_ss;
    st.v_ss = v_ss;
    st.pages = pages;
    st.num_pages = num_pages;
    st.key0 = first;
    st.limit = limit;
    paged_lookup(&st);
    return st;
}

/* Issues the copies of the next K tile into dst and its V tile into dst + BLOCK rows. */
static inline void paged_stream_next(paged_stream *st, __local ushort *dst)
{
#if PAGED_WHOLE_TILES
    const uint row = get_local_id(0) / CHUNKS, piece = get_local_id(0) % CHUNKS;
    const ulong slot = (ulong)(st->key0 % PAGE_SIZE + row), page = st->page[0];
    __global const ushort *kp = st->k + st->k_base + page * st->k_page + slot * st->k_ss + piece * 8;
    __global const ushort *vp = st->v + st->v_base + page * st->v_page + slot * st->v_ss + piece * 8;
    /* a piece at or past D_REAL (padding) never reads */
    const long rows_left = piece * 8 < D_REAL ? (long)st->limit - (long)st->key0 - (long)row : LONG_MIN / 2;
    dst += row * ROW_STRIDE + piece * 8;
#pragma unroll
    for (uint i = 0; i < BLOCK / ROW_STEP; i++) {
        const int in = (long)(i * ROW_STEP) < rows_left;
        copy16_async(dst + i * ROW_STEP * ROW_STRIDE, in ? kp + (ulong)(i * ROW_STEP) * st->k_ss : st->k + st->k_base,
                     in ? 16u : 0u);
        copy16_async(dst + (BLOCK + i * ROW_STEP) * ROW_STRIDE,
                     in ? vp + (ulong)(i * ROW_STEP) * st->v_ss : st->v + st->v_base, in ? 16u : 0u);
    }
#else
#pragma unroll
    for (uint i = 0; i < PAGED_ITEMS; i++) {
        const uint c = get_local_id(0) + i * THREADS, r = c / CHUNKS, piece = c % CHUNKS, key = st->key0 + r;
        if (c < BLOCK * CHUNKS) {
            const int inside = key < st->limit && piece * 8 < D_REAL;
            const ulong slot = (ulong)(key % PAGE_SIZE), page = st->page[i];
            const ulong at_k = st->k_base + page * st->k_page + slot * st->k_ss + piece * 8;
            const ulong at_v = st->v_base + page * st->v_page + slot * st->v_ss + piece * 8;
            copy16_async(dst + r * ROW_STRIDE + piece * 8, st->k + (inside ? at_k : st->k_base), inside ? 16u : 0u);
            copy16_async(dst + (BLOCK + r) * ROW_STRIDE + piece * 8, st->v + (inside ? at_v : st->v_base),
                         inside ? 16u : 0u);
        }
    }
#endif
    st->key0 += BLOCK;
    paged_lookup(st);
}
#define kv_tiles_next paged_stream_next
#else
#define kv_tiles_next kv_stream_next
#endif

/* Element offset of packed row r from its block's first head and query (common.cl's PACK). */
static inline ulong packed_row_offset(uint r, ulong head_stride, ulong seq_stride)
{
    return (ulong)(r % PACK) * head_stride + (ulong)ROW_QUERY(r) * seq_stride;
}

/* Issues the copies of packed rows row0 .. row0 + rows - 1 of Q (from the block's first head) into
 * dst; rows at or past `limit` become zeros. stage_rows with packed addresses. */
static inline void stage_packed_rows(__local ushort *dst, __global const ushort *src, ulong base, ulong head_stride,
                              ulong seq_stride, uint row0, uint rows, uint limit)
{
#if NV_ALIGNED
    for (uint c = get_local_id(0); c < rows * CHUNKS; c += THREADS) {
        const uint r = c / CHUNKS, piece = c % CHUNKS;
        const int inside = row0 + r < limit && piece * 8 < D_REAL;
        const ulong at = base + (inside ? packed_row_offset(row0 + r, head_stride, seq_stride) + piece * 8 : 0);
        copy16_async(dst + r * ROW_STRIDE + piece * 8, src + at, inside ? 16u : 0u);
    }
#else
    copy_rows_by_element(dst, src, base, head_stride, seq_stride, row0, rows, limit, PACK);
#endif
}

#if BIAS
/* The bias of the lane's rows (rows lo and hi of each slice) at its keys key0 + 8n + 2t, + 1 of
 * one tile, into registers. */
static inline void load_bias_tile(float2 dst[M_TILES][S_TILES][2], __global const float *const lo[M_TILES],
                                  __global const float *const hi[M_TILES], uint key0, uint seq_k, uint t)
{
    if (key0 + BLOCK <= seq_k) { /* the whole tile inside the rows */
#pragma unroll
        for (uint mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (uint n = 0; n < S_TILES; n++) {
                dst[mt][n][0] = bias_pair_inside(lo[mt] + key0 + 2 * t, 8 * n);
                dst[mt][n][1] = bias_pair_inside(hi[mt] + key0 + 2 * t, 8 * n);
            }
        return;
    }
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++)
#pragma unroll
        for (uint n = 0; n < S_TILES; n++) {
            dst[mt][n][0] = bias_pair(lo[mt], key0 + 8 * n + 2 * t, seq_k);
            dst[mt][n][1] = bias_pair(hi[mt], key0 + 8 * n + 2 * t, seq_k);
        }
}
#endif

#if BIAS_STAGED
/* The block's bias tiles into local memory (BIAS_STAGED): each call copies the next tile's BLOCK_Q
 * rows of BLOCK keys, 16 bytes (4 keys) per cp.async; rows past the block's rows and keys past seq_k
 * become zeros (those scores are masked). Needs the bias offset and strides in multiples of 4 floats
 * and every tile's first key a multiple of 4 (tiles start at multiples of BLOCK). */
#if (BLOCK_Q * BLOCK / 4) % THREADS != 0
#error "a bias tile's 16-byte pieces must divide among the work-items"
#endif
typedef struct {
    __global const float *rows; /* the bias at (b, the block's first head, row 0, key 0) */
    ulong head_stride, row_stride;
    uint row0, rows_total, h0, key0, seq_k;
} bias_stream;

static inline void bias_stream_next(bias_stream *st, __local float *dst)
{
#pragma unroll
    for (uint i = 0; i < BLOCK_Q * BLOCK / 4 / THREADS; i++) {
        const uint piece = get_local_id(0) + i * THREADS, r = piece / (BLOCK / 4);
        const uint key = st->key0 + piece % (BLOCK / 4) * 4;
        const uint row = min(st->row0 + r, st->rows_total - 1);
        const uint keys_in = st->row0 + r < st->rows_total && key < st->seq_k ? min(st->seq_k - key, 4u) : 0u;
        __global const float *src = st->rows + (ulong)(ROW_HEAD(st->h0, row) - st->h0) * st->head_stride +
                                    (ulong)ROW_QUERY(row) * st->row_stride + (keys_in ? key : 0u);
        copy16_async((__local ushort *)(dst + r * BIAS_ROW + piece % (BLOCK / 4) * 4), (__global const ushort *)src,
                     4u * keys_in);
    }
    st->key0 += BLOCK;
}
#endif

#if FUSED_MERGE && !SPLIT
#error "FUSED_MERGE merges split parts"
#endif
#if FUSED_MERGE
/* FUSED_MERGE: the split path's merge in the same launch. Each part's work-group, once its part is
 * stored, makes its stores visible device-wide and takes a ticket for its query block; the one that
 * draws the last ticket (every other part of the block is then stored) merges the block's parts into
 * the caller's O and lse and sets the ticket back to 0, so the counters are all 0 again when the
 * launch ends (the host creates them zeroed and never lets two launches share them). This saves
 * the merge kernel's launch and the ramp of a second kernel (on the H200, f16, d = 128, heads 32/8,
 * batch 1, seq_k 32768: 51 us per call against 55). The arithmetic is merge_states.cl's, in its
 * order, so both give the same bits for the same parts: top = max of the parts' lse,
 * w_p = exp(lse_p - top) (0 for an empty part, whose O, zeros, is read but not added),
 * O = (sum_p w_p O_p) / sum_p w_p, lse = top + log(sum_p w_p); O = 0 and lse = -inf when every part
 * is empty. The parts are read with ordinary loads after an acquire fence (fence.acq_rel.gpu),
 * which orders them after the other parts' fenced stores. The merge's loops keep their loads in
 * registers (constant trip counts, no branches inside): a first version with branches in them
 * took 12 us to merge 33 parts of 4 rows in the case above, this one about 6.5 (the tickets alone
 * cost nothing measurable). MERGE_GROUP, MERGE_PREFETCH, MERGE_UNROLL_PARTS and MERGE_LSE_BATCH
 * come from the host (lib/nv_mma_forward_plan.c: 4, 1, 8 and 8 unless the nv_forward.merge_*
 * tuning settings say otherwise; 4 and 8 parts measured the same in the case above). */
#define MERGE_VEC (D_REAL % 4 == 0 ? 4 : 1) /* columns per load: float4 where part rows allow */
#if MERGE_VEC == 4
typedef float4 vec_t;
#define load_vec(p) (*(__global const float4 *)(p))
#else
typedef float vec_t;
#define load_vec(p) (*(p))
#endif
/* MERGE_GROUP: a work-item's items (runs of MERGE_VEC columns) merged side by side; MERGE_PREFETCH:
 * the first round's loads go out before the lse phase; MERGE_UNROLL_PARTS: parts whose loads go out
 * together, for every item of a group; MERGE_LSE_BATCH: lse loads per work-item in flight. */
#if !defined(MERGE_GROUP) || !defined(MERGE_PREFETCH) || !defined(MERGE_UNROLL_PARTS) || !defined(MERGE_LSE_BATCH)
#error "the fused merge's parameters are set by the host (lib/nv_mma_forward_plan.c)"
#endif
/* WITH_OUT_LSE: the merge writes the caller's lse (every part has one: WITH_LSE). */

/* Orders this work-item's memory accesses before and after it at GPU scope (release and acquire
 * around the ticket's atomic). */
static inline void fence_device(void)
{
    __asm__ __volatile__("fence.acq_rel.gpu;\n" ::: "memory");
}

static inline void store_out(__global ushort *o, ulong at, float x)
{
    o[at] = (ushort)(pack_pair(x, 0.0f) & 0xffffu);
}

/* The offsets (src) and first weights (wrow) of the MERGE_GROUP items from e0, clamped to the last item. */
static inline void merge_items(uint e0, uint items, uint per_row, uint row0, uint n_splits, ulong p_hs, ulong p_ss,
                               ulong *src, uint *wrow)
{
#pragma unroll
    for (uint j = 0; j < MERGE_GROUP; j++) {
        const uint e = min(e0 + j * THREADS, items - 1), r = e / per_row;
        src[j] = packed_row_offset(row0 + r, p_hs, p_ss) + e % per_row * MERGE_VEC;
        wrow[j] = r * n_splits;
    }
}

/* One round's loads: parts p0 .. p0 + MERGE_UNROLL_PARTS - 1 (clamped to the last part) of every item. */
static inline void merge_load_round(vec_t x[MERGE_UNROLL_PARTS][MERGE_GROUP], __global const float *parts_o,
                                    ulong part_stride, const ulong *src, uint p0, uint n_splits)
{
#pragma unroll
    for (uint u = 0; u < MERGE_UNROLL_PARTS; u++) {
        const ulong part = (ulong)min(p0 + u, n_splits - 1) * part_stride;
#pragma unroll
        for (uint j = 0; j < MERGE_GROUP; j++)
            x[u][j] = load_vec(parts_o + part + src[j]);
    }
}

/* The work-group of the block's last part to finish merges; the others return at once. `scratch`: local
 * memory for BLOCK_Q * (n_splits + 1) floats, free to overwrite. parts_o: the parts' O (part p of
 * packed row r of this block at parts_o + p * part_stride + packed_row_offset(r) + column), parts_lse
 * the parts' lse (part p of row index i at parts_lse[p * rows_all + i]); both in the padded
 * [batch][heads_q][seq_q] rows of split_part. O's rows go to o_base (the entry's first row) and lse's
 * to lse_row0's: a variable-length batch's (VARLEN) are packed, q_row its first packed row. */
static inline void merge_block_parts(__global uint *ticket, __local uint *arrived, __local float *scratch, uint n_splits,
                                     uint row0, uint rows_total, uint b, uint h0, uint heads_q, uint seq_q,
                                     __global const float *parts_o, ulong part_stride, ulong p_hs, ulong p_ss,
                                     __global const float *parts_lse, ulong rows_all, __global ushort *o,
                                     ulong o_base, ulong o_hs, ulong o_ss, __global float *lse, uint total_q,
                                     uint q_row)
{
    fence_device(); /* this work-item's part stores, before the ticket */
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        *arrived = atomic_inc(ticket);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (*arrived != n_splits - 1)
        return;
    fence_device(); /* every other part's stores were fenced before its ticket */
    if (get_local_id(0) == 0)
        *ticket = 0; /* ready for the next launch */

    const uint rows = min((uint)BLOCK_Q, rows_total - row0), pairs = rows * n_splits;
    const uint per_row = D_REAL / MERGE_VEC, items = rows * per_row;
    /* The first round of this work-item's first group of items goes out before the weights are
     * known, so that its latency overlaps the lse's. */
    const uint first = get_local_id(0);
    ulong src[MERGE_GROUP]; /* element offset of item j in part 0 */
    uint wrow[MERGE_GROUP]; /* its row's first weight */
    vec_t x[MERGE_UNROLL_PARTS][MERGE_GROUP];
    merge_items(first, items, per_row, row0, n_splits, p_hs, p_ss, src, wrow);
#if MERGE_PREFETCH
    merge_load_round(x, parts_o, part_stride, src, 0, n_splits);
#endif
    __local float *const w = scratch;                        /* [row][part]: the lse, then the weights */
    __local float *const inv = scratch + BLOCK_Q * n_splits; /* [row]: the reference maximum, then 1 / sum */
    /* The parts' lse, MERGE_LSE_BATCH loads per work-item in flight. */
    for (uint e0 = get_local_id(0); e0 < pairs; e0 += MERGE_LSE_BATCH * THREADS) {
        float l[MERGE_LSE_BATCH];
#pragma unroll
        for (uint j = 0; j < MERGE_LSE_BATCH; j++) {
            const uint e = min(e0 + j * THREADS, pairs - 1), r = row0 + e / n_splits, p = e % n_splits;
            l[j] = *(parts_lse + p * rows_all + ((ulong)b * heads_q + ROW_HEAD(h0, r)) * seq_q + ROW_QUERY(r));
        }
#pragma unroll
        for (uint j = 0; j < MERGE_LSE_BATCH; j++)
            if (e0 + j * THREADS < pairs)
                w[e0 + j * THREADS] = l[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint r = get_local_id(0); r < rows; r += THREADS) {
        float top = -INFINITY;
#pragma unroll 8
        for (uint p = 0; p < n_splits; p++)
            top = fmax(top, w[r * n_splits + p]);
        inv[r] = top == -INFINITY ? 0.0f : top;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = get_local_id(0); e < pairs; e += THREADS) { /* the weights, side by side */
        const float l = w[e];
        w[e] = l == -INFINITY ? 0.0f : exp(l - inv[e / n_splits]); /* NaN for a NaN lse */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint r = get_local_id(0); r < rows; r += THREADS) {
        float sum = 0.0f;
#pragma unroll 8
        for (uint p = 0; p < n_splits; p++)
            sum += w[r * n_splits + p];
#if WITH_OUT_LSE
        const uint rr = row0 + r;
        lse[lse_row0(b, ROW_HEAD(h0, rr), heads_q, seq_q, total_q, q_row) + ROW_QUERY(rr)] =
            sum == 0.0f ? -INFINITY : inv[r] + log(sum);
#endif
        inv[r] = sum == 0.0f ? 0.0f : 1.0f / sum;
    }
#if !WITH_OUT_LSE
    (void)lse;
    (void)total_q;
    (void)q_row;
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

    /* Items MERGE_GROUP at a time: item j of this work-item is e = id + j * THREADS, its row
     * e / (D_REAL / MERGE_VEC) and MERGE_VEC columns from e % (D_REAL / MERGE_VEC). The loads of
     * MERGE_UNROLL_PARTS parts for all of a group's items go out before any is used (one memory
     * latency for MERGE_UNROLL_PARTS * MERGE_GROUP loads): the loops have constant trip counts and
     * no branches (an item past the end reads the last item, a part past the end the last part,
     * with weight 0), so that the loaded values stay in registers; the parts are summed in order. */
    for (uint e0 = first; e0 < items; e0 += MERGE_GROUP * THREADS) {
        vec_t acc[MERGE_GROUP];
#pragma unroll
        for (uint j = 0; j < MERGE_GROUP; j++)
            acc[j] = (vec_t)(0.0f);
        if (e0 != first)
            merge_items(e0, items, per_row, row0, n_splits, p_hs, p_ss, src, wrow);
        for (uint p0 = 0; p0 < n_splits; p0 += MERGE_UNROLL_PARTS) {
            if (!MERGE_PREFETCH || p0 != 0 || e0 != first)
                merge_load_round(x, parts_o, part_stride, src, p0, n_splits);
#pragma unroll
            for (uint u = 0; u < MERGE_UNROLL_PARTS; u++)
#pragma unroll
                for (uint j = 0; j < MERGE_GROUP; j++) {
                    const float wp = p0 + u < n_splits ? w[wrow[j] + p0 + u] : 0.0f;
                    /* an empty part (or one whose weight underflows) adds nothing */
                    acc[j] = wp != 0.0f ? fma((vec_t)(wp), x[u][j], acc[j]) : acc[j];
                }
        }
#pragma unroll
        for (uint j = 0; j < MERGE_GROUP; j++) {
            const uint e = e0 + j * THREADS, r = e / per_row;
            if (e >= items)
                continue;
            const ulong at = o_base + packed_row_offset(row0 + r, o_hs, o_ss) + e % per_row * MERGE_VEC;
            const vec_t y = acc[j] * inv[r];
#if MERGE_VEC == 4 && NV_ALIGNED
            *(__global uint2 *)(o + at) = (uint2)(pack_pair(y.x, y.y), pack_pair(y.z, y.w));
#elif MERGE_VEC == 4
            store_out(o, at, y.x);
            store_out(o, at + 1, y.y);
            store_out(o, at + 2, y.z);
            store_out(o, at + 3, y.w);
#else
            store_out(o, at, y);
#endif
        }
    }
}
#endif

/* Q_WITH_TILES: Q is staged in the last stage's local memory, its copies going out just before
 * the first K/V tiles' instead of a whole memory latency before them (decoding blocks of 16 rows
 * fit one stage). */
#define Q_WITH_TILES (!NV_Q_DIRECT && BLOCK_Q <= 2 * BLOCK)

/* This warp's A fragments of Q from the staged block at `staged` (rows of ROW_STRIDE). */
static inline void load_q_fragments(uint4 qf[M_TILES][K_STEPS], __local const ushort *staged, uint warp_row0,
                                    uint lane)
{
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        /* matrix j = lane / 8: rows + 8 for j = 1, 3; columns + 8 for j = 2, 3 */
        __local const ushort *src =
            staged + (warp_row0 + mt * 16 + lane % 8 + (lane / 8) % 2 * 8) * ROW_STRIDE + lane / 16 * 8;
#pragma unroll
        for (uint kk = 0; kk < K_STEPS; kk++)
            qf[mt][kk] = load_matrix_x4(src + kk * 16);
    }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void nv_mma_forward(__global const ushort *q, __global const ushort *k, __global const ushort *v,
                    __global ushort *o, __global float *lse, uint seq_q, uint seq_k, uint heads_q, uint group,
                    float score_scale,
                    ulong q_off, ulong q_bs, ulong q_hs, ulong q_ss,
                    ulong k_off, ulong k_bs, ulong k_hs, ulong k_ss,
                    ulong v_off, ulong v_bs, ulong v_hs, ulong v_ss,
                    ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, uint win_left, uint win_right, int diag_offset,
                    float softcap, float out_scale, __global const float *bias, ulong bias_off, ulong bias_bs,
                    ulong bias_hs,
                    ulong bias_rs, __global const float *alibi, __global const int *key_lens, uint n_splits,
                    uint split_keys, __global const int *block_table, uint pages_per_seq, uint num_pages,
                    __global const int *cu_seqlens_q, __global const int *cu_seqlens_k, uint total_q, uint total_k
#if FUSED_MERGE
                    , __global uint *tickets, __global ushort *o_out, __global float *lse_out, ulong out_off,
                    ulong out_bs, ulong out_hs, ulong out_ss
#endif
                    )
{
    /* uint4 elements: cp.async and ldmatrix need 16-byte aligned rows */
    __local uint4 tiles_words[LOCAL_ROWS * ROW_STRIDE / 8];
    __local ushort *const tiles = (__local ushort *)tiles_words;
#if FUSED_MERGE
    __local uint arrived; /* the block's ticket, as drawn by work-item 0 */
#endif
    /* Stage u (0 .. STAGES - 1) holds a K tile at rows 2u BLOCK and its V tile at rows (2u + 1) BLOCK. */

    const uint lane = get_local_id(0) % 32, warp = get_local_id(0) / 32;
    const uint g = lane / 4, t = lane % 4;
    /* grid dimension 1 counts the heads of the rows: query heads, or K/V heads with PACK > 1 */
#if CAUSAL
    /* The launch order, remapped so that the last query blocks come first (chunked_block_order,
     * chunks of NV_Q_CHUNK): under the causal mask those see the most keys, and the light ones fill
     * in at the end (1.1x at d = 128 on the H200). A block's parts (SPLIT) stay side by side. */
    const uint n_q = get_num_groups(0) / n_splits, n_h = get_num_groups(1), n_hb = n_h * get_num_groups(2);
    uint qi, hb;
    chunked_block_order(query_block_index(get_group_id(0), n_splits) + n_q * (get_group_id(1) + n_h * get_group_id(2)),
                        n_q, n_hb, NV_Q_CHUNK, &qi, &hb);
    const uint hg = hb % n_h, b = hb / n_h;
    const uint row0 = (n_q - 1 - qi) * BLOCK_Q;
#else
    const uint hg = get_group_id(1), b = get_group_id(2);
    const uint row0 = query_block_index(get_group_id(0), n_splits) * BLOCK_Q;
#endif
#if PACK > 1
    const uint hk = hg, h0 = hg * PACK; /* the block's K/V head and its first query head */
#else
    const uint h0 = hg, hk = hg / group;
#endif
    (void)group;
    /* The entry's queries and keys: len_q from packed row q_row, len_k from k_row (VARLEN, common.cl's
     * seq_span); seq_q and seq_k from row 0 otherwise. seq_q stays the grid's and the split parts'
     * row count; everything the entry's rows see is reckoned in len_q and len_k. */
    uint q_row, k_row;
    const uint len_q = seq_span(cu_seqlens_q, b, total_q, seq_q, &q_row);
    const uint len_k = seq_span(cu_seqlens_k, b, total_k, seq_k, &k_row);
    const uint rows_total = len_q * PACK; /* packed rows of one (batch, K/V head); len_q unpacked */
#if VARLEN
    /* A block past a short sequence's queries has nothing to compute or store; every part of it
     * returns here alike, before any barrier, and draws no ticket (FUSED_MERGE). */
    if (row0 >= rows_total)
        return;
#endif
    const uint warp_row0 = warp * 16 * M_TILES; /* this warp's first row within the block */
    const ulong q_base = q_off + (ulong)b * q_bs + (ulong)h0 * q_hs + (ulong)q_row * q_ss;
    /* paged: the head's place in a page (a paged cache is never a variable-length batch) */
    const ulong k_base = kv_head_base(k_off, k_bs, k_hs, b, hk) + (ulong)k_row * k_ss;
    const ulong v_base = kv_head_base(v_off, v_bs, v_hs, b, hk) + (ulong)k_row * v_ss;
    const uint key_len = batch_key_len(key_lens, b, len_k);
    const long diag_k = diagonal_keys(key_len, len_k, diag_offset);
    const long shift = diag_k - (long)len_q; /* query i's diagonal key is i + shift */
    (void)out_scale; /* the I8 output scale: no I8 here */

#if !NV_Q_DIRECT && !Q_WITH_TILES
    /* Q: global -> local -> this warp's A fragments, kept for the whole call. */
    stage_packed_rows(tiles, q, q_base, q_hs, q_ss, row0, BLOCK_Q, rows_total);
    async_commit();
    async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    uint4 qf[M_TILES][K_STEPS];
    load_q_fragments(qf, tiles, warp_row0, lane);
    barrier(CLK_LOCAL_MEM_FENCE); /* Q's staging area becomes the K and V tiles */
#endif

    /* The keys this block sees: those below the key length, with CAUSAL up to its last row's
     * diagonal, with WINDOW (common.cl's visible_keys and block_key_range) from the tile holding
     * its first row's first key; with SPLIT only its part of them. A tile needs masks only where
     * some row of the block sees less than all of it: from the last row's first key on and up to
     * the first row's last key, every row sees every key (both ends grow with the row). Without
     * WINDOW the range and the masks are written out for causal and key lengths alone: the same
     * values through visible_keys made NVIDIA's compiler give a causal forward 8% slower (H200,
     * n = 4096, d = 128). */
    const uint q_first = ROW_QUERY(row0), q_last = ROW_QUERY(min(row0 + BLOCK_Q, rows_total) - 1);
    uint key_begin = 0, key_end = key_len;
#if WINDOW
    block_key_range(q_first, q_last - q_first + 1, len_q, diag_k, key_len, win_left, win_right, BLOCK, &key_begin,
                    &key_end);
#elif CAUSAL
    {
        const long end = (long)q_last + shift + 1;
        key_end = end <= 0 ? 0u : (uint)min(end, (long)key_len);
    }
#endif
#if FUSED_MERGE
    __global const float *const parts_lse = lse; /* part 0's, before split_part moves lse to this part's */
    const ulong parts_o_off = o_off;
#endif
    split_part(get_group_id(0), n_splits, split_keys, heads_q, seq_q, &key_begin, &key_end, &o_off, &lse);
    const uint n_tiles = (key_end - key_begin + BLOCK - 1) / BLOCK;
    long block_first_lo, block_first_hi, block_last_lo, block_last_hi;
    visible_keys(q_first, len_q, diag_k, key_len, win_left, win_right, &block_first_lo, &block_first_hi);
    visible_keys(q_last, len_q, diag_k, key_len, win_left, win_right, &block_last_lo, &block_last_hi);
    (void)block_first_lo;
    (void)block_last_hi;

    /* Lane rows: slice mt holds rows row0 + warp_row0 + 16 mt + g ("lo") and that + 8 ("hi"). */
    float4 acc[M_TILES][O_TILES];
    float m_lo[M_TILES], m_hi[M_TILES]; /* running maxima */
    float l_lo[M_TILES], l_hi[M_TILES]; /* this lane's part of the row sums */
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
#pragma unroll
        for (uint dt = 0; dt < O_TILES; dt++)
            acc[mt][dt] = (float4)(0.0f);
        m_lo[mt] = m_hi[mt] = -INFINITY;
        l_lo[mt] = l_hi[mt] = 0.0f;
    }

#if ALIBI
    /* The ALiBi slope of each of the lane's rows (rows past the block's end take the last row's;
     * their results are not stored). */
    float slope_lo[M_TILES], slope_hi[M_TILES];
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        const uint r_lo = min(row0 + warp_row0 + mt * 16 + g, rows_total - 1);
        const uint r_hi = min(row0 + warp_row0 + mt * 16 + g + 8, rows_total - 1);
        slope_lo[mt] = alibi[ROW_HEAD(h0, r_lo)] * M_LOG2E_F; /* in log2 units */
        slope_hi[mt] = alibi[ROW_HEAD(h0, r_hi)] * M_LOG2E_F;
    }
#else
    (void)alibi;
#endif
#if BIAS_STAGED
    /* the bias tiles stream beside K and V; this lane reads its rows' values from bias_tiles */
    __local float *const bias_tiles = (__local float *)(tiles + STAGES * STAGE_HALVES);
    bias_stream bstream = {bias + bias_off + (ulong)b * bias_bs + (ulong)h0 * bias_hs, bias_hs, bias_rs, row0,
                           rows_total, h0, key_begin, seq_k};
#elif BIAS
    /* The bias row of each of the lane's rows, and the first tile's bias: each tile's is loaded
     * into registers a tile ahead, so that its latency hides behind a whole tile's products. */
    __global const float *bias_lo[M_TILES], *bias_hi[M_TILES];
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        const uint r_lo = min(row0 + warp_row0 + mt * 16 + g, rows_total - 1);
        const uint r_hi = min(row0 + warp_row0 + mt * 16 + g + 8, rows_total - 1);
        bias_lo[mt] = bias + bias_off + (ulong)b * bias_bs + (ulong)ROW_HEAD(h0, r_lo) * bias_hs +
                      (ulong)ROW_QUERY(r_lo) * bias_rs;
        bias_hi[mt] = bias + bias_off + (ulong)b * bias_bs + (ulong)ROW_HEAD(h0, r_hi) * bias_hs +
                      (ulong)ROW_QUERY(r_hi) * bias_rs;
    }
    float2 bias_t[M_TILES][S_TILES][2];
    if (n_tiles > 0)
        load_bias_tile(bias_t, bias_lo, bias_hi, key_begin, seq_k, t);
#endif
#if !BIAS
    (void)bias, (void)bias_off, (void)bias_bs, (void)bias_hs, (void)bias_rs;
#endif
    /* Scores in log2 units. With a transform on, the host passes the scale in natural-log units
     * (as the portable kernel takes it), and each transform is carried into log2 units here: a
     * softcap cap * tanh(s / cap) of the natural score s is cap2 * tanh(s2 / cap2) with
     * cap2 = cap * log2(e) and s2 = s * log2(e); a bias b becomes b * log2(e); a slope too. */
#if SOFTCAP || BIAS || ALIBI
    const float scale2 = score_scale * M_LOG2E_F;
#else
    const float scale2 = score_scale;
#endif
#if SOFTCAP
    /* softcap_log2's argument: 2 log2(e) s2 / cap2, from the raw product q.k */
    const float cap2 = softcap * M_LOG2E_F, cap_in = scale2 * 2.0f * M_LOG2E_F / cap2;
#else
    (void)softcap;
#endif

    /* This lane's ldmatrix row addresses within buffer 0 (matrix j = lane / 8): for K, keys + 8
     * for j = 2, 3 and columns + 8 for j = 1, 3; for V (transposed), keys + 8 for j = 1, 3 and
     * columns + 8 for j = 2, 3. */
    __local const ushort *k_src0 = tiles + (lane / 16 * 8 + lane % 8) * ROW_STRIDE + (lane / 8) % 2 * 8;
    __local const ushort *v_src0 = tiles + (BLOCK + (lane / 8) % 2 * 8 + lane % 8) * ROW_STRIDE + lane / 16 * 8;

    /* keys at or past key_len are never read: they become zeros */
#if PAGED
    paged_stream stream = paged_stream_start(k, k_base, k_bs, k_ss, v, v_base, v_bs, v_ss,
                                             kv_page_row(block_table, pages_per_seq, b), num_pages, key_len, key_begin);
#else
    (void)block_table;
    (void)pages_per_seq;
    (void)num_pages;
    kv_stream stream = kv_stream_start_at(k, k_base, k_ss, v, v_base, v_ss, key_len, key_begin);
#endif
#if Q_WITH_TILES
    /* Q's copies, a commit group of their own before the tiles' (groups complete in order, so
     * waiting for all but the STAGES - 1 newest waits for Q alone) */
    stage_packed_rows(tiles + (STAGES - 1) * STAGE_HALVES, q, q_base, q_hs, q_ss, row0, BLOCK_Q, rows_total);
    async_commit();
#endif
    /* Tiles 0 .. STAGES - 2 go out first, one commit group each (empty past the last tile), so
     * that tile j is always group j and STAGES - 2 groups after it may still be in flight. */
#pragma unroll
    for (uint u = 0; u + 1 < STAGES; u++) {
        if (u < n_tiles) {
            kv_tiles_next(&stream, tiles + u * STAGE_HALVES);
#if BIAS_STAGED
            bias_stream_next(&bstream, bias_tiles + u * BIAS_TILE_FLOATS);
#endif
        }
        async_commit();
    }
#if Q_WITH_TILES
    /* Q in; the first refill of its stage (tile STAGES - 1, at j = 0) comes after the loop's
     * barrier, when every warp has its fragments. */
    async_wait_pending(STAGES - 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    uint4 qf[M_TILES][K_STEPS];
    load_q_fragments(qf, tiles + (STAGES - 1) * STAGE_HALVES, warp_row0, lane);
#endif
#if NV_Q_DIRECT
    /* A fragment words (see mma_16x8x16): x row g, columns 2t, 2t + 1 of the k16 step; y row g + 8;
     * z and w the same 8 columns on. Rows past seq_q read row seq_q - 1 and become zeros. */
    uint4 qf[M_TILES][K_STEPS];
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        const uint r_lo = row0 + warp_row0 + mt * 16 + g, r_hi = r_lo + 8;
        const uint c_lo = min(r_lo, rows_total - 1), c_hi = min(r_hi, rows_total - 1);
        __global const uint *q_lo = (__global const uint *)(q + q_base + packed_row_offset(c_lo, q_hs, q_ss)) + t;
        __global const uint *q_hi = (__global const uint *)(q + q_base + packed_row_offset(c_hi, q_hs, q_ss)) + t;
#pragma unroll
        for (uint kk = 0; kk < K_STEPS; kk++) {
            const uint4 w = (uint4)(q_lo[kk * 8], q_hi[kk * 8], q_lo[kk * 8 + 4], q_hi[kk * 8 + 4]);
            qf[mt][kk] = (uint4)(r_lo < rows_total ? w.x : 0u, r_hi < rows_total ? w.y : 0u,
                                 r_lo < rows_total ? w.z : 0u, r_hi < rows_total ? w.w : 0u);
        }
    }
#endif
    uint stage = 0; /* j % STAGES */
    for (uint j = 0; j < n_tiles; j++) {
        const uint key0 = key_begin + j * BLOCK;
        async_wait_pending(STAGES - 2);
        barrier(CLK_LOCAL_MEM_FENCE); /* tile j is in; every warp is done with tile j - 1 */
        /* tile j + STAGES - 1 streams into tile j - 1's stage while tiles j .. are computed */
        const uint refill = stage == 0 ? STAGES - 1 : stage - 1;
        if (j + STAGES - 1 < n_tiles) {
            kv_tiles_next(&stream, tiles + refill * STAGE_HALVES);
#if BIAS_STAGED
            bias_stream_next(&bstream, bias_tiles + refill * BIAS_TILE_FLOATS);
#endif
        }
#if BIAS_STAGED
        /* this tile's bias, this lane's rows (lo, and hi 8 rows on) at its keys 2t, 2t + 1 */
        __local const float *bias_here = bias_tiles + stage * BIAS_TILE_FLOATS + (warp_row0 + g) * BIAS_ROW + 2 * t;
#endif
        async_commit();
        __local const ushort *k_src = k_src0 + stage * STAGE_HALVES;
        __local const ushort *v_src = v_src0 + stage * STAGE_HALVES;
        stage = stage + 1 == STAGES ? 0 : stage + 1;

        /* S = Q K_j^T: s[mt][n] holds keys key0 + 8n + 2t (+1) of the lane's lo (x, y) and hi
         * (z, w) rows. One K fragment feeds every slice. */
        float4 s[M_TILES][S_TILES];
#pragma unroll
        for (uint mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (uint n = 0; n < S_TILES; n++)
                s[mt][n] = (float4)(0.0f);
#pragma unroll
        for (uint kk = 0; kk < K_STEPS; kk++) {
#pragma unroll
            for (uint n = 0; n < S_TILES; n += 2) {
                const uint4 kf = load_matrix_x4(k_src + n * 8 * ROW_STRIDE + kk * 16);
#pragma unroll
                for (uint mt = 0; mt < M_TILES; mt++) {
                    s[mt][n] = mma_16x8x16(qf[mt][kk], kf.x, kf.y, s[mt][n]);
                    s[mt][n + 1] = mma_16x8x16(qf[mt][kk], kf.z, kf.w, s[mt][n + 1]);
                }
            }
        }

        /* Scale, apply the score transforms, mask the keys each row does not see, online softmax. */
        const int masked = (long)key0 < block_last_lo || (long)(key0 + BLOCK) > block_first_hi;
#pragma unroll
        for (uint mt = 0; mt < M_TILES; mt++) {
            const uint row_lo = row0 + warp_row0 + mt * 16 + g;
            /* The first and last key each of the lane's rows sees, relative to its first pair's key
             * key0 + 2t, clamped to [0, BLOCK] and [-1, BLOCK] so that they fit an int. */
            int first_lo = 0, first_hi = 0, last_lo = BLOCK, last_hi = BLOCK;
#if !WINDOW
            if (masked) {
                const long lim = (long)key_len - 1;
#if CAUSAL
                const long d_lo = min((long)ROW_QUERY(row_lo) + shift, lim);
                const long d_hi = min((long)ROW_QUERY(row_lo + 8) + shift, lim);
#else
                const long d_lo = lim, d_hi = lim;
#endif
                last_lo = (int)clamp(d_lo - (long)(key0 + 2 * t), -1L, (long)BLOCK);
                last_hi = (int)clamp(d_hi - (long)(key0 + 2 * t), -1L, (long)BLOCK);
            }
#else
            if (masked) {
                long lo, hi;
                const long pair0 = (long)(key0 + 2 * t);
                visible_keys(ROW_QUERY(row_lo), len_q, diag_k, key_len, win_left, win_right, &lo, &hi);
                first_lo = (int)clamp(lo - pair0, 0L, (long)BLOCK);
                last_lo = (int)clamp(hi - 1 - pair0, -1L, (long)BLOCK);
                visible_keys(ROW_QUERY(row_lo + 8), len_q, diag_k, key_len, win_left, win_right, &lo, &hi);
                first_hi = (int)clamp(lo - pair0, 0L, (long)BLOCK);
                last_hi = (int)clamp(hi - 1 - pair0, -1L, (long)BLOCK);
            }
#endif
#if ALIBI
            /* the distance from each row's diagonal to the lane's first key (exact below 2^24) */
            const float dist_lo = (float)((long)ROW_QUERY(row_lo) + shift - (long)(key0 + 2 * t));
            const float dist_hi = (float)((long)ROW_QUERY(row_lo + 8) + shift - (long)(key0 + 2 * t));
#endif
            float max_lo = -INFINITY, max_hi = -INFINITY; /* this tile's, in the units of s */
#pragma unroll
            for (uint n = 0; n < S_TILES; n++) {
#if SOFTCAP
                s[mt][n].x = softcap_log2(s[mt][n].x * cap_in, cap2);
                s[mt][n].y = softcap_log2(s[mt][n].y * cap_in, cap2);
                s[mt][n].z = softcap_log2(s[mt][n].z * cap_in, cap2);
                s[mt][n].w = softcap_log2(s[mt][n].w * cap_in, cap2);
#else
                s[mt][n] *= scale2;
#endif
#if BIAS_STAGED
                {
                    const float2 lo = *(__local const float2 *)(bias_here + mt * 16 * BIAS_ROW + 8 * n);
                    const float2 hi = *(__local const float2 *)(bias_here + (mt * 16 + 8) * BIAS_ROW + 8 * n);
                    s[mt][n].x = fma(lo.x, M_LOG2E_F, s[mt][n].x);
                    s[mt][n].y = fma(lo.y, M_LOG2E_F, s[mt][n].y);
                    s[mt][n].z = fma(hi.x, M_LOG2E_F, s[mt][n].z);
                    s[mt][n].w = fma(hi.y, M_LOG2E_F, s[mt][n].w);
                }
#elif BIAS
                s[mt][n].x = fma(bias_t[mt][n][0].x, M_LOG2E_F, s[mt][n].x);
                s[mt][n].y = fma(bias_t[mt][n][0].y, M_LOG2E_F, s[mt][n].y);
                s[mt][n].z = fma(bias_t[mt][n][1].x, M_LOG2E_F, s[mt][n].z);
                s[mt][n].w = fma(bias_t[mt][n][1].y, M_LOG2E_F, s[mt][n].w);
#endif
#if ALIBI
                s[mt][n].x = fma(-slope_lo[mt], fabs(dist_lo - (float)(n * 8)), s[mt][n].x);
                s[mt][n].y = fma(-slope_lo[mt], fabs(dist_lo - (float)(n * 8 + 1)), s[mt][n].y);
                s[mt][n].z = fma(-slope_hi[mt], fabs(dist_hi - (float)(n * 8)), s[mt][n].z);
                s[mt][n].w = fma(-slope_hi[mt], fabs(dist_hi - (float)(n * 8 + 1)), s[mt][n].w);
#endif
                if (masked) {
                    s[mt][n].x = (int)(n * 8) >= first_lo && (int)(n * 8) <= last_lo ? s[mt][n].x : -INFINITY;
                    s[mt][n].y = (int)(n * 8 + 1) >= first_lo && (int)(n * 8 + 1) <= last_lo ? s[mt][n].y : -INFINITY;
                    s[mt][n].z = (int)(n * 8) >= first_hi && (int)(n * 8) <= last_hi ? s[mt][n].z : -INFINITY;
                    s[mt][n].w = (int)(n * 8 + 1) >= first_hi && (int)(n * 8 + 1) <= last_hi ? s[mt][n].w : -INFINITY;
                }
                max_lo = fmax(max_lo, fmax(s[mt][n].x, s[mt][n].y));
                max_hi = fmax(max_hi, fmax(s[mt][n].z, s[mt][n].w));
            }
            max_lo = fmax(max_lo, lane_xor(max_lo, 1));
            max_lo = fmax(max_lo, lane_xor(max_lo, 2));
            max_hi = fmax(max_hi, lane_xor(max_hi, 1));
            max_hi = fmax(max_hi, lane_xor(max_hi, 2));
            /* m is the reference P is taken against; a row that has seen no key keeps -inf and
             * exponentiates against 0, so exp2(-inf) = 0. */
            const float new_lo = fmax(m_lo[mt], max_lo), new_hi = fmax(m_hi[mt], max_hi);
#if NV_RESCALE_THRESH >= 0
            const int rescale =
                warp_any(new_lo > m_lo[mt] + NV_RESCALE_THRESH || new_hi > m_hi[mt] + NV_RESCALE_THRESH);
#else
            const int rescale = 1;
#endif
            float alpha_lo = 1.0f, alpha_hi = 1.0f;
            if (rescale) {
                alpha_lo = exp2_ftz(m_lo[mt] - (new_lo == -INFINITY ? 0.0f : new_lo));
                alpha_hi = exp2_ftz(m_hi[mt] - (new_hi == -INFINITY ? 0.0f : new_hi));
                m_lo[mt] = new_lo;
                m_hi[mt] = new_hi;
            }
            const float ref_lo = m_lo[mt] == -INFINITY ? 0.0f : m_lo[mt];
            const float ref_hi = m_hi[mt] == -INFINITY ? 0.0f : m_hi[mt];
            float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
            for (uint n = 0; n < S_TILES; n++) {
                s[mt][n].x = exp2_ftz(s[mt][n].x - ref_lo);
                s[mt][n].y = exp2_ftz(s[mt][n].y - ref_lo);
                s[mt][n].z = exp2_ftz(s[mt][n].z - ref_hi);
                s[mt][n].w = exp2_ftz(s[mt][n].w - ref_hi);
                sum_lo += s[mt][n].x + s[mt][n].y;
                sum_hi += s[mt][n].z + s[mt][n].w;
            }
            if (rescale) {
                l_lo[mt] = l_lo[mt] * alpha_lo + sum_lo;
                l_hi[mt] = l_hi[mt] * alpha_hi + sum_hi;
#pragma unroll
                for (uint dt = 0; dt < O_TILES; dt++) {
                    acc[mt][dt].x *= alpha_lo;
                    acc[mt][dt].y *= alpha_lo;
                    acc[mt][dt].z *= alpha_hi;
                    acc[mt][dt].w *= alpha_hi;
                }
            } else {
                l_lo[mt] += sum_lo;
                l_hi[mt] += sum_hi;
            }
        }

#if BIAS && !BIAS_STAGED
        /* this tile's bias is used: the next tile's loads go out now */
        if (j + 1 < n_tiles)
            load_bias_tile(bias_t, bias_lo, bias_hi, key0 + BLOCK, seq_k, t);
#endif
        /* O += P V_j, 16 keys at a time: S tiles 2u and 2u + 1 form P's A fragment. */
#pragma unroll
        for (uint u = 0; u < BLOCK / 16; u++) {
            uint4 pa[M_TILES];
#pragma unroll
            for (uint mt = 0; mt < M_TILES; mt++)
                pa[mt] = (uint4)(pack_pair(s[mt][2 * u].x, s[mt][2 * u].y), pack_pair(s[mt][2 * u].z, s[mt][2 * u].w),
                                 pack_pair(s[mt][2 * u + 1].x, s[mt][2 * u + 1].y),
                                 pack_pair(s[mt][2 * u + 1].z, s[mt][2 * u + 1].w));
#pragma unroll
            for (uint dt = 0; dt < O_TILES; dt += 2) {
                const uint4 vf = load_matrix_x4_trans(v_src + u * 16 * ROW_STRIDE + dt * 8);
#pragma unroll
                for (uint mt = 0; mt < M_TILES; mt++) {
                    acc[mt][dt] = mma_16x8x16(pa[mt], vf.x, vf.y, acc[mt][dt]);
                    acc[mt][dt + 1] = mma_16x8x16(pa[mt], vf.z, vf.w, acc[mt][dt + 1]);
                }
            }
        }
    }

    /* The row sums: the four lanes of a quad hold parts of the same rows' sums. The rows' lse
     * index: common.cl's out_lse_row0 ([batch][heads_q][seq_q], with SPLIT within the part
     * split_part chose; a variable-length batch's packed [heads_q][total_q] without). */
    float sum_lo[M_TILES], sum_hi[M_TILES];
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        float sl = l_lo[mt], sh = l_hi[mt];
        sl += lane_xor(sl, 1);
        sl += lane_xor(sl, 2);
        sh += lane_xor(sh, 1);
        sh += lane_xor(sh, 2);
        sum_lo[mt] = sl;
        sum_hi[mt] = sh;
#if WITH_LSE
        const uint r = row0 + warp_row0 + mt * 16 + g;
        if (t == 0) {
            if (r < rows_total)
                lse[out_lse_row0(b, ROW_HEAD(h0, r), heads_q, seq_q, total_q, q_row) + ROW_QUERY(r)] =
                    sl == 0.0f ? -INFINITY : (m_lo[mt] + log2(sl)) * M_LN2_F;
            if (r + 8 < rows_total)
                lse[out_lse_row0(b, ROW_HEAD(h0, r + 8), heads_q, seq_q, total_q, q_row) + ROW_QUERY(r + 8)] =
                    sh == 0.0f ? -INFINITY : (m_hi[mt] + log2(sh)) * M_LN2_F;
        }
#endif
    }
#if !WITH_LSE
    (void)lse;
#endif
    /* a variable-length batch's rows are packed in O (out_first), but not in the split parts */
    const ulong o_base = o_off + (ulong)b * o_bs + (ulong)h0 * o_hs + (ulong)out_first(q_row) * o_ss;
#if SPLIT && !WITH_LSE
#error "every part needs its lse"
#endif
#if SPLIT
    /* The part's O in fp32, straight from the accumulators: lane (g, t) holds columns 8 dt + 2t and
     * + 1 of rows g and g + 8 of each slice. */
    __global float *o_part = (__global float *)o + o_base; /* split_part moved o_off to the part */
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        const uint r = row0 + warp_row0 + mt * 16 + g;
        const float inv_lo = sum_lo[mt] == 0.0f ? 0.0f : 1.0f / sum_lo[mt];
        const float inv_hi = sum_hi[mt] == 0.0f ? 0.0f : 1.0f / sum_hi[mt];
        __global float *dst_lo = o_part + packed_row_offset(min(r, rows_total - 1), o_hs, o_ss) + 2 * t;
        __global float *dst_hi = o_part + packed_row_offset(min(r + 8, rows_total - 1), o_hs, o_ss) + 2 * t;
#pragma unroll
        for (uint dt = 0; dt < O_TILES; dt++) {
#if D_REAL == HEAD_DIM
            if (r < rows_total)
                vstore2((float2)(acc[mt][dt].x, acc[mt][dt].y) * inv_lo, 0, dst_lo + dt * 8);
            if (r + 8 < rows_total)
                vstore2((float2)(acc[mt][dt].z, acc[mt][dt].w) * inv_hi, 0, dst_hi + dt * 8);
#else
            /* the part's rows are D_REAL wide: padding columns are not stored */
            const uint col = dt * 8 + 2 * t;
            if (r < rows_total && col < D_REAL)
                dst_lo[dt * 8] = acc[mt][dt].x * inv_lo;
            if (r < rows_total && col + 1 < D_REAL)
                dst_lo[dt * 8 + 1] = acc[mt][dt].y * inv_lo;
            if (r + 8 < rows_total && col < D_REAL)
                dst_hi[dt * 8] = acc[mt][dt].z * inv_hi;
            if (r + 8 < rows_total && col + 1 < D_REAL)
                dst_hi[dt * 8 + 1] = acc[mt][dt].w * inv_hi;
#endif
        }
    }
#if FUSED_MERGE
    {
        const uint n_q = get_num_groups(0) / n_splits;
        const ulong rows_all = (ulong)get_num_groups(2) * heads_q * seq_q;
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the tiles: they become the merge's scratch */
        merge_block_parts(tickets + ((ulong)b * get_num_groups(1) + hg) * n_q + row0 / BLOCK_Q, &arrived,
                          (__local float *)tiles_words, n_splits, row0, rows_total, b, h0, heads_q, seq_q,
                          (__global const float *)o + parts_o_off + (ulong)b * o_bs + (ulong)h0 * o_hs,
                          rows_all * D_REAL, o_hs, o_ss, parts_lse, rows_all, o_out,
                          out_off + (ulong)b * out_bs + (ulong)h0 * out_hs + (ulong)q_row * out_ss, out_hs, out_ss,
                          lse_out, total_q, q_row);
    }
#endif
#else
    /* O: registers -> local (this warp's rows) -> 16-byte coalesced stores. */
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last tile */
#pragma unroll
    for (uint mt = 0; mt < M_TILES; mt++) {
        const float inv_lo = sum_lo[mt] == 0.0f ? 0.0f : 1.0f / sum_lo[mt];
        const float inv_hi = sum_hi[mt] == 0.0f ? 0.0f : 1.0f / sum_hi[mt];
        const uint r = warp_row0 + mt * 16 + g;
        __local uint *dst = (__local uint *)(tiles + r * ROW_STRIDE + 2 * t);
#pragma unroll
        for (uint dt = 0; dt < O_TILES; dt++) {
            dst[dt * 4] = pack_pair(acc[mt][dt].x * inv_lo, acc[mt][dt].y * inv_lo);
            dst[dt * 4 + 8 * ROW_STRIDE / 2] = pack_pair(acc[mt][dt].z * inv_hi, acc[mt][dt].w * inv_hi);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if NV_ALIGNED
    for (uint c = get_local_id(0); c < BLOCK_Q * CHUNKS; c += THREADS) {
        const uint r = c / CHUNKS, piece = c % CHUNKS;
        if (row0 + r < rows_total && piece * 8 < D_REAL)
            *(__global uint4 *)(o + o_base + packed_row_offset(row0 + r, o_hs, o_ss) + piece * 8) =
                *(__local const uint4 *)(tiles + r * ROW_STRIDE + piece * 8);
    }
#else
    for (uint e = get_local_id(0); e < BLOCK_Q * D_REAL; e += THREADS) {
        const uint r = e / D_REAL, col = e % D_REAL;
        if (row0 + r < rows_total)
            o[o_base + packed_row_offset(row0 + r, o_hs, o_ss) + col] = tiles[r * ROW_STRIDE + col];
    }
#endif
#endif
}
