/*
 * forward.c - clflash_forward: validates, plans, sets the flash kernel's arguments (the portable
 * kernel or the NVIDIA tensor-core one share the leading arguments) and enqueues it over a
 * (query blocks x splits, heads, batch) grid; with split-KV, also the merge of the parts.
 *
 * Why separate: this is the hot entry point; it holds only dispatch. If the device refuses the
 * planned tile at enqueue (CL_OUT_OF_RESOURCES) and B was not forced, it plans again below that B,
 * a bounded number of times.
 *
 * The split path: the flash kernel writes each part's O (fp32) and lse into two buffers from the
 * context's scratch pool, laid out [part][batch][heads_q][seq_q][head_dim] and
 * [part][batch][heads_q][seq_q] (a variable-length batch's too, seq_q its longest sequence); the
 * merge kernel (merge.c), enqueued after it, writes O and lse (packed, for a variable-length batch).
 * Only the merge writes caller buffers, so if its enqueue fails the call has written none.
 */
#include "internal.h"

#define MAX_ENQUEUE_RETRIES 3

static cl_int set_flash_args(const clflash_flash_kernel *fk, const clflash_problem *p, cl_mem q, cl_mem k, cl_mem v,
                             cl_mem o, cl_mem lse, const clflash_strides *o_lay)
{
    const cl_uint seq_q = p->seq_q, seq_k = p->seq_k, heads_q = p->heads_q, group = p->group;
    const cl_uint n_splits = fk->plan.splits, split_keys = fk->split_keys;
    /* Without score transforms the log2(e) of exp2 is folded into the scale (see the kernel). */
    const int transforms = p->softcap != 0.0f || p->bias != NULL || p->alibi_slopes != NULL;
    const float score_scale = (float)((double)p->scale * p->qk_scale * (transforms ? 1.0 : 1.4426950408889634));
    const cl_ulong lay[16] = {p->q.offset,  p->q.batch_stride,  p->q.head_stride,  p->q.seq_stride,
                              p->k.offset,  p->k.batch_stride,  p->k.head_stride,  p->k.seq_stride,
                              p->v.offset,  p->v.batch_stride,  p->v.head_stride,  p->v.seq_stride,
                              o_lay->offset, o_lay->batch_stride, o_lay->head_stride, o_lay->seq_stride};
    const clflash_arg args[] = {
        {sizeof(cl_mem), &q},        {sizeof(cl_mem), &k},     {sizeof(cl_mem), &v},
        {sizeof(cl_mem), &o},        {sizeof(cl_mem), lse ? &lse : NULL},
        {sizeof(cl_uint), &seq_q},   {sizeof(cl_uint), &seq_k}, {sizeof(cl_uint), &heads_q},
        {sizeof(cl_uint), &group},   {sizeof(float), &score_scale}};
    const cl_uint pages_per_seq = p->pages_per_seq, num_pages = p->num_pages;
    const clflash_arg tail_args[] = {{sizeof(cl_uint), &n_splits},
                                     {sizeof(cl_uint), &split_keys},
                                     {sizeof(cl_mem), p->block_table ? &p->block_table : NULL},
                                     {sizeof(cl_uint), &pages_per_seq},
                                     {sizeof(cl_uint), &num_pages}};
    cl_int err = clflash_set_args(fk->kernel, 0, args, sizeof args / sizeof args[0]);
    for (cl_uint i = 0; err == CL_SUCCESS && i < 16; i++)
        err = clSetKernelArg(fk->kernel, 10 + i, sizeof(cl_ulong), &lay[i]);
    cl_uint next = 26;
    if (err == CL_SUCCESS) {
        err = clflash_set_feature_args(fk->kernel, next, p, 1);
        next += CLFLASH_FEATURE_ARGS;
    }
    if (err == CL_SUCCESS)
        err = clflash_set_args(fk->kernel, next, tail_args, sizeof tail_args / sizeof tail_args[0]);
    next += sizeof tail_args / sizeof tail_args[0];
    if (err == CL_SUCCESS)
        err = clflash_set_varlen_args(fk->kernel, next, p);
    return err;
}

/* The flash kernels' argument count up to and including the split, paging and varlen ones
 * (common.cl's FORWARD_PARAMS). */
#define FLASH_ARGS (26 + CLFLASH_FEATURE_ARGS + 5 + CLFLASH_VARLEN_ARGS)

/* The parts' O as a [batch][heads_q][seq_q][head_dim] layout (the kernel adds a part's offset). */
static clflash_strides parts_layout(const clflash_problem *p)
{
    const uint64_t ss = p->head_dim, hs = (uint64_t)p->seq_q * ss, bs = (uint64_t)p->heads_q * hs;
    return (clflash_strides){0, bs, hs, ss};
}

