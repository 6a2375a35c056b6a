#include "baselines.h"

#include <algorithm>
#include <vector>

namespace syncfree {
namespace baselines {

Sample naive_sample(const at::Tensor& features, const at::Tensor& labels, int64_t num_samples) {
  const at::Tensor positive = at::nonzero(labels == 1).squeeze(1);
  const at::Tensor negative = at::nonzero(labels == 0).squeeze(1);
  const int64_t P = positive.numel();  // numel of a data-dependent shape: a host sync
  const int64_t Q = negative.numel();
  int64_t num_pos = std::min(P, num_samples / 2);
  const int64_t num_neg = std::min(Q, num_samples - num_pos);
  num_pos = std::min(P, num_samples - num_neg);
  const auto index_opts = labels.options().dtype(at::kLong);
  const at::Tensor pos = positive.index_select(0, at::randperm(P, index_opts).slice(0, 0, num_pos));
  const at::Tensor neg = negative.index_select(0, at::randperm(Q, index_opts).slice(0, 0, num_neg));
  at::Tensor indices = at::cat({pos, neg});
  indices = indices.index_select(0, at::randperm(indices.numel(), index_opts));
  return {features.index_select(0, indices), labels.index_select(0, indices), indices};
}

Sample naive_sample_batched(const at::Tensor& features, const at::Tensor& labels,
                            int64_t num_samples) {
  std::vector<at::Tensor> f, l, i;
  for (int64_t r = 0; r < labels.size(0); ++r) {
    Sample s = naive_sample(features[r], labels[r], num_samples);
    f.push_back(s.features);
    l.push_back(s.labels);
    i.push_back(s.indices);
  }
  return {at::stack(f), at::stack(l), at::stack(i)};
}

Sample topk_sample(const at::Tensor& features, const at::Tensor& labels, int64_t num_samples) {
  const int64_t K = num_samples;
  const at::Tensor pos_mask = labels == 1;
  const at::Tensor neg_mask = labels == 0;
  const at::Tensor P = pos_mask.sum(-1, /*keepdim=*/true);
  const at::Tensor Q = neg_mask.sum(-1, /*keepdim=*/true);
  at::Tensor num_pos = at::clamp_max(P, K / 2);
  const at::Tensor num_neg = at::minimum(Q, K - num_pos);
  num_pos = at::minimum(P, K - num_neg);

  const at::Tensor keys = at::rand(labels.sizes(), labels.options().dtype(at::kFloat));
  const at::Tensor none = at::full({}, -1.0f, keys.options());
  at::Tensor pos_keys, pos_idx, neg_keys, neg_idx;
  std::tie(pos_keys, pos_idx) = at::topk(at::where(pos_mask, keys, none), K);
  std::tie(neg_keys, neg_idx) = at::topk(at::where(neg_mask, keys, none), K);
  const at::Tensor rank = at::arange(K, labels.options().dtype(at::kLong));
  pos_keys = at::where(rank < num_pos, pos_keys, none);
  neg_keys = at::where(rank < num_neg, neg_keys, none);
  at::Tensor merged_keys, merged_at;
  std::tie(merged_keys, merged_at) = at::topk(at::cat({pos_keys, neg_keys}, -1), K);
  const at::Tensor indices = at::cat({pos_idx, neg_idx}, -1).gather(-1, merged_at);
  const at::Tensor valid = merged_keys >= 0;

  const int64_t F = features.size(-1);
  std::vector<int64_t> expand(indices.sizes().begin(), indices.sizes().end());
  expand.push_back(F);
  const at::Tensor sampled = features.gather(-2, indices.unsqueeze(-1).expand(expand));
  return {sampled * valid.unsqueeze(-1), at::where(valid, labels.gather(-1, indices), -1),
          indices};
}

}  // namespace baselines
}  // namespace syncfree
