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

void check_public_gather_args(const at::Tensor& features, const at::Tensor& labels,
                              const at::Tensor& indices, const at::Tensor& valid) {
  check_gather_args("gather_sampled", features, labels);
  check_sample_args_of_gather("gather_sampled", labels, indices, valid);
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
