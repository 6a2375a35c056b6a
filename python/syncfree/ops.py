"""Typed Python wrappers over ``torch.ops.syncfree``.

The wrappers are TorchScript-compatible: ``torch.jit.script`` compiles a
function that calls them (keyword arguments included), and a scripted call
returns what the eager call returns for the same arguments and generator state.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor


def _check_python_types(op: str, tensors, fill_positives) -> None:
    # The schema accepts None for a bool and an undefined tensor for a Tensor;
    # name the argument instead of failing later or guessing.
    for name, value in tensors:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"syncfree.{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if not isinstance(fill_positives, bool):
        raise TypeError(f"syncfree.{op}: fill_positives must be a bool, got {type(fill_positives).__name__}")


def balanced_sample(
    labels: Tensor,
    num_samples: int,
    positive_fraction: float = 0.5,
    negative_label: int = 0,
    fill_positives: bool = True,
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    """Choose ``num_samples`` items per row, balanced between positives and negatives.

    Static shapes, no host-device synchronization, any number of leading (batch)
    dimensions. Every argument may be given by position, in the order below,
    or by keyword; the function can be called from TorchScript.

    Args:
        labels: ``[..., N]`` bool or integer tensor. Per element: ``< 0`` is
            ignored, ``== negative_label`` is a negative, anything else a
            positive (bool: ``True`` positive, ``False`` negative).
        num_samples: K >= 0, the number of output slots per row.
        positive_fraction: in [0, 1]; the positive target is
            ``floor(K * positive_fraction)``.
        negative_label: label value of negatives (>= 0); 0 for torchvision,
            ``num_classes`` for detectron2's ROI heads. Unused for bool labels.
        fill_positives: with P positives and Q negatives,
            ``num_pos = min(P, target)``, ``num_neg = min(Q, K - num_pos)``; if
            True, positives then also fill what negatives leave:
            ``num_pos = min(P, K - num_neg)``. False is torchvision's and
            detectron2's rule.
        seed: fixed seed; the result is then identical on every device and
            for any batching of the same rows. Excludes ``generator``.
        generator: generator to draw from when ``seed`` is None (default: the
            default generator of ``labels``' device). Each call advances it by
            a fixed amount.

    Returns:
        ``(indices, valid)``, both ``[..., K]``. ``indices`` (int64) holds, in
        slots ``[0, num_pos + num_neg)``, a uniformly random subset of
        ``num_pos`` positives and of ``num_neg`` negatives in uniformly random
        order; the remaining slots hold -1. ``valid`` (bool) marks the filled
        slots. No index appears twice in a row.
    """
    if not torch.jit.is_scripting():  # TorchScript checks the types itself
        _check_python_types("balanced_sample", [("labels", labels)], fill_positives)
    return torch.ops.syncfree.balanced_sample(
        labels,
        num_samples,
        positive_fraction,
        negative_label=negative_label,
        fill_positives=fill_positives,
        seed=seed,
        generator=generator,
    )


def balanced_sample_gather(
    features: Tensor,
    labels: Tensor,
    num_samples: int,
    positive_fraction: float = 0.5,
    negative_label: int = 0,
    fill_positives: bool = True,
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`balanced_sample`, then gather the features and labels of the sample.

    Arguments by position (in the order below) or by keyword; callable from
    TorchScript.

    Args:
        features: ``[..., N, *F]`` tensor whose leading dimensions equal
            ``labels.shape``; any dtype, on the same device as ``labels``.
        labels, num_samples, positive_fraction, negative_label,
        fill_positives, seed, generator: as in :func:`balanced_sample`.

    Returns:
        ``(sampled_features [..., K, *F], sampled_labels [..., K],
        valid [..., K])``. ``sampled_labels`` is int64. Invalid slots hold zero
        features and label -1. Gradients flow to ``features``.
    """
    if not torch.jit.is_scripting():
        _check_python_types("balanced_sample_gather", [("features", features), ("labels", labels)],
                            fill_positives)
    return torch.ops.syncfree.balanced_sample_gather(
        features,
        labels,
        num_samples,
        positive_fraction,
        negative_label=negative_label,
        fill_positives=fill_positives,
        seed=seed,
        generator=generator,
    )
