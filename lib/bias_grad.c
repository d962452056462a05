/*
 * bias_grad.c - the backward's optional bias gradient (clflash_attention_desc.bias_grad): its checks
 * and the enqueue of cl/bias_grad.cl, which clflash_backward runs after its D kernel.
 *
 * Why a file of its own: dBias is one more output with its own rules (the bias's layout, summed
 * over the broadcast dimensions, a buffer of its own) and its own kernel, independent of the
 * gradient kernel the backward plans. clflash_backward_naive refuses it. Three kernels compute the
 * same sums with the same arguments and grid: cl/nv_mma_bias_grad.cl on NVIDIA's tensor cores,
 * wherever the tensor-core backward could run (clflash_nv_mma_backward_refusal) and head_dim is
 * at most 128; cl/bias_grad_cpu.cl where the backward takes its CPU path (clflash_wants_cpu_path)
 * and its tiles fit the local memory budget; cl/bias_grad.cl everywhere else.
 */
#include "internal.h"

#include <stdio.h>

#define TILE 64u            /* every kernel's TQ and TK */
#define GROUP 256u          /* bias_grad.cl's work-group size, 16 x 16 */
#define CPU_GROUP TILE      /* bias_grad_cpu.cl's: one work-item per query row of a tile */
#define NV_WARPS 4u         /* nv_mma_bias_grad.cl's warps: 16 query rows each, TQ = 64 */
#define KEY_TAG 0x62677264u /* the kernel cache's key: no other cached kernel starts with it */

/* What the kernel is built for; the kernel cache's key. */
typedef struct {
    uint32_t tag, dtype, head_dim, flags, softcap, alibi, keylen, bcast, tensor_cores, bias_pairs, nv_aligned;
    uint32_t kernel_dim; /* the kernel's HEAD_DIM: head_dim, padded to a multiple of 16 on tensor cores */
    uint32_t cpu_path;   /* bias_grad_cpu.cl (tensor_cores is then 0) */
} bias_grad_build;

static uint32_t broadcast_bits(const clflash_problem *p)
{
    /* resolved bias strides are 0 exactly where bias_broadcast set them so (defaults are >= 1) */
    return (p->bias_strides.batch_stride == 0) | (p->bias_strides.head_stride == 0) << 1 |
           (p->bias_strides.seq_stride == 0) << 2;
}

static clflash_status make_kernel(clflash_context *c, const void *arg, cl_kernel *kernel)
{
    const bias_grad_build *bb = arg;
    const char *name = bb->tensor_cores ? "nv_mma_bias_grad" : bb->cpu_path ? "bias_grad_cpu" : "bias_grad";
    const clflash_source_id source = bb->tensor_cores ? CLFLASH_SOURCE_NV_MMA_BIAS_GRAD
                                     : bb->cpu_path   ? CLFLASH_SOURCE_BIAS_GRAD_CPU
                                                      : CLFLASH_SOURCE_BIAS_GRAD;
    char defines[400], shape[120] = "";
    cl_program prog;
    cl_int err;
    clflash_status st;
    if (bb->tensor_cores)
        snprintf(shape, sizeof shape,
                 " -D D_REAL=%u -D D_SPLIT=1 -D NV_ALIGNED=%u -D BLOCK=%u -D WARPS=%u -D BIAS_PAIRS=%u", bb->head_dim,
                 bb->nv_aligned, TILE, NV_WARPS, bb->bias_pairs);
    /* dBias is fp32 (CLFLASH_OUT_F32), and no lse is written */
    snprintf(defines, sizeof defines,
             "%s -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=%u -D CAUSAL=%d -D WINDOW=%d -D SOFTCAP=%u -D BIAS=1 "
             "-D ALIBI=%u -D KEYLEN=%u -D KEYLEN_DIAGONAL=%d -D VARLEN=0 -D BCAST_BATCH=%u -D BCAST_HEADS=%u "
             "-D BCAST_ROWS=%u%s",
             clflash_dtype_define((clflash_dtype)bb->dtype), bb->kernel_dim, (bb->flags & CLFLASH_CAUSAL) != 0,
             (bb->flags & CLFLASH_WINDOW) != 0, bb->softcap, bb->alibi, bb->keylen,
             (bb->flags & CLFLASH_ALIGN_TO_KEY_LENGTH) != 0, bb->bcast & 1u,
             (bb->bcast >> 1) & 1u, (bb->bcast >> 2) & 1u, shape);
    if ((st = clflash_get_program(c, source, defines, &prog)) != CLFLASH_SUCCESS)
        return st;
    *kernel = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateKernel(%s) failed", name);
    return CLFLASH_SUCCESS;
}

