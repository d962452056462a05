/*
 * ring_copy.c - copies between pageable host memory (the node-local window's segments) and the
 * device through a pinned staging buffer, by a few host threads in chunks: each thread copies its
 * chunk into the staging buffer and enqueues that chunk's upload at once, so the copy engine
 * starts on the first chunk while the threads copy the next ones.
 *
 * Why: a GPU's copy engine reads pinned memory directly, but an upload from pageable memory goes
 * through the driver's own bounce buffers, one thread at its pace. On an H200 through NVIDIA's
 * OpenCL (2026-12-05) 128 MiB went to the device in 16.5 ms from malloc'd memory against 2.4 ms from
 * a mapped CL_MEM_ALLOC_HOST_PTR buffer; the window's segments are pageable shared memory, so the
 * shared transport uploaded every shard at the slow rate. On a CPU device an upload is itself one
 * memcpy, and a staged one would copy twice: there the ring uploads directly (ring_copy_open's
 * rule; CLFLASH_RING_UPLOAD overrides it).
 */
#include "ring_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RING_COPY_CHUNK ((size_t)4 << 20) /* bytes a thread copies before enqueueing their upload */
#define RING_COPY_MAX_THREADS 4

int ring_upload_asked(void)
{
    const char *v = getenv("CLFLASH_RING_UPLOAD");
    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0)
        return 0;
    if (strcmp(v, "direct") == 0)
        return 1;
    if (strcmp(v, "staged") == 0)
        return 2;
    return -1;
}

clflash_status ring_copy_open(ring_copier *c, clflash_context *ctx, size_t bytes, int node_ranks)
{
    memset(c, 0, sizeof *c);
    const int asked = ring_upload_asked(); /* checked on every rank by ring_transport_choose */
    cl_device_type type = 0;
    clGetDeviceInfo(clflash_context_device(ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (asked == 1 || (asked == 0 && (type & CL_DEVICE_TYPE_CPU)))
        return CLFLASH_SUCCESS;
    if (ring_staging_alloc(&c->pinned, ctx, bytes) == NULL)
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for staging a K/V shard (%zu bytes)", bytes);
    if (c->pinned.mem == NULL && asked == 0) { /* no pinned memory: staging would only add a copy */
        ring_staging_free(&c->pinned, ctx);
        return CLFLASH_SUCCESS;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cpus > 0 && node_ranks > 0 ? cpus / node_ranks : 1;
    c->threads = (int)(t < 1 ? 1 : t > RING_COPY_MAX_THREADS ? RING_COPY_MAX_THREADS : t);
    c->staged = 1;
    return CLFLASH_SUCCESS;
}

void ring_copy_close(ring_copier *c, clflash_context *ctx)
{
    if (c->last) {
        clWaitForEvents(1, &c->last);
        clReleaseEvent(c->last);
    }
    if (c->staged)
        ring_staging_free(&c->pinned, ctx);
    memset(c, 0, sizeof *c);
}

/* One thread's share of a staged upload: chunks t, t + threads, ... */
typedef struct {
    const ring_copier *c;
    cl_command_queue q;
    cl_mem dst;
    size_t dst_off, bytes;
    const unsigned char *src;
    cl_event wait;
    int t;
    cl_int err;
} upload_part;

static void *upload_chunks(void *arg)
{
    upload_part *u = arg;
    unsigned char *via = u->c->pinned.ptr;
    for (size_t at = (size_t)u->t * RING_COPY_CHUNK; at < u->bytes && u->err == CL_SUCCESS;
         at += (size_t)u->c->threads * RING_COPY_CHUNK) {
        const size_t n = u->bytes - at < RING_COPY_CHUNK ? u->bytes - at : RING_COPY_CHUNK;
        memcpy(via + at, u->src + at, n);
        u->err = clEnqueueWriteBuffer(u->q, u->dst, CL_FALSE, u->dst_off + at, n, via + at, u->wait ? 1 : 0,
                                      u->wait ? &u->wait : NULL, NULL);
        if (u->err == CL_SUCCESS)
            u->err = clFlush(u->q);
    }
    return NULL;
}

cl_int ring_copy_upload(ring_copier *c, cl_command_queue q, cl_mem dst, size_t dst_off, const void *src, size_t bytes,
                        cl_event wait, cl_event *done)
{
    *done = NULL;
    if (!c->staged)
        return clEnqueueWriteBuffer(q, dst, CL_FALSE, dst_off, bytes, src, wait ? 1 : 0, wait ? &wait : NULL, done);
    if (c->last) { /* the staging buffer is free again once the previous upload has read it */
        const cl_int err = clWaitForEvents(1, &c->last);
        clReleaseEvent(c->last);
        c->last = NULL;
        if (err != CL_SUCCESS)
            return err;
    }
    upload_part parts[RING_COPY_MAX_THREADS];
    pthread_t th[RING_COPY_MAX_THREADS];
    int started[RING_COPY_MAX_THREADS] = {0};
    for (int t = 0; t < c->threads; t++) {
        parts[t] = (upload_part){c, q, dst, dst_off, bytes, src, wait, t, CL_SUCCESS};
        started[t] = t > 0 && pthread_create(&th[t], NULL, upload_chunks, &parts[t]) == 0;
    }
    for (int t = 0; t < c->threads; t++) /* this thread takes share 0, and any share no thread took */
        if (t == 0 || !started[t])
            upload_chunks(&parts[t]);
    cl_int err = CL_SUCCESS;
    for (int t = 0; t < c->threads; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        if (err == CL_SUCCESS)
            err = parts[t].err;
    }
    if (err == CL_SUCCESS) /* the queue is in order: the marker completes after every chunk */
        err = clEnqueueMarkerWithWaitList(q, 0, NULL, &c->last);
    if (err == CL_SUCCESS)
        err = clRetainEvent(c->last);
    if (err == CL_SUCCESS)
        err = clFlush(q);
    if (err != CL_SUCCESS) { /* nothing may still read the staging buffer */
        clFinish(q);
        return err;
    }
    *done = c->last;
    return CL_SUCCESS;
}

typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes;
} host_part;

static void *copy_part(void *arg)
{
    const host_part *h = arg;
    memcpy(h->dst, h->src, h->bytes);
    return NULL;
}

void ring_copy_host(const ring_copier *c, void *dst, const void *src, size_t bytes)
{
    const int n = c->staged ? c->threads : 1;
    const size_t per = (bytes / (size_t)n + 4095) / 4096 * 4096;
    host_part parts[RING_COPY_MAX_THREADS];
    pthread_t th[RING_COPY_MAX_THREADS];
    int started[RING_COPY_MAX_THREADS] = {0};
    for (int t = 0; t < n; t++) {
        const size_t at = per * (size_t)t < bytes ? per * (size_t)t : bytes;
        parts[t] = (host_part){(unsigned char *)dst + at, (const unsigned char *)src + at,
                               bytes - at < per ? bytes - at : per};
        started[t] = t > 0 && pthread_create(&th[t], NULL, copy_part, &parts[t]) == 0;
    }
    for (int t = 0; t < n; t++)
        if (t == 0 || !started[t])
            copy_part(&parts[t]);
    for (int t = 1; t < n; t++)
        if (started[t])
            pthread_join(th[t], NULL);
}
