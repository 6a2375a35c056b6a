"""syncfree.find_syncs, find_graph_breaks, syncfree.testing and the command
line ``python -m syncfree.find_syncs`` (no GPU needed): syncs planted in the
functions below are found at their lines with their counts, sync-free code
gives an empty report, each event is attributed to the user's line and to the
library it ran inside, and the report's options, formats and exit statuses.

A planted line ends with ``# sync: KIND`` (``xN``: it runs N times;
``backward``: the event runs in autograd's backward, attributed to the line
that calls ``.backward()``); the expected lines are read from the source, so
editing this file moves them with the code."""
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy
import pytest
import torch
import torch.nn.functional as F

import syncfree
import syncfree.testing
from syncfree._finder import KINDS
from syncfree.find_syncs import main as command_line

HERE = os.path.realpath(__file__)
MARK = re.compile(r"#\s*sync:\s*(\w+)((?:\s+x\d+)?)((?:\s+backward)?)\s*$")


def planted(fn):
    """{(kind, function, line, backward): count} of the lines of ``fn`` marked
    ``# sync: KIND [xN] [backward]``."""
    lines, start = inspect.getsourcelines(fn)
    out = {}
    for i, text in enumerate(lines):
        m = MARK.search(text)
        if m:
            assert m.group(1) in KINDS, f"{fn.__name__}: unknown kind in {text.strip()!r}"
            count = int(m.group(2).strip()[1:]) if m.group(2).strip() else 1
            out[(m.group(1), fn.__qualname__, start + i, bool(m.group(3).strip()))] = count
    assert out, f"{fn.__name__} has no planted line"
    return out


