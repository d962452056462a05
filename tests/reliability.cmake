# reliability.cmake - the reliability tests that need more than a Check suite linked against the
# shared library (included from tests/CMakeLists.txt):
#
#  - alloc_faults, leak_cycles: Check suites linked against the STATIC library with the linker's
#    --wrap, so that clflash's own malloc/calloc/realloc/strdup/free and OpenCL object calls go
#    through tests/fault_inject.c, which counts them and can fail the k-th one. lib/ is not touched.
#  - sanitizers: configures, builds and runs a second tree with -fsanitize=address,undefined
#    (tests/sanitizers/run_sanitized.cmake); skipped inside that tree.
#  - fuzz_descriptor: builds tests/fuzz/fuzz_descriptor.c with clang and libFuzzer in a third
#    tree and runs it for CLFLASH_FUZZ_SECONDS (tests/fuzz/run_fuzz.cmake); skipped, with a message,
#    where clang or libFuzzer is missing.
#
# Options for the nested trees: CLFLASH_SANITIZER_TREE (set by run_sanitized.cmake) and
# CLFLASH_FUZZ_TREE (set by run_fuzz.cmake; only the fuzzer target is built there);
# CLFLASH_NESTED_JOBS (their build jobs, 2) and CLFLASH_NESTED_TEST_JOBS (how many suites the
# sanitizer tree runs at once, 1), for machines with more cores than CI's; CLFLASH_SANITIZER_EXCLUDE
# (a CTest -E regex of suites the sanitizer tree does not run, empty: all run).

option(CLFLASH_SANITIZER_TREE "This tree is the sanitizer build (do not nest another)" OFF)
option(CLFLASH_FUZZ_TREE "This tree builds the libFuzzer target" OFF)
set(CLFLASH_FUZZ_SECONDS 60 CACHE STRING "How long CTest runs the fuzzer")
set(CLFLASH_NESTED_JOBS 2 CACHE STRING "Build jobs of the sanitizer and fuzz trees")
set(CLFLASH_NESTED_TEST_JOBS 1 CACHE STRING "Suites the sanitizer tree runs at once (ctest -j)")
set(CLFLASH_SANITIZER_EXCLUDE "" CACHE STRING "CTest -E regex of suites the sanitizer tree skips (none by default)")

# ---- fault injection and leak counting through --wrap -------------------------------------------
# Must list exactly the functions tests/fault_inject.c defines __wrap_ versions of.
set(FAULT_INJECT_WRAPPED
  malloc calloc realloc strdup free
  clCreateContext clCreateCommandQueue clCreateBuffer clCreateSubBuffer clCreateProgramWithSource
  clCreateKernel clCreateUserEvent clBuildProgram
  clRetainContext clReleaseContext clRetainCommandQueue clReleaseCommandQueue
  clRetainMemObject clReleaseMemObject clRetainProgram clReleaseProgram
  clRetainKernel clReleaseKernel clRetainEvent clReleaseEvent
  clEnqueueReadBuffer clEnqueueWriteBuffer clEnqueueReadBufferRect clEnqueueWriteBufferRect
  clEnqueueFillBuffer clEnqueueCopyBuffer clEnqueueMarkerWithWaitList clEnqueueBarrierWithWaitList
  clEnqueueNDRangeKernel clGetKernelWorkGroupInfo)
set(FAULT_INJECT_WRAP_OPTIONS "")
foreach(_sym IN LISTS FAULT_INJECT_WRAPPED)
  list(APPEND FAULT_INJECT_WRAP_OPTIONS "LINKER:--wrap=${_sym}")
endforeach()

