# kernel_nvptx.cmake - builds every configuration of the portable kernels (kernel_define_sets.cmake,
# the same as the AMD, Intel and SPIR-V matrices) for NVIDIA GPUs through clang's NVPTX back end
# with libclc's builtins, assembles the PTX with ptxas for Ampere (sm_80) and Hopper (sm_90), and
# prints registers, spills, shared memory and the occupancy those give (warps per SM) per kernel;
# fails on a build or assembly error (an undefined helper, more than the 48 KiB of static local
# memory a work-group gets) and on a spill.
#
# NVIDIA's OpenCL driver compiles the kernels with a compiler of its own, so these figures are not
# the driver's; what this catches is what any LLVM-based NVPTX toolchain would refuse (a helper
# that is `inline` without `static` stayed an undefined call here until 0.5.0). The portable
# kernels are built with the parameters the library plans for an NVIDIA GPU with 48 KiB of local
# memory (kernel_define_sets.cmake's placeholders, kernel_tuned_options.cmake).
#
# The tensor-core kernels (nv_mma_*.cl, _nv_cases below) are built too, with the defines the NVIDIA
# planners (lib/nv_mma_forward_plan.c, nv_mma_backward_plan.c) give the first kernel they would
# build on an H200 (tests/tuning_table --kernel nv_forward|nv_backward) for prefill, decoding with
# split parts merged in the launch and packed heads, padded head dims with unaligned rows and every
# feature, variable-length batches (built, not planned yet), the backward at head_dims 59 to 256, and the bias gradient (lib/bias_grad.c's one shape): their
# inline PTX must assemble for sm_80 and sm_90 and their local memory fit 48 KiB. Their spills are
# printed but do not fail: only NVIDIA's driver builds these kernels for a device, and its compiler
# allocates their registers otherwise (clang spills the d = 128 prefill at 255 registers where the
# driver does not; docs/performance/h200.md has the driver's figures).
#
# The occupancy is worked out as CUDA's occupancy calculator does (the CUDA toolkit's
# cuda_occupancy.h): from ptxas's registers per thread, the static shared memory per work-group and
# the work-group size (the kernel's reqd_work_group_size, read from clang's LLVM IR), with the per-SM
# limits of sm_80 and sm_90 below. It assumes the driver gives shared memory its largest carveout;
# a kernel without reqd_work_group_size (its size is the host's choice) shows "-".
#
#   cmake -DCLANG=<clang 15 or later, or empty> -DLIBCLC=<nvptx64--nvidiacl.bc or empty>
#         -DPTXAS=<ptxas, or empty> -DTUNING_TABLE=<tests/tuning_table> -DPTX_SM90A=<tests/ptx_sm90a_rewrite>
#         -DCL_DIR=<cl/>
#         -DWORK=<scratch folder> -P kernel_nvptx.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT CLANG OR NOT LIBCLC OR NOT EXISTS "${LIBCLC}" OR NOT PTXAS)
  message("SKIPPED: clang 15 or later, libclc's nvptx64--nvidiacl.bc and ptxas (the CUDA toolkit) are needed")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/kernel_define_sets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/kernel_tuned_options.cmake)
set(_archs sm_80 sm_90)
# Per-SM limits, the same on both but for shared memory: 65536 32-bit registers in 4 sub-partitions
# of 16384, allocated per warp in units of 256; at most 64 warps (2048 threads) and 32 work-groups;
# shared memory of 164 KiB (sm_80) or 228 KiB (sm_90), allocated per work-group in units of 128
# bytes with 1 KiB per work-group reserved for the system. The rules and units are those of the
# CUDA 13.0 toolkit's cuda_occupancy.h (cudaOccMaxBlocksPerSMRegsLimit, ...SmemLimit); the per-SM
# figures those of NVIDIA's CCCL arch traits for sm_80 and sm_90 (max_shared_memory_per_multiprocessor,
# max_blocks_per_multiprocessor, max_threads_per_multiprocessor, reserved_shared_memory_per_block).
set(_sm_regs 65536)
set(_sm_subpartitions 4)
set(_sm_reg_unit 256)
set(_sm_max_warps 64)
set(_sm_max_groups 32)
set(_sm_smem_unit 128)
set(_sm_smem_reserved 1024)
set(_sm_smem_sm_80 167936)
set(_sm_smem_sm_90 233472)

