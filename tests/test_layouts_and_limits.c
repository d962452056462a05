/*
 * test_layouts_and_limits.c - bad layouts, buffers and sizes that tests/test_validation.c does not
 * already cover, each refused with its own status before anything is enqueued, through every
 * entry point that takes it (plan, forward_host, forward, forward_naive, backward):
 *
 *  - O layouts whose heads (or batch entries) overlap while its rows do not, and, the other way,
 *    interleaved but disjoint O layouts ([b][s][h][d], gaps) that must be accepted and be right;
 *  - O sharing a buffer with Q, K or V: refused where the ranges overlap, accepted (and right)
 *    where they do not; lse sharing a buffer with O or an input;
 *  - buffers too small only because of a large offset, for each of q, k, v, o; a sub-buffer is
 *    measured by its own CL_MEM_SIZE, not its parent's;
 *  - sizes whose index arithmetic overflows 64 bits: an element count that fits but whose bytes do
 *    not, a default stride computed from a huge explicit one, a batch or head stride times its
 *    count;
 *  - dimensions beyond what the kernels' index arithmetic and grids allow (batch, heads_q, seq_q
 *    above their limits; seq_k so large that 32-bit key indices would wrap);
 *  - a queue of another OpenCL context; a wait list without num_wait;
 *  - "enqueues nothing": every failing call, including those that fail after validation (a forced
 *    block that does not fit, a naive score matrix above the device's largest allocation, a build
 *    failure), is made on the test's own queue with a wait list holding a user event that never
 *    completes; a marker enqueued afterwards must complete at once, and the user event's
 *    reference count must be unchanged.
 * A released or garbage context pointer is the caller's error and is not tested.
 */
#include "check_common.h"

#include <math.h>
#include <time.h>

#define F32 CLFLASH_F32
#define F16 CLFLASH_F16

static clflash_attention_desc base_desc(void)
{
    return th_desc(2, 4, 2, 13, 17, 16, F32, 0);
}

static void expect(const char *call, const char *name, clflash_status got, clflash_status want)
{
    ck_assert_msg(got == want, "%s, %s: got %d %s (%s), want %s", call, name, got, clflash_status_string(got),
                  clflash_last_error_detail(), clflash_status_string(want));
    ck_assert_msg(strlen(clflash_last_error_detail()) > 0, "%s, %s: no detail", call, name);
}

static cl_mem buffer_of(clflash_context *c, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host,
                              &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

/* A bad descriptor through every entry point, with host arrays and buffers sized for the valid
 * base descriptor (validation of the descriptor comes before any size check). */
static void refused_everywhere(clflash_context *c, const clflash_attention_desc *bad, clflash_status want,
                               const char *name)
{
    const clflash_attention_desc good = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &good, 31), 0);
    clflash_plan p = {.struct_size = sizeof p};
    expect("clflash_plan_attention", name, clflash_plan_attention(c, bad, &p), want);
    expect("clflash_forward_host", name, clflash_forward_host(c, bad, t.q, t.k, t.v, t.o, t.lse), want);
    ck_assert_msg(th_outputs_untouched(&t), "forward_host, %s: outputs written", name);
    t.d = *bad;
    expect("clflash_forward", name, th_run_device(c, &t, TH_FLASH, 1, NULL), want);
    ck_assert_msg(th_outputs_untouched(&t), "forward, %s: outputs written", name);
    expect("clflash_forward_naive", name, th_run_device(c, &t, TH_NAIVE, 1, NULL), want);
    ck_assert_msg(th_outputs_untouched(&t), "forward_naive, %s: outputs written", name);
    cl_mem q = buffer_of(c, t.q, t.nq * 4), k = buffer_of(c, t.k, t.nk * 4), v = buffer_of(c, t.v, t.nv * 4);
    cl_mem o = buffer_of(c, t.o, t.no * 4), d_o = buffer_of(c, t.o, t.no * 4), lse = buffer_of(c, t.lse, t.nlse * 4);
    cl_mem dq = buffer_of(c, t.q, t.nq * 4), dk = buffer_of(c, t.k, t.nk * 4), dv = buffer_of(c, t.v, t.nv * 4);
    cl_event done = NULL;
    expect("clflash_backward", name, clflash_backward(c, bad, NULL, q, k, v, o, d_o, lse, dq, dk, dv, 0, NULL, &done),
           want);
    ck_assert_ptr_null(done);
    cl_mem all[] = {q, k, v, o, d_o, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    th_case_free(&t);
}

