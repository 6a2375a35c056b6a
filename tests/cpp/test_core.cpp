// Unit tests of the framework-free core (csrc/core), without torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "core/host_permutation.h"
#include "core/host_sampler.h"
#include "core/host_simd.h"
#include "core/host_stratified.h"
#include "core/label_compaction.h"
#include "core/labels.h"
#include "core/permutation.h"
#include "core/quota.h"
#include "core/random.h"
#include "core/row_plan.h"
#include "core/stratified.h"

using namespace syncfree::core;

TEST(Random, StreamIsSplitMix64) {
  // splitmix64 seeded with 0 starts 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4.
  EXPECT_EQ(stream_value(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(stream_value(0, 1), 0x6E789E6AA1B965F4ull);
}

TEST(Random, KeysDependOnEveryInput) {
  const uint64_t base = row_key(call_key(1, 0), 0);
  EXPECT_NE(base, row_key(call_key(2, 0), 0));
  EXPECT_NE(base, row_key(call_key(1, 1), 0));
  EXPECT_NE(base, row_key(call_key(1, 0), 1));
  EXPECT_NE(purpose_key(base, kSlotPermutation), purpose_key(base, kPositivePermutation));
  EXPECT_NE(purpose_key(base, kPositivePermutation), purpose_key(base, kNegativePermutation));
}

// The quota rule written out longhand, as the brief states it.
Quota reference_quota(int64_t P, int64_t Q, int64_t K, double f, bool fill) {
  const int64_t target = static_cast<int64_t>(std::floor(K * f));
  int64_t np = std::min(P, target);
  const int64_t nn = std::min(Q, K - np);
  if (fill) np = std::min(P, K - nn);
  return {np, nn};
}

TEST(Quota, Examples) {
  // K = 10, half positives, plenty of both.
  EXPECT_EQ(balanced_quota(100, 100, 10, 0.5, true).num_pos, 5);
  EXPECT_EQ(balanced_quota(100, 100, 10, 0.5, true).num_neg, 5);
  // Few positives: negatives fill.
  EXPECT_EQ(balanced_quota(2, 100, 10, 0.5, false).num_pos, 2);
  EXPECT_EQ(balanced_quota(2, 100, 10, 0.5, false).num_neg, 8);
  // Few negatives: positives fill only with fill_positives.
  EXPECT_EQ(balanced_quota(100, 3, 10, 0.5, true).num_pos, 7);
  EXPECT_EQ(balanced_quota(100, 3, 10, 0.5, false).num_pos, 5);
  EXPECT_EQ(balanced_quota(100, 3, 10, 0.5, false).num_neg, 3);
  // Odd K truncates the positive target: floor(7 * 0.5) = 3.
  EXPECT_EQ(balanced_quota(100, 100, 7, 0.5, true).num_pos, 3);
  EXPECT_EQ(balanced_quota(100, 100, 7, 0.5, true).num_neg, 4);
  // torchvision's RPN default: 256 * 0.25 = 64.
  EXPECT_EQ(balanced_quota(1000, 1000, 256, 0.25, false).num_pos, 64);
  // K = 0 and empty classes.
  EXPECT_EQ(balanced_quota(5, 5, 0, 0.5, true).valid(), 0);
  EXPECT_EQ(balanced_quota(0, 0, 10, 0.5, true).valid(), 0);
  // Extreme fractions.
  EXPECT_EQ(balanced_quota(100, 100, 10, 1.0, false).num_pos, 10);
  EXPECT_EQ(balanced_quota(100, 100, 10, 0.0, false).num_pos, 0);
  EXPECT_EQ(positive_target(INT64_MAX, 1.0), INT64_MAX);
}

TEST(Quota, MatchesTheRuleExhaustively) {
  for (bool fill : {false, true})
    for (double f : {0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 1.0})
      for (int64_t K = 0; K <= 12; ++K)
        for (int64_t P = 0; P <= 14; ++P)
          for (int64_t Q = 0; Q <= 14; ++Q) {
            const Quota q = balanced_quota(P, Q, K, f, fill);
            const Quota r = reference_quota(P, Q, K, f, fill);
            ASSERT_EQ(q.num_pos, r.num_pos) << P << " " << Q << " " << K << " " << f;
            ASSERT_EQ(q.num_neg, r.num_neg) << P << " " << Q << " " << K << " " << f;
            ASSERT_LE(q.valid(), K);
          }
}

TEST(Quota, FillPositivesUsesEveryCandidateUpToK) {
  for (int64_t K = 0; K <= 12; ++K)
    for (int64_t P = 0; P <= 14; ++P)
      for (int64_t Q = 0; Q <= 14; ++Q)
        EXPECT_EQ(balanced_quota(P, Q, K, 0.5, true).valid(), std::min(K, P + Q));
}

TEST(Permutation, BitsFor) {
  EXPECT_EQ(bits_for(2), 1);
  EXPECT_EQ(bits_for(128), 7);
  EXPECT_EQ(bits_for(129), 8);
  EXPECT_EQ(bits_for(256), 8);
  EXPECT_EQ(bits_for(257), 9);
  EXPECT_EQ(bits_for(INT64_MAX), 63);
}

void expect_bijection(uint64_t key, int64_t n) {
  const Permutation perm(key, n);
  const HostPermutation host(perm);
  const HostPermutation counting(perm, 1);  // few evaluations: keys counted, not sorted
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (int64_t x = 0; x < n; ++x) {
    const int64_t y = perm(x);
    ASSERT_GE(y, 0);
    ASSERT_LT(y, n);
    ASSERT_FALSE(seen[static_cast<size_t>(y)]) << "n=" << n << " x=" << x;
    seen[static_cast<size_t>(y)] = 1;
    ASSERT_EQ(host(x), y) << "HostPermutation disagrees, n=" << n;
    ASSERT_EQ(counting(x), y) << "counting HostPermutation disagrees, n=" << n;
  }
  if (perm.is_small()) {  // the tabulation from precomputed keys (CUDA) agrees
    uint64_t keys[kSmallDomain];
    for (int64_t j = 0; j < n; ++j) keys[j] = perm.small_key(j);
    for (int64_t x = 0; x < n; ++x)
      ASSERT_EQ(small_rank_from_keys(keys, n, x), perm(x)) << "keys disagree, n=" << n;
  }
}

TEST(Permutation, SmallKeySortOrdersByKeyThenElement) {
  // HostPermutation::sort_by_key against std::sort of (key, element) pairs,
  // on keys with repeated top bits and exact duplicates (ties by element).
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % kSmallDomain);
    uint64_t keys[kSmallDomain];
    const int shared = static_cast<int>(rng() % 4);  // 0: random keys
    for (int64_t j = 0; j < n; ++j) {
      keys[j] = rng();
      if (shared >= 1) keys[j] = (keys[j] & 0x00FFFFFFFFFFFFFFull) | (uint64_t{7} << 56);
      if (shared >= 2) keys[j] &= 0xFF000000000000FFull;
      if (shared >= 3) keys[j] &= 0xFF00000000000003ull;  // many exact duplicates
    }
    uint8_t order[kSmallDomain];
    HostPermutation::sort_by_key(keys, n, order);
    std::vector<std::pair<uint64_t, int64_t>> want;
    for (int64_t j = 0; j < n; ++j) want.push_back({keys[j], j});
    std::sort(want.begin(), want.end());
    for (int64_t r = 0; r < n; ++r) ASSERT_EQ(order[r], want[static_cast<size_t>(r)].second);
  }
}

