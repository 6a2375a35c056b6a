"""Typed Python wrappers over ``torch.ops.syncfree``.

The wrappers are TorchScript-compatible: ``torch.jit.script`` compiles a
function that calls them (keyword arguments included), and a scripted call
returns what the eager call returns for the same arguments and generator state.
"""
import operator
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from . import _build_info


# The wrappers check only what the C++ operators cannot see: Python types.
# Through the dispatcher a bool passes as an int (True is 1) and as a float,
# None passes as False for a bool, a Python int of more than 64 bits cannot
# be converted, and a wrong type gets the dispatcher's generic message. Every
# value check (ranges, shapes, dtypes, devices, quotas) is the operators' own
# (csrc/ops), written once for Python, TorchScript and C++; the wrappers call
# it (host quotas through the internal op _check_class_quota). TorchScript
# checks the types itself: these checks are skipped there.
#
# Outside TorchScript and torch.compile, a wrapper first offers its call to
# the library's own Python entry, syncfree._C (csrc/python/entry.cpp): the
# same operator through the same dispatcher, its arguments converted by a few
# type tests instead of torch's generic conversion by the schema. Through it
# the balanced samplers' wrappers took 0.7 to 0.9 us less than torch.ops for
# a tiny call, 0.7 to 3.8 us less at one row of up to 1e5 labels, and up to
# tens of microseconds less after large calls (docs/benchmarks.md, "The
# wrappers' own entry"). The entry takes plain arguments only (tensors of
# type Tensor or Parameter without named dimensions, no torch function
# mode, Python ints, floats, bools, None, torch.Generator) and returns
# NotImplemented for anything else; the wrapper then checks the types and
# calls torch.ops.syncfree.<op>, as it does where the entry was not built.
#
# Through torch.ops a call cost its wrapper under a microsecond (0.4 to 0.9
# us over torch.ops, docs/benchmarks.md, measured before the entry existed;
# a call the entry declines now also pays its test, not measured): the
# common call (plain ints, a float, a bool, no seed or generator) is
# recognized by one expression and passed on positionally (keyword
# arguments cost torch.ops several microseconds); any other call takes
# every check and passes its options by keyword. The samplers' class_quota lists are checked once per distinct
# list and kept as tensors (_QUOTAS).

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# The operators of these wrappers' calls outside TorchScript, looked up
# once (a call through torch.ops.syncfree.<op> reads an attribute of three
# objects first): the balanced samplers' calls with plain Python types and
# negative_label, fill_positives, seed and generator at their defaults;
# the stratified samplers' calls with fill, seed and generator at their
# defaults; every call of gather_sampled, compact and nms. Looked up once,
# five of these wrappers took 0.1 to 0.4 us less a tiny call, and 1 to 9
# us less after the other samplers' calls on 32 rows of 1e4 labels; after
# one row of 1e5, four took 0.3 to 7.7 us less and balanced_sample_gather
# 0.8 to 3.9 us more (docs/benchmarks.md, "Where two threads' time goes:
# the call outside its work"). Other calls, and TorchScript, go through
# torch.ops.syncfree.<op>.
_BALANCED_SAMPLE = torch.ops.syncfree.balanced_sample
_BALANCED_SAMPLE_GATHER = torch.ops.syncfree.balanced_sample_gather
_STRATIFIED_SAMPLE = torch.ops.syncfree.stratified_sample
_STRATIFIED_SAMPLE_GATHER = torch.ops.syncfree.stratified_sample_gather
_GATHER_SAMPLED = torch.ops.syncfree.gather_sampled
_COMPACT = torch.ops.syncfree.compact
_NMS = torch.ops.syncfree.nms

