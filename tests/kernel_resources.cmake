# kernel_resources.cmake - builds the GPU paths of the portable kernels for AMD GPUs with clang's
# amdgcn back end and libclc's builtins (so that register counts mean what they would on the
# device), prints each kernel's registers, scratch (spills), local memory and occupancy per target,
# and fails on a build error, on more than 64 KiB of local memory, or on a VGPR spill that is not
# listed in _known_spills below. Scratch without spills (private arrays the compiler keeps in
# memory) is printed, not failed. clflash cannot run AMD GPUs here; this is how a change
# that would make a kernel spill or overflow on them is seen before a user does.
#
# The configurations are kernel_define_sets.cmake's (shared with the Intel GPU matrix,
# kernel_resources_intel.cmake). docs/portability.md keeps the table this prints.
#
#   cmake -DCLANG=<clang 15 or later, or empty> -DLIBCLC=<amdgcn--amdhsa.bc or empty> -DCL_DIR=<cl/>
#         -DWORK=<scratch folder> -P kernel_resources.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT CLANG OR NOT LIBCLC OR NOT EXISTS "${LIBCLC}")
  message("SKIPPED: clang 15 or later and libclc's amdgcn--amdhsa.bc are needed (Debian: clang-15 libclc-15)")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/kernel_define_sets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/kernel_tuned_options.cmake)
# GCN 5 (gfx906), CDNA 2 (gfx90a), CDNA 3 (gfx940), RDNA 2 (gfx1030), RDNA 3 (gfx1100).
set(_targets gfx906 gfx90a gfx940 gfx1030 gfx1100)
# "case|target": VGPR spills known and accepted; none now. Every kernel is built with the
# parameters the library plans for each target (the placeholders of kernel_define_sets.cmake through
# tests/tuning_table, the built-in rules included: on gfx1100 the portable backward at d = 256 in
# f32 spilled 18 VGPRs until its rule portable_backward.amd_waves=2).
# Anything that spills fails.
set(_known_spills "")

set(_failed "")
set(_table "")
foreach(_case IN LISTS _cases)
  kernel_case_source("${_case}" resources)
  foreach(_gfx IN LISTS _targets)
    # an AMD device's OpenCL name is its gfx target
    kernel_tuned_options("${_opts}" "${_gfx}" amd_gpu _target_opts)
    kernel_tiles_label("${_target_opts}" _tiles)
    separate_arguments(_optlist UNIX_COMMAND "${_target_opts}")
    execute_process(COMMAND "${CLANG}" -x cl -target amdgcn-amd-amdhsa -mcpu=${_gfx} -nogpulib -O2 -c
                            -Xclang -finclude-default-header -Xclang -mlink-builtin-bitcode -Xclang "${LIBCLC}"
                            -Wno-linker-warnings -Rpass-analysis=kernel-resource-usage ${_optlist}
                            -o "${WORK}/resources_${_name}_${_gfx}.o" "${_src}"
      RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_QUIET)
    if(NOT _rc EQUAL 0)
      string(APPEND _failed "  ${_name} for ${_gfx}: clang failed (${_rc}):\n${_err}\n")
      continue()
    endif()
    # One block of remarks per function that was not inlined: the kernels (every helper is).
    string(REGEX MATCHALL "remark: +[A-Za-z ]+(\\[[A-Za-z/ ]+\\])?: [^ \n]+" _remarks "${_err}")
    set(_kernel "")
    foreach(_r IN LISTS _remarks)
      if(_r MATCHES "Function Name: (.+)$")
        set(_kernel "${CMAKE_MATCH_1}")
        foreach(_k vgpr agpr sgpr scratch occ vspill lds)
          set(_${_k} "-")
        endforeach()
      elseif(_r MATCHES " VGPRs: ([0-9]+)")
        set(_vgpr "${CMAKE_MATCH_1}")
      elseif(_r MATCHES " AGPRs: ([0-9]+)")
        set(_agpr "${CMAKE_MATCH_1}")
      elseif(_r MATCHES " SGPRs: ([0-9]+)")
        set(_sgpr "${CMAKE_MATCH_1}")
      elseif(_r MATCHES "ScratchSize \\[bytes/lane\\]: ([0-9]+)")
        set(_scratch "${CMAKE_MATCH_1}")
      elseif(_r MATCHES "Occupancy \\[waves/SIMD\\]: ([0-9]+)")
        set(_occ "${CMAKE_MATCH_1}")
      elseif(_r MATCHES "VGPRs Spill: ([0-9]+)")
        set(_vspill "${CMAKE_MATCH_1}")
      elseif(_r MATCHES "LDS Size \\[bytes/block\\]: ([0-9]+)")
        set(_lds "${CMAKE_MATCH_1}")
        # the last remark of a function's block: its row is complete
        string(APPEND _table "| ${_name} | ${_kernel} | ${_gfx} | ${_tiles} | ${_vgpr} | ${_agpr} | ${_sgpr} | ${_vspill} | ${_scratch} | ${_lds} | ${_occ} |\n")
        if(_lds GREATER 65536)
          string(APPEND _failed "  ${_name} (${_kernel}) for ${_gfx}: ${_lds} bytes of local memory (above 64 KiB)\n")
        endif()
        if(_vspill GREATER 0)
          set(_known "")
          foreach(_k IN LISTS _known_spills)
            if(_k STREQUAL "${_name}|${_gfx}")
              set(_known "${_k}")
            endif()
          endforeach()
          if(NOT _known)
            string(APPEND _failed "  ${_name} (${_kernel}) for ${_gfx}: ${_vspill} VGPRs spilled, ${_scratch} bytes of scratch per lane\n")
          endif()
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()
message("| case | kernel | target | tiles | VGPRs | AGPRs | SGPRs | VGPRs spilled | scratch bytes/lane | LDS bytes | waves/SIMD |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n${_table}")
if(_failed)
  message(FATAL_ERROR "kernel resources:\n${_failed}")
endif()
