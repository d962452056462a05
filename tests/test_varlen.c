/*
 * test_varlen.c - variable-length packed batches (clflash.h, "Variable-length batches") against
 * the fp64 reference run on each sequence as a batch-1 problem of its own: the forward on every
 * portable path (the device's default: on PoCL the CPU path and its decoding kernel; the
 * register-tiled and the lane-per-row GPU paths) and the backward's dQ, dK and dV on the same
 * contexts, in f32, f16 and bf16, with 17 sequences of different lengths from 1 to 300 tokens,
 * empty sequences (no queries, no keys, neither), one-token sequences, causal, windows, ALiBi and
 * softcap, GQA and MQA, forced split-KV parts, decoding steps, token-major and odd head-major
 * layouts, and hostile cumulative lengths (decreasing, negative, past the total, overlapping):
 * rows covered by one sequence must be right, rows no sequence covers untouched. A varlen call
 * whose sequences are all equal gives the same bits as the ordinary call on the same memory.
 * Then validation: every refusal, and that a refused call writes nothing.
 */
#include "backward_harness.h"
#include "check_common.h"
#include "varlen_harness.h"

#include <stdint.h>

static const char *const path_names[N_PATHS] = {"default", "register tiles", "lanes"};

/* ---- the length patterns ------------------------------------------------------------------------ */
typedef enum {
    P_RAMP,    /* 17 sequences, every length different, 1 .. 300, two spare rows around them */
    P_EMPTY,   /* sequences with no queries, no keys, neither, one token each */
    P_DECODE,  /* one query per sequence, 1 .. 200 keys */
    P_HOSTILE, /* decreasing, negative and too large values, ranges that do not overlap */
    P_OVERLAP, /* hostile values whose ranges overlap (the forward: only rows covered once are checked) */
    P_EQUAL    /* three sequences of the same lengths, no spare rows: an ordinary batch */
} pattern;

typedef struct {
    int32_t cu_q[18], cu_k[18];
    uint32_t batch, total_q, total_k, seq_q, seq_k;
} lengths;

static void make_lengths(pattern p, lengths *l)
{
    int32_t lq[17], lk[17];
    memset(l, 0, sizeof *l);
    switch (p) {
    case P_RAMP:
        l->batch = 17;
        for (int b = 0; b < 17; b++) {
            lq[b] = 1 + (113 * b) % 300;
            lk[b] = 1 + (71 * b + 50) % 300;
        }
        l->total_q = vl_cumulate(lq, 17, 3, l->cu_q) + 2;
        l->total_k = vl_cumulate(lk, 17, 0, l->cu_k) + 1;
        break;
    case P_EMPTY: {
        static const int32_t q[8] = {0, 3, 1, 0, 7, 1, 20, 2}, k[8] = {5, 0, 1, 0, 19, 40, 3, 2};
        l->batch = 8;
        l->total_q = vl_cumulate(q, 8, 0, l->cu_q);
        l->total_k = vl_cumulate(k, 8, 1, l->cu_k);
        break;
    }
    case P_DECODE: {
        static const int32_t q[5] = {1, 1, 1, 1, 1}, k[5] = {37, 1, 200, 64, 129};
        l->batch = 5;
        l->total_q = vl_cumulate(q, 5, 0, l->cu_q);
        l->total_k = vl_cumulate(k, 5, 0, l->cu_k);
        break;
    }
    case P_HOSTILE: {
        /* queries: [4, 9), [9, 16) cut to 6 rows, empty (from the total down to 0), [0, 3), empty
         * (3 down to 1), [1, 1); keys: [10, 30) cut to 18, [30, 40), empty, [0, 6), empty, [2, 2) */
        static const int32_t q[7] = {4, 9, 2000000000, -5, 3, 1, 1}, k[7] = {10, 30, 2000000000, -1, 6, 2, 2};
        l->batch = 6;
        memcpy(l->cu_q, q, sizeof q);
        memcpy(l->cu_k, k, sizeof k);
        l->total_q = 16;
        l->total_k = 40;
        l->seq_q = 6;
        l->seq_k = 18;
        break;
    }
    case P_OVERLAP: {
        static const int32_t q[8] = {3, 20, 12, -4, 9, 40, 1000, 31};
        static const int32_t k[8] = {0, 50, 30, INT32_MIN, 2000000000, 10, 60, 60};
        l->batch = 7;
        memcpy(l->cu_q, q, sizeof q);
        memcpy(l->cu_k, k, sizeof k);
        l->total_q = 40;
        l->total_k = 60;
        l->seq_q = 24;
        l->seq_k = 45;
        break;
    }
    case P_EQUAL: {
        static const int32_t q[3] = {37, 37, 37}, k[3] = {53, 53, 53};
        l->batch = 3;
        l->total_q = vl_cumulate(q, 3, 0, l->cu_q);
        l->total_k = vl_cumulate(k, 3, 0, l->cu_k);
        break;
    }
    }
}

