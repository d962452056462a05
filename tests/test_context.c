/*
 * test_context.c - contexts: free(NULL), the accessors, wrapping a caller's own cl_context and
 * device, argument errors, device selection through CLFLASH_DEVICE ("P:D", a case-insensitive
 * substring of the device or platform name, and a string that matches nothing), and several
 * threads sharing one context (concurrent first builds, per-thread error details), and the slots
 * in which components keep state until the context is freed (component.h).
 *
 * Tests that change CLFLASH_DEVICE restore the caller's value before they finish, so the rest of
 * the suite keeps the device the caller chose, also when Check runs without fork.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strdup */

#include "check_common.h"
#include "component.h"

#include <ctype.h>
#include <pthread.h>

/* ---- CLFLASH_DEVICE, saved and restored ----------------------------------------------------------- */

static char *saved_env;
static int had_env;

static void env_save(void)
{
    const char *v = getenv("CLFLASH_DEVICE");
    had_env = v != NULL;
    free(saved_env);
    saved_env = v ? strdup(v) : NULL;
}

static void env_restore(void)
{
    if (had_env)
        setenv("CLFLASH_DEVICE", saved_env, 1);
    else
        unsetenv("CLFLASH_DEVICE");
}

static void device_string(cl_device_id dev, cl_device_info what, char *buf, size_t n)
{
    buf[0] = '\0';
    ck_assert_int_eq(clGetDeviceInfo(dev, what, n - 1, buf, NULL), CL_SUCCESS);
    buf[n - 1] = '\0';
}

static void platform_string(cl_device_id dev, cl_platform_info what, char *buf, size_t n)
{
    cl_platform_id plat;
    ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL), CL_SUCCESS);
    buf[0] = '\0';
    ck_assert_int_eq(clGetPlatformInfo(plat, what, n - 1, buf, NULL), CL_SUCCESS);
    buf[n - 1] = '\0';
}


static int contains_nocase(const char *hay, const char *needle)
{
    const size_t n = strlen(needle);
    for (const char *h = hay; *h; h++) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

/* 1 if s is in the device's or its platform's name or vendor (case-insensitive). */
static int names_device(cl_device_id dev, const char *s)
{
    char text[4][256];
    device_string(dev, CL_DEVICE_NAME, text[0], sizeof text[0]);
    device_string(dev, CL_DEVICE_VENDOR, text[1], sizeof text[1]);
    platform_string(dev, CL_PLATFORM_NAME, text[2], sizeof text[2]);
    platform_string(dev, CL_PLATFORM_VENDOR, text[3], sizeof text[3]);
    for (int i = 0; i < 4; i++)
        if (contains_nocase(text[i], s))
            return 1;
    return 0;
}

/* ---- basics ---------------------------------------------------------------------------------------- */

START_TEST(free_null_and_null_accessors)
{
    clflash_context_free(NULL);
    ck_assert_ptr_null(clflash_context_cl(NULL));
    ck_assert_ptr_null(clflash_context_device(NULL));
    ck_assert_ptr_null(clflash_context_queue(NULL));
    ck_assert_ptr_nonnull(clflash_context_build_log(NULL));
    ck_assert_str_eq(clflash_context_build_log(NULL), "");
}
END_TEST

START_TEST(accessors_of_a_live_context)
{
    clflash_context *c = test_context(NULL);
    cl_context ctx = clflash_context_cl(c);
    cl_device_id dev = clflash_context_device(c);
    cl_command_queue q = clflash_context_queue(c);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_ptr_nonnull(dev);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(clflash_context_build_log(c));
    ck_assert_str_eq(clflash_context_build_log(c), "");
    char name[256];
    device_string(dev, CL_DEVICE_NAME, name, sizeof name);
    fprintf(stderr, "device: %s\n", name);

    /* the queue is on the context's device and context, and in order */
    cl_context qctx;
    cl_device_id qdev;
    cl_command_queue_properties props;
    ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL), CL_SUCCESS);
    ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL), CL_SUCCESS);
    ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL), CL_SUCCESS);
    ck_assert_ptr_eq(qctx, ctx);
    ck_assert_ptr_eq(qdev, dev);
    ck_assert_msg(!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), "the context's queue is out of order");

    /* the device belongs to the context */
    cl_uint ndev = 0;
    ck_assert_int_eq(clGetContextInfo(ctx, CL_CONTEXT_NUM_DEVICES, sizeof ndev, &ndev, NULL), CL_SUCCESS);
    ck_assert_uint_ge(ndev, 1);
    clflash_context_free(c);
}
END_TEST

