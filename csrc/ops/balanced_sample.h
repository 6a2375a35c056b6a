// Internal declarations shared by the operator registration and the backends.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <cstdint>

#include "core/row_plan.h"

namespace syncfree {
namespace ops {

// The one set of argument checks of balanced_sample, run by every backend
// (CPU, CUDA, Meta). Returns the call's parameters with seed/offset unset:
// drawing them is the backend's job.
core::SampleParams check_sample_args(const at::Tensor& labels, int64_t num_samples,
                                     double positive_fraction, int64_t negative_label,
                                     bool fill_positives, const c10::optional<int64_t>& seed,
                                     const c10::optional<at::Generator>& generator);

// The label dtype check of every op: bool or an integer dtype (`op` names
// the operator in the message).
void check_label_dtype(const at::Tensor& labels, const char* op);

// A generator given for a call must live on the labels' device (type and
// index). Called by the backends that draw from generators.
void check_generator_device(const c10::optional<at::Generator>& generator,
                            const at::Device& device);

// features [..., N, *F] and labels [..., N] of every gather: shapes that
// agree, one device (`op` names the operator in the messages).
void check_gather_args(const char* op, const at::Tensor& features, const at::Tensor& labels);

// The sample a gather is given: indices int64 and valid bool, both defined,
// of shape labels.shape[:-1] + [K], on the labels' device.
void check_sample_args_of_gather(const char* op, const at::Tensor& labels,
                                 const at::Tensor& indices, const at::Tensor& valid);

// The arguments of _gather_sampled: check_gather_args, the label dtype, then
// check_sample_args_of_gather.
void check_gather_sampled_args(const at::Tensor& features, const at::Tensor& labels,
                               const at::Tensor& indices, const at::Tensor& valid);

// Shapes are computed as SymInts so that the same code serves the Meta
// kernels under torch.compile with dynamic shapes (where sizes may be
// symbolic) and the real kernels (where they are plain integers: backends
// take .expect_int()).

// Shape of the outputs: labels.shape[:-1] + [num_samples].
std::vector<c10::SymInt> output_sizes(const at::Tensor& labels, int64_t num_samples);

// Number of rows: the product of labels.shape[:-1] (1 for 1-d labels).
c10::SymInt num_rows(const at::Tensor& labels);

// Uninitialized (indices int64, valid bool) of shape labels.shape[:-1] + [num_samples].
std::tuple<at::Tensor, at::Tensor> empty_sample_outputs(const at::Tensor& labels,
                                                        int64_t num_samples);

// Shape of the sampled features: labels.shape[:-1] + [k] + F for features
// [..., N, *F].
std::vector<c10::SymInt> sampled_feature_sizes(const at::Tensor& features,
                                               const at::Tensor& labels, const c10::SymInt& k);

// The product of F (1 when features has labels' shape).
c10::SymInt feature_width(const at::Tensor& features, int64_t label_dim);

// Concrete shapes of a gather, for the backend kernels: features viewed as
// [rows, n, width], k slots per row.
struct GatherShape {
  int64_t rows, n, k, width;
};
GatherShape gather_shape(const at::Tensor& features, const at::Tensor& labels,
                         const at::Tensor& indices);

// Uninitialized outputs of a gather: sampled features [..., K, *F] and int64
// labels [..., K] (symbolic sizes allowed).
std::tuple<at::Tensor, at::Tensor> empty_gather_outputs(const at::Tensor& features,
                                                        const at::Tensor& labels,
                                                        const at::Tensor& indices);

// Backward of a gather (balanced_sample_gather, gather_sampled): grad
// [..., K, *F] of the sampled features -> gradient of features [..., n, *F];
// each valid slot adds its gradient to its feature row (scatter_add, any
// backend; the valid indices of a row are distinct, invalid slots add zeros).
// An undefined grad gives an undefined tensor.
at::Tensor gather_sampled_backward(const at::Tensor& grad, const at::Tensor& indices,
                                   const at::Tensor& valid, const c10::SymInt& n);

// Backend kernels (registered in balanced_sample.cpp and the backend files).
std::tuple<at::Tensor, at::Tensor> balanced_sample_cpu(const at::Tensor& labels,
                                                       int64_t num_samples,
                                                       double positive_fraction,
                                                       int64_t negative_label, bool fill_positives,
                                                       c10::optional<int64_t> seed,
                                                       c10::optional<at::Generator> generator);

// The gather step: sampled features [..., K, *F] and int64 labels [..., K]
// for (indices, valid) from balanced_sample; zero features and label -1 in
// invalid slots. A generic version built from ATen ops (for backends without
// a kernel of their own), a shape-only Meta one and a fused CPU one. A valid
// slot whose index is outside [0, N) (never produced by balanced_sample) is
// an error on the CPU and an invalid slot elsewhere (checking would sync).
std::tuple<at::Tensor, at::Tensor> gather_sampled_generic(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid);
std::tuple<at::Tensor, at::Tensor> gather_sampled_meta(const at::Tensor& features,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& valid);
std::tuple<at::Tensor, at::Tensor> gather_sampled_cpu(const at::Tensor& features,
                                                      const at::Tensor& labels,
                                                      const at::Tensor& indices,
                                                      const at::Tensor& valid);

}  // namespace ops
}  // namespace syncfree
