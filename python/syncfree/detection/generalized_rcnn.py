"""The static model: torchvision's ``GeneralizedRCNN``
(``torchvision.models.detection.generalized_rcnn``) for Faster R-CNN, Mask
R-CNN and Keypoint R-CNN, with a step whose every tensor has a shape fixed by the model's
settings, the batch size, the image size and ``max_boxes``.

The data-dependent selections of torchvision's code (``torch.where(mask)``,
boolean indexing, per-image loops over lists of different lengths,
``.item()``) become masks, fixed numbers of slots with a validity flag, and
syncfree's static operators (``nms``, ``balanced_sample``, ``compact``).
Where the static step and torchvision's compute the same quantity, they
compute it with the same operations in the same order, so that on the valid
part the values are torchvision's.

The static model holds torchvision's own submodules (``backbone``, ``rpn``,
``roi_heads``, ``transform``) and reads every setting from them at each call
(thresholds, numbers of proposals, the samplers' batch sizes and fractions,
the box coders' weights, the poolers' sizes): one source of truth, and the
same ``state_dict`` as the torchvision model.
"""
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from . import roi_heads, rpn
from ._names import MAKE_STATIC as _MAKE_STATIC
from ._names import STATIC_MODEL as _STATIC_MODEL
from .transform import normalize, zero_outside


def _num_keypoints(heads) -> int:
    """K, the keypoint predictor's number of heatmaps (torchvision's
    ``KeypointRCNNPredictor``); -1 where it cannot be read from the module."""
    layer = getattr(heads.keypoint_predictor, "kps_score_lowres", None)
    return int(layer.out_channels) if layer is not None else -1


