/*
 * ring_stats.c - the optional timing of ring_stats.h: a thread's attached sink, the profiling
 * queue and step markers a timed call uses, MPI waits that note when the bytes arrived, and the
 * figures read back from the events once the call's work is done.
 */
#include "ring_internal.h"
#include "ring_stats.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local clflash_ring_stats *sink;

void clflash_ring_stats_attach(clflash_ring_stats *s)
{
    sink = s;
}

int ring_timing_wanted(void)
{
    return sink != NULL;
}

ring_timing *ring_timing_begin(clflash_context *ctx, int P, double t_entry, cl_command_queue *cq)
{
    if (sink == NULL)
        return NULL;
    ring_timing *t = calloc(1, sizeof *t);
    cl_event *ev = calloc((size_t)P * 4, sizeof *ev);
    double *host = calloc((size_t)P * 2, sizeof *host);
    if (t == NULL || ev == NULL || host == NULL) { /* the call runs untimed */
        free(t), free(ev), free(host);
        sink->steps = 0; /* the caller's cap and step stay */
        sink->transport[0] = '\0';
        sink->pinned = 0;
        sink->calls = sink->skipped = 0;
        sink->status = CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    t->sink = sink;
    sink->transport[0] = '\0';
    sink->pinned = 0;
    sink->calls = sink->skipped = 0;
    t->P = P;
    t->t_entry = t_entry;
    t->start = ev, t->grad_end = ev + P, t->step_end = ev + 2 * P, t->upload = ev + 3 * P;
    t->kv_mpi = host, t->acc_mpi = host + P;
    cl_int err = clFinish(clflash_context_queue(ctx)); /* the caller's work before the call */
    if (err == CL_SUCCESS)
        t->queue = clCreateCommandQueue(clflash_context_cl(ctx), clflash_context_device(ctx),
                                        CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) { /* the call runs untimed, on the context's queue */
        ring_timing_end(t, err);
        return NULL;
    }
    *cq = t->queue;
    return t;
}

void ring_timing_mark(ring_timing *t, cl_command_queue q, int which, int s)
{
    if (t == NULL || s < 0 || s >= t->P)
        return;
    cl_event *slot = which == RING_T_START      ? &t->start[s]
                     : which == RING_T_GRAD_END ? &t->grad_end[s]
                                                : &t->step_end[s];
    if (*slot)
        clReleaseEvent(*slot);
    *slot = NULL;
    if (clEnqueueMarkerWithWaitList(q, 0, NULL, slot) != CL_SUCCESS)
        *slot = NULL; /* its figures are then missing (status) */
}

void ring_timing_upload(ring_timing *t, int s, cl_event e)
{
    if (t == NULL || e == NULL || s < 0 || s >= t->P)
        return;
    if (t->upload[s])
        clReleaseEvent(t->upload[s]);
    clRetainEvent(e);
    t->upload[s] = e;
}

void ring_timing_host(ring_timing *t, int which, int s, double seconds)
{
    if (t == NULL || s < 0 || s >= t->P)
        return;
    (which == RING_T_KV_MPI ? t->kv_mpi : t->acc_mpi)[s] = seconds;
}

int ring_waitall(int n, MPI_Request *req, const ring_timing *t, double *done_at)
{
    int rc = MPI_SUCCESS;
    if (t == NULL || n == 0) {
        rc = n ? MPI_Waitall(n, req, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
    } else {
        int done = 0;
        while (rc == MPI_SUCCESS && !done)
            rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
    }
    if (done_at)
        *done_at = MPI_Wtime();
    return rc;
}

/* The device clock's time (seconds) at which e ended (which = CL_PROFILING_COMMAND_END) or
 * started; -1 if unknown. */
static double event_time(cl_event e, cl_profiling_info which)
{
    cl_ulong ns = 0;
    if (e == NULL || clGetEventProfilingInfo(e, which, sizeof ns, &ns, NULL) != CL_SUCCESS)
        return -1.0;
    return (double)ns * 1e-9;
}

void ring_timing_transport(ring_timing *t, const char *name, int pinned)
{
    if (t != NULL) {
        snprintf(t->sink->transport, sizeof t->sink->transport, "%s", name);
        t->sink->pinned = pinned;
    }
}

void ring_timing_calls(ring_timing *t, const ring_geometry *g, const ring_key_lengths *kl, const ring_chunk *q,
                       int nq)
{
    if (t == NULL)
        return;
    int calls = 0, all = 0;
    for (int i = 0; i < nq; i++)
        for (int r = 0; r < g->size; r++) {
            ring_call c[2];
            const int n = ring_calls(g, &q[i], &g->shards[r], c), live = ring_calls_live(g, kl, &q[i], &g->shards[r], c);
            all += n > 0 ? n : 0;
            calls += live > 0 ? live : 0;
        }
    t->sink->calls = calls;
    t->sink->skipped = all - calls;
}

void ring_timing_end(ring_timing *t, clflash_status call_status)
{
    if (t == NULL)
        return;
    clflash_ring_stats *s = t->sink;
    const int P = t->P;
    int missing = 0;
    if (t->queue)
        clFinish(t->queue);
    s->steps = P;
    s->call_s = MPI_Wtime() - t->t_entry;
    s->device_s = 0.0;
    s->status = call_status;
    double first = -1.0, last = -1.0;
    for (int i = 0; i < P; i++) {
        const double st = event_time(t->start[i], CL_PROFILING_COMMAND_END);
        const double ge = event_time(t->grad_end[i], CL_PROFILING_COMMAND_END);
        double se = event_time(t->step_end[i], CL_PROFILING_COMMAND_END);
        if (t->step_end[i] == NULL)
            se = ge; /* the forward: a step ends with its kernels */
        const double next = i + 1 < P ? event_time(t->start[i + 1], CL_PROFILING_COMMAND_END) : se;
        const double us = event_time(t->upload[i], CL_PROFILING_COMMAND_START),
                     ue = event_time(t->upload[i], CL_PROFILING_COMMAND_END);
        if (st < 0 || ge < 0 || se < 0 || next < 0 || (t->upload[i] && (us < 0 || ue < 0)))
            missing = 1;
        if (i == 0)
            first = st;
        last = se;
        if (i < s->cap && s->step) {
            clflash_ring_step_stats *o = &s->step[i];
            memset(o, 0, sizeof *o);
            o->compute_s = ge > st ? ge - st : 0.0;
            o->acc_s = se > ge ? se - ge : 0.0;
            o->wait_s = next > se ? next - se : 0.0;
            o->kv_mpi_s = t->kv_mpi[i];
            o->kv_upload_s = t->upload[i] && ue > us ? ue - us : 0.0;
            o->acc_mpi_s = t->acc_mpi[i];
        }
    }
    if (first >= 0 && last > first)
        s->device_s = last - first;
    if (s->status == CLFLASH_SUCCESS && missing)
        s->status = CL_PROFILING_INFO_NOT_AVAILABLE;
    for (int i = 0; i < 4 * P; i++)
        if (t->start[i]) /* start is the first of the four arrays, one allocation */
            clReleaseEvent(t->start[i]);
    if (t->queue)
        clReleaseCommandQueue(t->queue);
    free(t->start);
    free(t->kv_mpi);
    free(t);
}