TEST(Permutation, IsABijectionOnEverySmallAndMediumDomain) {
  for (int64_t n = 0; n <= 700; ++n) expect_bijection(0x1234u + static_cast<uint64_t>(n), n);
  for (int64_t n : {1000, 4095, 4096, 4097, 65536, 100003})
    for (uint64_t key : {0ull, 1ull, 0xFFFFFFFFFFFFFFFFull}) expect_bijection(key, n);
}

TEST(Permutation, FeistelPassIsABijectionOfThePowerOfTwoDomain) {
  for (int64_t n : {129, 200, 256, 300, 1000}) {
    const Permutation perm(42, n);
    const uint64_t domain = uint64_t{1} << perm.domain_bits();
    std::set<uint64_t> seen;
    for (uint64_t v = 0; v < domain; ++v) seen.insert(perm.feistel(v));
    EXPECT_EQ(seen.size(), domain);
    EXPECT_EQ(*seen.rbegin(), domain - 1);
  }
}

TEST(Permutation, HugeDomainsStayInRange) {
  for (int64_t n : {int64_t{1} << 31, (int64_t{1} << 40) + 7, INT64_MAX}) {
    const Permutation perm(7, n);
    std::set<int64_t> seen;
    for (int64_t x = 0; x < 2000; ++x) {
      const int64_t y = perm(x);
      ASSERT_GE(y, 0);
      ASSERT_LT(y, n);
      seen.insert(y);
    }
    EXPECT_EQ(seen.size(), 2000u);
  }
}

TEST(Permutation, KeyChangesThePermutation) {
  for (int64_t n : {10, 128, 129, 5000}) {
    int same = 0;
    for (int64_t x = 0; x < n; ++x) same += Permutation(1, n)(x) == Permutation(2, n)(x);
    EXPECT_LT(same, n / 2 + 2) << n;
  }
}

TEST(Labels, Classify) {
  bool pos, neg;
  classify<int64_t>(-1, 0, &pos, &neg);
  EXPECT_FALSE(pos || neg);
  classify<int64_t>(0, 0, &pos, &neg);
  EXPECT_TRUE(neg && !pos);
  classify<int64_t>(3, 0, &pos, &neg);
  EXPECT_TRUE(pos && !neg);
  classify<int64_t>(80, 80, &pos, &neg);  // detectron2: background = num_classes
  EXPECT_TRUE(neg && !pos);
  classify<int64_t>(0, 80, &pos, &neg);
  EXPECT_TRUE(pos && !neg);
  classify<uint8_t>(255, 0, &pos, &neg);  // unsigned labels are never ignored
  EXPECT_TRUE(pos && !neg);
  classify<int8_t>(-2, 0, &pos, &neg);
  EXPECT_FALSE(pos || neg);
  classify<int8_t>(44, 300, &pos, &neg);  // out-of-range negative label: no negatives
  EXPECT_TRUE(pos && !neg);
  classify<bool>(true, 0, &pos, &neg);
  EXPECT_TRUE(pos && !neg);
  classify<bool>(false, 5, &pos, &neg);
  EXPECT_TRUE(neg && !pos);
  // Wide unsigned labels compare as unsigned: never ignored, even at 2^63 and above.
  classify<uint64_t>(~uint64_t{0}, 0, &pos, &neg);
  EXPECT_TRUE(pos && !neg);
  classify<uint64_t>(uint64_t{1} << 63, 0, &pos, &neg);
  EXPECT_TRUE(pos && !neg);
  classify<uint64_t>(80, 80, &pos, &neg);
  EXPECT_TRUE(neg && !pos);
  classify<uint32_t>(0xFFFFFFFFu, 0, &pos, &neg);
  EXPECT_TRUE(pos && !neg);
  classify<uint16_t>(7, 7, &pos, &neg);
  EXPECT_TRUE(neg && !pos);
  // ... and belong to no class of the stratified rule when >= C.
  EXPECT_EQ(stratum_of<uint64_t>(~uint64_t{0}, 3), -1);
  EXPECT_EQ(stratum_bucket<uint64_t>(~uint64_t{0}, 3), 3);
  EXPECT_EQ(stratum_of<uint64_t>(2, 3), 2);
  EXPECT_EQ(stratum_bucket<uint32_t>(0xFFFFFFFFu, 3), 3);
}

// Builds the chunked workspace of one row, in chunks of `chunk` labels (the
// CPU's kChunk, or the CUDA three-launch path's smaller one), and checks
// every rank lookup.
template <typename T>
void check_compaction(const std::vector<T>& storage, int64_t stride, int64_t n, int64_t neg_label,
                      int64_t chunk = kChunk) {
  const int64_t chunks = num_chunks(n, chunk);
  std::vector<uint16_t> work(static_cast<size_t>(n));
  std::vector<int64_t> pos(static_cast<size_t>(chunks + 1), 0), neg(pos);
  if (chunk == kChunk) {
    compact_row(storage.data(), stride, n, neg_label, work.data(), pos.data(), neg.data());
  } else {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t start = c * chunk;
      compact_chunk(storage.data() + start * stride, stride, std::min(chunk, n - start), neg_label,
                    work.data() + start, &pos[static_cast<size_t>(c + 1)],
                    &neg[static_cast<size_t>(c + 1)]);
    }
    counts_to_prefix(pos.data(), chunks);
    counts_to_prefix(neg.data(), chunks);
  }
  std::vector<int64_t> want_pos, want_neg;
  for (int64_t i = 0; i < n; ++i) {
    bool p, q;
    classify(storage[static_cast<size_t>(i * stride)], neg_label, &p, &q);
    if (p) want_pos.push_back(i);
    if (q) want_neg.push_back(i);
  }
  const CompactRow row{work.data(), pos.data(), neg.data(), n, chunks, chunk};
  ASSERT_EQ(row.num_positive(), static_cast<int64_t>(want_pos.size()));
  ASSERT_EQ(row.num_negative(), static_cast<int64_t>(want_neg.size()));
  for (size_t r = 0; r < want_pos.size(); ++r)
    ASSERT_EQ(row.index_of(static_cast<int64_t>(r), true), want_pos[r]);
  for (size_t r = 0; r < want_neg.size(); ++r)
    ASSERT_EQ(row.index_of(static_cast<int64_t>(r), false), want_neg[r]);
}

// The fold every compaction path is checked against: the positives' labels
// of labels[0], labels[stride], ... (len of them) folded label by label,
// how many positives there are, and whether they all carry one label (the
// first's).
struct ReferenceFold {
  PositiveBits bits;
  int64_t positives = 0;
  int64_t first = 0;
  bool one_label = false;
};

