// CUDA backend of syncfree::stratified_sample: the torch adapter around the
// framework-free launcher (stratified_sampler.h). Device guard, current
// stream, workspace from the caching allocator (sized from shapes only),
// graph-safe Philox state from the CUDA generator under its mutex (drawn
// only once every check has passed and everything is allocated), launch
// checks. The public gather_sampled needs no kernel here: it calls
// _gather_sampled, whose CUDA kernel is registered by balanced_sample_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <mutex>

#include "cuda/adapter.h"
#include "cuda/stratified_sampler.h"
#include "ops/balanced_sample.h"
#include "ops/stratified_sample.h"

namespace syncfree {
namespace ops {

namespace {

// Every check and allocation comes before the draw from the generator, so
// a rejected call leaves the generator as it was.
std::tuple<at::Tensor, at::Tensor> stratified_sample_cuda(const at::Tensor& labels,
                                                          int64_t num_samples,
                                                          const at::Tensor& class_quota,
                                                          bool fill, c10::optional<int64_t> seed,
                                                          c10::optional<at::Generator> generator) {
  check_stratified_args(labels, num_samples, class_quota, seed, generator);
  const c10::cuda::CUDAGuard guard(labels.device());
  at::CUDAGeneratorImpl* const gen =
      seed.has_value() ? nullptr : call_generator(generator, labels.device());
  const bool explicit_generator = generator.has_value() && generator->defined();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  const int64_t num_classes = class_quota.size(-1);
  const bool empty = rows == 0 || num_samples == 0;
  TORCH_CHECK(empty || cuda::stratified_shape_supported(rows, n, num_classes),
              "syncfree.stratified_sample: labels or class_quota too large for the CUDA backend: "
              "expected at most 2147483647 rows, fewer than 2147483647 classes, at most "
              "2147483647 blocks of counting (rows * ceil(N / 4096)) and a workspace below 2^62 bytes, got ",
              rows, " rows of N = ", n, " labels (shape ", labels.sizes(), ") and C = ",
              num_classes, " classes");

  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(labels, num_samples);
  if (empty) {  // nothing to launch; the generator advances as for any call
    (void)draw_random("stratified_sample", seed, gen, explicit_generator, stream);
    return {indices, valid};
  }

  // Strided labels and quotas are made contiguous (one copy each); the
  // kernels read labels [rows, n] and quotas [C] or [rows, C].
  const at::Tensor flat = labels.reshape({rows, n}).contiguous();
  const at::Tensor quota = class_quota.contiguous();
  cuda::StratifiedArgs args;
  args.labels = flat.data_ptr();
  args.label_type = label_type(labels.scalar_type());
  args.rows = rows;
  args.n = n;
  args.quota = quota.data_ptr<int64_t>();
  args.quota_row_stride = quota.dim() == 1 ? 0 : num_classes;
  args.params.num_samples = num_samples;
  args.params.num_classes = num_classes;
  args.params.fill = fill;
  args.indices = indices.data_ptr<int64_t>();
  args.valid = valid.data_ptr<bool>();
  const size_t workspace_bytes = cuda::stratified_workspace_bytes(args);
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(workspace_bytes)}, labels.options().dtype(at::kByte));
  args.workspace = workspace.data_ptr();
  args.random = draw_random("stratified_sample", seed, gen, explicit_generator, stream);
  const cudaError_t err = cuda::launch_stratified_sample(args, stream);
  TORCH_CHECK(err == cudaSuccess, "syncfree.stratified_sample: CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {indices, valid};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_cuda));
}
