"""CUDA backend: equality with the CPU, no host syncs, CUDA graphs, torch.compile.

Skipped without a CUDA device (and a CUDA build of syncfree)."""
import pytest
import torch

import syncfree
from checks import LABEL_DTYPES, check_sample, check_stratified

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DTYPES = LABEL_DTYPES


def labels_on(device, shape, dtype, gen):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool().to(device)
    low = 0 if dtype == torch.uint8 else -1
    return torch.randint(low, 3, shape, generator=gen).to(dtype).to(device)


@cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_equals_cpu_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(0)
    # 16384 / 16385: both sides of the one-launch limit of the kernels.
    for shape in [(1000,), (4, 300), (2, 3, 129), (2, 3 * 65536 + 17), (2, 3 * 8192 + 17), (3, 0), (64, 5), (2, 16384), (2, 16385)]:
        labels = labels_on("cpu", shape, dtype, gen)
        for K in [0, 1, 7, shape[-1] // 10 + 1, shape[-1] + 3]:
            for fill in [False, True]:
                for seed in [0, 12345, -7]:
                    kw = dict(fill_positives=fill, seed=seed)
                    ci, cv = syncfree.balanced_sample(labels, K, 0.3, **kw)
                    gi, gv = syncfree.balanced_sample(labels.cuda(), K, 0.3, **kw)
                    assert torch.equal(gi.cpu(), ci) and torch.equal(gv.cpu(), cv), (shape, K, fill, seed)


@cuda
def test_cuda_invariants_and_gather():
    gen = torch.Generator().manual_seed(1)
    labels = labels_on("cuda", (8, 5000), torch.int64, gen)
    idx, valid = syncfree.balanced_sample(labels, 300, 0.25)
    check_sample(labels.cpu(), idx.cpu(), valid.cpu(), 300, 0.25)
    features = torch.randn(8, 5000, 16, device="cuda", requires_grad=True)
    f, l, v = syncfree.balanced_sample_gather(features, labels, 300, 0.25, seed=3)
    cf, cl, cv = syncfree.balanced_sample_gather(features.detach().cpu(), labels.cpu(), 300, 0.25, seed=3)
    assert torch.equal(f.detach().cpu(), cf) and torch.equal(l.cpu(), cl) and torch.equal(v.cpu(), cv)
    f.sum().backward()
    assert features.grad is not None and float(features.grad.sum()) == float(v.sum()) * 16


@cuda
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.int8])
@pytest.mark.parametrize("F, strided", [((16,), False), ((3,), True), ((), False), ((2, 5), False), ((7,), False)])
def test_cuda_gather_equals_cpu(dtype, F, strided):
    gen = torch.Generator().manual_seed(2)
    labels = labels_on("cpu", (2, 3, 700), dtype, gen)
    features = torch.randn((2, 3) + F + (700,), generator=gen).movedim(-1, 2)
    if not strided:
        features = features.contiguous()
    for K in [1, 90, 800]:
        cpu = syncfree.balanced_sample_gather(features, labels, K, 0.4, seed=8)
        gpu = syncfree.balanced_sample_gather(features.cuda(), labels.cuda(), K, 0.4, seed=8)
        assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu)), (F, strided, K)
        # The generic ATen gather (for backends without a kernel) agrees on CUDA too.
        idx, valid = syncfree.balanced_sample(labels.cuda(), K, 0.4, seed=8)
        op = torch.ops.syncfree._gather_sampled.default
        generic = op._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, features.cuda(), labels.cuda(), idx, valid)
        assert all(torch.equal(g, c.cuda()) for g, c in zip(generic, cpu[:2]))


