/*
 * ring_forward.c - clflash_ring_forward: the ring's P steps for one rank. At step s the rank holds
 * the K/V shard of rank (r - s) mod P; each of its query chunks that sees some of those keys runs
 * clflash_forward with lse (ring_calls: one call, or with a window, ALiBi, key lengths or a bias one per
 * key chunk), and each partial (O, lse) is merged into the chunk's fp32 running
 * result with clflash_merge_states; the chunk's last merge writes the caller's O and lse. Meanwhile
 * ring_exchange.c moves the next shard. A paged own shard (block_table) is first copied into a
 * compact shard of the call's own (ring_paged.c), which then stands for the caller's K and V.
 *
 * Why the running result is fp32: clflash_forward writes O in the storage type, so with F16 or BF16
 * each partial is rounded once; converting it to fp32 (a one-part merge, which multiplies by
 * exp(0) = 1 and divides by 1, so it is exact) before the two-part merge keeps the running result
 * from being rounded again at every step.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

/* One query chunk of this rank and its running result. */
typedef struct {
    ring_chunk q;
    int calls, done;     /* calls over the whole ring, calls enqueued so far */
    int cur;             /* which acc set holds the running result (slot 0) */
    cl_mem acc_o[2];     /* fp32, two parts [batch][heads_q][len][head_dim] back to back */
    cl_mem acc_l[2];     /* float, two parts [batch][heads_q][len] */
    uint64_t part_elems; /* batch * heads_q * len * head_dim */
    uint64_t part_rows;  /* batch * heads_q * len */
} ring_query;

typedef struct {
    clflash_context *ctx;
    cl_command_queue cq;
    const clflash_ring_desc *d;
    const ring_geometry *g;
    cl_mem q, o, lse;
    cl_mem k, v;         /* the own shard's K and V: the caller's, or own_kv with a block table */
    clflash_layout kl, vl; /* their layouts */
    int32_t *table;      /* the block table read to the host (NULL without one) */
    cl_mem own_kv;       /* with a block table: the own shard, compact (K, then V) */
    cl_mem pool_k, pool_v; /* the caller's k and v (page pools with a block table) */
    cl_mem tmp_o;        /* a partial O in the storage type (not with F32) */
    cl_mem tmp_l;        /* a partial lse */
    int nq;
    ring_query rq[2];
    ring_exchange x;
    int have_x;
    ring_key_lengths klen; /* per key chunk, with key lengths */
    ring_varlen packed;  /* per pair, with packed sequences */
    ring_timing *timing; /* NULL unless a clflash_ring_stats is attached (ring_stats.h) */
} ring_run;

static int src_of(const ring_geometry *g, int s)
{
    return (g->rank - s % g->size + g->size) % g->size;
}

static clflash_attention_desc call_desc(const ring_run *R, const ring_query *rq, const ring_call *c,
                                        const clflash_layout *kl, const clflash_layout *vl, uint32_t kv_rows)
{
    const ring_geometry *g = R->g;
    clflash_attention_desc a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.batch = g->batch;
    a.heads_q = g->heads_q;
    a.heads_kv = g->heads_kv;
    a.seq_q = rq->q.len;
    a.seq_k = c->k_len;
    a.head_dim = g->head_dim;
    a.dtype = g->dtype;
    a.scale = g->scale;
    a.softcap = g->softcap;
    ring_call_rules(&a, g, &rq->q, c, ring_key_lengths_at(&R->klen, c->k_pos));
    a.block = R->d->block;
    a.q = ring_layout_rows(&R->d->q, g->heads_q, R->d->seq_local, g->head_dim, rq->q.row);
    a.k = ring_layout_rows(kl, g->heads_kv, kv_rows, g->head_dim, c->k_row);
    a.v = ring_layout_rows(vl, g->heads_kv, kv_rows, g->head_dim, c->k_row);
    a.o = ring_layout_rows(&R->d->o, g->heads_q, R->d->seq_local, g->head_dim, rq->q.row);
    ring_varlen_rules(&a, &R->packed, &rq->q, c);
    return a;
}

static clflash_merge_desc merge_desc(const ring_run *R, const ring_query *rq, uint32_t parts, clflash_dtype part,
                                     clflash_dtype out)
{
    clflash_merge_desc m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    m.parts = parts;
    m.batch = R->g->batch;
    m.heads = R->g->heads_q;
    m.seq = rq->q.len;
    m.head_dim = R->g->head_dim;
    m.part_dtype = part;
    m.dtype = out;
    return m;
}

