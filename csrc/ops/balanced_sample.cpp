// balanced_sample and balanced_sample_gather: schemas, argument checks, the
// Meta kernel, balanced_sample_gather (sample, then the differentiable
// gather_sampled) and the C++ API. The CPU and CUDA kernels live in
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

namespace {

using SampleFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, double, int64_t,
                                                    bool, c10::optional<int64_t>,
                                                    c10::optional<at::Generator>);
using SampleGatherFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, int64_t, double, int64_t, bool,
    c10::optional<int64_t>, c10::optional<at::Generator>);

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

// balanced_sample, then the differentiable gather_sampled: autograd comes
// from gather_sampled's own Autograd kernel. Every argument is checked here
// first, so that the errors name balanced_sample_gather.
std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather_composite(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  constexpr const char* op = "balanced_sample_gather";
  check_gather_inputs(op, features, labels);
  check_balanced_sample_args(op, labels, num_samples, positive_fraction, negative_label,
                             fill_positives, seed, generator);
  if (!labels.is_meta()) check_generator_device(op, generator, labels.device());
  at::Tensor indices, valid;
  std::tie(indices, valid) = on_behalf_of(op, "balanced_sample", [&] {
    return call_balanced_sample(labels, num_samples, positive_fraction, negative_label,
                                fill_positives, std::move(seed), std::move(generator));
  });
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) = on_behalf_of(
      op, "gather_sampled", [&] { return call_gather_sampled(features, labels, indices, valid); });
  return {out_features, out_labels, valid};
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
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_meta));
}

// Sample, then gather through the differentiable gather_sampled.
TORCH_LIBRARY_IMPL(syncfree, CompositeImplicitAutograd, m) {
  m.impl("balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_composite));
}

// No differentiable output: autograd passes straight through to the backend.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("balanced_sample", torch::CppFunction::makeFallthrough());
}
