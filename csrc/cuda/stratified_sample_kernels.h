// Framework-free CUDA launcher of stratified sampling: plain pointers, a
// plain parameter struct and a stream; no torch header. The torch adapter
// (stratified_sample_cuda.cpp) and the standalone CUDA tests both call it.
//
// Same rule and same bits as the CPU backend (core/stratified.h): the row
// plan is core::make_stratified_plan and each slot is
// core::pick_stratified_slot. Four launches, after zeroing the class
// counts:
//  1. count_kernel: per (row, tile of labels) block, a class histogram (in
//     shared memory for up to kSharedCountClasses classes, else straight
//     global atomics) added to the row's counts [rows, C].
//  2. plan_kernel: one block per row; one thread builds the row's plan (from
//     shared copies of the counts and quotas when C <= kSharedPlanClasses),
//     the block writes the take and leftover prefix sums [rows, C + 1] and
//     turns the counts into each class's first position in the class-sorted
//     row (its running cursor for step 3).
//  3. sort_kernel: one block per row with a valid slot, the row's labels in
//     tiles of kSortTile, in order: a stable block radix sort of each tile
//     by class, then each element goes to its class's cursor plus its rank
//     among the tile's elements of that class, and the cursors advance. The
//     result is the row sorted by class, index order within a class: the
//     CPU's counting sort.
//  4. slots_kernel: one thread per output slot evaluates
//     pick_stratified_slot and reads the index from the sorted row.
// Counts stay on the device; nothing is read back; the workspace size
// depends on the shapes only: O(N + C) per row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/stratified.h"
#include "cuda/common.h"  // LabelType, RandomSource

namespace syncfree {
namespace cuda {

// Classes whose per-block histogram lives in shared memory (count_kernel),
// and whose counts, quotas and prefix sums the plan kernel copies to shared
// memory before its serial pass (32 (C + 1) bytes: 32 KB).
constexpr int64_t kSharedCountClasses = 8192;
constexpr int64_t kSharedPlanClasses = 1023;
// Labels per tile of the sort kernel (256 threads x 8).
constexpr int64_t kSortTile = 2048;

struct StratifiedArgs {
  const void* labels = nullptr;  // [rows, n], contiguous
  LabelType label_type = LabelType::kInt64;
  int64_t rows = 0;
  int64_t n = 0;
  const int64_t* quota = nullptr;  // [C] (quota_row_stride 0) or [rows, C] (stride C)
  int64_t quota_row_stride = 0;
  core::StratifiedParams params;  // num_samples, num_classes, fill (seed/offset unused)
  RandomSource random;
  int64_t* indices = nullptr;  // [rows, num_samples]
  bool* valid = nullptr;       // [rows, num_samples]
  void* workspace = nullptr;   // stratified_workspace_bytes(*this) bytes, 16-byte aligned
};

// Whether the kernels can take `rows` rows of `n` labels and `num_classes`
// classes: one block per row (rows < 2^31), per (row, count tile) at most
// 2^31 - 1 blocks, C < 2^31 - 1 (classes are sorted as 32-bit keys), and a
// workspace whose size fits in int64.
bool stratified_shape_supported(int64_t rows, int64_t n, int64_t num_classes);

// Bytes of device workspace that launching `args` needs; a function of the
// shapes only (rows, n, num_classes). args.workspace is not read.
size_t stratified_workspace_bytes(const StratifiedArgs& args);

// Enqueues the sampling kernels on `stream` (a memset and four launches);
// returns the first failing status. Requires stratified_shape_supported.
cudaError_t launch_stratified_sample(const StratifiedArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
