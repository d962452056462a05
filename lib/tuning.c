/*
 * tuning.c - the per-device-class preferences the planner applies after the tile rule: how large
 * B may grow even when a larger tile fits, how many work-items share a query row, and how large a
 * work-group may be.
 *
 * Why: the rule says what fits, not what runs fast. PoCL reports 1 MiB of "local" memory (it is
 * ordinary cache-backed memory) and would get B near 350 for d = 128; GPUs want a few hundred
 * work-items per group to hide latency. Every level has a default, so an unknown device still gets
 * a sensible plan.
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
    if (c->threads_per_row) { /* the caller's override wins over the class's preference */
        tune.threads_per_row = c->threads_per_row;
        if (tune.max_work_group < 64u * c->threads_per_row)
            tune.max_work_group = (uint32_t)(c->info.max_work_group_size < 64u * c->threads_per_row
                                                 ? c->info.max_work_group_size
                                                 : 64u * c->threads_per_row);
    }
    return tune;
}
