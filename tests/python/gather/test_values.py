"""syncfree.gather_sampled (and the internal _gather_sampled below it): values,
gradients, errors that name gather_sampled, and the generic (ATen) kernel of
backends without one of their own."""
import math

import pytest
import torch

import syncfree
from helpers.checks import random_class_labels


def manual_gather(features, labels, idx, valid):
    B = math.prod(labels.shape[:-1])
    N, K = labels.shape[-1], idx.shape[-1]
    f = features.reshape(B, N, -1)
    i = idx.reshape(B, K).clamp_min(0)
    out = torch.gather(f, 1, i.unsqueeze(-1).expand(B, K, f.shape[-1]))
    out = out * valid.reshape(B, K, 1)
    lab = torch.where(valid.reshape(B, K), labels.reshape(B, N).to(torch.int64).gather(1, i), -1)
    return out.reshape(idx.shape + features.shape[labels.dim():]), lab.reshape(idx.shape)


def test_gather_sampled_values_and_gradients():
    gen = torch.Generator().manual_seed(12)
    labels = random_class_labels((2, 3, 40), 3, gen)
    features = torch.randn(2, 3, 40, 5, generator=gen, requires_grad=True)
    idx, valid = syncfree.stratified_sample(labels, 12, [3, 3, 3], seed=15)
    feats, labs = syncfree.gather_sampled(features, labels, idx, valid)
    want_f, want_l = manual_gather(features, labels, idx, valid)
    assert torch.equal(feats, want_f) and torch.equal(labs, want_l)
    weights = torch.randn(feats.shape, generator=gen)
    (grad,) = torch.autograd.grad((feats * weights).sum(), features)
    (want_grad,) = torch.autograd.grad((want_f * weights).sum(), features)
    assert torch.allclose(grad, want_grad)
    # Also for balanced_sample's output, and through stratified_sample_gather.
    idx_b, valid_b = syncfree.balanced_sample(labels, 12, seed=15)
    assert torch.equal(syncfree.gather_sampled(features, labels, idx_b, valid_b)[0],
                       manual_gather(features, labels, idx_b, valid_b)[0])
    sf, sl, sv = syncfree.stratified_sample_gather(features, labels, 12, [3, 3, 3], seed=15)
    assert torch.equal(sf, feats) and torch.equal(sl, labs) and torch.equal(sv, valid)
    (grad2,) = torch.autograd.grad((sf * weights).sum(), features)
    assert torch.allclose(grad2, want_grad)
    assert torch.autograd.gradcheck(
        lambda f: syncfree.gather_sampled(f, labels, idx, valid)[0],
        (features.detach().double().requires_grad_(),))


def test_gather_sampled_no_grad_and_errors():
    labels = torch.tensor([[0, 1, 2, 1]])
    features = torch.randn(1, 4, 2)
    idx, valid = syncfree.stratified_sample(labels, 3, [1, 1, 1], seed=0)
    with torch.no_grad():
        f, l = syncfree.gather_sampled(features.requires_grad_(), labels, idx, valid)
    assert not f.requires_grad
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: index 7 of a valid slot is outside \[0, 4\)"):
        syncfree.gather_sampled(features, labels, torch.tensor([[7, 0, 1]]), valid)
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: features must have shape \[\.\.\., N, \*F\]"):
        syncfree.gather_sampled(torch.randn(1, 5), labels, idx, valid)
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: indices must be int64 and valid bool, got Int"):
        syncfree.gather_sampled(features, labels, idx.int(), valid)
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: indices and valid must have shape"):
        syncfree.gather_sampled(features, labels, idx[0], valid[0])
    with pytest.raises(RuntimeError, match=r"^syncfree\.stratified_sample_gather: features must have shape"):
        syncfree.stratified_sample_gather(torch.randn(1, 5), labels, 3, [1, 1, 1])
    with pytest.raises(TypeError, match=r"^syncfree\.gather_sampled: indices must be a torch.Tensor"):
        syncfree.gather_sampled(features, labels, [0, 1, 2], valid)


def test_gather_sampled_backward_ignores_invalid_slots_with_any_index():
    # An invalid slot's index is never used, in the forward or the backward,
    # whatever it holds (here past the end and negative).
    features = torch.randn(1, 4, 3, requires_grad=True)
    labels = torch.zeros(1, 4, dtype=torch.long)
    indices = torch.tensor([[2, 10, -7]])
    valid = torch.tensor([[True, False, False]])
    sampled, sampled_labels = syncfree.gather_sampled(features, labels, indices, valid)
    sampled.sum().backward()
    expected = torch.zeros(1, 4, 3)
    expected[0, 2] = 1
    assert torch.equal(features.grad, expected)
    assert sampled_labels.tolist() == [[0, -1, -1]]


def test_internal_gather_rejects_bad_indices():
    f, l = torch.randn(10, 3), torch.zeros(10, dtype=torch.long)
    gather = torch.ops.syncfree._gather_sampled
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: index 1000000000 of a valid slot is outside \[0, 10\)"):
        gather(f, l, torch.tensor([5, 10**9]), torch.tensor([True, True]))
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: index -1 of a valid slot"):
        gather(f, l, torch.tensor([5, -1]), torch.tensor([True, True]))
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: indices and valid must have shape labels.shape\[:-1\] \+ \[K\]"):
        gather(f, l, torch.tensor([[5]]), torch.tensor([[True]]))
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: indices must be int64 and valid bool"):
        gather(f, l, torch.tensor([5, 1]), torch.tensor([1, 1]))
    # Invalid slots may hold anything: they are never read.
    out, labels = gather(f, l, torch.tensor([3, 10**9]), torch.tensor([True, False]))
    assert torch.equal(out[0], f[3]) and bool((out[1] == 0).all()) and labels.tolist() == [0, -1]
    with pytest.raises(RuntimeError, match=r"^syncfree\.gather_sampled: labels must be bool or an integer tensor .* got dtype Float"):
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
