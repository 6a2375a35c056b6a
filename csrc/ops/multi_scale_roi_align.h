// Internal declarations of multi_scale_roi_align shared by the operator
// registration (ops/multi_scale_roi_align.cpp) and the backends
// (cpu/multi_scale_roi_align_cpu.cpp, cuda/multi_scale_roi_align_cuda.cpp).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <vector>

namespace syncfree {
namespace ops {

// The most levels a call takes (the CUDA kernels pass one pointer per level
// by value).
constexpr int64_t kMaxRoiLevels = 16;
// The most samples per box: output_size[0] * output_size[1] * sampling_ratio^2.
constexpr int64_t kMaxRoiSamples = int64_t(1) << 20;

// The one set of argument checks of multi_scale_roi_align, run by every
// backend and by the Meta kernel, with `op` the public op called: features
// a list of 1..kMaxRoiLevels tensors [B, C, H_l, W_l] of one floating dtype
// and device; boxes [B, K, 4], floating, on the features' device;
// output_size two sizes >= 1; one finite positive scale per level;
// sampling_ratio >= 1; valid (if given) bool [B, K]. Values are data and are
// not checked (a check would synchronize with the device).
void check_roi_align_args(const char* op, at::TensorList features, const at::Tensor& boxes,
                          at::IntArrayRef output_size, at::ArrayRef<double> spatial_scales,
                          int64_t sampling_ratio, const c10::optional<at::Tensor>& valid);

// levels: int64 [B * K], each box's level index in [0, L), or -1 for a box
// that is not pooled (checked by the internal ops: shape and dtype).
void check_roi_levels(const char* op, const at::Tensor& boxes, const at::Tensor& levels);

// The backward's arguments, checked by every backend's kernel: levels as
// above, feature_sizes [B, C, (H, W) per level], grad of the output's shape
// [B * K, C, h, w].
void check_roi_backward_args(const char* op, const at::Tensor& grad, const at::Tensor& boxes,
                             const at::Tensor& levels, c10::SymIntArrayRef feature_sizes,
                             at::IntArrayRef output_size, at::ArrayRef<double> spatial_scales);

// The output [B * K, C, h, w], uninitialized (sizes may be symbolic).
at::Tensor empty_roi_align_output(const char* op, at::TensorList features,
                                  const at::Tensor& boxes, at::IntArrayRef output_size);

// Per level, the gradient of the features [B, C, H_l, W_l] from
// feature_sizes = [B, C, H_0, W_0, H_1, W_1, ...], zero-filled, `options`'
// dtype and device.
std::vector<at::Tensor> zero_roi_align_grads(const char* op, c10::SymIntArrayRef feature_sizes,
                                             const at::TensorOptions& options);

// The backends' kernels (below autograd).
at::Tensor multi_scale_roi_align_cpu(at::TensorList features, const at::Tensor& boxes,
                                     const at::Tensor& levels, at::IntArrayRef output_size,
                                     at::ArrayRef<double> spatial_scales, int64_t sampling_ratio,
                                     bool aligned);
std::vector<at::Tensor> multi_scale_roi_align_backward_cpu(
    const at::Tensor& grad, const at::Tensor& boxes, const at::Tensor& levels,
    c10::SymIntArrayRef feature_sizes, at::IntArrayRef output_size,
    at::ArrayRef<double> spatial_scales, int64_t sampling_ratio, bool aligned);

}  // namespace ops
}  // namespace syncfree
