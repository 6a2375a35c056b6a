"""syncfree.detection.boxes against torchvision: IoU, the box coder's encode
and decode, clipping to each image's size."""
import pytest
import torch


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
