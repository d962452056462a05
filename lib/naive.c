/*
 * naive.c - clflash_forward_naive: the baseline the flash path is measured against. It materializes S = scale * Q K^T for as
 * many heads at a time as one allocation allows, softmaxes it in place, and multiplies by V.
 *
 * Why keep it: it is what naive attention does (the O(n^2) bytes written and read back that flash
 * avoids), and so the honest comparison for clflash-bench and a second opinion for the tests.
 * Each step is a tiled kernel (cl/naive_attention.cl); the steps are chained by events so the
 * order also holds on out-of-order queues.
 *
 * A failed call writes no caller buffer: the chunks' kernels write the call's own temporaries (O
 * and lse), and one last kernel, naive_store, copies them to the caller's O and lse. It is enqueued
 * only when every command before it was, so if an enqueue fails part-way the commands already
 * enqueued still run but write only the temporaries, which are released after them. (An earlier
 * design let the chunks write O and lse and, on a failure, set an abort flag that they read through
 * a second queue while a user event held them back; OpenCL does not promise that order between two
 * queues, and Intel's CPU runtime ran the kernels with the old flag.)
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

#define TILE 16

typedef struct {
    cl_kernel scores, softmax, pv, store;
} naive_kernels;

static void release_kernels(naive_kernels *nk)
{
    if (nk->scores) clReleaseKernel(nk->scores);
    if (nk->softmax) clReleaseKernel(nk->softmax);
    if (nk->pv) clReleaseKernel(nk->pv);
    if (nk->store) clReleaseKernel(nk->store);
    nk->scores = nk->softmax = nk->pv = nk->store = NULL;
}

static clflash_status make_kernels(clflash_context *c, const clflash_problem *p, int with_lse, naive_kernels *nk,
                                   size_t *softmax_wg)
{
    char defines[512], features[256];
    cl_program prog;
    cl_int e1, e2, e3, e4;
    clflash_status st;
    size_t wg = CLFLASH_NAIVE_SOFTMAX_WG, kernel_wg = 0;
    if (c->info.max_work_group_size < TILE * TILE)
        return clflash_fail(CLFLASH_ERROR_UNSUPPORTED, "the naive path needs work-groups of %d items; the device allows %zu",
                            TILE * TILE, c->info.max_work_group_size);
    for (;;) {
        clflash_feature_defines(p, with_lse, features, sizeof features);
        snprintf(defines, sizeof defines, "%s -D HEAD_DIM=%u -D SOFTMAX_WG=%zu", features, p->head_dim, wg);
        if ((st = clflash_get_program(c, CLFLASH_SOURCE_NAIVE_ATTENTION, defines, &prog)) != CLFLASH_SUCCESS)
            return st;
        nk->scores = clCreateKernel(prog, "naive_scores", &e1);
        nk->softmax = clCreateKernel(prog, "naive_softmax", &e2);
        nk->pv = clCreateKernel(prog, "naive_pv", &e3);
        nk->store = clCreateKernel(prog, "naive_store", &e4);
        if (e1 || e2 || e3 || e4) {
            release_kernels(nk);
            return clflash_fail(e1 ? e1 : e2 ? e2 : e3 ? e3 : e4, "creating the naive kernels failed");
        }
        if ((e1 = clGetKernelWorkGroupInfo(nk->softmax, c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_wg,
                                           &kernel_wg, NULL)) != CL_SUCCESS) {
            release_kernels(nk);
            return clflash_fail(e1, "clGetKernelWorkGroupInfo failed");
        }
        if (kernel_wg >= wg || wg == 1)
            break;
        release_kernels(nk); /* the softmax kernel runs fewer items here: rebuild it narrower */
        wg /= 2;
    }
    *softmax_wg = wg;
    return CLFLASH_SUCCESS;
}

/* Enqueues one kernel that waits on `after` (or on the caller's list the first time) and leaves its
 * event in *event. */
static cl_int enqueue(cl_command_queue qu, cl_kernel k, const size_t *global, const size_t *local, cl_uint nwait,
                      const cl_event *wait, cl_event *event)
{
    return clEnqueueNDRangeKernel(qu, k, 3, NULL, global, local, nwait, wait, event);
}

