// Standalone tests of the framework-free nms kernels (no torch): the GPU
// output must equal the CPU's core::nms_row, index for index. Skipped
// without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/nms.h"
#include "cuda/nms_kernels.h"
#include "harness.h"

using namespace syncfree;

namespace {

// One batch of rows in float (converted to the tested dtype on upload).
struct Batch {
  int64_t rows = 0, n = 0;
  std::vector<float> boxes;   // [rows, n, 4]
  std::vector<float> scores;  // [rows, n]
  std::vector<int64_t> ids;   // [rows, n] or empty
  std::vector<char> valid;    // [rows, n] or empty
};

Batch random_batch(std::mt19937_64& rng, int64_t rows, int64_t n, bool with_ids, bool with_valid,
                   bool ties) {
  Batch b;
  b.rows = rows;
  b.n = n;
  std::uniform_real_distribution<float> pos(0.f, 120.f), size(2.f, 40.f), jit(-0.12f, 0.12f),
      u(0.f, 1.f);
  const int clusters = 1 + static_cast<int>(n / 12);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> base(static_cast<size_t>(clusters) * 4);
    for (int c = 0; c < clusters; ++c) {
      base[c * 4] = pos(rng);
      base[c * 4 + 1] = pos(rng);
      base[c * 4 + 2] = base[c * 4] + size(rng);
      base[c * 4 + 3] = base[c * 4 + 1] + size(rng);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* c = &base[std::uniform_int_distribution<int>(0, clusters - 1)(rng) * 4];
      const float w = c[2] - c[0], h = c[3] - c[1];
      // Coordinates on a 1/8 grid: exact in float16 and bfloat16 below 32.
      for (int k = 0; k < 4; ++k) {
        const float v = c[k] + jit(rng) * (k % 2 ? h : w);
        b.boxes.push_back(std::round(v * 8.f) / 8.f);
      }
      float s = ties ? static_cast<float>(std::uniform_int_distribution<int>(0, 6)(rng))
                     : static_cast<float>(std::uniform_int_distribution<int>(0, 255)(rng));
      if (j % 17 == 5) s = std::numeric_limits<float>::quiet_NaN();
      b.scores.push_back(s);
      if (with_ids) b.ids.push_back(std::uniform_int_distribution<int>(0, 3)(rng) - 1);
      if (with_valid) b.valid.push_back(u(rng) < 0.85f);
    }
  }
  return b;
}

template <typename In>
In from_float(float v);
template <>
float from_float<float>(float v) { return v; }
template <>
double from_float<double>(float v) { return v; }
template <>
__half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename In>
float to_float(In v) { return static_cast<float>(v); }
template <>
float to_float<__half>(__half v) { return __half2float(v); }
template <>
float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// The CPU's algorithm on the values as the dtype holds them.
template <typename In, typename T>
std::vector<int64_t> reference(const Batch& b, const std::vector<In>& boxes,
                               const std::vector<In>& scores, double thr, int64_t max_output) {
  std::vector<int64_t> out(static_cast<size_t>(b.rows * max_output), -1);
  core::NmsWorkspace<T, int32_t> ws(b.n);
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t o = r * b.n;
    core::nms_row<T, int32_t>(
        b.n, [&](int64_t j) { return static_cast<T>(to_float(scores[o + j])); },
        [&](int64_t j, int c) { return static_cast<T>(to_float(boxes[(o + j) * 4 + c])); },
        [&](int64_t j) { return b.ids[o + j]; },
        [&](int64_t j) { return b.valid.empty() || b.valid[o + j] != 0; }, !b.ids.empty(),
        core::nms_threshold<T>(thr), max_output, ws, out.data() + r * max_output);
  }
  return out;
}

