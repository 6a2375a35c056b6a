// The balanced sampler's compaction of a label row into its positives and
// negatives: chunked, order-preserving (the `compact` op's rule is compact.h).
//
// A row of n labels is cut into chunks of kChunk elements (the last may be
// shorter). Chunk c, covering [c*kChunk, c*kChunk + len), owns the same range
// of a uint16 workspace: its positives' offsets within the chunk go to the
// front in increasing order, its negatives' offsets to the back in decreasing
// order (the j-th negative at position len-1-j). Chunks are independent, so
// they can be compacted in parallel; the workspace costs 2 bytes per label
// whatever n is.
//
// After the per-chunk counts are turned into exclusive prefix sums (nchunks+1
// entries per class, the last being the row's total), rank r of a class maps to
// an index with one binary search over the chunks and one workspace read.
// The mapping is exact and order-preserving, so it does not depend on the
// chunk size: every backend that maps ranks in index order agrees.
//
// The host compaction can also fold the positives' labels into their OR and
// AND (PositiveBits): where the two agree, every positive of the row carries
// that one label, and a fused gather writes it rather than reading each
// sampled positive's label (cpu/common.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "labels.h"
#include "platform.h"

namespace syncfree {
namespace core {

constexpr int64_t kChunk = int64_t{1} << 16;

SYNCFREE_HD int64_t num_chunks(int64_t n, int64_t chunk = kChunk) { return (n + chunk - 1) / chunk; }

// How far ahead the host compaction requests the labels it will read, in
// bytes: the vector paths' contiguous labels (request_labels_ahead,
// host_simd.h) and strided ones (compact_labels; at least
// kStridedLabelsAhead labels ahead).
constexpr int64_t kLabelsAhead = 4096;
constexpr int64_t kStridedLabelsAhead = 16;
// How far ahead of each of its two streams of entries (the positives'
// front, the negatives' back) a vector path of the host compaction requests
// the workspace it will write, in entries (request_work_ahead, host_simd.h).
constexpr int64_t kWorkAhead = 128;

// The positives' labels of a chunk or a row, each as int64 (as a gather
// outputs it: static_cast<int64_t> of the label), folded into their OR
// (`any`) and AND (`all`): 0 and -1 when there is none. Every positive
// carries one and the same label exactly when any == all (a bit set in one
// positive's label and clear in another's is set in `any`, clear in
// `all`); that label is then `any`. Casting a label to int64 extends it the
// same way whatever its bits (sign or zero), so the OR and AND of the cast
// labels are the cast of the OR and AND taken in the label type.
struct PositiveBits {
  int64_t any = 0;
  int64_t all = -1;
  SYNCFREE_HD void add(int64_t label, bool positive) {
    // Through a mask, not a condition: GCC 12 compiled `positive ? label :
    // 0` into a branch, which a row's random classes mispredict (a strided
    // row of 1e6 int64 labels, folded, took about 2x the time).
    const int64_t mask = -static_cast<int64_t>(positive);
    any |= label & mask;
    all &= label | ~mask;
  }
  SYNCFREE_HD void merge(const PositiveBits& other) {
    any |= other.any;
    all &= other.all;
  }
  // Whether the positives (at least one) all carry the label `any`.
  SYNCFREE_HD bool one_label() const { return any == all; }
};

// Labels [begin, len) of a chunk (labels[i * stride]) into its workspace
// work[0..len), after the p positives and q negatives of [0, begin): the
// loop of compact_chunk, and the tail of the vector paths (host_simd.h).
// p and q are updated, and the positives' labels added to *bits (unless
// null: then the loop does not fold them).
template <typename T>
inline void compact_labels(const T* labels, int64_t stride, int64_t begin, int64_t len,
                           int64_t negative_label, uint16_t* work, int64_t& p, int64_t& q,
                           PositiveBits* bits = nullptr) {
  uint16_t* back = work + len - 1;
  const auto loop = [&](auto folds) {
    // The counts and the fold in locals, not through p, q and bits (through
    // them, a strided row of 1e6 int64 labels took about 1.15x the time).
    int64_t np = p;
    int64_t nq = q;
    PositiveBits fold;
    // Branch-free: both writes always happen; a slot written by the wrong class
    // is overwritten later or lies outside the final [0, p) and [len-q, len).
    const auto body = [&](int64_t i, T v) {
      bool pos, neg;
      classify(v, negative_label, &pos, &neg);
      work[np] = static_cast<uint16_t>(i);
      back[-nq] = static_cast<uint16_t>(i);
      np += pos;
      nq += neg;
      if constexpr (decltype(folds)::value) fold.add(static_cast<int64_t>(v), pos);
    };
    if (stride == 1) {
      for (int64_t i = begin; i < len; ++i) body(i, labels[i]);
    } else {
      // Strided labels are requested kLabelsAhead bytes (at least
      // kStridedLabelsAhead labels) ahead of the one read: the hardware's
      // own requests did not keep up with such a stream. On every other
      // int64 label of a row of 1e6, from memory, balanced_sample took 4.3
      // ms with K = 1 (the fused call, folding, 9 ms); unfolded and with the
      // requests, the fused call takes about 2.1 ms, near
      // torch.count_nonzero's 2.06 ms over the same row, and
      // balanced_sample with K = N / 10 on such rows of 1e5, 3e5 and 1e6
      // labels took 0.87x to 0.88x, 0.78x to 0.79x and 0.61x to 0.65x the
      // time (one thread, an Intel Xeon, 2026-12-05, docs/benchmarks.md;
      // other label types and strides were not measured). A stride of 0
      // (every label the same) requests nothing further. Hints only: the
      // addresses are computed as integers, and a prefetch never faults.
      const uintptr_t step = static_cast<uintptr_t>(stride) * sizeof(T);
      const uintptr_t by_labels = step * static_cast<uintptr_t>(kStridedLabelsAhead);
      const uintptr_t by_bytes = static_cast<uintptr_t>(kLabelsAhead);
      const uintptr_t ahead = step == 0 ? 0 : by_labels > by_bytes ? by_labels : by_bytes;
      for (int64_t i = begin; i < len; ++i) {
        prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(labels + i * stride) +
                                               ahead));
        body(i, labels[i * stride]);
      }
    }
    p = np;
    q = nq;
    if constexpr (decltype(folds)::value) bits->merge(fold);
  };
  if (bits) {
    loop(std::true_type());
  } else {
    loop(std::false_type());
  }
}

