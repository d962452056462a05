/*
 * append.c - clflash_append_kv: checks a call that writes a decoding step's new keys and values into
 * a KV cache (contiguous or paged), with the rotary position embedding on the new keys and the
 * step's queries, and enqueues cl/kv_append.cl's kernels (and the lengths' advance, if asked).
 *
 * Why a file of its own: it is the one entry point that writes into a caller's cache rather than
 * into an output; its checks (the cache's extent, the pages, the rotary tables, buffers that must
 * not overlap) are its own, and the kernels are cached like the merge's.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define ROWS_KERNEL "append_rows"
#define ADVANCE_KERNEL "append_advance"
#define GROUP 64 /* work-items per work-group of both kernels */

/* The descriptor resolved: strides filled in, the cache's outer dimensions. */
typedef struct {
    clflash_append_desc d;
    uint32_t heads_q;
    uint64_t capacity;               /* positions a sequence holds */
    uint32_t cache_batch, cache_seq; /* the cache tensors' outer dimensions: (batch, capacity) or
                                        paged (num_pages, page_size) */
    clflash_strides k_new, v_new, k_cache, v_cache, q;
    size_t elem_size;
} append_problem;

/* What the kernels are built for: the key of the kernel cache. */
typedef struct {
    uint32_t tag, dtype, head_dim, rot_half, interleaved, page_size, advance;
} append_build;

static clflash_status make_kernel(clflash_context *c, const void *arg, cl_kernel *kernel)
{
    const append_build *ab = arg;
    char defines[512], features[256], paging[64] = "";
    cl_program prog;
    cl_int err;
    clflash_status st;
    /* the storage type (output alike), every feature switch off */
    clflash_problem as_built = {0};
    as_built.dtype = as_built.out_dtype = (clflash_dtype)ab->dtype;
    clflash_feature_defines(&as_built, 0, features, sizeof features);
    if (ab->page_size)
        snprintf(paging, sizeof paging, " -D PAGE_SIZE=%u", ab->page_size);
    snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D ROT_HALF=%u -D INTERLEAVED=%u -D PAGED=%d%s", features,
             ab->head_dim, ab->rot_half, ab->interleaved, ab->page_size != 0, paging);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_KV_APPEND, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    const char *name = ab->advance ? ADVANCE_KERNEL : ROWS_KERNEL;
    *kernel = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", name);
    return CLFLASH_SUCCESS;
}

static int dtype_ok(clflash_dtype t)
{
    return t == CLFLASH_F32 || t == CLFLASH_F16 || t == CLFLASH_BF16;
}

/* The paging fields, as clflash_attention_desc's; sets the cache's dimensions. */
static clflash_status resolve_cache(const clflash_append_desc *d, append_problem *a)
{
    if (d->block_table == NULL) {
        if (d->page_size || d->pages_per_seq || d->num_pages)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                "page_size, pages_per_seq or num_pages is set but block_table is NULL");
        if (d->capacity == 0 || d->capacity > CLFLASH_MAX_SEQ_K)
            return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "capacity %u is not in 1 .. %u", d->capacity,
                                CLFLASH_MAX_SEQ_K);
        a->capacity = d->capacity;
        a->cache_batch = d->batch;
        a->cache_seq = d->capacity;
        return CLFLASH_SUCCESS;
    }
    const clflash_status st = clflash_check_pages(d->page_size, d->pages_per_seq, d->num_pages);
    if (st != CLFLASH_SUCCESS)
        return st;
    a->capacity = (uint64_t)d->pages_per_seq * d->page_size;
    if (d->capacity != 0 && d->capacity != a->capacity)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE,
                            "capacity %u is not pages_per_seq %u x page_size %u (or 0) for a paged cache", d->capacity,
                            d->pages_per_seq, d->page_size);
    a->cache_batch = d->num_pages;
    a->cache_seq = d->page_size;
    return CLFLASH_SUCCESS;
}

