"""torchvision's RetinaNet (``torchvision.models.detection.retinanet``) with
a static step: :class:`StaticRetinaNet`, and the parts FCOS shares with it
(the per-level candidates and the NMS into detection slots, which
torchvision's FCOS copies from RetinaNet).

- Matching: torchvision's ``Matcher`` (low-quality matches kept) with padded
  ground truth (:func:`syncfree.detection.matching.match`).
- Losses: the focal loss over the anchors that are not between the
  thresholds and the box loss over the foreground, as masks; each image's
  sum divided by its number of foreground anchors (a tensor clamped at 1,
  where torchvision calls ``max(1, tensor)``, a host sync), then the mean
  over images, as torchvision's.
- Detection: per level, the score threshold as a mask and a fixed
  ``min(topk_candidates, anchors x classes)`` candidates (torchvision's
  ``topk`` of the scores above the threshold: when fewer pass, the rest are
  invalid slots), decoding and clipping to each image's size, and
  ``syncfree.nms`` with the class as id into ``detections_per_img`` slots.
"""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _names, matching
from ._names import STATIC_RETINANET as _STATIC_RETINANET
from .boxes import (box_iou, clip_boxes, complete_box_iou_loss, decode, distance_box_iou_loss, encode, gather_rows,
                    generalized_box_iou_loss)
from .static import StaticOneStage, top_candidates, topk_setting


def anchors_per_level(features: List[Tensor], num_anchors: int) -> List[int]:
    """torchvision's ``num_anchors_per_level``: each level's ``H * W * A``, A
    the anchors per location (``num_anchors // sum(H * W)``)."""
    hw = [int(f.shape[-2]) * int(f.shape[-1]) for f in features]
    per_location = num_anchors // sum(hw)
    return [n * per_location for n in hw]


def match(matcher, anchors_one: Tensor, targets: Dict[str, Tensor]) -> Tensor:
    """torchvision's matching of each image's ground truth to the anchors
    (``box_iou`` and ``proposal_matcher``): ``[B, A]`` ground-truth
    indices, -1 background, -2 between the thresholds; an image without
    ground truth is all background."""
    gt_boxes = targets["boxes"]
    return matching.match(box_iou(gt_boxes, anchors_one.to(gt_boxes.dtype)), targets["labels"] >= 0, matcher)


BOX_LOSSES = ("l1", "smooth_l1", "giou", "diou", "ciou")  # torchvision's _box_loss


def check_loss_type(name: str, loss_type) -> None:
    """The regression head's ``_loss_type`` is one of torchvision's box
    losses (checked by ``make_static`` and at each call: a setting)."""
    if loss_type not in BOX_LOSSES:
        raise ValueError(f"{name}: model.head.regression_head._loss_type must be one of "
                         f"{', '.join(BOX_LOSSES)} (torchvision's box losses), got {loss_type!r}")


def box_loss(loss_type: str, box_coder, anchors_b: Tensor, matched_boxes: Tensor, regression: Tensor) -> Tensor:
    """torchvision's ``_box_loss`` per anchor (``[B, A]``, not summed), with
    its defaults (smooth L1's beta 1, the IoU losses' eps 1e-7); the IoU
    losses are :mod:`.boxes`' (torchvision's select the intersection by
    boolean indexing, a host sync)."""
    b, a = regression.shape[:2]
    if loss_type in ("l1", "smooth_l1"):
        target = encode(box_coder, matched_boxes.reshape(-1, 4), anchors_b.reshape(-1, 4)).view(b, a, 4)
        if loss_type == "l1":
            return F.l1_loss(regression, target, reduction="none").sum(-1)
        return F.smooth_l1_loss(regression, target, reduction="none", beta=1.0).sum(-1)
    check_loss_type(_STATIC_RETINANET, loss_type)
    losses = {"giou": generalized_box_iou_loss, "diou": distance_box_iou_loss, "ciou": complete_box_iou_loss}
    predicted = decode(box_coder, regression.reshape(-1, 4), anchors_b.reshape(-1, 4))
    return losses[loss_type](predicted, matched_boxes.reshape(-1, 4), eps=1e-7).view(b, a)


