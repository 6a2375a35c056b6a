// gather_sampled: both gather schemas (the public, differentiable
// gather_sampled and the internal _gather_sampled below autograd), their
// checks, the Meta and the generic kernels, the backward and the C++ API.
// The CPU and CUDA kernels of _gather_sampled live in
// cpu/gather_sampled_cpu.cpp and cuda/gather_sampled_cuda.cpp.
#include "ops/gather_sampled.h"

#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/common.h"
#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

void check_gather_inputs(const char* op, const at::Tensor& features, const at::Tensor& labels) {
  check_labels(op, labels);
  TORCH_CHECK(features.defined(), "syncfree.", op, ": features must be a defined tensor");
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

void check_gather_sampled_args(const char* op, const at::Tensor& features,
                               const at::Tensor& labels, const at::Tensor& indices,
                               const at::Tensor& valid) {
  check_gather_inputs(op, features, labels);
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

GatherShape gather_shape(const at::Tensor& features, const at::Tensor& labels,
                         const at::Tensor& indices) {
  return {num_rows(labels).expect_int(), labels.size(-1), indices.size(-1),
          feature_width(features, labels.dim()).expect_int()};
}

std::tuple<at::Tensor, at::Tensor> empty_gather_outputs(const char* op, const at::Tensor& features,
                                                        const at::Tensor& labels,
                                                        const at::Tensor& indices) {
  const auto subject = [&] {
    return shape_subject("features", features) + " and " + shape_subject("indices", indices);
  };
  return {allocate(op, subject, "sampled_features",
                   sampled_feature_sizes(features, labels, indices.sym_size(-1)),
                   features.options()),
          allocate(op, subject, "sampled_labels", indices.sym_sizes(),
                   labels.options().dtype(at::kLong))};
}

namespace {

using GatherFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, const at::Tensor&);

// The internal _gather_sampled through the dispatcher (below autograd).
std::tuple<at::Tensor, at::Tensor> call_internal_gather(const at::Tensor& features,
                                                        const at::Tensor& labels,
                                                        const at::Tensor& indices,
                                                        const at::Tensor& valid) {
  static auto op = find_op<GatherFn>("syncfree::_gather_sampled");
  return op.call(features, labels, indices, valid);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> call_gather_sampled(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  static auto op = find_op<GatherFn>("syncfree::gather_sampled");
  return op.call(features, labels, indices, valid);
}

std::tuple<at::Tensor, at::Tensor> gather_sampled_generic(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
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
  // Unsigned labels of more than 8 bits have few ATen kernels ("barebones"
  // dtypes): they are widened to int64 (what the output holds) before the
  // gather.
  at::Tensor label_rows = labels.reshape({rows, n});
  const at::ScalarType t = labels.scalar_type();
  if (t == at::kUInt16 || t == at::kUInt32 || t == at::kUInt64) {
    label_rows = label_rows.to(at::kLong);
  }
  return {features.reshape({rows, n, width})
              .gather(1, index.unsqueeze(2).expand({rows, k, width}))
              .masked_fill_(invalid.unsqueeze(2), 0)
              .reshape_symint(out_sizes),
          label_rows.gather(1, index)
              .to(at::kLong)
              .masked_fill_(invalid, -1)
              .reshape_symint(output_sizes(labels, k))};
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

std::tuple<at::Tensor, at::Tensor> gather_sampled_meta(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
  return empty_gather_outputs("gather_sampled", features, labels, indices);
}

// Below autograd (inference, Meta, any backend).
std::tuple<at::Tensor, at::Tensor> gather_sampled_forward(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);
  return call_internal_gather(features, labels, indices, valid);
}

// The autograd node of a gather, gather_sampled's or a fused *_gather op's:
// `run` (below autograd) returns the sampled features and labels and the
// slots' valid and indices; the node's outputs are the sampled features and
// labels, and valid too when with_valid (a fused op's). Its backward is
// gather_sampled_backward with those indices and valid: indices that come
// from the caller (gather_sampled) may lie outside [0, N), and such a valid
// slot counts as invalid in backward too (as in the generic forward; the CPU
// forward rejects it).
class GatherNode : public torch::autograd::Function<GatherNode> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& features,
                                                const at::Tensor& labels,
                                                c10::function_ref<SampleGatherOutputs()> run,
                                                bool with_valid) {
    at::AutoDispatchBelowADInplaceOrView guard;
    const SampleGatherOutputs out = run();
    ctx->save_for_backward({std::get<3>(out), std::get<2>(out)});
    ctx->saved_data["n"] = labels.sym_size(-1);
    if (!with_valid) {
      ctx->mark_non_differentiable({std::get<1>(out)});
      return {std::get<0>(out), std::get<1>(out)};
    }
    ctx->mark_non_differentiable({std::get<1>(out), std::get<2>(out)});
    return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const c10::SymInt n = ctx->saved_data["n"].toSymInt();
    return {gather_sampled_backward(grads[0], saved[0], saved[1], n), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

// Whether a gather's outputs need a GatherNode: features that need a
// gradient (otherwise no node, and none of its bookkeeping).
bool needs_node(const at::Tensor& features) {
  return features.requires_grad() && at::GradMode::is_enabled();
}

std::tuple<at::Tensor, at::Tensor> gather_sampled_autograd(const at::Tensor& features,
                                                           const at::Tensor& labels,
                                                           const at::Tensor& indices,
                                                           const at::Tensor& valid) {
  check_gather_sampled_args("gather_sampled", features, labels, indices, valid);  // before a node
  if (!needs_node(features)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_internal_gather(features, labels, indices, valid);
  }
  const auto run = [&]() -> SampleGatherOutputs {
    at::Tensor out_features, out_labels;
    std::tie(out_features, out_labels) = call_internal_gather(features, labels, indices, valid);
    return {out_features, out_labels, valid, indices};
  };
  auto out = GatherNode::apply(features, labels, run, false);
  return {out[0], out[1]};
}

}  // namespace

SampleGatherOutputs empty_sample_gather_outputs(const char* op, const at::Tensor& features,
                                                const at::Tensor& labels, int64_t num_samples) {
  at::Tensor indices, valid;
  std::tie(indices, valid) = empty_sample_outputs(op, labels, num_samples);
  at::Tensor out_features, out_labels;
  std::tie(out_features, out_labels) = empty_gather_outputs(op, features, labels, indices);
  return {out_features, out_labels, valid, indices};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> drop_indices(const SampleGatherOutputs& out) {
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_gather_autograd(
    const at::Tensor& features, const at::Tensor& labels,
    c10::function_ref<SampleGatherOutputs()> fused) {
  if (!needs_node(features)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return drop_indices(fused());
  }
  auto out = GatherNode::apply(features, labels, fused, true);
  return {out[0], out[1], out[2]};
}

}  // namespace ops

std::tuple<at::Tensor, at::Tensor> gather_sampled(const at::Tensor& features,
                                                  const at::Tensor& labels,
                                                  const at::Tensor& indices,
                                                  const at::Tensor& valid) {
  return ops::call_gather_sampled(features, labels, indices, valid);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def(
      "gather_sampled(Tensor features, Tensor labels, Tensor indices, Tensor valid) "
      "-> (Tensor sampled_features, Tensor sampled_labels)");
  // Internal: the gather below autograd, which the backends implement.
  m.def(
      "_gather_sampled(Tensor features, Tensor labels, Tensor indices, Tensor valid) "
      "-> (Tensor sampled_features, Tensor sampled_labels)");
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_meta));
}

// gather_sampled below autograd on every backend; _gather_sampled with ATen
// ops on any backend without a kernel of its own.
TORCH_LIBRARY_IMPL(syncfree, CompositeExplicitAutograd, m) {
  m.impl("gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_forward));
  m.impl("_gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_generic));
}

TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("gather_sampled", TORCH_FN(syncfree::ops::gather_sampled_autograd));
}
