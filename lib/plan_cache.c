/*
 * plan_cache.c - the context's cache of forward plans and of the kernel objects they use, so that
 * a repeated call (a decoding loop calls with the same shape thousands of times, one key longer
 * each time) plans nothing, looks up no program and creates no kernel.
 *
 * Why a cache of its own over the program cache: a plan costs more than its program lookup (the
 * tensor-core planner tries B = 48 before the 32 that fits, each with a kernel object and two
 * work-group queries), and NVIDIA's OpenCL spends tens of microseconds on that per call, which
 * is what a decoding step at batch 1 costs on the GPU. The key is the planner's inputs: the
 * problem's shape class (everything a plan depends on: types, head_dim, GQA group, heads, batch,
 * seq_q, the features switched on, the bias's broadcasts and alignment, forced block and splits,
 * layout alignment, lse, the tuning settings that apply to the call, the page size of a paged KV
 * cache, whether the batch is packed with variable lengths, whether a sliding window is wide
 * enough for the Hopper kernel's default rule and whether K's and V's row strides let its tiles
 * come through TMA) with seq_k reduced to what plans depend on (its length rounded up to 16 up to
 * 4096, which caps B, and seq_k / 256 up to 1024, which caps the split count: the split rules'
 * minimum part lengths are multiples of 256). The seq_k-dependent fields of the plan (tiles_k,
 * the score matrix, keys per part, workspace) are recomputed per call.
 *
 * Kernel objects are not safe to set arguments on from two threads at once: an entry keeps the
 * kernels not in use, a call takes one (or creates one more from the same program if all are
 * taken), sets its arguments, enqueues and gives it back (OpenCL captures the arguments at
 * enqueue). Entries live until clflash_context_free. One mutex of its own guards the list, which
 * keeps the most recently used first and holds at most MAX_ENTRIES (a shape past them is planned
 * without the cache).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define IDLE_KERNELS 4
#define MAX_ENTRIES 256

typedef struct {
    uint32_t w[20];
    clflash_tune_values tune; /* the tuning settings for the call (tuning_params.c), unset values 0 */
} plan_key;

struct clflash_plan_entry {
    clflash_plan_entry *next;
    plan_key key;
    clflash_flash_kernel fk; /* the plan as made; fk.kernel is not used */
    cl_program program;      /* retained: more kernel objects come from it */
    char name[64];
    cl_kernel idle[IDLE_KERNELS];
    int n_idle;
};

/* What the planners read of a bias's layout besides its presence: its offset and strides in
 * multiples of 2 floats (paired loads) and of 4 (16-byte copies), and which of them are 0 (the
 * dimensions it is broadcast over). Two calls that differ in any of these may get different
 * kernels: a bias staged by 16-byte copies cannot take a layout of odd pairs. */
static uint32_t bias_class(const clflash_problem *p)
{
    const clflash_strides *b = &p->bias_strides;
    const uint64_t all = b->offset | b->batch_stride | b->head_stride | b->seq_stride;
    if (p->bias == NULL)
        return 0;
    return (uint32_t)clflash_bias_pairs(p) | (uint32_t)(all % 4 == 0) << 1 | (uint32_t)(b->batch_stride == 0) << 2 |
           (uint32_t)(b->head_stride == 0) << 3 | (uint32_t)(b->seq_stride == 0) << 4;
}

