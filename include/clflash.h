/*
 * clflash.h - the whole public API of clflash, a portable OpenCL library for exact, tiled,
 * online-softmax attention (FlashAttention) on any OpenCL device.
 *
 * Why this header exists: a C application includes only this file, hands clflash its own OpenCL
 * buffers, and gets attention without the seq_q x seq_k score matrix ever being written to device
 * memory. Everything a caller can rely on is declared and documented here; nothing else is exported.
 *
 * Conventions used throughout:
 *  - Every function that can fail returns a clflash_status. 0 is success, negative OpenCL error
 *    codes pass through unchanged, and clflash's own codes start at -2000 and go down.
 *  - On any error found before enqueueing (every invalid argument, descriptor, layout or buffer,
 *    a tile that does not fit, a failed build) nothing is enqueued and no caller buffer is touched.
 *    If OpenCL refuses an enqueue part-way, kernels already enqueued may still run, but none of
 *    them writes a caller buffer (each function says how). clflash_last_error_detail() then says,
 *    in one sentence, what was wrong (for example "seq_q is 0").
 *  - Handles come in create/free pairs; every free function accepts NULL as a no-op.
 *  - Shapes and strides count elements, never bytes, unless a name ends in _bytes.
 *
 * Thread rule: a clflash_context may be used by several threads at once, each with its own command
 * queue (or the context's own queue, which OpenCL makes thread-safe). Freeing a context while another
 * thread still uses it is the caller's error.
 *
 * Structs the caller allocates (clflash_context_options, clflash_attention_desc, clflash_plan,
 * clflash_merge_desc, clflash_append_desc) begin with `struct_size`: set it to the size of the struct as your header declares it,
 *     clflash_attention_desc d = {.struct_size = sizeof d};     or     d.struct_size = sizeof d;
 * clflash reads and writes only the first struct_size bytes. So a program built against an older
 * header keeps working with a newer library of the same CLFLASH_ABI_VERSION: the fields it does not
 * know count as zero, which is each field's default. A struct_size larger than the library's own
 * struct (a newer program, an older library) is accepted when every byte the library does not know
 * is zero, and refused with CLFLASH_ERROR_UNSUPPORTED otherwise (the program asks for something this
 * library cannot do). A struct_size of 0, one smaller than the struct of 0.5.0 (the first with the
 * field) or one above 4096 is CLFLASH_ERROR_INVALID_ARGUMENT (CLFLASH_ERROR_INVALID_OPTIONS for the
 * options).
 */
#ifndef CLFLASH_H
#define CLFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(CLFLASH_BUILDING_SHARED)
#define CLFLASH_API __declspec(dllexport)
#elif defined(_WIN32) && !defined(CLFLASH_STATIC)
#define CLFLASH_API __declspec(dllimport)
#elif defined(__GNUC__)
#define CLFLASH_API __attribute__((visibility("default")))
#else
#define CLFLASH_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions. The macros describe the header you compiled against; the functions describe the
 * library you linked. A careful caller checks that the two agree:
 *     if (clflash_version_number() != CLFLASH_VERSION_NUMBER) ...
 * ------------------------------------------------------------------------------------------- */
#define CLFLASH_VERSION_MAJOR 0
#define CLFLASH_VERSION_MINOR 5
#define CLFLASH_VERSION_PATCH 0
#define CLFLASH_VERSION_NUMBER \
    (CLFLASH_VERSION_MAJOR * 10000 + CLFLASH_VERSION_MINOR * 100 + CLFLASH_VERSION_PATCH)

/* The binary interface's generation: the shared library is libclflash.so.CLFLASH_ABI_VERSION. It
 * changes whenever a program linked against an older library of the same number could break: a
 * function or field removed or changed in meaning or place. New functions, and new fields at the
 * end of the caller-allocated structs (see struct_size above), keep the number. 1 since 0.5.0, which
 * gave the structs their struct_size; 0.4 and earlier (libclflash.so.0) had none. */
#define CLFLASH_ABI_VERSION 1

/* The linked library's version as major*10000 + minor*100 + patch. Thread-safe. */
CLFLASH_API unsigned clflash_version_number(void);
/* The linked library's version as "major.minor.patch"; a static string. Thread-safe. */
CLFLASH_API const char *clflash_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes. One list (an X-macro) produces both the constants and their messages, so the two
 * can never drift apart. OpenCL's own negative codes (CL_OUT_OF_RESOURCES = -5, ...) are returned
 * unchanged whenever OpenCL reported the failure.
 * ------------------------------------------------------------------------------------------- */
#define CLFLASH_STATUS_LIST(X)                                                                     \
    X(CLFLASH_SUCCESS, 0, "success")                                                               \
    X(CLFLASH_ERROR_INVALID_ARGUMENT, -2000,                                                       \
      "invalid argument (a NULL or foreign handle, pointer, queue, event list or buffer, a "       \
      "struct_size out of range, or two arguments that must differ are the same buffer)")          \
    X(CLFLASH_ERROR_UNSUPPORTED, -2001, "not supported by this version of clflash or this device") \
    X(CLFLASH_ERROR_TILE_TOO_LARGE, -2002,                                                         \
      "the requested tile does not fit the device's local memory or work-group limits")           \
    X(CLFLASH_ERROR_BUILD_FAILED, -2003,                                                           \
      "an OpenCL program failed to build; see clflash_context_build_log()")                        \
    X(CLFLASH_ERROR_NO_DEVICE, -2004, "no OpenCL device found (or none matches CLFLASH_DEVICE)")   \
    X(CLFLASH_ERROR_OUT_OF_HOST_MEMORY, -2005, "a host memory allocation failed")                  \
    X(CLFLASH_ERROR_INVALID_DTYPE, -2006,                                                          \
      "the dtype or out_dtype is unset, unknown, or a combination clflash does not take")          \
    X(CLFLASH_ERROR_INVALID_SHAPE, -2007,                                                          \
      "a dimension is zero, too large, or heads_kv does not divide heads_q")                       \
    X(CLFLASH_ERROR_INVALID_FLAGS, -2008,                                                          \
      "unknown bits are set in flags or bias_broadcast, or a window is given without its flag")    \
    X(CLFLASH_ERROR_INVALID_SCALE, -2009,                                                          \
      "a scale is NaN or infinite, the softcap is negative, or i8 scales are set for another dtype") \
    X(CLFLASH_ERROR_INVALID_LAYOUT, -2010,                                                         \
      "a layout is invalid: output rows or heads overlap, or an index overflows")                  \
    X(CLFLASH_ERROR_BUFFER_TOO_SMALL, -2011,                                                       \
      "a buffer is smaller than its shape and layout need")                                        \
    X(CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE, -2012,                                                 \
      "the naive path's score matrix exceeds the device's maximum allocation")                     \
    X(CLFLASH_ERROR_HEAD_DIM_UNSUPPORTED, -2013,                                                   \
      "head_dim is larger than clflash supports (CLFLASH_MAX_HEAD_DIM)")                            \
    X(CLFLASH_ERROR_INVALID_OPTIONS, -2014,                                                        \
      "a context option is invalid (struct_size out of range, threads_per_row above 64, "          \
      "build_options too long)")

typedef int clflash_status;

enum {
#define CLFLASH_STATUS_ENUM_(name, value, message) name = value,
    CLFLASH_STATUS_LIST(CLFLASH_STATUS_ENUM_)
#undef CLFLASH_STATUS_ENUM_
    CLFLASH_STATUS_LIST_END_ = 1
};

/* A static, human-readable message for any status: clflash's own, OpenCL's ("CL_OUT_OF_RESOURCES:
 * ..."), or "unknown status" for anything else. Never NULL. Thread-safe. */
CLFLASH_API const char *clflash_status_string(clflash_status s);

/* One sentence about the last failure of a clflash call made by the calling thread, naming the
 * argument or value at fault; "" if none failed yet. Every function that returns a
 * clflash_status clears it on entry, so after one that succeeds it is ""; the pure functions,
 * accessors and clflash_status_string leave it as it was. The pointer stays valid until the
 * thread's next clflash call. Thread-safe (the text is per thread). */
CLFLASH_API const char *clflash_last_error_detail(void);

/* ---------------------------------------------------------------------------------------------
 * Storage types and the tile rule (pure functions: no device, no allocation, thread-safe).
 * ------------------------------------------------------------------------------------------- */
typedef enum { CLFLASH_F32 = 1, CLFLASH_F16 = 2, CLFLASH_BF16 = 3, CLFLASH_I8 = 4 } clflash_dtype;

/* The largest head_dim any kernel accepts. */
#define CLFLASH_MAX_HEAD_DIM 256u
/* The largest seq_k (kernels index keys in 32-bit signed arithmetic) and seq_q (65535 blocks of 16
 * rows, a grid limit of CUDA-class devices). Larger values are CLFLASH_ERROR_INVALID_SHAPE. */
#define CLFLASH_MAX_SEQ_K (1u << 30)
#define CLFLASH_MAX_SEQ_Q (65535u * 16u)
/* The largest batch and heads_q (each is one grid dimension, 65535 on CUDA-class devices). Larger
 * values are CLFLASH_ERROR_INVALID_SHAPE. Added in 0.4; the limit itself is older. */
#define CLFLASH_MAX_BATCH 65535u
#define CLFLASH_MAX_HEADS 65535u

/* Bytes per element: 4, 2, 2, 1 for F32, F16, BF16, I8; 0 for an unknown value. */
CLFLASH_API size_t clflash_dtype_size(clflash_dtype t);

/* Bytes of one dense score matrix for one head: seq_q * seq_k * bytes_per_score.
 * UINT64_MAX if the product overflows. The tile rule's worked example (n = 4096, fp16):
 * (4096, 4096, 2) = 33,554,432 (32 MiB). */
CLFLASH_API uint64_t clflash_score_matrix_bytes(uint64_t seq_q, uint64_t seq_k, uint64_t bytes_per_score);

/* Bytes of one flash tile, the tile rule: (3*B*d + B*B) * s, a Q block, a K block, a V block and
 * the B x B score block. UINT64_MAX on overflow. The rule's worked example: (64, 128, 2) = 57,344
 * (56 KiB); (256, 128, 2) = 327,680 does not fit 192 KiB, (256, 128, 1) = 163,840 does. */
CLFLASH_API uint64_t clflash_tile_bytes(uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem);

/* The largest B whose tile fits local_mem_bytes: the largest multiple of 16 that fits; if none,
 * the largest of 8, 4, 2, 1 that fits; 0 if none fits (or head_dim or bytes_per_elem is 0).
 * The rule's worked example: (196608, 128, 2) = 160. */
CLFLASH_API uint64_t clflash_max_block(uint64_t local_mem_bytes, uint64_t head_dim, uint64_t bytes_per_elem);

/* ---------------------------------------------------------------------------------------------
 * Contexts: one OpenCL context and device, their facts, an in-order queue, and the cache of built
 * programs. Create once, use from any number of threads, free once.
 * ------------------------------------------------------------------------------------------- */
