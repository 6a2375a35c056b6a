"""syncfree.stratified_sample (CPU): the take rule, its invariants for every
label dtype, C = 2 against balanced_sample, the laws, determinism and
randomness.

Every statistical assertion is a chi-square goodness-of-fit test at p = 1e-6:
for an exactly correct sampler it fails with probability at most 1e-6 (the
seeds are fixed, so a run passes or fails the same way every time). The
exact laws are enumerated in Python, independently of the C++.
"""
import itertools
import math
from fractions import Fraction

import pytest
import torch

import syncfree
from helpers.checks import LABEL_DTYPES, assert_uniform, check_stratified, random_class_labels, reference_takes

P_FAIL = 1e-6


# --- invariants -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", LABEL_DTYPES)
@pytest.mark.parametrize("fill", [True, False])
def test_invariants_per_dtype(dtype, fill):
    gen = torch.Generator().manual_seed(1)
    labels = random_class_labels((6, 40), 3, gen, dtype)
    for K in (0, 1, 7, 20, 50):
        for quota in ([2, 3, 1], [0, 0, 0], [K, 0, 0], [0, 0, K]):
            # Host quotas must add up to <= K; tensor quotas may not.
            arg = quota if sum(quota) <= K else torch.tensor(quota)
            idx, valid = syncfree.stratified_sample(labels, K, arg, fill, seed=3)
            check_stratified(labels, quota, K, fill, idx, valid)


def test_bool_labels_are_classes_0_and_1():
    labels = torch.tensor([True, False, True, True, False])
    idx, valid = syncfree.stratified_sample(labels, 5, [1, 2], False, seed=0)
    lab = labels[idx[valid]].tolist()
    assert lab.count(False) == 1 and lab.count(True) == 2
    # C = 1: True (class 1) is out of range and never sampled.
    idx, valid = syncfree.stratified_sample(labels, 5, [1], True, seed=0)
    assert int(valid.sum()) == 2 and not bool(labels[idx[valid]].any())


def test_ignored_and_out_of_range_labels_never_sampled():
    labels = torch.tensor([[-5, 3, 0, -1, 7, 1, 2, 100, 1, -2]] * 50)
    idx, valid = syncfree.stratified_sample(labels, 10, [1, 1, 1], True, seed=5)
    assert bool((valid.sum(-1) == 4).all())  # only 0, 1, 1, 2 are in a class
    got = labels.gather(1, idx.clamp_min(0))[valid]
    assert bool(((got >= 0) & (got < 3)).all())
    check_stratified(labels, [1, 1, 1], 10, True, idx, valid)


def test_empty_rows_and_batches():
    for shape in ((0,), (3, 0), (0, 5), (2, 0, 4)):
        labels = torch.zeros(shape, dtype=torch.int64)
        idx, valid = syncfree.stratified_sample(labels, 4, [2, 2], seed=0)
        assert idx.shape == shape[:-1] + (4,)
        assert bool((idx == -1).all()) and not bool(valid.any())
    idx, valid = syncfree.stratified_sample(torch.zeros(3, 5, dtype=torch.int64), 0, [0], seed=0)
    assert idx.shape == (3, 0) and valid.shape == (3, 0)


def test_single_class():
    gen = torch.Generator().manual_seed(2)
    labels = random_class_labels((5, 300), 1, gen)
    for K, q, fill in ((10, 4, True), (10, 4, False), (300, 300, True), (200, 0, True)):
        idx, valid = syncfree.stratified_sample(labels, K, [q], fill, seed=9)
        check_stratified(labels, [q], K, fill, idx, valid)


def test_zero_quotas_fill_only():
    gen = torch.Generator().manual_seed(3)
    labels = random_class_labels((4, 500), 4, gen)
    idx, valid = syncfree.stratified_sample(labels, 150, [0, 0, 0, 0], True, seed=1)
    check_stratified(labels, [0, 0, 0, 0], 150, True, idx, valid)
    assert bool(valid.all())
    idx, valid = syncfree.stratified_sample(labels, 150, [0, 0, 0, 0], False, seed=1)
    assert not bool(valid.any()) and bool((idx == -1).all())


