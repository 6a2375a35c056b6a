"""syncfree.detection.roi_heads' parts against torchvision and torch: mask
pasting, batch norm over the valid RoIs, the detections' per-class nms."""
import copy

import pytest
import torch
from torch import nn

import syncfree


def test_paste_masks_equals_torchvision(tv):
    from torchvision.models.detection.roi_heads import paste_masks_in_image

    from syncfree.detection.roi_heads import paste_masks

    gen = torch.Generator().manual_seed(2)
    n = 40
    masks = torch.rand(n, 1, 28, 28, generator=gen)
    size = (96, 128)
    xy = torch.rand(n, 2, generator=gen) * 110
    wh = torch.rand(n, 2, generator=gen) ** 3 * 90  # tiny to large
    boxes = torch.cat([xy, xy + wh], 1)
    # Clipped to the image, as detections are (their expansion still crosses it).
    boxes[:, 0::2] = boxes[:, 0::2].clamp(0, size[1])
    boxes[:, 1::2] = boxes[:, 1::2].clamp(0, size[0])
    boxes[0] = torch.tensor([10.0, 10.0, 37.0, 37.0])  # resized to exactly 30x30: a copy
    boxes[1] = torch.tensor([5.0, 5.0, 5.0, 5.0])  # empty
    ref = paste_masks_in_image(masks, boxes, size)
    got = paste_masks(masks, boxes, size)
    assert got.shape == ref.shape == (n, 1, 96, 128)
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=0)
    assert torch.equal(got == 0, ref == 0)  # the same pixels pasted


def test_masked_batch_norm_equals_batch_norm_on_the_valid_rows():
    from syncfree.detection.roi_heads import masked_batch_norm

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(12, 4, 5, 5, generator=gen) * 3 + 1
    valid = torch.tensor([True, False, True, True, False, True, True, True, False, True, True, True])
    for momentum in (0.1, None):
        ref_bn = nn.BatchNorm2d(4, momentum=momentum).train()
        with torch.no_grad():
            ref_bn.weight.uniform_(0.5, 2)
            ref_bn.bias.uniform_(-1, 1)
        bn = copy.deepcopy(ref_bn)
        for _ in range(2):
            ref = ref_bn(x[valid])
            got = masked_batch_norm(bn, x, valid)
            torch.testing.assert_close(got[valid], ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(bn.running_mean, ref_bn.running_mean)
        torch.testing.assert_close(bn.running_var, ref_bn.running_var)
        assert int(bn.num_batches_tracked) == int(ref_bn.num_batches_tracked) == 2
    # float16 (autocast): statistics in float32, as torch's batch norm computes them, even where
    # the number of values exceeds float16's range (65504).
    x16 = torch.randn(1536, 4, 7, 7, generator=gen).half()
    many = torch.ones(1536, dtype=torch.bool)
    ref = nn.BatchNorm2d(4).train()(x16.float())
    got = masked_batch_norm(nn.BatchNorm2d(4).train(), x16, many)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.float(), ref, atol=2e-3, rtol=2e-3)
    # No valid row: the running statistics stay as they were.
    before = copy.deepcopy(bn.state_dict())
    masked_batch_norm(bn, x, torch.zeros_like(valid))
    torch.testing.assert_close(bn.running_mean, before["running_mean"])
    torch.testing.assert_close(bn.running_var, before["running_var"])


def _keypoint_case(seed, n, dtype):
    gen = torch.Generator().manual_seed(seed)
    maps = torch.randn(n, 17, 56, 56, generator=gen).to(dtype)
    size = (96, 128)
    xy = torch.rand(n, 2, generator=gen) * 110
    wh = torch.rand(n, 2, generator=gen) ** 2 * 120  # from under a pixel to the whole image
    boxes = torch.cat([xy, xy + wh], 1)
    boxes[:, 0::2] = boxes[:, 0::2].clamp(0, size[1])  # clipped to the image, as detections are
    boxes[:, 1::2] = boxes[:, 1::2].clamp(0, size[0])
    boxes[0] = torch.tensor([0.0, 0.0, 128.0, 96.0])  # the whole image
    boxes[1] = torch.tensor([10.0, 10.0, 66.0, 66.0])  # resized to 56 x 56: a copy
    boxes[2] = torch.tensor([5.0, 5.0, 5.0, 5.0])  # empty (at least 1 x 1)
    return maps, boxes.to(dtype), size


def test_heatmaps_to_keypoints_equals_torchvision(tv):
    """The same heatmap cell for every keypoint (its position exactly), the
    score up to the rounding of PyTorch's float32 bicubic kernel, whose
    operations a composition of tensor operations cannot repeat bit for bit;
    in float64 the scores are equal too. Several chunks."""
    from torchvision.models.detection.roi_heads import heatmaps_to_keypoints as reference

    from syncfree.detection.roi_heads import heatmaps_to_keypoints

    for dtype in (torch.float32, torch.float64):
        maps, boxes, size = _keypoint_case(4, 200, dtype)
        ref_kp, ref_scores = reference(maps, boxes)
        got_kp, got_scores = heatmaps_to_keypoints(maps, boxes, size, chunk_elements=1 << 22)
        assert got_kp.dtype == ref_kp.dtype == torch.float32 and got_kp.shape == (200, 17, 3)
        assert torch.equal(got_kp, ref_kp), dtype
        if dtype == torch.float64:
            assert torch.equal(got_scores, ref_scores)
        else:
            torch.testing.assert_close(got_scores, ref_scores, atol=1e-5, rtol=1e-5)


