/*
 * merge.c - clflash_merge_states and the enqueue both it and the split-KV forward use: partial
 * results (O_p, lse_p) of the same rows over disjoint key sets merged into one O and lse by
 * cl/merge_states.cl.
 *
 * Why one enqueue for both: the split path's combine and the public call must give the same bits
 * for the same parts, so they build the same kernel the same way; only the checks differ (the
 * split path's parts are clflash's own workspace).
 */
#include "internal.h"

#include <stdio.h>

#define KERNEL_NAME "merge_states"

/* Work-items per row: a power of two, no more than the columns need, up to 128 where the rows are
 * few and up to 32 where they are many. With few rows (a decoding step's batch x heads) the
 * merge's time is the latency of its loads, so the more work-items share a row's columns, the
 * sooner it ends (32 rows of 33 parts on the H200: 14 us with at most 32 per row); with many rows
 * the device is full either way and fewer, longer work-items cost less. */
#define MERGE_FEW_ROWS 4096u
uint32_t clflash_merge_lanes(uint32_t head_dim, uint64_t rows)
{
    const uint32_t most = rows < MERGE_FEW_ROWS ? 128 : 32;
    uint32_t lanes = 1;
    while (lanes < most && lanes < head_dim)
        lanes *= 2;
    return lanes;
}

/* What the merge kernel is built for; the plan cache's key. */
typedef struct {
    uint32_t part_dtype, dtype, head_dim, with_lse, lanes, varlen;
} merge_build;

/* Rows per work-group: 128 work-items where the rows are narrow, but at most 8 rows, whose parts'
 * lse values the kernel keeps in local memory (CLFLASH_MAX_SPLITS floats per row: 8 KiB). */
static uint32_t rows_per_group(uint32_t lanes)
{
    const uint32_t rows = lanes >= 128 ? 1 : 128 / lanes;
    return rows < 8 ? rows : 8;
}

void clflash_merge_shape_defines(uint32_t lanes, char *buf, size_t size)
{
    snprintf(buf, size, "-D MERGE_LANES=%u -D MERGE_ROWS=%u -D MERGE_MAX_PARTS=%u", lanes, rows_per_group(lanes),
             CLFLASH_MAX_SPLITS);
}

