"""Conan test package: builds a small consumer against the created ttmoe package and runs it."""
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class TtmoeTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure(variables={"TTMOE_WITH_BLAS": bool(self.dependencies["ttmoe"].options.blas)})
        cmake.build()

    def test(self):
        if can_run(self):
            for app in ("test_package", "test_package_native"):
                self.run(os.path.join(self.cpp.build.bindir, app), env="conanrun")
            if self.dependencies["ttmoe"].options.blas:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_blas"), env="conanrun")
