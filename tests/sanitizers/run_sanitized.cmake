# run_sanitized.cmake - a second build of the library and its tests with
# -fsanitize=address,undefined, and the Check suites run in it. Registered as the CTest test
# "sanitizers" by tests/reliability.cmake, so the README's single test command runs it.
#
#   cmake -DSOURCE_DIR=<clflash source> -DWORK_DIR=<tree> -DC_COMPILER=<cc> -DJOBS=<n>
#         [-DTEST_JOBS=<n>] [-DEXCLUDE=<regex>] [-DGENERATOR=<generator>] [-DSUPPORTED=0|1]
#         -P run_sanitized.cmake
#
# JOBS: build jobs; TEST_JOBS: how many suites CTest runs at once in the tree (default 1);
# EXCLUDE: a CTest -E regex of suites not to run there (default none; CI excludes nothing). For a
# device where one suite is too slow under ASan for the time at hand, e.g. leak_cycles on NVIDIA,
# whose 1000 context creations take 8 minutes there even without ASan.
#
# The configuration, and why:
#  - AddressSanitizer and UndefinedBehaviorSanitizer on everything clflash compiles: the library
#    (shared and static) and the tests. PoCL, LLVM and the ICD loader are not instrumented; ASan
#    intercepts their malloc/free, which is all LeakSanitizer needs. Measured on Debian 12 with
#    GCC 12 and PoCL 3.1 (LLVM 15): PoCL compiles and runs kernels under ASan unchanged (no stack
#    or dlopen trouble: the ICD loader dlopens libpocl and PoCL dlopens each compiled kernel, and
#    both work; protect_shadow_gap and stack sizes need no change). Two options are needed: the
#    leak suppressions, and intercept_tls_get_addr=0 (next point).
#  - NVIDIA's OpenCL driver (libnvidia-opencl, which loads the CUDA driver) reserves fixed
#    addresses inside ASan's shadow gap, so where an ICD names it ASan runs with
#    protect_shadow_gap=0 (tests/sanitizers/driver_options.cmake; google/sanitizers#629). The ICD
#    loader loads every registered driver, so this holds whichever device CLFLASH_DEVICE picks.
#  - UBSan: -fno-sanitize-recover=undefined plus halt_on_error=1, so the first report fails the test.
#  - intercept_tls_get_addr=0: without it LeakSanitizer's tracer dies with "Tracer caught signal
#    11" at exit in about one process in ten here (test_forward in fork mode: 9 of 69 tests, every
#    run). Seen with GCC 12's libasan and clang 14's compiler-rt alike; with log_threads=1 the last
#    line before the crash is a bogus "DTLS 5 at 0x0000000000fb-0x0008000011fd". The runtimes of
#    GCC < 14 and LLVM < 17 take a dynamic TLS block whose start is 16 bytes past a 4 KiB boundary
#    for a glibc 2.19 header and read a garbage range from it (google/sanitizers#1322); PoCL's and
#    LLVM's TLS (they are dlopened) make that likely. The option stops ASan tracking dynamic TLS:
#    LSan still scans static TLS, stacks, globals and the heap, and clflash keeps no pointer in TLS
#    (its only thread-local is the detail message, a char array), so no clflash leak is hidden.
#  - LeakSanitizer: on (ASan's default on Linux). PoCL and LLVM keep compiler state and caches
#    in globals they never free at exit (about 3 MB in 4500 blocks per process); tests/lsan.supp
#    suppresses leaks whose stack has a frame in libpocl, libLLVM, libclang, libstdc++ (C++
#    allocations; clflash is C), the ICD loader, the dynamic loader or NVIDIA's driver libraries
#    (libnvidia-opencl, libcuda, libnvidia-ptxjitcompiler, libnvidia-nvvm), and nothing else: a block
#    that clflash or the tests allocate and lose has only clflash/test frames under malloc and is
#    reported. The test "lsan_control" proves it: it loses a clflash context on purpose and passes
#    only if LeakSanitizer reports the block with clflash_context_create in its stack.
#  - Check forks a child per test; each child runs LeakSanitizer at exit, and a report makes the
#    child exit non-zero, which Check counts as a failed test.
#  - Only the tests labelled "check" run here (all Check suites, including the fault-injection and
#    leak-cycle executables, and lsan_control). Not Oclgrind (its runtime is preloaded, and ASan must come first), not
#    the consumer tests (they install and build a separate, uninstrumented project), not the fuzzer
#    (its own tree).
cmake_minimum_required(VERSION 3.16)

