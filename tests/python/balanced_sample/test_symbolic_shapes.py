"""Symbolic (dynamic) shapes: the Meta kernels and the autograd backward work
on fake tensors whose sizes are symbolic, as torch.compile(dynamic=True) and
torch.export produce them.

Tracing uses make_fx(tracing_mode="symbolic"), which runs the operators' C++
Meta kernels on such tensors; the traced graph then runs on other shapes.
"""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import syncfree


def symbolic(fn, *args):
    return make_fx(fn, tracing_mode="symbolic")(*args)


def is_symbolic(dim):
    return not isinstance(dim, int)


def test_sample_keeps_batch_dims_symbolic():
    shapes = []

    def fn(labels):
        idx, valid = torch.ops.syncfree.balanced_sample(labels, 8, 0.25, seed=3)
        shapes.append((tuple(idx.shape), tuple(valid.shape)))
        return idx, valid

    graph = symbolic(fn, torch.randint(-1, 3, (4, 5, 100)))
    (idx_shape, valid_shape), = shapes
    assert [is_symbolic(d) for d in idx_shape] == [True, True, False] and idx_shape[2] == 8
    assert [is_symbolic(d) for d in valid_shape] == [True, True, False]
    for shape in [(4, 5, 100), (2, 7, 33), (1, 1, 1)]:  # one graph, other shapes
        labels = torch.randint(-1, 3, shape)
        got = graph(labels)
        want = syncfree.balanced_sample(labels, 8, 0.25, seed=3)
        assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_gather_keeps_all_dims_symbolic():
    shapes = []

    def fn(features, labels):
        out = torch.ops.syncfree.balanced_sample_gather(features, labels, 8, 0.5, seed=4)
        shapes.append([tuple(t.shape) for t in out])
        return out

    graph = symbolic(fn, torch.randn(3, 100, 5), torch.randint(-1, 3, (3, 100)))
    (f_shape, l_shape, v_shape), = shapes
    assert [is_symbolic(d) for d in f_shape] == [True, False, True] and f_shape[1] == 8
    assert [is_symbolic(d) for d in l_shape] == [True, False]
    assert [is_symbolic(d) for d in v_shape] == [True, False]
    for rows, n, width in [(3, 100, 5), (2, 40, 3), (5, 7, 2)]:
        features, labels = torch.randn(rows, n, width), torch.randint(-1, 3, (rows, n))
        got = graph(features, labels)
        want = syncfree.balanced_sample_gather(features, labels, 8, 0.5, seed=4)
        assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_internal_gather_keeps_dims_symbolic():
    shapes = []

    def fn(features, labels, indices, valid):
        out = torch.ops.syncfree._gather_sampled(features, labels, indices, valid)
        shapes.append([tuple(t.shape) for t in out])
        return out

    def inputs(lead, n, k):
        features, labels = torch.randn(lead + (n, 3)), torch.randint(-1, 3, lead + (n,))
        return (features, labels) + tuple(syncfree.balanced_sample(labels, k, seed=5))

    graph = symbolic(fn, *inputs((2, 4), 60, 7))
    (f_shape, l_shape), = shapes
    # Every size comes from an input's: batch and K from indices, F from features.
    assert len(f_shape) == 4 and all(is_symbolic(d) for d in f_shape)
    assert len(l_shape) == 3 and all(is_symbolic(d) for d in l_shape)
    for lead, n, k in [((2, 4), 60, 7), ((3, 2), 10, 12), ((5, 3), 100, 2)]:
        args = inputs(lead, n, k)
        got = graph(*args)
        want = torch.ops.syncfree._gather_sampled(*args)
        assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_shape_checks_still_fire_on_symbolic_sizes():
    def fn(features, labels):
        return torch.ops.syncfree.balanced_sample_gather(features, labels, 8, seed=1)

    with pytest.raises(RuntimeError, match=r"features must have shape \[\.\.\., N, \*F\]"):
        symbolic(fn, torch.randn(3, 100, 5), torch.randint(-1, 3, (3, 101)))


def test_backward_traces_with_symbolic_sizes():
    def fn(features, labels):
        f, _, _ = torch.ops.syncfree.balanced_sample_gather(features, labels, 8, seed=2)
        return torch.autograd.grad((f * f).sum(), features)

    features = torch.randn(3, 50, 4, requires_grad=True)
    graph = symbolic(fn, features, torch.randint(-1, 3, (3, 50)))
    for rows, n in [(3, 50), (2, 20)]:
        features = torch.randn(rows, n, 4, requires_grad=True)
        labels = torch.randint(-1, 3, (rows, n))
        assert torch.equal(graph(features, labels)[0], fn(features, labels)[0])
