// The host's vector paths (AVX2, AVX-512, AVX-512 with VBMI2), chosen at run
// time: the Feistel pass and the cycle walk of a Permutation, the balanced
// sampler's chunk compaction (label_compaction.h; 32 labels at a time with
// VBMI2) with, on request, the fold of its positives' labels, and (AVX-512
// only) its split of a batch of slots by class and their ranks' lookup in
// the compacted row (host_sampler.h). Framework-free, not for device code.
// Every path computes exactly what the scalar code does (Permutation::feistel,
// compact_chunk, CompactRow::entry_of: the same bits); the C++ tests (SimdPaths in
// tests/cpp/test_core.cpp) run each path the CPU has against the scalar one.
// The stratified sampler's vector passes are in host_stratified.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "label_compaction.h"
#include "permutation.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SYNCFREE_HAVE_AVX2_PATH 1
// Defined alike in every translation unit, CUDA ones included (nvcc 13
// compiles the AVX-512 host code), so that each inline function below has
// one definition.
#define SYNCFREE_HAVE_AVX512_PATH 1
#endif

namespace syncfree {
namespace core {

// The paths, from the narrowest. kAvx512Vbmi2 is kAvx512 with VBMI2's
// 16-bit vpcompressw, which the compaction uses (32 labels at a time).
enum class SimdPath : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vbmi2 = 3 };

// The widest path this CPU runs (checked once).
inline SimdPath cpu_simd_path() {
  static const SimdPath best = [] {
#ifdef SYNCFREE_HAVE_AVX512_PATH
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return __builtin_cpu_supports("avx512vbmi2") ? SimdPath::kAvx512Vbmi2 : SimdPath::kAvx512;
#endif
#ifdef SYNCFREE_HAVE_AVX2_PATH
    if (__builtin_cpu_supports("avx2")) return SimdPath::kAvx2;
#endif
    return SimdPath::kScalar;
  }();
  return best;
}

// An upper bound on the path used (tests lower it to compare the paths).
inline std::atomic<int>& simd_path_limit() {
  static std::atomic<int> limit{static_cast<int>(SimdPath::kAvx512Vbmi2)};
  return limit;
}

// The path the batched evaluations use: the CPU's widest, within the limit.
inline SimdPath simd_path() {
  const int best = static_cast<int>(cpu_simd_path());
  const int limit = simd_path_limit().load(std::memory_order_relaxed);
  return static_cast<SimdPath>(best < limit ? best : limit);
}

// The label rule (labels.h) as the compaction's vector paths apply it to
// labels of type T: a label is negative where it equals `negative` (a bool
// label where it is false), and none is where no T equals negative_label
// (matchable false); only a signed type's labels can be ignored (< 0).
template <typename T>
struct LabelMatch {
  static constexpr bool kSigned = std::is_signed<T>::value;  // bool is not
  T negative;
  bool matchable;
  explicit LabelMatch(int64_t negative_label)  // negative_label >= 0
      : negative(static_cast<T>(negative_value<T>(negative_label))),
        matchable(std::is_same<T, bool>::value ||
                  static_cast<uint64_t>(negative_label) <=
                      static_cast<uint64_t>(std::numeric_limits<T>::max())) {}
};

// The compaction's vector paths read a chunk's labels once, in order, and
// request the 32- and 64-bit labels kLabelsAhead bytes (label_compaction.h)
// ahead of each group they compare (request_labels_ahead), so that labels
// the caches do not hold arrive before they are compared: the hardware's
// own requests of a stream start again at each 4 KiB page. With the caches
// as another sampler's call leaves them (the fused call, an Intel Xeon,
// 2026-12-05, docs/benchmarks.md): one row of 1e6 int64 labels took 0.90x
// to 0.96x the time this way (each vector path), int32 0.94x to 0.96x, rows
// of 3e4 to 1e5 0.95x to 1.00x, 32 rows of 1e4 0.93x to 1.00x, one row of
// 1e4 0.99x to 1.03x. 8-bit labels, fewer bytes per label compared, gained
// nothing (one row of 1e6: 0.98x and 1.04x): labels under 4 bytes are not
// requested (16-bit labels were not measured). A chunk's last requests
// fall on the next chunk's labels, and a row's on whatever follows it:
// hints only, a prefetch never faults (the addresses are computed as
// integers, not as pointers past the labels). request_labels_ahead requests
// the cache lines kLabelsAhead bytes after labels[0, count), for labels of
// 4 bytes or more.
template <typename T>
inline void request_labels_ahead(const T* labels, int64_t count) {
  if constexpr (sizeof(T) >= 4) {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(labels) + kLabelsAhead;
    for (int64_t b = 0; b < count * static_cast<int64_t>(sizeof(T)); b += 64)
      prefetch(reinterpret_cast<const void*>(ahead + static_cast<uintptr_t>(b)));
  }
}

// Each vector path also requests the workspace lines it will write, once
// every 32 labels, kWorkAhead entries ahead of each of its two streams
// (request_work_ahead): the positives' entries go up from work[p], the
// negatives' down from work[back - 1] (back = len - q). The workspace is the
// calling thread's buffer, which other work between two calls pushes out of
// the caches; a store to a line the cache does not hold waits for the line.
// balanced_sample with K = 1 (the compaction, nearly all of it) took 0.93x to
// 0.99x the time at one row of 1e5 and of 1e6 int64 labels, with a
// naive and a top-k sampler's call before each (one and two threads, each
// vector path), and 0.97x with the row's labels and workspace cached; rows
// of 1e4 and 3e4 took 0.99x to 1.01x (an Intel Xeon, 2026-12-05,
// docs/benchmarks.md). The AVX-512 paths are compiled for prefetchw; the
// AVX2 path's requests are read requests (prefetch_for_write). Hints only:
// the addresses are computed as integers and may fall outside the chunk's
// entries; a prefetch never faults. A stream's first kWorkAhead entries are
// not requested.
inline void request_work_ahead(const uint16_t* work, int64_t p, int64_t back) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(work);
  const uintptr_t entry = sizeof(uint16_t);
  const uintptr_t ahead = static_cast<uintptr_t>(kWorkAhead);
  prefetch_for_write(
      reinterpret_cast<const void*>(base + (static_cast<uintptr_t>(p) + ahead) * entry));
  prefetch_for_write(
      reinterpret_cast<const void*>(base + (static_cast<uintptr_t>(back) - 1 - ahead) * entry));
}