def marked_line(fn, tag):
    """The line number of the one line of ``fn`` that ends with ``tag``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if text.rstrip().endswith(tag)]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


def found(report):
    """{(kind, function, line, backward): count} of the report's entries, all
    of which must be attributed to this file."""
    out = {}
    for e in report.entries:
        assert e.where is not None, f"{e} has no user frame"
        assert os.path.realpath(e.where.file) == HERE, (e.where, HERE)
        key = (e.kind, e.where.function, e.where.line, e.backward)
        out[key] = out.get(key, 0) + e.count
    return out


def run(fn, *args, **kwargs):
    with syncfree.find_syncs(**kwargs) as report:
        fn(*args)
    return report


# --- planted syncs ------------------------------------------------------------------------------

def mask_ops():
    x = torch.arange(6.0)
    m = x > 2
    v = torch.zeros(3)
    one = torch.zeros(())  # a tensor, which a device run makes on the device
    for _ in range(3):
        _ = x[m]  # sync: mask_index x3
    _ = x[m.to(torch.uint8)]  # sync: mask_index
    torch.nonzero(m)  # sync: nonzero
    m.nonzero(as_tuple=True)  # sync: nonzero
    torch.where(m)  # sync: nonzero
    torch.argwhere(m)  # sync: nonzero
    torch.masked_select(x, m)  # sync: masked_select
    torch.where(m, x, 0.0)  # three arguments: no sync
    torch.nonzero_static(m, size=4)  # a static shape: no sync
    y = x.clone()
    y[m] = 0.5  # a Python scalar: ATen runs masked_fill_, no nonzero
    y[m] = v  # sync: mask_assign
    y[m] = one  # sync: mask_assign
    y.masked_fill(m, 1.0)
    y.masked_fill_(m, 2.0)
    _ = x[torch.arange(2)]  # integer indices: no sync
    return y


def host_reads():
    x = torch.arange(4.0)
    s = x.sum()
    i = torch.ones((), dtype=torch.long)
    s.item()  # sync: item
    int(s)  # sync: item
    float(s)  # sync: item
    if s:  # sync: item
        pass
    for _ in range(2):
        bool(s > 0)  # sync: item x2
    _ = [10, 11, 12][i]  # sync: item
    x.tolist()  # sync: tolist
    x.numpy()  # sync: numpy
    numpy.asarray(x)  # sync: numpy
    x.cpu()  # sync: to_host
    x.to("cpu")  # sync: to_host
    x.to(device="cpu")  # sync: to_host
    x.to(torch.float64)  # a dtype only: no copy to the host
    torch.tensor([1, 2], device=x.device)  # sync: from_python
    torch.as_tensor([1.0, 2.0], device=x.device)  # sync: from_python
    torch.tensor([1, 2])  # kept on the host (a scalar to device operations): no copy
    torch.as_tensor([1.0], device="cpu")  # a literal host device: no copy
    torch.full((2,), 3.0)  # made by a factory, not from Python data: no sync


def shapes():
    x = torch.arange(6.0)
    labels = torch.arange(6) % 3
    repeats = torch.arange(1, 4)
    torch.unique(labels)  # sync: unique
    labels.unique()  # sync: unique
    x[:3].repeat_interleave(repeats)  # sync: repeat_interleave
    torch.repeat_interleave(repeats)  # sync: repeat_interleave
    x[:3].repeat_interleave(repeats, output_size=6)  # output_size: no sync
    x.repeat_interleave(2)  # a Python int: no sync
    torch.randperm(5)  # sync: randperm
    torch.equal(x, x)  # sync: equal
    torch.bincount(labels)  # sync: bincount
    torch.histc(x, bins=4)  # sync: histc
    torch.histc(x, bins=4, min=0, max=8)  # a range: no sync


def backward_of_mask_index():
    w = torch.ones(6, requires_grad=True)
    m = torch.arange(6) > 2
    loss = w[m].sum()  # sync: mask_index
    loss.backward()  # sync: mask_assign backward
    return w.grad


@pytest.mark.filterwarnings("ignore:indexing with dtype torch.uint8")
@pytest.mark.parametrize("fn", [mask_ops, host_reads, shapes, backward_of_mask_index], ids=lambda f: f.__name__)
def test_planted_syncs_are_found_at_their_lines(fn):
    """Every planted line is reported, at its line, with its count (3 for the
    line run 3 times in a loop) and kind, and nothing else is: the lines
    commented "no sync" (torch.where with three arguments, nonzero_static,
    x[mask] = 0.5, masked_fill, integer indices, torch.tensor kept on the host,
    repeat_interleave with output_size, histc with a range) have no entry."""
    report = run(fn)
    assert found(report) == planted(fn), str(report)
    assert len(report) == sum(planted(fn).values())


def test_backward_event_names_its_autograd_node():
    """The backward of x[mask] (index_put of a mask in IndexBackward0) is an
    entry of its own, marked backward, that names the node and sits on the
    line that calls .backward(), not on the forward's line."""
    report = run(backward_of_mask_index)
    (entry,) = [e for e in report.entries if e.backward]
    assert "IndexBackward0" in entry.op
    assert entry.where.line == marked_line(backward_of_mask_index, "# sync: mask_assign backward")
    assert "[backward]" in str(report)


def nms_step(tv, boxes, scores):
    return tv.ops.nms(boxes, scores, 0.5)  # sync: nms


def test_torchvision_nms_is_found(tv):
    """torchvision.ops.nms (a data-dependent number of kept boxes) is found at
    the user's line, inside torchvision's Python function."""
    boxes = torch.arange(12.0).reshape(3, 4).cumsum(1)
    scores = torch.linspace(1, 0.5, 3)
    report = run(nms_step, tv, boxes, scores)
    assert found(report) == planted(nms_step), str(report)
    (entry,) = report.entries
    assert entry.library is not None and entry.library.file.startswith("torchvision"), entry


def sync_free_step():
    torch.manual_seed(0)
    x = torch.randn(6)
    m = x > 0
    w = torch.randn(3, 4)
    y = torch.where(m, x, 0.0) * 2 + x.exp() - x.clamp(min=0.5) * m
    z = y.reshape(2, 3) @ w
    z.sort(dim=-1)
    z.topk(2, dim=-1)
    z.cumsum(0)
    x.masked_fill(m, 0.0)
    lin = torch.nn.Linear(4, 2)
    loss = lin(z).relu().sum()
    loss.backward()
    return loss.detach()


