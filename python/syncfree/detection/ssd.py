"""torchvision's SSD (``torchvision.models.detection.ssd``: SSD300 and, with
its own backbone and head, SSDlite) with a static step: :class:`StaticSSD`.

- Default boxes: torchvision's ``DefaultBoxGenerator`` grid bit for bit,
  made on the device (torchvision makes it on the host and copies it at
  every call) and scaled to the canvas with Python numbers (its ``forward`` makes a tensor
  from a Python list on the device at every call).
- Matching: torchvision's ``SSDMatcher`` with padded ground truth: the
  ``Matcher`` (one threshold), then each ground-truth box's best default box
  forced to it (of two boxes with the same best default box, the later one,
  as torchvision's CPU indexing leaves it).
- Losses: smooth L1 over the foreground and the cross-entropy with hard
  negative mining (``neg_to_pos_ratio`` negatives per positive per image)
  as sorts and masks, the same operations as torchvision's, divided by the
  batch's number of foreground boxes as a tensor clamped at 1.
- Detection: per class, the score threshold as a mask and
  ``min(topk_candidates, default boxes)`` candidates, NMS per class merged by
  rank into ``detections_per_img`` slots (:func:`~.boxes.nms_rows`).
"""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import matching
from ._names import STATIC_SSD as _STATIC_SSD
from .boxes import box_iou, clip_boxes, decode, encode, gather_rows, nms_rows
from .static import StaticOneStage, top_candidates, topk_setting


def wh_pairs(generator) -> List[List[float]]:
    """The generator's width-height pairs, per level, as Python numbers
    (``[w0, h0, w1, h1, ...]``): its ``_wh_pairs``, which torchvision fixes
    when it builds the generator (read once, by the static model's
    constructor: they are host tensors)."""
    return [[float(v) for v in pairs.reshape(-1).tolist()] for pairs in generator._wh_pairs]


def default_boxes(generator, feature_list: List[Tensor], image_size: Tuple[int, int],
                  wh: List[List[float]]) -> Tensor:
    """torchvision's ``DefaultBoxGenerator.forward`` for one image of the
    canvas ``image_size``: ``[A, 4]`` (x1, y1, x2, y2), bit for bit.
    ``wh``: :func:`wh_pairs` of the generator.

    torchvision computes the grid on the host at every call and copies it to
    the device (a copy from pageable memory, which a CUDA graph cannot
    capture); here every tensor is made on the features' device from Python
    numbers (fills, ``arange``), with torchvision's operations and dtypes
    (the width-height pairs in float32, as its ``_wh_pairs``). The
    grid's one division, of ``i + 0.5`` by the level's size, is computed in
    float64 and rounded to the default dtype torchvision computes it in:
    float32's correctly rounded quotient whatever the division's own
    rounding (inductor on a GPU multiplies by the reciprocal instead), with
    torch's default dtype float32. Unverified on a GPU; there, inductor may
    also merge the float32 and bfloat16 conversions of bfloat16 features
    (autocast) into one, which rounds otherwise."""
    dtype, device = feature_list[0].dtype, feature_list[0].device
    work = torch.get_default_dtype()  # torchvision's arange + 0.5 is in it
    levels = []
    for k, feature in enumerate(feature_list):
        fh, fw = int(feature.shape[-2]), int(feature.shape[-1])
        if generator.steps is not None:
            x_f, y_f = image_size[1] / generator.steps[k], image_size[0] / generator.steps[k]
        else:
            y_f, x_f = fh, fw
        shifts = []
        for n, size in ((fw, x_f), (fh, y_f)):
            divisor = torch.full((), size, dtype=work, device=device).to(torch.float64)  # as torchvision rounds it
            steps = torch.arange(0, n, dtype=torch.float64, device=device) + 0.5
            shifts.append((steps / divisor).to(work).to(dtype))
        shift_y, shift_x = torch.meshgrid(shifts[1], shifts[0], indexing="ij")
        shift_x, shift_y = shift_x.reshape(-1), shift_y.reshape(-1)
        pairs = torch.stack([torch.full((), v, dtype=torch.float32, device=device) for v in wh[k]]).view(-1, 2)
        shifts_xy = torch.stack((shift_x, shift_y) * pairs.shape[0], dim=-1).reshape(-1, 2)
        if generator.clip:
            pairs = pairs.clamp(min=0, max=1)
        levels.append(torch.cat((shifts_xy, pairs.repeat(fh * fw, 1)), dim=1))
    grid = torch.cat(levels, dim=0)
    height, width = float(image_size[0]), float(image_size[1])
    low = grid[:, :2] - 0.5 * grid[:, 2:]
    high = grid[:, :2] + 0.5 * grid[:, 2:]
    return torch.stack((low[:, 0] * width, low[:, 1] * height, high[:, 0] * width, high[:, 1] * height), dim=1)


