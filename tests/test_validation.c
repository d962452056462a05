/*
 * test_validation.c - every documented error: the right status, a non-empty
 * clflash_last_error_detail(), and nothing written (O and lse are pre-filled with a sentinel and
 * compared bit for bit afterwards), through clflash_plan_attention, clflash_forward_host,
 * clflash_forward, clflash_forward_naive and clflash_backward. Also: buffers one element too small,
 * buffers of exactly the right size, a context whose build options break every build, and
 * clflash_backward's NULL arguments (the backward's own errors are in test_backward.c).
 */
#include "check_common.h"

#include <math.h>

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16

/* The valid descriptor every bad one is derived from. */
static clflash_attention_desc base_desc(void)
{
    return th_desc(2, 4, 2, 13, 17, 16, F32, 0);
}

typedef struct {
    const char *name;
    clflash_status want;
    int is_desc_error; /* the planner must refuse it too */
} bad_case;

/* Applies bad case number i to d. */
static void make_bad(int i, clflash_attention_desc *d)
{
    switch (i) {
    case 0: d->dtype = (clflash_dtype)0; break;
    case 1: d->dtype = (clflash_dtype)99; break;
    case 2: d->batch = 0; break;
    case 3: d->heads_q = 0; break;
    case 4: d->seq_q = 0; break;
    case 5: d->seq_k = 0; break;
    case 6: d->head_dim = 0; break;
    case 7: d->heads_kv = 3; break; /* 3 does not divide 4 */
    case 8: d->heads_kv = 8; break; /* more kv heads than query heads */
    case 9: d->head_dim = 257; break;
    case 10: d->head_dim = 1024; break;
    case 11: d->flags = 1u << 5; break;
    case 12: d->flags = CLFLASH_CAUSAL | (1u << 31); break;
    case 13: d->scale = NAN; break;
    case 14: d->scale = INFINITY; break;
    case 15: d->scale = -INFINITY; break;
    case 16: d->o.seq_stride = d->head_dim - 1; break;     /* O rows overlap */
    case 17: d->o.head_stride = 1; break;                   /* O heads overlap */
    case 18: d->o.batch_stride = 5; break;                  /* O batches overlap */
    case 19: d->q.offset = UINT64_MAX - 10; break;          /* Q's last index overflows */
    case 20: d->o.seq_stride = UINT64_MAX / 4; break;       /* O's last index overflows */
    case 21: d->out_dtype = CLFLASH_F16; break; /* only i8 input may choose O's type */
    case 22: d->window_left = 4; break;         /* a window width without CLFLASH_WINDOW */
    default: break;
    }
}

static const bad_case bad_cases[] = {
    {"dtype 0", CLFLASH_ERROR_INVALID_DTYPE, 1},
    {"dtype 99", CLFLASH_ERROR_INVALID_DTYPE, 1},
    {"batch 0", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"heads_q 0", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"seq_q 0", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"seq_k 0", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"head_dim 0", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"heads_kv 3 of heads_q 4", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"heads_kv 8 of heads_q 4", CLFLASH_ERROR_INVALID_SHAPE, 1},
    {"head_dim 257", CLFLASH_ERROR_HEAD_DIM_UNSUPPORTED, 1},
    {"head_dim 1024", CLFLASH_ERROR_HEAD_DIM_UNSUPPORTED, 1},
    {"flags bit 5", CLFLASH_ERROR_INVALID_FLAGS, 1},
    {"flags causal | bit 31", CLFLASH_ERROR_INVALID_FLAGS, 1},
    {"scale NaN", CLFLASH_ERROR_INVALID_SCALE, 1},
    {"scale +inf", CLFLASH_ERROR_INVALID_SCALE, 1},
    {"scale -inf", CLFLASH_ERROR_INVALID_SCALE, 1},
    {"O seq_stride < head_dim", CLFLASH_ERROR_INVALID_LAYOUT, 1},
    {"O head_stride 1", CLFLASH_ERROR_INVALID_LAYOUT, 1},
    {"O batch_stride 5", CLFLASH_ERROR_INVALID_LAYOUT, 1},
    {"Q offset near UINT64_MAX", CLFLASH_ERROR_INVALID_LAYOUT, 1},
    {"O seq_stride UINT64_MAX/4", CLFLASH_ERROR_INVALID_LAYOUT, 1},
    {"out_dtype f16 with f32 input", CLFLASH_ERROR_INVALID_DTYPE, 1},
    {"window_left without CLFLASH_WINDOW", CLFLASH_ERROR_INVALID_FLAGS, 1},
};

