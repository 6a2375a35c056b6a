"""Exact invariants of balanced_sample over many configurations."""
import random

import pytest
import torch

import syncfree
from helpers.checks import LABEL_DTYPES, check_sample

# Every integer label dtype (below uint8, -1 wraps to the largest value: a positive).
INT_DTYPES = [d for d in LABEL_DTYPES if d != torch.bool]


def random_labels(shape, dtype, low=-1, high=3, generator=None):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype == torch.uint8:
        low = 0
    return torch.randint(low, high, shape, generator=generator).to(dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool])
def test_every_label_dtype(dtype):
    labels = random_labels((6, 200), dtype)
    for K in [0, 1, 7, 64, 250]:
        for fill in [False, True]:
            idx, valid = syncfree.balanced_sample(labels, K, 0.25, fill_positives=fill, seed=K)
            check_sample(labels, idx, valid, K, 0.25, 0, fill)


def test_randomized_configurations():
    rng = random.Random(1234)
    gen = torch.Generator().manual_seed(1234)
    for case in range(300):
        lead = rng.choice([(), (3,), (2, 3), (1, 1, 2)])
        N = rng.choice([0, 1, 2, 5, 17, 128, 129, 300, 1000])
        K = rng.choice([0, 1, 2, 3, 7, 10, 64, 200, 1500])
        fraction = rng.choice([0.0, 0.1, 0.25, 0.5, 0.75, 1.0, rng.random()])
        fill = rng.random() < 0.5
        negative_label = rng.choice([0, 0, 1, 2, 80])
        dtype = rng.choice(INT_DTYPES + [torch.bool])
        high = max(3, negative_label + 2)
        labels = random_labels(lead + (N,), dtype, -2, high, generator=gen)
        if rng.random() < 0.3:  # skewed classes
            # In int64: torch.where has no kernel for uint16/32/64 before torch 2.13.
            labels = torch.where(torch.rand(labels.shape, generator=gen) < 0.9,
                                 torch.full_like(labels, negative_label if dtype != torch.bool else 0,
                                                 dtype=torch.int64),
                                 labels.to(torch.int64)).to(dtype)
        idx, valid = syncfree.balanced_sample(labels, K, fraction, negative_label=negative_label,
                                              fill_positives=fill, seed=case)
        check_sample(labels, idx, valid, K, fraction, negative_label, fill)


@pytest.mark.parametrize("fill", [False, True])
def test_edge_cases(fill):
    cases = {
        "all positive": torch.ones(50, dtype=torch.int64),
        "no positives": torch.zeros(50, dtype=torch.int64),
        "all ignored": torch.full((50,), -1, dtype=torch.int64),
        "fewer candidates than K": torch.tensor([1, 0, -1, 0, 1]),
        "one element": torch.tensor([1]),
        "empty row": torch.zeros(0, dtype=torch.int64),
    }
    for name, labels in cases.items():
        for K in [0, 1, 4, 5, 9, 10, 11, 60]:
            idx, valid = syncfree.balanced_sample(labels, K, fill_positives=fill, seed=K)
            check_sample(labels, idx, valid, K, 0.5, 0, fill)


def test_fill_modes_differ_as_documented():
    labels = torch.tensor([1] * 20 + [0] * 3)
    idx, valid = syncfree.balanced_sample(labels, 10, fill_positives=True, seed=0)
    assert int(valid.sum()) == 10  # 7 positives fill in for missing negatives
    assert int((labels[idx[valid]] == 1).sum()) == 7
    idx, valid = syncfree.balanced_sample(labels, 10, fill_positives=False, seed=0)
    assert int(valid.sum()) == 8  # torchvision: 5 positives + 3 negatives
    assert int((labels[idx[valid]] == 1).sum()) == 5


def test_odd_k_truncates_positive_target():
    labels = torch.tensor([1] * 50 + [0] * 50)
    idx, valid = syncfree.balanced_sample(labels, 7, seed=1)
    assert int((labels[idx] == 1).sum()) == 3 and int((labels[idx] == 0).sum()) == 4


def test_custom_negative_label_detectron2_style():
    num_classes = 80
    labels = torch.tensor([num_classes] * 30 + [0, 5, 79] * 5 + [-1] * 10)
    idx, valid = syncfree.balanced_sample(labels, 16, 0.25, negative_label=num_classes,
                                          fill_positives=False, seed=3)
    check_sample(labels, idx, valid, 16, 0.25, num_classes, False)
    picked = labels[idx[valid]]
    assert int((picked == num_classes).sum()) == 12 and int((picked < num_classes).sum()) == 4


def test_uint8_and_negative_label_out_of_dtype_range():
    labels = torch.tensor([0, 1, 2, 255], dtype=torch.uint8)
    idx, valid = syncfree.balanced_sample(labels, 4, negative_label=1000, seed=0)
    check_sample(labels, idx, valid, 4, 0.5, 1000, True)
    assert int(valid.sum()) == 4  # no negatives exist: all four are positives


@pytest.mark.parametrize("lead", [(), (4,), (2, 3), (2, 1, 3)])
def test_leading_dims_and_batch_consistency(lead):
    labels = random_labels(lead + (150,), torch.int64)
    idx, valid = syncfree.balanced_sample(labels, 20, seed=9)
    check_sample(labels, idx, valid, 20)
    # The same rows, flattened to [B, N], give the same samples (rows are keyed
    # by their flat index).
    flat_idx, flat_valid = syncfree.balanced_sample(labels.reshape(-1, 150), 20, seed=9)
    assert torch.equal(flat_idx.reshape(idx.shape), idx)
    assert torch.equal(flat_valid.reshape(valid.shape), valid)


def test_non_contiguous_labels():
    base = random_labels((40, 30), torch.int64)
    for labels in [base.t(), base[:, ::3], base[::2], base.t()[5:, 1::2], base.expand(1, 40, 30)]:
        assert labels.dim() >= 1
        idx, valid = syncfree.balanced_sample(labels, 12, seed=4)
        check_sample(labels, idx, valid, 12)
        ref_idx, ref_valid = syncfree.balanced_sample(labels.contiguous(), 12, seed=4)
        assert torch.equal(idx, ref_idx) and torch.equal(valid, ref_valid)
    # Zero strides (expanded rows) too.
    row = random_labels((25,), torch.int64)
    labels = row.expand(5, 25)
    idx, valid = syncfree.balanced_sample(labels, 8, seed=2)
    check_sample(labels, idx, valid, 8)


def test_empty_batch_and_k_zero_shapes():
    labels = torch.zeros(0, 7, dtype=torch.int64)
    idx, valid = syncfree.balanced_sample(labels, 5, seed=0)
    assert idx.shape == (0, 5) and valid.shape == (0, 5)
    idx, valid = syncfree.balanced_sample(torch.zeros(3, 7, dtype=torch.int64), 0, seed=0)
    assert idx.shape == (3, 0) and valid.shape == (3, 0)


def test_rows_longer_than_one_chunk():
    # 2^16 labels per chunk in the CPU workspace: cross chunk boundaries.
    labels = random_labels((2, 3 * 65536 + 11), torch.int8)
    idx, valid = syncfree.balanced_sample(labels, 5000, 0.3, seed=5)
    check_sample(labels, idx, valid, 5000, 0.3)
