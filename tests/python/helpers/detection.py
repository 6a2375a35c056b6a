"""Models, data and comparisons shared by the detection tests: ``make_static``
(tests/python/detection) and the drop-in samplers (tests/python/compat)."""
import copy
from collections import OrderedDict

import torch
import torch.nn.functional as F
from helpers.checks import torchvision_or_skip
from torch import nn

H = W = 128


class TwoLevelBackbone(nn.Module):
    """Two feature maps (strides 4 and 8): multi-level anchors and RoI pooling at a
    fraction of a real backbone's cost."""

    def __init__(self, channels=8):
        super().__init__()
        self.c1 = nn.Conv2d(3, channels, 3, stride=4, padding=1)
        self.c2 = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.out_channels = channels

    def forward(self, x):
        a = F.relu(self.c1(x))
        return OrderedDict([("0", a), ("1", F.relu(self.c2(a)))])


def tiny_model(kind="faster", batch_norm_head=False, num_classes=4):
    """A torchvision FasterRCNN / MaskRCNN / KeypointRCNN with torchvision's RPN and
    RoI heads on a two-level backbone. The poolers' canonical scale is small so that
    RoIs of the test sizes spread over both levels."""
    torchvision_or_skip()
    from torchvision.models.detection import FasterRCNN, KeypointRCNN, MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNConvFCHead, FastRCNNPredictor
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    torch.manual_seed(0)
    c = 8
    pool = MultiScaleRoIAlign(["0", "1"], 7, 2, canonical_scale=32, canonical_level=3)
    common = dict(
        rpn_anchor_generator=AnchorGenerator(sizes=((16, 32), (32, 64)), aspect_ratios=((0.5, 1.0, 2.0),) * 2),
        box_roi_pool=pool, min_size=H, max_size=W,
        rpn_pre_nms_top_n_train=300, rpn_post_nms_top_n_train=200,
        rpn_pre_nms_top_n_test=150, rpn_post_nms_top_n_test=100,
        box_detections_per_img=30)
    norm = nn.BatchNorm2d if batch_norm_head else None
    common["box_head"] = FastRCNNConvFCHead((c, 7, 7), [c], [32], norm_layer=norm)
    common["box_predictor"] = FastRCNNPredictor(32, num_classes)
    backbone = TwoLevelBackbone(c)
    if kind == "faster":
        return FasterRCNN(backbone, **common)
    if kind == "mask":
        return MaskRCNN(backbone,
                        mask_roi_pool=MultiScaleRoIAlign(["0", "1"], 14, 2, canonical_scale=32, canonical_level=3),
                        mask_head=MaskRCNNHeads(c, [c], 1), mask_predictor=MaskRCNNPredictor(c, c, num_classes),
                        **common)
    if kind == "keypoint":
        from torchvision.models.detection.keypoint_rcnn import KeypointRCNNHeads, KeypointRCNNPredictor

        model = KeypointRCNN(backbone, keypoint_roi_pool=MultiScaleRoIAlign(["0", "1"], 14, 2),
                             keypoint_head=KeypointRCNNHeads(c, [c, c]),
                             keypoint_predictor=KeypointRCNNPredictor(c, 17), **common)
        # Heatmap logits far from uniform: the keypoint loss then depends on
        # which cell each target is in (an untrained head's barely does).
        with torch.no_grad():
            model.roi_heads.keypoint_predictor.kps_score_lowres.weight.mul_(50)
        return model
    raise ValueError(kind)


def resizing_model(kind="faster"):
    """``tiny_model(kind)`` whose transform resizes as torchvision's does on real
    data: the shorter side to 128, the longer to at most 256."""
    model = tiny_model(kind)
    model.transform.min_size = (128,)
    model.transform.max_size = 256
    return model


def named_model(name, num_classes=5, **kwargs):
    """One of torchvision's detection builders, untrained, resizing nothing at ``H x W``;
    ``kwargs`` go to the builder (the model's constructor)."""
    torchvision_or_skip()
    from torchvision.models import detection

    torch.manual_seed(0)
    model = getattr(detection, name)(weights=None, weights_backbone=None, num_classes=num_classes, **kwargs)
    model.transform.min_size = (H,)
    model.transform.max_size = W
    return model


