# Conan profile for an offline `conan create` on Debian bookworm: the library's dependencies come from
# Debian's packages (libeigen3-dev, libxsimd-dev, libfmt-dev, nlohmann-json3-dev, libopenblas-dev),
# which CMake finds itself, so Conan neither downloads nor builds them. `detected` is the profile
# `conan profile detect --name detected` writes for the compiler in use.
include(detected)

[settings]
compiler.cppstd=20

[platform_requires]
eigen/3.4.0
xsimd/8.1.0
fmt/9.1.0
nlohmann_json/3.11.2
openblas/0.3.21
