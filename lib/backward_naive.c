/*
 * backward_naive.c - clflash_backward_naive: the attention backward on the materialized path, the
 * baseline clflash-bench and the tests compare the flash backward against.
 *
 * Why keep it: it moves the O(n^2) bytes the flash backward avoids (P and dP written, read back
 * for dS, read again for dQ, dK and dV), and it forms D from the matrices (rowsum(P * dP)) instead
 * of from O, so it is also an independent second opinion. Per chunk of query heads (as many as one
 * allocation of an fp32 seq_q x seq_k matrix per head allows) it enqueues the four kernels of
 * cl/naive_backward.cl (with softcap a third matrix holds the transform's derivative); dQ, dK and
 * dV are gathered in fp32 accumulators (dK and dV summed over the chunks in a fixed order) and
 * written by one last kernel, so a call that fails part-way through its enqueues has written no
 * caller buffer. Steps are chained by events, so the order also holds on
 * out-of-order queues.
 */
#include "internal.h"

#include <stdio.h>

#define TILE 16

typedef struct {
    cl_kernel products, softmax, dq, dkdv, store;
} naive_bwd_kernels;

static void release_kernels(naive_bwd_kernels *nk)
{
    cl_kernel *all[5] = {&nk->products, &nk->softmax, &nk->dq, &nk->dkdv, &nk->store};
    for (int i = 0; i < 5; i++)
        if (*all[i]) {
            clReleaseKernel(*all[i]);
            *all[i] = NULL;
        }
}

static clflash_status make_kernels(clflash_context *c, const clflash_problem *p, naive_bwd_kernels *nk,
                                   size_t *softmax_wg)
{
    static const char *const names[5] = {"naive_bwd_products", "naive_bwd_softmax", "naive_bwd_dq",
                                         "naive_bwd_dkdv", "naive_bwd_store"};
    char defines[512], features[256];
    cl_program prog;
    clflash_status st;
    size_t wg = CLFLASH_NAIVE_SOFTMAX_WG, kernel_wg = 0;
    if (c->info.max_work_group_size < TILE * TILE)
        return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                            "the naive backward needs work-groups of %d items; the device allows %zu", TILE * TILE,
                            c->info.max_work_group_size);
    for (;;) {
        cl_kernel *all[5] = {&nk->products, &nk->softmax, &nk->dq, &nk->dkdv, &nk->store};
        cl_int err = CL_SUCCESS;
        clflash_feature_defines(p, 0, features, sizeof features);
        snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D SOFTMAX_WG=%zu", features, p->head_dim, wg);
        if ((st = clflash_get_program(c, CLFLASH_SOURCE_NAIVE_BACKWARD, defines, &prog)) != CLFLASH_SUCCESS)
            return st;
        for (int i = 0; i < 5 && err == CL_SUCCESS; i++)
            *all[i] = clCreateKernel(prog, names[i], &err);
        if (err == CL_SUCCESS)
            err = clGetKernelWorkGroupInfo(nk->softmax, c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_wg, &kernel_wg,
                                           NULL);
        if (err != CL_SUCCESS) {
            release_kernels(nk);
            return clflash_fail(err, "creating the naive backward kernels failed");
        }
        if (kernel_wg >= wg || wg == 1)
            break;
        release_kernels(nk); /* the row kernel runs fewer items here: rebuild it narrower */
        wg /= 2;
    }
    *softmax_wg = wg;
    return CLFLASH_SUCCESS;
}

static size_t round_up(size_t x, size_t m)
{
    return (x + m - 1) / m * m;
}

