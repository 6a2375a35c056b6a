// The CPU operators return the same bits whatever the number of threads: a
// small call runs on the calling thread, a large one splits its phases over
// threads, and neither may change the output. Shapes on both sides of the
// thresholds, each run on one thread and on several, against the core's
// serial reference and the generic gather.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <syncfree/syncfree.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "core/host_sampler.h"
#include "cpu/balanced_sample_cpu.h"
#include "cpu/common.h"
#include "ops/gather_sampled.h"

namespace {

struct Shape {
  int64_t rows, n, k, width;
};

struct Outputs {
  at::Tensor indices, valid, features, labels;
};

// balanced_sample then gather_sampled; the fused balanced_sample_gather
// (its own units of work) must return the same.
Outputs run(const at::Tensor& features, const at::Tensor& labels, int64_t k, int64_t seed) {
  const auto options = syncfree::SampleOptions().positive_fraction(0.3).seed(seed);
  Outputs o;
  std::tie(o.indices, o.valid) = syncfree::balanced_sample(labels, k, options);
  std::tie(o.features, o.labels) =
      syncfree::gather_sampled(features, labels, o.indices, o.valid);
  at::Tensor fused_features, fused_labels, fused_valid;
  std::tie(fused_features, fused_labels, fused_valid) =
      syncfree::balanced_sample_gather(features, labels, k, options);
  EXPECT_TRUE(fused_features.equal(o.features));
  EXPECT_TRUE(fused_labels.equal(o.labels));
  EXPECT_TRUE(fused_valid.equal(o.valid));
  return o;
}

class ThreadCount {
 public:
  ThreadCount() : saved_(at::get_num_threads()) {}
  ~ThreadCount() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

}  // namespace

TEST(CpuParallel, SameBitsOnOneThreadAndOnSeveral) {
  const ThreadCount restore;
  // Rows that divide evenly among the threads, or many rows (at least four
  // per thread), run whole, row by row; fewer rows with many slots per
  // label are compacted by each task that fills some of their slots, and
  // one such row by the tasks together, a share of its chunks each; the
  // others run phase by phase (compaction, prefix sums, slots), each phase
  // split over the threads or, with little work, on the calling thread.
  const std::vector<Shape> shapes = {
      {32, 1000, 100, 16},         // whole rows, two tasks (32 >= 4 x 3 and 8 x 4)
      {256, 1000, 100, 16},        // whole rows, as many tasks as threads
      {4096, 64, 6, 16},           // many short rows
      {1, 100000, 10000, 16},      // one row, the tasks share its chunks (phases on 8 threads)
      {1, 100003, 10000, 4},       // the same, the last chunk shorter
      {1, 131072, 13000, 4},       // two chunks of 65536 on 2 threads, three of 43712 or fewer on 3
      {1, 100, 10000, 4},          // fewer chunks of 64 labels than tasks; k > n
      {3, 20000, 6000, 4},         // each task compacts its rows; a task's slots span two rows
      {1, 300000, 6000, 4},        // one row, few slots per label: phases
      {1, 300000, 30000, 4},       // one row of labels beyond the cache (2.4 MB): phases
      {1, 17 * 65536 + 3, 2000, 2},  // one row of more chunks than the lookup's linear search takes
      {2, 3 * 65536 + 9, 9000, 4}, // several chunks and blocks per row (whole rows on 2 threads)
      {3, 500, 50, 4096},          // wide features: the fused call's blocks of a few slots, each task compacting its rows
      {2, 3000, 2500, 1000},       // wide features, blocks of a row on several threads
      {1, 50, 9, 32768},           // a slot a block, the last blocks empty (10 on 2 threads, 16 on 8)
  };
  int64_t seed = 11;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "rows " << s.rows << ", n " << s.n << ", k " << s.k
                                      << ", width " << s.width);
    at::manual_seed(seed);
    const at::Tensor labels = at::randint(-1, 3, {s.rows, s.n}, at::kLong);
    const at::Tensor features = at::randn({s.rows, s.n, s.width});