template <typename T>
ReferenceFold reference_fold(const T* labels, int64_t stride, int64_t len, int64_t negative_label) {
  ReferenceFold want;
  bool same = true;
  for (int64_t j = 0; j < len; ++j) {
    bool pos, neg;
    classify(labels[j * stride], negative_label, &pos, &neg);
    if (!pos) continue;
    const int64_t v = static_cast<int64_t>(labels[j * stride]);
    want.bits.any |= v;
    want.bits.all &= v;
    if (want.positives++ == 0) want.first = v;
    same = same && v == want.first;
  }
  want.one_label = same && want.positives > 0;
  return want;
}

// compact_chunk's loop folds the positives' labels of strided rows too
// (the vector paths' fold is checked in SimdPaths below): against the OR
// and AND taken label by label, with positives of several labels and of one.
TEST(Compact, FoldsTheLabelsOfStridedPositives) {
  std::mt19937_64 rng(7);
  for (int64_t stride : {int64_t{0}, int64_t{2}, int64_t{3}}) {
    for (int64_t spread : {int64_t{5}, int64_t{2}}) {  // labels -1..3, or -1..0 and 2
      const int64_t n = 1000;
      std::vector<int64_t> storage(static_cast<size_t>(n * std::max<int64_t>(stride, 1)));
      for (auto& v : storage) {
        v = static_cast<int64_t>(rng() % spread) - 1;
        if (spread == 2 && v == 0 && rng() % 2) v = 2;
      }
      std::vector<uint16_t> work(static_cast<size_t>(n));
      int64_t p = 0, q = 0;
      PositiveBits bits;
      compact_chunk(storage.data(), stride, n, 0, work.data(), &p, &q, &bits);
      const ReferenceFold want = reference_fold(storage.data(), stride, n, 0);
      EXPECT_EQ(p, want.positives);
      EXPECT_EQ(bits.any, want.bits.any) << "stride " << stride;
      EXPECT_EQ(bits.all, want.bits.all) << "stride " << stride;
      EXPECT_EQ(bits.one_label(), want.one_label) << "stride " << stride;
      if (stride > 0) {
        EXPECT_EQ(want.one_label, spread == 2);  // both cases occur
      }
    }
  }
}

TEST(Compact, MatchesABruteForceScanAcrossChunks) {
  std::mt19937_64 rng(5);
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{77}, kChunk - 1, kChunk, kChunk + 1,
                    3 * kChunk + 5}) {
    for (int64_t stride : {1, 3}) {
      std::vector<int64_t> storage(static_cast<size_t>(n * stride));
      for (auto& v : storage) v = static_cast<int64_t>(rng() % 5) - 1;  // -1..3
      check_compaction(storage, stride, n, 0);
      check_compaction(storage, stride, n, 2);
    }
  }
  std::vector<uint8_t> bytes(200003);
  for (auto& v : bytes) v = static_cast<uint8_t>(rng() % 3);
  check_compaction(bytes, 1, 200003, 1);
  // Sparse classes: only a few positives in a long row.
  std::vector<int8_t> sparse(3 * kChunk, 0);
  sparse[5] = 1;
  sparse[kChunk + 9] = 1;
  sparse[3 * kChunk - 1] = 1;
  check_compaction(sparse, 1, 3 * kChunk, 0);
}

TEST(Compact, SmallerChunksGiveTheSameIndices) {
  // The CUDA three-launch path compacts in chunks of 8192 labels.
  std::mt19937_64 rng(6);
  for (int64_t n : {int64_t{1}, int64_t{8191}, int64_t{8192}, int64_t{8193}, int64_t{40000},
                    kChunk + 3}) {
    std::vector<int32_t> storage(static_cast<size_t>(n));
    for (auto& v : storage) v = static_cast<int32_t>(rng() % 4) - 1;
    check_compaction(storage, 1, n, 0, 8192);
    check_compaction(storage, 1, n, 2, 1000);
  }
}

TEST(RowPlan, PicksAreUniqueAndMeetTheQuota) {
  BalancedParams p;
  for (int64_t P : {0, 1, 5, 127, 128, 129, 1000})
    for (int64_t Q : {0, 1, 3, 200, 5000})
      for (int64_t K : {0, 1, 7, 64, 256, 2000})
        for (bool fill : {false, true}) {
          p.num_samples = K;
          p.fill_positives = fill;
          p.seed = static_cast<uint64_t>(P * 31 + Q * 7 + K);
          const RowPlan plan = make_row_plan(p, 3, P, Q);
          const Quota want = balanced_quota(P, Q, K, 0.5, fill);
          ASSERT_EQ(plan.quota.num_pos, want.num_pos);
          ASSERT_EQ(plan.quota.num_neg, want.num_neg);
          std::set<int64_t> pos, neg;
          for (int64_t s = 0; s < plan.quota.valid(); ++s) {
            const Pick pick = pick_slot(plan, s);
            auto& set = pick.positive ? pos : neg;
            ASSERT_GE(pick.rank, 0);
            ASSERT_LT(pick.rank, pick.positive ? P : Q);
            ASSERT_TRUE(set.insert(pick.rank).second) << "duplicate pick";
          }
          ASSERT_EQ(static_cast<int64_t>(pos.size()), want.num_pos);
          ASSERT_EQ(static_cast<int64_t>(neg.size()), want.num_neg);
        }
}

TEST(RowPlan, HostAndDeviceStylePermutationsAgree) {
  // fill_row_slots tabulates small permutations; pick_slot(plan, s) evaluates
  // them one element at a time as device code does. Both must agree.
  BalancedParams p;
  p.num_samples = 100;
  p.seed = 99;
  const RowPlan plan = make_row_plan(p, 0, 60, 90);
  const HostPermutation a(plan.slots), b(plan.positives), c(plan.negatives);
  for (int64_t s = 0; s < plan.quota.valid(); ++s) {
    const Pick x = pick_slot(plan, s);
    const Pick y = pick_slot(plan, a, b, c, s);
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.positive, y.positive);
  }
}

TEST(RowPlan, SameInputsSameSamplesDifferentSeedsDiffer) {
  BalancedParams p;
  p.num_samples = 50;
  p.seed = 1;
  const RowPlan a = make_row_plan(p, 0, 500, 500);
  const RowPlan b = make_row_plan(p, 0, 500, 500);
  p.seed = 2;
  const RowPlan c = make_row_plan(p, 0, 500, 500);
  int differ = 0;
  for (int64_t s = 0; s < 50; ++s) {
    EXPECT_EQ(pick_slot(a, s).rank, pick_slot(b, s).rank);
    differ += pick_slot(a, s).rank != pick_slot(c, s).rank;
  }
  EXPECT_GT(differ, 25);
}

// Runs body(path) for every path this CPU has (the scalar one first), with
// the batched evaluations limited to that path; restores the limit after.
template <typename Body>
void for_each_simd_path(const Body& body) {
  const int saved = simd_path_limit().load();
  for (int path = 0; path <= static_cast<int>(cpu_simd_path()); ++path) {
    simd_path_limit() = path;
    body(static_cast<SimdPath>(path));
  }
  simd_path_limit() = saved;
}

