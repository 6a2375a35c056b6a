// stratified_sample: schemas (written once), argument checks, the Meta
// kernel, stratified_sample_gather (sample, then the differentiable
// gather_sampled) and the C++ API. The CPU kernel lives in
// csrc/cpu/stratified_sample_cpu.cpp, the rule in csrc/core/stratified.h.
#include "ops/stratified_sample.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <limits>

#include "ops/balanced_sample.h"
#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

void check_stratified_args(const at::Tensor& labels, int64_t num_samples,
                           const at::Tensor& class_quota, const c10::optional<int64_t>& seed,
                           const c10::optional<at::Generator>& generator) {
  TORCH_CHECK(labels.defined(), "syncfree.stratified_sample: labels must be a defined tensor");
  TORCH_CHECK(labels.dim() >= 1,
              "syncfree.stratified_sample: labels must have at least 1 dimension (shape [..., N]), "
              "got a 0-dim tensor");
  check_label_dtype(labels, "stratified_sample");
  TORCH_CHECK(num_samples >= 0, "syncfree.stratified_sample: num_samples must be >= 0, got ",
              num_samples);
  TORCH_CHECK(class_quota.defined(),
              "syncfree.stratified_sample: class_quota must be a defined int64 tensor");
  TORCH_CHECK(class_quota.scalar_type() == at::kLong,
              "syncfree.stratified_sample: class_quota must be an int64 tensor, got dtype ",
              class_quota.scalar_type());
  TORCH_CHECK(class_quota.device() == labels.device(),
              "syncfree.stratified_sample: class_quota must be on the labels' device ",
              labels.device(), ", got a tensor on ", class_quota.device());
  const size_t lead = static_cast<size_t>(labels.dim() - 1);
  const bool shape_ok =
      class_quota.dim() == 1 ||
      (class_quota.dim() == labels.dim() &&
       class_quota.sym_sizes().slice(0, lead) == labels.sym_sizes().slice(0, lead));
  TORCH_CHECK(shape_ok,
              "syncfree.stratified_sample: class_quota must have shape [C] or labels.shape[:-1] + "
              "[C] (one quota row per row of labels), got shape ",
              class_quota.sym_sizes(), " for labels of shape ", labels.sym_sizes());
  TORCH_CHECK(class_quota.dim() >= 1 && class_quota.sym_size(-1) >= 1,
              "syncfree.stratified_sample: class_quota must hold at least one class (C >= 1), "
              "got shape ",
              class_quota.sym_sizes());
  TORCH_CHECK(!(seed.has_value() && generator.has_value() && generator->defined()),
              "syncfree.stratified_sample: seed and generator are mutually exclusive, got both");
  const c10::optional<int64_t> rows = num_rows(labels).maybe_as_int();
  TORCH_CHECK(num_samples == 0 || !rows.has_value() ||
                  *rows <= std::numeric_limits<int64_t>::max() / num_samples,
              "syncfree.stratified_sample: the output would have ", *rows, " x ", num_samples,
              " elements, more than int64 can index");
}

void check_host_quota(c10::ArrayRef<int64_t> class_quota, int64_t num_samples) {
  TORCH_CHECK(num_samples >= 0, "syncfree.stratified_sample: num_samples must be >= 0, got ",
              num_samples);
  TORCH_CHECK(!class_quota.empty(),
              "syncfree.stratified_sample: class_quota must hold at least one class (C >= 1), "
              "got an empty sequence");
  int64_t sum = 0;
  for (size_t c = 0; c < class_quota.size(); ++c) {
    TORCH_CHECK(class_quota[c] >= 0, "syncfree.stratified_sample: class_quota[", c,
                "] must be >= 0, got ", class_quota[c]);
    TORCH_CHECK(class_quota[c] <= num_samples - sum,
                "syncfree.stratified_sample: the sum of class_quota must be <= num_samples (",
                num_samples, "), got class_quota ", class_quota);
    sum += class_quota[c];
  }
}

namespace {

std::tuple<at::Tensor, at::Tensor> stratified_sample_meta(const at::Tensor& labels,
                                                          int64_t num_samples,
                                                          const at::Tensor& class_quota,
                                                          bool fill, c10::optional<int64_t> seed,
                                                          c10::optional<at::Generator> generator) {
  check_stratified_args(labels, num_samples, class_quota, seed, generator);
  return empty_sample_outputs(labels, num_samples);
}

using StratifiedFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t,
                                                        const at::Tensor&, bool,
                                                        c10::optional<int64_t>,
                                                        c10::optional<at::Generator>);
using StratifiedGatherFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, int64_t, const at::Tensor&, bool,
    c10::optional<int64_t>, c10::optional<at::Generator>);
using GatherFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, const at::Tensor&);

std::tuple<at::Tensor, at::Tensor> call_stratified_sample(
    const at::Tensor& labels, int64_t num_samples, const at::Tensor& class_quota, bool fill,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::stratified_sample", "")
                       .typed<StratifiedFn>();
  return op.call(labels, num_samples, class_quota, fill, std::move(seed), std::move(generator));
}

// stratified_sample, then the differentiable gather_sampled: autograd comes
// from gather_sampled's own Autograd kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather_composite(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const at::Tensor& class_quota, bool fill, c10::optional<int64_t> seed,
    c10::optional<at::Generator> generator) {
  check_gather_args("stratified_sample_gather", features, labels);
  at::Tensor indices, valid;
  std::tie(indices, valid) = call_stratified_sample(labels, num_samples, class_quota, fill,
                                                    std::move(seed), std::move(generator));
  static auto gather = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("syncfree::gather_sampled", "")
                           .typed<GatherFn>();
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) = gather.call(features, labels, indices, valid);
  return {out_features, out_labels, valid};
}

at::Tensor host_quota_tensor(c10::ArrayRef<int64_t> class_quota, int64_t num_samples,
                             const at::Tensor& labels) {
  check_host_quota(class_quota, num_samples);
  at::Tensor quota = at::tensor(class_quota, at::TensorOptions().dtype(at::kLong));
  // From pinned memory the copy to a GPU is asynchronous: no wait for the device.
  if (labels.is_cuda()) quota = quota.pin_memory();
  return quota.to(labels.device(), /*non_blocking=*/true);
}

}  // namespace
}  // namespace ops

std::tuple<at::Tensor, at::Tensor> stratified_sample(const at::Tensor& labels,
                                                     int64_t num_samples,
                                                     const at::Tensor& class_quota,
                                                     const StratifiedOptions& o) {
  return ops::call_stratified_sample(labels, num_samples, class_quota, o.fill_, o.seed_,
                                     o.generator_);
}

std::tuple<at::Tensor, at::Tensor> stratified_sample(const at::Tensor& labels,
                                                     int64_t num_samples,
                                                     c10::ArrayRef<int64_t> class_quota,
                                                     const StratifiedOptions& o) {
  TORCH_CHECK(labels.defined(), "syncfree.stratified_sample: labels must be a defined tensor");
  return stratified_sample(labels, num_samples,
                           ops::host_quota_tensor(class_quota, num_samples, labels), o);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const at::Tensor& class_quota, const StratifiedOptions& o) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::stratified_sample_gather", "")
                       .typed<ops::StratifiedGatherFn>();
  return op.call(features, labels, num_samples, class_quota, o.fill_, o.seed_, o.generator_);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    c10::ArrayRef<int64_t> class_quota, const StratifiedOptions& o) {
  TORCH_CHECK(labels.defined(), "syncfree.stratified_sample: labels must be a defined tensor");
  return stratified_sample_gather(features, labels, num_samples,
                                  ops::host_quota_tensor(class_quota, num_samples, labels), o);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def(
      "stratified_sample(Tensor labels, int num_samples, Tensor class_quota, *, "
      "bool fill=True, int? seed=None, Generator? generator=None) "
      "-> (Tensor indices, Tensor valid)",
      {at::Tag::nondeterministic_seeded});
  m.def(
      "stratified_sample_gather(Tensor features, Tensor labels, int num_samples, "
      "Tensor class_quota, *, bool fill=True, int? seed=None, Generator? generator=None) "
      "-> (Tensor sampled_features, Tensor sampled_labels, Tensor valid)",
      {at::Tag::nondeterministic_seeded});
}

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_cpu));
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_meta));
}

// Sample, then gather through the differentiable gather_sampled.
TORCH_LIBRARY_IMPL(syncfree, CompositeImplicitAutograd, m) {
  m.impl("stratified_sample_gather",
         TORCH_FN(syncfree::ops::stratified_sample_gather_composite));
}

// No differentiable output: autograd passes straight through.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("stratified_sample", torch::CppFunction::makeFallthrough());
}
