"""Drop-in samplers for torchvision and detectron2."""
import copy
import os
import random
import warnings
from typing import List

import pytest
import torch

from helpers.checks import chi2_critical
from helpers.detection import detection_batch
from syncfree.compat import detectron2 as sf_d2

if os.environ.get("SYNCFREE_EXPECT_TORCHVISION") == "1":
    # The CI leg of a torch with a paired torchvision: a failed import fails.
    import torchvision.models.detection._utils as tv_utils
else:
    try:
        import torchvision.models.detection._utils as tv_utils
    except ImportError:
        # Every test of this file skips, one by one (not the whole module at
        # collection: a run that deselects them, as the GPU check's `-m cuda`
        # does, then reports no skip).
        tv_utils = None
        pytestmark = pytest.mark.skip(reason="torchvision is not installed")
from syncfree.compat import torchvision as sf_tv  # noqa: E402

# patch() replaces the module's name: the class as torchvision defines it.
TV_SAMPLER = tv_utils.BalancedPositiveNegativeSampler if tv_utils is not None else None

P_FAIL = 1e-6


def random_matched_idxs(rng, gen):
    """One image's matched_idxs: -2/-1 ignored, 0 negative, >= 1 positive."""
    n = rng.choice([0, 1, 5, 50, 300, 2000])
    kind = rng.choice(["mixed", "no_pos", "no_neg", "ignored_only", "float"])
    if kind == "mixed":
        m = torch.randint(-2, 5, (n,), generator=gen)
    elif kind == "no_pos":
        m = torch.randint(-1, 1, (n,), generator=gen)
    elif kind == "no_neg":
        m = torch.randint(1, 4, (n,), generator=gen) * torch.where(torch.rand(n, generator=gen) < 0.2, -1, 1)
    elif kind == "ignored_only":
        m = torch.full((n,), -1)
    else:  # torchvision's RPN passes float labels: 1.0, 0.0, -1.0
        m = torch.randint(-1, 2, (n,), generator=gen).float()
    return m


def test_counts_equal_torchvisions():
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    for case in range(150):
        images = [random_matched_idxs(rng, gen) for _ in range(rng.randint(1, 4))]
        K = rng.choice([1, 7, 64, 256, 512])
        frac = rng.choice([0.25, 0.5, 0.7])
        ours = sf_tv.BalancedPositiveNegativeSampler(K, frac)(images)
        theirs = tv_utils.BalancedPositiveNegativeSampler(K, frac)(images)
        for m, op, on, tp, tn in zip(images, *ours, *theirs):
            assert op.dtype == torch.uint8 and on.dtype == torch.uint8
            assert op.shape == m.shape and on.shape == m.shape
            assert int(op.sum()) == int(tp.sum()) and int(on.sum()) == int(tn.sum()), case
            assert bool((m[op.bool()] >= 1).all()) and bool((m[on.bool()] == 0).all())
            assert not bool((op.bool() & on.bool()).any())


def test_every_eligible_anchor_equally_likely():
    # One image, repeated: each positive is chosen with probability num_pos/P
    # and each negative with num_neg/Q, as under torchvision's sampler.
    # Pearson's statistic is scaled for sampling without replacement (see
    # balanced_sample/test_statistics.py); false-failure probability < 1e-6 per class.
    gen = torch.Generator().manual_seed(1)
    image = torch.randint(-1, 3, (400,), generator=gen)
    copies = 3000
    torch.manual_seed(2)
    pos_masks, neg_masks = sf_tv.BalancedPositiveNegativeSampler(64, 0.25)([image] * copies)
    for masks, eligible in ((pos_masks, image >= 1), (neg_masks, image == 0)):
        counts = torch.stack(masks).double().sum(0)[eligible]
        assert int(counts.sum()) > 0
        n = counts.numel()
        k = int(masks[0].sum())
        p = k / n
        stat = float(((counts - copies * p) ** 2 / (copies * p)).sum()) / ((1 - p) * n / (n - 1))
        assert stat < chi2_critical(n - 1, P_FAIL), stat
        assert int(torch.stack(masks).double().sum(0)[~eligible].sum()) == 0


def test_patch_and_unpatch():
    original = tv_utils.BalancedPositiveNegativeSampler
    with sf_tv.patched():
        assert tv_utils.BalancedPositiveNegativeSampler is sf_tv.BalancedPositiveNegativeSampler
        assert samplers_of(detection_model()) == [sf_tv.BalancedPositiveNegativeSampler] * 2
    assert tv_utils.BalancedPositiveNegativeSampler is original


