// CPU backend of syncfree::balanced_sample: the torch adapter around the
// framework-free core. Three steps over a uint16 workspace of one entry per
// label (core/label_compaction.h):
//   1. compact a row's chunks, recording per-chunk class counts;
//   2. turn the row's counts into prefix sums;
//   3. fill the row's slots from the row's plan (each task its run of the
//      row's blocks of slots in one pass).
// How the threads share the rows (ThreadSplit, balanced_sample_cpu.h): rows that divide
// evenly among the threads, or many rows, run whole, one after another on
// each thread; fewer rows whose slots are worth splitting, and whose labels
// are cached, are compacted by every thread that fills some of their slots,
// into its own workspace, so that no thread reads what another wrote,
// except one such row, whose chunks the threads share, in one parallel
// region; otherwise each step is a parallel phase over all the rows. A
// phase with little work runs on the calling thread (see parallel_grain);
// every unit writes its own part of the outputs, so the results do not
// depend on how the units are split over threads.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "core/host_sampler.h"
#include "core/host_simd.h"
#include "core/label_compaction.h"
#include "core/row_plan.h"
#include "cpu/balanced_sample_cpu.h"
#include "cpu/common.h"
#include "ops/balanced_sample.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"

namespace syncfree {
namespace ops {

namespace {

// Workspace of one call: `copies` compacted rows of n labels (2 bytes per
// label), then each class's per-row prefix sums (prefix_len each), then,
// where the compaction folds the positives' labels (ThreadSplit::fold),
// each row's PositiveBits (prefix_len each: the row's, then its chunks').
// One of up to kScratchBytes (copies * n up to about eight million labels) lives
// in a buffer kept by the calling thread, grown to the largest such
// workspace it has needed (no allocation per call; a call never re-enters
// itself on its thread); a larger one is allocated and freed when the call
// returns.
class Workspace {
 public:
  Workspace(const char* op, const at::Tensor& labels, int64_t copies, int64_t n,
            int64_t prefix_len, bool fold) {
    const size_t work_bytes = (static_cast<size_t>(copies * n) * 2 + 7) / 8 * 8;
    const size_t entries = static_cast<size_t>(copies * prefix_len);
    const size_t bytes = work_bytes + entries * (2 * sizeof(int64_t) +
                                                 (fold ? sizeof(core::PositiveBits) : 0));
    const auto subject = [&] { return shape_subject("labels", labels); };
    char* base;
    if (bytes <= kScratchBytes) {
      thread_local at::Tensor scratch;
      if (!scratch.defined() || scratch.nbytes() < bytes) {
        scratch = at::Tensor();  // the old buffer first, then the new one
        scratch = allocate_workspace(op, subject, std::max(bytes, size_t{1} << 16), labels);
      }
      base = static_cast<char*>(scratch.data_ptr());
    } else {
      owned_ = allocate_workspace(op, subject, bytes, labels);
      base = static_cast<char*>(owned_.data_ptr());
    }
    work = reinterpret_cast<uint16_t*>(base);
    pos_prefix = reinterpret_cast<int64_t*>(base + work_bytes);
    neg_prefix = pos_prefix + copies * prefix_len;
    folds =
        fold ? reinterpret_cast<core::PositiveBits*>(neg_prefix + copies * prefix_len) : nullptr;
  }
  uint16_t* work;
  int64_t* pos_prefix;
  int64_t* neg_prefix;
  core::PositiveBits* folds;  // null unless the compaction folds

