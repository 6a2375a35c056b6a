"""syncfree.balanced_sample_gather: Meta shapes, values against a manual gather,
lazy views, bool labels, empty rows, and gradients; on CUDA, equal to the CPU."""
import pytest
import torch

import syncfree
from helpers.checks import check_sample, random_labels


def test_meta_shapes_and_dtypes():
    for shape in [(7,), (3, 7), (2, 3, 7)]:
        labels = torch.empty(shape, dtype=torch.int64, device="meta")
        idx, valid = syncfree.balanced_sample(labels, 5)
        assert idx.device.type == "meta" and valid.device.type == "meta"
        assert idx.shape == shape[:-1] + (5,) and valid.shape == shape[:-1] + (5,)
        assert idx.dtype == torch.int64 and valid.dtype == torch.bool
        feats = torch.empty(shape + (4, 2), device="meta")
        f, l, v = syncfree.balanced_sample_gather(feats, labels, 5)
        assert f.shape == shape[:-1] + (5, 4, 2) and f.dtype == feats.dtype
        assert l.shape == shape[:-1] + (5,) and l.dtype == torch.int64
        assert v.shape == shape[:-1] + (5,) and v.dtype == torch.bool


def manual_gather(features, labels, idx, valid):
    lead = labels.shape[:-1]
    B, N, K = labels[..., 0].numel() if labels.dim() > 1 else 1, labels.shape[-1], idx.shape[-1]
    F = features.shape[labels.dim():]
    feats = features.reshape((B, N) + F)
    labs = labels.reshape(B, N)
    idx2, val2 = idx.reshape(B, K), valid.reshape(B, K)
    out_f = torch.zeros((B, K) + F, dtype=features.dtype)
    out_l = torch.full((B, K), -1, dtype=torch.int64)
    for b in range(B):
        for s in range(K):
            if val2[b, s]:
                out_f[b, s] = feats[b, idx2[b, s]]
                out_l[b, s] = int(labs[b, idx2[b, s]])
    return out_f.reshape(lead + (K,) + F), out_l.reshape(lead + (K,))


@pytest.mark.parametrize("lead, F", [((), (16,)), ((3,), (4,)), ((2, 2), ()), ((2,), (2, 3))])
def test_gather_equals_manual_gather(lead, F):
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(-1, 2, lead + (30,), generator=gen)
    features = torch.randn(lead + (30,) + F, generator=gen)
    K = 40  # more than the candidates: invalid slots must be zero / -1
    f, l, v = syncfree.balanced_sample_gather(features, labels, K, seed=3)
    idx, valid = syncfree.balanced_sample(labels, K, seed=3)
    assert torch.equal(v, valid)
    ref_f, ref_l = manual_gather(features, labels, idx, valid)
    assert torch.equal(f, ref_f)
    assert torch.equal(l, ref_l)
    assert bool((~valid).any())
    assert bool((l[~valid] == -1).all()) and bool((f[~valid] == 0).all())


def test_gather_applies_lazy_conjugation_and_negation():
    # The kernels copy bytes; the dispatcher resolves conj/neg views before them.
    labels = torch.randint(0, 2, (2, 30))
    z = torch.randn(2, 30, 4, dtype=torch.complex64)
    for features in [z.conj(), torch._neg_view(torch.randn(2, 30, 4))]:
        f, _, v = syncfree.balanced_sample_gather(features, labels, 10, seed=1)
        ref, _, _ = syncfree.balanced_sample_gather(features.resolve_conj().resolve_neg().clone(), labels, 10, seed=1)
        assert torch.equal(f, ref)


def test_gather_bool_labels_and_empty_rows():
    labels = torch.tensor([[True, False, True], [False, False, False]])
    feats = torch.arange(6.0).reshape(2, 3, 1)
    f, l, v = syncfree.balanced_sample_gather(feats, labels, 4, seed=1)
    assert l.dtype == torch.int64 and set(l[v].tolist()) <= {0, 1}
    f, l, v = syncfree.balanced_sample_gather(torch.zeros(2, 0, 5), torch.zeros(2, 0, dtype=torch.int64), 3)
    assert f.shape == (2, 3, 5) and bool((l == -1).all()) and not bool(v.any())


def test_gather_passes_gradients_to_features():
    labels = torch.tensor([[1, 0, 0, -1, 1, 0]])
    features = torch.randn(1, 6, 3, requires_grad=True)
    f, l, v = syncfree.balanced_sample_gather(features, labels, 8, seed=2)
    weights = torch.randn(f.shape)
    (f * weights).sum().backward()
    idx, valid = syncfree.balanced_sample(labels, 8, seed=2)
    expected = torch.zeros(1, 6, 3)
    for s in range(8):
        if valid[0, s]:
            expected[0, idx[0, s]] += weights[0, s]
    assert torch.allclose(features.grad, expected)
    assert bool((features.grad[0, 3] == 0).all())  # the ignored element


