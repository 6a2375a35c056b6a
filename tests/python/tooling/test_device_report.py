"""The speed-target verdict of scripts/device_report.py (no GPU needed): a
missed target is reported as MISSED, never as met, and a missing result is
NOT MEASURED."""
import importlib.util
import json
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "device_report.py"
spec = importlib.util.spec_from_file_location("device_report", SCRIPT)
device_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(device_report)


def results(scale=1.0, drop=None, syncs=0):
    """Benchmark rows for every target, at scale x the target's limit."""
    cpp, py = [], []
    for name, n, batch, impl, limit in device_report.TARGETS:
        if name == drop:
            continue
        cpp.append(dict(n=n, batch=batch, impl=impl, supported=True, median_ms=limit * scale,
                        syncs_per_call=syncs if impl == "syncfree" else None))
        if impl == "syncfree" and (n >= 1000000 or batch == 32):
            py.append(dict(n=n, batch=batch, impl="topk", supported=True, median_ms=limit * 20))
    return cpp, py


def verdict(tmp_path, capsys, cpp, py):
    paths = []
    for name, rows in (("cpp.json", cpp), ("py.json", py)):
        (tmp_path / name).write_text(json.dumps({"results": rows}))
        paths.append(str(tmp_path / name))
    rc = device_report.targets(*paths)
    lines = capsys.readouterr().out.strip().splitlines()
    return rc, lines


def test_all_targets_met(tmp_path, capsys):
    rc, lines = verdict(tmp_path, capsys, *results(scale=0.5))
    assert rc == 0
    assert lines[-1] == f"all {len(device_report.TARGETS) + 3} targets met"


@pytest.mark.parametrize("scale", [1.01, 3.0])
def test_every_target_missed_is_missed_not_met(tmp_path, capsys, scale):
    rc, lines = verdict(tmp_path, capsys, *results(scale=scale))
    assert rc == 2
    assert lines[-1].startswith("MISSED: ")
    for name, *_ in device_report.TARGETS:
        assert name in lines[-1]
    assert not any(line.rstrip().endswith(" met") for line in lines if "x vs" not in line)


def test_one_rival_ratio_missed(tmp_path, capsys):
    cpp, py = results(scale=0.5)
    py[0]["median_ms"] = cpp[0]["median_ms"] * 2  # only 2x the best rival
    rc, lines = verdict(tmp_path, capsys, cpp, py)
    assert rc == 2 and lines[-1].startswith("MISSED: >=10x best rival") and "2.0x" in lines[-1]


def test_syncs_fail_the_check(tmp_path, capsys):
    # A host sync breaks a guarantee: a failure (exit 1), not a missed speed target.
    rc, lines = verdict(tmp_path, capsys, *results(scale=0.5, syncs=1))
    assert rc == 1 and lines[-1].startswith("FAIL: ") and "no syncs syncfree" in lines[-1]


def test_a_missing_result_is_not_measured(tmp_path, capsys):
    rc, lines = verdict(tmp_path, capsys, *results(scale=3.0, drop="single row N=1e7"))
    assert rc == 1
    assert lines[-1].startswith("NOT MEASURED: single row N=1e7") and "MISSED: " in lines[-1]


def test_an_unreadable_file_is_not_measured(tmp_path, capsys):
    rc = device_report.targets(str(tmp_path / "none.json"), str(tmp_path / "none.json"))
    assert rc == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("NOT MEASURED: ")


# --- the detection step (bench/detection_bench.py --device cuda)


DEFAULT_MODEL = "fasterrcnn_mobilenet_v3_large_fpn"


def detection_json(tmp_path, ratio=2.0, syncs=0, graph_ok=True, drop=None, device="cuda", capture_failed=False,
                   model=DEFAULT_MODEL, configs=None):
    """A detection benchmark JSON of `model` for every configuration that
    DETECTION_CONFIGS gives it (or `configs`): the graphed step `ratio` x
    faster than torchvision's."""
    rows, checks = [], []
    for b, h, w in configs or device_report.DETECTION_CONFIGS[model]:
        if (b, h, w) == drop:
            continue
        base = dict(model=model, batch=b, height=h, width=w)
        rows.append(dict(base, impl="torchvision", supported=True, median_ms=100.0))
        rows.append(dict(base, impl="static", supported=True, median_ms=80.0))
        if capture_failed:
            rows.append(dict(base, impl="graphed", supported=False, note="capture failed: RuntimeError: x"))
        else:
            rows.append(dict(base, impl="graphed", supported=True, median_ms=100.0 / ratio))
        checks.append(dict(base, check="syncs", ok=syncs == 0, syncs_per_step=syncs,
                           where=["_utils.py:157 x2"] if syncs else [], error="RuntimeError: sync" if syncs else None))
        checks.append(dict(base, check="graph_replay", ok=graph_ok and not capture_failed,
                           detail="finite=True replays-equal=True replay-vs-eager max |diff| 0"
                           if graph_ok else "finite=True replays-equal=False"))
    path = tmp_path / "det.json"
    path.write_text(json.dumps(dict(device=device, model=model, results=rows, checks=checks)))
    return str(path)


