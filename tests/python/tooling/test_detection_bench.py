"""bench/detection_bench.py without a GPU: its options, timing and report, the
CUDA checks' logic on injected pieces, the clear error of --device cuda where
there is no CUDA device, and one tiny CPU run end to end."""
import importlib.util
import json
import pathlib
import warnings

import pytest
import torch
from helpers.checks import torchvision_or_skip

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "bench" / "detection_bench.py"
spec = importlib.util.spec_from_file_location("detection_bench", SCRIPT)
detection_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(detection_bench)


def test_options_and_usage_errors():
    args = detection_bench.parse_args([])
    assert args.batch_sizes == [2] and args.image_sizes == [(128, 128), (256, 256)]
    assert args.impls == ["torchvision", "static", "compiled"]
    args = detection_bench.parse_args(["--device", "cuda"])
    assert args.batch_sizes == [2, 8] and args.image_sizes == [(512, 512), (800, 800)]
    assert args.impls == ["torchvision", "static", "graphed"]
    assert detection_bench.parse_image_sizes("128,512x640") == [(128, 128), (512, 640)]
    assert args.modes == ["train"]
    assert detection_bench.parse_args(["--modes", "eval,train"]).modes == ["eval", "train"]
    # SSD resizes every image to its fixed size: that size is its default and the only one it takes.
    assert detection_bench.parse_args(["--model", "ssdlite320_mobilenet_v3_large"]).image_sizes == [(320, 320)]
    assert detection_bench.parse_args(["--model", "ssd300_vgg16", "--device", "cuda"]).image_sizes == [(300, 300)]
    assert detection_bench.parse_args(["--model", "ssd300_vgg16", "--image-sizes", "300"]).image_sizes == [(300, 300)]
    assert detection_bench.parse_args(["--model", "retinanet_resnet50_fpn"]).image_sizes == [(128, 128), (256, 256)]
    for argv in (["--impls", "graphed"], ["--impls", "nope"], ["--image-sizes", "100"],
                 ["--model", "ssdlite320_mobilenet_v3_large", "--image-sizes", "256"],
                 ["--model", "ssd300_vgg16", "--image-sizes", "300,320"],
                 ["--batch-sizes", "0"], ["--steps", "0"], ["--modes", "test"], ["--modes", ""]):
        with pytest.raises(detection_bench.UsageError):
            detection_bench.parse_args(argv)


def test_measure_rotates_the_order_and_times_every_step():
    calls = []
    clock = iter(range(1000)).__next__  # each reading one second later
    steps = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    syncs = []
    times = detection_bench.measure(steps, 3, sync=lambda: syncs.append(1), clock=clock)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(t == [1000.0] * 3 for t in times.values())
    assert len(syncs) == 2 * 9  # before and after each step


def test_summarize_ratios_against_torchvision():
    s = detection_bench.summarize({"torchvision": [30.0, 10.0, 20.0], "graphed": [5.0, 10.0, 15.0]})
    assert s["torchvision"]["median_ms"] == 20.0 and s["graphed"]["median_ms"] == 10.0
    assert s["graphed"]["speedup_vs_torchvision"] == 2.0 and s["torchvision"]["speedup_vs_torchvision"] == 1.0
    assert detection_bench.summarize({"static": [1.0]})["static"]["speedup_vs_torchvision"] is None
    rows = [dict(model="m", batch=2, height=128, width=128, impl="graphed", supported=False,
                 note="capture failed: X"),
            dict(model="m", batch=2, height=128, width=128, impl="graphed", supported=True, **s["graphed"])]
    table = detection_bench.format_table(rows)
    assert "capture failed: X" in table and "2.00" in table


class FakeSyncDebug:
    """CUDA's sync debug mode, simulated: the step 'syncs' `syncs` times."""

    def __init__(self, syncs):
        self.mode, self.syncs, self.modes = "default", syncs, []

    def set_mode(self, mode):
        self.mode = mode
        self.modes.append(mode)

    def step(self):
        for _ in range(self.syncs):
            if self.mode == "warn":
                warnings.warn("called a synchronizing CUDA operation")
            elif self.mode == "error":
                raise RuntimeError("called a synchronizing CUDA operation")


def test_sync_check_passes_a_step_without_syncs():
    fake = FakeSyncDebug(0)
    r = detection_bench.sync_check(fake.step, fake.set_mode, lambda: None)
    assert r["ok"] and r["syncs_per_step"] == 0 and r["error"] is None
    assert fake.modes == ["warn", "default", "error", "default"]


