"""torch.compile and torch.library.opcheck on the syncfree operators (CPU).

- A training step (sample, gather, a linear head, a loss, backward) compiles
  into one graph with no graph break, and its results and gradients are
  eager's for the same seed.
- dynamic=True: one graph serves every batch size and N.
- Unseeded calls inside a compiled function draw from the default generator
  exactly as eager does: fresh samples on every call, and torch.manual_seed
  replays a compiled run.
- torch.library.opcheck over the label dtypes, batch shapes, empty rows,
  K = 0 and the three operators.
- On CUDA: torch.compile (with CUDA graphs, and dynamic shapes with backward)
  equals eager, and opcheck.
"""
import copy
import itertools

import pytest
import torch
import torch._dynamo
import torch._inductor.config
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

import syncfree
from helpers.checks import LABEL_DTYPES, assert_same, check_sample, random_labels

OPS = torch.ops.syncfree


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/python/conftest.py


# --- a training step under torch.compile(fullgraph=True) ---------------------

K = 16


def train_step(head, features, labels, seed):
    f, l, v = syncfree.balanced_sample_gather(features, labels, K, 0.25, seed=seed)
    logits = head(f).squeeze(-1)
    weight = v.to(logits.dtype)
    target = (l > 0).to(logits.dtype)
    loss = F.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="sum")
    return loss / weight.sum().clamp_min(1), f, l, v


@pytest.mark.slow
@pytest.mark.parametrize("seed", [5, None], ids=["seed", "unseeded"])
def test_compiled_training_step_matches_eager(seed):
    def step(head, features, labels):
        return train_step(head, features, labels, seed)

    gen = torch.Generator().manual_seed(0)
    labels = random_labels(torch.int64, (4, 200), gen)
    features = torch.randn(4, 200, 8, generator=gen)
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 1)
    eager_head = copy.deepcopy(head)

    explanation = torch._dynamo.explain(step)(copy.deepcopy(head), features.clone().requires_grad_(), labels)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    counters.clear()

    cnt = CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, backend=cnt, fullgraph=True)
    x_c = features.clone().requires_grad_()
    x_e = features.clone().requires_grad_()
    torch.manual_seed(1)
    out_c = compiled(head, x_c, labels)
    out_c[0].backward()
    state_c = torch.get_rng_state()
    torch.manual_seed(1)
    out_e = step(eager_head, x_e, labels)
    out_e[0].backward()
    state_e = torch.get_rng_state()

    assert cnt.frame_count == 1
    assert not counters["graph_break"], dict(counters["graph_break"])
    # The sample and the gathered features are exactly eager's; the loss and the
    # gradients go through Inductor's fused kernels (rounding may differ).
    assert_same(out_c[1:], out_e[1:])
    torch.testing.assert_close(out_c[0], out_e[0])
    assert torch.equal(state_c, state_e)  # the compiled step drew from the generator as eager did
    torch.testing.assert_close(x_c.grad, x_e.grad)
    torch.testing.assert_close(head.weight.grad, eager_head.weight.grad)
    torch.testing.assert_close(head.bias.grad, eager_head.bias.grad)
    # The gradient reaches exactly the sampled items (the backward reuses the
    # forward's sample; it does not sample again).
    reached = x_c.grad.ne(0).any(-1)
    assert torch.equal(reached, x_e.grad.ne(0).any(-1))
    assert int(reached.sum()) == int(out_c[3].sum()) > 0

    # Same shapes again: the compiled graph is reused.
    labels2 = random_labels(torch.int64, (4, 200), gen)
    torch.manual_seed(2)
    again = compiled(head, features.clone().requires_grad_(), labels2)
    torch.manual_seed(2)
    want = step(eager_head, features, labels2)
    assert_same(again[1:], want[1:])
    assert cnt.frame_count == 1


# --- dynamic shapes -----------------------------------------------------------


def test_dynamic_compiles_one_graph_for_every_batch_size_and_n():
    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 8, 0.5, seed=3)
        idx, valid = syncfree.balanced_sample(labels, 5, 0.25, negative_label=1, fill_positives=False,
                                              seed=4)
        return (f * f).sum(), f, l, v, idx, valid

    cnt = CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, backend=cnt, fullgraph=True, dynamic=True)
    gen = torch.Generator().manual_seed(0)
    # The first call's sizes are pairwise distinct, so that no two of them are
    # traced as the same symbol. N = 6 < K: rows with invalid slots.
    for rows, n in [(4, 200), (3, 57), (7, 1000), (2, 6), (5, 9)]:
        labels = random_labels(torch.int64, (rows, n), gen)
        features = torch.randn(rows, n, 3, generator=gen)
        x_c = features.clone().requires_grad_()
        x_e = features.clone().requires_grad_()
        got = compiled(x_c, labels)
        want = step(x_e, labels)
        assert_same(got[1:], want[1:])
        torch.testing.assert_close(got[0], want[0])
        got[0].backward()
        want[0].backward()
        torch.testing.assert_close(x_c.grad, x_e.grad)
        check_sample(labels, got[4], got[5], 5, 0.25, negative_label=1, fill_positives=False)
    assert cnt.frame_count == 1
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]


