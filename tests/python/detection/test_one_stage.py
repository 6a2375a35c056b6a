"""make_static on torchvision's one-stage detectors, RetinaNet (each box
loss), FCOS, SSD and SSD with SSDlite's head, small enough for every run
(tests/python/helpers/detection.py: ``tiny_one_stage``): the static
training step's losses and gradients equal torchvision's on every batch
(no sampling is involved), ties in matching included, whatever the padding;
the detections equal torchvision's where the ``topk_candidates``, score
threshold and ``detections_per_img`` cuts are exercised; the steps make no
host sync, compile to one graph that does not recompile when the number of
boxes changes, and the eval model exports; the model object and its
errors."""
import copy

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import syncfree
import syncfree.detection as sf_det
from helpers.detection import (assert_detections_equal, assert_losses_equal, sized_batch, sized_training_losses,
                               tiny_one_stage, varied_heads)
from syncfree.testing import assert_no_syncs

G = 6
# RetinaNet once per box loss (regression_head._loss_type): "l1" is v1's,
# "giou" v2's.
KINDS = ["retinanet-l1", "retinanet-smooth_l1", "retinanet-giou", "retinanet-diou", "retinanet-ciou", "fcos", "ssd",
         "ssdlite"]
# SSD resizes every image to its fixed size: a canvas that is not square
# checks that (width, height) and (height, width) are not swapped.
SSD_CANVAS = (128, 160)
SQUARE = (128, 128)


def build(kind, **kwargs):
    """``kind`` of KINDS (or a family alone: "retinanet" is RetinaNet with
    its default box loss), its heads varied (``varied_heads``); ``kwargs``
    go to the model's constructor."""
    family, _, loss_type = kind.partition("-")
    if family.startswith("ssd"):
        kwargs["size"] = (SSD_CANVAS[1], SSD_CANVAS[0])
    return varied_heads(tiny_one_stage(family, loss_type=loss_type or None, **kwargs))


def canvas_of(kind):
    return SSD_CANVAS if kind.startswith("ssd") else SQUARE


def make_images(kind, seed, counts):
    """Images ``[B, 3, H, W]`` of the kind's canvas and torchvision's targets,
    ``counts[i]`` boxes in image i."""
    items = sized_batch(seed, [canvas_of(kind)] * len(counts), counts)
    return torch.stack([image for image, _ in items]), [target for _, target in items]