typedef struct clflash_context clflash_context;

typedef struct {
    uint32_t struct_size; /* sizeof(clflash_context_options), see the top of this header */
    /* 0: use the device's CL_DEVICE_LOCAL_MEM_SIZE. Else a cap on the local memory the planner may
     * plan for; a value above the device's size is treated as the device's size. Useful to plan as
     * a smaller GPU would (49152 plans as a 48 KiB device does). */
    uint64_t local_mem_budget;
    /* Extra options appended to every clBuildProgram call (for example "-cl-nv-verbose"); NULL or
     * "" for none. The string is copied. Never pass -cl-finite-math-only: clflash relies on -inf.
     * Options naming CLFLASH_CPU_PATH are CLFLASH_ERROR_INVALID_OPTIONS since 0.5 (the tuning
     * setting portable.cpu_path chooses that path). */
    const char *build_options;
    /* Added after the fields above. 0: the device class's tuned value. Else the number of
     * work-items that share one query row in the portable kernel, 1 to 64 (a larger value is
     * CLFLASH_ERROR_INVALID_OPTIONS at create; the planner rounds it down to a power of two that
     * divides B): lets tests and tuning force what the device would decide. For
     * the forward, nonzero also selects the portable kernel's lane-per-row path over its register
     * tiles (see clflash_plan_attention). */
    uint32_t threads_per_row;
    /* Added in 0.3. 0: vendor kernels are used where they apply (today the NVIDIA tensor-core
     * forward and backward, see clflash_plan_attention). Nonzero: always the portable kernels.
     * Setting the environment variable CLFLASH_PORTABLE=1 (any value but empty or "0") when the context is
     * created does the same. (CLFLASH_WGMMA at create says where the Hopper kernel
     * nv_wgmma_forward may run: see clflash_plan_attention.) */
    uint32_t portable_only;
    /* Added in 0.5 (past 0.5.0's first layout): tuning settings in the syntax of
     * clflash_context_set_tuning, applied after the tuning file's and before CLFLASH_TUNE's;
     * NULL or "" for none. Checked and copied at create: a setting that is not valid is
     * CLFLASH_ERROR_INVALID_OPTIONS (clflash_last_error_detail names it). */
    const char *tuning;
} clflash_context_options; /* zero-initialised (but for struct_size) = defaults; fields added later
                              keep that rule */

/* Wraps a caller's context and device. clflash retains ctx (and releases it on free), creates its
 * own in-order queue on dev (the one clflash_context_queue returns), and copies opt (NULL =
 * defaults); 0.4 created a second, private queue for the naive path's abort flag, 0.5 does not.
 * *out is set only on success.
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (NULL ctx, dev or out);
 * CLFLASH_ERROR_INVALID_OPTIONS (an invalid struct_size, threads_per_row above 64, build_options
 * longer than 4096 characters or naming CLFLASH_CPU_PATH, or tuning settings that are not valid,
 * from the option, CLFLASH_TUNE or the file CLFLASH_TUNING_FILE names); CLFLASH_ERROR_UNSUPPORTED (options this library does not know are
 * set: see struct_size); CLFLASH_ERROR_OUT_OF_HOST_MEMORY; or the OpenCL error from querying the device or
 * creating the queue (for example CL_INVALID_CONTEXT, CL_INVALID_DEVICE). */
CLFLASH_API clflash_status clflash_context_create(cl_context ctx, cl_device_id dev,
                                                  const clflash_context_options *opt,
                                                  clflash_context **out);

/* Creates an OpenCL context and queue on a device chosen this way: if the environment variable
 * CLFLASH_DEVICE is set and not empty, it is either an index "P:D" (platform P, device D, from 0, as
 * `clflash-query` lists them) or a case-insensitive substring of the device's or the platform's name
 * or vendor (the first device that matches; "pocl" matches PoCL's vendor, since 0.5);
 * otherwise the first GPU of any platform, else the first device of any type.
 * Returns: as clflash_context_create, plus CLFLASH_ERROR_NO_DEVICE when no device exists or none
 * matches CLFLASH_DEVICE. */
CLFLASH_API clflash_status clflash_context_create_default(const clflash_context_options *opt,
                                                          clflash_context **out);

/* Waits for the context's queue, releases everything it created or retained. NULL is a no-op.
 * Buffers, queues and events the caller passed in stay the caller's. */
CLFLASH_API void clflash_context_free(clflash_context *c);

/* Accessors; each returns NULL for a NULL context. The objects stay owned by the context (retain
 * them if you need them past clflash_context_free). */
CLFLASH_API cl_context clflash_context_cl(const clflash_context *c);
CLFLASH_API cl_device_id clflash_context_device(const clflash_context *c);
CLFLASH_API cl_command_queue clflash_context_queue(const clflash_context *c); /* in-order, owned */

/* The build log of the last program that failed to build in this context, "" if none did (or c is
 * NULL). The text stays valid until clflash_context_free. On a PoCL device a build that fails with
 * no compiler message in its log (what PoCL's on-disk kernel cache gives processes that build the
 * same program at once) is retried twice, 0.1 s and 0.2 s later, before it counts as failed. */
CLFLASH_API const char *clflash_context_build_log(const clflash_context *c);

/* Tuning (since 0.5): the kernel parameters the planners choose can be set instead, for devices
 * the defaults were not measured on and for measurement. `clflash-tune` finds values on a device
 * and writes them as a tuning file. Settings are rules: a rule is items "key=value" joined by ',',
 * rules are joined by ';' (whitespace around keys and values is ignored). A rule's items are
 * conditions and parameters:
 *  - conditions: device=TEXT (a case-insensitive part of the device's name), class=cpu,
 *    nvidia_gpu, amd_gpu, intel_gpu, other_gpu or other (the device's kind as clflash classes it:
 *    CPUs, then GPUs by vendor; one or more joined by '|'), dtype=f32|f16|bf16|i8 (likewise),
 *    head_dim=N or head_dim=LO-HI. A rule without a condition applies to every call; one whose
 *    device or class does not match this context's device is dropped.
 *  - parameters (a value outside the range is an error; an empty value, "key=", sets the
 *    planner's own choice again, before any rule, the built-in ones included):
 *      portable.regtile        the portable kernel's GPU path: 0 for the lane-per-row path, or
 *                              RMxTCxBQ[xB]: RM rows per work-item (1, 2, 4, 8), TC work-items per
 *                              row group (a power of two up to 32), BQ query rows per work-group
 *                              (a multiple of RM up to 256), and optionally a cap B on the block
 *      portable.cpu_path       0 or 1: the portable kernels' CPU path (one work-item per row, fp32
 *                              tiles) or their GPU paths, on any device (default: CPU devices 1)
 *      portable.large_grf      0 or 1: the register-tiled path built with Intel's
 *                              -cl-intel-256-GRF-per-thread (256 registers a thread, half the
 *                              threads); a compiler that refuses the option builds it without, and
 *                              the plan then reports portable.large_grf=0 (default 0)
 *      portable.max_block      1..1024, a cap on B of the portable forward (default 64, 32 on
 *                              devices clflash does not class as CPU or GPU)
 *      portable.threads_per_row  1..64, the most work-items that share a row on its lane path (a
 *                              power of two that divides B is taken; default
 *                              GPUs 16, 4 at head_dim below 16, CPUs 1, others 4; the context
 *                              option threads_per_row, where set, wins)
 *      portable.max_work_group  1..1024, its largest work-group (default GPUs 256, CPUs 64,
 *                              others 128; never above the device's limit). B comes first: the
 *                              work-items per row are what is left of the work-group at that B.
 *                              The plan reports these three only where a setting gave them
 *      portable_backward.max_block, .threads_per_row, .max_work_group  the same for the
 *                              portable backward (its own, so that each can be tuned alone)
 *      portable_backward.amd_waves  0..16: 0 (the default), or the occupancy in waves per SIMD
 *                              that clang's AMD back end schedules the backward's gradient kernel
 *                              for (amdgpu_waves_per_eu; other compilers ignore it); a built-in
 *                              rule sets 2 on RDNA 3 in f32 above head_dim 128, where clang spills
 *                              without it. Reported where set
 *      nv_forward.block        16..64, a cap on B of the tensor-core forward
 *      nv_forward.warps        1..16, its warps per work-group
 *      nv_forward.mtiles       1..4, its 16-row slices per warp
 *      nv_forward.stages       2..8, its K/V tiles in local memory (fewer if they do not fit)
 *      nv_forward.fused_merge  0 or 1: split parts merged in the flash kernel's launch (1) or by
 *                              the merge kernel
 *      nv_forward.rescale_thresh  -1..126: O is rescaled when a row maximum grew by more than this
 *                              (log2 units; -1: every tile). Default 8 at head_dim >= 128, else -1
 *      nv_forward.q_direct     0 or 1: Q's fragments loaded from global memory straight into
 *                              registers (default at head_dim <= 64) or staged in local memory
 *      nv_forward.merge_group, .merge_parts, .merge_lse_batch, .merge_prefetch  the fused
 *                              merge of split parts (see cl/nv_mma_forward.cl): items merged
 *                              side by side per work-item 1..8 (default 4), parts whose loads go
 *                              out together 1..16 (8), lse loads in flight per work-item 1..16
 *                              (8), and 0 or 1: the first round's loads before the lse phase (1)
 *      nv_forward.bias_staged  0 or 1: a bias whose offset and strides are multiples of 4 floats
 *                              staged in local memory beside K and V, with two 16-row slices per
 *                              warp (1, the default), or read into registers a tile ahead with one
 *                              slice (0, and every other bias, a row stride of 0 included)
 *      nv_forward.q_chunk      1..65536: with the causal mask, the query blocks (the last rows
 *                              first) that run side by side over every head and batch entry
 *                              before the next ones (default 1)
 *      nv_backward.block       16..64, a cap on B of the tensor-core backward (rounded down to a
 *                              multiple of 16)
 *      nv_backward.warps       1..16, its warps per work-group
 *      nv_backward.maxrregcount  32..255, a register cap passed to NVIDIA's compiler
 *      nv_backward.stream      0 or 1: how its dK/dV work-groups copy Q and dO (default 1 at
 *                              head_dim >= 128)
 *      nv_backward.chunk       0..65536: its work-groups (dK/dV groups, then dQ groups) that run
 *                              side by side over every head and batch entry before the next ones
 *                              (0: every group of one head after another; the default is 16 with
 *                              a bias, or with the causal mask or a window and neither key
 *                              lengths nor a packed variable-length batch, else 0)
 *      nv_wgmma.pipeline       0 or 1: the Hopper forward (nv_wgmma_forward) with its
 *                              pipelined loop, fed by a producer warpgroup (1), or the loop that
 *                              waits for every product (0, the default)
 *      nv_wgmma.block          32..64, a cap on its B (32 or 64; a value between gives 32;
 *                              above head_dim 128 B is 16 whatever the cap)
 *      nv_wgmma.warpgroups     1..4: its warpgroups of 128 work-items (64 query rows each) per
 *                              work-group that compute; by default 3 beside the producer, 4 at
 *                              head_dim 64 without one, 2 with nv_wgmma.pipeline=1 and above
 *                              head_dim 128 (2 or 3 there give 2), fewer where seq_q has fewer
 *                              64-row slices
 *      nv_wgmma.stages         2..6: K/V tile pairs in flight in its waiting loop without a
 *                              producer (default 2; a count whose tiles do not fit the local
 *                              memory steps down)
 *      nv_wgmma.producer       0 or 1: its waiting loop with one more warpgroup that streams K
 *                              and V into rings of their own (3 and 2 tiles) and hands them over
 *                              through mbarriers, the consumer warpgroups issuing their products
 *                              in turns (default 1; nv_wgmma.warpgroups=4 takes the loop without
 *                              it: four consumers beside it would hold 112 registers each, too few
 *                              to keep two product groups in flight)
 *      nv_wgmma.tma            0 or 1: the producer's tiles copied by the tensor memory
 *                              accelerator, whole 128-byte-swizzled boxes through tensor maps the
 *                              kernel builds (1, the default, where B is 32 at head_dim 128, 64
 *                              at 64 and 16 at 256), or by cp.async, 16 bytes a work-item (0;
 *                              head_dims above 128 then run on nv_mma_forward)
 *      nv_wgmma.persistent     0 or 1: with TMA, one work-group per compute unit that takes the
 *                              call's query blocks one after another, the next block's tiles
 *                              streaming in while the last one ends (1), or a work-group per
 *                              block (0, the default: on an H100 1.00x to 1.03x faster, except
 *                              at head_dim 64 with the causal mask, 0.98x)
 *      nv_wgmma.work_groups    0..65536: the most work-groups the persistent kernel launches (0,
 *                              the default: the device's compute units); fewer leave compute units
 *                              to other work, and let tests run many blocks per work-group
 *      nv_wgmma.q_chunk        0..65536: the query blocks that run side by side over every head
 *                              and batch entry before the next ones, the last rows first with the
 *                              causal mask, so that they share K and V in the L2 cache (0, the
 *                              default: 4 with the causal mask up to head_dim 128, 1 at 256, all
 *                              of a head's blocks without the mask)
 * For each call the rules whose conditions hold apply in order, a later value winning. The order:
 * clflash's built-in rules (register tiles for the AMD and Intel GPU families whose compilers
 * spill the planner's defaults: docs/tuning.md lists them), the file named by the environment
 * variable CLFLASH_TUNING_FILE (one rule per line, '#' starts a comment), the context option
 * `tuning`, the environment variable CLFLASH_TUNE, all read once
 * when the context is created (a file that cannot be read, or any setting that is not valid, fails
 * the create with CLFLASH_ERROR_INVALID_OPTIONS), then each clflash_context_set_tuning call. A
 * parameter only acts where its kernel runs, and a value the kernel's limits refuse (a block or
 * stage count that does not fit) steps down as the planner's own choices do. Each plan reports
 * the parameters its kernel used in clflash_plan.tuning, in this syntax.
 * Example: "nv_forward.stages=4; dtype=f16,head_dim=65-128,nv_forward.warps=2".
 *
 * clflash_context_set_tuning appends the rules of `spec` to the context's (plans cached before keep
 * their values only for the settings they were made with: a call planned under other settings is
 * planned again). Safe to call while other threads run calls on the context; a call already
 * planning uses the rules of its start.
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (not a live context, or spec NULL);
 * CLFLASH_ERROR_INVALID_OPTIONS (spec not valid: nothing of it is applied; the detail says what);
 * CLFLASH_ERROR_OUT_OF_HOST_MEMORY. */