def test_dynamic_with_two_batch_dimensions():
    def step(labels):
        return syncfree.balanced_sample(labels, 6, 0.5, seed=9)

    cnt = CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, backend=cnt, fullgraph=True, dynamic=True)
    gen = torch.Generator().manual_seed(1)
    for shape in [(2, 3, 40), (5, 4, 7), (3, 2, 300)]:
        labels = random_labels(torch.int32, shape, gen)
        assert_same(compiled(labels), step(labels))
    assert cnt.frame_count == 1


def test_automatic_dynamic_recompiles_once():
    # Without dynamic=True, torch.compile specializes on the first shapes and
    # switches to symbolic sizes at the first change: two graphs in all.
    def step(features, labels):
        return syncfree.balanced_sample_gather(features, labels, 8, seed=2)

    cnt = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=cnt, fullgraph=True)
    gen = torch.Generator().manual_seed(2)
    for rows, n in [(4, 100), (3, 57), (6, 500), (2, 31)]:
        labels = random_labels(torch.int64, (rows, n), gen)
        features = torch.randn(rows, n, 4, generator=gen)
        assert_same(compiled(features, labels), step(features, labels))
    assert cnt.frame_count == 2


def test_compiled_function_is_guarded_on_the_seed():
    # A Python int seed is a constant of the traced graph (the schema's
    # `int? seed`): each seed value gets a graph of its own, and a graph traced
    # for one seed must not serve another.
    def step(labels, seed):
        return syncfree.balanced_sample(labels, 12, seed=seed)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    labels = random_labels(torch.int64, (3, 80), torch.Generator().manual_seed(3))
    results = {}
    for seed in [1, 2, 1, -(2**63), 2**63 - 1]:
        got = compiled(labels, seed)
        assert_same(got, step(labels, seed))
        results.setdefault(seed, got)
        assert_same(got, results[seed])
    assert not torch.equal(results[1][0], results[2][0])


# --- the default generator under torch.compile ---------------------------------


def unseeded_sample(labels, features):
    return syncfree.balanced_sample(labels, 10, 0.25)


def unseeded_gather(labels, features):
    return syncfree.balanced_sample_gather(features, labels, 10, 0.25)


@pytest.mark.parametrize("fn, dynamic", [(unseeded_sample, False), (unseeded_gather, True)],
                         ids=["sample", "gather-dynamic"])
def test_unseeded_compiled_calls_draw_like_eager(fn, dynamic):
    gen = torch.Generator().manual_seed(4)
    labels = random_labels(torch.int64, (3, 300), gen)
    features = torch.randn(3, 300, 2, generator=gen)
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)

    def run(f, calls=3):
        torch.manual_seed(3)
        outs = [f(labels, features) for _ in range(calls)]
        return outs, torch.get_rng_state()

    eager, eager_state = run(fn)
    first, first_state = run(compiled)
    second, second_state = run(compiled)
    for a, b in zip(first, first[1:]):  # every call draws a fresh sample
        assert not torch.equal(a[0], b[0])
    for e, c1, c2 in zip(eager, first, second):
        assert_same(c1, e)  # torch.manual_seed gives eager's sequence ...
        assert_same(c2, c1)  # ... and replays the compiled run
    assert torch.equal(first_state, eager_state) and torch.equal(second_state, eager_state)
    for out in first:
        valid = out[-1]
        if fn is unseeded_sample:
            check_sample(labels, out[0], valid, 10, 0.25)
        else:
            assert bool((out[1][valid] >= 0).all()) and bool((out[1][~valid] == -1).all())


def three_unseeded_calls(a, b, x):
    i1, v1 = syncfree.balanced_sample(a, 10)
    f, l, v = syncfree.balanced_sample_gather(x, b, 7, 0.25)
    i2, v2 = syncfree.balanced_sample(b, 5, 0.75)
    return i1, v1, f, l, v, i2, v2


