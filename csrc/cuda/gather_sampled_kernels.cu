// CUDA kernel of the gather of a sample (framework-free: no torch header).
#include "cuda/gather_sampled_kernels.h"

#include <cstdint>

namespace syncfree {
namespace cuda {

namespace {

constexpr int kGatherThreads = 256;
constexpr int64_t kMaxGatherBlocks = int64_t{1} << 20;

// The gather: thread g copies unit g % units of slot g / units (units of
// sizeof(U) bytes per item), and the slot's first unit also writes its label.
// Index arithmetic in Index (32 bits when everything fits).
template <typename U, typename T, typename Index>
__global__ void __launch_bounds__(kGatherThreads) gather_kernel(GatherArgs a, Index units) {
  const Index total = static_cast<Index>(a.rows * a.k) * units;
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  const char* features = static_cast<const char*>(a.features);
  const T* labels = static_cast<const T*>(a.labels);
  U* out = static_cast<U*>(a.out_features);
  const Index k = static_cast<Index>(a.k);
  for (Index g = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const Index slot = g / units;
    const Index j = g - slot * units;
    const Index r = slot / k;
    const int64_t i = a.indices[slot];
    const bool ok = a.valid[slot] && i >= 0 && i < a.n;
    if (a.item_bytes > 0) {
      U v{};
      if (ok) {
        v = *reinterpret_cast<const U*>(features + static_cast<int64_t>(r) * a.feature_row_stride +
                                        i * a.feature_item_stride +
                                        static_cast<int64_t>(j) * sizeof(U));
      }
      out[g] = v;
    }
    if (j == 0) {
      a.out_labels[slot] =
          ok ? static_cast<int64_t>(labels[static_cast<int64_t>(r) * a.label_row_stride +
                                           i * a.label_item_stride])
             : -1;
    }
  }
}

template <typename U, typename T>
cudaError_t launch_gather_typed(const GatherArgs& a, cudaStream_t stream) {
  // Items of zero bytes still need one thread per slot for the label.
  const int64_t units = a.item_bytes > 0 ? a.item_bytes / static_cast<int64_t>(sizeof(U)) : 1;
  const int64_t total = a.rows * a.k * units;
  int64_t blocks = (total + kGatherThreads - 1) / kGatherThreads;
  if (blocks > kMaxGatherBlocks) blocks = kMaxGatherBlocks;
  if (total <= 0x7FFFFFFF) {
    gather_kernel<U, T, uint32_t><<<static_cast<unsigned>(blocks), kGatherThreads, 0, stream>>>(
        a, static_cast<uint32_t>(units));
  } else {
    gather_kernel<U, T, int64_t><<<static_cast<unsigned>(blocks), kGatherThreads, 0, stream>>>(
        a, units);
  }
  return cudaGetLastError();
}

// The widest unit (16, 8, 4, 2 or 1 bytes) that divides the item size, both
// strides and the base addresses, so every load and store is aligned.
template <typename T>
cudaError_t launch_gather_unit(const GatherArgs& a, cudaStream_t stream) {
  const uint64_t bits = static_cast<uint64_t>(a.item_bytes) |
                        static_cast<uint64_t>(a.feature_row_stride) |
                        static_cast<uint64_t>(a.feature_item_stride) |
                        reinterpret_cast<uintptr_t>(a.features) |
                        reinterpret_cast<uintptr_t>(a.out_features) | 16;
  switch (bits & (~bits + 1)) {  // lowest set bit
    case 16: return launch_gather_typed<uint4, T>(a, stream);
    case 8: return launch_gather_typed<uint2, T>(a, stream);
    case 4: return launch_gather_typed<uint32_t, T>(a, stream);
    case 2: return launch_gather_typed<uint16_t, T>(a, stream);
    default: return launch_gather_typed<uint8_t, T>(a, stream);
  }
}

}  // namespace

cudaError_t launch_gather_sampled(const GatherArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.k == 0) return cudaSuccess;
  return with_label_type(a.label_type,
                         [&](auto label) { return launch_gather_unit<decltype(label)>(a, stream); });
}

}  // namespace cuda
}  // namespace syncfree
