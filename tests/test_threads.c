/*
 * test_threads.c - one clflash context used by 8 threads at once, each with its own command queue
 * (clCreateCommandQueue on the context's cl_context and device), 50 calls per thread.
 *
 * The calls mix clflash_forward on device buffers through the thread's own queue, clflash_forward_host
 * (the context's own queue, shared by every thread) and now and then clflash_forward_naive. The
 * shapes vary a little (dtype, head_dim, causal, GQA, with and without lse, a forced block, forced
 * split-KV parts, whose scratch buffers come from the context's one pool), and
 * every thread walks the shape table from a different starting point, so the first calls of
 * several threads ask for the same kernel variant at the same moment: the program cache is read
 * while other variants are being built. Every result is checked against the fp64 reference, and
 * each thread's clflash_last_error_detail() must be its own.
 *
 * Freeing a context while another thread still uses it is the caller's error (clflash.h) and is not
 * tested.
 */
#include "check_common.h"

#include <pthread.h>

#define THREADS 8
#define CALLS 50

static const shape_t shapes[] = {
    {1, 2, 0, 19, 23, 16, CLFLASH_F32, 0, 0.0f},
    {1, 2, 1, 17, 29, 16, CLFLASH_F16, CLFLASH_CAUSAL, 0.0f},
    {2, 1, 0, 9, 9, 8, CLFLASH_F32, CLFLASH_CAUSAL, 0.0f},
    {1, 4, 2, 13, 7, 32, CLFLASH_F32, 0, 0.0f},
    {1, 1, 0, 31, 31, 16, CLFLASH_F16, 0, 0.5f},
    {1, 2, 2, 5, 37, 8, CLFLASH_F32, CLFLASH_CAUSAL, 0.0f},
};
#define N_SHAPES N_OF(shapes)

typedef struct {
    clflash_context *c;
    int index;
    int calls_done;
    int failures;
    char msg[3200];
} worker;

/* Records the first failure of a thread. */
static void note_failure(worker *w, const char *fmt, const char *a, const char *b)
{
    if (w->failures++ == 0)
        snprintf(w->msg, sizeof w->msg, fmt, a, b);
}

static void *work(void *arg)
{
    worker *w = arg;
    cl_int err;
    cl_command_queue own = clCreateCommandQueue(clflash_context_cl(w->c), clflash_context_device(w->c), 0, &err);
    if (err != CL_SUCCESS) {
        note_failure(w, "clCreateCommandQueue failed%s%s", "", "");
        return NULL;
    }
    for (int n = 0; n < CALLS; n++) {
        const shape_t *s = &shapes[(w->index + n) % N_SHAPES];
        clflash_attention_desc d = shape_desc(s);
        if (n % 7 == 3)
            d.block = 8; /* a forced block: another variant of the same shape */
        if (n % 3 == 1)
            d.num_splits = 3; /* split-KV: the threads share the context's scratch pool */
        const int kind = n % 5;       /* 0, 3: host call; 1, 2: own queue; 4: naive or own queue */
        const int with_lse = (n / 2) % 2;
        th_case t;
        if (th_case_init(&t, &d, 1000u * (uint64_t)w->index + (uint64_t)n) != 0) {
            note_failure(w, "out of host memory%s%s", "", "");
            break;
        }
        th_case_reference(&t);
        clflash_status st;
        th_algo algo = TH_FLASH;
        const char *how;
        if (kind == 0 || kind == 3) {
            st = th_run_host(w->c, &t, with_lse);
            how = "clflash_forward_host";
        } else {
            algo = kind == 4 && (w->index + n) % 2 == 0 ? TH_NAIVE : TH_FLASH;
            st = th_run_device(w->c, &t, algo, with_lse, own);
            how = algo == TH_NAIVE ? "clflash_forward_naive on its own queue" : "clflash_forward on its own queue";
        }
        char what[300], msg[2400];
        th_desc_str(&d, what, sizeof what);
        if (st != CLFLASH_SUCCESS) {
            snprintf(msg, sizeof msg, "%s: %s (%s)", clflash_status_string(st), clflash_last_error_detail(), what);
            note_failure(w, "%s: %s", how, msg);
        } else if (clflash_last_error_detail()[0] != '\0') {
            note_failure(w, "%s succeeded but left the detail '%s'", how, clflash_last_error_detail());
        } else if (th_check(&t, with_lse, algo == TH_NAIVE ? REF_PATH_NAIVE : REF_PATH_FLASH, msg, sizeof msg)) {
            char both[2800];
            snprintf(both, sizeof both, "%s: %s", what, msg);
            note_failure(w, "%s: %s", how, both);
        }
        th_case_free(&t);
        w->calls_done++;

        /* now and then an error of this thread's own, whose detail no other thread may see or clear */
        if (n % 10 == 9) {
            clflash_attention_desc bad = d;
            bad.head_dim = 0;
            clflash_plan p = {.struct_size = sizeof p};
            const clflash_status be = clflash_plan_attention(w->c, &bad, &p);
            if (be != CLFLASH_ERROR_INVALID_SHAPE || strstr(clflash_last_error_detail(), "head_dim") == NULL)
                note_failure(w, "a bad head_dim gave %s / '%s'", clflash_status_string(be), clflash_last_error_detail());
        }
    }
    clReleaseCommandQueue(own);
    return NULL;
}

START_TEST(eight_threads_one_context)
{
    clflash_context *c = test_context(NULL);
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].index = i;
    }
    /* start them all before any runs far ahead: each creates its queue first */
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    int total = 0;
    for (int i = 0; i < THREADS; i++) {
        ck_assert_msg(w[i].failures == 0, "thread %d: %d failures; first: %s", i, w[i].failures, w[i].msg);
        total += w[i].calls_done;
    }
    ck_assert_int_eq(total, THREADS * CALLS);
    /* this thread made no failing call */
    ck_assert_str_eq(clflash_last_error_detail(), "");
    clflash_context_free(c);
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("shared_context");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, eight_threads_one_context);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(threads_suite());
}
