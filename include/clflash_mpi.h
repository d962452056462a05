/*
 * clflash_mpi.h - exact ring (context-parallel) attention over MPI, an optional component of
 * clflash (library clflash_mpi, built when CMake finds MPI).
 *
 * Why this header exists: a sequence too long for one device's memory or time is split across the
 * ranks of an MPI communicator. Each rank holds a shard of the sequence's Q, K and V; the K/V shards
 * travel around the ring of ranks, and each rank merges the partial results of its own queries
 * against every shard through their log-sum-exps. The result is single-device attention over the
 * whole sequence, up to rounding. clflash_ring_backward gives the gradients of it. The component is
 * a client of clflash.h's public API (clflash_forward with lse, clflash_merge_states,
 * clflash_backward), plus, for the backward's fp32 sums, three small kernels clflash runs for its
 * components (cl/grad_accumulate.cl, through clflash's program cache; not public API, so
 * clflash_mpi must run with the clflash release it was built with); it adds MPI and the ring on top.
 *
 * Conventions are those of clflash.h: statuses (0 success, OpenCL's negative codes passed through,
 * clflash's own from -2000 down, this component's from -2100 down), struct_size (the ABI rule at the
 * top of clflash.h applies to clflash_ring_desc unchanged), shapes and strides in elements.
 *
 * How tokens map to ranks (the whole sequence has seq_total tokens, positions 0 .. seq_total - 1;
 * the communicator has P ranks; rows are the seq dimension of each rank's shard tensors):
 *  - CLFLASH_RING_CONTIGUOUS: rank r holds positions seq_offset .. seq_offset + seq_local - 1 of
 *    the whole sequence, in order, as rows 0 .. seq_local - 1. Shards may have any sizes (each at
 *    least 1 token) and may be given to the ranks in any order, but together they must cover every
 *    position exactly once. The usual choice is rank order: rank r's seq_offset is the sum of the
 *    seq_local of the ranks below it.
 *  - CLFLASH_RING_ZIGZAG (causal load balance): the sequence is cut into 2P chunks of
 *    c = seq_total / (2P) tokens (seq_total must be a multiple of 2P); rank r holds chunk r
 *    (positions r*c .. r*c + c - 1) as rows 0 .. c - 1 and chunk 2P-1-r (positions
 *    (2P-1-r)*c .. (2P-r)*c - 1) as rows c .. 2c - 1, so seq_local = 2c and seq_offset = 0. Under
 *    causal masking every rank then has the same number of visible (query, key) pairs.
 * The layouts of the shard tensors are ordinary clflash_layouts over seq_local rows, so a caller
 * that keeps [batch][seq][heads][head_dim] shards passes those strides, as for clflash_forward.
 *
 * Thread rule: as for MPI itself. A call is collective over its communicator: every rank of the
 * communicator must call it with matching descriptors, and calls on one communicator must be made
 * in the same order on every rank. The calling thread makes every MPI call (MPI_THREAD_SINGLE
 * suffices when only that thread uses MPI). The call duplicates the communicator for its own
 * messages, so it never receives a message meant for the caller.
 */
#ifndef CLFLASH_MPI_H
#define CLFLASH_MPI_H

#include "clflash.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* This component's own statuses (clflash_ring_status_string knows them and clflash's). */
#define CLFLASH_RING_ERROR_MPI (-2100) /* an MPI call returned an error */

/* Token-to-rank mappings of clflash_ring_desc.mapping; see the top of this header. */
typedef enum { CLFLASH_RING_CONTIGUOUS = 0, CLFLASH_RING_ZIGZAG = 1 } clflash_ring_mapping;

/* One rank's part of a ring attention call. Set struct_size (see the top of clflash.h); zero keeps
 * a field at its default. The fields marked "same on every rank" are compared across the
 * communicator before anything is enqueued. */
