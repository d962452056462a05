# ring_staging_check.cmake - runs test_ring under mpiexec with a preload library on every rank
# (tests/staging_refuse_preload.c, with -DPRELOAD=window tests/window_refuse_preload.c, with
# -DPRELOAD=delay tests/transfer_delay_preload.c) and passes only if both hold: test_ring exits
# with 0 and prints no "FAIL " line, and each of the RANKS ranks reports its count: every one
# refused at least one CL_MEM_ALLOC_HOST_PTR buffer (so the ring really ran on its plain-memory
# staging); for the window, some rank refused to map one (so the ring's window setup failed on one
# rank alone and every rank carried on without it); for the delay, every one held back at least
# one transfer.
# A CTest PASS_REGULAR_EXPRESSION could check only the output and would ignore the exit code,
# hence a script.
#
#   cmake -DCOMMAND="<mpiexec>|<flag>|...|<env>|LD_PRELOAD=<lib>|<test_ring>" -DRANKS=<n>
#         [-DPRELOAD=staging|window|delay] -P ring_staging_check.cmake
cmake_minimum_required(VERSION 3.19)

foreach(_v COMMAND RANKS)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "ring_staging_check.cmake: -D${_v}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" _command "${COMMAND}")
execute_process(COMMAND ${_command} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "${_command}\n${_out}\nstderr:\n${_err}")

set(_failed "")
if(NOT _rc STREQUAL "0")
  string(APPEND _failed "  test_ring exited with ${_rc}\n")
endif()
if(_out MATCHES "FAIL " OR _err MATCHES "FAIL ")
  string(APPEND _failed "  test_ring printed a FAIL line\n")
endif()
# One line per process that had the library loaded and made the calls it watches: the ranks, not
# mpiexec (the command sets LD_PRELOAD for the ranks only) nor the linker PoCL runs (it makes no
# such call). So there must be exactly RANKS of them; for the staging none with 0, for the window
# at least one above 0.
if(NOT DEFINED PRELOAD OR PRELOAD STREQUAL "staging")
  set(_prefix "staging_refuse_preload: refused")
  set(_unit buffers)
  set(_every 1)
elseif(PRELOAD STREQUAL "delay")
  set(_prefix "transfer_delay_preload: delayed")
  set(_unit transfers)
  set(_every 1)
else()
  set(_prefix "window_refuse_preload: refused")
  set(_unit queries)
  set(_every 0)
endif()
string(REGEX MATCHALL "${_prefix} [0-9]+ ${_unit}" _lines "${_err}${_out}")
list(LENGTH _lines _n)
if(NOT _n EQUAL RANKS)
  string(APPEND _failed "  ${_n} ranks reported their counts, want ${RANKS} (was the library preloaded on every rank?)\n")
endif()
set(_refusing 0)
foreach(_line IN LISTS _lines)
  string(REGEX REPLACE "^${_prefix} ([0-9]+) ${_unit}$" "\\1" _count "${_line}")
  if(_count GREATER 0)
    math(EXPR _refusing "${_refusing} + 1")
  elseif(_every)
    string(APPEND _failed "  a rank reported 0 ${_unit}: the path under test never ran there\n")
  endif()
endforeach()
if(_refusing EQUAL 0)
  string(APPEND _failed "  every rank reported 0 ${_unit}: the path under test never ran\n")
endif()

if(_failed)
  message(FATAL_ERROR "ring_staging_check: the ring with ${_prefix} ${_unit} was not shown to work:\n${_failed}")
endif()
message(STATUS "ring_staging_check: test_ring passed on ${RANKS} ranks: ${_lines}")
