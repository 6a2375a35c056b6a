#!/usr/bin/env python3
"""Train the static Faster R-CNN on a synthetic data set of drawn shapes.

Generates a small data set (filled rectangles, ellipses and triangles, of
random colours, on noise; each image has 1 to --max-boxes of them, their
boxes and classes taken from the drawn pixels), builds torchvision's
``fasterrcnn_mobilenet_v3_large_fpn`` with random weights (nothing is
downloaded) and trains ``syncfree.detection.make_static`` of it:
every step takes a ``[B, 3, S, S]`` batch and targets padded by
``pad_targets`` to --max-boxes per image, so its shapes never change. Shows
a progress bar (tqdm if installed) and saves the loss curve as a PNG.

    python3 examples/train_static_faster_rcnn.py [--steps 300] [--batch-size 4]
        [--image-size 128] [--device cpu|cuda] [--compile] [--out loss.png] [--seed 0]

The step reads no value on the host: the losses stay on the device and the
progress bar reads them every --log-every steps. Needs torchvision and
matplotlib (for the PNG). The defaults (300 steps, 4 images of 128 px) took
10.5 minutes on two busy CPU cores (--threads 1, about 2 s per step); the
smoothed loss fell from 1.78 to 0.83.
"""
import argparse
import math
import sys
import time

import torch

import syncfree.detection as sf_det

CLASSES = ["background", "rectangle", "ellipse", "triangle"]


# ---- the data set ---------------------------------------------------------------

def _shape_mask(kind, x0, y0, w, h, size):
    """Pixels of a filled shape in the box (x0, y0, w, h): ``[size, size]`` bool."""
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    if kind == 1:  # rectangle
        return (xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h)
    if kind == 2:  # ellipse
        return ((xx - x0 - w / 2) / (w / 2)) ** 2 + ((yy - y0 - h / 2) / (h / 2)) ** 2 <= 1
    # triangle, apex up
    t = (yy - y0) / h
    return (t >= 0) & (t <= 1) & ((xx - x0 - w / 2).abs() <= t * w / 2)


def _iou(a, b):
    lt = torch.max(a[:2], b[:2])
    rb = torch.min(a[2:], b[2:])
    inter = (rb - lt).clamp(min=0).prod()
    return float(inter / ((a[2:] - a[:2]).prod() + (b[2:] - b[:2]).prod() - inter))


def make_dataset(num_images, size, max_boxes, gen):
    """``num_images`` images ``[N, 3, size, size]`` in [0, 1] and their torchvision-style targets."""
    images = torch.rand(num_images, 3, size, size, generator=gen) * 0.35
    targets = []
    for image in images:
        boxes, labels = [], []
        wanted = int(torch.randint(1, max_boxes + 1, (1,), generator=gen))
        for _ in range(8 * wanted):  # placements overlapping others too much are redrawn
            if len(boxes) == wanted:
                break
            kind = int(torch.randint(1, len(CLASSES), (1,), generator=gen))
            w, h = (torch.rand(2, generator=gen) * 0.3 + 0.15).mul(size).tolist()
            x0 = float(torch.rand(1, generator=gen)) * (size - w)
            y0 = float(torch.rand(1, generator=gen)) * (size - h)
            mask = _shape_mask(kind, x0, y0, w, h, size)
            ys, xs = torch.nonzero(mask, as_tuple=True)
            if len(ys) < 16:
                continue
            box = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
            if any(_iou(box, other) > 0.2 for other in boxes):
                continue
            colour = torch.rand(3, 1, generator=gen) * 0.6 + 0.4
            image[:, mask] = colour
            boxes.append(box)
            labels.append(kind)
        targets.append(dict(boxes=torch.stack(boxes), labels=torch.tensor(labels, dtype=torch.int64)))
    return images, targets


# ---- progress and the loss curve ------------------------------------------------

class _Bar:
    """A minimal progress bar, used when tqdm is not installed."""

    def __init__(self, total):
        self.total, self.n, self.text = total, 0, ""

    def update(self, n):
        self.n += n
        self._draw()

    def set_postfix_str(self, text, refresh=True):
        self.text = text
        if refresh:
            self._draw()

    def _draw(self):
        width = 30
        filled = int(width * self.n / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} {self.text}")
        sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")


def progress_bar(total):
    try:
        from tqdm import tqdm
    except ImportError:
        return _Bar(total)
    return tqdm(total=total, unit="step")


