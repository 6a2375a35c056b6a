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
#include "ops/stratified_sample.h"

namespace syncfree {
namespace ops {

namespace {

std::tuple<at::Tensor, at::Tensor> stratified_sample_cuda(const at::Tensor& labels,
                                                          int64_t num_samples,
                                                          const at::Tensor& class_quota,
                                                          bool fill, c10::optional<int64_t> seed,
                                                          c10::optional<at::Generator> generator) {
  constexpr const char* op = "stratified_sample";
  check_stratified_sample_args(op, labels, num_samples, class_quota, seed, generator);
  const SamplerCall call(op, labels, seed, generator);
  const int64_t num_classes = class_quota.size(-1);
  const bool empty = call.rows == 0 || num_samples == 0;
  TORCH_CHECK(empty || cuda::stratified_shape_supported(call.rows, call.n, num_classes),
              "syncfree.stratified_sample: labels or class_quota too large for the CUDA backend: "
              "expected at most 2147483647 rows, fewer than 2147483647 classes, at most "
              "2147483647 blocks of counting (rows * ceil(N / 4096)) and a workspace below 2^62 bytes, got ",
              call.rows, " rows of N = ", call.n, " labels (shape ", labels.sizes(), ") and C = ",
              num_classes, " classes");

  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  if (empty) {  // nothing to launch; the generator advances as for any call
    (void)call.draw();
    return {indices, valid};
  }

  // Strided quotas are made contiguous (one copy); the kernels read quotas
  // [C] or [rows, C].
  const at::Tensor flat = call.flat_labels(labels);
  const at::Tensor quota = class_quota.contiguous();
  cuda::StratifiedArgs args;
  args.labels = flat.data_ptr();
  args.label_type = label_type(labels.scalar_type());
  args.rows = call.rows;
  args.n = call.n;
  args.quota = quota.data_ptr<int64_t>();
  args.quota_row_stride = quota.dim() == 1 ? 0 : num_classes;
  args.params.num_samples = num_samples;
  args.params.num_classes = num_classes;
  args.params.fill = fill;
  args.indices = indices.data_ptr<int64_t>();
  args.valid = valid.data_ptr<bool>();
  const at::Tensor workspace = call.workspace(labels, cuda::stratified_workspace_bytes(args));
  if (workspace.defined()) args.workspace = workspace.data_ptr();
  args.random = call.draw();
  call.check_launch(cuda::launch_stratified_sample(args, call.stream));
  return {indices, valid};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_cuda));
}
