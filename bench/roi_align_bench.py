#!/usr/bin/env python3
"""Benchmark: multi-level RoI Align, three ways, side by side in one run (CPU).

- torchvision: ``torchvision.ops.MultiScaleRoIAlign`` (each RoI pooled once,
  from its level, through data-dependent gathers: ``torch.where`` of each
  level's RoIs, ``roi_align`` of them, an indexed write into the result);
- every level: the static composite it replaces
  (``syncfree.detection.poolers.roi_pool_every_level``: every RoI pooled
  from every level with ``torchvision.ops.roi_align``, the RoI's level kept
  with ``torch.where``);
- fused: ``syncfree.multi_scale_roi_align`` (each RoI pooled once, from its
  level, static shapes).

Workload: B = 2 images of 800x800 (FPN levels of strides 4, 8, 16, 32: the
first L of them), C = 256 channels, R RoIs in all (R / 2 per image) with
sizes spread over the levels (square-root area log-uniform in [16, 512]
pixels), output h x w, sampling ratio 2. Timed: the forward alone, and the
forward plus the backward of the sum of the output times a fixed random
tensor (the features' gradient). The calls alternate, the order rotated
every round; medians and ratios (the others' time over the fused op's:
> 1 means the fused op is faster), measured in the same run, with the load
average. Before timing, the fused op's forward and gradients are checked
equal to torchvision's (bit for bit).

    python3 bench/roi_align_bench.py [--rois 1024,4096] [--sizes 7,14] [--levels 2,4]
                                     [--min-time 0.5] [--min-reps 3] [--threads T] [--json FILE]
"""
import argparse
import collections
import datetime
import json
import os
import platform
import sys

import torch
import torchvision
from torchvision.ops import MultiScaleRoIAlign

import syncfree
from syncfree.detection.poolers import roi_pool_every_level
from timing import add_options, interleaved, median, parse_options

IMAGE = 800
CHANNELS = 256
BATCH = 2


def workload(levels, rois, size, gen):
    features = [torch.randn(BATCH, CHANNELS, IMAGE // 4 >> l, IMAGE // 4 >> l, generator=gen).requires_grad_()
                for l in range(levels)]
    k = rois // BATCH
    side = torch.exp(torch.empty(BATCH, k, 1).uniform_(float(torch.tensor(16.0).log()),
                                                       float(torch.tensor(512.0).log()), generator=gen))
    aspect = torch.exp(torch.empty(BATCH, k, 1).uniform_(-0.7, 0.7, generator=gen))
    wh = torch.cat([side * aspect.sqrt(), side / aspect.sqrt()], -1)
    xy = torch.rand(BATCH, k, 2, generator=gen) * (IMAGE - wh).clamp(min=1)
    boxes = torch.cat([xy, xy + wh], -1)
    pooler = MultiScaleRoIAlign([str(i) for i in range(levels)], size, 2)
    named = collections.OrderedDict((str(i), f) for i, f in enumerate(features))
    pooler(named, [boxes[0]], [(IMAGE, IMAGE)])  # sets pooler.scales
    grad = torch.randn(rois, CHANNELS, size, size, generator=gen)
    return features, named, boxes, pooler, grad


def impls(features, named, boxes, pooler):
    sizes = [(IMAGE, IMAGE)] * BATCH
    box_list = list(boxes)
    return {
        "torchvision": lambda: pooler(named, box_list, sizes),
        "every level": lambda: roi_pool_every_level(pooler, features, boxes, (IMAGE, IMAGE)),
        "fused": lambda: syncfree.multi_scale_roi_align(features, boxes, pooler.output_size, pooler.scales, 2),
    }


def check_equal(features, fns, grad):
    want = fns["torchvision"]()
    got = fns["fused"]()
    assert torch.equal(want, got), "fused forward differs from torchvision's"
    gw = torch.autograd.grad(want, features, grad)
    gg = torch.autograd.grad(got, features, grad)
    assert all(torch.equal(a, b) for a, b in zip(gw, gg)), "fused gradients differ from torchvision's"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rois", default="1024,4096")
    parser.add_argument("--sizes", default="7,14", help="output sizes (square)")
    parser.add_argument("--levels", default="2,4")
    add_options(parser, min_time=0.5, min_reps=3)
    args = parse_options(parser)
    cores = os.cpu_count()
    print(f"{datetime.date.today()}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} threads, {cores} cores, {platform.processor() or platform.machine()}")
    print(f"{'L':>2} {'R':>5} {'h x w':>6} {'pass':>8} {'fused ms':>9} {'tv ms':>9} {'every ms':>9} "
          f"{'tv/fused':>8} {'every/fused':>11} {'reps':>4} {'load':>5}")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for levels in [int(x) for x in args.levels.split(",")]:
        for rois in [int(x) for x in args.rois.split(",")]:
            for size in [int(x) for x in args.sizes.split(",")]:
                features, named, boxes, pooler, grad = workload(levels, rois, size, gen)
                fns = impls(features, named, boxes, pooler)
                check_equal(features, fns, grad)
                for mode in ("forward", "fwd+bwd"):
                    if mode == "forward":
                        def wrap(fn):
                            def call():
                                with torch.no_grad():
                                    fn()
                            return call
                    else:
                        def wrap(fn):
                            return lambda: torch.autograd.grad(fn(), features, grad)
                    times = interleaved({k: wrap(f) for k, f in fns.items()}, args.min_reps, args.min_time,
                                        warmup=1)
                    t = {k: median(v) for k, v in times.items()}
                    load = os.getloadavg()[0]
                    reps = len(times["fused"])
                    rows.append(dict(levels=levels, rois=rois, output_size=size, mode=mode, fused_ms=t["fused"],
                                     torchvision_ms=t["torchvision"], every_level_ms=t["every level"],
                                     reps=reps, load1=load))
                    flag = " LOADED" if load > cores else ""
                    print(f"{levels:>2} {rois:>5} {size:>3}x{size:<2} {mode:>8} {t['fused']:>9.1f} "
                          f"{t['torchvision']:>9.1f} {t['every level']:>9.1f} {t['torchvision'] / t['fused']:>8.2f} "
                          f"{t['every level'] / t['fused']:>11.2f} {reps:>4} {load:>5.1f}{flag}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(date=str(datetime.date.today()), torch=torch.__version__,
                           torchvision=torchvision.__version__, threads=torch.get_num_threads(),
                           cores=cores, results=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
