"""make_static on small torchvision detectors: the static step equals torchvision's
(losses with deterministic sampling, detections), samples by torchvision's quota
rule otherwise; the model object (shared modules, modes) and its errors. The
parts are tested beside their modules (test_boxes.py, test_matching.py,
test_roi_heads.py, test_transform.py); the four named torchvision models,
compiled and exported, in test_torchvision_models.py."""
import copy
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import syncfree.detection as sf_det
from helpers.detection import (H, W, assert_detections_equal, assert_losses_equal, make_batch, take_everything,
                               tiny_model, training_losses)

G = 6






# ---- the whole step against torchvision


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "autocast-bfloat16"])
@pytest.mark.parametrize("kind, batch_norm_head", [("faster", False), ("faster", True), ("mask", False),
                                                   ("keypoint", False)])
def test_training_losses_equal_torchvision_with_deterministic_sampling(tv, kind, batch_norm_head, autocast):
    model = tiny_model(kind, batch_norm_head)
    static = sf_det.make_static(model, (H, W), G)
    images, targets = make_batch(1, [3, 5, 0], masks=kind == "mask", keypoints=kind == "keypoint")
    take_everything(model, images, G)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ref, got, ref_state, got_state = training_losses(model, static, images, targets, G)
    assert_losses_equal(ref, got)
    # Batch norm in the box head: the running statistics of the valid RoIs only.
    for key in ref_state:
        torch.testing.assert_close(got_state[key], ref_state[key], rtol=1e-5, atol=1e-6)


def test_padding_is_ignored(tv):
    """The same ground truth padded to 6 or to 11 boxes gives the same losses."""
    model = tiny_model("mask")
    images, targets = make_batch(2, [4, 2], masks=True)
    take_everything(model, images, 11)  # the RoI batch takes every proposal for both paddings
    losses = []
    for g in (6, 11):
        static = sf_det.make_static(model, (H, W), g).train()
        losses.append(static(images, sf_det.pad_targets(targets, g)))
    assert_losses_equal(losses[0], losses[1])


@pytest.mark.parametrize("kind", ["faster", "mask", "keypoint"])
def test_detections_equal_torchvision(tv, kind):
    model = tiny_model(kind).eval()
    static = sf_det.make_static(model, (H, W), G)
    images, _ = make_batch(3, [0, 0, 0])
    with torch.no_grad():
        ref = model(list(images))
        out = static(images)
    assert out["boxes"].shape == (3, 30, 4) and out["valid"].shape == (3, 30)
    assert all(len(r["scores"]) > 0 for r in ref)  # the comparison compares something
    assert_detections_equal(ref, sf_det.to_torchvision(out))
    # Invalid slots are zeros; valid ones come first, by score.
    valid = out["valid"]
    assert torch.equal(valid, valid.sort(dim=1, descending=True, stable=True).values)
    assert not out["scores"][~valid].any() and not out["boxes"][~valid].any()
    for key in ("masks", "mask_probs", "keypoints", "keypoints_scores"):
        if key in out:
            assert not out[key][~valid].any(), key


