// CPU backend of the gather of a sample (_gather_sampled, below the public
// gather_sampled): one fused pass over the slots copies each valid slot's
// feature row and label (any feature dtype: rows are copied as bytes). Per
// batch of slots, a first pass resolves every slot's source row, a second
// copies the rows and labels: the random loads of many slots are in flight
// at once, as in index_select.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "cpu/common.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"

namespace syncfree {
namespace ops {

namespace {

// Slots per unit of work at most (fewer for wide feature rows).
constexpr int64_t kGatherSlotBlock = 4096;
// Work of one gathered slot (units: see cpu/common.h), besides its bytes / 16.
constexpr int64_t kGatherSlotWork = 4;
// Slots whose sources are resolved before their rows are copied.
constexpr int64_t kGatherBatch = 256;


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

// Fused gather: one pass over the slots copies each valid slot's feature row
// and label (any feature dtype: rows are copied as bytes).
std::tuple<at::Tensor, at::Tensor> gather_sampled_cpu(const at::Tensor& features,
                                                      const at::Tensor& labels,
                                                      const at::Tensor& indices,
                                                      const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
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

  // Units of one row's slots, block at a time: kGatherSlotBlock slots, or fewer for
  // wide feature rows (about kParallelWork / 2 of work each), so that the
  // slots of a few rows still split over threads.
  const int64_t slot_work = kGatherSlotWork + row_bytes / 16;
  const SlotBlocks slots = slot_blocks(
      rows, k, std::clamp<int64_t>(kParallelWork / 2 / slot_work, 1, kGatherSlotBlock));
  const int64_t blocks = slots.count;
  const int64_t grain = parallel_grain(std::min(k, slots.size) * slot_work);
  std::atomic<bool> bad{false};  // a valid slot whose index is outside [0, n)
  std::atomic<int64_t> bad_index{0};
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "gather_sampled_cpu", [&] {
    const scalar_t* label_data = static_cast<const scalar_t*>(labels.data_ptr());
    at::parallel_for(0, rows * blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        const int64_t r = w / blocks;
        const int64_t first = r * k + slots.begin(k, w % blocks);
        const int64_t last = r * k + slots.end(k, w % blocks);
        const scalar_t* row_labels = label_data + row_offset(labels, r);
        const char* row_features = src_ptr + r * n * row_bytes;
        copy_rows(row_bytes, [&](auto copy) {
          int64_t source[kGatherBatch];  // a batch's feature rows; -1: an invalid slot
          for (int64_t b0 = first; b0 < last; b0 += kGatherBatch) {
            const int64_t m = std::min(kGatherBatch, last - b0);
            // Pass 1 (branch-free, vectorized): each slot's source row, and
            // whether a valid slot points outside [0, n).
            bool out_of_range = false;
            for (int64_t j = 0; j < m; ++j) {
              const int64_t i = idx_ptr[b0 + j];
              const bool ok = ok_ptr[b0 + j];
              const bool in_range = static_cast<uint64_t>(i) < static_cast<uint64_t>(n);
              source[j] = ok && in_range ? i : -1;
              out_of_range |= ok && !in_range;
            }
            if (out_of_range) {
              for (int64_t j = 0; j < m; ++j) {
                const int64_t i = idx_ptr[b0 + j];
                if (ok_ptr[b0 + j] && static_cast<uint64_t>(i) >= static_cast<uint64_t>(n)) {
                  bad_index = i;
                  bad = true;
                }
              }
            }
            // Pass 2: the copies, whose loads depend on no earlier slot's.
            // (Software prefetch of the rows a few slots ahead measured no
            // gain here: the out-of-order core already keeps the misses of
            // many slots in flight.)
            for (int64_t j = 0; j < m; ++j) {
              const int64_t u = b0 + j;
              char* dst = dst_ptr + u * row_bytes;
              const int64_t i = source[j];
              if (i >= 0) {
                copy(dst, row_features + i * row_bytes);
                lab_ptr[u] = static_cast<int64_t>(row_labels[i * stride]);
              } else {
                std::memset(dst, 0, static_cast<size_t>(row_bytes));
                lab_ptr[u] = -1;
              }
            }
          }
        });
      }
    });
  });
  TORCH_CHECK(!bad.load(), "syncfree.gather_sampled: index ", bad_index.load(),
              " of a valid slot is outside [0, ", n, ")");
  return {out_features, out_labels};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_cpu));
}