/* ---- O layouts ------------------------------------------------------------------------------------ */

START_TEST(o_overlaps_between_heads_and_batches)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc g = base_desc(); /* d 16, seq_q 13, heads_q 4, batch 2 */
    clflash_attention_desc d;

    d = g; /* rows are disjoint (seq_stride = d), but head h's last row is head h+1's first */
    d.o = (clflash_layout){0, 0, 12 * 16, 16};
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "O heads overlap by one row");

    d = g; /* rows padded, heads one element short */
    d.o = (clflash_layout){0, 0, 13 * 20 - 1 - 4, 20};
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "O heads overlap by one element");

    d = g; /* rows and heads disjoint, batch entries overlap by one element */
    d.o = (clflash_layout){0, 4 * 13 * 16 - 1, 0, 0};
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "O batch entries overlap");

    d = g; /* heads interleaved with rows: [b][s][h][d] with the head stride one short */
    d.o = (clflash_layout){0, 13 * 4 * 16, 15, 4 * 16};
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "[b][s][h][d] O with head stride d - 1");
    clflash_context_free(c);
}
END_TEST

/* Disjoint layouts that are not the default must be accepted and right. _i: 0 [b][s][h][d], 1 gaps
 * between rows, heads and batch entries with an offset, 2 heads in reverse batch order... (batch
 * stride smaller than head stride). */
START_TEST(o_disjoint_layouts_accepted)
{
    clflash_context *c = test_context(NULL);
    clflash_attention_desc d = base_desc();
    if (_i == 0)
        d.o = (clflash_layout){0, 13 * 4 * 16, 16, 4 * 16};
    else if (_i == 1)
        d.o = (clflash_layout){7, 4 * (13 * 19 + 3) + 5, 13 * 19 + 3, 19};
    else
        d.o = (clflash_layout){0, 13 * 16, 2 * 13 * 16, 16}; /* [h][b][s][d] */
    run_and_check(c, &d, TH_FLASH, 1, 1, 40 + (uint64_t)_i);
    run_and_check(c, &d, TH_FLASH, 0, 1, 50 + (uint64_t)_i);
    run_and_check(c, &d, TH_NAIVE, 1, 1, 60 + (uint64_t)_i);
    clflash_context_free(c);
}
END_TEST

/* ---- buffers shared between tensors -------------------------------------------------------------- */

/* O and Q in one buffer: Q at the start, O after it (disjoint: accepted and right), or O starting
 * at Q's last element (refused). */
START_TEST(o_shares_a_buffer_with_q)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc g = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &g, 70), 0);
    th_case_reference(&t);
    const size_t nq = (size_t)t.nq, no = (size_t)t.no, nd = t.nlse * g.head_dim;
    float *both = malloc(sizeof(float) * (nq + no));
    ck_assert_ptr_nonnull(both);
    memcpy(both, t.q, nq * 4);
    for (size_t i = 0; i < no; i++)
        both[nq + i] = -1234.0f;
    cl_mem shared = buffer_of(c, both, (nq + no) * 4);
    cl_mem k = buffer_of(c, t.k, t.nk * 4), v = buffer_of(c, t.v, t.nv * 4), lse = buffer_of(c, t.lse, t.nlse * 4);

    for (int naive = 0; naive < 2; naive++) {
        typedef clflash_status (*fwd_fn)(clflash_context *, const clflash_attention_desc *, cl_command_queue, cl_mem,
                                         cl_mem, cl_mem, cl_mem, cl_mem, cl_uint, const cl_event *, cl_event *);
        const fwd_fn fn = naive ? clflash_forward_naive : clflash_forward;
        const char *call = naive ? "clflash_forward_naive" : "clflash_forward";
        clflash_attention_desc d = g;
        cl_event done = NULL;

        d.o.offset = nq - 1; /* O's first element is Q's last */
        expect(call, "O overlaps Q in one buffer", fn(c, &d, NULL, shared, k, v, shared, lse, 0, NULL, &done),
               CLFLASH_ERROR_INVALID_LAYOUT);
        ck_assert_ptr_null(done);

        d.o.offset = nq; /* right after Q: disjoint */
        const clflash_status st = fn(c, &d, NULL, shared, k, v, shared, lse, 0, NULL, &done);
        ck_assert_msg(st == CLFLASH_SUCCESS, "%s, O after Q in one buffer: %s (%s)", call, clflash_status_string(st),
                      clflash_last_error_detail());
        ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
        ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), shared, CL_TRUE, 0, (nq + no) * 4, both, 0,
                                             NULL, NULL),
                         CL_SUCCESS);
        ck_assert_msg(memcmp(both, t.q, nq * 4) == 0, "%s: Q was changed", call);
        double *got = malloc(sizeof(double) * nd);
        ck_assert_ptr_nonnull(got);
        for (size_t i = 0; i < nd; i++)
            got[i] = both[nq + i];
        char msg[600];
        ck_assert_msg(ref_compare("O", got, t.ref_o, nd, ref_tol_o(F32, naive ? REF_PATH_NAIVE : REF_PATH_FLASH), msg,
                                  sizeof msg) == 0,
                      "%s, O after Q in one buffer: %s", call, msg);
        free(got);
    }
    clReleaseMemObject(shared);
    clReleaseMemObject(k);
    clReleaseMemObject(v);
    clReleaseMemObject(lse);
    free(both);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* lse may not share a buffer with O or an input (sized so that only that rule can fail). */
