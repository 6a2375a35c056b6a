"""syncfree.compact: values against torch.nonzero_static and nonzero, shapes,
strides, dtypes, bad inputs, TorchScript; the CUDA backend against the CPU
(marked cuda).
"""
import math
import os

import pytest
import torch

import syncfree
import syncfree._build_info as info

OPS = torch.ops.syncfree
MASK_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
               torch.uint16, torch.uint32, torch.uint64]
# ATen's "barebones" dtypes: few ATen kernels take them (no where, nonzero or
# comparison), so the tests build them, and read them, through int64; the
# cast keeps zero as zero and nonzero as nonzero.
BAREBONES = (torch.uint16, torch.uint32, torch.uint64)
DENSITIES = [0.0, 0.01, 0.1, 0.5, 0.9, 1.0]


def random_mask(shape, density, dtype=torch.bool, gen=None):
    """A mask with about `density` of its elements true; integer masks hold
    assorted nonzero values (negative ones too where the dtype has them)."""
    on = torch.rand(shape, generator=gen) < density
    if dtype == torch.bool:
        return on
    # Unsigned masks get large values too (2^15 .. 2^16 - 1 fits every one).
    low, high = (0, 100) if dtype == torch.uint8 else (1 << 15, 1 << 16) if dtype in BAREBONES else (-100, 100)
    values = torch.randint(low, high, shape, generator=gen)
    values = torch.where(values == 0, torch.ones((), dtype=values.dtype), values)
    return torch.where(on, values, torch.zeros((), dtype=values.dtype)).to(dtype)


def readable(mask):
    """The mask as reference ops take it: barebones dtypes through int64."""
    return mask.to(torch.int64) if mask.dtype in BAREBONES else mask


def reference(mask, k):
    """Row by row: torch.nonzero_static (padded with -1), torch.nonzero + padding,
    and the count, written independently of the operator."""
    lead = tuple(mask.shape[:-1])
    rows = mask.reshape(-1, mask.shape[-1]) if mask.shape[-1] else torch.zeros(math.prod(lead), 0, dtype=mask.dtype)
    idx_static, idx_nonzero, counts = [], [], []
    for row in rows:
        idx_static.append(torch.nonzero_static(row, size=k, fill_value=-1).squeeze(1))
        nz = torch.nonzero(row).squeeze(1)[:k]
        idx_nonzero.append(torch.cat([nz, torch.full((k - nz.numel(),), -1, dtype=torch.int64)]))
        counts.append(int((row != 0).sum()))
    shape = lead + (k,)
    if not idx_static:
        empty = torch.empty(shape, dtype=torch.int64)
        return empty, empty.clone(), torch.empty(lead, dtype=torch.int64)
    return (torch.stack(idx_static).reshape(shape), torch.stack(idx_nonzero).reshape(shape),
            torch.tensor(counts, dtype=torch.int64).reshape(lead))


