"""Rows longer than 2^31 labels on the CPU: int64 indexing end to end, and the
documented workspace bound (2 bytes per label plus 16 x (ceil(N / 65536) + 1)
bytes per row), checked against the peak memory of a subprocess."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    import syncfree
    n = 2**31 + 1000
    labels = torch.zeros(n, dtype=torch.bool)           # all negatives ...
    labels[2**31 + 5::97] = True                         # ... positives only past 2^31
    torch.randint(0, 2, (1,))                            # settle allocations before measuring
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    idx, valid = syncfree.balanced_sample(labels, 64, seed=3)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    chosen = idx[valid]
    print(json.dumps(dict(
        n=n, before=before, after=after,
        num_valid=int(valid.sum()),
        unique=len(set(chosen.tolist())),
        min_pos=int(chosen[labels[chosen]].min()),
        num_pos=int(labels[chosen].sum()),
        max_index=int(chosen.max()),
    )))
    """
)


@pytest.mark.slow
def test_row_longer_than_2_pow_31():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    n = r["n"]
    assert r["num_valid"] == 64 and r["unique"] == 64
    positives = len(range(2**31 + 5, n, 97))  # 11, all past 2^31: all taken, negatives fill
    assert r["num_pos"] == positives and r["min_pos"] >= 2**31
    assert r["max_index"] < n
    # Peak growth during the call: the workspace (2 bytes per label, two int64
    # prefix sums per chunk and one more) plus the outputs, with 64 MiB of
    # slack for the allocator.
    bound = 2 * n + 16 * (-(-n // 65536) + 1) + 64 * 1024 * 1024
    assert r["after"] - r["before"] <= bound, (r["after"] - r["before"], bound)