// A fused gather's part as fill_row_slots drives it, recording what it is
// given: how each slot was passed (1: with the valid slots, 2: with the
// invalid ones; 0: not passed), once each and in order; its class (0: one
// of the positives of its call, 1: one of a batch's negatives; -1:
// neither), once each; the positives' items, passed by class as their
// indices are written; and the items whose feature rows are requested,
// each valid slot's before the slot is gathered.
struct RecordingGather {
  static constexpr bool kGathers = true;
  std::vector<int>* passed;
  std::vector<int>* label_from;
  int64_t* next;  // the slot the next call must start at
  std::vector<int64_t>* label_requests;
  const int64_t* indices;
  std::vector<int64_t>* row_requests;
  int64_t* valid_passed;  // valid slots passed so far
  void prefetch_row(int64_t item) const { row_requests->push_back(item); }
  void classes(const int64_t* pos_slots, int64_t np, const int64_t* neg_slots, int64_t nn) const {
    for (int64_t i = 0; i < np; ++i) label_requests->push_back(indices[pos_slots[i]]);
    for (int64_t i = 0; i < nn; ++i) {
      ASSERT_EQ((*label_from)[static_cast<size_t>(neg_slots[i])], -1) << "slot " << neg_slots[i];
      (*label_from)[static_cast<size_t>(neg_slots[i])] = 1;
    }
  }
  void pass(int64_t first, int64_t last, int how) const {
    ASSERT_EQ(first, *next);
    ASSERT_LE(first, last);
    for (int64_t s = first; s < last; ++s) (*passed)[static_cast<size_t>(s)] = how;
    *next = last;
  }
  void operator()(int64_t first, int64_t last, const int64_t* pos_slots, int64_t np,
                  int64_t ahead) const {
    pass(first, last, 1);
    *valid_passed += last - first;
    ASSERT_LE(*valid_passed, static_cast<int64_t>(row_requests->size()))
        << "slots up to " << last << " gathered before their rows were requested";
    ASSERT_GE(ahead, 0);
    for (int64_t s = last; s < last + ahead; ++s) row_requests->push_back(indices[s]);
    for (int64_t i = 0; i < np; ++i) {
      const int64_t s = pos_slots[i];
      ASSERT_TRUE(s >= first && s < last) << "slot " << s << " outside [" << first << ", " << last << ")";
      ASSERT_EQ((*label_from)[static_cast<size_t>(s)], -1) << "slot " << s;
      (*label_from)[static_cast<size_t>(s)] = 0;
    }
  }
  void operator()(int64_t first, int64_t last) const { pass(first, last, 2); }
};

TEST(RowPlan, BatchedHostFillEqualsPerSlotEvaluation) {
  // fill_row_slots evaluates batches class by class (small permutations
  // counted or tabulated, by how many slots it fills; the split by class and
  // the chunk lookup vectorized on the AVX-512 path); device code evaluates
  // pick_slot + index_of per slot. Both must write the same indices, on
  // every path: rows of one chunk, of a few chunks, of chunks with no
  // positive or no negative (equal prefix sums), of as many chunks as the
  // vector lookup's linear search takes, and of more.
  std::mt19937_64 rng(17);
  const int64_t many = (kLinearChunkSearch + 1) * kChunk + 5;
  for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{10}, int64_t{60}, int64_t{300}, int64_t{5000},
                    2 * kChunk + 3, 5 * kChunk + 11, kLinearChunkSearch * kChunk, many}) {
    std::vector<int64_t> labels(static_cast<size_t>(n));
    for (auto& v : labels) v = static_cast<int64_t>(rng() % 4) - 1;
    if (n == 5 * kChunk + 11) {  // chunk 1 ignored, chunk 2 positive, chunk 3 negative
      std::fill(labels.begin() + kChunk, labels.begin() + 2 * kChunk, -1);
      std::fill(labels.begin() + 2 * kChunk, labels.begin() + 3 * kChunk, 1);
      std::fill(labels.begin() + 3 * kChunk, labels.begin() + 4 * kChunk, 0);
    }
    const int64_t chunks = num_chunks(n);
    std::vector<uint16_t> work(static_cast<size_t>(std::max<int64_t>(n, 1)));
    std::vector<int64_t> pos(static_cast<size_t>(chunks + 1), 0), neg(pos);
    compact_row(labels.data(), 1, n, 0, work.data(), pos.data(), neg.data());
    const CompactRow row{work.data(), pos.data(), neg.data(), n, chunks};
    const std::vector<int64_t> ks = n >= kLinearChunkSearch * kChunk
                                        ? std::vector<int64_t>{n / 50 + 1}
                                        : std::vector<int64_t>{1, n / 10 + 1, n, n + 7};
    for (int64_t k : ks) {
      for (bool fill : {false, true}) {
        BalancedParams p;
        p.num_samples = k;
        p.positive_fraction = 0.3;
        p.fill_positives = fill;
        p.seed = rng();
        const RowPlan plan = make_row_plan(p, 5, row.num_positive(), row.num_negative());
        // Ranges of 1 to 12 slots (a split of one row's slots over
        // workers), and for long rows also whole batches and runs (up to
        // 2600 slots: runs of 1024 and a last run of any length).
        std::vector<std::pair<int64_t, int64_t>> ranges;
        for (int64_t b = 0; b < k;) {
          const int64_t e = std::min(k, b + 1 + static_cast<int64_t>(rng() % (n > 5000 ? 2600 : 12)));
          ranges.emplace_back(b, e);
          b = e;
        }
        for_each_simd_path([&](SimdPath path) {
          std::vector<int64_t> indices(static_cast<size_t>(k));
          std::unique_ptr<bool[]> valid(new bool[static_cast<size_t>(k)]);
          for (const auto& range : ranges)
            fill_row_slots(plan, row, range.first, range.second, indices.data(), valid.get());
          // The same with a fused gather: the same slots, each passed to it
          // once, each valid slot's label read (a positive) or written (a
          // negative), and the positives' labels requested ahead.
          std::vector<int64_t> gathered(static_cast<size_t>(k));
          std::unique_ptr<bool[]> gathered_valid(new bool[static_cast<size_t>(k)]);
          std::vector<int> passed(static_cast<size_t>(k), 0), label_from(passed.size(), -1);
          std::vector<int64_t> label_requests, row_requests;
          int64_t next = 0, valid_passed = 0;
          const RecordingGather gather{&passed,        &label_from,     &next,
                                       &label_requests, gathered.data(), &row_requests,
                                       &valid_passed};
          for (const auto& range : ranges)
            fill_row_slots(plan, row, range.first, range.second, gathered.data(),
                           gathered_valid.get(), gather);
          ASSERT_EQ(next, k);
          ASSERT_EQ(gathered, indices);
          std::vector<int64_t> positive_items, valid_items;
          for (int64_t s = 0; s < k; ++s) {
            ASSERT_EQ(gathered_valid[static_cast<size_t>(s)], valid[static_cast<size_t>(s)]);
            if (s < plan.quota.valid()) {
              const Pick pick = pick_slot(plan, s);
              ASSERT_TRUE(valid[static_cast<size_t>(s)]) << "path " << static_cast<int>(path);
              ASSERT_EQ(indices[static_cast<size_t>(s)], row.index_of(pick.rank, pick.positive))
                  << "path " << static_cast<int>(path) << ", n " << n << ", slot " << s;
              ASSERT_EQ(passed[static_cast<size_t>(s)], 1) << "slot " << s;
              ASSERT_EQ(label_from[static_cast<size_t>(s)], pick.positive ? 0 : 1)
                  << "path " << static_cast<int>(path) << ", n " << n << ", slot " << s;
              if (pick.positive) positive_items.push_back(indices[static_cast<size_t>(s)]);
              valid_items.push_back(indices[static_cast<size_t>(s)]);
            } else {
              ASSERT_FALSE(valid[static_cast<size_t>(s)]);
              ASSERT_EQ(indices[static_cast<size_t>(s)], -1);
              ASSERT_EQ(passed[static_cast<size_t>(s)], 2) << "slot " << s;
              ASSERT_EQ(label_from[static_cast<size_t>(s)], -1) << "slot " << s;
            }
          }
          std::sort(positive_items.begin(), positive_items.end());
          std::sort(label_requests.begin(), label_requests.end());
          ASSERT_EQ(label_requests, positive_items) << "path " << static_cast<int>(path);
          std::sort(valid_items.begin(), valid_items.end());
          std::sort(row_requests.begin(), row_requests.end());
          ASSERT_EQ(row_requests, valid_items) << "path " << static_cast<int>(path);
        });
      }
    }
  }
}

