"""syncfree.detection.transform: images of different sizes in one batch.
StaticCollate resizes like torchvision's transform and pads into a canvas; the
static model given ``image_sizes`` equals torchvision on batches whose images
differ in size and aspect ratio (losses with deterministic sampling,
detections); postprocess maps boxes, keypoints and masks to the original
sizes as torchvision does; the errors name the image."""
import copy

import pytest
import torch

import syncfree.detection as sf_det
from helpers.detection import (H, W, assert_detections_equal, assert_losses_equal, make_batch, resizing_model,
                               sized_batch, sized_training_losses, take_everything)

G = 6
# Sizes that torchvision's transform (min_size 128, max_size 256) keeps as
# they are (the scale is exactly 1), so that both sides see the same pixels:
# its padded batch is 160 x 224 (multiples of 32).
SIZES = [(128, 200), (160, 128), (128, 128)]
CANVAS = (160, 224)






def test_collate_resizes_and_pads_like_torchvisions_transform(tv):
    """The canvas holds torchvision's resized image (its own function, its eval
    rule) in the top-left corner and zeros elsewhere; boxes scaled, masks
    resized; image_sizes are the resized sizes, original_image_sizes the
    given ones."""
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    transform = GeneralizedRCNNTransform(128, 256, [0.0] * 3, [1.0] * 3).eval()
    items = sized_batch(0, [(64, 100), (300, 200), (128, 128)], [2, 1, 3], masks=True, keypoints=True)
    collate = sf_det.StaticCollate(canvas=(256, 256), max_boxes=G, min_size=128, max_size=256)
    batch = collate(items)
    assert batch["images"].shape == (3, 3, 256, 256)
    assert batch["image_sizes"].tolist() == [[128, 200], [192, 128], [128, 128]]
    assert batch["original_image_sizes"].tolist() == [[64, 100], [300, 200], [128, 128]]
    for i, (image, target) in enumerate(items):
        ref_image, ref_target = transform.resize(image, copy.deepcopy(target))
        h, w = ref_image.shape[-2:]
        assert torch.equal(batch["images"][i, :, :h, :w], ref_image)
        assert not batch["images"][i, :, h:].any() and not batch["images"][i, :, :, w:].any()
        n = target["boxes"].shape[0]
        assert torch.equal(batch["targets"]["boxes"][i, :n], ref_target["boxes"])
        assert torch.equal(batch["targets"]["keypoints"][i, :n], ref_target["keypoints"])
        assert not batch["targets"]["keypoints"][i, n:].any()
        assert torch.equal(batch["targets"]["labels"][i, :n], target["labels"])
        assert (batch["targets"]["labels"][i, n:] == -1).all()
        masks = batch["targets"]["masks"][i, :n]
        assert torch.equal(masks[:, :h, :w], ref_target["masks"])
        # One copy of the last row and column beyond the image, zeros further.
        assert torch.equal(masks[:, h, :w], ref_target["masks"][:, h - 1])
        assert torch.equal(masks[:, :h, w], ref_target["masks"][:, :, w - 1])
        assert not masks[:, h + 1:].any() and not masks[:, :, w + 1:].any()


def test_collate_from_model_reads_the_models_settings(tv):
    model = resizing_model("faster")
    collate = sf_det.StaticCollate.from_model(model, CANVAS, G)
    assert (collate.min_size, collate.max_size, collate.num_classes, collate.fixed_size) == (128, 256, 4, None)
    assert "canvas=(160, 224)" in repr(collate) and "fixed_size" not in repr(collate)


