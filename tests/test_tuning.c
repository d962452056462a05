/*
 * test_tuning.c - the tuning settings (clflash_context_set_tuning, the context option `tuning`,
 * CLFLASH_TUNE and the file CLFLASH_TUNING_FILE names): that every malformed or out-of-range
 * setting is refused with a detail and changes nothing, that the conditions (device, dtype,
 * head_dim) select the calls a rule applies to, the order in which the sources apply, that a plan
 * reports the values it ran with and a cached plan is not reused under other settings, and that
 * settings may change while other threads plan.
 *
 * The effects are observed through the portable kernel's register tiles (portable.cpu_path=0 and
 * portable.regtile), which every device runs with portable_only; the parameters of other kernels
 * are checked for syntax and range only here (test_nv_mma runs them where they act).
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, mkstemp */

#include "check_common.h"

#include <ctype.h>
#include <pthread.h>
#include <unistd.h>

static clflash_context *tuned_context(const char *tuning)
{
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.portable_only = 1; /* f16 on NVIDIA would go to the tensor cores */
    opt.tuning = tuning;
    return test_context(&opt);
}

static clflash_plan plan_of(clflash_context *c, uint32_t head_dim, clflash_dtype t)
{
    const clflash_attention_desc d = th_desc(1, 2, 0, 131, 97, head_dim, t, 0);
    clflash_plan p = {.struct_size = sizeof p};
    const clflash_status st = clflash_plan_attention(c, &d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "plan: %s (%s)", clflash_status_string(st), clflash_last_error_detail());
    return p;
}

