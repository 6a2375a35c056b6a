"""The bad-input matrix: every argument of the operators, wrong in every way
we could think of, one test per row. Each row either raises an error of the
expected type whose message starts with "syncfree.<op>: " for the public op
that was called, then names the argument, what was expected and what was
received (matched from the start of the message), or has a documented,
tested behaviour.

All rows run in one subprocess (once per test session), so a crash fails the
rows it reaches instead of killing the test run. `docs/bad-inputs.md` is this
table as observed, printed by

    PYTHONPATH=build/torch-2.13.0/python python3 tests/python/tooling/test_bad_input_matrix.py --markdown
"""
import json
import os
import re
import subprocess
import sys

import pytest

# (op, argument, case, expression, expected...): expected is "ok: <what is
# checked>" (the expression must evaluate to True), or an exception type and
# a regex the message must match right after "syncfree.<op>: ".
# Pieces of the expressions: labels [2, 10] of -1, 0 and 1, features [2, 10, 3],
# and the ops.
LABELS = "torch.arange(20).remainder(3).sub(1).reshape(2, 10)"
FEATURES = "torch.randn(2, 10, 3)"
BALANCED_SAMPLE = "syncfree.balanced_sample"
BALANCED_SAMPLE_GATHER = "syncfree.balanced_sample_gather"
STRATIFIED_SAMPLE = "syncfree.stratified_sample"
STRATIFIED_SAMPLE_GATHER = "syncfree.stratified_sample_gather"
GATHER_SAMPLED = "syncfree.gather_sampled"
ROI_ALIGN = "syncfree.multi_scale_roi_align"
MAPS = "[torch.randn(2, 4, 16, 16), torch.randn(2, 4, 8, 8)]"  # two levels of a 64x64 image
CASES = [
    ("balanced_sample", "labels", "float32", f"{BALANCED_SAMPLE}(torch.zeros(2, 10), 4)", "RuntimeError", r"labels must be bool or an integer tensor .*got dtype Float"),
    ("balanced_sample", "labels", "float64", f"{BALANCED_SAMPLE}(torch.zeros(10, dtype=torch.float64), 4)", "RuntimeError", r"labels must be bool or an integer .*Double"),
    ("balanced_sample", "labels", "float16", f"{BALANCED_SAMPLE}(torch.zeros(10, dtype=torch.float16), 4)", "RuntimeError", r"labels must be bool or an integer .*Half"),
    ("balanced_sample", "labels", "complex64", f"{BALANCED_SAMPLE}(torch.zeros(10, dtype=torch.complex64), 4)", "RuntimeError", r"labels must be bool or an integer"),
    ("balanced_sample", "labels", "0-dim", f"{BALANCED_SAMPLE}(torch.tensor(1), 4)", "RuntimeError", r"labels must have at least 1 dimension .*0-dim"),
    ("balanced_sample", "labels", "None", f"{BALANCED_SAMPLE}(None, 4)", "TypeError", r"labels must be a torch.Tensor, got NoneType"),
    ("balanced_sample", "labels", "Python list", f"{BALANCED_SAMPLE}([0, 1, 1], 4)", "TypeError", r"labels must be a torch.Tensor, got list"),
    ("balanced_sample", "labels", "float labels that require grad", f"{BALANCED_SAMPLE}(torch.zeros(10, requires_grad=True), 4)", "RuntimeError", r"labels must be bool or an integer"),
    ("balanced_sample", "labels", "N = 0", f"{BALANCED_SAMPLE}(torch.zeros(3, 0, dtype=torch.long), 4)[1].any().item() == False", "ok: every slot invalid"),
    ("balanced_sample", "labels", "batch of 0 rows", f"{BALANCED_SAMPLE}(torch.zeros(0, 5, dtype=torch.long), 4)[0].shape == (0, 4)", "ok: empty outputs"),
    ("balanced_sample", "labels", "zero stride (expanded row)", f"{BALANCED_SAMPLE}(torch.tensor([0, 1, 1, 0]).expand(3, 4), 2, seed=0)[1].all().item()", "ok: sampled like a copy"),
    ("balanced_sample", "labels", "non-contiguous", f"torch.equal({BALANCED_SAMPLE}({LABELS}.t().contiguous().t(), 4, seed=1)[0], {BALANCED_SAMPLE}({LABELS}.contiguous(), 4, seed=1)[0])", "ok: same as contiguous"),
    ("balanced_sample", "labels", "meta tensor", f"{BALANCED_SAMPLE}(torch.empty(2, 10, dtype=torch.long, device='meta'), 4)[0].shape == (2, 4)", "ok: shapes only"),
    ("balanced_sample", "labels", "uint8 with negative_label above 255", f"{BALANCED_SAMPLE}(torch.tensor([0, 1, 2], dtype=torch.uint8), 3, negative_label=300)[1].all().item()", "ok: no negatives, all positive"),
    ("balanced_sample", "labels", "uint16", f"(lambda l: torch.equal({BALANCED_SAMPLE}(l.to(torch.uint16), 4, seed=2)[0], {BALANCED_SAMPLE}(l, 4, seed=2)[0]))({LABELS}.clamp(min=0))", "ok: sampled as int64 labels of the same values"),
    ("balanced_sample", "labels", "uint32", f"(lambda l: torch.equal({BALANCED_SAMPLE}(l.to(torch.uint32), 4, seed=2)[0], {BALANCED_SAMPLE}(l, 4, seed=2)[0]))({LABELS}.clamp(min=0))", "ok: sampled as int64 labels of the same values"),
    ("balanced_sample", "labels", "uint64", f"(lambda l: torch.equal({BALANCED_SAMPLE}(l.to(torch.uint64), 4, seed=2)[0], {BALANCED_SAMPLE}(l, 4, seed=2)[0]))({LABELS}.clamp(min=0))", "ok: sampled as int64 labels of the same values"),
    ("balanced_sample", "labels", "uint64 of 2^63 and more", f"sorted({BALANCED_SAMPLE}(torch.tensor([-1, -2, 0]).view(torch.uint64), 2, 1.0, fill_positives=False, seed=0)[0].tolist()) == [0, 1]", "ok: positives (unsigned labels are never ignored)"),
    ("balanced_sample", "num_samples", "-1", f"{BALANCED_SAMPLE}({LABELS}, -1)", "RuntimeError", r"num_samples must be >= 0, got -1"),
    ("balanced_sample", "num_samples", "float 2.5", f"{BALANCED_SAMPLE}({LABELS}, 2.5)", "TypeError", r"num_samples must be an int, got float"),
    ("balanced_sample", "num_samples", "None", f"{BALANCED_SAMPLE}({LABELS}, None)", "TypeError", r"num_samples must be an int, got NoneType"),
    ("balanced_sample", "num_samples", "0", f"{BALANCED_SAMPLE}({LABELS}, 0)[0].shape == (2, 0)", "ok: empty outputs"),
    ("balanced_sample", "num_samples", "larger than N", f"{BALANCED_SAMPLE}({LABELS}, 50)[0].shape == (2, 50)", "ok: extra slots invalid"),
    ("balanced_sample", "num_samples", "rows x K overflows int64", f"{BALANCED_SAMPLE}(torch.zeros(4, 3, dtype=torch.long), 2**62)", "RuntimeError", r"the output would have 4 x 4611686018427387904 elements, more than int64 can index"),
    ("balanced_sample", "num_samples", "outputs of more than 2^63 bytes", f"{BALANCED_SAMPLE}(torch.zeros(4, 3, dtype=torch.long), 2**60)", "RuntimeError", r"num_samples = 1152921504606846976 needs more than 9223372036854775807 bytes for the outputs"),
    ("balanced_sample", "num_samples", "2^40 (too large for memory)", f"{BALANCED_SAMPLE}({LABELS}, 2**40)", "OutOfMemoryError", r"num_samples = 1099511627776 needs 19791209299968 bytes for the outputs \(indices int64 and valid bool, 2 x 1099511627776 elements each\) on cpu, more than could be allocated"),
    ("balanced_sample", "num_samples", "True (bool)", f"{BALANCED_SAMPLE}({LABELS}, True)", "TypeError", r"num_samples must be an int, got bool"),
    ("balanced_sample", "positive_fraction", "-0.1", f"{BALANCED_SAMPLE}({LABELS}, 4, -0.1)", "RuntimeError", r"positive_fraction must be in \[0, 1\], got -0.1"),
    ("balanced_sample", "positive_fraction", "1.5", f"{BALANCED_SAMPLE}({LABELS}, 4, 1.5)", "RuntimeError", r"positive_fraction must be in \[0, 1\], got 1.5"),
    ("balanced_sample", "positive_fraction", "nan", f"{BALANCED_SAMPLE}({LABELS}, 4, float('nan'))", "RuntimeError", r"positive_fraction must be in \[0, 1\], got nan"),
    ("balanced_sample", "positive_fraction", "inf", f"{BALANCED_SAMPLE}({LABELS}, 4, float('inf'))", "RuntimeError", r"positive_fraction must be in \[0, 1\], got inf"),
    ("balanced_sample", "positive_fraction", "-inf", f"{BALANCED_SAMPLE}({LABELS}, 4, float('-inf'))", "RuntimeError", r"positive_fraction must be in \[0, 1\], got -inf"),
    ("balanced_sample", "positive_fraction", "string", f"{BALANCED_SAMPLE}({LABELS}, 4, '0.5')", "TypeError", r"positive_fraction must be a float, got str"),
    ("balanced_sample", "positive_fraction", "True (bool)", f"{BALANCED_SAMPLE}({LABELS}, 4, True)", "TypeError", r"positive_fraction must be a float, got bool"),
    ("balanced_sample", "positive_fraction", "0 (no fill)", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 0).all().item())(*{BALANCED_SAMPLE}(l, 4, 0.0, fill_positives=False, seed=0)))({LABELS})", "ok: only negatives"),
    ("balanced_sample", "positive_fraction", "1 (no fill)", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 1).all().item())(*{BALANCED_SAMPLE}(l, 2, 1.0, fill_positives=False, seed=0)))({LABELS})", "ok: only positives"),
    ("balanced_sample", "negative_label", "-1", f"{BALANCED_SAMPLE}({LABELS}, 4, negative_label=-1)", "RuntimeError", r"negative_label must be >= 0 .*got -1"),
    ("balanced_sample", "negative_label", "float", f"{BALANCED_SAMPLE}({LABELS}, 4, negative_label=0.5)", "TypeError", r"negative_label must be an int, got float"),
    ("balanced_sample", "negative_label", "False (bool)", f"{BALANCED_SAMPLE}({LABELS}, 4, negative_label=False)", "TypeError", r"negative_label must be an int, got bool"),
    ("balanced_sample", "negative_label", "2^40 (no label matches)", f"{BALANCED_SAMPLE}({LABELS}, 4, negative_label=2**40)[0].shape == (2, 4)", "ok: no negatives"),
    ("balanced_sample", "fill_positives", "None", f"{BALANCED_SAMPLE}({LABELS}, 4, fill_positives=None)", "TypeError", r"fill_positives must be a bool, got NoneType"),
    ("balanced_sample", "fill_positives", "int 1", f"{BALANCED_SAMPLE}({LABELS}, 4, fill_positives=1)", "TypeError", r"fill_positives must be a bool, got int"),
    ("balanced_sample", "seed", "float", f"{BALANCED_SAMPLE}({LABELS}, 4, seed=1.5)", "TypeError", r"seed must be an int or None, got float"),
    ("balanced_sample", "seed", "True (bool)", f"{BALANCED_SAMPLE}({LABELS}, 4, seed=True)", "TypeError", r"seed must be an int or None, got bool"),
    ("balanced_sample", "seed", "2^64 (out of int64)", f"{BALANCED_SAMPLE}({LABELS}, 4, seed=2**64)", "OverflowError", r"seed must fit in int64 \(\[-2\*\*63, 2\*\*63 - 1\]\), got 18446744073709551616"),
    ("balanced_sample", "seed", "negative", f"{BALANCED_SAMPLE}({LABELS}, 4, seed=-5)[0].shape == (2, 4)", "ok: any int64"),
    ("balanced_sample", "seed", "with generator", f"{BALANCED_SAMPLE}({LABELS}, 4, seed=1, generator=torch.Generator())", "RuntimeError", r"seed and generator are mutually exclusive"),
    ("balanced_sample", "generator", "not a Generator", f"{BALANCED_SAMPLE}({LABELS}, 4, generator='cpu')", "TypeError", r"generator must be a torch.Generator or None, got str"),
    ("balanced_sample_gather", "features", "leading shape differs", f"{BALANCED_SAMPLE_GATHER}(torch.randn(2, 9, 3), {LABELS}, 4)", "RuntimeError", r"features must have shape \[..., N, \*F\].*\[2, 10\].*\[2, 9, 3\]"),
    ("balanced_sample_gather", "features", "fewer dims than labels", f"{BALANCED_SAMPLE_GATHER}(torch.randn(10), {LABELS}, 4)", "RuntimeError", r"features must have shape"),
    ("balanced_sample_gather", "features", "other device", f"{BALANCED_SAMPLE_GATHER}(torch.randn(2, 10, 3, device='meta'), {LABELS}, 4)", "RuntimeError", r"features and labels must be on the same device, got features on meta and labels on cpu"),
    ("balanced_sample_gather", "features", "None", f"{BALANCED_SAMPLE_GATHER}(None, {LABELS}, 4)", "TypeError", r"features must be a torch.Tensor, got NoneType"),
    ("balanced_sample_gather", "features", "F dims of size 0", f"{BALANCED_SAMPLE_GATHER}(torch.randn(2, 10, 0), {LABELS}, 4)[0].shape == (2, 4, 0)", "ok: empty feature rows"),
    ("balanced_sample_gather", "features", "integer dtype", f"{BALANCED_SAMPLE_GATHER}(torch.arange(20).reshape(2, 10), {LABELS}, 4)[0].dtype == torch.int64", "ok: gathered as is"),
    ("balanced_sample_gather", "features", "NaN and inf values", f"{BALANCED_SAMPLE_GATHER}(torch.full((2, 10, 3), float('nan')), {LABELS}, 12)[0][~{BALANCED_SAMPLE_GATHER}(torch.full((2, 10, 3), float('nan')), {LABELS}, 12)[2]].eq(0).all().item()", "ok: copied; invalid slots still 0"),
    ("balanced_sample_gather", "features", "requires grad", f"{BALANCED_SAMPLE_GATHER}({FEATURES}.requires_grad_(), {LABELS}, 4)[0].requires_grad", "ok: differentiable"),
    ("balanced_sample_gather", "labels", "float labels", f"{BALANCED_SAMPLE_GATHER}({FEATURES}, torch.zeros(2, 10), 4)", "RuntimeError", r"labels must be bool or an integer"),
    ("balanced_sample_gather", "labels", "0-dim", f"{BALANCED_SAMPLE_GATHER}(torch.randn(3), torch.tensor(1), 4)", "RuntimeError", r"labels must have at least 1 dimension"),
    ("balanced_sample_gather", "labels", "uint32", f"torch.equal({BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}.clamp(min=0).to(torch.uint32), 4, seed=1)[1], {BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}.clamp(min=0), 4, seed=1)[1])", "ok: sampled labels as int64"),
    ("balanced_sample_gather", "num_samples", "-1", f"{BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}, -1)", "RuntimeError", r"num_samples must be >= 0, got -1"),
    ("balanced_sample_gather", "num_samples", "2^40 (too large for memory)", f"{BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 2**40)", "OutOfMemoryError", r"num_samples = 1099511627776 needs 19791209299968 bytes for the outputs"),
    ("balanced_sample_gather", "features", "too large for memory once gathered (expanded)", f"{BALANCED_SAMPLE_GATHER}(torch.zeros(()).expand(2, 10, 2**40), {LABELS}, 3)", "OutOfMemoryError", r"features of shape \[2, 10, 1099511627776\] and indices of shape \[2, 3\] needs 26388279066624 bytes for sampled_features on cpu, more than could be allocated"),
    ("balanced_sample_gather", "num_samples", "True (bool)", f"{BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}, True)", "TypeError", r"num_samples must be an int, got bool"),
    ("balanced_sample_gather", "positive_fraction", "1.5", f"{BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 4, 1.5)", "RuntimeError", r"positive_fraction must be in \[0, 1\], got 1.5"),
    ("balanced_sample_gather", "seed", "with generator", f"{BALANCED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 4, seed=1, generator=torch.Generator())", "RuntimeError", r"seed and generator are mutually exclusive"),
    # stratified_sample, stratified_sample_gather and gather_sampled.
    ("stratified_sample", "labels", "float32", f"{STRATIFIED_SAMPLE}(torch.zeros(2, 10), 4, [1, 1])", "RuntimeError", r"labels must be bool or an integer tensor .*got dtype Float"),
    ("stratified_sample", "labels", "0-dim", f"{STRATIFIED_SAMPLE}(torch.tensor(1), 4, [1])", "RuntimeError", r"labels must have at least 1 dimension .*0-dim"),
    ("stratified_sample", "labels", "None", f"{STRATIFIED_SAMPLE}(None, 4, [1])", "TypeError", r"labels must be a torch.Tensor, got NoneType"),
    ("stratified_sample", "labels", "N = 0", f"{STRATIFIED_SAMPLE}(torch.zeros(3, 0, dtype=torch.long), 4, [2, 2])[1].any().item() == False", "ok: every slot invalid"),
    ("stratified_sample", "labels", "batch of 0 rows", f"{STRATIFIED_SAMPLE}(torch.zeros(0, 5, dtype=torch.long), 4, [2])[0].shape == (0, 4)", "ok: empty outputs"),
    ("stratified_sample", "labels", "labels outside [0, C)", f"(lambda l: (lambda i, v: ((l.gather(1, i.clamp(min=0))[v] >= 0) & (l.gather(1, i.clamp(min=0))[v] < 2)).all().item())(*{STRATIFIED_SAMPLE}(l, 10, [1, 1], seed=0)))(torch.arange(-5, 15).reshape(2, 10))", "ok: never sampled"),
    ("stratified_sample", "labels", "zero stride (expanded row)", f"{STRATIFIED_SAMPLE}(torch.tensor([0, 1, 1, 0]).expand(3, 4), 2, [1, 1], seed=0)[1].all().item()", "ok: sampled like a copy"),
    ("stratified_sample", "labels", "non-contiguous", f"torch.equal({STRATIFIED_SAMPLE}({LABELS}.t().contiguous().t(), 4, [1, 1, 1], seed=1)[0], {STRATIFIED_SAMPLE}({LABELS}.contiguous(), 4, [1, 1, 1], seed=1)[0])", "ok: same as contiguous"),
    ("stratified_sample", "labels", "meta tensor", f"{STRATIFIED_SAMPLE}(torch.empty(2, 10, dtype=torch.long, device='meta'), 4, [1, 2])[0].shape == (2, 4)", "ok: shapes only"),
    ("stratified_sample", "labels", "uint16", f"(lambda l: torch.equal({STRATIFIED_SAMPLE}(l.to(torch.uint16), 4, [1, 1, 1], seed=2)[0], {STRATIFIED_SAMPLE}(l, 4, [1, 1, 1], seed=2)[0]))({LABELS}.clamp(min=0))", "ok: sampled as int64 labels of the same values"),
    ("stratified_sample", "labels", "uint64 of 2^63 and more", f"{STRATIFIED_SAMPLE}(torch.tensor([-1, 1, 0]).view(torch.uint64), 3, [1, 1], seed=0)[0].sort().values.tolist() == [-1, 1, 2]", "ok: of no class (>= C)"),
    ("stratified_sample", "num_samples", "-1", f"{STRATIFIED_SAMPLE}({LABELS}, -1, [0])", "RuntimeError", r"num_samples must be >= 0, got -1"),
    ("stratified_sample", "num_samples", "float 2.5", f"{STRATIFIED_SAMPLE}({LABELS}, 2.5, [1])", "TypeError", r"num_samples must be an int, got float"),
    ("stratified_sample", "num_samples", "0", f"{STRATIFIED_SAMPLE}({LABELS}, 0, [0])[0].shape == (2, 0)", "ok: empty outputs"),
    ("stratified_sample", "num_samples", "larger than N", f"{STRATIFIED_SAMPLE}({LABELS}, 50, [5, 5])[0].shape == (2, 50)", "ok: extra slots invalid"),
    ("stratified_sample", "num_samples", "rows x K overflows int64", f"{STRATIFIED_SAMPLE}(torch.zeros(4, 3, dtype=torch.long), 2**62, [1])", "RuntimeError", r"the output would have 4 x 4611686018427387904 elements, more than int64 can index"),
    ("stratified_sample", "num_samples", "2^40 (too large for memory)", f"{STRATIFIED_SAMPLE}({LABELS}, 2**40, [1])", "OutOfMemoryError", r"num_samples = 1099511627776 needs 19791209299968 bytes for the outputs"),
    ("stratified_sample", "num_samples", "True (bool)", f"{STRATIFIED_SAMPLE}({LABELS}, True, [1])", "TypeError", r"num_samples must be an int, got bool"),
    ("stratified_sample", "class_quota", "empty list", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [])", "ValueError", r"class_quota must hold at least one class \(C >= 1\), got an empty sequence"),
    ("stratified_sample", "class_quota", "negative in a list", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [2, -1])", "ValueError", r"class_quota\[1\] must be >= 0, got -1"),
    ("stratified_sample", "class_quota", "list summing above num_samples", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [3, 2])", "ValueError", r"the sum of class_quota must be <= num_samples \(4\), got class_quota \[3, 2\]"),
    ("stratified_sample", "class_quota", "float in a list", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1.0, 2])", "TypeError", r"class_quota\[0\] must be an int, got float"),
    ("stratified_sample", "class_quota", "bool in a list", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [True])", "TypeError", r"class_quota\[0\] must be an int, got bool"),
    ("stratified_sample", "class_quota", "an int", f"{STRATIFIED_SAMPLE}({LABELS}, 4, 3)", "TypeError", r"class_quota must be a sequence of ints or an int64 tensor, got int"),
    ("stratified_sample", "class_quota", "None", f"{STRATIFIED_SAMPLE}({LABELS}, 4, None)", "TypeError", r"class_quota must be a sequence of ints or an int64 tensor, got NoneType"),
    ("stratified_sample", "class_quota", "int32 tensor", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.zeros(2, dtype=torch.int32))", "RuntimeError", r"class_quota must be an int64 tensor, got dtype Int"),
    ("stratified_sample", "class_quota", "float tensor", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.zeros(2))", "RuntimeError", r"class_quota must be an int64 tensor, got dtype Float"),
    ("stratified_sample", "class_quota", "empty tensor [0]", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.zeros(0, dtype=torch.long))", "RuntimeError", r"class_quota must hold at least one class \(C >= 1\), got shape \[0\]"),
    ("stratified_sample", "class_quota", "0-dim tensor", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.tensor(2))", "RuntimeError", r"class_quota must have shape \[C\] or labels.shape\[:-1\] \+ \[C\]"),
    ("stratified_sample", "class_quota", "leading shape differs", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.zeros(3, 2, dtype=torch.long))", "RuntimeError", r"class_quota must have shape .*got shape \[3, 2\] for labels of shape \[2, 10\]"),
    ("stratified_sample", "class_quota", "other device", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.zeros(2, dtype=torch.long, device='meta'))", "RuntimeError", r"class_quota must be on the labels' device cpu, got a tensor on meta"),
    ("stratified_sample", "class_quota", "negative tensor values", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 1).all().item())(*{STRATIFIED_SAMPLE}(l, 4, torch.tensor([-3, 2]), False, seed=0)))({LABELS})", "ok: a negative quota takes nothing"),
    ("stratified_sample", "class_quota", "tensor values summing above num_samples", f"(lambda l: (lambda i, v: (l.gather(1, i.clamp(min=0))[v] == 0).sum().item() == 2 * 3)(*{STRATIFIED_SAMPLE}(l, 3, torch.tensor([9, 9]), False, seed=0)))({LABELS}.clamp(min=0))", "ok: takes in class order up to num_samples"),
    ("stratified_sample", "class_quota", "thousands of classes", f"{STRATIFIED_SAMPLE}({LABELS}, 4, torch.ones(5000, dtype=torch.long))[1].all().item()", "ok: any C"),
    ("stratified_sample", "fill", "None", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1], fill=None)", "TypeError", r"fill must be a bool, got NoneType"),
    ("stratified_sample", "fill", "int 1", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1], fill=1)", "TypeError", r"fill must be a bool, got int"),
    ("stratified_sample", "seed", "2^64 (out of int64)", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1], seed=2**64)", "OverflowError", r"seed must fit in int64 \(\[-2\*\*63, 2\*\*63 - 1\]\), got 18446744073709551616"),
    ("stratified_sample", "seed", "with generator", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1], seed=1, generator=torch.Generator())", "RuntimeError", r"seed and generator are mutually exclusive"),
    ("stratified_sample", "seed", "True (bool)", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1], seed=True)", "TypeError", r"seed must be an int or None, got bool"),
    ("stratified_sample", "generator", "not a Generator", f"{STRATIFIED_SAMPLE}({LABELS}, 4, [1], generator='cpu')", "TypeError", r"generator must be a torch.Generator or None, got str"),
    ("stratified_sample_gather", "features", "leading shape differs", f"{STRATIFIED_SAMPLE_GATHER}(torch.randn(2, 9, 3), {LABELS}, 4, [1, 1])", "RuntimeError", r"features must have shape \[..., N, \*F\]"),
    ("stratified_sample_gather", "labels", "float32", f"{STRATIFIED_SAMPLE_GATHER}({FEATURES}, torch.zeros(2, 10), 4, [1, 1])", "RuntimeError", r"labels must be bool or an integer tensor .*got dtype Float"),
    ("stratified_sample_gather", "num_samples", "-1", f"{STRATIFIED_SAMPLE_GATHER}({FEATURES}, {LABELS}, -1, torch.tensor([1, 1]))", "RuntimeError", r"num_samples must be >= 0, got -1"),
    ("stratified_sample_gather", "num_samples", "2^40 (too large for memory)", f"{STRATIFIED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 2**40, [1])", "OutOfMemoryError", r"num_samples = 1099511627776 needs 19791209299968 bytes for the outputs"),
    ("stratified_sample_gather", "features", "too large for memory once gathered (expanded)", f"{STRATIFIED_SAMPLE_GATHER}(torch.zeros(()).expand(2, 10, 2**40), {LABELS}, 3, [1])", "OutOfMemoryError", r"features of shape \[2, 10, 1099511627776\] and indices of shape \[2, 3\] needs 26388279066624 bytes for sampled_features on cpu"),
    ("stratified_sample_gather", "class_quota", "list summing above num_samples", f"{STRATIFIED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 4, [3, 2])", "ValueError", r"the sum of class_quota must be <= num_samples \(4\), got class_quota \[3, 2\]"),
    ("stratified_sample_gather", "class_quota", "int32 tensor", f"{STRATIFIED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 4, torch.zeros(2, dtype=torch.int32))", "RuntimeError", r"class_quota must be an int64 tensor, got dtype Int"),
    ("stratified_sample_gather", "fill", "int 1", f"{STRATIFIED_SAMPLE_GATHER}({FEATURES}, {LABELS}, 4, [1], fill=1)", "TypeError", r"fill must be a bool, got int"),
    ("gather_sampled", "indices", "int32", f"{GATHER_SAMPLED}({FEATURES}, {LABELS}, torch.zeros(2, 4, dtype=torch.int32), torch.ones(2, 4, dtype=torch.bool))", "RuntimeError", r"indices must be int64 and valid bool, got Int"),
    ("gather_sampled", "labels", "float32", f"{GATHER_SAMPLED}({FEATURES}, torch.zeros(2, 10), torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))", "RuntimeError", r"labels must be bool or an integer tensor .*got dtype Float"),
    ("gather_sampled", "labels", "uint64", f"{GATHER_SAMPLED}({FEATURES}, torch.arange(20).reshape(2, 10).to(torch.uint64), torch.full((2, 4), 3), torch.ones(2, 4, dtype=torch.bool))[1].eq(torch.tensor([3, 13]).unsqueeze(1)).all().item()", "ok: sampled labels as int64"),
    ("gather_sampled", "features", "too large for memory once gathered (expanded)", f"{GATHER_SAMPLED}(torch.zeros(()).expand(2, 10, 2**40), {LABELS}, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool))", "OutOfMemoryError", r"features of shape \[2, 10, 1099511627776\] and indices of shape \[2, 3\] needs 26388279066624 bytes for sampled_features on cpu"),
    ("gather_sampled", "features", "None", f"{GATHER_SAMPLED}(None, {LABELS}, torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))", "TypeError", r"features must be a torch.Tensor, got NoneType"),
    ("gather_sampled", "indices", "shape differs from valid", f"{GATHER_SAMPLED}({FEATURES}, {LABELS}, torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool))", "RuntimeError", r"indices and valid must have shape labels.shape\[:-1\] \+ \[K\]"),
    ("gather_sampled", "indices", "valid slot outside [0, N)", f"{GATHER_SAMPLED}({FEATURES}, {LABELS}, torch.full((2, 4), 10), torch.ones(2, 4, dtype=torch.bool))", "RuntimeError", r"index 10 of a valid slot is outside \[0, 10\)"),
    ("gather_sampled", "indices", "invalid slot outside [0, N)", f"{GATHER_SAMPLED}({FEATURES}, {LABELS}, torch.full((2, 4), 99), torch.zeros(2, 4, dtype=torch.bool))[1].eq(-1).all().item()", "ok: ignored (zeros, label -1)"),
    ("multi_scale_roi_align", "boxes", "a NaN coordinate", f"{ROI_ALIGN}({MAPS}, torch.tensor([[[0.0, float('nan'), 10.0, 50.0], [0.0, 0.0, 30.0, 40.0]]]).expand(2, 2, 4), 7, [0.25, 0.125], 2).reshape(2, 2, -1).eq(0).all(-1).tolist() == [[True, False], [True, False]]", "ok: zeros for that box (torchvision's roi_align may crash)"),
    ("multi_scale_roi_align", "boxes", "an infinite coordinate", f"{ROI_ALIGN}({MAPS}, torch.tensor([[[0.0, 0.0, float('inf'), 50.0]]]).expand(2, 1, 4), 7, [0.25, 0.125], 2).eq(0).all().item()", "ok: zeros for that box"),
    ("multi_scale_roi_align", "boxes", "x2 < x1", f"{ROI_ALIGN}({MAPS}, torch.tensor([[[60.0, 20.0, 10.0, 90.0]]]).expand(2, 1, 4), 7, [0.25, 0.125], 2).eq(0).all().item()", "ok: zeros (torchvision's LevelMapper gives no level)"),
    ("multi_scale_roi_align", "boxes", "shape [B, 4]", f"{ROI_ALIGN}({MAPS}, torch.zeros(2, 4), 7, [0.25, 0.125], 2)", "RuntimeError", r"boxes must have shape \[B, K, 4\] \(x1, y1, x2, y2\) with B = 2 \(the features' batch size\), got shape \[2, 4\]"),
    ("multi_scale_roi_align", "features", "empty list", f"{ROI_ALIGN}([], torch.zeros(2, 1, 4), 7, [], 2)", "RuntimeError", r"features must hold 1 to 16 feature maps \[B, C, H, W\] \(one per level, finest first\), got 0"),
    ("multi_scale_roi_align", "features", "channels differ", f"{ROI_ALIGN}([torch.randn(2, 4, 16, 16), torch.randn(2, 3, 8, 8)], torch.zeros(2, 1, 4), 7, [0.25, 0.125], 2)", "RuntimeError", r"features\[1\] must have features\[0\]'s batch size and channels \[2, 4\], got shape \[2, 3, 8, 8\]"),
    ("multi_scale_roi_align", "features", "a tensor, not a list", f"{ROI_ALIGN}(torch.randn(2, 4, 16, 16), torch.zeros(2, 1, 4), 7, [0.25], 2)", "TypeError", r"features must be a list of tensors \[B, C, H, W\], got Tensor"),
    ("multi_scale_roi_align", "spatial_scales", "one scale for two levels", f"{ROI_ALIGN}({MAPS}, torch.zeros(2, 1, 4), 7, [0.25], 2)", "RuntimeError", r"spatial_scales must hold one scale per level \(2\), got 1 scales"),
    ("multi_scale_roi_align", "sampling_ratio", "0 (adaptive)", f"{ROI_ALIGN}({MAPS}, torch.zeros(2, 1, 4), 7, [0.25, 0.125], 0)", "RuntimeError", r"sampling_ratio must be at least 1 .*adaptive sampling"),
    ("multi_scale_roi_align", "valid", "int64", f"{ROI_ALIGN}({MAPS}, torch.zeros(2, 1, 4), 7, [0.25, 0.125], 2, valid=torch.ones(2, 1, dtype=torch.long))", "RuntimeError", r"valid must be a bool tensor, got dtype Long"),
]