def check(mask, k):
    """compact(mask, k) equals the references exactly; returns the outputs."""
    indices, valid, count = syncfree.compact(mask, k)
    lead = tuple(mask.shape[:-1])
    assert indices.shape == lead + (k,) and valid.shape == lead + (k,) and count.shape == lead
    assert indices.dtype == torch.int64 and valid.dtype == torch.bool and count.dtype == torch.int64
    want_static, want_nonzero, want_count = reference(readable(mask.cpu()), k)
    assert torch.equal(indices.cpu(), want_static)
    assert torch.equal(indices.cpu(), want_nonzero)
    assert torch.equal(count.cpu(), want_count)
    assert torch.equal(count.cpu(), (readable(mask.cpu()) != 0).sum(-1))
    slots = torch.arange(k).expand(lead + (k,))
    assert torch.equal(valid.cpu(), slots < want_count.clamp(max=k).unsqueeze(-1))
    assert torch.equal(valid, indices >= 0)
    return indices, valid, count


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("n", [1, 5, 100, 1000, 65536, 65537, 3 * 65536 + 17])
def test_equals_nonzero_static_per_row(n, density):
    gen = torch.Generator().manual_seed(n)
    mask = random_mask((3, n), density, gen=gen)
    true_count = int(mask.sum(-1).max())
    for k in sorted({0, 1, 7, n // 2, true_count, max(true_count - 1, 0), n, n + 5}):
        check(mask, k)
        check(mask[1:2], k)  # one row: long rows are split over threads


@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_integer_masks_count_nonzero_as_true(dtype):
    gen = torch.Generator().manual_seed(1)
    for n, density in [(300, 0.3), (70000, 0.05), (70000, 0.99)]:
        mask = random_mask((2, n), density, dtype, gen)
        for k in [0, 3, 200, n + 1]:
            check(mask, k)


def test_extreme_integer_values_are_true():
    for dtype in MASK_DTYPES[1:]:
        info_ = torch.iinfo(dtype)
        # Built through int64 (barebones dtypes: two's complement, uint64's
        # maximum is -1 there).
        values = [0, info_.min, 0, info_.max if dtype != torch.uint64 else -1, 1, 0]
        # Only high bits set: a kernel that narrowed the value before testing
        # it would read these as zero.
        values += {torch.uint16: [1 << 8, 1 << 15], torch.uint32: [1 << 16, 1 << 31],
                   torch.uint64: [1 << 32, -(1 << 63)], torch.int16: [1 << 8], torch.int32: [1 << 16],
                   torch.int64: [1 << 32, -(1 << 63)]}.get(dtype, []) + [0]
        mask = torch.tensor(values, dtype=torch.int64).to(dtype)
        want = [i for i, v in enumerate(values) if v != 0]
        k = len(values)
        indices, valid, count = syncfree.compact(mask, k)
        assert indices.tolist() == want + [-1] * (k - len(want))
        assert int(count) == len(want)


def test_one_dimensional_mask_is_nonzero_static():
    gen = torch.Generator().manual_seed(2)
    for n, density in [(0, 0.5), (1, 1.0), (17, 0.5), (5000, 0.02), (200000, 0.3)]:
        mask = random_mask((n,), density, gen=gen)
        for k in [0, 1, 10, n + 3]:
            indices, valid, count = check(mask, k)
            assert count.dim() == 0
            assert torch.equal(indices, torch.nonzero_static(mask, size=k).squeeze(1))


def test_count_can_exceed_size(device):
    mask = torch.ones(4, 1000, dtype=torch.bool, device=device)
    indices, valid, count = syncfree.compact(mask, 10)
    assert count.tolist() == [1000] * 4
    assert torch.equal(indices, torch.arange(10, device=device).expand(4, 10)) and bool(valid.all())


def test_all_false_and_all_true_rows(device):
    for n in [10, 70000]:
        mask = torch.zeros(3, n, dtype=torch.bool, device=device)
        mask[1] = True
        indices, valid, count = check(mask, 20)
        assert count.tolist() == [0, n, 0]
        assert indices[0].tolist() == [-1] * 20
        assert indices[1].tolist() == list(range(min(n, 20))) + [-1] * max(20 - n, 0)


@pytest.mark.parametrize("lead", [(), (1,), (5,), (2, 3), (2, 1, 3), (0,), (2, 0), (0, 3)])
def test_batch_equals_per_row(lead):
    gen = torch.Generator().manual_seed(3)
    mask = random_mask(lead + (257,), 0.2, gen=gen)
    indices, valid, count = check(mask, 40)
    flat = mask.reshape(-1, 257)
    for r in range(flat.shape[0]):
        i, v, c = syncfree.compact(flat[r], 40)
        assert torch.equal(indices.reshape(-1, 40)[r], i)
        assert torch.equal(valid.reshape(-1, 40)[r], v)
        assert torch.equal(count.reshape(-1)[r], c)


def test_empty_rows_and_no_rows(device):
    for shape in [(3, 0), (0,), (2, 4, 0), (0, 5), (0, 0)]:
        for k in [0, 4]:
            mask = torch.zeros(shape, dtype=torch.bool, device=device)
            indices, valid, count = check(mask, k)
            assert not bool(valid.any()) and bool((indices == -1).all())


@pytest.mark.parametrize("n", [300, 70000, 3 * 65536 + 5])
def test_strides(n):
    gen = torch.Generator().manual_seed(4)
    base = random_mask((4, n), 0.1, torch.int32, gen)
    views = {
        "transposed": base.t().contiguous().t(),
        "step 2 along N": random_mask((4, 2 * n), 0.1, torch.int32, gen)[:, ::2],
        "step along rows": random_mask((8, n), 0.1, torch.int32, gen)[::2],
        "expanded row": base[:1].expand(5, n),
        "expanded element": torch.ones((), dtype=torch.int32).expand(3, n),
        "3-d, non-contiguous leading": random_mask((3, 4, n), 0.1, torch.int32, gen).transpose(0, 1),
        "offset slice": base[:, 1:],
    }
    for name, view in views.items():
        for k in [0, 5, n // 3, n + 1]:
            got = syncfree.compact(view, k)
            want = syncfree.compact(view.contiguous(), k)
            for g, w in zip(got, want):
                assert torch.equal(g, w), (name, k)
            check(view, k)


def test_results_do_not_depend_on_the_thread_count():
    # One thread: one pass per row; four: the long rows (fewer than the
    # threads) are cut into chunks counted and written in parallel.
    gen = torch.Generator().manual_seed(5)
    masks = [random_mask((3, 5 * 65536 + 11), 0.3, gen=gen), random_mask((1, 300000), 0.01, gen=gen),
             random_mask((300, 500), 0.3, gen=gen)]
    sizes = [70000, 2000, 100]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [syncfree.compact(m, k) for m, k in zip(masks, sizes)]
        torch.set_num_threads(4)
        many = [syncfree.compact(m, k) for m, k in zip(masks, sizes)]
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, many):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


def test_meta_shapes():
    mask = torch.empty(2, 3, 50, dtype=torch.bool, device="meta")
    indices, valid, count = syncfree.compact(mask, 7)
    assert indices.shape == (2, 3, 7) and indices.dtype == torch.int64 and indices.is_meta
    assert valid.shape == (2, 3, 7) and valid.dtype == torch.bool
    assert count.shape == (2, 3) and count.dtype == torch.int64


def test_no_autograd_and_outputs_do_not_require_grad():
    mask = torch.tensor([1, 0, 1], dtype=torch.int64)
    with torch.enable_grad():
        outs = syncfree.compact(mask, 2)
    assert not any(o.requires_grad for o in outs)


def test_operator_and_wrapper_agree():
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert [t.tolist() for t in OPS.compact(mask, 2)] == [t.tolist() for t in syncfree.compact(mask, 2)]


def test_torchscript():
    @torch.jit.script
    def f(mask: torch.Tensor, k: int):
        return syncfree.compact(mask, k)

    gen = torch.Generator().manual_seed(6)
    mask = random_mask((3, 100), 0.3, gen=gen)
    for got, want in zip(f(mask, 20), syncfree.compact(mask, 20)):
        assert torch.equal(got, want)


@pytest.mark.registration
def test_kernels_registered_as_built():
    for key in ["CPU", "Meta"]:
        assert torch._C._dispatch_has_kernel_for_dispatch_key("syncfree::compact", key)
    # A CUDA kernel always: the real one, or (a build without the CUDA operator)
    # the one that says how to rebuild (python/syncfree/_without_cuda.py).
    assert torch._C._dispatch_has_kernel_for_dispatch_key("syncfree::compact", "CUDA")
    cuda_line = [l for l in torch._C._dispatch_dump_table("syncfree::compact").splitlines()
                 if l.startswith("CUDA:")]
    assert len(cuda_line) == 1, cuda_line
    assert ("_cuda.cpp:" if info.CUDA_OPERATOR else "_without_cuda.py") in cuda_line[0], cuda_line
    expected = os.environ.get("SYNCFREE_EXPECT_CUDA_OPERATOR")
    if expected is not None:
        assert info.CUDA_OPERATOR == (expected == "1")


# --- bad inputs -----------------------------------------------------------------

BAD = [
    (lambda: syncfree.compact(torch.zeros(2, 10), 3), r"^syncfree\.compact: mask must be bool or an integer tensor .*got dtype Float"),
    (lambda: syncfree.compact(torch.zeros(10, dtype=torch.float16), 3), r"^syncfree\.compact: mask must be bool or an integer tensor .*Half"),
    (lambda: syncfree.compact(torch.zeros(10, dtype=torch.complex64), 3), r"^syncfree\.compact: mask must be bool or an integer"),
    (lambda: syncfree.compact(torch.tensor(True), 3), r"^syncfree\.compact: mask must have at least 1 dimension .*got a 0-dim tensor"),
    (lambda: syncfree.compact(torch.ones(3, dtype=torch.bool), -1), r"^syncfree\.compact: size must be >= 0, got -1"),
    (lambda: syncfree.compact(torch.ones(4, 3, dtype=torch.bool), 2**62), r"^syncfree\.compact: the output would have 4 x 4611686018427387904 elements, more than int64 can index"),
    (lambda: syncfree.compact(None, 3), r"^syncfree\.compact: mask must be a torch\.Tensor, got NoneType"),
    (lambda: syncfree.compact([True, False], 3), r"^syncfree\.compact: mask must be a torch\.Tensor, got list"),
    (lambda: syncfree.compact(torch.ones(3, dtype=torch.bool), 2.5), r"^syncfree\.compact: size must be an int, got float"),
    (lambda: syncfree.compact(torch.ones(3, dtype=torch.bool), None), r"^syncfree\.compact: size must be an int, got NoneType"),
    (lambda: syncfree.compact(torch.ones(3, dtype=torch.bool), True), r"^syncfree\.compact: size must be an int, got bool"),
    (lambda: OPS.compact(torch.zeros(3, dtype=torch.float64), 1), r"^syncfree\.compact: mask must be bool or an integer tensor .*Double"),
    (lambda: OPS.compact(torch.empty(3, 4, device="meta"), 1), r"^syncfree\.compact: mask must be bool or an integer tensor .*Float"),
    (lambda: OPS.compact(torch.ones(3, dtype=torch.bool), -5), r"^syncfree\.compact: size must be >= 0, got -5"),
]


def test_outputs_too_large_for_memory():
    """An allocation that fails is an OutOfMemoryError naming the op and the
    argument: 2^40 slots need 9 TB for the indices."""
    with pytest.raises(torch.OutOfMemoryError,
                       match=r"^syncfree\.compact: size = 1099511627776 for mask of shape \[10\] needs "
                             r"8796093022208 bytes for indices on cpu, more than could be allocated"):
        syncfree.compact(torch.ones(10, dtype=torch.bool), 2**40)


@pytest.mark.parametrize("call, pattern", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_inputs_name_the_op_and_the_argument(call, pattern):
    with pytest.raises((RuntimeError, TypeError, ValueError), match=pattern):
        call()


# --- CUDA equals the CPU ---------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_cuda_equals_cpu(dtype):
    gen = torch.Generator().manual_seed(7)
    # 16384 / 16385: both sides of the one-launch limit; 8192: the chunk.
    for shape in [(1000,), (4, 300), (2, 3, 129), (3, 0), (64, 5), (2, 16384), (2, 16385),
                  (2, 3 * 8192 + 17), (1, 1000000), (0, 7)]:
        for density in [0.0, 0.01, 0.5, 1.0]:
            mask = random_mask(shape, density, dtype, gen)
            for k in sorted({0, 1, 7, shape[-1] // 10 + 1, shape[-1] + 3}):
                got = syncfree.compact(mask.cuda(), k)
                want = syncfree.compact(mask, k)
                for g, w in zip(got, want):
                    assert g.is_cuda and torch.equal(g.cpu(), w), (shape, density, k)


@pytest.mark.cuda
def test_cuda_strides():
    gen = torch.Generator().manual_seed(8)
    base = random_mask((4, 2 * 40000), 0.2, torch.int16, gen).cuda()
    for view in [base[:, ::2], base.t().contiguous().t(), base[:1].expand(3, -1), base[::2, 5:]]:
        for k in [0, 10, 30000]:
            got = syncfree.compact(view, k)
            want = syncfree.compact(view.cpu(), k)
            for g, w in zip(got, want):
                assert torch.equal(g.cpu(), w)
