/*
 * fault_inject.c - the --wrap functions behind fault_inject.h.
 *
 * Each __wrap_X counts the call, fails it if it is the armed one, else calls __real_X (the linker
 * resolves that to the real X) and records what it created or released. The heap side keeps the
 * addresses of live blocks in an open-addressing table, so freeing a pointer that some unwrapped
 * code allocated is harmless (it is simply not found). The list of wrapped symbols must match
 * FAULT_INJECT_WRAP_OPTIONS in tests/reliability.cmake.
 */
#include "fault_inject.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state -------------------------------------------------------------------------------------- */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long alloc_calls, alloc_fail_at, cl_calls, cl_fail_at;
static int alloc_fired, cl_fired;
static cl_int cl_fail_err = CL_OUT_OF_HOST_MEMORY;
static cl_int ndrange_err;
static long ndrange_calls, ndrange_fail_left;
static long cl_live[FI_CL_KINDS];
static long cl_created[FI_CL_KINDS]; /* successful creations, never reset */
static long contexts_created, programs_built, builds_failed; /* never reset */

#define TABLE_BITS 20
#define TABLE_SIZE (1u << TABLE_BITS)
static void *table[TABLE_SIZE]; /* live heap blocks; NULL = empty slot */
static long live_blocks;

static size_t slot_of(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)(x & (TABLE_SIZE - 1));
}

/* Called with the lock held. */
static void table_add(void *p)
{
    size_t i = slot_of(p);
    if (live_blocks >= (long)(TABLE_SIZE / 2)) {
        fprintf(stderr, "fault_inject: more than %u live blocks; the table is full\n", TABLE_SIZE / 2);
        abort();
    }
    while (table[i])
        i = (i + 1) & (TABLE_SIZE - 1);
    table[i] = p;
    live_blocks++;
}

/* Removes p if present (backward-shift deletion keeps probe chains intact). Lock held. */
static void table_remove(void *p)
{
    size_t i = slot_of(p);
    while (table[i] && table[i] != p)
        i = (i + 1) & (TABLE_SIZE - 1);
    if (!table[i])
        return; /* not one of ours */
    live_blocks--;
    for (size_t j = i;;) {
        j = (j + 1) & (TABLE_SIZE - 1);
        if (!table[j])
            break;
        const size_t k = slot_of(table[j]);
        /* move table[j] into the hole at i unless its home k lies cyclically in (i, j] */
        const int stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (!stays) {
            table[i] = table[j];
            i = j;
        }
    }
    table[i] = NULL;
}

/* Counts one heap allocation; returns 1 if it must fail. */
static int alloc_should_fail(void)
{
    int fail;
    pthread_mutex_lock(&lock);
    alloc_calls++;
    fail = alloc_fail_at > 0 && alloc_calls == alloc_fail_at;
    if (fail)
        alloc_fired = 1;
    pthread_mutex_unlock(&lock);
    return fail;
}

static int cl_should_fail(void)
{
    int fail;
    pthread_mutex_lock(&lock);
    cl_calls++;
    fail = cl_fail_at > 0 && cl_calls == cl_fail_at;
    if (fail)
        cl_fired = 1;
    pthread_mutex_unlock(&lock);
    return fail;
}

static void track(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&lock);
    table_add(p);
    pthread_mutex_unlock(&lock);
}

static void cl_count(fi_cl_kind kind, long delta)
{
    pthread_mutex_lock(&lock);
    cl_live[kind] += delta;
    pthread_mutex_unlock(&lock);
}

/* ---- the public side ---------------------------------------------------------------------------- */
void fi_arm(long alloc_k, long cl_k, cl_int cl_err)
{
    pthread_mutex_lock(&lock);
    alloc_calls = cl_calls = 0;
    alloc_fail_at = alloc_k;
    cl_fail_at = cl_k;
    cl_fail_err = cl_err;
    alloc_fired = cl_fired = 0;
    pthread_mutex_unlock(&lock);
}

void fi_disarm(void)
{
    pthread_mutex_lock(&lock);
    alloc_fail_at = cl_fail_at = 0;
    pthread_mutex_unlock(&lock);
}

#define GETTER(type, name, expr)            \
    type name(void)                         \
    {                                       \
        type r;                             \
        pthread_mutex_lock(&lock);          \
        r = (expr);                         \
        pthread_mutex_unlock(&lock);        \
        return r;                           \
    }
