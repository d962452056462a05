/*
 * test_backward.c - the backward pass against the fp64 reference gradients: f32, f16 and bf16;
 * sizes of 1, odd and prime; seq_q != seq_k both ways; batches, GQA and MQA (dK and dV summed over
 * the group); causal in all three alignments, including rows that see no key (dQ exactly 0); head
 * dims 1 .. 256; lanes per row and forced blocks that a GPU would choose; strided layouts with gaps
 * (never written); O and lse from the device's own forward; the naive backward against the flash
 * one; the same bits on two runs; events and a caller's queue; a finite-difference check of
 * L = sum(O * W) that validates the reference itself; sliding windows, softcap, bias (full,
 * broadcast, -inf masks, fully masked rows), ALiBi and key padding (length 0 too), alone and
 * together, through both paths, with finite differences through the softcap's derivative; the
 * backward planner and its tile rule; and every documented error with nothing written.
 *
 * PoCL builds one program per (B, lanes, head_dim, dtype, causal) variant, so the tables use few
 * variants and many shapes within each (the planner's B is 64 once a sequence exceeds 48).
 */
#include "backward_harness.h"
#include "check_common.h"

#include <math.h>

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16
#define BF16 CLFLASH_BF16
#define CAUSAL CLFLASH_CAUSAL

