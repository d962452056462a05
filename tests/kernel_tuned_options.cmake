# kernel_tuned_options.cmake - the parameters the library would plan for one target of a compile
# matrix: a case's options may hold one placeholder, which kernel_tuned_options() replaces by what
# tests/tuning_table prints for the case's dtype and head_dim on a GPU of that name and class (the
# planner's defaults with clflash's built-in tuning rules applied):
#   @REGTILE@   the register-tiled forward's tiles and B (--kernel forward)
#   @LANES@     the lane-per-row forward's B, work-items per row and strides (--kernel lanes)
#   @BACKWARD@  the portable backward's B, work-items per row and strides (--kernel backward)
#   @MERGE:N@   the merge kernel's work-items and rows per work-group for N rows (--kernel merge)
#   @NAIVE@     the naive kernels' softmax work-group (--kernel naive)
# So the matrices build what a user's device would build, and a built-in rule that still spills,
# or a default changed under a rule, fails there. Included by kernel_resources.cmake,
# kernel_resources_intel.cmake, kernel_spirv.cmake and kernel_nvptx.cmake, which need TUNING_TABLE
# (the tool's path).

# kernel_tuned_options(<options> <device name> <class> <output variable> [tool arguments...]):
# further arguments go to the tool (--local-mem BYTES, --max-work-group N; 64 KiB and 256 without).
function(kernel_tuned_options _opts _device _class _out)
  set(_shape "")
  if(_opts MATCHES "@REGTILE@")
    set(_placeholder "@REGTILE@")
    set(_kernel forward)
  elseif(_opts MATCHES "@LANES@")
    set(_placeholder "@LANES@")
    set(_kernel lanes)
  elseif(_opts MATCHES "@BACKWARD@")
    set(_placeholder "@BACKWARD@")
    set(_kernel backward)
  elseif(_opts MATCHES "@MERGE:([0-9]+)@")
    set(_placeholder "@MERGE:${CMAKE_MATCH_1}@")
    set(_kernel merge)
    set(_shape --seq-q ${CMAKE_MATCH_1}) # rows = batch x heads x seq_q
  elseif(_opts MATCHES "@NAIVE@")
    set(_placeholder "@NAIVE@")
    set(_kernel naive)
  else()
    set(${_out} "${_opts}" PARENT_SCOPE)
    return()
  endif()
  if(NOT TUNING_TABLE OR NOT EXISTS "${TUNING_TABLE}")
    message(FATAL_ERROR "a case asks for planned parameters (${_placeholder}) but TUNING_TABLE (tests/tuning_table) is not given")
  endif()
  if(NOT _opts MATCHES "-D HEAD_DIM=([0-9]+)")
    message(FATAL_ERROR "a ${_placeholder} case needs -D HEAD_DIM: ${_opts}")
  endif()
  set(_dim "${CMAKE_MATCH_1}")
  if(NOT _opts MATCHES "-D CLFLASH_DTYPE_(F32|F16|BF16|I8)")
    message(FATAL_ERROR "a ${_placeholder} case needs -D CLFLASH_DTYPE_*: ${_opts}")
  endif()
  string(TOLOWER "${CMAKE_MATCH_1}" _dtype)
  execute_process(COMMAND "${TUNING_TABLE}" --device "${_device}" --class ${_class} --dtype ${_dtype}
                          --head-dim ${_dim} --kernel ${_kernel} ${_shape} ${ARGN}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _defs ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0 OR NOT _defs MATCHES "^-D [A-Z_]+=[0-9]")
    message(FATAL_ERROR "tuning_table --kernel ${_kernel} for ${_device} (${_class}, ${_dtype}, head_dim ${_dim}) "
                        "printed \"${_defs}\" (${_rc}): ${_err}")
  endif()
  string(REPLACE "${_placeholder}" "${_defs}" _opts "${_opts}")
  set(${_out} "${_opts}" PARENT_SCOPE)
endfunction()
