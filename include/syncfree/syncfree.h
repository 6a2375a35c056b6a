// syncfree: static-shape, sync-free balanced subsampling for PyTorch (C++ API).
//
//   #include <syncfree/syncfree.h>
//   auto [indices, valid] = syncfree::balanced_sample(labels, 256);
//   auto [feats, labs, valid] = syncfree::balanced_sample_gather(features, labels, 256,
//       syncfree::SampleOptions().positive_fraction(0.25).seed(7));
//
// Both functions call the operators syncfree::balanced_sample and
// syncfree::balanced_sample_gather through the PyTorch dispatcher, so they
// run on whatever backend the inputs live on and compose with autograd.
// docs/operators.md documents the contract: label rule, quota rule, output
// layout, randomness and guarantees.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

namespace syncfree {

// Optional arguments of balanced_sample and balanced_sample_gather, with the
// operators' defaults (stratified_sample's are StratifiedOptions below).
struct SampleOptions {
  // Fraction of the K slots meant for positives: target = floor(K * fraction).
  SampleOptions& positive_fraction(double v) {
    positive_fraction_ = v;
    return *this;
  }
  // Label value of negatives (>= 0). Labels < 0 are ignored, others positive.
  SampleOptions& negative_label(int64_t v) {
    negative_label_ = v;
    return *this;
  }
  // If true, positives also fill slots that negatives leave empty.
  SampleOptions& fill_positives(bool v) {
    fill_positives_ = v;
    return *this;
  }
  // Fixed seed: identical results on every device. Excludes generator().
  SampleOptions& seed(int64_t v) {
    seed_ = v;
    return *this;
  }
  // Generator to draw from when no seed is given (default: the device's).
  SampleOptions& generator(at::Generator v) {
    generator_ = std::move(v);
    return *this;
  }

  double positive_fraction_ = 0.5;
  int64_t negative_label_ = 0;
  bool fill_positives_ = true;
  c10::optional<int64_t> seed_;
  c10::optional<at::Generator> generator_;
};

// labels [..., N] (bool or integer) -> (indices int64 [..., K], valid bool [..., K]).
std::tuple<at::Tensor, at::Tensor> balanced_sample(const at::Tensor& labels, int64_t num_samples,
                                                   const SampleOptions& options = SampleOptions());

// features [..., N, *F], labels [..., N] -> (sampled_features [..., K, *F],
// sampled_labels int64 [..., K], valid bool [..., K]). Invalid slots hold zero
// features and label -1. Differentiable with respect to features.
std::tuple<at::Tensor, at::Tensor, at::Tensor> balanced_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const SampleOptions& options = SampleOptions());

// Optional arguments of stratified_sample, with the operator's defaults.
struct StratifiedOptions {
  // If true, the slots the quotas leave are filled with a uniformly random
  // subset of the row's remaining labelled items (any class).
  StratifiedOptions& fill(bool v) {
    fill_ = v;
    return *this;
  }
  // Fixed seed: identical results on every device. Excludes generator().
  StratifiedOptions& seed(int64_t v) {
    seed_ = v;
    return *this;
  }
  // Generator to draw from when no seed is given (default: the device's).
  StratifiedOptions& generator(at::Generator v) {
    generator_ = std::move(v);
    return *this;
  }

  bool fill_ = true;
  c10::optional<int64_t> seed_;
  c10::optional<at::Generator> generator_;
};

// Multi-class stratified sampling. labels [..., N] (bool or integer; label c
// in [0, C) is class c, others are never sampled), class_quota int64 [C] or
// [..., C] on the labels' device -> (indices int64 [..., K], valid bool
// [..., K]). Per row: take_c = min(A_c, max(quota_c, 0), K - earlier takes),
// then (fill) a uniformly random subset of the remaining labelled items fills
// the slots left. Tensor quotas are not checked (that would synchronize).
std::tuple<at::Tensor, at::Tensor> stratified_sample(
    const at::Tensor& labels, int64_t num_samples, const at::Tensor& class_quota,
    const StratifiedOptions& options = StratifiedOptions());

// The same with host quotas, checked first: every quota >= 0 and their sum <=
// num_samples (an error names the argument otherwise).
std::tuple<at::Tensor, at::Tensor> stratified_sample(
    const at::Tensor& labels, int64_t num_samples, c10::ArrayRef<int64_t> class_quota,
    const StratifiedOptions& options = StratifiedOptions());

// stratified_sample, then gather_sampled: (sampled_features [..., K, *F],
// sampled_labels int64 [..., K], valid bool [..., K]). Differentiable with
// respect to features.
std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    const at::Tensor& class_quota, const StratifiedOptions& options = StratifiedOptions());
std::tuple<at::Tensor, at::Tensor, at::Tensor> stratified_sample_gather(
    const at::Tensor& features, const at::Tensor& labels, int64_t num_samples,
    c10::ArrayRef<int64_t> class_quota, const StratifiedOptions& options = StratifiedOptions());

