/*
 * test_features.c - the forward path's breadth against the fp64 reference: bf16 and int8 storage,
 * sliding windows, logit softcap, additive bias (with broadcasting and -inf masks), ALiBi, key
 * padding, and their pairs with causal, GQA and strided layouts; flash and naive both; and the
 * validation of the descriptor fields that switch them on.
 *
 * Why a suite of its own: each feature is an extra input (a buffer in the descriptor) or an extra
 * storage type that the f32/f16 harness does not model. This file carries its own small runner:
 * host inputs in the storage type, dequantised copies for the reference, device buffers for the
 * optional inputs, and O read back in its output type.
 */
#define _POSIX_C_SOURCE 200809L /* snprintf, strdup */
#include "check_common.h"
#include "harness.h"
#include "reference.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static clflash_context *ctx;

/* Assertions that work both inside a Check test and in the Oclgrind driver build (where Check is
 * not running tests and ck_assert cannot report). */
#ifdef OCLGRIND_DRIVER_ONLY
#define REQUIRE(x)                                                                                 \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            printf("FAILED: %s at line %d\n", #x, __LINE__);                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#else
#define REQUIRE(x) ck_assert(x)
#endif

#ifndef OCLGRIND_DRIVER_ONLY
static void setup(void)
{
    clflash_status st = th_context(NULL, &ctx);
    ck_assert_msg(st == CLFLASH_SUCCESS, "context: %s (%s)", clflash_status_string(st), clflash_last_error_detail());
}

/* The GPU paths (flash_forward_regtile.cl, flash_forward_lanes.cl) on any device: the CPU path is
 * switched off. The first runs the planner's register tiles; the second small ones (2 rows x 4
 * work-items per row group, 8-row query blocks, B at most 8), so that every row group and key tile
 * boundary falls inside these shapes. */
static void setup_tuned(const char *tuning)
{
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.tuning = tuning;
    clflash_status st = th_context(&opt, &ctx);
    ck_assert_msg(st == CLFLASH_SUCCESS, "context: %s (%s)", clflash_status_string(st), clflash_last_error_detail());
}

static void setup_gpu_path(void)
{
    setup_tuned("portable.cpu_path=0");
}

static void setup_small_tiles(void)
{
    setup_tuned("portable.cpu_path=0,portable.regtile=2x4x8x8");
}

static void teardown(void)
{
    clflash_context_free(ctx);
    ctx = NULL;
}
#endif

/* ---- storage types on the host ------------------------------------------------------------- */
/* Stores x as type t at element i of buf and returns the value the device will see. For I8, x is
 * the quantised integer and the returned value is that integer (the caller applies the scale). */
static float store_elem(clflash_dtype t, void *buf, uint64_t i, float x)
{
    switch (t) {
    case CLFLASH_F32: ((float *)buf)[i] = x; return x;
    case CLFLASH_F16: ((uint16_t *)buf)[i] = ref_f32_to_f16(x); return ref_f16_to_f32(((uint16_t *)buf)[i]);
    case CLFLASH_BF16: ((uint16_t *)buf)[i] = ref_f32_to_bf16(x); return ref_bf16_to_f32(((uint16_t *)buf)[i]);
    default: {
        const float r = nearbyintf(x);
        ((int8_t *)buf)[i] = (int8_t)r;
        return r;
    }
    }
}

static float load_elem(clflash_dtype t, const void *buf, uint64_t i)
{
    switch (t) {
    case CLFLASH_F32: return ((const float *)buf)[i];
    case CLFLASH_F16: return ref_f16_to_f32(((const uint16_t *)buf)[i]);
    case CLFLASH_BF16: return ref_bf16_to_f32(((const uint16_t *)buf)[i]);
    default: return (float)((const int8_t *)buf)[i];
    }
}

/* ---- one case --------------------------------------------------------------------------------- */
typedef struct {
    clflash_attention_desc d;      /* cl_mem members are set by run() */
    float *bias;                   /* host bias (extent of its layout), or NULL */
    uint64_t bias_n;
    float *slopes;                 /* [heads_q] or NULL */
    int32_t *lens;                 /* [batch] or NULL */
} feature_case;

static clflash_dtype out_type(const clflash_attention_desc *d)
{
    if (d->dtype == CLFLASH_I8)
        return d->out_dtype ? d->out_dtype : CLFLASH_F32;
    return d->dtype;
}

/* O tolerance by output type: f32 and f16 as the main suites; bf16 keeps 8 bits of mantissa, so
 * rounding O moves it by up to 2^-9 relative; 4e-3 + 1.2e-2 leaves a margin and still catches a
 * dropped key (which moves O by 1e-2 .. 1e-1 at these sizes). */
static ref_tol tol_o(clflash_dtype out, ref_path path)
{
    if (out == CLFLASH_BF16) {
        ref_tol t = {4e-3, 1.2e-2};
        return t;
    }
    return ref_tol_o(out, path);
}

/* lse tolerance: the flash kernels keep scores in fp32, so lse is as exact as the inputs; the naive
 * path stores the score matrix in O's type, so with f16 or bf16 O its lse carries that rounding
 * (bf16: 2^-9 relative of scores up to ~8, about 1.6e-2). */
static ref_tol tol_lse(clflash_dtype in, clflash_dtype out, ref_path path)
{
    if (path == REF_PATH_NAIVE && out == CLFLASH_BF16) {
        ref_tol t = {3e-2, 1e-2};
        return t;
    }
    if (path == REF_PATH_NAIVE)
        return ref_tol_lse(out == CLFLASH_F16 ? CLFLASH_F16 : CLFLASH_F32, path);
    return ref_tol_lse(in == CLFLASH_F16 ? CLFLASH_F16 : CLFLASH_F32, path);
}

