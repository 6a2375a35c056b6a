"""The drop-in samplers under torch.compile: compiled once, never recompiled per call.

A sampler that kept per-call state (a call counter, say) on an object dynamo
guards on would make every call fail its guards and recompile, until
dynamo's recompile limit sends the frame back to eager. These tests compile
once, then run with ``error_on_recompile``: any recompilation raises, with
dynamo's reason.
"""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from helpers.checks import torchvision_or_skip
from helpers.detection import detection_batch

from syncfree.compat import detectron2 as sf_d2
from syncfree.compat import torchvision as sf_tv

STEPS = 12


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/python/conftest.py


def run_without_recompiling(step, steps=STEPS, warmup=1):
    """Calls ``step(i)`` for i in [0, warmup + steps): the first ``warmup`` calls compile,
    the next ``steps`` must not recompile (dynamo raises RecompileError, naming the
    failed guard, if one does)."""
    for i in range(warmup):
        step(i)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for i in range(warmup, warmup + steps):
            step(i)


def random_images(i, sizes=(300, 50, 1000)):
    gen = torch.Generator().manual_seed(i)
    return [torch.randint(-2, 4, (n,), generator=gen).float() for n in sizes]


def test_torchvision_sampler_compiles_once_fullgraph():
    sampler = sf_tv.BalancedPositiveNegativeSampler(64, 0.25)
    counter = torch._dynamo.testing.CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def sample(matched_idxs):
        pos, neg = sampler(matched_idxs)
        return [p.sum() for p in pos], [n.sum() for n in neg]

    results = []
    run_without_recompiling(lambda i: results.append(sample(random_images(i))))
    assert counter.frame_count == 1
    # The compiled sampler still samples: torchvision's quotas on every call.
    for i, (pos, neg) in enumerate(results):
        for m, p, n in zip(random_images(i), pos, neg):
            num_pos = min(int((m >= 1).sum()), 16)
            assert int(p) == num_pos and int(n) == min(int((m == 0).sum()), 64 - num_pos)


def test_torchvision_sampler_compiles_once_per_instance_settings():
    # Two samplers (the RPN's and the ROI heads') in one compiled function.
    rpn, roi = sf_tv.BalancedPositiveNegativeSampler(256, 0.5), sf_tv.BalancedPositiveNegativeSampler(64, 0.25)
    counter = torch._dynamo.testing.CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def sample(a, b):
        return rpn(a)[0][0].sum() + roi(b)[1][0].sum()

    run_without_recompiling(lambda i: sample(random_images(i), random_images(i + 100, (40, 70))))
    assert counter.frame_count == 1


def test_detectron2_static_subsample_compiles_once_fullgraph():
    counter = torch._dynamo.testing.CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def sample(labels):
        return sf_d2.subsample_labels_static(labels, 32, 0.25, 3)

    def step(i):
        labels = torch.randint(-1, 4, (2, 200), generator=torch.Generator().manual_seed(i))
        idx, is_pos, valid = sample(labels)
        assert int(is_pos.sum(1).max()) <= 8 and bool((idx[~valid] == -1).all())

    run_without_recompiling(step)
    assert counter.frame_count == 1


# ---- torchvision detection models (the torchvision leg of CI) --------------

def tiny_faster_rcnn(box_batch_size_per_image=64):
    """A Faster R-CNN with torchvision's RPN and ROI heads and a one-layer backbone:
    the heads (where the samplers are) at a fraction of a real backbone's cost."""
    tv = torchvision_or_skip()
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4, padding=1), torch.nn.ReLU())
    backbone.out_channels = 8
    assert tv  # imported for its models
    return FasterRCNN(
        backbone, num_classes=3, min_size=128, max_size=128,
        rpn_anchor_generator=AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),)),
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2),
        rpn_pre_nms_top_n_train=200, rpn_post_nms_top_n_train=200,  # a cheap NMS
        box_batch_size_per_image=box_batch_size_per_image)