def losses_and_grads(model, step):
    """One training step from the model's state as it is: ``(losses, the
    gradients of their sum by parameter name, the state it leaves)``; the
    state restored and the gradients cleared after it."""
    model.train()
    state = copy.deepcopy(model.state_dict())
    model.zero_grad(set_to_none=True)
    losses = step()
    sum(losses.values()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    after = copy.deepcopy(model.state_dict())
    model.load_state_dict(state)
    model.zero_grad(set_to_none=True)
    return {k: v.detach() for k, v in losses.items()}, grads, after


def both_steps(model, static, images, targets):
    """torchvision's step on the list of images, then the static model's on
    the batch and the padded targets, from the same weights and buffers:
    ``((losses, grads, state), (losses, grads, state))``."""
    ref = losses_and_grads(model, lambda: model(list(images), copy.deepcopy(targets)))
    got = losses_and_grads(model, lambda: static(images, sf_det.pad_targets(targets, static.max_boxes)))
    return ref, got


def assert_grads_close(ref, got, rtol=1e-4):
    """The same parameters have gradients, equal up to the order of the sums
    (per image or over the batch): within ``rtol`` of each gradient or a
    tenth of that of its largest."""
    assert set(ref) == set(got), set(ref) ^ set(got)
    for name in ref:
        scale = ref[name].abs().max().item()
        torch.testing.assert_close(got[name], ref[name], rtol=rtol, atol=0.1 * rtol * scale + 1e-12, msg=name)


# ---- training: the losses against torchvision


@pytest.mark.parametrize("counts", [[3, 5, 0], [0, 0]], ids=["3-5-0", "no-boxes"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "autocast-bfloat16"])
@pytest.mark.parametrize("kind", KINDS)
def test_training_losses_equal_torchvision(tv, kind, autocast, counts):
    """Images with different numbers of boxes, one without any, and a batch
    without any (each normalization by the number of foreground anchors
    clamped at 1):
    the losses within 1e-5 (float32 sums in another order; under bfloat16
    autocast as well, both models computing the same bfloat16 head outputs
    and the losses in float32), the gradients (under autocast within a
    bfloat16 rounding: the backward of the convolutions is in bfloat16) and
    the buffers after the step (SSDlite's batch norm)."""
    model = build(kind)
    static = sf_det.make_static(model, canvas_of(kind), G)
    images, targets = make_images(kind, 1, counts)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        (ref, ref_grads, ref_state), (got, got_grads, got_state) = both_steps(model, static, images, targets)
    assert_losses_equal(ref, got)
    assert_grads_close(ref_grads, got_grads, rtol=1e-2 if autocast else 1e-4)
    for key in ref_state:
        torch.testing.assert_close(got_state[key], ref_state[key], rtol=1e-5, atol=1e-6)


# The equality tests on images of different sizes: two images that
# torchvision's transform keeps as they are (shorter side 96, longer side at
# most 192), in its padded batch size as the canvas.
SIZES = [(96, 160), (128, 96)]
CANVAS = (128, 160)


def sized(model):
    model.transform.min_size = (96,)
    model.transform.max_size = 192
    return model


@pytest.mark.parametrize("kind", ["retinanet-l1", "retinanet-giou", "fcos"])
def test_training_losses_equal_torchvision_on_images_of_different_sizes(tv, kind):
    """StaticCollate's canvas and image sizes: the anchors of the padded
    batch, the zeros outside each image, as torchvision's."""
    model = sized(build(kind))
    static = sf_det.make_static(model, CANVAS, G)
    items = sized_batch(2, SIZES, [3, 5])
    batch = sf_det.StaticCollate.from_model(model, CANVAS, G)(items)
    ref, got, _, _ = sized_training_losses(model, static, items, batch)
    assert_losses_equal(ref, got)


def tied_targets():
    """Ground truth whose matching has ties: in image 0 a box twice (labels 1
    and 2) and two boxes one pixel apart (1 and 3); in image 1 a box nested
    in another with the same center (2 in 1) and one box alone."""
    a = [24.0, 24.0, 64.0, 64.0]
    near = [[70.0, 60.0, 110.0, 100.0], [71.0, 60.0, 110.0, 101.0]]
    image0 = {"boxes": torch.tensor([a, a] + near), "labels": torch.tensor([1, 2, 1, 3])}
    image1 = {"boxes": torch.tensor([[10.0, 50.0, 60.0, 110.0], [20.0, 60.0, 50.0, 100.0], [80.0, 10.0, 110.0, 40.0]]),
              "labels": torch.tensor([1, 2, 3])}
    return [image0, image1]


@pytest.mark.parametrize("kind", ["retinanet-l1", "retinanet-giou", "fcos", "ssd", "ssdlite"])
def test_training_losses_equal_torchvision_with_ties_in_matching(tv, kind):
    """Identical and nested ground-truth boxes: the anchors they share go to
    the box torchvision's matching picks (RetinaNet: the first of equal
    IoUs; FCOS: the smallest area, the first of equal areas; SSD: the first
    of equal IoUs, and of two boxes with the same best default box the
    later one takes it). That the pick matters is checked too: the identical
    boxes' labels swapped change torchvision's loss."""
    model = build(kind)
    static = sf_det.make_static(model, canvas_of(kind), G)
    images, _ = make_images(kind, 3, [0, 0])
    targets = tied_targets()
    (ref, ref_grads, _), (got, got_grads, _) = both_steps(model, static, images, targets)
    assert_losses_equal(ref, got)
    assert_grads_close(ref_grads, got_grads)
    swapped = copy.deepcopy(targets)
    swapped[0]["labels"][:2] = torch.tensor([2, 1])
    (other, _, _), (other_got, _, _) = both_steps(model, static, images, swapped)
    assert_losses_equal(other, other_got)
    assert abs(other["classification"].item() - ref["classification"].item()) > 1e-4 * ref["classification"].item()
    if kind.startswith("ssd"):
        # The two boxes one pixel apart do share their best default box.
        from torchvision.models.detection.image_list import ImageList
        from torchvision.ops import box_iou

        with torch.no_grad():
            features = list(model.backbone(model.transform.normalize(images)).values())
            anchors = model.anchor_generator(ImageList(images, [canvas_of(kind)] * 2), features)[0]
        best = box_iou(targets[0]["boxes"], anchors).argmax(dim=1)
        assert best[0] == best[1] and best[2] == best[3], best


@pytest.mark.parametrize("kind", ["retinanet-l1", "retinanet-giou", "fcos", "ssd"])
def test_padding_is_ignored(tv, kind):
    """The same ground truth padded to 6 or to 11 boxes gives the same losses,
    and so does padding whose boxes are not zeros (a negative label marks
    padding, whatever its box): copies of a real box, boxes that overlap
    one, a box elsewhere, and in the image without boxes copies of another
    image's box."""
    model = build(kind).train()
    images, targets = make_images(kind, 4, [4, 2, 0])
    losses = []
    for g in (6, 11):
        static = sf_det.make_static(model, canvas_of(kind), g).train()
        padded = sf_det.pad_targets(targets, g)
        losses.append(static(images, padded))
    assert_losses_equal(losses[0], losses[1])
    boxes = padded["boxes"].clone()
    boxes[0, 4] = boxes[0, 0]
    boxes[0, 5:] = boxes[0, 1] + 2.0
    boxes[1, 2:] = torch.tensor([90.0, 90.0, 120.0, 125.0])
    boxes[2, :] = boxes[0, 0]
    assert torch.equal(boxes[padded["labels"] >= 0], padded["boxes"][padded["labels"] >= 0])
    assert_losses_equal(losses[0], static(images, dict(padded, boxes=boxes)))
    # Padding boxes that are not finite: neither the losses nor the gradients
    # see them (0 * inf would be NaN).
    boxes[0, 4] = float("inf")
    boxes[1, 2:] = float("nan")
    boxes[2, :, 2:] = float("-inf")
    model.zero_grad(set_to_none=True)
    got = static(images, dict(padded, boxes=boxes))
    assert_losses_equal(losses[0], got)
    sum(got.values()).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("loss_type", ["l1", "smooth_l1", "giou", "diou", "ciou"])
def test_background_regression_does_not_reach_the_loss_gradient(tv, loss_type):
    """RetinaNet's box loss on the foreground only: outputs at background
    anchors that decode to boxes of height 0 (CIoU's atan(w / h) has no
    finite gradient there) leave the gradient finite and equal to
    torchvision's, which never computes them."""
    from syncfree.detection import retinanet

    model = tiny_one_stage("retinanet", loss_type=loss_type).train()
    static = sf_det.make_static(model, SQUARE, G)
    images, targets = make_images("retinanet", 3, [2, 1])
    padded = sf_det.pad_targets(targets, G)
    x, features = static._features(images, None)
    feature_list = list(features.values())
    anchors = static._anchors(x, feature_list)
    foreground = retinanet.match(model.proposal_matcher, anchors, padded) >= 0
    assert foreground.any() and not foreground.all()
    gen = torch.Generator().manual_seed(0)
    a, c = anchors.shape[0], model.head.classification_head.num_classes
    regression = 0.1 * torch.randn(2, a, 4, generator=gen)
    regression[..., 3] = torch.where(foreground, regression[..., 3], torch.full_like(regression[..., 3], -200.0))
    logits = torch.randn(2, a, c, generator=gen)
    results = []
    for compute in (lambda r: retinanet.losses(model, padded, {"cls_logits": logits, "bbox_regression": r}, anchors),
                    lambda r: model.compute_loss(targets, {"cls_logits": logits, "bbox_regression": r},
                                                 [anchors, anchors])):
        r = regression.clone().requires_grad_()
        losses = compute(r)
        sum(losses.values()).backward()
        results.append(({k: v.detach() for k, v in losses.items()}, r.grad))
    (got, got_grad), (ref, ref_grad) = results
    assert_losses_equal(ref, got)
    assert torch.isfinite(got_grad).all()
    torch.testing.assert_close(got_grad, ref_grad, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("clip", [True, False])
@pytest.mark.parametrize("steps", [None, [8, 16]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_default_boxes_equal_torchvision(tv, dtype, steps, clip):
    """SSD's default boxes, made on the features' device, are torchvision's
    generator's bit for bit (its grid computed on the host), for a canvas
    that is not square, with and without steps and clipping, in each
    dtype."""
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
    from torchvision.models.detection.image_list import ImageList

    from syncfree.detection.ssd import default_boxes, wh_pairs

    canvas = SSD_CANVAS
    generator = DefaultBoxGenerator([[2], [2, 3]], min_ratio=0.15, max_ratio=0.9, steps=steps, clip=clip)
    features = [torch.zeros(1, 4, 16, 20, dtype=dtype), torch.zeros(1, 4, 8, 10, dtype=dtype)]
    want = generator(ImageList(torch.zeros((1, 3) + canvas, dtype=dtype), [canvas]), features)[0]
    got = default_boxes(generator, features, canvas, wh_pairs(generator))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)


def test_default_box_grid_does_not_depend_on_how_the_division_rounds(tv):
    """The grid's shifts, (i + 0.5) / size in float32 on the host in
    torchvision, are computed in float64 and rounded to float32: the same
    float32 whether float64 divides exactly or multiplies by the reciprocal
    (CUDA's kernels with a scalar divisor, inductor on a GPU), for every
    level size of SSD300, SSDlite and canvases up to 1024 (float32's
    quotient of these numbers is never within float64's error of a
    rounding boundary)."""
    sizes = {float(n) for n in range(1, 129)}  # steps None: the feature map's size
    for canvas in (300, 320, 512, 1024):
        sizes |= {canvas / step for step in (8, 16, 32, 64, 100, 128, 256, 300, 320, 512)}
    for size in sorted(sizes):
        n = 1024
        steps = torch.arange(0, n) + 0.5  # torchvision's, in float32
        want = steps / size
        divisor = torch.tensor(size, dtype=torch.float32).double()
        wide = torch.arange(0, n, dtype=torch.float64) + 0.5
        assert torch.equal((wide / divisor).float(), want), size
        assert torch.equal((wide * (1.0 / divisor)).float(), want), size
        # float32's own product by the reciprocal is not torchvision's: the
        # reason for the float64 route.
    reciprocal = (torch.arange(0, 38) + 0.5) * (1.0 / torch.tensor(37.5))
    assert not torch.equal(reciprocal, (torch.arange(0, 38) + 0.5) / 37.5)


def test_default_boxes_read_the_generators_pairs_once(tv):
    """The width-height pairs are the generator's _wh_pairs, which
    torchvision fixes when it builds the generator: changing its scales
    afterwards changes neither torchvision's boxes nor the static model's."""
    from syncfree.detection import ssd

    model = build("ssd").eval()
    static = sf_det.make_static(model, SSD_CANVAS, G).eval()
    images, _ = make_images("ssd", 2, [1, 1])
    with torch.no_grad():
        before = static(images)
        model.anchor_generator.scales = [2 * s for s in model.anchor_generator.scales]
        ref = model(list(images))
        after = static(images)
    assert_detections_equal(ref, sf_det.to_torchvision(after))
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert static._wh == ssd.wh_pairs(model.anchor_generator)


# ---- eval: the detections against torchvision

# Which cut decides torchvision's detections: "topk", topk_candidates per
# level (SSD: per class); "slots", detections_per_img after the NMS;
# "threshold", the score threshold alone (fewer scores pass than the
# topk_candidates slots, the rest are invalid slots, and fewer detections
# remain than detections_per_img).
CUTS = {
    "topk": dict(topk_candidates=10, detections_per_img=100),
    "slots": dict(topk_candidates=100, detections_per_img=20),
    "threshold": dict(topk_candidates=100, detections_per_img=50),
}
# Between 10 and 50 detections per image; fewer than 100 scores above them
# per level or class.
THRESHOLDS = {"retinanet": 0.585, "fcos": 0.82, "ssd": 0.63, "ssdlite": 0.54}


@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssd", "ssdlite"])
def test_detections_equal_torchvision(tv, kind, cut):
    """RetinaNet and FCOS on images of different sizes (StaticCollate's
    canvas and image sizes: each image's own clipping), SSD on images of its
    fixed size. That the cut decides is checked on torchvision's model:
    with ten times its candidates, or four times its slots, torchvision's
    detections change where that cut decides, and only there."""
    settings = dict(CUTS[cut])
    if cut == "threshold":
        settings["score_thresh"] = THRESHOLDS[kind]
    if kind.startswith("ssd"):
        model = build(kind, **settings).eval()
        images, _ = make_images(kind, 5, [0, 0])
        images = list(images)
        batch = {"images": torch.stack(images), "image_sizes": None}
        canvas = SSD_CANVAS
    else:
        model = sized(build(kind, **settings)).eval()
        if kind == "fcos":
            # Distances of a few anchor sizes: boxes that cross an image's
            # edge inside the canvas, where the clipping is the image's own.
            with torch.no_grad():
                model.head.regression_head.bbox_reg.weight.mul_(8.0)
        images = [image for image, _ in sized_batch(5, SIZES, [0, 0])]
        batch = sf_det.StaticCollate.from_model(model, CANVAS, G)(images)
        canvas = CANVAS
    static = sf_det.make_static(model, canvas, G)
    d = model.detections_per_img
    with torch.no_grad():
        ref = model(images)
        out = static(batch["images"], image_sizes=batch["image_sizes"])
        model.topk_candidates *= 10
        more_candidates = model(images)
        model.topk_candidates //= 10
        model.detections_per_img *= 4
        more_slots = model(images)
        model.detections_per_img = d
    for r in ref:  # something to compare, with few ties (which torchvision may break otherwise)
        assert 0 < len(r["scores"]) and r["scores"].unique().numel() > 0.9 * len(r["scores"])
    if not kind.startswith("ssd"):
        # Some boxes are clipped at an image's edge inside the canvas (image
        # 0's bottom, image 1's right).
        assert (ref[0]["boxes"][:, 3] == SIZES[0][0]).any() or (ref[1]["boxes"][:, 2] == SIZES[1][1]).any()

    def changes(other):
        return [not torch.equal(o["scores"], r["scores"]) for o, r in zip(other, ref)]

    assert any(changes(more_candidates)) == (cut == "topk")
    assert any(changes(more_slots)) == (cut == "slots")
    if cut == "slots":
        assert all(len(r["scores"]) == d for r in ref)
    if cut == "threshold":
        assert all(len(r["scores"]) < d for r in ref)
    assert out["boxes"].shape == (2, d, 4) and out["valid"].shape == (2, d)
    assert_detections_equal(ref, sf_det.to_torchvision(out))
    # Invalid slots are zeros; valid ones come first, by score.
    valid = out["valid"]
    assert torch.equal(valid, valid.sort(dim=1, descending=True, stable=True).values)
    assert not out["scores"][~valid].any() and not out["boxes"][~valid].any() and not out["labels"][~valid].any()


@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssd"])
def test_settings_without_candidates_or_slots(tv, kind):
    """topk_candidates 0 keeps no candidate in torchvision (no detection):
    only invalid slots; detections_per_img 0: no slot; a negative
    topk_candidates is an error that names the setting."""
    model = build(kind).eval()
    static = sf_det.make_static(model, canvas_of(kind), G).eval()
    images, _ = make_images(kind, 5, [2, 1])
    with torch.no_grad():
        model.topk_candidates = 0
        assert all(len(d["boxes"]) == 0 for d in model(list(images)))
        out = static(images)
        assert out["valid"].shape == (2, model.detections_per_img) and not out["valid"].any()
        model.topk_candidates, model.detections_per_img = 100, 0
        assert all(len(d["boxes"]) == 0 for d in model(list(images)))
        assert static(images)["valid"].shape == (2, 0)
        model.topk_candidates, model.detections_per_img = -1, 100
        with pytest.raises(ValueError, match="^syncfree.detection." + CLASSES[kind]
                                             + ": the model's topk_candidates must be >= 0, got -1"):
            static(images)
        model.topk_candidates = 1.5
        with pytest.raises(TypeError, match="^syncfree.detection." + CLASSES[kind]
                                            + ": the model's topk_candidates must be an int, got 1.5"):
            static(images)


# ---- no host syncs, one graph, export

STEP_KINDS = ["retinanet-l1", "retinanet-giou", "fcos", "ssd", "ssdlite"]
SYNC_KINDS = STEP_KINDS + ["retinanet-diou", "retinanet-ciou"]


def training_step(model, images, targets):
    def step():
        sum(model(images, targets).values()).backward()
    return step


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_static_steps_have_no_syncs(tv, kind):
    """The training step (forward and backward) and inference make no host
    sync, no data-dependent shape and no tensor from Python data;
    torchvision's own step, inspected the same way, has them."""
    model = build(kind)
    static = sf_det.make_static(model, canvas_of(kind), G).train()
    images, targets = make_images(kind, 7, [2, 0])
    padded = sf_det.pad_targets(targets, G)
    assert_no_syncs(training_step(static, images, padded))
    static.eval()
    with torch.no_grad():
        detections = assert_no_syncs(static, images)
    assert detections["valid"].shape[0] == 2 and detections["valid"].any()
    model.train()
    with syncfree.find_syncs() as report:
        training_step(model, list(images), targets)()
    assert {"item", "from_python", "mask_index"} <= report.counts().keys(), report.counts()


def needs_autograd_tracing():
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip(f"torch {torch.__version__}: dynamo cannot trace Tensor.backward() (no trace_autograd_ops)")


@pytest.mark.usefixtures("fresh_dynamo")  # tests/python/conftest.py
@pytest.mark.parametrize("kind", STEP_KINDS)
def test_training_step_is_one_graph_without_recompiling(tv, kind):
    """fullgraph=True: a graph break is an error. Three batches with
    different numbers of boxes (the padding changes, the shapes do not):
    one frame, no recompilation after the first; the compiled losses are
    the eager ones."""
    needs_autograd_tracing()
    model = build(kind)
    static = sf_det.make_static(model, canvas_of(kind), G).train()
    counter = torch._dynamo.testing.CompileCounterWithBackend("eager")

    def step(images, targets):
        losses = static(images, targets)
        sum(losses.values()).backward()
        return {k: v.detach() for k, v in losses.items()}

    compiled = torch.compile(step, backend=counter, fullgraph=True)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        for i, counts in enumerate([[3, 5], [6, 1], [0, 2]]):
            images, targets = make_images(kind, 10 + i, counts)
            padded = sf_det.pad_targets(targets, G)
            with torch._dynamo.config.patch(error_on_recompile=i > 0):
                got = compiled(images, padded)
            static.zero_grad(set_to_none=True)
            want = step(images, padded)
            static.zero_grad(set_to_none=True)
            assert_losses_equal(want, got)
    assert counter.frame_count == 1


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssd", "ssdlite"])
def test_eval_model_exports(tv, kind):
    model = build(kind).eval()
    static = sf_det.make_static(model, canvas_of(kind), G).eval()
    images, _ = make_images(kind, 8, [0, 0])
    program = torch.export.export(static, (images,))
    with torch.no_grad():
        eager = static(images)
        exported = program.module()(images)
    assert set(exported) == set(eager)
    for key in eager:
        torch.testing.assert_close(exported[key], eager[key], rtol=0, atol=0)
    assert eager["valid"].any()


# ---- the model object

CLASSES = {"retinanet": "StaticRetinaNet", "fcos": "StaticFCOS", "ssd": "StaticSSD", "ssdlite": "StaticSSD"}


@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssd", "ssdlite"])
def test_shares_the_modules_and_state_dict(tv, kind):
    model = build(kind)
    static = sf_det.make_static(model, canvas_of(kind), G)
    assert type(static) is getattr(sf_det, CLASSES[kind])
    assert static.torchvision_model is model
    for name in ("transform", "backbone", "anchor_generator", "head"):
        assert getattr(static, name) is getattr(model, name)
    ref, got = model.state_dict(), static.state_dict()
    assert list(ref) == list(got)
    assert all(got[k].data_ptr() == ref[k].data_ptr() for k in ref)
    # A torchvision checkpoint loads into the static model unchanged, and back.
    other = build(kind)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    static.load_state_dict(other.state_dict())
    assert all(torch.equal(model.state_dict()[k], other.state_dict()[k]) for k in ref)
    build(kind).load_state_dict(static.state_dict())
    assert f"image_size={canvas_of(kind)}, max_boxes={G}" in repr(static)


@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssdlite"])
def test_one_switch_sets_both_models_modes(tv, kind):
    """static.train() / .eval() also switch the torchvision model's own flag
    (and the shared modules': SSDlite's batch norm); switching the
    torchvision model afterwards is an error at the static model's next
    forward."""
    model = build(kind).train()
    static = sf_det.make_static(model, canvas_of(kind), G)
    assert static.training
    images, targets = make_images(kind, 9, [1, 2])
    static.eval()
    assert not model.training and not any(m.training for m in model.modules())
    with torch.no_grad():
        assert len(model(list(images))) == 2  # torchvision's eval: no targets needed
        static(images)
    model.train()
    name = "syncfree.detection." + CLASSES[kind]
    with pytest.raises(RuntimeError, match="^" + name + ": the static model is in eval mode but the torchvision "
                                           "model it shares its modules with was switched to training mode"):
        static(images)
    static.train()
    assert model.training and all(m.training for m in model.modules())
    losses = static(images, sf_det.pad_targets(targets, G))
    assert all(torch.isfinite(v) for v in losses.values())


@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssd"])
def test_static_model_input_errors(tv, kind):
    static = sf_det.make_static(build(kind), canvas_of(kind), G).train()
    h, w = canvas_of(kind)
    images, targets = make_images(kind, 6, [1, 2])
    padded = sf_det.pad_targets(targets, G)
    sizes = torch.tensor([[h, w]] * 2)
    cases = [
        ((list(images), padded), {}, TypeError, f"images must be a [B, 3, {h}, {w}] tensor"),
        ((images[:, :, :64], padded), {}, ValueError, f"images must be [B, 3, {h}, {w}]"),
        ((images[:, :2], padded), {}, ValueError, f"images must be [B, 3, {h}, {w}]"),
        ((images.to(torch.uint8), padded), {}, TypeError, "images must be floating point"),
        ((images.double(), padded), {}, TypeError,
         "images are torch.float64 but the model's parameters are torch.float32"),
        ((images, padded), dict(image_sizes=sizes[:1]), ValueError, "image_sizes must be a [2, 2] int64 tensor"),
        ((images, padded), dict(image_sizes=sizes.int()), ValueError, "image_sizes must be a [2, 2] int64 tensor"),
        ((images, None), {}, ValueError, "training needs targets"),
        ((images, targets), {}, TypeError, "targets must be a dict of padded tensors"),
        ((images, sf_det.pad_targets(targets, G + 1)), {}, ValueError, f"targets['boxes'] must be [2, {G}, 4]"),
        ((images, dict(padded, labels=padded["labels"][:, :3])), {}, ValueError,
         f"targets['labels'] must be [2, {G}], got [2, 3]"),
        ((images, {"boxes": padded["boxes"]}), {}, ValueError, "targets has no 'labels'"),
        ((images, dict(padded, boxes=padded["boxes"].long())), {}, TypeError,
         "targets['boxes'] must be floating point, got torch.int64"),
    ]
    prefix = "syncfree.detection." + CLASSES[kind] + ": "
    for args, kwargs, error, message in cases:
        with pytest.raises(error) as info:
            static(*args, **kwargs)
        assert str(info.value).startswith(prefix + message), str(info.value)


def test_make_static_errors(tv):
    """An SSD's canvas is its fixed size (W, H) read as (H, W); a one-stage
    model whose part overrides a method the static model computes in its
    own way is refused (its losses would not be the model's)."""
    ssd = build("ssd")
    for size in [(160, 128), (320, 320)]:
        with pytest.raises(ValueError) as info:
            sf_det.make_static(ssd, size, G)
        assert str(info.value).startswith(
            "syncfree.detection.make_static: this model resizes every image to 128x160 (its transform's "
            f"fixed_size): image_size must be (128, 160), got {size}"), str(info.value)
    assert isinstance(sf_det.make_static(ssd, SSD_CANVAS, G), sf_det.StaticSSD)
    with pytest.raises(ValueError, match="^syncfree.detection.make_static: image_size must be positive multiples "
                                         "of 32"):
        sf_det.make_static(build("retinanet"), (100, 128), G)

    from torchvision.models.detection.fcos import FCOSHead
    from torchvision.models.detection.retinanet import RetinaNetClassificationHead

    class FocalWeighted(RetinaNetClassificationHead):
        def compute_loss(self, targets, head_outputs, matched_idxs):
            return 2 * super().compute_loss(targets, head_outputs, matched_idxs)

    class CenterlessHead(FCOSHead):
        def compute_loss(self, targets, head_outputs, anchors, matched_idxs):
            losses = super().compute_loss(targets, head_outputs, anchors, matched_idxs)
            return dict(losses, bbox_ctrness=0 * losses["bbox_ctrness"])

    from torchvision.models.detection._utils import Matcher
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator

    class TopOneMatcher(Matcher):
        def __call__(self, match_quality_matrix):
            return super().__call__(match_quality_matrix).clamp(min=-1)

    class SparseBoxes(DefaultBoxGenerator):
        def _grid_default_boxes(self, grid_sizes, image_size, dtype=torch.float32):
            return super()._grid_default_boxes(grid_sizes, image_size, dtype)[::2]

    matched = build("retinanet")
    matched.proposal_matcher.__class__ = TopOneMatcher
    ssd_matched = build("ssd")
    ssd_matched.proposal_matcher = Matcher(0.5, 0.5)
    sparse = build("ssd")
    sparse.anchor_generator.__class__ = SparseBoxes
    for model, where in [(matched, "model.proposal_matcher (TopOneMatcher) does not use torchvision's "
                                   "Matcher.__call__"),
                         (ssd_matched, "model.proposal_matcher (Matcher) does not use torchvision's "
                                       "SSDMatcher.__call__"),
                         (sparse, "model.anchor_generator (SparseBoxes) does not use torchvision's "
                                  "DefaultBoxGenerator._grid_default_boxes")]:
        with pytest.raises(NotImplementedError) as info:
            sf_det.make_static(model, canvas_of("ssd" if model is not matched else "retinanet"), G)
        assert str(info.value).startswith(f"syncfree.detection.make_static: {where}"), str(info.value)
    unknown = build("retinanet")
    unknown.head.regression_head._loss_type = "iou"
    with pytest.raises(ValueError) as info:
        sf_det.make_static(unknown, SQUARE, G)
    assert str(info.value).startswith(
        "syncfree.detection.make_static: model.head.regression_head._loss_type must be one of l1, smooth_l1, "
        "giou, diou, ciou (torchvision's box losses), got 'iou'"), str(info.value)

    retinanet = build("retinanet")
    head = retinanet.head.classification_head
    retinanet.head.classification_head = FocalWeighted(8, head.num_anchors, head.num_classes)
    fcos = build("fcos")
    fcos.head.__class__ = CenterlessHead
    for model, where in [(retinanet, "model.head.classification_head (FocalWeighted)"),
                         (fcos, "model.head (CenterlessHead)")]:
        with pytest.raises(NotImplementedError) as info:
            sf_det.make_static(model, SQUARE, G)
        assert str(info.value).startswith(f"syncfree.detection.make_static: {where} does not use torchvision's"), \
            str(info.value)


def test_the_compat_module_re_exports_the_static_detector(tv):
    """syncfree.compat.torchvision keeps the names it had, and its make_static
    is the one that takes the one-stage models."""
    import syncfree.compat.torchvision as sf_tv

    for name in ("make_static", "pad_targets", "to_torchvision", "StaticRCNN"):
        assert getattr(sf_tv, name) is getattr(sf_det, name)
        assert name in sf_tv.__all__ and name in sf_det.__all__
    assert isinstance(sf_tv.make_static(build("fcos"), SQUARE, G), sf_det.StaticFCOS)
