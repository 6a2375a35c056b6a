#!/usr/bin/env python3
"""Train the static Faster R-CNN on a COCO-format data set and evaluate it with COCOeval.

The usual detection training loop, with syncfree's static model:

- the data: a COCO-format data set on disk, read with torchvision's
  ``CocoDetection`` (wrapped for transforms v2: boxes as xyxy, labels as the
  category ids), images of any size, some without objects;
- a ``DataLoader`` whose ``collate_fn`` is ``syncfree.detection.StaticCollate``:
  it resizes each image as torchvision's transform does and pads the batch
  into a fixed canvas, and pads the targets to --max-boxes per image, so that
  every training step has the same shapes;
- the model: torchvision's ``fasterrcnn_mobilenet_v3_large_fpn`` with random
  weights (nothing is downloaded), made static by
  ``syncfree.detection.make_static``, trained with SGD (momentum 0.9, weight
  decay 1e-4, a linear warmup, then a cosine decay);
- a progress bar (tqdm if installed, else a one-line text bar): the losses stay
  on the device and are read every --log-every steps;
- COCO evaluation (pycocotools' COCOeval, bbox) of the val split every
  --eval-every steps and at the end: the static model's detections, mapped to
  the original image sizes by ``syncfree.detection.postprocess``, as COCO
  results;
- a PNG (--out) of the loss and of AP@[.5:.95] and AP50 against the step
  (matplotlib; skipped with a note without it), and the numbers as JSON (--json).

Without --data it first writes a data set of drawn shapes into --workdir (a
temporary folder by default): --num-train and --num-val PNG images, their
heights and widths drawn from --image-sides, each with 1 to --max-boxes filled
rectangles, ellipses and triangles (3 classes) of random colours on noise, and
every tenth image with none; one COCO annotation file per split (bbox, area,
iscrowd 0, category_id, RLE segmentation).

    python3 examples/train_coco.py [--data DIR | --workdir DIR] [--steps 400]
        [--batch-size 4] [--lr 0.02] [--eval-every 50] [--min-size 128] [--max-size 192]
        [--device cpu|cuda] [--compile] [--workers 1] [--threads 1]
        [--out train_coco.png] [--json train_coco.json]

--data DIR reads DIR/train and DIR/val, each holding annotations.json (COCO
instances format) and images/ (the files the annotations name). Category ids
are the model's labels (num_classes = the largest id + 1, as torchvision's
COCO models have 91), crowd annotations and empty boxes are left out of the
training targets; for COCO 2017, link instances_train2017.json and train2017/
(and val2017) into that layout and give --min-size 800 --max-size 1333
--max-boxes 100.

The canvas is the padded batch size of the largest resized image of the data
set (each side rounded up to a multiple of 32), from the image sizes in the
annotation files. With --compile, a last validation batch smaller than
--batch-size compiles once more (its batch size differs).

Needs torch, torchvision, pycocotools, numpy and PIL; matplotlib for the PNG,
tqdm for a nicer bar (both optional). The default run (400 steps of 4 images;
256 training and 48 validation images of 96 to 192 px, resized to a shorter
side of 128 and a longer one of at most 192 px, in a 192x192 canvas):

    python3 examples/train_coco.py --threads 1

took 13 minutes on a machine of 2 CPU cores shared with other work
(2026-12-02, torch 2.14.1, one thread and one loader process): 1.77 s per
step, 7 s per evaluation. AP@[.5:.95] (AP50) on the validation images at
steps 50 to 400: 0.000 (0.000), 0.000 (0.000), 0.037 (0.144), 0.056 (0.205),
0.091 (0.313), 0.151 (0.434), 0.144 (0.455), 0.150 (0.464). The total loss
first falls, from 2.20 at step 1 to 0.53 at step 65 (20-step mean: the RPN
learns objectness; the box head sees few positive proposals), then rises to
about 1.0 as the proposals find the objects and the box head's
classification and regression losses count them: docs/images/train_coco.png
shows both curves.
"""
import argparse
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch

import syncfree.detection as sf_det

CLASSES = ["rectangle", "ellipse", "triangle"]  # category ids 1, 2, 3
EMPTY_EVERY = 10  # every tenth generated image (the first, the eleventh, ...) has no objects


# ---- the generated data set -----------------------------------------------------

