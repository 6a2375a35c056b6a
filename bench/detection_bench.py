#!/usr/bin/env python3
"""Benchmark: a torchvision detection training step, torchvision's own against
the static-shape step of syncfree.detection.make_static, side by side
in one run.

Models (--model): torchvision's Faster R-CNN and Mask R-CNN builders
(fasterrcnn_*, maskrcnn_*), RetinaNet (retinanet_*), FCOS (fcos_*) and SSD
(ssd300_vgg16, ssdlite320_mobilenet_v3_large), random weights, 91 classes.
SSD resizes every image to its own fixed size: its image size is that size
(300, 320), the default and the only one it takes.

Implementations (--impls), each one whole training step: zero_grad, forward,
the sum of the loss dict, backward, optimizer step (with --modes eval, or
train,eval: also one inference call of the model in eval mode under
torch.no_grad(), the detections' post-processing included):
- torchvision: the torchvision model as is, list inputs (its transform still
  runs, resizing each image to the size it already has: min_size and max_size
  are set to the benchmark's image size, so that all implementations work at
  the same resolution);
- static: make_static(model, image_size, max_boxes), eager;
- compiled: torch.compile of the static step (forward, loss sum, backward,
  optimizer step), inductor backend, --compile-mode (default "default"), with
  torch._dynamo.config.trace_autograd_ops = True where torch has it (backward
  traced inside the compiled function); its first call (the compilation) is
  reported apart, as compile_s;
- graphed (CUDA only): the static eager step captured once in a CUDA graph
  with torch.cuda.graph (static input buffers, the optimizer step inside the
  graph), then replayed; each timed step copies the batch into the buffers
  and replays.

All implementations share one model (make_static shares its submodules) and
one optimizer: SGD with lr = 0 and momentum 0.9, so that every step does the
optimizer's full work while the weights stay the same for every implementation
and every step. Batch norm's running statistics still change, as they do in
training (train-mode batch norm does not read them). Data: one synthetic batch
per configuration, reused at every step: uniform random images, 1 to
min(4, --max-boxes) random boxes per image with random labels, padded to
--max-boxes by pad_targets for the static step.

Timing: --warmup rounds, then --steps rounds; every round runs each
implementation once, the order rotated every round. A step is timed on the
host clock (on CUDA: synchronized before and after). Reported: median, p10 and
p90 per implementation, and torchvision eager's median over each one's
("vs tv", measured in the same run: > 1 is faster than torchvision).

On CUDA, per configuration, also:
- syncs: one static eager step with torch.cuda.set_sync_debug_mode("warn")
  (syncs counted, with the Python lines that made them), then one with
  "error" (a sync raises): passes when none is counted and nothing raised;
- graph replay: the graph replayed twice and the eager static step once, each
  from torch.cuda.manual_seed(SEED) (the same samples): passes when the
  losses are finite, the two replays equal bit for bit, and the replay equals
  eager within rtol 1e-3, atol 1e-4 per loss.
--json is rewritten after every configuration ("complete": false until the
end), so that a run stopped at a time limit keeps what it measured.
The exit status is 1 when a check failed or an implementation could not run
(the reason is printed and kept in the JSON), 2 for bad usage (e.g. --device
cuda where torch sees no CUDA device).

    python3 bench/detection_bench.py [--device cpu|cuda] [--model fasterrcnn_mobilenet_v3_large_fpn|retinanet_resnet50_fpn|...]
        [--batch-sizes 2] [--image-sizes 128,256] [--steps 10] [--warmup 2] [--max-boxes 8]
        [--impls torchvision,static,compiled] [--modes train,eval] [--compile-mode default] [--threads T]
        [--json FILE]

Defaults by device: cpu: B = 2, 128x128 and 256x256, torchvision,static,compiled;
cuda: B = 2,8, 512x512 and 800x800, torchvision,static,graphed; --modes train.
SSD: its fixed size on either device.
The graphed implementation and the CUDA checks are of the training step only.
"""
import argparse
import collections
import datetime
import json
import math
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import keep_freed_memory, load_average, loaded  # noqa: E402
from timing import host_ms, interleaved, percentile  # noqa: E402

IMPLS = ("torchvision", "static", "compiled", "graphed")
MODES = ("train", "eval")
TITLES = {"torchvision": "torchvision eager", "static": "static eager", "compiled": "static compiled",
          "graphed": "static graphed"}
