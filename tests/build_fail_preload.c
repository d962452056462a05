/*
 * build_fail_preload.c - a test-only LD_PRELOAD library that makes clBuildProgram fail the way
 * PoCL's kernel cache does when processes build the same program at once: CL_BUILD_PROGRAM_FAILURE
 * without building, so that the program's build log holds no compiler message. It fails the first
 * BUILD_FAIL_COUNT builds whose options hold a -D (clflash's kernels; its local-memory probe builds
 * with no options and is left alone), or every such build with BUILD_FAIL_COUNT=all; the rest go
 * to the real clBuildProgram. The build log of a program it failed is PoCL's line for such a failure
 * (clGetProgramBuildInfo answers it; other queries go to the driver). The race cannot be produced
 * on demand, so this is how the library's
 * retry of such builds (lib/program_cache.c) is tested: build_retry_check.cmake runs clflash-bench
 * with it. At exit a process that built something prints "build_fail_preload: failed N of M builds"
 * to stderr; processes that built nothing (the linker PoCL runs inherits LD_PRELOAD) stay quiet.
 */
#include "preload_next.h"

#include <CL/cl.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cl_int (*build_program_fn)(cl_program, cl_uint, const cl_device_id *, const char *,
                                   void(CL_CALLBACK *)(cl_program, void *), void *);

static _Atomic unsigned long builds, kernel_builds, failed;

/* The programs whose last build this library failed (a few at a time are enough for clflash). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cl_program failed_programs[64];

static void mark(cl_program p, int failed_now)
{
    pthread_mutex_lock(&lock);
    int free_slot = -1, found = 0;
    for (int i = 0; i < 64; i++) {
        if (failed_programs[i] == p) {
            found = 1;
            if (!failed_now)
                failed_programs[i] = NULL;
        } else if (failed_programs[i] == NULL && free_slot < 0) {
            free_slot = i;
        }
    }
    if (failed_now && !found && free_slot >= 0)
        failed_programs[free_slot] = p;
    pthread_mutex_unlock(&lock);
}

static int marked(cl_program p)
{
    pthread_mutex_lock(&lock);
    int found = 0;
    for (int i = 0; i < 64; i++)
        found |= failed_programs[i] == p;
    pthread_mutex_unlock(&lock);
    return found;
}

static void report(void)
{
    if (atomic_load(&builds) > 0)
        fprintf(stderr, "build_fail_preload: failed %lu of %lu builds\n", atomic_load(&failed), atomic_load(&builds));
}

__attribute__((constructor)) static void install(void)
{
    atexit(report);
}

/* default visibility whatever the build's preset: a hidden definition would interpose nothing */
__attribute__((visibility("default"))) CL_API_ENTRY cl_int CL_API_CALL
clBuildProgram(cl_program program, cl_uint num_devices, const cl_device_id *device_list, const char *options,
               void(CL_CALLBACK *pfn_notify)(cl_program, void *), void *user_data)
{
    atomic_fetch_add(&builds, 1);
    if (options != NULL && strstr(options, "-D") != NULL) {
        const char *count = getenv("BUILD_FAIL_COUNT");
        const int all = count != NULL && strcmp(count, "all") == 0;
        const unsigned long limit = count == NULL ? 1 : strtoul(count, NULL, 10);
        if (all || atomic_fetch_add(&kernel_builds, 1) < limit) {
            atomic_fetch_add(&failed, 1);
            mark(program, 1);
            return CL_BUILD_PROGRAM_FAILURE;
        }
    }
    mark(program, 0);
    build_program_fn real;
    void *sym = preload_next("build_fail_preload", "clBuildProgram");
    memcpy(&real, &sym, sizeof real); /* POSIX's object-to-function pointer conversion, without ISO C's warning */
    return real(program, num_devices, device_list, options, pfn_notify, user_data);
}

typedef cl_int (*build_info_fn)(cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *);

__attribute__((visibility("default"))) CL_API_ENTRY cl_int CL_API_CALL
clGetProgramBuildInfo(cl_program program, cl_device_id device, cl_program_build_info param_name,
                      size_t param_value_size, void *param_value, size_t *param_value_size_ret)
{
    static const char line[] = "Device failed to build the program\n"; /* PoCL's, less the device's name */
    if (param_name == CL_PROGRAM_BUILD_LOG && marked(program)) {
        if (param_value_size_ret != NULL)
            *param_value_size_ret = sizeof line;
        if (param_value != NULL) {
            if (param_value_size < sizeof line)
                return CL_INVALID_VALUE;
            memcpy(param_value, line, sizeof line);
        }
        return CL_SUCCESS;
    }
    build_info_fn real;
    void *sym = preload_next("build_fail_preload", "clGetProgramBuildInfo");
    memcpy(&real, &sym, sizeof real);
    return real(program, device, param_name, param_value_size, param_value, param_value_size_ret);
}
