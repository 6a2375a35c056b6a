"""syncfree.balanced_sample and balanced_sample_gather: bad input gets a clear error that
names the op called, the argument, what was expected and what was received."""
import math

import pytest
import torch

import syncfree
from helpers.cuda import check_rejected_calls_leave_the_generators_unchanged

LABELS = torch.zeros(2, 10, dtype=torch.int64)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(labels=torch.zeros(2, 10)), "labels must be bool or an integer tensor .* got dtype Float"),
        (dict(labels=torch.zeros(2, 10, dtype=torch.float64)), "got dtype Double"),
        (dict(labels=torch.zeros(2, 10, dtype=torch.complex64)), "labels must be bool or an integer"),
        (dict(labels=torch.tensor(3)), "labels must have at least 1 dimension .* got a 0-dim tensor"),
        (dict(num_samples=-1), "num_samples must be >= 0, got -1"),
        (dict(positive_fraction=-0.1), r"positive_fraction must be in \[0, 1\], got -0.1"),
        (dict(positive_fraction=1.5), r"positive_fraction must be in \[0, 1\], got 1.5"),
        (dict(positive_fraction=math.nan), r"positive_fraction must be in \[0, 1\], got nan"),
        (dict(positive_fraction=math.inf), r"positive_fraction must be in \[0, 1\], got inf"),
        (dict(negative_label=-1), "negative_label must be >= 0 .* got -1"),
        (dict(seed=1, generator=torch.Generator()), "seed and generator are mutually exclusive"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = dict(labels=LABELS, num_samples=4)
    args.update(kwargs)
    labels = args.pop("labels")
    K = args.pop("num_samples")
    with pytest.raises(RuntimeError, match=r"^syncfree\.balanced_sample: .*" + message):
        syncfree.balanced_sample(labels, K, **args)


def test_wrong_python_types_name_the_argument():
    with pytest.raises(TypeError, match=r"^syncfree\.balanced_sample: num_samples must be an int, got float"):
        syncfree.balanced_sample(LABELS, 2.5)
    with pytest.raises(TypeError, match=r"^syncfree\.balanced_sample: labels must be a torch.Tensor, got list"):
        syncfree.balanced_sample([0, 1], 2)


def test_meta_tensors_get_the_same_checks():
    with pytest.raises(RuntimeError, match=r"^syncfree\.balanced_sample: num_samples must be >= 0"):
        syncfree.balanced_sample(LABELS.to("meta"), -3)
    with pytest.raises(RuntimeError, match=r"^syncfree\.balanced_sample: .*got dtype Float"):
        syncfree.balanced_sample(torch.zeros(3, device="meta"), 1)


def test_gather_shape_mismatch():
    with pytest.raises(RuntimeError, match=r"^syncfree\.balanced_sample_gather: features must have shape \[..., N, \*F\].*\[2, 10\].*\[2, 9, 16\]"):
        syncfree.balanced_sample_gather(torch.zeros(2, 9, 16), LABELS, 4)
    with pytest.raises(RuntimeError, match=r"^syncfree\.balanced_sample_gather: features must have shape"):
        syncfree.balanced_sample_gather(torch.zeros(10), LABELS, 4)


def test_gather_device_mismatch():
    with pytest.raises(RuntimeError, match=r"^syncfree\.balanced_sample_gather: features and labels must be on the same device"):
        syncfree.balanced_sample_gather(torch.zeros(2, 10, 3, device="meta"), LABELS, 4)


@pytest.mark.cuda
def test_cuda_rejected_calls_leave_the_generators_unchanged():
    labels = torch.randint(-1, 2, (2, 100), device="cuda")
    # More than 2^31 - 1 blocks of work (rows * ceil(N / 8192)): rejected by
    # the CUDA backend itself. Neither tensor holds memory (empty, expanded).
    too_many_rows = torch.empty(2**31, 0, device="cuda", dtype=torch.int64)
    too_many_chunks = torch.zeros((), device="cuda", dtype=torch.int8).expand(2**30 + 1, 2 * 65536)
    rejected = [
        (lambda g: syncfree.balanced_sample(labels, -1, generator=g), "num_samples"),
        (lambda g: syncfree.balanced_sample(labels, 4, 1.5, generator=g), "positive_fraction"),
        (lambda g: syncfree.balanced_sample(labels, 4, negative_label=-1, generator=g), "negative_label"),
        (lambda g: syncfree.balanced_sample(labels.float(), 4, generator=g), "dtype"),
        (lambda g: syncfree.balanced_sample(too_many_rows, 1, generator=g), "too large"),
        (lambda g: syncfree.balanced_sample(too_many_chunks, 1, generator=g), "too large"),
        (lambda g: syncfree.balanced_sample_gather(too_many_chunks, too_many_chunks, 1, generator=g), "too large"),
    ]
    check_rejected_calls_leave_the_generators_unchanged(
        rejected, lambda g: syncfree.balanced_sample(labels, 4, generator=g))