CLFLASH_API clflash_status clflash_context_set_tuning(clflash_context *c, const char *spec);

/* ---------------------------------------------------------------------------------------------
 * Describing an attention call.
 * ------------------------------------------------------------------------------------------- */

/* Causal masking, aligned bottom-right: query i sees key j iff j <= i + seq_k - seq_q (the
 * descriptor's diagonal_offset moves that diagonal). When seq_q > seq_k the first seq_q - seq_k
 * queries see no key: their O rows are 0 and lse is -inf. */
#define CLFLASH_CAUSAL (1u << 0)
/* Sliding window: with d = i + seq_k - seq_q, query i sees key j iff
 * d - window_left <= j <= d + window_right (the descriptor's fields). With CLFLASH_CAUSAL as well,
 * both rules hold. */
#define CLFLASH_WINDOW (1u << 1)
/* With key_lengths (a KV cache whose sequences have different lengths): causal, window and ALiBi
 * take batch entry b's diagonal at its own key length, d = i + L - seq_q with L = key_lengths[b]
 * (clamped to [0, seq_k]), instead of at the buffer's seq_k. The seq_q queries are then the last
 * seq_q positions of each sequence, as in FlashAttention's cache_seqlens rule: with causal,
 * query i of a sequence of L keys sees key j iff j <= i + L - seq_q, so the queries of a ragged
 * multi-token step never see each other's future. Without this flag key_lengths only hides the
 * keys j >= L and the diagonal stays at i + seq_k - seq_q (the meaning before 0.5, kept). Without
 * key_lengths the flag changes nothing. Forward and backward, every kernel. */
#define CLFLASH_ALIGN_TO_KEY_LENGTH (1u << 2)
#define CLFLASH_KNOWN_FLAGS (CLFLASH_CAUSAL | CLFLASH_WINDOW | CLFLASH_ALIGN_TO_KEY_LENGTH)

/* Bits of clflash_attention_desc.bias_broadcast: that dimension of the bias has stride 0, so one
 * bias is shared by every batch entry / head / query row. */
#define CLFLASH_BROADCAST_BATCH (1u << 0)
#define CLFLASH_BROADCAST_HEADS (1u << 1)
#define CLFLASH_BROADCAST_ROWS (1u << 2)

/* Where a tensor's elements are, in elements of its dtype. Element (b, h, i, c) of a
 * [batch][heads][seq][head_dim] tensor lives at
 *     offset + b*batch_stride + h*head_stride + i*seq_stride + c
 * head_dim is always contiguous. A stride of 0 means its contiguous default:
 *     seq_stride = head_dim, head_stride = seq * seq_stride, batch_stride = heads * head_stride,
 * so an all-zero layout is the contiguous [batch][heads][seq][head_dim] tensor, and e.g.
 * [batch][seq][heads][head_dim] is {0, seq*heads*d, d, heads*d}. */
typedef struct {
    uint64_t offset, batch_stride, head_stride, seq_stride;
} clflash_layout;

typedef struct {
    uint32_t struct_size; /* sizeof(clflash_attention_desc), see the top of this header */
    uint32_t batch;    /* 1 .. CLFLASH_MAX_BATCH */
    uint32_t heads_q;  /* 1 .. CLFLASH_MAX_HEADS */
    uint32_t heads_kv; /* 0 = heads_q; else must divide heads_q (GQA/MQA): query head h reads K/V
                          head h / (heads_q / heads_kv) */
    uint32_t seq_q;    /* 1 .. CLFLASH_MAX_SEQ_Q */
    uint32_t seq_k;    /* 1 .. CLFLASH_MAX_SEQ_K (seq_q != seq_k is fine) */
    uint32_t head_dim; /* 1 .. CLFLASH_MAX_HEAD_DIM */
    clflash_dtype dtype; /* storage type of Q, K, V and (unless out_dtype says otherwise) O; all
                            math is fp32. BF16 is stored with round-to-nearest-even. I8 holds
                            quantised values (see q_scale) and writes O as out_dtype */
    float scale;       /* 0 = 1/sqrt(head_dim); must be finite */
    uint32_t flags;    /* CLFLASH_CAUSAL, ...; unknown bits are an error */
    uint32_t block;    /* 0 = the planner chooses B; else exactly this B or
                          CLFLASH_ERROR_TILE_TOO_LARGE */
    clflash_layout q, k, v, o;

    /* ---- Added after the fields above. Zero keeps each one off or at its default. ------------ */
    clflash_dtype out_dtype; /* O's storage type: 0 = dtype (F32 when dtype is I8). F32, F16 or BF16
                                with I8 input; otherwise 0 or dtype itself */
    float q_scale, k_scale, v_scale; /* I8 only (must be 0 otherwise): real value = scale * stored
                                integer, per tensor; 0 = 1. Must be finite */
    uint32_t window_left, window_right; /* with CLFLASH_WINDOW in flags (an error without it) */
    float softcap;        /* 0 = off; else each scaled score s becomes softcap * tanh(s / softcap)
                             before bias and ALiBi are added. Finite and >= 0 */
    cl_mem bias;          /* NULL = none; else a float buffer of the context added to the scores;
                             -INFINITY masks. Element (b, h, i, j) (query i, key j) is at
                             offset + b*batch_stride + h*head_stride + i*seq_stride + j of
                             bias_layout; zero strides take the defaults seq_stride = seq_k,
                             head_stride = seq_q * seq_stride, batch_stride = heads_q * head_stride,
                             except those bias_broadcast sets to 0 */
    clflash_layout bias_layout;
    uint32_t bias_broadcast; /* CLFLASH_BROADCAST_BATCH | _HEADS | _ROWS */
    cl_mem alibi_slopes;  /* NULL = none; else float[heads_q] of the context: the score of query i
                             and key j gets -slope[h] * |i + seq_k - seq_q - j| (after softcap) */
    cl_mem key_lengths;   /* NULL = none; else int32[batch] of the context: keys j >= key_lengths[b]
                             are invisible to batch entry b (values are clamped to [0, seq_k]); a
                             row left with no visible key gets O = 0 and lse = -INFINITY. Where
                             causal, window and ALiBi put the diagonal: CLFLASH_ALIGN_TO_KEY_LENGTH
                             and diagonal_offset */

    /* ---- Added in 0.5 (past 0.5.0's first layout; see struct_size). Zero keeps the default. ---- */
    uint32_t num_splits;  /* split-KV (flash-decoding) for the forward: 0 = the planner decides, 1 =
                             never split, N = exactly N parts (1 .. CLFLASH_MAX_SPLITS; more parts
                             than key tiles leave the extra parts empty). With a fixed N a row's
                             result does not depend on the batch it is computed in (with 0 the
                             planner's choice, and so the rounding, can change with the batch).
                             See clflash_plan_attention for the planner's rule; the backward
                             ignores it */
    cl_mem bias_grad;     /* NULL = none; else clflash_backward also writes the bias gradient here,
                             a float buffer of the context in the bias's own layout (bias_layout
                             and bias_broadcast): each element the layout addresses is the sum of
                             dS = P * (dP - D) over the batch entries, heads and query rows that
                             share it (see clflash_backward). Needs a bias; must be a buffer of its
                             own. The forward ignores it; clflash_backward_naive refuses it */

    /* ---- A paged KV cache (since 0.5; clflash_forward only). See "Paged KV caches" below. ---- */
    cl_mem block_table;     /* NULL = K and V are ordinary tensors; else int32[batch][pages_per_seq]
                               of the context: entry [b][p] is the pool page that holds keys
                               p * page_size .. (p + 1) * page_size - 1 of batch entry b */
    uint32_t page_size;     /* keys per page, 1 .. CLFLASH_MAX_PAGE_SIZE (with a block_table) */
    uint32_t pages_per_seq; /* the block table's row length; seq_k <= pages_per_seq * page_size */
    uint32_t num_pages;     /* pages in the pool (K's and V's "batch" dimension) */

    /* ---- Variable-length packed batches (since 0.5; forward and backward). See "Variable-length
     * batches" below. ---- */
    cl_mem cu_seqlens_q;    /* NULL (with cu_seqlens_k NULL) = ordinary tensors; else int32[batch + 1]
                               of the context: sequence b's queries are rows cu_seqlens_q[b] ..
                               cu_seqlens_q[b + 1] - 1 of the packed Q and O (dO, dQ) */
    cl_mem cu_seqlens_k;    /* the same for the keys: rows of the packed K and V (dK, dV) */
    uint32_t total_q;       /* rows of the packed Q and O (>= 1 with cu_seqlens_q; 0 without) */
    uint32_t total_k;       /* rows of the packed K and V (>= 1 with cu_seqlens_k; 0 without) */

    /* ---- Moving the diagonal (since 0.5; forward and backward). ---- */
    int32_t diagonal_offset; /* 0 = the bottom-right diagonal; else query i's diagonal key, which
                                CLFLASH_CAUSAL, CLFLASH_WINDOW and ALiBi are aligned to, becomes
                                d = i + seq_k - seq_q + diagonal_offset (seq_k is the entry's key
                                length with CLFLASH_ALIGN_TO_KEY_LENGTH, the sequence's length in a
                                variable-length batch): causal sees keys j <= d, a window
                                d - window_left .. d + window_right, ALiBi adds -slope * |d - j|.
                                For queries at global positions q0 .. and keys at k0 .. of a longer
                                sequence (a chunk of a prefill, a shard of context parallelism),
                                diagonal_offset = (q0 - k0) - (seq_k - seq_q) gives the rules of the
                                whole sequence; seq_q - seq_k gives the top-left alignment of
                                PyTorch's is_causal. Rows left with no visible key get O = 0 and
                                lse = -INFINITY. Without a diagonal rule it changes nothing.
                                -CLFLASH_MAX_SEQ_K .. CLFLASH_MAX_SEQ_K, else
                                CLFLASH_ERROR_INVALID_ARGUMENT. Every kernel takes it at run time
                                (no new build per offset) */
} clflash_attention_desc;

