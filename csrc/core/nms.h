// Non-maximum suppression: the rule, framework-free (no torch), shared by the
// CPU kernel and the CUDA kernels.
//
// The rule is torchvision.ops.nms's, computed the way its CPU kernel computes
// it, so that the kept indices are equal, not merely close:
//   area(b)   = (x2 - x1) * (y2 - y1)
//   w, h      = max(0, min(x2_i, x2_j) - max(x1_i, x1_j)), likewise for y
//   inter     = w * h
//   iou(i, j) = inter / (area_i + area_j - inter)
// every operation rounded once in the compute type (float for float16,
// bfloat16 and float32 boxes, whose values convert to float exactly; double
// for float64), never contracted into a fused multiply-add, with std::max and
// std::min's argument order (it decides what a NaN coordinate gives), and
// box i (the higher ranked) first. j is suppressed by a kept i when
// iou(i, j) > iou_threshold, compared as torchvision compares its float IoU
// with the double threshold (nms_threshold gives the equivalent threshold in
// the compute type). A NaN IoU suppresses nothing.
//
// Rank: score descending, equal scores by lower index first
// (nms_ranks_before). Candidates with a NaN score take no part.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/platform.h"

namespace syncfree {
namespace core {

// Arithmetic rounded once per operation. nvcc contracts a * b + c into an FMA
// unless told not to; the _rn intrinsics are never contracted. Host code is
// compiled without contraction (ISO C++ mode; -ffp-contract=off on the CPU
// kernel's file).
SYNCFREE_HD float nms_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SYNCFREE_HD float nms_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SYNCFREE_HD float nms_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SYNCFREE_HD float nms_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
SYNCFREE_HD double nms_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SYNCFREE_HD double nms_sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
SYNCFREE_HD double nms_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SYNCFREE_HD double nms_div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// std::max(a, b) and std::min(a, b), also on the device: with a NaN operand
// each returns its first argument.
template <typename T>
SYNCFREE_HD T nms_max(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
SYNCFREE_HD T nms_min(T a, T b) {
  return b < a ? b : a;
}

template <typename T>
SYNCFREE_HD T nms_area(T x1, T y1, T x2, T y2) {
  return nms_mul(nms_sub(x2, x1), nms_sub(y2, y1));
}

// iou(i, j) as torchvision's CPU kernel computes it (i the higher ranked box).
template <typename T>
SYNCFREE_HD T nms_iou(T ix1, T iy1, T ix2, T iy2, T iarea, T jx1, T jy1, T jx2, T jy2, T jarea) {
  const T xx1 = nms_max(ix1, jx1);
  const T yy1 = nms_max(iy1, jy1);
  const T xx2 = nms_min(ix2, jx2);
  const T yy2 = nms_min(iy2, jy2);
  const T w = nms_max(T(0), nms_sub(xx2, xx1));
  const T h = nms_max(T(0), nms_sub(yy2, yy1));
  const T inter = nms_mul(w, h);
  return nms_div(inter, nms_sub(nms_add(iarea, jarea), inter));
}

// Whether a kept box i suppresses box j: iou(i, j) > threshold, with the
// threshold from nms_threshold.
template <typename T>
SYNCFREE_HD bool nms_suppresses(T ix1, T iy1, T ix2, T iy2, T iarea, T jx1, T jy1, T jx2, T jy2,
                                T jarea, T threshold) {
  return nms_iou(ix1, iy1, ix2, iy2, iarea, jx1, jy1, jx2, jy2, jarea) > threshold;
}

// The threshold in the compute type T that decides as torchvision's
// `float_iou > double_threshold` does: for every T value v (NaN included),
// v > nms_threshold<T>(t) exactly when double(v) > t. For float: the largest
// float <= t (a float above it is above t, a float at or below it is not).
// t must not be NaN (the operator refuses it). Host only.
template <typename T>
inline T nms_threshold(double t);
template <>
inline double nms_threshold<double>(double t) {
  return t;
}
template <>
inline float nms_threshold<float>(double t) {
  // Outside float's finite range the cast would be undefined: the largest
  // float <= t is then FLT_MAX (t above it) or -inf (t below -FLT_MAX).
  constexpr double kMax = static_cast<double>(std::numeric_limits<float>::max());
  if (t > kMax && t != std::numeric_limits<double>::infinity()) return std::numeric_limits<float>::max();
  if (t < -kMax) return -std::numeric_limits<float>::infinity();
  float f = static_cast<float>(t);
  if (static_cast<double>(f) > t) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// The rank order: a before b when its score is higher, or equal with a lower
// index. -0 and +0 are equal scores. NaN scores are never ranked.
template <typename S, typename I>
SYNCFREE_HD bool nms_ranks_before(S score_a, I index_a, S score_b, I index_b) {
  return score_a > score_b || (score_a == score_b && index_a < index_b);
}

// The rank order as one unsigned key per float score, for radix sorts:
// descending keys give descending scores; -0 and +0 give the same key; a NaN
// score (excluded) gives 0, below every other key. A stable sort on these
// keys in descending order, of candidates listed by increasing index, gives
// the rank order.
SYNCFREE_HD uint32_t nms_score_key(float s) {
  if (s != s) return 0u;
  if (s == 0.0f) s = 0.0f;  // -0 -> +0
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(s);
#else
  std::memcpy(&u, &s, sizeof(u));
#endif
  // Negative floats: all bits flipped; non-negative: sign bit set. -inf maps
  // to 0x007fffff > 0.
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
SYNCFREE_HD uint64_t nms_score_key(double s) {
  if (s != s) return 0u;
  if (s == 0.0) s = 0.0;
  uint64_t u;
#if defined(__CUDA_ARCH__)
  u = static_cast<uint64_t>(__double_as_longlong(s));
#else
  std::memcpy(&u, &s, sizeof(u));
#endif
  const uint64_t sign = uint64_t(1) << 63;
  return (u & sign) ? ~u : (u | sign);
}

// The greedy pass over m candidates of one id (structure of arrays, in rank
// order; every array holds m elements, reordered in place). Walks the ranks:
// a candidate not yet suppressed is kept (its `index` appended to `kept`) and
// suppresses every later candidate it overlaps above the threshold. Stops
// after max_keep kept boxes. `dead` is scratch of m flags. Returns the
// number kept.
//
// The overlap pass runs over every later candidate, suppressed or not (its
// flag is or-ed, so the result is the same as skipping them), which the
// compiler vectorizes; the survivors are compacted to the front when more
// than half of the tail is suppressed, so the passes shrink with the row.
template <typename T, typename I>
int64_t nms_greedy(T* x1, T* y1, T* x2, T* y2, T* area, I* index, int64_t m, T threshold,
                   int64_t max_keep, I* kept,
                   typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type* dead) {
  using Flag = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
  int64_t num_kept = 0;
  if (max_keep <= 0 || m <= 0) return 0;
  for (int64_t j = 0; j < m; ++j) dead[j] = 0;
  int64_t dead_in_tail = 0;  // suppressed candidates after i
  int64_t i = 0;
  while (i < m) {
    kept[num_kept++] = index[i];
    if (num_kept == max_keep) break;
    const T ix1 = x1[i], iy1 = y1[i], ix2 = x2[i], iy2 = y2[i], ia = area[i];
    Flag newly = 0;
    for (int64_t j = i + 1; j < m; ++j) {
      const Flag s =
          nms_suppresses(ix1, iy1, ix2, iy2, ia, x1[j], y1[j], x2[j], y2[j], area[j], threshold)
              ? Flag(1)
              : Flag(0);
      newly += s & ~dead[j];
      dead[j] |= s;
    }
    dead_in_tail += static_cast<int64_t>(newly);
    // The next candidate not suppressed.
    int64_t next = i + 1;
    while (next < m && dead[next]) {
      ++next;
      --dead_in_tail;
    }
    i = next;
    if (i >= m) break;
    if (dead_in_tail > 64 && 2 * dead_in_tail > m - i) {
      // Compact [i, m) to the survivors (i itself survives).
      int64_t w = i;
      for (int64_t j = i; j < m; ++j) {
        const bool gone = dead[j] != 0;
        x1[w] = x1[j];
        y1[w] = y1[j];
        x2[w] = x2[j];
        y2[w] = y2[j];
        area[w] = area[j];
        index[w] = index[j];
        dead[w] = 0;
        w += gone ? 0 : 1;
      }
      m = w;
      dead_in_tail = 0;
    }
  }
  return num_kept;
}

// Scratch of nms_row for rows of up to n boxes (host).
template <typename T, typename I>
struct NmsWorkspace {
  using Flag = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
  struct Candidate {
    int64_t id;
    T score;
    I index;
  };
  explicit NmsWorkspace(int64_t n)
      : cand(static_cast<size_t>(n)),
        x1(static_cast<size_t>(n)),
        y1(static_cast<size_t>(n)),
        x2(static_cast<size_t>(n)),
        y2(static_cast<size_t>(n)),
        area(static_cast<size_t>(n)),
        index(static_cast<size_t>(n)),
        kept(static_cast<size_t>(n)),
        dead(static_cast<size_t>(n)) {}
  std::vector<Candidate> cand;
  std::vector<T> x1, y1, x2, y2, area;
  std::vector<I> index, kept;
  std::vector<Flag> dead;
};

// NMS of one row of n boxes (host), the CPU backend's algorithm and the
// reference of the CUDA kernels. The row is read through callables:
// score(j) and box(j, c) (c = 0..3: x1, y1, x2, y2) in T, id(j) an int64
// (used when `grouped`), take(j) whether box j takes part. Writes the kept
// indices by rank to out[0, count) and returns count <= max_output.
//   1. Candidates (take(j), score not NaN) sorted by (id, rank): one group of
//      consecutive candidates per id (a single group when not grouped).
//   2. Their coordinates and areas, structure of arrays.
//   3. The greedy pass per group, stopping after max_output kept boxes: a
//      group's later kept boxes rank below those and cannot reach the output.
//   4. With several groups, the kept boxes merged by rank.
template <typename T, typename I, typename Score, typename Box, typename Id, typename Take>
int64_t nms_row(int64_t n, Score score, Box box, Id id, Take take, bool grouped, T threshold,
                int64_t max_output, NmsWorkspace<T, I>& ws, int64_t* out) {
  using Candidate = typename NmsWorkspace<T, I>::Candidate;
  Candidate* cand = ws.cand.data();
  int64_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (!take(j)) continue;
    const T s = score(j);
    if (s != s) continue;
    cand[m++] = Candidate{grouped ? static_cast<int64_t>(id(j)) : 0, s, static_cast<I>(j)};
  }
  const auto by_rank = [](const Candidate& a, const Candidate& b) {
    return nms_ranks_before(a.score, a.index, b.score, b.index);
  };
  if (grouped) {
    std::sort(cand, cand + m, [&](const Candidate& a, const Candidate& b) {
      return a.id < b.id || (a.id == b.id && by_rank(a, b));
    });
  } else {
    std::sort(cand, cand + m, by_rank);
  }

  T* x1 = ws.x1.data();
  T* y1 = ws.y1.data();
  T* x2 = ws.x2.data();
  T* y2 = ws.y2.data();
  T* area = ws.area.data();
  I* index = ws.index.data();
  for (int64_t c = 0; c < m; ++c) {
    const int64_t j = static_cast<int64_t>(cand[c].index);
    x1[c] = box(j, 0);
    y1[c] = box(j, 1);
    x2[c] = box(j, 2);
    y2[c] = box(j, 3);
    area[c] = nms_area(x1[c], y1[c], x2[c], y2[c]);
    index[c] = cand[c].index;
  }

  I* kept = ws.kept.data();
  int64_t num_kept = 0;
  int64_t groups = 0;
  for (int64_t g = 0; g < m;) {
    int64_t e = g + 1;
    while (e < m && cand[e].id == cand[g].id) ++e;
    num_kept += nms_greedy(x1 + g, y1 + g, x2 + g, y2 + g, area + g, index + g, e - g, threshold,
                           max_output, kept + num_kept, ws.dead.data());
    ++groups;
    g = e;
  }
  const int64_t count = std::min(num_kept, max_output);
  if (groups > 1) {
    Candidate* merged = cand;  // the candidates are no longer needed
    for (int64_t k = 0; k < num_kept; ++k) {
      merged[k] = Candidate{0, score(static_cast<int64_t>(kept[k])), kept[k]};
    }
    std::partial_sort(merged, merged + count, merged + num_kept, by_rank);
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<int64_t>(merged[k].index);
  } else {
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<int64_t>(kept[k]);
  }
  return count;
}

}  // namespace core
}  // namespace syncfree
