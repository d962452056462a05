# plot_check.cmake - runs tools/plot_bench.gp on a CSV that clflash-bench wrote and checks that both
# PNGs exist and are not empty. Without gnuplot (empty, or a path that does not exist) it prints
# "SKIPPED: gnuplot not found" (the test is then reported as skipped, not failed).
#
#   cmake -DGNUPLOT=<gnuplot or ""> -DSCRIPT=plot_bench.gp -DCSV=<bench CSV> -DPREFIX=<out prefix>
#         -P plot_check.cmake
cmake_minimum_required(VERSION 3.16)

if(NOT GNUPLOT OR NOT EXISTS "${GNUPLOT}")
  message(STATUS "SKIPPED: gnuplot not found ('${GNUPLOT}')")
  return()
endif()
if(NOT EXISTS "${CSV}")
  message(FATAL_ERROR "no bench CSV at ${CSV} (the bench_csv test writes it)")
endif()
file(REMOVE "${PREFIX}_time.png" "${PREFIX}_memory.png")
execute_process(COMMAND "${GNUPLOT}" -c "${SCRIPT}" "${CSV}" "${PREFIX}" "ctest plot_bench"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "gnuplot -c ${SCRIPT} ${CSV} ${PREFIX}\n${_out}${_err}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "gnuplot exited with ${_rc}")
endif()
foreach(_png "${PREFIX}_time.png" "${PREFIX}_memory.png")
  if(NOT EXISTS "${_png}")
    message(FATAL_ERROR "${_png} was not written")
  endif()
  file(SIZE "${_png}" _size)
  file(READ "${_png}" _magic LIMIT 4 HEX)
  if(_size LESS 1000 OR NOT _magic STREQUAL "89504e47")
    message(FATAL_ERROR "${_png} is not a PNG of some size (${_size} bytes, starts ${_magic})")
  endif()
  message(STATUS "${_png}: ${_size} bytes")
endforeach()
