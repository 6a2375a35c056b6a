// Standalone tests of the framework-free compact kernels (no torch): the GPU
// output must equal the CPU core's (core/compact.h), on both launch
// paths, for every mask type, strides included. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "core/compact.h"
#include "cuda/compact_kernels.h"
#include "harness.h"

using namespace syncfree;

namespace {

struct Result {
  std::vector<int64_t> indices;
  std::vector<char> valid;
  std::vector<int64_t> count;
};

// rows x n elements, element (r, i) at data[r * row_stride + i * item_stride].
struct Mask {
  int64_t rows, n, row_stride, item_stride;
};

// Host copy of a mask (not std::vector: vector<bool> has no data()).
template <typename T>
struct HostData {
  std::unique_ptr<T[]> values;
  size_t size;
  const T* data() const { return values.get(); }
};

template <typename T>
Result reference(const HostData<T>& data, const Mask& m, int64_t k) {
  Result out;
  out.indices.assign(static_cast<size_t>(m.rows * k), 0);
  out.count.assign(static_cast<size_t>(m.rows), 0);
  std::unique_ptr<bool[]> ok(new bool[std::max<int64_t>(m.rows * k, 1)]);
  for (int64_t r = 0; r < m.rows; ++r) {
    out.count[r] = core::compact_mask_row(data.data() + r * m.row_stride, m.item_stride, m.n, k,
                                          out.indices.data() + r * k, ok.get() + r * k);
  }
  out.valid.assign(ok.get(), ok.get() + m.rows * k);
  return out;
}

template <typename T>
void run_gpu(const HostData<T>& data, const Mask& m, int64_t k, cuda::LabelType type,
             bool multi_launch, Result* out) {
  cuda::CompactArgs a;
  a.mask_type = type;
  a.row_stride = m.row_stride;
  a.item_stride = m.item_stride;
  a.rows = m.rows;
  a.n = m.n;
  a.k = k;
  a.force_multi_launch = multi_launch;
  const size_t slots = static_cast<size_t>(m.rows * k);
  const size_t ws = cuda::compact_workspace_bytes(a);
  void *d_mask = nullptr, *d_work = nullptr;
  int64_t *d_indices = nullptr, *d_count = nullptr;
  bool* d_valid = nullptr;
  CUDA_OK(cudaMalloc(&d_mask, std::max<size_t>(data.size * sizeof(T), 1)));
  CUDA_OK(cudaMalloc(&d_work, std::max<size_t>(ws, 1)));
  CUDA_OK(cudaMalloc(&d_indices, std::max<size_t>(slots * 8, 1)));
  CUDA_OK(cudaMalloc(&d_valid, std::max<size_t>(slots, 1)));
  CUDA_OK(cudaMalloc(&d_count, std::max<size_t>(static_cast<size_t>(m.rows) * 8, 1)));
  CUDA_OK(cudaMemcpy(d_mask, data.data(), data.size * sizeof(T), cudaMemcpyHostToDevice));
  // Poisoned outputs and workspace: every output must be written by the kernels.
  CUDA_OK(cudaMemset(d_indices, 0x5A, std::max<size_t>(slots * 8, 1)));
  CUDA_OK(cudaMemset(d_valid, 0x5A, std::max<size_t>(slots, 1)));
  CUDA_OK(cudaMemset(d_count, 0x5A, std::max<size_t>(static_cast<size_t>(m.rows) * 8, 1)));
  CUDA_OK(cudaMemset(d_work, 0x5A, std::max<size_t>(ws, 1)));
  a.mask = d_mask;
  a.indices = d_indices;
  a.valid = d_valid;
  a.count = d_count;
  a.workspace = d_work;
  CUDA_OK(cuda::launch_compact(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  out->indices.assign(slots, 0);
  out->count.assign(static_cast<size_t>(m.rows), 0);
  std::vector<uint8_t> v(slots);
  CUDA_OK(cudaMemcpy(out->indices.data(), d_indices, slots * 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(v.data(), d_valid, slots, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out->count.data(), d_count, out->count.size() * 8, cudaMemcpyDeviceToHost));
  out->valid.assign(v.begin(), v.end());
  for (void* ptr : {d_mask, d_work, static_cast<void*>(d_indices), static_cast<void*>(d_valid),
                    static_cast<void*>(d_count)})
    CUDA_OK(cudaFree(ptr));
}

// Elements true with probability `density`; integer masks hold assorted
// nonzero values for true.
template <typename T>
HostData<T> random_data(size_t size, double density, std::mt19937_64* rng) {
  std::bernoulli_distribution on(density);
  std::uniform_int_distribution<int> value(1, 100);
  HostData<T> data{std::unique_ptr<T[]>(new T[size]), size};
  for (size_t i = 0; i < size; ++i) {
    T& x = data.values[i];
    const bool t = on(*rng);
    if constexpr (std::is_same_v<T, bool>) {
      x = t;
    } else {
      const int v = value(*rng);
      x = t ? static_cast<T>(std::is_signed_v<T> && (v & 1) ? -v : v) : T(0);
    }
  }
  return data;
}

template <typename T>
void check_type(cuda::LabelType type) {
  std::mt19937_64 rng(17);
  struct Shape {
    int64_t rows, n;
  };
  // Both sides of the one-launch limit and of the chunk; several chunks; no rows.
  const std::vector<Shape> shapes = {{1, 1000},
                                     {7, 300},
                                     {3, 0},
                                     {0, 50},
                                     {64, 5},
                                     {2, cuda::kCompactChunkN},
                                     {2, cuda::kCompactChunkN + 1},
                                     {3, cuda::kCompactOneLaunchMaxN},
                                     {2, cuda::kCompactOneLaunchMaxN + 1},
                                     {1, 5 * cuda::kCompactChunkN - 1},
                                     {1, 200000}};
  for (const Shape& s : shapes) {
    for (const double density : {0.0, 0.01, 0.3, 1.0}) {
      for (const int64_t item_stride : {int64_t{1}, int64_t{3}}) {
        const Mask m{s.rows, s.n, s.n * item_stride + 5, item_stride};
        const HostData<T> data =
            random_data<T>(static_cast<size_t>(std::max<int64_t>(m.rows * m.row_stride, 1)),
                           density, &rng);
        for (const int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, s.n / 3 + 1, s.n, s.n + 9}) {
          const Result want = reference(data, m, k);
          for (const bool multi : {false, true}) {
            Result got;
            run_gpu(data, m, k, type, multi, &got);
            if (::testing::Test::HasFatalFailure()) return;
            EXPECT_EQ(got.indices, want.indices)
                << "rows " << s.rows << " n " << s.n << " k " << k << " density " << density
                << " stride " << item_stride << " multi " << multi;
            EXPECT_EQ(got.valid, want.valid) << "rows " << s.rows << " n " << s.n << " k " << k;
            EXPECT_EQ(got.count, want.count) << "rows " << s.rows << " n " << s.n << " k " << k;
          }
        }
      }
    }
  }
}

TEST(CompactKernels, BoolEqualsCpu) {
  SKIP_WITHOUT_GPU();
  check_type<bool>(cuda::LabelType::kBool);
}
TEST(CompactKernels, UInt8EqualsCpu) {
  SKIP_WITHOUT_GPU();
  check_type<uint8_t>(cuda::LabelType::kUInt8);
}
TEST(CompactKernels, Int8EqualsCpu) {
  SKIP_WITHOUT_GPU();
  check_type<int8_t>(cuda::LabelType::kInt8);
}
TEST(CompactKernels, Int16EqualsCpu) {
  SKIP_WITHOUT_GPU();
  check_type<int16_t>(cuda::LabelType::kInt16);
}
TEST(CompactKernels, Int32EqualsCpu) {
  SKIP_WITHOUT_GPU();
  check_type<int32_t>(cuda::LabelType::kInt32);
}
TEST(CompactKernels, Int64EqualsCpu) {
  SKIP_WITHOUT_GPU();
  check_type<int64_t>(cuda::LabelType::kInt64);
}

// A few calls on both launch paths, small enough for compute-sanitizer
// (the device check runs *SanitizerCase* under memcheck, racecheck,
// initcheck and synccheck).
TEST(CompactKernels, SanitizerCase) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  for (const Mask m : {Mask{5, 1000, 1000, 1}, Mask{3, 20000, 20000, 1}, Mask{2, 9000, 27001, 3}}) {
    const HostData<bool> data =
        random_data<bool>(static_cast<size_t>(m.rows * m.row_stride), 0.4, &rng);
    for (const int64_t k : {int64_t{0}, int64_t{100}, int64_t{30000}}) {
      const Result want = reference(data, m, k);
      for (const bool multi : {false, true}) {
        Result got;
        run_gpu(data, m, k, cuda::LabelType::kBool, multi, &got);
        if (::testing::Test::HasFatalFailure()) return;
        EXPECT_EQ(got.indices, want.indices) << m.n << " " << k << " " << multi;
        EXPECT_EQ(got.valid, want.valid);
        EXPECT_EQ(got.count, want.count);
      }
    }
  }
}

// Runs without a GPU: shape rules and workspace sizes are host code.
TEST(CompactKernels, WorkspaceAndShapeRules) {
  cuda::CompactArgs a;
  a.rows = 4;
  a.n = cuda::kCompactOneLaunchMaxN;
  EXPECT_EQ(cuda::compact_workspace_bytes(a), 0u);
  a.force_multi_launch = true;
  EXPECT_EQ(cuda::compact_workspace_bytes(a), 4u * 2 * sizeof(int64_t));
  a.force_multi_launch = false;
  a.n = cuda::kCompactOneLaunchMaxN + 1;
  EXPECT_EQ(cuda::compact_workspace_bytes(a), 4u * 3 * sizeof(int64_t));
  a.n = 0;
  a.force_multi_launch = true;
  EXPECT_EQ(cuda::compact_workspace_bytes(a), 0u);
  EXPECT_TRUE(cuda::compact_shape_supported(0x7FFFFFFF, 0));
  EXPECT_TRUE(cuda::compact_shape_supported(0x7FFFFFFF, cuda::kCompactChunkN));
  EXPECT_FALSE(cuda::compact_shape_supported(0x7FFFFFFF, cuda::kCompactChunkN + 1));
}

}  // namespace