 private:
  at::Tensor owned_;
};

// The sampler's three steps over `rows` rows of n labels (data: labels'
// elements, any strides), writing indices and valid [rows, k], the threads
// sharing the work as `split` says. row_gather(r, fold) is what
// core::fill_row_slots does besides, in row r, whose positives' labels
// are folded into `fold` (core::PositiveBits) where split.fold says: the
// fused gather's RowGather (each batch of slots gathered while its indices
// are in the cache, its rows prefetched a batch ahead), or core::NoGather
// for balanced_sample.
template <typename T, typename RowGatherOf>
void sample_rows(const at::Tensor& labels, const T* data, const core::BalancedParams& params,
                 const ThreadSplit& split, const Workspace& ws, int64_t rows, int64_t n,
                 int64_t* out_indices, bool* out_valid, const RowGatherOf& row_gather) {
  const int64_t k = params.num_samples;
  const int64_t chunk = split.chunk;
  const int64_t chunks = core::num_chunks(n, chunk);
  const int64_t prefix_len = chunks + 1;
  const int64_t stride = labels.stride(-1);
  const int64_t negative_label = params.negative_label;
  const SlotBlocks& slots = split.slots;
  const int64_t blocks = slots.count;
  // A fused gather's rows of labels beyond kFoldLabelBytes that a vector
  // path compacts have their positives' labels folded as they are
  // compacted (sample_gather_split); balanced_sample's (whose row_gather
  // returns core::NoGather) never.
  constexpr bool gathers = decltype(row_gather(0, core::PositiveBits()))::kGathers;
  const bool fold = gathers && split.fold;

  // Row r's chunk c, compacted into the workspace's row w.
  const auto compact_unit = [&](int64_t r, int64_t c, int64_t w) {
    const int64_t start = c * chunk;
    const int64_t len = std::min(chunk, n - start);
    core::PositiveBits* bits = nullptr;
    if (fold) {
      bits = &ws.folds[w * prefix_len + c + 1];
      *bits = core::PositiveBits();
    }
    core::compact_chunk_host(data + row_offset(labels, r) + start * stride, stride, len,
                             negative_label, ws.work + w * n + start,
                             &ws.pos_prefix[w * prefix_len + c + 1],
                             &ws.neg_prefix[w * prefix_len + c + 1], core::simd_path(), bits);
  };
  const auto prefix_row = [&](int64_t w) {
    core::counts_to_prefix(ws.pos_prefix + w * prefix_len, chunks);
    core::counts_to_prefix(ws.neg_prefix + w * prefix_len, chunks);
    if (fold) {
      core::PositiveBits* bits = ws.folds + w * prefix_len;
      bits[0] = core::PositiveBits();
      for (int64_t c = 1; c <= chunks; ++c) bits[0].merge(bits[c]);
    }
  };
  const auto compact_row = [&](int64_t r, int64_t w) {
    for (int64_t c = 0; c < chunks; ++c) compact_unit(r, c, w);
    prefix_row(w);
  };
  // Row r's slots [first, last), from row r compacted into the workspace's row w.
  const auto fill_slots = [&](int64_t r, int64_t first, int64_t last, int64_t w) {
    const core::CompactRow row{ws.work + w * n, ws.pos_prefix + w * prefix_len,
                               ws.neg_prefix + w * prefix_len, n, chunks, chunk};
    const core::RowPlan plan =
        core::make_row_plan(params, r, row.num_positive(), row.num_negative());
    core::fill_row_slots(plan, row, first, last, out_indices + r * k, out_valid + r * k,
                         row_gather(r, fold ? ws.folds[w * prefix_len] : core::PositiveBits()));
  };
  // A task's (row, block) units [begin, end), each row's run of them in one
  // pass (one plan, one pipeline of batches: a pass's first batch of rows
  // is requested with nothing to overlap, its last gathered with nothing
  // after it); start_row(r) runs before row r's run and returns the
  // workspace row that holds row r. The blocks are only how the threads
  // share a row's slots: one row of 1e6 labels, K = 1e5, two threads, a
  // task's 62 blocks in one pass rather than one pass a block took the
  // fused call 0.95x to 0.96x the time, one thread (25 blocks) 0.96x to
  // 0.98x, one row of 5e4 or 1e5 on two threads 0.95x to 0.99x (an AMD
  // EPYC Zen 5, 2026-12-05, docs/benchmarks.md).
  const auto slot_units = [&](int64_t begin, int64_t end, const auto& start_row) {
    for (int64_t u = begin; u < end;) {
      const int64_t r = u / blocks;
      const int64_t stop = std::min(end, (r + 1) * blocks);
      const int64_t w = start_row(r);
      fill_slots(r, slots.begin(k, u % blocks), slots.end(k, (stop - 1) % blocks), w);
      u = stop;
    }
  };

  switch (split.kind) {
    case ThreadSplit::kWholeRows:
      at::parallel_for(0, rows, split.row_grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          compact_row(r, r);
          fill_slots(r, 0, k, r);  // the row's blocks, all this task's: one pass
        }
      });
      return;
    case ThreadSplit::kOwnRows:
      at::parallel_for(0, rows * blocks, split.slot_grain, [&](int64_t begin, int64_t end) {
        // This task's compacted row: its thread's number is below the
        // number of tasks (at::parallel_for; 0 when it runs inline).
        const int64_t w = at::get_thread_num();
        TORCH_INTERNAL_ASSERT(w >= 0 && w < split.copies, "a task's workspace row ", w,
                              " is outside [0, ", split.copies, ")");
        int64_t compacted = -1;
        slot_units(begin, end, [&](int64_t r) {
          if (r != compacted) {
            compact_row(r, w);
            compacted = r;
          }
          return w;
        });
      });
      return;
    case ThreadSplit::kSharedRow: {
      // One row (row 0 of the workspace): its chunks compacted by the tasks
      // as they claim them, the prefix sums by the task that finishes the
      // last, then each task's run of blocks of slots.
      ClaimedPhase compaction(chunks);
      at::parallel_for(0, blocks, split.slot_grain, [&](int64_t begin, int64_t end) {
        compaction.run([&](int64_t c) { compact_unit(0, c, 0); }, [&] { prefix_row(0); });
        slot_units(begin, end, [](int64_t) { return int64_t{0}; });
      });
      return;
    }
    case ThreadSplit::kPhases:
      at::parallel_for(0, rows * chunks, parallel_grain(std::min(n, chunk) + kChunkWork),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t u = begin; u < end; ++u) {
                           compact_unit(u / chunks, u % chunks, u / chunks);
                         }
                       });
      at::parallel_for(0, rows, parallel_grain(2 * prefix_len), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) prefix_row(r);
      });
      at::parallel_for(0, rows * blocks, split.slot_grain, [&](int64_t begin, int64_t end) {
        slot_units(begin, end, [](int64_t row) { return row; });
      });
      return;
  }
}

