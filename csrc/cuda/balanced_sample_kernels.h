// Framework-free CUDA launcher of balanced sampling: plain pointers, a plain
// parameter struct and a stream; no torch header. The torch adapter
// (balanced_sample_cuda.cpp) and the standalone CUDA tests both call it.
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
#include "cuda/common.h"

namespace syncfree {
namespace cuda {

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

struct BalancedSampleArgs {
  const void* labels = nullptr;  // [rows, n], contiguous
  LabelType label_type = LabelType::kInt64;
  int64_t rows = 0;
  int64_t n = 0;
  core::BalancedParams params;  // num_samples, fraction, negative_label, fill (seed/offset unused)
  RandomSource random;
  int64_t* indices = nullptr;  // [rows, num_samples]
  bool* valid = nullptr;       // [rows, num_samples]
  void* workspace = nullptr;   // balanced_sample_workspace_bytes(*this) bytes, 16-byte aligned
  // Take the three-launch path whatever n is (tests and benchmarks compare
  // the two paths; the results are the same).
  bool force_multi_launch = false;
};

// Whether the kernels can take `rows` rows of `n` labels (one block per
// chunk: rows * ceil(n / kCompactChunk) blocks at most 2^31 - 1).
bool balanced_sample_shape_supported(int64_t rows, int64_t n);

// Bytes of device workspace that launching `args` needs (0 on the one-launch
// path); a function of the shapes only. args.workspace is not read.
size_t balanced_sample_workspace_bytes(const BalancedSampleArgs& args);

// Enqueues the sampling kernels on `stream`; returns the launch status.
// Requires rows * num_samples and rows * n to fit in int64.
cudaError_t launch_balanced_sample(const BalancedSampleArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
