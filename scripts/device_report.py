#!/usr/bin/env python3
"""The benchmark verdict of scripts/device-check.sh (the correctness checks on
the GPU are the test suite's: pytest -m cuda, and the CUDA kernel tests).

    device_report.py targets CPP.json PY.json  # the benchmark against the targets
    device_report.py detection ASPECT DET.json # the detection step (bench/detection_bench.py):
                                               # ASPECT syncs, graph or speed

`targets` prints the benchmark against the targets; its last line is
the verdict: "all N targets met" (exit 0), "MISSED: <the missed targets>"
(exit 2: a missed target is reported, not an error), "NOT MEASURED: ..."
(exit 1: a benchmark result it needs is missing or unreadable), or "FAIL: ..."
(exit 1: a host sync was measured in a syncfree call).

`detection` reads the JSON of bench/detection_bench.py --device cuda and
judges one aspect of the static detection training step at each of the
configurations that DETECTION_CONFIGS gives the JSON's model (the default
model: B = 2 and 8, 512x512 and 800x800; retinanet_resnet50_fpn: B = 2,
512x512), with the same last-line verdicts and exit statuses:
- syncs: no host sync in the static eager step (sync debug mode: none
  counted under "warn", nothing raised under "error"); a sync is FAIL;
- graph: the CUDA-graph replay equals the eager step (finite losses, two
  replays equal bit for bit, replay == eager within the benchmark's
  tolerance); a difference or a failed capture is FAIL;
- speed: the graphed step at least DETECTION_GOAL x faster than
  torchvision's eager step (medians of the same run); below is MISSED.
A configuration without its result, or a model without configurations
here, is NOT MEASURED.
"""
import json
import sys


# Targets on the GPU (ms, syncfree gather, medians).
TARGETS = [
    ("single row N=1e6", 1000000, 1, "syncfree", 0.025),
    ("single row N=1e7", 10000000, 1, "syncfree", 0.100),
    ("batch 32 x N=1e5", 100000, 32, "syncfree", 0.035),
    ("row N=1e3, eager", 1000, 1, "syncfree", 0.015),
    ("row N=1e3, CUDA graph replay", 1000, 1, "syncfree-graph", 0.005),
]


def targets(cpp_json: str, py_json: str) -> int:
    rows = []
    for path in (cpp_json, py_json):
        try:
            with open(path) as f:
                rows += [dict(r, source=path) for r in json.load(f)["results"]]
        except (OSError, ValueError, KeyError) as e:
            print(f"targets: cannot read {path}: {e}")
            print(f"NOT MEASURED: no benchmark results in {path}")
            return 1

    def find(n, batch, impl):
        for r in rows:
            if r["n"] == n and r["batch"] == batch and r["impl"] == impl and r.get("supported"):
                return r
        return None

    met, missed, missing = [], [], []
    print(f"{'target':<34} {'limit ms':>9} {'measured ms':>12}  verdict")
    for name, n, batch, impl, limit in TARGETS:
        r = find(n, batch, impl)
        if r is None:
            missing.append(name)
            print(f"{name:<34} {limit:>9.4f} {'-':>12}  NOT MEASURED")
            continue
        ok = r["median_ms"] <= limit
        (met if ok else missed).append(f"{name} ({r['median_ms']:.4f} ms > {limit} ms)" if not ok else name)
        print(f"{name:<34} {limit:>9.4f} {r['median_ms']:>12.4f}  {'met' if ok else 'MISSED'}")
    # At least 10x the best of the reference samplers (naive, topk) (naive, topk, topk
    # compiled) at N >= 1e6 and for batch 32.
    for r in rows:
        if r["impl"] != "syncfree" or not r.get("supported"):
            continue
        if not (r["n"] >= 1000000 or r["batch"] == 32):
            continue
        rivals = [q for q in rows if q["n"] == r["n"] and q["batch"] == r["batch"] and q.get("supported")
                  and q["impl"] in ("naive", "topk", "topk-compiled")]
        if not rivals:
            continue
        best = min(rivals, key=lambda q: q["median_ms"])
        ratio = best["median_ms"] / r["median_ms"]
        ok = ratio >= 10
        name = f">=10x best rival N={r['n']} B={r['batch']} ({r['source'].rsplit('/', 1)[-1]})"
        (met if ok else missed).append(name if ok else f"{name}: {ratio:.1f}x")
        print(f"{name:<60} {ratio:>6.1f}x vs {best['impl']:<13} {'met' if ok else 'MISSED'}")
    # No host sync is a guarantee, not a speed target: one measured fails the check.
    syncs = [r for r in rows if r["impl"].startswith("syncfree") and r.get("syncs_per_call") not in (None, 0)]
    failed = []
    for r in syncs:
        name = f"no syncs {r['impl']} N={r['n']} B={r['batch']}"
        failed.append(f"{name}: {r['syncs_per_call']} per call")
        print(f"syncs per call {r['impl']} N={r['n']} B={r['batch']}: {r['syncs_per_call']}  FAIL")
    print(f"targets: {len(met)} met, {len(missed)} missed, {len(missing)} not measured, {len(failed)} sync failures")
    return verdict(failed, missing, missed, f"all {len(met)} targets met")


