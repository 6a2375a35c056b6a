"""bench/timing.py, the timing of the Python benchmarks: one call, repeated
calls, interleaved rounds (alone or in groups) and their stop rule,
percentiles, the shared options; on a fake clock where the rule is about
time."""
import argparse
import importlib.util
import pathlib

import pytest
import torch

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "bench" / "timing.py"
spec = importlib.util.spec_from_file_location("bench_timing", SCRIPT)
timing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timing)


class FakeClock:
    """Seconds that advance only when a timed function says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def takes(self, seconds, calls=None, name=None):
        def fn():
            if calls is not None:
                calls.append(name)
            self.now += seconds
        return fn


def test_host_ms_times_one_call_between_two_syncs():
    clock, events = FakeClock(), []
    work = clock.takes(0.25, events, "call")
    ms = timing.host_ms(work, sync=lambda: events.append("sync"), clock=clock)
    assert ms == 250.0 and events == ["sync", "call", "sync"]
    assert timing.host_ms(clock.takes(0.5), clock=clock) == 500.0


def test_repeat_makes_the_minimum_calls_then_stops_at_the_time_or_the_call_limit():
    clock = FakeClock()
    # Fast calls: at least min_calls, then until min_time seconds have passed.
    times = timing.repeat(clock.takes(0.125), min_time=1.0, max_iters=1000,
                          one=lambda fn: timing.host_ms(fn, clock=clock), clock=clock)
    assert times == [125.0] * 8
    # Slow calls: min_calls even past min_time.
    times = timing.repeat(clock.takes(2.0), min_time=1.0, max_iters=1000,
                          one=lambda fn: timing.host_ms(fn, clock=clock), clock=clock)
    assert len(times) == 5
    # The call limit comes first.
    times = timing.repeat(clock.takes(0.001), min_time=100.0, max_iters=7,
                          one=lambda fn: timing.host_ms(fn, clock=clock), clock=clock)
    assert len(times) == 7


def test_interleaved_rotates_the_order_and_warms_up_untimed():
    clock, calls = FakeClock(), []
    fns = {name: clock.takes(1.0, calls, name) for name in ("a", "b", "c")}
    times = timing.interleaved(fns, 3, warmup=2, one=lambda fn: timing.host_ms(fn, clock=clock))
    assert calls == ["a", "a", "b", "b", "c", "c"] + ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert times == {name: [1000.0] * 3 for name in "abc"}


def test_interleaved_shuffles_the_order_and_warms_up_untimed():
    clock, calls = FakeClock(), []
    names = ("a", "b", "c", "d")
    fns = {name: clock.takes(1.0, calls, name) for name in names}
    rounds = 40
    times = timing.interleaved(fns, rounds, warmup=2, one=lambda fn: timing.host_ms(fn, clock=clock),
                               shuffle=True)
    assert calls[:8] == ["a", "a", "b", "b", "c", "c", "d", "d"]
    timed = calls[8:]
    assert len(timed) == 4 * rounds
    orders = [tuple(timed[4 * r:4 * r + 4]) for r in range(rounds)]
    assert all(sorted(order) == list(names) for order in orders)  # each fn once per round
    # Each fn follows every other one within a round (a rotation would give
    # each fn a single predecessor), and the orders are the same every run.
    predecessors = {name: {order[i - 1] for order in orders for i in range(1, 4) if order[i] == name}
                    for name in names}
    assert all(predecessors[name] == set(names) - {name} for name in names), predecessors
    calls2 = []
    timing.interleaved({name: clock.takes(1.0, calls2, name) for name in names}, rounds, warmup=2,
                       one=lambda fn: timing.host_ms(fn, clock=clock), shuffle=True)
    assert calls2 == calls
    assert times == {name: [1000.0] * rounds for name in names}


def test_interleaved_runs_until_the_rounds_and_the_time_per_function():
    clock = FakeClock()
    one = lambda fn: timing.host_ms(fn, clock=clock)  # noqa: E731
    # Two functions of 0.125 s, 1 s per function: 2 s of calls, 8 rounds.
    times = timing.interleaved({"x": clock.takes(0.125), "y": clock.takes(0.125)}, 3, min_time=1.0, one=one)
    assert times == {"x": [125.0] * 8, "y": [125.0] * 8}
    # A slow function fills the time: 2 s of calls in 2 rounds, the fast one's 0.125 s among them.
    times = timing.interleaved({"fast": clock.takes(0.0625), "slow": clock.takes(0.9375)}, 1, min_time=1.0,
                               one=one)
    assert times == {"fast": [62.5] * 2, "slow": [937.5] * 2}
    # The rounds asked for, however long the calls took.
    times = timing.interleaved({"x": clock.takes(5.0)}, 4, min_time=1.0, one=one)
    assert len(times["x"]) == 4


def test_interleaved_groups_alternate_blocks_each_in_its_setting():
    clock, calls, settings = FakeClock(), [], []
    groups = {g: {name: clock.takes(1.0, calls, (g, name)) for name in ("a", "b", "c")} for g in (1, 2)}
    current = []

    def enter(group):
        settings.append(group)
        current.append(group)

    # Each call records the setting it ran in.
    for g, fns in groups.items():
        for name, fn in list(fns.items()):
            def in_setting(fn=fn, g=g, name=name):
                assert current[-1] == g, f"{name} of group {g} ran in setting {current[-1]}"
                fn()
            fns[name] = in_setting
    rounds = 30
    times = timing.interleaved_groups(groups, rounds, warmup=1, one=lambda fn: timing.host_ms(fn, clock=clock),
                                      enter=enter)
    # Warm-up: each group entered once, each fn called once, untimed.
    assert calls[:6] == [(1, "a"), (1, "b"), (1, "c"), (2, "a"), (2, "b"), (2, "c")]
    timed = calls[6:]
    assert len(timed) == 6 * rounds
    # Every round: group 1's block, then group 2's, each fn once per block,
    # the setting entered before each block.
    assert settings == [1, 2] + [1, 2] * rounds
    blocks = [timed[3 * i:3 * i + 3] for i in range(2 * rounds)]
    assert all({g for g, _ in block} == {1 + i % 2} for i, block in enumerate(blocks))
    assert all(sorted(name for _, name in block) == ["a", "b", "c"] for block in blocks)
    # Shuffled afresh: more than one order, the same orders every run.
    assert len({tuple(name for _, name in block) for block in blocks}) > 1
    assert times == {(g, name): [1000.0] * rounds for g in (1, 2) for name in "abc"}
    calls2 = []
    timing.interleaved_groups({g: {name: clock.takes(1.0, calls2, (g, name)) for name in "abc"} for g in (1, 2)},
                              rounds, warmup=1, one=lambda fn: timing.host_ms(fn, clock=clock))
    assert calls2 == calls


def test_interleaved_groups_run_until_the_rounds_and_the_time_per_function():
    clock = FakeClock()
    one = lambda fn: timing.host_ms(fn, clock=clock)  # noqa: E731
    # Four (group, fn) of 0.125 s, 1 s each: 4 s of calls, 8 rounds.
    groups = {g: {"x": clock.takes(0.125), "y": clock.takes(0.125)} for g in ("p", "q")}
    times = timing.interleaved_groups(groups, 3, min_time=1.0, one=one)
    assert {key: len(ms) for key, ms in times.items()} == {key: 8 for key in times}
    # The rounds asked for, however long; max_rounds first.
    assert len(timing.interleaved_groups({0: {"x": clock.takes(5.0)}}, 4, min_time=1.0, one=one)[(0, "x")]) == 4
    assert len(timing.interleaved_groups({0: {"x": clock.takes(0.001)}}, 1, min_time=10.0, one=one,
                                         max_rounds=6)[(0, "x")]) == 6


def test_percentile_interpolates_and_median_is_the_middle():
    values = [4.0, 1.0, 3.0, 2.0]
    assert timing.percentile(values, 0.0) == 1.0 and timing.percentile(values, 1.0) == 4.0
    assert timing.percentile(values, 0.5) == timing.median(values) == 2.5
    assert timing.percentile(values, 0.1) == pytest.approx(1.3)
    assert timing.median([7.0]) == 7.0


def test_options_and_threads():
    parser = argparse.ArgumentParser()
    timing.add_options(parser, min_time=0.2, min_reps=3)
    args = timing.parse_options(parser, [])
    assert (args.min_time, args.min_reps, args.threads, args.json) == (0.2, 3, None, None)
    before = torch.get_num_threads()
    try:
        args = timing.parse_options(parser, ["--min-time", "0.01", "--min-reps", "1", "--threads", "1",
                                             "--json", "out.json"])
        assert (args.min_time, args.min_reps, args.json) == (0.01, 1, "out.json")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_interleaved_groups_check_the_time_after_whole_rounds_and_shuffle_each_block():
    clock = FakeClock()
    one = lambda fn: timing.host_ms(fn, clock=clock)  # noqa: E731
    # 2 s asked for (two (group, fn) of 1 s), 0.6 s a round: the third round
    # ends at 1.8 s, the fourth at 2.4 s; the rule is checked after whole
    # rounds, so both groups make four calls, not four and three.
    calls = []
    times = timing.interleaved_groups({"p": {"x": clock.takes(0.5, calls, "p")},
                                       "q": {"x": clock.takes(0.1, calls, "q")}}, 1, min_time=1.0, one=one,
                                      warmup=2)
    assert {key: len(ms) for key, ms in times.items()} == {("p", "x"): 4, ("q", "x"): 4}
    # warmup=2: two untimed calls of each fn, before any timed one.
    assert calls[:4] == ["p", "p", "q", "q"] and len(calls) == 4 + 8
    # Each group's block is shuffled on its own: in some round the two
    # groups call the same names in different orders.
    calls = []
    names = "abcd"
    timing.interleaved_groups({g: {name: clock.takes(0.001, calls, name) for name in names} for g in (1, 2)}, 20,
                              one=one)
    rounds = [(calls[8 * r:8 * r + 4], calls[8 * r + 4:8 * r + 8]) for r in range(20)]
    assert any(first != second for first, second in rounds)
