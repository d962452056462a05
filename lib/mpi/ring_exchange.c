/*
 * ring_exchange.c - how K/V shards travel around the ring: through host memory (MPI cannot see
 * OpenCL memory) into one of two device buffers, uploaded on a queue of the ring's own and ordered
 * against the compute queue by OpenCL events. Two transports, chosen collectively per call
 * (ring_exchange_connect):
 *  - MPI messages: double-buffered host staging (ring_staging.c's, pinned where the driver gives
 *    it), each shard sent on to the right neighbour with nonblocking MPI at every step;
 *  - the shared window (ring_shared.c), when every rank is on one node: each rank's own shard sits
 *    in its segment and every rank uploads each shard straight from its owner's segment.
 * A shard in host memory and in the device buffers is compact: K as [batch][heads_kv][rows][head_dim]
 * in the storage type, V right after it. Only the own shard is read from the device (once, from the
 * caller's layouts).
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

/* The largest MPI message: counts are int, and large messages are split in pieces of this size. */
#define RING_PIECE_BYTES ((size_t)1 << 30)
#define RING_MAX_PIECES 64

static uint64_t shard_bytes(const ring_exchange *x, uint32_t rows)
{
    return 2 * x->rows_elems * rows * x->elem;
}

clflash_status ring_exchange_init(ring_exchange *x, clflash_context *ctx, MPI_Comm comm, const ring_geometry *g)
{
    memset(x, 0, sizeof *x);
    x->ctx = ctx;
    x->comm = comm;
    x->rank = g->rank;
    x->left = (g->rank + g->size - 1) % g->size;
    x->right = (g->rank + 1) % g->size;
    x->elem = clflash_dtype_size(g->dtype);
    x->rows_elems = (uint64_t)g->batch * g->heads_kv * g->head_dim;
    x->max_bytes = shard_bytes(x, g->max_rows);
    x->own_bytes = shard_bytes(x, g->shards[g->rank].rows);
    if (x->max_bytes > (uint64_t)RING_PIECE_BYTES * RING_MAX_PIECES || x->max_bytes > SIZE_MAX)
        return ring_fail(CLFLASH_ERROR_UNSUPPORTED, "a K/V shard of %llu bytes is above the ring's 64 GiB",
                         (unsigned long long)x->max_bytes);
    cl_int err = CL_SUCCESS;
    x->queue = clCreateCommandQueue(clflash_context_cl(ctx), clflash_context_device(ctx),
                                    ring_timing_wanted() ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    if (err != CL_SUCCESS)
        return ring_fail(err, "clCreateCommandQueue for the ring's transfers: %d", err);
    for (int i = 0; i < 2; i++) {
        x->dev[i] = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, (size_t)x->max_bytes, NULL, &err);
        if (err != CL_SUCCESS)
            return ring_fail(err, "clCreateBuffer for a K/V shard (%llu bytes): %d", (unsigned long long)x->max_bytes,
                             err);
    }
    return CLFLASH_SUCCESS;
}

clflash_status ring_exchange_connect(ring_exchange *x, MPI_Comm caller, uint64_t extra_bytes)
{
    int mode = 0;
    x->extra = (extra_bytes + 4095) / 4096 * 4096; /* the shard on a page of its own */
    clflash_status st = ring_transport_choose(x->comm, &mode);
    if (st == CLFLASH_SUCCESS && mode > 0)
        st = ring_shared_open(&x->shm, caller, x->comm, (size_t)(x->extra + x->own_bytes), mode == 2);
    if (st != CLFLASH_SUCCESS)
        return st;
    if (x->shm.open) {
        x->host[0] = x->shm.seg[x->rank] + x->extra;
        ring_shared_pin(&x->shm, x->ctx);
        return CLFLASH_SUCCESS;
    }
    for (int i = 0; i < 2; i++) {
        x->host[i] = ring_staging_alloc(&x->staging[i], x->ctx, (size_t)x->max_bytes);
        if (x->host[i] == NULL)
            return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for a K/V shard (%llu bytes)",
                             (unsigned long long)x->max_bytes);
    }
    return CLFLASH_SUCCESS;
}

unsigned char *ring_exchange_extra(const ring_exchange *x, int r)
{
    return x->shm.open ? x->shm.seg[r] : NULL;
}

const char *ring_exchange_transport(const ring_exchange *x)
{
    return x->shm.open ? "shared" : "mpi";
}