# torch 2.11's pad_sequence decomposition guards on which image has the most
# proposals, so the patched sampler recompiles when that changes between steps
# (seen on torch 2.11 with torchvision 0.26; not on 2.14 and 2.15).
@pytest.mark.slow
@pytest.mark.xfail(tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14),
                   reason="torch < 2.14: pad_sequence guards on the relative sizes of the per-image tensors",
                   raises=torch._dynamo.exc.RecompileError, strict=True)
def test_patched_detection_training_step_compiles_once():
    # torchvision's own graph breaks are fine (each piece is a frame of its
    # own), and so are its own recompilations in the first two steps
    # (MultiScaleRoIAlign sets its scales on its first call); dynamic shapes,
    # as the number of proposals changes from step to step. After that, no
    # frame may recompile: nothing the patched sampler holds changes per call.
    model = sf_tv.patch(tiny_faster_rcnn())
    model.train()
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(model, backend=counter, dynamic=True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history = []

    def step(i):
        images, targets = detection_batch(seed=i)
        losses = compiled(images, targets)
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append({k: float(v.detach()) for k, v in losses.items()})
        frames.append(counter.frame_count)

    frames = []
    run_without_recompiling(step, warmup=2)
    assert counter.frame_count > 0 and frames[2:] == [frames[1]] * STEPS
    assert len(history) == STEPS + 2 and all(torch.isfinite(torch.tensor(list(h.values()))).all() for h in history)


def test_patched_model_step_compiled_with_syncfree_sampler():
    # What was compiled samples with syncfree (one call per head and step), not randperm.
    from torch.profiler import ProfilerActivity, profile

    model = sf_tv.patch(tiny_faster_rcnn())
    model.train()
    compiled = torch.compile(model, backend="eager")
    images, targets = detection_batch()
    compiled(images, targets)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compiled(images, targets)
    names = [e.name for e in prof.events()]
    assert names.count("syncfree::balanced_sample") == 2 and "aten::randperm" not in names


def eager_losses(patched, draws, seed0):
    """The four training losses of one fixed model and batch over ``draws`` seeds: only the
    samplers' random choices change from one draw to the next."""
    model = tiny_faster_rcnn()
    if patched:
        sf_tv.patch(model)
    model.train()
    images, targets = detection_batch()
    out = []
    with torch.no_grad():
        for d in range(draws):
            torch.manual_seed(seed0 + d)
            out.append({k: float(v) for k, v in model(images, targets).items()})
    return {k: [o[k] for o in out] for k in out[0]}


@pytest.mark.slow
def test_patched_and_unpatched_losses_agree_in_distribution():
    # Both samplers draw uniformly random subsets with the same quotas, so each
    # loss has the same distribution under both. A loss the sampling varies
    # (objectness: 256 of the anchors; classifier: 64 of the proposals) gets a
    # two-sample Kolmogorov-Smirnov test at 2.5e-7 (at most 4 tests: false-
    # failure probability < 1e-6 in all; ties only make it conservative). A
    # loss that does not vary (the box regressions here: every positive is
    # taken) must be the same number under both samplers.
    from scipy.stats import ks_2samp

    draws = 120
    theirs = eager_losses(False, draws, seed0=0)
    ours = eager_losses(True, draws, seed0=10_000)
    assert sorted(theirs) == sorted(ours) == sorted(
        ["loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg"])
    tested = []
    for k in theirs:
        if len(set(theirs[k])) == 1:
            assert len(set(ours[k])) == 1 and ours[k][0] == pytest.approx(theirs[k][0], rel=1e-5), k
            continue
        assert len(set(theirs[k])) > draws // 2 and len(set(ours[k])) > draws // 2, k
        p = ks_2samp(theirs[k], ours[k]).pvalue
        assert p > 2.5e-7, (k, p)
        tested.append(k)
    assert {"loss_objectness", "loss_classifier"} <= set(tested), tested
