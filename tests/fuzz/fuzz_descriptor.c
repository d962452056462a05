/*
 * fuzz_descriptor.c - a libFuzzer target for everything in clflash that takes numbers from a
 * caller: the pure tile functions, clflash_status_string, descriptor validation (through
 * clflash_traffic_bytes, which resolves a descriptor without a device) and, on a real OpenCL
 * context created once, clflash_plan_attention, clflash_naive_workspace_bytes and clflash_forward.
 *
 * Built only in the fuzz tree that tests/fuzz/run_fuzz.cmake configures with clang and
 * -fsanitize=fuzzer,address,undefined; CTest runs it for a bounded time on tests/fuzz/corpus/.
 *
 * Besides "no crash, no sanitizer report", it checks oracles:
 *  - clflash_score_matrix_bytes and clflash_tile_bytes equal the exact product, computed in
 *    128-bit arithmetic, saturated to UINT64_MAX; clflash_max_block's B fits and the next
 *    candidate (B + 16, or the next of 1, 2, 4, 8, 16) does not; clflash_dtype_size is 4, 2, 2, 1;
 *  - clflash_status_string is never NULL or empty;
 *  - a descriptor clflash_traffic_bytes calls invalid is refused by clflash_plan_attention and
 *    clflash_forward with the same status, one of clflash's own codes, with a detail message;
 *  - for a valid descriptor, clflash_forward with 64 KiB buffers answers
 *    CLFLASH_ERROR_BUFFER_TOO_SMALL exactly when an extent computed here (128-bit) exceeds them;
 *  - a valid descriptor's O layout really is disjoint (checked by enumeration when O is small).
 * Planning and running a valid descriptor compiles a kernel per distinct shape, so only shapes
 * from a small set are planned or run (at most MAX_SHAPES distinct ones per process); every other
 * valid descriptor stops at the buffer checks, which come before any build.
 */
#include "clflash.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 u128;

#define BUF_BYTES 65536u
#define MAX_SHAPES 16

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_descriptor: check failed: %s\n  ", #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- reading the input --------------------------------------------------------------------------- */
typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t u8(reader *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

static uint32_t u32(reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)u8(r) << (8 * i);
    return v;
}

static uint64_t u64(reader *r)
{
    return (uint64_t)u32(r) | ((uint64_t)u32(r) << 32);
}

/* A dimension: mostly small (0 included), sometimes a limit, sometimes anything. */
static uint32_t dim(reader *r)
{
    static const uint32_t edges[] = {256, 257, 4096, 65535, 65536, 65535u * 16u, 65535u * 16u + 1u,
                                     1u << 31, UINT32_MAX};
    const uint8_t b = u8(r);
    if (b < 200)
        return b % 70;
    if (b < 240)
        return edges[b % (sizeof edges / sizeof edges[0])];
    return u32(r);
}

