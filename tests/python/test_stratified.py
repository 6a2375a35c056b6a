"""syncfree.stratified_sample (CPU): the take rule, the laws, determinism, errors, TorchScript,
torch.compile, torch.library.opcheck, and the public differentiable gather_sampled.

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
import torch._dynamo

import syncfree
from checks import assert_uniform

P_FAIL = 1e-6
OPS = torch.ops.syncfree
LABEL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


# --- the rule, written independently of the C++ ------------------------------

def reference_takes(class_counts, K, quota, fill):
    """(takes per class, fill count) per the README's rule."""
    takes = []
    remaining = K
    for a, q in zip(class_counts, quota):
        t = min(a, max(q, 0), remaining)
        takes.append(t)
        remaining -= t
    T = sum(takes)
    leftover = sum(class_counts) - T
    F = min(K - T, leftover) if fill else 0
    return takes, F


def check_stratified(labels, quota, K, fill, indices, valid):
    """Asserts every exact invariant, row by row. quota: [C] or labels.shape[:-1] + [C]."""
    quota = torch.as_tensor(quota, dtype=torch.int64)
    C = quota.shape[-1]
    lead = tuple(labels.shape[:-1])
    N = labels.shape[-1]
    assert indices.shape == lead + (K,) and valid.shape == lead + (K,)
    assert indices.dtype == torch.int64 and valid.dtype == torch.bool
    B = math.prod(lead)
    lab = labels.to(torch.int64).reshape(B, N)
    q_rows = quota.expand(lead + (C,)).reshape(B, C)
    idx_rows = indices.reshape(B, K)
    val_rows = valid.reshape(B, K)
    for r in range(B):
        row = lab[r]
        in_class = (row >= 0) & (row < C)
        counts = torch.bincount(row[in_class], minlength=C).tolist()
        takes, F = reference_takes(counts, K, q_rows[r].tolist(), fill)
        V = sum(takes) + F
        v, idx = val_rows[r], idx_rows[r]
        assert bool(v[:V].all()) and not bool(v[V:].any()), (r, V, v)
        assert bool((idx[V:] == -1).all())
        chosen = idx[:V]
        assert bool(((chosen >= 0) & (chosen < N)).all())
        assert len(set(chosen.tolist())) == V, "duplicate index in a row"
        got_labels = row[chosen]
        assert bool(((got_labels >= 0) & (got_labels < C)).all()), "an item of no class was sampled"
        got = torch.bincount(got_labels, minlength=C).tolist()
        for c in range(C):
            assert takes[c] <= got[c] <= counts[c], (r, c, takes[c], got[c], counts[c])
            if not fill:
                assert got[c] == takes[c]
        assert sum(got) - sum(takes) == F
    return True


