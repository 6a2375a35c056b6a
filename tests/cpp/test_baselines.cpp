// The benchmark's reference samplers return K unique indices with the right
// class counts on the benchmark's inputs (labels in {0, 1}).
#include <gtest/gtest.h>

#include <set>

#include "baselines.h"

using syncfree::baselines::Sample;

namespace {

void check_row(const at::Tensor& labels, const Sample& s, int64_t r, int64_t K, int64_t want_pos) {
  const at::Tensor idx = s.indices.dim() == 1 ? s.indices : s.indices[r];
  const at::Tensor row = labels.dim() == 1 ? labels : labels[r];
  const at::Tensor lab = s.labels.dim() == 1 ? s.labels : s.labels[r];
  ASSERT_EQ(idx.size(0), K);
  std::set<int64_t> seen;
  int64_t pos = 0;
  for (int64_t i = 0; i < K; ++i) {
    const int64_t j = idx[i].item<int64_t>();
    ASSERT_TRUE(j >= 0 && j < row.size(0));
    ASSERT_TRUE(seen.insert(j).second) << "duplicate index";
    ASSERT_EQ(lab[i].item<int64_t>(), row[j].item<int64_t>());
    pos += row[j].item<int64_t>() == 1;
  }
  EXPECT_EQ(pos, want_pos);
}

}  // namespace

TEST(Baselines, NaiveSingleRow) {
  at::manual_seed(1);
  const at::Tensor labels = at::randint(0, 2, {1000}, at::kLong);
  const at::Tensor features = at::randn({1000, 16});
  const Sample s = syncfree::baselines::naive_sample(features, labels, 100);
  check_row(labels, s, 0, 100, 50);
  EXPECT_TRUE(s.features.equal(features.index_select(0, s.indices)));
}

TEST(Baselines, NaiveFillsFromTheOtherClass) {
  at::Tensor labels = at::zeros({200}, at::kLong);
  labels.slice(0, 0, 10).fill_(1);  // 10 positives: 40 negatives fill in
  const Sample s = syncfree::baselines::naive_sample(at::randn({200, 16}), labels, 50);
  check_row(labels, s, 0, 50, 10);
}

TEST(Baselines, NaiveBatchedAndTopk) {
  at::manual_seed(2);
  const at::Tensor labels = at::randint(0, 2, {4, 500}, at::kLong);
  const at::Tensor features = at::randn({4, 500, 16});
  const Sample a = syncfree::baselines::naive_sample_batched(features, labels, 50);
  const Sample b = syncfree::baselines::topk_sample(features, labels, 50);
  ASSERT_EQ(a.features.sizes(), (std::vector<int64_t>{4, 50, 16}));
  ASSERT_EQ(b.features.sizes(), (std::vector<int64_t>{4, 50, 16}));
  for (int64_t r = 0; r < 4; ++r) {
    check_row(labels, a, r, 50, 25);
    check_row(labels, b, r, 50, 25);
  }
  EXPECT_TRUE(b.features[1][7].equal(features[1][b.indices[1][7].item<int64_t>()]));
}

TEST(Baselines, TopkFillsFromTheOtherClass) {
  at::Tensor labels = at::ones({300}, at::kLong);
  labels.slice(0, 0, 5).fill_(0);  // 5 negatives: positives fill in
  const Sample s = syncfree::baselines::topk_sample(at::randn({300, 16}), labels, 40);
  check_row(labels, s, 0, 40, 35);
}