    at::set_num_threads(1);
    const Outputs one = run(features, labels, s.k, seed);

    // The core's serial reference.
    syncfree::core::BalancedParams p;
    p.num_samples = s.k;
    p.positive_fraction = 0.3;
    p.seed = static_cast<uint64_t>(seed);
    const size_t slots = static_cast<size_t>(s.rows * s.k);
    std::vector<int64_t> want(slots);
    std::unique_ptr<bool[]> want_valid(new bool[slots]);
    syncfree::core::sample_rows_serial(labels.data_ptr<int64_t>(), s.rows, s.n, p, want.data(),
                                       want_valid.get());
    const int64_t* got = one.indices.data_ptr<int64_t>();
    const bool* got_valid = one.valid.data_ptr<bool>();
    for (size_t i = 0; i < slots; ++i) {
      ASSERT_EQ(got[i], want[i]) << "slot " << i;
      ASSERT_EQ(got_valid[i], want_valid[i]) << "slot " << i;
    }
    auto generic = syncfree::ops::gather_sampled_generic(features, labels, one.indices, one.valid);
    EXPECT_TRUE(one.features.equal(std::get<0>(generic)));
    EXPECT_TRUE(one.labels.equal(std::get<1>(generic)));

    for (const int threads : {2, 3, 8}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads");
      at::set_num_threads(threads);
      const Outputs many = run(features, labels, s.k, seed);
      EXPECT_TRUE(many.indices.equal(one.indices));
      EXPECT_TRUE(many.valid.equal(one.valid));
      EXPECT_TRUE(many.features.equal(one.features));
      EXPECT_TRUE(many.labels.equal(one.labels));
    }
    ++seed;
  }
}

