/*
 * validate.c - checks a call's arguments before anything is enqueued, and resolves the
 * descriptor's defaults (heads_kv, scale, strides) into the clflash_problem the kernels use.
 *
 * Why: the library's promise is that a failed call enqueues nothing and touches no caller buffer,
 * and that its status and detail say exactly what was wrong. Every check lives here, in 64-bit
 * arithmetic that cannot overflow, so no dispatcher has to repeat one.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

static const char *dtype_name(clflash_dtype t)
{
    switch (t) {
    case CLFLASH_F32: return "f32";
    case CLFLASH_F16: return "f16";
    case CLFLASH_BF16: return "bf16";
    case CLFLASH_I8: return "i8";
    default: return "unknown";
    }
}

/* a*b+c without wrapping; returns 0 on overflow. */
static int mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return 0;
    if (c > UINT64_MAX - a * b)
        return 0;
    *out = a * b + c;
    return 1;
}

/* Fills each zero stride with its contiguous default; 0 if a default overflows. */
int clflash_resolve_strides(const clflash_layout *in, uint32_t heads, uint32_t seq, uint32_t head_dim,
                           clflash_strides *out)
{
    out->offset = in->offset;
    out->seq_stride = in->seq_stride ? in->seq_stride : head_dim;
    if (in->head_stride)
        out->head_stride = in->head_stride;
    else if (!mul_add(seq, out->seq_stride, 0, &out->head_stride))
        return 0;
    if (in->batch_stride)
        out->batch_stride = in->batch_stride;
    else if (!mul_add(heads, out->head_stride, 0, &out->batch_stride))
        return 0;
    return 1;
}

/* Index one past the tensor's last element, or UINT64_MAX on overflow. */
static uint64_t extent_elems(const clflash_strides *s, uint32_t batch, uint32_t heads, uint32_t seq,
                             uint32_t head_dim)
{
    uint64_t e = s->offset;
    if (!mul_add(batch - 1u, s->batch_stride, e, &e) || !mul_add(heads - 1u, s->head_stride, e, &e) ||
        !mul_add(seq - 1u, s->seq_stride, e, &e) || !mul_add(1, head_dim, e, &e))
        return UINT64_MAX;
    return e;
}

int clflash_aligned8(const clflash_strides *s)
{
    return s->offset % 8 == 0 && s->batch_stride % 8 == 0 && s->head_stride % 8 == 0 && s->seq_stride % 8 == 0;
}

uint64_t clflash_tensor_extent_bytes(const clflash_strides *s, uint32_t batch, uint32_t heads,
                                     uint32_t seq, uint32_t head_dim, size_t elem_size)
{
    uint64_t e = extent_elems(s, batch, heads, seq, head_dim), bytes;
    if (e == UINT64_MAX || !mul_add(e, elem_size, 0, &bytes))
        return UINT64_MAX;
    return bytes;
}

/* 1 if no two elements of O share an address: with the dimensions sorted by stride, each stride
 * must step over everything the smaller ones span. (Layouts that interleave in other ways are
 * rejected as not provably disjoint.) */
int clflash_output_disjoint(const clflash_strides *s, uint32_t batch, uint32_t heads, uint32_t seq,
                           uint32_t head_dim)
{
    struct { uint64_t stride, count; } dims[3] = {
        {s->seq_stride, seq}, {s->head_stride, heads}, {s->batch_stride, batch}};
    uint64_t span = head_dim; /* elements covered so far, from the first */
    for (int i = 0; i < 3; i++) /* sort by stride (three elements) */
        for (int j = i + 1; j < 3; j++)
            if (dims[j].stride < dims[i].stride) {
                uint64_t ts = dims[i].stride, tc = dims[i].count;
                dims[i] = dims[j];
                dims[j].stride = ts;
                dims[j].count = tc;
            }
    for (int i = 0; i < 3; i++) {
        if (dims[i].count <= 1)
            continue;
        if (dims[i].stride < span || !mul_add(dims[i].count - 1, dims[i].stride, span, &span))
            return 0;
    }
    return 1;
}

clflash_status clflash_check_pages(uint32_t page_size, uint32_t pages_per_seq, uint32_t num_pages)
{
    if (page_size == 0 || page_size > CLFLASH_MAX_PAGE_SIZE)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "page_size %u is not in 1 .. %u", page_size,
                            CLFLASH_MAX_PAGE_SIZE);
    if (pages_per_seq == 0 || num_pages == 0 || num_pages > (uint32_t)INT32_MAX)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is %u; a paged cache needs 1 .. %d",
                            pages_per_seq == 0 ? "pages_per_seq" : "num_pages",
                            pages_per_seq == 0 ? pages_per_seq : num_pages, INT32_MAX);
    return CLFLASH_SUCCESS;
}

