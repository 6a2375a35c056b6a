"""torchvision's ``BalancedPositiveNegativeSampler``, on syncfree.

    import syncfree.compat.torchvision as sf_tv
    sf_tv.patch(model)      # this model's RPN and ROI heads sample with syncfree

or, for every detection model built from then on, ``sf_tv.patch()`` (no
argument: replaces torchvision's sampler class). ``unpatch(model)`` and
``unpatch()`` undo each.

``make_static(model, image_size, max_boxes)`` goes further: a Faster R-CNN
or Mask R-CNN whose whole step has static shapes (no graph break under
``torch.compile``, no host-device synchronization). It lives in
:mod:`syncfree.detection` (with ``pad_targets``, ``to_torchvision`` and
``StaticRCNN``); these names are re-exported here.

Patched models keep syncfree's sampler under ``torch.jit.script``: the sampler
is a TorchScript class, and a module that holds one has a class that declares
it as the type of its ``fg_bg_sampler`` (see :func:`patch`).
"""
import contextlib
import inspect
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from ..ops import balanced_sample
# The static detector lives in syncfree.detection; its names stay reachable here.
from ..detection import StaticRCNN, make_static, pad_targets, to_torchvision

__all__ = ["BalancedPositiveNegativeSampler", "patch", "unpatch", "patched", "make_static", "pad_targets",
           "to_torchvision", "StaticRCNN"]


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

    The class is TorchScript-compatible; a scripted call draws the same
    samples as an eager call from the same generator state. It holds no state
    that changes from call to call, so ``torch.compile`` compiles a model that
    holds it once, not once per step.
    """

    def __init__(self, batch_size_per_image: int, positive_fraction: float) -> None:
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def __call__(self, matched_idxs: List[Tensor]) -> Tuple[List[Tensor], List[Tensor]]:
        pos_masks: List[Tensor] = []
        neg_masks: List[Tensor] = []
        if len(matched_idxs) == 0:
            return pos_masks, neg_masks
        # Class codes: 1 positive (>= 1), 0 negative (== 0), -1 ignored (the rest,
        # padding included), computed exactly for any dtype.
        codes = [torch.where(m >= 1, 1, torch.where(m == 0, 0, -1)).to(torch.int8).reshape(-1)
                 for m in matched_idxs]
        # Plus one extra, ignored column: never chosen, it keeps gather in
        # bounds and receives the writes of unused slots below.
        labels = torch.nn.functional.pad(
            torch.nn.utils.rnn.pad_sequence(codes, batch_first=True, padding_value=-1.0), [0, 1],
            value=-1.0)
        n = labels.shape[1] - 1
        indices, valid = balanced_sample(labels, self.batch_size_per_image, self.positive_fraction,
                                         fill_positives=False)
        is_pos = labels.gather(1, indices.clamp(min=0)) == 1
        dump = torch.full_like(indices, n)  # unused and other-class slots write to column n
        pos = torch.zeros_like(labels, dtype=torch.uint8)
        pos.scatter_(1, torch.where(valid & is_pos, indices, dump), 1)
        neg = torch.zeros_like(labels, dtype=torch.uint8)
        neg.scatter_(1, torch.where(valid & ~is_pos, indices, dump), 1)
        for i, m in enumerate(matched_idxs):
            pos_masks.append(pos[i, :m.numel()].reshape(m.shape))
            neg_masks.append(neg[i, :m.numel()].reshape(m.shape))
        return pos_masks, neg_masks


_original_class: Optional[type] = None
_ATTRIBUTE = "fg_bg_sampler"


def _det_utils():
    import torchvision.models.detection._utils as det_utils

    return det_utils


# TorchScript takes the type of a module's attribute from the annotations of
# the module's class, and torchvision's RPN and ROI heads annotate
# ``fg_bg_sampler`` with torchvision's sampler class. A syncfree sampler held
# there would be converted, attribute by attribute, into an instance of
# torchvision's class and the scripted model would silently sample with
# torchvision's code. A module holding a syncfree sampler therefore gets a
# class of its own: a subclass of its class (one per class, made on first use)
# that adds only annotations naming syncfree's sampler class. Up to torch 2.14
# torch.jit reads ``module.__annotations__`` (the instance's, else its
# class's); torch 2.15 reads the class's alone: either way it finds the
# subclass's.
_patched_classes: Dict[type, type] = {}


def _class_annotations(cls: type) -> dict:
    """The annotations torch.jit uses for instances of ``cls``: those of the first class
    in its MRO that has any."""
    for klass in cls.__mro__:
        if hasattr(inspect, "get_annotations"):
            annotations = inspect.get_annotations(klass)
        else:  # Python 3.9
            annotations = klass.__dict__.get("__annotations__", {})
        if annotations:
            return dict(annotations)
    return {}


def _unpatched_class(cls: type) -> type:
    """``cls``, or the class it was made from if it is one of :func:`_patched_class`'s."""
    return cls.__dict__.get("_syncfree_base", cls)


