"""What every static model shares, and :func:`make_static`, which picks the
static model of a torchvision detector: :class:`StaticRCNN`
(``generalized_rcnn``), :class:`StaticRetinaNet` (``retinanet``),
:class:`StaticFCOS` (``fcos``), :class:`StaticSSD` (``ssd``).

A static model holds the torchvision model's own submodules and reads every
setting from them at each call; its ``state_dict`` is the torchvision
model's. It takes a canvas batch ``[B, 3, H, W]`` (resized by the data
pipeline: :class:`~syncfree.detection.StaticCollate`), ``image_sizes [B, 2]``
and targets padded to ``max_boxes`` (:func:`~syncfree.detection.pad_targets`);
training returns torchvision's loss dict, eval fixed detection slots with a
``valid`` mask."""
import operator
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from . import _names
from .transform import normalize, zero_outside


class StaticDetector(nn.Module):
    """The part of a static model that does not depend on the detector: the
    shared submodules, one mode switch for both models, the input checks, the
    normalization and the backbone. Subclasses set ``_name`` (the prefix of
    their errors) and ``_submodules`` (the torchvision model's submodules
    they hold)."""

    _name = "syncfree.detection.StaticDetector"
    _submodules: Tuple[str, ...] = ()
    # The torchvision methods whose computation the static model repeats:
    # (the part of the model, its torchvision class, the method). A model
    # whose part overrides one computes something else: refused.
    _torchvision_methods: Tuple[Tuple[str, str, str], ...] = ()

    def __init__(self, model: nn.Module, image_size: Tuple[int, int], max_boxes: int) -> None:
        super().__init__()
        _check_methods(model, self._torchvision_methods)
        for name in self._submodules:
            setattr(self, name, getattr(model, name))
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.max_boxes = int(max_boxes)
        # The torchvision model itself, not as a submodule (the state_dict
        # stays torchvision's): train() and eval() switch its own flag too.
        self.__dict__["_torchvision_model"] = model
        self.train(model.training)

    @property
    def torchvision_model(self) -> nn.Module:
        """The torchvision model whose submodules this model holds (its
        settings, as ``score_thresh``, are read from it at each call)."""
        return self.__dict__["_torchvision_model"]

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, max_boxes={self.max_boxes}"

    def train(self, mode: bool = True) -> "StaticDetector":
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
            raise RuntimeError(f"{self._name}: the static model is in {mode} mode but the torchvision model "
                               f"it shares its modules with was switched to {other} mode since (its train() or "
                               "eval() switches the shared modules too): call static.train() or static.eval(), "
                               "which switch both")

    def _target_shapes(self, b: int, g: int) -> Dict[str, Tuple[int, ...]]:
        """The padded targets' shapes (-1: any size)."""
        return {"boxes": (b, g, 4), "labels": (b, g)}

    def _check_inputs(self, images: Tensor, targets: Optional[Dict[str, Tensor]],
                      image_sizes: Optional[Tensor]) -> None:
        name = self._name
        h, w = self.image_size
        if not isinstance(images, Tensor):
            raise TypeError(f"{name}: images must be a [B, 3, {h}, {w}] tensor (resize and stack "
                            f"them in the data pipeline), got {type(images).__name__}")
        if images.dim() != 4 or images.shape[1] != 3 or tuple(images.shape[2:]) != (h, w):
            raise ValueError(f"{name}: images must be [B, 3, {h}, {w}] (the image_size given to "
                             f"make_static), got shape {list(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"{name}: images must be floating point, got {images.dtype}")
        weight = next(self.backbone.parameters(), None)
        if weight is not None and weight.dtype != images.dtype:
            raise TypeError(f"{name}: images are {images.dtype} but the model's parameters are "
                            f"{weight.dtype}: convert the images (or the model; autocast also works)")
        if image_sizes is not None:
            b = images.shape[0]
            if not isinstance(image_sizes, Tensor):
                raise TypeError(f"{name}: image_sizes must be a [{b}, 2] int64 tensor of (height, "
                                f"width) per image, got {type(image_sizes).__name__}")
            if tuple(image_sizes.shape) != (b, 2) or image_sizes.dtype != torch.int64:
                raise ValueError(f"{name}: image_sizes must be a [{b}, 2] int64 tensor of (height, "
                                 f"width) per image, got shape {list(image_sizes.shape)} and {image_sizes.dtype}")
            if image_sizes.device != images.device:
                raise ValueError(f"{name}: image_sizes must be on the images' device ({images.device}), "
                                 f"got {image_sizes.device}")
        if self.training:
            if targets is None:
                raise ValueError(f"{name}: training needs targets: pad_targets(list_of_dicts, "
                                 f"max_boxes={self.max_boxes})")
            if not isinstance(targets, dict):
                raise TypeError(f"{name}: targets must be a dict of padded tensors (from "
                                f"pad_targets), got {type(targets).__name__}")
            expected = self._target_shapes(images.shape[0], self.max_boxes)
            for key, shape in expected.items():
                wanted = "[" + ", ".join(str(s) if s >= 0 else "K" for s in shape) + "]"  # -1: any size
                if key not in targets:
                    raise ValueError(f"{name}: targets has no '{key}' (expected {wanted})")
                got = tuple(targets[key].shape)
                if len(got) != len(shape) or any(s >= 0 and s != v for s, v in zip(shape, got)):
                    raise ValueError(f"{name}: targets['{key}'] must be {wanted}, got {list(got)}")
            for key in ("boxes", "keypoints"):
                if key in expected and not targets[key].is_floating_point():
                    raise TypeError(f"{name}: targets['{key}'] must be floating point, got "
                                    f"{targets[key].dtype}")

    def _features(self, images: Tensor, image_sizes: Optional[Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        """torchvision's transform (normalization, zeros outside each image)
        and the backbone: ``(normalized images, features)``."""
        x = normalize(self.transform, images)
        if image_sizes is not None:
            x = zero_outside(x, image_sizes)
        features = self.backbone(x)
        if isinstance(features, Tensor):
            features = {"0": features}
        return x, features


class StaticOneStage(StaticDetector):
    """What the one-stage static models (RetinaNet, FCOS, SSD) share: the
    backbone, the head over every level, the anchors of one image, then the
    losses or the detections, which each subclass computes (``_anchors``,
    ``_losses``, ``_detections``)."""

    _submodules = ("transform", "backbone", "anchor_generator", "head")

    def forward(self, images: Tensor, targets: Optional[Dict[str, Tensor]] = None, *,
                image_sizes: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """``image_sizes [B, 2]`` (int64, on the images' device): each image's
        (height, width) in the top-left corner of the canvas, for the zeros
        beyond it and the clipping of the detections; omitted: every image
        fills the canvas (SSD, which resizes every image to the canvas)."""
        self._check_modes()
        self._check_inputs(images, targets, image_sizes)
        x, features = self._features(images, image_sizes)
        feature_list = list(features.values())
        head_outputs = self.head(feature_list)
        anchors_one = self._anchors(x, feature_list)
        model = self.torchvision_model
        if self.training:
            assert targets is not None
            return self._losses(model, targets, head_outputs, anchors_one, feature_list)
        return self._detections(model, head_outputs, anchors_one, feature_list, image_sizes)

    def _anchors(self, images: Tensor, feature_list: List[Tensor]) -> Tensor:
        """The anchors of one image of the canvas, ``[A, 4]``."""
        return anchors(self.anchor_generator, images, feature_list, self.image_size)

    def _losses(self, model: nn.Module, targets: Dict[str, Tensor], head_outputs: Dict[str, Tensor],
                anchors_one: Tensor, feature_list: List[Tensor]) -> Dict[str, Tensor]:
        raise NotImplementedError

    def _detections(self, model: nn.Module, head_outputs: Dict[str, Tensor], anchors_one: Tensor,
                    feature_list: List[Tensor], image_sizes: Optional[Tensor]) -> Dict[str, Tensor]:
        raise NotImplementedError


def _check_methods(model: nn.Module, methods: Tuple[Tuple[str, str, str], ...]) -> None:
    """Refuses a model whose part overrides a torchvision method that the
    static model computes in its own way (its losses or post-processing
    would not be the model's)."""
    import importlib

    for path, cls_path, method in methods:
        part = model
        for attr in filter(None, path.split(".")):
            part = getattr(part, attr, None)
        module_name, cls_name = cls_path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module_name), cls_name)
        if getattr(type(part), method, None) is not getattr(cls, method):
            where = f"model.{path}" if path else "model"
            raise NotImplementedError(
                f"{_names.MAKE_STATIC}: {where} ({type(part).__name__}) does not use torchvision's "
                f"{cls_name}.{method}: the static model computes torchvision's {method}, not this model's")


def topk_setting(name: str, value) -> int:
    """A model's ``topk_candidates`` read at a call: >= 0 (torchvision's
    ``topk`` fails on a negative one; with 0 it keeps no candidate, and so
    no detection: the static models give only invalid slots)."""
    try:
        if isinstance(value, (bool, Tensor)):
            raise TypeError
        value = operator.index(value)  # Python and NumPy integers
    except TypeError:
        raise TypeError(f"{name}: the model's topk_candidates must be an int, got {value!r}") from None
    if value < 0:
        raise ValueError(f"{name}: the model's topk_candidates must be >= 0, got {value}")
    return value


def top_candidates(scores: Tensor, score_thresh: float, topk: int) -> Tuple[Tensor, Tensor, Tensor]:
    """torchvision's candidates along the last dimension: the scores above
    ``score_thresh``, their best ``topk`` (a ``topk_setting``), as fixed
    slots ``(score, index, valid)`` of ``min(max(topk, 1), size)`` each; a
    slot is valid when its score is above the threshold (the others hold
    -inf). With ``topk`` 0 torchvision keeps no candidate: one invalid
    slot."""
    scores = torch.where(scores > score_thresh, scores, torch.full_like(scores, float("-inf")))
    top, idx = scores.topk(min(max(topk, 1), scores.shape[-1]), dim=-1)
    valid = top > score_thresh if topk > 0 else torch.zeros_like(top, dtype=torch.bool)
    return top, idx, valid


def anchors(generator, images: Tensor, feature_list: List[Tensor], image_size: Tuple[int, int]) -> Tensor:
    """The anchors of one image of ``image_size`` from torchvision's
    ``AnchorGenerator``: ``[A, 4]``, the same for every image of the batch
    (torchvision gives each image the anchors of the padded batch)."""
    from torchvision.models.detection.image_list import ImageList

    return generator(ImageList(images[:1], [image_size]), feature_list)[0]


def make_static(model: nn.Module, image_size: Tuple[int, int], max_boxes: int) -> StaticDetector:
    """A torchvision detector whose step has static shapes end to end.

    ``model``: a torchvision ``FasterRCNN``, ``MaskRCNN``, ``KeypointRCNN``
    (:class:`StaticRCNN`), ``RetinaNet`` (:class:`StaticRetinaNet`), ``FCOS``
    (:class:`StaticFCOS`) or ``SSD`` (SSD300 and SSDlite: :class:`StaticSSD`),
    with any backbone, and torchvision's heads or heads derived from them
    that keep their loss and post-processing methods. The returned model holds ``model``'s own
    submodules (its parameters are ``model``'s, not copies, and its
    ``state_dict`` is ``model``'s: a torchvision checkpoint loads into it
    unchanged) and reads every setting from them at each call.

    - ``image_size=(H, W)``: every batch is a ``[B, 3, H, W]`` float tensor
      (the canvas), H and W multiples of the model's ``size_divisible`` (32;
      SSD: 1). The model normalizes the images (``transform.image_mean``/
      ``image_std``) but does not resize them: resizing is the data
      pipeline's job (:class:`StaticCollate` resizes as torchvision's
      transform does and pads into the canvas); ``image_sizes=`` (a keyword
      of the forward, ``[B, 2]`` int64) gives each image's size in the
      canvas. SSD resizes every image to its ``fixed_size``: the canvas is
      that size.
    - ``max_boxes=G``: ground truth comes padded to G boxes per image, from
      :func:`pad_targets`: ``boxes [B, G, 4]``, ``labels [B, G]`` (negative
      labels mark padding), for Mask R-CNN ``masks [B, G, H, W]``, for
      Keypoint R-CNN ``keypoints [B, G, K, 3]``.

    Training: ``model(images, padded_targets)`` returns torchvision's loss
    dict (same keys, same formulas and normalization). Eval: ``model(images)``
    returns ``boxes [B, D, 4]``, ``scores [B, D]``, ``labels [B, D]``,
    ``valid [B, D]``, D = the model's ``detections_per_img`` (Mask R-CNN and
    Keypoint R-CNN add their entries: see :meth:`StaticRCNN.forward`);
    :func:`postprocess` maps them to the original image sizes and
    :func:`to_torchvision` converts them to torchvision's list of dicts.
    docs/detection.md is the guide: what changes inside each model, and
    what is not covered (torchvision's checks of degenerate target boxes,
    which read values on the host: :func:`pad_targets` makes them).
    """
    from torchvision.models.detection.fcos import FCOS
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
    from torchvision.models.detection.retinanet import RetinaNet
    from torchvision.models.detection.roi_heads import RoIHeads
    from torchvision.models.detection.rpn import RegionProposalNetwork
    from torchvision.models.detection.ssd import SSD

    name = _names.MAKE_STATIC
    if isinstance(model, GeneralizedRCNN):
        for part, part_cls in (("rpn", RegionProposalNetwork), ("roi_heads", RoIHeads)):
            if not isinstance(getattr(model, part, None), part_cls):
                raise TypeError(f"{name}: model.{part} must be a torchvision {part_cls.__name__} (the static "
                                f"model repeats its computation), got {type(getattr(model, part, None)).__name__}")
        from .generalized_rcnn import StaticRCNN as cls
    elif isinstance(model, RetinaNet):
        from .retinanet import StaticRetinaNet as cls
    elif isinstance(model, FCOS):
        from .fcos import StaticFCOS as cls
    elif isinstance(model, SSD):
        from .ssd import StaticSSD as cls
    else:
        raise TypeError(f"{name}: model must be a torchvision FasterRCNN, MaskRCNN, KeypointRCNN, RetinaNet, FCOS "
                        f"or SSD, got {type(model).__name__}")
    if (not isinstance(image_size, (tuple, list)) or len(image_size) != 2
            or any(isinstance(s, bool) or not isinstance(s, int) for s in image_size)):
        raise TypeError(f"{name}: image_size must be a pair of ints (H, W), got {image_size!r}")
    divisible = int(getattr(model.transform, "size_divisible", 32))
    fixed = getattr(model.transform, "fixed_size", None)
    if fixed is not None:
        # Every image is resized to fixed_size (W, H), then the batch padded
        # to size_divisible: that padded size is the canvas.
        h, w = (-(-int(s) // divisible) * divisible for s in (fixed[1], fixed[0]))
        if tuple(image_size) != (h, w):
            padded = "" if (h, w) == (int(fixed[1]), int(fixed[0])) else \
                f", padded to {h}x{w} (its size_divisible, {divisible})"
            raise ValueError(f"{name}: this model resizes every image to {int(fixed[1])}x{int(fixed[0])} (its "
                             f"transform's fixed_size){padded}: image_size must be ({h}, {w}), got "
                             f"{tuple(image_size)}")
    if any(s <= 0 or s % divisible for s in image_size):
        raise ValueError(f"{name}: image_size must be positive multiples of {divisible} (the "
                         f"model's size_divisible: torchvision would pad to it), got {tuple(image_size)}")
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, int):
        raise TypeError(f"{name}: max_boxes must be an int, got {type(max_boxes).__name__}")
    if max_boxes < 1:
        raise ValueError(f"{name}: max_boxes must be >= 1, got {max_boxes}")
    return cls(model, tuple(image_size), max_boxes)
