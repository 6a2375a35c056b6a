"""examples/train_static_faster_rcnn.py runs: a few steps at a tiny size.

Runs the script as a user does (a subprocess: its exit status counts) and
checks that it writes the loss curve and that its final loss is finite. A
handful of steps cannot show the loss going down; the example's full run
(a few hundred steps) does, in its PNG.
"""
import math
import os
import re
import subprocess
import sys

import pytest
from helpers.checks import torchvision_or_skip

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "train_static_faster_rcnn.py")
TIMEOUT_S = 240  # 5 steps take about 15 s on 2 busy cores, imports included


def test_train_static_faster_rcnn_runs(tmp_path):
    torchvision_or_skip()
    pytest.importorskip("matplotlib", reason="the example saves its loss curve with matplotlib")
    import syncfree

    out = tmp_path / "loss.png"
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(syncfree.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    env["MPLBACKEND"] = "Agg"
    cmd = [sys.executable, EXAMPLE, "--steps", "5", "--image-size", "64", "--batch-size", "2",
           "--num-images", "8", "--max-boxes", "3", "--log-every", "2", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", "the loss curve is not a PNG"
    assert out.stat().st_size > 5000, "the loss curve is suspiciously small"
    match = re.search(r"^final loss (\S+)$", proc.stdout, re.MULTILINE)
    assert match, proc.stdout[-2000:]
    assert math.isfinite(float(match.group(1))), match.group(0)
    assert re.search(r"^5 steps in ", proc.stdout, re.MULTILINE), proc.stdout[-2000:]
