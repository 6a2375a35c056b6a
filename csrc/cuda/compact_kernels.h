// Framework-free CUDA launcher of compact: plain pointers, a plain parameter
// struct and a stream; no torch header. The torch adapter (compact_cuda.cpp)
// and the standalone CUDA tests both call it.
//
// The rule is core/compact.h's, the results the CPU's. Rows of at most
// kCompactOneLaunchMaxN elements take one launch: a block per row walks the
// row in rounds, ranks each true element with warp ballots and a scan over
// the block's warps, writes the positions of rank < K straight into the
// outputs, then fills the slots past the row's count. Longer rows take four
// launches, so that one long row spreads over many SMs: every (row, chunk of
// kCompactChunkN elements) counted by a block; one warp per row turning the
// chunk counts into prefix sums (and the row's count); every (row, chunk)
// whose prefix is below K written by a block at that offset; one thread per
// slot finishing the slots. Counts stay on the device; nothing is read back;
// the workspace size depends on the shapes only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common.h"  // LabelType, with_label_type: the mask dtypes

namespace syncfree {
namespace cuda {

// Rows up to this length take the one-launch path.
constexpr int64_t kCompactOneLaunchMaxN = 16384;

// Elements per block on the four-launch path (N = 1e6: 123 blocks per row).
constexpr int64_t kCompactChunkN = 8192;

struct CompactArgs {
  const void* mask = nullptr;  // element (r, i) at mask[r * row_stride + i * item_stride]
  LabelType mask_type = LabelType::kBool;
  int64_t row_stride = 0;   // elements
  int64_t item_stride = 1;  // elements
  int64_t rows = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t* indices = nullptr;  // [rows, k], contiguous
  bool* valid = nullptr;       // [rows, k], contiguous
  int64_t* count = nullptr;    // [rows]
  void* workspace = nullptr;   // compact_workspace_bytes(*this) bytes, 16-byte aligned
  // Take the four-launch path whatever n is (tests compare the two paths).
  bool force_multi_launch = false;
};

// Whether the kernels can take `rows` rows of `n` elements (at most 2^31 - 1
// blocks of work: rows * ceil(n / kCompactChunkN), at least one per row).
bool compact_shape_supported(int64_t rows, int64_t n);

// Bytes of device workspace that launching `args` needs (0 on the one-launch
// path); a function of the shapes only. args.workspace is not read.
size_t compact_workspace_bytes(const CompactArgs& args);

// Enqueues the kernels on `stream`; returns the launch status. Requires
// rows * k and rows * n to fit in int64.
cudaError_t launch_compact(const CompactArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
