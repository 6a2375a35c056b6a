#!/usr/bin/env python3
"""Python benchmark: syncfree from Python, against the samplers people write
in PyTorch and against the floor.

Same workload and configurations as the C++ CLI (bench/syncfree_bench.cpp):
labels in {0, 1} (int64, half positive), K = N / 10, half positives,
features [.., N, 16] float32, sampled features and labels gathered; the
tensors drawn as the CLI draws them, from the same seed. Adds what only
Python has: the samplers as users write them, ``torch.compile`` of the static
topk sampler (torch >= 2.0; reported as unsupported otherwise), and syncfree
called from Python, through ``torch.ops`` and through the public wrapper.

    python3 bench/bench.py [--device cpu|cuda] [--sizes 1e3,1e4] [--batch-sizes 1e3]
                           [--batch 32] [--min-time 0.5] [--min-reps 5] [--max-iters 1000]
                           [--threads T,T,...] [--impls a,b,...] [--no-fixed-cost] [--json FILE]
                           [--trace FILE --trace-n N --trace-batch B]

Implementations (--impls; default all but topk-compiled, which compiles once
per shape and is slow):
  naive             nonzero + randperm per row, Python-int quotas (a host sync on CUDA)
  topk              static shapes, no sync: count quotas, three top-k passes
  topk-compiled     torch.compile(topk, fullgraph=True, dynamic=False)
  syncfree          torch.ops.syncfree.balanced_sample_gather(features, labels, K):
                    through torch.ops, no wrapper (the C++ CLI's syncfree)
  syncfree-python   syncfree.balanced_sample_gather(features, labels, K): the
                    public wrapper (through syncfree._C where the build has it)
  syncfree-indices  torch.ops.syncfree.balanced_sample(labels, K): sampling alone
  floor             the C++ CLI's floor: torch.count_nonzero(labels) (one
                    reduction over all the labels), then
                    flat_features.index_select(0, rows), flat_features =
                    features viewed as [rows * N, F], rows K random rows of
                    each row: one of FLOOR_ROW_SETS sets drawn before timing
                    (seeded, int64), the next set at each call (of the floor
                    or index-select, which take them in turn from one
                    cycle), so that a call reads other rows than the calls
                    before it, as a sampler's calls do
  floor-same-rows   the floor with the same rows at every call (a set of
                    its own, drawn after the others): the floor of every
                    result up to 2026-12-04 19:46 UTC, whose rows the caches
                    keep from one call to the next
  index-select      the floor's index_select alone (the next set each call)

Within one configuration every implementation at every thread count of
--threads is timed side by side (timing.interleaved_groups): --warmup untimed
calls of each, then rounds in which each thread count in turn sets torch's
thread count and calls each implementation once, in an order shuffled every
time, until there are --min-reps rounds and the calls took --min-time seconds
per implementation and thread count in all (a slow one takes most of it), at
most --max-iters rounds. So a ratio between thread counts (two threads
against one) is of medians measured over the same span of time, as is every
ratio to the naive sampler or to the floor (vs naive, vs floor, x floor,
x select).

Tables: every implementation (median, 10th..90th percentile, vs naive: the
naive median over this one, vs floor: this median over the floor's, host syncs
per call on CUDA); "syncfree against the floor (Python)"; and, with
--fixed-cost (the default), the fixed cost of a call on a tiny input on the
CPU, 1 thread: microseconds per call of torch.nonzero and of each syncfree
call through torch.ops and through the wrapper, timed in loops of 200
calls (FIXED_COST_CALLS).

--trace writes a Chrome trace (chrome://tracing, Perfetto) of a few steps of
each implementation for one configuration, recorded with the torch profiler;
each step is labelled with its implementation's name.
"""
import argparse
import ctypes
import datetime
import itertools
import json
import os
import sys
import warnings

import torch

from timing import cuda_event_ms, host_ms, interleaved, interleaved_groups, percentile

# syncfree (its operators, torch.ops.syncfree) is imported by main(), after
# keep_freed_memory: the wrapper implementation reads this name.
syncfree = None

