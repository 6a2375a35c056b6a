// Counter-based randomness: every random bit of a call is a pure function of
// (seed, offset, row, purpose, counter). There is no sequential state, so any
// thread on any device can compute any value independently.
#pragma once

#include <cstdint>

#include "platform.h"

namespace syncfree {
namespace core {

// The 64-bit golden-ratio increment of splitmix64.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function: a bijective 64-bit mixer with full avalanche.
SYNCFREE_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element `counter` of the counter-based stream `key`; for a fixed key,
// distinct counters give distinct values (mix64 is a bijection).
SYNCFREE_HD uint64_t stream_value(uint64_t key, uint64_t counter) {
  return mix64(key + (counter + 1) * kGolden);
}

// Key of one call: from the user's seed (or the generator's seed) and the
// generator's offset. seed=s calls use offset 0.
SYNCFREE_HD uint64_t call_key(uint64_t seed, uint64_t offset) {
  return mix64(stream_value(mix64(seed), offset) ^ 0x5851F42D4C957F2Dull);
}

// Key of one row of a call. `row` is the row's flat index over the leading
// dimensions of `labels`, so the result does not depend on how rows are
// grouped into threads, blocks or devices.
SYNCFREE_HD uint64_t row_key(uint64_t call, uint64_t row) {
  return stream_value(call, row);
}

// The independent random permutations a row uses.
enum Purpose : uint64_t {
  kSlotPermutation = 1,      // sigma: interleaves positives and negatives
  kPositivePermutation = 2,  // pi:    picks the positives
  kNegativePermutation = 3,  // pi':   picks the negatives
  // stratified_sample (core/stratified.h): keys of its own, never those above.
  kStratifiedSlotPermutation = 4,   // sigma: orders the valid slots
  kStratifiedFillPermutation = 5,   // rho:   picks the fill among the leftovers
  kStratifiedClassPermutation = 6,  // root of the per-class keys (pi_c)
};

SYNCFREE_HD uint64_t purpose_key(uint64_t row, Purpose purpose) {
  return mix64(stream_value(row, static_cast<uint64_t>(purpose)) ^ 0xD1B54A32D192ED03ull);
}

}  // namespace core
}  // namespace syncfree
