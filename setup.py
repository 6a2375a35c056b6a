"""Builds the syncfree wheel against the torch of the building Python.

    pip wheel --no-build-isolation .          # CPU operator
    SYNCFREE_WITH_CUDA=1 TORCH_CUDA_ARCH_LIST="8.0;9.0" pip wheel --no-build-isolation .

Drives the same CMake build as `make` (CMakeLists.txt holds the only list of
sources) and packages the staged Python package, python/syncfree plus the
compiled libsyncfree.so. The wheel requires the torch minor release it was
compiled against: torch's C++ ABI changes between minor releases.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def torch_minor():
    try:
        import torch
    except ImportError as e:
        raise RuntimeError(
            "building syncfree needs torch in the building Python: install torch first, then "
            "pip wheel --no-build-isolation ."
        ) from e
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def cmake_executable():
    # The cmake of the building environment (pip's cmake) before the system's.
    local = os.path.join(os.path.dirname(sys.executable), "cmake")
    return local if os.path.exists(local) else (shutil.which("cmake") or "cmake")


class CMakeBuild(build_ext):
    def run(self):
        with_cuda = os.environ.get("SYNCFREE_WITH_CUDA") == "1"
        # One CMake build directory per torch and backend choice: a cache
        # configured for another torch must never be reused.
        import torch

        flavour = f"torch{torch.__version__}-{'cuda' if with_cuda else 'cpu'}"
        build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake-" + flavour)
        cmake = cmake_executable()
        configure = [
            cmake, "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DSYNCFREE_BUILD_TESTS=OFF",
            "-DSYNCFREE_BUILD_BENCH=OFF",
            "-DSYNCFREE_WHEEL=ON",
            # SYNCFREE_WITH_CUDA=1 in the environment builds the CUDA operator
            # too (needs nvcc and a CUDA build of torch); TORCH_CUDA_ARCH_LIST
            # picks the GPUs (default 9.0).
            "-DSYNCFREE_WITH_CUDA=" + ("ON" if with_cuda else "OFF"),
        ]
        if os.environ.get("TORCH_CUDA_ARCH_LIST"):
            configure.append("-DTORCH_CUDA_ARCH_LIST=" + os.environ["TORCH_CUDA_ARCH_LIST"])
        ninja = os.path.join(os.path.dirname(sys.executable), "ninja")
        if os.path.exists(ninja) or shutil.which("ninja"):
            configure += ["-G", "Ninja"]
            if os.path.exists(ninja):
                configure.append(f"-DCMAKE_MAKE_PROGRAM={ninja}")
        subprocess.check_call(configure)
        subprocess.check_call([cmake, "--build", build_dir, "-j", str(os.cpu_count() or 1)])
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


def long_description():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


minor = torch_minor()
setup(
    name="syncfree",
    version=version(),
    description="Static-shape, sync-free balanced subsampling operators for PyTorch",
    long_description=long_description(),
    long_description_content_type="text/markdown",
    author="The syncfree developers",
    license="BSD-3-Clause",
    license_files=["LICENSE"],
    keywords=["pytorch", "sampling", "object detection", "cuda", "torch.compile"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C++",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Typing :: Typed",
    ],
    packages=["syncfree", "syncfree.compat"],
    package_dir={"syncfree": "python/syncfree", "syncfree.compat": "python/syncfree/compat"},
    package_data={"syncfree": ["py.typed"]},
    ext_modules=[Extension("syncfree.libsyncfree", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # The torch minor release this build is compiled against (C++ ABI).
    install_requires=[f"torch=={minor}.*"],
    python_requires=">=3.9",
    zip_safe=False,
)