typedef struct {
    pattern lens;
    clflash_dtype dtype;
    uint32_t heads_q, heads_kv, head_dim, flags, window_left, window_right;
    float softcap;
    int alibi;
    uint32_t num_splits;
    int odd_layout;
} vcase;

static vl_spec spec_of(const vcase *v, lengths *l)
{
    make_lengths(v->lens, l);
    vl_spec s = {0};
    s.dtype = v->dtype;
    s.batch = l->batch;
    s.heads_q = v->heads_q;
    s.heads_kv = v->heads_kv;
    s.head_dim = v->head_dim;
    s.seq_q = l->seq_q;
    s.seq_k = l->seq_k;
    s.cu_q = l->cu_q;
    s.cu_k = l->cu_k;
    s.total_q = l->total_q;
    s.total_k = l->total_k;
    s.flags = v->flags;
    s.window_left = v->window_left;
    s.window_right = v->window_right;
    s.softcap = v->softcap;
    s.alibi = v->alibi;
    s.num_splits = v->num_splits;
    s.odd_layout = v->odd_layout;
    return s;
}

#define C CLFLASH_CAUSAL
#define W CLFLASH_WINDOW
/* lengths, dtype, heads q/kv, head_dim, flags, window, softcap, alibi, splits, odd layout */
static const vcase forward_cases[] = {
    {P_RAMP, CLFLASH_F32, 4, 2, 64, C, 0, 0, 0.0f, 0, 0, 0},
    {P_RAMP, CLFLASH_F16, 4, 4, 32, W, 24, 8, 0.0f, 0, 0, 1},
    {P_RAMP, CLFLASH_BF16, 6, 2, 48, C, 0, 0, 20.0f, 1, 3, 0},
    {P_EMPTY, CLFLASH_F32, 2, 1, 16, C, 0, 0, 0.0f, 0, 3, 0},
    {P_EMPTY, CLFLASH_F16, 3, 3, 24, 0, 0, 0, 0.0f, 0, 0, 1},
    {P_DECODE, CLFLASH_F16, 8, 2, 64, 0, 0, 0, 0.0f, 0, 0, 0},
    {P_DECODE, CLFLASH_BF16, 4, 1, 128, C | W, 50, 0, 0.0f, 1, 3, 0},
    {P_HOSTILE, CLFLASH_F32, 2, 1, 8, C, 0, 0, 0.0f, 0, 0, 1},
    {P_OVERLAP, CLFLASH_F16, 2, 2, 16, 0, 0, 0, 0.0f, 0, 2, 0},
    {P_RAMP, CLFLASH_F16, 8, 2, 128, C, 0, 0, 0.0f, 0, 0, 0},
};
static const vcase backward_cases[] = {
    {P_RAMP, CLFLASH_F32, 4, 2, 64, C, 0, 0, 0.0f, 0, 0, 0},
    {P_RAMP, CLFLASH_F16, 4, 4, 32, W, 24, 8, 0.0f, 0, 0, 1},
    {P_EMPTY, CLFLASH_BF16, 2, 1, 16, C, 0, 0, 15.0f, 1, 0, 0},
    {P_DECODE, CLFLASH_F32, 8, 2, 64, 0, 0, 0, 0.0f, 0, 0, 1},
    {P_HOSTILE, CLFLASH_F16, 2, 1, 8, C, 0, 0, 0.0f, 0, 0, 0},
    {P_RAMP, CLFLASH_F16, 4, 2, 128, C, 0, 0, 0.0f, 0, 0, 0},
};
#undef C
#undef W
#define N_FORWARD N_OF(forward_cases)
#define N_BACKWARD N_OF(backward_cases)