static clflash_status make_merge_kernel(clflash_context *c, const void *arg, cl_kernel *kernel)
{
    const merge_build *mb = arg;
    const uint32_t lanes = mb->lanes;
    char defines[400], features[256], shape[100];
    cl_program prog;
    cl_int err;
    clflash_status st;
    /* the storage types and WITH_LSE, with every feature switch off: a problem without features */
    clflash_problem as_built = {0};
    as_built.dtype = (clflash_dtype)mb->part_dtype;
    as_built.out_dtype = (clflash_dtype)mb->dtype;
    as_built.varlen = (int)mb->varlen;
    clflash_feature_defines(&as_built, (int)mb->with_lse, features, sizeof features);
    clflash_merge_shape_defines(lanes, shape, sizeof shape);
    snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u %s", features, mb->head_dim, shape);
    if ((st = clflash_get_program(c, CLFLASH_SOURCE_MERGE_STATES, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, KERNEL_NAME, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", KERNEL_NAME);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_enqueue_merge(clflash_context *c, const clflash_merge_problem *m, cl_command_queue queue,
                                     cl_mem part_o, cl_mem part_lse, cl_mem o, cl_mem lse, cl_uint num_wait,
                                     const cl_event *wait, cl_event *done)
{
    const cl_ulong rows = (cl_ulong)m->batch * m->heads * m->seq;
    const uint32_t lanes = clflash_merge_lanes(m->head_dim, rows);
    const merge_build mb = {(uint32_t)m->part_dtype, (uint32_t)m->dtype, m->head_dim, lse != NULL, lanes,
                            m->cu_seqlens_q != NULL};
    cl_kernel kernel;
    clflash_plan_entry *entry;
    cl_int err;
    clflash_status st = clflash_cached_kernel(c, (const uint32_t *)&mb, sizeof mb / sizeof(uint32_t),
                                              make_merge_kernel, &mb, &kernel, &entry);
    if (st != CLFLASH_SUCCESS)
        return st;
    const cl_uint parts = m->parts, heads = m->heads, seq = m->seq;
    const cl_ulong lay[10] = {m->part_o.offset, m->part_o.batch_stride, m->part_o.head_stride, m->part_o.seq_stride,
                              m->part_o_stride,  m->part_lse_stride,     m->o.offset,           m->o.batch_stride,
                              m->o.head_stride,  m->o.seq_stride};
    const clflash_arg args[] = {{sizeof(cl_mem), &part_o},  {sizeof(cl_mem), &part_lse}, {sizeof(cl_mem), &o},
                                {sizeof(cl_mem), lse ? &lse : NULL},
                                {sizeof(cl_uint), &parts},  {sizeof(cl_uint), &heads},   {sizeof(cl_uint), &seq},
                                {sizeof(cl_ulong), &rows}};
    const cl_uint total_q = m->total_q;
    const clflash_arg varlen_args[] = {{sizeof(cl_mem), m->cu_seqlens_q ? &m->cu_seqlens_q : NULL},
                                       {sizeof(cl_uint), &total_q}};
    err = clflash_set_args(kernel, 0, args, sizeof args / sizeof args[0]);
    for (cl_uint i = 0; err == CL_SUCCESS && i < 10; i++)
        err = clSetKernelArg(kernel, 8 + i, sizeof(cl_ulong), &lay[i]);
    if (err == CL_SUCCESS)
        err = clflash_set_args(kernel, 18, varlen_args, sizeof varlen_args / sizeof varlen_args[0]);
    const size_t local = (size_t)lanes * rows_per_group(lanes);
    const size_t global = (size_t)((rows + rows_per_group(lanes) - 1) / rows_per_group(lanes)) * local;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, num_wait, wait, done);
    clflash_cached_kernel_done(c, entry, kernel);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "enqueueing %s failed", KERNEL_NAME);
    return CLFLASH_SUCCESS;
}

static int merge_dtype_ok(clflash_dtype t)
{
    return t == CLFLASH_F32 || t == CLFLASH_F16 || t == CLFLASH_BF16;
}

/* Checks the descriptor and resolves its defaults. */
static clflash_status resolve_merge(const clflash_merge_desc *caller, clflash_merge_problem *m)
{
    clflash_merge_desc d;
    clflash_status st;
    if (caller == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "the merge descriptor is NULL");
    if ((st = clflash_read_struct(caller, sizeof d, clflash_merge_desc_min_size, &d, CLFLASH_ERROR_INVALID_ARGUMENT,
                                  "m")) != CLFLASH_SUCCESS)
        return st;
    if (d.parts == 0 || d.parts > CLFLASH_MAX_SPLITS)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "parts is %u; it must be 1 to %u", d.parts, CLFLASH_MAX_SPLITS);
    if (d.batch == 0 || d.heads == 0 || d.seq == 0 || d.head_dim == 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is 0; every dimension must be at least 1",
                            d.batch == 0 ? "batch" : d.heads == 0 ? "heads" : d.seq == 0 ? "seq" : "head_dim");
    if (d.batch > CLFLASH_MAX_BATCH || d.heads > CLFLASH_MAX_HEADS || d.seq > CLFLASH_MAX_SEQ_K ||
        d.head_dim > CLFLASH_MAX_HEAD_DIM)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is above its limit",
                            d.batch > CLFLASH_MAX_BATCH   ? "batch"
                            : d.heads > CLFLASH_MAX_HEADS ? "heads"
                            : d.seq > CLFLASH_MAX_SEQ_K   ? "seq"
                                                          : "head_dim");
    if (!merge_dtype_ok(d.part_dtype))
        return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "part_dtype %d is not F32, F16 or BF16", (int)d.part_dtype);
    m->dtype = d.dtype ? d.dtype : d.part_dtype;
    if (!merge_dtype_ok(m->dtype))
        return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "dtype %d is not F32, F16 or BF16", (int)d.dtype);
    m->part_dtype = d.part_dtype;
    m->cu_seqlens_q = NULL; /* the public call merges ordinary [batch][heads][seq] rows */
    m->total_q = 0;
    m->parts = d.parts;
    m->batch = d.batch;
    m->heads = d.heads;
    m->seq = d.seq;
    m->head_dim = d.head_dim;
    if (!clflash_resolve_strides(&d.part_o, d.heads, d.seq, d.head_dim, &m->part_o) ||
        !clflash_resolve_strides(&d.o, d.heads, d.seq, d.head_dim, &m->o))
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "a layout addresses more than 2^64 bytes");
    const uint64_t part_extent = clflash_tensor_extent_bytes(&m->part_o, d.batch, d.heads, d.seq, d.head_dim, 1);
    m->part_o_stride = d.part_o_stride ? d.part_o_stride : part_extent;
    m->part_lse_stride = d.part_lse_stride ? d.part_lse_stride : (uint64_t)d.batch * d.heads * d.seq;
    if (part_extent == UINT64_MAX ||
        clflash_tensor_extent_bytes(&m->o, d.batch, d.heads, d.seq, d.head_dim, clflash_dtype_size(m->dtype)) ==
            UINT64_MAX)
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "a layout addresses more than 2^64 bytes");
    if (!clflash_output_disjoint(&m->o, d.batch, d.heads, d.seq, d.head_dim))
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the layout of o makes rows or heads overlap");
    return CLFLASH_SUCCESS;
}

