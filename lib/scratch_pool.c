/*
 * scratch_pool.c - the context's pool of device scratch buffers: the split-KV forward's partial
 * results live here, so that a steady stream of calls creates no buffers.
 *
 * Why a pool rather than a caller workspace: clflash_forward's arguments stay what they were, and
 * the library still knows how long each buffer is in use. A call takes a buffer that no enqueued
 * work uses any more (its last user's event has completed) or whose last user was enqueued on the
 * same in-order queue as this call (its commands then run after that work), enqueues its kernels,
 * and hands the buffer back with the event of the last kernel that reads it and the queue. So
 * calls on one queue in a loop reuse the same buffers even while the device is still running the
 * previous ones, calls from several threads on queues of their own get buffers of their own, and
 * nothing waits. The pool keeps at most
 * POOL_ENTRIES buffers; past that a call gets a buffer of its own, which it releases after
 * enqueueing (OpenCL keeps a buffer alive until the commands that use it finish). All buffers are
 * released by clflash_context_free. One mutex of its own guards the list, so a program build
 * (under the context's other lock) never holds a call back here.
 *
 * Zeroed buffers (the tensor-core split path's tickets, which its kernel counts up and sets back to
 * 0) are a kind of their own: created from zeros, never handed to a call that asks for the other
 * kind (which would leave data in them), and recreated from zeros when their last use failed,
 * since a launch that did not run to its end may have left a count behind.
 */
#include "internal.h"

#include <stdlib.h>

#define POOL_ENTRIES 8
/* Sizes are rounded up to this, so that slowly growing requests reuse a buffer. */
#define SIZE_STEP (64u * 1024u)

struct clflash_scratch {
    clflash_scratch *next;
    cl_mem buf;
    uint64_t bytes;
    cl_event busy; /* the last enqueued work that uses buf, NULL when none */
    cl_command_queue busy_queue; /* the queue that work is on (retained), NULL when none */
    int taken;     /* held by a call that has not handed it back */
    int pooled;    /* 0: a call's own buffer, freed when handed back */
    int zeroed;    /* the zeroed kind: all zeros whenever no work uses it */
};

/* 1 if q executes its commands in order (so work enqueued on it later runs after work before). */
static int in_order(cl_command_queue q)
{
    cl_command_queue_properties props = 0;
    return clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) == CL_SUCCESS &&
           !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
}

static void forget_busy(clflash_scratch *s)
{
    if (s->busy)
        clReleaseEvent(s->busy);
    if (s->busy_queue)
        clReleaseCommandQueue(s->busy_queue);
    s->busy = NULL;
    s->busy_queue = NULL;
}

/* 1 if e's work is over (complete or failed: either way nothing will touch the buffer again). */
static int finished(cl_event e)
{
    cl_int status = CL_QUEUED;
    if (clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) != CL_SUCCESS)
        return 0;
    return status == CL_COMPLETE || status < 0;
}

/* 1 if e's work failed (it may have stopped anywhere). */
static int failed(cl_event e)
{
    cl_int status = CL_QUEUED;
    return clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) == CL_SUCCESS &&
           status < 0;
}

/* Creates s's buffer of at least `bytes`; all zeros (copied from a zeroed host block) for s->zeroed. */
static clflash_status create_buffer(clflash_context *c, uint64_t bytes, clflash_scratch *s)
{
    cl_int err;
    void *zeros = NULL;
    s->bytes = (bytes + SIZE_STEP - 1) / SIZE_STEP * SIZE_STEP;
    if (s->bytes > c->info.max_alloc_size)
        s->bytes = bytes; /* the rounding must not make a possible allocation impossible */
    if (s->zeroed && (zeros = calloc(1, (size_t)s->bytes)) == NULL) {
        s->buf = NULL;
        return clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating %llu zero bytes failed",
                            (unsigned long long)s->bytes);
    }
    s->buf = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE | (zeros ? CL_MEM_COPY_HOST_PTR : 0), (size_t)s->bytes, zeros,
                            &err);
    free(zeros);
    if (err != CL_SUCCESS) {
        s->buf = NULL;
        return clflash_fail(err, "creating a %llu-byte scratch buffer failed", (unsigned long long)s->bytes);
    }
    return CLFLASH_SUCCESS;
}

