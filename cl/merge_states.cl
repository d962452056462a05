/*
 * merge_states.cl - merges partial attention results of the same query rows over disjoint key sets
 * into one: the split-KV path's combine step and clflash_merge_states. The host prepends common.cl.
 *
 * Why a kernel of its own: a row's partial results (O_p, normalised, and its natural-log lse_p)
 * combine exactly, lse = log sum_p exp(lse_p) and O = sum_p exp(lse_p - lse) O_p, whatever the
 * kernel that produced them; one kernel does it for every producer, so the split path and the
 * public call give the same bits for the same parts.
 *
 * Work: MERGE_LANES work-items per row, each owning the columns lane, lane + MERGE_LANES, ...; the
 * work-group holds MERGE_ROWS rows (MERGE_LANES * MERGE_ROWS work-items). A row's lanes first read
 * its parts' lse values into local memory together (one barrier); then every work-item of the row
 * takes them in the same order, so the maximum, the weights and the sum are the same in all of
 * them. Parts are taken in order
 * p = 0, 1, ...: the result does not depend on anything but the parts.
 *   - A part whose lse is -INFINITY contributes nothing and its O is not read.
 *   - If every part's lse is -INFINITY (no key seen anywhere), O = 0 and lse = -INFINITY.
 *   - A NaN lse makes the row's O and lse NaN.
 * Parts are in the storage type CLFLASH_DTYPE_x (F32, F16 or BF16; load_g), the merged O in
 * CLFLASH_OUT_x (store_o). Rows are [batch][heads][seq]: row r is (b, h, i) with
 * r = (b * heads + h) * seq + i; the grid's first dimension covers rows * MERGE_LANES work-items.
 *
 * VARLEN (the split-KV forward of a variable-length batch): the parts are [batch][heads][seq] rows
 * with seq the longest sequence; row (b, h, i) is merged into packed row cu_seqlens_q[b] + i of O
 * and into lse[h][total_q] there (common.cl's seq_span and lse_row0), and only for i below the
 * sequence's length: the other parts' rows were never written. Without VARLEN cu_seqlens_q and
 * total_q are not read.
 *
 * Defines: HEAD_DIM, MERGE_LANES, MERGE_ROWS, MERGE_MAX_PARTS (CLFLASH_MAX_SPLITS), WITH_LSE,
 * VARLEN and the storage types.
 */

#define COLS ((HEAD_DIM + MERGE_LANES - 1) / MERGE_LANES) /* columns per work-item */
/* Parts whose O loads go out together: 8 loads per work-item in flight (8 parts of one column
 * with many lanes per row, as in decoding; fewer parts where a work-item has several columns).
 * Intel's Xe-HPC compiler (SIMD32, 128 registers) spilled with 16 in flight: the loads' 64-bit
 * addresses take 4 registers each there. */
#define MERGE_UNROLL (COLS >= 8 ? 1 : 8 / COLS)

__kernel __attribute__((reqd_work_group_size(MERGE_LANES * MERGE_ROWS, 1, 1))) void
merge_states(__global const bits_t *part_o, __global const float *part_lse, __global out_t *o, __global float *lse,
             uint parts, uint heads, uint seq, ulong rows,
             ulong p_off, ulong p_bs, ulong p_hs, ulong p_ss, ulong p_part_stride, ulong lse_part_stride,
             ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss, __global const int *cu_seqlens_q, uint total_q)
{
    __local float row_lse[MERGE_ROWS][MERGE_MAX_PARTS]; /* the parts' lse of each of the group's rows */
    const uint slot = get_local_id(0) / MERGE_LANES, lane = get_local_id(0) % MERGE_LANES;
    const ulong row_id = get_global_id(0) / MERGE_LANES;
    const ulong row = row_id < rows ? row_id : rows - 1; /* past the end: row rows - 1, not stored */
    const uint i = (uint)(row % seq), h = (uint)(row / seq % heads), b = (uint)(row / seq / heads);
    /* VARLEN: row i of entry b is stored at its packed row, if the sequence has it */
    uint q_first;
    const int live = row_id < rows && i < seq_span(cu_seqlens_q, b, total_q, seq, &q_first);

    /* The row's lse values, read by its lanes side by side (one load each for up to MERGE_LANES
     * parts), so that the loads of the parts' O below wait on local memory only. */
    __local float *const ls = row_lse[slot];
    const uint n_parts = live ? parts : 0; /* a row not stored reads nothing (VARLEN: nothing was written) */
    for (uint p = lane; p < n_parts; p += MERGE_LANES)
        ls[p] = part_lse[p * lse_part_stride + row];
    barrier(CLK_LOCAL_MEM_FENCE);

    float top = -INFINITY;
    for (uint p = 0; p < n_parts; p++)
        top = fmax(top, ls[p]);
    const float ref = top == -INFINITY ? 0.0f : top;

    /* Parts MERGE_UNROLL at a time, every O load of a group issued before any of its values is
     * used: one memory latency per group instead of one per part (a part at a time, the merge of
     * 32 rows of 33 parts took 14 us on the H200). The sums take the parts in order. */
    float sum = 0.0f;
    float acc[COLS];
#pragma unroll
    for (uint k = 0; k < COLS; k++)
        acc[k] = 0.0f;
    const ulong pbase = tensor_index(p_off, p_bs, p_hs, p_ss, b, h, i);
    for (uint p0 = 0; p0 < n_parts; p0 += MERGE_UNROLL) {
        float l[MERGE_UNROLL], x[MERGE_UNROLL][COLS];
#pragma unroll
        for (uint u = 0; u < MERGE_UNROLL; u++)
            l[u] = p0 + u < n_parts ? ls[p0 + u] : -INFINITY;
#pragma unroll
        for (uint u = 0; u < MERGE_UNROLL; u++)
#pragma unroll
            for (uint k = 0; k < COLS; k++) {
                const uint c = lane + k * MERGE_LANES;
                x[u][k] = 0.0f;
                if (l[u] != -INFINITY && c < HEAD_DIM) /* an empty part: its O is not read */
                    x[u][k] = load_g(part_o, pbase + (p0 + u) * p_part_stride + c);
            }
#pragma unroll
        for (uint u = 0; u < MERGE_UNROLL; u++) {
            if (l[u] == -INFINITY)
                continue;
            const float w = exp(l[u] - ref); /* NaN for a NaN lse (fmax above skipped it): the sum is NaN then */
            sum += w;
#pragma unroll
            for (uint k = 0; k < COLS; k++)
                acc[k] = fma(w, x[u][k], acc[k]);
        }
    }
    if (!live)
        return;
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, q_first + i);
    for (uint k = 0; k < COLS; k++) {
        const uint c = lane + k * MERGE_LANES;
        if (c < HEAD_DIM)
            store_o(o, obase + c, acc[k] * inv);
    }
#if WITH_LSE
    if (lane == 0)
        lse[lse_row0(b, h, heads, seq, total_q, q_first) + i] = sum == 0.0f ? -INFINITY : ref + log(sum);
#else
    (void)lse;
#endif
}
