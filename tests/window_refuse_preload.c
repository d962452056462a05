/*
 * window_refuse_preload.c - a test-only LD_PRELOAD library that makes one rank's MPI fail to map a
 * shared-memory window: MPI_Win_shared_query returns MPI_ERR_OTHER on the rank of MPI_COMM_WORLD
 * that WINDOW_REFUSE_RANK names (default 1), after the collective allocation itself succeeded
 * everywhere. It exists to prove that a failure on one rank alone while the ring's node-local
 * window is set up (lib/mpi/ring_shared.c) leaves no rank waiting in a collective the others
 * skipped: every rank must drop the window together and the ring runs on MPI messages instead.
 * The ctest entry ring_np2_window_refused runs test_ring with it (transport auto). At exit a
 * process that queried a window prints "window_refuse_preload: refused N queries" to stderr, so
 * that the test can tell it was loaded and did refuse something on the chosen rank. It goes
 * through MPI's profiling interface (PMPI_Win_shared_query), which every MPI library provides.
 */
#include <mpi.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static _Atomic unsigned long calls, refused;

static void report(void)
{
    if (atomic_load(&calls) > 0)
        fprintf(stderr, "window_refuse_preload: refused %lu queries\n", atomic_load(&refused));
}

__attribute__((constructor)) static void install(void)
{
    atexit(report);
}

/* default visibility whatever the build's preset: a hidden definition would interpose nothing */
__attribute__((visibility("default"))) int MPI_Win_shared_query(MPI_Win win, int rank, MPI_Aint *size, int *disp_unit,
                                                                void *baseptr)
{
    atomic_fetch_add(&calls, 1);
    const char *who = getenv("WINDOW_REFUSE_RANK");
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me == (who != NULL ? atoi(who) : 1)) {
        atomic_fetch_add(&refused, 1);
        return MPI_ERR_OTHER;
    }
    return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr);
}