TEST(Permutation, BatchedApplyEqualsOneAtATimeOnWideDomains) {
  // HostPermutation::apply (AVX2 where available, halves up to 32 bits) must
  // equal Permutation::operator() everywhere, including the widest domains.
  std::mt19937_64 rng(23);
  for (int64_t n : {int64_t{129}, (int64_t{1} << 20) + 3, (int64_t{1} << 31) + 11,
                    (int64_t{1} << 40) + 1, INT64_MAX}) {
    const Permutation perm(rng(), n);
    const HostPermutation host(perm);
    std::vector<int64_t> values(1003);
    for (auto& v : values) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    std::vector<int64_t> batched = values;
    host.apply(batched.data(), static_cast<int64_t>(batched.size()));
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(batched[i], perm(values[i])) << n;
  }
}

TEST(Stratified, TakeRuleAndPrefixes) {
  // Quotas [5, -2, 3, 9] on classes of 4, 6, 2, 7 items with K = 8: class 0
  // takes 4, class 1 none (negative quota), class 2 its 2, class 3 the 2 left.
  const int64_t counts[] = {4, 6, 2, 7};
  const int64_t quota[] = {5, -2, 3, 9};
  int64_t take[5], left[5];
  StratifiedParams p;
  p.num_samples = 8;
  p.num_classes = 4;
  for (bool fill : {false, true}) {
    p.fill = fill;
    const StratifiedPlan plan = make_stratified_plan(p, 0, counts, quota, take, left);
    const int64_t want_take[] = {0, 4, 4, 6, 8};
    const int64_t want_left[] = {0, 0, 6, 6, 11};
    for (int c = 0; c <= 4; ++c) {
      EXPECT_EQ(take[c], want_take[c]);
      EXPECT_EQ(left[c], want_left[c]);
    }
    EXPECT_EQ(plan.taken, 8);
    EXPECT_EQ(plan.filled, 0);
    EXPECT_FALSE(permutes_stratum(plan, left, 0));  // class 0 taken whole
    EXPECT_TRUE(permutes_stratum(plan, left, 3));
  }
  // find_stratum skips empty classes.
  const int64_t prefix[] = {0, 2, 2, 2, 5};
  EXPECT_EQ(find_stratum(prefix, 4, 0), 0);
  EXPECT_EQ(find_stratum(prefix, 4, 1), 0);
  EXPECT_EQ(find_stratum(prefix, 4, 2), 3);
  EXPECT_EQ(find_stratum(prefix, 4, 4), 3);
  EXPECT_EQ(stratum_of(int8_t{-1}, 3), -1);
  EXPECT_EQ(stratum_of(int64_t{3}, 3), -1);
  EXPECT_EQ(stratum_of(uint8_t{2}, 3), 2);
  EXPECT_EQ(stratum_of(true, 1), -1);
  EXPECT_EQ(stratum_of(false, 1), 0);
  for (int64_t v : {INT64_MIN, int64_t{-1}, int64_t{0}, int64_t{2}, int64_t{3}, INT64_MAX}) {
    EXPECT_EQ(stratum_bucket(v, 3), stratum_of(v, 3) < 0 ? 3 : stratum_of(v, 3));
  }
  EXPECT_EQ(stratum_bucket(true, 1), 1);
  EXPECT_EQ(stratum_bucket(uint8_t{255}, 300), 255);
}

TEST(Stratified, BatchedHostRowEqualsPerSlotEvaluation) {
  // stratified_row groups slots by class and applies each pi_c in batches;
  // device code evaluates pick_stratified_slot per slot. Same indices, for
  // small (exact) and Feistel domains, shared and per-row quotas (negative
  // and oversize ones included), both index widths.
  std::mt19937_64 rng(29);
  for (int64_t C : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{300}}) {
    for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{90}, int64_t{700}, int64_t{4000}}) {
      const int64_t rows = 3;
      std::vector<int16_t> labels(static_cast<size_t>(rows * n));
      for (auto& v : labels) v = static_cast<int16_t>(static_cast<int64_t>(rng() % (C + 3)) - 1);
      for (int64_t k : {int64_t{0}, int64_t{1}, n / 7 + 1, n, n + 5}) {
        std::vector<int64_t> quota(static_cast<size_t>(rows * C));
        for (auto& q : quota) q = static_cast<int64_t>(rng() % static_cast<uint64_t>(k / 2 + 3)) - 1;
        for (bool fill : {false, true}) {
          StratifiedParams p;
          p.num_samples = k;
          p.num_classes = C;
          p.fill = fill;
          p.seed = rng();
          const size_t out = static_cast<size_t>(rows * k);
          std::vector<int64_t> want(out), got32(out), got64(out);
          std::unique_ptr<bool[]> want_valid(new bool[out + 1]), valid32(new bool[out + 1]),
              valid64(new bool[out + 1]);
          stratified_rows_serial(labels.data(), rows, n, quota.data(), C, p, want.data(),
                                 want_valid.get());
          std::vector<int64_t> w32(static_cast<size_t>(stratified_workspace_words<int32_t>(n, k, C)));
          std::vector<int64_t> w64(static_cast<size_t>(stratified_workspace_words<int64_t>(n, k, C)));
          for (int64_t r = 0; r < rows; ++r) {
            stratified_row<int32_t>(labels.data() + r * n, 1, n, quota.data() + r * C, p, r,
                                    w32.data(), got32.data() + r * k, valid32.get() + r * k);
            stratified_row<int64_t>(labels.data() + r * n, 1, n, quota.data() + r * C, p, r,
                                    w64.data(), got64.data() + r * k, valid64.get() + r * k);
          }
          for (size_t i = 0; i < out; ++i) {
            ASSERT_EQ(got32[i], want[i]) << "C=" << C << " n=" << n << " k=" << k << " i=" << i;
            ASSERT_EQ(got64[i], want[i]);
            ASSERT_EQ(valid32[i], want_valid[i]);
            ASSERT_EQ(valid64[i], want_valid[i]);
          }
          // No duplicates within a row.
          for (int64_t r = 0; r < rows; ++r) {
            std::set<int64_t> seen;
            for (int64_t s = 0; s < k; ++s) {
              if (want_valid[static_cast<size_t>(r * k + s)]) {
                ASSERT_TRUE(seen.insert(want[static_cast<size_t>(r * k + s)]).second);
              }
            }
          }
        }
      }
    }
  }
}