# The entry's operators (syncfree._C.find), where it was built.
if _build_info.PYTHON_ENTRY:
    try:
        from . import _C
    except ImportError as e:
        raise ImportError(
            f"syncfree was built with its Python entry, but syncfree._C cannot be imported ({e}); "
            "rebuild the package (its build makes syncfree._C beside libsyncfree.so)"
        ) from e

    _ENTRY = _C.call
    _ENTRY_BALANCED_SAMPLE = _C.find("syncfree::balanced_sample")
    _ENTRY_BALANCED_SAMPLE_GATHER = _C.find("syncfree::balanced_sample_gather")
    _ENTRY_STRATIFIED_SAMPLE = _C.find("syncfree::stratified_sample")
    _ENTRY_STRATIFIED_SAMPLE_GATHER = _C.find("syncfree::stratified_sample_gather")
    _ENTRY_GATHER_SAMPLED = _C.find("syncfree::gather_sampled")
    _ENTRY_COMPACT = _C.find("syncfree::compact")
    _ENTRY_NMS = _C.find("syncfree::nms")
else:
    _ENTRY = _ENTRY_BALANCED_SAMPLE = _ENTRY_BALANCED_SAMPLE_GATHER = None
    _ENTRY_STRATIFIED_SAMPLE = _ENTRY_STRATIFIED_SAMPLE_GATHER = None
    _ENTRY_GATHER_SAMPLED = _ENTRY_COMPACT = _ENTRY_NMS = None

# A wrapper calls _ENTRY(op, every argument of the schema by position) where
# the entry was built and torch.compile is not tracing (it traces torch.ops),
# and goes on through torch.ops when the entry returns NotImplemented. The
# test is written out in each wrapper: through a helper (one Python call
# more) the wrapper measured 4 to 33 us more on two threads at 32 rows and
# one row of 1e6, -4 to +5 us on one thread (two runs).
_is_compiling = torch.compiler.is_compiling


def _check_tensor(op: str, name: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"syncfree.{op}: {name} must be a torch.Tensor, got {type(value).__name__}")


def _check_bool(op: str, name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"syncfree.{op}: {name} must be a bool, got {type(value).__name__}")


def _check_int(op: str, name: str, value, optional: bool = False) -> None:
    if optional and value is None:
        return
    expected = "an int or None" if optional else "an int"
    if isinstance(value, (bool, torch.Tensor)) or not (
        isinstance(value, (int, torch.SymInt)) or hasattr(value, "__index__")
    ):
        raise TypeError(f"syncfree.{op}: {name} must be {expected}, got {type(value).__name__}")
    if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:  # symbolic ints: traced as int64
        raise OverflowError(f"syncfree.{op}: {name} must fit in int64 ([-2**63, 2**63 - 1]), got {value}")


def _check_float(op: str, name: str, value) -> None:
    if isinstance(value, (bool, torch.Tensor)) or not (
        isinstance(value, (int, float, torch.SymInt, torch.SymFloat)) or hasattr(value, "__float__")
    ):
        raise TypeError(f"syncfree.{op}: {name} must be a float, got {type(value).__name__}")


def _check_generator(op: str, generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"syncfree.{op}: generator must be a torch.Generator or None, got {type(generator).__name__}")


def _check_balanced_types(op: str, num_samples, positive_fraction, negative_label, fill_positives, seed,
                          generator) -> None:
    _check_int(op, "num_samples", num_samples)
    _check_float(op, "positive_fraction", positive_fraction)
    _check_int(op, "negative_label", negative_label)
    _check_bool(op, "fill_positives", fill_positives)
    _check_int(op, "seed", seed, optional=True)
    _check_generator(op, generator)


