"""Drop-in samplers for torchvision and detectron2."""
import itertools
import random

import pytest
import torch

from checks import chi2_critical
from syncfree.compat import detectron2 as sf_d2

tv_utils = pytest.importorskip("torchvision.models.detection._utils")
from syncfree.compat import torchvision as sf_tv  # noqa: E402

P_FAIL = 1e-6


def random_matched_idxs(rng, gen):
    """One image's matched_idxs: -2/-1 ignored, 0 negative, >= 1 positive."""
    n = rng.choice([0, 1, 5, 50, 300, 2000])
    kind = rng.choice(["mixed", "no_pos", "no_neg", "ignored_only", "float"])
    if kind == "mixed":
        m = torch.randint(-2, 5, (n,), generator=gen)
    elif kind == "no_pos":
        m = torch.randint(-1, 1, (n,), generator=gen)
    elif kind == "no_neg":
        m = torch.randint(1, 4, (n,), generator=gen) * torch.where(torch.rand(n, generator=gen) < 0.2, -1, 1)
    elif kind == "ignored_only":
        m = torch.full((n,), -1)
    else:  # torchvision's RPN passes float labels: 1.0, 0.0, -1.0
        m = torch.randint(-1, 2, (n,), generator=gen).float()
    return m


def test_counts_equal_torchvisions():
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    for case in range(150):
        images = [random_matched_idxs(rng, gen) for _ in range(rng.randint(1, 4))]
        K = rng.choice([1, 7, 64, 256, 512])
        frac = rng.choice([0.25, 0.5, 0.7])
        ours = sf_tv.BalancedPositiveNegativeSampler(K, frac)(images)
        theirs = tv_utils.BalancedPositiveNegativeSampler(K, frac)(images)
        for m, op, on, tp, tn in zip(images, *ours, *theirs):
            assert op.dtype == torch.uint8 and on.dtype == torch.uint8
            assert op.shape == m.shape and on.shape == m.shape
            assert int(op.sum()) == int(tp.sum()) and int(on.sum()) == int(tn.sum()), case
            assert bool((m[op.bool()] >= 1).all()) and bool((m[on.bool()] == 0).all())
            assert not bool((op.bool() & on.bool()).any())


def test_every_eligible_anchor_equally_likely():
    # One image, repeated: each positive is chosen with probability num_pos/P
    # and each negative with num_neg/Q, as under torchvision's sampler.
    # Pearson's statistic is scaled for sampling without replacement (see
    # test_statistics.py); false-failure probability < 1e-6 per class.
    gen = torch.Generator().manual_seed(1)
    image = torch.randint(-1, 3, (400,), generator=gen)
    copies = 3000
    torch.manual_seed(2)
    pos_masks, neg_masks = sf_tv.BalancedPositiveNegativeSampler(64, 0.25)([image] * copies)
    for masks, eligible in ((pos_masks, image >= 1), (neg_masks, image == 0)):
        counts = torch.stack(masks).double().sum(0)[eligible]
        assert int(counts.sum()) > 0
        n = counts.numel()
        k = int(masks[0].sum())
        p = k / n
        stat = float(((counts - copies * p) ** 2 / (copies * p)).sum()) / ((1 - p) * n / (n - 1))
        assert stat < chi2_critical(n - 1, P_FAIL), stat
        assert int(torch.stack(masks).double().sum(0)[~eligible].sum()) == 0


def test_patch_and_unpatch():
    original = tv_utils.BalancedPositiveNegativeSampler
    with sf_tv.patched():
        assert tv_utils.BalancedPositiveNegativeSampler is sf_tv.BalancedPositiveNegativeSampler
    assert tv_utils.BalancedPositiveNegativeSampler is original


