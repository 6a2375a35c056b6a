// CPU backend of syncfree::stratified_sample: the torch adapter around the
// framework-free core (core/stratified.h, core/host_stratified.h). One
// parallel pass over rows; each task keeps one workspace for its rows (the
// row sorted by class, C + 1 counts, the slots), sized by the shapes only.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>

#include "core/host_stratified.h"
#include "core/stratified.h"
#include "cpu/generator.h"
#include "cpu/parallel.h"
#include "ops/balanced_sample.h"
#include "ops/stratified_sample.h"

namespace syncfree {
namespace ops {

namespace {

// Element offset of row r's first label, for any strides of the leading dims.
int64_t label_row_offset(const at::Tensor& labels, int64_t r) {
  int64_t offset = 0;
  for (int64_t d = labels.dim() - 2; d >= 0; --d) {
    const int64_t size = labels.size(d);
    offset += (r % size) * labels.stride(d);
    r /= size;
  }
  return offset;
}

template <typename Index, typename T>
void sample_rows(const at::Tensor& labels, const T* data, const int64_t* quota,
                 int64_t quota_row_stride, const core::StratifiedParams& p, int64_t rows,
                 int64_t n, int64_t* out_indices, bool* out_valid) {
  const int64_t k = p.num_samples;
  const int64_t stride = labels.stride(-1);
  const int64_t words = core::stratified_workspace_words<Index>(n, k, p.num_classes);
  // A row's work (units: cpu/parallel.h): two passes over its labels (count,
  // sort by class), its classes, and its slots (about 12 units each).
  const int64_t per_row = 2 * n + 2 * p.num_classes + 12 * k;
  at::parallel_for(0, rows, parallel_grain(per_row), [&](int64_t begin, int64_t end) {
    const std::unique_ptr<int64_t[]> work(new int64_t[static_cast<size_t>(words)]);
    for (int64_t r = begin; r < end; ++r) {
      core::stratified_row<Index>(data + label_row_offset(labels, r), stride, n,
                                  quota + r * quota_row_stride, p, r, work.get(),
                                  out_indices + r * k, out_valid + r * k);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> stratified_sample_cpu(const at::Tensor& labels,
                                                         int64_t num_samples,
                                                         const at::Tensor& class_quota, bool fill,
                                                         c10::optional<int64_t> seed,
                                                         c10::optional<at::Generator> generator) {
  check_stratified_args(labels, num_samples, class_quota, seed, generator);
  core::StratifiedParams params;
  params.num_samples = num_samples;
  params.num_classes = class_quota.size(-1);
  params.fill = fill;
  // Outputs first: a call that fails to allocate them must not have drawn
  // from the generator. Every call draws the same amount.
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(labels, num_samples);
  draw_seed(seed, generator, &params);
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
  AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, labels.scalar_type(), "stratified_sample_cpu", [&] {
    const scalar_t* data = labels.data_ptr<scalar_t>();
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

}  // namespace ops
}  // namespace syncfree