# nvptx_occupancy(<registers per thread> <static shared bytes> <work-group size> <arch> <out warps>
# <out limit>): the warps per SM that many work-groups give, and what limits them (registers,
# shared memory, warps or work-groups); 0 warps where one work-group does not fit an SM.
function(nvptx_occupancy _regs _smem _wg _arch _out_warps _out_limit)
  math(EXPR _warps_per_group "(${_wg} + 31) / 32")
  # registers: per warp, rounded up to the allocation unit; a sub-partition holds whole warps, and a
  # work-group must fit the register file with its warps rounded up to the sub-partitions
  math(EXPR _per_warp "(${_regs} * 32 + ${_sm_reg_unit} - 1) / ${_sm_reg_unit} * ${_sm_reg_unit}")
  math(EXPR _rounded_warps "(${_warps_per_group} + ${_sm_subpartitions} - 1) / ${_sm_subpartitions} * ${_sm_subpartitions}")
  math(EXPR _fit "${_per_warp} * ${_rounded_warps}")
  if(_fit GREATER _sm_regs)
    set(_by_regs 0)
  else()
    math(EXPR _by_regs "${_sm_regs} / ${_sm_subpartitions} / ${_per_warp} * ${_sm_subpartitions} / ${_warps_per_group}")
  endif()
  # shared memory: the static size and the reserved KiB, rounded up to the allocation unit
  math(EXPR _alloc "(${_smem} + ${_sm_smem_reserved} + ${_sm_smem_unit} - 1) / ${_sm_smem_unit} * ${_sm_smem_unit}")
  math(EXPR _by_smem "${_sm_smem_${_arch}} / ${_alloc}")
  math(EXPR _by_warps "${_sm_max_warps} / ${_warps_per_group}")
  set(_groups ${_sm_max_groups})
  set(_limit "work-groups")
  foreach(_l warps regs smem) # of limits that allow as many work-groups, the later one is named
    if(_by_${_l} LESS_EQUAL _groups)
      set(_groups ${_by_${_l}})
      set(_limit ${_l})
    endif()
  endforeach()
  string(REPLACE "regs" "registers" _limit "${_limit}")
  string(REPLACE "smem" "shared memory" _limit "${_limit}")
  math(EXPR _warps "${_groups} * ${_warps_per_group}")
  set(${_out_warps} ${_warps} PARENT_SCOPE)
  set(${_out_limit} "${_limit}" PARENT_SCOPE)
endfunction()

