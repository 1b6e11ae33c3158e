"""Conan 2 recipe for ttmoe, a header-only C++20 tensor library.

The package holds only headers; `package_id` clears everything, so one binary package serves every
configuration. The `blas` and `cuda` options map onto the CMake options of the same meaning and decide
which targets `package_info` declares:

    ttmoe::ttmoe   the library (C++20, Eigen, xsimd, fmt, nlohmann_json, threads)
    ttmoe::native  opt-in: -march=native, this machine's SIMD width
    ttmoe::blas    opt-in, with blas=True: float/double GEMM through CBLAS (OpenBLAS)
    ttmoe::cuda    opt-in, with cuda=True: links cudart and cuBLAS for <ttmoe/cuda.hpp>

These are the targets a CMake install (`find_package(ttmoe)`) defines. tests/packaging/conan_create.cmake
runs `conan create` offline against Debian's Eigen, xsimd, fmt and nlohmann_json (platform_requires).
"""
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir

required_conan_version = ">=2.0"


class TtmoeConan(ConanFile):
    name = "ttmoe"
    description = "Header-only C++20 tensors with fused expressions and autograd for test-time mixture-of-experts"
    license = "Apache-2.0"
    topics = ("tensor", "autograd", "mixture-of-experts", "header-only", "simd")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"blas": [True, False], "cuda": [True, False]}
    default_options = {"blas": False, "cuda": False}
    exports_sources = "CMakeLists.txt", "LICENSE", "cmake/*", "include/*"
    no_copy_source = True

    def set_version(self):
        # One source of truth for the version: project(ttmoe VERSION x.y.z) in CMakeLists.txt.
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(ttmoe VERSION ([0-9.]+)", text).group(1)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        # Ranges rather than exact versions, so a profile's [platform_requires] (the system's copies)
        # or ConanCenter's current recipes can satisfy them. xsimd stays below 9: its API changed there.
        self.requires("eigen/[>=3.4 <4]")
        self.requires("xsimd/[>=8.1 <9]")
        self.requires("fmt/[>=9 <13]")
        self.requires("nlohmann_json/[>=3.10 <4]")
        if self.options.blas:
            self.requires("openblas/[>=0.3.20 <1]")

    def validate(self):
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 20)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["TTMOE_BUILD_TESTS"] = False
        tc.cache_variables["TTMOE_BUILD_EXAMPLES"] = False
        tc.cache_variables["TTMOE_BUILD_BENCH"] = False
        tc.cache_variables["TTMOE_PACKAGING_TESTS"] = False
        tc.cache_variables["TTMOE_BLAS"] = bool(self.options.blas)
        tc.cache_variables["TTMOE_CUDA"] = bool(self.options.cuda)
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        # Configuring checks that the dependencies resolve; there is nothing to compile.
        cmake = CMake(self)
        cmake.configure()

    def package(self):
        cmake = CMake(self)
        cmake.install()
        # Consumers get their targets from package_info (CMakeDeps), not from the CMake config files;
        # the build module that resolves platform-provided dependencies goes in their place.
        rmdir(self, os.path.join(self.package_folder, "share"))
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        for module in ("ttmoeConanDeps.cmake", "ttmoeDependencies.cmake"):
            copy(self, module, os.path.join(self.source_folder, "cmake"),
                 os.path.join(self.package_folder, "lib", "cmake", "ttmoe"))

    def package_id(self):
        self.info.clear()

    def _is_conan_package(self, name):
        # A [platform_requires] entry appears among the dependencies without a package folder.
        return any(req.ref.name == name and dep.package_folder is not None
                   for req, dep in self.dependencies.host.items())

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "ttmoe")
        # The aggregate of all components would drag -march=native into every consumer: give it a name
        # nobody asks for, and let the components carry the real targets.
        self.cpp_info.set_property("cmake_target_name", "ttmoe::ttmoe_all")
        # CMakeDeps reads build modules from the package, not from its components.
        self.cpp_info.builddirs = [os.path.join("lib", "cmake", "ttmoe")]
        self.cpp_info.set_property("cmake_build_modules", [os.path.join("lib", "cmake", "ttmoe", "ttmoeConanDeps.cmake")])

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "ttmoe::ttmoe")
        core.includedirs = ["include"]
        core.libdirs = []
        core.bindirs = []
        # Dependencies that are Conan packages are required here; ones a profile declares in
        # [platform_requires] have no package folder and no Conan target: the build module finds them.
        core.requires = [f"{name}::{name}" for name in ("eigen", "xsimd", "fmt", "nlohmann_json")
                         if self._is_conan_package(name)]
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs = ["pthread"]

        native = self.cpp_info.components["native"]
        native.set_property("cmake_target_name", "ttmoe::native")
        native.libdirs = []
        native.bindirs = []
        native.includedirs = []
        native.requires = ["core"]
        if self.settings.compiler in ("gcc", "clang", "apple-clang", "intel-cc"):
            native.cxxflags = ["-march=native"]

        if self.options.blas:
            blas = self.cpp_info.components["blas"]
            blas.set_property("cmake_target_name", "ttmoe::blas")
            blas.libdirs = []
            blas.bindirs = []
            blas.includedirs = []
            blas.defines = ["TTMOE_USE_CBLAS=1"]
            blas.requires = ["core"] + (["openblas::openblas"] if self._is_conan_package("openblas") else [])

        if self.options.cuda:
            # ConanCenter has no CUDA toolkit package: the toolkit's own libraries are linked by name.
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "ttmoe::cuda")
            cuda.libdirs = []
            cuda.bindirs = []
            cuda.includedirs = []
            cuda.requires = ["core"]
            cuda.system_libs = ["cudart", "cublas"]
