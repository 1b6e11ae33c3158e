# conan_create: `conan create` of the root conanfile.py, offline, with the pinned Conan of the reference
# environment and a private CONAN_HOME under WORK_DIR (the user's ~/.conan2 is never read or written).
# The profile (tests/packaging/conan/debian-bookworm.profile) declares Debian's Eigen, xsimd, fmt,
# nlohmann_json and OpenBLAS as [platform_requires], so nothing is downloaded. With blas=True the test
# package builds and runs the consumer against ttmoe::ttmoe, ttmoe::native and ttmoe::blas.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCONAN=<venv>/bin/conan [-DCXX_COMPILER=...]
#         -P conan_create.cmake
set(PACKAGING_TEST conan_create)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)

if(NOT CONAN OR NOT EXISTS "${CONAN}")
  message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: Conan not found at '${CONAN}'. It is pinned in "
    "requirements/reference.txt; run ./scripts/install-deps.sh to create the reference environment "
    "(or set TTMOE_VENV / -DTTMOE_REF_PYTHON to one that has it).")
endif()

file(REMOVE_RECURSE ${WORK_DIR})
# A copy of what the recipe exports plus the test package and the consumer program it builds, so
# Conan's test_package/build folder lands in WORK_DIR and never in the source tree.
set(src ${WORK_DIR}/src)
foreach(item conanfile.py CMakeLists.txt cmake include test_package tests/packaging/consumer)
  get_filename_component(_parent ${src}/${item} DIRECTORY)
  file(COPY ${SOURCE_DIR}/${item} DESTINATION ${_parent})
endforeach()

set(conan_env ${CMAKE_COMMAND} -E env CONAN_HOME=${WORK_DIR}/conan-home)
if(CXX_COMPILER)
  list(APPEND conan_env CXX=${CXX_COMPILER})
endif()
set(profile ${SOURCE_DIR}/tests/packaging/conan/debian-bookworm.profile)

packaging_step("conan version" ${conan_env} ${CONAN} --version)
packaging_step("detect the compiler profile" ${conan_env} ${CONAN} profile detect --name detected)
packaging_step("conan create (offline, blas=True)" ${conan_env} ${CONAN} create ${src}
  -pr:a ${profile} -o "ttmoe/*:blas=True" --build=missing --no-remote)
message(STATUS "[${PACKAGING_TEST}] PASSED")
