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
// Evaluates pick_slot() for a batch of slots at a time, class by class.
//
// gather: for a fused gather (Gather::kGathers), as a batch's indices are
// written, the batch's slots are passed by class (classes(pos_slots, np,
// neg_slots, nn): the gather may request the positives' labels and write
// the negatives', which are the negative label); gather(first, last,
// pos_slots, np, ahead) runs on the valid slots [first, last) one batch
// behind, after the next batch is written, so that what it reads has been
// in flight during that batch's permutations (pos_slots: the np positives
// among them), and requests the feature rows of the `ahead` slots after
// `last` (the batch just written) as it goes; the first batch's rows are
// requested as it is written (prefetch_row). Every valid slot's row is
// requested once, before it is gathered. The invalid slots are passed
// last, as gather(first, last). Every slot of [begin, end) is passed to it
// once, in order.
template <typename Gather = NoGather>
inline void fill_row_slots(const RowPlan& plan, const CompactRow& row, int64_t begin, int64_t end,
                           int64_t* indices, bool* valid, const Gather& gather = Gather()) {
  constexpr int64_t kBatch = 256;
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
    // + 8: room for the vector paths' full stores.
    int64_t t[kBatch], pos_rank[kBatch + 8], neg_rank[kBatch + 8];
    // The positives' slots of this batch and of the one before it (which a
    // fused gather is passed one batch behind).
    int64_t pos_slots[2][kBatch + 8], neg_slot[kBatch + 8];
    int64_t start[kBatch];  // each pick's chunk start (positives, then negatives)
    int cur = 0;
    [[maybe_unused]] int64_t pending_np = 0;  // positives of the batch [pending, b0)
    for (int64_t b0 = begin; b0 < valid_end; b0 += kBatch) {
      const int64_t count = std::min(kBatch, valid_end - b0);
      int64_t* pos_slot = pos_slots[cur];
      for (int64_t i = 0; i < count; ++i) t[i] = b0 + i;
      if (plan.permute_slots) slots.apply(t, count);
      const int64_t np =
          split_slots(t, count, b0, num_pos, pos_rank, pos_slot, neg_rank, neg_slot, path);
      const int64_t nn = count - np;
      if (plan.pick_positives) positives.apply(pos_rank, np);
      if (plan.pick_negatives) negatives.apply(neg_rank, nn);
      // Ranks to indices in two passes: every workspace entry located and
      // prefetched, then read (random reads of a workspace beyond the L1
      // cache, in flight together rather than one after another).
      entries_of(row, true, pos_rank, np, start, path);
      entries_of(row, false, neg_rank, nn, start + np, path);
      for (int64_t i = 0; i < np; ++i) prefetch(row.work + pos_rank[i]);
      for (int64_t i = 0; i < nn; ++i) prefetch(row.work + neg_rank[i]);
      for (int64_t i = 0; i < np; ++i) indices[pos_slot[i]] = start[i] + row.work[pos_rank[i]];
      for (int64_t i = 0; i < nn; ++i)
        indices[neg_slot[i]] = start[np + i] + row.work[neg_rank[i]];
      for (int64_t i = 0; i < count; ++i) valid[b0 + i] = true;
      if constexpr (Gather::kGathers) {
        // What the gather of this batch will read, requested now: the
        // batch's slots by class, and every item's feature row. The rows
        // are requested as the batch before it is copied, one a slot (the
        // first batch's at once): on some cores a burst of 256 random
        // requests holds the core up (see kGatherAhead).
        gather.classes(pos_slot, np, neg_slot, nn);
        if (pending < b0) {
          gather(pending, b0, pos_slots[cur ^ 1], pending_np, count);
        } else {
          for (int64_t i = b0; i < b0 + count; ++i) gather.prefetch_row(indices[i]);
        }
        pending = b0;
        pending_np = np;
        cur ^= 1;
      }
    }
    if constexpr (Gather::kGathers) gather(pending, valid_end, pos_slots[cur ^ 1], pending_np, 0);
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