foreach(_v SOURCE_DIR WORK_DIR C_COMPILER JOBS)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "run_sanitized.cmake: -D${_v}=... is required")
  endif()
endforeach()
if(DEFINED SUPPORTED AND NOT SUPPORTED)
  message("SKIPPED sanitizers: ${C_COMPILER} cannot build with -fsanitize=address,undefined")
  return()
endif()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    string(REPLACE ";" " " _cmd "${ARGN}")
    message("---- ${what}: ${_cmd}\n${_out}${_err}")
    message(FATAL_ERROR "${what} failed (${_rc})")
  endif()
endfunction()

set(_san "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined")
set(_gen_args "")
if(GENERATOR)
  set(_gen_args -G "${GENERATOR}")
endif()
run_step("configure the sanitizer tree" "${CMAKE_COMMAND}" ${_gen_args} -S "${SOURCE_DIR}" -B "${WORK_DIR}"
  "-DCMAKE_C_COMPILER=${C_COMPILER}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_C_FLAGS=${_san}"
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined"
  -DCLFLASH_BUILD_TOOLS=OFF -DCLFLASH_SANITIZER_TREE=ON)
run_step("build the sanitizer tree" "${CMAKE_COMMAND}" --build "${WORK_DIR}" -j "${JOBS}")

# The tests of this tree set POCL_CACHE_DIR to <tree>/pocl-cache. Pointing that at the outer
# tree's cache (POCL_CACHE_DIR in this script's environment, which CTest sets) lets PoCL reuse the
# kernels the outer tests already compiled: the kernels and their build options are the same, and
# PoCL's compiler is not what this run checks. Saves most of the run's time on a cold machine.
if(DEFINED ENV{POCL_CACHE_DIR} AND NOT "$ENV{POCL_CACHE_DIR}" STREQUAL "")
  file(MAKE_DIRECTORY "$ENV{POCL_CACHE_DIR}")
  if(NOT IS_SYMLINK "${WORK_DIR}/pocl-cache")
    file(REMOVE_RECURSE "${WORK_DIR}/pocl-cache")
    file(CREATE_LINK "$ENV{POCL_CACHE_DIR}" "${WORK_DIR}/pocl-cache" SYMBOLIC)
  endif()
endif()

include("${SOURCE_DIR}/tests/sanitizers/driver_options.cmake")
clflash_driver_asan_options(_driver_asan)
set(ENV{ASAN_OPTIONS} "detect_leaks=1:halt_on_error=1:abort_on_error=0:print_summary=1:intercept_tls_get_addr=0${_driver_asan}")
set(ENV{LSAN_OPTIONS} "suppressions=${SOURCE_DIR}/tests/lsan.supp:print_suppressions=0")
set(ENV{UBSAN_OPTIONS} "halt_on_error=1:print_stacktrace=1")

if(NOT DEFINED TEST_JOBS OR "${TEST_JOBS}" STREQUAL "")
  set(TEST_JOBS 1)
endif()
set(_exclude "")
if(DEFINED EXCLUDE AND NOT "${EXCLUDE}" STREQUAL "")
  set(_exclude -E "${EXCLUDE}")
  message(STATUS "not run under the sanitizers (EXCLUDE): ${EXCLUDE}")
endif()
execute_process(
  COMMAND "${CMAKE_CTEST_COMMAND}" --test-dir "${WORK_DIR}" -L "^check$" ${_exclude} --output-on-failure -j "${TEST_JOBS}"
  RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "tests failed under -fsanitize=address,undefined (see above); reproduce with\n"
    "  ASAN_OPTIONS='$ENV{ASAN_OPTIONS}' LSAN_OPTIONS='$ENV{LSAN_OPTIONS}' UBSAN_OPTIONS='$ENV{UBSAN_OPTIONS}' "
    "ctest --test-dir ${WORK_DIR} -L check --output-on-failure")
endif()
message(STATUS "all Check suites pass under -fsanitize=address,undefined")