def test_patch_model_is_local():
    # patch(model) swaps that model's samplers and nothing else: torchvision's
    # class, models built afterwards and other models keep torchvision's sampler.
    original = tv_utils.BalancedPositiveNegativeSampler
    other = detection_model()
    model = sf_tv.patch(detection_model())
    assert samplers_of(model) == [sf_tv.BalancedPositiveNegativeSampler] * 2
    assert (model.rpn.fg_bg_sampler.batch_size_per_image, model.rpn.fg_bg_sampler.positive_fraction) == (256, 0.5)
    assert tv_utils.BalancedPositiveNegativeSampler is original
    assert samplers_of(other) == samplers_of(detection_model()) == [TV_SAMPLER] * 2
    with sf_tv.patched(other):
        assert samplers_of(other) == [sf_tv.BalancedPositiveNegativeSampler] * 2
        assert tv_utils.BalancedPositiveNegativeSampler is original
    assert samplers_of(other) == [TV_SAMPLER] * 2
    # unpatch(model) leaves a global patch() in place, and unpatch() leaves patched models alone.
    with sf_tv.patched():
        sf_tv.unpatch(model)
        assert samplers_of(model) == [TV_SAMPLER] * 2
        assert tv_utils.BalancedPositiveNegativeSampler is sf_tv.BalancedPositiveNegativeSampler
        sf_tv.patch(model)
    assert samplers_of(model) == [sf_tv.BalancedPositiveNegativeSampler] * 2
    assert tv_utils.BalancedPositiveNegativeSampler is original


def test_patched_faster_rcnn_training_step():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=3, min_size=128, max_size=128)
    sf_tv.patch(model)
    try:
        samplers = [m.fg_bg_sampler for m in model.modules() if hasattr(m, "fg_bg_sampler")]
        assert len(samplers) == 2 and all(isinstance(s, sf_tv.BalancedPositiveNegativeSampler) for s in samplers)
        model.train()
        images = [torch.rand(3, 128, 128) for _ in range(2)]
        targets = [dict(boxes=torch.tensor([[10.0, 20.0, 60.0, 90.0], [50.0, 40.0, 120.0, 110.0]]),
                        labels=torch.tensor([1, 2])) for _ in range(2)]
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            losses = model(images, targets)
        names = [e.name for e in prof.events()]
        assert names.count("syncfree::balanced_sample") == 2 and "aten::randperm" not in names  # RPN and ROI heads
        loss = sum(losses.values())
        assert all(bool(torch.isfinite(v)) for v in losses.values())
        loss.backward()
        grads = [p.grad for p in model.backbone.parameters() if p.grad is not None]
        assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    finally:
        sf_tv.unpatch(model)
    assert not any(isinstance(getattr(m, "fg_bg_sampler", None), sf_tv.BalancedPositiveNegativeSampler)
                   for m in model.modules())


def script(obj):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")
        return torch.jit.script(obj)


def test_scripted_sampler_equals_eager():
    def sample(matched_idxs: List[torch.Tensor], k: int, fraction: float):
        return sf_tv.BalancedPositiveNegativeSampler(k, fraction)(matched_idxs)

    scripted = script(sample)

    rng = random.Random(5)
    gen = torch.Generator().manual_seed(5)
    for case in range(60):
        images = [random_matched_idxs(rng, gen) for _ in range(rng.randint(0, 4))]
        if images and rng.random() < 0.3:
            images[0] = images[0][: images[0].numel() // 4 * 4].reshape(-1, 4)  # any shape
        K = rng.choice([1, 7, 64, 512])
        frac = rng.choice([0.25, 0.5, 0.7])
        torch.manual_seed(case)
        got = scripted(images, K, frac)
        torch.manual_seed(case)
        want = sf_tv.BalancedPositiveNegativeSampler(K, frac)(images)
        assert len(got[0]) == len(want[0]) == len(images) and len(got[1]) == len(images)
        for g, w in zip(got[0] + got[1], want[0] + want[1]):
            assert g.dtype == w.dtype == torch.uint8 and torch.equal(g, w), case


def detection_model():
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=3, min_size=128, max_size=128)


def losses_and_sampler_calls(model, seed=7):
    """One training forward from a seeded default generator: (losses, {op: calls}).
    The profiler sees the operators of eager and of scripted code alike."""
    from torch.profiler import ProfilerActivity, profile

    images, targets = detection_batch()
    model.train()
    torch.manual_seed(seed)
    with profile(activities=[ProfilerActivity.CPU]) as prof, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="RCNN always returns a")  # scripted: (losses, detections)
        out = model(images, targets)
    losses = out[0] if isinstance(out, tuple) else out  # scripted: (losses, detections)
    calls = {"syncfree::balanced_sample": 0, "aten::randperm": 0}
    for event in prof.events():
        if event.name in calls:
            calls[event.name] += 1
    return losses, calls