/* Runs the case through `algo` and compares O and lse with the reference; returns failures. */
static int run(feature_case *fc, th_algo algo, char *msg, size_t msg_len)
{
    clflash_attention_desc d = fc->d;
    const clflash_dtype out = out_type(&d);
    const size_t in_size = clflash_dtype_size(d.dtype), out_size = clflash_dtype_size(out);
    const uint32_t hkv = ref_heads_kv(&d);
    const uint64_t nq = ref_extent(&d.q, d.batch, d.heads_q, d.seq_q, d.head_dim);
    const uint64_t nk = ref_extent(&d.k, d.batch, hkv, d.seq_k, d.head_dim);
    const uint64_t nv = ref_extent(&d.v, d.batch, hkv, d.seq_k, d.head_dim);
    const uint64_t no = ref_extent(&d.o, d.batch, d.heads_q, d.seq_q, d.head_dim);
    const size_t nlse = (size_t)d.batch * d.heads_q * d.seq_q, dense = nlse * d.head_dim;
    const float qs = d.dtype == CLFLASH_I8 && d.q_scale != 0.0f ? d.q_scale : 1.0f;
    const float ks = d.dtype == CLFLASH_I8 && d.k_scale != 0.0f ? d.k_scale : 1.0f;
    const float vs = d.dtype == CLFLASH_I8 && d.v_scale != 0.0f ? d.v_scale : 1.0f;
    void *hq = calloc(nq, in_size), *hk = calloc(nk, in_size), *hv = calloc(nv, in_size), *ho = calloc(no, out_size);
    float *fq = calloc(nq, 4), *fk = calloc(nk, 4), *fv = calloc(nv, 4), *lse = calloc(nlse, 4);
    double *ro = calloc(dense, 8), *rl = calloc(nlse, 8), *got_o = calloc(dense, 8), *got_l = calloc(nlse, 8);
    ref_rng rng;
    cl_int e = CL_SUCCESS;
    cl_context cx = clflash_context_cl(ctx);
    cl_command_queue qu = clflash_context_queue(ctx);
    cl_mem bq, bk, bv, bo, bl, bb = NULL, bsl = NULL, blen = NULL;
    clflash_status st;
    int fails = 0;
    REQUIRE(hq && hk && hv && ho && fq && fk && fv && lse && ro && rl && got_o && got_l);

    ref_rng_seed(&rng, 0x5eed + d.seq_q * 131u + d.seq_k);
    /* int8 draws integers in [-127, 127]; the others draw Q in [-2, 2), K and V in [-1, 1). */
    for (uint64_t i = 0; i < nq; i++)
        fq[i] = qs * store_elem(d.dtype, hq, i, d.dtype == CLFLASH_I8 ? 127.0f * (float)ref_rng_uniform(&rng)
                                                                      : 2.0f * (float)ref_rng_uniform(&rng));
    for (uint64_t i = 0; i < nk; i++)
        fk[i] = ks * store_elem(d.dtype, hk, i, (d.dtype == CLFLASH_I8 ? 127.0f : 1.0f) * (float)ref_rng_uniform(&rng));
    for (uint64_t i = 0; i < nv; i++)
        fv[i] = vs * store_elem(d.dtype, hv, i, (d.dtype == CLFLASH_I8 ? 127.0f : 1.0f) * (float)ref_rng_uniform(&rng));

    {
        const ref_extras x = {fc->bias, fc->slopes, fc->lens};
        ref_attention_ex(&d, fq, fk, fv, &x, ro, rl);
    }

    bq = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * in_size, hq, &e);
    REQUIRE(e == CL_SUCCESS);
    bk = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * in_size, hk, &e);
    REQUIRE(e == CL_SUCCESS);
    bv = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nv * in_size, hv, &e);
    REQUIRE(e == CL_SUCCESS);
    bo = clCreateBuffer(cx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, no * out_size, ho, &e);
    REQUIRE(e == CL_SUCCESS);
    bl = clCreateBuffer(cx, CL_MEM_READ_WRITE, nlse * 4, NULL, &e);
    REQUIRE(e == CL_SUCCESS);
    if (fc->bias) {
        bb = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, fc->bias_n * 4, fc->bias, &e);
        REQUIRE(e == CL_SUCCESS);
        d.bias = bb;
    }
    if (fc->slopes) {
        bsl = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)d.heads_q * 4, fc->slopes, &e);
        REQUIRE(e == CL_SUCCESS);
        d.alibi_slopes = bsl;
    }
    if (fc->lens) {
        blen = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)d.batch * 4, fc->lens, &e);
        REQUIRE(e == CL_SUCCESS);
        d.key_lengths = blen;
    }

    st = algo == TH_FLASH ? clflash_forward(ctx, &d, NULL, bq, bk, bv, bo, bl, 0, NULL, NULL)
                          : clflash_forward_naive(ctx, &d, NULL, bq, bk, bv, bo, bl, 0, NULL, NULL);
    if (st != CLFLASH_SUCCESS) {
        snprintf(msg, msg_len, "%s: %s (%s)", algo == TH_FLASH ? "flash" : "naive", clflash_status_string(st),
                 clflash_last_error_detail());
        fails = 1;
    } else {
        const ref_strides os = ref_resolve_layout(&d.o, d.heads_q, d.seq_q, d.head_dim);
        const ref_path path = algo == TH_FLASH ? REF_PATH_FLASH : REF_PATH_NAIVE;
        REQUIRE(clEnqueueReadBuffer(qu, bo, CL_TRUE, 0, no * out_size, ho, 0, NULL, NULL) == CL_SUCCESS);
        REQUIRE(clEnqueueReadBuffer(qu, bl, CL_TRUE, 0, nlse * 4, lse, 0, NULL, NULL) == CL_SUCCESS);
        for (uint32_t b = 0; b < d.batch; b++)
            for (uint32_t h = 0; h < d.heads_q; h++)
                for (uint32_t i = 0; i < d.seq_q; i++)
                    for (uint32_t c = 0; c < d.head_dim; c++)
                        got_o[(((size_t)b * d.heads_q + h) * d.seq_q + i) * d.head_dim + c] =
                            load_elem(out, ho, ref_index(&os, b, h, i, c));
        for (size_t i = 0; i < nlse; i++)
            got_l[i] = lse[i];
        fails += (int)ref_compare("O", got_o, ro, dense, tol_o(out, path), msg, msg_len);
        if (!fails)
            fails += (int)ref_compare("lse", got_l, rl, nlse, tol_lse(d.dtype, out, path), msg, msg_len);
    }
    clReleaseMemObject(bq);
    clReleaseMemObject(bk);
    clReleaseMemObject(bv);
    clReleaseMemObject(bo);
    clReleaseMemObject(bl);
    if (bb) clReleaseMemObject(bb);
    if (bsl) clReleaseMemObject(bsl);
    if (blen) clReleaseMemObject(blen);
    free(hq); free(hk); free(hv); free(ho); free(fq); free(fk); free(fv); free(lse);
    free(ro); free(rl); free(got_o); free(got_l);
    return fails;
}

