/*
 * test_nv_mma.c - the NVIDIA tensor-core kernels (cl/nv_mma_forward.cl, cl/nv_mma_backward.cl):
 * when the planner picks them, and what they compute.
 *
 *   test_nv_mma select    runs everywhere: on a device without tensor cores (PoCL in CI) every
 *                         descriptor plans the portable kernel; on an NVIDIA device of compute
 *                         capability >= 8 the eligible ones plan nv_mma_forward and each reason
 *                         for refusal (dtype, O type, head_dim, alignment, features, forced block,
 *                         portable_only) sends the call to the portable
 *                         kernel.
 *   test_nv_mma numerics  on a tensor-core device only (exit code 77, "skipped", elsewhere): f16
 *                         and bf16, head_dim 16..256, odd, prime and size-1 shapes, seq_q != seq_k
 *                         both ways, causal in all three alignments (rows that see no key), GQA
 *                         and MQA, forced blocks of 16 and 32 (many tiles and partial tiles), an
 *                         interleaved strided layout with an offset, against the fp64 reference,
 *                         with O's gaps checked untouched; split parts merged in the flash
 *                         kernel's launch and by the merge kernel give the same bits. The feature
 *                         shapes with a BIAS_PADDED bias run with it staged in local memory (the
 *                         default) and again read into registers (nv_forward.bias_staged=0).
 *   test_nv_mma backward_numerics  likewise on a tensor-core device only: the same for the
 *                         tensor-core backward (cl/nv_mma_backward.cl,
 *                         head_dim up to 256 (two warps per 16 rows above 128), padded ones and
 *                         unaligned rows included, forced B up to 48) against the fp64 reference
 *                         gradients, with the bias gradient (cl/nv_mma_bias_grad.cl) wherever
 *                         there is a bias, and checks that two runs give the same bits (dBias
 *                         summed over batch entries and heads, and over rows, included).
 *   test_nv_mma wgmma     the Hopper forward (cl/nv_wgmma_forward.cl), with
 *                         CLFLASH_WGMMA=1, on an NVIDIA device of compute capability 9.0 only (exit
 *                         code 77, "skipped", elsewhere): f16 and bf16, head_dim 64, 128 and 256 (and
 *                         others padded to them), seq 1,
 *                         17, 63, 65, 129, 1000, seq_q != seq_k both ways, causal (rows that see no
 *                         key included), GQA and MQA, interleaved layouts, rising maxima and a negative
 *                         scale, windows, softcap, ALiBi and key lengths, against the fp64
 *                         reference; each plan must name nv_wgmma_forward. Its default loop is the
 *                         producer's with TMA copies; CLFLASH_TUNE=nv_wgmma.tma=0 (cp.async) or
 *                         nv_wgmma.producer=0 (the loop without a producer) runs the same table on
 *                         the others.
 *                         The select part checks, everywhere, which calls it takes with
 *                         CLFLASH_WGMMA=1 and by default, and that with CLFLASH_WGMMA=0 it takes
 *                         none (test_sm90a: none after a fault of the path). The other parts run
 *                         with CLFLASH_WGMMA=0, so that they keep testing nv_mma_forward.
 *   test_nv_mma wgmma FIRST [LAST]  only those rows of wgmma_shapes (from 0), in f16 and bf16.
 *   test_nv_mma numerics|backward_numerics features FIRST [LAST]
 *                         only the feature shapes FIRST .. LAST (rows of feature_shapes or
 *                         bwd_feature_shapes, from 0; LAST defaults to the table's last), in f16
 *                         and bf16: a short run on a device after a change to one feature.
 *   test_nv_mma numerics layouts  only bias_layouts_in_one_context (the plan cache's bias key).
 *   test_nv_mma wgmma layouts  only wgmma_kv_strides_in_one_context (its key of K's and V's strides).
 *
 * Own small harness: the shared one stores only f32 and f16.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* getenv in strict C */
#endif

#include "backward_harness.h"
#include "check_common.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define SKIP_CODE 77
#define SENTINEL 0xf7a9u

static clflash_context *ctx;
/* The kernel every numerics plan must name: nv_wgmma_forward in the wgmma part (which sets
 * CLFLASH_WGMMA=1 before its contexts are created), else nv_mma_forward. */
static const char *numerics_kernel = "nv_mma_forward";

static void setup(void)
{
    /* CLFLASH_TEST_BUILD_OPTIONS (developer tuning): build options for every kernel of these tests,
     * e.g. "-D NV_RESCALE_THRESH=-1", so that a kernel variant is checked against the reference. */
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.build_options = getenv("CLFLASH_TEST_BUILD_OPTIONS");
    ctx = test_context(&opt);
}

static void teardown(void)
{
    clflash_context_free(ctx);
    ctx = NULL;
}

static const char *plan_kernel(clflash_context *c, const clflash_attention_desc *d)
{
    clflash_plan p = {.struct_size = sizeof p};
    const clflash_status st = clflash_plan_attention(c, d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "plan: %s (%s)", clflash_status_string(st), clflash_last_error_detail());
    return p.kernel;
}

/* 1 if the context's device gets the tensor-core kernel for a plain f16 d = 64 call. */
static int tensor_cores(clflash_context *c)
{
    const clflash_attention_desc d = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    return strcmp(plan_kernel(c, &d), "nv_mma_forward") == 0;
}

static int device_is_nvidia_sm80(clflash_context *c)
{
    char vendor[256] = "";
    cl_uint major = 0;
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    if (strstr(vendor, "NVIDIA") == NULL)
        return 0;
    /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */
    if (clGetDeviceInfo(clflash_context_device(c), 0x4000, sizeof major, &major, NULL) != CL_SUCCESS)
        return 0;
    return major >= 8;
}

/* 1 on an NVIDIA device of compute capability 9.0 (Hopper), where nv_wgmma_forward may run. */
static int device_is_nvidia_sm90(clflash_context *c)
{
    cl_uint major = 0, minor = 0;
    if (!device_is_nvidia_sm80(c))
        return 0;
    /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV and _MINOR_NV */
    clGetDeviceInfo(clflash_context_device(c), 0x4000, sizeof major, &major, NULL);
    clGetDeviceInfo(clflash_context_device(c), 0x4001, sizeof minor, &minor, NULL);
    return major == 9 && minor == 0;
}

/* A context created with CLFLASH_WGMMA set to `mode` (NULL: unset, the default mode); the variable
 * is read at creation and put back as it was. */
static clflash_context *wgmma_context(const char *mode)
{
    const char *was = getenv("CLFLASH_WGMMA");
    char saved[16] = "";
    if (was != NULL)
        snprintf(saved, sizeof saved, "%s", was);
    ck_assert_int_eq(mode != NULL ? setenv("CLFLASH_WGMMA", mode, 1) : unsetenv("CLFLASH_WGMMA"), 0);
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.build_options = getenv("CLFLASH_TEST_BUILD_OPTIONS");
    clflash_context *c = test_context(&opt);
    ck_assert_int_eq(was != NULL ? setenv("CLFLASH_WGMMA", saved, 1) : unsetenv("CLFLASH_WGMMA"), 0);
    return c;
}

/* ---- selection -------------------------------------------------------------------------------- */

START_TEST(selection)
{
    const int nv = device_is_nvidia_sm80(ctx) && getenv("CLFLASH_PORTABLE") == NULL;
    const char *const mma = "nv_mma_forward", *const portable = "flash_forward_portable";
    struct {
        const char *what;
        clflash_attention_desc d;
        int eligible;
    } cases[20];
    int n = 0;
#define CASE(w, desc, el) (cases[n].what = (w), cases[n].d = (desc), cases[n].eligible = (el), n++)
    CASE("f16 d64", th_desc(1, 2, 0, 100, 100, 64, CLFLASH_F16, 0), 1);
    CASE("bf16 d128 causal GQA", th_desc(2, 4, 2, 33, 77, 128, CLFLASH_BF16, CLFLASH_CAUSAL), 1);
    CASE("f16 d16", th_desc(1, 1, 0, 5, 5, 16, CLFLASH_F16, 0), 1);
    CASE("f32", th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F32, 0), 0);
    CASE("f16 d72 (padded to 80)", th_desc(1, 1, 0, 64, 64, 72, CLFLASH_F16, 0), 1);
    CASE("f16 d256", th_desc(1, 1, 0, 64, 64, 256, CLFLASH_F16, 0), 1);
    clflash_attention_desc w = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, CLFLASH_WINDOW);
    w.window_left = 4;
    CASE("window", w, 1);
    clflash_attention_desc sc = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    sc.softcap = 30.0f;
    CASE("softcap", sc, 1);
    clflash_attention_desc off = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    off.q.offset = 3;
    CASE("q offset 3 (copied element by element)", off, 1);
    clflash_attention_desc fb = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    fb.block = 8;
    CASE("forced block 8", fb, 0);
    fb.block = 32;
    CASE("forced block 32", fb, 1);
    cl_int err;
    cl_mem cu = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, 2 * sizeof(int32_t), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clflash_attention_desc vl = th_desc(1, 2, 0, 100, 100, 64, CLFLASH_F16, CLFLASH_CAUSAL);
    vl.cu_seqlens_q = vl.cu_seqlens_k = cu; /* the planner reads no buffer */
    vl.total_q = vl.total_k = 100;
    CASE("variable-length batch", vl, 1);
#undef CASE
    for (int i = 0; i < n; i++) {
        const char *got = plan_kernel(ctx, &cases[i].d);
        const char *want = nv && cases[i].eligible ? mma : portable;
        /* the portable kernel's GPU default is its register-tiled path, a variant of its own name, and a
         * CPU decodes few rows with flash_decode_cpu */
        const int same = strcmp(got, want) == 0 || (want == portable && (strcmp(got, "flash_forward_regtile") == 0 ||
                                                                         strcmp(got, "flash_decode_cpu") == 0));
        ck_assert_msg(same, "%s: planned %s, expected %s", cases[i].what, got, want);
    }
    clReleaseMemObject(cu);

    /* portable_only wins everywhere */
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.portable_only = 1;
    clflash_context *pc = test_context(&opt);
    ck_assert_msg(strncmp(plan_kernel(pc, &cases[0].d), "flash_forward_", 14) == 0, "portable_only planned %s",
                  plan_kernel(pc, &cases[0].d));
    clflash_context_free(pc);
}
END_TEST

