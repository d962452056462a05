/*
 * tuning_table.c - prints the register tiles and B that the planner tries first for the
 * register-tiled forward, or B and the work-items per row of the portable backward, on a GPU
 * clflash cannot run, given the GPU's name and class: the planner's defaults with clflash's
 * built-in tuning rules applied (lib/tuning_builtin.c).
 *
 * Why: the compile-matrix tests (kernel_resources.cmake for AMD, kernel_resources_intel.cmake for
 * Intel) must build what the library would build on each target, not a copy of its parameters, so
 * that a rule that still spills, or a default changed without its rule, fails there. No device is
 * touched: the context below holds only the facts the planner's arithmetic reads.
 *
 *   tuning_table --device NAME --class CLASS --dtype f32|f16|bf16|i8 --head-dim D [--local-mem BYTES]
 *                [--max-work-group N] [--kernel forward|backward]
 * prints, for the forward (the default), "-D BLOCK=B -D BLOCK_Q=BQ -D RT_RM=RM -D RT_TC=TC", or
 * "lanes" where the table sends the call to the lane-per-row path; for the backward's gradient
 * kernel "-D BLOCK=B -D TPR=T -D LDS_STRIDE=.. -D T_STRIDE=.. -D P_STRIDE=.. -D ROWDOT_WG=..", the
 * defines lib/backward_plan.c builds it with.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: tuning_table --device NAME --class cpu|nvidia_gpu|amd_gpu|intel_gpu|other_gpu|other "
                    "--dtype f32|f16|bf16|i8 --head-dim D [--local-mem BYTES] [--max-work-group N] "
                    "[--kernel forward|backward]\n");
    return 2;
}

int main(int argc, char **argv)
{
    static const char *const classes[] = {"cpu", "nvidia_gpu", "amd_gpu", "intel_gpu", "other_gpu", "other"};
    static const struct {
        const char *name;
        clflash_dtype t;
        size_t size;
    } dtypes[] = {{"f32", CLFLASH_F32, 4}, {"f16", CLFLASH_F16, 2}, {"bf16", CLFLASH_BF16, 2}, {"i8", CLFLASH_I8, 1}};
    const char *device = NULL;
    int cls = -1, dt = -1, backward = 0;
    long head_dim = 0, local_mem = 65536, max_wg = 256;

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--device") == 0) {
            device = v;
        } else if (strcmp(k, "--class") == 0) {
            for (int j = 0; j < (int)(sizeof classes / sizeof classes[0]); j++)
                if (strcmp(v, classes[j]) == 0)
                    cls = j;
        } else if (strcmp(k, "--dtype") == 0) {
            for (int j = 0; j < (int)(sizeof dtypes / sizeof dtypes[0]); j++)
                if (strcmp(v, dtypes[j].name) == 0)
                    dt = j;
        } else if (strcmp(k, "--head-dim") == 0) {
            head_dim = strtol(v, NULL, 10);
        } else if (strcmp(k, "--local-mem") == 0) {
            local_mem = strtol(v, NULL, 10);
        } else if (strcmp(k, "--max-work-group") == 0) {
            max_wg = strtol(v, NULL, 10);
        } else if (strcmp(k, "--kernel") == 0 && (strcmp(v, "forward") == 0 || strcmp(v, "backward") == 0)) {
            backward = strcmp(v, "backward") == 0;
        } else {
            return usage();
        }
    }
    if (argc % 2 != 1 || device == NULL || cls < 0 || dt < 0 || head_dim < 1 || head_dim > CLFLASH_MAX_HEAD_DIM ||
        local_mem < 1024 || max_wg < 1)
        return usage();

    clflash_context c;
    clflash_problem p;
    memset(&c, 0, sizeof c);
    memset(&p, 0, sizeof p);
    snprintf(c.info.name, sizeof c.info.name, "%s", device);
    c.info.device_class = (clflash_device_class)cls;
    c.info.type = cls == CLFLASH_CLASS_CPU ? CL_DEVICE_TYPE_CPU : CL_DEVICE_TYPE_GPU;
    c.info.local_mem_size = (cl_ulong)local_mem;
    c.info.max_work_group_size = (size_t)max_wg;
    c.local_mem_budget = (uint64_t)local_mem;
    /* a long prefill: nothing but the device and the rules limits the tiles */
    p.batch = p.heads_q = p.heads_kv = p.group = 1;
    p.seq_q = p.seq_k = 4096;
    p.head_dim = (uint32_t)head_dim;
    p.dtype = p.out_dtype = dtypes[dt].t;
    p.elem_size = p.out_elem_size = dtypes[dt].size;
    if (clflash_tune_builtin_values(device, (clflash_device_class)cls, p.dtype, p.head_dim, &p.tune) !=
        CLFLASH_SUCCESS) {
        fprintf(stderr, "tuning_table: %s\n", clflash_last_error_detail());
        return 1;
    }
    if (backward) {
        uint32_t first[3];
        if (!clflash_backward_first_candidate(&c, &p, first)) {
            fprintf(stderr, "tuning_table: no backward tile fits %ld bytes at head_dim %ld\n", local_mem, head_dim);
            return 1;
        }
        char shape[240];
        clflash_backward_shape_defines(&c, &p, first[0], first[1], first[2], shape, sizeof shape);
        printf("%s\n", shape);
        return 0;
    }
    uint32_t cand[4];
    if (!clflash_regtile_first_candidate(&c, &p, cand)) {
        printf("lanes\n");
        return 0;
    }
    printf("-D BLOCK=%u -D BLOCK_Q=%u -D RT_RM=%u -D RT_TC=%u\n", cand[3], cand[2], cand[0], cand[1]);
    return 0;
}