void ring_exchange_free(ring_exchange *x)
{
    if (x->queue)
        clFinish(x->queue);
    if (x->shm.open && x->nreq) /* a posted barrier nobody waited for: complete it before the next */
        MPI_Waitall(x->nreq, x->req, MPI_STATUSES_IGNORE);
    ring_shared_close(&x->shm, x->comm);
    for (int i = 0; i < 2; i++) {
        if (x->written[i])
            clReleaseEvent(x->written[i]);
        if (x->released[i])
            clReleaseEvent(x->released[i]);
        if (x->dev[i])
            clReleaseMemObject(x->dev[i]);
        ring_staging_free(&x->staging[i], x->ctx);
    }
    if (x->queue)
        clReleaseCommandQueue(x->queue);
    memset(x, 0, sizeof *x);
}

void ring_compact_layouts(const ring_geometry *g, uint32_t rows, clflash_layout *kl, clflash_layout *vl)
{
    const uint64_t d = g->head_dim;
    *kl = (clflash_layout){0, (uint64_t)g->heads_kv * rows * d, (uint64_t)rows * d, d};
    *vl = *kl;
    vl->offset = (uint64_t)g->batch * g->heads_kv * rows * d;
}

/* Enqueues the reads of one caller tensor (layout l over rows rows) into host memory at dst,
 * compact. Reads only the tensor's own elements. */
static cl_int read_tensor(ring_exchange *x, const ring_geometry *g, cl_mem m, const clflash_layout *lin, uint32_t rows,
                          unsigned char *dst)
{
    const clflash_layout l = ring_resolve_layout(lin, g->heads_kv, rows, g->head_dim);
    const size_t e = x->elem, row = (size_t)g->head_dim * e, head = row * rows;
    cl_int err = CL_SUCCESS;
    if (l.seq_stride == g->head_dim && l.head_stride == (uint64_t)rows * g->head_dim &&
        l.batch_stride == (uint64_t)g->heads_kv * l.head_stride)
        return clEnqueueReadBuffer(x->queue, m, CL_FALSE, (size_t)(l.offset * e), head * g->heads_kv * g->batch, dst,
                                   0, NULL, NULL);
    for (uint32_t b = 0; b < g->batch && err == CL_SUCCESS; b++)
        for (uint32_t h = 0; h < g->heads_kv && err == CL_SUCCESS; h++) {
            const size_t src = (size_t)((l.offset + b * l.batch_stride + h * l.head_stride) * e);
            unsigned char *out = dst + ((size_t)b * g->heads_kv + h) * head;
            if (l.seq_stride == g->head_dim) {
                err = clEnqueueReadBuffer(x->queue, m, CL_FALSE, src, head, out, 0, NULL, NULL);
            } else if (l.seq_stride > g->head_dim) {
                const size_t origin[3] = {src, 0, 0}, host_origin[3] = {0, 0, 0}, region[3] = {row, rows, 1};
                err = clEnqueueReadBufferRect(x->queue, m, CL_FALSE, origin, host_origin, region,
                                              (size_t)(l.seq_stride * e), 0, row, 0, out, 0, NULL, NULL);
            } else { /* rows that overlap: one read per row */
                for (uint32_t i = 0; i < rows && err == CL_SUCCESS; i++)
                    err = clEnqueueReadBuffer(x->queue, m, CL_FALSE, src + (size_t)(i * l.seq_stride * e), row,
                                              out + (size_t)i * row, 0, NULL, NULL);
            }
        }
    return err;
}

/* After the own shard's reads into host[0] were enqueued (err: how that went): flushes them, or on
 * an error waits until nothing still writes host[0] and fails. */
static clflash_status flush_own_read(ring_exchange *x, cl_int err)
{
    if (err == CL_SUCCESS)
        err = clFlush(x->queue);
    if (err != CL_SUCCESS) {
        clFinish(x->queue);
        return ring_fail(err, "reading the own K/V shard to the host: %d", err);
    }
    return CLFLASH_SUCCESS;
}

clflash_status ring_exchange_pack_own_start(ring_exchange *x, const ring_geometry *g, cl_mem k,
                                            const clflash_layout *kl, cl_mem v, const clflash_layout *vl, uint32_t rows)
{
    unsigned char *h = x->host[0];
    cl_int err = read_tensor(x, g, k, kl, rows, h);
    if (err == CL_SUCCESS)
        err = read_tensor(x, g, v, vl, rows, h + x->rows_elems * rows * x->elem);
    return flush_own_read(x, err);
}

clflash_status ring_exchange_pack_own_finish(ring_exchange *x)
{
    const cl_int err = clFinish(x->queue);
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "reading the own K/V shard to the host: %d", err);
}

clflash_status ring_exchange_read_own_start(ring_exchange *x, uint32_t rows)
{
    cl_int err = clEnqueueReadBuffer(x->queue, x->dev[0], CL_FALSE, 0, (size_t)shard_bytes(x, rows), x->host[0],
                                     x->written[0] ? 1 : 0, x->written[0] ? &x->written[0] : NULL, NULL);
    return flush_own_read(x, err);
}