DEFAULTS = {"cpu": dict(batch_sizes="2", image_sizes="128,256", impls="torchvision,static,compiled"),
            "cuda": dict(batch_sizes="2,8", image_sizes="512,800", impls="torchvision,static,graphed")}
SEED = 1234
REPLAY_RTOL, REPLAY_ATOL = 1e-3, 1e-4
NUM_CLASSES = 91
LR, MOMENTUM = 0.0, 0.9
# The builders taken (by prefix), and the image size of those that resize
# every image to a fixed size (their transform's fixed_size).
BUILDERS = ("fasterrcnn_", "maskrcnn_", "retinanet_", "fcos_", "ssd300_", "ssdlite320_")
FIXED_SIZES = {"ssd300_vgg16": (300, 300), "ssdlite320_mobilenet_v3_large": (320, 320)}


class UsageError(Exception):
    pass


# --------------------------------------------------------------------------
# Options


def parse_ints(text):
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"expected positive integers, got '{text}'")
    return values


def parse_image_sizes(text, divisible=32):
    """'128,256,512x640' -> [(128, 128), (256, 256), (512, 640)] (H x W),
    each a multiple of ``divisible`` (the models' size_divisible)."""
    sizes = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        parts = item.lower().split("x")
        try:
            hw = tuple(int(p) for p in parts)
        except ValueError:
            raise UsageError(f"image sizes are S or HxW, comma-separated, got '{item}'") from None
        if len(hw) == 1:
            hw = hw * 2
        if len(hw) != 2 or any(s < 32 or s % divisible for s in hw):
            raise UsageError(f"image sizes must be multiples of {divisible} (the models' size_divisible), "
                             f"at least 32, got '{item}'")
        sizes.append(hw)
    if not sizes:
        raise UsageError("no image size given")
    return sizes


def parse_impls(text, device):
    impls = [s.strip() for s in text.split(",") if s.strip()]
    for name in impls:
        if name not in IMPLS:
            raise UsageError(f"unknown implementation '{name}' (known: {', '.join(IMPLS)})")
    if "graphed" in impls and device != "cuda":
        raise UsageError("the graphed implementation is a CUDA graph: it needs --device cuda")
    if not impls:
        raise UsageError("no implementation given")
    return impls


# --------------------------------------------------------------------------
# Timing and report (no GPU needed: unit-tested on the CPU)


def measure(steps, rounds, sync=None, clock=time.perf_counter):
    """{name: step} in `rounds` interleaved rounds (timing.interleaved: each
    step once per round, the order rotated), each step timed on the host clock
    with `sync` before and after; returns {name: [ms, ...]}."""
    return interleaved(steps, rounds, one=lambda fn: host_ms(fn, sync, clock))


def summarize(times, baseline="torchvision"):
    """{name: [ms]} -> {name: dict(median_ms, p10_ms, p90_ms, steps, speedup_vs_torchvision)};
    the speedup is the baseline's median over this one's (None without a baseline)."""
    out = {}
    for name, values in times.items():
        out[name] = dict(median_ms=percentile(values, 0.5), p10_ms=percentile(values, 0.1),
                         p90_ms=percentile(values, 0.9), steps=len(values))
    base = out.get(baseline)
    for row in out.values():
        row["speedup_vs_torchvision"] = base["median_ms"] / row["median_ms"] if base else None
    return out


def parse_modes(text):
    modes = [s.strip() for s in text.split(",") if s.strip()]
    if not modes or any(m not in MODES for m in modes):
        raise UsageError(f"--modes: comma-separated, of {', '.join(MODES)}; got '{text}'")
    return modes


