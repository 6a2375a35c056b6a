// Operator schemas (written once), argument checks, the Meta kernel, the
// gather operator (autograd and backend-generic parts) and the C++ API.
#include "ops/balanced_sample.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/irange.h>
#include <torch/autograd.h>
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

void check_label_dtype(const at::Tensor& labels, const char* op) {
  TORCH_CHECK(is_supported_label_dtype(labels.scalar_type()), "syncfree.", op,
              ": labels must be bool or an integer tensor (uint8, int8, int16, int32, int64), "
              "got dtype ",
              labels.scalar_type());
}

namespace {

// The value of a SymInt when it is known: always, except for symbolic sizes
// while torch.compile traces.
c10::optional<int64_t> known_int(const c10::SymInt& v) { return v.maybe_as_int(); }

}  // namespace

c10::SymInt num_rows(const at::Tensor& labels) {
  c10::SymInt rows = 1;
  for (int64_t d = 0; d + 1 < labels.dim(); ++d) rows *= labels.sym_size(d);
  return rows;
}

std::vector<c10::SymInt> output_sizes(const at::Tensor& labels, int64_t num_samples) {
  std::vector<c10::SymInt> sizes(labels.sym_sizes().begin(), labels.sym_sizes().end());
  sizes.back() = num_samples;
  return sizes;
}

c10::SymInt feature_width(const at::Tensor& features, int64_t label_dim) {
  c10::SymInt width = 1;
  for (int64_t d = label_dim; d < features.dim(); ++d) width *= features.sym_size(d);
  return width;
}

std::vector<c10::SymInt> sampled_feature_sizes(const at::Tensor& features,
                                               const at::Tensor& labels, const c10::SymInt& k) {
  const auto f = features.sym_sizes();
  std::vector<c10::SymInt> sizes(f.begin(), f.end());
  sizes[static_cast<size_t>(labels.dim() - 1)] = k;
  return sizes;
}

void check_generator_device(const c10::optional<at::Generator>& generator,
                            const at::Device& device) {
  if (!generator.has_value() || !generator->defined()) return;
  const at::Device gen_device = generator->device();
  const bool same = gen_device.type() == device.type() &&
                    (device.type() == at::kCPU || gen_device.index() == device.index());
  TORCH_CHECK(same, "syncfree.balanced_sample: generator must be on the labels' device ", device,
              ", got a generator on ", gen_device);
}

void check_gather_args(const char* op, const at::Tensor& features, const at::Tensor& labels) {
  TORCH_CHECK(features.defined(), "syncfree.", op, ": features must be a defined tensor");
  TORCH_CHECK(labels.defined() && labels.dim() >= 1, "syncfree.", op,
              ": labels must have at least 1 dimension (shape [..., N])");
  const int64_t L = labels.dim();
  bool shape_ok = features.dim() >= L;
  for (int64_t d = 0; shape_ok && d < L; ++d)
    shape_ok = features.sym_size(d) == labels.sym_size(d);
  TORCH_CHECK(shape_ok, "syncfree.", op,
              ": features must have shape [..., N, *F] whose leading dimensions equal labels' "
              "shape ",
              labels.sym_sizes(), ", got features of shape ", features.sym_sizes());
  TORCH_CHECK(features.device() == labels.device(), "syncfree.", op,
              ": features and labels must be on the same device, got features on ",
              features.device(), " and labels on ", labels.device());
}

void check_sample_args_of_gather(const char* op, const at::Tensor& labels,
                                 const at::Tensor& indices, const at::Tensor& valid) {
  TORCH_CHECK(indices.defined() && valid.defined(), "syncfree.", op,
              ": indices and valid must be defined tensors");
  TORCH_CHECK(indices.scalar_type() == at::kLong && valid.scalar_type() == at::kBool,
              "syncfree.", op, ": indices must be int64 and valid bool, got ",
              indices.scalar_type(), " and ", valid.scalar_type());
  const size_t lead = static_cast<size_t>(labels.dim() - 1);
  TORCH_CHECK(indices.dim() == labels.dim() && valid.sym_sizes() == indices.sym_sizes() &&
                  indices.sym_sizes().slice(0, lead) == labels.sym_sizes().slice(0, lead),
              "syncfree.", op,
              ": indices and valid must have shape labels.shape[:-1] + [K], got ",
              indices.sym_sizes(), " and ", valid.sym_sizes(), " for labels of shape ",
              labels.sym_sizes());
  TORCH_CHECK(indices.device() == labels.device() && valid.device() == labels.device(),
              "syncfree.", op, ": indices and valid must be on the labels' device ",
              labels.device(), ", got ", indices.device(), " and ", valid.device());
}

void check_gather_sampled_args(const at::Tensor& features, const at::Tensor& labels,
                               const at::Tensor& indices, const at::Tensor& valid) {
  check_gather_args("balanced_sample_gather", features, labels);
  check_label_dtype(labels, "_gather_sampled");
  check_sample_args_of_gather("_gather_sampled", labels, indices, valid);
}