RUNNER = r"""
import json, sys
import torch, syncfree
cases = json.loads(sys.stdin.read())
for i, case in enumerate(cases):
    expr = case[3]
    print(json.dumps({"start": i}), flush=True)
    try:
        value = eval(expr)
        # "ok" expressions must evaluate to True (a bool or a one-element tensor).
        ok = (isinstance(value, bool) and value) or (isinstance(value, torch.Tensor) and value.numel() == 1 and bool(value))
        outcome = {"i": i, "raised": None, "value": bool(ok)}
    except Exception as e:
        outcome = {"i": i, "raised": type(e).__name__, "types": [t.__name__ for t in type(e).__mro__],
                   "message": str(e)}
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


def expected_pattern(case):
    op = case[0]
    return r"^syncfree\." + re.escape(op) + ": " + case[5]


def check(case, outcome):
    """Whether an observed outcome is the row's expected one."""
    if outcome is None:
        return False
    if len(case) == 5:  # "ok: ..."
        return outcome["raised"] is None and outcome["value"] is True
    error = case[4]
    return (outcome["raised"] is not None and error in outcome["types"]
            and re.match(expected_pattern(case), outcome["message"]) is not None)


@pytest.fixture(scope="module")
def observed():
    return run_cases()


def case_id(case):
    return f"{case[0]}-{case[1]}-{case[2]}".replace(" ", "_")


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_bad_input(observed, index):
    proc, outcomes, last = observed
    case = CASES[index]
    outcome = outcomes.get(index)
    assert outcome is not None, (
        f"not run: the runner crashed in case {CASES[last][:3] if last is not None else '?'}: {proc.stderr[-1500:]}")
    if len(case) == 5:
        assert outcome["raised"] is None, outcome
        assert outcome["value"] is True, outcome
    else:
        assert outcome["raised"] is not None, f"expected {case[4]}, got no error"
        assert case[4] in outcome["types"], outcome
        assert re.match(expected_pattern(case), outcome["message"]), (expected_pattern(case), outcome["message"])


def test_runner_exits_cleanly(observed):
    proc, outcomes, last = observed
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert len(outcomes) == len(CASES)


def markdown():
    proc, outcomes, last = run_cases()
    print("| op | argument | input | outcome |")
    print("| --- | --- | --- | --- |")
    for i, case in enumerate(CASES):
        o = outcomes.get(i)
        if o is None:
            text = "CRASH"
        elif len(case) == 5:
            text = case[4][3:].strip() if check(case, o) else f"UNEXPECTED: {o}"
        else:
            first = o["message"].splitlines()[0] if o["message"] else ""
            text = f"{o['raised']}: {first}" if check(case, o) else f"UNEXPECTED: {o}"
        print(f"| {case[0]} | {case[1]} | {case[2]} | {text.replace('|', '/')} |")


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        markdown()
