/*
 * ring_staging.c - the host memory the ring stages shards and dK/dV accumulators in: buffers of the
 * context created with CL_MEM_ALLOC_HOST_PTR and mapped, so that MPI reads and writes them as
 * ordinary memory and the uploads and reads between them and the device run as direct copies
 * where the driver pins such buffers; plain memory where it gives none. Mapped buffers are kept
 * for the next ring call on the same context (in a component slot of the context, component.h)
 * and released with the context.
 *
 * Why pinned: on an H200 through NVIDIA's OpenCL (2026-12-05) 128 MiB went to the device in 16.5 ms
 * from malloc'd memory (8.1 GB/s) and in 2.4 ms from such a mapped buffer (55 GB/s). Why kept:
 * creating, mapping and touching one of 128 MiB took 74 ms (malloc and touching 72), and a call
 * that allocated its staging anew spent about 150 of its 250 ms on it.
 */
#include "ring_internal.h"

#include "component.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The idle mapped buffers of one context: a call takes the smallest that is large enough, and
 * gives it back when it ends. At most RING_KEPT are kept; a call that ends with the cache full
 * releases the smallest. */
#define RING_KEPT 5
typedef struct {
    pthread_mutex_t lock;
    cl_command_queue queue; /* the context's, which maps and unmaps */
    ring_staging kept[RING_KEPT];
} staging_cache;

static const int cache_key = 0; /* its address names the ring's slot in a context */

static void unmap_release(cl_command_queue q, ring_staging *s)
{
    cl_event unmapped = NULL;
    if (clEnqueueUnmapMemObject(q, s->mem, s->ptr, 0, NULL, &unmapped) == CL_SUCCESS) {
        clWaitForEvents(1, &unmapped);
        clReleaseEvent(unmapped);
    }
    clReleaseMemObject(s->mem);
    memset(s, 0, sizeof *s);
}

static void cache_release(void *data)
{
    staging_cache *k = data;
    for (int i = 0; i < RING_KEPT; i++)
        if (k->kept[i].mem != NULL)
            unmap_release(k->queue, &k->kept[i]);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

/* The context's cache, attached on first use; NULL without memory or a free slot. */
static staging_cache *cache_of(clflash_context *ctx)
{
    staging_cache *k = clflash_component_data(ctx, &cache_key);
    if (k != NULL)
        return k;
    if ((k = calloc(1, sizeof *k)) == NULL)
        return NULL;
    if (pthread_mutex_init(&k->lock, NULL) != 0) {
        free(k);
        return NULL;
    }
    k->queue = clflash_context_queue(ctx);
    void *existing = NULL;
    if (clflash_component_attach(ctx, &cache_key, k, cache_release, &existing) != CLFLASH_SUCCESS) {
        cache_release(k);
        return NULL;
    }
    if (existing != NULL) { /* another thread attached one first */
        cache_release(k);
        return existing;
    }
    return k;
}

void *ring_staging_alloc(ring_staging *s, clflash_context *ctx, size_t bytes)
{
    memset(s, 0, sizeof *s);
    staging_cache *k = cache_of(ctx);
    if (k != NULL) {
        pthread_mutex_lock(&k->lock);
        int best = -1;
        for (int i = 0; i < RING_KEPT; i++)
            if (k->kept[i].mem != NULL && k->kept[i].bytes >= bytes &&
                (best < 0 || k->kept[i].bytes < k->kept[best].bytes))
                best = i;
        if (best >= 0) {
            *s = k->kept[best];
            memset(&k->kept[best], 0, sizeof k->kept[best]);
        }
        pthread_mutex_unlock(&k->lock);
        if (best >= 0)
            return s->ptr;
    }
    cl_int err = CL_SUCCESS;
    s->mem = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    if (err == CL_SUCCESS && s->mem != NULL) {
        s->ptr = clEnqueueMapBuffer(clflash_context_queue(ctx), s->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes,
                                    0, NULL, NULL, &err);
        if (err == CL_SUCCESS && s->ptr != NULL) {
            s->bytes = bytes;
            return s->ptr;
        }
        clReleaseMemObject(s->mem);
        s->mem = NULL;
    }
    s->ptr = calloc(1, bytes);
    s->bytes = s->ptr != NULL ? bytes : 0;
    return s->ptr;
}

void ring_staging_free(ring_staging *s, clflash_context *ctx)
{
    if (s->mem == NULL) {
        free(s->ptr);
        memset(s, 0, sizeof *s);
        return;
    }
    staging_cache *k = cache_of(ctx);
    if (k == NULL) {
        unmap_release(clflash_context_queue(ctx), s);
        return;
    }
    pthread_mutex_lock(&k->lock);
    int slot = -1;
    for (int i = 0; i < RING_KEPT && slot < 0; i++)
        if (k->kept[i].mem == NULL)
            slot = i;
    ring_staging out = {0};
    if (slot < 0) { /* full: keep the larger of s and the smallest kept */
        int smallest = 0;
        for (int i = 1; i < RING_KEPT; i++)
            if (k->kept[i].bytes < k->kept[smallest].bytes)
                smallest = i;
        if (k->kept[smallest].bytes < s->bytes) {
            out = k->kept[smallest];
            k->kept[smallest] = *s;
        } else {
            out = *s;
        }
    } else {
        k->kept[slot] = *s;
    }
    pthread_mutex_unlock(&k->lock);
    if (out.mem != NULL)
        unmap_release(k->queue, &out);
    memset(s, 0, sizeof *s);
}
