"""syncfree.compact on CUDA: no host-device synchronization, and a CUDA graph
that replays on new data as eager calls on the CPU compute."""
import pytest
import torch

import syncfree

pytestmark = pytest.mark.cuda


def test_cuda_no_host_sync_and_graph_capture():
    mask = torch.rand(8, 100000, device="cuda") < 0.3
    short = torch.rand(8, 1000, device="cuda") < 0.3
    syncfree.compact(mask, 5000)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            syncfree.compact(mask, 5000)
            syncfree.compact(short, 50)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        syncfree.compact(mask, 5000)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        out = syncfree.compact(mask, 5000)
    mask.copy_(torch.rand(8, 100000, device="cuda") < 0.6)
    graph.replay()
    for g, w in zip(out, syncfree.compact(mask.cpu(), 5000)):
        assert torch.equal(g.cpu(), w)
