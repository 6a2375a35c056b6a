"""Bad boxes and bad arguments to syncfree.multi_scale_roi_align.

Boxes with a NaN or infinite coordinate pool exact zeros, receive and give no
gradient, and leave every other box's values and gradients as they are
without them (torchvision's roi_align is never called with them: it may
crash on a NaN sample). Huge finite coordinates give finite values. Boxes
with x2 < x1 or y2 < y1 are pooled as torchvision pools them. Bad arguments
raise an error that names the op, the argument, what was expected and what
was received, on eager CPU tensors (with and without gradients) and on the
Meta backend alike; wrong Python types raise TypeError in the wrapper.
"""
import math
from collections import OrderedDict

import pytest
import torch

import syncfree

OP = torch.ops.syncfree.multi_scale_roi_align
B, C, K = 2, 3, 6
IMAGE = (64, 48)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def pyramid(num_levels, dtype=torch.float32, seed=0):
    g = gen(seed)
    scales = [2.0 ** -(2 + l) for l in range(num_levels)]
    features = [torch.randn(B, C, IMAGE[0] >> (2 + l), IMAGE[1] >> (2 + l), generator=g).to(dtype)
                for l in range(num_levels)]
    return features, scales


def good_boxes(dtype=torch.float32, seed=1):
    """[B, K, 4] boxes of sizes 4 to ~100 (every level of a 3-level pyramid
    with canonical_scale 32), all inside or near the image."""
    g = gen(seed)
    xy = torch.rand(B, K, 2, generator=g, dtype=torch.float64) * torch.tensor([IMAGE[1], IMAGE[0]]) * 0.8
    size = 4 * 2.0 ** (torch.rand(B, K, 2, generator=g, dtype=torch.float64) * 5)
    return torch.cat([xy, xy + size], dim=-1).to(dtype)


def run(features, boxes, upstream, **kw):
    feats = [f.detach().clone().requires_grad_() for f in features]
    out = syncfree.multi_scale_roi_align(feats, boxes, (4, 3), kw.pop("scales"), 2, **kw)
    grads = torch.autograd.grad(out, feats, upstream)
    return out, grads


def assert_like_without(features, scales, bad, bad_slots, upstream, **kw):
    """``bad`` boxes [B, K, 4] with bad coordinates at ``bad_slots`` (pairs
    (b, k)): those rows are exact zeros; every other row and every gradient
    equals the call where those slots are not valid (upstream gradients of
    the bad rows included: they must go nowhere)."""
    valid = torch.ones(B, K, dtype=torch.bool)
    for b, k in bad_slots:
        valid[b, k] = False
    without = bad.clone()
    for b, k in bad_slots:
        without[b, k] = torch.tensor([1.0, 2.0, 30.0, 40.0])  # a good box, not pooled
    out, grads = run(features, bad, upstream, scales=scales, **kw)
    want, want_grads = run(features, without, upstream, scales=scales, valid=valid, **kw)
    assert torch.equal(out, want)
    for g, w in zip(grads, want_grads):
        assert torch.equal(g, w) and bool(torch.isfinite(g).all())
    rows = [b * K + k for b, k in bad_slots]
    assert not bool(out[rows].any())
    assert bool(out.abs().sum() > 0)  # the good boxes were pooled
    # With every slot marked valid, the bad boxes are still not pooled.
    out_valid, grads_valid = run(features, bad, upstream, scales=scales, valid=torch.ones(B, K, dtype=torch.bool),
                                 **kw)
    assert torch.equal(out_valid, out)
    for g, w in zip(grads_valid, grads):
        assert torch.equal(g, w)


NAN, INF = math.nan, math.inf
NON_FINITE = {
    "nan_x1": [NAN, 2.0, 30.0, 40.0],
    "nan_y1": [1.0, NAN, 30.0, 40.0],
    "nan_x2": [1.0, 2.0, NAN, 40.0],
    "nan_y2": [1.0, 2.0, 30.0, NAN],
    "nan_all": [NAN, NAN, NAN, NAN],
    "nan_corner": [1.0, 2.0, NAN, NAN],
    "inf_x2": [1.0, 2.0, INF, 40.0],
    "inf_y2": [1.0, 2.0, 30.0, INF],
    "inf_x1": [INF, 2.0, 30.0, 40.0],
    "neg_inf_x1": [-INF, 2.0, 30.0, 40.0],
    "neg_inf_y1": [1.0, -INF, 30.0, 40.0],
    "neg_inf_x2": [1.0, 2.0, -INF, 40.0],
    "inf_box": [-INF, -INF, INF, INF],
    "inf_everywhere": [INF, INF, INF, INF],
    "inf_and_nan": [-INF, NAN, INF, 3.0],
}


