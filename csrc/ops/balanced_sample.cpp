// Operator schemas (written once), argument checks, the Meta kernel, the
// composite gather operator and the C++ API.
#include "ops/balanced_sample.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

namespace {

bool is_supported_label_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

}  // namespace

int64_t num_rows(const at::Tensor& labels) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < labels.dim(); ++d) rows *= labels.size(d);
  return rows;
}

std::vector<int64_t> output_sizes(const at::Tensor& labels, int64_t num_samples) {
  std::vector<int64_t> sizes(labels.sizes().begin(), labels.sizes().end());
  sizes.back() = num_samples;
  return sizes;
}

core::SampleParams check_sample_args(const at::Tensor& labels, int64_t num_samples,
                                     double positive_fraction, int64_t negative_label,
                                     bool fill_positives, const c10::optional<int64_t>& seed,
                                     const c10::optional<at::Generator>& generator) {
  TORCH_CHECK(labels.defined(), "syncfree.balanced_sample: labels must be a defined tensor");
  TORCH_CHECK(labels.dim() >= 1,
              "syncfree.balanced_sample: labels must have at least 1 dimension (shape [..., N]), "
              "got a 0-dim tensor");
  TORCH_CHECK(is_supported_label_dtype(labels.scalar_type()),
              "syncfree.balanced_sample: labels must be bool or an integer tensor "
              "(uint8, int8, int16, int32, int64), got dtype ",
              labels.scalar_type());
  TORCH_CHECK(num_samples >= 0, "syncfree.balanced_sample: num_samples must be >= 0, got ",
              num_samples);
  TORCH_CHECK(positive_fraction >= 0.0 && positive_fraction <= 1.0,
              "syncfree.balanced_sample: positive_fraction must be in [0, 1], got ",
              positive_fraction);
  TORCH_CHECK(negative_label >= 0,
              "syncfree.balanced_sample: negative_label must be >= 0 (labels < 0 are ignored), "
              "got ",
              negative_label);
  TORCH_CHECK(!(seed.has_value() && generator.has_value() && generator->defined()),
              "syncfree.balanced_sample: seed and generator are mutually exclusive, got both");
  const int64_t rows = num_rows(labels);
  TORCH_CHECK(rows == 0 || num_samples <= std::numeric_limits<int64_t>::max() / rows,
              "syncfree.balanced_sample: the output would have ", rows, " x ", num_samples,
              " elements, more than int64 can index");
  core::SampleParams p;
  p.num_samples = num_samples;
  p.positive_fraction = positive_fraction;
  p.negative_label = negative_label;
  p.fill_positives = fill_positives;
  return p;
}

namespace {

std::tuple<at::Tensor, at::Tensor> balanced_sample_meta(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  check_sample_args(labels, num_samples, positive_fraction, negative_label, fill_positives, seed,
                    generator);
  const auto sizes = output_sizes(labels, num_samples);
  return {at::empty(sizes, labels.options().dtype(at::kLong)),
          at::empty(sizes, labels.options().dtype(at::kBool))};
}

using SampleFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, double, int64_t,
                                                    bool, c10::optional<int64_t>,
                                                    c10::optional<at::Generator>);
using GatherFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, int64_t, double, int64_t, bool,
    c10::optional<int64_t>, c10::optional<at::Generator>);

std::tuple<at::Tensor, at::Tensor> call_balanced_sample(const at::Tensor& labels,
                                                        int64_t num_samples,
                                                        double positive_fraction,
                                                        int64_t negative_label,
                                                        bool fill_positives,
                                                        c10::optional<int64_t> seed,
                                                        c10::optional<at::Generator> generator) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::balanced_sample", "")
                       .typed<SampleFn>();
  return op.call(labels, num_samples, positive_fraction, negative_label, fill_positives,
                 std::move(seed), std::move(generator));
}

// Composite of balanced_sample and differentiable ATen ops: every backend
// that implements balanced_sample gets the gather, and autograd reaches the
// features through index_select and masked_fill.
std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather_composite(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  TORCH_CHECK(features.defined(),
              "syncfree.balanced_sample_gather: features must be a defined tensor");
  TORCH_CHECK(labels.defined() && labels.dim() >= 1,
              "syncfree.balanced_sample_gather: labels must have at least 1 dimension "
              "(shape [..., N])");
  const int64_t L = labels.dim();
  bool shape_ok = features.dim() >= L;
  for (int64_t d = 0; shape_ok && d < L; ++d) shape_ok = features.size(d) == labels.size(d);
  TORCH_CHECK(shape_ok,
              "syncfree.balanced_sample_gather: features must have shape [..., N, *F] whose "
              "leading dimensions equal labels' shape ",
              labels.sizes(), ", got features of shape ", features.sizes());
  TORCH_CHECK(features.device() == labels.device(),
              "syncfree.balanced_sample_gather: features and labels must be on the same device, "
              "got features on ",
              features.device(), " and labels on ", labels.device());

  at::Tensor indices, valid;
  std::tie(indices, valid) = call_balanced_sample(labels, num_samples, positive_fraction,
                                                  negative_label, fill_positives, seed,
                                                  std::move(generator));
  const int64_t rows = num_rows(labels);
  const int64_t n = labels.size(L - 1);
  const auto feature_shape = features.sizes().slice(static_cast<size_t>(L));
  int64_t width = 1;
  for (const int64_t s : feature_shape) width *= s;

  // Invalid slots read row element 0 (if the row has any) and are then masked.
  const at::Tensor safe = indices.clamp_min(0).reshape({rows, num_samples});
  std::vector<int64_t> out_shape = output_sizes(labels, num_samples);
  out_shape.insert(out_shape.end(), feature_shape.begin(), feature_shape.end());
  std::vector<int64_t> mask_shape = output_sizes(labels, num_samples);
  mask_shape.insert(mask_shape.end(), feature_shape.size(), 1);

  at::Tensor sampled_features, sampled_labels;
  if (n == 0) {
    // Nothing to gather from: every slot is invalid.
    sampled_features = at::zeros(out_shape, features.options());
    if (features.requires_grad()) sampled_features = sampled_features + features.sum() * 0;
    sampled_labels = at::full(output_sizes(labels, num_samples), -1,
                              labels.options().dtype(at::kLong));
  } else {
    const at::Tensor row_base = at::arange(rows, indices.options()).mul_(n).unsqueeze(1);
    const at::Tensor flat_index = (safe + row_base).reshape({-1});
    sampled_features = features.reshape({rows * n, width})
                           .index_select(0, flat_index)
                           .reshape(out_shape)
                           .masked_fill(valid.reshape(mask_shape).logical_not(), 0);
    sampled_labels = labels.reshape({rows * n})
                         .index_select(0, flat_index)
                         .to(at::kLong)
                         .reshape(output_sizes(labels, num_samples))
                         .masked_fill(valid.logical_not(), -1);
  }
  return {sampled_features, sampled_labels, valid};
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
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::balanced_sample_gather", "")
                       .typed<ops::GatherFn>();
  return op.call(features, labels, num_samples, o.positive_fraction_, o.negative_label_,
                 o.fill_positives_, o.seed_, o.generator_);
}

}  // namespace syncfree

TORCH_LIBRARY(syncfree, m) {
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

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cpu));
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_meta));
}

TORCH_LIBRARY_IMPL(syncfree, CompositeImplicitAutograd, m) {
  m.impl("balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_composite));
}

// balanced_sample has no differentiable output: autograd passes straight
// through to the backend kernel (torch 1.13 has no such fallback for Meta).
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("balanced_sample", torch::CppFunction::makeFallthrough());
}