// The workspace of a call that samples (rows, labels and slots), made after
// its outputs and before the draw from the generator, so that a call that
// fails (out of memory) has not drawn. Every call draws the same amount.
std::optional<Workspace> make_workspace(const char* op, const at::Tensor& labels, int64_t k,
                                        const ThreadSplit& split) {
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  std::optional<Workspace> workspace;
  if (rows > 0 && k > 0 && n > 0) {
    workspace.emplace(op, labels, split.copies, n, core::num_chunks(n, split.chunk) + 1,
                      split.fold);
  }
  return workspace;
}

std::tuple<at::Tensor, at::Tensor> balanced_sample_cpu(const at::Tensor& labels,
                                                       int64_t num_samples,
                                                       double positive_fraction,
                                                       int64_t negative_label, bool fill_positives,
                                                       c10::optional<int64_t> seed,
                                                       c10::optional<at::Generator> generator) {
  constexpr const char* op = "balanced_sample";
  core::BalancedParams params =
      check_balanced_sample_args(op, labels, num_samples, positive_fraction, negative_label,
                                 fill_positives, seed, generator);
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  const ThreadSplit split = sample_split(rows, n, num_samples, labels.element_size());
  const std::optional<Workspace> workspace = make_workspace(op, labels, num_samples, split);
  draw_seed(op, seed, generator, &params);
  if (rows == 0 || num_samples == 0) return {indices, valid};
  if (n == 0) {
    indices.fill_(-1);
    valid.fill_(false);
    return {indices, valid};
  }
  int64_t* out_indices = indices.data_ptr<int64_t>();
  bool* out_valid = valid.data_ptr<bool>();
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "balanced_sample_cpu", [&] {
    sample_rows(labels, static_cast<const scalar_t*>(labels.data_ptr()), params, split,
                *workspace, rows, n, out_indices, out_valid,
                [](int64_t, const core::PositiveBits&) { return core::NoGather(); });
  });
  return {indices, valid};
}

// balanced_sample_gather in one pass: each batch of slots is sampled, then
// its feature rows and labels gathered (FusedGather) while its indices are
// in the cache, the rows prefetched while the next batch is sampled. The
// same indices as balanced_sample, the same gather as gather_sampled, bit
// for bit; the indices are returned for the backward.
SampleGatherOutputs balanced_sample_gather_cpu(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  constexpr const char* op = "balanced_sample_gather";
  core::BalancedParams params =
      check_balanced_sample_gather_args(features, labels, num_samples, positive_fraction,
                                        negative_label, fill_positives, seed, generator);
  FusedCall call(op, features, labels, num_samples);
  const ThreadSplit split =
      sample_gather_split(call.rows, call.n, call.k, labels.element_size(), call.row_bytes,
                          core::vector_compaction(labels.stride(-1)));
  const std::optional<Workspace> workspace = make_workspace(op, labels, num_samples, split);
  draw_seed(op, seed, generator, &params);
  if (!call.has_slots()) return call.take();
  if (!call.gathers()) return call.take_all_invalid();  // no labels to sample
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "balanced_sample_gather_cpu", [&] {
    const scalar_t* data = static_cast<const scalar_t*>(labels.data_ptr());
    with_row_copy(call.row_bytes, [&](auto copy) {
      const FusedGather<scalar_t, decltype(copy)> gather(copy, call, labels,
                                                          params.negative_label);
      sample_rows(labels, data, params, split, *workspace, call.rows, call.n, call.indices(),
                  call.valid(),
                  [&](int64_t r, const core::PositiveBits& fold) {
                    return gather.row(r, fold);
                  });
    });
  });
  return call.take();
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cpu));
  m.impl("_balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_cpu));
}