static float real(reader *r)
{
    static const float edges[] = {0.0f, 1.0f, -1.0f, 0.125f, 1e4f, -1e4f, NAN, -NAN, INFINITY, -INFINITY,
                                  FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, 1e-30f, 65504.0f};
    const uint8_t b = u8(r);
    if (b < 224)
        return edges[b % (sizeof edges / sizeof edges[0])];
    const uint32_t bits = u32(r);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A layout field: mostly 0 (the default), else small, or an edge, or anything. */
static uint64_t field(reader *r)
{
    static const uint64_t edges[] = {UINT64_MAX, UINT64_MAX / 2, UINT64_MAX / 4 + 1, 1ull << 32, 1ull << 62,
                                     UINT64_MAX - 10, 1ull << 40};
    const uint8_t b = u8(r);
    switch (b % 8) {
    case 0: case 1: case 2: case 3: return 0;
    case 4: return u8(r);
    case 5: return u8(r) | ((uint64_t)u8(r) << 8);
    case 6: return edges[(b / 8) % (sizeof edges / sizeof edges[0])];
    default: return u64(r);
    }
}

static clflash_layout layout(reader *r)
{
    clflash_layout l;
    l.offset = field(r);
    l.batch_stride = field(r);
    l.head_stride = field(r);
    l.seq_stride = field(r);
    return l;
}

/* ---- oracles for the pure functions -------------------------------------------------------------- */
static uint64_t sat(u128 x)
{
    return x > (u128)UINT64_MAX ? UINT64_MAX : (uint64_t)x;
}

static void check_pure(reader *r)
{
    const uint64_t a = u8(r) & 1 ? u64(r) : u32(r), b = u8(r) & 1 ? u64(r) : u32(r), s = u8(r) % 9;

    /* score matrix: a * b * s, saturated */
    {
        const u128 ab = (u128)a * b;
        const uint64_t want = ab > (u128)UINT64_MAX ? (s ? UINT64_MAX : 0) : sat(ab * s);
        const uint64_t got = clflash_score_matrix_bytes(a, b, s);
        CHECK(got == want, "score_matrix_bytes(%llu, %llu, %llu) = %llu, want %llu", (unsigned long long)a,
              (unsigned long long)b, (unsigned long long)s, (unsigned long long)got, (unsigned long long)want);
    }
    /* tile: (3*B*d + B*B) * s, saturated */
    {
        const u128 bd = (u128)a * b, bb = (u128)a * a;
        uint64_t want;
        if (bd > (u128)UINT64_MAX || bb > (u128)UINT64_MAX)
            want = s ? UINT64_MAX : 0;
        else
            want = sat((3 * bd + bb) * s);
        const uint64_t got = clflash_tile_bytes(a, b, s);
        CHECK(got == want, "tile_bytes(%llu, %llu, %llu) = %llu, want %llu", (unsigned long long)a,
              (unsigned long long)b, (unsigned long long)s, (unsigned long long)got, (unsigned long long)want);
    }
    /* max block for budget a, head_dim b (kept to a realistic range so the check stays cheap) */
    {
        const uint64_t budget = a, d = b % 100000, es = s % 5;
        const uint64_t B = clflash_max_block(budget, d, es);
#define FITS(x) (clflash_tile_bytes((x), d, es) != UINT64_MAX && clflash_tile_bytes((x), d, es) <= budget)
        if (d == 0 || es == 0) {
            CHECK(B == 0, "max_block(%llu, %llu, %llu) = %llu, want 0", (unsigned long long)budget,
                  (unsigned long long)d, (unsigned long long)es, (unsigned long long)B);
        } else if (B >= 16) {
            CHECK(B % 16 == 0 && FITS(B) && !FITS(B + 16), "max_block(%llu, %llu, %llu) = %llu",
                  (unsigned long long)budget, (unsigned long long)d, (unsigned long long)es, (unsigned long long)B);
        } else {
            CHECK((B == 0 || B == 1 || B == 2 || B == 4 || B == 8) && (B == 0 || FITS(B)) &&
                      !FITS(B == 0 ? 1 : B == 8 ? 16 : 2 * B),
                  "max_block(%llu, %llu, %llu) = %llu", (unsigned long long)budget, (unsigned long long)d,
                  (unsigned long long)es, (unsigned long long)B);
        }
#undef FITS
    }
    {
        const int t = (int)u32(r);
        const size_t want = t == CLFLASH_F32 ? 4 : t == CLFLASH_F16 || t == CLFLASH_BF16 ? 2 : t == CLFLASH_I8 ? 1 : 0;
        CHECK(clflash_dtype_size((clflash_dtype)t) == want, "dtype_size(%d)", t);
        const char *m = clflash_status_string((clflash_status)t);
        CHECK(m != NULL && m[0] != '\0', "status_string(%d) is empty", t);
        m = clflash_status_string((clflash_status)(-2000 - (int)(u8(r) % 40)));
        CHECK(m != NULL && m[0] != '\0', "status_string of a library code is empty");
    }
}

/* ---- the descriptor ------------------------------------------------------------------------------ */
static clflash_attention_desc descriptor(reader *r)
{
    clflash_attention_desc d;
    memset(&d, 0, sizeof d); /* fields added later stay at their defaults unless set below */
    d.struct_size = sizeof d;
    d.batch = dim(r);
    d.heads_q = dim(r);
    d.heads_kv = u8(r) < 160 ? 0 : dim(r);
    d.seq_q = dim(r);
    d.seq_k = dim(r);
    d.head_dim = dim(r);
    {
        const uint8_t t = u8(r);
        d.dtype = (clflash_dtype)(t < 250 ? t % 6 : (int)u32(r));
    }
    d.scale = u8(r) < 128 ? 0.0f : real(r);
    {
        const uint8_t f = u8(r);
        d.flags = f < 192 ? (f & 1u) : f < 250 ? (1u << (f % 32)) : u32(r);
    }
    d.block = u8(r) < 200 ? 0 : dim(r);
    const uint8_t which = u8(r); /* which layouts are not the default */
    if (which & 1) d.q = layout(r);
    if (which & 2) d.k = layout(r);
    if (which & 4) d.v = layout(r);
    if (which & 8) d.o = layout(r);
#ifdef CLFLASH_WINDOW /* the fields added with sliding windows, softcap, int8 and bias */
    if (which & 16) {
        d.window_left = dim(r);
        d.window_right = dim(r);
        d.softcap = u8(r) < 128 ? 0.0f : real(r);
        d.out_dtype = (clflash_dtype)(u8(r) % 6);
        d.q_scale = u8(r) < 128 ? 0.0f : real(r);
        d.k_scale = u8(r) < 128 ? 0.0f : real(r);
        d.v_scale = u8(r) < 128 ? 0.0f : real(r);
        d.bias_broadcast = u8(r) < 200 ? 0 : u32(r);
        /* bias, alibi_slopes, key_lengths stay NULL: a garbage cl_mem is the caller's error */
    }
#endif
    return d;
}

/* 128-bit arithmetic saturating at U128_MAX: far above any 64-bit answer. */
#define U128_MAX (~(u128)0)
static u128 mul128(u128 a, u128 b)
{
    return (a != 0 && b > U128_MAX / a) ? U128_MAX : a * b;
}

static u128 add128(u128 a, u128 b)
{
    return b > U128_MAX - a ? U128_MAX : a + b;
}

/* Extent in bytes of one tensor's layout (last element + 1), exactly (or saturated far above
 * 2^64). Dimensions are >= 1 here (the descriptor was valid). */
static u128 extent(const clflash_layout *l, uint32_t batch, uint32_t heads, uint32_t seq, uint32_t hd, size_t es)
{
    const u128 ss = l->seq_stride ? l->seq_stride : hd;
    const u128 hs = l->head_stride ? l->head_stride : mul128(ss, seq);
    const u128 bs = l->batch_stride ? l->batch_stride : mul128(hs, heads);
    u128 e = l->offset;
    e = add128(e, mul128(batch - 1u, bs));
    e = add128(e, mul128(heads - 1u, hs));
    e = add128(e, mul128(seq - 1u, ss));
    e = add128(e, hd);
    return mul128(e, es);
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* For a small O: 1 if no two elements share an index. */
static int o_disjoint(const clflash_attention_desc *d)
{
    const uint64_t n = (uint64_t)d->batch * d->heads_q * d->seq_q * d->head_dim;
    if (n > 4096)
        return 1; /* not checked */
    uint64_t *idx = malloc(sizeof *idx * (size_t)(n ? n : 1));
    CHECK(idx != NULL, "out of memory");
    const clflash_layout *l = &d->o;
    const uint64_t ss = l->seq_stride ? l->seq_stride : d->head_dim;
    const uint64_t hs = l->head_stride ? l->head_stride : ss * d->seq_q;
    const uint64_t bs = l->batch_stride ? l->batch_stride : hs * d->heads_q;
    size_t m = 0;
    for (uint32_t b = 0; b < d->batch; b++)
        for (uint32_t h = 0; h < d->heads_q; h++)
            for (uint32_t i = 0; i < d->seq_q; i++)
                for (uint32_t c = 0; c < d->head_dim; c++)
                    idx[m++] = l->offset + b * bs + h * hs + i * ss + c; /* no overflow: extent fits */
    qsort(idx, m, sizeof *idx, cmp_u64);
    int ok = 1;
    for (size_t i = 1; i < m && ok; i++)
        ok = idx[i] != idx[i - 1];
    free(idx);
    return ok;
}

/* ---- the device side ----------------------------------------------------------------------------- */
static clflash_context *ctx;
static cl_mem bq, bk, bv, bo, blse;
static unsigned long long shape_keys[MAX_SHAPES];
static int n_shapes;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (getenv("CLFLASH_FUZZ_NO_DEVICE"))
        return 0;
    if (clflash_context_create_default(NULL, &ctx) != CLFLASH_SUCCESS) {
        fprintf(stderr, "fuzz_descriptor: no OpenCL device (%s); fuzzing without one\n", clflash_last_error_detail());
        ctx = NULL;
        return 0;
    }
    cl_int e[5];
    cl_context cl = clflash_context_cl(ctx);
    bq = clCreateBuffer(cl, CL_MEM_READ_WRITE, BUF_BYTES, NULL, &e[0]);
    bk = clCreateBuffer(cl, CL_MEM_READ_WRITE, BUF_BYTES, NULL, &e[1]);
    bv = clCreateBuffer(cl, CL_MEM_READ_WRITE, BUF_BYTES, NULL, &e[2]);
    bo = clCreateBuffer(cl, CL_MEM_READ_WRITE, BUF_BYTES, NULL, &e[3]);
    blse = clCreateBuffer(cl, CL_MEM_READ_WRITE, BUF_BYTES, NULL, &e[4]);
    for (int i = 0; i < 5; i++)
        CHECK(e[i] == CL_SUCCESS, "clCreateBuffer: %d", e[i]);
    /* defined contents, so that kernels that do run read no uninitialised memory */
    {
        static unsigned char zeros[BUF_BYTES];
        cl_mem all[5] = {bq, bk, bv, bo, blse};
        for (int i = 0; i < 5; i++)
            CHECK(clEnqueueWriteBuffer(clflash_context_queue(ctx), all[i], CL_TRUE, 0, BUF_BYTES, zeros, 0, NULL,
                                       NULL) == CL_SUCCESS,
                  "clEnqueueWriteBuffer");
    }
    return 0;
}

/* 1 if the descriptor is one of the few shapes this process may compile a kernel for. */
static int cheap_shape(const clflash_attention_desc *d)
{
    if (d->batch > 2 || d->heads_q > 4 || d->seq_q > 16 || d->seq_k > 16 || d->head_dim > 16 ||
        (d->dtype != CLFLASH_F32 && d->dtype != CLFLASH_F16) || (d->block != 0 && d->block > 16))
        return 0;
#ifdef CLFLASH_WINDOW
    if (d->softcap != 0.0f || d->out_dtype != 0)
        return 0;
#endif
    const unsigned long long key = (unsigned long long)d->head_dim | (unsigned long long)d->dtype << 8 |
                                   (unsigned long long)d->flags << 12 | (unsigned long long)d->block << 20;
    for (int i = 0; i < n_shapes; i++)
        if (shape_keys[i] == key)
            return 1;
    if (n_shapes == MAX_SHAPES)
        return 0;
    shape_keys[n_shapes++] = key;
    return 1;
}

static int library_code(clflash_status st)
{
    return st <= -2000 && st > -3000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    check_pure(&r);

    const clflash_attention_desc d = descriptor(&r);
    const uint32_t block = dim(&r);
    const clflash_algo algo = (clflash_algo)(u8(&r) % 4);
    (void)clflash_traffic_bytes(&d, algo, block);
    (void)clflash_traffic_bytes(&d, CLFLASH_ALGO_FLASH, block);
    const int valid = clflash_traffic_bytes(&d, CLFLASH_ALGO_NAIVE, 0) != 0;
    CHECK(clflash_traffic_bytes(NULL, CLFLASH_ALGO_NAIVE, 0) == 0, "traffic_bytes(NULL) != 0");

    if (valid && d.dtype != CLFLASH_I8) {
        /* A valid descriptor's extents fit 64 bits (else INVALID_LAYOUT) and O is disjoint. */
        const uint32_t hkv = d.heads_kv ? d.heads_kv : d.heads_q;
        const size_t es = clflash_dtype_size(d.dtype);
        CHECK(extent(&d.q, d.batch, d.heads_q, d.seq_q, d.head_dim, es) <= (u128)UINT64_MAX &&
                  extent(&d.k, d.batch, hkv, d.seq_k, d.head_dim, es) <= (u128)UINT64_MAX &&
                  extent(&d.v, d.batch, hkv, d.seq_k, d.head_dim, es) <= (u128)UINT64_MAX &&
                  extent(&d.o, d.batch, d.heads_q, d.seq_q, d.head_dim, es) <= (u128)UINT64_MAX,
              "a descriptor was accepted although a layout addresses more than 2^64 bytes");
        CHECK(o_disjoint(&d), "a descriptor was accepted although two O elements share an address");
    }
    if (!ctx)
        return 0;

    (void)clflash_naive_workspace_bytes(ctx, &d);
    clflash_plan plan = {.struct_size = sizeof plan};
    if (!valid) {
        const clflash_status sp = clflash_plan_attention(ctx, &d, &plan);
        CHECK(sp != CLFLASH_SUCCESS && library_code(sp), "an invalid descriptor was planned: %d %s", sp,
              clflash_status_string(sp));
        CHECK(clflash_last_error_detail()[0] != '\0' && strlen(clflash_last_error_detail()) < 512,
              "no detail for %s", clflash_status_string(sp));
        cl_event done = NULL;
        const clflash_status sf = clflash_forward(ctx, &d, NULL, bq, bk, bv, bo, blse, 0, NULL, &done);
        CHECK(sf == sp, "forward said %s where plan said %s", clflash_status_string(sf), clflash_status_string(sp));
        CHECK(done == NULL, "a failed forward set *done");
        return 0;
    }

    /* valid: what do 64 KiB buffers say? */
    int fits = d.dtype == CLFLASH_F32 || d.dtype == CLFLASH_F16;
#ifdef CLFLASH_WINDOW
    fits = fits && d.out_dtype == 0;
#endif
    if (fits) {
        const uint32_t hkv = d.heads_kv ? d.heads_kv : d.heads_q;
        const size_t es = clflash_dtype_size(d.dtype);
        const u128 lse_bytes = (u128)d.batch * d.heads_q * d.seq_q * 4;
        const int small = extent(&d.q, d.batch, d.heads_q, d.seq_q, d.head_dim, es) <= BUF_BYTES &&
                          extent(&d.k, d.batch, hkv, d.seq_k, d.head_dim, es) <= BUF_BYTES &&
                          extent(&d.v, d.batch, hkv, d.seq_k, d.head_dim, es) <= BUF_BYTES &&
                          extent(&d.o, d.batch, d.heads_q, d.seq_q, d.head_dim, es) <= BUF_BYTES &&
                          lse_bytes <= BUF_BYTES;
        if (!small) {
            cl_event done = NULL;
            const clflash_status sf = clflash_forward(ctx, &d, NULL, bq, bk, bv, bo, blse, 0, NULL, &done);
            CHECK(sf == CLFLASH_ERROR_BUFFER_TOO_SMALL, "forward with 64 KiB buffers for a larger layout: %s (%s)",
                  clflash_status_string(sf), clflash_last_error_detail());
            CHECK(done == NULL, "a failed forward set *done");
            return 0;
        }
        if (!cheap_shape(&d))
            return 0;
        cl_event done = NULL;
        const clflash_status sf = clflash_forward(ctx, &d, NULL, bq, bk, bv, bo, blse, 0, NULL, &done);
        CHECK(sf == CLFLASH_SUCCESS || sf == CLFLASH_ERROR_TILE_TOO_LARGE, "forward of a small valid shape: %s (%s)",
              clflash_status_string(sf), clflash_last_error_detail());
        if (done) {
            CHECK(clWaitForEvents(1, &done) == CL_SUCCESS, "clWaitForEvents");
            clReleaseEvent(done);
        }
    }
    if (cheap_shape(&d)) {
        memset(&plan, 0, sizeof plan);
        plan.struct_size = sizeof plan;
        const clflash_status sp = clflash_plan_attention(ctx, &d, &plan);
        CHECK(sp == CLFLASH_SUCCESS || sp == CLFLASH_ERROR_TILE_TOO_LARGE || sp == CLFLASH_ERROR_UNSUPPORTED,
              "plan of a small valid shape: %s (%s)", clflash_status_string(sp), clflash_last_error_detail());
        if (sp == CLFLASH_SUCCESS) {
            CHECK(plan.block >= 1 && (d.block == 0 || plan.block == d.block), "plan.block %u (forced %u)", plan.block,
                  d.block);
            CHECK(plan.kernel_local_bytes <= plan.local_mem_budget, "kernel_local_bytes above the budget");
            CHECK(plan.tiles_q == (d.seq_q + (uint64_t)plan.block - 1) / plan.block, "tiles_q");
            CHECK(plan.tiles_k == (d.seq_k + (uint64_t)plan.block - 1) / plan.block, "tiles_k");
            CHECK(plan.kernel != NULL, "plan.kernel is NULL");
        }
    }
    return 0;
}
