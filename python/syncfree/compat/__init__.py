"""torchvision and detectron2 on syncfree: drop-in samplers.

- :mod:`syncfree.compat.torchvision`: ``BalancedPositiveNegativeSampler`` and
  ``patch()`` for torchvision's detection models (RPN and ROI heads); it
  re-exports :mod:`syncfree.detection`'s ``make_static()``, ``pad_targets()``
  and ``to_torchvision()``.
- :mod:`syncfree.compat.detectron2`: ``subsample_labels`` with detectron2's
  semantics, and a static-shape form beside it.
"""
