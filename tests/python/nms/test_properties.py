"""Properties of syncfree.nms that hold whatever the reference says.

- Layout: kept indices first (valid True), -1 and False after; indices in
  [0, N), distinct, valid boxes with a non-NaN score, listed by rank.
- No two kept boxes of one id overlap above the threshold.
- Every candidate that is not kept (and not cut by max_output) overlaps a
  kept box of its id and of higher rank above the threshold.
- A smaller max_output gives a prefix of a larger one.
"""
import math

import numpy as np
import pytest
import torch

import syncfree
from helpers.nms_reference import clustered_boxes, iou_one_to_many, random_boxes


def rank_before(scores, a, b):
    return scores[a] > scores[b] or (scores[a] == scores[b] and a < b)


def check_row(boxes, scores, thr, max_output, idx, ok, ids, valid):
    n = scores.shape[0]
    b = boxes.float().numpy() if boxes.dtype != torch.float64 else boxes.numpy()
    s = scores.double().numpy()
    k = int(ok.sum())
    assert bool(ok[:k].all()) and not bool(ok[k:].any())
    assert bool((idx[k:] == -1).all())
    kept = idx[:k].tolist()
    assert len(set(kept)) == k
    for j in kept:
        assert 0 <= j < n and valid[j] and not math.isnan(s[j])
    for a, c in zip(kept, kept[1:]):
        assert rank_before(s, a, c), "kept boxes must be listed by rank"
    # No two kept boxes of one id overlap above the threshold (the IoU of the
    # higher ranked first, as the rule computes it).
    for p, i in enumerate(kept):
        later = np.array([j for j in kept[p + 1:] if ids[j] == ids[i]], dtype=np.int64)
        if len(later):
            assert not (iou_one_to_many(b[i], b[later]).astype(np.float64) > thr).any()
    # Every candidate not kept is suppressed by a kept box of its id that
    # ranks before it, unless max_output cut the list.
    if k < max_output:
        kept_set = set(kept)
        for j in range(n):
            if not valid[j] or math.isnan(s[j]) or j in kept_set:
                continue
            above = np.array([i for i in kept if ids[i] == ids[j] and rank_before(s, i, j)], dtype=np.int64)
            assert len(above), f"box {j} is neither kept nor suppressed"
            ovr = np.array([iou_one_to_many(b[i], b[j:j + 1])[0] for i in above], dtype=np.float64)
            assert (ovr > thr).any(), f"box {j} is not kept but no kept box suppresses it"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("thr", [0.0, 0.3, 0.7, 1.0])
def test_properties_random(seed, thr):
    g = torch.Generator().manual_seed(seed)
    n = [1, 17, 150, 400, 90, 250][seed]
    boxes = clustered_boxes((2, n), g, clusters=max(1, n // 10)) if seed % 2 else random_boxes((2, n), g)
    scores = torch.rand(2, n, generator=g)
    if seed % 3 == 0:
        scores = torch.randint(0, 4, (2, n), generator=g).float()  # ties
    ids = torch.randint(0, 1 + seed, (2, n), generator=g)
    valid = torch.rand(2, n, generator=g) < 0.85
    scores[0, ::9] = math.nan
    for max_output in (n + 3, max(1, n // 4)):
        for use_ids in (False, True):
            idx, ok = syncfree.nms(boxes, scores, thr, max_output, idxs=ids if use_ids else None, valid=valid)
            for r in range(2):
                row_ids = ids[r].tolist() if use_ids else [0] * n
                check_row(boxes[r], scores[r], thr, max_output, idx[r], ok[r], row_ids, valid[r].tolist())


@pytest.mark.parametrize("use_ids", [False, True])
def test_max_output_gives_a_prefix(use_ids):
    g = torch.Generator().manual_seed(5)
    boxes = clustered_boxes((3, 500), g, clusters=60)
    scores = torch.rand(3, 500, generator=g)
    ids = torch.randint(0, 5, (3, 500), generator=g) if use_ids else None
    full_i, full_v = syncfree.nms(boxes, scores, 0.5, 500, idxs=ids)
    for m in (0, 1, 2, 10, 33, 100, 499):
        i, v = syncfree.nms(boxes, scores, 0.5, m, idxs=ids)
        assert torch.equal(i, full_i[:, :m]) and torch.equal(v, full_v[:, :m])


def test_ids_separate_rows_of_one_batch():
    # Giving each image its own id in one flat row equals batching the images.
    g = torch.Generator().manual_seed(6)
    boxes = clustered_boxes((4, 120), g, clusters=10, size=100.0)
    scores = torch.rand(4, 120, generator=g)
    batched_i, batched_v = syncfree.nms(boxes, scores, 0.5, 120)
    flat_i, flat_v = syncfree.nms(boxes.reshape(480, 4), scores.reshape(480), 0.5, 480,
                                  idxs=torch.arange(4).repeat_interleave(120))
    got = sorted(flat_i[flat_v].tolist())
    want = sorted((batched_i + torch.arange(4)[:, None] * 120)[batched_v].tolist())
    assert got == want


def test_results_do_not_depend_on_the_thread_count():
    g = torch.Generator().manual_seed(7)
    boxes = clustered_boxes((16, 2000), g, clusters=200)
    scores = torch.rand(16, 2000, generator=g)
    ids = torch.randint(0, 3, (16, 2000), generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = syncfree.nms(boxes, scores, 0.7, 300, idxs=ids)
        torch.set_num_threads(max(2, threads))
        many = syncfree.nms(boxes, scores, 0.7, 300, idxs=ids)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])