FEATURE_DIM = 16
DEFAULT_IMPLS = "naive,topk,syncfree,syncfree-python,syncfree-indices,floor,floor-same-rows,index-select"
# The floor's sets of random rows (the C++ CLI's kFloorRowSets): enough that
# the sets a call does not read hold more rows than a core's L2 cache where
# a set's rows are a sizeable part of it (one row of 1e5: 640 kB of rows a
# set; the features of smaller rows fit the caches whole).
FLOOR_ROW_SETS = 16
# The fixed-cost table: calls per timed loop (one call of a few microseconds
# is too short for the host clock), rounds at least, and its input.
FIXED_COST_CALLS = 200
FIXED_COST_MIN_ROUNDS = 15
FIXED_COST_N = 10


def keep_freed_memory():
    """glibc: keep freed memory in the process, as the C++ benchmark does."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, -1)  # M_TRIM_THRESHOLD
    except OSError:
        pass


def naive_sample(features, labels, k):
    """One row: nonzero + randperm; Python-int quotas (a host sync on CUDA)."""
    positive = torch.nonzero(labels == 1).squeeze(1)
    negative = torch.nonzero(labels == 0).squeeze(1)
    num_pos = min(positive.numel(), k // 2)
    num_neg = min(negative.numel(), k - num_pos)
    num_pos = min(positive.numel(), k - num_neg)
    pos = positive[torch.randperm(positive.numel(), device=labels.device)[:num_pos]]
    neg = negative[torch.randperm(negative.numel(), device=labels.device)[:num_neg]]
    idx = torch.cat([pos, neg])
    idx = idx[torch.randperm(idx.numel(), device=labels.device)]
    return features[idx], labels[idx]


def naive_batched(features, labels, k):
    if labels.dim() == 1:
        return naive_sample(features, labels, k)
    outs = [naive_sample(f, l, k) for f, l in zip(features, labels)]
    return torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])


def topk_sample(features, labels, k):
    """Static shapes, no sync: count_nonzero quotas, three top-k passes."""
    pos_mask, neg_mask = labels == 1, labels == 0
    P = pos_mask.sum(-1, keepdim=True)
    Q = neg_mask.sum(-1, keepdim=True)
    num_pos = P.clamp(max=k // 2)
    num_neg = torch.minimum(Q, k - num_pos)
    num_pos = torch.minimum(P, k - num_neg)
    keys = torch.rand(labels.shape, device=labels.device)
    none = torch.full((), -1.0, device=labels.device)
    pos_keys, pos_idx = torch.where(pos_mask, keys, none).topk(k)
    neg_keys, neg_idx = torch.where(neg_mask, keys, none).topk(k)
    rank = torch.arange(k, device=labels.device)
    pos_keys = torch.where(rank < num_pos, pos_keys, none)
    neg_keys = torch.where(rank < num_neg, neg_keys, none)
    merged_keys, merged_at = torch.cat([pos_keys, neg_keys], -1).topk(k)
    idx = torch.cat([pos_idx, neg_idx], -1).gather(-1, merged_at)
    valid = merged_keys >= 0
    sampled = features.gather(-2, idx.unsqueeze(-1).expand(*idx.shape, features.shape[-1]))
    return sampled * valid.unsqueeze(-1), torch.where(valid, labels.gather(-1, idx), -1)


def syncfree_sample(features, labels, k):
    """Through torch.ops, no wrapper: the dispatcher's operator, as the C++ CLI calls it."""
    f, l, v = torch.ops.syncfree.balanced_sample_gather(features, labels, k)
    return f, l


def syncfree_python_sample(features, labels, k):
    """Through the public wrapper: its entry syncfree._C where the build has it
    (the wrapper's type checks only where the entry leaves the call to torch.ops)."""
    f, l, v = syncfree.balanced_sample_gather(features, labels, k)
    return f, l


def syncfree_indices(features, labels, k):
    """Sampling alone (no gather), through torch.ops."""
    return torch.ops.syncfree.balanced_sample(labels, k)