/* _i: case * N_PATHS + path. */
START_TEST(varlen_forward)
{
    const vcase *v = &forward_cases[_i / N_PATHS];
    const path_kind path = (path_kind)(_i % N_PATHS);
    lengths l;
    const vl_spec s = spec_of(v, &l);
    char what[256], msg[512];
    snprintf(what, sizeof what, "forward %s, %s path", vl_spec_str(&s, msg, sizeof msg), path_names[path]);
    clflash_context *ctx = path_context(path);
    vl_case c;
    ck_assert_msg(vl_case_init(&c, &s, 0, 7000 + (uint64_t)_i) == 0, "%s: out of host memory", what);
    const char *kernel = "?";
    uint32_t splits = 0;
    const clflash_status st = vl_run_forward(ctx, &c, &kernel, &splits);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    if (v->num_splits)
        ck_assert_uint_eq(splits, v->num_splits);
    ck_assert_msg(vl_check_forward(&c, msg, sizeof msg) == 0, "%s (%s, %u parts): %s", what, kernel, splits, msg);
    if (strcmp(kernel, "nv_mma_forward") == 0 && splits > 1 && v->lens != P_OVERLAP) {
        /* the tensor-core kernel merged the parts in its own launch; the merge kernel must give
         * the same bits (O and lse; not where sequences overlap: there the writes race) */
        const size_t ob = (size_t)c.nq * c.esize, lb = (size_t)c.nlse * sizeof(float);
        void *fused = malloc(ob + lb);
        ck_assert(fused != NULL);
        memcpy(fused, c.o, ob);
        memcpy((char *)fused + ob, c.lse, lb);
        ck_assert_int_eq(clflash_context_set_tuning(ctx, "nv_forward.fused_merge=0"), CLFLASH_SUCCESS);
        vl_reset_forward_outputs(&c);
        ck_assert_int_eq(vl_run_forward(ctx, &c, &kernel, &splits), CLFLASH_SUCCESS);
        ck_assert_msg(memcmp(fused, c.o, ob) == 0 && memcmp((char *)fused + ob, c.lse, lb) == 0,
                      "%s: the merge kernel's O or lse differs from the fused merge's", what);
        free(fused);
    }
    vl_case_free(&c);
    clflash_context_free(ctx);
}
END_TEST

