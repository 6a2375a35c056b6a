"""syncfree.nms equals torchvision's nms / batched_nms and an independent reference.

Every input is checked against the NumPy greedy reference (helpers/nms_reference.py:
both torch legs); where torchvision is installed also against
torchvision.ops.nms, batched_nms and its per-id form (_batched_nms_vanilla),
row by row on the row's valid boxes, indices mapped back. Scores are distinct
wherever torchvision is compared (its sort is not stable); the tie rule is
tested on its own. On CUDA, syncfree.nms equals the CPU's bit for bit.
"""
import itertools
import math
import os

import pytest
import torch

import syncfree
from helpers.nms_reference import clustered_boxes, distinct_scores, iou_one_to_many, nms_batched, nms_inputs, random_boxes

if os.environ.get("SYNCFREE_EXPECT_TORCHVISION") == "1":
    import torchvision  # the CI leg with a paired torchvision: a failed import fails
    import torchvision.ops.boxes as tv_boxes
else:
    try:
        import torchvision
        import torchvision.ops.boxes as tv_boxes
    except ImportError:
        torchvision = None

needs_tv = pytest.mark.skipif(torchvision is None, reason="torchvision is not installed")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def assert_equal_to_reference(boxes, scores, thr, max_output, idxs=None, valid=None):
    got_i, got_v = syncfree.nms(boxes, scores, thr, max_output, idxs=idxs, valid=valid)
    want_i, want_v = nms_batched(boxes, scores, thr, max_output, idxs, valid)
    assert got_i.dtype == torch.int64 and got_v.dtype == torch.bool
    assert got_i.shape == want_i.shape and got_v.shape == want_v.shape
    assert torch.equal(got_v, want_v)
    assert torch.equal(got_i, want_i), (got_i, want_i)
    return got_i, got_v


def tv_row(boxes, scores, thr, idxs=None, valid=None, batched="vanilla"):
    """torchvision on one row's valid boxes, indices mapped back to the row."""
    sel = torch.arange(scores.shape[0]) if valid is None else torch.nonzero(valid).flatten()
    b, s = boxes[sel], scores[sel]
    if b.dtype in (torch.float16, torch.bfloat16):
        b, s = b.float(), s.float()  # the contract: computed in float32
    if idxs is None:
        keep = torchvision.ops.nms(b, s, thr)
    elif batched == "vanilla":
        keep = tv_boxes._batched_nms_vanilla(b, s, idxs[sel], thr)
    else:
        keep = torchvision.ops.batched_nms(b, s, idxs[sel], thr)
    return sel[keep]


def assert_equal_to_torchvision(boxes, scores, thr, max_output, idxs=None, valid=None, batched="vanilla"):
    got_i, got_v = syncfree.nms(boxes, scores, thr, max_output, idxs=idxs, valid=valid)
    n = scores.shape[-1]
    rows = math.prod(scores.shape[:-1])
    gi, gv = got_i.reshape(rows, max_output), got_v.reshape(rows, max_output)
    for r in range(rows):
        want = tv_row(boxes.reshape(rows, n, 4)[r], scores.reshape(rows, n)[r], thr,
                      None if idxs is None else idxs.reshape(rows, n)[r],
                      None if valid is None else valid.reshape(rows, n)[r], batched)[:max_output]
        k = want.numel()
        assert torch.equal(gi[r, :k], want), (r, gi[r, :k], want)
        assert bool(gv[r, :k].all()) and not bool(gv[r, k:].any())
        assert bool((gi[r, k:] == -1).all())


# --- random inputs --------------------------------------------------------------

CASES = [
    # lead, n, max_output, thr
    ((), 50, 50, 0.5),
    ((3,), 200, 64, 0.7),
    ((2, 3), 120, 300, 0.3),
    ((4,), 1000, 1000, 0.7),
    ((2,), 700, 100, 0.5),
]