clflash_status clflash_forward_naive(clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue,
                                     cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse, cl_uint num_wait,
                                     const cl_event *wait, cl_event *done)
{
    clflash_problem p;
    cl_command_queue qu;
    clflash_status st;
    naive_kernels nk = {0};
    size_t softmax_wg = 0;
    uint64_t per_head, total, chunk;
    cl_mem s = NULL, o_tmp = NULL, lse_tmp = NULL;
    cl_int err = CL_SUCCESS;
    cl_event prev = NULL;

    clflash_clear_detail();
    if ((st = clflash_validate_call(c, d, queue, q, k, v, o, lse, num_wait, wait, &p, &qu)) != CLFLASH_SUCCESS ||
        (st = clflash_refuse_paged(&p, "clflash_forward_naive")) != CLFLASH_SUCCESS ||
        (st = clflash_refuse_varlen(&p, "clflash_forward_naive")) != CLFLASH_SUCCESS)
        return st;
    per_head = clflash_score_matrix_bytes(p.seq_q, p.seq_k, p.out_elem_size);
    total = (uint64_t)p.batch * p.heads_q;
    chunk = clflash_naive_heads_per_chunk(&p, c->info.max_alloc_size);
    if (chunk == 0)
        return clflash_fail(CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE,
                            "one head's score matrix needs %llu bytes; the device's largest allocation is %llu",
                            (unsigned long long)per_head, (unsigned long long)c->info.max_alloc_size);
    const uint64_t rows = total * p.seq_q, o_bytes = rows * p.head_dim * p.out_elem_size;
    if (o_bytes > c->info.max_alloc_size)
        return clflash_fail(CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE,
                            "the naive path's temporary O needs %llu bytes; the device's largest allocation is %llu",
                            (unsigned long long)o_bytes, (unsigned long long)c->info.max_alloc_size);

    if ((st = make_kernels(c, &p, lse != NULL, &nk, &softmax_wg)) != CLFLASH_SUCCESS)
        return st;
    s = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)(chunk * per_head), NULL, &err);
    if (err == CL_SUCCESS)
        o_tmp = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)o_bytes, NULL, &err);
    if (err == CL_SUCCESS && lse != NULL)
        lse_tmp = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, (size_t)(rows * sizeof(float)), NULL, &err);
    if (err != CL_SUCCESS) {
        if (o_tmp) clReleaseMemObject(o_tmp);
        if (s) clReleaseMemObject(s);
        release_kernels(&nk);
        return clflash_fail(err, "allocating the naive path's score matrix (%llu bytes) or its temporaries failed",
                            (unsigned long long)(chunk * per_head));
    }

    {
        const cl_uint seq_q = p.seq_q, seq_k = p.seq_k, heads_q = p.heads_q, group = p.group;
        const float score_scale = p.scale * p.qk_scale;
        const cl_ulong ql[4] = {p.q.offset, p.q.batch_stride, p.q.head_stride, p.q.seq_stride};
        const cl_ulong kl[4] = {p.k.offset, p.k.batch_stride, p.k.head_stride, p.k.seq_stride};
        const cl_ulong vl[4] = {p.v.offset, p.v.batch_stride, p.v.head_stride, p.v.seq_stride};
        /* P V writes the temporary O: contiguous [batch][heads][seq_q][head_dim] */
        const cl_ulong tl[4] = {0, (cl_ulong)p.heads_q * p.seq_q * p.head_dim, (cl_ulong)p.seq_q * p.head_dim,
                                p.head_dim};
        const cl_ulong ol[4] = {p.o.offset, p.o.batch_stride, p.o.head_stride, p.o.seq_stride};
        const cl_ulong all_rows = rows;
        const clflash_arg score_args[] = {
            {sizeof(cl_mem), &q}, {sizeof(cl_mem), &k}, {sizeof(cl_mem), &s}, {sizeof(cl_uint), &seq_q},
            {sizeof(cl_uint), &seq_k}, {sizeof(cl_uint), &heads_q}, {sizeof(cl_uint), &group}};
        const clflash_arg softmax_args[] = {
            {sizeof(cl_mem), &s}, {sizeof(cl_mem), lse_tmp ? &lse_tmp : NULL}, {sizeof(cl_uint), &seq_q},
            {sizeof(cl_uint), &seq_k}};
        const clflash_arg pv_args[] = {
            {sizeof(cl_mem), &s}, {sizeof(cl_mem), &v}, {sizeof(cl_mem), &o_tmp}, {sizeof(cl_uint), &seq_q},
            {sizeof(cl_uint), &seq_k}, {sizeof(cl_uint), &heads_q}, {sizeof(cl_uint), &group}};
        const clflash_arg store_args[] = {
            {sizeof(cl_mem), &o_tmp}, {sizeof(cl_mem), lse_tmp ? &lse_tmp : NULL}, {sizeof(cl_mem), &o},
            {sizeof(cl_mem), lse ? &lse : NULL}, {sizeof(cl_uint), &heads_q}, {sizeof(cl_uint), &seq_q},
            {sizeof(cl_ulong), &all_rows}};
        const size_t tile_local[3] = {TILE, TILE, 1}, softmax_local[3] = {softmax_wg, 1, 1};

        err = clflash_set_args(nk.scores, 0, score_args, 7);
        if (!err) err = clSetKernelArg(nk.scores, 8, sizeof(float), &score_scale);
        if (!err) err = clflash_set_feature_args(nk.scores, 17, &p, 0);
        if (!err) err = clSetKernelArg(nk.pv, 16, sizeof(float), &p.v_scale);
        for (cl_uint i = 0; !err && i < 4; i++) {
            err = clSetKernelArg(nk.scores, 9 + i, sizeof(cl_ulong), &ql[i]);
            if (!err) err = clSetKernelArg(nk.scores, 13 + i, sizeof(cl_ulong), &kl[i]);
            if (!err) err = clSetKernelArg(nk.pv, 8 + i, sizeof(cl_ulong), &vl[i]);
            if (!err) err = clSetKernelArg(nk.pv, 12 + i, sizeof(cl_ulong), &tl[i]);
            if (!err) err = clSetKernelArg(nk.store, 7 + i, sizeof(cl_ulong), &ol[i]);
        }
        if (!err) err = clflash_set_args(nk.softmax, 0, softmax_args, 4);
        if (!err) err = clflash_set_args(nk.pv, 0, pv_args, 7);
        if (!err) err = clflash_set_args(nk.store, 0, store_args, 7);

        for (uint64_t bh0 = 0; !err && bh0 < total; bh0 += chunk) {
            const cl_uint first = (cl_uint)bh0;
            const size_t heads = (size_t)(total - bh0 < chunk ? total - bh0 : chunk);
            const size_t g_scores[3] = {(p.seq_k + TILE - 1) / TILE * TILE, (p.seq_q + TILE - 1) / TILE * TILE, heads};
            const size_t g_softmax[3] = {softmax_wg * p.seq_q, heads, 1};
            const size_t g_pv[3] = {(p.head_dim + TILE - 1) / TILE * TILE, (p.seq_q + TILE - 1) / TILE * TILE, heads};
            cl_event e1 = NULL, e2 = NULL, e3 = NULL;
            err = clSetKernelArg(nk.scores, 7, sizeof(cl_uint), &first);
            if (!err) err = clSetKernelArg(nk.softmax, 4, sizeof(cl_uint), &first);
            if (!err) err = clSetKernelArg(nk.pv, 7, sizeof(cl_uint), &first);
            if (!err) err = prev ? enqueue(qu, nk.scores, g_scores, tile_local, 1, &prev, &e1)
                                 : enqueue(qu, nk.scores, g_scores, tile_local, num_wait, wait, &e1);
            if (!err) err = enqueue(qu, nk.softmax, g_softmax, softmax_local, 1, &e1, &e2);
            if (!err) err = enqueue(qu, nk.pv, g_pv, tile_local, 1, &e2, &e3);
            if (prev) clReleaseEvent(prev);
            if (e1) clReleaseEvent(e1);
            if (e2) clReleaseEvent(e2);
            prev = e3;
        }
        /* the only command that writes the caller's buffers, enqueued only after all the others */
        if (!err) {
            const uint64_t n = rows * p.head_dim;
            const size_t local = 256, most = (size_t)1 << 24;
            const uint64_t groups = (n + local - 1) / local;
            const size_t global = groups > most / local ? most : (size_t)(groups * local); /* a grid-stride loop */
            cl_event e4 = NULL;
            err = clEnqueueNDRangeKernel(qu, nk.store, 1, NULL, &global, &local, 1, &prev, &e4);
            clReleaseEvent(prev);
            prev = e4;
        }
    }
    release_kernels(&nk);
    /* freed by OpenCL once the enqueued kernels are done with them */
    if (lse_tmp) clReleaseMemObject(lse_tmp);
    clReleaseMemObject(o_tmp);
    clReleaseMemObject(s);
    if (err != CL_SUCCESS) {
        if (prev) clReleaseEvent(prev);
        return clflash_fail(err, "enqueueing the naive attention kernels failed");
    }
    if (done)
        *done = prev;
    else if (prev)
        clReleaseEvent(prev);
    return CLFLASH_SUCCESS;
}
