# Prints the InfiniOps operators the kernel seam wires (its rows with an
# InfiniOps class, in snake case, ';'-separated): the INFINI_OPS_OPS
# allowlist to build InfiniOps with. tools/gpu_run.sh builds InfiniOps so:
#
#   cmake -P cmake/infiniops_allowlist.cmake
#   cmake -DSEAM_LIST=<seam_operators.h> -P cmake/infiniops_allowlist.cmake
cmake_minimum_required(VERSION 3.21)
list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
include(TorchInfiniSeamRows)
if(NOT SEAM_LIST)
  set(SEAM_LIST "${CMAKE_CURRENT_LIST_DIR}/../native/ops/include/torch_infini/ops/seam_operators.h")
endif()
torch_infini_seam_rows(_seams _classes "${SEAM_LIST}")
if(NOT _classes)
  message(FATAL_ERROR "infiniops_allowlist: no seam row with an InfiniOps class in ${SEAM_LIST}")
endif()
torch_infini_infiniops_names(_names "${_classes}")
list(REMOVE_DUPLICATES _names)
string(JOIN ";" _allowlist ${_names})
# To stdout (message() writes to stderr).
execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${_allowlist}")
