// Framework-free CUDA launcher of the gather of a sample (gather_sampled):
// plain pointers, a plain argument struct and a stream; no torch header. The
// torch adapter (gather_sampled_cuda.cpp) and the standalone CUDA tests both
// call it. One launch: each thread copies one aligned unit of one slot's
// features, the slot's first unit also its label.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common.h"

namespace syncfree {
namespace cuda {

// Features and labels of the gather, and the slots chosen by the sampler.
// Strides are in bytes for features and in elements for labels; the F
// features of one item are contiguous (item_bytes bytes).
struct GatherArgs {
  const void* features = nullptr;
  int64_t feature_row_stride = 0;   // bytes from row r to row r + 1
  int64_t feature_item_stride = 0;  // bytes from item i to item i + 1
  int64_t item_bytes = 0;           // bytes of one item's features
  const void* labels = nullptr;
  LabelType label_type = LabelType::kInt64;
  int64_t label_row_stride = 0;
  int64_t label_item_stride = 0;
  const int64_t* indices = nullptr;  // [rows, k], contiguous
  const bool* valid = nullptr;       // [rows, k], contiguous
  int64_t rows = 0, n = 0, k = 0;
  void* out_features = nullptr;  // [rows, k] items of item_bytes, contiguous
  int64_t* out_labels = nullptr;  // [rows, k]
};

// Enqueues the gather (one launch): slot s of row r gets item indices[r, s]'s
// features and label (as int64) when valid[r, s], zero features and label -1
// otherwise. A valid slot whose index is outside [0, n) is treated as invalid
// (never read out of bounds; the sampler never produces one).
cudaError_t launch_gather_sampled(const GatherArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
