# kernel_nvptx.cmake - builds every configuration of the portable kernels (kernel_define_sets.cmake,
# the same as the AMD, Intel and SPIR-V matrices) for NVIDIA GPUs through clang's NVPTX back end
# with libclc's builtins, assembles the PTX with ptxas for Ampere (sm_80) and Hopper (sm_90), and
# prints registers, spills and shared memory per kernel; fails on a build or assembly error (an
# undefined helper, more than the 48 KiB of static local memory a work-group gets) and on a spill.
#
# NVIDIA's OpenCL driver compiles the kernels with a compiler of its own, so these figures are not
# the driver's; what this catches is what any LLVM-based NVPTX toolchain would refuse (a helper
# that is `inline` without `static` stayed an undefined call here until 0.5.0). The register-tiled
# forward is built with the tiles the library plans for an NVIDIA GPU with 48 KiB of local memory
# (@REGTILE@, kernel_tuned_options.cmake).
#
# The tensor-core kernels (nv_mma_*.cl, _nv_cases below) are built too, in the configurations the
# NVIDIA planners (lib/nv_mma_forward_plan.c, nv_mma_backward_plan.c, bias_grad.c) report on the
# H200 for prefill, decoding with split parts merged in the launch and packed heads, padded head
# dims with unaligned rows, every feature, the backward at head_dim 256 and the bias gradient: their
# inline PTX must assemble for sm_80 and sm_90 and their local memory fit 48 KiB. Their spills are
# printed but do not fail: only NVIDIA's driver builds these kernels for a device, and its compiler
# allocates their registers otherwise (clang spills the d = 128 prefill at 255 registers where the
# driver does not; docs/performance/h200.md has the driver's figures).
#
#   cmake -DCLANG=<clang 15 or later, or empty> -DLIBCLC=<nvptx64--nvidiacl.bc or empty>
#         -DPTXAS=<ptxas, or empty> -DTUNING_TABLE=<tests/tuning_table> -DCL_DIR=<cl/>
#         -DWORK=<scratch folder> -P kernel_nvptx.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT CLANG OR NOT LIBCLC OR NOT EXISTS "${LIBCLC}" OR NOT PTXAS)
  message("SKIPPED: clang 15 or later, libclc's nvptx64--nvidiacl.bc and ptxas (the CUDA toolkit) are needed")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/kernel_define_sets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/kernel_tuned_options.cmake)