class Workload:
    """One configuration's tensors: labels, features, K, and the floor's
    inputs, drawn as the C++ CLI draws them (seed 0, then labels, features
    and the floor's FLOOR_ROW_SETS sets of random rows, in that order; then
    floor-same-rows' set). next_rows() returns the sets in turn, one a call,
    from one cycle for all the calls that take them."""

    def __init__(self, batch, n, device):
        torch.manual_seed(0)
        self.k = n // 10
        rows = max(batch, 1)
        shape = (batch, n) if batch else (n,)
        self.labels = torch.randint(0, 2, shape, device=device)
        self.features = torch.randn(shape + (FEATURE_DIM,), device=device)
        # The floor's rows: sets of K per row, as flat row numbers of features
        # viewed as [rows * N, F].
        first = torch.arange(rows, device=device).unsqueeze(1) * n
        self.row_sets = [(torch.randint(0, n, (rows, self.k), device=device) + first).reshape(rows * self.k)
                         for _ in range(FLOOR_ROW_SETS + 1)]
        self.same_rows = self.row_sets.pop()
        self.flat_features = self.features.reshape(rows * n, FEATURE_DIM)
        self._sets = itertools.cycle(self.row_sets)

    def next_rows(self):
        return next(self._sets)


def sampler_call(fn):
    """A sampler fn(features, labels, k) as a call on a Workload."""
    def make(w):
        features, labels, k = w.features, w.labels, w.k
        return lambda: fn(features, labels, k)
    return make


def floor_call(w, same_rows=False):
    flat_features, labels = w.flat_features, w.labels
    rows = (lambda: w.same_rows) if same_rows else w.next_rows

    def floor():
        torch.count_nonzero(labels)  # one reduction over all the labels
        return flat_features.index_select(0, rows())
    return floor


def index_select_call(w):
    flat_features, rows = w.flat_features, w.next_rows
    return lambda: flat_features.index_select(0, rows())


def make_impls(names, device):
    """{name: (make, note)}: make(workload) returns the call to time; make is
    None (with a note) where the implementation cannot run."""
    impls = {}
    for name in names:
        if name == "naive":
            impls[name] = (sampler_call(naive_batched), None)
        elif name == "topk":
            impls[name] = (sampler_call(topk_sample), None)
        elif name == "topk-compiled":
            if not hasattr(torch, "compile"):
                impls[name] = (None, f"torch.compile needs torch >= 2.0 (this is {torch.__version__})")
            else:
                impls[name] = (sampler_call(torch.compile(topk_sample, fullgraph=True, dynamic=False)), None)
        elif name == "syncfree":
            impls[name] = (sampler_call(syncfree_sample), None)
        elif name == "syncfree-python":
            impls[name] = (sampler_call(syncfree_python_sample), None)
        elif name == "syncfree-indices":
            impls[name] = (sampler_call(syncfree_indices), None)
        elif name == "floor":
            impls[name] = (floor_call, None)
        elif name == "floor-same-rows":
            impls[name] = (lambda w: floor_call(w, same_rows=True), None)
        elif name == "index-select":
            impls[name] = (index_select_call, None)
        else:
            sys.exit(f"unknown implementation {name} (known: {DEFAULT_IMPLS},topk-compiled)")
    return impls


def count_syncs(fn, calls=3):
    """Host syncs per call, from CUDA's sync debug mode warnings."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(calls):
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message) for w in caught) / calls


def parse_sizes(text):
    return [int(float(s)) for s in text.split(",") if s]


def parse_threads(text):
    threads = [int(s) for s in text.split(",") if s]
    if not threads or min(threads) < 1:
        raise argparse.ArgumentTypeError(f"--threads: a comma list of thread counts >= 1, got '{text}'")
    if len(set(threads)) != len(threads):
        raise argparse.ArgumentTypeError(f"--threads: each thread count once, got '{text}'")
    return threads


def load_average():
    """The 1-minute load average (/proc/loadavg), or None where there is none."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def loaded(load, threads, own=0):
    """Whether other work was running: a load, less `own` (this run's share),
    above the CPUs that `threads` threads leave free."""
    return load is not None and load - own > (os.cpu_count() or 1) - threads + 0.5


