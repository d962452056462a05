# run_oclgrind.cmake - runs the Oclgrind driver under Oclgrind and fails on any Oclgrind report,
# not only on a nonzero exit (Oclgrind reports do not change the program's exit status).
#
#   cmake -DOCLGRIND=<oclgrind or empty> -DDRIVER=<oclgrind_driver> -P run_oclgrind.cmake
#
# Two passes, because of two limitations of Oclgrind 21.10 (Debian 12's):
#  1. --data-races over all cases in one process, on the kernels as they are normally built
#     (optimised).
#  2. --data-races --uninitialized with -cl-opt-disable, one process per case. The Uninitialized
#     plugin of 21.10 aborts the kernel ("OCLGRIND FATAL ERROR ... Unsupported instruction:
#     freeze") on the freeze instructions LLVM's optimiser emits; upstream fixed that only in
#     Oclgrind PR #220. And within one process it reports reads of a buffer that reuses a released
#     buffer's slot as uninitialised although the kernel before it wrote every element (seen with
#     the naive path's temporary score matrix: the results are right, the first call in a process
#     is clean, and any unrelated allocation between two calls makes the report go away), so each
#     case runs in a fresh process.
#
# The oclgrind command preloads its own OpenCL runtime, so the driver sees only the Oclgrind
# device; CLFLASH_DEVICE is unset for the run so that a GPU selection in the caller's environment
# cannot make the driver look for a device that is not there.
cmake_minimum_required(VERSION 3.16)

# A path that does not exist (a stale cache entry, -DCLFLASH_OCLGRIND=/nonexistent) counts as missing.
if(NOT OCLGRIND OR NOT EXISTS "${OCLGRIND}")
  message("SKIPPED: oclgrind not found ('${OCLGRIND}'; install it to run the kernels under race detection)")
  return()
endif()
if(NOT EXISTS "${DRIVER}")
  message(FATAL_ERROR "driver not found at '${DRIVER}'")
endif()

execute_process(COMMAND "${DRIVER}" --count RESULT_VARIABLE _rc OUTPUT_VARIABLE _count
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0 OR NOT _count MATCHES "^[0-9]+$")
  message(FATAL_ERROR "'${DRIVER} --count' failed: ${_rc} ${_count}")
endif()

set(_problems "")

# Runs the driver under oclgrind with the given options; appends any report to _problems.
function(oclgrind_pass label)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env --unset=CLFLASH_DEVICE "${OCLGRIND}" ${ARGN}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message("==== ${label}\n${_out}${_err}")
  # Matched on the whole text: splitting output into a CMake list would mangle brackets.
  string(TOLOWER "${_out}\n${_err}" _all)
  string(REGEX MATCHALL
    "[^\n]*(data race|uninitiali[sz]ed|invalid read|invalid write|error|out of bounds|fatal|unsupported)[^\n]*"
    _matches "${_all}")
  set(_found "")
  if(_matches)
    string(REPLACE ";" "\n    " _found "    ${_matches}\n")
  endif()
  if(NOT _rc EQUAL 0)
    string(APPEND _found "    the driver exited with '${_rc}'\n")
  endif()
  if(NOT _out MATCHES "(^|\n)0 of [0-9]+ cases failed")
    string(APPEND _found "    the driver did not report all its cases as matching\n")
  endif()
  if(_found)
    set(_problems "${_problems}  ${label}:\n${_found}" PARENT_SCOPE)
  endif()
endfunction()

oclgrind_pass("pass 1: --data-races, all cases" --data-races "${DRIVER}")

math(EXPR _last "${_count} - 1")
foreach(_i RANGE 0 ${_last})
  oclgrind_pass("pass 2: --data-races --uninitialized -cl-opt-disable, case ${_i}"
    --data-races --uninitialized --build-options -cl-opt-disable "${DRIVER}" ${_i})
endforeach()

if(_problems)
  message(FATAL_ERROR "oclgrind reported problems:\n${_problems}")
endif()
message(STATUS "oclgrind: no reports in ${_count} cases, all match the reference")
