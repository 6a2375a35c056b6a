"""COCO metrics of the static model equal torchvision's: a COCO-format data set
written by the test (PNG files of several sizes and aspect ratios, an
annotation JSON with boxes, RLE masks and keypoints), read with
torchvision.datasets.CocoDetection, evaluated with pycocotools' COCOeval,
both models from the same weights: bbox for Faster R-CNN, bbox and segm for
Mask R-CNN, bbox and keypoints for Keypoint R-CNN.

The weights: the tiny detector's box predictor perturbed with a seeded
normal draw, so that detections have distinct scores (COCOeval ranks
detections by score: ties could be ranked in either order). The ground
truth: each image's top detections of torchvision's model, moved by a few
pixels (boxes, masks and keypoints alike), so that the 12 numbers are
neither all 0 nor all 1 (the test checks that they spread). Some images are
resized by the models (up and down), the others kept as they are."""
import json
import os

import pytest
import torch

from helpers.detection import resizing_model

# torchvision's transform (shorter side 128, longer at most 256) keeps the
# first three as they are and resizes the others (to 128 x 200 and 192 x 128).
SIZES = [(128, 200), (160, 128), (128, 176), (64, 100), (300, 200)]
CANVAS = (192, 224)
CATEGORIES = [1, 2, 3]
KEYPOINTS = 17


@pytest.fixture(scope="module")
def pycocotools(tv):
    if os.environ.get("SYNCFREE_EXPECT_TORCHVISION") == "1":  # a CI leg: requirements/dev.txt has it
        import pycocotools  # noqa: F401
    else:
        pytest.importorskip("pycocotools", reason="pycocotools evaluates COCO metrics (requirements/dev.txt)")


def detector(kind):
    model = resizing_model(kind).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.roi_heads.box_predictor.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def write_dataset(root, model):
    """PNG images and an annotation file whose objects are the torchvision
    model's top three detections per image, each moved by up to 3 pixels
    (boxes; masks as RLE, thresholded at 0.5; keypoints)."""
    from PIL import Image
    from pycocotools import mask as mask_utils

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
            shift = torch.rand(4, generator=gen) * 6 - 3
            x0, y0, x1, y1 = (det["boxes"][j] + shift).tolist()
            x0, y0, x1, y1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(w)), min(y1, float(h))
            annotation = {"id": len(annotations) + 1, "image_id": i + 1, "category_id": int(det["labels"][j]),
                          "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0), "iscrowd": 0,
                          "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]}
            if "masks" in det:
                mask = det["masks"][j, 0] > 0.5
                mask = torch.roll(mask, shifts=(int(shift[1]), int(shift[0])), dims=(0, 1))
                if mask.any():
                    rle = mask_utils.encode(mask.numpy().astype("uint8", order="F"))
                    rle["counts"] = rle["counts"].decode("ascii")
                    annotation["segmentation"] = rle
            if "keypoints" in det:
                xy = det["keypoints"][j, :, :2] + shift[:2]
                annotation["keypoints"] = torch.cat([xy, torch.full((KEYPOINTS, 1), 2.0)], 1).flatten().tolist()
                annotation["num_keypoints"] = KEYPOINTS
            annotations.append(annotation)
    categories = [{"id": c, "name": f"class{c}", "keypoints": [f"k{k}" for k in range(KEYPOINTS)],
                   "skeleton": []} for c in CATEGORIES]
    path = root / "annotations.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def coco_results(dataset, detections):
    from pycocotools import mask as mask_utils

    out = []
    for index, det in enumerate(detections):
        image_id = dataset.ids[index]
        for j, (box, score, label) in enumerate(zip(det["boxes"].tolist(), det["scores"].tolist(),
                                                    det["labels"].tolist())):
            result = {"image_id": image_id, "category_id": label, "score": score,
                      "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]}
            if "masks" in det:
                rle = mask_utils.encode((det["masks"][j, 0] > 0.5).numpy().astype("uint8", order="F"))
                rle["counts"] = rle["counts"].decode("ascii")
                result["segmentation"] = rle
            if "keypoints" in det:
                result["keypoints"] = det["keypoints"][j].flatten().tolist()
            out.append(result)
    return out


def evaluate(coco, results, kind):
    import contextlib
    import io

    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = COCOeval(coco, coco.loadRes(results), kind)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return [float(v) for v in evaluation.stats]


@pytest.mark.parametrize("kind", ["faster", "mask", "keypoint"])
def test_coco_metrics_equal_torchvisions(pycocotools, tmp_path, kind):
    from torchvision.datasets import CocoDetection
    from torchvision.transforms.functional import pil_to_tensor

    import syncfree.detection as sf_det

    model = detector(kind)
    annotations = write_dataset(tmp_path, model)
    dataset = CocoDetection(str(tmp_path), str(annotations))
    images = [pil_to_tensor(image).float() / 255 for image, _ in dataset]
    assert [tuple(im.shape[-2:]) for im in images] == SIZES

    with torch.no_grad():
        ref = model(images)
        static = sf_det.make_static(model, CANVAS, max_boxes=8).eval()
        batch = sf_det.StaticCollate.from_model(model, CANVAS, max_boxes=8)(images)
        assert batch["image_sizes"].tolist()[3:] == [[128, 200], [192, 128]]  # resized
        out = static(batch["images"], image_sizes=batch["image_sizes"])
        originals = batch["original_image_sizes"]
        got = sf_det.to_torchvision(sf_det.postprocess(out, batch["image_sizes"], originals), originals)
    for r in ref:  # distinct scores: COCOeval's ranking does not depend on the order of ties
        assert r["scores"].unique().numel() == r["scores"].numel()

    for metric in {"faster": ["bbox"], "mask": ["bbox", "segm"], "keypoint": ["bbox", "keypoints"]}[kind]:
        ref_stats = evaluate(dataset.coco, coco_results(dataset, ref), metric)
        got_stats = evaluate(dataset.coco, coco_results(dataset, got), metric)
        assert len(ref_stats) == (10 if metric == "keypoints" else 12)
        assert got_stats == ref_stats, metric
        # The numbers mean something: some detections match, not all perfectly.
        assert 0 < ref_stats[0] < 1 and ref_stats[1] >= ref_stats[2], (metric, ref_stats)
