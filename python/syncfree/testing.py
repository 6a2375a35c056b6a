"""Test helpers: keep a step free of host syncs and graph breaks in CPU-only CI.

    from syncfree.testing import assert_no_syncs, assert_no_graph_breaks

    def test_step_is_sync_free():
        assert_no_syncs(step, images, targets)        # fails with the report's table
        assert_no_graph_breaks(step, images, targets)
"""
from typing import Any, Callable

from ._finder import find_graph_breaks, find_syncs

__all__ = ["assert_no_syncs", "assert_no_graph_breaks"]


def assert_no_syncs(fn: Callable, *args, **kwargs) -> Any:
    """Calls ``fn(*args, **kwargs)`` under :class:`syncfree.find_syncs` and
    raises ``AssertionError`` with the report's table (site, operation, why,
    what to use instead) if it did anything that makes the host wait for a
    GPU or gives a data-dependent shape; returns ``fn``'s result otherwise."""
    with find_syncs() as report:
        out = fn(*args, **kwargs)
    report.assert_none()
    return out


def assert_no_graph_breaks(fn: Callable, *args, **kwargs) -> None:
    """Raises ``AssertionError`` with the reasons and their sites if
    ``torch.compile`` would break ``fn(*args, **kwargs)``'s graph
    (:func:`syncfree.find_graph_breaks`, which runs ``fn`` once)."""
    report = find_graph_breaks(fn, *args, **kwargs)
    if report.graph_break_count or len(report):
        raise AssertionError(report.table())