START_TEST(lse_shares_a_buffer)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 71), 0);
    cl_mem q = buffer_of(c, t.q, t.nq * 4), k = buffer_of(c, t.k, t.nk * 4), v = buffer_of(c, t.v, t.nv * 4),
           o = buffer_of(c, t.o, t.no * 4);
    for (int naive = 0; naive < 2; naive++) {
        const char *call = naive ? "clflash_forward_naive" : "clflash_forward";
        cl_mem as[4] = {q, k, v, o};
        static const char *const names[4] = {"lse is q", "lse is k", "lse is v", "lse is o"};
        for (int i = 0; i < 4; i++) {
            cl_event done = NULL;
            const clflash_status st = naive ? clflash_forward_naive(c, &d, NULL, q, k, v, o, as[i], 0, NULL, &done)
                                            : clflash_forward(c, &d, NULL, q, k, v, o, as[i], 0, NULL, &done);
            expect(call, names[i], st, CLFLASH_ERROR_INVALID_ARGUMENT);
            ck_assert_ptr_null(done);
        }
    }
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), o, CL_TRUE, 0, t.no * 4, t.o, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_msg(th_outputs_untouched(&t), "O was written");
    clReleaseMemObject(q);
    clReleaseMemObject(k);
    clReleaseMemObject(v);
    clReleaseMemObject(o);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- sizes ------------------------------------------------------------------------------------------ */

/* Buffers sized for offset 0; one tensor given a large offset (no overflow) is too small. _i: which
 * tensor (q, k, v, o), then the offset (one element, or 2^40 elements). */
