"""The RoI heads' step with static shapes: torchvision's ``RoIHeads``
(``torchvision.models.detection.roi_heads``) over ``[B, ...]`` tensors:
``select_training_samples`` (a fixed number of sampled slots per image),
``fastrcnn_loss``, ``maskrcnn_loss`` and ``keypointrcnn_loss`` as masked
reductions, ``postprocess_detections`` (``syncfree.nms`` per class into
``detections_per_img`` slots), ``paste_masks_in_image`` and
``heatmaps_to_keypoints``; batch norm in a head sees only the valid RoIs, as
torchvision's heads see only the RoIs that exist."""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import matching
from ._names import STATIC_MODEL as _STATIC_MODEL
from .boxes import box_iou, clip_boxes, decode, encode, gather_rows, nms_rows
from .poolers import roi_pool
from .transform import zero_outside

# --------------------------------------------------------------------------
# Heads whose batch norm must see the valid RoIs only


def _batch_statistics(bn: nn.Module) -> bool:
    """Whether ``bn`` normalizes with the statistics of its input (training mode,
    or no running statistics), as ``nn.BatchNorm*`` decides."""
    return isinstance(bn, nn.modules.batchnorm._BatchNorm) and (bn.training or bn.running_mean is None)


def _needs_masking(module: nn.Module) -> bool:
    return any(_batch_statistics(m) for m in module.modules())


def masked_batch_norm(bn: nn.modules.batchnorm._BatchNorm, x: Tensor, valid: Tensor) -> Tensor:
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
        return masked_batch_norm(module, x, valid)
    if isinstance(module, nn.Sequential):
        for child in module:
            x = _masked_forward(child, x, valid, role)
        return x
    if _needs_masking(module):
        raise NotImplementedError(
            f"{_STATIC_MODEL}: the {role} has batch norm inside a {type(module).__name__}; batch "
            "statistics over the valid RoIs only are supported in nn.Sequential heads")
    return module(x)


def head(module: nn.Module, x: Tensor, valid: Tensor, role: str) -> Tensor:
    """``module(x)``, where batch norm that normalizes with batch statistics sees
    only the rows where ``valid`` holds (torchvision's heads see the valid RoIs
    only)."""
    if _needs_masking(module):
        return _masked_forward(module, x, valid, role)
    return module(x)


def paste_masks(masks: Tensor, boxes: Tensor, image_size: Tuple[int, int]) -> Tensor:
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


