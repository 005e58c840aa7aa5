"""Builds the hixl Python package with CMake: the native module hixl._hixl,
the library it links (libhixl.so.0, next to it, found through $ORIGIN) and
the hixlrun launcher (hixl/bin/hixlrun, started by the `hixlrun` command).
Metadata is in pyproject.toml.  HIXL_CMAKE_ARGS adds CMake options;
HIXL_CMAKE_BUILD_DIR sets the folder CMake builds in (default: one under
setuptools' build_temp)."""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self):
        super().__init__("hixl._hixl", sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        src = os.path.dirname(os.path.abspath(__file__))
        build = os.path.abspath(os.environ.get("HIXL_CMAKE_BUILD_DIR") or os.path.join(self.build_temp, "cmake"))
        stage = os.path.abspath(os.path.join(self.build_temp, "stage"))
        shutil.rmtree(stage, ignore_errors=True)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(
            ["cmake", "-S", src, "-B", build, *generator,
             "-DCMAKE_BUILD_TYPE=Release", "-DHIXL_BUILD_TESTS=OFF", "-DHIXL_BUILD_BENCH=OFF",
             "-DHIXL_BUILD_EXAMPLES=OFF", f"-DHIXL_PYTHON_EXECUTABLE={sys.executable}",
             # Library and package in one folder, so the module finds the
             # library through an RPATH of $ORIGIN.
             f"-DCMAKE_INSTALL_PREFIX={stage}", "-DCMAKE_INSTALL_LIBDIR=hixl",
             f"-DHIXL_PYTHON_INSTALL_DIR={stage}",
             *shlex.split(os.environ.get("HIXL_CMAKE_ARGS", ""))])
        subprocess.check_call(["cmake", "--build", build, "--target", "hixl", "hixl_python", "hixlrun"])
        subprocess.check_call(["cmake", "--install", build])

        out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(os.path.join(out, "bin"), exist_ok=True)
        staged = os.path.join(stage, "hixl")
        for name in os.listdir(staged):
            path = os.path.join(staged, name)
            if name.startswith("_hixl") and name.endswith(".so"):
                shutil.copyfile(path, self.get_ext_fullpath(ext.name))
            elif name == "libhixl.so.0":  # the soname; the link resolves to the versioned file
                shutil.copyfile(path, os.path.join(out, name))
        shutil.copy2(os.path.join(stage, "bin", "hixlrun"), os.path.join(out, "bin", "hixlrun"))


setup(ext_modules=[CMakeExtension()], cmdclass={"build_ext": CMakeBuild},
      package_data={"hixl": ["bin/hixlrun", "libhixl.so.0"]})
