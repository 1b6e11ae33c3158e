# vcpkg overlay port for ttmoe (header-only). Use it from a checkout of this repository:
#   vcpkg install ttmoe --overlay-ports=<repo>/ports            (classic mode)
#   "vcpkg-configuration": { "overlay-ports": ["<repo>/ports"] }  (manifest mode, see docs/install.md)
# The source is the repository the port sits in, so no download and no hash to keep in step.
# tests/packaging/vcpkg_port.cmake drives the same configure / install / config fix-up sequence, with
# the same options per feature, and builds a consumer against the result.
set(VCPKG_BUILD_TYPE release)   # headers only: a debug tree would be identical
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    blas TTMOE_BLAS
    cuda TTMOE_CUDA
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DTTMOE_BUILD_TESTS=OFF
    -DTTMOE_BUILD_EXAMPLES=OFF
    -DTTMOE_BUILD_BENCH=OFF
    -DTTMOE_PACKAGING_TESTS=OFF
    ${FEATURE_OPTIONS}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/ttmoe)

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
# vcpkg requires share/<port>/copyright: the repository's LICENSE (Apache-2.0).
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