/* Where a chunk's lse goes at its end: the caller's lse directly when the shard is one chunk, else
 * tmp_l, whose rows copy_lse_rows then puts in place. */
static cl_mem final_lse(const ring_run *R)
{
    return R->lse == NULL ? NULL : R->nq == 1 ? R->lse : R->tmp_l;
}

static clflash_status copy_lse_rows(const ring_run *R, const ring_query *rq)
{
    if (R->lse == NULL || R->nq == 1)
        return CLFLASH_SUCCESS;
    const size_t len = (size_t)rq->q.len * sizeof(float);
    const size_t src[3] = {0, 0, 0}, dst[3] = {(size_t)rq->q.row * sizeof(float), 0, 0},
                 region[3] = {len, (size_t)R->g->batch * R->g->heads_q, 1};
    const cl_int err = clEnqueueCopyBufferRect(R->cq, R->tmp_l, R->lse, src, dst, region, len, 0,
                                               (size_t)R->d->seq_local * sizeof(float), 0, 0, NULL, NULL);
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "copying lse rows into place: %d", err);
}

#define CL_TRY(what, call)                                                                                     \
    do {                                                                                                       \
        const clflash_status st_ = (call);                                                                     \
        if (st_ != CLFLASH_SUCCESS)                                                                            \
            return ring_fail(st_, "%s at step %d: %s", what, step, clflash_last_error_detail());              \
    } while (0)

/* Enqueues one call of chunk rq against a K/V shard and folds it into the chunk's result. */
static clflash_status run_call(ring_run *R, ring_query *rq, const ring_call *c, cl_mem k, const clflash_layout *kl,
                               cl_mem v, const clflash_layout *vl, uint32_t kv_rows, int step)
{
    clflash_attention_desc a = call_desc(R, rq, c, kl, vl, kv_rows);
    const clflash_dtype t = R->g->dtype;
    const int first = rq->done == 0, last = rq->done == rq->calls - 1;
    rq->done++;
    if (rq->calls == 1) { /* the only call: straight into the caller's O */
        CL_TRY("clflash_forward", clflash_forward(R->ctx, &a, R->cq, R->q, k, v, R->o, final_lse(R), 0, NULL, NULL));
        return copy_lse_rows(R, rq);
    }
    cl_mem ao = rq->acc_o[rq->cur], al = rq->acc_l[rq->cur];
    const uint64_t slot = first ? 0 : 1;
    cl_mem part_lse = first ? al : R->tmp_l; /* slot 0's lse is written in place; slot 1's is copied */
    if (t == CLFLASH_F32) {
        a.o = ring_varlen_layout(&a, &(clflash_layout){slot * rq->part_elems, 0, 0, 0}, R->g->heads_q, rq->q.len,
                                 R->g->head_dim);
        CL_TRY("clflash_forward", clflash_forward(R->ctx, &a, R->cq, R->q, k, v, ao, part_lse, 0, NULL, NULL));
    } else {
        a.o = ring_varlen_layout(&a, &(clflash_layout){0, 0, 0, 0}, R->g->heads_q, rq->q.len, R->g->head_dim);
        CL_TRY("clflash_forward", clflash_forward(R->ctx, &a, R->cq, R->q, k, v, R->tmp_o, part_lse, 0, NULL, NULL));
        clflash_merge_desc m = merge_desc(R, rq, 1, t, CLFLASH_F32);
        m.o = (clflash_layout){slot * rq->part_elems, 0, 0, 0};
        CL_TRY("clflash_merge_states (to fp32)",
               clflash_merge_states(R->ctx, &m, R->cq, R->tmp_o, part_lse, ao, NULL, 0, NULL, NULL));
    }
    if (first)
        return CLFLASH_SUCCESS;
    const cl_int err = clEnqueueCopyBuffer(R->cq, R->tmp_l, al, 0, (size_t)(rq->part_rows * sizeof(float)),
                                           (size_t)(rq->part_rows * sizeof(float)), 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return ring_fail(err, "copying a partial lse at step %d: %d", step, err);
    if (last) {
        clflash_merge_desc m = merge_desc(R, rq, 2, CLFLASH_F32, t);
        m.o = ring_layout_rows(&R->d->o, R->g->heads_q, R->d->seq_local, R->g->head_dim, rq->q.row);
        CL_TRY("clflash_merge_states (the result)",
               clflash_merge_states(R->ctx, &m, R->cq, ao, al, R->o, final_lse(R), 0, NULL, NULL));
        return copy_lse_rows(R, rq);
    }
    clflash_merge_desc m = merge_desc(R, rq, 2, CLFLASH_F32, CLFLASH_F32);
    CL_TRY("clflash_merge_states", clflash_merge_states(R->ctx, &m, R->cq, ao, al, rq->acc_o[1 - rq->cur],
                                                         rq->acc_l[1 - rq->cur], 0, NULL, NULL));
    rq->cur = 1 - rq->cur;
    return CLFLASH_SUCCESS;
}

static cl_mem new_buffer(ring_run *R, uint64_t bytes, clflash_status *st)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(clflash_context_cl(R->ctx), CL_MEM_READ_WRITE, (size_t)bytes, NULL, &err);
    if (err != CL_SUCCESS && *st == CLFLASH_SUCCESS)
        *st = ring_fail(err, "clCreateBuffer of %llu bytes for the ring: %d", (unsigned long long)bytes, err);
    return err == CL_SUCCESS ? m : NULL;
}

