/*
 * ring_stats.h - optional timing of the ring's calls, for clflash-ring-bench (tools/) and the ring's
 * tests: per step, how long the device computed, how long the transfers took and how long the
 * device waited between steps; and how many calls the rank made and left out. Not installed and not public API (no compatibility promise beyond
 * the release); the function is exported from clflash_mpi so that the bench, a separate program,
 * can reach it.
 *
 * Why a sink attached to the thread rather than a field of clflash_ring_desc: the descriptor is
 * public and versioned (struct_size); timing is a measuring aid whose fields may change with the
 * bench. With a sink attached, a call runs its kernels on a queue of its own with profiling
 * enabled (after finishing the context's queue, so the caller's earlier work is done), creates its
 * transfer queue with profiling, marks each step's start and end with OpenCL markers, and polls
 * MPI (MPI_Testall) instead of blocking in MPI_Waitall, to see when the bytes arrived. Without one
 * nothing of this happens.
 */
#ifndef CLFLASH_RING_STATS_H
#define CLFLASH_RING_STATS_H

#include "clflash_mpi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One step of one rank. Device times come from OpenCL profiling (the device's clock), host times
 * from MPI_Wtime; all in seconds. */
typedef struct {
    double compute_s;    /* device: the step's kernels (its first command's start to its last's end;
                            backward: the gradients and their partial sums) */
    double acc_s;        /* backward: the dK/dV accumulator's upload, addition and read on the device,
                            including any wait for the incoming bytes; forward: 0 */
    double wait_s;       /* device: from the end of this step (compute and acc) to the start of the
                            next one's kernels, waiting for its shard or for the host; 0 for the last */
    double kv_mpi_s;     /* host: posting the next K/V shard's exchange to its arrival; 0 for the last */
    double kv_upload_s;  /* device: the next shard's upload (the transfer queue); 0 for the last */
    double acc_mpi_s;    /* backward: posting the receive of this step's incoming accumulator to its
                            arrival (0 at step 0) */
} clflash_ring_step_stats;

typedef struct {
    int steps;                     /* filled: the ring's P (entries of step written: min(P, cap)) */
    int cap;                       /* the caller's: entries step has room for */
    clflash_ring_step_stats *step; /* the caller's array of cap entries */
    double call_s;                 /* host: the call's wall time on this rank, entry to return */
    double device_s;               /* device: the first step's start to the last step's end */
    clflash_status status;         /* of the timing itself: CLFLASH_SUCCESS, or why figures are missing */
    char transport[8];             /* how the K/V shards travelled: "mpi" (messages) or "shared" (the
                                      node-local window); "" with one rank or before the ring ran */
    int pinned;                    /* shared: 1 where the window's segments were registered with the
                                      driver (ring_shared_pin), 0 where they were pageable memory */
    int calls;                     /* clflash_forward (or clflash_backward) calls this rank enqueued */
    int skipped;                   /* calls left out: their key chunk lies past every batch entry's
                                      key length */
} clflash_ring_stats;

/* Attaches s to the calling thread: its next clflash_ring_forward and clflash_ring_backward calls
 * fill it (each call overwrites it). NULL detaches. */
CLFLASH_API void clflash_ring_stats_attach(clflash_ring_stats *s);

#ifdef __cplusplus
}
#endif

#endif /* CLFLASH_RING_STATS_H */
