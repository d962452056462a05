/*
 * ring_paged.c - a paged K/V cache for this rank's own shard of clflash_ring_forward
 * (clflash_ring_desc.block_table): the checks of the paging fields, the one host read of the block
 * table with its entries checked against the pools, and the gather of the pages into a compact
 * shard on the device.
 *
 * Why gather instead of handing the table to clflash_forward: with a window, ALiBi, key lengths or
 * a bias the ring calls clflash_forward on key chunks that start at a row inside the shard, which
 * a paged call can only express when that row is a whole number of pages; and the own shard is
 * read to the host in compact form anyway, to travel. One compact copy made once makes the own
 * shard like every other shard for the rest of the call. Reading the table on the host once (it is
 * small: batch * pages_per_seq int32s) lets the ring refuse a bad entry on every rank before
 * anything is enqueued, and the copies then only ever address pages inside the pools.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>

/* Pages a row of the table uses: those holding rows 0 .. seq_local - 1. */
static uint32_t pages_used(const clflash_ring_desc *d)
{
    return (uint32_t)(((uint64_t)d->seq_local + d->page_size - 1) / d->page_size);
}

clflash_status ring_paged_check(const clflash_ring_desc *d)
{
    if (d->block_table == NULL) {
        if (d->page_size || d->pages_per_seq || d->num_pages)
            return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                             "page_size, pages_per_seq or num_pages is set but block_table is NULL");
        return CLFLASH_SUCCESS;
    }
    if (d->page_size == 0 || d->page_size > CLFLASH_MAX_PAGE_SIZE)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "page_size %u is not in 1 .. %u", d->page_size,
                         CLFLASH_MAX_PAGE_SIZE);
    if (d->pages_per_seq == 0 || d->num_pages == 0 || d->num_pages > (uint32_t)INT32_MAX)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE, "%s is %u; a paged shard needs 1 .. %d",
                         d->pages_per_seq == 0 ? "pages_per_seq" : "num_pages",
                         d->pages_per_seq == 0 ? d->pages_per_seq : d->num_pages, INT32_MAX);
    if ((uint64_t)d->pages_per_seq * d->page_size < d->seq_local)
        return ring_fail(CLFLASH_ERROR_INVALID_SHAPE,
                         "seq_local %u is more than pages_per_seq %u x page_size %u rows a block table row holds",
                         d->seq_local, d->pages_per_seq, d->page_size);
    return CLFLASH_SUCCESS;
}

clflash_status ring_paged_read_table(clflash_context *ctx, const clflash_ring_desc *d, int32_t **table)
{
    *table = NULL;
    const size_t n = (size_t)d->batch * d->pages_per_seq;
    int32_t *t = malloc(n * sizeof *t);
    if (t == NULL)
        return ring_fail(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, "no host memory for the block table (%zu int32s)", n);
    const cl_int err = clEnqueueReadBuffer(clflash_context_queue(ctx), d->block_table, CL_TRUE, 0, n * sizeof *t, t,
                                           0, NULL, NULL);
    if (err != CL_SUCCESS) {
        free(t);
        return ring_fail(err, "reading the block table: %d", err);
    }
    const uint32_t used = pages_used(d);
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t p = 0; p < used; p++) {
            const int32_t e = t[(size_t)b * d->pages_per_seq + p];
            if (e < 0 || (uint32_t)e >= d->num_pages) {
                free(t);
                return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "block_table[%u][%u] is %d, not a page of the "
                                 "pools (0 .. %u)", b, p, (int)e, d->num_pages - 1);
            }
        }
    *table = t;
    return CLFLASH_SUCCESS;
}

/* The pages of one pool (layout lin, K/V heads heads) into dst from element base, compact
 * [batch][heads][seq_local][head_dim]: one copy per (batch entry, used page, head), a rectangle
 * where the slots have gaps between them, row by row where they overlap. */
static cl_int gather_pool(cl_command_queue cq, const clflash_ring_desc *d, uint32_t heads, const int32_t *table,
                          cl_mem pool, const clflash_layout *lin, cl_mem dst, uint64_t base)
{
    const clflash_layout l = ring_resolve_layout(lin, heads, d->page_size, d->head_dim);
    const size_t e = clflash_dtype_size(d->dtype), row = (size_t)d->head_dim * e;
    const uint32_t used = pages_used(d);
    cl_int err = CL_SUCCESS;
    for (uint32_t b = 0; b < d->batch && err == CL_SUCCESS; b++)
        for (uint32_t p = 0; p < used && err == CL_SUCCESS; p++) {
            const uint64_t page = (uint64_t)table[(size_t)b * d->pages_per_seq + p]; /* checked: < num_pages */
            const uint32_t r0 = p * d->page_size;
            const uint32_t rows = d->seq_local - r0 < d->page_size ? d->seq_local - r0 : d->page_size;
            for (uint32_t h = 0; h < heads && err == CL_SUCCESS; h++) {
                const size_t src = (size_t)((l.offset + page * l.batch_stride + h * l.head_stride) * e);
                const size_t to =
                    (size_t)((base + (((uint64_t)b * heads + h) * d->seq_local + r0) * d->head_dim) * e);
                if (l.seq_stride == d->head_dim) {
                    err = clEnqueueCopyBuffer(cq, pool, dst, src, to, row * rows, 0, NULL, NULL);
                } else if (l.seq_stride > d->head_dim) {
                    const size_t so[3] = {src, 0, 0}, dO[3] = {to, 0, 0}, region[3] = {row, rows, 1};
                    err = clEnqueueCopyBufferRect(cq, pool, dst, so, dO, region, (size_t)(l.seq_stride * e), 0, row, 0,
                                                  0, NULL, NULL);
                } else {
                    for (uint32_t i = 0; i < rows && err == CL_SUCCESS; i++)
                        err = clEnqueueCopyBuffer(cq, pool, dst, src + (size_t)(i * l.seq_stride * e), to + i * row,
                                                  row, 0, NULL, NULL);
                }
            }
        }
    return err;
}

clflash_status ring_paged_gather(cl_command_queue cq, const clflash_ring_desc *d, const int32_t *table, cl_mem k,
                                 cl_mem v, cl_mem dst)
{
    const uint32_t hkv = d->heads_kv ? d->heads_kv : d->heads_q;
    cl_int err = gather_pool(cq, d, hkv, table, k, &d->k, dst, 0);
    if (err == CL_SUCCESS)
        err = gather_pool(cq, d, hkv, table, v, &d->v, dst, (uint64_t)d->batch * hkv * d->seq_local * d->head_dim);
    return err == CL_SUCCESS ? CLFLASH_SUCCESS : ring_fail(err, "copying the own shard's pages: %d", err);
}
