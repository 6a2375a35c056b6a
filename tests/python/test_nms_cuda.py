"""syncfree.nms on CUDA: equal to the CPU (and so to torchvision), no host
syncs, CUDA graphs, torch.compile, opcheck.

Skipped without a CUDA device (and a CUDA build of syncfree)."""
import pytest
import torch

import syncfree
from nms_reference import clustered_boxes, distinct_scores

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def inputs(lead, n, seed, dtype=torch.float32, ties=False):
    g = torch.Generator().manual_seed(seed)
    boxes = clustered_boxes(lead + (n,), g, clusters=max(1, n // 10), size=200.0, dtype=dtype)
    if ties:
        scores = torch.randint(0, 6, lead + (n,), generator=g).to(dtype)
    else:
        scores = distinct_scores(lead + (n,), g, torch.float32 if n > 256 else dtype).to(dtype)
    scores.view(-1)[::13] = float("nan")
    idxs = torch.randint(0, 4, lead + (n,), generator=g)
    valid = torch.rand(lead + (n,), generator=g) < 0.85
    return boxes, scores, idxs, valid


def to_cuda(*ts):
    return [None if t is None else t.cuda() for t in ts]


@cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_cuda_equals_cpu(dtype):
    for lead, n in [((), 1), ((3,), 64), ((2,), 65), ((2, 3), 200), ((4,), 1000), ((1,), 5000), ((3,), 0)]:
        for ties in (False, True):
            boxes, scores, idxs, valid = inputs(lead, n, n, dtype, ties)
            for thr in (0.0, 0.5, 0.7, 1.0, -0.1):
                for m in (1, 17, n + 2):
                    for ids, ok in ((None, None), (idxs, valid)):
                        want = syncfree.nms(boxes, scores, thr, m, idxs=ids, valid=ok)
                        got = syncfree.nms(*to_cuda(boxes, scores), thr, m, idxs=None if ids is None else ids.cuda(),
                                           valid=None if ok is None else ok.cuda())
                        assert got[0].device.type == "cuda"
                        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1]), \
                            (lead, n, ties, thr, m, ids is None)


@cuda
def test_cuda_strided_inputs():
    boxes, scores, idxs, valid = to_cuda(*inputs((3, 2), 300, 1))
    want = syncfree.nms(boxes, scores, 0.5, 40, idxs=idxs, valid=valid)
    b = boxes.transpose(0, 1).contiguous().transpose(0, 1)
    s = torch.empty(3, 2, 600, device="cuda")[..., ::2]
    s.copy_(scores)
    got = syncfree.nms(b, s, 0.5, 40, idxs=idxs.int(), valid=valid)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@cuda
def test_no_host_sync():
    boxes, scores, idxs, valid = to_cuda(*inputs((8,), 2000, 2))
    syncfree.nms(boxes, scores, 0.7, 300, idxs=idxs, valid=valid)  # warm-up (allocator, cub)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        syncfree.nms(boxes, scores, 0.7, 300, idxs=idxs, valid=valid)
        syncfree.nms(boxes, scores, 0.7, 300)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@cuda
def test_cuda_graph_replays_on_new_data():
    boxes, scores, idxs, valid = to_cuda(*inputs((4,), 1500, 3))
    static = [boxes.clone(), scores.clone(), idxs.clone(), valid.clone()]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        syncfree.nms(*static[:2], 0.6, 200, idxs=static[2], valid=static[3])  # warm-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = syncfree.nms(*static[:2], 0.6, 200, idxs=static[2], valid=static[3])
    for seed in (4, 5):
        new = to_cuda(*inputs((4,), 1500, seed))
        for dst, src in zip(static, new):
            dst.copy_(src)
        graph.replay()
        want = syncfree.nms(*[t.cpu() for t in new[:2]], 0.6, 200, idxs=new[2].cpu(), valid=new[3].cpu())
        assert torch.equal(out[0].cpu(), want[0]) and torch.equal(out[1].cpu(), want[1])


@cuda
def test_cuda_compile_and_opcheck():
    boxes, scores, idxs, valid = to_cuda(*inputs((3,), 120, 6))
    fn = torch.compile(lambda b, s, i, v: syncfree.nms(b, s, 0.5, 30, idxs=i, valid=v), fullgraph=True)
    got = fn(boxes, scores, idxs, valid)
    want = syncfree.nms(boxes, scores, 0.5, 30, idxs=idxs, valid=valid)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.library.opcheck(torch.ops.syncfree.nms.default, (boxes, scores, 0.5, 30), {"idxs": idxs, "valid": valid},
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))