#ifdef SYNCFREE_HAVE_AVX2_PATH
// One Feistel pass over values[0, count) with AVX2, four 64-bit lanes at a
// time: the same arithmetic as Permutation::feistel (the 32x32->64 product is
// vpmuludq; the bits above a half's mask never reach the result), so the
// same bits.
__attribute__((target("avx2"))) inline int64_t feistel_pass_avx2(const Permutation& perm,
                                                                  int64_t* values, int64_t count) {
  const __m256i lo_mask = _mm256_set1_epi64x(static_cast<int64_t>((uint64_t{1} << perm.lo_bits()) - 1));
  const __m256i hi_mask = _mm256_set1_epi64x(static_cast<int64_t>((uint64_t{1} << perm.hi_bits()) - 1));
  const __m128i shift = _mm_cvtsi32_si128(perm.lo_bits());
  const __m256i mult = _mm256_set1_epi64x(0xCD9E8D57ll);
  __m256i keys[kFeistelRounds];
  for (int r = 0; r < kFeistelRounds; ++r)
    keys[r] = _mm256_set1_epi64x(static_cast<int64_t>(perm.round_key(r)));
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + i));
    __m256i lo = _mm256_and_si256(v, lo_mask);
    __m256i hi = _mm256_srl_epi64(v, shift);
    for (int r = 0; r < kFeistelRounds; r += 2) {
      __m256i z = _mm256_mul_epu32(_mm256_xor_si256(lo, keys[r]), mult);
      hi = _mm256_and_si256(_mm256_add_epi64(hi, _mm256_xor_si256(z, _mm256_srli_epi64(z, 32))),
                            hi_mask);
      z = _mm256_mul_epu32(_mm256_xor_si256(hi, keys[r + 1]), mult);
      lo = _mm256_and_si256(_mm256_add_epi64(lo, _mm256_xor_si256(z, _mm256_srli_epi64(z, 32))),
                            lo_mask);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + i),
                        _mm256_or_si256(_mm256_sll_epi64(hi, shift), lo));
  }
  return i;  // values [i, count) are left to the caller
}
#endif

#ifdef SYNCFREE_HAVE_AVX512_PATH
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_epi32),
// as maybe uninitialized and, at -O3 in the Feistel blocks, uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#ifdef __CUDACC__
// nvcc's front end does not know the unroll pragma below (warning 1675)
// and passes it on to the host compiler, which does.
#pragma nv_diag_suppress 1675
#endif
// Unrolls the loop after it: the loops over a block's vectors and the
// network's rounds, whose vectors must stay in registers (at -O2 GCC 12
// leaves them rolled, and the vectors go through memory). Undefined at the
// end of the AVX-512 code.
#define SYNCFREE_UNROLL _Pragma("GCC unroll 16")

// The mask of the first min(remaining, 8) of 8 lanes (remaining >= 1): a
// loop's last, partial vector.
inline __mmask8 first_lanes(int64_t remaining) {
  return static_cast<__mmask8>(remaining >= 8 ? 0xFF : (1u << remaining) - 1);
}

// The same pass with AVX-512F, eight 64-bit lanes at a time, five
// instructions per half-round instead of six: the halves are masked only
// where they enter the round function (vpternlogq: (half & mask) ^ key, in
// one instruction) and at the end, since the low bits of a sum depend only on
// the low bits of its terms; the product's two 32-bit halves are swapped
// with a shuffle (port 5) rather than a shift (port 0, the multiplier's).
// The network's constants, broadcast.
struct FeistelAvx512 {
  __m512i lo_mask, hi_mask, mult, keys[kFeistelRounds];
  __m128i shift;
};

__attribute__((target("avx512f"))) inline FeistelAvx512 feistel_avx512_setup(
    const Permutation& perm) {
  FeistelAvx512 c;
  c.lo_mask = _mm512_set1_epi64(static_cast<int64_t>((uint64_t{1} << perm.lo_bits()) - 1));
  c.hi_mask = _mm512_set1_epi64(static_cast<int64_t>((uint64_t{1} << perm.hi_bits()) - 1));
  c.shift = _mm_cvtsi32_si128(perm.lo_bits());
  c.mult = _mm512_set1_epi64(0xCD9E8D57ll);
  for (int r = 0; r < kFeistelRounds; ++r)
    c.keys[r] = _mm512_set1_epi64(static_cast<int64_t>(perm.round_key(r)));
  return c;
}

// One pass of the network over C vectors of 8 values, round by round
// across the vectors: C independent chains of 8 half-rounds, interleaved
// here because the core does not overlap them enough when each vector's
// rounds come in turn (Zen 4, 2026-12-04: a pass took 1.16 ns a value with
// each vector's rounds in turn, four vectors at a time; 0.87 with C = 8).
// A value's bits above the domain's (m) never affect its result: each half
// enters the round function masked, the sums' low bits depend only on
// their terms' low bits, and the result is masked
// (cycle_walk_pack_first_avx512 keeps positions there).
template <int C>
__attribute__((target("avx512f"), always_inline)) inline void feistel_avx512(
    const FeistelAvx512& c, __m512i (&v)[C]) {
  // (a & b) ^ c as a vpternlogq truth table (a: 0xF0, b: 0xCC, c: 0xAA).
  constexpr int kAndXor = (0xF0 & 0xCC) ^ 0xAA;
  __m512i lo[C], hi[C];  // lo masked where used
  SYNCFREE_UNROLL for (int j = 0; j < C; ++j) {
    lo[j] = v[j];
    hi[j] = _mm512_srl_epi64(v[j], c.shift);
  }
  SYNCFREE_UNROLL for (int r = 0; r < kFeistelRounds; r += 2) {
    SYNCFREE_UNROLL for (int j = 0; j < C; ++j) {
      const __m512i z =
          _mm512_mul_epu32(_mm512_ternarylogic_epi64(lo[j], c.lo_mask, c.keys[r], kAndXor), c.mult);
      hi[j] = _mm512_add_epi64(hi[j], _mm512_xor_si512(z, _mm512_shuffle_epi32(z, _MM_PERM_CDAB)));
    }
    SYNCFREE_UNROLL for (int j = 0; j < C; ++j) {
      const __m512i z = _mm512_mul_epu32(
          _mm512_ternarylogic_epi64(hi[j], c.hi_mask, c.keys[r + 1], kAndXor), c.mult);
      lo[j] = _mm512_add_epi64(lo[j], _mm512_xor_si512(z, _mm512_shuffle_epi32(z, _MM_PERM_CDAB)));
    }
  }
  SYNCFREE_UNROLL for (int j = 0; j < C; ++j) {
    v[j] = _mm512_or_si512(_mm512_sll_epi64(_mm512_and_si512(hi[j], c.hi_mask), c.shift),
                           _mm512_and_si512(lo[j], c.lo_mask));
  }
}