@pytest.mark.parametrize("name", list(NON_FINITE))
@pytest.mark.parametrize("num_levels", [1, 3])
@pytest.mark.parametrize("aligned", [False, True])
def test_non_finite_boxes_pool_zeros_and_no_gradient(name, num_levels, aligned):
    features, scales = pyramid(num_levels)
    boxes = good_boxes()
    slots = [(0, 1), (1, 5)]
    for b, k in slots:
        boxes[b, k] = torch.tensor(NON_FINITE[name])
    upstream = torch.randn(B * K, C, 4, 3, generator=gen(2))
    assert_like_without(features, scales, boxes, slots, upstream, aligned=aligned, canonical_scale=32.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16],
                         ids=["float64", "bfloat16", "float16"])
def test_non_finite_boxes_other_dtypes(dtype):
    features, scales = pyramid(3, dtype)
    boxes = good_boxes(dtype)
    slots = [(0, 0), (0, 3), (1, 2), (1, 4)]
    for (b, k), name in zip(slots, ["nan_x1", "inf_y2", "inf_box", "nan_all"]):
        boxes[b, k] = torch.tensor(NON_FINITE[name], dtype=dtype)
    upstream = torch.randn(B * K, C, 4, 3, generator=gen(3)).to(dtype)
    assert_like_without(features, scales, boxes, slots, upstream, canonical_scale=32.0)


def test_every_box_non_finite():
    features, scales = pyramid(3)
    boxes = torch.full((B, K, 4), NAN)
    boxes[1, :, 2] = INF
    out, grads = run(features, boxes, torch.ones(B * K, C, 4, 3), scales=scales)
    assert out.shape == (B * K, C, 4, 3) and not bool(out.any())
    assert not any(bool(g.any()) for g in grads)


def test_good_rows_next_to_non_finite_boxes_equal_torchvision(tv):
    """torchvision on the good boxes only (never on the bad ones)."""
    features, scales = pyramid(3)
    boxes = good_boxes()
    bad = [(0, 2), (1, 0), (1, 3)]
    for (b, k), name in zip(bad, ["nan_y2", "neg_inf_x1", "inf_and_nan"]):
        boxes[b, k] = torch.tensor(NON_FINITE[name])
    keep = torch.ones(B, K, dtype=torch.bool)
    for b, k in bad:
        keep[b, k] = False
    box_list = [boxes[b][keep[b]] for b in range(B)]
    pooler = tv.ops.MultiScaleRoIAlign(["a", "b", "c"], (4, 3), 2, canonical_scale=32)
    want = pooler(OrderedDict(zip("abc", features)), box_list, [IMAGE] * B)
    got = syncfree.multi_scale_roi_align(features, boxes, (4, 3), scales, 2, canonical_scale=32.0)
    assert torch.equal(got[keep.reshape(-1)], want)
    assert not bool(got[~keep.reshape(-1)].any())
    assert set(pooler.map_levels(box_list).tolist()) == {0, 1, 2}