def draw_mask(kind, box, height, width):
    """The pixels of a filled shape drawn in ``box`` (x0, y0, x1, y1): a PIL "L" image."""
    from PIL import Image, ImageDraw

    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    x0, y0, x1, y1 = box
    if CLASSES[kind - 1] == "rectangle":
        draw.rectangle(box, fill=255)
    elif CLASSES[kind - 1] == "ellipse":
        draw.ellipse(box, fill=255)
    else:  # a triangle, apex up
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=255)
    return mask


def overlaps(a, b):
    """Whether two COCO boxes (x, y, w, h) share a pixel."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def write_split(root, num_images, sides, max_boxes, rng):
    """``num_images`` PNG images in ``root/images`` and their COCO annotations in
    ``root/annotations.json``. Shapes do not overlap: each mask is exactly the
    object's visible pixels, and its box and area are taken from them."""
    from PIL import Image
    from pycocotools import mask as mask_utils

    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    images, annotations = [], []
    for index in range(num_images):
        height, width = (int(v) for v in rng.integers(sides[0], sides[1] + 1, size=2))
        noise = (rng.random((height, width, 3)) * 0.35 * 255).astype(np.uint8)
        image = Image.fromarray(noise)
        image_id = index + 1
        wanted = 0 if index % EMPTY_EVERY == 0 else int(rng.integers(1, max_boxes + 1))
        placed = []
        for _ in range(20 * wanted):  # placements that overlap a shape drawn before are redrawn
            if len(placed) == wanted:
                break
            kind = int(rng.integers(1, len(CLASSES) + 1))
            w, h = rng.uniform(0.15, 0.4, size=2) * min(height, width)
            x0, y0 = rng.uniform(0, width - w), rng.uniform(0, height - h)
            mask_image = draw_mask(kind, (x0, y0, x0 + w, y0 + h), height, width)
            mask = np.array(mask_image) > 0
            ys, xs = np.nonzero(mask)
            if len(ys) < 16:
                continue
            bbox = [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)]
            if any(overlaps(bbox, other["bbox"]) for other in placed):
                continue
            colour = tuple(int(v) for v in rng.integers(100, 256, size=3))
            image.paste(colour, mask=mask_image)
            rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
            placed.append({"id": len(annotations) + len(placed) + 1, "image_id": image_id, "category_id": kind,
                           "bbox": bbox, "area": int(mask.sum()), "iscrowd": 0,
                           "segmentation": {"size": rle["size"], "counts": rle["counts"].decode("ascii")}})
        annotations.extend(placed)
        file_name = f"{image_id:06d}.png"
        image.save(os.path.join(root, "images", file_name))
        images.append({"id": image_id, "file_name": file_name, "height": height, "width": width})
    categories = [{"id": i + 1, "name": name, "supercategory": "shape"} for i, name in enumerate(CLASSES)]
    with open(os.path.join(root, "annotations.json"), "w") as f:
        json.dump({"info": {"description": "filled shapes on noise (examples/train_coco.py)"},
                   "images": images, "annotations": annotations, "categories": categories}, f)


def generate(workdir, args):
    """Writes the train and val splits into ``workdir``."""
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    for split, count in (("train", args.num_train), ("val", args.num_val)):
        write_split(os.path.join(workdir, split), count, args.image_sides, args.max_boxes, rng)
    print(f"data: wrote {args.num_train} train and {args.num_val} val images to {workdir} "
          f"in {time.perf_counter() - t0:.1f} s")


# ---- reading it ------------------------------------------------------------------