def test_tensor_quotas_per_row_with_negative_and_oversize_values():
    gen = torch.Generator().manual_seed(4)
    B, N, C = 40, 60, 5
    labels = random_class_labels((2, B // 2, N), C, gen)
    for K in (0, 5, 30, 80):
        quota = torch.randint(-3, K + 4, (2, B // 2, C), generator=gen)
        for fill in (True, False):
            idx, valid = syncfree.stratified_sample(labels, K, quota, fill, seed=11)
            check_stratified(labels, quota, K, fill, idx, valid)
    # A shared [C] tensor behaves as the same list (values checked by hand here).
    quota = [3, 0, 2, 0, 1]
    a = syncfree.stratified_sample(labels, 8, quota, seed=4)
    b = syncfree.stratified_sample(labels, 8, torch.tensor(quota), seed=4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_oversize_tensor_quota_takes_in_class_order():
    # Quotas [5, 5, 5] with K = 6: class 0 takes 5, class 1 the 1 slot left, class 2 none.
    labels = torch.tensor([0] * 8 + [1] * 8 + [2] * 8).repeat(30, 1)
    idx, valid = syncfree.stratified_sample(labels, 6, torch.tensor([5, 5, 5]), True, seed=2)
    counts = torch.stack([(labels.gather(1, idx) == c).sum(-1) for c in range(3)], -1)
    assert bool((counts == torch.tensor([5, 1, 0])).all())
    # A negative quota takes nothing; the fill still may pick that class.
    idx, valid = syncfree.stratified_sample(labels, 4, torch.tensor([-3, 2, 0]), False, seed=2)
    got = labels.gather(1, idx.clamp_min(0))[valid]
    assert bool((got == 1).all()) and int(valid.sum()) == 2 * 30


def test_many_classes():
    # C into the thousands: quotas and labels over 3000 classes.
    gen = torch.Generator().manual_seed(5)
    C, N, K = 3000, 20000, 4000
    labels = torch.randint(-1, C + 50, (3, N), generator=gen)
    quota = torch.randint(0, 3, (3, C), generator=gen)
    for fill in (True, False):
        idx, valid = syncfree.stratified_sample(labels, K, quota, fill, seed=6)
        check_stratified(labels, quota, K, fill, idx, valid)


def test_large_classes_feistel_domains():
    # Classes and slot counts above 128 use the Feistel permutations.
    gen = torch.Generator().manual_seed(6)
    labels = random_class_labels((3, 5000), 3, gen)
    for quota, K in (([300, 200, 100], 1000), ([1000, 0, 0], 1000), ([0, 0, 0], 2000), ([5000, 5000, 0], 10000)):
        quota = [min(q, K) for q in quota]
        while sum(quota) > K:
            quota[-1 - [q > 0 for q in reversed(quota)].index(True)] = 0
        for fill in (True, False):
            idx, valid = syncfree.stratified_sample(labels, K, quota, fill, seed=7)
            check_stratified(labels, quota, K, fill, idx, valid)


def test_any_strides():
    gen = torch.Generator().manual_seed(7)
    base = random_class_labels((8, 30), 3, gen)
    for labels in (base.t(), base[:, ::2], base.t()[::3]):
        want = syncfree.stratified_sample(labels.contiguous(), 9, [2, 3, 1], seed=8)
        got = syncfree.stratified_sample(labels, 9, [2, 3, 1], seed=8)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    quota = torch.tensor([[1, 2, 3]] * 30).t()  # non-contiguous [30, 3]
    got = syncfree.stratified_sample(base.t(), 9, quota.t(), seed=8)
    want = syncfree.stratified_sample(base.t().contiguous(), 9, quota.t().contiguous(), seed=8)
    assert torch.equal(got[0], want[0])


# --- C = 2 against balanced_sample --------------------------------------------------

@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.5, 0.9, 1.0])
def test_two_classes_match_balanced_sample_counts(fraction):
    gen = torch.Generator().manual_seed(8)
    for N in (0, 5, 40, 300):
        # Rows from all-negative to all-positive, with ignored items.
        p_pos = torch.linspace(0, 1, 64).unsqueeze(1)
        u = torch.rand(64, N, generator=gen)
        labels = torch.where(u < p_pos, 1, 0)
        labels = torch.where(torch.rand(64, N, generator=gen) < 0.2, -1, labels)
        for K in (0, 1, 7, 64, 400):
            target = math.floor(K * fraction)
            quota = [K - target, target]
            idx_s, val_s = syncfree.stratified_sample(labels, K, quota, True, seed=1)
            idx_b, val_b = syncfree.balanced_sample(labels, K, fraction, fill_positives=True, seed=1)
            for idx, val in ((idx_s, val_s), (idx_b, val_b)):
                assert idx.shape == (64, K)
            got = labels.gather(1, idx_s.clamp_min(0)) if N else torch.zeros(64, K, dtype=torch.int64)
            want = labels.gather(1, idx_b.clamp_min(0)) if N else torch.zeros(64, K, dtype=torch.int64)
            assert torch.equal(((got == 1) & val_s).sum(-1), ((want == 1) & val_b).sum(-1))
            assert torch.equal(((got == 0) & val_s).sum(-1), ((want == 0) & val_b).sum(-1))


# --- laws (chi-square, p = 1e-6 each) ---------------------------------------------

def batch_of(row, B):
    return torch.as_tensor(row, dtype=torch.int8).unsqueeze(0).expand(B, -1).contiguous()


def subset_code(idx, valid):
    bits = torch.where(valid, torch.ones_like(idx) << idx.clamp_min(0), torch.zeros_like(idx))
    return bits.sum(-1)


def exact_set_law(row, K, quota, fill):
    """Probability of every chosen set, enumerated from the rule: each class's
    quota picks a uniform take_c-subset, the fill a uniform F-subset of the rest."""
    C = len(quota)
    members = [[i for i, v in enumerate(row) if v == c] for c in range(C)]
    takes, F = reference_takes([len(m) for m in members], K, quota, fill)
    law = {}
    choices = [list(itertools.combinations(m, t)) for m, t in zip(members, takes)]
    for picks in itertools.product(*choices):
        quota_set = set(itertools.chain(*picks))
        rest = [i for m in members for i in m if i not in quota_set]
        fills = list(itertools.combinations(rest, F))
        p_quota = Fraction(1, math.prod(len(ch) for ch in choices))
        for extra in fills:
            code = sum(1 << i for i in quota_set | set(extra))
            law[code] = law.get(code, 0) + p_quota / len(fills)
    return law


def assert_set_law(row, K, quota, fill, B, seed):
    idx, valid = syncfree.stratified_sample(batch_of(row, B), K, quota, fill, seed=seed)
    law = exact_set_law(row, K, quota, fill)
    codes = sorted(law)
    counts = torch.bincount(subset_code(idx, valid), minlength=1 << len(row))
    assert int(counts.sum()) == int(counts[codes].sum()), "a set outside the law appeared"
    expected = [float(law[c]) * B for c in codes]
    assert_uniform(counts[codes], P_FAIL, expected=expected)


def test_class_subset_law():
    # Classes of 4, 3 and 2 items, quotas 2, 1, 1, no fill: C(4,2) C(3,1) C(2,1) = 36
    # equally likely sets; an item of no class (label 3) and an ignored one in between.
    row = [0, 1, 3, 0, 2, 1, 0, -1, 2, 0, 1]
    assert_set_law(row, 4, [2, 1, 1], False, 36 * 800, seed=201)


def test_fill_law():
    # Quotas 1 and 1 of classes of 3 and 2 items, 3 more in class 2, K = 4: 2 slots are
    # filled from the 6 leftovers of all classes. The set law is not uniform (it is
    # enumerated exactly); 50 sets.
    row = [2, 0, 1, 2, 0, 1, 2, 0]
    assert_set_law(row, 4, [1, 1, 0], True, 40000, seed=202)


def test_fill_law_with_oversize_quota_and_zero_quota_classes():
    # Tensor quotas [5, 0, 1] with K = 4 on classes of 2, 3 and 2 items: class 0 gives
    # its 2, class 2 its quota of 1, the fill one of the 4 leftovers.
    row = [0, 1, 2, 1, 0, 2, 1]
    B = 30000
    quota = torch.tensor([5, 0, 1])
    idx, valid = syncfree.stratified_sample(batch_of(row, B), 4, quota, True, seed=203)
    law = exact_set_law(row, 4, [2, 0, 1], True)  # take_0 = min(2, 5, 4) = 2, as quota 2
    codes = sorted(law)
    counts = torch.bincount(subset_code(idx, valid), minlength=1 << len(row))
    assert int(counts.sum()) == int(counts[codes].sum())
    assert_uniform(counts[codes], P_FAIL, expected=[float(law[c]) * B for c in codes])


def ordered_codes(idx, n):
    k = idx.shape[-1]
    return (idx * (n ** torch.arange(k - 1, -1, -1))).sum(-1)


def test_interleaving_law_quota_only():
    # Classes of 2, 1, 1 items with quotas 1, 1, 1: 2 sets x 3! orders = 12 equally
    # likely ordered outcomes.
    row = [0, 1, 0, 2]
    B = 12 * 2000
    idx, valid = syncfree.stratified_sample(batch_of(row, B), 3, [1, 1, 1], False, seed=204)
    assert bool(valid.all())
    counts = torch.bincount(ordered_codes(idx, 4), minlength=4 ** 3)
    assert int((counts > 0).sum()) == 12
    assert_uniform(counts[counts > 0], P_FAIL)


def test_interleaving_law_with_fill():
    # Classes of 2 and 2 items, quota [1, 0], K = 3: 1 quota pick of class 0, then 2 of
    # the 3 leftovers; every order of a chosen set equally likely. Exact law enumerated.
    row = [1, 0, 1, 0]
    B = 60000
    idx, valid = syncfree.stratified_sample(batch_of(row, B), 3, [1, 0], True, seed=205)
    assert bool(valid.all())
    law = exact_set_law(row, 3, [1, 0], True)
    expected = {}
    for code, p in law.items():
        items = [i for i in range(4) if code >> i & 1]
        for order in itertools.permutations(items):
            expected[sum(v * 4 ** (2 - j) for j, v in enumerate(order))] = p / 6
    cells = sorted(expected)
    counts = torch.bincount(ordered_codes(idx, 4), minlength=4 ** 3)
    assert int(counts.sum()) == int(counts[cells].sum())
    assert_uniform(counts[cells], P_FAIL, expected=[float(expected[c]) * B for c in cells])


def test_single_source_orders_are_uniform():
    # One class by quota alone, or the fill alone: the slot permutation is skipped
    # there (the class's own permutation orders the slots); every order equally likely.
    row = [0, 2, 0, 0, 1, 0]
    B = 4 * 3 * 2 * 800
    idx, valid = syncfree.stratified_sample(batch_of(row, B), 3, [3, 0, 0], False, seed=206)
    counts = torch.bincount(ordered_codes(idx, 6), minlength=6 ** 3)
    assert int((counts > 0).sum()) == 24  # ordered 3-subsets of the 4 items of class 0
    assert_uniform(counts[counts > 0], P_FAIL)
    idx, valid = syncfree.stratified_sample(batch_of(row, 120 * 300), 3, [0, 0, 0], True, seed=207)
    counts = torch.bincount(ordered_codes(idx, 6), minlength=6 ** 3)
    assert int((counts > 0).sum()) == 120  # ordered 3-subsets of all 6 items
    assert_uniform(counts[counts > 0], P_FAIL)


def test_feistel_domain_laws():
    # Class 0 of 300 items with quota 100, class 1 of 150 items with quota 50, fill of
    # 100 more from the 300 leftovers, K = 250 slots (every permutation above 128).
    # Each class-0 item is chosen by the quota with probability 1/3 (the per-item
    # counts, over B rows, against the uniform law: selection without replacement makes
    # the chi-square statistic smaller than its multinomial law, so p <= 1e-6); a fixed
    # item's slot, when chosen, is uniform over the 250 slots.
    B = 6000
    row = [0] * 300 + [1] * 150
    labels = batch_of(row, B)
    idx, valid = syncfree.stratified_sample(labels, 150, [100, 50], False, seed=208)
    chosen = torch.bincount(idx[:, :][labels.gather(1, idx) == 0], minlength=300)
    assert int(chosen.sum()) == 100 * B
    assert_uniform(chosen, P_FAIL)
    idx, valid = syncfree.stratified_sample(labels, 250, [100, 50], True, seed=209)
    for item in (0, 449):
        rows, slots = (idx == item).nonzero(as_tuple=True)
        assert_uniform(torch.bincount(slots, minlength=250), P_FAIL)


# --- determinism and randomness --------------------------------------------------

def test_seed_is_deterministic_and_seeds_differ():
    gen = torch.Generator().manual_seed(9)
    labels = random_class_labels((16, 200), 4, gen)
    a = syncfree.stratified_sample(labels, 50, [10, 5, 5, 5], seed=12)
    b = syncfree.stratified_sample(labels, 50, [10, 5, 5, 5], seed=12)
    c = syncfree.stratified_sample(labels, 50, [10, 5, 5, 5], seed=13)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_batch_split_invariance():
    gen = torch.Generator().manual_seed(10)
    labels = random_class_labels((12, 300), 3, gen)
    quota = torch.randint(-1, 40, (12, 3), generator=gen)
    full = syncfree.stratified_sample(labels, 60, quota, seed=14)
    # A prefix of the rows, and another batch layout, give the same rows.
    head = syncfree.stratified_sample(labels[:5], 60, quota[:5], seed=14)
    assert torch.equal(head[0], full[0][:5])
    shaped = syncfree.stratified_sample(labels.reshape(3, 4, 300), 60, quota.reshape(3, 4, 3), seed=14)
    assert torch.equal(shaped[0].reshape(12, 60), full[0])
    # One row alone at flat index 0 equals row 0 of the batch.
    one = syncfree.stratified_sample(labels[0], 60, quota[0], seed=14)
    assert torch.equal(one[0], full[0][0])
    # A row's result depends on its own labels only.
    other = labels.clone()
    other[7] = random_class_labels((300,), 3, gen)
    changed = syncfree.stratified_sample(other, 60, quota, seed=14)
    keep = torch.arange(12) != 7
    assert torch.equal(changed[0][keep], full[0][keep])


def test_generator_reproducibility_and_fixed_consumption():
    gen = torch.Generator().manual_seed(11)
    labels = random_class_labels((8, 100), 3, gen)
    torch.manual_seed(0)
    a = syncfree.stratified_sample(labels, 30, [5, 5, 5])
    b = syncfree.stratified_sample(labels, 30, [5, 5, 5])
    torch.manual_seed(0)
    a2 = syncfree.stratified_sample(labels, 30, [5, 5, 5])
    assert torch.equal(a[0], a2[0]) and not torch.equal(a[0], b[0])
    # One 64-bit draw per call, whatever the data: the same advance as balanced_sample's.
    g1 = torch.Generator().manual_seed(5)
    g2 = torch.Generator().manual_seed(5)
    syncfree.stratified_sample(labels, 30, [5, 5, 5], generator=g1)
    syncfree.balanced_sample(labels, 3, generator=g2)
    assert torch.equal(g1.get_state(), g2.get_state())
    syncfree.stratified_sample(labels[:, :0], 0, [0], generator=g1)  # empty: still one draw
    syncfree.balanced_sample(labels, 3, generator=g2)
    assert torch.equal(g1.get_state(), g2.get_state())
    # An explicit generator gives the same as the default one with the same state.
    g3 = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    assert torch.equal(syncfree.stratified_sample(labels, 30, [5, 5, 5], generator=g3)[0], a[0])


def test_results_do_not_depend_on_the_thread_count():
    # Large enough that the rows are split over threads (cpu/common.h):
    # 64 rows of 2 * 20000 + 12 * 512 units each.
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(-1, 30, (64, 20000), generator=gen)
    quota = torch.randint(0, 30, (64, 29), generator=gen)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = syncfree.stratified_sample(labels, 512, quota, seed=3)
        torch.set_num_threads(max(2, before))
        many = syncfree.stratified_sample(labels, 512, quota, seed=3)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])
    assert int(one[1].sum()) > 0
