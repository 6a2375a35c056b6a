"""torchvision's ``BalancedPositiveNegativeSampler``, on syncfree.

    import syncfree.compat.torchvision as sf_tv
    sf_tv.patch()           # detection models built from now on use syncfree
    model = torchvision.models.detection.fasterrcnn_resnet50_fpn(...)

or, for a model that already exists, ``sf_tv.patch(model)``. ``unpatch()``
undoes both.
"""
import contextlib
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..ops import balanced_sample

__all__ = ["BalancedPositiveNegativeSampler", "patch", "unpatch", "patched"]


class BalancedPositiveNegativeSampler:
    """Same constructor, call and quotas as torchvision's sampler.

    ``sampler(matched_idxs)`` takes a list of per-image tensors (values >= 1
    positive, 0 negative, anything else ignored; any dtype, float included, as
    torchvision's RPN passes) and returns two lists of per-image uint8 masks
    of the chosen positives and negatives. Per image: ``num_pos = min(P,
    int(batch_size_per_image * positive_fraction))`` and ``num_neg = min(Q,
    batch_size_per_image - num_pos)``: negatives fill missing positives, never
    the reverse. Chosen items are uniformly random within each class.

    Unlike torchvision's loop over images, all images are sampled by one
    batched syncfree call (rows padded to a common length with ignored
    labels) and the masks are built with static-shape scatters: no host-device
    synchronization per image. Randomness comes from the default generator of
    the labels' device (one fixed draw per call), not from ``randperm``.
    """

    #: Calls made through every instance (for tests and diagnostics).
    calls = 0

    def __init__(self, batch_size_per_image: int, positive_fraction: float) -> None:
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def __call__(self, matched_idxs: List[Tensor]) -> Tuple[List[Tensor], List[Tensor]]:
        type(self).calls += 1
        if len(matched_idxs) == 0:
            return [], []
        lengths = [int(m.numel()) for m in matched_idxs]
        # Class codes: 1 positive (>= 1), 0 negative (== 0), -1 ignored (the rest,
        # padding included), computed exactly for any dtype.
        codes = [
            torch.where(m >= 1, 1, torch.where(m == 0, 0, -1)).to(torch.int8).reshape(-1)
            for m in matched_idxs
        ]
        # Plus one extra, ignored column: never chosen, it keeps gather in
        # bounds and receives the writes of unused slots below.
        labels = torch.nn.functional.pad(
            torch.nn.utils.rnn.pad_sequence(codes, batch_first=True, padding_value=-1), (0, 1),
            value=-1)
        n = labels.shape[1] - 1
        indices, valid = balanced_sample(labels, self.batch_size_per_image, self.positive_fraction,
                                         fill_positives=False)
        is_pos = labels.gather(1, indices.clamp(min=0)) == 1
        dump = torch.full_like(indices, n)  # unused and other-class slots write to column n
        masks = []
        for chosen in (valid & is_pos, valid & ~is_pos):
            mask = torch.zeros_like(labels, dtype=torch.uint8)
            mask.scatter_(1, torch.where(chosen, indices, dump), 1)
            masks.append([mask[i, :length].reshape(m.shape)
                          for i, (length, m) in enumerate(zip(lengths, matched_idxs))])
        return masks[0], masks[1]


_original_class: Optional[type] = None


def _det_utils():
    import torchvision.models.detection._utils as det_utils

    return det_utils


def patch(model: Optional[torch.nn.Module] = None) -> Optional[torch.nn.Module]:
    """Make torchvision's detection models use syncfree's sampler.

    Replaces ``torchvision.models.detection._utils.BalancedPositiveNegativeSampler``,
    which RPN and ROI heads instantiate, so models built afterwards use
    syncfree. With ``model``, also swaps the sampler of every submodule that
    already has one (``fg_bg_sampler``), keeping its settings. Returns ``model``.
    """
    global _original_class
    det_utils = _det_utils()
    if _original_class is None:
        _original_class = det_utils.BalancedPositiveNegativeSampler
    det_utils.BalancedPositiveNegativeSampler = BalancedPositiveNegativeSampler
    if model is not None:
        for module in model.modules():
            old = getattr(module, "fg_bg_sampler", None)
            if old is not None and not isinstance(old, BalancedPositiveNegativeSampler):
                module.fg_bg_sampler = BalancedPositiveNegativeSampler(old.batch_size_per_image,
                                                                       old.positive_fraction)
    return model


def unpatch(model: Optional[torch.nn.Module] = None) -> Optional[torch.nn.Module]:
    """Undo :func:`patch` (and, with ``model``, restore torchvision's samplers in it)."""
    global _original_class
    if _original_class is not None:
        original = _original_class
        _det_utils().BalancedPositiveNegativeSampler = original
        _original_class = None
    else:
        original = _det_utils().BalancedPositiveNegativeSampler
    if model is not None:
        for module in model.modules():
            old = getattr(module, "fg_bg_sampler", None)
            if isinstance(old, BalancedPositiveNegativeSampler):
                module.fg_bg_sampler = original(old.batch_size_per_image, old.positive_fraction)
    return model


@contextlib.contextmanager
def patched(model: Optional[torch.nn.Module] = None):
    """``with patched(model): ...``: :func:`patch` on entry, :func:`unpatch` on exit."""
    patch(model)
    try:
        yield model
    finally:
        unpatch(model)
