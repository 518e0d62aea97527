# Finds InfiniCCL (its collective library): headers (infiniccl/comm.h) and
# libinfiniccl.
#
# Hints (CMake cache or environment): INFINI_CCL_PREFIX, CMAKE_PREFIX_PATH.
# Its NCCL build needs libnccl and the CUDA runtime to link: NCCL_ROOT or
# NCCL_LIBRARY (e.g. the nvidia-nccl wheel's lib/libnccl.so.2),
# CUDAToolkit_ROOT.
#
# Result: target InfiniCCL::infiniccl, InfiniCCL_FOUND,
# InfiniCCL_LINK_DEPENDENCY_FILES (the vendor libraries it needs).
include(FindPackageHandleStandardArgs)
include(TorchInfiniVendorLibraries)

if(NOT DEFINED INFINI_CCL_PREFIX AND DEFINED ENV{INFINI_CCL_PREFIX})
  set(INFINI_CCL_PREFIX "$ENV{INFINI_CCL_PREFIX}")
endif()

find_path(InfiniCCL_INCLUDE_DIR infiniccl/comm.h
  HINTS ${INFINI_CCL_PREFIX} PATH_SUFFIXES include)
find_library(InfiniCCL_LIBRARY infiniccl
  HINTS ${INFINI_CCL_PREFIX} PATH_SUFFIXES lib lib64)
find_package_handle_standard_args(InfiniCCL
  REQUIRED_VARS InfiniCCL_LIBRARY InfiniCCL_INCLUDE_DIR)

set(InfiniCCL_LINK_DEPENDENCY_FILES "")
if(InfiniCCL_FOUND)
  torch_infini_vendor_link_dependencies("${InfiniCCL_LIBRARY}" InfiniCCL
    InfiniCCL_LINK_DEPENDENCY_FILES)
endif()

if(InfiniCCL_FOUND AND NOT TARGET InfiniCCL::infiniccl)
  torch_infini_imported_vendor_library(InfiniCCL::infiniccl "${InfiniCCL_LIBRARY}"
    "${InfiniCCL_INCLUDE_DIR}" ${InfiniCCL_LINK_DEPENDENCY_FILES})
endif()
