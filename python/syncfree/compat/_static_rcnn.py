"""Static-shape training and inference steps for torchvision's two-stage
detectors (Faster R-CNN, Mask R-CNN): the implementation behind
:func:`syncfree.compat.torchvision.make_static`.

Every tensor of a step has a shape fixed by the model's settings, the batch
size, the image size and ``max_boxes``: the data-dependent selections of
torchvision's code (``torch.where(mask)``, boolean indexing, per-image loops
over lists of different lengths, ``.item()``) become masks, fixed numbers of
slots with a validity flag, and syncfree's static operators (``nms``,
``balanced_sample``, ``compact``). Where the static step and torchvision's
compute the same quantity, they compute it with the same operations in the
same order, so that on the valid part the values are torchvision's.

The static model holds torchvision's own submodules (``backbone``, ``rpn``,
``roi_heads``, ``transform``) and reads every setting from them at each call
(thresholds, numbers of proposals, the samplers' batch sizes and fractions,
the box coders' weights, the poolers' sizes): one source of truth, and the
same ``state_dict`` as the torchvision model.
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops import balanced_sample, compact, nms

_PAD_TARGETS = "syncfree.compat.torchvision.pad_targets"
_MAKE_STATIC = "syncfree.compat.torchvision.make_static"
_STATIC_MODEL = "syncfree.compat.torchvision.StaticRCNN"
_TO_TORCHVISION = "syncfree.compat.torchvision.to_torchvision"


# --------------------------------------------------------------------------
# Boxes and matching, batched over images


def _box_area(boxes: Tensor) -> Tensor:
    """torchvision's ``box_area``, over any leading dimensions."""
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """IoU of ``[B, G, 4]`` and ``[B, N, 4]`` (or ``[N, 4]``) boxes: ``[B, G, N]``,
    computed operation by operation as torchvision's ``box_iou`` computes it."""
    area1 = _box_area(boxes1)
    area2 = _box_area(boxes2)
    lt = torch.max(boxes1[..., :, None, :2], boxes2[..., None, :, :2])
    rb = torch.min(boxes1[..., :, None, 2:], boxes2[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area1[..., :, None] + area2[..., None, :] - inter
    return inter / union


def _match(iou: Tensor, gt_valid: Tensor, matcher) -> Tensor:
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


def _encode(box_coder, reference_boxes: Tensor, proposals: Tensor) -> Tensor:
    """torchvision's ``BoxCoder.encode_single``, operation by operation, with the
    weights as Python floats: ``encode_single`` copies them to the device on every
    call (``torch.as_tensor``), a host-device synchronization on CUDA."""
    wx, wy, ww, wh = (float(w) for w in box_coder.weights)
    ex_widths = proposals[:, 2:3] - proposals[:, 0:1]
    ex_heights = proposals[:, 3:4] - proposals[:, 1:2]
    ex_ctr_x = proposals[:, 0:1] + 0.5 * ex_widths
    ex_ctr_y = proposals[:, 1:2] + 0.5 * ex_heights
    gt_widths = reference_boxes[:, 2:3] - reference_boxes[:, 0:1]
    gt_heights = reference_boxes[:, 3:4] - reference_boxes[:, 1:2]
    gt_ctr_x = reference_boxes[:, 0:1] + 0.5 * gt_widths
    gt_ctr_y = reference_boxes[:, 1:2] + 0.5 * gt_heights
    dx = wx * (gt_ctr_x - ex_ctr_x) / ex_widths
    dy = wy * (gt_ctr_y - ex_ctr_y) / ex_heights
    dw = ww * torch.log(gt_widths / ex_widths)
    dh = wh * torch.log(gt_heights / ex_heights)
    return torch.cat((dx, dy, dw, dh), dim=1)


def _decode(box_coder, rel_codes: Tensor, boxes: Tensor) -> Tensor:
    """torchvision's ``BoxCoder.decode_single`` (``[N, 4 * C]`` codes, ``[N, 4]``
    boxes), operation by operation, without its ``torch.tensor(0.5, device=...)``
    (a host-to-device copy per call)."""
    boxes = boxes.to(rel_codes.dtype)
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = box_coder.weights
    dx = rel_codes[:, 0::4] / wx
    dy = rel_codes[:, 1::4] / wy
    dw = torch.clamp(rel_codes[:, 2::4] / ww, max=box_coder.bbox_xform_clip)
    dh = torch.clamp(rel_codes[:, 3::4] / wh, max=box_coder.bbox_xform_clip)
    pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
    pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
    pred_w = torch.exp(dw) * widths[:, None]
    pred_h = torch.exp(dh) * heights[:, None]
    c_to_c_h = 0.5 * pred_h
    c_to_c_w = 0.5 * pred_w
    return torch.stack((pred_ctr_x - c_to_c_w, pred_ctr_y - c_to_c_h, pred_ctr_x + c_to_c_w, pred_ctr_y + c_to_c_h),
                       dim=2).flatten(1)


def _gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, k]]`` for ``x [B, N, ...]`` and ``index [B, K]`` (in range)."""
    shape = index.shape + x.shape[2:]
    flat = index.reshape(index.shape + (1,) * (x.dim() - 2)).expand(shape)
    return x.gather(1, flat)


def _label_codes(labels: Tensor) -> Tensor:
    """torchvision's sampler classes: >= 1 positive (1), 0 negative (0), the rest ignored (-1)."""
    one = torch.ones_like(labels, dtype=torch.int8)
    return torch.where(labels >= 1, one, torch.where(labels == 0, one * 0, -one))