static void make_key(const clflash_problem *p, int with_lse, plan_key *k)
{
    const uint32_t longest = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    const uint32_t longest16 = (uint32_t)(((uint64_t)longest + 15) / 16 * 16);
    memset(k, 0, sizeof *k);
    k->w[0] = (uint32_t)with_lse;
    k->w[1] = (uint32_t)p->dtype;
    k->w[2] = (uint32_t)p->out_dtype;
    k->w[3] = p->head_dim;
    k->w[4] = p->group;
    k->w[5] = p->heads_q;
    k->w[6] = p->batch;
    k->w[7] = p->seq_q;
    k->w[8] = longest16 < 4096 ? longest16 : 4096;
    k->w[9] = p->seq_k / 256 < 1024 ? p->seq_k / 256 : 1024;
    k->w[10] = p->flags;
    k->w[11] = (p->softcap != 0.0f) | (p->bias != NULL) << 1 | (p->alibi_slopes != NULL) << 2 |
               (p->key_lengths != NULL) << 3 | bias_class(p) << 4;
    k->w[12] = p->block;
    k->w[13] = p->num_splits;
    k->w[14] = clflash_aligned8(&p->q) | clflash_aligned8(&p->k) << 1 | clflash_aligned8(&p->v) << 2 |
              clflash_aligned8(&p->o) << 3;
    k->w[15] = p->page_size; /* 0 without a paged KV cache */
    k->w[16] = (uint32_t)p->varlen; /* a variable-length batch builds the kernels with VARLEN=1 */
    k->w[17] = (uint32_t)clflash_kv_token_major(p); /* the CPU decoding kernel takes whole key slots */
    k->w[18] = (uint32_t)clflash_nv_wgmma_wide_window(p); /* the Hopper kernel's default takes wide windows */
    k->w[19] = (uint32_t)clflash_nv_wgmma_tma_strides(p); /* its tiles through TMA: K and V rows a map describes */
    memcpy(&k->tune, &p->tune, sizeof k->tune); /* clflash_tune_resolve zeroes what is unset, padding too */
}

/* The plan fields that depend on seq_k exactly, for this call's problem. */
static void refresh(clflash_flash_kernel *fk, const clflash_problem *p)
{
    fk->plan.tiles_k = ((uint64_t)p->seq_k + fk->plan.block - 1) / fk->plan.block;
    fk->plan.score_matrix_bytes = clflash_score_matrix_bytes(p->seq_q, p->seq_k, p->out_elem_size);
    clflash_set_split(fk, p, fk->plan.splits, fk->plan.packed_heads);
}

/* A new entry for a kernel just made (the kernel stays the caller's, to be given back), with the
 * plan fk (NULL for a kernel without one); NULL (and the failure's detail) if it cannot be made. */
static clflash_plan_entry *new_entry(const plan_key *key, const clflash_flash_kernel *fk, cl_kernel kernel)
{
    clflash_plan_entry *e = calloc(1, sizeof *e);
    if (e == NULL) {
        clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "allocating a plan cache entry failed");
        return NULL;
    }
    e->key = *key;
    if (fk) {
        e->fk = *fk;
        e->fk.kernel = NULL;
        e->fk.entry = NULL;
    }
    if (clGetKernelInfo(kernel, CL_KERNEL_PROGRAM, sizeof e->program, &e->program, NULL) != CL_SUCCESS ||
        clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof e->name, e->name, NULL) != CL_SUCCESS ||
        clRetainProgram(e->program) != CL_SUCCESS) {
        clflash_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "reading the program of a kernel to cache failed");
        free(e);
        return NULL;
    }
    return e;
}

/* The entry of `key` and, if it has one idle, a kernel taken from it. */
static clflash_plan_entry *find_and_take(clflash_context *c, const plan_key *key, cl_kernel *kernel)
{
    pthread_mutex_lock(&c->plan_lock);
    clflash_plan_entry **at = &c->plans, *e;
    while ((e = *at) != NULL && memcmp(&e->key, key, sizeof *key) != 0)
        at = &e->next;
    if (e && at != &c->plans) { /* to the front: a loop's shape is found first next time */
        *at = e->next;
        e->next = c->plans;
        c->plans = e;
    }
    *kernel = e && e->n_idle > 0 ? e->idle[--e->n_idle] : NULL;
    pthread_mutex_unlock(&c->plan_lock);
    return e;
}

/* A kernel of a found entry: the one taken, or one more from its program. */
static clflash_status entry_kernel(clflash_plan_entry *e, cl_kernel *kernel)
{
    cl_int err = CL_SUCCESS;
    if (*kernel == NULL && (*kernel = clCreateKernel(e->program, e->name, &err)) == NULL)
        return clflash_fail(err, "clCreateKernel(%s) failed", e->name);
    return CLFLASH_SUCCESS;
}

/* Adds an entry for key made from kernel (and fk) into *out; *out is NULL if another thread added
 * the key meanwhile or the cache is full (the kernel is then simply not cached). Fails only when
 * the entry cannot be made. */