/* A temporary file holding `text`; its path in path (free nothing, unlink it after). */
static void write_file(char *path, size_t n, const char *text)
{
    snprintf(path, n, "%s/clflash_tuning_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    const int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp(%s) failed", path);
    FILE *f = fdopen(fd, "w");
    ck_assert(f != NULL);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- syntax and ranges ------------------------------------------------------------------------ */

static const struct {
    const char *spec, *detail; /* what the detail must contain */
} bad_specs[] = {
    {"nv_forward.warp=2", "\"nv_forward.warp\" is not a tuning parameter"},
    {"nv_forward.warps=0", "nv_forward.warps=\"0\" is not an integer in 1..16"},
    {"nv_forward.warps=17", "in 1..16"},
    {"nv_forward.warps=2x", "in 1..16"},
    {"nv_forward.warps=+2", "in 1..16"},
    {"nv_forward.warps=99999999999999999999", "in 1..16"},
    {"nv_forward.warps", "is not key=value"},
    {"=3", "is not a tuning parameter"},
    {"portable.cpu_path=2", "in 0..1"},
    {"portable.large_grf=2", "in 0..1"},
    {"portable.max_block=0", "in 1..1024"},
    {"portable.threads_per_row=65", "in 1..64"},
    {"portable.max_work_group=1025", "in 1..1024"},
    {"portable_backward.threads_per_row=0", "in 1..64"},
    {"nv_forward.block=15", "in 16..64"},
    {"nv_forward.stages=9", "in 2..8"},
    {"nv_forward.mtiles=5", "in 1..4"},
    {"nv_forward.fused_merge=-1", "in 0..1"},
    {"nv_forward.rescale_thresh=-2", "in -1..126"},
    {"nv_forward.q_direct=1.0", "in 0..1"},
    {"nv_backward.block=65", "in 16..64"},
    {"nv_backward.warps=0", "in 1..16"},
    {"nv_backward.maxrregcount=31", "in 32..255"},
    {"nv_backward.stream=2", "in 0..1"},
    {"nv_backward.chunk=65537", "in 0..65536"},
    {"nv_wgmma.pipeline=2", "in 0..1"},
    {"nv_wgmma.block=31", "in 32..64"},
    {"portable.regtile=4x8", "portable.regtile=\"4x8\""},
    {"dtype=f64,portable.cpu_path=0", "dtype=\"f64\""},
    {"dtype=f16|,portable.cpu_path=0", "dtype=\"f16|\""},
    {"dtype=,portable.cpu_path=0", "dtype=\"\""},
    {"head_dim=0,portable.cpu_path=0", "head_dim=\"0\""},
    {"head_dim=9-3,portable.cpu_path=0", "head_dim=\"9-3\""},
    {"head_dim=300,portable.cpu_path=0", "head_dim=\"300\""},
    {"head_dim=-4,portable.cpu_path=0", "head_dim=\"-4\""},
    {"device=,portable.cpu_path=0", "device= needs"},
    {"class=gpu,portable.cpu_path=0", "class=\"gpu\""},
    {"class=cpu|,portable.cpu_path=0", "class=\"cpu|\""},
    {"class=,portable.cpu_path=0", "class=\"\""},
    /* one bad item anywhere: nothing of the spec applies, not even its valid first rule */
    {"portable.regtile=1x2x8; portable.cpu_path=0,bogus=1", "\"bogus\" is not a tuning parameter"},
};

START_TEST(bad_spec_is_refused_and_changes_nothing)
{
    clflash_context *c = tuned_context("portable.cpu_path=0");
    const clflash_plan before = plan_of(c, 64, CLFLASH_F32);
    ck_assert_str_eq(before.kernel, "flash_forward_regtile");
    const clflash_status st = clflash_context_set_tuning(c, bad_specs[_i].spec);
    ck_assert_msg(st == CLFLASH_ERROR_INVALID_OPTIONS, "\"%s\": %s", bad_specs[_i].spec, clflash_status_string(st));
    ck_assert_msg(strstr(clflash_last_error_detail(), bad_specs[_i].detail) != NULL &&
                      strstr(clflash_last_error_detail(), "clflash_context_set_tuning") != NULL,
                  "\"%s\": detail \"%s\" lacks \"%s\"", bad_specs[_i].spec, clflash_last_error_detail(),
                  bad_specs[_i].detail);
    const clflash_plan after = plan_of(c, 64, CLFLASH_F32);
    ck_assert_msg(strcmp(after.tuning, before.tuning) == 0 && after.block_q == before.block_q &&
                      after.block == before.block,
                  "\"%s\" changed the plan: %s -> %s", bad_specs[_i].spec, before.tuning, after.tuning);
    clflash_context_free(c);
}
END_TEST

/* Every parameter at both ends of its range, the conditions in each form, whitespace and empty
 * rules are accepted; NULL arguments are refused. */
START_TEST(good_specs_are_accepted)
{
    static const char *const good[] = {
        "", " ; ;; ",
        "portable.cpu_path=0,portable.cpu_path=1",
        "portable.regtile=0; portable.regtile=1x1x1; portable.regtile=8x32x256x4096; portable.regtile=2x4x6",
        "nv_forward.block=16,nv_forward.block=64,nv_forward.warps=1,nv_forward.warps=16",
        "nv_forward.mtiles=1,nv_forward.mtiles=4,nv_forward.stages=2,nv_forward.stages=8",
        "nv_forward.fused_merge=0,nv_forward.fused_merge=1,nv_forward.rescale_thresh=-1",
        "nv_forward.rescale_thresh=126,nv_forward.q_direct=0,nv_forward.q_direct=1",
        "nv_backward.block=16,nv_backward.block=64,nv_backward.warps=1,nv_backward.warps=16",
        "nv_backward.maxrregcount=32,nv_backward.maxrregcount=255,nv_backward.stream=0,nv_backward.stream=1",
        "nv_backward.chunk=0,nv_backward.chunk=65536",
        "nv_wgmma.pipeline=0,nv_wgmma.pipeline=1,nv_wgmma.block=32,nv_wgmma.block=64",
        " dtype = f32|f16|bf16|i8 , head_dim = 1-256 , device = a device nobody has , nv_forward.warps = 2 ",
        "head_dim=128,nv_forward.warps=",
        "class=cpu|nvidia_gpu|amd_gpu|intel_gpu|other_gpu|other,nv_forward.warps=2; class = amd_gpu , head_dim=64",
    };
    clflash_context *c = tuned_context(NULL);
    for (size_t i = 0; i < N_OF(good); i++)
        ck_assert_msg(clflash_context_set_tuning(c, good[i]) == CLFLASH_SUCCESS, "\"%s\" was refused: %s", good[i],
                      clflash_last_error_detail());
    ck_assert_int_eq(clflash_context_set_tuning(c, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_context_set_tuning(NULL, "portable.cpu_path=0"), CLFLASH_ERROR_INVALID_ARGUMENT);
    clflash_context_free(c);
}
END_TEST

/* ---- conditions and order ---------------------------------------------------------------------- */

START_TEST(conditions_select_the_calls)
{
    clflash_context *c = tuned_context("portable.cpu_path=0");
    const clflash_plan def32 = plan_of(c, 64, CLFLASH_F32);
    ck_assert_str_eq(def32.tuning, "portable.cpu_path=0,portable.regtile=4x8x64");

    ck_assert_int_eq(clflash_context_set_tuning(c, "dtype=f16|bf16,portable.regtile=2x4x8x8"), CLFLASH_SUCCESS);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, def32.tuning);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F16).tuning, "portable.cpu_path=0,portable.regtile=2x4x8x8");
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_BF16).tuning, "portable.cpu_path=0,portable.regtile=2x4x8x8");

    ck_assert_int_eq(clflash_context_set_tuning(c, "head_dim=60-70,portable.regtile=1x2x8"), CLFLASH_SUCCESS);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=1x2x8");
    ck_assert_str_eq(plan_of(c, 59, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=4x8x64");
    ck_assert_str_eq(plan_of(c, 71, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=4x8x64");
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F16).tuning, "portable.cpu_path=0,portable.regtile=1x2x8");

    /* a rule for another device is dropped; one naming a part of this device's name applies */
    ck_assert_int_eq(clflash_context_set_tuning(c, "device=no such device 7f3a,portable.regtile=0"), CLFLASH_SUCCESS);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=1x2x8");
    char name[256] = "", spec[300];
    ck_assert_int_eq(clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_NAME, sizeof name - 1, name, NULL),
                     CL_SUCCESS);
    const size_t len = strlen(name);
    ck_assert_uint_gt(len, 2);
    /* a run of the name from its middle third, case flipped, up to a separator of the syntax */
    size_t n = 0;
    char part[128];
    for (size_t i = len / 3; i <= 2 * (len / 3) && i < len && n < sizeof part - 1 && !strchr(",; ", name[i]); i++)
        part[n++] = (char)(islower((unsigned char)name[i]) ? toupper((unsigned char)name[i])
                                                            : tolower((unsigned char)name[i]));
    part[n] = '\0';
    if (n == 0) { /* a name whose middle is a separator: its first character will do */
        part[0] = name[0];
        part[1] = '\0';
    }
    snprintf(spec, sizeof spec, "device=%s,portable.regtile=0", part);
    ck_assert_int_eq(clflash_context_set_tuning(c, spec), CLFLASH_SUCCESS);
    ck_assert_msg(strcmp(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=0") == 0,
                  "\"%s\" did not apply on \"%s\"", spec, name);

    /* class=: a rule for the other classes is dropped, one for this device's class applies (a CPU
     * is of class cpu; a GPU of one of the four GPU classes) */
    cl_device_type type = 0;
    ck_assert_int_eq(clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_TYPE, sizeof type, &type, NULL),
                     CL_SUCCESS);
    const int cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    ck_assert_int_eq(clflash_context_set_tuning(c, cpu ? "class=nvidia_gpu|amd_gpu|intel_gpu|other_gpu|other,"
                                                         "portable.regtile=2x4x8"
                                                       : "class=cpu|other,portable.regtile=2x4x8"),
                     CLFLASH_SUCCESS);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=0");
    ck_assert_int_eq(clflash_context_set_tuning(c, cpu ? "class=cpu,portable.regtile=1x4x8"
                                                       : "class=nvidia_gpu|amd_gpu|intel_gpu|other_gpu,"
                                                         "portable.regtile=1x4x8"),
                     CLFLASH_SUCCESS);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=1x4x8");
    clflash_context_free(c);
}
END_TEST

