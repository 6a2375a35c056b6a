// The label rule, for every label type:
//   label < 0               -> ignored (never sampled)
//   label == negative_label -> negative
//   any other label         -> positive
// bool labels: true is positive, false negative (negative_label is unused).
// Unsigned labels are never < 0: none is ignored, and they compare as
// unsigned (a uint64 label of 2^63 or more is a positive).
// negative_label must be >= 0 (checked by the operator).
#pragma once

#include <cstdint>
#include <type_traits>

#include "platform.h"

namespace syncfree {
namespace core {

template <typename T>
SYNCFREE_HD void classify(T label, int64_t negative_label, bool* positive, bool* negative) {
  if constexpr (std::is_same<T, bool>::value) {
    *positive = label;
    *negative = !label;
  } else if constexpr (std::is_unsigned<T>::value) {
    *negative = static_cast<uint64_t>(label) == static_cast<uint64_t>(negative_label);
    *positive = !*negative;
  } else {
    const int64_t v = static_cast<int64_t>(label);
    *negative = v == negative_label;
    *positive = v >= 0 && !*negative;
  }
}

// A negative's label: negative_label, or 0 (false) for bool labels. As an
// int64 output holds it (the fused gather), and, cast to the label type, as
// the compaction's vector paths compare labels with it (LabelMatch, where
// no label can equal a negative_label beyond the type's range).
template <typename T>
SYNCFREE_HD int64_t negative_value(int64_t negative_label) {
  return std::is_same<T, bool>::value ? 0 : negative_label;
}

}  // namespace core
}  // namespace syncfree
