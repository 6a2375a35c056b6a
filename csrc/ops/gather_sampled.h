// gather_sampled: the features and labels of a sample, differentiably. Two
// schemas: the public gather_sampled (checks, Autograd kernel, backward) and
// the internal _gather_sampled, the gather below autograd that the backends
// implement (cpu/gather_sampled_cpu.cpp, cuda/gather_sampled_cuda.cpp; a
// shape-only Meta kernel and a generic one built from ATen ops live in
// gather_sampled.cpp). Messages name gather_sampled, or the *_gather op that
// runs the checks on its own arguments.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <tuple>

namespace syncfree {
namespace ops {

// features [..., N, *F] and labels [..., N] of every gather: labels as every
// op takes them (check_labels), features defined, leading shapes that agree,
// one device.
void check_gather_inputs(const char* op, const at::Tensor& features, const at::Tensor& labels);

// The arguments of gather_sampled: check_gather_inputs, then indices int64
// and valid bool, both defined, of shape labels.shape[:-1] + [K], on the
// labels' device.
void check_gather_sampled_args(const char* op, const at::Tensor& features,
                               const at::Tensor& labels, const at::Tensor& indices,
                               const at::Tensor& valid);

// Concrete shapes of a gather, for the backend kernels: features viewed as
// [rows, n, width], k slots per row.
struct GatherShape {
  int64_t rows, n, k, width;
};
GatherShape gather_shape(const at::Tensor& features, const at::Tensor& labels,
                         const at::Tensor& indices);

// Uninitialized outputs of a gather: sampled features [..., K, *F] and int64
// labels [..., K] (symbolic sizes allowed); `op` names the op the user called
// in an allocation error.
std::tuple<at::Tensor, at::Tensor> empty_gather_outputs(const char* op, const at::Tensor& features,
                                                        const at::Tensor& labels,
                                                        const at::Tensor& indices);

// The public gather_sampled through the dispatcher (autograd included): what
// the *_gather ops call after sampling.
std::tuple<at::Tensor, at::Tensor> call_gather_sampled(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid);

// The generic gather (registered for _gather_sampled as
// CompositeExplicitAutograd: any backend without a kernel of its own), built
// from ATen ops. A valid slot whose index is outside [0, N) counts as invalid
// (checking would sync); the CPU kernel rejects it.
std::tuple<at::Tensor, at::Tensor> gather_sampled_generic(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid);

// Backward of the gather: grad [..., K, *F] of the sampled features ->
// gradient of features [..., n, *F]; each valid slot whose index is in
// [0, n) adds its gradient to its feature row (scatter_add, any backend; the
// valid indices of a sample are distinct, other slots add zeros). An
// undefined grad gives an undefined tensor.
at::Tensor gather_sampled_backward(const at::Tensor& grad, const at::Tensor& indices,
                                   const at::Tensor& valid, const c10::SymInt& n);

// --- the fused *_gather ops ----------------------------------------------------------
// balanced_sample_gather and stratified_sample_gather each call an internal
// op, _<op>, that samples and gathers in one kernel per backend and also
// returns the indices: (sampled_features, sampled_labels, valid, indices).
// The public op drops the indices (its CompositeExplicitAutograd kernel) and
// keeps them for its backward (its Autograd kernel, sample_gather_autograd).
using SampleGatherOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Uninitialized outputs of a fused op (`op` names the public op in an
// allocation error): sampled features [..., K, *F], int64 labels [..., K],
// valid and indices as empty_sample_outputs (symbolic sizes allowed).
SampleGatherOutputs empty_sample_gather_outputs(const char* op, const at::Tensor& features,
                                                const at::Tensor& labels, int64_t num_samples);

// The public op's outputs: the fused op's, without the indices.
std::tuple<at::Tensor, at::Tensor, at::Tensor> drop_indices(const SampleGatherOutputs& out);

// The public op's Autograd kernel: `fused` (the internal op through the
// dispatcher) runs below autograd; when features need a gradient, its
// outputs get a node whose backward is gather_sampled_backward with the
// indices and valid it returned.
std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_gather_autograd(
    const at::Tensor& features, const at::Tensor& labels,
    c10::function_ref<SampleGatherOutputs()> fused);

}  // namespace ops
}  // namespace syncfree