/* The most parts num_splits may ask for (and clflash_merge_states take). */
#define CLFLASH_MAX_SPLITS 256u
/* The largest page of a paged KV cache, in keys. */
#define CLFLASH_MAX_PAGE_SIZE 65536u

/* Paged KV caches (since 0.5; clflash_forward and clflash_plan_attention). With d->block_table
 * set, K and V are pools of num_pages pages of page_size keys each, and the block table says
 * which pages hold a batch entry's keys: key j of entry b is key slot j % page_size of page
 * block_table[b][j / page_size]. The pools' layouts (d->k, d->v) are ordinary clflash_layouts
 * with the page in place of the batch: element (page p, K/V head h, slot r, column c) is at
 *     offset + p*batch_stride + h*head_stride + r*seq_stride + c
 * so the contiguous default (zero strides) is a [page][head][slot][head_dim] pool, and
 * [page][slot][head][head_dim] (FlashAttention's and vLLM's) is {0, page_size*heads_kv*d, d,
 * heads_kv*d}. seq_k is the longest sequence the call sees (at most pages_per_seq * page_size);
 * key_lengths gives each entry's own length (keys past it, and the table entries for them, are
 * never used), and CLFLASH_ALIGN_TO_KEY_LENGTH puts causal/window diagonals at each entry's
 * length, which is what one step of decoding or chunked prefill against a cache needs. Pages may
 * be shared between entries (a common prefix) and lie in any order. Q, O and lse are as without
 * paging. Every forward kernel reads the pages directly, split-KV parts and GQA packing
 * included; the naive forward and the backward refuse a block table (CLFLASH_ERROR_UNSUPPORTED).
 * The block table lives in device memory where clflash cannot check it before the kernels run:
 * an entry outside [0, num_pages) is clamped into it (negative ones read page 0, too large ones
 * the last page), so a bad table gives wrong attention but never reads outside the pools.
 * Validation: block_table needs page_size, pages_per_seq and num_pages (each >= 1) and a buffer of
 * at least batch * pages_per_seq int32s; those three without a block table are
 * CLFLASH_ERROR_INVALID_ARGUMENT; K and V must hold num_pages pages of their layouts. */

/* Variable-length batches (since 0.5; clflash_forward, clflash_backward and their planners), as
 * FlashAttention's flash_attn_varlen_func takes them. With d->cu_seqlens_q and d->cu_seqlens_k set
 * (both or neither: one alone is CLFLASH_ERROR_INVALID_ARGUMENT), the batch's sequences are packed
 * one after the other, without padding, into tensors of total_q query rows (Q, O, dO, dQ) and
 * total_k key rows (K, V, dK, dV). The two buffers are int32[batch + 1] of the context, cumulative
 * lengths: sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1, its keys rows
 * cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 (so cu_seqlens_x[0] is usually 0 and
 * cu_seqlens_x[batch] the total). seq_q and seq_k are then the longest sequence's lengths: the
 * grid is sized by them, and a sequence's range is cut to at most seq_q (seq_k) rows.
 *  - Layouts: element (token t, head h, column c) of a packed tensor is at
 *        offset + t*seq_stride + h*head_stride + c
 *    of its clflash_layout, whose batch_stride must be 0 (else CLFLASH_ERROR_INVALID_LAYOUT); zero
 *    strides take the token-major defaults seq_stride = heads * head_dim, head_stride = head_dim,
 *    a [total][heads][head_dim] tensor (FlashAttention's). Buffer sizes are checked with total_q
 *    and total_k rows; O's rows must not overlap, as always.
 *  - lse is float[heads_q][total_q] (FlashAttention's varlen layout): row (h, t) at h*total_q + t,
 *    written by the forward and read so by the backward.
 *  - Each sequence is its own attention problem of len_q(b) queries and len_k(b) keys: causal,
 *    window and ALiBi are aligned bottom-right per sequence (query i of sequence b sees key j iff
 *    j <= i + len_k(b) - len_q(b)); softcap, GQA/MQA, lse, split-KV (num_splits) and every
 *    portable forward path work as without packing. A sequence with 0 keys gets O = 0 and
 *    lse = -INFINITY (and dQ = 0); one with 0 queries writes no O, lse or dQ row, and its keys get
 *    dK = dV = 0 (no query sees them). Rows that no sequence covers (of O, lse, dQ, dK, dV) are
 *    never written.
 *  - Not combined with key_lengths, bias (and so bias_grad) or block_table:
 *    CLFLASH_ERROR_UNSUPPORTED. clflash_forward_naive and clflash_backward_naive refuse varlen
 *    (CLFLASH_ERROR_UNSUPPORTED). On NVIDIA GPUs of compute capability 8.0 or later, f16 and bf16
 *    calls run on the tensor-core kernels (forward, split-KV and backward), as without packing.
 *  - The cumulative lengths live in device memory where clflash cannot check them before the
 *    kernels run. Each value is clamped into [0, total] and a sequence's length is
 *    max(0, cu[b + 1] - cu[b]) cut to seq_q (seq_k), so non-monotone, negative or too large values
 *    never make a kernel read or write outside the buffers: a sequence whose values decrease is
 *    empty, one that runs past the total ends there. Where two sequences' ranges overlap (the
 *    values decrease and then rise again), both write the rows they share (O and lse, dQ; dK and
 *    dV for shared key rows): the results in those rows are unspecified, but every write stays
 *    inside the buffers, and rows only well-formed sequences cover are exact.
 *  - Validation: cu_seqlens_q and cu_seqlens_k must each hold batch + 1 int32s, must not be an
 *    output of the call, and need total_q and total_k in 1 .. INT32_MAX (else
 *    CLFLASH_ERROR_INVALID_SHAPE); total_q or total_k without the buffers is
 *    CLFLASH_ERROR_INVALID_ARGUMENT. Determinism is as without packing: no atomics, and dK, dV sum
 *    over their sequence's queries (and a GQA group's heads) in a fixed order. */

/* What the planner chose for a descriptor on a context's device. The caller sets struct_size
 * (see the top of this header) before passing it; clflash fills the first struct_size bytes and
 * leaves struct_size as it was. */
typedef struct {
    uint32_t struct_size;        /* sizeof(clflash_plan) */
    uint32_t block;              /* B, the tile rule's block: keys per K/V tile (and, on the
                                    portable kernel's lane and CPU paths, also the query rows per
                                    work-group; block_q below gives those for every kernel) */
    uint64_t tile_bytes;         /* the tile rule, (3*B*d + B*B) * dtype size */
    uint64_t local_mem_budget;   /* what B was planned against: the device's local memory, or the
                                    context's smaller local_mem_budget */
    uint64_t kernel_local_bytes; /* CL_KERNEL_LOCAL_MEM_SIZE of the built kernel (or clflash's
                                    own count of its local arrays, if the driver reports less).
                                    The portable kernel keeps Q, K, V in the storage type plus
                                    padding, and the B x B probability block in fp32, so this can
                                    differ from tile_bytes; it never exceeds local_mem_budget */
    uint64_t score_matrix_bytes; /* seq_q * seq_k * s, what naive attention writes per head, with s
                                    the size of O's storage type (the dtype's, except for I8) */
    uint64_t tiles_q, tiles_k;   /* ceil(seq_q / B), ceil(seq_k / B): the rule's tile counts
                                    (work-groups per head are ceil(seq_q / block_q) = kv_passes) */
    uint64_t kv_passes;          /* K and V are streamed once per query block:
                                    ceil(seq_q / block_q), which is tiles_q for the portable
                                    kernel */
    const char *kernel;          /* the kernel variant chosen, a static string:
                                    "flash_forward_portable", "flash_forward_regtile" (the
                                    portable kernel's register-tiled GPU path, added after 0.3),
                                    "nv_mma_forward" or "flash_decode_cpu" (since 0.5) */
    /* Added after the fields above (zero-initialised readers may ignore them): */
    uint32_t threads_per_row;    /* work-items that share one query row */
    uint32_t work_group_size;    /* work-items per work-group: block * threads_per_row on the lane
                                    and CPU paths; (block_q / rows per work-item) *
                                    threads_per_row on flash_forward_regtile (128 by default);
                                    32 * warps on the tensor-core kernels */
    /* Added in 0.3: */
    uint32_t block_q;            /* query rows per work-group: B for the portable kernel; for
                                    nv_mma_forward a multiple of 16 that may exceed B (those rows
                                    are held in registers, not in the tile rule's local memory);
                                    for flash_forward_regtile 64 (32 at d > 128), which may
                                    exceed B (the Q block is in local memory, counted in
                                    kernel_local_bytes, not in tile_bytes). The tuning settings
                                    nv_forward.warps/.mtiles and portable.regtile can set more
                                    (up to 1024 and 256). With packed_heads > 1 it counts packed
                                    rows (queries x heads of a GQA group), and kv_passes is
                                    ceil(seq_q * packed_heads / block_q): the passes over the keys
                                    of each (batch, K/V head) */
    /* Added in 0.5 (past 0.5.0's first layout): */
    uint32_t splits;             /* parts the keys are split into (1: no split; the forward only) */
    uint32_t packed_heads;       /* query heads whose rows share one work-group (GQA packing: the
                                    heads_q / heads_kv heads of one K/V head, which is then read
                                    once for all of them); 1 without packing */
    uint64_t workspace_bytes;    /* device scratch the call takes from the context's pool: the
                                    splits' partial O (fp32) and lse; 0 without splits (the
                                    tensor-core kernel adds 4 bytes per query block, its merge
                                    counters); nv_wgmma_forward with nv_wgmma.tma: 256 bytes per
                                    work-group, its K and V tensor maps */
    char tuning[384];            /* the tuning parameters the chosen kernel ran with, as
                                    "key=value,..." (see clflash_context_set_tuning), whether
                                    set or the planner's; "" for a kernel without any */
} clflash_plan;