/* The tuning file, the option, CLFLASH_TUNE and set_tuning, each over the one before it; an empty
 * value hands the parameter back to the planner. */
START_TEST(sources_apply_in_order)
{
    char path[512];
    write_file(path, sizeof path,
               "# written by hand for test_tuning\n"
               "\n"
               "portable.cpu_path=0   # the GPU paths\n"
               "portable.regtile=1x2x8\n"
               "dtype=f16, portable.regtile=1x4x8\n");
    setenv("CLFLASH_TUNING_FILE", path, 1);
    clflash_context *c = tuned_context(NULL);
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=1x2x8");
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F16).tuning, "portable.cpu_path=0,portable.regtile=1x4x8");
    clflash_context_free(c);

    c = tuned_context("portable.regtile=2x4x8x8");
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F32).tuning, "portable.cpu_path=0,portable.regtile=2x4x8x8");
    ck_assert_str_eq(plan_of(c, 64, CLFLASH_F16).tuning, "portable.cpu_path=0,portable.regtile=2x4x8x8");
    clflash_context_free(c);

    setenv("CLFLASH_TUNE", "portable.regtile=4x8x16", 1);
    c = tuned_context("portable.regtile=2x4x8x8");
    clflash_plan p = plan_of(c, 64, CLFLASH_F32);
    ck_assert_str_eq(p.tuning, "portable.cpu_path=0,portable.regtile=4x8x16");
    ck_assert_uint_eq(p.block_q, 16);
    ck_assert_int_eq(clflash_context_set_tuning(c, "portable.regtile="), CLFLASH_SUCCESS);
    p = plan_of(c, 64, CLFLASH_F32);
    ck_assert_str_eq(p.tuning, "portable.cpu_path=0,portable.regtile=4x8x64"); /* the planner's */
    ck_assert_int_eq(clflash_context_set_tuning(c, "portable.cpu_path="), CLFLASH_SUCCESS);
    p = plan_of(c, 64, CLFLASH_F32);
    clflash_context_free(c);
    unsetenv("CLFLASH_TUNE");
    unsetenv("CLFLASH_TUNING_FILE");
    unlink(path);

    /* with nothing set the plan is the planner's: the same as in a context that never had settings */
    c = tuned_context(NULL);
    const clflash_plan plain = plan_of(c, 64, CLFLASH_F32);
    clflash_context_free(c);
    ck_assert_str_eq(p.kernel, plain.kernel);
    ck_assert_str_eq(p.tuning, plain.tuning);
    ck_assert_uint_eq(p.block_q, plain.block_q);
    ck_assert_uint_eq(p.block, plain.block);
}
END_TEST

