// stratified_sample and stratified_sample_gather: schemas (the public ops and
// the internal fused _stratified_sample_gather), argument checks, the Meta
// kernels, stratified_sample_gather's composite and Autograd kernels around
// the fused op, the internal check of host quotas and the C++ API. The
// CPU and CUDA kernels live in cpu/stratified_sample_cpu.cpp and
// cuda/stratified_sample_cuda.cpp, the rule in core/stratified.h.
#include "ops/stratified_sample.h"

#include <torch/library.h>

#include <string>

#include "ops/common.h"
#include "ops/gather_sampled.h"
#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

void check_stratified_sample_args(const char* op, const at::Tensor& labels, int64_t num_samples,
                                  const at::Tensor& class_quota,
                                  const c10::optional<int64_t>& seed,
                                  const c10::optional<at::Generator>& generator) {
  check_labels(op, labels);
  check_num_samples(op, labels, num_samples);
  TORCH_CHECK(class_quota.defined(), "syncfree.", op,
              ": class_quota must be a defined int64 tensor");
  TORCH_CHECK(class_quota.scalar_type() == at::kLong, "syncfree.", op,
              ": class_quota must be an int64 tensor, got dtype ", class_quota.scalar_type());
  TORCH_CHECK(class_quota.device() == labels.device(), "syncfree.", op,
              ": class_quota must be on the labels' device ", labels.device(),
              ", got a tensor on ", class_quota.device());
  const size_t lead = static_cast<size_t>(labels.dim() - 1);
  const bool shape_ok =
      class_quota.dim() == 1 ||
      (class_quota.dim() == labels.dim() &&
       class_quota.sym_sizes().slice(0, lead) == labels.sym_sizes().slice(0, lead));
  TORCH_CHECK(shape_ok, "syncfree.", op,
              ": class_quota must have shape [C] or labels.shape[:-1] + [C] (one quota row per "
              "row of labels), got shape ",
              class_quota.sym_sizes(), " for labels of shape ", labels.sym_sizes());
  TORCH_CHECK(class_quota.dim() >= 1 && class_quota.sym_size(-1) >= 1, "syncfree.", op,
              ": class_quota must hold at least one class (C >= 1), got shape ",
              class_quota.sym_sizes());
  check_seed_or_generator(op, seed, generator);
}

void check_stratified_sample_gather_args(const at::Tensor& features, const at::Tensor& labels,
                                         int64_t num_samples, const at::Tensor& class_quota,
                                         const c10::optional<int64_t>& seed,
                                         const c10::optional<at::Generator>& generator) {
  constexpr const char* op = "stratified_sample_gather";
  check_gather_inputs(op, features, labels);
  check_stratified_sample_args(op, labels, num_samples, class_quota, seed, generator);
}

void check_class_quota_values(const char* op, c10::ArrayRef<int64_t> class_quota,
                              int64_t num_samples) {
  TORCH_CHECK(num_samples >= 0, "syncfree.", op, ": num_samples must be >= 0, got ",
              num_samples);
  TORCH_CHECK_VALUE(!class_quota.empty(), "syncfree.", op,
              ": class_quota must hold at least one class (C >= 1), got an empty sequence");
  int64_t sum = 0;
  for (size_t c = 0; c < class_quota.size(); ++c) {
    TORCH_CHECK_VALUE(class_quota[c] >= 0, "syncfree.", op, ": class_quota[", c,
                "] must be >= 0, got ", class_quota[c]);
    TORCH_CHECK_VALUE(class_quota[c] <= num_samples - sum, "syncfree.", op,
                ": the sum of class_quota must be <= num_samples (", num_samples,
                "), got class_quota ", class_quota);
    sum += class_quota[c];
  }
}

namespace {

using StratifiedFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t,
                                                        const at::Tensor&, bool,
                                                        c10::optional<int64_t>,
                                                        c10::optional<at::Generator>);
using StratifiedGatherFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, int64_t, const at::Tensor&, bool,
    c10::optional<int64_t>, c10::optional<at::Generator>);
using StratifiedFusedFn = SampleGatherOutputs(const at::Tensor&, const at::Tensor&, int64_t,
                                    const at::Tensor&, bool, c10::optional<int64_t>,
                                    c10::optional<at::Generator>);

std::tuple<at::Tensor, at::Tensor> stratified_sample_meta(const at::Tensor& labels,
                                                          int64_t num_samples,
                                                          const at::Tensor& class_quota,
                                                          bool fill, c10::optional<int64_t> seed,
                                                          c10::optional<at::Generator> generator) {
  check_stratified_sample_args("stratified_sample", labels, num_samples, class_quota, seed,
                               generator);
  return empty_sample_outputs("stratified_sample", labels, num_samples);
}

std::tuple<at::Tensor, at::Tensor> call_stratified_sample(
    const at::Tensor& labels, int64_t num_samples, const at::Tensor& class_quota, bool fill,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  static auto op = find_op<StratifiedFn>("syncfree::stratified_sample");
  return op.call(labels, num_samples, class_quota, fill, std::move(seed), std::move(generator));
}

