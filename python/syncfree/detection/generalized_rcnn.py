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

from torch import Tensor

from . import roi_heads, rpn
from ._names import STATIC_MODEL as _STATIC_MODEL
from .static import StaticDetector, make_static  # noqa: F401 (make_static: its former home)


def _num_keypoints(heads) -> int:
    """K, the keypoint predictor's number of heatmaps (torchvision's
    ``KeypointRCNNPredictor``); -1 where it cannot be read from the module."""
    layer = getattr(heads.keypoint_predictor, "kps_score_lowres", None)
    return int(layer.out_channels) if layer is not None else -1


class StaticRCNN(StaticDetector):
    """A torchvision Faster R-CNN, Mask R-CNN or Keypoint R-CNN with a static-shape step (see
    :func:`make_static`): torchvision's ``GeneralizedRCNN``, its submodules
    shared.

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

    _name = _STATIC_MODEL
    _submodules = ("transform", "backbone", "rpn", "roi_heads")
    _torchvision_methods = tuple((f"{part}.proposal_matcher", "torchvision.models.detection._utils.Matcher", method)
                                 for part in ("rpn", "roi_heads") for method in ("__call__", "set_low_quality_matches_"))

    @property
    def has_mask(self) -> bool:
        return bool(self.roi_heads.has_mask())

    @property
    def has_keypoint(self) -> bool:
        return bool(self.roi_heads.has_keypoint())

    def _target_shapes(self, b: int, g: int) -> Dict[str, Tuple[int, ...]]:
        shapes = super()._target_shapes(b, g)
        if self.has_mask:
            shapes["masks"] = (b, g) + self.image_size
        if self.has_keypoint:
            shapes["keypoints"] = (b, g, _num_keypoints(self.roi_heads), 3)
        return shapes

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
        x, features = self._features(images, image_sizes)
        proposals, proposal_valid, rpn_losses = rpn.forward(self.rpn, x, features, self.image_size, image_sizes,
                                                            targets, self.training)
        if self.training:
            assert targets is not None
            losses = roi_heads.losses(self.roi_heads, features, proposals, proposal_valid, targets,
                                      self.image_size)
            losses.update(rpn_losses)
            return losses
        return roi_heads.detect(self.roi_heads, features, proposals, proposal_valid, self.image_size, image_sizes)