START_TEST(buffer_too_small_by_offset)
{
    static const char *const names[4] = {"q", "k", "v", "o"};
    const int which = _i % 4;
    const uint64_t offset = (_i / 4) ? (1ull << 40) : 1;
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc g = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &g, 80), 0);
    clflash_attention_desc d = g;
    clflash_layout *l = which == 0 ? &d.q : which == 1 ? &d.k : which == 2 ? &d.v : &d.o;
    l->offset = offset;
    char name[64];
    snprintf(name, sizeof name, "%s offset %llu", names[which], (unsigned long long)offset);
    t.d = d; /* host arrays and buffers keep the sizes of offset 0 */
    expect("clflash_forward", name, th_run_device(c, &t, TH_FLASH, 1, NULL), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    ck_assert_msg(th_outputs_untouched(&t), "forward, %s: outputs written", name);
    expect("clflash_forward_naive", name, th_run_device(c, &t, TH_NAIVE, 1, NULL), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    ck_assert_msg(th_outputs_untouched(&t), "forward_naive, %s: outputs written", name);
    /* the planner looks at no buffer: the descriptor itself is fine */
    clflash_plan p = {.struct_size = sizeof p};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* A sub-buffer is measured by its own size: one element short of what O needs is too small even
 * though its parent is large; exactly the size needed works. */
START_TEST(sub_buffer_size_counts)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 90), 0);
    th_case_reference(&t);
    const size_t ob = t.no * 4;
    cl_mem parent = buffer_of(c, t.o, ob); /* filled with the sentinel */
    cl_int err;
    cl_mem big = clCreateBuffer(clflash_context_cl(c), CL_MEM_READ_WRITE, 4 * ob, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const cl_buffer_region short_region = {0, ob - 4}, exact_region = {0, ob};
    cl_mem sub_short = clCreateSubBuffer(big, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &short_region, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem sub_exact = clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &exact_region, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem q = buffer_of(c, t.q, t.nq * 4), k = buffer_of(c, t.k, t.nk * 4), v = buffer_of(c, t.v, t.nv * 4),
           lse = buffer_of(c, t.lse, t.nlse * 4);
    cl_event done = NULL;
    expect("clflash_forward", "O sub-buffer one element short",
           clflash_forward(c, &d, NULL, q, k, v, sub_short, lse, 0, NULL, &done), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    ck_assert_ptr_null(done);
    const clflash_status st = clflash_forward(c, &d, NULL, q, k, v, sub_exact, lse, 0, NULL, &done);
    ck_assert_msg(st == CLFLASH_SUCCESS, "O sub-buffer of the exact size: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), parent, CL_TRUE, 0, ob, t.o, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(clflash_context_queue(c), lse, CL_TRUE, 0, t.nlse * 4, t.lse, 0, NULL, NULL),
                     CL_SUCCESS);
    char msg[2400];
    ck_assert_msg(th_check(&t, 1, REF_PATH_FLASH, msg, sizeof msg) == 0, "through a sub-buffer: %s", msg);
    cl_mem all[] = {sub_short, sub_exact, big, parent, q, k, v, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* Layouts whose index arithmetic overflows 64 bits: refused as invalid layouts by every entry
 * point (before any buffer is looked at). */
START_TEST(index_overflow)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc g = base_desc();
    clflash_attention_desc d;

    d = g; /* the element index fits, its byte offset (x4) does not */
    d.v.offset = UINT64_MAX / 4 - 100;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "V offset whose bytes overflow");

    d = g; /* (batch - 1) * batch_stride fits, plus the rest does not */
    d.k.batch_stride = UINT64_MAX - 8;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "K batch_stride near 2^64");

    d = g; /* 3 * 2^62 fits, but the default batch_stride, 4 heads * 2^62, does not */
    d.q.head_stride = 1ull << 62;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "Q head_stride 2^62 with 4 heads, default batch_stride");

    d = g; /* with an explicit batch_stride the elements fit (3 * 2^62 + ...), their bytes (x4) do not */
    d.q.head_stride = 1ull << 62;
    d.q.batch_stride = 1;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "Q head_stride 2^62: bytes overflow");

    d = g; /* a default stride computed from a huge explicit one: head_stride = 17 * 2^60 */
    d.k.seq_stride = 1ull << 60;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "K default head_stride from seq_stride 2^60");

    d = g; /* O: each term fits, their sum does not */
    d.o = (clflash_layout){UINT64_MAX / 2 + 1, UINT64_MAX / 2 + 1, 0, 0};
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_LAYOUT, "O offset + batch_stride overflow");
    clflash_context_free(c);
}
END_TEST

/* ---- dimensions at the limits --------------------------------------------------------------------- */

START_TEST(dimension_limits)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc g = base_desc();
    clflash_attention_desc d;
    d = g;
    d.batch = CLFLASH_MAX_BATCH + 1;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_SHAPE, "batch CLFLASH_MAX_BATCH + 1 (above a grid dimension)");
    d = g;
    d.heads_q = CLFLASH_MAX_HEADS + 1;
    d.heads_kv = 1;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_SHAPE, "heads_q CLFLASH_MAX_HEADS + 1 (above a grid dimension)");
    d = g;
    d.seq_q = CLFLASH_MAX_SEQ_Q + 1u;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_SHAPE, "seq_q CLFLASH_MAX_SEQ_Q + 1");
    d = g;
    d.seq_q = UINT32_MAX;
    refused_everywhere(c, &d, CLFLASH_ERROR_INVALID_SHAPE, "seq_q 2^32 - 1");
    clflash_context_free(c);
}
END_TEST

/* seq_k is an unsigned 32-bit key index in the kernels: the flash kernel steps `uint k0` by B up to
 * seq_k, which wraps (and never ends) once seq_k > 2^32 - B, and the naive path rounds seq_k up to
 * a multiple of 16 in 32 bits. Such a seq_k must be refused like a too-large seq_q, before any
 * buffer is needed (the planner refuses it). With head_dim 1 and fp16, K and V of 2^32 keys are
 * 8 GiB each: buffers a large GPU can hold, so this is not only a theoretical limit. */
