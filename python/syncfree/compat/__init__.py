"""Drop-in replacements for the samplers of torchvision and detectron2.

- :mod:`syncfree.compat.torchvision`: ``BalancedPositiveNegativeSampler`` and
  ``patch()`` for torchvision's detection models (RPN and ROI heads).
- :mod:`syncfree.compat.detectron2`: ``subsample_labels`` with detectron2's
  semantics, and a static-shape form beside it.
"""
