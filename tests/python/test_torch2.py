"""Features that exist only on torch 2.x: skipped with a reason on torch 1.13."""
import pytest
import torch

import syncfree

needs_compile = pytest.mark.skipif(
    not hasattr(torch, "compile"), reason=f"torch.compile needs torch >= 2.0 (this is {torch.__version__})"
)
needs_opcheck = pytest.mark.skipif(
    not hasattr(getattr(torch, "library", None), "opcheck"),
    reason=f"torch.library.opcheck needs torch >= 2.4 (this is {torch.__version__})",
)


@needs_opcheck
@pytest.mark.parametrize("shape", [(50,), (3, 50)])
def test_opcheck(shape):
    labels = torch.randint(-1, 2, shape)
    features = torch.randn(shape + (4,), requires_grad=True)
    torch.library.opcheck(torch.ops.syncfree.balanced_sample.default, (labels, 8), {"seed": 1})
    torch.library.opcheck(torch.ops.syncfree.balanced_sample_gather.default, (features, labels, 8),
                          {"seed": 1})
    idx, valid = syncfree.balanced_sample(labels, 8, seed=1)
    torch.library.opcheck(torch.ops.syncfree._gather_sampled.default, (features.detach(), labels, idx, valid))


@needs_compile
def test_compile_fullgraph_matches_eager():
    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 16, 0.25, seed=5)
        return (f.sum(-1) * v).sum(), l

    labels = torch.randint(-1, 2, (4, 200))
    features = torch.randn(4, 200, 8)
    compiled = torch.compile(step, fullgraph=True)
    a, la = compiled(features, labels)
    b, lb = step(features, labels)
    assert torch.allclose(a, b) and torch.equal(la, lb)


@needs_compile
def test_compile_draws_from_the_generator_like_eager():
    labels = torch.randint(0, 2, (2, 300))

    def draw(labels):
        return syncfree.balanced_sample(labels, 10)[0]

    compiled = torch.compile(draw, fullgraph=True)
    torch.manual_seed(3)
    eager = [draw(labels) for _ in range(2)]
    torch.manual_seed(3)
    comp = [compiled(labels) for _ in range(2)]
    assert not torch.equal(eager[0], eager[1])
    for e, c in zip(eager, comp):
        assert torch.equal(e, c)


@needs_compile
def test_compile_dynamic_shapes_forward_and_backward():
    # dynamic=True traces with symbolic sizes (what torch.compile switches to
    # when shapes change between calls): one graph serves every N and batch.
    def step(features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 8, 0.5, seed=6)
        return (f * f).sum(), l

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for rows, n in [(4, 200), (3, 57), (6, 1000)]:
        labels = torch.randint(-1, 2, (rows, n))
        x = torch.randn(rows, n, 3, requires_grad=True)
        y = x.detach().clone().requires_grad_()
        loss_c, l_c = compiled(x, labels)
        loss_e, l_e = step(y, labels)
        loss_c.backward()
        loss_e.backward()
        assert torch.allclose(loss_c, loss_e) and torch.equal(l_c, l_e)
        assert torch.allclose(x.grad, y.grad)
