/*
 * internal.h - what the library's C files share and callers never see: the context structure,
 * the resolved form of a descriptor, and the functions one part of lib/ offers another.
 *
 * Data flows one way: clflash.h -> validate (desc -> clflash_problem) -> planner (device facts +
 * tile rule) -> program cache -> enqueue. Each step lives in its own file.
 */
#ifndef CLFLASH_INTERNAL_H
#define CLFLASH_INTERNAL_H

#include "clflash.h"

#include <pthread.h>
#include <stdarg.h>

#define CLFLASH_INTERNAL __attribute__((visibility("hidden")))

/* ---- status.c: the per-thread detail message ------------------------------------------------ */
/* Sets the calling thread's detail message (printf format) and returns `status` unchanged, so a
 * failure reads `return fail(CLFLASH_ERROR_INVALID_SHAPE, "seq_q is 0");`. */
CLFLASH_INTERNAL clflash_status clflash_fail(clflash_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the calling thread's detail message; every public entry point calls it first. */
CLFLASH_INTERNAL void clflash_clear_detail(void);

/* ---- struct_size.c: the caller-allocated structs, by their struct_size --------------------------- */
/* The smallest struct_size each struct may have (0.5.0's layout). */
CLFLASH_INTERNAL extern const size_t clflash_options_min_size, clflash_desc_min_size, clflash_plan_min_size,
    clflash_merge_desc_min_size, clflash_append_desc_min_size;
/* Copies the caller's struct `src` (struct_size first) into `dst`, the library's own struct of
 * own_size bytes: the fields past the caller's struct_size become zero. Fails with `bad` (and a
 * detail naming `what`) when struct_size is 0, below min_size or implausibly large, and with
 * CLFLASH_ERROR_UNSUPPORTED when a byte past own_size is not zero. */
CLFLASH_INTERNAL clflash_status clflash_read_struct(const void *src, size_t own_size, size_t min_size, void *dst,
                                                    clflash_status bad, const char *what);
/* CLFLASH_ERROR_INVALID_ARGUMENT unless out is not NULL and its struct_size is valid. */
CLFLASH_INTERNAL clflash_status clflash_check_plan_out(const clflash_plan *out);
/* Writes plan into the first out->struct_size bytes of *out (zeros past the library's fields),
 * leaving out->struct_size as it was. Call clflash_check_plan_out first. */
CLFLASH_INTERNAL void clflash_write_plan(clflash_plan *out, const clflash_plan *plan);

/* ---- tile_math.c: saturating byte arithmetic ------------------------------------------------- */
/* a * b and a + b, or UINT64_MAX when the result does not fit. */
CLFLASH_INTERNAL uint64_t clflash_mul_sat(uint64_t a, uint64_t b);
CLFLASH_INTERNAL uint64_t clflash_add_sat(uint64_t a, uint64_t b);

/* ---- plan_common.c: what the planners share ------------------------------------------------- */
/* The next smaller block the planners try: multiples of 16, then 8, 4, 2, 1; 0 after 1. */
CLFLASH_INTERNAL uint32_t clflash_block_step_down(uint32_t b);
/* The largest valid block <= b (a multiple of 16 up to 4096, or 8, 4, 2, 1, 0). */
CLFLASH_INTERNAL uint32_t clflash_block_round(uint64_t b);
/* Lanes per row: the largest power of two <= want that divides block, with block * lanes <= max_wg. */
CLFLASH_INTERNAL uint32_t clflash_block_lanes(uint32_t block, uint32_t want, uint32_t max_wg);
/* Row stride of a row-major local tile, in elements: an odd number of 32-bit words, so that
 * consecutive rows fall in different banks. */
CLFLASH_INTERNAL uint32_t clflash_lds_stride(uint32_t head_dim, size_t elem_size);
struct clflash_context;
/* Reads a built kernel's CL_KERNEL_LOCAL_MEM_SIZE (raised to `counted`, clflash's own count of its
 * local arrays, when the driver reports less: PoCL 5.0 reports 0) and CL_KERNEL_WORK_GROUP_SIZE. */
CLFLASH_INTERNAL clflash_status clflash_read_kernel_limits(struct clflash_context *c, cl_kernel kernel,
                                                           cl_ulong counted, cl_ulong *local_bytes, size_t *max_wg);

/* ---- device facts, read once when a context is created (device_info.c) ----------------------- */
typedef enum { CLFLASH_CLASS_CPU, CLFLASH_CLASS_NVIDIA_GPU, CLFLASH_CLASS_AMD_GPU,
               CLFLASH_CLASS_INTEL_GPU, CLFLASH_CLASS_OTHER_GPU, CLFLASH_CLASS_OTHER } clflash_device_class;

typedef struct {
    char name[256], vendor[256], version[256], driver[256];
    cl_device_type type;
    clflash_device_class device_class;
    cl_ulong local_mem_size, max_alloc_size, global_mem_size;
    size_t max_work_group_size;
    cl_uint compute_units;
    int nv_cc_major, nv_cc_minor; /* 0 when not an NVIDIA device */
} clflash_device_info;

/* Returns CL_SUCCESS, an OpenCL error, or CLFLASH_ERROR_OUT_OF_HOST_MEMORY. */
CLFLASH_INTERNAL cl_int clflash_read_device_info(cl_device_id dev, clflash_device_info *out);
/* 1 if `needle` occurs in `hay`, ignoring ASCII case. */
CLFLASH_INTERNAL int clflash_contains_nocase(const char *hay, const char *needle);

/* ---- tuning_params.c: named kernel parameters set by the user ---------------------------------- */
typedef enum {
    CLFLASH_TUNE_PORTABLE_REGTILE,          /* register tiles RMxTCxBQ[xB], or 0: the lane path */
    CLFLASH_TUNE_PORTABLE_CPU_PATH,         /* the portable kernels' CPU path (0 or 1) */
    CLFLASH_TUNE_PORTABLE_LARGE_GRF,        /* the register-tiled forward built with Intel's 256 GRF mode */
    CLFLASH_TUNE_PORTABLE_MAX_BLOCK,        /* tuning.c's preferences for the portable forward: a cap on B, */
    CLFLASH_TUNE_PORTABLE_THREADS_PER_ROW,  /* the work-items per row it may share, */
    CLFLASH_TUNE_PORTABLE_MAX_WORK_GROUP,   /* and its largest work-group; */
    CLFLASH_TUNE_BACKWARD_MAX_BLOCK,        /* the same for the portable backward */
    CLFLASH_TUNE_BACKWARD_THREADS_PER_ROW,
    CLFLASH_TUNE_BACKWARD_MAX_WORK_GROUP,
    CLFLASH_TUNE_BACKWARD_AMD_WAVES,        /* its gradient kernel's AMD_WAVES (clang's amdgpu_waves_per_eu) */
    CLFLASH_TUNE_NV_FORWARD_BLOCK,          /* a cap on B */
    CLFLASH_TUNE_NV_FORWARD_WARPS,
    CLFLASH_TUNE_NV_FORWARD_MTILES,
    CLFLASH_TUNE_NV_FORWARD_STAGES,
    CLFLASH_TUNE_NV_FORWARD_FUSED_MERGE,
    CLFLASH_TUNE_NV_FORWARD_RESCALE_THRESH, /* the kernel's NV_RESCALE_THRESH */
    CLFLASH_TUNE_NV_FORWARD_Q_DIRECT,       /* the kernel's NV_Q_DIRECT */
    CLFLASH_TUNE_NV_FORWARD_MERGE_GROUP,    /* the fused merge's MERGE_GROUP, _UNROLL_PARTS, */
    CLFLASH_TUNE_NV_FORWARD_MERGE_PARTS,    /* _LSE_BATCH and _PREFETCH */
    CLFLASH_TUNE_NV_FORWARD_MERGE_LSE_BATCH,
    CLFLASH_TUNE_NV_FORWARD_MERGE_PREFETCH,
    CLFLASH_TUNE_NV_FORWARD_BIAS_STAGED,    /* the kernel's BIAS_STAGED, where the bias allows it */
    CLFLASH_TUNE_NV_FORWARD_Q_CHUNK,        /* the kernel's NV_Q_CHUNK: query blocks side by side (causal) */
    CLFLASH_TUNE_NV_BACKWARD_BLOCK,
    CLFLASH_TUNE_NV_BACKWARD_WARPS,
    CLFLASH_TUNE_NV_BACKWARD_MAXRREGCOUNT,  /* -cl-nv-maxrregcount */
    CLFLASH_TUNE_NV_BACKWARD_STREAM,        /* the kernel's NV_BWD_STREAM */
    CLFLASH_TUNE_NV_BACKWARD_CHUNK,         /* its NV_BWD_CHUNK: groups side by side over every head */
    CLFLASH_TUNE_NV_WGMMA_PIPELINE,         /* the Hopper forward's WG_PIPE */
    CLFLASH_TUNE_NV_WGMMA_BLOCK,            /* a cap on its B */
    CLFLASH_TUNE_NV_WGMMA_WARPGROUPS,       /* its WARPGROUPS (0: the planner's rule) */
    CLFLASH_TUNE_NV_WGMMA_STAGES,           /* its STAGES (the loop that waits) */
    CLFLASH_TUNE_NV_WGMMA_PRODUCER,         /* its WG_PRODUCER: a warpgroup that streams the tiles */
    CLFLASH_TUNE_NV_WGMMA_TMA,              /* its WG_TMA: the producer's tiles through TMA */
    CLFLASH_TUNE_NV_WGMMA_PERSISTENT,       /* its WG_PERSIST: one work-group per SM taking block after block */
    CLFLASH_TUNE_NV_WGMMA_WORK_GROUPS,      /* the persistent kernel's work-groups (0: the compute units) */
    CLFLASH_TUNE_NV_WGMMA_Q_CHUNK,          /* its WG_Q_CHUNK: query blocks side by side (0: the planner's) */
    CLFLASH_TUNE_COUNT
} clflash_tune_key;

/* The most rules a context keeps (file, option, environment and set_tuning calls together). */
#define CLFLASH_MAX_TUNE_RULES 256u

_Static_assert(CLFLASH_TUNE_COUNT <= 64, "clflash_tune_values.set has one bit per key");
/* Key k's bit in clflash_tune_values.set. */
#define CLFLASH_TUNE_BIT(k) ((uint64_t)1 << (k))

typedef struct {
    uint64_t set;                   /* CLFLASH_TUNE_BIT(k): key k has a value */
    int32_t value[CLFLASH_TUNE_COUNT];
    uint32_t regtile[4];            /* portable.regtile: RM, TC, BQ, B cap (0: none); all 0 = lanes */
} clflash_tune_values;

typedef struct clflash_tune_rule clflash_tune_rule;

/* ---- the context (context.c) ----------------------------------------------------------------- */
typedef struct clflash_program_entry clflash_program_entry;
typedef struct clflash_log_entry clflash_log_entry;
typedef struct clflash_scratch clflash_scratch;
typedef struct clflash_plan_entry clflash_plan_entry;

/* How many components may keep state in one context (component.h, clflash_component_attach). */
#define CLFLASH_COMPONENT_SLOTS 4

struct clflash_context {
    uint32_t magic;           /* CLFLASH_CONTEXT_MAGIC while alive; cleared on free */
    cl_context ctx;           /* retained */
    cl_device_id dev;
    cl_command_queue queue;   /* created and owned by the context, in-order */
    clflash_device_info info;
    uint64_t local_mem_budget; /* min(device, option) */
    uint32_t local_report_factor; /* how many times the real static size CL_KERNEL_LOCAL_MEM_SIZE
                                     reports (plan_common.c); 0 until measured, under lock */
    char *build_options;       /* the caller's extra options, "" if none */
    uint32_t threads_per_row;  /* 0 = tuned; else the caller's choice */
    int portable_only;         /* never a vendor kernel (option portable_only or CLFLASH_PORTABLE=1) */
    int wgmma_mode;            /* CLFLASH_WGMMA when created (clflash_wgmma_mode): where nv_wgmma_forward
                                  may be planned */

    pthread_mutex_t lock;      /* guards programs and logs */
    clflash_program_entry *programs;
    clflash_log_entry *logs;   /* newest first; old texts stay valid until free */

    pthread_mutex_t pool_lock; /* guards scratch */
    clflash_scratch *scratch;  /* the scratch pool (scratch_pool.c) */

    pthread_mutex_t plan_lock; /* guards plans */
    clflash_plan_entry *plans; /* the plan and kernel cache (plan_cache.c) */

    pthread_mutex_t tune_lock; /* guards the tuning rules */
    clflash_tune_rule *tune_rules; /* tuning_params.c: in the order given, for this device */
    uint32_t tune_count;

    int sm90a_state;           /* sm90a.c: 0 not probed yet, 1 the sm_90a path works, -1 not */
    char sm90a_why[240];       /* why, once probed */

    /* component_slots.c: state an optional component keeps as long as the context, under lock */
    struct {
        const void *key;
        void *data;
        void (*release)(void *data);
    } components[CLFLASH_COMPONENT_SLOTS];
};
#define CLFLASH_CONTEXT_MAGIC 0x434c464cu /* "CLFL" */

/* Calls every component's release (component_slots.c); clflash_context_free does, first. */
CLFLASH_INTERNAL void clflash_component_slots_free(clflash_context *c);

/* Returns CLFLASH_ERROR_INVALID_ARGUMENT (with a detail) unless c is a live context. */
CLFLASH_INTERNAL clflash_status clflash_check_context(const clflash_context *c);
/* Copies the caller's options (NULL: the defaults) into *opt by their struct_size and checks them:
 * CLFLASH_ERROR_INVALID_OPTIONS (with the detail) if one is out of range, CLFLASH_ERROR_UNSUPPORTED
 * if it sets fields this library does not know. clflash_context_create_default checks before it
 * creates anything. */
CLFLASH_INTERNAL clflash_status clflash_read_options(const clflash_context_options *caller,
                                                     clflash_context_options *opt);
/* 1 if CLFLASH_PORTABLE is set to a value other than "" and "0" (clflash_context_create reads it
 * into the context's portable_only). */
CLFLASH_INTERNAL int clflash_env_portable_only(void);
/* Where the Hopper forward nv_wgmma_forward may be planned (clflash.h, nv_wgmma_forward_plan.c):
 * nowhere, where it is measured faster than nv_mma_forward (the default), or wherever its scope
 * allows (a measurement and test setting). */
typedef enum { CLFLASH_WGMMA_OFF = 0, CLFLASH_WGMMA_AUTO = 1, CLFLASH_WGMMA_ALL = 2 } clflash_wgmma_mode;
/* The environment variable CLFLASH_WGMMA, read when a context is created: unset or empty gives
 * CLFLASH_WGMMA_AUTO, "0" CLFLASH_WGMMA_OFF, any other value CLFLASH_WGMMA_ALL. */
CLFLASH_INTERNAL clflash_wgmma_mode clflash_env_wgmma(void);

/* ---- scratch_pool.c: device scratch buffers reused across calls -------------------------------- */
/* A buffer of at least `bytes` for commands to be enqueued on `queue`: one no enqueued work still
 * uses, or whose last use was enqueued on the same in-order queue; from the pool or newly created.
 * *out is NULL on failure (an OpenCL allocation error, CL_MEM_OBJECT_ALLOCATION_FAILURE when bytes
 * exceed the device's largest allocation, or CLFLASH_ERROR_OUT_OF_HOST_MEMORY). Thread-safe. */
CLFLASH_INTERNAL clflash_status clflash_scratch_acquire(clflash_context *c, uint64_t bytes, cl_command_queue queue,
                                                        clflash_scratch **out);
/* The same for a zeroed buffer (the fused split path's tickets): all zeros when created, and its
 * users promise to leave it all zeros when their work completes; one whose last use failed (an
 * event with a negative status) is zeroed again before it is handed out. Kept apart from the other
 * buffers. */
CLFLASH_INTERNAL clflash_status clflash_scratch_acquire_zeroed(clflash_context *c, uint64_t bytes,
                                                               cl_command_queue queue, clflash_scratch **out);
CLFLASH_INTERNAL cl_mem clflash_scratch_buffer(const clflash_scratch *s);
/* Hands s back; it stays in use until `last_use` (the event of the last command enqueued on `queue`
 * that touches it, NULL if nothing was enqueued) completes. NULL s is a no-op. */
CLFLASH_INTERNAL void clflash_scratch_release(clflash_context *c, clflash_scratch *s, cl_event last_use,
                                              cl_command_queue queue);
/* Releases every pooled buffer (clflash_context_free, after the queues are finished). */
CLFLASH_INTERNAL void clflash_scratch_pool_free(clflash_context *c);

/* ---- program_cache.c ------------------------------------------------------------------------- */
/* The kernel sources embedded from cl/ (see cmake/embed_cl.cmake), in the order of program_cache.c's
 * table of them. */
typedef enum { CLFLASH_SOURCE_FLASH_FORWARD_LANES, CLFLASH_SOURCE_FLASH_FORWARD_REGTILE,
               CLFLASH_SOURCE_FLASH_FORWARD_CPU, CLFLASH_SOURCE_NAIVE_ATTENTION, CLFLASH_SOURCE_FLASH_BACKWARD,
               CLFLASH_SOURCE_NAIVE_BACKWARD, CLFLASH_SOURCE_NV_MMA_FORWARD,
               CLFLASH_SOURCE_NV_MMA_BACKWARD, CLFLASH_SOURCE_MERGE_STATES,
               CLFLASH_SOURCE_FLASH_DECODE_CPU, CLFLASH_SOURCE_BIAS_GRAD,
               CLFLASH_SOURCE_NV_MMA_BIAS_GRAD, CLFLASH_SOURCE_KV_APPEND,
               CLFLASH_SOURCE_NV_SM90A_PROBE, CLFLASH_SOURCE_GRAD_ACCUMULATE,
               CLFLASH_SOURCE_NV_WGMMA_FORWARD, CLFLASH_SOURCE_BIAS_GRAD_CPU } clflash_source_id;

/* Returns a built program for (source, options) on the context's device, building it the first
 * time; the program stays owned by the cache (do not release it). On a build failure the log is
 * kept for clflash_context_build_log and CLFLASH_ERROR_BUILD_FAILED is returned. Thread-safe. */
CLFLASH_INTERNAL clflash_status clflash_get_program(clflash_context *c, clflash_source_id source,
                                                    const char *defines, cl_program *out);

/* The same for a source with sm_90a instructions (sm90a.c): built from source, its PTX rewritten to
 * sm_90a and built again as a binary (clflash_sm90a_rebuild), and cached apart from the source's
 * own build. On a failure the reason is kept as a build log and is the call's detail. Use it only
 * where clflash_sm90a_available says yes. */
CLFLASH_INTERNAL clflash_status clflash_get_program_sm90a(clflash_context *c, clflash_source_id source,
                                                          const char *defines, cl_program *out);

/* Releases every cached program and kept build log (called by clflash_context_free). */
CLFLASH_INTERNAL void clflash_program_cache_free(clflash_context *c);

/* ---- sm90a.c: Hopper's sm_90a instructions through PTX program binaries ------------------------- */
/* Rewrites the PTX NVIDIA's compiler returned (len bytes, or up to a NUL) for sm_90a: the one
 * `.target sm_90` line becomes `.target sm_90a`, and every line whose text starts with the marker
 * "// sm90a: " (after spaces or tabs) loses the marker. On success *out is the new NUL-terminated
 * text (the caller frees it) and the number of marked lines is returned; -1 with the reason in why
 * when the text is not PTX of ISA 8.0 or later for exactly sm_90, or has no marked line. */
CLFLASH_INTERNAL int clflash_sm90a_rewrite(const char *ptx, size_t len, char **out, char *why, size_t why_len);
/* A copy of ptx (malloc'd; NULL when out of memory) with `directive` on a line of its own after each
 * .entry's parameter list, where PTX puts an entry's performance directives (.reqntid, ...). */
CLFLASH_INTERNAL char *clflash_ptx_entry_directive(const char *ptx, const char *directive);
/* Builds the sm_90a variant of from_source (built for c's one device) with `options`: its binary,
 * rewritten, through clCreateProgramWithBinary. CLFLASH_SUCCESS and *out, or an error and the
 * reason in why. */
CLFLASH_INTERNAL clflash_status clflash_sm90a_rebuild(clflash_context *c, cl_program from_source, const char *options,
                                                      cl_program *out, char *why, size_t why_len);
/* 1 if kernels built through the sm_90a path run right on c's device: only an NVIDIA device of
 * compute capability 9.0, and only when cl/nv_sm90a_probe.cl, built that way, computes its product
 * exactly. Decided once per context (the first call builds and runs the probe); *why (if not NULL)
 * gets the reason either way, valid while c lives. Thread-safe. */
CLFLASH_INTERNAL int clflash_sm90a_available(clflash_context *c, const char **why);
/* Tests only: makes every later rebuild or probe in the process fail at one step, or none. */
typedef enum {
    CLFLASH_SM90A_FAULT_NONE,
    CLFLASH_SM90A_FAULT_NO_BINARY, /* the driver gives no program binary */
    CLFLASH_SM90A_FAULT_TARGET,    /* the binary's target is sm_80 */
    CLFLASH_SM90A_FAULT_MARKERS,   /* the compiler dropped the marked lines */
    CLFLASH_SM90A_FAULT_BUILD,     /* the driver refuses the rewritten binary */
    CLFLASH_SM90A_FAULT_RESULT     /* the probe's product is wrong */
} clflash_sm90a_fault;
CLFLASH_INTERNAL void clflash_sm90a_inject_fault(clflash_sm90a_fault fault);

/* Grid dimensions other than the first stay below 65536 (CUDA-class devices limit them); the
 * public CLFLASH_MAX_BATCH, CLFLASH_MAX_HEADS and CLFLASH_MAX_SEQ_Q follow from it. */
#define CLFLASH_MAX_GRID_DIM 65535u
#if CLFLASH_MAX_BATCH != CLFLASH_MAX_GRID_DIM || CLFLASH_MAX_HEADS != CLFLASH_MAX_GRID_DIM || \
    CLFLASH_MAX_SEQ_Q != CLFLASH_MAX_GRID_DIM * 16u
#error "clflash.h's shape limits disagree with the grid limit"
#endif

/* ---- validate.c: the descriptor resolved into what kernels need ------------------------------ */
typedef struct {
    uint64_t offset, batch_stride, head_stride, seq_stride; /* elements, defaults filled in */
} clflash_strides;

typedef struct {
    uint32_t batch, heads_q, heads_kv, group, seq_q, seq_k, head_dim;
    clflash_dtype dtype;       /* Q, K, V */
    size_t elem_size;
    clflash_dtype out_dtype;   /* O (and the naive path's scores) */
    size_t out_elem_size;
    float scale;               /* resolved: 1/sqrt(d) when 0 */
    float qk_scale, v_scale;   /* int8: q_scale * k_scale and v_scale; 1 otherwise */
    uint32_t flags;
    uint32_t block;            /* as given: 0 = planner */
    uint32_t num_splits;       /* as given: 0 = planner, 1 = none, N = exactly N */
    clflash_strides q, k, v, o;
    uint32_t window_left, window_right;
    int32_t diagonal_offset;   /* moves the diagonal of causal, window and ALiBi (clflash.h) */
    float softcap;
    cl_mem bias, alibi_slopes, key_lengths;
    clflash_strides bias_strides; /* elements; broadcast dimensions have stride 0 */
    cl_mem bias_grad;             /* the backward's optional dBias (the forward ignores it) */
    cl_mem block_table;           /* a paged KV cache (clflash.h), NULL if K and V are tensors */
    uint32_t page_size, pages_per_seq, num_pages; /* 0 without a block table */
    uint32_t kv_batch, kv_seq;    /* K's and V's outer dimensions: (batch, seq_k), or paged
                                     (num_pages, page_size), or packed (1, total_k) */
    int varlen;                   /* 1: a packed variable-length batch (clflash.h) */
    cl_mem cu_seqlens_q, cu_seqlens_k; /* with varlen: int32[batch + 1] each; else NULL */
    uint32_t total_q, total_k;    /* with varlen: the packed tensors' rows; else 0 */
    uint32_t q_batch, q_seq;      /* Q's and O's (dO's, dQ's) outer dimensions: (batch, seq_q), or
                                     packed (1, total_q) */
    clflash_tune_values tune;     /* the context's tuning settings for this call (tuning_params.c) */
} clflash_problem;

/* A tile rule: clflash_tile_bytes (forward) or clflash_backward_tile_bytes. */
typedef uint64_t (*clflash_tile_rule)(uint64_t block, uint64_t head_dim, uint64_t bytes_per_elem);
/* Fills every field of *plan for a kernel built with tile B = block and block_q query rows per
 * work-group: tile_bytes by `rule`, tiles per axis by B, kv_passes = ceil(seq_q / block_q), the
 * score matrix in O's storage type, and the kernel's own facts as given. */
CLFLASH_INTERNAL void clflash_fill_plan(clflash_plan *plan, const clflash_problem *p, clflash_tile_rule rule,
                                        uint64_t budget, uint32_t block, uint32_t block_q, cl_ulong local_bytes,
                                        const char *kernel, uint32_t threads_per_row, uint32_t work_group_size);

/* Checks every field of d and resolves defaults (heads_kv, scale, strides). */
CLFLASH_INTERNAL clflash_status clflash_resolve_desc(const clflash_attention_desc *d, clflash_problem *p);
/* clflash_resolve_desc for a call on a live context c, with the context's tuning settings for it
 * (p->tune). */
CLFLASH_INTERNAL clflash_status clflash_resolve_for_context(clflash_context *c, const clflash_attention_desc *d,
                                                           clflash_problem *p);

/* A layout with its zero strides replaced by the contiguous defaults of a [.][heads][seq][head_dim]
 * tensor; 0 if a default overflows. */
CLFLASH_INTERNAL int clflash_resolve_strides(const clflash_layout *in, uint32_t heads, uint32_t seq, uint32_t head_dim,
                                             clflash_strides *out);
/* 1 if no two elements of a [batch][heads][seq][head_dim] output with these strides share an address
 * (as far as can be proved by sorting the strides). */
CLFLASH_INTERNAL int clflash_output_disjoint(const clflash_strides *s, uint32_t batch, uint32_t heads, uint32_t seq,
                                             uint32_t head_dim);
/* The checks of a command queue and wait list every enqueueing entry point makes: num_wait and wait
 * agree, and a caller's queue belongs to the context's cl_context and device. *queue_out is the queue
 * to use (the context's own for NULL). */
CLFLASH_INTERNAL clflash_status clflash_check_queue(const clflash_context *c, cl_command_queue queue, cl_uint num_wait,
                                                    const cl_event *wait, cl_command_queue *queue_out);

/* 1 if a layout's offset and strides are all multiples of 8 elements (16 bytes at 2 bytes each). */
CLFLASH_INTERNAL int clflash_aligned8(const clflash_strides *s);

/* Bytes a tensor's buffer must hold: (last element index + 1) * elem_size; UINT64_MAX on overflow. */
CLFLASH_INTERNAL uint64_t clflash_tensor_extent_bytes(const clflash_strides *s, uint32_t batch,
                                                      uint32_t heads, uint32_t seq, uint32_t head_dim,
                                                      size_t elem_size);

/* Bytes K's (or V's) buffer must hold for p: its layout over kv_batch x heads_kv x kv_seq rows. */
CLFLASH_INTERNAL uint64_t clflash_kv_extent_bytes(const clflash_problem *p, const clflash_strides *s);
/* A paged cache's page_size, pages_per_seq and num_pages in range (CLFLASH_ERROR_INVALID_SHAPE
 * with a detail otherwise); the forward's descriptor and clflash_append_kv's share the rule. */
CLFLASH_INTERNAL clflash_status clflash_check_pages(uint32_t page_size, uint32_t pages_per_seq, uint32_t num_pages);
/* CLFLASH_ERROR_UNSUPPORTED (with a detail naming `call`) if p has a block table. */
CLFLASH_INTERNAL clflash_status clflash_refuse_paged(const clflash_problem *p, const char *call);
/* CLFLASH_ERROR_UNSUPPORTED (with a detail naming `call`) if p is a variable-length batch. */
CLFLASH_INTERNAL clflash_status clflash_refuse_varlen(const clflash_problem *p, const char *call);
/* Bytes of Q's (or O's, with O's element size) buffer for p: its layout over q_batch x heads_q x
 * q_seq rows. */
CLFLASH_INTERNAL uint64_t clflash_q_extent_bytes(const clflash_problem *p, const clflash_strides *s, size_t elem_size);
/* Floats of lse (and of the backward's D) for p: batch * heads_q * seq_q, or heads_q * total_q. */
CLFLASH_INTERNAL uint64_t clflash_lse_floats(const clflash_problem *p);

/* Checks that `buf` is a buffer of at least `need` bytes; `what` names it in the detail. */
CLFLASH_INTERNAL clflash_status clflash_check_buffer(cl_mem buf, uint64_t need, const char *what);

/* The checks every enqueueing entry point shares: context, descriptor, queue, wait list, and the
 * sizes of q, k, v, o and (if not NULL) lse. Fills *p and *queue_out (the queue to use). */
CLFLASH_INTERNAL clflash_status clflash_validate_call(clflash_context *c, const clflash_attention_desc *d,
                                                      cl_command_queue queue, cl_mem q, cl_mem k,
                                                      cl_mem v, cl_mem o, cl_mem lse, cl_uint num_wait,
                                                      const cl_event *wait, clflash_problem *p,
                                                      cl_command_queue *queue_out);

/* ---- merge.c: merging partial results (clflash_merge_states and the split-KV combine) ---------- */
typedef struct {
    uint32_t parts, batch, heads, seq, head_dim;
    clflash_dtype part_dtype, dtype;
    clflash_strides part_o, o;            /* elements, defaults filled in */
    uint64_t part_o_stride, part_lse_stride;
    /* The split-KV forward of a variable-length batch: the parts are [batch][heads][seq] rows
     * (seq the longest sequence), and row (b, h, i) goes to packed row cu_seqlens_q[b] + i of o
     * and to lse[h][total_q] there, for i below the sequence's length (clamped as in the flash
     * kernels); other rows are not written. NULL and 0 otherwise (clflash_merge_states). */
    cl_mem cu_seqlens_q;
    uint32_t total_q;
} clflash_merge_problem;

/* Builds (cached) and enqueues the merge kernel for m on `queue`, waiting on the wait list; *done
 * (if not NULL) receives its event. Nothing is checked here but the OpenCL calls' results. */
CLFLASH_INTERNAL clflash_status clflash_enqueue_merge(clflash_context *c, const clflash_merge_problem *m,
                                                      cl_command_queue queue, cl_mem part_o, cl_mem part_lse,
                                                      cl_mem o, cl_mem lse, cl_uint num_wait, const cl_event *wait,
                                                      cl_event *done);

/* ---- traffic.c ------------------------------------------------------------------------------ */
/* How many heads clflash_forward_naive processes per score-matrix allocation (0 if one head's
 * matrix exceeds max_alloc). */
CLFLASH_INTERNAL uint64_t clflash_naive_heads_per_chunk(const clflash_problem *p, uint64_t max_alloc);

/* tuning_params.c: reads the tuning file (CLFLASH_TUNING_FILE), the option's spec (NULL: none)
 * and CLFLASH_TUNE into the context's rules; CLFLASH_ERROR_INVALID_OPTIONS (with the detail:
 * where, and what is wrong) if any of them is not valid. */
CLFLASH_INTERNAL clflash_status clflash_tune_load(clflash_context *c, const char *option_spec);
CLFLASH_INTERNAL void clflash_tune_free(clflash_context *c);
/* Fills p->tune from the context's rules that match p's dtype and head_dim. */
CLFLASH_INTERNAL void clflash_tune_resolve(clflash_context *c, clflash_problem *p);
/* What a planner has chosen before it asks for a parameter whose default depends on it. */
typedef struct {
    uint32_t warps; /* the tensor-core forward's warps per work-group (nv_forward.stages) */
} clflash_tune_facts;
/* A parameter's default where it depends on the device or the problem: tuning_params.c's table
 * names one for each such parameter; each lives beside the measurements behind it. */
typedef int32_t (*clflash_tune_default)(const clflash_context *c, const clflash_problem *p,
                                        const clflash_tune_facts *f);
/* The value of parameter k for p on c: the tuning settings' where one applies, else the table's
 * default (its constant, or its rule for c, p and the facts f; f may be NULL except for
 * nv_forward.stages). Not for portable.regtile, which is a shape: clflash_tune_regtile. */
CLFLASH_INTERNAL int32_t clflash_tune_value(const clflash_context *c, const clflash_problem *p, clflash_tune_key k,
                                            const clflash_tune_facts *f);
/* portable.regtile for p on c: the setting's RM, TC, BQ and B cap (RM 0: the lane path), else the
 * table's default (clflash_default_regtile). */
CLFLASH_INTERNAL void clflash_tune_regtile(const clflash_context *c, const clflash_problem *p, uint32_t out[4]);
/* The defaults tuning_params.c's table names (those that depend on the device or the problem):
 * plan_common.c: portable.cpu_path, 1 on CPUs. */
CLFLASH_INTERNAL int32_t clflash_default_cpu_path(const clflash_context *c, const clflash_problem *p,
                                                  const clflash_tune_facts *f);
/* forward_plan.c: portable.regtile's register tiles. */
CLFLASH_INTERNAL void clflash_default_regtile(const clflash_context *c, const clflash_problem *p, uint32_t out[4]);
/* tuning.c: the device class's preferences, portable.max_block, .threads_per_row and
 * .max_work_group (and the same portable_backward.* ones). */
CLFLASH_INTERNAL int32_t clflash_default_max_block(const clflash_context *c, const clflash_problem *p,
                                                   const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_default_threads_per_row(const clflash_context *c, const clflash_problem *p,
                                                         const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_default_max_work_group(const clflash_context *c, const clflash_problem *p,
                                                        const clflash_tune_facts *f);
/* nv_mma_forward_plan.c: nv_forward.warps, .mtiles, .stages, .rescale_thresh and .q_direct. */
CLFLASH_INTERNAL int32_t clflash_nv_default_warps(const clflash_context *c, const clflash_problem *p,
                                                  const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_nv_default_mtiles(const clflash_context *c, const clflash_problem *p,
                                                   const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_nv_default_stages(const clflash_context *c, const clflash_problem *p,
                                                   const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_nv_default_rescale_thresh(const clflash_context *c, const clflash_problem *p,
                                                           const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_nv_default_q_direct(const clflash_context *c, const clflash_problem *p,
                                                     const clflash_tune_facts *f);
/* nv_wgmma_forward_plan.c: nv_wgmma.producer. */
CLFLASH_INTERNAL int32_t clflash_nv_wgmma_default_producer(const clflash_context *c, const clflash_problem *p,
                                                           const clflash_tune_facts *f);
/* nv_mma_backward_plan.c: nv_backward.stream and .chunk. */
CLFLASH_INTERNAL int32_t clflash_nv_default_bwd_stream(const clflash_context *c, const clflash_problem *p,
                                                       const clflash_tune_facts *f);
CLFLASH_INTERNAL int32_t clflash_nv_default_bwd_chunk(const clflash_context *c, const clflash_problem *p,
                                                      const clflash_tune_facts *f);
CLFLASH_INTERNAL const char *clflash_tune_name(clflash_tune_key k);
/* Appends the parameters a plan used to plan->tuning (printf-style; clflash_fill_plan empties it). */
CLFLASH_INTERNAL void clflash_tune_report(clflash_plan *plan, const char *fmt, ...);
/* The values clflash's built-in rules alone give a call of (dtype, head_dim) on a device of this
 * name and class: what a context there starts from (tests/tuning_table.c). */
CLFLASH_INTERNAL clflash_status clflash_tune_builtin_values(const char *device_name, clflash_device_class cls,
                                                            clflash_dtype dtype, uint32_t head_dim,
                                                            clflash_tune_values *v);
/* The rules of spec (the syntax of clflash_context_set_tuning) that match a device of this name
 * and class and (dtype, head_dim), applied on top of *v (tests/tuning_table.c's --tune). */
CLFLASH_INTERNAL clflash_status clflash_tune_apply_spec(const char *spec, const char *device_name,
                                                        clflash_device_class cls, clflash_dtype dtype,
                                                        uint32_t head_dim, clflash_tune_values *v);
/* forward_plan.c: the register tiles (RT_RM, RT_TC, BLOCK_Q) and B the planner tries first for the
 * portable forward's register-tiled path on c, before building anything (tests/tuning_table.c
 * asks it for GPUs clflash cannot run); 0 if p takes another path there. */
CLFLASH_INTERNAL int clflash_regtile_first_candidate(clflash_context *c, const clflash_problem *p, uint32_t first[4]);
/* backward_plan.c: the portable backward's first (B, work-items per row, the D kernel's work-group)
 * for p on c, as plan_portable tries them before any build (the compile matrices build that); 0
 * when B is forced or none fits. */
CLFLASH_INTERNAL int clflash_backward_first_candidate(const clflash_context *c, const clflash_problem *p,
                                                      uint32_t first[3]);
/* backward_plan.c: the portable backward's defines for (block, lanes, the D kernel's work-group)
 * after the feature switches, beginning "-D BLOCK=": what the planner builds and the compile
 * matrices print. */
CLFLASH_INTERNAL void clflash_backward_shape_defines(const clflash_context *c, const clflash_problem *p, uint32_t block,
                                                     uint32_t lanes, uint32_t rowdot_wg, char *buf, size_t size);
/* forward_plan.c: the lane-per-row path's first (B, work-items per row) for p on c, as the planner
 * tries them where no register tile is used (portable.regtile=0); 0 when B is forced, none fits or
 * the CPU path takes p. And that path's defines for (block, lanes), beginning "-D BLOCK=": what the
 * planner builds and the compile matrices print. */
CLFLASH_INTERNAL int clflash_lanes_first_candidate(const clflash_context *c, const clflash_problem *p,
                                                   uint32_t first[2]);
CLFLASH_INTERNAL void clflash_lanes_shape_defines(const clflash_problem *p, uint32_t block, uint32_t lanes, char *buf,
                                                  size_t size);
/* merge.c: the merge kernel's work-items per row for rows of head_dim columns, and its defines for
 * that many, beginning "-D MERGE_LANES=" (the compile matrices print them). */
CLFLASH_INTERNAL uint32_t clflash_merge_lanes(uint32_t head_dim, uint64_t rows);
CLFLASH_INTERNAL void clflash_merge_shape_defines(uint32_t lanes, char *buf, size_t size);
/* naive.c and backward_naive.c: the softmax kernels' first work-group size (SOFTMAX_WG), halved
 * where a device's kernel allows fewer work-items. */
#define CLFLASH_NAIVE_SOFTMAX_WG 256
/* The backward kernels' measurement switches (cl/flash_backward.cl, cl/nv_mma_backward.cl), off in
 * every build: a context's build_options follow these defines, so -D CLFLASH_BWD_SKIP_DQ=1 there
 * redefines one to time the other kind of work-group alone. */
#define CLFLASH_BWD_SKIP_DEFINES "-D CLFLASH_BWD_SKIP_DQ=0 -D CLFLASH_BWD_SKIP_DKDV=0"
/* nv_mma_forward_plan.c and nv_mma_backward_plan.c: the defines of the first kernel the NVIDIA
 * planners would build for p on c (tests/tuning_table.c prints them for the NVPTX compile matrix);
 * 0 when none fits. */
CLFLASH_INTERNAL int clflash_nv_forward_first_defines(const clflash_context *c, const clflash_problem *p, int with_lse,
                                                      char *buf, size_t size);
CLFLASH_INTERNAL int clflash_nv_backward_first_defines(const clflash_context *c, const clflash_problem *p, char *buf,
                                                       size_t size);
/* tuning_builtin.c: the built-in rules, in the tuning files' syntax, general ones first. */
CLFLASH_INTERNAL uint32_t clflash_builtin_rule_count(void);
CLFLASH_INTERNAL const char *clflash_builtin_rule(uint32_t i);

/* ---- tuning.c: per-device-class preferences --------------------------------------------------- */
typedef struct {
    uint32_t max_block;        /* cap on B even if a larger tile fits */
    uint32_t threads_per_row;  /* work-items per query row in the portable kernel */
    uint32_t max_work_group;   /* cap on B * threads_per_row */
} clflash_tuning;

CLFLASH_INTERNAL clflash_tuning clflash_tuning_for(const clflash_device_info *info, uint32_t head_dim,
                                                   size_t elem_size);
/* clflash_tuning_for for the context's device, with the caller's threads_per_row option applied. */
CLFLASH_INTERNAL clflash_tuning clflash_tuning_for_context(const clflash_context *c, const clflash_problem *p);
/* The same for the portable backward (its own settings, portable_backward.*). */
CLFLASH_INTERNAL clflash_tuning clflash_tuning_for_backward(const clflash_context *c, const clflash_problem *p);
/* Appends to a portable plan's tuning report the preference settings (portable.max_block,
 * .threads_per_row, .max_work_group, or with `backward` the portable_backward.* ones) that applied
 * to p (only those set: the plan's block, threads_per_row and work_group_size fields say what they
 * led to). */
CLFLASH_INTERNAL void clflash_tune_report_portable(clflash_plan *plan, const clflash_problem *p, int backward);

/* plan_common.c: the largest block a planner starts from, before rounding: b capped by `cap`, by
 * the longer sequence rounded up to 16 (a larger block computes only padding) and, after a refused
 * launch, below below_block (0 = no such limit). */
CLFLASH_INTERNAL uint64_t clflash_block_cap(uint64_t b, uint64_t cap, const clflash_problem *p, uint32_t below_block);
/* plan_common.c: 1 if the portable kernels take their CPU path for p (CPU devices, unless the
 * portable.cpu_path setting says otherwise), given a block and lanes that path takes. */
CLFLASH_INTERNAL int clflash_wants_cpu_path(const clflash_context *c, const clflash_problem *p);
/* plan_common.c: the lanes per row a portable planner tries first at B = block: the preference's
 * threads_per_row within its work-group cap (a forced block above the cap gets one lane). */
CLFLASH_INTERNAL uint32_t clflash_preferred_lanes(const clflash_tuning *tune, uint32_t block);
/* plan_common.c: a portable planner's checks of a forced block before it builds anything: its
 * tile (tile_bytes by the pass's rule; `tile_name` in the message) fits the context's budget, B
 * work-items fit a work-group, and the device has not refused B at enqueue (below_block). */
CLFLASH_INTERNAL clflash_status clflash_check_forced_block(const clflash_context *c, uint32_t block,
                                                           uint64_t tile_bytes, const char *tile_name,
                                                           uint32_t below_block);
/* plan_common.c: a portable planner's built (*block, *lanes) did not fit (local_bytes over budget,
 * or *block * *lanes work-items over max_wg); sets the next candidate: half the lanes where the
 * memory fits and lanes > 1, else the next smaller block at its preferred lanes.
 * CLFLASH_ERROR_TILE_TOO_LARGE naming `what` for a forced block that does not fit or when no
 * block is left. */
CLFLASH_INTERNAL clflash_status clflash_next_candidate(const char *what, const clflash_tuning *tune, uint32_t *block,
                                                       uint32_t *lanes, cl_ulong local_bytes, uint64_t budget,
                                                       size_t max_wg, int forced);

/* ---- forward_plan.c ------------------------------------------------------------------------------ */
/* Bytes of a work-group's two tensor maps (K's and V's, 128 each) in nv_wgmma_forward's WG_TMA. */
#define CLFLASH_TMA_MAP_SLOT_BYTES 256u
typedef struct {
    clflash_plan plan;         /* plan.splits, plan.packed_heads and plan.workspace_bytes included */
    cl_kernel kernel;          /* created for this call; the caller releases it */
    uint32_t split_keys;       /* keys per split, a multiple of plan.block (seq_k without splits) */
    uint64_t merge_tickets;    /* > 0: the kernel merges its parts itself (the tensor-core kernel's
                                  FUSED_MERGE) with this many zeroed counters; 0: the merge kernel does */
    uint64_t tma_map_groups;   /* > 0: the kernel (nv_wgmma_forward's WG_TMA) builds two tensor maps a
                                  work-group in a scratch buffer of this many slots
                                  (CLFLASH_TMA_MAP_SLOT_BYTES each) */
    uint32_t persistent_groups; /* > 0: the kernel (nv_wgmma_forward_persistent) is launched as this
                                  many work-groups in one dimension, each taking block after block,
                                  and takes the batch size as its last argument */
    clflash_plan_entry *entry; /* the plan cache's entry the kernel goes back to, NULL if none */
} clflash_flash_kernel;

/* plan_common.c: split-KV. The number of parts for a forward whose kernel launches `groups`
 * work-groups without splitting: p->num_splits if the caller forced it, else the planner's rule
 * (clflash.h, clflash_plan_attention): 1 when groups >= T = ceil(compute units * tenths_per_unit / 10), else
 * enough parts to reach that, each of at least min_split_keys keys, at most CLFLASH_MAX_SPLITS,
 * and 1 when the parts would need more than an eighth of the device's largest allocation. */
CLFLASH_INTERNAL uint32_t clflash_split_count(const clflash_context *c, const clflash_problem *p, uint64_t groups,
                                              uint32_t tenths_per_unit, uint32_t min_split_keys);
/* plan_common.c: the split rule's targets for the portable kernels (every path of the portable
 * forward, cl/flash_forward_*.cl, and the CPU decoding kernel): work-groups per compute unit (in
 * tenths) and the shortest part, 4 and 256 keys on GPUs, 2 and 1024 on CPUs (a thread streams a
 * long part best). The minima are multiples of 256, as the plan cache's key assumes. */
CLFLASH_INTERNAL void clflash_portable_split_rule(const clflash_context *c, uint32_t *tenths_per_unit,
                                                  uint32_t *min_keys);
/* Records the split fields of out's plan for B = out->plan.block: keys per part a multiple of B
 * (ceil(seq_k / splits) rounded up), the workspace bytes. */
CLFLASH_INTERNAL void clflash_set_split(clflash_flash_kernel *out, const clflash_problem *p, uint32_t splits,
                                        uint32_t pack);
/* Bytes of the split path's parts: splits * batch * heads_q * seq_q * (head_dim + 1) floats (O and
 * lse); UINT64_MAX on overflow. */
CLFLASH_INTERNAL uint64_t clflash_split_workspace_bytes(const clflash_problem *p, uint32_t splits);

/* Plans a forward call (the tensor-core kernel where it applies, else the portable one) and gives
 * it a kernel object, from the plan cache when below_block is 0. If `below_block` is not 0, only
 * blocks smaller than it are considered (used to step down after CL_OUT_OF_RESOURCES at enqueue),
 * and nothing is cached. Give the kernel back with clflash_flash_kernel_done. */
CLFLASH_INTERNAL clflash_status clflash_plan_flash(clflash_context *c, const clflash_problem *p,
                                                   int with_lse, uint32_t below_block,
                                                   clflash_flash_kernel *out);

/* ---- cpu_decode_plan.c: the CPU decoding kernel (cl/flash_decode_cpu.cl) ----------------------- */
/* The most packed rows (seq_q x GQA group) per K/V head it takes. */
#define CLFLASH_DECODE_MAX_ROWS 16u
/* 1 if p has few enough rows per K/V head for it (the caller checks the device takes the CPU path). */
CLFLASH_INTERNAL int clflash_cpu_decode_applies(const clflash_problem *p);
/* 1 if K and V are token-major (the heads of a key side by side: head stride below seq stride) and
 * there is more than one K/V head; the kernel then takes several heads per work-item. */
CLFLASH_INTERNAL int clflash_kv_token_major(const clflash_problem *p);
/* Plans and builds it with B = block keys per chunk (the CPU path's B). */
CLFLASH_INTERNAL clflash_status clflash_plan_cpu_decode(clflash_context *c, const clflash_problem *p, int with_lse,
                                                        uint32_t block, clflash_flash_kernel *out);

/* ---- plan_cache.c: plans and kernel objects reused across calls -------------------------------- */
/* `plan` (a planner taking below_block 0) for p, or its cached result, with a kernel object the call
 * owns until clflash_flash_kernel_done. Thread-safe. */
CLFLASH_INTERNAL clflash_status clflash_cached_plan(clflash_context *c, const clflash_problem *p, int with_lse,
                                                    clflash_status (*plan)(clflash_context *, const clflash_problem *,
                                                                           int, uint32_t, clflash_flash_kernel *),
                                                    clflash_flash_kernel *out);
CLFLASH_INTERNAL void clflash_flash_kernel_done(clflash_context *c, clflash_flash_kernel *fk);
/* A kernel object for the key `words` (what make(c, arg, &kernel) builds), cached like a plan's;
 * give it back with clflash_cached_kernel_done(c, *entry, kernel). */
CLFLASH_INTERNAL clflash_status clflash_cached_kernel(clflash_context *c, const uint32_t *words, size_t n_words,
                                                      clflash_status (*make)(clflash_context *, const void *,
                                                                             cl_kernel *),
                                                      const void *arg, cl_kernel *out, clflash_plan_entry **entry);
CLFLASH_INTERNAL void clflash_cached_kernel_done(clflash_context *c, clflash_plan_entry *e, cl_kernel k);
/* Releases every entry (clflash_context_free). */
CLFLASH_INTERNAL void clflash_plan_cache_free(clflash_context *c);

/* ---- nv_mma_forward_plan.c: the NVIDIA tensor-core forward (cl/nv_mma_forward.cl) ----------------------- */
/* Why the tensor-core kernel cannot run p on c's device (a static string), or NULL if it can. */
CLFLASH_INTERNAL const char *clflash_nv_mma_refusal(const clflash_context *c, const clflash_problem *p);
/* 1 if head_dim and every offset and stride of Q, K, V and O are multiples of 8 elements (rows the
 * tensor-core kernels can copy in 16-byte pieces). */
CLFLASH_INTERNAL int clflash_nv_rows_aligned(const clflash_problem *p);
CLFLASH_INTERNAL uint32_t clflash_nv_padded_dim(const clflash_problem *p);
/* 1 if p has a bias whose offset and strides are all even, so that the tensor-core forward reads
 * two adjacent keys' biases with one 8-byte load (part of the plan cache's key). */
CLFLASH_INTERNAL int clflash_bias_pairs(const clflash_problem *p);
/* 1 where nv_mma_forward's plan for p splits the keys into parts or packs a GQA group's query heads
 * into one work-group: calls with too few query rows to fill c's device without split-KV (decoding,
 * short prompts on few heads). Call only when clflash_nv_mma_refusal is NULL. */
CLFLASH_INTERNAL int clflash_nv_mma_splits_or_packs(const clflash_context *c, const clflash_problem *p);
/* Plans and builds the tensor-core kernel for p (call only when clflash_nv_mma_refusal is NULL).
 * Same contract as clflash_plan_flash; CLFLASH_ERROR_TILE_TOO_LARGE if no block fits. */
CLFLASH_INTERNAL clflash_status clflash_plan_nv_mma(clflash_context *c, const clflash_problem *p, int with_lse,
                                                    uint32_t below_block, clflash_flash_kernel *out);

/* ---- nv_wgmma_forward_plan.c: the Hopper forward (cl/nv_wgmma_forward.cl) ----------------------- */
/* Why nv_wgmma_forward cannot or may not run p on c (a static string: turned off by CLFLASH_WGMMA,
 * not taken by the tensor-core forward, not compute capability 9.0, outside its scope, or left to
 * nv_mma_forward by the default mode), or NULL. Does not run the sm_90a probe: the caller asks
 * clflash_sm90a_available after. */
CLFLASH_INTERNAL const char *clflash_nv_wgmma_refusal(const clflash_context *c, const clflash_problem *p);
/* 1 if p has a sliding window at least as wide as the default mode takes to nv_wgmma_forward, else
 * 0: the one fact about a window's width a plan depends on (plan_cache.c keys on it). */
CLFLASH_INTERNAL int clflash_nv_wgmma_wide_window(const clflash_problem *p);
/* 1 if K's and V's row strides are ones a TMA tensor map can describe (at least head_dim, and
 * below 2^40 bytes), else 0: whether the kernel's tiles may come through TMA (plan_cache.c keys
 * on it). */
CLFLASH_INTERNAL int clflash_nv_wgmma_tma_strides(const clflash_problem *p);
/* Plans and builds it through the sm_90a path (call only when the refusal is NULL and
 * clflash_sm90a_available says yes). Same contract as clflash_plan_nv_mma; any error means: plan
 * nv_mma_forward instead. */
CLFLASH_INTERNAL clflash_status clflash_plan_nv_wgmma(clflash_context *c, const clflash_problem *p, int with_lse,
                                                      uint32_t below_block, clflash_flash_kernel *out);
/* The defines of the first kernel it would build for p within c's budget, whatever the device
 * (tests/tuning_table --kernel nv_wgmma_forward); 0 if p is outside its scope or nothing fits. */
CLFLASH_INTERNAL int clflash_nv_wgmma_first_defines(const clflash_context *c, const clflash_problem *p, int with_lse,
                                                    char *buf, size_t size);

/* ---- kernel-argument helpers shared by the dispatchers (dispatch_util.c) ---------------------- */
/* Sets consecutive kernel arguments from a list; stops at the first error. */
typedef struct { size_t size; const void *value; } clflash_arg;
CLFLASH_INTERNAL cl_int clflash_set_args(cl_kernel k, cl_uint first, const clflash_arg *args, size_t n);
/* " -D CLFLASH_DTYPE_x" for a dtype (the input storage type in cl/common.cl). */
CLFLASH_INTERNAL const char *clflash_dtype_define(clflash_dtype t);
/* "-D CLFLASH_OUT_x" for O's storage type (F16, BF16, else F32). */
CLFLASH_INTERNAL const char *clflash_out_define(clflash_dtype t);
/* 1 where the kernels put each entry's diagonal at its key length (their KEYLEN_DIAGONAL): the
 * flag CLFLASH_ALIGN_TO_KEY_LENGTH with key_lengths and causal, window or ALiBi. */
CLFLASH_INTERNAL int clflash_keylen_diagonal(const clflash_problem *p);
/* Writes the -D options that select p's storage types and features (dtype, output type, CAUSAL,
 * WINDOW, SOFTCAP, BIAS, ALIBI, KEYLEN, KEYLEN_DIAGONAL, VARLEN, WITH_LSE) into buf. */
CLFLASH_INTERNAL void clflash_feature_defines(const clflash_problem *p, int with_lse, char *buf, size_t size);
/* The forward kernels' defines: clflash_feature_defines, with O and lse the fp32 parts of the split
 * path when splits > 1 (then always WITH_LSE), plus SPLIT (0 or 1), PACK (query heads per
 * packed row set, 1 = none) and PAGED (0 or 1, with PAGE_SIZE for a paged KV cache). */
CLFLASH_INTERNAL void clflash_forward_defines(const clflash_problem *p, int with_lse, uint32_t splits, uint32_t pack,
                                              char *buf, size_t size);
/* The kernel arguments of a variable-length batch, which the flash kernels (after the paging ones)
 * and the backward's gradient kernel (last) take: cu_seqlens_q, cu_seqlens_k, total_q, total_k
 * (NULL and 0 without varlen). Sets CLFLASH_VARLEN_ARGS arguments from index `first`. */
#define CLFLASH_VARLEN_ARGS 4
CLFLASH_INTERNAL cl_int clflash_set_varlen_args(cl_kernel k, cl_uint first, const clflash_problem *p);
/* How many arguments clflash_set_feature_args sets with include_out_scale (the flash kernel's). */
#define CLFLASH_FEATURE_ARGS 12
/* The kernel arguments both the flash and the naive scores kernel take after their own: window
 * widths, the diagonal offset (int), softcap, bias (buffer, offset, three strides), ALiBi slopes
 * and key lengths. Sets
 * CLFLASH_FEATURE_ARGS arguments from index `first`. `include_out_scale` puts v_scale after
 * softcap (the flash kernel's order). */
CLFLASH_INTERNAL cl_int clflash_set_feature_args(cl_kernel k, cl_uint first, const clflash_problem *p,
                                                 int include_out_scale);

/* ---- the backward pass (backward_plan.c, backward.c, backward_naive.c) ---------------------- */
/* CLFLASH_ERROR_UNSUPPORTED (with a detail naming it) if p asks for anything the backward kernels
 * do not implement (i8 storage, an out_dtype other than dtype; see clflash_backward in clflash.h). */
CLFLASH_INTERNAL clflash_status clflash_check_backward_features(const clflash_problem *p);

/* Every check clflash_backward and clflash_backward_naive make before enqueueing anything: the
 * forward's (clflash_validate_call without lse), the features, lse, d_o and the three outputs'
 * sizes, that no output overlaps an input or another output, and that no output is the bias, ALiBi
 * or key-lengths buffer. Fills *p and *queue_out. */
CLFLASH_INTERNAL clflash_status clflash_validate_backward_call(
    clflash_context *c, const clflash_attention_desc *d, cl_command_queue queue, cl_mem q, cl_mem k, cl_mem v,
    cl_mem o, cl_mem d_o, cl_mem lse, cl_mem dq, cl_mem dk, cl_mem dv, cl_uint num_wait, const cl_event *wait,
    clflash_problem *p, cl_command_queue *queue_out);

typedef struct {
    clflash_plan plan;
    cl_kernel rowdot, grads;    /* created for this call; clflash_backward_kernels_release frees them */
    uint32_t rowdot_wg;         /* the D kernel's work-group size */
    uint64_t key_groups;        /* work-groups writing dK and dV (per kv head) and dQ (per query head): */
    uint64_t query_groups;      /* the gradient kernel's grid is (key_groups + query_groups) groups */
} clflash_backward_kernels;

/* Plans and builds the flash backward kernels for p (see clflash_plan_backward). If below_block is
 * not 0, only blocks smaller than it are considered (a step down after CL_OUT_OF_RESOURCES). */
CLFLASH_INTERNAL clflash_status clflash_plan_backward_kernels(clflash_context *c, const clflash_problem *p,
                                                              uint32_t below_block, clflash_backward_kernels *out);
CLFLASH_INTERNAL void clflash_backward_kernels_release(clflash_backward_kernels *k);

/* ---- bias_grad.c: the backward's optional dBias (cl/bias_grad.cl) -------------------------------- */
/* With p->bias_grad set: refuses it without a bias, a buffer smaller than the bias layout's extent,
 * a layout whose non-broadcast elements overlap, or a buffer that is also the descriptor's bias,
 * slopes or key lengths or one of `others` (the call's other buffers). Succeeds when it is NULL. */
CLFLASH_INTERNAL clflash_status clflash_check_bias_grad(const clflash_problem *p, const cl_mem *others,
                                                        size_t n_others);
/* Enqueues the bias-gradient kernel: inputs = {q, k, v, d_o, lse}, dvec = D = rowsum(dO * O), after
 * the wait list; writes every element of p->bias_grad that the bias layout addresses. */
CLFLASH_INTERNAL clflash_status clflash_enqueue_bias_grad(clflash_context *c, const clflash_problem *p,
                                                          cl_command_queue queue, const cl_mem *inputs, cl_mem dvec,
                                                          cl_uint num_wait, const cl_event *wait, cl_event *done);

/* ---- nv_mma_backward_plan.c: the NVIDIA tensor-core gradient kernel (cl/nv_mma_backward.cl) --- */
/* Why the tensor-core gradient kernel cannot run p on c's device, or NULL if it can. */
CLFLASH_INTERNAL const char *clflash_nv_mma_backward_refusal(const clflash_context *c, const clflash_problem *p);
/* Plans and builds it (call only when the refusal is NULL): on success replaces out->grads and
 * out->plan, key_groups and query_groups, and releases the portable gradient kernel;
 * out->rowdot (the portable D kernel) is kept. On failure out is unchanged. */
CLFLASH_INTERNAL clflash_status clflash_plan_nv_mma_backward(clflash_context *c, const clflash_problem *p,
                                                             uint32_t below_block, clflash_backward_kernels *out);

#endif /* CLFLASH_INTERNAL_H */
