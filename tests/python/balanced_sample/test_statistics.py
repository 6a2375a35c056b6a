"""Statistical tests of uniformity, with fixed seeds.

Every assertion is a chi-square goodness-of-fit test whose false-failure
probability for an exactly uniform sampler is at most 1e-6 (stated per test;
the seeds are fixed, so a run either passes or fails the same way every time).
Each test draws many independent samples in one call: a batch of identical
rows, each row sampled with its own key.
"""
import itertools
import math

import torch

import syncfree
from helpers.checks import assert_uniform

P_FAIL = 1e-6


def batch_of(row, B):
    return torch.as_tensor(row, dtype=torch.int8).unsqueeze(0).expand(B, -1).contiguous()


def subset_code(idx, valid):
    """Bitmask of the chosen indices of each row (N <= 62)."""
    bits = torch.where(valid, torch.ones_like(idx) << idx.clamp_min(0), torch.zeros_like(idx))
    return bits.sum(-1)


def test_every_subset_equally_likely():
    # 4 positives, 5 negatives, K = 4: 2 of 4 positives and 2 of 5 negatives,
    # C(4,2) * C(5,2) = 60 possible subsets, each with probability 1/60.
    row = [1, 0, 1, 0, 0, 1, 0, 1, 0]
    B = 60 * 1000
    idx, valid = syncfree.balanced_sample(batch_of(row, B), 4, seed=101)
    codes = subset_code(idx, valid)
    pos = [i for i, v in enumerate(row) if v == 1]
    neg = [i for i, v in enumerate(row) if v == 0]
    allowed = [sum(1 << i for i in p + n)
               for p in itertools.combinations(pos, 2) for n in itertools.combinations(neg, 2)]
    counts = torch.bincount(codes, minlength=1 << len(row))
    assert int(counts.sum()) == int(counts[allowed].sum()), "a subset outside the quota appeared"
    assert_uniform(counts[allowed], P_FAIL)


def test_every_subset_equally_likely_with_ignored_and_fill():
    # 4 positives, 1 negative, 3 ignored, K = 4: the target of 2 positives
    # plus the 1 negative leave a slot that fill_positives gives to a third
    # positive: C(4,3) = 4 subsets x 24 orders = 96 equally likely outcomes.
    row = [-1, 1, 0, -1, 1, 1, -1, 1]
    B = 96 * 300
    idx, valid = syncfree.balanced_sample(batch_of(row, B), 4, seed=102)
    assert bool(valid.all())
    assert bool(((torch.tensor(row)[idx] == 1).sum(-1) == 3).all())
    # Encode the ordered 4-tuple in base 8.
    codes = (idx * torch.tensor([512, 64, 8, 1])).sum(-1)
    counts = torch.bincount(codes, minlength=8 ** 4)
    assert int((counts > 0).sum()) == 96
    assert_uniform(counts[counts > 0], P_FAIL)


def test_every_order_equally_likely_small_domain():
    # All 6 items chosen: each of the 720 orders has probability 1/720.
    B = 720 * 60
    idx, valid = syncfree.balanced_sample(torch.ones(B, 6, dtype=torch.int64), 6, 1.0, seed=103)
    codes = (idx * (6 ** torch.arange(5, -1, -1))).sum(-1)
    counts = torch.bincount(codes, minlength=6 ** 6)
    assert int((counts > 0).sum()) == 720
    assert_uniform(counts[counts > 0], P_FAIL)


def test_positions_uniform_in_feistel_domain():
    # 150 positives, 150 negatives, K = 200 (> 128 slots: the Feistel
    # permutation). Item 0 is chosen with probability 2/3 and then sits in each
    # of the 200 slots with equal probability; likewise item 299 (a negative).
    B = 30000
    labels = batch_of([1] * 150 + [0] * 150, B)
    idx, valid = syncfree.balanced_sample(labels, 200, seed=104)
    for item in (0, 299):
        rows, slots = (idx == item).nonzero(as_tuple=True)
        chosen = rows.numel()
        # Chosen about B * 100 / 150 times: binomial, |z| < 5.3 is p < 1e-7.
        z = (chosen - B * 2 / 3) / math.sqrt(B * 2 / 3 * 1 / 3)
        assert abs(z) < 5.3, z
        assert_uniform(torch.bincount(slots, minlength=200), P_FAIL / 2)


