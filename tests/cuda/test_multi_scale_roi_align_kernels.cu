// Standalone tests of the framework-free multi_scale_roi_align kernels (no
// torch): the GPU forward must equal the host rule (core/roi_align.h, as the
// CPU kernel runs it) bit for bit; the backward, whose atomic additions come
// in any order, within float rounding of the host's ordered sums. Skipped
// without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/roi_align.h"
#include "cuda/multi_scale_roi_align_kernels.h"
#include "harness.h"

using namespace syncfree;

namespace {

template <typename T>
struct Problem {
  int64_t batch = 2, k = 37, channels = 5, ph = 7, pw = 5;
  int sampling_ratio = 2;
  bool aligned = false;
  std::vector<int64_t> heights{40, 20, 10}, widths{48, 24, 12};
  std::vector<double> scales{0.25, 0.125, 0.0625};
  std::vector<std::vector<T>> features;  // per level [B, C, H, W]
  std::vector<T> boxes;                  // [B * K, 4]
  std::vector<int64_t> level;            // [B * K]

  int64_t rois() const { return batch * k; }
  int64_t out_size() const { return rois() * channels * ph * pw; }
};

template <typename T>
Problem<T> make_problem(uint64_t seed, bool aligned, int sampling_ratio) {
  Problem<T> p;
  p.aligned = aligned;
  p.sampling_ratio = sampling_ratio;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> pos(-20.0, 200.0), size(0.0, 120.0);
  for (size_t l = 0; l < p.heights.size(); ++l) {
    std::vector<T> f(static_cast<size_t>(p.batch * p.channels * p.heights[l] * p.widths[l]));
    for (T& v : f) v = static_cast<T>(normal(rng));
    p.features.push_back(f);
  }
  for (int64_t r = 0; r < p.rois(); ++r) {
    const double x = pos(rng), y = pos(rng);
    p.boxes.push_back(static_cast<T>(x));
    p.boxes.push_back(static_cast<T>(y));
    p.boxes.push_back(static_cast<T>(x + size(rng)));
    p.boxes.push_back(static_cast<T>(y + size(rng)));
    // Levels -1 (not pooled) and 0..2; a few samples fall outside their map.
    p.level.push_back(static_cast<int64_t>(r % 5) - 1 > 2 ? 2 : static_cast<int64_t>(r % 5) - 1);
  }
  return p;
}

template <typename T>
core::RoiGeometry<T> host_geometry(const Problem<T>& p, int64_t r) {
  const T* b = &p.boxes[r * 4];
  return core::roi_geometry<T>(b[0], b[1], b[2], b[3],
                               static_cast<T>(p.scales[static_cast<size_t>(p.level[r])]),
                               static_cast<int>(p.ph), static_cast<int>(p.pw), p.sampling_ratio,
                               p.aligned);
}

// The host rule, as the CPU kernel runs it.
template <typename T>
std::vector<T> host_forward(const Problem<T>& p) {
  std::vector<T> out(static_cast<size_t>(p.out_size()), T(0));
  const int samples = p.sampling_ratio * p.sampling_ratio;
  std::vector<core::BilinearTap<T>> taps(static_cast<size_t>(p.ph * p.pw * samples));
  for (int64_t r = 0; r < p.rois(); ++r) {
    if (p.level[r] < 0) continue;
    const size_t l = static_cast<size_t>(p.level[r]);
    const core::RoiGeometry<T> g = host_geometry(p, r);
    core::roi_taps<T>(g, p.heights[l], p.widths[l], static_cast<int>(p.ph),
                      static_cast<int>(p.pw), taps.data());
    const int64_t plane = p.heights[l] * p.widths[l];
    for (int64_t c = 0; c < p.channels; ++c) {
      const T* src = p.features[l].data() + ((r / p.k) * p.channels + c) * plane;
      for (int64_t bin = 0; bin < p.ph * p.pw; ++bin) {
        out[static_cast<size_t>((r * p.channels + c) * p.ph * p.pw + bin)] =
            core::pool_bin<T, T>(taps.data() + bin * samples, samples, src, g.count);
      }
    }
  }
  return out;
}

// The host's addition (a functor callable from core's host-device code).
template <typename T>
struct HostAdd {
  T* dst;
  __host__ __device__ void operator()(int64_t pos, T v) const { dst[pos] += v; }
};

template <typename T>
std::vector<std::vector<T>> host_backward(const Problem<T>& p, const std::vector<T>& grad) {
  std::vector<std::vector<T>> acc;
  for (const auto& f : p.features) acc.emplace_back(f.size(), T(0));
  const int samples = p.sampling_ratio * p.sampling_ratio;
  std::vector<core::BilinearTap<T>> taps(static_cast<size_t>(p.ph * p.pw * samples));
  for (int64_t r = 0; r < p.rois(); ++r) {
    if (p.level[r] < 0) continue;
    const size_t l = static_cast<size_t>(p.level[r]);
    const core::RoiGeometry<T> g = host_geometry(p, r);
    core::roi_taps<T>(g, p.heights[l], p.widths[l], static_cast<int>(p.ph),
                      static_cast<int>(p.pw), taps.data());
    const int64_t plane = p.heights[l] * p.widths[l];
    const T count = static_cast<T>(g.grid_h * g.grid_w);
    for (int64_t c = 0; c < p.channels; ++c) {
      T* dst = acc[l].data() + ((r / p.k) * p.channels + c) * plane;
      for (int64_t bin = 0; bin < p.ph * p.pw; ++bin) {
        const T go = grad[static_cast<size_t>((r * p.channels + c) * p.ph * p.pw + bin)];
        for (int s = 0; s < samples; ++s) {
          core::scatter_tap<T>(taps[bin * samples + s], go, count, HostAdd<T>{dst});
        }
      }
    }
  }
  return acc;
}

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  if (cudaMalloc(&d, v.size() * sizeof(T) + 1) != cudaSuccess) return nullptr;
  cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <typename T>
cuda::RoiAlignArgs device_args(const Problem<T>& p, std::vector<void*>& owned) {
  cuda::RoiAlignArgs a;
  a.num_levels = static_cast<int>(p.heights.size());
  a.type = sizeof(T) == 8 ? cuda::RoiAlignType::kFloat64 : cuda::RoiAlignType::kFloat32;
  for (size_t l = 0; l < p.heights.size(); ++l) {
    T* f = upload(p.features[l]);
    owned.push_back(f);
    a.levels[l].features = f;
    a.levels[l].height = p.heights[l];
    a.levels[l].width = p.widths[l];
    a.levels[l].scale = p.scales[l];
  }
  T* boxes = upload(p.boxes);
  int64_t* level = upload(p.level);
  owned.push_back(boxes);
  owned.push_back(level);
  a.boxes = boxes;
  a.level = level;
  a.batch = p.batch;
  a.k = p.k;
  a.channels = p.channels;
  a.pooled_h = p.ph;
  a.pooled_w = p.pw;
  a.sampling_ratio = p.sampling_ratio;
  a.aligned = p.aligned;
  return a;
}

template <typename T>
void check_forward_and_backward(uint64_t seed, bool aligned, int sampling_ratio) {
  const Problem<T> p = make_problem<T>(seed, aligned, sampling_ratio);
  std::vector<void*> owned;
  cuda::RoiAlignArgs a = device_args(p, owned);
  // Forward: every element written (poisoned first), equal to the host bit for bit.
  std::vector<T> poison(static_cast<size_t>(p.out_size()), std::numeric_limits<T>::quiet_NaN());
  T* out = upload(poison);
  owned.push_back(out);
  a.out = out;
  CUDA_OK(cuda::launch_roi_align_forward(a, nullptr));
  std::vector<T> got(poison.size());
  CUDA_OK(cudaMemcpy(got.data(), out, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  const std::vector<T> want = host_forward(p);
  int64_t nonzero = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
        << "element " << i << ": got " << got[i] << ", want " << want[i];
    nonzero += want[i] != T(0);
  }
  EXPECT_GT(nonzero, static_cast<int64_t>(want.size() / 3));  // most boxes pooled something
  // Backward: within rounding of the host's ordered sums.
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> normal;
  std::vector<T> grad(want.size());
  for (T& v : grad) v = static_cast<T>(normal(rng));
  T* d_grad = upload(grad);
  owned.push_back(d_grad);
  a.grad_out = d_grad;
  std::vector<T*> d_acc;
  for (size_t l = 0; l < p.features.size(); ++l) {
    std::vector<T> zeros(p.features[l].size(), T(0));
    d_acc.push_back(upload(zeros));
    owned.push_back(d_acc.back());
    a.levels[l].grad = d_acc.back();
  }
  CUDA_OK(cuda::launch_roi_align_backward(a, nullptr));
  const auto want_grad = host_backward(p, grad);
  const double tol = sizeof(T) == 8 ? 1e-12 : 1e-5;
  for (size_t l = 0; l < want_grad.size(); ++l) {
    std::vector<T> g(want_grad[l].size());
    CUDA_OK(cudaMemcpy(g.data(), d_acc[l], g.size() * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(static_cast<double>(g[i]), static_cast<double>(want_grad[l][i]),
                  tol * (1.0 + std::fabs(static_cast<double>(want_grad[l][i]))))
          << "level " << l << ", element " << i;
    }
  }
  for (void* d : owned) cudaFree(d);
}

TEST(RoiAlignKernels, ForwardEqualsTheHostRuleAndBackwardIsClose) {
  SKIP_WITHOUT_GPU();
  check_forward_and_backward<float>(1, false, 2);
  check_forward_and_backward<float>(2, true, 1);
  check_forward_and_backward<float>(3, false, 3);
  check_forward_and_backward<double>(4, false, 2);
  check_forward_and_backward<double>(5, true, 2);
}

}  // namespace