def test_sync_free_code_gives_an_empty_report():
    """Elementwise math, torch.where with three arguments, matmul, sort,
    topk, cumsum, masked_fill and a Linear layer with its backward: no entry,
    assert_none passes, the table says there are no host syncs."""
    report = run(sync_free_step)
    assert len(report) == 0 and not report, str(report)
    assert report.entries == [] and report.counts() == {}
    report.assert_none()
    assert "no host syncs" in str(report)
    assert json.loads(report.to_json())["total"] == 0


def one_hot_with_classes():
    labels = torch.arange(6) % 3
    return F.one_hot(labels, num_classes=4)


def test_one_hot_with_num_classes_is_sync_free():
    """F.one_hot(t, num_classes=C) does not read the labels on the host on a
    GPU (only its CPU kernel checks their range): no entry."""
    report = run(one_hot_with_classes)
    assert len(report) == 0, str(report)


def index_put_after_a_scalar_assignment():
    x = torch.arange(6.0)
    m = x > 2
    y = x.clone()
    y[m] = 0.5
    y.index_put_((m,), torch.ones(()))  # sync: mask_assign


def test_a_scalar_assignment_does_not_hide_the_next_index_put():
    """index_put_ of a mask and a one-element tensor (not a Python scalar) is
    reported as mask_assign (as it is alone), also right after an unrelated
    x[mask] = 0.5."""
    x = torch.arange(6.0)
    assert run(lambda: x.clone().index_put_((x > 2,), torch.ones(()))).counts() == {"mask_assign": 1}
    report = run(index_put_after_a_scalar_assignment)
    assert found(report) == planted(index_put_after_a_scalar_assignment), str(report)


# --- attribution --------------------------------------------------------------------------------

def test_attribution_through_torch_and_the_standard_library():
    """An event inside torch's Python code (torch.unique in torch/functional.py,
    F.one_hot without num_classes) is attributed to the calling line, torch's
    frames skipped (no library); one inside the standard library
    (statistics.fmean reading each element as a float) names statistics.py as
    the library and the calling line as the user's."""
    import statistics

    labels = torch.arange(6) % 3
    with syncfree.find_syncs() as report:
        torch.unique(labels)  # call: unique
        F.one_hot(labels)  # call: one_hot
        statistics.fmean(torch.arange(3.0))  # call: fmean
    me = test_attribution_through_torch_and_the_standard_library
    by_kind = {}
    for e in report.entries:
        by_kind.setdefault(e.kind, []).append(e)
        assert os.path.realpath(e.where.file) == HERE and e.where.function == me.__name__, e
    (unique,) = by_kind.pop("unique")
    assert unique.where.line == marked_line(me, "# call: unique") and unique.library is None
    items = by_kind.pop("item")
    assert by_kind == {}, report
    one_hot = [e for e in items if e.where.line == marked_line(me, "# call: one_hot")]
    assert one_hot and all(e.library is None for e in one_hot), items
    (fmean,) = [e for e in items if e.where.line == marked_line(me, "# call: fmean")]
    assert fmean.library is not None and fmean.library.file == "statistics.py", fmean
    assert fmean.library.function == "fmean" and fmean.count == 3
    assert len(items) == len(one_hot) + 1


FAKELIB = """\
def pick(x, m):
    return x[m]  # the library's sync


def apply(fn, x):
    return fn(x)
"""