static void expect_status(const char *call, const char *name, clflash_status got, clflash_status want)
{
    ck_assert_msg(got == want, "%s, %s: got %d %s (%s), want %d %s", call, name, got, clflash_status_string(got),
                  clflash_last_error_detail(), want, clflash_status_string(want));
    ck_assert_msg(clflash_last_error_detail() != NULL && strlen(clflash_last_error_detail()) > 0,
                  "%s, %s: clflash_last_error_detail() is empty", call, name);
}

/* Buffers for clflash_backward: its own d_o, dq, dk, dv, each filled with a byte pattern. */
typedef struct {
    cl_mem q, k, v, o, d_o, lse, dq, dk, dv;
} bwd_buffers;

static cl_mem pattern_buffer(cl_context ctx, size_t bytes, unsigned char pattern)
{
    cl_int err;
    unsigned char *host = malloc(bytes);
    ck_assert_ptr_nonnull(host);
    memset(host, pattern, bytes);
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    free(host);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

static void bwd_make(clflash_context *c, const th_case *t, bwd_buffers *b)
{
    cl_context ctx = clflash_context_cl(c);
    b->q = pattern_buffer(ctx, t->nq * t->esize, 0x11);
    b->k = pattern_buffer(ctx, t->nk * t->esize, 0x12);
    b->v = pattern_buffer(ctx, t->nv * t->esize, 0x13);
    b->o = pattern_buffer(ctx, t->no * t->esize, 0x14);
    b->d_o = pattern_buffer(ctx, t->no * t->esize, 0x15);
    b->lse = pattern_buffer(ctx, t->nlse * 4, 0x16);
    b->dq = pattern_buffer(ctx, t->nq * t->esize, 0x17);
    b->dk = pattern_buffer(ctx, t->nk * t->esize, 0x18);
    b->dv = pattern_buffer(ctx, t->nv * t->esize, 0x19);
}

static void bwd_release(bwd_buffers *b)
{
    cl_mem *all[] = {&b->q, &b->k, &b->v, &b->o, &b->d_o, &b->lse, &b->dq, &b->dk, &b->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i])
            clReleaseMemObject(*all[i]);
}

/* 1 if every byte of m still holds the pattern. */
static int buffer_holds(clflash_context *c, cl_mem m, unsigned char pattern)
{
    size_t bytes = 0;
    ck_assert_int_eq(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, NULL), CL_SUCCESS);
    unsigned char *host = malloc(bytes);
    ck_assert_ptr_nonnull(host);
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), m, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                     CL_SUCCESS);
    int ok = 1;
    for (size_t i = 0; i < bytes && ok; i++)
        ok = host[i] == pattern;
    free(host);
    return ok;
}

static void check_bwd_untouched(clflash_context *c, bwd_buffers *b, const char *name)
{
    ck_assert_msg(buffer_holds(c, b->dq, 0x17) && buffer_holds(c, b->dk, 0x18) && buffer_holds(c, b->dv, 0x19) &&
                      buffer_holds(c, b->o, 0x14) && buffer_holds(c, b->lse, 0x16),
                  "backward, %s: a buffer was written", name);
}

START_TEST(bad_descriptor)
{
    const bad_case *bc = &bad_cases[_i];
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc good = base_desc();
    clflash_attention_desc d = good;
    make_bad(_i, &d);

    /* host arrays and buffers sized for the valid descriptor */
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &good, 100 + (uint64_t)_i), 0);
    t.d = d;

    clflash_plan p;
    memset(&p, 0x5a, sizeof p);
    p.struct_size = sizeof p;
    if (bc->is_desc_error)
        expect_status("clflash_plan_attention", bc->name, clflash_plan_attention(c, &d, &p), bc->want);

    expect_status("clflash_forward_host", bc->name, clflash_forward_host(c, &d, t.q, t.k, t.v, t.o, t.lse), bc->want);
    ck_assert_msg(th_outputs_untouched(&t), "clflash_forward_host, %s: O or lse was written", bc->name);
    expect_status("clflash_forward_host without lse", bc->name, clflash_forward_host(c, &d, t.q, t.k, t.v, t.o, NULL),
                  bc->want);
    ck_assert_msg(th_outputs_untouched(&t), "clflash_forward_host, %s: O was written", bc->name);

    expect_status("clflash_forward", bc->name, th_run_device(c, &t, TH_FLASH, 1, NULL), bc->want);
    ck_assert_msg(th_outputs_untouched(&t), "clflash_forward, %s: O or lse was written", bc->name);
    expect_status("clflash_forward_naive", bc->name, th_run_device(c, &t, TH_NAIVE, 1, NULL), bc->want);
    ck_assert_msg(th_outputs_untouched(&t), "clflash_forward_naive, %s: O or lse was written", bc->name);

    bwd_buffers b;
    bwd_make(c, &t, &b);
    expect_status("clflash_backward", bc->name,
                  clflash_backward(c, &d, NULL, b.q, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, 0, NULL, NULL),
                  bc->want);
    check_bwd_untouched(c, &b, bc->name);
    bwd_release(&b);

    /* a valid call afterwards clears the detail */
    ck_assert_int_eq(clflash_plan_attention(c, &good, &p), CLFLASH_SUCCESS);
    ck_assert_str_eq(clflash_last_error_detail(), "");
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- NULL arguments ----------------------------------------------------------------------------- */