def format_table(rows):
    """The printed table: one line per result row (see main for the row's keys)."""
    lines = [f"{'model':<34} {'mode':<5} {'B':>2} {'H x W':>9}  {'impl':<18} {'median ms':>10} "
             f"{'p10..p90 ms':>17} {'vs tv':>6} {'steps':>5}"]
    for r in rows:
        head = (f"{r['model']:<34} {r.get('mode', 'train'):<5} {r['batch']:>2} {r['height']:>4}x{r['width']:<4}  "
                f"{TITLES[r['impl']]:<18}")
        if not r["supported"]:
            lines.append(f"{head} {'-':>10}  ({r['note']})")
            continue
        spread = f"{r['p10_ms']:.1f}..{r['p90_ms']:.1f}"
        ratio = r.get("speedup_vs_torchvision")
        ratio = f"{ratio:.2f}" if ratio is not None else "-"
        extra = f"  (compile {r['compile_s']:.0f} s)" if r.get("compile_s") is not None else ""
        lines.append(f"{head} {r['median_ms']:>10.1f} {spread:>17} {ratio:>6} {r['steps']:>5}{extra}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The CUDA checks, written against injected pieces so that the CPU can test them


def sync_check(step, set_mode, synchronize):
    """One step under the sync debug mode "warn" (syncs counted, with the
    Python lines that made them), then one under "error" (a sync raises).
    Returns dict(ok, syncs_per_step, where, error)."""
    synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        set_mode("warn")
        try:
            step()
        finally:
            set_mode("default")
    synchronize()
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    where = collections.Counter(f"{os.path.basename(w.filename)}:{w.lineno}" for w in syncs)
    error = None
    set_mode("error")
    try:
        step()
    except RuntimeError as e:
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
    finally:
        set_mode("default")
    synchronize()
    return dict(ok=not syncs and error is None, syncs_per_step=len(syncs),
                where=[f"{k} x{v}" for k, v in where.most_common(8)], error=error)


def compare_losses(first, second, eager, rtol=REPLAY_RTOL, atol=REPLAY_ATOL):
    """Two replays' loss dicts and the eager step's, from the same generator
    state: finite, replays equal bit for bit, replay == eager within
    rtol/atol per loss. Returns dict(ok, finite, replays_equal, equal_to_eager,
    max_abs_diff, detail)."""
    keys = sorted(eager)
    if sorted(first) != keys or sorted(second) != keys:
        return dict(ok=False, finite=False, replays_equal=False, equal_to_eager=False, max_abs_diff=None,
                    detail=f"different loss keys: {sorted(first)} / {sorted(second)} / {keys}")
    values = {k: (float(first[k]), float(second[k]), float(eager[k])) for k in keys}
    finite = all(math.isfinite(v) for triple in values.values() for v in triple)
    replays_equal = all(a == b for a, b, _ in values.values())
    diffs = {k: abs(a - c) for k, (a, _, c) in values.items()}
    close = all(abs(a - c) <= atol + rtol * abs(c) for a, _, c in values.values())
    max_diff = max(diffs.values()) if diffs else 0.0
    bad = [f"{k}: replay {a:.6g} eager {c:.6g}" for k, (a, _, c) in values.items()
           if not abs(a - c) <= atol + rtol * abs(c)]
    detail = (f"finite={finite} replays-equal={replays_equal} replay-vs-eager max |diff| {max_diff:.3g}"
              + (f" ({'; '.join(bad)})" if bad else ""))
    return dict(ok=finite and replays_equal and close, finite=finite, replays_equal=replays_equal,
                equal_to_eager=close, max_abs_diff=max_diff, detail=detail)


def graph_check(replay, eager, seed):
    """`replay()` and `eager()` return loss dicts; each call starts from `seed()`."""
    seed()
    first = {k: v.detach().clone().cpu() for k, v in replay().items()}
    seed()
    second = {k: v.detach().clone().cpu() for k, v in replay().items()}
    seed()
    reference = {k: v.detach().cpu() for k, v in eager().items()}
    return compare_losses(first, second, reference)


# --------------------------------------------------------------------------
# Model, data, steps


def build_model(name, device):
    import torchvision.models.detection as detection

    builder = getattr(detection, name, None)
    if builder is None or not callable(builder) or not name.startswith(BUILDERS):
        raise UsageError(f"--model {name}: not a torchvision Faster R-CNN, Mask R-CNN, RetinaNet, FCOS or SSD "
                         "builder (e.g. fasterrcnn_mobilenet_v3_large_fpn, retinanet_resnet50_fpn, "
                         "ssdlite320_mobilenet_v3_large)")
    # No download: random weights (weights_backbone=None also gives the
    # backbone trainable batch norm, as a model trained from scratch has).
    torch.manual_seed(0)
    return builder(weights=None, weights_backbone=None, num_classes=NUM_CLASSES).to(device)


def synthetic_batch(b, size, max_boxes, device, gen, masks=False):
    """Uniform images [b, 3, H, W] and torchvision-style targets: 1 to
    min(4, max_boxes) boxes per image, random labels (and box masks)."""
    h, w = size
    images = torch.rand(b, 3, h, w, generator=gen)
    targets = []
    for _ in range(b):
        n = int(torch.randint(1, min(4, max_boxes) + 1, (1,), generator=gen))
        scale = torch.tensor([w, h], dtype=torch.float32)
        xy = torch.rand(n, 2, generator=gen) * 0.6 * scale
        wh = (0.1 + 0.3 * torch.rand(n, 2, generator=gen)) * scale
        boxes = torch.cat([xy, torch.minimum(xy + wh, scale)], 1)
        t = {"boxes": boxes.to(device), "labels": torch.randint(1, NUM_CLASSES, (n,), generator=gen).to(device)}
        if masks:
            m = torch.zeros(n, h, w, dtype=torch.uint8)
            for i, (x0, y0, x1, y1) in enumerate(boxes.round().long().tolist()):
                m[i, y0:y1, x0:x1] = 1
            t["masks"] = m.to(device)
        targets.append(t)
    return images.to(device), targets


def train_step(model, optimizer, images, targets):
    """One training step of torchvision's model or of the static one: forward,
    loss sum, backward, optimizer step (zero_grad is the caller's)."""
    losses = model(images, targets)
    loss = sum(losses.values())
    loss.backward()
    optimizer.step()
    return {k: v.detach() for k, v in losses.items()}


class Graphed:
    """The static step captured in a CUDA graph (static input buffers, the
    optimizer step inside): each call copies the batch into the buffers and
    replays."""

    def __init__(self, static, optimizer, images, targets, warmup=3):
        self.images = images.clone()
        self.targets = {k: v.clone() for k, v in targets.items()}
        self.source = (images, targets)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                optimizer.zero_grad(set_to_none=True)
                train_step(static, optimizer, self.images, self.targets)
        torch.cuda.current_stream().wait_stream(stream)
        # Gradients are None at capture: backward allocates them in the graph's pool.
        optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.losses = train_step(static, optimizer, self.images, self.targets)

    def replay(self):
        self.graph.replay()
        return self.losses

    def __call__(self):
        images, targets = self.source
        self.images.copy_(images, non_blocking=True)
        for k, v in targets.items():
            self.targets[k].copy_(v, non_blocking=True)
        return self.replay()


def make_eval_steps(impls, model, static, images, compile_mode):
    """make_steps for inference: each step one call of the model in eval mode
    under torch.no_grad() (the caller sets eval mode)."""
    image_list = list(images)
    steps, notes = {}, {}

    def call(fn, *args):
        with torch.no_grad():
            return fn(*args)

    for name in impls:
        if name == "torchvision":
            steps[name] = lambda: call(model, image_list)
        elif name == "static":
            steps[name] = lambda: call(static, images)
        elif name == "compiled":
            compiled = torch.compile(static, mode=None if compile_mode == "default" else compile_mode)
            steps[name] = lambda compiled=compiled: call(compiled, images)
        else:
            notes[name] = "training step only"
    return steps, notes


def make_steps(impls, model, static, optimizer, images, tv_targets, padded, compile_mode):
    """{name: step} and {name: note} for those that cannot run; compiled's
    compile time is measured at its first call (the caller's warmup)."""
    image_list = list(images)
    steps, notes = {}, {}

    def eager_tv():
        optimizer.zero_grad(set_to_none=True)
        return train_step(model, optimizer, image_list, tv_targets)

    def eager_static():
        optimizer.zero_grad(set_to_none=True)
        return train_step(static, optimizer, images, padded)

    for name in impls:
        if name == "torchvision":
            steps[name] = eager_tv
        elif name == "static":
            steps[name] = eager_static
        elif name == "compiled":
            if not hasattr(torch, "compile"):
                notes[name] = f"torch.compile needs torch >= 2.0 (this is {torch.__version__})"
                continue
            compiled = torch.compile(train_step, mode=None if compile_mode == "default" else compile_mode)

            def step(compiled=compiled):
                optimizer.zero_grad(set_to_none=True)
                return compiled(static, optimizer, images, padded)

            steps[name] = step
        # graphed: built by the caller after the others' warmup
    return steps, notes


# --------------------------------------------------------------------------


def run(args):
    import torchvision

    import syncfree  # noqa: F401  (loads the operators)
    import syncfree.detection as sf_det

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    model = build_model(args.model, args.device)
    model.train()
    masks = bool(getattr(getattr(model, "roi_heads", None), "has_mask", lambda: False)())
    fixed = getattr(model.transform, "fixed_size", None)
    fixed = None if fixed is None else (int(fixed[1]), int(fixed[0]))  # (H, W)
    if fixed is not None and any(size != fixed for size in args.image_sizes):
        raise UsageError(f"--model {args.model} resizes every image to {fixed[0]}x{fixed[1]}: its image size "
                         f"is that one, got {', '.join(f'{h}x{w}' for h, w in args.image_sizes)}")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    trace_autograd = hasattr(torch._dynamo.config, "trace_autograd_ops") if hasattr(torch, "_dynamo") else False
    if "compiled" in args.impls and trace_autograd:
        torch._dynamo.config.trace_autograd_ops = True
    compile_note = (f"inductor, mode {args.compile_mode}, trace_autograd_ops="
                    f"{'True' if trace_autograd else 'unavailable in this torch'}")

    load_start = load_average()
    threads = torch.get_num_threads()
    print(f"syncfree detection benchmark | {args.model} | device {args.device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if cuda else ''} | {threads} CPU threads | "
          f"torch {torch.__version__} | torchvision {torchvision.__version__} | load average {load_start}"
          + (" | LOADED: other work is running, timings are not representative"
             if loaded(load_start, threads) else ""))
    print(f"optimizer SGD lr={LR} momentum={MOMENTUM} (weights unchanged); compiled: {compile_note}; "
          f"{args.warmup} warmup + {args.steps} timed rounds, order rotated", flush=True)

    rows, checks = [], []
    failures = []

    def write_json(load_end=None, was_loaded=None, complete=False):
        # After every configuration too: a run stopped at its time limit keeps what it measured.
        if not args.json:
            return
        with open(args.json + ".tmp", "w") as f:
            json.dump(dict(source="bench/detection_bench.py", device=args.device,
                           device_name=torch.cuda.get_device_name() if cuda else None, model=args.model,
                           torch=torch.__version__, torchvision=torchvision.__version__, threads=threads,
                           date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           loadavg_start=load_start, loadavg_end=load_end, loaded=was_loaded,
                           optimizer=f"SGD lr={LR} momentum={MOMENTUM}", compiled=compile_note,
                           max_boxes=args.max_boxes, warmup=args.warmup, steps=args.steps,
                           complete=complete, results=rows, checks=checks,
                           failures=failures), f, indent=1)
        os.replace(args.json + ".tmp", args.json)

    gen = torch.Generator().manual_seed(0)
    graph_failed = None
    for size in args.image_sizes:
        h, w = size
        if fixed is None:  # SSD's transform resizes to its fixed size
            model.transform.min_size = (min(h, w),)
            model.transform.max_size = max(h, w)
        static = sf_det.make_static(model, image_size=(h, w), max_boxes=args.max_boxes)
        for b, mode in [(b, m) for b in args.batch_sizes for m in args.modes]:
            train = mode == "train"
            model.train(train)
            static.train(train)
            print(f"[bench] {mode} B={b} {h}x{w} ...", file=sys.stderr, flush=True)
            images, tv_targets = synthetic_batch(b, size, args.max_boxes, args.device, gen, masks)
            padded = sf_det.pad_targets(tv_targets, args.max_boxes)
            if hasattr(torch, "_dynamo"):
                torch._dynamo.reset()  # one compilation per configuration, no cache limit hit
            if train:
                steps, notes = make_steps(args.impls, model, static, optimizer, images, tv_targets, padded,
                                          args.compile_mode)
            else:
                steps, notes = make_eval_steps(args.impls, model, static, images, args.compile_mode)
            base = dict(model=args.model, mode=mode, batch=b, height=h, width=w)
            compile_s = {}
            for name in list(steps):  # warmup; compiled's first call is its compilation
                try:
                    for i in range(args.warmup):
                        t = host_ms(steps[name], sync)
                        if i == 0 and name == "compiled":
                            compile_s[name] = t / 1e3
                except Exception as e:  # a clear error is a result too
                    notes[name] = f"{type(e).__name__}: {str(e).strip()[:300]}"
                    del steps[name]
            if cuda and train:
                # The checks on the static eager step (before graph capture).
                if "static" in steps:
                    result = sync_check(steps["static"], torch.cuda.set_sync_debug_mode, torch.cuda.synchronize)
                    checks.append(dict(base, check="syncs", **result))
                    print(f"  syncs in the static eager step: {result['syncs_per_step']}"
                          f"{' at ' + ', '.join(result['where']) if result['where'] else ''}; error mode: "
                          f"{result['error'] or 'no error'} -> {'ok' if result['ok'] else 'FAIL'}", flush=True)
                if "graphed" in args.impls:
                    if graph_failed:
                        notes["graphed"] = f"not tried: capture failed before ({graph_failed})"
                    else:
                        try:
                            graphed = Graphed(static, optimizer, images, padded)
                            steps["graphed"] = graphed
                            for _ in range(args.warmup):
                                host_ms(graphed, sync)
                        except Exception as e:
                            graph_failed = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                            notes["graphed"] = f"capture failed: {graph_failed}"
                            steps.pop("graphed", None)
                    if "graphed" in steps:
                        def eager():
                            optimizer.zero_grad(set_to_none=True)
                            return train_step(static, optimizer, graphed.images, graphed.targets)

                        result = graph_check(graphed.replay, eager, lambda: torch.cuda.manual_seed(SEED))
                    else:
                        result = dict(ok=False, finite=None, replays_equal=None, equal_to_eager=None,
                                      max_abs_diff=None, detail=notes["graphed"])
                    checks.append(dict(base, check="graph_replay", rtol=REPLAY_RTOL, atol=REPLAY_ATOL, **result))
                    print(f"  graph replay vs eager: {result['detail']} -> {'ok' if result['ok'] else 'FAIL'}",
                          flush=True)
            times = measure(steps, args.steps, sync)
            summary = summarize(times)
            for name in args.impls:
                if not train and name == "graphed":  # a training-step implementation
                    continue
                r = dict(base, impl=name, supported=name in summary, note=notes.get(name, ""))
                if name in summary:
                    r.update(summary[name])
                    r["compile_s"] = compile_s.get(name)
                else:
                    failures.append(f"{TITLES[name]} {mode} B={b} {h}x{w}: {r['note']}")
                rows.append(r)
            print(format_table([r for r in rows if (r["mode"], r["batch"], r["height"], r["width"])
                                == (mode, b, h, w)]), flush=True)
            write_json()
            if cuda:
                del steps
                graphed = None
                torch.cuda.empty_cache()
    failures += [f"{c['check']} B={c['batch']} {c['height']}x{c['width']}" for c in checks if not c["ok"]]

    print("\n" + format_table(rows))
    load_end = load_average()
    was_loaded = loaded(load_start, threads) or loaded(load_end, threads, own=threads)
    print(f"load average at start {load_start}, at end {load_end}"
          + (": LOADED, other work was running" if was_loaded else ""))
    write_json(load_end, was_loaded, complete=True)
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--model", default="fasterrcnn_mobilenet_v3_large_fpn")
    p.add_argument("--batch-sizes", help="comma-separated (cpu: 2; cuda: 2,8)")
    p.add_argument("--image-sizes", help="S or HxW, comma-separated (cpu: 128,256; cuda: 512,800; SSD: its "
                                         "fixed size, 300 or 320)")
    p.add_argument("--steps", type=int, default=10, help="timed rounds")
    p.add_argument("--warmup", type=int, default=2, help="rounds before timing (>= 1)")
    p.add_argument("--max-boxes", type=int, default=8, help="G: ground-truth boxes per image after padding")
    p.add_argument("--impls", help="comma-separated, of " + ",".join(IMPLS))
    p.add_argument("--modes", default="train", help="comma-separated, of " + ",".join(MODES))
    p.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead", "max-autotune"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json")
    args = p.parse_args(argv)
    defaults = DEFAULTS[args.device]
    args.batch_sizes = parse_ints(args.batch_sizes or defaults["batch_sizes"])
    fixed = FIXED_SIZES.get(args.model)
    if fixed is None:
        args.image_sizes = parse_image_sizes(args.image_sizes or defaults["image_sizes"])
    else:
        args.image_sizes = parse_image_sizes(args.image_sizes or "x".join(map(str, fixed)), divisible=1)
        if any(size != fixed for size in args.image_sizes):
            raise UsageError(f"--model {args.model} resizes every image to {fixed[0]}x{fixed[1]}: --image-sizes "
                             f"must be {fixed[0]} (or be left out)")
    args.impls = parse_impls(args.impls or defaults["impls"], args.device)
    args.modes = parse_modes(args.modes)
    if args.steps < 1 or args.warmup < 1 or args.max_boxes < 1:
        raise UsageError("--steps, --warmup and --max-boxes must be >= 1")
    return args


def main(argv=None):
    try:
        args = parse_args(argv)
        if args.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda: CUDA not available (torch sees no CUDA device)")
        keep_freed_memory()
        if args.threads:
            torch.set_num_threads(args.threads)
        return run(args)
    except UsageError as e:
        print(f"detection_bench: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