/* Decoding: GQA packing and split-KV (since 0.5; the forward only).
 *  - Packing (plan.packed_heads): when all rows of a GQA group (seq_q x heads_q / heads_kv) fit one
 *    work-group's query block (128 rows on the tensor cores, the register tiles' block_q on the
 *    portable GPU path, 16 on the CPU decoding kernel below), one work-group holds the rows of all
 *    query heads of a K/V head, query-major (row r is query r / group of head r % group), and reads
 *    each K/V tile once for all of them. plan.block_q then counts those packed rows.
 *  - Split-KV (plan.splits): the keys are cut into parts of plan.block-aligned ranges, each part
 *    computed by its own work-groups into fp32 partial results (O and lse), which are merged exactly
 *    as clflash_merge_states does (the same bits for the same parts): on the tensor cores by the
 *    last work-group of each query block to finish, in the same launch, where the block's weights
 *    fit its local memory (else, and on the portable kernel, by a merge kernel launched after it);
 *    the forward's lse is the merged one, the same up to rounding as without parts. d->num_splits
 *    forces the count (1: none; N: exactly N). With 0 the planner's rule: let G be the work-groups
 *    the call would launch without parts (batch x heads (K/V heads when packed) x query blocks) and
 *    T = compute units x the kernel's target per unit, rounded up (the tensor-core kernel 2.4, the
 *    portable GPU path 4, CPUs 2). If G >= T there is one part; else ceil(T / G) parts, at most seq_k / 256
 *    (CPUs: seq_k / 1024) and CLFLASH_MAX_SPLITS, and one if the parts would need more than an
 *    eighth of the device's largest allocation. A part past the last visible key (causal,
 *    key_lengths) is empty and costs its launch only.
 *  - The parts live in device buffers the context keeps and reuses (plan.workspace_bytes of them):
 *    a call takes buffers no pending work uses, or used last by work on the same in-order queue
 *    (which runs first), so a steady stream of calls creates none. Plans and kernel objects are
 *    cached per context too: a repeated call with the same shape class (seq_k may change) plans
 *    nothing and creates no kernel. Both are released by clflash_context_free.
 *  - On CPU devices (the portable kernel's CPU path), a forward with at most 16 packed rows per
 *    K/V head runs "flash_decode_cpu" (cl/flash_decode_cpu.cl): one work-item per (batch, K/V head,
 *    part) streams that head's keys once for all its rows; plan.block is its keys per chunk (32, or
 *    the forced B), block_q its rows, work_group_size 1. Its semantics are the register-tiled path's
 *    (a chunk all rows see entirely multiplies a zero probability's V too).
 *
 * Kernel variants. The portable kernel (cl/flash_forward_*.cl) runs everywhere and implements every
 * feature. On NVIDIA devices of compute capability >= 8.0 (read through cl_nv_device_attribute_query)
 * the planner picks the tensor-core kernel "nv_mma_forward" (cl/nv_mma_forward.cl: inline PTX
 * mma.sync, ldmatrix, cp.async) when all of these hold: dtype F16 or BF16 with O of the same type;
 * head_dim up to 256 (since 0.5 any, not only multiples of 16: the kernel pads it to the next
 * multiple of 16 with zero columns); any layout (since 0.5: where head_dim or some offset or stride
 * of Q, K, V or O is not a multiple of 8 elements, rows are copied element by element instead of in
 * 16-byte asynchronous pieces, which is slower); and a forced block, if any, a multiple of 16 up to
 * 64. Every feature runs on it:
 * causal, GQA, lse, key lengths (since 0.5), and since 0.5 also sliding windows, softcap, bias (any
 * layout and broadcast) and ALiBi. Anything else, or the context option
 * portable_only, or CLFLASH_PORTABLE=1, gives the portable kernel. What differs in the tensor-core
 * kernel:
 *  - B obeys the same tile rule, but the kernel keeps the query block and the B x B scores in
 *    registers, not local memory. Its local memory holds two K and two V tiles (double-buffered,
 *    4*B*(d+8)*s bytes), which is what kernel_local_bytes reports and what must fit the budget;
 *    B steps down by 16 until it does (fp16, d = 128, 48 KiB: the rule allows B = 48, the kernel
 *    runs B = 32). block_q, its query rows per work-group (128, fewer when seq_q is short), is independent of B.
 *  - P is rounded to the storage type (f16 or bf16) before the P V product, as in
 *    FlashAttention-2; row sums, O and lse accumulate in fp32.
 *  - exp2 is the hardware approximation with results below 2^-126 flushed to zero (as CUDA's
 *    exp2f with fast math), in the forward and the backward; a probability that small is below
 *    f16/bf16 resolution beside the row's largest (1).
 *  - At head_dim >= 128 the running maxima the probabilities are taken against move only when a
 *    score of some row of the warp's 16-row slice exceeds its row's by more than 8 in log2 units
 *    (a factor 256); until then P may reach 256 and O is not rescaled. O = (sum P V) / (sum P)
 *    and lse are exact either way, and f16/bf16 keep the same relative precision up to 256.
 *  - With causal, the query blocks that see the most keys are launched first (the same work).
 *  - Windows and key lengths: the key tiles no row of a block sees are never loaded, and only the
 *    tiles some row sees in part are masked. A window's cost is therefore that of the tiles its
 *    band touches, about (window + block_q + B) keys per row, not of the visible keys alone.
 *  - Softcap: tanh(x) is computed as 1 - 2 / (1 + e^(2x)) from the hardware exp2 and reciprocal
 *    (an absolute error of a few units of 2^-24 times the cap; +-cap at the ends), not by the
 *    OpenCL tanh the portable kernel uses.
 *  - Bias: with a bias the work-group's warps hold one 16-row slice each (block_q 64), which
 *    leaves the registers for the bias of the current and the next key tile; two adjacent keys'
 *    biases are read with one 8-byte load when the bias offset and every bias stride are even, and
 *    a key tile that lies wholly inside the rows without clamping each pair.
 *  - A NaN in V row j reaches every row of the same query block whose key tile holds j, even rows
 *    that do not see key j (their P of 0 still multiplies V on the tensor core). The portable
 *    kernel confines it to the rows that see key j.
 * Decoding work-groups (one warp, at most 16 rows) keep three K/V tiles in local memory (two in
 * flight while one is computed) instead of two, with the B that keeps the most keys in flight
 * within the budget (plan.block; at head_dim 128 in f16 and 48 KiB, B = 16).
 * The nv_forward.* tuning parameters (clflash_context_set_tuning) override these choices.
 *
 * "nv_wgmma_forward" (cl/nv_wgmma_forward.cl), a forward on Hopper's warpgroup instructions
 * (wgmma) built through a PTX program binary retargeted to sm_90a, its K and V tiles copied by
 * Hopper's tensor memory accelerator. It computes right on an H200 and an H100, and on the H100
 * runs head_dim 128 at 1.36x FlashAttention-2's rate and 1.5x nv_mma_forward's, head_dim 64 at
 * 1.25x nv_mma_forward's, head_dim 96 at 1.2x FlashAttention-2's and 1.57x nv_mma_forward's, a
 * [n][n] bias 1.4x faster than nv_mma_forward (n = 4096; docs/performance/h200.md). It may run
 * where the device is an NVIDIA GPU of compute capability 9.0 whose driver passed the library's
 * sm_90a probe (a small wgmma
 * product checked exactly, once per context, the first time a call could use it) and the call is
 * one nv_mma_forward would take with: dtype F16 or BF16, head_dim 64, 128 or 256 (or another
 * multiple of 8 below 256, computed padded to the next of them with zeros), every row of Q, K, V
 * and O on 16 bytes, no paged cache or variable-length batch, no forced block and no forced split
 * (causal masks, sliding windows, softcap, ALiBi, key lengths, the diagonal's offset and alignment
 * it takes, and a bias without ALiBi and the padded head_dims in its default loop only: not with
 * nv_wgmma.pipeline=1 or nv_wgmma.producer=0). Head_dims above 128 run in that loop with its
 * copies through the tensor memory accelerator only (not with nv_wgmma.tma=0 or
 * nv_wgmma.persistent=1), and without softcap or a bias. Where, among those calls, is what the
 * environment variable CLFLASH_WGMMA says when the context is created:
 *   unset or empty  (the default) where it was measured faster than nv_mma_forward: head_dim
 *                   40 to 128 or 192 to 256 (below 40, padded to 64, and from 136 to 184,
 *                   padded to 256, it computes too many zeros), no sliding
 *                   window narrower than 1024 keys (window_left + window_right, window_left
 *                   alone with CLFLASH_CAUSAL: its 192-row blocks compute more masked pairs
 *                   than nv_mma_forward's, the more the narrower the window), at least 128
 *                   query rows a head, and enough rows in all
 *                   that nv_mma_forward would neither split the keys nor pack GQA heads (so
 *                   decoding and short prompts on few heads stay on nv_mma_forward, which spreads
 *                   them over the device; this kernel never splits);
 *   "0"             nowhere (nv_mma_forward; no probe runs);
 *   any other value wherever it may run (measurements and tests).
 * Any step that fails (the probe, the build through the sm_90a path, a kernel that does not fit)
 * plans nv_mma_forward instead; plan.kernel names the kernel that runs. (A B the device refuses
 * at enqueue, CL_OUT_OF_RESOURCES, is planned again below it for every kernel, as clflash_forward
 * says: above head_dim 128, where neither tensor-core kernel takes a B below 16, that ends on the
 * portable kernel.) Otherwise it has
 * nv_mma_forward's semantics (P rounded to the storage type, exp2 flushing below 2^-126, a NaN in
 * V reaching its block's rows); the two round differently, so results differ by rounding between
 * settings of CLFLASH_WGMMA, never between runs of one.
 *
 * The portable kernel has three paths. CPU devices take its CPU path ("flash_forward_portable");
 * every other device takes the register-tiled path "flash_forward_regtile": each work-item
 * computes a 4-row block of scores and of O, so that one local load feeds several multiply-adds,
 * with block_q = 64 query rows per work-group (32 at d > 128) and 8 work-items per row group (16
 * at d > 128). B still obeys the tile rule; the kernel keeps Q, one K-or-V tile and P in fp32
 * local memory, and B, then block_q, shrink until those real bytes (kernel_local_bytes) fit the
 * budget (48 KiB: d = 64 runs B = 48, d = 128 runs B = 16, in f32 and f16). Its semantics are the
 * lane path's, with one difference: in a tile that all of a work-item's rows see entirely, a
 * visible key whose probability underflows to 0 still multiplies its V (an Inf or NaN there then
 * gives NaN, as the exact product would). The lane-per-row path ("flash_forward_portable", one
 * row per 16 work-items) is the earlier GPU path; a context's threads_per_row option selects it,
 * and so does the tuning setting portable.regtile=0. portable.regtile=RMxTCxBQ[xB] sets the
 * register tiles instead of the planner's; portable.cpu_path=0 gives a CPU device the GPU paths
 * (the tests run them on PoCL so) and =1 any device the CPU path (clflash_context_set_tuning).
 *
 * Plans a forward call: reads the device's local memory (or the context's smaller budget), takes
 * the largest B that fits the tile rule, caps it by work-group limits and the tuned preference for
 * the device class, builds the kernel (cached), checks CL_KERNEL_LOCAL_MEM_SIZE and
 * CL_KERNEL_WORK_GROUP_SIZE, and steps B down until the real kernel fits. A forced d->block is used
 * exactly or refused. Buffers are not looked at. Thread-safe.
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (NULL context, descriptor or out; a
 * struct_size of the descriptor or of *out out of range; a bias_layout or bias_broadcast without a
 * bias); CLFLASH_ERROR_UNSUPPORTED (the descriptor sets fields this library does not know, see
 * struct_size); the descriptor errors
 * (CLFLASH_ERROR_INVALID_DTYPE, _INVALID_SHAPE, _INVALID_FLAGS, _INVALID_SCALE, _INVALID_LAYOUT,
 * _HEAD_DIM_UNSUPPORTED); CLFLASH_ERROR_TILE_TOO_LARGE; CLFLASH_ERROR_BUILD_FAILED;
 * CLFLASH_ERROR_OUT_OF_HOST_MEMORY; or an OpenCL error. */
