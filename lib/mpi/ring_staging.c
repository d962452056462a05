/*
 * ring_staging.c - the host memory the ring stages shards and dK/dV accumulators in: buffers of the
 * context created with CL_MEM_ALLOC_HOST_PTR and mapped once for the whole call, so that MPI reads
 * and writes them as ordinary memory and the uploads and reads between them and the device run as
 * direct copies where the driver pins such buffers; plain zeroed memory where it does not give one.
 *
 * Why: on an H200 through NVIDIA's OpenCL (2026-12-05) 128 MiB went to the device in 16.5 ms from
 * malloc'd memory (8.1 GB/s) and in 2.4 ms from such a mapped buffer (55 GB/s), and creating,
 * mapping and touching it cost what malloc and touching did (74 and 72 ms), so a call loses
 * nothing by asking for it.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

void *ring_staging_alloc(ring_staging *s, clflash_context *ctx, cl_command_queue q, size_t bytes)
{
    memset(s, 0, sizeof *s);
    cl_int err = CL_SUCCESS;
    s->mem = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    if (err == CL_SUCCESS && s->mem != NULL) {
        s->queue = q;
        s->ptr = clEnqueueMapBuffer(q, s->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
        if (err == CL_SUCCESS && s->ptr != NULL) {
            memset(s->ptr, 0, bytes); /* as calloc's: nothing reads the bytes before they are written */
            return s->ptr;
        }
        clReleaseMemObject(s->mem);
        s->mem = NULL;
        s->ptr = NULL;
    }
    s->ptr = calloc(1, bytes);
    return s->ptr;
}

void ring_staging_free(ring_staging *s)
{
    if (s->mem != NULL) {
        cl_event unmapped = NULL;
        if (clEnqueueUnmapMemObject(s->queue, s->mem, s->ptr, 0, NULL, &unmapped) == CL_SUCCESS) {
            clWaitForEvents(1, &unmapped);
            clReleaseEvent(unmapped);
        }
        clReleaseMemObject(s->mem);
    } else {
        free(s->ptr);
    }
    memset(s, 0, sizeof *s);
}
