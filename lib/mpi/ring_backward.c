/*
 * ring_backward.c - clflash_ring_backward: the gradients of the ring forward. P steps, as in the
 * forward: at step s the rank holds the K/V shard of rank (r - s) mod P, and each of its query
 * chunks that sees some of those keys runs the forward's calls (ring_calls: one, or with a window,
 * ALiBi, key lengths or a bias one per key chunk, whose dK/dV are that chunk's rows; the bias is
 * added where P is recomputed) as clflash_backward with the
 * rank's final O, its dO and the GLOBAL lse. With the global lse, P = exp(S - lse) is the
 * probability over the whole sequence and clflash_backward's D = rowsum(dO * O) is the global one,
 * so the per-pair gradients simply add up. dQ partials are added into this rank's fp32 dQ
 * accumulator on the device; the dK/dV partials of a step are summed (fp32, on the device) into one
 * buffer, the shard's travelling fp32 dK/dV accumulator (which arrived from rank r - 1 through host
 * memory) is uploaded and added to it on the device, and the sum is read back and goes on to rank
 * r + 1, one step behind the shard. After step P - 1 that accumulator has every rank's
 * contribution and its next hop is its owner. All of it is enqueued in order on the compute queue;
 * the host waits only where MPI needs bytes: for the incoming accumulator before its upload, and
 * for the read of a step's sum before its send, which happens during the next step (whose kernels
 * are already enqueued), so the device never waits for the host's bookkeeping.
 *
 * Why partials are added in fp32 by cl/grad_accumulate.cl (through lib/component.h): clflash_backward
 * writes its gradients in the storage type only and into layouts equal to its inputs', so its outputs go
 * to compact scratch tensors, and the sums are kept in fp32 to avoid rounding the running sums at
 * every step. The order of every addition is fixed (query chunks in row order within a step, steps
 * in order; for dK/dV the owner's rank first, then around the ring), so a fixed rank count gives
 * the same bits on every run.
 *
 * The bias gradient (d->bias_grad): with a bias every call is one (query chunk, key chunk) pair,
 * and the pair's block of dBias (this rank's rows of the chunk, the key chunk's columns) is the
 * call's own dBias, so each call writes it straight into the caller's buffer at the bias's moved
 * offset (clflash_backward sums broadcast batch entries and heads itself). Blocks of pairs that
 * get no call (hidden by the causal or window rule) are zeroed after the ring (clflash_grad_zero).
 * A bias broadcast over rows is the exception: its one row is shared by every query row of the
 * whole sequence, so every call writes the row's block into a scratch buffer in the bias layout,
 * which is added (fp32, in call order) into a compact [batch][heads][seq_total] row of this rank;
 * after the ring the ranks' rows are summed along the ranks in rank order (fp64, rank 0 first, then
 * broadcast from the last rank), and every rank writes the sum: deterministic as well.
 */
#include "component.h"
#include "ring_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>


#define ACC_TAG0 4096 /* tags of the dK/dV accumulators (the K/V pieces use 0 .. 63) */

typedef struct {
    clflash_context *ctx;
    cl_command_queue cq;
    const clflash_ring_desc *d;
    const ring_geometry *g;
    cl_mem o, d_o, lse;
    int nq;
    ring_chunk qc[2];
    cl_mem lse_c[2];   /* the chunk's rows of lse, compact (zigzag), or the caller's lse (one chunk) */
    cl_mem q_c;        /* Q, compact [batch][heads_q][seq_local][head_dim], storage type */
    cl_mem dq_part;    /* a dQ partial, same geometry, storage type */
    cl_mem dq_acc;     /* fp32, same geometry */
    cl_mem dkv_part;   /* a dK/dV partial, a compact K/V shard of up to max_rows rows, storage type */
    cl_mem dkv_acc;    /* fp32, the same geometry: the step's dK/dV, then plus the incoming accumulator
                          (even steps; and the own complete dK/dV at the end) */
    cl_mem dkv_acc_odd; /* the same for odd steps, so that a step's sum can be read to the host while
                           the next step computes into the other */
    cl_command_queue aq; /* the accumulators' moves (uploads of the incoming, reads of the sums), beside
                            the compute queue and the K/V transfer queue */
    cl_event added;      /* the end of the last step's addition (or of step 0's kernels): dkv_in is free
                            again after it, and the read of that step's sum waits for it */
    cl_mem dkv_in;     /* fp32, the same geometry: the incoming accumulator on the device */
    uint64_t kv_row_elems; /* 2 * batch * heads_kv * head_dim: fp32 values per shard row of dK/dV */
    float *h_in, *h_out[2]; /* host fp32 dK/dV accumulators: the incoming, the outgoing (two in flight) */
    ring_staging h_mem[3];  /* their memory (ring_staging.c): h_in, h_out[0], h_out[1] */
    uint64_t acc_slot;      /* bytes of one host accumulator (a whole number of pages) */
    int shared;             /* the node-local window: h_out[i] in this rank's segment, no h_in; the
                               incoming accumulator is uploaded from the left rank's h_out */
    unsigned char *left_acc; /* shared: the left rank's h_out[0] (h_out[1] acc_slot bytes after it) */
    cl_event rd[2];    /* the read of step i's (mod 2) sum into h_out[i], on aq */
    MPI_Request out_req[2][64];
    int out_n[2];
    MPI_Request in_req[64];
    int in_n;
    ring_exchange x;
    int have_x;
    ring_key_lengths kl;  /* per key chunk, with key lengths */
    ring_varlen packed;   /* per pair, with packed sequences */
    cl_mem dbias_call;    /* with bias_grad: the buffer the calls write their dBias into (the caller's,
                             or with a bias broadcast over rows rows_scratch) */
    int rows_bcast;       /* bias_grad with CLFLASH_BROADCAST_ROWS: the row is summed over the ranks */
    uint32_t bias_nb, bias_nh; /* the bias's batch entries and heads, 1 where broadcast */
    cl_mem rows_scratch;  /* rows_bcast: a call's dBias, in the bias layout (its extent) */
    cl_mem rows_part;     /* rows_bcast: rows_scratch compact, fp32 [bias_nb * bias_nh][seq_total] */
    cl_mem rows_acc;      /* rows_bcast: this rank's sum of them, the same geometry */
    double *rows_host;    /* rows_bcast: rows_acc on the host after the ring, then the ranks' sum */
    ring_timing *timing;  /* NULL unless a clflash_ring_stats is attached (ring_stats.h) */
    double acc_posted;    /* MPI_Wtime when the incoming accumulator's receive was posted (timing only) */
} ring_bwd;