typedef struct {
    uint32_t struct_size; /* sizeof(clflash_ring_desc) */
    uint32_t batch;       /* same on every rank; 1 .. CLFLASH_MAX_BATCH */
    uint32_t heads_q;     /* same on every rank; 1 .. CLFLASH_MAX_HEADS */
    uint32_t heads_kv;    /* same on every rank; 0 = heads_q; else must divide heads_q (GQA/MQA) */
    uint32_t head_dim;    /* same on every rank; 1 .. CLFLASH_MAX_HEAD_DIM */
    clflash_dtype dtype;  /* same on every rank; CLFLASH_F32, CLFLASH_F16 or CLFLASH_BF16: storage of
                             Q, K, V, O (and of the K/V shards on the wire); math is fp32 */
    float scale;          /* same on every rank; 0 = 1/sqrt(head_dim); must be finite */
    uint32_t flags;       /* same on every rank; 0, CLFLASH_CAUSAL, CLFLASH_WINDOW or both, applied to
                             the positions in the whole sequence: with CLFLASH_CAUSAL query position
                             p sees key position p' iff p' <= p; with CLFLASH_WINDOW iff
                             p - window_left <= p' <= p + window_right (both rules hold when both
                             are set). CLFLASH_ALIGN_TO_KEY_LENGTH is refused
                             (CLFLASH_ERROR_UNSUPPORTED): the queries of a ring are the whole
                             sequence, not its last rows, so there is no diagonal to move */
    uint32_t block;       /* this rank's B for clflash_forward: 0 = the planner's (may differ
                             between ranks, as their devices may) */
    uint32_t mapping;     /* same on every rank; a clflash_ring_mapping (0 = CLFLASH_RING_CONTIGUOUS) */
    uint32_t seq_local;   /* rows of this rank's shard: 1 .. CLFLASH_MAX_SEQ_Q */
    uint64_t seq_offset;  /* CONTIGUOUS: the position of this shard's first token in the whole
                             sequence; ZIGZAG: must be 0 */
    uint64_t seq_total;   /* tokens of the whole sequence, a check: 0 = not given; a nonzero value
                             (on any rank) must equal the sum of every rank's seq_local */
    clflash_layout q, k, v, o; /* this rank's shard tensors, [batch][heads][seq_local][head_dim] as
                                  clflash_layout says (heads = heads_q for Q and O, heads_kv for K, V) */
    float softcap;        /* same on every rank; 0 = off; else as clflash_attention_desc.softcap: each
                             scaled score s becomes softcap * tanh(s / softcap). It depends on the
                             score only, not on positions, so every call of the ring applies it as
                             is. Must be finite and >= 0 */
    uint32_t window_left, window_right; /* same on every rank; with CLFLASH_WINDOW in flags (set
                             without it: CLFLASH_ERROR_INVALID_FLAGS): the keys a query sees lie
                             from window_left positions before it to window_right after it, in the
                             whole sequence */
    cl_mem alibi_slopes;  /* NULL = none; else float[heads_q], a buffer of ctx (only read): the score
                             of query position p and key position p' gets -slope[h] * |p - p'|
                             (after softcap), as clflash_attention_desc.alibi_slopes says for one
                             device. Whether it is NULL must be the same on every rank (the slopes
                             themselves are each rank's own buffer and are not compared) */
    cl_mem key_lengths;   /* NULL = none; else int32[batch], a buffer of ctx (only read): keys at
                             positions >= key_lengths[b] of the whole sequence are invisible to batch
                             entry b (a query row left with no key gets O = 0, lse = -INFINITY).
                             Values are clamped to [0, seq_total], so a negative or huge one is
                             harmless. Read once per call (a blocking read of batch int32s). Whether
                             it is NULL must be the same on every rank; the values should be too
                             (each rank applies its own to the keys it sees) */
    cl_mem bias;          /* NULL = none; else a float buffer of ctx (only read) added to the scores
                             (after softcap, with ALiBi; -INFINITY masks), as
                             clflash_attention_desc.bias says for one device. It holds THIS rank's
                             rows of the whole sequence's bias: float[batch][heads_q][seq_local]
                             [seq_total], element (b, h, i, j) for row i of this rank's shard (in its
                             row order: with the zigzag mapping rows 0 .. c - 1 are chunk r and rows
                             c .. 2c - 1 chunk 2P-1-r) and key position j of the whole sequence (in
                             global position order, whichever rank holds that key). Whether it is
                             NULL must be the same on every rank. The backward adds it when it
                             recomputes the scores, and writes its gradient into bias_grad (below)
                             if given */
    clflash_layout bias_layout; /* where element (b, h, i, j) is: offset + b*batch_stride +
                             h*head_stride + i*seq_stride + j (keys contiguous); zero strides take
                             the defaults seq_stride = seq_total, head_stride = seq_local *
                             seq_stride, batch_stride = heads_q * head_stride, except those
                             bias_broadcast sets to 0. This rank's own (not compared); set without a
                             bias: CLFLASH_ERROR_INVALID_ARGUMENT */
    uint32_t bias_broadcast; /* same on every rank; CLFLASH_BROADCAST_BATCH | _HEADS | _ROWS, as
                             clflash_attention_desc.bias_broadcast: that dimension's stride is 0
                             (_ROWS: one row of seq_total keys shared by every query row) */
    /* A paged K/V cache for THIS rank's shard (forward only; clflash_ring_backward refuses a
     * block_table with CLFLASH_ERROR_UNSUPPORTED). Each rank's own storage: ranks may differ in
     * whether they page and how, and nothing here is compared. With block_table set, k and v are
     * page pools as clflash.h's "Paged KV caches" says (d->k and d->v address element (page p,
     * K/V head h, slot r, column c) at offset + p*batch_stride + h*head_stride + r*seq_stride + c;
     * zero strides are the [page][head][slot][head_dim] defaults), and row j of batch entry b of the
     * shard (0 .. seq_local - 1, in the shard's row order) is slot j % page_size of page
     * block_table[b][j / page_size]. How: before step 0 the rank reads the table to the host (one
     * blocking read of batch * pages_per_seq int32s) and, on the device, copies its pages into a
     * compact shard of its own (one copy per batch entry, used page and K/V head, for K and for
     * V); every step then reads that copy as it reads an unpaged shard, so paging combines with
     * every other feature of the ring. Costs one compact shard of device memory more. */
    cl_mem block_table;     /* NULL = k and v are ordinary shard tensors; else int32[batch]
                               [pages_per_seq], a buffer of ctx (only read, once, on the host) */
    uint32_t page_size;     /* keys per page, 1 .. CLFLASH_MAX_PAGE_SIZE (with a block_table) */
    uint32_t pages_per_seq; /* the table's row length; seq_local <= pages_per_seq * page_size */
    uint32_t num_pages;     /* pages in each pool (>= 1); every table entry a row of the shard uses
                               must lie in 0 .. num_pages - 1, else CLFLASH_ERROR_INVALID_ARGUMENT
                               on every rank before anything is enqueued (entries for rows at or
                               past seq_local are never read) */
    cl_mem bias_grad;       /* NULL = none; else clflash_ring_backward also writes the bias gradient
                               here (clflash_ring_forward ignores it): a float buffer of ctx in the
                               bias's layout (bias_layout, bias_broadcast, resolved against
                               seq_local and seq_total as for bias), holding THIS rank's rows of
                               the dBias that clflash_backward of the whole sequence would write:
                               element (b, h, i, j) is the sum of dS = P * (dP - D) over the pairs
                               it is added to (no softcap factor). With _BATCH or _HEADS those sums
                               run over the batch entries or heads, all on this rank. With _ROWS
                               the one row is shared by every query row of the whole sequence,
                               whose rows live on every rank: each rank sums its own rows' terms in
                               fp32, the ranks' rows are summed in rank order in fp64 (passed from
                               rank 0 up, then broadcast), and every rank writes the same complete
                               row, the same bits on every run. Every element the layout
                               addresses over [batch][heads_q][seq_local][seq_total] is written,
                               0 where no visible pair adds to it (key chunks a query chunk never
                               meets under the causal and window rules included); the layout's
                               gaps are not. Needs a bias; whether it is NULL must be the same on
                               every rank; must not be any other buffer of the call */
    /* A variable-length (packed) batch, as clflash.h's "Variable-length batches" for one device:
     * the whole sequence of seq_total tokens is num_seqs packed sequences, one after the other, and
     * a query sees only keys of its own sequence. The causal rule, the window and ALiBi apply
     * within each sequence to positions from its start, which (query and key lengths being equal in
     * each sequence) is the whole sequence's rule restricted to the sequence: query position p of
     * sequence s sees key position p' iff cu_seqlens[s] <= p' < cu_seqlens[s + 1] and the rules
     * of flags hold for (p, p'). The mappings shard the packed stream as any sequence, so a packed
     * sequence may lie across shard and chunk boundaries. Needs batch 1 (the packed stream is the
     * one batch entry); not combined with key_lengths, bias (and so bias_grad) or block_table
     * (CLFLASH_ERROR_UNSUPPORTED), as one device's variable-length batch is not. How the ring
     * splits it into calls: clflash_ring_forward below. */
    cl_mem cu_seqlens;      /* NULL = no packing; else int32[num_seqs + 1], a buffer of ctx (only
                               read, once per call, with a blocking read on the host): cumulative
                               lengths in positions of the whole sequence, cu_seqlens[0] = 0,
                               non-decreasing (sequences of length 0 are allowed), cu_seqlens[num_seqs]
                               = seq_total. Same on every rank (the contents are compared across
                               the communicator) */
    uint32_t num_seqs;      /* with cu_seqlens: the number of packed sequences, 1 .. 2^31 - 2; same
                               on every rank; set without cu_seqlens: CLFLASH_ERROR_INVALID_ARGUMENT */
} clflash_ring_desc;

