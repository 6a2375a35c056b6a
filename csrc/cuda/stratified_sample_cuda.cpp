// CUDA backend of syncfree::stratified_sample: the torch adapter around the
// framework-free launcher (stratified_sample_kernels.h), with the set-up
// shared with every sampler (SamplerCall, adapter.h): device guard, current
// stream, workspace from the caching allocator (sized from shapes only),
// graph-safe Philox state from the CUDA generator under its mutex (drawn
// only once every check has passed and everything is allocated), launch
// checks.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "cuda/adapter.h"
#include "cuda/stratified_sample_kernels.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"
#include "ops/stratified_sample.h"

namespace syncfree {
namespace ops {

namespace {

// What stratified_sample and its fused gather share, in SamplerCall's order:
// the shape limits (before any allocation), then, once the call's outputs
// are allocated, launch(): the quota copy, the workspace, the draw, the
// sampler's launch.
class StratifiedCall : public SamplerCall {
 public:
  StratifiedCall(const char* op, const at::Tensor& labels, int64_t num_samples,
                 const at::Tensor& class_quota, bool fill, const c10::optional<int64_t>& seed,
                 const c10::optional<at::Generator>& generator)
      : SamplerCall(op, labels, seed, generator),
        num_samples_(num_samples),
        num_classes_(class_quota.size(-1)),
        fill_(fill) {
    TORCH_CHECK(empty() || cuda::stratified_shape_supported(rows, n, num_classes_), "syncfree.",
                op,
                ": labels or class_quota too large for the CUDA backend: expected at most "
                "2147483647 rows, fewer than 2147483647 classes, at most 2147483647 blocks of "
                "counting (rows * ceil(N / 4096)) and a workspace below 2^62 bytes, got ",
                rows, " rows of N = ", n, " labels (shape ", labels.sizes(), ") and C = ",
                num_classes_, " classes");
  }

  bool empty() const { return rows == 0 || num_samples_ == 0; }

  // Fills indices and valid; an empty call launches nothing (the generator
  // advances as for any call). Strided quotas are made contiguous (one
  // copy); the kernels read quotas [C] or [rows, C].
  void launch(const at::Tensor& labels, const at::Tensor& class_quota, const at::Tensor& indices,
              const at::Tensor& valid) const {
    if (empty()) {
      (void)draw();
      return;
    }
    const at::Tensor flat = flat_labels(labels);
    const at::Tensor quota = class_quota.contiguous();
    cuda::StratifiedArgs args;
    args.labels = flat.data_ptr();
    args.label_type = label_type(labels.scalar_type());
    args.rows = rows;
    args.n = n;
    args.quota = quota.data_ptr<int64_t>();
    args.quota_row_stride = quota.dim() == 1 ? 0 : num_classes_;
    args.params.num_samples = num_samples_;
    args.params.num_classes = num_classes_;
    args.params.fill = fill_;
    args.indices = indices.data_ptr<int64_t>();
    args.valid = valid.data_ptr<bool>();
    const at::Tensor workspace = this->workspace(labels, cuda::stratified_workspace_bytes(args));
    if (workspace.defined()) args.workspace = workspace.data_ptr();
    args.random = draw();
    check_launch(cuda::launch_stratified_sample(args, stream));
  }

 private:
  int64_t num_samples_, num_classes_;
  bool fill_;
};

std::tuple<at::Tensor, at::Tensor> stratified_sample_cuda(const at::Tensor& labels,
                                                          int64_t num_samples,
                                                          const at::Tensor& class_quota,
                                                          bool fill, c10::optional<int64_t> seed,
                                                          c10::optional<at::Generator> generator) {
  constexpr const char* op = "stratified_sample";
  check_stratified_sample_args(op, labels, num_samples, class_quota, seed, generator);
  const StratifiedCall call(op, labels, num_samples, class_quota, fill, seed, generator);
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  call.launch(labels, class_quota, indices, valid);
  return {indices, valid};
}

// stratified_sample_gather: the sampler's launch, then the gather's on the
// same stream, in one call (no index tensor through the dispatcher).
// Unverified: no GPU has run it yet.
SampleGatherOutputs stratified_sample_gather_cuda(const at::Tensor& features,
                                                  const at::Tensor& labels, int64_t num_samples,
                                                  const at::Tensor& class_quota, bool fill,
                                                  c10::optional<int64_t> seed,
                                                  c10::optional<at::Generator> generator) {
  constexpr const char* op = "stratified_sample_gather";
  check_stratified_sample_gather_args(features, labels, num_samples, class_quota, seed,
                                      generator);
  const StratifiedCall call(op, labels, num_samples, class_quota, fill, seed, generator);
  SampleGatherOutputs out = empty_sample_gather_outputs(op, features, labels, num_samples);
  const DeviceGather gather(features, labels, num_samples);
  call.launch(labels, class_quota, std::get<3>(out), std::get<2>(out));
  gather.launch(op, std::get<3>(out), std::get<2>(out), std::get<0>(out), std::get<1>(out));
  return out;
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_cuda));
  m.impl("_stratified_sample_gather", TORCH_FN(syncfree::ops::stratified_sample_gather_cuda));
}
