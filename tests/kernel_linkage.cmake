# kernel_linkage.cmake - builds every kernel file with clang at -O0 (nothing inlined) to LLVM IR,
# with define sets the planners produce, and fails if the IR declares a function it does not
# define other than an OpenCL builtin (Itanium-mangled, "_Z..."); then builds each GPU path's
# define set for three AMD targets and fails on a build error or more than 64 KiB of static
# local memory. A helper written `inline`
# without `static` is, under OpenCL C 1.2's C99 rules, an inline definition only: a compiler that
# does not inline the call (clang's NVPTX back end at -O3 did, for dkdv_block; every clang back end
# at -cl-opt-disable) leaves an undefined symbol that the device's linker rejects.
#
# The NVIDIA tensor-core files (nv_mma_*.cl, after nv_mma_common.cl and, for the gradients,
# nv_mma_scores.cl) and the sm_90a kernels (nv_sm90a_probe.cl, nv_wgmma_forward.cl after
# nv_mma_common.cl) are built for clang's nvptx64 target, whose inline-asm constraints they use;
# clang left nv_mma_common.cl's copy_rows_by_element an undefined call while it was `inline`
# without `static` (NVIDIA's driver inlines everything, so only other toolchains could see it).
#
#   cmake -DCLANG=<clang or empty> -DCL_DIR=<the cl/ folder> -DWORK=<scratch folder> -P kernel_linkage.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT CLANG)
  message("SKIPPED: clang not found (install it to check the kernels' linkage)")
  return()
endif()