def verdict(failed, missing, missed, all_met):
    """Prints the verdict as the last line and returns the exit status: FAIL (1)
    before NOT MEASURED (1) before MISSED (2), each line also naming what the
    later ones hold; ``all_met`` (0) only when all three lists are empty."""
    def also(label, items):
        return f"; {label}: {'; '.join(items)}" if items else ""

    if failed:
        print("FAIL: " + "; ".join(failed) + also("NOT MEASURED", missing) + also("MISSED", missed))
        return 1
    if missing:
        print("NOT MEASURED: " + "; ".join(missing) + also("MISSED", missed))
        return 1
    if missed:
        print("MISSED: " + "; ".join(missed))
        return 2
    print(all_met)
    return 0


# The detection step's configurations (batch, height, width) per model, as
# scripts/device-check.sh runs them, and the speed goal.
DETECTION_CONFIGS = {
    "fasterrcnn_mobilenet_v3_large_fpn": [(2, 512, 512), (8, 512, 512), (2, 800, 800), (8, 800, 800)],
    "retinanet_resnet50_fpn": [(2, 512, 512)],
}
DETECTION_GOAL = 1.5
DETECTION_ASPECTS = ("syncs", "graph", "speed")


def _config_name(batch, height, width):
    return f"B={batch} {height}x{width}"


def detection(aspect: str, path: str) -> int:
    if aspect not in DETECTION_ASPECTS:
        print(f"detection: unknown aspect {aspect!r} (known: {', '.join(DETECTION_ASPECTS)})")
        print(f"NOT MEASURED: unknown aspect {aspect!r}")
        return 1
    try:
        with open(path) as f:
            data = json.load(f)
        rows, checks = list(data["results"]), list(data.get("checks", []))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"detection: cannot read {path}: {e}")
        print(f"NOT MEASURED: no detection benchmark results in {path}")
        return 1
    if data.get("device") != "cuda":
        print(f"detection: {path} was measured on {data.get('device')!r}, not cuda")
        print(f"NOT MEASURED: no CUDA detection results in {path}")
        return 1
    model = data.get("model")
    if model not in DETECTION_CONFIGS:
        print(f"detection: {path} is of model {model!r}, which has no configurations here "
              f"(known: {', '.join(DETECTION_CONFIGS)})")
        print(f"NOT MEASURED: no configurations for model {model!r}")
        return 1
    configs = DETECTION_CONFIGS[model]
    print(f"detection: {model}")

    def at(items, config, **match):
        b, h, w = config
        for r in items:
            if (r.get("batch"), r.get("height"), r.get("width")) == (b, h, w) and all(
                    r.get(k) == v for k, v in match.items()):
                return r
        return None

    met, missed, missing, failed = [], [], [], []
    if aspect in ("syncs", "graph"):
        check = "syncs" if aspect == "syncs" else "graph_replay"
        what = "host syncs in the static eager step" if aspect == "syncs" else "graph replay == eager"
        print(f"{'detection: ' + what:<48} verdict")
        for config in configs:
            name = _config_name(*config)
            c = at(checks, config, check=check)
            if c is None:
                missing.append(name)
                print(f"{name:<48} NOT MEASURED")
            elif c.get("ok") is True:
                met.append(name)
                detail = "0 syncs" if aspect == "syncs" else c.get("detail", "")
                print(f"{name:<48} met ({detail})")
            else:
                if aspect == "syncs":
                    detail = f"{c.get('syncs_per_step')} syncs per step"
                    if c.get("where"):
                        detail += " at " + ", ".join(c["where"])
                    if c.get("error"):
                        detail += f"; error mode: {c['error']}"
                else:
                    detail = c.get("detail", "no detail")
                failed.append(f"{name}: {detail}")
                print(f"{name:<48} FAIL ({detail})")
    else:
        print(f"{'detection: graphed vs torchvision eager':<48} {'tv ms':>9} {'graphed ms':>11} {'ratio':>6}  "
              f"verdict (goal {DETECTION_GOAL}x)")
        for config in configs:
            name = _config_name(*config)
            tv = at(rows, config, impl="torchvision", supported=True)
            graphed = at(rows, config, impl="graphed", supported=True)
            static = at(rows, config, impl="static", supported=True)
            if tv is None or graphed is None or not graphed.get("median_ms"):
                missing.append(name)
                why = "torchvision eager" if tv is None else "graphed"
                note = (at(rows, config, impl="graphed") or {}).get("note") if tv is not None else ""
                print(f"{name:<48} NOT MEASURED (no {why} result{': ' + note if note else ''})")
                continue
            ratio = tv["median_ms"] / graphed["median_ms"]
            ok = ratio >= DETECTION_GOAL
            (met if ok else missed).append(name if ok else f"graphed {name}: {ratio:.2f}x < {DETECTION_GOAL}x")
            eager = f" (static eager {tv['median_ms'] / static['median_ms']:.2f}x)" if static else ""
            print(f"{name:<48} {tv['median_ms']:>9.2f} {graphed['median_ms']:>11.2f} {ratio:>5.2f}x  "
                  f"{'met' if ok else 'MISSED'}{eager}")
    print(f"detection {aspect}: {len(met)} met, {len(missed)} missed, {len(missing)} not measured, "
          f"{len(failed)} failed")
    return verdict(failed, missing, missed, f"all {len(met)} met")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "targets":
        sys.exit(targets(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "detection":
        sys.exit(detection(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