static int src_of(const ring_geometry *g, int s)
{
    return (g->rank - s % g->size + g->size) % g->size;
}

static clflash_layout compact(void)
{
    return (clflash_layout){0, 0, 0, 0};
}

static clflash_attention_desc call_desc(const ring_bwd *B, const ring_chunk *q, const ring_call *c,
                                        const clflash_layout *kl, const clflash_layout *vl, uint32_t kv_rows)
{
    const ring_geometry *g = B->g;
    const clflash_layout qz = compact();
    clflash_attention_desc a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.batch = g->batch;
    a.heads_q = g->heads_q;
    a.heads_kv = g->heads_kv;
    a.seq_q = q->len;
    a.seq_k = c->k_len;
    a.head_dim = g->head_dim;
    a.dtype = g->dtype;
    a.scale = g->scale;
    a.softcap = g->softcap;
    ring_call_rules(&a, g, q, c, ring_key_lengths_at(&B->kl, c->k_pos));
    a.block = B->d->block;
    a.q = ring_layout_rows(&qz, g->heads_q, B->d->seq_local, g->head_dim, q->row);
    a.k = ring_layout_rows(kl, g->heads_kv, kv_rows, g->head_dim, c->k_row);
    a.v = ring_layout_rows(vl, g->heads_kv, kv_rows, g->head_dim, c->k_row);
    a.o = ring_layout_rows(&B->d->o, g->heads_q, B->d->seq_local, g->head_dim, q->row);
    a.bias_grad = B->dbias_call; /* in the bias's layout, whose offset ring_call_rules moved */
    ring_varlen_rules(&a, &B->packed, q, c);
    return a;
}

static cl_mem new_buffer(ring_bwd *B, uint64_t bytes, clflash_status *st)
{
    cl_int err = CL_SUCCESS;
    if (*st != CLFLASH_SUCCESS)
        return NULL;
    cl_mem m = clCreateBuffer(clflash_context_cl(B->ctx), CL_MEM_READ_WRITE, (size_t)(bytes ? bytes : 4), NULL, &err);
    if (err != CL_SUCCESS)
        *st = ring_fail(err, "clCreateBuffer of %llu bytes for the ring's backward: %d", (unsigned long long)bytes,
                        err);
    return err == CL_SUCCESS ? m : NULL;
}

/* acc += part over rows row0 .. row0 + len - 1 of compact [nbh][rows][head_dim] tensors (part in
 * part_dtype). */
static clflash_status accumulate(ring_bwd *B, clflash_dtype part_dtype, cl_mem acc, cl_mem part, uint64_t nbh,
                                 uint32_t rows, uint32_t row0, uint32_t len)
{
    const clflash_status st =
        clflash_grad_accumulate(B->ctx, B->cq, part_dtype, acc, part, nbh, rows, row0, len, B->g->head_dim);
    return st ? ring_fail(st, "adding a gradient partial: %s", clflash_last_error_detail()) : CLFLASH_SUCCESS;
}

/* With a bias gradient broadcast over rows: call c's block of the row (its key chunk's columns,
 * summed over the call's query rows), which the call wrote into rows_scratch, is added into
 * rows_acc. The row is gathered whole into rows_part (compact), and the addition takes only the
 * call's columns: seen as [nbh][seq_total][1], they are the rows k_pos .. k_pos + k_len - 1. */
static clflash_status add_row_block(ring_bwd *B, const ring_call *c)
{
    const ring_geometry *g = B->g;
    const uint32_t keys = (uint32_t)g->seq_total; /* below 2^31: setup checked the row's size */
    clflash_status st = clflash_grad_gather(B->ctx, B->cq, CLFLASH_F32, B->rows_part, 0, B->rows_scratch,
                                            &g->bias_layout, B->bias_nb, B->bias_nh, 1, keys);
    if (st == CLFLASH_SUCCESS)
        st = clflash_grad_accumulate(B->ctx, B->cq, CLFLASH_F32, B->rows_acc, B->rows_part,
                                     (uint64_t)B->bias_nb * B->bias_nh, keys, (uint32_t)c->k_pos, c->k_len, 1);
    return st ? ring_fail(st, "adding a bias gradient row: %s", clflash_last_error_detail()) : CLFLASH_SUCCESS;
}

/* The caller's tensor m (layout l, heads heads, rows rows) from compact fp32 compact_buf at element
 * compact_off (scatter), or compact_buf from element compact_off (storage type) from it (gather). */
static clflash_status move(ring_bwd *B, int scatter, cl_mem m, const clflash_layout *l, uint32_t heads, uint32_t rows,
                           cl_mem compact_buf, uint64_t compact_off)
{
    const ring_geometry *g = B->g;
    const clflash_status st =
        scatter ? clflash_grad_scatter(B->ctx, B->cq, g->dtype, m, l, g->batch, heads, rows, g->head_dim, compact_buf,
                                       compact_off)
                : clflash_grad_gather(B->ctx, B->cq, g->dtype, compact_buf, compact_off, m, l, g->batch, heads, rows,
                                      g->head_dim);
    return st ? ring_fail(st, "%s a tensor: %s", scatter ? "writing out" : "compacting", clflash_last_error_detail())
              : CLFLASH_SUCCESS;
}

/* Plans this rank's own-shard calls, builds the kernels, allocates, and enqueues the copies of Q
 * and of the chunks' lse rows (the caller's buffers are only read). */
