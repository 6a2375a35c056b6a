#!/usr/bin/env python3
"""Charts of a benchmark JSON (from bench/syncfree_bench --json or bench/bench.py --json).

    python3 bench/plot.py RESULTS.json OUT_PREFIX

writes OUT_PREFIX-single.png (single rows) and OUT_PREFIX-batch.png (batches):
median time per call against N, log-log, one line per implementation, with
the 10th..90th percentile spread as error bars.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def chart(results, title, path):
    impls = []
    for r in results:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = 0
    for impl in impls:
        rows = sorted((r for r in results if r["impl"] == impl and r["supported"]), key=lambda r: r["n"])
        if not rows:
            continue
        n = [r["n"] for r in rows]
        med = [r["median_ms"] for r in rows]
        err = [[m - r["p10_ms"] for m, r in zip(med, rows)], [r["p90_ms"] - m for m, r in zip(med, rows)]]
        ax.errorbar(n, med, yerr=err, marker="o", capsize=3, label=impl)
        plotted += 1
    if not plotted:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N (items per row)")
    ax.set_ylabel("median time per call (ms)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        data = json.load(f)
    # Runs over several thread counts: the charts show the run's largest
    # ("threads" at the top), as before.
    results = [r for r in data["results"] if r.get("threads", data.get("threads")) == data.get("threads")]
    where = f"{data.get('device', '?')}, {data.get('threads', '?')} threads, {data.get('date', '')[:10]}"
    single = [r for r in results if r["batch"] == 1]
    batch = [r for r in results if r["batch"] > 1]
    b = batch[0]["batch"] if batch else 0
    for rows, name, title in [(single, "single", f"Single row, K = N/10, F = 16 ({where})"),
                              (batch, "batch", f"Batch of {b} rows, K = N/10, F = 16 ({where})")]:
        path = f"{sys.argv[2]}-{name}.png"
        if chart(rows, title, path):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
