"""syncfree.stratified_sample with TorchScript, torch.compile,
torch.library.opcheck and torch.export (CPU); opcheck on CUDA."""
import pytest
import torch
import torch._dynamo

import syncfree
from helpers.checks import LABEL_DTYPES, random_class_labels

OPS = torch.ops.syncfree


# --- TorchScript, torch.compile, opcheck ------------------------------------------------

def scripted_list(labels: torch.Tensor, seed: int):
    return syncfree.stratified_sample(labels, 9, [2, 3, 1], True, seed)


def scripted_tensor(labels: torch.Tensor, quota: torch.Tensor, features: torch.Tensor):
    idx, valid = syncfree.stratified_sample(labels, 9, quota, fill=False, seed=4)
    feats, labs = syncfree.gather_sampled(features, labels, idx, valid)
    out = syncfree.stratified_sample_gather(features, labels, 9, quota, False, 4)
    return idx, valid, feats, labs, out[0]


def scripted_bad_quota(labels: torch.Tensor):
    return syncfree.stratified_sample(labels, 2, [2, 1])


def test_torchscript():
    gen = torch.Generator().manual_seed(13)
    labels = random_class_labels((4, 30), 3, gen)
    features = torch.randn(4, 30, 2, generator=gen)
    quota = torch.tensor([3, 1, 2])
    f = torch.jit.script(scripted_list)
    want = syncfree.stratified_sample(labels, 9, [2, 3, 1], True, 5)
    got = f(labels, 5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    g = torch.jit.script(scripted_tensor)
    got = g(labels, quota, features)
    want = scripted_tensor(labels, quota, features)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    h = torch.jit.script(scripted_bad_quota)
    with pytest.raises(Exception, match="sum of class_quota must be <= num_samples"):
        h(labels)


def test_torch_compile_fullgraph_equals_eager():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(14)
    labels = random_class_labels((4, 50), 3, gen)
    features = torch.randn(4, 50, 3, generator=gen, requires_grad=True)
    quota = torch.randint(0, 5, (4, 3), generator=gen)

    def step(features, labels, quota):
        idx, valid = syncfree.stratified_sample(labels, 10, [3, 2, 4], seed=21)
        feats, labs = syncfree.gather_sampled(features, labels, idx, valid)
        sf, sl, sv = syncfree.stratified_sample_gather(features, labels, 10, quota, True, 22)
        return idx, valid, labs, (feats ** 2).sum() + (sf * 3).sum(), sl, sv

    try:
        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        got = compiled(features, labels, quota)
        want = step(features, labels, quota)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
        (g_got,) = torch.autograd.grad(got[3], features)
        (g_want,) = torch.autograd.grad(want[3], features)
        assert torch.allclose(g_got, g_want)
        compiled_dyn = torch.compile(step, fullgraph=True, dynamic=True)
        for B, N in ((4, 50), (6, 70)):
            lab = random_class_labels((B, N), 3, gen)
            feat = torch.randn(B, N, 3, generator=gen)
            q = torch.randint(0, 5, (B, 3), generator=gen)
            got = compiled_dyn(feat, lab, q)
            want = step(feat, lab, q)
            for a, b in zip(got, want):
                assert torch.allclose(a, b) if a.is_floating_point() else torch.equal(a, b)
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="needs torch.library.opcheck")
def test_opcheck():
    gen = torch.Generator().manual_seed(15)
    for dtype in LABEL_DTYPES:
        for shape, K in (((20,), 6), ((3, 20), 6), ((2, 2, 15), 40), ((2, 0), 3), ((3, 20), 0)):
            labels = random_class_labels(shape, 3, gen, dtype)
            quota_shared = torch.tensor([2, 1, 3])
            quota_rows = torch.randint(-1, 4, shape[:-1] + (3,), generator=gen)
            for quota in (quota_shared, quota_rows):
                torch.library.opcheck(OPS.stratified_sample.default, (labels, K, quota),
                                      {"seed": 3, "fill": True})
            features = torch.randn(shape + (2,), generator=gen, requires_grad=True)
            idx, valid = OPS.stratified_sample(labels, K, quota_shared, seed=3)
            torch.library.opcheck(OPS.gather_sampled.default, (features, labels, idx, valid))
            torch.library.opcheck(OPS.stratified_sample_gather.default,
                                  (features, labels, K, quota_shared), {"seed": 3})


class AnchorSampler(torch.nn.Module):
    """Per-class anchors for a dense contrastive loss (docs/operators.md's example)."""

    def forward(self, features, labels, quota):
        idx, valid = syncfree.stratified_sample(labels, 12, quota, True, 31)
        feats, labs = syncfree.gather_sampled(features, labels, idx, valid)
        return feats, labs, valid


@pytest.mark.skipif(not hasattr(torch, "export"), reason="needs torch.export")
def test_torch_export():
    gen = torch.Generator().manual_seed(16)
    labels = random_class_labels((2, 40), 3, gen)
    features = torch.randn(2, 40, 4, generator=gen)
    quota = torch.tensor([[4, 4, 4], [2, 0, 6]])
    exported = torch.export.export(AnchorSampler(), (features, labels, quota))
    got = exported.module()(features, labels, quota)
    want = AnchorSampler()(features, labels, quota)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "syncfree.stratified_sample.default" in targets


@pytest.mark.cuda
def test_cuda_opcheck():
    labels = torch.randint(-1, 3, (3, 500), device="cuda")
    features = torch.randn(3, 500, 4, device="cuda", requires_grad=True)
    quota = torch.tensor([4, 4, 4], device="cuda")
    per_row = torch.randint(-1, 6, (3, 3), device="cuda")
    for q in (quota, per_row):
        torch.library.opcheck(torch.ops.syncfree.stratified_sample.default, (labels, 16, q), {"seed": 1})
    torch.library.opcheck(torch.ops.syncfree.stratified_sample_gather.default, (features, labels, 16, quota), {"seed": 1})
    idx, valid = syncfree.stratified_sample(labels, 16, quota, seed=1)
    torch.library.opcheck(torch.ops.syncfree.gather_sampled.default, (features, labels, idx, valid))
