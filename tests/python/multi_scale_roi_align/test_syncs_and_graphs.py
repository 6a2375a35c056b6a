"""syncfree.multi_scale_roi_align on CUDA: the CPU's values (within a
rounding: the CUDA kernels need not add in the CPU's order, and the backward
adds with atomics), exact zeros where the CPU has them by rule (slots not
valid, non-finite boxes), no host-device synchronization forward or
backward, a CUDA graph that replays on new boxes as eager calls compute, and
torch.use_deterministic_algorithms, which the atomic backward refuses."""
import math

import pytest
import torch

import syncfree

pytestmark = pytest.mark.cuda

C = 4
IMAGE = (128, 96)

# float32: within 1e-5 relative of the CPU (absolute 1e-5 for values near 0:
# the features are O(1)); float64 within 1e-12; float16 / bfloat16 (computed
# in float32, rounded once) within one rounding of the narrow type.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def inputs(batch, k, num_levels=4, dtype=torch.float32, seed=0, device="cuda", nonfinite=True):
    """Pyramid of strides 4, 8, ...; boxes of sizes 1 to ~600 (every level of
    the default mapper), some partly outside the image, a few non-finite or
    reversed; ~80% of the slots valid. Made on the CPU, then moved."""
    g = gen(seed + 100 * batch + k)
    H, W = IMAGE
    scales = [2.0 ** -(2 + l) for l in range(num_levels)]
    features = [torch.randn(batch, C, H >> (2 + l), W >> (2 + l), generator=g, dtype=torch.float64).to(dtype)
                for l in range(num_levels)]
    size = torch.exp(torch.rand(batch, k, 2, generator=g, dtype=torch.float64) * math.log(600))
    xy = (torch.rand(batch, k, 2, generator=g, dtype=torch.float64) * 1.2 - 0.1) * torch.tensor([W, H]) - size / 2
    boxes = torch.cat([xy, xy + size], dim=-1)
    if nonfinite and k >= 4:
        boxes[0, 0, 1] = math.nan
        boxes[-1, 1, 2] = math.inf
        boxes[0, 2] = torch.tensor([30.0, 10.0, 10.0, 40.0], dtype=torch.float64)  # x2 < x1: no level
        boxes[-1, 3] = torch.tensor([-math.inf, -math.inf, math.inf, math.inf], dtype=torch.float64)
    boxes = boxes.to(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype)
    valid = torch.rand(batch, k, generator=g) < 0.8
    to = dict(device=device)
    return [f.to(**to) for f in features], boxes.to(**to), scales, valid.to(**to)


def forward_backward(features, boxes, scales, valid, upstream, output_size=(7, 7), sampling_ratio=2, aligned=False):
    feats = [f.detach().clone().requires_grad_() for f in features]
    out = syncfree.multi_scale_roi_align(feats, boxes, output_size, scales, sampling_ratio, aligned, valid=valid)
    grads = torch.autograd.grad(out, feats, upstream)
    return out.detach(), grads


def cpu(tensors):
    return [t.cpu() for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("num_levels", [1, 4])
@pytest.mark.parametrize("aligned", [False, True])
def test_cuda_matches_cpu(dtype, num_levels, aligned):
    features, boxes, scales, valid = inputs(3, 40, num_levels, dtype)
    upstream = torch.randn(120, C, 7, 5, generator=gen(1)).to(dtype)
    got, grads = forward_backward(features, boxes, scales, valid, upstream.cuda(), (7, 5), 2, aligned)
    want, want_grads = forward_backward(cpu(features), boxes.cpu(), scales, valid.cpu(), upstream, (7, 5), 2, aligned)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, **TOL[dtype])
    # Exact zeros where the rule gives zeros: slots not valid, non-finite
    # boxes, a box reversed along one axis (with several levels).
    zero = want.flatten(1).eq(0).all(1)
    assert bool(zero.any()) and bool((~zero).any())
    assert bool((got.cpu()[zero] == 0).all())
    assert bool(torch.isfinite(got).all())
    for g, w in zip(grads, want_grads):
        assert g.dtype == dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, **TOL[dtype])
        assert bool(torch.isfinite(g).all())


@pytest.mark.parametrize("sampling_ratio, output_size", [(1, (14, 14)), (3, (3, 5))])
def test_cuda_matches_cpu_other_sizes(sampling_ratio, output_size):
    features, boxes, scales, valid = inputs(2, 33, 3, torch.float64, seed=2)
    h, w = output_size
    upstream = torch.randn(66, C, h, w, generator=gen(2), dtype=torch.float64)
    got, grads = forward_backward(features, boxes, scales, valid, upstream.cuda(), output_size, sampling_ratio)
    want, want_grads = forward_backward(cpu(features), boxes.cpu(), scales, valid.cpu(), upstream, output_size,
                                        sampling_ratio)
    torch.testing.assert_close(got.cpu(), want, **TOL[torch.float64])
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g.cpu(), w, **TOL[torch.float64])


def test_cuda_forward_is_deterministic_and_non_contiguous_inputs():
    features, boxes, scales, valid = inputs(2, 50, 3)
    first = syncfree.multi_scale_roi_align(features, boxes, 7, scales, 2, valid=valid)
    again = syncfree.multi_scale_roi_align(features, boxes, 7, scales, 2, valid=valid)
    assert torch.equal(first, again)
    odd = [f.contiguous(memory_format=torch.channels_last) for f in features]
    strided = torch.empty(2, 4, 50, device="cuda", dtype=boxes.dtype).transpose(1, 2)
    strided.copy_(boxes)
    assert torch.equal(syncfree.multi_scale_roi_align(odd, strided, 7, scales, 2, valid=valid), first)


