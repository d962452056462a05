# run_fuzz.cmake - builds the libFuzzer target tests/fuzz/fuzz_descriptor.c in a tree of its own
# (clang, -fsanitize=fuzzer,address,undefined) and runs it for a bounded time on a scratch copy of
# the committed corpus. Registered as the CTest test "fuzz_descriptor" by tests/reliability.cmake.
#
#   cmake -DCLANG=<clang or empty> -DSOURCE_DIR=<clflash source> -DWORK_DIR=<scratch>
#         -DSECONDS=<run time> -DJOBS=<build jobs> [-DGENERATOR=<generator>] -P run_fuzz.cmake
#
# Without clang or libFuzzer (Debian: clang and libclang-rt-14-dev, which .ci/install-deps
# installs) it prints "SKIPPED fuzz_descriptor: ..." and CTest counts the test as skipped. Where
# NVIDIA's OpenCL driver is registered, ASan needs protect_shadow_gap=0 (see
# tests/sanitizers/driver_options.cmake). Any crash, sanitizer
# report, leak outside PoCL/LLVM (tests/lsan.supp) or failed oracle fails it; the input that did it
# is left in WORK_DIR as crash-*/leak-*/timeout-* and its bytes are printed.
cmake_minimum_required(VERSION 3.16)

foreach(_v SOURCE_DIR WORK_DIR SECONDS JOBS)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "run_fuzz.cmake: -D${_v}=... is required")
  endif()
endforeach()
if(NOT CLANG OR NOT EXISTS "${CLANG}")
  message("SKIPPED fuzz_descriptor: clang not found ('${CLANG}'; install clang and libclang-rt-14-dev to run the fuzzer)")
  return()
endif()

file(MAKE_DIRECTORY "${WORK_DIR}")

# Can this clang link a libFuzzer program? (libclang-rt-14-dev provides the runtime.)
file(WRITE "${WORK_DIR}/probe.c"
  "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
execute_process(COMMAND "${CLANG}" -fsanitize=fuzzer,address,undefined "${WORK_DIR}/probe.c" -o "${WORK_DIR}/probe"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message("${_out}${_err}")
  message("SKIPPED fuzz_descriptor: ${CLANG} cannot link -fsanitize=fuzzer programs (install libclang-rt-14-dev)")
  return()
endif()

# Runs a command and stops the test if it fails.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    string(REPLACE ";" " " _cmd "${ARGN}")
    message("---- ${what}: ${_cmd}\n${_out}${_err}")
    message(FATAL_ERROR "${what} failed (${_rc})")
  endif()
endfunction()

# The fuzz tree: the whole project configured with clang; only the fuzzer target is built.
# -fsanitize=fuzzer-no-link instruments the library for coverage; the target links -fsanitize=fuzzer.
set(_tree "${WORK_DIR}/tree")
set(_flags "-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined")
set(_gen_args "")
if(GENERATOR)
  set(_gen_args -G "${GENERATOR}")
endif()
run_step("configure the fuzz tree" "${CMAKE_COMMAND}" ${_gen_args} -S "${SOURCE_DIR}" -B "${_tree}"
  "-DCMAKE_C_COMPILER=${CLANG}" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS=${_flags}"
  -DCLFLASH_BUILD_TOOLS=OFF -DCLFLASH_FUZZ_TREE=ON)
run_step("build the fuzzer" "${CMAKE_COMMAND}" --build "${_tree}" --target fuzz_descriptor -j "${JOBS}")

# A scratch corpus (new inputs go there, never into the source tree), seeded from the committed one.
set(_corpus "${WORK_DIR}/corpus")
file(REMOVE_RECURSE "${_corpus}")
file(MAKE_DIRECTORY "${_corpus}")
file(GLOB _crashes "${WORK_DIR}/crash-*" "${WORK_DIR}/leak-*" "${WORK_DIR}/timeout-*" "${WORK_DIR}/oom-*")
if(_crashes)
  file(REMOVE ${_crashes})
endif()

# PoCL and LLVM leak by design; tests/lsan.supp names only their libraries. UBSan stops at the
# first report. detect_leaks=1 makes libFuzzer check each input that allocates more than it frees.
# intercept_tls_get_addr=0: see tests/sanitizers/run_sanitized.cmake (LSan's tracer crash).
include("${SOURCE_DIR}/tests/sanitizers/driver_options.cmake")
clflash_driver_asan_options(_driver_asan)
set(ENV{ASAN_OPTIONS} "detect_leaks=1:halt_on_error=1:abort_on_error=0:intercept_tls_get_addr=0${_driver_asan}")
set(ENV{LSAN_OPTIONS} "suppressions=${SOURCE_DIR}/tests/lsan.supp:print_suppressions=0")
set(ENV{UBSAN_OPTIONS} "halt_on_error=1:print_stacktrace=1")

execute_process(
  COMMAND "${_tree}/tests/fuzz_descriptor" -max_total_time=${SECONDS} -timeout=60 -rss_limit_mb=6144
          -max_len=512 -print_final_stats=1 "-artifact_prefix=${WORK_DIR}/"
          "${_corpus}" "${SOURCE_DIR}/tests/fuzz/corpus"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
# libFuzzer writes to stderr; keep the useful end of it.
string(LENGTH "${_err}" _len)
if(_len GREATER 12000)
  math(EXPR _from "${_len} - 12000")
  string(SUBSTRING "${_err}" ${_from} 12000 _err)
endif()
message("${_out}${_err}")
if(NOT _rc EQUAL 0)
  file(GLOB _crashes "${WORK_DIR}/crash-*" "${WORK_DIR}/leak-*" "${WORK_DIR}/timeout-*" "${WORK_DIR}/oom-*")
  foreach(_c IN LISTS _crashes)
    file(READ "${_c}" _hex HEX)
    message("input ${_c}: ${_hex}")
  endforeach()
  message(FATAL_ERROR "the fuzzer failed (${_rc}); reproduce with: ${_tree}/tests/fuzz_descriptor <input>")
endif()
if(NOT _err MATCHES "Done [0-9]+ runs")
  message(FATAL_ERROR "the fuzzer did not report its runs")
endif()
message(STATUS "fuzz_descriptor ran ${SECONDS} s without a finding")