@pytest.mark.parametrize("kind", ["retinanet", "fcos", "ssd", "ssdlite"])
def test_collate_from_a_one_stage_model_reads_its_classes(tv, kind):
    """The one-stage models' number of classes (their classification
    head's): a label at or beyond it, which torchvision's losses fail on (an
    index out of range) and the static RetinaNet and FCOS would give no
    class target, is an error naming the image. Label 0 is a class of
    RetinaNet's and FCOS's sigmoid heads (a one-class model takes it), the
    background of SSD's softmax."""
    from helpers.detection import tiny_one_stage

    sigmoid = not kind.startswith("ssd")
    canvas = (128, 128) if sigmoid else (FIXED[1], FIXED[0])
    size = {} if sigmoid else {"size": FIXED}
    collate = sf_det.StaticCollate.from_model(tiny_one_stage(kind, num_classes=5, **size), canvas, G)
    assert (collate.num_classes, collate.background) == (5, not sigmoid)
    assert ("background=False" in repr(collate)) == sigmoid
    items = sized_batch(4, [(64, 64), (64, 64)], [1, 2])
    items[1][1]["labels"][1] = 5
    first = 0 if sigmoid else 1
    with pytest.raises(ValueError, match="^" + COLLATE + rf"image 1, box 1: label 5 is outside \[{first}, 5\)"):
        collate(items)
    items[1][1]["labels"][1] = 0
    if sigmoid:
        assert collate(items)["targets"]["labels"][1, 1] == 0
        one_class = sf_det.StaticCollate.from_model(tiny_one_stage(kind, num_classes=1), canvas, G)
        for _, target in items:
            target["labels"].zero_()
        assert (one_class(items)["targets"]["labels"] >= 0).sum() == 3
    else:
        with pytest.raises(ValueError, match="^" + COLLATE + r"image 1, box 1: label 0 is outside \[1, 5\) \(the "
                                             r"model's classes; 0 is the background\)"):
            collate(items)


# A fixed size that is not square, (width, height) as torchvision holds it,
# so that a swap of its sides shows.
FIXED = (96, 80)


def test_collate_with_a_fixed_size_resizes_like_torchvisions_transform(tv):
    """SSD300's and SSDlite's transform (fixed_size, size_divisible 1): every
    image, smaller or larger, wider or taller, is resized to the fixed size
    whatever min_size and max_size say; boxes, keypoints and masks as
    torchvision's transform resizes them."""
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    transform = GeneralizedRCNNTransform(min(FIXED), max(FIXED), [0.0] * 3, [1.0] * 3, size_divisible=1,
                                         fixed_size=FIXED).eval()
    sizes = [(64, 100), (300, 200), (80, 96)]
    items = sized_batch(0, sizes, [2, 1, 3], masks=True, keypoints=True)
    canvas = (FIXED[1], FIXED[0])
    collate = sf_det.StaticCollate(canvas=canvas, max_boxes=G, min_size=min(FIXED), max_size=max(FIXED),
                                   fixed_size=FIXED)
    batch = collate(items)
    assert batch["images"].shape == (3, 3) + canvas
    assert batch["image_sizes"].tolist() == [list(canvas)] * 3
    assert batch["original_image_sizes"].tolist() == [list(size) for size in sizes]
    for i, (image, target) in enumerate(items):
        ref_image, ref_target = transform.resize(image, copy.deepcopy(target))
        assert tuple(ref_image.shape[-2:]) == canvas
        assert torch.equal(batch["images"][i], ref_image)
        n = target["boxes"].shape[0]
        assert torch.equal(batch["targets"]["boxes"][i, :n], ref_target["boxes"])
        assert torch.equal(batch["targets"]["keypoints"][i, :n], ref_target["keypoints"])
        assert torch.equal(batch["targets"]["masks"][i, :n], ref_target["masks"])
        assert torch.equal(batch["targets"]["labels"][i, :n], target["labels"])
        assert (batch["targets"]["labels"][i, n:] == -1).all()
    # In a larger canvas: the same image in its top-left corner, zeros beyond.
    larger = sf_det.StaticCollate(canvas=(96, 128), max_boxes=G, fixed_size=FIXED)(items)
    assert torch.equal(larger["images"][:, :, :FIXED[1], :FIXED[0]], batch["images"])
    assert not larger["images"][:, :, FIXED[1]:].any() and not larger["images"][..., FIXED[0]:].any()
    assert larger["image_sizes"].tolist() == [list(canvas)] * 3


