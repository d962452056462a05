/*
 * tuning.c - the per-device-class preferences the planner applies after the tile rule: how large
 * B may grow even when a larger tile fits, how many work-items share a query row, and how large a
 * work-group may be.
 *
 * Why: the rule says what fits, not what runs fast. PoCL reports 1 MiB of "local" memory (it is
 * ordinary cache-backed memory) and would get B near 350 for d = 128; GPUs want a few hundred
 * work-items per group to hide latency. Every level has a default, so an unknown device still gets
 * a sensible plan. They are the defaults tuning_params.c's table gives the parameters
 * portable.max_block, portable.threads_per_row and portable.max_work_group (the forward's) and
 * portable_backward.* (the backward's), whose settings replace them per device, dtype and head_dim.
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

/* The class's preferences as the tuning table's defaults (for the forward's keys and the
 * backward's alike). */
int32_t clflash_default_max_block(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)f;
    return (int32_t)clflash_tuning_for(&c->info, p->head_dim, p->elem_size).max_block;
}

int32_t clflash_default_threads_per_row(const clflash_context *c, const clflash_problem *p,
                                        const clflash_tune_facts *f)
{
    (void)f;
    return (int32_t)clflash_tuning_for(&c->info, p->head_dim, p->elem_size).threads_per_row;
}

int32_t clflash_default_max_work_group(const clflash_context *c, const clflash_problem *p, const clflash_tune_facts *f)
{
    (void)f;
    return (int32_t)clflash_tuning_for(&c->info, p->head_dim, p->elem_size).max_work_group;
}

/* The tuning values of keys[0..2] (a cap on B, work-items per row, work-group: the class's
 * preferences unless a setting gives them; the device's work-group limit still caps the last),
 * then the context option threads_per_row. */
static clflash_tuning tuned_preferences(const clflash_context *c, const clflash_problem *p,
                                        const clflash_tune_key keys[3])
{
    clflash_tuning tune;
    tune.max_block = (uint32_t)clflash_tune_value(c, p, keys[0], NULL);
    tune.threads_per_row = (uint32_t)clflash_tune_value(c, p, keys[1], NULL);
    tune.max_work_group = (uint32_t)clflash_tune_value(c, p, keys[2], NULL);
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

static const clflash_tune_key forward_keys[3] = {CLFLASH_TUNE_PORTABLE_MAX_BLOCK, CLFLASH_TUNE_PORTABLE_THREADS_PER_ROW,
                                                 CLFLASH_TUNE_PORTABLE_MAX_WORK_GROUP};
static const clflash_tune_key backward_keys[3] = {CLFLASH_TUNE_BACKWARD_MAX_BLOCK, CLFLASH_TUNE_BACKWARD_THREADS_PER_ROW,
                                                  CLFLASH_TUNE_BACKWARD_MAX_WORK_GROUP};

clflash_tuning clflash_tuning_for_context(const clflash_context *c, const clflash_problem *p)
{
    return tuned_preferences(c, p, forward_keys);
}

clflash_tuning clflash_tuning_for_backward(const clflash_context *c, const clflash_problem *p)
{
    return tuned_preferences(c, p, backward_keys);
}

void clflash_tune_report_portable(clflash_plan *plan, const clflash_problem *p, int backward)
{
    const clflash_tune_key *keys = backward ? backward_keys : forward_keys;
    for (size_t i = 0; i < 3; i++)
        if (p->tune.set & CLFLASH_TUNE_BIT(keys[i]))
            clflash_tune_report(plan, ",%s=%d", clflash_tune_name(keys[i]), (int)p->tune.value[keys[i]]);
    if (backward && (p->tune.set & CLFLASH_TUNE_BIT(CLFLASH_TUNE_BACKWARD_AMD_WAVES)))
        clflash_tune_report(plan, ",portable_backward.amd_waves=%d",
                            (int)p->tune.value[CLFLASH_TUNE_BACKWARD_AMD_WAVES]);
}