@cuda
def test_cuda_gather_of_padded_and_expanded_features():
    # Layouts the adapter passes to the kernel without a copy: items that are a
    # slice of wider rows (padded strides), and stride-0 (expanded) features.
    gen = torch.Generator().manual_seed(3)
    labels = labels_on("cpu", (3, 500), torch.int64, gen)
    wide = torch.randn(3, 500, 16, generator=gen)
    for features in [wide[..., :8], wide[..., 3:7], torch.randn(3, 1, 6, generator=gen).expand(3, 500, 6)]:
        cpu = syncfree.balanced_sample_gather(features, labels, 60, seed=2)
        gpu = syncfree.balanced_sample_gather(features.cuda(), labels.cuda(), 60, seed=2)
        assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu))


@cuda
def test_no_host_sync():
    labels = torch.randint(-1, 2, (4, 100000), device="cuda")
    features = torch.randn(4, 100000, 16, device="cuda")
    syncfree.balanced_sample_gather(features, labels, 1000)  # warm up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            syncfree.balanced_sample(labels, 1000)
            syncfree.balanced_sample(labels, 1000, seed=5)
            syncfree.balanced_sample_gather(features, labels, 1000)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@cuda
def test_generator_advances_by_a_fixed_amount_and_reproduces():
    labels = torch.randint(0, 2, (2, 1000), device="cuda")
    torch.cuda.manual_seed(3)
    a = [syncfree.balanced_sample(labels, 50)[0] for _ in range(2)]
    torch.cuda.manual_seed(3)
    b = [syncfree.balanced_sample(labels, 50)[0] for _ in range(2)]
    assert not torch.equal(a[0], a[1])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # The same advance whatever the data (here: a large call and an empty one).
    g1 = torch.Generator(device="cuda").manual_seed(9)
    g2 = torch.Generator(device="cuda").manual_seed(9)
    syncfree.balanced_sample(labels, 50, generator=g1)
    syncfree.balanced_sample(torch.zeros(0, device="cuda", dtype=torch.long), 0, generator=g2)
    assert torch.equal(g1.get_state(), g2.get_state())
    g3 = torch.Generator(device="cuda").manual_seed(9)
    assert not torch.equal(g1.get_state(), g3.get_state())


def torch_minor():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


# torch 2.14 and newer register every generator used during a capture with the
# graph (and deprecate register_generator_state); older releases need a
# generator other than the default one registered before the capture begins.
NEEDS_REGISTRATION = torch_minor() < (2, 14)


def graph_sampler(op, n):
    """(call(generator) -> (indices, valid), check(indices, valid)) of one sampler on CUDA labels."""
    if op == "balanced_sample":
        labels = torch.randint(-1, 2, (3, n), device="cuda")

        def call(gen):
            return syncfree.balanced_sample(labels, 300, 0.25, generator=gen)

        def check(idx, valid):
            check_sample(labels.cpu(), idx.cpu(), valid.cpu(), 300, 0.25)

        return call, check
    labels = torch.randint(-1, 4, (3, n), device="cuda")
    quota = torch.randint(0, 60, (3, 4), device="cuda")

    def call(gen):
        return syncfree.stratified_sample(labels, 300, quota, generator=gen)

    def check(idx, valid):
        check_stratified(labels.cpu(), quota.cpu(), 300, True, idx.cpu(), valid.cpu())

    return call, check


# balanced_sample: one launch, three launches; stratified_sample: its four launches.
@cuda
@pytest.mark.parametrize("op, n", [("balanced_sample", 10000), ("balanced_sample", 70000),
                                   ("stratified_sample", 20000)])