def three_unseeded_inputs():
    gen = torch.Generator().manual_seed(5)
    return (random_labels(torch.int64, (3, 100), gen), random_labels(torch.int64, (2, 60), gen),
            torch.randn(2, 60, 3, generator=gen))


# Inductor settings under which several unseeded calls in one graph draw in
# eager's order. torch 2.11 also reorders independent operators to lower peak
# memory (reorder_for_peak_memory, on by default), fallback_random or not: the
# three calls then run last to first. From torch 2.13 on (2.13, 2.14 and 2.15
# tested) fallback_random alone keeps the program order.
EAGER_ORDER = {"fallback_random": True}
if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13):
    EAGER_ORDER["reorder_for_peak_memory"] = False


def test_several_unseeded_calls_in_one_graph_with_fallback_random_match_eager():
    # By default Inductor may reorder independent random operators inside a
    # graph, so that they draw from the generator in another order than eager;
    # with fallback_random=True (and, before torch 2.13, no reordering for
    # peak memory) it keeps the program order.
    args = three_unseeded_inputs()
    with torch._inductor.config.patch(**EAGER_ORDER):
        compiled = torch.compile(three_unseeded_calls, fullgraph=True)
        torch.manual_seed(1)
        got = [compiled(*args) for _ in range(2)]
    torch.manual_seed(1)
    want = [three_unseeded_calls(*args) for _ in range(2)]
    for g, w in zip(got, want):
        assert_same(g, w)


def test_several_unseeded_calls_in_one_graph_are_reproducible():
    # Default Inductor settings: each call draws one value from the generator,
    # as in eager, and a run replays from torch.manual_seed.
    a, b, x = args = three_unseeded_inputs()
    compiled = torch.compile(three_unseeded_calls, fullgraph=True)

    def run(f):
        torch.manual_seed(1)
        outs = [f(*args) for _ in range(2)]
        return outs, torch.get_rng_state()

    first, first_state = run(compiled)
    second, second_state = run(compiled)
    _, eager_state = run(three_unseeded_calls)
    for c1, c2 in zip(first, second):
        assert_same(c1, c2)
    assert torch.equal(first_state, second_state) and torch.equal(first_state, eager_state)
    for i in (0, 2, 5):  # the indices and the gathered features of each call are fresh
        assert not torch.equal(first[0][i], first[1][i])
    for i1, v1, f, l, v, i2, v2 in first:
        check_sample(a, i1, v1, 10)
        check_sample(b, i2, v2, 5, 0.75)
        assert bool((l[v] >= 0).all()) and bool((l[~v] == -1).all()) and bool((f[~v] == 0).all())


def test_explicit_generator_under_compile_runs_like_eager():
    # Dynamo cannot put a torch.Generator into a graph (neither for torch's own
    # random functions): the call runs at a graph break, with eager's results.
    def draw(labels, g):
        idx, valid = syncfree.balanced_sample(labels, 10, generator=g)
        return idx * 2, valid

    labels = random_labels(torch.int64, (2, 300), torch.Generator().manual_seed(6))
    compiled = torch.compile(draw, backend="aot_eager")
    g = torch.Generator().manual_seed(1)
    got = [compiled(labels, g) for _ in range(3)]
    got_state = g.get_state()
    g = torch.Generator().manual_seed(1)
    want = [draw(labels, g) for _ in range(3)]
    for a, b in zip(got, want):
        assert_same(a, b)
    assert torch.equal(got_state, g.get_state())
    assert not torch.equal(got[0][0], got[1][0])


# --- torch.library.opcheck ------------------------------------------------------

# test_aot_dispatch_dynamic compares the operator in eager mode with its
# AOTAutograd-traced form, gradients included; it reseeds the default generator
# (torch.manual_seed) before each of the two runs, so the unseeded form is
# checked too: the traced operator must draw as eager does.
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def opcheck_all(labels, k, features_dtype=torch.float32, **options):
    """opcheck of the three operators on one input; returns nothing, raises on failure."""
    gen = torch.Generator().manual_seed(7)
    features = torch.randn(tuple(labels.shape) + (2,), generator=gen).to(features_dtype)
    if features.is_floating_point():
        features.requires_grad_()
    torch.library.opcheck(OPS.balanced_sample.default, (labels, k, 0.25), dict(options), test_utils=ALL_TESTS)
    torch.library.opcheck(OPS.balanced_sample_gather.default, (features, labels, k), dict(options),
                          test_utils=ALL_TESTS)
    idx, valid = OPS.balanced_sample(labels, k, 0.25, seed=11)
    # The internal gather runs below autograd (balanced_sample_gather's
    # autograd kernel calls it): checked on features without gradients.
    torch.library.opcheck(OPS._gather_sampled.default, (features.detach(), labels, idx, valid),
                          test_utils=ALL_TESTS)


