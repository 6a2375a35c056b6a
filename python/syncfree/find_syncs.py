"""The command line of :class:`syncfree.find_syncs`: the host syncs (and,
with ``--graph-breaks``, the graph breaks) of one step, by source line.

    python -m syncfree.find_syncs --torchvision fasterrcnn_resnet50_fpn            # a training step
    python -m syncfree.find_syncs --torchvision fasterrcnn_resnet50_fpn --static   # make_static's
    python -m syncfree.find_syncs --torchvision retinanet_resnet50_fpn --eval --graph-breaks
    python -m syncfree.find_syncs mypackage.train:step                             # your own step

``--torchvision MODEL``: a torchvision detector (no weights downloaded:
weights=None, weights_backbone=None), a batch of ``--images`` random images
of ``--size`` pixels with two boxes each (and masks or keypoints where the
model takes them); the step is a training step (forward, loss, backward, an
SGD step) or, with ``--eval``, inference under ``torch.no_grad()``.
``--patch`` uses syncfree's drop-in sampler (``syncfree.compat.torchvision.patch``),
``--static`` the static model (``syncfree.detection.make_static``, every
detector here; its canvas is ``--size`` x ``--size``, a multiple of 32).
SSD300 and SSDlite resize every image to their own size (300x300, 320x320):
their batch is made at that size and ``--size`` is ignored.
``MODULE:FUNCTION``: a function of yours, called without arguments (it makes
its own inputs). Each is run ``--warmup`` times first
(lazy initialization, optimizer state), then once under the finder. The
exit status is 1 with ``--fail`` when anything was found, 2 on bad usage,
3 when the step raised.

The context manager itself is ``syncfree.find_syncs``; docs/find_syncs.md is
the guide.
"""
import argparse
import contextlib
import importlib
import json
import sys
import traceback
import types
import warnings

import torch

from ._finder import KINDS, find_graph_breaks
from ._finder import find_syncs as _find_syncs

class UsageError(ValueError):
    """A bad command line: exit 2 with the message."""


# torchvision's detectors (make_static takes each): builder -> what its targets carry.
TWO_STAGE = {
    "fasterrcnn_resnet50_fpn": "boxes", "fasterrcnn_resnet50_fpn_v2": "boxes",
    "fasterrcnn_mobilenet_v3_large_fpn": "boxes", "fasterrcnn_mobilenet_v3_large_320_fpn": "boxes",
    "maskrcnn_resnet50_fpn": "masks", "maskrcnn_resnet50_fpn_v2": "masks",
    "keypointrcnn_resnet50_fpn": "keypoints",
}
ONE_STAGE = {"retinanet_resnet50_fpn": "boxes", "retinanet_resnet50_fpn_v2": "boxes",
             "fcos_resnet50_fpn": "boxes", "ssd300_vgg16": "boxes", "ssdlite320_mobilenet_v3_large": "boxes"}
MODELS = {**TWO_STAGE, **ONE_STAGE}
FIXED_SIZE = {"ssd300_vgg16", "ssdlite320_mobilenet_v3_large"}  # they resize to their own size


def build_model(name, size):
    """torchvision's ``name`` without weights, resizing to ``size`` where it takes a size."""
    import torchvision

    kwargs = dict(weights=None, weights_backbone=None, num_classes=2 if name.startswith("keypoint") else 91)
    if name not in FIXED_SIZE:
        kwargs.update(min_size=size, max_size=size)
    return getattr(torchvision.models.detection, name)(**kwargs)


def fixed_size(model):
    """The (H, W) every image is resized to (SSD's ``transform.fixed_size``),
    or None where the model resizes by ``min_size`` and ``max_size``."""
    fixed = getattr(model.transform, "fixed_size", None)
    return None if fixed is None else (int(fixed[1]), int(fixed[0]))


def batch(name, images, size, seed=0):
    """``images`` random images of size x size with two boxes each, and the
    masks or 17 keypoints (on each box's diagonal) where the model takes them."""
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.rand(3, size, size, generator=gen) for _ in range(images)]
    boxes = torch.tensor([[10.0, 20.0, 60.0, 90.0], [50.0, 40.0, 120.0, 110.0]]) * size / 128
    targets = [dict(boxes=boxes.clone(), labels=torch.tensor([1, 1 if name.startswith("keypoint") else 2]))
               for _ in range(images)]
    if MODELS[name] == "masks":
        m = torch.zeros(2, size, size, dtype=torch.uint8)
        for i, b in enumerate(boxes.long().tolist()):
            m[i, b[1]:b[3], b[0]:b[2]] = 1
        for t in targets:
            t["masks"] = m.clone()
    if MODELS[name] == "keypoints":
        steps = torch.linspace(0.05, 0.95, 17)[:, None]
        xy = boxes[:, None, :2] + steps * (boxes[:, None, 2:] - boxes[:, None, :2])
        for t in targets:
            t["keypoints"] = torch.cat([xy, torch.ones(2, 17, 1)], dim=-1)
    return xs, targets


MAX_BOXES = 4  # the static model's padded ground truth