@pytest.mark.parametrize("kind", ["default", "explicit"])
def test_cuda_graph_replays_draw_fresh_samples_matching_eager(op, n, kind):
    sample, check = graph_sampler(op, n)
    torch.cuda.manual_seed(13)
    gen = torch.Generator(device="cuda").manual_seed(14) if kind == "explicit" else None

    def call():
        return sample(gen)

    def get_state():
        return gen.get_state() if gen is not None else torch.cuda.get_rng_state()

    def set_state(state):
        if gen is not None:
            gen.set_state(state)
        else:
            torch.cuda.set_rng_state(state)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    if gen is not None and NEEDS_REGISTRATION:
        graph.register_generator_state(gen)
    with torch.cuda.graph(graph):
        out_idx, out_valid = call()
    state = get_state()
    default_state = torch.cuda.get_rng_state()
    replays = []
    for _ in range(3):
        graph.replay()
        replays.append((out_idx.clone(), out_valid.clone()))
    # Fresh samples on every replay.
    assert not torch.equal(replays[0][0], replays[1][0]) and not torch.equal(replays[1][0], replays[2][0])
    if gen is not None:  # a graph drawing from another generator leaves the default one alone
        assert torch.equal(torch.cuda.get_rng_state(), default_state)
    for idx, valid in replays:
        check(idx, valid)
    # Eager calls from the same generator state draw the same samples.
    set_state(state)
    for idx, valid in replays:
        e_idx, e_valid = call()
        assert torch.equal(idx, e_idx) and torch.equal(valid, e_valid)


@cuda
def test_rejected_calls_leave_the_generators_unchanged():
    labels = torch.randint(-1, 2, (2, 100), device="cuda")
    # More than 2^31 - 1 blocks of work (rows * ceil(N / 8192)): rejected by
    # the CUDA backend itself. Neither tensor holds memory (empty, expanded).
    too_many_rows = torch.empty(2**31, 0, device="cuda", dtype=torch.int64)
    too_many_chunks = torch.zeros((), device="cuda", dtype=torch.int8).expand(2**30 + 1, 2 * 65536)
    rejected = [
        (lambda g: syncfree.balanced_sample(labels, -1, generator=g), "num_samples"),
        (lambda g: syncfree.balanced_sample(labels, 4, 1.5, generator=g), "positive_fraction"),
        (lambda g: syncfree.balanced_sample(labels, 4, negative_label=-1, generator=g), "negative_label"),
        (lambda g: syncfree.balanced_sample(labels.float(), 4, generator=g), "dtype"),
        (lambda g: syncfree.balanced_sample(too_many_rows, 1, generator=g), "too large"),
        (lambda g: syncfree.balanced_sample(too_many_chunks, 1, generator=g), "too large"),
        (lambda g: syncfree.balanced_sample_gather(too_many_chunks, too_many_chunks, 1, generator=g), "too large"),
    ]
    gen = torch.Generator(device="cuda").manual_seed(5)
    torch.cuda.manual_seed(6)
    gen_state, default_state = gen.get_state(), torch.cuda.get_rng_state()
    for g in [gen, None]:
        for call, message in rejected:
            with pytest.raises(RuntimeError, match=message):
                call(g)
        assert torch.equal(gen.get_state(), gen_state)
        assert torch.equal(torch.cuda.get_rng_state(), default_state)
    # A CPU generator for CUDA labels is rejected, and not drawn from.
    cpu_gen = torch.Generator().manual_seed(7)
    cpu_state = cpu_gen.get_state()
    with pytest.raises(RuntimeError, match="generator"):
        syncfree.balanced_sample(labels, 4, generator=cpu_gen)
    assert torch.equal(cpu_gen.get_state(), cpu_state)
    # An accepted call does advance them (the checks above are not vacuous).
    syncfree.balanced_sample(labels, 4, generator=gen)
    syncfree.balanced_sample(labels, 4)
    assert not torch.equal(gen.get_state(), gen_state)
    assert not torch.equal(torch.cuda.get_rng_state(), default_state)


@cuda
def test_cuda_graph_of_the_gather_with_long_rows():
    # Long rows take the three-launch path with a workspace from the allocator.
    labels = torch.randint(-1, 2, (2, 70000), device="cuda")
    features = torch.randn(2, 70000, 8, device="cuda")
    torch.cuda.manual_seed(12)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            syncfree.balanced_sample_gather(features, labels, 700)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = syncfree.balanced_sample_gather(features, labels, 700)
    state = torch.cuda.get_rng_state()
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append([t.clone() for t in out])
    torch.cuda.set_rng_state(state)
    for r in replays:
        e = syncfree.balanced_sample_gather(features, labels, 700)
        assert all(torch.equal(x, y) for x, y in zip(r, e))
    assert not torch.equal(replays[0][0], replays[1][0])