# ptxas_figures(<one entry's part of ptxas -v's report> <out registers> <out spill stores> <out spill
# loads> <out shared bytes>): the figures ptxas prints for one entry function (shared bytes 0 when
# it names none).
function(ptxas_figures _text _out_regs _out_stores _out_loads _out_smem)
  string(REGEX MATCH "([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads" _m "${_text}")
  set(${_out_stores} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(${_out_loads} "${CMAKE_MATCH_2}" PARENT_SCOPE)
  string(REGEX MATCH "Used ([0-9]+) registers" _m "${_text}")
  set(${_out_regs} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(_smem 0)
  if(_text MATCHES "([0-9]+) bytes smem")
    set(_smem "${CMAKE_MATCH_1}")
  endif()
  set(${_out_smem} "${_smem}" PARENT_SCOPE)
endfunction()

# The tensor-core cases: name | files after common.cl, joined by + | the shape, as tests/tuning_table
# arguments (--kernel nv_forward or nv_backward); the tool prints every define the NVIDIA planner
# would build the kernel with for that shape on an H200 (48 KiB, 132 compute units), and the case
# is built with those. The bias gradient's kernel has one fixed shape (lib/bias_grad.c).
set(_nv_fwd "nv_mma_common.cl+nv_mma_forward.cl")
set(_nv_bwd "nv_mma_common.cl+nv_mma_scores.cl+nv_mma_backward_tiles.cl+nv_mma_backward.cl")
set(_prefill "--batch 4 --heads-q 16 --heads-kv 16 --seq-q 4096 --seq-k 4096")
set(_nv_cases
  "nv-forward-d64|${_nv_fwd}|--kernel nv_forward --dtype f16 --head-dim 64 ${_prefill}"
  "nv-forward-d128|${_nv_fwd}|--kernel nv_forward --dtype f16 --head-dim 128 ${_prefill} --with-lse 1"
  "nv-forward-d256|${_nv_fwd}|--kernel nv_forward --dtype bf16 --head-dim 256 ${_prefill}"
  "nv-decode-d128|${_nv_fwd}|--kernel nv_forward --dtype f16 --head-dim 128 --batch 1 --heads-q 32 --heads-kv 8 --seq-q 1 --seq-k 32768 --with-lse 1"
  "nv-forward-d77-features|${_nv_fwd}|--kernel nv_forward --dtype bf16 --head-dim 77 ${_prefill} --features 1 --unaligned 1"
  "nv-forward-d128-bias|${_nv_fwd}|--kernel nv_forward --dtype f16 --head-dim 128 ${_prefill} --bias 1"
  "nv-forward-d128-bias-staged|${_nv_fwd}|--kernel nv_forward --dtype f16 --head-dim 128 ${_prefill} --bias 1 --causal 1 --tune nv_forward.bias_staged=1"
  "nv-forward-d128-varlen|${_nv_fwd}|--kernel nv_forward --dtype f16 --head-dim 128 --batch 8 --heads-q 32 --heads-kv 8 --seq-q 1 --seq-k 8192 --features 1 --varlen 1 --with-lse 1"
  "nv-backward-d128|${_nv_bwd}|--kernel nv_backward --dtype f16 --head-dim 128 ${_prefill}"
  "nv-backward-d128-varlen|${_nv_bwd}|--kernel nv_backward --dtype bf16 --head-dim 128 ${_prefill} --features 1 --varlen 1"
  "nv-backward-d59-features|${_nv_bwd}|--kernel nv_backward --dtype bf16 --head-dim 59 ${_prefill} --features 1 --unaligned 1"
  "nv-backward-d256|${_nv_bwd}|--kernel nv_backward --dtype f16 --head-dim 256 ${_prefill}"
  "nv-bias-grad-d64|nv_mma_common.cl+nv_mma_scores.cl+nv_mma_bias_grad.cl|=${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=64 -D D_REAL=64 -D D_SPLIT=1 -D NV_ALIGNED=1 -D BLOCK=64 -D WARPS=4 -D BIAS_PAIRS=1 -D BCAST_BATCH=1 -D BCAST_HEADS=1 -D BCAST_ROWS=0"
)
set(_failed "")
set(_table "")
foreach(_case IN LISTS _cases _nv_cases)
  kernel_case_source("${_case}" nvptx)
  if(_name MATCHES "^nv-" AND _opts MATCHES "^=")
    string(SUBSTRING "${_opts}" 1 -1 _opts) # given in full
  elseif(_name MATCHES "^nv-")
    separate_arguments(_shape UNIX_COMMAND "${_opts}")
    execute_process(COMMAND "${TUNING_TABLE}" --device "NVIDIA H200" --class nvidia_gpu --local-mem 49152
                            --max-work-group 1024 --compute-units 132 ${_shape}
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _defs ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _rc EQUAL 0 OR NOT _defs MATCHES "^-D CLFLASH_DTYPE_")
      string(APPEND _failed "  ${_name}: tuning_table ${_opts} printed \"${_defs}\" (${_rc}): ${_err}\n")
      continue()
    endif()
    set(_opts "-cl-std=CL1.2 ${_defs}")
  endif()
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
  # The work-group sizes: the front end's IR (no optimisation needed) keeps each kernel's
  # reqd_work_group_size as metadata, which the PTX does not carry.
  set(_ll "${WORK}/nvptx_${_name}.ll")
  execute_process(COMMAND "${CLANG}" -x cl -target nvptx64-unknown-nvidiacl -O0 -S -emit-llvm
                          -Xclang -finclude-default-header ${_target_opts} ${_optlist} -o "${_ll}" "${_src}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: clang -emit-llvm failed (${_rc}):\n${_err}\n")
    continue()
  endif()
  file(STRINGS "${_ll}" _irlines REGEX "^define .*spir_kernel|^![0-9]+ = !{i32 [0-9]+, i32 [0-9]+, i32 [0-9]+}$")
  foreach(_line IN LISTS _irlines)
    if(_line MATCHES "^!([0-9]+) = !{i32 ([0-9]+), i32 ([0-9]+), i32 ([0-9]+)}$")
      math(EXPR _md_${CMAKE_MATCH_1} "${CMAKE_MATCH_2} * ${CMAKE_MATCH_3} * ${CMAKE_MATCH_4}")
    endif()
  endforeach()
  foreach(_line IN LISTS _irlines)
    if(_line MATCHES "spir_kernel void @([A-Za-z_0-9]+)\\(")
      set(_kname "${CMAKE_MATCH_1}")
      set(_wg_${_kname} "-")
      if(_line MATCHES "!reqd_work_group_size !([0-9]+)")
        set(_wg_${_kname} "${_md_${CMAKE_MATCH_1}}")
      endif()
    endif()
  endforeach()
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
      ptxas_figures("${_e}" _regs _stores _loads _smem)
      set(_wg "-")
      if(DEFINED _wg_${_kernel})
        set(_wg "${_wg_${_kernel}}")
      endif()
      set(_occupancy "-")
      if(NOT _wg STREQUAL "-")
        nvptx_occupancy(${_regs} ${_smem} ${_wg} ${_arch} _owarps _olimit)
        set(_occupancy "${_owarps} (${_olimit})")
      endif()
      string(APPEND _table "| ${_name} | ${_kernel} | ${_arch} | ${_tiles} | ${_regs} | ${_stores} | ${_loads} | ${_smem} "
                           "| ${_wg} | ${_occupancy} |\n")
      if(_smem GREATER 49152)
        string(APPEND _failed "  ${_name} (${_kernel}) for ${_arch}: ${_smem} bytes of shared memory (above 48 KiB)\n")
      endif()
      if(_spills_fail AND (_stores GREATER 0 OR _loads GREATER 0))
        string(APPEND _failed "  ${_name} (${_kernel}) for ${_arch}: spilled (${_stores} bytes stored, ${_loads} loaded)\n")
      endif()
    endforeach()
  endforeach()
endforeach()
# The kernels built through the sm_90a path (lib/sm90a.c): clang's PTX, given the header NVIDIA's
# OpenCL writes on Hopper and rewritten as the library rewrites it (PTX_SM90A, the tool
# tests/ptx_sm90a_rewrite.c), must assemble for sm_90a, so that a kernel whose "// sm90a: " lines
# are not valid sm_90a PTX fails here rather than on a user's H200.
# The Hopper forward (nv_wgmma_forward.cl) is built with the defines its planner
# (lib/nv_wgmma_forward_plan.c) gives the first kernel it would build on an H200 (tests/tuning_table
# --kernel nv_wgmma_forward), f16 and bf16, head_dim 64, 128 and 256, causal and not, with and without
# lse, with the score features it takes (windows, ALiBi, key lengths, softcap), with a producer
# warpgroup (WG_PRODUCER, the default), its tiles through TMA (WG_TMA, the default; a work-group a
# block, or the persistent kernel, WG_PERSIST, with --tune nv_wgmma.persistent=1) or cp.async
# (--tune nv_wgmma.tma=0), in the loop that waits for every product without a producer
# (--tune nv_wgmma.producer=0) and in the pipelined loop (--tune nv_wgmma.pipeline=1), at head_dim 64 with B 32 as well
# (nv_wgmma.block=32); unlike the other tensor-core kernels its spills fail here too. So does any
# ptxas warning: "Potential Performance Loss: wgmma.mma_async instructions are serialized" means
# ptxas found a register of a group in flight touched, a group it could not follow, or too few
# registers, and put a wait after every product. Its PTX gets the .reqntid that NVIDIA's compiler
# writes for reqd_work_group_size and clang leaves out (ptx_sm90a_rewrite --reqntid), so that ptxas
# fits the registers to the work-group as the driver's does (four warpgroups: 128 a work-item).
set(_wgmma "--kernel nv_wgmma_forward ${_prefill}")
set(_sm90a_cases
  "nv-sm90a-probe|nv_sm90a_probe.cl|=-cl-std=CL1.2 -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D CAUSAL=0 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=0 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=0 -D WITH_LSE=0 -D PAGED=0"
  "nv-wgmma-forward-d64|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64"
  "nv-wgmma-forward-d128-lse|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1"
  "nv-wgmma-forward-d64-bf16-causal|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --with-lse 1"
  "nv-wgmma-forward-d128-bf16-causal|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 128 --causal 1"
  "nv-wgmma-forward-d128-one-warpgroup|nv_mma_common.cl+nv_wgmma_forward.cl|--kernel nv_wgmma_forward --dtype f16 --head-dim 128 --batch 1 --heads-q 32 --heads-kv 8 --seq-q 17 --seq-k 1000 --with-lse 1"
  "nv-wgmma-forward-d64-b32|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --with-lse 1 --tune nv_wgmma.block=32,nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d64-pipe|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d128-pipe-lse|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d64-bf16-causal-pipe|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --with-lse 1 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d128-bf16-causal-pipe|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 128 --causal 1 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d128-wg1-s3|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.warpgroups=1,nv_wgmma.stages=3,nv_wgmma.producer=0"
  "nv-wgmma-forward-d64-wg1-s3|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --tune nv_wgmma.warpgroups=1,nv_wgmma.stages=3"
  "nv-wgmma-forward-d128-wg3|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.warpgroups=3"
  "nv-wgmma-forward-d128-bf16-causal-wg3|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 128 --causal 1 --tune nv_wgmma.warpgroups=3"
  "nv-wgmma-forward-d64-wg4|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --with-lse 1 --tune nv_wgmma.warpgroups=4"
  "nv-wgmma-forward-d64-causal-wg3|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --causal 1 --tune nv_wgmma.warpgroups=3"
  "nv-wgmma-forward-d64-pipe-lse|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --with-lse 1 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d64-bf16-causal-pipe-nolse|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d128-one-warpgroup-pipe|nv_mma_common.cl+nv_wgmma_forward.cl|--kernel nv_wgmma_forward --dtype f16 --head-dim 128 --batch 1 --heads-q 32 --heads-kv 8 --seq-q 17 --seq-k 1000 --with-lse 1 --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d128-features|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --causal 1 --with-lse 1 --features alibi,keylens"
  "nv-wgmma-forward-d128-window|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --causal 1 --features window"
  "nv-wgmma-forward-d64-bf16-window-features|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --with-lse 1 --features window,alibi,keylens"
  "nv-wgmma-forward-d64-bf16-features|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --features softcap,alibi,keylens"
  "nv-wgmma-forward-d64-bf16-features-pipe|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --with-lse 1 --features softcap,alibi,keylens --tune nv_wgmma.pipeline=1"
  "nv-wgmma-forward-d128-waiting|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.producer=0"
  "nv-wgmma-forward-d64-bf16-causal-producer|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --tune nv_wgmma.producer=1"
  "nv-wgmma-forward-d64-waiting|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --with-lse 1 --tune nv_wgmma.producer=0"
  "nv-wgmma-forward-d128-cp-async|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.tma=0"
  "nv-wgmma-forward-d64-bf16-cp-async|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --tune nv_wgmma.tma=0"
  # head_dims padded to 128 or 64 (D_REAL below HEAD_DIM): TMA, cp.async, the waiting loop; 72 to 96
  # in 6 k-steps and 96 columns, 112 in all 128
  "nv-wgmma-forward-d96-padded|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 96 --with-lse 1"
  "nv-wgmma-forward-d40-bf16-causal-padded|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 40 --causal 1"
  "nv-wgmma-forward-d80-cp-async-padded|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 80 --tune nv_wgmma.tma=0"
  "nv-wgmma-forward-d96-waiting-padded|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 96 --with-lse 1 --tune nv_wgmma.producer=0"
  "nv-wgmma-forward-d112-bf16-causal-padded|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 112 --causal 1 --with-lse 1"
  # head_dim 256 (B 16, two warpgroups beside the producer, 232 registers each; one warpgroup for a
  # short prompt) and head_dims padded to it, through TMA
  "nv-wgmma-forward-d256-lse|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 256 --with-lse 1"
  "nv-wgmma-forward-d256-bf16-causal|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 256 --causal 1"
  "nv-wgmma-forward-d256-features|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 256 --causal 1 --with-lse 1 --features window,alibi,keylens"
  "nv-wgmma-forward-d256-one-warpgroup|nv_mma_common.cl+nv_wgmma_forward.cl|--kernel nv_wgmma_forward --dtype f16 --head-dim 256 --batch 1 --heads-q 32 --heads-kv 8 --seq-q 17 --seq-k 1000 --with-lse 1"
  "nv-wgmma-forward-d192-bf16-padded|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 192 --with-lse 1"
  # the producer's tiles through TMA (nv_wgmma.tma=1, the default)
  "nv-wgmma-forward-d128-tma-lse|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.tma=1"
  "nv-wgmma-forward-d128-bf16-causal-tma|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 128 --causal 1 --tune nv_wgmma.tma=1"
  "nv-wgmma-forward-d128-softcap-tma|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --features softcap --tune nv_wgmma.tma=1"
  # a bias, read into registers by the loop with turns (TMA and cp.async), with softcap and a window
  "nv-wgmma-forward-d128-bias|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --features bias"
  "nv-wgmma-forward-d128-bf16-causal-bias-softcap|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 128 --causal 1 --features bias,softcap,keylens"
  "nv-wgmma-forward-d64-bias-window-cp-async|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 64 --causal 1 --features bias,window --tune nv_wgmma.tma=0"
  # the persistent kernel (nv_wgmma.persistent=1: nv_wgmma_forward_persistent)
  "nv-wgmma-forward-d128-persistent|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --with-lse 1 --tune nv_wgmma.persistent=1"
  "nv-wgmma-forward-d64-bf16-causal-persistent|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 64 --causal 1 --features window,softcap,alibi,keylens --tune nv_wgmma.persistent=1"
  "nv-wgmma-forward-d128-bf16-causal-persistent|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype bf16 --head-dim 128 --causal 1 --features softcap --tune nv_wgmma.persistent=1"
  "nv-wgmma-forward-d128-bias-persistent|nv_mma_common.cl+nv_wgmma_forward.cl|${_wgmma} --dtype f16 --head-dim 128 --features bias --tune nv_wgmma.persistent=1"
  # test_sm90a's TMA probe (a tensor map built by the kernel, a box loaded through it): a test file
  "nv-tma-probe|../tests/nv_tma_probe.cl|=-cl-std=CL1.2 -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D PAGED=0 -D CAUSAL=0 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=0 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=0 -D WITH_LSE=0"
)
foreach(_case IN LISTS _sm90a_cases)
  if(NOT PTX_SM90A)
    string(APPEND _failed "  the sm_90a cases need PTX_SM90A (tests/ptx_sm90a_rewrite.c)\n")
    break()
  endif()
  kernel_case_source("${_case}" nvptx)
  if(_opts MATCHES "^=")
    string(SUBSTRING "${_opts}" 1 -1 _opts) # given in full
  else() # tuning_table's arguments, as for the tensor-core cases above
    separate_arguments(_shape UNIX_COMMAND "${_opts}")
    execute_process(COMMAND "${TUNING_TABLE}" --device "NVIDIA H200" --class nvidia_gpu --local-mem 49152
                            --max-work-group 1024 --compute-units 132 ${_shape}
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _defs ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _rc EQUAL 0 OR NOT _defs MATCHES "^-D CLFLASH_DTYPE_")
      string(APPEND _failed "  ${_name}: tuning_table ${_opts} printed \"${_defs}\" (${_rc}): ${_err}\n")
      continue()
    endif()
    set(_opts "-cl-std=CL1.2 ${_defs}")
  endif()
  separate_arguments(_optlist UNIX_COMMAND "${_opts}")
  set(_ptx "${WORK}/nvptx_${_name}.ptx")
  execute_process(COMMAND "${CLANG}" -x cl -target nvptx64-unknown-nvidiacl -O2 -S -Xclang -finclude-default-header
                          -Xclang -mlink-builtin-bitcode -Xclang "${LIBCLC}" -Wno-linker-warnings
                          -Xclang -target-cpu -Xclang sm_80 ${_optlist} -o "${_ptx}" "${_src}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: clang failed (${_rc}):\n${_err}\n")
    continue()
  endif()
  set(_reqntid)
  if(_opts MATCHES "-D WARPS=([0-9]+)")
    math(EXPR _threads "32 * ${CMAKE_MATCH_1}")
    set(_reqntid --reqntid ${_threads}) # as NVIDIA's compiler writes reqd_work_group_size
  endif()
  execute_process(COMMAND "${PTX_SM90A}" --as-nvidia ${_reqntid} "${_ptx}" "${WORK}/nvptx_${_name}_sm_90a.ptx"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _lines ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: the sm_90a rewrite failed (${_rc}): ${_err}\n")
    continue()
  endif()
  execute_process(COMMAND "${PTXAS}" -arch=sm_90a -v "${WORK}/nvptx_${_name}_sm_90a.ptx" -o "${WORK}/nvptx_${_name}.cubin"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  string(APPEND _out "${_err}")
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name} for sm_90a: ptxas failed (${_rc}):\n${_out}\n")
    continue()
  endif()
  ptxas_figures("${_out}" _regs _stores _loads _smem)
  list(GET _files -1 _kernel)
  get_filename_component(_kernel "${_kernel}" NAME_WE)
  set(_tiles "-")
  set(_wg "-")
  set(_occupancy "-")
  if(_opts MATCHES "-D BLOCK=([0-9]+) -D WARPS=([0-9]+) -D WARPGROUPS=([0-9]+)")
    set(_tiles "B ${CMAKE_MATCH_1}, warpgroups ${CMAKE_MATCH_3}")
    math(EXPR _wg "32 * ${CMAKE_MATCH_2}") # its reqd_work_group_size
    if(_opts MATCHES "-D WG_PIPE=1")
      string(APPEND _tiles ", pipelined")
    elseif(_opts MATCHES "-D WG_PRODUCER=1")
      string(APPEND _tiles ", and a producer")
    elseif(_opts MATCHES "-D WG_PIPE=0")
      string(APPEND _tiles ", waits")
    endif()
    nvptx_occupancy(${_regs} ${_smem} ${_wg} sm_90 _owarps _olimit) # sm_90a: sm_90's limits
    set(_occupancy "${_owarps} (${_olimit})")
  endif()
  string(APPEND _table "| ${_name} | ${_kernel} (${_lines} sm_90a) | sm_90a | ${_tiles} | ${_regs} | ${_stores} | ${_loads} | ${_smem} "
                       "| ${_wg} | ${_occupancy} |\n")
  if(_smem GREATER 49152)
    string(APPEND _failed "  ${_name} for sm_90a: ${_smem} bytes of shared memory (above 48 KiB)\n")
  endif()
  if(_stores GREATER 0 OR _loads GREATER 0)
    string(APPEND _failed "  ${_name} for sm_90a: spilled (${_stores} bytes stored, ${_loads} loaded)\n")
  endif()
  # ptxas reports a serialised wgmma pipeline, and a wait it inserted, as "info" lines (C7514,
  # C7517: "Potential Performance Loss: wgmma.mma_async instructions are serialized due to ...",
  # "warpgroup.wait is injected ..."), not as warnings: they fail here all the same.
  if(_out MATCHES "[Ww]arning|Potential Performance Loss|are serialized|is injected")
    string(APPEND _failed "  ${_name} for sm_90a: ptxas warned:\n${_out}\n")
  endif()
endforeach()
message("| case | kernel | target | tiles | registers | spill stores (bytes) | spill loads (bytes) | shared memory (bytes) "
        "| work-group | warps/SM (limited by) |\n|---|---|---|---|---|---|---|---|---|---|\n${_table}")
if(_failed)
  message(FATAL_ERROR "kernels through NVPTX:\n${_failed}")
endif()
