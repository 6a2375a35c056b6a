// Host-side stratified sampling of one row (CPU backend): framework-free, not
// for device code. Same results as pick_stratified_slot() slot by slot
// (tests/cpp/test_core.cpp checks it), evaluated in batches: sigma and rho
// over batches of slots, then the slots grouped by class so that each pi_c is
// built once per row (small ones tabulated) and applied to all its slots.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "host_permutation.h"
#include "host_simd.h"
#include "permutation.h"
#include "stratified.h"

namespace syncfree {
namespace core {

#ifdef SYNCFREE_HAVE_AVX512_PATH
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Few classes (kVectorClasses at most), contiguous labels (every label
// type), 32-bit positions: the two passes of stratified_row over the labels
// with AVX-512 (F, BW, VL), 16 labels at a time, one comparison per class.
constexpr int64_t kVectorClasses = 4;

// Which of labels[0, 16) are of class c (c < kVectorClasses: a value of
// every label type, a bool's 0 or 1 as stratum_bucket reads it).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,popcnt"))) inline __mmask16 class_mask_avx512(
    const T* labels, int64_t c) {
  if constexpr (sizeof(T) == 8) {
    const __m512i cv = _mm512_set1_epi64(c);
    return _mm512_kunpackb(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(labels + 8), cv),
                           _mm512_cmpeq_epi64_mask(_mm512_loadu_si512(labels), cv));
  } else if constexpr (sizeof(T) == 4) {
    return _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(labels),
                                   _mm512_set1_epi32(static_cast<int32_t>(c)));
  } else if constexpr (sizeof(T) == 2) {
    return _mm256_cmpeq_epi16_mask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels)),
                                   _mm256_set1_epi16(static_cast<int16_t>(c)));
  } else {
    return _mm_cmpeq_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(labels)),
                               _mm_set1_epi8(static_cast<char>(c)));
  }
}

// counts[0..C] of labels[0, n): classes 0..C-1, then the labels of no class.
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,popcnt"))) inline void count_classes_avx512(
    const T* labels, int64_t n, int64_t C, int64_t* counts) {
  int64_t sum = 0;
  for (int64_t c = 0; c < C; ++c) {
    int64_t count = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) count += __builtin_popcount(class_mask_avx512(labels + i, c));
    for (; i < n; ++i) count += stratum_bucket(labels[i], C) == c;
    counts[c] = count;
    sum += count;
  }
  counts[C] = n - sum;
}

