"""COCO metrics of the static model equal torchvision's: a COCO-format data set
written by the test (PNG files of several sizes and aspect ratios, an
annotation JSON with boxes, RLE masks and keypoints), read with
torchvision.datasets.CocoDetection, evaluated with pycocotools' COCOeval,
both models from the same weights: bbox for Faster R-CNN, bbox and segm for
Mask R-CNN, bbox and keypoints for Keypoint R-CNN; small detectors on every
torchvision leg, torchvision's whole models under the ``models`` marker.

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

from helpers.detection import calibrate_batch_norm, named_model, resizing_model

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


# torchvision's whole models (under the ``models`` marker: minutes on 2 cores)
WHOLE = {"faster": "fasterrcnn_resnet50_fpn", "mobilenet": "fasterrcnn_mobilenet_v3_large_fpn",
         "mask": "maskrcnn_resnet50_fpn", "keypoint": "keypointrcnn_resnet50_fpn"}


def detector(kind, whole=False):
    if whole:
        # 20 detections per image: the keypoint head's eight 512-channel
        # convolutions run on each. Batch norm calibrated on noise: an
        # untrained backbone's running statistics give every RoI the same
        # scores; a small perturbation of the box predictor then spreads
        # them without saturating them.
        model = named_model(WHOLE[kind], num_classes=4, box_detections_per_img=20)
        model.transform.min_size = (128,)
        model.transform.max_size = 256
        calibrate_batch_norm(model, torch.rand(4, 3, *CANVAS, generator=torch.Generator().manual_seed(3)))
    else:
        model = resizing_model(kind)
    model.eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.roi_heads.box_predictor.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * (0.01 if whole else 0.5))
    return model


def write_dataset(root, model, shift=3.0):
    """PNG images and an annotation file whose objects are the torchvision
    model's top three detections per image, each moved by up to ``shift`` pixels
    (boxes; masks as RLE, thresholded at 0.5; keypoints)."""
    from PIL import Image
    from pycocotools import mask as mask_utils

    gen = torch.Generator().manual_seed(11)
    images, annotations, tensors = [], [], []
    for i, (h, w) in enumerate(SIZES):
        pixels = torch.randint(0, 256, (h, w, 3), generator=gen, dtype=torch.uint8)
        name = f"{i:04d}.png"
        Image.fromarray(pixels.numpy()).save(root / name)
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w})
        tensors.append(pixels.permute(2, 0, 1).float() / 255)
    with torch.no_grad():  # one batch, as the test evaluates them (padding changes a model's features)
        detections = model(tensors)
    for i, ((h, w), det) in enumerate(zip(SIZES, detections)):
        for j in range(min(3, len(det["scores"]))):
            move = torch.rand(4, generator=gen) * 2 * shift - shift
            x0, y0, x1, y1 = (det["boxes"][j] + move).tolist()
            x0, y0, x1, y1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(w)), min(y1, float(h))
            if x1 - x0 < 2 or y1 - y0 < 2:  # degenerate (a box along the image's edge): no object
                continue
            annotation = {"id": len(annotations) + 1, "image_id": i + 1, "category_id": int(det["labels"][j]),
                          "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0), "iscrowd": 0,
                          "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]}
            if "masks" in det:
                mask = det["masks"][j, 0] > 0.5
                mask = torch.roll(mask, shifts=(int(move[1]), int(move[0])), dims=(0, 1))
                if mask.any():
                    rle = mask_utils.encode(mask.numpy().astype("uint8", order="F"))
                    rle["counts"] = rle["counts"].decode("ascii")
                    annotation["segmentation"] = rle
            if "keypoints" in det:
                xy = det["keypoints"][j, :, :2] + move[:2]
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


@pytest.mark.parametrize("kind, whole", [("faster", False), ("mask", False), ("keypoint", False)] + [
    pytest.param(kind, True, marks=pytest.mark.models, id=name) for kind, name in WHOLE.items()])
def test_coco_metrics_equal_torchvisions(pycocotools, tmp_path, kind, whole):
    from torchvision.datasets import CocoDetection
    from torchvision.transforms.functional import pil_to_tensor

    import syncfree.detection as sf_det

    model = detector(kind, whole)
    # The whole models' top boxes are small: moved by 1 pixel, not 3, they still match.
    annotations = write_dataset(tmp_path, model, shift=1.0 if whole else 3.0)
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
    # Distinct scores: COCOeval's ranking does not depend on the order of
    # ties. The whole untrained models give some equal scores: there the
    # equality below also says that both models order them alike.
    for r in ref:
        assert r["scores"].unique().numel() >= (0.7 if whole else 1.0) * r["scores"].numel()

    for metric in {"faster": ["bbox"], "mobilenet": ["bbox"], "mask": ["bbox", "segm"],
                   "keypoint": ["bbox", "keypoints"]}[kind]:
        ref_stats = evaluate(dataset.coco, coco_results(dataset, ref), metric)
        got_stats = evaluate(dataset.coco, coco_results(dataset, got), metric)
        assert len(ref_stats) == (10 if metric == "keypoints" else 12)
        assert got_stats == ref_stats, metric
        # The numbers mean something: some detections match, not all perfectly.
        assert 0 < ref_stats[0] < 1 and ref_stats[1] >= ref_stats[2], (metric, ref_stats)