TEST(CpuParallel, EachShapeTakesTheSplitItIsMeantTo) {
  // The test above checks that every split gives the same bits, not which
  // split a shape takes: here, the shapes above (and the rule's limits) on
  // the split their comments name, for balanced_sample and for the fused
  // call with 16 float features (64-byte rows).
  using syncfree::ops::sample_gather_split;
  using syncfree::ops::sample_split;
  using syncfree::ops::ThreadSplit;
  const ThreadCount restore;
  struct Case {
    int threads;
    int64_t rows, n, k;
    ThreadSplit::Kind sample, fused;
    int64_t label_bytes = 1;  // bool labels unless said: the cached rows' limit is in bytes
  };
  const auto whole = ThreadSplit::kWholeRows, own = ThreadSplit::kOwnRows,
             shared = ThreadSplit::kSharedRow, phases = ThreadSplit::kPhases;
  const std::vector<Case> cases = {
      {1, 1, 100000, 10000, whole, whole},       // one thread: whole rows
      {2, 32, 1000, 100, whole, whole},          // rows a multiple of the threads
      {3, 32, 1000, 100, whole, whole},          // at least four rows per thread
      {8, 32, 1000, 100, whole, whole},
      {2, 1, 100000, 10000, shared, shared},     // one row, K = N / 10: the tasks share it
      {3, 1, 100000, 10000, shared, shared},
      {8, 1, 100000, 10000, phases, phases},     // four tasks (eight fused): too few slots each to compact the row
      {2, 3, 20000, 6000, own, own},             // three rows, a task's slots span two
      {2, 1, 300000, 6000, phases, phases},      // few slots per label
      {2, 1, 1000000, 10000, phases, phases},
      {2, 1, 1000000, 100000, shared, shared},   // one row of 1e6 bool labels, K = N / 10
      {2, 1, 1000000, 100000, phases, phases, 8},  // int64 labels: 8 MB, beyond the cache
      {2, 1, 1 << 20, 1 << 17, shared, shared},  // the cached rows' limit, 1 MiB of labels
      {2, 1, (1 << 20) + 1, 1 << 17, phases, phases},  // just over it
      {2, 1, 1 << 17, 1 << 14, shared, shared, 8},  // int64 labels: the same limit
      {2, 1, (1 << 17) + 1, 1 << 14, phases, phases, 8},
      {2, 1, 100000, 10000, shared, shared, 8},  // one row of 1e5 int64 labels (800 kB)
      {4, 1, 1000000, 125000, phases, phases},   // four tasks need 32 K / 4 >= N + 64 x 16 chunks
      {4, 1, 1000000, 125128, shared, shared},
      {2, 2, 3 * 65536 + 9, 9000, whole, whole}, // rows a multiple of the threads
      {2, 1, 5000000, 10000000, phases, phases}, // two copies of the row would take 20 MB
      {8, 1, 1 << 19, 1 << 19, shared, shared},  // where eight copies would take 8 MiB: the cap
      {8, 1, (1 << 19) + 1, 1 << 19, phases, phases},  // just over it (one row: where kOwnRows would go)
      {2, 1, 100, 1, phases, phases},            // one slot: phases, each on the calling thread
      {3, 1, 100, 10000, shared, shared},        // a shared row of fewer chunks than tasks
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.threads << " threads, rows " << c.rows << ", n "
                                      << c.n << ", k " << c.k);
    at::set_num_threads(c.threads);
    const ThreadSplit sample = sample_split(c.rows, c.n, c.k, c.label_bytes);
    const ThreadSplit fused = sample_gather_split(c.rows, c.n, c.k, c.label_bytes, 64, true);
    EXPECT_EQ(sample.kind, c.sample);
    EXPECT_EQ(fused.kind, c.fused);
    for (const ThreadSplit& split : {sample, fused}) {
      // The workspace holds a row per task that compacts its own, else a row per row.
      if (split.kind == ThreadSplit::kOwnRows) {
        EXPECT_GT(split.copies, 1);
        EXPECT_LE(split.copies, c.threads);
      } else {
        EXPECT_EQ(split.copies, c.rows);
      }
      // Only a shared row is cut into chunks shorter than the compaction's.
      if (split.kind == ThreadSplit::kSharedRow) {
        EXPECT_EQ(c.rows, 1);
        EXPECT_LT(split.chunk, c.n);
      } else {
        EXPECT_EQ(split.chunk, syncfree::core::kChunk);
      }
    }
  }
  // A call with no row takes no split, whatever its k.
  at::set_num_threads(2);
  const ThreadSplit none = sample_split(0, 10, std::numeric_limits<int64_t>::max(), 8);
  EXPECT_EQ(none.kind, ThreadSplit::kWholeRows);
  EXPECT_EQ(none.copies, 0);
}

TEST(CpuParallel, ASharedRowIsCutIntoEvenChunksOfWholeLines) {
  // shared_row_chunk: as many chunks as a multiple of the tasks, each at
  // most kChunk labels and a multiple of 64 (so that no cache line holds
  // the entries of two chunks), no longer than that needs.
  using syncfree::core::kChunk;
  using syncfree::core::num_chunks;
  using syncfree::ops::shared_row_chunk;
  for (const int64_t tasks : {2, 3, 4, 8, 16}) {
    for (const int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{100}, int64_t{130},
                            int64_t{3000}, int64_t{65536}, int64_t{100000}, int64_t{131072},
                            int64_t{131073}, int64_t{1} << 20, (int64_t{1} << 20) + 1,
                            int64_t{10000000}}) {
      SCOPED_TRACE(::testing::Message() << tasks << " tasks, n " << n);
      const int64_t planned = tasks * ((n + tasks * kChunk - 1) / (tasks * kChunk));
      const int64_t chunk = shared_row_chunk(n, tasks);
      EXPECT_EQ(chunk % 64, 0);
      EXPECT_GT(chunk, 0);
      EXPECT_LE(chunk, kChunk);
      EXPECT_GE(chunk, (n + planned - 1) / planned);
      EXPECT_LT(chunk, (n + planned - 1) / planned + 64);
      EXPECT_LE(num_chunks(n, chunk), planned);
    }
  }
  // The rule's values at the shapes the tests and benchmarks use.
  struct Case {
    int64_t n, tasks, chunk, chunks;
  };
  for (const Case& c : std::vector<Case>{{100000, 2, 50048, 2},
                                         {100000, 3, 33344, 3},
                                         {131072, 3, 43712, 3},
                                         {1000000, 2, 62528, 16},
                                         {1000000, 3, 55616, 18},
                                         {131073, 2, 32832, 4},
                                         {65536, 2, 32768, 2},
                                         {100, 3, 64, 2},
                                         {1, 2, 64, 1}}) {
    SCOPED_TRACE(::testing::Message() << c.tasks << " tasks, n " << c.n);
    EXPECT_EQ(shared_row_chunk(c.n, c.tasks), c.chunk);
    EXPECT_EQ(num_chunks(c.n, c.chunk), c.chunks);
  }
}

