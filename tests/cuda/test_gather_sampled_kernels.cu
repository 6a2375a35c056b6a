// Standalone tests of the framework-free gather kernel (no torch): the GPU
// output must equal a host loop, byte for byte. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/gather_sampled_kernels.h"
#include "harness.h"

using namespace syncfree;

namespace {

// The gather against a host loop: item_bytes of every width class (zero,
// odd, 2, 4, 8, 16-byte multiples), padded rows and items (strides larger
// than the data), labels of two types, invalid and out-of-range slots.
template <typename T>
void check_gather(cuda::LabelType type, int64_t item_bytes, int64_t item_pad, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t rows = 3, n = 50, k = 20;
  const int64_t item_stride = item_bytes + item_pad;
  const int64_t row_stride = n * item_stride + 16;
  std::vector<uint8_t> features(static_cast<size_t>(rows * row_stride));
  for (auto& b : features) b = static_cast<uint8_t>(rng());
  std::vector<T> labels(static_cast<size_t>(rows * n));
  for (auto& v : labels) v = static_cast<T>(rng() % 3);
  std::vector<int64_t> indices(static_cast<size_t>(rows * k));
  std::vector<uint8_t> valid(indices.size());
  for (size_t s = 0; s < indices.size(); ++s) {
    indices[s] = static_cast<int64_t>(rng() % (n + 4)) - 2;  // some outside [0, n)
    valid[s] = rng() % 4 != 0;
  }
  // Host reference.
  std::vector<uint8_t> want_features(static_cast<size_t>(rows * k * item_bytes), 0);
  std::vector<int64_t> want_labels(indices.size(), -1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t i = indices[r * k + s];
      if (!valid[r * k + s] || i < 0 || i >= n) continue;
      std::copy_n(features.begin() + r * row_stride + i * item_stride, item_bytes,
                  want_features.begin() + (r * k + s) * item_bytes);
      want_labels[r * k + s] = static_cast<int64_t>(labels[r * n + i]);
    }
  }
  void *d_features, *d_labels, *d_out;
  int64_t *d_indices, *d_out_labels;
  bool* d_valid;
  CUDA_OK(cudaMalloc(&d_features, features.size()));
  CUDA_OK(cudaMalloc(&d_labels, labels.size() * sizeof(T)));
  CUDA_OK(cudaMalloc(&d_indices, indices.size() * 8));
  CUDA_OK(cudaMalloc(&d_valid, valid.size()));
  CUDA_OK(cudaMalloc(&d_out, std::max<size_t>(want_features.size(), 1)));
  CUDA_OK(cudaMalloc(&d_out_labels, indices.size() * 8));
  CUDA_OK(cudaMemcpy(d_features, features.data(), features.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_labels, labels.data(), labels.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_indices, indices.data(), indices.size() * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_valid, valid.data(), valid.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_out, 0xA5, std::max<size_t>(want_features.size(), 1)));  // poison
  CUDA_OK(cudaMemset(d_out_labels, 0xA5, indices.size() * 8));
  cuda::GatherArgs a;
  a.features = d_features;
  a.feature_row_stride = row_stride;
  a.feature_item_stride = item_stride;
  a.item_bytes = item_bytes;
  a.labels = d_labels;
  a.label_type = type;
  a.label_row_stride = n;
  a.label_item_stride = 1;
  a.indices = d_indices;
  a.valid = d_valid;
  a.rows = rows;
  a.n = n;
  a.k = k;
  a.out_features = d_out;
  a.out_labels = d_out_labels;
  CUDA_OK(cuda::launch_gather_sampled(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got_features(want_features.size());
  std::vector<int64_t> got_labels(want_labels.size());
  CUDA_OK(cudaMemcpy(got_features.data(), d_out, got_features.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_labels.data(), d_out_labels, got_labels.size() * 8, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_features, want_features) << "item_bytes=" << item_bytes << " pad=" << item_pad;
  EXPECT_EQ(got_labels, want_labels) << "item_bytes=" << item_bytes << " pad=" << item_pad;
  for (void* ptr : {d_features, d_labels, static_cast<void*>(d_indices),
                    static_cast<void*>(d_valid), d_out, static_cast<void*>(d_out_labels)})
    CUDA_OK(cudaFree(ptr));
}

}  // namespace

TEST(GatherSampledKernels, MatchesAHostLoop) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 10;
  for (int64_t item_bytes : {0, 1, 3, 4, 6, 8, 12, 16, 64, 80}) {
    for (int64_t pad : {0, 4, 16}) {
      check_gather<int64_t>(cuda::LabelType::kInt64, item_bytes, pad, seed++);
      check_gather<int8_t>(cuda::LabelType::kInt8, item_bytes, pad, seed++);
    }
  }
}

// A small run of the gather, for compute-sanitizer (memcheck, racecheck,
// initcheck, synccheck) in scripts/device-check.sh.
TEST(GatherSampledKernels, SanitizerCase) {
  SKIP_WITHOUT_GPU();
  check_gather<int64_t>(cuda::LabelType::kInt64, 12, 4, 21);
  check_gather<int64_t>(cuda::LabelType::kInt64, 64, 0, 22);  // 16-byte units
}
