# Finds InfiniRT. Prefers InfiniRT's own CMake package (InfiniRTConfig.cmake);
# falls back to searching headers and the library for installs without one.
#
# Hints (CMake cache or environment): INFINI_RT_PREFIX, INFINI_RT_INCLUDE_DIRS,
# INFINI_RT_LIBRARY_DIRS, CUDA_INCLUDE_DIRS (for InfiniRT builds whose public
# headers include CUDA headers), CMAKE_PREFIX_PATH.
#
# Result: target InfiniRT::infinirt, InfiniRT_FOUND, InfiniRT_LIBRARY,
# InfiniRT_INCLUDE_DIR.
include(FindPackageHandleStandardArgs)

macro(_ti_hint var)
  if(NOT DEFINED ${var} AND DEFINED ENV{${var}})
    set(${var} "$ENV{${var}}")
  endif()
endmacro()
foreach(_v INFINI_RT_PREFIX INFINI_RT_INCLUDE_DIRS INFINI_RT_LIBRARY_DIRS CUDA_INCLUDE_DIRS)
  _ti_hint(${_v})
endforeach()

if(NOT INFINI_RT_INCLUDE_DIRS AND NOT INFINI_RT_LIBRARY_DIRS)
  find_package(InfiniRT CONFIG QUIET HINTS ${INFINI_RT_PREFIX})
endif()

if(TARGET InfiniRT::infinirt)
  get_target_property(InfiniRT_INCLUDE_DIR InfiniRT::infinirt INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(_ti_cfg InfiniRT::infinirt IMPORTED_CONFIGURATIONS)
  if(_ti_cfg)
    list(GET _ti_cfg 0 _ti_cfg)
    get_target_property(InfiniRT_LIBRARY InfiniRT::infinirt IMPORTED_LOCATION_${_ti_cfg})
  else()
    get_target_property(InfiniRT_LIBRARY InfiniRT::infinirt IMPORTED_LOCATION)
  endif()
else()
  find_path(InfiniRT_INCLUDE_DIR infini/rt.h
    HINTS ${INFINI_RT_INCLUDE_DIRS} ${INFINI_RT_PREFIX}
    PATH_SUFFIXES include)
  find_library(InfiniRT_LIBRARY infinirt
    HINTS ${INFINI_RT_LIBRARY_DIRS} ${INFINI_RT_PREFIX}
    PATH_SUFFIXES lib lib64)
endif()

find_package_handle_standard_args(InfiniRT
  REQUIRED_VARS InfiniRT_LIBRARY InfiniRT_INCLUDE_DIR)

if(InfiniRT_FOUND AND NOT TARGET InfiniRT::infinirt)
  add_library(InfiniRT::infinirt SHARED IMPORTED)
  set_target_properties(InfiniRT::infinirt PROPERTIES
    IMPORTED_LOCATION "${InfiniRT_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${InfiniRT_INCLUDE_DIR}")
endif()
if(InfiniRT_FOUND AND CUDA_INCLUDE_DIRS)
  set_property(TARGET InfiniRT::infinirt APPEND PROPERTY
    INTERFACE_INCLUDE_DIRECTORIES "${CUDA_INCLUDE_DIRS}")
endif()

# The device types this InfiniRT defines must all be ones torch-infini knows
# (its device type table, native/runtime/include/torch_infini/runtime/
# device_types.h, whose rows are read here): an InfiniRT newer than the
# tested releases stops here, naming what is new, rather than deep in a header.
# The tested releases, for the messages: the InfiniRT row of
# docs/stack_versions.md (the pinned commit, shortened, and the head).
set(TORCH_INFINI_TESTED_INFINIRT "those of torch-infini's docs/stack_versions.md")
set(_ti_versions "${CMAKE_CURRENT_LIST_DIR}/../docs/stack_versions.md")
if(EXISTS "${_ti_versions}")
  file(STRINGS "${_ti_versions}" _ti_row REGEX "^\\| *InfiniRT *\\|")
  if(_ti_row MATCHES "^\\| *InfiniRT *\\| *`([0-9a-f]+)` *\\| *`([0-9a-f]+)` *\\|")
    string(SUBSTRING "${CMAKE_MATCH_1}" 0 8 _ti_pinned)
    set(TORCH_INFINI_TESTED_INFINIRT "${_ti_pinned} (pinned) and ${CMAKE_MATCH_2}")
  endif()
endif()
set(_ti_device_table "${CMAKE_CURRENT_LIST_DIR}/../native/runtime/include/torch_infini/runtime/device_types.h")
# (Read whole and matched, not by lines: the rows end in backslashes, which
# would escape CMake's list separators.)
file(READ "${_ti_device_table}" _ti_table)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_ti_device_table}")
string(REGEX MATCHALL "\n  X\\([a-z]+, +[A-Za-z]+," _ti_rows "${_ti_table}")
set(_ti_known_types "")
foreach(_row IN LISTS _ti_rows)
  string(REGEX MATCH "X\\([a-z]+, +([A-Za-z]+)," _m "${_row}")
  list(APPEND _ti_known_types "${CMAKE_MATCH_1}")
endforeach()
if(InfiniRT_FOUND)
  set(_ti_device_h "")
  foreach(_dir IN LISTS InfiniRT_INCLUDE_DIR)
    if(EXISTS "${_dir}/infini/rt/detail/device.h")
      set(_ti_device_h "${_dir}/infini/rt/detail/device.h")
      break()
    endif()
  endforeach()
  if(_ti_device_h)
    file(STRINGS "${_ti_device_h}" _ti_enum REGEX "^ *k[A-Za-z]+ = [0-9]+,")
    set(_ti_types "")
    foreach(_line IN LISTS _ti_enum)
      string(REGEX MATCH "k([A-Za-z]+) = " _m "${_line}")
      list(APPEND _ti_types "${CMAKE_MATCH_1}")
    endforeach()
    set(_ti_unknown "")
    foreach(_t IN LISTS _ti_types)
      if(NOT _t IN_LIST _ti_known_types)
        list(APPEND _ti_unknown "k${_t}")
      endif()
    endforeach()
    if(_ti_unknown)
      list(JOIN _ti_unknown ", " _ti_unknown)
      message(FATAL_ERROR
        "torch-infini: the InfiniRT at ${InfiniRT_INCLUDE_DIR} defines device types torch-infini "
        "has no capability policy for: ${_ti_unknown}. Tested InfiniRT releases: "
        "${TORCH_INFINI_TESTED_INFINIRT}. Use one of them, or add the types to "
        "native/runtime/include/torch_infini/runtime/device_types.h from InfiniRT's docs/backends.md.")
    endif()
    set(InfiniRT_DEVICE_TYPES "${_ti_types}")
  else()
    message(WARNING "torch-infini: no infini/rt/detail/device.h under ${InfiniRT_INCLUDE_DIR}; "
                    "cannot check InfiniRT's device types against the tested releases "
                    "(${TORCH_INFINI_TESTED_INFINIRT})")
  endif()
endif()
