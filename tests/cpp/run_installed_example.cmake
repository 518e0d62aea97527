# ctest driver: install the build into a scratch prefix, build examples/cpp
# against that installed TorchInfini package, run it. A wheel's build tree
# (scikit-build-core) installs the package inside torch_infini/.
# Inputs: BUILD_DIR, SOURCE_DIR, TORCH_PREFIX, GENERATOR.
set(prefix "${BUILD_DIR}/installed-example/prefix")
set(example_build "${BUILD_DIR}/installed-example/build")
file(REMOVE_RECURSE "${prefix}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}")
  endif()
endfunction()

run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
# Called directly: run()'s ARGN would split the prefix list at its ';'.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/cpp" -B "${example_build}" -G "${GENERATOR}"
          "-DCMAKE_PREFIX_PATH=${prefix};${prefix}/torch_infini;${TORCH_PREFIX}"
          -DCMAKE_BUILD_TYPE=Release
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring examples/cpp against the installed package failed (${rc})")
endif()
run("${CMAKE_COMMAND}" --build "${example_build}")
run("${example_build}/infini_example")