TEST(CpuParallel, AClaimedPhaseRunsEachUnitOnceAndItsLastStepAfterThemAll) {
  // Every unit runs once, `last` once, after every unit has finished, and
  // every task returns only after `last`, having seen all that the units
  // and `last` wrote: with 1 to 8 tasks on threads of their own, and with
  // the tasks run one after another on the calling thread (as
  // at::parallel_for runs them inside another parallel region). The tasks
  // run on std::threads: this file is not compiled with OpenMP, so its own
  // at::parallel_for calls would run inline. Each unit takes a while (tens
  // of microseconds), so that a task that returned early, or a `last` that
  // ran before the other units finished, would be seen. Failures are
  // counted in the tasks and checked on the calling thread.
  using syncfree::ops::ClaimedPhase;
  for (const int tasks : {1, 2, 3, 8}) {
    for (const int64_t units : {1, 2, 7, 100}) {
      for (const bool inline_tasks : {false, true}) {
        SCOPED_TRACE(::testing::Message() << tasks << " tasks, " << units << " units"
                                          << (inline_tasks ? ", one after another" : ""));
        std::unique_ptr<std::atomic<int64_t>[]> ran(new std::atomic<int64_t>[units]);
        std::unique_ptr<std::atomic<bool>[]> finished(new std::atomic<bool>[units]);
        for (int64_t u = 0; u < units; ++u) {
          ran[u] = 0;
          finished[u] = false;
        }
        // Plain memory each unit writes once, read by `last` and by every
        // task after run(): what the phase's ordering must make visible
        // (a race a thread sanitizer would see where it did not).
        std::vector<int64_t> payload(static_cast<size_t>(units), 0);
        std::atomic<int64_t> lasts{0}, unfinished_at_last{0}, early_returns{0}, unseen{0};
        int64_t total = 0;  // written by `last` alone, read by every task after run()
        std::vector<int64_t> seen(static_cast<size_t>(tasks), -1);
        ClaimedPhase phase(units);
        const auto task = [&](int t) {
          phase.run(
              [&](int64_t u) {
                ran[u] += 1;
                payload[static_cast<size_t>(u)] = u + 1;
                volatile int64_t sink = 0;
                for (int64_t i = 0; i < 20000; ++i) sink = sink + i;
                finished[u].store(true, std::memory_order_relaxed);
              },
              [&] {
                ++lasts;
                for (int64_t u = 0; u < units; ++u) {
                  if (!finished[u].load(std::memory_order_relaxed)) ++unfinished_at_last;
                  if (payload[static_cast<size_t>(u)] != u + 1) ++unseen;
                  total += ran[u].load(std::memory_order_relaxed);
                }
              });
          if (lasts.load(std::memory_order_relaxed) != 1) ++early_returns;
          for (int64_t u = 0; u < units; ++u) {
            if (payload[static_cast<size_t>(u)] != u + 1) ++unseen;
          }
          seen[static_cast<size_t>(t)] = total;
        };
        if (inline_tasks) {
          for (int t = 0; t < tasks; ++t) task(t);
        } else {
          std::vector<std::thread> threads;
          for (int t = 0; t < tasks; ++t) threads.emplace_back(task, t);
          for (std::thread& thread : threads) thread.join();
        }
        EXPECT_EQ(lasts.load(), 1);
        EXPECT_EQ(unfinished_at_last.load(), 0);
        EXPECT_EQ(early_returns.load(), 0);
        EXPECT_EQ(unseen.load(), 0);
        EXPECT_EQ(total, units);
        for (int64_t u = 0; u < units; ++u) EXPECT_EQ(ran[u].load(), 1) << "unit " << u;
        for (const int64_t s : seen) EXPECT_EQ(s, units);
      }
    }
  }
}