@pytest.mark.parametrize("kind", ["ssd", "ssdlite"])
def test_collate_from_an_ssd_model_equals_torchvision_on_images_of_different_sizes(tv, kind):
    """from_model reads SSD's fixed size; the static model's losses on the
    collated batch equal torchvision's on the images as they are (which its
    transform resizes to the fixed size: the pixels differ by the rounding of
    resizing before normalizing, torchvision normalizes first)."""
    from helpers.detection import tiny_one_stage

    model = tiny_one_stage(kind, size=FIXED)
    canvas = (FIXED[1], FIXED[0])
    collate = sf_det.StaticCollate.from_model(model, canvas, G)
    assert collate.fixed_size == FIXED and f"fixed_size={FIXED}" in repr(collate)
    items = sized_batch(3, [(64, 100), (160, 128)], [2, 3])
    batch = collate(items)
    assert batch["images"].shape == (2, 3) + canvas
    static = sf_det.make_static(model, canvas, G).train()
    ref, got, _, _ = sized_training_losses(model, static, items, batch)
    assert_losses_equal(ref, got)


@pytest.mark.parametrize("kind", ["faster", "mask", "keypoint"])
def test_training_losses_equal_torchvision_on_images_of_different_sizes(tv, kind):
    model = resizing_model(kind)
    items = sized_batch(1, SIZES, [3, 5, 0], masks=kind == "mask", keypoints=kind == "keypoint")
    batch = sf_det.StaticCollate.from_model(model, CANVAS, G)(items)
    static = sf_det.make_static(model, CANVAS, G).train()
    take_everything(model, batch["images"], G)
    ref, got, _, _ = sized_training_losses(model, static, items, batch)
    assert_losses_equal(ref, got)
    # The sizes matter: the same batch as if every image filled the canvas differs.
    full = static(batch["images"], batch["targets"])
    assert any(abs(full[k].item() - ref[k].item()) > 1e-4 * abs(ref[k].item()) for k in ref)


@pytest.mark.parametrize("kind", ["faster", "mask", "keypoint"])
def test_detections_equal_torchvision_on_images_of_different_sizes(tv, kind):
    model = resizing_model(kind).eval()
    items = sized_batch(2, SIZES, [0, 0, 0])
    batch = sf_det.StaticCollate.from_model(model, CANVAS, G)([image for image, _ in items])
    static = sf_det.make_static(model, CANVAS, G)
    with torch.no_grad():
        ref = model([image for image, _ in items])
        out = static(batch["images"], image_sizes=batch["image_sizes"])
    assert all(len(r["scores"]) > 0 for r in ref)  # the comparison compares something
    got = sf_det.to_torchvision(out)
    if kind == "mask":  # pasted into the canvas: each image's part of it, zeros beyond
        for g, (h, w) in zip(got, SIZES):
            assert not g["masks"][..., h:, :].any() and not g["masks"][..., :, w:].any()
            g["masks"] = g["masks"][..., :h, :w]
    assert_detections_equal(ref, got)
    for g, (h, w) in zip(got, SIZES):  # inside each image, not only inside the canvas
        assert (g["boxes"][:, 0::2] <= w).all() and (g["boxes"][:, 1::2] <= h).all()


@pytest.mark.parametrize("kind", ["faster", "mask", "keypoint"])
def test_detections_at_the_original_sizes_equal_torchvision(tv, kind):
    """Images that torchvision's transform resizes (up and down): the static
    model's detections, through postprocess, equal torchvision's model output
    at each image's original size (boxes, keypoints, masks pasted into the
    original image) up to the float rounding of resizing before normalizing
    (torchvision normalizes first). test_coco.py shows the COCO metrics of
    such images equal."""
    model = resizing_model(kind).eval()
    sizes = [(64, 100), (300, 200), (100, 90)]  # resized to 128 x 200, 192 x 128, 142 x 128
    canvas = (192, 224)  # torchvision's padded batch
    images = [image for image, _ in sized_batch(7, sizes, [0, 0, 0])]
    batch = sf_det.StaticCollate.from_model(model, canvas, G)(images)
    static = sf_det.make_static(model, canvas, G)
    with torch.no_grad():
        ref = model(images)
        out = static(batch["images"], image_sizes=batch["image_sizes"])
    assert all(len(r["scores"]) > 0 for r in ref)  # the comparison compares something
    mapped = sf_det.postprocess(out, batch["image_sizes"], batch["original_image_sizes"])
    if kind == "mask":
        assert "mask_probs" not in mapped and mapped["masks"].shape[-2:] == (300, 200)
    if kind == "mask":  # each image's original size, zeros beyond
        for masks, (h, w) in zip(mapped["masks"], sizes):
            assert not masks[..., h:, :].any() and not masks[..., :, w:].any()
    got = sf_det.to_torchvision(mapped, batch["original_image_sizes"])  # masks cropped to each image
    # The images were resized: up to float rounding (see assert_detections_equal).
    assert_detections_equal(ref, got, rounding=True)
    if kind == "mask":  # a fixed original canvas: the same masks in a larger frame
        framed = sf_det.postprocess(out, batch["image_sizes"], batch["original_image_sizes"], (320, 240))
        assert framed["masks"].shape[-2:] == (320, 240)
        assert torch.equal(framed["masks"][..., :300, :200], mapped["masks"])
        assert not framed["masks"][..., 300:, :].any() and not framed["masks"][..., 200:].any()


