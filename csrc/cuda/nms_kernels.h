// Framework-free CUDA launcher of nms: plain pointers, a plain parameter
// struct and a stream; no torch header. The torch adapter (nms_cuda.cpp) and
// the standalone CUDA tests both call it.
//
// Same rule and same result as the CPU backend (core/nms.h: the IoU, the
// threshold, the rank order; the CPU's core::nms_row is the kernel tests'
// reference). Launches, all on one stream, nothing read back:
//  1. key_kernel: per box, the rank key core::nms_score_key of its score in
//     the compute type (0 for a box that does not take part: valid false or
//     NaN score), and its index.
//  2. cub's radix sort, descending and stable: for one row the device-wide
//     DeviceRadixSort (every SM), for several DeviceSegmentedRadixSort (one
//     segment, one block, per row): the row in rank order (equal keys keep
//     increasing index), boxes that take part first.
//  3. gather_kernel: the sorted boxes' coordinates, areas and ids as
//     structures of arrays in the compute type; the number of candidates of
//     each row.
//  4. mask_kernel: per (row, 64 ranks i, 64 ranks j) tile, 64 threads: bit
//     j of word (i, j / 64) is set when j > i, both are candidates of one
//     id and core::nms_suppresses(i, j) (torchvision's CUDA layout).
//  5. greedy_kernel: one block per row walks the 64-rank words in order:
//     64 threads load the word's own mask words into shared memory, one
//     thread decides the word's ranks (kept unless a bit of `removed` says
//     otherwise; a kept rank's own word then joins `removed`), the
//     block ORs the kept ranks' later words into `removed`, and stops after
//     max_output kept boxes; then it writes the row's static output.
// The workspace depends on the shapes only: O(N * ceil(N / 64)) bits of
// mask per row (rows * N * ceil(N / 64) * 8 bytes: 100 MB for 8 rows of
// 10,000 boxes), at most kNmsMaxMaskBytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace syncfree {
namespace cuda {

// The boxes' (and scores') dtype. float16 and bfloat16 are computed in
// float, as float32; float64 in double.
enum class NmsType { kFloat16, kBFloat16, kFloat32, kFloat64 };

struct NmsArgs {
  const void* boxes = nullptr;    // [rows, n, 4], contiguous, `type`
  const void* scores = nullptr;   // [rows, n], contiguous, `type`
  const int64_t* idxs = nullptr;  // [rows, n] contiguous, or null (one id)
  const bool* valid = nullptr;    // [rows, n] contiguous, or null (all take part)
  NmsType type = NmsType::kFloat32;
  int64_t rows = 0;
  int64_t n = 0;
  int64_t max_output = 0;
  double iou_threshold = 0.5;  // not NaN
  int64_t* indices = nullptr;  // [rows, max_output]
  bool* out_valid = nullptr;   // [rows, max_output]
  void* workspace = nullptr;   // nms_workspace_bytes(*this) bytes, 256-byte aligned
};

// Whether the kernels can take `rows` rows of `n` boxes: rows * n < 2^31
// (the sort's item count), and a workspace below 2^62 bytes.
bool nms_shape_supported(int64_t rows, int64_t n);

// The suppression mask's size limit: rows * N * ceil(N / 64) * 8 bytes (about
// rows * N^2 / 8) at most 2^36 (64 GiB) per call; a larger call is refused
// before any allocation (with many ids, lay them out as a leading dimension:
// one row per id, N^2 / 8 bytes each).
constexpr double kNmsMaxMaskBytes = 68719476736.0;

// The mask's bytes for `rows` rows of `n` boxes (a double: no overflow).
double nms_mask_bytes(int64_t rows, int64_t n);

// Bytes of device workspace that launching `args` needs: a function of the
// shapes and dtypes only (rows, n, type, whether idxs is given). Host only;
// nothing is read from args' pointers. Requires nms_shape_supported.
size_t nms_workspace_bytes(const NmsArgs& args);

// Enqueues the kernels on `stream`; returns the first failing status.
// Requires nms_shape_supported, rows > 0 and max_output > 0.
cudaError_t launch_nms(const NmsArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
