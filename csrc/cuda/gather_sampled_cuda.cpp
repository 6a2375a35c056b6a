// CUDA backend of the gather of a sample (_gather_sampled, below the public
// gather_sampled): the torch adapter around the framework-free launcher
// (gather_sampled_kernels.h), one launch (DeviceGather, adapter.h, which the
// fused *_gather kernels share). Features are viewed as [rows, n, width]
// (copied only when that view needs a copy or the width is strided), labels
// as [rows, n].
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

DeviceGather::DeviceGather(const at::Tensor& features, const at::Tensor& labels,
                           int64_t num_samples)
    : rows_(num_rows(labels).expect_int()), n_(labels.size(-1)), k_(num_samples) {
  if (rows_ * k_ == 0) return;  // nothing to gather: no view, no copy
  const int64_t width = feature_width(features, labels.dim()).expect_int();
  features_ = features.reshape({rows_, n_, width});
  if (width > 1 && features_.stride(2) != 1) features_ = features_.contiguous();
  labels_ = labels.reshape({rows_, n_});
  element_ = static_cast<int64_t>(features.element_size());
  label_type_ = label_type(labels.scalar_type());
}

void DeviceGather::launch(const char* op, const at::Tensor& indices, const at::Tensor& valid,
                          const at::Tensor& out_features, const at::Tensor& out_labels) const {
  if (rows_ * k_ == 0) return;
  const at::Tensor idx = indices.contiguous();
  const at::Tensor ok = valid.contiguous();
  cuda::GatherArgs args;
  args.features = features_.data_ptr();
  args.feature_row_stride = features_.stride(0) * element_;
  args.feature_item_stride = features_.stride(1) * element_;
  args.item_bytes = features_.size(2) * element_;
  args.labels = labels_.data_ptr();
  args.label_type = label_type_;
  args.label_row_stride = labels_.stride(0);
  args.label_item_stride = labels_.stride(1);
  args.indices = idx.data_ptr<int64_t>();
  args.valid = ok.data_ptr<bool>();
  args.rows = rows_;
  args.n = n_;
  args.k = k_;
  args.out_features = out_features.data_ptr();
  args.out_labels = out_labels.data_ptr<int64_t>();
  const cudaError_t err =
      cuda::launch_gather_sampled(args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "syncfree.", op, ": CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

namespace {

std::tuple<at::Tensor, at::Tensor> gather_sampled_cuda(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
  const c10::cuda::CUDAGuard guard(labels.device());
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) =
      empty_gather_outputs("gather_sampled", features, labels, indices);
  const DeviceGather gather(features, labels, indices.size(-1));
  gather.launch("gather_sampled", indices, valid, out_features, out_labels);
  return {out_features, out_labels};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_cuda));
}
