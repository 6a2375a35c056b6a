"""syncfree.find_syncs where the step runs on a GPU: what syncs there is
reported (reads and copies of device tensors), what does not is left out
(the same operations on host tensors, x[mask] = 0.5), and the device's own
copies to the host are seen without a Python call that names them."""
import pytest
import torch

import syncfree

pytestmark = pytest.mark.cuda


def test_device_run_reports_device_reads_only():
    x = torch.rand(64, device="cuda")
    host = torch.rand(64)
    with syncfree.find_syncs() as report:
        x.sum().item()                 # a device read
        host.sum().item()              # a host read: no sync on a device run
        y = x.clone()
        y[x > 0.5] = 0.5               # masked_fill_ with a host scalar: no nonzero
        y[x > 0.5]                     # nonzero on the device
        x.cpu()                        # a device-to-host copy
        host.cpu()                     # no copy
        torch.tensor([1.0, 2.0], device="cuda")   # from Python data: always
        torch.tensordot(x, x, 1)       # no sync
    counts = report.counts()
    assert counts == {"item": 1, "mask_index": 1, "to_host": 1, "from_python": 1}, str(report)


def test_copies_to_the_host_are_seen_as_operators():
    x = torch.rand(8, device="cuda")
    out = torch.empty(8)
    with syncfree.find_syncs() as report:
        out.copy_(x)                   # no .cpu() call: the operator says it
        x.to(torch.device("cpu"))      # a torch.device: seen as _to_copy
    assert report.counts() == {"to_host": 2}, str(report)