#ifndef OCLGRIND_DRIVER_ONLY
/* Runs flash and naive and fails the test with the case's description on any mismatch. */
static void check_both(feature_case *fc, const char *what)
{
    char msg[512] = "", desc[256];
    th_desc_str(&fc->d, desc, sizeof desc);
    ck_assert_msg(run(fc, TH_FLASH, msg, sizeof msg) == 0, "%s flash %s: %s", what, desc, msg);
    ck_assert_msg(run(fc, TH_NAIVE, msg, sizeof msg) == 0, "%s naive %s: %s", what, desc, msg);
}
#endif

static feature_case make(uint32_t batch, uint32_t hq, uint32_t hkv, uint32_t sq, uint32_t sk, uint32_t d,
                         clflash_dtype t, uint32_t flags)
{
    feature_case fc;
    memset(&fc, 0, sizeof fc);
    fc.d = th_desc(batch, hq, hkv, sq, sk, d, t, flags);
    return fc;
}

/* A bias over the descriptor's layout: values in [-2, 2), with every `mask_every`-th entry -inf
 * (0 = none). */
static void add_bias(feature_case *fc, unsigned mask_every, uint64_t seed)
{
    const ref_strides s = ref_resolve_bias_layout(&fc->d);
    ref_rng rng;
    fc->bias_n = s.offset + (uint64_t)(fc->d.batch - 1) * s.batch_stride + (uint64_t)(fc->d.heads_q - 1) * s.head_stride +
                 (uint64_t)(fc->d.seq_q - 1) * s.seq_stride + fc->d.seq_k;
    fc->bias = malloc(fc->bias_n * sizeof(float));
    REQUIRE(fc->bias);
    ref_rng_seed(&rng, seed);
    for (uint64_t i = 0; i < fc->bias_n; i++)
        fc->bias[i] = (mask_every && i % mask_every == 3) ? -INFINITY : 2.0f * (float)ref_rng_uniform(&rng);
}

/* ALiBi slopes first / (h + 1) for each query head h. */
static void add_slopes(feature_case *fc, float first)
{
    fc->slopes = malloc(fc->d.heads_q * sizeof(float));
    REQUIRE(fc->slopes);
    for (uint32_t h = 0; h < fc->d.heads_q; h++)
        fc->slopes[h] = first / (float)(h + 1);
}

/* The i8 scales the feature cases use (a real value is the scale times the stored integer). */
static void set_i8_scales(feature_case *fc)
{
    fc->d.q_scale = 1.0f / 64;
    fc->d.k_scale = 1.0f / 64;
    fc->d.v_scale = 1.0f / 127;
}

static void free_case(feature_case *fc)
{
    free(fc->bias);
    free(fc->slopes);
    free(fc->lens);
}

#ifndef OCLGRIND_DRIVER_ONLY
/* ---- storage types ---------------------------------------------------------------------------- */
static const struct { uint32_t b, hq, hkv, sq, sk, d, flags; } shapes_types[] = {
    {1, 1, 0, 1, 1, 1, 0},     {1, 2, 1, 37, 53, 7, 0},            {2, 2, 0, 97, 13, 64, CLFLASH_CAUSAL},
    {1, 3, 3, 131, 131, 128, CLFLASH_CAUSAL}, {1, 1, 0, 13, 29, 256, 0},
};

START_TEST(bf16_storage)
{
    feature_case fc = make(shapes_types[_i].b, shapes_types[_i].hq, shapes_types[_i].hkv, shapes_types[_i].sq,
                           shapes_types[_i].sk, shapes_types[_i].d, CLFLASH_BF16, shapes_types[_i].flags);
    check_both(&fc, "bf16");
    free_case(&fc);
}
END_TEST

START_TEST(bf16_strided)
{
    /* [batch][seq][heads][d] for Q and O, padded K rows. */
    feature_case fc = make(2, 3, 0, 19, 23, 16, CLFLASH_BF16, CLFLASH_CAUSAL);
    fc.d.q.seq_stride = fc.d.o.seq_stride = 3 * 16;
    fc.d.q.head_stride = fc.d.o.head_stride = 16;
    fc.d.q.batch_stride = fc.d.o.batch_stride = 19 * 3 * 16;
    fc.d.k.seq_stride = 20;
    check_both(&fc, "bf16 strided");
    free_case(&fc);
}
END_TEST

static const clflash_dtype i8_outs[] = {0, CLFLASH_F32, CLFLASH_F16, CLFLASH_BF16};

START_TEST(i8_storage)
{
    feature_case fc = make(1, 2, 1, 41, 67, 64, CLFLASH_I8, _i == 2 ? CLFLASH_CAUSAL : 0);
    fc.d.out_dtype = i8_outs[_i];
    fc.d.q_scale = 1.0f / 64;
    fc.d.k_scale = 1.0f / 100;
    fc.d.v_scale = _i == 0 ? 0.0f : 1.0f / 127; /* 0 means 1 */
    check_both(&fc, "i8");
    free_case(&fc);
}
END_TEST