/* Plans this rank's calls (the planner checks the layouts and builds the kernels) and allocates. */
static clflash_status setup(ring_run *R, MPI_Comm comm)
{
    const ring_geometry *g = R->g;
    const ring_shard *own = &g->shards[g->rank];
    clflash_status st = CLFLASH_SUCCESS;
    uint64_t max_len = 0;
    R->nq = own->nchunks;
    if (R->table) { /* the paged own shard's compact copy: every step reads it as an unpaged shard */
        const size_t es = clflash_dtype_size(g->dtype);
        const uint64_t half = (uint64_t)g->batch * g->heads_kv * own->rows * g->head_dim;
        R->own_kv = new_buffer(R, 2 * half * es, &st);
        R->k = R->v = R->own_kv;
        ring_compact_layouts(g, own->rows, &R->kl, &R->vl);
        if (st != CLFLASH_SUCCESS)
            return st;
    }
    if ((st = ring_key_lengths_init(&R->klen, R->ctx, R->cq, g, own->chunk, own->nchunks)) != CLFLASH_SUCCESS ||
        (st = ring_varlen_init(&R->packed, R->ctx, g, own->chunk, own->nchunks)) != CLFLASH_SUCCESS)
        return st;
    for (int i = 0; i < R->nq; i++) {
        ring_query *rq = &R->rq[i];
        rq->q = own->chunk[i];
        rq->part_rows = (uint64_t)g->batch * g->heads_q * rq->q.len;
        rq->part_elems = rq->part_rows * g->head_dim;
        if (rq->q.len > max_len)
            max_len = rq->q.len;
        ring_call c[2];
        for (int s = 0; s < g->size; s++)
            rq->calls += ring_calls_live(g, &R->klen, &rq->q, &g->shards[src_of(g, s)], c);
        /* the own shard's calls, as they will run at step 0 */
        const int n = ring_calls_live(g, &R->klen, &rq->q, own, c);
        for (int j = 0; j < n; j++) {
            clflash_attention_desc a = call_desc(R, rq, &c[j], &R->kl, &R->vl, own->rows);
            clflash_plan p;
            memset(&p, 0, sizeof p);
            p.struct_size = sizeof p;
            const clflash_status ps = clflash_plan_attention(R->ctx, &a, &p);
            if (ps != CLFLASH_SUCCESS)
                return ring_fail(ps, "clflash_plan_attention of query chunk %d: %s", i, clflash_last_error_detail());
        }
    }
    const size_t e = clflash_dtype_size(g->dtype);
    const uint64_t rows_max = (uint64_t)g->batch * g->heads_q * max_len;
    R->tmp_l = new_buffer(R, rows_max * sizeof(float), &st);
    if (g->dtype != CLFLASH_F32)
        R->tmp_o = new_buffer(R, rows_max * g->head_dim * e, &st);
    for (int i = 0; i < R->nq && st == CLFLASH_SUCCESS; i++)
        if (R->rq[i].calls >= 2)
            for (int j = 0; j < 2; j++) {
                R->rq[i].acc_o[j] = new_buffer(R, 2 * R->rq[i].part_elems * sizeof(float), &st);
                R->rq[i].acc_l[j] = new_buffer(R, 2 * R->rq[i].part_rows * sizeof(float), &st);
            }
    if (st == CLFLASH_SUCCESS && g->size > 1) {
        R->have_x = 1;
        st = ring_exchange_init(&R->x, R->ctx, comm, g);
    }
    return st;
}

