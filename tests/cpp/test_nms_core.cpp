// Unit tests of the framework-free NMS rule (csrc/core/nms.h), without torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/nms.h"

using namespace syncfree::core;

namespace {

struct Box {
  float x1, y1, x2, y2;
};

// The greedy pass longhand: torchvision's CPU loop (skip suppressed, compare
// every later box), over candidates listed by (id, rank), ids never mixing;
// kept boxes merged by rank at the end.
std::vector<int64_t> longhand(const std::vector<Box>& b, const std::vector<float>& s,
                              const std::vector<int64_t>& id, const std::vector<char>& take,
                              double thr, int64_t max_output) {
  const int64_t n = static_cast<int64_t>(b.size());
  std::vector<int64_t> order;
  for (int64_t j = 0; j < n; ++j)
    if (take[j] && !std::isnan(s[j])) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
    return s[a] > s[c] || (s[a] == s[c] && a < c);
  });
  std::vector<char> suppressed(n, 0);
  std::vector<int64_t> kept;
  for (size_t p = 0; p < order.size(); ++p) {
    const int64_t i = order[p];
    if (suppressed[i]) continue;
    kept.push_back(i);
    const float ia = (b[i].x2 - b[i].x1) * (b[i].y2 - b[i].y1);
    for (size_t q = p + 1; q < order.size(); ++q) {
      const int64_t j = order[q];
      if (suppressed[j] || id[j] != id[i]) continue;
      const float xx1 = std::max(b[i].x1, b[j].x1), yy1 = std::max(b[i].y1, b[j].y1);
      const float xx2 = std::min(b[i].x2, b[j].x2), yy2 = std::min(b[i].y2, b[j].y2);
      const float w = std::max(0.0f, xx2 - xx1), h = std::max(0.0f, yy2 - yy1);
      const float inter = w * h;
      const float ja = (b[j].x2 - b[j].x1) * (b[j].y2 - b[j].y1);
      const float ovr = inter / (ia + ja - inter);
      if (static_cast<double>(ovr) > thr) suppressed[j] = 1;
    }
  }
  if (static_cast<int64_t>(kept.size()) > max_output) kept.resize(static_cast<size_t>(max_output));
  return kept;
}

std::vector<int64_t> run_row(const std::vector<Box>& b, const std::vector<float>& s,
                             const std::vector<int64_t>& id, const std::vector<char>& take,
                             bool grouped, double thr, int64_t max_output) {
  const int64_t n = static_cast<int64_t>(b.size());
  NmsWorkspace<float, int32_t> ws(n);
  std::vector<int64_t> out(static_cast<size_t>(max_output) + 1, -7);
  const int64_t count = nms_row<float, int32_t>(
      n, [&](int64_t j) { return s[j]; },
      [&](int64_t j, int c) {
        const Box& x = b[j];
        return c == 0 ? x.x1 : c == 1 ? x.y1 : c == 2 ? x.x2 : x.y2;
      },
      [&](int64_t j) { return id[j]; }, [&](int64_t j) { return take[j] != 0; }, grouped,
      nms_threshold<float>(thr), max_output, ws, out.data());
  EXPECT_EQ(out[static_cast<size_t>(max_output)], -7) << "wrote past max_output";
  out.resize(static_cast<size_t>(count));
  return out;
}

}  // namespace

TEST(NmsCore, ThresholdDecidesAsDoubleComparison) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> thresholds = {0.0,  -0.0, 0.5, 0.7, 1.0, 1.0 / 3.0, 1e-40, -1e-40,
                                    1e300, -1e300, 3.4028235677973366e38,
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity()};
  for (int i = 0; i < 2000; ++i) thresholds.push_back(u(rng));
  for (double t : thresholds) {
    const float tf = nms_threshold<float>(t);
    EXPECT_LE(static_cast<double>(tf), t);
    // Floats around t and around tf.
    for (float base : {static_cast<float>(t), tf}) {
      float v = base;
      for (int k = 0; k < 4; ++k) v = std::nextafter(v, -std::numeric_limits<float>::infinity());
      for (int k = 0; k < 9; ++k) {
        EXPECT_EQ(v > tf, static_cast<double>(v) > t) << "v=" << v << " t=" << t;
        v = std::nextafter(v, std::numeric_limits<float>::infinity());
      }
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(nan > tf);
  }
  EXPECT_EQ(nms_threshold<double>(0.7), 0.7);
}

