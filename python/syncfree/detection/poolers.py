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


def roi_pool(pooler, features: Dict[str, Tensor], boxes: Tensor, image_size: Tuple[int, int]) -> Tensor:
    """torchvision's ``MultiScaleRoIAlign`` on ``boxes [B, K, 4]``: ``[B * K, C, h, w]``.

    Every RoI is pooled from every level and the level torchvision's
    ``LevelMapper`` assigns it is selected with ``torch.where``: the values
    are those of torchvision's per-level calls (RoI Align treats each RoI on
    its own), with no data-dependent shapes."""
    from torchvision.ops import roi_align

    x = [v for k, v in features.items() if k in pooler.featmap_names]  # torchvision's _filter_input
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