static clflash_status setup(ring_bwd *B, MPI_Comm comm, cl_mem q)
{
    const ring_geometry *g = B->g;
    const ring_shard *own = &g->shards[g->rank];
    const uint32_t n = B->d->seq_local;
    clflash_status st = CLFLASH_SUCCESS;
    B->nq = own->nchunks;
    if ((st = ring_key_lengths_init(&B->kl, B->ctx, B->cq, g, own->chunk, own->nchunks)) != CLFLASH_SUCCESS ||
        (st = ring_varlen_init(&B->packed, B->ctx, g, own->chunk, own->nchunks)) != CLFLASH_SUCCESS)
        return st;
    for (int i = 0; i < B->nq; i++) {
        B->qc[i] = own->chunk[i];
        ring_call c[2];
        const int nc = ring_calls_live(g, &B->kl, &B->qc[i], own, c);
        for (int j = 0; j < nc; j++) {
            clflash_attention_desc a = call_desc(B, &B->qc[i], &c[j], &B->d->k, &B->d->v, own->rows);
            clflash_plan p;
            memset(&p, 0, sizeof p);
            p.struct_size = sizeof p;
            const clflash_status ps = clflash_plan_backward(B->ctx, &a, &p);
            if (ps != CLFLASH_SUCCESS)
                return ring_fail(ps, "clflash_plan_backward of query chunk %d: %s", i, clflash_last_error_detail());
        }
    }
    if (clflash_component_check_version() != CLFLASH_SUCCESS)
        return ring_fail(CLFLASH_ERROR_UNSUPPORTED,
                         "clflash_mpi was built with clflash %u and runs with %u; they must be the same release",
                         (unsigned)CLFLASH_VERSION_NUMBER, clflash_version_number());
    const size_t e = clflash_dtype_size(g->dtype);
    const uint64_t q_elems = (uint64_t)g->batch * g->heads_q * n * g->head_dim;
    B->kv_row_elems = 2ull * g->batch * g->heads_kv * g->head_dim;
    const uint64_t kv_elems = B->kv_row_elems * g->max_rows;
    B->q_c = new_buffer(B, q_elems * e, &st);
    B->dq_part = new_buffer(B, q_elems * e, &st);
    B->dq_acc = new_buffer(B, q_elems * sizeof(float), &st);
    B->dkv_part = new_buffer(B, kv_elems * e, &st);
    B->dkv_acc = new_buffer(B, kv_elems * sizeof(float), &st);
    for (int i = 0; i < B->nq && B->nq > 1; i++)
        B->lse_c[i] = new_buffer(B, (uint64_t)g->batch * g->heads_q * B->qc[i].len * sizeof(float), &st);
    B->dbias_call = g->bias_grad;
    B->bias_nb = g->bias_broadcast & CLFLASH_BROADCAST_BATCH ? 1 : g->batch;
    B->bias_nh = g->bias_broadcast & CLFLASH_BROADCAST_HEADS ? 1 : g->heads_q;
    B->rows_bcast = g->bias_grad != NULL && (g->bias_broadcast & CLFLASH_BROADCAST_ROWS);
    const uint64_t row_elems = (uint64_t)B->bias_nb * B->bias_nh * g->seq_total;
    if (B->rows_bcast) {
        if (row_elems > (uint64_t)INT_MAX)
            return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "a bias gradient broadcast over rows of %llu elements is above "
                             "the ring's %d (one MPI message)", (unsigned long long)row_elems, INT_MAX);
        B->rows_scratch = new_buffer(B, ring_bias_extent_bytes(g, n), &st);
        B->rows_part = new_buffer(B, row_elems * sizeof(float), &st);
        B->rows_acc = new_buffer(B, row_elems * sizeof(float), &st);
        B->dbias_call = B->rows_scratch;
    }
    if (st)
        return st;
    if (g->size > 1) {
        if (kv_elems * sizeof(float) > SIZE_MAX / 4 || kv_elems * sizeof(float) > ((uint64_t)64 << 30))
            return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "a dK/dV accumulator of %llu bytes is above the ring's 64 GiB",
                             (unsigned long long)(kv_elems * sizeof(float)));
        B->dkv_in = new_buffer(B, kv_elems * sizeof(float), &st);
        B->dkv_acc_odd = new_buffer(B, kv_elems * sizeof(float), &st);
        if (st)
            return st;
        cl_int err = CL_SUCCESS;
        B->aq = clCreateCommandQueue(clflash_context_cl(B->ctx), clflash_context_device(B->ctx), 0, &err);
        if (err != CL_SUCCESS) {
            B->aq = NULL;
            return ring_fail(err, "clCreateCommandQueue for the dK/dV accumulators: %d", err);
        }
        B->acc_slot = (kv_elems * sizeof(float) + 4095) / 4096 * 4096;
    }
    B->have_x = 1;
    if ((st = ring_exchange_init(&B->x, B->ctx, comm, g)) != CLFLASH_SUCCESS)
        return st;
    B->x.timing = B->timing;
    /* enqueued work from here on; the ring's first step is ordered after it on the same queue */
    const float zero = 0.0f;
    if ((st = move(B, 0, q, &B->d->q, g->heads_q, n, B->q_c, 0)) != CLFLASH_SUCCESS)
        return st;
    cl_int err =
        clEnqueueFillBuffer(B->cq, B->dq_acc, &zero, sizeof zero, 0, (size_t)(q_elems * sizeof(float)), 0, NULL, NULL);
    if (err == CL_SUCCESS && B->rows_bcast)
        err = clEnqueueFillBuffer(B->cq, B->rows_acc, &zero, sizeof zero, 0, (size_t)(row_elems * sizeof(float)), 0,
                                  NULL, NULL);
    for (int i = 0; i < B->nq && B->nq > 1 && err == CL_SUCCESS; i++) {
        const size_t len = (size_t)B->qc[i].len * sizeof(float);
        const size_t so[3] = {(size_t)B->qc[i].row * sizeof(float), 0, 0}, dz[3] = {0, 0, 0},
                     region[3] = {len, (size_t)g->batch * g->heads_q, 1};
        err = clEnqueueCopyBufferRect(B->cq, B->lse, B->lse_c[i], so, dz, region, (size_t)n * sizeof(float), 0, len,
                                      0, 0, NULL, NULL);
    }
    if (B->nq == 1)
        B->lse_c[0] = B->lse;
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "preparing Q and lse for the backward: %d", err);
}