static void teardown(ring_run *R)
{
    if (R->cq)
        clFinish(R->cq);
    if (R->have_x)
        ring_exchange_free(&R->x);
    for (int i = 0; i < R->nq; i++)
        for (int j = 0; j < 2; j++) {
            if (R->rq[i].acc_o[j])
                clReleaseMemObject(R->rq[i].acc_o[j]);
            if (R->rq[i].acc_l[j])
                clReleaseMemObject(R->rq[i].acc_l[j]);
        }
    if (R->tmp_o)
        clReleaseMemObject(R->tmp_o);
    if (R->tmp_l)
        clReleaseMemObject(R->tmp_l);
    if (R->own_kv)
        clReleaseMemObject(R->own_kv);
    free(R->table);
    ring_key_lengths_free(&R->klen);
    ring_varlen_free(&R->packed);
}

/* The compute of step s: every query chunk against the shard this rank holds now. */
static clflash_status compute_step(ring_run *R, int s, cl_mem k, const clflash_layout *kl, cl_mem v,
                                   const clflash_layout *vl)
{
    const ring_geometry *g = R->g;
    const ring_shard *kv = &g->shards[src_of(g, s)];
    const int slot = s % 2;
    cl_int err;
    if (s > 0 && (err = clEnqueueBarrierWithWaitList(R->cq, 1, &R->x.written[slot], NULL)) != CL_SUCCESS)
        return ring_fail(err, "waiting for the upload of step %d: %d", s, err);
    ring_timing_mark(R->timing, R->cq, RING_T_START, s);
    for (int i = 0; i < R->nq; i++) {
        ring_call c[2];
        const int n = ring_calls_live(g, &R->klen, &R->rq[i].q, kv, c);
        for (int j = 0; j < n; j++) {
            const clflash_status st = run_call(R, &R->rq[i], &c[j], k, kl, v, vl, kv->rows, s);
            if (st)
                return st;
        }
    }
    ring_timing_mark(R->timing, R->cq, RING_T_GRAD_END, s);
    if (s > 0) { /* the device buffer of this step may be overwritten once these kernels are done */
        if (R->x.released[slot])
            clReleaseEvent(R->x.released[slot]);
        R->x.released[slot] = NULL;
        if ((err = clEnqueueMarkerWithWaitList(R->cq, 0, NULL, &R->x.released[slot])) != CL_SUCCESS)
            return ring_fail(err, "marking the end of step %d: %d", s, err);
    }
    if ((err = clFlush(R->cq)) != CL_SUCCESS)
        return ring_fail(err, "clFlush at step %d: %d", s, err);
    return CLFLASH_SUCCESS;
}

/* The P steps. A rank that fails keeps exchanging shards (without computing) so that none blocks. */
static clflash_status run_ring(ring_run *R)
{
    const ring_geometry *g = R->g;
    const int P = g->size;
    cl_mem k = R->k, v = R->v;
    clflash_status st = CLFLASH_SUCCESS;
    if (R->table) { /* the pages into the compact copy; finished before the transfer queue reads it */
        st = ring_paged_gather(R->cq, R->d, R->table, R->pool_k, R->pool_v, R->own_kv);
        const cl_int err = clFinish(R->cq);
        if (err != CL_SUCCESS && st == CLFLASH_SUCCESS)
            st = ring_fail(err, "copying the own shard's pages: %d", err);
    }
    double posted = 0.0; /* MPI_Wtime when this step's exchange was posted (timing only) */
    for (int s = 0; s < P; s++) {
        const int slot = s % 2;
        const uint32_t rows = g->shards[src_of(g, s)].rows;
        const int more = s + 1 < P;
        const uint32_t next_rows = more ? g->shards[src_of(g, s + 1)].rows : 0;
        if (R->timing)
            posted = MPI_Wtime();
        if (s == 0 && more) { /* the own shard's read goes first, so that a device that runs one
                                 queue at a time does not put it behind step 0's kernels */
            const clflash_status ps = ring_exchange_pack_own_start(&R->x, g, k, &R->kl, v, &R->vl, rows);
            if (ps && !st)
                st = ps;
        }
        if (s > 0 && more) {
            const clflash_status ps = ring_exchange_post(&R->x, slot, rows, next_rows);
            if (ps && !st)
                st = ps;
        }
        if (st == CLFLASH_SUCCESS) {
            clflash_layout kl = R->kl, vl = R->vl;
            if (s > 0)
                ring_compact_layouts(g, rows, &kl, &vl);
            st = compute_step(R, s, s > 0 ? R->x.dev[slot] : k, &kl, s > 0 ? R->x.dev[slot] : v, &vl);
        }
        if (s == 0 && more) { /* the own shard: read while step 0 computes, then sent */
            const clflash_status ps = ring_exchange_pack_own_finish(&R->x);
            if (ps && !st)
                st = ps;
            if (R->timing)
                posted = MPI_Wtime();
            const clflash_status qs = ring_exchange_post(&R->x, slot, rows, next_rows);
            if (qs && !st)
                st = qs;
        }
        if (more) {
            const clflash_status ws = ring_exchange_wait(&R->x);
            if (ws && !st)
                st = ws;
            ring_timing_host(R->timing, RING_T_KV_MPI, s, R->x.done_at - posted);
            if (st == CLFLASH_SUCCESS)
                st = ring_exchange_upload(&R->x, 1 - slot, src_of(g, s + 1), next_rows);
            if (st == CLFLASH_SUCCESS)
                ring_timing_upload(R->timing, s, R->x.written[1 - slot]);
        }
    }
    const cl_int fin = clFinish(R->cq);
    if (fin != CL_SUCCESS && st == CLFLASH_SUCCESS)
        st = ring_fail(fin, "clFinish after the ring: %d", fin);
    return st;
}

