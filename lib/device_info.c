/*
 * device_info.c - reads, once per context, the device facts the planner and dispatchers need:
 * local memory, work-group and allocation limits, the vendor class, and NVIDIA's compute capability.
 *
 * Why separate: every decision that depends on the hardware starts from these numbers, and reading
 * them in one place keeps the rest of the library free of clGetDeviceInfo plumbing.
 */
#include "internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif

static cl_int read_string(cl_device_id dev, cl_device_info what, char *buf, size_t size)
{
    cl_int err = clGetDeviceInfo(dev, what, size - 1, buf, NULL);
    if (err == CL_INVALID_VALUE) { /* longer than our buffer: keep what fits */
        char *tmp = NULL;
        size_t need = 0;
        err = clGetDeviceInfo(dev, what, 0, NULL, &need);
        if (err == CL_SUCCESS && (tmp = malloc(need + 1)) == NULL)
            err = CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
        if (err == CL_SUCCESS && tmp) {
            err = clGetDeviceInfo(dev, what, need, tmp, NULL);
            if (err == CL_SUCCESS)
                memcpy(buf, tmp, size - 1);
        }
        free(tmp);
    }
    buf[size - 1] = '\0';
    return err;
}

int clflash_contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* 1 if the device lists `ext`, 0 if not, -1 if the list could not be read into memory. */
static int has_extension(cl_device_id dev, const char *ext)
{
    size_t need = 0;
    char *all;
    int found = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &need) != CL_SUCCESS || need == 0)
        return 0;
    if ((all = malloc(need + 1)) == NULL)
        return -1;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, need, all, NULL) == CL_SUCCESS) {
        all[need] = '\0';
        found = strstr(all, ext) != NULL;
    }
    free(all);
    return found;
}

cl_int clflash_read_device_info(cl_device_id dev, clflash_device_info *out)
{
    cl_int err;
    memset(out, 0, sizeof *out);
    if ((err = read_string(dev, CL_DEVICE_NAME, out->name, sizeof out->name)) != CL_SUCCESS ||
        (err = read_string(dev, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor)) != CL_SUCCESS ||
        (err = read_string(dev, CL_DEVICE_VERSION, out->version, sizeof out->version)) != CL_SUCCESS ||
        (err = read_string(dev, CL_DRIVER_VERSION, out->driver, sizeof out->driver)) != CL_SUCCESS)
        return err;
    if ((err = clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof out->type, &out->type, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof out->local_mem_size,
                               &out->local_mem_size, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof out->max_alloc_size,
                               &out->max_alloc_size, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof out->global_mem_size,
                               &out->global_mem_size, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof out->max_work_group_size,
                               &out->max_work_group_size, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof out->compute_units,
                               &out->compute_units, NULL)))
        return err;

    if (out->type & CL_DEVICE_TYPE_CPU)
        out->device_class = CLFLASH_CLASS_CPU;
    else if (!(out->type & CL_DEVICE_TYPE_GPU))
        out->device_class = CLFLASH_CLASS_OTHER;
    else if (clflash_contains_nocase(out->vendor, "nvidia"))
        out->device_class = CLFLASH_CLASS_NVIDIA_GPU;
    else if (clflash_contains_nocase(out->vendor, "advanced micro devices") || clflash_contains_nocase(out->vendor, "amd"))
        out->device_class = CLFLASH_CLASS_AMD_GPU;
    else if (clflash_contains_nocase(out->vendor, "intel"))
        out->device_class = CLFLASH_CLASS_INTEL_GPU;
    else
        out->device_class = CLFLASH_CLASS_OTHER_GPU;

    switch (has_extension(dev, "cl_nv_device_attribute_query")) {
    case -1:
        return CLFLASH_ERROR_OUT_OF_HOST_MEMORY;
    case 0:
        break;
    default: {
        cl_uint major = 0, minor = 0;
        if (clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) ==
                CL_SUCCESS &&
            clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) ==
                CL_SUCCESS) {
            out->nv_cc_major = (int)major;
            out->nv_cc_minor = (int)minor;
        }
    }
    }
    return CL_SUCCESS;
}
