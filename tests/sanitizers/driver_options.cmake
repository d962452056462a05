# driver_options.cmake - what AddressSanitizer needs changed for the OpenCL drivers of this
# machine; included by run_sanitized.cmake and run_fuzz.cmake (cmake -P scripts).
#
#   clflash_driver_asan_options(<var>)  sets <var> to "" or to ":protect_shadow_gap=0", to be
#                                       appended to ASAN_OPTIONS.
#
# Why: NVIDIA's OpenCL driver (libnvidia-opencl.so, which loads the CUDA driver) reserves virtual
# memory at fixed low addresses that fall in ASan's shadow gap, which ASan protects by default; the
# driver's initialisation then fails or crashes. protect_shadow_gap=0 is the documented workaround
# (google/sanitizers#629; CUDA projects such as NVIDIA/Fuser run ASan with it). It costs ASan the
# trap on wild accesses into the gap, so it is set only where NVIDIA's driver is registered: the
# ICD loader loads every registered driver in any process that asks for platforms, whichever
# device CLFLASH_DEVICE then picks.
#
# Where the ICD loader (ocl-icd, Khronos') looks: OCL_ICD_FILENAMES (library names or paths,
# ':'-separated), OCL_ICD_VENDORS (a directory of .icd files, or one .icd file),
# OPENCL_VENDOR_PATH (a directory), else /etc/OpenCL/vendors. A driver counts as NVIDIA's when its
# name or its .icd file's content mentions "nvidia" or "libcuda".
# CLFLASH_ASAN_PROTECT_SHADOW_GAP=0 or 1 in the environment overrides the detection.

function(clflash_driver_asan_options out)
  if(DEFINED ENV{CLFLASH_ASAN_PROTECT_SHADOW_GAP} AND NOT "$ENV{CLFLASH_ASAN_PROTECT_SHADOW_GAP}" STREQUAL "")
    if("$ENV{CLFLASH_ASAN_PROTECT_SHADOW_GAP}")
      set(${out} "" PARENT_SCOPE)
    else()
      set(${out} ":protect_shadow_gap=0" PARENT_SCOPE)
    endif()
    return()
  endif()
  set(_text "$ENV{OCL_ICD_FILENAMES}")
  set(_icds "")
  foreach(_where "$ENV{OCL_ICD_VENDORS}" "$ENV{OPENCL_VENDOR_PATH}" "/etc/OpenCL/vendors")
    if("${_where}" STREQUAL "")
      continue()
    endif()
    if(IS_DIRECTORY "${_where}")
      file(GLOB _found "${_where}/*.icd")
      list(APPEND _icds ${_found})
    elseif(EXISTS "${_where}")
      list(APPEND _icds "${_where}")
    endif()
  endforeach()
  foreach(_icd IN LISTS _icds)
    file(READ "${_icd}" _content)
    string(APPEND _text "\n${_icd}\n${_content}")
  endforeach()
  string(TOLOWER "${_text}" _text)
  if(_text MATCHES "nvidia|libcuda")
    message(STATUS "NVIDIA's OpenCL driver is registered: ASan runs with protect_shadow_gap=0")
    set(${out} ":protect_shadow_gap=0" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()