CLFLASH_API clflash_status clflash_plan_attention(clflash_context *c, const clflash_attention_desc *d,
                                                  clflash_plan *out);

/* ---------------------------------------------------------------------------------------------
 * Running attention on device buffers. Commands go to `queue` (NULL = the context's own queue; a
 * caller's queue must belong to the context's cl_context and device). They wait for `wait`
 * (num_wait events, as in OpenCL) and, if `done` is not NULL, *done receives an event that
 * completes when everything the call enqueued has finished (release it with clReleaseEvent).
 * The call returns once the work is enqueued; it does not wait for it.
 *
 * q, k, v, o are buffers of the descriptor's dtype laid out as d->q, d->k, d->v, d->o say. Each
 * must be at least as large (CL_MEM_SIZE) as its layout's last element needs. `lse` may be NULL,
 * else it is a float buffer [batch][heads_q][seq_q] (with cu_seqlens [heads_q][total_q], see
 * "Variable-length batches") that receives, per query row, the natural log of
 * the sum of exp(scaled scores) over the keys it sees. A query row that sees no key gets O = 0 and
 * lse = -INFINITY, never NaN. O's gaps (elements outside its layout) are never written.
 *
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (NULL context, descriptor or required
 * buffer; a queue of another context or device; num_wait and wait disagreeing; a cl_mem that is
 * not a buffer; lse, bias, ALiBi slopes or key lengths that are the same buffer as an output or
 * as Q, K, V); the descriptor errors listed at clflash_plan_attention;
 * CLFLASH_ERROR_BUFFER_TOO_SMALL; CLFLASH_ERROR_TILE_TOO_LARGE; CLFLASH_ERROR_BUILD_FAILED;
 * CLFLASH_ERROR_OUT_OF_HOST_MEMORY; CLFLASH_ERROR_UNSUPPORTED when a forced num_splits needs
 * more partial results than the device's largest allocation; or an OpenCL error. If the device
 * refuses a planned tile at enqueue (CL_OUT_OF_RESOURCES) and B was not forced, B is stepped down
 * and the enqueue retried a few times before the error is returned. With split-KV parts two
 * kernels are enqueued and `done` is the second's; if OpenCL refuses the second (the merge), the
 * first still runs but writes only the context's scratch buffers, so no caller buffer is written.
 * ------------------------------------------------------------------------------------------- */
CLFLASH_API clflash_status clflash_forward(clflash_context *c, const clflash_attention_desc *d,
                                           cl_command_queue queue, cl_mem q, cl_mem k, cl_mem v,
                                           cl_mem o, cl_mem lse, cl_uint num_wait,
                                           const cl_event *wait, cl_event *done);

/* The naive baseline, with the same arguments and results as clflash_forward: it materializes
 * S = scale * Q K^T in a device buffer of O's storage type (seq_q * seq_k * its size bytes per
 * head: the dtype's, F32 or out_dtype for I8 input; as many heads at a time as fit the device's
 * maximum allocation), applies a row softmax in
 * place, then computes P V, each step a tiled kernel. The temporary is released once the work is
 * done. Its kernels write O and lse to temporaries of the call, and one last kernel copies them to
 * the caller's O and lse; it is enqueued only when every enqueue before it succeeded, so if one of
 * the several enqueues fails, the kernels already enqueued still run but write only the
 * temporaries: the failed call writes no caller buffer and the caller's queue stays usable (since
 * 0.5; before, an abort flag set through a second queue, an ordering OpenCL does not promise).
 * Additional statuses: CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE when one head's S, or (since 0.5) the
 * call's temporary O, exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE; CLFLASH_ERROR_UNSUPPORTED when the device's work-groups cannot
 * hold 256 work-items (the naive kernels' 16 x 16 tiles). */
CLFLASH_API clflash_status clflash_forward_naive(clflash_context *c, const clflash_attention_desc *d,
                                                 cl_command_queue queue, cl_mem q, cl_mem k, cl_mem v,
                                                 cl_mem o, cl_mem lse, cl_uint num_wait,
                                                 const cl_event *wait, cl_event *done);

/* ---------------------------------------------------------------------------------------------
 * Merging partial results (added in 0.5).
 * ------------------------------------------------------------------------------------------- */

/* The partial results of the same query rows over disjoint sets of keys, as clflash_forward gives
 * them with lse (O normalised, lse the natural log-sum-exp): for cascade or shared-prefix attention
 * (a forward over the shared prefix, one over each request's own keys), for attention across
 * devices, and inside clflash's own split-KV path. The rows are [batch][heads][seq], each
 * head_dim wide. */
typedef struct {
    uint32_t struct_size;     /* sizeof(clflash_merge_desc), see the top of this header */
    uint32_t parts;           /* partial results per row: 1 .. CLFLASH_MAX_SPLITS */
    uint32_t batch, heads, seq, head_dim; /* each >= 1; batch <= CLFLASH_MAX_BATCH, heads <=
                                             CLFLASH_MAX_HEADS, seq <= CLFLASH_MAX_SEQ_K, head_dim
                                             <= CLFLASH_MAX_HEAD_DIM */
    clflash_dtype part_dtype; /* the parts' O: F32, F16 or BF16 */
    clflash_dtype dtype;      /* the merged O: F32, F16 or BF16; 0 = part_dtype */
    clflash_layout part_o;    /* part 0's O, a [batch][heads][seq][head_dim] tensor (clflash_layout
                                 rules: zero strides are contiguous) */
    uint64_t part_o_stride;   /* elements from part p's element to part p + 1's in the same buffer;
                                 0 = the extent of part 0's layout (the parts back to back) */
    uint64_t part_lse_stride; /* floats from part p's lse to part p + 1's; each part's lse is
                                 float[batch][heads][seq]; 0 = batch * heads * seq */
    clflash_layout o;         /* the merged O */
} clflash_merge_desc;

/* Merges the parts of every row: lse = log(sum_p exp(lse_p)) and O = sum_p exp(lse_p - lse) O_p,
 * in fp32, parts taken in order (deterministic), exactly as the split-KV forward combines its own
 * parts. A part whose lse_p is -INFINITY (it saw no key) adds nothing and its O is not read; a row
 * whose parts are all -INFINITY gets O = 0 and lse = -INFINITY; a NaN lse_p makes the row's O and
 * lse NaN (an lse_p of +INFINITY, which clflash never produces, gives NaN too). part_o and
 * part_lse are device buffers of the context; o receives the merged rows (its gaps are never
 * written); lse may be NULL, else float[batch][heads][seq] receives the merged log-sum-exps.
 * Queue, wait list and event as for clflash_forward; one kernel is enqueued. The output must not
 * overlap the parts (o may share part_o's buffer only at disjoint bytes; lse needs a buffer of its
 * own). Thread-safe.
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (NULL context, descriptor, part_o,
 * part_lse or o; a bad struct_size; lse the same buffer as an input or o; a queue or wait list as
 * for clflash_forward); CLFLASH_ERROR_UNSUPPORTED (fields of a newer version set);
 * CLFLASH_ERROR_INVALID_SHAPE (parts 0 or above CLFLASH_MAX_SPLITS, a dimension 0 or above its
 * limit); CLFLASH_ERROR_INVALID_DTYPE; CLFLASH_ERROR_INVALID_LAYOUT (an index overflows, o's rows
 * overlap, or o overlaps part_o in one buffer); CLFLASH_ERROR_BUFFER_TOO_SMALL;
 * CLFLASH_ERROR_BUILD_FAILED; or an OpenCL error. On an error nothing is enqueued. */
CLFLASH_API clflash_status clflash_merge_states(clflash_context *c, const clflash_merge_desc *m,
                                                cl_command_queue queue, cl_mem part_o, cl_mem part_lse,
                                                cl_mem o, cl_mem lse, cl_uint num_wait,
                                                const cl_event *wait, cl_event *done);

/* ---------------------------------------------------------------------------------------------
 * Appending to a KV cache (since 0.5). One decoding (or chunked-prefill) step against a cache is
 * two calls on one queue: clflash_append_kv writes the step's new keys and values into the cache at
 * each sequence's current length (rotating the new keys, and the step's queries in place, when
 * rotary tables are given) and, if asked, advances the lengths; clflash_forward then attends with
 * key_lengths = those lengths and CLFLASH_ALIGN_TO_KEY_LENGTH (FlashAttention's
 * flash_attn_with_kvcache does both in one call). For example, per step:
 *     append.cache_lengths = lens;  append.flags = CLFLASH_APPEND_ADVANCE_LENGTHS;
 *     clflash_append_kv(ctx, &append, NULL, q, k_new, v_new, k_cache, v_cache, 0, NULL, NULL);
 *     desc.key_lengths = lens;  desc.flags = CLFLASH_CAUSAL | CLFLASH_ALIGN_TO_KEY_LENGTH;
 *     clflash_forward(ctx, &desc, NULL, q, k_cache, v_cache, o, NULL, 0, NULL, NULL);
 * ------------------------------------------------------------------------------------------- */