@cuda
@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile needs torch >= 2.0")
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_cuda_compile(mode):
    labels = torch.randint(-1, 2, (4, 5000), device="cuda")
    features = torch.randn(4, 5000, 8, device="cuda")

    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 64, 0.25, seed=2)
        return f.sum(-1), l

    compiled = torch.compile(step, fullgraph=True, mode=mode)
    for _ in range(3):
        a, la = compiled(features, labels)
    b, lb = step(features, labels)
    assert torch.allclose(a, b) and torch.equal(la, lb)


@cuda
@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile needs torch >= 2.0")
def test_cuda_compile_dynamic_shapes_with_backward():
    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 32, 0.25, seed=4)
        return (f * f).sum()

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for rows, n in [(4, 3000), (3, 1100), (5, 20000)]:
        labels = torch.randint(-1, 2, (rows, n), device="cuda")
        x = torch.randn(rows, n, 8, device="cuda", requires_grad=True)
        y = x.detach().clone().requires_grad_()
        compiled(x, labels).backward()
        step(y, labels).backward()
        assert torch.allclose(x.grad, y.grad)


@cuda
@pytest.mark.skipif(not hasattr(getattr(torch, "library", None), "opcheck"), reason="needs torch.library.opcheck")
def test_cuda_opcheck():
    labels = torch.randint(-1, 2, (3, 500), device="cuda")
    features = torch.randn(3, 500, 4, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.syncfree.balanced_sample.default, (labels, 16), {"seed": 1})
    torch.library.opcheck(torch.ops.syncfree.balanced_sample_gather.default, (features, labels, 16), {"seed": 1})
    idx, valid = syncfree.balanced_sample(labels, 16, seed=1)
    torch.library.opcheck(torch.ops.syncfree._gather_sampled.default, (features.detach(), labels, idx, valid))


# --- stratified_sample ----------------------------------------------------------