/* The paged KV cache's fields (clflash.h, "Paged KV caches"), and K's and V's outer dimensions. */
static clflash_status resolve_paging(const clflash_attention_desc *d, clflash_problem *p)
{
    p->block_table = d->block_table;
    p->page_size = d->page_size;
    p->pages_per_seq = d->pages_per_seq;
    p->num_pages = d->num_pages;
    p->kv_batch = d->batch;
    p->kv_seq = d->seq_k;
    if (d->block_table == NULL) {
        if (d->page_size || d->pages_per_seq || d->num_pages)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                "page_size, pages_per_seq or num_pages is set but block_table is NULL");
        return CLFLASH_SUCCESS;
    }
    clflash_status st = clflash_check_pages(d->page_size, d->pages_per_seq, d->num_pages);
    if (st != CLFLASH_SUCCESS)
        return st;
    if ((uint64_t)d->pages_per_seq * d->page_size < d->seq_k)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE,
                            "seq_k %u is more than pages_per_seq %u x page_size %u keys a block table row holds",
                            d->seq_k, d->pages_per_seq, d->page_size);
    p->kv_batch = d->num_pages;
    p->kv_seq = d->page_size;
    return CLFLASH_SUCCESS;
}

uint64_t clflash_kv_extent_bytes(const clflash_problem *p, const clflash_strides *s)
{
    return clflash_tensor_extent_bytes(s, p->kv_batch, p->heads_kv, p->kv_seq, p->head_dim, p->elem_size);
}

/* A packed layout's strides (clflash.h, "Variable-length batches"): element (t, h, c) at
 * offset + t*seq_stride + h*head_stride + c, zero strides token-major ([total][heads][head_dim]),
 * no batch stride. 0 if the caller set one. */
static int resolve_packed_strides(const clflash_layout *in, uint32_t heads, uint32_t head_dim, clflash_strides *out)
{
    out->offset = in->offset;
    out->batch_stride = 0;
    out->head_stride = in->head_stride ? in->head_stride : head_dim;
    out->seq_stride = in->seq_stride ? in->seq_stride : (uint64_t)heads * head_dim; /* < 2^24: no overflow */
    return in->batch_stride == 0;
}

/* A variable-length packed batch's fields (clflash.h, "Variable-length batches"), and the outer
 * dimensions of Q and O, K and V that follow from them. Runs after resolve_paging. */
static clflash_status resolve_varlen(const clflash_attention_desc *d, clflash_problem *p)
{
    p->varlen = 0;
    p->cu_seqlens_q = d->cu_seqlens_q;
    p->cu_seqlens_k = d->cu_seqlens_k;
    p->total_q = d->total_q;
    p->total_k = d->total_k;
    p->q_batch = d->batch;
    p->q_seq = d->seq_q;
    if (d->cu_seqlens_q == NULL && d->cu_seqlens_k == NULL) {
        if (d->total_q || d->total_k)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                "total_q or total_k is set but cu_seqlens_q and cu_seqlens_k are NULL");
        return CLFLASH_SUCCESS;
    }
    if (d->cu_seqlens_q == NULL || d->cu_seqlens_k == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                            "cu_seqlens_%s is NULL but cu_seqlens_%s is set; a variable-length batch needs both",
                            d->cu_seqlens_q == NULL ? "q" : "k", d->cu_seqlens_q == NULL ? "k" : "q");
    if (d->total_q == 0 || d->total_k == 0 || d->total_q > (uint32_t)INT32_MAX || d->total_k > (uint32_t)INT32_MAX)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is %u; a variable-length batch needs 1 .. %d rows",
                            d->total_q == 0 || d->total_q > (uint32_t)INT32_MAX ? "total_q" : "total_k",
                            d->total_q == 0 || d->total_q > (uint32_t)INT32_MAX ? d->total_q : d->total_k, INT32_MAX);
    if (d->key_lengths || d->bias || d->bias_grad || d->block_table)
        return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                            "a variable-length batch (cu_seqlens_q, cu_seqlens_k) does not take %s",
                            d->key_lengths ? "key_lengths" : d->bias ? "a bias" : d->bias_grad ? "bias_grad"
                                                                                             : "a paged KV cache (block_table)");
    p->varlen = 1;
    p->q_batch = 1;
    p->q_seq = d->total_q;
    p->kv_batch = 1;
    p->kv_seq = d->total_k;
    return CLFLASH_SUCCESS;
}