clflash_status ring_post_bytes(MPI_Comm comm, void *buf, uint64_t bytes, int peer, int tag0, int send,
                               MPI_Request *req, int *nreq)
{
    for (uint64_t at = 0, tag = (uint64_t)tag0; at < bytes; at += RING_PIECE_BYTES, tag++) {
        const int n = (int)(bytes - at < RING_PIECE_BYTES ? bytes - at : RING_PIECE_BYTES);
        unsigned char *p = (unsigned char *)buf + at;
        const int rc = send ? MPI_Isend(p, n, MPI_BYTE, peer, (int)tag, comm, &req[(*nreq)++])
                            : MPI_Irecv(p, n, MPI_BYTE, peer, (int)tag, comm, &req[(*nreq)++]);
        if (rc != MPI_SUCCESS)
            return ring_fail(CLFLASH_RING_ERROR_MPI, "%s of %llu bytes failed", send ? "MPI_Isend" : "MPI_Irecv",
                             (unsigned long long)bytes);
    }
    return CLFLASH_SUCCESS;
}

/* The shared window's only message: once this rank's own shard is in its segment, a barrier
 * (nonblocking; ring_exchange_wait completes it) after which every segment may be read. */
static clflash_status announce_own(ring_exchange *x)
{
    if (x->own_announced)
        return CLFLASH_SUCCESS;
    x->own_announced = 1;
    ring_shared_sync(&x->shm);
    if (MPI_Ibarrier(x->comm, &x->req[x->nreq++]) != MPI_SUCCESS)
        return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Ibarrier announcing the own K/V shard failed");
    return CLFLASH_SUCCESS;
}

clflash_status ring_exchange_post(ring_exchange *x, int slot, uint32_t send_rows, uint32_t recv_rows)
{
    const int other = 1 - slot;
    x->nreq = 0;
    if (x->shm.open)
        return announce_own(x);
    if (x->written[other]) { /* the receive overwrites host[other]: its upload must be done */
        const cl_int err = clWaitForEvents(1, &x->written[other]);
        clReleaseEvent(x->written[other]);
        x->written[other] = NULL;
        if (err != CL_SUCCESS)
            return ring_fail(err, "an upload of a K/V shard failed: %d", err);
    }
    const uint64_t rb = shard_bytes(x, recv_rows), sb = shard_bytes(x, send_rows);
    unsigned char *rh = x->host[other], *sh = x->host[slot];
    for (uint64_t at = 0, tag = 0; at < rb; at += RING_PIECE_BYTES, tag++) {
        const int n = (int)(rb - at < RING_PIECE_BYTES ? rb - at : RING_PIECE_BYTES);
        if (MPI_Irecv(rh + at, n, MPI_BYTE, x->left, (int)tag, x->comm, &x->req[x->nreq++]) != MPI_SUCCESS)
            return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Irecv of a K/V shard failed");
    }
    for (uint64_t at = 0, tag = 0; at < sb; at += RING_PIECE_BYTES, tag++) {
        const int n = (int)(sb - at < RING_PIECE_BYTES ? sb - at : RING_PIECE_BYTES);
        if (MPI_Isend(sh + at, n, MPI_BYTE, x->right, (int)tag, x->comm, &x->req[x->nreq++]) != MPI_SUCCESS)
            return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Isend of a K/V shard failed");
    }
    return CLFLASH_SUCCESS;
}

clflash_status ring_exchange_wait(ring_exchange *x)
{
    const int n = x->nreq;
    x->nreq = 0;
    if (ring_waitall(n, x->req, x->timing, &x->done_at) != MPI_SUCCESS)
        return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Waitall on the K/V shards failed");
    if (n > 0)
        ring_shared_sync(&x->shm); /* the barrier: every segment is written */
    return CLFLASH_SUCCESS;
}

clflash_status ring_exchange_upload(ring_exchange *x, int slot, int src, uint32_t rows)
{
    if (x->written[slot]) {
        clReleaseEvent(x->written[slot]);
        x->written[slot] = NULL;
    }
    const void *from = x->shm.open ? (const void *)(x->shm.seg[src] + x->extra) : x->host[slot];
    cl_int err = clEnqueueWriteBuffer(x->queue, x->dev[slot], CL_FALSE, 0, (size_t)shard_bytes(x, rows), from,
                                      x->released[slot] ? 1 : 0, x->released[slot] ? &x->released[slot] : NULL,
                                      &x->written[slot]);
    if (err == CL_SUCCESS)
        err = clFlush(x->queue);
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "uploading a K/V shard: %d", err);
}