def to_model_input(image, target):
    """One sample of the wrapped CocoDetection as the model takes it: the image
    as float ``[3, h, w]`` in [0, 1], the target as torchvision's dict (boxes
    xyxy float32, labels int64) without crowd annotations and empty boxes,
    plus the image id. The wrapper gives an image without annotations a
    target with the image id alone."""
    from torchvision.transforms.v2 import functional as F

    image = F.to_dtype(F.to_image(image), torch.float32, scale=True).as_subclass(torch.Tensor)
    if "boxes" not in target:
        boxes, labels = torch.zeros((0, 4)), torch.zeros((0,), dtype=torch.int64)
    else:
        boxes = target["boxes"].as_subclass(torch.Tensor).float()
        keep = ((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
                & ~torch.tensor(target["iscrowd"], dtype=torch.bool))
        boxes, labels = boxes[keep], target["labels"][keep]
    return image, {"boxes": boxes, "labels": labels, "image_id": target["image_id"]}


def load_split(root):
    """The split in ``root`` (annotations.json, images/) as a data set of
    :func:`to_model_input` samples, and its pycocotools ``COCO`` object."""
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco_dataset = CocoDetection(os.path.join(root, "images"), os.path.join(root, "annotations.json"),
                                     transforms=to_model_input)
    dataset = wrap_dataset_for_transforms_v2(coco_dataset, target_keys={"image_id", "boxes", "labels", "iscrowd"})
    return dataset, coco_dataset.coco


def objects_per_image(coco):
    """The number of training boxes (not crowd, not empty) of each image: {image id: count}."""
    counts = {image_id: 0 for image_id in coco.imgs}
    for ann in coco.anns.values():
        if not ann.get("iscrowd", 0) and ann["bbox"][2] > 0 and ann["bbox"][3] > 0:
            counts[ann["image_id"]] += 1
    return counts


class CocoCollate:
    """StaticCollate's batch plus ``image_ids`` (StaticCollate pads the boxes and
    labels only). Without targets (``with_targets=False``), the images alone
    are collated: the evaluation's batch."""

    def __init__(self, collate, with_targets):
        self.collate = collate
        self.with_targets = with_targets

    def __call__(self, samples):
        batch = self.collate(samples if self.with_targets else [image for image, _ in samples])
        batch["image_ids"] = [target["image_id"] for _, target in samples]
        return batch


# ---- the model and its sizes -------------------------------------------------------

def resized_size(height, width, min_size, max_size):
    """An image's size after torchvision's resize (``GeneralizedRCNNTransform``
    in evaluation, and StaticCollate): the scale ``min(min_size / shorter,
    max_size / longer)`` computed in float32, each side floored."""
    shape = torch.tensor([height, width], dtype=torch.float32)
    scale = float(torch.min(min_size / shape.min(), max_size / shape.max()))
    return math.floor(height * scale), math.floor(width * scale)


def choose_canvas(cocos, transform):
    """The canvas (H, W): the largest resized height and width over the images
    of the annotation files, each rounded up to a multiple of the model's
    ``size_divisible`` (32), as torchvision pads a batch of them."""
    min_size, max_size, divisible = transform.min_size[-1], transform.max_size, transform.size_divisible
    sizes = [resized_size(image["height"], image["width"], min_size, max_size)
             for coco in cocos for image in coco.imgs.values()]
    return tuple(divisible * math.ceil(max(side) / divisible) for side in zip(*sizes))


def build_model(num_classes, min_size, max_size):
    import torchvision

    return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=num_classes, min_size=min_size, max_size=max_size,
        # Fewer proposals and RoIs than torchvision's defaults (made for 800 px
        # images): a handful of objects per small image.
        rpn_pre_nms_top_n_train=200, rpn_post_nms_top_n_train=100,
        rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=100, box_batch_size_per_image=64)


def lr_factor(step, warmup, steps):
    """The learning rate's factor at ``step`` (from 0): a linear warmup over
    ``warmup`` steps, times a cosine decay from 1 to 0 over ``steps``."""
    return min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps))


# ---- evaluation ------------------------------------------------------------------

