# TORCH_INFINI_SANITIZE: every target of this project (the static libraries,
# libtorch_infini, the C++ tests, the Python module) built with the listed
# sanitizers: "address,undefined" (ASan + UBSan) or "thread" (TSan).
# PyTorch stays uninstrumented; tools/sanitizers/ holds the suppressions for
# what is PyTorch's and ci/sanitize.sh runs ctest and Python tests this way.
# The installed package carries the link flag, so a LibTorch application
# built against it links the sanitizer runtime too.
set(TORCH_INFINI_SANITIZE "" CACHE STRING
  "Sanitizers to build with: address,undefined | thread | (empty: none)")
set(TORCH_INFINI_SANITIZER_LINK_OPTIONS "")
if(TORCH_INFINI_SANITIZE)
  string(REPLACE "," ";" _ti_sanitizers "${TORCH_INFINI_SANITIZE}")
  foreach(_ti_sanitizer IN LISTS _ti_sanitizers)
    if(NOT _ti_sanitizer MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "TORCH_INFINI_SANITIZE: unknown sanitizer '${_ti_sanitizer}' "
                          "(use address, undefined or thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _ti_sanitizers AND "address" IN_LIST _ti_sanitizers)
    message(FATAL_ERROR "TORCH_INFINI_SANITIZE: thread and address cannot be combined")
  endif()
  # -O1: the usual sanitizer build (readable stacks, quick to compile);
  # -g1: line tables, all a report's stack needs (full -g doubles the
  # compile time of every ATen translation unit). Every report is fatal,
  # so a test fails on it.
  add_compile_options(-fsanitize=${TORCH_INFINI_SANITIZE} -fno-omit-frame-pointer -g1 -O1
                      -fno-sanitize-recover=all)
  set(TORCH_INFINI_SANITIZER_LINK_OPTIONS "-fsanitize=${TORCH_INFINI_SANITIZE}")
  add_link_options(${TORCH_INFINI_SANITIZER_LINK_OPTIONS})
  message(STATUS "torch-infini: built with -fsanitize=${TORCH_INFINI_SANITIZE}")
endif()