clflash_status clflash_check_bias_grad(const clflash_problem *p, const cl_mem *others, size_t n_others)
{
    if (p->bias_grad == NULL)
        return CLFLASH_SUCCESS;
    if (p->varlen) /* the descriptor check refuses it first; the kernels have no varlen path */
        return clflash_refuse_varlen(p, "the bias gradient");
    if (p->bias == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_grad is set but there is no bias");
    if (p->bias_grad == p->bias || p->bias_grad == p->alibi_slopes || p->bias_grad == p->key_lengths)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "bias_grad must be a buffer of its own (it is the "
                                                            "descriptor's %s)",
                            p->bias_grad == p->bias ? "bias" : p->bias_grad == p->alibi_slopes ? "alibi_slopes"
                                                                                             : "key_lengths");
    for (size_t i = 0; i < n_others; i++)
        if (others[i] == p->bias_grad)
            return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                "bias_grad must be a buffer of its own (it is also another argument of the call)");
    clflash_status st = clflash_check_buffer(
        p->bias_grad,
        clflash_tensor_extent_bytes(&p->bias_strides, p->batch, p->heads_q, p->seq_q, p->seq_k, sizeof(float)),
        "bias_grad");
    if (st != CLFLASH_SUCCESS)
        return st;
    /* one writer per element: the layout's non-broadcast dimensions must not overlap */
    const uint32_t bc = broadcast_bits(p);
    if (!clflash_output_disjoint(&p->bias_strides, bc & 1u ? 1 : p->batch, bc & 2u ? 1 : p->heads_q,
                                 bc & 4u ? 1 : p->seq_q, p->seq_k))
        return clflash_fail(CLFLASH_ERROR_INVALID_LAYOUT,
                            "the bias layout makes elements of bias_grad overlap; as an output it needs distinct "
                            "elements (each one a sum over the broadcast dimensions)");
    return CLFLASH_SUCCESS;
}

/* bias_grad_cpu.cl's local memory: K and V of a key tile as fp32, and with the rows broadcast the
 * work-items' sums of each key. */
static uint64_t cpu_local_bytes(uint32_t head_dim, uint32_t bcast)
{
    return (2ull * head_dim * TILE + (bcast & 4u ? (uint64_t)TILE * CPU_GROUP : 0u)) * sizeof(float);
}

