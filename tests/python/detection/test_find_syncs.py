"""syncfree.find_syncs on torchvision's detectors: what it finds in
torchvision's training step agrees with the profiler's count of the same
operators, and make_static's steps (training and inference) have none."""
import collections
import json
import os
import subprocess
import sys

import pytest
import torch

import syncfree
import syncfree.detection as sf_det
from helpers.detection import H, W, make_batch, tiny_model
from syncfree.testing import assert_no_syncs

G = 6
KINDS = ["faster", "mask", "keypoint"]


def training_step(model, images, targets):
    def step():
        sum(model(images, targets).values()).backward()
    return step


def profiler_counts(step):
    """What the profiler records of one call of ``step``, counted apart from
    the finder's modes: ``nonzero`` at every depth (boolean-mask indexing and
    assignment call it inside); ``randperm`` and torchvision's ``nms`` at the
    top (an operator's overloads nest); ``_local_scalar_dense`` outside
    ``index_put_``. That last rule is the one the finder shares: index_put_'s
    masked_fill path reads a host scalar, which waits for no device (the
    finder tests that rule on its own in tests/python/tooling)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    counts = collections.Counter()
    for e in prof.events():
        parents = []
        p = e.cpu_parent
        while p is not None:
            parents.append(p.name)
            p = p.cpu_parent
        if e.name == "aten::nonzero":
            counts["nonzero"] += 1
        elif e.name == "aten::_local_scalar_dense" and "aten::index_put_" not in parents:
            counts["item"] += 1
        elif e.name in ("aten::randperm", "torchvision::nms") and e.name not in parents:
            counts[e.name.split("::")[1]] += 1
    return counts


@pytest.mark.parametrize("kind", KINDS)
def test_torchvision_step_agrees_with_the_profiler(tv, kind):
    model = tiny_model(kind).train()
    images, targets = make_batch(7, [2, 0, 3], masks=kind == "mask", keypoints=kind == "keypoint")
    step = training_step(model, list(images), targets)
    step()  # warm-up
    want = profiler_counts(step)
    with syncfree.find_syncs() as report:
        step()
    got = report.counts()
    nonzero_family = got.get("nonzero", 0) + got.get("mask_index", 0) + got.get("mask_assign", 0)
    assert want["nonzero"] > 0 and want["randperm"] > 0, want
    assert (nonzero_family, got.get("item", 0), got.get("randperm", 0), got.get("nms", 0)) == (
        want["nonzero"], want["item"], want["randperm"], want["nms"]), (got, dict(want))
    # Every entry is attributed to torchvision's code and to this test's step.
    for e in report.entries:
        assert e.where is not None and e.where.file.endswith("test_find_syncs.py"), e
        assert e.library is not None and e.library.file.startswith("torchvision/"), e
    sites = {(e.library.file, e.library.function) for e in report.entries}
    assert ("torchvision/models/detection/_utils.py", "BalancedPositiveNegativeSampler.__call__") in sites


@pytest.mark.parametrize("kind", KINDS)
def test_static_steps_have_no_syncs(tv, kind):
    """make_static's training step (forward and backward) and inference make no
    host sync, no data-dependent shape and no tensor from Python data;
    torchvision's own step, inspected the same way, has all three."""
    model = tiny_model(kind, batch_norm_head=kind == "faster")
    static = sf_det.make_static(model, (H, W), G).train()
    images, targets = make_batch(7, [2, 0], masks=kind == "mask", keypoints=kind == "keypoint")
    padded = sf_det.pad_targets(targets, G)
    assert_no_syncs(training_step(static, images, padded))
    static.eval()
    with torch.no_grad():
        detections = assert_no_syncs(static, images)
    assert detections["valid"].shape[0] == 2
    model.train()
    with syncfree.find_syncs() as report:
        training_step(model, list(images), targets)()
    assert {"nonzero", "item", "from_python", "randperm"} <= report.counts().keys(), report.counts()


def command_line(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(syncfree.__file__)), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "syncfree.find_syncs", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.models
def test_command_line_on_a_torchvision_detector(tv, tmp_path):
    """The command line's report of a whole detector: torchvision's training step
    has the syncs of the docs' table (--fail: exit 1), make_static's none (exit 0)."""
    name = "fasterrcnn_mobilenet_v3_large_fpn"
    out = tmp_path / "tv.json"
    small = ("--size", "64", "--warmup", "0")
    run = command_line("--torchvision", name, *small, "--json", str(out), "--fail")
    assert run.returncode == 1, run.stdout + run.stderr
    counts = json.loads(out.read_text())["syncs"]["counts"]
    assert counts["nonzero"] >= 10 and counts["randperm"] == 8 and counts["item"] >= 2, counts
    assert "BalancedPositiveNegativeSampler.__call__" in run.stdout
    run = command_line("--torchvision", name, "--static", *small, "--json", str(out), "--fail")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(out.read_text())["syncs"]["total"] == 0
    assert "no host syncs" in run.stdout
