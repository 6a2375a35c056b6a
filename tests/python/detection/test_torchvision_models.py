"""make_static on torchvision's own detection models (untrained): the static
step equals torchvision's on images of different sizes, compiles to one graph (forward,
loss, backward and an SGD update) that does not recompile when the number of
ground-truth boxes changes, and the eval model exports with torch.export.

Marked ``models``: whole detection models under torch.compile cost minutes on
a small CPU, so CI runs them on one torch leg (tests/legs.txt, tests ``all``)
and deselects them on the others (``-m "not models"``)."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import syncfree.detection as sf_det
from helpers.detection import (H, W, assert_detections_equal, assert_losses_equal, calibrate_batch_norm,
                               make_batch, named_model, sized_batch, sized_training_losses, take_everything)

pytestmark = [pytest.mark.models, pytest.mark.usefixtures("fresh_dynamo")]  # fresh_dynamo: tests/python/conftest.py

MODELS = ["fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "fasterrcnn_mobilenet_v3_large_fpn",
          "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"]
G = 6




@pytest.fixture(autouse=True)
def one_thread():
    # One thread per test: pytest-xdist runs two tests side by side (CI's 2
    # cores), and two threads each made these convolution-bound tests about
    # 10% slower in all.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Keypoint R-CNN's keypoint head (eight 512-channel convolutions per RoI)
# runs on every slot the static model has for it: the detections in eval,
# int(batch_size_per_image * positive_fraction) positives per image in
# training. Fewer of both keep its tests in seconds rather than minutes.
SETTINGS = {"keypointrcnn_resnet50_fpn": dict(box_detections_per_img=20, box_batch_size_per_image=64)}


def build(name, **kwargs):
    return named_model(name, **{**SETTINGS.get(name, {}), **kwargs})


# The RPN keeps 300 proposals per image in training (torchvision's default,
# 2000, is kept by the other tests): with deterministic sampling every
# proposal goes through the RoI heads, Mask R-CNN's mask head included, and
# 2000 of them made Mask R-CNN's test alone take 85 s on 2 cores.
LOSS_TEST_POST_NMS = 300
LOSS_TEST_POST_NMS_KEYPOINT = 100  # and so many keypoint slots (deterministic sampling takes them all)


# The equality tests: two images of different sizes and aspect ratios that
# torchvision's transform keeps as they are (shorter side 96, longer side at
# most 192), in its padded batch size as the canvas.
SIZES = [(96, 160), (128, 96)]
CANVAS = (128, 160)


def sized(model):
    model.transform.min_size = (96,)
    model.transform.max_size = 192
    return model


@pytest.mark.parametrize("name", MODELS)
def test_training_losses_equal_torchvision(name):
    post_nms = LOSS_TEST_POST_NMS_KEYPOINT if "keypoint" in name else LOSS_TEST_POST_NMS
    model = sized(build(name, rpn_post_nms_top_n_train=post_nms))
    static = sf_det.make_static(model, CANVAS, G)
    items = sized_batch(1, SIZES, [3, 5], masks="mask" in name, keypoints="keypoint" in name)
    batch = sf_det.StaticCollate.from_model(model, CANVAS, G)(items)
    take_everything(model, batch["images"], G)
    ref, got, ref_state, got_state = sized_training_losses(model, static, items, batch)
    assert_losses_equal(ref, got)
    for key in ref_state:  # batch norm's running statistics (v2: backbone, FPN and box head)
        torch.testing.assert_close(got_state[key], ref_state[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_detections_equal_torchvision(name):
    images = [image for image, _ in sized_batch(2, SIZES, [0, 0])]
    model = sized(build(name))
    batch = sf_det.StaticCollate.from_model(model, CANVAS, G)(images)
    model = calibrate_batch_norm(model, batch["images"]).eval()
    static = sf_det.make_static(model, CANVAS, G)
    with torch.no_grad():
        ref = model(images)
        out = static(batch["images"], image_sizes=batch["image_sizes"])
    for r in ref:  # something to compare, with few ties (which torchvision may break otherwise)
        assert 0 < len(r["scores"]) and r["scores"].unique().numel() > 0.9 * len(r["scores"])
    got = sf_det.to_torchvision(out)
    if "mask" in name:  # pasted into the canvas: each image's part of it
        for g, (h, w) in zip(got, SIZES):
            g["masks"] = g["masks"][..., :h, :w]
    assert_detections_equal(ref, got)


def sgd_step(static, lr):
    """Forward, loss, backward and an SGD update, written so that dynamo captures
    all of it: torch.optim's ``step`` breaks the graph on purpose (torch/optim's
    ``_use_grad`` calls ``torch._dynamo.graph_break()`` so that AOTAutograd sees a
    no-grad region), so the update is a foreach add, and gradients are reset to
    None (a ``.grad`` that is None on one call and a tensor on the next would
    recompile)."""

    def step(images, targets):
        losses = static(images, targets)
        loss = sum(losses.values())
        loss.backward()
        with torch.no_grad():
            params = [p for p in static.parameters() if p.grad is not None]
            torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)
        for p in params:
            p.grad = None
        return loss.detach(), {k: v.detach() for k, v in losses.items()}

    return step


def needs_autograd_tracing():
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip(f"torch {torch.__version__}: dynamo cannot trace Tensor.backward() (no trace_autograd_ops)")


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_training_step_is_one_graph_without_recompiling(name):
    """fullgraph=True: any graph break is an error. Backend "eager": dynamo's
    capture, which is where graph breaks and recompilations come from, run
    as captured; AOTAutograd's joint graph of the compiled static step is
    tested by test_ddp.py (aot_eager) and inductor's by
    bench/detection_bench.py (minutes per model on 2 cores)."""
    needs_autograd_tracing()
    model = build(name)
    static = sf_det.make_static(model, (H, W), G).train()
    counter = torch._dynamo.testing.CompileCounterWithBackend("eager")
    step = torch.compile(sgd_step(static, lr=1e-3), backend=counter, fullgraph=True)
    before = [p.detach().clone() for p in static.parameters()]
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        results = []
        for i, counts in enumerate([[3, 5], [6, 1], [0, 2]]):  # padding changes, shapes do not
            images, targets = make_batch(10 + i, counts, masks="mask" in name, keypoints="keypoint" in name)
            with torch._dynamo.config.patch(error_on_recompile=i > 0):
                results.append(step(images, sf_det.pad_targets(targets, G)))
    assert counter.frame_count == 1
    keys = {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
    for loss, losses in results:
        assert torch.isfinite(loss)
        extra = {"loss_mask"} if "mask" in name else {"loss_keypoint"} if "keypoint" in name else set()
        assert set(losses) == keys | extra
    changed = [not torch.equal(b, p) for b, p in zip(before, static.parameters()) if p.requires_grad]
    assert sum(changed) > 0.9 * len(changed)  # the update reached the parameters


@pytest.mark.parametrize("name", MODELS)
def test_eval_model_exports(name):
    model = build(name).eval()
    static = sf_det.make_static(model, (H, W), G).eval()
    images, _ = make_batch(3, [0, 0])
    program = torch.export.export(static, (images,))
    with torch.no_grad():
        eager = static(images)
        exported = program.module()(images)
    assert set(exported) == set(eager)
    for key in eager:
        torch.testing.assert_close(exported[key], eager[key], rtol=0, atol=0)
    assert eager["valid"].any()


@pytest.mark.slow
def test_explain_counts_no_graph_break_in_the_static_step():
    """torch._dynamo.explain of the training step (forward, loss, backward): none
    for the static model; torchvision's own step, measured the same way, has
    some (the measurement can see them)."""
    needs_autograd_tracing()
    name = "fasterrcnn_mobilenet_v3_large_fpn"
    model = build(name).train()
    static = sf_det.make_static(model, (H, W), G).train()
    images, targets = make_batch(4, [3, 2])
    padded = sf_det.pad_targets(targets, G)

    def static_step(images, targets):
        loss = sum(static(images, targets).values())
        loss.backward()
        return loss.detach()

    def torchvision_step(images, targets):
        loss = sum(model(images, targets).values())
        loss.backward()
        return loss.detach()

    with torch._dynamo.config.patch(trace_autograd_ops=True):
        ours = torch._dynamo.explain(static_step)(images, padded)
        torch._dynamo.reset()
        theirs = torch._dynamo.explain(torchvision_step)(list(images), targets)
    assert ours.graph_break_count == 0 and ours.graph_count == 1, [b.reason for b in ours.break_reasons]
    assert theirs.graph_break_count > 0


# The one-stage detectors: torchvision's builders, untrained. RetinaNet and
# FCOS take the equality tests' sizes and canvas; SSD300 and SSDlite resize
# every image to their fixed size (300 x 300, 320 x 320), which is their
# canvas.
ONE_STAGE = ["retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "fcos_resnet50_fpn", "ssd300_vgg16",
             "ssdlite320_mobilenet_v3_large"]
ONE_STAGE_LOSSES = {"retinanet": {"classification", "bbox_regression"},
                    "fcos": {"classification", "bbox_regression", "bbox_ctrness"},
                    "ssd": {"bbox_regression", "classification"}}


def build_one_stage(name, **kwargs):
    """``named_model`` for RetinaNet and FCOS, resizing as ``sized`` says;
    SSD's builders take no min_size or max_size (their transform resizes to
    the fixed size), so their transform is left as built."""
    if not name.startswith("ssd"):
        return sized(build(name, **kwargs))
    from helpers.checks import torchvision_or_skip

    torchvision_or_skip()
    from torchvision.models import detection

    torch.manual_seed(0)
    return getattr(detection, name)(weights=None, weights_backbone=None, num_classes=5, **kwargs)


def family(name):
    return next(f for f in ONE_STAGE_LOSSES if name.startswith(f))


def canvas_of(model, canvas):
    """SSD's fixed size (torchvision holds it as (width, height)), else ``canvas``."""
    fixed = model.transform.fixed_size
    return canvas if fixed is None else (int(fixed[1]), int(fixed[0]))


