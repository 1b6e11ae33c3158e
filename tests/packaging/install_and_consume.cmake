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

packaging_step("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/consumer -B ${consumer}
  ${TOOLCHAIN} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
  -DEXPECTED_TTMOE_DIR=${prefix}/share/cmake/ttmoe)
packaging_step("build the consumer" ${CMAKE_COMMAND} --build ${consumer} -j ${JOBS})

# The compile command of `app` (ttmoe::ttmoe alone) must carry no machine-specific ISA flag;
# `app_native` (with ttmoe::native) must carry -march=native.
file(READ ${consumer}/compile_commands.json _cc)
string(JSON _n LENGTH "${_cc}")
math(EXPR _last "${_n} - 1")
set(_seen_app FALSE)
set(_seen_native FALSE)
foreach(i RANGE ${_last})
  string(JSON _cmd GET "${_cc}" ${i} command)
  string(JSON _out ERROR_VARIABLE _no_output GET "${_cc}" ${i} output)
  if(_no_output)
    set(_out "${_cmd}")
  endif()
  if(_out MATCHES "CMakeFiles/app\\.dir/")
    set(_seen_app TRUE)
    if(_cmd MATCHES "(^| )(-march=[^ ]*|-mtune=native|-mavx[^ ]*|-mfma|-msse[^ ]*)")
      message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ttmoe::ttmoe leaks '${CMAKE_MATCH_2}' into the consumer:\n  ${_cmd}")
    endif()
  elseif(_out MATCHES "CMakeFiles/app_native\\.dir/")
    set(_seen_native TRUE)
    if(NOT _cmd MATCHES "-march=native")
      message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ttmoe::native did not add -march=native:\n  ${_cmd}")
    endif()
  endif()
endforeach()
if(NOT _seen_app OR NOT _seen_native)
  message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: compile_commands.json lacks app or app_native")
endif()
message(STATUS "[${PACKAGING_TEST}] compile flags: ttmoe::ttmoe adds no ISA flag; ttmoe::native adds -march=native")

foreach(app app app_native app_blas)
  if(EXISTS ${consumer}/${app})
    packaging_step("run ${app}" ${consumer}/${app})
  elseif(NOT app STREQUAL "app_blas")
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ${consumer}/${app} was not built")
  else()
    message(STATUS "[${PACKAGING_TEST}] no ttmoe::blas in the installed package (no BLAS found): app_blas skipped")
  endif()
endforeach()
message(STATUS "[${PACKAGING_TEST}] PASSED")