// Compacts labels[0], labels[stride], ..., labels[(len-1)*stride] (len <= kChunk)
// into work[0..len) and returns the class counts of the chunk (and adds its
// positives' labels to *bits, unless null).
template <typename T>
inline void compact_chunk(const T* labels, int64_t stride, int64_t len, int64_t negative_label,
                          uint16_t* work, int64_t* num_pos, int64_t* num_neg,
                          PositiveBits* bits = nullptr) {
  int64_t p = 0;
  int64_t q = 0;
  compact_labels(labels, stride, 0, len, negative_label, work, p, q, bits);
  *num_pos = p;
  *num_neg = q;
}

// Per-chunk counts stored at prefix[1..chunks] -> exclusive prefix sums in
// prefix[0..chunks] (prefix[chunks] is the row's total).
SYNCFREE_HD void counts_to_prefix(int64_t* prefix, int64_t chunks) {
  prefix[0] = 0;
  for (int64_t c = 1; c <= chunks; ++c) prefix[c] += prefix[c - 1];
}

// One whole row, serially: every chunk compacted, then the prefix sums
// (pos_prefix and neg_prefix hold num_chunks(n) + 1 entries each).
template <typename T>
inline void compact_row(const T* labels, int64_t stride, int64_t n, int64_t negative_label,
                        uint16_t* work, int64_t* pos_prefix, int64_t* neg_prefix) {
  const int64_t chunks = num_chunks(n);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = c * kChunk;
    compact_chunk(labels + start * stride, stride, (n - start) < kChunk ? (n - start) : kChunk,
                  negative_label, work + start, &pos_prefix[c + 1], &neg_prefix[c + 1]);
  }
  counts_to_prefix(pos_prefix, chunks);
  counts_to_prefix(neg_prefix, chunks);
}

// Read-only view of one compacted row.
struct CompactRow {
  const uint16_t* work;        // n entries
  const int64_t* pos_prefix;   // nchunks + 1 entries
  const int64_t* neg_prefix;   // nchunks + 1 entries
  int64_t n;
  int64_t nchunks;
  int64_t chunk = kChunk;      // labels per chunk (the CUDA three-launch path uses fewer)

  SYNCFREE_HD int64_t num_positive() const { return pos_prefix[nchunks]; }
  SYNCFREE_HD int64_t num_negative() const { return neg_prefix[nchunks]; }

  // Where the positive (or negative) of the given rank lies: its chunk's
  // first label (*start) and its workspace entry (the return value), which
  // holds its offset in the chunk; rank < class count. Lets a caller
  // prefetch work[entry] before reading it (index_of in two steps).
  SYNCFREE_HD int64_t entry_of(int64_t rank, bool positive, int64_t* start) const {
    const int64_t* prefix = positive ? pos_prefix : neg_prefix;
    // Branch-free search for the largest c with prefix[c] <= rank; that
    // chunk holds the rank (empty chunks have prefix[c + 1] == prefix[c]).
    int64_t lo = 0;
    int64_t span = nchunks;
    while (span > 1) {
      const int64_t half = span / 2;
      lo = prefix[lo + half] <= rank ? lo + half : lo;
      span -= half;
    }
    *start = lo * chunk;
    const int64_t j = rank - prefix[lo];
    const int64_t len = (n - *start) < chunk ? (n - *start) : chunk;
    return positive ? *start + j : *start + len - 1 - j;
  }

  // Index of the positive (or negative) of the given rank; rank < class count.
  SYNCFREE_HD int64_t index_of(int64_t rank, bool positive) const {
    int64_t start;
    const int64_t entry = entry_of(rank, positive, &start);
    return start + work[entry];
  }
};

}  // namespace core
}  // namespace syncfree