def one_stage_sizes(name):
    """The images of the equality tests. VGG16 at 300 x 300 costs about 1 s
    per image and forward on one core, and the test runs four: SSD300 takes
    one image (SSDlite, whose matching, losses and detection are SSD300's,
    takes both)."""
    return SIZES[:1] if name == "ssd300_vgg16" else SIZES


@pytest.mark.parametrize("name", ONE_STAGE)
def test_one_stage_model_equals_torchvision_and_exports(name):
    """One test per model (most of its time is building the model and its
    forwards, which the parts share): the training losses on images of
    different sizes through StaticCollate equal torchvision's, then the
    detections, then the eval model exported with torch.export gives the
    static model's output.

    Losses. RetinaNet and FCOS: sizes torchvision does not resize, its padded
    batch as the canvas (the same pixels on both sides). SSD: the images
    resized to the fixed size, torchvision normalizing first and the collate
    resizing first (the pixels differ by float rounding, the losses by less
    than the tolerance).

    Detections. RetinaNet and FCOS: an untrained head's classification bias
    makes every score about 0.01 (FCOS: 0.07, with the centerness), below
    score_thresh (0.05; FCOS: 0.2): the bias is zeroed, so that the scores
    spread around 0.5. SSD: unit mean and standard deviation, so that
    normalizing and resizing commute exactly and the detections compare
    exactly."""
    model = build_one_stage(name)
    canvas = canvas_of(model, CANVAS)
    collate = sf_det.StaticCollate.from_model(model, canvas, G)
    static = sf_det.make_static(model, canvas, G)
    sizes = one_stage_sizes(name)
    items = sized_batch(1, sizes, [3, 5][:len(sizes)])
    batch = collate(items)
    assert tuple(batch["images"].shape[-2:]) == canvas
    ref, got, ref_state, got_state = sized_training_losses(model, static, items, batch)
    assert set(ref) == ONE_STAGE_LOSSES[family(name)]
    assert_losses_equal(ref, got)
    for key in ref_state:  # batch norm's running statistics (SSDlite's head, every backbone but VGG's)
        torch.testing.assert_close(got_state[key], ref_state[key], rtol=1e-5, atol=1e-6)

    if family(name) == "ssd":
        model.transform.image_mean = [0.0, 0.0, 0.0]
        model.transform.image_std = [1.0, 1.0, 1.0]
    else:
        with torch.no_grad():
            model.head.classification_head.cls_logits.bias.zero_()
    images = [image for image, _ in sized_batch(2, sizes, [0, 0])]
    batch = collate(images)
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):  # not VGG16
        calibrate_batch_norm(model, batch["images"])
    static.eval()
    with torch.no_grad():
        ref = model(images)
        out = static(batch["images"], image_sizes=batch["image_sizes"])
    for r in ref:  # something to compare, with few ties (which torchvision may break otherwise)
        assert 0 < len(r["scores"]) and r["scores"].unique().numel() > 0.9 * len(r["scores"])
    # torchvision's boxes are at the original sizes: SSD resized the images.
    got = sf_det.to_torchvision(sf_det.postprocess(out, batch["image_sizes"], batch["original_image_sizes"]))
    assert_detections_equal(ref, got)

    program = torch.export.export(static, (batch["images"],), {"image_sizes": batch["image_sizes"]})
    with torch.no_grad():
        exported = program.module()(batch["images"], image_sizes=batch["image_sizes"])
    assert set(exported) == set(out) == {"boxes", "scores", "labels", "valid"}
    for key in out:
        torch.testing.assert_close(exported[key], out[key], rtol=0, atol=0)


