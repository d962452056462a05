/*
 * sm90a.c - kernels for Hopper's sm_90a instructions (wgmma and the rest) through PTX program
 * binaries: the PTX rewrite, the rebuild from the rewritten binary, and the once-per-context probe
 * that decides whether the path may be used on a context's device.
 *
 * Why: NVIDIA's OpenCL compiles OpenCL C to PTX for `.target sm_90` on Hopper, where the sm_90a
 * instructions are refused, and no build option changes the target. It does return that PTX as the
 * program binary and builds PTX given back through clCreateProgramWithBinary. So a kernel that needs
 * sm_90a is written in OpenCL C with inline PTX as every tensor-core kernel is, except that each
 * sm_90a instruction is written as a PTX comment behind the marker "// sm90a: ", one per line:
 *
 *     __asm__ __volatile__("// sm90a: wgmma.fence.sync.aligned;\n" "// sm90a: wgmma.mma_async... {%0, %1}, ...;\n"
 *                          : "+f"(d0), ... : "r"(a0), ...);
 *
 * NVIDIA's compiler treats the comment as the asm's text, so it copies it into the PTX with the
 * operands replaced by the registers it allocated for them and keeps the constraints' data flow.
 * clflash_sm90a_rewrite then turns `.target sm_90` into `.target sm_90a` and removes the markers,
 * so that the instructions become code, and the program is built again from that text. Everything
 * else (the other inline PTX, the kernel's arguments, local memory) is the compiler's own output.
 *
 * The program cache (program_cache.c) builds such a source in two steps when asked for its sm_90a
 * variant and keeps the result like any other program. Any step may fail: a driver whose binary is
 * not PTX or not for sm_90, a PTX version below 8.0, a source whose markers the compiler dropped, a
 * rewritten binary the driver refuses. clflash_sm90a_available runs cl/nv_sm90a_probe.cl through
 * the path once per context and checks its product; a planner uses an sm_90a kernel only where it
 * says yes, and the kernels that need no sm_90a otherwise.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARKER "// sm90a: "
#define MARKER_LEN (sizeof MARKER - 1)

/* ---- the fault a test asks for (process-wide; tests only) ------------------------------------- */
static clflash_sm90a_fault injected = CLFLASH_SM90A_FAULT_NONE;

void clflash_sm90a_inject_fault(clflash_sm90a_fault fault)
{
    injected = fault;
}

/* ---- the rewrite ---------------------------------------------------------------------------------- */

/* 1 if the line [p, end) starts with `word` */
static int starts_with(const char *p, const char *end, const char *word)
{
    const size_t n = strlen(word);
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}


int clflash_sm90a_rewrite(const char *ptx, size_t len, char **out, char *why, size_t why_len)
{
    *out = NULL;
    len = strnlen(ptx, len);
    /* the result is at most one byte per target line longer than the PTX */
    char *text = malloc(len + 16);
    if (text == NULL) {
        snprintf(why, why_len, "out of host memory");
        return -1;
    }
    size_t w = 0;
    int version_ok = -1, targets = 0, markers = 0;
    for (const char *p = ptx, *end = ptx + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end, *next = nl ? nl + 1 : end;
        const char *q = p;
        while (q < eol && (*q == ' ' || *q == '\t'))
            q++;
        if (starts_with(q, eol, ".version ")) {
            int major = 0, minor = 0;
            version_ok = sscanf(q + 9, "%d.%d", &major, &minor) == 2 && major >= 8;
        }
        if (starts_with(q, eol, ".target ")) {
            /* exactly sm_90, then the end of the line, a comma or a space: sm_90a, sm_900 are not */
            const char *t = q + 8;
            while (t < eol && *t == ' ')
                t++;
            const int sm90 = starts_with(t, eol, "sm_90") && (t + 5 == eol || t[5] == ',' || t[5] == ' ');
            if (!sm90 || targets++ > 0) {
                snprintf(why, why_len, "the program binary is not PTX for one sm_90 target (%.*s)",
                         (int)(eol - q > 60 ? 60 : eol - q), q);
                free(text);
                return -1;
            }
            memcpy(text + w, p, (size_t)(t + 5 - p));
            w += (size_t)(t + 5 - p);
            text[w++] = 'a';
            memcpy(text + w, t + 5, (size_t)(next - (t + 5)));
            w += (size_t)(next - (t + 5));
        } else if (starts_with(q, eol, MARKER)) {
            memcpy(text + w, p, (size_t)(q - p)); /* the indentation */
            w += (size_t)(q - p);
            memcpy(text + w, q + MARKER_LEN, (size_t)(next - (q + MARKER_LEN)));
            w += (size_t)(next - (q + MARKER_LEN));
            markers++;
        } else {
            memcpy(text + w, p, (size_t)(next - p));
            w += (size_t)(next - p);
        }
        p = next;
    }
    text[w] = '\0';
    if (version_ok != 1 || targets != 1 || markers == 0) {
        if (version_ok != 1)
            snprintf(why, why_len, "the program binary is not PTX of ISA version 8.0 or later");
        else if (targets != 1)
            snprintf(why, why_len, "the program binary names no .target");
        else
            snprintf(why, why_len, "no \"%s\" line is left in the compiler's PTX", MARKER);
        free(text);
        return -1;
    }
    /* setmaxnreg takes effect only where ptxas knows the registers at entry: from the .reqntid the
     * driver writes for reqd_work_group_size and one work-group per SM (.minnctapersm 1; without it
     * ptxas ignores every setmaxnreg, C7508). */
    if (strstr(text, "setmaxnreg") != NULL && strstr(text, ".minnctapersm") == NULL) {
        char *with = clflash_ptx_entry_directive(text, ".minnctapersm 1");
        if (with == NULL) {
            snprintf(why, why_len, "out of host memory");
            free(text);
            return -1;
        }
        free(text);
        text = with;
    }
    *out = text;
    return markers;
}

