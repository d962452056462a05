# kernel_spirv.cmake - translates every configuration of the portable kernels
# (kernel_define_sets.cmake, the same as the AMD and Intel GPU matrices) to SPIR-V with clang
# (target spir64) and llvm-spirv, and validates each module with spirv-val; fails on any error.
# SPIR-V is what an OpenCL implementation without an OpenCL C compiler of its own (clCreateProgramWithIL)
# and offline toolchains take, so a kernel change that stops translating is seen here first.
#
# The modules are built at -O0: llvm-spirv 15 cannot translate the `freeze` instruction that
# LLVM 15's optimizer inserts at -O1 and above ("Can't translate llvm instruction: freeze");
# the consumer of SPIR-V optimizes it anyway.
#
#   cmake -DCLANG=<clang 15 or later, or empty> -DLLVM_SPIRV=<llvm-spirv of the same LLVM, or empty>
#         -DSPIRV_VAL=<spirv-val, or empty> -DCL_DIR=<cl/> -DWORK=<scratch folder> -P kernel_spirv.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT CLANG OR NOT LLVM_SPIRV OR NOT SPIRV_VAL)
  message("SKIPPED: clang 15 or later, llvm-spirv and spirv-val are needed (Debian: clang-15 llvm-spirv-15 spirv-tools)")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/kernel_define_sets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/kernel_tuned_options.cmake)
set(_failed "")
set(_table "")
foreach(_case IN LISTS _cases)
  kernel_case_source("${_case}" spirv)
  # SPIR-V is for any device: the planner's defaults, which no built-in rule changes for other GPUs
  kernel_tuned_options("${_opts}" "a SPIR-V device" other_gpu _opts)
  set(_bc "${WORK}/spirv_${_name}.bc")
  set(_spv "${WORK}/spirv_${_name}.spv")
  file(REMOVE "${_bc}" "${_spv}")
  separate_arguments(_optlist UNIX_COMMAND "${_opts}")
  execute_process(COMMAND "${CLANG}" -x cl -target spir64 -O0 -emit-llvm -c -Xclang -finclude-default-header
                          ${_optlist} -o "${_bc}" "${_src}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: clang failed (${_rc}):\n${_err}\n")
    continue()
  endif()
  execute_process(COMMAND "${LLVM_SPIRV}" "${_bc}" -o "${_spv}" RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_name}: llvm-spirv failed (${_rc}):\n${_err}\n")
    continue()
  endif()
  execute_process(COMMAND "${SPIRV_VAL}" "${_spv}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  file(SIZE "${_spv}" _bytes)
  if(_rc EQUAL 0)
    string(APPEND _table "| ${_name} | ${_bytes} | valid |\n")
  else()
    string(APPEND _table "| ${_name} | ${_bytes} | invalid |\n")
    string(APPEND _failed "  ${_name}: spirv-val rejected the module:\n${_out}${_err}\n")
  endif()
endforeach()
message("| case | SPIR-V bytes | spirv-val |\n|---|---|---|\n${_table}")
if(_failed)
  message(FATAL_ERROR "SPIR-V:\n${_failed}")
endif()