@pytest.mark.parametrize("lead, n, max_output, thr", CASES)
@pytest.mark.parametrize("kind", ["uniform", "clustered"])
def test_random_equals_reference(lead, n, max_output, thr, kind):
    g = gen(n + len(lead))
    boxes = (random_boxes(lead + (n,), g) if kind == "uniform" else clustered_boxes(lead + (n,), g))
    scores = torch.rand(lead + (n,), generator=g)
    assert_equal_to_reference(boxes, scores, thr, max_output)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("with_ids", [False, True], ids=["nms", "batched"])
def test_dtypes_equal_reference(dtype, with_ids):
    g = gen(11)
    n = 240
    boxes = clustered_boxes((3, n), g, clusters=20, size=200.0, dtype=dtype)
    scores = distinct_scores((3, n), g, dtype)
    idxs = torch.randint(0, 4, (3, n), generator=g) if with_ids else None
    valid = torch.rand(3, n, generator=g) < 0.8
    assert_equal_to_reference(boxes, scores, 0.5, 100, idxs, valid)


@pytest.mark.parametrize("lead, n, max_output, thr", CASES)
@pytest.mark.parametrize("kind", ["uniform", "clustered"])
def test_valid_and_idxs_equal_reference(lead, n, max_output, thr, kind):
    g = gen(7 * n + len(lead))
    boxes = (random_boxes(lead + (n,), g) if kind == "uniform" else clustered_boxes(lead + (n,), g))
    scores = torch.rand(lead + (n,), generator=g)
    idxs = torch.randint(0, 5, lead + (n,), generator=g)
    valid = torch.rand(lead + (n,), generator=g) < 0.7
    assert_equal_to_reference(boxes, scores, thr, max_output, idxs, valid)


