"""Static-shape detection: torchvision's Faster R-CNN, Mask R-CNN, Keypoint
R-CNN, RetinaNet, FCOS, SSD and SSDlite with a training and inference step
of fixed shapes (one graph under
``torch.compile``, no host-device synchronization), equal to torchvision's
on the valid part.

    from syncfree.detection import make_static, pad_targets, to_torchvision
    static = make_static(model, image_size=(512, 512), max_boxes=32)
    losses = static(images, pad_targets(targets, 32))        # training
    detections = to_torchvision(static.eval()(images))       # eval

The modules are named after torchvision's, to be read beside them:

- ``boxes``: IoU, the box coder's encode and decode (``torchvision.ops.boxes``,
  ``detection._utils.BoxCoder``);
- ``matching``: the matcher and the sampler (``detection._utils``);
- ``poolers``: multi-level RoI Align (``torchvision.ops.poolers``);
- ``rpn``: the region proposal network's steps (``detection.rpn``);
- ``roi_heads``: training samples, losses, post-processing, mask pasting,
  heatmaps to keypoints (``detection.roi_heads``);
- ``transform``: resizing into a canvas (:class:`StaticCollate`), target
  padding, normalization, the output at the original sizes and as
  torchvision's (``detection.transform``);
- ``generalized_rcnn``: the two-stage model (``detection.generalized_rcnn``);
- ``retinanet``, ``fcos``, ``ssd``: the one-stage models, their matching,
  losses and post-processing (``detection.retinanet``, ``.fcos``, ``.ssd``);
- ``static``: what the static models share, and :func:`make_static`.

docs/detection.md is the guide.
"""
from .fcos import StaticFCOS
from .generalized_rcnn import StaticRCNN
from .retinanet import StaticRetinaNet
from .ssd import StaticSSD
from .static import make_static
from .transform import StaticCollate, pad_targets, postprocess, to_torchvision

__all__ = ["make_static", "pad_targets", "to_torchvision", "StaticRCNN", "StaticRetinaNet", "StaticFCOS", "StaticSSD",
           "StaticCollate", "postprocess"]
