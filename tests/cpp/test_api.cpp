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

// The fused CPU gather (gather_sampled on CPU tensors) and the generic ATen
// gather (_gather_sampled on backends without a kernel of their own) return
// the same tensors.
#include "ops/gather_sampled.h"

TEST(Api, FusedCpuGatherEqualsGenericGather) {
  at::manual_seed(4);
  for (const auto& dtype : {at::kFloat, at::kDouble, at::kHalf, at::kInt}) {
    const at::Tensor labels = at::randint(-1, 3, {3, 2, 40}, at::kLong).to(at::kChar);
    const at::Tensor features = at::randn({3, 2, 40, 2, 3}).mul(10).to(dtype);
    at::Tensor indices, valid;
    std::tie(indices, valid) = syncfree::balanced_sample(labels, 50, syncfree::SampleOptions().seed(5));
    auto fused = syncfree::gather_sampled(features, labels, indices, valid);
    auto generic = syncfree::ops::gather_sampled_generic(features, labels, indices, valid);
    EXPECT_TRUE(std::get<0>(fused).equal(std::get<0>(generic)));
    EXPECT_TRUE(std::get<1>(fused).equal(std::get<1>(generic)));
    // Non-contiguous features and labels, with a last-dimension stride of 2.
    const at::Tensor f2 = features.transpose(3, 4);
    const at::Tensor l2 = at::stack({labels, labels.neg()}, -1).select(-1, 0);
    ASSERT_EQ(l2.stride(-1), 2);
    auto fused2 = syncfree::gather_sampled(f2, l2, indices, valid);
    auto generic2 = syncfree::ops::gather_sampled_generic(f2, l2, indices, valid);
    EXPECT_TRUE(std::get<0>(fused2).equal(std::get<0>(generic2)));
    EXPECT_TRUE(std::get<1>(fused2).equal(std::get<1>(generic2)));
  }
  // 1-d bool labels, and rows with no labels at all (every slot invalid).
  for (const int64_t n : {int64_t{0}, int64_t{30}}) {
    const at::Tensor labels = at::randint(0, 2, {n}, at::kLong).to(at::kBool);
    const at::Tensor features = at::randn({n, 4});
    at::Tensor indices, valid;
    std::tie(indices, valid) = syncfree::balanced_sample(labels, 8, syncfree::SampleOptions().seed(2));
    auto fused = syncfree::gather_sampled(features, labels, indices, valid);
    auto generic = syncfree::ops::gather_sampled_generic(features, labels, indices, valid);
    EXPECT_TRUE(std::get<0>(fused).equal(std::get<0>(generic)));
    EXPECT_TRUE(std::get<1>(fused).equal(std::get<1>(generic)));
    EXPECT_EQ(std::get<0>(generic).sizes(), at::IntArrayRef({8, 4}));
  }
}

// The CPU operator (parallel phases, any strides) returns what the core's
// serial reference returns; the CUDA kernels are tested against the same
// reference, which makes CPU and CUDA agree.
#include <memory>

#include "core/host_sampler.h"

TEST(Api, CpuOperatorEqualsSerialReference) {
  at::manual_seed(8);
  for (int64_t n : {int64_t{1}, int64_t{500}, int64_t{3} * 65536 + 9}) {
    const at::Tensor labels = at::randint(-1, 3, {3, n}, at::kLong);
    for (int64_t k : {int64_t{1}, n / 7 + 1, n + 2}) {
      syncfree::core::BalancedParams p;
      p.num_samples = k;
      p.positive_fraction = 0.4;
      p.seed = static_cast<uint64_t>(n * 31 + k);
      at::Tensor indices, valid;
      std::tie(indices, valid) = syncfree::balanced_sample(
          labels, k, syncfree::SampleOptions().positive_fraction(0.4).seed(static_cast<int64_t>(p.seed)));
      std::vector<int64_t> want(static_cast<size_t>(3 * k));
      std::unique_ptr<bool[]> want_valid(new bool[static_cast<size_t>(3 * k)]);
      syncfree::core::sample_rows_serial(labels.data_ptr<int64_t>(), 3, n, p, want.data(),
                                         want_valid.get());
      for (int64_t i = 0; i < 3 * k; ++i) {
        ASSERT_EQ(indices.data_ptr<int64_t>()[i], want[static_cast<size_t>(i)]);
        ASSERT_EQ(valid.data_ptr<bool>()[i], want_valid[static_cast<size_t>(i)]);
      }
    }
  }
}