/* A source that is not valid fails the create, and the detail says where. */
START_TEST(bad_sources_fail_the_create)
{
    clflash_context_options opt = {.struct_size = sizeof opt};
    clflash_context *c = NULL;
    char path[512], want[600];

    opt.tuning = "nv_forward.warps=0";
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "the tuning option"));
    opt.tuning = NULL;

    setenv("CLFLASH_TUNE", "portable.regtile=4x8x64;nv_backward.warp=2", 1);
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "CLFLASH_TUNE"));
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "nv_backward.warp"));
    unsetenv("CLFLASH_TUNE");

    write_file(path, sizeof path, "# fine\nportable.cpu_path=0\n\nnv_forward.stages=1\n");
    setenv("CLFLASH_TUNING_FILE", path, 1);
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    snprintf(want, sizeof want, "%s:4:", path);
    ck_assert_msg(strstr(clflash_last_error_detail(), want) != NULL, "detail \"%s\" lacks \"%s\"",
                  clflash_last_error_detail(), want);
    unlink(path);

    write_file(path, sizeof path, "portable.cpu_path=0; portable.regtile=0\n");
    setenv("CLFLASH_TUNING_FILE", path, 1);
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "one rule per line"));
    unlink(path); /* now missing */
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "cannot be opened"));
    setenv("CLFLASH_TUNING_FILE", "/", 1); /* a directory opens but cannot be read */
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "\"/\" cannot be"));
    unsetenv("CLFLASH_TUNING_FILE");
    ck_assert_ptr_null(c);
}
END_TEST