def test_sync_check_fails_a_step_that_syncs_and_says_where():
    fake = FakeSyncDebug(2)
    r = detection_bench.sync_check(fake.step, fake.set_mode, lambda: None)
    assert not r["ok"] and r["syncs_per_step"] == 2
    assert r["where"] and r["where"][0].startswith("test_detection_bench.py:") and r["where"][0].endswith("x2")
    assert r["error"].startswith("RuntimeError: called a synchronizing")
    assert fake.mode == "default"


def losses(**values):
    return {k: torch.tensor(v) for k, v in values.items()}


def test_compare_losses():
    a = losses(loss_a=1.0, loss_b=2.0)
    assert detection_bench.compare_losses(a, a, losses(loss_a=1.0005, loss_b=2.0))["ok"]
    r = detection_bench.compare_losses(a, a, losses(loss_a=1.01, loss_b=2.0))
    assert not r["ok"] and r["replays_equal"] and not r["equal_to_eager"] and "loss_a" in r["detail"]
    r = detection_bench.compare_losses(a, losses(loss_a=1.0, loss_b=2.0000002), a)
    assert not r["ok"] and not r["replays_equal"]
    nan = losses(loss_a=float("nan"), loss_b=2.0)
    assert not detection_bench.compare_losses(nan, nan, nan)["ok"]
    assert not detection_bench.compare_losses(a, a, losses(loss_a=1.0))["ok"]


def test_graph_check_seeds_before_each_call():
    seeds, calls = [], []

    def seed():
        seeds.append(len(calls))

    def replay():
        calls.append("replay")
        return losses(loss=1.0)

    def eager():
        calls.append("eager")
        return losses(loss=1.0)

    r = detection_bench.graph_check(replay, eager, seed)
    assert r["ok"] and calls == ["replay", "replay", "eager"] and seeds == [0, 1, 2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where torch sees no CUDA device")
def test_cuda_without_a_device_is_a_clear_usage_error(capsys):
    assert detection_bench.main(["--device", "cuda"]) == 2
    assert "CUDA not available" in capsys.readouterr().err


def test_tiny_cpu_run(tmp_path):
    torchvision_or_skip()
    out = tmp_path / "det.json"
    rc = detection_bench.main(["--impls", "torchvision,static", "--image-sizes", "64", "--batch-sizes", "1",
                               "--steps", "1", "--warmup", "1", "--max-boxes", "2", "--modes", "train,eval",
                               "--json", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0, data["failures"]
    assert data["device"] == "cpu" and data["complete"] and data["checks"] == [] and data["failures"] == []
    assert [(r["mode"], r["impl"], r["supported"], r["steps"]) for r in data["results"]] == [
        ("train", "torchvision", True, 1), ("train", "static", True, 1),
        ("eval", "torchvision", True, 1), ("eval", "static", True, 1)]
    assert data["results"][0]["speedup_vs_torchvision"] == 1.0


def test_a_builder_it_does_not_take_is_a_usage_error(capsys):
    torchvision_or_skip()
    assert detection_bench.main(["--model", "keypointrcnn_resnet50_fpn", "--steps", "1", "--warmup", "1"]) == 2
    assert "not a torchvision Faster R-CNN, Mask R-CNN, RetinaNet, FCOS or SSD builder" in capsys.readouterr().err


@pytest.mark.parametrize("model, size, batch", [
    # B = 2: SSDlite's last extra layers are 1x1, whose batch norm needs more than one value in training.
    ("ssdlite320_mobilenet_v3_large", "320", "2"),
    pytest.param("retinanet_resnet50_fpn", "64", "1", marks=pytest.mark.models),
])
def test_tiny_cpu_run_of_a_one_stage_model(tmp_path, model, size, batch):
    """A one-stage detector (SSDlite at its fixed 320x320; RetinaNet, a
    ResNet-50) end to end: every implementation ran, training and eval."""
    torchvision_or_skip()
    out = tmp_path / "det.json"
    rc = detection_bench.main(["--model", model, "--impls", "torchvision,static", "--image-sizes", size,
                               "--batch-sizes", batch, "--steps", "1", "--warmup", "1", "--max-boxes", "2",
                               "--modes", "train,eval", "--json", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0, data["failures"]
    assert data["model"] == model and data["complete"] and data["failures"] == []
    assert [(r["mode"], r["impl"], r["supported"], r["height"]) for r in data["results"]] == [
        ("train", "torchvision", True, int(size)), ("train", "static", True, int(size)),
        ("eval", "torchvision", True, int(size)), ("eval", "static", True, int(size))]
