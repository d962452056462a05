/*
 * dispatch_util.c - small helpers the dispatchers share: setting a list of kernel arguments and
 * the dtype's -D define.
 */
#include "internal.h"

cl_int clflash_set_args(cl_kernel k, cl_uint first, const clflash_arg *args, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cl_int err = clSetKernelArg(k, first + (cl_uint)i, args[i].size, args[i].value);
        if (err != CL_SUCCESS)
            return err;
    }
    return CL_SUCCESS;
}

const char *clflash_dtype_define(clflash_dtype t)
{
    switch (t) {
    case CLFLASH_F32: return "-D CLFLASH_DTYPE_F32";
    case CLFLASH_F16: return "-D CLFLASH_DTYPE_F16";
    case CLFLASH_BF16: return "-D CLFLASH_DTYPE_BF16";
    default: return "";
    }
}