static clflash_status resolve(const clflash_append_desc *caller, append_problem *a)
{
    clflash_append_desc *const d = &a->d;
    clflash_status st;
    if (caller == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "the append descriptor is NULL");
    if ((st = clflash_read_struct(caller, sizeof *d, clflash_append_desc_min_size, d, CLFLASH_ERROR_INVALID_ARGUMENT,
                                  "d")) != CLFLASH_SUCCESS)
        return st;
    if (!dtype_ok(d->dtype))
        return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "dtype %d is not F32, F16 or BF16", (int)d->dtype);
    a->elem_size = clflash_dtype_size(d->dtype);
    if (d->batch == 0 || d->heads_kv == 0 || d->new_tokens == 0 || d->head_dim == 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is 0; every dimension must be at least 1",
                            d->batch == 0      ? "batch"
                            : d->heads_kv == 0 ? "heads_kv"
                            : d->new_tokens == 0 ? "new_tokens"
                                                 : "head_dim");
    a->heads_q = d->heads_q ? d->heads_q : d->heads_kv;
    if (d->batch > CLFLASH_MAX_BATCH || d->heads_kv > CLFLASH_MAX_HEADS || a->heads_q > CLFLASH_MAX_HEADS ||
        d->new_tokens > CLFLASH_MAX_SEQ_Q || d->head_dim > CLFLASH_MAX_HEAD_DIM)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is above its limit",
                            d->batch > CLFLASH_MAX_BATCH        ? "batch"
                            : d->head_dim > CLFLASH_MAX_HEAD_DIM ? "head_dim"
                            : d->new_tokens > CLFLASH_MAX_SEQ_Q  ? "new_tokens"
                                                                 : "a head count");
    if (d->flags & ~(uint32_t)(CLFLASH_APPEND_ADVANCE_LENGTHS | CLFLASH_ROTARY_INTERLEAVED))
        return clflash_fail(CLFLASH_ERROR_INVALID_FLAGS, "flags 0x%x has unknown bits", d->flags);
    if ((st = resolve_cache(d, a)) != CLFLASH_SUCCESS)
        return st;
    if (d->rotary_dim == 0) {
        if (d->rotary_cos || d->rotary_sin || d->rotary_positions)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                "rotary tables or rotary_positions are set but rotary_dim is 0");
        if (d->flags & CLFLASH_ROTARY_INTERLEAVED)
            return clflash_fail(CLFLASH_ERROR_INVALID_FLAGS, "CLFLASH_ROTARY_INTERLEAVED is set but rotary_dim is 0");
    } else {
        if (d->rotary_dim % 2 != 0 || d->rotary_dim > d->head_dim)
            return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "rotary_dim %u must be even and at most head_dim %u",
                                d->rotary_dim, d->head_dim);
        if (d->rotary_positions == 0)
            return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "rotary_positions is 0 with rotary_dim %u", d->rotary_dim);
        if (d->rotary_cos == NULL || d->rotary_sin == NULL)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "rotary_dim is %u but rotary_%s is NULL", d->rotary_dim,
                                d->rotary_cos == NULL ? "cos" : "sin");
    }
    const struct { const clflash_layout *in; clflash_strides *out; uint32_t batch, heads, seq; const char *name; } t[5] = {
        {&d->k_new, &a->k_new, d->batch, d->heads_kv, d->new_tokens, "k_new"},
        {&d->v_new, &a->v_new, d->batch, d->heads_kv, d->new_tokens, "v_new"},
        {&d->k_cache, &a->k_cache, a->cache_batch, d->heads_kv, a->cache_seq, "k_cache"},
        {&d->v_cache, &a->v_cache, a->cache_batch, d->heads_kv, a->cache_seq, "v_cache"},
        {&d->q, &a->q, d->batch, a->heads_q, d->new_tokens, "q"}};
    for (int i = 0; i < 5; i++) {
        if (!clflash_resolve_strides(t[i].in, t[i].heads, t[i].seq, d->head_dim, t[i].out) ||
            clflash_tensor_extent_bytes(t[i].out, t[i].batch, t[i].heads, t[i].seq, d->head_dim, a->elem_size) ==
                UINT64_MAX)
            return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the layout of %s addresses more than 2^64 bytes",
                                t[i].name);
        /* what the kernel writes: no two of its elements may share an address */
        if (i >= 2 && !clflash_output_disjoint(t[i].out, t[i].batch, t[i].heads, t[i].seq, d->head_dim))
            return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the layout of %s makes rows or heads overlap",
                                t[i].name);
    }
    return CLFLASH_SUCCESS;
}

/* The byte range [*first, *end) of a tensor's elements. */
static void byte_range(const append_problem *a, const clflash_strides *s, uint32_t batch, uint32_t heads,
                       uint32_t seq, uint64_t *first, uint64_t *end)
{
    *first = s->offset * a->elem_size;
    *end = clflash_tensor_extent_bytes(s, batch, heads, seq, a->d.head_dim, a->elem_size);
}