GETTER(long, fi_alloc_calls, alloc_calls)
GETTER(long, fi_cl_calls, cl_calls)
GETTER(int, fi_alloc_fired, alloc_fired)
GETTER(int, fi_cl_fired, cl_fired)
GETTER(long, fi_live_blocks, live_blocks)
GETTER(long, fi_ndrange_calls, ndrange_calls)
GETTER(long, fi_contexts_created, contexts_created)
GETTER(long, fi_programs_built, programs_built)
GETTER(long, fi_builds_failed, builds_failed)
#undef GETTER

long fi_cl_live(fi_cl_kind kind)
{
    long r;
    pthread_mutex_lock(&lock);
    r = cl_live[kind];
    pthread_mutex_unlock(&lock);
    return r;
}

long fi_cl_live_total(char *buf, size_t n)
{
    static const char *const names[FI_CL_KINDS] = {"context", "queue", "mem", "program", "kernel", "event"};
    long total = 0;
    size_t used = 0;
    if (buf && n)
        buf[0] = '\0';
    for (int i = 0; i < FI_CL_KINDS; i++) {
        const long v = fi_cl_live((fi_cl_kind)i);
        total += v < 0 ? -v : v;
        if (buf && used + 1 < n)
            used += (size_t)snprintf(buf + used, n - used, "%s%s %ld", i ? ", " : "", names[i], v);
    }
    return total;
}

void fi_fail_ndrange(long first_n, cl_int err)
{
    pthread_mutex_lock(&lock);
    ndrange_err = err;
    ndrange_fail_left = first_n;
    ndrange_calls = 0;
    pthread_mutex_unlock(&lock);
}

/* ---- heap wrappers ------------------------------------------------------------------------------ */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void __real_free(void *p);

void *__wrap_malloc(size_t n)
{
    void *p;
    if (alloc_should_fail())
        return NULL;
    p = __real_malloc(n);
    track(p);
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p;
    if (alloc_should_fail())
        return NULL;
    p = __real_calloc(n, size);
    track(p);
    return p;
}

void *__wrap_realloc(void *old, size_t n)
{
    void *p;
    if (alloc_should_fail())
        return NULL; /* the old block stays valid, as realloc promises */
    p = __real_realloc(old, n);
    if (p || n == 0) {
        pthread_mutex_lock(&lock);
        if (old)
            table_remove(old);
        if (p)
            table_add(p);
        pthread_mutex_unlock(&lock);
    }
    return p;
}

char *__wrap_strdup(const char *s)
{
    char *p;
    if (alloc_should_fail())
        return NULL;
    p = __real_strdup(s);
    track(p);
    return p;
}

void __wrap_free(void *p)
{
    if (p) {
        pthread_mutex_lock(&lock);
        table_remove(p);
        pthread_mutex_unlock(&lock);
    }
    __real_free(p);
}

/* ---- OpenCL wrappers ---------------------------------------------------------------------------- */
/* Creation: fails with the armed error (setting *errcode_ret) or creates and counts. */
#define CL_CREATE(ret_t, kind, name, params, args)                         \
    ret_t __real_##name params;                                            \
    ret_t __wrap_##name params                                             \
    {                                                                      \
        ret_t obj;                                                         \
        if (cl_should_fail()) {                                            \
            if (errcode_ret)                                               \
                *errcode_ret = cl_fail_err;                                \
            return NULL;                                                   \
        }                                                                  \
        obj = __real_##name args;                                          \
        if (obj) {                                                         \
            cl_count(kind, 1);                                             \
            pthread_mutex_lock(&lock);                                     \
            cl_created[kind]++;                                            \
            pthread_mutex_unlock(&lock);                                   \
        }                                                                  \
        if (obj && kind == FI_CL_CONTEXT) {                                \
            pthread_mutex_lock(&lock);                                     \
            contexts_created++;                                            \
            pthread_mutex_unlock(&lock);                                   \
        }                                                                  \
        return obj;                                                        \
    }

CL_CREATE(cl_context, FI_CL_CONTEXT, clCreateContext,
          (const cl_context_properties *props, cl_uint n, const cl_device_id *devs,
           void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user, cl_int *errcode_ret),
          (props, n, devs, notify, user, errcode_ret))
CL_CREATE(cl_command_queue, FI_CL_QUEUE, clCreateCommandQueue,
          (cl_context ctx, cl_device_id dev, cl_command_queue_properties props, cl_int *errcode_ret),
          (ctx, dev, props, errcode_ret))
