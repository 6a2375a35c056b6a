#!/usr/bin/env python3
"""Benchmark: syncfree.compact against torch.nonzero_static and nonzero + padding (CPU).

Per configuration (B rows of N elements, a density of true elements, K slots):
- compact: ``syncfree.compact(mask, K)`` (indices, valid and the count);
- nonzero_static: ``torch.nonzero_static(row, size=K)`` per row, stacked (at
  B = 1 this is the single 1-d call). It returns no count: the baseline is
  timed without one, which favours it;
- nonzero+pad loop: per row, ``nonzero``, the first K, padded with -1;
- nonzero+pad batched: no Python loop: ranks from ``cumsum``, one ``nonzero``
  of the true elements ranked below K, an index_put into a -1 tensor, and the
  count from ``sum`` (what a careful user writes).
Every baseline's indices are checked equal to compact's once per
configuration. The four run side by side in one process, alternating call by
call (the order rotates every round); medians, and each baseline's median over compact's (above 1: compact is
faster); the JSON also holds each method's minimum.

    python3 bench/compact_bench.py [--batches 1,8,64] [--sizes 1e3,1e4,1e5,1e6]
                                   [--densities 0.01,0.1,0.5] [--ks 256,N]
                                   [--min-time 0.2] [--min-reps 5] [--threads T] [--json FILE]

``N`` in --ks means K = N (every position may be written); such configurations
are skipped when B * N exceeds --max-full (memory).
"""
import argparse
import json
import os
import platform

import torch

import syncfree
from timing import add_options, interleaved, median, parse_options


def nonzero_static_rows(mask, k):
    if mask.shape[0] == 1:
        return torch.nonzero_static(mask[0], size=k).view(1, k)
    return torch.stack([torch.nonzero_static(row, size=k).squeeze(1) for row in mask])


def nonzero_pad_loop(mask, k):
    out = torch.full((mask.shape[0], k), -1, dtype=torch.int64)
    for r, row in enumerate(mask):
        nz = torch.nonzero(row).squeeze(1)[:k]
        out[r, : nz.numel()] = nz
    return out


def nonzero_pad_batched(mask, k):
    count = mask.sum(-1)
    rank = mask.cumsum(-1) - 1
    rows, cols = torch.nonzero(mask & (rank < k), as_tuple=True)
    out = torch.full((mask.shape[0], k), -1, dtype=torch.int64)
    out[rows, rank[rows, cols]] = cols
    return out, count


METHODS = ("compact", "nonzero_static", "nonzero_pad_loop", "nonzero_pad_batched")


def measure(fns, min_time, min_reps):
    """{method: fn} alternated call by call after one warm-up call each;
    returns their median and minimum seconds and the rounds."""
    times = interleaved(fns, min_reps, min_time, warmup=1)
    return ({m: median(t) / 1e3 for m, t in times.items()}, {m: min(t) / 1e3 for m, t in times.items()},
            len(next(iter(times.values()))))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--sizes", default="1e3,1e4,1e5,1e6")
    parser.add_argument("--densities", default="0.01,0.1,0.5")
    parser.add_argument("--ks", default="256,N")
    parser.add_argument("--max-full", type=float, default=1e7, help="largest B * N for K = N")
    add_options(parser, min_time=0.2, min_reps=5)
    args = parse_options(parser)
    batches = [int(b) for b in args.batches.split(",")]
    sizes = [int(float(n)) for n in args.sizes.split(",")]
    densities = [float(d) for d in args.densities.split(",")]
    ks = args.ks.split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f} at start")
    print("mask bool; ratios: baseline median / compact median (> 1: compact faster)")
    head = (f"{'B':>3} {'N':>8} {'dens':>5} {'K':>8} {'compact ms':>11} {'nz_static ms':>12} {'ratio':>6} "
            f"{'nz+pad loop ms':>14} {'ratio':>6} {'nz+pad batch ms':>15} {'ratio':>6} {'reps':>5}")
    print(head)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b in batches:
        for n in sizes:
            for density in densities:
                mask = torch.rand(b, n, generator=gen) < density
                for k_spec in ks:
                    k = n if k_spec == "N" else int(float(k_spec))
                    if k_spec == "N" and b * n > args.max_full:
                        continue
                    ours = syncfree.compact(mask, k)
                    assert torch.equal(nonzero_static_rows(mask, k), ours[0])
                    assert torch.equal(nonzero_pad_loop(mask, k), ours[0])
                    batched = nonzero_pad_batched(mask, k)
                    assert torch.equal(batched[0], ours[0]) and torch.equal(batched[1], ours[2])
                    medians, mins, reps = measure(
                        dict(zip(METHODS, [lambda: syncfree.compact(mask, k), lambda: nonzero_static_rows(mask, k),
                                           lambda: nonzero_pad_loop(mask, k),
                                           lambda: nonzero_pad_batched(mask, k)])),
                        args.min_time, args.min_reps)
                    t_c, t_s, t_l, t_b = (medians[m] for m in METHODS)
                    rows.append(dict(batch=b, n=n, density=density, k=k, compact_s=t_c, nonzero_static_s=t_s,
                                     nonzero_pad_loop_s=t_l, nonzero_pad_batched_s=t_b, reps=reps, min_s=mins))
                    print(f"{b:>3} {n:>8} {density:>5.2f} {k:>8} {t_c * 1e3:>11.4f} {t_s * 1e3:>12.4f} "
                          f"{t_s / t_c:>6.2f} {t_l * 1e3:>14.4f} {t_l / t_c:>6.2f} {t_b * 1e3:>15.4f} "
                          f"{t_b / t_c:>6.2f} {reps:>5}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, threads=torch.get_num_threads(), results=rows), f, indent=1)


if __name__ == "__main__":
    main()