/* After ring_exchange_connect (P > 1): the host accumulators. With the window they are the first
 * 2 * acc_slot bytes of each rank's segment; else staging buffers (a rank that fails still sends
 * them: what they hold then does not matter, every rank returns the failure). */
static clflash_status accumulator_memory(ring_bwd *B)
{
    unsigned char *own = ring_exchange_extra(&B->x, B->g->rank);
    if (own != NULL) {
        B->shared = 1;
        B->h_out[0] = (float *)own;
        B->h_out[1] = (float *)(own + B->acc_slot);
        B->left_acc = ring_exchange_extra(&B->x, B->x.left);
        return CLFLASH_SUCCESS;
    }
    const size_t bytes = (size_t)B->acc_slot;
    B->h_in = ring_staging_alloc(&B->h_mem[0], B->ctx, bytes);
    B->h_out[0] = ring_staging_alloc(&B->h_mem[1], B->ctx, bytes);
    B->h_out[1] = ring_staging_alloc(&B->h_mem[2], B->ctx, bytes);
    if (!B->h_in || !B->h_out[0] || !B->h_out[1])
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for the dK/dV accumulators");
    return CLFLASH_SUCCESS;
}

/* Where the incoming accumulator of step s (1 .. P; P: this rank's own, complete) is read from:
 * h_in, or the left rank's h_out of the step before. */
static const void *incoming(const ring_bwd *B, int s)
{
    return B->shared ? (const void *)(B->left_acc + (uint64_t)((s - 1) % 2) * B->acc_slot) : (const void *)B->h_in;
}

static void teardown(ring_bwd *B)
{
    if (B->cq)
        clFinish(B->cq);
    if (B->aq)
        clFinish(B->aq);
    for (int j = 0; j < 2; j++)
        if (B->out_n[j])
            MPI_Waitall(B->out_n[j], B->out_req[j], MPI_STATUSES_IGNORE);
    if (B->in_n)
        MPI_Waitall(B->in_n, B->in_req, MPI_STATUSES_IGNORE);
    if (B->have_x)
        ring_exchange_free(&B->x);
    for (int j = 0; j < 2; j++)
        if (B->rd[j])
            clReleaseEvent(B->rd[j]);
    if (B->added)
        clReleaseEvent(B->added);
    if (B->aq)
        clReleaseCommandQueue(B->aq);
    cl_mem mems[] = {B->q_c,     B->dq_part,   B->dq_acc,   B->dkv_part,
                     B->dkv_acc, B->dkv_acc_odd, B->dkv_in, B->nq > 1 ? B->lse_c[0] : NULL,
                     B->nq > 1 ? B->lse_c[1] : NULL, B->rows_scratch, B->rows_part, B->rows_acc};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (int j = 0; j < 3; j++)
        ring_staging_free(&B->h_mem[j], B->ctx);
    ring_key_lengths_free(&B->kl);
    ring_varlen_free(&B->packed);
}

/* The fp32 dK/dV sum of step s: two buffers, alternating. */
static cl_mem step_acc(const ring_bwd *B, int s)
{
    return s % 2 && B->dkv_acc_odd != NULL ? B->dkv_acc_odd : B->dkv_acc;
}

/* The compute of step s against the shard in x.dev[slot]: dQ into dq_acc, this step's dK/dV into
 * dkv_acc (zeroed first). Nothing here waits. */