def random_labels(shape, C, gen, dtype=torch.int64):
    """Labels in [-2, C + 2): some ignored, some of no class, most in a class."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    low = 0 if dtype == torch.uint8 else -2
    return torch.randint(low, C + 2, shape, generator=gen).to(dtype)


# --- invariants -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", LABEL_DTYPES)
@pytest.mark.parametrize("fill", [True, False])
def test_invariants_per_dtype(dtype, fill):
    gen = torch.Generator().manual_seed(1)
    labels = random_labels((6, 40), 3, gen, dtype)
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
    labels = random_labels((5, 300), 1, gen)
    for K, q, fill in ((10, 4, True), (10, 4, False), (300, 300, True), (200, 0, True)):
        idx, valid = syncfree.stratified_sample(labels, K, [q], fill, seed=9)
        check_stratified(labels, [q], K, fill, idx, valid)


def test_zero_quotas_fill_only():
    gen = torch.Generator().manual_seed(3)
    labels = random_labels((4, 500), 4, gen)
    idx, valid = syncfree.stratified_sample(labels, 150, [0, 0, 0, 0], True, seed=1)
    check_stratified(labels, [0, 0, 0, 0], 150, True, idx, valid)
    assert bool(valid.all())
    idx, valid = syncfree.stratified_sample(labels, 150, [0, 0, 0, 0], False, seed=1)
    assert not bool(valid.any()) and bool((idx == -1).all())


def test_tensor_quotas_per_row_with_negative_and_oversize_values():
    gen = torch.Generator().manual_seed(4)
    B, N, C = 40, 60, 5
    labels = random_labels((2, B // 2, N), C, gen)
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
    labels = random_labels((3, 5000), 3, gen)
    for quota, K in (([300, 200, 100], 1000), ([1000, 0, 0], 1000), ([0, 0, 0], 2000), ([5000, 5000, 0], 10000)):
        quota = [min(q, K) for q in quota]
        while sum(quota) > K:
            quota[-1 - [q > 0 for q in reversed(quota)].index(True)] = 0
        for fill in (True, False):
            idx, valid = syncfree.stratified_sample(labels, K, quota, fill, seed=7)
            check_stratified(labels, quota, K, fill, idx, valid)


def test_any_strides():
    gen = torch.Generator().manual_seed(7)
    base = random_labels((8, 30), 3, gen)
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
    labels = random_labels((16, 200), 4, gen)
    a = syncfree.stratified_sample(labels, 50, [10, 5, 5, 5], seed=12)
    b = syncfree.stratified_sample(labels, 50, [10, 5, 5, 5], seed=12)
    c = syncfree.stratified_sample(labels, 50, [10, 5, 5, 5], seed=13)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_batch_split_invariance():
    gen = torch.Generator().manual_seed(10)
    labels = random_labels((12, 300), 3, gen)
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
    other[7] = random_labels((300,), 3, gen)
    changed = syncfree.stratified_sample(other, 60, quota, seed=14)
    keep = torch.arange(12) != 7
    assert torch.equal(changed[0][keep], full[0][keep])


def test_generator_reproducibility_and_fixed_consumption():
    gen = torch.Generator().manual_seed(11)
    labels = random_labels((8, 100), 3, gen)
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


def test_rejected_calls_do_not_consume_randomness():
    labels = torch.zeros(4, 10, dtype=torch.int64)
    bad_calls = [
        lambda g: syncfree.stratified_sample(labels, -1, [0], generator=g),
        lambda g: syncfree.stratified_sample(labels, 4, [3, 2], generator=g),
        lambda g: syncfree.stratified_sample(labels, 4, [-1], generator=g),
        lambda g: syncfree.stratified_sample(labels, 4, torch.tensor([1], dtype=torch.int32), generator=g),
        lambda g: syncfree.stratified_sample(labels.float(), 4, [1], generator=g),
        lambda g: OPS.stratified_sample(labels, 4, torch.zeros(3, 2, dtype=torch.int64), generator=g),
    ]
    for call in bad_calls:
        g = torch.Generator().manual_seed(3)
        before = g.get_state()
        with pytest.raises((RuntimeError, ValueError, TypeError)):
            call(g)
        assert torch.equal(before, g.get_state())


# --- bad input ---------------------------------------------------------------------

def test_bad_input_messages():
    labels = torch.zeros(3, 10, dtype=torch.int64)
    cases = [
        (lambda: syncfree.stratified_sample(labels.float(), 4, [1]), RuntimeError,
         r"stratified_sample: labels must be bool or an integer tensor .* got dtype Float"),
        (lambda: syncfree.stratified_sample(torch.tensor(1), 4, [1]), RuntimeError,
         r"labels must have at least 1 dimension"),
        (lambda: syncfree.stratified_sample(labels, -2, [0]), RuntimeError,
         r"num_samples must be >= 0, got -2"),
        (lambda: syncfree.stratified_sample(labels, 4, [2, -1]), ValueError,
         r"class_quota\[1\] must be >= 0, got -1"),
        (lambda: syncfree.stratified_sample(labels, 4, [3, 2]), ValueError,
         r"sum of class_quota must be <= num_samples \(4\), got 5"),
        (lambda: syncfree.stratified_sample(labels, 4, []), ValueError,
         r"at least one class \(C >= 1\), got an empty sequence"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(0, dtype=torch.int64)), RuntimeError,
         r"at least one class \(C >= 1\), got shape \[0\]"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2, 2, dtype=torch.int64)), RuntimeError,
         r"class_quota must have shape \[C\] or labels.shape\[:-1\] \+ \[C\].* got shape \[2, 2\] for labels of shape \[3, 10\]"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(3, 1, 2, dtype=torch.int64)), RuntimeError,
         r"class_quota must have shape"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros((), dtype=torch.int64)), RuntimeError,
         r"class_quota must have shape"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2, dtype=torch.int32)), RuntimeError,
         r"class_quota must be an int64 tensor, got dtype Int"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2)), RuntimeError,
         r"class_quota must be an int64 tensor, got dtype Float"),
        (lambda: syncfree.stratified_sample(labels, 4, torch.zeros(2, dtype=torch.int64, device="meta")), RuntimeError,
         r"class_quota must be on the labels' device cpu, got a tensor on meta"),
        (lambda: syncfree.stratified_sample(labels, 4, [1.0, 2]), TypeError,
         r"class_quota\[0\] must be an int, got float"),
        (lambda: syncfree.stratified_sample(labels, 4, [True]), TypeError,
         r"class_quota\[0\] must be an int, got bool"),
        (lambda: syncfree.stratified_sample(labels, 4, 3), TypeError,
         r"class_quota must be a sequence of ints or an int64 tensor, got int"),
        (lambda: syncfree.stratified_sample(labels.tolist(), 4, [1]), TypeError,
         r"labels must be a torch.Tensor, got list"),
        (lambda: syncfree.stratified_sample(labels, 4, [1], fill=None), TypeError,
         r"fill must be a bool, got NoneType"),
        (lambda: syncfree.stratified_sample(labels, 4, [1], seed=1, generator=torch.Generator()), RuntimeError,
         r"seed and generator are mutually exclusive"),
    ]
    for call, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            call()


def test_host_quota_sequences_of_other_types():
    labels = torch.tensor([0, 1, 1, 0, 2])
    a = syncfree.stratified_sample(labels, 3, (1, 1, 1), seed=1)
    b = syncfree.stratified_sample(labels, 3, [1, 1, 1], seed=1)
    c = syncfree.stratified_sample(labels, 3, torch.tensor([1, 1, 1]).numpy(), seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[0], c[0])


def test_meta_shapes():
    labels = torch.empty(2, 3, 50, dtype=torch.int64, device="meta")
    idx, valid = OPS.stratified_sample(labels, 7, torch.empty(2, 3, 4, dtype=torch.int64, device="meta"))
    assert idx.shape == (2, 3, 7) and valid.dtype == torch.bool and idx.device.type == "meta"
    with pytest.raises(RuntimeError, match="class_quota must be an int64 tensor"):
        OPS.stratified_sample(labels, 7, torch.empty(4, device="meta"))


# --- gather -------------------------------------------------------------------------

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
    labels = random_labels((2, 3, 40), 3, gen)
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
    with pytest.raises(RuntimeError, match=r"index 7 of a valid slot is outside \[0, 4\)"):
        syncfree.gather_sampled(features, labels, torch.tensor([[7, 0, 1]]), valid)
    with pytest.raises(RuntimeError, match=r"gather_sampled: features must have shape \[\.\.\., N, \*F\]"):
        syncfree.gather_sampled(torch.randn(1, 5), labels, idx, valid)
    with pytest.raises(RuntimeError, match="gather_sampled: indices must be int64 and valid bool, got Int"):
        syncfree.gather_sampled(features, labels, idx.int(), valid)
    with pytest.raises(RuntimeError, match=r"gather_sampled: indices and valid must have shape"):
        syncfree.gather_sampled(features, labels, idx[0], valid[0])
    with pytest.raises(RuntimeError, match="stratified_sample_gather: features must have shape"):
        syncfree.stratified_sample_gather(torch.randn(1, 5), labels, 3, [1, 1, 1])
    with pytest.raises(TypeError, match="indices must be a torch.Tensor"):
        syncfree.gather_sampled(features, labels, [0, 1, 2], valid)


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
    labels = random_labels((4, 30), 3, gen)
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
    labels = random_labels((4, 50), 3, gen)
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
            lab = random_labels((B, N), 3, gen)
            feat = torch.randn(B, N, 3, generator=gen)
            q = torch.randint(0, 5, (B, 3), generator=gen)
            got = compiled_dyn(feat, lab, q)
            want = step(feat, lab, q)
            for a, b in zip(got, want):
                assert torch.allclose(a, b) if a.is_floating_point() else torch.equal(a, b)
    finally:
        torch._dynamo.reset()


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="needs torch.library.opcheck")
def test_opcheck():
    gen = torch.Generator().manual_seed(15)
    for dtype in LABEL_DTYPES:
        for shape, K in (((20,), 6), ((3, 20), 6), ((2, 2, 15), 40), ((2, 0), 3), ((3, 20), 0)):
            labels = random_labels(shape, 3, gen, dtype)
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
    """Per-class anchors for a dense contrastive loss (the README's example)."""

    def forward(self, features, labels, quota):
        idx, valid = syncfree.stratified_sample(labels, 12, quota, True, 31)
        feats, labs = syncfree.gather_sampled(features, labels, idx, valid)
        return feats, labs, valid


@pytest.mark.skipif(not hasattr(torch, "export"), reason="needs torch.export")
def test_torch_export():
    gen = torch.Generator().manual_seed(16)
    labels = random_labels((2, 40), 3, gen)
    features = torch.randn(2, 40, 4, generator=gen)
    quota = torch.tensor([[4, 4, 4], [2, 0, 6]])
    exported = torch.export.export(AnchorSampler(), (features, labels, quota))
    got = exported.module()(features, labels, quota)
    want = AnchorSampler()(features, labels, quota)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "syncfree.stratified_sample.default" in targets


def test_results_do_not_depend_on_the_thread_count():
    # Large enough that the rows are split over threads (cpu/parallel.h):
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