def test_postprocess_maps_boxes_to_the_original_sizes_as_torchvision(tv):
    from torchvision.models.detection.transform import resize_boxes

    gen = torch.Generator().manual_seed(3)
    boxes = torch.rand(2, 5, 4, generator=gen) * 100
    image_sizes = torch.tensor([[128, 200], [192, 128]])
    originals = torch.tensor([[64, 100], [300, 200]])
    out = {"boxes": boxes, "scores": torch.rand(2, 5, generator=gen), "valid": torch.ones(2, 5, dtype=torch.bool)}
    got = sf_det.postprocess(out, image_sizes, originals)
    for i in range(2):
        ref = resize_boxes(boxes[i], image_sizes[i].tolist(), originals[i].tolist())
        assert torch.equal(got["boxes"][i], ref)
    assert got["scores"] is out["scores"] and got["valid"] is out["valid"]
    for dtype in (torch.bfloat16, torch.float16):  # the ratio rounded to the boxes' dtype, as torchvision's
        low = sf_det.postprocess(dict(out, boxes=boxes.to(dtype)), image_sizes, originals)["boxes"]
        assert low.dtype == dtype
        for i in range(2):
            ref = resize_boxes(boxes[i].to(dtype), image_sizes[i].tolist(), originals[i].tolist())
            assert torch.equal(low[i], ref)
    post = "^syncfree.detection.postprocess: "
    with pytest.raises(ValueError, match=post + "output has masks but no mask_probs"):
        sf_det.postprocess(dict(out, masks=torch.zeros(2, 5, 1, 8, 8)), image_sizes, originals)
    with pytest.raises(ValueError, match=post + r"original_image_sizes must be a \[2, 2\] tensor"):
        sf_det.postprocess(out, image_sizes, originals[:1])
    with pytest.raises(ValueError, match=post + "original_canvas must be a pair of positive ints"):
        sf_det.postprocess(dict(out, mask_probs=torch.zeros(2, 5, 1, 8, 8)), image_sizes, originals, (64,))


def test_image_sizes_compile_to_one_graph_for_batches_of_any_sizes(tv, fresh_dynamo):
    """Other sizes in the same canvas: the same graph, no recompilation."""
    from torch._dynamo.testing import CompileCounter

    model = resizing_model("faster")
    static = sf_det.make_static(model, CANVAS, G).train()
    collate = sf_det.StaticCollate.from_model(model, CANVAS, G)
    counter = CompileCounter()
    step = torch.compile(static, backend=counter, fullgraph=True)
    for seed, sizes in enumerate([SIZES, [(128, 128), (128, 224), (160, 160)]]):
        batch = collate(sized_batch(seed, sizes, [2, 1, 3]))
        losses = step(batch["images"], batch["targets"], image_sizes=batch["image_sizes"])
        assert all(torch.isfinite(v) for v in losses.values())
    assert counter.frame_count == 1


COLLATE = "syncfree.detection.StaticCollate: "


