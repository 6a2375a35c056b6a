"""The fused samplers with gather, syncfree.balanced_sample_gather and
syncfree.stratified_sample_gather (one kernel per backend: the internal
_balanced_sample_gather / _stratified_sample_gather, whose fourth output is
the indices), against the unfused composite they replace: the sampler
(balanced_sample / stratified_sample), then gather_sampled, with the same
seed or the same generator state. Bit for bit, on the CPU, over the label
dtypes, the feature dtypes and row widths (every copy path), layouts (views,
strides of 0, leading dimensions), sizes (K above the candidates, K = 0,
N = 0, no rows, a call split over threads), unseeded calls (the same draws,
the generator advanced as the sampler advances it), the internal ops
(indices, opcheck), gradients, errors (which name the public op and leave the
generator as it was), and the Python wrappers' fast path and quota cache."""

import pytest
import torch

import syncfree
import syncfree.ops as wrappers
from helpers.checks import LABEL_DTYPES, UNSIGNED_DTYPES, assert_same

OPS = torch.ops.syncfree
KINDS = ["balanced", "stratified"]
FEATURE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.complex64,
                  torch.bool]
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def dtype_id(v):
    return str(v).replace("torch.", "")


# --- inputs and the two ways of computing the same thing --------------------------


def make_labels(kind, dtype, shape, gen):
    """Labels valid for each dtype. balanced: ignored (-1, signed dtypes only),
    negatives (0), positives (1, 2). stratified: classes 0, 1 (the quota's),
    2 (no class of a 2-class quota: only the fill takes it) and -1 (signed)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    low = 0 if dtype in UNSIGNED_DTYPES or dtype == torch.uint8 else -1
    return torch.randint(low, 3, shape, generator=gen).to(dtype)


def make_features(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype == torch.int64:
        return torch.randint(-2**40, 2**40, shape, generator=gen)
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, shape, generator=gen).to(dtype)


def option(kind, K):
    """The op's third argument: positive_fraction, or class_quota (a list)."""
    return 0.25 if kind == "balanced" else [K // 3, K // 3]


def fused(kind, features, labels, K, opt, **kw):
    op = syncfree.balanced_sample_gather if kind == "balanced" else syncfree.stratified_sample_gather
    return op(features, labels, K, opt, **kw)


def internal(kind, features, labels, K, opt, **kw):
    if kind == "balanced":
        return OPS._balanced_sample_gather(features, labels, K, opt, **kw)
    return OPS._stratified_sample_gather(features, labels, K, torch.tensor(opt, dtype=torch.int64), **kw)


def reference(kind, features, labels, K, opt, **kw):
    """The unfused composite: ((sampled_features, sampled_labels, valid), indices)."""
    sampler = syncfree.balanced_sample if kind == "balanced" else syncfree.stratified_sample
    idx, valid = sampler(labels, K, opt, **kw)
    f, l = syncfree.gather_sampled(features, labels, idx, valid)
    return (f, l, valid), idx


def check_fused(kind, features, labels, K, opt=None, **kw):
    """The public op, the internal op and the composite agree exactly (each
    seeded call with kw's seed); returns the composite's outputs and indices."""
    if opt is None:
        opt = option(kind, K)
    want, idx = reference(kind, features, labels, K, opt, **kw)
    got = fused(kind, features, labels, K, opt, **kw)
    assert_same(got, want)
    full = internal(kind, features, labels, K, opt, **kw)
    assert len(full) == 4
    assert_same(full, tuple(want) + (idx,))
    # Invalid slots: zero features, label -1, index -1.
    f, l, v = want
    assert bool((l[~v] == -1).all()) and bool((idx[~v] == -1).all())
    zeros = torch.zeros((), dtype=f.dtype)
    assert bool((f[~v] == zeros).all())
    return want, idx


# --- 1. label dtypes ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", LABEL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", KINDS)
def test_label_dtypes(kind, dtype):
    gen = torch.Generator().manual_seed(1)
    labels = make_labels(kind, dtype, (3, 50), gen)
    features = torch.randn(3, 50, 4, generator=gen)
    for K in (20, 70):  # 70: more slots than candidates
        (f, l, v), idx = check_fused(kind, features, labels, K, seed=3)
        if K == 70:
            assert not bool(v.all())
        # The sampled labels are the labels of the sampled items, as int64.
        assert torch.equal(l[v], labels.to(torch.int64).gather(-1, idx.clamp_min(0))[v])


# A negative's gathered label is the negative label: the balanced CPU
# kernel reads at most the positives' labels (none where they carry one
# label, in contiguous rows beyond 512 KiB:
# test_rows_whose_positives_carry_one_label)
# and writes the negatives' (RowGather::classes, cpu/common.h). Rows whose labels are taken to be
# cached (up to 1 MiB, kCachedLabelBytes in cpu/balanced_sample_cpu.h): every
# label dtype, negative labels that its values reach and that they cannot
# (above the dtype's range: no item is negative). Rows beyond (about twice
# the limit, several chunks each, the strided row just over it; on two
# threads, two rows run whole, and one row or three are compacted in a phase
# of their own): 64-, 32-bit and bool labels, a strided row, one to three
# rows. Both: rows of several batches of slots (256) with a last partial
# batch, invalid slots after the valid ones, one thread and two.
def check_negative_labels(labels, negative_label, Ks):
    gen = torch.Generator().manual_seed(5)
    features = torch.randn(labels.shape + (3,), generator=gen)
    known = 0 if labels.dtype == torch.bool else negative_label
    reachable = labels.dtype == torch.bool or negative_label <= torch.iinfo(labels.dtype).max
    threads = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            for K, fill in Ks:
                kw = dict(negative_label=negative_label, fill_positives=fill, seed=K + t)
                (f, l, v), idx = check_fused("balanced", features, labels, K, 0.5, **kw)
                negative = labels.to(torch.int64).gather(-1, idx.clamp_min(0)) == known
                assert bool((l[v & negative] == known).all())
                assert bool((v & ~negative).any())
                assert bool((v & negative).any()) == reachable
                if K > labels.shape[-1]:
                    assert not bool(v.all())
    finally:
        torch.set_num_threads(threads)


def labels_with_negatives(dtype, shape, negative_label, gen):
    labels = make_labels("balanced", dtype, shape, gen)
    if dtype != torch.bool and negative_label <= torch.iinfo(dtype).max:  # some items carry it
        labels[..., ::7] = negative_label
    return labels


@pytest.mark.parametrize("negative_label", [0, 1, 2, 200, 300, 2**40], ids=str)
@pytest.mark.parametrize("dtype", LABEL_DTYPES, ids=dtype_id)
def test_negative_labels_of_cached_rows(dtype, negative_label):
    gen = torch.Generator().manual_seed(negative_label % 97)
    labels = labels_with_negatives(dtype, (3, 1500), negative_label, gen)
    check_negative_labels(labels, negative_label, ((777, True), (1400, False), (1600, True)))


@pytest.mark.parametrize("dtype, n", [(torch.int64, 270_000), (torch.uint64, 270_000),
                                      (torch.int32, 540_000), (torch.bool, 2_200_000)], ids=str)
@pytest.mark.parametrize("negative_label", [0, 2, 300], ids=str)
def test_negative_labels_of_rows_beyond_the_cache(dtype, n, negative_label):
    gen = torch.Generator().manual_seed(11)
    labels = labels_with_negatives(dtype, (2, n), negative_label, gen)
    check_negative_labels(labels, negative_label, ((3001, True), (n + 5, False)))
    if dtype == torch.int64:
        # One row and three (other splits of the work over two threads).
        check_negative_labels(labels[0], negative_label, ((n + 5, True),))
        three = labels_with_negatives(dtype, (3, n), negative_label, gen)
        check_negative_labels(three, negative_label, ((2000, True),))
        # A strided row: 135,000 int64 labels (1.08 MB) every other one.
        strided = labels_with_negatives(dtype, (2, n), negative_label, gen)[:, ::2]
        check_negative_labels(strided, negative_label, ((2999, True),))


# Rows of labels beyond 512 KiB (kFoldLabelBytes, cpu/balanced_sample_cpu.h):
# where a vector path compacts them (contiguous labels), the balanced CPU
# kernel folds their positives' labels as it compacts them,
# and where they are one label writes it rather than reading each sampled
# positive's (RowGather::classes, cpu/common.h). One label, at the dtype's
# extremes (its maximum, 2**40, uint64 above 2**63) or 1; the same rows with
# one positive differing in one bit (so the labels must be read), in the
# first chunk of 65536 labels, in the second, or last of all; three rows,
# the middle one of another single label than the others (a row given
# another row's fold would show in every positive sampled); a strided row
# (compacted by the scalar loop, and not folded); one thread and two.
def as_int64(value):
    """A label as an int64 holds it (uint64 above 2**63: its bits)."""
    return value - 2**64 if value >= 2**63 else value


def one_label_rows(dtype, shape, value, gen):
    """Labels -1 (signed dtypes; else 0), 0 and `value`."""
    base = torch.randint(-1 if dtype.is_signed else 0, 2, shape, generator=gen)
    if dtype == torch.bool:
        return base > 0
    labels = torch.where(base > 0, torch.full((), as_int64(value)), base)
    return labels.view(torch.uint64) if dtype == torch.uint64 else labels.to(dtype)


def set_label(labels, at, value):
    if labels.dtype == torch.uint64:
        labels.view(torch.int64)[at] = as_int64(value)
    else:
        labels[at] = value


@pytest.mark.parametrize("dtype, n, value", [
    (torch.int64, 100_000, 2**40), (torch.int64, 70_000, 1), (torch.uint64, 70_000, 2**63 + 5),
    (torch.int32, 140_000, 2**31 - 1), (torch.uint16, 300_000, 2**16 - 1),
    (torch.int16, 300_000, 7),
    (torch.uint8, 600_000, 255), (torch.int8, 600_000, 127), (torch.bool, 600_000, 1)], ids=str)
def test_rows_whose_positives_carry_one_label(dtype, n, value):
    gen = torch.Generator().manual_seed(13)
    threads = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            labels = one_label_rows(dtype, (n,), value, gen)
            features = torch.randn(n, 2, generator=gen)
            (f, l, v), idx = check_fused("balanced", features, labels, n // 10, 0.5, seed=t)
            positive = v & (labels.to(torch.int64)[idx.clamp_min(0)] != 0)  # valid: never -1
            assert bool(positive.any()) and bool((l[positive] == as_int64(value)).all())
            if dtype == torch.bool:
                continue
            other = value ^ 2  # one bit apart, still a positive
            for at in (10, 65_536 + 5, n - 1):  # the first chunk, the second, the last label
                differing = labels.clone()
                set_label(differing, at, other)
                # K = n: every positive sampled, the differing one included.
                (f, l, v), idx = check_fused("balanced", features, differing, n, 0.5, seed=at)
                assert int((l == as_int64(other)).sum()) == 1
            three = one_label_rows(dtype, (3, n), value, gen)
            three[1] = one_label_rows(dtype, (n,), other, gen)
            (f, l, v), idx = check_fused("balanced", torch.randn(3, n, 2, generator=gen), three, 4001, 0.5,
                                         seed=t)
            positive = v & (three.to(torch.int64).gather(-1, idx.clamp_min(0)) != 0)
            assert bool(positive[1].any()) and bool((l[1][positive[1]] == as_int64(other)).all())
            assert bool((l[0::2][positive[0::2]] == as_int64(value)).all())
            strided = one_label_rows(dtype, (2 * n,), value, gen)[::2]
            check_fused("balanced", features, strided, 3001, 0.5, seed=t)
    finally:
        torch.set_num_threads(threads)


# --- 2. feature dtypes and row widths: every copy path ---------------------------------

# Row bytes for float32: 0, 4, 4, 8, 12, 16, 24, 32, 64, 128; times 2, 1/2, 1/4
# and 8/4 for the other dtypes (every fixed width, and odd ones, memcpy).
FEATURE_SHAPES = [(0,), (), (1,), (2,), (3,), (4,), (2, 3), (8,), (16,), (32,), (5,)]


@pytest.mark.parametrize("F", FEATURE_SHAPES, ids=str)
@pytest.mark.parametrize("fdtype", FEATURE_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", KINDS)
def test_feature_dtypes_and_widths(kind, fdtype, F):
    gen = torch.Generator().manual_seed(2)
    labels = make_labels(kind, torch.int64, (2, 40), gen)
    features = make_features((2, 40) + F, fdtype, gen)
    (f, _, v), idx = check_fused(kind, features, labels, 30, seed=5)
    assert f.shape == (2, 30) + F and f.dtype == fdtype
    # And the rows are the sampled rows (a manual gather).
    for b in range(2):
        for s in range(30):
            if v[b, s]:
                assert torch.equal(f[b, s], features[b, idx[b, s]])


@pytest.mark.parametrize("kind", KINDS)
def test_wide_rows_and_small_elements_over_threads(kind):
    # Rows of 1, 2, 7 and 48 bytes (int8, uint8, int16, complex128), and rows
    # of 2400 bytes: few slots per work unit, several units per row.
    gen = torch.Generator().manual_seed(21)
    labels = make_labels(kind, torch.int64, (2, 1500), gen)
    cases = [((600,), torch.float32), ((7,), torch.int8), ((1,), torch.uint8), ((2,), torch.int16),
             ((3,), torch.complex128)]
    threads = torch.get_num_threads()
    for F, fdtype in cases:
        features = make_features((2, 1500) + F, fdtype, gen)
        try:
            for n_threads in (1, 2):
                torch.set_num_threads(n_threads)
                check_fused(kind, features, labels, 1000, seed=2)
        finally:
            torch.set_num_threads(threads)


# --- 3. layouts ------------------------------------------------------------------------


@pytest.mark.parametrize("lead", [(), (3,), (2, 2)], ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_non_contiguous_features(kind, lead):
    gen = torch.Generator().manual_seed(3)
    N, K = 37, 25
    labels = make_labels(kind, torch.int32, lead + (N,), gen)
    views = {
        "transposed": torch.randn(lead + (4, N), generator=gen).movedim(-1, len(lead)),
        "sliced": torch.randn(lead + (N, 8), generator=gen)[..., ::2],
        "sliced-narrow": torch.randn(lead + (N, 5), generator=gen, dtype=torch.float64)[..., 1:4],
        "expanded-items": torch.randn(lead + (1, 3), generator=gen).expand(lead + (N, 3)),
        "expanded-features": torch.randn(lead + (N, 1), generator=gen).expand(lead + (N, 6)),
    }
    # Lazy conjugation and negation: resolved before the kernel.
    views["conj"] = torch.randn(lead + (N, 2), generator=gen, dtype=torch.complex64).conj()
    if lead:
        views["expanded-rows"] = torch.randn((1,) * len(lead) + (N, 2), generator=gen).expand(lead + (N, 2))
    for name, features in views.items():
        assert not features.is_contiguous() or name == "conj", name
        want, _ = check_fused(kind, features, labels, K, seed=4)
        got_dense = fused(kind, features.resolve_conj().contiguous(), labels, K, option(kind, K), seed=4)
        assert_same(got_dense, want)
    negated = torch._neg_view(torch.randn(lead + (N, 3), generator=gen))
    want, _ = check_fused(kind, negated, labels, K, seed=4)
    assert_same(fused(kind, negated.resolve_neg(), labels, K, option(kind, K), seed=4), want)


@pytest.mark.parametrize("lead", [(), (3,), (2, 2)], ids=str)
@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool], ids=dtype_id)
@pytest.mark.parametrize("kind", KINDS)
def test_non_contiguous_labels(kind, dtype, lead):
    gen = torch.Generator().manual_seed(4)
    N, K = 41, 16
    labels = make_labels(kind, dtype, lead + (2 * N,), gen)[..., ::2]
    assert not labels.is_contiguous()
    features = torch.randn(lead + (N, 3), generator=gen)
    want, _ = check_fused(kind, features, labels, K, seed=6)
    assert_same(fused(kind, features, labels.contiguous(), K, option(kind, K), seed=6), want)
    # Both non-contiguous, labels transposed too.
    if len(lead) == 1:
        t_labels = make_labels(kind, dtype, (N,) + lead, gen).t()
        t_features = torch.randn((N,) + lead + (3,), generator=gen).transpose(0, 1)
        check_fused(kind, t_features, t_labels, K, seed=6)


# --- 4. sizes --------------------------------------------------------------------------


@pytest.mark.parametrize("lead, N, K", [
    ((3,), 10, 30),     # K above the candidates: invalid slots
    ((2, 2), 5, 0),     # K = 0
    ((), 0, 7),         # N = 0: every slot invalid
    ((3,), 0, 4),
    ((2, 3), 0, 0),
    ((0,), 9, 4),       # no rows
    ((2, 0), 9, 4),
    ((0,), 0, 0),
], ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_edge_sizes(kind, lead, N, K):
    gen = torch.Generator().manual_seed(5)
    labels = make_labels(kind, torch.int64, lead + (N,), gen)
    features = torch.randn(lead + (N, 3), generator=gen)
    (f, l, v), idx = check_fused(kind, features, labels, K, seed=7)
    assert f.shape == lead + (K, 3) and l.shape == lead + (K,) and v.shape == lead + (K,)
    if N == 0:
        assert not bool(v.any()) and bool((f == 0).all()) and bool((l == -1).all())
    if N and K > N:
        assert bool((~v).any())
    # Unseeded too: nothing or everything invalid is the same, and draws the same.
    g1, g2 = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    got = fused(kind, features, labels, K, option(kind, K), generator=g1)
    want, _ = reference(kind, features, labels, K, option(kind, K), generator=g2)
    assert_same(got, want)
    assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.parametrize("kind", KINDS)
def test_large_call_over_threads(kind):
    # N = 1e5, K = 1e4, 3 rows, 64-byte feature rows: several slot blocks per
    # row, phases split over the threads; the results do not depend on them.
    gen = torch.Generator().manual_seed(6)
    B, N, K = 3, 100_000, 10_000
    labels = make_labels(kind, torch.int64, (B, N), gen)
    features = torch.randn(B, N, 16, generator=gen)
    opt = option(kind, K)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fused(kind, features, labels, K, opt, seed=9)
        one_full = internal(kind, features, labels, K, opt, seed=9)
        torch.set_num_threads(2)
        two = fused(kind, features, labels, K, opt, seed=9)
        two_full = internal(kind, features, labels, K, opt, seed=9)
        want, idx = reference(kind, features, labels, K, opt, seed=9)
    finally:
        torch.set_num_threads(threads)
    assert_same(one, want)
    assert_same(two, want)
    assert_same(one_full, tuple(want) + (idx,))
    assert_same(two_full, tuple(want) + (idx,))
    assert bool(want[2].all())


# --- 5. unseeded calls --------------------------------------------------------------------


def draw(generator=None):
    return torch.randint(0, 2**62, (4,), generator=generator)


@pytest.mark.parametrize("kind", KINDS)
def test_unseeded_with_generator(kind):
    gen = torch.Generator().manual_seed(7)
    labels = make_labels(kind, torch.int16, (2, 3, 60), gen)
    features = torch.randn(2, 3, 60, 5, generator=gen)
    K = 24
    opt = option(kind, K)
    for s in (0, 11):
        g_fused, g_ref, g_int = (torch.Generator().manual_seed(s) for _ in range(3))
        got = [fused(kind, features, labels, K, opt, generator=g_fused) for _ in range(2)]
        ref = [reference(kind, features, labels, K, opt, generator=g_ref) for _ in range(2)]
        full = [internal(kind, features, labels, K, opt, generator=g_int) for _ in range(2)]
        for a, (b, idx), c in zip(got, ref, full):
            assert_same(a, b)
            assert_same(c, tuple(b) + (idx,))
        assert not torch.equal(got[0][0], got[1][0])  # the generator moved on
        assert torch.equal(g_fused.get_state(), g_ref.get_state())
        assert torch.equal(g_int.get_state(), g_ref.get_state())
        assert torch.equal(draw(g_fused), draw(g_ref))


@pytest.mark.parametrize("kind", KINDS)
def test_unseeded_default_generator(kind):
    gen = torch.Generator().manual_seed(8)
    labels = make_labels(kind, torch.uint8, (3, 45), gen)
    features = torch.randn(3, 45, 2, generator=gen)
    K = 18
    opt = option(kind, K)
    state = torch.get_rng_state()
    try:
        torch.manual_seed(21)
        got = fused(kind, features, labels, K, opt)  # the wrappers' fast path
        got_kw = fused(kind, features, labels, K, opt, seed=None, generator=None)
        got_next = draw()
        torch.manual_seed(21)
        want, _ = reference(kind, features, labels, K, opt)
        want_kw, _ = reference(kind, features, labels, K, opt)
        want_next = draw()
        torch.manual_seed(21)
        full = internal(kind, features, labels, K, opt)
        full_kw = internal(kind, features, labels, K, opt)
        full_next = draw()
    finally:
        torch.set_rng_state(state)
    assert_same(got, want)
    assert_same(got_kw, want_kw)
    assert_same(full[:3], want)
    assert_same(full_kw[:3], want_kw)
    assert torch.equal(got_next, want_next) and torch.equal(full_next, want_next)


# --- 6. the internal ops ---------------------------------------------------------------------


def test_internal_balanced_op():
    gen = torch.Generator().manual_seed(9)
    labels = make_labels("balanced", torch.int64, (4, 30), gen)
    features = torch.randn(4, 30, 3, generator=gen)
    K = 12
    out = OPS._balanced_sample_gather(features, labels, K, 0.5, seed=3)
    assert isinstance(out, tuple) and len(out) == 4 and all(isinstance(t, torch.Tensor) for t in out)
    idx, valid = syncfree.balanced_sample(labels, K, 0.5, seed=3)
    assert out[3].dtype == torch.int64 and torch.equal(out[3], idx) and torch.equal(out[2], valid)
    assert_same(syncfree.balanced_sample_gather(features, labels, K, 0.5, seed=3), out[:3])
    assert_same(OPS.balanced_sample_gather(features, labels, K, 0.5, seed=3), out[:3])
    # Every option.
    kw = dict(negative_label=1, fill_positives=False, seed=4)
    out = OPS._balanced_sample_gather(features, labels, 40, 0.75, **kw)
    idx, valid = OPS.balanced_sample(labels, 40, 0.75, **kw)
    assert torch.equal(out[3], idx) and torch.equal(out[2], valid)
    assert_same(OPS.balanced_sample_gather(features, labels, 40, 0.75, **kw), out[:3])


def test_internal_stratified_op():
    gen = torch.Generator().manual_seed(10)
    labels = make_labels("stratified", torch.int64, (4, 30), gen)
    features = torch.randn(4, 30, 3, generator=gen)
    K = 12
    quota = torch.tensor([4, 4])
    out = OPS._stratified_sample_gather(features, labels, K, quota, seed=3)
    assert isinstance(out, tuple) and len(out) == 4 and all(isinstance(t, torch.Tensor) for t in out)
    idx, valid = syncfree.stratified_sample(labels, K, quota, seed=3)
    assert out[3].dtype == torch.int64 and torch.equal(out[3], idx) and torch.equal(out[2], valid)
    assert_same(syncfree.stratified_sample_gather(features, labels, K, quota, seed=3), out[:3])
    assert_same(syncfree.stratified_sample_gather(features, labels, K, [4, 4], seed=3), out[:3])
    # Per-row quotas (data: negative, or above K in sum), without fill.
    row_quota = torch.tensor([[2, 3, 1], [-1, 5, 0], [20, 20, 20], [0, 0, 0]])
    for fill in (True, False):
        out = OPS._stratified_sample_gather(features, labels, K, row_quota, fill=fill, seed=5)
        idx, valid = OPS.stratified_sample(labels, K, row_quota, fill=fill, seed=5)
        assert torch.equal(out[3], idx) and torch.equal(out[2], valid)
        assert_same(OPS.stratified_sample_gather(features, labels, K, row_quota, fill=fill, seed=5), out[:3])
        want = syncfree.gather_sampled(features, labels, idx, valid)
        assert_same(out[:2], want)


# --- 7. gradients -----------------------------------------------------------------------------


@pytest.mark.parametrize("lead, F", [((), (4,)), ((3,), ()), ((2, 2), (2, 3)), ((3,), (16,))], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_id)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_equal_the_composite(kind, dtype, lead, F):
    gen = torch.Generator().manual_seed(11)
    N, K = 20, 26  # more slots than candidates: some invalid
    labels = make_labels(kind, torch.int64, lead + (N,), gen)
    base = torch.randn(lead + (N,) + F, generator=gen, dtype=dtype)
    opt = option(kind, K)
    features = base.clone().requires_grad_()
    f, l, v = fused(kind, features, labels, K, opt, seed=12)
    assert f.requires_grad and f.grad_fn is not None
    assert not l.requires_grad and not v.requires_grad
    weights = torch.randn(f.shape, generator=gen, dtype=dtype)
    (f * weights).sum().backward()
    ref_features = base.clone().requires_grad_()
    (rf, rl, rv), idx = reference(kind, ref_features, labels, K, opt, seed=12)
    (rf * weights).sum().backward()
    assert_same((f, l, v), (rf, rl, rv))
    assert torch.equal(features.grad, ref_features.grad)
    assert bool((~v).any())
    # Each sampled row gets its slot's weight exactly once (no index twice in
    # a row), the others nothing; invalid slots give nothing.
    B = v.numel() // K
    grad = features.grad.reshape((B, N) + F)
    w, i, ok = weights.reshape((B, K) + F), idx.reshape(B, K), v.reshape(B, K)
    for b in range(B):
        chosen = set()
        for s in range(K):
            if ok[b, s]:
                assert torch.equal(grad[b, i[b, s]], w[b, s])
                chosen.add(int(i[b, s]))
        for n in set(range(N)) - chosen:
            assert bool((grad[b, n] == 0).all())


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_unseeded_and_through_views(kind):
    gen = torch.Generator().manual_seed(12)
    labels = make_labels(kind, torch.int8, (3, 25), gen)
    base = torch.randn(3, 4, 25, generator=gen)
    K = 15
    opt = option(kind, K)
    leaf = base.clone().requires_grad_()
    g = torch.Generator().manual_seed(13)
    f, _, v = fused(kind, leaf.transpose(1, 2), labels, K, opt, generator=g)
    weights = torch.randn(f.shape, generator=gen)
    (f * weights).sum().backward()
    ref_leaf = base.clone().requires_grad_()
    g = torch.Generator().manual_seed(13)
    (rf, _, rv), _ = reference(kind, ref_leaf.transpose(1, 2), labels, K, opt, generator=g)
    (rf * weights).sum().backward()
    assert torch.equal(f, rf) and torch.equal(v, rv)
    assert torch.equal(leaf.grad, ref_leaf.grad)
    # Through an expand (stride 0) of a smaller leaf: its gradient sums the rows'.
    small = torch.randn(1, 25, 2, generator=gen)
    leafs = [small.clone().requires_grad_() for _ in range(2)]
    outs = [fused(kind, leafs[0].expand(3, 25, 2), labels, K, opt, seed=3)[0],
            reference(kind, leafs[1].expand(3, 25, 2), labels, K, opt, seed=3)[0][0]]
    weights = torch.randn(outs[0].shape, generator=gen)
    for out in outs:
        (out * weights).sum().backward()
    assert torch.equal(outs[0], outs[1]) and torch.equal(leafs[0].grad, leafs[1].grad)
    # Only the sampled-features output is differentiable: a gradient through
    # it alone, with autograd.grad.
    leaf2 = base.clone().requires_grad_()
    f2, _, _ = fused(kind, leaf2.transpose(1, 2), labels, K, opt, seed=2)
    (grad,) = torch.autograd.grad(f2.sum(), leaf2)
    idx, valid = (syncfree.balanced_sample(labels, K, opt, seed=2) if kind == "balanced"
                  else syncfree.stratified_sample(labels, K, opt, seed=2))
    counts = torch.zeros(3, 25)
    counts.scatter_add_(1, idx.clamp_min(0), valid.float())
    assert torch.equal(grad, counts.unsqueeze(1).expand(3, 4, 25))


@pytest.mark.parametrize("kind", KINDS)
def test_no_grad_fn_without_gradients(kind):
    gen = torch.Generator().manual_seed(13)
    labels = make_labels(kind, torch.int64, (2, 20), gen)
    features = torch.randn(2, 20, 3, generator=gen)
    K = 9
    opt = option(kind, K)
    out = fused(kind, features, labels, K, opt, seed=1)
    assert all(t.grad_fn is None and not t.requires_grad for t in out)
    leaf = features.clone().requires_grad_()
    with torch.no_grad():
        out_ng = fused(kind, leaf, labels, K, opt, seed=1)
    assert all(t.grad_fn is None and not t.requires_grad for t in out_ng)
    assert_same(out_ng, out)
    out_g = fused(kind, leaf, labels, K, opt, seed=1)
    assert out_g[0].grad_fn is not None and out_g[0].requires_grad
    assert not out_g[1].requires_grad and not out_g[2].requires_grad
    assert_same([t.detach() for t in out_g], out)
    with torch.inference_mode():
        assert_same(fused(kind, leaf, labels, K, opt, seed=1), out)


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck(kind):
    gen = torch.Generator().manual_seed(14)
    labels = make_labels(kind, torch.int64, (2, 9), gen)
    features = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    K = 11
    opt = option(kind, K)
    assert torch.autograd.gradcheck(lambda x: fused(kind, x, labels, K, opt, seed=4)[0], (features,))
    assert torch.autograd.gradgradcheck(lambda x: fused(kind, x, labels, K, opt, seed=4)[0], (features,))


# --- 8. errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_errors_name_the_public_op(kind):
    name = f"{kind}_sample_gather"
    prefix = rf"^syncfree\.{name}: "
    labels = torch.tensor([[0, 1, 2, 1, 0]])
    features = torch.randn(1, 5, 2)
    opt = option(kind, 3)
    calls = [fused, internal]
    for call in calls:
        with pytest.raises(RuntimeError, match=prefix + r"features must have shape \[\.\.\., N, \*F\]"):
            call(kind, torch.randn(1, 6, 2), labels, 3, opt, seed=1)
        with pytest.raises(RuntimeError, match=prefix + r"features must have shape \[\.\.\., N, \*F\]"):
            call(kind, torch.randn(2, 5, 2), labels, 3, opt, seed=1)  # mismatched leading dims
        with pytest.raises(RuntimeError, match=prefix + r"features must have shape \[\.\.\., N, \*F\]"):
            call(kind, torch.randn(5), labels, 3, opt, seed=1)  # fewer dimensions than labels
        with pytest.raises(RuntimeError, match=prefix + r"labels must be bool or an integer tensor"):
            call(kind, features, labels.float(), 3, opt, seed=1)
        with pytest.raises(RuntimeError, match=prefix + r"features and labels must be on the same device, "
                                                    r"got features on meta and labels on cpu"):
            call(kind, torch.empty(1, 5, 2, device="meta"), labels, 3, opt, seed=1)
        with pytest.raises(RuntimeError, match=prefix + r"num_samples must be >= 0, got -1"):
            call(kind, features, labels, -1, opt, seed=1)
        with pytest.raises(RuntimeError, match=prefix + r"seed and generator are mutually exclusive"):
            call(kind, features, labels, 3, opt, seed=1, generator=torch.Generator())
    if kind == "balanced":
        for call in calls:
            with pytest.raises(RuntimeError, match=prefix + r"positive_fraction must be in \[0, 1\], got 1\.5"):
                call(kind, features, labels, 3, 1.5, seed=1)
            with pytest.raises(RuntimeError, match=prefix + r"negative_label must be >= 0"):
                call(kind, features, labels, 3, 0.5, negative_label=-2, seed=1)
    else:
        for quota in (torch.tensor([1, 1], dtype=torch.int32), torch.tensor([[1, 1], [1, 1]]),
                      torch.zeros(0, dtype=torch.int64)):
            for op in (OPS.stratified_sample_gather, OPS._stratified_sample_gather,
                       syncfree.stratified_sample_gather):
                with pytest.raises(RuntimeError, match=prefix + r"class_quota must"):
                    op(features, labels, 3, quota, seed=1)
        with pytest.raises(ValueError, match=prefix + r"the sum of class_quota must be <= num_samples \(3\)"):
            syncfree.stratified_sample_gather(features, labels, 3, [2, 2])
        with pytest.raises(TypeError, match=prefix + r"num_samples must be an int, got float"):
            syncfree.stratified_sample_gather(features, labels, 3.0, [1, 1])
    with pytest.raises(TypeError, match=prefix + r"features must be a torch.Tensor, got list"):
        fused(kind, [[1.0]], labels, 3, opt)


@pytest.mark.parametrize("kind", KINDS)
def test_rejected_call_leaves_the_generator(kind):
    labels = torch.tensor([[0, 1, 2, 1, 0], [1, 1, 0, 0, 2]])
    features = torch.randn(2, 5, 2)
    opt = option(kind, 3)
    # Inputs made here: nothing in the calls below draws but the op.
    wrong_n, wrong_rows, float_labels = torch.randn(2, 6, 2), torch.randn(3, 5, 2), labels.float()
    meta_features = torch.empty(2, 5, 2, device="meta")
    bad_calls = [
        lambda **kw: fused(kind, wrong_n, labels, 3, opt, **kw),
        lambda **kw: fused(kind, wrong_rows, labels, 3, opt, **kw),
        lambda **kw: fused(kind, features, float_labels, 3, opt, **kw),
        lambda **kw: internal(kind, wrong_n, labels, 3, opt, **kw),
        lambda **kw: fused(kind, meta_features, labels, 3, opt, **kw),
    ]
    if kind == "balanced":
        bad_calls.append(lambda **kw: fused(kind, features, labels, 3, 1.5, **kw))
        bad_calls.append(lambda **kw: internal(kind, features, labels, 3, -0.5, **kw))
    else:
        int32_quota = torch.tensor([1, 1], dtype=torch.int32)
        bad_calls.append(lambda **kw: fused(kind, features, labels, 3, int32_quota, **kw))
        bad_calls.append(lambda **kw: fused(kind, features, labels, 3, [4], **kw))
    for i, bad in enumerate(bad_calls):
        g = torch.Generator().manual_seed(3)
        before = g.get_state()
        with pytest.raises((RuntimeError, ValueError)):
            bad(generator=g)
        assert torch.equal(g.get_state(), before), i
        assert torch.equal(draw(g), draw(torch.Generator().manual_seed(3))), i
        state = torch.get_rng_state()
        try:
            torch.manual_seed(5)
            with pytest.raises((RuntimeError, ValueError)):
                bad()
            got = draw()
            torch.manual_seed(5)
            assert torch.equal(got, draw()), i
        finally:
            torch.set_rng_state(state)


# --- 9. opcheck --------------------------------------------------------------------------------


def internal_opcheck(kind, features, labels, K, opt, kwargs, test_utils=ALL_TESTS):
    if kind == "balanced":
        op, args = OPS._balanced_sample_gather.default, (features, labels, K, opt)
    else:
        op, args = OPS._stratified_sample_gather.default, (features, labels, K, opt)
    torch.library.opcheck(op, args, kwargs, test_utils=test_utils)


@pytest.mark.parametrize("lead, N, K", [((), 13, 5), ((3,), 13, 40), ((2, 3), 13, 4), ((3,), 0, 5),
                                        ((2, 2), 13, 0), ((0,), 13, 5)], ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_opcheck_internal_ops(kind, lead, N, K):
    gen = torch.Generator().manual_seed(15)
    for dtype, fdtype in ((torch.int64, torch.float32), (torch.bool, torch.float64), (torch.uint16, torch.int32)):
        labels = make_labels(kind, dtype, lead + (N,), gen)
        # The internal ops run below autograd (the public ops' autograd kernels
        # call them): checked on features without gradients.
        features = make_features(lead + (N, 2), fdtype, gen)
        if kind == "balanced":
            internal_opcheck(kind, features, labels, K, 0.25,
                             {"seed": 7, "negative_label": 0 if dtype == torch.bool else 1,
                              "fill_positives": dtype != torch.uint16})
        else:
            internal_opcheck(kind, features, labels, K, torch.tensor([2, 1]), {"seed": 7})
            row_quota = torch.randint(-1, 4, lead + (3,), generator=gen)
            internal_opcheck(kind, features, labels, K, row_quota, {"seed": 7, "fill": False})


@pytest.mark.parametrize("kind", KINDS)
def test_opcheck_internal_ops_unseeded(kind):
    # test_aot_dispatch_dynamic reseeds the default generator before each of
    # its eager and traced runs: the unseeded call is checked too.
    gen = torch.Generator().manual_seed(16)
    labels = make_labels(kind, torch.int64, (3, 30), gen)
    features = torch.randn(3, 30, 4, generator=gen)
    opt = 0.5 if kind == "balanced" else torch.tensor([3, 3])
    internal_opcheck(kind, features, labels, 8, opt, {})
    # An explicit generator object is shared by the eager and the traced runs:
    # the other checks only.
    internal_opcheck(kind, features, labels, 8, opt, {"generator": torch.Generator().manual_seed(0)},
                     test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


@pytest.mark.parametrize("kind", KINDS)
def test_opcheck_public_ops_with_gradients(kind):
    # The public ops' opcheck (every option, dtypes) is in balanced_sample/ and
    # stratified_sample/test_torch2.py; here features that need gradients, with
    # leading dimensions and per-row quotas.
    gen = torch.Generator().manual_seed(17)
    labels = make_labels(kind, torch.int32, (2, 3, 20), gen)
    features = torch.randn(2, 3, 20, 2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    if kind == "balanced":
        torch.library.opcheck(OPS.balanced_sample_gather.default, (features, labels, 30, 0.25),
                              {"seed": 3, "fill_positives": False}, test_utils=ALL_TESTS)
    else:
        row_quota = torch.randint(0, 6, (2, 3, 2), generator=gen)
        torch.library.opcheck(OPS.stratified_sample_gather.default, (features, labels, 30, row_quota),
                              {"seed": 3}, test_utils=ALL_TESTS)


# --- 10. the Python wrappers --------------------------------------------------------------------


class Index:
    """An int-like object (__index__ only), as numpy ints and SymInts are."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def int_likes(value):
    out = [value, Index(value)]
    try:
        import numpy
    except ImportError:
        return out
    return out + [numpy.int64(value), numpy.int32(value)]


def test_balanced_wrapper_argument_forms():
    gen = torch.Generator().manual_seed(18)
    labels = make_labels("balanced", torch.int64, (3, 40), gen)
    features = torch.randn(3, 40, 3, generator=gen)
    wrap = syncfree.balanced_sample_gather
    # Seeded: every form of the same call equals the operator's.
    for frac in (0.25, 0, 1):
        for neg in (0, 2):
            for fill in (True, False):
                want = OPS.balanced_sample_gather(features, labels, 16, float(frac), negative_label=neg,
                                                  fill_positives=fill, seed=5)
                forms = [
                    wrap(features, labels, 16, frac, neg, fill, 5),
                    wrap(features, labels, 16, frac, neg, fill, 5, None),
                    wrap(features, labels, num_samples=16, positive_fraction=frac, negative_label=neg,
                         fill_positives=fill, seed=5),
                    wrap(features=features, labels=labels, num_samples=16, positive_fraction=frac,
                         negative_label=neg, fill_positives=fill, seed=5, generator=None),
                ]
                forms += [wrap(features, labels, k, frac, n, fill, s)
                          for k, n, s in zip(int_likes(16), int_likes(neg), int_likes(5))]
                for got in forms:
                    assert_same(got, want)
                full = OPS._balanced_sample_gather(features, labels, 16, float(frac), negative_label=neg,
                                                   fill_positives=fill, seed=5)
                assert_same(full[:3], want)
    # Unseeded: the fast path (positional, plain types) and the keyword path
    # draw as the operator does from the same state.
    state = torch.get_rng_state()
    try:
        calls = [
            lambda: wrap(features, labels, 16, 0.25),
            lambda: wrap(features, labels, 16, 0.25, 0),
            lambda: wrap(features, labels, 16, 0.25, negative_label=0),
            lambda: wrap(features, labels, 16, 0.25, 0, True),
            lambda: wrap(features, labels, Index(16), 0.25),
            lambda: wrap(features, labels, 16, positive_fraction=0.25, generator=None, seed=None),
        ]
        results = []
        for call in calls:
            torch.manual_seed(31)
            results.append((call(), draw()))
        torch.manual_seed(31)
        want = OPS.balanced_sample_gather(features, labels, 16, 0.25)
        want_next = draw()
        for got, got_next in results:
            assert_same(got, want)
            assert torch.equal(got_next, want_next)
        torch.manual_seed(31)
        plain_default = wrap(features, labels, 16)
        torch.manual_seed(31)
        assert_same(plain_default, OPS.balanced_sample_gather(features, labels, 16, 0.5))
        for neg, fill in ((2, True), (0, False)):
            torch.manual_seed(31)
            got = wrap(features, labels, 16, 0.25, neg, fill)
            torch.manual_seed(31)
            assert_same(got, OPS.balanced_sample_gather(features, labels, 16, 0.25, negative_label=neg,
                                                        fill_positives=fill))
    finally:
        torch.set_rng_state(state)
    # Wrong Python types: TypeError naming the op.
    for bad in (dict(num_samples=True), dict(num_samples=16.0), dict(positive_fraction=True),
                dict(positive_fraction="0.5"), dict(negative_label=False), dict(fill_positives=1),
                dict(seed=True), dict(seed=1.0), dict(generator=3)):
        kw = dict(num_samples=16, positive_fraction=0.5)
        kw.update(bad)
        with pytest.raises(TypeError, match=r"^syncfree\.balanced_sample_gather: "):
            wrap(features, labels, **kw)
    with pytest.raises(OverflowError, match=r"^syncfree\.balanced_sample_gather: num_samples must fit in int64"):
        wrap(features, labels, 2**63)


def test_stratified_wrapper_argument_forms():
    gen = torch.Generator().manual_seed(19)
    labels = make_labels("stratified", torch.int64, (3, 40), gen)
    features = torch.randn(3, 40, 3, generator=gen)
    wrap = syncfree.stratified_sample_gather
    for fill in (True, False):
        want = OPS.stratified_sample_gather(features, labels, 16, torch.tensor([5, 4]), fill=fill, seed=5)
        forms = [
            wrap(features, labels, 16, [5, 4], fill, 5),
            wrap(features, labels, 16, (5, 4), fill, 5),
            wrap(features, labels, 16, torch.tensor([5, 4]), fill, 5),
            wrap(features, labels, 16, [Index(5), 4], fill, 5),
            wrap(features, labels, num_samples=16, class_quota=[5, 4], fill=fill, seed=5, generator=None),
        ]
        forms += [wrap(features, labels, k, [q, 4], fill, s)
                  for k, q, s in zip(int_likes(16), int_likes(5), int_likes(5))]
        for got in forms:
            assert_same(got, want)
    state = torch.get_rng_state()
    try:
        results = []
        for quota in ([5, 4], (5, 4), torch.tensor([5, 4])):
            torch.manual_seed(32)
            results.append((wrap(features, labels, 16, quota), draw()))
            torch.manual_seed(32)
            results.append((wrap(features, labels, 16, quota, True, None, None), draw()))
        torch.manual_seed(32)
        want = OPS.stratified_sample_gather(features, labels, 16, torch.tensor([5, 4]))
        want_next = draw()
        for got, got_next in results:
            assert_same(got, want)
            assert torch.equal(got_next, want_next)
    finally:
        torch.set_rng_state(state)


@pytest.mark.parametrize("op_name", ["stratified_sample_gather", "stratified_sample"])
def test_quota_cache_is_keyed_by_value(op_name):
    gen = torch.Generator().manual_seed(20)
    labels = make_labels("stratified", torch.int64, (2, 50), gen)
    features = torch.randn(2, 50, 2, generator=gen)
    public = getattr(syncfree, op_name)
    raw = getattr(OPS, op_name)
    args = (features, labels) if op_name == "stratified_sample_gather" else (labels,)

    def call(K, quota):
        return public(*args, K, quota, seed=6)

    def want(K, quota):
        return raw(*args, K, torch.tensor(quota, dtype=torch.int64), seed=6)

    quota = [6, 2]
    first = call(12, quota)
    assert_same(first, want(12, [6, 2]))
    assert ((6, 2), 12) in wrappers._QUOTAS
    # The same list object mutated: the new values, not the cached tensor.
    quota[0] = 1
    quota.append(3)
    second = call(12, quota)
    assert_same(second, want(12, [1, 2, 3]))
    assert not torch.equal(first[-1], second[-1]) or not torch.equal(first[0], second[0])
    assert wrappers._QUOTAS[((6, 2), 12)][0].tolist() == [6, 2]  # the cached tensors are never written
    quota[:] = [6, 2]
    assert_same(call(12, quota), first)
    # The key holds K: a list that was valid for 12 is checked again for 7.
    with pytest.raises(ValueError, match=rf"^syncfree\.{op_name}: the sum of class_quota must be <= num_samples \(7\)"):
        call(7, [6, 2])
    # Bools and floats are never ints, even when an equal int list is cached
    # ((True, 0) == (1, 0) and hash alike).
    assert_same(call(12, [1, 0]), want(12, [1, 0]))
    assert ((1, 0), 12) in wrappers._QUOTAS
    for bad in ([True, 0], [1, False], [1.0, 0], (1.0, 0), [1, 0.0]):
        for _ in range(2):
            with pytest.raises(TypeError, match=rf"^syncfree\.{op_name}: class_quota\[\d\] must be an int, got "):
                call(12, bad)
    for bad in ("ab", 3, None):
        with pytest.raises(TypeError, match=rf"^syncfree\.{op_name}: class_quota must be a sequence of ints"):
            call(12, bad)
    # Lists that fail the value check raise every time (never cached).
    for bad, message in (([10, 5], r"the sum of class_quota must be <= num_samples \(12\)"),
                         ([-1, 2], r"class_quota\[0\] must be >= 0, got -1"),
                         ([3, -4], r"class_quota\[1\] must be >= 0, got -4"),
                         ([], r"class_quota must hold at least one class")):
        for _ in range(3):
            with pytest.raises(ValueError, match=rf"^syncfree\.{op_name}: {message}"):
                call(12, bad)
            with pytest.raises(ValueError, match=rf"^syncfree\.{op_name}: {message}"):
                call(12, tuple(bad))
        assert (tuple(bad), 12) not in wrappers._QUOTAS
    # A list of int-likes is not cached, but checked and used by value.
    assert_same(call(12, [Index(4), Index(4)]), want(12, [4, 4]))
    with pytest.raises(ValueError, match=rf"^syncfree\.{op_name}: the sum of class_quota"):
        call(12, [Index(10), Index(5)])


def test_quota_cache_is_bounded():
    labels = torch.zeros(1, 4, dtype=torch.int64)
    features = torch.zeros(1, 4, 1)
    saved = dict(wrappers._QUOTAS)
    try:
        for q in range(wrappers._QUOTAS_MAX + 5):
            syncfree.stratified_sample_gather(features, labels, 1000, [q], seed=0)
            assert len(wrappers._QUOTAS) <= wrappers._QUOTAS_MAX
        f, l, v = syncfree.stratified_sample_gather(features, labels, 3, [2], seed=0)
        assert v.tolist() == [[True, True, True]]  # fill takes the third
    finally:
        wrappers._QUOTAS.clear()
        wrappers._QUOTAS.update(saved)


# --- the quota cache under modes ------------------------------------------------------------

def test_quota_lists_under_make_fx_and_a_default_device():
    # A mode (make_fx's, FakeTensorMode, a default device) neither fills the
    # quota cache nor takes a tensor from it: the list is made into a tensor
    # under the mode, as before the cache.
    from torch.fx.experimental.proxy_tensor import make_fx

    labels = torch.tensor([[0, 1, 2, 1, 0, 2, 2, 1]])
    want = syncfree.stratified_sample(labels, 4, [1, 1, 2], seed=3)  # fills the cache
    for mode in ["real", "fake", "symbolic"]:
        graph = make_fx(lambda l: syncfree.stratified_sample(l, l.shape[-1] // 2, [1, 1, 2], seed=3),
                        tracing_mode=mode)(labels)
        got = graph(labels)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), mode
    syncfree.ops._QUOTAS.clear()
    with torch.device("meta"):
        idx, valid = syncfree.stratified_sample(labels.to("meta"), 4, [1, 1, 2], seed=3)
    assert idx.device.type == "meta" and idx.shape == (1, 4)
    got = syncfree.stratified_sample(labels, 4, [1, 1, 2], seed=3)  # a CPU call after the meta one
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_quota_list_with_an_unhashable_num_samples():
    class K:  # an int-like without a hash (it defines __eq__)
        def __index__(self):
            return 4

        def __eq__(self, other):
            return other == 4

    labels = torch.tensor([[0, 1, 2, 1, 0, 2, 2, 1]])
    got = syncfree.stratified_sample(labels, K(), [1, 1, 2], seed=3)
    want = syncfree.stratified_sample(labels, 4, [1, 1, 2], seed=3)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