def match(matcher, anchors_one: Tensor, targets: Dict[str, Tensor]) -> Tensor:
    """torchvision's ``SSDMatcher`` on each image's ground truth and default
    boxes: ``[B, A]`` ground-truth indices, -1 background."""
    gt_boxes = targets["boxes"]
    gt_valid = targets["labels"] >= 0
    iou = box_iou(gt_boxes, anchors_one.to(gt_boxes.dtype))  # [B, G, A]
    matches = matching.match(iou, gt_valid, matcher)
    b, g, a = iou.shape
    # Each ground-truth box's best default box is its match: torchvision's
    # matches[best] = arange(G), where a later box overwrites an earlier one
    # (scatter_reduce's amax keeps the later one on every device).
    best = iou.max(dim=2).indices  # [B, G]
    target = torch.where(gt_valid, best, torch.full_like(best, a))  # padding: a column of its own
    boxes = torch.arange(g, device=iou.device).expand(b, g)
    forced = torch.full((b, a + 1), -1, dtype=torch.int64, device=iou.device).scatter_reduce(
        1, target, boxes, reduce="amax")[:, :a]
    return torch.where(forced >= 0, forced, matches)


def losses(model, targets: Dict[str, Tensor], head_outputs: Dict[str, Tensor], anchors_one: Tensor) -> Dict[str, Tensor]:
    """torchvision's ``SSD.compute_loss``: ``{"bbox_regression",
    "classification"}``."""
    regression, cls_logits = head_outputs["bbox_regression"], head_outputs["cls_logits"]
    b, a = regression.shape[:2]
    matches = match(model.proposal_matcher, anchors_one, targets)
    foreground = matches >= 0
    index = matches.clamp(min=0)
    num_foreground = foreground.sum().clamp(min=1)  # torchvision's max(1, num_foreground)

    # Regression: the foreground (the others get their own default box as
    # target: a finite loss and gradient under the mask).
    anchors_b = anchors_one.expand(b, a, 4)
    matched = torch.where(foreground[..., None], gather_rows(targets["boxes"], index), anchors_b)
    target = encode(model.box_coder, matched.reshape(-1, 4), anchors_b.reshape(-1, 4)).view(b, a, 4)
    box = F.smooth_l1_loss(regression, target, reduction="none")
    bbox_loss = torch.where(foreground[..., None], box, torch.zeros_like(box)).sum()

    # Classification with hard negative mining, torchvision's operations.
    cls_targets = torch.where(foreground, targets["labels"].gather(1, index), torch.zeros_like(index))
    num_classes = cls_logits.size(-1)
    cls_loss = F.cross_entropy(cls_logits.view(-1, num_classes), cls_targets.view(-1),
                               reduction="none").view(cls_targets.size())
    foreground_idxs = cls_targets > 0
    num_negative = model.neg_to_pos_ratio * foreground_idxs.sum(1, keepdim=True)
    negative_loss = cls_loss.detach().masked_fill(foreground_idxs, -float("inf"))
    _, idx = negative_loss.sort(1, descending=True)
    background_idxs = idx.sort(1)[1] < num_negative
    zero = torch.zeros_like(cls_loss)
    classification = (torch.where(foreground_idxs, cls_loss, zero).sum()
                      + torch.where(background_idxs, cls_loss, zero).sum())
    return {"bbox_regression": bbox_loss / num_foreground, "classification": classification / num_foreground}