/* The buffers' sizes, and that nothing the kernels write shares bytes with anything else of the call. */
static clflash_status check_buffers(const append_problem *a, cl_mem q, cl_mem k_new, cl_mem v_new, cl_mem k_cache,
                                    cl_mem v_cache)
{
    const clflash_append_desc *d = &a->d;
    const uint32_t b = d->batch, hk = d->heads_kv, n = d->new_tokens;
    const struct { cl_mem buf; const clflash_strides *s; uint32_t batch, heads, seq; const char *name; int written; } t[5] = {
        {k_new, &a->k_new, b, hk, n, "k_new", 0},
        {v_new, &a->v_new, b, hk, n, "v_new", 0},
        {k_cache, &a->k_cache, a->cache_batch, hk, a->cache_seq, "k_cache", 1},
        {v_cache, &a->v_cache, a->cache_batch, hk, a->cache_seq, "v_cache", 1},
        {q, &a->q, b, a->heads_q, n, "q", 1}};
    clflash_status st;
    for (int i = 0; i < 5; i++) {
        if (t[i].buf == NULL && i == 4)
            continue; /* no queries */
        uint64_t first, end;
        byte_range(a, t[i].s, t[i].batch, t[i].heads, t[i].seq, &first, &end);
        if ((st = clflash_check_buffer(t[i].buf, end, t[i].name)) != CLFLASH_SUCCESS)
            return st;
    }
    if ((st = clflash_check_buffer(d->cache_lengths, (uint64_t)b * sizeof(cl_int), "cache_lengths")) != CLFLASH_SUCCESS)
        return st;
    if (d->block_table &&
        (st = clflash_check_buffer(d->block_table, (uint64_t)b * d->pages_per_seq * sizeof(cl_int), "block_table")) !=
            CLFLASH_SUCCESS)
        return st;
    if (d->rotary_dim) {
        const uint64_t table = (uint64_t)d->rotary_positions * (d->rotary_dim / 2) * sizeof(float);
        if ((st = clflash_check_buffer(d->rotary_cos, table, "rotary_cos")) != CLFLASH_SUCCESS ||
            (st = clflash_check_buffer(d->rotary_sin, table, "rotary_sin")) != CLFLASH_SUCCESS)
            return st;
    }
    /* a written tensor against every other tensor in the same buffer */
    for (int i = 2; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            if (i == j || t[i].buf == NULL || t[i].buf != t[j].buf)
                continue;
            uint64_t fi, ei, fj, ej;
            byte_range(a, t[i].s, t[i].batch, t[i].heads, t[i].seq, &fi, &ei);
            byte_range(a, t[j].s, t[j].batch, t[j].heads, t[j].seq, &fj, &ej);
            if (fi < ej && fj < ei)
                return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s overlaps %s in the same buffer", t[i].name,
                                    t[j].name);
        }
    /* the lengths, table and rotary tables are read while the tensors are written */
    const cl_mem inputs[4] = {d->cache_lengths, d->block_table, d->rotary_cos, d->rotary_sin};
    for (int i = 0; i < 4; i++)
        for (int j = 2; j < 5; j++)
            if (inputs[i] && inputs[i] == t[j].buf)
                return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                    "cache_lengths, block_table and the rotary tables must not be a buffer the call "
                                    "writes (%s)",
                                    t[j].name);
    if ((d->flags & CLFLASH_APPEND_ADVANCE_LENGTHS) &&
        (d->cache_lengths == d->block_table || d->cache_lengths == d->rotary_cos || d->cache_lengths == d->rotary_sin))
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                            "cache_lengths, which the call advances, is also the block table or a rotary table");
    return CLFLASH_SUCCESS;
}

/* Enqueues append_rows over parts 0 .. parts - 1 (keys, values, queries). */
static cl_int enqueue_rows(const append_problem *a, cl_kernel k, cl_command_queue qu, cl_mem q, cl_mem k_new,
                           cl_mem v_new, cl_mem k_cache, cl_mem v_cache, cl_uint num_wait, const cl_event *wait,
                           cl_event *done)
{
    const clflash_append_desc *d = &a->d;
    const cl_uint heads_kv = d->heads_kv, heads_q = a->heads_q, new_tokens = d->new_tokens;
    const cl_uint pages_per_seq = d->pages_per_seq, num_pages = d->num_pages, positions = d->rotary_positions;
    const cl_ulong capacity = a->capacity;
    const cl_ulong rows_kv = (cl_ulong)d->batch * heads_kv * new_tokens, rows_q = (cl_ulong)d->batch * heads_q * new_tokens;
    const clflash_arg args[] = {{sizeof(cl_mem), q ? &q : NULL},
                                {sizeof(cl_mem), &k_new},
                                {sizeof(cl_mem), &v_new},
                                {sizeof(cl_mem), &k_cache},
                                {sizeof(cl_mem), &v_cache},
                                {sizeof(cl_mem), &d->cache_lengths},
                                {sizeof(cl_mem), d->block_table ? &d->block_table : NULL},
                                {sizeof(cl_mem), d->rotary_cos ? &d->rotary_cos : NULL},
                                {sizeof(cl_mem), d->rotary_sin ? &d->rotary_sin : NULL},
                                {sizeof(cl_uint), &heads_kv},
                                {sizeof(cl_uint), &heads_q},
                                {sizeof(cl_uint), &new_tokens},
                                {sizeof(cl_ulong), &capacity},
                                {sizeof(cl_uint), &pages_per_seq},
                                {sizeof(cl_uint), &num_pages},
                                {sizeof(cl_uint), &positions},
                                {sizeof(cl_ulong), &rows_kv},
                                {sizeof(cl_ulong), &rows_q}};
    cl_int err = clflash_set_args(k, 0, args, sizeof args / sizeof args[0]);
    const clflash_strides *lay[5] = {&a->k_new, &a->v_new, &a->k_cache, &a->v_cache, &a->q};
    cl_uint next = (cl_uint)(sizeof args / sizeof args[0]);
    for (int i = 0; i < 5 && err == CL_SUCCESS; i++) {
        const cl_ulong v[4] = {lay[i]->offset, lay[i]->batch_stride, lay[i]->head_stride, lay[i]->seq_stride};
        for (int j = 0; j < 4 && err == CL_SUCCESS; j++)
            err = clSetKernelArg(k, next++, sizeof(cl_ulong), &v[j]);
    }
    const uint64_t units = d->head_dim - d->rotary_dim / 2;
    const uint64_t rows = rows_q > rows_kv && q ? rows_q : rows_kv;
    const size_t local[2] = {GROUP, 1};
    const size_t global[2] = {(size_t)((rows * units + GROUP - 1) / GROUP * GROUP), q ? 3u : 2u};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(qu, k, 2, NULL, global, local, num_wait, wait, done);
    return err;
}