/* The fused split path (fk->merge_tickets > 0): the kernel's arguments past the split ones are the
 * block counters (a zeroed scratch buffer, which the kernel leaves zeroed), the caller's O and lse and
 * O's layout; the one launch writes the parts and merges them into O and lse. */
static cl_int enqueue_fused(clflash_context *c, const clflash_flash_kernel *fk, const clflash_problem *p,
                            cl_command_queue qu, const size_t *global, const size_t *local, cl_mem o, cl_mem lse,
                            cl_uint num_wait, const cl_event *wait, cl_event *flash_done, clflash_status *lib_status)
{
    clflash_scratch *tickets = NULL;
    *lib_status = clflash_scratch_acquire_zeroed(c, clflash_mul_sat(fk->merge_tickets, sizeof(cl_uint)), qu, &tickets);
    if (*lib_status != CLFLASH_SUCCESS)
        return CL_SUCCESS;
    cl_mem t = clflash_scratch_buffer(tickets);
    const cl_ulong lay[4] = {p->o.offset, p->o.batch_stride, p->o.head_stride, p->o.seq_stride};
    const clflash_arg args[] = {{sizeof(cl_mem), &t},           {sizeof(cl_mem), &o},
                                {sizeof(cl_mem), lse ? &lse : NULL}, {sizeof(cl_ulong), &lay[0]},
                                {sizeof(cl_ulong), &lay[1]},    {sizeof(cl_ulong), &lay[2]},
                                {sizeof(cl_ulong), &lay[3]}};
    cl_int err = clflash_set_args(fk->kernel, FLASH_ARGS, args, sizeof args / sizeof args[0]);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(qu, fk->kernel, 3, NULL, global, local, num_wait, wait, flash_done);
    clflash_scratch_release(c, tickets, err == CL_SUCCESS ? *flash_done : NULL, qu);
    return err;
}

/* nv_wgmma_forward with WG_TMA (fk->tma_map_groups > 0): its argument past the varlen ones is a
 * scratch buffer in which each work-group builds its K and V tensor maps; the persistent kernel
 * (fk->persistent_groups > 0) takes the batch size after it. */
static cl_int enqueue_with_tensor_maps(clflash_context *c, const clflash_flash_kernel *fk, const clflash_problem *p,
                                       cl_command_queue qu, const size_t *global, const size_t *local,
                                       cl_uint num_wait, const cl_event *wait, cl_event *done,
                                       clflash_status *lib_status)
{
    clflash_scratch *maps = NULL;
    cl_event ran = NULL;
    *lib_status =
        clflash_scratch_acquire(c, clflash_mul_sat(fk->tma_map_groups, CLFLASH_TMA_MAP_SLOT_BYTES), qu, &maps);
    if (*lib_status != CLFLASH_SUCCESS)
        return CL_SUCCESS;
    cl_mem m = clflash_scratch_buffer(maps);
    const cl_uint batch = p->batch;
    cl_int err = clSetKernelArg(fk->kernel, FLASH_ARGS, sizeof(cl_mem), &m);
    if (err == CL_SUCCESS && fk->persistent_groups > 0)
        err = clSetKernelArg(fk->kernel, FLASH_ARGS + 1, sizeof batch, &batch);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(qu, fk->kernel, 3, NULL, global, local, num_wait, wait, &ran);
    clflash_scratch_release(c, maps, err == CL_SUCCESS ? ran : NULL, qu);
    if (ran && done)
        *done = ran;
    else if (ran)
        clReleaseEvent(ran);
    return err;
}

