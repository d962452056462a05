/*
 * tuning.c - the per-device-class preferences the planner applies after the tile rule: how large
 * B may grow even when a larger tile fits, how many work-items share a query row, and how large a
 * work-group may be.
 *
 * Why: the rule says what fits, not what runs fast. PoCL reports 1 MiB of "local" memory (it is
 * ordinary cache-backed memory) and would get B near 350 for d = 128; GPUs want a few hundred
 * work-items per group to hide latency. Every level has a default, so an unknown device still gets
 * a sensible plan; the tuning settings portable.max_block, portable.threads_per_row and
 * portable.max_work_group (tuning_params.c) replace them per device, dtype and head_dim.
 */
#include "internal.h"

clflash_tuning clflash_tuning_for(const clflash_device_info *info, uint32_t head_dim, size_t elem_size)
{
    clflash_tuning t;
    (void)elem_size;
    switch (info->device_class) {
    case CLFLASH_CLASS_CPU:
        /* One work-item per row: PoCL runs a work-group as loops over its items, so sharing a row
         * only adds barriers. 64 rows keep Q, K, V and P of a tile within a core's L2. */
        t.max_block = 64;
        t.threads_per_row = 1;
        t.max_work_group = 64;
        break;
    case CLFLASH_CLASS_NVIDIA_GPU:
    case CLFLASH_CLASS_AMD_GPU:
    case CLFLASH_CLASS_INTEL_GPU:
    case CLFLASH_CLASS_OTHER_GPU:
        /* Up to 16 lanes per row and 256 items per group: each lane then owns d/16 output columns
         * (16 registers at d = 256) and B/16 scores of a tile. */
        t.max_block = 64;
        t.threads_per_row = head_dim >= 16 ? 16 : 4;
        t.max_work_group = 256;
        break;
    default:
        t.max_block = 32;
        t.threads_per_row = 4;
        t.max_work_group = 128;
        break;
    }
    if (info->max_work_group_size && t.max_work_group > info->max_work_group_size)
        t.max_work_group = (uint32_t)info->max_work_group_size;
    return t;
}

clflash_tuning clflash_tuning_for_context(const clflash_context *c, const clflash_problem *p)
{
    clflash_tuning tune = clflash_tuning_for(&c->info, p->head_dim, p->elem_size);
    /* The tuning settings portable.max_block, .threads_per_row and .max_work_group replace the
     * class's preferences (the device's work-group limit still caps the last). */
    tune.max_block = (uint32_t)clflash_tuned(p, CLFLASH_TUNE_PORTABLE_MAX_BLOCK, (int32_t)tune.max_block);
    tune.threads_per_row =
        (uint32_t)clflash_tuned(p, CLFLASH_TUNE_PORTABLE_THREADS_PER_ROW, (int32_t)tune.threads_per_row);
    tune.max_work_group = (uint32_t)clflash_tuned(p, CLFLASH_TUNE_PORTABLE_MAX_WORK_GROUP, (int32_t)tune.max_work_group);
    if (c->info.max_work_group_size && tune.max_work_group > c->info.max_work_group_size)
        tune.max_work_group = (uint32_t)c->info.max_work_group_size;
    if (c->threads_per_row) { /* the caller's override wins over the class's preference */
        tune.threads_per_row = c->threads_per_row;
        if (tune.max_work_group < 64u * c->threads_per_row)
            tune.max_work_group = (uint32_t)(c->info.max_work_group_size < 64u * c->threads_per_row
                                                 ? c->info.max_work_group_size
                                                 : 64u * c->threads_per_row);
    }
    return tune;
}

void clflash_tune_report_portable(clflash_plan *plan, const clflash_problem *p)
{
    static const clflash_tune_key keys[] = {CLFLASH_TUNE_PORTABLE_MAX_BLOCK, CLFLASH_TUNE_PORTABLE_THREADS_PER_ROW,
                                            CLFLASH_TUNE_PORTABLE_MAX_WORK_GROUP};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (p->tune.set & 1u << keys[i])
            clflash_tune_report(plan, ",%s=%d", clflash_tune_name(keys[i]), (int)p->tune.value[keys[i]]);
}
