"""What torchvision's ``GeneralizedRCNNTransform``
(``torchvision.models.detection.transform``) does around the model, in static
form. In the data pipeline (it reads sizes and counts on the host):
:class:`StaticCollate` resizes each image and its targets by torchvision's
rule and pads them into a canvas, :func:`pad_targets` pads the targets to a
fixed number of boxes. In the model: the normalization and the zero padding
outside each image. After the step: :func:`postprocess` maps the detections
to the original image sizes and :func:`to_torchvision` makes torchvision's
list of per-image dicts."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ._names import PAD_TARGETS as _PAD_TARGETS
from ._names import POSTPROCESS as _POSTPROCESS
from ._names import STATIC_COLLATE as _STATIC_COLLATE
from ._names import TO_TORCHVISION as _TO_TORCHVISION


def normalize(transform, images: Tensor) -> Tensor:
    """torchvision's ``transform.normalize``, channel by channel with the mean and
    standard deviation as Python floats (``normalize`` copies them to the device on
    every call)."""
    mean = [float(v) for v in transform.image_mean]
    std = [float(v) for v in transform.image_std]
    return torch.stack([(images[:, c] - mean[c]) / std[c] for c in range(images.shape[1])], dim=1)


def zero_outside(images: Tensor, image_sizes: Tensor) -> Tensor:
    """``images [B, C, H, W]`` with zeros outside each image's ``(height,
    width)`` in the top-left corner (``image_sizes [B, 2]``): torchvision's
    ``batch_images`` pads the normalized images with zeros."""
    rows = torch.arange(images.shape[-2], device=images.device)
    cols = torch.arange(images.shape[-1], device=images.device)
    inside = ((rows[None, :, None] < image_sizes[:, 0, None, None])
              & (cols[None, None, :] < image_sizes[:, 1, None, None]))
    return torch.where(inside[:, None], images, torch.zeros_like(images))


def pad_targets(targets: Sequence[Dict[str, Tensor]], max_boxes: int) -> Dict[str, Tensor]:
    """torchvision-style targets (a list of per-image dicts with ``boxes [G_i,
    4]``, ``labels [G_i]``, for Mask R-CNN ``masks [G_i, H, W]``, for
    Keypoint R-CNN ``keypoints [G_i, K, 3]``) as one dict of padded tensors:
    ``boxes [B, max_boxes, 4]`` (padding: zeros), ``labels [B, max_boxes]``
    (int64; padding: -1), ``masks [B, max_boxes, H, W]`` (padding: zeros)
    when every image has masks, ``keypoints [B, max_boxes, K, 3]`` (padding:
    zeros, i.e. invisible) when every image has keypoints.

    This runs in the data pipeline (it reads each image's number of boxes on
    the host); the static model's step takes its output. Errors: an image
    with more than ``max_boxes`` boxes, negative labels (they would read as
    padding), a box with a non-finite coordinate or with ``x2 <= x1`` or
    ``y2 <= y1`` (torchvision's models refuse it too), missing keys or
    mismatched shapes."""
    return _pad_targets(targets, max_boxes, _PAD_TARGETS, lambda i: f"targets[{i}]")


def _pad_targets(targets: Sequence[Dict[str, Tensor]], max_boxes: int, caller: str, item) -> Dict[str, Tensor]:
    """pad_targets, its errors starting with ``caller`` and naming each target ``item(i)``."""
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, int):
        raise TypeError(f"{caller}: max_boxes must be an int, got {type(max_boxes).__name__}")
    if max_boxes < 1:
        raise ValueError(f"{caller}: max_boxes must be >= 1, got {max_boxes}")
    if isinstance(targets, dict) or len(targets) == 0:
        raise ValueError(f"{caller}: targets must be a non-empty list of per-image dicts "
                         f"(torchvision's format), got {type(targets).__name__} of length {len(targets)}")
    first = targets[0]
    if not isinstance(first, dict) or "boxes" not in first or "labels" not in first:
        raise ValueError(f"{caller}: each target must be a dict with 'boxes' and 'labels'")
    for key in ("masks", "keypoints"):  # an image without them would silently train without them
        have = [i for i, t in enumerate(targets) if isinstance(t, dict) and key in t]
        lack = [i for i, t in enumerate(targets) if isinstance(t, dict) and key not in t]
        if have and lack:
            raise ValueError(f"{caller}: {item(have[0])} has '{key}' but {item(lack[0])} has none: every "
                             f"image's target needs '{key}', or none")
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
            raise ValueError(f"{caller}: {item(0)}['masks'] must be [G, H, W], got shape {list(m0.shape)}")
        masks = torch.zeros((b, max_boxes) + tuple(m0.shape[1:]), dtype=m0.dtype, device=device)
    keypoints = None
    if all("keypoints" in t for t in targets):
        k0 = first["keypoints"]
        if k0.dim() != 3 or k0.shape[-1] != 3 or not k0.is_floating_point():
            raise ValueError(f"{caller}: {item(0)}['keypoints'] must be a float [G, K, 3] tensor of (x, y, "
                             f"visibility), got {k0.dtype} of shape {list(k0.shape)}")
        keypoints = torch.zeros((b, max_boxes) + tuple(k0.shape[1:]), dtype=k0.dtype, device=device)
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or "boxes" not in t or "labels" not in t:
            raise ValueError(f"{caller}: {item(i)} must be a dict with 'boxes' and 'labels'")
        tb, tl = t["boxes"], t["labels"]
        if tb.dim() != 2 or tb.shape[-1] != 4:
            raise ValueError(f"{caller}: {item(i)}['boxes'] must be [G, 4], got shape {list(tb.shape)}")
        g = tb.shape[0]
        if tl.shape != (g,):
            raise ValueError(f"{caller}: {item(i)}['labels'] must be [{g}] (one per box), "
                             f"got shape {list(tl.shape)}")
        if g > max_boxes:
            raise ValueError(f"{caller}: {item(i)} has {g} boxes, more than max_boxes={max_boxes}")
        if g and bool((tl < 0).any()):
            raise ValueError(f"{caller}: {item(i)}['labels'] has negative labels; "
                             "negative labels mark padding")
        if g:  # torchvision's degenerate-box check, where reading values costs nothing
            bad = ~torch.isfinite(tb).all(1) | (tb[:, 2] <= tb[:, 0]) | (tb[:, 3] <= tb[:, 1])
            if bool(bad.any()):
                j = int(torch.argmax(bad.to(torch.uint8)))
                raise ValueError(f"{caller}: {item(i)}['boxes'][{j}] = {tb[j].tolist()} is not a box with finite "
                                 "coordinates and positive width and height (x1 < x2, y1 < y2); torchvision's "
                                 "detection models refuse it too (such a box makes the losses NaN)")
        boxes[i, :g] = tb.to(device=device, dtype=dtype)
        labels[i, :g] = tl.to(device=device, dtype=torch.int64)
        if masks is not None:
            tm = t["masks"]
            if tm.shape[0] != g or tuple(tm.shape[1:]) != tuple(masks.shape[2:]):
                raise ValueError(f"{caller}: {item(i)}['masks'] must be [{g}, "
                                 f"{masks.shape[2]}, {masks.shape[3]}], got shape {list(tm.shape)}")
            masks[i, :g] = tm.to(device=device, dtype=masks.dtype)
        if keypoints is not None:
            tk = t["keypoints"]
            if tuple(tk.shape) != (g,) + tuple(keypoints.shape[2:]) or not tk.is_floating_point():
                raise ValueError(f"{caller}: {item(i)}['keypoints'] must be a float [{g}, {keypoints.shape[2]}, 3] "
                                 f"tensor, got {tk.dtype} of shape {list(tk.shape)}")
            keypoints[i, :g] = tk.to(device=device, dtype=keypoints.dtype)
    out = {"boxes": boxes, "labels": labels}
    if masks is not None:
        out["masks"] = masks
    if keypoints is not None:
        out["keypoints"] = keypoints
    return out


def to_torchvision(output: Dict[str, Tensor], image_sizes: Optional[Tensor] = None) -> List[Dict[str, Tensor]]:
    """The static model's detections (``boxes [B, D, 4]``, ``scores``,
    ``labels``, ``valid [B, D]``, and the other per-slot entries: ``masks
    [B, D, 1, H, W]``, ``keypoints``...) as torchvision's list of per-image
    dicts, the valid slots only (in order). ``image_sizes [B, 2]`` (height,
    width; optional) crops each image's masks to its size, as torchvision's
    masks are: give :func:`postprocess`'s ``original_image_sizes`` (or the
    model's ``image_sizes`` for masks in the canvas). ``mask_probs`` is left
    out (torchvision's output has no such entry). Reads the valid flags and
    the sizes on the host: call it outside the step."""
    if not isinstance(output, dict) or "valid" not in output:
        raise ValueError(f"{_TO_TORCHVISION}: output must be the static model's detection dict "
                         "(boxes, scores, labels, valid)")
    valid = output["valid"]
    if image_sizes is not None and (not isinstance(image_sizes, Tensor)
                                    or tuple(image_sizes.shape) != (valid.shape[0], 2)
                                    or image_sizes.is_floating_point() or image_sizes.is_complex()):
        got = (f"{image_sizes.dtype} of shape {list(image_sizes.shape)}" if isinstance(image_sizes, Tensor)
               else type(image_sizes).__name__)
        raise ValueError(f"{_TO_TORCHVISION}: image_sizes must be a [{valid.shape[0]}, 2] integer tensor of "
                         f"(height, width), got {got}")
    sizes = image_sizes.tolist() if image_sizes is not None else None
    result = []
    for i in range(valid.shape[0]):
        keep = valid[i]
        # mask_probs: the static model's own entry for postprocess, not torchvision's.
        image = {k: v[i][keep] for k, v in output.items() if k not in ("valid", "mask_probs")}
        if sizes is not None and "masks" in image:
            h, w = sizes[i]
            image["masks"] = image["masks"][..., :h, :w]
        result.append(image)
    return result


def postprocess(output: Dict[str, Tensor], image_sizes: Tensor, original_image_sizes: Tensor,
                original_canvas: Optional[Tuple[int, int]] = None) -> Dict[str, Tensor]:
    """torchvision's ``transform.postprocess``: the static model's detections
    (in the coordinates of the resized images in the canvas) mapped to each
    image's original size. ``image_sizes`` and ``original_image_sizes`` are
    ``[B, 2]`` (height, width), as :class:`StaticCollate` returns them.

    - ``boxes [B, D, 4]`` and ``keypoints [B, D, K, 3]`` are scaled by the
      ratios of the sizes, as torchvision's ``resize_boxes`` and
      ``resize_keypoints`` scale them (float32 ratios).
    - Mask R-CNN: the mask head's probabilities (``mask_probs [B, D, 1, M,
      M]``) are pasted with the scaled boxes into ``masks [B, D, 1, H0,
      W0]``, as torchvision's ``paste_masks_in_image`` pastes them into each
      original image, zero beyond it; ``mask_probs`` is dropped. ``(H0, W0)``
      is ``original_canvas``, or when it is omitted the largest original
      height and width in the batch (read on the host: give
      ``original_canvas`` for static shapes).

    The other entries are unchanged. Runs outside the step or inside it (no
    host reads when ``original_canvas`` is given)."""
    if not isinstance(output, dict) or "boxes" not in output:
        got = sorted(output) if isinstance(output, dict) else type(output).__name__
        raise ValueError(f"{_POSTPROCESS}: output must be the static model's detection dict (boxes, scores, "
                         f"labels, valid...), got {got}")
    boxes = output["boxes"]
    b = boxes.shape[0]
    for name, sizes in (("image_sizes", image_sizes), ("original_image_sizes", original_image_sizes)):
        if not isinstance(sizes, Tensor) or tuple(sizes.shape) != (b, 2):
            raise ValueError(f"{_POSTPROCESS}: {name} must be a [{b}, 2] tensor of (height, width), got "
                             f"{list(sizes.shape) if isinstance(sizes, Tensor) else type(sizes).__name__}")
    if original_canvas is not None:
        if (not isinstance(original_canvas, (tuple, list)) or len(original_canvas) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in original_canvas)):
            raise ValueError(f"{_POSTPROCESS}: original_canvas must be a pair of positive ints (H0, W0), got "
                             f"{original_canvas!r}")
        if original_image_sizes.device.type == "cpu":  # checked where it costs no synchronization
            largest = original_image_sizes.max(dim=0).values.tolist()
            if largest[0] > original_canvas[0] or largest[1] > original_canvas[1]:
                raise ValueError(f"{_POSTPROCESS}: original_canvas {tuple(original_canvas)} is smaller than the "
                                 f"largest original image ({largest[0]}x{largest[1]}): its masks would be cropped")
    if "masks" in output and "mask_probs" not in output:
        raise ValueError(f"{_POSTPROCESS}: output has masks but no mask_probs (the static model's eval output "
                         "has both)")
    # torchvision: float32 ratios of 0-dim tensors, which take the boxes' dtype in the product.
    ratios = original_image_sizes.to(device=boxes.device, dtype=torch.float32) / image_sizes.to(
        device=boxes.device, dtype=torch.float32)  # [B, 2]
    ratio_height = ratios[:, 0, None]
    ratio_width = ratios[:, 1, None]
    result = dict(output)
    rh, rw = ratio_height.to(boxes.dtype), ratio_width.to(boxes.dtype)
    xmin, ymin, xmax, ymax = boxes.unbind(-1)
    result["boxes"] = torch.stack((xmin * rw, ymin * rh, xmax * rw, ymax * rh), dim=-1)
    if "keypoints" in output:
        keypoints = output["keypoints"]
        kh, kw = ratio_height.to(keypoints.dtype)[..., None], ratio_width.to(keypoints.dtype)[..., None]
        result["keypoints"] = torch.stack((keypoints[..., 0] * kw, keypoints[..., 1] * kh, keypoints[..., 2]),
                                          dim=-1)
    if "mask_probs" in output:
        from .roi_heads import paste_masks

        probs = result.pop("mask_probs")
        if original_canvas is None:
            original_canvas = (int(original_image_sizes[:, 0].max()), int(original_image_sizes[:, 1].max()))
        d = probs.shape[1]
        flat_probs = probs.reshape((b * d,) + tuple(probs.shape[2:]))
        flat_boxes = result["boxes"].reshape(-1, 4)
        # A few masks at a time: pasting holds several [N, H0, W0] temporaries.
        chunk = 16
        masks = torch.cat([paste_masks(flat_probs[i:i + chunk], flat_boxes[i:i + chunk], tuple(original_canvas))
                           for i in range(0, b * d, chunk)])
        masks = zero_outside(masks.reshape((b, d) + tuple(masks.shape[2:])), original_image_sizes.to(masks.device))
        result["masks"] = masks.reshape((b, d, 1) + tuple(masks.shape[-2:]))
    return result


class StaticCollate:
    """A ``DataLoader`` ``collate_fn`` for the static model: torchvision's
    per-image resize and padding, with static shapes out.

        collate = StaticCollate(canvas=(800, 1344), max_boxes=100, min_size=800, max_size=1333)
        collate = StaticCollate.from_model(model, canvas=(800, 1344), max_boxes=100)
        loader = DataLoader(dataset, batch_size=4, collate_fn=collate, num_workers=4)
        for batch in loader:
            losses = static(batch["images"], batch["targets"], image_sizes=batch["image_sizes"])

    ``batch`` is a list of ``(image, target)`` pairs (``image [3, h, w]``
    float, ``target`` torchvision's dict: ``boxes [G, 4]``, ``labels [G]``,
    ``masks [G, h, w]``, ``keypoints [G, K, 3]``; or ``None``, for
    evaluation). A target with neither ``boxes`` nor ``labels`` is an image
    without objects (torchvision's COCO wrapper gives such images a dict
    with ``image_id`` alone). Each image and its targets are resized with
    torchvision's own function and rule (the scale ``min(min_size / min(h,
    w), max_size / max(h, w))``, bilinear interpolation, boxes and
    keypoints scaled, masks nearest), as
    ``GeneralizedRCNNTransform`` resizes them in evaluation (in training it
    draws ``min_size`` from its tuple; give one ``min_size`` per collate, and
    one static model per canvas, for multi-scale training). ``fixed_size``
    is the transform's own (a pair ``(width, height)``, as torchvision's
    SSD300 and SSDlite hold it): every image is resized to that size,
    whatever ``min_size`` and ``max_size`` say, and the canvas must hold it
    (SSD's canvas is that size). The resized image is placed in the top-left
    corner of a zero canvas ``[3, H, W]``.

    Returns a dict: ``images [B, 3, H, W]``, ``targets`` (:func:`pad_targets`'
    dict, masks in the canvas) when targets are given, ``image_sizes [B, 2]``
    (the resized sizes, int64: the model's ``image_sizes``),
    ``original_image_sizes [B, 2]`` (for :func:`postprocess`) and, when
    every target has an ``image_id``, ``image_ids`` (a list, for COCO
    results). Like torchvision's model, it keeps crowd annotations and
    boxes of zero width or height: filter them in the data set, as
    torchvision's reference scripts do.

    Errors name the image (its position in the batch, and its
    ``image_id`` when the target has one): one whose resized size does not fit the canvas,
    more than ``max_boxes`` boxes, a label outside ``[1, num_classes)`` when
    ``num_classes`` is given (the model's number of classes, background
    included; with ``background=False``, for the models whose label 0 is a
    class, RetinaNet's and FCOS's sigmoid heads: outside ``[0,
    num_classes)``), a target with masks (or keypoints) beside one without. A mask target is
    padded beyond the image by one copy of its last row and column:
    torchvision's RoI Align over the unpadded mask repeats the last row and
    column for samples in the image's last pixel, and over the copy RoI
    Align reads the same values (up to float rounding); a sample beyond the
    image (a ground-truth box that extends past it) reads the copy where
    torchvision reads zero."""

    def __init__(self, canvas: Tuple[int, int], max_boxes: int, min_size: int = 800, max_size: int = 1333,
                 num_classes: Optional[int] = None, fixed_size: Optional[Tuple[int, int]] = None,
                 background: bool = True) -> None:
        if (not isinstance(canvas, (tuple, list)) or len(canvas) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in canvas)):
            raise ValueError(f"{_STATIC_COLLATE}: canvas must be a pair of positive ints (H, W), got {canvas!r}")
        for name, value in (("max_boxes", max_boxes), ("min_size", min_size), ("max_size", max_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{_STATIC_COLLATE}: {name} must be a positive int, got {value!r}")
        if not isinstance(background, bool):
            raise ValueError(f"{_STATIC_COLLATE}: background must be a bool (whether label 0 is the background), "
                             f"got {background!r}")
        least = 2 if background else 1
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < least):
            what = "background included" if background else "label 0 a class: background=False"
            raise ValueError(f"{_STATIC_COLLATE}: num_classes must be an int >= {least} ({what}) or "
                             f"None, got {num_classes!r}")
        if fixed_size is not None:
            if (not isinstance(fixed_size, (tuple, list)) or len(fixed_size) != 2
                    or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in fixed_size)):
                raise ValueError(f"{_STATIC_COLLATE}: fixed_size must be a pair of positive ints (width, height), "
                                 f"as torchvision's transform holds it, or None, got {fixed_size!r}")
            if fixed_size[1] > canvas[0] or fixed_size[0] > canvas[1]:
                raise ValueError(f"{_STATIC_COLLATE}: fixed_size (width, height) = {tuple(fixed_size)} resizes "
                                 f"every image to {fixed_size[1]}x{fixed_size[0]}, which does not fit the canvas "
                                 f"{canvas[0]}x{canvas[1]}")
        self.canvas = (int(canvas[0]), int(canvas[1]))
        self.max_boxes = int(max_boxes)
        self.min_size = int(min_size)
        self.max_size = int(max_size)
        self.num_classes = num_classes
        self.background = background
        self.fixed_size = None if fixed_size is None else (int(fixed_size[0]), int(fixed_size[1]))

    @classmethod
    def from_model(cls, model, canvas: Tuple[int, int], max_boxes: int) -> "StaticCollate":
        """The collate of a torchvision detection model (or its static
        version): its transform's evaluation size (``min_size[-1]``,
        ``max_size``, ``fixed_size``: SSD300's and SSDlite's) and its number
        of classes (the R-CNNs' box predictor's, the one-stage models'
        classification head's; RetinaNet's and FCOS's label 0 is a class:
        ``background=False``)."""
        transform = model.transform
        if getattr(transform, "_skip_resize", False):
            raise ValueError(f"{_STATIC_COLLATE}: the model's transform resizes nothing (_skip_resize): build "
                             "StaticCollate(canvas, max_boxes, min_size, max_size) for what it should do")
        num_classes = None
        predictor = getattr(getattr(model, "roi_heads", None), "box_predictor", None)
        background = True
        classifier = getattr(getattr(model, "head", None), "classification_head", None)
        if predictor is not None and hasattr(predictor, "cls_score"):
            num_classes = int(predictor.cls_score.out_features)
        elif hasattr(classifier, "num_classes"):  # RetinaNet, FCOS: a sigmoid per class, label 0 one of them
            num_classes, background = int(classifier.num_classes), False
        elif hasattr(classifier, "num_columns"):  # SSD: a softmax whose column 0 is the background
            num_classes = int(classifier.num_columns)
        fixed = getattr(transform, "fixed_size", None)
        return cls(canvas, max_boxes, int(transform.min_size[-1]), int(transform.max_size), num_classes,
                   None if fixed is None else (int(fixed[0]), int(fixed[1])), background)

    def __repr__(self) -> str:
        fixed = "" if self.fixed_size is None else f", fixed_size={self.fixed_size}"
        fixed += "" if self.background else ", background=False"
        return (f"StaticCollate(canvas={self.canvas}, max_boxes={self.max_boxes}, min_size={self.min_size}, "
                f"max_size={self.max_size}, num_classes={self.num_classes}{fixed})")

    def __call__(self, batch: Sequence[Any]) -> Dict[str, Any]:
        from torchvision.models.detection.transform import (_resize_image_and_masks, resize_boxes,
                                                             resize_keypoints)

        if len(batch) == 0:
            raise ValueError(f"{_STATIC_COLLATE}: the batch is empty")
        height, width = self.canvas
        items = [(item[0], item[1]) if isinstance(item, (tuple, list)) and len(item) == 2 else (item, None)
                 for item in batch]

        def name(i: int) -> str:  # the position in the batch, and the data set's id when the target has one
            target = items[i][1]
            if isinstance(target, dict) and "image_id" in target:
                return f"image {i} (image_id {_plain(target['image_id'])})"
            return f"image {i}"

        for i, (image, target) in enumerate(items):
            if not isinstance(image, Tensor) or image.dim() != 3 or image.shape[0] != 3 \
                    or not image.is_floating_point():
                raise ValueError(f"{_STATIC_COLLATE}: {name(i)} must be a float [3, h, w] tensor (items: images "
                                 f"or (image, target) pairs), got {type(image).__name__} "
                                 f"{list(getattr(image, 'shape', []))} {getattr(image, 'dtype', '')}")
            if target is not None and (not isinstance(target, dict) or ("boxes" in target) != ("labels" in target)):
                got = sorted(target) if isinstance(target, dict) else type(target).__name__
                raise ValueError(f"{_STATIC_COLLATE}: {name(i)}'s target must be a dict with 'boxes' and "
                                 f"'labels' (torchvision's format; neither: no objects), got {got}")
        first = items[0][0]
        images = torch.zeros((len(batch), 3, height, width), dtype=first.dtype, device=first.device)
        sizes, originals, targets = [], [], []
        with_objects = [t for _, t in items if t is not None and "boxes" in t]
        extras = [key for key in ("masks", "keypoints") if with_objects and key in with_objects[0]]
        for i, (image, target) in enumerate(items):
            if image.dtype != first.dtype or image.device != first.device:
                raise ValueError(f"{_STATIC_COLLATE}: {name(i)} is {image.dtype} on {image.device}, image 0 "
                                 f"{first.dtype} on {first.device}")
            original = (int(image.shape[-2]), int(image.shape[-1]))
            if target is not None:
                target = {k: v.to(image.device) if isinstance(v, Tensor) else v for k, v in target.items()}
                if "boxes" not in target:  # an image without objects (torchvision's COCO wrapper's target)
                    target.update(_no_objects(with_objects, original, image))
                for key in ("masks", "keypoints"):
                    if (key in target) != (key in extras):
                        raise ValueError(f"{_STATIC_COLLATE}: {name(i)}'s target "
                                         f"{'has' if key in target else 'has no'} {key}, image 0's "
                                         f"{'has' if key in extras else 'has no'}")
            resized, target = _resize_image_and_masks(image, self.min_size, self.max_size, target,
                                                      self.fixed_size)
            h, w = int(resized.shape[-2]), int(resized.shape[-1])
            if h > height or w > width:
                raise ValueError(f"{_STATIC_COLLATE}: {name(i)} ({original[0]}x{original[1]}) is resized to "
                                 f"{h}x{w}, which does not fit the canvas {height}x{width}")
            images[i, :, :h, :w] = resized
            sizes.append((h, w))
            originals.append(original)
            if target is not None:
                target["boxes"] = resize_boxes(target["boxes"], list(original), [h, w])
                if "keypoints" in target:
                    target["keypoints"] = resize_keypoints(target["keypoints"], list(original), [h, w])
                if self.num_classes is not None:
                    labels = target["labels"]
                    lowest = 1 if self.background else 0
                    bad = (labels < lowest) | (labels >= self.num_classes)
                    if bool(bad.any()):
                        j = int(bad.nonzero()[0, 0])
                        why = "the model's classes; 0 is the background" if self.background else "the model's classes"
                        raise ValueError(f"{_STATIC_COLLATE}: {name(i)}, box {j}: label {int(labels[j])} is "
                                         f"outside [{lowest}, {self.num_classes}) ({why})")
                if "masks" in target:
                    target["masks"] = _pad_mask(target["masks"], self.canvas)
                targets.append(target)
        out: Dict[str, Any] = {
            "images": images,
            "image_sizes": torch.tensor(sizes, dtype=torch.int64, device=first.device),
            "original_image_sizes": torch.tensor(originals, dtype=torch.int64, device=first.device),
        }
        if targets:
            if len(targets) != len(batch):
                raise ValueError(f"{_STATIC_COLLATE}: some images have targets and some do not")
            out["targets"] = _pad_targets(targets, self.max_boxes, _STATIC_COLLATE, name)
        if all(t is not None and "image_id" in t for _, t in items):
            out["image_ids"] = [_plain(t["image_id"]) for _, t in items]
        return out


def _plain(value: Any) -> Any:
    """A one-element tensor as a Python number (image ids), anything else as it is."""
    return value.item() if isinstance(value, Tensor) and value.numel() == 1 else value


def _no_objects(with_objects: List[Dict[str, Tensor]], size: Tuple[int, int], image: Tensor) -> Dict[str, Tensor]:
    """The target entries of an image without objects: no boxes, no labels,
    and no masks or keypoints where the batch's other targets have them."""
    out = {"boxes": torch.zeros((0, 4), dtype=image.dtype, device=image.device),
           "labels": torch.zeros((0,), dtype=torch.int64, device=image.device)}
    if with_objects and "masks" in with_objects[0]:
        out["masks"] = torch.zeros((0,) + tuple(size), dtype=with_objects[0]["masks"].dtype, device=image.device)
    if with_objects and "keypoints" in with_objects[0]:
        kp = with_objects[0]["keypoints"]
        out["keypoints"] = torch.zeros((0,) + tuple(kp.shape[1:]), dtype=kp.dtype, device=image.device)
    return out


def _pad_mask(masks: Tensor, canvas: Tuple[int, int]) -> Tensor:
    """``masks [G, h, w]`` in the top-left corner of a zero ``[G, H, W]``, with
    one copy of the last row below and of the last column to the right (where
    the canvas has room)."""
    g, h, w = masks.shape
    out = torch.zeros((g,) + tuple(canvas), dtype=masks.dtype, device=masks.device)
    out[:, :h, :w] = masks
    if h < canvas[0]:
        out[:, h, :w] = masks[:, h - 1, :]
    if w < canvas[1]:
        out[:, :h, w] = masks[:, :, w - 1]
    if h < canvas[0] and w < canvas[1]:
        out[:, h, w] = masks[:, h - 1, w - 1]
    return out