def test_keypoints_to_heatmap_equals_torchvision(tv):
    from torchvision.models.detection.roi_heads import keypoints_to_heatmap as reference

    from syncfree.detection.roi_heads import keypoints_to_heatmap

    gen = torch.Generator().manual_seed(5)
    n = 50
    xy = torch.rand(n, 2, generator=gen) * 100
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=gen) * 60 + 1], 1)
    # keypoints inside, outside, on the right and bottom edges; some invisible
    u = torch.rand(n, 17, 2, generator=gen) * 1.4 - 0.2
    u[:, 0, 0] = 1.0
    u[:, 1, 1] = 1.0
    u[:, 2] = 0.0
    kp = torch.cat([boxes[:, None, :2] + u * (boxes[:, None, 2:] - boxes[:, None, :2]),
                    (torch.rand(n, 17, 1, generator=gen) > 0.3).float()], -1)
    ref = reference(kp, boxes, 56)
    got = keypoints_to_heatmap(kp, boxes, 56)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    assert 0 < int(ref[1].sum()) < ref[1].numel()  # both kinds present


def test_heatmaps_to_keypoints_in_reduced_precision(tv):
    """bfloat16 and float16 heatmaps (Keypoint R-CNN's predictor under
    autocast): positions, weights and sums in float32 as PyTorch's kernel,
    its output rounded to the maps' dtype, so the keypoints are
    torchvision's but where two cells are within one unit in the last place
    of the maps' dtype (a few percent in bfloat16)."""
    from torchvision.models.detection.roi_heads import heatmaps_to_keypoints as reference

    from syncfree.detection.roi_heads import heatmaps_to_keypoints

    for dtype, share in ((torch.bfloat16, 0.05), (torch.float16, 0.01)):
        maps, boxes, size = _keypoint_case(6, 100, torch.float32)
        maps = maps.to(dtype)
        ref_kp, ref_scores = reference(maps, boxes)
        got_kp, got_scores = heatmaps_to_keypoints(maps, boxes, size)
        differ = (got_kp != ref_kp).any(-1)
        assert 0 < differ.sum() and differ.float().mean() <= share, (dtype, differ.float().mean())
        # Where the cells differ, both are a maximum within one unit in the
        # last place of the maps' dtype (float32 sums in another order,
        # rounded to it). Elsewhere the scores are close.
        ulp = ref_scores.abs() * torch.finfo(dtype).eps  # at least one unit in the last place
        assert ((got_scores - ref_scores).abs()[differ] <= ulp[differ]).all(), dtype
        torch.testing.assert_close(got_scores, ref_scores, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_per_class_nms_equals_one_row_with_class_ids(dtype):
    """The detections' nms as one row per class, merged by rank, keeps the
    indices the one-row call with the class as id keeps, in the same order:
    clustered boxes, scores with ties (within and across classes), masked
    candidates, fewer and more survivors than slots."""
    from syncfree.detection.roi_heads import per_class_nms

    gen = torch.Generator().manual_seed(11)
    for b, proposals, classes, slots in [(2, 50, 5, 20), (3, 200, 7, 100), (1, 30, 90, 10), (2, 40, 3, 500)]:
        centers = torch.rand(b, 8, 2, generator=gen, dtype=dtype) * 100
        pick = torch.randint(0, 8, (b, proposals * classes), generator=gen)
        xy = centers.gather(1, pick.unsqueeze(-1).expand(-1, -1, 2)) + torch.rand(
            b, proposals * classes, 2, generator=gen, dtype=dtype) * 6
        boxes = torch.cat([xy, xy + 10 + torch.rand(b, proposals * classes, 2, generator=gen, dtype=dtype) * 20], -1)
        scores = torch.randint(0, 12, (b, proposals * classes), generator=gen).to(dtype) / 12  # many ties
        valid = torch.rand(b, proposals * classes, generator=gen) < 0.8
        labels = torch.arange(classes).repeat(proposals).expand(b, -1)
        want = syncfree.nms(boxes, scores, 0.5, slots, idxs=labels, valid=valid)
        got = per_class_nms(boxes, scores, valid, classes, 0.5, slots)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])
        assert 0 < int(want[1].sum()) and (slots > 100 or bool(want[1].all()))
    # Empty shapes, as the one-row call gives them: no image, no proposal, no class.
    for b, proposals, classes in [(0, 5, 3), (2, 0, 3), (2, 5, 0)]:
        n = proposals * classes
        boxes, scores = torch.zeros(b, n, 4, dtype=dtype), torch.zeros(b, n, dtype=dtype)
        valid = torch.ones(b, n, dtype=torch.bool)
        want = syncfree.nms(boxes, scores, 0.5, 7, valid=valid)
        got = per_class_nms(boxes, scores, valid, classes, 0.5, 7)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (b, proposals, classes)