// The pass over values[0, count), count <= 8 * C, in C vectors (the lanes
// beyond count masked off).
template <int C>
__attribute__((target("avx512f"), always_inline)) inline void feistel_avx512_block(
    const FeistelAvx512& c, int64_t* values, int64_t count) {
  __m512i v[C];
  __mmask8 live[C];
  SYNCFREE_UNROLL for (int j = 0; j < C; ++j) {
    const int64_t left = count - 8 * j;
    live[j] = left <= 0 ? __mmask8{0} : first_lanes(left);
    v[j] = _mm512_maskz_loadu_epi64(live[j], values + 8 * j);
  }
  feistel_avx512<C>(c, v);
  SYNCFREE_UNROLL for (int j = 0; j < C; ++j) _mm512_mask_storeu_epi64(values + 8 * j, live[j], v[j]);
}

// The Feistel pass over values[0, count), all of them: 64 at a time, then
// the rest 32 at a time (masked lanes past the end). Two block sizes only:
// each is a few kilobytes of code, which a call that comes after other
// work fetches again (and one copy of them: not inlined).
__attribute__((target("avx512f"), noinline)) inline void feistel_pass_avx512(const FeistelAvx512& c,
                                                                   int64_t* values,
                                                                   int64_t count) {
  int64_t i = 0;
  for (; i + 64 <= count; i += 64) feistel_avx512_block<8>(c, values + i, 64);
  for (; i < count; i += 32) feistel_avx512_block<4>(c, values + i, std::min<int64_t>(32, count - i));
}

__attribute__((target("avx512f"))) inline int64_t feistel_pass_avx512(const Permutation& perm,
                                                                      int64_t* values,
                                                                      int64_t count) {
  feistel_pass_avx512(feistel_avx512_setup(perm), values, count);
  return count;
}

// Packs the entries j < count of (positions, v) (positions null: j itself)
// whose v >= n to the front of (pending, passed), in order, with full
// 8-lane stores (room for count + 8 each); returns how many. In place is
// fine: an entry moves to a position at most its own.
__attribute__((target("avx512f,popcnt"))) inline int64_t cycle_walk_pack_avx512(
    const int64_t* positions, const int64_t* v, int64_t count, __m512i n, int64_t* pending,
    int64_t* passed) {
  const __m512i eight = _mm512_set1_epi64(8);
  int64_t out = 0;
  __m512i at = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t j = 0; j < count; j += 8) {
    const __mmask8 live = first_lanes(count - j);
    const __m512i x = _mm512_maskz_loadu_epi64(live, v + j);
    const __m512i where = positions ? _mm512_maskz_loadu_epi64(live, positions + j) : at;
    const __mmask8 outside = _mm512_mask_cmpge_epu64_mask(live, x, n);
    _mm512_storeu_si512(pending + out, _mm512_maskz_compress_epi64(outside, where));
    _mm512_storeu_si512(passed + out, _mm512_maskz_compress_epi64(outside, x));
    out += __builtin_popcount(outside);
    at = _mm512_add_epi64(at, eight);
  }
  return out;
}

// The first packing of cycle_walk_avx512, over all of a batch's values,
// in one vector where it can: the entries j < count of v whose v >= n,
// each as v | j << kWalkPositionShift, packed to the front of passed
// (room for count + 8), then their positions j written to pending[0,
// returned count). One vpcompressq and one full store per 8 values instead
// of two: in a profile of balanced_sample at one row of 1e5, the cycle
// walk's own work took about 16% of the samples (a quarter of those in the
// op's own functions), three quarters of it in its packing loops. With
// it, balanced_sample took 0.95x to 0.98x the time at single rows of 1e4
// to 1e6 (one and two threads, nothing between the calls; 0.96x to 0.99x
// after other samplers' calls), the fused call 0.97x to 0.99x (an AMD
// EPYC, Zen 5, 2026-12-05, docs/benchmarks.md). The values keep their
// positions in the bits above the domain's, which do not affect a Feistel
// pass's result (feistel_avx512), so passed goes through the next pass as
// it is. For values below 2^kWalkPositionShift and count at most
// 2^(64 - kWalkPositionShift).
constexpr int kWalkPositionShift = 54;

__attribute__((target("avx512f,popcnt"))) inline int64_t cycle_walk_pack_first_avx512(
    const int64_t* v, int64_t count, __m512i n, int64_t* pending, int64_t* passed) {
  const __m512i step = _mm512_set1_epi64(int64_t{8} << kWalkPositionShift);
  __m512i at = _mm512_slli_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), kWalkPositionShift);
  int64_t out = 0;
  for (int64_t j = 0; j < count; j += 8) {
    const __mmask8 live = first_lanes(count - j);
    const __m512i x = _mm512_maskz_loadu_epi64(live, v + j);
    const __mmask8 outside = _mm512_mask_cmpge_epu64_mask(live, x, n);
    _mm512_storeu_si512(passed + out, _mm512_maskz_compress_epi64(outside, _mm512_or_si512(x, at)));
    out += __builtin_popcount(outside);
    at = _mm512_add_epi64(at, step);
  }
  for (int64_t j = 0; j < out; j += 8) {
    const __mmask8 live = first_lanes(out - j);
    _mm512_mask_storeu_epi64(
        pending + j, live,
        _mm512_srli_epi64(_mm512_maskz_loadu_epi64(live, passed + j), kWalkPositionShift));
  }
  return out;
}