def test_no_host_sync():
    features, boxes, scales, valid = inputs(4, 200, 4)
    feats = [f.requires_grad_() for f in features]
    upstream = torch.randn(800, C, 7, 7, device="cuda")
    out = syncfree.multi_scale_roi_align(feats, boxes, 7, scales, 2, valid=valid)  # warm-up
    torch.autograd.grad(out, feats, upstream)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = syncfree.multi_scale_roi_align(feats, boxes, 7, scales, 2, valid=valid)
        grads = torch.autograd.grad(out, feats, upstream)
        syncfree.multi_scale_roi_align(features, boxes, (5, 3), scales, 1, True)  # no valid, aligned
        with torch.no_grad():
            syncfree.multi_scale_roi_align(feats, boxes.half(), 7, scales, 2, valid=valid)
        narrow = [f.detach().bfloat16().requires_grad_() for f in features]
        out_narrow = syncfree.multi_scale_roi_align(narrow, boxes, 7, scales, 2, valid=valid)
        torch.autograd.grad(out_narrow, narrow, upstream.bfloat16())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(grads) == 4


def test_cuda_graph_replays_on_new_boxes():
    """Forward and backward captured once; replays on new feature values,
    boxes and valid slots equal eager CUDA calls on the same data (the
    forward bit for bit, the atomic backward within a rounding)."""
    features, boxes, scales, valid = inputs(3, 64, 4, seed=3)
    static_feats = [f.clone().requires_grad_() for f in features]
    static_boxes, static_valid = boxes.clone(), valid.clone()
    static_up = torch.randn(192, C, 7, 7, device="cuda")

    def step():
        out = syncfree.multi_scale_roi_align(static_feats, static_boxes, 7, scales, 2, valid=static_valid)
        return (out,) + torch.autograd.grad(out, static_feats, static_up)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()  # warm-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for seed in (4, 5):
        new_feats, new_boxes, _, new_valid = inputs(3, 64, 4, seed=seed)
        new_up = torch.randn(192, C, 7, 7, device="cuda")
        with torch.no_grad():
            for dst, src in zip(static_feats, new_feats):
                dst.copy_(src)
        static_boxes.copy_(new_boxes)
        static_valid.copy_(new_valid)
        static_up.copy_(new_up)
        graph.replay()
        want, want_grads = forward_backward(new_feats, new_boxes, scales, new_valid, new_up)
        assert torch.equal(captured[0], want)
        for g, w in zip(captured[1:], want_grads):
            torch.testing.assert_close(g, w, **TOL[torch.float32])
        # And the CPU's values.
        cpu_out, _ = forward_backward(cpu(new_feats), new_boxes.cpu(), scales, new_valid.cpu(), new_up.cpu())
        torch.testing.assert_close(captured[0].cpu(), cpu_out, **TOL[torch.float32])


def test_deterministic_algorithms_refuse_the_backward_not_the_forward():
    features, boxes, scales, valid = inputs(2, 30, 3, seed=6)
    feats = [f.requires_grad_() for f in features]
    upstream = torch.randn(60, C, 7, 7, device="cuda")
    want = syncfree.multi_scale_roi_align(feats, boxes, 7, scales, 2, valid=valid).detach()
    was, was_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        out = syncfree.multi_scale_roi_align(feats, boxes, 7, scales, 2, valid=valid)  # the forward works
        assert torch.equal(out.detach(), want)
        with pytest.raises(RuntimeError, match=r"syncfree\.multi_scale_roi_align backward on CUDA does not have a "
                                               r"deterministic implementation"):
            torch.autograd.grad(out, feats, upstream)
        torch.use_deterministic_algorithms(True, warn_only=True)
        out = syncfree.multi_scale_roi_align(feats, boxes, 7, scales, 2, valid=valid)
        with pytest.warns(UserWarning, match=r"syncfree\.multi_scale_roi_align backward on CUDA"):
            grads = torch.autograd.grad(out, feats, upstream)
        assert all(bool(torch.isfinite(g).all()) for g in grads)
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
    # The CPU backward is deterministic: allowed.
    try:
        torch.use_deterministic_algorithms(True)
        f_cpu = [f.detach().cpu().requires_grad_() for f in features]
        out = syncfree.multi_scale_roi_align(f_cpu, boxes.cpu(), 7, scales, 2, valid=valid.cpu())
        torch.autograd.grad(out, f_cpu, upstream.cpu())
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)


def test_cuda_mixed_devices_and_empty():
    features, boxes, scales, valid = inputs(2, 6, 2, nonfinite=False)
    with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: boxes must be on the features' "
                                           r"device cuda:0, got cpu"):
        syncfree.multi_scale_roi_align(features, boxes.cpu(), 7, scales, 2)
    with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: valid must be on the boxes' "
                                           r"device cuda:0, got cpu"):
        syncfree.multi_scale_roi_align(features, boxes, 7, scales, 2, valid=valid.cpu())
    with pytest.raises(RuntimeError, match=r"^syncfree\.multi_scale_roi_align: features\[1\] must be on "
                                           r"features\[0\]'s device cuda:0, got cpu"):
        syncfree.multi_scale_roi_align([features[0], features[1].cpu()], boxes, 7, scales, 2)
    feats = [f.requires_grad_() for f in features]
    out = syncfree.multi_scale_roi_align(feats, boxes[:, :0], 7, scales, 2)
    assert out.shape == (0, C, 7, 7) and out.is_cuda
    grads = torch.autograd.grad(out, feats, torch.zeros_like(out))
    assert all(g.shape == f.shape and not bool(g.any()) for g, f in zip(grads, features))