def test_patched_faster_rcnn_training_step():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=3, min_size=128, max_size=128)
    sf_tv.patch(model)
    try:
        samplers = [m.fg_bg_sampler for m in model.modules() if hasattr(m, "fg_bg_sampler")]
        assert len(samplers) == 2 and all(isinstance(s, sf_tv.BalancedPositiveNegativeSampler) for s in samplers)
        model.train()
        images = [torch.rand(3, 128, 128) for _ in range(2)]
        targets = [dict(boxes=torch.tensor([[10.0, 20.0, 60.0, 90.0], [50.0, 40.0, 120.0, 110.0]]),
                        labels=torch.tensor([1, 2])) for _ in range(2)]
        before = sf_tv.BalancedPositiveNegativeSampler.calls
        losses = model(images, targets)
        assert sf_tv.BalancedPositiveNegativeSampler.calls - before == 2  # RPN and ROI heads
        loss = sum(losses.values())
        assert all(bool(torch.isfinite(v)) for v in losses.values())
        loss.backward()
        grads = [p.grad for p in model.backbone.parameters() if p.grad is not None]
        assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    finally:
        sf_tv.unpatch(model)
    assert not any(isinstance(getattr(m, "fg_bg_sampler", None), sf_tv.BalancedPositiveNegativeSampler)
                   for m in model.modules())


def reference_subsample_labels(labels, num_samples, positive_fraction, bg_label):
    """detectron2's documented rule, as (positive set, negative set, num_pos, num_neg)."""
    positive = ((labels != -1) & (labels != bg_label)).nonzero().flatten().tolist()
    negative = (labels == bg_label).nonzero().flatten().tolist()
    num_pos = min(len(positive), int(num_samples * positive_fraction))
    num_neg = min(len(negative), num_samples - num_pos)
    return set(positive), set(negative), num_pos, num_neg


def test_detectron2_semantics():
    rng = random.Random(3)
    gen = torch.Generator().manual_seed(3)
    for case in range(200):
        num_classes = rng.choice([1, 5, 80])
        n = rng.choice([0, 1, 10, 100, 1000])
        labels = torch.randint(-1, num_classes + 1, (n,), generator=gen)
        if rng.random() < 0.3:
            labels[torch.rand(n, generator=gen) < 0.9] = num_classes
        K = rng.choice([1, 16, 128, 512])
        frac = rng.choice([0.25, 0.5, 1.0])
        pos_idx, neg_idx = sf_d2.subsample_labels(labels, K, frac, num_classes)
        pos_set, neg_set, num_pos, num_neg = reference_subsample_labels(labels, K, frac, num_classes)
        assert pos_idx.dtype == torch.int64 and neg_idx.dtype == torch.int64
        assert len(pos_idx) == num_pos and len(neg_idx) == num_neg, case
        assert set(pos_idx.tolist()) <= pos_set and set(neg_idx.tolist()) <= neg_set
        assert len(set(pos_idx.tolist())) == num_pos and len(set(neg_idx.tolist())) == num_neg


def test_detectron2_static_form_matches():
    labels = torch.randint(-1, 4, (3, 200), generator=torch.Generator().manual_seed(4))
    idx, is_pos, valid = sf_d2.subsample_labels_static(labels, 32, 0.25, 3, seed=7)
    assert idx.shape == (3, 32) and is_pos.shape == (3, 32) and valid.shape == (3, 32)
    for r in range(3):
        p, q, num_pos, num_neg = reference_subsample_labels(labels[r], 32, 0.25, 3)
        assert int(is_pos[r].sum()) == num_pos and int((valid[r] & ~is_pos[r]).sum()) == num_neg
        assert set(idx[r][is_pos[r]].tolist()) <= p and set(idx[r][valid[r] & ~is_pos[r]].tolist()) <= q
        assert bool((idx[r][~valid[r]] == -1).all())


def test_detection_example_runs():
    import importlib.util
    import math
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "detection_train_step.py")
    spec = importlib.util.spec_from_file_location("detection_train_step", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main(["--backbone", "mobilenet", "--size", "128", "--images", "2", "--steps", "2"])
    assert results["torchvision sampler"]["syncfree_calls"] == 0
    assert results["syncfree sampler"]["syncfree_calls"] == 4  # 2 steps x (RPN + ROI heads)
    for r in results.values():
        for _, losses in r["history"]:
            assert all(math.isfinite(v) for v in losses.values())
