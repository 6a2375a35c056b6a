// balanced_sample and balanced_sample_gather: schemas (the public ops and the
// internal fused _balanced_sample_gather), argument checks, the Meta kernels,
// balanced_sample_gather's composite and Autograd kernels around the fused op,
// and the C++ API. The CPU and CUDA kernels live in
// cpu/balanced_sample_cpu.cpp and cuda/balanced_sample_cuda.cpp, the rule in
// core/quota.h and core/row_plan.h.
#include "ops/balanced_sample.h"

#include <torch/library.h>

#include "ops/common.h"
#include "ops/gather_sampled.h"
#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

core::BalancedParams check_balanced_sample_args(const char* op, const at::Tensor& labels,
                                                int64_t num_samples, double positive_fraction,
                                                int64_t negative_label, bool fill_positives,
                                                const c10::optional<int64_t>& seed,
                                                const c10::optional<at::Generator>& generator) {
  check_labels(op, labels);
  check_num_samples(op, labels, num_samples);
  TORCH_CHECK(positive_fraction >= 0.0 && positive_fraction <= 1.0, "syncfree.", op,
              ": positive_fraction must be in [0, 1], got ", positive_fraction);
  TORCH_CHECK(negative_label >= 0, "syncfree.", op,
              ": negative_label must be >= 0 (labels < 0 are ignored), got ", negative_label);
  check_seed_or_generator(op, seed, generator);
  core::BalancedParams p;
  p.num_samples = num_samples;
  p.positive_fraction = positive_fraction;
  p.negative_label = negative_label;
  p.fill_positives = fill_positives;
  return p;
}

core::BalancedParams check_balanced_sample_gather_args(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    const c10::optional<int64_t>& seed, const c10::optional<at::Generator>& generator) {
  constexpr const char* op = "balanced_sample_gather";
  check_gather_inputs(op, features, labels);
  return check_balanced_sample_args(op, labels, num_samples, positive_fraction, negative_label,
                                    fill_positives, seed, generator);
}

namespace {

using SampleFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, double, int64_t,
                                                    bool, c10::optional<int64_t>,
                                                    c10::optional<at::Generator>);
using SampleGatherFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, int64_t, double, int64_t, bool,
    c10::optional<int64_t>, c10::optional<at::Generator>);
using BalancedFusedFn = SampleGatherOutputs(const at::Tensor&, const at::Tensor&, int64_t, double,
                                    int64_t, bool, c10::optional<int64_t>,
                                    c10::optional<at::Generator>);

std::tuple<at::Tensor, at::Tensor> balanced_sample_meta(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  check_balanced_sample_args("balanced_sample", labels, num_samples, positive_fraction,
                             negative_label, fill_positives, seed, generator);
  return empty_sample_outputs("balanced_sample", labels, num_samples);
}

std::tuple<at::Tensor, at::Tensor> call_balanced_sample(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  static auto op = find_op<SampleFn>("syncfree::balanced_sample");
  return op.call(labels, num_samples, positive_fraction, negative_label, fill_positives,
                 std::move(seed), std::move(generator));
}

// The fused op (_balanced_sample_gather) through the dispatcher.
SampleGatherOutputs call_balanced_fused(const at::Tensor& features, const at::Tensor& labels,
                               int64_t num_samples, double positive_fraction,
                               int64_t negative_label, bool fill_positives,
                               c10::optional<int64_t> seed,
                               c10::optional<at::Generator> generator) {
  static auto op = find_op<BalancedFusedFn>("syncfree::_balanced_sample_gather");
  return op.call(features, labels, num_samples, positive_fraction, negative_label,
                 fill_positives, std::move(seed), std::move(generator));
}

SampleGatherOutputs balanced_sample_gather_meta(const at::Tensor& features,
                                                const at::Tensor& labels, int64_t num_samples,
                                                double positive_fraction,
                                                int64_t negative_label, bool fill_positives,
                                                c10::optional<int64_t> seed,
                                                c10::optional<at::Generator> generator) {
  check_balanced_sample_gather_args(features, labels, num_samples, positive_fraction,
                                    negative_label, fill_positives, seed, generator);
  return empty_sample_gather_outputs("balanced_sample_gather", features, labels, num_samples);
}

// balanced_sample_gather below autograd (any backend, Meta included): the
// fused op without its indices.
std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather_forward(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  return drop_indices(call_balanced_fused(features, labels, num_samples, positive_fraction,
                                 negative_label, fill_positives, std::move(seed),
                                 std::move(generator)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather_autograd(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  return sample_gather_autograd(features, labels, [&] {
    return call_balanced_fused(features, labels, num_samples, positive_fraction, negative_label,
                      fill_positives, seed, generator);
  });
}

}  // namespace
}  // namespace ops

std::tuple<at::Tensor, at::Tensor> balanced_sample(const at::Tensor& labels, int64_t num_samples,
                                                   const SampleOptions& o) {
  return ops::call_balanced_sample(labels, num_samples, o.positive_fraction_, o.negative_label_,
                                   o.fill_positives_, o.seed_, o.generator_);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const SampleOptions& o) {
  static auto op = ops::find_op<ops::SampleGatherFn>("syncfree::balanced_sample_gather");
  return op.call(features, labels, num_samples, o.positive_fraction_, o.negative_label_,
                 o.fill_positives_, o.seed_, o.generator_);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def(
      "balanced_sample(Tensor labels, int num_samples, float positive_fraction=0.5, *, "
      "int negative_label=0, bool fill_positives=True, int? seed=None, "
      "Generator? generator=None) -> (Tensor indices, Tensor valid)",
      {at::Tag::nondeterministic_seeded});
  m.def(
      "balanced_sample_gather(Tensor features, Tensor labels, int num_samples, "
      "float positive_fraction=0.5, *, int negative_label=0, bool fill_positives=True, "
      "int? seed=None, Generator? generator=None) "
      "-> (Tensor sampled_features, Tensor sampled_labels, Tensor valid)",
      {at::Tag::nondeterministic_seeded});
  // Internal: the sample and its gather in one kernel per backend, with the
  // indices (for the backward).
  m.def(
      "_balanced_sample_gather(Tensor features, Tensor labels, int num_samples, "
      "float positive_fraction=0.5, *, int negative_label=0, bool fill_positives=True, "
      "int? seed=None, Generator? generator=None) "
      "-> (Tensor sampled_features, Tensor sampled_labels, Tensor valid, Tensor indices)",
      {at::Tag::nondeterministic_seeded});
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_meta));
  m.impl("_balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_meta));
}

// Below autograd, on every backend: the fused op without its indices.
TORCH_LIBRARY_IMPL(syncfree, CompositeExplicitAutograd, m) {
  m.impl("balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_forward));
}

// balanced_sample has no differentiable output: autograd passes straight
// through to the backend. balanced_sample_gather's backward scatters into
// the sampled feature rows.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("balanced_sample", torch::CppFunction::makeFallthrough());
  m.impl("balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_autograd));
}