// Permutation::operator() over values[0, count) (each in [0, 2^m)): one
// pass over all, then the values still outside [0, n) packed (vpcompressq)
// with their positions in pending / passed (each with room for count + 8)
// and passed again, until at most 8 are left; those walk on in one
// register, each lane until its value is inside (a pass of a few values
// takes a round chain's latency, which the packing would only add to).
// The first packing keeps each value's position in its high bits for
// domains of up to kWalkPositionShift (54) bits and batches of up to
// 2^(64 - kWalkPositionShift) (1024) values (cycle_walk_pack_first_avx512;
// always, for the samplers' domains and HostPermutation's batches), else
// packs the two apart as the later ones do.
__attribute__((target("avx512f,popcnt"))) inline void cycle_walk_avx512(const Permutation& perm,
                                                                 int64_t* values, int64_t count,
                                                                 int64_t* pending,
                                                                 int64_t* passed) {
  const FeistelAvx512 c = feistel_avx512_setup(perm);
  feistel_pass_avx512(c, values, count);
  const __m512i n = _mm512_set1_epi64(perm.size());
  const bool packs_positions = perm.domain_bits() <= kWalkPositionShift &&
                               count <= (int64_t{1} << (64 - kWalkPositionShift));
  int64_t num_pending =
      packs_positions ? cycle_walk_pack_first_avx512(values, count, n, pending, passed)
                      : cycle_walk_pack_avx512(nullptr, values, count, n, pending, passed);
  while (num_pending > 8) {
    feistel_pass_avx512(c, passed, num_pending);
    for (int64_t j = 0; j < num_pending; ++j) values[pending[j]] = passed[j];
    num_pending = cycle_walk_pack_avx512(pending, passed, num_pending, n, pending, passed);
  }
  if (num_pending == 0) return;
  __mmask8 walking = first_lanes(num_pending);
  __m512i v = _mm512_maskz_loadu_epi64(walking, passed);
  do {
    __m512i next[1] = {v};
    feistel_avx512<1>(c, next);
    v = _mm512_mask_mov_epi64(v, walking, next[0]);
    walking = _mm512_mask_cmpge_epu64_mask(walking, next[0], n);
  } while (walking != 0);
  _mm512_storeu_si512(passed, v);
  for (int64_t j = 0; j < num_pending; ++j) values[pending[j]] = passed[j];
}

// --- a batch of slots' split by class and lookup (fill_row_slots) ---------------

// split_slots with AVX-512F, 8 slots at a time: one comparison gives the
// positives' mask; vpcompressq packs each class's ranks and slots.
__attribute__((target("avx512f,popcnt"))) inline int64_t split_slots_avx512(
    const int64_t* t, int64_t count, int64_t first, int64_t num_pos, int64_t* pos_rank,
    int64_t* pos_slot, int64_t* neg_rank, int64_t* neg_slot) {
  const __m512i num_pos_v = _mm512_set1_epi64(num_pos);
  const __m512i eight = _mm512_set1_epi64(8);
  __m512i slot = _mm512_add_epi64(_mm512_set1_epi64(first), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
  int64_t np = 0;
  int64_t nn = 0;
  for (int64_t i = 0; i < count; i += 8) {
    const __mmask8 live = first_lanes(count - i);
    const __m512i v = _mm512_maskz_loadu_epi64(live, t + i);
    const __mmask8 pos = _mm512_mask_cmplt_epi64_mask(live, v, num_pos_v);
    const __mmask8 neg = static_cast<__mmask8>(live & ~pos);
    _mm512_storeu_si512(pos_rank + np, _mm512_maskz_compress_epi64(pos, v));
    _mm512_storeu_si512(pos_slot + np, _mm512_maskz_compress_epi64(pos, slot));
    _mm512_storeu_si512(neg_rank + nn, _mm512_maskz_compress_epi64(neg, _mm512_sub_epi64(v, num_pos_v)));
    _mm512_storeu_si512(neg_slot + nn, _mm512_maskz_compress_epi64(neg, slot));
    np += __builtin_popcount(pos);
    nn += __builtin_popcount(neg);
    slot = _mm512_add_epi64(slot, eight);
  }
  return np;
}

// Rows of up to this many chunks find a rank's chunk by comparing it with
// every chunk's prefix sum (8 ranks at a time); longer rows search.
constexpr int64_t kLinearChunkSearch = 16;

// entries_of with AVX-512F, 8 ranks at a time, for rows of at most
// kLinearChunkSearch chunks: a rank's chunk is the number of chunks after
// the first whose prefix sum is <= the rank (the prefix sums do not
// decrease), and the last such prefix sum is the one its chunk starts at.
__attribute__((target("avx512f"))) inline void entries_of_avx512(const CompactRow& row,
                                                                bool positive, int64_t* ranks,
                                                                int64_t count, int64_t* start) {
  const int64_t* prefix = positive ? row.pos_prefix : row.neg_prefix;
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i chunk = _mm512_set1_epi64(row.chunk);
  const __m512i n = _mm512_set1_epi64(row.n);
  for (int64_t i = 0; i < count; i += 8) {
    const __mmask8 live = first_lanes(count - i);
    const __m512i rank = _mm512_maskz_loadu_epi64(live, ranks + i);
    __m512i c = _mm512_setzero_si512();
    __m512i before = _mm512_setzero_si512();  // prefix[0] == 0
    for (int64_t j = 1; j < row.nchunks; ++j) {
      const __m512i p = _mm512_set1_epi64(prefix[j]);
      const __mmask8 in = _mm512_cmple_epi64_mask(p, rank);
      c = _mm512_mask_add_epi64(c, in, c, one);
      before = _mm512_mask_mov_epi64(before, in, p);
    }
    const __m512i first = _mm512_mul_epu32(c, chunk);  // both below 2^32
    const __m512i j = _mm512_sub_epi64(rank, before);
    __m512i entry;
    if (positive) {
      entry = _mm512_add_epi64(first, j);
    } else {
      const __m512i len = _mm512_min_epi64(_mm512_sub_epi64(n, first), chunk);
      entry = _mm512_sub_epi64(_mm512_add_epi64(first, len), _mm512_add_epi64(j, one));
    }
    _mm512_mask_storeu_epi64(ranks + i, live, entry);
    _mm512_mask_storeu_epi64(start + i, live, first);
  }
}

// Which of labels[0, 16) are negative (neg) and which are not ignored (kept),
// as 16-bit masks, with AVX-512 (F, BW, VL, DQ): 64 bytes of labels or less
// per comparison. A signed 64-bit label's sign comes from vpmovq2m rather
// than a comparison: on Intel cores a comparison into a mask takes port 5,
// which the compaction's other mask and compress instructions keep busy
// (on the VBMI2 path, a chunk of 65536 int64 labels, 512 KB in the L2
// cache, compacted in 0.80x to 0.92x the time on an Intel Xeon,
// 2026-12-04, docs/benchmarks.md).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void class_masks_16(
    const T* labels, const LabelMatch<T>& m, __mmask16* neg, __mmask16* kept) {
  __mmask16 eq, ge = 0xFFFF;
  if constexpr (sizeof(T) == 8) {
    const __m512i a = _mm512_loadu_si512(labels);
    const __m512i b = _mm512_loadu_si512(labels + 8);
    const __m512i nl = _mm512_set1_epi64(static_cast<int64_t>(m.negative));
    eq = _mm512_kunpackb(_mm512_cmpeq_epi64_mask(b, nl), _mm512_cmpeq_epi64_mask(a, nl));
    if constexpr (LabelMatch<T>::kSigned)
      ge = static_cast<__mmask16>(
          ~_mm512_kunpackb(_mm512_movepi64_mask(b), _mm512_movepi64_mask(a)));
  } else if constexpr (sizeof(T) == 4) {
    const __m512i a = _mm512_loadu_si512(labels);
    eq = _mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(static_cast<int32_t>(m.negative)));
    if constexpr (LabelMatch<T>::kSigned) ge = _mm512_cmpge_epi32_mask(a, _mm512_setzero_si512());
  } else if constexpr (sizeof(T) == 2) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels));
    eq = _mm256_cmpeq_epi16_mask(a, _mm256_set1_epi16(static_cast<int16_t>(m.negative)));
    if constexpr (LabelMatch<T>::kSigned) ge = _mm256_cmpge_epi16_mask(a, _mm256_setzero_si256());
  } else {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(labels));
    eq = _mm_cmpeq_epi8_mask(a, _mm_set1_epi8(static_cast<char>(m.negative)));
    if constexpr (LabelMatch<T>::kSigned) ge = _mm_cmpge_epi8_mask(a, _mm_setzero_si128());
  }
  *neg = m.matchable ? eq : 0;
  *kept = ge;
}