char *clflash_ptx_entry_directive(const char *ptx, const char *directive)
{
    size_t entries = 0;
    for (const char *at = strstr(ptx, ".entry "); at != NULL; at = strstr(at + 7, ".entry "))
        entries++;
    const size_t len = strlen(ptx), add = strlen(directive) + 1;
    char *text = malloc(len + entries * add + 1);
    if (text == NULL)
        return NULL;
    size_t w = 0;
    const char *p = ptx;
    for (const char *at = strstr(p, ".entry "); at != NULL; at = strstr(p, ".entry ")) {
        const char *body = strchr(at, '{'), *close = body;
        while (close != NULL && close > at && *close != ')')
            close--;
        if (body == NULL || close == at)
            break; /* not an entry with a body: copied as it is */
        memcpy(text + w, p, (size_t)(close + 1 - p));
        w += (size_t)(close + 1 - p);
        text[w++] = '\n';
        memcpy(text + w, directive, add - 1);
        w += add - 1;
        p = close + 1;
    }
    memcpy(text + w, p, strlen(p) + 1);
    return text;
}

/* ---- the rebuild ---------------------------------------------------------------------------------- */

/* A fault of the tests, applied to the compiler's PTX or to the rewritten text. */
static void apply_fault(char *ptx, int rewritten)
{
    char *at;
    if (!rewritten && injected == CLFLASH_SM90A_FAULT_TARGET && (at = strstr(ptx, ".target sm_90")) != NULL)
        at[12] = '8'; /* sm_80 */
    if (!rewritten && injected == CLFLASH_SM90A_FAULT_MARKERS)
        for (at = strstr(ptx, MARKER); at != NULL; at = strstr(at, MARKER))
            at[7] = 'X'; /* "// sm9Xa: ": the markers are gone */
    if (rewritten && injected == CLFLASH_SM90A_FAULT_BUILD && (at = strstr(ptx, ".entry")) != NULL)
        memcpy(at, ".enTry", 6); /* a directive the assembler does not know */
}