def test_collate_takes_images_without_objects_and_passes_image_ids(tv):
    """A target with neither boxes nor labels (torchvision's COCO wrapper's
    target of an image without annotations) is an image without objects,
    with empty masks and keypoints where the others have them; image ids
    come back in order (for COCO results) and name the image in errors."""
    items = sized_batch(0, [(64, 100), (128, 128)], [2, 1], masks=True, keypoints=True)
    items[0][1]["image_id"] = 7
    items[1][1]["image_id"] = torch.tensor(8)
    items.insert(0, (torch.rand(3, 90, 90), {"image_id": 9}))
    collate = sf_det.StaticCollate(canvas=(256, 256), max_boxes=4, min_size=128, max_size=256, num_classes=4)
    batch = collate(items)
    assert batch["image_ids"] == [9, 7, 8]
    targets = batch["targets"]
    assert (targets["labels"][0] == -1).all() and not targets["boxes"][0].any()
    assert not targets["masks"][0].any() and not targets["keypoints"][0].any()
    assert (targets["labels"][1, :2] > 0).all() and (targets["labels"][1, 2:] == -1).all()
    assert "image_ids" not in collate([image for image, _ in items])  # no targets, no ids
    items[2][1]["labels"][0] = 9
    with pytest.raises(ValueError, match="^" + COLLATE + r"image 2 \(image_id 8\), box 0: label 9 is outside"):
        collate(items)
    with pytest.raises(ValueError, match="^" + COLLATE + r"image 0 \(image_id 3\)'s target must be a dict with "
                                         r"'boxes' and 'labels' .*got \['boxes', 'image_id'\]$"):
        collate([(torch.rand(3, 90, 90), {"image_id": 3, "boxes": torch.zeros(0, 4)})])


def test_collate_errors_name_the_image(tv):
    collate = sf_det.StaticCollate(canvas=CANVAS, max_boxes=2, min_size=128, max_size=256, num_classes=4)
    items = sized_batch(4, SIZES, [1, 1, 1])
    with pytest.raises(ValueError, match="^" + COLLATE + r"image 1 \(64x128\) is resized to 128x256, which "
                                         r"does not fit the canvas 160x224$"):
        collate([items[0], (torch.rand(3, 64, 128), None)])
    with pytest.raises(ValueError, match="^" + COLLATE + "image 2 has 3 boxes, more than max_boxes=2$"):
        collate(items[:2] + sized_batch(5, [(128, 128)], [3]))
    bad = copy.deepcopy(items)
    bad[1][1]["labels"][0] = 4
    with pytest.raises(ValueError, match="^" + COLLATE + r"image 1, box 0: label 4 is outside \[1, 4\)"):
        collate(bad)
    with pytest.raises(ValueError, match="^" + COLLATE + "image 0 must be a float"):
        collate([(torch.zeros(3, 128, 128, dtype=torch.uint8), None)])
    with pytest.raises(ValueError, match="^" + COLLATE + "image 1 must be a float"):
        collate([items[0], ("not an image", None)])
    with pytest.raises(ValueError, match="^" + COLLATE + "image 1's target must be a dict with 'boxes' and"):
        collate([items[0], (items[1][0], {"boxes": items[1][1]["boxes"]})])
    with pytest.raises(ValueError, match="^" + COLLATE + "canvas must be a pair"):
        sf_det.StaticCollate(canvas=(160,), max_boxes=2)
    mixed = sized_batch(6, SIZES[:2], [1, 1], masks=True)
    del mixed[1][1]["masks"]
    with pytest.raises(ValueError, match="^" + COLLATE + "image 1's target has no masks, image 0's has$"):
        collate(mixed)
    mixed = sized_batch(6, SIZES[:2], [1, 1], keypoints=True)
    del mixed[0][1]["keypoints"]
    with pytest.raises(ValueError, match="^" + COLLATE + "image 1's target has keypoints, image 0's has no"):
        collate(mixed)
    model = resizing_model("faster")
    model.transform._skip_resize = True
    with pytest.raises(ValueError, match="^" + COLLATE + r"the model's transform resizes nothing \(_skip_resize\)"):
        sf_det.StaticCollate.from_model(model, CANVAS, 2)
    model.transform._skip_resize = False
    model.transform.fixed_size = (240, 128)  # (width, height): 128x240, wider than the canvas
    with pytest.raises(ValueError, match="^" + COLLATE + r"fixed_size \(width, height\) = \(240, 128\) resizes "
                                         r"every image to 128x240, which does not fit the canvas 160x224$"):
        sf_det.StaticCollate.from_model(model, CANVAS, 2)
    for fixed in ((128,), (128, 0), [128.0, 128], 128):
        with pytest.raises(ValueError, match="^" + COLLATE + "fixed_size must be a pair of positive ints "
                                             r"\(width, height\)"):
            sf_det.StaticCollate(canvas=CANVAS, max_boxes=2, fixed_size=fixed)


