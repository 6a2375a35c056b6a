"""The region proposal network's step with static shapes: torchvision's
``RegionProposalNetwork`` (``torchvision.models.detection.rpn``), its
``forward`` split as torchvision splits it (``filter_proposals``,
``assign_targets_to_anchors``, the sampler, ``compute_loss``), over ``[B,
...]`` tensors: ``post_nms_top_n()`` proposal slots per image with a valid
mask, ground truth padded."""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import matching, static
from .boxes import box_iou, clip_boxes, decode, encode, gather_rows


def anchors(rpn, images: Tensor, feature_list: List[Tensor], image_size: Tuple[int, int]) -> Tensor:
    """The anchors of one image of ``image_size``: ``[A, 4]``, the same for
    every image of the batch (torchvision's ``anchor_generator`` gives each
    image the anchors of the padded batch)."""
    return static.anchors(rpn.anchor_generator, images, feature_list, image_size)


def filter_proposals(rpn, proposals: Tensor, objectness: Tensor, num_per_level: List[int],
                     image_size: Tuple[int, int], image_sizes: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """torchvision's ``filter_proposals``: per-level top-n, clipping (to each
    image's size), small boxes and low scores as masks, NMS per level into
    ``post_nms_top_n()`` slots. ``proposals [B, A, 4]``, ``objectness [B, A]``
    (detached) -> ``(boxes [B, P, 4], valid [B, P])``, the invalid slots'
    boxes zero."""
    from ..ops import nms

    levels = torch.cat([torch.full((n,), i, dtype=torch.int64, device=objectness.device)
                        for i, n in enumerate(num_per_level)])
    top = rpn._get_top_n_idx(objectness, num_per_level)
    scores = torch.sigmoid(objectness.gather(1, top))
    levels = levels[top]
    boxes = clip_boxes(gather_rows(proposals, top), image_size, image_sizes)
    keep = ((boxes[..., 2] - boxes[..., 0] >= rpn.min_size) & (boxes[..., 3] - boxes[..., 1] >= rpn.min_size)
            & (scores >= rpn.score_thresh))
    slots = min(int(rpn.post_nms_top_n()), top.shape[1])
    kept, kept_valid = nms(boxes, scores, float(rpn.nms_thresh), slots, idxs=levels, valid=keep)
    out = gather_rows(boxes, kept.clamp(min=0))
    out = torch.where(kept_valid[..., None], out, torch.zeros_like(out))
    return out, kept_valid


def assign_targets_to_anchors(rpn, anchors: Tensor, targets: Dict[str, Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """torchvision's ``assign_targets_to_anchors`` and the box coder's
    ``encode``: ``(labels [B, A] int8: 1 foreground, 0 background, -1
    between the thresholds, regression_targets [B, A, 4], matches [B,
    A])``."""
    gt_boxes = targets["boxes"]
    b, a = gt_boxes.shape[0], anchors.shape[0]
    # torchvision matches and encodes in the ground truth's dtype (float32 under autocast)
    anchors = anchors.to(gt_boxes.dtype)
    gt_valid = targets["labels"] >= 0
    matches = matching.match(box_iou(gt_boxes, anchors), gt_valid, rpn.proposal_matcher)
    labels = torch.where(matches >= 0, 1, torch.where(matches == -1, 0, -1)).to(torch.int8)
    matched = gather_rows(gt_boxes, matches.clamp(min=0))
    anchors_b = anchors.expand(b, a, 4)
    matched = torch.where((matches >= 0)[..., None], matched, anchors_b)
    regression_targets = encode(rpn.box_coder, matched.reshape(-1, 4), anchors_b.reshape(-1, 4)).view(b, a, 4)
    return labels, regression_targets, matches


def compute_loss(objectness: Tensor, deltas: Tensor, labels: Tensor, regression_targets: Tensor,
                 index: Tensor, valid: Tensor) -> Tuple[Tensor, Tensor]:
    """torchvision's ``compute_loss`` on the sampled slots (``index``, ``valid``
    ``[B, S]`` from the sampler), as masked reductions: ``(loss_objectness,
    loss_rpn_box_reg)``."""
    b, a = labels.shape
    index = index.clamp(min=0)
    count = valid.sum().clamp(min=1)
    sampled_labels = labels.gather(1, index)
    sampled_objectness = objectness.view(b, a).gather(1, index)
    bce = F.binary_cross_entropy_with_logits(sampled_objectness, sampled_labels.to(objectness.dtype),
                                             reduction="none")
    loss_objectness = torch.where(valid, bce, torch.zeros_like(bce)).sum() / count
    positive = valid & (sampled_labels == 1)
    box = F.smooth_l1_loss(gather_rows(deltas.view(b, a, 4), index),
                           gather_rows(regression_targets, index), beta=1 / 9, reduction="none")
    loss_box = torch.where(positive[..., None], box, torch.zeros_like(box)).sum() / count
    return loss_objectness, loss_box


def forward(rpn, images: Tensor, features: Dict[str, Tensor], image_size: Tuple[int, int],
            image_sizes: Optional[Tensor], targets: Optional[Dict[str, Tensor]],
            training: bool) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
    """torchvision's ``RegionProposalNetwork.forward``: ``(proposals [B, P, 4],
    valid [B, P], losses)`` (losses only when ``training``)."""
    from torchvision.models.detection.rpn import concat_box_prediction_layers

    b = images.shape[0]
    feature_list = list(features.values())
    objectness, deltas = rpn.head(feature_list)
    anchors_one = anchors(rpn, images, feature_list, image_size)  # [A, 4], the same for every image
    num_per_level = [o.shape[1] * o.shape[2] * o.shape[3] for o in objectness]
    objectness, deltas = concat_box_prediction_layers(objectness, deltas)
    a = anchors_one.shape[0]
    proposals = decode(rpn.box_coder, deltas.detach(), anchors_one.repeat(b, 1)).view(b, a, 4)
    boxes, valid = filter_proposals(rpn, proposals, objectness.detach().reshape(b, a), num_per_level, image_size,
                                    image_sizes)

    losses: Dict[str, Tensor] = {}
    if training:
        assert targets is not None
        labels, regression_targets, _ = assign_targets_to_anchors(rpn, anchors_one, targets)
        index, sampled = matching.sample(labels, rpn.fg_bg_sampler)
        loss_objectness, loss_box = compute_loss(objectness, deltas, labels, regression_targets, index, sampled)
        losses = {"loss_objectness": loss_objectness, "loss_rpn_box_reg": loss_box}
    return boxes, valid, losses