START_TEST(seq_k_beyond_32_bit_key_indices)
{
    clflash_context *c = test_context(NULL);
    static const uint32_t bad[] = {UINT32_MAX, UINT32_MAX - 15u, UINT32_MAX - 4095u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clflash_attention_desc d = th_desc(1, 1, 0, 1, bad[i], 1, F16, 0);
        char name[64];
        snprintf(name, sizeof name, "seq_k %u", bad[i]);
        clflash_plan p = {.struct_size = sizeof p};
        expect("clflash_plan_attention", name, clflash_plan_attention(c, &d, &p), CLFLASH_ERROR_INVALID_SHAPE);
    }
    clflash_context_free(c);
}
END_TEST

/* ---- queues and wait lists ---------------------------------------------------------------------------- */

START_TEST(queue_of_another_context)
{
    clflash_context *c = test_context(NULL);
    clflash_context *other = test_context(NULL); /* its own cl_context on the same device */
    const clflash_attention_desc d = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 100), 0);
    expect("clflash_forward", "a queue of another cl_context",
           th_run_device(c, &t, TH_FLASH, 1, clflash_context_queue(other)), CLFLASH_ERROR_INVALID_ARGUMENT);
    th_case_free(&t);
    ck_assert_int_eq(th_case_init(&t, &d, 100), 0);
    expect("clflash_forward_naive", "a queue of another cl_context",
           th_run_device(c, &t, TH_NAIVE, 1, clflash_context_queue(other)), CLFLASH_ERROR_INVALID_ARGUMENT);
    th_case_free(&t);
    clflash_context_free(other);
    clflash_context_free(c);
}
END_TEST