def _cubic_weights(t: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four weights of PyTorch's bicubic upsampling (``A = -0.75``) at
    fraction ``t``, as its ``get_cubic_upsample_coefficients`` computes them."""
    a = -0.75

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1.0), near(t), near(1.0 - t), far((1.0 - t) + 1.0)


def _bicubic_taps(out_size: Tensor, length: int, in_size: int) -> Tuple[Tensor, Tensor]:
    """Per row of ``out_size [N]`` (float, whole numbers): for each output
    position ``o < length``, the 4 input indices ``[N, length, 4]`` and weights
    of ``F.interpolate(mode="bicubic", align_corners=False)`` from ``in_size``
    to ``out_size`` (positions at or beyond ``out_size`` are computed too and
    ignored by the caller)."""
    # (float)input_size / output_size, as PyTorch's kernel computes it (a
    # Python number divided by a tensor would multiply by the reciprocal)
    scale = (torch.full_like(out_size, in_size) / out_size)[:, None]
    o = torch.arange(length, device=out_size.device, dtype=out_size.dtype)[None, :]
    real = scale * (o + 0.5) - 0.5
    index = torch.clamp(real.floor(), max=in_size - 1)
    t = (real - index).clamp(0, 1)
    index = index.to(torch.int64)
    taps = torch.stack([(index + j - 1).clamp(0, in_size - 1) for j in range(4)], dim=-1)
    return taps, torch.stack(_cubic_weights(t), dim=-1)


def heatmaps_to_keypoints(maps: Tensor, rois: Tensor, image_size: Tuple[int, int],
                          chunk_elements: int = 1 << 25) -> Tuple[Tensor, Tensor]:
    """torchvision's ``heatmaps_to_keypoints`` (``maps [N, K, S, S]``, ``rois
    [N, 4]``) with static shapes: ``(keypoints [N, K, 3], scores [N, K])``.

    torchvision resizes each RoI's maps bicubically to its box's size
    (``ceil`` of its width and height, at least 1) and takes each map's
    argmax. Here every RoI's maps are resized on a grid of the image's size
    ``(H, W)`` (a box clipped to the image is no larger), with the same
    weights and taps as ``F.interpolate``, and the argmax is taken over the
    box's part of the grid: the same cell, in the same (row-major, first
    maximum) order. The boxes must lie in the image (detections are
    clipped to it). The cost is ``N * K * H * W`` values, computed
    ``chunk_elements`` at a time, instead of the sum of the boxes' areas.

    Positions, weights and sums are in float32 at least, as PyTorch's
    kernel computes them for bfloat16 and float16 maps, and the resized maps
    are rounded to the maps' dtype before the argmax, as the kernel's output
    is."""
    height, width = image_size
    n, k = maps.shape[0], maps.shape[1]
    if n == 0:
        return maps.new_zeros((0, k, 3), dtype=torch.float32), maps.new_zeros((0, k), dtype=torch.float32)
    acc = torch.promote_types(maps.dtype, torch.float32)
    offset_x, offset_y = rois[:, 0], rois[:, 1]
    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    widths_ceil = widths.ceil().clamp(max=width)
    heights_ceil = heights.ceil().clamp(max=height)
    width_correction = widths / widths_ceil
    height_correction = heights / heights_ceil
    x_taps, x_weights = _bicubic_taps(widths_ceil.to(acc), width, maps.shape[-1])
    y_taps, y_weights = _bicubic_taps(heights_ceil.to(acc), height, maps.shape[-2])
    cols = torch.arange(width, device=maps.device)
    rows = torch.arange(height, device=maps.device)
    step = max(1, chunk_elements // max(1, k * height * width))
    positions, scores = [], []
    for start in range(0, n, step):  # a fixed number of chunks of fixed sizes
        stop = min(n, start + step)
        m = maps[start:stop].to(acc)
        c = m.shape[0]
        # Along the width first, then along the height, as PyTorch's kernel sums.
        along_x: Optional[Tensor] = None
        for j in range(4):
            taps = x_taps[start:stop, None, None, :, j].expand(c, k, m.shape[-2], width)
            term = m.gather(3, taps) * x_weights[start:stop, None, None, :, j]
            along_x = term if along_x is None else along_x + term
        assert along_x is not None
        resized: Optional[Tensor] = None
        for j in range(4):
            taps = y_taps[start:stop, None, :, None, j].expand(c, k, height, width)
            term = along_x.gather(2, taps) * y_weights[start:stop, None, :, None, j]
            resized = term if resized is None else resized + term
        assert resized is not None
        inside = ((rows[None, :, None] < heights_ceil[start:stop, None, None])
                  & (cols[None, None, :] < widths_ceil[start:stop, None, None]))
        resized = resized.to(maps.dtype).masked_fill(~inside[:, None], float("-inf"))
        best, pos = resized.flatten(2).max(dim=2)
        positions.append(pos)
        scores.append(best)
    pos = torch.cat(positions)
    end_scores = torch.cat(scores)
    x_int = pos % width
    y_int = torch.div(pos - x_int, width, rounding_mode="floor")
    # In float32 whatever the boxes' dtype: torchvision multiplies a float32
    # vector by 0-dim tensors, which do not promote it.
    x = (x_int.float() + 0.5) * width_correction.float()[:, None] + offset_x.float()[:, None]
    y = (y_int.float() + 0.5) * height_correction.float()[:, None] + offset_y.float()[:, None]
    keypoints = torch.stack([x, y, torch.ones_like(x)], dim=-1)
    return keypoints, end_scores.to(torch.float32)


# --------------------------------------------------------------------------
# Training


def select_training_samples(heads, proposals: Tensor, proposal_valid: Tensor,
                            targets: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """torchvision's ``select_training_samples``: the ground truth added to the
    proposals (``add_gt_proposals``), matched (``assign_targets_to_proposals``),
    sampled into ``batch_size_per_image`` slots per image and encoded. Returns
    ``rois [B, S, 4]`` (invalid slots: a unit box), ``valid``, ``labels``,
    ``matches``, ``positive [B, S]`` and ``regression_targets [B * S, 4]``."""
    gt_boxes = targets["boxes"].to(proposals.dtype)
    gt_labels = targets["labels"].to(torch.int64)
    gt_valid = gt_labels >= 0
    candidates = torch.cat([proposals, gt_boxes], dim=1)
    candidate_valid = torch.cat([proposal_valid, gt_valid], dim=1)
    matches = matching.match(box_iou(gt_boxes, candidates), gt_valid, heads.proposal_matcher)
    labels = gt_labels.gather(1, matches.clamp(min=0))
    labels = torch.where(matches == -1, torch.zeros_like(labels), labels)
    labels = torch.where((matches == -2) | ~candidate_valid, torch.full_like(labels, -1), labels)
    # subsample: a fixed number of slots per image
    index, valid = matching.sample(matching.label_codes(labels), heads.fg_bg_sampler)
    index = index.clamp(min=0)
    rois = gather_rows(candidates, index)
    dummy = (torch.arange(4, device=rois.device) >= 2).to(rois.dtype)  # (0, 0, 1, 1), made on the device
    rois = torch.where(valid[..., None], rois, dummy)
    roi_labels = labels.gather(1, index)
    roi_matches = matches.gather(1, index)
    positive = valid & (roi_labels > 0)
    matched_gt = gather_rows(gt_boxes, roi_matches.clamp(min=0))
    matched_gt = torch.where(positive[..., None], matched_gt, rois)
    regression_targets = encode(heads.box_coder, matched_gt.reshape(-1, 4), rois.reshape(-1, 4))
    return {"rois": rois, "valid": valid, "labels": roi_labels, "matches": roi_matches, "positive": positive,
            "regression_targets": regression_targets}


def fastrcnn_loss(class_logits: Tensor, box_regression: Tensor, labels: Tensor, regression_targets: Tensor,
                  valid: Tensor, positive: Tensor) -> Tuple[Tensor, Tensor]:
    """torchvision's ``fastrcnn_loss`` over the sampled slots (``labels``,
    ``valid``, ``positive [B, S]``), as masked reductions: ``(loss_classifier,
    loss_box_reg)``."""
    flat_valid = valid.reshape(-1)
    flat_labels = labels.reshape(-1)
    count = flat_valid.sum().clamp(min=1)
    ce = F.cross_entropy(class_logits, flat_labels.clamp(min=0), reduction="none")
    loss_classifier = torch.where(flat_valid, ce, torch.zeros_like(ce)).sum() / count
    n = box_regression.shape[0]
    per_class = box_regression.reshape(n, box_regression.shape[-1] // 4, 4)
    picked = per_class.gather(1, flat_labels.clamp(min=0).view(n, 1, 1).expand(n, 1, 4))[:, 0]
    box = F.smooth_l1_loss(picked, regression_targets, beta=1 / 9, reduction="none")
    flat_positive = positive.reshape(-1)
    loss_box_reg = torch.where(flat_positive[:, None], box, torch.zeros_like(box)).sum() / count
    return loss_classifier, loss_box_reg


def positive_slots(heads, samples: Dict[str, Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """The positive sampled RoIs (``torch.where(labels > 0)`` per image in
    torchvision's mask and keypoint branches), compacted in their order into
    ``int(batch_size_per_image * positive_fraction)`` slots per image (the
    most positives the sampler takes): ``(boxes [B, P, 4], valid [B, P],
    matches [B, P])``, the index of each slot's matched ground truth."""
    from ..ops import compact

    rois, positive, roi_matches = samples["rois"], samples["positive"], samples["matches"]
    slots = rois.shape[1]
    sampler = heads.fg_bg_sampler
    capacity = max(1, min(slots, int(sampler.batch_size_per_image * sampler.positive_fraction)))
    which, valid, _ = compact(positive, capacity)
    which = which.clamp(min=0)
    return gather_rows(rois, which), valid, roi_matches.gather(1, which).clamp(min=0)


def maskrcnn_loss(heads, features: Dict[str, Tensor], image_size: Tuple[int, int], samples: Dict[str, Tensor],
                  gt_labels: Tensor, gt_masks: Tensor) -> Tensor:
    """torchvision's mask branch in training and ``maskrcnn_loss``, on the
    positive RoIs (:func:`positive_slots`)."""
    from torchvision.ops import roi_align

    boxes, mask_valid, matched = positive_slots(heads, samples)
    b = boxes.shape[0]
    pooled = roi_pool(heads.mask_roi_pool, features, boxes, image_size, mask_valid)
    flat_valid = mask_valid.reshape(-1)
    logits = heads.mask_predictor(head(heads.mask_head, pooled, flat_valid, "mask head"))
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


def keypoints_to_heatmap(keypoints: Tensor, rois: Tensor, heatmap_size: int) -> Tuple[Tensor, Tensor]:
    """torchvision's ``keypoints_to_heatmap`` (``keypoints [N, K, 3]``, ``rois
    [N, 4]``): each keypoint's cell in the RoI's ``heatmap_size`` grid (its
    linear index) and whether it is a target (visible, inside the RoI), with
    ``torch.where`` for torchvision's boolean index assignments."""
    offset_x = rois[:, 0, None]
    offset_y = rois[:, 1, None]
    scale_x = (heatmap_size / (rois[:, 2] - rois[:, 0]))[:, None]
    scale_y = (heatmap_size / (rois[:, 3] - rois[:, 1]))[:, None]
    x = keypoints[..., 0]
    y = keypoints[..., 1]
    x_boundary = x == rois[:, 2, None]
    y_boundary = y == rois[:, 3, None]
    x = ((x - offset_x) * scale_x).floor().long()
    y = ((y - offset_y) * scale_y).floor().long()
    last = torch.full_like(x, heatmap_size - 1)
    x = torch.where(x_boundary, last, x)
    y = torch.where(y_boundary, last, y)
    valid_loc = (x >= 0) & (y >= 0) & (x < heatmap_size) & (y < heatmap_size)
    valid = (valid_loc & (keypoints[..., 2] > 0)).long()
    return (y * heatmap_size + x) * valid, valid


def keypointrcnn_loss(heads, features: Dict[str, Tensor], image_size: Tuple[int, int],
                      samples: Dict[str, Tensor], gt_keypoints: Tensor) -> Tensor:
    """torchvision's keypoint branch in training and ``keypointrcnn_loss`` on
    the positive RoIs (:func:`positive_slots`): the cross entropy of each
    target keypoint's heatmap cell, averaged over the targets, as a masked
    mean (``gt_keypoints [B, G, K, 3]``; padding has visibility 0)."""
    boxes, kp_valid, matched = positive_slots(heads, samples)
    flat_valid = kp_valid.reshape(-1)
    pooled = roi_pool(heads.keypoint_roi_pool, features, boxes, image_size, kp_valid)
    logits = heads.keypoint_predictor(head(heads.keypoint_head, pooled, flat_valid, "keypoint head"))
    n, k, h, w = logits.shape
    if h != w:
        raise ValueError(f"{_STATIC_MODEL}: the keypoint predictor's heatmaps must be square, got {h}x{w}")
    # In the keypoints' own dtype (torchvision requires float32), not the
    # RoIs' (bfloat16 under autocast): the arithmetic promotes as torchvision's.
    kp = gather_rows(gt_keypoints.flatten(2), matched).reshape(n, -1, 3)
    targets, valid = keypoints_to_heatmap(kp, boxes.reshape(-1, 4), h)
    valid = (valid > 0) & flat_valid[:, None]
    ce = F.cross_entropy(logits.reshape(n * k, h * w), targets.reshape(-1), reduction="none")
    flat = valid.reshape(-1)
    count = flat.sum()
    total = torch.where(flat, ce, torch.zeros_like(ce)).sum()
    return torch.where(count > 0, total / count.clamp(min=1), logits.sum() * 0)


def losses(heads, features: Dict[str, Tensor], proposals: Tensor, proposal_valid: Tensor,
           targets: Dict[str, Tensor], image_size: Tuple[int, int]) -> Dict[str, Tensor]:
    """``RoIHeads.forward`` in training: the loss dict."""
    samples = select_training_samples(heads, proposals, proposal_valid, targets)
    flat_valid = samples["valid"].reshape(-1)
    pooled = roi_pool(heads.box_roi_pool, features, samples["rois"], image_size, samples["valid"])
    box_features = head(heads.box_head, pooled, flat_valid, "box head")
    class_logits, box_regression = heads.box_predictor(box_features)
    loss_classifier, loss_box_reg = fastrcnn_loss(class_logits, box_regression, samples["labels"],
                                                  samples["regression_targets"], samples["valid"],
                                                  samples["positive"])
    result = {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}
    if heads.has_mask():
        result["loss_mask"] = maskrcnn_loss(heads, features, image_size, samples,
                                            targets["labels"].to(torch.int64), targets["masks"])
    if heads.has_keypoint():
        result["loss_keypoint"] = keypointrcnn_loss(heads, features, image_size, samples, targets["keypoints"])
    return result


# --------------------------------------------------------------------------
# Eval


def per_class_nms(boxes: Tensor, scores: Tensor, valid: Tensor, classes: int, iou_threshold: float,
                  slots: int) -> Tuple[Tensor, Tensor]:
    """``syncfree.nms(boxes, scores, iou_threshold, slots, idxs=class, valid=valid)``
    for candidates laid out proposal-major, class-minor (``boxes [B, P *
    classes, 4]``, candidate ``p * classes + c`` of class ``c``), computed as
    one row per class (``[B, classes, P]``) and merged by rank (score
    descending, then candidate index): the same indices in the same order,
    with a suppression mask per class (``classes * P^2 / 8`` bytes per image
    on CUDA instead of ``(classes * P)^2 / 8``: 11 MB instead of 1 GB for
    1000 proposals and 90 classes)."""
    b, n = scores.shape
    if classes == 0 or n == 0:  # no candidates (no proposals, or a model without object classes)
        none = torch.full((b, slots), -1, dtype=torch.int64, device=scores.device)
        return none, none >= 0
    p = n // classes
    by_class = (boxes.reshape(b, p, classes, 4).transpose(1, 2), scores.reshape(b, p, classes).transpose(1, 2),
                valid.reshape(b, p, classes).transpose(1, 2))
    # Candidate p * classes + c is row c's p-th.
    candidate = (torch.arange(p, device=scores.device) * classes)[None, :] + torch.arange(
        classes, device=scores.device)[:, None]
    return nms_rows(*by_class, candidate, n, iou_threshold, slots)


def postprocess_detections(heads, class_logits: Tensor, box_regression: Tensor, proposals: Tensor,
                           proposal_valid: Tensor, image_size: Tuple[int, int],
                           image_sizes: Optional[Tensor]) -> Dict[str, Tensor]:
    """torchvision's ``postprocess_detections``: per-class boxes clipped (to
    each image's size), background, low scores and small boxes masked,
    ``syncfree.nms`` per class into ``detections_per_img`` slots
    (:func:`per_class_nms`), in torchvision's candidate order (proposal-major,
    class-minor). Invalid slots are zeros."""
    b, m = proposals.shape[0], proposals.shape[1]
    num_classes = class_logits.shape[-1]
    pred_boxes = decode(heads.box_coder, box_regression, proposals.reshape(-1, 4))
    pred_scores = F.softmax(class_logits, -1)
    boxes = clip_boxes(pred_boxes.reshape(b, m, -1, 4), image_size, image_sizes).reshape(b * m, -1, 4)
    # Class 0 is the background.
    boxes = boxes[:, 1:].reshape(b, m * (num_classes - 1), 4)
    scores = pred_scores[:, 1:].reshape(b, m * (num_classes - 1))
    labels = torch.arange(1, num_classes, device=boxes.device).repeat(m).expand(b, -1)
    ok = ((scores > heads.score_thresh) & (boxes[..., 2] - boxes[..., 0] >= 1e-2)
          & (boxes[..., 3] - boxes[..., 1] >= 1e-2)
          & proposal_valid.repeat_interleave(num_classes - 1, dim=1))
    slots = int(heads.detections_per_img)
    kept, valid = per_class_nms(boxes, scores, ok, num_classes - 1, float(heads.nms_thresh), slots)
    index = kept.clamp(min=0)
    out_boxes = gather_rows(boxes, index)
    out_boxes = torch.where(valid[..., None], out_boxes, torch.zeros_like(out_boxes))
    out_scores = torch.where(valid, scores.gather(1, index), torch.zeros_like(valid, dtype=scores.dtype))
    out_labels = torch.where(valid, labels.gather(1, index), torch.zeros_like(index))
    return {"boxes": out_boxes, "scores": out_scores, "labels": out_labels, "valid": valid}


def detect(heads, features: Dict[str, Tensor], proposals: Tensor, proposal_valid: Tensor,
           image_size: Tuple[int, int], image_sizes: Optional[Tensor]) -> Dict[str, Tensor]:
    """``RoIHeads.forward`` in eval: the detection dict. Mask R-CNN adds
    ``masks [B, D, 1, H, W]`` (pasted into the canvas) and ``mask_probs [B,
    D, 1, M, M]`` (the mask head's probabilities, torchvision's
    ``RoIHeads`` output, for :func:`~syncfree.detection.postprocess` to
    paste at the original size); Keypoint R-CNN adds ``keypoints [B, D, K,
    3]`` and ``keypoints_scores [B, D, K]``. Invalid slots are zeros."""
    pooled = roi_pool(heads.box_roi_pool, features, proposals, image_size, proposal_valid)
    class_logits, box_regression = heads.box_predictor(
        head(heads.box_head, pooled, proposal_valid.reshape(-1), "box head"))
    result = postprocess_detections(heads, class_logits, box_regression, proposals, proposal_valid, image_size,
                                    image_sizes)
    if heads.has_mask():
        out_boxes, out_labels, valid = result["boxes"], result["labels"], result["valid"]
        b, slots = valid.shape
        pooled = roi_pool(heads.mask_roi_pool, features, out_boxes, image_size, valid)
        logits = heads.mask_predictor(head(heads.mask_head, pooled, valid.reshape(-1), "mask head"))
        n, size = logits.shape[0], logits.shape[-1]
        flat_labels = out_labels.reshape(-1)
        prob = logits.sigmoid().gather(1, flat_labels.view(n, 1, 1, 1).expand(n, 1, size, size))
        masks = paste_masks(prob, out_boxes.reshape(-1, 4), image_size)
        if image_sizes is not None:  # torchvision pastes into the image: nothing beyond it
            masks = zero_outside(masks.reshape((b, slots) + tuple(masks.shape[2:])), image_sizes)
        masks = masks.reshape((b, slots, 1) + tuple(masks.shape[-2:]))
        result["masks"] = torch.where(valid.view(b, slots, 1, 1, 1), masks, torch.zeros_like(masks))
        result["mask_probs"] = torch.where(valid.view(b, slots, 1, 1, 1), prob.reshape((b, slots) + prob.shape[1:]),
                                           torch.zeros_like(prob).reshape((b, slots) + prob.shape[1:]))
    if heads.has_keypoint():
        out_boxes, valid = result["boxes"], result["valid"]
        b, slots = valid.shape
        pooled = roi_pool(heads.keypoint_roi_pool, features, out_boxes, image_size, valid)
        logits = heads.keypoint_predictor(head(heads.keypoint_head, pooled, valid.reshape(-1), "keypoint head"))
        keypoints, scores = heatmaps_to_keypoints(logits, out_boxes.reshape(-1, 4), image_size)
        keypoints = keypoints.reshape(b, slots, -1, 3)
        scores = scores.reshape(b, slots, -1)
        result["keypoints"] = torch.where(valid[:, :, None, None], keypoints, torch.zeros_like(keypoints))
        result["keypoints_scores"] = torch.where(valid[:, :, None], scores, torch.zeros_like(scores))
    return result
