// CUDA backend of syncfree::balanced_sample and of the gather step: the torch
// adapter around the framework-free launchers (balanced_sampler.h). Device guard,
// current stream, workspace from the caching allocator (sized from shapes
// only), graph-safe Philox state from the CUDA generator under its mutex
// (drawn only once every check has passed), launch checks.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <mutex>

#include "cuda/adapter.h"
#include "cuda/balanced_sampler.h"
#include "ops/balanced_sample.h"

namespace syncfree {
namespace ops {

namespace {

// Every check and allocation comes before the draw from the generator, so
// a rejected call leaves the generator as it was.
std::tuple<at::Tensor, at::Tensor> balanced_sample_cuda(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  core::SampleParams params = check_sample_args(labels, num_samples, positive_fraction,
                                                negative_label, fill_positives, seed, generator);
  const c10::cuda::CUDAGuard guard(labels.device());
  at::CUDAGeneratorImpl* const gen =
      seed.has_value() ? nullptr : call_generator(generator, labels.device());
  const bool explicit_generator = generator.has_value() && generator->defined();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  const bool empty = rows == 0 || num_samples == 0;
  TORCH_CHECK(empty || cuda::shape_supported(rows, n),
              "syncfree.balanced_sample: labels too large for the CUDA backend: expected at most "
              "2147483647 blocks of work (rows * ceil(N / 8192), at least one per row), got ",
              rows, " rows of N = ", n, " labels (shape ", labels.sizes(), ")");

  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(labels, num_samples);
  if (empty) {  // nothing to launch; the generator advances as for any call
    (void)draw_random("balanced_sample", seed, gen, explicit_generator, stream);
    return {indices, valid};
  }

  // Strided labels are made contiguous (one copy); the kernels read [rows, n].
  const at::Tensor flat = labels.reshape({rows, n}).contiguous();
  cuda::SampleArgs args;
  args.labels = flat.data_ptr();
  args.label_type = label_type(labels.scalar_type());
  args.rows = rows;
  args.n = n;
  args.params = params;
  args.indices = indices.data_ptr<int64_t>();
  args.valid = valid.data_ptr<bool>();
  const size_t workspace_bytes = cuda::workspace_bytes(args);
  at::Tensor workspace;  // none on the one-launch path (shared memory)
  if (workspace_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, labels.options().dtype(at::kByte));
    args.workspace = workspace.data_ptr();
  }
  args.random = draw_random("balanced_sample", seed, gen, explicit_generator, stream);
  const cudaError_t err = cuda::launch_balanced_sample(args, stream);
  TORCH_CHECK(err == cudaSuccess, "syncfree.balanced_sample: CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {indices, valid};
}

// The gather in one launch. Features are viewed as [rows, n, width] (copied
// only when that view needs a copy or the width is strided), labels as
// [rows, n].
std::tuple<at::Tensor, at::Tensor> gather_sampled_cuda(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  check_gather_sampled_args(features, labels, indices, valid);
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
  const cudaError_t err = cuda::launch_gather(args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "syncfree._gather_sampled: CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_features, out_labels};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cuda));
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_cuda));
}