// The stable sort of stratified_row for classes 0..C-1: the position of
// each label of class c goes to order[cursor[c]++], in increasing order (one
// vpcompressd and one masked store per class and 16 labels); the labels of no
// class are not written (stratified_row never reads them).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,popcnt"))) inline void sort_classes_avx512(
    const T* labels, int64_t n, int64_t C, int64_t* cursor, int32_t* order) {
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i at = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(i)));
    for (int64_t c = 0; c < C; ++c) {
      const __mmask16 m = class_mask_avx512(labels + i, c);
      const int count = __builtin_popcount(m);
      _mm512_mask_storeu_epi32(order + cursor[c], static_cast<__mmask16>((1u << count) - 1),
                               _mm512_maskz_compress_epi32(m, at));
      cursor[c] += count;
    }
  }
  for (; i < n; ++i) {
    const int64_t c = stratum_bucket(labels[i], C);
    if (c < C) order[cursor[c]++] = static_cast<int32_t>(i);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// Workspace of one row, in int64 words, for n labels, k slots and c classes:
// the row sorted by class (n indices of type Index, rounded up to words),
// four arrays of C + 1 counts or prefix sums, four arrays of min(k, n) slots.
template <typename Index>
inline int64_t stratified_workspace_words(int64_t n, int64_t k, int64_t c) {
  const int64_t order_words = (n * static_cast<int64_t>(sizeof(Index)) + 7) / 8;
  return order_words + 4 * (c + 1) + 4 * std::min(k, n);
}

// Samples one row: labels[0], labels[stride], ..., labels[(n-1)*stride] with
// the row's quotas quota[0..C), into indices[0..k) and valid[0..k).
// `work` holds stratified_workspace_words<Index>(n, k, C) words; Index must
// hold values up to n (int32_t for n < 2^31, else int64_t).
template <typename Index, typename T>
void stratified_row(const T* labels, int64_t stride, int64_t n, const int64_t* quota,
                    const StratifiedParams& p, int64_t row, int64_t* work, int64_t* indices,
                    bool* valid) {
  const int64_t C = p.num_classes;
  const int64_t k = p.num_samples;
  const int64_t slots_max = std::min(k, n);
  Index* order = reinterpret_cast<Index*>(work);
  int64_t* counts = work + (n * static_cast<int64_t>(sizeof(Index)) + 7) / 8;  // C + 1
  int64_t* take_prefix = counts + (C + 1);                                    // C + 1
  int64_t* left_prefix = take_prefix + (C + 1);                               // C + 1
  int64_t* group = left_prefix + (C + 1);                                     // C + 1
  int64_t* slot_class = group + (C + 1);                                      // slots_max
  int64_t* slot_pos = slot_class + slots_max;
  int64_t* group_slot = slot_pos + slots_max;
  int64_t* group_pos = group_slot + slots_max;

  // 1. Class counts; labels of no class land in the extra bucket C. With
  // few classes, contiguous rows are cut into kSegments segments counted
  // (and sorted, below) side by side, each into counters of its own: four
  // independent chains of increments instead of one, where consecutive
  // labels of one class would wait on each other's counter.
  constexpr int64_t kSegments = 4;
  constexpr int64_t kMaxSegmentBuckets = 64;
  const bool segmented = stride == 1 && C + 1 <= kMaxSegmentBuckets && n >= 4 * kSegments;
  const int64_t seg_len = n / kSegments;  // the last segment also takes the n % kSegments after
  int64_t seg_counts[kSegments][kMaxSegmentBuckets];
  // Few classes and AVX-512: both passes vectorized instead.
  bool vectorized = false;
#ifdef SYNCFREE_HAVE_AVX512_PATH
  if constexpr (std::is_same<Index, int32_t>::value) {
    vectorized = stride == 1 && C <= kVectorClasses && simd_path() >= SimdPath::kAvx512;
  }
#endif
  std::fill(counts, counts + C + 1, int64_t{0});
  if (vectorized) {
#ifdef SYNCFREE_HAVE_AVX512_PATH
    if constexpr (std::is_same<Index, int32_t>::value) {
      count_classes_avx512(labels, n, C, counts);
    }
#endif
  } else if (segmented) {
    for (int64_t j = 0; j < kSegments; ++j) std::fill(seg_counts[j], seg_counts[j] + C + 1, int64_t{0});
    for (int64_t i = 0; i < seg_len; ++i) {
      for (int64_t j = 0; j < kSegments; ++j) ++seg_counts[j][stratum_bucket(labels[j * seg_len + i], C)];
    }
    for (int64_t i = kSegments * seg_len; i < n; ++i)
      ++seg_counts[kSegments - 1][stratum_bucket(labels[i], C)];
    for (int64_t j = 0; j < kSegments; ++j) {
      for (int64_t c = 0; c <= C; ++c) counts[c] += seg_counts[j][c];
    }
  } else if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) ++counts[stratum_bucket(labels[i], C)];
  } else {
    for (int64_t i = 0; i < n; ++i) ++counts[stratum_bucket(labels[i * stride], C)];
  }
  const StratifiedPlan plan = make_stratified_plan(p, row, counts, quota, take_prefix, left_prefix);
  const int64_t num_valid = plan.valid();

  if (num_valid > 0) {
    // 2. The row sorted by class, order preserved (a counting sort); the
    // elements of no class go after all classes.
    for (int64_t c = 0; c <= C; ++c) counts[c] = take_prefix[c] + left_prefix[c];
    if (vectorized) {
#ifdef SYNCFREE_HAVE_AVX512_PATH
      if constexpr (std::is_same<Index, int32_t>::value) {
        sort_classes_avx512(labels, n, C, counts, order);
      }
#endif
    } else if (segmented) {
      // Segment j of class c starts after the class's elements in segments < j.
      for (int64_t c = 0; c <= C; ++c) {
        int64_t start = counts[c];
        for (int64_t j = 0; j < kSegments; ++j) {
          const int64_t count = seg_counts[j][c];
          seg_counts[j][c] = start;
          start += count;
        }
      }
      for (int64_t i = 0; i < seg_len; ++i) {
        for (int64_t j = 0; j < kSegments; ++j) {
          const int64_t at = j * seg_len + i;
          order[seg_counts[j][stratum_bucket(labels[at], C)]++] = static_cast<Index>(at);
        }
      }
      for (int64_t i = kSegments * seg_len; i < n; ++i)
        order[seg_counts[kSegments - 1][stratum_bucket(labels[i], C)]++] = static_cast<Index>(i);
    } else if (stride == 1) {
      for (int64_t i = 0; i < n; ++i)
        order[counts[stratum_bucket(labels[i], C)]++] = static_cast<Index>(i);
    } else {
      for (int64_t i = 0; i < n; ++i)
        order[counts[stratum_bucket(labels[i * stride], C)]++] = static_cast<Index>(i);
    }

    // 3. Class and pre-pi_c position of every valid slot.
    constexpr int64_t kBatch = HostPermutation::kApplyBatch;
    const HostPermutation slots(plan.slots, num_valid);
    const HostPermutation fill(plan.fill, plan.filled);
    int64_t t[kBatch], u[kBatch], fill_slot[kBatch];
    for (int64_t b0 = 0; b0 < num_valid; b0 += kBatch) {
      const int64_t count = std::min(kBatch, num_valid - b0);
      for (int64_t i = 0; i < count; ++i) t[i] = b0 + i;
      if (plan.permute_slots) slots.apply(t, count);
      int64_t nf = 0;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t s = b0 + i;
        if (t[i] < plan.taken) {
          const int64_t c = find_stratum(take_prefix, C, t[i]);
          slot_class[s] = c;
          slot_pos[s] = t[i] - take_prefix[c];
        } else {
          u[nf] = t[i] - plan.taken;
          fill_slot[nf++] = s;
        }
      }
      if (plan.permute_fill) fill.apply(u, nf);
      for (int64_t i = 0; i < nf; ++i) {
        const int64_t c = find_stratum(left_prefix, C, u[i]);
        slot_class[fill_slot[i]] = c;
        slot_pos[fill_slot[i]] = (take_prefix[c + 1] - take_prefix[c]) + (u[i] - left_prefix[c]);
      }
    }

    // 4. Slots grouped by class (a stable counting sort of the slots).
    std::fill(group, group + C + 1, int64_t{0});
    for (int64_t s = 0; s < num_valid; ++s) ++group[slot_class[s] + 1];
    for (int64_t c = 0; c < C; ++c) group[c + 1] += group[c];
    for (int64_t s = 0; s < num_valid; ++s) {
      const int64_t g = group[slot_class[s]]++;
      group_slot[g] = s;
      group_pos[g] = slot_pos[s];
    }
    // group[c] is now the end of class c's slots (and the start of c + 1's).

    // 5. Per class: ranks through pi_c, then indices.
    int64_t begin = 0;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t end = group[c];
      if (end == begin) continue;
      if (permutes_stratum(plan, left_prefix, c)) {
        const HostPermutation pi(
            stratum_permutation(plan, c, stratum_size(take_prefix, left_prefix, c)),
            end - begin);
        pi.apply(group_pos + begin, end - begin);
      }
      const int64_t first = take_prefix[c] + left_prefix[c];
      for (int64_t g = begin; g < end; ++g) {
        indices[group_slot[g]] = static_cast<int64_t>(order[first + group_pos[g]]);
        valid[group_slot[g]] = true;
      }
      begin = end;
    }
  }
  for (int64_t s = num_valid; s < k; ++s) {
    indices[s] = -1;
    valid[s] = false;
  }
}

