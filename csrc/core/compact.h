// Order-preserving compaction of a mask row into the positions of its true
// elements (the rule of syncfree::compact; framework-free, C++17).
//
// For a row mask[0..n) and K output slots: slot j < min(count, K) holds the
// position of the row's j-th true element (increasing order), the other slots
// hold -1; count is the number of true elements of the row (it may exceed K).
// An element is true when it is not zero (bool or any integer type).
//
// Every backend computes exactly this; a row may be cut into chunks that are
// counted first and written at their prefix offsets (the positions do not
// depend on the chunking).
#pragma once

#include <cstdint>

#include "platform.h"

namespace syncfree {
namespace core {

template <typename T>
SYNCFREE_HD bool mask_true(T v) {
  return v != T(0);
}

// Number of true elements of mask[0], mask[stride], ..., mask[(len-1)*stride].
template <typename T>
inline int64_t count_true(const T* mask, int64_t stride, int64_t len) {
  int64_t count = 0;
  if (stride == 1) {
    for (int64_t i = 0; i < len; ++i) count += mask_true(mask[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) count += mask_true(mask[i * stride]);
  }
  return count;
}

// Positions first + i of the first `room` true elements of
// mask[0..len) (stride apart) go to out[0..min(count, room)), in increasing
// order; returns count, the number of true elements of the range (it keeps
// counting once the room is used up). Writes nothing outside out[0..room).
//
// The write loop is branch-free: every element's position is stored at the
// next free slot and the slot advances by the element's truth, so a false
// element's store is overwritten by the next one. That needs a slot to spare
// for each element of a block: while the room left is at least a block,
// blocks store straight into out; a block with less room stores into a small
// local buffer, of which the part that fits is copied.
template <typename T>
inline int64_t write_true(const T* mask, int64_t stride, int64_t len, int64_t first,
                          int64_t* out, int64_t room) {
  constexpr int64_t kBlock = 512;
  int64_t buffer[kBlock];
  int64_t count = 0;
  int64_t i = 0;
  while (i < len && count < room) {
    const int64_t block = (len - i) < kBlock ? (len - i) : kBlock;
    const bool direct = room - count >= block;
    int64_t* dst = direct ? out + count : buffer;
    int64_t p = 0;
    if (stride == 1) {
      for (int64_t j = 0; j < block; ++j) {
        dst[p] = first + i + j;
        p += mask_true(mask[i + j]);
      }
    } else {
      for (int64_t j = 0; j < block; ++j) {
        dst[p] = first + i + j;
        p += mask_true(mask[(i + j) * stride]);
      }
    }
    if (!direct) {
      const int64_t copy = p < room - count ? p : room - count;
      for (int64_t j = 0; j < copy; ++j) out[count + j] = buffer[j];
    }
    count += p;
    i += block;
  }
  if (i < len) count += count_true(mask + i * stride, stride, len - i);
  return count;
}

// Slots [0, k) of one row's outputs once count is known: the first
// min(count, k) are valid (their indices are already written), the others
// get index -1.
inline void finish_slots(int64_t count, int64_t k, int64_t* indices, bool* valid) {
  const int64_t used = count < k ? count : k;
  for (int64_t j = 0; j < used; ++j) valid[j] = true;
  for (int64_t j = used; j < k; ++j) {
    indices[j] = -1;
    valid[j] = false;
  }
}

// One whole row, serially: indices[0..k), valid[0..k); returns the count.
template <typename T>
inline int64_t compact_mask_row(const T* mask, int64_t stride, int64_t n, int64_t k,
                                int64_t* indices, bool* valid) {
  const int64_t count = write_true(mask, stride, n, 0, indices, k);
  finish_slots(count, k, indices, valid);
  return count;
}

}  // namespace core
}  // namespace syncfree