static clflash_status acquire(clflash_context *c, uint64_t bytes, int zeroed, cl_command_queue queue,
                              clflash_scratch **out)
{
    clflash_scratch *best = NULL, *idle_small = NULL;
    int entries = 0;
    clflash_status st = CLFLASH_SUCCESS;
    const int ordered = in_order(queue);
    if (bytes > c->info.max_alloc_size)
        return clflash_fail(CL_MEM_OBJECT_ALLOCATION_FAILURE,
                            "the call needs a %llu-byte scratch buffer; the device's largest allocation is %llu",
                            (unsigned long long)bytes, (unsigned long long)c->info.max_alloc_size);
    pthread_mutex_lock(&c->pool_lock);
    for (clflash_scratch *s = c->scratch; s; s = s->next) {
        entries++;
        if (s->taken || s->zeroed != zeroed)
            continue;
        /* the marker of the last use stays until a call that uses the buffer replaces it */
        const int idle = s->busy == NULL || finished(s->busy);
        if (!idle && !(ordered && s->busy_queue == queue))
            continue; /* in use by work this call's commands would not wait for */
        const int dirty = zeroed && s->busy != NULL && failed(s->busy); /* counts may be left in it */
        if (s->bytes >= bytes && !dirty) {
            if (best == NULL || s->bytes < best->bytes)
                best = s;
        } else if (idle_small == NULL && idle) {
            idle_small = s;
        }
    }
    if (best == NULL && idle_small != NULL) { /* grow (or zero again) an idle buffer */
        clReleaseMemObject(idle_small->buf);
        idle_small->buf = NULL;
        if ((st = create_buffer(c, bytes, idle_small)) != CLFLASH_SUCCESS) {
            /* the node stays in the list without a buffer: unlink and free it */
            clflash_scratch **at = &c->scratch;
            while (*at != idle_small)
                at = &(*at)->next;
            *at = idle_small->next;
            free(idle_small);
        } else {
            best = idle_small;
        }
    }
    if (best == NULL && st == CLFLASH_SUCCESS) {
        clflash_scratch *s = calloc(1, sizeof *s);
        if (s == NULL) {
            st = clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating a scratch entry failed");
        } else if ((s->zeroed = zeroed, st = create_buffer(c, bytes, s)) != CLFLASH_SUCCESS) {
            free(s);
        } else {
            s->pooled = entries < POOL_ENTRIES;
            if (s->pooled) {
                s->next = c->scratch;
                c->scratch = s;
            }
            best = s;
        }
    }
    if (best)
        best->taken = 1;
    pthread_mutex_unlock(&c->pool_lock);
    *out = best;
    return st;
}

clflash_status clflash_scratch_acquire(clflash_context *c, uint64_t bytes, cl_command_queue queue,
                                       clflash_scratch **out)
{
    return acquire(c, bytes, 0, queue, out);
}

clflash_status clflash_scratch_acquire_zeroed(clflash_context *c, uint64_t bytes, cl_command_queue queue,
                                              clflash_scratch **out)
{
    return acquire(c, bytes, 1, queue, out);
}

cl_mem clflash_scratch_buffer(const clflash_scratch *s)
{
    return s->buf;
}

void clflash_scratch_release(clflash_context *c, clflash_scratch *s, cl_event last_use, cl_command_queue queue)
{
    if (s == NULL)
        return;
    if (!s->pooled) {
        clReleaseMemObject(s->buf); /* kept alive by OpenCL until last_use's work is done */
        free(s);
        return;
    }
    const int tracked = last_use != NULL && clRetainEvent(last_use) == CL_SUCCESS;
    if (last_use && !tracked) /* cannot track it: wait, so that the buffer is not reused too early */
        clWaitForEvents(1, &last_use);
    const int queue_kept = tracked && clRetainCommandQueue(queue) == CL_SUCCESS;
    pthread_mutex_lock(&c->pool_lock);
    if (tracked) { /* this call's work comes last (an earlier user's was on the same in-order queue) */
        forget_busy(s);
        s->busy = last_use;
        s->busy_queue = queue_kept ? queue : NULL;
    }
    s->taken = 0;
    pthread_mutex_unlock(&c->pool_lock);
}

void clflash_scratch_pool_free(clflash_context *c)
{
    while (c->scratch) {
        clflash_scratch *s = c->scratch;
        c->scratch = s->next;
        forget_busy(s);
        clReleaseMemObject(s->buf);
        free(s);
    }
}