// The same 32 at a time (labels[0, 32)), for the VBMI2 path.
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void class_masks_32(
    const T* labels, const LabelMatch<T>& m, __mmask32* neg, __mmask32* kept) {
  if constexpr (sizeof(T) >= 4) {  // two halves of 16
    __mmask16 neg_half[2], kept_half[2];
    class_masks_16(labels, m, &neg_half[0], &kept_half[0]);
    class_masks_16(labels + 16, m, &neg_half[1], &kept_half[1]);
    *neg = _mm512_kunpackw(neg_half[1], neg_half[0]);
    *kept = _mm512_kunpackw(kept_half[1], kept_half[0]);
    return;
  } else {
    __mmask32 eq, ge = 0xFFFFFFFFu;
    if constexpr (sizeof(T) == 2) {
      const __m512i a = _mm512_loadu_si512(labels);
      eq = _mm512_cmpeq_epi16_mask(a, _mm512_set1_epi16(static_cast<int16_t>(m.negative)));
      if constexpr (LabelMatch<T>::kSigned) ge = _mm512_cmpge_epi16_mask(a, _mm512_setzero_si512());
    } else {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels));
      eq = _mm256_cmpeq_epi8_mask(a, _mm256_set1_epi8(static_cast<char>(m.negative)));
      if constexpr (LabelMatch<T>::kSigned) ge = _mm256_cmpge_epi8_mask(a, _mm256_setzero_si256());
    }
    *neg = m.matchable ? eq : 0;
    *kept = ge;
  }
}

// The positives' labels of the AVX-512 paths' groups, OR-ed into `any` and
// AND-ed into `all` lane by lane in the label type's width, the other lanes
// left as they are: a group's labels (in the L1 cache, just compared) read
// again, 64 bytes at a time for 32- and 64-bit labels (a group holds a
// whole number of such vectors), with masked loads for narrower ones (a
// group of 16 or 32 may hold less than a vector: the lanes outside `pos`
// are not read). `pos` holds the group's positives, one bit a label (count
// 16 or 32 labels).
template <typename T>
__attribute__((target("avx512f,avx512bw"))) inline void add_positive_lanes_avx512(
    const T* labels, uint32_t pos, int count, __m512i* any, __m512i* all) {
  constexpr int kLanes = 64 / static_cast<int>(sizeof(T));
  for (int v = 0; v * kLanes < count; ++v) {
    const void* at = labels + v * kLanes;
    if constexpr (sizeof(T) == 8) {
      const __mmask8 m = static_cast<__mmask8>(pos >> (8 * v));
      const __m512i a = _mm512_loadu_si512(at);
      *any = _mm512_mask_or_epi64(*any, m, *any, a);
      *all = _mm512_mask_and_epi64(*all, m, *all, a);
    } else if constexpr (sizeof(T) == 4) {
      const __mmask16 m = static_cast<__mmask16>(pos >> (16 * v));
      const __m512i a = _mm512_loadu_si512(at);
      *any = _mm512_mask_or_epi32(*any, m, *any, a);
      *all = _mm512_mask_and_epi32(*all, m, *all, a);
    } else if constexpr (sizeof(T) == 2) {
      *any = _mm512_or_si512(*any, _mm512_maskz_loadu_epi16(pos, at));
      *all = _mm512_and_si512(*all, _mm512_mask_loadu_epi16(_mm512_set1_epi64(-1), pos, at));
    } else {
      *any = _mm512_or_si512(*any, _mm512_maskz_loadu_epi8(pos, at));
      *all = _mm512_and_si512(*all, _mm512_mask_loadu_epi8(_mm512_set1_epi64(-1), pos, at));
    }
  }
}

// The lanes of `any` and `all` (`bytes` bytes each, in lanes of W bytes,
// each label cast to its type's width: W = sizeof(T), or 4 for narrower
// labels widened with their own extension) folded into a PositiveBits;
// `count` is how many labels they took (none: the empty fold).
template <typename T, int W>
inline PositiveBits fold_positive_lanes(const void* any, const void* all, int bytes,
                                        int64_t count) {
  PositiveBits bits;
  if (count == 0) return bits;
  using U = std::conditional_t<W == 8, uint64_t,
                               std::conditional_t<W == 4, uint32_t,
                                                  std::conditional_t<W == 2, uint16_t, uint8_t>>>;
  U a[64 / W], b[64 / W];
  std::memcpy(a, any, static_cast<size_t>(bytes));
  std::memcpy(b, all, static_cast<size_t>(bytes));
  U or_bits = 0;
  U and_bits = static_cast<U>(~U{0});
  for (int j = 0; j < bytes / W; ++j) {
    or_bits = static_cast<U>(or_bits | a[j]);
    and_bits = static_cast<U>(and_bits & b[j]);
  }
  // Back to int64 as a gather casts the label: through the label type (a
  // bool's byte as it is, as a gather reads it), or, for a narrow label
  // widened to 32 bits, through int32 (the widening already extended it as
  // its type does).
  using Label = std::conditional_t<std::is_same<T, bool>::value, uint8_t, T>;
  using Lane = std::conditional_t<W == static_cast<int>(sizeof(T)), Label, int32_t>;
  bits.any = static_cast<int64_t>(static_cast<Lane>(or_bits));
  bits.all = static_cast<int64_t>(static_cast<Lane>(and_bits));
  return bits;
}

