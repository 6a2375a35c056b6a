"""The wrappers' own Python entry, syncfree._C (csrc/python/entry.cpp): which
calls it takes, that they equal the calls through torch.ops bit for bit, and
that every call it does not take goes through torch.ops as before
(__torch_function__ subclasses and modes, wrong types and their errors)."""
import os
import threading
import time

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import syncfree
import syncfree._build_info as info
from syncfree import ops

needs_entry = pytest.mark.skipif(not info.PYTHON_ENTRY, reason="this build has no Python entry (syncfree._C)")


def test_entry_built_as_expected():
    # SYNCFREE_EXPECT_PYTHON_ENTRY=1 (the Makefile's builds and the wheel
    # check require the entry): a package without it fails here.
    expected = os.environ.get("SYNCFREE_EXPECT_PYTHON_ENTRY")
    if expected is None:
        pytest.skip("SYNCFREE_EXPECT_PYTHON_ENTRY is not set")
    assert info.PYTHON_ENTRY == (expected == "1"), (info.PYTHON_ENTRY, expected)
    assert (ops._ENTRY is not None) == info.PYTHON_ENTRY


@pytest.fixture
def entry_calls(monkeypatch):
    """The operators the wrappers' calls gave to syncfree._C, and whether it
    took them (none where the build has no entry)."""
    calls = []
    entry = ops._ENTRY
    if entry is None:
        return calls

    def counted(op, *args):
        took = True  # an error raised by the operator: taken
        try:
            out = entry(op, *args)
            took = out is not NotImplemented
            return out
        finally:
            calls.append((op, took))  # one append a call: safe from several threads

    monkeypatch.setattr(ops, "_ENTRY", counted)
    return calls


def inputs(device, rows=3, n=50, dim=4):
    g = torch.Generator().manual_seed(11)
    labels = torch.randint(-1, 3, (rows, n), generator=g).to(device)
    features = torch.randn(rows, n, dim, generator=g).to(device)
    boxes = torch.rand(rows, n, 2, generator=g) * 50
    boxes = torch.cat([boxes, boxes + torch.rand(rows, n, 2, generator=g) * 20], -1).to(device)
    scores = torch.rand(rows, n, generator=g).to(device)
    return features, labels, boxes, scores


def wrapper_calls(device):
    """(name, the wrapper's call, the same call through torch.ops) for every
    wrapper that offers its calls to the entry; the samplers seeded."""
    features, labels, boxes, scores = inputs(device)
    quota = torch.tensor([3, 4, 2], device=device)
    indices, valid = torch.ops.syncfree.balanced_sample(labels, 10, seed=1)
    mask = labels > 0
    ids = labels.clamp(min=0)
    so = torch.ops.syncfree
    return [
        ("balanced_sample", lambda: syncfree.balanced_sample(labels, 10, 0.25, 1, False, 7),
         lambda: so.balanced_sample(labels, 10, 0.25, negative_label=1, fill_positives=False, seed=7)),
        ("balanced_sample_gather", lambda: syncfree.balanced_sample_gather(features, labels, 10, 0.5, seed=7),
         lambda: so.balanced_sample_gather(features, labels, 10, 0.5, seed=7)),
        ("stratified_sample", lambda: syncfree.stratified_sample(labels, 12, [3, 4, 2], seed=7),
         lambda: so.stratified_sample(labels, 12, quota, seed=7)),
        ("stratified_sample_gather",
         lambda: syncfree.stratified_sample_gather(features, labels, 12, quota, False, seed=7),
         lambda: so.stratified_sample_gather(features, labels, 12, quota, fill=False, seed=7)),
        ("gather_sampled", lambda: syncfree.gather_sampled(features, labels, indices, valid),
         lambda: so.gather_sampled(features, labels, indices, valid)),
        ("compact", lambda: syncfree.compact(mask, 20), lambda: so.compact(mask, 20)),
        ("nms", lambda: syncfree.nms(boxes, scores, 0.5, 15, ids, mask),
         lambda: so.nms(boxes, scores, 0.5, 15, idxs=ids, valid=mask)),
    ]


def assert_same(a, b):
    assert type(a) is type(b) is tuple and len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device
        assert torch.equal(x, y)


@pytest.mark.parametrize("index", range(7))
def test_wrapper_calls_go_through_the_entry_and_equal_torch_ops(device, entry_calls, index):
    # Also where the build has no entry (the GPU check's build may lack
    # Python's headers): then the wrappers call torch.ops, with the same results.
    name, wrapper, through_ops = wrapper_calls(device)[index]
    out = wrapper()
    if info.PYTHON_ENTRY:
        assert entry_calls == [(getattr(ops, "_ENTRY_" + name.upper()), True)]
    else:
        assert ops._ENTRY is None and entry_calls == []
    assert_same(out, through_ops())


