"""syncfree.multi_scale_roi_align under torch.library.opcheck, gradcheck,
torch.compile(fullgraph=True) (static and dynamic shapes, forward and
backward), torch.export, TorchScript, and through torch.ops directly (CPU)."""
import math
import warnings

import pytest
import torch
from torch._dynamo.utils import counters
from torch.export import Dim

import syncfree

OPS = torch.ops.syncfree
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
C = 3

pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/python/conftest.py


def gen(seed):
    return torch.Generator().manual_seed(seed)


def inputs(batch, k, num_levels=3, dtype=torch.float32, seed=0, image=(64, 48), grad=False):
    """Feature maps of strides 4, 8, ..., boxes of sizes 2 to ~130 (every level
    of the mapper with canonical_scale 32), ~80% of the slots valid. Box
    coordinates are multiples of 1/64 plus 1/128: no sample sits exactly on a
    pixel edge, where a finite difference would straddle a kink."""
    g = gen(seed + 10 * batch + k)
    scales = [2.0 ** -(2 + l) for l in range(num_levels)]
    features = [torch.randn(batch, C, image[0] >> (2 + l), image[1] >> (2 + l), generator=g, dtype=torch.float64)
                .to(dtype).requires_grad_(grad) for l in range(num_levels)]
    xy = torch.rand(batch, k, 2, generator=g, dtype=torch.float64) * torch.tensor([image[1], image[0]]) - 4
    size = 2 * 2.0 ** (torch.rand(batch, k, 2, generator=g, dtype=torch.float64) * 6)
    boxes = torch.cat([xy, xy + size], dim=-1)
    boxes = (torch.floor(boxes * 64) / 64 + 1 / 128).to(dtype if dtype in (torch.float32, torch.float64) else torch.float32)
    valid = torch.rand(batch, k, generator=g) < 0.8
    return features, boxes, scales, valid


def pool(features, boxes, valid, scales):
    """A detection pooler: every option given."""
    return syncfree.multi_scale_roi_align(features, boxes, (5, 4), scales, 2, False, valid=valid,
                                          canonical_scale=32.0, canonical_level=4, eps=1e-6)


def same(got, want):
    got, want = list(got), list(want)
    return len(got) == len(want) and all(
        g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want))


# --- opcheck --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("num_levels", [1, 3])
def test_opcheck(dtype, num_levels):
    features, boxes, scales, valid = inputs(2, 7, num_levels, dtype, grad=True)
    op = OPS.multi_scale_roi_align.default
    torch.library.opcheck(op, (features, boxes, [5, 4], scales, 2), {}, test_utils=ALL_TESTS)
    torch.library.opcheck(op, (features, boxes, [3, 3], scales, 1, True),
                          {"valid": valid, "canonical_scale": 32.0, "canonical_level": 3, "eps": 0.0},
                          test_utils=ALL_TESTS)
    # Without gradients (the inference path of the autograd kernel).
    torch.library.opcheck(op, ([f.detach() for f in features], boxes, [2, 6], scales, 3), {"valid": valid},
                          test_utils=ALL_TESTS)


@pytest.mark.parametrize("batch, k", [(2, 0), (1, 1), (3, 4)])
def test_opcheck_small_and_empty(batch, k):
    features, boxes, scales, valid = inputs(batch, k, 2, grad=True)
    torch.library.opcheck(OPS.multi_scale_roi_align.default, (features, boxes, [7, 7], scales, 2), {"valid": valid},
                          test_utils=ALL_TESTS)


def test_opcheck_internal_ops():
    """The pooling and its backward below autograd (what a backend implements)."""
    features, boxes, scales, valid = inputs(2, 6)
    levels = torch.tensor([0, 1, 2, -1, 0, 2, 1, 1, -1, 0, 2, 2], dtype=torch.int64)
    torch.library.opcheck(OPS._multi_scale_roi_align.default, (features, boxes, levels, [4, 4], scales, 2, False),
                          test_utils=ALL_TESTS)
    sizes = [2, C] + [s for f in features for s in f.shape[2:]]
    grad = torch.randn(12, C, 4, 4, generator=gen(1))
    torch.library.opcheck(OPS._multi_scale_roi_align_backward.default,
                          (grad, boxes, levels, sizes, [4, 4], scales, 2, True), test_utils=ALL_TESTS)


# --- gradcheck ------------------------------------------------------------------------


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("num_levels", [1, 3])
def test_gradcheck(num_levels, aligned):
    features, boxes, scales, valid = inputs(2, 5, num_levels, torch.float64, seed=2, image=(32, 24))
    leaves = tuple(f.requires_grad_() for f in features)

    def fn(*feats):
        return syncfree.multi_scale_roi_align(list(feats), boxes, (3, 2), scales, 2, aligned, valid=valid,
                                              canonical_scale=32.0)

    assert bool(fn(*leaves).any())
    assert torch.autograd.gradcheck(fn, leaves)


