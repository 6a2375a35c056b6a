// Reference samplers for benchmarks and cross-checks: the two ways balanced
// sampling is usually written in PyTorch, in ATen C++. Not part of the public
// API. Settings of the reference experiments: labels in {0, 1} (1 positive,
// 0 negative), int64; half positives; each class fills what the other lacks.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace syncfree {
namespace baselines {

struct Sample {
  at::Tensor features;  // [..., K, F]
  at::Tensor labels;    // [..., K]
  at::Tensor indices;   // [..., K]
};

// The "naive" sampler for one row labels [N], features [N, F]: nonzero +
// randperm with Python-int quotas. Shapes depend on the data, so the host
// reads counts back from the device (on CUDA: one sync per nonzero and per
// count read).
Sample naive_sample(const at::Tensor& features, const at::Tensor& labels, int64_t num_samples);

// The naive sampler applied to a batch [B, N] by a loop over rows, stacked.
// Every row must yield num_samples items (true for labels in {0, 1}, N >= K).
Sample naive_sample_batched(const at::Tensor& features, const at::Tensor& labels,
                            int64_t num_samples);

// The static "topk" sampler on [..., N] (any leading dims): count_nonzero for
// the quotas as device tensors, one random key per item, top-k of each class,
// invalidation past the quota, and a top-k merge. No host sync; three top-k
// passes. Invalid slots (fewer candidates than K) hold whatever index top-k
// returned there, zero features and label -1.
Sample topk_sample(const at::Tensor& features, const at::Tensor& labels, int64_t num_samples);

}  // namespace baselines
}  // namespace syncfree