MODEL = "syncfree.detection.StaticRCNN: "


def test_image_sizes_errors(tv):
    model = resizing_model("faster").eval()
    static = sf_det.make_static(model, CANVAS, G)
    images = torch.rand(2, 3, *CANVAS)
    with pytest.raises(ValueError, match="^" + MODEL + r"image_sizes must be a \[2, 2\] int64 tensor"):
        static(images, image_sizes=torch.tensor([[128, 128]]))
    with pytest.raises(ValueError, match="^" + MODEL + r"image_sizes must be a \[2, 2\] int64 tensor"):
        static(images, image_sizes=torch.tensor([[128.0, 128.0]] * 2))
    with pytest.raises(TypeError, match="^" + MODEL + "image_sizes must be"):
        static(images, image_sizes=[(128, 128)] * 2)


def test_pad_targets_and_to_torchvision(tv):
    _, targets = make_batch(5, [2, 0, 4], masks=True)
    padded = sf_det.pad_targets(targets, 4)
    assert padded["boxes"].shape == (3, 4, 4) and padded["labels"].dtype == torch.int64
    assert padded["masks"].shape == (3, 4, H, W) and padded["masks"].dtype == torch.uint8
    for i, t in enumerate(targets):
        n = len(t["labels"])
        assert torch.equal(padded["boxes"][i, :n], t["boxes"])
        assert torch.equal(padded["labels"][i, :n], t["labels"])
        assert torch.equal(padded["masks"][i, :n], t["masks"])
        assert (padded["labels"][i, n:] == -1).all() and not padded["boxes"][i, n:].any()
    without_masks = sf_det.pad_targets([{k: v for k, v in t.items() if k != "masks"} for t in targets], 5)
    assert set(without_masks) == {"boxes", "labels"}
    _, with_keypoints = make_batch(5, [2, 0, 4], keypoints=True)
    padded_kp = sf_det.pad_targets(with_keypoints, 4)["keypoints"]
    assert padded_kp.shape == (3, 4, 17, 3) and padded_kp.dtype == torch.float32
    for i, t in enumerate(with_keypoints):
        n = len(t["labels"])
        assert torch.equal(padded_kp[i, :n], t["keypoints"]) and not padded_kp[i, n:].any()
    # to_torchvision keeps the valid slots, in order.
    output = {"boxes": padded["boxes"], "labels": padded["labels"], "scores": padded["labels"].float(),
              "valid": padded["labels"] >= 0}
    back = sf_det.to_torchvision(output)
    for t, b in zip(targets, back):
        assert set(b) == {"boxes", "labels", "scores"}
        assert torch.equal(b["boxes"], t["boxes"]) and torch.equal(b["labels"], t["labels"])


PAD = "syncfree.detection.pad_targets: "


def _box(n):
    """n boxes with positive width and height."""
    return torch.tensor([[1.0, 2.0, 5.0, 6.0]]).repeat(n, 1)