@needs_tv
@pytest.mark.parametrize("lead, n, max_output, thr", CASES)
@pytest.mark.parametrize("kind", ["uniform", "clustered"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_random_equals_torchvision_nms(lead, n, max_output, thr, kind, dtype):
    g = gen(3 * n + len(lead))
    boxes = (random_boxes(lead + (n,), g, dtype=dtype) if kind == "uniform"
             else clustered_boxes(lead + (n,), g, dtype=dtype))
    scores = distinct_scores(lead + (n,), g, dtype)
    assert_equal_to_torchvision(boxes, scores, thr, max_output)
    valid = torch.rand(lead + (n,), generator=g) < 0.6
    assert_equal_to_torchvision(boxes, scores, thr, max_output, valid=valid)


@needs_tv
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_equals_torchvision_on_float32(dtype):
    g = gen(5)
    boxes = clustered_boxes((2, 250), g, clusters=25, size=200.0, dtype=dtype)
    scores = distinct_scores((2, 250), g, dtype)
    assert_equal_to_torchvision(boxes, scores, 0.5, 250)


@needs_tv
@pytest.mark.parametrize("lead, n, max_output, thr", CASES)
@pytest.mark.parametrize("num_ids", [2, 7, 1000])
def test_random_equals_torchvision_batched_nms_vanilla(lead, n, max_output, thr, num_ids):
    g = gen(5 * n + num_ids)
    boxes = clustered_boxes(lead + (n,), g)
    scores = distinct_scores(lead + (n,), g)
    idxs = torch.randint(0, num_ids, lead + (n,), generator=g)
    valid = torch.rand(lead + (n,), generator=g) < 0.8
    assert_equal_to_torchvision(boxes, scores, thr, max_output, idxs)
    assert_equal_to_torchvision(boxes, scores, thr, max_output, idxs, valid)


@needs_tv
@pytest.mark.parametrize("n", [100, 999, 3000])  # both of batched_nms's CPU paths
def test_random_equals_torchvision_batched_nms(n):
    # batched_nms offsets the boxes of each id for N <= 1000 on the CPU, which
    # can change an IoU by a rounding; on random inputs it keeps the same boxes.
    g = gen(n)
    boxes = clustered_boxes((2, n), g)
    scores = distinct_scores((2, n), g)
    idxs = torch.randint(0, 6, (2, n), generator=g)
    assert_equal_to_torchvision(boxes, scores, 0.6, n, idxs, batched="batched_nms")


# --- adversarial inputs ---------------------------------------------------------


def chain(n, step, width=10.0, dtype=torch.float32):
    """Boxes along x, each overlapping the next: the greedy order decides everything."""
    x = torch.arange(n, dtype=torch.float64) * step
    return torch.stack([x, torch.zeros(n, dtype=torch.float64), x + width,
                        torch.full((n,), 10.0, dtype=torch.float64)], dim=-1).to(dtype)


def adversarial_inputs():
    g = gen(99)
    n = 64
    yield "chain_decreasing", chain(n, 2.0), -torch.arange(n, dtype=torch.float32)
    yield "chain_increasing", chain(n, 2.0), torch.arange(n, dtype=torch.float32)
    yield "chain_shuffled", chain(n, 3.0), distinct_scores((n,), g)
    yield "identical", torch.tensor([[1.0, 2.0, 5.0, 9.0]]).repeat(n, 1), distinct_scores((n,), g)
    disjoint = torch.stack([torch.arange(n) * 20.0, torch.zeros(n), torch.arange(n) * 20.0 + 10, torch.ones(n)], -1)
    yield "disjoint", disjoint, distinct_scores((n,), g)
    touching = torch.stack([torch.arange(n) * 10.0, torch.zeros(n), torch.arange(n) * 10.0 + 10, torch.ones(n)], -1)
    yield "touching", touching, distinct_scores((n,), g)
    nested = torch.stack([torch.arange(n) * 1.0, torch.arange(n) * 1.0,
                          200 - torch.arange(n) * 1.0, 200 - torch.arange(n) * 1.0], -1)
    yield "nested", nested, distinct_scores((n,), g)
    degenerate = random_boxes((n,), g)
    degenerate[::4, 2] = degenerate[::4, 0]           # zero width
    degenerate[1::4, 2] = degenerate[1::4, 0] - 5.0   # inverted x
    degenerate[2::4, 3] = degenerate[2::4, 1] - 1.0   # inverted y
    yield "degenerate", degenerate, distinct_scores((n,), g)
    points = torch.tensor([[3.0, 3.0, 3.0, 3.0]]).repeat(n, 1)
    yield "points", points, distinct_scores((n,), g)
    nonfinite = clustered_boxes((n,), g, clusters=4, size=50.0)
    nonfinite[3, 0] = math.nan
    nonfinite[5, 2] = math.nan
    nonfinite[7, 1] = math.inf
    nonfinite[9, 3] = -math.inf
    nonfinite[11] = torch.tensor([-math.inf, -math.inf, math.inf, math.inf])
    yield "nonfinite_coordinates", nonfinite, distinct_scores((n,), g)
    yield "clustered", clustered_boxes((n,), g, clusters=3, jitter=0.05), distinct_scores((n,), g)
    yield "large_coordinates", clustered_boxes((n,), g, clusters=5) * 1e6 + 3e7, distinct_scores((n,), g)


ADVERSARIAL = list(adversarial_inputs())
THRESHOLDS = [0.0, 0.1, 0.5, 0.7, 1.0, -0.5, 1.5, math.inf, -math.inf]


@pytest.mark.parametrize("name, boxes, scores", ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
@pytest.mark.parametrize("thr", THRESHOLDS)
def test_adversarial_equals_reference(name, boxes, scores, thr):
    for max_output in (0, 1, 7, boxes.shape[0], boxes.shape[0] + 5):
        assert_equal_to_reference(boxes, scores, thr, max_output)
    idxs = torch.arange(boxes.shape[0]) % 3
    assert_equal_to_reference(boxes, scores, thr, boxes.shape[0], idxs)


@needs_tv
@pytest.mark.parametrize("name, boxes, scores", ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
@pytest.mark.parametrize("thr", THRESHOLDS)
def test_adversarial_equals_torchvision(name, boxes, scores, thr):
    n = boxes.shape[0]
    for max_output in (1, 7, n):
        assert_equal_to_torchvision(boxes, scores, thr, max_output)
    assert_equal_to_torchvision(boxes, scores, thr, n, torch.arange(n) % 3)
    assert_equal_to_torchvision(boxes, scores, thr, n, torch.arange(n))  # every box its own id


def test_adversarial_outcomes():
    """What the adversarial inputs must give, independently of any reference."""
    n = 64
    by_name = {a[0]: a for a in ADVERSARIAL}
    _, boxes, scores = by_name["identical"]
    idx, ok = syncfree.nms(boxes, scores, 0.5, n)
    assert int(ok.sum()) == 1 and int(idx[0]) == int(scores.argmax())
    idx, ok = syncfree.nms(boxes, scores, 1.0, n)  # IoU 1 is not > 1
    assert int(ok.sum()) == n
    _, boxes, scores = by_name["disjoint"]
    idx, ok = syncfree.nms(boxes, scores, 0.0, n)
    assert int(ok.sum()) == n
    assert torch.equal(idx, torch.argsort(scores, descending=True))
    idx, ok = syncfree.nms(boxes, scores, -0.5, n)  # IoU 0 > -0.5: the best box takes all
    assert int(ok.sum()) == 1
    # A chain where each box overlaps only its neighbours (IoU 8/12 > 0.5):
    # by decreasing score along x, every other box is kept.
    _, boxes, scores = by_name["chain_decreasing"]
    idx, ok = syncfree.nms(boxes, scores, 0.5, n)
    assert torch.equal(idx[ok], torch.arange(0, n, 2))
    _, boxes, scores = by_name["chain_increasing"]
    idx, ok = syncfree.nms(boxes, scores, 0.5, n)
    assert torch.equal(idx[ok], torch.arange(n - 1, -1, -2))
    # Touching boxes have IoU 0: threshold 0 keeps them all.
    _, boxes, scores = by_name["touching"]
    assert int(syncfree.nms(boxes, scores, 0.0, n)[1].sum()) == n


def test_iou_exactly_at_threshold_is_kept():
    boxes = torch.tensor([[0.0, 0.0, 2.0, 1.0], [0.0, 0.0, 1.0, 1.0]])  # IoU exactly 0.5
    scores = torch.tensor([0.9, 0.8])
    assert syncfree.nms(boxes, scores, 0.5, 2)[0].tolist() == [0, 1]
    assert syncfree.nms(boxes, scores, math.nextafter(0.5, 0.0), 2)[0].tolist() == [0, -1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_threshold_compared_in_double(dtype):
    # A float32 IoU v is compared with the double threshold t as double(v) > t:
    # t = v keeps the box, the double just below v suppresses it, also where
    # float32(t) would round up to v.
    g = gen(3)
    boxes = random_boxes((400,), g, size=20.0, max_wh=20.0).to(dtype)
    for j in range(1, 400):
        pair_boxes, pair_scores = boxes[[0, j]], torch.tensor([1.0, 0.0]).to(dtype)
        v = float(iou_one_to_many(pair_boxes[0].float().numpy(), pair_boxes[1:].float().numpy())[0])
        if not (0.0 < v < 1.0):
            continue
        assert syncfree.nms(pair_boxes, pair_scores, v, 2)[0].tolist() == [0, 1]
        below = math.nextafter(v, -math.inf)
        assert syncfree.nms(pair_boxes, pair_scores, below, 2)[0].tolist() == [0, -1]
        if torchvision is not None and dtype == torch.float32:
            assert torchvision.ops.nms(pair_boxes, pair_scores, v).tolist() == [0, 1]
            assert torchvision.ops.nms(pair_boxes, pair_scores, below).tolist() == [0]


# --- the tie rule, NaN and inf scores ---------------------------------------------


def test_equal_scores_rank_by_lower_index():
    # Identical boxes with equal scores: the lowest index is kept.
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0]]).repeat(6, 1)
    scores = torch.tensor([0.1, 0.5, 0.5, 0.2, 0.5, 0.5])
    assert syncfree.nms(boxes, scores, 0.5, 6)[0].tolist() == [1, -1, -1, -1, -1, -1]
    # Disjoint boxes: the output lists equal scores by index.
    boxes = torch.stack([torch.arange(6) * 10.0, torch.zeros(6), torch.arange(6) * 10.0 + 5, torch.ones(6)], -1)
    assert syncfree.nms(boxes, scores, 0.5, 6)[0].tolist() == [1, 2, 4, 5, 3, 0]
    # -0.0 and 0.0 are equal scores.
    scores = torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0, -1.0])
    assert syncfree.nms(boxes, scores, 0.5, 6)[0].tolist() == [4, 0, 1, 2, 3, 5]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_tie_rule_against_reference_with_many_ties(dtype):
    g = gen(21)
    boxes = clustered_boxes((4, 200), g, clusters=15, size=150.0, dtype=dtype)
    scores = torch.randint(0, 5, (4, 200), generator=g).to(dtype)  # heavy ties
    idxs = torch.randint(0, 3, (4, 200), generator=g)
    assert_equal_to_reference(boxes, scores, 0.4, 200)
    assert_equal_to_reference(boxes, scores, 0.4, 37, idxs)