/* ---- effects on calls ---------------------------------------------------------------------------- */

/* A cached plan is not reused under other settings: the same descriptor, run after each change,
 * takes the tiles set last and matches the reference each time. */
START_TEST(settings_reach_the_calls)
{
    static const char *const specs[] = {"portable.regtile=2x4x8x8", "portable.regtile=1x1x1",
                                        "portable.regtile=8x16x64x16", "portable.regtile=0", "portable.regtile="};
    static const uint32_t block_q[] = {8, 1, 40, 0, 0}; /* 0: not checked; 40: the 37 rows rounded up to RM */
    clflash_context *c = tuned_context("portable.cpu_path=0");
    const clflash_attention_desc d = th_desc(1, 3, 1, 37, 53, 24, CLFLASH_F32, CLFLASH_CAUSAL);
    for (int i = 0; i < N_OF(specs); i++) {
        ck_assert_int_eq(clflash_context_set_tuning(c, specs[i]), CLFLASH_SUCCESS);
        clflash_plan p = {.struct_size = sizeof p};
        ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
        if (block_q[i])
            ck_assert_msg(p.block_q == block_q[i], "%s planned block_q %u", specs[i], p.block_q);
        if (i == 3)
            ck_assert_str_eq(p.kernel, "flash_forward_portable");
        run_and_check(c, &d, TH_FLASH, 1, 1, 9100 + (uint64_t)i);
    }
    clflash_context_free(c);
}
END_TEST

/* portable.max_block, .threads_per_row and .max_work_group replace the device class's preferences
 * in the portable forward (CPU path, lane path), portable_backward.* in the backward: B, the
 * work-items per row and the work-group stay within them, the plans report them, each kernel only
 * its own, and the results stay right. */
START_TEST(portable_preferences_reach_the_plans)
{
    const clflash_attention_desc d = th_desc(1, 2, 1, 77, 131, 40, CLFLASH_F32, CLFLASH_CAUSAL);
    clflash_context *c = tuned_context("portable.max_block=16,portable_backward.max_block=8");
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_msg(p.block <= 16, "forward block %u above portable.max_block=16", p.block);
    ck_assert_msg(strstr(p.tuning, ",portable.max_block=16") != NULL, "forward tuning %s", p.tuning);
    run_and_check(c, &d, TH_FLASH, 1, 1, 9200);
    clflash_plan b = {.struct_size = sizeof b};
    ck_assert_int_eq(clflash_plan_backward(c, &d, &b), CLFLASH_SUCCESS);
    ck_assert_msg(b.block <= 8, "backward block %u above portable_backward.max_block=8", b.block);
    ck_assert_str_eq(b.tuning, "portable.cpu_path=1,portable_backward.max_block=8");
    ck_assert_msg(strstr(p.tuning, "portable_backward") == NULL, "forward tuning %s", p.tuning);
    clflash_context_free(c);

    /* the lane path with at most 4 work-items per row in groups of at most 64 (B = 16 leaves room
     * for 4; the planner prefers B to lanes, so a larger B would take one) */
    c = tuned_context("portable.cpu_path=0,portable.regtile=0,portable.threads_per_row=4,portable.max_work_group=64,"
                      "portable.max_block=16,portable_backward.max_block=16,portable_backward.threads_per_row=4,"
                      "portable_backward.max_work_group=64");
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(p.kernel, "flash_forward_portable");
    ck_assert_uint_eq(p.threads_per_row, 4);
    ck_assert_uint_le(p.work_group_size, 64);
    ck_assert_str_eq(p.tuning, "portable.cpu_path=0,portable.regtile=0,portable.max_block=16,"
                               "portable.threads_per_row=4,portable.max_work_group=64");
    run_and_check(c, &d, TH_FLASH, 1, 1, 9201);
    ck_assert_int_eq(clflash_plan_backward(c, &d, &b), CLFLASH_SUCCESS);
    ck_assert_uint_eq(b.threads_per_row, 4);
    ck_assert_uint_le(b.work_group_size, 64);
    ck_assert_str_eq(b.tuning, "portable.cpu_path=0,portable_backward.max_block=16,"
                               "portable_backward.threads_per_row=4,portable_backward.max_work_group=64");
    clflash_context_free(c);

    /* unset, the class's preferences: nothing reported */
    c = tuned_context(NULL);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_msg(strstr(p.tuning, "max_block") == NULL && strstr(p.tuning, "threads_per_row") == NULL,
                  "tuning %s", p.tuning);
    clflash_context_free(c);
}
END_TEST

