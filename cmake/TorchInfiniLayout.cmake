# Install layout. A wheel (scikit-build-core) keeps everything inside the
# torch_infini package so _C finds libtorch_infini.so through $ORIGIN; a plain
# `cmake --install` uses the GNU layout for C++ consumers.
include(GNUInstallDirs)
if(SKBUILD)
  set(TORCH_INFINI_INSTALL_LIBDIR "torch_infini")
  set(TORCH_INFINI_INSTALL_PYDIR "torch_infini")
  set(TORCH_INFINI_INSTALL_INCLUDEDIR "torch_infini/include")
  set(TORCH_INFINI_INSTALL_CMAKEDIR "torch_infini/share/cmake/TorchInfini")
else()
  set(TORCH_INFINI_INSTALL_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
  set(TORCH_INFINI_INSTALL_PYDIR "${CMAKE_INSTALL_LIBDIR}/python/torch_infini")
  set(TORCH_INFINI_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TORCH_INFINI_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/TorchInfini")
endif()
