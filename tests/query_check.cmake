# query_check.cmake - runs `clflash-query` once and checks its JSON.
#
#   cmake -DQUERY=<tool> -DARGS="a|b|c" -DEXPECT="key=value|key=value" -P query_check.cmake
#
# The output must be exactly one JSON object ({ ... }, and valid JSON where this CMake can parse
# it). Each expected key is found as `"key"`, optional whitespace, `:`, optional whitespace, and
# its value (a number, true, false, null or a string) compared as text: no assumption about
# indentation or key order. The first occurrence of a key counts.
cmake_minimum_required(VERSION 3.16)

foreach(_v QUERY ARGS EXPECT)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "query_check.cmake: -D${_v}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${QUERY}")
  message(FATAL_ERROR "clflash-query not found at '${QUERY}'")
endif()

string(REPLACE "|" ";" _args "${ARGS}")
string(REPLACE "|" ";" _expect "${EXPECT}")

execute_process(COMMAND "${QUERY}" ${_args}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
string(REPLACE ";" " " _shown "${_args}")
message(STATUS "clflash-query ${_shown}\n${_out}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "clflash-query exited with ${_rc}\nstderr:\n${_err}")
endif()

string(STRIP "${_out}" _json)
if(NOT _json MATCHES "^{" OR NOT _json MATCHES "}$")
  message(FATAL_ERROR "the output is not one JSON object")
endif()
if(NOT CMAKE_VERSION VERSION_LESS 3.19)
  # string(JSON) parses the whole text; trailing text after the object is an error too.
  string(JSON _type ERROR_VARIABLE _jerr TYPE "${_json}")
  if(_jerr OR NOT _type STREQUAL "OBJECT")
    message(FATAL_ERROR "the output is not valid JSON: ${_jerr}")
  endif()
endif()

set(_failed "")
foreach(_pair IN LISTS _expect)
  if(NOT _pair MATCHES "^([A-Za-z0-9_]+)=(.*)$")
    message(FATAL_ERROR "bad expectation '${_pair}'")
  endif()
  set(_key "${CMAKE_MATCH_1}")
  set(_want "${CMAKE_MATCH_2}")
  if(_json MATCHES "\"${_key}\"[ \t\r\n]*:[ \t\r\n]*(-?[0-9][0-9.eE+-]*|true|false|null|\"[^\"]*\")")
    set(_got "${CMAKE_MATCH_1}")
    if(NOT _got STREQUAL _want)
      string(APPEND _failed "  ${_key}: got ${_got}, want ${_want}\n")
    endif()
  else()
    string(APPEND _failed "  ${_key}: missing\n")
  endif()
endforeach()
if(_failed)
  message(FATAL_ERROR "clflash-query ${_shown}: wrong values\n${_failed}")
endif()
message(STATUS "all ${EXPECT} hold")
