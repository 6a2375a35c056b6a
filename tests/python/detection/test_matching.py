"""syncfree.detection.matching against torchvision's Matcher, with padded
ground truth (the sampler's quotas inside the model: test_make_static.py)."""
import pytest
import torch


@pytest.mark.parametrize("allow_low_quality", [False, True])
def test_matcher_equals_torchvision_with_padded_ground_truth(tv, allow_low_quality):
    from torchvision.models.detection._utils import Matcher

    from syncfree.detection.matching import match

    matcher = Matcher(0.7, 0.3, allow_low_quality_matches=allow_low_quality)
    gen = torch.Generator().manual_seed(1)
    g, n = 5, 300
    for trial in range(20):
        # Quantized IoUs make ties (between ground truths, and for a ground truth's best).
        iou = (torch.rand(4, g, n, generator=gen) * 10).floor() / 10
        real = torch.tensor([g, 3, 1, 0]) if trial % 2 else torch.tensor([2, 0, g, 4])
        gt_valid = torch.arange(g)[None, :] < real[:, None]
        iou = torch.where(gt_valid[..., None], iou, torch.rand(4, g, n, generator=gen))  # padding holds garbage
        got = match(iou, gt_valid, matcher)
        for i in range(4):
            if real[i] == 0:  # torchvision: an image without ground truth is all background
                assert torch.equal(got[i], torch.full((n,), -1))
            else:
                assert torch.equal(got[i], matcher(iou[i, :real[i]])), (trial, i)