START_TEST(i8_plans_with_one_byte_tiles)
{
    /* The README's case: B = 256 at d = 128 needs 327,680 bytes in fp16 but 163,840 in int8. */
    clflash_attention_desc d = th_desc(1, 1, 0, 4096, 4096, 128, CLFLASH_I8, 0);
    clflash_plan p = {.struct_size = sizeof p};
    d.block = 16;
    ck_assert_int_eq(clflash_plan_attention(ctx, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.tile_bytes, clflash_tile_bytes(16, 128, 1));
    ck_assert_uint_eq(clflash_tile_bytes(256, 128, 1), 163840);
}
END_TEST

/* ---- masks and transforms --------------------------------------------------------------------- */
static const struct { uint32_t sq, sk, left, right, flags; } windows[] = {
    {37, 37, 5, 3, 0},   {61, 29, 4, 0, 0},  {29, 61, 7, 11, 0}, {97, 97, 16, 0, CLFLASH_CAUSAL},
    {13, 40, 0, 0, 0},   {64, 200, 70, 5, CLFLASH_CAUSAL},
};

START_TEST(sliding_window)
{
    for (int t = 0; t < 2; t++) {
        feature_case fc = make(1, 2, 0, windows[_i].sq, windows[_i].sk, 16, t ? CLFLASH_F16 : CLFLASH_F32,
                               CLFLASH_WINDOW | windows[_i].flags);
        fc.d.window_left = windows[_i].left;
        fc.d.window_right = windows[_i].right;
        check_both(&fc, "window");
        free_case(&fc);
    }
}
END_TEST

START_TEST(softcap)
{
    /* _i 0, 1: one partial key tile (scalar tanh); 2, 3: f32 with two whole 64-key tiles and a
     * partial one, so that the CPU path's tanh on 8 keys at a time (common.cl's tanh8) is tested */
    const uint32_t sq = _i < 2 ? 45 : 67, sk = _i < 2 ? 45 : 131;
    feature_case fc = make(1, 2, 0, sq, sk, 32, _i == 1 ? CLFLASH_F16 : CLFLASH_F32, _i & 1 ? CLFLASH_CAUSAL : 0);
    fc.d.scale = 2.0f; /* large logits, so the cap bends them */
    fc.d.softcap = 5.0f;
    check_both(&fc, "softcap");
    free_case(&fc);
}
END_TEST

START_TEST(bias_full_and_masked)
{
    feature_case fc = make(2, 2, 0, 33, 47, 16, _i ? CLFLASH_F16 : CLFLASH_F32, 0);
    fc.d.bias_layout.offset = 5;
    add_bias(&fc, 7, 11); /* some -inf entries */
    check_both(&fc, "bias");
    free_case(&fc);
}
END_TEST

START_TEST(bias_broadcast)
{
    static const uint32_t modes[] = {CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS, CLFLASH_BROADCAST_HEADS,
                                     CLFLASH_BROADCAST_ROWS | CLFLASH_BROADCAST_HEADS};
    feature_case fc = make(3, 4, 2, 21, 30, 8, CLFLASH_F32, _i == 2 ? CLFLASH_CAUSAL : 0); /* with GQA */
    fc.d.bias_broadcast = modes[_i];
    add_bias(&fc, _i == 2 ? 5 : 0, 12);
    check_both(&fc, "bias broadcast");
    free_case(&fc);
}
END_TEST

START_TEST(bias_fully_masked_rows)
{
    /* Row 2 of every head sees only -inf: O = 0 and lse = -inf (checked by the reference). */
    feature_case fc = make(1, 2, 0, 9, 17, 8, CLFLASH_F32, 0);
    add_bias(&fc, 0, 13);
    for (uint32_t h = 0; h < 2; h++)
        for (uint32_t j = 0; j < 17; j++)
            fc.bias[(h * 9 + 2) * 17 + j] = -INFINITY;
    check_both(&fc, "bias -inf rows");
    free_case(&fc);
}
END_TEST

START_TEST(alibi)
{
    feature_case fc = make(1, 4, 2, 50, 50, 16, _i ? CLFLASH_F16 : CLFLASH_F32, _i ? CLFLASH_CAUSAL : 0);
    fc.slopes = malloc(4 * sizeof(float));
    ck_assert(fc.slopes);
    for (int h = 0; h < 4; h++)
        fc.slopes[h] = powf(2.0f, -(float)(h + 1)); /* the ALiBi paper's geometric slopes */
    check_both(&fc, "alibi");
    free_case(&fc);
}
END_TEST

START_TEST(key_padding)
{
    /* Ragged KV lengths per batch entry, one of them 0 (every row masked) and one past seq_k. */
    static const int32_t lens[] = {5, 0, 37, 100};
    feature_case fc = make(4, 2, 1, _i ? 1 : 23, 37, 16, _i ? CLFLASH_F16 : CLFLASH_F32, 0);
    fc.lens = malloc(sizeof lens);
    ck_assert(fc.lens);
    memcpy(fc.lens, lens, sizeof lens);
    check_both(&fc, _i ? "key padding (decode)" : "key padding");
    free_case(&fc);
}
END_TEST

START_TEST(everything_at_once)
{
    /* Causal + window + softcap + bias + ALiBi + key padding + GQA + strided O, bf16. */
    static const int32_t lens[] = {70, 41};
    feature_case fc = make(2, 4, 2, 67, 70, 32, CLFLASH_BF16, CLFLASH_CAUSAL | CLFLASH_WINDOW);
    fc.d.window_left = 20;
    fc.d.window_right = 3;
    fc.d.softcap = 8.0f;
    fc.d.o.seq_stride = 40;
    fc.d.bias_broadcast = CLFLASH_BROADCAST_BATCH;
    add_bias(&fc, 0, 14);
    fc.slopes = malloc(4 * sizeof(float));
    fc.lens = malloc(sizeof lens);
    ck_assert(fc.slopes && fc.lens);
    for (int h = 0; h < 4; h++)
        fc.slopes[h] = 0.05f * (float)(h + 1);
    memcpy(fc.lens, lens, sizeof lens);
    check_both(&fc, "all features");
    free_case(&fc);
}
END_TEST

/* Each feature alone in each storage type (small shapes: the point is the type's load, store and
 * conversion paths around the feature). */
static const clflash_dtype all_types[] = {CLFLASH_F32, CLFLASH_F16, CLFLASH_BF16, CLFLASH_I8};
static const char *const feature_names[] = {"window", "softcap", "bias", "alibi", "key padding"};

START_TEST(each_feature_in_each_dtype)
{
    static const int32_t lens[] = {17, 6};
    const int feature = _i / 4;
    const clflash_dtype t = all_types[_i % 4];
    feature_case fc = make(2, 2, 1, 19, 23, 16, t, feature == 0 ? CLFLASH_WINDOW : 0);
    if (t == CLFLASH_I8)
        set_i8_scales(&fc);
    switch (feature) {
    case 0: fc.d.window_left = 6; fc.d.window_right = 2; break;
    case 1: fc.d.softcap = 2.5f; fc.d.scale = 1.0f; break;
    case 2: add_bias(&fc, 9, 31); break;
    case 3:
        fc.slopes = malloc(2 * sizeof(float));
        REQUIRE(fc.slopes);
        fc.slopes[0] = 0.3f;
        fc.slopes[1] = 0.1f;
        break;
    default:
        fc.lens = malloc(sizeof lens);
        REQUIRE(fc.lens);
        memcpy(fc.lens, lens, sizeof lens);
        break;
    }
    check_both(&fc, feature_names[feature]);
    free_case(&fc);
}
END_TEST

/* Each feature while decoding: two queries of four GQA heads per K/V head, so that one work-group
 * holds all their rows (the CPU decoding kernel on a CPU, the register-tiled path's packed rows on
 * the GPU path), causal, with the planner's parts and with three forced ones. */
START_TEST(each_feature_decoding)
{
    static const int32_t lens[] = {700, 333};
    const int feature = _i / 8, forced = _i / 4 % 2;
    const clflash_dtype t = all_types[_i % 4];
    feature_case fc = make(2, 8, 2, 2, 700, 48, t, CLFLASH_CAUSAL | (feature == 0 ? CLFLASH_WINDOW : 0));
    fc.d.num_splits = forced ? 3 : 0;
    if (t == CLFLASH_I8)
        set_i8_scales(&fc);
    switch (feature) {
    case 0: fc.d.window_left = 100; fc.d.window_right = 0; break;
    case 1: fc.d.softcap = 2.5f; fc.d.scale = 1.0f; break;
    case 2: add_bias(&fc, 9, 31); break;
    case 3:
        fc.slopes = malloc(8 * sizeof(float));
        REQUIRE(fc.slopes);
        for (int h = 0; h < 8; h++)
            fc.slopes[h] = 0.01f * (float)(h + 1);
        break;
    default:
        fc.lens = malloc(sizeof lens);
        REQUIRE(fc.lens);
        memcpy(fc.lens, lens, sizeof lens);
        break;
    }
    char what[64];
    snprintf(what, sizeof what, "%s, decoding%s", feature_names[feature], forced ? ", 3 parts" : "");
    check_both(&fc, what);
    free_case(&fc);
}
END_TEST

/* CLFLASH_ALIGN_TO_KEY_LENGTH: a ragged KV cache whose entries' diagonals sit at their own key
 * lengths (a multi-token step; lengths below seq_q, 0, and past seq_k, clamped), with causal,
 * window and ALiBi, a decoding step with its parts, and the flag without key_lengths (which
 * changes nothing). _i: case * 3 + type (f32, f16, bf16). */
static const struct { uint32_t b, hq, hkv, sq, sk, flags, left, right, splits; int alibi, lens; } aligned[] = {
    {4, 4, 2, 5, 37, CLFLASH_CAUSAL, 0, 0, 0, 0, 1},
    {4, 2, 1, 7, 41, CLFLASH_CAUSAL | CLFLASH_WINDOW, 6, 0, 0, 1, 1},
    {4, 2, 0, 9, 33, CLFLASH_WINDOW, 4, 3, 0, 1, 1},
    {4, 8, 2, 2, 700, CLFLASH_CAUSAL, 0, 0, 3, 1, 1},
    {2, 2, 1, 6, 29, CLFLASH_CAUSAL, 0, 0, 0, 1, 0},
};

START_TEST(aligned_to_key_lengths)
{
    const int32_t lens[4][4] = {{37, 20, 3, 0}, {41, 44, 7, 1}, {33, 12, 0, 9}, {700, 333, 0, 0}};
    const int k = _i / 3;
    const clflash_dtype t = all_types[_i % 3];
    feature_case fc = make(aligned[k].b, aligned[k].hq, aligned[k].hkv, aligned[k].sq, aligned[k].sk, 16, t,
                           aligned[k].flags | CLFLASH_ALIGN_TO_KEY_LENGTH);
    fc.d.window_left = aligned[k].left;
    fc.d.window_right = aligned[k].right;
    fc.d.num_splits = aligned[k].splits;
    if (aligned[k].alibi)
        add_slopes(&fc, 0.25f);
    if (aligned[k].lens) {
        fc.lens = malloc(aligned[k].b * sizeof(int32_t));
        REQUIRE(fc.lens);
        memcpy(fc.lens, lens[k], aligned[k].b * sizeof(int32_t));
    }
    check_both(&fc, "aligned to key lengths");
    free_case(&fc);
}
END_TEST

/* diagonal_offset: the diagonal of causal, window and ALiBi moved off the bottom-right corner.
 * Negative and positive offsets (top-left alignment, chunks of a longer sequence: rows that see
 * no key, rows that see every key), offsets past either end of the keys, with windows, ALiBi,
 * softcap, key lengths aligned or not, a decoding step with its parts, and the largest offsets
 * allowed. _i: case * 3 + type (f32, f16, bf16). */
static const struct {
    uint32_t b, hq, hkv, sq, sk, flags, left, right, splits;
    int32_t offset;
    int alibi, lens;
    float softcap;
} offsets[] = {
    {2, 2, 1, 67, 131, CLFLASH_CAUSAL, 0, 0, 0, 67 - 131, 0, 0, 0.0f},  /* top-left, as PyTorch's */
    {2, 2, 1, 37, 53, CLFLASH_CAUSAL, 0, 0, 0, -40, 1, 0, 0.0f},        /* the first rows see nothing */
    {1, 4, 2, 40, 40, CLFLASH_CAUSAL | CLFLASH_WINDOW, 9, 3, 0, 45, 0, 0, 0.0f}, /* past the last key */
    {2, 2, 1, 23, 71, CLFLASH_WINDOW, 5, 7, 0, -30, 1, 0, 3.0f},
    {1, 2, 0, 31, 31, CLFLASH_CAUSAL, 0, 0, 0, 31, 1, 0, 0.0f},         /* a whole earlier shard */
    {1, 2, 0, 31, 31, CLFLASH_CAUSAL, 0, 0, 0, -31, 0, 0, 0.0f},        /* a later shard: nothing */
    {3, 8, 2, 1, 300, CLFLASH_CAUSAL | CLFLASH_WINDOW, 50, 0, 3, -100, 1, 0, 0.0f}, /* decoding */
    {4, 2, 1, 5, 37, CLFLASH_CAUSAL | CLFLASH_ALIGN_TO_KEY_LENGTH, 0, 0, 0, -2, 1, 1, 0.0f},
    {4, 2, 1, 9, 33, CLFLASH_WINDOW, 4, 3, 0, 7, 0, 1, 0.0f},
    {1, 2, 1, 17, 19, CLFLASH_CAUSAL, 0, 0, 0, (int32_t)CLFLASH_MAX_SEQ_K, 0, 0, 0.0f},
    {1, 2, 1, 17, 19, CLFLASH_CAUSAL | CLFLASH_WINDOW, 3, 3, 0, -(int32_t)CLFLASH_MAX_SEQ_K, 0, 0, 0.0f},
};

START_TEST(diagonal_offsets)
{
    const int32_t lens[4] = {37, 20, 0, 50};
    const int k = _i / 3;
    const clflash_dtype t = all_types[_i % 3];
    feature_case fc = make(offsets[k].b, offsets[k].hq, offsets[k].hkv, offsets[k].sq, offsets[k].sk, 16, t,
                           offsets[k].flags);
    fc.d.window_left = offsets[k].left;
    fc.d.window_right = offsets[k].right;
    fc.d.num_splits = offsets[k].splits;
    fc.d.diagonal_offset = offsets[k].offset;
    fc.d.softcap = offsets[k].softcap;
    if (offsets[k].alibi) /* distances reach 60: scores the naive path's bf16 score matrix resolves */
        add_slopes(&fc, 0.05f);
    if (offsets[k].lens) {
        fc.lens = malloc(offsets[k].b * sizeof(int32_t));
        REQUIRE(fc.lens);
        memcpy(fc.lens, lens, offsets[k].b * sizeof(int32_t));
    }
    check_both(&fc, "diagonal offset");
    free_case(&fc);
}
END_TEST

/* ---- validation of the new fields --------------------------------------------------------------- */
static clflash_status plan_status(const clflash_attention_desc *d)
{
    clflash_plan p = {.struct_size = sizeof p};
    return clflash_plan_attention(ctx, d, &p);
}

START_TEST(validation_of_new_fields)
{
    clflash_attention_desc d = th_desc(1, 2, 0, 8, 8, 16, CLFLASH_F32, 0);
    clflash_attention_desc x;
    x = d; x.out_dtype = CLFLASH_F16;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_DTYPE);
    x = d; x.dtype = CLFLASH_I8; x.out_dtype = CLFLASH_I8;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_DTYPE);
    x = d; x.q_scale = 0.5f;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_SCALE);
    x = d; x.dtype = CLFLASH_I8; x.v_scale = NAN;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_SCALE);
    x = d; x.softcap = -1.0f;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_SCALE);
    x = d; x.softcap = INFINITY;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_SCALE);
    x = d; x.window_left = 3; /* without CLFLASH_WINDOW */
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_FLAGS);
    x = d; x.flags = 1u << 7;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_FLAGS);
    x = d; x.bias_broadcast = CLFLASH_BROADCAST_ROWS; /* without a bias */
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_ARGUMENT);
    x = d; x.diagonal_offset = (int32_t)CLFLASH_MAX_SEQ_K + 1;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_ARGUMENT);
    x = d; x.diagonal_offset = -(int32_t)CLFLASH_MAX_SEQ_K - 1;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_ARGUMENT);
    x = d; x.diagonal_offset = INT32_MIN;
    ck_assert_int_eq(plan_status(&x), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_str_ne(clflash_last_error_detail(), "");
    x = d; x.diagonal_offset = -(int32_t)CLFLASH_MAX_SEQ_K; /* without a diagonal rule: changes nothing */
    ck_assert_int_eq(plan_status(&x), CLFLASH_SUCCESS);
}
END_TEST

