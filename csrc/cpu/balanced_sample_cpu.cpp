// CPU backend of syncfree::balanced_sample: the torch adapter around the
// framework-free core. Three parallel phases over a uint16 workspace of one
// entry per label (core/label_compaction.h):
//   1. compact every (row, chunk) pair, recording per-chunk class counts;
//   2. turn each row's counts into prefix sums;
//   3. fill every (row, block of slots) pair from the row's plan.
// A phase with little work runs on the calling thread (see parallel_grain);
// every unit writes its own part of the outputs, so the results do not depend
// on how the units are split over threads.
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
#include "cpu/common.h"
#include "ops/balanced_sample.h"
#include "ops/common.h"

namespace syncfree {
namespace ops {

namespace {

constexpr int64_t kSlotBlock = 4096;

// Work per unit of each phase (units: see cpu/common.h).
constexpr int64_t kChunkWork = 64;      // a (row, chunk) unit, besides its labels
constexpr int64_t kRowPlanWork = 256;   // a (row, block) unit's plan and small tables
constexpr int64_t kSlotWork = 12;       // one slot: the permutations and the lookup

// Workspaces up to this size reuse a buffer of the calling thread.
constexpr size_t kScratchBytes = size_t{1} << 18;

// Workspace of one call: the compacted rows (2 bytes per label), then each
// class's per-row prefix sums. A small one lives in a buffer kept by the
// calling thread (no allocation per call; a call never re-enters itself on
// its thread); a larger one is allocated and freed when the call returns.
class Workspace {
 public:
  Workspace(const at::Tensor& labels, int64_t rows, int64_t n, int64_t prefix_len) {
    const size_t work_bytes = (static_cast<size_t>(rows * n) * 2 + 7) / 8 * 8;
    const size_t bytes = work_bytes + 2 * static_cast<size_t>(rows * prefix_len) * 8;
    char* base;
    if (bytes <= kScratchBytes) {
      thread_local std::unique_ptr<int64_t[]> scratch(new int64_t[kScratchBytes / 8]);
      base = reinterpret_cast<char*>(scratch.get());
    } else {
      owned_ = allocate_workspace(
          "balanced_sample", [&] { return shape_subject("labels", labels); }, bytes, labels);
      base = static_cast<char*>(owned_.data_ptr());
    }
    work = reinterpret_cast<uint16_t*>(base);
    pos_prefix = reinterpret_cast<int64_t*>(base + work_bytes);
    neg_prefix = pos_prefix + rows * prefix_len;
  }
  uint16_t* work;
  int64_t* pos_prefix;
  int64_t* neg_prefix;

 private:
  at::Tensor owned_;
};

// Every check and allocation comes before the draw from the generator, so
// a rejected call leaves the generator as it was.
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
  // Outputs and workspace first: a call that fails (out of memory) must not
  // have drawn from the generator. Every call draws the same amount.
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  const int64_t k = num_samples;
  const int64_t chunks = core::num_chunks(n);
  const int64_t prefix_len = chunks + 1;
  std::optional<Workspace> workspace;
  if (rows > 0 && k > 0 && n > 0) workspace.emplace(labels, rows, n, prefix_len);
  draw_seed(op, seed, generator, &params);
  if (rows == 0 || k == 0) return {indices, valid};
  if (n == 0) {
    indices.fill_(-1);
    valid.fill_(false);
    return {indices, valid};
  }

  const Workspace& ws = *workspace;
  uint16_t* work = ws.work;
  int64_t* pos_prefix = ws.pos_prefix;
  int64_t* neg_prefix = ws.neg_prefix;
  const int64_t stride = labels.stride(-1);
  const SlotBlocks slots = slot_blocks(rows, k, kSlotBlock);
  const int64_t blocks = slots.count;
  const int64_t compact_grain = parallel_grain(std::min(n, core::kChunk) + kChunkWork);
  const int64_t prefix_grain = parallel_grain(2 * prefix_len);
  const int64_t slot_grain = parallel_grain(kRowPlanWork + kSlotWork * slots.size);

  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "balanced_sample_cpu", [&] {
    const scalar_t* data = static_cast<const scalar_t*>(labels.data_ptr());
    at::parallel_for(0, rows * chunks, compact_grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t r = u / chunks;
        const int64_t c = u % chunks;
        const int64_t start = c * core::kChunk;
        const int64_t len = std::min(core::kChunk, n - start);
        core::compact_chunk_host(data + row_offset(labels, r) + start * stride, stride, len,
                            negative_label, work + r * n + start,
                            &pos_prefix[r * prefix_len + c + 1],
                            &neg_prefix[r * prefix_len + c + 1]);
      }
    });
  });

  at::parallel_for(0, rows, prefix_grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      core::counts_to_prefix(pos_prefix + r * prefix_len, chunks);
      core::counts_to_prefix(neg_prefix + r * prefix_len, chunks);
    }
  });

  int64_t* out_indices = indices.data_ptr<int64_t>();
  bool* out_valid = valid.data_ptr<bool>();
  at::parallel_for(0, rows * blocks, slot_grain, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t r = u / blocks;
      const int64_t b = u % blocks;
      const core::CompactRow row{work + r * n, pos_prefix + r * prefix_len,
                                 neg_prefix + r * prefix_len, n, chunks};
      const core::RowPlan plan =
          core::make_row_plan(params, r, row.num_positive(), row.num_negative());
      core::fill_row_slots(plan, row, slots.begin(k, b), slots.end(k, b), out_indices + r * k,
                           out_valid + r * k);
    }
  });
  return {indices, valid};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cpu));
}