START_TEST(null_arguments)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 200), 0);
    clflash_plan p = {.struct_size = sizeof p};
    const clflash_status IA = CLFLASH_ERROR_INVALID_ARGUMENT;

    expect_status("plan", "NULL context", clflash_plan_attention(NULL, &d, &p), IA);
    expect_status("plan", "NULL desc", clflash_plan_attention(c, NULL, &p), IA);
    expect_status("plan", "NULL out", clflash_plan_attention(c, &d, NULL), IA);

    expect_status("forward_host", "NULL context", clflash_forward_host(NULL, &d, t.q, t.k, t.v, t.o, t.lse), IA);
    expect_status("forward_host", "NULL desc", clflash_forward_host(c, NULL, t.q, t.k, t.v, t.o, t.lse), IA);
    expect_status("forward_host", "NULL q", clflash_forward_host(c, &d, NULL, t.k, t.v, t.o, t.lse), IA);
    expect_status("forward_host", "NULL k", clflash_forward_host(c, &d, t.q, NULL, t.v, t.o, t.lse), IA);
    expect_status("forward_host", "NULL v", clflash_forward_host(c, &d, t.q, t.k, NULL, t.o, t.lse), IA);
    ck_assert_msg(th_outputs_untouched(&t), "forward_host with a NULL argument wrote O or lse");
    expect_status("forward_host", "NULL o", clflash_forward_host(c, &d, t.q, t.k, t.v, NULL, t.lse), IA);
    ck_assert_msg(th_outputs_untouched(&t), "forward_host with NULL o wrote lse");

    cl_context ctx = clflash_context_cl(c);
    cl_int err;
    cl_mem q = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t.nq * 4, t.q, &err);
    cl_mem k = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t.nk * 4, t.k, &err);
    cl_mem v = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t.nv * 4, t.v, &err);
    cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t.no * 4, t.o, &err);
    cl_mem l = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t.nlse * 4, t.lse, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    typedef clflash_status (*fwd_fn)(clflash_context *, const clflash_attention_desc *, cl_command_queue, cl_mem,
                                     cl_mem, cl_mem, cl_mem, cl_mem, cl_uint, const cl_event *, cl_event *);
    const fwd_fn fns[2] = {clflash_forward, clflash_forward_naive};
    const char *names[2] = {"forward", "forward_naive"};
    for (int f = 0; f < 2; f++) {
        cl_event done = NULL;
        expect_status(names[f], "NULL context", fns[f](NULL, &d, NULL, q, k, v, o, l, 0, NULL, &done), IA);
        expect_status(names[f], "NULL desc", fns[f](c, NULL, NULL, q, k, v, o, l, 0, NULL, &done), IA);
        expect_status(names[f], "NULL q", fns[f](c, &d, NULL, NULL, k, v, o, l, 0, NULL, &done), IA);
        expect_status(names[f], "NULL k", fns[f](c, &d, NULL, q, NULL, v, o, l, 0, NULL, &done), IA);
        expect_status(names[f], "NULL v", fns[f](c, &d, NULL, q, k, NULL, o, l, 0, NULL, &done), IA);
        expect_status(names[f], "NULL o", fns[f](c, &d, NULL, q, k, v, NULL, l, 0, NULL, &done), IA);
        ck_assert_msg(done == NULL, "%s: *done was set by a failing call", names[f]);
        /* a wait list that does not match num_wait is refused before anything is enqueued */
        const clflash_status st = fns[f](c, &d, NULL, q, k, v, o, l, 1, NULL, &done);
        ck_assert_msg(st != CLFLASH_SUCCESS, "%s: num_wait 1 with a NULL wait list succeeded", names[f]);
        ck_assert_msg(done == NULL, "%s: *done was set by a failing call", names[f]);
    }
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), o, CL_TRUE, 0, t.no * 4, t.o, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), l, CL_TRUE, 0, t.nlse * 4, t.lse, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_msg(th_outputs_untouched(&t), "a failing device call wrote O or lse");

    /* the same buffers in a valid call: the failures above were the arguments' */
    cl_event done = NULL;
    const clflash_status st = clflash_forward(c, &d, NULL, q, k, v, o, l, 0, NULL, &done);
    ck_assert_msg(st == CLFLASH_SUCCESS, "the valid call: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_ptr_nonnull(done);
    clWaitForEvents(1, &done);
    clReleaseEvent(done);

    clReleaseMemObject(q);
    clReleaseMemObject(k);
    clReleaseMemObject(v);
    clReleaseMemObject(o);
    clReleaseMemObject(l);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- buffer sizes -------------------------------------------------------------------------------- */

/* Buffers of exactly the extent pass; one element less in any of q, k, v, o, lse is
 * CLFLASH_ERROR_BUFFER_TOO_SMALL with nothing written. _i: 0 contiguous f32, 1 strided f16 (O with
 * an offset and gaps: its extent, not its dense size, is what counts). */
START_TEST(buffer_one_element_short)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = base_desc();
    if (_i) {
        d.dtype = F16;
        d.o = (clflash_layout){5, 0, 0, 16 + 3};
        d.k = (clflash_layout){0, 17 * 2 * 16, 16, 2 * 16};
    }
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 300), 0);
    th_case_reference(&t);
    cl_context ctx = clflash_context_cl(c);
    const size_t full[5] = {t.nq * t.esize, t.nk * t.esize, t.nv * t.esize, t.no * t.esize, t.nlse * 4};
    const size_t elem[5] = {t.esize, t.esize, t.esize, t.esize, 4};
    void *host[5] = {t.q, t.k, t.v, t.o, t.lse};
    static const char *const names[5] = {"q", "k", "v", "o", "lse"};

    for (int short_one = -1; short_one < 5; short_one++) {
        for (int naive = 0; naive < 2; naive++) {
            th_case_reset_outputs(&t);
            cl_mem m[5];
            cl_int err;
            for (int j = 0; j < 5; j++) {
                m[j] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                      full[j] - (j == short_one ? elem[j] : 0), host[j], &err);
                ck_assert_int_eq(err, CL_SUCCESS);
            }
            cl_event done = NULL;
            clflash_status st = naive ? clflash_forward_naive(c, &d, NULL, m[0], m[1], m[2], m[3], m[4], 0, NULL, &done)
                                      : clflash_forward(c, &d, NULL, m[0], m[1], m[2], m[3], m[4], 0, NULL, &done);
            const char *call = naive ? "forward_naive" : "forward";
            if (short_one < 0) {
                ck_assert_msg(st == CLFLASH_SUCCESS, "%s with exact sizes: %s (%s)", call, clflash_status_string(st),
                              clflash_last_error_detail());
                clWaitForEvents(1, &done);
                clReleaseEvent(done);
            } else {
                expect_status(call, names[short_one], st, CLFLASH_ERROR_BUFFER_TOO_SMALL);
                ck_assert_msg(done == NULL, "%s: *done set by a failing call", call);
            }
            const size_t osz = full[3] - (short_one == 3 ? elem[3] : 0);
            const size_t lsz = full[4] - (short_one == 4 ? elem[4] : 0);
            ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), m[3], CL_TRUE, 0, osz, t.o, 0, NULL, NULL),
                             CL_SUCCESS);
            ck_assert_int_eq(
                clEnqueueReadBuffer(clflash_context_queue(c), m[4], CL_TRUE, 0, lsz, t.lse, 0, NULL, NULL),
                CL_SUCCESS);
            if (short_one < 0) {
                char msg[2400];
                ck_assert_msg(th_check(&t, 1, naive ? REF_PATH_NAIVE : REF_PATH_FLASH, msg, sizeof msg) == 0,
                              "%s with exact sizes: %s", call, msg);
            } else {
                ck_assert_msg(th_outputs_untouched(&t), "%s with %s short: O or lse was written", call,
                              names[short_one]);
            }
            for (int j = 0; j < 5; j++)
                clReleaseMemObject(m[j]);
        }
    }
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- build options --------------------------------------------------------------------------------- */

