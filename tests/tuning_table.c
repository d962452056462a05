/*
 * tuning_table.c - prints the register tiles and B that the planner tries first for the
 * register-tiled forward, or the parameters of the other kernels the planners build (the lane
 * path, the portable backward, the merge, the naive path, the tensor-core kernels), on a GPU
 * clflash cannot run, given the GPU's name and class: the planner's defaults with clflash's
 * built-in tuning rules applied (lib/tuning_builtin.c).
 *
 * Why: the compile-matrix tests (kernel_resources.cmake for AMD, kernel_resources_intel.cmake for
 * Intel) must build what the library would build on each target, not a copy of its parameters, so
 * that a rule that still spills, or a default changed without its rule, fails there. No device is
 * touched: the context below holds only the facts the planner's arithmetic reads.
 *
 *   tuning_table --device NAME --class CLASS --dtype f32|f16|bf16|i8 --head-dim D [--local-mem BYTES]
 *                [--max-work-group N]
 *                [--kernel forward|lanes|backward|merge|naive|nv_forward|nv_backward|nv_wgmma_forward]
 *                [--batch N --heads-q N --heads-kv N --seq-q N --seq-k N --compute-units N
 *                 --features 0|1|LIST --causal 0|1 --bias 0|1 --with-lse 0|1 --unaligned 0|1 --varlen 0|1]
 *                [--tune SPEC]
 * prints, for the forward (the default), "-D BLOCK=B -D BLOCK_Q=BQ -D RT_RM=RM -D RT_TC=TC", or
 * "lanes" where the table sends the call to the lane-per-row path; for that path (lanes) the
 * defines of its first B and work-items per row, "-D BLOCK=B -D TPR=T -D LDS_STRIDE=.. ..."; for the
 * backward's gradient kernel "-D BLOCK=B -D TPR=T -D LDS_STRIDE=.. -D T_STRIDE=.. -D P_STRIDE=..
 * -D ROWDOT_WG=.. ...", the defines lib/backward_plan.c builds it with; for the merge of split parts
 * (merge) "-D MERGE_LANES=.. -D MERGE_ROWS=.. -D MERGE_MAX_PARTS=.." for batch x heads-q x seq-q
 * rows; for the naive path (naive) its softmax kernels' first "-D SOFTMAX_WG=.."; for the NVIDIA
 * tensor-core kernels (nv_forward, nv_backward, and the Hopper forward
 * nv_wgmma_forward, whatever CLFLASH_WGMMA and the device) every define of the first kernel their
 * planners would build for the shape the other options give (a long prefill of one head by
 * default; --features 1 turns every feature on, a comma-separated list of window (causal, 256 keys
 * left), softcap, bias, alibi and keylens those alone, --causal 1 the causal mask alone, --bias 1 a bias
 * alone, --unaligned 1 gives rows that do not start on 16 bytes, --varlen 1 a variable-length batch,
 * which takes every feature but bias and key lengths), feature switches included. --tune applies tuning settings (the
 * syntax of clflash_context_set_tuning) after the built-in rules, as a context's would be.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: tuning_table --device NAME --class cpu|nvidia_gpu|amd_gpu|intel_gpu|other_gpu|other "
                    "--dtype f32|f16|bf16|i8 --head-dim D [--local-mem BYTES] [--max-work-group N] "
                    "[--kernel forward|lanes|backward|merge|naive|nv_forward|nv_backward|nv_wgmma_forward] [--tune SPEC]\n");
    return 2;
}

/* --features: 1 (every feature), or a comma-separated list of window (a causal window of 256),
 * softcap, bias, alibi and keylens; -1 for anything else. */
enum { F_WINDOW = 1, F_SOFTCAP = 2, F_BIAS = 4, F_ALIBI = 8, F_KEYLENS = 16 };
static long feature_bits(const char *v)
{
    static const char *const names[] = {"window", "softcap", "bias", "alibi", "keylens"}; /* bit i: 1 << i */
    const size_t n_names = sizeof names / sizeof names[0];
    if (strcmp(v, "1") == 0)
        return (1L << n_names) - 1;
    if (strcmp(v, "0") == 0)
        return 0;
    long bits = 0;
    while (*v) {
        const size_t n = strcspn(v, ",");
        size_t i = 0;
        while (i < n_names && !(strlen(names[i]) == n && strncmp(v, names[i], n) == 0))
            i++;
        if (i == n_names)
            return -1;
        bits |= 1L << i;
        v += n + (v[n] == ',');
    }
    return bits;
}

