/*
 * status.c - every status code's message, and the per-thread detail of the last failure.
 *
 * Why: a caller must be able to print any status clflash returns, including the OpenCL codes it
 * passes through unchanged, and learn which argument was at fault without a debugger. The messages
 * of clflash's own codes come from the same X-macro list as the codes (include/clflash.h).
 */
#include "internal.h"

#include <stdio.h>

/* OpenCL 1.2's error codes, with their names, so a passed-through code prints as what it is. */
#define CLFLASH_OPENCL_ERRORS(X)                                                                  \
    X(CL_DEVICE_NOT_FOUND) X(CL_DEVICE_NOT_AVAILABLE) X(CL_COMPILER_NOT_AVAILABLE)                \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE) X(CL_OUT_OF_RESOURCES) X(CL_OUT_OF_HOST_MEMORY)           \
    X(CL_PROFILING_INFO_NOT_AVAILABLE) X(CL_MEM_COPY_OVERLAP) X(CL_IMAGE_FORMAT_MISMATCH)         \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED) X(CL_BUILD_PROGRAM_FAILURE) X(CL_MAP_FAILURE)                \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET) X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)            \
    X(CL_COMPILE_PROGRAM_FAILURE) X(CL_LINKER_NOT_AVAILABLE) X(CL_LINK_PROGRAM_FAILURE)           \
    X(CL_DEVICE_PARTITION_FAILED) X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) X(CL_INVALID_VALUE)         \
    X(CL_INVALID_DEVICE_TYPE) X(CL_INVALID_PLATFORM) X(CL_INVALID_DEVICE) X(CL_INVALID_CONTEXT)   \
    X(CL_INVALID_QUEUE_PROPERTIES) X(CL_INVALID_COMMAND_QUEUE) X(CL_INVALID_HOST_PTR)             \
    X(CL_INVALID_MEM_OBJECT) X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) X(CL_INVALID_IMAGE_SIZE)       \
    X(CL_INVALID_SAMPLER) X(CL_INVALID_BINARY) X(CL_INVALID_BUILD_OPTIONS) X(CL_INVALID_PROGRAM)  \
    X(CL_INVALID_PROGRAM_EXECUTABLE) X(CL_INVALID_KERNEL_NAME) X(CL_INVALID_KERNEL_DEFINITION)    \
    X(CL_INVALID_KERNEL) X(CL_INVALID_ARG_INDEX) X(CL_INVALID_ARG_VALUE) X(CL_INVALID_ARG_SIZE)   \
    X(CL_INVALID_KERNEL_ARGS) X(CL_INVALID_WORK_DIMENSION) X(CL_INVALID_WORK_GROUP_SIZE)          \
    X(CL_INVALID_WORK_ITEM_SIZE) X(CL_INVALID_GLOBAL_OFFSET) X(CL_INVALID_EVENT_WAIT_LIST)        \
    X(CL_INVALID_EVENT) X(CL_INVALID_OPERATION) X(CL_INVALID_GL_OBJECT)                           \
    X(CL_INVALID_BUFFER_SIZE) X(CL_INVALID_MIP_LEVEL) X(CL_INVALID_GLOBAL_WORK_SIZE)              \
    X(CL_INVALID_PROPERTY) X(CL_INVALID_IMAGE_DESCRIPTOR) X(CL_INVALID_COMPILER_OPTIONS)          \
    X(CL_INVALID_LINKER_OPTIONS) X(CL_INVALID_DEVICE_PARTITION_COUNT)

const char *clflash_status_string(clflash_status s)
{
    switch (s) {
#define CLFLASH_STATUS_CASE_(name, value, message) case value: return #name ": " message;
        CLFLASH_STATUS_LIST(CLFLASH_STATUS_CASE_)
#undef CLFLASH_STATUS_CASE_
#define CLFLASH_OPENCL_CASE_(name) case name: return #name ": an OpenCL call failed";
        CLFLASH_OPENCL_ERRORS(CLFLASH_OPENCL_CASE_)
#undef CLFLASH_OPENCL_CASE_
    default:
        return "unknown status";
    }
}

static _Thread_local char detail[512];

const char *clflash_last_error_detail(void)
{
    return detail;
}

void clflash_clear_detail(void)
{
    detail[0] = '\0';
}

clflash_status clflash_fail(clflash_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return status;
}
