"""torchvision and detectron2 on syncfree: drop-in samplers and a static detector.

- :mod:`syncfree.compat.torchvision`: ``BalancedPositiveNegativeSampler`` and
  ``patch()`` for torchvision's detection models (RPN and ROI heads); and
  ``make_static()``, a Faster R-CNN or Mask R-CNN whose whole training step has
  static shapes (one graph under ``torch.compile``, no host-device
  synchronization), with ``pad_targets()`` and ``to_torchvision()`` for its
  inputs and outputs.
- :mod:`syncfree.compat.detectron2`: ``subsample_labels`` with detectron2's
  semantics, and a static-shape form beside it.
"""
