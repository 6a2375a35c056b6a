#!/usr/bin/env python3
"""Python benchmark: syncfree against the samplers people write in PyTorch.

Same workload and configurations as the C++ CLI (bench/syncfree_bench.cpp):
labels in {0, 1} (int64, half positive), K = N / 10, half positives,
features [.., N, 16] float32, sampled features and labels gathered. Adds what
only Python has: the samplers as users write them, ``torch.compile`` of the
static topk sampler (torch >= 2.0; reported as unsupported otherwise), and
syncfree called through ``torch.ops``.

    python3 bench/bench.py [--device cpu|cuda] [--sizes 1e3,1e4] [--batch-sizes 1e3]
                           [--batch 32] [--min-time 0.5] [--threads T]
                           [--impls naive,topk,topk-compiled,syncfree] [--json FILE]
                           [--trace FILE --trace-n N --trace-batch B]

--trace writes a Chrome trace (chrome://tracing, Perfetto) of a few steps of
each implementation for one configuration, recorded with the torch profiler;
each step is labelled with its implementation's name.
"""
import argparse
import ctypes
import datetime
import json
import os
import sys
import warnings

import torch

from timing import cuda_event_ms, host_ms, percentile, repeat

FEATURE_DIM = 16


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
    f, l, v = torch.ops.syncfree.balanced_sample_gather(features, labels, k)
    return f, l


def make_impls(names, device):
    impls = {}
    for name in names:
        if name == "naive":
            impls[name] = (naive_batched, None)
        elif name == "topk":
            impls[name] = (topk_sample, None)
        elif name == "topk-compiled":
            if not hasattr(torch, "compile"):
                impls[name] = (None, f"torch.compile needs torch >= 2.0 (this is {torch.__version__})")
            else:
                impls[name] = (torch.compile(topk_sample, fullgraph=True, dynamic=False), None)
        elif name == "syncfree":
            impls[name] = (syncfree_sample, None)
        else:
            sys.exit(f"unknown implementation {name}")
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--sizes", type=parse_sizes)
    p.add_argument("--batch-sizes", type=parse_sizes)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--impls", default="naive,topk,topk-compiled,syncfree")
    p.add_argument("--json")
    p.add_argument("--trace")
    p.add_argument("--trace-n", type=parse_sizes, default=[100000])
    p.add_argument("--trace-batch", type=int, default=1)
    args = p.parse_args()

    keep_freed_memory()
    torch.set_num_threads(args.threads)
    import syncfree  # noqa: F401  (loads the operators)

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device")
    # An empty list (--sizes '') runs none, as in the C++ benchmark.
    sizes = args.sizes if args.sizes is not None else [10**3, 10**4, 10**5, 10**6] + ([10**7] if cuda else [])
    batch_sizes = (args.batch_sizes if args.batch_sizes is not None
                   else [10**3, 10**4, 10**5] + ([10**6] if cuda else []))
    impls = make_impls(args.impls.split(","), args.device)

    if args.trace:
        trace(args, impls)
        return

    load_start = load_average()
    print(f"syncfree Python benchmark | device {args.device} | {torch.get_num_threads()} CPU threads | "
          f"torch {torch.__version__} | K = N/10, F = {FEATURE_DIM} | load average {load_start}"
          + (" | LOADED: other work is running, timings are not representative"
             if loaded(load_start, torch.get_num_threads()) else ""))
    results = []
    configs = [(0, n) for n in sizes] + [(args.batch, n) for n in batch_sizes]
    one = cuda_event_ms if cuda else host_ms
    for batch, n in configs:
        k = n // 10
        rows = max(batch, 1)
        print(f"[bench] N={n} B={rows} K={k} ...", file=sys.stderr, flush=True)
        torch.manual_seed(0)
        shape = (batch, n) if batch else (n,)
        labels = torch.randint(0, 2, shape, device=args.device)
        features = torch.randn(shape + (FEATURE_DIM,), device=args.device)
        if impls.get("topk-compiled", (None,))[0] is not None:
            # One fresh compilation per shape: recompiles would otherwise hit
            # dynamo's cache limit and silently run the eager function.
            torch._dynamo.reset()
        cfg = []
        for name, (fn, note) in impls.items():
            r = dict(n=n, batch=rows, k=k, impl=name, supported=fn is not None, note=note or "")
            if fn is not None:
                call = lambda: fn(features, labels, k)  # noqa: E731
                for _ in range(args.warmup):
                    call()
                times = repeat(call, args.min_time, args.max_iters, one)
                r.update(iters=len(times), median_ms=percentile(times, 0.5),
                         p10_ms=percentile(times, 0.1), p90_ms=percentile(times, 0.9),
                         syncs_per_call=count_syncs(call) if cuda else None)
            cfg.append(r)
        naive = next((r for r in cfg if r["impl"] == "naive" and r["supported"]), None)
        for r in cfg:
            if r["supported"] and naive:
                r["speedup_vs_naive"] = naive["median_ms"] / r["median_ms"]
        results.extend(cfg)

    print(f"\n{'N':>9} {'B':>4} {'K':>7}  {'impl':<14} {'median ms':>10} {'p10..p90 ms':>23} {'vs naive':>8} {'syncs':>6}")
    for r in results:
        head = f"{r['n']:>9} {r['batch']:>4} {r['k']:>7}  {r['impl']:<14}"
        if not r["supported"]:
            print(f"{head} {'-':>10}  ({r['note']})")
            continue
        syncs = "n/a" if r["syncs_per_call"] is None else f"{r['syncs_per_call']:.1f}"
        spread = f"{r['p10_ms']:.4f}..{r['p90_ms']:.4f}"
        print(f"{head} {r['median_ms']:>10.4f} {spread:>23} {r.get('speedup_vs_naive', 0):>7.1f}x {syncs:>6}")
    load_end = load_average()
    # At the end the load includes this run's own threads.
    threads = torch.get_num_threads()
    was_loaded = loaded(load_start, threads) or loaded(load_end, threads, own=threads)
    print(f"load average at start {load_start}, at end {load_end}"
          + (": LOADED, other work was running" if was_loaded else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=args.device, threads=torch.get_num_threads(), torch=torch.__version__,
                           loadavg_start=load_start, loadavg_end=load_end, loaded=was_loaded,
                           date=datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
                           feature_dim=FEATURE_DIM, source="bench/bench.py", results=results), f, indent=1)


def trace(args, impls):
    from torch.profiler import ProfilerActivity, profile, record_function

    n, batch = args.trace_n[0], args.trace_batch
    k = n // 10
    shape = (batch, n) if batch > 1 else (n,)
    torch.manual_seed(0)
    labels = torch.randint(0, 2, shape, device=args.device)
    features = torch.randn(shape + (FEATURE_DIM,), device=args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    runnable = {name: fn for name, (fn, _) in impls.items() if fn is not None}
    for fn in runnable.values():  # warm up outside the trace
        fn(features, labels, k)
    with profile(activities=activities) as prof:
        for name, fn in runnable.items():
            for step in range(3):
                with record_function(f"{name} step {step}"):
                    fn(features, labels, k)
            if args.device == "cuda":
                torch.cuda.synchronize()
    prof.export_chrome_trace(args.trace)
    print(f"wrote {args.trace}: 3 steps each of {', '.join(runnable)} at N={n}, B={batch}, K={k}")


if __name__ == "__main__":
    main()
