// The balanced sampler on the host (CPU backend): a row's slots filled from
// its plan, and the serial reference of the whole algorithm. Framework-free,
// not for device code. The vector paths it uses are in host_simd.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "host_permutation.h"
#include "label_compaction.h"
#include "platform.h"
#include "row_plan.h"

namespace syncfree {
namespace core {

// What fill_row_slots does besides writing the slots: nothing (the sampler
// alone), or a fused gather's part (see RowGather in cpu/common.h).
struct NoGather {
  static constexpr bool kGathers = false;
};

// Writes slots [begin, end) of one row: indices (or -1) and validity.
// Evaluates pick_slot() class by class: each permutation over a run of up
// to 1024 slots at a time, then each batch of 256 of the run's slots
// located in the workspace and written.
//
// gather: for a fused gather (Gather::kGathers), as a batch's indices are
// written, the batch's slots are passed by class (classes(pos_slots, np,
// neg_slots, nn): the gather may request the positives' labels and write
// the negatives', which are the negative label); gather(first, last,
// pos_slots, np, ahead) runs on the valid slots [first, last) one batch
// behind, after the next batch is written, so that what it reads has been
// in flight while that batch was located and written (and, before a run's
// first batch, while the run's permutations were evaluated; pos_slots: the
// np positives among them), and requests the feature rows of the `ahead`
// slots after `last` (the batch just written) as it goes; the first
// batch's rows are requested as it is written (prefetch_row). Every valid
// slot's row is requested once, before it is gathered. The invalid slots
// are passed last, as gather(first, last). Every slot of [begin, end) is
// passed to it once, in order.
template <typename Gather = NoGather>
inline void fill_row_slots(const RowPlan& plan, const CompactRow& row, int64_t begin, int64_t end,
                           int64_t* indices, bool* valid, const Gather& gather = Gather()) {
  // Slots are written (and gathered) a batch of kBatch at a time; their
  // permutations are evaluated a run of up to kRun slots at a time (whole
  // batches), which shares the cost of the cycle walk's last passes, each
  // of a few values (HostPermutation::apply), among more slots: with runs
  // of 1024 slots rather than batches of 256, balanced_sample alone took
  // 0.89x to 0.95x the time at single rows of 1e4 to 1e6 labels, and the
  // fused gather 0.88x to 0.99x (one thread, an Intel Xeon, 2026-12-04,
  // docs/benchmarks.md).
  constexpr int64_t kBatch = 256;
  constexpr int64_t kRun = 4 * kBatch;
  const int64_t num_valid = plan.quota.valid();
  const int64_t num_pos = plan.quota.num_pos;
  const int64_t valid_end = std::min(end, num_valid);
  int64_t pending = begin;  // slots [pending, b0) are written and not yet gathered
  if (begin < valid_end) {
    // Each permutation is evaluated at most once per slot, and pi (pi') at
    // most once per positive (negative) taken.
    const int64_t slots_here = valid_end - begin;
    const HostPermutation slots(plan.slots, slots_here);
    const HostPermutation positives(plan.positives, std::min(slots_here, num_pos));
    const HostPermutation negatives(plan.negatives,
                                    std::min(slots_here, plan.quota.num_neg));
    const SimdPath path = simd_path();
    // A run's slots by class, batch by batch (+ 8: room for the vector
    // paths' full stores): the positives' ranks and slots, then the
    // negatives'. The positives' slots are kept for two runs, since a fused
    // gather is passed a batch's one batch behind, and the batch before a
    // run's first is the run before's last.
    int64_t t[kRun], pos_rank[kRun + 8], neg_rank[kRun + 8];
    int64_t pos_slots[2][kRun + 8], neg_slot[kRun + 8];
    // Each batch's first positive in the run (its first negative: the
    // run's slots before it, j * kBatch, less that).
    int64_t batch_pos[kRun / kBatch + 1];
    int64_t start[kBatch];  // each pick's chunk start (positives, then negatives)
    int cur = 0;
    [[maybe_unused]] const int64_t* pending_pos = nullptr;  // the positives of [pending, b0)
    [[maybe_unused]] int64_t pending_np = 0;
    for (int64_t r0 = begin; r0 < valid_end; r0 += kRun) {
      const int64_t run = std::min(kRun, valid_end - r0);
      int64_t* pos_slot = pos_slots[cur];
      for (int64_t i = 0; i < run; ++i) t[i] = r0 + i;
      if (plan.permute_slots) slots.apply(t, run);
      int64_t np = 0, nn = 0, batches = 0;
      for (int64_t i = 0; i < run; i += kBatch, ++batches) {
        const int64_t count = std::min(kBatch, run - i);
        batch_pos[batches] = np;
        const int64_t p = split_slots(t + i, count, r0 + i, num_pos, pos_rank + np, pos_slot + np,
                                      neg_rank + nn, neg_slot + nn, path);
        np += p;
        nn += count - p;
      }
      batch_pos[batches] = np;
      if (plan.pick_positives) positives.apply(pos_rank, np);
      if (plan.pick_negatives) negatives.apply(neg_rank, nn);
      for (int64_t j = 0; j < batches; ++j) {
        const int64_t b0 = r0 + j * kBatch;
        const int64_t count = std::min(kBatch, valid_end - b0);
        const int64_t first_neg = j * kBatch - batch_pos[j];
        int64_t* pr = pos_rank + batch_pos[j];
        int64_t* nr = neg_rank + first_neg;
        const int64_t* ps = pos_slot + batch_pos[j];
        const int64_t* ns = neg_slot + first_neg;
        const int64_t bp = batch_pos[j + 1] - batch_pos[j];
        const int64_t bn = count - bp;
        // Ranks to indices in two passes: every workspace entry located and
        // prefetched, then read (random reads of a workspace beyond the L1
        // cache, in flight together rather than one after another).
        entries_of(row, true, pr, bp, start, path);
        entries_of(row, false, nr, bn, start + bp, path);
        for (int64_t i = 0; i < bp; ++i) prefetch(row.work + pr[i]);
        for (int64_t i = 0; i < bn; ++i) prefetch(row.work + nr[i]);
        for (int64_t i = 0; i < bp; ++i) indices[ps[i]] = start[i] + row.work[pr[i]];
        for (int64_t i = 0; i < bn; ++i) indices[ns[i]] = start[bp + i] + row.work[nr[i]];
        for (int64_t i = 0; i < count; ++i) valid[b0 + i] = true;
        if constexpr (Gather::kGathers) {
          // What the gather of this batch will read, requested now: the
          // batch's slots by class, and every item's feature row. The rows
          // are requested as the batch before it is copied, one a slot (the
          // first batch's at once): on some cores a burst of 256 random
          // requests holds the core up (see kGatherAhead).
          gather.classes(ps, bp, ns, bn);
          if (pending < b0) {
            gather(pending, b0, pending_pos, pending_np, count);
          } else {
            for (int64_t i = b0; i < b0 + count; ++i) gather.prefetch_row(indices[i]);
          }
          pending = b0;
          pending_pos = ps;
          pending_np = bp;
        }
      }
      if constexpr (Gather::kGathers) cur ^= 1;  // the sampler alone keeps one buffer
    }
    if constexpr (Gather::kGathers) gather(pending, valid_end, pending_pos, pending_np, 0);
  }
  const int64_t first_invalid = std::max(begin, num_valid);
  for (int64_t s = first_invalid; s < end; ++s) {
    indices[s] = -1;
    valid[s] = false;
  }
  if constexpr (Gather::kGathers) {
    if (first_invalid < end) gather(first_invalid, end);
  }
}

// The whole algorithm for `rows` contiguous rows of `n` labels, serially:
// compaction, prefix sums, slots. The reference the CPU and CUDA backends are
// tested against, and what the fuzzer drives.
template <typename T>
void sample_rows_serial(const T* labels, int64_t rows, int64_t n, const BalancedParams& p,
                        int64_t* indices, bool* valid) {
  const int64_t k = p.num_samples;
  const int64_t chunks = num_chunks(n);
  std::vector<uint16_t> work(static_cast<size_t>(n));
  std::vector<int64_t> pos(static_cast<size_t>(chunks + 1)), neg(pos.size());
  for (int64_t r = 0; r < rows; ++r) {
    compact_row(labels + r * n, 1, n, p.negative_label, work.data(), pos.data(), neg.data());
    const CompactRow row{work.data(), pos.data(), neg.data(), n, chunks};
    const RowPlan plan = make_row_plan(p, r, row.num_positive(), row.num_negative());
    fill_row_slots(plan, row, 0, k, indices + r * k, valid + r * k);
  }
}

}  // namespace core
}  // namespace syncfree