static clflash_status compute_step(ring_bwd *B, int s)
{
    const ring_geometry *g = B->g;
    const ring_shard *kv = &g->shards[src_of(g, s)];
    const int slot = s % 2;
    const uint64_t kv_bytes = B->kv_row_elems * kv->rows * sizeof(float);
    clflash_layout kl, vl;
    ring_compact_layouts(g, kv->rows, &kl, &vl);
    const float zero = 0.0f;
    /* the shard is uploaded, and the sum of step s - 2 (in the same buffer) read to the host */
    const cl_event before[2] = {B->x.written[slot], B->rd[slot]};
    cl_int err = clEnqueueBarrierWithWaitList(B->cq, B->rd[slot] ? 2 : 1, before, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueFillBuffer(B->cq, step_acc(B, s), &zero, sizeof zero, 0, (size_t)kv_bytes, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return ring_fail(err, "starting step %d: %d", s, err);
    ring_timing_mark(B->timing, B->cq, RING_T_START, s);
    for (int i = 0; i < B->nq; i++) {
        ring_call c[2];
        const int nc = ring_calls_live(g, &B->kl, &B->qc[i], kv, c);
        for (int j = 0; j < nc; j++) {
            const clflash_attention_desc a = call_desc(B, &B->qc[i], &c[j], &kl, &vl, kv->rows);
            const clflash_status st = clflash_backward(B->ctx, &a, B->cq, B->q_c, B->x.dev[slot], B->x.dev[slot],
                                                       B->o, B->d_o, B->lse_c[i], B->dq_part, B->dkv_part,
                                                       B->dkv_part, 0, NULL, NULL);
            if (st != CLFLASH_SUCCESS)
                return ring_fail(st, "clflash_backward at step %d: %s", s, clflash_last_error_detail());
            clflash_status as = accumulate(B, g->dtype, B->dq_acc, B->dq_part, (uint64_t)g->batch * g->heads_q,
                                           B->d->seq_local, B->qc[i].row, B->qc[i].len);
            if (as == CLFLASH_SUCCESS) /* K and V as one [2 * batch * heads_kv][rows][head_dim] tensor */
                as = accumulate(B, g->dtype, step_acc(B, s), B->dkv_part, 2ull * g->batch * g->heads_kv, kv->rows,
                                c[j].k_row, c[j].k_len);
            if (as == CLFLASH_SUCCESS && B->rows_bcast)
                as = add_row_block(B, &c[j]);
            if (as != CLFLASH_SUCCESS)
                return as;
        }
    }
    ring_timing_mark(B->timing, B->cq, RING_T_GRAD_END, s);
    if (B->x.released[slot])
        clReleaseEvent(B->x.released[slot]);
    B->x.released[slot] = NULL;
    if ((err = clEnqueueMarkerWithWaitList(B->cq, 0, NULL, &B->x.released[slot])) != CL_SUCCESS)
        return ring_fail(err, "marking the end of step %d: %d", s, err);
    if ((err = clFlush(B->cq)) != CL_SUCCESS)
        return ring_fail(err, "clFlush at step %d: %d", s, err);
    return CLFLASH_SUCCESS;
}

static clflash_status wait_requests(const ring_bwd *B, MPI_Request *req, int *n, clflash_status st, const char *what,
                                    double *done_at)
{
    const int rc = ring_waitall(*n, req, B->timing, done_at);
    *n = 0;
    if (rc != MPI_SUCCESS && !st)
        st = ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Waitall on %s failed", what);
    return st;
}

/* Step s's accumulator on the device: (s > 0) waits for the incoming one (the shard's earlier
 * ranks' sum), uploads it on the accumulators' queue aq (beside step s's kernels, once the last
 * addition has read dkv_in) and adds it to the step's dK/dV on the compute queue (step_acc(s) +=
 * dkv_in: the owner's partial first, then the ranks after it around the ring); then enqueues on aq
 * the read of the sum into h_out[s % 2] (event rd[s % 2]) once the addition is done and the send
 * that last used that buffer is done, so that it runs beside step s + 1's kernels, which compute
 * into the other sum buffer. The host waits here only for MPI: the incoming bytes, and the send of
 * two steps ago. */
static clflash_status finish_accumulator(ring_bwd *B, int s, clflash_status st)
{
    const ring_geometry *g = B->g;
    const int slot = s % 2;
    const size_t bytes = (size_t)(B->kv_row_elems * g->shards[src_of(g, s)].rows * sizeof(float));
    if (s > 0) {
        double done_at = 0.0;
        st = wait_requests(B, B->in_req, &B->in_n, st, "an incoming dK/dV accumulator", &done_at);
        ring_timing_host(B->timing, RING_T_ACC_MPI, s, done_at - B->acc_posted);
        ring_shared_sync(&B->x.shm); /* (shared) the left rank's h_out is written */
    }
    st = wait_requests(B, B->out_req[slot], &B->out_n[slot], st, "an outgoing dK/dV accumulator", NULL);
    ring_shared_sync(&B->x.shm); /* (shared) rank r + 1 is done reading h_out[slot] */
    if (st)
        return st;
    cl_int err = CL_SUCCESS;
    if (s > 0) {
        cl_event up = NULL;
        err = clEnqueueWriteBuffer(B->aq, B->dkv_in, CL_FALSE, 0, bytes, incoming(B, s), B->added ? 1 : 0,
                                   B->added ? &B->added : NULL, &up);
        if (err == CL_SUCCESS)
            err = clFlush(B->aq);
        if (err == CL_SUCCESS)
            err = clEnqueueBarrierWithWaitList(B->cq, 1, &up, NULL);
        if (up)
            clReleaseEvent(up);
        if (err == CL_SUCCESS &&
            (st = accumulate(B, CLFLASH_F32, step_acc(B, s), B->dkv_in, 2ull * g->batch * g->heads_kv,
                             g->shards[src_of(g, s)].rows, 0, g->shards[src_of(g, s)].rows)) != CLFLASH_SUCCESS) {
            clFinish(B->aq); /* the upload reads rank r - 1's memory: done before "consumed" goes */
            clFinish(B->cq);
            return st;
        }
    }
    if (B->added)
        clReleaseEvent(B->added);
    B->added = NULL;
    if (err == CL_SUCCESS)
        err = clEnqueueMarkerWithWaitList(B->cq, 0, NULL, &B->added);
    if (err == CL_SUCCESS)
        err = clFlush(B->cq);
    if (B->rd[slot])
        clReleaseEvent(B->rd[slot]);
    B->rd[slot] = NULL;
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(B->aq, step_acc(B, s), CL_FALSE, 0, bytes, B->h_out[slot], 1, &B->added,
                                  &B->rd[slot]);
    if (err == CL_SUCCESS)
        err = clFlush(B->aq);
    if (err != CL_SUCCESS) { /* as above: nothing of this step may still read rank r - 1's memory */
        clFinish(B->aq);
        clFinish(B->cq);
    }
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "moving the dK/dV accumulator of step %d: %d", s, err);
}

/* The window's version of sending step s's accumulator, once its read into h_out[s % 2] is done
 * (the caller waited): zero-byte messages only. To rank r + 1 "ready" (it uploads h_out[s % 2]
 * from this rank's segment); to rank r - 1 "consumed" for the accumulator of step s - 1 it gave
 * (uploaded before that read, so done). Posts the receives of rank r + 1's "consumed" for this
 * one (waited for before h_out[s % 2] is written again, two steps on; none for the last, which the
 * window's closing barrier covers) and of rank r - 1's next "ready". */
static clflash_status signal_accumulator(ring_bwd *B, int s, clflash_status st)
{
    const int slot = s % 2;
    static char none; /* the zero-byte messages' buffer */
    ring_shared_sync(&B->x.shm);
    int rc = MPI_SUCCESS;
    if (s > 0)
        rc |= MPI_Isend(&none, 0, MPI_BYTE, B->x.left, ACC_TAG0 + 1, B->x.comm, &B->in_req[B->in_n++]);
    rc |= MPI_Isend(&none, 0, MPI_BYTE, B->x.right, ACC_TAG0, B->x.comm, &B->out_req[slot][B->out_n[slot]++]);
    if (s + 1 < B->g->size)
        rc |= MPI_Irecv(&none, 0, MPI_BYTE, B->x.right, ACC_TAG0 + 1, B->x.comm, &B->out_req[slot][B->out_n[slot]++]);
    if (B->timing)
        B->acc_posted = MPI_Wtime();
    rc |= MPI_Irecv(&none, 0, MPI_BYTE, B->x.left, ACC_TAG0, B->x.comm, &B->in_req[B->in_n++]);
    if (rc != MPI_SUCCESS && !st)
        st = ring_fail(CLFLASH_RING_ERROR_MPI, "signalling a dK/dV accumulator at step %d failed", s);
    return st;
}

/* Sends step s's accumulator (h_out[s % 2]) on to rank r + 1 once its read is done, and posts the
 * receive of the next one from rank r - 1 (step s + 1's, or after the last step this rank's own
 * complete dK/dV) into h_in, whose last upload the read came after. A rank that has failed still
 * sends (its values are then meaningless, and every rank returns an error) and receives. */
static clflash_status send_accumulator(ring_bwd *B, int s, clflash_status st)
{
    const ring_geometry *g = B->g;
    const int slot = s % 2;
    if (B->rd[slot]) {
        const cl_int err = clWaitForEvents(1, &B->rd[slot]);
        if (err != CL_SUCCESS && !st)
            st = ring_fail(err, "step %d's kernels or its dK/dV read: %d", s, err);
    }
    if (B->shared)
        return signal_accumulator(B, s, st);
    const uint64_t n = B->kv_row_elems * g->shards[src_of(g, s)].rows;
    const int next = s + 1 < g->size ? src_of(g, s + 1) : g->rank;
    const uint64_t in_bytes = B->kv_row_elems * g->shards[next].rows * sizeof(float);
    clflash_status ps = ring_post_bytes(B->x.comm, B->h_out[slot], n * sizeof(float), B->x.right, ACC_TAG0, 1,
                                        B->out_req[slot], &B->out_n[slot]);
    if (ps && !st)
        st = ps;
    if (B->timing)
        B->acc_posted = MPI_Wtime();
    ps = ring_post_bytes(B->x.comm, B->h_in, in_bytes, B->x.left, ACC_TAG0, 0, B->in_req, &B->in_n);
    if (ps && !st)
        st = ps;
    return st;
}

/* This rank's own K/V shard, compacted on the device into dev[0] (the layout every step's calls
 * take, so that dK/dV come out compact too), in order on the compute queue; written[0] marks the
 * end, which step 0 and the read to the host wait for. */
static clflash_status own_shard_to_device(ring_bwd *B, cl_mem k, cl_mem v, uint32_t rows)
{
    const ring_geometry *g = B->g;
    clflash_status st = move(B, 0, k, &B->d->k, g->heads_kv, rows, B->x.dev[0], 0);
    if (st == CLFLASH_SUCCESS)
        st = move(B, 0, v, &B->d->v, g->heads_kv, rows, B->x.dev[0], B->x.rows_elems * rows);
    if (st != CLFLASH_SUCCESS)
        return st;
    if (B->x.written[0])
        clReleaseEvent(B->x.written[0]);
    B->x.written[0] = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(B->cq, 0, NULL, &B->x.written[0]);
    if (err == CL_SUCCESS)
        err = clFlush(B->cq);
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "compacting the own K/V shard: %d", err);
}