/* Bits of clflash_append_desc.flags. */
#define CLFLASH_APPEND_ADVANCE_LENGTHS (1u << 0) /* cache_lengths[b] += new_tokens once the rows are written */
#define CLFLASH_ROTARY_INTERLEAVED (1u << 1)     /* rotary pairs (2i, 2i + 1) (GPT-J); else (i, i + rotary_dim/2)
                                                    (GPT-NeoX, "half-split") */

/* A call of clflash_append_kv. Set struct_size (see the top of this header); zero keeps a field
 * off or at its default. */
typedef struct {
    uint32_t struct_size;  /* sizeof(clflash_append_desc) */
    uint32_t batch;        /* 1 .. CLFLASH_MAX_BATCH sequences */
    uint32_t heads_kv;     /* 1 .. CLFLASH_MAX_HEADS */
    uint32_t new_tokens;   /* keys and values appended to each sequence, 1 .. CLFLASH_MAX_SEQ_Q */
    uint32_t head_dim;     /* 1 .. CLFLASH_MAX_HEAD_DIM */
    clflash_dtype dtype;   /* F32, F16 or BF16: the new rows, the cache and the queries alike */
    uint32_t flags;        /* CLFLASH_APPEND_ADVANCE_LENGTHS, CLFLASH_ROTARY_INTERLEAVED */
    clflash_layout k_new, v_new; /* the new rows, [batch][heads_kv][new_tokens][head_dim] tensors */
    /* The cache. Contiguous: k_cache and v_cache are [batch][heads_kv][capacity][head_dim]
     * tensors. Paged (block_table set): pools as clflash_attention_desc's (page_size,
     * pages_per_seq, num_pages; the page in place of the batch in the layouts), capacity then
     * pages_per_seq * page_size (0 or that value). */
    uint32_t capacity;
    clflash_layout k_cache, v_cache;
    cl_mem block_table;
    uint32_t page_size, pages_per_seq, num_pages;
    cl_mem cache_lengths;  /* required: int32[batch] of the context, each sequence's length before
                              the call; new token i of sequence b goes to position
                              cache_lengths[b] + i */
    /* Rotary position embedding (RoPE), 0 = none: the first rotary_dim columns (even, <= head_dim)
     * of each new key, and of each query when q is given, are rotated by the angle of their
     * position p (cache_lengths[b] + i): with c = rotary_cos[p][j] and s = rotary_sin[p][j], the
     * pair (x, y) of column pair j becomes (x c - y s, y c + x s). Tables are float
     * [rotary_positions][rotary_dim / 2] buffers of the context. */
    uint32_t rotary_dim, rotary_positions;
    cl_mem rotary_cos, rotary_sin;
    uint32_t heads_q;      /* the queries q (may be NULL in the call): [batch][heads_q][new_tokens]
                              [head_dim] as `q` says, rotated in place; heads_q 0 = heads_kv */
    clflash_layout q;
} clflash_append_desc;

/* Writes each new key and value row (rotated as above) to its sequence's position in the cache,
 * rotates q in place if q is not NULL, and with CLFLASH_APPEND_ADVANCE_LENGTHS then adds new_tokens
 * to every cache_lengths entry (a second kernel, so every row is placed by the lengths as they were).
 * Nothing else of the cache is written. The lengths and the block table are device data the host
 * cannot check before the kernels run, so: a row whose position is negative, at or past the
 * capacity, or on a page whose table entry is outside [0, num_pages) is not written (the call
 * drops it; the other rows are written), and a query row (or key row) whose position is outside
 * [0, rotary_positions) is left as it is (not rotated). An entry's length is advanced even when its
 * rows were dropped (overflow wraps as int32).
 * The new rows must not overlap the cache, and q must not overlap the cache or the new rows, in a
 * shared buffer; the two caches must not overlap each other. Queue, wait list and event as for
 * clflash_forward; one kernel is enqueued, two with CLFLASH_APPEND_ADVANCE_LENGTHS. Thread-safe.
 * Returns: CLFLASH_SUCCESS; CLFLASH_ERROR_INVALID_ARGUMENT (NULL context, descriptor, cache_lengths,
 * k_new, v_new, k_cache or v_cache, a bad struct_size, paging fields without a block table, a
 * rotary_dim without both tables, a queue or wait list as for clflash_forward, buffers that
 * overlap as above); CLFLASH_ERROR_UNSUPPORTED (fields of a newer version set); CLFLASH_ERROR_INVALID_SHAPE
 * (a dimension 0 or above its limit, a capacity that does not match the pages, rotary_dim odd or
 * above head_dim, rotary_positions 0 with a rotary_dim); CLFLASH_ERROR_INVALID_DTYPE;
 * CLFLASH_ERROR_INVALID_FLAGS; CLFLASH_ERROR_INVALID_LAYOUT; CLFLASH_ERROR_BUFFER_TOO_SMALL;
 * CLFLASH_ERROR_BUILD_FAILED; or an OpenCL error. On an error found before enqueueing nothing is
 * enqueued; if OpenCL refuses the second kernel (the lengths' advance), the rows are still written
 * and the lengths are left as they were. */
CLFLASH_API clflash_status clflash_append_kv(clflash_context *c, const clflash_append_desc *d,
                                             cl_command_queue queue, cl_mem q, cl_mem k_new, cl_mem v_new,
                                             cl_mem k_cache, cl_mem v_cache, cl_uint num_wait,
                                             const cl_event *wait, cl_event *done);

/* ---------------------------------------------------------------------------------------------
 * The backward pass: gradients of attention by recomputation from the saved statistics.
 * ------------------------------------------------------------------------------------------- */

/* Gradients of attention (the FlashAttention backward). Inputs: q, k, v as for clflash_forward,
 * o the forward's output and d_o the gradient of the loss with respect to O (both laid out as
 * d->o says, in the dtype), and lse, required: the forward's float[batch][heads_q][seq_q] natural-log
 * row statistics. Outputs: dq, dk, dv, in the dtype, laid out as d->q, d->k, d->v say (each
 * must be at least as large as that layout needs; gaps are never written). With GQA/MQA, dk and dv
 * sum over the query heads of each group. A variable-length batch (cu_seqlens, see "Variable-length
 * batches") has packed Q, K, V, O, dO, dQ, dK, dV and lse float[heads_q][total_q].
 *
 * How: a first kernel computes D_i = sum_c dO[i][c] * O[i][c] per query row (fp32, into a
 * temporary of as many floats as lse has, which clflash allocates and releases); then one launch
 * whose work-groups over K/V blocks write dK and dV (each looping over the query heads of its
 * group and the query blocks) and whose work-groups over Q blocks write dQ, each recomputing
 * P = exp(f(scale * q.k) - lse) block by block, with f the forward's score transform (softcap,
 * then bias and ALiBi; the identity without them). A block pair no query of it sees (causal,
 * window, key lengths) is skipped. No seq_q x seq_k matrix is stored; all sums are fp32.
 * Deterministic: no atomics, every gradient element is summed by one work-item in a fixed order,
 * so the same inputs give the same bits on every run (for the same plan). A row whose lse is
 * -INFINITY (it sees no key, or only -INFINITY biases) gets dQ = 0 and adds nothing; a key no
 * query sees (or sees only through a -INFINITY bias) gets dK = dV = 0.
 *
 * On NVIDIA tensor cores: where the forward's conditions hold (clflash_plan_attention: NVIDIA of
 * compute capability >= 8.0, F16/BF16, head_dim at most 256), the gradient kernel is
 * "nv_mma_backward" (cl/nv_mma_backward.cl): any head_dim up to 256 (since 0.5: padded inside the
 * kernel to a multiple of 16 with zero columns, of 32 above 128, where two warps share each 16
 * rows, one half of the columns each; up to 0.5.0's first release, head_dim up to 128 only) and
 * any layout (where head_dim or some offset or stride of Q, K, V or O is not a multiple of 8
 * elements, rows are copied and stored element by element, which is slower), with every feature
 * below (window, softcap, bias, ALiBi, key lengths): the same two kinds of work-group, the same
 * determinism, its five products on mma.sync with fp32 sums. It computes the transformed
 * scores by the same operations as the tensor-core forward, in log2 units, so P recomputed from
 * that forward's lse matches it; the lse of the portable forward serves as well (the two differ
 * by rounding). Like FlashAttention-2 it rounds P and
 * dS to the storage type before multiplying them with dO, Q or K, so its gradients differ from the
 * portable kernel's by about one storage-type rounding of those factors (well within the f16/bf16
 * tolerances of tests/backward_harness.c). The portable kernel is forced as for the forward
 * (clflash_context_options.portable_only, CLFLASH_PORTABLE=1). The nv_backward.* tuning
 * parameters (clflash_context_set_tuning) set its block cap (the backward rule and the sequence
 * lengths may lower it further), warps per work-group (above head_dim 128 an even count: an odd
 * setting steps down, to 2 at least) and register cap. The bias gradient runs on tensor cores
 * (cl/nv_mma_bias_grad.cl) up to head_dim 128 and in the portable kernel above.
 *
 * The features mean what they mean for clflash_forward (pass the same
 * descriptor, bias, slopes and key lengths as the forward that produced O and lse):
 *  - CLFLASH_WINDOW and key_lengths: the same visibility rule; invisible pairs add nothing.
 *  - softcap: the score is s' = softcap * tanh(s / softcap) of the scaled score s = scale * q.k,
 *    so dS = P * (dP - D) * (1 - tanh^2(s / softcap)) is the gradient with respect to s, and
 *    dQ = scale * dS K, dK = scale * dS^T Q (dV = P^T dO is unchanged).
 *  - bias and alibi_slopes: added to the scores when P is recomputed. The slopes get no gradient.
 *  - bias_grad (optional, with a bias): dBias, written in the bias's layout. The score is
 *    f = softcap(s) + bias + ALiBi, so the gradient of a bias element is dS = P * (dP - D) of its
 *    pair (no softcap factor); an element broadcast over batch entries, heads or rows
 *    (bias_broadcast) gets the sum over every pair it is added to, taken in an order that depends
 *    only on the shape (batch entries, then heads, ascending; the rows of a broadcast row in tiles),
 *    so it is deterministic too. Pairs a query does not see and -INFINITY biases add 0; every
 *    element the layout addresses is written (gaps of the layout are not). A kernel of its own
 *    computes it after D and before the gradient kernel, recomputing the tile's scores (S = Q K^T
 *    and dP = dO V^T: about half the backward's score work again): on NVIDIA tensor cores
 *    (cl/nv_mma_bias_grad.cl) wherever the tensor-core gradient kernel is eligible, with the same
 *    P; cl/bias_grad_cpu.cl where the backward takes its CPU path (devices of type CPU); elsewhere
 *    cl/bias_grad.cl. On the H200 (f16, batch 4, 16 heads, n = 4096, d = 128, a [n][n] bias
 *    broadcast over batch and heads) it adds about 4.5 ms to a 9.5 ms backward; on PoCL (2 cores,
 *    n = 2048, d = 64, f32, batch 1, 2 heads) about 30 ms to a 95 ms one. With
 *    bias_grad, if the gradient kernel's enqueue fails after the bias-gradient kernel's, dBias has
 *    been written (and nothing else); clflash_backward_naive returns CLFLASH_ERROR_UNSUPPORTED for
 *    it.
 *
 * Supported: F32, F16, BF16 storage; CLFLASH_CAUSAL, CLFLASH_WINDOW, softcap, bias (any layout and
 * broadcast, -INFINITY entries mask), ALiBi, key_lengths, in any combination; GQA/MQA; any
 * layouts; seq_q, seq_k >= 1; head_dim 1 .. CLFLASH_MAX_HEAD_DIM. I8 storage returns
 * CLFLASH_ERROR_UNSUPPORTED before anything is enqueued; an out_dtype other than dtype is
 * CLFLASH_ERROR_INVALID_DTYPE, as everywhere (only I8 input may choose one).
 * Returns: as clflash_forward, plus CLFLASH_ERROR_INVALID_ARGUMENT for a NULL lse, d_o, dq, dk or
 * dv, lse sharing a buffer with an output, or an output sharing a buffer with the descriptor's
 * bias, alibi_slopes or key_lengths, or a bias_grad without a bias or that is the same buffer as any
 * other argument or descriptor buffer; CLFLASH_ERROR_BUFFER_TOO_SMALL for a bias_grad smaller than
 * the bias layout's extent; CLFLASH_ERROR_INVALID_LAYOUT when an output overlaps an input
 * or another output in the same buffer (outputs may share a buffer at disjoint ranges) or its
 * layout makes two of its elements share an address; CLFLASH_ERROR_UNSUPPORTED as above. On any
 * error found before enqueueing, nothing is enqueued and no caller buffer is touched. If OpenCL
 * refuses the gradient kernel's enqueue (after the retries above), the D kernel already enqueued
 * still runs; it writes only clflash's temporary, so no caller buffer is written either. */
