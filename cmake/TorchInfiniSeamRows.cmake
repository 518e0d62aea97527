# Reading the kernel seam's operator list (native/ops/include/torch_infini/
# ops/seam_operators.h, the one list): for the build (TorchInfiniStack.cmake)
# and for scripts (infiniops_allowlist.cmake).

# The seam's rows (seam_operators.h) with an InfiniOps class: their
# enumerators in `out_seams` and classes in `out_classes`, in row order.
function(torch_infini_seam_rows out_seams out_classes seam_list)
  # Read whole and matched: the rows end in backslashes, which would escape
  # CMake's list separators.
  file(READ "${seam_list}" _text)
  # An edited row reconfigures (the defines and the generated list follow
  # it); a script (infiniops_allowlist.cmake) has no configure step.
  if(NOT CMAKE_SCRIPT_MODE_FILE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${seam_list}")
  endif()
  string(REGEX MATCHALL "\n  X\\([A-Za-z]+, [a-z_]+, [A-Za-z]+," _rows "${_text}")
  set(_seams "")
  set(_classes "")
  foreach(_row IN LISTS _rows)
    string(REGEX MATCH "X\\(([A-Za-z]+), [a-z_]+, ([A-Za-z]+)," _m "${_row}")
    if(NOT CMAKE_MATCH_2 STREQUAL "none")
      list(APPEND _seams "${CMAKE_MATCH_1}")
      list(APPEND _classes "${CMAKE_MATCH_2}")
    endif()
  endforeach()
  set(${out_seams} "${_seams}" PARENT_SCOPE)
  set(${out_classes} "${_classes}" PARENT_SCOPE)
endfunction()

# InfiniOps' operator names (its INFINI_OPS_OPS allowlist, its source
# folders) of `classes`: the class names in snake case (RmsNorm -> rms_norm,
# PagedAttentionInfinilm -> paged_attention_infinilm).
function(torch_infini_infiniops_names out classes)
  set(_names "")
  foreach(_class IN LISTS classes)
    string(REGEX REPLACE "([a-z0-9])([A-Z])" "\\1_\\2" _name "${_class}")
    string(TOLOWER "${_name}" _name)
    list(APPEND _names "${_name}")
  endforeach()
  set(${out} "${_names}" PARENT_SCOPE)
endfunction()