START_TEST(small_feature_buffers_refused)
{
    /* Each optional buffer one element short: CLFLASH_ERROR_BUFFER_TOO_SMALL, O untouched. */
    clflash_attention_desc d = th_desc(2, 3, 0, 5, 7, 4, CLFLASH_F32, 0);
    cl_context cx = clflash_context_cl(ctx);
    cl_command_queue qu = clflash_context_queue(ctx);
    const size_t n = 2 * 3 * 5 * 4;
    float host[2 * 3 * 7 * 4], out[2 * 3 * 5 * 4];
    cl_int e;
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        host[i] = 0.25f;
    for (size_t i = 0; i < n; i++)
        out[i] = 42.0f;
    cl_mem q = clCreateBuffer(cx, CL_MEM_COPY_HOST_PTR, n * 4, host, &e);
    cl_mem kv = clCreateBuffer(cx, CL_MEM_COPY_HOST_PTR, sizeof host, host, &e);
    cl_mem o = clCreateBuffer(cx, CL_MEM_COPY_HOST_PTR, n * 4, out, &e);
    cl_mem small = clCreateBuffer(cx, CL_MEM_COPY_HOST_PTR, 4, host, &e);
    cl_mem bias_short = clCreateBuffer(cx, CL_MEM_READ_WRITE, (2 * 3 * 5 * 7 - 1) * 4, NULL, &e);
    for (int which = 0; which < 3; which++) {
        clflash_attention_desc x = d;
        if (which == 0) x.bias = bias_short;
        if (which == 1) x.alibi_slopes = small; /* needs 3 floats */
        if (which == 2) x.key_lengths = small;  /* needs 2 ints */
        ck_assert_int_eq(clflash_forward(ctx, &x, NULL, q, kv, kv, o, NULL, 0, NULL, NULL),
                         CLFLASH_ERROR_BUFFER_TOO_SMALL);
        ck_assert_int_eq(clflash_forward_naive(ctx, &x, NULL, q, kv, kv, o, NULL, 0, NULL, NULL),
                         CLFLASH_ERROR_BUFFER_TOO_SMALL);
    }
    ck_assert_int_eq(clEnqueueReadBuffer(qu, o, CL_TRUE, 0, n * 4, out, 0, NULL, NULL), CL_SUCCESS);
    for (size_t i = 0; i < n; i++)
        ck_assert(out[i] == 42.0f);
    clReleaseMemObject(q);
    clReleaseMemObject(kv);
    clReleaseMemObject(o);
    clReleaseMemObject(small);
    clReleaseMemObject(bias_short);
}
END_TEST

