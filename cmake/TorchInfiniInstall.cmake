# `cmake --install`: libtorch_infini.so, public headers and the CMake package
# TorchInfini (find_package(TorchInfini) -> TorchInfini::torch_infini).
include(CMakePackageConfigHelpers)

install(TARGETS torch_infini EXPORT TorchInfiniTargets
  LIBRARY DESTINATION "${TORCH_INFINI_INSTALL_LIBDIR}")
install(DIRECTORY
    "${PROJECT_SOURCE_DIR}/native/runtime/include/"
    "${PROJECT_SOURCE_DIR}/native/ops/include/"
    "${PROJECT_SOURCE_DIR}/native/distributed/include/"
    "${PROJECT_SOURCE_DIR}/native/compiler/include/"
  DESTINATION "${TORCH_INFINI_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.h")
install(EXPORT TorchInfiniTargets
  NAMESPACE TorchInfini::
  DESTINATION "${TORCH_INFINI_INSTALL_CMAKEDIR}")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/TorchInfiniConfig.cmake.in"
  "${CMAKE_BINARY_DIR}/TorchInfiniConfig.cmake"
  INSTALL_DESTINATION "${TORCH_INFINI_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${CMAKE_BINARY_DIR}/TorchInfiniConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
    "${CMAKE_BINARY_DIR}/TorchInfiniConfig.cmake"
    "${CMAKE_BINARY_DIR}/TorchInfiniConfigVersion.cmake"
  DESTINATION "${TORCH_INFINI_INSTALL_CMAKEDIR}")