@pytest.fixture
def fakelib(tmp_path, monkeypatch):
    """A module ``fakelib`` in a folder named site-packages (a library to the
    finder), imported, and removed from sys.path and sys.modules after."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    (folder / "fakelib.py").write_text(FAKELIB)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    import fakelib

    yield fakelib
    sys.modules.pop("fakelib", None)


def test_attribution_through_an_installed_library(fakelib):
    """x[mask] inside a function of an installed library: ``library`` is that
    line of fakelib.py, ``where`` the test's line that called it. A callback of
    the user's that the library calls is the user's code: its own line, no
    library."""
    x = torch.arange(6.0)
    with syncfree.find_syncs() as report:
        fakelib.pick(x, x > 2)  # call: pick
        fakelib.apply(lambda t: t.sum().item(), x)  # call: apply
    me = test_attribution_through_an_installed_library
    pick, callback = report.entries
    assert pick.kind == "mask_index" and pick.count == 1
    lib_line = 1 + FAKELIB.splitlines().index("    return x[m]  # the library's sync")
    assert pick.library == syncfree._finder.Site("fakelib.py", lib_line, "pick")
    assert pick.where.line == marked_line(me, "# call: pick") and pick.where.function == me.__name__
    assert os.path.realpath(pick.where.file) == HERE
    assert callback.kind == "item" and callback.library is None
    assert callback.where.line == marked_line(me, "# call: apply")
    assert "<lambda>" in callback.where.function
    assert "fakelib.py" in str(report)


def test_site_file_follows_the_working_directory(tmp_path, monkeypatch):
    """Site.file is relative to the working directory at the event (or
    absolute): after os.chdir it still names this file."""
    assert os.path.realpath(run(two_kinds).entries[0].where.file) == HERE
    monkeypatch.chdir(tmp_path)
    where = run(two_kinds).entries[0].where
    assert os.path.realpath(where.file) == HERE, where


# --- options and formats ------------------------------------------------------------------------

def two_kinds():
    x = torch.arange(6.0)
    torch.tensor([1.0], device=x.device)  # sync: from_python
    return x[x > 2]  # sync: mask_index


def test_ignore_drops_a_kind():
    """ignore=("from_python",) drops that kind only; Report.filter(ignore=)
    and filter(only=) give the same split of a full report."""
    report = run(two_kinds, ignore=("from_python",))
    assert report.counts() == {"mask_index": 1}
    full = run(two_kinds)
    assert full.counts() == {"from_python": 1, "mask_index": 1}
    assert full.filter(ignore=("from_python",)).counts() == {"mask_index": 1}
    assert full.filter(only=("from_python",)).counts() == {"from_python": 1}
    assert len(full) == 2  # filter copies: the full report is unchanged


@pytest.mark.parametrize("call", ["find_syncs", "filter_ignore", "filter_only", "assert_none"])
def test_unknown_kind_is_a_value_error(call):
    """A kind that is not in KINDS, passed to find_syncs, Report.filter or
    assert_none, raises ValueError naming it."""
    report = run(two_kinds)
    calls = {"find_syncs": lambda: syncfree.find_syncs(ignore=("bogus_kind",)),
             "filter_ignore": lambda: report.filter(ignore=("bogus_kind",)),
             "filter_only": lambda: report.filter(only=("bogus_kind",)),
             "assert_none": lambda: report.assert_none(ignore=("bogus_kind",))}
    with pytest.raises(ValueError, match="bogus_kind"):
        calls[call]()


def test_decorator_accumulates_over_calls():
    """As a decorator, the finder returns the function's value and adds each
    call's events to ``wrapped.report``: two calls, twice the counts, at the
    same sites."""
    wrapped = syncfree.find_syncs()(two_kinds)
    assert wrapped.__name__ == "two_kinds"
    out = wrapped()
    assert torch.equal(out, torch.arange(3.0, 6.0))
    assert wrapped.report.counts() == {"from_python": 1, "mask_index": 1}
    wrapped()
    assert wrapped.report.counts() == {"from_python": 2, "mask_index": 2}
    assert found(wrapped.report) == {key: 2 for key in planted(two_kinds)}
    two_kinds()  # outside the decorator: not recorded
    assert len(wrapped.report) == 4


def test_reentering_an_active_finder_is_an_error():
    """Entering the same finder while it is active raises RuntimeError and
    leaves the outer one recording; after the outer one exits, nothing more is
    recorded (its modes are gone), and an exception inside leaves them too."""
    finder = syncfree.find_syncs()
    with finder as report:
        with pytest.raises(RuntimeError, match="already active"):
            with finder:
                pass
        two_kinds()
    assert len(report) == 2
    two_kinds()
    assert len(report) == 2
    with pytest.raises(ZeroDivisionError):
        with syncfree.find_syncs() as other:
            two_kinds()
            1 / 0
    two_kinds()
    assert len(other) == 2
    assert torch._C._is_torch_function_mode_enabled() is False


@pytest.mark.filterwarnings("ignore:indexing with dtype torch.uint8")
def test_to_json_round_trips():
    """to_json is JSON of to_dict: the total, the counts per kind, and per
    entry its kind, op, sites, count and the why/instead texts of KINDS."""
    report = run(mask_ops)
    d = json.loads(report.to_json())
    assert d == report.to_dict()
    want = {}
    for (kind, *_), count in planted(mask_ops).items():
        want[kind] = want.get(kind, 0) + count
    assert d["total"] == len(report) == sum(want.values())
    assert d["counts"] == report.counts() == want
    assert len(d["entries"]) == len(report.entries)
    for got, entry in zip(d["entries"], report.entries):
        assert got["kind"] == entry.kind and got["count"] == entry.count and got["op"] == entry.op
        assert got["where"] == {"file": entry.where.file, "line": entry.where.line,
                                "function": entry.where.function}
        assert got["library"] is None and got["backward"] is False
        assert got["why"] == KINDS[entry.kind][1] and got["instead"] == KINDS[entry.kind][2]
        assert got["why"] and got["instead"]


def test_assert_none_names_the_site():
    """assert_none raises AssertionError whose message is the table: the site
    (file:line in function), the count and the why text; with the report's
    kinds ignored it passes."""
    report = run(two_kinds)
    with pytest.raises(AssertionError) as info:
        report.assert_none()
    message = str(info.value)
    for (kind, function, line, _), count in planted(two_kinds).items():
        assert f":{line} in {function}" in message
        assert KINDS[kind][1] in message
    assert "test_find_syncs.py" in message
    report.assert_none(ignore=("from_python", "mask_index"))
    with pytest.raises(AssertionError):
        report.assert_none(ignore=("from_python",))


def test_assert_no_syncs():
    """syncfree.testing.assert_no_syncs returns the function's value (with its
    arguments passed through) when it is sync-free, and raises AssertionError
    naming the planted line when it is not."""
    x = torch.arange(4.0)
    out = syncfree.testing.assert_no_syncs(torch.where, x > 1, x, 0.0)
    assert torch.equal(out, torch.tensor([0.0, 0.0, 2.0, 3.0]))
    assert syncfree.testing.assert_no_syncs(lambda a, *, b: a * b, x, b=2.0).tolist() == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(AssertionError) as info:
        syncfree.testing.assert_no_syncs(two_kinds)
    line = marked_line(two_kinds, "# sync: mask_index")
    assert f":{line} in two_kinds" in str(info.value)


# --- graph breaks (torch._dynamo.explain: seconds per call, so few) -----------------------------

def breaks_on_a_branch(x):
    y = x * 2
    if y.sum() > 0:  # sync: graph_break
        return y + 1
    return y - 1


def no_break(x):
    return torch.where(x > 0, x, 0.0).cumsum(0) * 2


def test_find_graph_breaks_on_a_data_dependent_branch():
    """A Python branch on a tensor's value breaks the graph: at least one
    break, an entry at the `if` line, the table says so; assert_no_graph_breaks
    raises with that line."""
    report = syncfree.find_graph_breaks(breaks_on_a_branch, torch.ones(3))
    assert report.graph_break_count >= 1 and report.graph_count >= 2, report
    assert {e.kind for e in report.entries} == {"graph_break"}
    line = marked_line(breaks_on_a_branch, "# sync: graph_break")
    assert any(e.where is not None and e.where.line == line and os.path.realpath(e.where.file) == HERE
               for e in report.entries), str(report)
    assert "graph break" in str(report) and f":{line} in breaks_on_a_branch" in str(report)
    d = report.to_dict()
    assert d["graph_break_count"] == report.graph_break_count and d["graph_count"] == report.graph_count
    with pytest.raises(AssertionError, match=f":{line} in breaks_on_a_branch"):
        syncfree.testing.assert_no_graph_breaks(breaks_on_a_branch, torch.ones(3))


def test_find_graph_breaks_of_a_clean_function():
    """A function without a break: one graph, no break, no entry;
    assert_no_graph_breaks passes; a non-callable is a TypeError."""
    report = syncfree.find_graph_breaks(no_break, torch.ones(3))
    assert (report.graph_count, report.graph_break_count, report.entries) == (1, 0, []), str(report)
    assert str(report).startswith("0 graph breaks")
    syncfree.testing.assert_no_graph_breaks(no_break, torch.ones(3))
    with pytest.raises(TypeError):
        syncfree.find_graph_breaks(torch.ones(3))


# --- the command line ---------------------------------------------------------------------------

STEP = """\
import torch


