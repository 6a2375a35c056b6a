# Installs the build into a fresh prefix, then configures, builds and runs
# tests/consumer against it with find_package(syncfree).
set(prefix "${SYNCFREE_BUILD_DIR}/consumer-test/install")
set(build "${SYNCFREE_BUILD_DIR}/consumer-test/build")
file(REMOVE_RECURSE "${SYNCFREE_BUILD_DIR}/consumer-test")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: command failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${SYNCFREE_BUILD_DIR}" --prefix "${prefix}")
string(REPLACE "|" ";" cuda_hints "${CUDA_HINTS}")
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${build}" -G "${GENERATOR}" ${cuda_hints}
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DTorch_DIR=${TORCH_PREFIX}/Torch" -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${build}")
run("${build}/consumer")
