"""syncfree.multi_scale_roi_align equals torchvision's MultiScaleRoIAlign, bit for bit.

Forward values and the gradients of every feature map (torch.equal, never a
tolerance) against torchvision.ops.MultiScaleRoIAlign itself, run on each
image's unpadded boxes: 1, 2 and 4 levels, square, (14, 14) and non-square
output sizes, sampling ratios 1 to 3, float32 and float64, non-default
canonical_scale / canonical_level, boxes of every size (every level used: the
test asserts it), partly or wholly outside the image, tiny, of zero size, on
the level boundaries, and images with different box counts padded to one K
with ``valid=False`` slots (which must pool exact zeros and receive no
gradient). ``aligned=True``, a non-default ``eps`` and non-power-of-two
scales, which MultiScaleRoIAlign cannot take, are compared with the same
computation written with torchvision's own LevelMapper and roi_align
(checked against the module where both apply). float16 / bfloat16 features
equal torchvision's result under CPU autocast (its roi_align autocast kernel
casts the input and the boxes to float32 and the result back).
"""
import math
from collections import OrderedDict

import pytest
import torch

import syncfree

# The image the boxes live in, (height, width): not square, so that a swapped
# axis shows. Level l of a pyramid with first stride 2^s has stride 2^(s+l).
IMAGE = (256, 192)
FIRST = 2  # stride 4: torchvision's FPN levels start at 1/4
C = 3


def gen(seed):
    return torch.Generator().manual_seed(seed)


def pyramid(batch, num_levels, dtype, g, first=FIRST, image=IMAGE):
    """Feature maps [B, C, H / 2^k, W / 2^k] for k = first .. first + L - 1, and
    their scales (what MultiScaleRoIAlign infers from these shapes)."""
    H, W = image
    scales = [2.0 ** -(first + l) for l in range(num_levels)]
    features = [torch.randn(batch, C, math.ceil(H * s), math.ceil(W * s), generator=g, dtype=torch.float64).to(dtype)
                for s in scales]
    return features, scales


def level_sizes(scales, canonical_scale=224, canonical_level=4):
    """sqrt(area) of boxes that LevelMapper sends to each level (the middle of
    the level's range), and the sizes exactly on the boundaries between levels."""
    k_min = int(-math.log2(scales[0]))
    k_max = int(-math.log2(scales[-1]))
    middle = [canonical_scale * 2.0 ** (k - canonical_level + 0.5) for k in range(k_min, k_max + 1)]
    edges = [canonical_scale * 2.0 ** (k - canonical_level) for k in range(k_min, k_max + 2)]
    return middle, edges


def special_boxes(scales, canonical_scale=224, canonical_level=4, image=IMAGE):
    """Boxes every level gets, boxes on the level boundaries (eps decides), tiny
    and zero-size boxes, boxes partly and wholly outside the image, boxes on
    integer coordinates (samples on pixel edges) and the whole image."""
    H, W = image
    middle, edges = level_sizes(scales, canonical_scale, canonical_level)
    out = []
    for i, s in enumerate(middle):  # square, then a 2:1 box of the same area, around various centers
        cx, cy = (0.3 + 0.1 * i) * W, (0.6 - 0.1 * i) * H
        out.append([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2])
        out.append([cx - s / math.sqrt(2), cy - s / (2 * math.sqrt(2)), cx + s / math.sqrt(2), cy + s / (2 * math.sqrt(2))])
    for s in edges:
        out.append([10.0, 20.0, 10.0 + s, 20.0 + s])
        out.append([10.0, 20.0, 10.0 + s * (1 - 1e-7), 20.0 + s * (1 - 1e-7)])
    out += [
        [50.25, 60.5, 50.26, 60.51],     # tiny
        [33.0, 44.0, 33.0, 44.0],        # a point: zero width and height
        [12.5, 7.0, 12.5, 90.0],         # zero width
        [3.0, 71.75, 120.0, 71.75],      # zero height
        [-40.0, -30.0, 60.0, 50.0],      # partly outside, top left
        [W - 30.0, H - 20.0, W + 90.0, H + 70.0],  # partly outside, bottom right
        [W + 10.0, 5.0, W + 60.0, 70.0],           # wholly outside, right
        [-90.0, -80.0, -2.0, -1.5],                # wholly outside, top left
        [0.0, 0.0, float(W), float(H)],            # the whole image
        [8.0, 16.0, 40.0, 72.0],                   # integer coordinates
        [-1.0 / scales[0], 0.0, 3.0, 4.0],         # starts exactly at -1 on the finest level
    ]
    return torch.tensor(out, dtype=torch.float64)