HUGE = {
    "far_point": [1e30, 1e30, 1e30, 1e30],
    "far_box": [1e30, 2e30, 3e30, 4e30],
    "far_negative": [-1e30, -1e30, -1e30 + 1e24, -1e30 + 1e24],
    "giant": [-1e30, -1e30, 1e30, 1e30],
    "max_float": [0.0, 0.0, 3e38, 3e38],
    "max_span": [-3e38, -3e38, 3e38, 3e38],   # x2 - x1 overflows float32
    "long_x": [10.0, 10.0, 1e30, 20.0],
    "long_negative_x": [-1e30, 5.0, 20.0, 30.0],
    "tall": [5.0, -3e38, 9.0, 3e38],
    "reversed_giant": [1e30, 1e30, -1e30, -1e30],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("num_levels", [1, 3])
@pytest.mark.parametrize("aligned", [False, True])
def test_huge_finite_coordinates_give_finite_values(num_levels, dtype, aligned):
    """Coordinates up to 3e38 (areas and sizes that overflow to inf, samples
    that become NaN): finite values and gradients, no crash, the other boxes
    as they are without them."""
    features, scales = pyramid(num_levels, dtype)
    names = list(HUGE)
    boxes = good_boxes(dtype)
    slots = [(b, k) for b in range(B) for k in range(K)][:len(names)]
    for (b, k), name in zip(slots, names):
        boxes[b, k] = torch.tensor(HUGE[name], dtype=torch.float64).to(dtype)
    upstream = torch.randn(B * K, C, 4, 3, generator=gen(4)).to(dtype)
    out, grads = run(features, boxes, upstream, scales=scales, aligned=aligned)
    assert bool(torch.isfinite(out).all())
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    # The good boxes (the slots after the huge ones) are pooled as alone.
    valid = torch.zeros(B, K, dtype=torch.bool)
    valid.view(-1)[len(names):] = True
    assert bool(valid.any())
    out_good, _ = run(features, boxes, upstream, scales=scales, aligned=aligned, valid=valid)
    rows = valid.reshape(-1)
    assert torch.equal(out[rows], out_good[rows]) and bool(out_good[rows].any())


def test_huge_float64_coordinates():
    features, scales = pyramid(3, torch.float64)
    boxes = good_boxes(torch.float64)
    boxes[0, 0] = torch.tensor([-1e300, -1e300, 1e300, 1e300], dtype=torch.float64)  # area overflows
    boxes[0, 1] = torch.tensor([-1.7e308, 0.0, 1.7e308, 10.0], dtype=torch.float64)   # width overflows
    boxes[1, 2] = torch.tensor([1e-300, 1e-300, 2e-300, 2e-300], dtype=torch.float64)  # area underflows to 0
    out, grads = run(features, boxes, torch.randn(B * K, C, 4, 3, dtype=torch.float64, generator=gen(5)),
                     scales=scales)
    assert bool(torch.isfinite(out).all()) and all(bool(torch.isfinite(g).all()) for g in grads)


REVERSED = {
    "x": [30.0, 10.0, 10.0, 40.0],        # x2 < x1: negative area, LevelMapper's level is NaN
    "y": [10.0, 40.0, 30.0, 10.0],        # y2 < y1
    "both": [40.0, 40.0, 10.0, 10.0],     # both: a positive area, a level like any box's
    "x_by_ulp": [20.0, 5.0, 20.0 - 2e-6, 30.0],
}


@pytest.mark.parametrize("num_levels", [1, 3])
def test_reversed_boxes_equal_torchvision(tv, num_levels):
    """torchvision's MultiScaleRoIAlign on boxes with x2 < x1 or y2 < y1 (no
    NaN reaches its roi_align: with several levels LevelMapper's NaN level
    matches no level, with one level roi_align sees finite boxes). With
    several levels, a box reversed along one axis pools zeros and gets no
    gradient; with one level, and for a box reversed along both axes, roi_align
    forces the size to 1 pixel and pools it, as torchvision does."""
    features, scales = pyramid(num_levels, seed=6)
    boxes = good_boxes(seed=7)
    slots = [(0, 0), (0, 4), (1, 1), (1, 5)]
    for (b, k), name in zip(slots, REVERSED):
        boxes[b, k] = torch.tensor(REVERSED[name])
    names = ["a", "b", "c"][:num_levels]
    pooler = tv.ops.MultiScaleRoIAlign(names, (4, 3), 2, canonical_scale=32)
    feats = [f.clone().requires_grad_() for f in features]
    want = pooler(OrderedDict(zip(names, feats)), list(boxes), [IMAGE] * B)
    upstream = torch.randn(B * K, C, 4, 3, generator=gen(8))
    want_grads = torch.autograd.grad(want, feats, upstream, allow_unused=True, materialize_grads=True)
    got, grads = run(features, boxes, upstream, scales=scales, canonical_scale=32.0)
    assert torch.equal(got, want)
    for g, w in zip(grads, want_grads):
        assert torch.equal(g, w)
    one_axis = [b * K + k for (b, k), name in zip(slots, REVERSED) if name != "both"]
    both = [b * K + k for (b, k), name in zip(slots, REVERSED) if name == "both"]
    assert bool(got[both].any())
    if num_levels == 1:
        assert bool(got[one_axis].any())
    else:
        assert not bool(got[one_axis].any())
        # ... and the gradient is the one without them.
        valid = torch.ones(B, K, dtype=torch.bool)
        for r in one_axis:
            valid.view(-1)[r] = False
        _, grads_without = run(features, boxes, upstream, scales=scales, canonical_scale=32.0, valid=valid)
        for g, w in zip(grads, grads_without):
            assert torch.equal(g, w)


def test_reversed_boxes_without_torchvision():
    """The same rule where torchvision is not installed: several levels, one
    reversed axis, zeros."""
    features, scales = pyramid(3, seed=6)
    boxes = good_boxes(seed=7)
    boxes[0, 2] = torch.tensor(REVERSED["x"])
    boxes[1, 3] = torch.tensor(REVERSED["y"])
    upstream = torch.randn(B * K, C, 4, 3, generator=gen(9))
    assert_like_without(features, scales, boxes, [(0, 2), (1, 3)], upstream)


# --- argument errors ----------------------------------------------------------------

FEATURES = [torch.rand(2, 3, 16, 12), torch.rand(2, 3, 8, 6)]
BOXES = torch.rand(2, 5, 4) * 20
BOXES[..., 2:] += BOXES[..., :2]
SCALES = [0.25, 0.125]


def call(features=FEATURES, boxes=BOXES, output_size=(7, 7), spatial_scales=SCALES, sampling_ratio=2, **kw):
    return OP(features, boxes, list(output_size), spatial_scales, sampling_ratio, **kw)


BAD = [
    (dict(features=[], spatial_scales=[]),
     r"features must hold 1 to 16 feature maps \[B, C, H, W\] \(one per level, finest first\), got 0"),
    (dict(features=[FEATURES[0]] * 17, spatial_scales=[0.25] * 17), "features must hold 1 to 16 feature maps .*, got 17"),
    (dict(features=[FEATURES[0].double(), FEATURES[1]]),
     r"features\[1\] must have features\[0\]'s dtype Double, got dtype Float"),
    (dict(features=[FEATURES[0], FEATURES[1].half()]), r"features\[1\] must have features\[0\]'s dtype Float, got dtype Half"),
    (dict(features=[FEATURES[0], torch.rand(2, 4, 8, 6)]),
     r"features\[1\] must have features\[0\]'s batch size and channels \[2, 3\], got shape \[2, 4, 8, 6\]"),
    (dict(features=[FEATURES[0], torch.rand(1, 3, 8, 6)]),
     r"features\[1\] must have features\[0\]'s batch size and channels \[2, 3\], got shape \[1, 3, 8, 6\]"),
    (dict(features=[torch.rand(2, 3, 16), FEATURES[1]]), r"features\[0\] must have shape \[B, C, H, W\], got shape \[2, 3, 16\]"),
    (dict(features=[FEATURES[0], torch.rand(1, 2, 3, 8, 6)]),
     r"features\[1\] must have shape \[B, C, H, W\], got shape \[1, 2, 3, 8, 6\]"),
    (dict(features=[f.long() for f in FEATURES]), "features must be float16, bfloat16, float32 or float64, got dtype Long"),
    (dict(features=[f.bool() for f in FEATURES]), "features must be float16, bfloat16, float32 or float64, got dtype Bool"),
    (dict(boxes=torch.rand(2, 5, 5)),
     r"boxes must have shape \[B, K, 4\] \(x1, y1, x2, y2\) with B = 2 \(the features' batch size\), got shape \[2, 5, 5\]"),
    (dict(boxes=torch.rand(10, 4)), r"boxes must have shape \[B, K, 4\] .* got shape \[10, 4\]"),
    (dict(boxes=torch.rand(3, 5, 4)), r"boxes must have shape \[B, K, 4\] .*with B = 2 .* got shape \[3, 5, 4\]"),
    (dict(boxes=torch.rand(1, 2, 5, 4)), r"boxes must have shape \[B, K, 4\] .* got shape \[1, 2, 5, 4\]"),
    (dict(boxes=BOXES.long()), "boxes must be a floating-point tensor, got dtype Long"),
    (dict(boxes=BOXES.int()), "boxes must be a floating-point tensor, got dtype Int"),
    (dict(output_size=(0, 7)), r"output_size must be two sizes \(h, w\) of at least 1, got \[0, 7\]"),
    (dict(output_size=(7, 0)), r"output_size must be two sizes \(h, w\) of at least 1, got \[7, 0\]"),
    (dict(output_size=(7, -2)), r"output_size must be two sizes \(h, w\) of at least 1, got \[7, -2\]"),
    (dict(output_size=(3, 3, 3)), r"output_size must be two sizes \(h, w\) of at least 1, got \[3, 3, 3\]"),
    (dict(output_size=(7,)), r"output_size must be two sizes \(h, w\) of at least 1, got \[7\]"),
    (dict(spatial_scales=[0.25]), r"spatial_scales must hold one scale per level \(2\), got 1 scales"),
    (dict(spatial_scales=[0.25, 0.125, 0.0625]), r"spatial_scales must hold one scale per level \(2\), got 3 scales"),
    (dict(spatial_scales=[0.25, 0.0]), r"spatial_scales must be finite and positive, got spatial_scales\[1\] = 0"),
    (dict(spatial_scales=[math.nan, 0.125]), r"spatial_scales must be finite and positive, got spatial_scales\[0\] = nan"),
    (dict(spatial_scales=[-0.25, 0.125]), r"spatial_scales must be finite and positive, got spatial_scales\[0\] = -0.25"),
    (dict(spatial_scales=[0.25, math.inf]), r"spatial_scales must be finite and positive, got spatial_scales\[1\] = inf"),
    (dict(sampling_ratio=0),
     r"sampling_ratio must be at least 1 \(sampling_ratio x sampling_ratio points per bin\); adaptive sampling "
     r"\(sampling_ratio <= 0\) .* static shapes cannot do, got 0"),
    (dict(sampling_ratio=-1), r"sampling_ratio must be at least 1 .*adaptive sampling .* got -1"),
    (dict(output_size=(1024, 1024), sampling_ratio=2),
     r"output_size\[0\] \* output_size\[1\] \* sampling_ratio\^2 \(the samples per box\) must be at most 1048576, "
     r"got output_size \[1024, 1024\] and sampling_ratio 2"),
    (dict(output_size=(1, 1), sampling_ratio=(1 << 20) + 1),
     r"output_size.* must be at most 1048576, got output_size \[1, 1\] and sampling_ratio 1048577"),
    (dict(output_size=(1 << 21, 1), sampling_ratio=1),
     r"output_size.* must be at most 1048576, got output_size \[2097152, 1\] and sampling_ratio 1"),
    (dict(output_size=(1 << 40, 1 << 40), sampling_ratio=1 << 40),  # no int64 overflow on the way
     r"output_size.* must be at most 1048576, got output_size \[1099511627776, 1099511627776\] and sampling_ratio 1099511627776"),
    (dict(valid=torch.ones(2, 5, dtype=torch.uint8)), "valid must be a bool tensor, got dtype Byte"),
    (dict(valid=torch.ones(2, 5)), "valid must be a bool tensor, got dtype Float"),
    (dict(valid=torch.ones(2, 4, dtype=torch.bool)), r"valid must have shape boxes.shape\[:2\] = \[2, 5\], got shape \[2, 4\]"),
    (dict(valid=torch.ones(10, dtype=torch.bool)), r"valid must have shape boxes.shape\[:2\] = \[2, 5\], got shape \[10\]"),
    (dict(valid=torch.ones(2, 5, 1, dtype=torch.bool)), r"valid must have shape .* got shape \[2, 5, 1\]"),
    (dict(canonical_scale=0.0), "canonical_scale must be finite and positive, got 0"),
    (dict(canonical_scale=-224.0), "canonical_scale must be finite and positive, got -224"),
    (dict(canonical_scale=math.nan), "canonical_scale must be finite and positive, got nan"),
    (dict(canonical_scale=math.inf), "canonical_scale must be finite and positive, got inf"),
    (dict(eps=math.nan), "eps must be finite, got nan"),
    (dict(eps=-math.inf), "eps must be finite, got -inf"),
    (dict(canonical_level=1025), r"canonical_level must be in \[-1024, 1024\], got 1025"),
    (dict(canonical_level=-(1 << 40)), r"canonical_level must be in \[-1024, 1024\], got -1099511627776"),
]


@pytest.mark.parametrize("kwargs, message", BAD, ids=[str(i) for i in range(len(BAD))])
@pytest.mark.parametrize("device", ["cpu", "cpu-grad", "meta"])
def test_bad_arguments(kwargs, message, device):
    """The same message from the op on CPU tensors, on CPU tensors that
    require gradients (the autograd kernel checks before it records a node)
    and on the Meta backend."""
    kwargs = dict(kwargs)
    features = kwargs.pop("features", FEATURES)
    if device == "meta":
        features = [f.to("meta") for f in features]
        kwargs = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        kwargs.setdefault("boxes", BOXES.to("meta"))
    elif device == "cpu-grad":
        features = [f.clone().requires_grad_() if f.is_floating_point() else f for f in features]
    with pytest.raises(RuntimeError, match="^syncfree\\.multi_scale_roi_align: " + message):
        call(features=features, **kwargs)


@pytest.mark.parametrize("kwargs, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments_through_the_wrapper(kwargs, message):
    kwargs = dict(kwargs)
    args = [kwargs.pop(name, default) for name, default in
            [("features", FEATURES), ("boxes", BOXES), ("output_size", (7, 7)), ("spatial_scales", SCALES),
             ("sampling_ratio", 2)]]
    with pytest.raises(RuntimeError, match="^syncfree\\.multi_scale_roi_align: " + message):
        syncfree.multi_scale_roi_align(*args, **kwargs)


def test_mixed_devices():
    meta = [f.to("meta") for f in FEATURES]
    with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: features\[1\] must be on "
                                           r"features\[0\]'s device meta, got cpu"):
        call(features=[meta[0], FEATURES[1]], boxes=BOXES.to("meta"))
    with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: boxes must be on the features' "
                                           r"device meta, got cpu"):
        call(features=meta)
    with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: valid must be on the boxes' "
                                           r"device meta, got cpu"):
        call(features=meta, boxes=BOXES.to("meta"), valid=torch.ones(2, 5, dtype=torch.bool))


