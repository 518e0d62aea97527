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
