// A Permutation evaluated on the host (HostPermutation): small ones counted
// or tabulated, batches through the vector paths of host_simd.h. Used by
// both samplers' host code; framework-free, not for device code.
#pragma once

#include <algorithm>
#include <cstdint>

#include "host_simd.h"
#include "permutation.h"

namespace syncfree {
namespace core {

// A Permutation evaluated on the host, with the same results. Its small
// (exact) construction is, for a few evaluations, the n element keys
// computed once, each evaluation counting the keys below its own (n
// comparisons); for more, the whole permutation tabulated by sorting the
// keys. The caller says how many evaluations it expects. No heap allocation.
class HostPermutation {
 public:
  // apply() walks the cycles of up to this many values together: the
  // values still outside [0, n) after a pass go through the next together,
  // and the last few passes hold few values whatever the count, so that
  // their cost is shared by more (1024 values of a domain of 1e4 took
  // 0.82x the time of four walks of 256 on an Intel Xeon, docs/benchmarks.md).
  static constexpr int64_t kWalkBatch = 1024;
#ifdef SYNCFREE_HAVE_AVX512_PATH
  // A batch's positions fit above a value's bits in the vector path's
  // first packing (cycle_walk_pack_first_avx512).
  static_assert(kWalkBatch <= (int64_t{1} << (64 - kWalkPositionShift)),
                "a walk batch's positions must fit the bits above the value's");
#endif
  // The batch of values that callers pass to apply() at a time where a
  // batch's other arrays should stay small (the stratified sampler).
  static constexpr int64_t kApplyBatch = 256;
  // Up to this many evaluations count keys instead of sorting them.
  static constexpr int64_t kCountingEvaluations = 8;

  HostPermutation() = default;
  explicit HostPermutation(const Permutation& perm, int64_t evaluations = INT64_MAX)
      : perm_(perm) {
    if (!perm.is_small() || perm.size() == 0) return;
    const int64_t n = perm.size();
    for (int64_t j = 0; j < n; ++j) keys_[j] = perm.small_key(j);
    if (evaluations <= kCountingEvaluations) {
      small_ = true;
      return;
    }
    uint8_t order[kSmallDomain];
#if defined(__GNUC__) && !defined(__clang__)
// keys_[0, n) were all written above; GCC 12 cannot always tell once this is inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
    sort_by_key(keys_, n, order);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    for (int64_t r = 0; r < n; ++r) table_[order[r]] = static_cast<uint8_t>(r);
    tabulated_ = true;
  }

  // order[0..n) = the elements j sorted by (keys[j], j), n <= kSmallDomain:
  // a stable counting pass over the top 8 key bits (predictable branches,
  // unlike a comparison sort of random keys), then an insertion pass that
  // orders the elements whose top bits agree by their full keys.
  static void sort_by_key(const uint64_t* keys, int64_t n, uint8_t* order) {
    int32_t start[256] = {};
    for (int64_t j = 0; j < n; ++j) ++start[keys[j] >> 56];
    int32_t sum = 0;
    for (int32_t& c : start) {
      const int32_t count = c;
      c = sum;
      sum += count;
    }
    for (int64_t j = 0; j < n; ++j) order[start[keys[j] >> 56]++] = static_cast<uint8_t>(j);
    for (int64_t i = 1; i < n; ++i) {
      const uint8_t j = order[i];
      int64_t m = i;
      for (; m > 0 && key_before(keys[j], j, keys[order[m - 1]], order[m - 1]); --m)
        order[m] = order[m - 1];
      order[m] = j;
    }
  }

  int64_t operator()(int64_t x) const {
    if (tabulated_) return table_[x];
    if (small_) return small_rank_from_keys(keys_, perm_.size(), x);
    return perm_(x);
  }

  // values[i] = perm(values[i]) for i < count: the same results as
  // operator(), computed with branch-free Feistel passes over the batch
  // (independent iterations, which the compiler vectorizes).
  void apply(int64_t* values, int64_t count) const {
    if (tabulated_) {
      for (int64_t i = 0; i < count; ++i) values[i] = table_[values[i]];
      return;
    }
    if (small_ || perm_.is_small()) {  // counted, or an empty domain
      for (int64_t i = 0; i < count; ++i) values[i] = (*this)(values[i]);
      return;
    }
    // Cycle walking is batched too: each round passes the values still
    // outside [0, n) through the network again (under 1/2 of them, then 1/4...).
    const uint64_t n = static_cast<uint64_t>(perm_.size());
    const SimdPath path = simd_path();
    int64_t pending[kWalkBatch + 8];  // + 8: room for the vector path's full stores
    int64_t passed[kWalkBatch + 8];
    for (int64_t b0 = 0; b0 < count; b0 += kWalkBatch) {
      int64_t* v = values + b0;
      const int64_t m = std::min(kWalkBatch, count - b0);
#ifdef SYNCFREE_HAVE_AVX512_PATH
      if (path >= SimdPath::kAvx512) {
        cycle_walk_avx512(perm_, v, m, pending, passed);
        continue;
      }
#endif
      feistel_pass(perm_, v, m, path);
      int64_t num_pending = 0;
      for (int64_t i = 0; i < m; ++i) {
        pending[num_pending] = i;
        num_pending += static_cast<uint64_t>(v[i]) >= n;
      }
      while (num_pending > 0) {  // the values still outside, packed, through the same pass
        for (int64_t j = 0; j < num_pending; ++j) passed[j] = v[pending[j]];
        feistel_pass(perm_, passed, num_pending, path);
        int64_t still = 0;
        for (int64_t j = 0; j < num_pending; ++j) {
          v[pending[j]] = static_cast<int64_t>(passed[j]);
          pending[still] = pending[j];
          still += static_cast<uint64_t>(passed[j]) >= n;
        }
        num_pending = still;
      }
    }
  }

 private:
  Permutation perm_;
  bool small_ = false;      // the small construction, evaluated by counting keys_
  bool tabulated_ = false;  // table_ holds the whole permutation
  uint64_t keys_[kSmallDomain];
  uint8_t table_[kSmallDomain];
};

}  // namespace core
}  // namespace syncfree
