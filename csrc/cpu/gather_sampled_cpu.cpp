// CPU backend of the gather of a sample (_gather_sampled, below the public
// gather_sampled): one pass over the slots copies each valid slot's feature
// row and label (any feature dtype: rows are copied as bytes), with
// gather_slots (cpu/common.h), which the fused samplers share.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>

#include "cpu/common.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"

namespace syncfree {
namespace ops {

namespace {

// Slots per unit of work at most (fewer for wide feature rows, where the
// phase can run in parallel: slot_blocks).
constexpr int64_t kGatherSlotBlock = 4096;

std::tuple<at::Tensor, at::Tensor> gather_sampled_cpu(const at::Tensor& features,
                                                      const at::Tensor& labels,
                                                      const at::Tensor& indices,
                                                      const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
  const GatherShape g = gather_shape(features, labels, indices);
  const int64_t rows = g.rows, n = g.n, k = g.k, width = g.width;
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) =
      empty_gather_outputs("gather_sampled", features, labels, indices);
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

  // Units of one row's slots, block at a time: kGatherSlotBlock slots, or,
  // where the phase can run in parallel, fewer for wide feature rows (about
  // kParallelWork / 2 of work each: slot_blocks), so that the slots of a few
  // rows still split over threads.
  const int64_t slot_work = kGatherSlotWork + row_bytes / 16;
  const SlotBlocks slots = slot_blocks(rows, k, slot_work, kGatherSlotBlock);
  const int64_t blocks = slots.count;
  const int64_t grain = parallel_grain(std::min(k, slots.size) * slot_work);
  std::atomic<bool> bad{false};  // a valid slot whose index is outside [0, n)
  std::atomic<int64_t> bad_index{0};
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "gather_sampled_cpu", [&] {
    const scalar_t* label_data = static_cast<const scalar_t*>(labels.data_ptr());
    with_row_copy(row_bytes, [&](auto copy) {
      at::parallel_for(0, rows * blocks, grain, [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          const int64_t r = w / blocks;
          const int64_t first = r * k + slots.begin(k, w % blocks);
          const int64_t last = r * k + slots.end(k, w % blocks);
          int64_t index = 0;
          if (!gather_slots(copy, src_ptr + r * n * row_bytes, row_bytes,
                            label_data + row_offset(labels, r), stride, n, idx_ptr + first,
                            ok_ptr + first, last - first, dst_ptr + first * row_bytes,
                            lab_ptr + first, &index)) {
            bad_index = index;
            bad = true;
          }
        }
      });
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