def _sample(codes: Tensor, sampler) -> Tuple[Tensor, Tensor]:
    """torchvision's quota rule with syncfree: ``(indices, valid)`` of ``batch_size_per_image`` slots per image."""
    return balanced_sample(codes, int(sampler.batch_size_per_image), float(sampler.positive_fraction),
                           fill_positives=False)


# --------------------------------------------------------------------------
# Multi-level RoI pooling, the level of each RoI routed on the device


def _pooler_scales(features: List[Tensor], image_size: Tuple[int, int]) -> List[float]:
    """torchvision's ``_setup_scales`` from static shapes, without ``.item()``."""
    return [2.0 ** round(math.log2(float(f.shape[-2]) / float(image_size[0]))) for f in features]


def _levels(pooler, scales: List[float], boxes: Tensor) -> Tensor:
    """torchvision's ``LevelMapper`` (``initLevelMapper`` from the scales), operation by
    operation, with its epsilon as a Python float instead of a new tensor per call."""
    k_min = int(-math.log2(scales[0]))
    k_max = int(-math.log2(scales[-1]))
    s = torch.sqrt(_box_area(boxes))
    target = torch.floor(pooler.canonical_level + torch.log2(s / pooler.canonical_scale) + 1e-6)
    target = torch.clamp(target, min=k_min, max=k_max)
    return target.to(torch.int64) - k_min


def _roi_pool(pooler, features: Dict[str, Tensor], boxes: Tensor, image_size: Tuple[int, int]) -> Tensor:
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
    scales = _pooler_scales(x, image_size)
    output_size = pooler.output_size
    if len(x) == 1:
        return roi_align(x[0], rois, output_size=output_size, spatial_scale=scales[0],
                         sampling_ratio=pooler.sampling_ratio)
    levels = _levels(pooler, scales, flat)
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


# --------------------------------------------------------------------------
# Heads whose batch norm must see the valid RoIs only


def _batch_statistics(bn: nn.Module) -> bool:
    """Whether ``bn`` normalizes with the statistics of its input (training mode,
    or no running statistics), as ``nn.BatchNorm*`` decides."""
    return isinstance(bn, nn.modules.batchnorm._BatchNorm) and (bn.training or bn.running_mean is None)


def _needs_masking(module: nn.Module) -> bool:
    return any(_batch_statistics(m) for m in module.modules())


