/*
 * transfer_delay_preload.c - a test-only LD_PRELOAD library that holds back every non-blocking
 * clEnqueueWriteBuffer and clEnqueueReadBuffer for a few milliseconds: it adds a user event of its
 * own to the command's wait list and completes that event from a thread of its own 3 ms later.
 * Every other call, and blocking transfers, go to the real functions unchanged.
 *
 * Why: the ring (lib/mpi) moves shards and dK/dV accumulators on queues of their own and orders
 * them against the compute queue with OpenCL events. PoCL, the CI driver, runs a host-memory
 * transfer so soon after it is enqueued that a missing event (a kernel that should wait for an
 * upload, a read that should wait for a kernel) still gives right results there, while a GPU, whose
 * copy engines run beside its kernels, would compute on stale data. Late transfers make such a
 * missing dependency change the results on PoCL too: with the upload of the incoming accumulator
 * no longer awaited, ring_np2_delayed_transfers fails. At exit a process that enqueued transfers
 * prints "transfer_delay_preload: delayed N transfers" to stderr, so that the test can tell that it
 * was loaded and did hold something back.
 */
#include "preload_next.h"

#include <CL/cl.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DELAY_NS 3000000L /* how long each transfer is held back */
#define MAX_WAIT 64       /* wait lists longer than this are passed on unchanged */

typedef cl_int(CL_API_CALL *write_fn)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint,
                                      const cl_event *, cl_event *);
typedef cl_int(CL_API_CALL *read_fn)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint,
                                     const cl_event *, cl_event *);

static _Atomic unsigned long calls, delayed;

static void report(void)
{
    if (atomic_load(&calls) > 0)
        fprintf(stderr, "transfer_delay_preload: delayed %lu transfers\n", atomic_load(&delayed));
}

__attribute__((constructor)) static void install(void)
{
    atexit(report);
}


static void *complete_later(void *arg)
{
    const struct timespec t = {0, DELAY_NS};
    nanosleep(&t, NULL);
    cl_event u = arg;
    clSetUserEventStatus(u, CL_COMPLETE);
    clReleaseEvent(u);
    return NULL;
}

/* Before a transfer: where it is non-blocking, a user event u of q's context, and in list the
 * caller's wait list (nw events of w) with u after it; returns 1 then, else 0 (pass it on as it is). */
static int hold(cl_command_queue q, cl_bool blocking, cl_uint nw, const cl_event *w, cl_event list[MAX_WAIT + 1],
                cl_event *u)
{
    atomic_fetch_add(&calls, 1);
    cl_context ctx = NULL;
    if (blocking || nw >= MAX_WAIT || (nw > 0 && w == NULL) ||
        clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS)
        return 0;
    cl_int err = CL_SUCCESS;
    *u = clCreateUserEvent(ctx, &err);
    if (err != CL_SUCCESS)
        return 0;
    for (cl_uint i = 0; i < nw; i++)
        list[i] = w[i];
    list[nw] = *u;
    return 1;
}

/* After it: u completes DELAY_NS from now (at once where no thread can be started, or where the
 * transfer was refused). */
static void let_go(cl_int rc, cl_event u)
{
    pthread_t th;
    pthread_attr_t attr;
    int started = 0;
    if (rc == CL_SUCCESS && pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&th, &attr, complete_later, u) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        clSetUserEventStatus(u, CL_COMPLETE);
        clReleaseEvent(u);
    } else {
        atomic_fetch_add(&delayed, 1);
    }
}

/* default visibility whatever the build's preset: a hidden definition would interpose nothing */
__attribute__((visibility("default"))) CL_API_ENTRY cl_int CL_API_CALL
clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t off, size_t n, const void *p, cl_uint nw,
                     const cl_event *w, cl_event *ev)
{
    static _Atomic(write_fn) next;
    write_fn real = atomic_load(&next);
    if (real == NULL) { /* dlsym is thread-safe: a race only looks it up twice */
        void *sym = preload_next("transfer_delay_preload", "clEnqueueWriteBuffer");
        memcpy(&real, &sym, sizeof real); /* POSIX's object-to-function pointer conversion */
        atomic_store(&next, real);
    }
    cl_event list[MAX_WAIT + 1], u = NULL;
    if (!hold(q, blocking, nw, w, list, &u))
        return real(q, m, blocking, off, n, p, nw, w, ev);
    const cl_int rc = real(q, m, blocking, off, n, p, nw + 1, list, ev);
    let_go(rc, u);
    return rc;
}

__attribute__((visibility("default"))) CL_API_ENTRY cl_int CL_API_CALL
clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t off, size_t n, void *p, cl_uint nw,
                    const cl_event *w, cl_event *ev)
{
    static _Atomic(read_fn) next;
    read_fn real = atomic_load(&next);
    if (real == NULL) {
        void *sym = preload_next("transfer_delay_preload", "clEnqueueReadBuffer");
        memcpy(&real, &sym, sizeof real);
        atomic_store(&next, real);
    }
    cl_event list[MAX_WAIT + 1], u = NULL;
    if (!hold(q, blocking, nw, w, list, &u))
        return real(q, m, blocking, off, n, p, nw, w, ev);
    const cl_int rc = real(q, m, blocking, off, n, p, nw + 1, list, ev);
    let_go(rc, u);
    return rc;
}
