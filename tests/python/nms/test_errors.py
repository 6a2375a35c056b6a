"""Bad input to syncfree.nms: a clear error that names the op, the argument,
what was expected and what was received; on eager CPU tensors and on the
Meta backend (shapes only) alike."""
import math

import pytest
import torch

import syncfree

BOXES = torch.rand(2, 10, 4)
SCORES = torch.rand(2, 10)


def call(boxes=BOXES, scores=SCORES, thr=0.5, max_output=4, **kw):
    return torch.ops.syncfree.nms(boxes, scores, thr, max_output, **kw)


BAD = [
    (dict(boxes=torch.rand(2, 10, 5)), r"boxes must have shape \[\.\.\., N, 4\] .*got shape \[2, 10, 5\]"),
    (dict(boxes=torch.rand(4), scores=torch.rand(1)), r"boxes must have shape \[\.\.\., N, 4\] .*got shape \[4\]"),
    (dict(boxes=torch.zeros(2, 10, 4, dtype=torch.int64), scores=SCORES.long()),
     "boxes must be float16, bfloat16, float32 or float64, got dtype Long"),
    (dict(scores=SCORES.double()), "scores must have the boxes' dtype Float, got dtype Double"),
    (dict(scores=torch.rand(2, 9)), r"scores must have shape boxes.shape\[:-1\] = \[2, 10\], got shape \[2, 9\]"),
    (dict(scores=torch.rand(20)), r"scores must have shape boxes.shape\[:-1\] = \[2, 10\], got shape \[20\]"),
    (dict(scores=torch.rand(2, 10, 1)), r"scores must have shape .* got shape \[2, 10, 1\]"),
    (dict(thr=math.nan), "iou_threshold must be a number .* got nan"),
    (dict(max_output=-1), "max_output must be >= 0, got -1"),
    (dict(idxs=torch.zeros(2, 10)), r"idxs must be an integer tensor .* got dtype Float"),
    (dict(idxs=torch.zeros(2, 10, dtype=torch.bool)), r"idxs must be an integer tensor .* got dtype Bool"),
    (dict(idxs=torch.zeros(2, 11, dtype=torch.int64)), r"idxs must have the scores' shape \[2, 10\], got shape \[2, 11\]"),
    (dict(idxs=torch.zeros(10, dtype=torch.int64)), r"idxs must have the scores' shape \[2, 10\], got shape \[10\]"),
    (dict(valid=torch.ones(2, 10, dtype=torch.uint8)), "valid must be a bool tensor, got dtype Byte"),
    (dict(valid=torch.ones(1, 10, dtype=torch.bool)), r"valid must have the scores' shape \[2, 10\], got shape \[1, 10\]"),
    (dict(boxes=torch.rand(1 << 20, 1, 4), scores=torch.rand(1 << 20, 1), max_output=1 << 44),
     "max_output must leave the output indexable by int64"),
]


@pytest.mark.parametrize("kwargs, message", BAD, ids=[str(i) for i in range(len(BAD))])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bad_arguments(kwargs, message, device):
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    if device == "meta":
        kwargs.setdefault("boxes", BOXES.to("meta"))
        kwargs.setdefault("scores", SCORES.to("meta"))
    with pytest.raises(RuntimeError, match="^syncfree\\.nms: " + message):
        call(**kwargs)


def test_outputs_too_large_for_memory():
    """An allocation that fails is an OutOfMemoryError naming the op and the
    argument (2^40 slots per row need 18 TB for the indices of two rows)."""
    with pytest.raises(torch.OutOfMemoryError,
                       match=r"^syncfree\.nms: max_output = 1099511627776 for scores of shape \[2, 10\] needs "
                             r"17592186044416 bytes for indices on cpu, more than could be allocated"):
        call(max_output=1 << 40)


def test_mixed_devices():
    with pytest.raises(RuntimeError, match=r"^syncfree\.nms: scores must be on the boxes' device meta, got cpu"):
        call(boxes=BOXES.to("meta"))
    with pytest.raises(RuntimeError, match=r"^syncfree\.nms: idxs must be on the boxes' device meta, got cpu"):
        call(boxes=BOXES.to("meta"), scores=SCORES.to("meta"), idxs=torch.zeros(2, 10, dtype=torch.int64))
    with pytest.raises(RuntimeError, match=r"^syncfree\.nms: valid must be on the boxes' device meta, got cpu"):
        call(boxes=BOXES.to("meta"), scores=SCORES.to("meta"), valid=torch.ones(2, 10, dtype=torch.bool))


def test_python_wrapper_names_wrong_types():
    with pytest.raises(TypeError, match=r"^syncfree\.nms: boxes must be a torch.Tensor, got list"):
        syncfree.nms([[0, 0, 1, 1]], SCORES, 0.5, 2)
    with pytest.raises(TypeError, match=r"^syncfree\.nms: scores must be a torch.Tensor, got float"):
        syncfree.nms(BOXES, 0.5, 0.5, 2)
    with pytest.raises(TypeError, match=r"^syncfree\.nms: idxs must be a torch.Tensor or None, got list"):
        syncfree.nms(BOXES, SCORES, 0.5, 2, idxs=[0] * 10)
    with pytest.raises(TypeError, match=r"^syncfree\.nms: valid must be a torch.Tensor or None, got bool"):
        syncfree.nms(BOXES, SCORES, 0.5, 2, valid=True)
    # A bool would pass the dispatcher as 1 or 1.0.
    with pytest.raises(TypeError, match=r"^syncfree\.nms: max_output must be an int, got bool"):
        syncfree.nms(BOXES, SCORES, 0.5, True)
    with pytest.raises(TypeError, match=r"^syncfree\.nms: max_output must be an int, got float"):
        syncfree.nms(BOXES, SCORES, 0.5, 2.0)
    with pytest.raises(TypeError, match=r"^syncfree\.nms: iou_threshold must be a float, got bool"):
        syncfree.nms(BOXES, SCORES, True, 2)


def test_meta_shapes():
    idx, ok = call(boxes=torch.empty(3, 5, 7, 4, device="meta"), scores=torch.empty(3, 5, 7, device="meta"),
                   max_output=9)
    assert idx.shape == (3, 5, 9) and ok.shape == (3, 5, 9)
    assert idx.dtype == torch.int64 and ok.dtype == torch.bool and idx.device.type == "meta"


def test_no_autograd():
    boxes = BOXES.clone().requires_grad_()
    scores = SCORES.clone().requires_grad_()
    idx, ok = syncfree.nms(boxes, scores, 0.5, 4)
    assert not idx.requires_grad and not ok.requires_grad