GatherShape gather_shape(const at::Tensor& features, const at::Tensor& labels,
                         const at::Tensor& indices) {
  return {num_rows(labels).expect_int(), labels.size(-1), indices.size(-1),
          feature_width(features, labels.dim()).expect_int()};
}

std::tuple<at::Tensor, at::Tensor> empty_gather_outputs(const at::Tensor& features,
                                                        const at::Tensor& labels,
                                                        const at::Tensor& indices) {
  return {at::empty_symint(sampled_feature_sizes(features, labels, indices.sym_size(-1)),
                           features.options()),
          at::empty_symint(indices.sym_sizes(), labels.options().dtype(at::kLong))};
}

std::tuple<at::Tensor, at::Tensor> empty_sample_outputs(const at::Tensor& labels,
                                                        int64_t num_samples) {
  const auto sizes = output_sizes(labels, num_samples);
  return {at::empty_symint(sizes, labels.options().dtype(at::kLong)),
          at::empty_symint(sizes, labels.options().dtype(at::kBool))};
}

core::SampleParams check_sample_args(const at::Tensor& labels, int64_t num_samples,
                                     double positive_fraction, int64_t negative_label,
                                     bool fill_positives, const c10::optional<int64_t>& seed,
                                     const c10::optional<at::Generator>& generator) {
  TORCH_CHECK(labels.defined(), "syncfree.balanced_sample: labels must be a defined tensor");
  TORCH_CHECK(labels.dim() >= 1,
              "syncfree.balanced_sample: labels must have at least 1 dimension (shape [..., N]), "
              "got a 0-dim tensor");
  check_label_dtype(labels, "balanced_sample");
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
  // Checked on concrete sizes only: a symbolic batch (torch.compile tracing)
  // would get a guard for nothing, and the real kernel checks again.
  const c10::SymInt rows = num_rows(labels);
  const c10::optional<int64_t> known_rows = known_int(rows);
  TORCH_CHECK(num_samples == 0 || !known_rows.has_value() ||
                  *known_rows <= std::numeric_limits<int64_t>::max() / num_samples,
              "syncfree.balanced_sample: the output would have ", rows, " x ", num_samples,
              " elements, more than int64 can index");
  core::SampleParams p;
  p.num_samples = num_samples;
  p.positive_fraction = positive_fraction;
  p.negative_label = negative_label;
  p.fill_positives = fill_positives;
  return p;
}

std::tuple<at::Tensor, at::Tensor> gather_sampled_generic(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid) {
  check_gather_sampled_args(features, labels, indices, valid);
  const GatherShape g = gather_shape(features, labels, indices);
  const int64_t rows = g.rows, n = g.n, k = g.k, width = g.width;
  const auto out_sizes = sampled_feature_sizes(features, labels, k);
  if (n == 0) {  // nothing to gather from: every slot is invalid
    return {at::zeros_symint(out_sizes, features.options()),
            at::full_symint(output_sizes(labels, k), -1, labels.options().dtype(at::kLong))};
  }
  // Invalid slots read their row's element 0, then are masked. A valid slot
  // whose index is outside [0, n) counts as invalid (checking would sync).
  const at::Tensor index_raw = indices.reshape({rows, k});
  const at::Tensor index = index_raw.clamp(0, n - 1);
  const at::Tensor invalid = valid.reshape({rows, k}).logical_not().logical_or_(index != index_raw);
  return {features.reshape({rows, n, width})
              .gather(1, index.unsqueeze(2).expand({rows, k, width}))
              .masked_fill_(invalid.unsqueeze(2), 0)
              .reshape_symint(out_sizes),
          labels.reshape({rows, n})
              .gather(1, index)
              .to(at::kLong)
              .masked_fill_(invalid, -1)
              .reshape_symint(output_sizes(labels, k))};
}

std::tuple<at::Tensor, at::Tensor> gather_sampled_meta(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  check_gather_sampled_args(features, labels, indices, valid);
  return empty_gather_outputs(features, labels, indices);
}

at::Tensor gather_sampled_backward(const at::Tensor& grad, const at::Tensor& indices,
                                   const at::Tensor& valid, const c10::SymInt& n) {
  if (!grad.defined()) return at::Tensor();
  // features: indices.shape[:-1] + [n] + F; grad: indices.shape + F.
  std::vector<c10::SymInt> sizes(grad.sym_sizes().begin(), grad.sym_sizes().end());
  sizes[static_cast<size_t>(indices.dim() - 1)] = n;
  const c10::SymInt rows = num_rows(indices);
  const c10::SymInt k = indices.sym_size(-1);
  const c10::SymInt width = feature_width(grad, indices.dim());
  // A slot adds its gradient only when valid and in [0, n) (the forward
  // treats an out-of-range index as an invalid slot); the others add zeros
  // at index 0, so scatter_add never sees an out-of-range index.
  const at::Tensor slot = indices.reshape_symint({rows, k, 1});
  const at::Tensor used = valid.reshape_symint({rows, k, 1})
                              .logical_and(slot.ge(0))
                              .logical_and(slot.lt(c10::Scalar(n)));
  const at::Tensor index =
      slot.masked_fill(used.logical_not(), 0).expand_symint({rows, k, width});
  const at::Tensor g = grad.reshape_symint({rows, k, width}).masked_fill(used.logical_not(), 0);
  at::Tensor grad_features = at::zeros_symint({rows, n, width}, grad.options());
  if (n > 0) grad_features.scatter_add_(1, index, g);  // n == 0: every slot is invalid
  return grad_features.view_symint(sizes);
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
  return empty_sample_outputs(labels, num_samples);
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

using GatherSampledFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                           const at::Tensor&, const at::Tensor&);

