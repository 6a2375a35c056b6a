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


def _upcast_non_float(t: Tensor) -> Tensor:
    """torchvision's ``_upcast_non_float`` (``torchvision.ops._utils``): what
    is not float32 or float64 to float32."""
    return t.float() if t.dtype not in (torch.float32, torch.float64) else t


def _loss_inter_union(boxes1: Tensor, boxes2: Tensor) -> Tuple[Tensor, Tensor]:
    """torchvision's ``_loss_inter_union`` with the intersection selected by a
    mask (``torch.where``) where torchvision assigns it by boolean indexing (a
    ``nonzero`` inside, a host sync): the same values, element by element."""
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xkis1 = torch.max(x1, x1g)
    ykis1 = torch.max(y1, y1g)
    xkis2 = torch.min(x2, x2g)
    ykis2 = torch.min(y2, y2g)
    mask = (ykis2 > ykis1) & (xkis2 > xkis1)
    intsctk = torch.where(mask, (xkis2 - xkis1) * (ykis2 - ykis1), torch.zeros_like(x1))
    unionk = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsctk
    return intsctk, unionk


def _enclosing(boxes1: Tensor, boxes2: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The smallest box enclosing both, as torchvision's IoU losses compute it."""
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    return torch.min(x1, x1g), torch.min(y1, y1g), torch.max(x2, x2g), torch.max(y2, y2g)


def generalized_box_iou_loss(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """torchvision's ``generalized_box_iou_loss`` with ``reduction="none"``,
    operation by operation, without its boolean indexing."""
    boxes1 = _upcast_non_float(boxes1)
    boxes2 = _upcast_non_float(boxes2)
    intsctk, unionk = _loss_inter_union(boxes1, boxes2)
    iouk = intsctk / (unionk + eps)
    xc1, yc1, xc2, yc2 = _enclosing(boxes1, boxes2)
    area_c = (xc2 - xc1) * (yc2 - yc1)
    miouk = iouk - ((area_c - unionk) / (area_c + eps))
    return 1 - miouk


def _diou_iou_loss(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tuple[Tensor, Tensor]:
    """torchvision's ``_diou_iou_loss``, without boolean indexing."""
    intsct, union = _loss_inter_union(boxes1, boxes2)
    iou = intsct / (union + eps)
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xc1, yc1, xc2, yc2 = _enclosing(boxes1, boxes2)
    diagonal_distance_squared = ((xc2 - xc1) ** 2) + ((yc2 - yc1) ** 2) + eps
    x_p = (x2 + x1) / 2
    y_p = (y2 + y1) / 2
    x_g = (x1g + x2g) / 2
    y_g = (y1g + y2g) / 2
    centers_distance_squared = ((x_p - x_g) ** 2) + ((y_p - y_g) ** 2)
    return 1 - iou + (centers_distance_squared / diagonal_distance_squared), iou


def distance_box_iou_loss(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """torchvision's ``distance_box_iou_loss`` with ``reduction="none"``,
    without boolean indexing."""
    loss, _ = _diou_iou_loss(_upcast_non_float(boxes1), _upcast_non_float(boxes2), eps)
    return loss


def complete_box_iou_loss(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """torchvision's ``complete_box_iou_loss`` with ``reduction="none"``,
    without boolean indexing (its distance term with the default eps, as
    torchvision's)."""
    boxes1 = _upcast_non_float(boxes1)
    boxes2 = _upcast_non_float(boxes2)
    diou_loss, iou = _diou_iou_loss(boxes1, boxes2)
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    w_pred = x2 - x1
    h_pred = y2 - y1
    w_gt = x2g - x1g
    h_gt = y2g - y1g
    v = (4 / (torch.pi**2)) * torch.pow((torch.atan(w_gt / h_gt) - torch.atan(w_pred / h_pred)), 2)
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return diou_loss + alpha * v