@pytest.mark.parametrize("targets, max_boxes, error, message", [
    ([{"boxes": _box(3), "labels": torch.ones(3, dtype=torch.int64)}], 2, ValueError,
     "targets[0] has 3 boxes, more than max_boxes=2"),
    ([{"boxes": _box(1), "labels": torch.tensor([-1])}], 2, ValueError, "negative labels"),
    ([{"boxes": torch.zeros(1, 5), "labels": torch.tensor([1])}], 2, ValueError, "must be [G, 4]"),
    ([{"boxes": _box(2), "labels": torch.tensor([1])}], 2, ValueError, "must be [2] (one per box)"),
    ([{"boxes": _box(1)}], 2, ValueError, "with 'boxes' and 'labels'"),
    ([], 2, ValueError, "non-empty list"),
    ({"boxes": _box(1), "labels": torch.tensor([1])}, 2, ValueError, "non-empty list"),
    ([{"boxes": _box(1), "labels": torch.tensor([1])}], 0, ValueError, "max_boxes must be >= 1, got 0"),
    ([{"boxes": _box(1), "labels": torch.tensor([1])}], 2.0, TypeError, "max_boxes must be an int"),
    ([{"boxes": _box(1), "labels": torch.tensor([1]), "masks": torch.zeros(1, 8, 8)},
      {"boxes": _box(1), "labels": torch.tensor([1]), "masks": torch.zeros(1, 8, 9)}], 2, ValueError,
     "targets[1]['masks'] must be [1, 8, 8]"),
    ([{"boxes": _box(1), "labels": torch.tensor([1])},
      {"boxes": _box(1), "labels": torch.tensor([1]), "masks": torch.zeros(1, 8, 8)}], 2, ValueError,
     "targets[1] has 'masks' but targets[0] has none"),
    ([{"boxes": _box(1), "labels": torch.tensor([1]), "keypoints": torch.zeros(1, 17, 3)},
      {"boxes": _box(1), "labels": torch.tensor([1])}], 2, ValueError,
     "targets[0] has 'keypoints' but targets[1] has none"),
    ([{"boxes": _box(1), "labels": torch.tensor([1]), "keypoints": torch.zeros(1, 17, 3)},
      {"boxes": _box(2), "labels": torch.tensor([1, 1]), "keypoints": torch.zeros(2, 16, 3)}], 2,
     ValueError, "targets[1]['keypoints'] must be a float [2, 17, 3] tensor"),
    ([{"boxes": _box(1), "labels": torch.tensor([1]), "keypoints": torch.zeros(1, 17, 3)},
      {"boxes": _box(1), "labels": torch.tensor([1]), "keypoints": torch.zeros(1, 17, 3).long()}], 2,
     ValueError, "targets[1]['keypoints'] must be a float [1, 17, 3] tensor, got torch.int64"),
    ([{"boxes": _box(1), "labels": torch.tensor([1]), "keypoints": torch.zeros(1, 17, 2)}], 2,
     ValueError, "targets[0]['keypoints'] must be a float [G, K, 3] tensor"),
    # torchvision's degenerate-box check (its models raise an AssertionError for these)
    ([{"boxes": torch.tensor([[60.0, 20.0, 10.0, 90.0]]), "labels": torch.tensor([1])}], 2, ValueError,
     "targets[0]['boxes'][0] = [60.0, 20.0, 10.0, 90.0] is not a box with finite coordinates and positive width "
     "and height"),
    ([{"boxes": _box(1), "labels": torch.tensor([1])},
      {"boxes": torch.tensor([[1.0, 2.0, 5.0, 6.0], [30.0, 20.0, 30.0, 90.0]]), "labels": torch.tensor([1, 2])}],
     2, ValueError, "targets[1]['boxes'][1] = [30.0, 20.0, 30.0, 90.0] is not a box"),
    ([{"boxes": torch.tensor([[1.0, 2.0, 5.0, 2.0]]), "labels": torch.tensor([1])}], 2, ValueError,
     "targets[0]['boxes'][0] = [1.0, 2.0, 5.0, 2.0] is not a box"),
    ([{"boxes": torch.tensor([[1.0, float("nan"), 5.0, 6.0]]), "labels": torch.tensor([1])}], 2, ValueError,
     "targets[0]['boxes'][0] = [1.0, nan, 5.0, 6.0] is not a box with finite coordinates"),
    ([{"boxes": torch.tensor([[1.0, 2.0, float("inf"), 6.0]]), "labels": torch.tensor([1])}], 2, ValueError,
     "targets[0]['boxes'][0] = [1.0, 2.0, inf, 6.0] is not a box with finite coordinates"),
])
def test_pad_targets_errors(targets, max_boxes, error, message):
    with pytest.raises(error) as info:
        sf_det.pad_targets(targets, max_boxes)
    assert str(info.value).startswith(PAD) and message in str(info.value), str(info.value)
