/*
 * test_forward.c - the flash forward against the fp64 reference: f32 and f16, sizes of 1, odd and
 * prime, seq_q != seq_k both ways, batches, heads, GQA and MQA, causal in all three alignments
 * (including rows that see no key), lse, explicit scales, strided layouts with offsets and gaps
 * (through clflash_forward_host and through device buffers), the event contract, and the GPU paths
 * (register tiles in several micro-tile shapes, and the lane-per-row path) run on this device.
 *
 * PoCL builds one program per (B, threads, head_dim, dtype, causal, lse) variant, so the tables
 * use few head dims x dtypes x flags and many shapes within each variant.
 */
#define _POSIX_C_SOURCE 200809L /* snprintf, strdup */
#include "check_common.h"

#include <math.h>

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16
#define CAUSAL CLFLASH_CAUSAL

/* Not causal, head_dim 64: f32 and f16. */
static const shape_t shapes_basic[] = {
    {1, 1, 0, 1, 1, 64, F32, 0, 0.0f},
    {1, 1, 0, 7, 7, 64, F32, 0, 0.0f},
    {1, 1, 0, 13, 13, 64, F32, 0, 0.0f},
    {1, 1, 0, 37, 37, 64, F32, 0, 0.0f},
    {1, 1, 0, 97, 97, 64, F32, 0, 0.0f},
    {1, 1, 0, 131, 131, 64, F32, 0, 0.0f},
    {1, 1, 0, 13, 97, 64, F32, 0, 0.0f},  /* seq_q < seq_k */
    {1, 1, 0, 131, 7, 64, F32, 0, 0.0f},  /* seq_q > seq_k */
    {1, 1, 0, 1, 131, 64, F32, 0, 0.0f},  /* one query (decode) */
    {1, 1, 0, 131, 1, 64, F32, 0, 0.0f},  /* one key */
    {2, 3, 0, 37, 41, 64, F32, 0, 0.0f},  /* batch and heads */
    {3, 2, 2, 19, 19, 64, F32, 0, 0.0f},  /* heads_kv == heads_q given explicitly */
    {2, 4, 2, 37, 53, 64, F32, 0, 0.0f},  /* GQA */
    {1, 6, 1, 29, 67, 64, F32, 0, 0.0f},  /* MQA */
    {1, 6, 3, 17, 23, 64, F32, 0, 0.0f},  /* GQA, group 2 */
    {1, 2, 0, 67, 131, 64, F32, 0, 1.0f}, /* scale 1: scores spread over tens, sharp softmax */
    {1, 1, 0, 37, 37, 64, F32, 0, -0.25f}, /* negative scale */
    {1, 1, 0, 13, 29, 64, F32, 0, 0.5f},
    {1, 1, 0, 1, 1, 64, F16, 0, 0.0f},
    {1, 1, 0, 37, 37, 64, F16, 0, 0.0f},
    {1, 1, 0, 131, 131, 64, F16, 0, 0.0f},
    {1, 1, 0, 13, 97, 64, F16, 0, 0.0f},
    {1, 1, 0, 97, 13, 64, F16, 0, 0.0f},
    {2, 4, 2, 37, 53, 64, F16, 0, 0.0f},
    {1, 2, 0, 67, 131, 64, F16, 0, 1.0f},
};

/* Causal: seq_q < seq_k, =, > (the first seq_q - seq_k rows see no key). */
static const shape_t shapes_causal[] = {
    {1, 1, 0, 1, 1, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 13, 97, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 1, 37, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 37, 37, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 131, 131, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 37, 1, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 67, 64, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 131, 128, 64, F32, CAUSAL, 0.5f},
    {2, 4, 2, 33, 45, 64, F32, CAUSAL, 0.0f},
    {2, 2, 1, 131, 7, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 13, 97, 64, F16, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F16, CAUSAL, 0.0f},
    {1, 1, 0, 64, 64, 64, F16, CAUSAL, 0.0f},
    {2, 4, 2, 33, 45, 64, F16, CAUSAL, 0.0f},
};

