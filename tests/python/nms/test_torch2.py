"""syncfree.nms under torch.compile(fullgraph=True), torch.export, opcheck,
TorchScript and symbolic shapes (CPU); torch.compile and opcheck on CUDA."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch.export import Dim
from torch.fx.experimental.proxy_tensor import make_fx

import syncfree
from helpers.nms_reference import clustered_boxes, nms_inputs

OPS = torch.ops.syncfree
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/python/conftest.py


def inputs(rows, n, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed + 100 * rows + n)
    boxes = clustered_boxes((rows, n), g, clusters=max(1, n // 8), size=100.0, dtype=dtype)
    scores = torch.rand(rows, n, generator=g).to(dtype)
    idxs = torch.randint(0, 3, (rows, n), generator=g)
    valid = torch.rand(rows, n, generator=g) < 0.9
    return boxes, scores, idxs, valid


def same(got, want):
    return len(got) == len(want) and all(
        g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want))


def postprocess(boxes, scores, idxs, valid):
    """A detection postprocess: NMS per class, then gather the kept boxes."""
    keep, ok = syncfree.nms(boxes, scores, 0.5, 20, idxs=idxs, valid=valid)
    safe = keep.clamp_min(0)
    kept_boxes = torch.gather(boxes, 1, safe.unsqueeze(-1).expand(-1, -1, 4)) * ok.unsqueeze(-1)
    kept_scores = torch.gather(scores, 1, safe).masked_fill(~ok, 0)
    return keep, ok, kept_boxes, kept_scores


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_matches_eager(dynamic):
    compiled = torch.compile(postprocess, fullgraph=True, dynamic=dynamic)
    for rows, n in [(3, 100), (2, 37), (5, 250)]:
        x = inputs(rows, n)
        assert same(compiled(*x), postprocess(*x))
    if dynamic:
        assert counters["stats"]["unique_graphs"] == 1


def test_compile_without_optional_arguments():
    fn = torch.compile(lambda b, s: syncfree.nms(b, s, 0.7, 8), fullgraph=True)
    boxes, scores, _, _ = inputs(2, 60)
    assert same(fn(boxes, scores), syncfree.nms(boxes, scores, 0.7, 8))


class Postprocess(torch.nn.Module):
    def forward(self, boxes, scores, idxs, valid):
        return postprocess(boxes, scores, idxs, valid)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_export_matches_eager(strict):
    model = Postprocess()
    example = inputs(3, 100)
    ep = torch.export.export(model, example, strict=strict)
    assert "syncfree.nms.default" in {str(n.target) for n in ep.graph_module.graph.nodes}
    assert same(ep.module()(*example), model(*example))


def test_export_dynamic_and_save_load(tmp_path):
    model = Postprocess()
    batch, n = Dim("batch", min=2, max=64), Dim("n", min=2, max=1 << 16)
    shapes = {k: {0: batch, 1: n} for k in ("boxes", "scores", "idxs", "valid")}
    ep = torch.export.export(model, inputs(3, 100), dynamic_shapes=shapes)
    path = tmp_path / "nms.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path)).module()
    for rows, m in [(3, 100), (2, 40), (7, 300)]:
        x = inputs(rows, m, seed=1)
        assert same(loaded(*x), model(*x))
    decomposed = ep.run_decompositions().module()  # the op stays whole
    x = inputs(4, 80, seed=2)
    assert same(decomposed(*x), model(*x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("lead", [(), (3,), (2, 2)])
def test_opcheck(dtype, lead):
    g = torch.Generator().manual_seed(3)
    n = 40
    boxes = clustered_boxes(lead + (n,), g, clusters=6, size=60.0, dtype=dtype)
    scores = torch.rand(lead + (n,), generator=g).to(dtype)
    idxs = torch.randint(0, 3, lead + (n,), generator=g)
    valid = torch.rand(lead + (n,), generator=g) < 0.8
    torch.library.opcheck(OPS.nms.default, (boxes, scores, 0.5, 10), {}, test_utils=ALL_TESTS)
    torch.library.opcheck(OPS.nms.default, (boxes, scores, 0.3, 50), {"idxs": idxs, "valid": valid},
                          test_utils=ALL_TESTS)
    # Gradients requested on the inputs: the outputs are integers, no autograd.
    torch.library.opcheck(OPS.nms.default, (boxes.clone().requires_grad_(), scores, 0.5, 10), {},
                          test_utils=ALL_TESTS)


@pytest.mark.parametrize("lead, n, m", [((), 0, 5), ((3,), 0, 2), ((3,), 7, 0), ((0,), 5, 3)])
def test_opcheck_empty(lead, n, m):
    boxes = torch.rand(lead + (n, 4))
    scores = torch.rand(lead + (n,))
    torch.library.opcheck(OPS.nms.default, (boxes, scores, 0.5, m), {}, test_utils=ALL_TESTS)


def test_symbolic_shapes_keep_batch_and_n_symbolic():
    shapes = []

    def fn(boxes, scores, idxs):
        out = OPS.nms(boxes, scores, 0.5, 6, idxs=idxs)
        shapes.append([tuple(t.shape) for t in out])
        return out

    # 3 rows: a batch of 4 would share its symbol with the coordinates' 4
    # (same-valued sizes share a symbol while tracing) and be specialized.
    boxes, scores, idxs, _ = inputs(3, 30)
    graph = make_fx(fn, tracing_mode="symbolic")(boxes, scores, idxs)
    (i_shape, v_shape), = shapes
    assert not isinstance(i_shape[0], int) and i_shape[1] == 6 and v_shape[1] == 6
    for rows, n in [(3, 30), (2, 11), (1, 1), (5, 40)]:
        boxes, scores, idxs, _ = inputs(rows, n, seed=4)
        assert same(graph(boxes, scores, idxs), OPS.nms(boxes, scores, 0.5, 6, idxs=idxs))


def test_torchscript():
    @torch.jit.script
    def scripted(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor):
        a = syncfree.nms(boxes, scores, 0.5, 10)
        b = syncfree.nms(boxes, scores, 0.5, 10, idxs=idxs, valid=None)
        return a[0], a[1], b[0], b[1]

    boxes, scores, idxs, _ = inputs(3, 50)
    want = syncfree.nms(boxes, scores, 0.5, 10) + syncfree.nms(boxes, scores, 0.5, 10, idxs=idxs)
    assert same(scripted(boxes, scores, idxs), want)


@pytest.mark.cuda
def test_cuda_compile_and_opcheck():
    boxes, scores, idxs, valid = nms_inputs((3,), 120, 6, device="cuda")
    fn = torch.compile(lambda b, s, i, v: syncfree.nms(b, s, 0.5, 30, idxs=i, valid=v), fullgraph=True)
    got = fn(boxes, scores, idxs, valid)
    want = syncfree.nms(boxes, scores, 0.5, 30, idxs=idxs, valid=valid)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.library.opcheck(torch.ops.syncfree.nms.default, (boxes, scores, 0.5, 30), {"idxs": idxs, "valid": valid},
                          test_utils=ALL_TESTS)
