// stratified_sample (and stratified_sample_gather, the sample and its gather
// in one pass): what the op's backends share with its op file.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace syncfree {
namespace ops {

// The one set of argument checks of stratified_sample, run by every backend
// (CPU, CUDA, Meta) and by stratified_sample_gather (`op` names the op
// called) before anything is drawn from a generator: labels [..., N] bool or
// integer; num_samples >= 0; class_quota an int64 tensor [C] or [..., C]
// (leading dimensions those of labels), C >= 1, on the labels' device; seed
// and generator not both. Quota values are data and are not checked (a host
// check would synchronize with the device).
void check_stratified_sample_args(const char* op, const at::Tensor& labels, int64_t num_samples,
                                  const at::Tensor& class_quota,
                                  const c10::optional<int64_t>& seed,
                                  const c10::optional<at::Generator>& generator);

// Quotas given as numbers (the C++ API's vector overloads, and the Python
// wrappers' lists through the internal op _check_class_quota): at least one
// class, every quota >= 0, their sum <= num_samples.
void check_class_quota_values(const char* op, c10::ArrayRef<int64_t> class_quota,
                              int64_t num_samples);

// The arguments of stratified_sample_gather (its fused op's kernels, every
// backend): check_gather_inputs, then check_stratified_sample_args, messages
// naming stratified_sample_gather.
void check_stratified_sample_gather_args(const at::Tensor& features, const at::Tensor& labels,
                                         int64_t num_samples, const at::Tensor& class_quota,
                                         const c10::optional<int64_t>& seed,
                                         const c10::optional<at::Generator>& generator);

}  // namespace ops
}  // namespace syncfree