def test_meta_shapes_and_dtypes():
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        feats = [torch.empty(3, 5, 20, 24, device="meta", dtype=dtype), torch.empty(3, 5, 10, 12, device="meta", dtype=dtype)]
        out = call(features=feats, boxes=torch.empty(3, 11, 4, device="meta"), output_size=(6, 2))
        assert out.shape == (33, 5, 6, 2) and out.dtype == dtype and out.device.type == "meta"


def test_internal_ops_check_their_levels():
    levels = torch.zeros(10, dtype=torch.int64)
    for bad in (levels.int(), levels[:9], levels.reshape(2, 5)):
        with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: levels must be an int64 tensor "
                                               r"\[B \* K\] on the boxes' device"):
            torch.ops.syncfree._multi_scale_roi_align(FEATURES, BOXES, bad, [7, 7], SCALES, 2, False)
    assert torch.ops.syncfree._multi_scale_roi_align(FEATURES, BOXES, levels, [7, 7], SCALES, 2, False).shape == (10, 3, 7, 7)


def test_python_wrapper_names_wrong_types():
    f = syncfree.multi_scale_roi_align
    msg = r"^syncfree\.multi_scale_roi_align: "
    with pytest.raises(TypeError, match=msg + r"features must be a list of tensors \[B, C, H, W\], got Tensor"):
        f(FEATURES[0], BOXES, 7, [0.25], 2)
    with pytest.raises(TypeError, match=msg + r"features must be a list of tensors \[B, C, H, W\], got list"):
        f([FEATURES[0], "p3"], BOXES, 7, SCALES, 2)
    with pytest.raises(TypeError, match=msg + r"features must be a list of tensors \[B, C, H, W\], got dict"):
        f({"p2": FEATURES[0]}, BOXES, 7, [0.25], 2)
    with pytest.raises(TypeError, match=msg + r"boxes must be a torch.Tensor, got list"):
        f(FEATURES, BOXES.tolist(), 7, SCALES, 2)
    with pytest.raises(TypeError, match=msg + r"boxes must be a torch.Tensor, got list"):
        f(FEATURES, list(BOXES), 7, SCALES, 2)  # torchvision's list of per-image boxes
    with pytest.raises(TypeError, match=msg + r"output_size must be an int, got float"):
        f(FEATURES, BOXES, 7.0, SCALES, 2)
    with pytest.raises(TypeError, match=msg + r"output_size must be an int, got float"):
        f(FEATURES, BOXES, (7, 7.0), SCALES, 2)
    with pytest.raises(TypeError, match=msg + r"output_size must be an int, got bool"):
        f(FEATURES, BOXES, True, SCALES, 2)
    with pytest.raises(TypeError, match=msg + r"spatial_scales must be a list of floats, got float"):
        f(FEATURES[:1], BOXES, 7, 0.25, 2)
    with pytest.raises(TypeError, match=msg + r"spatial_scales must be a float, got bool"):
        f(FEATURES, BOXES, 7, [0.25, True], 2)
    with pytest.raises(TypeError, match=msg + r"spatial_scales must be a float, got str"):
        f(FEATURES, BOXES, 7, [0.25, "0.125"], 2)
    # A bool would pass the dispatcher as 1.
    with pytest.raises(TypeError, match=msg + r"sampling_ratio must be an int, got bool"):
        f(FEATURES, BOXES, 7, SCALES, True)
    with pytest.raises(TypeError, match=msg + r"sampling_ratio must be an int, got float"):
        f(FEATURES, BOXES, 7, SCALES, 2.0)
    with pytest.raises(TypeError, match=msg + r"aligned must be a bool, got int"):
        f(FEATURES, BOXES, 7, SCALES, 2, 1)
    with pytest.raises(TypeError, match=msg + r"aligned must be a bool, got NoneType"):
        f(FEATURES, BOXES, 7, SCALES, 2, None)
    with pytest.raises(TypeError, match=msg + r"valid must be a torch.Tensor or None, got list"):
        f(FEATURES, BOXES, 7, SCALES, 2, valid=[[True] * 5] * 2)
    with pytest.raises(TypeError, match=msg + r"canonical_scale must be a float, got str"):
        f(FEATURES, BOXES, 7, SCALES, 2, canonical_scale="224")
    with pytest.raises(TypeError, match=msg + r"canonical_scale must be a float, got bool"):
        f(FEATURES, BOXES, 7, SCALES, 2, canonical_scale=True)
    with pytest.raises(TypeError, match=msg + r"canonical_level must be an int, got float"):
        f(FEATURES, BOXES, 7, SCALES, 2, canonical_level=4.0)
    with pytest.raises(TypeError, match=msg + r"eps must be a float, got NoneType"):
        f(FEATURES, BOXES, 7, SCALES, 2, eps=None)
    with pytest.raises(OverflowError, match=msg + r"sampling_ratio must fit in int64"):
        f(FEATURES, BOXES, 7, SCALES, 1 << 64)


def test_wrapper_accepts_the_other_argument_forms():
    """An int, a tuple and a list output_size, a tuple of features and of
    scales, int scales and canonical_scale: the same values."""
    feats = [FEATURES[0], FEATURES[1]]
    want = OP(feats, BOXES, [5, 5], [0.25, 0.125], 2, canonical_scale=200.0)
    for output_size in (5, (5, 5), [5, 5]):
        got = syncfree.multi_scale_roi_align(tuple(feats), BOXES, output_size, (0.25, 0.125), 2, canonical_scale=200)
        assert torch.equal(got, want)
    one = OP(feats[:1], BOXES, [4, 4], [1.0], 1)
    assert torch.equal(syncfree.multi_scale_roi_align(feats[:1], BOXES, 4, [1], 1), one)
