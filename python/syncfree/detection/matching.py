"""Matching and sampling with padded ground truth: torchvision's ``Matcher``
and ``BalancedPositiveNegativeSampler`` (``torchvision.models.detection._utils``)
on ``[B, ...]`` tensors, ground truth padded to a fixed number of boxes
(negative labels mark the padding)."""
from typing import Tuple

import torch
from torch import Tensor

from ..ops import balanced_sample


def match(iou: Tensor, gt_valid: Tensor, matcher) -> Tensor:
    """torchvision's ``Matcher`` on ``iou [B, G, N]`` with padded ground truth:
    ``[B, N]`` ground-truth indices, -1 below the low threshold, -2 between the
    thresholds, the low-quality-match rule kept exactly. Padded rows
    (``gt_valid`` false) never match; an image without ground truth gets -1
    everywhere (torchvision's "all background")."""
    iou = torch.where(gt_valid[..., :, None], iou, torch.full_like(iou, -1.0))
    matched_vals, matches = iou.max(dim=-2)
    below = matched_vals < matcher.low_threshold
    between = (matched_vals >= matcher.low_threshold) & (matched_vals < matcher.high_threshold)
    out = torch.where(below, torch.full_like(matches, -1), matches)
    out = torch.where(between, torch.full_like(matches, -2), out)
    if matcher.allow_low_quality_matches:
        # Each ground truth's best predictions keep their match, whatever their IoU.
        highest = iou.max(dim=-1).values
        best = (iou == highest[..., None]) & gt_valid[..., :, None]
        out = torch.where(best.any(dim=-2), matches, out)
    return out


def label_codes(labels: Tensor) -> Tensor:
    """torchvision's sampler classes: >= 1 positive (1), 0 negative (0), the rest ignored (-1)."""
    one = torch.ones_like(labels, dtype=torch.int8)
    return torch.where(labels >= 1, one, torch.where(labels == 0, one * 0, -one))


def sample(codes: Tensor, sampler) -> Tuple[Tensor, Tensor]:
    """torchvision's quota rule with syncfree: ``(indices, valid)`` of ``batch_size_per_image`` slots per image."""
    return balanced_sample(codes, int(sampler.batch_size_per_image), float(sampler.positive_fraction),
                           fill_positives=False)