TEST(Stratified, KeysDifferFromBalancedSampleKeys) {
  const uint64_t rk = row_key(call_key(1, 0), 0);
  const uint64_t keys[] = {purpose_key(rk, kSlotPermutation), purpose_key(rk, kPositivePermutation),
                           purpose_key(rk, kNegativePermutation),
                           purpose_key(rk, kStratifiedSlotPermutation),
                           purpose_key(rk, kStratifiedFillPermutation),
                           purpose_key(rk, kStratifiedClassPermutation)};
  std::set<uint64_t> distinct(std::begin(keys), std::end(keys));
  EXPECT_EQ(distinct.size(), 6u);
}

// --- the vector paths (AVX2, AVX-512) against the scalar one -------------------------
// (for_each_simd_path: above, with the row plans)

TEST(SimdPaths, TheLimitSelectsThePath) {
  for_each_simd_path([](SimdPath path) { EXPECT_EQ(simd_path(), path); });
  EXPECT_EQ(simd_path(), cpu_simd_path());
}

// Contiguous labels take a vector path wherever the CPU has one; strided
// ones (stride 0 included) take compact_chunk's loop on every path.
TEST(SimdPaths, OnlyContiguousLabelsTakeAVectorCompaction) {
  for_each_simd_path([](SimdPath path) {
    EXPECT_EQ(vector_compaction(1, path), path != SimdPath::kScalar);
    EXPECT_EQ(vector_compaction(1), path != SimdPath::kScalar);  // the limit's path
    for (int64_t stride : {int64_t{0}, int64_t{2}, int64_t{-1}}) {
      EXPECT_FALSE(vector_compaction(stride, path)) << "stride " << stride;
    }
  });
}

TEST(SimdPaths, FeistelPassEqualsTheScalarNetworkOnEveryPath) {
  // Every count (ragged tails of 4 and 8 lanes, and of the AVX-512 path's
  // blocks of 4 and 8 vectors, included) and domain width (halves of 4 to
  // 32 bits, odd and even widths), many keys.
  std::mt19937_64 rng(31);
  for (int64_t n : {int64_t{129}, int64_t{200}, int64_t{256}, int64_t{257}, int64_t{1000},
                    int64_t{65537}, (int64_t{1} << 20) + 3, (int64_t{1} << 31) + 11,
                    (int64_t{1} << 40) + 1, INT64_MAX}) {
    for (int key = 0; key < 20; ++key) {
      const Permutation perm(rng(), n);
      const uint64_t domain_mask =
          perm.domain_bits() >= 64 ? ~uint64_t{0} : (uint64_t{1} << perm.domain_bits()) - 1;
      for (int64_t count : {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 255,
                            256, 1003}) {
        std::vector<int64_t> values(static_cast<size_t>(count));
        for (auto& v : values) v = static_cast<int64_t>(rng() & domain_mask);
        for_each_simd_path([&](SimdPath path) {
          std::vector<int64_t> got = values;
          feistel_pass(perm, got.data(), count, path);
          for (int64_t i = 0; i < count; ++i)
            ASSERT_EQ(static_cast<uint64_t>(got[static_cast<size_t>(i)]),
                      perm.feistel(static_cast<uint64_t>(values[static_cast<size_t>(i)])))
                << "path " << static_cast<int>(path) << ", n " << n << ", count " << count;
        });
      }
    }
  }
}

TEST(SimdPaths, SamplesAreTheSameOnEveryPath) {
  // balanced_sample's serial reference (the CPU backend's batched code) on
  // every path against the scalar path, and stratified_row (the CPU
  // backend's batched row) on every path against the slot-by-slot
  // reference, over many seeds, edge sizes (N = 0, 1, 2, 129, K > N) and
  // rows longer than a chunk.
  std::mt19937_64 rng(37);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{129}, int64_t{1000},
                    int64_t{5003}, kChunk + 7}) {
    const int64_t rows = 2;
    std::vector<int64_t> labels(static_cast<size_t>(rows * n));
    for (auto& v : labels) v = static_cast<int64_t>(rng() % 4) - 1;
    for (int64_t k : {int64_t{1}, n / 10 + 1, n / 2 + 3, n, n + 9}) {
      for (int seed = 0; seed < 6; ++seed) {
        BalancedParams p;
        p.num_samples = k;
        p.positive_fraction = seed % 2 ? 0.5 : 0.3;
        p.fill_positives = seed % 3 != 0;
        p.seed = rng();
        StratifiedParams sp;
        sp.num_samples = k;
        sp.num_classes = 3;
        sp.fill = seed % 2 == 0;
        sp.seed = p.seed;
        const std::vector<int64_t> quota = {k / 3, k / 4 + 1, k};
        std::vector<int64_t> want;
        std::vector<int64_t> want_strat(static_cast<size_t>(rows * k));
        std::unique_ptr<bool[]> strat_valid(new bool[static_cast<size_t>(rows * k) + 1]);
        stratified_rows_serial(labels.data(), rows, n, quota.data(), 0, sp, want_strat.data(),
                               strat_valid.get());
        std::vector<int64_t> work(
            static_cast<size_t>(stratified_workspace_words<int32_t>(n, k, sp.num_classes)));
        for_each_simd_path([&](SimdPath path) {
          std::vector<int64_t> indices(static_cast<size_t>(rows * k));
          std::unique_ptr<bool[]> valid(new bool[static_cast<size_t>(rows * k) + 1]);
          sample_rows_serial(labels.data(), rows, n, p, indices.data(), valid.get());
          if (path == SimdPath::kScalar) {
            want = indices;
          } else {
            ASSERT_EQ(indices, want) << "path " << static_cast<int>(path) << ", n " << n;
          }
          std::vector<int64_t> strat(static_cast<size_t>(rows * k));
          for (int64_t r = 0; r < rows; ++r)
            stratified_row<int32_t>(labels.data() + r * n, 1, n, quota.data(), sp, r,
                                    work.data(), strat.data() + r * k, valid.get() + r * k);
          ASSERT_EQ(strat, want_strat) << "path " << static_cast<int>(path) << ", n " << n;
        });
      }
    }
  }
}

