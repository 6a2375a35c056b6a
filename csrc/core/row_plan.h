// What one output slot of one row holds: the heart of the sampler.
//
// With the quota (num_pos, num_neg) and V = num_pos + num_neg valid slots,
// slot s < V computes t = sigma(s) with a permutation of [0, V); t < num_pos
// makes it a positive slot holding positive rank pi(t), otherwise it holds
// negative rank pi'(t - num_pos). pi and pi' are permutations of the P
// positives and Q negatives, so {pi(0..num_pos-1)} is a uniform subset and
// sigma a uniform interleaving. Ranks count in index order within a class;
// turning a rank into an index is the backend's job (label_compaction.h on
// the CPU).
//
// Permutations that cannot change the distribution are skipped (exactly, not
// approximately): pi when all positives are taken (sigma already orders them
// uniformly), and sigma when only one class is present and its own
// permutation already orders it.
#pragma once

#include <cstdint>

#include "permutation.h"
#include "platform.h"
#include "quota.h"
#include "random.h"

namespace syncfree {
namespace core {

// Options of one balanced_sample call, shared by every row.
struct BalancedParams {
  int64_t num_samples = 0;
  double positive_fraction = 0.5;
  int64_t negative_label = 0;
  bool fill_positives = true;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct RowPlan {
  Quota quota;
  bool permute_slots;
  bool pick_positives;
  bool pick_negatives;
  Permutation slots;
  Permutation positives;
  Permutation negatives;
};

SYNCFREE_HD RowPlan make_row_plan(const BalancedParams& p, int64_t row, int64_t num_positive,
                                  int64_t num_negative) {
  RowPlan plan;
  plan.quota = balanced_quota(num_positive, num_negative, p.num_samples, p.positive_fraction,
                              p.fill_positives);
  const int64_t np = plan.quota.num_pos;
  const int64_t nn = plan.quota.num_neg;
  plan.pick_positives = np < num_positive;
  plan.pick_negatives = nn < num_negative;
  plan.permute_slots = !((nn == 0 && plan.pick_positives) || (np == 0 && plan.pick_negatives));
  const uint64_t rk = row_key(call_key(p.seed, p.offset), static_cast<uint64_t>(row));
  if (plan.permute_slots) plan.slots = Permutation(purpose_key(rk, kSlotPermutation), np + nn);
  if (plan.pick_positives)
    plan.positives = Permutation(purpose_key(rk, kPositivePermutation), num_positive);
  if (plan.pick_negatives)
    plan.negatives = Permutation(purpose_key(rk, kNegativePermutation), num_negative);
  return plan;
}

struct Pick {
  int64_t rank;   // rank within its class, in index order
  bool positive;  // class of the slot
};

// The pick of valid slot s (0 <= s < plan.quota.valid()). `Perm` is anything
// callable like a Permutation (HostPermutation tabulates small ones).
template <typename Perm>
SYNCFREE_HD Pick pick_slot(const RowPlan& plan, const Perm& slots, const Perm& positives,
                           const Perm& negatives, int64_t s) {
  const int64_t t = plan.permute_slots ? slots(s) : s;
  if (t < plan.quota.num_pos) return Pick{plan.pick_positives ? positives(t) : t, true};
  const int64_t u = t - plan.quota.num_pos;
  return Pick{plan.pick_negatives ? negatives(u) : u, false};
}

SYNCFREE_HD Pick pick_slot(const RowPlan& plan, int64_t s) {
  return pick_slot(plan, plan.slots, plan.positives, plan.negatives, s);
}

}  // namespace core
}  // namespace syncfree
