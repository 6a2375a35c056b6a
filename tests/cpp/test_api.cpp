// Tests of the C++ API (include/syncfree/syncfree.h) through the dispatcher.
#include <gtest/gtest.h>
#include <syncfree/syncfree.h>

#include <set>

TEST(Api, BalancedSampleMeetsTheContract) {
  at::Tensor labels = at::randint(-1, 3, {4, 300}, at::kLong);
  at::Tensor indices, valid;
  std::tie(indices, valid) =
      syncfree::balanced_sample(labels, 64, syncfree::SampleOptions().seed(3));
  ASSERT_EQ(indices.sizes(), (std::vector<int64_t>{4, 64}));
  ASSERT_EQ(indices.scalar_type(), at::kLong);
  ASSERT_EQ(valid.scalar_type(), at::kBool);
  for (int64_t r = 0; r < 4; ++r) {
    std::set<int64_t> seen;
    int64_t pos = 0, neg = 0;
    for (int64_t s = 0; s < 64; ++s) {
      ASSERT_TRUE(valid[r][s].item<bool>());
      const int64_t i = indices[r][s].item<int64_t>();
      ASSERT_TRUE(seen.insert(i).second);
      const int64_t l = labels[r][i].item<int64_t>();
      ASSERT_GE(l, 0);
      (l == 0 ? neg : pos) += 1;
    }
    EXPECT_EQ(pos, 32);
    EXPECT_EQ(neg, 32);
  }
  at::Tensor again;
  std::tie(again, std::ignore) =
      syncfree::balanced_sample(labels, 64, syncfree::SampleOptions().seed(3));
  EXPECT_TRUE(again.equal(indices));
}

TEST(Api, GeneratorDrawsAreReproducible) {
  at::Tensor labels = at::randint(0, 2, {1000}, at::kLong);
  auto gen = at::detail::createCPUGenerator(11);
  at::Tensor a = std::get<0>(syncfree::balanced_sample(labels, 100, syncfree::SampleOptions().generator(gen)));
  at::Tensor b = std::get<0>(syncfree::balanced_sample(labels, 100, syncfree::SampleOptions().generator(gen)));
  EXPECT_FALSE(a.equal(b));
  auto gen2 = at::detail::createCPUGenerator(11);
  at::Tensor c = std::get<0>(syncfree::balanced_sample(labels, 100, syncfree::SampleOptions().generator(gen2)));
  EXPECT_TRUE(a.equal(c));
}

TEST(Api, GatherReturnsFeaturesOfTheSampledIndices) {
  at::Tensor labels = at::tensor({1, 0, 0, -1, 1}, at::kLong);
  at::Tensor features = at::arange(10, at::kFloat).reshape({5, 2});
  auto out = syncfree::balanced_sample_gather(features, labels, 6,
                                              syncfree::SampleOptions().seed(1));
  at::Tensor indices = std::get<0>(syncfree::balanced_sample(labels, 6, syncfree::SampleOptions().seed(1)));
  const at::Tensor& feats = std::get<0>(out);
  const at::Tensor& labs = std::get<1>(out);
  const at::Tensor& valid = std::get<2>(out);
  ASSERT_EQ(feats.sizes(), (std::vector<int64_t>{6, 2}));
  for (int64_t s = 0; s < 6; ++s) {
    const int64_t i = indices[s].item<int64_t>();
    if (valid[s].item<bool>()) {
      EXPECT_TRUE(feats[s].equal(features[i]));
      EXPECT_EQ(labs[s].item<int64_t>(), labels[i].item<int64_t>());
    } else {
      EXPECT_EQ(i, -1);
      EXPECT_EQ(labs[s].item<int64_t>(), -1);
      EXPECT_EQ(feats[s].abs().sum().item<float>(), 0.0f);
    }
  }
  EXPECT_EQ(valid.sum().item<int64_t>(), 4);
}

TEST(Api, BadArgumentsNameTheArgument) {
  at::Tensor labels = at::zeros({10}, at::kLong);
  try {
    syncfree::balanced_sample(labels, -1);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_samples must be >= 0, got -1"), std::string::npos);
  }
  EXPECT_THROW(syncfree::balanced_sample(labels.to(at::kFloat), 2), c10::Error);
}

// The fused CPU gather and the generic ATen gather (used by backends without
// a kernel of their own) return the same tensors.
#include "ops/balanced_sample.h"

TEST(Api, FusedCpuGatherEqualsGenericGather) {
  at::manual_seed(4);
  for (const auto& dtype : {at::kFloat, at::kDouble, at::kHalf, at::kInt}) {
    const at::Tensor labels = at::randint(-1, 3, {3, 2, 40}, at::kLong).to(at::kChar);
    const at::Tensor features = at::randn({3, 2, 40, 2, 3}).mul(10).to(dtype);
    at::Tensor indices, valid;
    std::tie(indices, valid) = syncfree::balanced_sample(labels, 50, syncfree::SampleOptions().seed(5));
    auto fused = syncfree::ops::gather_sampled_cpu(features, labels, indices, valid);
    auto generic = syncfree::ops::gather_sampled_generic(features, labels, indices, valid);
    EXPECT_TRUE(std::get<0>(fused).equal(std::get<0>(generic)));
    EXPECT_TRUE(std::get<1>(fused).equal(std::get<1>(generic)));
    // Non-contiguous features and labels.
    const at::Tensor f2 = features.transpose(3, 4);
    const at::Tensor l2 = labels.transpose(0, 1).contiguous().transpose(0, 1);
    auto fused2 = syncfree::ops::gather_sampled_cpu(f2, l2, indices, valid);
    auto generic2 = syncfree::ops::gather_sampled_generic(f2, l2, indices, valid);
    EXPECT_TRUE(std::get<0>(fused2).equal(std::get<0>(generic2)));
    EXPECT_TRUE(std::get<1>(fused2).equal(std::get<1>(generic2)));
  }
}
