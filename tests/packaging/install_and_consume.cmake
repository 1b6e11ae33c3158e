# install_and_consume: configure a fresh build of the source with tests/examples off, install it to a
# temporary prefix, then configure, build and run tests/packaging/consumer against that prefix.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... [-DCXX_COMPILER=...] [-DMAKE_PROGRAM=...]
#         [-DJOBS=2] -P install_and_consume.cmake
set(PACKAGING_TEST install_and_consume)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
if(NOT JOBS)
  set(JOBS 2)
endif()
packaging_toolchain_args(TOOLCHAIN)

set(build ${WORK_DIR}/build)
set(prefix ${WORK_DIR}/prefix)
set(consumer ${WORK_DIR}/consumer)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

packaging_step("configure the library" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} ${TOOLCHAIN}
  -DCMAKE_BUILD_TYPE=Release -DTTMOE_BUILD_TESTS=OFF -DTTMOE_BUILD_EXAMPLES=OFF -DTTMOE_BUILD_BENCH=OFF
  -DTTMOE_PACKAGING_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/nonexistent-default-prefix)
packaging_step("build the library" ${CMAKE_COMMAND} --build ${build} -j ${JOBS})
packaging_step("install to ${prefix}" ${CMAKE_COMMAND} --install ${build} --prefix ${prefix})

foreach(f include/ttmoe/ttmoe.hpp share/cmake/ttmoe/ttmoeConfig.cmake share/cmake/ttmoe/ttmoeConfigVersion.cmake
          share/cmake/ttmoe/ttmoeTargets.cmake share/cmake/ttmoe/ttmoeDependencies.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: the install is missing ${f}")
  endif()
endforeach()
file(GLOB_RECURSE _abs_src LIST_DIRECTORIES false ${prefix}/share/cmake/ttmoe/*.cmake)
foreach(f IN LISTS _abs_src)
  file(READ ${f} _text)
  string(FIND "${_text}" "${SOURCE_DIR}" _at)
  if(NOT _at EQUAL -1)
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ${f} refers to the source tree ${SOURCE_DIR}")
  endif()
endforeach()

packaging_consume(${prefix} ${prefix}/share/cmake/ttmoe ${consumer} OPTIONAL_BLAS)
message(STATUS "[${PACKAGING_TEST}] PASSED")
