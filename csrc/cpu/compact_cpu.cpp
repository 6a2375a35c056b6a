// CPU backend of syncfree::compact: the torch adapter around the
// framework-free rule (core/compact.h).
//
// Rows of at most kRowChunk elements, or at least as many rows as threads:
// one pass per row (branch-free writes up to K, then counting only), rows in
// parallel. Fewer, longer rows are cut into chunks of kRowChunk so that one
// long row also spreads over threads:
//   1. count every (row, chunk) pair's true elements;
//   2. turn each row's counts into prefix sums (the row's count is the total);
//   3. every (row, chunk) pair whose prefix is below K writes its positions
//      at that offset;
//   4. each row's slots past its count get -1 and valid = false.
// A phase with little work runs on the calling thread (cpu/common.h); every
// unit writes its own part of the outputs, so the results do not depend on
// how the units are split over threads.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "core/compact.h"
#include "cpu/common.h"
#include "ops/compact.h"

namespace syncfree {
namespace ops {

namespace {

constexpr int64_t kRowChunk = int64_t{1} << 16;

// Work per unit (units: see cpu/common.h): a written element costs about
// one unit, a counted one about a quarter (vectorized), a finished slot about
// an eighth (stores only).
constexpr int64_t kUnitWork = 64;
int64_t count_work(int64_t len) { return len / 4 + kUnitWork; }
int64_t write_work(int64_t len) { return len + kUnitWork; }
int64_t finish_work(int64_t k) { return k / 8 + kUnitWork; }

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_cpu(const at::Tensor& mask, int64_t size) {
  check_compact_args(mask, size);
  at::Tensor indices, valid, count;
  std::tie(indices, valid, count) = empty_compact_outputs(mask, size);
  const int64_t rows = compact_rows(mask);
  if (rows == 0) return {indices, valid, count};
  const int64_t n = mask.size(-1);
  const int64_t k = size;
  const int64_t stride = mask.stride(-1);
  int64_t* out_indices = indices.data_ptr<int64_t>();
  bool* out_valid = valid.data_ptr<bool>();
  int64_t* out_count = count.data_ptr<int64_t>();

  SYNCFREE_DISPATCH_LABEL_TYPES(mask.scalar_type(), "compact_cpu", [&] {
    const scalar_t* data = mask.data_ptr<scalar_t>();
    // Chunks only pay (a second pass over the counted part) when there are
    // fewer rows than threads; the results are the same either way.
    if (n <= kRowChunk || rows >= at::get_num_threads()) {
      at::parallel_for(0, rows, parallel_grain(write_work(n) + finish_work(k)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t r = begin; r < end; ++r) {
                           out_count[r] = core::compact_mask_row(
                               data + row_offset(mask, r), stride, n, k, out_indices + r * k,
                               out_valid + r * k);
                         }
                       });
      return;
    }
    const int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
    std::vector<int64_t> prefix(static_cast<size_t>(rows * chunks));
    auto chunk_len = [&](int64_t c) { return std::min(kRowChunk, n - c * kRowChunk); };
    at::parallel_for(0, rows * chunks, parallel_grain(count_work(kRowChunk)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t u = begin; u < end; ++u) {
                         const int64_t r = u / chunks, c = u % chunks;
                         prefix[u] = core::count_true(
                             data + row_offset(mask, r) + c * kRowChunk * stride, stride,
                             chunk_len(c));
                       }
                     });
    // Exclusive prefix sums in place; the row's total is its count.
    at::parallel_for(0, rows, parallel_grain(chunks), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t total = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t chunk_count = prefix[r * chunks + c];
          prefix[r * chunks + c] = total;
          total += chunk_count;
        }
        out_count[r] = total;
      }
    });
    if (k > 0) {
      at::parallel_for(0, rows * chunks, parallel_grain(write_work(kRowChunk)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t u = begin; u < end; ++u) {
                           const int64_t r = u / chunks, c = u % chunks;
                           const int64_t before = prefix[u];
                           if (before >= k) continue;  // its positions come after slot K
                           // The room ends at the chunk's last position: write_true
                           // writes nothing past the room, and the slots after it
                           // belong to the next chunk (written concurrently).
                           const int64_t after = c + 1 < chunks ? prefix[u + 1] : out_count[r];
                           core::write_true(
                               data + row_offset(mask, r) + c * kRowChunk * stride, stride,
                               chunk_len(c), c * kRowChunk, out_indices + r * k + before,
                               std::min(k, after) - before);
                         }
                       });
    }
    at::parallel_for(0, rows, parallel_grain(finish_work(k)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        core::finish_slots(out_count[r], k, out_indices + r * k, out_valid + r * k);
    });
  });
  return {indices, valid, count};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("compact", TORCH_FN(syncfree::ops::compact_cpu));
}
