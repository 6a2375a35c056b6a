// CUDA backend of syncfree::multi_scale_roi_align (the internal ops
// _multi_scale_roi_align and its backward): the torch adapter around the
// framework-free launchers (multi_scale_roi_align_kernels.h). Device guard,
// current stream, contiguous inputs, nothing read back: zero host syncs,
// graph-capturable.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "cuda/multi_scale_roi_align_kernels.h"
#include "ops/common.h"
#include "ops/multi_scale_roi_align.h"

namespace syncfree {
namespace ops {

namespace {

constexpr const char* kOp = "multi_scale_roi_align";

static_assert(cuda::kMaxRoiAlignLevels == kMaxRoiLevels, "one level limit for every backend");

cuda::RoiAlignType roi_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return cuda::RoiAlignType::kFloat16;
    case at::kBFloat16: return cuda::RoiAlignType::kBFloat16;
    case at::kDouble: return cuda::RoiAlignType::kFloat64;
    default: break;
  }
  TORCH_CHECK(t == at::kFloat, "syncfree.", kOp, ": unsupported features dtype ", t);
  return cuda::RoiAlignType::kFloat32;
}

at::ScalarType compute_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// The arguments both launchers share; boxes [B * K, 4] in the compute type.
cuda::RoiAlignArgs common_args(const at::Tensor& boxes, const at::Tensor& box_rows,
                               const at::Tensor& levels, int64_t channels,
                               at::IntArrayRef output_size, at::ArrayRef<double> scales,
                               int64_t sampling_ratio, bool aligned, at::ScalarType type) {
  cuda::RoiAlignArgs a;
  a.num_levels = static_cast<int>(scales.size());
  a.type = roi_type(type);
  a.boxes = box_rows.data_ptr();
  a.level = levels.data_ptr<int64_t>();
  a.batch = boxes.size(0);
  a.k = boxes.size(1);
  a.channels = channels;
  a.pooled_h = output_size[0];
  a.pooled_w = output_size[1];
  a.sampling_ratio = static_cast<int>(sampling_ratio);
  a.aligned = aligned;
  for (size_t l = 0; l < scales.size(); ++l) a.levels[l].scale = scales[l];
  return a;
}

at::Tensor box_rows_of(const at::Tensor& boxes, at::ScalarType type) {
  return boxes.reshape({-1, 4}).to(compute_type(type)).contiguous();
}

at::Tensor multi_scale_roi_align_cuda(at::TensorList features, const at::Tensor& boxes,
                                      const at::Tensor& levels, at::IntArrayRef output_size,
                                      at::ArrayRef<double> spatial_scales, int64_t sampling_ratio,
                                      bool aligned) {
  check_roi_align_args(kOp, features, boxes, output_size, spatial_scales, sampling_ratio,
                       c10::nullopt);
  check_roi_levels(kOp, boxes, levels);
  const c10::cuda::CUDAGuard guard(boxes.device());
  at::Tensor out = empty_roi_align_output(kOp, features, boxes, output_size);
  if (out.numel() == 0) return out;
  const at::ScalarType type = features[0].scalar_type();
  const at::Tensor rows = box_rows_of(boxes, type);
  const at::Tensor lv = levels.contiguous();
  cuda::RoiAlignArgs a = common_args(boxes, rows, lv, features[0].size(1), output_size,
                                     spatial_scales, sampling_ratio, aligned, type);
  std::vector<at::Tensor> maps;
  for (size_t l = 0; l < features.size(); ++l) {
    maps.push_back(features[l].contiguous());
    a.levels[l].features = maps.back().data_ptr();
    a.levels[l].height = features[l].size(2);
    a.levels[l].width = features[l].size(3);
  }
  a.out = out.data_ptr();
  const cudaError_t err =
      cuda::launch_roi_align_forward(a, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "syncfree.", kOp, ": CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::vector<at::Tensor> multi_scale_roi_align_backward_cuda(
    const at::Tensor& grad, const at::Tensor& boxes, const at::Tensor& levels,
    c10::SymIntArrayRef feature_sizes, at::IntArrayRef output_size,
    at::ArrayRef<double> spatial_scales, int64_t sampling_ratio, bool aligned) {
  check_roi_backward_args(kOp, grad, boxes, levels, feature_sizes, output_size, spatial_scales);
  const int64_t channels = feature_sizes[1].expect_int();
  // atomicAdd: the order of the additions, hence the last bits, vary from run to run.
  at::globalContext().alertNotDeterministic("syncfree.multi_scale_roi_align backward on CUDA");
  const c10::cuda::CUDAGuard guard(grad.device());
  const at::ScalarType type = grad.scalar_type();
  std::vector<at::Tensor> acc =
      zero_roi_align_grads(kOp, feature_sizes, grad.options().dtype(compute_type(type)));
  if (grad.numel() > 0) {
    const at::Tensor rows = box_rows_of(boxes, type);
    const at::Tensor lv = levels.contiguous();
    const at::Tensor g = grad.contiguous();
    cuda::RoiAlignArgs a = common_args(boxes, rows, lv, channels, output_size, spatial_scales,
                                       sampling_ratio, aligned, type);
    for (size_t l = 0; l < acc.size(); ++l) {
      a.levels[l].grad = acc[l].data_ptr();
      a.levels[l].height = acc[l].size(2);
      a.levels[l].width = acc[l].size(3);
    }
    a.grad_out = g.data_ptr();
    const cudaError_t err =
        cuda::launch_roi_align_backward(a, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "syncfree.", kOp, ": CUDA launch failed: ",
                cudaGetErrorString(err));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (compute_type(type) != type) {
    for (at::Tensor& t : acc) t = t.to(type);
  }
  return acc;
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("_multi_scale_roi_align", TORCH_FN(syncfree::ops::multi_scale_roi_align_cuda));
  m.impl("_multi_scale_roi_align_backward",
         TORCH_FN(syncfree::ops::multi_scale_roi_align_backward_cuda));
}
