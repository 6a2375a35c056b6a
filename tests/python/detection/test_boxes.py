"""syncfree.detection.boxes against torchvision: IoU, the box coder's encode
and decode, clipping to each image's size."""
import pytest
import torch

import syncfree.detection.boxes as boxes_mod


def test_box_iou_equals_torchvision(tv):
    from torchvision.ops import box_iou

    from syncfree.detection.boxes import box_iou as sf_box_iou

    gen = torch.Generator().manual_seed(0)
    a = torch.rand(3, 7, 4, generator=gen) * 50
    a[..., 2:] += a[..., :2]
    b = torch.rand(3, 40, 4, generator=gen) * 50
    b[..., 2:] += b[..., :2]
    got = sf_box_iou(a, b)
    for i in range(3):
        assert torch.equal(got[i], box_iou(a[i], b[i]))
    assert torch.equal(sf_box_iou(a, b[0]), torch.stack([box_iou(a[i], b[0]) for i in range(3)]))


def test_box_coding_equals_torchvision(tv):
    from torchvision.models.detection._utils import BoxCoder

    from syncfree.detection.boxes import decode, encode

    gen = torch.Generator().manual_seed(4)
    proposals = torch.rand(500, 4, generator=gen) * 60
    proposals[:, 2:] += proposals[:, :2] + 1
    reference = torch.rand(500, 4, generator=gen) * 60
    reference[:, 2:] += reference[:, :2] + 1
    for weights in [(1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0), (0.3, 1 / 3, 2.7, 1e-3)]:
        coder = BoxCoder(weights)
        codes = coder.encode_single(reference, proposals)
        assert torch.equal(encode(coder, reference, proposals), codes)
        codes = torch.cat([codes, torch.randn(500, 8, generator=gen) * 3], dim=1)  # 3 classes, large deltas
        assert torch.equal(decode(coder, codes, proposals), coder.decode_single(codes, proposals))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_clip_boxes_equals_torchvision_per_image(tv, dtype):
    """Each image's boxes clipped to its own size as clip_boxes_to_image clips
    them, bound rounding in low precision, NaN and infinities included."""
    from torchvision.ops.boxes import clip_boxes_to_image

    from syncfree.detection.boxes import clip_boxes

    gen = torch.Generator().manual_seed(5)
    boxes = (torch.rand(3, 7, 2, 4, generator=gen) * 1500 - 100).to(dtype)  # beyond 1067 and 1333
    boxes[0, 0, 0] = torch.tensor([float("nan"), float("inf"), -float("inf"), 50.0])
    sizes = torch.tensor([[128, 200], [1067, 128], [160, 1333]])
    got = clip_boxes(boxes, (0, 0), sizes)
    for i in range(3):
        ref = clip_boxes_to_image(boxes[i], tuple(sizes[i].tolist()))
        torch.testing.assert_close(got[i], ref, rtol=0, atol=0, equal_nan=True)
    assert not torch.equal(got[1], clip_boxes(boxes, (160, 1333), None)[1])  # the sizes are used


@pytest.mark.parametrize("name", ["generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_box_iou_losses_equal_torchvision(tv, name, dtype):
    """The IoU losses without boolean indexing: torchvision's values, element
    by element, and its gradients up to the order of their sums (boxes that
    overlap, touch, nest or lie apart)."""
    import torchvision.ops

    gen = torch.Generator().manual_seed(3)
    xy = torch.rand(2, 300, 2, generator=gen) * 50
    a = torch.cat([xy, xy + 1 + torch.rand(2, 300, 2, generator=gen) * 30], -1)
    xy = torch.rand(2, 300, 2, generator=gen) * 50
    b = torch.cat([xy, xy + 1 + torch.rand(2, 300, 2, generator=gen) * 30], -1)
    b[:, :10] = a[:, :10]                                   # the same box
    b[:, 10:20, :2] = a[:, 10:20, 2:]                       # touching corners
    b[:, 20:30] = a[:, 20:30] + torch.tensor([1.0, 1.0, -1.0, -1.0])  # nested (or inverted)
    a, b = a.to(dtype), b.to(dtype)
    inside = getattr(boxes_mod, name)
    theirs = getattr(torchvision.ops, name)
    overlaps = 0
    for i in range(a.shape[0]):
        ra, rb = a[i].clone().requires_grad_(), b[i].clone().requires_grad_()
        ga, gb = a[i].clone().requires_grad_(), b[i].clone().requires_grad_()
        want = theirs(ra, rb, reduction="none")
        got = inside(ga, gb)
        assert got.dtype == want.dtype
        assert torch.equal(got, want)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(ga.grad, ra.grad)
        torch.testing.assert_close(gb.grad, rb.grad)
        overlaps += int((want < 1 - 1e-3).sum())
    assert overlaps > 50  # the intersection term is exercised
