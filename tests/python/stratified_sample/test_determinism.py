"""syncfree.stratified_sample's randomness on every device: the generator
advances by a fixed amount per call (balanced_sample's), and CUDA equals the
CPU bit for bit (shared and per-row quotas, many classes, strides, the
gathers)."""
import pytest
import torch

import syncfree
from helpers.checks import LABEL_DTYPES


def class_labels_on(device, shape, C, dtype, gen):
    """Labels in [-2, C + 2) (some of no class), half of them in class 0 or 1."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool().to(device)
    low = 0 if dtype == torch.uint8 else -2
    labels = torch.randint(low, C + 2, shape, generator=gen)
    labels = torch.where(torch.rand(shape, generator=gen) < 0.5, labels.remainder(min(C, 2)), labels)
    return labels.to(dtype).to(device)


def test_generator_advances_like_balanced_sample(device):
    labels = torch.randint(0, 3, (2, 1000), device=device)
    quota = torch.tensor([20, 20, 10], device=device)
    torch.manual_seed(3)
    a = [syncfree.stratified_sample(labels, 50, quota)[0] for _ in range(2)]
    torch.manual_seed(3)
    b = [syncfree.stratified_sample(labels, 50, quota)[0] for _ in range(2)]
    assert not torch.equal(a[0], a[1])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # The same advance whatever the data, and the same as balanced_sample's.
    g1 = torch.Generator(device=device).manual_seed(9)
    g2 = torch.Generator(device=device).manual_seed(9)
    g3 = torch.Generator(device=device).manual_seed(9)
    syncfree.stratified_sample(labels, 50, quota, generator=g1)
    syncfree.stratified_sample(labels[:, :0], 0, quota, generator=g2)
    syncfree.balanced_sample(labels, 50, generator=g3)
    assert torch.equal(g1.get_state(), g2.get_state()) and torch.equal(g1.get_state(), g3.get_state())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", LABEL_DTYPES)
def test_cuda_equals_cpu_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(20)
    # 2048: one sort tile of the kernels; 4096: one count tile; 70000: many of both.
    for shape in [(1000,), (4, 300), (2, 3, 129), (2, 70000), (3, 0), (64, 5), (2, 2049), (1, 4097)]:
        for C in [1, 2, 3, 21, 150]:
            if dtype == torch.bool and C > 3:
                continue
            labels = class_labels_on("cpu", shape, C, dtype, gen)
            for K in [0, 1, 7, shape[-1] // 10 + 1, shape[-1] + 3]:
                shared = torch.randint(-2, K // C + 3, (C,), generator=gen)
                per_row = torch.randint(-2, K + 3, shape[:-1] + (C,), generator=gen)
                for quota in (shared, per_row):
                    for fill in [False, True]:
                        for seed in [0, -7]:
                            kw = dict(fill=fill, seed=seed)
                            ci, cv = syncfree.stratified_sample(labels, K, quota, **kw)
                            gi, gv = syncfree.stratified_sample(labels.cuda(), K, quota.cuda(), **kw)
                            assert torch.equal(gi.cpu(), ci) and torch.equal(gv.cpu(), cv), (shape, C, K, fill, seed)


@pytest.mark.cuda
@pytest.mark.parametrize("C", [1000, 3000, 9000])
def test_cuda_many_classes_equals_cpu(C):
    # Shared-memory and global paths of the count and plan kernels.
    gen = torch.Generator().manual_seed(21)
    labels = torch.randint(-1, C + 50, (3, 20000), generator=gen)
    quota = torch.randint(-1, 4, (3, C), generator=gen)
    for K in [1, 512, 4000, 20003]:
        for fill in [False, True]:
            ci, cv = syncfree.stratified_sample(labels, K, quota, fill, seed=3)
            gi, gv = syncfree.stratified_sample(labels.cuda(), K, quota.cuda(), fill, seed=3)
            assert torch.equal(gi.cpu(), ci) and torch.equal(gv.cpu(), cv), (C, K, fill)


@pytest.mark.cuda
def test_cuda_list_quotas_strides_and_gather():
    gen = torch.Generator().manual_seed(22)
    base = class_labels_on("cpu", (8, 600), 4, torch.int64, gen)
    for labels in (base, base.t().contiguous().t(), base[:, ::2]):
        want = syncfree.stratified_sample(labels, 40, [10, 5, 0, 5], seed=4)
        got = syncfree.stratified_sample(labels.cuda(), 40, [10, 5, 0, 5], seed=4)
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    quota = torch.randint(0, 9, (4, 8), generator=gen).t()  # non-contiguous [8, 4]
    want = syncfree.stratified_sample(base, 30, quota, seed=5)
    got = syncfree.stratified_sample(base.cuda(), 30, quota.cuda(), seed=5)
    assert torch.equal(got[0].cpu(), want[0])
    features = torch.randn(8, 600, 16, generator=gen)
    cpu = syncfree.stratified_sample_gather(features, base, 40, [10, 5, 0, 5], seed=6)
    gpu = syncfree.stratified_sample_gather(features.cuda(), base.cuda(), 40, [10, 5, 0, 5], seed=6)
    assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu))
    idx, valid = syncfree.stratified_sample(base.cuda(), 40, [10, 5, 0, 5], seed=6)
    f, l = syncfree.gather_sampled(features.cuda(), base.cuda(), idx, valid)
    assert torch.equal(f.cpu(), cpu[0]) and torch.equal(l.cpu(), cpu[1])