def test_nan_scores_take_no_part_and_inf_scores_rank():
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0]]).repeat(5, 1)
    scores = torch.tensor([0.5, math.nan, 0.7, -math.inf, math.nan])
    assert syncfree.nms(boxes, scores, 0.5, 5)[0].tolist() == [2, -1, -1, -1, -1]
    # NaN never suppresses: a NaN-scored box over a kept one changes nothing.
    disjoint = torch.stack([torch.arange(5) * 10.0, torch.zeros(5), torch.arange(5) * 10.0 + 5, torch.ones(5)], -1)
    assert syncfree.nms(disjoint, scores, 0.5, 5)[0].tolist() == [2, 0, 3, -1, -1]
    scores = torch.tensor([0.5, math.inf, 0.7, -math.inf, 1.0])
    assert syncfree.nms(disjoint, scores, 0.5, 5)[0].tolist() == [1, 4, 2, 0, 3]
    assert syncfree.nms(boxes, scores, 0.5, 5)[0].tolist() == [1, -1, -1, -1, -1]


@needs_tv
def test_nan_scores_equal_torchvision_without_them():
    g = gen(8)
    boxes = clustered_boxes((300,), g, clusters=10, size=100.0)
    scores = distinct_scores((300,), g)
    scores[::7] = math.nan
    got = syncfree.nms(boxes, scores, 0.5, 300)
    keep = ~torch.isnan(scores)
    sel = torch.nonzero(keep).flatten()
    want = sel[torchvision.ops.nms(boxes[sel], scores[sel], 0.5)]
    assert torch.equal(got[0][got[1]], want)