TEST(CpuParallel, ASharedRowOfManyChunksGivesTheSameBits) {
  // One row of 1e6 uint8 labels (1 MB, within the cached rows' limit), K =
  // 1e5: on 2 threads the tasks share it in 16 chunks of 62528 labels, on 3
  // in 18 of 55616 (more than the 16 that the AVX-512 lookup compares one
  // by one: it searches); 8 threads run three phases (copies of the row for
  // eight tasks would not fit, nor would its slots pay for them). The same
  // bits as on one thread and as the serial reference, for balanced_sample,
  // its gather and the fused call.
  using syncfree::core::num_chunks;
  using syncfree::ops::sample_split;
  using syncfree::ops::ThreadSplit;
  const ThreadCount restore;
  const int64_t n = 1000000, k = 100000, seed = 5;
  at::manual_seed(seed);
  const at::Tensor labels = at::randint(0, 3, {1, n}, at::kByte);
  const at::Tensor features = at::randn({1, n, 4});

  at::set_num_threads(1);
  const Outputs one = run(features, labels, k, seed);
  syncfree::core::BalancedParams p;
  p.num_samples = k;
  p.positive_fraction = 0.3;
  p.seed = static_cast<uint64_t>(seed);
  std::vector<int64_t> want(static_cast<size_t>(k));
  std::unique_ptr<bool[]> want_valid(new bool[static_cast<size_t>(k)]);
  syncfree::core::sample_rows_serial(labels.data_ptr<uint8_t>(), 1, n, p, want.data(),
                                     want_valid.get());
  const int64_t* got = one.indices.data_ptr<int64_t>();
  const bool* got_valid = one.valid.data_ptr<bool>();
  for (int64_t i = 0; i < k; ++i) {
    ASSERT_EQ(got[i], want[static_cast<size_t>(i)]) << "slot " << i;
    ASSERT_EQ(got_valid[i], want_valid[static_cast<size_t>(i)]) << "slot " << i;
  }

  for (const int threads : {2, 3, 8}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    at::set_num_threads(threads);
    const ThreadSplit split = sample_split(1, n, k, 1);
    EXPECT_EQ(split.kind, threads == 8 ? ThreadSplit::kPhases : ThreadSplit::kSharedRow);
    if (threads == 2) EXPECT_EQ(num_chunks(n, split.chunk), 16);
    // More than kLinearChunkSearch (core/host_simd.h, AVX-512 builds only).
    if (threads == 3) EXPECT_GT(num_chunks(n, split.chunk), 16);
    const Outputs many = run(features, labels, k, seed);
    EXPECT_TRUE(many.indices.equal(one.indices));
    EXPECT_TRUE(many.valid.equal(one.valid));
    EXPECT_TRUE(many.features.equal(one.features));
    EXPECT_TRUE(many.labels.equal(one.labels));
  }
}