// The reference: `rows` contiguous rows of n labels with one quota row per
// row (quota_row_stride 0: the same quotas for every row), slot by slot with
// pick_stratified_slot() (what device code evaluates). Tests compare the
// batched stratified_row() against it.
template <typename T>
void stratified_rows_serial(const T* labels, int64_t rows, int64_t n, const int64_t* quota,
                            int64_t quota_row_stride, const StratifiedParams& p,
                            int64_t* indices, bool* valid) {
  const int64_t C = p.num_classes;
  const int64_t k = p.num_samples;
  std::vector<int64_t> counts(static_cast<size_t>(C)), take(static_cast<size_t>(C + 1)),
      left(static_cast<size_t>(C + 1));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = labels + r * n;
    std::fill(counts.begin(), counts.end(), int64_t{0});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = stratum_of(row[i], C);
      if (c >= 0) ++counts[static_cast<size_t>(c)];
    }
    const StratifiedPlan plan = make_stratified_plan(p, r, counts.data(),
                                                     quota + r * quota_row_stride, take.data(),
                                                     left.data());
    // The row sorted by class, index order within a class (a stable sort;
    // the elements of no class go last).
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const uint64_t ca = static_cast<uint64_t>(stratum_of(row[a], C));  // -1: last
      const uint64_t cb = static_cast<uint64_t>(stratum_of(row[b], C));
      return ca < cb;
    });
    for (int64_t s = 0; s < k; ++s) {
      if (s < plan.valid()) {
        const StratifiedPick pick = pick_stratified_slot(plan, take.data(), left.data(), s);
        indices[r * k + s] = order[static_cast<size_t>(take[static_cast<size_t>(pick.stratum)] +
                                                      left[static_cast<size_t>(pick.stratum)] +
                                                      pick.position)];
        valid[r * k + s] = true;
      } else {
        indices[r * k + s] = -1;
        valid[r * k + s] = false;
      }
    }
  }
}

}  // namespace core
}  // namespace syncfree