START_TEST(bad_build_options)
{
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.build_options = "-this-is-not-an-option";
    clflash_context *c = NULL;
    clflash_status st = th_context(&opt, &c);
    ck_assert_msg(st == CLFLASH_SUCCESS, "creating the context: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_ptr_nonnull(clflash_context_build_log(c));
    ck_assert_str_eq(clflash_context_build_log(c), "");

    const clflash_attention_desc d = base_desc();
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    st = clflash_plan_attention(c, &d, &p);
    fprintf(stderr, "bad build options: plan returned %d (%s), detail '%s'\n", st, clflash_status_string(st),
            clflash_last_error_detail());
    expect_status("clflash_plan_attention", "bad build options", st, CLFLASH_ERROR_BUILD_FAILED);
    ck_assert_ptr_nonnull(clflash_context_build_log(c));

    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 400), 0);
    expect_status("clflash_forward_host", "bad build options", th_run_host(c, &t, 1), CLFLASH_ERROR_BUILD_FAILED);
    ck_assert_msg(th_outputs_untouched(&t), "O or lse was written");
    expect_status("clflash_forward", "bad build options", th_run_device(c, &t, TH_FLASH, 1, NULL),
                  CLFLASH_ERROR_BUILD_FAILED);
    ck_assert_msg(th_outputs_untouched(&t), "O or lse was written");
    expect_status("clflash_forward_naive", "bad build options", th_run_device(c, &t, TH_NAIVE, 1, NULL),
                  CLFLASH_ERROR_BUILD_FAILED);
    ck_assert_msg(th_outputs_untouched(&t), "O or lse was written");
    const char *log = clflash_context_build_log(c);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(strlen(log) > 0, "the build failed but the build log is empty");
    fprintf(stderr, "build log (%zu chars): %.300s\n", strlen(log), log);
    th_case_free(&t);
    clflash_context_free(c);

    /* NULL and "" build options are the defaults */
    opt.build_options = "";
    ck_assert_int_eq(th_context(&opt, &c), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    clflash_context_free(c);
}
END_TEST