// Many threads sampling at once from the default generator: no crash, every
// call draws its own state (no two calls return the same sample), and
// per-thread seeded generators reproduce a serial run.
#include <thread>

TEST(Api, ConcurrentCallsDrawDistinctSamples) {
  const at::Tensor labels = at::randint(0, 2, {2, 2000}, at::kLong);
  constexpr int kThreads = 8, kCalls = 40;
  std::vector<std::vector<at::Tensor>> out(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) out[t].push_back(std::get<0>(syncfree::balanced_sample(labels, 200)));
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::vector<int64_t>> seen;
  for (const auto& per_thread : out) {
    for (const at::Tensor& idx : per_thread) {
      ASSERT_EQ(idx.sizes(), (std::vector<int64_t>{2, 200}));
      std::vector<int64_t> v(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
      EXPECT_TRUE(seen.insert(v).second) << "two calls returned the same sample";
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kCalls));
}

TEST(Api, PerThreadGeneratorsAreReproducible) {
  const at::Tensor labels = at::randint(-1, 3, {3, 5000}, at::kLong);
  constexpr int kThreads = 6, kCalls = 10;
  auto run = [&](int t) {
    auto gen = at::detail::createCPUGenerator(1000 + t);
    std::vector<at::Tensor> r;
    for (int c = 0; c < kCalls; ++c)
      r.push_back(std::get<0>(syncfree::balanced_sample(labels, 300, syncfree::SampleOptions().generator(gen))));
    return r;
  };
  std::vector<std::vector<at::Tensor>> concurrent(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { concurrent[t] = run(t); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    const auto serial = run(t);
    for (int c = 0; c < kCalls; ++c) EXPECT_TRUE(serial[c].equal(concurrent[t][c]));
  }
}

// stratified_sample through the dispatcher: the CPU operator (parallel over
// rows, batched per class) against the core's slot-by-slot reference, the
// host-quota overload's checks, and the public gather.
#include "core/host_stratified.h"

TEST(Api, StratifiedCpuOperatorEqualsSerialReference) {
  at::manual_seed(9);
  for (int64_t C : {int64_t{1}, int64_t{3}, int64_t{200}}) {
    for (int64_t n : {int64_t{1}, int64_t{500}, int64_t{70000}}) {
      const int64_t rows = n > 1000 ? 4 : 40;  // enough rows to split over threads
      const at::Tensor labels = at::randint(-1, C + 2, {rows, n}, at::kInt);
      for (int64_t k : {int64_t{1}, n / 7 + 1, n + 2}) {
        const at::Tensor quota = at::randint(-1, k / 2 + 2, {rows, C}, at::kLong);
        for (bool fill : {false, true}) {
          syncfree::core::StratifiedParams p;
          p.num_samples = k;
          p.num_classes = C;
          p.fill = fill;
          p.seed = static_cast<uint64_t>(n * 31 + k + C);
          at::Tensor indices, valid;
          std::tie(indices, valid) = syncfree::stratified_sample(
              labels, k, quota,
              syncfree::StratifiedOptions().fill(fill).seed(static_cast<int64_t>(p.seed)));
          std::vector<int64_t> want(static_cast<size_t>(rows * k));
          std::unique_ptr<bool[]> want_valid(new bool[static_cast<size_t>(rows * k)]);
          syncfree::core::stratified_rows_serial(labels.data_ptr<int32_t>(), rows, n,
                                                 quota.data_ptr<int64_t>(), C, p, want.data(),
                                                 want_valid.get());
          for (int64_t i = 0; i < rows * k; ++i) {
            ASSERT_EQ(indices.data_ptr<int64_t>()[i], want[static_cast<size_t>(i)]);
            ASSERT_EQ(valid.data_ptr<bool>()[i], want_valid[static_cast<size_t>(i)]);
          }
        }
      }
    }
  }
}

TEST(Api, StratifiedHostQuotasAreChecked) {
  const at::Tensor labels = at::randint(0, 3, {4, 50}, at::kLong);
  auto message = [&](std::vector<int64_t> quota, int64_t k) -> std::string {
    try {
      syncfree::stratified_sample(labels, k, quota);
    } catch (const c10::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({2, -1}, 4).find("class_quota[1] must be >= 0, got -1"), std::string::npos);
  EXPECT_NE(message({3, 2}, 4).find("sum of class_quota must be <= num_samples (4)"),
            std::string::npos);
  EXPECT_NE(message({}, 4).find("at least one class"), std::string::npos);
  EXPECT_NE(message({1}, -1).find("num_samples must be >= 0, got -1"), std::string::npos);
  // Host and tensor quotas give the same sample.
  auto a = syncfree::stratified_sample(labels, 9, std::vector<int64_t>{2, 3, 1},
                                       syncfree::StratifiedOptions().seed(3));
  auto b = syncfree::stratified_sample(labels, 9, at::tensor(std::vector<int64_t>{2, 3, 1}),
                                       syncfree::StratifiedOptions().seed(3));
  EXPECT_TRUE(at::equal(std::get<0>(a), std::get<0>(b)));
}

TEST(Api, StratifiedGatherAndPublicGather) {
  const at::Tensor labels = at::randint(-1, 3, {2, 60}, at::kLong);
  const at::Tensor features = at::randn({2, 60, 4}).requires_grad_();
  at::Tensor feats, labs, valid;
  std::tie(feats, labs, valid) = syncfree::stratified_sample_gather(
      features, labels, 12, std::vector<int64_t>{4, 4, 4}, syncfree::StratifiedOptions().seed(5));
  at::Tensor indices, valid2;
  std::tie(indices, valid2) = syncfree::stratified_sample(
      labels, 12, std::vector<int64_t>{4, 4, 4}, syncfree::StratifiedOptions().seed(5));
  EXPECT_TRUE(at::equal(valid, valid2));
  at::Tensor feats2, labs2;
  std::tie(feats2, labs2) = syncfree::gather_sampled(features, labels, indices, valid2);
  EXPECT_TRUE(at::equal(feats, feats2));
  EXPECT_TRUE(at::equal(labs, labs2));
  feats.sum().backward();
  // Each valid slot adds 1 to its feature row: the gradient counts the picks.
  const at::Tensor picked = at::zeros({2, 60}).scatter_add_(
      1, indices.clamp_min(0), valid.to(at::kFloat));
  EXPECT_TRUE(at::equal(features.grad().select(2, 0), picked));
}

TEST(Api, CompactEqualsNonzeroPerRow) {
  const at::Tensor mask = at::rand({3, 70000}) < 0.2;
  const int64_t k = 5000;
  auto [indices, valid, count] = syncfree::compact(mask, k);
  ASSERT_EQ(indices.sizes(), (std::vector<int64_t>{3, k}));
  ASSERT_EQ(count.sizes(), (std::vector<int64_t>{3}));
  for (int64_t r = 0; r < 3; ++r) {
    const at::Tensor nz = at::nonzero(mask[r]).squeeze(1);
    const int64_t used = std::min<int64_t>(nz.size(0), k);
    EXPECT_EQ(count[r].item<int64_t>(), nz.size(0));
    EXPECT_TRUE(indices[r].slice(0, 0, used).equal(nz.slice(0, 0, used)));
    EXPECT_TRUE((indices[r].slice(0, used) == -1).all().item<bool>());
    EXPECT_EQ(valid[r].sum().item<int64_t>(), used);
  }
  EXPECT_THROW(syncfree::compact(mask, -1), c10::Error);
}

TEST(Api, NmsThroughTheDispatcher) {
  // Three boxes: 1 overlaps 0 (IoU 0.5), 2 is apart; box 3 has another id.
  const at::Tensor boxes = at::tensor({0.f, 0.f, 2.f, 1.f, 0.f, 0.f, 1.f, 1.f, 5.f, 5.f, 6.f, 6.f,
                                       0.f, 0.f, 1.f, 1.f})
                               .reshape({1, 4, 4})
                               .expand({2, 4, 4});
  const at::Tensor scores = at::tensor({0.9f, 0.8f, 0.7f, 0.6f}).expand({2, 4});
  at::Tensor indices, valid;
  std::tie(indices, valid) = syncfree::nms(boxes, scores, 0.4, 5);
  EXPECT_EQ(indices.sizes(), at::IntArrayRef({2, 5}));
  // 0 kept; 1 suppressed (IoU 0.5 > 0.4); 2 kept; 3 (IoU 0.5 with 0) suppressed.
  const at::Tensor want = at::tensor({0, 2, -1, -1, -1}, at::kLong).expand({2, 5});
  EXPECT_TRUE(at::equal(indices, want));
  EXPECT_TRUE(at::equal(valid, want.ge(0)));
  // With ids, box 3 is alone in its id and kept; invalid box 0 takes no part.
  const at::Tensor ids = at::tensor({0, 0, 0, 1}, at::kLong).expand({2, 4});
  const at::Tensor take = at::tensor({0, 1, 1, 1}, at::kLong).ne(0).expand({2, 4});
  std::tie(indices, valid) =
      syncfree::nms(boxes, scores, 0.4, 3, syncfree::NmsOptions().idxs(ids).valid(take));
  EXPECT_TRUE(at::equal(indices, at::tensor({1, 2, 3}, at::kLong).expand({2, 3})));
  EXPECT_THROW(syncfree::nms(boxes, scores, 0.4, -1), c10::Error);
}

TEST(Api, MultiScaleRoiAlignThroughTheDispatcher) {
  // Two levels of a 32x32 image (strides 4 and 8); each map holds its level
  // index plus 1 everywhere, so a pooled box reads which level it came from.
  const std::vector<at::Tensor> features{at::full({2, 3, 8, 8}, 1.f).requires_grad_(),
                                         at::full({2, 3, 4, 4}, 2.f).requires_grad_()};
  // LevelMapper (canonical 224 at level 4, levels 2..3): a 4x4 box goes to
  // level 2 (index 0), a 30x30 one too (log2(30 / 224) + 4 = 1.1, clamped);
  // canonical scale 16 at level 3 sends the 30x30 box to level 3 (index 1).
  const at::Tensor boxes =
      at::tensor({1.f, 1.f, 5.f, 5.f, 0.f, 0.f, 30.f, 30.f}).reshape({1, 2, 4}).expand({2, 2, 4});
  const at::Tensor valid = at::tensor({1, 1, 1, 0}, at::kLong).ne(0).reshape({2, 2});
  at::Tensor out = syncfree::multi_scale_roi_align(features, boxes, {2, 2}, {0.25, 0.125}, 2);
  EXPECT_EQ(out.sizes(), at::IntArrayRef({4, 3, 2, 2}));
  EXPECT_TRUE(at::equal(out, at::ones_like(out)));
  out = syncfree::multi_scale_roi_align(
      features, boxes, {2, 2}, {0.25, 0.125}, 2,
      syncfree::RoiAlignOptions().valid(valid).canonical_scale(16).canonical_level(3));
  const at::Tensor want =
      at::tensor({1.f, 2.f, 1.f, 0.f}).view({4, 1, 1, 1}).expand({4, 3, 2, 2});
  EXPECT_TRUE(at::equal(out, want));
  // Each pooled value is an average of weights summing to 1: the gradient of
  // the sum spreads 4 (bins) x 3 channels per pooled box over its level.
  out.sum().backward();
  EXPECT_FLOAT_EQ(features[0].grad().sum().item<float>(), 2 * 12.f);
  EXPECT_FLOAT_EQ(features[1].grad().sum().item<float>(), 12.f);
  EXPECT_THROW(syncfree::multi_scale_roi_align(features, boxes, {2, 2}, {0.25}, 2), c10::Error);
  EXPECT_THROW(syncfree::multi_scale_roi_align(features, boxes, {2, 2}, {0.25, 0.125}, 0),
               c10::Error);
}

