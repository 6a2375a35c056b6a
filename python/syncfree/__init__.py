"""syncfree: static-shape, sync-free balanced subsampling for PyTorch.

    import syncfree
    indices, valid = syncfree.balanced_sample(labels, 256, 0.25)
    feats, labs, valid = syncfree.balanced_sample_gather(features, labels, 256)

    indices, valid = syncfree.stratified_sample(labels, 256, [64, 64, 128])
    feats, labs = syncfree.gather_sampled(features, labels, indices, valid)

    indices, valid, count = syncfree.compact(mask, 64)
    indices, valid = syncfree.nms(boxes, scores, 0.7, 1000)   # [B, N, 4], [B, N] -> [B, 1000]

    with syncfree.find_syncs() as report:    # host syncs and data-dependent shapes, by line
        step()
    print(report)

The operators are also reachable as ``torch.ops.syncfree.balanced_sample``,
``torch.ops.syncfree.balanced_sample_gather``, ``torch.ops.syncfree.stratified_sample``,
``torch.ops.syncfree.stratified_sample_gather``, ``torch.ops.syncfree.gather_sampled``,
``torch.ops.syncfree.compact`` and ``torch.ops.syncfree.nms`` once this package is imported.
"""
import os as _os

import torch as _torch

from ._build_info import SYNCFREE_VERSION as __version__
from ._build_info import TORCH_VERSION as _BUILT_AGAINST

_LIBRARY = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "libsyncfree.so")


def _minor(version: str) -> str:
    """'2.14.1+cu130' -> '2.14': torch's C++ ABI changes between minor releases."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _load_library() -> None:
    if _minor(_torch.__version__) != _minor(_BUILT_AGAINST):
        raise ImportError(
            f"syncfree was compiled against torch {_BUILT_AGAINST}, but torch "
            f"{_torch.__version__} is installed; install the syncfree build for torch "
            f"{_minor(_torch.__version__)}, or rebuild it against the installed torch "
            f"(pip install --no-build-isolation . from the source tree)"
        )
    try:
        _torch.ops.load_library(_LIBRARY)
    except OSError as e:
        raise ImportError(
            f"could not load {_LIBRARY} (compiled against torch {_BUILT_AGAINST}, "
            f"installed torch {_torch.__version__}): {e}"
        ) from e


_load_library()

from ._build_info import CUDA_OPERATOR as _CUDA_OPERATOR  # noqa: E402

if not _CUDA_OPERATOR:  # CUDA tensors get an error that says why and how to rebuild
    from . import _without_cuda  # noqa: E402

    _without_cuda.register()

from .ops import balanced_sample, balanced_sample_gather  # noqa: E402
from .ops import gather_sampled, stratified_sample, stratified_sample_gather  # noqa: E402
from .ops import compact  # noqa: E402
from .ops import nms  # noqa: E402
from .ops import multi_scale_roi_align  # noqa: E402
from ._finder import find_graph_breaks, find_syncs  # noqa: E402

__all__ = [
    "balanced_sample",
    "balanced_sample_gather",
    "stratified_sample",
    "stratified_sample_gather",
    "gather_sampled",
    "compact",
    "nms",
    "multi_scale_roi_align",
    "find_syncs",
    "find_graph_breaks",
    "__version__",
]
