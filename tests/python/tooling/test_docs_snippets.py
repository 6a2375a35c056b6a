"""Every ```python block of README.md and docs/*.md runs as written, offline,
and every relative link of the pages leads somewhere.

Each block runs alone, in a fresh namespace (its imports included): a reader
can paste any one of them. A block that is not meant to run here says so
with a marker on the line just before it, which the rendered page hides:

    <!-- snippet: not run (the reason) -->

such blocks are skipped with that reason (and counted in the skips). A block
that documents a limit of some torch releases says which it needs:

    <!-- snippet: torch < 2.15 (the reason) -->

and is skipped, with the reason, on the others only. A block
that imports torchvision skips without it, except on the CI leg that pairs
torchvision with torch (SYNCFREE_EXPECT_TORCHVISION=1), where it must run.

A relative link of README.md, csrc/README.md, docs/*.md or docs/archive/*.md
must name a file or folder of the repository, and a `#anchor` must be a
heading of the page it names (as GitHub makes anchors from headings).
"""
import glob
import os
import re
import sys
import types
import warnings

import pytest
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
MARKER = re.compile(r"^<!--\s*snippet:\s*not run\s*\((?P<reason>[^)]+)\)\s*-->\s*$")
OPEN = re.compile(r"^```python\s*$")
VERSION_MARKER = re.compile(
    r"^<!--\s*snippet:\s*torch\s*<\s*(?P<version>[0-9]+\.[0-9]+)\s*\((?P<reason>[^)]+)\)\s*-->\s*$")


def _torch_minor():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def _skip_reason(line):
    """The reason to skip the block after `line` on this torch, or None."""
    marker = MARKER.match(line)
    if marker:
        return marker["reason"]
    marker = VERSION_MARKER.match(line)
    if marker and _torch_minor() >= tuple(int(x) for x in marker["version"].split(".")):
        return f"needs torch < {marker['version']}: {marker['reason']}"
    return None


def snippets():
    """(id, code, reason to skip or None) for each ```python block."""
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    found = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        i = 0
        while i < len(lines):
            if OPEN.match(lines[i]):
                start = i
                j = i + 1
                while j < len(lines) and lines[j].strip() != "```":
                    j += 1
                assert j < len(lines), f"{path}:{start + 1}: unterminated ```python block"
                reason = _skip_reason(lines[start - 1]) if start > 0 else None
                name = f"{os.path.relpath(path, ROOT)}:{start + 1}"
                found.append(pytest.param("\n".join(lines[start + 1:j]), reason, id=name))
                i = j
            i += 1
    return found


SNIPPETS = snippets()


def test_snippets_found():
    # The pages that hold the examples a user copies: README's one per op
    # family and make_static; the reference's per op; the detection page's
    # drop-in and static detector.
    for page, least in [("README.md", 5), ("docs/operators.md", 4), ("docs/detection.md", 2)]:
        assert sum(1 for p in SNIPPETS if p.id.startswith(page + ":")) >= least, page


def _pages():
    return ([os.path.join(ROOT, "README.md"), os.path.join(ROOT, "csrc", "README.md")]
            + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
            + sorted(glob.glob(os.path.join(ROOT, "docs", "archive", "*.md"))))


def _prose(path):
    """(line number, line) of a page outside fenced code blocks."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


def _anchors(path):
    """The anchors GitHub gives the headings of a page."""
    seen, anchors = {}, set()
    for _, line in _prose(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m[1]).replace("`", "").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_relative_links_resolve():
    link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
    checked = 0
    for path in _pages():
        for n, line in _prose(path):
            for target in link.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
                where = f"{os.path.relpath(path, ROOT)}:{n}: {target}"
                assert os.path.exists(dest), f"{where}: no such file"
                if anchor:
                    assert dest.endswith(".md"), f"{where}: an anchor into a file that is not a page"
                    assert anchor in _anchors(dest), f"{where}: no such heading"
                checked += 1
    assert checked >= 40  # the pages link to each other; a broken pattern would find none


def test_markers_are_well_formed():
    # A marker-like line that the pattern does not accept would silently run its block.
    for path in [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if "snippet:" in line and line.lstrip().startswith("<!--"):
                    assert MARKER.match(line.rstrip("\n")) or VERSION_MARKER.match(line.rstrip("\n")), \
                        f"{path}:{n}: malformed marker {line!r}"


def _cleanup():
    # A snippet may patch torchvision globally (syncfree.compat.torchvision.patch()).
    import sys

    tv = sys.modules.get("syncfree.compat.torchvision")
    if tv is not None and tv._original_class is not None:
        tv.unpatch()


@pytest.mark.parametrize("code,skip_reason", SNIPPETS)
def test_snippet_runs(code, skip_reason):
    if skip_reason:
        pytest.skip(f"marked not run: {skip_reason}")
    torch.manual_seed(0)
    try:
        with warnings.catch_warnings():
            # TorchScript is deprecated upstream; the docs say so.
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")
            # In a module of its own, as a reader's script is (torch.compile
            # looks a compiled function's module up in sys.modules).
            module = types.ModuleType("__snippet__")
            sys.modules["__snippet__"] = module
            exec(compile(code, "<snippet>", "exec"), module.__dict__)
    except ModuleNotFoundError as e:
        if e.name == "torchvision" and os.environ.get("SYNCFREE_EXPECT_TORCHVISION") != "1":
            pytest.skip("needs torchvision, which this torch is not paired with")
        raise
    finally:
        sys.modules.pop("__snippet__", None)
        _cleanup()
