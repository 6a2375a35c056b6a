#!/usr/bin/env python3
"""Benchmark: what syncfree.find_syncs costs on a step that has nothing to
report, side by side in one run.

- per operator: a loop of --ops small additions (a 16-element tensor), plain
  and under find_syncs; the difference per operator in microseconds (every
  operator passes through the finder's two modes: its worst case);
- per step: make_static's training step of a torchvision detector (forward,
  loss, backward; --model, --images images of --size pixels; no weights
  downloaded), plain and under find_syncs; the ratio of medians.

Interleaved rounds (shuffled order), --warmup untimed calls each, then at
least --steps rounds; host clock. The finder must find nothing in either
(checked: the exit status is 1 otherwise).

    python3 bench/find_syncs_bench.py [--model fasterrcnn_mobilenet_v3_large_fpn] [--size 128]
        [--images 2] [--ops 2000] [--steps 10] [--warmup 2] [--threads T] [--json FILE]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved, median  # noqa: E402

import syncfree  # noqa: E402


def under_finder(fn, found):
    def call():
        with syncfree.find_syncs() as report:
            fn()
        found.append(len(report))
    return call


def static_step(model_name, size, images):
    import syncfree.detection as sf_det
    from syncfree.find_syncs import batch, build_model

    torch.manual_seed(0)
    model = build_model(model_name, size)
    xs, targets = batch(model_name, images, size)
    static = sf_det.make_static(model, (size, size), 4).train()
    x, padded = torch.stack(xs), sf_det.pad_targets(targets, 4)

    def step():
        loss = sum(static(x, padded).values())
        loss.backward()
    return step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="fasterrcnn_mobilenet_v3_large_fpn")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t = torch.zeros(16)

    def ops():
        y = t
        for _ in range(args.ops):
            y = y + 1
        return y

    found = []
    step = static_step(args.model, args.size, args.images)
    times = interleaved({"ops": ops, "ops under find_syncs": under_finder(ops, found),
                         "step": step, "step under find_syncs": under_finder(step, found)},
                        args.steps, warmup=args.warmup, shuffle=True)
    med = {k: median(v) for k, v in times.items()}
    per_op_us = (med["ops under find_syncs"] - med["ops"]) * 1e3 / args.ops
    result = dict(torch=torch.__version__, threads=torch.get_num_threads(), model=args.model, size=args.size,
                  images=args.images, ops=args.ops, rounds=len(times["ops"]), median_ms=med,
                  per_op_overhead_us=per_op_us, step_ratio=med["step under find_syncs"] / med["step"],
                  found=sum(found))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {result['rounds']} rounds (medians):")
    print(f"  {args.ops} additions: {med['ops']:.2f} ms plain, {med['ops under find_syncs']:.2f} ms under "
          f"find_syncs: +{per_op_us:.1f} us per operator")
    print(f"  make_static({args.model}) training step, {args.images} x {args.size}x{args.size}: "
          f"{med['step']:.1f} ms plain, {med['step under find_syncs']:.1f} ms under find_syncs "
          f"({result['step_ratio']:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if sum(found):
        print(f"find_syncs found {sum(found)} events in steps that should have none", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