template <typename T>
void check_compaction_on_every_path(uint64_t seed) {
  // compact_chunk_host on every path against compact_chunk (the scalar
  // loop): the same counts and the same entries in each class's range, for
  // every length up to 140 (ragged tails of 16 and of 32 labels, with full
  // and masked stores on the VBMI2 path), a few long ones, all one class,
  // none of either, negative labels other than 0, and labels at the type's
  // limits (a signed type's minimum: only its sign bit set). Each path's
  // fold of the positives' labels (PositiveBits) is their OR and AND, taken
  // here label by label, also where the positives carry one label (modes 6
  // and 7: 2, or the type's maximum) and where one positive, anywhere,
  // differs from the others in its lowest bit (mode 7).
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lengths;
  for (int64_t len = 0; len <= 140; ++len) lengths.push_back(len);
  for (int64_t len : {int64_t{1000}, int64_t{4099}, kChunk}) lengths.push_back(len);
  for (int64_t len : lengths) {
    for (int mode = 0; mode < 8; ++mode) {
      const int64_t negative_label = mode == 4 ? 3 : 0;
      const T one = std::is_same<T, bool>::value ? T(1)
                    : len % 2 ? std::numeric_limits<T>::max() : static_cast<T>(2);
      // Exactly len labels (not std::vector, which packs bools): a path
      // that reads past them fails under the sanitizers.
      std::unique_ptr<T[]> labels(new T[static_cast<size_t>(len)]);
      for (int64_t j = 0; j < len; ++j) {
        const int64_t r = static_cast<int64_t>(rng() % 5) - 1;  // -1 .. 3
        labels[j] = static_cast<T>(mode == 1 ? 1 : mode == 2 ? 0 : mode == 3 ? -1 : r);
        if (mode == 5) {
          const uint64_t pick = rng() % 5;
          if (pick == 0) labels[j] = std::numeric_limits<T>::min();
          if (pick == 1) labels[j] = std::numeric_limits<T>::max();
          if (pick == 2) labels[j] = static_cast<T>(std::numeric_limits<T>::min() + 1);
        }
        if (mode >= 6) {  // `one`, negative (0) or, for signed types, ignored (-1)
          const int64_t other = std::is_signed<T>::value ? std::min<int64_t>(r, 0) : 0;
          labels[j] = r >= 1 ? one : static_cast<T>(other);
        }
      }
      if (mode == 7 && len > 0 && !std::is_same<T, bool>::value) {
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(len));
        labels[j] = static_cast<T>(one ^ 1);  // still a positive: 3, or the maximum less 1
      }
      const ReferenceFold want_fold = reference_fold(labels.get(), 1, len, negative_label);
      const PositiveBits& want_bits = want_fold.bits;
      ASSERT_EQ(want_bits.one_label(), want_fold.one_label) << "len " << len << ", mode " << mode;
      if (want_fold.one_label) {
        ASSERT_EQ(want_bits.any, want_fold.first);
      }
      if (mode == 6 && want_fold.positives > 0) {
        ASSERT_TRUE(want_fold.one_label);
      }
      std::vector<uint16_t> want(static_cast<size_t>(len) + 1);
      int64_t want_p = -1, want_q = -1;
      PositiveBits scalar_bits;
      compact_chunk(labels.get(), 1, len, negative_label, want.data(), &want_p, &want_q,
                    &scalar_bits);
      ASSERT_EQ(scalar_bits.any, want_bits.any) << "len " << len << ", mode " << mode;
      ASSERT_EQ(scalar_bits.all, want_bits.all) << "len " << len << ", mode " << mode;
      // The chunk's workspace between two guards of 64 entries, which no path may write.
      constexpr int64_t kGuard = 64;
      constexpr uint16_t kSentinel = 0xBEEF;
      std::vector<uint16_t> buffer(static_cast<size_t>(len + 2 * kGuard));
      uint16_t* got = buffer.data() + kGuard;
      for_each_simd_path([&](SimdPath path) {
        std::fill(buffer.begin(), buffer.end(), kSentinel);
        int64_t p = -1, q = -1;
        compact_chunk_host(labels.get(), 1, len, negative_label, got, &p, &q, path);
        ASSERT_EQ(p, want_p) << "path " << static_cast<int>(path) << ", len " << len;
        ASSERT_EQ(q, want_q) << "path " << static_cast<int>(path) << ", len " << len;
        // With the fold: the same entries, and the labels' OR and AND.
        PositiveBits bits;
        std::fill(buffer.begin(), buffer.end(), kSentinel);
        compact_chunk_host(labels.get(), 1, len, negative_label, got, &p, &q, path, &bits);
        ASSERT_EQ(p, want_p) << "path " << static_cast<int>(path) << ", len " << len;
        ASSERT_EQ(q, want_q) << "path " << static_cast<int>(path) << ", len " << len;
        ASSERT_EQ(bits.any, want_bits.any)
            << "path " << static_cast<int>(path) << ", len " << len << ", mode " << mode;
        ASSERT_EQ(bits.all, want_bits.all)
            << "path " << static_cast<int>(path) << ", len " << len << ", mode " << mode;
        for (int64_t j = 0; j < p; ++j) ASSERT_EQ(got[j], want[static_cast<size_t>(j)]);
        for (int64_t j = len - q; j < len; ++j) ASSERT_EQ(got[j], want[static_cast<size_t>(j)]);
        for (int64_t j = 1; j <= kGuard; ++j) {
          ASSERT_EQ(got[-j], kSentinel) << "path " << static_cast<int>(path) << ", len " << len;
          ASSERT_EQ(got[len - 1 + j], kSentinel) << "path " << static_cast<int>(path) << ", len " << len;
        }
      });
    }
  }
}

TEST(SimdPaths, CompactionIsTheSameOnEveryPath) {
  // Every label type (unsigned ones take -1 as their largest value, a
  // positive; bool labels take -1 as true).
  check_compaction_on_every_path<int64_t>(41);
  check_compaction_on_every_path<int32_t>(43);
  check_compaction_on_every_path<int16_t>(47);
  check_compaction_on_every_path<int8_t>(59);
  check_compaction_on_every_path<uint8_t>(61);
  check_compaction_on_every_path<bool>(67);
  check_compaction_on_every_path<uint16_t>(71);
  check_compaction_on_every_path<uint32_t>(73);
  check_compaction_on_every_path<uint64_t>(79);
}

template <typename T>
void check_unmatchable_negative_label(int64_t negative_label) {
  // A negative_label beyond the type's values: no label is negative, and a
  // label equal to its low bits is not taken for one.
  std::vector<T> labels(200, static_cast<T>(5));
  for (size_t i = 0; i < labels.size(); i += 3) labels[i] = static_cast<T>(negative_label);
  std::vector<uint16_t> work(labels.size());
  const int64_t len = static_cast<int64_t>(labels.size());
  int64_t want_p = -1, want_q = -1;
  compact_chunk(labels.data(), 1, len, negative_label, work.data(), &want_p, &want_q);
  EXPECT_EQ(want_q, 0);
  for_each_simd_path([&](SimdPath path) {
    int64_t p = -1, q = -1;
    compact_chunk_host(labels.data(), 1, len, negative_label, work.data(), &p, &q, path);
    EXPECT_EQ(p, want_p) << "path " << static_cast<int>(path);
    EXPECT_EQ(q, 0) << "path " << static_cast<int>(path);
  });
}