clflash_status clflash_backward_naive(clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue,
                                      cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq,
                                      cl_mem dk, cl_mem dv, cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    clflash_problem p;
    cl_command_queue qu;
    clflash_status st;
    naive_bwd_kernels nk = {0};
    size_t softmax_wg = 0;
    cl_mem pm = NULL, dpm = NULL, gm = NULL, acc_q = NULL, acc_k = NULL, acc_v = NULL;
    cl_int err = CL_SUCCESS;
    cl_event prev = NULL;

    clflash_clear_detail();
    if ((st = clflash_validate_backward_call(c, d, queue, q, k, v, o, d_o, lse, dq, dk, dv, num_wait, wait, &p, &qu)) !=
        CLFLASH_SUCCESS)
        return st;
    if ((st = clflash_refuse_varlen(&p, "clflash_backward_naive")) != CLFLASH_SUCCESS)
        return st;
    if (p.bias_grad)
        return clflash_fail(CLFLASH_ERROR_UNSUPPORTED,
                            "clflash_backward_naive does not compute bias_grad; clflash_backward does");
    const uint64_t per_head = clflash_score_matrix_bytes(p.seq_q, p.seq_k, sizeof(float));
    const uint64_t total = (uint64_t)p.batch * p.heads_q;
    const uint64_t matrices = p.softcap != 0.0f ? 3 : 2; /* P, dP and, with softcap, f' */
    if (per_head > c->info.max_alloc_size)
        return clflash_fail(CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE,
                            "one head's fp32 P matrix needs %llu bytes; the device's largest allocation is %llu",
                            (unsigned long long)per_head, (unsigned long long)c->info.max_alloc_size);
    uint64_t chunk = c->info.max_alloc_size / per_head;
    if (c->info.global_mem_size / (2 * matrices) / per_head < chunk) /* the matrices within half the memory */
        chunk = c->info.global_mem_size / (2 * matrices) / per_head;
    if (chunk > total)
        chunk = total;
    if (chunk > CLFLASH_MAX_GRID_DIM)
        chunk = CLFLASH_MAX_GRID_DIM;
    if (chunk == 0)
        chunk = 1;
    const uint64_t acc_bytes = (uint64_t)p.batch * p.heads_kv * p.seq_k * p.head_dim * sizeof(float);
    const uint64_t accq_bytes = (uint64_t)p.batch * p.heads_q * p.seq_q * p.head_dim * sizeof(float);

    if ((st = make_kernels(c, &p, &nk, &softmax_wg)) != CLFLASH_SUCCESS)
        return st;
    pm = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)(chunk * per_head), NULL, &err);
    if (err == CL_SUCCESS)
        dpm = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)(chunk * per_head), NULL, &err);
    if (err == CL_SUCCESS && matrices == 3)
        gm = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)(chunk * per_head), NULL, &err);
    if (err == CL_SUCCESS)
        acc_q = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)accq_bytes, NULL, &err);
    if (err == CL_SUCCESS)
        acc_k = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)acc_bytes, NULL, &err);
    if (err == CL_SUCCESS)
        acc_v = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)acc_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        st = clflash_fail(err, "allocating the naive backward's matrices (%llu x %llu bytes) or accumulators failed",
                          (unsigned long long)matrices, (unsigned long long)(chunk * per_head));
        goto out;
    }

    {
        const cl_uint seq_q = p.seq_q, seq_k = p.seq_k, heads_q = p.heads_q, group = p.group, batch = p.batch,
                      heads_kv = p.heads_kv;
        const cl_ulong ql[4] = {p.q.offset, p.q.batch_stride, p.q.head_stride, p.q.seq_stride};
        const cl_ulong kl[4] = {p.k.offset, p.k.batch_stride, p.k.head_stride, p.k.seq_stride};
        const cl_ulong vl[4] = {p.v.offset, p.v.batch_stride, p.v.head_stride, p.v.seq_stride};
        const cl_ulong ol[4] = {p.o.offset, p.o.batch_stride, p.o.head_stride, p.o.seq_stride};
        const clflash_arg products_args[] = {
            {sizeof(cl_mem), &q},       {sizeof(cl_mem), &k},       {sizeof(cl_mem), &v},
            {sizeof(cl_mem), &d_o},     {sizeof(cl_mem), &lse},     {sizeof(cl_mem), &pm},
            {sizeof(cl_mem), &dpm},     {sizeof(cl_uint), &seq_q},  {sizeof(cl_uint), &seq_k},
            {sizeof(cl_uint), &heads_q}, {sizeof(cl_uint), &group}};
        const clflash_arg softmax_args[] = {
            {sizeof(cl_mem), &pm}, {sizeof(cl_mem), &dpm}, {sizeof(cl_uint), &seq_q}, {sizeof(cl_uint), &seq_k}};
        const clflash_arg dq_args[] = {
            {sizeof(cl_mem), &dpm},     {sizeof(cl_mem), &k},       {sizeof(cl_mem), &acc_q},
            {sizeof(cl_uint), &seq_q},  {sizeof(cl_uint), &seq_k},  {sizeof(cl_uint), &heads_q},
            {sizeof(cl_uint), &group}};
        const clflash_arg dkdv_args[] = {
            {sizeof(cl_mem), &pm},      {sizeof(cl_mem), &dpm},     {sizeof(cl_mem), &q},
            {sizeof(cl_mem), &d_o},     {sizeof(cl_mem), &acc_k},   {sizeof(cl_mem), &acc_v},
            {sizeof(cl_uint), &seq_q},  {sizeof(cl_uint), &seq_k},  {sizeof(cl_uint), &heads_q},
            {sizeof(cl_uint), &group}};
        const clflash_arg store_args[] = {
            {sizeof(cl_mem), &acc_q},   {sizeof(cl_mem), &acc_k},   {sizeof(cl_mem), &acc_v},
            {sizeof(cl_mem), &dq},      {sizeof(cl_mem), &dk},      {sizeof(cl_mem), &dv},
            {sizeof(cl_uint), &batch},  {sizeof(cl_uint), &seq_q},  {sizeof(cl_uint), &seq_k},
            {sizeof(cl_uint), &heads_q}, {sizeof(cl_uint), &heads_kv}, {sizeof(float), &p.scale}};
        const size_t tile_local[3] = {TILE, TILE, 1}, softmax_local[3] = {softmax_wg, 1, 1};

        /* Arguments that do not change between chunks. */
        err = clflash_set_args(nk.products, 0, products_args, 11);
        if (!err) err = clSetKernelArg(nk.products, 12, sizeof(float), &p.scale);
        if (!err) err = clflash_set_feature_args(nk.products, 29, &p, 0);
        if (!err) err = clSetKernelArg(nk.products, 29 + CLFLASH_FEATURE_ARGS - 1, sizeof(cl_mem), gm ? &gm : NULL);
        if (!err) err = clflash_set_args(nk.softmax, 0, softmax_args, 4);
        if (!err) err = clSetKernelArg(nk.softmax, 4, sizeof(cl_mem), gm ? &gm : NULL);
        if (!err) err = clflash_set_args(nk.dq, 0, dq_args, 7);
        if (!err) err = clflash_set_args(nk.dkdv, 0, dkdv_args, 10);
        if (!err) err = clflash_set_args(nk.store, 0, store_args, 12);
        for (cl_uint i = 0; !err && i < 4; i++) {
            err = clSetKernelArg(nk.products, 13 + i, sizeof(cl_ulong), &ql[i]);
            if (!err) err = clSetKernelArg(nk.products, 17 + i, sizeof(cl_ulong), &kl[i]);
            if (!err) err = clSetKernelArg(nk.products, 21 + i, sizeof(cl_ulong), &vl[i]);
            if (!err) err = clSetKernelArg(nk.products, 25 + i, sizeof(cl_ulong), &ol[i]);
            if (!err) err = clSetKernelArg(nk.dq, 8 + i, sizeof(cl_ulong), &kl[i]);
            if (!err) err = clSetKernelArg(nk.dkdv, 13 + i, sizeof(cl_ulong), &ql[i]);
            if (!err) err = clSetKernelArg(nk.dkdv, 17 + i, sizeof(cl_ulong), &ol[i]);
            if (!err) err = clSetKernelArg(nk.store, 12 + i, sizeof(cl_ulong), &ql[i]);
            if (!err) err = clSetKernelArg(nk.store, 16 + i, sizeof(cl_ulong), &kl[i]);
            if (!err) err = clSetKernelArg(nk.store, 20 + i, sizeof(cl_ulong), &vl[i]);
        }

        for (uint64_t bh0 = 0; !err && bh0 < total; bh0 += chunk) {
            const cl_uint first = (cl_uint)bh0;
            const cl_uint heads = (cl_uint)(total - bh0 < chunk ? total - bh0 : chunk);
            const cl_uint g0 = first / p.group, groups = (first + heads - 1) / p.group - g0 + 1;
            const size_t g_products[3] = {round_up(p.seq_k, TILE), round_up(p.seq_q, TILE), heads};
            const size_t g_softmax[3] = {softmax_wg * p.seq_q, heads, 1};
            const size_t g_dq[3] = {round_up(p.head_dim, TILE), round_up(p.seq_q, TILE), heads};
            const size_t g_dkdv[3] = {round_up(p.seq_k, TILE), round_up(p.head_dim, TILE), groups};
            cl_event e1 = NULL, e2 = NULL, e3 = NULL, e4 = NULL;
            err = clSetKernelArg(nk.products, 11, sizeof(cl_uint), &first);
            if (!err) err = clSetKernelArg(nk.dq, 7, sizeof(cl_uint), &first);
            if (!err) err = clSetKernelArg(nk.dkdv, 10, sizeof(cl_uint), &first);
            if (!err) err = clSetKernelArg(nk.dkdv, 11, sizeof(cl_uint), &heads);
            if (!err) err = clSetKernelArg(nk.dkdv, 12, sizeof(cl_uint), &g0);
            if (!err)
                err = prev ? clEnqueueNDRangeKernel(qu, nk.products, 3, NULL, g_products, tile_local, 1, &prev, &e1)
                           : clEnqueueNDRangeKernel(qu, nk.products, 3, NULL, g_products, tile_local, num_wait, wait, &e1);
            if (!err) err = clEnqueueNDRangeKernel(qu, nk.softmax, 3, NULL, g_softmax, softmax_local, 1, &e1, &e2);
            if (!err) err = clEnqueueNDRangeKernel(qu, nk.dq, 3, NULL, g_dq, tile_local, 1, &e2, &e3);
            if (!err) err = clEnqueueNDRangeKernel(qu, nk.dkdv, 3, NULL, g_dkdv, tile_local, 1, &e3, &e4);
            if (prev) clReleaseEvent(prev);
            if (e1) clReleaseEvent(e1);
            if (e2) clReleaseEvent(e2);
            if (e3) clReleaseEvent(e3);
            prev = e4;
        }
        if (!err) {
            const size_t g_store[3] = {round_up(p.seq_q > p.seq_k ? p.seq_q : p.seq_k, TILE),
                                       round_up(p.head_dim, TILE), p.heads_q};
            cl_event e5 = NULL;
            err = clEnqueueNDRangeKernel(qu, nk.store, 3, NULL, g_store, tile_local, 1, &prev, &e5);
            clReleaseEvent(prev);
            prev = e5;
        }
    }
    if (err != CL_SUCCESS) {
        if (prev) clReleaseEvent(prev);
        prev = NULL;
        st = clflash_fail(err, "enqueueing the naive backward kernels failed");
    }
out:
    release_kernels(&nk);
    /* Released now, freed by OpenCL once the enqueued kernels are done with them. */
    if (pm) clReleaseMemObject(pm);
    if (dpm) clReleaseMemObject(dpm);
    if (gm) clReleaseMemObject(gm);
    if (acc_q) clReleaseMemObject(acc_q);
    if (acc_k) clReleaseMemObject(acc_k);
    if (acc_v) clReleaseMemObject(acc_v);
    if (st != CLFLASH_SUCCESS)
        return st;
    if (done)
        *done = prev;
    else if (prev)
        clReleaseEvent(prev);
    return CLFLASH_SUCCESS;
}