TEST(NmsCore, IouFollowsTorchvision) {
  // Half overlap: inter 1, union 2.
  EXPECT_EQ(nms_iou(0.f, 0.f, 2.f, 1.f, 2.f, 0.f, 0.f, 1.f, 1.f, 1.f), 0.5f);
  // Disjoint and touching: 0.
  EXPECT_EQ(nms_iou(0.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f, 2.f, 1.f, 1.f), 0.f);
  EXPECT_EQ(nms_iou(0.f, 0.f, 1.f, 1.f, 1.f, 5.f, 5.f, 6.f, 6.f, 1.f), 0.f);
  // Two points: 0 / 0 is NaN, which suppresses nothing.
  EXPECT_TRUE(std::isnan(nms_iou(1.f, 1.f, 1.f, 1.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f)));
  EXPECT_FALSE(nms_suppresses(1.f, 1.f, 1.f, 1.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f, -1.f));
  // std::max / std::min: a NaN first operand wins, a NaN second one loses.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(nms_max(nan, 1.f)));
  EXPECT_EQ(nms_max(1.f, nan), 1.f);
  EXPECT_TRUE(std::isnan(nms_min(nan, 1.f)));
  EXPECT_EQ(nms_min(1.f, nan), 1.f);
  EXPECT_EQ(nms_area(1.f, 2.f, 4.f, 6.f), 12.f);
  EXPECT_EQ(nms_area(4.f, 2.f, 1.f, 6.f), -12.f);  // inverted: negative, as torchvision
}

TEST(NmsCore, ScoreKeysOrderAsRanks) {
  std::vector<float> values = {0.f,   -0.f,  1.f,  -1.f, 0.5f, -0.5f, 1e-45f, -1e-45f, 3e38f, -3e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity()};
  for (float a : values) {
    EXPECT_GT(nms_score_key(a), 0u);
    EXPECT_GT(static_cast<uint64_t>(nms_score_key(static_cast<double>(a))), 0u);
    for (float b : values) {
      EXPECT_EQ(nms_score_key(a) > nms_score_key(b), a > b) << a << " " << b;
      EXPECT_EQ(nms_score_key(a) == nms_score_key(b), a == b) << a << " " << b;
      const double da = a, db = b;
      EXPECT_EQ(nms_score_key(da) > nms_score_key(db), da > db);
      EXPECT_EQ(nms_score_key(da) == nms_score_key(db), da == db);
    }
  }
  EXPECT_EQ(nms_score_key(std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_EQ(nms_score_key(std::numeric_limits<double>::quiet_NaN()), 0u);
}

TEST(NmsCore, RowEqualsLonghandOnRandomRows) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 400)(rng);
    const int clusters = std::uniform_int_distribution<int>(1, 40)(rng);
    const int num_ids = std::uniform_int_distribution<int>(1, 5)(rng);
    std::uniform_real_distribution<float> pos(0.f, 200.f), size(1.f, 60.f), jit(-0.15f, 0.15f);
    std::vector<Box> base(static_cast<size_t>(clusters));
    for (Box& c : base) {
      c.x1 = pos(rng);
      c.y1 = pos(rng);
      c.x2 = c.x1 + size(rng);
      c.y2 = c.y1 + size(rng);
    }
    std::vector<Box> b(static_cast<size_t>(n));
    std::vector<float> s(static_cast<size_t>(n));
    std::vector<int64_t> id(static_cast<size_t>(n));
    std::vector<char> take(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const Box& c = base[std::uniform_int_distribution<int>(0, clusters - 1)(rng)];
      const float w = c.x2 - c.x1, h = c.y2 - c.y1;
      b[j] = {c.x1 + jit(rng) * w, c.y1 + jit(rng) * h, c.x2 + jit(rng) * w, c.y2 + jit(rng) * h};
      // Ties on purpose: scores on a coarse grid; some NaN.
      s[j] = static_cast<float>(std::uniform_int_distribution<int>(0, 50)(rng)) / 8.f;
      if (trial % 5 == 0 && j % 11 == 0) s[j] = std::numeric_limits<float>::quiet_NaN();
      id[j] = std::uniform_int_distribution<int>(0, num_ids - 1)(rng) * 1000 - 7;
      take[j] = std::uniform_int_distribution<int>(0, 9)(rng) != 0;
    }
    const double thr = std::uniform_real_distribution<double>(-0.1, 1.0)(rng);
    for (int64_t max_output : {int64_t(0), int64_t(1), int64_t(5), n, n + 2}) {
      for (bool grouped : {false, true}) {
        std::vector<int64_t> ids = grouped ? id : std::vector<int64_t>(static_cast<size_t>(n), 0);
        EXPECT_EQ(run_row(b, s, id, take, grouped, thr, max_output),
                  longhand(b, s, ids, take, thr, max_output))
            << "trial " << trial << " n " << n << " max_output " << max_output;
      }
    }
  }
}

TEST(NmsCore, GreedyCompactsLongRows) {
  // Many boxes of a few clusters: the survivors are compacted several times.
  std::mt19937_64 rng(3);
  const int64_t n = 5000;
  std::vector<Box> b(n);
  std::vector<float> s(n);
  std::vector<int64_t> id(n, 0);
  std::vector<char> take(n, 1);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int64_t j = 0; j < n; ++j) {
    const float x = static_cast<float>(j % 50) * 30.f, y = static_cast<float>((j / 50) % 7) * 30.f;
    b[j] = {x + u(rng), y + u(rng), x + 20.f + u(rng), y + 20.f + u(rng)};
    s[j] = u(rng);
  }
  for (double thr : {0.3, 0.7, 0.95}) {
    EXPECT_EQ(run_row(b, s, id, take, false, thr, n), longhand(b, s, id, take, thr, n));
  }
}
