"""stratified_sample and stratified_sample_gather on CUDA: no host-device
synchronization, and CUDA graphs whose replays draw fresh samples, as eager
calls from the same generator state do."""
import pytest
import torch

import syncfree
from helpers.checks import check_stratified
from helpers.cuda import check_replays_draw_fresh_samples_matching_eager

pytestmark = pytest.mark.cuda


def test_no_host_sync():
    labels = torch.randint(-1, 5, (4, 100000), device="cuda")
    quota = torch.tensor([100, 200, 0, 300, 50], device="cuda")
    many = torch.randint(0, 3, (4, 3000), device="cuda")
    features = torch.randn(4, 100000, 16, device="cuda")
    syncfree.stratified_sample_gather(features, labels, 1000, quota)  # warm up
    syncfree.stratified_sample(labels, 1000, [100, 200, 0, 300, 50])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            syncfree.stratified_sample(labels, 1000, quota)
            syncfree.stratified_sample(labels, 1000, quota, seed=5)
            syncfree.stratified_sample(labels, 1000, many, fill=False)
            syncfree.stratified_sample(labels, 1000, [100, 200, 0, 300, 50])
            syncfree.stratified_sample_gather(features, labels, 1000, quota)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# The four launches of stratified_sample.
@pytest.mark.parametrize("kind", ["default", "explicit"])
def test_cuda_graph_replays_draw_fresh_samples_matching_eager(kind):
    labels = torch.randint(-1, 4, (3, 20000), device="cuda")
    quota = torch.randint(0, 60, (3, 4), device="cuda")

    def sample(gen):
        return syncfree.stratified_sample(labels, 300, quota, generator=gen)

    def check(idx, valid):
        check_stratified(labels.cpu(), quota.cpu(), 300, True, idx.cpu(), valid.cpu())

    check_replays_draw_fresh_samples_matching_eager(sample, check, kind)