def samplers_of(model):
    return [type(m.fg_bg_sampler) for m in model.modules() if hasattr(m, "fg_bg_sampler")]


def assert_same_losses(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


# torch 2.15 takes a module's TorchScript attribute types from its class alone
# (torch.jit._recursive.get_annotations walks type(module).__mro__), earlier
# versions from module.__annotations__: patch() gives a module holding
# syncfree's sampler a class of its own, which both read.
@pytest.mark.parametrize("how", ["patch() then build", "patch(model)", "patch() then build then unpatch()"])
def test_scripted_patched_model_samples_with_syncfree(how):
    if how == "patch(model)":
        model = sf_tv.patch(detection_model())
        sf_tv.unpatch()  # the global patch only: the model keeps syncfree's samplers
    else:
        with sf_tv.patched():
            model = detection_model()
    try:
        assert samplers_of(model) == [sf_tv.BalancedPositiveNegativeSampler] * 2
        eager = copy.deepcopy(model)
        scripted = script(model)
        # The scripted model holds syncfree's sampler, not torchvision's.
        assert type(scripted.rpn.fg_bg_sampler) is sf_tv.BalancedPositiveNegativeSampler
        assert type(scripted.roi_heads.fg_bg_sampler) is sf_tv.BalancedPositiveNegativeSampler
        got, got_calls = losses_and_sampler_calls(scripted)
        want, want_calls = losses_and_sampler_calls(eager)
        # One syncfree call per head (RPN and ROI heads), no randperm: the
        # scripted model runs syncfree's sampler, and draws the same samples
        # as the eager model from the same generator state.
        assert got_calls == want_calls == {"syncfree::balanced_sample": 2, "aten::randperm": 0}
        assert_same_losses(got, want)
    finally:
        sf_tv.unpatch(model)


def test_patched_module_class_changes_nothing_else():
    # The class of its own that patch(model) gives a module is a subclass of
    # torchvision's, one per torchvision class, under the same name: the model
    # prints and keeps its state_dict as before, deep-copies and pickles as a
    # patched model, and unpatch(model) gives each module its class back.
    import io
    import pickle

    from torchvision.models.detection.roi_heads import RoIHeads
    from torchvision.models.detection.rpn import RegionProposalNetwork

    plain = detection_model()
    model = sf_tv.patch(detection_model())
    try:
        for module, cls in ((model.rpn, RegionProposalNetwork), (model.roi_heads, RoIHeads)):
            assert isinstance(module, cls) and type(module) is not cls and type(module).__name__ == cls.__name__
        other = sf_tv.patch(detection_model())
        assert (type(other.rpn), type(other.roi_heads)) == (type(model.rpn), type(model.roi_heads))
        assert repr(model) == repr(plain)
        want, got = plain.state_dict(), model.state_dict()
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
        saved = io.BytesIO()
        torch.save(model, saved)
        saved.seek(0)
        copies = [copy.deepcopy(model), torch.load(saved, weights_only=False)]
        copies += [pickle.loads(pickle.dumps(model, protocol)) for protocol in (0, 2, pickle.HIGHEST_PROTOCOL)]
        for copied in copies:
            assert samplers_of(copied) == [sf_tv.BalancedPositiveNegativeSampler] * 2
            assert (type(copied.rpn), type(copied.roi_heads)) == (type(model.rpn), type(model.roi_heads))
        scripted = script(copies[-1])
        assert type(scripted.roi_heads.fg_bg_sampler) is sf_tv.BalancedPositiveNegativeSampler
        # A module given torchvision's sampler by hand gets its class back when scripted.
        model.rpn.fg_bg_sampler = TV_SAMPLER(256, 0.5)
        scripted = script(model)
        assert type(model.rpn) is RegionProposalNetwork and type(scripted.rpn.fg_bg_sampler) is TV_SAMPLER
        assert type(scripted.roi_heads.fg_bg_sampler) is sf_tv.BalancedPositiveNegativeSampler
    finally:
        sf_tv.unpatch(model)
    assert (type(model.rpn), type(model.roi_heads)) == (RegionProposalNetwork, RoIHeads)
    assert samplers_of(model) == [TV_SAMPLER] * 2


def test_scripted_torchvision_model_keeps_torchvisions_sampler():
    # Scripting follows the sampler a module holds: a model without syncfree's
    # sampler scripts with torchvision's, patched or not.
    model = detection_model()
    with sf_tv.patched():
        assert samplers_of(model) == [TV_SAMPLER] * 2
        scripted = script(model)
    assert type(scripted.rpn.fg_bg_sampler) is TV_SAMPLER
    losses, calls = losses_and_sampler_calls(scripted)
    assert calls["syncfree::balanced_sample"] == 0 and calls["aten::randperm"] > 0
    # and unpatch(model) takes a patched model back to torchvision's sampler, scripted too.
    patched_then_unpatched = sf_tv.unpatch(sf_tv.patch(detection_model()))
    assert samplers_of(patched_then_unpatched) == [TV_SAMPLER] * 2
    assert "__annotations__" not in patched_then_unpatched.rpn.__dict__
    assert type(patched_then_unpatched.rpn) is type(model.rpn)  # torchvision's class again
    again, calls = losses_and_sampler_calls(script(patched_then_unpatched))
    assert calls["syncfree::balanced_sample"] == 0 and calls["aten::randperm"] > 0
    assert_same_losses(again, losses)


def reference_subsample_labels(labels, num_samples, positive_fraction, bg_label):
    """detectron2's documented rule, as (positive set, negative set, num_pos, num_neg)."""
    positive = ((labels != -1) & (labels != bg_label)).nonzero().flatten().tolist()
    negative = (labels == bg_label).nonzero().flatten().tolist()
    num_pos = min(len(positive), int(num_samples * positive_fraction))
    num_neg = min(len(negative), num_samples - num_pos)
    return set(positive), set(negative), num_pos, num_neg


def test_detectron2_semantics():
    rng = random.Random(3)
    gen = torch.Generator().manual_seed(3)
    for case in range(200):
        num_classes = rng.choice([1, 5, 80])
        n = rng.choice([0, 1, 10, 100, 1000])
        labels = torch.randint(-1, num_classes + 1, (n,), generator=gen)
        if rng.random() < 0.3:
            labels[torch.rand(n, generator=gen) < 0.9] = num_classes
        K = rng.choice([1, 16, 128, 512])
        frac = rng.choice([0.25, 0.5, 1.0])
        pos_idx, neg_idx = sf_d2.subsample_labels(labels, K, frac, num_classes)
        pos_set, neg_set, num_pos, num_neg = reference_subsample_labels(labels, K, frac, num_classes)
        assert pos_idx.dtype == torch.int64 and neg_idx.dtype == torch.int64
        assert len(pos_idx) == num_pos and len(neg_idx) == num_neg, case
        assert set(pos_idx.tolist()) <= pos_set and set(neg_idx.tolist()) <= neg_set
        assert len(set(pos_idx.tolist())) == num_pos and len(set(neg_idx.tolist())) == num_neg


def test_detectron2_static_form_matches():
    labels = torch.randint(-1, 4, (3, 200), generator=torch.Generator().manual_seed(4))
    idx, is_pos, valid = sf_d2.subsample_labels_static(labels, 32, 0.25, 3, seed=7)
    assert idx.shape == (3, 32) and is_pos.shape == (3, 32) and valid.shape == (3, 32)
    for r in range(3):
        p, q, num_pos, num_neg = reference_subsample_labels(labels[r], 32, 0.25, 3)
        assert int(is_pos[r].sum()) == num_pos and int((valid[r] & ~is_pos[r]).sum()) == num_neg
        assert set(idx[r][is_pos[r]].tolist()) <= p and set(idx[r][valid[r] & ~is_pos[r]].tolist()) <= q
        assert bool((idx[r][~valid[r]] == -1).all())


def test_detection_example_runs(monkeypatch):
    import importlib.util
    import math
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "detection_train_step.py")
    spec = importlib.util.spec_from_file_location("detection_train_step", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    # Count the syncfree calls of each run: wrap the sampler's operator and the training loop.
    calls, per_run, sample = [0], [], sf_tv.balanced_sample

    def counting_sample(*args, **kwargs):
        calls[0] += 1
        return sample(*args, **kwargs)

    def counting_steps(*args, _steps=example.train_steps):
        before = calls[0]
        history = _steps(*args)
        per_run.append(calls[0] - before)
        return history

    monkeypatch.setattr(sf_tv, "balanced_sample", counting_sample, raising=True)
    monkeypatch.setattr(example, "train_steps", counting_steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = example.main(["--backbone", "mobilenet", "--size", "128", "--images", "2", "--steps", "2"])
    # The example itself warns about nothing (torchvision's own warnings are not its to fix).
    assert not [w for w in caught if os.path.samefile(w.filename, path)], [str(w.message) for w in caught]
    assert per_run == [0, 4]  # torchvision's sampler, then 2 steps x (RPN + ROI heads) with syncfree's
    assert results["torchvision sampler"]["samplers"] == [
        "torchvision.models.detection._utils.BalancedPositiveNegativeSampler"]
    assert results["syncfree sampler"]["samplers"] == ["syncfree.compat.torchvision.BalancedPositiveNegativeSampler"]
    for r in results.values():
        for _, losses in r["history"]:
            assert all(math.isfinite(v) for v in losses.values())