def run_config(args, impls, batch, n, cuda, thread_counts):
    """Every implementation on one configuration at every thread count of
    thread_counts, side by side in the same rounds (timing.interleaved_groups).
    Returns the results, one per impl and thread count, thread counts outer."""
    w = Workload(batch, n, args.device)
    rows, k = max(batch, 1), w.k
    print(f"[bench] threads={','.join(map(str, thread_counts))} N={n} B={rows} K={k} ...",
          file=sys.stderr, flush=True)
    if impls.get("topk-compiled", (None,))[0] is not None:
        # One fresh compilation per shape: recompiles would otherwise hit
        # dynamo's cache limit and silently run the eager function. Dynamo
        # guards on torch's thread count too, so each thread count is one
        # more entry: make room for them all.
        torch._dynamo.reset()
        config = torch._dynamo.config
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(config, limit):
                setattr(config, limit, max(getattr(config, limit), len(thread_counts)))
                break
    cfg, calls = [], {threads: {} for threads in thread_counts}
    for threads in thread_counts:
        for name, (make, note) in impls.items():
            cfg.append(dict(n=n, batch=rows, k=k, threads=threads, impl=name, supported=make is not None,
                            note=note or ""))
            if make is not None:
                calls[threads][name] = make(w)
    # Each thread count's calls in a block of their own, so that all but the
    # first of a block run as in a program that keeps its thread count; the
    # blocks alternate.
    times = interleaved_groups(calls, args.min_reps, args.min_time, cuda_event_ms if cuda else host_ms,
                               warmup=args.warmup, max_rounds=max(args.max_iters, 1),
                               enter=torch.set_num_threads) if any(calls.values()) else {}
    for r in cfg:
        if r["supported"]:
            ms = times[(r["threads"], r["impl"])]
            if cuda:
                torch.set_num_threads(r["threads"])
            r.update(iters=len(ms), median_ms=percentile(ms, 0.5), p10_ms=percentile(ms, 0.1),
                     p90_ms=percentile(ms, 0.9), syncs_per_call=count_syncs(calls[r["threads"]][r["impl"]])
                     if cuda else None)
    for threads in thread_counts:
        same = [r for r in cfg if r["threads"] == threads and r["supported"]]
        naive = next((r for r in same if r["impl"] == "naive"), None)
        floor = next((r for r in same if r["impl"] == "floor"), None)
        for r in same:
            if naive:
                r["speedup_vs_naive"] = naive["median_ms"] / r["median_ms"]
            r["vs_floor"] = r["median_ms"] / floor["median_ms"] if floor else None
    return cfg


def ratio(a, b, fmt="{:.2f}x"):
    return fmt.format(a / b) if a is not None and b else "n/a"


def ms_text(value):
    return "n/a" if value is None else f"{value:.4f}"


def print_table(results):
    print(f"\n{'thr':>3} {'N':>9} {'B':>4} {'K':>7}  {'impl':<16} {'median ms':>10} {'p10..p90 ms':>23} "
          f"{'vs naive':>8} {'vs floor':>8} {'syncs':>6}")
    for r in results:
        head = f"{r['threads']:>3} {r['n']:>9} {r['batch']:>4} {r['k']:>7}  {r['impl']:<16}"
        if not r["supported"]:
            print(f"{head} {'-':>10}  ({r['note']})")
            continue
        syncs = "n/a" if r["syncs_per_call"] is None else f"{r['syncs_per_call']:.1f}"
        spread = f"{r['p10_ms']:.4f}..{r['p90_ms']:.4f}"
        naive = f"{r['speedup_vs_naive']:.1f}x" if "speedup_vs_naive" in r else "n/a"
        floor = f"{r['vs_floor']:.2f}x" if r.get("vs_floor") is not None else "n/a"
        print(f"{head} {r['median_ms']:>10.4f} {spread:>23} {naive:>8} {floor:>8} {syncs:>6}")
    print("vs naive: the naive median over this one; vs floor: this median over the floor's (count_nonzero "
          "over the labels + index_select of K random feature rows per row, other rows at each call); both "
          "measured side by side in this run (n/a: not run).")