def torchvision_step(name, *, variant="torchvision", train=True, images=2, size=128):
    """(step, parts, size): a function of no arguments running one step of
    the detector (``variant``: torchvision, patch or static), the parts whose
    graph breaks are counted: {name: (function, whether it runs backward)},
    and the images' size (``size``, or the model's fixed size: SSD)."""
    if variant == "static" and name not in FIXED_SIZE and size % 32:
        raise UsageError(f"--static: --size must be a multiple of 32 (the model's size_divisible: the static "
                         f"canvas is --size x --size), got {size}")
    torch.manual_seed(0)
    model = build_model(name, size)
    fixed = fixed_size(model)
    if fixed is not None:  # the model resizes every image to it: the batch is made at that size
        assert fixed[0] == fixed[1], fixed
        size = fixed[0]
    xs, targets = batch(name, images, size)
    if variant == "patch":
        from .compat import torchvision as sf_tv

        sf_tv.patch(model)
    if variant == "static":
        from . import detection as sf_det

        try:
            model = sf_det.make_static(model, (size, size), MAX_BOXES)
        except (TypeError, ValueError) as e:
            raise UsageError(f"--static: {e}") from e
        xs, targets = torch.stack(xs), sf_det.pad_targets(targets, MAX_BOXES)
    model.train(train)
    if not train:
        def step():
            with torch.no_grad():
                return model(xs)

        return step, {"inference": (step, False)}, size
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        loss = sum(model(xs, targets).values())
        opt.zero_grad()
        loss.backward()
        opt.step()

    def forward():
        return model(xs, targets)

    def forward_backward():
        loss = sum(model(xs, targets).values())
        loss.backward()
        return loss.detach()

    return step, {"training forward": (forward, False), "forward, loss and backward": (forward_backward, True)}, size


def user_function(spec):
    """``module:function`` (the function may be a dotted attribute) -> the function."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise UsageError(f"expected MODULE:FUNCTION, got {spec!r}")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise UsageError(f"cannot import {module!r} of {spec!r}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module!r} has no {attr!r} ({spec!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{spec} is not callable ({type(obj).__name__})")
    return obj


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m syncfree.find_syncs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("function", nargs="?", help="MODULE:FUNCTION, a step function of no arguments")
    p.add_argument("--torchvision", metavar="MODEL", choices=sorted(MODELS),
                   help="a torchvision detector: " + ", ".join(sorted(MODELS)))
    variant = p.add_mutually_exclusive_group()
    variant.add_argument("--patch", action="store_true", help="with syncfree's drop-in sampler")
    variant.add_argument("--static", action="store_true", help="make_static's model")
    p.add_argument("--eval", action="store_true", help="inference instead of a training step")
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--size", type=int, default=128,
                   help="image size (default 128; ssd300_vgg16 and ssdlite320_mobilenet_v3_large: their own, "
                        "300 and 320)")
    p.add_argument("--warmup", type=int, default=1, help="calls before the one inspected (default 1)")
    p.add_argument("--graph-breaks", action="store_true",
                   help="also the graph breaks (torch._dynamo.explain) of the forward and of the whole step")
    p.add_argument("--ignore", action="append", default=[], choices=sorted(KINDS), metavar="KIND",
                   help="a kind not to report (repeatable): " + ", ".join(sorted(KINDS)))
    p.add_argument("--json", metavar="PATH", help="write the reports here")
    p.add_argument("--fail", action="store_true", help="exit 1 when anything is found")
    args = p.parse_args(argv)
    if (args.function is None) == (args.torchvision is None):
        p.error("give either MODULE:FUNCTION or --torchvision MODEL")
    if args.function is not None and (args.patch or args.static or args.eval):
        p.error("--patch, --static and --eval go with --torchvision")
    for name, least in (("warmup", 0), ("images", 1), ("size", 32)):
        if getattr(args, name) < least:
            p.error(f"--{name} must be at least {least}, got {getattr(args, name)}")
    if args.json:  # before the run: a path that cannot be written fails now, not after it
        try:
            open(args.json, "a").close()
        except OSError as e:
            p.error(f"--json {args.json}: cannot write it: {e.strerror}")
    try:
        if args.torchvision:
            variant = "static" if args.static else "patch" if args.patch else "torchvision"
            step, parts, size = torchvision_step(args.torchvision, variant=variant, train=not args.eval,
                                                 images=args.images, size=args.size)
            what = (f"{args.torchvision} ({variant}), {'inference' if args.eval else 'training step'}, "
                    f"{args.images} images of {size}x{size}"
                    + (" (the model's fixed size; --size ignored)" if size != args.size else ""))
        else:
            step = user_function(args.function)
            parts = {"function": (step, False)}
            what = args.function
    except UsageError as e:
        p.error(str(e))
    try:
        for _ in range(args.warmup):
            step()
        with _find_syncs(ignore=args.ignore) as report:
            step()
    except Exception:  # the step's own error: exit 3, told apart from usage (2) and findings (1)
        traceback.print_exc()
        print(f"syncfree.find_syncs: the step raised (above); nothing to report", file=sys.stderr)
        return 3
    print(f"{what}, torch {torch.__version__}:")
    print(report)
    out = {"step": what, "torch": torch.__version__, "syncs": report.to_dict()}
    found = len(report)
    out["graph_breaks"] = {}
    if args.graph_breaks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for part, (fn, backward) in parts.items():
                if backward and not hasattr(torch._dynamo.config, "trace_autograd_ops"):
                    print(f"graph breaks of the {part}: not counted, this torch cannot trace backward")
                    out["graph_breaks"][part] = None
                    continue
                ctx = (torch._dynamo.config.patch(trace_autograd_ops=True) if backward
                       else contextlib.nullcontext())
                with ctx:
                    breaks = find_graph_breaks(fn)
                print(f"graph breaks of the {part}:")
                print(breaks)
                out["graph_breaks"][part] = breaks.to_dict()
                found += breaks.graph_break_count
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if args.fail and found else 0


class _CommandLine(types.ModuleType):
    """``syncfree.find_syncs`` is the context manager; importing this module
    (``import syncfree.find_syncs``) rebinds that name to the module, so the
    module calls through to it."""

    def __call__(self, *args, **kwargs):
        return _find_syncs(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _CommandLine
