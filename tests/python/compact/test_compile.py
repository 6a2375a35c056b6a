"""syncfree.compact under torch.compile (fullgraph, dynamic shapes),
torch.export (strict, non-strict, dynamic, saved and loaded) and
torch.library.opcheck (CPU): static shapes, so one graph whatever the data.
"""
import itertools

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters
from torch.export import Dim

import syncfree
from helpers.checks import assert_same

OPS = torch.ops.syncfree
MASK_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/python/conftest.py


def random_mask(shape, density, dtype=torch.bool, seed=0):
    gen = torch.Generator().manual_seed(seed)
    on = torch.rand(shape, generator=gen) < density
    return on if dtype == torch.bool else on.to(dtype) * 3


def select_positives(scores, labels, k):
    """The static replacement of `scores[torch.where(labels > 0)[0]]` on each row:
    the first k positives' scores, zero in invalid slots, and their number."""
    indices, valid, count = syncfree.compact(labels > 0, k)
    picked = scores.gather(-1, indices.clamp(min=0)) * valid
    return picked, indices, valid, count


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fullgraph_matches_eager(backend):
    cnt = CompileCounterWithBackend(backend)
    compiled = torch.compile(select_positives, backend=cnt, fullgraph=True)
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 300, generator=gen)
    labels = torch.randint(-1, 3, (4, 300), generator=gen)
    assert_same(compiled(scores, labels, 40), select_positives(scores, labels, 40))
    assert cnt.frame_count == 1
    assert not counters["graph_break"]


def test_dynamic_compiles_one_graph_for_every_shape():
    def step(mask):
        indices, valid, count = syncfree.compact(mask, 16)
        return indices, valid, count, count.sum()

    cnt = CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, backend=cnt, fullgraph=True, dynamic=True)
    # Pairwise distinct sizes on the first call, so that none is traced as the
    # same symbol as another. N = 7 < K: rows with invalid slots.
    for i, shape in enumerate([(3, 200), (5, 57), (2, 70000), (4, 7), (9, 1000)]):
        mask = random_mask(shape, 0.3, seed=i)
        assert_same(compiled(mask), step(mask))
    assert cnt.frame_count == 1
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]


def test_dynamic_with_two_batch_dimensions_and_int_masks():
    def step(mask):
        return syncfree.compact(mask, 9)

    cnt = CompileCounterWithBackend("inductor")
    compiled = torch.compile(step, backend=cnt, fullgraph=True, dynamic=True)
    for i, shape in enumerate([(2, 3, 40), (5, 4, 7), (3, 2, 300)]):
        mask = random_mask(shape, 0.4, torch.int32, seed=i)
        assert_same(compiled(mask), step(mask))
    assert cnt.frame_count == 1


# --- torch.export ---------------------------------------------------------------


class Positives(torch.nn.Module):
    def forward(self, scores, labels):
        return select_positives(scores, labels, 12)


def export_inputs(rows, n, seed=0):
    gen = torch.Generator().manual_seed(seed + 1000 * rows + n)
    return torch.randn(rows, n, generator=gen), torch.randint(-1, 3, (rows, n), generator=gen)


def syncfree_targets(graph_module):
    return {str(n.target) for n in graph_module.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("syncfree.")}


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_export_matches_eager(strict):
    model = Positives()
    example = export_inputs(3, 50)
    ep = torch.export.export(model, example, strict=strict)
    assert syncfree_targets(ep.graph_module) == {"syncfree.compact.default"}
    assert_same(ep.module()(*example), model(*example))


def test_export_dynamic_saved_and_loaded(tmp_path):
    model = Positives()
    batch, n = Dim("batch", min=2, max=1024), Dim("n", min=2, max=1 << 20)
    shapes = {"scores": {0: batch, 1: n}, "labels": {0: batch, 1: n}}
    ep = torch.export.export(model, export_inputs(3, 50), dynamic_shapes=shapes)
    assert len(ep.range_constraints) == 2  # batch and N stay symbolic
    path = tmp_path / "positives.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path)).module()
    for rows, cols in [(3, 50), (5, 17), (2, 3000), (4, 6)]:
        inputs = export_inputs(rows, cols)
        assert_same(ep.module()(*inputs), model(*inputs))
        assert_same(loaded(*inputs), model(*inputs))


# --- torch.library.opcheck ------------------------------------------------------

ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("dtype, lead", list(itertools.product(MASK_DTYPES, [(), (2,), (2, 3)])),
                         ids=lambda v: str(v).replace("torch.", ""))
def test_opcheck_dtypes_and_batch_shapes(dtype, lead):
    mask = random_mask(lead + (13,), 0.4, dtype, seed=1)
    torch.library.opcheck(OPS.compact.default, (mask, 5), test_utils=ALL_TESTS)


@pytest.mark.parametrize("lead, n, k", [
    ((), 0, 5), ((3,), 0, 5), ((2, 3), 0, 4),    # empty rows
    ((), 13, 0), ((3,), 13, 0), ((2, 3), 0, 0),  # K = 0
    ((0,), 13, 5), ((2, 0), 7, 3),               # no rows
    ((3,), 13, 40),                              # K > N
    ((2,), 70000, 100),                          # chunked rows
])
def test_opcheck_empty_rows_k_zero_and_long_rows(lead, n, k):
    mask = random_mask(lead + (n,), 0.5, seed=2)
    torch.library.opcheck(OPS.compact.default, (mask, k), test_utils=ALL_TESTS)


def test_opcheck_non_contiguous():
    mask = random_mask((6, 40), 0.5, torch.int64, seed=3)[::2, ::3]
    torch.library.opcheck(OPS.compact.default, (mask, 8), test_utils=ALL_TESTS)
