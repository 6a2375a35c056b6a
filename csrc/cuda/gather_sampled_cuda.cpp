// CUDA backend of the gather of a sample (_gather_sampled, below the public
// gather_sampled): the torch adapter around the framework-free launcher
// (gather_sampled_kernels.h), one launch. Features are viewed as
// [rows, n, width] (copied only when that view needs a copy or the width is
// strided), labels as [rows, n].
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "cuda/adapter.h"
#include "cuda/gather_sampled_kernels.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"

namespace syncfree {
namespace ops {

namespace {

std::tuple<at::Tensor, at::Tensor> gather_sampled_cuda(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
  const c10::cuda::CUDAGuard guard(labels.device());
  const GatherShape g = gather_shape(features, labels, indices);
  const int64_t rows = g.rows, n = g.n, k = g.k, width = g.width;
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) = empty_gather_outputs(features, labels, indices);
  if (rows * k == 0) return {out_features, out_labels};

  at::Tensor src = features.reshape({rows, n, width});
  if (width > 1 && src.stride(2) != 1) src = src.contiguous();
  const at::Tensor lab = labels.reshape({rows, n});
  const at::Tensor idx = indices.contiguous();
  const at::Tensor ok = valid.contiguous();
  const int64_t element = static_cast<int64_t>(features.element_size());
  cuda::GatherArgs args;
  args.features = src.data_ptr();
  args.feature_row_stride = src.stride(0) * element;
  args.feature_item_stride = src.stride(1) * element;
  args.item_bytes = width * element;
  args.labels = lab.data_ptr();
  args.label_type = label_type(labels.scalar_type());
  args.label_row_stride = lab.stride(0);
  args.label_item_stride = lab.stride(1);
  args.indices = idx.data_ptr<int64_t>();
  args.valid = ok.data_ptr<bool>();
  args.rows = rows;
  args.n = n;
  args.k = k;
  args.out_features = out_features.data_ptr();
  args.out_labels = out_labels.data_ptr<int64_t>();
  const cudaError_t err =
      cuda::launch_gather_sampled(args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "syncfree.gather_sampled: CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_features, out_labels};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_cuda));
}
