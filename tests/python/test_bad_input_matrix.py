"""The bad-input matrix: every argument of the operators, wrong in every way
we could think of. Each case either raises an error that names the argument
(matched by a regular expression) or has a documented, tested behaviour.

All cases run in one subprocess, so a crash fails the test (naming the last
case started) instead of killing the test run. `docs/bad-inputs.md` is this
table as observed:

    PYTHONPATH=build/python python3 tests/python/test_bad_input_matrix.py --markdown
"""
import json
import os
import subprocess
import sys

# (argument, case, expression, expected): expected is "ok: <what is checked>"
# (the expression must evaluate to True) or a regex the error must match.
L = "torch.arange(20).remainder(3).sub(1).reshape(2, 10)"
F = "torch.randn(2, 10, 3)"
S = "syncfree.balanced_sample"
G = "syncfree.balanced_sample_gather"
Q = "syncfree.stratified_sample"
QG = "syncfree.stratified_sample_gather"
GS = "syncfree.gather_sampled"
CASES = [
    ("labels", "float32", f"{S}(torch.zeros(2, 10), 4)", r"labels must be bool or an integer tensor .*got dtype Float"),
    ("labels", "float64", f"{S}(torch.zeros(10, dtype=torch.float64), 4)", r"labels must be bool or an integer .*Double"),
    ("labels", "float16", f"{S}(torch.zeros(10, dtype=torch.float16), 4)", r"labels must be bool or an integer .*Half"),
    ("labels", "complex64", f"{S}(torch.zeros(10, dtype=torch.complex64), 4)", r"labels must be bool or an integer"),
    ("labels", "0-dim", f"{S}(torch.tensor(1), 4)", r"labels must have at least 1 dimension .*0-dim"),
    ("labels", "None", f"{S}(None, 4)", r"labels must be a torch.Tensor, got NoneType"),
    ("labels", "Python list", f"{S}([0, 1, 1], 4)", r"labels must be a torch.Tensor, got list"),
    ("labels", "float labels that require grad", f"{S}(torch.zeros(10, requires_grad=True), 4)", r"labels must be bool or an integer"),
    ("labels", "N = 0", f"{S}(torch.zeros(3, 0, dtype=torch.long), 4)[1].any().item() == False", "ok: every slot invalid"),
    ("labels", "batch of 0 rows", f"{S}(torch.zeros(0, 5, dtype=torch.long), 4)[0].shape == (0, 4)", "ok: empty outputs"),
    ("labels", "zero stride (expanded row)", f"{S}(torch.tensor([0, 1, 1, 0]).expand(3, 4), 2, seed=0)[1].all().item()", "ok: sampled like a copy"),
    ("labels", "non-contiguous", f"torch.equal({S}({L}.t().contiguous().t(), 4, seed=1)[0], {S}({L}.contiguous(), 4, seed=1)[0])", "ok: same as contiguous"),
    ("labels", "meta tensor", f"{S}(torch.empty(2, 10, dtype=torch.long, device='meta'), 4)[0].shape == (2, 4)", "ok: shapes only"),
    ("labels", "uint8 with negative_label above 255", f"{S}(torch.tensor([0, 1, 2], dtype=torch.uint8), 3, negative_label=300)[1].all().item()", "ok: no negatives, all positive"),
    ("num_samples", "-1", f"{S}({L}, -1)", r"num_samples must be >= 0, got -1"),
    ("num_samples", "float 2.5", f"{S}({L}, 2.5)", r"num_samples"),
    ("num_samples", "None", f"{S}({L}, None)", r"num_samples"),
    ("num_samples", "0", f"{S}({L}, 0)[0].shape == (2, 0)", "ok: empty outputs"),
    ("num_samples", "larger than N", f"{S}({L}, 50)[0].shape == (2, 50)", "ok: extra slots invalid"),
    ("num_samples", "rows x K overflows int64", f"{S}(torch.zeros(4, 3, dtype=torch.long), 2**62)", r"more than int64 can index"),
    ("positive_fraction", "-0.1", f"{S}({L}, 4, -0.1)", r"positive_fraction must be in \[0, 1\], got -0.1"),
    ("positive_fraction", "1.5", f"{S}({L}, 4, 1.5)", r"positive_fraction must be in \[0, 1\], got 1.5"),
    ("positive_fraction", "nan", f"{S}({L}, 4, float('nan'))", r"positive_fraction must be in \[0, 1\], got nan"),
    ("positive_fraction", "inf", f"{S}({L}, 4, float('inf'))", r"positive_fraction must be in \[0, 1\], got inf"),
    ("positive_fraction", "-inf", f"{S}({L}, 4, float('-inf'))", r"positive_fraction must be in \[0, 1\], got -inf"),
    ("positive_fraction", "string", f"{S}({L}, 4, '0.5')", r"positive_fraction"),
    ("positive_fraction", "0 (no fill)", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 0).all().item())(*{S}(l, 4, 0.0, fill_positives=False, seed=0)))({L})", "ok: only negatives"),
    ("positive_fraction", "1 (no fill)", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 1).all().item())(*{S}(l, 2, 1.0, fill_positives=False, seed=0)))({L})", "ok: only positives"),
    ("negative_label", "-1", f"{S}({L}, 4, negative_label=-1)", r"negative_label must be >= 0 .*got -1"),
    ("negative_label", "float", f"{S}({L}, 4, negative_label=0.5)", r"negative_label"),
    ("negative_label", "2^40 (no label matches)", f"{S}({L}, 4, negative_label=2**40)[0].shape == (2, 4)", "ok: no negatives"),
    ("fill_positives", "None", f"{S}({L}, 4, fill_positives=None)", r"fill_positives must be a bool, got NoneType"),
    ("fill_positives", "int 1", f"{S}({L}, 4, fill_positives=1)", r"fill_positives must be a bool, got int"),
    ("seed", "float", f"{S}({L}, 4, seed=1.5)", r"seed"),
    ("seed", "2^64 (out of int64)", f"{S}({L}, 4, seed=2**64)", r"argument 'seed'"),
    ("seed", "negative", f"{S}({L}, 4, seed=-5)[0].shape == (2, 4)", "ok: any int64"),
    ("seed", "with generator", f"{S}({L}, 4, seed=1, generator=torch.Generator())", r"seed and generator are mutually exclusive"),
    ("generator", "not a Generator", f"{S}({L}, 4, generator='cpu')", r"generator"),
    ("features", "leading shape differs", f"{G}(torch.randn(2, 9, 3), {L}, 4)", r"features must have shape \[..., N, \*F\].*\[2, 10\].*\[2, 9, 3\]"),
    ("features", "fewer dims than labels", f"{G}(torch.randn(10), {L}, 4)", r"features must have shape"),
    ("features", "other device", f"{G}(torch.randn(2, 10, 3, device='meta'), {L}, 4)", r"same device"),
    ("features", "None", f"{G}(None, {L}, 4)", r"features must be a torch.Tensor, got NoneType"),
    ("features", "F dims of size 0", f"{G}(torch.randn(2, 10, 0), {L}, 4)[0].shape == (2, 4, 0)", "ok: empty feature rows"),
    ("features", "integer dtype", f"{G}(torch.arange(20).reshape(2, 10), {L}, 4)[0].dtype == torch.int64", "ok: gathered as is"),
    ("features", "NaN and inf values", f"{G}(torch.full((2, 10, 3), float('nan')), {L}, 12)[0][~{G}(torch.full((2, 10, 3), float('nan')), {L}, 12)[2]].eq(0).all().item()", "ok: copied; invalid slots still 0"),
    ("features", "requires grad", f"{G}({F}.requires_grad_(), {L}, 4)[0].requires_grad", "ok: differentiable"),
    ("labels (gather)", "float labels", f"{G}({F}, torch.zeros(2, 10), 4)", r"labels must be bool or an integer"),
    ("labels (gather)", "0-dim", f"{G}(torch.randn(3), torch.tensor(1), 4)", r"labels must have at least 1 dimension"),
    # stratified_sample, stratified_sample_gather and gather_sampled.
    ("labels (stratified)", "float32", f"{Q}(torch.zeros(2, 10), 4, [1, 1])", r"stratified_sample: labels must be bool or an integer tensor .*got dtype Float"),
    ("labels (stratified)", "0-dim", f"{Q}(torch.tensor(1), 4, [1])", r"stratified_sample: labels must have at least 1 dimension .*0-dim"),
    ("labels (stratified)", "None", f"{Q}(None, 4, [1])", r"labels must be a torch.Tensor, got NoneType"),
    ("labels (stratified)", "N = 0", f"{Q}(torch.zeros(3, 0, dtype=torch.long), 4, [2, 2])[1].any().item() == False", "ok: every slot invalid"),
    ("labels (stratified)", "batch of 0 rows", f"{Q}(torch.zeros(0, 5, dtype=torch.long), 4, [2])[0].shape == (0, 4)", "ok: empty outputs"),
    ("labels (stratified)", "labels outside [0, C)", f"(lambda l: (lambda i, v: ((l.gather(1, i.clamp(min=0))[v] >= 0) & (l.gather(1, i.clamp(min=0))[v] < 2)).all().item())(*{Q}(l, 10, [1, 1], seed=0)))(torch.arange(-5, 15).reshape(2, 10))", "ok: never sampled"),
    ("labels (stratified)", "zero stride (expanded row)", f"{Q}(torch.tensor([0, 1, 1, 0]).expand(3, 4), 2, [1, 1], seed=0)[1].all().item()", "ok: sampled like a copy"),
    ("labels (stratified)", "non-contiguous", f"torch.equal({Q}({L}.t().contiguous().t(), 4, [1, 1, 1], seed=1)[0], {Q}({L}.contiguous(), 4, [1, 1, 1], seed=1)[0])", "ok: same as contiguous"),
    ("labels (stratified)", "meta tensor", f"{Q}(torch.empty(2, 10, dtype=torch.long, device='meta'), 4, [1, 2])[0].shape == (2, 4)", "ok: shapes only"),
    ("num_samples (stratified)", "-1", f"{Q}({L}, -1, [0])", r"num_samples must be >= 0, got -1"),
    ("num_samples (stratified)", "float 2.5", f"{Q}({L}, 2.5, [1])", r"num_samples"),
    ("num_samples (stratified)", "0", f"{Q}({L}, 0, [0])[0].shape == (2, 0)", "ok: empty outputs"),
    ("num_samples (stratified)", "larger than N", f"{Q}({L}, 50, [5, 5])[0].shape == (2, 50)", "ok: extra slots invalid"),
    ("num_samples (stratified)", "rows x K overflows int64", f"{Q}(torch.zeros(4, 3, dtype=torch.long), 2**62, [1])", r"more than int64 can index"),
    ("class_quota", "empty list", f"{Q}({L}, 4, [])", r"at least one class \(C >= 1\), got an empty sequence"),
    ("class_quota", "negative in a list", f"{Q}({L}, 4, [2, -1])", r"class_quota\[1\] must be >= 0, got -1"),
    ("class_quota", "list summing above num_samples", f"{Q}({L}, 4, [3, 2])", r"sum of class_quota must be <= num_samples \(4\), got 5"),
    ("class_quota", "float in a list", f"{Q}({L}, 4, [1.0, 2])", r"class_quota\[0\] must be an int, got float"),
    ("class_quota", "bool in a list", f"{Q}({L}, 4, [True])", r"class_quota\[0\] must be an int, got bool"),
    ("class_quota", "an int", f"{Q}({L}, 4, 3)", r"class_quota must be a sequence of ints or an int64 tensor, got int"),
    ("class_quota", "None", f"{Q}({L}, 4, None)", r"class_quota must be a sequence of ints or an int64 tensor, got NoneType"),
    ("class_quota", "int32 tensor", f"{Q}({L}, 4, torch.zeros(2, dtype=torch.int32))", r"class_quota must be an int64 tensor, got dtype Int"),
    ("class_quota", "float tensor", f"{Q}({L}, 4, torch.zeros(2))", r"class_quota must be an int64 tensor, got dtype Float"),
    ("class_quota", "empty tensor [0]", f"{Q}({L}, 4, torch.zeros(0, dtype=torch.long))", r"at least one class \(C >= 1\), got shape \[0\]"),
    ("class_quota", "0-dim tensor", f"{Q}({L}, 4, torch.tensor(2))", r"class_quota must have shape \[C\] or labels.shape\[:-1\] \+ \[C\]"),
    ("class_quota", "leading shape differs", f"{Q}({L}, 4, torch.zeros(3, 2, dtype=torch.long))", r"class_quota must have shape .*got shape \[3, 2\] for labels of shape \[2, 10\]"),
    ("class_quota", "other device", f"{Q}({L}, 4, torch.zeros(2, dtype=torch.long, device='meta'))", r"class_quota must be on the labels' device cpu, got a tensor on meta"),
    ("class_quota", "negative tensor values", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 1).all().item())(*{Q}(l, 4, torch.tensor([-3, 2]), False, seed=0)))({L})", "ok: a negative quota takes nothing"),
    ("class_quota", "tensor values summing above num_samples", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 0).sum().item() == 2 * 3)(*{Q}(l, 3, torch.tensor([9, 9]), False, seed=0)))({L}.clamp(min=0))", "ok: takes in class order up to num_samples"),
    ("class_quota", "thousands of classes", f"{Q}({L}, 4, torch.ones(5000, dtype=torch.long))[1].all().item()", "ok: any C"),
    ("fill", "None", f"{Q}({L}, 4, [1], fill=None)", r"fill must be a bool, got NoneType"),
    ("fill", "int 1", f"{Q}({L}, 4, [1], fill=1)", r"fill must be a bool, got int"),
    ("seed (stratified)", "2^64 (out of int64)", f"{Q}({L}, 4, [1], seed=2**64)", r"argument 'seed'"),
    ("seed (stratified)", "with generator", f"{Q}({L}, 4, [1], seed=1, generator=torch.Generator())", r"seed and generator are mutually exclusive"),
    ("generator (stratified)", "not a Generator", f"{Q}({L}, 4, [1], generator='cpu')", r"generator"),
    ("features (stratified)", "leading shape differs", f"{QG}(torch.randn(2, 9, 3), {L}, 4, [1, 1])", r"stratified_sample_gather: features must have shape \[..., N, \*F\]"),
    ("indices (gather_sampled)", "int32", f"{GS}({F}, {L}, torch.zeros(2, 4, dtype=torch.int32), torch.ones(2, 4, dtype=torch.bool))", r"gather_sampled: indices must be int64 and valid bool, got Int"),
    ("indices (gather_sampled)", "shape differs from valid", f"{GS}({F}, {L}, torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool))", r"gather_sampled: indices and valid must have shape labels.shape\[:-1\] \+ \[K\]"),
    ("indices (gather_sampled)", "valid slot outside [0, N)", f"{GS}({F}, {L}, torch.full((2, 4), 10), torch.ones(2, 4, dtype=torch.bool))", r"index 10 of a valid slot is outside \[0, 10\)"),
    ("indices (gather_sampled)", "invalid slot outside [0, N)", f"{GS}({F}, {L}, torch.full((2, 4), 99), torch.zeros(2, 4, dtype=torch.bool))[1].eq(-1).all().item()", "ok: ignored (zeros, label -1)"),
]