# --- layout: batches, strides, empty shapes -----------------------------------------


def test_batch_equals_per_row_loop():
    g = gen(4)
    boxes = clustered_boxes((2, 3, 300), g)
    scores = torch.rand(2, 3, 300, generator=g)
    idxs = torch.randint(0, 4, (2, 3, 300), generator=g)
    valid = torch.rand(2, 3, 300, generator=g) < 0.9
    got_i, got_v = syncfree.nms(boxes, scores, 0.6, 50, idxs=idxs, valid=valid)
    for a, b in itertools.product(range(2), range(3)):
        i, v = syncfree.nms(boxes[a, b], scores[a, b], 0.6, 50, idxs=idxs[a, b], valid=valid[a, b])
        assert torch.equal(got_i[a, b], i) and torch.equal(got_v[a, b], v)


def test_any_strides():
    g = gen(6)
    boxes = clustered_boxes((3, 4, 150), g)
    scores = torch.rand(3, 4, 150, generator=g)
    idxs = torch.randint(0, 3, (3, 4, 150), generator=g)
    valid = torch.rand(3, 4, 150, generator=g) < 0.8
    want = syncfree.nms(boxes, scores, 0.5, 40, idxs=idxs, valid=valid)
    # Transposed batch dims, coordinates interleaved with padding, every other score.
    b = torch.empty(4, 3, 150, 8)[..., ::2].transpose(0, 1)
    b.copy_(boxes)
    s = torch.empty(4, 3, 300)[..., ::2].transpose(0, 1)
    s.copy_(scores)
    i = idxs.to(torch.int16).transpose(0, 1).contiguous().transpose(0, 1)
    v = valid.transpose(0, 1).contiguous().transpose(0, 1)
    assert not b.is_contiguous() and not s.is_contiguous() and not i.is_contiguous()
    got = syncfree.nms(b, s, 0.5, 40, idxs=i, valid=v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # Coordinates along a non-last stride: boxes given as [..., 4, N] transposed.
    bt = boxes.transpose(-1, -2).contiguous().transpose(-1, -2)
    got = syncfree.nms(bt, scores, 0.5, 40, idxs=idxs, valid=valid)
    assert torch.equal(got[0], want[0])
    # Broadcast (stride 0) inputs.
    one = boxes[:1, :1].expand(3, 4, 150, 4)
    got = syncfree.nms(one, scores[:1, :1].expand(3, 4, 150), 0.5, 40)
    row = syncfree.nms(boxes[0, 0], scores[0, 0], 0.5, 40)
    assert torch.equal(got[0], row[0].expand(3, 4, 40))


@pytest.mark.parametrize("lead, n, max_output", [
    ((), 0, 5), ((3,), 0, 4), ((), 10, 0), ((0,), 10, 3), ((2, 0), 5, 2), ((3,), 1, 4),
])
def test_empty_shapes(lead, n, max_output):
    g = gen(1)
    boxes = random_boxes(lead + (n,), g)
    scores = torch.rand(lead + (n,), generator=g)
    idx, ok = assert_equal_to_reference(boxes, scores, 0.5, max_output)
    assert idx.shape == lead + (max_output,)


def test_all_invalid_rows_are_empty():
    g = gen(2)
    boxes = random_boxes((2, 30), g)
    scores = torch.rand(2, 30, generator=g)
    valid = torch.zeros(2, 30, dtype=torch.bool)
    valid[1, 3] = True
    idx, ok = syncfree.nms(boxes, scores, 0.5, 4, valid=valid)
    assert idx.tolist() == [[-1] * 4, [3, -1, -1, -1]]
    assert ok.tolist() == [[False] * 4, [True, False, False, False]]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64],
                         ids=lambda d: str(d).replace("torch.", ""))
