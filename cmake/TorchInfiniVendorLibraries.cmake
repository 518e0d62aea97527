# The vendor libraries an installed Infini library was linked against, which
# every executable linking libtorch_infini must then resolve too (a CUDA
# build of InfiniOps needs the CUDA runtime and cuBLAS; an NCCL build of
# InfiniCCL needs the CUDA runtime and NCCL).
#
# torch_infini_vendor_link_dependencies(<library> <package> <out_files> [<out_targets>])
#   reads <library>'s DT_NEEDED list (readelf), finds each vendor library
#   (CUDA ones through FindCUDAToolkit: hint CUDAToolkit_ROOT, or
#   CUDA_<name>_LIBRARY for one installed apart, such as the nvidia-cublas
#   wheel; NCCL: NCCL_ROOT or NCCL_LIBRARY) and returns their files (and the
#   CMake targets of the CUDA ones). Stops configuration, naming what is
#   missing and what to set, when one cannot be found.
#
# torch_infini_imported_vendor_library(<target> <library> <include_dir> [<dependency files>...])
#   the imported target of such a library, carrying those files.
include_guard(GLOBAL)

function(_ti_needed_libraries library out)
  set(_needed "")
  if(CMAKE_READELF)
    execute_process(COMMAND "${CMAKE_READELF}" -d "${library}"
      OUTPUT_VARIABLE _dynamic ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0)
      string(REGEX MATCHALL "\\(NEEDED\\)[^[]*\\[[^]]+\\]" _entries "${_dynamic}")
      foreach(_entry IN LISTS _entries)
        string(REGEX REPLACE ".*\\[([^]]+)\\]" "\\1" _name "${_entry}")
        list(APPEND _needed "${_name}")
      endforeach()
    endif()
  else()
    message(WARNING "torch-infini: no readelf found; cannot tell which vendor "
      "libraries ${library} needs, so executables linking torch-infini may not link")
  endif()
  set(${out} "${_needed}" PARENT_SCOPE)
endfunction()

# The FindCUDAToolkit target a needed soname names ("" if none).
function(_ti_cuda_target soname out)
  set(_target "")
  if(soname MATCHES "^libcudart\\.so")
    set(_target CUDA::cudart)
  elseif(soname MATCHES "^libcublasLt\\.so")
    set(_target CUDA::cublasLt)
  elseif(soname MATCHES "^libcublas\\.so")
    set(_target CUDA::cublas)
  elseif(soname MATCHES "^libcuda\\.so")
    set(_target CUDA::cuda_driver)
  endif()
  set(${out} "${_target}" PARENT_SCOPE)
endfunction()

function(torch_infini_vendor_link_dependencies library package out_files)
  _ti_needed_libraries("${library}" _needed)
  set(_targets "")
  set(_files "")
  set(_unresolved "")
  foreach(_lib IN LISTS _needed)
    _ti_cuda_target("${_lib}" _target)
    if(_target)
      list(APPEND _targets ${_target})
    elseif(_lib MATCHES "^libnccl\\.so")
      if(NOT DEFINED NCCL_ROOT AND DEFINED ENV{NCCL_ROOT})
        set(NCCL_ROOT "$ENV{NCCL_ROOT}")
      endif()
      find_library(NCCL_LIBRARY NAMES nccl "${_lib}" HINTS ${NCCL_ROOT} PATH_SUFFIXES lib lib64)
      if(NCCL_LIBRARY)
        list(APPEND _files "${NCCL_LIBRARY}")
      else()
        list(APPEND _unresolved "NCCL (${_lib}: set NCCL_ROOT or NCCL_LIBRARY)")
      endif()
    endif()
  endforeach()
  if(_targets)
    find_package(CUDAToolkit QUIET)
    foreach(_target IN LISTS _targets)
      if(TARGET ${_target})
        get_target_property(_file ${_target} IMPORTED_LOCATION)
        list(APPEND _files "${_file}")
      else()
        list(APPEND _unresolved ${_target})
      endif()
    endforeach()
  endif()
  if(_unresolved)
    list(JOIN _needed ", " _needed_text)
    list(JOIN _unresolved ", " _unresolved)
    message(FATAL_ERROR "${package} at ${library} is a CUDA build "
      "(it needs ${_needed_text}), but CMake did not find ${_unresolved}. "
      "Set CUDAToolkit_ROOT to the CUDA toolkit, and CUDA_cublas_LIBRARY / "
      "CUDA_cublasLt_LIBRARY where cuBLAS lies apart from it (for example the "
      "nvidia-cublas wheel's lib/libcublas.so.13).")
  endif()
  set(${out_files} "${_files}" PARENT_SCOPE)
  if(ARGC GREATER 3)
    set(${ARGV3} "${_targets}" PARENT_SCOPE)
  endif()
endfunction()

function(torch_infini_imported_vendor_library target library include_dir)
  add_library(${target} SHARED IMPORTED)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${library}"
    INTERFACE_INCLUDE_DIRECTORIES "${include_dir}")
  # The library links its vendor libraries itself; its consumers' linkers
  # must find them (CMake then passes their directories as -rpath-link).
  # FindCUDAToolkit's targets are UNKNOWN IMPORTED, which CMake does not
  # follow for -rpath-link: give it the files.
  if(ARGN)
    set_property(TARGET ${target} APPEND PROPERTY IMPORTED_LINK_DEPENDENT_LIBRARIES ${ARGN})
  endif()
endfunction()
