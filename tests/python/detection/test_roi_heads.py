"""syncfree.detection.roi_heads' parts against torchvision and torch: mask
pasting, batch norm over the valid RoIs."""
import copy

import torch
from torch import nn


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
