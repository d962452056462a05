# ring_staging_check.cmake - runs test_ring under mpiexec with tests/staging_refuse_preload.c
# preloaded on every rank, and passes only if both hold: test_ring exits with 0 and prints no
# "FAIL " line, and every one of the RANKS ranks reports that it refused at least one
# CL_MEM_ALLOC_HOST_PTR buffer (so the ring really ran on its plain-memory staging). A CTest
# PASS_REGULAR_EXPRESSION could check only the output and would ignore the exit code, hence a
# script.
#
#   cmake -DCOMMAND="<mpiexec>|<flag>|...|<env>|LD_PRELOAD=<lib>|<test_ring>" -DRANKS=<n>
#         -P ring_staging_check.cmake
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
# One line per process that had the library loaded and created buffers: the ranks, not mpiexec
# (the command sets LD_PRELOAD for the ranks only) nor the linker PoCL runs (it creates no
# buffer). So there must be exactly RANKS of them, none with 0.
string(REGEX MATCHALL "staging_refuse_preload: refused [0-9]+ buffers" _lines "${_err}${_out}")
list(LENGTH _lines _n)
if(NOT _n EQUAL RANKS)
  string(APPEND _failed "  ${_n} ranks reported refusals, want ${RANKS} (was the library preloaded on every rank?)\n")
endif()
foreach(_line IN LISTS _lines)
  string(REGEX REPLACE "^.* refused ([0-9]+) buffers$" "\\1" _count "${_line}")
  if(_count EQUAL 0)
    string(APPEND _failed "  a rank refused no buffer: the staging never asked for a CL_MEM_ALLOC_HOST_PTR buffer\n")
  endif()
endforeach()

if(_failed)
  message(FATAL_ERROR "ring_staging_check: the ring on plain staging was not shown to work:\n${_failed}")
endif()
message(STATUS "ring_staging_check: test_ring passed on ${RANKS} ranks, each refused: ${_lines}")