/* With a bias gradient not broadcast over rows: zeros into the blocks of this rank's rows of it that
 * no call writes (a query chunk and a key chunk whose every pair the causal or window rule hides),
 * so that every element the bias layout addresses is written. */
static clflash_status zero_unmet(ring_bwd *B)
{
    const ring_geometry *g = B->g;
    for (int i = 0; i < B->nq; i++)
        for (int r = 0; r < g->size; r++) {
            const ring_shard *kv = &g->shards[r];
            ring_call c[2];
            const int nc = ring_calls_live(g, &B->kl, &B->qc[i], kv, c); /* one per key chunk met: a bias is set */
            for (int k = 0; k < kv->nchunks; k++) {
                int met = 0;
                for (int j = 0; j < nc; j++)
                    met |= c[j].k_pos == kv->chunk[k].pos;
                if (met)
                    continue;
                clflash_layout l = g->bias_layout;
                l.offset += (uint64_t)B->qc[i].row * l.seq_stride + kv->chunk[k].pos;
                const clflash_status st = clflash_grad_zero(B->ctx, B->cq, g->bias_grad, &l, B->bias_nb, B->bias_nh,
                                                            B->qc[i].len, kv->chunk[k].len);
                if (st != CLFLASH_SUCCESS)
                    return ring_fail(st, "zeroing the bias gradient of unmet pairs: %s", clflash_last_error_detail());
            }
        }
    return CLFLASH_SUCCESS;
}

/* The P steps and the final writes. A rank that fails keeps passing shards and accumulators.
 * Step s's accumulator is sent during step s + 1, after that step's kernels are enqueued, so the
 * device has work while the host waits for the read. */
