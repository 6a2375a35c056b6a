// The public, differentiable gather: gather_sampled(features, labels, indices,
// valid) for the (indices, valid) of any sampler of this library
// (balanced_sample, stratified_sample). The backend kernels are those of the
// internal _gather_sampled (fused CPU, CUDA, Meta, generic ATen); this file
// adds the schema, an Autograd kernel and the C++ API.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/balanced_sample.h"
#include "ops/stratified_sample.h"
#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

void check_features_and_labels(const char* op, const at::Tensor& features,
                               const at::Tensor& labels) {
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

void check_public_gather_args(const at::Tensor& features, const at::Tensor& labels,
                              const at::Tensor& indices, const at::Tensor& valid) {
  check_features_and_labels("gather_sampled", features, labels);
  TORCH_CHECK(indices.defined() && valid.defined(),
              "syncfree.gather_sampled: indices and valid must be defined tensors");
  TORCH_CHECK(indices.scalar_type() == at::kLong && valid.scalar_type() == at::kBool,
              "syncfree.gather_sampled: indices must be int64 and valid bool, got ",
              indices.scalar_type(), " and ", valid.scalar_type());
  const size_t lead = static_cast<size_t>(labels.dim() - 1);
  TORCH_CHECK(indices.dim() == labels.dim() && valid.sym_sizes() == indices.sym_sizes() &&
                  indices.sym_sizes().slice(0, lead) == labels.sym_sizes().slice(0, lead),
              "syncfree.gather_sampled: indices and valid must have shape labels.shape[:-1] + "
              "[K], got ",
              indices.sym_sizes(), " and ", valid.sym_sizes(), " for labels of shape ",
              labels.sym_sizes());
  TORCH_CHECK(indices.device() == labels.device() && valid.device() == labels.device(),
              "syncfree.gather_sampled: indices and valid must be on the labels' device ",
              labels.device(), ", got ", indices.device(), " and ", valid.device());
}

namespace {

using GatherSampledFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                           const at::Tensor&, const at::Tensor&);

std::tuple<at::Tensor, at::Tensor> call_internal_gather(const at::Tensor& features,
                                                        const at::Tensor& labels,
                                                        const at::Tensor& indices,
                                                        const at::Tensor& valid) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::_gather_sampled", "")
                       .typed<GatherSampledFn>();
  return op.call(features, labels, indices, valid);
}

// Below autograd (inference, Meta, any backend).
std::tuple<at::Tensor, at::Tensor> gather_sampled_forward(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid) {
  check_public_gather_args(features, labels, indices, valid);
  return call_internal_gather(features, labels, indices, valid);
}

// d sampled_features / d features: gather_sampled_backward (scatter_add of the
// valid slots' gradients). Indices come from the caller here, so a valid slot
// whose index is outside [0, N) counts as invalid in backward too (as in the
// generic forward; the CPU forward rejects it).
class PublicGatherFunction : public torch::autograd::Function<PublicGatherFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& features,
                                                const at::Tensor& labels,
                                                const at::Tensor& indices,
                                                const at::Tensor& valid) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out_features, out_labels;
    std::tie(out_features, out_labels) = call_internal_gather(features, labels, indices, valid);
    const c10::SymInt n = labels.sym_size(-1);
    const at::Tensor in_range =
        valid.logical_and(indices.ge(0)).logical_and_(indices.lt(c10::Scalar(n)));
    ctx->save_for_backward({indices, in_range});
    ctx->saved_data["n"] = n;
    ctx->mark_non_differentiable({out_labels});
    return {out_features, out_labels};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const c10::SymInt n = ctx->saved_data["n"].toSymInt();
    return {gather_sampled_backward(grads[0], saved[0], saved[1], n), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> gather_sampled_autograd(const at::Tensor& features,
                                                           const at::Tensor& labels,
                                                           const at::Tensor& indices,
                                                           const at::Tensor& valid) {
  check_public_gather_args(features, labels, indices, valid);  // before building a node
  if (!(features.requires_grad() && at::GradMode::is_enabled())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_internal_gather(features, labels, indices, valid);
  }
  auto out = PublicGatherFunction::apply(features, labels, indices, valid);
  return {out[0], out[1]};
}

}  // namespace
}  // namespace ops

std::tuple<at::Tensor, at::Tensor> gather_sampled(const at::Tensor& features,
                                                  const at::Tensor& labels,
                                                  const at::Tensor& indices,
                                                  const at::Tensor& valid) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::gather_sampled", "")
                       .typed<ops::GatherSampledFn>();
  return op.call(features, labels, indices, valid);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def(
      "gather_sampled(Tensor features, Tensor labels, Tensor indices, Tensor valid) "
      "-> (Tensor sampled_features, Tensor sampled_labels)");
}

TORCH_LIBRARY_IMPL(syncfree, CompositeExplicitAutograd, m) {
  m.impl("gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_forward));
}

TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_autograd));
}
