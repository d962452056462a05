/*
 * fault_inject.h - counts and fails the allocations and OpenCL object creations of an executable
 * linked against the STATIC clflash library with the linker's --wrap option (see reliability.cmake:
 * FAULT_INJECT_WRAP_OPTIONS). Nothing under lib/ knows about it: --wrap=malloc makes every call to
 * malloc from the objects of that executable (clflash's and the test's own, not those of shared
 * libraries such as libpocl or libcheck) go to __wrap_malloc here, which counts it, can fail it,
 * and calls the real malloc.
 *
 * What it offers:
 *  - live counts: wrapped heap blocks not yet freed, and per OpenCL object kind the net number of
 *    creations + retains - releases made through wrapped calls. After a test has released
 *    everything it created, any non-zero count is something clflash kept: a leak.
 *  - injection: fail the k-th wrapped heap allocation (returns NULL) or the k-th wrapped OpenCL
 *    creation/enqueue (returns the chosen error, creates nothing), counted from fi_arm().
 *  - cost: how many OpenCL contexts were created and programs built, since the process started.
 *
 * Thread-safe (one mutex); meant for tests that arm it around one library call at a time.
 */
#ifndef CLFLASH_TEST_FAULT_INJECT_H
#define CLFLASH_TEST_FAULT_INJECT_H

#include "clflash.h"

#include <stdint.h>

typedef enum {
    FI_CL_CONTEXT,
    FI_CL_QUEUE,
    FI_CL_MEM,
    FI_CL_PROGRAM,
    FI_CL_KERNEL,
    FI_CL_EVENT,
    FI_CL_KINDS
} fi_cl_kind;

/* Starts counting calls from zero; the `alloc_k`-th heap allocation (malloc, calloc, realloc,
 * strdup) after this returns NULL, and the `cl_k`-th OpenCL creation or enqueue returns `cl_err`
 * (0 = never for either). Only one of each is failed; later calls succeed. */
void fi_arm(long alloc_k, long cl_k, cl_int cl_err);
/* Stops failing (counting goes on). */
void fi_disarm(void);

/* Heap allocations / OpenCL creations+enqueues attempted since fi_arm (failed ones included). */
long fi_alloc_calls(void);
long fi_cl_calls(void);
/* 1 if the armed failure has happened (the k-th call was reached and failed). */
int fi_alloc_fired(void);
int fi_cl_fired(void);

/* Wrapped heap blocks allocated and not yet freed, by anyone in this executable. */
long fi_live_blocks(void);
/* Net OpenCL objects of a kind (creations + retains - releases) through wrapped calls. */
long fi_cl_live(fi_cl_kind kind);
/* All kinds summed, and a "mem 0, kernel 1, ..." description into buf. */
long fi_cl_live_total(char *buf, size_t n);

/* Makes every wrapped clGetKernelWorkGroupInfo(CL_KERNEL_LOCAL_MEM_SIZE) report `factor` times the
 * real value (1 = as it is), as Mesa's rusticl does with 2. */
void fi_scale_kernel_local(unsigned factor);

/* Makes the next `first_n` wrapped clEnqueueNDRangeKernel calls (-1: all of them, 0: none)
 * return `err` without launching, as a device that refuses a kernel at enqueue would, and restarts
 * the count of launches that fi_ndrange_calls returns. Independent of fi_arm. */
void fi_fail_ndrange(long first_n, cl_int err);
long fi_ndrange_calls(void);

/* Since the process started (never reset): OpenCL contexts created and programs built
 * (clBuildProgram calls that reached the driver) through wrapped calls. What a test costs on a
 * device whose context creation or compiler is slow. */
long fi_contexts_created(void);
long fi_programs_built(void);
/* Of those builds, how many the driver failed (a bad option, say). */
long fi_builds_failed(void);
/* OpenCL objects of a kind created through wrapped calls since the process started (never reset;
 * retains are not creations). */
long fi_cl_created(fi_cl_kind kind);

#endif /* CLFLASH_TEST_FAULT_INJECT_H */
