"""Builds the syncfree wheel against the torch of the building Python.

    pip install --no-build-isolation .        # or: pip wheel --no-build-isolation .
    TORCH_CUDA_ARCH_LIST="8.0;9.0" pip install --no-build-isolation .

The CUDA operator is built when torch is a CUDA build and nvcc is found
(in $CUDA_HOME/bin, on PATH, or in /usr/local/cuda/bin), as torchvision's
setup does; SYNCFREE_WITH_CUDA=0 leaves it out, SYNCFREE_WITH_CUDA=1 requires
it (the build fails without it). The build prints its choice (pip shows it
with -v). The Python entry (syncfree._C, the wrappers' faster way into the
operators) is built where the building Python has its headers;
SYNCFREE_PYTHON_ENTRY=0 leaves it out, SYNCFREE_PYTHON_ENTRY=1 requires it.

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


def find_nvcc(environ=None):
    """nvcc from $CUDA_HOME (or $CUDA_PATH), PATH, then /usr/local/cuda; None if none is found."""
    environ = os.environ if environ is None else environ
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            nvcc = os.path.join(environ[var], "bin", "nvcc")
            return nvcc if os.access(nvcc, os.X_OK) else None  # a set CUDA_HOME is what is meant
    on_path = shutil.which("nvcc", path=environ.get("PATH", os.defpath))
    if on_path:
        return on_path
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.access(default, os.X_OK) else None


def cuda_choice(setting, torch_cuda, nvcc):
    """(build the CUDA operator?, why) from SYNCFREE_WITH_CUDA ('0', '1', or unset/'auto'),
    torch.version.cuda and the nvcc found. Raises RuntimeError when '1' cannot be met."""
    setting = (setting or "auto").strip().lower()
    if setting not in ("0", "1", "auto"):
        raise RuntimeError(f"SYNCFREE_WITH_CUDA must be 0, 1 or unset (auto), got {setting!r}")
    if setting == "0":
        return False, "SYNCFREE_WITH_CUDA=0"
    missing = []
    if not torch_cuda:
        missing.append("torch is a CPU build (torch.version.cuda is None)")
    if not nvcc:
        missing.append("nvcc not found (looked in $CUDA_HOME/bin, PATH and /usr/local/cuda/bin)")
    if not missing:
        return True, f"torch is a CUDA {torch_cuda} build, nvcc: {nvcc}"
    if setting == "1":
        raise RuntimeError("SYNCFREE_WITH_CUDA=1, but the CUDA operator cannot be built: "
                           + "; ".join(missing))
    return False, "; ".join(missing)


def python_entry_choice(setting):
    """SYNCFREE_PYTHON_ENTRY ('0', '1', or unset/'auto') as CMake's
    SYNCFREE_PYTHON_ENTRY: OFF, ON (the build fails without Python's headers)
    or AUTO (built where this Python has its headers)."""
    setting = (setting or "auto").strip().lower()
    choices = {"0": "OFF", "1": "ON", "auto": "AUTO"}
    if setting not in choices:
        raise RuntimeError(f"SYNCFREE_PYTHON_ENTRY must be 0, 1 or unset (auto), got {setting!r}")
    return choices[setting]


def cmake_executable():
    # The cmake of the building environment (pip's cmake) before the system's.
    local = os.path.join(os.path.dirname(sys.executable), "cmake")
    return local if os.path.exists(local) else (shutil.which("cmake") or "cmake")


class CMakeBuild(build_ext):
    def run(self):
        import torch

        nvcc = find_nvcc()
        with_cuda, why = cuda_choice(os.environ.get("SYNCFREE_WITH_CUDA"), torch.version.cuda, nvcc)
        print(f"syncfree: {'building' if with_cuda else 'not building'} the CUDA operator ({why})",
              file=sys.stderr, flush=True)
        # One CMake build directory per torch and backend choice: a cache
        # configured for another torch must never be reused.

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
            # TORCH_CUDA_ARCH_LIST picks the GPUs (default 9.0).
            "-DSYNCFREE_WITH_CUDA=" + ("ON" if with_cuda else "OFF"),
            "-DSYNCFREE_PYTHON_ENTRY=" + python_entry_choice(os.environ.get("SYNCFREE_PYTHON_ENTRY")),
        ]
        if with_cuda:
            configure.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
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
        with open(os.path.join(staged, "_build_info.py")) as f:
            info = f.read()
        built = 'CUDA_OPERATOR = "ON" == "ON"' in info
        names = ["libsyncfree.so", "_build_info.py"]
        if 'PYTHON_ENTRY = "ON" == "ON"' in info:  # the Python entry, syncfree._C
            names += [n for n in os.listdir(staged) if n.startswith("_C.") and n.endswith(".so")]
        for name in names:
            shutil.copy2(os.path.join(staged, name), os.path.join(target, name))
        if built != with_cuda:
            raise RuntimeError(f"syncfree: the CUDA operator was {'not ' if with_cuda else ''}built, "
                               f"but {'was' if with_cuda else 'was not'} asked for ({why})")


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(syncfree VERSION "):
                return line.split()[2]
    raise RuntimeError("version not found in CMakeLists.txt")


def long_description():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


if __name__ == "__main__":  # pip runs setup.py as __main__; tests import it for cuda_choice
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
        packages=["syncfree", "syncfree.compat", "syncfree.detection"],
        package_dir={"syncfree": "python/syncfree", "syncfree.compat": "python/syncfree/compat",
                     "syncfree.detection": "python/syncfree/detection"},
        package_data={"syncfree": ["py.typed"]},
        ext_modules=[Extension("syncfree.libsyncfree", sources=[])],
        cmdclass={"build_ext": CMakeBuild},
        # The torch minor release this build is compiled against (C++ ABI).
        install_requires=[f"torch=={minor}.*"],
        python_requires=">=3.9",
        zip_safe=False,
    )
