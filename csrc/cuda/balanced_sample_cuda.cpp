// CUDA backend of syncfree::balanced_sample: the torch adapter around the
// framework-free launcher (balanced_sample_kernels.h). The set-up shared with
// every sampler (SamplerCall, adapter.h): device guard, current stream,
// workspace from the caching allocator (sized from shapes only), graph-safe
// Philox state from the CUDA generator under its mutex (drawn only once
// every check has passed and everything is allocated), launch checks.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "cuda/adapter.h"
#include "cuda/balanced_sample_kernels.h"
#include "ops/balanced_sample.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"

namespace syncfree {
namespace ops {

namespace {

// What balanced_sample and its fused gather share, in SamplerCall's order:
// the shape limits (before any allocation), then, once the call's outputs
// are allocated, launch(): the workspace, the draw, the sampler's launch.
class BalancedCall : public SamplerCall {
 public:
  BalancedCall(const char* op, const at::Tensor& labels, const core::BalancedParams& params,
               const c10::optional<int64_t>& seed, const c10::optional<at::Generator>& generator)
      : SamplerCall(op, labels, seed, generator), params_(params) {
    TORCH_CHECK(empty() || cuda::balanced_sample_shape_supported(rows, n), "syncfree.", op,
                ": labels too large for the CUDA backend: expected at most 2147483647 blocks "
                "of work (rows * ceil(N / 8192), at least one per row), got ",
                rows, " rows of N = ", n, " labels (shape ", labels.sizes(), ")");
  }

  bool empty() const { return rows == 0 || params_.num_samples == 0; }

  // Fills indices and valid; an empty call launches nothing (the generator
  // advances as for any call).
  void launch(const at::Tensor& labels, const at::Tensor& indices, const at::Tensor& valid) const {
    if (empty()) {
      (void)draw();
      return;
    }
    const at::Tensor flat = flat_labels(labels);
    cuda::BalancedSampleArgs args;
    args.labels = flat.data_ptr();
    args.label_type = label_type(labels.scalar_type());
    args.rows = rows;
    args.n = n;
    args.params = params_;
    args.indices = indices.data_ptr<int64_t>();
    args.valid = valid.data_ptr<bool>();
    // None on the one-launch path (shared memory).
    const at::Tensor workspace = this->workspace(labels, cuda::balanced_sample_workspace_bytes(args));
    if (workspace.defined()) args.workspace = workspace.data_ptr();
    args.random = draw();
    check_launch(cuda::launch_balanced_sample(args, stream));
  }

 private:
  core::BalancedParams params_;
};

std::tuple<at::Tensor, at::Tensor> balanced_sample_cuda(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  constexpr const char* op = "balanced_sample";
  const BalancedCall call(op, labels,
                          check_balanced_sample_args(op, labels, num_samples, positive_fraction,
                                                     negative_label, fill_positives, seed,
                                                     generator),
                          seed, generator);
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  call.launch(labels, indices, valid);
  return {indices, valid};
}

// balanced_sample_gather: the sampler's launch, then the gather's on the same
// stream, in one call (no index tensor through the dispatcher). Unverified:
// no GPU has run it yet.
SampleGatherOutputs balanced_sample_gather_cuda(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  constexpr const char* op = "balanced_sample_gather";
  const BalancedCall call(op, labels,
                          check_balanced_sample_gather_args(features, labels, num_samples,
                                                            positive_fraction, negative_label,
                                                            fill_positives, seed, generator),
                          seed, generator);
  SampleGatherOutputs out = empty_sample_gather_outputs(op, features, labels, num_samples);
  const DeviceGather gather(features, labels, num_samples);
  call.launch(labels, std::get<3>(out), std::get<2>(out));
  gather.launch(op, std::get<3>(out), std::get<2>(out), std::get<0>(out), std::get<1>(out));
  return out;
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cuda));
  m.impl("_balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_cuda));
}
