# consumer_test.cmake - installs the build tree into a fresh prefix and builds and runs the
# consumer in tests/consumer/ against it, the way a user of the package would.
#
#   cmake -DMODE=cmake|cmake_static|pkgconfig -DBUILD_DIR=<clflash build> -DWORK_DIR=<scratch>
#         -DCONSUMER_SOURCE=<tests/consumer> -DLIBDIR=<GNUInstallDirs libdir> -DC_COMPILER=<cc>
#         [-DGENERATOR=<generator>] [-DCONFIG=<config>] -P consumer_test.cmake
#
#   cmake, cmake_static: find_package(clflash CONFIG REQUIRED) with CMAKE_PREFIX_PATH=<prefix>,
#                        linking clflash::clflash (or clflash::clflash_static), then run it.
#   pkgconfig:           cc main.c $(pkg-config --cflags --libs clflash) with
#                        PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig, run with LD_LIBRARY_PATH.
cmake_minimum_required(VERSION 3.16)

foreach(_v MODE BUILD_DIR WORK_DIR CONSUMER_SOURCE LIBDIR C_COMPILER)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "consumer_test.cmake: -D${_v}=... is required")
  endif()
endforeach()

# Runs a command, shows it and its output, and stops the test if it fails.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  string(REPLACE ";" " " _cmd "${ARGN}")
  message("---- ${what}: ${_cmd}\n${_out}${_err}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${_rc})")
  endif()
  set(STEP_OUTPUT "${_out}" PARENT_SCOPE)
endfunction()

set(_prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(_install_args --install "${BUILD_DIR}" --prefix "${_prefix}")
if(CONFIG)
  list(APPEND _install_args --config "${CONFIG}")
endif()
run_step("install" "${CMAKE_COMMAND}" ${_install_args})

foreach(_f include/clflash.h ${LIBDIR}/cmake/clflash/clflashConfig.cmake
           ${LIBDIR}/cmake/clflash/clflashConfigVersion.cmake ${LIBDIR}/pkgconfig/clflash.pc)
  if(NOT EXISTS "${_prefix}/${_f}")
    message(FATAL_ERROR "the install did not produce ${_f}")
  endif()
endforeach()

# The shared library's SONAME carries the ABI number of clflash.h (CLFLASH_ABI_VERSION).
file(STRINGS "${_prefix}/include/clflash.h" _abi_line REGEX "#define CLFLASH_ABI_VERSION ")
string(REGEX REPLACE ".*CLFLASH_ABI_VERSION ([0-9]+).*" "\\1" _abi "${_abi_line}")
file(GLOB _shared "${_prefix}/${LIBDIR}/libclflash.so*")
if(_shared AND NOT EXISTS "${_prefix}/${LIBDIR}/libclflash.so.${_abi}")
  message(FATAL_ERROR "the install has ${_shared} but no libclflash.so.${_abi} (CLFLASH_ABI_VERSION ${_abi})")
endif()

if(MODE STREQUAL "cmake" OR MODE STREQUAL "cmake_static")
  set(_static OFF)
  if(MODE STREQUAL "cmake_static")
    set(_static ON)
  endif()
  set(_gen_args "")
  if(GENERATOR)
    set(_gen_args -G "${GENERATOR}")
  endif()
  run_step("configure the consumer" "${CMAKE_COMMAND}" ${_gen_args}
    -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build"
    "-DCMAKE_PREFIX_PATH=${_prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}"
    -DCMAKE_BUILD_TYPE=Release "-DCLFLASH_CONSUMER_STATIC=${_static}")
  run_step("build the consumer" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" --config Release)
  # The package's version file must refuse a request from before this ABI (0.4 had libclflash.so.0).
  execute_process(COMMAND "${CMAKE_COMMAND}" ${_gen_args} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build-0.4"
    "-DCMAKE_PREFIX_PATH=${_prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}" -DCLFLASH_CONSUMER_VERSION=0.4
    RESULT_VARIABLE _old_rc OUTPUT_VARIABLE _old_out ERROR_VARIABLE _old_err)
  if(_old_rc EQUAL 0 OR NOT "${_old_out}${_old_err}" MATCHES "not compatible|version")
    message(FATAL_ERROR "find_package(clflash 0.4) was not refused (rc ${_old_rc}):\n${_old_out}${_old_err}")
  endif()
  message("---- find_package(clflash 0.4) refused, as it must be")
  set(_exe "${WORK_DIR}/build/consumer")
  if(NOT EXISTS "${_exe}" AND EXISTS "${WORK_DIR}/build/Release/consumer")
    set(_exe "${WORK_DIR}/build/Release/consumer")
  endif()
  # The shared flavour runs through the build tree's RPATH into the prefix; nothing else is set.
  run_step("run the consumer" "${_exe}")
elseif(MODE STREQUAL "pkgconfig")
  find_program(_pkg_config pkg-config)
  if(NOT _pkg_config)
    message(FATAL_ERROR "pkg-config not found")
  endif()
  set(ENV{PKG_CONFIG_PATH} "${_prefix}/${LIBDIR}/pkgconfig")
  # The prefix is a plain directory: a sysroot in the caller's environment (one way to use a
  # Check unpacked somewhere, see .device scripts) would be prepended to its -I and -L paths.
  unset(ENV{PKG_CONFIG_SYSROOT_DIR})
  run_step("pkg-config" "${_pkg_config}" --cflags --libs clflash)
  string(STRIP "${STEP_OUTPUT}" _flags)
  separate_arguments(_flags UNIX_COMMAND "${_flags}")
  # The .pc file derives its prefix from its own location (${pcfiledir}/../..), so compare the
  # include directory after normalising it.
  set(_include_ok FALSE)
  foreach(_flag IN LISTS _flags)
    if(_flag MATCHES "^-I(.*)$")
      get_filename_component(_inc "${CMAKE_MATCH_1}" ABSOLUTE)
      get_filename_component(_want "${_prefix}/include" ABSOLUTE)
      if(_inc STREQUAL _want)
        set(_include_ok TRUE)
      endif()
    endif()
  endforeach()
  if(NOT _include_ok)
    message(FATAL_ERROR "pkg-config's flags do not point into the prefix: ${_flags}")
  endif()
  run_step("compile with pkg-config's flags" "${C_COMPILER}" "${CONSUMER_SOURCE}/main.c" ${_flags}
    -o "${WORK_DIR}/consumer_pc")
  run_step("run it" "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${_prefix}/${LIBDIR}" "${WORK_DIR}/consumer_pc")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

if(NOT STEP_OUTPUT MATCHES "tile_bytes\\(64, 128, 2\\) = 57344")
  message(FATAL_ERROR "the consumer did not print the expected line")
endif()
message(STATUS "consumer (${MODE}) built against ${_prefix} and ran")
