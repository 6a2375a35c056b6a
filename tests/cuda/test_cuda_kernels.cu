// Standalone tests of the framework-free CUDA kernels (no torch): the GPU
// output must equal the CPU core's, bit for bit. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/compact.h"
#include "core/host_sampler.h"
#include "cuda/sampler.h"

using namespace syncfree;

namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_GPU()                                                   \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: kernels compiled, not run"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// CPU reference: the core's serial algorithm (what the CPU backend computes).
template <typename T>
void reference(const std::vector<T>& labels, int64_t rows, int64_t n, const core::SampleParams& p,
               std::vector<int64_t>* indices, std::vector<char>* valid) {
  const size_t total = static_cast<size_t>(rows * p.num_samples);
  indices->assign(total, 0);
  std::unique_ptr<bool[]> ok(new bool[std::max<size_t>(total, 1)]);
  core::sample_rows_serial(labels.data(), rows, n, p, indices->data(), ok.get());
  valid->assign(ok.get(), ok.get() + total);
}

template <typename T>
void run_gpu(const std::vector<T>& labels, int64_t rows, int64_t n, const core::SampleParams& p,
             cuda::LabelType type, bool from_device, std::vector<int64_t>* indices,
             std::vector<char>* valid) {
  const int64_t k = p.num_samples;
  void *d_labels = nullptr, *d_work = nullptr;
  int64_t *d_indices = nullptr, *d_rng = nullptr;
  bool* d_valid = nullptr;
  const size_t ws = cuda::workspace_bytes(rows, n);
  CUDA_OK(cudaMalloc(&d_labels, std::max<size_t>(labels.size() * sizeof(T), 1)));
  CUDA_OK(cudaMalloc(&d_work, std::max<size_t>(ws, 1)));
  CUDA_OK(cudaMalloc(&d_indices, std::max<size_t>(static_cast<size_t>(rows * k) * 8, 1)));
  CUDA_OK(cudaMalloc(&d_valid, std::max<size_t>(static_cast<size_t>(rows * k), 1)));
  CUDA_OK(cudaMalloc(&d_rng, 2 * sizeof(int64_t)));
  CUDA_OK(cudaMemcpy(d_labels, labels.data(), labels.size() * sizeof(T), cudaMemcpyHostToDevice));
  cuda::SampleArgs a;
  a.labels = d_labels;
  a.label_type = type;
  a.rows = rows;
  a.n = n;
  a.params = p;
  if (from_device) {  // as inside a CUDA graph: seed and offset read on the device
    const int64_t host_rng[2] = {static_cast<int64_t>(p.seed), static_cast<int64_t>(p.offset) - 3};
    CUDA_OK(cudaMemcpy(d_rng, host_rng, sizeof(host_rng), cudaMemcpyHostToDevice));
    a.random.seed_ptr = d_rng;
    a.random.offset_ptr = d_rng + 1;
    a.random.offset_extra = 3;
  } else {
    a.random.seed = p.seed;
    a.random.offset = p.offset;
  }
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

template <typename T>
void check_equal(cuda::LabelType type, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t shapes[][2] = {{1, 1000}, {7, 300}, {3, 0}, {2, 3 * core::kChunk + 17},
                               {64, 129}, {1, 100000}, {5, 5}};
  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], n = shape[1];
    std::vector<T> labels(static_cast<size_t>(rows * n));
    for (auto& v : labels) v = static_cast<T>(static_cast<int64_t>(rng() % 4) - (std::is_signed<T>::value ? 1 : 0));
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, n / 10 + 1, n + 3}) {
      core::SampleParams p;
      p.num_samples = k;
      p.positive_fraction = (rng() % 5) / 4.0;
      p.negative_label = static_cast<int64_t>(rng() % 2);
      p.fill_positives = rng() % 2;
      p.seed = rng();
      p.offset = rng() % 1000 + 3;
      std::vector<int64_t> want, got;
      std::vector<char> want_valid, got_valid;
      reference(labels, rows, n, p, &want, &want_valid);
      for (bool from_device : {false, true}) {
        run_gpu(labels, rows, n, p, type, from_device, &got, &got_valid);
        ASSERT_EQ(got, want) << "rows=" << rows << " n=" << n << " k=" << k;
        ASSERT_EQ(got_valid, want_valid) << "rows=" << rows << " n=" << n << " k=" << k;
      }
    }
  }
}

}  // namespace

TEST(CudaKernels, Int64LabelsMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  check_equal<int64_t>(cuda::LabelType::kInt64, 1);
}

TEST(CudaKernels, EveryLabelTypeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_equal<int32_t>(cuda::LabelType::kInt32, 2);
  check_equal<int16_t>(cuda::LabelType::kInt16, 3);
  check_equal<int8_t>(cuda::LabelType::kInt8, 4);
  check_equal<uint8_t>(cuda::LabelType::kUInt8, 5);
}

TEST(CudaKernels, BoolLabelsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(6);
  const int64_t rows = 4, n = 70000;
  std::unique_ptr<bool[]> labels(new bool[rows * n]);
  for (int64_t i = 0; i < rows * n; ++i) labels[i] = rng() % 3 == 0;
  std::vector<uint8_t> as_bytes(labels.get(), labels.get() + rows * n);
  core::SampleParams p;
  p.num_samples = 5000;
  p.seed = 77;
  std::vector<int64_t> want, got;
  std::vector<char> want_valid, got_valid;
  // Bool and uint8 {0,1} labels with negative_label 0 classify identically.
  reference(as_bytes, rows, n, p, &want, &want_valid);
  run_gpu(as_bytes, rows, n, p, cuda::LabelType::kBool, false, &got, &got_valid);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_valid, want_valid);
}
