// CPU backend of syncfree::balanced_sample: the torch adapter around the
// framework-free core. Three parallel phases over a uint16 workspace of one
// entry per label (core/compact.h):
//   1. compact every (row, chunk) pair, recording per-chunk class counts;
//   2. turn each row's counts into prefix sums;
//   3. fill every (row, block of slots) pair from the row's plan.
// A phase with little work runs on the calling thread (see parallel_grain);
// every unit writes its own part of the outputs, so the results do not depend
// on how the units are split over threads.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstring>
#include <mutex>
#include <optional>
#include <type_traits>

#include "core/compact.h"
#include "core/host_sampler.h"
#include "core/row_plan.h"
#include "cpu/generator.h"
#include "cpu/parallel.h"
#include "ops/balanced_sample.h"

namespace syncfree {
namespace ops {

namespace {

constexpr int64_t kSlotBlock = 4096;

// Work per unit of each phase (units: see cpu/parallel.h).
constexpr int64_t kChunkWork = 64;      // a (row, chunk) unit, besides its labels
constexpr int64_t kRowPlanWork = 256;   // a (row, block) unit's plan and small tables
constexpr int64_t kSlotWork = 12;       // one slot: the permutations and the lookup
constexpr int64_t kGatherSlotWork = 4;  // one gathered slot, besides its bytes / 16

// Workspaces up to this size reuse a buffer of the calling thread.
constexpr size_t kScratchBytes = size_t{1} << 18;

// Workspace of one call: the compacted rows (2 bytes per label), then each
// class's per-row prefix sums. A small one lives in a buffer kept by the
// calling thread (no allocation per call; a call never re-enters itself on
// its thread); a larger one is allocated and freed when the call returns.
class Workspace {
 public:
  Workspace(const at::Tensor& like, int64_t rows, int64_t n, int64_t prefix_len) {
    const size_t work_bytes = (static_cast<size_t>(rows * n) * 2 + 7) / 8 * 8;
    const size_t bytes = work_bytes + 2 * static_cast<size_t>(rows * prefix_len) * 8;
    char* base;
    if (bytes <= kScratchBytes) {
      thread_local std::unique_ptr<int64_t[]> scratch(new int64_t[kScratchBytes / 8]);
      base = reinterpret_cast<char*>(scratch.get());
    } else {
      owned_ = at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
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

// Element offset of row r's first label, for any strides of the leading dims.
int64_t row_offset(const at::Tensor& labels, int64_t r) {
  int64_t offset = 0;
  for (int64_t d = labels.dim() - 2; d >= 0; --d) {
    const int64_t size = labels.size(d);
    offset += (r % size) * labels.stride(d);
    r /= size;
  }
  return offset;
}

// Calls body(copy) with a row-copy function for rows of row_bytes bytes:
// fixed-size (inlined) for the common widths, memcpy otherwise.
template <typename Body>
void copy_rows(int64_t row_bytes, const Body& body) {
  auto fixed = [&](auto width) {
    body([](char* dst, const char* src) { std::memcpy(dst, src, decltype(width)::value); });
  };
  switch (row_bytes) {
    case 4: return fixed(std::integral_constant<size_t, 4>());
    case 8: return fixed(std::integral_constant<size_t, 8>());
    case 16: return fixed(std::integral_constant<size_t, 16>());
    case 32: return fixed(std::integral_constant<size_t, 32>());
    case 64: return fixed(std::integral_constant<size_t, 64>());
    case 128: return fixed(std::integral_constant<size_t, 128>());
    default:
      body([row_bytes](char* dst, const char* src) {
        std::memcpy(dst, src, static_cast<size_t>(row_bytes));
      });
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> balanced_sample_cpu(const at::Tensor& labels,
                                                       int64_t num_samples,
                                                       double positive_fraction,
                                                       int64_t negative_label, bool fill_positives,
                                                       c10::optional<int64_t> seed,
                                                       c10::optional<at::Generator> generator) {
  core::SampleParams params = check_sample_args(labels, num_samples, positive_fraction,
                                                negative_label, fill_positives, seed, generator);
  // Outputs and workspace first: a call that fails (out of memory) must not
  // have drawn from the generator. Every call draws the same amount.
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(labels, num_samples);
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  const int64_t k = num_samples;
  const int64_t chunks = core::num_chunks(n);
  const int64_t prefix_len = chunks + 1;
  std::optional<Workspace> workspace;
  if (rows > 0 && k > 0 && n > 0) workspace.emplace(labels, rows, n, prefix_len);
  draw_seed(seed, generator, &params);
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
  const int64_t blocks = (k + kSlotBlock - 1) / kSlotBlock;
  const int64_t compact_grain = parallel_grain(std::min(n, core::kChunk) + kChunkWork);
  const int64_t prefix_grain = parallel_grain(2 * prefix_len);
  const int64_t slot_grain = parallel_grain(kRowPlanWork + kSlotWork * std::min(k, kSlotBlock));

  AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, labels.scalar_type(), "balanced_sample_cpu", [&] {
    const scalar_t* data = labels.data_ptr<scalar_t>();
    at::parallel_for(0, rows * chunks, compact_grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t r = u / chunks;
        const int64_t c = u % chunks;
        const int64_t start = c * core::kChunk;
        const int64_t len = std::min(core::kChunk, n - start);
        core::compact_chunk(data + row_offset(labels, r) + start * stride, stride, len,
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
      core::fill_row_slots(plan, row, b * kSlotBlock, std::min(k, (b + 1) * kSlotBlock),
                           out_indices + r * k, out_valid + r * k);
    }
  });
  return {indices, valid};
}

// Fused gather: one pass over the slots copies each valid slot's feature row
// and label (any feature dtype: rows are copied as bytes).
std::tuple<at::Tensor, at::Tensor> gather_sampled_cpu(const at::Tensor& features,
                                                      const at::Tensor& labels,
                                                      const at::Tensor& indices,
                                                      const at::Tensor& valid) {
  check_gather_sampled_args(features, labels, indices, valid);
  const GatherShape g = gather_shape(features, labels, indices);
  const int64_t rows = g.rows, n = g.n, k = g.k, width = g.width;
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) = empty_gather_outputs(features, labels, indices);
  if (rows * k == 0) return {out_features, out_labels};

  // Read in place when contiguous (no view to build), else from a contiguous copy.
  const at::Tensor src = features.is_contiguous() ? features : features.contiguous();
  const at::Tensor idx = indices.contiguous();
  const at::Tensor ok = valid.contiguous();
  const int64_t row_bytes = width * static_cast<int64_t>(features.element_size());
  const char* src_ptr = static_cast<const char*>(src.data_ptr());
  char* dst_ptr = static_cast<char*>(out_features.data_ptr());
  const int64_t* idx_ptr = idx.data_ptr<int64_t>();
  const bool* ok_ptr = ok.data_ptr<bool>();
  int64_t* lab_ptr = out_labels.data_ptr<int64_t>();
  const int64_t stride = labels.stride(-1);

  // Units of one row's slots, block at a time: kSlotBlock slots, or fewer for
  // wide feature rows (about kParallelWork / 2 of work each), so that the
  // slots of a few rows still split over threads.
  const int64_t slot_work = kGatherSlotWork + row_bytes / 16;
  const int64_t block = std::clamp<int64_t>(kParallelWork / 2 / slot_work, 1, kSlotBlock);
  const int64_t blocks = (k + block - 1) / block;
  const int64_t grain = parallel_grain(std::min(k, block) * slot_work);
  std::atomic<bool> bad{false};  // a valid slot whose index is outside [0, n)
  std::atomic<int64_t> bad_index{0};
  AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, labels.scalar_type(), "gather_sampled_cpu", [&] {
    const scalar_t* label_data = labels.data_ptr<scalar_t>();
    at::parallel_for(0, rows * blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        const int64_t r = w / blocks;
        const int64_t first = r * k + (w % blocks) * block;
        const int64_t last = r * k + std::min(k, (w % blocks + 1) * block);
        const scalar_t* row_labels = label_data + row_offset(labels, r);
        const char* row_features = src_ptr + r * n * row_bytes;
        copy_rows(row_bytes, [&](auto copy) {
          for (int64_t u = first; u < last; ++u) {
            char* dst = dst_ptr + u * row_bytes;
            const int64_t i = idx_ptr[u];
            if (ok_ptr[u] && i >= 0 && i < n) {
              copy(dst, row_features + i * row_bytes);
              lab_ptr[u] = static_cast<int64_t>(row_labels[i * stride]);
            } else {
              if (ok_ptr[u]) {
                bad_index = i;
                bad = true;
              }
              std::memset(dst, 0, static_cast<size_t>(row_bytes));
              lab_ptr[u] = -1;
            }
          }
        });
      }
    });
  });
  TORCH_CHECK(!bad.load(), "syncfree._gather_sampled: index ", bad_index.load(),
              " of a valid slot is outside [0, ", n, ")");
  return {out_features, out_labels};
}

}  // namespace ops
}  // namespace syncfree