def detection_verdict(capsys, aspect, path):
    rc = device_report.detection(aspect, path)
    return rc, capsys.readouterr().out.strip().splitlines()


@pytest.mark.parametrize("aspect", device_report.DETECTION_ASPECTS)
def test_detection_all_met(tmp_path, capsys, aspect):
    rc, lines = detection_verdict(capsys, aspect, detection_json(tmp_path))
    assert rc == 0 and lines[-1] == f"all {len(device_report.DETECTION_CONFIGS[DEFAULT_MODEL])} met", lines


@pytest.mark.parametrize("aspect", device_report.DETECTION_ASPECTS)
def test_detection_retinanet_is_judged_at_its_own_configuration(tmp_path, capsys, aspect):
    # RetinaNet runs at B = 2, 512x512 only: that one result is all it needs,
    # and without it the aspect is not measured.
    assert device_report.DETECTION_CONFIGS["retinanet_resnet50_fpn"] == [(2, 512, 512)]
    rc, lines = detection_verdict(capsys, aspect, detection_json(tmp_path, model="retinanet_resnet50_fpn"))
    assert rc == 0 and lines[-1] == "all 1 met" and lines[0] == "detection: retinanet_resnet50_fpn", lines
    path = detection_json(tmp_path, model="retinanet_resnet50_fpn", configs=[(2, 800, 800)])
    rc, lines = detection_verdict(capsys, aspect, path)
    assert rc == 1 and lines[-1] == "NOT MEASURED: B=2 512x512", lines


@pytest.mark.parametrize("aspect", device_report.DETECTION_ASPECTS)
def test_detection_a_model_without_configurations_is_not_measured(tmp_path, capsys, aspect):
    path = detection_json(tmp_path, model="fcos_resnet50_fpn", configs=[(2, 512, 512)])
    rc, lines = detection_verdict(capsys, aspect, path)
    assert rc == 1 and lines[-1] == "NOT MEASURED: no configurations for model 'fcos_resnet50_fpn'", lines


def test_detection_speed_goal_missed_is_missed_not_met(tmp_path, capsys):
    rc, lines = detection_verdict(capsys, "speed", detection_json(tmp_path, ratio=1.49))
    assert rc == 2 and lines[-1].startswith("MISSED: ") and "1.49x < 1.5x" in lines[-1], lines
    assert not any(line.rstrip().endswith(" met") or " met " in line for line in lines[1:-2]), lines


def test_detection_syncs_fail_with_where_they_happen(tmp_path, capsys):
    rc, lines = detection_verdict(capsys, "syncs", detection_json(tmp_path, syncs=3))
    assert rc == 1 and lines[-1].startswith("FAIL: ") and "3 syncs per step at _utils.py:157" in lines[-1]


@pytest.mark.parametrize("aspect", ["graph", "speed"])
def test_detection_failed_capture(tmp_path, capsys, aspect):
    # A capture that failed: the replay check fails, the speed goal is not measured.
    rc, lines = detection_verdict(capsys, aspect, detection_json(tmp_path, capture_failed=True))
    assert rc == 1
    assert lines[-1].startswith("FAIL: " if aspect == "graph" else "NOT MEASURED: "), lines


def test_detection_replay_different_from_eager_fails(tmp_path, capsys):
    rc, lines = detection_verdict(capsys, "graph", detection_json(tmp_path, graph_ok=False))
    assert rc == 1 and lines[-1].startswith("FAIL: ") and "replays-equal=False" in lines[-1]


@pytest.mark.parametrize("aspect", device_report.DETECTION_ASPECTS)
def test_detection_a_missing_configuration_is_not_measured(tmp_path, capsys, aspect):
    rc, lines = detection_verdict(capsys, aspect, detection_json(tmp_path, drop=(8, 800, 800)))
    assert rc == 1 and lines[-1].startswith("NOT MEASURED: B=8 800x800"), lines


@pytest.mark.parametrize("aspect", device_report.DETECTION_ASPECTS)
def test_detection_cpu_results_or_no_file_are_not_measured(tmp_path, capsys, aspect):
    rc, lines = detection_verdict(capsys, aspect, detection_json(tmp_path, device="cpu"))
    assert rc == 1 and lines[-1].startswith("NOT MEASURED: ")
    rc, lines = detection_verdict(capsys, aspect, str(tmp_path / "none.json"))
    assert rc == 1 and lines[-1].startswith("NOT MEASURED: ")