/* The plan of the tensor-core kernel reports the rule's tile and its real, smaller local use. */
START_TEST(plan_fields)
{
    if (!tensor_cores(ctx))
        return;
    clflash_attention_desc d = th_desc(1, 1, 0, 4096, 4096, 128, CLFLASH_F16, 0);
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(ctx, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.block % 16, 0);
    ck_assert_uint_eq(p.tile_bytes, clflash_tile_bytes(p.block, 128, 2));
    ck_assert_uint_le(p.tile_bytes, p.local_mem_budget);
    ck_assert_uint_le(p.kernel_local_bytes, p.local_mem_budget);
    ck_assert_uint_ge(p.kernel_local_bytes, 4ull * p.block * (128 + 8) * 2); /* two K and two V tiles */
    ck_assert_uint_eq(p.block_q % 16, 0);
    ck_assert_uint_eq(p.work_group_size % 32, 0);
    ck_assert_uint_eq(p.tiles_q, (4096 + p.block - 1) / p.block);
    ck_assert_uint_eq(p.kv_passes, (4096 + p.block_q - 1) / p.block_q);
    /* decoding gets a single warp, not 128 rows of padding */
    d.seq_q = 1;
    ck_assert_int_eq(clflash_plan_attention(ctx, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.block_q, 16);
    ck_assert_uint_eq(p.work_group_size, 32);
}
END_TEST

/* The Hopper forward: with CLFLASH_WGMMA=1, an sm_90 device plans nv_wgmma_forward for the calls in
 * its scope (f16/bf16, head_dim 64, 128 or 256 or a multiple of 8 padded to one of them, aligned rows,
 * causal or not, GQA, windows, softcap, ALiBi, key lengths, a bias without ALiBi) and nv_mma_forward
 * for the others; without the variable (the default mode) for those of them that it runs faster (no
 * window narrower than 1024 keys, no head_dim below 40 or from 136 to 184, neither softcap nor a
 * bias above 128, enough query rows that nv_mma_forward neither splits nor packs); with
 * CLFLASH_WGMMA=0 (the part's ctx) for none. On any other device no setting changes a plan. (A
 * fault of the sm_90a path: test_sm90a.) */
START_TEST(wgmma_selection)
{
    const int hopper = device_is_nvidia_sm90(ctx) && getenv("CLFLASH_PORTABLE") == NULL;
    clflash_context *all = wgmma_context("1"), *dflt = wgmma_context(NULL);
    struct {
        const char *what;
        clflash_attention_desc d;
        int in_scope, by_default;
    } cases[34];
    int n = 0;
    cl_int err;
    cl_mem sel_bias = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, 2000 * 2000 * sizeof(float), NULL,
                                     &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem sel_slopes = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
#define CASE(w, desc, in, dflt) \
    (cases[n].what = (w), cases[n].d = (desc), cases[n].in_scope = (in), cases[n].by_default = (dflt), n++)
    CASE("f16 d128", th_desc(2, 4, 0, 1000, 1000, 128, CLFLASH_F16, 0), 1, 0); /* split by nv_mma_forward */
    CASE("bf16 d64 causal GQA", th_desc(1, 8, 2, 129, 300, 64, CLFLASH_BF16, CLFLASH_CAUSAL), 1, 1); /* no split */
    CASE("f16 d64, one query", th_desc(1, 1, 0, 1, 1, 64, CLFLASH_F16, 0), 1, 0);
    CASE("f16 d96 (padded to 128)", th_desc(1, 1, 0, 200, 200, 96, CLFLASH_F16, 0), 1, 0);
    CASE("f16 d100", th_desc(1, 1, 0, 200, 200, 100, CLFLASH_F16, 0), 0, 0);
    CASE("bf16 d256", th_desc(1, 1, 0, 200, 200, 256, CLFLASH_BF16, 0), 1, 1); /* nv_mma_forward would not split it */
    CASE("f32 d64", th_desc(1, 1, 0, 200, 200, 64, CLFLASH_F32, 0), 0, 0);
    clflash_attention_desc w = th_desc(1, 1, 0, 200, 200, 64, CLFLASH_F16, CLFLASH_WINDOW);
    w.window_left = 4;
    CASE("window", w, 1, 0);
    clflash_attention_desc sc = th_desc(1, 1, 0, 200, 200, 64, CLFLASH_F16, 0);
    sc.softcap = 30.0f;
    CASE("softcap d64", sc, 1, 1);
    clflash_attention_desc sc128 = th_desc(1, 1, 0, 200, 200, 128, CLFLASH_F16, 0);
    sc128.softcap = 30.0f;
    CASE("softcap d128", sc128, 1, 1);
    clflash_attention_desc fb = th_desc(1, 1, 0, 200, 200, 64, CLFLASH_F16, 0);
    fb.block = 32;
    CASE("forced block 32", fb, 0, 0);
    clflash_attention_desc off = th_desc(1, 1, 0, 200, 200, 64, CLFLASH_F16, 0);
    off.q.offset = 3;
    CASE("q offset 3", off, 0, 0);
    clflash_attention_desc sp = th_desc(1, 2, 0, 16, 4000, 128, CLFLASH_F16, 0);
    sp.num_splits = 2;
    CASE("forced split-KV", sp, 0, 0);
    /* the default mode's choices: prefill at head_dim 128 on many heads, its features but windows */
    CASE("prefill d128", th_desc(1, 64, 0, 2000, 2000, 128, CLFLASH_F16, 0), 1, 1);
    CASE("prefill d128 bf16 causal GQA", th_desc(2, 32, 8, 1500, 1500, 128, CLFLASH_BF16, CLFLASH_CAUSAL), 1, 1);
    clflash_attention_desc pa = th_desc(1, 64, 0, 2000, 2000, 128, CLFLASH_F16, CLFLASH_CAUSAL);
    pa.softcap = 50.0f;
    CASE("prefill d128 causal softcap", pa, 1, 1);
    clflash_attention_desc pw = th_desc(1, 64, 0, 2000, 2000, 128, CLFLASH_F16, CLFLASH_CAUSAL | CLFLASH_WINDOW);
    pw.window_left = 500;
    CASE("prefill d128 causal window 500", pw, 1, 0);
    pw.window_left = 1024;
    CASE("prefill d128 causal window 1024", pw, 1, 1);
    CASE("prefill d64", th_desc(1, 64, 0, 2000, 2000, 64, CLFLASH_F16, 0), 1, 1);
    CASE("prefill d96 (padded to 128)", th_desc(1, 64, 0, 2000, 2000, 96, CLFLASH_F16, 0), 1, 1);
    CASE("prefill d32 (padded to 64)", th_desc(1, 64, 0, 2000, 2000, 32, CLFLASH_F16, 0), 1, 0);
    CASE("prefill d256", th_desc(1, 32, 0, 2000, 2000, 256, CLFLASH_F16, 0), 1, 1);
    CASE("prefill d192 (padded to 256)", th_desc(1, 32, 0, 2000, 2000, 192, CLFLASH_BF16, CLFLASH_CAUSAL), 1, 1);
    CASE("prefill d160 (padded to 256)", th_desc(1, 32, 0, 2000, 2000, 160, CLFLASH_F16, 0), 1, 0);
    clflash_attention_desc psc = th_desc(1, 32, 0, 2000, 2000, 256, CLFLASH_F16, CLFLASH_CAUSAL);
    psc.softcap = 50.0f;
    CASE("prefill d256 causal softcap", psc, 0, 0);
    CASE("decode d128 GQA", th_desc(1, 32, 8, 1, 32768, 128, CLFLASH_F16, 0), 1, 0);
    CASE("d128, 100 rows a head", th_desc(64, 16, 0, 100, 4000, 128, CLFLASH_F16, 0), 1, 0);
    /* a bias ([seq_q][seq_k], shared by every head), in scope and the default's; with ALiBi, not
     * in scope */
    clflash_attention_desc bi = th_desc(1, 64, 0, 2000, 2000, 128, CLFLASH_F16, CLFLASH_CAUSAL);
    bi.bias = sel_bias;
    bi.bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS;
    CASE("prefill d128 causal bias", bi, 1, 1);
    bi.alibi_slopes = sel_slopes;
    CASE("prefill d128 causal bias ALiBi", bi, 0, 0);
#undef CASE
    for (int i = 0; i < n; i++) {
        const char *off_plan = plan_kernel(ctx, &cases[i].d);
        const char *got = plan_kernel(all, &cases[i].d), *by_default = plan_kernel(dflt, &cases[i].d);
        ck_assert_msg(strcmp(off_plan, "nv_wgmma_forward") != 0, "%s: planned nv_wgmma_forward with CLFLASH_WGMMA=0",
                      cases[i].what);
        if (hopper && cases[i].in_scope)
            ck_assert_msg(strcmp(got, "nv_wgmma_forward") == 0, "%s: planned %s with CLFLASH_WGMMA=1; build log: %s",
                          cases[i].what, got, clflash_context_build_log(all));
        else
            ck_assert_msg(strcmp(got, off_plan) == 0, "%s: planned %s with CLFLASH_WGMMA=1, %s with 0", cases[i].what,
                          got, off_plan);
        if (hopper && cases[i].by_default)
            ck_assert_msg(strcmp(by_default, "nv_wgmma_forward") == 0, "%s: planned %s by default; build log: %s",
                          cases[i].what, by_default, clflash_context_build_log(dflt));
        else
            ck_assert_msg(strcmp(by_default, off_plan) == 0, "%s: planned %s by default, %s with CLFLASH_WGMMA=0",
                          cases[i].what, by_default, off_plan);
    }
    if (!hopper)
        printf("nv_wgmma_forward: not an NVIDIA device of compute capability 9.0 (or CLFLASH_PORTABLE is set): "
               "checked only that CLFLASH_WGMMA changes no plan\n");
    clReleaseMemObject(sel_bias);
    clReleaseMemObject(sel_slopes);
    clflash_context_free(all);
    clflash_context_free(dflt);
}
END_TEST

static const char *plan_backward_kernel(clflash_context *c, const clflash_attention_desc *d)
{
    clflash_plan p = {.struct_size = sizeof p};
    const clflash_status st = clflash_plan_backward(c, d, &p);
    ck_assert_msg(st == CLFLASH_SUCCESS, "plan: %s (%s)", clflash_status_string(st), clflash_last_error_detail());
    return p.kernel;
}

/* The backward's gradient kernel: on tensor cores under the forward's rules (every feature, any
 * head dim up to 256 and any layout). */
START_TEST(backward_selection)
{
    const int nv = device_is_nvidia_sm80(ctx) && getenv("CLFLASH_PORTABLE") == NULL;
    const char *const mma = "nv_mma_backward", *const portable = "flash_backward_portable";
    struct {
        const char *what;
        clflash_attention_desc d;
        int eligible;
    } cases[20];
    int n = 0;
    cl_int err;
    cl_mem lens = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, sizeof(int32_t), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem floats = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, 64 * 64 * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
#define CASE(w, desc, el) (cases[n].what = (w), cases[n].d = (desc), cases[n].eligible = (el), n++)
    CASE("f16 d64", th_desc(1, 2, 0, 100, 100, 64, CLFLASH_F16, 0), 1);
    CASE("bf16 d128 causal GQA", th_desc(2, 4, 2, 33, 77, 128, CLFLASH_BF16, CLFLASH_CAUSAL), 1);
    CASE("f16 d16", th_desc(1, 1, 0, 5, 5, 16, CLFLASH_F16, 0), 1);
    /* score features */
    clflash_attention_desc kl = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    kl.key_lengths = lens;
    CASE("key lengths", kl, 1);
    clflash_attention_desc wn = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, CLFLASH_WINDOW);
    wn.window_left = 4;
    CASE("window", wn, 1);
    CASE("f16 d256 (two warps per 16 rows)", th_desc(1, 1, 0, 64, 64, 256, CLFLASH_F16, 0), 1);
    CASE("bf16 d144 (padded to 160, two warps per 16 rows)", th_desc(1, 1, 0, 64, 64, 144, CLFLASH_BF16, 0), 1);
    CASE("f16 d129 (padded to 160, rows element by element)", th_desc(1, 1, 0, 64, 64, 129, CLFLASH_F16, 0), 1);
    CASE("f16 d72 (padded to 80)", th_desc(1, 1, 0, 64, 64, 72, CLFLASH_F16, 0), 1);
    CASE("f16 d59 (padded to 64, rows element by element)", th_desc(1, 1, 0, 64, 64, 59, CLFLASH_F16, 0), 1);
    clflash_attention_desc odd = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    odd.k.offset = 3;
    CASE("k offset 3 (rows element by element)", odd, 1);
    CASE("f32", th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F32, 0), 0);
    clflash_attention_desc sc = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    sc.softcap = 30.0f;
    CASE("softcap", sc, 1);
    clflash_attention_desc bi = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, CLFLASH_CAUSAL);
    bi.bias = floats;
    CASE("bias", bi, 1);
    clflash_attention_desc al = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_BF16, 0);
    al.alibi_slopes = floats;
    CASE("ALiBi", al, 1);
    clflash_attention_desc fb = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
    fb.block = 8;
    CASE("forced block 8", fb, 0);
    clflash_attention_desc vl = th_desc(2, 2, 0, 64, 64, 64, CLFLASH_BF16, CLFLASH_CAUSAL);
    vl.cu_seqlens_q = vl.cu_seqlens_k = floats; /* the planner reads no buffer */
    vl.total_q = vl.total_k = 100;
    CASE("variable-length batch", vl, 1);
