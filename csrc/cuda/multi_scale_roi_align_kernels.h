// Framework-free CUDA launchers of multi_scale_roi_align: plain pointers, a
// plain parameter struct and a stream; no torch header. The torch adapter
// (multi_scale_roi_align_cuda.cpp) and the standalone CUDA tests call them.
//
// Same rule as the CPU backend (core/roi_align.h), compiled without
// multiply-add contraction (--fmad=false), so that every pooled value is the
// CPU's, bit for bit:
//  - forward: one thread per output element (box, channel, bin) sums its
//    bin's samples in the CPU's order; a box whose level is -1 writes zeros.
//  - backward: one thread per output element adds grad * w / count to the
//    four corners of each sample with atomicAdd in the compute type (float
//    for float16, bfloat16 and float32; double for float64): the sum is the
//    CPU's up to the order of the additions, which atomics do not fix.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace syncfree {
namespace cuda {

constexpr int kMaxRoiAlignLevels = 16;

// The features' dtype; float16 and bfloat16 are computed in float.
enum class RoiAlignType { kFloat16, kBFloat16, kFloat32, kFloat64 };

struct RoiAlignLevel {
  const void* features = nullptr;  // forward: [B, C, H, W] contiguous, `type`
  void* grad = nullptr;            // backward: [B, C, H, W] contiguous, the compute type, zeroed
  int64_t height = 0;
  int64_t width = 0;
  double scale = 1.0;
};

struct RoiAlignArgs {
  RoiAlignLevel levels[kMaxRoiAlignLevels];
  int num_levels = 0;
  RoiAlignType type = RoiAlignType::kFloat32;
  const void* boxes = nullptr;     // [B * K, 4] contiguous, in the compute type
  const int64_t* level = nullptr;  // [B * K]: level index, or -1 (not pooled)
  int64_t batch = 0;
  int64_t k = 0;                   // boxes per image
  int64_t channels = 0;
  int64_t pooled_h = 0;
  int64_t pooled_w = 0;
  int sampling_ratio = 1;
  bool aligned = false;
  void* out = nullptr;             // forward: [B * K, C, pooled_h, pooled_w] contiguous, `type`
  const void* grad_out = nullptr;  // backward: the same shape, contiguous, `type`
};

// Enqueue the forward (writes args.out) or the backward (adds into each
// level's grad) on `stream`; returns the launch status.
cudaError_t launch_roi_align_forward(const RoiAlignArgs& args, cudaStream_t stream);
cudaError_t launch_roi_align_backward(const RoiAlignArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace syncfree