class StaticRCNN(nn.Module):
    """A torchvision Faster R-CNN, Mask R-CNN or Keypoint R-CNN with a static-shape step (see
    :func:`make_static`): torchvision's ``GeneralizedRCNN``, its submodules
    shared."""

    def __init__(self, model: nn.Module, image_size: Tuple[int, int], max_boxes: int) -> None:
        super().__init__()
        self.transform = model.transform
        self.backbone = model.backbone
        self.rpn = model.rpn
        self.roi_heads = model.roi_heads
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.max_boxes = int(max_boxes)
        # The torchvision model itself, not as a submodule (the state_dict
        # stays torchvision's): train() and eval() switch its own flag too.
        self.__dict__["_torchvision_model"] = model
        self.train(model.training)

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, max_boxes={self.max_boxes}"

    def train(self, mode: bool = True) -> "StaticRCNN":
        """Sets the mode of this model, of the submodules it shares with the
        torchvision model and of the torchvision model itself: one switch
        for both (a torchvision model left in training mode asserts for
        targets)."""
        super().train(mode)
        self.__dict__["_torchvision_model"].training = mode
        return self

    def _check_modes(self) -> None:
        """This model's mode is the torchvision model's: a forward after one of
        them was switched alone (``static.eval()`` then ``model.train()``)
        would mix evaluation and batch statistics silently. (Submodules may
        differ on purpose, as a frozen backbone's ``eval()``.)"""
        tv_training = self.__dict__["_torchvision_model"].training
        if tv_training != self.training:
            mode = "training" if self.training else "eval"
            other = "training" if tv_training else "eval"
            raise RuntimeError(f"{_STATIC_MODEL}: the static model is in {mode} mode but the torchvision model "
                               f"it shares its modules with was switched to {other} mode since (its train() or "
                               "eval() switches the shared modules too): call static.train() or static.eval(), "
                               "which switch both")

    @property
    def has_mask(self) -> bool:
        return bool(self.roi_heads.has_mask())

    @property
    def has_keypoint(self) -> bool:
        return bool(self.roi_heads.has_keypoint())

    # ---- inputs

    def _check_inputs(self, images: Tensor, targets: Optional[Dict[str, Tensor]],
                      image_sizes: Optional[Tensor]) -> None:
        h, w = self.image_size
        if not isinstance(images, Tensor):
            raise TypeError(f"{_STATIC_MODEL}: images must be a [B, 3, {h}, {w}] tensor (resize and stack "
                            f"them in the data pipeline), got {type(images).__name__}")
        if images.dim() != 4 or images.shape[1] != 3 or tuple(images.shape[2:]) != (h, w):
            raise ValueError(f"{_STATIC_MODEL}: images must be [B, 3, {h}, {w}] (the image_size given to "
                             f"make_static), got shape {list(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"{_STATIC_MODEL}: images must be floating point, got {images.dtype}")
        weight = next(self.backbone.parameters(), None)
        if weight is not None and weight.dtype != images.dtype:
            raise TypeError(f"{_STATIC_MODEL}: images are {images.dtype} but the model's parameters are "
                            f"{weight.dtype}: convert the images (or the model; autocast also works)")
        if image_sizes is not None:
            b = images.shape[0]
            if not isinstance(image_sizes, Tensor):
                raise TypeError(f"{_STATIC_MODEL}: image_sizes must be a [{b}, 2] int64 tensor of (height, "
                                f"width) per image, got {type(image_sizes).__name__}")
            if tuple(image_sizes.shape) != (b, 2) or image_sizes.dtype != torch.int64:
                raise ValueError(f"{_STATIC_MODEL}: image_sizes must be a [{b}, 2] int64 tensor of (height, "
                                 f"width) per image, got shape {list(image_sizes.shape)} and {image_sizes.dtype}")
            if image_sizes.device != images.device:
                raise ValueError(f"{_STATIC_MODEL}: image_sizes must be on the images' device ({images.device}), "
                                 f"got {image_sizes.device}")
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
            if self.has_keypoint:
                expected["keypoints"] = (b, g, _num_keypoints(self.roi_heads), 3)
            for key, shape in expected.items():
                wanted = "[" + ", ".join(str(s) if s >= 0 else "K" for s in shape) + "]"  # -1: any size
                if key not in targets:
                    raise ValueError(f"{_STATIC_MODEL}: targets has no '{key}' (expected {wanted})")
                got = tuple(targets[key].shape)
                if len(got) != len(shape) or any(s >= 0 and s != v for s, v in zip(shape, got)):
                    raise ValueError(f"{_STATIC_MODEL}: targets['{key}'] must be {wanted}, got {list(got)}")
            for key in ("boxes", "keypoints"):
                if key in expected and not targets[key].is_floating_point():
                    raise TypeError(f"{_STATIC_MODEL}: targets['{key}'] must be floating point, got "
                                    f"{targets[key].dtype}")

    # ---- the step

    def forward(self, images: Tensor, targets: Optional[Dict[str, Tensor]] = None, *,
                image_sizes: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """Training: ``model(images, padded_targets)`` returns torchvision's loss
        dict. Eval: ``model(images)`` returns ``boxes [B, D, 4]``, ``scores [B,
        D]``, ``labels [B, D]``, ``valid [B, D]``, D =
        ``roi_heads.detections_per_img``; Mask R-CNN adds ``masks [B, D, 1,
        H, W]`` (pasted into the canvas) and ``mask_probs [B, D, 1, M, M]``
        (for :func:`postprocess`), Keypoint R-CNN ``keypoints [B, D, K, 3]``
        and ``keypoints_scores [B, D, K]``. Invalid slots are zeros.

        ``image_sizes [B, 2]`` (int64, on the images' device): the (height,
        width) of each image in the top-left corner of the canvas, as
        torchvision's ``ImageList.image_sizes``; the canvas outside it is zero
        after normalization (torchvision's padding), and proposals and
        detections are clipped to it. Omitted: every image fills the canvas.
        Its values are not read on the host (no synchronization): sizes
        larger than the canvas clip nothing more than the canvas would."""
        self._check_modes()
        self._check_inputs(images, targets, image_sizes)
        x = normalize(self.transform, images)
        if image_sizes is not None:
            x = zero_outside(x, image_sizes)
        features = self.backbone(x)
        if isinstance(features, Tensor):
            features = {"0": features}
        proposals, proposal_valid, rpn_losses = rpn.forward(self.rpn, x, features, self.image_size, image_sizes,
                                                            targets, self.training)
        if self.training:
            assert targets is not None
            losses = roi_heads.losses(self.roi_heads, features, proposals, proposal_valid, targets,
                                      self.image_size)
            losses.update(rpn_losses)
            return losses
        return roi_heads.detect(self.roi_heads, features, proposals, proposal_valid, self.image_size, image_sizes)


def make_static(model: nn.Module, image_size: Tuple[int, int], max_boxes: int) -> StaticRCNN:
    """A torchvision Faster R-CNN, Mask R-CNN or Keypoint R-CNN whose step has static shapes end to end.

    ``model`` is a torchvision ``FasterRCNN``, ``MaskRCNN`` or ``KeypointRCNN``
    (any backbone: ``fasterrcnn_resnet50_fpn``, ``_v2``,
    ``fasterrcnn_mobilenet_v3_large_fpn``, ``maskrcnn_resnet50_fpn``,
    ``keypointrcnn_resnet50_fpn``, ...). The returned :class:`StaticRCNN` holds
    ``model``'s own submodules (its parameters are ``model``'s, not copies,
    and its ``state_dict`` is ``model``'s: a torchvision checkpoint loads into
    it unchanged) and reads every setting from them at each call.

    - ``image_size=(H, W)``: every batch is a ``[B, 3, H, W]`` float tensor
      (the canvas), H and W multiples of the model's ``size_divisible``
      (32). The model normalizes the images (``transform.image_mean``/
      ``image_std``) but does not resize them: resizing is the data
      pipeline's job (:class:`StaticCollate` resizes as torchvision's
      transform does and pads into the canvas); ``image_sizes=`` (a keyword
      of the forward, ``[B, 2]`` int64) gives each image's size in the
      canvas.
    - ``max_boxes=G``: ground truth comes padded to G boxes per image, from
      :func:`pad_targets`: ``boxes [B, G, 4]``, ``labels [B, G]`` (negative
      labels mark padding), for Mask R-CNN ``masks [B, G, H, W]``, for
      Keypoint R-CNN ``keypoints [B, G, K, 3]``.

    Training: ``model(images, padded_targets)`` returns torchvision's loss
    dict (same keys, same formulas and normalization). Eval: ``model(images)``
    returns ``boxes [B, D, 4]``, ``scores [B, D]``, ``labels [B, D]``,
    ``valid [B, D]``, D = ``roi_heads.detections_per_img`` (Mask R-CNN adds
    ``masks`` and ``mask_probs``, Keypoint R-CNN ``keypoints`` and
    ``keypoints_scores``: see :meth:`StaticRCNN.forward`);
    :func:`postprocess` maps them to the original image sizes and
    :func:`to_torchvision` converts them to torchvision's list of dicts.

    What changes inside, torchvision's results kept on the valid part:
    proposals are ``rpn.post_nms_top_n()`` slots per image with a valid mask
    (small boxes and low scores masked, ``syncfree.nms`` per level); matching
    keeps the low-quality-match rule without ``torch.where``; both heads
    sample with ``syncfree.balanced_sample`` (torchvision's quota rule,
    ``batch_size_per_image`` slots per image); multi-level RoI pooling pools
    every RoI at every level and selects its level on the device; batch norm
    in a head sees only the valid RoIs in training; the mask head gets
    ``int(batch_size_per_image * positive_fraction)`` positive slots per
    image, and so does the keypoint head; detection is ``syncfree.nms`` per
    class into D slots; each detection's keypoint heatmaps are resized on a
    grid of the canvas's size and the argmax taken over the box's part. Not
    covered: torchvision's checks of degenerate target boxes (they read
    values on the host). docs/detection.md is the guide.
    """
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
    from torchvision.models.detection.roi_heads import RoIHeads
    from torchvision.models.detection.rpn import RegionProposalNetwork

    if not isinstance(model, GeneralizedRCNN) or not isinstance(getattr(model, "rpn", None),
                                                                RegionProposalNetwork) \
            or not isinstance(getattr(model, "roi_heads", None), RoIHeads):
        raise TypeError(f"{_MAKE_STATIC}: model must be a torchvision FasterRCNN, MaskRCNN or KeypointRCNN, "
                        f"got {type(model).__name__}")
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