clflash_status clflash_enqueue_bias_grad(clflash_context *c, const clflash_problem *p, cl_command_queue queue,
                                         const cl_mem *inputs, cl_mem dvec, cl_uint num_wait, const cl_event *wait,
                                         cl_event *done)
{
    const uint32_t bc = broadcast_bits(p);
    /* nv_mma_bias_grad.cl keeps a warp's 16 query rows over the whole head_dim in registers: up to
     * 128 (the tensor-core backward splits the columns between two warps above that; this does not) */
    const int tensor_cores = clflash_nv_mma_backward_refusal(c, p) == NULL && p->head_dim <= 128;
    const int cpu = !tensor_cores && clflash_wants_cpu_path(c, p) &&
                    cpu_local_bytes(p->head_dim, bc) <= c->local_mem_budget;
    const bias_grad_build bb = {KEY_TAG,
                                (uint32_t)p->dtype,
                                p->head_dim,
                                (p->flags & (CLFLASH_CAUSAL | CLFLASH_WINDOW)) |
                                    (clflash_keylen_diagonal(p) ? CLFLASH_ALIGN_TO_KEY_LENGTH : 0u),
                                p->softcap != 0.0f,
                                p->alibi_slopes != NULL,
                                p->key_lengths != NULL,
                                bc,
                                (uint32_t)tensor_cores,
                                (uint32_t)clflash_bias_pairs(p),
                                (uint32_t)clflash_nv_rows_aligned(p),
                                tensor_cores ? clflash_nv_padded_dim(p) : p->head_dim,
                                (uint32_t)cpu};
    cl_kernel kernel;
    clflash_plan_entry *entry;
    clflash_status st = clflash_cached_kernel(c, (const uint32_t *)&bb, sizeof bb / sizeof(uint32_t), make_kernel, &bb,
                                              &kernel, &entry);
    if (st != CLFLASH_SUCCESS)
        return st;
    const cl_uint batch = p->batch, heads_q = p->heads_q, group = p->group, seq_q = p->seq_q, seq_k = p->seq_k;
    const cl_uint key_tiles = (seq_k + TILE - 1) / TILE, row_tiles = bc & 4u ? 1u : (seq_q + TILE - 1) / TILE;
    const cl_uint wl = p->window_left, wr = p->window_right;
    const cl_int offset = p->diagonal_offset;
    const cl_ulong lay[20] = {p->q.offset, p->q.batch_stride, p->q.head_stride, p->q.seq_stride,
                              p->k.offset, p->k.batch_stride, p->k.head_stride, p->k.seq_stride,
                              p->v.offset, p->v.batch_stride, p->v.head_stride, p->v.seq_stride,
                              p->o.offset, p->o.batch_stride, p->o.head_stride, p->o.seq_stride,
                              p->bias_strides.offset, p->bias_strides.batch_stride, p->bias_strides.head_stride,
                              p->bias_strides.seq_stride};
    /* inputs: q, k, v, d_o, lse */
    const clflash_arg args[] = {{sizeof(cl_mem), &inputs[0]},
                                {sizeof(cl_mem), &inputs[1]},
                                {sizeof(cl_mem), &inputs[2]},
                                {sizeof(cl_mem), &inputs[3]},
                                {sizeof(cl_mem), &inputs[4]},
                                {sizeof(cl_mem), &dvec},
                                {sizeof(cl_mem), &p->bias},
                                {sizeof(cl_mem), &p->bias_grad},
                                {sizeof(cl_mem), p->alibi_slopes ? &p->alibi_slopes : NULL},
                                {sizeof(cl_mem), p->key_lengths ? &p->key_lengths : NULL},
                                {sizeof(cl_uint), &batch},
                                {sizeof(cl_uint), &heads_q},
                                {sizeof(cl_uint), &group},
                                {sizeof(cl_uint), &seq_q},
                                {sizeof(cl_uint), &seq_k},
                                {sizeof(cl_uint), &key_tiles},
                                {sizeof(float), &p->scale},
                                {sizeof(float), &p->softcap},
                                {sizeof(cl_uint), &wl},
                                {sizeof(cl_uint), &wr},
                                {sizeof(cl_int), &offset}};
    const cl_uint n_args = sizeof args / sizeof args[0];
    cl_int err = clflash_set_args(kernel, 0, args, n_args);
    for (cl_uint i = 0; err == CL_SUCCESS && i < 20; i++)
        err = clSetKernelArg(kernel, n_args + i, sizeof(cl_ulong), &lay[i]);
    const size_t group_size = bb.tensor_cores ? 32u * NV_WARPS : cpu ? CPU_GROUP : GROUP;
    const size_t global[3] = {(size_t)row_tiles * key_tiles * group_size, bc & 2u ? 1u : heads_q,
                              bc & 1u ? 1u : batch};
    const size_t local[3] = {group_size, 1, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, global, local, num_wait, wait, done);
    clflash_cached_kernel_done(c, entry, kernel);
    if (err != CL_SUCCESS)
        return clflash_fail(err, "enqueueing the backward's bias-gradient kernel failed");
    return CLFLASH_SUCCESS;
}