def random_boxes(n, scales, g, canonical_scale=224, canonical_level=4, image=IMAGE):
    """n boxes of log-uniform sizes across every level's range (and beyond),
    aspect ratios up to ~4:1, centers up to 10% outside the image."""
    H, W = image
    middle, _ = level_sizes(scales, canonical_scale, canonical_level)
    lo, hi = math.log(0.3), math.log(2 * middle[-1])
    size = torch.exp(lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64))
    aspect = torch.exp(1.4 * (torch.rand(n, generator=g, dtype=torch.float64) - 0.5))
    w, h = size * aspect.sqrt(), size / aspect.sqrt()
    cx = (torch.rand(n, generator=g, dtype=torch.float64) * 1.2 - 0.1) * W
    cy = (torch.rand(n, generator=g, dtype=torch.float64) * 1.2 - 0.1) * H
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)


def box_lists(counts, scales, g, dtype, **canonical):
    """One tensor of boxes per image (counts[b] of them), the special boxes
    spread over the images that have boxes, shuffled."""
    special = special_boxes(scales, **canonical)
    total = sum(counts)
    extra = max(total - special.shape[0], 0)
    boxes = torch.cat([special, random_boxes(extra, scales, g, **canonical)])[:total]
    boxes = boxes[torch.randperm(boxes.shape[0], generator=g)]
    return [b.to(dtype) for b in torch.split(boxes, list(counts))]


def pad(box_list, K, g):
    """[B, K, 4] boxes and [B, K] valid: each image's boxes first, then
    padding slots holding random (finite, poolable) boxes."""
    B = len(box_list)
    dtype = box_list[0].dtype
    boxes = (torch.rand(B, K, 4, generator=g, dtype=torch.float64) * 60).to(dtype)
    boxes[..., 2:] += boxes[..., :2] + 5
    valid = torch.zeros(B, K, dtype=torch.bool)
    for b, bl in enumerate(box_list):
        boxes[b, :bl.shape[0]] = bl
        valid[b, :bl.shape[0]] = True
    return boxes, valid


def valid_rows(valid):
    return valid.reshape(-1).nonzero().flatten()


def leaf(features):
    return [f.detach().clone().requires_grad_() for f in features]


def tv_module(tv, features, box_list, output_size, sampling_ratio, upstream, image=IMAGE, **canonical):
    """torchvision.ops.MultiScaleRoIAlign on the unpadded boxes: (output,
    gradients of the feature maps for ``upstream``, each box's level)."""
    names = [f"p{l}" for l in range(len(features))]
    pooler = tv.ops.MultiScaleRoIAlign(names, output_size, sampling_ratio, **canonical)
    feats = leaf(features)
    out = pooler(OrderedDict(zip(names, feats)), box_list, [image] * len(box_list))
    levels = pooler.map_levels(box_list)
    grads = torch.autograd.grad(out, feats, upstream, allow_unused=True, materialize_grads=True)
    return out, grads, levels, pooler.scales


def tv_levels_and_roi_align(tv, features, box_list, output_size, scales, sampling_ratio, aligned=False,
                            canonical_scale=224, canonical_level=4, eps=1e-6):
    """MultiScaleRoIAlign's computation (torchvision.ops.poolers._multiscale_roi_align)
    with torchvision's LevelMapper and roi_align, for the arguments the module
    cannot take (aligned, eps, any scales); returns the output (differentiable)."""
    from torchvision.ops.poolers import LevelMapper, _convert_to_roi_format

    rois = _convert_to_roi_format(box_list)
    if len(features) == 1:
        return tv.ops.roi_align(features[0], rois, output_size, scales[0], sampling_ratio, aligned)
    # torchvision's _setup_scales: int(-log2) of the scales as float32 tensors.
    k_min = int(-torch.log2(torch.tensor(scales[0], dtype=torch.float32)).item())
    k_max = int(-torch.log2(torch.tensor(scales[-1], dtype=torch.float32)).item())
    levels = LevelMapper(k_min, k_max, canonical_scale, canonical_level, eps)(box_list)
    result = torch.zeros((rois.shape[0], features[0].shape[1]) + tuple(output_size), dtype=features[0].dtype)
    for level, (f, s) in enumerate(zip(features, scales)):
        idx = torch.where(levels == level)[0]
        result[idx] = tv.ops.roi_align(f, rois[idx], output_size, s, sampling_ratio, aligned).to(result.dtype)
    return result


