"""What this build of syncfree registers, checked against what it was built as."""
import os

import pytest
import torch

import syncfree
import syncfree._build_info as info
from syncfree import _without_cuda

OPS = ["syncfree::balanced_sample", "syncfree::_gather_sampled", "syncfree::stratified_sample",
       "syncfree::_balanced_sample_gather", "syncfree::_stratified_sample_gather", "syncfree::compact", "syncfree::nms", "syncfree::_multi_scale_roi_align",
       "syncfree::_multi_scale_roi_align_backward"]


def has_kernel(op, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("key", ["CPU", "Meta"])
def test_cpu_and_meta_kernels_registered(op, key):
    assert has_kernel(op, key)


def cuda_kernel_source(op):
    """Where the CUDA kernel of ``op`` was registered (a C++ adapter in csrc/cuda, or the Python
    module that registers the error of a build without the CUDA operator)."""
    lines = [l for l in torch._C._dispatch_dump_table(op).splitlines() if l.startswith("CUDA:")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.registration
def test_cuda_kernels_registered_as_built():
    # SYNCFREE_EXPECT_CUDA_OPERATOR=1 (set by the Makefile for builds that
    # compiled the CUDA adapter) turns a silently CPU-only build into a failure.
    expected = os.environ.get("SYNCFREE_EXPECT_CUDA_OPERATOR")
    if expected is not None:
        assert info.CUDA_OPERATOR == (expected == "1"), (info.CUDA_OPERATOR, expected)
    for op in ["syncfree::" + name for name in _without_cuda.OPS]:
        assert has_kernel(op, "CUDA"), op
        source = cuda_kernel_source(op)
        if info.CUDA_OPERATOR:  # the C++ CUDA kernels
            assert "_cuda.cpp:" in source, source
        else:  # the error that says this build has no CUDA operator
            assert "_without_cuda.py" in source, source
    # _gather_sampled is built from ATen operators on every device.
    assert has_kernel("syncfree::_gather_sampled", "CompositeExplicitAutograd")
    if info.CUDA_OPERATOR:
        assert torch.version.cuda is not None


@pytest.mark.skipif(info.CUDA_OPERATOR, reason="this build has the CUDA operator")
@pytest.mark.parametrize("op", sorted(_without_cuda.OPS))
def test_cuda_tensor_without_cuda_operator_says_how_to_rebuild(op):
    # The kernel a CUDA tensor reaches (called through the dispatcher's CUDA
    # entry: no GPU is needed to reach it).
    labels = torch.tensor([0, 1, 1, 0])
    args = {
        "balanced_sample": (labels, 2, 0.5),
        "stratified_sample": (labels, 2, torch.tensor([1, 1])),
        "_balanced_sample_gather": (torch.rand(4, 3), labels, 2, 0.5),
        "_stratified_sample_gather": (torch.rand(4, 3), labels, 2, torch.tensor([1, 1])),
        "compact": (labels != 0, 2),
        "nms": (torch.rand(4, 4), torch.rand(4), 0.5, 2),
        "_multi_scale_roi_align": ([torch.rand(1, 2, 4, 4)], torch.zeros(1, 1, 4), torch.zeros(1, dtype=torch.long),
                                   [2, 2], [1.0], 2, False),
        "_multi_scale_roi_align_backward": (torch.zeros(1, 2, 2, 2), torch.zeros(1, 1, 4),
                                            torch.zeros(1, dtype=torch.long), [1, 2, 4, 4], [2, 2], [1.0], 2, False),
    }[op]
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    with pytest.raises(RuntimeError) as e:
        getattr(torch.ops.syncfree, op).default.redispatch(cuda, *args)
    text = str(e.value)
    public = op.lstrip("_").replace("_backward", "")  # an internal op's error names the public one
    assert text.startswith(f"syncfree.{public}: {_without_cuda.OPS[op]} is on ")
    assert "this build of syncfree has no CUDA operator" in text
    assert "SYNCFREE_WITH_CUDA=1 pip install --no-build-isolation ." in text


@pytest.mark.parametrize("op", ["_balanced_sample_gather", "_stratified_sample_gather"])
def test_cuda_labels_to_gather_without_cuda_operator_names_the_labels(op):
    # A *_gather call reaches the CUDA kernel when either features or labels
    # is on a GPU; when only the labels are, the message names them.
    class CudaLabels:  # what the kernel reads of a CUDA tensor: its device
        device = torch.device("cuda", 0)

    kernel = _without_cuda._kernel(op, _without_cuda.OPS[op])
    with pytest.raises(RuntimeError, match=f"^syncfree.{op[1:]}: labels is on cuda:0, but this build "
                                           "of syncfree has no CUDA operator"):
        kernel(torch.rand(4, 3), CudaLabels(), 2)
    with pytest.raises(RuntimeError, match=f"^syncfree.{op[1:]}: features is on cpu, "):
        kernel(torch.rand(4, 3), torch.zeros(4), 2)


def test_built_against_this_torch_minor():
    assert syncfree._minor(info.TORCH_VERSION) == syncfree._minor(torch.__version__)


def test_version_mismatch_is_loud(monkeypatch):
    import importlib

    import syncfree._build_info as info

    monkeypatch.setattr(info, "TORCH_VERSION", "0.0.1-not-this-torch")
    with pytest.raises(ImportError, match=r"compiled against torch 0\.0\.1-not-this-torch, but torch .* is installed"):
        importlib.reload(syncfree)
    monkeypatch.undo()
    importlib.reload(syncfree)
