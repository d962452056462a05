/*
 * nv_mma_backward_tiles.cl - the tile operations of the tensor-core backward (nv_mma_backward.cl)
 * on mma.sync and ldmatrix: how a streamed tile (a key group's Q and dO rows, a query group's K and V
 * rows) is laid out in local memory, copied there, and multiplied with a warp's A fragments.
 *
 * Why a file of its own: nv_mma_backward.cl's algorithm (which tiles a group visits, the masks, the
 * score transforms, P and dS) is the same whichever instructions do the products. The host puts
 * this file between nv_mma_scores.cl and nv_mma_backward.cl; a file for other instructions takes
 * its place by providing the same names:
 *   TILE_ROW(r)                  offset in halves of row r (a multiple of 16) of a streamed tile;
 *   tile_scores(a, rows, x0, x1) A (16 x SHARE_DIM, registers) times 16 rows of a tile, transposed;
 *   tile_accumulate(acc, a, rows)
 *                                acc += A (16 x 16, registers) times 16 rows of a tile (rows are k);
 *   tile_stream, tile_stream_start_at, tile_stream_next
 *                                the copies of two tensors' next BLOCK rows (K and V, or Q and dO)
 *                                into a tile and the one BLOCK * ROW_STRIDE halves after it;
 *   tiles_arrived()              waits for this work-item's copies (a barrier then makes them
 *                                everybody's).
 *
 * Layout here: rows of ROW_STRIDE halves (16 bytes of padding against bank conflicts), read by
 * ldmatrix; each warp loads the B fragments of its own products.
 */

#define TILE_ROW(r) ((r) * ROW_STRIDE)

/* (x0, x1) = A times 16 rows of a tile, transposed (nv_mma_scores.cl's row_products). */
static inline void tile_scores(const uint4 *a, __local const ushort *rows, float4 *x0, float4 *x1)
{
    row_products(a, rows, x0, x1);
}

/* acc[dt] += A (16 x 16, registers) times 16 rows x SHARE_DIM (the warp's share) of a local tile
 * read transposed (rows are the k dimension): the products dV += P^T dO, dK += dS^T Q and
 * dQ += dS K. */
static inline void tile_accumulate(float4 *acc, uint4 a, __local const ushort *rows)
{
    const uint lane = get_local_id(0) % 32;
    __local const ushort *src =
        rows + ((lane / 8) % 2 * 8 + lane % 8) * ROW_STRIDE + share_column() + lane / 16 * 8;
#pragma unroll
    for (uint dt = 0; dt < SHARE_TILES; dt += 2) {
        const uint4 f = load_matrix_x4_trans(src + dt * 8);
        acc[dt] = mma_16x8x16(a, f.x, f.y, acc[dt]);
        acc[dt + 1] = mma_16x8x16(a, f.z, f.w, acc[dt + 1]);
    }
}

/* nv_mma_common.cl's K/V stream, in the rows above */
#define tile_stream kv_stream
#define tile_stream_start_at kv_stream_start_at
#define tile_stream_next kv_stream_next

static inline void tiles_arrived(void)
{
    async_wait_all();
}