def one_hot_targets(labels: Tensor, foreground: Tensor, logits: Tensor) -> Tensor:
    """The focal loss's targets: 1 at each foreground anchor's class, 0
    elsewhere (``[B, A, C]``, the logits' dtype), as torchvision's
    ``gt_classes_target[foreground, labels] = 1.0``."""
    classes = torch.arange(logits.shape[-1], device=labels.device)
    return (foreground[..., None] & (labels[..., None] == classes)).to(logits.dtype)


def losses(model, targets: Dict[str, Tensor], head_outputs: Dict[str, Tensor], anchors_one: Tensor) -> Dict[str, Tensor]:
    """torchvision's ``RetinaNet.compute_loss`` (the head's
    ``compute_loss``): ``{"classification", "bbox_regression"}``."""
    from torchvision.ops import sigmoid_focal_loss

    cls_logits, regression = head_outputs["cls_logits"], head_outputs["bbox_regression"]
    b, a = regression.shape[:2]
    matches = match(model.proposal_matcher, anchors_one, targets)
    foreground = matches >= 0
    index = matches.clamp(min=0)
    per_image = foreground.sum(dim=1).clamp(min=1)  # torchvision's max(1, num_foreground), per image

    # Classification: the anchors not between the thresholds.
    between = model.head.classification_head.BETWEEN_THRESHOLDS
    labels = targets["labels"].gather(1, index)
    focal = sigmoid_focal_loss(cls_logits, one_hot_targets(labels, foreground, cls_logits), reduction="none")
    focal = torch.where((matches != between)[..., None], focal, torch.zeros_like(focal))
    classification = (focal.sum(dim=(1, 2)) / per_image).sum() / b

    # Box regression: the foreground anchors (the others get their own anchor
    # as target, so that their masked loss and its gradient stay finite).
    # Their regression is zeroed too: the IoU losses of a box decoded from
    # any output can have a gradient that is not finite (CIoU's
    # atan(w / h) with h = 0), and 0 times it is NaN.
    anchors_b = anchors_one.expand(b, a, 4)
    matched = gather_rows(targets["boxes"], index)
    matched = torch.where(foreground[..., None], matched, anchors_b)
    regression = torch.where(foreground[..., None], regression, torch.zeros_like(regression))
    box = box_loss(model.head.regression_head._loss_type, model.head.regression_head.box_coder, anchors_b, matched,
                   regression)
    box = torch.where(foreground, box, torch.zeros_like(box))
    regression_loss = (box.sum(dim=1) / per_image).sum() / max(1, b)
    return {"classification": classification, "bbox_regression": regression_loss}