std::tuple<at::Tensor, at::Tensor> call_gather_sampled(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::_gather_sampled", "")
                       .typed<GatherSampledFn>();
  return op.call(features, labels, indices, valid);
}

// balanced_sample, then _gather_sampled; also returns the indices (for backward).
struct GatherResult {
  at::Tensor features, labels, valid, indices;
};

GatherResult sample_then_gather(const at::Tensor& features, const at::Tensor& labels,
                                int64_t num_samples, double positive_fraction,
                                int64_t negative_label, bool fill_positives,
                                c10::optional<int64_t> seed,
                                c10::optional<at::Generator> generator) {
  check_gather_args("balanced_sample_gather", features, labels);
  GatherResult r;
  std::tie(r.indices, r.valid) =
      call_balanced_sample(labels, num_samples, positive_fraction, negative_label,
                           fill_positives, std::move(seed), std::move(generator));
  std::tie(r.features, r.labels) = call_gather_sampled(features, labels, r.indices, r.valid);
  return r;
}

// Below autograd (any backend, Meta included).
std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather_forward(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  GatherResult r = sample_then_gather(features, labels, num_samples, positive_fraction,
                                      negative_label, fill_positives, std::move(seed),
                                      std::move(generator));
  return {r.features, r.labels, r.valid};
}

// Autograd: d sampled_features / d features scatters each valid slot's
// gradient back to its row (scatter_add), so it works on every backend. The
// valid slots of a row hold distinct indices and invalid slots add zeros, so
// the sum has no order dependence. Sizes are SymInts: under torch.compile the
// forward and backward run on fake tensors whose sizes may be symbolic.
class GatherFunction : public torch::autograd::Function<GatherFunction> {
 public:
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, const at::Tensor& features, const at::Tensor& labels,
      int64_t num_samples, double positive_fraction, int64_t negative_label, bool fill_positives,
      c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
    at::AutoDispatchBelowADInplaceOrView guard;
    GatherResult r = sample_then_gather(features, labels, num_samples, positive_fraction,
                                        negative_label, fill_positives, std::move(seed),
                                        std::move(generator));
    ctx->save_for_backward({r.indices, r.valid});
    ctx->saved_data["n"] = labels.sym_size(-1);
    ctx->mark_non_differentiable({r.labels, r.valid});
    return {r.features, r.labels, r.valid};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& indices = saved[0];
    const at::Tensor& valid = saved[1];
    const c10::SymInt n = ctx->saved_data["n"].toSymInt();
    const at::Tensor grad_features = gather_sampled_backward(grads[0], indices, valid, n);
    return {grad_features, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(),  at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather_autograd(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    c10::optional<int64_t> seed, c10::optional<at::Generator> generator) {
  if (!(features.requires_grad() && at::GradMode::is_enabled())) {
    // Nothing to differentiate: skip the autograd node (and its bookkeeping).
    at::AutoDispatchBelowADInplaceOrView guard;
    return balanced_sample_gather_forward(features, labels, num_samples, positive_fraction,
                                          negative_label, fill_positives, std::move(seed),
                                          std::move(generator));
  }
  auto out = GatherFunction::apply(features, labels, num_samples, positive_fraction,
                                   negative_label, fill_positives, std::move(seed),
                                   std::move(generator));
  return {out[0], out[1], out[2]};
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
  // Internal: the gather step of balanced_sample_gather (no autograd of its own).
  m.def(
      "_gather_sampled(Tensor features, Tensor labels, Tensor indices, Tensor valid) "
      "-> (Tensor sampled_features, Tensor sampled_labels)");
}

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_cpu));
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_cpu));
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("balanced_sample", TORCH_FN(syncfree::ops::balanced_sample_meta));
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_meta));
}

// Any backend without a kernel of its own gathers with ATen ops.
TORCH_LIBRARY_IMPL(syncfree, CompositeExplicitAutograd, m) {
  m.impl("balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_forward));
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_generic));
}

TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("balanced_sample_gather", TORCH_FN(syncfree::ops::balanced_sample_gather_autograd));
}

// balanced_sample has no differentiable output: autograd passes straight
// through to the backend kernel.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("balanced_sample", torch::CppFunction::makeFallthrough());
}