def _plain_balanced_call(num_samples, positive_fraction, negative_label, fill_positives, seed, generator) -> bool:
    """Whether the options are those of the common call: Python ints in
    int64, a Python float, a bool, no seed and no generator (the types the
    checks accept, recognized at once)."""
    return (type(num_samples) is int and type(positive_fraction) is float and type(negative_label) is int
            and type(fill_positives) is bool and seed is None and generator is None
            and _INT64_MIN <= num_samples <= _INT64_MAX and _INT64_MIN <= negative_label <= _INT64_MAX)


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
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_BALANCED_SAMPLE, labels, num_samples, positive_fraction, negative_label,
                         fill_positives, seed, generator)
            if out is not NotImplemented:
                return out
        if isinstance(labels, Tensor) and _plain_balanced_call(num_samples, positive_fraction, negative_label,
                                                               fill_positives, seed, generator):
            if negative_label == 0 and fill_positives:  # every keyword at its default
                return _BALANCED_SAMPLE(labels, num_samples, positive_fraction)
        else:
            _check_tensor("balanced_sample", "labels", labels)
            _check_balanced_types("balanced_sample", num_samples, positive_fraction, negative_label,
                                  fill_positives, seed, generator)
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
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_BALANCED_SAMPLE_GATHER, features, labels, num_samples, positive_fraction,
                         negative_label, fill_positives, seed, generator)
            if out is not NotImplemented:
                return out
        if (isinstance(features, Tensor) and isinstance(labels, Tensor)
                and _plain_balanced_call(num_samples, positive_fraction, negative_label, fill_positives, seed,
                                         generator)):
            if negative_label == 0 and fill_positives:  # every keyword at its default
                return _BALANCED_SAMPLE_GATHER(features, labels, num_samples, positive_fraction)
        else:
            _check_tensor("balanced_sample_gather", "features", features)
            _check_tensor("balanced_sample_gather", "labels", labels)
            _check_balanced_types("balanced_sample_gather", num_samples, positive_fraction, negative_label,
                                  fill_positives, seed, generator)
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


def _quota_list(op: str, class_quota) -> List[int]:
    # Python types only: a sequence of ints (no bools, no floats) as a list.
    if isinstance(class_quota, (str, bytes)) or not hasattr(class_quota, "__len__"):
        raise TypeError(
            f"syncfree.{op}: class_quota must be a sequence of ints or an int64 tensor, got {type(class_quota).__name__}"
        )
    values = []
    for c, q in enumerate(class_quota):
        if isinstance(q, (bool, float)) or not hasattr(q, "__index__"):
            raise TypeError(f"syncfree.{op}: class_quota[{c}] must be an int, got {type(q).__name__}")
        values.append(operator.index(q))
    return values


# Checked class_quota lists (Python ints), by (values, num_samples): the
# int64 CPU tensor the operators take, and its pinned copy once a call on a
# GPU needs one. Never written once made (the operators only read
# class_quota); emptied when it holds _QUOTAS_MAX entries. Used only with a
# Python int num_samples and no torch function or dispatch mode active (a
# default device, FakeTensorMode, make_fx): a mode would make, or be handed,
# tensors of its own.
_QUOTAS: Dict[Tuple[Tuple[int, ...], int], List[Optional[Tensor]]] = {}
_QUOTAS_MAX = 256
_QUOTA_SEQUENCES = (list, tuple)
_INT_ONLY = frozenset((int,))
# Whether a dispatch or torch function mode is active (a torch without these
# queries: taken as active, so the cache is never used).
_len_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)
_function_mode_on = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: True)


def _host_quota(op: str, labels: Tensor, num_samples: int, class_quota) -> Tensor:
    """A class_quota sequence as the operator takes it, outside TorchScript and
    torch.compile: checked by the operator's own host check the first time
    (the error names `op`), then taken from _QUOTAS where it can be; sent to
    labels' device."""
    key = None
    entry = None
    # A list or tuple of Python ints only (the set of its element types: a
    # bool or a float would equal an int key), a Python int num_samples, no mode.
    if (type(class_quota) in _QUOTA_SEQUENCES and type(num_samples) is int and not _len_dispatch_modes()
            and not _function_mode_on() and set(map(type, class_quota)) <= _INT_ONLY):
        key = (tuple(class_quota), num_samples)
        entry = _QUOTAS.get(key)
    if entry is None:
        values = _quota_list(op, class_quota)
        torch.ops.syncfree._check_class_quota(op, values, num_samples)
        entry = [torch.tensor(values, dtype=torch.int64, device="cpu"), None]
        if key is not None:
            if len(_QUOTAS) >= _QUOTAS_MAX:
                _QUOTAS.clear()
            _QUOTAS[key] = entry
    if labels.is_cpu:
        return entry[0]
    if labels.is_cuda:
        if torch.cuda.is_current_stream_capturing():
            # A captured copy reads its host buffer again at every replay.
            raise RuntimeError(
                f"syncfree.{op}: class_quota must be an int64 tensor on the labels' device during CUDA graph "
                "capture (made before the capture), got a Python sequence"
            )
        if entry[1] is None:
            entry[1] = entry[0].pin_memory()
        # From pinned memory the copy is asynchronous: no wait for the device.
        return entry[1].to(labels.device, non_blocking=True)
    return entry[0].to(labels.device)


