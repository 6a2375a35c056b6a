"""detectron2's ``subsample_labels``, on syncfree; detectron2 need not be installed.

    from syncfree.compat.detectron2 import subsample_labels, subsample_labels_static

Both functions are TorchScript-compatible, as detectron2's own is.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..ops import balanced_sample

__all__ = ["subsample_labels", "subsample_labels_static"]


def subsample_labels_static(
    labels: Tensor,
    num_samples: int,
    positive_fraction: float,
    bg_label: int,
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Static-shape form of :func:`subsample_labels`: no host-device sync.

    Args:
        labels: ``[..., N]`` integer tensor: -1 ignored, ``bg_label`` negative,
            any other value positive (detectron2's rule).
        num_samples, positive_fraction, bg_label: as in detectron2.
        seed, generator: as in :func:`syncfree.balanced_sample`.

    Returns:
        ``(indices, is_positive, valid)``, each ``[..., num_samples]``: the
        chosen indices (-1 in unused slots), whether each slot holds a
        positive, and whether it is used.
    """
    positive = (labels != -1) & (labels != bg_label)
    codes = torch.where(positive, 1, torch.where(labels == bg_label, 0, -1)).to(torch.int8)
    indices, valid = balanced_sample(codes, num_samples, positive_fraction, fill_positives=False,
                                     seed=seed, generator=generator)
    if codes.shape[-1] == 0:  # no labels: every slot is unused
        return indices, torch.zeros_like(valid), valid
    is_positive = (codes.gather(-1, indices.clamp(min=0)) == 1) & valid
    return indices, is_positive, valid


def subsample_labels(
    labels: Tensor, num_samples: int, positive_fraction: float, bg_label: int
) -> Tuple[Tensor, Tensor]:
    """Same semantics and return as ``detectron2.modeling.sampling.subsample_labels``.

    ``labels`` is 1-D: -1 ignored, ``bg_label`` negative, anything else
    positive. ``num_pos = min(P, int(num_samples * positive_fraction))``,
    ``num_neg = min(Q, num_samples - num_pos)``. Returns ``(pos_idx, neg_idx)``,
    1-D int64 tensors of the chosen positive and negative indices, each
    uniformly random within its class.

    Their lengths depend on the data, so building them costs one host-device
    synchronization (a boolean index), as detectron2's own function does.
    :func:`subsample_labels_static` returns padded indices and masks instead
    and never synchronizes.
    """
    indices, is_positive, valid = subsample_labels_static(labels, num_samples, positive_fraction,
                                                          bg_label)
    return indices[is_positive], indices[valid & ~is_positive]