/* portable.large_grf: Intel's compilers take the option; any other refuses it and the kernel is
 * built without it. Either way the call is right and the plan says which kernel ran; the context's
 * build log keeps the refused build. */
START_TEST(large_grf_builds_with_or_without)
{
    clflash_context *c = tuned_context("portable.cpu_path=0,portable.large_grf=1");
    const clflash_attention_desc d = th_desc(1, 3, 1, 37, 53, 24, CLFLASH_F32, CLFLASH_CAUSAL);
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(p.kernel, "flash_forward_regtile");
    char vendor[256] = "";
    ck_assert_int_eq(clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL),
                     CL_SUCCESS);
    const char *const with = "portable.cpu_path=0,portable.regtile=4x8x40,portable.large_grf=1";
    const char *const without = "portable.cpu_path=0,portable.regtile=4x8x40,portable.large_grf=0";
    if (strstr(vendor, "Intel") == NULL) { /* PoCL, NVIDIA, AMD: the option is refused */
        ck_assert_str_eq(p.tuning, without);
        ck_assert_ptr_nonnull(strstr(clflash_context_build_log(c), "256-GRF"));
    } else {
        ck_assert_msg(strcmp(p.tuning, with) == 0 || strcmp(p.tuning, without) == 0, "%s", p.tuning);
    }
    run_and_check(c, &d, TH_FLASH, 1, 1, 9200);
    /* without the setting the report does not name it */
    ck_assert_int_eq(clflash_context_set_tuning(c, "portable.large_grf="), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(p.tuning, "portable.cpu_path=0,portable.regtile=4x8x40");
    clflash_context_free(c);
}
END_TEST

typedef struct {
    clflash_context *c;
    int bad;
} plan_thread_arg;

static void *plan_many(void *p)
{
    plan_thread_arg *a = p;
    const clflash_attention_desc d = th_desc(1, 2, 0, 131, 97, 64, CLFLASH_F32, 0);
    for (int i = 0; i < 200; i++) {
        clflash_plan plan = {.struct_size = sizeof plan};
        if (clflash_plan_attention(a->c, &d, &plan) != CLFLASH_SUCCESS ||
            (strcmp(plan.tuning, "portable.cpu_path=0,portable.regtile=2x4x8x8") != 0 &&
             strcmp(plan.tuning, "portable.cpu_path=0,portable.regtile=1x2x8") != 0))
            a->bad++;
    }
    return NULL;
}

/* set_tuning while other threads plan: each plan sees one setting or the other, whole. */
START_TEST(settings_change_while_threads_plan)
{
    clflash_context *c = tuned_context("portable.cpu_path=0,portable.regtile=2x4x8x8");
    plan_thread_arg args[2] = {{c, 0}, {c, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, plan_many, &args[i]), 0);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(clflash_context_set_tuning(c, i & 1 ? "portable.regtile=2x4x8x8" : "portable.regtile=1x2x8"),
                         CLFLASH_SUCCESS);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_int_eq(args[0].bad + args[1].bad, 0);
    clflash_context_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tuning");
    TCase *tc = tcase_create("tuning");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, bad_spec_is_refused_and_changes_nothing, 0, N_OF(bad_specs));
    tcase_add_test(tc, good_specs_are_accepted);
    tcase_add_test(tc, conditions_select_the_calls);
    tcase_add_test(tc, sources_apply_in_order);
    tcase_add_test(tc, bad_sources_fail_the_create);
    tcase_add_test(tc, settings_reach_the_calls);
    tcase_add_test(tc, large_grf_builds_with_or_without);
    tcase_add_test(tc, portable_preferences_reach_the_plans);
    tcase_add_test(tc, settings_change_while_threads_plan);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
