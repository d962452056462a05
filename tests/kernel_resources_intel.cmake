# kernel_resources_intel.cmake - builds the GPU paths of the portable kernels for Intel GPUs with
# Intel's offline compiler (ocloc, the compiler of Intel's GPU runtime) and prints, per kernel and
# target, what the build reports: GRF count and mode, SIMD width, the threads per EU that gives,
# spill and per-thread scratch, and shared local memory (SLM). It fails on a build error, on a
# spill not listed in _known_spills below, and on a kernel whose SLM exceeds what the target gives
# a work-group. clflash cannot run Intel GPUs here; this is how a change that would stop a kernel
# building, make it spill or overflow local memory on them is seen before a user does. The configurations are kernel_define_sets.cmake's,
# the same as the AMD matrix's (kernel_resources.cmake), with the planned parameters for each
# target's local memory; docs/portability.md keeps the table this prints.
#
# Where the figures come from: ocloc is asked for a zebin (--format zebin), whose .ze_info section
# is YAML holding each kernel's execution environment (grf_count, simd_size, slm_size) and its
# per-thread memory buffers (scratch: spills and private arrays, bytes per hardware thread); CMake's
# file(STRINGS) reads those lines out of the ELF file, so nothing beyond ocloc is needed. The spill
# is ocloc's own warning ("compiled SIMD8 allocated 128 regs and spilled around 19"), printed only
# by kernels that spill, so the others show 0.
#
#   cmake -DOCLOC=<ocloc, or empty> -DOCLOC_LIBS=<folder of its libraries, or empty> -DCL_DIR=<cl/>
#         -DWORK=<scratch folder> -DTUNING_TABLE=<tests/tuning_table> -P kernel_resources_intel.cmake
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
# The local memory a work-group may use (CL_DEVICE_LOCAL_MEM_SIZE), in bytes: 64 KiB on Xe-LP and
# Xe-HPG, 128 KiB on Xe-HPC. These are the SLM sizes Intel's compute runtime gives the three in its
# hardware tables (intel/compute-runtime, shared/source/gen12lp/hw_info_tgllp.cpp and
# xe_hpg_core/hw_info_dg2.cpp: 64; xe_hpc_core/hw_info_pvc.cpp: maxProgrammableSlmSize 128, in KB);
# Intel's GPU optimization guide quotes larger SLM per Xe-core or subslice, which is shared by the
# work-groups there, not what one work-group gets. The planned parameters are those for this much
# local memory, and a kernel above it fails.
set(_slm_limit_tgllp 65536)
set(_slm_limit_acm-g10 65536)
set(_slm_limit_pvc 131072)
# "case|target": spills known and accepted; none now. Intel's compiler (ocloc 22.43) gives a
# kernel 128 registers. Every kernel is built with the parameters the library plans for each target
# (the placeholders of kernel_define_sets.cmake through tests/tuning_table, the built-in rules
# included: with them the register-tiled forward at d = 128 with variable-length batches spilled
# 25 on Xe-LP and 24 on Xe-HPG, and the portable backward at d = 128 with every feature 1 on Xe-LP,
# until both kernels kept fewer values live across their key loops). Anything that spills fails.
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
    kernel_tuned_options("${_opts}" "${_device_${_dev}}" intel_gpu _target_opts --local-mem ${_slm_limit_${_dev}})
    kernel_tiles_label("${_target_opts}" _tiles)
    set(_out "${WORK}/intel_${_name}_${_dev}")
    set(_bin "${_out}/${_name}")
    file(REMOVE_RECURSE "${_out}")
    file(MAKE_DIRECTORY "${_out}")
    execute_process(COMMAND ${CMAKE_COMMAND} -E env ${_env} "${OCLOC}" compile -file "${_src}" -device ${_dev}
                            --format zebin -out_dir "${_out}" -output "${_name}" -output_no_suffix
                            -options "${_target_opts}"
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _err)
    string(APPEND _log "${_err}")
    if(NOT _rc EQUAL 0 OR NOT _log MATCHES "Build succeeded" OR NOT EXISTS "${_bin}")
      string(APPEND _failed "  ${_name} for ${_dev}: ocloc failed (${_rc}):\n${_log}\n")
      continue()
    endif()
    # The .ze_info lines of each kernel, up to the kernels' argument descriptions (kernels_misc_info),
    # into _zi_<kernel>_<field>. A field ocloc leaves out is zero (slm_size without local memory).
    file(STRINGS "${_bin}" _zeinfo REGEX
         "^ *(- name: |grf_count: |simd_size: |slm_size: |per_thread_memory_buffers:|size: |kernels_misc_info:)")
    set(_zk "")
    set(_in_buffers FALSE)
    set(_zkernels "")
    foreach(_line IN LISTS _zeinfo)
      if(_line MATCHES "kernels_misc_info:")
        break()
      elseif(_line MATCHES "^ *- name: +([A-Za-z_0-9]+)")
        set(_zk "${CMAKE_MATCH_1}")
        list(APPEND _zkernels "${_zk}")
        set(_in_buffers FALSE)
        foreach(_f grf_count simd_size slm_size scratch)
          set(_zi_${_zk}_${_f} 0)
        endforeach()
      elseif(_zk AND _line MATCHES "^ *(grf_count|simd_size|slm_size): +([0-9]+)")
        set(_zi_${_zk}_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
      elseif(_zk AND _line MATCHES "per_thread_memory_buffers:")
        set(_in_buffers TRUE)
      elseif(_zk AND _in_buffers AND _line MATCHES "^ *size: +([0-9]+)")
        math(EXPR _zi_${_zk}_scratch "${_zi_${_zk}_scratch} + ${CMAKE_MATCH_1}")
      endif()
    endforeach()
    # The kernels this source defines; each must have its .ze_info entry.
    string(REGEX MATCHALL "__kernel[^;{]*void[ \n]+[A-Za-z_0-9]+[ \n]*\\(" _decls "${_body}")
    set(_kernels "")
    foreach(_d IN LISTS _decls)
      if(_d MATCHES "void[ \n]+([A-Za-z_0-9]+)[ \n]*\\($")
        list(APPEND _kernels "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    foreach(_k IN LISTS _kernels)
      if(NOT _k IN_LIST _zkernels)
        string(APPEND _failed "  ${_name} (${_k}) for ${_dev}: no .ze_info entry in ${_bin}\n")
        continue()
      endif()
      set(_grf "${_zi_${_k}_grf_count}")
      set(_mode "default")
      if(_grf GREATER 128)
        set(_mode "large")
      endif()
      set(_spill 0)
      if(_log MATCHES "kernel ${_k} +compiled SIMD[0-9]+ allocated [0-9]+ regs and spilled around ([0-9]+)")
        set(_spill "${CMAKE_MATCH_1}")
      endif()
      set(_slm "${_zi_${_k}_slm_size}")
      # occupancy: hardware threads per EU, 7 on Xe-LP and 8 on Xe-HPG and Xe-HPC with 128 GRF,
      # half that in the large (256) GRF mode (Intel's oneAPI GPU optimization guide, "Small
      # Register Mode vs. Large Register Mode"; its GPU occupancy calculator's Threads_Per_EU)
      set(_threads 8)
      if(_dev STREQUAL "tgllp")
        set(_threads 7)
      endif()
      if(_grf GREATER 128)
        math(EXPR _threads "${_threads} / 2")
      endif()
      string(APPEND _table "| ${_name} | ${_k} | ${_dev} | ${_tiles} | ${_grf} (${_mode}) | ${_zi_${_k}_simd_size} "
                           "| ${_threads} | ${_spill} | ${_zi_${_k}_scratch} | ${_slm} |\n")
      if(_spill GREATER 0 AND NOT "${_name}|${_dev}" IN_LIST _known_spills)
        string(APPEND _failed "  ${_name} (${_k}) for ${_dev}: spilled around ${_spill} (SIMD${_zi_${_k}_simd_size}, ${_grf} GRF)\n")
      endif()
      if(_slm GREATER ${_slm_limit_${_dev}})
        string(APPEND _failed "  ${_name} (${_k}) for ${_dev}: ${_slm} bytes of SLM, above the ${_slm_limit_${_dev}} a work-group gets\n")
      endif()
    endforeach()
  endforeach()
endforeach()
message("| case | kernel | target | tiles | GRF (mode) | SIMD | threads/EU | spilled (ocloc's estimate) | scratch bytes/thread | SLM bytes |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n${_table}")
if(_failed)
  message(FATAL_ERROR "kernel resources on Intel GPUs:\n${_failed}")
endif()