clflash_status clflash_append_kv(clflash_context *c, const clflash_append_desc *desc, cl_command_queue queue, cl_mem q,
                                 cl_mem k_new, cl_mem v_new, cl_mem k_cache, cl_mem v_cache, cl_uint num_wait,
                                 const cl_event *wait, cl_event *done)
{
    append_problem a;
    cl_command_queue qu;
    clflash_status st;
    clflash_clear_detail();
    memset(&a, 0, sizeof a);
    if ((st = clflash_check_context(c)) != CLFLASH_SUCCESS || (st = resolve(desc, &a)) != CLFLASH_SUCCESS ||
        (st = clflash_check_queue(c, queue, num_wait, wait, &qu)) != CLFLASH_SUCCESS ||
        (st = check_buffers(&a, q, k_new, v_new, k_cache, v_cache)) != CLFLASH_SUCCESS)
        return st;
    const clflash_append_desc *d = &a.d;
    const int advance = (d->flags & CLFLASH_APPEND_ADVANCE_LENGTHS) != 0;
    append_build rows_build = {0x41505052u, (uint32_t)d->dtype, d->head_dim, d->rotary_dim / 2,
                               (d->flags & CLFLASH_ROTARY_INTERLEAVED) != 0, d->block_table ? d->page_size : 0, 0};
    append_build advance_build = rows_build;
    advance_build.advance = 1;
    cl_kernel rows_k = NULL, advance_k = NULL;
    clflash_plan_entry *rows_e = NULL, *advance_e = NULL;
    /* both kernels exist before either is enqueued, so that a failed build enqueues nothing */
    if ((st = clflash_cached_kernel(c, (const uint32_t *)&rows_build, sizeof rows_build / sizeof(uint32_t), make_kernel,
                                    &rows_build, &rows_k, &rows_e)) != CLFLASH_SUCCESS)
        return st;
    if (advance && (st = clflash_cached_kernel(c, (const uint32_t *)&advance_build,
                                               sizeof advance_build / sizeof(uint32_t), make_kernel, &advance_build,
                                               &advance_k, &advance_e)) != CLFLASH_SUCCESS) {
        clflash_cached_kernel_done(c, rows_e, rows_k);
        return st;
    }
    cl_event rows_done = NULL;
    cl_int err = enqueue_rows(&a, rows_k, qu, q, k_new, v_new, k_cache, v_cache, num_wait, wait,
                              advance ? &rows_done : done);
    if (err == CL_SUCCESS && advance) {
        const cl_uint batch = d->batch, new_tokens = d->new_tokens;
        const clflash_arg args[] = {{sizeof(cl_mem), &d->cache_lengths},
                                    {sizeof(cl_uint), &batch},
                                    {sizeof(cl_uint), &new_tokens}};
        const size_t local = GROUP, global = ((size_t)batch + GROUP - 1) / GROUP * GROUP;
        err = clflash_set_args(advance_k, 0, args, sizeof args / sizeof args[0]);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(qu, advance_k, 1, NULL, &global, &local, 1, &rows_done, done);
    }
    if (rows_done)
        clReleaseEvent(rows_done);
    clflash_cached_kernel_done(c, rows_e, rows_k);
    if (advance_k)
        clflash_cached_kernel_done(c, advance_e, advance_k);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "enqueueing clflash_append_kv's kernels failed");
    return CLFLASH_SUCCESS;
}
