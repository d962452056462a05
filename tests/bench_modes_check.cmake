# bench_modes_check.cmake - runs `clflash-bench --features`, `--decode` and `--varlen` once at
# small shapes and checks what they printed, and shows that the flash-naive comparison of the
# forward and of the backward can fail.
#
#   cmake -DBENCH=<clflash-bench> -P bench_modes_check.cmake
#
# --features: every case ran, reports a time and a cost, and counts the visible (query, key) pairs
# the descriptor's rules leave (batch 2, 2 heads, seq 37, window 5, key lengths 37 and 20; the
# counts are worked out below). --decode: every seq_k ran and reports a time and K/V bytes.
# --varlen: the packed call agrees with the separate calls ("check: ok"), both cases report a
# time, the JSON carries the shape tools/torch_varlen_bench.py reads and the exact pair count, and
# a bad option is a usage error (exit 2).
cmake_minimum_required(VERSION 3.19)
if(NOT DEFINED BENCH)
  message(FATAL_ERROR "bench_modes_check.cmake: -DBENCH=... is required")
endif()

# case name and its visible pairs over 2 batch entries x 2 heads:
#   plain, softcap, alibi, bias, bias-full,
#   bias-keys                               4 * 37 * 37                     = 5476
#   causal, causal-softcap, causal-alibi    4 * 37 * 38 / 2                 = 2812
#   keylens (37, 20)                        2 * 37 * (37 + 20)              = 4218
#   window (5 left and right)               4 * (37 * 11 - 2 * (5+4+3+2+1)) = 1508
#   causal-window (5 left)                  4 * (37 * 6 - (5+4+3+2+1))      = 828
set(_cases plain causal keylens window causal-window softcap causal-softcap alibi causal-alibi bias bias-full
           bias-keys)
