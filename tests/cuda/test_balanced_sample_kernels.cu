// Standalone tests of the framework-free balanced sampling kernels (no
// torch): the GPU output must equal the CPU core's, bit for bit. Skipped
// without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/host_sampler.h"
#include "core/label_compaction.h"
#include "cuda/balanced_sample_kernels.h"
#include "harness.h"

using namespace syncfree;

namespace {

// CPU reference: the core's serial algorithm (what the CPU backend computes).
template <typename T>
void reference(const std::vector<T>& labels, int64_t rows, int64_t n, const core::BalancedParams& p,
               std::vector<int64_t>* indices, std::vector<char>* valid) {
  const size_t total = static_cast<size_t>(rows * p.num_samples);
  indices->assign(total, 0);
  std::unique_ptr<bool[]> ok(new bool[std::max<size_t>(total, 1)]);
  core::sample_rows_serial(labels.data(), rows, n, p, indices->data(), ok.get());
  valid->assign(ok.get(), ok.get() + total);
}

template <typename T>
void run_gpu(const std::vector<T>& labels, int64_t rows, int64_t n, const core::BalancedParams& p,
             cuda::LabelType type, bool from_device, bool multi_launch,
             std::vector<int64_t>* indices, std::vector<char>* valid) {
  const int64_t k = p.num_samples;
  void *d_labels = nullptr, *d_work = nullptr;
  int64_t *d_indices = nullptr, *d_rng = nullptr;
  bool* d_valid = nullptr;
  cuda::BalancedSampleArgs a;
  a.label_type = type;
  a.rows = rows;
  a.n = n;
  a.params = p;
  a.force_multi_launch = multi_launch;
  const size_t ws = cuda::balanced_sample_workspace_bytes(a);
  CUDA_OK(cudaMalloc(&d_labels, std::max<size_t>(labels.size() * sizeof(T), 1)));
  CUDA_OK(cudaMalloc(&d_work, std::max<size_t>(ws, 1)));
  CUDA_OK(cudaMalloc(&d_indices, std::max<size_t>(static_cast<size_t>(rows * k) * 8, 1)));
  CUDA_OK(cudaMalloc(&d_valid, std::max<size_t>(static_cast<size_t>(rows * k), 1)));
  CUDA_OK(cudaMalloc(&d_rng, 2 * sizeof(int64_t)));
  CUDA_OK(cudaMemcpy(d_labels, labels.data(), labels.size() * sizeof(T), cudaMemcpyHostToDevice));
  // Poisoned outputs and workspace (cuda_test::poison_workspace): every
  // output must be written by the kernels.
  CUDA_OK(cudaMemset(d_indices, 0x5A, std::max<size_t>(static_cast<size_t>(rows * k) * 8, 1)));
  CUDA_OK(cudaMemset(d_valid, 0x5A, std::max<size_t>(static_cast<size_t>(rows * k), 1)));
  if (cuda_test::poison_workspace()) CUDA_OK(cudaMemset(d_work, 0x5A, std::max<size_t>(ws, 1)));
  a.labels = d_labels;
  CUDA_OK(cuda_test::set_random_source(p.seed, p.offset, from_device, d_rng, &a.random));
  a.indices = d_indices;
  a.valid = d_valid;
  a.workspace = d_work;
  CUDA_OK(cuda::launch_balanced_sample(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  indices->assign(static_cast<size_t>(rows * k), 0);
  std::vector<uint8_t> v(static_cast<size_t>(rows * k));
  CUDA_OK(cudaMemcpy(indices->data(), d_indices, indices->size() * 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(v.data(), d_valid, v.size(), cudaMemcpyDeviceToHost));
  valid->assign(v.begin(), v.end());
  for (void* ptr : {d_labels, d_work, static_cast<void*>(d_indices), static_cast<void*>(d_valid),
                    static_cast<void*>(d_rng)})
    CUDA_OK(cudaFree(ptr));
}

struct Shape {
  int64_t rows, n;
};

// Both sides of the one-launch limit, and of the chunk sizes (CPU and CUDA).
const std::vector<Shape> kShapes = {{1, 1000},
                                    {7, 300},
                                    {3, 0},
                                    {2, 3 * core::kChunk + 17},
                                    {64, 129},
                                    {1, 100000},
                                    {5, 5},
                                    {3, cuda::kOneLaunchMaxN},
                                    {2, cuda::kOneLaunchMaxN + 1},
                                    {2, core::kChunk},
                                    // Both sides of the three-launch path's chunk.
                                    {2, cuda::kCompactChunk},
                                    {2, cuda::kCompactChunk + 1},
                                    {1, 5 * cuda::kCompactChunk - 1},
                                    {300, 40}};  // several blocks of row plans

// One call of both paths and both random sources against the CPU.
template <typename T>
void check_call(const std::vector<T>& labels, int64_t rows, int64_t n, const core::BalancedParams& p,
                cuda::LabelType type) {
  std::vector<int64_t> want, got;
  std::vector<char> want_valid, got_valid;
  reference(labels, rows, n, p, &want, &want_valid);
  for (bool from_device : {false, true}) {
    for (bool multi_launch : {false, true}) {
      run_gpu(labels, rows, n, p, type, from_device, multi_launch, &got, &got_valid);
      ASSERT_EQ(got, want) << "rows=" << rows << " n=" << n << " k=" << p.num_samples
                           << " multi_launch=" << multi_launch << " from_device=" << from_device;
      ASSERT_EQ(got_valid, want_valid) << "rows=" << rows << " n=" << n << " k=" << p.num_samples
                                       << " multi_launch=" << multi_launch;
    }
  }
}

template <typename T>
void check_equal(cuda::LabelType type, uint64_t seed, const std::vector<Shape>& shapes = kShapes) {
  std::mt19937_64 rng(seed);
  for (const Shape& shape : shapes) {
    const int64_t rows = shape.rows, n = shape.n;
    std::vector<T> labels(static_cast<size_t>(rows * n));
    for (auto& v : labels) v = static_cast<T>(static_cast<int64_t>(rng() % 4) - (std::is_signed<T>::value ? 1 : 0));
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, n / 10 + 1, n + 3}) {
      core::BalancedParams p;
      p.num_samples = k;
      p.positive_fraction = (rng() % 5) / 4.0;
      p.negative_label = static_cast<int64_t>(rng() % 2);
      p.fill_positives = rng() % 2;
      p.seed = rng();
      p.offset = rng() % 1000 + 3;
      check_call(labels, rows, n, p, type);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace

TEST(BalancedSampleKernels, Int64LabelsMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  check_equal<int64_t>(cuda::LabelType::kInt64, 1);
}

TEST(BalancedSampleKernels, EveryLabelTypeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_equal<int32_t>(cuda::LabelType::kInt32, 2);
  check_equal<int16_t>(cuda::LabelType::kInt16, 3);
  check_equal<int8_t>(cuda::LabelType::kInt8, 4);
  check_equal<uint8_t>(cuda::LabelType::kUInt8, 5);
  check_equal<uint16_t>(cuda::LabelType::kUInt16, 6);
  check_equal<uint32_t>(cuda::LabelType::kUInt32, 7);
  check_equal<uint64_t>(cuda::LabelType::kUInt64, 8);
}

// The one-launch kernel sizes its block to the row (64 to 512 threads, from
// n / 16, min(n, 128) and k): both sides of every size change, the largest
// rows (two compaction rounds) and slot counts, the smallest rows; labels
// with few positives (small tabulated permutations beside Feistel ones), with
// positives only (a permutation of exactly n: both sides of powers of two),
// and mixed.
TEST(BalancedSampleKernels, EveryRowBlockSizeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(30);
  const int64_t rows = 3;
  const std::vector<int64_t> sizes = {1,    2,    31,   32,   33,   64,    65,   128, 129,
                                      1000, 1024, 1025, 2048, 2049, 8192, 8193, 16383,
                                      cuda::kOneLaunchMaxN};
  const std::vector<int64_t> slots = {0,  1,   2,   63,  64,  65,   96, 97,
                                      128, 129, 511, 512, 513, 4095, cuda::kOneLaunchMaxK};
  for (const int64_t n : sizes) {
    for (const int64_t k : slots) {
      for (int mix = 0; mix < 3; ++mix) {
        std::vector<int64_t> labels(static_cast<size_t>(rows * n));
        for (auto& v : labels) {
          const uint64_t u = rng() % 1000;
          if (mix == 0) v = u < 10 ? 1 : u < 900 ? 0 : -1;  // few positives
          if (mix == 1) v = 2;                               // positives only: P = n
          if (mix == 2) v = static_cast<int64_t>(u % 4) - 1;  // mixed
        }
        core::BalancedParams p;
        p.num_samples = k;
        p.positive_fraction = (rng() % 5) / 4.0;
        p.negative_label = 0;
        p.fill_positives = rng() % 2;
        p.seed = rng();
        p.offset = rng() % 1000 + 3;
        check_call(labels, rows, n, p, cuda::LabelType::kInt64);
        if (HasFatalFailure()) return;
      }
    }
  }
}

namespace {

__global__ void bits_for_kernel(const int64_t* n, int* bits, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) bits[i] = core::bits_for(n[i]);
}

}  // namespace

// The device computes bit lengths with __clzll, the host with a loop.
TEST(BalancedSampleKernels, BitLengthsMatchTheHost) {
  SKIP_WITHOUT_GPU();
  std::vector<int64_t> n;
  for (int b = 1; b < 63; ++b) {
    const int64_t p = int64_t{1} << b;
    for (int64_t d : {-1, 0, 1}) n.push_back(p + d);
  }
  n.push_back(INT64_MAX);
  std::vector<int> want(n.size()), got(n.size());
  for (size_t i = 0; i < n.size(); ++i) want[i] = core::bits_for(n[i]);
  int64_t* d_n = nullptr;
  int* d_bits = nullptr;
  CUDA_OK(cudaMalloc(&d_n, n.size() * sizeof(int64_t)));
  CUDA_OK(cudaMalloc(&d_bits, n.size() * sizeof(int)));
  CUDA_OK(cudaMemcpy(d_n, n.data(), n.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  bits_for_kernel<<<1, 256>>>(d_n, d_bits, static_cast<int>(n.size()));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(got.data(), d_bits, n.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_n));
  CUDA_OK(cudaFree(d_bits));
  EXPECT_EQ(got, want);
}

TEST(BalancedSampleKernels, BoolLabelsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(6);
  for (const int64_t n : {int64_t{70000}, int64_t{900}}) {  // both paths
    const int64_t rows = 4;
    std::vector<uint8_t> as_bytes(static_cast<size_t>(rows * n));
    for (auto& v : as_bytes) v = rng() % 3 == 0;
    core::BalancedParams p;
    p.num_samples = n / 14;
    p.seed = 77;
    std::vector<int64_t> want, got;
    std::vector<char> want_valid, got_valid;
    // Bool and uint8 {0,1} labels with negative_label 0 classify identically.
    reference(as_bytes, rows, n, p, &want, &want_valid);
    run_gpu(as_bytes, rows, n, p, cuda::LabelType::kBool, false, false, &got, &got_valid);
    EXPECT_EQ(got, want) << "n=" << n;
    EXPECT_EQ(got_valid, want_valid) << "n=" << n;
  }
}

// A small run of both sampling paths, for compute-sanitizer (memcheck,
// racecheck, initcheck, synccheck) in scripts/device-check.sh.
TEST(BalancedSampleKernels, SanitizerCase) {
  SKIP_WITHOUT_GPU();
  const cuda_test::UnpoisonedWorkspace fresh_workspace;
  // {16, 100}: all three permutations small, so all three shared tables in
  // use; {4, 33}: the smallest row blocks; {2, 8193}: two compaction rounds
  // in shared memory.
  check_equal<int32_t>(cuda::LabelType::kInt32, 20,
                       {{3, 1000}, {16, 100}, {4, 33}, {2, 8193}, {2, cuda::kOneLaunchMaxN + 1},
                        {2, 0}});
}
