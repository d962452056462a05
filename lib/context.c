/*
 * context.c - creating, inspecting and freeing a clflash_context around a caller's OpenCL context
 * and device: the device facts, the owned in-order queue clflash_context_queue gives out, the
 * options (the tuning settings among them, read by tuning_params.c), the environment variable
 * CLFLASH_PORTABLE (read once, when a context is created), and the caches' locks.
 *
 * Why separate: the context's lifetime rules (what is retained, what is owned, what a free
 * releases) are the library's ownership contract; they live in one place.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>


clflash_status clflash_check_context(const clflash_context *c)
{
    if (c == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "the context is NULL");
    if (c->magic != CLFLASH_CONTEXT_MAGIC)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "the context is not a live clflash context");
    return CLFLASH_SUCCESS;
}

clflash_status clflash_read_options(const clflash_context_options *caller, clflash_context_options *opt)
{
    if (caller == NULL) {
        memset(opt, 0, sizeof *opt);
        opt->struct_size = sizeof *opt;
        return CLFLASH_SUCCESS;
    }
    clflash_status st = clflash_read_struct(caller, sizeof *opt, clflash_options_min_size, opt,
                                            CLFLASH_ERROR_INVALID_OPTIONS, "opt");
    if (st != CLFLASH_SUCCESS)
        return st;
    if (opt->threads_per_row > 64)
        return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "threads_per_row %u is above 64", opt->threads_per_row);
    if (opt->build_options && strlen(opt->build_options) > 4096)
        return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "build_options is longer than 4096 characters");
    if (opt->build_options && strstr(opt->build_options, "CLFLASH_CPU_PATH") != NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS,
                            "build_options names CLFLASH_CPU_PATH, which the planner sets; use the tuning setting "
                            "portable.cpu_path=0 or =1 (clflash_context_set_tuning)");
    if (opt->tuning && strlen(opt->tuning) > 65536)
        return clflash_fail(CLFLASH_ERROR_INVALID_OPTIONS, "tuning is longer than 65536 characters");
    return CLFLASH_SUCCESS;
}

int clflash_env_portable_only(void)
{
    const char *e = getenv("CLFLASH_PORTABLE");
    return e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
}

clflash_wgmma_mode clflash_env_wgmma(void)
{
    const char *e = getenv("CLFLASH_WGMMA");
    if (e == NULL || e[0] == '\0')
        return CLFLASH_WGMMA_AUTO;
    return strcmp(e, "0") == 0 ? CLFLASH_WGMMA_OFF : CLFLASH_WGMMA_ALL;
}

clflash_status clflash_context_create(cl_context ctx, cl_device_id dev, const clflash_context_options *caller_opt,
                                      clflash_context **out)
{
    clflash_context *c;
    cl_int err;
    clflash_status st;
    clflash_context_options options;
    const clflash_context_options *const opt = &options;

    clflash_clear_detail();
    if (out == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "out is NULL");
    if (ctx == NULL || dev == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is NULL", ctx == NULL ? "ctx" : "dev");
    if ((st = clflash_read_options(caller_opt, &options)) != CLFLASH_SUCCESS)
        return st;
    const char *extra = opt->build_options ? opt->build_options : "";

    if ((c = calloc(1, sizeof *c)) == NULL)
        return clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating the context failed");
    if ((c->build_options = strdup(extra)) == NULL) {
        free(c);
        return clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "copying build_options failed");
    }
    if ((err = clflash_read_device_info(dev, &c->info)) != CL_SUCCESS) {
        free(c->build_options);
        free(c);
        return clflash_fail(err, "reading the device's properties failed");
    }
    c->queue = clCreateCommandQueue(ctx, dev, 0, &err);
    if (err != CL_SUCCESS) {
        free(c->build_options);
        free(c);
        return clflash_fail(err, "creating the command queue failed (is dev a device of ctx?)");
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0 ||
        (pthread_mutex_init(&c->pool_lock, NULL) != 0 && (pthread_mutex_destroy(&c->lock), 1)) ||
        (pthread_mutex_init(&c->plan_lock, NULL) != 0 &&
         (pthread_mutex_destroy(&c->pool_lock), pthread_mutex_destroy(&c->lock), 1)) ||
        (pthread_mutex_init(&c->tune_lock, NULL) != 0 &&
         (pthread_mutex_destroy(&c->plan_lock), pthread_mutex_destroy(&c->pool_lock),
          pthread_mutex_destroy(&c->lock), 1))) {
        clReleaseCommandQueue(c->queue);
        free(c->build_options);
        free(c);
        return clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "creating the context's locks failed");
    }
    if ((st = clflash_tune_load(c, opt->tuning)) != CLFLASH_SUCCESS) {
        pthread_mutex_destroy(&c->tune_lock);
        pthread_mutex_destroy(&c->plan_lock);
        pthread_mutex_destroy(&c->pool_lock);
        pthread_mutex_destroy(&c->lock);
        clReleaseCommandQueue(c->queue);
        free(c->build_options);
        free(c);
        return st;
    }
    clRetainContext(ctx);
    c->ctx = ctx;
    c->dev = dev;
    c->local_mem_budget = c->info.local_mem_size;
    if (opt->local_mem_budget && opt->local_mem_budget < c->local_mem_budget)
        c->local_mem_budget = opt->local_mem_budget;
    c->threads_per_row = opt->threads_per_row;
    c->portable_only = opt->portable_only || clflash_env_portable_only();
    c->wgmma_mode = clflash_env_wgmma();
    c->magic = CLFLASH_CONTEXT_MAGIC;
    *out = c;
    return CLFLASH_SUCCESS;
}

void clflash_context_free(clflash_context *c)
{
    if (c == NULL || c->magic != CLFLASH_CONTEXT_MAGIC)
        return;
    c->magic = 0;
    clFinish(c->queue);
    clflash_component_slots_free(c);
    clflash_scratch_pool_free(c);
    clflash_plan_cache_free(c);
    clflash_program_cache_free(c);
    clflash_tune_free(c);
    clReleaseCommandQueue(c->queue);
    clReleaseContext(c->ctx);
    pthread_mutex_destroy(&c->tune_lock);
    pthread_mutex_destroy(&c->plan_lock);
    pthread_mutex_destroy(&c->pool_lock);
    pthread_mutex_destroy(&c->lock);
    free(c->build_options);
    free(c);
}

cl_context clflash_context_cl(const clflash_context *c)
{
    return c ? c->ctx : NULL;
}

cl_device_id clflash_context_device(const clflash_context *c)
{
    return c ? c->dev : NULL;
}

cl_command_queue clflash_context_queue(const clflash_context *c)
{
    return c ? c->queue : NULL;
}