def test_idxs_dtypes(dtype):
    g = gen(9)
    boxes = clustered_boxes((2, 100), g, clusters=5, size=50.0)
    scores = torch.rand(2, 100, generator=g)
    idxs = torch.randint(0, 4, (2, 100), generator=g)
    want = syncfree.nms(boxes, scores, 0.5, 100, idxs=idxs)
    got = syncfree.nms(boxes, scores, 0.5, 100, idxs=idxs.to(dtype))
    assert torch.equal(got[0], want[0])
    # Negative and huge ids are ids like any other.
    if dtype == torch.int64:
        big = torch.where(idxs == 0, -(2 ** 62), idxs * (2 ** 40))
        got = syncfree.nms(boxes, scores, 0.5, 100, idxs=big)
        assert torch.equal(got[0], want[0])


def test_torch_ops_and_python_wrapper_agree():
    g = gen(10)
    boxes = clustered_boxes((2, 80), g)
    scores = torch.rand(2, 80, generator=g)
    a = syncfree.nms(boxes, scores, 0.5, 30)
    b = torch.ops.syncfree.nms(boxes, scores, 0.5, 30)
    c = torch.ops.syncfree.nms.default(boxes, scores, 0.5, 30, idxs=None, valid=None)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and all(torch.equal(x, y) for x, y in zip(a, c))