/* component.h's slots: found by key, the first attachment kept, four per context, each release
 * called once when the context is freed. */
static int released[5];
static void release_slot(void *data)
{
    released[*(int *)data]++;
}

START_TEST(component_slots)
{
    static int keys[5], values[5] = {0, 1, 2, 3, 4};
    clflash_context *c = test_context(NULL);
    memset(released, 0, sizeof released);
    ck_assert_ptr_null(clflash_component_data(c, &keys[0]));
    ck_assert_ptr_null(clflash_component_data(NULL, &keys[0]));
    void *existing = &keys[0];
    ck_assert_int_eq(clflash_component_attach(c, &keys[0], &values[0], release_slot, &existing), CLFLASH_SUCCESS);
    ck_assert_ptr_null(existing);
    ck_assert_ptr_eq(clflash_component_data(c, &keys[0]), &values[0]);
    /* a second attachment under the same key keeps the first and hands it back */
    ck_assert_int_eq(clflash_component_attach(c, &keys[0], &values[1], release_slot, &existing), CLFLASH_SUCCESS);
    ck_assert_ptr_eq(existing, &values[0]);
    ck_assert_ptr_eq(clflash_component_data(c, &keys[0]), &values[0]);
    for (int i = 1; i < 4; i++)
        ck_assert_int_eq(clflash_component_attach(c, &keys[i], &values[i], release_slot, NULL), CLFLASH_SUCCESS);
    ck_assert_int_eq(clflash_component_attach(c, &keys[4], &values[4], release_slot, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT); /* every slot taken */
    ck_assert_str_ne(clflash_last_error_detail(), "");
    ck_assert_int_eq(clflash_component_attach(c, NULL, &values[4], release_slot, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_component_attach(c, &keys[4], NULL, release_slot, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_component_attach(c, &keys[4], &values[4], NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_component_attach(NULL, &keys[4], &values[4], release_slot, NULL),
                     CLFLASH_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(released[i], 0);
    clflash_context_free(c);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(released[i], 1);
    ck_assert_int_eq(released[4], 0);
}
END_TEST

START_TEST(create_argument_errors)
{
    clflash_context *probe = test_context(NULL);
    cl_context ctx = clflash_context_cl(probe);
    cl_device_id dev = clflash_context_device(probe);
    clflash_context *const untouched = (clflash_context *)&saved_env; /* any recognisable address */
    clflash_context *c = untouched;

    ck_assert_int_eq(clflash_context_create(NULL, dev, NULL, &c), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(c, untouched);
    ck_assert_msg(strlen(clflash_last_error_detail()) > 0, "no detail");
    ck_assert_int_eq(clflash_context_create(ctx, NULL, NULL, &c), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(c, untouched);
    ck_assert_int_eq(clflash_context_create(ctx, dev, NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clflash_context_create_default(NULL, NULL), CLFLASH_ERROR_INVALID_ARGUMENT);

    /* options out of range: threads_per_row above 64, build_options above 4096 characters */
    clflash_context_options opt = {.struct_size = sizeof opt};
    opt.threads_per_row = 65;
    ck_assert_int_eq(clflash_context_create(ctx, dev, &opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_eq(c, untouched);
    ck_assert_msg(strstr(clflash_last_error_detail(), "threads_per_row") != NULL, "detail: %s",
                  clflash_last_error_detail());
    ck_assert_int_eq(clflash_context_create_default(&opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_eq(c, untouched);
    opt.threads_per_row = 64; /* the largest accepted */
    ck_assert_int_eq(clflash_context_create(ctx, dev, &opt, &c), CLFLASH_SUCCESS);
    clflash_context_free(c);
    c = untouched;
    static char long_options[4098];
    memset(long_options, ' ', sizeof long_options - 1);
    long_options[sizeof long_options - 1] = '\0'; /* 4097 spaces */
    opt.threads_per_row = 0;
    opt.build_options = long_options;
    ck_assert_int_eq(clflash_context_create(ctx, dev, &opt, &c), CLFLASH_ERROR_INVALID_OPTIONS);
    ck_assert_ptr_eq(c, untouched);
    ck_assert_msg(strstr(clflash_last_error_detail(), "build_options") != NULL, "detail: %s",
                  clflash_last_error_detail());
    long_options[4096] = '\0'; /* 4096: accepted */
    ck_assert_int_eq(clflash_context_create(ctx, dev, &opt, &c), CLFLASH_SUCCESS);
    clflash_context_free(c);
    clflash_context_free(probe);
}
END_TEST

/* The caller's own cl_context and device: clflash retains the context, so the caller may release
 * its reference right away; results, accessors and options behave as with a default context. */
START_TEST(create_with_own_cl_context)
{
    clflash_context *probe = test_context(NULL);
    cl_device_id dev = clflash_context_device(probe);
    clflash_context_free(probe);

    cl_platform_id plat;
    ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL), CL_SUCCESS);
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
    cl_int err;
    cl_context ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);

    clflash_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.local_mem_budget = 49152;
    clflash_context *c = NULL;
    clflash_status st = clflash_context_create(ctx, dev, &opt, &c);
    ck_assert_msg(st == CLFLASH_SUCCESS, "%s (%s)", clflash_status_string(st), clflash_last_error_detail());
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_eq(clflash_context_cl(c), ctx);
    ck_assert_ptr_eq(clflash_context_device(c), dev);
    ck_assert_int_eq(clReleaseContext(ctx), CL_SUCCESS); /* clflash holds its own reference */

    const clflash_attention_desc d = th_desc(1, 2, 1, 29, 37, 64, CLFLASH_F32, CLFLASH_CAUSAL);
    clflash_plan p = {.struct_size = sizeof p};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    ck_assert_int_eq(clflash_plan_attention(c, &d, &p), CLFLASH_SUCCESS);
    ck_assert_uint_le(p.local_mem_budget, 49152);
    run_and_check(c, &d, TH_FLASH, 0, 1, 10);
    run_and_check(c, &d, TH_FLASH, 1, 1, 11);
    clflash_context_free(c);

    /* a second wrapper of a fresh context, without options */
    ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    st = clflash_context_create(ctx, dev, NULL, &c);
    ck_assert_int_eq(st, CLFLASH_SUCCESS);
    run_and_check(c, &d, TH_FLASH, 0, 1, 12);
    clflash_context_free(c);
    /* the caller's reference is still good after clflash_context_free */
    cl_uint refs = 0;
    ck_assert_int_eq(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL), CL_SUCCESS);
    ck_assert_uint_ge(refs, 1);
    clReleaseContext(ctx);
}
END_TEST

/* ---- CLFLASH_DEVICE -------------------------------------------------------------------------------- */

START_TEST(env_index_0_0)
{
    env_save();
    cl_platform_id plat;
    cl_uint np = 0;
    ck_assert_int_eq(clGetPlatformIDs(1, &plat, &np), CL_SUCCESS);
    cl_device_id first;
    cl_uint nd = 0;
    ck_assert_int_eq(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &first, &nd), CL_SUCCESS);

    setenv("CLFLASH_DEVICE", "0:0", 1);
    clflash_context *c = NULL;
    const clflash_status st = clflash_context_create_default(NULL, &c);
    env_restore();
    ck_assert_msg(st == CLFLASH_SUCCESS, "CLFLASH_DEVICE=0:0: %s (%s)", clflash_status_string(st),
                  clflash_last_error_detail());
    ck_assert_ptr_eq(clflash_context_device(c), first);
    clflash_context_free(c);
}
END_TEST

/* A piece of the device's name, in swapped case, selects a device whose name or vendor, or whose
 * platform's name or vendor, contains it; so does a piece of the device's vendor, of the platform's
 * name and of the platform's vendor (PoCL's "The pocl project": CLFLASH_DEVICE=pocl). */
START_TEST(env_name_substring)
{
    env_save();
    clflash_context *probe = test_context(NULL);
    char source[256];
    if (_i == 0)
        device_string(clflash_context_device(probe), CL_DEVICE_NAME, source, sizeof source);
    else if (_i == 1)
        device_string(clflash_context_device(probe), CL_DEVICE_VENDOR, source, sizeof source);
    else
        platform_string(clflash_context_device(probe), _i == 2 ? CL_PLATFORM_NAME : CL_PLATFORM_VENDOR, source,
                        sizeof source);
    clflash_context_free(probe);

    const size_t len = strlen(source);
    ck_assert_uint_ge(len, 1);
    char needle[16];
    const size_t start = len > 8 ? 1 : 0;
    size_t n = len - start < 6 ? len - start : 6;
    memcpy(needle, source + start, n);
    needle[n] = '\0';
    for (size_t i = 0; i < n; i++) /* case-insensitive: swap every letter's case */
        needle[i] = (char)(isupper((unsigned char)needle[i]) ? tolower((unsigned char)needle[i])
                                                              : toupper((unsigned char)needle[i]));

    setenv("CLFLASH_DEVICE", needle, 1);
    clflash_context *c = NULL;
    const clflash_status st = clflash_context_create_default(NULL, &c);
    env_restore();
    ck_assert_msg(st == CLFLASH_SUCCESS, "CLFLASH_DEVICE='%s' (from '%s'): %s (%s)", needle, source,
                  clflash_status_string(st), clflash_last_error_detail());
    char got_name[256];
    device_string(clflash_context_device(c), CL_DEVICE_NAME, got_name, sizeof got_name);
    ck_assert_msg(names_device(clflash_context_device(c), needle), "CLFLASH_DEVICE='%s' chose '%s'", needle,
                  got_name);
    clflash_context_free(c);
}
END_TEST

START_TEST(env_no_match)
{
    static const char *const values[] = {"no-such-device-zz9-plural-z-alpha", "99:99"};
    env_save();
    clflash_context *const untouched = (clflash_context *)&saved_env;
    clflash_context *c = untouched;
    setenv("CLFLASH_DEVICE", values[_i], 1);
    const clflash_status st = clflash_context_create_default(NULL, &c);
    const char *detail = clflash_last_error_detail();
    const int has_detail = detail != NULL && detail[0] != '\0';
    env_restore();
    ck_assert_msg(st == CLFLASH_ERROR_NO_DEVICE, "CLFLASH_DEVICE='%s': %s", values[_i], clflash_status_string(st));
    ck_assert_ptr_eq(c, untouched);
    ck_assert_msg(has_detail, "no detail for CLFLASH_DEVICE='%s'", values[_i]);
}
END_TEST

/* ---- threads -------------------------------------------------------------------------------------- */

typedef struct {
    clflash_context *c;
    int index;
    int failures;
    char msg[1024];
    int detail_after_error_ok, detail_after_success_ok;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    static const shape_t shapes[4] = {
        {1, 2, 0, 37, 53, 64, CLFLASH_F32, 0, 0.0f},
        {2, 2, 1, 33, 45, 64, CLFLASH_F16, CLFLASH_CAUSAL, 0.0f},
        {1, 1, 0, 37, 53, 7, CLFLASH_F32, 0, 0.0f},
        {1, 1, 0, 13, 97, 64, CLFLASH_F32, CLFLASH_CAUSAL, 0.0f},
    };
    for (int rep = 0; rep < 2; rep++) {
        const clflash_attention_desc d = shape_desc(&shapes[(w->index + rep) % 4]);
        th_case t;
        if (th_case_init(&t, &d, 20 + (uint64_t)w->index * 10 + (uint64_t)rep) != 0) {
            w->failures++;
            snprintf(w->msg, sizeof w->msg, "out of host memory");
            return NULL;
        }
        th_case_reference(&t);
        const clflash_status st = th_run_host(w->c, &t, 1);
        if (st != CLFLASH_SUCCESS) {
            w->failures++;
            snprintf(w->msg, sizeof w->msg, "thread %d: %s (%s)", w->index, clflash_status_string(st),
                     clflash_last_error_detail());
        } else if (th_check(&t, 1, REF_PATH_FLASH, w->msg, sizeof w->msg)) {
            w->failures++;
        }
        th_case_free(&t);
    }
    /* the detail is per thread: this thread's error, then this thread's success */
    clflash_attention_desc bad = th_desc(1, 1, 0, 0, 5, 16, CLFLASH_F32, 0);
    clflash_plan p = {.struct_size = sizeof p};
    w->detail_after_error_ok = clflash_plan_attention(w->c, &bad, &p) == CLFLASH_ERROR_INVALID_SHAPE &&
                               clflash_last_error_detail()[0] != '\0';
    bad.seq_q = 5;
    w->detail_after_success_ok =
        clflash_plan_attention(w->c, &bad, &p) == CLFLASH_SUCCESS && clflash_last_error_detail()[0] == '\0';
    return NULL;
}

START_TEST(threads_share_a_context)
{
    enum { N = 4 };
    clflash_context *c = test_context(NULL);
    pthread_t th[N];
    worker w[N];
    for (int i = 0; i < N; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].index = i;
        ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(w[i].failures == 0, "thread %d: %s", i, w[i].msg);
        ck_assert_msg(w[i].detail_after_error_ok, "thread %d: no detail after its own error", i);
        ck_assert_msg(w[i].detail_after_success_ok, "thread %d: detail not cleared after its own success", i);
    }
    /* this thread made no failing call since the context was created */
    ck_assert_str_eq(clflash_last_error_detail(), "");
    clflash_context_free(c);
}
END_TEST

static Suite *context_suite(void)
{
    Suite *s = suite_create("context");
    TCase *tb = tcase_create("basics");
    tcase_set_timeout(tb, TEST_TIMEOUT_S);
    tcase_add_test(tb, free_null_and_null_accessors);
    tcase_add_test(tb, accessors_of_a_live_context);
    tcase_add_test(tb, create_argument_errors);
    tcase_add_test(tb, component_slots);
    tcase_add_test(tb, create_with_own_cl_context);
    suite_add_tcase(s, tb);

    TCase *te = tcase_create("CLFLASH_DEVICE");
    tcase_set_timeout(te, TEST_TIMEOUT_S);
    tcase_add_test(te, env_index_0_0);
    tcase_add_loop_test(te, env_name_substring, 0, 4);
    tcase_add_loop_test(te, env_no_match, 0, 2);
    suite_add_tcase(s, te);

    TCase *tt = tcase_create("threads");
    tcase_set_timeout(tt, TEST_TIMEOUT_S);
    tcase_add_test(tt, threads_share_a_context);
    suite_add_tcase(s, tt);
    return s;
}

int main(void)
{
    const int rc = run_suite(context_suite());
    free(saved_env);
    return rc;
}
