"""Shared checks of the tests: the contract's invariants and chi-square tests."""
import math

import torch


def reference_quota(P, Q, K, fraction, fill_positives):
    """The quota rule as the README states it, written independently of the C++."""
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
    wide = labels.to(torch.int64)
    negative = wide == negative_label
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