/* Head dims 1, 7, 128, 256 (64 is above), one or two variants each. */
static const shape_t shapes_head_dims[] = {
    {1, 1, 0, 37, 53, 1, F32, 0, 0.0f},
    {2, 2, 0, 13, 19, 1, F32, 0, 0.0f},
    {1, 1, 0, 37, 53, 7, F32, 0, 0.0f},
    {1, 1, 0, 41, 29, 7, F16, CAUSAL, 0.0f},
    {2, 2, 1, 29, 41, 7, F16, CAUSAL, 0.0f},
    {1, 1, 0, 37, 53, 128, F32, 0, 0.0f},
    {1, 2, 1, 37, 53, 128, F16, 0, 0.0f},
    {1, 1, 0, 53, 37, 256, F32, CAUSAL, 0.0f},
    {1, 1, 0, 37, 53, 256, F16, 0, 0.0f},
    {1, 1, 0, 131, 1, 256, F16, 0, 0.0f},
};

START_TEST(flash_basic)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_basic[_i]);
    run_and_check(c, &d, TH_FLASH, 0, 1, 1000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

START_TEST(flash_causal)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_causal[_i]);
    run_and_check(c, &d, TH_FLASH, 0, 1, 2000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

START_TEST(flash_head_dims)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_head_dims[_i]);
    run_and_check(c, &d, TH_FLASH, 0, 1, 3000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* lse = NULL is a distinct kernel variant: O must be the same. */
START_TEST(flash_without_lse)
{
    clflash_context *c = test_context(NULL);
    const shape_t s1 = {2, 3, 0, 37, 41, 64, F32, 0, 0.0f};
    const shape_t s2 = {1, 2, 1, 97, 13, 64, F32, CAUSAL, 0.0f};
    clflash_attention_desc d = shape_desc(&s1);
    run_and_check(c, &d, TH_FLASH, 0, 0, 4000);
    run_and_check(c, &d, TH_FLASH, 1, 0, 4001);
    d = shape_desc(&s2);
    run_and_check(c, &d, TH_FLASH, 0, 0, 4002);
    clflash_context_free(c);
}
END_TEST

/* ---- strided layouts --------------------------------------------------------------------------- */

enum { N_LAYOUT_KINDS = 4 };

static clflash_attention_desc strided_desc(int kind, clflash_dtype dt, uint32_t flags)
{
    clflash_attention_desc d;
    uint64_t D;
    switch (kind) {
    case 0: /* every tensor [batch][seq][heads][head_dim] */
        d = th_desc(2, 4, 2, 19, 23, 64, dt, flags);
        D = 64;
        d.q = (clflash_layout){0, 19 * 4 * D, D, 4 * D};
        d.k = (clflash_layout){0, 23 * 2 * D, D, 2 * D};
        d.v = (clflash_layout){0, 23 * 2 * D, D, 2 * D};
        d.o = (clflash_layout){0, 19 * 4 * D, D, 4 * D};
        break;
    case 1: /* padded rows and offsets; O has 3-element gaps after each row and 5 before */
        d = th_desc(2, 2, 1, 37, 29, 64, dt, flags);
        D = 64;
        d.q = (clflash_layout){7, 0, 0, D + 5};
        d.k = (clflash_layout){3, 0, 29 * (D + 2) + 9, D + 2};
        d.v = (clflash_layout){0, 1 * (29 * D + 4) + 1, 29 * D + 4, 0};
        d.o = (clflash_layout){5, 0, 0, D + 3};
        break;
    case 2: /* O with gaps between rows, heads and batches; Q [b][s][h][d] with an offset */
        d = th_desc(2, 3, 3, 13, 131, 64, dt, flags);
        D = 64;
        d.q = (clflash_layout){1, 13 * 3 * D, D, 3 * D};
        d.o = (clflash_layout){2, 3 * (13 * (D + 1) + 3) + 7, 13 * (D + 1) + 3, D + 1};
        break;
    default: /* one query per sequence (decode), [b][s][h][d] for Q and O, K and V padded */
        d = th_desc(3, 8, 2, 1, 97, 64, dt, flags);
        D = 64;
        d.q = (clflash_layout){0, 8 * D, D, 8 * D};
        d.o = (clflash_layout){11, 8 * D + 13, D, 8 * D};
        d.k = (clflash_layout){0, 0, 0, D + 16};
        d.v = (clflash_layout){64, 0, 97 * D + 32, 0};
        break;
    }
    return d;
}

/* _i: bit 0 = device buffers, bit 1 = f16 causal (else f32), bits 2.. = layout kind */
START_TEST(flash_strided)
{
    const int device = _i & 1;
    const int f16 = (_i >> 1) & 1;
    const int kind = _i >> 2;
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = strided_desc(kind, f16 ? F16 : F32, f16 ? CAUSAL : 0);
    run_and_check(c, &d, TH_FLASH, device, 1, 5000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* ---- the GPU paths: flash_forward_regtile.cl, flash_forward_lanes.cl ----------------------------
 * PoCL normally runs the CPU path; with the tuning setting portable.cpu_path=0 it runs what GPUs
 * run: the register tiles the planner chooses, or the ones portable.regtile sets (RMxTCxBQ[xB]),
 * or with "0" the lane-per-row path. Test _i < N_OF(gpu_shapes) runs shape _i with the planner's tiles; the rest
 * run shape _i % N with configuration _i % N_OF(gpu_configs), so each configuration meets several
 * shapes: query blocks and key tiles that the sequences do not fill, key slots past B (tc > B),
 * head dims that are not a multiple of 4 or of 4 * tc, one row per work-item. */
static const shape_t gpu_shapes[] = {
    {1, 1, 0, 1, 1, 64, F32, 0, 0.0f},
    {1, 1, 0, 131, 97, 64, F32, 0, 0.0f},
    {2, 4, 2, 37, 53, 64, F16, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F32, CAUSAL, 0.0f}, /* rows that see no key */
    {1, 1, 0, 1, 131, 64, F16, 0, 0.0f},
    {1, 6, 1, 29, 67, 7, F32, 0, 0.0f},       /* MQA, d not a multiple of 4 */
    {1, 1, 0, 37, 53, 1, F32, CAUSAL, 0.0f},
    {1, 1, 0, 53, 37, 130, F16, 0, 0.0f},
    {1, 2, 1, 41, 29, 128, F32, CAUSAL, 0.5f},
    {1, 1, 0, 37, 53, 256, F16, CAUSAL, 0.0f},
    {1, 1, 0, 131, 1, 256, F32, 0, 0.0f},
};
static const char *const gpu_configs[] = {"0", "1x1x1", "2x4x6", "4x8x64x48", "8x16x64x16", "4x16x32x8", "1x2x8x5"};

START_TEST(flash_gpu_paths)
{
    const int ns = N_OF(gpu_shapes);
    const char *cfg = _i < ns ? "" : gpu_configs[_i % N_OF(gpu_configs)];
    char tuning[64];
    snprintf(tuning, sizeof tuning, "portable.cpu_path=0,portable.regtile=%s", cfg);
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.tuning = tuning;
    opt.portable_only = 1; /* on NVIDIA, f16 would go to the tensor-core kernel */
    clflash_context *c = test_context(&opt);
    const clflash_attention_desc d = shape_desc(&gpu_shapes[_i % ns]);
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(p.kernel, strcmp(cfg, "0") == 0 ? "flash_forward_portable" : "flash_forward_regtile");
    run_and_check(c, &d, TH_FLASH, _i & 1, 1, 6000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* The register tiles through strided layouts with offsets and gaps (small tiles: many groups). */
START_TEST(flash_gpu_strided)
{
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.tuning = _i & 1 ? "portable.cpu_path=0,portable.regtile=2x4x8x8" : "portable.cpu_path=0";
    opt.portable_only = 1; /* on NVIDIA, f16 would go to the tensor-core kernel */
    clflash_context *c = test_context(&opt);
    const clflash_attention_desc d = strided_desc(_i / 2, _i & 2 ? F16 : F32, _i & 2 ? CAUSAL : 0);
    run_and_check(c, &d, TH_FLASH, 1, 1, 7000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* portable.regtile is checked when it is set: up to four decimal fields joined by 'x' within their
 * ranges, or 0; anything else is CLFLASH_ERROR_INVALID_OPTIONS and changes nothing, a valid value
 * is obeyed and reported in plan.tuning, and an empty value gives the planner's tiles again. Plans
 * only. */
START_TEST(flash_regtile_setting_parsing)
{
    static const char *const malformed[] = {"4x8x64junk", "4x8x64x16x2", "x4x8x64", "4x8", "-4x8x64",
                                            "4x8x64x", "4 x8x64", "abc", "4x8x64x0", "3x8x64", "4x8x66",
                                            "4x64x64", "4x8x512", "00"};
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.tuning = "portable.cpu_path=0";
    opt.portable_only = 1;
    clflash_context *c = test_context(&opt);
    const clflash_attention_desc d = th_desc(1, 2, 0, 131, 97, 64, CLFLASH_F32, 0);
    clflash_plan def = {.struct_size = sizeof def}, p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &def), CLFLASH_SUCCESS);
    ck_assert_str_eq(def.kernel, "flash_forward_regtile");
    ck_assert_str_eq(def.tuning, "portable.cpu_path=0,portable.regtile=4x8x64");
    ck_assert_int_eq(clflash_context_set_tuning(c, "portable.regtile=2x4x8x8"), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_msg(p.block_q == 8 && p.block == 8 && p.threads_per_row == 4,
                  "2x4x8x8 planned block_q %u, B %u, %u work-items per row", p.block_q, p.block, p.threads_per_row);
    ck_assert_str_eq(p.tuning, "portable.cpu_path=0,portable.regtile=2x4x8x8");
    for (size_t i = 0; i < N_OF(malformed); i++) {
        char spec[64];
        snprintf(spec, sizeof spec, "portable.regtile=%s", malformed[i]);
        ck_assert_msg(clflash_context_set_tuning(c, spec) == CLFLASH_ERROR_INVALID_OPTIONS,
                      "\"%s\" was accepted", spec);
        ck_assert_msg(strstr(clflash_last_error_detail(), "portable.regtile") != NULL, "\"%s\": detail \"%s\"", spec,
                      clflash_last_error_detail());
        ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
        ck_assert_msg(p.block_q == 8 && p.block == 8, "\"%s\" changed the plan (block_q %u, B %u)", spec, p.block_q,
                      p.block);
    }
    ck_assert_int_eq(clflash_context_set_tuning(c, " portable.regtile = 0 "), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(p.kernel, "flash_forward_portable");
    ck_assert_str_eq(p.tuning, "portable.cpu_path=0,portable.regtile=0");
    ck_assert_int_eq(clflash_context_set_tuning(c, "portable.regtile="), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_msg(strcmp(p.kernel, def.kernel) == 0 && p.block_q == def.block_q && p.block == def.block &&
                      p.threads_per_row == def.threads_per_row && strcmp(p.tuning, def.tuning) == 0,
                  "clearing portable.regtile planned %s, block_q %u, B %u (%s), not the default", p.kernel, p.block_q,
                  p.block, p.tuning);
    clflash_context_free(c);
}
END_TEST

/* ---- device buffers, queues and events ---------------------------------------------------------- */

/* A caller's own queue; the call waits for a user event it cannot see complete, returns without
 * waiting, and its done event completes only after the user event is set. Repeating the call
 * gives bit-identical results. */
START_TEST(flash_events_and_own_queue)
{
    clflash_context *c = test_context(NULL);
    const shape_t s = {2, 4, 2, 37, 53, 64, F32, CAUSAL, 0.0f};
    const clflash_attention_desc d = shape_desc(&s);
    th_case t;
    char msg[2400];
    ck_assert_int_eq(th_case_init(&t, &d, 6000), 0);
    th_case_reference(&t);

    cl_int err;
    cl_context ctx = clflash_context_cl(c);
    cl_command_queue q = clCreateCommandQueue(ctx, clflash_context_device(c), 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem bq = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t.nq * t.esize, t.q, &err);
    cl_mem bk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t.nk * t.esize, t.k, &err);
    cl_mem bv = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t.nv * t.esize, t.v, &err);
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t.no * t.esize, t.o, &err);
    cl_mem bl = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t.nlse * 4, t.lse, &err);
    ck_assert_int_eq(err, CL_SUCCESS);

    cl_event gate = clCreateUserEvent(ctx, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event done = NULL;
    clflash_status st = clflash_forward(c, &d, q, bq, bk, bv, bo, bl, 1, &gate, &done);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    ck_assert_ptr_nonnull(done);
    cl_int state = CL_COMPLETE;
    clFlush(q);
    ck_assert_int_eq(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL), CL_SUCCESS);
    ck_assert_msg(state != CL_COMPLETE, "the done event completed before the event it waits for");
    ck_assert_int_eq(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    clReleaseEvent(gate);
    ck_assert_int_eq(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, t.no * t.esize, t.o, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(q, bl, CL_TRUE, 0, t.nlse * 4, t.lse, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(th_check(&t, 1, REF_PATH_FLASH, msg, sizeof msg) == 0, "own queue: %s", msg);

    /* again, without a done event, on the context's queue (NULL): same bits */
    void *first = malloc(t.no * t.esize);
    ck_assert_ptr_nonnull(first);
    memcpy(first, t.o, t.no * t.esize);
    th_case_reset_outputs(&t);
    ck_assert_int_eq(clEnqueueWriteBuffer(q, bo, CL_TRUE, 0, t.no * t.esize, t.o, 0, NULL, NULL), CL_SUCCESS);
    st = clflash_forward(c, &d, NULL, bq, bk, bv, bo, bl, 0, NULL, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    ck_assert_int_eq(clFinish(clflash_context_queue(c)), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, t.no * t.esize, t.o, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(memcmp(first, t.o, t.no * t.esize) == 0, "a repeated call gave different bits");
    free(first);

    clReleaseMemObject(bq);
    clReleaseMemObject(bk);
    clReleaseMemObject(bv);
    clReleaseMemObject(bo);
    clReleaseMemObject(bl);
    clReleaseCommandQueue(q);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* clflash_forward_host writes only O's own elements and lse, nothing around them: the host arrays
 * are over-allocated here and the tails checked. */
START_TEST(flash_host_writes_only_its_extent)
{
    clflash_context *c = test_context(NULL);
    const shape_t s = {1, 2, 0, 13, 17, 7, F32, 0, 0.0f};
    const clflash_attention_desc d = shape_desc(&s);
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 6100), 0);
    const size_t pad = 64;
    float *o = malloc((t.no + pad) * sizeof(float));
    float *lse = malloc((t.nlse + pad) * sizeof(float));
    ck_assert(o && lse);
    for (size_t i = 0; i < t.no + pad; i++)
        o[i] = -5.0f;
    for (size_t i = 0; i < t.nlse + pad; i++)
        lse[i] = -6.0f;
    const clflash_status st = clflash_forward_host(c, &d, t.q, t.k, t.v, o, lse);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    for (size_t i = t.no; i < t.no + pad; i++)
        ck_assert_msg(o[i] == -5.0f, "o[%zu] past the extent %llu was written", i, (unsigned long long)t.no);
    for (size_t i = t.nlse; i < t.nlse + pad; i++)
        ck_assert_msg(lse[i] == -6.0f, "lse[%zu] past its %zu rows was written", i, t.nlse);
    free(o);
    free(lse);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

static Suite *forward_suite(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("flash_vs_reference");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_loop_test(tc, flash_basic, 0, N_OF(shapes_basic));
    tcase_add_loop_test(tc, flash_causal, 0, N_OF(shapes_causal));
    tcase_add_loop_test(tc, flash_head_dims, 0, N_OF(shapes_head_dims));
    tcase_add_test(tc, flash_without_lse);
    suite_add_tcase(s, tc);

    TCase *tl = tcase_create("layouts");
    tcase_set_timeout(tl, TEST_TIMEOUT_S);
    tcase_add_loop_test(tl, flash_strided, 0, 4 * N_LAYOUT_KINDS);
    tcase_add_test(tl, flash_host_writes_only_its_extent);
    suite_add_tcase(s, tl);

    TCase *tg = tcase_create("gpu_paths");
    tcase_set_timeout(tg, TEST_TIMEOUT_S);
    tcase_add_loop_test(tg, flash_gpu_paths, 0, 3 * N_OF(gpu_shapes));
    tcase_add_loop_test(tg, flash_gpu_strided, 0, 2 * N_LAYOUT_KINDS);
    tcase_add_test(tg, flash_regtile_setting_parsing);
    suite_add_tcase(s, tg);

    TCase *te = tcase_create("device_buffers");
    tcase_set_timeout(te, TEST_TIMEOUT_S);
    tcase_add_test(te, flash_events_and_own_queue);
    suite_add_tcase(s, te);
    return s;
}

int main(void)
{
    return run_suite(forward_suite());
}
