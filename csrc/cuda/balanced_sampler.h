// Framework-free CUDA launcher of balanced sampling: plain pointers, a plain
// parameter struct and a stream; no torch header. The torch adapter
// (balanced_sample_cuda.cu) and the standalone CUDA tests both call it.
//
// Same algorithm and same bits as the CPU backend (csrc/core). Rows of at
// most kOneLaunchMaxN labels with at most kOneLaunchMaxK slots take one
// launch: a block per row, sized to the row, compacts the row into shared
// memory and builds the row's plan there once, then its threads fill the
// row's slots. Other calls take three: an order-preserving compaction of
// every (row, kCompactChunk-label chunk) into a uint16 workspace, one thread per row
// turning the chunk counts into prefix sums and building the row's plan
// into the workspace, then one thread per output slot evaluating the plan.
// Counts stay on the device; nothing is read back; the workspace size
// depends on the shapes only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/row_plan.h"

namespace syncfree {
namespace cuda {

enum class LabelType { kBool, kUInt8, kInt8, kInt16, kInt32, kInt64 };

// f(T{}) for the C++ type T of a label type: the kernels' dtype dispatch,
// shared by every op's launcher.
template <typename F>
cudaError_t with_label_type(LabelType type, const F& f) {
  switch (type) {
    case LabelType::kBool: return f(bool{});
    case LabelType::kUInt8: return f(uint8_t{});
    case LabelType::kInt8: return f(int8_t{});
    case LabelType::kInt16: return f(int16_t{});
    case LabelType::kInt32: return f(int32_t{});
    case LabelType::kInt64: return f(int64_t{});
  }
  return cudaErrorInvalidValue;
}

// Where (seed, offset) come from. With seed_ptr == nullptr they are the
// values below. Otherwise (inside a CUDA graph capture) the kernels read
// seed = *seed_ptr and offset = *offset_ptr + offset_extra on the device, so
// every replay of the graph draws fresh samples.
struct RandomSource {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const int64_t* seed_ptr = nullptr;
  const int64_t* offset_ptr = nullptr;
  uint64_t offset_extra = 0;
};

#ifdef __CUDACC__
// The call's seed and offset into params (any params struct with seed and
// offset): from the arguments, or (inside a CUDA graph) read on the device.
template <typename Params>
__device__ void set_random(const RandomSource& random, Params* params) {
  if (random.seed_ptr != nullptr) {
    params->seed = static_cast<uint64_t>(*random.seed_ptr);
    params->offset = static_cast<uint64_t>(*random.offset_ptr) + random.offset_extra;
  } else {
    params->seed = random.seed;
    params->offset = random.offset;
  }
}
#endif

// Rows of at most kOneLaunchMaxN labels (their compaction fits in 32 KB of
// shared memory) and at most kOneLaunchMaxK slots (one block of up to 512
// threads fills them) are sampled in one launch, without workspace.
constexpr int64_t kOneLaunchMaxN = 16384;
constexpr int64_t kOneLaunchMaxK = 4096;

// Labels per compaction block on the three-launch path: one block, one round
// of 512 threads x 16 labels, per chunk, so that a single long row spreads
// over many SMs (N = 1e6: 123 blocks). The CPU compacts in chunks of
// core::kChunk; the chunking is internal, the results are the same bits.
constexpr int64_t kCompactChunk = 8192;

struct SampleArgs {
  const void* labels = nullptr;  // [rows, n], contiguous
  LabelType label_type = LabelType::kInt64;
  int64_t rows = 0;
  int64_t n = 0;
  core::SampleParams params;  // num_samples, fraction, negative_label, fill (seed/offset unused)
  RandomSource random;
  int64_t* indices = nullptr;  // [rows, num_samples]
  bool* valid = nullptr;       // [rows, num_samples]
  void* workspace = nullptr;   // workspace_bytes(*this) bytes, 16-byte aligned
  // Take the three-launch path whatever n is (tests and benchmarks compare
  // the two paths; the results are the same).
  bool force_multi_launch = false;
};

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

// Whether the kernels can take `rows` rows of `n` labels (one block per
// chunk: rows * ceil(n / kCompactChunk) blocks at most 2^31 - 1).
bool shape_supported(int64_t rows, int64_t n);

// Bytes of device workspace that launching `args` needs (0 on the one-launch
// path); a function of the shapes only. args.workspace is not read.
size_t workspace_bytes(const SampleArgs& args);

// Enqueues the sampling kernels on `stream`; returns the launch status.
// Requires rows * num_samples and rows * n to fit in int64.
cudaError_t launch_balanced_sample(const SampleArgs& args, cudaStream_t stream);

// Enqueues the gather (one launch): slot s of row r gets item indices[r, s]'s
// features and label (as int64) when valid[r, s], zero features and label -1
// otherwise. A valid slot whose index is outside [0, n) is treated as invalid
// (never read out of bounds; the sampler never produces one).
cudaError_t launch_gather(const GatherArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
