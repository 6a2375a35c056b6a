"""TorchScript: the Python wrappers and detectron2's drop-in compile and give
exactly what the eager calls give. (The torchvision sampler and scripted
detection models: compat/test_samplers.py.)"""
import warnings
from typing import Optional, Tuple

import pytest
import torch
from torch import Tensor

import syncfree
from helpers.checks import assert_same, check_sample
from syncfree.compat import detectron2 as sf_d2


def script(fn):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")
        return torch.jit.script(fn)


def labels_and_features():
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(-1, 4, (3, 2, 60), generator=gen)
    features = torch.randn(3, 2, 60, 5, generator=gen)
    return labels, features


def test_wrappers_script_with_keyword_arguments():
    def sample(labels: Tensor, features: Tensor) -> Tuple[Tuple[Tensor, Tensor], Tuple[Tensor, Tensor, Tensor]]:
        a = syncfree.balanced_sample(labels, 16, 0.25, seed=3)
        b = syncfree.balanced_sample_gather(features, labels, 16, 0.25, negative_label=2,
                                            fill_positives=False, seed=3)
        return a, b

    scripted = script(sample)
    labels, features = labels_and_features()
    got_a, got_b = scripted(labels, features)
    want_a, want_b = sample(labels, features)
    assert_same(got_a, want_a)
    assert_same(got_b, want_b)
    check_sample(labels, *got_a, 16, 0.25)
    # The scripted gather took the options: it gathers what balanced_sample
    # chooses with them.
    idx, valid = syncfree.balanced_sample(labels, 16, 0.25, negative_label=2, fill_positives=False, seed=3)
    check_sample(labels, idx, valid, 16, 0.25, negative_label=2, fill_positives=False)
    assert torch.equal(got_b[2], valid)
    chosen = features.gather(2, idx.clamp(min=0).unsqueeze(-1).expand(-1, -1, -1, 5))
    assert torch.equal(got_b[0], torch.where(valid.unsqueeze(-1), chosen, torch.zeros_like(chosen)))
    assert torch.equal(got_b[1], torch.where(valid, labels.gather(2, idx.clamp(min=0)), -1))


def test_arguments_by_position_in_the_documented_order():
    # (labels, num_samples, positive_fraction, negative_label, fill_positives, seed, generator)
    def positional(labels: Tensor, features: Tensor):
        a = syncfree.balanced_sample(labels, 20, 0.75, 2, False, 9, None)
        b = syncfree.balanced_sample_gather(features, labels, 20, 0.75, 2, False, 9, None)
        return a, b

    labels, features = labels_and_features()
    by_keyword = (
        syncfree.balanced_sample(labels, 20, positive_fraction=0.75, negative_label=2, fill_positives=False,
                                 seed=9, generator=None),
        syncfree.balanced_sample_gather(features, labels, 20, positive_fraction=0.75, negative_label=2,
                                        fill_positives=False, seed=9, generator=None),
    )
    for result in (positional(labels, features), script(positional)(labels, features)):
        assert_same(result[0], by_keyword[0])
        assert_same(result[1], by_keyword[1])
    # The options are used: other values give other samples.
    other = syncfree.balanced_sample(labels, 20, 0.75, 0, False, 9)
    assert not torch.equal(other[0], by_keyword[0][0])


def test_scripted_calls_draw_from_generators_like_eager_calls():
    def draw(labels: Tensor, generator: Optional[torch.Generator]):
        return syncfree.balanced_sample(labels, 12, 0.5, generator=generator), syncfree.balanced_sample(labels, 12)

    scripted = script(draw)
    labels, _ = labels_and_features()
    torch.manual_seed(21)
    got = scripted(labels, torch.Generator().manual_seed(5))
    torch.manual_seed(21)
    want = draw(labels, torch.Generator().manual_seed(5))
    assert_same(got[0], want[0])
    assert_same(got[1], want[1])
    assert not torch.equal(got[0][0], got[1][0])  # two generators, two samples


def test_scripted_wrappers_raise_the_operator_errors():
    def bad(labels: Tensor, k: int, fraction: float):
        return syncfree.balanced_sample(labels, k, fraction)

    scripted = script(bad)
    with pytest.raises(RuntimeError, match="num_samples must be >= 0, got -1"):
        scripted(torch.zeros(2, 5, dtype=torch.long), -1, 0.5)
    with pytest.raises(RuntimeError, match=r"positive_fraction must be in \[0, 1\], got 1.5"):
        scripted(torch.zeros(2, 5, dtype=torch.long), 3, 1.5)
    with pytest.raises(RuntimeError, match="labels must be bool or an integer tensor .* got dtype Float"):
        scripted(torch.zeros(2, 5), 3, 0.5)


def test_detectron2_subsample_labels_scripts():
    scripted = script(sf_d2.subsample_labels)
    gen = torch.Generator().manual_seed(8)
    for n, num_classes in [(0, 3), (1, 3), (50, 1), (400, 80), (1000, 5)]:
        labels = torch.randint(-1, num_classes + 1, (n,), generator=gen)
        torch.manual_seed(n)
        got = scripted(labels, 128, 0.25, num_classes)
        torch.manual_seed(n)
        want = sf_d2.subsample_labels(labels, 128, 0.25, num_classes)
        assert_same(got, want)
        positive = (labels != -1) & (labels != num_classes)
        assert int(got[0].numel()) == min(int(positive.sum()), 32)
        assert bool(positive[got[0]].all()) and bool((labels[got[1]] == num_classes).all())


def test_detectron2_static_form_scripts():
    scripted = script(sf_d2.subsample_labels_static)
    labels = torch.randint(-1, 4, (3, 200), generator=torch.Generator().manual_seed(4))
    assert_same(scripted(labels, 32, 0.25, 3, seed=7), sf_d2.subsample_labels_static(labels, 32, 0.25, 3, seed=7))
    assert_same(scripted(labels, 32, 0.25, 3, None, torch.Generator().manual_seed(2)),
                 sf_d2.subsample_labels_static(labels, 32, 0.25, 3, generator=torch.Generator().manual_seed(2)))


def test_torchscript_function_calls_the_ops():
    @torch.jit.script
    def sample(labels: torch.Tensor, features: torch.Tensor):
        idx, valid = torch.ops.syncfree.balanced_sample(labels, 6, 0.5, seed=11)
        f, l, v = torch.ops.syncfree.balanced_sample_gather(features, labels, 6, seed=11)
        return idx, valid, f

    labels = torch.randint(0, 2, (2, 20))
    features = torch.randn(2, 20, 3)
    idx, valid, f = sample(labels, features)
    ref_idx, ref_valid = syncfree.balanced_sample(labels, 6, seed=11)
    assert torch.equal(idx, ref_idx) and torch.equal(valid, ref_valid)
    assert f.shape == (2, 6, 3)


def test_schema_is_the_documented_one():
    schema = str(torch.ops.syncfree.balanced_sample.default._schema)
    assert schema == (
        "syncfree::balanced_sample(Tensor labels, int num_samples, float positive_fraction=0.5, *, "
        "int negative_label=0, bool fill_positives=True, int? seed=None, Generator? generator=None) "
        "-> (Tensor indices, Tensor valid)"
    )
