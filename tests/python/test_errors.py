"""Bad input gets a clear error that names the argument, expected and received."""
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
    with pytest.raises(RuntimeError, match=message):
        syncfree.balanced_sample(labels, K, **args)


def test_wrong_python_types_name_the_argument():
    with pytest.raises(RuntimeError, match="num_samples"):
        syncfree.balanced_sample(LABELS, 2.5)
    with pytest.raises(TypeError, match="labels must be a torch.Tensor, got list"):
        syncfree.balanced_sample([0, 1], 2)


def test_meta_tensors_get_the_same_checks():
    with pytest.raises(RuntimeError, match="num_samples must be >= 0"):
        syncfree.balanced_sample(LABELS.to("meta"), -3)
    with pytest.raises(RuntimeError, match="got dtype Float"):
        syncfree.balanced_sample(torch.zeros(3, device="meta"), 1)


def test_gather_shape_mismatch():
    with pytest.raises(RuntimeError, match=r"features must have shape \[..., N, \*F\].*\[2, 10\].*\[2, 9, 16\]"):
        syncfree.balanced_sample_gather(torch.zeros(2, 9, 16), LABELS, 4)
    with pytest.raises(RuntimeError, match="features must have shape"):
        syncfree.balanced_sample_gather(torch.zeros(10), LABELS, 4)


def test_gather_device_mismatch():
    with pytest.raises(RuntimeError, match="same device"):
        syncfree.balanced_sample_gather(torch.zeros(2, 10, 3, device="meta"), LABELS, 4)


def test_internal_gather_rejects_bad_indices():
    f, l = torch.randn(10, 3), torch.zeros(10, dtype=torch.long)
    gather = torch.ops.syncfree._gather_sampled
    with pytest.raises(RuntimeError, match=r"index 1000000000 of a valid slot is outside \[0, 10\)"):
        gather(f, l, torch.tensor([5, 10**9]), torch.tensor([True, True]))
    with pytest.raises(RuntimeError, match=r"index -1 of a valid slot"):
        gather(f, l, torch.tensor([5, -1]), torch.tensor([True, True]))
    with pytest.raises(RuntimeError, match=r"must have shape labels.shape\[:-1\] \+ \[K\]"):
        gather(f, l, torch.tensor([[5]]), torch.tensor([[True]]))
    with pytest.raises(RuntimeError, match="indices must be int64 and valid bool"):
        gather(f, l, torch.tensor([5, 1]), torch.tensor([1, 1]))
    # Invalid slots may hold anything: they are never read.
    out, labels = gather(f, l, torch.tensor([3, 10**9]), torch.tensor([True, False]))
    assert torch.equal(out[0], f[3]) and bool((out[1] == 0).all()) and labels.tolist() == [0, -1]
    with pytest.raises(RuntimeError, match=r"_gather_sampled: labels must be bool or an integer tensor .* got dtype Float"):
        gather(f, l.float(), torch.tensor([5, 1]), torch.tensor([True, True]))


def test_generic_gather_treats_out_of_range_slots_as_invalid():
    # The ATen-built gather (backends without a gather kernel) cannot raise
    # without a sync: it never reads out of bounds and gives zero / -1.
    f, l = torch.randn(1, 10, 3), torch.arange(10).reshape(1, 10)
    generic = torch.ops.syncfree._gather_sampled.default
    out, labels = generic._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, f, l,
                                 torch.tensor([[4, 10, -3]]), torch.tensor([[True, True, True]]))
    assert torch.equal(out[0, 0], f[0, 4]) and bool((out[0, 1:] == 0).all())
    assert labels.tolist() == [[4, -1, -1]]
