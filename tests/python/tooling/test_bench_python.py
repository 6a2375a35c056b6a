"""bench/bench.py without timing anything: one configuration's results from
injected times (keys, ratios per thread count, unsupported implementations),
the thread counts' order, and its options."""
import argparse
import importlib.util
import pathlib
import sys
import types

import pytest
import torch

BENCH = pathlib.Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))  # bench.py imports timing.py from its own folder
spec = importlib.util.spec_from_file_location("bench_python", BENCH / "bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_run_config_keys_each_result_by_thread_count_and_takes_ratios_within_it(monkeypatch):
    # Medians in ms per (threads, impl), injected in place of the timing.
    medians = {(1, "naive"): 10.0, (1, "floor"): 2.0, (1, "syncfree"): 3.0,
               (2, "naive"): 8.0, (2, "floor"): 1.0, (2, "syncfree"): 4.0}
    seen = {}

    def fake_groups(groups, min_rounds, min_time, one, warmup, max_rounds, enter):
        seen.update(groups={g: sorted(fns) for g, fns in groups.items()}, min_rounds=min_rounds,
                    min_time=min_time, warmup=warmup, max_rounds=max_rounds, enter=enter)
        # Three calls each: the median is the middle one.
        return {(g, name): [medians[(g, name)] * 2, medians[(g, name)], medians[(g, name)] / 2]
                for g, fns in groups.items() for name in fns}

    monkeypatch.setattr(bench, "interleaved_groups", fake_groups)
    made = []

    def impl(name):
        def make(w):
            made.append((name, w.k))
            return lambda: None
        return make, ""

    impls = {"naive": impl("naive"), "floor": impl("floor"), "syncfree": impl("syncfree"),
             "topk-compiled": (None, "needs torch.compile")}
    args = types.SimpleNamespace(device="cpu", min_reps=7, min_time=0.25, warmup=2, max_iters=50)
    results = bench.run_config(args, impls, 0, 100, False, [1, 2])

    assert seen["groups"] == {1: ["floor", "naive", "syncfree"], 2: ["floor", "naive", "syncfree"]}
    assert (seen["min_rounds"], seen["min_time"], seen["warmup"], seen["max_rounds"]) == (7, 0.25, 2, 50)
    assert seen["enter"] is torch.set_num_threads
    assert sorted(made) == sorted([(name, 10) for name in ("naive", "floor", "syncfree")] * 2)
    # One result per (threads, impl), thread counts outer, the unsupported one kept with its note.
    assert [(r["threads"], r["impl"]) for r in results] == [(t, name) for t in (1, 2) for name in impls]
    by = {(r["threads"], r["impl"]): r for r in results}
    for t in (1, 2):
        assert not by[(t, "topk-compiled")]["supported"] and by[(t, "topk-compiled")]["note"] == "needs torch.compile"
        assert "median_ms" not in by[(t, "topk-compiled")]
        for name in ("naive", "floor", "syncfree"):
            r = by[(t, name)]
            assert (r["n"], r["batch"], r["k"], r["iters"]) == (100, 1, 10, 3)
            assert r["median_ms"] == medians[(t, name)] and r["syncs_per_call"] is None
            # Ratios within the same thread count only.
            assert r["speedup_vs_naive"] == pytest.approx(medians[(t, "naive")] / medians[(t, name)])
            assert r["vs_floor"] == pytest.approx(medians[(t, name)] / medians[(t, "floor")])
    # A batch: rows of the batch, the same K.
    results = bench.run_config(args, {"floor": impl("floor")}, 4, 100, False, [2])
    assert [(r["threads"], r["batch"], r["k"], r["vs_floor"]) for r in results] == [(2, 4, 10, 1.0)]


def test_parse_threads_takes_distinct_counts_of_at_least_one():
    assert bench.parse_threads("1,2") == [1, 2]
    assert bench.parse_threads("2") == [2]
    for text in ("", "0", "1,0", "1,1", "2,1,2"):
        with pytest.raises(argparse.ArgumentTypeError, match="--threads"):
            bench.parse_threads(text)


def test_floor_and_index_select_read_the_next_set_of_rows_at_each_call_floor_same_rows_its_own():
    w = bench.Workload(2, 50, "cpu")  # 2 rows of 50, K = 5 per row
    sets = w.row_sets
    assert len(sets) == bench.FLOOR_ROW_SETS > 1
    for rows in sets + [w.same_rows]:
        # K random rows of each row, as flat row numbers of features [2 * 50, F].
        assert rows.shape == (2 * w.k,) and rows.dtype == torch.int64
        assert ((rows[:w.k] >= 0) & (rows[:w.k] < 50)).all() and ((rows[w.k:] >= 50) & (rows[w.k:] < 100)).all()
    # Seeded draws, all different: floor-same-rows' set is none of the cycle's.
    assert len({tuple(rows.tolist()) for rows in sets + [w.same_rows]}) == len(sets) + 1
    floor, same, select = bench.floor_call(w), bench.floor_call(w, same_rows=True), bench.index_select_call(w)
    # The floor and index-select take the sets in turn from one cycle.
    calls = [floor, select, select, floor] * len(sets)
    for call, fn in enumerate(calls):
        assert torch.equal(fn(), w.flat_features.index_select(0, sets[call % len(sets)]))
        assert torch.equal(same(), w.flat_features.index_select(0, w.same_rows))
    impls = bench.make_impls(bench.DEFAULT_IMPLS.split(","), "cpu")
    assert "floor-same-rows" in impls and torch.equal(impls["floor-same-rows"][0](w)(), same())