def test_strided_inputs(device):
    boxes, scores, idxs, valid = nms_inputs((3, 2), 300, 1, device=device)
    want = syncfree.nms(boxes, scores, 0.5, 40, idxs=idxs, valid=valid)
    b = boxes.transpose(0, 1).contiguous().transpose(0, 1)
    s = torch.empty(3, 2, 600, device=device)[..., ::2]
    s.copy_(scores)
    got = syncfree.nms(b, s, 0.5, 40, idxs=idxs.int(), valid=valid)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_cuda_equals_cpu(dtype):
    for lead, n in [((), 1), ((3,), 64), ((2,), 65), ((2, 3), 200), ((4,), 1000), ((1,), 5000), ((3,), 0)]:
        for ties in (False, True):
            boxes, scores, idxs, valid = nms_inputs(lead, n, n, dtype, ties)
            for thr in (0.0, 0.5, 0.7, 1.0, -0.1):
                for m in (1, 17, n + 2):
                    for ids, ok in ((None, None), (idxs, valid)):
                        want = syncfree.nms(boxes, scores, thr, m, idxs=ids, valid=ok)
                        got = syncfree.nms(boxes.cuda(), scores.cuda(), thr, m, idxs=None if ids is None else ids.cuda(),
                                           valid=None if ok is None else ok.cuda())
                        assert got[0].device.type == "cuda"
                        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1]), \
                            (lead, n, ties, thr, m, ids is None)


@pytest.mark.cuda
@pytest.mark.parametrize("lead, n, m", [((1,), 20000, 20000), ((2,), 17000, 300), ((70000,), 8, 4), ((66000,), 65, 65)],
                         ids=["one-row-20000", "two-rows-17000", "70000-rows", "66000-rows-of-65"])
def test_cuda_equals_cpu_at_detection_scale(lead, n, m):
    """Where the CUDA kernels switch to their other loops: more than 256 mask
    words per rank (N > 16,384; one row takes the device-wide sort), and more
    than 65,535 rows (the mask grid's z limit)."""
    boxes, scores, idxs, valid = nms_inputs(lead, n, 3)
    for thr in (0.5, 0.7):
        for ids, ok in ((None, None), (idxs, valid)):
            want = syncfree.nms(boxes, scores, thr, m, idxs=ids, valid=ok)
            got = syncfree.nms(boxes.cuda(), scores.cuda(), thr, m, idxs=None if ids is None else ids.cuda(),
                               valid=None if ok is None else ok.cuda())
            assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1]), (lead, n, thr)


@pytest.mark.cuda
def test_cuda_mask_limit_is_a_clear_error_before_any_allocation():
    """rows * N * ceil(N / 64) * 8 bytes of suppression mask at most 64 GiB:
    800,000 boxes in one row would need 80 GB."""
    boxes, scores, _, _ = nms_inputs((1,), 800000, 5, device="cuda")
    free_before = torch.cuda.mem_get_info()[0]
    with pytest.raises(RuntimeError, match=r"^syncfree\.nms: boxes too large for the CUDA backend's suppression "
                                           r"mask: 1 rows of N = 800000 boxes need 80000000000 bytes of mask .*"
                                           r"more than the limit of 68719476736 \(64 GiB\); with many ids, lay them "
                                           r"out as a leading dimension"):
        syncfree.nms(boxes, scores, 0.5, 100)
    assert torch.cuda.mem_get_info()[0] >= free_before - (64 << 20)
