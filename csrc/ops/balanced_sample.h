// balanced_sample (and balanced_sample_gather, the sample and its gather in
// one pass): what the op's backends share with its op file.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

#include "core/row_plan.h"

namespace syncfree {
namespace ops {

// The one set of argument checks of balanced_sample, run by every backend
// (CPU, CUDA, Meta) and by balanced_sample_gather (`op` names the op called):
// labels, num_samples, positive_fraction in [0, 1], negative_label >= 0,
// seed and generator not both. Returns the call's parameters with
// seed/offset unset: drawing them is the backend's job.
core::BalancedParams check_balanced_sample_args(const char* op, const at::Tensor& labels,
                                                int64_t num_samples, double positive_fraction,
                                                int64_t negative_label, bool fill_positives,
                                                const c10::optional<int64_t>& seed,
                                                const c10::optional<at::Generator>& generator);

// The arguments of balanced_sample_gather (its fused op's kernels, every
// backend): check_gather_inputs, then check_balanced_sample_args, messages
// naming balanced_sample_gather.
core::BalancedParams check_balanced_sample_gather_args(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    double positive_fraction, int64_t negative_label, bool fill_positives,
    const c10::optional<int64_t>& seed, const c10::optional<at::Generator>& generator);

}  // namespace ops
}  // namespace syncfree
