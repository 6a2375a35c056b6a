#!/usr/bin/env python3
"""Benchmark: syncfree.stratified_sample against the Python loop users write.

The loop, per row: for each class, ``nonzero`` of ``labels == c``, a
``randperm`` of the class, a slice of its quota, then ``cat``; the fill
(``nonzero`` of the labelled items not taken, ``randperm``, slice), a
``randperm`` of the result for a random slot order, and padding to K with -1
(a static output shape, as syncfree's). Python-int quotas: on a GPU every
``nonzero`` and every count would synchronize with the host.

Workload: labels int64, uniform over [-1, C) (1/(C+1) ignored), K = 512 slots,
a quota of max(1, K // (2C)) per class (about half the slots), fill=True.
Both samplers run side by side in one process, alternating call by call, and
the medians are reported with their ratio (loop / syncfree).

    python3 bench/stratified_bench.py [--classes 2,21,150] [--sizes 1e4,1e5,1e6]
                                      [--batches 1,32] [--k 512] [--min-time 0.5]
                                      [--min-reps 3] [--threads T] [--json FILE]
"""
import argparse
import json
import platform

import torch

import syncfree
from timing import add_options, interleaved, median, parse_options


def loop_sample_row(labels, k, quota, fill):
    """One row, as users write it (returns K indices, -1 padded)."""
    picks = []
    for c, q in enumerate(quota):
        members = torch.nonzero(labels == c).squeeze(1)
        picks.append(members[torch.randperm(members.numel())[:q]])
    taken = torch.cat(picks)
    if fill and taken.numel() < k:
        rest = (labels >= 0) & (labels < len(quota))
        rest[taken] = False
        others = torch.nonzero(rest).squeeze(1)
        taken = torch.cat([taken, others[torch.randperm(others.numel())[: k - taken.numel()]]])
    taken = taken[torch.randperm(taken.numel())]
    out = torch.full((k,), -1, dtype=torch.int64)
    out[: taken.numel()] = taken
    return out


def loop_sample(labels, k, quota, fill):
    return torch.stack([loop_sample_row(row, k, quota, fill) for row in labels])


def measure(labels, k, quota, min_time, min_reps):
    """Alternates the two samplers after one warm-up call each; returns
    (median syncfree s, median loop s, rounds)."""
    quota_t = torch.tensor(quota)
    times = interleaved(dict(syncfree=lambda: syncfree.stratified_sample(labels, k, quota_t, True),
                             loop=lambda: loop_sample(labels, k, quota, True)), min_reps, min_time, warmup=1)
    return median(times["syncfree"]) / 1e3, median(times["loop"]) / 1e3, len(times["loop"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", default="2,21,150")
    parser.add_argument("--sizes", default="1e4,1e5,1e6")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--k", type=int, default=512)
    add_options(parser, min_time=0.5, min_reps=3)
    args = parse_options(parser)
    classes = [int(c) for c in args.classes.split(",")]
    sizes = [int(float(n)) for n in args.sizes.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    k = args.k
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print(f"K = {k}, fill=True, labels int64 uniform over [-1, C), quota max(1, K // (2C)) per class")
    print(f"{'C':>4} {'N':>8} {'batch':>5} {'syncfree ms':>12} {'loop ms':>10} {'loop/syncfree':>14} {'reps':>5}")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for C in classes:
        quota = [max(1, k // (2 * C))] * C
        while sum(quota) > k:
            quota[quota.index(max(quota))] -= 1
        for n in sizes:
            for b in batches:
                labels = torch.randint(-1, C, (b, n), generator=gen)
                t_sf, t_loop, reps = measure(labels, k, quota, args.min_time, args.min_reps)
                rows.append(dict(classes=C, n=n, batch=b, k=k, syncfree_s=t_sf, loop_s=t_loop,
                                 ratio=t_loop / t_sf, reps=reps))
                print(f"{C:>4} {n:>8} {b:>5} {t_sf * 1e3:>12.3f} {t_loop * 1e3:>10.2f} {t_loop / t_sf:>14.1f} {reps:>5}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, threads=torch.get_num_threads(), results=rows), f, indent=1)


if __name__ == "__main__":
    main()
