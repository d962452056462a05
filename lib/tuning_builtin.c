/*
 * tuning_builtin.c - the tuning rules clflash applies before any of the user's: parameters for
 * GPU families whose compilers give the planners' defaults too few registers.
 *
 * Why a table of rules: the planners choose one register tile for every GPU, which is right where
 * it was measured (NVIDIA) and spills elsewhere. clflash cannot run AMD or Intel GPUs here, but
 * their compilers report what a kernel costs: the compile-matrix tests (tests/kernel_resources.cmake
 * for AMD, tests/kernel_resources_intel.cmake for Intel) build the planned kernels with these rules
 * applied and fail on a spill, and docs/portability.md keeps their figures. The rules are in the
 * tuning files' syntax (clflash_context_set_tuning in clflash.h) and load first, so any setting of
 * the user's, a tuning file's or clflash-tune's wins; each plan reports the values it ran with.
 * Later rules win over earlier ones, so the general rule of a family comes before a member's.
 */
#include "internal.h"

static const char *const rules[] = {
    /* RDNA 3 (gfx11xx): clang gives a wave32 kernel of 128 work-items at most 128 VGPRs, and the
     * register-tiled forward's 4 x 8 tile (64 query rows) spills 25 to 106 of them; 2 rows x 16
     * key slots with 32 query rows needs 91 to 118 and spills none, at 8 waves per SIMD. */
    "class=amd_gpu, device=gfx11, portable.regtile=2x16x32",
    /* The same compiler keeps the portable backward's gradient kernel in f32 above head_dim 128
     * (B 8, TPR 8: 2 x 32 accumulators) to 128 VGPRs and spills 18; scheduled for the 2 waves per
     * SIMD it runs at anyway (cl/flash_backward.cl, AMD_WAVES) it needs 112 and spills none. */
    "class=amd_gpu, device=gfx11, dtype=f32, head_dim=129-256, portable_backward.amd_waves=2",
    /* Intel Xe-LP and Xe-HPG GPUs (SIMD8, 128 registers a thread): the 4 x 8 tile spills 10 to 26
     * registers at head_dim <= 128, 4 x 16 with 64 query rows none. Above 128 the planner's 4 x 16
     * with 32 rows spills none either. */
    "class=intel_gpu, head_dim=1-128, portable.regtile=4x16x64",
    /* Xe-HPC (Data Center GPU Max) compiles the kernel SIMD32: every 4-row tile spills (34 to 360,
     * and 6 to 24 even with -cl-intel-256-GRF-per-thread); 2 x 16 with 32 rows spills none. */
    "class=intel_gpu, device=Data Center GPU Max, portable.regtile=2x16x32",
    /* With its 128 KiB of local memory the planner gives that tile B 64 above head_dim 128, and the
     * kernel at d = 256 spills 34 (B 48: 16, B 32: 4); B 16 spills none. (256 registers a thread,
     * portable.large_grf=1, also spills none at B 64, at half the threads.) */
    "class=intel_gpu, device=Data Center GPU Max, head_dim=129-256, portable.regtile=2x16x32x16",
};

uint32_t clflash_builtin_rule_count(void)
{
    return (uint32_t)(sizeof rules / sizeof rules[0]);
}

const char *clflash_builtin_rule(uint32_t i)
{
    return i < clflash_builtin_rule_count() ? rules[i] : NULL;
}
