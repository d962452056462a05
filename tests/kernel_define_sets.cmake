# kernel_define_sets.cmake - the kernel variants and -D sets the compile-matrix tests build
# (kernel_resources.cmake for AMD GPUs, kernel_resources_intel.cmake for Intel GPUs), included by
# both so that every target family builds the same configurations.
#
# The feature switches and storage types are written here; every parameter a planner chooses is a
# placeholder (@REGTILE@, @LANES@, @BACKWARD@, @MERGE:rows@, @NAIVE@) that each matrix replaces per
# target by what the library would plan there (kernel_tuned_options.cmake, through tests/tuning_table:
# the planner's defaults with the built-in tuning rules; lib/forward_plan.c, backward_plan.c,
# merge.c, naive.c). The merge kernel is built in both of lib/merge.c's shapes: many rows (16384)
# and a decoding step's few (32 rows, 128 work-items per row, parts in fp32). The bias gradient
# has no planned parameter: its defines are the problem's feature switches and broadcast flags.
# Each entry of _cases is "name|source after common.cl|options".

set(_none "-cl-std=CL1.2 -D CAUSAL=0 -D WINDOW=0 -D SOFTCAP=0 -D BIAS=0 -D ALIBI=0 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=0")
set(_all "-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=1 -D SOFTCAP=1 -D BIAS=1 -D ALIBI=1 -D KEYLEN=1 -D KEYLEN_DIAGONAL=1 -D VARLEN=0")
# a variable-length packed batch with the features it takes (key lengths and bias it does not)
set(_varlen "-cl-std=CL1.2 -D CAUSAL=1 -D WINDOW=1 -D SOFTCAP=1 -D BIAS=0 -D ALIBI=1 -D KEYLEN=0 -D KEYLEN_DIAGONAL=0 -D VARLEN=1")
set(_fwd "-D CLFLASH_DTYPE_F16")
set(_cases
  "forward-regtile-d64|flash_forward_regtile.cl|${_none} ${_fwd} -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=64 @REGTILE@"
  "forward-regtile-d128|flash_forward_regtile.cl|${_none} ${_fwd} -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=128 @REGTILE@"
  "forward-regtile-d128-features|flash_forward_regtile.cl|${_all} ${_fwd} -D CLFLASH_OUT_F32 -D WITH_LSE=1 -D SPLIT=1 -D PACK=4 -D PAGED=1 -D PAGE_SIZE=16 -D HEAD_DIM=128 @REGTILE@"
  "forward-regtile-d128-varlen|flash_forward_regtile.cl|${_varlen} ${_fwd} -D CLFLASH_OUT_F32 -D WITH_LSE=1 -D SPLIT=1 -D PACK=4 -D PAGED=0 -D HEAD_DIM=128 @REGTILE@"
  "forward-regtile-d256|flash_forward_regtile.cl|${_none} ${_fwd} -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=256 @REGTILE@"
  "forward-lanes-d64|flash_forward_lanes.cl|${_none} ${_fwd} -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=64 @LANES@"
  "forward-lanes-d64-varlen|flash_forward_lanes.cl|${_varlen} ${_fwd} -D CLFLASH_OUT_F16 -D WITH_LSE=1 -D SPLIT=0 -D PACK=1 -D PAGED=0 -D HEAD_DIM=64 @LANES@"
  "merge-d128|merge_states.cl|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D HEAD_DIM=128 @MERGE:16384@ -D WITH_LSE=1"
  "merge-d128-split-parts|merge_states.cl|${_none} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F16 -D HEAD_DIM=128 @MERGE:32@ -D WITH_LSE=1"
  "merge-d128-varlen-parts|merge_states.cl|${_varlen} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F16 -D HEAD_DIM=128 @MERGE:16384@ -D WITH_LSE=1"
  "backward-d64|flash_backward.cl|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=64 @BACKWARD@"
  "backward-d128-features|flash_backward.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=128 @BACKWARD@"
  "backward-d128-varlen|flash_backward.cl|${_varlen} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=128 @BACKWARD@"
  "backward-d256-f32|flash_backward.cl|${_none} -D CLFLASH_DTYPE_F32 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=256 @BACKWARD@"
  "naive-d64|naive_attention.cl|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=1 -D HEAD_DIM=64 @NAIVE@"
  "naive-backward-d64|naive_backward.cl|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=64 @NAIVE@"
  "bias-grad-d64|bias_grad.cl|${_all} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F32 -D WITH_LSE=0 -D HEAD_DIM=64 -D BCAST_BATCH=1 -D BCAST_HEADS=1 -D BCAST_ROWS=0"
  "kv-append-d128|kv_append.cl|${_none} -D CLFLASH_DTYPE_F16 -D CLFLASH_OUT_F16 -D WITH_LSE=0 -D HEAD_DIM=128 -D ROT_HALF=64 -D INTERLEAVED=0 -D PAGED=1 -D PAGE_SIZE=16"
)

# The planned parameters in a case's options: the register tiles as "RMxTCxBQ, B N" (the tuning
# syntax's order), the backward's as "B N, TPR T", or "-".
function(kernel_tiles_label _opts _out)
  if(_opts MATCHES "-D BLOCK=([0-9]+) -D BLOCK_Q=([0-9]+) -D RT_RM=([0-9]+) -D RT_TC=([0-9]+)")
    set(${_out} "${CMAKE_MATCH_3}x${CMAKE_MATCH_4}x${CMAKE_MATCH_2}, B ${CMAKE_MATCH_1}" PARENT_SCOPE)
  elseif(_opts MATCHES "-D BLOCK=([0-9]+) -D TPR=([0-9]+)")
    set(${_out} "B ${CMAKE_MATCH_1}, TPR ${CMAKE_MATCH_2}" PARENT_SCOPE)
  else()
    set(${_out} "-" PARENT_SCOPE)
  endif()
endfunction()

# For one _cases entry: sets _name, _opts (the options as one string), _body (the kernel files'
# own text) and _src, the path of a file WORK/<prefix>_<name>.cl holding common.cl and then the
# kernel files (one, or several joined by "+", in the host's order), which it writes (needs CL_DIR
# and WORK).
macro(kernel_case_source _entry _prefix)
  string(REPLACE "|" ";" _parts "${_entry}")
  list(GET _parts 0 _name)
  list(GET _parts 1 _files)
  list(GET _parts 2 _opts)
  string(REPLACE "+" ";" _files "${_files}")
  set(_src "${WORK}/${_prefix}_${_name}.cl")
  file(READ "${CL_DIR}/common.cl" _common)
  set(_body "")
  foreach(_f IN LISTS _files)
    file(READ "${CL_DIR}/${_f}" _more)
    string(APPEND _body "${_more}")
  endforeach()
  file(WRITE "${_src}" "${_common}${_body}")
endmacro()
