// Statistical tests of the keyed permutations at the round count in use
// (kFeistelRounds) and of the key derivation. Each assertion is a chi-square
// goodness-of-fit test with a false-failure probability of 1e-6 under the
// hypothesis that the tested quantity is exactly uniform; inputs are fixed, so
// results are reproducible. docs/randomness.md describes the battery.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/permutation.h"
#include "core/random.h"

using namespace syncfree::core;

namespace {

// Upper 1e-6 critical value of chi-square(df), Wilson-Hilferty approximation
// (relative error well under 1% for df >= 30, which every test here has).
double chi2_critical_1e6(double df) {
  const double z = 4.753424;  // standard normal upper 1e-6 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

double chi2(const std::vector<double>& counts, const std::vector<double>& expected) {
  double s = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double d = counts[i] - expected[i];
    s += d * d / expected[i];
  }
  return s;
}

void expect_uniform(const std::vector<double>& counts, const char* what) {
  double total = 0;
  for (double c : counts) total += c;
  const std::vector<double> expected(counts.size(), total / static_cast<double>(counts.size()));
  const double stat = chi2(counts, expected);
  const double crit = chi2_critical_1e6(static_cast<double>(counts.size() - 1));
  EXPECT_LT(stat, crit) << what << ": chi-square " << stat << " over " << counts.size() - 1
                        << " degrees of freedom";
}

}  // namespace

// The images of two fixed points, (perm(x), perm(y)), are a uniformly random
// ordered pair of distinct values over random keys, in the Feistel domain at
// its smallest (n = 129..256: 8 domain bits, where mixing is slowest).
TEST(Randomness, FeistelPairsAreUniform) {
  for (const int64_t n : {129, 200, 256}) {
    const int64_t keys = 1500000;
    std::vector<double> counts(static_cast<size_t>(n * n), 0.0);
    for (int64_t k = 0; k < keys; ++k) {
      const Permutation perm(stream_value(0xC0FFEE, static_cast<uint64_t>(k)), n);
      counts[static_cast<size_t>(perm(0) * n + perm(n - 1))] += 1;
    }
    std::vector<double> off_diagonal;
    for (int64_t a = 0; a < n; ++a)
      for (int64_t b = 0; b < n; ++b) {
        if (a == b) {
          ASSERT_EQ(counts[static_cast<size_t>(a * n + b)], 0) << "not a bijection";
        } else {
          off_diagonal.push_back(counts[static_cast<size_t>(a * n + b)]);
        }
      }
    expect_uniform(off_diagonal, "pairs (perm(0), perm(n-1))");
  }
}

// Each point's image is uniform for every point of a larger Feistel domain
// (binned), and nearby points are not tied together.
TEST(Randomness, FeistelImagesAreUniformAcrossTheDomain) {
  const int64_t n = 100000;
  const int64_t keys = 200000;
  const int bins = 50;
  for (const int64_t x : {int64_t{0}, int64_t{1}, n / 2, n - 1}) {
    std::vector<double> counts(bins, 0.0);
    for (int64_t k = 0; k < keys; ++k) {
      const Permutation perm(stream_value(0xBEEF, static_cast<uint64_t>(k)), n);
      counts[static_cast<size_t>(perm(x) * bins / n)] += 1;
    }
    expect_uniform(counts, "binned image of one point");
  }
  // Joint of the images of two adjacent points, binned 20 x 20.
  std::vector<double> joint(400, 0.0);
  for (int64_t k = 0; k < keys; ++k) {
    const Permutation perm(stream_value(0xFACE, static_cast<uint64_t>(k)), n);
    joint[static_cast<size_t>(perm(7) * 20 / n * 20 + perm(8) * 20 / n)] += 1;
  }
  expect_uniform(joint, "binned images of adjacent points");
}

// The exact small construction: all 120 permutations of 5 elements equally
// likely, and all 5040 of 7.
TEST(Randomness, SmallPermutationsAreUniform) {
  for (const int64_t n : {5, 7}) {
    int64_t cells = 1;
    for (int64_t i = 2; i <= n; ++i) cells *= i;
    const int64_t keys = cells * 200;
    std::vector<double> counts;
    std::vector<int64_t> codes(static_cast<size_t>(keys));
    // Lehmer code of the permutation -> its rank in [0, n!).
    std::vector<double> hist(static_cast<size_t>(cells), 0.0);
    for (int64_t k = 0; k < keys; ++k) {
      const Permutation perm(stream_value(0x5EED, static_cast<uint64_t>(k)), n);
      std::vector<int64_t> p(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = perm(i);
      int64_t rank = 0;
      for (int64_t i = 0; i < n; ++i) {
        int64_t smaller = 0;
        for (int64_t j = i + 1; j < n; ++j) smaller += p[static_cast<size_t>(j)] < p[static_cast<size_t>(i)];
        rank = rank * (n - i) + smaller;
      }
      hist[static_cast<size_t>(rank)] += 1;
    }
    expect_uniform(hist, "small permutations");
  }
}

// Adjacent seeds, offsets and rows give independent permutations: the joint
// of perm_a(0) and perm_b(0) over pairs of neighbouring keys is uniform.
TEST(Randomness, NeighbouringSeedsOffsetsAndRowsAreIndependent) {
  const int64_t n = 300;  // Feistel domain
  const int bins = 15;
  const int64_t pairs = 200000;
  auto joint_test = [&](auto key_pair, const char* what) {
    std::vector<double> joint(bins * bins, 0.0);
    for (int64_t i = 0; i < pairs; ++i) {
      const auto keys = key_pair(static_cast<uint64_t>(i));
      const int64_t a = Permutation(keys.first, n)(0) * bins / n;
      const int64_t b = Permutation(keys.second, n)(0) * bins / n;
      joint[static_cast<size_t>(a * bins + b)] += 1;
    }
    expect_uniform(joint, what);
  };
  auto key = [](uint64_t seed, uint64_t offset, uint64_t row) {
    return purpose_key(row_key(call_key(seed, offset), row), kPositivePermutation);
  };
  joint_test([&](uint64_t i) { return std::make_pair(key(i, 0, 0), key(i + 1, 0, 0)); },
             "adjacent seeds");
  joint_test([&](uint64_t i) { return std::make_pair(key(7, i, 0), key(7, i + 1, 0)); },
             "adjacent offsets");
  joint_test([&](uint64_t i) { return std::make_pair(key(9, 0, i), key(9, 0, i + 1)); },
             "adjacent rows");
  joint_test(
      [&](uint64_t i) {
        const uint64_t row = row_key(call_key(i, 0), 0);
        return std::make_pair(purpose_key(row, kPositivePermutation),
                              purpose_key(row, kNegativePermutation));
      },
      "the two class permutations of one row");
}