def _stratified_quota(
    op: str, labels: Tensor, num_samples: int, class_quota: Union[List[int], Tensor], fill: bool,
    seed: Optional[int], generator: Optional[torch.Generator],
) -> Tensor:
    """The common start of the stratified wrappers: Python types, then
    class_quota as the operator takes it (a tensor as is: its values are data;
    a list checked by the operator's own host check, then sent to labels'
    device)."""
    if not torch.jit.is_scripting():
        if not (isinstance(labels, Tensor) and type(num_samples) is int and type(fill) is bool and seed is None
                and generator is None and _INT64_MIN <= num_samples <= _INT64_MAX):
            _check_tensor(op, "labels", labels)
            _check_int(op, "num_samples", num_samples)
            _check_bool(op, "fill", fill)
            _check_int(op, "seed", seed, optional=True)
            _check_generator(op, generator)
        # A list or tuple first: isinstance(x, Tensor) costs more than the type's test.
        if type(class_quota) not in _QUOTA_SEQUENCES and isinstance(class_quota, Tensor):
            return class_quota
        if not torch.compiler.is_compiling():
            return _host_quota(op, labels, num_samples, class_quota)
        class_quota = _quota_list(op, class_quota)
    if isinstance(class_quota, torch.Tensor):
        return class_quota
    # TorchScript, torch.compile: checked and made on every call.
    torch.ops.syncfree._check_class_quota(op, class_quota, num_samples)
    quota = torch.tensor(class_quota, dtype=torch.int64)
    if labels.device.type == "cuda":
        # From pinned memory the copy is asynchronous: no wait for the device.
        quota = quota.pin_memory()
    return quota.to(labels.device, non_blocking=True)


def stratified_sample(
    labels: Tensor,
    num_samples: int,
    class_quota: Union[List[int], Tensor],
    fill: bool = True,
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    """Choose ``num_samples`` items per row with a quota per class.

    Static shapes, no host-device synchronization, any number of leading
    (batch) dimensions; callable from TorchScript and ``torch.compile``.

    Args:
        labels: ``[..., N]`` bool or integer tensor. An element with label
            ``c`` in ``[0, C)`` belongs to class ``c``; labels ``< 0`` and
            ``>= C`` are never sampled (bool: ``False`` is class 0, ``True``
            class 1).
        num_samples: K >= 0, the number of output slots per row.
        class_quota: the C quotas: a sequence of ints (checked first: every
            quota >= 0 and their sum <= K; sent to ``labels``' device as an
            int64 tensor), or an int64 tensor ``[C]`` or ``[..., C]`` (one
            quota row per row of ``labels``) on ``labels``' device. Tensor
            values are data and are not checked: a negative quota takes
            nothing, and when a row's quotas add up to more than K the
            classes take in class order until the K slots are used.
        fill: with ``A_c`` items of class ``c`` in a row,
            ``take_c = min(A_c, max(quota_c, 0), K - sum of earlier takes)``;
            if True, the slots left are then filled with a uniformly random
            subset of the row's remaining labelled items (any class), as many
            as there are slots and items. If False they stay invalid.
        seed: fixed seed; the result is then identical on every device and
            for any batching of the same rows. Excludes ``generator``.
        generator: generator to draw from when ``seed`` is None (default: the
            default generator of ``labels``' device). Each call advances it by
            a fixed amount.

    Returns:
        ``(indices, valid)``, both ``[..., K]``. Slots ``[0, V)`` of a row
        (``V = sum take_c + fill count``) hold, in uniformly random order,
        a uniformly random ``take_c``-subset of each class ``c`` and the fill;
        the other slots hold -1. ``valid`` (bool) marks the filled slots. No
        index appears twice in a row.
    """
    quota = _stratified_quota("stratified_sample", labels, num_samples, class_quota, fill, seed, generator)
    if not torch.jit.is_scripting():
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_STRATIFIED_SAMPLE, labels, num_samples, quota, fill, seed, generator)
            if out is not NotImplemented:
                return out
        if fill and seed is None and generator is None:  # every keyword at its default
            return _STRATIFIED_SAMPLE(labels, num_samples, quota)
    return torch.ops.syncfree.stratified_sample(
        labels, num_samples, quota, fill=fill, seed=seed, generator=generator
    )