def evaluate(model, loader, coco, device):
    """COCOeval (bbox) of the model's detections on ``loader``'s images: (the 12
    numbers of COCOeval's summary, -1 where the data set has no object to
    measure; its printed table; the number of detections). Without any
    detection every number is 0 (pycocotools cannot load an empty result
    list)."""
    from pycocotools.cocoeval import COCOeval

    results = []
    with torch.no_grad():
        for batch in loader:
            images = batch["images"].to(device, non_blocking=True)
            image_sizes = batch["image_sizes"].to(device, non_blocking=True)
            output = model(images, image_sizes=image_sizes)
            output = sf_det.postprocess(output, batch["image_sizes"], batch["original_image_sizes"])
            for image_id, det in zip(batch["image_ids"], sf_det.to_torchvision(output)):
                for (x0, y0, x1, y1), score, label in zip(det["boxes"].tolist(), det["scores"].tolist(),
                                                          det["labels"].tolist()):
                    results.append({"image_id": image_id, "category_id": label,
                                    "bbox": [x0, y0, x1 - x0, y1 - y0], "score": score})
    if not results:
        return [0.0] * 12, "no detections: every AP is 0\n", 0
    summary = io.StringIO()
    with contextlib.redirect_stdout(summary):
        evaluation = COCOeval(coco, coco.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    table = "".join(line + "\n" for line in summary.getvalue().splitlines() if line.startswith(" Average"))
    return [float(v) for v in evaluation.stats], table, len(results)


# ---- progress and the picture ------------------------------------------------------

class TextBar:
    """A one-line progress bar, used when tqdm is not installed. On a terminal
    it redraws its line; elsewhere (a log file) it writes a line per update."""

    def __init__(self, total):
        self.total, self.n, self.text = total, 0, ""
        self.redraw = sys.stderr.isatty()

    def update(self, n):
        self.n += n
        self._draw()

    def set_postfix_str(self, text, refresh=True):
        self.text = text
        if refresh:
            self._draw()

    def write(self, text):
        if self.redraw:
            sys.stderr.write("\r" + " " * 100 + "\r")
        print(text, flush=True)
        if self.redraw:
            self._draw()

    def _draw(self):
        width = 30
        filled = int(width * self.n / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} {self.text}"
        sys.stderr.write("\r" + line if self.redraw else line + "\n")
        sys.stderr.flush()

    def close(self):
        if self.redraw:
            sys.stderr.write("\n")


def progress_bar(total):
    try:
        from tqdm import tqdm
    except ImportError:
        return TextBar(total)
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


def save_plot(record, path, window):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in record["losses"]]
    total = [row["total"] for row in record["losses"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(steps, total, color="black", alpha=0.25, linewidth=0.8, label="total loss (per step)")
    left.plot(steps, smooth(total, window), color="black", linewidth=2, label=f"total loss ({window}-step mean)")
    for name in record["losses"][0]:
        if name.startswith("loss_"):
            left.plot(steps, smooth([row[name] for row in record["losses"]], window), linewidth=1, label=name)
    left.set_xlabel("step")
    left.set_ylabel("loss")
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    eval_steps = [row["step"] for row in record["evals"]]
    right.plot(eval_steps, [row["ap"] for row in record["evals"]], "o-", label="AP@[.5:.95]")
    right.plot(eval_steps, [row["ap50"] for row in record["evals"]], "s-", label="AP50")
    right.set_xlabel("step")
    right.set_ylabel(f"COCO bbox AP ({record['data']['val_images']} val images)")
    right.set_xlim(0, record["steps"])
    right.set_ylim(0, 1)
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    canvas = record["canvas"]
    fig.suptitle(f"static fasterrcnn_mobilenet_v3_large_fpn from random weights: {record['batch_size']} images "
                 f"per step, canvas {canvas[0]}x{canvas[1]}, {record['device']}"
                 f"{', compiled' if record['compiled'] else ''}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- the command line ------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--data", metavar="DIR",
                      help="a COCO-format data set: DIR/train and DIR/val, each with annotations.json and images/ "
                           "(default: generate one)")
    data.add_argument("--workdir", metavar="DIR",
                      help="where to generate the data set (default: a temporary folder, removed at the end); its "
                           "train/ and val/ are overwritten")
    data.add_argument("--num-train", type=int, default=256, help="generated training images")
    data.add_argument("--num-val", type=int, default=48, help="generated validation images")
    data.add_argument("--image-sides", type=int, nargs=2, default=[96, 192], metavar=("LOW", "HIGH"),
                      help="generated images' heights and widths are drawn from LOW..HIGH px")
    data.add_argument("--max-boxes", type=int, default=4,
                      help="the padding: ground-truth boxes per image in a batch (and the most shapes per "
                           "generated image)")
    data.add_argument("--workers", type=int, default=1, help="DataLoader worker processes (0: load in the "
                                                             "main process)")
    model = p.add_argument_group("model and training")
    model.add_argument("--min-size", type=int, default=128, help="the model's resize: the shorter side")
    model.add_argument("--max-size", type=int, default=192, help="the model's resize: the longer side at most")
    model.add_argument("--steps", type=int, default=400)
    model.add_argument("--batch-size", type=int, default=4)
    model.add_argument("--lr", type=float, default=0.02, help="the peak learning rate")
    model.add_argument("--warmup", type=int, default=50, help="steps of linear warmup")
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    model.add_argument("--compile", action="store_true", help="torch.compile the static model")
    model.add_argument("--threads", type=int, default=0, help="CPU threads of torch (0: torch's default)")
    out = p.add_argument_group("output")
    out.add_argument("--log-every", type=int, default=10, help="read the losses every this many steps")
    out.add_argument("--eval-every", type=int, default=50, help="evaluate every this many steps (and at the end)")
    out.add_argument("--out", default="train_coco.png", help="the loss and AP curves (PNG)")
    out.add_argument("--json", default="train_coco.json", help="the numbers (JSON; an empty name: none)")
    args = p.parse_args(argv)

    for name in ("steps", "batch_size", "max_boxes", "min_size", "max_size", "log_every", "eval_every", "warmup"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.workers < 0 or args.threads < 0:
        p.error("--workers and --threads must be >= 0")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, got {args.lr}")
    if args.data is not None:
        if args.workdir is not None:
            p.error("--workdir is where the generated data set goes: give --data or --workdir, not both")
        for split in ("train", "val"):
            for name in ("annotations.json", "images"):
                path = os.path.join(args.data, split, name)
                if not os.path.exists(path):
                    p.error(f"--data {args.data}: {path} does not exist (expected {args.data}/train and "
                            f"{args.data}/val, each with annotations.json and images/)")
    else:
        if args.num_train < args.batch_size or args.num_val < 1:
            p.error(f"need --num-train >= --batch-size ({args.batch_size}) and --num-val >= 1, got "
                    f"{args.num_train} and {args.num_val}")
        low, high = args.image_sides
        if not 32 <= low <= high:
            p.error(f"--image-sides must be 32 <= LOW <= HIGH, got {low} {high}")
    if args.device not in ("cpu", "cuda"):
        p.error(f"--device must be cpu or cuda, got {args.device}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device available")
    return p, args


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        import matplotlib  # noqa: F401
        plot = True
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install matplotlib)")
        plot = False
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)

    with contextlib.ExitStack() as stack:
        root = args.data
        if root is None:
            root = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="coco_shapes_"))
            generate(root, args)
        train_set, train_coco = load_split(os.path.join(root, "train"))
        val_set, val_coco = load_split(os.path.join(root, "val"))
        return train(parser, args, device, plot, root, train_set, train_coco, val_set, val_coco)


