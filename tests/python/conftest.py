import os

import syncfree

if os.environ.get("SYNCFREE_EXPECT_INSTALLED"):
    # The pip check must test the installed copy, not a build tree.
    assert "site-packages" in syncfree.__file__, syncfree.__file__


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "models: whole torchvision detection models (minutes on a small CPU); CI runs them on one "
        "torch leg")
