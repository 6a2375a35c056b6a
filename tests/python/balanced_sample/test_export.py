"""torch.export and AOTInductor with the syncfree operators (CPU).

An exported program (static or dynamic shapes, saved and loaded again) and an
AOTInductor package, in this process and in a fresh one that only imports
syncfree, give eager's results: exactly for a seed, and for the same
torch.manual_seed when unseeded.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._inductor
from torch.export import Dim

import syncfree
from helpers.checks import assert_same, check_sample

SHAPES = [(3, 50), (5, 17), (2, 300), (4, 6)]  # N = 6 < K: rows with invalid slots


class SampledHead(torch.nn.Module):
    """A seeded gather feeding a linear layer, and an unseeded sample."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, features, labels):
        f, l, v = syncfree.balanced_sample_gather(features, labels, 8, 0.25, seed=11)
        logits = self.lin(f).squeeze(-1)
        idx, valid = syncfree.balanced_sample(labels, 5, negative_label=1, fill_positives=False)
        return logits, f, l, v, idx, valid


def make_model():
    torch.manual_seed(0)
    return SampledHead().eval()


def make_inputs(rows, n, seed=0):
    gen = torch.Generator().manual_seed(seed + 1000 * rows + n)
    return torch.randn(rows, n, 4, generator=gen), torch.randint(-1, 3, (rows, n), generator=gen)


def run_seeded(fn, *args, seed=0):
    torch.manual_seed(seed)
    return tuple(fn(*args))


# The head's logits (its first output): compared within tolerance where another
# program (a decomposed graph, AOTInductor's code) computes them.
LOGITS = (0,)


def syncfree_targets(graph_module):
    return {str(n.target) for n in graph_module.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("syncfree.")}


def dynamic_shapes():
    batch, n = Dim("batch", min=2, max=1024), Dim("n", min=2, max=1 << 20)
    return {"features": {0: batch, 1: n}, "labels": {0: batch, 1: n}}


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_export_matches_eager(strict):
    model = make_model()
    example = make_inputs(3, 50)
    ep = torch.export.export(model, example, strict=strict)
    assert syncfree_targets(ep.graph_module) == {"syncfree.balanced_sample_gather.default",
                                                 "syncfree.balanced_sample.default"}
    exported = ep.module()
    got = run_seeded(exported, *example)
    want = run_seeded(model, *example)
    assert_same(got, want)
    check_sample(example[1], got[4], got[5], 5, 0.5, negative_label=1, fill_positives=False)
    # Unseeded: every call draws afresh, as in eager.
    assert not torch.equal(got[4], run_seeded(exported, *example, seed=1)[4])


def test_export_dynamic_batch_and_n():
    model = make_model()
    ep = torch.export.export(model, make_inputs(3, 50), dynamic_shapes=dynamic_shapes())
    assert len(ep.range_constraints) == 2  # batch and N stay symbolic
    exported = ep.module()
    for rows, n in SHAPES:
        inputs = make_inputs(rows, n)
        assert_same(run_seeded(exported, *inputs, seed=rows), run_seeded(model, *inputs, seed=rows))


def test_export_save_and_load(tmp_path):
    model = make_model()
    ep = torch.export.export(model, make_inputs(3, 50), dynamic_shapes=dynamic_shapes())
    path = tmp_path / "sampled_head.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path)).module()
    for rows, n in SHAPES:
        inputs = make_inputs(rows, n)
        assert_same(run_seeded(loaded, *inputs), run_seeded(model, *inputs))


def test_export_decomposed_program():
    # The inference program (what AOTInductor compiles) calls the gather op's
    # fused kernel (its internal op, which also returns the indices) and the sampler.
    model = make_model()
    ep = torch.export.export(model, make_inputs(3, 50), dynamic_shapes=dynamic_shapes())
    decomposed = ep.run_decompositions()
    assert syncfree_targets(decomposed.graph_module) == {"syncfree.balanced_sample.default",
                                                         "syncfree._balanced_sample_gather.default"}
    program = decomposed.module()
    for rows, n in SHAPES:
        inputs = make_inputs(rows, n)
        assert_same(run_seeded(program, *inputs), run_seeded(model, *inputs), close=LOGITS)


# Loads an AOTInductor package in a fresh process and runs it on saved inputs.
LOAD_AND_RUN = textwrap.dedent("""
    import sys
    import torch
    import torch._inductor

    package, inputs_path, outputs_path, import_syncfree = sys.argv[1:]
    if import_syncfree == "1":
        import syncfree  # loads the operator library: registers torch.ops.syncfree
    model = torch._inductor.aoti_load_package(package)
    outputs = []
    for features, labels in torch.load(inputs_path):
        torch.manual_seed(0)
        outputs.append([t.clone() for t in model(features, labels)])
    torch.save(outputs, outputs_path)
""")


def run_in_fresh_process(tmp_path, package, inputs, import_syncfree):
    torch.save(inputs, tmp_path / "inputs.pt")
    (tmp_path / "load_and_run.py").write_text(LOAD_AND_RUN)
    outputs = tmp_path / "outputs.pt"
    outputs.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, str(tmp_path / "load_and_run.py"), package,
                           str(tmp_path / "inputs.pt"), str(outputs), "1" if import_syncfree else "0"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=300)
    return done, (torch.load(outputs) if done.returncode == 0 else None)


@pytest.mark.slow
def test_aoti_package_matches_eager(tmp_path):
    model = make_model()
    ep = torch.export.export(model, make_inputs(3, 50), dynamic_shapes=dynamic_shapes())
    package = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "sampled_head.pt2"))
    compiled = torch._inductor.aoti_load_package(package)
    inputs = [make_inputs(rows, n) for rows, n in SHAPES]
    want = [run_seeded(model, *x) for x in inputs]
    for x, w in zip(inputs, want):
        got = run_seeded(compiled, *x)
        # Sampled tensors exactly; the linear layer is Inductor's kernel.
        assert_same(got, w, close=LOGITS)
    assert not torch.equal(run_seeded(compiled, *inputs[0], seed=1)[4], want[0][4])

    # A fresh process needs only `import syncfree` for the package's operators.
    done, outputs = run_in_fresh_process(tmp_path, package, inputs, import_syncfree=True)
    assert done.returncode == 0, done.stdout + done.stderr
    for got, w in zip(outputs, want):
        assert_same(got, w, close=LOGITS)
    # Without it, loading fails and names the missing operator.
    done, _ = run_in_fresh_process(tmp_path, package, inputs, import_syncfree=False)
    assert done.returncode != 0 and "syncfree::" in done.stderr, done.stdout + done.stderr
