"""The bookkeeping of scripts/device-check.sh on a machine without a GPU: the
deadline, signals, a missing GPU or prerequisite, bad usage. Each case checks
the exit status, the verdict file and the archive of logs.

Run by `make rehearse` after `scripts/device-check.sh --prepare`, with PYTHON
set to a Python whose torch is a CUDA build (the script's prerequisite)."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device-check.sh"
PYTHON = os.environ.get("PYTHON", sys.executable)


def env(tmp_path, **extra):
    e = dict(os.environ, PYTHON=PYTHON, BUILD=str(tmp_path / "build"), OUT=str(tmp_path / "out"))
    e.update(extra)
    return e


def verdict_and_logs(tmp_path):
    out = tmp_path / "out"
    verdict = (out / "verdict.txt").read_text()
    with tarfile.open(out / "device-check.tgz") as tar:
        logs = {pathlib.PurePath(n).name for n in tar.getnames()}
    assert len(list(out.iterdir())) <= 8
    return verdict, logs


@pytest.fixture(autouse=True)
def prepared():
    if not (ROOT / ".deps" / "googletest" / "CMakeLists.txt").is_file():
        pytest.fail("run scripts/device-check.sh --prepare first (make rehearse does)")


def test_a_step_that_no_longer_fits_is_skipped_for_time(tmp_path):
    # 15 s: the tools are found, but configure (planned 25 s x the core scale) does not fit.
    r = subprocess.run([str(SCRIPT), "--rehearse"], env=env(tmp_path, DEADLINE="15", TIME_SCALE="1"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    verdict, logs = verdict_and_logs(tmp_path)
    assert "configure" in verdict and "SKIPPED-FOR-TIME" in verdict, verdict
    assert "PASS" not in verdict.split("SKIPPED-FOR-TIME")[1]
    assert {"machine.txt", "verdict.txt"} <= logs
    assert "exit status 1" in r.stdout


def test_term_during_a_step_writes_the_verdict_and_stops_the_step(tmp_path):
    p = subprocess.Popen([str(SCRIPT), "--rehearse"], env=env(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    for line in p.stdout:  # wait until configure runs
        seen.append(line)
        if "] configure (planned" in line:
            break
    else:
        pytest.fail("configure never started:\n" + "".join(seen))
    time.sleep(2)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rest = p.stdout.read()
    rc = p.wait(timeout=60)
    assert time.monotonic() - t0 < 20, "the script did not stop soon after TERM"
    assert rc == 1, "".join(seen) + rest
    verdict, logs = verdict_and_logs(tmp_path)
    assert "INTERRUPTED" in verdict and "SIGTERM" in verdict, verdict
    assert "configure.log" in logs
    # Nothing the step started is left running in the script's session.
    time.sleep(1)
    left = subprocess.run(["ps", "-o", "pid,stat,etime,args", "-s", str(p.pid)], capture_output=True,
                          text=True).stdout.strip().splitlines()[1:]
    left = [line for line in left if line.split()[1][0] != "Z"]  # exited, not yet reaped by init
    assert not left, "processes left running:\n" + "\n".join(left)


def test_without_a_gpu_a_real_run_fails_at_once_and_says_to_rehearse(tmp_path):
    r = subprocess.run([str(SCRIPT)], env=env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    verdict, _ = verdict_and_logs(tmp_path)
    assert "GPU visible to torch" in verdict and "FAIL" in verdict and "--rehearse" in verdict, verdict
    assert "configure" not in verdict


def test_a_python_without_torch_is_a_missing_prerequisite(tmp_path):
    r = subprocess.run([str(SCRIPT), "--rehearse"], env=env(tmp_path, PYTHON="/bin/false"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    verdict, _ = verdict_and_logs(tmp_path)
    assert "prerequisite: a CUDA build of torch" in verdict and "installs nothing" in verdict, verdict


@pytest.mark.parametrize("var, value", [("PHASE", "speed"), ("DEADLINE", "8m")])
def test_bad_usage(tmp_path, var, value):
    r = subprocess.run([str(SCRIPT), "--rehearse"], env=env(tmp_path, **{var: value}),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and var in r.stderr, r.stdout + r.stderr


def test_the_detection_step_runs_in_the_bench_phase_within_its_limits():
    # The detection step, of the default model and then of RetinaNet: after
    # the speed targets and before the sanitizers, under begin's deadline
    # (run_timed with the step's limit), NOT-RUN in a rehearsal, and its
    # verdict rows read by device_report.py detection.
    text = SCRIPT.read_text()
    targets = text.index('scripts/device_report.py targets')
    step = text.index('bench/detection_bench.py --device cuda')
    verdict = text.index('scripts/device_report.py detection')
    sanitize = text.index('if want sanitize')
    assert targets < step < verdict < sanitize
    block = text[targets:sanitize]
    assert block.count('begin "$name"') == 2 and block.count('"$step_limit"') == 2
    assert 'for det in default retinanet; do' in block
    default = block.index("--model fasterrcnn_mobilenet_v3_large_fpn --batch-sizes 2,8 --image-sizes 512,800")
    retinanet = block.index("--model retinanet_resnet50_fpn --batch-sizes 2 --image-sizes 512)")
    assert default < retinanet < step
    for aspect in ("syncs", "graph", "speed"):
        assert f"{aspect}) what=" in block
    assert 'name="$label: $what"' in block
    assert 'label="detection step"' in block and 'label="RetinaNet step"' in block
    assert 'not_run "$name"; continue' in block and 'then not_run "$name"' in block
    assert "NOT-MEASURED" in block and "MISSED" in block
    # What comes back from $OUT: the verdict, the archive and at most five JSONs
    # (the device machine returns at most 8 files).
    copied = set(re.findall(r'"\$OUT/([A-Za-z0-9_.$-]+)"', text))
    jsons = {c for c in copied if c.endswith(".json") and "$" not in c} | {"bench-gpu.json", "bench-gpu-rows.json",
                                                           "bench-gpu-python.json"}
    assert '"$OUT/$json.json"' in block
    jsons |= {f"{name}.json" for name in re.findall(r"\bjson=([A-Za-z0-9_.-]+);", block)}
    assert {"bench-gpu-detection.json", "bench-gpu-detection-retinanet.json"} <= jsons and len(jsons) + 2 <= 8
    assert f"at most {len(jsons) + 2} files" in text