def _patched_class(cls: type) -> type:
    """The subclass of ``cls`` whose ``fg_bg_sampler`` is syncfree's sampler for TorchScript.

    Same name, qualified name and module as ``cls`` (a patched model prints,
    and scripts, under its classes' names) and nothing else added: the
    annotations, a ``__prepare_scriptable__`` that gives a module that no
    longer holds syncfree's sampler its class back before scripting, and a
    ``__reduce_ex__`` that pickles (and deep-copies) an instance as one of
    ``cls`` made patched again on loading (the subclass itself has no name to
    be found by)."""
    base = _unpatched_class(cls)
    patched = _patched_classes.get(base)
    if patched is not None:
        return patched
    annotations = _class_annotations(base)
    annotations[_ATTRIBUTE] = BalancedPositiveNegativeSampler

    def __prepare_scriptable__(self):
        _sync_class(self)
        previous = getattr(base, "__prepare_scriptable__", None)
        return previous(self) if previous is not None else self

    def __reduce_ex__(self, protocol):
        reduced = base.__reduce_ex__(self, protocol)
        if not isinstance(reduced, tuple) or not reduced[1] or reduced[1][0] is not type(self):
            return reduced
        return (_new_patched, (base, reduced[0], reduced[1][1:])) + reduced[2:]

    patched = type(base.__name__, (base,), {
        "__module__": base.__module__, "__qualname__": base.__qualname__, "__doc__": base.__doc__,
        "__annotations__": annotations, "_syncfree_base": base,
        "__prepare_scriptable__": __prepare_scriptable__, "__reduce_ex__": __reduce_ex__})
    return _patched_classes.setdefault(base, patched)


def _new_patched(base: type, new, args: tuple):
    """Unpickling: ``new`` (the constructor pickle recorded) applied to ``base``'s patched class."""
    return new(_patched_class(base), *args)


def _sync_class(module: torch.nn.Module) -> None:
    """Give ``module`` the class whose TorchScript type of ``fg_bg_sampler`` is the class of the
    sampler it holds: its patched class if that is syncfree's sampler, else its own."""
    cls = type(module)
    if isinstance(getattr(module, _ATTRIBUTE, None), BalancedPositiveNegativeSampler):
        wanted = _patched_class(cls)
    else:
        wanted = _unpatched_class(cls)
    if wanted is not cls:
        module.__class__ = wanted


def _install_script_hooks() -> None:
    """Give torchvision's RPN and ROI heads a ``__prepare_scriptable__`` that syncs the
    module's class, so that models built after :func:`patch` script with syncfree's sampler."""
    from torchvision.models.detection.roi_heads import RoIHeads
    from torchvision.models.detection.rpn import RegionProposalNetwork

    for cls in (RegionProposalNetwork, RoIHeads):
        previous = cls.__dict__.get("__prepare_scriptable__")
        if getattr(previous, "_syncfree", False):
            continue

        def hook(self, _previous=previous):
            _sync_class(self)
            return _previous(self) if _previous is not None else self

        hook._syncfree = True
        cls.__prepare_scriptable__ = hook