START_TEST(varlen_backward)
{
    const vcase *v = &backward_cases[_i / N_PATHS];
    const path_kind path = (path_kind)(_i % N_PATHS);
    lengths l;
    const vl_spec s = spec_of(v, &l);
    char what[256], msg[512];
    snprintf(what, sizeof what, "backward %s, %s path", vl_spec_str(&s, msg, sizeof msg), path_names[path]);
    clflash_context *ctx = path_context(path);
    vl_case c;
    ck_assert_msg(vl_case_init(&c, &s, 1, 8000 + (uint64_t)_i) == 0, "%s: out of host memory", what);
    const char *kernel = "?";
    clflash_status st = vl_run_backward(ctx, &c, &kernel);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s: %s (%s)", what, clflash_status_string(st), clflash_last_error_detail());
    ck_assert_msg(vl_check_backward(&c, msg, sizeof msg) == 0, "%s (%s): %s", what, kernel, msg);
    /* deterministic: a second run gives the same bits */
    const uint64_t qb = c.nq * c.esize, kb = c.nk * c.esize;
    void *first = malloc(qb + 2 * kb);
    ck_assert(first != NULL);
    memcpy(first, c.dq, qb);
    memcpy((char *)first + qb, c.dk, kb);
    memcpy((char *)first + qb + kb, c.dv, kb);
    st = vl_run_backward(ctx, &c, NULL);
    ck_assert_int_eq(st, CLFLASH_SUCCESS);
    ck_assert_msg(memcmp(first, c.dq, qb) == 0 && memcmp((char *)first + qb, c.dk, kb) == 0 &&
                      memcmp((char *)first + qb + kb, c.dv, kb) == 0,
                  "%s: two runs differ", what);
    free(first);
    vl_case_free(&c);
    clflash_context_free(ctx);
}
END_TEST

/* Three sequences of equal lengths packed token-major are an ordinary [batch][seq][heads][d]
 * batch: the same kernel gives the same bits (VARLEN changes where rows are, not how they are
 * computed), and lse[h][t] is the ordinary lse[b][h][i]. _i: the path (default, register tiles). */
