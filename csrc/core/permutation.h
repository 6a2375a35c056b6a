// Keyed pseudo-random permutations of [0, n), evaluated one element at a time.
//
// Permutation(key, n)(x) is a bijection of [0, n) chosen by `key`. It is a pure
// function of (key, n, x), computed with 32/64-bit integer arithmetic only, so
// every backend evaluates it to the same bits. Two constructions:
//
//  * n <= kSmallDomain: the exact "sort random keys" permutation. Element j
//    gets the 64-bit key k_j = stream_value(key, j); perm(x) is the rank of
//    (k_x, x) among all (k_j, j). A uniform random function gives a uniformly
//    random permutation, up to the 64-bit tie probability (< n^2 / 2^65).
//    Evaluating one element is O(n); HostPermutation below tabulates it once.
//
//  * n > kSmallDomain: a Feistel network with cycle walking. The domain is
//    rounded up to 2^m (m >= 8); the value is split into a high half of
//    floor(m/2) bits and a low half of ceil(m/2) bits, and kFeistelRounds
//    half-rounds alternately add a keyed round function of one half to the
//    other (modular addition, not xor: xor-only Feistel networks on balanced
//    halves of >= 2 bits generate only even permutations). Values that leave
//    [0, n) are fed through again (cycle walking), which keeps a bijection on
//    [0, n); the expected number of passes is below 2 because 2^m < 2n.
//
// Small domains mix slowly under Feistel networks (with ideal round
// functions, a 3-bit domain is still 3% from uniform after 16 half-rounds),
// which is why they take the exact construction. docs/design.md gives the
// numbers behind kSmallDomain and kFeistelRounds.
#pragma once

#include <cstdint>

#include "platform.h"
#include "random.h"

namespace syncfree {
namespace core {

constexpr int64_t kSmallDomain = 128;
constexpr int kFeistelRounds = 8;  // half-rounds; must be even

// Feistel round function: a 32x32 -> 64-bit product folded to 32 bits.
SYNCFREE_HD uint32_t feistel_round(uint32_t value, uint32_t round_key) {
  const uint64_t z = static_cast<uint64_t>(value ^ round_key) * 0xCD9E8D57ull;
  return static_cast<uint32_t>(z >> 32) ^ static_cast<uint32_t>(z);
}

// Number of bits m such that 2^m >= n (n >= 2): the bit length of n - 1.
SYNCFREE_HD int bits_for(int64_t n) {
  const uint64_t v = static_cast<uint64_t>(n - 1);
#ifdef __CUDA_ARCH__
  return 64 - __clzll(static_cast<long long>(v));  // no loop on the device
#else
  int m = 0;
  for (uint64_t u = v; u != 0; u >>= 1) ++m;
  return m;
#endif
}

// Whether element a (with sort key ka) precedes element b (key kb) in the
// small construction: by key, ties by element.
SYNCFREE_HD bool key_before(uint64_t ka, int64_t a, uint64_t kb, int64_t b) {
  return (ka < kb) | ((ka == kb) & (a < b));  // bitwise: no branch, vectorizable
}

// perm(x) of the small construction from all n element keys (keys[j] being
// Permutation::small_key(j)): for backends that compute the keys once and
// tabulate the permutation (the CUDA one-launch kernel).
SYNCFREE_HD int64_t small_rank_from_keys(const uint64_t* keys, int64_t n, int64_t x) {
  int64_t rank = 0;
  for (int64_t j = 0; j < n; ++j) rank += key_before(keys[j], j, keys[x], x);
  return rank;
}

class Permutation {
 public:
  SYNCFREE_HD Permutation() : key_(0), n_(0), lo_bits_(0), hi_bits_(0), round_keys_{} {}

  SYNCFREE_HD Permutation(uint64_t key, int64_t n)
      : key_(key), n_(n < 0 ? 0 : n), lo_bits_(0), hi_bits_(0), round_keys_{} {
    if (n_ > kSmallDomain) {
      const int m = bits_for(n_);
      lo_bits_ = (m + 1) / 2;
      hi_bits_ = m - lo_bits_;
      for (int r = 0; r < kFeistelRounds; r += 2) {
        const uint64_t v = stream_value(key_, static_cast<uint64_t>(r));
        round_keys_[r] = static_cast<uint32_t>(v);
        round_keys_[r + 1] = static_cast<uint32_t>(v >> 32);
      }
    }
  }

  SYNCFREE_HD int64_t size() const { return n_; }
  SYNCFREE_HD bool is_small() const { return n_ <= kSmallDomain; }

  // Sort key of element j in the small construction.
  SYNCFREE_HD uint64_t small_key(int64_t j) const {
    return stream_value(key_, static_cast<uint64_t>(j));
  }

  // perm(x) for x in [0, n). O(n) when is_small(), O(kFeistelRounds) otherwise.
  SYNCFREE_HD int64_t operator()(int64_t x) const {
    if (is_small()) return small_rank(x);
    uint64_t v = static_cast<uint64_t>(x);
    do {
      v = feistel(v);
    } while (v >= static_cast<uint64_t>(n_));
    return static_cast<int64_t>(v);
  }

  // One pass of the Feistel network over [0, 2^m) (exposed for tests and for
  // batched evaluation). Halves are at most 32 bits wide (m <= 63).
  SYNCFREE_HD uint64_t feistel(uint64_t v) const {
    const uint32_t lo_mask = static_cast<uint32_t>((uint64_t{1} << lo_bits_) - 1);
    const uint32_t hi_mask = static_cast<uint32_t>((uint64_t{1} << hi_bits_) - 1);
    uint32_t lo = static_cast<uint32_t>(v) & lo_mask;
    uint32_t hi = static_cast<uint32_t>(v >> lo_bits_);
    for (int r = 0; r < kFeistelRounds; r += 2) {
      hi = (hi + feistel_round(lo, round_keys_[r])) & hi_mask;
      lo = (lo + feistel_round(hi, round_keys_[r + 1])) & lo_mask;
    }
    return (static_cast<uint64_t>(hi) << lo_bits_) | lo;
  }

  SYNCFREE_HD int domain_bits() const { return lo_bits_ + hi_bits_; }
  SYNCFREE_HD int lo_bits() const { return lo_bits_; }
  SYNCFREE_HD int hi_bits() const { return hi_bits_; }
  SYNCFREE_HD uint32_t round_key(int r) const { return round_keys_[r]; }

 private:
  SYNCFREE_HD int64_t small_rank(int64_t x) const {
    const uint64_t kx = small_key(x);
    int64_t rank = 0;
    for (int64_t j = 0; j < n_; ++j) rank += key_before(small_key(j), j, kx, x);
    return rank;
  }

  uint64_t key_;
  int64_t n_;
  int lo_bits_;
  int hi_bits_;
  uint32_t round_keys_[kFeistelRounds];
};

}  // namespace core
}  // namespace syncfree