def test_gradient_is_the_adjoint_of_the_forward():
    """<upstream, f(x)> = <grad, x>: the op is linear in the features, so the
    backward is exactly the forward's transpose (in float64, to rounding)."""
    features, boxes, scales, valid = inputs(3, 9, 3, torch.float64, seed=3, grad=True)
    out = pool(features, boxes, valid, scales)
    upstream = torch.randn(out.shape, generator=gen(4), dtype=torch.float64)
    grads = torch.autograd.grad(out, features, upstream)
    lhs = float((out.detach() * upstream).sum())
    rhs = sum(float((g * f.detach()).sum()) for g, f in zip(grads, features))
    assert abs(lhs) > 1 and math.isclose(lhs, rhs, rel_tol=1e-12)


def test_no_gradient_to_the_boxes():
    features, boxes, scales, valid = inputs(2, 4, 2, grad=True)
    boxes.requires_grad_()
    out = pool(features, boxes, valid, scales)
    grads = torch.autograd.grad(out.sum(), [boxes] + features, allow_unused=True)
    assert grads[0] is None and all(g is not None for g in grads[1:])


# --- torch.compile --------------------------------------------------------------------


def eager_forward_backward(fn, features, boxes, valid, scales, upstream):
    feats = [f.detach().clone().requires_grad_() for f in features]
    out = fn(feats, boxes, valid, scales)
    out.backward(upstream)
    return [out.detach()] + [f.grad for f in feats]


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_forward_and_backward_equal_eager(dynamic):
    compiled = torch.compile(pool, fullgraph=True, dynamic=dynamic)
    # Batch sizes and box counts unlike any other size (C = 3, 4 coordinates,
    # the maps' 16, 12, 8, 6, 4 and 3): sizes of one value share a symbol.
    shapes = [(2, 9), (5, 7), (7, 13)] if dynamic else [(2, 9), (2, 9)]
    for seed, (batch, k) in enumerate(shapes):
        features, boxes, scales, valid = inputs(batch, k, seed=seed)
        upstream = torch.randn(batch * k, C, 5, 4, generator=gen(seed))
        got = eager_forward_backward(compiled, features, boxes, valid, scales, upstream)
        want = eager_forward_backward(pool, features, boxes, valid, scales, upstream)
        assert same(got, want)
        assert bool(got[0].any()) and all(bool(g.any()) for g in got[1:])
    assert counters["stats"]["unique_graphs"] == 1  # new data, new shapes (dynamic): no recompilation


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["float64", "bfloat16"])
def test_compile_other_dtypes_and_without_options(dtype):
    features, boxes, scales, _ = inputs(2, 6, 2, dtype)
    fn = torch.compile(lambda f, b: syncfree.multi_scale_roi_align(f, b, 7, [0.25, 0.125], 2), fullgraph=True)
    assert same([fn(features, boxes)], [syncfree.multi_scale_roi_align(features, boxes, 7, [0.25, 0.125], 2)])


def test_compile_inference_inside_a_larger_graph():
    """The pooled features feeding a small head, under no_grad, as in a
    detector's evaluation step."""
    head = torch.nn.Linear(C * 5 * 4, 2)

    def step(features, boxes, valid, scales):
        pooled = pool(features, boxes, valid, scales)
        return head(pooled.flatten(1)) * valid.reshape(-1, 1)


    def step_and_pooled(features, boxes, valid, scales):
        return step(features, boxes, valid, scales), pool(features, boxes, valid, scales)

    compiled = torch.compile(step_and_pooled, fullgraph=True)
    features, boxes, scales, valid = inputs(2, 6)
    with torch.no_grad():
        (got, got_pooled), (want, want_pooled) = (compiled(features, boxes, valid, scales),
                                                  step_and_pooled(features, boxes, valid, scales))
    assert same([got_pooled], [want_pooled])
    torch.testing.assert_close(got, want)  # the head's matmul may be another kernel's


# --- torch.export ---------------------------------------------------------------------


class Pooler(torch.nn.Module):
    def __init__(self, scales):
        super().__init__()
        self.scales = scales

    def forward(self, p2, p3, p4, boxes, valid):
        return pool([p2, p3, p4], boxes, valid, self.scales)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_export_matches_eager(strict):
    features, boxes, scales, valid = inputs(3, 8)
    model = Pooler(scales)
    example = (*features, boxes, valid)
    ep = torch.export.export(model, example, strict=strict)
    assert "syncfree.multi_scale_roi_align.default" in {str(n.target) for n in ep.graph_module.graph.nodes}
    assert same([ep.module()(*example)], [model(*example)])
    features, boxes, _, valid = inputs(3, 8, seed=1)  # other values, same shapes
    assert same([ep.module()(*features, boxes, valid)], [model(*features, boxes, valid)])