def test_normal_sampling_obeys_the_quotas(tv, monkeypatch):
    """With torchvision's default batch sizes the samplers choose subsets: every call
    takes min(P, int(batch * fraction)) positives and min(Q, batch - that)
    negatives, distinct, labelled; padded ground truth is never a candidate."""
    from syncfree.detection import matching

    calls = []
    original = matching.sample

    def recording(codes, sampler):
        index, valid = original(codes, sampler)
        calls.append((codes, int(sampler.batch_size_per_image), float(sampler.positive_fraction), index, valid))
        return index, valid

    monkeypatch.setattr(matching, "sample", recording)
    model = tiny_model("mask")
    model.rpn.fg_bg_sampler.batch_size_per_image = 64
    model.roi_heads.fg_bg_sampler.batch_size_per_image = 32
    static = sf_det.make_static(model, (H, W), G).train()
    images, targets = make_batch(4, [5, 1, 0], masks=True)
    padded = sf_det.pad_targets(targets, G)
    losses = static(images, padded)
    assert all(torch.isfinite(v) for v in losses.values())
    assert len(calls) == 2  # the RPN, then the RoI heads
    chose = []
    for codes, batch, fraction, index, valid in calls:
        for row in range(codes.shape[0]):
            p = int((codes[row] == 1).sum())
            q = int((codes[row] == 0).sum())
            num_pos = min(p, int(batch * fraction))
            num_neg = min(q, batch - num_pos)
            chosen = index[row][valid[row]]
            assert chosen.numel() == num_pos + num_neg
            assert chosen.unique().numel() == chosen.numel()
            assert int((codes[row][chosen] == 1).sum()) == num_pos
            assert int((codes[row][chosen] == 0).sum()) == num_neg
            chose.append(num_pos < p or num_neg < q)
    assert all(chose[:3]) and any(chose[3:])  # both samplers did choose subsets
    roi_codes = calls[1][0]
    gt_columns = roi_codes[:, -G:]  # the ground truth appended to the proposals
    assert torch.equal(gt_columns == -1, padded["labels"] < 0)


def test_the_compat_module_re_exports_the_static_detector(tv):
    """syncfree.compat.torchvision keeps the names it had before syncfree.detection."""
    import syncfree.compat.torchvision as sf_tv

    for name in ("make_static", "pad_targets", "to_torchvision", "StaticRCNN"):
        assert getattr(sf_tv, name) is getattr(sf_det, name)
        assert name in sf_tv.__all__ and name in sf_det.__all__
    from syncfree.compat import _static_rcnn  # the former module: models saved whole still load

    assert _static_rcnn.StaticRCNN is sf_det.StaticRCNN


# ---- the model object


def test_shares_the_modules_and_state_dict(tv):
    model = tiny_model("mask")
    static = sf_det.make_static(model, (H, W), G)
    ref, got = model.state_dict(), static.state_dict()
    assert list(ref) == list(got)
    assert all(got[k].data_ptr() == ref[k].data_ptr() for k in ref)
    # A torchvision checkpoint loads into the static model unchanged, and back.
    other = tiny_model("mask")
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    static.load_state_dict(other.state_dict())
    assert all(torch.equal(model.state_dict()[k], other.state_dict()[k]) for k in ref)
    fresh = tiny_model("mask")
    fresh.load_state_dict(static.state_dict())
    assert static.training == model.training
    assert "image_size=(128, 128)" in repr(static)


MAKE = "syncfree.detection.make_static: "
MODEL = "syncfree.detection.StaticRCNN: "


LOADER = """
import sys, torch
import syncfree      # its operators (syncfree::nms, syncfree::multi_scale_roi_align)
program = torch.export.load(sys.argv[1])
out = program.module()(torch.load(sys.argv[2]))
torch.save(out, sys.argv[3])
"""


