/*
 * staging_refuse_preload.c - a test-only LD_PRELOAD library that makes the OpenCL driver look as if
 * it had no CL_MEM_ALLOC_HOST_PTR buffers: clCreateBuffer with that flag fails with
 * CL_MEM_OBJECT_ALLOCATION_FAILURE, every other call goes to the real clCreateBuffer. It exists
 * because the ring's staging (lib/mpi/ring_staging.c) falls back to calloc'd memory when it gets
 * no such buffer, and PoCL, the CI driver, always gives one, so that path would otherwise never
 * run; and the linker's --wrap of tests/fault_inject.c cannot reach calls made inside the shared
 * libclflash_mpi. The ctest entry ring_np2_plain_staging runs test_ring with it on every rank. At
 * exit a process that created buffers prints "staging_refuse_preload: refused N buffers" to
 * stderr, so that the test can tell that it was loaded and did refuse something (a preload that
 * never reached the ranks would otherwise pass silently). Processes that create none stay quiet:
 * the programs PoCL runs to link kernels inherit LD_PRELOAD and would add a line of 0 each.
 */
#include "preload_next.h"

#include <CL/cl.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cl_mem (*create_buffer_fn)(cl_context, cl_mem_flags, size_t, void *, cl_int *);

static _Atomic unsigned long calls, refused;

static void report(void)
{
    if (atomic_load(&calls) > 0)
        fprintf(stderr, "staging_refuse_preload: refused %lu buffers\n", atomic_load(&refused));
}

__attribute__((constructor)) static void install(void)
{
    atexit(report);
}

/* default visibility whatever the build's preset: a hidden definition would interpose nothing */
__attribute__((visibility("default"))) CL_API_ENTRY cl_mem CL_API_CALL
clCreateBuffer(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *errcode_ret)
{
    atomic_fetch_add(&calls, 1);
    if (flags & CL_MEM_ALLOC_HOST_PTR) {
        atomic_fetch_add(&refused, 1);
        if (errcode_ret != NULL)
            *errcode_ret = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    static _Atomic(create_buffer_fn) next; /* a race only looks it up twice */
    create_buffer_fn real = atomic_load(&next);
    if (real == NULL) {
        void *sym = preload_next("staging_refuse_preload", "clCreateBuffer");
        memcpy(&real, &sym, sizeof real);
        atomic_store(&next, real);
    }
    return real(context, flags, size, host_ptr, errcode_ret);
}
