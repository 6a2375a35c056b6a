"""torchvision's FCOS (``torchvision.models.detection.fcos``) with a static
step: :class:`StaticFCOS`.

- Matching: torchvision's center sampling, "inside the box" rule, scale
  ranges per level and smallest-area choice, on ``[B, A, G]`` with padded
  ground truth (padding never matches).
- Losses: the focal loss over every anchor, GIoU and centerness over the
  foreground as masks, divided by the batch's number of foreground anchors
  as a tensor clamped at 1 (torchvision reads it with ``.item()``).
- Detection: RetinaNet's per-level candidates and NMS into slots
  (:mod:`.retinanet`), the score ``sqrt(sigmoid(logit) *
  sigmoid(centerness))`` and the linear box coder as torchvision's.
"""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._names import STATIC_FCOS as _STATIC_FCOS
from .boxes import clip_boxes, gather_rows, generalized_box_iou_loss
from .retinanet import anchors_per_level, candidates, nms_into_slots, one_hot_targets
from .static import StaticOneStage


def match(model, anchors_one: Tensor, targets: Dict[str, Tensor], num_per_level: List[int]) -> Tensor:
    """torchvision's ``FCOS.compute_loss`` matching, batched: ``[B, A]``
    ground-truth indices, -1 unmatched."""
    gt_boxes = targets["boxes"]  # [B, G, 4]
    gt_valid = targets["labels"] >= 0
    gt_centers = (gt_boxes[..., :2] + gt_boxes[..., 2:]) / 2  # [B, G, 2]
    anchor_centers = (anchors_one[:, :2] + anchors_one[:, 2:]) / 2  # [A, 2]
    anchor_sizes = anchors_one[:, 2] - anchors_one[:, 0]  # [A]
    # Center sampling: the anchor point close enough to the box's center.
    pairwise_match = (anchor_centers[None, :, None, :] - gt_centers[:, None, :, :]).abs_().max(
        dim=3).values < model.center_sampling_radius * anchor_sizes[None, :, None]  # [B, A, G]
    x, y = anchor_centers.unsqueeze(dim=2).unbind(dim=1)  # [A, 1]
    x0, y0, x1, y1 = gt_boxes.unsqueeze(dim=1).unbind(dim=3)  # [B, 1, G]
    pairwise_dist = torch.stack([x - x0, y - y0, x1 - x, y1 - y], dim=3)  # [B, A, G, 4]
    # Inside the box.
    pairwise_match &= pairwise_dist.min(dim=3).values > 0
    # Each level's scale range.
    lower_bound = anchor_sizes * 4
    lower_bound[: num_per_level[0]] = 0
    upper_bound = anchor_sizes * 8
    upper_bound[-num_per_level[-1]:] = float("inf")
    pairwise_dist = pairwise_dist.max(dim=3).values
    pairwise_match &= (pairwise_dist > lower_bound[None, :, None]) & (pairwise_dist < upper_bound[None, :, None])
    pairwise_match &= gt_valid[:, None, :]
    # The smallest box among those that match.
    gt_areas = (gt_boxes[..., 2] - gt_boxes[..., 0]) * (gt_boxes[..., 3] - gt_boxes[..., 1])  # [B, G]
    # torchvision's float(match) * (1e8 - area), as a where: a padding box
    # with non-finite coordinates would make 0 * inf = NaN.
    area_score = 1e8 - gt_areas[:, None, :]
    area_score = area_score.to(torch.promote_types(torch.float32, area_score.dtype))
    pairwise_match = torch.where(pairwise_match, area_score, torch.zeros_like(area_score))
    min_values, matched = pairwise_match.max(dim=2)  # [B, A]
    return torch.where(min_values < 1e-5, torch.full_like(matched, -1), matched)


