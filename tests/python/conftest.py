"""Fixtures shared by the Python tests, the skip of the ``cuda`` tests
without a CUDA device, and the order of the tests (slowest first). The
markers and pytest's options are in pyproject.toml; shared code that is not a
fixture is in the ``helpers`` package."""
import os
import pathlib

import pytest
import torch

import syncfree

if os.environ.get("SYNCFREE_EXPECT_INSTALLED"):
    # The pip check must test the installed copy, not a build tree.
    assert "site-packages" in syncfree.__file__, syncfree.__file__

HERE = pathlib.Path(__file__).parent


def pytest_configure(config):
    """Under pytest-xdist, each worker's torch gets its share of the CPUs
    (torch's default is every CPU in every worker: two workers on two cores
    would run four busy threads). Tests that need more threads set them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """The device of a test that runs on both: ``cpu`` always, ``cuda`` marked
    ``cuda`` (skipped without a CUDA device)."""
    return request.param


@pytest.fixture(scope="session")
def tv():
    """torchvision, or the test skips (fails on a leg that pairs torchvision:
    helpers.checks.torchvision_or_skip)."""
    from helpers.checks import torchvision_or_skip

    return torchvision_or_skip()


@pytest.fixture
def fresh_dynamo():
    """dynamo reset before and after the test, its counters cleared: every
    test counts its own compilations and graph breaks."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


# The slowest test files first (measured: whole models compiled, AOTInductor,
# compiled detection steps, opcheck), then the other tests marked `slow`. With
# --maxschedchunk 1 (the Makefile, scripts/check-wheel.sh) pytest-xdist hands
# each worker one test at a time, so the long ones run side by side on both
# workers from the start instead of one of them ending the run on a single
# worker.
SLOWEST_FIRST = (
    "detection/test_torchvision_models.py",
    "detection/test_ddp.py",
    "balanced_sample/test_export.py",
    "stratified_sample/test_torch2.py",
    "compat/test_compile.py",
    "compat/test_samplers.py",
    "tooling/test_examples.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def order(item):
        try:
            name = item.path.relative_to(HERE).as_posix()
        except ValueError:  # a test outside tests/python
            name = item.path.name
        slow = item.get_closest_marker("slow") is not None
        return rank.get(name, len(SLOWEST_FIRST) + (0 if slow else 1))

    items.sort(key=order)  # stable
    reason = cuda_skip_reason()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.get_closest_marker("cuda") is not None:
                item.add_marker(skip)


def cuda_skip_reason():
    """Why the ``cuda`` tests cannot run here, or None: no CUDA device, or a
    build of syncfree without the CUDA operator (unless the run expects one:
    SYNCFREE_EXPECT_CUDA_OPERATOR=1, as the GPU check and the CUDA builds of
    the Makefile set, and then they fail)."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not syncfree._build_info.CUDA_OPERATOR and os.environ.get("SYNCFREE_EXPECT_CUDA_OPERATOR") != "1":
        return "this build of syncfree has no CUDA operator (build with CUDA=ON)"
    return None
