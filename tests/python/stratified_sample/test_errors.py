"""syncfree.stratified_sample: rejected calls (and that they draw nothing),
error messages that name the op and the argument, host quota sequences, Meta
shapes."""
import pytest
import torch

import syncfree
from helpers.cuda import check_rejected_calls_leave_the_generators_unchanged

OPS = torch.ops.syncfree


def test_rejected_calls_do_not_consume_randomness():
    labels = torch.zeros(4, 10, dtype=torch.int64)
    bad_calls = [
        lambda g: syncfree.stratified_sample(labels, -1, [0], generator=g),
        lambda g: syncfree.stratified_sample(labels, 4, [3, 2], generator=g),
        lambda g: syncfree.stratified_sample(labels, 4, [-1], generator=g),
        lambda g: syncfree.stratified_sample(labels, 4, torch.tensor([1], dtype=torch.int32), generator=g),
        lambda g: syncfree.stratified_sample(labels.float(), 4, [1], generator=g),
        lambda g: OPS.stratified_sample(labels, 4, torch.zeros(3, 2, dtype=torch.int64), generator=g),
    ]
    for call in bad_calls:
        g = torch.Generator().manual_seed(3)
        before = g.get_state()
        with pytest.raises((RuntimeError, ValueError, TypeError)):
            call(g)
        assert torch.equal(before, g.get_state())


def test_bad_input_messages():
    labels = torch.zeros(3, 10, dtype=torch.int64)
    cases = [
        (lambda: syncfree.stratified_sample(labels.float(), 4, [1]), RuntimeError,
         r"labels must be bool or an integer tensor .* got dtype Float"),
        (lambda: syncfree.stratified_sample(torch.tensor(1), 4, [1]), RuntimeError,
         r"labels must have at least 1 dimension"),
        (lambda: syncfree.stratified_sample(labels, -2, [0]), RuntimeError,
         r"num_samples must be >= 0, got -2"),
        (lambda: syncfree.stratified_sample(labels, 4, [2, -1]), ValueError,
         r"class_quota\[1\] must be >= 0, got -1"),
        (lambda: syncfree.stratified_sample(labels, 4, [3, 2]), ValueError,
         r"the sum of class_quota must be <= num_samples \(4\), got class_quota \[3, 2\]"),
        (lambda: syncfree.stratified_sample(labels, 4, []), ValueError,
         r"at least one class \(C >= 1\), got an empty sequence"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(0, dtype=torch.int64)), RuntimeError,
         r"at least one class \(C >= 1\), got shape \[0\]"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2, 2, dtype=torch.int64)), RuntimeError,
         r"class_quota must have shape \[C\] or labels.shape\[:-1\] \+ \[C\].* got shape \[2, 2\] for labels of shape \[3, 10\]"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(3, 1, 2, dtype=torch.int64)), RuntimeError,
         r"class_quota must have shape"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros((), dtype=torch.int64)), RuntimeError,
         r"class_quota must have shape"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2, dtype=torch.int32)), RuntimeError,
         r"class_quota must be an int64 tensor, got dtype Int"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2)), RuntimeError,
         r"class_quota must be an int64 tensor, got dtype Float"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2, dtype=torch.int64, device="meta")), RuntimeError,
         r"class_quota must be on the labels' device cpu, got a tensor on meta"),
        (lambda: syncfree.stratified_sample(labels, 4, [1.0, 2]), TypeError,
         r"class_quota\[0\] must be an int, got float"),
        (lambda: syncfree.stratified_sample(labels, 4, [True]), TypeError,
         r"class_quota\[0\] must be an int, got bool"),
        (lambda: syncfree.stratified_sample(labels, 4, 3), TypeError,
         r"class_quota must be a sequence of ints or an int64 tensor, got int"),
        (lambda: syncfree.stratified_sample(labels.tolist(), 4, [1]), TypeError,
         r"labels must be a torch.Tensor, got list"),
        (lambda: syncfree.stratified_sample(labels, 4, [1], fill=None), TypeError,
         r"fill must be a bool, got NoneType"),
        (lambda: syncfree.stratified_sample(labels, 4, [1], seed=1, generator=torch.Generator()), RuntimeError,
         r"seed and generator are mutually exclusive"),
    ]
    for call, error, pattern in cases:
        with pytest.raises(error, match=r"^syncfree\.stratified_sample: .*" + pattern):
            call()


def test_host_quota_sequences_of_other_types():
    labels = torch.tensor([0, 1, 1, 0, 2])
    a = syncfree.stratified_sample(labels, 3, (1, 1, 1), seed=1)
    b = syncfree.stratified_sample(labels, 3, [1, 1, 1], seed=1)
    c = syncfree.stratified_sample(labels, 3, torch.tensor([1, 1, 1]).numpy(), seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[0], c[0])


def test_meta_shapes():
    labels = torch.empty(2, 3, 50, dtype=torch.int64, device="meta")
    idx, valid = OPS.stratified_sample(labels, 7, torch.empty(2, 3, 4, dtype=torch.int64, device="meta"))
    assert idx.shape == (2, 3, 7) and valid.dtype == torch.bool and idx.device.type == "meta"
    with pytest.raises(RuntimeError, match=r"^syncfree\.stratified_sample: class_quota must be an int64 tensor"):
        OPS.stratified_sample(labels, 7, torch.empty(4, device="meta"))


@pytest.mark.cuda
def test_cuda_rejected_calls_leave_the_generators_unchanged():
    labels = torch.randint(-1, 3, (2, 100), device="cuda")
    quota = torch.tensor([2, 2, 2], device="cuda")
    # Rejected by the CUDA backend itself: more than 2^31 - 1 rows (one block
    # each), and 2^31 - 1 classes (32-bit sort keys). No memory behind either.
    too_many_rows = torch.empty(2**31, 0, device="cuda", dtype=torch.int64)
    too_many_classes = torch.zeros((), device="cuda", dtype=torch.int64).expand(2**31 - 1)
    rejected = [
        (lambda g: syncfree.stratified_sample(labels, -1, quota, generator=g), "num_samples"),
        (lambda g: syncfree.stratified_sample(labels.float(), 4, quota, generator=g), "dtype"),
        (lambda g: syncfree.stratified_sample(labels, 4, quota.int(), generator=g), "int64"),
        (lambda g: syncfree.stratified_sample(labels, 4, quota.cpu(), generator=g), "device"),
        (lambda g: syncfree.stratified_sample(labels, 4, torch.zeros(3, 2, dtype=torch.int64, device="cuda"), generator=g), "shape"),
        (lambda g: syncfree.stratified_sample(too_many_rows, 1, quota, generator=g), "too large"),
        (lambda g: syncfree.stratified_sample(labels, 1, too_many_classes, generator=g), "too large"),
    ]
    check_rejected_calls_leave_the_generators_unchanged(
        rejected, lambda g: syncfree.stratified_sample(labels, 4, quota, generator=g))