// The fused op (_stratified_sample_gather) through the dispatcher.
SampleGatherOutputs call_stratified_fused(const at::Tensor& features, const at::Tensor& labels,
                               int64_t num_samples, const at::Tensor& class_quota, bool fill,
                               c10::optional<int64_t> seed,
                               c10::optional<at::Generator> generator) {
  static auto op = find_op<StratifiedFusedFn>("syncfree::_stratified_sample_gather");
  return op.call(features, labels, num_samples, class_quota, fill, std::move(seed),
                 std::move(generator));
}

SampleGatherOutputs stratified_sample_gather_meta(const at::Tensor& features,
                                                  const at::Tensor& labels, int64_t num_samples,
                                                  const at::Tensor& class_quota, bool fill,
                                                  c10::optional<int64_t> seed,
                                                  c10::optional<at::Generator> generator) {
  check_stratified_sample_gather_args(features, labels, num_samples, class_quota, seed,
                                      generator);
  return empty_sample_gather_outputs("stratified_sample_gather", features, labels, num_samples);
}

// stratified_sample_gather below autograd (any backend, Meta included): the
// fused op without its indices.
std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather_forward(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const at::Tensor& class_quota, bool fill, c10::optional<int64_t> seed,
    c10::optional<at::Generator> generator) {
  return drop_indices(call_stratified_fused(features, labels, num_samples, class_quota, fill,
                                 std::move(seed), std::move(generator)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather_autograd(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const at::Tensor& class_quota, bool fill, c10::optional<int64_t> seed,
    c10::optional<at::Generator> generator) {
  return sample_gather_autograd(features, labels, [&] {
    return call_stratified_fused(features, labels, num_samples, class_quota, fill, seed, generator);
  });
}

// The internal _check_class_quota: the Python wrappers' check of quotas given
// as a list (the C++ API's vector overloads call check_class_quota_values).
void check_class_quota_op(c10::string_view op, c10::ArrayRef<int64_t> class_quota,
                          int64_t num_samples) {
  const std::string name(op);
  TORCH_CHECK(name == "stratified_sample" || name == "stratified_sample_gather",
              "syncfree._check_class_quota: op must be stratified_sample or "
              "stratified_sample_gather, got ",
              name);
  check_class_quota_values(name.c_str(), class_quota, num_samples);
}

// Host quotas as the op takes them: checked, then an int64 tensor on the
// labels' device (from pinned memory the copy to a GPU is asynchronous: no
// wait for the device).
at::Tensor host_quota_tensor(const char* op, c10::ArrayRef<int64_t> class_quota,
                             int64_t num_samples, const at::Tensor& labels) {
  TORCH_CHECK(labels.defined(), "syncfree.", op, ": labels must be a defined tensor");
  check_class_quota_values(op, class_quota, num_samples);
  at::Tensor quota = at::tensor(class_quota, at::TensorOptions().dtype(at::kLong));
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
  return stratified_sample(
      labels, num_samples,
      ops::host_quota_tensor("stratified_sample", class_quota, num_samples, labels), o);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const at::Tensor& class_quota, const StratifiedOptions& o) {
  static auto op = ops::find_op<ops::StratifiedGatherFn>("syncfree::stratified_sample_gather");
  return op.call(features, labels, num_samples, class_quota, o.fill_, o.seed_, o.generator_);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    c10::ArrayRef<int64_t> class_quota, const StratifiedOptions& o) {
  return stratified_sample_gather(
      features, labels, num_samples,
      ops::host_quota_tensor("stratified_sample_gather", class_quota, num_samples, labels), o);
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
  // Internal: the sample and its gather in one kernel per backend, with the
  // indices (for the backward).
  m.def(
      "_stratified_sample_gather(Tensor features, Tensor labels, int num_samples, "
      "Tensor class_quota, *, bool fill=True, int? seed=None, Generator? generator=None) "
      "-> (Tensor sampled_features, Tensor sampled_labels, Tensor valid, Tensor indices)",
      {at::Tag::nondeterministic_seeded});
  // Internal: the check of quotas given as a list (Python wrappers). It
  // returns nothing: CONSERVATIVE keeps TorchScript from removing the call.
  m.def(torch::schema("_check_class_quota(str op, int[] class_quota, int num_samples) -> ()",
                      c10::AliasAnalysisKind::CONSERVATIVE));
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("stratified_sample", TORCH_FN(syncfree::ops::stratified_sample_meta));
  m.impl("_stratified_sample_gather", TORCH_FN(syncfree::ops::stratified_sample_gather_meta));
}

// Below autograd, on every backend: the fused op without its indices.
TORCH_LIBRARY_IMPL(syncfree, CompositeExplicitAutograd, m) {
  m.impl("stratified_sample_gather", TORCH_FN(syncfree::ops::stratified_sample_gather_forward));
}

// The quota check takes no tensor: it runs wherever it is called (and while
// tracing).
TORCH_LIBRARY_IMPL(syncfree, CompositeImplicitAutograd, m) {
  m.impl("_check_class_quota", TORCH_FN(syncfree::ops::check_class_quota_op));
}

// stratified_sample has no differentiable output: autograd passes straight
// through. stratified_sample_gather's backward scatters into the sampled
// feature rows.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("stratified_sample", torch::CppFunction::makeFallthrough());
  m.impl("stratified_sample_gather",
         TORCH_FN(syncfree::ops::stratified_sample_gather_autograd));
}
