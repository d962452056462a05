/*
 * test_struct_size.c - the binary-interface rule of clflash.h's caller-allocated structs: clflash
 * reads and writes only the first struct_size bytes of a clflash_context_options,
 * clflash_attention_desc or clflash_plan.
 *
 * How it shows "nothing past struct_size": each struct is placed so that its last byte is the last
 * byte of a readable page, followed by a page mapped PROT_NONE. A read or write one byte further
 * kills the test (Check reports the signal). The structs are as short as a program built against
 * clflash 0.5.0's header has them (the fields of 0.5.0, nothing after), so every field added since
 * lies in the guard page; the calls must succeed and give what the full-size structs give.
 * Also: a newer program's longer structs (accepted when the unknown bytes are zero, refused with
 * CLFLASH_ERROR_UNSUPPORTED otherwise), and struct_size values that are refused.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "check_common.h"

#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

/* The structs of 0.5.0: every field up to and including these, and the tail padding a compiler
 * gives such a struct (its sizeof, the struct_size its program passes). */
#define OPTIONS_0_5_END (offsetof(clflash_context_options, portable_only) + sizeof(uint32_t))
#define DESC_0_5_END (offsetof(clflash_attention_desc, key_lengths) + sizeof(cl_mem))
#define PLAN_0_5_END (offsetof(clflash_plan, block_q) + sizeof(uint32_t))
#define SIZEOF_UP_TO(type, end) (((end) + _Alignof(type) - 1) / _Alignof(type) * _Alignof(type))
#define OPTIONS_0_5 SIZEOF_UP_TO(clflash_context_options, OPTIONS_0_5_END)
#define DESC_0_5 SIZEOF_UP_TO(clflash_attention_desc, DESC_0_5_END)
#define PLAN_0_5 SIZEOF_UP_TO(clflash_plan, PLAN_0_5_END)

/* Two pages, the second unreadable; the returned pointer has `size` bytes up to the guard. */
typedef struct {
    unsigned char *map;
    size_t page;
} guarded;

