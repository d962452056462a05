# kernel_resources_intel.cmake - builds the GPU paths of the portable kernels for Intel GPUs with
# Intel's offline compiler (ocloc, the compiler of Intel's GPU OpenCL runtime), prints each kernel's
# SIMD width, registers and spill size per target as ocloc reports them, and fails on a build error
# or on a spill that is not listed in _known_spills below. clflash cannot run Intel GPUs here; this
# is how a change that would stop a kernel building or make it spill on them is seen before a user
# does. The configurations are kernel_define_sets.cmake's, the same as the AMD matrix's
# (kernel_resources.cmake); docs/portability.md keeps the table this prints.
#
# ocloc reports registers and spills only for a kernel that spills ("compiled SIMD8 allocated 128
# regs and spilled around 19"); a kernel without that warning is printed with its spill as 0.
#
#   cmake -DOCLOC=<ocloc, or empty> -DOCLOC_LIBS=<folder of its libraries, or empty> -DCL_DIR=<cl/>
#         -DWORK=<scratch folder> -P kernel_resources_intel.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT OCLOC OR NOT EXISTS "${OCLOC}")
  message("SKIPPED: Intel's ocloc is needed (.ci/install-deps unpacks Debian's intel-opencl-icd for it)")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/kernel_define_sets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/kernel_tuned_options.cmake)
# Xe-LP (Tiger Lake, tgllp), Xe-HPG (Arc A770, acm-g10), Xe-HPC (Data Center GPU Max, pvc), each
# with the OpenCL device name a GPU of the family reports (the built-in tuning rules match names).
set(_targets tgllp acm-g10 pvc)
set(_device_tgllp "Intel(R) Iris(R) Xe Graphics")
set(_device_acm-g10 "Intel(R) Arc(TM) A770 Graphics")
set(_device_pvc "Intel(R) Data Center GPU Max 1550")
# "case|target": spills known and accepted; none today. Intel's compiler (ocloc 22.43) gives a
# kernel 128 registers. Every kernel is built with the parameters the library plans for each target
# (@REGTILE@ and @BACKWARD@ through tests/tuning_table, the built-in rules included; the others at
# their planners' fixed shapes). Anything that spills fails.
set(_known_spills "")

set(_env "")
if(OCLOC_LIBS)
  set(_env "LD_LIBRARY_PATH=${OCLOC_LIBS}")
endif()
set(_failed "")
set(_table "")
foreach(_case IN LISTS _cases)
  kernel_case_source("${_case}" intel)
  foreach(_dev IN LISTS _targets)
    kernel_tuned_options("${_opts}" "${_device_${_dev}}" intel_gpu _target_opts)
    kernel_tiles_label("${_target_opts}" _tiles)
    set(_out "${WORK}/intel_${_name}_${_dev}")
    file(MAKE_DIRECTORY "${_out}")
    execute_process(COMMAND ${CMAKE_COMMAND} -E env ${_env} "${OCLOC}" compile -file "${_src}" -device ${_dev}
                            -out_dir "${_out}" -options "${_target_opts}"
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _err)
    string(APPEND _log "${_err}")
    if(NOT _rc EQUAL 0 OR NOT _log MATCHES "Build succeeded")
      string(APPEND _failed "  ${_name} for ${_dev}: ocloc failed (${_rc}):\n${_log}\n")
      continue()
    endif()
    # The kernels this source defines, and the spill warnings of those that spill.
    string(REGEX MATCHALL "__kernel[^;{]*void[ \n]+[A-Za-z_0-9]+[ \n]*\\(" _decls "${_body}")
    set(_kernels "")
    foreach(_d IN LISTS _decls)
      if(_d MATCHES "void[ \n]+([A-Za-z_0-9]+)[ \n]*\\($")
        list(APPEND _kernels "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    foreach(_k IN LISTS _kernels)
      set(_simd "-")
      set(_regs "-")
      set(_spill 0)
      if(_log MATCHES "kernel ${_k} +compiled SIMD([0-9]+) allocated ([0-9]+) regs and spilled around ([0-9]+)")
        set(_simd "${CMAKE_MATCH_1}")
        set(_regs "${CMAKE_MATCH_2}")
        set(_spill "${CMAKE_MATCH_3}")
      endif()
      string(APPEND _table "| ${_name} | ${_k} | ${_dev} | ${_tiles} | ${_simd} | ${_regs} | ${_spill} |\n")
      if(_spill GREATER 0 AND NOT "${_name}|${_dev}" IN_LIST _known_spills)
        string(APPEND _failed "  ${_name} (${_k}) for ${_dev}: spilled around ${_spill} (SIMD${_simd}, ${_regs} registers)\n")
      endif()
    endforeach()
  endforeach()
endforeach()
message("| case | kernel | target | tiles | SIMD | registers | spilled (ocloc's estimate) |\n"
        "|---|---|---|---|---|---|---|\n${_table}")
if(_failed)
  message(FATAL_ERROR "kernel resources on Intel GPUs:\n${_failed}")
endif()