TEST(CpuParallel, APhaseRunsInParallelExactlyWhenItHoldsMoreThanTheParallelWork) {
  // at::parallel_for splits a range of more than `grain` units (and more
  // than one); parallel_grain makes that exactly the ranges whose units hold
  // more than kParallelWork in all, whatever the size of a unit.
  using syncfree::ops::kParallelWork;
  using syncfree::ops::parallel_grain;
  std::vector<int64_t> unit_works = {0, 1, 3, 7, 1000, 20000, kParallelWork / 2, kParallelWork / 2 + 1,
                                     kParallelWork - 1, kParallelWork, kParallelWork + 1, 10 * kParallelWork};
  for (int64_t w = 1; w <= 3 * kParallelWork; w += 997) unit_works.push_back(w);
  for (const int64_t unit_work : unit_works) {
    const int64_t grain = parallel_grain(unit_work);
    ASSERT_GE(grain, 1);
    const int64_t work = std::max<int64_t>(unit_work, 1);
    for (int64_t units = 1; units <= kParallelWork / work + 3; ++units) {
      const bool splits = units > grain && units > 1;
      const bool wanted = units * work > kParallelWork && units > 1;
      ASSERT_EQ(splits, wanted) << "unit work " << unit_work << ", units " << units;
    }
  }
}