#undef CASE
    for (int i = 0; i < n; i++) {
        const char *got = plan_backward_kernel(ctx, &cases[i].d);
        const char *want = nv && cases[i].eligible ? mma : portable;
        ck_assert_msg(strcmp(got, want) == 0, "%s: planned %s, expected %s", cases[i].what, got, want);
    }
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.portable_only = 1;
    clflash_context *pc = test_context(&opt);
    ck_assert_str_eq(plan_backward_kernel(pc, &cases[0].d), portable);
    clflash_context_free(pc);
    clReleaseMemObject(lens);
    clReleaseMemObject(floats);
}
END_TEST

/* The tensor-core gradient kernel's plan: B by the backward rule, its real local bytes, and the
 * rows each work-group keeps in registers (above head_dim 128 two warps per 16 rows: half as many
 * rows per work-group, and an odd nv_backward.warps steps down to an even count). */
START_TEST(backward_plan_fields)
{
    if (!tensor_cores(ctx))
        return;
    static const uint32_t dims[] = {64, 128, 160, 256};
    for (int i = 0; i < 4; i++) {
        const uint32_t lanes_per_row = dims[i] > 128 ? 4 : 2;
        clflash_attention_desc d = th_desc(1, 1, 0, 4096, 4096, dims[i], CLFLASH_F16, 0);
        clflash_plan p = {.struct_size = sizeof p};
        ck_assert_int_eq(clflash_plan_backward(ctx, &d, &p), CLFLASH_SUCCESS);
        ck_assert_str_eq(p.kernel, "nv_mma_backward");
        ck_assert_uint_eq(p.block % 16, 0);
        ck_assert_uint_eq(p.tile_bytes, clflash_backward_tile_bytes(p.block, dims[i], 2));
        ck_assert_uint_le(p.tile_bytes, p.local_mem_budget);
        ck_assert_uint_le(p.kernel_local_bytes, p.local_mem_budget);
        ck_assert_uint_ge(p.kernel_local_bytes, 4ull * p.block * (dims[i] + 8) * 2); /* two Q/dO or K/V tile pairs */
        ck_assert_uint_eq(p.block_q % 16, 0);
        ck_assert_uint_eq(p.work_group_size, lanes_per_row * p.block_q);
        ck_assert_uint_eq(p.threads_per_row, lanes_per_row);
        ck_assert_uint_eq(p.kv_passes, (4096 + p.block_q - 1) / p.block_q);
    }
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.tuning = "nv_backward.warps=3";
    clflash_context *odd = test_context(&opt);
    static const struct {
        uint32_t d, warps;
    } stepped[] = {{64, 3}, {256, 2}};
    for (int i = 0; i < 2; i++) {
        clflash_attention_desc d = th_desc(1, 1, 0, 300, 300, stepped[i].d, CLFLASH_F16, 0);
        clflash_plan p = {.struct_size = sizeof p};
        ck_assert_int_eq(clflash_plan_backward(odd, &d, &p), CLFLASH_SUCCESS);
        ck_assert_str_eq(p.kernel, "nv_mma_backward");
        ck_assert_uint_eq(p.work_group_size, 32 * stepped[i].warps);
        char want[32];
        snprintf(want, sizeof want, "nv_backward.warps=%u", stepped[i].warps);
        ck_assert_msg(strstr(p.tuning, want) != NULL, "d %u: tuning %s, expected %s", stepped[i].d, p.tuning, want);
    }
    clflash_context_free(odd);
}
END_TEST

/* ---- numerics --------------------------------------------------------------------------------- */

typedef struct {
    uint32_t batch, hq, hkv, sq, sk, d, flags, block;
    int interleaved; /* [batch][seq][heads][d] layouts with an offset of 8 and gaps (2: of 3 and 5);
                      * 3: K's and V's rows half a row apart instead (overlapping_rows) */
    int rising;      /* K grows 8x from the first key to the last, so that row maxima keep growing */
    float scale;     /* the descriptor's scale (0 = 1/sqrt(d)) */
    uint32_t splits; /* num_splits (0: the planner's) */
    int ragged;      /* key lengths per batch entry: seq_k, 0, 1, seq_k / 2 + 1, seq_k + 5, ... */
    /* score features (the feature_shapes table): a window (with CLFLASH_WINDOW in flags), softcap,
     * a bias (one of the bias_kind values) and ALiBi slopes */
    uint32_t win_left, win_right;
    float softcap;
    int bias;
    int alibi;
} mma_shape;

enum bias_kind {
    BIAS_NONE,
    BIAS_FULL,         /* [batch][heads][seq_q][seq_k] at an odd offset, every 7th entry -inf */
    BIAS_SHARED,       /* [seq_q][seq_k], broadcast over batch and heads */
    BIAS_ROWS,         /* [batch][heads][seq_k], broadcast over the rows, every 5th entry -inf */
    BIAS_MASKED_ROWS,  /* [batch][heads][seq_q][seq_k], every 7th entry and every row i % 9 == 2 -inf */
    BIAS_PADDED        /* [batch][heads][seq_q][seq_k] in rows padded to 8 floats, offset and gaps of 4
                        * floats, every 7th entry -inf: the bias tiles staged in local memory
                        * (BIAS_STAGED), a ragged seq_k leaving 1 to 3 keys in a last 16-byte piece */
    /* (even offsets and strides, as with an even seq_k and no offset, take the kernel's paired loads) */
};