def gather_sampled(features: Tensor, labels: Tensor, indices: Tensor, valid: Tensor) -> Tuple[Tensor, Tensor]:
    """The features and labels of a sample, differentiably.

    Args:
        features: ``[..., N, *F]`` tensor whose leading dimensions equal
            ``labels.shape``; any dtype, on ``labels``' device.
        labels: ``[..., N]`` bool or integer tensor.
        indices, valid: ``[..., K]`` int64 and bool, as returned by
            :func:`balanced_sample` or :func:`stratified_sample`.

    Returns:
        ``(sampled_features [..., K, *F], sampled_labels [..., K])``;
        ``sampled_labels`` is int64. Invalid slots hold zero features and
        label -1. Gradients flow to ``features``.
    """
    if not torch.jit.is_scripting():
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_GATHER_SAMPLED, features, labels, indices, valid)
            if out is not NotImplemented:
                return out
        _check_tensor("gather_sampled", "features", features)
        _check_tensor("gather_sampled", "labels", labels)
        _check_tensor("gather_sampled", "indices", indices)
        _check_tensor("gather_sampled", "valid", valid)
        return _GATHER_SAMPLED(features, labels, indices, valid)
    return torch.ops.syncfree.gather_sampled(features, labels, indices, valid)


def stratified_sample_gather(
    features: Tensor,
    labels: Tensor,
    num_samples: int,
    class_quota: Union[List[int], Tensor],
    fill: bool = True,
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`stratified_sample`, then :func:`gather_sampled`.

    Returns:
        ``(sampled_features [..., K, *F], sampled_labels [..., K],
        valid [..., K])``. ``sampled_labels`` is int64. Invalid slots hold
        zero features and label -1. Gradients flow to ``features``.
    """
    if not torch.jit.is_scripting():
        if not isinstance(features, Tensor):
            _check_tensor("stratified_sample_gather", "features", features)
    quota = _stratified_quota("stratified_sample_gather", labels, num_samples, class_quota, fill, seed, generator)
    if not torch.jit.is_scripting():
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_STRATIFIED_SAMPLE_GATHER, features, labels, num_samples, quota, fill, seed, generator)
            if out is not NotImplemented:
                return out
        if fill and seed is None and generator is None:  # every keyword at its default
            return _STRATIFIED_SAMPLE_GATHER(features, labels, num_samples, quota)
    return torch.ops.syncfree.stratified_sample_gather(
        features, labels, num_samples, quota, fill=fill, seed=seed, generator=generator
    )


def compact(mask: Tensor, size: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The positions of each row's first ``size`` true elements: a batched
    ``torch.nonzero_static`` with a count.

    Static shapes, no host-device synchronization, any number of leading
    (batch) dimensions; callable from TorchScript and ``torch.compile``. This
    is what replaces ``torch.where(mask)[0]`` in a static graph.

    Args:
        mask: ``[..., N]`` bool or integer tensor (uint8, int8, int16, int32,
            int64, uint16, uint32, uint64), any strides. An element is true
            when it is nonzero, as for ``torch.nonzero``.
        size: K >= 0, the number of output slots per row.

    Returns:
        ``(indices, valid, count)``. ``indices`` (int64, ``[..., K]``) holds in
        slots ``[0, min(count, K))`` the positions along the last dimension of
        the row's first true elements, in increasing order, and -1 in the
        others; ``valid`` (bool, ``[..., K]``) marks the filled slots;
        ``count`` (int64, ``[...]``) is the number of true elements of each
        row, which may exceed K. For a 1-d mask, ``indices`` equals
        ``torch.nonzero_static(mask, size=K).squeeze(1)``.
    """
    if not torch.jit.is_scripting():
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_COMPACT, mask, size)
            if out is not NotImplemented:
                return out
        _check_tensor("compact", "mask", mask)
        _check_int("compact", "size", size)
        return _COMPACT(mask, size)
    return torch.ops.syncfree.compact(mask, size)


