"""Randomness: a pure function of (inputs, arguments, seed, offset), the same
on every device (CUDA equals the CPU bit for bit)."""
import pytest
import torch

import syncfree
from helpers.checks import LABEL_DTYPES, random_labels


def labels_for_test():
    return torch.randint(-1, 3, (4, 500), generator=torch.Generator().manual_seed(0))


def test_same_seed_same_output():
    labels = labels_for_test()
    a = syncfree.balanced_sample(labels, 50, seed=123)
    b = syncfree.balanced_sample(labels, 50, seed=123)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_seed_does_not_touch_the_generator():
    labels = labels_for_test()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    syncfree.balanced_sample(labels, 50, seed=1)
    assert torch.equal(torch.rand(3), expected)


def test_different_seeds_differ():
    labels = labels_for_test()
    outs = [syncfree.balanced_sample(labels, 50, seed=s)[0] for s in range(5)]
    for i in range(5):
        for j in range(i + 1, 5):
            assert not torch.equal(outs[i], outs[j])


def test_negative_and_large_seeds():
    labels = labels_for_test()
    a = syncfree.balanced_sample(labels, 50, seed=-1)[0]
    b = syncfree.balanced_sample(labels, 50, seed=2**63 - 1)[0]
    assert not torch.equal(a, b)


def test_consecutive_generator_draws_differ_and_manual_seed_reproduces():
    labels = labels_for_test()
    torch.manual_seed(77)
    first = [syncfree.balanced_sample(labels, 50)[0] for _ in range(3)]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    torch.manual_seed(77)
    again = [syncfree.balanced_sample(labels, 50)[0] for _ in range(3)]
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_explicit_generator():
    labels = labels_for_test()
    g1 = torch.Generator().manual_seed(3)
    g2 = torch.Generator().manual_seed(3)
    assert torch.equal(syncfree.balanced_sample(labels, 50, generator=g1)[0],
                       syncfree.balanced_sample(labels, 50, generator=g2)[0])
    # The generator advances by a fixed amount per call, whatever the data:
    # one 64-bit draw.
    g3 = torch.Generator().manual_seed(3)
    syncfree.balanced_sample(torch.zeros(0, dtype=torch.int64), 0, generator=g3)
    g4 = torch.Generator().manual_seed(3)
    syncfree.balanced_sample(labels, 400, generator=g4)
    assert torch.equal(g3.get_state(), g4.get_state())
    g5 = torch.Generator().manual_seed(3)
    torch.randint(0, 2**62, (1,), generator=g5)  # one 64-bit draw
    assert torch.equal(g3.get_state(), g5.get_state())


def test_rows_are_keyed_by_flat_index():
    # A row's sample depends on its flat row index, the row's labels, the
    # arguments and the seed only: changing another row changes nothing.
    labels = labels_for_test()
    other = labels.clone()
    other[1] = 0
    a = syncfree.balanced_sample(labels, 50, seed=8)[0]
    b = syncfree.balanced_sample(other, 50, seed=8)[0]
    assert torch.equal(a[0], b[0]) and torch.equal(a[2:], b[2:])
    # Prefix of a batch: the same rows get the same samples.
    c = syncfree.balanced_sample(labels[:2], 50, seed=8)[0]
    assert torch.equal(a[:2], c)


def test_generator_advances_by_a_fixed_amount_and_reproduces(device):
    labels = torch.randint(0, 2, (2, 1000), device=device)
    torch.manual_seed(3)
    a = [syncfree.balanced_sample(labels, 50)[0] for _ in range(2)]
    torch.manual_seed(3)
    b = [syncfree.balanced_sample(labels, 50)[0] for _ in range(2)]
    assert not torch.equal(a[0], a[1])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # The same advance whatever the data (here: a large call and an empty one).
    g1 = torch.Generator(device=device).manual_seed(9)
    g2 = torch.Generator(device=device).manual_seed(9)
    syncfree.balanced_sample(labels, 50, generator=g1)
    syncfree.balanced_sample(torch.zeros(0, device=device, dtype=torch.long), 0, generator=g2)
    assert torch.equal(g1.get_state(), g2.get_state())
    g3 = torch.Generator(device=device).manual_seed(9)
    assert not torch.equal(g1.get_state(), g3.get_state())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", LABEL_DTYPES)
def test_cuda_equals_cpu_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(0)
    # 16384 / 16385: both sides of the one-launch limit of the kernels.
    for shape in [(1000,), (4, 300), (2, 3, 129), (2, 3 * 65536 + 17), (2, 3 * 8192 + 17), (3, 0), (64, 5), (2, 16384), (2, 16385)]:
        labels = random_labels(dtype, shape, gen)
        for K in [0, 1, 7, shape[-1] // 10 + 1, shape[-1] + 3]:
            for fill in [False, True]:
                for seed in [0, 12345, -7]:
                    kw = dict(fill_positives=fill, seed=seed)
                    ci, cv = syncfree.balanced_sample(labels, K, 0.3, **kw)
                    gi, gv = syncfree.balanced_sample(labels.cuda(), K, 0.3, **kw)
                    assert torch.equal(gi.cpu(), ci) and torch.equal(gv.cpu(), cv), (shape, K, fill, seed)