set(_archs sm_80 sm_90)
# name | files after common.cl, joined by + | options, as lib/nv_mma_*_plan.c and bias_grad.c build them
set(_nv_fwd "nv_mma_common.cl+nv_mma_forward.cl")
set(_nv_bwd "nv_mma_common.cl+nv_mma_scores.cl+nv_mma_backward.cl")
set(_nv_fwd_common "-D WITH_OUT_LSE=0 -D NV_Q_DIRECT=0 -D BIAS_PAIRS=0")
set(_nv_cases
  "nv-forward-d64|${_nv_fwd}|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D HEAD_DIM=64 -D D_REAL=64 -D NV_ALIGNED=1 -D BLOCK=64 -D WARPS=4 -D M_TILES=2 -D STAGES=2 -D BIAS_PAIRS=0 -D FUSED_MERGE=0 -D WITH_OUT_LSE=0 -D NV_RESCALE_THRESH=-1 -D NV_Q_DIRECT=1"
  "nv-forward-d128|${_nv_fwd}|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D HEAD_DIM=128 -D D_REAL=128 -D NV_ALIGNED=1 -D BLOCK=32 -D WARPS=4 -D M_TILES=2 -D STAGES=2 -D FUSED_MERGE=0 -D NV_RESCALE_THRESH=8 ${_nv_fwd_common}"
  "nv-forward-d256|${_nv_fwd}|${_none} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D HEAD_DIM=256 -D D_REAL=256 -D NV_ALIGNED=1 -D BLOCK=16 -D WARPS=4 -D M_TILES=1 -D STAGES=2 -D FUSED_MERGE=0 -D NV_RESCALE_THRESH=8 ${_nv_fwd_common}"
  "nv-decode-d128|${_nv_fwd}|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=1 -D SPLIT=1 -D PACK=4 -D HEAD_DIM=128 -D D_REAL=128 -D NV_ALIGNED=1 -D BLOCK=16 -D WARPS=1 -D M_TILES=1 -D STAGES=3 -D FUSED_MERGE=1 -D NV_RESCALE_THRESH=8 ${_nv_fwd_common} -D MERGE_GROUP=4 -D MERGE_UNROLL_PARTS=8 -D MERGE_LSE_BATCH=8 -D MERGE_PREFETCH=1"
  "nv-forward-d80-features|${_nv_fwd}|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D HEAD_DIM=80 -D D_REAL=77 -D NV_ALIGNED=0 -D BLOCK=32 -D WARPS=4 -D M_TILES=1 -D STAGES=2 -D FUSED_MERGE=0 -D NV_RESCALE_THRESH=-1 ${_nv_fwd_common}"
  "nv-backward-d128|${_nv_bwd}|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=128 -D D_REAL=128 -D D_SPLIT=1 -D NV_ALIGNED=1 -D BLOCK=32 -D WARPS=4 -D BIAS_PAIRS=0 -D NV_BWD_STREAM=1"
  "nv-backward-d64-features|${_nv_bwd}|${_all} -D CLFLASH_DTYPE_BF16 -D CLFLASH_OUT_BF16 -D WITH_LSE=0 -D HEAD_DIM=64 -D D_REAL=59 -D D_SPLIT=1 -D NV_ALIGNED=0 -D BLOCK=64 -D WARPS=4 -D BIAS_PAIRS=1 -D NV_BWD_STREAM=0"
  "nv-backward-d256|${_nv_bwd}|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=256 -D D_REAL=256 -D D_SPLIT=2 -D NV_ALIGNED=1 -D BLOCK=16 -D WARPS=4 -D BIAS_PAIRS=0 -D NV_BWD_STREAM=1"
  "nv-bias-grad-d64|nv_mma_common.cl+nv_mma_scores.cl+nv_mma_bias_grad.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=64 -D D_REAL=64 -D D_SPLIT=1 -D NV_ALIGNED=1 -D BLOCK=64 -D WARPS=4 -D BIAS_PAIRS=1 -D BCAST_BATCH=1 -D BCAST_HEADS=1 -D BCAST_ROWS=0"
)
set(_failed "")
set(_table "")
foreach(_case IN LISTS _cases _nv_cases)
  kernel_case_source("${_case}" nvptx)
  # as the library would plan them on an NVIDIA GPU reporting 48 KiB of local memory
  kernel_tuned_options("${_opts}" "NVIDIA H100" nvidia_gpu _opts --local-mem 49152 --max-work-group 1024)
  kernel_tiles_label("${_opts}" _tiles)
  set(_target_opts "")
  set(_spills_fail TRUE)
  if(_name MATCHES "^nv-") # inline PTX for sm_80 (mma.sync, ldmatrix, cp.async: PTX 7.0)
    set(_target_opts -Xclang -target-cpu -Xclang sm_80 -Xclang -target-feature -Xclang +ptx70)
    set(_spills_fail FALSE)
    if(_opts MATCHES "-D BLOCK=([0-9]+) -D WARPS=([0-9]+)")
      set(_tiles "B ${CMAKE_MATCH_1}, ${CMAKE_MATCH_2} warps")
    endif()
  endif()
  separate_arguments(_optlist UNIX_COMMAND "${_opts}")
  set(_ptx "${WORK}/nvptx_${_name}.ptx")
  execute_process(COMMAND "${CLANG}" -x cl -target nvptx64-unknown-nvidiacl -O2 -S -Xclang -finclude-default-header
                          -Xclang -mlink-builtin-bitcode -Xclang "${LIBCLC}" -Wno-linker-warnings ${_target_opts} ${_optlist}
                          -o "${_ptx}" "${_src}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: clang failed (${_rc}):\n${_err}\n")
    continue()
  endif()
  foreach(_arch IN LISTS _archs)
    execute_process(COMMAND "${PTXAS}" -arch=${_arch} -v "${_ptx}" -o "${WORK}/nvptx_${_name}_${_arch}.cubin"
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
    string(APPEND _out "${_err}")
    if(NOT _rc EQUAL 0)
      string(APPEND _failed "  ${_name} for ${_arch}: ptxas failed (${_rc}):\n${_out}\n")
      continue()
    endif()
    # ptxas prints, per entry: "Compiling entry function 'K'", the spills, "Used R registers, ... S bytes smem"
    string(REGEX MATCHALL "entry function '[A-Za-z_0-9]+'[^\n]*\n[^\n]*\n[^\n]*spill loads\n[^\n]*Used [0-9]+ registers[^\n]*"
           _entries "${_out}")
    if(NOT _entries)
      string(APPEND _failed "  ${_name} for ${_arch}: no entry functions in ptxas's report:\n${_out}\n")
    endif()
    foreach(_e IN LISTS _entries)
      string(REGEX MATCH "entry function '([A-Za-z_0-9]+)'" _m "${_e}")
      set(_kernel "${CMAKE_MATCH_1}")
      string(REGEX MATCH "([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads" _m "${_e}")
      set(_stores "${CMAKE_MATCH_1}")
      set(_loads "${CMAKE_MATCH_2}")
      string(REGEX MATCH "Used ([0-9]+) registers" _m "${_e}")
      set(_regs "${CMAKE_MATCH_1}")
      set(_smem 0)
      if(_e MATCHES "([0-9]+) bytes smem")
        set(_smem "${CMAKE_MATCH_1}")
      endif()
      string(APPEND _table "| ${_name} | ${_kernel} | ${_arch} | ${_tiles} | ${_regs} | ${_stores} | ${_loads} | ${_smem} |\n")
      if(_smem GREATER 49152)
        string(APPEND _failed "  ${_name} (${_kernel}) for ${_arch}: ${_smem} bytes of shared memory (above 48 KiB)\n")
      endif()
      if(_spills_fail AND (_stores GREATER 0 OR _loads GREATER 0))
        string(APPEND _failed "  ${_name} (${_kernel}) for ${_arch}: spilled (${_stores} bytes stored, ${_loads} loaded)\n")
      endif()
    endforeach()
  endforeach()
endforeach()
message("| case | kernel | target | tiles | registers | spill stores (bytes) | spill loads (bytes) | shared memory (bytes) |\n"
        "|---|---|---|---|---|---|---|---|\n${_table}")
if(_failed)
  message(FATAL_ERROR "kernels through NVPTX:\n${_failed}")
endif()
