"""Shared checks of the tests: the contract's invariants and chi-square tests."""
import math
import os

import pytest
import torch

# Every label dtype of the operators: bool, the integer dtypes, and the
# unsigned ones of more than 8 bits (never < 0: no label is ignored).
UNSIGNED_DTYPES = [torch.uint8, torch.uint16, torch.uint32, torch.uint64]
LABEL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                torch.uint16, torch.uint32, torch.uint64]


def assert_same(got, want, close=()):
    """Two sequences of tensors: the same dtypes and shapes, and equal values,
    exactly, but for the positions in ``close`` (within torch.testing.assert_close's
    tolerances: values that another program computes in another order)."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if i in close:
            torch.testing.assert_close(g, w)
        else:
            assert torch.equal(g, w), i


def torchvision_or_skip():
    """torchvision, or a skip without it; on the CI legs that pair torchvision with
    torch (SYNCFREE_EXPECT_TORCHVISION=1) a failed import fails instead."""
    if os.environ.get("SYNCFREE_EXPECT_TORCHVISION") == "1":
        import torchvision  # a failed import fails on the legs that pair torchvision
        return torchvision
    return pytest.importorskip("torchvision")


def random_labels(dtype, shape, gen, device="cpu"):
    """Labels with ignored (-1, signed dtypes only), negative (0) and positive (1, 2)
    items, drawn on the CPU from ``gen``, then moved to ``device``."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool().to(device)
    low = 0 if dtype == torch.uint8 else -1
    return torch.randint(low, 3, shape, generator=gen).to(dtype).to(device)


def reference_quota(P, Q, K, fraction, fill_positives):
    """The quota rule as docs/operators.md states it, written independently of the C++."""
    target = math.floor(K * fraction)
    num_pos = min(P, target)
    num_neg = min(Q, K - num_pos)
    if fill_positives:
        num_pos = min(P, K - num_neg)
    return num_pos, num_neg


def classes(labels, negative_label):
    """(positive mask, negative mask) of labels per the label rule."""
    if labels.dtype == torch.bool:
        return labels.clone(), ~labels
    wide = labels.to(torch.int64)  # uint64 labels of 2^63 and more wrap below 0 here ...
    negative = wide == negative_label
    if labels.dtype in UNSIGNED_DTYPES:  # ... but are positives: unsigned labels are never ignored
        return ~negative, negative
    positive = (wide >= 0) & ~negative
    return positive, negative


def check_sample(labels, indices, valid, K, fraction=0.5, negative_label=0, fill_positives=True):
    """Asserts every exact invariant of the contract, row by row."""
    lead = tuple(labels.shape[:-1])
    N = labels.shape[-1]
    assert indices.shape == lead + (K,), (indices.shape, lead, K)
    assert valid.shape == lead + (K,)
    assert indices.dtype == torch.int64 and valid.dtype == torch.bool
    assert indices.device == labels.device and valid.device == labels.device
    positive, negative = classes(labels, negative_label)
    B = math.prod(lead)
    pos_rows = positive.reshape(B, N)
    neg_rows = negative.reshape(B, N)
    idx_rows = indices.reshape(B, K)
    val_rows = valid.reshape(B, K)
    for r in range(B):
        P = int(pos_rows[r].sum())
        Q = int(neg_rows[r].sum())
        num_pos, num_neg = reference_quota(P, Q, K, fraction, fill_positives)
        V = num_pos + num_neg
        v = val_rows[r]
        idx = idx_rows[r]
        # valid slots first, then -1
        assert bool(v[:V].all()) and not bool(v[V:].any()), (r, v, V)
        assert bool((idx[V:] == -1).all())
        chosen = idx[:V]
        assert bool(((chosen >= 0) & (chosen < N)).all())
        assert len(set(chosen.tolist())) == V, "duplicate index in a row"
        if V:
            assert int(pos_rows[r][chosen].sum()) == num_pos
            assert int(neg_rows[r][chosen].sum()) == num_neg


def chi2_critical(df, p):
    """Upper critical value of the chi-square distribution."""
    from scipy.stats import chi2

    return float(chi2.isf(p, df))


def assert_uniform(counts, p=1e-6, expected=None):
    """Chi-square goodness of fit against the uniform (or `expected`) law.

    Fails with probability p when the sampler is exactly uniform.
    """
    counts = torch.as_tensor(counts, dtype=torch.float64).flatten()
    total = counts.sum()
    if expected is None:
        expected = torch.full_like(counts, float(total) / counts.numel())
    expected = torch.as_tensor(expected, dtype=torch.float64).flatten()
    assert float(expected.min()) >= 5, "too few samples per cell for a chi-square test"
    stat = float(((counts - expected) ** 2 / expected).sum())
    crit = chi2_critical(counts.numel() - 1, p)
    assert stat < crit, f"chi-square {stat:.1f} >= critical {crit:.1f} (df={counts.numel() - 1}, p={p})"
    return stat


# --- stratified_sample ---------------------------------------------------------------

# The rule, written independently of the C++.

def reference_takes(class_counts, K, quota, fill):
    """(takes per class, fill count) per docs/operators.md's rule."""
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


def random_class_labels(shape, C, gen, dtype=torch.int64):
    """Labels in [-2, C + 2): some ignored, some of no class, most in a class."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    low = 0 if dtype in UNSIGNED_DTYPES else -2
    return torch.randint(low, C + 2, shape, generator=gen).to(dtype)
