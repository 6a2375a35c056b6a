"""Boxes, batched over images: torchvision's ``box_area``, ``box_iou``
(``torchvision.ops.boxes``) and ``BoxCoder``'s ``encode_single`` and
``decode_single`` (``torchvision.models.detection._utils``), operation by
operation, over any leading dimensions and without the host-to-device copies
torchvision's make on every call; and the row gather the static step uses in
place of boolean indexing."""
from typing import Optional, Tuple

import torch
from torch import Tensor


def _upcast(t: Tensor) -> Tensor:
    """torchvision's ``_upcast``: float16 and bfloat16 to float32 (so that
    areas and intersections do not overflow or round coarsely)."""
    if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
        return t.float()
    return t


def box_area(boxes: Tensor) -> Tensor:
    """torchvision's ``box_area``, over any leading dimensions (in float32
    at least, as torchvision's)."""
    boxes = _upcast(boxes)
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """IoU of ``[B, G, 4]`` and ``[B, N, 4]`` (or ``[N, 4]``) boxes: ``[B, G, N]``,
    computed operation by operation as torchvision's ``box_iou`` computes it
    (areas and intersections of float16 and bfloat16 boxes in float32)."""
    area1 = box_area(boxes1)
    area2 = box_area(boxes2)
    lt = torch.max(boxes1[..., :, None, :2], boxes2[..., None, :, :2])
    rb = torch.min(boxes1[..., :, None, 2:], boxes2[..., None, :, 2:])
    wh = _upcast(rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area1[..., :, None] + area2[..., None, :] - inter
    return inter / union


def encode(box_coder, reference_boxes: Tensor, proposals: Tensor) -> Tensor:
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


def decode(box_coder, rel_codes: Tensor, boxes: Tensor) -> Tensor:
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


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, k]]`` for ``x [B, N, ...]`` and ``index [B, K]`` (in range)."""
    shape = index.shape + x.shape[2:]
    flat = index.reshape(index.shape + (1,) * (x.dim() - 2)).expand(shape)
    return x.gather(1, flat)


def clip_boxes(boxes: Tensor, image_size: Tuple[int, int], image_sizes: Optional[Tensor]) -> Tensor:
    """torchvision's ``clip_boxes_to_image``: ``boxes [B, ..., 4]`` clipped to
    each image's own size, ``image_sizes [B, 2]`` (height, width; any integer
    dtype), or to ``image_size`` for every image when ``image_sizes`` is None.
    Per image it computes what torchvision's ``clamp(min=0, max=width)``
    computes: the bound in the boxes' dtype, then max with 0 and min with the
    bound."""
    if image_sizes is None:
        from torchvision.ops import boxes as box_ops

        return box_ops.clip_boxes_to_image(boxes, image_size)
    shape = (boxes.shape[0],) + (1,) * (boxes.dim() - 2) + (1,)
    sizes = image_sizes.to(boxes.dtype)
    height = sizes[:, 0].view(shape)
    width = sizes[:, 1].view(shape)
    boxes_x = torch.minimum(boxes[..., 0::2].clamp(min=0), width)
    boxes_y = torch.minimum(boxes[..., 1::2].clamp(min=0), height)
    return torch.stack((boxes_x, boxes_y), dim=boxes.dim()).reshape(boxes.shape)


def nms_rows(boxes: Tensor, scores: Tensor, valid: Tensor, candidate: Tensor, n: int, iou_threshold: float,
             slots: int) -> Tuple[Tensor, Tensor]:
    """``syncfree.nms`` of candidates whose ids are their rows (classes), run
    as one NMS per row and merged by rank: ``boxes [B, R, P, 4]``, ``scores``
    and ``valid [B, R, P]``, ``candidate [R, P]`` (int64) the index of each
    in the image's flat layout of ``n`` candidates. Returns ``(indices,
    valid)``, ``[B, slots]``: the flat indices of the kept candidates by
    rank (score descending, equal scores by lower flat index), as
    ``syncfree.nms(flat boxes, flat scores, iou_threshold, slots,
    idxs=row, valid=flat valid)`` returns them, with a suppression mask per
    row (``R * P^2 / 8`` bytes per image on CUDA instead of ``(R * P)^2 /
    8``)."""
    from ..ops import nms

    b, rows = scores.shape[0], scores.shape[1]
    if rows == 0 or scores.shape[2] == 0:  # no candidates
        none = torch.full((b, slots), -1, dtype=torch.int64, device=scores.device)
        return none, none >= 0
    kept, ok = nms(boxes, scores, iou_threshold, slots, valid=valid)  # [B, R, slots]
    flat = candidate.to(kept.device).expand(b, -1, -1).gather(2, kept.clamp(min=0))
    merged = rows * kept.shape[2]
    index = torch.where(ok, flat, torch.full_like(flat, n)).reshape(b, merged)
    # The score of each kept candidate, by its row and slot.
    row_scores = scores.gather(2, kept.clamp(min=0)).reshape(b, merged)
    score = torch.where(ok.reshape(b, merged), row_scores, torch.full_like(row_scores, float("-inf")))
    # Rank: score descending, then the lower flat index (a stable sort by
    # score of the candidates sorted by index); invalid slots last.
    index, order = index.sort(dim=1)
    score = score.gather(1, order)
    _, by_score = score.sort(dim=1, descending=True, stable=True)
    index = index.gather(1, by_score)[:, :slots]
    merged_ok = index < n
    return torch.where(merged_ok, index, torch.full_like(index, -1)), merged_ok