if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang" AND NOT APPLE AND NOT WIN32)
  foreach(_name alloc_faults leak_cycles)
    # The harness and reference are compiled into the executable (not clflash_testlib, which links
    # the shared library), so that their calls and the library's are wrapped alike.
    add_executable(test_${_name} test_${_name}.c fault_inject.c reference.c harness.c)
    target_include_directories(test_${_name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(test_${_name} PRIVATE clflash_static PkgConfig::CHECK Threads::Threads m)
    target_compile_options(test_${_name} PRIVATE ${CLFLASH_WARNINGS})
    target_link_options(test_${_name} PRIVATE ${FAULT_INJECT_WRAP_OPTIONS})
    add_test(NAME ${_name} COMMAND test_${_name})
    set_tests_properties(${_name} PROPERTIES
      ENVIRONMENT "${CLFLASH_TEST_ENV}"
      TIMEOUT 900
      LABELS "check")
  endforeach()
endif()

# ---- the sanitizer tree --------------------------------------------------------------------------
if(CLFLASH_SANITIZER_TREE)
  # The negative control: a context lost on purpose must be reported despite tests/lsan.supp.
  add_executable(lsan_control sanitizers/leak_control.c)
  target_link_libraries(lsan_control PRIVATE clflash)
  add_test(NAME lsan_control COMMAND lsan_control)
  set_tests_properties(lsan_control PROPERTIES
    ENVIRONMENT "${CLFLASH_TEST_ENV}"
    TIMEOUT 300
    PASS_REGULAR_EXPRESSION "Direct leak of [0-9]+ byte[^\n]*\n[^\n]*\n[^\n]*in clflash_context_create"
    LABELS "check")
endif()
if(NOT CLFLASH_SANITIZER_TREE AND NOT CLFLASH_FUZZ_TREE)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
  check_c_source_compiles("int main(void) { return 0; }" CLFLASH_HAVE_ASAN_UBSAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(CLFLASH_HAVE_ASAN_UBSAN)
    set(_supported 1)
  else()
    set(_supported 0)
  endif()
  add_test(NAME sanitizers
    COMMAND ${CMAKE_COMMAND}
            "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}"
            "-DWORK_DIR=${CMAKE_BINARY_DIR}/sanitizer-tree"
            "-DC_COMPILER=${CMAKE_C_COMPILER}"
            "-DGENERATOR=${CMAKE_GENERATOR}"
            "-DJOBS=${CLFLASH_NESTED_JOBS}"
            "-DTEST_JOBS=${CLFLASH_NESTED_TEST_JOBS}"
            "-DEXCLUDE=${CLFLASH_SANITIZER_EXCLUDE}"
            "-DSUPPORTED=${_supported}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/sanitizers/run_sanitized.cmake)
  set_tests_properties(sanitizers PROPERTIES
    ENVIRONMENT "${CLFLASH_TEST_ENV}"
    TIMEOUT 1500
    SKIP_REGULAR_EXPRESSION "SKIPPED sanitizers: "
    LABELS "sanitizers")
endif()

# ---- the fuzzer ----------------------------------------------------------------------------------
if(CLFLASH_FUZZ_TREE)
  add_executable(fuzz_descriptor fuzz/fuzz_descriptor.c)
  target_link_libraries(fuzz_descriptor PRIVATE clflash_static m)
  target_link_options(fuzz_descriptor PRIVATE -fsanitize=fuzzer)
elseif(NOT CLFLASH_SANITIZER_TREE)
  find_program(CLFLASH_CLANG NAMES clang clang-14 clang-15 clang-16)
  if(NOT CLFLASH_CLANG)
    set(CLFLASH_CLANG "")
  endif()
  # Built by run_fuzz.cmake in a tree of its own; SKIP_RETURN_CODE cannot be used because a cmake -P
  # script cannot choose its exit code, so the skip is recognised by its message, as for Oclgrind.
  add_test(NAME fuzz_descriptor
    COMMAND ${CMAKE_COMMAND}
            "-DCLANG=${CLFLASH_CLANG}"
            "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}"
            "-DWORK_DIR=${CMAKE_BINARY_DIR}/fuzz"
            "-DSECONDS=${CLFLASH_FUZZ_SECONDS}"
            "-DGENERATOR=${CMAKE_GENERATOR}"
            "-DJOBS=${CLFLASH_NESTED_JOBS}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz.cmake)
  set_tests_properties(fuzz_descriptor PROPERTIES
    ENVIRONMENT "${CLFLASH_TEST_ENV}"
    TIMEOUT 900
    SKIP_REGULAR_EXPRESSION "SKIPPED fuzz_descriptor: "
    LABELS "fuzz")
endif()
