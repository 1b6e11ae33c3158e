# vcpkg_port: runs ports/ttmoe/portfile.cmake itself, in script mode as vcpkg does, with stand-ins for
# the five vcpkg helpers it calls (vcpkg's tool and scripts cannot be fetched here). The stand-ins do
# what vcpkg's documentation says those helpers do, with the portfile's own arguments:
#   vcpkg_check_features       FEATURES <feature> <option>... -> -D<option>=ON for requested features,
#                              -D<option>=OFF for the others
#   vcpkg_cmake_configure      cmake -S SOURCE_PATH -B <buildtrees>/<triplet>-rel (the outer generator)
#                              -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=<packages> OPTIONS...
#   vcpkg_cmake_install        cmake --build <rel> --target install
#   vcpkg_cmake_config_fixup   moves <packages>/CONFIG_PATH to <packages>/share/<port> and rewrites the
#                              installed-prefix computation of its .cmake files for the new depth
#   vcpkg_install_copyright    FILE_LIST <file>... -> share/<port>/copyright (the files concatenated)
# Then it checks the package layout vcpkg's post-build checks require (share/<port>/copyright, usage, no
# leftover CONFIG_PATH, no debug tree) and builds tests/packaging/consumer against the result with
# find_package(ttmoe CONFIG REQUIRED) from share/ttmoe, as a vcpkg user's CMake would.
# Two passes: the default features (consumer configured only) and `blas` (consumer built and run,
# ttmoe::blas required).
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... [-DCXX_COMPILER=...] -P vcpkg_port.cmake
cmake_minimum_required(VERSION 3.22)   # script mode: the policies portfiles are written for (IN_LIST, ...)
set(PACKAGING_TEST vcpkg_port)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
packaging_toolchain_args(TOOLCHAIN)
file(REMOVE_RECURSE ${WORK_DIR})

function(vcpkg_check_features)
  cmake_parse_arguments(A "" "OUT_FEATURE_OPTIONS" "FEATURES" ${ARGN})
  set(_out "")
  list(LENGTH A_FEATURES _n)
  math(EXPR _last "${_n} - 1")
  foreach(i RANGE 0 ${_last} 2)
    math(EXPR j "${i} + 1")
    list(GET A_FEATURES ${i} _feature)
    list(GET A_FEATURES ${j} _option)
    if(_feature IN_LIST FEATURES)
      list(APPEND _out "-D${_option}=ON")
    else()
      list(APPEND _out "-D${_option}=OFF")
    endif()
  endforeach()
  set(${A_OUT_FEATURE_OPTIONS} "${_out}" PARENT_SCOPE)
endfunction()

function(vcpkg_cmake_configure)
  cmake_parse_arguments(A "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE" ${ARGN})
  if(NOT VCPKG_BUILD_TYPE STREQUAL "release")
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: the portfile should set VCPKG_BUILD_TYPE release (header-only)")
  endif()
  packaging_step("vcpkg_cmake_configure" ${CMAKE_COMMAND} -S ${A_SOURCE_PATH} -B ${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel
    ${TOOLCHAIN} -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR} ${A_OPTIONS} ${A_OPTIONS_RELEASE})
endfunction()