CL_CREATE(cl_mem, FI_CL_MEM, clCreateBuffer,
          (cl_context ctx, cl_mem_flags flags, size_t size, void *host, cl_int *errcode_ret),
          (ctx, flags, size, host, errcode_ret))
CL_CREATE(cl_mem, FI_CL_MEM, clCreateSubBuffer,
          (cl_mem buf, cl_mem_flags flags, cl_buffer_create_type type, const void *info, cl_int *errcode_ret),
          (buf, flags, type, info, errcode_ret))
CL_CREATE(cl_program, FI_CL_PROGRAM, clCreateProgramWithSource,
          (cl_context ctx, cl_uint n, const char **strings, const size_t *lengths, cl_int *errcode_ret),
          (ctx, n, strings, lengths, errcode_ret))
CL_CREATE(cl_kernel, FI_CL_KERNEL, clCreateKernel,
          (cl_program prog, const char *name, cl_int *errcode_ret), (prog, name, errcode_ret))
CL_CREATE(cl_event, FI_CL_EVENT, clCreateUserEvent, (cl_context ctx, cl_int *errcode_ret), (ctx, errcode_ret))
#undef CL_CREATE

/* Retain and release: counted when they succeed. */
#define CL_REFCOUNT(kind, type, retain, release)                          \
    cl_int __real_##retain(type x);                                        \
    cl_int __real_##release(type x);                                       \
    cl_int __wrap_##retain(type x)                                         \
    {                                                                      \
        const cl_int err = __real_##retain(x);                             \
        if (err == CL_SUCCESS)                                             \
            cl_count(kind, 1);                                             \
        return err;                                                        \
    }                                                                      \
    cl_int __wrap_##release(type x)                                        \
    {                                                                      \
        const cl_int err = __real_##release(x);                            \
        if (err == CL_SUCCESS)                                             \
            cl_count(kind, -1);                                            \
        return err;                                                        \
    }

CL_REFCOUNT(FI_CL_CONTEXT, cl_context, clRetainContext, clReleaseContext)
CL_REFCOUNT(FI_CL_QUEUE, cl_command_queue, clRetainCommandQueue, clReleaseCommandQueue)
CL_REFCOUNT(FI_CL_MEM, cl_mem, clRetainMemObject, clReleaseMemObject)
CL_REFCOUNT(FI_CL_PROGRAM, cl_program, clRetainProgram, clReleaseProgram)
CL_REFCOUNT(FI_CL_KERNEL, cl_kernel, clRetainKernel, clReleaseKernel)
CL_REFCOUNT(FI_CL_EVENT, cl_event, clRetainEvent, clReleaseEvent)
#undef CL_REFCOUNT

/* clBuildProgram may fail with the armed error too (it is a resource the driver allocates). */
cl_int __real_clBuildProgram(cl_program prog, cl_uint n, const cl_device_id *devs, const char *options,
                             void(CL_CALLBACK *notify)(cl_program, void *), void *user);
cl_int __wrap_clBuildProgram(cl_program prog, cl_uint n, const cl_device_id *devs, const char *options,
                             void(CL_CALLBACK *notify)(cl_program, void *), void *user)
{
    if (cl_should_fail())
        return cl_fail_err;
    const cl_int err = __real_clBuildProgram(prog, n, devs, options, notify, user);
    pthread_mutex_lock(&lock);
    programs_built++;
    builds_failed += err != CL_SUCCESS;
    pthread_mutex_unlock(&lock);
    return err;
}

/* Enqueues: fail with the armed error, or enqueue and count the event they return. */
#define CL_ENQUEUE(name, params, args)                                     \
    cl_int __real_##name params;                                           \
    cl_int __wrap_##name params                                            \
    {                                                                      \
        cl_int err;                                                        \
        if (cl_should_fail())                                              \
            return cl_fail_err;                                            \
        err = __real_##name args;                                          \
        if (err == CL_SUCCESS && event && *event)                          \
            cl_count(FI_CL_EVENT, 1);                                      \
        return err;                                                        \
    }

CL_ENQUEUE(clEnqueueReadBuffer,
           (cl_command_queue qu, cl_mem buf, cl_bool blocking, size_t off, size_t size, void *ptr, cl_uint nw,
            const cl_event *wl, cl_event *event),
           (qu, buf, blocking, off, size, ptr, nw, wl, event))
CL_ENQUEUE(clEnqueueWriteBuffer,
           (cl_command_queue qu, cl_mem buf, cl_bool blocking, size_t off, size_t size, const void *ptr, cl_uint nw,
            const cl_event *wl, cl_event *event),
           (qu, buf, blocking, off, size, ptr, nw, wl, event))
