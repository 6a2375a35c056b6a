"""balanced_sample and balanced_sample_gather on CUDA: no host-device
synchronization, and CUDA graphs whose replays draw fresh samples, as eager
calls from the same generator state do."""
import pytest
import torch

import syncfree
from helpers.checks import check_sample
from helpers.cuda import check_replays_draw_fresh_samples_matching_eager

pytestmark = pytest.mark.cuda


def test_no_host_sync():
    labels = torch.randint(-1, 2, (4, 100000), device="cuda")
    features = torch.randn(4, 100000, 16, device="cuda")
    syncfree.balanced_sample_gather(features, labels, 1000)  # warm up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            syncfree.balanced_sample(labels, 1000)
            syncfree.balanced_sample(labels, 1000, seed=5)
            syncfree.balanced_sample_gather(features, labels, 1000)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# n: one launch, three launches.
@pytest.mark.parametrize("n", [10000, 70000])
@pytest.mark.parametrize("kind", ["default", "explicit"])
def test_cuda_graph_replays_draw_fresh_samples_matching_eager(n, kind):
    labels = torch.randint(-1, 2, (3, n), device="cuda")

    def sample(gen):
        return syncfree.balanced_sample(labels, 300, 0.25, generator=gen)

    def check(idx, valid):
        check_sample(labels.cpu(), idx.cpu(), valid.cpu(), 300, 0.25)

    check_replays_draw_fresh_samples_matching_eager(sample, check, kind)


def test_cuda_graph_of_the_gather_with_long_rows():
    # Long rows take the three-launch path with a workspace from the allocator.
    labels = torch.randint(-1, 2, (2, 70000), device="cuda")
    features = torch.randn(2, 70000, 8, device="cuda")
    torch.cuda.manual_seed(12)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            syncfree.balanced_sample_gather(features, labels, 700)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = syncfree.balanced_sample_gather(features, labels, 700)
    state = torch.cuda.get_rng_state()
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append([t.clone() for t in out])
    torch.cuda.set_rng_state(state)
    for r in replays:
        e = syncfree.balanced_sample_gather(features, labels, 700)
        assert all(torch.equal(x, y) for x, y in zip(r, e))
    assert not torch.equal(replays[0][0], replays[1][0])
