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

namespace syncfree {
namespace ops {

namespace {

std::tuple<at::Tensor, at::Tensor> balanced_sample_cuda(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  constexpr const char* op = "balanced_sample";
  const core::BalancedParams params =
      check_balanced_sample_args(op, labels, num_samples, positive_fraction, negative_label,
                                 fill_positives, seed, generator);
  const SamplerCall call(op, labels, seed, generator);
  const bool empty = call.rows == 0 || num_samples == 0;
  TORCH_CHECK(empty || cuda::balanced_sample_shape_supported(call.rows, call.n),
              "syncfree.balanced_sample: labels too large for the CUDA backend: expected at most "
              "2147483647 blocks of work (rows * ceil(N / 8192), at least one per row), got ",
              call.rows, " rows of N = ", call.n, " labels (shape ", labels.sizes(), ")");

  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  if (empty) {  // nothing to launch; the generator advances as for any call
    (void)call.draw();
    return {indices, valid};
  }

  const at::Tensor flat = call.flat_labels(labels);
  cuda::BalancedSampleArgs args;
  args.labels = flat.data_ptr();
  args.label_type = label_type(labels.scalar_type());
  args.rows = call.rows;
  args.n = call.n;
  args.params = params;
  args.indices = indices.data_ptr<int64_t>();
  args.valid = valid.data_ptr<bool>();
  // None on the one-launch path (shared memory).
  const at::Tensor workspace =
      call.workspace(labels, cuda::balanced_sample_workspace_bytes(args));
  if (workspace.defined()) args.workspace = workspace.data_ptr();
  args.random = call.draw();
  call.check_launch(cuda::launch_balanced_sample(args, call.stream));
  return {indices, valid};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cuda));
}
