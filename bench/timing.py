"""Timing shared by the Python benchmarks (bench.py, compact_bench.py,
nms_bench.py, stratified_bench.py, detection_bench.py): one call timed on the
host clock or with CUDA events, an implementation called repeatedly on its
own, implementations called in interleaved rounds (or in groups, each in
its own setting), percentiles, and the
command-line options of the interleaved benchmarks.

Every time here is in milliseconds.
"""
import random
import time


def host_ms(fn, sync=None, clock=time.perf_counter):
    """Milliseconds of one call of fn on the host clock, `sync` (when given)
    called before and after."""
    if sync is not None:
        sync()
    t0 = clock()
    fn()
    if sync is not None:
        sync()
    return (clock() - t0) * 1e3


def cuda_event_ms(fn):
    """Milliseconds of one call of fn on the current CUDA stream, between two
    CUDA events (the device's time, waited for)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def repeat(fn, min_time, max_iters, one=host_ms, min_calls=5, clock=time.perf_counter):
    """fn alone, call by call (`one` times a call): at least `min_calls`
    calls, then until `min_time` seconds of wall clock have passed or
    `max_iters` calls were made. Returns the calls' milliseconds."""
    times, start = [], clock()
    while len(times) < max_iters and (len(times) < min_calls or clock() - start < min_time):
        times.append(one(fn))
    return times


def interleaved(fns, min_rounds, min_time=0.0, one=host_ms, warmup=0, max_rounds=None, shuffle=False):
    """{name: fn} timed side by side: `warmup` untimed calls of each, then
    rounds in which every fn is called once (`one` times a call), the order
    rotated by one every round, so that no fn always runs first (while the
    previous round's last fn may still spin its threads, or its frees may
    have trimmed the heap). A rotation still puts each fn after the same
    other one in all but one position: with several fns, the one after the
    heaviest always runs on the caches that one evicted. shuffle=True
    shuffles the order afresh every round instead (a fixed seed: the same
    orders every run), so that each fn follows every other one. Rounds go on until there are `min_rounds` and the
    calls took `min_time` seconds per fn in all (a fn far slower than the
    others takes most of it); min_time 0: exactly `min_rounds` rounds.
    `max_rounds` (when given) caps the rounds, before `min_rounds` and
    `min_time`. Returns {name: [ms, ...]}."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times = {name: [] for name in names}
    orders = random.Random(0)
    target_ms = len(names) * min_time * 1e3
    spent_ms, rounds = 0.0, 0
    while (max_rounds is None or rounds < max_rounds) and (rounds < min_rounds or spent_ms < target_ms):
        if shuffle:
            order = list(names)
            orders.shuffle(order)
        else:
            order = [names[(rounds + k) % len(names)] for k in range(len(names))]
        for name in order:
            times[name].append(one(fns[name]))
            spent_ms += times[name][-1]
        rounds += 1
    return times


def interleaved_groups(groups, min_rounds, min_time=0.0, one=host_ms, warmup=0, max_rounds=None, enter=None):
    """{group: {name: fn}} timed side by side, a group at a time: `enter(group)`
    (when given) before each group's calls, `warmup` untimed calls of each
    fn first, then rounds in which every group in turn, in the dict's order,
    calls each of its fns once (`one` times a call), in an order shuffled
    afresh every time (a fixed seed: the same orders every run). For what
    must not change from one call to the next but may between blocks of
    calls, such as torch's thread count: each block runs in one setting,
    and the settings alternate block by block, so that they are compared
    over the same span of time. Rounds go on until there are `min_rounds`
    and the calls took `min_time` seconds per (group, fn) in all, at most
    `max_rounds` (when given). Returns {(group, name): [ms, ...]}."""
    for group, fns in groups.items():
        if enter is not None:
            enter(group)
        for fn in fns.values():
            for _ in range(warmup):
                fn()
    times = {(group, name): [] for group, fns in groups.items() for name in fns}
    orders = random.Random(0)
    target_ms = len(times) * min_time * 1e3
    spent_ms, rounds = 0.0, 0
    while (max_rounds is None or rounds < max_rounds) and (rounds < min_rounds or spent_ms < target_ms):
        for group, fns in groups.items():
            if enter is not None:
                enter(group)
            order = list(fns)
            orders.shuffle(order)
            for name in order:
                ms = one(fns[name])
                times[(group, name)].append(ms)
                spent_ms += ms
        rounds += 1
    return times


def percentile(values, q):
    """The q-quantile of values (0 <= q <= 1), interpolated linearly (q = 0.5:
    the median)."""
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def median(values):
    return percentile(values, 0.5)


def add_options(parser, min_time, min_reps):
    """The options of the benchmarks that time with `interleaved`: --min-time
    and --min-reps (its min_time and min_rounds), --threads, --json (read
    with parse_options)."""
    parser.add_argument("--min-time", type=float, default=min_time,
                        help="seconds of calls per configuration and implementation, at least")
    parser.add_argument("--min-reps", type=int, default=min_reps, help="rounds per configuration, at least")
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--json", default=None, help="write the results to this file")


def parse_options(parser, argv=None):
    """parser's arguments, with add_options' applied: --threads sets torch's CPU threads."""
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return args