TEST(CpuParallel, SlotsAreCutIntoSmallBlocksOnlyWhereThePhaseCanSplit) {
  // More blocks only cost their passes (the gather makes one a block),
  // unless the phase of (row, block) units can run in parallel: then blocks
  // of at most kParallelWork / 2 of work, as many per row as the threads
  // share evenly.
  using syncfree::ops::kParallelWork;
  using syncfree::ops::sample_gather_split;
  using syncfree::ops::slot_blocks;
  using syncfree::ops::SlotBlocks;
  const ThreadCount restore;
  const auto expect_blocks = [](SlotBlocks got, int64_t count, int64_t size) {
    EXPECT_EQ(got.count, count);
    EXPECT_EQ(got.size, size);
  };
  const int64_t work = 20;  // a fused slot with 64-byte feature rows
  ASSERT_EQ(kParallelWork, 32768);  // the exact blocks below are for this threshold
  at::set_num_threads(1);
  expect_blocks(slot_blocks(1, 10000, work, 4096), 3, 3334);  // one thread: the cap alone
  at::set_num_threads(2);
  expect_blocks(slot_blocks(1, 10000, work, 4096), 14, 715);  // 819 slots at most, 13 made even
  expect_blocks(slot_blocks(1, 10000, work, 4096, /*by_block=*/false), 3, 3334);
  expect_blocks(slot_blocks(3, 1000, work, 4096), 2, 500);    // three rows' work: it splits
  expect_blocks(slot_blocks(1, 2048, 16, 4096), 1, 2048);     // exactly kParallelWork: inline
  expect_blocks(slot_blocks(1, 2049, 16, 4096), 4, 513);      // one slot more: blocks of 1024 at most
  expect_blocks(slot_blocks(1, 10, 20000, 4096), 10, 1);      // a slot over half the threshold: one a block
  expect_blocks(slot_blocks(1, 100000, 1, 4096), 26, 3847);   // light slots: the cap
  at::set_num_threads(3);
  expect_blocks(slot_blocks(1, 10000, work, 4096), 15, 667);  // a multiple of three
  at::set_num_threads(2);
  const int64_t inline_k = kParallelWork / work;  // the most slots of a phase that runs inline
  for (const int64_t rows : {int64_t{1}, int64_t{3}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    const int64_t k_inline = inline_k / rows;
    expect_blocks(slot_blocks(rows, k_inline, work, 4096), 1, k_inline);
    for (const int64_t k : {k_inline + 1, int64_t{10000}, int64_t{100000}}) {
      SCOPED_TRACE(::testing::Message() << "k " << k);
      auto split = slot_blocks(rows, k, work, 4096);
      EXPECT_LE(split.size * work, kParallelWork / 2);
      EXPECT_GE(split.size * split.count, k);
      if (split.count > 1) EXPECT_EQ((rows * split.count) % 2, 0);
    }
  }
  // The sampler's split: whole rows keep blocks of the cap, a row shared by
  // the threads takes small ones.
  expect_blocks(sample_gather_split(32, 10000, 1000, 8, 64, true).slots, 1, 1000);
  expect_blocks(sample_gather_split(32, 100000, 10000, 8, 64, true).slots, 3, 3334);
  expect_blocks(sample_gather_split(1, 100000, 10000, 8, 64, true).slots, 14, 715);
  // Slots of 128 KiB feature rows, a block each, as many blocks as the
  // threads share evenly: the last of a row's blocks hold no slot (the
  // test above fills them).
  expect_blocks(sample_gather_split(1, 50, 9, 8, 131072, true).slots, 10, 1);
  at::set_num_threads(8);
  expect_blocks(sample_gather_split(1, 50, 9, 8, 131072, true).slots, 16, 1);
}

TEST(CpuParallel, TheFusedGatherFoldsThePositivesLabelsOfRowsBeyond512KiB) {
  // balanced_sample alone never folds (it reads no label after the
  // compaction), whatever the row's size.
  using syncfree::ops::sample_gather_split;
  using syncfree::ops::sample_split;
  EXPECT_FALSE(sample_gather_split(1, 65536, 6553, 8, 64, true).fold);  // 512 KiB exactly
  EXPECT_TRUE(sample_gather_split(1, 65537, 6553, 8, 64, true).fold);
  EXPECT_TRUE(sample_gather_split(1, 100000, 10000, 8, 64, true).fold);
  EXPECT_TRUE(sample_gather_split(32, 70000, 7000, 8, 64, true).fold);
  EXPECT_FALSE(sample_gather_split(1, 50000, 5000, 8, 64, true).fold);
  EXPECT_FALSE(sample_gather_split(1, 100000, 10000, 4, 64, true).fold);
  EXPECT_TRUE(sample_gather_split(1, 600000, 60000, 1, 64, true).fold);
  EXPECT_FALSE(sample_split(1, 1000000, 100000, 8).fold);
  // Nor where compact_chunk's loop compacts the row (strided labels, or a
  // CPU without AVX2).
  EXPECT_FALSE(sample_gather_split(1, 1000000, 100000, 8, 64, false).fold);
  // A call that samples nothing may have rows of any length (no labels, or
  // no slots): the choice does not overflow.
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_TRUE(sample_gather_split(0, huge, 1, 8, 0, true).fold);
  EXPECT_TRUE(sample_gather_split(1, huge, 0, 8, 0, true).fold);
}

TEST(CpuParallel, NoRowsTakeAnyNumberOfSlots) {
  // A call with no row samples nothing, whatever its K (the thread split
  // is not computed for it: K * work per slot would overflow).
  const ThreadCount restore;
  const int64_t k = std::numeric_limits<int64_t>::max();
  const at::Tensor labels = at::zeros({0, 5}, at::kLong);
  const at::Tensor features = at::zeros({0, 5});  // no feature dimension: [0, K] outputs
  for (const int threads : {1, 2}) {
    at::set_num_threads(threads);
    at::Tensor indices, valid;
    std::tie(indices, valid) =
        syncfree::balanced_sample(labels, k, syncfree::SampleOptions().seed(1));
    EXPECT_EQ(indices.sizes(), at::IntArrayRef({0, k}));
    EXPECT_EQ(valid.sizes(), at::IntArrayRef({0, k}));
    at::Tensor sampled, sampled_labels, sampled_valid;
    std::tie(sampled, sampled_labels, sampled_valid) =
        syncfree::balanced_sample_gather(features, labels, k, syncfree::SampleOptions().seed(1));
    EXPECT_EQ(sampled.sizes(), at::IntArrayRef({0, k}));
    EXPECT_EQ(sampled_valid.sizes(), at::IntArrayRef({0, k}));
  }
}
