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

// Row-major indices into features viewed as [rows * n, ...] for the slots'
// indices [..., K]; invalid slots (-1) point at their row's element 0.
at::Tensor flat_gather_index(const at::Tensor& indices, int64_t rows, int64_t n);

// A generator given for a call must live on the labels' device (type and
// index). Called by the backends that draw from generators.
void check_generator_device(const c10::optional<at::Generator>& generator,
                            const at::Device& device);

// features [..., N, *F] and labels [..., N] of balanced_sample_gather: shapes
// that agree, one device.
void check_gather_args(const at::Tensor& features, const at::Tensor& labels);

// The arguments of _gather_sampled: check_gather_args, then indices int64 and
// valid bool, both of shape labels.shape[:-1] + [K], on the labels' device.
void check_gather_sampled_args(const at::Tensor& features, const at::Tensor& labels,
                               const at::Tensor& indices, const at::Tensor& valid);

// Shape of the outputs: labels.shape[:-1] + [num_samples].
std::vector<int64_t> output_sizes(const at::Tensor& labels, int64_t num_samples);

// Number of rows: the product of labels.shape[:-1] (1 for 1-d labels).
int64_t num_rows(const at::Tensor& labels);

// Uninitialized (indices int64, valid bool) of shape labels.shape[:-1] + [num_samples].
std::tuple<at::Tensor, at::Tensor> empty_sample_outputs(const at::Tensor& labels,
                                                        int64_t num_samples);

// Shapes of the gather: features [..., N, *F] viewed as [rows, n, width],
// sampled features of shape labels.shape[:-1] + [k] + F.
struct GatherShape {
  int64_t rows, n, k, width;
  std::vector<int64_t> out_features;
};
GatherShape gather_shape(const at::Tensor& features, const at::Tensor& labels, int64_t k);

// Backend kernels (registered in balanced_sample.cpp and the backend files).
std::tuple<at::Tensor, at::Tensor> balanced_sample_cpu(const at::Tensor& labels,
                                                       int64_t num_samples,
                                                       double positive_fraction,
                                                       int64_t negative_label, bool fill_positives,
                                                       c10::optional<int64_t> seed,
                                                       c10::optional<at::Generator> generator);

// The gather step: sampled features [..., K, *F] and int64 labels [..., K]
// for (indices, valid) from balanced_sample; zero features and label -1 in
// invalid slots. A generic version built from ATen ops, and a fused CPU one.
std::tuple<at::Tensor, at::Tensor> gather_sampled_generic(const at::Tensor& features,
                                                          const at::Tensor& labels,
                                                          const at::Tensor& indices,
                                                          const at::Tensor& valid);
std::tuple<at::Tensor, at::Tensor> gather_sampled_cpu(const at::Tensor& features,
                                                      const at::Tensor& labels,
                                                      const at::Tensor& indices,
                                                      const at::Tensor& valid);

}  // namespace ops
}  // namespace syncfree
