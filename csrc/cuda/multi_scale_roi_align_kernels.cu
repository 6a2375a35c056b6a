// CUDA kernels of multi_scale_roi_align (framework-free: no torch header).
// Compiled with --fmad=false (CMakeLists.txt): core/roi_align.h's operations
// each rounded once, as on the CPU.
#include "cuda/multi_scale_roi_align_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/roi_align.h"

namespace syncfree {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }

template <typename In>
__device__ __forceinline__ In from_compute(float v);
template <>
__device__ __forceinline__ __half from_compute<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ float from_compute<float>(float v) { return v; }

template <typename In>
struct Compute {
  using type = float;
};
template <>
struct Compute<double> {
  using type = double;
};

template <typename In>
__device__ __forceinline__ In store(typename Compute<In>::type v) {
  return from_compute<In>(v);
}
template <>
__device__ __forceinline__ double store<double>(double v) { return v; }

// Element (r, c, ph, pw) of the output, its box's geometry on its level.
template <typename T>
struct Element {
  int64_t r, c, ph, pw;
  int level;
  core::RoiGeometry<T> g;
};

template <typename T>
__device__ __forceinline__ bool element_at(const RoiAlignArgs& a, int64_t i, Element<T>& e) {
  e.pw = i % a.pooled_w;
  e.ph = (i / a.pooled_w) % a.pooled_h;
  e.c = (i / (a.pooled_w * a.pooled_h)) % a.channels;
  e.r = i / (a.pooled_w * a.pooled_h * a.channels);
  const int64_t level = a.level[e.r];
  if (level < 0 || level >= a.num_levels) return false;
  e.level = static_cast<int>(level);
  const RoiAlignLevel& lv = a.levels[e.level];
  if (lv.height == 0 || lv.width == 0) return false;
  const T* box = static_cast<const T*>(a.boxes) + e.r * 4;
  e.g = core::roi_geometry<T>(box[0], box[1], box[2], box[3], static_cast<T>(lv.scale),
                              static_cast<int>(a.pooled_h), static_cast<int>(a.pooled_w),
                              a.sampling_ratio, a.aligned);
  return true;
}

template <typename In>
__global__ void forward_kernel(RoiAlignArgs a, int64_t total) {
  using T = typename Compute<In>::type;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    Element<T> e;
    T value = 0;
    if (element_at<T>(a, i, e)) {
      const RoiAlignLevel& lv = a.levels[e.level];
      const In* plane = static_cast<const In*>(lv.features) +
                        ((e.r / a.k) * a.channels + e.c) * lv.height * lv.width;
      for (int iy = 0; iy < e.g.grid_h; ++iy) {
        const T y = core::roi_sample_y(e.g, static_cast<int>(e.ph), iy);
        for (int ix = 0; ix < e.g.grid_w; ++ix) {
          value += core::tap_value<T, In>(
              core::bilinear_tap<T>(lv.height, lv.width, y,
                                    core::roi_sample_x(e.g, static_cast<int>(e.pw), ix)),
              plane);
        }
      }
      value /= e.g.count;
    }
    static_cast<In*>(a.out)[i] = store<In>(value);
  }
}

template <typename In>
__global__ void backward_kernel(RoiAlignArgs a, int64_t total) {
  using T = typename Compute<In>::type;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    Element<T> e;
    if (!element_at<T>(a, i, e)) continue;
    const RoiAlignLevel& lv = a.levels[e.level];
    T* dst = static_cast<T*>(lv.grad) + ((e.r / a.k) * a.channels + e.c) * lv.height * lv.width;
    const T go = to_compute(static_cast<const In*>(a.grad_out)[i]);
    const T count = static_cast<T>(e.g.grid_h * e.g.grid_w);
    const auto add = [dst](int64_t pos, T v) { atomicAdd(dst + pos, v); };
    for (int iy = 0; iy < e.g.grid_h; ++iy) {
      const T y = core::roi_sample_y(e.g, static_cast<int>(e.ph), iy);
      for (int ix = 0; ix < e.g.grid_w; ++ix) {
        core::scatter_tap<T>(core::bilinear_tap<T>(lv.height, lv.width, y,
                                                   core::roi_sample_x(e.g, static_cast<int>(e.pw), ix)),
                             go, count, add);
      }
    }
  }
}

template <typename F>
cudaError_t with_type(RoiAlignType type, const F& f) {
  switch (type) {
    case RoiAlignType::kFloat16: return f(__half{});
    case RoiAlignType::kBFloat16: return f(__nv_bfloat16{});
    case RoiAlignType::kFloat32: return f(float{});
    case RoiAlignType::kFloat64: return f(double{});
  }
  return cudaErrorInvalidValue;
}

int64_t total_of(const RoiAlignArgs& a) { return a.batch * a.k * a.channels * a.pooled_h * a.pooled_w; }

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(kMaxBlocks, (total + kThreads - 1) / kThreads)));
}

}  // namespace

cudaError_t launch_roi_align_forward(const RoiAlignArgs& args, cudaStream_t stream) {
  const int64_t total = total_of(args);
  if (total == 0) return cudaSuccess;
  return with_type(args.type, [&](auto tag) {
    using In = decltype(tag);
    forward_kernel<In><<<blocks_for(total), kThreads, 0, stream>>>(args, total);
    return cudaGetLastError();
  });
}

cudaError_t launch_roi_align_backward(const RoiAlignArgs& args, cudaStream_t stream) {
  const int64_t total = total_of(args);
  if (total == 0) return cudaSuccess;
  return with_type(args.type, [&](auto tag) {
    using In = decltype(tag);
    backward_kernel<In><<<blocks_for(total), kThreads, 0, stream>>>(args, total);
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace syncfree
