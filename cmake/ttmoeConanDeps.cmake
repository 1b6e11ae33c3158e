# Conan build module (conanfile.py's package_info lists it): runs inside the ttmoe-config.cmake that
# Conan's CMakeDeps generates, after it has defined the ttmoe:: targets.
#
# A dependency a profile declares in [platform_requires] (a system copy, e.g. Debian's Eigen) has no
# Conan package, so CMakeDeps knows no target for it. ttmoeDependencies.cmake, the file a plain CMake
# install uses, finds every dependency by its upstream CMake name: Conan's own packages answer to the
# same names (Eigen3::Eigen, xsimd, fmt::fmt, nlohmann_json::nlohmann_json), system copies to theirs.
# Linking those names covers both cases.
include("${CMAKE_CURRENT_LIST_DIR}/ttmoeDependencies.cmake")
set_property(TARGET ttmoe::ttmoe APPEND PROPERTY INTERFACE_LINK_LIBRARIES
  Eigen3::Eigen xsimd fmt::fmt nlohmann_json::nlohmann_json Threads::Threads)

# ttmoe::blas: Conan's OpenBLAS when it is a Conan package, otherwise the system's BLAS.
if(TARGET ttmoe::blas AND NOT TARGET OpenBLAS::OpenBLAS)
  find_package(BLAS REQUIRED)
  set_property(TARGET ttmoe::blas APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${BLAS_LIBRARIES})
endif()