static clflash_status run_ring(ring_bwd *B, cl_mem k, cl_mem v, cl_mem dq, cl_mem dk, cl_mem dv)
{
    const ring_geometry *g = B->g;
    const int P = g->size;
    const uint32_t own_rows = g->shards[g->rank].rows;
    /* the own shard, compact in dev[0] (step 0 computes on it) and read from there into host[0] on
     * the transfer queue while step 0 computes; sent once step 0 is enqueued */
    clflash_status st = own_shard_to_device(B, k, v, own_rows);
    if (st == CLFLASH_SUCCESS && P > 1)
        st = ring_exchange_read_own_start(&B->x, own_rows);
    for (int s = 0; s < P; s++) {
        const int slot = s % 2, more = s + 1 < P;
        const uint32_t rows = g->shards[src_of(g, s)].rows, next_rows = more ? g->shards[src_of(g, s + 1)].rows : 0;
        double posted = B->timing ? MPI_Wtime() : 0.0;
        if (more && s > 0) {
            const clflash_status ps = ring_exchange_post(&B->x, slot, rows, next_rows);
            if (ps && !st)
                st = ps;
        }
        if (st == CLFLASH_SUCCESS)
            st = compute_step(B, s);
        if (more && s == 0) { /* the own shard's read ran beside step 0's kernels */
            const clflash_status fs = ring_exchange_pack_own_finish(&B->x);
            if (fs && !st)
                st = fs;
            if (B->timing)
                posted = MPI_Wtime();
            const clflash_status ps = ring_exchange_post(&B->x, slot, rows, next_rows);
            if (ps && !st)
                st = ps;
        }
        if (P > 1) {
            if (s > 0)
                st = send_accumulator(B, s - 1, st);
            st = finish_accumulator(B, s, st);
        }
        ring_timing_mark(B->timing, B->cq, RING_T_STEP_END, s);
        if (more) {
            const clflash_status ws = ring_exchange_wait(&B->x);
            if (ws && !st)
                st = ws;
            ring_timing_host(B->timing, RING_T_KV_MPI, s, B->x.done_at - posted);
        }
        if (more && st == CLFLASH_SUCCESS)
            st = ring_exchange_upload(&B->x, 1 - slot, src_of(g, s + 1), next_rows);
        if (more && st == CLFLASH_SUCCESS)
            ring_timing_upload(B->timing, s, B->x.written[1 - slot]);
    }
    if (P > 1) { /* the last step's accumulator goes out; the own shard's, complete, arrives from rank r - 1 */
        st = send_accumulator(B, P - 1, st);
        st = wait_requests(B, B->in_req, &B->in_n, st, "the own dK/dV", NULL);
        ring_shared_sync(&B->x.shm);
        if (st == CLFLASH_SUCCESS) {
            const cl_int err = clEnqueueWriteBuffer(B->cq, B->dkv_acc, CL_FALSE, 0,
                                                    (size_t)(B->kv_row_elems * own_rows * sizeof(float)),
                                                    incoming(B, P), 0, NULL, NULL);
            if (err != CL_SUCCESS)
                st = ring_fail(err, "writing the own dK/dV to the device: %d", err);
        }
    }
    if (st == CLFLASH_SUCCESS) {
        const uint64_t v_off = B->kv_row_elems / 2 * own_rows;
        st = move(B, 1, dq, &B->d->q, g->heads_q, B->d->seq_local, B->dq_acc, 0);
        if (st == CLFLASH_SUCCESS)
            st = move(B, 1, dk, &B->d->k, g->heads_kv, own_rows, B->dkv_acc, 0);
        if (st == CLFLASH_SUCCESS)
            st = move(B, 1, dv, &B->d->v, g->heads_kv, own_rows, B->dkv_acc, v_off);
        if (st == CLFLASH_SUCCESS && g->bias_grad && !B->rows_bcast)
            st = zero_unmet(B);
    }
    float *row = NULL;
    const size_t row_elems = (size_t)B->bias_nb * B->bias_nh * (size_t)g->seq_total;
    if (st == CLFLASH_SUCCESS && B->rows_bcast) {
        row = malloc(row_elems * sizeof(float));
        B->rows_host = malloc(row_elems * sizeof(double));
        if (row == NULL || B->rows_host == NULL)
            st = ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for the bias gradient's row");
        cl_int err = CL_SUCCESS;
        if (st == CLFLASH_SUCCESS &&
            (err = clEnqueueReadBuffer(B->cq, B->rows_acc, CL_FALSE, 0, row_elems * sizeof(float), row, 0, NULL,
                                       NULL)) != CL_SUCCESS)
            st = ring_fail(err, "reading the bias gradient's row: %d", err);
    }
    const cl_int fin = clFinish(B->cq);
    if (fin != CL_SUCCESS && st == CLFLASH_SUCCESS)
        st = ring_fail(fin, "clFinish after the ring: %d", fin);
    if (st == CLFLASH_SUCCESS && row != NULL)
        for (size_t i = 0; i < row_elems; i++)
            B->rows_host[i] = row[i];
    free(row);
    return st;
}

/* The ranks' rows of a bias gradient broadcast over rows (rows_host, this rank's) summed in rank
 * order: rank 0 sends its row to rank 1, each rank adds its own to what it receives and sends the
 * sum on, and the last rank broadcasts the total, which every rank writes into its bias_grad (one
 * write per batch entry and head of the bias). Collective; called on every rank once the ring has
 * succeeded on every rank. */
static clflash_status reduce_rows(ring_bwd *B, MPI_Comm comm)
{
    const ring_geometry *g = B->g;
    const int n = (int)((uint64_t)B->bias_nb * B->bias_nh * g->seq_total); /* setup checked it fits */
    double *in = malloc((size_t)n * sizeof(double));
    float *out = malloc((size_t)n * sizeof(float));
    /* every rank must take part in the messages below: agree first that every rank has the memory */
    clflash_status st = ring_agree_status(comm, in && out ? CLFLASH_SUCCESS
                                                          : ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY,
                                                                      "no host memory for the bias gradient's row"),
                                          "the bias gradient's row");
    int rc = MPI_SUCCESS;
    if (st == CLFLASH_SUCCESS) {
        if (g->rank > 0) {
            rc |= MPI_Recv(in, n, MPI_DOUBLE, g->rank - 1, ACC_TAG0 + 2, comm, MPI_STATUS_IGNORE);
            for (int i = 0; i < n; i++)
                B->rows_host[i] = in[i] + B->rows_host[i];
        }
        if (g->rank + 1 < g->size)
            rc |= MPI_Send(B->rows_host, n, MPI_DOUBLE, g->rank + 1, ACC_TAG0 + 2, comm);
        rc |= MPI_Bcast(B->rows_host, n, MPI_DOUBLE, g->size - 1, comm);
        if (rc != MPI_SUCCESS)
            st = ring_fail(CLFLASH_RING_ERROR_MPI, "summing the bias gradient's row over the ranks failed");
    }
    cl_int err = CL_SUCCESS;
    if (st == CLFLASH_SUCCESS) {
        for (int i = 0; i < n; i++)
            out[i] = (float)B->rows_host[i];
        const clflash_layout *l = &g->bias_layout;
        for (uint32_t b = 0; b < B->bias_nb && err == CL_SUCCESS; b++)
            for (uint32_t h = 0; h < B->bias_nh && err == CL_SUCCESS; h++)
                err = clEnqueueWriteBuffer(B->cq, g->bias_grad, CL_FALSE,
                                           (size_t)((l->offset + b * l->batch_stride + h * l->head_stride) *
                                                    sizeof(float)),
                                           (size_t)g->seq_total * sizeof(float),
                                           out + ((size_t)b * B->bias_nh + h) * g->seq_total, 0, NULL, NULL);
        const cl_int fin = clFinish(B->cq);
        if (err == CL_SUCCESS)
            err = fin;
        if (err != CL_SUCCESS)
            st = ring_fail(err, "writing the bias gradient's row: %d", err);
    }
    free(in);
    free(out);
    return st;
}