START_TEST(varlen_equals_ordinary)
{
    const vcase v = {P_EQUAL, CLFLASH_F16, 4, 2, 40, CLFLASH_CAUSAL, 0, 0, 0.0f, 0, 1, 0};
    lengths l;
    const vl_spec s = spec_of(&v, &l);
    /* portable kernels only, so that the two calls share one (an NVIDIA GPU would give the
     * ordinary f16 call its tensor cores) */
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.portable_only = 1;
    if (_i != PATH_DEFAULT)
        opt.tuning = "portable.cpu_path=0";
    clflash_context *ctx = test_context(&opt);
    vl_case c;
    ck_assert(vl_case_init(&c, &s, 0, 42) == 0);
    const char *kernel = "?";
    ck_assert_int_eq(vl_run_forward(ctx, &c, &kernel, NULL), CLFLASH_SUCCESS);
    char msg[512];
    ck_assert_msg(vl_check_forward(&c, msg, sizeof msg) == 0, "%s", msg);

    const uint32_t B = 3, sq = 37, sk = 53, hq = 4, hk = 2, D = 40;
    clflash_attention_desc d = c.d;
    d.cu_seqlens_q = d.cu_seqlens_k = NULL;
    d.total_q = d.total_k = 0;
    d.q = d.o = (clflash_layout){0, (uint64_t)sq * hq * D, D, (uint64_t)hq * D};
    d.k = d.v = (clflash_layout){0, (uint64_t)sk * hk * D, D, (uint64_t)hk * D};
    cl_context cl = clflash_context_cl(ctx);
    cl_int err;
    const size_t es = c.esize, nlse = (size_t)B * hq * sq;
    cl_mem q = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, c.nq * es, c.q, &err);
    cl_mem k = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, c.nk * es, c.k, &err);
    cl_mem vb = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, c.nk * es, c.v, &err);
    cl_mem o = clCreateBuffer(cl, CL_MEM_READ_WRITE, c.nq * es, NULL, &err);
    cl_mem lse = clCreateBuffer(cl, CL_MEM_READ_WRITE, nlse * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clflash_plan plan = {.struct_size = sizeof plan};
    ck_assert_int_eq(clflash_plan_attention(ctx, &d, &plan), CLFLASH_SUCCESS);
    ck_assert_str_eq(plan.kernel, kernel);
    ck_assert_int_eq(clflash_forward(ctx, &d, NULL, q, k, vb, o, lse, 0, NULL, NULL), CLFLASH_SUCCESS);
    void *o_plain = malloc(c.nq * es);
    float *lse_plain = malloc(nlse * sizeof(float));
    ck_assert(o_plain && lse_plain);
    cl_command_queue qu = clflash_context_queue(ctx);
    ck_assert_int_eq(clEnqueueReadBuffer(qu, o, CL_TRUE, 0, c.nq * es, o_plain, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(qu, lse, CL_TRUE, 0, nlse * sizeof(float), lse_plain, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_msg(memcmp(o_plain, c.o, c.nq * es) == 0, "%s: O differs from the ordinary call's", kernel);
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t h = 0; h < hq; h++)
            for (uint32_t i = 0; i < sq; i++) {
                const float a = lse_plain[((size_t)b * hq + h) * sq + i], p = c.lse[(size_t)h * c.d.total_q + b * sq + i];
                ck_assert_msg(memcmp(&a, &p, sizeof a) == 0, "%s: lse[%u][%u][%u] %.9g, packed %.9g", kernel, b, h, i,
                              a, p);
            }
    free(o_plain);
    free(lse_plain);
    const cl_mem all[5] = {q, k, vb, o, lse};
    for (int i = 0; i < 5; i++)
        clReleaseMemObject(all[i]);
    vl_case_free(&c);
    clflash_context_free(ctx);
}
END_TEST

/* clflash_forward_host with a variable-length batch: the rows no sequence covers keep the caller's
 * values (the host arrays are copied in first), the others are the reference's. */
START_TEST(varlen_forward_host)
{
    const vcase v = {P_HOSTILE, CLFLASH_F32, 2, 1, 8, CLFLASH_CAUSAL, 0, 0, 0.0f, 0, 0, 1};
    lengths l;
    const vl_spec s = spec_of(&v, &l);
    clflash_context *ctx = test_context(NULL);
    vl_case c;
    ck_assert(vl_case_init(&c, &s, 0, 77) == 0);
    cl_int err;
    const size_t cu_bytes = (s.batch + 1) * sizeof(int32_t);
    cl_mem cu_q = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, cu_bytes, c.cu_q,
                                 &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem cu_k = clCreateBuffer(clflash_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, cu_bytes, c.cu_k,
                                 &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clflash_attention_desc d = c.d;
    d.cu_seqlens_q = cu_q;
    d.cu_seqlens_k = cu_k;
    vl_reset_forward_outputs(&c);
    const clflash_status st = clflash_forward_host(ctx, &d, c.q, c.k, c.v, c.o, c.lse);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    char msg[512];
    ck_assert_msg(vl_check_forward(&c, msg, sizeof msg) == 0, "%s", msg);
    clReleaseMemObject(cu_q);
    clReleaseMemObject(cu_k);
    vl_case_free(&c);
    clflash_context_free(ctx);
}
END_TEST

/* ---- validation ---------------------------------------------------------------------------------- */

/* A small valid varlen call (f32, two sequences of 3 and 2 queries, 4 and 5 keys, heads 2/1,
 * d 8) and its buffers; each check below changes one thing. */
typedef struct {
    clflash_context *ctx;
    clflash_attention_desc d;
    cl_mem q, k, v, o, lse, cu_q, cu_k, dq, dk, dv, d_o;
} small_call;

static void small_init(small_call *s)
{
    s->ctx = test_context(NULL);
    s->d = th_desc(2, 2, 1, 3, 5, 8, CLFLASH_F32, CLFLASH_CAUSAL);
    s->d.total_q = 5;
    s->d.total_k = 9;
    s->q = test_buffer(s->ctx, 5 * 2 * 8 * 4);
    s->o = test_buffer(s->ctx, 5 * 2 * 8 * 4);
    s->d_o = test_buffer(s->ctx, 5 * 2 * 8 * 4);
    s->dq = test_buffer(s->ctx, 5 * 2 * 8 * 4);
    s->k = test_buffer(s->ctx, 9 * 8 * 4);
    s->v = test_buffer(s->ctx, 9 * 8 * 4);
    s->dk = test_buffer(s->ctx, 9 * 8 * 4);
    s->dv = test_buffer(s->ctx, 9 * 8 * 4);
    s->lse = test_buffer(s->ctx, 2 * 5 * 4);
    s->cu_q = test_buffer(s->ctx, 3 * 4);
    s->cu_k = test_buffer(s->ctx, 3 * 4);
    const int32_t cq[3] = {0, 3, 5}, ck[3] = {0, 4, 9};
    cl_command_queue qu = clflash_context_queue(s->ctx);
    ck_assert_int_eq(clEnqueueWriteBuffer(qu, s->cu_q, CL_TRUE, 0, sizeof cq, cq, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueWriteBuffer(qu, s->cu_k, CL_TRUE, 0, sizeof ck, ck, 0, NULL, NULL), CL_SUCCESS);
    float zeros[80] = {0};
    const cl_mem in[6] = {s->q, s->o, s->d_o, s->k, s->v, s->lse};
    const size_t bytes[6] = {320, 320, 320, 288, 288, 40};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(clEnqueueWriteBuffer(qu, in[i], CL_TRUE, 0, bytes[i], zeros, 0, NULL, NULL), CL_SUCCESS);
    s->d.cu_seqlens_q = s->cu_q;
    s->d.cu_seqlens_k = s->cu_k;
}

static void small_free(small_call *s)
{
    const cl_mem all[11] = {s->q, s->k, s->v, s->o, s->lse, s->cu_q, s->cu_k, s->dq, s->dk, s->dv, s->d_o};
    for (int i = 0; i < 11; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    clflash_context_free(s->ctx);
}

static clflash_status fwd(small_call *s, const clflash_attention_desc *d)
{
    return clflash_forward(s->ctx, d, NULL, s->q, s->k, s->v, s->o, s->lse, 0, NULL, NULL);
}

static clflash_status bwd(small_call *s, const clflash_attention_desc *d, cl_mem lse, cl_mem dq)
{
    return clflash_backward(s->ctx, d, NULL, s->q, s->k, s->v, s->o, s->d_o, lse, dq, s->dk, s->dv, 0, NULL, NULL);
}

#define REFUSED(call, status, text)                                                                             \
    do {                                                                                                        \
        const clflash_status st_ = (call);                                                                      \
        ck_assert_msg(st_ == (status), "%s: %s, expected %s (%s)", #call, clflash_status_string(st_),          \
                      clflash_status_string(status), clflash_last_error_detail());                              \
        ck_assert_msg(strstr(clflash_last_error_detail(), (text)) != NULL, "%s: detail '%s' lacks '%s'", #call, \
                      clflash_last_error_detail(), (text));                                                     \
    } while (0)

START_TEST(varlen_validation)
{
    small_call s;
    small_init(&s);
    clflash_attention_desc d = s.d;
    ck_assert_int_eq(fwd(&s, &d), CLFLASH_SUCCESS);
    ck_assert_int_eq(bwd(&s, &d, s.lse, s.dq), CLFLASH_SUCCESS);
    ck_assert_int_eq(clFinish(clflash_context_queue(s.ctx)), CL_SUCCESS);
    clflash_plan plan = {.struct_size = sizeof plan};
    ck_assert_int_eq(clflash_plan_attention(s.ctx, &d, &plan), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_backward(s.ctx, &d, &plan), CLFLASH_SUCCESS);
    ck_assert_str_eq(plan.kernel, "flash_backward_portable");
    /* the cost model counts every sequence as the longest (the lengths are on the device); the
     * naive path refuses varlen, so its model gives 0 */
    clflash_attention_desc padded = s.d;
    padded.cu_seqlens_q = padded.cu_seqlens_k = NULL;
    padded.total_q = padded.total_k = 0;
    ck_assert_uint_gt(clflash_traffic_bytes(&padded, CLFLASH_ALGO_FLASH, 16), 0);
    ck_assert_uint_eq(clflash_traffic_bytes(&d, CLFLASH_ALGO_FLASH, 16),
                      clflash_traffic_bytes(&padded, CLFLASH_ALGO_FLASH, 16));
    ck_assert_uint_gt(clflash_traffic_bytes(&padded, CLFLASH_ALGO_NAIVE, 0), 0);
    ck_assert_uint_eq(clflash_traffic_bytes(&d, CLFLASH_ALGO_NAIVE, 0), 0);

    /* one of the two buffers, or the totals alone */
    d = s.d;
    d.cu_seqlens_k = NULL;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens_k is NULL");
    d = s.d;
    d.cu_seqlens_q = NULL;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens_q is NULL");
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens_q is NULL");
    d.cu_seqlens_k = NULL;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_ARGUMENT, "total_q or total_k is set");
    /* totals */
    d = s.d;
    d.total_q = 0;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_SHAPE, "total_q is 0");
    d = s.d;
    d.total_k = 0;
    REFUSED(clflash_plan_attention(s.ctx, &d, &plan), CLFLASH_ERROR_INVALID_SHAPE, "total_k is 0");
    d = s.d;
    d.total_q = (uint32_t)INT32_MAX + 1u;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_SHAPE, "total_q");
    /* a batch stride on any tensor */
    for (int i = 0; i < 4; i++) {
        d = s.d;
        clflash_layout *const l = i == 0 ? &d.q : i == 1 ? &d.k : i == 2 ? &d.v : &d.o;
        l->batch_stride = 80;
        REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_LAYOUT, "batch_stride 80");
    }
    d = s.d;
    d.o.batch_stride = 16;
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_INVALID_LAYOUT, "batch_stride");
    /* buffers smaller than the totals need */
    d = s.d;
    d.total_q = 6;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_BUFFER_TOO_SMALL, "q holds");
    d = s.d;
    d.total_k = 10;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_BUFFER_TOO_SMALL, "k holds");
    d = s.d;
    d.o.offset = 1;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_BUFFER_TOO_SMALL, "o holds");
    d = s.d;
    d.batch = 3; /* 4 lengths needed, 3 given */
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_BUFFER_TOO_SMALL, "cu_seqlens_q");
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_BUFFER_TOO_SMALL, "cu_seqlens_q");
    cl_mem small_lse = test_buffer(s.ctx, 9 * 4); /* [heads_q][total_q] needs 10 floats */
    d = s.d;
    REFUSED(clflash_forward(s.ctx, &d, NULL, s.q, s.k, s.v, s.o, small_lse, 0, NULL, NULL),
            CLFLASH_ERROR_BUFFER_TOO_SMALL, "lse holds");
    REFUSED(bwd(&s, &d, small_lse, s.dq), CLFLASH_ERROR_BUFFER_TOO_SMALL, "lse holds");
    clReleaseMemObject(small_lse);
    cl_mem small_dq = test_buffer(s.ctx, 5 * 2 * 8 * 4 - 4);
    REFUSED(bwd(&s, &d, s.lse, small_dq), CLFLASH_ERROR_BUFFER_TOO_SMALL, "dq holds");
    clReleaseMemObject(small_dq);
    /* features it does not take */
    cl_mem lens = test_buffer(s.ctx, 2 * 4), floats = test_buffer(s.ctx, 2 * 5 * 9 * 4), table = test_buffer(s.ctx, 2 * 4);
    d = s.d;
    d.key_lengths = lens;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_UNSUPPORTED, "key_lengths");
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_UNSUPPORTED, "key_lengths");
    d = s.d;
    d.bias = floats;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_UNSUPPORTED, "bias");
    REFUSED(clflash_plan_attention(s.ctx, &d, &plan), CLFLASH_ERROR_UNSUPPORTED, "bias");
    cl_mem dbias = test_buffer(s.ctx, 2 * 5 * 9 * 4);
    d.bias_grad = dbias;
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_UNSUPPORTED, "bias");
    d.bias = NULL; /* bias_grad alone: still the varlen refusal, not the missing bias */
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_UNSUPPORTED, "bias_grad");
    clReleaseMemObject(dbias);
    d = s.d;
    d.block_table = table;
    d.page_size = 16;
    d.pages_per_seq = 1;
    d.num_pages = 1;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_UNSUPPORTED, "block_table");
    clReleaseMemObject(lens), clReleaseMemObject(floats), clReleaseMemObject(table);
    /* the lengths are inputs: never an output of the call */
    d = s.d;
    d.cu_seqlens_q = s.o;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens");
    d = s.d;
    d.cu_seqlens_k = s.lse;
    REFUSED(fwd(&s, &d), CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens");
    d = s.d;
    d.cu_seqlens_k = s.dk;
    REFUSED(bwd(&s, &d, s.lse, s.dq), CLFLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens");
    /* the naive paths refuse a variable-length batch */
    d = s.d;
    REFUSED(clflash_forward_naive(s.ctx, &d, NULL, s.q, s.k, s.v, s.o, s.lse, 0, NULL, NULL),
            CLFLASH_ERROR_UNSUPPORTED, "clflash_forward_naive does not take a variable-length batch");
    REFUSED(clflash_backward_naive(s.ctx, &d, NULL, s.q, s.k, s.v, s.o, s.d_o, s.lse, s.dq, s.dk, s.dv, 0, NULL, NULL),
            CLFLASH_ERROR_UNSUPPORTED, "clflash_backward_naive does not take a variable-length batch");
    small_free(&s);
}
END_TEST

/* A refused call writes nothing: O and lse keep what they held. */
START_TEST(refused_call_writes_nothing)
{
    small_call s;
    small_init(&s);
    float sentinel[80], back[80];
    for (int i = 0; i < 80; i++)
        sentinel[i] = -31.0f - (float)i;
    cl_command_queue qu = clflash_context_queue(s.ctx);
    ck_assert_int_eq(clEnqueueWriteBuffer(qu, s.o, CL_TRUE, 0, sizeof sentinel, sentinel, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueWriteBuffer(qu, s.lse, CL_TRUE, 0, 40, sentinel, 0, NULL, NULL), CL_SUCCESS);
    clflash_attention_desc d = s.d;
    d.total_k = 10;
    ck_assert_int_eq(fwd(&s, &d), CLFLASH_ERROR_BUFFER_TOO_SMALL);
    ck_assert_int_eq(clEnqueueReadBuffer(qu, s.o, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(memcmp(back, sentinel, sizeof back), 0);
    ck_assert_int_eq(clEnqueueReadBuffer(qu, s.lse, CL_TRUE, 0, 40, back, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(memcmp(back, sentinel, 40), 0);
    small_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("varlen");
    TCase *tf = tcase_create("forward");
    tcase_set_timeout(tf, TEST_TIMEOUT_S);
    tcase_add_loop_test(tf, varlen_forward, 0, (int)N_FORWARD * N_PATHS);
    tcase_add_loop_test(tf, varlen_equals_ordinary, PATH_DEFAULT, PATH_LANES);
    suite_add_tcase(s, tf);
    TCase *tb = tcase_create("backward");
    tcase_set_timeout(tb, TEST_TIMEOUT_S);
    tcase_add_loop_test(tb, varlen_backward, 0, (int)N_BACKWARD * N_PATHS);
    suite_add_tcase(s, tb);
    TCase *tv = tcase_create("validation");
    tcase_set_timeout(tv, TEST_TIMEOUT_S);
    tcase_add_test(tv, varlen_validation);
    tcase_add_test(tv, refused_call_writes_nothing);
    tcase_add_test(tv, varlen_forward_host);
    suite_add_tcase(s, tv);
    return run_suite(s);
}