def step():
    with open("calls.txt", "a") as f:
        f.write("call\\n")
    x = torch.arange(6.0)
    return x[x > 2]  # the planted sync


def boom():
    raise RuntimeError("the step's own error")


def branch():
    x = torch.ones(3)
    if x.sum() > 0:
        return x + 1
    return x


NOT_CALLABLE = 3
"""
STEP_LINE = 1 + STEP.splitlines().index("    return x[x > 2]  # the planted sync")


@pytest.fixture
def step_module(tmp_path, monkeypatch):
    """The module ``fs_cli_step`` written to tmp_path, which is the working
    directory and on sys.path (both restored after)."""
    (tmp_path / "fs_cli_step.py").write_text(STEP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fs_cli_step", raising=False)
    yield tmp_path
    sys.modules.pop("fs_cli_step", None)


def test_command_line_finds_the_planted_sync(step_module):
    """`python -m syncfree.find_syncs fs_cli_step:step --json PATH --fail`:
    exit status 1 (something found), the step called twice (one warmup, the
    default) but only the inspected call counted, the JSON's entry at the
    planted line of the module (relative to the working directory)."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(syncfree.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, str(step_module)]))
    out = step_module / "out.json"
    proc = subprocess.run([sys.executable, "-m", "syncfree.find_syncs", "fs_cli_step:step", "--json", str(out),
                           "--fail"], cwd=step_module, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (step_module / "calls.txt").read_text().count("call") == 2
    d = json.loads(out.read_text())
    assert d["step"] == "fs_cli_step:step" and d["graph_breaks"] == {}
    assert d["syncs"]["total"] == 1 and d["syncs"]["counts"] == {"mask_index": 1}
    (entry,) = d["syncs"]["entries"]
    assert entry["where"] == {"file": "fs_cli_step.py", "line": STEP_LINE, "function": "step"}
    assert entry["library"] is None
    assert f"fs_cli_step.py:{STEP_LINE} in step" in proc.stdout


def test_command_line_exit_status_and_options(step_module):
    """In process (main(argv), what `python -m` exits with): 0 without --fail
    though a sync is found; --warmup 0 calls the step once; --ignore of the
    found kind gives 0 with --fail and an empty JSON report."""
    assert command_line(["fs_cli_step:step", "--warmup", "0"]) == 0
    assert (step_module / "calls.txt").read_text().count("call") == 1
    out = step_module / "ignored.json"
    assert command_line(["fs_cli_step:step", "--ignore", "mask_index", "--fail", "--json", str(out)]) == 0
    assert (step_module / "calls.txt").read_text().count("call") == 3
    assert json.loads(out.read_text())["syncs"]["total"] == 0
    assert command_line(["fs_cli_step:step", "--warmup", "2", "--fail", "--json", str(out)]) == 1
    assert json.loads(out.read_text())["syncs"]["counts"] == {"mask_index": 1}


def test_command_line_graph_breaks(step_module):
    """--graph-breaks adds the function's graph breaks to the JSON and to the
    exit status: with its only sync ignored, a branch on a tensor still exits 1
    with --fail."""
    out = step_module / "breaks.json"
    rc = command_line(["fs_cli_step:branch", "--graph-breaks", "--ignore", "item", "--fail", "--json", str(out)])
    d = json.loads(out.read_text())
    assert d["syncs"]["total"] == 0
    assert d["graph_breaks"]["function"]["graph_break_count"] >= 1, d["graph_breaks"]
    assert rc == 1


@pytest.mark.parametrize("argv", [
    [],
    ["nocolon"],
    [":step"],
    ["fs_cli_step:"],
    ["fs_cli_step:NOT_CALLABLE"],
    ["no_such_module_for_find_syncs:step"],
    ["fs_cli_step:no_such_function"],
    ["fs_cli_step:step", "--torchvision", "fasterrcnn_resnet50_fpn"],
    ["--static"],
    ["fs_cli_step:step", "--static"],
    ["fs_cli_step:step", "--eval"],
    ["--torchvision", "fasterrcnn_resnet50_fpn", "--static", "--patch"],
    ["--torchvision", "retinanet_resnet50_fpn", "--static", "--size", "100"],
    ["--torchvision", "not_a_model"],
    ["fs_cli_step:step", "--ignore", "bogus_kind"],
    ["fs_cli_step:step", "--warmup", "-1"],
], ids=lambda a: " ".join(a) or "no-argument")
def test_command_line_usage_errors_exit_2(step_module, argv, capsys):
    """Usage errors (no step, a spec without a colon or a part, a non-callable,
    a function and --torchvision both, --static/--eval without --torchvision,
    --static with --patch, --static with a size that is no canvas (not a
    multiple of 32), an unknown model or kind, a negative warmup) exit 2 with
    a message, before the step runs."""
    with pytest.raises(SystemExit) as info:
        command_line(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err
    assert not (step_module / "calls.txt").exists()


@pytest.mark.models
@pytest.mark.parametrize("model, argv, size", [
    ("retinanet_resnet50_fpn", ["--size", "64", "--images", "1"], 64),
    # 2 images: SSDlite's last extra layers are 1x1, whose batch norm needs more than one value in training.
    ("ssdlite320_mobilenet_v3_large", ["--size", "64", "--images", "2"], 320),
])
def test_command_line_static_one_stage_model_has_no_sync(tv, tmp_path, model, argv, size):
    """--static takes the one-stage detectors: make_static's training step of
    RetinaNet (a 64x64 canvas) and of SSDlite (its own 320x320: --size is
    ignored, and said so) has no host sync (exit 0 with --fail)."""
    out = tmp_path / "static.json"
    rc = command_line(["--torchvision", model, "--static", "--fail", "--json", str(out), *argv])
    d = json.loads(out.read_text())
    assert rc == 0, d["syncs"]
    assert d["syncs"]["total"] == 0
    images = argv[argv.index("--images") + 1]
    assert d["step"].startswith(f"{model} (static), training step, {images} images of {size}x{size}"), d["step"]
    assert ("--size ignored" in d["step"]) == (size != 64)


def test_a_decorated_recursive_function_is_inspected_once_per_outer_call():
    """A call of the decorated function from inside an inspected call runs as
    it is (no re-entry error): each outer call adds its events once."""
    finder = syncfree.find_syncs()

    @finder
    def countdown(t):
        if t.item() > 0:  # one .item() per level
            return countdown(t - 1)
        return t

    countdown(torch.tensor(3))
    assert countdown.report.counts() == {"item": 4}
    countdown(torch.tensor(1))
    assert countdown.report.counts() == {"item": 6}
    with pytest.raises(TypeError, match="function to decorate"):
        finder(3)


def test_printing_a_tensor_is_a_copy_to_the_host():
    """print, str, repr and f-strings of a tensor copy it to the host (torch's
    printing turns the modes off inside: the call itself is recorded, once)."""
    x = torch.rand(4)
    with syncfree.find_syncs() as report:
        print(x)
        str(x)
        f"{x.sum():.2f}"
    assert report.counts() == {"to_host": 3}, str(report)
    assert {e.op for e in report.entries} == {"print / repr(tensor)", "f-string of a tensor"}, str(report)


def test_what_does_not_wait_on_a_gpu_is_not_reported():
    """The false positives a CPU run could show: Adam's step counters (host
    tensors, read with .item() by torch.optim), non-blocking copies to the
    host, a copy's value read on the same line (x.cpu().numpy(): one copy),
    a Python scalar assigned through a mask."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)

    def train_step():
        model(torch.rand(3, 4)).sum().backward()
        opt.step()

    train_step()  # the optimizer's state
    x = torch.rand(8)
    with syncfree.find_syncs() as report:
        train_step()
        x.to("cpu", non_blocking=True)
        x.detach().cpu().numpy()  # sync: one
        x.sum().cpu().item()  # sync: one
        x.cpu().tolist()  # sync: one
        y = x.clone()
        y[x > 0.5] = 0.25
    assert report.counts() == {"to_host": 3}, str(report)
    me = inspect.getsourcelines(test_what_does_not_wait_on_a_gpu_is_not_reported)
    lines = [me[1] + i for i, line in enumerate(me[0]) if line.rstrip().endswith("# sync: one")]
    assert sorted(e.where.line for e in report.entries) == lines


def test_linalg_checks_allclose_and_list_indices_are_found():
    """linalg's error checks and torch.allclose read the device on the host; a
    Python list used as an index becomes a tensor copied to the device (a
    boolean list as well, whose assigned one-element tensor then takes the
    nonzero path: the list is not the assigned value)."""
    x = torch.rand(8)
    with syncfree.find_syncs() as report:
        torch.linalg.inv(torch.eye(3) * 2)
        torch.allclose(x, x)
        torch.linalg.inv_ex(torch.eye(3) * 2)  # the info stays a tensor: no sync
        x[[0, 2]]
        y = x.clone()
        y[[True, False] * 4] = torch.ones(1)
    assert report.counts() == {"linalg_check": 1, "equal": 1, "from_python": 2, "mask_assign": 1}, str(report)


def test_generated_code_is_not_the_users():
    """Code that torch.fx generated is no user code: the sync inside is
    attributed to the line that called the traced module."""
    traced = torch.fx.symbolic_trace(lambda t: t[t > 0.5])
    line = inspect.currentframe().f_lineno + 2
    with syncfree.find_syncs() as report:
        traced(torch.rand(8))
    (entry,) = report.entries
    assert entry.kind == "mask_index" and entry.where.line == line, str(report)


def test_misuses_name_the_argument():
    with pytest.raises(TypeError, match=r"syncfree.find_syncs: decorate with @syncfree.find_syncs\(\)"):
        syncfree.find_syncs(lambda: None)
    with pytest.raises(TypeError, match="syncfree.find_syncs: ignore must be a kind or a sequence of kinds, got int"):
        syncfree.find_syncs(ignore=3)
    with pytest.raises(TypeError, match="only must be"):
        syncfree.find_syncs().report.filter(only=3)


def test_command_line_step_errors_and_unwritable_json(step_module, tmp_path, capsys):
    """A step that raises exits 3 (not 1, which --fail gives for findings); a
    --json path that cannot be written is a usage error before the run."""
    assert command_line(["fs_cli_step:boom", "--fail"]) == 3
    assert "the step's own error" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        command_line(["fs_cli_step:step", "--json", str(tmp_path / "no" / "such" / "dir.json")])
    assert info.value.code == 2
    assert not (step_module / "calls.txt").exists()


@pytest.mark.slow
def test_overhead_benchmark_runs_and_finds_nothing(tv, tmp_path):
    """bench/find_syncs_bench.py end to end on a tiny configuration: both
    timed steps ran under the finder and it found nothing (exit status 0),
    the JSON has the medians and the per-operator cost."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "find_syncs_bench.py")
    spec = importlib.util.spec_from_file_location("find_syncs_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "overhead.json"
    assert bench.main(["--size", "64", "--images", "1", "--ops", "50", "--steps", "1", "--warmup", "0",
                       "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["found"] == 0 and d["rounds"] == 1
    assert set(d["median_ms"]) == {"ops", "ops under find_syncs", "step", "step under find_syncs"}
