#!/usr/bin/env python3
"""Host-device synchronizations and graph breaks of a torchvision detection
training step: torchvision's model as is, with syncfree's drop-in sampler
(``patch(model)``), and its static version (``make_static(model, ...)``).

Counts, over one training step (forward, backward, SGD step; after one
warm-up step), the operators that make the host wait for the device:
``aten::nonzero`` (``torch.nonzero``, ``torch.where(mask)``, boolean-mask
indexing) and ``aten::_local_scalar_dense`` (``.item()``, ``float(t)``,
``int(t)``, ``bool(t)``), each attributed to the innermost function of
torchvision or syncfree that called it; then the graph breaks
``torch._dynamo.explain`` reports for the training forward, and for the
training forward, loss and backward (``trace_autograd_ops``, where this torch
has it). Nothing is downloaded (weights=None, weights_backbone=None); runs on
the CPU.

    python scripts/count_syncs.py [--model resnet50|resnet50_v2|mobilenet|maskrcnn|keypointrcnn] [--images 2]
        [--size 128] [--no-explain] [--json out.json]

docs/detection.md quotes its output (torch 2.14.1, torchvision 0.29.1).
"""
import argparse
import collections
import json
import os
import sys
import warnings

import torch
import torchvision

import syncfree.compat.torchvision as sf_tv
import syncfree.detection as sf_det

SYNC_OPS = {"aten::nonzero": "nonzero", "aten::_local_scalar_dense": "item"}


MODELS = {"resnet50": "fasterrcnn_resnet50_fpn", "resnet50_v2": "fasterrcnn_resnet50_fpn_v2",
          "mobilenet": "fasterrcnn_mobilenet_v3_large_fpn", "maskrcnn": "maskrcnn_resnet50_fpn",
          "keypointrcnn": "keypointrcnn_resnet50_fpn"}
MAX_BOXES = 4  # ground truth padded to this many boxes for the static model


def build_model(name, size):
    kwargs = dict(weights=None, weights_backbone=None, num_classes=91, min_size=size, max_size=size)
    return getattr(torchvision.models.detection, MODELS[name])(**kwargs)


def batch(images, size, masks, keypoints=False):
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(3, size, size, generator=gen) for _ in range(images)]
    boxes = torch.tensor([[10.0, 20.0, 60.0, 90.0], [50.0, 40.0, 120.0, 110.0]]) * size / 128
    targets = [dict(boxes=boxes, labels=torch.tensor([1, 2])) for _ in range(images)]
    if masks:
        m = torch.zeros(2, size, size, dtype=torch.uint8)
        for i, b in enumerate(boxes.long().tolist()):
            m[i, b[1]:b[3], b[0]:b[2]] = 1
        for t in targets:
            t["masks"] = m
    if keypoints:  # 17 visible keypoints on each box's diagonal
        steps = torch.linspace(0.05, 0.95, 17)[:, None]
        for t in targets:
            xy = t["boxes"][:, None, :2] + steps * (t["boxes"][:, None, 2:] - t["boxes"][:, None, :2])
            t["keypoints"] = torch.cat([xy, torch.ones(2, 17, 1)], dim=-1)
    return xs, targets


def static_inputs(xs, targets):
    """The static model's inputs: one image tensor, padded targets (made in the data pipeline)."""
    return torch.stack(xs), sf_det.pad_targets(targets, MAX_BOXES)


def train_step(model, opt, xs, targets):
    losses = model(xs, targets)
    loss = sum(losses.values())
    opt.zero_grad()
    loss.backward()
    opt.step()


def call_site(event):
    """(the innermost torchvision/syncfree function that called ``event``, as
    'path(def line): name'; whether it was reached through ``torch.where``)."""
    via_where = False
    e = event.cpu_parent
    while e is not None:
        if e.name == "aten::where":
            via_where = True
        if ("torchvision/" in e.name or "syncfree/" in e.name) and "): " in e.name:
            return e.name.split("site-packages/")[-1], via_where
        e = e.cpu_parent
    return "(outside torchvision and syncfree: autograd, the optimizer)", via_where


def count(model, xs, targets):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model.train()
    train_step(model, opt, xs, targets)  # warm-up
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        train_step(model, opt, xs, targets)
    totals = collections.Counter()
    sites = collections.Counter()
    for event in prof.events():
        kind = SYNC_OPS.get(event.name)
        if kind:
            totals[kind] += 1
            site, via_where = call_site(event)
            if kind == "nonzero" and via_where:
                totals["where(mask)"] += 1
                kind = "nonzero (torch.where)"
            sites[(kind, site)] += 1
    return dict(totals), {f"{k}  {s}": n for (k, s), n in sorted(sites.items())}


def graph_breaks(model, xs, targets):
    """(graph breaks, graphs) of the training forward; then of forward, loss and
    backward (None where this torch cannot trace ``backward``)."""
    model.train()

    def step(xs, targets):
        loss = sum(model(xs, targets).values())
        loss.backward()
        return loss.detach()

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forward = torch._dynamo.explain(model)(xs, targets)
        torch._dynamo.reset()
        whole = None
        if hasattr(torch._dynamo.config, "trace_autograd_ops"):
            with torch._dynamo.config.patch(trace_autograd_ops=True):
                whole = torch._dynamo.explain(step)(xs, targets)
            torch._dynamo.reset()
    return (forward.graph_break_count, forward.graph_count,
            None if whole is None else whole.graph_break_count, None if whole is None else whole.graph_count)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="resnet50")
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--no-explain", action="store_true", help="skip torch._dynamo.explain (slow)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    xs, targets = batch(args.images, args.size, masks=args.model == "maskrcnn",
                        keypoints=args.model == "keypointrcnn")
    results = {"torch": torch.__version__, "torchvision": torchvision.__version__,
               "model": MODELS[args.model], "images": args.images, "size": args.size}
    for name in ["unpatched", "patched", "static"]:
        torch.manual_seed(0)
        model = build_model(args.model, args.size)
        inputs = (xs, targets)
        if name == "patched":
            sf_tv.patch(model)
        elif name == "static":
            model = sf_det.make_static(model, (args.size, args.size), MAX_BOXES)
            inputs = static_inputs(xs, targets)
        totals, sites = count(model, *inputs)
        entry = dict(syncs=totals, sites=sites)
        if not args.no_explain:
            (entry["graph_breaks"], entry["graphs"], entry["graph_breaks_with_backward"],
             entry["graphs_with_backward"]) = graph_breaks(model, *inputs)
        results[name] = entry
        print(f"{name}: per training step {totals.get('nonzero', 0)} nonzero "
              f"(of which {totals.get('where(mask)', 0)} torch.where(mask)), {totals.get('item', 0)} .item()"
              + (f"; torch._dynamo.explain: training forward {entry['graph_breaks']} graph breaks "
                 f"({entry['graphs']} graphs), forward + loss + backward "
                 f"{entry['graph_breaks_with_backward']} ({entry['graphs_with_backward']} graphs)"
                 if "graph_breaks" in entry else ""))
        for site, n in sites.items():
            print(f"  {n:3d}  {site}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
