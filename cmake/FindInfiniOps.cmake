# Finds InfiniOps (it installs no CMake package): headers (infini/ops.h and
# the generated operator-call instantiations) and libinfiniops.
#
# Hints (CMake cache or environment): INFINI_OPS_PREFIX, INFINI_OPS_INCLUDE_DIRS,
# INFINI_OPS_LIBRARY_DIRS, CMAKE_PREFIX_PATH.
#
# Result: target InfiniOps::infiniops (linking InfiniRT::infinirt and the
# vendor libraries the installed library itself needs), InfiniOps_FOUND,
# InfiniOps_OPERATORS (operators the library instantiates),
# InfiniOps_ACTIVE_IMPLEMENTATIONS (it exports which implementation slots
# each operator has per device type: asked at run time),
# InfiniOps_LINK_DEPENDENCIES (those vendor libraries, as CMake targets) and
# InfiniOps_LINK_DEPENDENCY_FILES (their files).
#
# A vendor build of InfiniOps needs its vendor's libraries (the NVIDIA build:
# the CUDA runtime, cuBLAS, cuBLASLt), and so does every executable that links
# libtorch_infini: the linker must resolve them. The library's own list of
# needed libraries decides which; hints for where they are: CUDAToolkit_ROOT,
# or CUDA_cublas_LIBRARY / CUDA_cublasLt_LIBRARY for a cuBLAS installed apart
# from the toolkit (the `nvidia-cublas` wheel).
include(FindPackageHandleStandardArgs)
include(TorchInfiniVendorLibraries)

foreach(_v INFINI_OPS_PREFIX INFINI_OPS_INCLUDE_DIRS INFINI_OPS_LIBRARY_DIRS)
  if(NOT DEFINED ${_v} AND DEFINED ENV{${_v}})
    set(${_v} "$ENV{${_v}}")
  endif()
endforeach()

find_path(InfiniOps_INCLUDE_DIR infini/ops.h
  HINTS ${INFINI_OPS_INCLUDE_DIRS} ${INFINI_OPS_PREFIX}
  PATH_SUFFIXES include)
find_library(InfiniOps_LIBRARY infiniops
  HINTS ${INFINI_OPS_LIBRARY_DIRS} ${INFINI_OPS_PREFIX}
  PATH_SUFFIXES lib lib64)

# Which operators the installed library was built with (its allowlist).
set(InfiniOps_OPERATORS "")
set(InfiniOps_ACTIVE_IMPLEMENTATIONS FALSE)
set(_ti_inst "${InfiniOps_INCLUDE_DIR}/infini/operator_call_instantiations.h")
if(InfiniOps_INCLUDE_DIR AND EXISTS "${_ti_inst}")
  file(STRINGS "${_ti_inst}" _ti_lines REGEX "Operator<::infini::ops::[A-Za-z]+>::Call<")
  foreach(_line IN LISTS _ti_lines)
    string(REGEX MATCH "Operator<::infini::ops::([A-Za-z]+)>" _m "${_line}")
    list(APPEND InfiniOps_OPERATORS "${CMAKE_MATCH_1}")
  endforeach()
  list(REMOVE_DUPLICATES InfiniOps_OPERATORS)
  # Newer InfiniOps select implementation slots per operator (ops.json) and
  # export which ones each operator has per device type.
  file(STRINGS "${_ti_inst}" _ti_active REGEX "active_implementation_indices")
  if(_ti_active)
    set(InfiniOps_ACTIVE_IMPLEMENTATIONS TRUE)
  endif()
endif()

find_package_handle_standard_args(InfiniOps
  REQUIRED_VARS InfiniOps_LIBRARY InfiniOps_INCLUDE_DIR)

set(InfiniOps_LINK_DEPENDENCIES "")
set(InfiniOps_LINK_DEPENDENCY_FILES "")
if(InfiniOps_LIBRARY)
  torch_infini_vendor_link_dependencies("${InfiniOps_LIBRARY}" InfiniOps
    InfiniOps_LINK_DEPENDENCY_FILES InfiniOps_LINK_DEPENDENCIES)
endif()

if(InfiniOps_FOUND AND NOT TARGET InfiniOps::infiniops)
  torch_infini_imported_vendor_library(InfiniOps::infiniops "${InfiniOps_LIBRARY}"
    "${InfiniOps_INCLUDE_DIR}" ${InfiniOps_LINK_DEPENDENCY_FILES})
  if(TARGET InfiniRT::infinirt)
    set_property(TARGET InfiniOps::infiniops APPEND PROPERTY INTERFACE_LINK_LIBRARIES InfiniRT::infinirt)
  endif()
endif()