static void *guard_alloc(guarded *g, size_t size)
{
    g->page = (size_t)sysconf(_SC_PAGESIZE);
    g->map = mmap(NULL, 2 * g->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_msg(g->map != MAP_FAILED, "mmap failed");
    ck_assert_int_eq(mprotect(g->map + g->page, g->page, PROT_NONE), 0);
    ck_assert_uint_le(size, g->page);
    return g->map + g->page - size;
}

static void guard_free(guarded *g)
{
    munmap(g->map, 2 * g->page);
}

/* A small valid problem (heads 2/1, seq 37 x 53, d = 16, f32, causal). */
static clflash_attention_desc full_desc(void)
{
    return th_desc(1, 2, 1, 37, 53, 16, CLFLASH_F32, CLFLASH_CAUSAL);
}

/* Copies the first `size` bytes of a full descriptor against the guard, with struct_size = size. */
static clflash_attention_desc *guarded_desc(guarded *g, size_t size)
{
    clflash_attention_desc d = full_desc();
    d.struct_size = (uint32_t)size;
    clflash_attention_desc *at = guard_alloc(g, size);
    memcpy(at, &d, size);
    return at;
}

START_TEST(old_descriptor_is_read_no_further)
{
    clflash_context *c = test_context(NULL);
    guarded g;
    const clflash_attention_desc *old = guarded_desc(&g, DESC_0_5);
    const clflash_attention_desc full = full_desc();

    ck_assert_uint_eq(clflash_traffic_bytes(old, CLFLASH_ALGO_FLASH, 16), clflash_traffic_bytes(&full, CLFLASH_ALGO_FLASH, 16));
    clflash_plan p_old = {.struct_size = sizeof p_old}, p_full = {.struct_size = sizeof p_full};
    ck_assert_int_eq(clflash_plan_attention(c, old, &p_old), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_plan_attention(c, &full, &p_full), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p_old.block, p_full.block);
    ck_assert_str_eq(p_old.kernel, p_full.kernel);

    /* the whole forward through the short descriptor, against the reference */
    th_case t;
    ck_assert_int_eq(th_case_init(&t, &full, 7), 0);
    th_case_reference(&t);
    ck_assert_int_eq(clflash_forward_host(c, old, t.q, t.k, t.v, t.o, t.lse), CLFLASH_SUCCESS);
    char msg[1024];
    ck_assert_msg(th_check(&t, 1, REF_PATH_FLASH, msg, sizeof msg) == 0, "%s", msg);
    th_case_free(&t);
    guard_free(&g);
    clflash_context_free(c);
}
END_TEST

START_TEST(old_plan_is_written_no_further)
{
    clflash_context *c = test_context(NULL);
    const clflash_attention_desc d = full_desc();
    clflash_plan full = {.struct_size = sizeof full};
    ck_assert_int_eq(clflash_plan_attention(c, &d, &full), CLFLASH_SUCCESS);

    guarded g;
    clflash_plan *old = guard_alloc(&g, PLAN_0_5);
    memset(old, 0x5a, PLAN_0_5);
    old->struct_size = (uint32_t)PLAN_0_5;
    ck_assert_int_eq(clflash_plan_attention(c, &d, old), CLFLASH_SUCCESS);
    ck_assert_uint_eq(old->struct_size, PLAN_0_5);
    /* every byte it has is the full plan's */
    ck_assert_int_eq(memcmp((unsigned char *)old + sizeof(uint32_t), (unsigned char *)&full + sizeof(uint32_t),
                            PLAN_0_5 - sizeof(uint32_t)),
                     0);
    memset(old, 0x5a, PLAN_0_5);
    old->struct_size = (uint32_t)PLAN_0_5;
    ck_assert_int_eq(clflash_plan_backward(c, &d, old), CLFLASH_SUCCESS);
    ck_assert_uint_ge(old->block, 1);
    guard_free(&g);
    clflash_context_free(c);
}
END_TEST

START_TEST(old_options_are_read_no_further)
{
    guarded g;
    clflash_context_options *old = guard_alloc(&g, OPTIONS_0_5);
    memset(old, 0, OPTIONS_0_5);
    old->struct_size = (uint32_t)OPTIONS_0_5;
    old->local_mem_budget = 8192;
    clflash_context *c = test_context(old);
    clflash_plan p = {.struct_size = sizeof p};
    const clflash_attention_desc d = full_desc();
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(p.local_mem_budget, 8192); /* the option was read */
    clflash_context_free(c);
    guard_free(&g);
}
END_TEST

/* A program built against a newer header: its structs are longer than the library's. */
typedef struct {
    clflash_attention_desc d;
    unsigned char newer[24];
} newer_desc;
typedef struct {
    clflash_context_options o;
    unsigned char newer[24];
} newer_options;
typedef struct {
    clflash_plan p;
    unsigned char newer[24];
} newer_plan;

START_TEST(newer_structs)
{
    clflash_context *c = test_context(NULL);
    newer_desc nd;
    memset(&nd, 0, sizeof nd);
    nd.d = full_desc();
    nd.d.struct_size = sizeof nd;
    newer_plan np;
    memset(&np, 0x5a, sizeof np);
    np.p.struct_size = sizeof np;
    /* unknown fields all zero: accepted, and the plan's unknown tail is zeroed */
    ck_assert_int_eq(clflash_plan_attention(c, &nd.d, &np.p), CLFLASH_SUCCESS);
    ck_assert_uint_eq(np.p.struct_size, sizeof np);
    for (size_t i = 0; i < sizeof np.newer; i++)
        ck_assert_uint_eq(np.newer[i], 0);
    /* a newer field set: this library cannot honour it */
    nd.newer[5] = 1;
    ck_assert_int_eq(clflash_plan_attention(c, &nd.d, &np.p), CLFLASH_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "newer"));
    ck_assert_uint_eq(clflash_traffic_bytes(&nd.d, CLFLASH_ALGO_NAIVE, 0), 0);
    clflash_context_free(c);

    newer_options no;
    memset(&no, 0, sizeof no);
    no.o.struct_size = sizeof no;
    clflash_context *c2 = NULL;
    ck_assert_int_eq(clflash_context_create_default(&no.o, &c2), CLFLASH_SUCCESS);
    clflash_context_free(c2);
    c2 = NULL;
    no.newer[0] = 1;
    ck_assert_int_eq(clflash_context_create_default(&no.o, &c2), CLFLASH_ERROR_UNSUPPORTED);
    ck_assert_ptr_null(c2);
}
END_TEST

START_TEST(refused_sizes)
{
    clflash_context *c = test_context(NULL);
    const uint32_t bad[] = {0, (uint32_t)DESC_0_5_END - 1, 1, 4097, UINT32_MAX};
    for (size_t i = 0; i < N_OF(bad); i++) {
        clflash_attention_desc d = full_desc();
        d.struct_size = bad[i];
        clflash_plan p = {.struct_size = sizeof p};
        ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_ERROR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(clflash_last_error_detail(), "struct_size"));
        d.struct_size = sizeof d;
        p.struct_size = bad[i] == (uint32_t)DESC_0_5_END - 1 ? (uint32_t)PLAN_0_5_END - 1 : bad[i];
        ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_ERROR_INVALID_ARGUMENT);
        ck_assert_int_eq(clflash_plan_backward(c, &d, &p), CLFLASH_ERROR_INVALID_ARGUMENT);
        clflash_context_options o = {.struct_size = bad[i] == (uint32_t)DESC_0_5_END - 1 ? (uint32_t)OPTIONS_0_5_END - 1 : bad[i]};
        clflash_context *c2 = NULL;
        ck_assert_int_eq(clflash_context_create_default(&o, &c2), CLFLASH_ERROR_INVALID_OPTIONS);
        ck_assert_int_eq(clflash_context_create(clflash_context_cl(c), clflash_context_device(c), &o, &c2),
                         CLFLASH_ERROR_INVALID_OPTIONS);
        ck_assert_ptr_null(c2);
    }
    clflash_context_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("struct_size");
    TCase *tc = tcase_create("abi");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, old_descriptor_is_read_no_further);
    tcase_add_test(tc, old_plan_is_written_no_further);
    tcase_add_test(tc, old_options_are_read_no_further);
    tcase_add_test(tc, newer_structs);
    tcase_add_test(tc, refused_sizes);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