clflash_status clflash_ring_forward(clflash_context *ctx, MPI_Comm comm, const clflash_ring_desc *d, cl_mem q,
                                    cl_mem k, cl_mem v, cl_mem o, cl_mem lse)
{
    ring_clear_detail();
    clflash_status st = ring_mpi_ready(comm);
    if (st != CLFLASH_SUCCESS)
        return st;
    const double t_entry = MPI_Wtime();
    clflash_status local = ring_check_local(ctx, d, q, k, v, o, lse);
    int32_t *table = NULL; /* a paged own shard's block table, read once and checked here */
    if (local == CLFLASH_SUCCESS && d->block_table)
        local = ring_paged_read_table(ctx, d, &table);
    int32_t *cu = NULL; /* packed sequences' lengths, read once, agreed after the join */
    if (local == CLFLASH_SUCCESS)
        local = ring_varlen_read(ctx, d, &cu);
    MPI_Comm ring_comm;
    ring_geometry g;
    if ((st = ring_join(comm, d, local, 0, &ring_comm, &g)) != CLFLASH_SUCCESS) {
        free(table);
        free(cu);
        return st;
    }
    if ((st = ring_varlen_agree(ring_comm, &g, cu)) != CLFLASH_SUCCESS) {
        free(table);
        ring_geometry_free(&g);
        MPI_Comm_free(&ring_comm);
        return st;
    }
    ring_run R;
    memset(&R, 0, sizeof R);
    R.ctx = ctx;
    R.cq = clflash_context_queue(ctx);
    R.d = d;
    R.g = &g;
    R.q = q;
    R.o = o;
    R.lse = lse;
    R.k = k;
    R.v = v;
    R.kl = d->k;
    R.vl = d->v;
    R.table = table; /* freed by teardown */
    R.pool_k = k;
    R.pool_v = v;
    R.timing = ring_timing_begin(ctx, g.size, t_entry, &R.cq);
    st = ring_agree_status(ring_comm, setup(&R, ring_comm), "setup");
    if (st == CLFLASH_SUCCESS && R.have_x)
        st = ring_agree_status(ring_comm, ring_exchange_connect(&R.x, comm, 0), "connecting the ring");
    if (st == CLFLASH_SUCCESS && R.have_x)
        ring_timing_transport(R.timing, ring_exchange_transport(&R.x), R.x.shm.pinned);
    if (st == CLFLASH_SUCCESS)
        ring_timing_calls(R.timing, &g, &R.klen, g.shards[g.rank].chunk, g.shards[g.rank].nchunks);
    if (R.have_x)
        R.x.timing = R.timing;
    if (st == CLFLASH_SUCCESS) {
        const clflash_status mine = run_ring(&R);
        teardown(&R);
        st = ring_agree_status(ring_comm, mine, "ring");
    } else {
        teardown(&R);
    }
    ring_timing_end(R.timing, st);
    ring_geometry_free(&g);
    MPI_Comm_free(&ring_comm);
    return st;
}
