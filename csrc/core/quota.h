// The quota rule: how many positives and negatives a row contributes.
#pragma once

#include <cmath>
#include <cstdint>

#include "platform.h"

namespace syncfree {
namespace core {

struct Quota {
  int64_t num_pos;
  int64_t num_neg;
  SYNCFREE_HD int64_t valid() const { return num_pos + num_neg; }
};

SYNCFREE_HD int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Positive target: floor(num_samples * positive_fraction), the truncation of
// torchvision and detectron2, clamped to [0, num_samples].
SYNCFREE_HD int64_t positive_target(int64_t num_samples, double positive_fraction) {
  if (!(positive_fraction > 0.0)) return 0;
  if (positive_fraction >= 1.0) return num_samples;
  const double t = std::floor(static_cast<double>(num_samples) * positive_fraction);
  return min64(num_samples, static_cast<int64_t>(t));
}

// With P positives and Q negatives available and K slots:
//   num_pos = min(P, target); num_neg = min(Q, K - num_pos);
//   if fill_positives: num_pos = min(P, K - num_neg).
// fill_positives=false is exactly torchvision's / detectron2's rule (negatives
// fill missing positives, never the reverse).
SYNCFREE_HD Quota balanced_quota(int64_t num_positive, int64_t num_negative, int64_t num_samples,
                                 double positive_fraction, bool fill_positives) {
  Quota q;
  q.num_pos = min64(num_positive, positive_target(num_samples, positive_fraction));
  q.num_neg = min64(num_negative, num_samples - q.num_pos);
  if (fill_positives) q.num_pos = min64(num_positive, num_samples - q.num_neg);
  return q;
}

}  // namespace core
}  // namespace syncfree
