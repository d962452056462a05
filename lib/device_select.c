/*
 * device_select.c - clflash_context_create_default: finds a device by the CLFLASH_DEVICE
 * environment variable ("P:D" or a substring of a name or vendor) or by preference (first GPU, else first
 * device), and makes an OpenCL context for it.
 *
 * Why separate: choosing a device is policy that tools, tests and applications share, and it is
 * the only place clflash enumerates platforms.
 */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001 /* cl_khr_icd: the loader found no platform */
#endif

/* Parses "P:D" (two decimal indices); returns 1 and sets *p, *d if `s` is exactly that. */
static int parse_index(const char *s, unsigned *p, unsigned *d)
{
    char *end;
    unsigned long pi, di;
    if (!isdigit((unsigned char)s[0]))
        return 0;
    pi = strtoul(s, &end, 10);
    if (*end != ':' || !isdigit((unsigned char)end[1]))
        return 0;
    di = strtoul(end + 1, &end, 10);
    if (*end != '\0' || pi > 1000 || di > 1000)
        return 0;
    *p = (unsigned)pi;
    *d = (unsigned)di;
    return 1;
}

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
} found_device;

/* Walks every platform's devices; returns the one `want` selects (see clflash.h). */
static clflash_status find_device(const char *want, found_device *out)
{
    cl_platform_id platforms[64];
    cl_uint np = 0;
    unsigned want_p = 0, want_d = 0;
    int by_index = want && parse_index(want, &want_p, &want_d);
    int have_any = 0, have_gpu = 0;
    found_device any = {0}, gpu = {0};

    cl_int err = clGetPlatformIDs(64, platforms, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || np == 0)
        return clflash_fail(CLFLASH_ERROR_NO_DEVICE, "no OpenCL platform is installed");
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clGetPlatformIDs failed");
    if (np > 64)
        np = 64;

    for (cl_uint p = 0; p < np; p++) {
        cl_device_id devices[64];
        cl_uint nd = 0;
        char pname[256] = "", pvendor[256] = "";
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 64, devices, &nd) != CL_SUCCESS)
            continue;
        if (nd > 64)
            nd = 64;
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        clGetPlatformInfo(platforms[p], CL_PLATFORM_VENDOR, sizeof pvendor - 1, pvendor, NULL);
        for (cl_uint d = 0; d < nd; d++) {
            found_device f = {platforms[p], devices[d]};
            char dname[256] = "", dvendor[256] = "";
            cl_device_type type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_VENDOR, sizeof dvendor - 1, dvendor, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            if (by_index) {
                if (p == want_p && d == want_d) {
                    *out = f;
                    return CLFLASH_SUCCESS;
                }
            } else if (want && *want) {
                /* names and vendors: PoCL's platform is "Portable Computing Language", its
                 * vendor "The pocl project" (CLFLASH_DEVICE=pocl) */
                if (clflash_contains_nocase(dname, want) || clflash_contains_nocase(dvendor, want) ||
                    clflash_contains_nocase(pname, want) || clflash_contains_nocase(pvendor, want)) {
                    *out = f;
                    return CLFLASH_SUCCESS;
                }
            } else {
                if (!have_any) {
                    any = f;
                    have_any = 1;
                }
                if (!have_gpu && (type & CL_DEVICE_TYPE_GPU)) {
                    gpu = f;
                    have_gpu = 1;
                }
            }
        }
    }
    if (want && *want)
        return clflash_fail(CLFLASH_ERROR_NO_DEVICE, "no OpenCL device matches CLFLASH_DEVICE=\"%s\"", want);
    if (!have_any)
        return clflash_fail(CLFLASH_ERROR_NO_DEVICE, "the OpenCL platforms have no devices");
    *out = have_gpu ? gpu : any;
    return CLFLASH_SUCCESS;
}

clflash_status clflash_context_create_default(const clflash_context_options *opt, clflash_context **out)
{
    found_device f;
    cl_context ctx;
    cl_int err;
    clflash_status st;
    clflash_context_options checked;

    clflash_clear_detail();
    if (out == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "out is NULL");
    if ((st = clflash_read_options(opt, &checked)) != CLFLASH_SUCCESS)
        return st;
    if ((st = find_device(getenv("CLFLASH_DEVICE"), &f)) != CLFLASH_SUCCESS)
        return st;
    {
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)f.platform, 0};
        ctx = clCreateContext(props, 1, &f.device, NULL, NULL, &err);
    }
    if (err != CL_SUCCESS)
        return clflash_fail(err, "clCreateContext failed for the chosen device");
    st = clflash_context_create(ctx, f.device, opt, out);
    clReleaseContext(ctx); /* the clflash context retained it on success */
    return st;
}