@pytest.mark.parametrize("kind", ["mask", "keypoint"])
def test_exported_model_loads_in_a_new_process(tv, tmp_path, kind):
    """What an exported static model needs where it is loaded: ``import
    syncfree`` (docs/detection.md says so), nothing else of the code that
    built it, not even torchvision. The loaded program gives the eager
    model's outputs."""
    model = tiny_model(kind).eval()
    static = sf_det.make_static(model, (H, W), G).eval()
    images, _ = make_batch(3, [0, 0])
    program = torch.export.export(static, (images,))
    targets = {str(n.target).split(".")[0] for n in program.graph.nodes
               if n.op == "call_function" and not str(n.target).startswith(("aten.", "<"))}
    assert targets == {"syncfree"}, targets  # what the docs list
    paths = [str(tmp_path / name) for name in ("model.pt2", "images.pt", "out.pt")]
    torch.export.save(program, paths[0])
    torch.save(images, paths[1])
    import syncfree

    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(syncfree.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-c", LOADER, *paths], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    loaded = torch.load(paths[2])
    with torch.no_grad():
        eager = static(images)
    assert set(loaded) == set(eager)
    for key in eager:
        torch.testing.assert_close(loaded[key], eager[key], rtol=0, atol=0)
    assert eager["valid"].any()


def test_make_static_errors(tv):
    model = tiny_model("faster")
    cases = [
        ((nn.Linear(2, 2), (H, W), G), TypeError,
         MAKE + "model must be a torchvision FasterRCNN, MaskRCNN, KeypointRCNN, RetinaNet, FCOS or SSD, "
                "got Linear"),
        ((model, (100, 128), G), ValueError, MAKE + "image_size must be positive multiples of 32"),
        ((model, 128, G), TypeError, MAKE + "image_size must be a pair of ints"),
        ((model, (H, W), 0), ValueError, MAKE + "max_boxes must be >= 1, got 0"),
        ((model, (H, W), True), TypeError, MAKE + "max_boxes must be an int"),
    ]
    for args, error, message in cases:
        with pytest.raises(error) as info:
            sf_det.make_static(*args)
        assert str(info.value).startswith(message), str(info.value)


def test_make_static_refuses_parts_that_are_not_torchvisions(tv):
    """The static model repeats torchvision's RPN, RoI heads and matcher: a
    model whose part is another class, or overrides the matcher's
    ``__call__``, is refused with the part named."""
    from torchvision.models.detection._utils import Matcher

    class FirstMatch(Matcher):
        def __call__(self, match_quality_matrix):
            return match_quality_matrix.argmax(dim=0)

    class NoLowQuality(Matcher):
        def set_low_quality_matches_(self, matches, all_matches, match_quality_matrix):
            pass

    cases = []
    model = tiny_model("faster")
    model.rpn = nn.Identity()
    cases.append((model, TypeError, "model.rpn must be a torchvision RegionProposalNetwork (the static model "
                                    "repeats its computation), got Identity"))
    model = tiny_model("faster")
    model.roi_heads = nn.Identity()
    cases.append((model, TypeError, "model.roi_heads must be a torchvision RoIHeads"))
    for part in ("rpn", "roi_heads"):
        model = tiny_model("faster")
        getattr(model, part).proposal_matcher.__class__ = FirstMatch
        cases.append((model, NotImplementedError, f"model.{part}.proposal_matcher (FirstMatch) does not use "
                                                  "torchvision's Matcher.__call__"))
        model = tiny_model("faster")
        getattr(model, part).proposal_matcher.__class__ = NoLowQuality
        cases.append((model, NotImplementedError, f"model.{part}.proposal_matcher (NoLowQuality) does not use "
                                                  "torchvision's Matcher.set_low_quality_matches_"))
    for model, error, message in cases:
        with pytest.raises(error) as info:
            sf_det.make_static(model, (H, W), G)
        assert str(info.value).startswith(MAKE + message), str(info.value)


def test_make_static_with_a_fixed_size_takes_the_padded_canvas(tv):
    """A model whose transform resizes every image to a fixed_size that is
    not a multiple of size_divisible (32) pads each batch to the next
    multiple: that is the canvas, and the fixed size itself is refused with
    the reason."""
    model = tiny_model("faster")
    model.transform.fixed_size = (100, 90)  # (W, H): padded to 96 x 128
    assert isinstance(sf_det.make_static(model, (96, 128), G), sf_det.StaticRCNN)
    for size in [(90, 100), (128, 96), (128, 128)]:
        with pytest.raises(ValueError) as info:
            sf_det.make_static(model, size, G)
        assert str(info.value).startswith(
            MAKE + "this model resizes every image to 90x100 (its transform's fixed_size), padded to 96x128 (its "
                   f"size_divisible, 32): image_size must be (96, 128), got {size}"), str(info.value)
    # torchvision's own transform pads to that canvas.
    model.eval()
    images, _ = model.transform([torch.rand(3, 60, 70)])
    assert tuple(images.tensors.shape[-2:]) == (96, 128) and images.image_sizes == [(90, 100)]


def test_static_model_input_errors(tv):
    static = sf_det.make_static(tiny_model("mask"), (H, W), G).train()
    images, targets = make_batch(6, [1, 2], masks=True)
    padded = sf_det.pad_targets(targets, G)
    cases = [
        ((list(images), padded), TypeError, "images must be a [B, 3, 128, 128] tensor"),
        ((images[:, :, :64], padded), ValueError, "images must be [B, 3, 128, 128]"),
        ((images.to(torch.uint8), padded), TypeError, "images must be floating point"),
        ((images, None), ValueError, "training needs targets"),
        ((images, targets), TypeError, "targets must be a dict of padded tensors"),
        ((images, sf_det.pad_targets(targets, G + 1)), ValueError, "targets['boxes'] must be [2, 6, 4]"),
        ((images, {k: v for k, v in padded.items() if k != "masks"}), ValueError, "targets has no 'masks'"),
        ((images.double(), padded), TypeError, "images are torch.float64 but the model's parameters are "
                                               "torch.float32"),
    ]
    for args, error, message in cases:
        with pytest.raises(error) as info:
            static(*args)
        assert str(info.value).startswith(MODEL + message), str(info.value)


def test_static_keypoint_model_input_errors(tv):
    static = sf_det.make_static(tiny_model("keypoint"), (H, W), G).train()
    images, targets = make_batch(6, [1, 2], keypoints=True)
    padded = sf_det.pad_targets(targets, G)
    cases = [
        ({k: v for k, v in padded.items() if k != "keypoints"}, ValueError, "targets has no 'keypoints' "
                                                                           "(expected [2, 6, 17, 3])"),
        (dict(padded, keypoints=padded["keypoints"][:, :, :5]), ValueError,
         "targets['keypoints'] must be [2, 6, 17, 3], got [2, 6, 5, 3]"),
        (dict(padded, keypoints=padded["keypoints"].long()), TypeError,
         "targets['keypoints'] must be floating point, got torch.int64"),
    ]
    for target, error, message in cases:
        with pytest.raises(error) as info:
            static(images, target)
        assert str(info.value).startswith(MODEL + message), str(info.value)


def test_one_switch_sets_both_models_modes(tv):
    """static.train() / .eval() also switch the torchvision model's own flag;
    switching the torchvision model afterwards is an error at the static
    model's next forward, not a silent mix of modes."""
    model = tiny_model("faster").train()
    static = sf_det.make_static(model, (H, W), G)
    images, targets = make_batch(7, [1, 2])
    static.eval()
    assert not model.training and not static.training
    with torch.no_grad():
        assert len(model(list(images))) == 2  # torchvision's eval: no targets needed
        static(images)
    model.train()
    with pytest.raises(RuntimeError, match="^" + MODEL + "the static model is in eval mode but the torchvision "
                                           "model it shares its modules with was switched to training mode"):
        static(images)
    static.train()
    assert model.training
    losses = static(images, sf_det.pad_targets(targets, G))
    assert all(torch.isfinite(v) for v in losses.values())
    static.backbone.eval()  # freezing a part on purpose stays allowed
    assert static(images, sf_det.pad_targets(targets, G)).keys() == losses.keys()


def test_batch_norm_in_heads_follows_its_mode(tv):
    """A head's batch norm frozen with ``.eval()`` inside a training model uses its
    running statistics (torchvision's result); SyncBatchNorm in a head is refused."""
    model = tiny_model("faster", batch_norm_head=True)
    static = sf_det.make_static(model, (H, W), G)
    images, targets = make_batch(8, [2, 3], masks=False)
    take_everything(model, images, G)
    model.train()
    for m in model.roi_heads.box_head.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 2)
    ref = model(list(images), copy.deepcopy(targets))
    got = static(images, sf_det.pad_targets(targets, G))
    assert_losses_equal(ref, got)
    for m in model.roi_heads.box_head.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.train()
    sync = nn.SyncBatchNorm.convert_sync_batchnorm(model.roi_heads.box_head)
    model.roi_heads.box_head = sync
    with pytest.raises(NotImplementedError, match="^syncfree.detection.StaticRCNN: the box head has "
                                                  "SyncBatchNorm"):
        static(images, sf_det.pad_targets(targets, G))
