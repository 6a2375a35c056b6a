// Multi-class stratified sampling: the row plan and what one output slot holds.
//
// A row of N labels and C classes: an element with label c in [0, C) belongs
// to class c; labels < 0 or >= C are never sampled (bool labels: false is
// class 0, true class 1). With A_c elements in class c and K slots:
//
//   take_c = min(A_c, max(quota_c, 0), K - (take_0 + ... + take_{c-1}))
//   T      = sum of take_c                 (the quota picks)
//   L_c    = A_c - take_c                  (the leftovers of class c)
//   F      = fill ? min(K - T, sum of L_c) : 0   (the fill picks)
//   V      = T + F                         (valid slots)
//
// Randomness, all keyed from the row key (random.h): pi_c, a permutation of
// [0, A_c) per class, orders the class (its first take_c entries are the quota
// picks, the rest its leftovers); rho, a permutation of [0, sum L), picks the
// fill among the leftovers of all classes laid end to end; sigma, a
// permutation of [0, V), orders the slots. Valid slot s:
//
//   t = sigma(s)
//   t <  T: class c with take_prefix[c] <= t < take_prefix[c + 1],
//           position q = t - take_prefix[c]
//   t >= T: u = rho(t - T), class c with left_prefix[c] <= u < left_prefix[c + 1],
//           position q = take_c + (u - left_prefix[c])
//   rank within class c = pi_c(q)        (ranks count in index order)
//
// Hence each class's quota picks are a uniformly random take_c-subset of the
// class, the fill a uniformly random F-subset of the leftovers, the slots in
// uniformly random order, and distinct slots get distinct (class, rank): no
// duplicates. Finding the class is a binary search over C + 1 prefix sums
// (O(log C) per slot).
//
// Permutations are skipped exactly where they cannot change the law (sigma is
// then applied, or the one permutation that replaces it already orders the
// slots uniformly):
//  * pi_c when the whole class is chosen (take_c == A_c, or the fill takes
//    every leftover): the chosen set is the whole class and sigma orders it;
//  * rho when the fill takes every leftover (F == sum L);
//  * sigma when every valid slot comes from one source whose own permutation
//    already orders it: one class by quota alone (F == 0, a single class with
//    0 < take_c < A_c, pi_c applied), or the fill alone (T == 0, rho applied).
#pragma once

#include <cstdint>
#include <type_traits>

#include "permutation.h"
#include "platform.h"
#include "random.h"

namespace syncfree {
namespace core {

// Options of one stratified call, shared by every row.
struct StratifiedParams {
  int64_t num_samples = 0;
  int64_t num_classes = 1;
  bool fill = true;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Class of a label: c in [0, num_classes), or -1 (never sampled). A uint64
// label of 2^63 or more wraps to a negative v here: of no class, as it is
// >= num_classes anyway.
template <typename T>
SYNCFREE_HD int64_t stratum_of(T label, int64_t num_classes) {
  int64_t v;
  if constexpr (std::is_same<T, bool>::value) {
    v = label ? 1 : 0;
  } else {
    v = static_cast<int64_t>(label);
  }
  return ((v >= 0) & (v < num_classes)) ? v : -1;
}

// Class of a label, or num_classes for labels of no class: a branch-free
// form of stratum_of for host loops over whole rows (random labels would
// mispredict a branch).
template <typename T>
SYNCFREE_HD int64_t stratum_bucket(T label, int64_t num_classes) {
  int64_t v;
  if constexpr (std::is_same<T, bool>::value) {
    v = label ? 1 : 0;
  } else {
    v = static_cast<int64_t>(label);
  }
  // Negative labels wrap to huge unsigned values: one comparison covers both bounds.
  const int64_t in = -static_cast<int64_t>(static_cast<uint64_t>(v) <
                                           static_cast<uint64_t>(num_classes));
  return (v & in) | (num_classes & ~in);
}

// Largest c in [0, num_classes) with prefix[c] <= x, for prefix[0] == 0 <= x <
// prefix[num_classes]: the class whose range [prefix[c], prefix[c + 1]) holds x
// (empty classes have equal bounds and are passed over). Branch-free.
SYNCFREE_HD int64_t find_stratum(const int64_t* prefix, int64_t num_classes, int64_t x) {
  int64_t lo = 0;
  int64_t span = num_classes;
  while (span > 1) {
    const int64_t half = span / 2;
    lo = prefix[lo + half] <= x ? lo + half : lo;
    span -= half;
  }
  return lo;
}

struct StratifiedPlan {
  int64_t num_classes = 0;
  int64_t taken = 0;     // T
  int64_t leftover = 0;  // sum of L_c
  int64_t filled = 0;    // F
  uint64_t class_root = 0;  // key from which each pi_c's key derives
  bool permute_slots = false;
  bool permute_fill = false;
  Permutation slots;  // sigma, over [0, V)
  Permutation fill;   // rho, over [0, sum L)