/* A build option string the library copies: the caller's buffer may change after creation. */
START_TEST(build_options_are_copied)
{
    char opts[64];
    strcpy(opts, "-DCLFLASH_TEST_UNUSED=1");
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.build_options = opts;
    clflash_context *c = test_context(&opt);
    strcpy(opts, "-this-is-not-an-option");
    const clflash_attention_desc d = base_desc();
    run_and_check(c, &d, TH_FLASH, 0, 1, 500);
    clflash_context_free(c);
}
END_TEST

/* ---- backward --------------------------------------------------------------------------------------- */

START_TEST(backward_null_arguments)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 600), 0);
    bwd_buffers b;
    bwd_make(c, &t, &b);

    const clflash_status IA = CLFLASH_ERROR_INVALID_ARGUMENT;
    expect_status("clflash_backward", "NULL context",
                  clflash_backward(NULL, &d, NULL, b.q, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, 0, NULL, NULL),
                  IA);
    expect_status("clflash_backward", "NULL desc",
                  clflash_backward(c, NULL, NULL, b.q, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, 0, NULL, NULL),
                  IA);
    expect_status("clflash_backward", "NULL q",
                  clflash_backward(c, &d, NULL, NULL, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, 0, NULL, NULL),
                  IA);
    expect_status("clflash_backward", "NULL dq",
                  clflash_backward(c, &d, NULL, b.q, b.k, b.v, b.o, b.d_o, b.lse, NULL, b.dk, b.dv, 0, NULL, NULL),
                  IA);
    expect_status("clflash_backward", "NULL d_o",
                  clflash_backward(c, &d, NULL, b.q, b.k, b.v, b.o, NULL, b.lse, b.dq, b.dk, b.dv, 0, NULL, NULL),
                  IA);
    expect_status("clflash_backward", "all NULL",
                  clflash_backward(c, &d, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL),
                  IA);
    check_bwd_untouched(c, &b, "NULL arguments");

    cl_event done = NULL; /* and the same buffers, valid, run */
    clflash_status st =
        clflash_backward(c, &d, NULL, b.q, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, 0, NULL, &done);
    ck_assert_msg(st == CLFLASH_SUCCESS, "clflash_backward, valid input: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_ptr_nonnull(done);
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    bwd_release(&b);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

static Suite *validation_suite(void)
{
    Suite *s = suite_create("validation");
    TCase *td = tcase_create("descriptors");
    tcase_set_timeout(td, TEST_TIMEOUT_S);
    tcase_add_loop_test(td, bad_descriptor, 0, N_OF(bad_cases));
    suite_add_tcase(s, td);

    TCase *ta = tcase_create("arguments");
    tcase_set_timeout(ta, TEST_TIMEOUT_S);
    tcase_add_test(ta, null_arguments);
    tcase_add_loop_test(ta, buffer_one_element_short, 0, 2);
    tcase_add_test(ta, bad_build_options);
    tcase_add_test(ta, build_options_are_copied);
    tcase_add_test(ta, backward_null_arguments);
    suite_add_tcase(s, ta);
    return s;
}

int main(void)
{
    return run_suite(validation_suite());
}
