// Standalone tests of the framework-free stratified sampling kernels (no
// torch): the GPU output must equal the CPU core's serial reference
// (core::stratified_rows_serial, slot by slot with pick_stratified_slot),
// bit for bit. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "core/host_stratified.h"
#include "core/stratified.h"
#include "cuda/stratified_sample_kernels.h"
#include "harness.h"

using namespace syncfree;

namespace {

// Labels of one call, as the bytes the kernels read (bool labels: 0 or 1).
template <typename T>
using Storage = typename std::conditional<std::is_same<T, bool>::value, uint8_t, T>::type;

template <typename T>
void reference(const std::vector<Storage<T>>& labels, int64_t rows, int64_t n,
               const std::vector<int64_t>& quota, int64_t quota_row_stride,
               const core::StratifiedParams& p, std::vector<int64_t>* indices,
               std::vector<char>* valid) {
  const size_t total = static_cast<size_t>(rows * p.num_samples);
  indices->assign(total, 0);
  std::unique_ptr<bool[]> ok(new bool[std::max<size_t>(total, 1)]);
  core::stratified_rows_serial(reinterpret_cast<const T*>(labels.data()), rows, n, quota.data(),
                               quota_row_stride, p, indices->data(), ok.get());
  valid->assign(ok.get(), ok.get() + total);
}

template <typename T>
void run_gpu(const std::vector<Storage<T>>& labels, int64_t rows, int64_t n,
             const std::vector<int64_t>& quota, int64_t quota_row_stride,
             const core::StratifiedParams& p, cuda::LabelType type, bool from_device,
             std::vector<int64_t>* indices, std::vector<char>* valid) {
  const int64_t k = p.num_samples;
  const size_t out = static_cast<size_t>(rows * k);
  void *d_labels = nullptr, *d_work = nullptr;
  int64_t *d_quota = nullptr, *d_indices = nullptr, *d_rng = nullptr;
  bool* d_valid = nullptr;
  cuda::StratifiedArgs a;
  a.label_type = type;
  a.rows = rows;
  a.n = n;
  a.quota_row_stride = quota_row_stride;
  a.params = p;
  ASSERT_TRUE(cuda::stratified_shape_supported(rows, n, p.num_classes));
  const size_t ws = cuda::stratified_workspace_bytes(a);
  const size_t label_bytes = labels.size() * sizeof(Storage<T>);
  CUDA_OK(cudaMalloc(&d_labels, std::max<size_t>(label_bytes, 1)));
  CUDA_OK(cudaMalloc(&d_quota, quota.size() * sizeof(int64_t)));
  CUDA_OK(cudaMalloc(&d_work, std::max<size_t>(ws, 1)));
  CUDA_OK(cudaMalloc(&d_indices, std::max<size_t>(out * 8, 1)));
  CUDA_OK(cudaMalloc(&d_valid, std::max<size_t>(out, 1)));
  CUDA_OK(cudaMalloc(&d_rng, 2 * sizeof(int64_t)));
  CUDA_OK(cudaMemcpy(d_labels, labels.data(), label_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_quota, quota.data(), quota.size() * sizeof(int64_t),
                     cudaMemcpyHostToDevice));
  // Poisoned outputs and workspace (cuda_test::poison_workspace): the kernels must write every
  // output and initialize every workspace word they read.
  CUDA_OK(cudaMemset(d_indices, 0x5A, std::max<size_t>(out * 8, 1)));
  CUDA_OK(cudaMemset(d_valid, 0x5A, std::max<size_t>(out, 1)));
  if (cuda_test::poison_workspace()) CUDA_OK(cudaMemset(d_work, 0x5A, std::max<size_t>(ws, 1)));
  a.labels = d_labels;
  a.quota = d_quota;
  CUDA_OK(cuda_test::set_random_source(p.seed, p.offset, from_device, d_rng, &a.random));
  a.indices = d_indices;
  a.valid = d_valid;
  a.workspace = d_work;
  CUDA_OK(cuda::launch_stratified_sample(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  indices->assign(out, 0);
  std::vector<uint8_t> v(out);
  CUDA_OK(cudaMemcpy(indices->data(), d_indices, out * 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(v.data(), d_valid, out, cudaMemcpyDeviceToHost));
  valid->assign(v.begin(), v.end());
  for (void* ptr : {d_labels, d_work, static_cast<void*>(d_quota), static_cast<void*>(d_indices),
                    static_cast<void*>(d_valid), static_cast<void*>(d_rng)})
    CUDA_OK(cudaFree(ptr));
}

template <typename T>
void check_call(const std::vector<Storage<T>>& labels, int64_t rows, int64_t n,
                const std::vector<int64_t>& quota, int64_t quota_row_stride,
                const core::StratifiedParams& p, cuda::LabelType type, bool both_sources) {
  std::vector<int64_t> want, got;
  std::vector<char> want_valid, got_valid;
  reference<T>(labels, rows, n, quota, quota_row_stride, p, &want, &want_valid);
  for (bool from_device : {false, true}) {
    if (from_device && !both_sources) break;
    run_gpu<T>(labels, rows, n, quota, quota_row_stride, p, type, from_device, &got, &got_valid);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(got, want) << "rows=" << rows << " n=" << n << " C=" << p.num_classes
                         << " k=" << p.num_samples << " fill=" << p.fill
                         << " quota_row_stride=" << quota_row_stride
                         << " from_device=" << from_device;
    ASSERT_EQ(got_valid, want_valid) << "rows=" << rows << " n=" << n << " C=" << p.num_classes
                                     << " k=" << p.num_samples << " fill=" << p.fill;
  }
}

// Labels in [-2, C + 2) (wrapped to T), half of each row in a few classes
// (long runs of one class across sort tiles) or in class 0.
template <typename T>
std::vector<Storage<T>> make_labels(int64_t rows, int64_t n, int64_t C, std::mt19937_64& rng) {
  std::vector<Storage<T>> labels(static_cast<size_t>(rows * n));
  for (auto& v : labels) {
    if (std::is_same<T, bool>::value) {
      v = static_cast<Storage<T>>(rng() % 2);
      continue;
    }
    const uint64_t u = rng();
    int64_t label = static_cast<int64_t>(u % static_cast<uint64_t>(C + 4)) - 2;
    if ((u >> 40) % 2 == 0) label = static_cast<int64_t>((u >> 41) % 3) % C;
    if (std::is_unsigned<T>::value && label < 0) label += 256;
    v = static_cast<Storage<T>>(label);
  }
  return labels;
}

// Quotas: one shared row or one row per row of labels, from negative to
// oversize (a row's quotas may add up to more than k).
std::vector<int64_t> make_quota(int64_t rows, int64_t C, int64_t k, bool per_row,
                                std::mt19937_64& rng) {
  std::vector<int64_t> quota(static_cast<size_t>((per_row ? rows : 1) * C));
  const int64_t typical = k / C + 2;
  for (auto& q : quota) {
    const uint64_t u = rng() % 8;
    if (u == 0) {
      q = -static_cast<int64_t>(rng() % 3) - 1;           // negative: takes nothing
    } else if (u == 1) {
      q = k + static_cast<int64_t>(rng() % 5);             // oversize
    } else {
      q = static_cast<int64_t>(rng() % static_cast<uint64_t>(typical + 1));
    }
  }
  return quota;
}

template <typename T>
void check_shapes(cuda::LabelType type, uint64_t seed, const std::vector<int64_t>& classes,
                  const std::vector<int64_t>& sizes, const std::vector<int64_t>& slots,
                  bool both_sources) {
  std::mt19937_64 rng(seed);
  for (const int64_t C : classes) {
    for (const int64_t n : sizes) {
      const int64_t rows = n >= 16384 ? 2 : 3;
      const std::vector<Storage<T>> labels = make_labels<T>(rows, n, C, rng);
      std::vector<int64_t> ks = slots;
      ks.push_back(n + 3);  // K > N
      for (const int64_t k : ks) {
        for (bool fill : {false, true}) {
          for (bool per_row : {false, true}) {
            core::StratifiedParams p;
            p.num_samples = k;
            p.num_classes = C;
            p.fill = fill;
            p.seed = rng();
            p.offset = rng() % 1000 + 3;
            const std::vector<int64_t> quota = make_quota(rows, C, k, per_row, rng);
            check_call<T>(labels, rows, n, quota, per_row ? C : 0, p, type, both_sources);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

}  // namespace

// Every class count of the brief (one class; two; a few; many: the plan's
// shared and global paths), every row length (empty, one label, one and
// several sort tiles, several count tiles), every slot count, K > N, fill
// on and off, shared and per-row quotas with negative and oversize values.
TEST(CudaStratified, Int64LabelsMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  check_shapes<int64_t>(cuda::LabelType::kInt64, 1, {1, 2, 3, 21, 150, 3000},
                        {0, 1, 100, 16384, 70000}, {0, 1, 7, 512}, true);
}

// More classes than the count kernel's shared histogram holds (global
// atomics), and rows on both sides of a sort tile.
TEST(CudaStratified, ManyClassesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  check_shapes<int32_t>(cuda::LabelType::kInt32, 2,
                        {cuda::kSharedPlanClasses, cuda::kSharedPlanClasses + 1,
                         cuda::kSharedCountClasses, cuda::kSharedCountClasses + 1, 20000},
                        {cuda::kSortTile - 1, cuda::kSortTile, cuda::kSortTile + 1, 9000},
                        {1, 300, 5000}, false);
}

TEST(CudaStratified, EveryLabelTypeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<int64_t> classes = {1, 2, 3, 21, 300};
  const std::vector<int64_t> sizes = {1, 100, 5000};
  const std::vector<int64_t> slots = {0, 1, 7, 512};
  check_shapes<int32_t>(cuda::LabelType::kInt32, 3, classes, sizes, slots, false);
  check_shapes<int16_t>(cuda::LabelType::kInt16, 4, classes, sizes, slots, false);
  check_shapes<int8_t>(cuda::LabelType::kInt8, 5, classes, sizes, slots, false);
  check_shapes<uint8_t>(cuda::LabelType::kUInt8, 6, classes, sizes, slots, false);
  check_shapes<uint16_t>(cuda::LabelType::kUInt16, 8, classes, sizes, slots, false);
  check_shapes<uint32_t>(cuda::LabelType::kUInt32, 9, classes, sizes, slots, false);
  check_shapes<uint64_t>(cuda::LabelType::kUInt64, 10, classes, sizes, slots, false);
  check_shapes<bool>(cuda::LabelType::kBool, 7, {1, 2, 3}, sizes, slots, true);
}

// Many rows (several plan and sort blocks at once) with per-row quotas.
TEST(CudaStratified, ManyRowsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(8);
  const int64_t rows = 300, n = 700, C = 5;
  const std::vector<Storage<int64_t>> labels = make_labels<int64_t>(rows, n, C, rng);
  for (const int64_t k : {int64_t{1}, int64_t{64}, int64_t{701}}) {
    core::StratifiedParams p;
    p.num_samples = k;
    p.num_classes = C;
    p.fill = k != 64;
    p.seed = rng();
    const std::vector<int64_t> quota = make_quota(rows, C, k, true, rng);
    check_call<int64_t>(labels, rows, n, quota, C, p, cuda::LabelType::kInt64, true);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaStratified, ShapeLimits) {
  EXPECT_TRUE(cuda::stratified_shape_supported(0, 0, 1));
  EXPECT_TRUE(cuda::stratified_shape_supported(3, 70000, 3000));
  EXPECT_FALSE(cuda::stratified_shape_supported(int64_t{1} << 31, 1, 1));  // one block per row
  EXPECT_FALSE(cuda::stratified_shape_supported(1, 1, 0x7FFFFFFF));        // 32-bit sort keys
  EXPECT_FALSE(cuda::stratified_shape_supported(int64_t{1} << 30, int64_t{1} << 20, 2));
  cuda::StratifiedArgs a;
  a.rows = 3;
  a.n = 100;
  a.params.num_classes = 7;
  const size_t small = cuda::stratified_workspace_bytes(a);
  a.n = 200;
  EXPECT_GT(cuda::stratified_workspace_bytes(a), small);  // shapes only: O(N + C) per row
}

// A small run of every kernel path (shared and global histograms, shared
// and global plans, one and several sort tiles) for compute-sanitizer
// (memcheck, racecheck, initcheck).
TEST(CudaStratified, SanitizerCase) {
  SKIP_WITHOUT_GPU();
  const cuda_test::UnpoisonedWorkspace fresh_workspace;
  check_shapes<int32_t>(cuda::LabelType::kInt32, 20,
                        {3, cuda::kSharedPlanClasses + 1, cuda::kSharedCountClasses + 1},
                        {0, 100, cuda::kSortTile + 5}, {7, 300}, true);
}
