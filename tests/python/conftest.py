import os

import syncfree

if os.environ.get("SYNCFREE_EXPECT_INSTALLED"):
    # The pip check must test the installed copy, not a build tree.
    assert "site-packages" in syncfree.__file__, syncfree.__file__