int main(int argc, char **argv)
{
    static const char *const classes[] = {"cpu", "nvidia_gpu", "amd_gpu", "intel_gpu", "other_gpu", "other"};
    static const struct {
        const char *name;
        clflash_dtype t;
        size_t size;
    } dtypes[] = {{"f32", CLFLASH_F32, 4}, {"f16", CLFLASH_F16, 2}, {"bf16", CLFLASH_BF16, 2}, {"i8", CLFLASH_I8, 1}};
    const char *device = NULL, *tune = NULL;
    static const char *const kernels[] = {"forward", "lanes", "backward", "merge", "naive", "nv_forward", "nv_backward",
                                          "nv_wgmma_forward"};
    int cls = -1, dt = -1, kernel = 0;
    long head_dim = 0, local_mem = 65536, max_wg = 256;
    long batch = 1, heads_q = 1, heads_kv = 1, seq_q = 4096, seq_k = 4096, units = 0, features = 0, with_lse = 0,
         unaligned = 0, varlen = 0, causal = 0, bias = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--device") == 0) {
            device = v;
        } else if (strcmp(k, "--class") == 0) {
            for (int j = 0; j < (int)(sizeof classes / sizeof classes[0]); j++)
                if (strcmp(v, classes[j]) == 0)
                    cls = j;
        } else if (strcmp(k, "--dtype") == 0) {
            for (int j = 0; j < (int)(sizeof dtypes / sizeof dtypes[0]); j++)
                if (strcmp(v, dtypes[j].name) == 0)
                    dt = j;
        } else if (strcmp(k, "--head-dim") == 0) {
            head_dim = strtol(v, NULL, 10);
        } else if (strcmp(k, "--local-mem") == 0) {
            local_mem = strtol(v, NULL, 10);
        } else if (strcmp(k, "--max-work-group") == 0) {
            max_wg = strtol(v, NULL, 10);
        } else if (strcmp(k, "--kernel") == 0) {
            kernel = -1;
            for (int j = 0; j < (int)(sizeof kernels / sizeof kernels[0]); j++)
                if (strcmp(v, kernels[j]) == 0)
                    kernel = j;
        } else if (strcmp(k, "--batch") == 0) {
            batch = strtol(v, NULL, 10);
        } else if (strcmp(k, "--heads-q") == 0) {
            heads_q = strtol(v, NULL, 10);
        } else if (strcmp(k, "--heads-kv") == 0) {
            heads_kv = strtol(v, NULL, 10);
        } else if (strcmp(k, "--seq-q") == 0) {
            seq_q = strtol(v, NULL, 10);
        } else if (strcmp(k, "--seq-k") == 0) {
            seq_k = strtol(v, NULL, 10);
        } else if (strcmp(k, "--compute-units") == 0) {
            units = strtol(v, NULL, 10);
        } else if (strcmp(k, "--features") == 0) {
            features = feature_bits(v);
            if (features < 0)
                return usage();
        } else if (strcmp(k, "--causal") == 0) {
            causal = strtol(v, NULL, 10);
        } else if (strcmp(k, "--bias") == 0) {
            bias = strtol(v, NULL, 10);
        } else if (strcmp(k, "--with-lse") == 0) {
            with_lse = strtol(v, NULL, 10);
        } else if (strcmp(k, "--unaligned") == 0) {
            unaligned = strtol(v, NULL, 10);
        } else if (strcmp(k, "--varlen") == 0) {
            varlen = strtol(v, NULL, 10);
        } else if (strcmp(k, "--tune") == 0) {
            tune = v;
        } else {
            return usage();
        }
    }
    if (argc % 2 != 1 || device == NULL || cls < 0 || dt < 0 || head_dim < 1 || head_dim > CLFLASH_MAX_HEAD_DIM ||
        local_mem < 1024 || max_wg < 1 || batch < 1 || heads_q < 1 || heads_kv < 1 || heads_q % heads_kv != 0 ||
        seq_q < 1 || seq_k < 1 || units < 0 || kernel < 0)
        return usage();
    const char *const which = kernels[kernel];
    const int nv = strncmp(which, "nv_", 3) == 0, backward = strstr(which, "backward") != NULL;

    clflash_context c;
    clflash_problem p;
    memset(&c, 0, sizeof c);
    memset(&p, 0, sizeof p);
    snprintf(c.info.name, sizeof c.info.name, "%s", device);
    c.info.device_class = (clflash_device_class)cls;
    c.info.type = cls == CLFLASH_CLASS_CPU ? CL_DEVICE_TYPE_CPU : CL_DEVICE_TYPE_GPU;
    c.info.local_mem_size = (cl_ulong)local_mem;
    c.info.max_work_group_size = (size_t)max_wg;
    c.local_mem_budget = (uint64_t)local_mem;
    c.info.compute_units = (cl_uint)units;
    c.info.max_alloc_size = (cl_ulong)1 << 40;
    /* by default a long prefill: nothing but the device and the rules limits the tiles */
    p.batch = (uint32_t)batch;
    p.heads_q = (uint32_t)heads_q;
    p.heads_kv = (uint32_t)heads_kv;
    p.group = p.heads_q / p.heads_kv;
    p.seq_q = (uint32_t)seq_q;
    p.seq_k = (uint32_t)seq_k;
    p.head_dim = (uint32_t)head_dim;
    p.dtype = p.out_dtype = dtypes[dt].t;
    p.elem_size = p.out_elem_size = dtypes[dt].size;
    /* contiguous [batch][seq][heads][head_dim] tensors, or rows one element off 16 bytes */
    const clflash_strides rows_of = {.offset = unaligned ? 1 : 0,
                                     .batch_stride = (uint64_t)seq_q * heads_q * head_dim,
                                     .head_stride = (uint64_t)head_dim,
                                     .seq_stride = (uint64_t)heads_q * head_dim};
    p.q = p.k = p.v = p.o = rows_of;
    if (causal)
        p.flags = CLFLASH_CAUSAL;
    static char stand_in; /* a "buffer": the planners read only whether one is given, never its contents */
    if (bias)
        p.bias = (cl_mem)(void *)&stand_in;
    if (features & F_WINDOW) {
        p.flags = CLFLASH_CAUSAL | CLFLASH_WINDOW;
        p.window_left = 256;
    }
    if (features & F_SOFTCAP)
        p.softcap = 50.0f;
    if (features & F_ALIBI)
        p.alibi_slopes = (cl_mem)(void *)&stand_in;
    if (!varlen) { /* a variable-length batch takes neither key lengths nor a bias */
        if (features & F_KEYLENS)
            p.key_lengths = (cl_mem)(void *)&stand_in;
        if (features & F_BIAS)
            p.bias = (cl_mem)(void *)&stand_in;
    }
    if (varlen) { /* packed [total][heads][head_dim] tensors of batch sequences of up to seq_q, seq_k rows */
        static char stand_in_cu;
        p.varlen = 1;
        p.cu_seqlens_q = p.cu_seqlens_k = (cl_mem)(void *)&stand_in_cu;
        p.total_q = (uint32_t)(batch * seq_q);
        p.total_k = (uint32_t)(batch * seq_k);
        p.q.batch_stride = p.k.batch_stride = p.v.batch_stride = p.o.batch_stride = 0;
    }
    if (clflash_tune_builtin_values(device, (clflash_device_class)cls, p.dtype, p.head_dim, &p.tune) !=
        CLFLASH_SUCCESS) {
        fprintf(stderr, "tuning_table: %s\n", clflash_last_error_detail());
        return 1;
    }
    if (tune != NULL && clflash_tune_apply_spec(tune, device, (clflash_device_class)cls, p.dtype, p.head_dim, &p.tune) !=
                            CLFLASH_SUCCESS) {
        fprintf(stderr, "tuning_table: %s\n", clflash_last_error_detail());
        return 1;
    }
    if (strcmp(which, "nv_wgmma_forward") == 0) {
        char defines[700];
        if (!clflash_nv_wgmma_first_defines(&c, &p, (int)with_lse, defines, sizeof defines)) {
            fprintf(stderr, "tuning_table: nv_wgmma_forward does not take this call in %ld bytes\n", local_mem);
            return 1;
        }
        printf("%s\n", defines);
        return 0;
    }
    if (nv) {
        char defines[700];
        const int ok = backward ? clflash_nv_backward_first_defines(&c, &p, defines, sizeof defines)
                                : clflash_nv_forward_first_defines(&c, &p, (int)with_lse, defines, sizeof defines);
        if (!ok) {
            fprintf(stderr, "tuning_table: no tensor-core tile fits %ld bytes at head_dim %ld\n", local_mem, head_dim);
            return 1;
        }
        printf("%s\n", defines);
        return 0;
    }
    if (strcmp(which, "lanes") == 0) {
        uint32_t first[2];
        if (!clflash_lanes_first_candidate(&c, &p, first)) {
            fprintf(stderr, "tuning_table: the lane path takes no B at head_dim %ld here\n", head_dim);
            return 1;
        }
        char shape[120];
        clflash_lanes_shape_defines(&p, first[0], first[1], shape, sizeof shape);
        printf("%s\n", shape);
        return 0;
    }
    if (strcmp(which, "merge") == 0) {
        char shape[100];
        clflash_merge_shape_defines(clflash_merge_lanes(p.head_dim, (uint64_t)p.batch * p.heads_q * p.seq_q), shape,
                                    sizeof shape);
        printf("%s\n", shape);
        return 0;
    }
    if (strcmp(which, "naive") == 0) {
        printf("-D SOFTMAX_WG=%d\n", CLFLASH_NAIVE_SOFTMAX_WG);
        return 0;
    }
    if (backward) {
        uint32_t first[3];
        if (!clflash_backward_first_candidate(&c, &p, first)) {
            fprintf(stderr, "tuning_table: no backward tile fits %ld bytes at head_dim %ld\n", local_mem, head_dim);
            return 1;
        }
        char shape[240];
        clflash_backward_shape_defines(&c, &p, first[0], first[1], first[2], shape, sizeof shape);
        printf("%s\n", shape);
        return 0;
    }
    uint32_t cand[4];
    if (!clflash_regtile_first_candidate(&c, &p, cand)) {
        printf("lanes\n");
        return 0;
    }
    printf("-D BLOCK=%u -D BLOCK_Q=%u -D RT_RM=%u -D RT_TC=%u\n", cand[3], cand[2], cand[0], cand[1]);
    return 0;
}
