/*
 * forward.c - clflash_forward: validates, plans, sets the flash kernel's arguments (the portable
 * kernel or the NVIDIA tensor-core one share the leading arguments) and enqueues it over a
 * (query blocks, heads_q, batch) grid.
 *
 * Why separate: this is the hot entry point; it holds only dispatch. If the device refuses the
 * planned tile at enqueue (CL_OUT_OF_RESOURCES) and B was not forced, it plans again below that B,
 * a bounded number of times.
 */
#include "internal.h"


#define MAX_ENQUEUE_RETRIES 3

static cl_int set_flash_args(cl_kernel kernel, int feature_args, const clflash_problem *p, cl_mem q, cl_mem k,
                             cl_mem v, cl_mem o, cl_mem lse)
{
    const cl_uint seq_q = p->seq_q, seq_k = p->seq_k, heads_q = p->heads_q, group = p->group;
    /* Without score transforms the log2(e) of exp2 is folded into the scale (see the kernel). */
    const int transforms = p->softcap != 0.0f || p->bias != NULL || p->alibi_slopes != NULL;
    const float score_scale = (float)((double)p->scale * p->qk_scale * (transforms ? 1.0 : 1.4426950408889634));
    const cl_ulong lay[16] = {p->q.offset, p->q.batch_stride, p->q.head_stride, p->q.seq_stride,
                              p->k.offset, p->k.batch_stride, p->k.head_stride, p->k.seq_stride,
                              p->v.offset, p->v.batch_stride, p->v.head_stride, p->v.seq_stride,
                              p->o.offset, p->o.batch_stride, p->o.head_stride, p->o.seq_stride};
    const clflash_arg args[] = {
        {sizeof(cl_mem), &q},        {sizeof(cl_mem), &k},     {sizeof(cl_mem), &v},
        {sizeof(cl_mem), &o},        {sizeof(cl_mem), lse ? &lse : NULL},
        {sizeof(cl_uint), &seq_q},   {sizeof(cl_uint), &seq_k}, {sizeof(cl_uint), &heads_q},
        {sizeof(cl_uint), &group},   {sizeof(float), &score_scale}};
    cl_int err = clflash_set_args(kernel, 0, args, sizeof args / sizeof args[0]);
    for (cl_uint i = 0; err == CL_SUCCESS && i < 16; i++)
        err = clSetKernelArg(kernel, 10 + i, sizeof(cl_ulong), &lay[i]);
    if (err == CL_SUCCESS && feature_args)
        err = clflash_set_feature_args(kernel, 26, p, 1);
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
        local[0] = fk.plan.work_group_size;
        local[1] = local[2] = 1;
        global[0] = (size_t)((p.seq_q + fk.plan.block_q - 1) / fk.plan.block_q) * fk.plan.work_group_size;
        global[1] = p.heads_q;
        global[2] = p.batch;
        err = set_flash_args(fk.kernel, fk.feature_args, &p, q, k, v, o, lse);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(qu, fk.kernel, 3, NULL, global, local, num_wait, wait, done);
        clReleaseKernel(fk.kernel);
        if (err == CL_SUCCESS)
            return CLFLASH_SUCCESS;
        if (err == CL_OUT_OF_RESOURCES && p.block == 0 && attempt < MAX_ENQUEUE_RETRIES && fk.plan.block > 1) {
            below = fk.plan.block; /* the device refused this tile: plan a smaller one */
            continue;
        }
        return clflash_fail(err, "enqueueing %s (B = %u) failed", fk.plan.kernel, fk.plan.block);
    }
}