CL_ENQUEUE(clEnqueueReadBufferRect,
           (cl_command_queue qu, cl_mem buf, cl_bool blocking, const size_t *bo, const size_t *ho,
            const size_t *region, size_t brp, size_t bsp, size_t hrp, size_t hsp, void *ptr, cl_uint nw,
            const cl_event *wl, cl_event *event),
           (qu, buf, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr, nw, wl, event))
CL_ENQUEUE(clEnqueueWriteBufferRect,
           (cl_command_queue qu, cl_mem buf, cl_bool blocking, const size_t *bo, const size_t *ho,
            const size_t *region, size_t brp, size_t bsp, size_t hrp, size_t hsp, const void *ptr, cl_uint nw,
            const cl_event *wl, cl_event *event),
           (qu, buf, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr, nw, wl, event))
CL_ENQUEUE(clEnqueueFillBuffer,
           (cl_command_queue qu, cl_mem buf, const void *pattern, size_t psize, size_t off, size_t size, cl_uint nw,
            const cl_event *wl, cl_event *event),
           (qu, buf, pattern, psize, off, size, nw, wl, event))
CL_ENQUEUE(clEnqueueCopyBuffer,
           (cl_command_queue qu, cl_mem src, cl_mem dst, size_t so, size_t dof, size_t size, cl_uint nw,
            const cl_event *wl, cl_event *event),
           (qu, src, dst, so, dof, size, nw, wl, event))
CL_ENQUEUE(clEnqueueMarkerWithWaitList, (cl_command_queue qu, cl_uint nw, const cl_event *wl, cl_event *event),
           (qu, nw, wl, event))
CL_ENQUEUE(clEnqueueBarrierWithWaitList, (cl_command_queue qu, cl_uint nw, const cl_event *wl, cl_event *event),
           (qu, nw, wl, event))
#undef CL_ENQUEUE

/* The kernel launch also obeys fi_fail_ndrange (a device refusing launches). */
cl_int __real_clEnqueueNDRangeKernel(cl_command_queue qu, cl_kernel k, cl_uint dims, const size_t *off,
                                     const size_t *global, const size_t *local, cl_uint nw, const cl_event *wl,
                                     cl_event *event);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue qu, cl_kernel k, cl_uint dims, const size_t *off,
                                     const size_t *global, const size_t *local, cl_uint nw, const cl_event *wl,
                                     cl_event *event)
{
    cl_int err, forced = 0;
    pthread_mutex_lock(&lock);
    ndrange_calls++;
    if (ndrange_fail_left != 0) {
        forced = ndrange_err;
        if (ndrange_fail_left > 0)
            ndrange_fail_left--;
    }
    pthread_mutex_unlock(&lock);
    if (cl_should_fail())
        return cl_fail_err;
    if (forced)
        return forced;
    err = __real_clEnqueueNDRangeKernel(qu, k, dims, off, global, local, nw, wl, event);
    if (err == CL_SUCCESS && event && *event)
        cl_count(FI_CL_EVENT, 1);
    return err;
}

/* CL_KERNEL_LOCAL_MEM_SIZE scaled by fi_scale_kernel_local (an implementation that reports its
 * kernels' local memory wrong, as Mesa's rusticl 22.3 reports twice the static size). */
static cl_ulong local_report_factor = 1;

void fi_scale_kernel_local(unsigned factor)
{
    pthread_mutex_lock(&lock);
    local_report_factor = factor ? factor : 1;
    pthread_mutex_unlock(&lock);
}

cl_int __real_clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id dev, cl_kernel_work_group_info name, size_t size,
                                       void *value, size_t *size_ret);
cl_int __wrap_clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id dev, cl_kernel_work_group_info name, size_t size,
                                       void *value, size_t *size_ret)
{
    const cl_int err = __real_clGetKernelWorkGroupInfo(k, dev, name, size, value, size_ret);
    if (err == CL_SUCCESS && name == CL_KERNEL_LOCAL_MEM_SIZE && value != NULL && size >= sizeof(cl_ulong)) {
        pthread_mutex_lock(&lock);
        *(cl_ulong *)value *= local_report_factor;
        pthread_mutex_unlock(&lock);
    }
    return err;
}

long fi_cl_created(fi_cl_kind kind)
{
    pthread_mutex_lock(&lock);
    const long n = cl_created[kind];
    pthread_mutex_unlock(&lock);
    return n;
}