/* Runs d through the flash (or naive) backward and checks it against the reference. */
static void run_case(clflash_context *c, const clflash_attention_desc *d, tb_algo algo, int device_forward,
                     uint64_t seed)
{
    char what[200], msg[3000];
    tb_case t;
    th_desc_str(d, what, sizeof what);
    ck_assert_msg(tb_case_init(&t, d, seed) == 0, "%s: out of host memory", what);
    const clflash_status st = tb_run(c, &t, algo, device_forward, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s%s: %s (%s)", algo == TB_NAIVE ? "naive " : "", what,
                  clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(tb_check(&t, msg, sizeof msg) == 0, "%s%s%s: %s", algo == TB_NAIVE ? "naive " : "", what,
                  device_forward ? " (O and lse from clflash_forward)" : "", msg);
    tb_case_free(&t);
}

/* ---- against the reference ------------------------------------------------------------------------ */

static const shape_t shapes_basic[] = {
    {1, 1, 0, 1, 1, 64, F32, 0, 0.0f},
    {1, 1, 0, 7, 7, 64, F32, 0, 0.0f},
    {1, 1, 0, 131, 131, 64, F32, 0, 0.0f},
    {1, 1, 0, 13, 97, 64, F32, 0, 0.0f},  /* seq_q < seq_k */
    {1, 1, 0, 131, 7, 64, F32, 0, 0.0f},  /* seq_q > seq_k */
    {1, 1, 0, 1, 131, 64, F32, 0, 0.0f},  /* one query */
    {1, 1, 0, 131, 1, 64, F32, 0, 0.0f},  /* one key */
    {2, 3, 0, 37, 67, 64, F32, 0, 0.0f},  /* batch and heads */
    {2, 4, 2, 37, 53, 64, F32, 0, 0.0f},  /* GQA */
    {1, 6, 1, 29, 67, 64, F32, 0, 0.0f},  /* MQA: dK, dV sum six heads */
    {1, 6, 3, 17, 53, 64, F32, 0, 0.0f},  /* GQA, group 2 */
    {1, 2, 0, 67, 131, 64, F32, 0, 1.0f}, /* scale 1: a sharp softmax */
    {1, 1, 0, 37, 67, 64, F32, 0, -0.25f}, /* negative scale */
    {1, 1, 0, 1, 1, 64, F16, 0, 0.0f},
    {1, 1, 0, 131, 131, 64, F16, 0, 0.0f},
    {1, 1, 0, 13, 97, 64, F16, 0, 0.0f},
    {1, 1, 0, 97, 13, 64, F16, 0, 0.0f},
    {2, 4, 2, 37, 53, 64, F16, 0, 0.0f},
    {1, 1, 0, 37, 67, 64, BF16, 0, 0.0f},
    {2, 4, 2, 53, 37, 64, BF16, 0, 0.0f},
};

/* Causal: seq_q < seq_k, =, > (the first seq_q - seq_k rows see no key: dQ = 0). */
static const shape_t shapes_causal[] = {
    {1, 1, 0, 1, 1, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 13, 97, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 1, 67, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 131, 131, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 67, 1, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 67, 64, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 131, 128, 64, F32, CAUSAL, 0.5f},
    {2, 4, 2, 33, 65, 64, F32, CAUSAL, 0.0f},
    {2, 2, 1, 131, 7, 64, F32, CAUSAL, 0.0f},
    {1, 1, 0, 97, 13, 64, F16, CAUSAL, 0.0f},
    {1, 1, 0, 64, 64, 64, F16, CAUSAL, 0.0f},
    {2, 4, 2, 33, 65, 64, F16, CAUSAL, 0.0f},
    {1, 2, 1, 71, 53, 64, BF16, CAUSAL, 0.0f},
};

/* Head dims 1, 7, 128, 256. */
static const shape_t shapes_head_dims[] = {
    {1, 1, 0, 37, 67, 1, F32, 0, 0.0f},
    {2, 2, 0, 53, 61, 1, F32, 0, 0.0f},
    {1, 1, 0, 71, 29, 7, F16, CAUSAL, 0.0f},
    {2, 2, 1, 53, 71, 7, F16, CAUSAL, 0.0f},
    {1, 2, 1, 37, 67, 128, F32, 0, 0.0f},
    {1, 1, 0, 67, 37, 256, F32, CAUSAL, 0.0f},
    {1, 1, 0, 37, 67, 256, F16, 0, 0.0f},
};

START_TEST(backward_basic)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_basic[_i]);
    run_case(c, &d, TB_FLASH, 0, 100 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

START_TEST(backward_causal)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_causal[_i]);
    run_case(c, &d, TB_FLASH, 0, 200 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

START_TEST(backward_head_dims)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_head_dims[_i]);
    run_case(c, &d, TB_FLASH, 0, 300 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* GPUs share each block row between up to 16 lanes; PoCL's tuning uses one. Forcing 4 and 8 lanes
 * runs the GPU's paths here: several lanes per key and query row, and (d = 7, 8 lanes) lanes that
 * own no column at all. */
START_TEST(backward_lanes)
{
    static const shape_t s[] = {{2, 4, 2, 37, 53, 64, F32, CAUSAL, 0.0f}, {1, 3, 1, 67, 29, 7, F16, 0, 0.0f}};
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.threads_per_row = _i == 0 ? 4 : 8;
    clflash_context *c = test_context(&opt);
    const clflash_attention_desc d = shape_desc(&s[_i]);
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_backward(c, &d, &p), CLFLASH_SUCCESS);
    /* the planner may halve the lanes when the built kernel runs fewer work-items (NVIDIA: 64 x 8 is
     * above this kernel's CL_KERNEL_WORK_GROUP_SIZE), but several lanes per row must remain */
    ck_assert_msg(p.threads_per_row > 1 && p.threads_per_row <= opt.threads_per_row,
                  "plan has %u lanes, forced %u", p.threads_per_row, opt.threads_per_row);
    run_case(c, &d, TB_FLASH, 0, 400 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* Forced small blocks: many K/V and Q blocks per work-group, so every reload of the local tiles
 * runs many times, with partial first and last blocks. */
START_TEST(backward_forced_blocks)
{
    static const shape_t s[] = {{1, 2, 1, 37, 53, 64, F32, CAUSAL, 0.0f},
                                {1, 1, 0, 53, 37, 64, F32, 0, 0.0f},
                                {2, 2, 1, 29, 37, 7, F16, CAUSAL, 0.0f}};
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = shape_desc(&s[_i]);
    d.block = _i == 2 ? 8 : 16;
    run_case(c, &d, TB_FLASH, 0, 500 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* ---- strided layouts --------------------------------------------------------------------------------- */

enum { N_LAYOUT_KINDS = 3 };

static clflash_attention_desc strided_desc(int kind, clflash_dtype dt, uint32_t flags)
{
    clflash_attention_desc d;
    const uint64_t D = 64;
    switch (kind) {
    case 0: /* every tensor [batch][seq][heads][head_dim] */
        d = th_desc(2, 4, 2, 53, 67, 64, dt, flags);
        d.q = (clflash_layout){0, 53 * 4 * D, D, 4 * D};
        d.k = (clflash_layout){0, 67 * 2 * D, D, 2 * D};
        d.v = (clflash_layout){0, 67 * 2 * D, D, 2 * D};
        d.o = (clflash_layout){0, 53 * 4 * D, D, 4 * D};
        break;
    case 1: /* padded rows and offsets: dQ, dK, dV (and O, dO) have gaps between rows and before */
        d = th_desc(2, 2, 1, 67, 59, 64, dt, flags);
        d.q = (clflash_layout){7, 0, 0, D + 5};
        d.k = (clflash_layout){3, 0, 59 * (D + 2) + 9, D + 2};
        d.v = (clflash_layout){0, 1 * (59 * D + 4) + 1, 59 * D + 4, 0};
        d.o = (clflash_layout){5, 0, 0, D + 3};
        break;
    default: /* one query per sequence (decode), [b][s][h][d] for Q and O, K and V padded */
        d = th_desc(3, 8, 2, 1, 97, 64, dt, flags);
        d.q = (clflash_layout){0, 8 * D, D, 8 * D};
        d.o = (clflash_layout){11, 8 * D + 13, D, 8 * D};
        d.k = (clflash_layout){0, 0, 0, D + 16};
        d.v = (clflash_layout){64, 0, 97 * D + 32, 0};
        break;
    }
    return d;
}

/* _i: bit 0 = f16 causal (else f32), bits 1.. = layout kind */
START_TEST(backward_strided)
{
    const int f16 = _i & 1, kind = _i >> 1;
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = strided_desc(kind, f16 ? F16 : F32, f16 ? CAUSAL : 0);
    run_case(c, &d, TB_FLASH, 0, 600 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* ---- the pipeline, the naive path, repeatability, events ------------------------------------------ */

/* O and lse from clflash_forward on the device, then the backward: the way a caller uses it. */
START_TEST(backward_after_device_forward)
{
    static const shape_t s[] = {{2, 4, 2, 37, 53, 64, F32, 0, 0.0f}, {1, 2, 1, 97, 13, 64, F16, CAUSAL, 0.0f}};
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&s[_i]);
    run_case(c, &d, TB_FLASH, 1, 700 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

static const shape_t shapes_naive[] = {
    {2, 4, 2, 37, 53, 64, F32, 0, 0.0f},
    {1, 1, 0, 97, 13, 64, F32, CAUSAL, 0.0f},
    {1, 6, 1, 29, 67, 64, F32, CAUSAL, 0.0f},
    {2, 4, 2, 33, 65, 64, F16, CAUSAL, 0.0f},
};

/* The naive backward against the reference, and the flash backward against the naive one. */
START_TEST(backward_naive_vs_flash)
{
    char what[200], msg[3000];
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_naive[_i]);
    th_desc_str(&d, what, sizeof what);
    tb_case a, b;
    ck_assert_int_eq(tb_case_init(&a, &d, 800 + (uint64_t)_i), 0);
    ck_assert_int_eq(tb_case_init(&b, &d, 800 + (uint64_t)_i), 0);
    clflash_status st = tb_run(c, &a, TB_FLASH, 0, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "flash %s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    st = tb_run(c, &b, TB_NAIVE, 0, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "naive %s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(tb_check(&b, msg, sizeof msg) == 0, "naive %s: %s", what, msg);
    ck_assert_msg(tb_compare_runs(&a, &b, 0, msg, sizeof msg) == 0, "flash vs naive %s: %s", what, msg);
    tb_case_free(&a);
    tb_case_free(&b);
    clflash_context_free(c);
}
END_TEST

/* The same inputs twice give the same bits (no atomics, fixed summation order): GQA so that dK and
 * dV sum over a group, causal, and several blocks per axis. Also through the naive path. */
START_TEST(backward_bitwise_repeat)
{
    static const shape_t s[] = {{2, 6, 2, 131, 97, 64, F32, CAUSAL, 0.0f}, {1, 4, 1, 67, 131, 64, F16, 0, 0.0f}};
    char what[200], msg[3000];
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&s[_i]);
    th_desc_str(&d, what, sizeof what);
    for (int algo = 0; algo < 2; algo++) {
        tb_case a, b;
        ck_assert_int_eq(tb_case_init(&a, &d, 900), 0);
        ck_assert_int_eq(tb_case_init(&b, &d, 900), 0);
        ck_assert_int_eq(tb_run(c, &a, algo ? TB_NAIVE : TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
        ck_assert_int_eq(tb_run(c, &b, algo ? TB_NAIVE : TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
        ck_assert_msg(tb_compare_runs(&a, &b, 1, msg, sizeof msg) == 0, "%s %s, two runs: %s",
                      algo ? "naive" : "flash", what, msg);
        ck_assert_msg(tb_check(&a, msg, sizeof msg) == 0, "%s %s: %s", algo ? "naive" : "flash", what, msg);
        tb_case_free(&a);
        tb_case_free(&b);
    }
    clflash_context_free(c);
}
END_TEST

/* A caller's queue; the call waits for a user event it cannot see complete, returns without
 * waiting, and its done event completes only after the user event is set. */
START_TEST(backward_events_and_own_queue)
{
    const shape_t s = {2, 4, 2, 37, 53, 64, F32, CAUSAL, 0.0f};
    const clflash_attention_desc d = shape_desc(&s);
    clflash_context *c = test_context(NULL);
    char msg[3000];
    tb_case t;
    ck_assert_int_eq(tb_case_init(&t, &d, 1000), 0);
    cl_int err;
    cl_context ctx = clflash_context_cl(c);
    cl_command_queue q = clCreateCommandQueue(ctx, clflash_context_device(c), 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const size_t es = t.esize;
    void *host[9] = {t.q, t.k, t.v, t.o, t.d_o, t.lse, t.dq, t.dk, t.dv};
    const size_t bytes[9] = {t.nq * es, t.nk * es, t.nv * es, t.no * es, t.no * es, t.nrows * 4, t.nq * es,
                             t.nk * es, t.nv * es};
    cl_mem m[9];
    for (int i = 0; i < 9; i++) {
        m[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes[i], host[i], &err);
        ck_assert_int_eq(err, CL_SUCCESS);
    }
    cl_event gate = clCreateUserEvent(ctx, &err), done = NULL;
    ck_assert_int_eq(err, CL_SUCCESS);
    const clflash_status st =
        clflash_backward(c, &d, q, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], 1, &gate, &done);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    ck_assert_ptr_nonnull(done);
    clFlush(q);
    cl_int state = CL_COMPLETE;
    ck_assert_int_eq(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL), CL_SUCCESS);
    ck_assert_msg(state != CL_COMPLETE, "the done event completed before the event it waits for");
    ck_assert_int_eq(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    clReleaseEvent(gate);
    for (int i = 6; i < 9; i++)
        ck_assert_int_eq(clEnqueueReadBuffer(q, m[i], CL_TRUE, 0, bytes[i], host[i], 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(tb_check(&t, msg, sizeof msg) == 0, "own queue: %s", msg);
    for (int i = 0; i < 9; i++)
        clReleaseMemObject(m[i]);
    clReleaseCommandQueue(q);
    tb_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- finite differences ------------------------------------------------------------------------------
 * L = sum over O of O * W for a fixed random W (W is the case's dO, so dL/dO = W). Each input element
 * is moved by +-h in float and L recomputed by ref_attention (fp64, shared with the forward tests);
 * (L+ - L-) / (x+ - x-) must match the reference gradient (which validates the reference itself) and
 * the device's f32 gradient. With h = 2^-10 the central difference is off by ~h^2 |L'''| / 6 ~ 1e-6. */

static double loss(const tb_case *t, const float *q, const float *k, const float *v, double *o_dense)
{
    const clflash_attention_desc *d = &t->d;
    const ref_strides os = ref_resolve_layout(&d->o, d->heads_q, d->seq_q, d->head_dim);
    const ref_extras x = tb_extras(t);
    ref_attention_ex(d, q, k, v, &x, o_dense, NULL);
    double l = 0.0;
    size_t at = 0;
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t c = 0; c < d->head_dim; c++)
                    l += o_dense[at++] * (double)t->dof[ref_index(&os, b, h, i, c)];
    return l;
}

/* Runs case t through the flash backward and compares, for every input element (and with a bias
 * every finite bias element, through bias_grad), the reference's and the device's gradient with the
 * central difference of the loss. */
static void fd_check(clflash_context *c, tb_case *t, const char *what)
{
    const double h = 1.0 / 1024.0;
    const ref_tol fd_tol = {2e-5, 1e-4};   /* the reference against the central difference */
    const ref_tol dev_tol = {5e-5, 5e-4};  /* the device's f32 gradient against it */
    const clflash_attention_desc d = t->d;
    t->bias_grad = t->bias != NULL;
    const clflash_status st = tb_run(c, t, TB_FLASH, 0, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    double *o_dense = malloc(sizeof(double) * t->nrows * d.head_dim);
    ck_assert_ptr_nonnull(o_dense);

    const struct {
        const char *name;
        float *x;
        const void *got;
        const clflash_layout *l;
        uint32_t heads, seq;
        const double *ref;
    } in[3] = {{"Q", t->qf, t->dq, &d.q, d.heads_q, d.seq_q, t->ref_dq},
               {"K", t->kf, t->dk, &d.k, t->heads_kv, d.seq_k, t->ref_dk},
               {"V", t->vf, t->dv, &d.v, t->heads_kv, d.seq_k, t->ref_dv}};
    int checked = 0;
    for (int w = 0; w < 3; w++) {
        const ref_strides s = ref_resolve_layout(in[w].l, in[w].heads, in[w].seq, d.head_dim);
        size_t at = 0;
        for (uint32_t b = 0; b < d.batch; b++)
            for (uint32_t hh = 0; hh < in[w].heads; hh++)
                for (uint32_t i = 0; i < in[w].seq; i++)
                    for (uint32_t col = 0; col < d.head_dim; col++, at++) {
                        const uint64_t idx = ref_index(&s, b, hh, i, col);
                        const float x0 = in[w].x[idx], xp = (float)(x0 + h), xm = (float)(x0 - h);
                        in[w].x[idx] = xp;
                        const double lp = loss(t, t->qf, t->kf, t->vf, o_dense);
                        in[w].x[idx] = xm;
                        const double lm = loss(t, t->qf, t->kf, t->vf, o_dense);
                        in[w].x[idx] = x0;
                        const double fd = (lp - lm) / ((double)xp - (double)xm);
                        const double ref = in[w].ref[at], dev = tb_load(t, in[w].got, idx);
                        ck_assert_msg(ref_close(ref, fd, fd_tol),
                                      "%s: d%s[%u][%u][%u][%u]: reference %.9g, finite difference %.9g", what,
                                      in[w].name, b, hh, i, col, ref, fd);
                        ck_assert_msg(ref_close(dev, fd, dev_tol),
                                      "%s: d%s[%u][%u][%u][%u]: device %.9g, finite difference %.9g", what, in[w].name,
                                      b, hh, i, col, dev, fd);
                        checked++;
                    }
    }
    if (t->bias) {
        /* each bias element once (a broadcast one stands for many pairs) */
        const ref_strides bs = ref_resolve_bias_layout(&d);
        unsigned char *done = calloc(t->bias_n, 1);
        ck_assert_ptr_nonnull(done);
        for (uint32_t b = 0; b < d.batch; b++)
            for (uint32_t hh = 0; hh < d.heads_q; hh++)
                for (uint32_t i = 0; i < d.seq_q; i++)
                    for (uint32_t j = 0; j < d.seq_k; j++) {
                        const uint64_t idx = ref_index(&bs, b, hh, i, j);
                        if (done[idx] || isinf(t->bias[idx]))
                            continue; /* -inf: the loss does not depend on it */
                        done[idx] = 1;
                        const float x0 = t->bias[idx], xp = (float)(x0 + h), xm = (float)(x0 - h);
                        t->bias[idx] = xp;
                        const double lp = loss(t, t->qf, t->kf, t->vf, o_dense);
                        t->bias[idx] = xm;
                        const double lm = loss(t, t->qf, t->kf, t->vf, o_dense);
                        t->bias[idx] = x0;
                        const double fd = (lp - lm) / ((double)xp - (double)xm);
                        ck_assert_msg(ref_close(t->ref_dbias[idx], fd, fd_tol),
                                      "%s: dBias[%llu]: reference %.9g, finite difference %.9g", what,
                                      (unsigned long long)idx, t->ref_dbias[idx], fd);
                        ck_assert_msg(ref_close(t->dbias[idx], fd, dev_tol),
                                      "%s: dBias[%llu]: device %.9g, finite difference %.9g", what,
                                      (unsigned long long)idx, (double)t->dbias[idx], fd);
                        checked++;
                    }
        free(done);
    }
    ck_assert_int_gt(checked, 0);
    free(o_dense);
}

static const shape_t shapes_fd[] = {
    {1, 2, 1, 5, 7, 3, F32, 0, 0.0f},
    {1, 2, 1, 6, 4, 3, F32, CAUSAL, 0.0f}, /* two rows see no key */
    {2, 1, 0, 3, 5, 4, F32, CAUSAL, 1.0f},
};

START_TEST(backward_finite_differences)
{
    char what[200];
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = shape_desc(&shapes_fd[_i]);
    th_desc_str(&d, what, sizeof what);
    tb_case t;
    ck_assert_int_eq(tb_case_init(&t, &d, 1100 + (uint64_t)_i), 0);
    fd_check(c, &t, what);
    tb_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* The reference's gradient is not trivially zero where it matters: a wrong D (say D = 0) would
 * change dQ and dK by far more than the tolerance. Checked once so that a passing finite-difference
 * test cannot come from a loss that ignores its inputs. */
START_TEST(backward_reference_sensitivity)
{
    const shape_t s = {1, 1, 0, 5, 7, 3, F32, 0, 0.0f};
    const clflash_attention_desc d = shape_desc(&s);
    tb_case t;
    ck_assert_int_eq(tb_case_init(&t, &d, 1200), 0);
    double mq = 0, mk = 0, mv = 0;
    for (size_t i = 0; i < t.nrows * d.head_dim; i++)
        mq = fmax(mq, fabs(t.ref_dq[i]));
    for (size_t i = 0; i < (size_t)d.seq_k * d.head_dim; i++) {
        mk = fmax(mk, fabs(t.ref_dk[i]));
        mv = fmax(mv, fabs(t.ref_dv[i]));
    }
    ck_assert_msg(mq > 1e-2 && mk > 1e-2 && mv > 1e-2, "gradients too small to test: %g %g %g", mq, mk, mv);
    tb_case_free(&t);
}
END_TEST

/* ---- masks and score transforms ----------------------------------------------------------------------
 * Window, softcap, bias, ALiBi and key lengths, alone and together, through the flash and the naive
 * backward against ref_attention_backward_ex; a finite-difference check of that reference with
 * softcap (the tanh derivative) and with everything at once. */

#define NO_BIAS TB_NO_BIAS
#define BIAS_FULL TB_BIAS_FULL
#define BIAS_BCAST TB_BIAS_BCAST
#define BIAS_KEYS TB_BIAS_KEYS
#define BIAS_DEAD_ROWS TB_BIAS_DEAD_ROWS
#define NO_LENS TB_NO_LENS
#define LENS_RAGGED TB_LENS_RAGGED
#define LENS_ZERO TB_LENS_ZERO
#define WIN CLFLASH_WINDOW
#define ALN CLFLASH_ALIGN_TO_KEY_LENGTH

typedef struct {
    uint32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
    clflash_dtype dtype;
    uint32_t flags, window_left, window_right;
    float scale, softcap;
    tb_bias_kind bias;
    int alibi; /* 1: slopes 0.5, 0.25, ... */
    tb_lens_kind lens;
    uint32_t block;
} feat_t;

/* Builds case t for f (the bias, slopes and lengths as tb_case_init_features makes them), its
 * diagonal moved by `offset` (clflash_attention_desc.diagonal_offset). */
static void feat_init_offset(tb_case *t, const feat_t *f, int32_t offset, uint64_t seed)
{
    clflash_attention_desc d =
        th_desc(f->batch, f->heads_q, f->heads_kv, f->seq_q, f->seq_k, f->head_dim, f->dtype, f->flags);
    d.scale = f->scale;
    d.softcap = f->softcap;
    d.window_left = f->window_left;
    d.window_right = f->window_right;
    d.block = f->block;
    d.diagonal_offset = offset;
    ck_assert_msg(tb_case_init_features(t, &d, f->bias, f->alibi, f->lens, seed) == 0, "out of host memory");
}

static void feat_init(tb_case *t, const feat_t *f, uint64_t seed)
{
    feat_init_offset(t, f, 0, seed);
}

/* A description of f for failure messages. */
static void feat_str(const feat_t *f, const tb_case *t, char *buf, size_t len)
{
    static const char *const biases[] = {"", " bias=full", " bias=bcast", " bias=keys", " bias=dead-rows"};
    static const char *const lens[] = {"", " lens=ragged", " lens=0"};
    char what[200];
    th_desc_str(&t->d, what, sizeof what);
    snprintf(buf, len, "%s window=%u,%u softcap=%g%s%s%s diagonal_offset=%d", what, f->window_left,
             f->window_right, (double)f->softcap, biases[f->bias], f->alibi ? " alibi" : "", lens[f->lens],
             (int)t->d.diagonal_offset);
}

/* Runs f, its diagonal moved by offset, through one path and checks it against the reference. */
static void run_feat_offset(clflash_context *c, const feat_t *f, int32_t offset, tb_algo algo, int device_forward,
                            uint64_t seed)
{
    char what[400], msg[3000];
    tb_case t;
    feat_init_offset(&t, f, offset, seed);
    feat_str(f, &t, what, sizeof what);
    t.bias_grad = algo == TB_FLASH && t.bias != NULL; /* dBias too (the naive backward refuses it) */
    const clflash_status st = tb_run(c, &t, algo, device_forward, NULL);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s%s: %s (%s)", algo == TB_NAIVE ? "naive " : "", what,
                  clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(tb_check(&t, msg, sizeof msg) == 0, "%s%s%s: %s", algo == TB_NAIVE ? "naive " : "", what,
                  device_forward ? " (O and lse from clflash_forward)" : "", msg);
    tb_case_free(&t);
}

static void run_feat(clflash_context *c, const feat_t *f, tb_algo algo, int device_forward, uint64_t seed)
{
    run_feat_offset(c, f, 0, algo, device_forward, seed);
}

static const feat_t feats[] = {
    /* sliding window: seq_q =, >, < seq_k; with causal; size 1; rows that see nothing */
    {1, 2, 0, 37, 37, 16, F32, WIN, 5, 3, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 0},
    {1, 2, 1, 61, 29, 16, F16, WIN, 4, 0, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 0},
    {2, 2, 0, 29, 61, 16, BF16, WIN | CAUSAL, 7, 11, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 0},
    {1, 1, 0, 1, 1, 16, F32, WIN | CAUSAL, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 0},
    {1, 1, 0, 97, 13, 16, F32, WIN | CAUSAL, 3, 0, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 0},
    /* softcap: large scales so that the cap bends the scores */
    {1, 2, 0, 45, 45, 32, F32, 0, 0, 0, 2.0f, 5.0f, NO_BIAS, 0, NO_LENS, 0},
    {1, 2, 1, 37, 53, 32, F16, CAUSAL, 0, 0, 1.5f, 3.0f, NO_BIAS, 0, NO_LENS, 0},
    {2, 2, 0, 53, 37, 16, BF16, 0, 0, 0, 1.0f, 2.5f, NO_BIAS, 0, NO_LENS, 0},
    {1, 1, 0, 1, 7, 16, F32, 0, 0, 0, 2.0f, 1.0f, NO_BIAS, 0, NO_LENS, 0},
    /* f32 over whole key tiles, so that the CPU path's transforms on 8 pairs at a time (common.cl's
     * tanh8) are tested in the dtype that resolves them: planned blocks, then blocks of 8 */
    {1, 2, 1, 67, 131, 32, F32, CAUSAL, 0, 0, 2.0f, 5.0f, NO_BIAS, 0, NO_LENS, 0},
    {1, 2, 0, 29, 43, 16, F32, 0, 0, 0, 2.0f, 3.0f, NO_BIAS, 0, NO_LENS, 8},
    /* bias: full, broadcast, per key, fully masked rows, a single key */
    {2, 2, 0, 33, 47, 16, F32, 0, 0, 0, 0.0f, 0.0f, BIAS_FULL, 0, NO_LENS, 0},
    {3, 4, 2, 21, 30, 16, F16, 0, 0, 0, 0.0f, 0.0f, BIAS_BCAST, 0, NO_LENS, 0},
    {2, 4, 2, 21, 30, 16, BF16, CAUSAL, 0, 0, 0.0f, 0.0f, BIAS_KEYS, 0, NO_LENS, 0},
    {1, 2, 0, 9, 17, 16, F32, 0, 0, 0, 0.0f, 0.0f, BIAS_DEAD_ROWS, 0, NO_LENS, 0},
    {1, 1, 0, 67, 1, 16, F32, 0, 0, 0, 0.0f, 0.0f, BIAS_FULL, 0, NO_LENS, 0},
    /* bias per key over several query and key tiles (the CPU path's dBias sums its rows across tiles) */
    {1, 2, 1, 131, 70, 16, F32, CAUSAL, 0, 0, 0.0f, 0.0f, BIAS_KEYS, 0, NO_LENS, 0},
    /* a bias at head_dim 256 (the CPU path's dBias stages 2 x 64 KiB of K and V a key tile) */
    {1, 2, 1, 70, 67, 256, F32, WIN, 30, 9, 0.0f, 0.0f, BIAS_BCAST, 0, NO_LENS, 0},
    /* ALiBi: GQA, MQA */
    {1, 4, 2, 50, 50, 16, F32, 0, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, NO_LENS, 0},
    {1, 4, 1, 37, 59, 16, F16, CAUSAL, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, NO_LENS, 0},
    {1, 2, 0, 59, 37, 16, BF16, 0, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, NO_LENS, 0},
    /* key padding: ragged (one length 0), decode, causal; every length 0 */
    {4, 2, 1, 23, 37, 16, F32, 0, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, LENS_RAGGED, 0},
    {4, 2, 1, 1, 37, 16, F16, 0, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, LENS_RAGGED, 0},
    {4, 2, 0, 41, 23, 16, BF16, CAUSAL, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, LENS_RAGGED, 0},
    {2, 1, 0, 13, 17, 16, F32, 0, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, LENS_ZERO, 0},
    /* everything at once */
    {2, 4, 2, 67, 70, 32, BF16, CAUSAL | WIN, 20, 3, 0.0f, 8.0f, BIAS_BCAST, 1, LENS_RAGGED, 0},
    {2, 4, 2, 43, 31, 16, F32, WIN, 6, 9, 1.0f, 4.0f, BIAS_FULL, 1, LENS_RAGGED, 0},
    {2, 2, 1, 31, 43, 16, F16, CAUSAL | WIN, 9, 2, 1.0f, 3.0f, BIAS_DEAD_ROWS, 1, LENS_RAGGED, 0},
    /* forced small blocks: several key and query blocks per work-group, so the skipped ranges of
     * both kinds of work-group start and end inside the sequences */
    {2, 2, 1, 53, 61, 16, F32, CAUSAL | WIN, 9, 4, 0.0f, 0.0f, NO_BIAS, 0, LENS_RAGGED, 8},
    {2, 2, 1, 61, 53, 16, F16, WIN, 5, 13, 1.0f, 3.0f, BIAS_BCAST, 1, LENS_RAGGED, 16},
    {1, 2, 1, 40, 40, 16, BF16, WIN, 0, 20, 0.0f, 0.0f, BIAS_KEYS, 0, NO_LENS, 8},
    /* block boundaries: the first row of query block m sees keys from 8m - 8 (the first key of a key
     * block), the last row up to 8m + 8 (the first key of the next key block) */
    {1, 2, 1, 40, 40, 16, F32, WIN, 8, 1, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 8},
    /* diagonals at each entry's key length (a ragged KV cache, lengths (seq_k + 1) / 2, 0, past
     * seq_k, 1): a multi-token step, causal with a window and ALiBi, every transform with small
     * blocks, decoding */
    {4, 2, 1, 5, 37, 16, F32, CAUSAL | ALN, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, LENS_RAGGED, 0},
    {4, 4, 2, 7, 41, 16, F16, CAUSAL | WIN | ALN, 6, 0, 0.0f, 0.0f, NO_BIAS, 1, LENS_RAGGED, 0},
    {3, 2, 0, 19, 53, 16, BF16, WIN | ALN, 4, 9, 1.0f, 3.0f, BIAS_FULL, 1, LENS_RAGGED, 8},
    {4, 2, 1, 1, 61, 16, F32, CAUSAL | ALN, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, LENS_RAGGED, 0},
};

/* _i: row of feats; both paths against the reference. */
START_TEST(backward_features)
{
    clflash_context *c = test_context(NULL);
    run_feat(c, &feats[_i], TB_FLASH, 0, 2000 + (uint64_t)_i);
    run_feat(c, &feats[_i], TB_NAIVE, 0, 2000 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* diagonal_offset (a chunk of a longer sequence, top-left alignment): rows that see no key, rows
 * that see every key, windows and ALiBi at moved diagonals, key lengths aligned or not, small
 * blocks; the planned path and the GPU path (portable.cpu_path=0) and the naive one. */
static const struct {
    feat_t f;
    int32_t offset;
} offset_feats[] = {
    {{2, 2, 1, 37, 53, 16, F32, CAUSAL, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, NO_LENS, 0}, -40},
    {{1, 2, 0, 67, 131, 32, F32, CAUSAL, 0, 0, 2.0f, 5.0f, NO_BIAS, 0, NO_LENS, 0}, 67 - 131},
    {{1, 4, 2, 40, 40, 16, F16, CAUSAL | WIN, 9, 3, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 8}, 45},
    {{2, 2, 1, 23, 71, 16, BF16, WIN, 5, 7, 1.0f, 3.0f, BIAS_FULL, 1, NO_LENS, 0}, -30},
    {{1, 2, 0, 31, 31, 16, F32, CAUSAL, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, NO_LENS, 8}, 31},
    {{1, 2, 0, 31, 31, 16, F32, CAUSAL, 0, 0, 0.0f, 0.0f, NO_BIAS, 0, NO_LENS, 0}, -31},
    {{4, 2, 1, 5, 37, 16, F32, CAUSAL | ALN, 0, 0, 0.0f, 0.0f, NO_BIAS, 1, LENS_RAGGED, 0}, -2},
    {{4, 2, 1, 19, 53, 16, F16, CAUSAL | WIN, 6, 2, 0.0f, 0.0f, BIAS_BCAST, 0, LENS_RAGGED, 8}, 11},
};

/* _i: row of offset_feats * 2 + (0: the planned path, 1: the GPU path); both against the
 * reference, and the naive backward with the planned context. */
START_TEST(backward_diagonal_offsets)
{
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.tuning = "portable.cpu_path=0";
    clflash_context *c = test_context(_i % 2 ? &opt : NULL);
    const int k = _i / 2;
    run_feat_offset(c, &offset_feats[k].f, offset_feats[k].offset, TB_FLASH, 0, 2300 + (uint64_t)k);
    if (_i % 2 == 0)
        run_feat_offset(c, &offset_feats[k].f, offset_feats[k].offset, TB_NAIVE, 0, 2300 + (uint64_t)k);
    clflash_context_free(c);
}
END_TEST

/* Everything at once with the GPU's lanes per row (4), with O and lse from clflash_forward, and the
 * same bits on a second run of either path. */
START_TEST(backward_features_pipeline)
{
    const feat_t *f = &feats[22]; /* everything at once, f32 */
    char what[400], msg[3000];
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.threads_per_row = 4;
    clflash_context *c = test_context(_i == 0 ? &opt : NULL);
    if (_i == 0) {
        run_feat(c, f, TB_FLASH, 0, 2100);
    } else if (_i == 1) {
        run_feat(c, f, TB_FLASH, 1, 2101);
    } else {
        for (int algo = 0; algo < 2; algo++) {
            tb_case a, b;
            feat_init(&a, f, 2102);
            feat_init(&b, f, 2102);
            feat_str(f, &a, what, sizeof what);
            ck_assert_int_eq(tb_run(c, &a, algo ? TB_NAIVE : TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
            ck_assert_int_eq(tb_run(c, &b, algo ? TB_NAIVE : TB_FLASH, 0, NULL), CLFLASH_SUCCESS);
            ck_assert_msg(tb_compare_runs(&a, &b, 1, msg, sizeof msg) == 0, "%s %s, two runs: %s",
                          algo ? "naive" : "flash", what, msg);
            tb_case_free(&a);
            tb_case_free(&b);
        }
    }
    clflash_context_free(c);
}
END_TEST

/* The reference's softcap derivative and masks against finite differences of the loss (and the
 * device's f32 gradient against them too). */
static const feat_t feats_fd[] = {
    {1, 2, 1, 5, 7, 3, F32, 0, 0, 0, 2.0f, 1.5f, NO_BIAS, 0, NO_LENS, 0},
    {1, 1, 0, 4, 6, 3, F32, CAUSAL, 0, 0, 3.0f, 0.75f, NO_BIAS, 0, NO_LENS, 0},
    {2, 2, 1, 6, 5, 4, F32, CAUSAL | WIN, 2, 1, 1.5f, 2.0f, BIAS_FULL, 1, LENS_RAGGED, 0},
    /* dBias summed over broadcast dimensions: batch and heads; heads and rows */
    {2, 2, 1, 5, 6, 3, F32, CAUSAL, 0, 0, 1.5f, 2.0f, BIAS_BCAST, 0, NO_LENS, 0},
    {2, 2, 1, 4, 7, 3, F32, 0, 0, 0, 1.0f, 0.0f, BIAS_KEYS, 1, LENS_RAGGED, 0},
};

START_TEST(backward_features_finite_differences)
{
    char what[400];
    clflash_context *c = test_context(NULL);
    tb_case t;
    feat_init(&t, &feats_fd[_i], 2200 + (uint64_t)_i);
    feat_str(&feats_fd[_i], &t, what, sizeof what);
    fd_check(c, &t, what);
    tb_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* The softcap case is one a wrong derivative fails: with f' = 1 (no softcap term) the reference
 * gradients move by far more than the tolerance, so the finite-difference check above can tell. */
START_TEST(backward_softcap_sensitivity)
{
    tb_case t;
    feat_init(&t, &feats_fd[0], 2200);
    const clflash_attention_desc d = t.d;
    double *dq = malloc(sizeof(double) * t.nrows * d.head_dim);
    double *dk = malloc(sizeof(double) * d.seq_k * t.heads_kv * d.head_dim);
    double *dv = malloc(sizeof(double) * d.seq_k * t.heads_kv * d.head_dim);
    ck_assert(dq && dk && dv);
    /* a huge cap is the identity up to (s / cap)^2: the gradient without the tanh */
    clflash_attention_desc flat = d;
    flat.softcap = 1e6f;
    const ref_extras x = tb_extras(&t);
    ref_attention_backward_ex(&flat, t.qf, t.kf, t.vf, t.dof, &x, dq, dk, dv, NULL, NULL, NULL);
    double diff = 0.0;
    for (size_t i = 0; i < t.nrows * d.head_dim; i++)
        diff = fmax(diff, fabs(dq[i] - t.ref_dq[i]));
    ck_assert_msg(diff > 1e-2, "softcap changes dQ by only %g", diff);
    free(dq);
    free(dk);
    free(dv);
    tb_case_free(&t);
}
END_TEST

/* ---- the planner and the tile rule --------------------------------------------------------------------- */

START_TEST(backward_tile_rule)
{
    ck_assert_uint_eq(clflash_backward_tile_bytes(64, 128, 2), 81920);
    ck_assert_uint_eq(clflash_backward_tile_bytes(32, 128, 2), 36864);
    ck_assert_uint_eq(clflash_backward_tile_bytes(1, 1, 4), 24);
    ck_assert_uint_eq(clflash_backward_tile_bytes(0, 128, 2), 0);
    ck_assert_uint_eq(clflash_backward_tile_bytes(UINT64_MAX, 2, 2), UINT64_MAX);
    ck_assert_uint_eq(clflash_backward_tile_bytes(1ull << 32, 1ull << 32, 1), UINT64_MAX);
    ck_assert_uint_eq(clflash_backward_max_block(49152, 128, 2), 32);
    ck_assert_uint_eq(clflash_backward_max_block(196608, 128, 2), 128);
    ck_assert_uint_eq(clflash_backward_max_block(49152, 64, 2), 64);
    ck_assert_uint_eq(clflash_backward_max_block(23, 1, 4), 0);
    ck_assert_uint_eq(clflash_backward_max_block(24, 1, 4), 1);
    ck_assert_uint_eq(clflash_backward_max_block(1000, 0, 4), 0);
    ck_assert_uint_eq(clflash_backward_max_block(UINT64_MAX, 1, 1), 3037000496ull); /* 2B^2 + 4B <= 2^64 - 1 */
    /* every result fits and the next multiple of 16 does not */
    for (uint64_t mem = 1000; mem < 1000000; mem = mem * 3 / 2)
        for (uint64_t dd = 1; dd <= 256; dd *= 4) {
            const uint64_t b = clflash_backward_max_block(mem, dd, 2);
            if (b)
                ck_assert_uint_le(clflash_backward_tile_bytes(b, dd, 2), mem);
            if (b >= 16)
                ck_assert_uint_gt(clflash_backward_tile_bytes(b + 16, dd, 2), mem);
        }
}
END_TEST

static const shape_t shapes_plan[] = {
    {1, 1, 0, 131, 97, 64, F32, 0, 0.0f},
    {2, 4, 2, 37, 53, 128, F16, CAUSAL, 0.0f},
    {1, 1, 0, 1, 1, 7, F32, 0, 0.0f},
};

/* The plan's fields follow the backward rule, a smaller budget gives a smaller B whose kernels fit
 * it (and still compute the right gradients), a forced B is used exactly. */
START_TEST(backward_plan)
{
    char what[200];
    const clflash_attention_desc d = shape_desc(&shapes_plan[_i]);
    th_desc_str(&d, what, sizeof what);
    const uint64_t s = clflash_dtype_size(d.dtype);
    for (int budgeted = 0; budgeted < 2; budgeted++) {
        clflash_context_options opt = {.struct_size = sizeof opt};
        opt.local_mem_budget = budgeted ? 24576 : 0;
        clflash_context *c = test_context(&opt);
        clflash_plan p;
        memset(&p, 0x5a, sizeof p);
        p.struct_size = sizeof p;
        clflash_status st = clflash_plan_backward(c, &d, &p);
        ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
        if (budgeted)
            ck_assert_uint_eq(p.local_mem_budget, 24576);
        ck_assert_msg(p.block >= 1 && p.block <= clflash_backward_max_block(p.local_mem_budget, d.head_dim, s),
                      "%s: B = %u", what, p.block);
        ck_assert_uint_eq(p.tile_bytes, clflash_backward_tile_bytes(p.block, d.head_dim, s));
        ck_assert_msg(p.kernel_local_bytes <= p.local_mem_budget, "%s: kernels need %llu of %llu", what,
                      (unsigned long long)p.kernel_local_bytes, (unsigned long long)p.local_mem_budget);
        ck_assert_uint_eq(p.tiles_q, (d.seq_q + p.block - 1) / p.block);
        ck_assert_uint_eq(p.tiles_k, (d.seq_k + p.block - 1) / p.block);
        ck_assert_uint_eq(p.score_matrix_bytes, (uint64_t)d.seq_q * d.seq_k * s);
        if (strcmp(p.kernel, "nv_mma_backward") == 0) { /* tensor cores: block_q rows in registers */
            ck_assert_uint_eq(p.kv_passes, (d.seq_q + p.block_q - 1) / p.block_q);
            ck_assert_uint_eq(p.work_group_size, 2 * p.block_q);
            ck_assert_uint_eq(p.block % 16, 0);
        } else {
            ck_assert_uint_eq(p.kv_passes, p.tiles_q);
            ck_assert_uint_eq(p.work_group_size, p.block * p.threads_per_row);
            ck_assert_uint_eq(p.block_q, p.block);
            ck_assert_str_eq(p.kernel, "flash_backward_portable");
        }
        if (budgeted && _i == 1)
            run_case(c, &d, TB_FLASH, 0, 1300);

        clflash_attention_desc forced = d;
        forced.block = 16;
        if (clflash_backward_tile_bytes(16, d.head_dim, s) <= p.local_mem_budget) {
            st = clflash_plan_backward(c, &forced, &p);
            ck_assert_msg(st == CLFLASH_SUCCESS || st == CLFLASH_ERROR_TILE_TOO_LARGE, "%s forced 16: %s", what,
                          clflash_status_string(st));
            if (st == CLFLASH_SUCCESS)
                ck_assert_uint_eq(p.block, 16);
        }
        forced.block = 4096;
        ck_assert_int_eq(clflash_plan_backward(c, &forced, &p), CLFLASH_ERROR_TILE_TOO_LARGE);
        ck_assert(strlen(clflash_last_error_detail()) > 0);
        clflash_context_free(c);
    }
}
END_TEST

/* ---- errors: the right status, a detail, nothing written ----------------------------------------------- */

typedef struct {
    tb_case t;
    cl_mem q, k, v, o, d_o, lse, dq, dk, dv;
} err_env;

static cl_mem copy_buffer(clflash_context *c, void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

static void env_make(clflash_context *c, const clflash_attention_desc *d, err_env *e)
{
    ck_assert_int_eq(tb_case_init(&e->t, d, 1400), 0);
    const size_t es = e->t.esize;
    e->q = copy_buffer(c, e->t.q, e->t.nq * es);
    e->k = copy_buffer(c, e->t.k, e->t.nk * es);
    e->v = copy_buffer(c, e->t.v, e->t.nv * es);
    e->o = copy_buffer(c, e->t.o, e->t.no * es);
    e->d_o = copy_buffer(c, e->t.d_o, e->t.no * es);
    e->lse = copy_buffer(c, e->t.lse, e->t.nrows * 4);
    e->dq = copy_buffer(c, e->t.dq, e->t.nq * es);
    e->dk = copy_buffer(c, e->t.dk, e->t.nk * es);
    e->dv = copy_buffer(c, e->t.dv, e->t.nv * es);
}

static void env_free(err_env *e)
{
    cl_mem all[9] = {e->q, e->k, e->v, e->o, e->d_o, e->lse, e->dq, e->dk, e->dv};
    for (int i = 0; i < 9; i++)
        clReleaseMemObject(all[i]);
    tb_case_free(&e->t);
}

/* Reads the outputs back (whole buffers) and checks that they still hold the sentinel. */
static void expect_untouched(clflash_context *c, err_env *e, const char *name)
{
    cl_command_queue q = clflash_context_queue(c);
    const size_t es = e->t.esize;
    ck_assert_int_eq(clFinish(q), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(q, e->dq, CL_TRUE, 0, e->t.nq * es, e->t.dq, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(q, e->dk, CL_TRUE, 0, e->t.nk * es, e->t.dk, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(q, e->dv, CL_TRUE, 0, e->t.nv * es, e->t.dv, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(tb_outputs_untouched(&e->t), "%s: an output was written", name);
}

typedef clflash_status (*backward_fn)(clflash_context *, const clflash_attention_desc *, cl_command_queue, cl_mem,
                                      cl_mem, cl_mem, cl_mem, cl_mem, cl_mem, cl_mem, cl_mem, cl_mem, cl_uint,
                                      const cl_event *, cl_event *);

static void expect(const char *fn, const char *name, clflash_status got, clflash_status want)
{
    ck_assert_msg(got == want, "%s, %s: got %d %s (%s), want %d %s", fn, name, got, clflash_status_string(got),
                  clflash_last_error_detail(), want, clflash_status_string(want));
    ck_assert_msg(strlen(clflash_last_error_detail()) > 0, "%s, %s: no detail", fn, name);
}

/* Case _i of the argument errors, through both entry points. */
START_TEST(backward_bad_arguments)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc base = th_desc(2, 4, 2, 13, 17, 16, F32, CAUSAL);
    err_env e;
    env_make(c, &base, &e);
    const backward_fn fns[2] = {clflash_backward, clflash_backward_naive};
    const char *fn_names[2] = {"clflash_backward", "clflash_backward_naive"};
    for (int f = 0; f < 2; f++) {
        clflash_attention_desc d = base;
        cl_mem q = e.q, k = e.k, v = e.v, o = e.o, d_o = e.d_o, lse = e.lse, dq = e.dq, dk = e.dk, dv = e.dv;
        cl_mem small = NULL, bias = NULL;
        const char *name = "";
        clflash_status want = CLFLASH_ERROR_INVALID_ARGUMENT;
        /* a full [batch][heads][seq_q][seq_k] bias for the bias_grad cases */
        const size_t bias_bytes = (size_t)base.batch * base.heads_q * base.seq_q * base.seq_k * 4;
        if (_i >= 25)
            d.bias = bias = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, bias_bytes, NULL, NULL);
        switch (_i) {
        case 0: name = "NULL lse"; lse = NULL; break;
        case 1: name = "NULL d_o"; d_o = NULL; break;
        case 2: name = "NULL dq"; dq = NULL; break;
        case 3: name = "NULL dk"; dk = NULL; break;
        case 4: name = "NULL dv"; dv = NULL; break;
        case 5: name = "NULL context"; break;
        case 6:
            name = "dv one element short";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, (e.t.nv - 1) * e.t.esize, NULL, NULL);
            dv = small;
            want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
            break;
        case 7:
            name = "lse one row short";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, (e.t.nrows - 1) * 4, NULL, NULL);
            lse = small;
            want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
            break;
        case 8:
            name = "d_o one element short";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, (e.t.no - 1) * e.t.esize, NULL, NULL);
            d_o = small;
            want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
            break;
        case 9: name = "dq is q"; dq = q; want = CLFLASH_ERROR_INVALID_LAYOUT; break;
        case 10: name = "dk is v"; dk = v; want = CLFLASH_ERROR_INVALID_LAYOUT; break;
        case 11: name = "dv is d_o"; dv = d_o; want = CLFLASH_ERROR_INVALID_LAYOUT; break;
        case 12: name = "dk and dv the same"; dv = dk; want = CLFLASH_ERROR_INVALID_LAYOUT; break;
        case 13: name = "lse is dq"; lse = dq; break;
        case 14:
            name = "dq rows overlap (q.seq_stride < head_dim)";
            d.q.seq_stride = 8;
            want = CLFLASH_ERROR_INVALID_LAYOUT;
            break;
        case 15: name = "i8"; d.dtype = CLFLASH_I8; want = CLFLASH_ERROR_UNSUPPORTED; break;
        case 16: /* the descriptor's inputs are read while the outputs are written */
            name = "bias is dk";
            d.bias = e.dk;
            d.bias_broadcast = CLFLASH_BROADCAST_BATCH | CLFLASH_BROADCAST_HEADS | CLFLASH_BROADCAST_ROWS;
            break;
        case 17: name = "key_lengths is dq"; d.key_lengths = e.dq; break;
        case 18: name = "alibi_slopes is dv"; d.alibi_slopes = e.dv; break;
        case 19:
            name = "alibi_slopes one head short";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, (base.heads_q - 1) * 4, NULL, NULL);
            d.alibi_slopes = small;
            want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
            break;
        case 20:
            name = "key_lengths one entry short";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, (base.batch - 1) * 4, NULL, NULL);
            d.key_lengths = small;
            want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
            break;
        case 21: name = "forced block 4096"; d.block = 4096; want = CLFLASH_ERROR_TILE_TOO_LARGE; break;
        case 22: name = "num_wait 1 without a list"; want = CLFLASH_ERROR_INVALID_ARGUMENT; break;
        case 23: name = "out_dtype f16 with f32 input"; d.out_dtype = CLFLASH_F16; want = CLFLASH_ERROR_INVALID_DTYPE; break;
        case 24:
            name = "bias_grad without a bias";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, 64, NULL, NULL);
            d.bias_grad = small;
            break;
        case 25: name = "bias_grad is dq"; d.bias_grad = e.dq; break;
        case 26: name = "bias_grad is the bias"; d.bias_grad = bias; break;
        case 27:
            name = "bias_grad one element short";
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, bias_bytes - 4, NULL, NULL);
            d.bias_grad = small;
            want = CLFLASH_ERROR_BUFFER_TOO_SMALL;
            break;
        case 28: { /* the naive backward does not compute it: refused, nothing written, dBias included */
            name = "bias_grad through the naive backward";
            const float pattern = 7.0f;
            small = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, bias_bytes, NULL, NULL);
            ck_assert_int_eq(clEnqueueFillBuffer(clflash_context_queue(c), small, &pattern, 4, 0, bias_bytes, 0, NULL,
                                                 NULL),
                             CL_SUCCESS);
            d.bias_grad = small;
            want = CLFLASH_ERROR_UNSUPPORTED;
            break;
        }
        default: break;
        }
        if ((_i == 21 || _i == 28) && f == (_i == 21 ? 1 : 0)) { /* the naive path has no tile; flash takes dBias */
            if (small) clReleaseMemObject(small);
            if (bias) clReleaseMemObject(bias);
            continue;
        }
        cl_event done = NULL;
        const clflash_status st = fns[f](_i == 5 ? NULL : c, &d, NULL, q, k, v, o, d_o, lse, dq, dk, dv,
                                         _i == 22 ? 1 : 0, NULL, &done);
        expect(fn_names[f], name, st, want);
        ck_assert_msg(done == NULL, "%s, %s: *done was set", fn_names[f], name);
        if (_i == 28) {
            float *back = malloc(bias_bytes);
            ck_assert_ptr_nonnull(back);
            ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), small, CL_TRUE, 0, bias_bytes, back, 0, NULL,
                                                 NULL),
                             CL_SUCCESS);
            for (size_t i = 0; i < bias_bytes / 4; i++)
                ck_assert_msg(back[i] == 7.0f, "%s: bias_grad was written", name);
            free(back);
        }
        if (small)
            clReleaseMemObject(small);
        if (bias)
            clReleaseMemObject(bias);
        expect_untouched(c, &e, name);
    }
    if (_i == 15 || _i == 23) { /* the planner refuses them alike */
        clflash_attention_desc d = base;
        clflash_plan plan = {.struct_size = sizeof plan};
        if (_i == 15)
            d.dtype = CLFLASH_I8;
        else
            d.out_dtype = CLFLASH_F16;
        expect("clflash_plan_backward", _i == 15 ? "i8" : "out_dtype f16 with f32 input",
               clflash_plan_backward(c, &d, &plan), _i == 15 ? CLFLASH_ERROR_UNSUPPORTED : CLFLASH_ERROR_INVALID_DTYPE);
    }
    env_free(&e);
    clflash_context_free(c);
}
END_TEST
#define N_BAD_ARGUMENTS 29

/* A head whose fp32 P matrix exceeds the device's largest allocation: the naive path refuses it
 * before allocating anything; the flash path does not need it. d = 1 keeps the inputs small. */
START_TEST(backward_naive_matrix_too_large)
{
    clflash_context *c = test_context(NULL);
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(clflash_context_device(c), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    uint32_t n = 1024;
    while ((uint64_t)n * n * 4 <= max_alloc && n < 1000000)
        n *= 2;
    if ((uint64_t)n * n * 4 <= max_alloc) {
        clflash_context_free(c);
        return; /* a device that could hold it */
    }
    const clflash_attention_desc d = th_desc(1, 1, 0, n, n, 1, F32, 0);
    cl_int err;
    cl_mem m[9];
    for (int i = 0; i < 9; i++) {
        m[i] = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, (size_t)n * 4, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
    }
    const clflash_status st =
        clflash_backward_naive(c, &d, NULL, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], 0, NULL, NULL);
    expect("clflash_backward_naive", "n = 2^k beyond the largest allocation", st, CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE);
    for (int i = 0; i < 9; i++)
        clReleaseMemObject(m[i]);
    clflash_context_free(c);
}
END_TEST

static Suite *backward_suite(void)
{
    Suite *s = suite_create("backward");
    TCase *tr = tcase_create("vs_reference");
    tcase_set_timeout(tr, TEST_TIMEOUT_S);
    tcase_add_loop_test(tr, backward_basic, 0, N_OF(shapes_basic));
    tcase_add_loop_test(tr, backward_causal, 0, N_OF(shapes_causal));
    tcase_add_loop_test(tr, backward_head_dims, 0, N_OF(shapes_head_dims));
    tcase_add_loop_test(tr, backward_lanes, 0, 2);
    tcase_add_loop_test(tr, backward_forced_blocks, 0, 3);
    tcase_add_loop_test(tr, backward_strided, 0, 2 * N_LAYOUT_KINDS);
    tcase_add_loop_test(tr, backward_after_device_forward, 0, 2);
    suite_add_tcase(s, tr);

    TCase *tn = tcase_create("naive_repeat_events");
    tcase_set_timeout(tn, TEST_TIMEOUT_S);
    tcase_add_loop_test(tn, backward_naive_vs_flash, 0, N_OF(shapes_naive));
    tcase_add_loop_test(tn, backward_bitwise_repeat, 0, 2);
    tcase_add_test(tn, backward_events_and_own_queue);
    suite_add_tcase(s, tn);

    TCase *tf = tcase_create("finite_differences");
    tcase_set_timeout(tf, TEST_TIMEOUT_S);
    tcase_add_loop_test(tf, backward_finite_differences, 0, N_OF(shapes_fd));
    tcase_add_test(tf, backward_reference_sensitivity);
    suite_add_tcase(s, tf);

    TCase *tx = tcase_create("features");
    tcase_set_timeout(tx, TEST_TIMEOUT_S);
    tcase_add_loop_test(tx, backward_features, 0, N_OF(feats));
    tcase_add_loop_test(tx, backward_features_pipeline, 0, 3);
    tcase_add_loop_test(tx, backward_diagonal_offsets, 0, 2 * N_OF(offset_feats));
    tcase_add_loop_test(tx, backward_features_finite_differences, 0, N_OF(feats_fd));
    tcase_add_test(tx, backward_softcap_sensitivity);
    suite_add_tcase(s, tx);

    TCase *tp = tcase_create("plan");
    tcase_set_timeout(tp, TEST_TIMEOUT_S);
    tcase_add_test(tp, backward_tile_rule);
    tcase_add_loop_test(tp, backward_plan, 0, N_OF(shapes_plan));
    suite_add_tcase(s, tp);

    TCase *te = tcase_create("errors");
    tcase_set_timeout(te, TEST_TIMEOUT_S);
    tcase_add_loop_test(te, backward_bad_arguments, 0, N_BAD_ARGUMENTS);
    tcase_add_test(te, backward_naive_matrix_too_large);
    suite_add_tcase(s, te);
    return s;
}

int main(void)
{
    return run_suite(backward_suite());
}