CLFLASH_API clflash_status clflash_backward(clflash_context *c, const clflash_attention_desc *d,
                                            cl_command_queue queue, cl_mem q, cl_mem k, cl_mem v,
                                            cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq, cl_mem dk,
                                            cl_mem dv, cl_uint num_wait, const cl_event *wait,
                                            cl_event *done);

/* The materialized baseline for the backward, with the same arguments, checks, features and results
 * as clflash_backward (up to rounding): for as many query heads at a time as one allocation allows it
 * writes P = exp(f(scale * Q K^T) - lse) and dP = dO V^T as two fp32 matrices
 * (seq_q * seq_k * 4 bytes each per head; with softcap a third holds the derivative
 * 1 - tanh^2(s / softcap)), turns dP into dS = P * (dP - rowsum(P * dP)) (times that derivative)
 * in place, and forms dQ = scale dS K, dK = scale dS^T Q and dV = P^T dO with tiled kernels into fp32
 * accumulators (one float per element of dq, dk and dv), which a last kernel writes out. It reads O
 * not at all: D comes from the matrices. Deterministic as well. The matrices of a call are capped
 * at half the device's global memory as well as by its largest allocation. If OpenCL refuses an
 * enqueue part-way, the kernels already enqueued still run, but they write only clflash's
 * temporaries: the last kernel, the only one that writes dq, dk and dv, is enqueued only after all
 * others were. Additional statuses: CLFLASH_ERROR_SCORE_MATRIX_TOO_LARGE when one head's fp32
 * matrix exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE; CLFLASH_ERROR_UNSUPPORTED when the device's
 * work-groups cannot hold 256 work-items. */
CLFLASH_API clflash_status clflash_backward_naive(clflash_context *c, const clflash_attention_desc *d,
                                                  cl_command_queue queue, cl_mem q, cl_mem k, cl_mem v,
                                                  cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq, cl_mem dk,
                                                  cl_mem dv, cl_uint num_wait, const cl_event *wait,
                                                  cl_event *done);

/* Bytes of one backward tile by the same kind of rule as the forward's: the backward kernels hold a
 * Q block, a K block, a V block and a dO block, and the B x B probability and dS blocks:
 * (4*B*d + 2*B*B) * s. UINT64_MAX on overflow. Example: (64, 128, 2) = 81,920 (80 KiB);
 * (32, 128, 2) = 36,864 fits a 48 KiB device. (The kernels keep P and dS in fp32 and pad rows, so
 * the built kernel's CL_KERNEL_LOCAL_MEM_SIZE, which the planner checks, can be larger.) */
CLFLASH_API uint64_t clflash_backward_tile_bytes(uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem);

/* The largest B whose backward tile fits local_mem_bytes, rounded like clflash_max_block: the
 * largest multiple of 16 that fits; if none, the largest of 8, 4, 2, 1; 0 if none fits.
 * Example: (49152, 128, 2) = 32; (196608, 128, 2) = 96. */
CLFLASH_API uint64_t clflash_backward_max_block(uint64_t local_mem_bytes, uint64_t head_dim,
                                                uint64_t bytes_per_elem);

/* Plans a backward call as clflash_plan_attention plans a forward one: the largest B whose backward
 * tile fits the local memory (or the context's smaller budget), capped by the device class's
 * preference, the work-group limits and the sequence lengths; builds the kernels (cached); checks
 * the gradient kernel's CL_KERNEL_LOCAL_MEM_SIZE and CL_KERNEL_WORK_GROUP_SIZE and steps the lanes
 * per row, then B, down until it fits. A forced d->block is used exactly or refused with
 * CLFLASH_ERROR_TILE_TOO_LARGE. The fields of *out mean, for the portable gradient kernel
 * (kernel = "flash_backward_portable"): block = keys per dK/dV work-group and queries per dQ
 * work-group (the same B, = block_q); tile_bytes = clflash_backward_tile_bytes; kernel_local_bytes
 * = the gradient kernel's; kv_passes = tiles_q (the dQ work-groups stream K and V once per Q block;
 * the dK/dV work-groups stream Q and dO once per K/V block and query head of their group);
 * threads_per_row = work-items per block row.
 * On NVIDIA tensor cores (kernel = "nv_mma_backward"; chosen under the forward's tensor-core rules,
 * see clflash_backward) each work-group keeps block_q keys (dK/dV groups) or queries (dQ groups)
 * in registers, 16 per warp (above head_dim 128, 16 per two warps), and B (block) is the tile it
 * streams through local memory: query rows for a dK/dV group, keys for a dQ group. B obeys the
 * same backward rule; kernel_local_bytes is the real use, max(4B, 2 block_q) * (d + 8) * s + 16B
 * bytes (two double-buffered tile pairs; d is head_dim padded to 16, or to 32 above 128, where
 * 2 KiB per warp and 16 rows of B of partial products come on top). kv_passes =
 * ceil(seq_q / block_q); threads_per_row = 2 (4 above head_dim 128); work_group_size =
 * threads_per_row * block_q.
 * Returns: as clflash_plan_attention, plus CLFLASH_ERROR_UNSUPPORTED for I8 storage, which the
 * backward does not support (see clflash_backward). */
CLFLASH_API clflash_status clflash_plan_backward(clflash_context *c, const clflash_attention_desc *d,
                                                 clflash_plan *out);

/* ---------------------------------------------------------------------------------------------
 * Models of what a call costs, for benchmarks and capacity planning (thread-safe; no device work).
 * ------------------------------------------------------------------------------------------- */
typedef enum { CLFLASH_ALGO_FLASH = 1, CLFLASH_ALGO_NAIVE = 2 } clflash_algo;

/* Global-memory bytes the algorithm must read and write for descriptor d (its dtype's size s):
 *  - FLASH with tile size `block`: Q read and O written once, K and V read once per Q block (the
 *    plan's kv_passes; with CLFLASH_CAUSAL or CLFLASH_WINDOW only the key tiles each Q block sees;
 *    key_lengths are not known on the host and count as seq_k), a bias read once per score, lse
 *    not counted;
 *  - NAIVE (`block` ignored): Q, K, V read once, O written twice and read once (its temporary,
 *    then the caller's layout; since 0.5), plus the score matrix as
 *    clflash_forward_naive moves it: S written, read twice by the softmax (max and sum, then
 *    normalise), P written over it, and read once by P V: 5 * batch * heads_q * seq_q * seq_k * s',
 *    with s' the size of O's storage type (naive keeps S in it), and a bias read once per score.
 * A variable-length batch's lengths live on the device: FLASH counts every sequence as seq_q
 * queries and seq_k keys (the longest; an upper bound), NAIVE returns 0 (it refuses varlen).
 * Returns 0 for an invalid descriptor, algorithm or block, UINT64_MAX on overflow. */
CLFLASH_API uint64_t clflash_traffic_bytes(const clflash_attention_desc *d, clflash_algo algo, uint32_t block);

/* Device bytes clflash_forward_naive allocates on this context's device: its score matrix, one
 * head's seq_q * seq_k * s' (O's storage size) times the number of heads it processes at once,
 * plus (since 0.5) its temporary O (batch * heads_q * seq_q * head_dim * s') and lse
 * (batch * heads_q * seq_q floats, counted whether or not lse is asked for). 0 for an invalid
 * context or descriptor, or when one head's matrix exceeds the device's maximum allocation. */
CLFLASH_API uint64_t clflash_naive_workspace_bytes(const clflash_context *c, const clflash_attention_desc *d);

/* Host convenience: copies q, k, v (host arrays laid out as the descriptor says, each at least as
 * long as its layout's extent) to the device, runs clflash_forward on the context's queue, copies
 * O's elements (and lse, if not NULL: float[batch][heads_q][seq_q]) back, and waits. Only O's own
 * elements are written in `o`; its gaps are left as they were. Device memory is allocated for the
 * call and released before it returns.
 * Returns: as clflash_forward (CLFLASH_ERROR_INVALID_ARGUMENT for NULL q, k, v or o), plus OpenCL
 * allocation and transfer errors. On an error `o` and `lse` are not written. With a variable-length
 * batch (cu_seqlens, device buffers as always) `o` and `lse` (float[heads_q][total_q]) are copied
 * to the device first, so their rows that no sequence covers keep the caller's values. */
CLFLASH_API clflash_status clflash_forward_host(clflash_context *c, const clflash_attention_desc *d,
                                                const void *q, const void *k, const void *v, void *o,
                                                float *lse);

#ifdef __cplusplus
}
#endif

#endif /* CLFLASH_H */