set(_pairs 5476 2812 4218 1508 828 5476 2812 5476 2812 5476 5476 5476)
string(REPLACE ";" "," _case_list "${_cases}")
execute_process(COMMAND "${BENCH}" --features --json --seq 37 --batch 2 --heads 2 --head-dim 16 --dtype f32
                        --warmup 0 --min-time 0 --window 5 --key-lengths 37,20 --cases ${_case_list}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "clflash-bench --features:\n${_out}\nstderr:\n${_err}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "clflash-bench --features exited with ${_rc}")
endif()
set(_failed "")
string(JSON _n ERROR_VARIABLE _jerr LENGTH "${_out}" rows)
if(_jerr)
  message(FATAL_ERROR "--features: the output is not the expected JSON: ${_jerr}")
endif()
list(LENGTH _cases _want)
if(NOT _n EQUAL _want)
  string(APPEND _failed "  --features: ${_n} rows, want ${_want}\n")
else()
  math(EXPR _last "${_n} - 1")
  foreach(_i RANGE ${_last})
    list(GET _cases ${_i} _case)
    list(GET _pairs ${_i} _want_pairs)
    string(JSON _name GET "${_out}" rows ${_i} case)
    string(JSON _status GET "${_out}" rows ${_i} status)
    if(NOT _name STREQUAL _case OR NOT _status MATCHES "^CLFLASH_SUCCESS")
      string(APPEND _failed "  --features row ${_i}: ${_name}, ${_status} (want ${_case}, success)\n")
      continue()
    endif()
    string(JSON _got_pairs GET "${_out}" rows ${_i} pairs)
    string(JSON _ms GET "${_out}" rows ${_i} ms)
    string(JSON _cost GET "${_out}" rows ${_i} cost)
    if(NOT _got_pairs EQUAL _want_pairs)
      string(APPEND _failed "  --features ${_case}: ${_got_pairs} visible pairs, want ${_want_pairs}\n")
    endif()
    if(NOT _ms GREATER 0 OR NOT _cost GREATER 0)
      string(APPEND _failed "  --features ${_case}: ms ${_ms}, cost ${_cost} (want both > 0)\n")
    endif()
  endforeach()
endif()

execute_process(COMMAND "${BENCH}" --decode --json --heads-q 4 --heads-kv 2 --seq-k 1,333 --head-dim 16
                        --dtype f32 --warmup 0 --min-time 0
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "clflash-bench --decode:\n${_out}\nstderr:\n${_err}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "clflash-bench --decode exited with ${_rc}")
endif()
string(JSON _n ERROR_VARIABLE _jerr LENGTH "${_out}" rows)
if(_jerr OR NOT _n EQUAL 2)
  string(APPEND _failed "  --decode: want 2 rows (${_jerr})\n")
else()
  foreach(_i 0 1)
    string(JSON _status GET "${_out}" rows ${_i} status)
    string(JSON _seq GET "${_out}" rows ${_i} seq_k)
    if(NOT _status MATCHES "^CLFLASH_SUCCESS")
      string(APPEND _failed "  --decode seq_k ${_seq}: ${_status}\n")
      continue()
    endif()
    string(JSON _bytes GET "${_out}" rows ${_i} kv_bytes)
    string(JSON _ms GET "${_out}" rows ${_i} ms_call)
    # 2 (K and V) * 2 K/V heads * seq_k * 16 * 4 bytes
    math(EXPR _want_bytes "2 * 2 * ${_seq} * 16 * 4")
    if(NOT _bytes EQUAL _want_bytes OR NOT _ms GREATER 0)
      string(APPEND _failed "  --decode seq_k ${_seq}: ${_bytes} bytes (want ${_want_bytes}), ms ${_ms}\n")
    endif()
  endforeach()
endif()
# --varlen at lengths 5, 17, 1 and 33 (56 tokens; a length-1 sequence and one at the longest). The
# table run must pass its check; the JSON run (causal, backward, GQA 4/2, f16) must count
# 4 heads * (5*6 + 17*18 + 1*2 + 33*34) / 2 = 2920 visible pairs.
execute_process(COMMAND "${BENCH}" --varlen --lengths 5,17,1,33 --heads 2 --head-dim 16 --dtype f32
                        --warmup 0 --min-time 0
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "clflash-bench --varlen:\n${_out}\nstderr:\n${_err}")
if(NOT _rc EQUAL 0 OR NOT _out MATCHES "\ncheck: ok" OR NOT _out MATCHES "\nvarlen / separate: ")
  string(APPEND _failed "  --varlen: exit ${_rc}, want 0 with 'check: ok' and the varlen / separate ratio\n")
endif()
execute_process(COMMAND "${BENCH}" --varlen --json --lengths 5,17,1,33 --heads 4 --heads-kv 2 --head-dim 16
                        --dtype f16 --causal --backward --warmup 0 --min-time 0
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "clflash-bench --varlen --json:\n${_out}\nstderr:\n${_err}")
string(JSON _pairs ERROR_VARIABLE _jerr GET "${_out}" pairs)
if(NOT _rc EQUAL 0 OR _jerr)
  string(APPEND _failed "  --varlen --json: exit ${_rc}, ${_jerr}\n")
else()
  string(JSON _nlen LENGTH "${_out}" config lengths)
  string(JSON _len3 GET "${_out}" config lengths 3)
  string(JSON _heads_kv GET "${_out}" config heads_kv)
  string(JSON _causal GET "${_out}" config causal)
  string(JSON _backward GET "${_out}" config backward)
  string(JSON _ok GET "${_out}" check ok)
  if(NOT _nlen EQUAL 4 OR NOT _len3 EQUAL 33 OR NOT _heads_kv EQUAL 2 OR NOT _causal OR NOT _backward
     OR NOT _pairs EQUAL 2920 OR NOT _ok)
    string(APPEND _failed "  --varlen --json: lengths ${_nlen} (last ${_len3}), heads_kv ${_heads_kv}, causal "
                          "${_causal}, backward ${_backward}, pairs ${_pairs} (want 2920), check ok ${_ok}\n")
  endif()
  foreach(_case varlen separate)
    string(JSON _status GET "${_out}" ${_case} status)
    string(JSON _ms ERROR_VARIABLE _jerr GET "${_out}" ${_case} ms)
    if(NOT _status MATCHES "^CLFLASH_SUCCESS" OR _jerr OR NOT _ms GREATER 0)
      string(APPEND _failed "  --varlen --json ${_case}: ${_status}, ms ${_ms}\n")
    endif()
  endforeach()
  string(JSON _calls GET "${_out}" separate calls)
  string(JSON _ratio GET "${_out}" ratio)
  if(NOT _calls EQUAL 4 OR NOT _ratio GREATER 0)
    string(APPEND _failed "  --varlen --json: ${_calls} separate calls (want 4), ratio ${_ratio}\n")
  endif()
endif()
execute_process(COMMAND "${BENCH}" --varlen --lengths 5,0,3
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 2 OR NOT _err MATCHES "--lengths wants")
  string(APPEND _failed "  --varlen --lengths 5,0,3: exit ${_rc} (want 2 and a usage message): ${_err}\n")
endif()

# The comparison can fail, forward (O) and backward (dQ, dK, dV) alike: a tolerance below f16's
# rounding makes the row and the exit status fail with a "mismatch" message, where the default
# tolerance passes.
foreach(_pass forward backward)
  set(_mode "")
  if(_pass STREQUAL "backward")
    set(_mode --backward)
  endif()
  foreach(_tol default 1e-9)
    set(_extra "")
    if(NOT _tol STREQUAL "default")
      set(_extra --tolerance ${_tol})
    endif()
    execute_process(COMMAND "${BENCH}" ${_mode} --seq 48 --head-dim 16 --heads 2 --dtype f16 --warmup 0
                            --min-time 0 ${_extra}
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
    message(STATUS "clflash-bench ${_mode} --tolerance ${_tol}: exit ${_rc}\n${_out}")
    if(_tol STREQUAL "default" AND NOT _rc EQUAL 0)
      string(APPEND _failed "  the f16 ${_pass} comparison failed at the default tolerance (exit ${_rc})\n")
    elseif(NOT _tol STREQUAL "default" AND (NOT _rc EQUAL 1 OR NOT _out MATCHES "mismatch: the largest"))
      string(APPEND _failed "  ${_pass} --tolerance 1e-9: exit ${_rc} and no mismatch reported"
                            " (want exit 1 and a mismatch)\n")
    endif()
  endforeach()
endforeach()
if(_failed)
  message(FATAL_ERROR "clflash-bench modes:\n${_failed}")
endif()
message(STATUS "clflash-bench --features, --decode and --varlen: every row as expected; both comparisons can fail")