/* Enqueues the split path: the flash kernel into scratch parts, then their merge into o and lse. */
static cl_int enqueue_split(clflash_context *c, const clflash_flash_kernel *fk, const clflash_problem *p,
                            cl_command_queue qu, const size_t *global, const size_t *local, cl_mem q, cl_mem k,
                            cl_mem v, cl_mem o, cl_mem lse, cl_uint num_wait, const cl_event *wait, cl_event *done,
                            clflash_status *lib_status)
{
    const uint64_t rows = (uint64_t)p->batch * p->heads_q * p->seq_q;
    const clflash_strides parts = parts_layout(p);
    clflash_scratch *part_o = NULL, *part_lse = NULL;
    cl_event flash_done = NULL, merge_done = NULL;
    cl_int err = CL_SUCCESS;
    *lib_status = clflash_scratch_acquire(c, clflash_mul_sat(rows * fk->plan.splits, p->head_dim * sizeof(float)),
                                          qu, &part_o);
    if (*lib_status == CLFLASH_SUCCESS)
        *lib_status = clflash_scratch_acquire(c, rows * fk->plan.splits * sizeof(float), qu, &part_lse);
    if (*lib_status != CLFLASH_SUCCESS) {
        clflash_scratch_release(c, part_o, NULL, qu);
        return CL_SUCCESS;
    }
    err = set_flash_args(fk, p, q, k, v, clflash_scratch_buffer(part_o), clflash_scratch_buffer(part_lse), &parts);
    if (err == CL_SUCCESS && fk->merge_tickets > 0) {
        err = enqueue_fused(c, fk, p, qu, global, local, o, lse, num_wait, wait, &flash_done, lib_status);
    } else if (err == CL_SUCCESS) {
        err = clEnqueueNDRangeKernel(qu, fk->kernel, 3, NULL, global, local, num_wait, wait, &flash_done);
        if (err == CL_SUCCESS) {
            const clflash_merge_problem m = {fk->plan.splits, p->batch,   p->heads_q,         p->seq_q,
                                             p->head_dim,     CLFLASH_F32, p->out_dtype,      parts,
                                             p->o,            rows * p->head_dim, rows, p->cu_seqlens_q,
                                             p->total_q};
            *lib_status = clflash_enqueue_merge(c, &m, qu, clflash_scratch_buffer(part_o),
                                                clflash_scratch_buffer(part_lse), o, lse, 1, &flash_done, &merge_done);
        }
    }
    /* the parts are in use until the merge (or, if it was not enqueued, the flash kernel) is done */
    cl_event last = merge_done ? merge_done : flash_done;
    clflash_scratch_release(c, part_o, last, qu);
    clflash_scratch_release(c, part_lse, last, qu);
    /* the command that wrote O and lse, the call's event: none if the merge was not enqueued */
    cl_event wrote = fk->merge_tickets > 0 ? flash_done : merge_done;
    if (flash_done && flash_done != wrote)
        clReleaseEvent(flash_done);
    if (wrote && done)
        *done = wrote;
    else if (wrote)
        clReleaseEvent(wrote);
    return err;
}

clflash_status clflash_forward(clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue,
                               cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse, cl_uint num_wait,
                               const cl_event *wait, cl_event *done)
{
    clflash_problem p;
    cl_command_queue qu;
    clflash_status st;
    uint32_t below = 0;

    clflash_clear_detail();
    if ((st = clflash_validate_call(c, d, queue, q, k, v, o, lse, num_wait, wait, &p, &qu)) != CLFLASH_SUCCESS)
        return st;

    for (int attempt = 0;; attempt++) {
        clflash_flash_kernel fk;
        size_t global[3], local[3];
        cl_int err;
        if ((st = clflash_plan_flash(c, &p, lse != NULL, below, &fk)) != CLFLASH_SUCCESS)
            return st;
        const uint64_t rows = (uint64_t)p.seq_q * fk.plan.packed_heads;
        local[0] = fk.plan.work_group_size;
        local[1] = local[2] = 1;
        global[0] = (size_t)((rows + fk.plan.block_q - 1) / fk.plan.block_q) * fk.plan.splits * fk.plan.work_group_size;
        global[1] = p.heads_q / fk.plan.packed_heads;
        global[2] = p.batch;
        if (fk.persistent_groups > 0) { /* one dimension, each work-group taking block after block */
            global[0] = (size_t)fk.persistent_groups * fk.plan.work_group_size;
            global[1] = global[2] = 1;
        }
        if (fk.plan.splits > 1) {
            err = enqueue_split(c, &fk, &p, qu, global, local, q, k, v, o, lse, num_wait, wait, done, &st);
        } else {
            err = set_flash_args(&fk, &p, q, k, v, o, lse, &p.o);
            if (err == CL_SUCCESS && fk.tma_map_groups > 0)
                err = enqueue_with_tensor_maps(c, &fk, &p, qu, global, local, num_wait, wait, done, &st);
            else if (err == CL_SUCCESS)
                err = clEnqueueNDRangeKernel(qu, fk.kernel, 3, NULL, global, local, num_wait, wait, done);
        }
        clflash_flash_kernel_done(c, &fk);
        if (err == CL_SUCCESS)
            return st;
        if (err == CL_OUT_OF_RESOURCES && p.block == 0 && attempt < MAX_ENQUEUE_RETRIES && fk.plan.block > 1) {
            below = fk.plan.block; /* the device refused this tile: plan a smaller one */
            continue;
        }
        return clflash_fail(err, "enqueueing %s (B = %u) failed", fk.plan.kernel, fk.plan.block);
    }
}