def _masked_batch_norm(bn: nn.modules.batchnorm._BatchNorm, x: Tensor, valid: Tensor) -> Tensor:
    """Batch norm with the statistics of the rows of ``x`` where ``valid`` holds:
    the output, and in training the running statistics' update, of torch's call
    on the valid rows alone. The statistics are computed in float32 (at least)
    and the output has ``x``'s dtype, as torch's batch norm does under autocast."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(dtype)
    dims = [0] + list(range(2, x.dim()))
    shape = [1, -1] + [1] * (x.dim() - 2)
    weight = valid.to(dtype).view([-1] + [1] * (x.dim() - 1))
    per_row = 1
    for s in x.shape[2:]:
        per_row *= s
    count = valid.sum() * per_row
    denom = count.clamp(min=1).to(dtype)
    mean = (xf * weight).sum(dims) / denom
    centered = xf - mean.view(shape)
    var = (centered * centered * weight).sum(dims) / denom
    if bn.training and bn.track_running_stats and bn.running_mean is not None and bn.running_var is not None:
        with torch.no_grad():
            if bn.num_batches_tracked is not None:
                bn.num_batches_tracked.add_(1)
            if bn.momentum is None:  # a cumulative average
                assert bn.num_batches_tracked is not None
                momentum = 1.0 / bn.num_batches_tracked.to(dtype)
            else:
                momentum = bn.momentum
            any_valid = count > 0
            unbiased = var * (count.to(dtype) / (count - 1).clamp(min=1).to(dtype))
            new_mean = bn.running_mean * (1 - momentum) + mean.detach() * momentum
            new_var = bn.running_var * (1 - momentum) + unbiased.detach() * momentum
            bn.running_mean.copy_(torch.where(any_valid, new_mean, bn.running_mean))
            bn.running_var.copy_(torch.where(any_valid, new_var, bn.running_var))
    out = centered / torch.sqrt(var + bn.eps).view(shape)
    if bn.affine:
        out = out * bn.weight.view(shape) + bn.bias.view(shape)
    return out.to(x.dtype)


def _masked_forward(module: nn.Module, x: Tensor, valid: Tensor, role: str) -> Tensor:
    if _batch_statistics(module):
        if isinstance(module, nn.SyncBatchNorm):
            raise NotImplementedError(
                f"{_STATIC_MODEL}: the {role} has SyncBatchNorm; its statistics would have to be reduced "
                "over the valid RoIs of every process, which is not supported (use BatchNorm2d, or a "
                "frozen one, in the heads)")
        return _masked_batch_norm(module, x, valid)
    if isinstance(module, nn.Sequential):
        for child in module:
            x = _masked_forward(child, x, valid, role)
        return x
    if _needs_masking(module):
        raise NotImplementedError(
            f"{_STATIC_MODEL}: the {role} has batch norm inside a {type(module).__name__}; batch "
            "statistics over the valid RoIs only are supported in nn.Sequential heads")
    return module(x)


def _head(module: nn.Module, x: Tensor, valid: Tensor, role: str) -> Tensor:
    """``module(x)``, where batch norm that normalizes with batch statistics sees
    only the rows where ``valid`` holds (torchvision's heads see the valid RoIs
    only)."""
    if _needs_masking(module):
        return _masked_forward(module, x, valid, role)
    return module(x)


# --------------------------------------------------------------------------
# Mask pasting with static shapes


def _paste_masks(masks: Tensor, boxes: Tensor, image_size: Tuple[int, int]) -> Tensor:
    """torchvision's ``paste_masks_in_image`` for ``masks [N, 1, M, M]`` and
    ``boxes [N, 4]``: ``[N, 1, H, W]``, with static shapes. Each mask is
    resized bilinearly (align_corners=False) to its integer box, as
    ``F.interpolate`` does, and pasted; the arithmetic follows PyTorch's CPU
    kernel (source index, weights and sums in the mask's dtype)."""
    from torchvision.models.detection.roi_heads import expand_boxes, expand_masks

    height, width = image_size
    masks, scale = expand_masks(masks, padding=1)
    boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)
    m = masks[:, 0]
    size = m.shape[-1]
    x0, y0, x1, y1 = boxes.unbind(-1)
    w = (x1 - x0 + 1).clamp(min=1)
    h = (y1 - y0 + 1).clamp(min=1)

    def axis(start, stop, out, length):
        pos = torch.arange(length, device=boxes.device)[None, :]
        inside = (pos >= start.clamp(min=0)[:, None]) & (pos < torch.clamp(stop + 1, max=length)[:, None])
        local = (pos - start[:, None]).clamp(min=0)
        local = torch.minimum(local, out[:, None] - 1)
        ratio = (torch.full_like(out, size, dtype=m.dtype) / out.to(m.dtype))[:, None]
        src = ratio * (local.to(m.dtype) + 0.5) - 0.5
        src = src.clamp(min=0)
        i0 = torch.clamp(src.floor().to(torch.int64), max=size - 1)
        lam1 = (src - i0.to(m.dtype)).clamp(0, 1)
        lam0 = 1 - lam1
        i1 = i0 + (i0 < size - 1).to(torch.int64)
        same = (out == size)[:, None]  # interpolation to the same size copies
        i0 = torch.where(same, local, i0)
        i1 = torch.where(same, local, i1)
        lam0 = torch.where(same, torch.ones_like(lam0), lam0)
        lam1 = torch.where(same, torch.zeros_like(lam1), lam1)
        return inside, i0, i1, lam0, lam1

    in_y, r0, r1, ly0, ly1 = axis(y0, y1, h, height)
    in_x, c0, c1, lx0, lx1 = axis(x0, x1, w, width)
    n = m.shape[0]

    def rows(r):  # [N, H, M]
        return m.gather(1, r[:, :, None].expand(n, height, size))

    def cols(t, c):  # [N, H, W]
        return t.gather(2, c[:, None, :].expand(n, height, width))

    top, bottom = rows(r0), rows(r1)
    lx0_, lx1_ = lx0[:, None, :], lx1[:, None, :]
    upper = cols(top, c0) * lx0_ + cols(top, c1) * lx1_
    lower = cols(bottom, c0) * lx0_ + cols(bottom, c1) * lx1_
    value = upper * ly0[:, :, None] + lower * ly1[:, :, None]
    inside = in_y[:, :, None] & in_x[:, None, :]
    return torch.where(inside, value, torch.zeros_like(value))[:, None]


