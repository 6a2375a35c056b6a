// Internal declarations of stratified_sample shared by the operator
// registration (stratified_sample.cpp) and the backends.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <cstdint>

#include "core/stratified.h"

namespace syncfree {
namespace ops {

// The one set of argument checks of stratified_sample, run by every backend
// (CPU, Meta, and any other) before anything is drawn from a generator:
// labels [..., N] bool or integer; num_samples >= 0; class_quota an int64
// tensor [C] or [..., C] (leading dimensions those of labels), C >= 1, on the
// labels' device; seed and generator not both. Quota values are data and are
// not checked (a host check would synchronize with the device).
void check_stratified_args(const at::Tensor& labels, int64_t num_samples,
                           const at::Tensor& class_quota, const c10::optional<int64_t>& seed,
                           const c10::optional<at::Generator>& generator);

// Host-side check of quotas given as numbers (the C++ API's vector overload;
// the Python wrapper does the same for a list): every quota >= 0, their sum
// <= num_samples, at least one class.
void check_host_quota(c10::ArrayRef<int64_t> class_quota, int64_t num_samples);

// The arguments of the public gather_sampled: check_gather_args, then
// check_sample_args_of_gather (ops/balanced_sample.h).
void check_public_gather_args(const at::Tensor& features, const at::Tensor& labels,
                              const at::Tensor& indices, const at::Tensor& valid);

std::tuple<at::Tensor, at::Tensor> stratified_sample_cpu(const at::Tensor& labels,
                                                         int64_t num_samples,
                                                         const at::Tensor& class_quota, bool fill,
                                                         c10::optional<int64_t> seed,
                                                         c10::optional<at::Generator> generator);

}  // namespace ops
}  // namespace syncfree