# Whole models compiled: RetinaNet (its backbone, FPN and anchors are
# FCOS's) and SSDlite (its matching, losses and default boxes are SSD300's).
# The other three cost about a minute more on 2 cores; the small models of
# every family compile in test_one_stage.py.
ONE_STAGE_COMPILED = ["retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large"]


def canvas_batch(seed, counts, size):
    """``make_batch``'s images at ``size`` (SSD's fixed size; the boxes lie in
    the top-left H x W, inside any canvas) and targets."""
    images, targets = make_batch(seed, counts)
    if tuple(images.shape[-2:]) != tuple(size):
        images = torch.rand((len(counts), 3) + tuple(size), generator=torch.Generator().manual_seed(seed))
    return images, targets


@pytest.mark.slow
@pytest.mark.parametrize("name", ONE_STAGE_COMPILED)
def test_one_stage_training_step_is_one_graph_without_recompiling(name):
    """As test_training_step_is_one_graph_without_recompiling."""
    needs_autograd_tracing()
    model = build_one_stage(name)
    size = canvas_of(model, (H, W))
    static = sf_det.make_static(model, size, G).train()
    counter = torch._dynamo.testing.CompileCounterWithBackend("eager")
    step = torch.compile(sgd_step(static, lr=1e-3), backend=counter, fullgraph=True)
    before = [p.detach().clone() for p in static.parameters()]
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        results = []
        for i, counts in enumerate([[3, 5], [6, 1], [0, 2]]):  # padding changes, shapes do not
            images, targets = canvas_batch(10 + i, counts, size)
            with torch._dynamo.config.patch(error_on_recompile=i > 0):
                results.append(step(images, sf_det.pad_targets(targets, G)))
    assert counter.frame_count == 1
    for loss, losses in results:
        assert torch.isfinite(loss)
        assert set(losses) == ONE_STAGE_LOSSES[family(name)]
    changed = [not torch.equal(b, p) for b, p in zip(before, static.parameters()) if p.requires_grad]
    # The update reached the parameters. SSDlite: those of the levels where
    # these small boxes match no default box and hard negative mining picks
    # no negative, and of the extra layers that feed only them, get no
    # gradient (in torchvision's model too): 199 of its 266 change.
    assert sum(changed) > (0.7 if family(name) == "ssd" else 0.9) * len(changed)
