// How the CPU backend of syncfree::balanced_sample shares a call's rows
// among the pool's threads (ThreadSplit), and the work estimates it decides
// by: used by balanced_sample_cpu.cpp, and by the thread tests
// (tests/cpp/test_cpu_parallel.cpp), which check the split each shape takes.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/label_compaction.h"
#include "cpu/common.h"

namespace syncfree {
namespace ops {

// The most slots of a unit of step 3 (a row's block of slots).
constexpr int64_t kSlotBlock = 4096;

// Work per unit of each phase (units: see cpu/common.h).
constexpr int64_t kChunkWork = 64;      // a (row, chunk) unit, besides its labels
constexpr int64_t kRowPlanWork = 256;   // a (row, block) unit's share of a pass's plan and tables
constexpr int64_t kSlotWork = 12;       // one slot: the permutations and the lookup

// Workspaces up to this size reuse a buffer kept by the calling thread.
constexpr size_t kScratchBytes = size_t{16} << 20;

// A slot read from a row that another thread compacted costs more than one
// from a row its own thread compacted: the entry's cache line comes from the
// other core, and that core's next compaction must take it back. On the
// benchmark machine (2026-12-03, two threads, one row of 1e5 labels and
// K = 1e4, docs/benchmarks.md) the call took 7 to 40 ns per slot more than
// half its one-thread work, depending on the process. A task compacts
// the rows it fills slots of itself when their labels are at most
// kSharedSlotWork units of work per slot it fills (two threads on one row:
// K >= N / 16), and when a row's labels are cached (kCachedLabelBytes):
// labels beyond the caches come from memory, and every task that compacts
// the row reads all of them. One row of 1e6 int64 labels (8 MB, K = 1e5)
// on two threads took 0.83x to 0.97x the time compacted in a phase,
// balanced_sample alone 0.70x to 0.81x (2026-12-04, docs/benchmarks.md).
// (Where the row is the call's only one, the tasks share it instead:
// ThreadSplit::kSharedRow.)
constexpr int64_t kSharedSlotWork = 32;

// Rows of labels up to this many bytes (about the L2 cache of one core)
// may be compacted by every task that fills some of their slots, where a
// few rows' slots are split over the threads (ThreadSplit::kOwnRows
// below): at one row of 2e4 to 1e5 on two threads that took 0.92x to
// 1.02x the time of a phase shared by the threads (an Intel Xeon,
// 2026-12-05; 0.79x to 0.94x at rows of 1e5 and 2e5 on an AMD EPYC,
// 2026-12-04; docs/benchmarks.md). A row beyond it comes from memory, and
// every task that compacted it would read all of it: it is compacted once,
// in such a phase. One row within it is shared by the tasks instead
// (ThreadSplit::kSharedRow), compacted once, where kOwnRows would take it.
// The tests' rows beyond the cache
// (tests/python/gather/test_fused.py) are sized at about twice this (the
// strided one just over it).
constexpr int64_t kCachedLabelBytes = int64_t{1} << 20;

// A fused gather's rows of labels beyond this many bytes, where a vector
// path compacts them (sample_gather_split below), have their
// positives' labels folded (core::PositiveBits) as they are compacted, so
// that where a row's positives all carry one label, the gather writes it
// rather than reading each sampled positive's label (RowGather, cpu/common.h).
// The fold costs the compaction a few vector instructions a group of labels
// whatever the slots; the reads it saves are random and, where the row's
// labels outgrow the L2 cache beside the gathered feature rows, misses.
// With the caches as another sampler's call leaves them (an Intel Xeon,
// 2026-12-05, docs/benchmarks.md; int64 labels 0 and 1, K = N / 10), one
// row of 1e5 (800 KB) took 0.94x to 0.97x the time on one thread, 0.99x to
// 1.00x on two, and one of 1e6 0.85x to 0.89x; folded, rows of 1e3 to 5e4
// (8 to 400 KB) took 0.99x to 1.05x on one thread and up to 1.03x on two,
// where each task compacts the row (ThreadSplit::kOwnRows). Rows whose
// positives carry several labels (0, 1 and 2 at 1e5 and 1e6) took 0.98x
// to 1.02x: the fold's cost was not measurable there.
constexpr int64_t kFoldLabelBytes = int64_t{512} << 10;

// How sample_rows shares rows x n labels and k slots per row among the
// pool's threads, decided before the workspace is made (the number of
// compacted rows it holds depends on it).
struct ThreadSplit {
  enum Kind {
    // Rows that divide evenly among the threads, or many rows (at least
    // four per thread), run whole, one after another on each thread: a
    // row's workspace is still in the cache when its slots read it.
    kWholeRows,
    // Fewer rows (more than one; one row: kSharedRow) of cached labels,
    // with enough slots to split: each task fills a run of (row, block)
    // units, and compacts each row of its run into its own workspace
    // first. A row is compacted by every task that fills some of its
    // slots (once per task), and no task reads what another wrote: the
    // random reads of a shared workspace, and the next call taking its
    // cache lines back, cost more than compacting the row again where the
    // row's labels are at most kSharedSlotWork units of work per slot of
    // the task (the cost of a shared read) and cached (at most
    // kCachedLabelBytes), and the tasks' rows take at most half the buffer
    // the calling thread keeps (8 MiB: four million labels; the memory
    // stays bounded whatever the thread count).
    kOwnRows,
    // One row where kOwnRows would compact it in every task: the tasks
    // share it in one parallel region instead. Its labels are cut into
    // `chunk`-label chunks, as many as a multiple of the tasks (evenly, no
    // cache line holding the entries of two chunks); each task
    // compacts the chunks it claims, the task that finishes the last one
    // sums the counts (ClaimedPhase, cpu/common.h), and each task then fills
    // its run of blocks of slots, reading the entries wherever they were
    // compacted. Against kOwnRows, one row of 3e4 to 1e5 int64 labels (K =
    // N / 10) on two threads took 0.91x to 0.98x the time after the other
    // samplers' calls and 0.87x to 0.96x with nothing between the calls
    // (both calls, an AMD EPYC Zen 5, 2026-12-05, docs/benchmarks.md): the
    // compaction, which every task did whole, is split, and the reads of the
    // other core's entries cost less than that there. kPhases, three
    // parallel regions over chunks of kChunk (a row of 1e5 labels: 65536
    // and 34464), had taken 1.01x kOwnRows' time at 1e5 and 1.04x at 5e4
    // on that machine. Not measured on another CPU: on the machine that
    // kSharedSlotWork cites, a read of another core's entry cost more.
    kSharedRow,
    // Otherwise each step is a parallel phase over all the rows.
    kPhases,
  };
  Kind kind;
  SlotBlocks slots;    // each row's slots in blocks: step 3's units (row, block)
  int64_t row_grain;   // kWholeRows: the grain of rows
  int64_t slot_grain;  // kOwnRows, kSharedRow, kPhases: the grain of (row, block) units
  int64_t copies;      // compacted rows the workspace holds: one per row, or per task (kOwnRows)
  int64_t chunk = core::kChunk;  // labels per chunk of the compaction (fewer: kSharedRow)
  // Whether the compaction folds the positives' labels (a fused gather's
  // rows beyond kFoldLabelBytes that a vector path compacts): the workspace
  // then holds the folds.
  bool fold = false;
};

// The chunk of a row of n labels shared by `tasks` tasks (kSharedRow): as
// many chunks as a multiple of the tasks, each of at most core::kChunk
// labels, of a multiple of 64 labels (the last may hold fewer, and a short
// row fewer chunks): 64 entries of 2 bytes are two cache lines, so, the
// workspace starting on a line, no line holds the entries of two chunks
// (which two tasks would write); and where the row's labels start on a
// line, so do each chunk's.
inline int64_t shared_row_chunk(int64_t n, int64_t tasks) {
  const int64_t chunks = tasks * core::num_chunks(n, tasks * core::kChunk);
  return ((n + chunks - 1) / chunks + 63) / 64 * 64;
}

// slot_work is the work of one slot (units: cpu/common.h), label_bytes the
// size of one label; a unit holds at most kSlotBlock slots (slot_blocks may
// take fewer).
inline ThreadSplit split_threads(int64_t rows, int64_t n, int64_t k, int64_t label_bytes,
                                 int64_t slot_work) {
  // A call with no slot or no label samples nothing (and its k may be any
  // int64 when it has no row).
  if (rows == 0 || k == 0 || n == 0) return {ThreadSplit::kWholeRows, {1, 1}, 1, 1, rows};
  const int64_t threads = std::max(1, at::get_num_threads());
  const int64_t chunks = core::num_chunks(n);
  // Whole rows run each on one thread: their slots need no small blocks.
  const bool whole_rows = rows % threads == 0 || rows >= 4 * threads;
  const SlotBlocks slots = slot_blocks(rows, k, slot_work, kSlotBlock, !whole_rows);
  const int64_t row_work = n + chunks * kChunkWork + slots.count * kRowPlanWork + k * slot_work;
  const int64_t slot_grain = parallel_grain(kRowPlanWork + slot_work * slots.size);
  const int64_t units = rows * slots.count;
  if (whole_rows) {
    return {ThreadSplit::kWholeRows, slots, parallel_grain(row_work), slot_grain, rows};
  }
  // at::parallel_for runs the units as at most min(threads, ceil(units /
  // grain)) tasks when there are more than a grain of them.
  const int64_t tasks = units > slot_grain ? std::min(threads, (units + slot_grain - 1) / slot_grain) : 1;
  // A task's slots that can be valid: at most n per row.
  const int64_t task_slots = rows * std::min(k, n) / tasks;
  // The tasks' rows take at most half the buffer the calling thread keeps.
  const bool fits = static_cast<size_t>(tasks * n) * 2 <= kScratchBytes / 2;
  const bool cached = n * label_bytes <= kCachedLabelBytes;
  if (tasks > 1 && fits && cached && n + chunks * kChunkWork <= task_slots * kSharedSlotWork) {
    if (rows == 1) {
      ThreadSplit split{ThreadSplit::kSharedRow, slots, parallel_grain(row_work), slot_grain, 1};
      split.chunk = shared_row_chunk(n, tasks);
      return split;
    }
    return {ThreadSplit::kOwnRows, slots, parallel_grain(row_work), slot_grain, tasks};
  }
  return {ThreadSplit::kPhases, slots, parallel_grain(row_work), slot_grain, rows};
}

// The split of a balanced_sample call (rows x n labels of label_bytes each,
// k slots per row).
inline ThreadSplit sample_split(int64_t rows, int64_t n, int64_t k, int64_t label_bytes) {
  return split_threads(rows, n, k, label_bytes, kSlotWork);
}

// The split of a fused balanced_sample_gather call, whose slots also gather a
// feature row of row_bytes each (where a phase can run in parallel, fewer
// slots a unit for wide feature rows: slot_blocks), and whose rows beyond
// kFoldLabelBytes have their positives' labels folded where a vector path
// compacts them (vector_compaction: core::vector_compaction of the labels'
// stride). compact_chunk's loop, which compacts the others (strided labels,
// or a CPU without AVX2), takes about half again as many instructions a label
// to fold it (strided int64 labels: 27 against 18): strided rows of
// 1e5 to 3e5 int64 labels (stride 2, K = N / 400 or N / 10) took 0.53x to
// 0.97x the time unfolded, rows of 5e5 and 1e6 0.67x to 0.91x with K = N /
// 400 but 1.07x to 1.23x with K = N / 10, where the many label reads the fold
// saves come from memory (one thread, an Intel Xeon, 2026-12-05,
// docs/benchmarks.md).
inline ThreadSplit sample_gather_split(int64_t rows, int64_t n, int64_t k, int64_t label_bytes,
                                       int64_t row_bytes, bool vector_compaction) {
  const int64_t slot_work = kSlotWork + kGatherSlotWork + row_bytes / 16;
  ThreadSplit split = split_threads(rows, n, k, label_bytes, slot_work);
  // n * label_bytes > kFoldLabelBytes, without the product: a call that
  // samples nothing may have rows of any length.
  split.fold = vector_compaction && n > kFoldLabelBytes / label_bytes;
  return split;
}

}  // namespace ops
}  // namespace syncfree