// add_positive_lanes_avx512's accumulators, folded (fold_positive_lanes)
// and added to *bits.
template <typename T>
__attribute__((target("avx512f"))) inline void merge_positive_lanes_avx512(__m512i any,
                                                                           __m512i all,
                                                                           int64_t count,
                                                                           PositiveBits* bits) {
  alignas(64) uint8_t a[64], b[64];
  _mm512_store_si512(a, any);
  _mm512_store_si512(b, all);
  bits->merge(fold_positive_lanes<T, static_cast<int>(sizeof(T))>(a, b, 64, count));
}

// compact_chunk for contiguous labels with AVX-512 (F, BW,
// VL, DQ), 16 labels at a time: class_masks_16 gives each class's 16-bit mask;
// vpcompressd packs the class's offsets, which go to the front (positives)
// or, reversed, to the back (negatives) with one masked 16-bit store each.
// The entries written are exactly those compact_chunk leaves in [0, p) and
// [len - q, len), in the same order (the region between is never read).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,popcnt,prfchw"))) inline void
compact_chunk_avx512(
    const T* labels, int64_t len, int64_t negative_label, uint16_t* work, int64_t* num_pos,
    int64_t* num_neg, PositiveBits* bits) {
  const LabelMatch<T> match(negative_label);
  int64_t p = 0;
  int64_t q = 0;
  __m512i any = _mm512_setzero_si512();
  __m512i all = _mm512_set1_epi64(-1);
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i reverse = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    request_labels_ahead(labels + i, 16);
    if ((i & 31) == 0) request_work_ahead(work, p, len - q);
    __mmask16 neg, nonneg;
    class_masks_16(labels + i, match, &neg, &nonneg);
    const __mmask16 pos = static_cast<__mmask16>(nonneg & ~neg);
    const __m512i offsets = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(i)));
    const int np = __builtin_popcount(pos);
    const int nn = __builtin_popcount(neg);
    const __m256i front = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(pos, offsets));
    _mm256_mask_storeu_epi16(work + p, static_cast<__mmask16>((1u << np) - 1), front);
    // The j-th negative of the group goes to work[len - 1 - q - j]: lane 15 - j
    // of a store at work + len - 16 - q (never below work: q <= i <= len - 16).
    const __m256i back = _mm512_cvtepi32_epi16(
        _mm512_permutexvar_epi32(reverse, _mm512_maskz_compress_epi32(neg, offsets)));
    _mm256_mask_storeu_epi16(work + len - 16 - q, static_cast<__mmask16>(0xFFFF0000u >> nn), back);
    if (bits) add_positive_lanes_avx512(labels + i, pos, 16, &any, &all);
    p += np;
    q += nn;
  }
  if (bits) merge_positive_lanes_avx512<T>(any, all, p, bits);
  compact_labels(labels, 1, i, len, negative_label, work, p, q, bits);  // the tail
  *num_pos = p;
  *num_neg = q;
}

// compact_chunk_avx512 with VBMI2, 32 labels at a time: each class's 32-bit
// mask from class_masks_32 (one to four comparisons a class); vpcompressw
// packs its 16-bit offsets, with no narrowing. While 64 labels or more are
// left (i + 64 <= len), each class's store writes all 32 lanes, the lanes
// past the group's entries landing between the classes, never on an entry:
// before the group p + q <= i, so the front store's [p, p + 32) lies below
// the negatives' [len - q, len) (p + 32 <= i + 32 <= len - q), and the back
// store's [len - q - 32, len - q) above the positives' [0, p + np) (np <=
// 32: p + np + q + 32 <= i + 64 <= len). The group of the last 32 to 63
// labels uses masked stores, as compact_chunk_avx512 does.
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi2,popcnt,prfchw"))) inline void
compact_chunk_avx512_vbmi2(const T* labels, int64_t len, int64_t negative_label, uint16_t* work,
                           int64_t* num_pos, int64_t* num_neg, PositiveBits* bits) {
  const LabelMatch<T> match(negative_label);
  alignas(64) static constexpr uint16_t kIota[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                                     11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                                     22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
  alignas(64) static constexpr uint16_t kReverse[32] = {31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21,
                                                        20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10,
                                                        9,  8,  7,  6,  5,  4,  3,  2,  1,  0};
  const __m512i iota = _mm512_load_si512(kIota);
  const __m512i reverse = _mm512_load_si512(kReverse);
  int64_t p = 0;
  int64_t q = 0;
  __m512i any = _mm512_setzero_si512();
  __m512i all = _mm512_set1_epi64(-1);
  int64_t i = 0;
  for (; i + 32 <= len; i += 32) {
    request_labels_ahead(labels + i, 32);
    request_work_ahead(work, p, len - q);
    __mmask32 neg, nonneg;
    class_masks_32(labels + i, match, &neg, &nonneg);
    const __mmask32 pos = nonneg & ~neg;
    // Offsets below 2^16 (len <= kChunk); i's 16-bit cast wraps above 2^15
    // (as GCC and clang define it), the sum's bits are the offsets.
    const __m512i offsets = _mm512_add_epi16(iota, _mm512_set1_epi16(static_cast<int16_t>(i)));
    const int np = __builtin_popcount(pos);
    const int nn = __builtin_popcount(neg);
    const __m512i front = _mm512_maskz_compress_epi16(pos, offsets);
    // The j-th negative of the group goes to work[len - 1 - q - j]: lane 31 - j
    // of a store at work + len - 32 - q (never below work: q <= i <= len - 32).
    const __m512i back = _mm512_permutexvar_epi16(reverse, _mm512_maskz_compress_epi16(neg, offsets));
    if (i + 64 <= len) {
      _mm512_storeu_si512(work + p, front);
      _mm512_storeu_si512(work + len - 32 - q, back);
    } else {
      _mm512_mask_storeu_epi16(work + p, static_cast<__mmask32>((uint64_t{1} << np) - 1), front);
      _mm512_mask_storeu_epi16(work + len - 32 - q,
                               static_cast<__mmask32>(~((uint64_t{1} << (32 - nn)) - 1)), back);
    }
    if (bits) add_positive_lanes_avx512(labels + i, pos, 32, &any, &all);
    p += np;
    q += nn;
  }
  if (bits) merge_positive_lanes_avx512<T>(any, all, p, bits);
  compact_labels(labels, 1, i, len, negative_label, work, p, q, bits);  // the tail
  *num_pos = p;
  *num_neg = q;
}
#undef SYNCFREE_UNROLL
#ifdef __CUDACC__
#pragma nv_diag_default 1675
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#ifdef SYNCFREE_HAVE_AVX2_PATH
// The byte shuffles that pack the 16-bit lanes of an 8-lane vector selected
// by an 8-bit mask: front[m] puts the j-th selected lane in lane j, back[m]
// in lane 7 - j (the other lanes get lane 0's bytes: junk, never read).
struct PackTables {
  alignas(16) uint8_t front[256][16];
  alignas(16) uint8_t back[256][16];
  PackTables() {
    for (int m = 0; m < 256; ++m) {
      for (int b = 0; b < 16; ++b) front[m][b] = back[m][b] = static_cast<uint8_t>(b & 1);
      int j = 0;
      for (int lane = 0; lane < 8; ++lane) {
        if (!(m >> lane & 1)) continue;
        front[m][2 * j] = back[m][2 * (7 - j)] = static_cast<uint8_t>(2 * lane);
        front[m][2 * j + 1] = back[m][2 * (7 - j) + 1] = static_cast<uint8_t>(2 * lane + 1);
        ++j;
      }
    }
  }
};

inline const PackTables& pack_tables() {
  static const PackTables tables;
  return tables;
}

// Which of labels[0, 8) are negative (neg) and which are not ignored (kept),
// as 8-bit masks, with AVX2: one or two 32-byte loads for 4- and 8-byte
// labels, one 16- or 8-byte load for 2- and 1-byte ones.
template <typename T>
__attribute__((target("avx2"))) inline void class_masks_8(const T* labels, const LabelMatch<T>& m,
                                                          int* neg, int* kept) {
  int eq, ge = 0xFF;
  if constexpr (sizeof(T) == 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels + 4));
    const __m256i nl = _mm256_set1_epi64x(static_cast<int64_t>(m.negative));
    const __m256i minus_one = _mm256_set1_epi64x(-1);
    eq = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(a, nl))) |
         _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(b, nl))) << 4;
    if constexpr (LabelMatch<T>::kSigned)
      ge = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(a, minus_one))) |
           _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(b, minus_one))) << 4;
  } else if constexpr (sizeof(T) == 4) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels));
    const __m256i nl = _mm256_set1_epi32(static_cast<int32_t>(m.negative));
    eq = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, nl)));
    if constexpr (LabelMatch<T>::kSigned)
      ge = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(-1))));
  } else if constexpr (sizeof(T) == 2) {  // 16-bit lanes, packed to bytes for the byte mask
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(labels));
    const __m128i nl = _mm_set1_epi16(static_cast<int16_t>(m.negative));
    eq = _mm_movemask_epi8(_mm_packs_epi16(_mm_cmpeq_epi16(a, nl), _mm_setzero_si128()));
    if constexpr (LabelMatch<T>::kSigned)
      ge = _mm_movemask_epi8(
          _mm_packs_epi16(_mm_cmpgt_epi16(a, _mm_set1_epi16(-1)), _mm_setzero_si128()));
  } else {
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(labels));
    const __m128i nl = _mm_set1_epi8(static_cast<char>(m.negative));
    eq = _mm_movemask_epi8(_mm_cmpeq_epi8(a, nl)) & 0xFF;
    if constexpr (LabelMatch<T>::kSigned)
      ge = _mm_movemask_epi8(_mm_cmpgt_epi8(a, _mm_set1_epi8(-1))) & 0xFF;
  }
  *neg = m.matchable ? eq : 0;
  *kept = ge;
}