/* Attention of every rank's queries against the whole sequence's keys and values, for a sequence
 * sharded over the ranks of comm as d->mapping says. Collective: every rank of comm calls it.
 *
 * Arguments: ctx, this rank's clflash context (its device and its queue, on which the kernels run);
 * comm, the communicator of the ring (its rank order is the ring's order; rank r receives shards
 * from rank r - 1 and sends to rank r + 1, modulo its size); d, this rank's descriptor; q, k, v,
 * buffers of ctx holding this rank's shard of Q, K, V in d->dtype and the layouts d->q, d->k, d->v
 * (k and v: page pools where d->block_table is set; see the descriptor);
 * o, a buffer of ctx that receives this rank's rows of the result in d->dtype and layout d->o (its
 * gaps are never written); lse, NULL or a float buffer of ctx of at least batch * heads_q *
 * seq_local floats that receives float[batch][heads_q][seq_local], the natural-log sum of
 * exp(scaled scores) of each of this rank's query rows over every key of the whole sequence it
 * sees. q, k, v are only read. o must not be the same buffer as q, k or v, and lse must be a buffer
 * of its own.
 *
 * How: P steps. At step s the rank holds the K/V shard of rank (r - s) mod P (its own at step 0)
 * and runs clflash_forward with lse of its queries against it. Without a window, ALiBi, key
 * lengths or a bias that is one call per query chunk (one for a contiguous shard, two for a zigzag shard)
 * with the causal rule expressed through the global positions: a key chunk entirely in the query
 * chunk's future is skipped, one entirely in its past is attended without a mask, and a chunk on
 * the diagonal takes CLFLASH_CAUSAL (bottom-right aligned, which the zigzag chunks' equal sizes
 * make exact). With a window, ALiBi, key lengths or a bias each (query chunk, key chunk) pair is a
 * call of its own, skipped when the causal and window rules hide every one of its (query, key) pairs
 * or when its key chunk starts at or past every batch entry's key length (unless that would leave a
 * query chunk with no call: then they all run, giving its rows O = 0 and lse = -inf); the
 * call takes the caller's flags, window widths and slopes with clflash_attention_desc's
 * diagonal_offset = (q_pos - k_pos) - (k_len - q_len) (the two chunks' first positions and
 * lengths), which puts every rule at the whole sequence's diagonal, key lengths
 * clamp(key_lengths[b] - k_pos, 0, k_len) in a small buffer per key chunk, and the bias itself with
 * its layout's offset moved to element (0, 0, the query chunk's first row, k_pos) (rows of this
 * rank's shard, columns of the whole sequence; the strides stay the caller's, resolved against
 * seq_local and seq_total). With packed sequences (cu_seqlens) every (query chunk, key chunk) pair
 * is one call too: a clflash variable-length batch over the whole query chunk and the whole key
 * chunk, whose entries are the non-empty packed sequences with tokens in either (their pieces'
 * cumulative lengths are made on the host and uploaded to two small buffers per pair). A chunk
 * against itself has every sequence's piece on both sides (diagonal_offset 0); two different
 * chunks share at most one sequence, whose diagonal diagonal_offset places as above, and the
 * pair is skipped when they share none or the causal and window rules hide the shared one. An
 * entry with queries but no keys in the pair gets O = 0 and lse = -INFINITY there, which the merge
 * ignores. Each partial result is converted to
 * fp32 (exactly) and merged into an fp32 running (O, lse) by clflash_merge_states; the last merge
 * writes o (and lse) in the storage type. While step s computes, the next shard travels to the
 * second of two device buffers, written on a queue of the ring's own, which the next step's kernels
 * wait for (OpenCL events). The own shard is read from the device once, at step 0, while step 0
 * computes. How shards cross between processes (the K/V transport), chosen per call and the same
 * on every rank:
 *  - the node-local window, where every rank of comm is on one node (MPI_Comm_split_type): each
 *    rank reads its own shard into its segment of an MPI shared-memory window, and every rank
 *    uploads each shard straight from its owner's segment at the step that needs it. No shard
 *    bytes go through MPI messages. The window (one segment of this rank's shard size per rank)
 *    is KEPT with comm, as an MPI attribute, for the next call on comm, and freed when comm is
 *    freed or at MPI_Finalize; a call whose shard is larger on some rank replaces it. Freeing it
 *    is collective (MPI_Win_free), so MPI_Comm_free of a communicator the ring has used then
 *    waits for its other ranks: free such communicators in the same order on every rank, and
 *    where several threads call the ring on communicators that share ranks, make their first
 *    calls in the same order on every rank (MPI_Finalize frees the windows in that order).
 *  - MPI messages otherwise: the shard in host memory is sent to rank r + 1 with MPI_Isend while
 *    MPI_Irecv takes the next one from r - 1 into a second host buffer; the calling thread drives
 *    MPI (MPI_Waitall) while the device computes, then uploads the received shard.
 * The environment variable CLFLASH_RING_TRANSPORT chooses: unset or "auto" the window where it
 * can be had (every rank on one node and MPI grants it on every rank), else messages; "mpi"
 * messages; "shared" the window or CLFLASH_ERROR_UNSUPPORTED. Ranks that disagree on it, or a
 * value other than these, give CLFLASH_ERROR_INVALID_ARGUMENT on every rank (nothing written).
 * With the window, CLFLASH_RING_PIN chooses whether the segments are registered with the
 * driver: unset or "auto" unless ctx's device is a CPU, "on", "off". Registered, each rank's view
 * of every segment gets a CL_MEM_USE_HOST_PTR buffer of ctx that is never used for data: drivers
 * that pin such memory (NVIDIA's does) then copy between the segments and the device at their copy
 * engine's rate instead of through bounce buffers of their own. The buffers stay with the window
 * (and hold a reference to ctx's OpenCL context) until the window is freed or a call on another
 * OpenCL context replaces them. Each rank follows its own setting; a value other than these on any
 * rank gives CLFLASH_ERROR_INVALID_ARGUMENT on every rank.
 *
 * Exactness: with F32 storage the result differs from one clflash_forward over the whole sequence
 * only by fp32 rounding. With F16 or BF16 each step's partial O is rounded once to the storage type
 * (clflash_forward writes O in it) before the fp32 merge, so the error is at most about two
 * roundings of the storage type. Deterministic for a fixed rank count and mapping.
 *
 * The call returns when o and lse are written (it waits for its kernels). It allocates, per call,
 * device memory for two K/V shards (of the largest rank's size) and fp32 running results four
 * times the size of this rank's O (with key lengths also one int32[batch] buffer per key chunk its
 * queries see; with packed sequences two small int32 buffers, the entries' cumulative lengths, per
 * pair of chunks with a call), and releases them before returning. The host staging of the two shards is
 * pinned where the driver allows it (buffers of ctx's context created with CL_MEM_ALLOC_HOST_PTR
 * and mapped) and is KEPT after the call for the next ring call on ctx, up to five such buffers
 * (the backward's three accumulators count too), until clflash_context_free(ctx): creating and
 * pinning them costs about as much as a step of the ring. Where the driver gives no such buffer
 * the staging is ordinary memory, freed before the call returns. With the node-local window the
 * K/V shards need no staging buffers (the backward's accumulators still do).
 *
 * Checks, before anything is enqueued: first each rank's own (NULL arguments, struct_size, ranges,
 * buffers that are not buffers of ctx or are too small for their layouts), then, collectively
 * (MPI_Allgather), the fields marked "same on every rank" and the mapping's rules. Every rank
 * returns the same status: the first failing rank's, in rank order (clflash_ring_last_error_detail
 * names the rank and the field). Then each rank plans its calls (clflash_plan_attention), and a
 * second collective makes every rank return the same status again if one of them fails.
 *
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (comm MPI_COMM_NULL, or MPI not
 * initialised or already finalised: these two return on the calling rank at once, without
 * communicating, since there is no communicator to agree on; NULL ctx, d, q, k, v or o,
 * a struct_size out of range, a buffer not of ctx, o the same buffer as q, k or v, lse the same as
 * any other, alibi_slopes, key_lengths or bias not a buffer of ctx or the same buffer as o or lse,
 * bias_layout or bias_broadcast set without a bias, page_size, pages_per_seq or num_pages set
 * without a block_table, a block_table that is not a buffer of ctx, is o or lse, or has an entry
 * that a row of the shard uses outside 0 .. num_pages - 1, or ranks that disagree on whether alibi_slopes,
 * key_lengths or bias is NULL, or on CLFLASH_RING_TRANSPORT,
 * or a value of it that is not auto, mpi or shared, or of CLFLASH_RING_PIN not auto, on or off;
 * num_seqs without cu_seqlens, cu_seqlens not a
 * buffer of ctx or the same as o or lse, ranks that disagree on num_seqs (0 without cu_seqlens) or
 * on the values of cu_seqlens, and cu_seqlens whose first value is not 0, that decreases or whose
 * last value is not seq_total); CLFLASH_ERROR_UNSUPPORTED
 * (fields of a newer version set; CLFLASH_ALIGN_TO_KEY_LENGTH; cu_seqlens with key_lengths, a bias
 * or a block_table; a pair of chunks that holds more than CLFLASH_MAX_BATCH packed sequences; a
 * sequence so long that a pair's
 * diagonal_offset is outside -CLFLASH_MAX_SEQ_K .. CLFLASH_MAX_SEQ_K; CLFLASH_RING_TRANSPORT=shared
 * where the ranks span nodes or MPI gives no window); CLFLASH_ERROR_INVALID_SHAPE
 * (a dimension 0 or above its limit,
 * heads_kv not dividing heads_q, cu_seqlens with batch above 1 or num_seqs 0, ranks that disagree on batch, heads or head_dim, a seq_total that is
 * not the shards' sum, shards
 * that do not cover the sequence exactly once, a zigzag sequence that is not a multiple of 2P or a
 * zigzag shard that is not 2 * seq_total / (2P) rows); CLFLASH_ERROR_INVALID_DTYPE (not F32, F16,
 * BF16, or ranks that disagree); CLFLASH_ERROR_INVALID_SCALE (a scale that is not finite, a softcap
 * that is not finite or is negative, or ranks that disagree on either);
 * CLFLASH_ERROR_INVALID_FLAGS (unknown bits in flags or bias_broadcast, an unknown mapping, window
 * widths without CLFLASH_WINDOW, or ranks that disagree on flags, mapping, window widths or
 * bias_broadcast);
 * CLFLASH_ERROR_HEAD_DIM_UNSUPPORTED; CLFLASH_ERROR_BUFFER_TOO_SMALL (a tensor too small for its
 * layout, alibi_slopes of fewer than heads_q floats, key_lengths of fewer than batch int32s, a bias
 * smaller than its layout's extent over [batch][heads_q][seq_local][seq_total], its broadcast
 * dimensions counted once, a block_table of fewer than batch * pages_per_seq int32s, cu_seqlens of
 * fewer than num_seqs + 1 int32s, pools smaller
 * than num_pages pages of their layouts); CLFLASH_ERROR_INVALID_SHAPE also for page_size,
 * pages_per_seq or num_pages 0 or page_size above CLFLASH_MAX_PAGE_SIZE with a block_table, or
 * seq_local above pages_per_seq * page_size; CLFLASH_ERROR_INVALID_LAYOUT (a bias layout that addresses more than
 * 2^64 bytes); the
 * planner's statuses
 * (CLFLASH_ERROR_INVALID_LAYOUT, CLFLASH_ERROR_TILE_TOO_LARGE, CLFLASH_ERROR_BUILD_FAILED, ...);
 * CLFLASH_ERROR_OUT_OF_HOST_MEMORY; CLFLASH_RING_ERROR_MPI; or an OpenCL error. Errors found
 * before the ring starts enqueue nothing and write no caller buffer. If a call fails during the ring
 * (an OpenCL enqueue or a kernel), the failing rank stops computing but keeps passing shards so that
 * no rank blocks, every rank returns the first failing rank's status, and o and lse may have been
 * partly written. */
