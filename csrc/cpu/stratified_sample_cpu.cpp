// CPU backend of syncfree::stratified_sample: the torch adapter around the
// framework-free core (core/stratified.h, core/host_stratified.h). One
// parallel pass over rows; each task keeps one workspace for its rows (the
// row sorted by class, C + 1 counts, the slots), sized by the shapes only.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <memory>

#include "core/host_stratified.h"
#include "core/stratified.h"
#include "cpu/common.h"
#include "ops/common.h"
#include "ops/stratified_sample.h"

namespace syncfree {
namespace ops {

namespace {

template <typename Index, typename T>
void sample_rows(const at::Tensor& labels, const T* data, const int64_t* quota,
                 int64_t quota_row_stride, const core::StratifiedParams& p, int64_t rows,
                 int64_t n, int64_t* out_indices, bool* out_valid) {
  const int64_t k = p.num_samples;
  const int64_t stride = labels.stride(-1);
  const int64_t words = core::stratified_workspace_words<Index>(n, k, p.num_classes);
  // A row's work (units: cpu/common.h): two passes over its labels (count,
  // sort by class), its classes, and its slots (about 12 units each).
  const int64_t per_row = 2 * n + 2 * p.num_classes + 12 * k;
  at::parallel_for(0, rows, parallel_grain(per_row), [&](int64_t begin, int64_t end) {
    const std::unique_ptr<int64_t[]> work(new int64_t[static_cast<size_t>(words)]);
    for (int64_t r = begin; r < end; ++r) {
      core::stratified_row<Index>(data + row_offset(labels, r), stride, n,
                                  quota + r * quota_row_stride, p, r, work.get(),
                                  out_indices + r * k, out_valid + r * k);
    }
  });
}

// Every check and allocation comes before the draw from the generator, so
// a rejected call leaves the generator as it was.
std::tuple<at::Tensor, at::Tensor> stratified_sample_cpu(const at::Tensor& labels,
                                                         int64_t num_samples,
                                                         const at::Tensor& class_quota, bool fill,
                                                         c10::optional<int64_t> seed,
                                                         c10::optional<at::Generator> generator) {
  constexpr const char* op = "stratified_sample";
  check_stratified_sample_args(op, labels, num_samples, class_quota, seed, generator);
  core::StratifiedParams params;
  params.num_samples = num_samples;
  params.num_classes = class_quota.size(-1);
  params.fill = fill;
  // Outputs first: a call that fails to allocate them must not have drawn
  // from the generator. Every call draws the same amount.
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  draw_seed(op, seed, generator, &params);
  const int64_t rows = num_rows(labels).expect_int();
  const int64_t n = labels.size(-1);
  const int64_t k = num_samples;
  if (rows == 0 || k == 0) return {indices, valid};
  if (n == 0) {
    indices.fill_(-1);
    valid.fill_(false);
    return {indices, valid};
  }

  const at::Tensor quota = class_quota.contiguous();
  const int64_t quota_row_stride = quota.dim() == 1 ? 0 : params.num_classes;
  const int64_t* quota_ptr = quota.data_ptr<int64_t>();
  int64_t* out_indices = indices.data_ptr<int64_t>();
  bool* out_valid = valid.data_ptr<bool>();
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "stratified_sample_cpu", [&] {
    const scalar_t* data = static_cast<const scalar_t*>(labels.data_ptr());
    if (n <= std::numeric_limits<int32_t>::max()) {
      sample_rows<int32_t>(labels, data, quota_ptr, quota_row_stride, params, rows, n,
                           out_indices, out_valid);
    } else {
      sample_rows<int64_t>(labels, data, quota_ptr, quota_row_stride, params, rows, n,
                           out_indices, out_valid);
    }
  });
  return {indices, valid};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_cpu));
}
