import os

import syncfree

if os.environ.get("SYNCFREE_EXPECT_INSTALLED"):
    # The pip check must test the installed copy, not a build tree.
    assert "site-packages" in syncfree.__file__, syncfree.__file__


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "models: whole torchvision detection models (minutes on a small CPU); CI runs them on one "
        "torch leg")


# The slowest test files first (measured: whole models compiled, AOTInductor,
# compiled detection steps, opcheck). With --maxschedchunk 1 (the Makefile,
# scripts/check-wheel.sh) pytest-xdist hands each worker one test at a time,
# so the long ones run side by side on both workers from the start instead
# of one of them ending the run on a single worker.
SLOWEST_FIRST = (
    "test_static_rcnn_models.py",
    "test_static_rcnn_ddp.py",
    "test_balanced_sample_export.py",
    "test_stratified_sample_torch2.py",
    "test_compat_compile.py",
    "test_compat.py",
    "test_examples.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FIRST)))  # stable