def print_floor_table(results):
    """syncfree (torch.ops and the wrapper) against the floor, per thread
    count and configuration: medians in ms, ratios of medians of this run."""
    def median(like, impl):
        for r in results:
            if (r["threads"], r["n"], r["batch"]) == like and r["impl"] == impl and r["supported"]:
                return r["median_ms"]
        return None

    keys = []
    for r in results:
        key = (r["threads"], r["n"], r["batch"])
        if r["impl"] in ("syncfree", "syncfree-python") and r["supported"] and key not in keys:
            keys.append(key)
    print("\nsyncfree against the floor (Python; medians in ms, ratios of medians of this run)")
    if not keys:
        print("(neither syncfree nor syncfree-python was run)")
        return
    print(f"{'thr':>3} {'N':>9} {'B':>4}  {'torch.ops':>10} {'wrapper':>10} {'floor':>10} {'x floor':>8} "
          f"{'wr x floor':>10} {'x same':>7}  {'gather':>10} {'idx_select':>10} {'x select':>8}  {'vs naive':>8}")
    for key in keys:
        ops, wrapper, floor = median(key, "syncfree"), median(key, "syncfree-python"), median(key, "floor")
        indices, select, naive = median(key, "syncfree-indices"), median(key, "index-select"), median(key, "naive")
        same = median(key, "floor-same-rows")
        gather = ops - indices if ops is not None and indices is not None else None
        print(f"{key[0]:>3} {key[1]:>9} {key[2]:>4}  {ms_text(ops):>10} {ms_text(wrapper):>10} "
              f"{ms_text(floor):>10} {ratio(ops, floor):>8} {ratio(wrapper, floor):>10} {ratio(ops, same):>7}  "
              f"{ms_text(gather):>10} {ms_text(select):>10} {ratio(gather, select):>8}  "
              f"{ratio(naive, ops, '{:.1f}x'):>8}")
    print("torch.ops: torch.ops.syncfree.balanced_sample_gather (no wrapper); wrapper: "
          "syncfree.balanced_sample_gather; x floor, wr x floor: each over the floor (other rows at each "
          "call); x same: torch.ops over floor-same-rows (the same rows at every call); gather: its gather "
          "part, torch.ops - syncfree-indices (balanced_sample alone); x select: that over index_select of "
          "as many random rows (other rows at each call); vs naive: the naive median over torch.ops'. "
          "n/a: not run.")