// any |= a and all &= a in the lanes that m sets (all ones), with AVX2.
__attribute__((target("avx2"))) inline void fold_lanes_avx2(__m256i a, __m256i m, __m256i* any,
                                                            __m256i* all) {
  *any = _mm256_or_si256(*any, _mm256_and_si256(a, m));
  *all = _mm256_and_si256(*all, _mm256_or_si256(a, _mm256_xor_si256(m, _mm256_set1_epi64x(-1))));
}

// The positives' labels of an AVX2 group of 8 (`pos`: one bit a label),
// OR-ed into `any` and AND-ed into `all` lane by lane: 64-bit lanes for
// 8-byte labels, else 32-bit lanes, narrower labels widened with their
// own extension (sign for signed types, zero for the others). A lane's
// mask comes from its bit of `pos`.
template <typename T>
__attribute__((target("avx2"))) inline void add_positive_lanes_avx2(const T* labels, int pos,
                                                                    __m256i* any, __m256i* all) {
  if constexpr (sizeof(T) == 8) {
    const __m256i bit = _mm256_set_epi64x(8, 4, 2, 1);
    for (int v = 0; v < 2; ++v) {
      const __m256i sel = _mm256_and_si256(_mm256_set1_epi64x(pos >> (4 * v)), bit);
      fold_lanes_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels + 4 * v)),
                      _mm256_cmpeq_epi64(sel, bit), any, all);
    }
  } else {
    __m256i a;
    if constexpr (sizeof(T) == 4) {
      a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(labels));
    } else if constexpr (sizeof(T) == 2) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(labels));
      a = std::is_signed<T>::value ? _mm256_cvtepi16_epi32(h) : _mm256_cvtepu16_epi32(h);
    } else {
      const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(labels));
      a = std::is_signed<T>::value ? _mm256_cvtepi8_epi32(h) : _mm256_cvtepu8_epi32(h);
    }
    const __m256i bit = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    fold_lanes_avx2(a, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(pos), bit), bit), any,
                    all);
  }
}

// add_positive_lanes_avx2's accumulators, folded (fold_positive_lanes) and
// added to *bits.
template <typename T>
__attribute__((target("avx2"))) inline void merge_positive_lanes_avx2(__m256i any, __m256i all,
                                                                      int64_t count,
                                                                      PositiveBits* bits) {
  alignas(32) uint8_t a[32], b[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), any);
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), all);
  bits->merge(fold_positive_lanes<T, sizeof(T) == 8 ? 8 : 4>(a, b, 32, count));
}