def calibrate_batch_norm(model, images):
    """Running statistics of the backbone's batch norm from ``images`` (an untrained
    model's are 0 and 1, which leaves its features so small that every RoI gets the
    same class scores: ties everywhere)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average
    training = model.training
    model.train()
    with torch.no_grad():
        model.backbone(model.transform.normalize(images))
    model.train(training)
    return model


def make_batch(seed, counts, masks=False, num_classes=4, keypoints=False):
    """Images ``[B, 3, H, W]`` and torchvision-style targets with ``counts[i]`` boxes
    (and masks, and 17 keypoints per box, when asked)."""
    gen = torch.Generator().manual_seed(seed)
    kp_gen = torch.Generator().manual_seed(seed + 1000)  # the other data as without keypoints
    images = torch.rand(len(counts), 3, H, W, generator=gen)
    targets = []
    for n in counts:
        xy = torch.rand(n, 2, generator=gen) * (W - 48)
        wh = torch.rand(n, 2, generator=gen) * 36 + 8
        boxes = torch.cat([xy, xy + wh], 1)
        t = {"boxes": boxes, "labels": torch.randint(1, num_classes, (n,), generator=gen)}
        if masks:
            t["masks"] = box_masks(boxes, H, W)
        if keypoints:
            t["keypoints"] = box_keypoints(boxes, kp_gen)
        targets.append(t)
    return images, targets


def box_keypoints(boxes, gen, k=17):
    """``[G, k, 3]`` keypoints of the boxes: inside each box, a few on its
    right or bottom edge (a special case of torchvision's heatmap targets),
    about a third invisible."""
    n = boxes.shape[0]
    u = torch.rand(n, k, 2, generator=gen)
    u[:, 0, 0] = 1.0  # on the right edge
    u[:, 1, 1] = 1.0  # on the bottom edge
    xy = boxes[:, None, :2] + u * (boxes[:, None, 2:] - boxes[:, None, :2])
    visible = (torch.rand(n, k, 1, generator=gen) > 0.3).to(xy.dtype)
    return torch.cat([xy, visible], dim=-1)


def sized_batch(seed, sizes, counts, masks=False, num_classes=4, keypoints=False):
    """(image, target) pairs of the given sizes, boxes inside each image; an
    image's last box (of two or more) ends at its bottom-right corner, so
    that RoIs reach the edge where the canvas pads the masks."""
    gen = torch.Generator().manual_seed(seed)
    kp_gen = torch.Generator().manual_seed(seed + 1000)  # the other data as without keypoints
    items = []
    for (h, w), n in zip(sizes, counts):
        image = torch.rand(3, h, w, generator=gen)
        xy = torch.rand(n, 2, generator=gen) * torch.tensor([w - 48.0, h - 48.0])
        wh = torch.rand(n, 2, generator=gen) * 36 + 8
        boxes = torch.cat([xy, xy + wh], 1)
        if n >= 2:
            boxes[-1] = torch.tensor([w - 40.0, h - 30.0, float(w), float(h)])
        target = {"boxes": boxes, "labels": torch.randint(1, num_classes, (n,), generator=gen)}
        if masks:
            target["masks"] = box_masks(boxes, h, w)
        if keypoints:
            target["keypoints"] = box_keypoints(boxes, kp_gen)
        items.append((image, target))
    return items


def box_masks(boxes, height, width):
    """``[G, height, width]`` uint8 masks: each box's rounded rectangle."""
    m = torch.zeros(boxes.shape[0], height, width, dtype=torch.uint8)
    for i, b in enumerate(boxes.round().long().tolist()):
        m[i, b[1]:b[3], b[0]:b[2]] = 1
    return m


def detection_batch(seed=1, images=2):
    """A list of ``images`` random images (3 x H x W) and their targets: the same
    two boxes, of classes 1 and 2, in each."""
    gen = torch.Generator().manual_seed(seed)
    batch = [torch.rand(3, H, W, generator=gen) for _ in range(images)]
    targets = [dict(boxes=torch.tensor([[10.0, 20.0, 60.0, 90.0], [50.0, 40.0, 120.0, 110.0]]),
                    labels=torch.tensor([1, 2])) for _ in range(images)]
    return batch, targets


def take_everything(model, images, max_boxes):
    """Sampler settings that make both samplers take every labelled item (so that
    sampling is deterministic): a batch as large as the anchors (RPN) and as the
    proposals plus ground truth (RoI heads), a positive fraction of 1."""
    state = copy.deepcopy(model.state_dict())
    training = model.training
    model.eval()
    with torch.no_grad():
        features = model.backbone(model.transform.normalize(images))
        objectness, _ = model.rpn.head(list(features.values()))
    model.train(training)
    model.load_state_dict(state)
    anchors = sum(o.shape[1] * o.shape[2] * o.shape[3] for o in objectness)
    model.rpn.fg_bg_sampler.batch_size_per_image = anchors
    model.rpn.fg_bg_sampler.positive_fraction = 1.0
    model.roi_heads.fg_bg_sampler.batch_size_per_image = model.rpn._post_nms_top_n["training"] + max_boxes
    model.roi_heads.fg_bg_sampler.positive_fraction = 1.0


def training_losses(model, static, images, targets, max_boxes):
    """torchvision's losses, then the static model's, from the same weights and
    buffers; also the buffers after each (batch norm's running statistics)."""
    from syncfree.detection import pad_targets

    return _both_steps(model, lambda: model(list(images), copy.deepcopy(targets)),
                       lambda: static(images, pad_targets(targets, max_boxes)))


def sized_training_losses(model, static, items, batch):
    """``training_losses`` for images of different sizes: torchvision's step on
    the (image, target) pairs ``items``, the static one on their collated
    ``batch`` (StaticCollate) with its image sizes."""
    return _both_steps(model, lambda: model([image for image, _ in items],
                                            copy.deepcopy([target for _, target in items])),
                       lambda: static(batch["images"], batch["targets"], image_sizes=batch["image_sizes"]))


def _both_steps(model, torchvision_step, static_step):
    """``(ref, got, ref_state, got_state)``: each step in training mode from
    the model's state as it was, with the state it leaves; the state restored."""
    model.train()
    state = copy.deepcopy(model.state_dict())
    ref = torchvision_step()
    ref_state = copy.deepcopy(model.state_dict())
    model.load_state_dict(state)
    got = static_step()
    got_state = copy.deepcopy(model.state_dict())
    model.load_state_dict(state)
    return ref, got, ref_state, got_state


def assert_losses_equal(ref, got, rtol=1e-5):
    assert set(ref) == set(got)
    for key in ref:
        r, g = ref[key].item(), got[key].item()
        assert abs(r - g) <= rtol * abs(r) + 1e-7, (key, r, g)


def _canonical(det):
    """Detections sorted by score (descending), ties by label then coordinates: the
    order torchvision's unstable final sort may permute among equal scores."""
    keys = [det["boxes"][:, 3], det["boxes"][:, 2], det["boxes"][:, 1], det["boxes"][:, 0],
            det["labels"].to(torch.float64), -det["scores"].to(torch.float64)]
    order = torch.arange(det["scores"].shape[0])
    for key in keys:  # least significant first, stable sorts
        order = order[torch.sort(key[order], stable=True).indices]
    return {k: v[order] for k, v in det.items()}


def assert_detections_equal(ref, got, mask_atol=1e-5, rounding=False):
    """Per image: the same boxes, scores and labels (exactly), in torchvision's
    order up to permutations among equal scores; masks within ``mask_atol``.

    ``rounding=True``, for images that were resized: the static pipeline
    resizes an image before normalizing it, torchvision after, so pixels
    differ by float rounding. Then the same labels in the same order, boxes,
    scores and keypoints within a tolerance a thousand times that rounding
    and far below a pixel (1e-4 relative; keypoints 1e-3 pixels)."""
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r["scores"].shape == g["scores"].shape, (r["scores"].shape, g["scores"].shape)
        if rounding:
            assert torch.equal(r["labels"], g["labels"])  # the same ranking
            for key in ("boxes", "scores"):
                torch.testing.assert_close(g[key], r[key], rtol=1e-4, atol=1e-4)
        else:
            assert torch.equal(r["scores"], g["scores"])  # the same ranking
            r, g = _canonical(r), _canonical(g)
            for key in ("boxes", "scores", "labels"):
                assert torch.equal(r[key], g[key]), key
        if "masks" in r:
            assert r["masks"].shape == g["masks"].shape
            if r["masks"].numel():
                torch.testing.assert_close(g["masks"], r["masks"], atol=mask_atol, rtol=0)
        if "keypoints" in r:
            # The same heatmap cells; their scores up to the rounding of
            # PyTorch's bicubic kernel (heatmaps_to_keypoints).
            if rounding:
                torch.testing.assert_close(g["keypoints"], r["keypoints"], atol=1e-3, rtol=0)
            else:
                assert torch.equal(g["keypoints"], r["keypoints"])
            torch.testing.assert_close(g["keypoints_scores"], r["keypoints_scores"], atol=1e-5, rtol=1e-5)


def tiny_one_stage(kind, num_classes=4, loss_type=None, size=(W, H), **kwargs):
    """A torchvision RetinaNet, FCOS or SSD (``kind``: "retinanet", "fcos",
    "ssd", "ssdlite": SSD with torchvision's SSDlite head) on the two-level
    backbone, small enough for every test run. RetinaNet: 8 channels, six
    anchors per location over two levels, its box loss ``loss_type`` (the
    head's ``_loss_type``; None: torchvision's default, "l1"). FCOS: 32
    channels (its GroupNorm has 32 groups), one convolution per branch,
    anchor sizes the levels' strides. SSD: two levels of default boxes, its
    fixed ``size`` (width, height). ``kwargs`` go to the model's constructor
    (``score_thresh``, ``topk_candidates``...)."""
    torchvision_or_skip()
    from functools import partial

    from torchvision.models.detection import FCOS, RetinaNet
    from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator
    from torchvision.models.detection.fcos import FCOSHead
    from torchvision.models.detection.retinanet import RetinaNetHead
    from torchvision.models.detection.ssd import SSD, SSDHead
    from torchvision.models.detection.ssdlite import SSDLiteHead

    torch.manual_seed(0)
    if kind == "retinanet":
        generator = AnchorGenerator(sizes=((16, 32), (32, 64)), aspect_ratios=((0.5, 1.0, 2.0),) * 2)
        head = RetinaNetHead(8, generator.num_anchors_per_location()[0], num_classes)
        if loss_type is not None:
            head.regression_head._loss_type = loss_type
        return RetinaNet(TwoLevelBackbone(8), num_classes, min_size=H, max_size=W, anchor_generator=generator,
                         head=head, **kwargs)
    if kind == "fcos":
        generator = AnchorGenerator(sizes=((4,), (8,)), aspect_ratios=((1.0,),) * 2)
        head = FCOSHead(32, 1, num_classes, num_convs=1)
        return FCOS(TwoLevelBackbone(32), num_classes, min_size=H, max_size=W, anchor_generator=generator,
                    head=head, **kwargs)
    if kind in ("ssd", "ssdlite"):
        backbone = TwoLevelBackbone(8)
        backbone.out_channels = [8, 8]
        generator = DefaultBoxGenerator([[2], [2, 3]])
        anchors = generator.num_anchors_per_location()
        if kind == "ssd":
            head = SSDHead([8, 8], anchors, num_classes)
        else:
            head = SSDLiteHead([8, 8], anchors, num_classes, partial(nn.BatchNorm2d, eps=0.001, momentum=0.03))
        return SSD(backbone, generator, tuple(size), num_classes, head=head, **kwargs)
    raise ValueError(kind)


def varied_heads(model, seed=1):
    """The model's head re-initialized with convolution weights of unit gain
    (``std = 1 / sqrt(fan_in)``) and zero biases: torchvision's initialization
    (std 0.01 and, for the logits, a bias at the prior probability) leaves
    every score near the prior, ties among the detections and losses that
    hardly depend on which ground-truth box an anchor is matched to."""
    import math

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.head.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) / math.sqrt(m.weight[0].numel()))
                if m.bias is not None:
                    m.bias.zero_()
    return model