START_TEST(wait_list_without_count)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = base_desc();
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &d, 110), 0);
    cl_mem q = buffer_of(c, t.q, t.nq * 4), k = buffer_of(c, t.k, t.nk * 4), v = buffer_of(c, t.v, t.nv * 4),
           o = buffer_of(c, t.o, t.no * 4), lse = buffer_of(c, t.lse, t.nlse * 4);
    cl_int err;
    cl_event ev = clCreateUserEvent(clflash_context_cl(c), &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event done = NULL;
    expect("clflash_forward", "wait list with num_wait 0",
           clflash_forward(c, &d, NULL, q, k, v, o, lse, 0, &ev, &done), CLFLASH_ERROR_INVALID_ARGUMENT);
    expect("clflash_forward_naive", "wait list with num_wait 0",
           clflash_forward_naive(c, &d, NULL, q, k, v, o, lse, 0, &ev, &done), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_null(done);
    clSetUserEventStatus(ev, CL_COMPLETE);
    clReleaseEvent(ev);
    cl_mem all[] = {q, k, v, o, lse};
    for (size_t i = 0; i < 5; i++)
        clReleaseMemObject(all[i]);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

/* ---- enqueues nothing -------------------------------------------------------------------------------- */

enum { NE_BAD_DESC, NE_SHORT_BUFFER, NE_FORCED_BLOCK, NE_NAIVE_TOO_LARGE, NE_BUILD_FAILS, NE_COUNT };
static const char *const ne_names[NE_COUNT] = {"an invalid descriptor", "a buffer too small",
                                               "a forced block that does not fit",
                                               "a naive score matrix above the largest allocation",
                                               "a build failure"};

static cl_int ref_count(cl_event e)
{
    cl_uint n = 0;
    ck_assert_int_eq(clGetEventInfo(e, CL_EVENT_REFERENCE_COUNT, sizeof n, &n, NULL), CL_SUCCESS);
    return (cl_int)n;
}

/* _i: the failure, then flash (0) or naive (1). */
START_TEST(failed_calls_enqueue_nothing)
{
    const int what = _i % NE_COUNT, naive = _i / NE_COUNT;
    if ((what == NE_FORCED_BLOCK && naive) || (what == NE_NAIVE_TOO_LARGE && !naive))
        return; /* that failure belongs to the other path */
    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    if (what == NE_BUILD_FAILS)
        opt.build_options = "-this-is-not-an-option";
    clflash_context *c = test_context(&opt);
    clflash_attention_desc d = base_desc(), sized = d;
    if (what == NE_BAD_DESC)
        d.head_dim = 0;
    if (what == NE_SHORT_BUFFER)
        d.o.offset = 3;
    if (what == NE_FORCED_BLOCK)
        d.block = 4000; /* far beyond the local memory of any device */
    if (what == NE_NAIVE_TOO_LARGE) {
        d = th_desc(1, 1, 0, 1u << 19, 1u << 19, 1, F32, 0);
        sized = d;
    }
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &sized, 120), 0);
    cl_mem q = buffer_of(c, t.q, t.nq * 4), k = buffer_of(c, t.k, t.nk * 4), v = buffer_of(c, t.v, t.nv * 4),
           o = buffer_of(c, t.o, t.no * 4), lse = buffer_of(c, t.lse, t.nlse * 4);
    cl_int err;
    cl_command_queue own = clCreateCommandQueue(clflash_context_cl(c), clflash_context_device(c), 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event gate = clCreateUserEvent(clflash_context_cl(c), &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const cl_int refs = ref_count(gate);

    cl_event done = NULL;
    const clflash_status st = naive ? clflash_forward_naive(c, &d, own, q, k, v, o, lse, 1, &gate, &done)
                                    : clflash_forward(c, &d, own, q, k, v, o, lse, 1, &gate, &done);
    ck_assert_msg(st != CLFLASH_SUCCESS, "%s (%s): the call succeeded", ne_names[what], naive ? "naive" : "flash");
    ck_assert_ptr_null(done);
    ck_assert_msg(ref_count(gate) == refs, "%s: the caller's event was retained or released", ne_names[what]);

    /* anything the failed call enqueued would wait for the gate, and the marker behind it too */
    cl_event marker = NULL;
    ck_assert_int_eq(clEnqueueMarkerWithWaitList(own, 0, NULL, &marker), CL_SUCCESS);
    clFlush(own);
    cl_int status = CL_QUEUED;
    for (int spin = 0; spin < 500 && status != CL_COMPLETE; spin++) {
        ck_assert_int_eq(clGetEventInfo(marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL),
                         CL_SUCCESS);
        if (status != CL_COMPLETE) {
            const struct timespec ten_ms = {0, 10 * 1000 * 1000};
            nanosleep(&ten_ms, NULL);
        }
    }
    clSetUserEventStatus(gate, CL_COMPLETE); /* release whatever might be waiting */
    clFinish(own);
    ck_assert_msg(status == CL_COMPLETE, "%s (%s, %s): a command was enqueued by the failed call", ne_names[what],
                  naive ? "naive" : "flash", clflash_status_string(st));
    ck_assert_int_eq(clEnqueueReadBuffer(own, o, CL_TRUE, 0, t.no * 4, t.o, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(own, lse, CL_TRUE, 0, t.nlse * 4, t.lse, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_msg(th_outputs_untouched(&t), "%s: outputs written", ne_names[what]);

    clReleaseEvent(marker);
    clReleaseEvent(gate);
    clReleaseCommandQueue(own);
    cl_mem all[] = {q, k, v, o, lse};
    for (size_t i = 0; i < 5; i++)
        clReleaseMemObject(all[i]);
    th_case_free(&t);
    clflash_context_free(c);
}
END_TEST

static Suite *gaps_suite(void)
{
    Suite *s = suite_create("layouts_and_limits");
    TCase *tl = tcase_create("layouts");
    tcase_set_timeout(tl, TEST_TIMEOUT_S);
    tcase_add_test(tl, o_overlaps_between_heads_and_batches);
    tcase_add_loop_test(tl, o_disjoint_layouts_accepted, 0, 3);
    tcase_add_test(tl, o_shares_a_buffer_with_q);
    tcase_add_test(tl, lse_shares_a_buffer);
    suite_add_tcase(s, tl);
    TCase *ts = tcase_create("sizes");
    tcase_set_timeout(ts, TEST_TIMEOUT_S);
    tcase_add_loop_test(ts, buffer_too_small_by_offset, 0, 8);
    tcase_add_test(ts, sub_buffer_size_counts);
    tcase_add_test(ts, index_overflow);
    tcase_add_test(ts, dimension_limits);
    tcase_add_test(ts, seq_k_beyond_32_bit_key_indices);
    suite_add_tcase(s, ts);
    TCase *tq = tcase_create("queues");
    tcase_set_timeout(tq, TEST_TIMEOUT_S);
    tcase_add_test(tq, queue_of_another_context);
    tcase_add_test(tq, wait_list_without_count);
    tcase_add_loop_test(tq, failed_calls_enqueue_nothing, 0, 2 * NE_COUNT);
    suite_add_tcase(s, tq);
    return s;
}

int main(void)
{
    return run_suite(gaps_suite());
}
