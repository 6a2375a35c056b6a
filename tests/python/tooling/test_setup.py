"""setup.py's choices: the CUDA operator (auto when torch is a CUDA build and nvcc is found), the Python entry."""
import importlib.util
import os
import stat

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


@pytest.fixture(scope="module")
def setup_py():
    spec = importlib.util.spec_from_file_location("syncfree_setup", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines the functions, builds nothing
    return module


@pytest.mark.parametrize("setting", [None, "", "auto", "AUTO"])
def test_auto_builds_cuda_with_cuda_torch_and_nvcc(setup_py, setting):
    assert setup_py.cuda_choice(setting, "13.0", "/opt/cuda/bin/nvcc") == (
        True, "torch is a CUDA 13.0 build, nvcc: /opt/cuda/bin/nvcc")
    on, why = setup_py.cuda_choice(setting, None, "/opt/cuda/bin/nvcc")
    assert not on and "torch is a CPU build" in why
    on, why = setup_py.cuda_choice(setting, "13.0", None)
    assert not on and "nvcc not found" in why


def test_zero_opts_out_and_one_requires(setup_py):
    assert setup_py.cuda_choice("0", "13.0", "/opt/cuda/bin/nvcc") == (False, "SYNCFREE_WITH_CUDA=0")
    assert setup_py.cuda_choice("1", "13.0", "/opt/cuda/bin/nvcc")[0]
    with pytest.raises(RuntimeError, match=r"SYNCFREE_WITH_CUDA=1, but .*nvcc not found"):
        setup_py.cuda_choice("1", "13.0", None)
    with pytest.raises(RuntimeError, match=r"SYNCFREE_WITH_CUDA=1, but .*torch is a CPU build"):
        setup_py.cuda_choice("1", None, "/opt/cuda/bin/nvcc")
    with pytest.raises(RuntimeError, match=r"SYNCFREE_WITH_CUDA must be 0, 1 or unset \(auto\), got 'yes'"):
        setup_py.cuda_choice("yes", "13.0", "/opt/cuda/bin/nvcc")


def fake_nvcc(folder):
    os.makedirs(os.path.join(folder, "bin"))
    nvcc = os.path.join(folder, "bin", "nvcc")
    with open(nvcc, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(nvcc, os.stat(nvcc).st_mode | stat.S_IXUSR)
    return nvcc


def test_nvcc_from_cuda_home_then_path(setup_py, tmp_path):
    home = fake_nvcc(str(tmp_path / "home"))
    on_path = fake_nvcc(str(tmp_path / "path"))
    empty = str(tmp_path / "empty")
    assert setup_py.find_nvcc({"CUDA_HOME": str(tmp_path / "home"), "PATH": os.path.dirname(on_path)}) == home
    assert setup_py.find_nvcc({"CUDA_PATH": str(tmp_path / "home"), "PATH": empty}) == home
    assert setup_py.find_nvcc({"PATH": os.path.dirname(on_path)}) == on_path
    # A CUDA_HOME without nvcc is not silently replaced by another toolkit.
    assert setup_py.find_nvcc({"CUDA_HOME": empty, "PATH": os.path.dirname(on_path)}) is None
    # Neither: /usr/local/cuda if it has one.
    default = "/usr/local/cuda/bin/nvcc"
    assert setup_py.find_nvcc({"PATH": empty}) == (default if os.access(default, os.X_OK) else None)


@pytest.mark.parametrize("setting, cmake", [(None, "AUTO"), ("", "AUTO"), ("auto", "AUTO"), (" Auto ", "AUTO"),
                                            ("0", "OFF"), ("1", "ON")])
def test_python_entry_choice(setup_py, setting, cmake):
    assert setup_py.python_entry_choice(setting) == cmake


def test_python_entry_choice_refuses_other_values(setup_py):
    with pytest.raises(RuntimeError, match=r"SYNCFREE_PYTHON_ENTRY must be 0, 1 or unset \(auto\), got 'yes'"):
        setup_py.python_entry_choice("yes")
