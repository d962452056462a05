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
 * work-group holds MERGE_ROWS rows (MERGE_LANES * MERGE_ROWS work-items); no local memory, no
 * barrier. Every work-item of a row reads the row's parts' lse values in the same order, so the
 * maximum, the weights and the sum are the same in all of them. Parts are taken in order
 * p = 0, 1, ...: the result does not depend on anything but the parts.
 *   - A part whose lse is -INFINITY contributes nothing and its O is not read.
 *   - If every part's lse is -INFINITY (no key seen anywhere), O = 0 and lse = -INFINITY.
 *   - A NaN lse makes the row's O and lse NaN.
 * Parts are in the storage type CLFLASH_DTYPE_x (F32, F16 or BF16; load_g), the merged O in
 * CLFLASH_OUT_x (store_o). Rows are [batch][heads][seq]: row r is (b, h, i) with
 * r = (b * heads + h) * seq + i; the grid's first dimension covers rows * MERGE_LANES work-items.
 *
 * Defines: HEAD_DIM, MERGE_LANES, MERGE_ROWS, WITH_LSE, and the storage types.
 */

__kernel __attribute__((reqd_work_group_size(MERGE_LANES * MERGE_ROWS, 1, 1))) void
merge_states(__global const bits_t *part_o, __global const float *part_lse, __global out_t *o, __global float *lse,
             uint parts, uint heads, uint seq, ulong rows,
             ulong p_off, ulong p_bs, ulong p_hs, ulong p_ss, ulong p_part_stride, ulong lse_part_stride,
             ulong o_off, ulong o_bs, ulong o_hs, ulong o_ss)
{
    const ulong row = get_global_id(0) / MERGE_LANES;
    const uint lane = get_local_id(0) % MERGE_LANES;
    if (row >= rows)
        return;
    const uint i = (uint)(row % seq), h = (uint)(row / seq % heads), b = (uint)(row / seq / heads);

    float top = -INFINITY;
    for (uint p = 0; p < parts; p++)
        top = fmax(top, part_lse[p * lse_part_stride + row]);
    const float ref = top == -INFINITY ? 0.0f : top;

    float sum = 0.0f;
    float acc[(HEAD_DIM + MERGE_LANES - 1) / MERGE_LANES];
    for (uint k = 0; k < (HEAD_DIM + MERGE_LANES - 1) / MERGE_LANES; k++)
        acc[k] = 0.0f;
    const ulong pbase = tensor_index(p_off, p_bs, p_hs, p_ss, b, h, i);
    for (uint p = 0; p < parts; p++) {
        const float l = part_lse[p * lse_part_stride + row];
        if (l == -INFINITY)
            continue; /* an empty part: its O is not read */
        const float w = exp(l - ref); /* NaN for a NaN lse (fmax above skipped it): the sum is NaN then */
        sum += w;
        for (uint k = 0; k < (HEAD_DIM + MERGE_LANES - 1) / MERGE_LANES; k++) {
            const uint c = lane + k * MERGE_LANES;
            if (c < HEAD_DIM)
                acc[k] = fma(w, load_g(part_o, pbase + p * p_part_stride + c), acc[k]);
        }
    }
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    const ulong obase = tensor_index(o_off, o_bs, o_hs, o_ss, b, h, i);
    for (uint k = 0; k < (HEAD_DIM + MERGE_LANES - 1) / MERGE_LANES; k++) {
        const uint c = lane + k * MERGE_LANES;
        if (c < HEAD_DIM)
            store_o(o, obase + c, acc[k] * inv);
    }
#if WITH_LSE
    if (lane == 0)
        lse[row] = sum == 0.0f ? -INFINITY : ref + log(sum);
#else
    (void)lse;
#endif
}
