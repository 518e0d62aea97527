# Compiler settings shared by every target.
# C++ standard: the one PyTorch's CMake config sets (C++20 for 2.13).
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_CXX_VISIBILITY_PRESET default)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

# ccache makes rebuilds of the ATen translation units cheap.
find_program(TORCH_INFINI_CCACHE ccache)
if(TORCH_INFINI_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER "${TORCH_INFINI_CCACHE}")
endif()

# GCC 12 reports c10::SmallVector copies captured in lambdas as maybe
# uninitialized (a known false positive).
add_compile_options(-Wall -Wextra -Wno-unused-parameter -Wno-maybe-uninitialized)

# Functions of the library call each other directly and may be inlined
# across their own translation unit (with -Bsymbolic-functions at link time,
# nothing can interpose them anyway).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-fno-semantic-interposition)
endif()

# ATen's headers are most of each ATen translation unit's compile time (about
# two thirds: GCC parses ATen/ATen.h and torch/library.h in every one). A
# target that includes them precompiles them once instead. ccache caches such
# translation units only where it may ignore the header's timestamps and
# __DATE__/__TIME__ (its documented conditions for precompiled headers), so
# the launcher sets that sloppiness.
option(TORCH_INFINI_PRECOMPILE_HEADERS "Precompile ATen's headers for the targets that include them" ON)
if(TORCH_INFINI_PRECOMPILE_HEADERS AND TORCH_INFINI_CCACHE
   AND CMAKE_CXX_COMPILER_LAUNCHER STREQUAL TORCH_INFINI_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      "${CMAKE_COMMAND}" -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "${TORCH_INFINI_CCACHE}")
endif()

# torch_infini_precompile_aten(<target> [SKIP <source>...]): ATen's headers
# precompiled for <target>. Sources built with options of their own (a PCH
# is only valid for the options it was built with) are listed after SKIP.
function(torch_infini_precompile_aten target)
  if(NOT TORCH_INFINI_PRECOMPILE_HEADERS)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 _pch "" "" "SKIP")
  target_precompile_headers(${target} PRIVATE <ATen/ATen.h> <torch/library.h> <torch/autograd.h>)
  if(_pch_SKIP)
    set_source_files_properties(${_pch_SKIP} TARGET_DIRECTORY ${target} PROPERTIES
      SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()