/* This rank's checks of the backward's own arguments (those shared with the forward are
 * ring_check_local's). */
static clflash_status check_backward_local(clflash_context *ctx, const clflash_ring_desc *d, cl_mem q, cl_mem k,
                                           cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq, cl_mem dk, cl_mem dv)
{
    clflash_status st = ring_check_local(ctx, d, q, k, v, o, lse);
    if (st)
        return st;
    if (d->block_table)
        return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "the ring's backward takes no paged K/V (block_table): "
                         "clflash_backward has none, and dK/dV are written in the layouts of k and v");
    if (lse == NULL)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse must not be NULL (the forward's lse)");
    const uint32_t hkv = d->heads_kv ? d->heads_kv : d->heads_q;
    if ((st = ring_check_tensor(ctx, d_o, &d->o, d->batch, d->heads_q, d->seq_local, d->head_dim, d->dtype, "d_o")) ||
        (st = ring_check_tensor(ctx, dq, &d->q, d->batch, d->heads_q, d->seq_local, d->head_dim, d->dtype, "dq")) ||
        (st = ring_check_tensor(ctx, dk, &d->k, d->batch, hkv, d->seq_local, d->head_dim, d->dtype, "dk")) ||
        (st = ring_check_tensor(ctx, dv, &d->v, d->batch, hkv, d->seq_local, d->head_dim, d->dtype, "dv")))
        return st;
    const cl_mem in[] = {q, k, v, o, d_o, lse, d->alibi_slopes, d->key_lengths, d->bias, d->cu_seqlens},
                 out[] = {dq, dk, dv, d->bias_grad};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 10; j++)
            if (out[i] == in[j])
                return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "dq, dk and dv must not be input buffers");
        for (int j = 0; j < i; j++)
            if (out[i] == out[j])
                return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "dq, dk and dv must be three different buffers");
    }
    if (d->bias_grad == NULL)
        return CLFLASH_SUCCESS;
    /* its size needs seq_total: checked after the agreement, with the bias's (ring_geometry.c) */
    if (d->bias == NULL)
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_grad is set but bias is NULL");
    if ((st = ring_check_buffer(ctx, d->bias_grad, 0, "bias_grad")))
        return st;
    for (int j = 0; j < 10; j++)
        if (d->bias_grad == in[j])
            return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_grad must not be an input buffer");
    for (int j = 0; j < 3; j++)
        if (d->bias_grad == out[j])
            return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_grad must not be the same buffer as dq, dk or dv");
    return CLFLASH_SUCCESS;
}

clflash_status clflash_ring_backward(clflash_context *ctx, MPI_Comm comm, const clflash_ring_desc *d, cl_mem q,
                                     cl_mem k, cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq, cl_mem dk,
                                     cl_mem dv)
{
    ring_clear_detail();
    clflash_status st = ring_mpi_ready(comm);
    if (st != CLFLASH_SUCCESS)
        return st;
    const double t_entry = MPI_Wtime();
    clflash_status local = check_backward_local(ctx, d, q, k, v, o, d_o, lse, dq, dk, dv);
    int32_t *cu = NULL; /* packed sequences' lengths, read once, agreed after the join */
    if (local == CLFLASH_SUCCESS)
        local = ring_varlen_read(ctx, d, &cu);
    MPI_Comm ring_comm;
    ring_geometry g;
    if ((st = ring_join(comm, d, local, 1, &ring_comm, &g)) != CLFLASH_SUCCESS) {
        free(cu);
        return st;
    }
    if ((st = ring_varlen_agree(ring_comm, &g, cu)) != CLFLASH_SUCCESS) {
        ring_geometry_free(&g);
        MPI_Comm_free(&ring_comm);
        return st;
    }
    ring_bwd B;
    memset(&B, 0, sizeof B);
    B.ctx = ctx;
    B.cq = clflash_context_queue(ctx);
    B.d = d;
    B.g = &g;
    B.o = o;
    B.d_o = d_o;
    B.lse = lse;
    B.timing = ring_timing_begin(ctx, g.size, t_entry, &B.cq);
    st = ring_agree_status(ring_comm, setup(&B, ring_comm, q), "setup");
    if (st == CLFLASH_SUCCESS && g.size > 1)
        st = ring_agree_status(ring_comm, ring_exchange_connect(&B.x, comm, 2 * B.acc_slot), "connecting the ring");
    if (st == CLFLASH_SUCCESS && g.size > 1)
        st = ring_agree_status(ring_comm, accumulator_memory(&B), "the dK/dV accumulators' host memory");
    if (st == CLFLASH_SUCCESS && g.size > 1)
        ring_timing_transport(B.timing, ring_exchange_transport(&B.x), B.x.shm.pinned);
    if (st == CLFLASH_SUCCESS)
        ring_timing_calls(B.timing, &g, &B.kl, g.shards[g.rank].chunk, g.shards[g.rank].nchunks);
    if (st == CLFLASH_SUCCESS) {
        const clflash_status mine = run_ring(&B, k, v, dq, dk, dv);
        teardown(&B);
        st = ring_agree_status(ring_comm, mine, "ring");
        if (st == CLFLASH_SUCCESS && B.rows_bcast)
            st = ring_agree_status(ring_comm, reduce_rows(&B, ring_comm), "the bias gradient's row");
    } else {
        teardown(&B);
    }
    free(B.rows_host);
    ring_timing_end(B.timing, st);
    ring_geometry_free(&g);
    MPI_Comm_free(&ring_comm);
    return st;
}
