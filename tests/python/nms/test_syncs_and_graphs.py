"""syncfree.nms on CUDA: no host-device synchronization, and a CUDA graph
that replays on new data as eager calls on the CPU compute."""
import pytest
import torch

import syncfree
from helpers.nms_reference import nms_inputs

pytestmark = pytest.mark.cuda


def test_no_host_sync():
    boxes, scores, idxs, valid = nms_inputs((8,), 2000, 2, device="cuda")
    syncfree.nms(boxes, scores, 0.7, 300, idxs=idxs, valid=valid)  # warm-up (allocator, cub)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        syncfree.nms(boxes, scores, 0.7, 300, idxs=idxs, valid=valid)
        syncfree.nms(boxes, scores, 0.7, 300)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_cuda_graph_replays_on_new_data():
    boxes, scores, idxs, valid = nms_inputs((4,), 1500, 3, device="cuda")
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
        new = nms_inputs((4,), 1500, seed, device="cuda")
        for dst, src in zip(static, new):
            dst.copy_(src)
        graph.replay()
        want = syncfree.nms(*[t.cpu() for t in new[:2]], 0.6, 200, idxs=new[2].cpu(), valid=new[3].cpu())
        assert torch.equal(out[0].cpu(), want[0]) and torch.equal(out[1].cpu(), want[1])