@pytest.mark.parametrize("dtype, lead", list(itertools.product(LABEL_DTYPES, [(), (2,), (2, 3)])),
                         ids=lambda v: str(v).replace("torch.", ""))
def test_opcheck_dtypes_and_batch_shapes(dtype, lead):
    labels = random_labels(dtype, lead + (13,), torch.Generator().manual_seed(8))
    negative_label = 0 if dtype == torch.bool else 1
    opcheck_all(labels, 5, seed=7, negative_label=negative_label, fill_positives=len(lead) != 1)


@pytest.mark.parametrize("lead, n, k", [
    ((), 0, 5), ((3,), 0, 5), ((2, 3), 0, 4),    # empty rows
    ((), 13, 0), ((3,), 13, 0), ((2, 3), 0, 0),  # K = 0
    ((0,), 13, 5), ((2, 0), 7, 3),               # no rows
    ((3,), 13, 40),                              # fewer candidates than slots
])
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64], ids=["bool", "int64"])
def test_opcheck_empty_rows_and_k_zero(dtype, lead, n, k):
    labels = random_labels(dtype, lead + (n,), torch.Generator().manual_seed(9))
    opcheck_all(labels, k, seed=3)


@pytest.mark.parametrize("features_dtype", [torch.float64, torch.int32, torch.bool],
                         ids=["float64", "int32", "bool"])
def test_opcheck_feature_dtypes(features_dtype):
    labels = random_labels(torch.int8, (3, 20), torch.Generator().manual_seed(10))
    opcheck_all(labels, 6, features_dtype, seed=5)


@pytest.mark.parametrize("lead", [(), (3,), (2, 2)])
def test_opcheck_unseeded(lead):
    labels = random_labels(torch.int64, lead + (30,), torch.Generator().manual_seed(12))
    opcheck_all(labels, 8)


def test_opcheck_explicit_generator():
    # The generator object is shared by the eager and the traced run of
    # test_aot_dispatch_dynamic: the second run continues its sequence, so the
    # outputs differ by design. The other checks hold.
    labels = random_labels(torch.int64, (3, 30), torch.Generator().manual_seed(13))
    features = torch.randn(3, 30, 2, requires_grad=True)
    tests = ("test_schema", "test_autograd_registration", "test_faketensor")
    g = torch.Generator().manual_seed(0)
    torch.library.opcheck(OPS.balanced_sample.default, (labels, 8), {"generator": g}, test_utils=tests)
    torch.library.opcheck(OPS.balanced_sample_gather.default, (features, labels, 8), {"generator": g},
                          test_utils=tests)


# --- CUDA ---------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_cuda_compile(mode):
    labels = torch.randint(-1, 2, (4, 5000), device="cuda")
    features = torch.randn(4, 5000, 8, device="cuda")

    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 64, 0.25, seed=2)
        return f.sum(-1), l

    compiled = torch.compile(step, fullgraph=True, mode=mode)
    for _ in range(3):
        a, la = compiled(features, labels)
    b, lb = step(features, labels)
    assert torch.allclose(a, b) and torch.equal(la, lb)


@pytest.mark.cuda
def test_cuda_compile_dynamic_shapes_with_backward():
    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 32, 0.25, seed=4)
        return (f * f).sum()

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for rows, n in [(4, 3000), (3, 1100), (5, 20000)]:
        labels = torch.randint(-1, 2, (rows, n), device="cuda")
        x = torch.randn(rows, n, 8, device="cuda", requires_grad=True)
        y = x.detach().clone().requires_grad_()
        compiled(x, labels).backward()
        step(y, labels).backward()
        assert torch.allclose(x.grad, y.grad)


@pytest.mark.cuda
def test_cuda_opcheck():
    labels = torch.randint(-1, 2, (3, 500), device="cuda")
    features = torch.randn(3, 500, 4, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.syncfree.balanced_sample.default, (labels, 16), {"seed": 1})
    torch.library.opcheck(torch.ops.syncfree.balanced_sample_gather.default, (features, labels, 16), {"seed": 1})
    idx, valid = syncfree.balanced_sample(labels, 16, seed=1)
    torch.library.opcheck(torch.ops.syncfree._gather_sampled.default, (features.detach(), labels, idx, valid))
