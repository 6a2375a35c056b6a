"""What this build of syncfree registers, checked against what it was built as."""
import os

import pytest
import torch

import syncfree
import syncfree._build_info as info

OPS = ["syncfree::balanced_sample", "syncfree::_gather_sampled", "syncfree::stratified_sample", "syncfree::nms"]


def has_kernel(op, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("key", ["CPU", "Meta"])
def test_cpu_and_meta_kernels_registered(op, key):
    assert has_kernel(op, key)


def test_cuda_kernels_registered_as_built():
    # SYNCFREE_EXPECT_CUDA_OPERATOR=1 (set by the Makefile for builds that
    # compiled the CUDA adapter) turns a silently CPU-only build into a failure.
    expected = os.environ.get("SYNCFREE_EXPECT_CUDA_OPERATOR")
    if expected is not None:
        assert info.CUDA_OPERATOR == (expected == "1"), (info.CUDA_OPERATOR, expected)
    for op in OPS:
        assert has_kernel(op, "CUDA") == info.CUDA_OPERATOR, op
    if info.CUDA_OPERATOR:
        assert torch.version.cuda is not None


def test_built_against_this_torch_minor():
    assert syncfree._minor(info.TORCH_VERSION) == syncfree._minor(torch.__version__)