// The features and labels of a sample: features [..., N, *F], labels [..., N]
// and (indices, valid) [..., K] from balanced_sample or stratified_sample ->
// (sampled_features [..., K, *F], sampled_labels int64 [..., K]); zero
// features and label -1 in invalid slots. Differentiable with respect to
// features.
std::tuple<at::Tensor, at::Tensor> gather_sampled(const at::Tensor& features,
                                                  const at::Tensor& labels,
                                                  const at::Tensor& indices,
                                                  const at::Tensor& valid);

// A batched torch.nonzero_static with a count. mask [..., N] (bool or
// integer: nonzero is true) -> (indices int64 [..., size], valid bool
// [..., size], count int64 [...]): per row, slots [0, min(count, size)) hold
// the positions of the row's first true elements in increasing order, the
// others -1 and valid = false; count is the row's number of true elements
// (it may exceed size). No host-device synchronization.
std::tuple<at::Tensor, at::Tensor, at::Tensor> compact(const at::Tensor& mask, int64_t size);

}  // namespace syncfree

namespace syncfree {

// Optional arguments of nms.
struct NmsOptions {
  // Integer category (or level) ids [..., N]: boxes of different ids never
  // suppress each other (torchvision.ops.batched_nms).
  NmsOptions& idxs(at::Tensor v) {
    idxs_ = std::move(v);
    return *this;
  }
  // Bool [..., N]: the boxes that take part; the others are never kept and
  // never suppress.
  NmsOptions& valid(at::Tensor v) {
    valid_ = std::move(v);
    return *this;
  }

  c10::optional<at::Tensor> idxs_;
  c10::optional<at::Tensor> valid_;
};

// Static-shape, batched non-maximum suppression. boxes [..., N, 4] (x1, y1,
// x2, y2; float16, bfloat16, float32 or float64), scores [..., N] of the same
// dtype -> (indices int64 [..., M], valid bool [..., M]) with M = max_output.
// Per row, the kept indices fill the first slots by rank (score descending,
// equal scores by lower index), -1 and valid false after them: equal to
// torchvision.ops.nms (batched_nms with idxs) on the row's valid boxes,
// truncated to max_output. Candidates with a NaN score take no part.
std::tuple<at::Tensor, at::Tensor> nms(const at::Tensor& boxes, const at::Tensor& scores,
                                       double iou_threshold, int64_t max_output,
                                       const NmsOptions& options = NmsOptions());

}  // namespace syncfree

namespace syncfree {

// Optional arguments of multi_scale_roi_align, with torchvision's defaults
// (MultiScaleRoIAlign's LevelMapper).
struct RoiAlignOptions {
  // Pixel-shift the boxes by -0.5 (torchvision's `aligned`).
  RoiAlignOptions& aligned(bool v) {
    aligned_ = v;
    return *this;
  }
  // Bool [B, K]: the slots to pool; the others give zeros and no gradient.
  RoiAlignOptions& valid(at::Tensor v) {
    valid_ = std::move(v);
    return *this;
  }
  // LevelMapper's canonical box size and level (s0, lvl0) and epsilon.
  RoiAlignOptions& canonical_scale(double v) {
    canonical_scale_ = v;
    return *this;
  }
  RoiAlignOptions& canonical_level(int64_t v) {
    canonical_level_ = v;
    return *this;
  }
  RoiAlignOptions& eps(double v) {
    eps_ = v;
    return *this;
  }

  bool aligned_ = false;
  c10::optional<at::Tensor> valid_;
  double canonical_scale_ = 224.0;
  int64_t canonical_level_ = 4;
  double eps_ = 1e-6;
};

// torchvision.ops.MultiScaleRoIAlign with static shapes: features, a list of
// L maps [B, C, H_l, W_l] (finest first, float16, bfloat16, float32 or
// float64), boxes [B, K, 4] (x1, y1, x2, y2 in image coordinates) ->
// [B * K, C, h, w]. Each box is pooled once, from the level torchvision's
// LevelMapper assigns it (computed on the boxes' device); slots that are not
// valid, and boxes with a non-finite coordinate, give zeros. Differentiable
// with respect to features.
at::Tensor multi_scale_roi_align(at::TensorList features, const at::Tensor& boxes,
                                 at::IntArrayRef output_size,
                                 at::ArrayRef<double> spatial_scales, int64_t sampling_ratio,
                                 const RoiAlignOptions& options = RoiAlignOptions());

}  // namespace syncfree