START_TEST(window_skips_tiles_in_the_traffic_model)
{
    /* Causal (and windowed) attention moves fewer K/V bytes: the tiles above the diagonal (or left
     * of the window) are never loaded. */
    clflash_attention_desc d = th_desc(1, 1, 0, 4096, 4096, 64, CLFLASH_F16, 0);
    const uint64_t full = clflash_traffic_bytes(&d, CLFLASH_ALGO_FLASH, 64);
    d.flags = CLFLASH_CAUSAL;
    const uint64_t causal = clflash_traffic_bytes(&d, CLFLASH_ALGO_FLASH, 64);
    ck_assert_uint_lt(causal, full * 6 / 10);
    ck_assert_uint_gt(causal, full * 4 / 10);
}
END_TEST

static Suite *features_suite(void)
{
    Suite *s = suite_create("features");
    TCase *tt = tcase_create("storage types");
    TCase *tm = tcase_create("masks and transforms");
    TCase *tv = tcase_create("validation");
    tcase_add_checked_fixture(tt, setup, teardown);
    tcase_add_checked_fixture(tm, setup, teardown);
    tcase_add_checked_fixture(tv, setup, teardown);
    tcase_set_timeout(tt, 600);
    tcase_set_timeout(tm, 600);
    tcase_set_timeout(tv, 300);
    tcase_add_loop_test(tt, bf16_storage, 0, (int)(sizeof shapes_types / sizeof shapes_types[0]));
    tcase_add_test(tt, bf16_strided);
    tcase_add_loop_test(tt, i8_storage, 0, 4);
    tcase_add_test(tt, i8_plans_with_one_byte_tiles);
    tcase_add_loop_test(tm, sliding_window, 0, (int)(sizeof windows / sizeof windows[0]));
    tcase_add_loop_test(tm, softcap, 0, 4);
    tcase_add_loop_test(tm, bias_full_and_masked, 0, 2);
    tcase_add_loop_test(tm, bias_broadcast, 0, 3);
    tcase_add_test(tm, bias_fully_masked_rows);
    tcase_add_loop_test(tm, alibi, 0, 2);
    tcase_add_loop_test(tm, key_padding, 0, 2);
    tcase_add_test(tm, everything_at_once);
    tcase_add_loop_test(tm, each_feature_in_each_dtype, 0, 5 * 4);
    tcase_add_loop_test(tm, each_feature_decoding, 0, 5 * 2 * 4);
    tcase_add_loop_test(tm, aligned_to_key_lengths, 0, 3 * (int)N_OF(aligned));
    tcase_add_loop_test(tm, diagonal_offsets, 0, 3 * (int)N_OF(offsets));
    tcase_add_test(tv, validation_of_new_fields);
    tcase_add_test(tv, small_feature_buffers_refused);
    tcase_add_test(tv, window_skips_tiles_in_the_traffic_model);
    suite_add_tcase(s, tt);
    suite_add_tcase(s, tm);
    suite_add_tcase(s, tv);

    TCase *tg = tcase_create("gpu_path");
    tcase_add_checked_fixture(tg, setup_gpu_path, teardown);
    tcase_set_timeout(tg, 600);
    tcase_add_loop_test(tg, bf16_storage, 0, (int)(sizeof shapes_types / sizeof shapes_types[0]));
    tcase_add_test(tg, bf16_strided);
    tcase_add_loop_test(tg, i8_storage, 0, 4);
    tcase_add_loop_test(tg, sliding_window, 0, (int)(sizeof windows / sizeof windows[0]));
    tcase_add_loop_test(tg, softcap, 0, 4);
    tcase_add_loop_test(tg, bias_full_and_masked, 0, 2);
    tcase_add_loop_test(tg, bias_broadcast, 0, 3);
    tcase_add_test(tg, bias_fully_masked_rows);
    tcase_add_loop_test(tg, alibi, 0, 2);
    tcase_add_loop_test(tg, key_padding, 0, 2);
    tcase_add_test(tg, everything_at_once);
    tcase_add_loop_test(tg, each_feature_decoding, 0, 5 * 2 * 4);
    tcase_add_loop_test(tg, aligned_to_key_lengths, 0, 3 * (int)N_OF(aligned));
    tcase_add_loop_test(tg, diagonal_offsets, 0, 3 * (int)N_OF(offsets));
    suite_add_tcase(s, tg);

    TCase *ts = tcase_create("gpu_path_small_tiles");
    tcase_add_checked_fixture(ts, setup_small_tiles, teardown);
    tcase_set_timeout(ts, 600);
    tcase_add_loop_test(ts, sliding_window, 0, (int)(sizeof windows / sizeof windows[0]));
    tcase_add_test(ts, everything_at_once);
    tcase_add_loop_test(ts, each_feature_in_each_dtype, 0, 5 * 4);
    tcase_add_loop_test(ts, aligned_to_key_lengths, 0, 3 * (int)N_OF(aligned));
    tcase_add_loop_test(ts, diagonal_offsets, 0, 3 * (int)N_OF(offsets));
    suite_add_tcase(s, ts);
    return s;
}

