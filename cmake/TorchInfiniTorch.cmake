# Locates PyTorch through the Python interpreter that will import the
# package, and records what the build was made against (version, CXX11 ABI)
# for the import-time guard.
find_package(Python 3.10 REQUIRED COMPONENTS Interpreter ${TORCH_INFINI_PYTHON_COMPONENTS})

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(int(torch.compiled_with_cxx11_abi()))"
  OUTPUT_VARIABLE _ti_torch_info
  RESULT_VARIABLE _ti_torch_rc
  ERROR_VARIABLE _ti_torch_err
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ti_torch_rc EQUAL 0)
  message(FATAL_ERROR
    "torch-infini: cannot import torch with ${Python_EXECUTABLE}:\n${_ti_torch_err}\n"
    "Install it first: pip install torch==2.13.0")
endif()
string(REPLACE "\n" ";" _ti_torch_info "${_ti_torch_info}")
list(GET _ti_torch_info 0 _ti_torch_prefix)
list(GET _ti_torch_info 1 TORCH_INFINI_TORCH_VERSION)
list(GET _ti_torch_info 2 TORCH_INFINI_CXX11_ABI)
string(REGEX MATCH "^[0-9]+\\.[0-9]+" TORCH_INFINI_TORCH_MAJOR_MINOR "${TORCH_INFINI_TORCH_VERSION}")
list(APPEND CMAKE_PREFIX_PATH "${_ti_torch_prefix}")
set(TORCH_INFINI_TORCH_CMAKE_PREFIX "${_ti_torch_prefix}")

find_package(Torch REQUIRED)
message(STATUS "torch-infini: PyTorch ${TORCH_INFINI_TORCH_VERSION} (CXX11 ABI ${TORCH_INFINI_CXX11_ABI})")