def _swap_samplers(model: torch.nn.Module, to_syncfree: bool, original: type) -> None:
    for module in model.modules():
        old = getattr(module, _ATTRIBUTE, None)
        if old is None:
            continue
        ours = isinstance(old, BalancedPositiveNegativeSampler)
        if to_syncfree and not ours:
            setattr(module, _ATTRIBUTE, BalancedPositiveNegativeSampler(old.batch_size_per_image,
                                                                       old.positive_fraction))
        elif not to_syncfree and ours:
            setattr(module, _ATTRIBUTE, original(old.batch_size_per_image, old.positive_fraction))
        _sync_class(module)


def patch(model: Optional[torch.nn.Module] = None) -> Optional[torch.nn.Module]:
    """Make torchvision's detection models use syncfree's sampler.

    ``patch(model)`` swaps the sampler of every submodule of ``model`` that
    has one (``fg_bg_sampler``: the RPN and the ROI heads), keeping its
    settings, and changes nothing else: other models, and models built
    later, keep torchvision's sampler. Returns ``model``.

    ``patch()`` (no argument) replaces
    ``torchvision.models.detection._utils.BalancedPositiveNegativeSampler``,
    which the RPN and ROI heads instantiate, so every detection model built
    afterwards uses syncfree, until :func:`unpatch` ``()``.

    TorchScript: ``torch.jit.script`` scripts each module's ``fg_bg_sampler``
    with the class of the sampler the module holds, so a patched model samples
    with syncfree scripted as well as eager. For this each swapped module of
    ``model`` gets a class of its own: a subclass of its class (one per class,
    with the same name) whose annotations name syncfree's sampler, so the
    module is still an instance of torchvision's ``RoIHeads`` (or
    ``RegionProposalNetwork``), with the same ``state_dict``, and pickles and
    deep-copies as a patched module; :func:`unpatch` ``(model)`` gives it its
    class back. ``patch()`` gives torchvision's ``RegionProposalNetwork`` and
    ``RoIHeads`` a ``__prepare_scriptable__`` that does the same when they are
    scripted (it stays after :func:`unpatch` and leaves modules that hold
    torchvision's sampler alone).
    """
    global _original_class
    if model is not None:
        _swap_samplers(model, True, _torchvision_class())
        return model
    det_utils = _det_utils()
    if _original_class is None:
        _original_class = det_utils.BalancedPositiveNegativeSampler
    det_utils.BalancedPositiveNegativeSampler = BalancedPositiveNegativeSampler
    _install_script_hooks()
    return model


def _torchvision_class() -> type:
    """torchvision's own sampler class, whether or not :func:`patch` () replaced it."""
    return _original_class if _original_class is not None else _det_utils().BalancedPositiveNegativeSampler


def unpatch(model: Optional[torch.nn.Module] = None) -> Optional[torch.nn.Module]:
    """Undo :func:`patch`: ``unpatch(model)`` puts torchvision's samplers back into
    ``model`` (and changes nothing else); ``unpatch()`` restores torchvision's class."""
    global _original_class
    if model is not None:
        _swap_samplers(model, False, _torchvision_class())
        return model
    if _original_class is not None:
        _det_utils().BalancedPositiveNegativeSampler = _original_class
        _original_class = None
    return model


@contextlib.contextmanager
def patched(model: Optional[torch.nn.Module] = None):
    """``with patched(model): ...``: :func:`patch` on entry, :func:`unpatch` on exit
    (``patched()``: the global form)."""
    patch(model)
    try:
        yield model
    finally:
        unpatch(model)