uint64_t clflash_q_extent_bytes(const clflash_problem *p, const clflash_strides *s, size_t elem_size)
{
    return clflash_tensor_extent_bytes(s, p->q_batch, p->heads_q, p->q_seq, p->head_dim, elem_size);
}

uint64_t clflash_lse_floats(const clflash_problem *p)
{
    return p->varlen ? (uint64_t)p->heads_q * p->total_q : (uint64_t)p->batch * p->heads_q * p->seq_q;
}

clflash_status clflash_refuse_varlen(const clflash_problem *p, const char *call)
{
    if (!p->varlen)
        return CLFLASH_SUCCESS;
    return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                        "%s does not take a variable-length batch (cu_seqlens_q, cu_seqlens_k)", call);
}

clflash_status clflash_refuse_paged(const clflash_problem *p, const char *call)
{
    if (p->block_table == NULL)
        return CLFLASH_SUCCESS;
    return clflash_fail(CLFLASH_ERROR_UNSUPPORTED, "%s does not take a paged KV cache (block_table)", call);
}

clflash_status clflash_resolve_desc(const clflash_attention_desc *caller, clflash_problem *p)
{
    clflash_attention_desc full; /* the caller's struct_size bytes, zeros past them */
    const clflash_attention_desc *const d = &full;
    clflash_status st;
    if (caller == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "the descriptor is NULL");
    if ((st = clflash_read_struct(caller, sizeof full, clflash_desc_min_size, &full, CLFLASH_ERROR_INVALID_ARGUMENT,
                                  "d")) != CLFLASH_SUCCESS)
        return st;
    p->elem_size = clflash_dtype_size(d->dtype);
    if (p->elem_size == 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "dtype %d is not a clflash_dtype", (int)d->dtype);
    if (d->dtype == CLFLASH_I8) {
        p->out_dtype = d->out_dtype ? d->out_dtype : CLFLASH_F32;
        if (p->out_dtype != CLFLASH_F32 && p->out_dtype != CLFLASH_F16 && p->out_dtype != CLFLASH_BF16)
            return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "out_dtype %d is not f32, f16 or bf16", (int)d->out_dtype);
    } else {
        if (d->out_dtype != 0 && d->out_dtype != d->dtype)
            return clflash_fail(CLFLASH_ERROR_INVALID_DTYPE, "out_dtype %s differs from dtype %s (only i8 input may choose)",
                                dtype_name(d->out_dtype), dtype_name(d->dtype));
        p->out_dtype = d->dtype;
        if (d->q_scale != 0.0f || d->k_scale != 0.0f || d->v_scale != 0.0f)
            return clflash_fail(CLFLASH_ERROR_INVALID_SCALE, "q_scale, k_scale and v_scale are for i8 input only");
    }
    p->out_elem_size = clflash_dtype_size(p->out_dtype);
    if (d->batch == 0 || d->heads_q == 0 || d->seq_q == 0 || d->seq_k == 0 || d->head_dim == 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is 0; every dimension must be at least 1",
                            d->batch == 0     ? "batch"
                            : d->heads_q == 0 ? "heads_q"
                            : d->seq_q == 0   ? "seq_q"
                            : d->seq_k == 0   ? "seq_k"
                                              : "head_dim");
    if (d->head_dim > CLFLASH_MAX_HEAD_DIM)
        return clflash_fail(CLFLASH_ERROR_HEAD_DIM_UNSUPPORTED, "head_dim %u is above the maximum %u",
                            d->head_dim, CLFLASH_MAX_HEAD_DIM);
    if (d->batch > CLFLASH_MAX_GRID_DIM || d->heads_q > CLFLASH_MAX_GRID_DIM)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s %u is above the maximum %u (a grid dimension)",
                            d->batch > CLFLASH_MAX_GRID_DIM ? "batch" : "heads_q",
                            d->batch > CLFLASH_MAX_GRID_DIM ? d->batch : d->heads_q, CLFLASH_MAX_GRID_DIM);
    if (d->seq_k > CLFLASH_MAX_SEQ_K)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "seq_k %u is above the maximum %u", d->seq_k,
                            CLFLASH_MAX_SEQ_K);
    if (((uint64_t)d->seq_q + 15u) / 16u > CLFLASH_MAX_GRID_DIM)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "seq_q %u is above the maximum %u", d->seq_q,
                            CLFLASH_MAX_GRID_DIM * 16u);
    p->heads_kv = d->heads_kv ? d->heads_kv : d->heads_q;
    if (p->heads_kv > d->heads_q || d->heads_q % p->heads_kv != 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "heads_kv %u does not divide heads_q %u",
                            p->heads_kv, d->heads_q);
    if (d->flags & ~(uint32_t)CLFLASH_KNOWN_FLAGS)
        return clflash_fail(CLFLASH_ERROR_INVALID_FLAGS, "flags 0x%x has unknown bits 0x%x", d->flags,
                            d->flags & ~(uint32_t)CLFLASH_KNOWN_FLAGS);
    if (!isfinite(d->scale))
        return clflash_fail(CLFLASH_ERROR_INVALID_SCALE, "scale is %s", isnan(d->scale) ? "NaN" : "infinite");
    if (!isfinite(d->q_scale) || !isfinite(d->k_scale) || !isfinite(d->v_scale))
        return clflash_fail(CLFLASH_ERROR_INVALID_SCALE, "%s is not finite",
                            !isfinite(d->q_scale) ? "q_scale" : !isfinite(d->k_scale) ? "k_scale" : "v_scale");
    if (!isfinite(d->softcap) || d->softcap < 0.0f)
        return clflash_fail(CLFLASH_ERROR_INVALID_SCALE, "softcap must be finite and >= 0");
    if (!(d->flags & CLFLASH_WINDOW) && (d->window_left || d->window_right))
        return clflash_fail(CLFLASH_ERROR_INVALID_FLAGS, "window_left/window_right are set but flags lack CLFLASH_WINDOW");
    if (d->bias_broadcast & ~(uint32_t)(CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS | CLFLASH_BROADCAST_ROWS))
        return clflash_fail(CLFLASH_ERROR_INVALID_FLAGS, "bias_broadcast 0x%x has unknown bits", d->bias_broadcast);
    if (d->bias == NULL && (d->bias_broadcast || d->bias_layout.offset || d->bias_layout.batch_stride ||
                            d->bias_layout.head_stride || d->bias_layout.seq_stride))
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_layout or bias_broadcast is set but bias is NULL");

    p->batch = d->batch;
    p->heads_q = d->heads_q;
    p->group = d->heads_q / p->heads_kv;
    p->seq_q = d->seq_q;
    p->seq_k = d->seq_k;
    p->head_dim = d->head_dim;
    p->dtype = d->dtype;
    p->scale = d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)d->head_dim));
    p->flags = d->flags;
    p->block = d->block;
    if (d->num_splits > CLFLASH_MAX_SPLITS)
        return clflash_fail(CLFLASH_ERROR_INVALID_SHAPE, "num_splits %u is above the maximum %u", d->num_splits,
                            CLFLASH_MAX_SPLITS);
    p->num_splits = d->num_splits;
    p->qk_scale = d->dtype == CLFLASH_I8 ? (d->q_scale != 0.0f ? d->q_scale : 1.0f) * (d->k_scale != 0.0f ? d->k_scale : 1.0f)
                                         : 1.0f;
    p->v_scale = d->dtype == CLFLASH_I8 && d->v_scale != 0.0f ? d->v_scale : 1.0f;
    p->window_left = d->window_left;
    p->window_right = d->window_right;
    if (d->diagonal_offset < -(int64_t)CLFLASH_MAX_SEQ_K || d->diagonal_offset > (int64_t)CLFLASH_MAX_SEQ_K)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "diagonal_offset %d is outside -%u .. %u",
                            (int)d->diagonal_offset, CLFLASH_MAX_SEQ_K, CLFLASH_MAX_SEQ_K);
    p->diagonal_offset = d->diagonal_offset;
    p->softcap = d->softcap;
    p->bias = d->bias;
    p->alibi_slopes = d->alibi_slopes;
    p->key_lengths = d->key_lengths;
    p->bias_grad = d->bias_grad;
    if ((st = resolve_paging(d, p)) != CLFLASH_SUCCESS || (st = resolve_varlen(d, p)) != CLFLASH_SUCCESS)
        return st;

    {
        const struct { const clflash_layout *in; clflash_strides *out; uint32_t heads, seq; const char *name; }
            t[4] = {{&d->q, &p->q, p->heads_q, p->q_seq, "q"},
                    {&d->k, &p->k, p->heads_kv, p->kv_seq, "k"},
                    {&d->v, &p->v, p->heads_kv, p->kv_seq, "v"},
                    {&d->o, &p->o, p->heads_q, p->q_seq, "o"}};
        for (int i = 0; i < 4; i++) {
            if (p->varlen && !resolve_packed_strides(t[i].in, t[i].heads, p->head_dim, t[i].out))
                return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT,
                                    "the layout of %s has batch_stride %llu; a packed variable-length tensor needs 0",
                                    t[i].name, (unsigned long long)t[i].in->batch_stride);
            if ((!p->varlen && !clflash_resolve_strides(t[i].in, t[i].heads, t[i].seq, p->head_dim, t[i].out)) ||
                clflash_tensor_extent_bytes(t[i].out, i == 1 || i == 2 ? p->kv_batch : p->q_batch, t[i].heads, t[i].seq,
                                            p->head_dim, i == 3 ? p->out_elem_size : p->elem_size) == UINT64_MAX)
                return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT,
                                    "the layout of %s addresses more than 2^64 bytes", t[i].name);
        }
    }
    if (p->bias) {
        if (!clflash_resolve_strides(&d->bias_layout, p->heads_q, p->seq_q, p->seq_k, &p->bias_strides) ||
            clflash_tensor_extent_bytes(&p->bias_strides, p->batch, p->heads_q, p->seq_q, p->seq_k, sizeof(float)) ==
                UINT64_MAX)
            return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "the layout of bias addresses more than 2^64 bytes");
        if (d->bias_broadcast & CLFLASH_BROADCAST_BATCH) p->bias_strides.batch_stride = 0;
        if (d->bias_broadcast & CLFLASH_BROADCAST_HEADS) p->bias_strides.head_stride = 0;
        if (d->bias_broadcast & CLFLASH_BROADCAST_ROWS) p->bias_strides.seq_stride = 0;
    } else {
        p->bias_strides = (clflash_strides){0, 0, 0, 0};
    }
    if (!clflash_output_disjoint(&p->o, p->q_batch, p->heads_q, p->q_seq, p->head_dim))
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT,
                            "the layout of o makes rows or heads overlap (seq_stride %llu, head_stride %llu, "
                            "batch_stride %llu, head_dim %u)",
                            (unsigned long long)p->o.seq_stride, (unsigned long long)p->o.head_stride,
                            (unsigned long long)p->o.batch_stride, p->head_dim);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_check_buffer(cl_mem buf, uint64_t need, const char *what)
{
    size_t size = 0;
    cl_mem_object_type type = 0;
    if (buf == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is NULL", what);
    if (clGetMemObjectInfo(buf, CL_MEM_TYPE, sizeof type, &type, NULL) != CL_SUCCESS ||
        type != CL_MEM_OBJECT_BUFFER ||
        clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "%s is not a valid OpenCL buffer", what);
    if ((uint64_t)size < need)
        return clflash_fail(CLFLASH_ERROR_BUFFER_TOO_SMALL, "%s holds %llu bytes but its shape and layout need %llu",
                            what, (unsigned long long)size, (unsigned long long)need);
    return CLFLASH_SUCCESS;
}

/* The byte range [first, end) a tensor's elements can touch. */
static void byte_range(const clflash_strides *s, uint32_t batch, uint32_t heads, uint32_t seq,
                       const clflash_problem *p, size_t elem_size, uint64_t *first, uint64_t *end)
{
    *first = s->offset * elem_size;
    *end = clflash_tensor_extent_bytes(s, batch, heads, seq, p->head_dim, elem_size);
}

clflash_status clflash_check_queue(const clflash_context *c, cl_command_queue queue, cl_uint num_wait,
                                  const cl_event *wait, cl_command_queue *queue_out)
{
    if ((num_wait > 0) != (wait != NULL))
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "num_wait is %u but wait is %s", num_wait,
                            wait ? "not NULL" : "NULL");
    if (queue) {
        cl_context qctx = NULL;
        cl_device_id qdev = NULL;
        if (clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL) != CL_SUCCESS ||
            clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL) != CL_SUCCESS)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "queue is not a valid command queue");
        if (qctx != c->ctx || qdev != c->dev)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                "queue belongs to another OpenCL context or device than the clflash context");
    }
    *queue_out = queue ? queue : c->queue;
    return CLFLASH_SUCCESS;
}