def smooth(values, window):
    """Moving average over the last ``window`` values (fewer at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def save_curve(history, path, window, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = range(1, len(history) + 1)
    total = [sum(h.values()) for h in history]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, total, color="tab:blue", alpha=0.25, linewidth=0.8, label="total (per step)")
    ax.plot(steps, smooth(total, window), color="tab:blue", linewidth=2, label=f"total ({window}-step mean)")
    for name in history[0]:
        ax.plot(steps, smooth([h[name] for h in history], window), linewidth=1, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- training --------------------------------------------------------------------

def build_model(image_size, max_boxes):
    import torchvision

    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=len(CLASSES), min_size=image_size,
        max_size=image_size,
        # Fewer proposals and RoIs than torchvision's defaults (made for 800 px
        # images): a handful of objects per small image.
        rpn_pre_nms_top_n_train=200, rpn_post_nms_top_n_train=100, box_batch_size_per_image=64)
    return sf_det.make_static(model, (image_size, image_size), max_boxes)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--image-size", type=int, default=128, help="a multiple of 32")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--compile", action="store_true", help="torch.compile the model's step")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (with --compile)")
    p.add_argument("--out", default="static_faster_rcnn_loss.png", help="the loss curve (PNG)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-images", type=int, default=256, help="size of the synthetic data set")
    p.add_argument("--max-boxes", type=int, default=5, help="most objects per image (the padding)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--log-every", type=int, default=10, help="read the losses every this many steps")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    args = p.parse_args(argv)
    if args.image_size % 32:
        p.error(f"--image-size must be a multiple of 32, got {args.image_size}")
    if args.steps < 1 or args.batch_size < 1 or args.num_images < args.batch_size:
        p.error("need --steps >= 1, --batch-size >= 1 and --num-images >= --batch-size")
    try:
        import matplotlib  # noqa: F401  (checked before training, not after)
    except ImportError:
        p.error("matplotlib is needed for the loss curve: pip install matplotlib")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device available")
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    images, targets = make_dataset(args.num_images, args.image_size, args.max_boxes, gen)
    padded = sf_det.pad_targets(targets, args.max_boxes)  # the data pipeline's job, done once here
    images = images.to(device)
    padded = {k: v.to(device) for k, v in padded.items()}
    objects = sum(len(t["labels"]) for t in targets)
    print(f"data: {args.num_images} images of {args.image_size}x{args.image_size}, {objects} objects "
          f"({', '.join(CLASSES[1:])}), made in {time.perf_counter() - t0:.1f} s")

    model = build_model(args.image_size, args.max_boxes).to(device).train()
    step_model = torch.compile(model, backend=args.compile_backend) if args.compile else model
    params = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warmup = min(50, max(1, args.steps // 5))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))

    history, pending = [], []
    order = torch.randperm(args.num_images, generator=gen)
    cursor = 0
    bar = progress_bar(args.steps)
    t0 = time.perf_counter()
    for step in range(args.steps):
        if cursor + args.batch_size > args.num_images:  # a new epoch
            order, cursor = torch.randperm(args.num_images, generator=gen), 0
        index = order[cursor:cursor + args.batch_size].to(device)
        cursor += args.batch_size
        losses = step_model(images[index], {k: v[index] for k, v in padded.items()})
        loss = sum(losses.values())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        pending.append(torch.stack([v.detach() for v in losses.values()]))
        if len(pending) == args.log_every or step == args.steps - 1:
            names = list(losses)
            for row in torch.stack(pending).tolist():  # one read of the device every log_every steps
                history.append(dict(zip(names, row)))
            pending = []
            recent = [sum(h.values()) for h in history[-args.log_every:]]
            bar.set_postfix_str(f"loss {sum(recent) / len(recent):.3f}", refresh=False)
            bar.update(len(history) - bar.n)
    bar.close()
    seconds = time.perf_counter() - t0

    window = max(1, min(20, args.steps // 10))
    total = smooth([sum(h.values()) for h in history], window)
    first = total[min(window, len(total)) - 1]  # the mean of the first window
    title = (f"static Faster R-CNN (mobilenet_v3_large_fpn), {args.batch_size} x {args.image_size}px, "
             f"{args.device}{', compiled' if args.compile else ''}")
    save_curve(history, args.out, window, title)
    compiled = " (the first includes compiling)" if args.compile else ""
    print(f"{args.steps} steps in {seconds:.1f} s ({seconds / args.steps * 1e3:.0f} ms/step{compiled}); "
          f"smoothed total loss ({window}-step mean): first {first:.4f}, last {total[-1]:.4f}")
    print(f"final loss {sum(history[-1].values()):.6f}")
    print(f"loss curve: {args.out}")
    return dict(history=history, seconds=seconds, first=first, last=total[-1], out=args.out)


if __name__ == "__main__":
    main()
