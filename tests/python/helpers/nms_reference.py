"""An independent greedy NMS in NumPy, the contract as docs/operators.md states it.

Written from the definition, not from the C++: candidates are a row's valid
boxes with a non-NaN score, ranked by score descending and then by index; the
first candidate not yet suppressed is kept and suppresses every later
candidate of its id whose IoU with it is > iou_threshold. The IoU follows
torchvision's CPU kernel operation by operation in the compute type (float32
for float16, bfloat16 and float32 boxes, float64 for float64), max and min as
std::max and std::min (a NaN operand gives the first argument), and is
compared in float64 with the threshold, as torchvision compares its float IoU
with its double threshold.
"""
import math

import numpy as np
import torch


def compute_dtype(dtype):
    return np.float64 if dtype == torch.float64 else np.float32


def _max(a, b):  # std::max(a, b)
    return np.where(a < b, b, a)


def _min(a, b):  # std::min(a, b)
    return np.where(b < a, b, a)


def iou_one_to_many(box, boxes):
    """IoU of one box (the higher ranked, first operand) with each of boxes, in their dtype."""
    t = boxes.dtype.type
    with np.errstate(all="ignore"):
        area_i = (box[2] - box[0]) * (box[3] - box[1])
        areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        xx1 = _max(box[0], boxes[:, 0])
        yy1 = _max(box[1], boxes[:, 1])
        xx2 = _min(box[2], boxes[:, 2])
        yy2 = _min(box[3], boxes[:, 3])
        w = _max(t(0), (xx2 - xx1).astype(t))
        h = _max(t(0), (yy2 - yy1).astype(t))
        inter = (w * h).astype(t)
        return (inter / ((area_i + areas).astype(t) - inter)).astype(t)


def rank_order(scores, candidates):
    """Candidate indices by score descending, then index ascending."""
    return sorted(candidates, key=lambda j: (-float(scores[j]), j))


def nms_row(boxes, scores, iou_threshold, max_output, idxs=None, valid=None):
    """One row: boxes [N, 4], scores [N] (torch) -> list of kept indices by rank."""
    t = compute_dtype(boxes.dtype)
    b = boxes.detach().to(torch.float64 if t == np.float64 else torch.float32).cpu().numpy()
    s = scores.detach().to(torch.float64).cpu().numpy()
    n = s.shape[0]
    ids = np.zeros(n, dtype=np.int64) if idxs is None else idxs.detach().to(torch.int64).cpu().numpy()
    ok = np.ones(n, dtype=bool) if valid is None else valid.detach().cpu().numpy()
    order = rank_order(s, [j for j in range(n) if ok[j] and not math.isnan(s[j])])
    order = np.asarray(order, dtype=np.int64)
    suppressed = np.zeros(len(order), dtype=bool)
    kept = []
    for p in range(len(order)):
        if len(kept) == max_output:
            break
        if suppressed[p]:
            continue
        i = order[p]
        kept.append(int(i))
        later = order[p + 1:]
        if len(later):
            ovr = iou_one_to_many(b[i], b[later]).astype(np.float64)
            suppressed[p + 1:] |= (ovr > iou_threshold) & (ids[later] == ids[i])
    return kept


def nms_batched(boxes, scores, iou_threshold, max_output, idxs=None, valid=None):
    """(indices int64 [..., M], valid bool [..., M]) row by row with nms_row."""
    lead = tuple(scores.shape[:-1])
    n = scores.shape[-1]
    rows = math.prod(lead)
    b = boxes.reshape(rows, n, 4)
    s = scores.reshape(rows, n)
    i = None if idxs is None else idxs.reshape(rows, n)
    v = None if valid is None else valid.reshape(rows, n)
    out = torch.full((rows, max_output), -1, dtype=torch.int64)
    ok = torch.zeros((rows, max_output), dtype=torch.bool)
    for r in range(rows):
        kept = nms_row(b[r], s[r], iou_threshold, max_output,
                       None if i is None else i[r], None if v is None else v[r])
        out[r, :len(kept)] = torch.tensor(kept, dtype=torch.int64)
        ok[r, :len(kept)] = True
    return out.reshape(lead + (max_output,)), ok.reshape(lead + (max_output,))


# --- inputs -------------------------------------------------------------------


def random_boxes(shape, gen, size=100.0, max_wh=30.0, dtype=torch.float32):
    """Boxes [..., 4] with x1 < x2, y1 < y2 in [0, size + max_wh)."""
    xy = torch.rand(shape + (2,), generator=gen, dtype=torch.float64) * size
    wh = torch.rand(shape + (2,), generator=gen, dtype=torch.float64) * max_wh + 0.5
    return torch.cat([xy, xy + wh], dim=-1).to(dtype)


def clustered_boxes(shape, gen, clusters=30, size=500.0, jitter=0.1, dtype=torch.float32):
    """Jittered copies of a few base boxes per row: RPN-like overlaps."""
    *lead, n = shape
    base = random_boxes(tuple(lead) + (clusters,), gen, size=size, max_wh=80.0, dtype=torch.float64)
    pick = torch.randint(0, clusters, tuple(lead) + (n,), generator=gen)
    chosen = torch.gather(base, -2, pick.unsqueeze(-1).expand(tuple(lead) + (n, 4)))
    wh = (chosen[..., 2:] - chosen[..., :2]).repeat(*([1] * len(lead)), 1, 2)
    noise = (torch.rand(tuple(lead) + (n, 4), generator=gen, dtype=torch.float64) - 0.5) * 2 * jitter
    return (chosen + noise * wh).to(dtype)


def nms_inputs(lead, n, seed, dtype=torch.float32, ties=False, device="cpu"):
    """(boxes, scores, idxs, valid) of ``lead`` rows of ``n`` clustered boxes: NaN
    scores, 4 ids, about 15% invalid boxes; with ``ties``, scores of 6 values."""
    g = torch.Generator().manual_seed(seed)
    boxes = clustered_boxes(lead + (n,), g, clusters=max(1, n // 10), size=200.0, dtype=dtype)
    if ties:
        scores = torch.randint(0, 6, lead + (n,), generator=g).to(dtype)
    else:
        scores = distinct_scores(lead + (n,), g, torch.float32 if n > 256 else dtype).to(dtype)
    scores.view(-1)[::13] = float("nan")
    idxs = torch.randint(0, 4, lead + (n,), generator=g)
    valid = torch.rand(lead + (n,), generator=g) < 0.85
    return boxes.to(device), scores.to(device), idxs.to(device), valid.to(device)


def distinct_scores(shape, gen, dtype=torch.float32):
    """Scores without ties: a random permutation of 0 .. N-1 per row (exact in dtype)."""
    *lead, n = shape
    rows = math.prod(lead)
    # Integers up to 2**8 are exact in bfloat16, up to 2**11 in float16.
    limit = {torch.bfloat16: 256, torch.float16: 2048}.get(dtype)
    assert limit is None or n <= limit, "too many boxes for distinct scores in this dtype"
    perm = [torch.randperm(n, generator=gen) for _ in range(rows)]
    flat = torch.stack(perm) if rows else torch.zeros((0, n), dtype=torch.int64)
    return flat.to(dtype).reshape(shape)