#endif /* OCLGRIND_DRIVER_ONLY */

/* ---- the Oclgrind driver ---------------------------------------------------------------------
 * Built a second time with OCLGRIND_DRIVER_ONLY as `oclgrind_features`, the driver protocol of
 * tests/run_oclgrind.cmake: `--count` prints the number of small cases, `N` runs case N, no
 * argument runs them all; each case runs flash (forced B = 8, so several key tiles) and naive
 * against the reference, and the last line is "K of N cases failed". */
#ifdef OCLGRIND_DRIVER_ONLY
#define N_OCLGRIND_CASES 10

static int oclgrind_case(int i)
{
    static const int32_t lens[] = {9, 0};
    feature_case fc = make(2, 2, 1, 11, 19, 8, i == 5 ? CLFLASH_BF16 : i == 6 ? CLFLASH_I8 : CLFLASH_F32,
                           i == 0 || i == 7 ? CLFLASH_WINDOW | CLFLASH_CAUSAL : 0);
    char msg[512] = "";
    int fails = 0;
    fc.d.block = 8;
    switch (i) {
    case 0: fc.d.window_left = 5; fc.d.window_right = 2; break;
    case 1: fc.d.softcap = 3.0f; fc.d.scale = 1.5f; break;
    case 2: fc.d.bias_broadcast = CLFLASH_BROADCAST_HEADS; add_bias(&fc, 5, 21); break;
    case 3:
        add_slopes(&fc, 0.5f);
        break;
    case 4:
        fc.lens = malloc(sizeof lens);
        REQUIRE(fc.lens);
        memcpy(fc.lens, lens, sizeof lens);
        break;
    case 6: fc.d.out_dtype = CLFLASH_F16; set_i8_scales(&fc); break;
    case 7: fc.d.window_left = 3; fc.d.softcap = 4.0f; add_bias(&fc, 0, 22); break;
    case 8: /* a window moved before the corner, with ALiBi: rows that see no key */
        fc.d.flags = CLFLASH_WINDOW | CLFLASH_CAUSAL;
        fc.d.window_left = 4;
        fc.d.diagonal_offset = -12;
        add_slopes(&fc, 0.5f);
        break;
    case 9: /* causal moved past the last key, with key lengths */
        fc.d.flags = CLFLASH_CAUSAL;
        fc.d.diagonal_offset = 6;
        fc.lens = malloc(sizeof lens);
        REQUIRE(fc.lens);
        memcpy(fc.lens, lens, sizeof lens);
        break;
    default: break;
    }
    if (run(&fc, TH_FLASH, msg, sizeof msg)) {
        printf("MISMATCH case %d flash: %s\n", i, msg);
        fails++;
    }
    fc.d.block = 0;
    if (run(&fc, TH_NAIVE, msg, sizeof msg)) {
        printf("MISMATCH case %d naive: %s\n", i, msg);
        fails++;
    }
    if (!fails)
        printf("ok case %d\n", i);
    free_case(&fc);
    return fails != 0;
}

