// CPU backend of syncfree::stratified_sample: the torch adapter around the
// framework-free core (core/stratified.h, core/host_stratified.h), and the
// fused stratified_sample_gather. One parallel pass over rows; each thread
// keeps one workspace for its rows (the row sorted by class, C + 1 counts,
// the slots), sized by the shapes only.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <memory>
#include <vector>

#include "core/host_stratified.h"
#include "core/stratified.h"
#include "cpu/common.h"
#include "ops/common.h"
#include "ops/gather_sampled.h"
#include "ops/stratified_sample.h"

namespace syncfree {
namespace ops {

namespace {

// Workspace words a thread keeps between calls, at most (16 MiB).
constexpr size_t kKeptWords = size_t{2} << 20;

// A workspace of `words` words for the calling thread: up to kKeptWords, the
// one buffer the thread keeps between calls (grown to the largest it has
// needed: no allocation per call; one per thread, whatever the label dtype
// or the kernel); a larger one allocated into *owned for the call.
int64_t* thread_workspace(size_t words, std::unique_ptr<int64_t[]>* owned) {
  if (words > kKeptWords) {
    owned->reset(new int64_t[words]);
    return owned->get();
  }
  thread_local std::vector<int64_t> kept;
  if (kept.size() < words) kept.resize(words);
  return kept.data();
}

// Every row's sample into indices and valid [rows, k]; after a row's slots
// are written, on_row(r) runs on them on the same thread, while they are in
// the cache (the fused gather's copy; a no-op for stratified_sample).
// slot_work: the work of one slot (units: cpu/common.h).
template <typename Index, typename T, typename OnRow>
void sample_rows(const at::Tensor& labels, const T* data, const int64_t* quota,
                 int64_t quota_row_stride, const core::StratifiedParams& p, int64_t rows,
                 int64_t n, int64_t* out_indices, bool* out_valid, int64_t slot_work,
                 const OnRow& on_row) {
  const int64_t k = p.num_samples;
  const int64_t stride = labels.stride(-1);
  const size_t words =
      static_cast<size_t>(core::stratified_workspace_words<Index>(n, k, p.num_classes));
  // A row's work (units: cpu/common.h): two passes over its labels (count,
  // sort by class), its classes, and its slots.
  const int64_t per_row = 2 * n + 2 * p.num_classes + slot_work * k;
  at::parallel_for(0, rows, parallel_grain(per_row), [&](int64_t begin, int64_t end) {
    std::unique_ptr<int64_t[]> owned;
    int64_t* work = thread_workspace(words, &owned);
    for (int64_t r = begin; r < end; ++r) {
      core::stratified_row<Index>(data + row_offset(labels, r), stride, n,
                                  quota + r * quota_row_stride, p, r, work,
                                  out_indices + r * k, out_valid + r * k);
      on_row(r);
    }
  });
}

// The rows' sample with the label type's Index (int32 where N allows).
template <typename T, typename OnRow>
void sample_all(const at::Tensor& labels, const T* data, const int64_t* quota,
                int64_t quota_row_stride, const core::StratifiedParams& p, int64_t rows, int64_t n,
                int64_t* out_indices, bool* out_valid, int64_t slot_work, const OnRow& on_row) {
  if (n <= std::numeric_limits<int32_t>::max()) {
    sample_rows<int32_t>(labels, data, quota, quota_row_stride, p, rows, n, out_indices,
                         out_valid, slot_work, on_row);
  } else {
    sample_rows<int64_t>(labels, data, quota, quota_row_stride, p, rows, n, out_indices,
                         out_valid, slot_work, on_row);
  }
}

constexpr int64_t kStratifiedSlotWork = 12;  // one slot (units: cpu/common.h)

core::StratifiedParams stratified_params(int64_t num_samples, const at::Tensor& class_quota,
                                         bool fill) {
  core::StratifiedParams params;
  params.num_samples = num_samples;
  params.num_classes = class_quota.size(-1);
  params.fill = fill;
  return params;
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
  core::StratifiedParams params = stratified_params(num_samples, class_quota, fill);
  // Outputs first: a call that fails to allocate them must not have drawn
  // from the generator. Every call draws the same amount.
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  const at::Tensor quota = class_quota.contiguous();
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
  const int64_t quota_row_stride = quota.dim() == 1 ? 0 : params.num_classes;
  int64_t* out_indices = indices.data_ptr<int64_t>();
  bool* out_valid = valid.data_ptr<bool>();
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "stratified_sample_cpu", [&] {
    sample_all(labels, static_cast<const scalar_t*>(labels.data_ptr()),
               quota.data_ptr<int64_t>(), quota_row_stride, params, rows, n, out_indices,
               out_valid, kStratifiedSlotWork, [](int64_t) {});
  });
  return {indices, valid};
}

// stratified_sample_gather in one pass: each row is sampled, then its
// feature rows and labels gathered (FusedGather) while its indices are in
// the cache. The same indices as stratified_sample, the same gather as
// gather_sampled, bit for bit; the indices are returned for the backward.
SampleGatherOutputs stratified_sample_gather_cpu(const at::Tensor& features,
                                                 const at::Tensor& labels, int64_t num_samples,
                                                 const at::Tensor& class_quota, bool fill,
                                                 c10::optional<int64_t> seed,
                                                 c10::optional<at::Generator> generator) {
  constexpr const char* op = "stratified_sample_gather";
  check_stratified_sample_gather_args(features, labels, num_samples, class_quota, seed,
                                      generator);
  core::StratifiedParams params = stratified_params(num_samples, class_quota, fill);
  FusedCall call(op, features, labels, num_samples);
  const at::Tensor quota = class_quota.contiguous();
  draw_seed(op, seed, generator, &params);
  if (!call.has_slots()) return call.take();
  if (!call.gathers()) return call.take_all_invalid();  // no labels to sample
  const int64_t quota_row_stride = quota.dim() == 1 ? 0 : params.num_classes;
  const int64_t slot_work = kStratifiedSlotWork + kGatherSlotWork + call.row_bytes / 16;
  SYNCFREE_DISPATCH_LABEL_TYPES(labels.scalar_type(), "stratified_sample_gather_cpu", [&] {
    const scalar_t* data = static_cast<const scalar_t*>(labels.data_ptr());
    with_row_copy(call.row_bytes, [&](auto copy) {
      const FusedGather<scalar_t, decltype(copy)> gather(copy, call, labels);
      sample_all(labels, data, quota.data_ptr<int64_t>(), quota_row_stride, params, call.rows,
                 call.n, call.indices(), call.valid(), slot_work,
                 [&](int64_t r) { gather.row(r)(0, call.k); });
    });
  });
  return call.take();
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_cpu));
  m.impl("_stratified_sample_gather", TORCH_FN(syncfree::ops::stratified_sample_gather_cpu));
}
