"""COCO metrics of the static model equal torchvision's: a COCO-format data set
written by the test (PNG files of several sizes and aspect ratios, an
annotation JSON), read with torchvision.datasets.CocoDetection, evaluated with
pycocotools' COCOeval, both models from the same weights.

The weights: the tiny detector's box predictor perturbed with a seeded
normal draw, so that detections have distinct scores (COCOeval ranks
detections by score: ties could be ranked in either order). The ground
truth: each image's top detections of torchvision's model, moved by a few
pixels, so that the 12 numbers are neither all 0 nor all 1 (the test checks
that they spread)."""
import json
import os

import pytest
import torch

from helpers.detection import resizing_model

# Sizes torchvision's transform (shorter side 128, longer at most 256) keeps as
# they are: both models see the same pixels. Its padded batch: 160 x 224.
SIZES = [(128, 200), (160, 128), (128, 128), (128, 176)]
CANVAS = (160, 224)
CATEGORIES = [1, 2, 3]


@pytest.fixture(scope="module")
def pycocotools(tv):
    if os.environ.get("SYNCFREE_EXPECT_TORCHVISION") == "1":  # a CI leg: requirements/dev.txt has it
        import pycocotools  # noqa: F401
    else:
        pytest.importorskip("pycocotools", reason="pycocotools evaluates COCO metrics (requirements/dev.txt)")


def detector():
    model = resizing_model("faster").eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.roi_heads.box_predictor.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def write_dataset(root, model):
    """PNG images and an annotation file whose boxes are the torchvision model's
    top three detections per image, each moved by up to 3 pixels."""
    from PIL import Image

    gen = torch.Generator().manual_seed(11)
    images, annotations = [], []
    for i, (h, w) in enumerate(SIZES):
        pixels = torch.randint(0, 256, (h, w, 3), generator=gen, dtype=torch.uint8)
        name = f"{i:04d}.png"
        Image.fromarray(pixels.numpy()).save(root / name)
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w})
        with torch.no_grad():
            det = model([pixels.permute(2, 0, 1).float() / 255])[0]
        for j in range(min(3, len(det["scores"]))):
            x0, y0, x1, y1 = (det["boxes"][j] + (torch.rand(4, generator=gen) * 6 - 3)).tolist()
            x0, y0, x1, y1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(w)), min(y1, float(h))
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": int(det["labels"][j]), "bbox": [x0, y0, x1 - x0, y1 - y0],
                                "area": (x1 - x0) * (y1 - y0), "iscrowd": 0,
                                "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]})
    categories = [{"id": c, "name": f"class{c}"} for c in CATEGORIES]
    path = root / "annotations.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def coco_results(dataset, detections):
    out = []
    for index, det in enumerate(detections):
        image_id = dataset.ids[index]
        for box, score, label in zip(det["boxes"].tolist(), det["scores"].tolist(), det["labels"].tolist()):
            out.append({"image_id": image_id, "category_id": label, "score": score,
                        "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]})
    return out


def evaluate(coco, results):
    import contextlib
    import io

    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = COCOeval(coco, coco.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return [float(v) for v in evaluation.stats]


def test_coco_bbox_metrics_equal_torchvisions(pycocotools, tmp_path):
    from torchvision.datasets import CocoDetection
    from torchvision.transforms.functional import pil_to_tensor

    import syncfree.detection as sf_det

    model = detector()
    annotations = write_dataset(tmp_path, model)
    dataset = CocoDetection(str(tmp_path), str(annotations))
    images = [pil_to_tensor(image).float() / 255 for image, _ in dataset]
    assert [tuple(im.shape[-2:]) for im in images] == SIZES

    with torch.no_grad():
        ref = model(images)
        static = sf_det.make_static(model, CANVAS, max_boxes=8).eval()
        batch = sf_det.StaticCollate.from_model(model, CANVAS, max_boxes=8)(images)
        out = static(batch["images"], image_sizes=batch["image_sizes"])
        got = sf_det.to_torchvision(sf_det.postprocess(out, batch["image_sizes"], batch["original_image_sizes"]))
    for r in ref:  # distinct scores: COCOeval's ranking does not depend on the order of ties
        assert r["scores"].unique().numel() == r["scores"].numel()

    ref_stats = evaluate(dataset.coco, coco_results(dataset, ref))
    got_stats = evaluate(dataset.coco, coco_results(dataset, got))
    assert len(ref_stats) == 12
    assert got_stats == ref_stats
    # The numbers mean something: some detections match, not all perfectly.
    assert 0 < ref_stats[0] < 1 and ref_stats[1] > ref_stats[2]