function(vcpkg_cmake_install)
  packaging_step("vcpkg_cmake_install" ${CMAKE_COMMAND} --build ${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel --target install)
endfunction()

function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(A "" "CONFIG_PATH;PACKAGE_NAME" "" ${ARGN})
  if(NOT A_PACKAGE_NAME)
    set(A_PACKAGE_NAME ${PORT})
  endif()
  set(_from ${CURRENT_PACKAGES_DIR}/${A_CONFIG_PATH})
  set(_to ${CURRENT_PACKAGES_DIR}/share/${A_PACKAGE_NAME})
  if(NOT IS_DIRECTORY ${_from})
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: vcpkg_cmake_config_fixup: '${A_CONFIG_PATH}' does not exist in the package")
  endif()
  file(GLOB _files ${_from}/*)
  file(MAKE_DIRECTORY ${_to})
  file(COPY ${_files} DESTINATION ${_to})
  file(REMOVE_RECURSE ${_from})
  # Remove the parents CONFIG_PATH leaves empty (share/cmake).
  get_filename_component(_parent ${_from} DIRECTORY)
  file(GLOB _left ${_parent}/*)
  if(NOT _left)
    file(REMOVE_RECURSE ${_parent})
  endif()
  # share/<port> sits two levels below the prefix: rewrite the prefix computations accordingly.
  file(GLOB _cmake_files ${_to}/*.cmake)
  foreach(f IN LISTS _cmake_files)
    file(READ ${f} _text)
    string(REGEX REPLACE "get_filename_component\\(PACKAGE_PREFIX_DIR \"\\\${CMAKE_CURRENT_LIST_DIR}/[./]*\" ABSOLUTE\\)"
      "get_filename_component(PACKAGE_PREFIX_DIR \"\${CMAKE_CURRENT_LIST_DIR}/../../\" ABSOLUTE)" _text "${_text}")
    string(REGEX REPLACE "(get_filename_component\\(_IMPORT_PREFIX \"\\\${_IMPORT_PREFIX}\" PATH\\)\n)+"
      "get_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\n"
      _text "${_text}")
    file(WRITE ${f} "${_text}")
  endforeach()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(A "" "" "FILE_LIST" ${ARGN})
  set(_text "")
  foreach(f IN LISTS A_FILE_LIST)
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: vcpkg_install_copyright: '${f}' does not exist")
    endif()
    file(READ ${f} _one)
    string(APPEND _text "${_one}")
  endforeach()
  file(WRITE ${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright "${_text}")
endfunction()

# One run of the portfile as vcpkg would run it for the feature list FEATURES.
function(run_port pass)
  set(PORT ttmoe)
  set(TARGET_TRIPLET x64-linux)
  set(CURRENT_BUILDTREES_DIR ${WORK_DIR}/${pass}/buildtrees)
  set(CURRENT_PACKAGES_DIR ${WORK_DIR}/${pass}/packages/${PORT}_${TARGET_TRIPLET})
  set(CMAKE_CURRENT_LIST_DIR ${SOURCE_DIR}/ports/ttmoe)
  message(STATUS "[${PACKAGING_TEST}] pass '${pass}': features: core ${FEATURES}")
  include(${SOURCE_DIR}/ports/ttmoe/portfile.cmake)
  foreach(f include/ttmoe/ttmoe.hpp share/ttmoe/ttmoeConfig.cmake share/ttmoe/ttmoeConfigVersion.cmake
            share/ttmoe/ttmoeTargets.cmake share/ttmoe/usage share/ttmoe/copyright)
    if(NOT EXISTS ${CURRENT_PACKAGES_DIR}/${f})
      message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED (${pass}): the package lacks ${f}")
    endif()
  endforeach()
  file(READ ${CURRENT_PACKAGES_DIR}/share/ttmoe/copyright _copyright)
  file(READ ${SOURCE_DIR}/LICENSE _license)
  if(NOT _copyright STREQUAL _license)
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED (${pass}): share/ttmoe/copyright is not the repository's LICENSE")
  endif()
  foreach(d share/cmake debug)
    if(EXISTS ${CURRENT_PACKAGES_DIR}/${d})
      message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED (${pass}): the package still has ${d}/ (vcpkg's post-build checks reject it)")
    endif()
  endforeach()
  set(_mode OPTIONAL_BLAS)
  set(_only CONFIGURE_ONLY)
  if("blas" IN_LIST FEATURES)
    set(_mode REQUIRE_BLAS)
    set(_only "")
  endif()
  packaging_consume(${CURRENT_PACKAGES_DIR} ${CURRENT_PACKAGES_DIR}/share/ttmoe ${WORK_DIR}/${pass}/consumer ${_mode} ${_only})
endfunction()

set(FEATURES "")
run_port(default)
set(FEATURES blas)
run_port(blas)
message(STATUS "[${PACKAGING_TEST}] PASSED")
