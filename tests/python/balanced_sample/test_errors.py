"""syncfree.balanced_sample and balanced_sample_gather: bad input gets a clear error that
names the op called, the argument, what was expected and what was received."""
import math

import pytest
import torch

import syncfree

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