static const mma_shape shapes[] = {
    {1, 1, 0, 1, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1, 301, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* decode */
    {1, 1, 0, 17, 31, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 0, 127, 129, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 300, 77, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* seq_q > seq_k */
    {1, 1, 0, 77, 300, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* seq_q < seq_k */
    {2, 4, 2, 131, 97, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* GQA */
    {1, 4, 1, 61, 257, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* MQA */
    {1, 1, 0, 67, 67, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 67, 83, 48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 513, 1001, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 77, 131, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 131, 77, 256, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1, 1, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 37, 37, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 13, 97, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* seq_q < seq_k */
    {1, 1, 0, 97, 13, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* the first 84 rows see no key */
    {2, 4, 2, 131, 131, 128, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 300, 301, 96, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 97, 131, 64, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},           /* forced blocks: many tiles, partial ones */
    {1, 1, 0, 131, 97, 128, CLFLASH_CAUSAL, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 101, 103, 64, CLFLASH_CAUSAL, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 64, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},             /* interleaved, offset, gaps */
    {1, 4, 2, 70, 70, 128, CLFLASH_CAUSAL, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 200, 1000, 64, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},          /* scores rise by ~40 (log2 units) along the keys */
    {1, 2, 1, 150, 701, 128, CLFLASH_CAUSAL, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 301, 128, 0, 0, 0, 0, -0.1f, 0, 0, 0, 0, 0, 0, 0},        /* a negative scale: maxima become minima */
    {1, 1, 0, 90, 200, 64, CLFLASH_CAUSAL, 0, 0, 0, 0.3f, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 33, 65, 64, 0, 0, 0, 0, -0.2f, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 90, 200, 64, CLFLASH_CAUSAL, 0, 0, 0, -0.3f, 0, 0, 0, 0, 0, 0, 0},
    /* decoding: GQA packing (a K/V head's query heads in one work-group), split-KV (the planner's
     * parts, and forced 2, 3, 7 and more parts than tiles), ragged key lengths including 0 */
    {1, 32, 8, 1, 4099, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 8, 2, 1, 1000, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0},
    {1, 4, 1, 16, 777, 128, CLFLASH_CAUSAL, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0},
    {3, 8, 2, 5, 300, 64, 0, 0, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0},
    {2, 4, 4, 1, 1, 64, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0},
    {5, 8, 2, 3, 500, 128, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {5, 8, 8, 1, 700, 64, 0, 0, 0, 0, 0, 3, 1, 0, 0, 0, 0, 0},
    {2, 6, 3, 2, 333, 256, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0},
    {2, 12, 4, 16, 257, 64, CLFLASH_CAUSAL, 0, 1, 0, 0, 4, 1, 0, 0, 0, 0, 0}, /* interleaved, packed, split, ragged */
    {1, 32, 8, 16, 8192, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* head dims padded to a multiple of 16; rows not 16-byte aligned (odd head dims, odd strides) */
    {1, 2, 0, 67, 131, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 301, 59, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 4, 2, 131, 97, 111, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 61, 257, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 33, 65, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 0, 45, 100, 200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 50, 70, 255, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 64, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},             /* odd offsets and strides */
    {1, 4, 2, 70, 70, 80, CLFLASH_CAUSAL, 32, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 32, 8, 1, 2051, 59, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},           /* decode: packed, split */
    {2, 8, 2, 5, 300, 40, 0, 0, 2, 0, 0, 3, 1, 0, 0, 0, 0, 0},             /* odd strides, split, ragged */
    {2, 6, 3, 2, 333, 200, CLFLASH_CAUSAL, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0},
};
#define N_SHAPES N_OF(shapes)

/* Score features on the tensor cores: windows (left only, right only, both, zero-width, wider than
 * the keys), softcap, every bias broadcast with -inf entries and -inf rows, ALiBi, with causal,
 * GQA packing, splits and ragged key lengths, on odd, prime and size-1 shapes. */
#define W CLFLASH_WINDOW
#define C CLFLASH_CAUSAL
#define A CLFLASH_ALIGN_TO_KEY_LENGTH
static const mma_shape feature_shapes[] = {
    {1, 1, 0, 131, 131, 64, W, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0},
    {1, 2, 0, 97, 211, 128, W, 0, 0, 0, 0, 0, 0, 5, 23, 0, 0, 0},
    {1, 1, 0, 77, 300, 64, W | C, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0},
    {1, 1, 0, 200, 200, 64, W, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},        /* each row sees only its diagonal */
    {1, 1, 0, 61, 61, 64, W, 0, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 0},        /* wider than the keys */
    {2, 4, 2, 129, 257, 128, W | C, 0, 1, 0, 0, 0, 0, 100, 0, 0, 0, 0},  /* interleaved, GQA */
    {1, 32, 8, 1, 4099, 128, W, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 0, 0},     /* decode: packed, split */
    {3, 8, 2, 5, 700, 64, W | C, 0, 0, 0, 0, 3, 1, 300, 0, 0, 0, 0},     /* forced parts, ragged */
    {1, 1, 0, 1, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5.0f, 0, 0},
    {1, 2, 0, 131, 97, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5.0f, 0, 0},
    {1, 2, 1, 150, 701, 128, C, 0, 0, 1, 0, 0, 0, 0, 0, 30.0f, 0, 0},   /* rising scores, capped */
    {1, 1, 0, 67, 83, 256, 0, 0, 0, 0, 0.5f, 0, 0, 0, 0, 2.0f, 0, 0},   /* the cap bends every score */
    {2, 3, 0, 45, 53, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_FULL, 0},
    {1, 4, 2, 129, 131, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_SHARED, 0},
    {2, 2, 0, 33, 301, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_ROWS, 0},
    {1, 2, 0, 97, 97, 64, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_MASKED_ROWS, 0},
    {1, 32, 8, 1, 2049, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_FULL, 0}, /* decode: packed heads' own rows */
    /* even offsets and strides: paired loads, partial last tiles */
    {1, 4, 2, 127, 256, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_SHARED, 0},
    {2, 2, 0, 61, 190, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_MASKED_ROWS, 0},
    {1, 32, 8, 1, 2050, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_ROWS, 0},
    /* offsets and strides in multiples of 4 floats: the bias staged in local memory */
    {2, 3, 0, 150, 301, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_PADDED, 0},
    {1, 8, 2, 21, 301, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_PADDED, 0}, /* 4 packed heads a block */
    {2, 2, 0, 70, 45, 64, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_PADDED, 0},
    {1, 3, 0, 111, 203, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {2, 8, 2, 3, 999, 128, C, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 1},         /* packed slopes, split, ragged */
    {1, 4, 1, 300, 301, 96, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    /* everything at once */
    {2, 4, 2, 77, 150, 64, W | C, 0, 1, 0, 0, 0, 1, 40, 0, 20.0f, BIAS_FULL, 1},
    {2, 12, 4, 4, 555, 128, W | C, 0, 0, 0, 0, 5, 1, 200, 0, 10.0f, BIAS_ROWS, 1},
    {2, 4, 2, 77, 150, 59, W | C, 0, 2, 0, 0, 0, 1, 40, 0, 20.0f, BIAS_FULL, 1}, /* odd head_dim and strides */
    /* diagonals at each entry's key length (CLFLASH_ALIGN_TO_KEY_LENGTH; lengths seq_k, 0, 1,
     * seq_k / 2 + 1, past seq_k): a multi-token step, a decoding step in parts with a window and
     * ALiBi, and every feature at once */
    {5, 4, 2, 7, 300, 128, C | A, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {5, 32, 8, 1, 4099, 128, W | C | A, 0, 0, 0, 0, 0, 1, 1000, 0, 0, 0, 1},
    {5, 8, 2, 5, 700, 64, W | C | A, 0, 0, 0, 0, 3, 1, 300, 0, 0, 0, 1},
    {5, 4, 2, 77, 150, 59, W | C | A, 0, 2, 0, 0, 0, 1, 40, 0, 20.0f, BIAS_FULL, 1},
};
#undef W
#undef C
#undef A
#define N_FEATURE_SHAPES N_OF(feature_shapes)

static float put(clflash_dtype t, uint16_t *buf, uint64_t i, float x)
{
    if (t == CLFLASH_F16) {
        buf[i] = ref_f32_to_f16(x);
        return ref_f16_to_f32(buf[i]);
    }
    buf[i] = ref_f32_to_bf16(x);
    return ref_bf16_to_f32(buf[i]);
}

static float get(clflash_dtype t, const uint16_t *buf, uint64_t i)
{
    return t == CLFLASH_F16 ? ref_f16_to_f32(buf[i]) : ref_bf16_to_f32(buf[i]);
}

/* Interleaved layout of a tensor with `heads` heads: row stride heads*d + 8 (a gap), offset 8; with
 * `odd`, gaps and offset of 3 and 5 elements, so that no row starts on 16 bytes. */
static clflash_layout interleaved(uint32_t heads, uint32_t seq, uint32_t d, int odd)
{
    clflash_layout l;
    l.offset = odd ? 3 : 8;
    l.seq_stride = (uint64_t)heads * d + (odd ? 3 : 8);
    l.head_stride = d;
    l.batch_stride = l.seq_stride * seq + (odd ? 5 : 8);
    return l;
}

/* K's or V's layout with rows half a row apart, each key sharing half its row with the next (a
 * layout nothing forbids for inputs), and each head's rows after the one before's. */
static clflash_layout overlapping_rows(uint32_t heads, uint32_t seq, uint32_t d)
{
    clflash_layout l;
    l.offset = 0;
    l.seq_stride = d / 2;
    l.head_stride = (uint64_t)(seq + 1) * (d / 2);
    l.batch_stride = heads * l.head_stride;
    return l;
}

static cl_mem upload(const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

static clflash_attention_desc mma_desc(const mma_shape *s, clflash_dtype t);

/* One shape against the fp64 reference; with want_tuning, the plan's tuning must contain it (or,
 * written "!SETTING", must not). */
static void run_shape_tuned(const mma_shape *s, clflash_dtype t, const char *want_tuning)
{
    const clflash_attention_desc d = mma_desc(s, t);
    const uint32_t hkv = s->hkv ? s->hkv : s->hq;
    char what[200];
    th_desc_str(&d, what, sizeof what);

    const uint64_t nq = ref_extent(&d.q, s->batch, s->hq, s->sq, s->d);
    const uint64_t nk = ref_extent(&d.k, s->batch, hkv, s->sk, s->d);
    const uint64_t nv = ref_extent(&d.v, s->batch, hkv, s->sk, s->d);
    const uint64_t no = ref_extent(&d.o, s->batch, s->hq, s->sq, s->d);
    const size_t rows = (size_t)s->batch * s->hq * s->sq;
    uint16_t *q = calloc(nq, 2), *k = calloc(nk, 2), *v = calloc(nv, 2), *o = malloc(no * 2);
    float *qf = calloc(nq, 4), *kf = calloc(nk, 4), *vf = calloc(nv, 4), *lse = malloc(rows * 4);
    double *ref_o = malloc(rows * s->d * sizeof(double)), *ref_lse = malloc(rows * sizeof(double));
    ck_assert(q && k && v && o && qf && kf && vf && lse && ref_o && ref_lse);
    ref_rng r;
    ref_rng_seed(&r, 7000 + s->sq * 31 + s->sk + s->d + t);
    for (uint64_t i = 0; i < nq; i++) qf[i] = put(t, q, i, (float)(2.0 * ref_rng_uniform(&r)));
    for (uint64_t i = 0; i < nk; i++) {
        const double grow = s->rising ? 1.0 + 7.0 * (double)(i / s->d % s->sk) / s->sk : 1.0;
        kf[i] = put(t, k, i, (float)(grow * ref_rng_uniform(&r)));
    }
    for (uint64_t i = 0; i < nv; i++) vf[i] = put(t, v, i, (float)ref_rng_uniform(&r));
    for (uint64_t i = 0; i < no; i++) o[i] = SENTINEL;
    for (size_t i = 0; i < rows; i++) lse[i] = -777.0f;
    int32_t *lens = NULL;
    if (s->ragged) {
        static const int32_t shape_of[5] = {0, -1, 1, -2, -3}; /* 0: seq_k; -1: 0; -2: half; -3: past */
        lens = malloc(sizeof(int32_t) * s->batch);
        ck_assert(lens);
        for (uint32_t b = 0; b < s->batch; b++) {
            const int32_t k5 = shape_of[b % 5];
            lens[b] = k5 == 0 ? (int32_t)s->sk : k5 == -1 ? 0 : k5 == -2 ? (int32_t)s->sk / 2 + 1
                      : k5 == -3 ? (int32_t)s->sk + 5 : k5;
        }
    }
    float *bias = NULL, *slopes = NULL;
    uint64_t bias_n = 0;
    if (s->bias != BIAS_NONE) {
        const ref_strides bs = ref_resolve_bias_layout(&d);
        bias_n = bs.offset + (uint64_t)(s->batch - 1) * bs.batch_stride + (uint64_t)(s->hq - 1) * bs.head_stride +
                 (uint64_t)(s->sq - 1) * bs.seq_stride + s->sk;
        bias = malloc(bias_n * sizeof(float));
        ck_assert(bias);
        const unsigned mask_every = s->bias == BIAS_ROWS ? 5 : s->bias == BIAS_SHARED ? 0 : 7; /* PADDED: 7 */
        for (uint64_t i = 0; i < bias_n; i++)
            bias[i] = mask_every && i % mask_every == 3 ? -INFINITY : (float)(3.0 * ref_rng_uniform(&r));
        if (s->bias == BIAS_MASKED_ROWS)
            for (uint32_t b = 0; b < s->batch; b++)
                for (uint32_t h = 0; h < s->hq; h++)
                    for (uint32_t i = 2; i < s->sq; i += 9)
                        for (uint32_t j = 0; j < s->sk; j++)
                            bias[bs.offset + b * bs.batch_stride + h * bs.head_stride + i * bs.seq_stride + j] = -INFINITY;
    }
    if (s->alibi) {
        slopes = malloc(sizeof(float) * s->hq);
        ck_assert(slopes);
        for (uint32_t h = 0; h < s->hq; h++)
            slopes[h] = ldexpf(1.0f, -(int)(1 + h % 8)); /* 1/2 .. 1/256, as ALiBi's geometric slopes */
    }
    const ref_extras x = {bias, slopes, lens};
    ref_attention_ex(&d, qf, kf, vf, &x, ref_o, ref_lse);

    cl_mem bq = upload(q, nq * 2), bk = upload(k, nk * 2), bv = upload(v, nv * 2), bo = upload(o, no * 2),
           bl = upload(lse, rows * 4);
    cl_mem blens = lens ? upload(lens, sizeof(int32_t) * s->batch) : NULL;
    cl_mem bbias = bias ? upload(bias, bias_n * sizeof(float)) : NULL;
    cl_mem bslopes = slopes ? upload(slopes, sizeof(float) * s->hq) : NULL;
    cl_command_queue qu = clflash_context_queue(ctx);
    clflash_attention_desc dk = d;
    dk.key_lengths = blens;
    dk.bias = bbias;
    dk.alibi_slopes = bslopes;
    clflash_plan plan = {.struct_size = sizeof plan};
    ck_assert_int_eq(clflash_plan_attention(ctx, &dk, &plan), CLFLASH_SUCCESS);
    /* nv_wgmma_forward takes a bias and the padded head_dims in its producer loop with turns only:
     * with CLFLASH_TUNE asking for the pipelined loop or none with a producer (four warpgroups take
     * the loop without one), such a row runs nv_mma_forward */
    const char *tune_env = getenv("CLFLASH_TUNE");
    const int other_loop = tune_env && (strstr(tune_env, "nv_wgmma.pipeline=1") ||
                                        strstr(tune_env, "nv_wgmma.producer=0") ||
                                        strstr(tune_env, "nv_wgmma.warpgroups=4"));
    const int padded = s->d != 64 && s->d != 128;
    /* head_dims above 128 (padded to 256) only through TMA in one block a work-group, and neither
     * with softcap nor with a bias */
    const int wide = s->d > 128;
    const int not_tma =
        tune_env && (strstr(tune_env, "nv_wgmma.tma=0") || strstr(tune_env, "nv_wgmma.persistent=1"));
    const int refused = ((s->bias != BIAS_NONE || padded) && other_loop) ||
                        (wide && (not_tma || s->softcap != 0.0f || s->bias != BIAS_NONE));
    const char *expected =
        refused && strcmp(numerics_kernel, "nv_wgmma_forward") == 0 ? "nv_mma_forward" : numerics_kernel;
    ck_assert_msg(strcmp(plan.kernel, expected) == 0, "%s: planned %s, not %s; build log: %s", what, plan.kernel,
                  expected, clflash_context_build_log(ctx));
    if (want_tuning) { /* "!SETTING": the plan must not contain it */
        const int absent = want_tuning[0] == '!';
        ck_assert_msg((strstr(plan.tuning, want_tuning + absent) != NULL) != absent, "%s: planned %s, %s %s", what,
                      plan.tuning, absent ? "with" : "without", want_tuning + absent);
    }
    if (s->splits)
        ck_assert_uint_eq(plan.splits, s->splits);
    const uint32_t group = s->hq / hkv;
    const int wgmma = strcmp(expected, "nv_wgmma_forward") == 0; /* packs no heads, splits no keys */
    ck_assert_uint_eq(plan.packed_heads, !wgmma && group > 1 && s->sq * group <= 128 ? group : 1);
    if (wgmma)
        ck_assert_uint_eq(plan.splits, 1);
    snprintf(what + strlen(what), sizeof what - strlen(what), " (splits %u, packed %u%s%s%s%s)", plan.splits,
             plan.packed_heads, lens ? ", ragged" : "", s->softcap != 0.0f ? ", softcap" : "",
             bias ? ", bias" : "", slopes ? ", ALiBi" : "");
    const clflash_status st = clflash_forward(ctx, &dk, NULL, bq, bk, bv, bo, bl, 0, NULL, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    ck_assert_int_eq(clEnqueueReadBuffer(qu, bo, CL_TRUE, 0, no * 2, o, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(qu, bl, CL_TRUE, 0, rows * 4, lse, 0, NULL, NULL), CL_SUCCESS);

    /* f16: as the main suites. bf16: O keeps 8 bits of mantissa and P is rounded to bf16 on the
     * way into the P V product. lse comes from fp32 scores, as exact as the inputs. */
    const ref_tol to = t == CLFLASH_F16 ? ref_tol_o(CLFLASH_F16, REF_PATH_FLASH) : (ref_tol){4e-3, 1.2e-2};
    const ref_tol tl = {2e-5, 2e-5};
    const ref_strides os = ref_resolve_layout(&d.o, s->hq, s->sq, s->d);
    size_t bad = 0;
    char first[300] = "";
    unsigned char *in_layout = calloc(no, 1);
    ck_assert(in_layout);
    for (uint32_t b = 0; b < s->batch; b++)
        for (uint32_t h = 0; h < s->hq; h++)
            for (uint32_t i = 0; i < s->sq; i++) {
                const size_t row = ((size_t)b * s->hq + h) * s->sq + i;
                for (uint32_t c = 0; c < s->d; c++) {
                    const uint64_t at = ref_index(&os, b, h, i, c);
                    in_layout[at] = 1;
                    const double got = get(t, o, at), want = ref_o[row * s->d + c];
                    if (!ref_close(got, want, to) && bad++ == 0)
                        snprintf(first, sizeof first, "O[b%u h%u i%u c%u] = %.6g, reference %.6g", b, h, i, c, got, want);
                }
                if (!ref_close(lse[row], ref_lse[row], tl) && bad++ == 0)
                    snprintf(first, sizeof first, "lse[b%u h%u i%u] = %.8g, reference %.8g", b, h, i, lse[row],
                             ref_lse[row]);
            }
    for (uint64_t i = 0; i < no; i++)
        if (!in_layout[i] && o[i] != SENTINEL && bad++ == 0)
            snprintf(first, sizeof first, "O's gap element %llu was written", (unsigned long long)i);
    ck_assert_msg(bad == 0, "%s: %zu wrong, first: %s", what, bad, first);

    clReleaseMemObject(bq);
    clReleaseMemObject(bk);
    clReleaseMemObject(bv);
    clReleaseMemObject(bo);
    clReleaseMemObject(bl);
    if (blens)
        clReleaseMemObject(blens);
    if (bbias)
        clReleaseMemObject(bbias);
    if (bslopes)
        clReleaseMemObject(bslopes);
    free(lens);
    free(bias);
    free(slopes);
    free(in_layout);
    free(q), free(k), free(v), free(o), free(qf), free(kf), free(vf), free(lse), free(ref_o), free(ref_lse);
}

static void run_shape(const mma_shape *s, clflash_dtype t)
{
    run_shape_tuned(s, t, NULL);
}

START_TEST(against_reference)
{
    run_shape(&shapes[_i % N_SHAPES], _i < (int)N_SHAPES ? CLFLASH_F16 : CLFLASH_BF16);
}
END_TEST

/* _i: the row in f16, then (plus N_FEATURE_SHAPES) in bf16. A BIAS_PADDED row runs twice: with the
 * bias staged in local memory (the default, nv_forward.bias_staged=1, whose plan must say so), then
 * read into registers (nv_forward.bias_staged=0). */
START_TEST(features_against_reference)
{
    const mma_shape *s = &feature_shapes[_i % N_FEATURE_SHAPES];
    const clflash_dtype t = _i < (int)N_FEATURE_SHAPES ? CLFLASH_F16 : CLFLASH_BF16;
    if (s->bias != BIAS_PADDED) {
        run_shape(s, t);
        return;
    }
    run_shape_tuned(s, t, "nv_forward.bias_staged=1");
    ck_assert_int_eq(clflash_context_set_tuning(ctx, "nv_forward.bias_staged=0"), CLFLASH_SUCCESS);
    run_shape(s, t);
    ck_assert_int_eq(clflash_context_set_tuning(ctx, "nv_forward.bias_staged=1"), CLFLASH_SUCCESS);
}
END_TEST

/* Biases of one shape that differ only in layout, planned one after the other in one context (so
 * through its plan cache): staged in local memory (offset and strides in multiples of 4 floats),
 * then rows of 302 floats (pairs, but no 16-byte pieces: a staged plan would copy misaligned
 * pieces), then one row of the keys for every query (row stride 0, which stays in registers), then
 * staged again. Each gets the plan of its own layout and the reference's result. */
START_TEST(bias_layouts_in_one_context)
{
    mma_shape s = {2, 3, 0, 150, 302, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_PADDED, 0};
    run_shape_tuned(&s, CLFLASH_F16, "nv_forward.bias_staged=1");
    s.bias = BIAS_SHARED;
    run_shape_tuned(&s, CLFLASH_F16, "!nv_forward.bias_staged=1");
    s.bias = BIAS_ROWS;
    run_shape_tuned(&s, CLFLASH_F16, "!nv_forward.bias_staged=1");
    s.bias = BIAS_PADDED;
    run_shape_tuned(&s, CLFLASH_F16, "nv_forward.bias_staged=1");
}
END_TEST

/* nv_wgmma_forward's scope (f16 and bf16 each): head_dim 64 and 128 (then those padded to them,
 * then head_dim 256 and those padded to it), seq 1, 17, 63, 65, 129 and 1000 (one warpgroup up to
 * 64 rows, two above; partial key tiles of 16, 32 and 64), causal in all three alignments, GQA and
 * MQA, interleaved aligned layouts, rising maxima, a negative scale, and the score features it
 * takes, and a bias. */
#define W CLFLASH_WINDOW
#define C CLFLASH_CAUSAL
#define A CLFLASH_ALIGN_TO_KEY_LENGTH
static const mma_shape wgmma_shapes[] = {
    {1, 1, 0, 1, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1, 1, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 0, 17, 17, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 63, 63, 64, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 2, 0, 65, 65, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 4, 2, 129, 129, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},    /* GQA */
    {1, 4, 1, 129, 129, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* MQA */
    {1, 2, 0, 1000, 1000, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 1000, 1000, 64, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1000, 1000, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 17, 1000, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* seq_q < seq_k */
    {1, 1, 0, 1000, 17, 64, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},    /* the first 983 rows see no key */
    {1, 1, 0, 65, 129, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 129, 63, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 64, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},      /* interleaved, offset, gaps */
    {1, 4, 2, 70, 70, 128, C, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 200, 1000, 64, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},   /* scores rise along the keys */
    {1, 2, 1, 150, 701, 128, C, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 301, 128, 0, 0, 0, 0, -0.1f, 0, 0, 0, 0, 0, 0, 0}, /* a negative scale */
    {3, 4, 2, 129, 1000, 64, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* score features: softcap, ALiBi, key lengths (0, 1, half, past the end) with both diagonal
     * rules, most of them at once */
    {1, 1, 0, 1, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5.0f, 0, 0},
    {1, 2, 0, 131, 97, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5.0f, 0, 0},
    {1, 2, 1, 150, 701, 64, C, 0, 0, 1, 0, 0, 0, 0, 0, 30.0f, 0, 0},
    {1, 3, 0, 111, 203, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {1, 4, 1, 300, 301, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {5, 2, 0, 65, 300, 64, C, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {5, 2, 1, 70, 129, 128, A | C, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {2, 4, 2, 77, 150, 128, W | C, 0, 1, 0, 0, 0, 1, 40, 0, 0, 0, 1},
    {2, 2, 0, 200, 333, 64, W | C, 0, 0, 1, 0, 0, 1, 50, 0, 10.0f, 0, 1},
    {1, 2, 0, 131, 97, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5.0f, 0, 0},
    {1, 2, 1, 150, 701, 128, C, 0, 0, 1, 0, 0, 0, 0, 0, 30.0f, 0, 0},
    {2, 4, 2, 333, 1000, 128, W | C, 0, 1, 0, 0, 0, 1, 200, 0, 20.0f, 0, 1},
    /* ALiBi without the causal mask: tiles right of every row's diagonal (the first rows' diagonals
     * before key 0), left of them, both with tiles that hold diagonals between, and open tiles on
     * both sides inside a window */
    {1, 2, 0, 1000, 300, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {1, 2, 1, 200, 1000, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {1, 2, 0, 400, 400, 128, 0, 0, 0, 1, 0, 0, 0, 0, 0, 20.0f, 0, 1},
    {1, 1, 0, 700, 700, 128, W, 0, 0, 0, 0, 0, 0, 300, 250, 0, 0, 1},
    /* a bias: shared over batch and heads, full at an odd offset (single loads) with -inf entries,
     * broadcast over the rows, -inf rows, padded rows, with the causal mask, softcap, a window and
     * key lengths */
    {1, 2, 0, 200, 333, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_SHARED, 0},
    {2, 3, 0, 45, 53, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_FULL, 0},
    {1, 4, 2, 129, 131, 128, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_MASKED_ROWS, 0},
    {2, 2, 0, 33, 301, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_ROWS, 0},
    {2, 3, 0, 150, 301, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_PADDED, 0},
    {1, 2, 1, 150, 701, 128, C, 0, 0, 1, 0, 0, 0, 0, 0, 30.0f, BIAS_SHARED, 0},
    {2, 2, 0, 200, 333, 64, W | C, 0, 0, 0, 0, 0, 1, 50, 0, 0, BIAS_FULL, 0},
    /* windows: left only, both sides, causal, zero-width (each row its diagonal), wider than the
     * keys, and long ones whose blocks skip key tiles on both sides */
    {1, 1, 0, 131, 131, 64, W, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0},
    {1, 2, 0, 97, 211, 128, W, 0, 0, 0, 0, 0, 0, 5, 23, 0, 0, 0},
    {1, 1, 0, 77, 300, 64, W | C, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0},
    {1, 1, 0, 200, 200, 128, W, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 61, 61, 64, W, 0, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 0},
    {2, 4, 2, 1000, 1000, 128, W | C, 0, 1, 0, 0, 0, 0, 100, 0, 0, 0, 0},
    {1, 2, 0, 1000, 1100, 128, W, 0, 0, 1, 0, 0, 0, 200, 70, 0, 0, 0},
    {1, 2, 1, 999, 999, 64, W | C, 0, 0, 0, 0, 0, 0, 300, 0, 0, 0, 1},
    /* head_dims padded to 128 or 64 (zeros in the padding columns): 96, 112, 104, 80, 72, 56, 40 and
     * 8, with the causal mask, GQA, an interleaved layout, key lengths, rising maxima, softcap,
     * ALiBi, a window and a bias */
    {1, 2, 0, 129, 131, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 4, 2, 200, 333, 96, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1000, 1000, 96, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 96, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {5, 2, 1, 70, 129, 112, A | C, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {2, 3, 0, 150, 301, 104, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_FULL, 0},
    {1, 2, 1, 150, 701, 80, C, 0, 0, 1, 0, 0, 0, 0, 0, 30.0f, 0, 0},
    {1, 2, 0, 131, 97, 72, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {1, 2, 0, 200, 1000, 56, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 300, 40, W | C, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0},
    {1, 1, 0, 17, 17, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* head_dim 256 (16-key tiles, two warpgroups): one row, odd and long shapes, the causal mask in
     * its alignments, GQA, an interleaved layout, rising maxima, a negative scale, key lengths,
     * ALiBi with and without a window; padded to 256 from 192, 136 and 248; softcap and a bias,
     * which it leaves to nv_mma_forward */
    {1, 1, 0, 1, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 0, 17, 17, 256, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 4, 2, 129, 131, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 0, 1000, 1000, 256, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 17, 1000, 256, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 200, 1000, 256, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 256, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 301, 256, 0, 0, 0, 0, -0.1f, 0, 0, 0, 0, 0, 0, 0},
    {5, 2, 1, 70, 129, 256, A | C, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {2, 4, 2, 333, 1000, 256, W | C, 0, 1, 0, 0, 0, 1, 200, 0, 0, 0, 1},
    {1, 2, 0, 1000, 300, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {1, 2, 0, 129, 131, 192, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 150, 301, 136, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 200, 1000, 248, W, 0, 0, 1, 0, 0, 0, 300, 250, 0, 0, 0},
    {1, 2, 1, 150, 701, 256, C, 0, 0, 1, 0, 0, 0, 0, 0, 30.0f, 0, 0},
    {1, 2, 0, 200, 333, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BIAS_SHARED, 0},
};
#undef W
#undef C
#undef A
#define N_WGMMA_SHAPES N_OF(wgmma_shapes)

/* _i: the row in f16, then (plus N_WGMMA_SHAPES) in bf16. */
START_TEST(wgmma_against_reference)
{
    run_shape(&wgmma_shapes[_i % N_WGMMA_SHAPES], _i < (int)N_WGMMA_SHAPES ? CLFLASH_F16 : CLFLASH_BF16);
}
END_TEST

/* K and V layouts of one shape planned one after the other in one context (so through its plan
 * cache): rows a row apart, whose tiles come through TMA (the default), then half a row apart,
 * which a tensor map cannot describe (the tiles come by cp.async), then a row apart again. Each
 * gets the plan of its own layout and the reference's result. */
START_TEST(wgmma_kv_strides_in_one_context)
{
    /* CLFLASH_TUNE may ask for a loop without TMA; then only the second plan's is checked */
    const char *const with_tma = getenv("CLFLASH_TUNE") ? NULL : "nv_wgmma.tma=1";
    mma_shape s = {1, 2, 0, 129, 300, 128, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    run_shape_tuned(&s, CLFLASH_F16, with_tma);
    s.interleaved = 3;
    run_shape_tuned(&s, CLFLASH_F16, "nv_wgmma.tma=0");
    s.interleaved = 0;
    run_shape_tuned(&s, CLFLASH_F16, with_tma);
}
END_TEST

/* Same inputs, same bits: no atomics, a fixed order of every sum. */
START_TEST(repeatable)
{
    clflash_attention_desc d = th_desc(1, 2, 1, 200, 333, 64, CLFLASH_F16, CLFLASH_CAUSAL);
    const size_t nq = 2 * 200 * 64, nk = 333 * 64;
    uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *o1 = malloc(nq * 2), *o2 = malloc(nq * 2);
    ck_assert(q && k && v && o1 && o2);
    ref_rng r;
    ref_rng_seed(&r, 99);
    for (size_t i = 0; i < nq; i++) q[i] = ref_f32_to_f16((float)ref_rng_uniform(&r));
    for (size_t i = 0; i < nk; i++) k[i] = ref_f32_to_f16((float)ref_rng_uniform(&r));
    for (size_t i = 0; i < nk; i++) v[i] = ref_f32_to_f16((float)ref_rng_uniform(&r));
    ck_assert_int_eq(clflash_forward_host(ctx, &d, q, k, v, o1, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_forward_host(ctx, &d, q, k, v, o2, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(memcmp(o1, o2, nq * 2), 0);
    free(q), free(k), free(v), free(o1), free(o2);
}
END_TEST

/* With a fixed split count a request's bits do not depend on its batch: batch entry 1 of three
 * against the same request alone (packed GQA heads, causal, 6 parts). */
START_TEST(split_batch_independent)
{
    clflash_attention_desc one = th_desc(1, 8, 2, 1, 3000, 128, CLFLASH_F16, CLFLASH_CAUSAL), three = one;
    one.num_splits = three.num_splits = 6;
    three.batch = 3;
    const size_t q1 = 8 * 128, k1 = 2 * 3000 * 128;
    uint16_t *q = malloc(3 * q1 * 2), *k = malloc(3 * k1 * 2), *v = malloc(3 * k1 * 2), *o3 = malloc(3 * q1 * 2),
             *o1 = malloc(q1 * 2);
    float *l3 = malloc(3 * 8 * 4), *l1 = malloc(8 * 4);
    ck_assert(q && k && v && o3 && o1 && l3 && l1);
    ref_rng r;
    ref_rng_seed(&r, 123);
    for (size_t i = 0; i < 3 * q1; i++) q[i] = ref_f32_to_f16((float)(2.0 * ref_rng_uniform(&r)));
    for (size_t i = 0; i < 3 * k1; i++) k[i] = ref_f32_to_f16((float)ref_rng_uniform(&r));
    for (size_t i = 0; i < 3 * k1; i++) v[i] = ref_f32_to_f16((float)ref_rng_uniform(&r));
    ck_assert_int_eq(clflash_forward_host(ctx, &three, q, k, v, o3, l3), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_forward_host(ctx, &one, q + q1, k + k1, v + k1, o1, l1), CLFLASH_SUCCESS);
    ck_assert_msg(memcmp(o3 + q1, o1, q1 * 2) == 0, "O differs between batch 3 and batch 1 with 6 parts");
    ck_assert_msg(memcmp(l3 + 8, l1, 8 * 4) == 0, "lse differs between batch 3 and batch 1 with 6 parts");
    free(q), free(k), free(v), free(o3), free(o1), free(l3), free(l1);
}
END_TEST

/* Split parts merged in the flash kernel's own launch (the last part of each query block: the
 * default) and by the merge kernel (nv_forward.fused_merge=0) give the same bits, O and lse; the
 * fused kernel leaves its block counters ready for the next call (three fused calls in a row, the
 * same bits). The cases: the planner's parts with packed heads, forced parts with ragged lengths
 * (one entry 0) and causal, more parts than key tiles (empty parts) at an unaligned head_dim
 * without lse, and a several-warp query block. Their values are checked against the reference by
 * the numerics shapes above, which take the fused path by default. */
static const struct {
    uint32_t batch, hq, hkv, sq, sk, d, flags, splits;
    int ragged, with_lse;
} fused_cases[] = {
    {1, 32, 8, 1, 4099, 128, 0, 0, 0, 1},
    {3, 8, 2, 5, 1000, 64, CLFLASH_CAUSAL, 7, 1, 1},
    {1, 4, 4, 1, 100, 59, 0, 37, 0, 0},
    {2, 6, 3, 40, 777, 128, CLFLASH_CAUSAL, 3, 0, 1},
};

START_TEST(fused_merge_same_bits)
{
    const __typeof__(fused_cases[0]) *fc = &fused_cases[_i];
    clflash_attention_desc d = th_desc(fc->batch, fc->hq, fc->hkv, fc->sq, fc->sk, fc->d, CLFLASH_F16, fc->flags);
    d.num_splits = fc->splits;
    const size_t nq = (size_t)fc->batch * fc->hq * fc->sq * fc->d, nk = (size_t)fc->batch * fc->hkv * fc->sk * fc->d;
    const size_t rows = (size_t)fc->batch * fc->hq * fc->sq;
    uint16_t *host = malloc((nq + 2 * nk) * 2), *o[4];
    float *lse[4];
    ck_assert(host);
    ref_rng r;
    ref_rng_seed(&r, 4242 + (uint64_t)_i);
    for (size_t i = 0; i < nq + 2 * nk; i++) host[i] = ref_f32_to_f16((float)(2.0 * ref_rng_uniform(&r)));
    int32_t lens[3] = {(int32_t)fc->sk, 0, (int32_t)fc->sk / 3 + 1};
    cl_mem bq = upload(host, nq * 2), bk = upload(host + nq, nk * 2), bv = upload(host + nq + nk, nk * 2);
    cl_mem blens = fc->ragged ? upload(lens, sizeof lens) : NULL;
    d.key_lengths = blens;
    cl_command_queue qu = clflash_context_queue(ctx);
    for (int run = 0; run < 4; run++) { /* runs 0..2 fused, 3 through the merge kernel */
        ck_assert_int_eq(clflash_context_set_tuning(ctx, run < 3 ? "nv_forward.fused_merge=1" : "nv_forward.fused_merge=0"),
                         CLFLASH_SUCCESS);
        clflash_plan plan = {.struct_size = sizeof plan};
        ck_assert_int_eq(clflash_plan_attention(ctx, &d, &plan), CLFLASH_SUCCESS);
        ck_assert_str_eq(plan.kernel, "nv_mma_forward");
        ck_assert_uint_gt(plan.splits, 1);
        o[run] = malloc(nq * 2);
        lse[run] = malloc(rows * 4);
        ck_assert(o[run] && lse[run]);
        for (size_t i = 0; i < nq; i++) o[run][i] = SENTINEL;
        for (size_t i = 0; i < rows; i++) lse[run][i] = -777.0f;
        cl_mem bo = upload(o[run], nq * 2), bl = fc->with_lse ? upload(lse[run], rows * 4) : NULL;
        const clflash_status st = clflash_forward(ctx, &d, NULL, bq, bk, bv, bo, bl, 0, NULL, NULL);
        ck_assert_msg(st == CLFLASH_SUCCESS, "case %d run %d: %s (%s)", _i, run, clflash_status_string(st),
                      clflash_last_error_detail());
        ck_assert_int_eq(clEnqueueReadBuffer(qu, bo, CL_TRUE, 0, nq * 2, o[run], 0, NULL, NULL), CL_SUCCESS);
        if (bl)
            ck_assert_int_eq(clEnqueueReadBuffer(qu, bl, CL_TRUE, 0, rows * 4, lse[run], 0, NULL, NULL), CL_SUCCESS);
        clReleaseMemObject(bo);
        if (bl)
            clReleaseMemObject(bl);
    }
    size_t written = 0;
    for (size_t i = 0; i < nq; i++) written += o[0][i] != SENTINEL;
    ck_assert_msg(written > nq / 2, "case %d: the fused call wrote %zu of %zu elements of O", _i, written, nq);
    for (int run = 1; run < 4; run++) {
        ck_assert_msg(memcmp(o[0], o[run], nq * 2) == 0, "case %d: O of run %d differs from the first fused run",
                      _i, run);
        ck_assert_msg(memcmp(lse[0], lse[run], rows * 4) == 0, "case %d: lse of run %d differs", _i, run);
    }
    for (int run = 0; run < 4; run++) free(o[run]), free(lse[run]);
    clReleaseMemObject(bq);
    clReleaseMemObject(bk);
    clReleaseMemObject(bv);
    if (blens)
        clReleaseMemObject(blens);
    free(host);
}
END_TEST

/* ---- backward numerics ------------------------------------------------------------------------ */

/* head_dim <= 128; the same kinds of shape as the forward's, and forced blocks 16, 32 and 48. */
static const mma_shape bwd_shapes[] = {
    {1, 1, 0, 1, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1, 301, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 17, 31, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 0, 127, 129, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 300, 77, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* seq_q > seq_k */
    {1, 1, 0, 77, 300, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* seq_q < seq_k */
    {2, 4, 2, 131, 97, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* GQA: dK, dV sum two query heads */
    {1, 4, 1, 61, 257, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* MQA */
    {1, 1, 0, 67, 67, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 67, 83, 48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 513, 1001, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 1, 1, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 37, 37, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 13, 97, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* seq_q < seq_k */
    {1, 1, 0, 97, 13, 64, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* rows that see no key: dQ = 0 */
    {2, 4, 2, 131, 131, 128, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 300, 301, 96, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 97, 131, 64, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},           /* forced blocks: many tiles, partial ones */
    {1, 1, 0, 131, 97, 128, CLFLASH_CAUSAL, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 101, 103, 64, CLFLASH_CAUSAL, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 200, 211, 32, CLFLASH_CAUSAL, 48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 64, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},             /* interleaved, offset, gaps */
    {1, 4, 2, 70, 70, 128, CLFLASH_CAUSAL, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 301, 128, 0, 0, 0, 0, -0.1f, 0, 0, 0, 0, 0, 0, 0},        /* a negative scale */
    {1, 1, 0, 90, 200, 64, CLFLASH_CAUSAL, 0, 0, 0, 0.3f, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 33, 65, 64, 0, 0, 0, 0, -0.2f, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 90, 200, 64, CLFLASH_CAUSAL, 0, 0, 0, -0.3f, 0, 0, 0, 0, 0, 0, 0},   /* key groups' causal masks */
    {1, 2, 1, 77, 131, 128, CLFLASH_CAUSAL, 0, 0, 0, -0.1f, 0, 0, 0, 0, 0, 0, 0},
    /* head dims padded to a multiple of 16; rows not 16-byte aligned (odd head dims, odd strides) */
    {1, 2, 0, 67, 131, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 77, 301, 59, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 4, 2, 131, 97, 111, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 2, 1, 61, 257, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 33, 65, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 50, 70, 120, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 64, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},             /* odd offsets and strides */
    {1, 4, 2, 70, 70, 80, CLFLASH_CAUSAL, 32, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* above 128: two warps per 16 rows, each with half of the columns (padded to 32) */
    {1, 1, 0, 1, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 67, 83, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 4, 2, 131, 97, 256, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 97, 13, 192, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* rows that see no key */
    {1, 2, 1, 77, 301, 160, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {1, 1, 0, 300, 77, 224, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},            /* seq_q > seq_k */
    {1, 2, 0, 61, 257, 144, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* padded to 160 */
    {1, 1, 0, 33, 65, 129, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},             /* padded, element by element */
    {1, 2, 1, 50, 70, 255, CLFLASH_CAUSAL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 3, 0, 45, 53, 200, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},             /* odd offsets and strides */
    {1, 1, 0, 77, 301, 256, 0, 0, 0, 0, -0.1f, 0, 0, 0, 0, 0, 0, 0},        /* a negative scale */
};
#define N_BWD_SHAPES N_OF(bwd_shapes)

static clflash_attention_desc mma_desc(const mma_shape *s, clflash_dtype t)
{
    clflash_attention_desc d = th_desc(s->batch, s->hq, s->hkv, s->sq, s->sk, s->d, t, s->flags);
    const uint32_t hkv = s->hkv ? s->hkv : s->hq;
    d.block = s->block;
    d.scale = s->scale;
    d.num_splits = s->splits;
    d.window_left = s->win_left;
    d.window_right = s->win_right;
    d.softcap = s->softcap;
    if (s->bias == BIAS_FULL)
        d.bias_layout.offset = 3;
    if (s->bias == BIAS_PADDED) {
        d.bias_layout.offset = 4;
        d.bias_layout.seq_stride = (s->sk + 7u) / 8u * 8u;
        d.bias_layout.head_stride = (uint64_t)s->sq * d.bias_layout.seq_stride + 4;
        d.bias_layout.batch_stride = (uint64_t)s->hq * d.bias_layout.head_stride + 8;
    }
    else if (s->bias == BIAS_SHARED)
        d.bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS;
    else if (s->bias == BIAS_ROWS)
        d.bias_broadcast = CLFLASH_BROADCAST_ROWS;
    if (s->interleaved == 3) {
        d.k = overlapping_rows(hkv, s->sk, s->d);
        d.v = overlapping_rows(hkv, s->sk, s->d);
    } else if (s->interleaved) {
        d.q = interleaved(s->hq, s->sq, s->d, s->interleaved == 2);
        d.k = interleaved(hkv, s->sk, s->d, s->interleaved == 2);
        d.v = interleaved(hkv, s->sk, s->d, s->interleaved == 2);
        d.o = interleaved(s->hq, s->sq, s->d, s->interleaved == 2);
    }
    return d;
}

/* dQ, dK and dV against the fp64 reference gradients (tb_check: values within the storage type's
 * tolerance, exact zeros for rows that see no key and keys nobody sees, gaps untouched), from the
 * reference O and lse and, for every other shape, from the device's own forward. */
START_TEST(backward_against_reference)
{
    const mma_shape *s = &bwd_shapes[_i % N_BWD_SHAPES];
    const clflash_dtype t = _i < (int)N_BWD_SHAPES ? CLFLASH_F16 : CLFLASH_BF16;
    const clflash_attention_desc d = mma_desc(s, t);
    char what[200], msg[2048];
    th_desc_str(&d, what, sizeof what);
    ck_assert_msg(strcmp(plan_backward_kernel(ctx, &d), "nv_mma_backward") == 0, "%s: not planned on tensor cores",
                  what);
    tb_case c;
    ck_assert_msg(tb_case_init(&c, &d, 9100 + (uint64_t)_i) == 0, "%s: out of host memory", what);
    const clflash_status st = tb_run(ctx, &c, TB_FLASH, _i % 2, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(tb_check(&c, msg, sizeof msg) == 0, "%s: %s", what, msg);
    tb_case_free(&c);
}
END_TEST

/* Score features on the tensor-core backward: windows (left only, both, zero-width, wider than the
 * keys), softcap (with its tanh derivative), every bias kind tb_case_init_features makes (-inf
 * entries, -inf rows, masked keys; offsets odd and even), ALiBi, key lengths (ragged, all 0), with
 * causal, GQA and forced blocks, on odd, prime and size-1 shapes. */
typedef struct {
    uint32_t batch, hq, hkv, sq, sk, d, flags, block;
    uint32_t win_left, win_right;
    float softcap;
    tb_bias_kind bias;
    int alibi;
    tb_lens_kind lens;
} bwd_feature_shape;

#define W CLFLASH_WINDOW
#define C CLFLASH_CAUSAL
#define A CLFLASH_ALIGN_TO_KEY_LENGTH
static const bwd_feature_shape bwd_feature_shapes[] = {
    {1, 1, 0, 131, 131, 64, W, 0, 17, 0, 0, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 2, 0, 97, 211, 128, W, 0, 5, 23, 0, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 1, 0, 77, 300, 64, W | C, 0, 64, 0, 0, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 1, 0, 200, 200, 64, W, 16, 0, 0, 0, TB_NO_BIAS, 0, TB_NO_LENS},     /* each row sees only its diagonal */
    {1, 1, 0, 61, 61, 64, W, 0, 0, 1000, 0, TB_NO_BIAS, 0, TB_NO_LENS},     /* wider than the keys */
    {2, 4, 2, 129, 257, 128, W | C, 0, 100, 0, 0, TB_NO_BIAS, 0, TB_NO_LENS}, /* GQA */
    {1, 1, 0, 1, 1, 64, 0, 0, 0, 0, 5.0f, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 2, 0, 131, 97, 128, 0, 0, 0, 0, 5.0f, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 2, 1, 150, 301, 96, C, 0, 0, 0, 30.0f, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 1, 0, 67, 83, 32, 0, 0, 0, 0, 2.0f, TB_NO_BIAS, 0, TB_NO_LENS},     /* the cap bends every score */
    {2, 3, 0, 45, 53, 64, 0, 0, 0, 0, 0, TB_BIAS_FULL, 0, TB_NO_LENS},      /* odd offset: single loads */
    {1, 4, 2, 129, 130, 128, C, 0, 0, 0, 0, TB_BIAS_BCAST, 0, TB_NO_LENS},  /* even strides: paired loads */
    {2, 2, 0, 33, 300, 64, 0, 0, 0, 0, 0, TB_BIAS_KEYS, 0, TB_NO_LENS},     /* keys nobody sees: dK = dV = 0 */
    {1, 2, 0, 97, 97, 64, C, 0, 0, 0, 0, TB_BIAS_DEAD_ROWS, 0, TB_NO_LENS}, /* rows that see nothing: dQ = 0 */
    {1, 3, 0, 111, 203, 64, 0, 0, 0, 0, 0, TB_NO_BIAS, 1, TB_NO_LENS},
    {1, 4, 1, 300, 301, 96, C, 0, 0, 0, 0, TB_NO_BIAS, 1, TB_NO_LENS},
    {4, 2, 1, 77, 131, 64, 0, 0, 0, 0, 0, TB_NO_BIAS, 0, TB_LENS_RAGGED},   /* lengths (seq_k+1)/2, 0, > seq_k, 1 */
    {4, 4, 2, 100, 100, 128, C, 0, 0, 0, 0, TB_NO_BIAS, 0, TB_LENS_RAGGED},
    {2, 1, 0, 33, 47, 64, 0, 0, 0, 0, 0, TB_NO_BIAS, 0, TB_LENS_ZERO},      /* every gradient 0 */
    {1, 1, 0, 200, 211, 32, W | C, 48, 30, 0, 0, TB_BIAS_KEYS, 0, TB_NO_LENS},
    /* everything at once */
    {4, 4, 2, 77, 150, 64, W | C, 0, 40, 0, 20.0f, TB_BIAS_FULL, 1, TB_LENS_RAGGED},
    {4, 6, 2, 64, 64, 128, W, 16, 7, 7, 10.0f, TB_BIAS_BCAST, 1, TB_LENS_RAGGED},
    /* padded head dims with every feature (dBias included) */
    {2, 2, 1, 45, 77, 59, C, 0, 0, 0, 5.0f, TB_BIAS_BCAST, 1, TB_LENS_RAGGED},
    {1, 2, 0, 33, 100, 40, W, 0, 9, 3, 0, TB_BIAS_KEYS, 0, TB_NO_LENS},
    {2, 2, 0, 37, 41, 72, 0, 0, 0, 0, 0, TB_BIAS_FULL, 0, TB_NO_LENS},
    /* above head_dim 128 (two warps per 16 rows; dBias from the portable bias kernel) */
    {1, 2, 0, 97, 211, 256, W, 0, 5, 23, 0, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 2, 1, 150, 301, 192, C, 0, 0, 0, 30.0f, TB_NO_BIAS, 0, TB_NO_LENS},
    {1, 4, 2, 129, 130, 160, C, 0, 0, 0, 0, TB_BIAS_BCAST, 0, TB_NO_LENS},
    {1, 4, 1, 100, 101, 256, C, 0, 0, 0, 0, TB_NO_BIAS, 1, TB_NO_LENS},
    {4, 4, 2, 100, 100, 224, C, 0, 0, 0, 0, TB_NO_BIAS, 0, TB_LENS_RAGGED},
    {4, 4, 2, 77, 150, 256, W | C, 0, 40, 0, 20.0f, TB_BIAS_FULL, 1, TB_LENS_RAGGED},
    {2, 2, 1, 45, 77, 137, C, 0, 0, 0, 5.0f, TB_BIAS_KEYS, 1, TB_LENS_RAGGED},
    /* diagonals at each entry's key length (CLFLASH_ALIGN_TO_KEY_LENGTH) */
    {4, 4, 2, 7, 100, 128, C | A, 0, 0, 0, 0, TB_NO_BIAS, 0, TB_LENS_RAGGED},
    {4, 4, 2, 77, 150, 64, W | C | A, 0, 40, 0, 20.0f, TB_BIAS_FULL, 1, TB_LENS_RAGGED},
    {4, 2, 1, 45, 77, 192, W | A, 0, 9, 5, 0, TB_NO_BIAS, 1, TB_LENS_RAGGED},
};
#undef W
#undef C
#undef A
#define N_BWD_FEATURE_SHAPES N_OF(bwd_feature_shapes)

/* Each bwd_feature_shapes case in f16 and bf16, as backward_against_reference (every other one
 * from the device's own forward, which runs the same features on tensor cores); with a bias, dBias
 * too (the tensor-core bias gradient runs wherever the tensor-core backward does). */
START_TEST(backward_features_against_reference)
{
    const bwd_feature_shape *s = &bwd_feature_shapes[_i % N_BWD_FEATURE_SHAPES];
    const clflash_dtype t = _i < (int)N_BWD_FEATURE_SHAPES ? CLFLASH_F16 : CLFLASH_BF16;
    clflash_attention_desc d = th_desc(s->batch, s->hq, s->hkv, s->sq, s->sk, s->d, t, s->flags);
    d.block = s->block;
    d.window_left = s->win_left;
    d.window_right = s->win_right;
    d.softcap = s->softcap;
    tb_case c;
    char what[200], msg[2048];
    ck_assert_msg(tb_case_init_features(&c, &d, s->bias, s->alibi, s->lens, 9300 + (uint64_t)_i) == 0,
                  "out of host memory");
    c.bias_grad = c.bias != NULL;
    th_desc_str(&c.d, what, sizeof what);
    /* the planner sees the case's bias layout; the buffers only need to exist */
    clflash_attention_desc planned = c.d;
    cl_int err;
    cl_mem any = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE, 64, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    planned.bias = c.bias ? any : NULL;
    planned.alibi_slopes = c.slopes ? any : NULL;
    planned.key_lengths = c.lens ? any : NULL;
    ck_assert_msg(strcmp(plan_backward_kernel(ctx, &planned), "nv_mma_backward") == 0,
                  "%s: not planned on tensor cores", what);
    clReleaseMemObject(any);
    const clflash_status st = tb_run(ctx, &c, TB_FLASH, _i % 2, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(tb_check(&c, msg, sizeof msg) == 0, "%s: %s", what, msg);
    tb_case_free(&c);
}
END_TEST

/* Same inputs, same bits: every gradient element has one writer and a fixed order of sums (at
 * head_dim 64, and 256 with two warps per 16 rows). */
START_TEST(backward_repeatable)
{
    const clflash_attention_desc d = th_desc(1, 4, 2, 200, 333, _i == 0 ? 64 : 256, CLFLASH_F16, CLFLASH_CAUSAL);
    tb_case a, b;
    char msg[1024];
    ck_assert_int_eq(tb_case_init(&a, &d, 4242), 0);
    ck_assert_int_eq(tb_case_init(&b, &d, 4242), 0);
    ck_assert_int_eq(tb_run(ctx, &a, TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(tb_run(ctx, &b, TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
    ck_assert_msg(tb_compare_runs(&a, &b, 1, msg, sizeof msg) == 0, "%s", msg);
    tb_case_free(&a);
    tb_case_free(&b);
}
END_TEST

/* dBias twice from the same inputs, the same bits: summed over batch entries and heads (a shared
 * [seq_q][seq_k] bias) and over heads and rows (one bias per batch entry and key). */
START_TEST(bias_grad_repeatable)
{
    const tb_bias_kind kind = _i == 0 ? TB_BIAS_BCAST : TB_BIAS_KEYS;
    const clflash_attention_desc d = th_desc(3, 4, 2, 131, 203, 64, CLFLASH_F16, CLFLASH_CAUSAL);
    tb_case a, b;
    ck_assert_int_eq(tb_case_init_features(&a, &d, kind, 1, TB_NO_LENS, 4343), 0);
    ck_assert_int_eq(tb_case_init_features(&b, &d, kind, 1, TB_NO_LENS, 4343), 0);
    a.bias_grad = b.bias_grad = 1;
    ck_assert_int_eq(tb_run(ctx, &a, TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(tb_run(ctx, &b, TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
    ck_assert_uint_eq(a.bias_n, b.bias_n);
    ck_assert_msg(memcmp(a.dbias, b.dbias, a.bias_n * sizeof(float)) == 0, "dBias (%s) differs between two runs",
                  _i == 0 ? "shared by batch entries and heads" : "shared by heads and rows");
    tb_case_free(&a);
    tb_case_free(&b);
}
END_TEST

int main(int argc, char **argv)
{
    /* Parts, one CTest test each so that they run side by side: "select" (any device),
     * "numerics" (the forward against the reference) and "backward_numerics" (the backward). */
    const char *part = argc > 1 ? argv[1] : "select";
    const int forward = strcmp(part, "numerics") == 0;
    const int backward = strcmp(part, "backward_numerics") == 0;
    const int wgmma = strcmp(part, "wgmma") == 0;
    if (!forward && !backward && !wgmma && strcmp(part, "select") != 0) {
        fprintf(stderr, "usage: %s [select|numerics|backward_numerics|wgmma]\n", argv[0]);
        return EXIT_FAILURE;
    }
    if (wgmma) {
        /* Only an sm_90 device (no CLFLASH_PORTABLE) may run it; there every plan must name it, so
         * that a failure of the sm_90a path fails here rather than skipping. Probed in a child as below. */
        const pid_t pid = fork();
        if (pid == 0) {
            clflash_context *c = NULL;
            const int hopper = th_context(NULL, &c) == CLFLASH_SUCCESS && device_is_nvidia_sm90(c) &&
                               getenv("CLFLASH_PORTABLE") == NULL;
            clflash_context_free(c);
            _exit(hopper ? 0 : 1);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid)
            return EXIT_FAILURE;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("nv_wgmma_forward runs only on an NVIDIA device of compute capability 9.0 (Hopper), without "
                   "CLFLASH_PORTABLE: skipped\n");
            return SKIP_CODE;
        }
        numerics_kernel = "nv_wgmma_forward";
    }
    /* Every context of the part (the variable is read when one is created): the wgmma part's plans
     * must all name nv_wgmma_forward, the others' nv_mma_forward, whatever the default mode takes. */
    if (setenv("CLFLASH_WGMMA", wgmma ? "1" : "0", 1) != 0)
        return EXIT_FAILURE;
    if (forward || backward) {
        /* Probe in a child: OpenCL state must not exist in the process Check forks from. */
        const pid_t pid = fork();
        if (pid == 0) {
            clflash_context *c = NULL;
            const clflash_attention_desc d = th_desc(1, 1, 0, 64, 64, 64, CLFLASH_F16, 0);
            clflash_plan p = {.struct_size = sizeof p};
            const int available = th_context(NULL, &c) == CLFLASH_SUCCESS &&
                                  clflash_plan_attention(c, &d, &p) == CLFLASH_SUCCESS &&
                                  strcmp(p.kernel, "nv_mma_forward") == 0;
            clflash_context_free(c);
            _exit(available ? 0 : 1);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid)
            return EXIT_FAILURE;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("no tensor-core device here (NVIDIA, compute capability >= 8.0): skipped\n");
            return SKIP_CODE;
        }
    }
    /* "features FIRST [LAST]": those feature rows only, each in both types */
    int first = -1, last = -1, layouts = 0;
    if (forward && argc == 3 && strcmp(argv[2], "layouts") == 0) { /* "numerics layouts" */
        layouts = 1;
    } else if (wgmma && argc == 3 && strcmp(argv[2], "layouts") == 0) { /* "wgmma layouts" */
        layouts = 1;
    } else if (wgmma && argc > 2) { /* "wgmma FIRST [LAST]": rows of wgmma_shapes */
        first = (int)strtol(argv[2], NULL, 10);
        last = argc > 3 ? (int)strtol(argv[3], NULL, 10) : first;
        if (first < 0 || last < first || last >= (int)N_WGMMA_SHAPES) {
            fprintf(stderr, "usage: %s wgmma [FIRST [LAST]] (rows 0 .. %d)\n", argv[0], (int)N_WGMMA_SHAPES - 1);
            return EXIT_FAILURE;
        }
    } else if (argc > 2) {
        const int n = forward ? N_FEATURE_SHAPES : N_BWD_FEATURE_SHAPES;
        char *end = NULL;
        first = argc > 3 ? (int)strtol(argv[3], &end, 10) : -1;
        last = argc > 4 ? (int)strtol(argv[4], NULL, 10) : n - 1;
        if ((!forward && !backward) || strcmp(argv[2], "features") != 0 || first < 0 || last < first || last >= n) {
            fprintf(stderr, "usage: %s numerics|backward_numerics features FIRST [LAST] (rows 0 .. %d)\n", argv[0],
                    n - 1);
            return EXIT_FAILURE;
        }
    }
    Suite *s = suite_create("nv_mma");
    TCase *tc = tcase_create(part);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    if (layouts) {
        tcase_add_test(tc, wgmma ? wgmma_kv_strides_in_one_context : bias_layouts_in_one_context);
    } else if (wgmma && first >= 0) {
        tcase_add_loop_test(tc, wgmma_against_reference, first, last + 1);
        tcase_add_loop_test(tc, wgmma_against_reference, (int)N_WGMMA_SHAPES + first,
                            (int)N_WGMMA_SHAPES + last + 1);
    } else if (first >= 0) {
        const TTest *const rows = forward ? features_against_reference : backward_features_against_reference;
        const int n = forward ? N_FEATURE_SHAPES : N_BWD_FEATURE_SHAPES;
        tcase_add_loop_test(tc, rows, first, last + 1);
        tcase_add_loop_test(tc, rows, n + first, n + last + 1);
    } else if (forward) {
        tcase_add_loop_test(tc, against_reference, 0, 2 * (int)N_SHAPES);
        tcase_add_loop_test(tc, features_against_reference, 0, 2 * (int)N_FEATURE_SHAPES);
        tcase_add_test(tc, bias_layouts_in_one_context);
        tcase_add_test(tc, repeatable);
        tcase_add_test(tc, split_batch_independent);
        tcase_add_loop_test(tc, fused_merge_same_bits, 0, (int)N_OF(fused_cases));
    } else if (wgmma) {
        tcase_add_loop_test(tc, wgmma_against_reference, 0, 2 * (int)N_WGMMA_SHAPES);
        tcase_add_test(tc, wgmma_kv_strides_in_one_context);
    } else if (backward) {
        tcase_add_loop_test(tc, backward_against_reference, 0, 2 * (int)N_BWD_SHAPES);
        tcase_add_loop_test(tc, backward_features_against_reference, 0, 2 * (int)N_BWD_FEATURE_SHAPES);
        tcase_add_loop_test(tc, backward_repeatable, 0, 2);
        tcase_add_loop_test(tc, bias_grad_repeatable, 0, 2);
    } else {
        tcase_add_test(tc, selection);
        tcase_add_test(tc, plan_fields);
        tcase_add_test(tc, wgmma_selection);
        tcase_add_test(tc, backward_selection);
        tcase_add_test(tc, backward_plan_fields);
    }
    suite_add_tcase(s, tc);
    return run_suite(s);
}