@pytest.mark.parametrize("lead, F", [((3,), (2, 3)), ((2, 2), ()), ((), (4,))])
def test_gather_gradient_in_every_row(lead, F):
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(-1, 2, lead + (12,), generator=gen)
    features = torch.randn(lead + (12,) + F, dtype=torch.float64, requires_grad=True)
    K = 14  # more than the candidates: some slots are invalid
    f, _, v = syncfree.balanced_sample_gather(features, labels, K, seed=9)
    weights = torch.randn(f.shape, dtype=torch.float64, generator=gen)
    (f * weights).sum().backward()
    idx, valid = syncfree.balanced_sample(labels, K, seed=9)
    B = labels[..., 0].numel() if labels.dim() > 1 else 1
    expected = torch.zeros((B, 12) + F, dtype=torch.float64)
    w, i, ok = weights.reshape((B, K) + F), idx.reshape(B, K), valid.reshape(B, K)
    for b in range(B):
        for s in range(K):
            if ok[b, s]:
                expected[b, i[b, s]] += w[b, s]
    assert bool((~valid).any())
    assert torch.equal(features.grad, expected.reshape(features.shape))
    assert torch.autograd.gradcheck(
        lambda x: syncfree.balanced_sample_gather(x, labels, K, seed=9)[0], (features.detach().requires_grad_(),)
    )


def test_gather_gradient_of_empty_rows_is_zero():
    features = torch.randn(2, 0, 3, requires_grad=True)
    f, _, v = syncfree.balanced_sample_gather(features, torch.zeros(2, 0, dtype=torch.int64), 4)
    f.sum().backward()
    assert features.grad.shape == (2, 0, 3) and not bool(v.any())


@pytest.mark.cuda
def test_cuda_invariants_and_gather():
    gen = torch.Generator().manual_seed(1)
    labels = random_labels(torch.int64, (8, 5000), gen, "cuda")
    idx, valid = syncfree.balanced_sample(labels, 300, 0.25)
    check_sample(labels.cpu(), idx.cpu(), valid.cpu(), 300, 0.25)
    features = torch.randn(8, 5000, 16, device="cuda", requires_grad=True)
    f, l, v = syncfree.balanced_sample_gather(features, labels, 300, 0.25, seed=3)
    cf, cl, cv = syncfree.balanced_sample_gather(features.detach().cpu(), labels.cpu(), 300, 0.25, seed=3)
    assert torch.equal(f.detach().cpu(), cf) and torch.equal(l.cpu(), cl) and torch.equal(v.cpu(), cv)
    f.sum().backward()
    assert features.grad is not None and float(features.grad.sum()) == float(v.sum()) * 16


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.int8])
@pytest.mark.parametrize("F, strided", [((16,), False), ((3,), True), ((), False), ((2, 5), False), ((7,), False)])
def test_cuda_gather_equals_cpu(dtype, F, strided):
    gen = torch.Generator().manual_seed(2)
    labels = random_labels(dtype, (2, 3, 700), gen)
    features = torch.randn((2, 3) + F + (700,), generator=gen).movedim(-1, 2)
    if not strided:
        features = features.contiguous()
    for K in [1, 90, 800]:
        cpu = syncfree.balanced_sample_gather(features, labels, K, 0.4, seed=8)
        gpu = syncfree.balanced_sample_gather(features.cuda(), labels.cuda(), K, 0.4, seed=8)
        assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu)), (F, strided, K)
        # The generic ATen gather (for backends without a kernel) agrees on CUDA too.
        idx, valid = syncfree.balanced_sample(labels.cuda(), K, 0.4, seed=8)
        op = torch.ops.syncfree._gather_sampled.default
        generic = op._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, features.cuda(), labels.cuda(), idx, valid)
        assert all(torch.equal(g, c.cuda()) for g, c in zip(generic, cpu[:2]))


@pytest.mark.cuda
def test_cuda_gather_of_padded_and_expanded_features():
    # Layouts the adapter passes to the kernel without a copy: items that are a
    # slice of wider rows (padded strides), and stride-0 (expanded) features.
    gen = torch.Generator().manual_seed(3)
    labels = random_labels(torch.int64, (3, 500), gen)
    wide = torch.randn(3, 500, 16, generator=gen)
    for features in [wide[..., :8], wide[..., 3:7], torch.randn(3, 1, 6, generator=gen).expand(3, 500, 6)]:
        cpu = syncfree.balanced_sample_gather(features, labels, 60, seed=2)
        gpu = syncfree.balanced_sample_gather(features.cuda(), labels.cuda(), 60, seed=2)
        assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu))