/* (parts - 1) * stride + last, in units; UINT64_MAX on overflow. */
static uint64_t parts_extent(uint32_t parts, uint64_t stride, uint64_t last)
{
    const uint64_t steps = clflash_mul_sat(parts - 1u, stride);
    return clflash_add_sat(steps, last);
}

clflash_status clflash_merge_states(clflash_context *c, const clflash_merge_desc *md, cl_command_queue queue,
                                    cl_mem part_o, cl_mem part_lse, cl_mem o, cl_mem lse, cl_uint num_wait,
                                    const cl_event *wait, cl_event *done)
{
    clflash_merge_problem m;
    cl_command_queue qu;
    clflash_status st;
    clflash_clear_detail();
    if ((st = clflash_check_context(c)) != CLFLASH_SUCCESS || (st = resolve_merge(md, &m)) != CLFLASH_SUCCESS ||
        (st = clflash_check_queue(c, queue, num_wait, wait, &qu)) != CLFLASH_SUCCESS)
        return st;

    const size_t ps = clflash_dtype_size(m.part_dtype), os = clflash_dtype_size(m.dtype);
    const uint64_t rows = (uint64_t)m.batch * m.heads * m.seq;
    const uint64_t part_elems = parts_extent(m.parts, m.part_o_stride,
                                             clflash_tensor_extent_bytes(&m.part_o, m.batch, m.heads, m.seq, m.head_dim, 1));
    const uint64_t lse_floats = parts_extent(m.parts, m.part_lse_stride, rows);
    if (part_elems == UINT64_MAX || lse_floats == UINT64_MAX || clflash_mul_sat(part_elems, ps) == UINT64_MAX)
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the parts address more than 2^64 bytes");
    const uint64_t o_end = clflash_tensor_extent_bytes(&m.o, m.batch, m.heads, m.seq, m.head_dim, os);
    if (o != NULL && o == part_lse)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "o and part_lse are the same buffer");
    if ((st = clflash_check_buffer(part_o, part_elems * ps, "part_o")) != CLFLASH_SUCCESS ||
        (st = clflash_check_buffer(part_lse, lse_floats * sizeof(float), "part_lse")) != CLFLASH_SUCCESS ||
        (st = clflash_check_buffer(o, o_end, "o")) != CLFLASH_SUCCESS ||
        (lse && (st = clflash_check_buffer(lse, rows * sizeof(float), "lse")) != CLFLASH_SUCCESS))
        return st;
    if (lse && (lse == part_o || lse == part_lse || lse == o))
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse must be a buffer of its own");
    if (o == part_o) {
        const uint64_t first = m.o.offset * os, p_first = m.part_o.offset * ps, p_end = part_elems * ps;
        if (first < p_end && p_first < o_end)
            return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "o overlaps the parts in the same buffer");
    }
    return clflash_enqueue_merge(c, &m, qu, part_o, part_lse, o, lse, num_wait, wait, done);
}