def test_export_dynamic_and_save_load(tmp_path):
    features, boxes, scales, valid = inputs(3, 8)
    model = Pooler(scales)
    batch, k = Dim("batch", min=1, max=64), Dim("k", min=1, max=4096)
    shapes = {"p2": {0: batch}, "p3": {0: batch}, "p4": {0: batch}, "boxes": {0: batch, 1: k},
              "valid": {0: batch, 1: k}}
    ep = torch.export.export(model, (*features, boxes, valid), dynamic_shapes=shapes)
    path = tmp_path / "pooler.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path)).module()
    for b, m in [(3, 8), (2, 5), (5, 17)]:
        f, bx, _, v = inputs(b, m, seed=2)
        assert same([loaded(*f, bx, v)], [model(*f, bx, v)])
    decomposed = ep.run_decompositions().module()  # the op stays whole
    f, bx, _, v = inputs(4, 6, seed=3)
    assert same([decomposed(*f, bx, v)], [model(*f, bx, v)])


# --- TorchScript and torch.ops ---------------------------------------------------------


def test_torchscript():
    """The wrapper compiles in TorchScript (as every other syncfree wrapper),
    positional and keyword arguments, an int and a tuple output_size."""
    def scripted(features: list[torch.Tensor], boxes: torch.Tensor, valid: torch.Tensor):
        a = syncfree.multi_scale_roi_align(features, boxes, 7, [0.25, 0.125, 0.0625], 2)
        b = syncfree.multi_scale_roi_align(features, boxes, (5, 4), [0.25, 0.125, 0.0625], 2, True, valid=valid,
                                           canonical_scale=32.0, canonical_level=3, eps=0.0)
        return a, b

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")
        scripted = torch.jit.script(scripted)
    features, boxes, scales, valid = inputs(2, 6)
    want = (syncfree.multi_scale_roi_align(features, boxes, 7, scales, 2),
            syncfree.multi_scale_roi_align(features, boxes, (5, 4), scales, 2, True, valid=valid,
                                           canonical_scale=32.0, canonical_level=3, eps=0.0))
    assert same(scripted(features, boxes, valid), want)


def test_torch_ops_directly():
    """The op without the Python wrapper (as C++ and an exported program call
    it): the wrapper's values and gradients; the schema's defaults are the
    wrapper's."""
    features, boxes, scales, valid = inputs(3, 7, grad=True)
    upstream = torch.randn(21, C, 5, 4, generator=gen(5))
    want = eager_forward_backward(pool, features, boxes, valid, scales, upstream)

    def direct(f, b, v, s):
        return OPS.multi_scale_roi_align(f, b, [5, 4], s, 2, False, valid=v, canonical_scale=32.0)

    assert same(eager_forward_backward(direct, features, boxes, valid, scales, upstream), want)
    defaults = OPS.multi_scale_roi_align.default(features, boxes, [7, 7], scales, 2)
    assert same([defaults], [syncfree.multi_scale_roi_align(features, boxes, 7, scales, 2, False, None, 224.0, 4, 1e-6)])
    schema = OPS.multi_scale_roi_align.default._schema
    got = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    assert got == {"aligned": False, "valid": None, "canonical_scale": 224.0, "canonical_level": 4, "eps": 1e-6}


@pytest.mark.cuda
def test_cuda_compile_and_opcheck():
    features, boxes, scales, valid = inputs(2, 9, grad=True)
    features = [f.detach().cuda().requires_grad_() for f in features]
    boxes, valid = boxes.cuda(), valid.cuda()
    compiled = torch.compile(pool, fullgraph=True)
    upstream = torch.randn(18, C, 5, 4, generator=gen(6)).cuda()
    got = eager_forward_backward(compiled, features, boxes, valid, scales, upstream)
    want = eager_forward_backward(pool, features, boxes, valid, scales, upstream)
    assert torch.equal(got[0], want[0])  # the forward is deterministic on CUDA
    for g, w in zip(got[1:], want[1:]):  # the backward adds with atomics: the order varies
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    # opcheck's aot_dispatch test compares gradients with its own tolerances.
    torch.library.opcheck(OPS.multi_scale_roi_align.default, (features, boxes, [5, 4], scales, 2), {"valid": valid},
                          test_utils=ALL_TESTS)