clflash_status clflash_sm90a_rebuild(clflash_context *c, cl_program from_source, const char *options,
                                     cl_program *out, char *why, size_t why_len)
{
    size_t size = 0;
    cl_uint devices = 0;
    *out = NULL;
    cl_int err = clGetProgramInfo(from_source, CL_PROGRAM_NUM_DEVICES, sizeof devices, &devices, NULL);
    if (err == CL_SUCCESS && devices == 1)
        err = clGetProgramInfo(from_source, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    if (injected == CLFLASH_SM90A_FAULT_NO_BINARY)
        size = 0;
    if (err != CL_SUCCESS || devices != 1 || size == 0) {
        snprintf(why, why_len, "the driver returned no program binary (%s)", clflash_status_string(err));
        return CLFLASH_ERROR_BUILD_FAILED;
    }
    char *ptx = malloc(size + 1);
    if (ptx == NULL) {
        snprintf(why, why_len, "out of host memory");
        return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    }
    unsigned char *dst = (unsigned char *)ptx;
    err = clGetProgramInfo(from_source, CL_PROGRAM_BINARIES, sizeof dst, &dst, NULL);
    if (err != CL_SUCCESS) {
        free(ptx);
        snprintf(why, why_len, "reading the program binary failed (%s)", clflash_status_string(err));
        return CLFLASH_ERROR_BUILD_FAILED;
    }
    ptx[size] = '\0';
    apply_fault(ptx, 0);
    char *text = NULL;
    const int markers = clflash_sm90a_rewrite(ptx, size, &text, why, why_len);
    free(ptx);
    if (markers < 0)
        return CLFLASH_ERROR_BUILD_FAILED;
    apply_fault(text, 1);

    const size_t n = strlen(text) + 1;
    const unsigned char *bin = (const unsigned char *)text;
    cl_int bin_status = CL_SUCCESS;
    cl_program prog = clCreateProgramWithBinary(c->ctx, 1, &c->dev, &n, &bin, &bin_status, &err);
    if (err == CL_SUCCESS)
        err = bin_status;
    if (err == CL_SUCCESS)
        err = clBuildProgram(prog, 1, &c->dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[512] = "";
        if (prog)
            clGetProgramBuildInfo(prog, c->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = '\0';
        snprintf(why, why_len, "the driver refused the sm_90a binary (%s): %s", clflash_status_string(err), log);
        if (prog)
            clReleaseProgram(prog);
        free(text);
        return CLFLASH_ERROR_BUILD_FAILED;
    }
    free(text);
    *out = prog;
    return CLFLASH_SUCCESS;
}

/* ---- the probe -------------------------------------------------------------------------------------- */

#define PROBE_THREADS 128

/* The product cl/nv_sm90a_probe.cl must write: work-item id's four values are the sums of rows
 * 16 w + g and 16 w + g + 8 of A, A(i, k) = (i + 3k) % 7 - 3, twice each. */
static void probe_expected(float *want)
{
    for (uint32_t id = 0; id < PROBE_THREADS; id++) {
        const uint32_t row = 16 * (id / 32) + (id % 32) / 4;
        float lo = 0.0f, hi = 0.0f;
        for (uint32_t k = 0; k < 16; k++) {
            lo += (float)((int)((row + 3 * k) % 7) - 3);
            hi += (float)((int)((row + 8 + 3 * k) % 7) - 3);
        }
        want[4 * id] = want[4 * id + 1] = lo;
        want[4 * id + 2] = want[4 * id + 3] = hi;
    }
}

/* Runs the probe on c's queue; CLFLASH_SUCCESS if every value is right, else a reason in why. */
static clflash_status run_probe(clflash_context *c, char *why, size_t why_len)
{
    char defines[320];
    clflash_problem none;
    memset(&none, 0, sizeof none);
    none.dtype = CLFLASH_F16;
    none.out_dtype = CLFLASH_F32;
    clflash_feature_defines(&none, 0, defines, sizeof defines - 24);
    strcat(defines, " -D PAGED=0");
    cl_program prog = NULL;
    clflash_status st = clflash_get_program_sm90a(c, CLFLASH_SOURCE_NV_SM90A_PROBE, defines, &prog);
    if (st != CLFLASH_SUCCESS) {
        snprintf(why, why_len, "%s", clflash_last_error_detail());
        return st;
    }
    cl_int err;
    cl_kernel k = clCreateKernel(prog, "nv_sm90a_probe", &err);
    cl_mem out = err == CL_SUCCESS ? clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, 4 * PROBE_THREADS * sizeof(float),
                                                    NULL, &err)
                                   : NULL;
    float got[4 * PROBE_THREADS], want[4 * PROBE_THREADS];
    const size_t global = PROBE_THREADS, local = PROBE_THREADS;
    if (err == CL_SUCCESS)
        err = clSetKernelArg(k, 0, sizeof out, &out);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(c->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(c->queue, out, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
    if (out)
        clReleaseMemObject(out);
    if (k)
        clReleaseKernel(k);
    if (err != CL_SUCCESS) {
        snprintf(why, why_len, "running the sm_90a probe failed (%s)", clflash_status_string(err));
        return err;
    }
    probe_expected(want);
    if (injected == CLFLASH_SM90A_FAULT_RESULT)
        want[0] += 1.0f;
    for (int i = 0; i < 4 * PROBE_THREADS; i++)
        if (got[i] != want[i]) {
            snprintf(why, why_len, "the sm_90a probe computed a wrong product (value %d: %g, expected %g)", i,
                     (double)got[i], (double)want[i]);
            return CLFLASH_ERROR_BUILD_FAILED;
        }
    return CLFLASH_SUCCESS;
}

int clflash_sm90a_available(clflash_context *c, const char **why)
{
    static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&probe_lock);
    if (c->sm90a_state == 0) {
        char reason[sizeof c->sm90a_why] = "";
        int works = 0;
        if (c->portable_only)
            snprintf(reason, sizeof reason, "the portable kernels were asked for");
        else if (c->info.device_class != CLFLASH_CLASS_NVIDIA_GPU || c->info.nv_cc_major != 9 ||
                 c->info.nv_cc_minor != 0)
            snprintf(reason, sizeof reason, "not an NVIDIA device of compute capability 9.0");
        else if ((works = run_probe(c, reason, sizeof reason) == CLFLASH_SUCCESS) != 0)
            snprintf(reason, sizeof reason, "the sm_90a probe ran and computed the right product");
        c->sm90a_state = works ? 1 : -1;
        memcpy(c->sm90a_why, reason, sizeof reason);
        clflash_clear_detail(); /* a failed probe is not a failed call */
    }
    const int yes = c->sm90a_state > 0;
    if (why)
        *why = c->sm90a_why;
    pthread_mutex_unlock(&probe_lock);
    return yes;
}