// compact_chunk for contiguous labels with AVX2, 8 labels at a
// time: class_masks_8 gives each class's 8-bit mask; a byte shuffle packs
// the class's 16-bit offsets, which go to the front (positives) or, packed
// in reverse at the top, to the back (negatives) with one 16-byte store
// each. The back store comes first: its junk lanes lie below the back
// region, at or above p + 8 (p + q <= i and i + 16 <= len); the front store's
// junk lanes lie in [p + np, p + 8), below the back region. The entries
// left in [0, p) and [len - q, len) are exactly compact_chunk's, in the same
// order (the region between is never read); the last labels (fewer than 16)
// are compact_chunk's loop.
template <typename T>
__attribute__((target("avx2,popcnt"))) inline void compact_chunk_avx2(
    const T* labels, int64_t len, int64_t negative_label, uint16_t* work, int64_t* num_pos,
    int64_t* num_neg, PositiveBits* bits) {
  const LabelMatch<T> match(negative_label);
  const PackTables& tables = pack_tables();
  int64_t p = 0;
  int64_t q = 0;
  __m256i any = _mm256_setzero_si256();
  __m256i all = _mm256_set1_epi64x(-1);
  const __m128i iota = _mm_set_epi16(7, 6, 5, 4, 3, 2, 1, 0);
  int64_t i = 0;
  for (; i + 16 <= len; i += 8) {
    request_labels_ahead(labels + i, 8);
    if ((i & 31) == 0) request_work_ahead(work, p, len - q);
    int neg, nonneg;
    class_masks_8(labels + i, match, &neg, &nonneg);
    const int pos = nonneg & ~neg;
    const __m128i offsets = _mm_add_epi16(iota, _mm_set1_epi16(static_cast<int16_t>(i)));
    const __m128i back = _mm_shuffle_epi8(
        offsets, _mm_load_si128(reinterpret_cast<const __m128i*>(tables.back[neg])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(work + len - 8 - q), back);
    const __m128i front = _mm_shuffle_epi8(
        offsets, _mm_load_si128(reinterpret_cast<const __m128i*>(tables.front[pos])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(work + p), front);
    if (bits) add_positive_lanes_avx2(labels + i, pos, &any, &all);
    p += __builtin_popcount(static_cast<unsigned>(pos));
    q += __builtin_popcount(static_cast<unsigned>(neg));
  }
  if (bits) merge_positive_lanes_avx2<T>(any, all, p, bits);
  compact_labels(labels, 1, i, len, negative_label, work, p, q, bits);  // the tail
  *num_pos = p;
  *num_neg = q;
}
#endif

// Whether compact_chunk_host compacts labels of this stride on a vector
// path (contiguous labels, a path above the scalar one), rather than in
// compact_chunk's loop.
inline bool vector_compaction(int64_t stride, SimdPath path = simd_path()) {
  return stride == 1 && path != SimdPath::kScalar;
}

// compact_chunk (the same workspace entries and counts, and the same fold
// of the positives' labels into *bits, unless null), with AVX-512 or AVX2
// for contiguous labels (every label type) where the path allows.
template <typename T>
inline void compact_chunk_host(const T* labels, int64_t stride, int64_t len,
                               int64_t negative_label, uint16_t* work, int64_t* num_pos,
                               int64_t* num_neg, SimdPath path = simd_path(),
                               PositiveBits* bits = nullptr) {
  static_assert(std::is_integral<T>::value, "labels are bool or integers");
  {
    const bool vector = vector_compaction(stride, path);
#ifdef SYNCFREE_HAVE_AVX512_PATH
    if (vector && path >= SimdPath::kAvx512Vbmi2)
      return compact_chunk_avx512_vbmi2(labels, len, negative_label, work, num_pos, num_neg, bits);
    if (vector && path >= SimdPath::kAvx512)
      return compact_chunk_avx512(labels, len, negative_label, work, num_pos, num_neg, bits);
#endif
#ifdef SYNCFREE_HAVE_AVX2_PATH
    if (vector && path == SimdPath::kAvx2)
      return compact_chunk_avx2(labels, len, negative_label, work, num_pos, num_neg, bits);
#endif
    (void)vector;
  }
  compact_chunk(labels, stride, len, negative_label, work, num_pos, num_neg, bits);
}

// values[i] = perm.feistel(values[i]) for i < count, on the given path.
inline void feistel_pass(const Permutation& perm, int64_t* values, int64_t count,
                         SimdPath path = simd_path()) {
  int64_t done = 0;
#ifdef SYNCFREE_HAVE_AVX512_PATH
  if (path >= SimdPath::kAvx512) done = feistel_pass_avx512(perm, values, count);  // all of them
#endif
#ifdef SYNCFREE_HAVE_AVX2_PATH
  if (path == SimdPath::kAvx2) done = feistel_pass_avx2(perm, values, count);
#endif
  for (int64_t i = done; i < count; ++i)
    values[i] = static_cast<int64_t>(perm.feistel(static_cast<uint64_t>(values[i])));
}

// Slots [first, first + count) of a row split by class: slot first + i,
// whose position in the interleaving is t[i] (sigma of the slot), goes to
// (pos_rank, pos_slot) as (t[i], first + i) when t[i] < num_pos, else to
// (neg_rank, neg_slot) as (t[i] - num_pos, first + i), in slot order.
// Returns the number of positives. Each output has room for count + 8
// entries (the vector path's full stores).
inline int64_t split_slots(const int64_t* t, int64_t count, int64_t first, int64_t num_pos,
                           int64_t* pos_rank, int64_t* pos_slot, int64_t* neg_rank,
                           int64_t* neg_slot, SimdPath path = simd_path()) {
#ifdef SYNCFREE_HAVE_AVX512_PATH
  if (path >= SimdPath::kAvx512)
    return split_slots_avx512(t, count, first, num_pos, pos_rank, pos_slot, neg_rank, neg_slot);
#endif
  (void)path;
  int64_t np = 0;
  int64_t nn = 0;
  for (int64_t i = 0; i < count; ++i) {  // branch-free: both writes always happen
    const bool is_pos = t[i] < num_pos;
    pos_rank[np] = t[i];
    pos_slot[np] = first + i;
    neg_rank[nn] = t[i] - num_pos;
    neg_slot[nn] = first + i;
    np += is_pos;
    nn += !is_pos;
  }
  return np;
}

// ranks[i] (of one class of a compacted row, below its count) -> its
// workspace entry, and start[i] its chunk's first label, for i < count:
// CompactRow::entry_of over a batch.
inline void entries_of(const CompactRow& row, bool positive, int64_t* ranks, int64_t count,
                       int64_t* start, SimdPath path = simd_path()) {
#ifdef SYNCFREE_HAVE_AVX512_PATH
  if (path >= SimdPath::kAvx512 && row.nchunks <= kLinearChunkSearch)
    return entries_of_avx512(row, positive, ranks, count, start);
#endif
  (void)path;
  for (int64_t i = 0; i < count; ++i) ranks[i] = row.entry_of(ranks[i], positive, &start[i]);
}

}  // namespace core
}  // namespace syncfree