clflash_status clflash_resolve_for_context(clflash_context *c, const clflash_attention_desc *d, clflash_problem *p)
{
    clflash_status st;
    if ((st = clflash_check_context(c)) != CLFLASH_SUCCESS || (st = clflash_resolve_desc(d, p)) != CLFLASH_SUCCESS)
        return st;
    clflash_tune_resolve(c, p);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_validate_call(clflash_context *c, const clflash_attention_desc *d,
                                     cl_command_queue queue, cl_mem q, cl_mem k, cl_mem v, cl_mem o,
                                     cl_mem lse, cl_uint num_wait, const cl_event *wait, clflash_problem *p,
                                     cl_command_queue *queue_out)
{
    clflash_status st;
    if ((st = clflash_resolve_for_context(c, d, p)) != CLFLASH_SUCCESS)
        return st;
    if ((st = clflash_check_queue(c, queue, num_wait, wait, queue_out)) != CLFLASH_SUCCESS)
        return st;

    if ((st = clflash_check_buffer(q, clflash_q_extent_bytes(p, &p->q, p->elem_size), "q")) ||
        (st = clflash_check_buffer(k, clflash_kv_extent_bytes(p, &p->k), "k")) ||
        (st = clflash_check_buffer(v, clflash_kv_extent_bytes(p, &p->v), "v")) ||
        (st = clflash_check_buffer(o, clflash_q_extent_bytes(p, &p->o, p->out_elem_size), "o")))
        return st;
    if (lse && (st = clflash_check_buffer(lse, clflash_lse_floats(p) * sizeof(float), "lse")))
        return st;
    if (p->varlen && ((st = clflash_check_buffer(p->cu_seqlens_q, ((uint64_t)p->batch + 1) * sizeof(cl_int), "cu_seqlens_q")) ||
                      (st = clflash_check_buffer(p->cu_seqlens_k, ((uint64_t)p->batch + 1) * sizeof(cl_int), "cu_seqlens_k"))))
        return st;
    if ((p->bias && (st = clflash_check_buffer(p->bias, clflash_tensor_extent_bytes(&p->bias_strides, p->batch, p->heads_q, p->seq_q, p->seq_k, sizeof(float)), "bias"))) ||
        (p->alibi_slopes && (st = clflash_check_buffer(p->alibi_slopes, (uint64_t)p->heads_q * sizeof(float), "alibi_slopes"))) ||
        (p->key_lengths && (st = clflash_check_buffer(p->key_lengths, (uint64_t)p->batch * sizeof(cl_int), "key_lengths"))) ||
        (p->block_table && (st = clflash_check_buffer(p->block_table, (uint64_t)p->batch * p->pages_per_seq * sizeof(cl_int), "block_table"))))
        return st;
    {
        const cl_mem extra[6] = {p->bias, p->alibi_slopes, p->key_lengths, p->block_table, p->cu_seqlens_q,
                                 p->cu_seqlens_k};
        for (int i = 0; i < 6; i++)
            if (extra[i] && (extra[i] == o || extra[i] == lse))
                return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "an input of the descriptor (bias, alibi_slopes, "
                                                                    "key_lengths, block_table or cu_seqlens) is the "
                                                                    "same buffer as o or lse");
    }

    {   /* O must not overlap an input that shares its buffer. */
        uint64_t of, oe, f, e;
        const struct { cl_mem buf; const clflash_strides *s; uint32_t heads, seq; const char *name; } in[3] = {
            {q, &p->q, p->heads_q, p->q_seq, "q"}, {k, &p->k, p->heads_kv, p->kv_seq, "k"},
            {v, &p->v, p->heads_kv, p->kv_seq, "v"}};
        byte_range(&p->o, p->q_batch, p->heads_q, p->q_seq, p, p->out_elem_size, &of, &oe);
        for (int i = 0; i < 3; i++) {
            if (in[i].buf != o)
                continue;
            byte_range(in[i].s, i == 0 ? p->q_batch : p->kv_batch, in[i].heads, in[i].seq, p, p->elem_size, &f, &e);
            if (f < oe && of < e)
                return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT, "o overlaps %s in the same buffer", in[i].name);
        }
        if (lse && (lse == q || lse == k || lse == v || lse == o))
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "lse must be a buffer of its own");
    }
    return CLFLASH_SUCCESS;
}