@needs_entry
def test_generator_state_advances_as_through_torch_ops(entry_calls):
    features, labels, _, _ = inputs("cpu")
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(3):  # the same samples call after call: each call advances both alike
        assert_same(syncfree.balanced_sample_gather(features, labels, 10, generator=a),
                    torch.ops.syncfree.balanced_sample_gather(features, labels, 10, generator=b))
    assert [took for _, took in entry_calls] == [True] * 3
    assert torch.equal(a.get_state(), b.get_state())
    # The default generator too.
    torch.manual_seed(3)
    first = syncfree.balanced_sample(labels, 10)
    torch.manual_seed(3)
    assert_same(first, torch.ops.syncfree.balanced_sample(labels, 10))


@needs_entry
def test_gradients_flow_through_the_entry(entry_calls):
    features, labels, _, _ = inputs("cpu")
    a = features.clone().requires_grad_()
    b = features.clone().requires_grad_()
    out_a, _, _ = syncfree.balanced_sample_gather(a, labels, 10, seed=3)
    out_b, _, _ = torch.ops.syncfree.balanced_sample_gather(b, labels, 10, seed=3)
    weights = torch.randn(out_a.shape)
    (out_a * weights).sum().backward()
    (out_b * weights).sum().backward()
    assert entry_calls and entry_calls[0][1]
    assert out_a.grad_fn is not None
    assert torch.equal(a.grad, b.grad)


@needs_entry
def test_parameters_are_plain_tensors(entry_calls):
    features, labels, _, _ = inputs("cpu")
    param = torch.nn.Parameter(features.clone())
    out = syncfree.balanced_sample_gather(param, labels, 10, seed=2)
    assert entry_calls[0][1]
    assert_same(tuple(t.detach() for t in out), torch.ops.syncfree.balanced_sample_gather(features, labels, 10, seed=2))


class Traced(torch.Tensor):
    """A subclass that records the functions __torch_function__ saw."""
    seen = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(str(func))
        return super().__torch_function__(func, types, args, kwargs or {})


@needs_entry
def test_torch_function_subclass_goes_through_torch_ops(entry_calls):
    features, labels, _, _ = inputs("cpu")
    Traced.seen.clear()
    out = syncfree.balanced_sample_gather(features.as_subclass(Traced), labels, 10, seed=2)
    assert entry_calls == [(ops._ENTRY_BALANCED_SAMPLE_GATHER, False)]
    assert any("balanced_sample_gather" in f for f in Traced.seen), Traced.seen
    assert_same(tuple(t.as_subclass(torch.Tensor) for t in out),
                torch.ops.syncfree.balanced_sample_gather(features, labels, 10, seed=2))


