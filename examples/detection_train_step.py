#!/usr/bin/env python3
"""Training steps of a torchvision Faster R-CNN with and without syncfree's sampler.

Builds the model with random weights (nothing is downloaded), makes random
images and boxes, and runs a few SGD steps on the CPU twice: with torchvision's
own sampler, then after ``syncfree.compat.torchvision.patch(model)``. Prints
the losses and the time per step.

    python3 examples/detection_train_step.py [--backbone resnet50|mobilenet]
        [--size 320] [--images 2] [--steps 3] [--seed 0]
"""
import argparse
import time

import torch
import torchvision

import syncfree.compat.torchvision as sf_tv


def build_model(backbone, size, num_classes):
    kwargs = dict(weights=None, weights_backbone=None, num_classes=num_classes,
                  min_size=size, max_size=size)
    if backbone == "resnet50":
        return torchvision.models.detection.fasterrcnn_resnet50_fpn(**kwargs)
    return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(**kwargs)


def random_batch(images, size, num_classes, gen):
    batch, targets = [], []
    for _ in range(images):
        batch.append(torch.rand(3, size, size, generator=gen))
        n = int(torch.randint(1, 6, (1,), generator=gen))
        xy = torch.rand(n, 2, generator=gen) * size * 0.7
        wh = torch.rand(n, 2, generator=gen) * size * 0.3 + 8
        targets.append(dict(boxes=torch.cat([xy, (xy + wh).clamp(max=size)], 1),
                            labels=torch.randint(1, num_classes, (n,), generator=gen)))
    return batch, targets


def train_steps(model, batch, targets, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
    model.train()
    history = []
    for _ in range(steps):
        t0 = time.perf_counter()
        losses = model(batch, targets)
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append((time.perf_counter() - t0, {k: v.detach().item() for k, v in losses.items()}))
    return history


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backbone", choices=["resnet50", "mobilenet"], default="resnet50")
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    num_classes = 5
    gen = torch.Generator().manual_seed(args.seed)
    batch, targets = random_batch(args.images, args.size, num_classes, gen)
    results = {}
    for name in ["torchvision sampler", "syncfree sampler"]:
        torch.manual_seed(args.seed)
        model = build_model(args.backbone, args.size, num_classes)
        if name == "syncfree sampler":
            sf_tv.patch(model)  # this model only
        samplers = sorted({f"{type(m.fg_bg_sampler).__module__}.{type(m.fg_bg_sampler).__name__}"
                           for m in model.modules() if hasattr(m, "fg_bg_sampler")})
        history = train_steps(model, batch, targets, args.steps)
        results[name] = dict(history=history, samplers=samplers)
        print(f"{name} ({args.backbone}, {args.images} images of {args.size}px; {', '.join(samplers)}):")
        for step, (seconds, losses) in enumerate(history):
            text = ", ".join(f"{k} {v:.4f}" for k, v in losses.items())
            print(f"  step {step}: {seconds * 1e3:8.1f} ms  total {sum(losses.values()):.4f}  ({text})")
    return results


if __name__ == "__main__":
    main()