static clflash_status insert(clflash_context *c, const plan_key *key, const clflash_flash_kernel *fk,
                             cl_kernel kernel, clflash_plan_entry **out)
{
    clflash_plan_entry *fresh = new_entry(key, fk, kernel), *e;
    *out = NULL;
    if (fresh == NULL)
        return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    int entries = 0;
    pthread_mutex_lock(&c->plan_lock);
    for (e = c->plans; e && memcmp(&e->key, key, sizeof *key) != 0; entries++)
        e = e->next;
    const int room = e == NULL && entries < MAX_ENTRIES;
    if (room) {
        fresh->next = c->plans;
        c->plans = fresh;
    }
    pthread_mutex_unlock(&c->plan_lock);
    if (room) {
        *out = fresh;
    } else {
        clReleaseProgram(fresh->program);
        free(fresh);
    }
    return CLFLASH_SUCCESS;
}

clflash_status clflash_cached_plan(clflash_context *c, const clflash_problem *p, int with_lse,
                                   clflash_status (*plan)(clflash_context *, const clflash_problem *, int, uint32_t,
                                                          clflash_flash_kernel *),
                                   clflash_flash_kernel *out)
{
    plan_key key;
    clflash_status st;
    make_key(p, with_lse, &key);
    cl_kernel kernel;
    clflash_plan_entry *e = find_and_take(c, &key, &kernel);
    if (e) { /* a hit: the entry never changes, only its idle list */
        if ((st = entry_kernel(e, &kernel)) != CLFLASH_SUCCESS)
            return st;
        *out = e->fk;
        out->kernel = kernel;
        out->entry = e;
        refresh(out, p);
        return CLFLASH_SUCCESS;
    }
    st = plan(c, p, with_lse, 0, out);
    out->entry = NULL;
    if (st == CLFLASH_SUCCESS && (st = insert(c, &key, out, out->kernel, &out->entry)) != CLFLASH_SUCCESS) {
        clReleaseKernel(out->kernel);
        out->kernel = NULL;
    }
    return st;
}

clflash_status clflash_cached_kernel(clflash_context *c, const uint32_t *words, size_t n_words,
                                     clflash_status (*make)(clflash_context *, const void *, cl_kernel *),
                                     const void *arg, cl_kernel *out, clflash_plan_entry **entry)
{
    plan_key key;
    clflash_status st;
    memset(&key, 0, sizeof key);
    key.w[0] = 0xffffffffu; /* no plan's first word (with_lse is 0 or 1) */
    for (size_t i = 0; i < n_words && i + 1 < sizeof key.w / sizeof key.w[0]; i++)
        key.w[i + 1] = words[i];
    cl_kernel kernel;
    clflash_plan_entry *e = find_and_take(c, &key, &kernel);
    if (e) {
        if ((st = entry_kernel(e, &kernel)) != CLFLASH_SUCCESS)
            return st;
        *out = kernel;
        *entry = e;
        return CLFLASH_SUCCESS;
    }
    *entry = NULL;
    if ((st = make(c, arg, out)) == CLFLASH_SUCCESS && (st = insert(c, &key, NULL, *out, entry)) != CLFLASH_SUCCESS) {
        clReleaseKernel(*out);
        *out = NULL;
    }
    return st;
}

void clflash_cached_kernel_done(clflash_context *c, clflash_plan_entry *e, cl_kernel k)
{
    if (k == NULL)
        return;
    if (e) {
        pthread_mutex_lock(&c->plan_lock);
        if (e->n_idle < IDLE_KERNELS) {
            e->idle[e->n_idle++] = k;
            k = NULL;
        }
        pthread_mutex_unlock(&c->plan_lock);
    }
    if (k)
        clReleaseKernel(k);
}

void clflash_flash_kernel_done(clflash_context *c, clflash_flash_kernel *fk)
{
    clflash_cached_kernel_done(c, fk->entry, fk->kernel);
    fk->kernel = NULL;
}

void clflash_plan_cache_free(clflash_context *c)
{
    while (c->plans) {
        clflash_plan_entry *e = c->plans;
        c->plans = e->next;
        for (int i = 0; i < e->n_idle; i++)
            clReleaseKernel(e->idle[i]);
        clReleaseProgram(e->program);
        free(e);
    }
}