def postprocess_detections(model, head_outputs: Dict[str, Tensor], anchors_one: Tensor,
                           image_size: Tuple[int, int], image_sizes: Optional[Tensor]) -> Dict[str, Tensor]:
    """torchvision's ``SSD.postprocess_detections``: ``boxes [B, D, 4]``,
    ``scores``, ``labels``, ``valid [B, D]``, D = ``detections_per_img``."""
    regression = head_outputs["bbox_regression"]
    b, a = regression.shape[:2]
    pred_scores = F.softmax(head_outputs["cls_logits"], dim=-1)
    num_classes = pred_scores.size(-1)
    boxes = decode(model.box_coder, regression.reshape(-1, 4), anchors_one.expand(b, a, 4).reshape(-1, 4))
    boxes = clip_boxes(boxes.view(b, a, 4), image_size, image_sizes)
    # Per class (1 to C - 1, class-major as torchvision's concatenation):
    # the scores above the threshold, their best topk_candidates.
    scores = pred_scores[..., 1:].transpose(1, 2)  # [B, C - 1, A]
    topk = topk_setting(_STATIC_SSD, model.topk_candidates)  # 0: no candidate, one invalid slot per class
    score, idx, valid = top_candidates(scores, model.score_thresh, topk)  # [B, C - 1, k]
    k = idx.shape[2]
    candidate_boxes = gather_rows(boxes, idx.reshape(b, -1)).view(b, num_classes - 1, k, 4)
    n = (num_classes - 1) * k
    candidate = torch.arange(n, device=idx.device).view(num_classes - 1, k)  # class-major
    slots = int(model.detections_per_img)
    kept, ok = nms_rows(candidate_boxes, score, valid, candidate, n, float(model.nms_thresh), slots)
    index = kept.clamp(min=0)
    labels = torch.div(index, k, rounding_mode="floor") + 1
    out_boxes = gather_rows(candidate_boxes.reshape(b, n, 4), index)
    return {"boxes": torch.where(ok[..., None], out_boxes, torch.zeros_like(out_boxes)),
            "scores": torch.where(ok, score.reshape(b, n).gather(1, index), torch.zeros_like(ok, dtype=score.dtype)),
            "labels": torch.where(ok, labels, torch.zeros_like(labels)),
            "valid": ok}


class StaticSSD(StaticOneStage):
    """A torchvision ``SSD`` (``ssd300_vgg16``, ``ssdlite320_mobilenet_v3_large``,
    or any backbone with its head) with a static-shape step: see
    :func:`make_static`. Its canvas is the transform's ``fixed_size`` (SSD
    resizes every image to it).

    Training: ``model(images, padded_targets)`` returns torchvision's
    ``{"bbox_regression", "classification"}``. Eval: ``model(images)``
    returns ``boxes [B, D, 4]``, ``scores [B, D]``, ``labels [B, D]``,
    ``valid [B, D]``, D = ``detections_per_img`` (invalid slots zeros)."""

    _name = _STATIC_SSD
    _torchvision_methods = (("", "torchvision.models.detection.ssd.SSD", "compute_loss"),
                            ("", "torchvision.models.detection.ssd.SSD", "postprocess_detections"),
                            ("proposal_matcher", "torchvision.models.detection._utils.SSDMatcher", "__call__"),
                            ("anchor_generator", "torchvision.models.detection.anchor_utils.DefaultBoxGenerator",
                             "forward"),
                            ("anchor_generator", "torchvision.models.detection.anchor_utils.DefaultBoxGenerator",
                             "_grid_default_boxes"),
                            ("proposal_matcher", "torchvision.models.detection._utils.Matcher",
                             "set_low_quality_matches_"))

    def __init__(self, model, image_size: Tuple[int, int], max_boxes: int) -> None:
        super().__init__(model, image_size, max_boxes)
        self._wh = wh_pairs(self.anchor_generator)

    def _anchors(self, images, feature_list):
        return default_boxes(self.anchor_generator, feature_list, self.image_size, self._wh)

    def _losses(self, model, targets, head_outputs, anchors_one, feature_list):
        return losses(model, targets, head_outputs, anchors_one)

    def _detections(self, model, head_outputs, anchors_one, feature_list, image_sizes):
        return postprocess_detections(model, head_outputs, anchors_one, self.image_size, image_sizes)