set(_common "-cl-std=CL1.2 -D CAUSAL=0 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=0 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=0")
set(_all "-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=1 -D SOFTCAP=1 -D BIAS=1 -D ALIBI=1 -D KEYLEN=1 -D KEYLEN_DIAGONAL=1 -D VARLEN=1")
# a variable-length packed batch with the features it takes (key lengths and bias it does not)
set(_varlen "-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=1 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=1")
# name | target | sources after common.cl, joined by + | options
set(_cases
  "forward-cpu|spir64|flash_forward_cpu.cl|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D SPLIT=1 -D PACK=1 -D PAGED=1 -D PAGE_SIZE=16 -D HEAD_DIM=32 -D BLOCK=64"
  "forward-cpu-plain|spir64|flash_forward_cpu.cl|${_common} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=7 -D BLOCK=64"
  "forward-regtile|spir64|flash_forward_regtile.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=1 -D SPLIT=1 -D PACK=4 -D PAGED=1 -D PAGE_SIZE=16 -D HEAD_DIM=32 -D BLOCK=64 -D BLOCK_Q=64 -D RT_RM=4 -D RT_TC=8"
  "forward-lanes|spir64|flash_forward_lanes.cl|${_common} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=7 -D BLOCK=64 -D TPR=4 -D LDS_STRIDE=10 -D KT_STRIDE=65 -D P_STRIDE=65"
  "decode-cpu|spir64|flash_decode_cpu.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=1 -D SPLIT=1 -D PACK=4 -D PAGED=1 -D PAGE_SIZE=16 -D HEAD_DIM=64 -D DEC_ROWS=4 -D DEC_KEYS=32 -D DEC_KV_HEADS=1"
  "decode-cpu-slots|spir64|flash_decode_cpu.cl|${_all} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F32 -D WITH_LSE=1 -D SPLIT=0 -D PACK=8 -D PAGED=0 -D HEAD_DIM=40 -D DEC_ROWS=16 -D DEC_KEYS=32 -D DEC_KV_HEADS=2"
  "forward-lanes-varlen|spir64|flash_forward_lanes.cl|${_varlen} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D SPLIT=1 -D PACK=1 -D PAGED=0 -D HEAD_DIM=24 -D BLOCK=16 -D TPR=4 -D LDS_STRIDE=26 -D KT_STRIDE=17 -D P_STRIDE=17"
  "merge|spir64|merge_states.cl|${_common} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_F32 -D HEAD_DIM=256 -D MERGE_LANES=32 -D MERGE_ROWS=4 -D MERGE_MAX_PARTS=256 -D WITH_LSE=1"
  "merge-varlen|spir64|merge_states.cl|${_varlen} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F16 -D HEAD_DIM=64 -D MERGE_LANES=32 -D MERGE_ROWS=4 -D MERGE_MAX_PARTS=256 -D WITH_LSE=1"
  "naive|spir64|naive_attention.cl|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D HEAD_DIM=32 -D SOFTMAX_WG=256"
  "naive-backward|spir64|naive_backward.cl|${_all} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=16 -D SOFTMAX_WG=256"
  "backward-cpu|spir64|flash_backward.cl|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=0 -D CLFLASH_CPU_PATH=1 -D HEAD_DIM=64 -D BLOCK=64 -D TPR=1 -D LDS_STRIDE=66 -D T_STRIDE=65 -D P_STRIDE=65 -D ROWDOT_WG=64 -D AMD_WAVES=0 -D CLFLASH_BWD_SKIP_DQ=0 -D CLFLASH_BWD_SKIP_DKDV=0"
  "backward-gpu|spir64|flash_backward.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=8 -D BLOCK=8 -D TPR=2 -D LDS_STRIDE=10 -D T_STRIDE=9 -D P_STRIDE=9 -D ROWDOT_WG=64 -D AMD_WAVES=2 -D CLFLASH_CPU_PATH=0 -D CLFLASH_BWD_SKIP_DQ=0 -D CLFLASH_BWD_SKIP_DKDV=0"
  "bias-grad|spir64|bias_grad.cl|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=40 -D BCAST_BATCH=1 -D BCAST_HEADS=0 -D BCAST_ROWS=1"
  "bias-grad-cpu|spir64|bias_grad_cpu.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=40 -D BCAST_BATCH=0 -D BCAST_HEADS=1 -D BCAST_ROWS=1"
  "kv-append|spir64|kv_append.cl|${_common} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=0 -D HEAD_DIM=40 -D ROT_HALF=8 -D INTERLEAVED=1 -D PAGED=1 -D PAGE_SIZE=7"
  "grad-accumulate|spir64|grad_accumulate.cl|${_common} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=0"
  "nv-forward|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_mma_forward.cl|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_F32 -D WITH_LSE=1 -D SPLIT=1 -D PACK=4 -D PAGED=0 -D HEAD_DIM=80 -D D_REAL=77 -D NV_ALIGNED=0 -D BLOCK=16 -D WARPS=1 -D M_TILES=1 -D STAGES=3 -D BIAS_PAIRS=0 -D FUSED_MERGE=1 -D WITH_OUT_LSE=1 -D NV_RESCALE_THRESH=-1 -D NV_Q_DIRECT=0 -D NV_Q_CHUNK=3 -D MERGE_GROUP=4 -D MERGE_UNROLL_PARTS=8 -D MERGE_LSE_BATCH=8 -D MERGE_PREFETCH=1"
  "nv-forward-aligned|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_mma_forward.cl|${_common} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=1 -D PAGE_SIZE=16 -D HEAD_DIM=64 -D D_REAL=64 -D NV_ALIGNED=1 -D BLOCK=64 -D WARPS=4 -D M_TILES=2 -D STAGES=2 -D BIAS_PAIRS=0 -D FUSED_MERGE=0 -D WITH_OUT_LSE=0 -D NV_RESCALE_THRESH=-1 -D NV_Q_DIRECT=1 -D NV_Q_CHUNK=3"
  "nv-forward-paged-decode|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_mma_forward.cl|${_common} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=1 -D PAGE_SIZE=64 -D HEAD_DIM=128 -D D_REAL=128 -D NV_ALIGNED=1 -D BLOCK=16 -D WARPS=1 -D M_TILES=1 -D STAGES=3 -D BIAS_PAIRS=0 -D FUSED_MERGE=0 -D WITH_OUT_LSE=0 -D NV_RESCALE_THRESH=-1 -D NV_Q_DIRECT=1 -D NV_Q_CHUNK=3"
  "nv-backward|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_mma_scores.cl+nv_mma_backward_tiles.cl+nv_mma_backward.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=256 -D D_REAL=250 -D D_SPLIT=2 -D NV_ALIGNED=0 -D BLOCK=16 -D WARPS=4 -D BIAS_PAIRS=1 -D NV_BWD_STREAM=1 -D NV_BWD_CHUNK=3 -D CLFLASH_BWD_SKIP_DQ=0 -D CLFLASH_BWD_SKIP_DKDV=0"
  "nv-wgmma-forward|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_wgmma_forward.cl|-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=0 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=0 -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=128 -D D_REAL=128 -D NV_ALIGNED=1 -D BLOCK=32 -D WARPS=8 -D WARPGROUPS=2 -D STAGES=2 -D WG_PIPE=0 -D WG_Q_CHUNK=3 -D BIAS_PAIRS=0"
  "nv-wgmma-forward-pipelined|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_wgmma_forward.cl|-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=0 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=0 -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=128 -D D_REAL=128 -D NV_ALIGNED=1 -D BLOCK=32 -D WARPS=12 -D WARPGROUPS=2 -D STAGES=2 -D WG_PIPE=1 -D WG_PRODUCER=1 -D WG_PRODUCER_REGS=32 -D WG_CONSUMER_REGS=232 -D WG_Q_CHUNK=3 -D BIAS_PAIRS=0"
  "nv-wgmma-forward-producer-features|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_wgmma_forward.cl|-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=1 -D KEYLEN=1 -D KEYLEN_DIAGONAL=1 -D VARLEN=0 -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=128 -D D_REAL=128 -D NV_ALIGNED=1 -D BLOCK=32 -D WARPS=16 -D WARPGROUPS=3 -D STAGES=2 -D WG_PIPE=0 -D WG_PRODUCER=1 -D WG_PRODUCER_REGS=32 -D WG_CONSUMER_REGS=160 -D WG_Q_CHUNK=3 -D BIAS_PAIRS=0"
  "nv-sm90a-probe|nvptx64-unknown-nvidiacl|nv_sm90a_probe.cl|${_common} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D PAGED=0"
  "nv-bias-grad|nvptx64-unknown-nvidiacl|nv_mma_common.cl+nv_mma_scores.cl+nv_mma_bias_grad.cl|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=48 -D D_REAL=40 -D D_SPLIT=1 -D NV_ALIGNED=1 -D BLOCK=64 -D WARPS=4 -D BIAS_PAIRS=0 -D BCAST_BATCH=0 -D BCAST_HEADS=1 -D BCAST_ROWS=1"
)
# AMD targets the portable kernels are also built for: GCN (gfx906), CDNA 2 (gfx90a), RDNA 2 (gfx1030).
set(_amd_targets gfx906 gfx90a gfx1030)
set(_failed "")
foreach(_case IN LISTS _cases)
  string(REPLACE "|" ";" _parts "${_case}")
  list(GET _parts 0 _name)
  list(GET _parts 1 _target)
  list(GET _parts 2 _files)
  string(REPLACE "+" ";" _files "${_files}")
  list(GET _parts 3 _opts)
  set(_src "${WORK}/linkage_${_name}.cl")
  file(READ "${CL_DIR}/common.cl" _text)
  foreach(_f IN LISTS _files)
    file(READ "${CL_DIR}/${_f}" _more)
    string(APPEND _text "${_more}")
  endforeach()
  file(WRITE "${_src}" "${_text}")
  separate_arguments(_optlist UNIX_COMMAND "${_opts}")
  execute_process(COMMAND "${CLANG}" -x cl -target ${_target} -O0 -emit-llvm -S -Xclang -finclude-default-header
                          ${_optlist} -o "${WORK}/linkage_${_name}.ll" "${_src}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: clang failed (${_rc}):\n${_err}\n")
    continue()
  endif()
  file(STRINGS "${WORK}/linkage_${_name}.ll" _decls REGEX "^declare ")
  set(_undefined "")
  foreach(_d IN LISTS _decls)
    if(_d MATCHES "@([A-Za-z_][A-Za-z0-9_.]*)\\(")
      set(_fn "${CMAKE_MATCH_1}")
      if(NOT _fn MATCHES "^_Z" AND NOT _fn MATCHES "^llvm\\.")
        list(APPEND _undefined "${_fn}")
      endif()
    endif()
  endforeach()
  if(_undefined)
    string(REPLACE ";" ", " _list "${_undefined}")
    string(APPEND _failed "  ${_name}: declared but not defined: ${_list}\n")
  else()
    message(STATUS "${_name}: every function it calls is defined or an OpenCL builtin")
  endif()
  # The same source for AMD GPUs (clang's amdgcn back end at -O2, without a device library, so
  # OpenCL builtins stay calls and register counts are not meaningful): it must build, and its
  # static local memory (exact either way) must fit the 64 KiB of an AMD work-group.
  set(_for_amd ${_amd_targets})
  if(_name MATCHES "cpu" OR _target MATCHES "nvptx") # the CPU paths, which only CPU devices run, and NVIDIA's
    set(_for_amd "")
  endif()
  foreach(_gfx IN LISTS _for_amd)
    execute_process(COMMAND "${CLANG}" -x cl -target amdgcn-amd-amdhsa -mcpu=${_gfx} -nogpulib -O2 -S
                            -Xclang -finclude-default-header ${_optlist} -o "${WORK}/linkage_${_name}_${_gfx}.s"
                            "${_src}"
      RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
    if(NOT _rc EQUAL 0)
      string(APPEND _failed "  ${_name} for ${_gfx}: clang failed (${_rc}):\n${_err}\n")
      continue()
    endif()
    file(STRINGS "${WORK}/linkage_${_name}_${_gfx}.s" _lds REGEX "\\.group_segment_fixed_size:")
    set(_most 0)
    foreach(_l IN LISTS _lds)
      if(_l MATCHES "([0-9]+)" AND CMAKE_MATCH_1 GREATER _most)
        set(_most "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    if(_most GREATER 65536)
      string(APPEND _failed "  ${_name} for ${_gfx}: ${_most} bytes of local memory (above 64 KiB)\n")
    else()
      message(STATUS "${_name} for ${_gfx}: builds, ${_most} bytes of local memory")
    endif()
  endforeach()
endforeach()
if(_failed)
  message(FATAL_ERROR "kernel linkage:\n${_failed}")
endif()