int main(int argc, char **argv)
{
    long first = 0, last = N_OCLGRIND_CASES;
    int failures = 0;
    clflash_status st;
    if (argc > 1 && strcmp(argv[1], "--count") == 0) {
        printf("%d\n", N_OCLGRIND_CASES);
        return 0;
    }
    if (argc > 1) {
        char *end;
        first = strtol(argv[1], &end, 10);
        if (*end || first < 0 || first >= N_OCLGRIND_CASES) {
            printf("usage: %s [--count | case index below %d]\n", argv[0], N_OCLGRIND_CASES);
            return 2;
        }
        last = first + 1;
    }
    clflash_context_options portable = {.struct_size = sizeof portable}; /* the GPU path, not the CPU path (see oclgrind_driver.c) */
    portable.tuning = "portable.cpu_path=0";
    if ((st = th_context(&portable, &ctx)) != CLFLASH_SUCCESS) {
        printf("FAILED: no context: %s (%s)\n", clflash_status_string(st), clflash_last_error_detail());
        return 1;
    }
    for (long i = first; i < last; i++)
        failures += oclgrind_case((int)i);
    clflash_context_free(ctx);
    printf("%d of %ld cases failed\n", failures, last - first);
    return failures ? 1 : 0;
}
#else
int main(void)
{
    return run_suite(features_suite());
}
#endif