# --------------------------------------------------------------------------
# Targets


def pad_targets(targets: Sequence[Dict[str, Tensor]], max_boxes: int) -> Dict[str, Tensor]:
    """torchvision-style targets (a list of per-image dicts with ``boxes [G_i,
    4]``, ``labels [G_i]`` and, for Mask R-CNN, ``masks [G_i, H, W]``) as one
    dict of padded tensors: ``boxes [B, max_boxes, 4]`` (padding: zeros),
    ``labels [B, max_boxes]`` (int64; padding: -1) and ``masks [B, max_boxes,
    H, W]`` (padding: zeros) when every image has masks.

    This runs in the data pipeline (it reads each image's number of boxes on
    the host); the static model's step takes its output. Errors: an image
    with more than ``max_boxes`` boxes, negative labels (they would read as
    padding), missing keys or mismatched shapes."""
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, int):
        raise TypeError(f"{_PAD_TARGETS}: max_boxes must be an int, got {type(max_boxes).__name__}")
    if max_boxes < 1:
        raise ValueError(f"{_PAD_TARGETS}: max_boxes must be >= 1, got {max_boxes}")
    if isinstance(targets, dict) or len(targets) == 0:
        raise ValueError(f"{_PAD_TARGETS}: targets must be a non-empty list of per-image dicts "
                         f"(torchvision's format), got {type(targets).__name__} of length {len(targets)}")
    first = targets[0]
    if not isinstance(first, dict) or "boxes" not in first or "labels" not in first:
        raise ValueError(f"{_PAD_TARGETS}: each target must be a dict with 'boxes' and 'labels'")
    has_masks = all("masks" in t for t in targets)
    boxes0 = first["boxes"]
    device, dtype = boxes0.device, boxes0.dtype if boxes0.is_floating_point() else torch.float32
    b = len(targets)
    boxes = torch.zeros((b, max_boxes, 4), dtype=dtype, device=device)
    labels = torch.full((b, max_boxes), -1, dtype=torch.int64, device=device)
    masks = None
    if has_masks:
        m0 = first["masks"]
        if m0.dim() != 3:
            raise ValueError(f"{_PAD_TARGETS}: targets[0]['masks'] must be [G, H, W], got shape {list(m0.shape)}")
        masks = torch.zeros((b, max_boxes) + tuple(m0.shape[1:]), dtype=m0.dtype, device=device)
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or "boxes" not in t or "labels" not in t:
            raise ValueError(f"{_PAD_TARGETS}: targets[{i}] must be a dict with 'boxes' and 'labels'")
        tb, tl = t["boxes"], t["labels"]
        if tb.dim() != 2 or tb.shape[-1] != 4:
            raise ValueError(f"{_PAD_TARGETS}: targets[{i}]['boxes'] must be [G, 4], got shape {list(tb.shape)}")
        g = tb.shape[0]
        if tl.shape != (g,):
            raise ValueError(f"{_PAD_TARGETS}: targets[{i}]['labels'] must be [{g}] (one per box), "
                             f"got shape {list(tl.shape)}")
        if g > max_boxes:
            raise ValueError(f"{_PAD_TARGETS}: targets[{i}] has {g} boxes, more than max_boxes={max_boxes}")
        if g and bool((tl < 0).any()):
            raise ValueError(f"{_PAD_TARGETS}: targets[{i}]['labels'] has negative labels; "
                             "negative labels mark padding")
        boxes[i, :g] = tb.to(device=device, dtype=dtype)
        labels[i, :g] = tl.to(device=device, dtype=torch.int64)
        if masks is not None:
            tm = t["masks"]
            if tm.shape[0] != g or tuple(tm.shape[1:]) != tuple(masks.shape[2:]):
                raise ValueError(f"{_PAD_TARGETS}: targets[{i}]['masks'] must be [{g}, "
                                 f"{masks.shape[2]}, {masks.shape[3]}], got shape {list(tm.shape)}")
            masks[i, :g] = tm.to(device=device, dtype=masks.dtype)
    out = {"boxes": boxes, "labels": labels}
    if masks is not None:
        out["masks"] = masks
    return out


def to_torchvision(output: Dict[str, Tensor]) -> List[Dict[str, Tensor]]:
    """The static model's detections (``boxes [B, D, 4]``, ``scores``,
    ``labels``, ``valid [B, D]``, and ``masks [B, D, 1, H, W]`` for Mask
    R-CNN) as torchvision's list of per-image dicts, the valid slots only (in
    order). Reads the valid flags on the host: call it outside the step."""
    if not isinstance(output, dict) or "valid" not in output:
        raise ValueError(f"{_TO_TORCHVISION}: output must be the static model's detection dict "
                         "(boxes, scores, labels, valid)")
    valid = output["valid"]
    result = []
    for i in range(valid.shape[0]):
        keep = valid[i]
        result.append({k: v[i][keep] for k, v in output.items() if k != "valid"})
    return result