def losses(model, targets: Dict[str, Tensor], head_outputs: Dict[str, Tensor], anchors_one: Tensor,
           num_per_level: List[int]) -> Dict[str, Tensor]:
    """torchvision's ``FCOS.compute_loss`` and ``FCOSHead.compute_loss``:
    ``{"classification", "bbox_regression", "bbox_ctrness"}``."""
    from torchvision.ops import sigmoid_focal_loss

    cls_logits = head_outputs["cls_logits"]  # [B, A, C]
    regression = head_outputs["bbox_regression"]  # [B, A, 4]
    ctrness = head_outputs["bbox_ctrness"]  # [B, A, 1]
    b, a = regression.shape[:2]
    matches = match(model, anchors_one, targets, num_per_level)
    foreground = matches >= 0
    index = matches.clamp(min=0)
    # An image without ground truth: zero boxes, as torchvision's (padding is zeros).
    gt_boxes = gather_rows(targets["boxes"], index)  # [B, A, 4]
    labels = targets["labels"].gather(1, index)
    num_foreground = foreground.sum().clamp(min=1)  # torchvision's max(1, .sum().item())

    classification = sigmoid_focal_loss(cls_logits, one_hot_targets(labels, foreground, cls_logits),
                                        reduction="sum")

    box_coder = model.head.box_coder
    anchors_b = anchors_one.expand(b, a, 4)
    pred_boxes = box_coder.decode(regression, anchors_b)
    # Background anchors get their anchor as target: a finite loss (and
    # gradient) under the mask.
    giou = generalized_box_iou_loss(pred_boxes,
                                    torch.where(foreground[..., None], gt_boxes, anchors_b.to(gt_boxes.dtype)))
    bbox_regression = torch.where(foreground, giou, torch.zeros_like(giou)).sum()

    reg_targets = box_coder.encode(anchors_b, gt_boxes)
    left_right = reg_targets[..., 0::2]
    top_bottom = reg_targets[..., 1::2]
    ctr_targets = torch.sqrt((left_right.min(dim=-1)[0] / left_right.max(dim=-1)[0])
                             * (top_bottom.min(dim=-1)[0] / top_bottom.max(dim=-1)[0]))
    # NaN off the foreground (a point outside its box): zero there, under the mask.
    ctr_targets = torch.where(foreground, ctr_targets, torch.zeros_like(ctr_targets))
    bce = F.binary_cross_entropy_with_logits(ctrness.squeeze(dim=2), ctr_targets, reduction="none")
    bbox_ctrness = torch.where(foreground, bce, torch.zeros_like(bce)).sum()
    return {"classification": classification / num_foreground,
            "bbox_regression": bbox_regression / num_foreground,
            "bbox_ctrness": bbox_ctrness / num_foreground}


def postprocess_detections(model, head_outputs: Dict[str, Tensor], anchors_one: Tensor, num_per_level: List[int],
                           image_size: Tuple[int, int], image_sizes: Optional[Tensor]) -> Dict[str, Tensor]:
    """torchvision's ``FCOS.postprocess_detections``: ``boxes [B, D, 4]``,
    ``scores``, ``labels``, ``valid [B, D]``, D = ``detections_per_img``."""
    cls_logits, regression = head_outputs["cls_logits"], head_outputs["bbox_regression"]
    scores = torch.sqrt(torch.sigmoid(cls_logits) * torch.sigmoid(head_outputs["bbox_ctrness"]))
    anchor, label, score, valid = candidates(scores, num_per_level, model.score_thresh, model.topk_candidates,
                                             _STATIC_FCOS)
    boxes = model.box_coder.decode(gather_rows(regression, anchor), anchors_one[anchor])
    boxes = clip_boxes(boxes, image_size, image_sizes)
    return nms_into_slots(boxes, score, label, valid, model.nms_thresh, model.detections_per_img)


class StaticFCOS(StaticOneStage):
    """A torchvision ``FCOS`` (``fcos_resnet50_fpn``, or any backbone with its head)
    with a static-shape step: see :func:`make_static`.

    Training: ``model(images, padded_targets)`` returns torchvision's
    ``{"classification", "bbox_regression", "bbox_ctrness"}``. Eval:
    ``model(images)`` returns ``boxes [B, D, 4]``, ``scores [B, D]``,
    ``labels [B, D]``, ``valid [B, D]``, D = ``detections_per_img``
    (invalid slots zeros)."""

    _name = _STATIC_FCOS
    _torchvision_methods = (("", "torchvision.models.detection.fcos.FCOS", "compute_loss"),
                            ("", "torchvision.models.detection.fcos.FCOS", "postprocess_detections"),
                            ("head", "torchvision.models.detection.fcos.FCOSHead", "compute_loss"))

    def _losses(self, model, targets, head_outputs, anchors_one, feature_list):
        return losses(model, targets, head_outputs, anchors_one,
                      anchors_per_level(feature_list, anchors_one.shape[0]))

    def _detections(self, model, head_outputs, anchors_one, feature_list, image_sizes):
        return postprocess_detections(model, head_outputs, anchors_one,
                                      anchors_per_level(feature_list, anchors_one.shape[0]), self.image_size,
                                      image_sizes)