def nms(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float,
    max_output: int,
    idxs: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Non-maximum suppression with static shapes, batched over leading dimensions.

    Per row (one image), exactly what ``torchvision.ops.nms`` keeps (with
    ``idxs``: ``torchvision.ops.batched_nms``) among the row's valid boxes,
    in the same order, truncated to ``max_output``. No host-device
    synchronization; callable from TorchScript and ``torch.compile``.

    Args:
        boxes: ``[..., N, 4]`` boxes ``(x1, y1, x2, y2)``, float16, bfloat16,
            float32 or float64, any strides. float16 and bfloat16 are computed
            in float32 (their values convert exactly), float64 in float64.
        scores: ``[..., N]``, the boxes' dtype. A box whose score is NaN
            takes no part (never kept, never suppresses); ``inf`` and ``-inf``
            rank first and last.
        iou_threshold: a box is suppressed by a kept box of the same id
            with a higher rank when their IoU is ``> iou_threshold`` (strict,
            as torchvision). Any value but NaN: below 0 every box suppresses
            every later box of its id, at 1 or above only IoUs above it do
            (possible only with degenerate boxes).
        max_output: M >= 0, the number of output slots per row.
        idxs: optional integer tensor ``[..., N]`` of category (or level)
            ids: boxes of different ids never suppress each other.
        valid: optional bool tensor ``[..., N]``: the boxes that take part.

    Returns:
        ``(indices, valid)``, both ``[..., M]``. ``indices`` (int64) holds the
        kept boxes' indices into the row's N, by rank: score descending,
        equal scores by lower index first; the remaining slots hold -1.
        ``valid`` (bool) marks the filled slots.
    """
    if not torch.jit.is_scripting():
        if _ENTRY is not None and not _is_compiling():
            out = _ENTRY(_ENTRY_NMS, boxes, scores, iou_threshold, max_output, idxs, valid)
            if out is not NotImplemented:
                return out
        _check_tensor("nms", "boxes", boxes)
        _check_tensor("nms", "scores", scores)
        _check_float("nms", "iou_threshold", iou_threshold)
        _check_int("nms", "max_output", max_output)
        for name, value in (("idxs", idxs), ("valid", valid)):
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(f"syncfree.nms: {name} must be a torch.Tensor or None, got {type(value).__name__}")
        return _NMS(boxes, scores, iou_threshold, max_output, idxs=idxs, valid=valid)
    return torch.ops.syncfree.nms(boxes, scores, iou_threshold, max_output, idxs=idxs, valid=valid)


def multi_scale_roi_align(
    features: List[Tensor],
    boxes: Tensor,
    output_size: Union[int, Tuple[int, int], List[int]],
    spatial_scales: List[float],
    sampling_ratio: int,
    aligned: bool = False,
    valid: Optional[Tensor] = None,
    canonical_scale: float = 224.0,
    canonical_level: int = 4,
    eps: float = 1e-6,
) -> Tensor:
    """``torchvision.ops.MultiScaleRoIAlign`` with static shapes: each box pooled once, from its level.

    Every box gets the level torchvision's ``LevelMapper`` assigns it
    (``floor(canonical_level + log2(sqrt(area) / canonical_scale) + eps)``,
    clamped to the levels), computed on the boxes' device with the same tensor
    operations, and is pooled by RoI Align from that level only: the values
    are torchvision's ``MultiScaleRoIAlign`` output's, bit for bit on the CPU,
    with no data-dependent shapes and no host synchronization.

    Args:
        features: L feature maps ``[B, C, H_l, W_l]``, finest first (1 to 16;
            float16, bfloat16, float32 or float64, one dtype). float16 and
            bfloat16 are computed in float32 and rounded once, as torchvision's
            ``roi_align`` does under autocast.
        boxes: ``[B, K, 4]`` boxes ``(x1, y1, x2, y2)`` of each image, in
            image coordinates, any floating dtype (read in the features'
            compute type). No gradient flows to them (as in torchvision).
        output_size: ``h`` or ``(h, w)``, the pooled size.
        spatial_scales: one scale per level, the ratio of the level's size to
            the image's (``MultiScaleRoIAlign.scales``: powers of two).
        sampling_ratio: sampling points per bin along each axis, at least 1
            (adaptive sampling, 0 in torchvision, has a data-dependent cost).
        aligned: shift the boxes by -0.5 pixel (torchvision's ``aligned``).
        valid: optional bool ``[B, K]``: the slots to pool. The others, and
            boxes with a non-finite coordinate, pool zeros and receive no
            gradient; so do boxes of negative area (exactly one of ``x2 <
            x1``, ``y2 < y1``) with several levels, as in torchvision (its
            ``LevelMapper`` gives them a NaN level, hence none); other
            reversed boxes are pooled as torchvision pools them (as 1 x 1
            pixel boxes, unless ``aligned``).
        canonical_scale, canonical_level, eps: ``LevelMapper``'s ``s0``,
            ``lvl0`` and ``eps`` (torchvision's defaults).

    Returns:
        ``[B * K, C, h, w]`` in the features' dtype: box ``k`` of image ``b``
        at row ``b * K + k`` (torchvision's order for the boxes given as a
        list of B tensors of K boxes).
    """
    if not torch.jit.is_scripting():
        op = "multi_scale_roi_align"
        if not isinstance(features, (list, tuple)) or not all(isinstance(f, torch.Tensor) for f in features):
            raise TypeError(f"syncfree.{op}: features must be a list of tensors [B, C, H, W], "
                            f"got {type(features).__name__}")
        _check_tensor(op, "boxes", boxes)
        if isinstance(output_size, (list, tuple)):
            for s in output_size:
                _check_int(op, "output_size", s)
        else:
            _check_int(op, "output_size", output_size)
        if not isinstance(spatial_scales, (list, tuple)):
            raise TypeError(f"syncfree.{op}: spatial_scales must be a list of floats, got "
                            f"{type(spatial_scales).__name__}")
        for s in spatial_scales:
            _check_float(op, "spatial_scales", s)
        _check_int(op, "sampling_ratio", sampling_ratio)
        _check_bool(op, "aligned", aligned)
        if valid is not None and not isinstance(valid, torch.Tensor):
            raise TypeError(f"syncfree.{op}: valid must be a torch.Tensor or None, got {type(valid).__name__}")
        _check_float(op, "canonical_scale", canonical_scale)
        _check_int(op, "canonical_level", canonical_level)
        _check_float(op, "eps", eps)
    if isinstance(output_size, int):
        size = [output_size, output_size]
    elif isinstance(output_size, list):
        size = [int(s) for s in output_size]
    else:
        size = list(output_size)
    return torch.ops.syncfree.multi_scale_roi_align(
        list(features), boxes, size, [float(s) for s in spatial_scales], sampling_ratio, aligned,
        valid=valid, canonical_scale=float(canonical_scale), canonical_level=canonical_level, eps=float(eps))