def class_labels_on(device, shape, C, dtype, gen):
    """Labels in [-2, C + 2) (some of no class), half of them in class 0 or 1."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool().to(device)
    low = 0 if dtype == torch.uint8 else -2
    labels = torch.randint(low, C + 2, shape, generator=gen)
    labels = torch.where(torch.rand(shape, generator=gen) < 0.5, labels.remainder(min(C, 2)), labels)
    return labels.to(dtype).to(device)


@cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_stratified_cuda_equals_cpu_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(20)
    # 2048: one sort tile of the kernels; 4096: one count tile; 70000: many of both.
    for shape in [(1000,), (4, 300), (2, 3, 129), (2, 70000), (3, 0), (64, 5), (2, 2049), (1, 4097)]:
        for C in [1, 2, 3, 21, 150]:
            if dtype == torch.bool and C > 3:
                continue
            labels = class_labels_on("cpu", shape, C, dtype, gen)
            for K in [0, 1, 7, shape[-1] // 10 + 1, shape[-1] + 3]:
                shared = torch.randint(-2, K // C + 3, (C,), generator=gen)
                per_row = torch.randint(-2, K + 3, shape[:-1] + (C,), generator=gen)
                for quota in (shared, per_row):
                    for fill in [False, True]:
                        for seed in [0, -7]:
                            kw = dict(fill=fill, seed=seed)
                            ci, cv = syncfree.stratified_sample(labels, K, quota, **kw)
                            gi, gv = syncfree.stratified_sample(labels.cuda(), K, quota.cuda(), **kw)
                            assert torch.equal(gi.cpu(), ci) and torch.equal(gv.cpu(), cv), (shape, C, K, fill, seed)


@cuda
@pytest.mark.parametrize("C", [1000, 3000, 9000])
def test_stratified_cuda_many_classes_equals_cpu(C):
    # Shared-memory and global paths of the count and plan kernels.
    gen = torch.Generator().manual_seed(21)
    labels = torch.randint(-1, C + 50, (3, 20000), generator=gen)
    quota = torch.randint(-1, 4, (3, C), generator=gen)
    for K in [1, 512, 4000, 20003]:
        for fill in [False, True]:
            ci, cv = syncfree.stratified_sample(labels, K, quota, fill, seed=3)
            gi, gv = syncfree.stratified_sample(labels.cuda(), K, quota.cuda(), fill, seed=3)
            assert torch.equal(gi.cpu(), ci) and torch.equal(gv.cpu(), cv), (C, K, fill)


@cuda
def test_stratified_cuda_list_quotas_strides_and_gather():
    gen = torch.Generator().manual_seed(22)
    base = class_labels_on("cpu", (8, 600), 4, torch.int64, gen)
    for labels in (base, base.t().contiguous().t(), base[:, ::2]):
        want = syncfree.stratified_sample(labels, 40, [10, 5, 0, 5], seed=4)
        got = syncfree.stratified_sample(labels.cuda(), 40, [10, 5, 0, 5], seed=4)
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    quota = torch.randint(0, 9, (4, 8), generator=gen).t()  # non-contiguous [8, 4]
    want = syncfree.stratified_sample(base, 30, quota, seed=5)
    got = syncfree.stratified_sample(base.cuda(), 30, quota.cuda(), seed=5)
    assert torch.equal(got[0].cpu(), want[0])
    features = torch.randn(8, 600, 16, generator=gen)
    cpu = syncfree.stratified_sample_gather(features, base, 40, [10, 5, 0, 5], seed=6)
    gpu = syncfree.stratified_sample_gather(features.cuda(), base.cuda(), 40, [10, 5, 0, 5], seed=6)
    assert all(torch.equal(g.cpu(), c) for g, c in zip(gpu, cpu))
    idx, valid = syncfree.stratified_sample(base.cuda(), 40, [10, 5, 0, 5], seed=6)
    f, l = syncfree.gather_sampled(features.cuda(), base.cuda(), idx, valid)
    assert torch.equal(f.cpu(), cpu[0]) and torch.equal(l.cpu(), cpu[1])


@cuda
def test_stratified_no_host_sync():
    labels = torch.randint(-1, 5, (4, 100000), device="cuda")
    quota = torch.tensor([100, 200, 0, 300, 50], device="cuda")
    many = torch.randint(0, 3, (4, 3000), device="cuda")
    features = torch.randn(4, 100000, 16, device="cuda")
    syncfree.stratified_sample_gather(features, labels, 1000, quota)  # warm up
    syncfree.stratified_sample(labels, 1000, [100, 200, 0, 300, 50])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            syncfree.stratified_sample(labels, 1000, quota)
            syncfree.stratified_sample(labels, 1000, quota, seed=5)
            syncfree.stratified_sample(labels, 1000, many, fill=False)
            syncfree.stratified_sample(labels, 1000, [100, 200, 0, 300, 50])
            syncfree.stratified_sample_gather(features, labels, 1000, quota)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@cuda
def test_stratified_generator_advances_like_balanced_sample():
    labels = torch.randint(0, 3, (2, 1000), device="cuda")
    quota = torch.tensor([20, 20, 10], device="cuda")
    torch.cuda.manual_seed(3)
    a = [syncfree.stratified_sample(labels, 50, quota)[0] for _ in range(2)]
    torch.cuda.manual_seed(3)
    b = [syncfree.stratified_sample(labels, 50, quota)[0] for _ in range(2)]
    assert not torch.equal(a[0], a[1])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # The same advance whatever the data, and the same as balanced_sample's.
    g1 = torch.Generator(device="cuda").manual_seed(9)
    g2 = torch.Generator(device="cuda").manual_seed(9)
    g3 = torch.Generator(device="cuda").manual_seed(9)
    syncfree.stratified_sample(labels, 50, quota, generator=g1)
    syncfree.stratified_sample(labels[:, :0], 0, quota, generator=g2)
    syncfree.balanced_sample(labels, 50, generator=g3)
    assert torch.equal(g1.get_state(), g2.get_state()) and torch.equal(g1.get_state(), g3.get_state())


@cuda
def test_stratified_rejected_calls_leave_the_generators_unchanged():
    labels = torch.randint(-1, 3, (2, 100), device="cuda")
    quota = torch.tensor([2, 2, 2], device="cuda")
    # Rejected by the CUDA backend itself: more than 2^31 - 1 rows (one block
    # each), and 2^31 - 1 classes (32-bit sort keys). No memory behind either.
    too_many_rows = torch.empty(2**31, 0, device="cuda", dtype=torch.int64)
    too_many_classes = torch.zeros((), device="cuda", dtype=torch.int64).expand(2**31 - 1)
    rejected = [
        (lambda g: syncfree.stratified_sample(labels, -1, quota, generator=g), "num_samples"),
        (lambda g: syncfree.stratified_sample(labels.float(), 4, quota, generator=g), "dtype"),
        (lambda g: syncfree.stratified_sample(labels, 4, quota.int(), generator=g), "int64"),
        (lambda g: syncfree.stratified_sample(labels, 4, quota.cpu(), generator=g), "device"),
        (lambda g: syncfree.stratified_sample(labels, 4, torch.zeros(3, 2, dtype=torch.int64, device="cuda"), generator=g), "shape"),
        (lambda g: syncfree.stratified_sample(too_many_rows, 1, quota, generator=g), "too large"),
        (lambda g: syncfree.stratified_sample(labels, 1, too_many_classes, generator=g), "too large"),
    ]
    gen = torch.Generator(device="cuda").manual_seed(5)
    torch.cuda.manual_seed(6)
    gen_state, default_state = gen.get_state(), torch.cuda.get_rng_state()
    for g in [gen, None]:
        for call, message in rejected:
            with pytest.raises(RuntimeError, match=message):
                call(g)
        assert torch.equal(gen.get_state(), gen_state)
        assert torch.equal(torch.cuda.get_rng_state(), default_state)
    cpu_gen = torch.Generator().manual_seed(7)
    cpu_state = cpu_gen.get_state()
    with pytest.raises(RuntimeError, match="generator"):
        syncfree.stratified_sample(labels, 4, quota, generator=cpu_gen)
    assert torch.equal(cpu_gen.get_state(), cpu_state)
    syncfree.stratified_sample(labels, 4, quota, generator=gen)
    syncfree.stratified_sample(labels, 4, quota)
    assert not torch.equal(gen.get_state(), gen_state)
    assert not torch.equal(torch.cuda.get_rng_state(), default_state)


@cuda
@pytest.mark.skipif(not hasattr(getattr(torch, "library", None), "opcheck"), reason="needs torch.library.opcheck")
def test_stratified_cuda_opcheck():
    labels = torch.randint(-1, 3, (3, 500), device="cuda")
    features = torch.randn(3, 500, 4, device="cuda", requires_grad=True)
    quota = torch.tensor([4, 4, 4], device="cuda")
    per_row = torch.randint(-1, 6, (3, 3), device="cuda")
    for q in (quota, per_row):
        torch.library.opcheck(torch.ops.syncfree.stratified_sample.default, (labels, 16, q), {"seed": 1})
    torch.library.opcheck(torch.ops.syncfree.stratified_sample_gather.default, (features, labels, 16, quota), {"seed": 1})
    idx, valid = syncfree.stratified_sample(labels, 16, quota, seed=1)
    torch.library.opcheck(torch.ops.syncfree.gather_sampled.default, (features, labels, idx, valid))