  SYNCFREE_HD int64_t valid() const { return taken + filled; }
  // Whether the fill takes every leftover (then pi_c and rho are skipped).
  SYNCFREE_HD bool all_leftovers() const { return filled == leftover; }
};

// Builds a row's plan from its class counts. counts[c] = A_c and quota[c]
// (any int64; negative takes nothing) for c < C; writes the exclusive prefix
// sums of the takes and of the leftovers to take_prefix[0..C] and
// left_prefix[0..C] (so class c's elements, in index order, start at
// take_prefix[c] + left_prefix[c] in the row's class-sorted order). O(C).
SYNCFREE_HD StratifiedPlan make_stratified_plan(const StratifiedParams& p, int64_t row,
                                                const int64_t* counts, const int64_t* quota,
                                                int64_t* take_prefix, int64_t* left_prefix) {
  StratifiedPlan plan;
  const int64_t num_classes = p.num_classes;
  plan.num_classes = num_classes;
  int64_t remaining = p.num_samples;
  int64_t taking_classes = 0;  // classes with take_c > 0
  bool single_source_partial = false;  // the last such class keeps leftovers
  take_prefix[0] = 0;
  left_prefix[0] = 0;
  for (int64_t c = 0; c < num_classes; ++c) {
    const int64_t a = counts[c];
    int64_t take = quota[c] > 0 ? quota[c] : 0;
    take = take < a ? take : a;
    take = take < remaining ? take : remaining;
    remaining -= take;
    take_prefix[c + 1] = take_prefix[c] + take;
    left_prefix[c + 1] = left_prefix[c] + (a - take);
    if (take > 0) {
      ++taking_classes;
      single_source_partial = take < a;
    }
  }
  plan.taken = take_prefix[num_classes];
  plan.leftover = left_prefix[num_classes];
  const int64_t room = p.num_samples - plan.taken;
  plan.filled = p.fill ? (room < plan.leftover ? room : plan.leftover) : 0;
  plan.permute_fill = plan.filled > 0 && plan.filled < plan.leftover;
  const bool quota_alone = plan.filled == 0 && taking_classes == 1 && single_source_partial;
  const bool fill_alone = plan.taken == 0 && plan.permute_fill;
  plan.permute_slots = !(quota_alone || fill_alone);
  const uint64_t rk = row_key(call_key(p.seed, p.offset), static_cast<uint64_t>(row));
  if (plan.permute_slots)
    plan.slots = Permutation(purpose_key(rk, kStratifiedSlotPermutation), plan.valid());
  if (plan.permute_fill)
    plan.fill = Permutation(purpose_key(rk, kStratifiedFillPermutation), plan.leftover);
  plan.class_root = purpose_key(rk, kStratifiedClassPermutation);
  return plan;
}

// Number of elements of class c (take + leftovers).
SYNCFREE_HD int64_t stratum_size(const int64_t* take_prefix, const int64_t* left_prefix,
                                 int64_t c) {
  return (take_prefix[c + 1] - take_prefix[c]) + (left_prefix[c + 1] - left_prefix[c]);
}

// Whether class c's picks go through pi_c (false: the whole class is chosen).
SYNCFREE_HD bool permutes_stratum(const StratifiedPlan& plan, const int64_t* left_prefix,
                                  int64_t c) {
  const bool whole_by_quota = left_prefix[c + 1] == left_prefix[c];
  return !(whole_by_quota || plan.all_leftovers());
}

// pi_c: a permutation of [0, A_c) with a key of its own per class.
SYNCFREE_HD Permutation stratum_permutation(const StratifiedPlan& plan, int64_t c,
                                            int64_t size) {
  return Permutation(mix64(stream_value(plan.class_root, static_cast<uint64_t>(c)) ^
                           0x2545F4914F6CDD1Dull),
                     size);
}

struct StratifiedPick {
  int64_t stratum;   // class of the slot
  int64_t position;  // position within the class before pi_c (rank = pi_c(position))
};

// Class and pre-pi_c position of valid slot s (0 <= s < plan.valid()).
// `Perm` is anything callable like a Permutation.
template <typename Perm>
SYNCFREE_HD StratifiedPick locate_stratified_slot(const StratifiedPlan& plan,
                                                  const int64_t* take_prefix,
                                                  const int64_t* left_prefix, const Perm& slots,
                                                  const Perm& fill, int64_t s) {
  const int64_t t = plan.permute_slots ? slots(s) : s;
  if (t < plan.taken) {
    const int64_t c = find_stratum(take_prefix, plan.num_classes, t);
    return StratifiedPick{c, t - take_prefix[c]};
  }
  const int64_t u = plan.permute_fill ? fill(t - plan.taken) : t - plan.taken;
  const int64_t c = find_stratum(left_prefix, plan.num_classes, u);
  return StratifiedPick{c, (take_prefix[c + 1] - take_prefix[c]) + (u - left_prefix[c])};
}

// The pick of valid slot s, one slot at a time (what device code evaluates):
// its class and its rank within the class (in index order). The element is
// then the (take_prefix[c] + left_prefix[c] + rank)-th of the row sorted by
// class, order preserved within a class.
SYNCFREE_HD StratifiedPick pick_stratified_slot(const StratifiedPlan& plan,
                                                const int64_t* take_prefix,
                                                const int64_t* left_prefix, int64_t s) {
  StratifiedPick pick =
      locate_stratified_slot(plan, take_prefix, left_prefix, plan.slots, plan.fill, s);
  if (permutes_stratum(plan, left_prefix, pick.stratum)) {
    const int64_t size = stratum_size(take_prefix, left_prefix, pick.stratum);
    pick.position = stratum_permutation(plan, pick.stratum, size)(pick.position);
  }
  return pick;
}

}  // namespace core
}  // namespace syncfree
