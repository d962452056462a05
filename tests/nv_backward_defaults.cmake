# nv_backward_defaults.cmake - the tensor-core backward's order and copy defaults as the NVIDIA planner
# chooses them for a shape (tests/tuning_table --kernel nv_backward, no device needed): NV_BWD_CHUNK,
# chunks of 16 work-groups over every head with a bias, or with the causal mask or a window unless key
# lengths or a packed batch's lengths limit the keys, 0 otherwise, and a setting overriding it;
# NV_BWD_STREAM, 1 at head_dim >= 128. lib/nv_mma_backward_plan.c has the measurements behind both.
#
#   cmake -DTUNING_TABLE=<tuning_table> -P nv_backward_defaults.cmake
# Each entry of _cases is "tuning_table's options|the defines its output must hold".
set(_base "--device;NVIDIA H100;--class;nvidia_gpu;--kernel;nv_backward")
set(_cases
  "--dtype f16 --head-dim 128|-D NV_BWD_STREAM=1 -D NV_BWD_CHUNK=0 "
  "--dtype f16 --head-dim 64|-D NV_BWD_STREAM=0 -D NV_BWD_CHUNK=0 "
  "--dtype bf16 --head-dim 128 --causal 1|-D NV_BWD_CHUNK=16 "
  "--dtype f16 --head-dim 59 --features window|-D NV_BWD_CHUNK=16 "
  "--dtype f16 --head-dim 128 --bias 1|-D NV_BWD_CHUNK=16 "
  "--dtype f16 --head-dim 256 --features bias,keylens|-D NV_BWD_CHUNK=16 "
  "--dtype f16 --head-dim 128 --features keylens|-D NV_BWD_CHUNK=0 "
  "--dtype f16 --head-dim 128 --features window,keylens|-D NV_BWD_CHUNK=0 "
  "--dtype f16 --head-dim 128 --features softcap|-D NV_BWD_CHUNK=0 "
  "--dtype f16 --head-dim 128 --features 1 --varlen 1|-D NV_BWD_CHUNK=0 "
  "--dtype f16 --head-dim 128 --causal 1 --tune nv_backward.chunk=0|-D NV_BWD_CHUNK=0 "
  "--dtype f16 --head-dim 128 --tune nv_backward.chunk=5|-D NV_BWD_CHUNK=5 ")
if(NOT TUNING_TABLE)
  message(FATAL_ERROR "nv_backward_defaults.cmake needs -DTUNING_TABLE=<path of tests/tuning_table>")
endif()
set(_failed "")
foreach(_case IN LISTS _cases)
  string(REPLACE "|" ";" _parts "${_case}")
  list(GET _parts 0 _opts)
  list(GET _parts 1 _want)
  separate_arguments(_args UNIX_COMMAND "${_opts}")
  execute_process(COMMAND ${TUNING_TABLE} ${_base} ${_args} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "  ${_opts}: tuning_table failed (${_rc}): ${_err}\n")
    continue()
  endif()
  string(REPLACE "\n" " " _out "${_out} ")
  string(REGEX MATCHALL "-D NV_BWD_[A-Z]+=[0-9]+ " _wanted "${_want}")
  foreach(_define IN LISTS _wanted)
    string(FIND "${_out}" "${_define}" _at)
    if(_at LESS 0)
      string(APPEND _failed "  ${_opts}: wants '${_define}', got: ${_out}\n")
    endif()
  endforeach()
endforeach()
if(_failed)
  message(FATAL_ERROR "the tensor-core backward's defaults:\n${_failed}")
endif()
list(LENGTH _cases _n)
message("the tensor-core backward's defaults: ${_n} of ${_n} shapes as expected")