def candidates(scores: Tensor, num_per_level: List[int], score_thresh: float,
               topk_candidates: int, name: str) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per level, torchvision's candidates: the scores above ``score_thresh``
    (``scores [B, A, C]``, anchor-major, class-minor as torchvision's
    ``flatten``), their ``topk_candidates`` best (fewer on a level with
    fewer anchors x classes), concatenated over levels. Returns ``(anchor
    [B, S], label [B, S], score [B, S], valid [B, S])``; the invalid slots
    are those beyond the scores that pass, when fewer pass than the slots
    (their score is -inf). With ``topk_candidates`` 0, torchvision keeps no
    candidate: one slot per level, invalid. ``name`` prefixes the error of
    a negative ``topk_candidates``."""
    b, _, c = scores.shape
    topk = topk_setting(name, topk_candidates)
    anchor_list, label_list, score_list, valid_list = [], [], [], []
    start = 0
    for n in num_per_level:
        top, idx, ok = top_candidates(scores[:, start:start + n].reshape(b, n * c), score_thresh, topk)
        anchor_list.append(torch.div(idx, c, rounding_mode="floor") + start)
        label_list.append(idx % c)
        score_list.append(top)
        valid_list.append(ok)
        start += n
    return (torch.cat(anchor_list, dim=1), torch.cat(label_list, dim=1), torch.cat(score_list, dim=1),
            torch.cat(valid_list, dim=1))


def nms_into_slots(boxes: Tensor, scores: Tensor, labels: Tensor, valid: Tensor, nms_thresh: float,
                   detections_per_img: int) -> Dict[str, Tensor]:
    """torchvision's ``batched_nms`` (the label as id) and ``keep[:
    detections_per_img]``, into ``detections_per_img`` slots: the detection
    dict, invalid slots zeros."""
    from ..ops import nms

    kept, ok = nms(boxes, scores, float(nms_thresh), int(detections_per_img), idxs=labels, valid=valid)
    index = kept.clamp(min=0)
    out_boxes = gather_rows(boxes, index)
    return {"boxes": torch.where(ok[..., None], out_boxes, torch.zeros_like(out_boxes)),
            "scores": torch.where(ok, scores.gather(1, index), torch.zeros_like(ok, dtype=scores.dtype)),
            "labels": torch.where(ok, labels.gather(1, index), torch.zeros_like(index)),
            "valid": ok}


def postprocess_detections(model, head_outputs: Dict[str, Tensor], anchors_one: Tensor, num_per_level: List[int],
                           image_size: Tuple[int, int], image_sizes: Optional[Tensor]) -> Dict[str, Tensor]:
    """torchvision's ``RetinaNet.postprocess_detections``: ``boxes [B, D, 4]``,
    ``scores``, ``labels``, ``valid [B, D]``, D = ``detections_per_img``."""
    cls_logits, regression = head_outputs["cls_logits"], head_outputs["bbox_regression"]
    b = regression.shape[0]
    anchor, label, score, valid = candidates(torch.sigmoid(cls_logits), num_per_level, model.score_thresh,
                                             model.topk_candidates, _STATIC_RETINANET)
    s = anchor.shape[1]
    boxes = decode(model.box_coder, gather_rows(regression, anchor).reshape(-1, 4),
                   anchors_one[anchor.reshape(-1)]).view(b, s, 4)
    boxes = clip_boxes(boxes, image_size, image_sizes)
    return nms_into_slots(boxes, score, label, valid, model.nms_thresh, model.detections_per_img)


class StaticRetinaNet(StaticOneStage):
    """A torchvision ``RetinaNet`` (``retinanet_resnet50_fpn``, ``_v2``, or any
    backbone with its head) with a static-shape step: see :func:`make_static`.

    Training: ``model(images, padded_targets)`` returns torchvision's
    ``{"classification", "bbox_regression"}``. Eval: ``model(images)``
    returns ``boxes [B, D, 4]``, ``scores [B, D]``, ``labels [B, D]``,
    ``valid [B, D]``, D = ``detections_per_img`` (invalid slots zeros)."""

    _name = _STATIC_RETINANET
    _torchvision_methods = (("", "torchvision.models.detection.retinanet.RetinaNet", "compute_loss"),
                            ("", "torchvision.models.detection.retinanet.RetinaNet", "postprocess_detections"),
                            ("head", "torchvision.models.detection.retinanet.RetinaNetHead", "compute_loss"),
                            ("head.classification_head",
                             "torchvision.models.detection.retinanet.RetinaNetClassificationHead", "compute_loss"),
                            ("head.regression_head", "torchvision.models.detection.retinanet.RetinaNetRegressionHead",
                             "compute_loss"),
                            ("proposal_matcher", "torchvision.models.detection._utils.Matcher", "__call__"),
                            ("proposal_matcher", "torchvision.models.detection._utils.Matcher",
                             "set_low_quality_matches_"))

    def __init__(self, model, image_size: Tuple[int, int], max_boxes: int) -> None:
        super().__init__(model, image_size, max_boxes)
        check_loss_type(_names.MAKE_STATIC, getattr(model.head.regression_head, "_loss_type", None))

    def _losses(self, model, targets, head_outputs, anchors_one, feature_list):
        return losses(model, targets, head_outputs, anchors_one)

    def _detections(self, model, head_outputs, anchors_one, feature_list, image_sizes):
        return postprocess_detections(model, head_outputs, anchors_one,
                                      anchors_per_level(feature_list, anchors_one.shape[0]), self.image_size,
                                      image_sizes)
