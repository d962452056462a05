# kernel_nvptx.cmake - builds every configuration of the portable kernels (kernel_define_sets.cmake,
# the same as the AMD, Intel and SPIR-V matrices) for NVIDIA GPUs through clang's NVPTX back end
# with libclc's builtins, assembles the PTX with ptxas for Ampere (sm_80) and Hopper (sm_90), and
# prints registers, spills and shared memory per kernel; fails on a build or assembly error (an
# undefined helper, more than the 48 KiB of static local memory a work-group gets) and on a spill.
#
# NVIDIA's OpenCL driver compiles the kernels with a compiler of its own, so these figures are not
# the driver's; what this catches is what any LLVM-based NVPTX toolchain would refuse (a helper
# that is `inline` without `static` stayed an undefined call here until 0.5.0). The tensor-core
# kernels (nv_mma_*.cl) are left to the driver, which alone builds them, and to the H200 runs.
# The register-tiled forward is built with the tiles the library plans for an NVIDIA GPU with
# 48 KiB of local memory (@REGTILE@, kernel_tuned_options.cmake).
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
set(_failed "")
set(_table "")
foreach(_case IN LISTS _cases)
  kernel_case_source("${_case}" nvptx)
  # as the library would plan them on an NVIDIA GPU reporting 48 KiB of local memory
  kernel_tuned_options("${_opts}" "NVIDIA H100" nvidia_gpu _opts --local-mem 49152 --max-work-group 1024)
  kernel_tiles_label("${_opts}" _tiles)
  separate_arguments(_optlist UNIX_COMMAND "${_opts}")
  set(_ptx "${WORK}/nvptx_${_name}.ptx")
  execute_process(COMMAND "${CLANG}" -x cl -target nvptx64-unknown-nvidiacl -O2 -S -Xclang -finclude-default-header
                          -Xclang -mlink-builtin-bitcode -Xclang "${LIBCLC}" -Wno-linker-warnings ${_optlist}
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
      if(_stores GREATER 0 OR _loads GREATER 0)
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