def fixed_cost(args):
    """The fixed cost of a call, on the CPU, 1 thread, a tiny input
    (labels [FIXED_COST_N] in {0, 1}, features [FIXED_COST_N, F], K = 1):
    microseconds per call, timed in interleaved rounds of loops of
    FIXED_COST_CALLS calls. Returns the JSON block."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        labels = torch.randint(0, 2, (FIXED_COST_N,))
        mask = labels.bool()
        features = torch.randn(FIXED_COST_N, FEATURE_DIM)
        k = 1
        # balanced_sample's quotas for K = 1: class 0 (negatives) K - K // 2, class 1 (positives) K // 2.
        quota_list = [k - k // 2, k // 2]
        quota = torch.tensor(quota_list, dtype=torch.int64)
        ops = torch.ops.syncfree
        cases = [
            ("torch.nonzero", "torch.nonzero(mask)", torch.nonzero, (mask,)),
            ("aten.nonzero", "torch.ops.aten.nonzero(mask)", torch.ops.aten.nonzero, (mask,)),
            ("balanced_sample (torch.ops)", "torch.ops.syncfree.balanced_sample(labels, 1)",
             ops.balanced_sample, (labels, k)),
            ("balanced_sample (wrapper)", "syncfree.balanced_sample(labels, 1)", syncfree.balanced_sample, (labels, k)),
            ("balanced_sample_gather (torch.ops)", "torch.ops.syncfree.balanced_sample_gather(features, labels, 1)",
             ops.balanced_sample_gather, (features, labels, k)),
            ("balanced_sample_gather (wrapper)", "syncfree.balanced_sample_gather(features, labels, 1)",
             syncfree.balanced_sample_gather, (features, labels, k)),
            ("stratified_sample_gather (torch.ops)",
             f"torch.ops.syncfree.stratified_sample_gather(features, labels, 1, torch.tensor({quota_list}))",
             ops.stratified_sample_gather, (features, labels, k, quota)),
            ("stratified_sample_gather (wrapper)",
             f"syncfree.stratified_sample_gather(features, labels, 1, {quota_list})",
             syncfree.stratified_sample_gather, (features, labels, k, quota_list)),
            ("stratified_sample_gather (wrapper, tensor quota)",
             f"syncfree.stratified_sample_gather(features, labels, 1, torch.tensor({quota_list}))",
             syncfree.stratified_sample_gather, (features, labels, k, quota)),
        ]

        def loop(fn, fn_args):
            def run():
                for _ in range(FIXED_COST_CALLS):
                    fn(*fn_args)
            return run

        print(f"[bench] fixed cost: {len(cases)} calls, loops of {FIXED_COST_CALLS} ...", file=sys.stderr, flush=True)
        times = interleaved({name: loop(fn, a) for name, _, fn, a in cases},
                            max(FIXED_COST_MIN_ROUNDS, args.min_reps), args.min_time, host_ms,
                            warmup=args.warmup, max_rounds=max(args.max_iters, FIXED_COST_MIN_ROUNDS), shuffle=True)
    finally:
        torch.set_num_threads(saved)
    per_call = {name: [t * 1e3 / FIXED_COST_CALLS for t in times[name]] for name, _, _, _ in cases}
    us = {name: percentile(v, 0.5) for name, v in per_call.items()}
    calls = [dict(name=name, call=call, median_us=us[name], p10_us=percentile(per_call[name], 0.1),
                  p90_us=percentile(per_call[name], 0.9)) for name, call, _, _ in cases]
    over_nonzero = {
        "balanced_sample (torch.ops) - torch.nonzero": us["balanced_sample (torch.ops)"] - us["torch.nonzero"],
        "balanced_sample (torch.ops) - aten.nonzero": us["balanced_sample (torch.ops)"] - us["aten.nonzero"],
    }
    wrapper_cost = {
        op: us[f"{op} (wrapper)"] - us[f"{op} (torch.ops)"]
        for op in ("balanced_sample", "balanced_sample_gather", "stratified_sample_gather")
    }
    wrapper_cost["stratified_sample_gather, tensor quota"] = (
        us["stratified_sample_gather (wrapper, tensor quota)"] - us["stratified_sample_gather (torch.ops)"])
    return dict(device="cpu", threads=1, n=FIXED_COST_N, k=k, feature_dim=FEATURE_DIM,
                calls_per_loop=FIXED_COST_CALLS, rounds=len(times[cases[0][0]]), calls=calls,
                op_over_nonzero_us=over_nonzero, wrapper_cost_us=wrapper_cost)


def print_fixed_cost(fc):
    print(f"\nfixed cost (CPU, {fc['threads']} thread, labels [{fc['n']}] in {{0, 1}}, features "
          f"[{fc['n']}, {fc['feature_dim']}], K = {fc['k']}; us per call, medians of {fc['rounds']} "
          f"interleaved rounds of loops of {fc['calls_per_loop']} calls)")
    print(f"{'us/call':>8} {'p10..p90 us':>15}  call")
    for c in fc["calls"]:
        spread = f"{c['p10_us']:.2f}..{c['p90_us']:.2f}"
        print(f"{c['median_us']:>8.2f} {spread:>15}  {c['call']}")
    print("op over torch.nonzero (us):")
    for name, v in fc["op_over_nonzero_us"].items():
        print(f"{v:>+8.2f}  {name}")
    print("wrapper cost (us): the public wrapper minus its torch.ops call:")
    for name, v in fc["wrapper_cost_us"].items():
        print(f"{v:>+8.2f}  {name}")
    print("(a list quota is checked and made into a tensor once per distinct list, then taken from the "
          "wrapper's cache: the lookup is in its wrapper cost)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--sizes", type=parse_sizes, help="N of the single rows (default 1e3..1e6, 1e7 on CUDA)")
    p.add_argument("--batch-sizes", type=parse_sizes, help="N of the batches (default 1e3..1e5, 1e6 on CUDA)")
    p.add_argument("--batch", type=int, default=32, help="rows of a batch")
    p.add_argument("--min-time", type=float, default=0.5,
                   help="seconds of calls per implementation, thread count and configuration, in all "
                        "(interleaved rounds: a slow implementation takes most of it)")
    p.add_argument("--min-reps", type=int, default=5, help="rounds per configuration, at least")
    p.add_argument("--max-iters", type=int, default=1000, help="rounds (calls of each implementation), at most")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls of each implementation first")
    p.add_argument("--threads", type=parse_threads, default=[os.cpu_count() or 1],
                   help="torch's CPU thread counts, a comma list (default: every CPU)")
    p.add_argument("--impls", default=DEFAULT_IMPLS, help=f"default {DEFAULT_IMPLS}; also topk-compiled")
    p.add_argument("--fixed-cost", action=argparse.BooleanOptionalAction, default=True,
                   help="the fixed-cost table (CPU, 1 thread, tiny input; default on)")
    p.add_argument("--json")
    p.add_argument("--trace")
    p.add_argument("--trace-n", type=parse_sizes, default=[100000])
    p.add_argument("--trace-batch", type=int, default=1)
    args = p.parse_args()

    keep_freed_memory()
    global syncfree
    import syncfree  # loads the operators

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device")
    # An empty list (--sizes '') runs none, as in the C++ benchmark.
    sizes = args.sizes if args.sizes is not None else [10**3, 10**4, 10**5, 10**6] + ([10**7] if cuda else [])
    batch_sizes = (args.batch_sizes if args.batch_sizes is not None
                   else [10**3, 10**4, 10**5] + ([10**6] if cuda else []))
    impls = make_impls([name for name in args.impls.split(",") if name], args.device)

    if args.trace:
        torch.set_num_threads(args.threads[0])
        trace(args, impls)
        return

    # The load tests take the run's largest thread count, as the C++ CLI's.
    threads = max(args.threads)
    load_start = load_average()
    print(f"syncfree Python benchmark | device {args.device} | CPU threads {','.join(map(str, args.threads))} | "
          f"torch {torch.__version__} | K = N/10, F = {FEATURE_DIM} | load average {load_start}"
          + (" | LOADED: other work is running, timings are not representative"
             if loaded(load_start, threads) else ""))
    results = []
    configs = [(0, n) for n in sizes] + [(args.batch, n) for n in batch_sizes]
    for batch, n in configs:
        results.extend(run_config(args, impls, batch, n, cuda, args.threads))
    # The tables list thread counts outer, configurations inner.
    results.sort(key=lambda r: args.threads.index(r["threads"]))
    fc = fixed_cost(args) if args.fixed_cost else None

    print_table(results)
    print_floor_table(results)
    if fc:
        print_fixed_cost(fc)
    load_end = load_average()
    # At the end the load includes this run's own threads.
    was_loaded = loaded(load_start, threads) or loaded(load_end, threads, own=threads)
    print(f"\nload average at start {load_start}, at end {load_end}"
          + (": LOADED, other work was running" if was_loaded else ""))
    if args.json:
        with open(args.json, "w") as f:
            # threads: the run's largest thread count (as the C++ CLI's JSON);
            # thread_counts: all of them, each result has its own.
            json.dump(dict(device=args.device, threads=threads, thread_counts=args.threads,
                           torch=torch.__version__, loadavg_start=load_start, loadavg_end=load_end,
                           loaded=was_loaded, date=datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
                           feature_dim=FEATURE_DIM, source="bench/bench.py", results=results, fixed_cost=fc),
                      f, indent=1)


def trace(args, impls):
    from torch.profiler import ProfilerActivity, profile, record_function

    n, batch = args.trace_n[0], args.trace_batch
    w = Workload(batch if batch > 1 else 0, n, args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    runnable = {name: make(w) for name, (make, _) in impls.items() if make is not None}
    for fn in runnable.values():  # warm up outside the trace
        fn()
    with profile(activities=activities) as prof:
        for name, fn in runnable.items():
            for step in range(3):
                with record_function(f"{name} step {step}"):
                    fn()
            if args.device == "cuda":
                torch.cuda.synchronize()
    prof.export_chrome_trace(args.trace)
    print(f"wrote {args.trace}: 3 steps each of {', '.join(runnable)} at N={n}, B={batch}, K={w.k}")


if __name__ == "__main__":
    main()