def train(parser, args, device, plot, root, train_set, train_coco, val_set, val_coco):
    category_ids = sorted(train_coco.cats)
    if not category_ids or category_ids[0] < 1:
        parser.error(f"{root}: the category ids must be >= 1 (0 is the background), got {category_ids}")
    num_classes = category_ids[-1] + 1
    counts = objects_per_image(train_coco)
    most = max(counts.values())
    if most > args.max_boxes:
        image_id = max(counts, key=counts.get)
        parser.error(f"{root}/train: image {image_id} has {most} boxes, more than --max-boxes {args.max_boxes}")
    if len(train_set) < args.batch_size:
        parser.error(f"{root}/train has {len(train_set)} images, fewer than --batch-size {args.batch_size}")
    print(f"data: {len(train_set)} train images ({sum(counts.values())} objects, "
          f"images without objects: {sum(c == 0 for c in counts.values())}), {len(val_set)} val images; "
          f"{len(category_ids)} categories: {', '.join(train_coco.cats[i]['name'] for i in category_ids)}")

    model = build_model(num_classes, args.min_size, args.max_size)
    canvas = choose_canvas([train_coco, val_coco], model.transform)
    static = sf_det.make_static(model, canvas, args.max_boxes).to(device).train()
    collate = sf_det.StaticCollate.from_model(model, canvas, args.max_boxes)
    print(f"model: {collate}")
    step_model = torch.compile(static) if args.compile else static
    loader_options = dict(batch_size=args.batch_size, num_workers=args.workers, pin_memory=device.type == "cuda")
    train_loader = torch.utils.data.DataLoader(
        train_set, shuffle=True, drop_last=True, collate_fn=CocoCollate(collate, with_targets=True),
        generator=torch.Generator().manual_seed(args.seed), persistent_workers=args.workers > 0,
        **loader_options)
    val_loader = torch.utils.data.DataLoader(val_set, collate_fn=CocoCollate(collate, with_targets=False),
                                             **loader_options)

    params = [q for q in static.parameters() if q.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warmup = min(args.warmup, args.steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, warmup, args.steps))

    record = dict(steps=args.steps, batch_size=args.batch_size, canvas=list(canvas), max_boxes=args.max_boxes,
                  min_size=args.min_size, max_size=args.max_size, num_classes=num_classes, lr=args.lr,
                  device=args.device, compiled=args.compile, threads=torch.get_num_threads(),
                  workers=args.workers, seed=args.seed, torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                  data=dict(root=args.data or "generated", train_images=len(train_set), val_images=len(val_set)),
                  losses=[], evals=[])
    pending = []  # the losses of the steps not read yet, on the device
    window = max(1, min(20, args.steps // 10))
    train_seconds = eval_seconds = 0.0
    bar = progress_bar(args.steps)
    batches = iter(train_loader)
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        try:
            batch = next(batches)
        except StopIteration:  # a new epoch
            batches = iter(train_loader)
            batch = next(batches)
        images = batch["images"].to(device, non_blocking=True)
        targets = {k: v.to(device, non_blocking=True) for k, v in batch["targets"].items()}
        image_sizes = batch["image_sizes"].to(device, non_blocking=True)
        losses = step_model(images, targets, image_sizes=image_sizes)
        loss = sum(losses.values())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        pending.append(torch.stack([v.detach() for v in losses.values()]))
        evaluate_now = step % args.eval_every == 0 or step == args.steps
        if len(pending) == args.log_every or evaluate_now:
            names = list(losses)
            first = step - len(pending) + 1
            for offset, row in enumerate(torch.stack(pending).tolist()):  # the one read of the device
                losses_read = {name: round(value, 5) for name, value in zip(names, row)}
                record["losses"].append(dict(step=first + offset, total=round(sum(row), 5), **losses_read))
            pending = []
            train_seconds += time.perf_counter() - t0
            recent = [row["total"] for row in record["losses"][-window:]]
            bar.set_postfix_str(f"loss {sum(recent) / len(recent):.3f}, {step / train_seconds:.2f} steps/s",
                                refresh=False)
            bar.update(step - bar.n)
            if evaluate_now:
                t1 = time.perf_counter()
                static.eval()
                stats, table, detections = evaluate(step_model, val_loader, val_coco, device)
                static.train()
                seconds = time.perf_counter() - t1
                eval_seconds += seconds
                record["evals"].append(dict(step=step, ap=stats[0], ap50=stats[1], stats=stats,
                                            detections=detections, seconds=seconds))
                bar.write(f"step {step}: AP {stats[0]:.3f}, AP50 {stats[1]:.3f} ({detections} detections on "
                          f"{len(val_set)} val images, {seconds:.1f} s)")
            t0 = time.perf_counter()
    bar.close()

    record.update(train_seconds=train_seconds, eval_seconds=eval_seconds)
    total = smooth([row["total"] for row in record["losses"]], window)
    record["smoothed_loss"] = dict(window=window, first=total[min(window, len(total)) - 1], last=total[-1])
    print(f"COCO bbox evaluation at step {args.steps}:\n{table}", end="")
    compiled = "; the first ones include compiling" if args.compile else ""
    print(f"{args.steps} steps in {train_seconds:.1f} s ({train_seconds / args.steps:.2f} s/step{compiled}), "
          f"evaluation: {len(record['evals'])} runs in {eval_seconds:.1f} s; smoothed loss ({window}-step mean) "
          f"{record['smoothed_loss']['first']:.3f} -> {record['smoothed_loss']['last']:.3f}")
    print("AP by step: " + ", ".join(f"{row['step']}: {row['ap']:.3f}" for row in record["evals"]))
    if args.json:
        with open(args.json, "w") as f:
            # One line per key: readable, the per-step losses on one line.
            f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in record.items()) + "\n}\n")
        print(f"numbers: {args.json}")
    if plot:
        save_plot(record, args.out, window)
        print(f"curves: {args.out}")
    return record


if __name__ == "__main__":
    main()
