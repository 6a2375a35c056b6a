"""pip install --no-build-isolation .  (inside a venv that sees torch)

Drives the same CMake build as `make` (CMakeLists.txt holds the only list of
sources) and packages the staged Python package, python/syncfree plus the
compiled libsyncfree.so, built against the torch of the installing Python.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def run(self):
        build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DSYNCFREE_BUILD_TESTS=OFF",
            "-DSYNCFREE_BUILD_BENCH=OFF",
            # SYNCFREE_WITH_CUDA=1 in the environment builds the CUDA operator
            # too (needs nvcc and a CUDA build of torch).
            "-DSYNCFREE_WITH_CUDA=" + ("ON" if os.environ.get("SYNCFREE_WITH_CUDA") == "1" else "OFF"),
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 1)])
        staged = os.path.join(build_dir, "python", "syncfree")
        target = os.path.join(os.path.abspath(self.build_lib), "syncfree")
        if self.inplace:
            target = os.path.join(ROOT, "python", "syncfree")
        os.makedirs(target, exist_ok=True)
        for name in ("libsyncfree.so", "_build_info.py"):
            shutil.copy2(os.path.join(staged, name), os.path.join(target, name))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(syncfree VERSION "):
                return line.split()[2]
    raise RuntimeError("version not found in CMakeLists.txt")


setup(
    name="syncfree",
    version=version(),
    description="Static-shape, sync-free balanced subsampling operators for PyTorch",
    packages=["syncfree", "syncfree.compat"],
    package_dir={"syncfree": "python/syncfree", "syncfree.compat": "python/syncfree/compat"},
    ext_modules=[Extension("syncfree.libsyncfree", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.8",
    zip_safe=False,
)
