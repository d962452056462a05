/*
 * ring_internal.h - what the files of the MPI ring component share: the ring's geometry (every
 * rank's shard as chunks of global positions, agreed on collectively), the rules that turn a
 * (query chunk, key shard) pair into clflash_forward/clflash_backward calls, the per-key-chunk key
 * lengths, the packed sequences' calls, the K/V exchange with its host staging, and the
 * component's error detail.
 *
 * The component is a client of clflash.h and of lib/component.h (the kernels libclflash runs for
 * its components) only; nothing here reaches into lib/internal.h.
 */
#ifndef CLFLASH_RING_INTERNAL_H
#define CLFLASH_RING_INTERNAL_H

#include "clflash_mpi.h"
#include "ring_stats.h"

#include <stddef.h>
#include <stdint.h>

/* ---- error detail (ring_status.c) ---------------------------------------------------------- */
void ring_clear_detail(void);
/* Records a detail sentence (printf-style) and returns st. */
clflash_status ring_fail(clflash_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Checks struct_size by the rule at the top of clflash.h for a struct whose first layout has
 * `first` bytes and this library's has `known` bytes. */
clflash_status ring_check_struct_size(const void *s, uint32_t struct_size, size_t first, size_t known);

/* ---- geometry (ring_geometry.c) -------------------------------------------------------------- */
/* A run of consecutive positions of the whole sequence held in consecutive rows of a shard. */
typedef struct {
    uint64_t pos;  /* position of the first token in the whole sequence */
    uint32_t row;  /* its row in the shard */
    uint32_t len;  /* tokens */
} ring_chunk;

/* A shard: one chunk (contiguous mapping) or two (zigzag), in row order. */
typedef struct {
    uint32_t rows;
    int nchunks;
    ring_chunk chunk[2];
} ring_shard;

/* What every rank agrees on after the collective check. */
typedef struct {
    int size, rank;
    uint32_t batch, heads_q, heads_kv, head_dim;
    clflash_dtype dtype;
    float scale, softcap;
    uint32_t flags, mapping;
    uint32_t window_left, window_right; /* with CLFLASH_WINDOW in flags */
    int has_alibi, has_key_lengths;     /* agreed: whether the ranks pass slopes / key lengths */
    int has_bias;                       /* agreed: whether the ranks pass a bias */
    uint32_t bias_broadcast;            /* agreed */
    int has_bias_grad;                  /* agreed (backward only; the forward ignores bias_grad) */
    int per_pair;        /* a window, ALiBi, key lengths or a bias: one call per (query chunk, key chunk) */
    cl_mem alibi_slopes; /* this rank's own (NULL without) */
    cl_mem key_lengths;  /* this rank's own, global positions (NULL without) */
    cl_mem bias;         /* this rank's own rows against every global key position (NULL without) */
    clflash_layout bias_layout; /* its layout, resolved (ring_bias_layout): broadcast strides 0 */
    cl_mem bias_grad;    /* this rank's (backward only; NULL without) */
    uint32_t num_seqs;   /* agreed: packed sequences (0: no packing) */
    int32_t *cu;         /* with num_seqs: the agreed cumulative lengths [num_seqs + 1] (host; owned,
                            set by ring_varlen_agree, freed by ring_geometry_free) */
    uint64_t seq_total;
    uint32_t max_rows;   /* the largest shard's rows */
    ring_shard *shards;  /* [size], in rank order */
} ring_geometry;

/* This rank's checks that need no communication: arguments, ranges, buffers. */
clflash_status ring_check_local(clflash_context *ctx, const clflash_ring_desc *d, cl_mem q, cl_mem k, cl_mem v,
                                cl_mem o, cl_mem lse);
/* m is a buffer of ctx of at least need bytes (need UINT64_MAX: CLFLASH_ERROR_INVALID_LAYOUT). */
clflash_status ring_check_buffer(clflash_context *ctx, cl_mem m, uint64_t need, const char *name);
/* A tensor argument of rows rows: not NULL, a buffer of ctx, large enough for layout l. */
clflash_status ring_check_tensor(clflash_context *ctx, cl_mem m, const clflash_layout *l, uint32_t batch,
                                 uint32_t heads, uint32_t rows, uint32_t head_dim, clflash_dtype t, const char *name);
/* The collective part: gathers every rank's fields and local status, and fills g (free with
 * ring_geometry_free) or returns the status every rank returns. With a bias (on every rank, agreed)
 * a second collective agrees on whether each rank's bias (and bias_grad) is large enough, which
 * needs seq_total. backward: whether d->bias_grad counts (the forward ignores it). */
clflash_status ring_geometry_agree(MPI_Comm comm, const clflash_ring_desc *d, clflash_status local, int backward,
                                   ring_geometry *g);
/* Bytes a buffer in the bias layout needs for seq_local rows against every key (UINT64_MAX on
 * overflow). */
uint64_t ring_bias_extent_bytes(const ring_geometry *g, uint32_t seq_local);
void ring_geometry_free(ring_geometry *g);
/* How both collective calls begin. ring_mpi_ready: comm is not MPI_COMM_NULL and MPI is running
 * (this rank's answer alone: a caller error, before any communication). ring_join: duplicates comm
 * into *ring_comm (the ring's messages never meet the caller's) and agrees on the geometry with
 * ring_geometry_agree; on failure *ring_comm is freed and every rank returns the same status. */
clflash_status ring_mpi_ready(MPI_Comm comm);
clflash_status ring_join(MPI_Comm comm, const clflash_ring_desc *d, clflash_status local, int backward,
                         MPI_Comm *ring_comm, ring_geometry *g);
/* Every rank's status after a phase, the same on every rank: the first failing rank's. */
clflash_status ring_agree_status(MPI_Comm comm, clflash_status mine, const char *phase);

/* ---- a paged own shard (ring_paged.c) --------------------------------------------------------- */
/* The paging fields of d (ring_check_local calls it): none without a block table, else ranges. */
clflash_status ring_paged_check(const clflash_ring_desc *d);
/* Reads d->block_table to the host (blocking, on ctx's queue) into *table (malloc'd,
 * int32[batch][pages_per_seq]) and checks that every entry a row of the shard uses names a page of
 * the pools; *table is NULL on failure. */
clflash_status ring_paged_read_table(clflash_context *ctx, const clflash_ring_desc *d, int32_t **table);
/* Enqueues on cq the copies of the shard's pages (pools k and v, table from ring_paged_read_table)
 * into dst as a compact shard: K [batch][heads_kv][seq_local][head_dim], V right after it. */
clflash_status ring_paged_gather(cl_command_queue cq, const clflash_ring_desc *d, const int32_t *table, cl_mem k,
                                 cl_mem v, cl_mem dst);

/* ---- visibility (ring_visible.c) ------------------------------------------------------------- */
/* One clflash_forward (or clflash_backward) call of a query chunk against a key shard: key rows
 * k_row .. k_row + k_len - 1 of the shard, the call's flags and diagonal_offset, and (for a call
 * of one key chunk, ring_calls with per_pair) the global position of its first key, which selects
 * its key lengths and its first bias column. */
typedef struct {
    uint32_t k_row, k_len;
    uint32_t flags;
    int32_t diagonal_offset;
    uint64_t k_pos;
} ring_call;

/* Causal only (or no rule): 1 and *out when the chunk sees some keys of the shard (one call,
 * CLFLASH_CAUSAL bottom-right aligned on a diagonal chunk), 0 when it sees none, -1 when what it
 * sees cannot be one bottom-right-aligned call (never for the mappings clflash_mpi.h defines). */
int ring_visible(const ring_chunk *q, const ring_shard *kv, int causal, ring_call *out);

/* ---- the calls of a pair (ring_pairs.c) ------------------------------------------------------- */
/* The calls of query chunk q against shard kv, in key row order, into out[0..]: ring_visible's one
 * call without per_pair; with it one call per key chunk that some query of q may see (the causal
 * and window rules on global positions), with the caller's flags and the diagonal_offset that
 * puts them at the whole sequence's diagonal. Returns the count (0 .. 2), or -1 when a call
 * cannot be formed (ring_visible's -1, or a diagonal_offset beyond CLFLASH_MAX_SEQ_K). */
int ring_calls(const ring_geometry *g, const ring_chunk *q, const ring_shard *kv, ring_call out[2]);
/* Sets a's flags, window widths, slopes, key lengths (key_lengths, the call's own buffer or NULL),
 * diagonal_offset and bias for call c of query chunk q: the bias layout's offset moves to element
 * (0, 0, q's first row, c's first key position). */
void ring_call_rules(clflash_attention_desc *a, const ring_geometry *g, const ring_chunk *q, const ring_call *c,
                     cl_mem key_lengths);
/* Whether some (query, key) pair of the runs q and k passes the causal and window rules. */
int ring_pair_visible(const ring_geometry *g, const ring_chunk *q, const ring_chunk *k);

/* ---- packed sequences (ring_varlen.c) --------------------------------------------------------- */
/* The packing fields of d (ring_check_local calls it): none without cu_seqlens, else what they
 * need and what they exclude. */
clflash_status ring_varlen_check(clflash_context *ctx, const clflash_ring_desc *d);
/* Reads d->cu_seqlens to the host (blocking, on ctx's queue) into *cu (malloc'd, int32[num_seqs +
 * 1]) and checks that it starts at 0 and never decreases; *cu is NULL on failure or without one. */
clflash_status ring_varlen_read(clflash_context *ctx, const clflash_ring_desc *d, int32_t **cu);
/* Collective, after ring_join, on every rank: nothing without packing (g->num_seqs 0, agreed);
 * else agrees that every rank's cu holds rank 0's values and ends at seq_total, and that every
 * pair of chunks the ring meets gives a call clflash can take. g takes cu (freed either way). */
clflash_status ring_varlen_agree(MPI_Comm comm, ring_geometry *g, int32_t *cu);
/* ring_calls with packing: for each key chunk of kv, one call when it is q itself (every packed
 * sequence's piece against itself) or when the one sequence with tokens in both has a visible
 * pair; diagonal_offset places that sequence's diagonal. Count, or -1 as ring_calls. */
int ring_varlen_calls(const ring_geometry *g, const ring_chunk *q, const ring_shard *kv, ring_call out[2]);
/* The cumulative lengths of each call of this rank's query chunks: per (query chunk, key chunk)
 * pair, the sequences with tokens in either as the entries of a clflash variable-length batch over
 * the query chunk's rows and the key chunk's rows, in two small device buffers. */
typedef struct {
    int n;
    uint64_t *q_pos, *k_pos;        /* [n]: the pair's chunks */
    uint32_t *entries, *max_q, *max_k; /* [n]: sequences, and their longest pieces */
    cl_mem *cu_q, *cu_k;            /* [n] */
} ring_varlen;
/* Nothing without g->cu; else the buffers of every call of the chunks q[0 .. nq-1]. */
clflash_status ring_varlen_init(ring_varlen *v, clflash_context *ctx, const ring_geometry *g, const ring_chunk *q,
                                int nq);
/* Makes a (whose layouts are set) call c of query chunk q a variable-length batch: batch, seq_q,
 * seq_k, cu_seqlens, totals, and the packed layouts (batch_stride 0). No-op without packing. */
void ring_varlen_rules(clflash_attention_desc *a, const ring_varlen *v, const ring_chunk *q, const ring_call *c);
/* Layout l of a tensor of heads x rows for call a: resolved, and packed when a is varlen. */
clflash_layout ring_varlen_layout(const clflash_attention_desc *a, const clflash_layout *l, uint32_t heads,
                                  uint32_t rows, uint32_t head_dim);
void ring_varlen_free(ring_varlen *v);

/* ---- key lengths per key chunk (ring_key_lengths.c) ------------------------------------------- */
/* The caller's key_lengths (global positions) as each call needs them: for the key chunk at
 * position pos of len rows, int32[batch] of clamp(L[b] - pos, 0, len). One buffer per key chunk
 * that this rank's query chunks see. */
typedef struct {
    int n;
    uint64_t *pos;          /* [n] */
    cl_mem *buf;            /* [n] */
    unsigned char *empty;   /* [n]: every batch entry's length ends at or before the chunk's first key */
    uint64_t keep_all[2];   /* the query chunks (positions) whose every call meets an empty key chunk */
    int n_keep;
} ring_key_lengths;

/* Nothing without g->key_lengths; else reads the caller's buffer (blocking, on cq) and creates the
 * buffers for the key chunks of every shard that the chunks q[0 .. nq-1] have calls with. */
clflash_status ring_key_lengths_init(ring_key_lengths *kl, clflash_context *ctx, cl_command_queue cq,
                                     const ring_geometry *g, const ring_chunk *q, int nq);
/* ring_calls less the calls whose key chunk is empty (kl's), unless that would leave query chunk q
 * with no call over the whole ring (then all of them). Without key lengths, ring_calls. The forward
 * and the backward enqueue these; the checks of the geometry take ring_calls. */
int ring_calls_live(const ring_geometry *g, const ring_key_lengths *kl, const ring_chunk *q, const ring_shard *kv,
                    ring_call out[2]);
/* The buffer of the key chunk at position pos, NULL if none. */
cl_mem ring_key_lengths_at(const ring_key_lengths *kl, uint64_t pos);
void ring_key_lengths_free(ring_key_lengths *kl);

/* ---- timing (ring_stats.c; only while a clflash_ring_stats of ring_stats.h is attached) ---------- */
typedef struct {
    clflash_ring_stats *sink;
    int P;
    double t_entry;         /* MPI_Wtime at the call's entry */
    cl_command_queue queue; /* the timed call's compute queue (profiling) */
    cl_event *start, *grad_end, *step_end, *upload; /* [P] each: step markers; the upload of step s + 1's shard */
    double *kv_mpi, *acc_mpi; /* [P] each (clflash_ring_step_stats) */
} ring_timing;
/* 1 if the calling thread has a sink attached (the transfer queue then gets profiling). */
int ring_timing_wanted(void);
/* NULL without a sink (or if timing cannot be set up: the call runs untimed, the sink says why);
 * else the timing of this call, and *cq becomes its profiling queue (the context's queue finished
 * first). */
ring_timing *ring_timing_begin(clflash_context *ctx, int P, double t_entry, cl_command_queue *cq);
/* What a step's marker marks, and which host time is noted. */
enum { RING_T_START, RING_T_GRAD_END, RING_T_STEP_END };
enum { RING_T_KV_MPI, RING_T_ACC_MPI };
/* With t (no-ops without): enqueues a marker of kind `which` for step s on q; keeps (retains) e,
 * the upload of the shard step s + 1 uses; notes a host time of kind `which` for step s. */
void ring_timing_mark(ring_timing *t, cl_command_queue q, int which, int s);
void ring_timing_upload(ring_timing *t, int s, cl_event e);
void ring_timing_host(ring_timing *t, int which, int s, double seconds);
/* Notes the K/V transport's name (ring_exchange_transport) in the sink. */
void ring_timing_transport(ring_timing *t, const char *name, int pinned);
/* Notes in the sink how many calls the chunks q[0 .. nq-1] make over the ring (ring_calls_live) and
 * how many ring_calls has that they leave out. */
void ring_timing_calls(ring_timing *t, const ring_geometry *g, const ring_key_lengths *kl, const ring_chunk *q,
                       int nq);
/* MPI_Waitall, or with t a MPI_Testall loop; *done_at (if not NULL) = MPI_Wtime when done. */
int ring_waitall(int n, MPI_Request *req, const ring_timing *t, double *done_at);
/* Finishes the timed queue, fills the sink, releases everything. No-op without t. */
void ring_timing_end(ring_timing *t, clflash_status call_status);

/* ---- host staging memory (ring_staging.c) ---------------------------------------------------- */
/* A mapped CL_MEM_ALLOC_HOST_PTR buffer of the context (mem set), or calloc'd memory (mem NULL). */
typedef struct {
    cl_mem mem;
    void *ptr;
    size_t bytes;
} ring_staging;
/* At least bytes of host memory for staging: a mapped buffer kept from an earlier call on ctx, a
 * new one, or zeroed plain memory where the driver gives none; NULL when there is no memory at
 * all. A kept buffer holds what the earlier call left in it. */
void *ring_staging_alloc(ring_staging *s, clflash_context *ctx, size_t bytes);
/* Gives a mapped buffer back to ctx's cache (which may release it) or frees plain memory; s may
 * be zeroed. Nothing may still use the memory. */
void ring_staging_free(ring_staging *s, clflash_context *ctx);

/* ---- the node-local transport (ring_shared.c) ------------------------------------------------ */
/* An MPI shared-memory window with one segment per rank of the ring, open for the whole call. */
typedef struct {
    int open;
    MPI_Win win;
    unsigned char **seg; /* [P]: every rank's segment as this process sees it */
    void *kept;          /* the kept window (ring_shared.c) */
    int pinned;          /* ring_shared_pin registered every segment with the context's driver */
} ring_shared;
/* Collective: which transport the ring takes, from CLFLASH_RING_TRANSPORT on every rank and whether
 * they share one node. *mode: 0 MPI messages, 1 the shared window if every rank gets it, 2 the
 * shared window or an error. Every rank gets the same status and mode. */
clflash_status ring_transport_choose(MPI_Comm comm, int *mode);
/* What CLFLASH_RING_PIN asks for: -1 an unknown value, 0 auto (unset), 1 on, 2 off. */
int ring_pin_asked(void);
/* Registers every segment of s with ctx's driver where CLFLASH_RING_PIN says so (auto: unless ctx's
 * device is a CPU): a CL_MEM_USE_HOST_PTR buffer over each, kept with the window for later calls on
 * the same OpenCL context and never used for data. Drivers that pin such memory then copy between
 * the segments and the device at their copy engine's rate instead of through bounce buffers.
 * Sets s->pinned where every segment got one; a driver that refuses changes nothing else. */
void ring_shared_pin(ring_shared *s, clflash_context *ctx);
/* Collective over comm (the ring's duplicate of caller): maps every rank's segment of the window
 * kept with caller, after replacing it on every rank when some rank has none or one smaller than its
 * own_bytes. Without a window on some rank: nothing is allocated, and the status is CLFLASH_SUCCESS
 * with s->open 0 (or CLFLASH_ERROR_UNSUPPORTED when `required`). */
clflash_status ring_shared_open(ring_shared *s, MPI_Comm caller, MPI_Comm comm, size_t own_bytes, int required);
/* MPI_Win_sync: before a rank tells others its segment is written, and after it is told. */
void ring_shared_sync(ring_shared *s);
/* Collective: waits until no rank reads a segment any more (the window stays with the caller's
 * communicator). */
void ring_shared_close(ring_shared *s, MPI_Comm comm);

/* ---- the K/V exchange (ring_exchange.c) ------------------------------------------------------ */
/* Two device buffers and, with MPI messages, two host staging buffers, each holding one shard's
 * K then V, compact ([batch][heads_kv][rows][head_dim] each, V right after K). With the shared
 * window, host[0] is this rank's segment (its own shard, written once) and host[1] is unused. */
typedef struct {
    clflash_context *ctx;
    MPI_Comm comm;
    int rank, left, right;
    uint64_t own_bytes;    /* this rank's shard, compact */
    uint64_t max_bytes;    /* the largest rank's */
    uint64_t extra;        /* shared: bytes before the shard in each segment (ring_exchange_connect) */
    ring_shared shm;       /* open: the node-local transport */
    int own_announced;     /* shared: the barrier that says every own shard is in place was posted */
    size_t elem;           /* bytes per element */
    uint64_t rows_elems;   /* batch * heads_kv * head_dim: elements of one row of the shard */
    void *host[2];           /* staging[i].ptr */
    ring_staging staging[2];
    cl_mem dev[2];
    cl_command_queue queue; /* transfers' own queue */
    cl_event written[2];    /* host[i] -> dev[i] */
    cl_event released[2];   /* the compute queue's last use of dev[i] */
    MPI_Request req[2 * 64];
    int nreq;
    const ring_timing *timing; /* NULL unless the call is timed (ring_exchange_wait polls then) */
    double done_at;            /* MPI_Wtime when ring_exchange_wait's messages were done */
} ring_exchange;

/* Allocates the device buffers for shards of up to max_rows rows and the transfer queue (this
 * rank alone). */
clflash_status ring_exchange_init(ring_exchange *x, clflash_context *ctx, MPI_Comm comm, const ring_geometry *g);
/* Collective, once every rank's init has succeeded: chooses the transport (ring_shared.c) and
 * takes its host memory (the window kept with the caller's communicator, or two staging buffers).
 * With the window, each rank's segment starts with extra_bytes (the same on every rank) for the
 * caller's own use (ring_exchange_extra), then the own shard. */
clflash_status ring_exchange_connect(ring_exchange *x, MPI_Comm caller, uint64_t extra_bytes);
/* With the window: the start of rank r's extra bytes as this process sees them; else NULL. */
unsigned char *ring_exchange_extra(const ring_exchange *x, int r);
/* Collective when connected through the window (every rank calls it). */
void ring_exchange_free(ring_exchange *x);
/* "shared" or "mpi": the transport a connected exchange uses. */
const char *ring_exchange_transport(const ring_exchange *x);
/* Enqueues (and flushes) the reads of this rank's own K and V (caller layouts, rows rows) into
 * host[0], compact, on the transfer queue; ring_exchange_pack_own_finish waits for them. */
clflash_status ring_exchange_pack_own_start(ring_exchange *x, const ring_geometry *g, cl_mem k,
                                            const clflash_layout *kl, cl_mem v, const clflash_layout *vl,
                                            uint32_t rows);
clflash_status ring_exchange_pack_own_finish(ring_exchange *x);
/* The same from dev[0] when the own shard is already compact there (written[0] its last write):
 * enqueues (and flushes) the read of rows rows into host[0]; ring_exchange_pack_own_finish waits. */
clflash_status ring_exchange_read_own_start(ring_exchange *x, uint32_t rows);
/* MPI messages: posts the sends of host[slot] (send_rows rows) to the right and the receives into
 * host[1 - slot] (recv_rows rows) from the left, after waiting until host[1 - slot]'s last write to
 * the device is done. Shared window: the first call (the own shard is in the segment) posts the
 * barrier that tells every rank so; later calls post nothing. */
clflash_status ring_exchange_post(ring_exchange *x, int slot, uint32_t send_rows, uint32_t recv_rows);
/* Waits for what was posted (driving MPI while the device computes). */
clflash_status ring_exchange_wait(ring_exchange *x);
/* Enqueues the upload of rank src's shard (rows rows) into dev[slot] on the transfer queue after
 * released[slot]: from host[slot] (MPI messages) or from src's segment (shared window). */
clflash_status ring_exchange_upload(ring_exchange *x, int slot, int src, uint32_t rows);
/* Posts a nonblocking send (send != 0) or receive of bytes bytes at buf to or from peer, in pieces of
 * at most 1 GiB with tags tag0, tag0 + 1, ... (at most 64 pieces); appends the requests to req. */
clflash_status ring_post_bytes(MPI_Comm comm, void *buf, uint64_t bytes, int peer, int tag0, int send,
                               MPI_Request *req, int *nreq);
/* Layouts of K and V in a compact shard of rows rows (dev[slot], or a paged shard's copy). */
void ring_compact_layouts(const ring_geometry *g, uint32_t rows, clflash_layout *kl, clflash_layout *vl);

/* ---- layouts (ring_geometry.c) --------------------------------------------------------------- */
/* l with its zero strides replaced by the contiguous defaults for a tensor of heads x seq rows. */
clflash_layout ring_resolve_layout(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t head_dim);
/* The bias layout of d, resolved for [batch][heads_q][seq_local][seq_total] as clflash resolves a
 * bias layout (defaults first, then the dimensions bias_broadcast names get stride 0). */
clflash_layout ring_bias_layout(const clflash_ring_desc *d, uint64_t seq_total);
/* l shifted down by `row` rows (l resolved first). */
clflash_layout ring_layout_rows(const clflash_layout *l, uint32_t heads, uint32_t seq, uint32_t head_dim,
                                uint32_t row);

#endif /* CLFLASH_RING_INTERNAL_H */
