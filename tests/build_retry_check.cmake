# build_retry_check.cmake - the library's retry of kernel builds that fail as PoCL's kernel cache
# makes them fail (lib/program_cache.c), through tests/build_fail_preload.c and a tiny
# clflash-bench run on a PoCL device (the test sets CLFLASH_DEVICE=pocl):
#  - the first two kernel builds fail: the run must succeed, the preload having failed 2 builds
#    (the first program built on its third try);
#  - every kernel build fails: the run must fail, naming the build failure, after three tries of
#    each build it asked for (no endless retry).
# A CTest PASS_REGULAR_EXPRESSION could check only the output and would ignore the exit code,
# hence a script.
#
#   cmake -DBENCH=<clflash-bench> -DPRELOAD=<libbuild_fail_preload.so> -DENV=<env> -P build_retry_check.cmake
cmake_minimum_required(VERSION 3.19)

foreach(_v BENCH PRELOAD ENV)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "build_retry_check.cmake: -D${_v}=... is required")
  endif()
endforeach()
set(_args --algo flash --seq 7 --head-dim 5 --heads 1 --warmup 0 --min-time 0 --no-check)
set(_failed "")
foreach(_mode 2 all)
  execute_process(COMMAND ${ENV} LD_PRELOAD=${PRELOAD} BUILD_FAIL_COUNT=${_mode} ${BENCH} ${_args}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message(STATUS "BUILD_FAIL_COUNT=${_mode}: exit ${_rc}\n${_out}\nstderr:\n${_err}")
  if(_mode STREQUAL "2")
    if(NOT _rc STREQUAL "0")
      string(APPEND _failed "  two failed builds: clflash-bench exited with ${_rc} (the builds were not retried)\n")
    endif()
    if(NOT _err MATCHES "build_fail_preload: failed 2 of 3 builds")
      string(APPEND _failed "  two failed builds: the preload did not report 2 failed builds of 3\n")
    endif()
  else()
    if(_rc STREQUAL "0")
      string(APPEND _failed "  every build failing: clflash-bench succeeded\n")
    endif()
    if(NOT "${_out}${_err}" MATCHES "BUILD_FAILED|failed to build|build failed|building [a-z_]+\\.cl failed")
      string(APPEND _failed "  every build failing: no build failure named\n")
    endif()
    # three tries per build the library asks for; clflash-bench may ask more than once (the plan,
    # then the call), so a multiple of 3, and few
    if(NOT _err MATCHES "build_fail_preload: failed ([0-9]+) of ")
      string(APPEND _failed "  every build failing: the preload reported nothing\n")
    else()
      math(EXPR _rest "${CMAKE_MATCH_1} % 3")
      if(NOT _rest EQUAL 0 OR CMAKE_MATCH_1 LESS 3 OR CMAKE_MATCH_1 GREATER 12)
        string(APPEND _failed "  every build failing: ${CMAKE_MATCH_1} tries, not three per build asked for\n")
      endif()
    endif()
  endif()
endforeach()
if(_failed)
  message(FATAL_ERROR "build_retry_check failed:\n${_failed}")
endif()