template <typename In, typename T>
void check_against_cpu(const Batch& b, cuda::NmsType type, double thr, int64_t max_output) {
  std::vector<In> boxes, scores;
  for (float v : b.boxes) boxes.push_back(from_float<In>(v));
  for (float v : b.scores) scores.push_back(from_float<In>(v));
  const std::vector<int64_t> want = reference<In, T>(b, boxes, scores, thr, max_output);

  const size_t items = static_cast<size_t>(b.rows * b.n);
  const size_t outs = static_cast<size_t>(b.rows * max_output);
  void *d_boxes = nullptr, *d_scores = nullptr, *d_work = nullptr;
  int64_t *d_ids = nullptr, *d_out = nullptr;
  bool *d_valid = nullptr, *d_ok = nullptr;
  CUDA_OK(cudaMalloc(&d_boxes, std::max<size_t>(items * 4 * sizeof(In), 1)));
  CUDA_OK(cudaMalloc(&d_scores, std::max<size_t>(items * sizeof(In), 1)));
  CUDA_OK(cudaMemcpy(d_boxes, boxes.data(), items * 4 * sizeof(In), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_scores, scores.data(), items * sizeof(In), cudaMemcpyHostToDevice));
  if (!b.ids.empty()) {
    CUDA_OK(cudaMalloc(&d_ids, std::max<size_t>(items * 8, 1)));
    CUDA_OK(cudaMemcpy(d_ids, b.ids.data(), items * 8, cudaMemcpyHostToDevice));
  }
  if (!b.valid.empty()) {
    CUDA_OK(cudaMalloc(&d_valid, std::max<size_t>(items, 1)));
    CUDA_OK(cudaMemcpy(d_valid, b.valid.data(), items, cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMalloc(&d_out, std::max<size_t>(outs * 8, 1)));
  CUDA_OK(cudaMalloc(&d_ok, std::max<size_t>(outs, 1)));
  // Poisoned outputs: every slot must be written.
  CUDA_OK(cudaMemset(d_out, 0x5A, std::max<size_t>(outs * 8, 1)));
  CUDA_OK(cudaMemset(d_ok, 0x5A, std::max<size_t>(outs, 1)));
  cuda::NmsArgs a;
  a.boxes = d_boxes;
  a.scores = d_scores;
  a.idxs = d_ids;
  a.valid = d_valid;
  a.type = type;
  a.rows = b.rows;
  a.n = b.n;
  a.max_output = max_output;
  a.iou_threshold = thr;
  a.indices = d_out;
  a.out_valid = d_ok;
  ASSERT_TRUE(cuda::nms_shape_supported(b.rows, b.n));
  const size_t ws = cuda::nms_workspace_bytes(a);
  CUDA_OK(cudaMalloc(&d_work, std::max<size_t>(ws, 1)));
  CUDA_OK(cudaMemset(d_work, 0x5A, std::max<size_t>(ws, 1)));  // poisoned workspace
  a.workspace = d_work;
  CUDA_OK(cuda::launch_nms(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int64_t> got(outs);
  std::vector<char> ok(outs);
  CUDA_OK(cudaMemcpy(got.data(), d_out, outs * 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(ok.data(), d_ok, outs, cudaMemcpyDeviceToHost));
  for (void* p : {d_boxes, d_scores, d_work, static_cast<void*>(d_ids), static_cast<void*>(d_out),
                  static_cast<void*>(d_valid), static_cast<void*>(d_ok)}) {
    if (p) CUDA_OK(cudaFree(p));
  }
  EXPECT_EQ(got, want) << "rows " << b.rows << " n " << b.n << " thr " << thr << " max_output "
                       << max_output;
  for (size_t s = 0; s < outs; ++s) EXPECT_EQ(ok[s] != 0, want[s] >= 0) << "slot " << s;
}

}  // namespace

TEST(NmsKernels, EqualCpuFloat32) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  for (int64_t n : {1, 2, 63, 64, 65, 128, 300, 1000, 4097}) {
    for (bool ids : {false, true}) {
      const Batch b = random_batch(rng, 3, n, ids, n % 2 == 1, n % 3 == 0);
      for (double thr : {0.0, 0.3, 0.7, 1.0, -0.5}) {
        for (int64_t m : {int64_t(1), int64_t(10), n, n + 3}) {
          check_against_cpu<float, float>(b, cuda::NmsType::kFloat32, thr, m);
        }
      }
    }
  }
}

TEST(NmsKernels, EqualCpuOtherDtypes) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(2);
  for (int64_t n : {17, 200, 700}) {
    const Batch b = random_batch(rng, 2, n, n > 100, true, n == 200);
    check_against_cpu<double, double>(b, cuda::NmsType::kFloat64, 0.5, n);
    check_against_cpu<__half, float>(b, cuda::NmsType::kFloat16, 0.5, n);
    check_against_cpu<__nv_bfloat16, float>(b, cuda::NmsType::kBFloat16, 0.5, 50);
  }
}

TEST(NmsKernels, EmptyRowsAndManyRows) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  check_against_cpu<float, float>(random_batch(rng, 4, 0, false, false, false),
                                  cuda::NmsType::kFloat32, 0.5, 5);
  check_against_cpu<float, float>(random_batch(rng, 300, 40, true, true, false),
                                  cuda::NmsType::kFloat32, 0.6, 12);
}

TEST(NmsKernels, ShapeLimits) {
  EXPECT_TRUE(cuda::nms_shape_supported(8, 10000));
  EXPECT_TRUE(cuda::nms_shape_supported(0, 0));
  EXPECT_FALSE(cuda::nms_shape_supported(1 << 16, 1 << 16));  // rows * n >= 2^31
  EXPECT_FALSE(cuda::nms_shape_supported(1, int64_t{65536} * 64 + 1));  // mask grid
  cuda::NmsArgs a;
  a.rows = 2;
  a.n = 100;
  const size_t without_ids = cuda::nms_workspace_bytes(a);
  int64_t dummy = 0;
  a.idxs = &dummy;
  EXPECT_GT(cuda::nms_workspace_bytes(a), without_ids);
  // The mask: 2 rows x 100 ranks x 2 words x 8 bytes at least.
  EXPECT_GE(without_ids, size_t{2 * 100 * 2 * 8});
}