RUNNER = r"""
import json, re, sys, traceback
import torch, syncfree
cases = json.loads(sys.stdin.read())
for i, (arg, name, expr, expected) in enumerate(cases):
    print(json.dumps({"start": i}), flush=True)
    try:
        value = eval(expr)
        # "ok" expressions must evaluate to True (a bool or a one-element tensor).
        ok = (isinstance(value, bool) and value) or (isinstance(value, torch.Tensor) and value.numel() == 1 and bool(value))
        outcome = {"i": i, "raised": None, "value": bool(ok)}
    except Exception as e:
        outcome = {"i": i, "raised": type(e).__name__, "message": str(e).splitlines()[0][:400] if str(e) else ""}
    print(json.dumps(outcome), flush=True)
"""


def run_cases():
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(CASES), capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    outcomes, last = {}, None
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if "start" in rec:
            last = rec["start"]
        else:
            outcomes[rec["i"]] = rec
    return proc, outcomes, last


def check(case, outcome):
    import re

    arg, name, expr, expected = case
    if expected.startswith("ok:"):
        return outcome["raised"] is None and outcome["value"] is True
    return outcome["raised"] is not None and re.search(expected, outcome["message"]) is not None


def test_bad_input_matrix():
    proc, outcomes, last = run_cases()
    assert proc.returncode == 0, f"crashed in case {CASES[last][:2] if last is not None else '?'}: {proc.stderr[-1500:]}"
    failures = [(CASES[i][:2], outcomes.get(i)) for i in range(len(CASES)) if i not in outcomes or not check(CASES[i], outcomes[i])]
    assert not failures, failures


def markdown():
    proc, outcomes, last = run_cases()
    print("| argument | input | outcome |")
    print("| --- | --- | --- |")
    for i, case in enumerate(CASES):
        arg, name, expr, expected = case
        o = outcomes.get(i)
        if o is None:
            text = "CRASH"
        elif expected.startswith("ok:"):
            text = expected[3:].strip() if check(case, o) else f"UNEXPECTED: {o}"
        else:
            text = f"{o['raised']}: {o['message']}" if check(case, o) else f"UNEXPECTED: {o}"
        print(f"| {arg} | {name} | {text.replace('|', '/')} |")


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        markdown()