# --------------------------------------------------------------------------
# The model


class StaticRCNN(nn.Module):
    """A torchvision Faster R-CNN or Mask R-CNN with a static-shape step (see
    :func:`syncfree.compat.torchvision.make_static`)."""

    def __init__(self, model: nn.Module, image_size: Tuple[int, int], max_boxes: int) -> None:
        super().__init__()
        self.transform = model.transform
        self.backbone = model.backbone
        self.rpn = model.rpn
        self.roi_heads = model.roi_heads
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.max_boxes = int(max_boxes)
        self.train(model.training)

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, max_boxes={self.max_boxes}"

    @property
    def has_mask(self) -> bool:
        return bool(self.roi_heads.has_mask())

    # ---- inputs

    def _check_inputs(self, images: Tensor, targets: Optional[Dict[str, Tensor]]) -> None:
        h, w = self.image_size
        if not isinstance(images, Tensor):
            raise TypeError(f"{_STATIC_MODEL}: images must be a [B, 3, {h}, {w}] tensor (resize and stack "
                            f"them in the data pipeline), got {type(images).__name__}")
        if images.dim() != 4 or images.shape[1] != 3 or tuple(images.shape[2:]) != (h, w):
            raise ValueError(f"{_STATIC_MODEL}: images must be [B, 3, {h}, {w}] (the image_size given to "
                             f"make_static), got shape {list(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"{_STATIC_MODEL}: images must be floating point, got {images.dtype}")
        if self.training:
            if targets is None:
                raise ValueError(f"{_STATIC_MODEL}: training needs targets: pad_targets(list_of_dicts, "
                                 f"max_boxes={self.max_boxes})")
            if not isinstance(targets, dict):
                raise TypeError(f"{_STATIC_MODEL}: targets must be a dict of padded tensors (from "
                                f"pad_targets), got {type(targets).__name__}")
            b, g = images.shape[0], self.max_boxes
            expected = {"boxes": (b, g, 4), "labels": (b, g)}
            if self.has_mask:
                expected["masks"] = (b, g, h, w)
            for key, shape in expected.items():
                if key not in targets:
                    raise ValueError(f"{_STATIC_MODEL}: targets has no '{key}' (expected {list(shape)})")
                if tuple(targets[key].shape) != shape:
                    raise ValueError(f"{_STATIC_MODEL}: targets['{key}'] must be {list(shape)}, got "
                                     f"{list(targets[key].shape)}")
            if not targets["boxes"].is_floating_point():
                raise TypeError(f"{_STATIC_MODEL}: targets['boxes'] must be floating point, got "
                                f"{targets['boxes'].dtype}")

    def _normalize(self, images: Tensor) -> Tensor:
        """torchvision's ``transform.normalize``, channel by channel with the mean and
        standard deviation as Python floats (``normalize`` copies them to the device on
        every call)."""
        mean = [float(v) for v in self.transform.image_mean]
        std = [float(v) for v in self.transform.image_std]
        return torch.stack([(images[:, c] - mean[c]) / std[c] for c in range(images.shape[1])], dim=1)

    # ---- the step

    def forward(self, images: Tensor, targets: Optional[Dict[str, Tensor]] = None) -> Dict[str, Tensor]:
        """Training: ``model(images, padded_targets)`` returns torchvision's loss
        dict. Eval: ``model(images)`` returns ``boxes [B, D, 4]``, ``scores [B,
        D]``, ``labels [B, D]``, ``valid [B, D]`` (and ``masks [B, D, 1, H,
        W]``), D = ``roi_heads.detections_per_img``."""
        self._check_inputs(images, targets)
        x = self._normalize(images)
        features = self.backbone(x)
        if isinstance(features, Tensor):
            features = {"0": features}
        proposals, proposal_valid, rpn_losses = self._rpn(x, features, targets)
        if self.training:
            assert targets is not None
            losses = self._roi_losses(features, proposals, proposal_valid, targets)
            losses.update(rpn_losses)
            return losses
        return self._detect(features, proposals, proposal_valid)

    # ---- RPN

    def _anchors(self, images: Tensor, feature_list: List[Tensor]) -> Tensor:
        from torchvision.models.detection.image_list import ImageList

        image_list = ImageList(images[:1], [self.image_size])
        return self.rpn.anchor_generator(image_list, feature_list)[0]

    def _rpn(self, images: Tensor, features: Dict[str, Tensor], targets: Optional[Dict[str, Tensor]]):
        from torchvision.models.detection.rpn import concat_box_prediction_layers
        from torchvision.ops import boxes as box_ops

        rpn = self.rpn
        b = images.shape[0]
        feature_list = list(features.values())
        objectness, deltas = rpn.head(feature_list)
        anchors = self._anchors(images, feature_list)  # [A, 4], the same for every image
        num_per_level = [o.shape[1] * o.shape[2] * o.shape[3] for o in objectness]
        objectness, deltas = concat_box_prediction_layers(objectness, deltas)
        a = anchors.shape[0]
        proposals = _decode(rpn.box_coder, deltas.detach(), anchors.repeat(b, 1)).view(b, a, 4)

        # filter_proposals: per-level top-n, clipping, small boxes and low
        # scores as masks, NMS per level, post_nms_top_n slots.
        obj = objectness.detach().reshape(b, a)
        levels = torch.cat([torch.full((n,), i, dtype=torch.int64, device=obj.device)
                            for i, n in enumerate(num_per_level)])
        top = rpn._get_top_n_idx(obj, num_per_level)
        scores = torch.sigmoid(obj.gather(1, top))
        levels = levels[top]
        boxes = box_ops.clip_boxes_to_image(_gather_rows(proposals, top), self.image_size)
        keep = ((boxes[..., 2] - boxes[..., 0] >= rpn.min_size) & (boxes[..., 3] - boxes[..., 1] >= rpn.min_size)
                & (scores >= rpn.score_thresh))
        slots = min(int(rpn.post_nms_top_n()), top.shape[1])
        kept, kept_valid = nms(boxes, scores, float(rpn.nms_thresh), slots, idxs=levels, valid=keep)
        proposals_out = _gather_rows(boxes, kept.clamp(min=0))
        proposals_out = torch.where(kept_valid[..., None], proposals_out, torch.zeros_like(proposals_out))

        losses: Dict[str, Tensor] = {}
        if self.training:
            assert targets is not None
            gt_boxes = targets["boxes"]
            # torchvision matches and encodes in the ground truth's dtype (float32 under autocast)
            anchors = anchors.to(gt_boxes.dtype)
            gt_valid = targets["labels"] >= 0
            matches = _match(_box_iou(gt_boxes, anchors), gt_valid, rpn.proposal_matcher)
            labels = torch.where(matches >= 0, 1, torch.where(matches == -1, 0, -1)).to(torch.int8)
            matched = _gather_rows(gt_boxes, matches.clamp(min=0))
            anchors_b = anchors.expand(b, a, 4)
            matched = torch.where((matches >= 0)[..., None], matched, anchors_b)
            regression_targets = _encode(rpn.box_coder, matched.reshape(-1, 4), anchors_b.reshape(-1, 4)).view(b, a, 4)
            index, valid = _sample(labels, rpn.fg_bg_sampler)
            index = index.clamp(min=0)
            count = valid.sum().clamp(min=1)
            sampled_labels = labels.gather(1, index)
            sampled_objectness = objectness.view(b, a).gather(1, index)
            bce = F.binary_cross_entropy_with_logits(sampled_objectness, sampled_labels.to(objectness.dtype),
                                                     reduction="none")
            loss_objectness = torch.where(valid, bce, torch.zeros_like(bce)).sum() / count
            positive = valid & (sampled_labels == 1)
            box = F.smooth_l1_loss(_gather_rows(deltas.view(b, a, 4), index),
                                   _gather_rows(regression_targets, index), beta=1 / 9, reduction="none")
            loss_box = torch.where(positive[..., None], box, torch.zeros_like(box)).sum() / count
            losses = {"loss_objectness": loss_objectness, "loss_rpn_box_reg": loss_box}
        return proposals_out, kept_valid, losses

    # ---- RoI heads, training

    def _roi_losses(self, features: Dict[str, Tensor], proposals: Tensor, proposal_valid: Tensor,
                    targets: Dict[str, Tensor]) -> Dict[str, Tensor]:
        heads = self.roi_heads
        b = proposals.shape[0]
        gt_boxes = targets["boxes"].to(proposals.dtype)
        gt_labels = targets["labels"].to(torch.int64)
        gt_valid = gt_labels >= 0
        # add_gt_proposals, assign_targets_to_proposals
        candidates = torch.cat([proposals, gt_boxes], dim=1)
        candidate_valid = torch.cat([proposal_valid, gt_valid], dim=1)
        matches = _match(_box_iou(gt_boxes, candidates), gt_valid, heads.proposal_matcher)
        labels = gt_labels.gather(1, matches.clamp(min=0))
        labels = torch.where(matches == -1, torch.zeros_like(labels), labels)
        labels = torch.where((matches == -2) | ~candidate_valid, torch.full_like(labels, -1), labels)
        # subsample: a fixed number of slots per image
        index, valid = _sample(_label_codes(labels), heads.fg_bg_sampler)
        index = index.clamp(min=0)
        rois = _gather_rows(candidates, index)
        dummy = (torch.arange(4, device=rois.device) >= 2).to(rois.dtype)  # (0, 0, 1, 1), made on the device
        rois = torch.where(valid[..., None], rois, dummy)
        roi_labels = labels.gather(1, index)
        roi_matches = matches.gather(1, index)
        positive = valid & (roi_labels > 0)
        matched_gt = _gather_rows(gt_boxes, roi_matches.clamp(min=0))
        matched_gt = torch.where(positive[..., None], matched_gt, rois)
        slots = rois.shape[1]
        regression_targets = _encode(heads.box_coder, matched_gt.reshape(-1, 4), rois.reshape(-1, 4))

        flat_valid = valid.reshape(-1)
        pooled = _roi_pool(heads.box_roi_pool, features, rois, self.image_size)
        box_features = _head(heads.box_head, pooled, flat_valid, "box head")
        class_logits, box_regression = heads.box_predictor(box_features)

        # fastrcnn_loss, as masked reductions
        flat_labels = roi_labels.reshape(-1)
        count = flat_valid.sum().clamp(min=1)
        ce = F.cross_entropy(class_logits, flat_labels.clamp(min=0), reduction="none")
        loss_classifier = torch.where(flat_valid, ce, torch.zeros_like(ce)).sum() / count
        n = box_regression.shape[0]
        per_class = box_regression.reshape(n, box_regression.shape[-1] // 4, 4)
        picked = per_class.gather(1, flat_labels.clamp(min=0).view(n, 1, 1).expand(n, 1, 4))[:, 0]
        box = F.smooth_l1_loss(picked, regression_targets, beta=1 / 9, reduction="none")
        flat_positive = positive.reshape(-1)
        loss_box_reg = torch.where(flat_positive[:, None], box, torch.zeros_like(box)).sum() / count
        losses = {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}

        if self.has_mask:
            losses["loss_mask"] = self._mask_loss(features, rois, positive, roi_matches, gt_labels,
                                                  targets["masks"], slots)
        return losses

    def _mask_loss(self, features: Dict[str, Tensor], rois: Tensor, positive: Tensor, roi_matches: Tensor,
                   gt_labels: Tensor, gt_masks: Tensor, slots: int) -> Tensor:
        """torchvision's ``maskrcnn_loss`` on the positive RoIs, compacted into
        ``int(batch_size_per_image * positive_fraction)`` slots per image
        (the most positives the sampler takes)."""
        from torchvision.ops import roi_align

        heads = self.roi_heads
        sampler = heads.fg_bg_sampler
        capacity = max(1, min(slots, int(sampler.batch_size_per_image * sampler.positive_fraction)))
        which, mask_valid, _ = compact(positive, capacity)
        which = which.clamp(min=0)
        b = rois.shape[0]
        boxes = _gather_rows(rois, which)
        matched = roi_matches.gather(1, which).clamp(min=0)
        pooled = _roi_pool(heads.mask_roi_pool, features, boxes, self.image_size)
        flat_valid = mask_valid.reshape(-1)
        logits = heads.mask_predictor(_head(heads.mask_head, pooled, flat_valid, "mask head"))
        size = logits.shape[-1]
        n = logits.shape[0]
        labels = gt_labels.gather(1, matched).reshape(-1)
        picked = logits.gather(1, labels.clamp(min=0).view(n, 1, 1, 1).expand(n, 1, size, size))[:, 0]
        # project_masks_on_boxes: RoI Align of the matched ground-truth mask
        g = gt_masks.shape[1]
        mask_ids = (torch.arange(b, device=matched.device)[:, None] * g + matched).reshape(-1, 1)
        mask_rois = torch.cat([mask_ids.to(boxes.dtype), boxes.reshape(-1, 4)], dim=1)
        flat_masks = gt_masks.reshape((b * g, 1) + tuple(gt_masks.shape[2:])).to(boxes.dtype)
        mask_targets = roi_align(flat_masks, mask_rois, (size, size), 1.0)[:, 0]
        bce = F.binary_cross_entropy_with_logits(picked, mask_targets, reduction="none").sum(dim=(1, 2))
        count = flat_valid.sum()
        total = torch.where(flat_valid, bce, torch.zeros_like(bce)).sum()
        return torch.where(count > 0, total / (count.clamp(min=1) * size * size), logits.sum() * 0)

    # ---- RoI heads, eval

    def _detect(self, features: Dict[str, Tensor], proposals: Tensor, proposal_valid: Tensor) -> Dict[str, Tensor]:
        from torchvision.ops import boxes as box_ops

        heads = self.roi_heads
        b, m = proposals.shape[0], proposals.shape[1]
        pooled = _roi_pool(heads.box_roi_pool, features, proposals, self.image_size)
        class_logits, box_regression = heads.box_predictor(
            _head(heads.box_head, pooled, proposal_valid.reshape(-1), "box head"))
        num_classes = class_logits.shape[-1]
        pred_boxes = _decode(heads.box_coder, box_regression, proposals.reshape(-1, 4))
        pred_boxes = pred_boxes.reshape(b * m, -1, 4)
        pred_scores = F.softmax(class_logits, -1)
        boxes = box_ops.clip_boxes_to_image(pred_boxes, self.image_size)
        # Class 0 is the background; candidates in torchvision's order
        # (proposal-major, class-minor).
        boxes = boxes[:, 1:].reshape(b, m * (num_classes - 1), 4)
        scores = pred_scores[:, 1:].reshape(b, m * (num_classes - 1))
        labels = torch.arange(1, num_classes, device=boxes.device).repeat(m).expand(b, -1)
        ok = ((scores > heads.score_thresh) & (boxes[..., 2] - boxes[..., 0] >= 1e-2)
              & (boxes[..., 3] - boxes[..., 1] >= 1e-2)
              & proposal_valid.repeat_interleave(num_classes - 1, dim=1))
        slots = int(heads.detections_per_img)
        kept, valid = nms(boxes, scores, float(heads.nms_thresh), slots, idxs=labels, valid=ok)
        index = kept.clamp(min=0)
        out_boxes = _gather_rows(boxes, index)
        out_boxes = torch.where(valid[..., None], out_boxes, torch.zeros_like(out_boxes))
        out_scores = torch.where(valid, scores.gather(1, index), torch.zeros_like(valid, dtype=scores.dtype))
        out_labels = torch.where(valid, labels.gather(1, index), torch.zeros_like(index))
        result = {"boxes": out_boxes, "scores": out_scores, "labels": out_labels, "valid": valid}
        if self.has_mask:
            pooled = _roi_pool(heads.mask_roi_pool, features, out_boxes, self.image_size)
            logits = heads.mask_predictor(_head(heads.mask_head, pooled, valid.reshape(-1), "mask head"))
            n, size = logits.shape[0], logits.shape[-1]
            flat_labels = out_labels.reshape(-1)
            prob = logits.sigmoid().gather(1, flat_labels.view(n, 1, 1, 1).expand(n, 1, size, size))
            masks = _paste_masks(prob, out_boxes.reshape(-1, 4), self.image_size)
            masks = masks.reshape((b, slots) + tuple(masks.shape[1:]))
            result["masks"] = torch.where(valid.view(b, slots, 1, 1, 1), masks, torch.zeros_like(masks))
        return result


def make_static(model: nn.Module, image_size: Tuple[int, int], max_boxes: int) -> StaticRCNN:
    """See :func:`syncfree.compat.torchvision.make_static`."""
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
    from torchvision.models.detection.roi_heads import RoIHeads
    from torchvision.models.detection.rpn import RegionProposalNetwork

    if not isinstance(model, GeneralizedRCNN) or not isinstance(getattr(model, "rpn", None),
                                                                RegionProposalNetwork) \
            or not isinstance(getattr(model, "roi_heads", None), RoIHeads):
        raise TypeError(f"{_MAKE_STATIC}: model must be a torchvision FasterRCNN or MaskRCNN, got "
                        f"{type(model).__name__}")
    if model.roi_heads.has_keypoint():
        raise NotImplementedError(f"{_MAKE_STATIC}: keypoint heads (KeypointRCNN) are not supported")
    if (not isinstance(image_size, (tuple, list)) or len(image_size) != 2
            or any(isinstance(s, bool) or not isinstance(s, int) for s in image_size)):
        raise TypeError(f"{_MAKE_STATIC}: image_size must be a pair of ints (H, W), got {image_size!r}")
    divisible = int(getattr(model.transform, "size_divisible", 32))
    if any(s <= 0 or s % divisible for s in image_size):
        raise ValueError(f"{_MAKE_STATIC}: image_size must be positive multiples of {divisible} (the "
                         f"model's size_divisible: torchvision would pad to it), got {tuple(image_size)}")
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, int):
        raise TypeError(f"{_MAKE_STATIC}: max_boxes must be an int, got {type(max_boxes).__name__}")
    if max_boxes < 1:
        raise ValueError(f"{_MAKE_STATIC}: max_boxes must be >= 1, got {max_boxes}")
    return StaticRCNN(model, tuple(image_size), max_boxes)