class Recording(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@needs_entry
def test_torch_function_mode_sees_the_call(entry_calls):
    features, labels, _, _ = inputs("cpu")
    with Recording() as mode:
        out = syncfree.compact(labels > 0, 5)
    assert entry_calls == [(ops._ENTRY_COMPACT, False)]
    assert any("compact" in f for f in mode.seen), mode.seen
    assert_same(out, torch.ops.syncfree.compact(labels > 0, 5))


@needs_entry
@pytest.mark.parametrize("call, error, message", [
    (lambda l: syncfree.balanced_sample(l, True), TypeError, "syncfree.balanced_sample: num_samples must be an int, got bool"),
    (lambda l: syncfree.balanced_sample(l, 2**64), OverflowError, "syncfree.balanced_sample: num_samples must fit in int64"),
    (lambda l: syncfree.balanced_sample(l, 4, "half"), TypeError, "syncfree.balanced_sample: positive_fraction must be a float, got str"),
    (lambda l: syncfree.balanced_sample(l, 4, seed=1.5), TypeError, "syncfree.balanced_sample: seed must be an int or None, got float"),
    (lambda l: syncfree.balanced_sample(l.tolist(), 4), TypeError, "syncfree.balanced_sample: labels must be a torch.Tensor, got list"),
    (lambda l: syncfree.compact(l > 0, None), TypeError, "syncfree.compact: size must be an int, got NoneType"),
    (lambda l: syncfree.nms(torch.rand(4, 4), torch.rand(4), 0.5, 2, idxs=[0, 1, 2, 3]), TypeError,
     "syncfree.nms: idxs must be a torch.Tensor or None, got list"),
])
def test_wrong_types_fall_back_to_the_wrappers_checks(entry_calls, call, error, message):
    labels = torch.tensor([0, 1, 1, 0, 1])
    with pytest.raises(error) as e:
        call(labels)
    assert str(e.value).startswith(message), str(e.value)
    assert all(not took for _, took in entry_calls), entry_calls


class Index:
    """An int-like value (as numpy's ints are): not a Python int."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


@needs_entry
def test_index_like_ints_fall_back_and_equal_the_plain_call(entry_calls):
    labels = torch.tensor([0, 1, 1, 0, 1, 1, 0])
    out = syncfree.balanced_sample(labels, Index(4), seed=3)
    assert entry_calls == [(ops._ENTRY_BALANCED_SAMPLE, False)]
    assert_same(out, torch.ops.syncfree.balanced_sample(labels, 4, seed=3))


@needs_entry
@pytest.mark.parametrize("call, message", [
    (lambda f, l: syncfree.balanced_sample_gather(f, l, -1), "syncfree.balanced_sample_gather: num_samples must be >= 0, got -1"),
    (lambda f, l: syncfree.balanced_sample(l.float(), 2), "syncfree.balanced_sample: labels must be"),
    (lambda f, l: syncfree.balanced_sample(l, 2, 1.5), "syncfree.balanced_sample: positive_fraction must be in [0, 1], got 1.5"),
    (lambda f, l: syncfree.balanced_sample(l, 2, seed=1, generator=torch.Generator()), "syncfree.balanced_sample: "),
    (lambda f, l: syncfree.compact(l, -2), "syncfree.compact: size must be >= 0"),
])
def test_operator_errors_through_the_entry_equal_torch_ops(entry_calls, call, message):
    features, labels, _, _ = inputs("cpu")
    with pytest.raises(RuntimeError) as through_entry:
        call(features, labels)
    assert entry_calls and all(took for _, took in entry_calls), entry_calls
    assert str(through_entry.value).startswith(message), str(through_entry.value)
    # The same call through torch.ops raises the same error.
    ops_entry = ops._ENTRY
    try:
        ops._ENTRY = None
        with pytest.raises(RuntimeError) as through_ops:
            call(features, labels)
    finally:
        ops._ENTRY = ops_entry
    assert type(through_ops.value) is type(through_entry.value)
    assert str(through_ops.value) == str(through_entry.value)


@needs_entry
def test_entry_call_checks_its_own_arguments():
    from syncfree import _C
    op = ops._ENTRY_COMPACT
    mask = torch.tensor([True, False, True])
    assert _C.call(op, mask, True) is NotImplemented  # bool is not an int
    assert _C.call(op, mask, 2**63) is NotImplemented  # beyond int64
    assert _C.call(op, mask.tolist(), 2) is NotImplemented
    assert _C.call(op, mask.as_subclass(Traced), 2) is NotImplemented
    assert _C.call(ops._ENTRY_BALANCED_SAMPLE, mask, 2, "0.5", 0, True, None, None) is NotImplemented
    assert _C.call(ops._ENTRY_BALANCED_SAMPLE, mask, 2, 0.5, 0, 1, None, None) is NotImplemented  # 1 is not a bool
    assert _C.call(ops._ENTRY_BALANCED_SAMPLE, mask, 2, 0.5, 0, True, None, object()) is NotImplemented
    assert _C.call(ops._ENTRY_NMS, torch.rand(3, 4), torch.rand(3), 0.5, 2, [0, 0, 1], None) is NotImplemented
    # An int for a float is converted, as torch.ops does.
    assert_same(_C.call(ops._ENTRY_BALANCED_SAMPLE, mask, 2, 1, 0, True, 4, None),
                torch.ops.syncfree.balanced_sample(mask, 2, 1.0, seed=4))
    with pytest.raises(TypeError, match=r"syncfree._C.call: syncfree::compact takes 2 arguments .*got 1"):
        _C.call(op, mask)
    with pytest.raises(TypeError, match="syncfree._C.call: expected an operator"):
        _C.call()
    with pytest.raises(ValueError):  # not a capsule of syncfree._C.find
        _C.call(object(), mask, 2)
    with pytest.raises(TypeError, match="syncfree._C.find: syncfree::multi_scale_roi_align: argument features "
                                        "has type Tensor.., which call.. does not convert"):
        _C.find("syncfree::multi_scale_roi_align")
    with pytest.raises(RuntimeError, match="syncfree::no_such_op"):
        _C.find("syncfree::no_such_op")
    with pytest.raises(TypeError, match="syncfree._C.find: expected an operator's name"):
        _C.find(3)


@needs_entry
def test_calls_from_threads_equal_the_calls_one_by_one(entry_calls):
    features, labels, _, _ = inputs("cpu", rows=8, n=2000)
    expected = [torch.ops.syncfree.balanced_sample_gather(features, labels, 100, seed=s) for s in range(8)]
    results = [None] * 8

    def run(s):
        results[s] = syncfree.balanced_sample_gather(features, labels, 100, seed=s)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        assert_same(got, want)
    assert entry_calls == [(ops._ENTRY_BALANCED_SAMPLE_GATHER, True)] * 8


@needs_entry
def test_other_python_threads_run_while_the_operator_runs(entry_calls):
    # The entry lets go of the GIL while the operator runs, as torch.ops
    # does: a Python thread that records the time every millisecond records
    # some while one call of 20 ms or more runs (a window of 14 ms or more
    # inside it). Holding the GIL, it could record none then (the call never
    # gives it up).
    labels = torch.randint(0, 2, (64, 1_000_000), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    syncfree.balanced_sample(labels, 100_000, seed=0)  # warm
    stamps, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread for the operator (the ticker only needs to wake)
    try:
        ticker.start()
        time.sleep(0.02)
        for _ in range(5):  # the first call that lasts 20 ms or more
            start = time.perf_counter()
            syncfree.balanced_sample(labels, 100_000, seed=1)
            end = time.perf_counter()
            if end - start >= 0.02:
                break
    finally:
        stop.set()
        ticker.join()
        torch.set_num_threads(threads)
    assert end - start >= 0.02, f"the call took {1e3 * (end - start):.1f} ms: too short to tell"
    during = [t for t in stamps if start + 0.003 < t < end - 0.003]
    assert during, (f"no Python thread ran during a call of {1e3 * (end - start):.1f} ms", len(stamps))
    assert all(took for _, took in entry_calls) and len(entry_calls) >= 2


@needs_entry
def test_the_profiler_sees_the_operator(entry_calls):
    features, labels, _, _ = inputs("cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        syncfree.balanced_sample_gather(features, labels, 10, seed=1)
    assert entry_calls == [(ops._ENTRY_BALANCED_SAMPLE_GATHER, True)]
    names = {e.name for e in prof.events()}
    assert "syncfree::balanced_sample_gather" in names, sorted(names)


class DispatchRecording(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@needs_entry
def test_dispatch_modes_see_what_they_see_through_torch_ops(entry_calls):
    features, labels, _, _ = inputs("cpu")
    with DispatchRecording() as through_entry:
        out = syncfree.balanced_sample_gather(features, labels, 10, seed=5)
    assert entry_calls == [(ops._ENTRY_BALANCED_SAMPLE_GATHER, True)]
    with DispatchRecording() as through_ops:
        expected = torch.ops.syncfree.balanced_sample_gather(features, labels, 10, seed=5)
    assert any("balanced_sample_gather" in f for f in through_entry.seen), through_entry.seen
    assert through_entry.seen == through_ops.seen
    assert_same(out, expected)


@needs_entry
def test_jit_trace_records_the_operator(entry_calls):
    features, labels, _, _ = inputs("cpu")
    traced = torch.jit.trace(lambda f, l: syncfree.balanced_sample_gather(f, l, 10, seed=6), (features, labels),
                             check_trace=False)
    assert entry_calls == [(ops._ENTRY_BALANCED_SAMPLE_GATHER, True)]
    reference = torch.jit.trace(lambda f, l: torch.ops.syncfree.balanced_sample_gather(f, l, 10, seed=6),
                                (features, labels), check_trace=False)
    kinds = [node.kind() for node in traced.graph.nodes()]
    assert "syncfree::balanced_sample_gather" in kinds, traced.graph
    assert kinds == [node.kind() for node in reference.graph.nodes()]
    assert_same(traced(features, labels), torch.ops.syncfree.balanced_sample_gather(features, labels, 10, seed=6))


@needs_entry
def test_grad_modes_apply(entry_calls):
    features, labels, _, _ = inputs("cpu")
    leaf = features.clone().requires_grad_()
    with torch.no_grad():
        out, _, _ = syncfree.balanced_sample_gather(leaf, labels, 10, seed=1)
    assert not out.requires_grad
    with torch.inference_mode():
        out, _, _ = syncfree.balanced_sample_gather(leaf, labels, 10, seed=1)
    assert out.is_inference() and not out.requires_grad
    assert [took for _, took in entry_calls] == [True, True]


@needs_entry
@pytest.mark.skipif(not hasattr(torch.Tensor, "refine_names"), reason="this torch has no named tensors")
def test_named_tensors_go_through_torch_ops(entry_calls):
    mask = torch.tensor([True, False, True]).refine_names("N")
    with pytest.raises(RuntimeError) as through_wrapper:
        syncfree.compact(mask, 2)
    assert entry_calls == [(ops._ENTRY_COMPACT, False)]
    with pytest.raises(RuntimeError) as through_ops:
        torch.ops.syncfree.compact(mask, 2)
    assert str(through_wrapper.value) == str(through_ops.value)


@needs_entry
def test_compiled_calls_trace_torch_ops(entry_calls):
    features, labels, _, _ = inputs("cpu")
    fn = torch.compile(lambda f, l: syncfree.balanced_sample_gather(f, l, 10, seed=4), fullgraph=True, backend="eager")
    assert_same(fn(features, labels), torch.ops.syncfree.balanced_sample_gather(features, labels, 10, seed=4))
    assert entry_calls == []