def pair(output_size):
    return (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)


def sf_run(features, boxes, output_size, scales, sampling_ratio, upstream, **kw):
    feats = leaf(features)
    out = syncfree.multi_scale_roi_align(feats, boxes, output_size, scales, sampling_ratio, **kw)
    grads = torch.autograd.grad(out, feats, upstream)
    return out, grads


def assert_padded_equal(got, valid, want):
    """Rows of valid slots equal torchvision's rows; the other rows are exact zeros."""
    rows = valid_rows(valid)
    assert got.dtype == want.dtype and got.shape[1:] == want.shape[1:], (got.dtype, want.dtype, got.shape, want.shape)
    assert torch.equal(got[rows], want), (got[rows] - want).abs().max()
    mask = torch.ones(got.shape[0], dtype=torch.bool)
    mask[rows] = False
    assert bool((got[mask] == 0).all())


def assert_grads_equal(got, want):
    assert len(got) == len(want)
    for level, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (level, g.dtype, w.dtype, g.shape, w.shape)
        assert torch.equal(g, w), (level, (g - w).abs().max())


def compare_with_module(tv, features, scales, box_list, K, output_size, sampling_ratio, seed, **canonical):
    """The padded call against the module on the unpadded lists, forward and
    backward; returns torchvision's levels of the boxes."""
    g = gen(seed)
    boxes, valid = pad(box_list, K, g)
    h, w = pair(output_size)
    dtype = features[0].dtype
    upstream = torch.randn(boxes.shape[0] * K, C, h, w, generator=g, dtype=torch.float64).to(dtype)
    rows = valid_rows(valid)
    want, want_grads, levels, tv_scales = tv_module(tv, features, box_list, output_size, sampling_ratio,
                                                    upstream[rows], **canonical)
    assert tv_scales == scales
    got, grads = sf_run(features, boxes, output_size, scales, sampling_ratio, upstream, valid=valid, **canonical)
    assert got.shape == (boxes.shape[0] * K, C, h, w)
    assert_padded_equal(got, valid, want)
    assert_grads_equal(grads, want_grads)
    assert bool((want != 0).any())  # not vacuous: something was pooled
    return levels


# --- against MultiScaleRoIAlign ---------------------------------------------------

