"""examples/train_coco.py runs end to end at a tiny size.

Runs the script as a user does (a subprocess: its exit status counts): it
generates a tiny COCO-format data set, trains two steps through its
DataLoader and StaticCollate, evaluates with COCOeval and writes its numbers
(JSON) and curves (PNG). Two steps cannot show AP rising; the example's full
run (a few hundred steps) does, in docs/images/train_coco.png.
"""
import json
import math
import os
import subprocess
import sys

import pytest
from helpers.checks import torchvision_or_skip

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "train_coco.py")
TIMEOUT_S = 240  # the run takes about 15 s on 2 busy cores, imports included


def pycocotools_or_skip():
    if os.environ.get("SYNCFREE_EXPECT_TORCHVISION") == "1":  # a CI leg: requirements/dev.txt has it
        import pycocotools  # noqa: F401
    else:
        pytest.importorskip("pycocotools", reason="the example evaluates with pycocotools (requirements/dev.txt)")


def run_example(*args):
    import syncfree

    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(syncfree.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT_S)


def test_train_coco_runs_end_to_end(tmp_path):
    torchvision_or_skip()
    pycocotools_or_skip()
    numbers, picture, data = tmp_path / "numbers.json", tmp_path / "curves.png", tmp_path / "data"
    proc = run_example("--steps", "2", "--batch-size", "2", "--num-train", "4", "--num-val", "3",
                       "--image-sides", "64", "96", "--min-size", "64", "--max-size", "96", "--max-boxes", "3",
                       "--log-every", "1", "--eval-every", "2", "--warmup", "1", "--workers", "1",
                       "--threads", "1", "--workdir", str(data), "--json", str(numbers), "--out", str(picture))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]

    # The generated data set: COCO files, the first image of each split without objects.
    for split, count in (("train", 4), ("val", 3)):
        with open(data / split / "annotations.json") as f:
            coco = json.load(f)
        assert len(coco["images"]) == count and len(os.listdir(data / split / "images")) == count
        assert [c["id"] for c in coco["categories"]] == [1, 2, 3]
        annotated = {a["image_id"] for a in coco["annotations"]}
        assert coco["images"][0]["id"] not in annotated and len(annotated) == count - 1
        for a in coco["annotations"]:
            assert a["iscrowd"] == 0 and a["area"] > 0 and a["bbox"][2] > 0 and a["bbox"][3] > 0
            assert set(a["segmentation"]) == {"size", "counts"}

    with open(numbers) as f:
        record = json.load(f)
    for key in ("steps", "batch_size", "canvas", "max_boxes", "losses", "evals", "train_seconds", "eval_seconds",
                "smoothed_loss"):
        assert key in record, key
    # The canvas holds every resized image (longer side at most 96), in multiples of 32.
    assert record["canvas"] == [96, 96]
    assert [row["step"] for row in record["losses"]] == [1, 2]
    for row in record["losses"]:
        assert math.isfinite(row["total"]) and row["total"] > 0, row
        assert {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"} <= set(row), row
    assert [row["step"] for row in record["evals"]] == [2]
    final = record["evals"][-1]
    assert 0 <= final["ap"] <= 1 and 0 <= final["ap50"] <= 1, final
    assert len(final["stats"]) == 12
    assert "step 2: AP " in proc.stdout and "Average Precision" in proc.stdout, proc.stdout[-2000:]

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in proc.stdout
    else:
        with open(picture, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "the curves are not a PNG"
        assert picture.stat().st_size > 5000, "the PNG is suspiciously small"


def test_train_coco_rejects_a_missing_data_set(tmp_path):
    proc = run_example("--data", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{tmp_path}/train/annotations.json does not exist" in proc.stderr, proc.stderr
