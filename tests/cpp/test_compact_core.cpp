// Unit tests of core/compact.h (no torch): the compaction of a mask row
// against a plain loop, every room size around the write loop's block,
// strides, chunked rows written at their prefix offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/compact.h"

using namespace syncfree;

namespace {

// The rule, written as plainly as possible.
std::vector<int64_t> plain(const std::vector<int32_t>& mask, int64_t stride, int64_t n, int64_t k,
                           int64_t* count) {
  std::vector<int64_t> out(static_cast<size_t>(k), -1);
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask[static_cast<size_t>(i * stride)] != 0) {
      if (c < k) out[static_cast<size_t>(c)] = i;
      ++c;
    }
  }
  *count = c;
  return out;
}

std::vector<int32_t> random_mask(size_t size, double density, std::mt19937_64* rng) {
  std::bernoulli_distribution on(density);
  std::vector<int32_t> m(size);
  for (auto& x : m) x = on(*rng) ? static_cast<int32_t>((*rng)() % 7) - 3 : 0;  // 0 too: a false "true"
  return m;
}

TEST(MaskCompact, RowEqualsPlainLoop) {
  std::mt19937_64 rng(1);
  for (const int64_t n : {0, 1, 2, 511, 512, 513, 1024, 1500, 5000}) {
    for (const double density : {0.0, 0.05, 0.5, 0.95, 1.0}) {
      for (const int64_t stride : {1, 2}) {
        const auto mask = random_mask(static_cast<size_t>(n * stride + 1), density, &rng);
        for (const int64_t k : {int64_t{0}, int64_t{1}, int64_t{100}, int64_t{511}, int64_t{512},
                                int64_t{513}, n / 2, n, n + 3}) {
          int64_t want_count = 0;
          const auto want = plain(mask, stride, n, k, &want_count);
          // Guard slots on both sides: nothing is written outside [0, k).
          std::vector<int64_t> indices(static_cast<size_t>(k + 2), 77);
          std::vector<char> valid_storage(static_cast<size_t>(k + 2), 2);
          bool* valid = reinterpret_cast<bool*>(valid_storage.data());
          const int64_t count =
              core::compact_mask_row(mask.data(), stride, n, k, indices.data() + 1, valid + 1);
          ASSERT_EQ(count, want_count) << n << " " << k;
          EXPECT_EQ(indices.front(), 77);
          EXPECT_EQ(indices.back(), 77);
          EXPECT_EQ(valid_storage.front(), 2);
          EXPECT_EQ(valid_storage.back(), 2);
          for (int64_t j = 0; j < k; ++j) {
            ASSERT_EQ(indices[static_cast<size_t>(j + 1)], want[static_cast<size_t>(j)])
                << "n " << n << " k " << k << " slot " << j;
            ASSERT_EQ(valid[j + 1], j < want_count);
          }
        }
      }
    }
  }
}

TEST(MaskCompact, ChunksWrittenAtTheirPrefixEqualTheWholeRow) {
  // As the CPU backend writes a long row: counts first, then each chunk at
  // its prefix with the room ending at its own last position. The chunks are
  // written last to first, so a store past a chunk's room would clobber the
  // next chunk's positions (written before it) and fail the comparison.
  std::mt19937_64 rng(2);
  const int64_t n = 10000, chunk = 777;
  const auto mask = random_mask(static_cast<size_t>(n), 0.3, &rng);
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<int64_t> prefix(static_cast<size_t>(chunks + 1), 0);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = c * chunk;
    prefix[c + 1] = prefix[c] + core::count_true(mask.data() + start, 1, std::min(chunk, n - start));
  }
  for (const int64_t k : {0, 5, 1000, 2900, 20000}) {
    int64_t want_count = 0;
    const auto want = plain(mask, 1, n, k, &want_count);
    ASSERT_EQ(prefix[chunks], want_count);
    std::vector<int64_t> indices(static_cast<size_t>(k), 0);
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t start = c * chunk;
      const int64_t before = prefix[c];
      if (before >= k) continue;
      EXPECT_EQ(core::write_true(mask.data() + start, 1, std::min(chunk, n - start), start,
                                 indices.data() + before, std::min(k, prefix[c + 1]) - before),
                prefix[c + 1] - before);
    }
    std::unique_ptr<bool[]> valid(new bool[static_cast<size_t>(std::max<int64_t>(k, 1))]);
    core::finish_slots(prefix[chunks], k, indices.data(), valid.get());
    EXPECT_EQ(indices, want) << k;
  }
}

TEST(MaskCompact, BoolAndWideTypes) {
  const bool b[] = {false, true, true, false, true};
  int64_t out[3];
  bool valid[3];
  EXPECT_EQ(core::compact_mask_row(b, 1, 5, 3, out, valid), 3);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
  EXPECT_EQ(out[2], 4);
  const int64_t w[] = {INT64_MIN, 0, INT64_MAX, 0};
  EXPECT_EQ(core::compact_mask_row(w, 1, 4, 3, out, valid), 2);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 2);
  EXPECT_EQ(out[2], -1);
  EXPECT_FALSE(valid[2]);
}

}  // namespace
