# tune_check.cmake - clflash-tune end to end at a small shape: it sweeps the given candidates, checks
# each (fp64 on a check shape, agreement with the planner's configuration), writes the winner as a
# rule (--candidates-only: one of the candidates, not the planner's CPU path), and a second run that
# loads the file (CLFLASH_TUNING_FILE) plans with exactly that rule's settings. A tolerance no real result meets must make every candidate fail and the tool exit 1:
# the checks can fail.
#
#   cmake -DTUNE=<clflash-tune> -DOUT=<scratch file> -P tune_check.cmake
cmake_minimum_required(VERSION 3.16)

set(_shape --batch 1 --heads-q 3 --heads-kv 1 --seq-q 41 --seq-k 67 --head-dim 24 --dtype f32 --causal
           --min-time 0 --warmup 0)
set(_tries --try "portable.cpu_path=0,portable.regtile=2x4x8x8" --try "portable.cpu_path=0,portable.regtile=1x8x16"
           --try "portable.cpu_path=0,portable.regtile=0")
file(REMOVE "${OUT}")

# Fails unless exactly _n candidates of the run's output were timed with both checks ok.
function(expect_timed _out _n _what)
  string(REGEX MATCHALL "\n[0-9.]+ +ok +ok +portable" _passed "${_out}")
  list(LENGTH _passed _npassed)
  if(NOT _npassed EQUAL _n)
    message(FATAL_ERROR "${_what}: expected ${_n} candidates timed with both checks ok, found ${_npassed}")
  endif()
endfunction()

function(run_tune out_var rc_var)
  execute_process(COMMAND "${TUNE}" ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message(STATUS "clflash-tune ${ARGN}\n${_out}${_err}")
  set(${out_var} "${_out}${_err}" PARENT_SCOPE)
  set(${rc_var} ${_rc} PARENT_SCOPE)
endfunction()

run_tune(_out _rc ${_shape} ${_tries} --candidates-only --out "${OUT}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "clflash-tune exited with ${_rc}")
endif()
expect_timed("${_out}" 3 "the forward")
if(NOT _out MATCHES "\nbest +([^:]+): ")
  message(FATAL_ERROR "no 'best' line")
endif()
set(_best "${CMAKE_MATCH_1}")
if(NOT _best MATCHES "^portable.cpu_path=0,portable.regtile=(2x4x8x8|1x8x16|0)$")
  message(FATAL_ERROR "with --candidates-only the best '${_best}' is not one of the candidates")
endif()
file(READ "${OUT}" _file)
if(NOT _file MATCHES "\n?device=[^\n,]+,dtype=f32,head_dim=24,([^\n]+)\n")
  message(FATAL_ERROR "the tuning file holds no rule for f32, head_dim 24:\n${_file}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL _best)
  message(FATAL_ERROR "the file's rule '${CMAKE_MATCH_1}' is not the best '${_best}'")
endif()

# the file loaded: the planner's settings are now the rule's, and the rule tried as a candidate is
# the planner's configuration again (measured once, not an error)
set(ENV{CLFLASH_TUNING_FILE} "${OUT}")
run_tune(_out _rc ${_shape} --try "${_best}")
unset(ENV{CLFLASH_TUNING_FILE})
if(NOT _rc EQUAL 0 OR NOT _out MATCHES "planner's settings ${_best}\n")
  message(FATAL_ERROR "with CLFLASH_TUNING_FILE the plan did not report '${_best}' (rc ${_rc})")
endif()

# checks that cannot be met: no candidate passes, exit status 1
run_tune(_out _rc ${_shape} ${_tries} --candidates-only --tolerance 1e-15)
if(NOT _rc EQUAL 1 OR NOT _out MATCHES "no candidate passed the checks" OR _out MATCHES "\nbest ")
  message(FATAL_ERROR "with tolerance 1e-15 clflash-tune did not fail the candidates (rc ${_rc})")
endif()
message(STATUS "clflash-tune: best '${_best}', loaded back from the file; impossible checks fail")

# --backward: the gradients of each candidate against the tool's fp64 backward and the planner's;
# the winner is one of them and lands in the file as a rule; impossible checks fail again
set(_btries --try "portable.cpu_path=1,portable_backward.max_block=16"
            --try "portable.cpu_path=0,portable_backward.max_block=8,portable_backward.threads_per_row=4,portable_backward.max_work_group=32")
file(REMOVE "${OUT}")
run_tune(_out _rc ${_shape} --backward ${_btries} --candidates-only --out "${OUT}")
if(NOT _rc EQUAL 0 OR NOT _out MATCHES "backward\n")
  message(FATAL_ERROR "clflash-tune --backward exited with ${_rc}")
endif()
expect_timed("${_out}" 2 "--backward")
if(NOT _out MATCHES "\nbest +(portable.cpu_path=[01],portable_backward.max_block=(16|8)[^:]*): ")
  message(FATAL_ERROR "--backward: the best is not one of the candidates")
endif()
set(_best "${CMAKE_MATCH_1}")
file(READ "${OUT}" _file)
if(NOT _file MATCHES "backward: [^\n]*\ndevice=[^\n,]+,dtype=f32,head_dim=24,([^\n]+)\n" OR NOT CMAKE_MATCH_1 STREQUAL _best)
  message(FATAL_ERROR "--backward: the tuning file does not hold the best '${_best}':\n${_file}")
endif()
run_tune(_out _rc ${_shape} --backward ${_btries} --candidates-only --tolerance 1e-15)
if(NOT _rc EQUAL 1 OR NOT _out MATCHES "no candidate passed the checks")
  message(FATAL_ERROR "--backward with tolerance 1e-15 clflash-tune did not fail the candidates (rc ${_rc})")
endif()
message(STATUS "clflash-tune --backward: best '${_best}' written; impossible checks fail")