CLFLASH_API clflash_status clflash_ring_forward(clflash_context *ctx, MPI_Comm comm, const clflash_ring_desc *d,
                                                cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse);

/* The gradients of clflash_ring_forward. Collective, like the forward: every rank
 * of comm calls it with the descriptor it gave the forward, its shard's q, k, v (as given to the
 * forward), o and lse (the forward's results; lse is required), and d_o, the gradient of the loss
 * with respect to its rows of O, laid out as d->o says. It writes dq, dk, dv for its shard: dq in
 * layout d->q (heads_q), dk and dv in layouts d->k and d->v (heads_kv; with GQA/MQA summed over each
 * group's query heads), in d->dtype; their gaps are never written. dq, dk and dv must be three
 * buffers of ctx of their own (none of them an input buffer).
 *
 * How: P steps, as in the forward. At step s the rank holds the K/V shard of rank (r - s) mod P,
 * and each of its query chunks that sees some of those keys runs the forward's calls as
 * clflash_backward (skipped, unmasked, or causal on the diagonal; or with a window, ALiBi, key
 * lengths, a bias or packed sequences one call per visible pair of query chunk and key chunk, whose
 * dK/dV belong to that key chunk's rows) on (the Q chunk, those keys) with the chunk's final O, dO and GLOBAL lse,
 * so that P = exp(S - lse) is the probability over the whole sequence and D = rowsum(dO * O) is the
 * whole row's: the per-pair gradients then add up exactly. A bias (d->bias, the forward's) is
 * added to S with the forward's offsets when P is recomputed.
 * The dQ partials are added into an fp32 accumulator of this rank; the dK/dV partials of the step
 * are summed in fp32 and, on the device, that shard's fp32 dK/dV accumulator is added to them; the
 * accumulator arrives from rank r - 1 and travels on to rank r + 1, one step behind the shard. After step P - 1 the
 * accumulator's next hop is its owner. The fp32 sums are written in the storage type at the end.
 * The additions (cl/grad_accumulate.cl, built once per context by clflash's program cache)
 * are in a fixed order: deterministic for a fixed rank count and mapping.
 *
 * The bias gradient (d->bias_grad, optional, with a bias): every call of a bias is one (query
 * chunk, key chunk) pair, whose block of dBias (the chunk's rows, the key chunk's columns) the call
 * writes itself (clflash_attention_desc.bias_grad, at the bias's moved offset; broadcast batch
 * entries and heads summed within the call). Blocks of pairs that get no call (the causal or window
 * rule hides every pair) are set to 0 after the ring, so that every element the layout addresses
 * over [batch][heads_q][seq_local][seq_total] is written and its gaps are not. With
 * CLFLASH_BROADCAST_ROWS the one row is shared by the whole sequence's query rows: each call's
 * block goes to a scratch row and is added (fp32, in call order) into a row of this rank; after
 * the ring rank 0 sends its row to rank 1, each rank adds its own (fp64) and sends the sum on, the
 * last rank broadcasts the total, and every rank writes it. Deterministic for a fixed rank count.
 *
 * Packed sequences (d->cu_seqlens, the forward's): each pair's call is the forward's
 * variable-length call; its entries with queries but no keys get dQ = 0 and those with keys but no
 * queries dK = dV = 0, so every row of the pair's chunks gets a partial, and a pair that makes no
 * call adds nothing.
 *
 * Exactness: in F32 the gradients differ from one clflash_backward over the whole sequence only
 * by fp32 rounding (in a different order of summation). In F16/BF16 each partial (one per pair of
 * query chunk and key shard) is rounded once to the storage type, since clflash_backward writes
 * its outputs in it, before the fp32 sums, and the result is rounded once more.
 *
 * Overlap: the next K/V shard travels while a step computes, as in the forward; the dK/dV
 * accumulator of a step is read from the device and sent while the next step computes: every
 * addition is a kernel enqueued in order after the step's gradients, and the host waits only for
 * MPI (the incoming accumulator before its upload) and for a step's read before sending it, when
 * the next step's kernels are already enqueued. The own shard is compacted on the device first
 * (a copy kernel; every step's calls take the compact layout) and read to the host beside step 0.
 *
 * Memory per call: the forward's two K/V shards (device; host with MPI messages), plus on the device a compact
 * copy of Q, a dQ partial and an fp32 dQ accumulator (this rank's rows), a dK/dV partial, two
 * fp32 dK/dV sums (alternating between steps) and an fp32 incoming accumulator (of the largest
 * shard); on the host three fp32 dK/dV buffers of the largest shard, staged and kept as the forward's shards are. With a bias
 * gradient broadcast over rows also a scratch of the bias's extent and two fp32 rows on the device
 * and, on the host, the row in fp32 and twice in fp64 (batch * heads_q * seq_total values, the
 * bias's broadcasts counted once; at most 2^31 - 1 of them, else CLFLASH_ERROR_UNSUPPORTED).
 *
 * Checks and returns: as clflash_ring_forward (the same collective checks; every rank returns the
 * same status), plus CLFLASH_ERROR_UNSUPPORTED for a descriptor with a block_table (on any rank;
 * clflash_backward takes no paged cache, and the ring's dK/dV are written in d->k's layout), plus CLFLASH_ERROR_INVALID_ARGUMENT for a NULL lse, d_o, dq, dk or dv, or an
 * output that is an input buffer (alibi_slopes, key_lengths, bias and cu_seqlens count as inputs) or the same
 * buffer as another output (bias_grad counts as an output), a bias_grad without a bias, or ranks
 * that disagree on whether bias_grad is NULL, and
 * CLFLASH_ERROR_BUFFER_TOO_SMALL for d_o, dq, dk or dv too small for their layouts or a bias_grad
 * smaller than the bias layout's extent, CLFLASH_ERROR_INVALID_LAYOUT for a bias layout that makes
 * two elements of bias_grad share an address (broadcast dimensions counted once), and
 * clflash_plan_backward's statuses. Errors found before the ring starts write no caller buffer. If a
 * call fails during the ring, the failing rank writes none of dq, dk, dv (they are written only
 * after the last step, by a rank that has not failed), keeps passing shards and accumulators so
 * that no rank blocks, and every rank returns its status; the other ranks' outputs may then have
 * been written, with meaningless values, and bias_grad may have been partly written on any rank
 * (the calls write it as they go). */
CLFLASH_API clflash_status clflash_ring_backward(clflash_context *ctx, MPI_Comm comm, const clflash_ring_desc *d,
                                                 cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse,
                                                 cl_mem dq, cl_mem dk, cl_mem dv);

/* The message of a status: this component's own, else clflash_status_string's. Never NULL. */
CLFLASH_API const char *clflash_ring_status_string(clflash_status s);

/* One sentence about the last failure of a clflash_ring_* call made by the calling thread
 * ("" if it succeeded): for a collective failure, which rank failed and why (for example
 * "rank 1: heads_q is 5, rank 0's is 4"). Valid until the thread's next clflash_ring_* call. */
CLFLASH_API const char *clflash_ring_last_error_detail(void);

#ifdef __cplusplus
}
#endif

#endif /* CLFLASH_MPI_H */
