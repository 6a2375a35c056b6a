"""Randomness: a pure function of (inputs, arguments, seed, offset)."""
import torch

import syncfree


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
