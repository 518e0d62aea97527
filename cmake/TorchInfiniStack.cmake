# A cache option taking AUTO (default), REQUIRE or OFF; <out> gets its value
# in upper case. Any other value stops configuration.
function(_ti_mode_option var doc out)
  set(${var} "AUTO" CACHE STRING "${doc}: AUTO, REQUIRE or OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO REQUIRE OFF)
  string(TOUPPER "${${var}}" _mode)
  if(NOT _mode MATCHES "^(AUTO|REQUIRE|OFF)$")
    message(FATAL_ERROR "${var} must be AUTO, REQUIRE or OFF, got '${${var}}'")
  endif()
  set(${out} "${_mode}" PARENT_SCOPE)
endfunction()

# Whether to serve `infini` through an installed Infini stack (InfiniRT +
# InfiniOps, always as a pair). The project only finds them; it never fetches
# or builds them.
#   TORCH_INFINI_STACK=AUTO     use the stack when both are found (default)
#   TORCH_INFINI_STACK=REQUIRE  fail configuration unless both are found
#   TORCH_INFINI_STACK=OFF      ignore any installed stack (host only)
_ti_mode_option(TORCH_INFINI_STACK "Use the Infini stack" _ti_stack)

set(TORCH_INFINI_WITH_STACK OFF)
if(NOT _ti_stack STREQUAL "OFF")
  find_package(InfiniRT QUIET)
  find_package(InfiniOps QUIET)
  if(InfiniRT_FOUND AND InfiniOps_FOUND)
    set(TORCH_INFINI_WITH_STACK ON)
    message(STATUS "torch-infini: InfiniRT ${InfiniRT_LIBRARY}")
    message(STATUS "torch-infini: InfiniOps ${InfiniOps_LIBRARY} (operators: ${InfiniOps_OPERATORS})")
  else()
    set(_ti_missing "")
    if(NOT InfiniRT_FOUND)
      list(APPEND _ti_missing "InfiniRT (set INFINI_RT_PREFIX, or INFINI_RT_INCLUDE_DIRS and INFINI_RT_LIBRARY_DIRS, or CMAKE_PREFIX_PATH)")
    endif()
    if(NOT InfiniOps_FOUND)
      list(APPEND _ti_missing "InfiniOps (set INFINI_OPS_PREFIX, or INFINI_OPS_INCLUDE_DIRS and INFINI_OPS_LIBRARY_DIRS)")
    endif()
    list(JOIN _ti_missing "; " _ti_missing)
    if(_ti_stack STREQUAL "REQUIRE")
      message(FATAL_ERROR "torch-infini: TORCH_INFINI_STACK=REQUIRE but not found: ${_ti_missing}")
    endif()
    message(STATUS "torch-infini: Infini stack not used (not found: ${_ti_missing}); serving the host device only")
  endif()
endif()

# InfiniCCL, the stack's collective library: the device engine of the c10d
# backend "infini" on accelerators (found, never fetched or built).
#   TORCH_INFINI_INFINICCL=AUTO     use it when found with the stack (default)
#   TORCH_INFINI_INFINICCL=REQUIRE  fail configuration unless found
#   TORCH_INFINI_INFINICCL=OFF      ignore it (gloo through host memory only)
_ti_mode_option(TORCH_INFINI_INFINICCL "Use InfiniCCL" _ti_ccl)
set(TORCH_INFINI_WITH_INFINICCL OFF)
if(NOT _ti_ccl STREQUAL "OFF" AND TORCH_INFINI_WITH_STACK)
  find_package(InfiniCCL QUIET)
  if(InfiniCCL_FOUND)
    set(TORCH_INFINI_WITH_INFINICCL ON)
    message(STATUS "torch-infini: InfiniCCL ${InfiniCCL_LIBRARY}")
  endif()
endif()
if(_ti_ccl STREQUAL "REQUIRE" AND NOT TORCH_INFINI_WITH_STACK)
  # The device engine runs on InfiniRT's devices: without the stack, InfiniCCL is not looked for.
  message(FATAL_ERROR "torch-infini: TORCH_INFINI_INFINICCL=REQUIRE needs the Infini stack, "
    "which was not found (InfiniRT and InfiniOps: see above); InfiniCCL is used with it only")
elseif(_ti_ccl STREQUAL "REQUIRE" AND NOT TORCH_INFINI_WITH_INFINICCL)
  message(FATAL_ERROR "torch-infini: TORCH_INFINI_INFINICCL=REQUIRE but InfiniCCL was not found "
    "(set INFINI_CCL_PREFIX or CMAKE_PREFIX_PATH)")
endif()

# torch_infini_seam_rows: the seam's rows with an InfiniOps class.
include(TorchInfiniSeamRows)

# Defines for the InfiniOps operators the installed library instantiates,
# from the seam's operator list (native/ops/include/torch_infini/ops/
# seam_operators.h): TORCH_INFINI_OPS_HAS_<CLASS>=0/1 per InfiniOps class a
# seam operator maps to, and <binary dir>/generated/infiniops_instantiated.inc,
# one TORCH_INFINI_INSTANTIATED(seam enumerator, class) line per seam
# operator whose class the library instantiates.
function(torch_infini_ops_definitions target seam_list)
  torch_infini_seam_rows(_seams _row_classes "${seam_list}")
  set(_instantiated "")
  foreach(_seam _class IN ZIP_LISTS _seams _row_classes)
    if(_class IN_LIST InfiniOps_OPERATORS)
      string(APPEND _instantiated "TORCH_INFINI_INSTANTIATED(${_seam}, ${_class})\n")
    endif()
  endforeach()
  set(_classes "${_row_classes}")
  list(REMOVE_DUPLICATES _classes)
  foreach(_class IN LISTS _classes)
    string(REGEX REPLACE "([a-z])([A-Z])" "\\1_\\2" _macro "${_class}")
    string(TOUPPER "${_macro}" _macro)
    if(_class IN_LIST InfiniOps_OPERATORS)
      target_compile_definitions(${target} PRIVATE TORCH_INFINI_OPS_HAS_${_macro}=1)
    else()
      target_compile_definitions(${target} PRIVATE TORCH_INFINI_OPS_HAS_${_macro}=0)
    endif()
  endforeach()
  set(_generated "${CMAKE_CURRENT_BINARY_DIR}/generated")
  file(CONFIGURE OUTPUT "${_generated}/infiniops_instantiated.inc" CONTENT "${_instantiated}")
  target_include_directories(${target} PRIVATE "${_generated}")
  if(InfiniOps_ACTIVE_IMPLEMENTATIONS)
    target_compile_definitions(${target} PRIVATE TORCH_INFINI_OPS_HAS_ACTIVE_IMPLEMENTATIONS=1)
  else()
    target_compile_definitions(${target} PRIVATE TORCH_INFINI_OPS_HAS_ACTIVE_IMPLEMENTATIONS=0)
  endif()
endfunction()