def test_inclusion_probability_uniform_within_each_class():
    # 300 positives and 1000 negatives, K = 100: each positive is included with
    # probability 50/300 and each negative with 50/1000. Pearson's statistic
    # of inclusion counts is scaled by (1 - p) * n / (n - 1) under sampling
    # without replacement; dividing it out gives chi-square(n - 1).
    B = 4000
    row = [1] * 300 + [0] * 1000
    gen = torch.Generator().manual_seed(0)
    row = torch.tensor(row)[torch.randperm(1300, generator=gen)]
    idx, valid = syncfree.balanced_sample(batch_of(row, B), 100, seed=105)
    counts = torch.bincount(idx.flatten(), minlength=1300).double()
    for cls, k in ((1, 50), (0, 50)):
        c = counts[row == cls]
        n = c.numel()
        p = k / n
        stat = float(((c - B * p) ** 2 / (B * p)).sum()) / ((1 - p) * n / (n - 1))
        from helpers.checks import chi2_critical

        assert stat < chi2_critical(n - 1, P_FAIL / 2), (cls, stat)


def test_interleaving_uniform_when_classes_differ_in_size():
    # 2 positives among 1000 negatives, K = 6: the 2 positive slots form each
    # of the C(6,2) = 15 patterns with probability 1/15 (a merge ordered by
    # selection keys, as in the top-k sampler, would not).
    row = [0] * 1000
    row[3] = row[600] = 1
    B = 15 * 2000
    idx, valid = syncfree.balanced_sample(batch_of(row, B), 6, seed=106)
    is_pos = (idx == 3) | (idx == 600)
    assert bool((is_pos.sum(-1) == 2).all())
    codes = (is_pos.long() << torch.arange(6)).sum(-1)
    counts = torch.bincount(codes, minlength=64)
    allowed = [(1 << a) | (1 << b) for a, b in itertools.combinations(range(6), 2)]
    assert_uniform(counts[allowed], P_FAIL / 2)
    # Large K (Feistel slot permutation): 3 positives among 2000 negatives,
    # K = 300. Each slot is positive with probability 3/300; Pearson's
    # statistic scaled for sampling 3 slots without replacement.
    row = [0] * 2003
    for i in (10, 1000, 2002):
        row[i] = 1
    B = 20000
    idx, valid = syncfree.balanced_sample(batch_of(row, B), 300, seed=107)
    labels = torch.tensor(row)
    pos_slots = (labels[idx.clamp_min(0)] == 1) & valid
    assert bool((pos_slots.sum(-1) == 3).all())
    counts = pos_slots.sum(0).double()
    p = 3 / 300
    stat = float(((counts - B * p) ** 2 / (B * p)).sum()) / ((1 - p) * 300 / 299)
    from helpers.checks import chi2_critical

    assert stat < chi2_critical(299, P_FAIL / 2), stat


def _joint_uniform(a, b, bins, p):
    counts = torch.bincount(a * bins + b, minlength=bins * bins)
    assert_uniform(counts, p)


def test_rows_of_a_batch_are_independent():
    # K = 1 of 200 positives (a Feistel permutation): the items chosen by
    # neighbouring rows, binned 8 x 8, are jointly uniform.
    B = 2 * 64 * 500
    idx, _ = syncfree.balanced_sample(torch.ones(B, 200, dtype=torch.int8), 1, seed=108)
    bins = idx[:, 0] // 25
    _joint_uniform(bins[0::2], bins[1::2], 8, P_FAIL)


def test_consecutive_calls_are_independent():
    # Two consecutive calls drawing from the default generator: row r of the
    # first and row r of the second are jointly uniform.
    B = 64 * 500
    labels = torch.ones(B, 200, dtype=torch.int8)
    torch.manual_seed(109)
    first = syncfree.balanced_sample(labels, 1)[0][:, 0] // 25
    second = syncfree.balanced_sample(labels, 1)[0][:, 0] // 25
    _joint_uniform(first, second, 8, P_FAIL)


def test_adjacent_seeds_are_independent():
    B = 64 * 500
    labels = torch.ones(B, 200, dtype=torch.int8)
    a = syncfree.balanced_sample(labels, 1, seed=110)[0][:, 0] // 25
    b = syncfree.balanced_sample(labels, 1, seed=111)[0][:, 0] // 25
    _joint_uniform(a, b, 8, P_FAIL)
