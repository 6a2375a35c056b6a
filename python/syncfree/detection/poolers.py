"""Multi-level RoI pooling with static shapes: torchvision's
``MultiScaleRoIAlign`` (``torchvision.ops.poolers``), the level of each RoI
routed on the device."""
import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .boxes import box_area


def pooler_scales(features: List[Tensor], image_size: Tuple[int, int]) -> List[float]:
    """torchvision's ``_setup_scales`` from static shapes, without ``.item()``."""
    return [2.0 ** round(math.log2(float(f.shape[-2]) / float(image_size[0]))) for f in features]


def map_levels(pooler, scales: List[float], boxes: Tensor) -> Tensor:
    """torchvision's ``LevelMapper`` (``initLevelMapper`` from the scales), operation by
    operation, with its epsilon as a Python float instead of a new tensor per call."""
    k_min = int(-math.log2(scales[0]))
    k_max = int(-math.log2(scales[-1]))
    s = torch.sqrt(box_area(boxes))
    target = torch.floor(pooler.canonical_level + torch.log2(s / pooler.canonical_scale) + 1e-6)
    target = torch.clamp(target, min=k_min, max=k_max)
    return target.to(torch.int64) - k_min


def roi_pool(pooler, features: Dict[str, Tensor], boxes: Tensor, image_size: Tuple[int, int],
             valid: Optional[Tensor] = None) -> Tensor:
    """torchvision's ``MultiScaleRoIAlign`` on ``boxes [B, K, 4]``: ``[B * K, C, h, w]``.

    :func:`syncfree.multi_scale_roi_align` pools each box once, from the
    level torchvision's ``LevelMapper`` assigns it; slots where ``valid [B,
    K]`` is false are not pooled (zeros). A pooler with adaptive sampling
    (``sampling_ratio <= 0``, a data-dependent number of samples) takes
    :func:`roi_pool_every_level` instead, and so do CUDA features under
    ``torch.use_deterministic_algorithms(True)``: the fused op's CUDA backward
    adds with atomics, where torchvision's ``roi_align`` switches to a
    deterministic implementation."""
    from ..ops import multi_scale_roi_align

    x = [v for k, v in features.items() if k in pooler.featmap_names]  # torchvision's _filter_input
    if pooler.sampling_ratio <= 0 or (boxes.device.type == "cuda" and torch.are_deterministic_algorithms_enabled()):
        return roi_pool_every_level(pooler, x, boxes, image_size)
    return multi_scale_roi_align(x, boxes, pooler.output_size, pooler_scales(x, image_size), pooler.sampling_ratio,
                                 valid=valid, canonical_scale=float(pooler.canonical_scale),
                                 canonical_level=int(pooler.canonical_level))


def roi_pool_every_level(pooler, x: List[Tensor], boxes: Tensor, image_size: Tuple[int, int]) -> Tensor:
    """``MultiScaleRoIAlign`` with torchvision's ``roi_align``: every box pooled
    from every level, its own level selected with ``torch.where`` (L times the
    work of pooling each box once; the values are those of torchvision's
    per-level calls, as RoI Align treats each box on its own)."""
    from torchvision.ops import roi_align

    b, k = boxes.shape[0], boxes.shape[1]
    flat = boxes.reshape(b * k, 4)
    ids = torch.arange(b, device=boxes.device, dtype=boxes.dtype).repeat_interleave(k)[:, None]
    rois = torch.cat([ids, flat], dim=1)
    scales = pooler_scales(x, image_size)
    output_size = pooler.output_size
    if len(x) == 1:
        return roi_align(x[0], rois, output_size=output_size, spatial_scale=scales[0],
                         sampling_ratio=pooler.sampling_ratio)
    levels = map_levels(pooler, scales, flat)
    result: Optional[Tensor] = None
    for level, (feature, scale) in enumerate(zip(x, scales)):
        pooled = roi_align(feature, rois, output_size=output_size, spatial_scale=scale,
                           sampling_ratio=pooler.sampling_ratio)
        if result is None:
            result = pooled
        else:
            result = torch.where((levels == level).view(-1, 1, 1, 1), pooled, result)
    assert result is not None
    return result
