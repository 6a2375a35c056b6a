// csrc/cuda: the CUDA backend.
//   <op>_kernels.{h,cu}  framework-free kernels and their launchers (plain
//                        pointers, a plain argument struct, a stream; no torch
//                        header), tested on their own by tests/cuda/.
//   <op>_cuda.cpp        the op's torch adapter: checks (ops/<op>.h), device
//                        guard, allocation, generator draw, launch; registers
//                        the op's CUDA kernels (TORCH_LIBRARY_IMPL(syncfree, CUDA)).
//   common.h             (this file) what every op's launchers share (and,
//                        for nvcc, the device helpers: warp_sum, the warp and
//                        block scans).
//   adapter.h            what every op's torch adapter shares.
// A new op adds <op>_kernels.{h,cu} and <op>_cuda.cpp (and lists them in
// CMakeLists.txt); another GPU backend gets a folder of its own beside this one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace syncfree {
namespace cuda {

// The label dtypes the kernels read (ops/common.h lists the same set).
enum class LabelType { kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kUInt16, kUInt32, kUInt64 };

// f(T{}) for the C++ type T of a label type: the kernels' dtype dispatch,
// shared by every op's launcher.
template <typename F>
cudaError_t with_label_type(LabelType type, const F& f) {
  switch (type) {
    case LabelType::kBool: return f(bool{});
    case LabelType::kUInt8: return f(uint8_t{});
    case LabelType::kInt8: return f(int8_t{});
    case LabelType::kInt16: return f(int16_t{});
    case LabelType::kInt32: return f(int32_t{});
    case LabelType::kInt64: return f(int64_t{});
    case LabelType::kUInt16: return f(uint16_t{});
    case LabelType::kUInt32: return f(uint32_t{});
    case LabelType::kUInt64: return f(uint64_t{});
  }
  return cudaErrorInvalidValue;
}

// Where (seed, offset) come from. With seed_ptr == nullptr they are the
// values below. Otherwise (inside a CUDA graph capture) the kernels read
// seed = *seed_ptr and offset = *offset_ptr + offset_extra on the device, so
// every replay of the graph draws fresh samples.
struct RandomSource {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const int64_t* seed_ptr = nullptr;
  const int64_t* offset_ptr = nullptr;
  uint64_t offset_extra = 0;
};

#ifdef __CUDACC__
constexpr int kWarp = 32;

// Sum of v over the warp (every lane gets it).
__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xFFFFFFFFu, v);
#else
  for (int d = kWarp / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, d);
  return v;
#endif
}

// Inclusive prefix sum of v over the warp's lanes: lane i gets the sum over
// lanes 0..i. Every lane of the warp calls it.
template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v, int lane) {
#pragma unroll
  for (int d = 1; d < kWarp; d *= 2) {
    const T other = __shfl_up_sync(0xFFFFFFFFu, v, d);
    if (lane >= d) v += other;
  }
  return v;
}

// What block_scan gives every thread of a warp.
struct BlockPrefix {
  uint32_t before;  // the sum over the block's earlier warps
  uint32_t total;   // the sum over the whole block
};

// Block-wide scan by warp: v summed over each warp's lanes, then those sums
// scanned over the block's warps. Every thread of the block calls it (it
// synchronizes once, after storing its warp's sum); blockDim.x is a multiple
// of 32, at most 32 warps; warp_sums (shared memory) holds one word per warp.
// The caller synchronizes before warp_sums is written again.
__device__ __forceinline__ BlockPrefix block_scan(uint32_t v, uint32_t* warp_sums) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const uint32_t sum = warp_sum(v);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  // Inclusive scan over the warps, one warp per lane.
  const uint32_t scan = warp_inclusive_scan(lane < warps ? warp_sums[lane] : 0u, lane);
  BlockPrefix result;
  result.total = __shfl_sync(0xFFFFFFFFu, scan, kWarp - 1);
  result.before = warp == 0 ? 0u : __shfl_sync(0xFFFFFFFFu, scan, warp - 1);
  return result;
}

// The call's seed and offset into params (any params struct with seed and
// offset): from the arguments, or (inside a CUDA graph) read on the device.
template <typename Params>
__device__ void set_random(const RandomSource& random, Params* params) {
  if (random.seed_ptr != nullptr) {
    params->seed = static_cast<uint64_t>(*random.seed_ptr);
    params->offset = static_cast<uint64_t>(*random.offset_ptr) + random.offset_extra;
  } else {
    params->seed = random.seed;
    params->offset = random.offset;
  }
}
#endif

}  // namespace cuda
}  // namespace syncfree