OUTPUT_SIZES = [7, (14, 14), (3, 5)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("sampling_ratio", [1, 2, 3])
@pytest.mark.parametrize("output_size", OUTPUT_SIZES, ids=["7", "14x14", "3x5"])
@pytest.mark.parametrize("num_levels", [1, 2, 4])
def test_equals_torchvision(tv, num_levels, output_size, sampling_ratio, dtype):
    g = gen(100 * num_levels + 10 * sampling_ratio + len(str(output_size)))
    features, scales = pyramid(3, num_levels, dtype, g)
    counts = [19, 11, 6]  # different box counts per image, padded to K = 21
    box_list = box_lists(counts, scales, g, dtype)
    levels = compare_with_module(tv, features, scales, box_list, 21, output_size, sampling_ratio, seed=num_levels)
    assert set(levels.tolist()) == set(range(num_levels))  # every level pooled some box


@pytest.mark.parametrize("canonical_scale, canonical_level", [(56, 3), (112, 5), (400, 2), (224, 4)])
def test_canonical_scale_and_level_equal_torchvision(tv, canonical_scale, canonical_level):
    g = gen(canonical_scale + canonical_level)
    features, scales = pyramid(3, 4, torch.float32, g)
    canonical = dict(canonical_scale=canonical_scale, canonical_level=canonical_level)
    box_list = box_lists([20, 14, 9], scales, g, torch.float32, **canonical)
    levels = compare_with_module(tv, features, scales, box_list, 22, (4, 6), 2, seed=5, **canonical)
    assert set(levels.tolist()) == set(range(4))


@pytest.mark.parametrize("first", [0, 3])
def test_other_first_strides_equal_torchvision(tv, first):
    """Pyramids starting at stride 1 (k_min = 0) and 8 (k_min = 3)."""
    g = gen(first)
    image = (64, 48) if first == 0 else IMAGE
    features, scales = pyramid(2, 3, torch.float64, g, first=first, image=image)
    box_list = box_lists([12, 9], scales, g, torch.float64, image=image)
    names = ["a", "b", "c"]
    pooler = tv.ops.MultiScaleRoIAlign(names, 5, 2)
    want = pooler(OrderedDict(zip(names, features)), box_list, [image] * 2)
    assert pooler.scales == scales
    boxes, valid = pad(box_list, 12, g)
    got = syncfree.multi_scale_roi_align(features, boxes, 5, scales, 2, valid=valid)
    assert_padded_equal(got, valid, want)
    assert set(pooler.map_levels(box_list).tolist()) == {0, 1, 2}


def test_images_without_boxes_and_no_boxes_at_all(tv):
    g = gen(3)
    features, scales = pyramid(3, 3, torch.float32, g)
    box_list = box_lists([0, 13, 0], scales, g, torch.float32)
    compare_with_module(tv, features, scales, box_list, 13, 7, 2, seed=4)
    # K = 0: an empty output, zero gradients.
    boxes = torch.zeros(3, 0, 4)
    out, grads = sf_run(features, boxes, 7, scales, 2, torch.zeros(0, C, 7, 7))
    assert out.shape == (0, C, 7, 7) and out.dtype == torch.float32
    for f, gr in zip(features, grads):
        assert gr.shape == f.shape and not bool(gr.any())


def test_no_valid_slot_pools_zeros_and_no_gradient():
    g = gen(8)
    features, scales = pyramid(2, 3, torch.float32, g)
    boxes, _ = pad(box_lists([6, 6], scales, g, torch.float32), 6, g)
    upstream = torch.randn(12, C, 7, 7, generator=g)
    out, grads = sf_run(features, boxes, 7, scales, 2, upstream, valid=torch.zeros(2, 6, dtype=torch.bool))
    assert not bool(out.any()) and not any(bool(gr.any()) for gr in grads)
    # valid=None and an all-True valid pool every slot the same way (and non-zero).
    out_none, grads_none = sf_run(features, boxes, 7, scales, 2, upstream)
    out_all, grads_all = sf_run(features, boxes, 7, scales, 2, upstream, valid=torch.ones(2, 6, dtype=torch.bool))
    assert bool(out_none.any()) and torch.equal(out_none, out_all)
    assert_grads_equal(grads_none, grads_all)


def test_padding_slots_change_nothing():
    """The valid rows and the gradients do not depend on what the padding slots hold."""
    g = gen(9)
    features, scales = pyramid(3, 4, torch.float32, g)
    box_list = box_lists([9, 4, 7], scales, g, torch.float32)
    boxes_a, valid = pad(box_list, 10, g)
    boxes_b, _ = pad(box_list, 10, g)
    assert not torch.equal(boxes_a, boxes_b)
    upstream = torch.randn(30, C, 7, 7, generator=g)
    out_a, grads_a = sf_run(features, boxes_a, 7, scales, 2, upstream, valid=valid)
    out_b, grads_b = sf_run(features, boxes_b, 7, scales, 2, upstream, valid=valid)
    assert torch.equal(out_a, out_b)
    assert_grads_equal(grads_a, grads_b)


def test_non_contiguous_inputs_equal_torchvision(tv):
    """channels_last and sliced feature maps, boxes as a strided view: torchvision's values."""
    g = gen(10)
    features, scales = pyramid(2, 3, torch.float32, g)
    box_list = box_lists([11, 8], scales, g, torch.float32)
    boxes, valid = pad(box_list, 11, g)
    upstream = torch.randn(22, C, 7, 7, generator=g)
    want, want_grads, _, _ = tv_module(tv, features, box_list, 7, 2, upstream[valid_rows(valid)])
    wide = [torch.cat([f, torch.randn(f.shape, generator=g)], dim=1) for f in features]
    odd = [features[0].contiguous(memory_format=torch.channels_last),
           wide[1][:, :C],  # a channel slice of a wider map
           features[2].transpose(2, 3).contiguous().transpose(2, 3)]
    assert not any(f.is_contiguous() for f in odd)
    strided = torch.empty(2, 4, 11).transpose(1, 2)
    strided.copy_(boxes)
    assert not strided.is_contiguous()
    out, grads = sf_run(odd, strided, 7, scales, 2, upstream.transpose(2, 3).contiguous().transpose(2, 3),
                        valid=valid)
    assert_padded_equal(out, valid, want)
    assert_grads_equal([gr.contiguous() for gr in grads], want_grads)


# --- arguments MultiScaleRoIAlign does not take ------------------------------------


@pytest.mark.parametrize("num_levels", [1, 3])
def test_reference_computation_equals_the_module(tv, num_levels):
    """The check of the checker: the computation written with torchvision's
    LevelMapper and roi_align is the module's, bit for bit."""
    g = gen(11)
    features, scales = pyramid(2, num_levels, torch.float32, g)
    box_list = box_lists([15, 10], scales, g, torch.float32)
    upstream = torch.randn(25, C, 5, 4, generator=g)
    want, want_grads, _, _ = tv_module(tv, features, box_list, (5, 4), 2, upstream)
    feats = leaf(features)
    ref = tv_levels_and_roi_align(tv, feats, box_list, (5, 4), scales, 2)
    assert torch.equal(ref, want)
    assert_grads_equal(torch.autograd.grad(ref, feats, upstream, allow_unused=True, materialize_grads=True),
                       want_grads)


def compare_with_reference(tv, features, scales, box_list, K, output_size, sampling_ratio, seed, **kw):
    g = gen(seed)
    boxes, valid = pad(box_list, K, g)
    h, w = pair(output_size)
    dtype = features[0].dtype
    upstream = torch.randn(len(box_list) * K, C, h, w, generator=g, dtype=torch.float64).to(dtype)
    feats = leaf(features)
    want = tv_levels_and_roi_align(tv, feats, box_list, pair(output_size), scales, sampling_ratio, **kw)
    want_grads = torch.autograd.grad(want, feats, upstream[valid_rows(valid)], allow_unused=True,
                                     materialize_grads=True)
    got, grads = sf_run(features, boxes, output_size, scales, sampling_ratio, upstream, valid=valid, **kw)
    assert_padded_equal(got, valid, want)
    assert_grads_equal(grads, want_grads)
    assert bool((want != 0).any())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("num_levels", [1, 2, 4])
@pytest.mark.parametrize("sampling_ratio", [1, 3])
def test_aligned_equals_torchvision(tv, num_levels, sampling_ratio, dtype):
    g = gen(20 + num_levels + sampling_ratio)
    features, scales = pyramid(3, num_levels, dtype, g)
    box_list = box_lists([17, 12, 5], scales, g, dtype)
    compare_with_reference(tv, features, scales, box_list, 18, (6, 4), sampling_ratio, seed=num_levels,
                           aligned=True)


@pytest.mark.parametrize("eps", [0.0, 0.3, -0.2, 1e-3])
def test_eps_equals_torchvision(tv, eps):
    g = gen(30)
    features, scales = pyramid(2, 4, torch.float32, g)
    box_list = box_lists([24, 20], scales, g, torch.float32)
    compare_with_reference(tv, features, scales, box_list, 24, 5, 2, seed=31, eps=eps,
                           canonical_scale=224, canonical_level=4)


def test_non_power_of_two_scales_equal_torchvision(tv):
    """Scales 1/3, 1/6, 1/12 (k_min = int(log2 3) = 1): the level rule is
    still LevelMapper's with torchvision's int(-log2(scale))."""
    g = gen(32)
    image = (96, 72)
    scales = [1 / 3, 1 / 6, 1 / 12]
    features = [torch.randn(2, C, round(image[0] * s), round(image[1] * s), generator=g) for s in scales]
    box_list = box_lists([14, 10], scales, g, torch.float32, canonical_scale=40, canonical_level=3, image=image)
    compare_with_reference(tv, features, scales, box_list, 14, 4, 2, seed=33, canonical_scale=40, canonical_level=3)


# --- float16 and bfloat16: torchvision under autocast --------------------------------


@pytest.mark.parametrize("boxes_dtype", ["float32", "narrow"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("num_levels", [1, 3])
def test_narrow_dtypes_equal_torchvision_under_autocast(tv, num_levels, dtype, boxes_dtype):
    """Features in float16 / bfloat16, boxes in float32 (a detection model's
    proposals under autocast) or in the features' dtype: the values and the
    gradients of torchvision's MultiScaleRoIAlign under torch.autocast("cpu"),
    whose roi_align kernel computes in float32 and rounds the result (and each
    feature map's gradient) once. The call under autocast and outside it agree."""
    g = gen(40 + num_levels)
    features, scales = pyramid(3, num_levels, torch.float32, g)
    features = [f.to(dtype) for f in features]
    box_list = box_lists([13, 9, 4], scales, g, torch.float32)
    if boxes_dtype == "narrow":
        box_list = [b.to(dtype) for b in box_list]
    boxes, valid = pad(box_list, 13, g)
    upstream = torch.randn(39, C, 7, 7, generator=g).to(dtype)
    rows = valid_rows(valid)
    with torch.autocast("cpu", dtype=dtype):
        names = [f"p{l}" for l in range(num_levels)]
        pooler = tv.ops.MultiScaleRoIAlign(names, 7, 2)
        feats = leaf(features)
        want = pooler(OrderedDict(zip(names, feats)), box_list, [IMAGE] * 3)
        got_feats = leaf(features)
        got = syncfree.multi_scale_roi_align(got_feats, boxes, 7, scales, 2, valid=valid)
    assert want.dtype == dtype  # torchvision's autocast kernel rounds back to the input's dtype
    assert_padded_equal(got, valid, want)
    assert bool((want != 0).any())
    want_grads = torch.autograd.grad(want, feats, upstream[rows], allow_unused=True, materialize_grads=True)
    grads = torch.autograd.grad(got, got_feats, upstream)
    assert_grads_equal(grads, want_grads)
    # Outside autocast: the same values (no autocast kernel of syncfree's changes them).
    out, grads_out = sf_run(features, boxes, 7, scales, 2, upstream, valid=valid)
    assert torch.equal(out, got)
    assert_grads_equal(grads_out, grads)


def test_float32_features_under_bfloat16_autocast_stay_float32(tv):
    """torchvision's autocast kernel keeps float32 features in float32; so does syncfree."""
    g = gen(50)
    features, scales = pyramid(2, 2, torch.float32, g)
    box_list = box_lists([8, 8], scales, g, torch.float32)
    boxes = torch.stack(box_list)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pooler = tv.ops.MultiScaleRoIAlign(["a", "b"], 7, 2)
        want = pooler(OrderedDict(zip(["a", "b"], features)), box_list, [IMAGE] * 2)
        got = syncfree.multi_scale_roi_align(features, boxes, 7, scales, 2)
    assert want.dtype == got.dtype == torch.float32
    assert torch.equal(got, want)


def test_level_boundaries_in_float64_equal_torchvision(tv):
    """Levels come from the boxes as given (float64 here), as LevelMapper's
    box_area does: a box whose float32 rounding crosses a level boundary
    goes where torchvision sends the float64 box."""
    g = gen(51)
    features, scales = pyramid(1, 3, torch.float64, g)
    # sqrt(area) just below 112 (level boundary of the default mapper, before eps).
    s = 112 * (1 - 1e-6) - 1e-9
    box_list = [torch.tensor([[10.0, 10.0, 10.0 + s, 10.0 + s], [5.0, 5.0, 5.0 + 112.0, 5.0 + 112.0],
                              [1.0, 2.0, 1.0 + 224 * (1 - 2e-6), 2.0 + 224.0]], dtype=torch.float64)]
    compare_with_module(tv, features, scales, box_list, 4, 3, 2, seed=52)


def test_scales_that_skip_a_level_equal_torchvision(tv):
    """Maps of strides 4 and 16 (scales 1/4, 1/16): the mapper spans levels
    2..4, three levels for two maps. torchvision pools level index 1 from the
    second map and nothing for index 2 (zeros); so does the op (it used to
    read past its list of maps)."""
    g = gen(41)
    features = [torch.randn(2, C, 64, 48, generator=g), torch.randn(2, C, 16, 12, generator=g)]  # IMAGE 256x192
    scales = [0.25, 0.0625]
    boxes = torch.tensor([[4.0, 4.0, 20.0, 20.0], [0.0, 0.0, 100.0, 100.0], [0.0, 0.0, 127.0, 127.0],
                          [10.0, 10.0, 60.0, 70.0]])
    box_list = [boxes, boxes.flip(0)]
    levels = compare_with_module(tv, features, scales, box_list, 5, 7, 2, seed=42, canonical_scale=56,
                                 canonical_level=3)
    assert set(levels.tolist()) == {0, 1, 2}  # every case reached, index 2 among them