template <typename T>
void check_negative_label_at_the_type_maximum() {
  // The type's largest value as the negative label: matchable, every label
  // equal to it negative.
  const int64_t negative_label = static_cast<int64_t>(std::numeric_limits<T>::max());
  std::unique_ptr<T[]> labels(new T[200]);
  for (int64_t i = 0; i < 200; ++i) labels[i] = static_cast<T>(i % 3 == 0 ? negative_label : 5);
  std::vector<uint16_t> work(200);
  int64_t want_p = -1, want_q = -1;
  compact_chunk(labels.get(), 1, 200, negative_label, work.data(), &want_p, &want_q);
  EXPECT_EQ(want_q, 67);
  for_each_simd_path([&](SimdPath path) {
    int64_t p = -1, q = -1;
    compact_chunk_host(labels.get(), 1, 200, negative_label, work.data(), &p, &q, path);
    EXPECT_EQ(p, want_p) << "path " << static_cast<int>(path);
    EXPECT_EQ(q, want_q) << "path " << static_cast<int>(path);
  });
}

TEST(SimdPaths, ANegativeLabelAtTheTypeMaximumMatches) {
  check_negative_label_at_the_type_maximum<int8_t>();
  check_negative_label_at_the_type_maximum<uint8_t>();
  check_negative_label_at_the_type_maximum<int16_t>();
  check_negative_label_at_the_type_maximum<uint16_t>();
  check_negative_label_at_the_type_maximum<int32_t>();
  check_negative_label_at_the_type_maximum<uint32_t>();
  check_negative_label_at_the_type_maximum<int64_t>();
}

TEST(SimdPaths, ANegativeLabelBeyondTheTypeMatchesNoLabel) {
  check_unmatchable_negative_label<int8_t>(128 + 5);
  check_unmatchable_negative_label<uint8_t>(256 + 5);
  check_unmatchable_negative_label<int16_t>(32768 + 5);
  check_unmatchable_negative_label<uint16_t>(65536 + 5);
  check_unmatchable_negative_label<int32_t>((int64_t{1} << 40) + 5);
  check_unmatchable_negative_label<uint32_t>((int64_t{1} << 32) + 5);
}

TEST(SimdPaths, CycleWalkingIsTheSameOnEveryPath) {
  // HostPermutation::apply (a pass over a batch, then the values outside
  // [0, n) packed and passed again) on every path against
  // Permutation::operator(), over domains just above a power of two (about
  // half the values walk) and just below, batches of every tail length.
  // 2^53 + 1 has the widest domain (54 bits) whose first packing keeps
  // each value's position in its high bits (cycle_walk_pack_first_avx512),
  // 2^54 + 1 the narrowest past it.
  std::mt19937_64 rng(53);
  for (int64_t n : {int64_t{129}, int64_t{255}, int64_t{257}, int64_t{4097}, int64_t{65535},
                    (int64_t{1} << 33) + 1, (int64_t{1} << 53) + 1, (int64_t{1} << 54) + 1,
                    INT64_MAX}) {
    for (int key = 0; key < 10; ++key) {
      const Permutation perm(rng(), n);
      const HostPermutation host(perm);
      for (int64_t count : {0, 1, 7, 8, 9, 12, 16, 17, 24, 255, 256, 257, 700, 1023, 1024, 1025,
                                2500}) {
        std::vector<int64_t> values(static_cast<size_t>(count));
        for (auto& v : values) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        for_each_simd_path([&](SimdPath path) {
          std::vector<int64_t> got = values;
          host.apply(got.data(), count);
          for (int64_t i = 0; i < count; ++i)
            ASSERT_EQ(got[static_cast<size_t>(i)], perm(values[static_cast<size_t>(i)]))
                << "path " << static_cast<int>(path) << ", n " << n << ", count " << count;
        });
      }
    }
  }
}

template <typename T>
void check_stratified_rows_on_every_path(uint64_t seed) {
  // stratified_row on every path (AVX-512 counts and sorts rows of at most
  // kVectorClasses classes) against the slot-by-slot reference: 1 to 5
  // classes, labels of no class (-1 and C) included, lengths with every
  // tail of 16, K up to beyond N.
  std::mt19937_64 rng(seed);
  for (int64_t C : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{5}}) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{33},
                      int64_t{1000}, int64_t{4099}}) {
      // Exactly n labels (not std::vector, which packs bools).
      std::unique_ptr<T[]> labels(new T[static_cast<size_t>(n)]);
      for (int64_t j = 0; j < n; ++j)
        labels[j] = static_cast<T>(static_cast<int64_t>(rng() % (C + 2)) - 1);
      for (int64_t k : {int64_t{1}, n / 5 + 1, n + 3}) {
        for (bool fill : {false, true}) {
          StratifiedParams sp;
          sp.num_samples = k;
          sp.num_classes = C;
          sp.fill = fill;
          sp.seed = rng();
          std::vector<int64_t> quota(static_cast<size_t>(C));
          for (auto& q : quota) q = static_cast<int64_t>(rng() % static_cast<uint64_t>(k + 1));
          std::vector<int64_t> want(static_cast<size_t>(k));
          std::unique_ptr<bool[]> valid(new bool[static_cast<size_t>(k) + 1]);
          stratified_rows_serial(labels.get(), 1, n, quota.data(), 0, sp, want.data(),
                                 valid.get());
          std::vector<int64_t> work(static_cast<size_t>(stratified_workspace_words<int32_t>(n, k, C)));
          for_each_simd_path([&](SimdPath path) {
            std::vector<int64_t> got(static_cast<size_t>(k));
            stratified_row<int32_t>(labels.get(), 1, n, quota.data(), sp, 0, work.data(),
                                    got.data(), valid.get());
            ASSERT_EQ(got, want) << "path " << static_cast<int>(path) << ", C " << C << ", n "
                                 << n << ", k " << k;
          });
        }
      }
    }
  }
}

TEST(SimdPaths, StratifiedRowsAreTheSameOnEveryPath) {
  // Every label type (unsigned ones take -1 as their largest value, of no
  // class; bool labels take it as true).
  check_stratified_rows_on_every_path<int64_t>(59);
  check_stratified_rows_on_every_path<int32_t>(61);
  check_stratified_rows_on_every_path<int16_t>(83);
  check_stratified_rows_on_every_path<int8_t>(89);
  check_stratified_rows_on_every_path<uint8_t>(97);
  check_stratified_rows_on_every_path<bool>(101);
  check_stratified_rows_on_every_path<uint16_t>(103);
  check_stratified_rows_on_every_path<uint32_t>(107);
  check_stratified_rows_on_every_path<uint64_t>(109);
}
