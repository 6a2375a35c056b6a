#!/usr/bin/env python3
"""Benchmark: syncfree.nms (one batched call) against torchvision's nms and
batched_nms called once per image in a loop, as torchvision's RPN does (CPU).

Workloads, per image:
- rpn: N proposals (1,000 to 10,000), jittered copies of 300 base boxes in a
  800x800 image, uniform scores (distinct), IoU threshold 0.7, the first 1,000 kept
  (RPN's post_nms_top_n). "nms": no ids; "levels": 5 feature-map levels as
  ids (torchvision's RPN calls batched_nms with them).
- detect: 1,000 boxes x 90 classes (N = 90,000, the class as id), each
  class's boxes jittered copies of 300 base boxes, threshold 0.5, the first
  100 kept (detections_per_img).

syncfree runs once on the whole batch [B, N] with max_output M (static
output: indices and valid); torchvision runs once per image and keeps its
first M indices (dynamic size; no padding counted). syncfree with M = N (no
early stop) is timed too. The calls alternate, in an order rotated every
round; medians and ratios
(torchvision / syncfree) are reported side by side, with the load average
(the machine may be shared: LOADED marks a one-minute load above the core
count).

    python3 bench/nms_bench.py [--workloads rpn-nms,rpn-levels,detect] [--batches 1,2,8]
                               [--sizes 1000,2000,5000,10000] [--min-time 0.5]
                               [--min-reps 5] [--threads T] [--json FILE]
"""
import argparse
import datetime
import json
import os
import platform

import torch
import torchvision

import syncfree
from timing import add_options, interleaved, median, parse_options


def jittered(b, n, base, size, gen, jitter=0.1):
    """[b, n, 4] boxes: jittered copies of `base` random boxes per image."""
    xy = torch.rand(b, base, 2, generator=gen) * size * 0.8
    wh = torch.rand(b, base, 2, generator=gen) * size * 0.2 + 8
    centers = torch.cat([xy, xy + wh], -1)
    pick = torch.randint(0, base, (b, n), generator=gen)
    boxes = torch.gather(centers, 1, pick.unsqueeze(-1).expand(b, n, 4))
    scale = (boxes[..., 2:] - boxes[..., :2]).repeat(1, 1, 2)
    return boxes + (torch.rand(b, n, 4, generator=gen) - 0.5) * 2 * jitter * scale


def distinct_scores(b, n, gen):
    """Uniform scores without ties (k / n, k a random permutation): torchvision's
    sort is not stable, so equal scores could order differently."""
    return torch.argsort(torch.rand(b, n, generator=gen), dim=1).float() / n


def workload(name, b, n, gen):
    """(boxes, scores, idxs or None, threshold, max_output)."""
    if name == "detect":
        classes, per_class = 90, n // 90
        boxes = torch.cat([jittered(b, per_class, 300, 800.0, gen) for _ in range(classes)], 1)
        idxs = torch.arange(classes).repeat_interleave(per_class).expand(b, -1).contiguous()
        return boxes, distinct_scores(b, n, gen), idxs, 0.5, 100
    boxes = jittered(b, n, 300, 800.0, gen)
    idxs = torch.randint(0, 5, (b, n), generator=gen) if name == "rpn-levels" else None
    return boxes, distinct_scores(b, n, gen), idxs, 0.7, 1000


def torchvision_loop(boxes, scores, idxs, thr, m):
    out = []
    for i in range(boxes.shape[0]):
        if idxs is None:
            keep = torchvision.ops.nms(boxes[i], scores[i], thr)
        else:
            keep = torchvision.ops.batched_nms(boxes[i], scores[i], idxs[i], thr)
        out.append(keep[:m])
    return out


def measure(fns, min_time, min_reps):
    """Runs the callables in turn after one warm-up call each, the order
    rotated every round (a call right after torchvision's can be slowed by its
    intra-op threads, which keep spinning for a while); returns the median
    seconds of each and the rounds."""
    times = interleaved(dict(enumerate(fns)), min_reps, min_time, warmup=1)
    return [median(t) / 1e3 for t in times.values()], len(times[0])


def check_equal(boxes, scores, idxs, thr, m):
    """The benchmark compares equal results (distinct scores: no ties)."""
    got_i, got_v = syncfree.nms(boxes, scores, thr, m, idxs=idxs)
    for i, keep in enumerate(torchvision_loop(boxes, scores, idxs, thr, m)):
        assert torch.equal(got_i[i, : keep.numel()], keep) and int(got_v[i].sum()) == keep.numel()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="rpn-nms,rpn-levels,detect")
    parser.add_argument("--batches", default="1,2,8")
    parser.add_argument("--sizes", default="1000,2000,5000,10000", help="N per image of the rpn workloads")
    add_options(parser, min_time=0.5, min_reps=5)
    args = parse_options(parser)
    cores = os.cpu_count()
    print(f"{datetime.date.today()}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} threads, {cores} cores, {platform.processor() or platform.machine()}")
    header = (f"{'workload':>10} {'B':>2} {'N':>6} {'M':>5} {'syncfree ms':>12} {'sf M=N ms':>10} "
              f"{'tv loop ms':>11} {'tv/sf':>6} {'tv/sf(M=N)':>10} {'reps':>4} {'load':>5}")
    print(header)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name in args.workloads.split(","):
        sizes = [90000] if name == "detect" else [int(float(s)) for s in args.sizes.split(",")]
        for n in sizes:
            for b in [int(x) for x in args.batches.split(",")]:
                boxes, scores, idxs, thr, m = workload(name, b, n, gen)
                check_equal(boxes, scores, idxs, thr, m)
                fns = [lambda: syncfree.nms(boxes, scores, thr, m, idxs=idxs),
                       lambda: syncfree.nms(boxes, scores, thr, n, idxs=idxs),
                       lambda: torchvision_loop(boxes, scores, idxs, thr, m)]
                (t_sf, t_full, t_tv), reps = measure(fns, args.min_time, args.min_reps)
                load = os.getloadavg()[0]
                flag = " LOADED" if load > cores else ""
                rows.append(dict(workload=name, batch=b, n=n, max_output=m, threshold=thr,
                                 syncfree_s=t_sf, syncfree_full_s=t_full, torchvision_s=t_tv,
                                 ratio=t_tv / t_sf, ratio_full=t_tv / t_full, reps=reps, load1=load))
                print(f"{name:>10} {b:>2} {n:>6} {m:>5} {t_sf * 1e3:>12.2f} {t_full * 1e3:>10.2f} "
                      f"{t_tv * 1e3:>11.2f} {t_tv / t_sf:>6.1f} {t_tv / t_full:>10.1f} {reps:>4} {load:>5.1f}{flag}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(date=str(datetime.date.today()), torch=torch.__version__,
                           torchvision=torchvision.__version__, threads=torch.get_num_threads(),
                           cores=cores, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
