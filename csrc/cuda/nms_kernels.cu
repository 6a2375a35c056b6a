// CUDA kernels of nms (framework-free: no torch header).
#include "cuda/nms_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "core/nms.h"

namespace syncfree {
namespace cuda {

namespace {

constexpr int kElementThreads = 256;
constexpr int kTile = 64;  // ranks per mask word
constexpr int kGreedyThreads = 256;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxGridZ = 65535;
constexpr int64_t kMaxElementBlocks = int64_t{1} << 20;

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t words_per_rank(int64_t n) { return (n + kTile - 1) / kTile; }

// Values in the compute type: float16 and bfloat16 convert to float exactly.
__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }

template <typename T>
struct KeyOf;  // the rank key of a compute type
template <>
struct KeyOf<float> {
  using type = uint32_t;
};
template <>
struct KeyOf<double> {
  using type = uint64_t;
};

// Workspace, 256-byte aligned pieces.
template <typename T>
struct Layout {
  using Key = typename KeyOf<T>::type;
  Key *keys_in, *keys_out;     // [rows, n]
  int32_t *vals_in, *vals_out;  // [rows, n]: indices into the row
  int32_t* offsets;             // [rows + 1]: row r is [r * n, (r + 1) * n)
  void* sort_temp;
  size_t sort_temp_bytes;
  T *x1, *y1, *x2, *y2, *area;  // [rows, n], in rank order
  int64_t* ids;                 // [rows, n], in rank order, or null
  int32_t* count;               // [rows]: candidates per row
  unsigned long long* mask;     // [rows, n, words]
  unsigned long long* removed;  // [rows, words]
  size_t total;
};

// The rank sort: one row takes cub's device-wide radix sort (every SM);
// several rows the segmented sort (one block per row).
template <typename T>
size_t sort_temp_bytes(int64_t rows, int64_t n) {
  using Key = typename KeyOf<T>::type;
  size_t bytes = 0;
  // With a null buffer, cub only computes the size (host only, no launch).
  if (rows == 1) {
    const cudaError_t err = cub::DeviceRadixSort::SortPairsDescending(
        nullptr, bytes, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
        static_cast<int>(n), 0, static_cast<int>(sizeof(Key) * 8));
    return err == cudaSuccess ? bytes : 0;
  }
  const cudaError_t err = cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(rows * n), static_cast<int>(rows), static_cast<const int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), 0, static_cast<int>(sizeof(Key) * 8));
  return err == cudaSuccess ? bytes : 0;
}

template <typename T>
Layout<T> layout(void* workspace, int64_t rows, int64_t n, bool with_ids) {
  using Key = typename KeyOf<T>::type;
  const size_t items = static_cast<size_t>(rows * n);
  const size_t words = static_cast<size_t>(words_per_rank(n));
  Layout<T> l;
  char* base = static_cast<char*>(workspace);
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* p = base == nullptr ? nullptr : base + at;
    at += align256(bytes);
    return p;
  };
  l.keys_in = reinterpret_cast<Key*>(take(items * sizeof(Key)));
  l.keys_out = reinterpret_cast<Key*>(take(items * sizeof(Key)));
  l.vals_in = reinterpret_cast<int32_t*>(take(items * sizeof(int32_t)));
  l.vals_out = reinterpret_cast<int32_t*>(take(items * sizeof(int32_t)));
  l.offsets = reinterpret_cast<int32_t*>(take(static_cast<size_t>(rows + 1) * sizeof(int32_t)));
  l.sort_temp_bytes = sort_temp_bytes<T>(rows, n);
  l.sort_temp = take(l.sort_temp_bytes);
  l.x1 = reinterpret_cast<T*>(take(items * sizeof(T)));
  l.y1 = reinterpret_cast<T*>(take(items * sizeof(T)));
  l.x2 = reinterpret_cast<T*>(take(items * sizeof(T)));
  l.y2 = reinterpret_cast<T*>(take(items * sizeof(T)));
  l.area = reinterpret_cast<T*>(take(items * sizeof(T)));
  l.ids = with_ids ? reinterpret_cast<int64_t*>(take(items * sizeof(int64_t))) : nullptr;
  l.count = reinterpret_cast<int32_t*>(take(static_cast<size_t>(rows) * sizeof(int32_t)));
  l.mask = reinterpret_cast<unsigned long long*>(take(items * words * 8));
  l.removed = reinterpret_cast<unsigned long long*>(take(static_cast<size_t>(rows) * words * 8));
  l.total = at;
  return l;
}

int element_blocks(int64_t elements) {
  const int64_t b = (elements + kElementThreads - 1) / kElementThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxElementBlocks ? kMaxElementBlocks : b));
}

// 1. Rank keys and indices; the row offsets of the segmented sort.
template <typename In, typename T>
__global__ void __launch_bounds__(kElementThreads)
    key_kernel(const In* __restrict__ scores, const bool* __restrict__ valid, int64_t rows,
               int64_t n, typename KeyOf<T>::type* keys, int32_t* vals, int32_t* offsets) {
  const int64_t items = rows * n;
  const int64_t stop = items > rows + 1 ? items : rows + 1;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < stop;
       e += int64_t{gridDim.x} * blockDim.x) {
    if (e <= rows) offsets[e] = static_cast<int32_t>(e * n);
    if (e >= items) continue;
    const bool take = valid == nullptr || valid[e];
    keys[e] = take ? core::nms_score_key(static_cast<T>(to_compute(scores[e]))) : 0;
    vals[e] = static_cast<int32_t>(e % n);
  }
}

// 3. The candidates' coordinates, areas and ids in rank order; each row's
// candidate count (keys are descending, non-candidates' 0 last).
template <typename In, typename T>
__global__ void __launch_bounds__(kElementThreads)
    gather_kernel(const In* __restrict__ boxes, const int64_t* __restrict__ idxs, int64_t rows,
                  int64_t n, const typename KeyOf<T>::type* __restrict__ keys,
                  const int32_t* __restrict__ vals, T* x1, T* y1, T* x2, T* y2, T* area,
                  int64_t* ids, int32_t* count) {
  const int64_t items = rows * n;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < items;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / n;
    const int64_t p = e - r * n;
    const bool candidate = keys[e] != 0;
    if (candidate && (p == n - 1 || keys[e + 1] == 0)) count[r] = static_cast<int32_t>(p + 1);
    if (!candidate) {
      if (p == 0) count[r] = 0;
      continue;
    }
    const int64_t j = r * n + vals[e];
    const In* b = boxes + j * 4;
    const T bx1 = static_cast<T>(to_compute(b[0]));
    const T by1 = static_cast<T>(to_compute(b[1]));
    const T bx2 = static_cast<T>(to_compute(b[2]));
    const T by2 = static_cast<T>(to_compute(b[3]));
    x1[e] = bx1;
    y1[e] = by1;
    x2[e] = bx2;
    y2[e] = by2;
    area[e] = core::nms_area(bx1, by1, bx2, by2);
    if (ids != nullptr) ids[e] = idxs[j];
  }
}

// 4. The suppression bits: block (word cb, word rb, rows from z), a thread
// per rank i of word rb; bit k of mask[i][cb] for rank j = 64 cb + k > i of
// the same id with core::nms_suppresses(i, j).
template <typename T>
__global__ void __launch_bounds__(kTile)
    mask_kernel(int64_t rows, int64_t n, int64_t words, const T* __restrict__ x1,
                const T* __restrict__ y1, const T* __restrict__ x2, const T* __restrict__ y2,
                const T* __restrict__ area, const int64_t* __restrict__ ids,
                const int32_t* __restrict__ count, T threshold, unsigned long long* mask) {
  const int64_t cb = blockIdx.x;
  const int64_t rb = blockIdx.y;
  if (cb < rb) return;
  __shared__ T sx1[kTile], sy1[kTile], sx2[kTile], sy2[kTile], sarea[kTile];
  __shared__ int64_t sid[kTile];
  const int t = threadIdx.x;
  for (int64_t r = blockIdx.z; r < rows; r += gridDim.z) {
    const int64_t m = count[r];
    if (rb * kTile >= m || cb * kTile >= m) continue;  // the same for the whole block
    const int64_t row_size = m - rb * kTile < kTile ? m - rb * kTile : kTile;
    const int64_t col_size = m - cb * kTile < kTile ? m - cb * kTile : kTile;
    const int64_t base = r * n;
    __syncthreads();  // the previous row's readers are done with the tiles
    if (t < col_size) {
      const int64_t j = base + cb * kTile + t;
      sx1[t] = x1[j];
      sy1[t] = y1[j];
      sx2[t] = x2[j];
      sy2[t] = y2[j];
      sarea[t] = area[j];
      sid[t] = ids != nullptr ? ids[j] : 0;
    }
    __syncthreads();
    if (t < row_size) {
      const int64_t i = base + rb * kTile + t;
      const T ix1 = x1[i], iy1 = y1[i], ix2 = x2[i], iy2 = y2[i], ia = area[i];
      const int64_t iid = ids != nullptr ? ids[i] : 0;
      unsigned long long bits = 0;
      for (int k = cb == rb ? t + 1 : 0; k < col_size; ++k) {
        if (sid[k] == iid && core::nms_suppresses(ix1, iy1, ix2, iy2, ia, sx1[k], sy1[k], sx2[k],
                                                  sy2[k], sarea[k], threshold)) {
          bits |= 1ull << k;
        }
      }
      mask[i * words + cb] = bits;
    }
  }
}

// 5. The greedy pass and the static output, one block per row.
__global__ void __launch_bounds__(kGreedyThreads)
    greedy_kernel(int64_t n, int64_t words, int64_t max_output, const int32_t* __restrict__ count,
                  const int32_t* __restrict__ order, const unsigned long long* __restrict__ mask,
                  unsigned long long* removed_all, int64_t* indices, bool* out_valid) {
  const int64_t r = blockIdx.x;
  const int t = threadIdx.x;
  const int64_t m = count != nullptr ? count[r] : 0;
  const int64_t base = r * n;
  unsigned long long* removed = removed_all + r * words;
  int64_t* out = indices + r * max_output;
  bool* ok = out_valid + r * max_output;
  __shared__ int64_t kept;
  __shared__ int num_word_kept;
  __shared__ int32_t word_kept[kTile];
  // The word's own mask words (rank b's bits within word cb), loaded by 64
  // threads at once before thread 0 walks them: no dependent global load
  // per kept rank.
  __shared__ unsigned long long diagonal[kTile];
  const int64_t used = (m + kTile - 1) / kTile;
  for (int64_t w = t; w < used; w += blockDim.x) removed[w] = 0;
  if (t == 0) kept = 0;
  __syncthreads();
  // Per word, three barriers: after the diagonal's load, after thread 0's
  // walk, after the block's ORs. Thread 0 writes kept, num_word_kept and
  // word_kept only between the first and the second; the other threads read
  // them only between the second and the third (kept into a register, so
  // that every thread leaves the loop at the same word), and rewrite
  // diagonal only after the third.
  for (int64_t cb = 0; cb < used; ++cb) {
    if (t < kTile) {
      const int64_t i = cb * kTile + t;
      diagonal[t] = i < m ? mask[(base + i) * words + cb] : 0ull;
    }
    __syncthreads();
    if (t == 0) {
      unsigned long long rem = removed[cb];
      int64_t k = kept;
      int nk = 0;
      for (int b = 0; b < kTile; ++b) {
        const int64_t i = cb * kTile + b;
        if (i >= m || k >= max_output) break;
        if ((rem >> b) & 1ull) continue;
        out[k] = order[base + i];
        ok[k] = true;
        ++k;
        word_kept[nk++] = static_cast<int32_t>(i);
        rem |= diagonal[b];
      }
      removed[cb] = rem;
      num_word_kept = nk;
      kept = k;
    }
    __syncthreads();
    const bool more = kept < max_output;
    if (more) {
      const int nk = num_word_kept;
      for (int64_t w = cb + 1 + t; w < used; w += blockDim.x) {
        unsigned long long acc = removed[w];
        for (int q = 0; q < nk; ++q) acc |= mask[(base + word_kept[q]) * words + w];
        removed[w] = acc;
      }
    }
    __syncthreads();
    if (!more) break;
  }
  for (int64_t s = kept + t; s < max_output; s += blockDim.x) {
    out[s] = -1;
    ok[s] = false;
  }
}

template <typename In, typename T>
cudaError_t launch_typed(const NmsArgs& a, cudaStream_t stream) {
  const int64_t rows = a.rows, n = a.n, words = words_per_rank(n);
  const Layout<T> l = layout<T>(a.workspace, rows, n, a.idxs != nullptr);
  const In* boxes = static_cast<const In*>(a.boxes);
  const In* scores = static_cast<const In*>(a.scores);
  const int32_t* count = nullptr;
  if (n > 0) {
    const int64_t items = rows * n;
    key_kernel<In, T><<<element_blocks(items > rows + 1 ? items : rows + 1), kElementThreads, 0,
                        stream>>>(scores, a.valid, rows, n, l.keys_in, l.vals_in, l.offsets);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    size_t temp = l.sort_temp_bytes;
    using Key = typename KeyOf<T>::type;
    if (rows == 1) {  // stable too: equal keys keep increasing index
      err = cub::DeviceRadixSort::SortPairsDescending(
          l.sort_temp, temp, static_cast<const Key*>(l.keys_in), l.keys_out,
          static_cast<const int32_t*>(l.vals_in), l.vals_out, static_cast<int>(items), 0,
          static_cast<int>(sizeof(Key) * 8), stream);
    } else {
      err = cub::DeviceSegmentedRadixSort::SortPairsDescending(
          l.sort_temp, temp, static_cast<const Key*>(l.keys_in), l.keys_out,
          static_cast<const int32_t*>(l.vals_in), l.vals_out, static_cast<int>(items),
          static_cast<int>(rows), static_cast<const int32_t*>(l.offsets),
          static_cast<const int32_t*>(l.offsets + 1), 0, static_cast<int>(sizeof(Key) * 8),
          stream);
    }
    if (err != cudaSuccess) return err;
    gather_kernel<In, T><<<element_blocks(items), kElementThreads, 0, stream>>>(
        boxes, a.idxs, rows, n, l.keys_out, l.vals_out, l.x1, l.y1, l.x2, l.y2, l.area, l.ids,
        l.count);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    const dim3 grid(static_cast<unsigned>(words), static_cast<unsigned>(words),
                    static_cast<unsigned>(rows < kMaxGridZ ? rows : kMaxGridZ));
    mask_kernel<T><<<grid, kTile, 0, stream>>>(rows, n, words, l.x1, l.y1, l.x2, l.y2, l.area,
                                               l.ids, l.count,
                                               core::nms_threshold<T>(a.iou_threshold), l.mask);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    count = l.count;
  }
  greedy_kernel<<<static_cast<unsigned>(rows), kGreedyThreads, 0, stream>>>(
      n, words, a.max_output, count, l.vals_out, l.mask, l.removed, a.indices, a.out_valid);
  return cudaGetLastError();
}

}  // namespace

bool nms_shape_supported(int64_t rows, int64_t n) {
  if (rows < 0 || n < 0) return false;
  if (rows > 0 && n > (int64_t{0x7FFFFFFF} - 1) / rows) return false;  // sort item count
  if (rows > 0x7FFFFFFF) return false;                                // greedy grid
  if (words_per_rank(n) > kMaxGridY) return false;                    // mask grid
  // The mask, the largest piece: rows * n * words * 8 bytes below 2^61.
  const double mask = static_cast<double>(rows) * n * words_per_rank(n) * 8.0;
  return mask < 2305843009213693952.0;
}

double nms_mask_bytes(int64_t rows, int64_t n) {
  return static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(words_per_rank(n)) * 8.0;
}

size_t nms_workspace_bytes(const NmsArgs& a) {
  if (a.type == NmsType::kFloat64) return layout<double>(nullptr, a.rows, a.n, a.idxs != nullptr).total;
  return layout<float>(nullptr, a.rows, a.n, a.idxs != nullptr).total;
}

cudaError_t launch_nms(const NmsArgs& a, cudaStream_t stream) {
  switch (a.type) {
    case NmsType::kFloat16: return launch_typed<__half, float>(a, stream);
    case NmsType::kBFloat16: return launch_typed<__nv_bfloat16, float>(a, stream);
    case NmsType::kFloat32: return launch_typed<float, float>(a, stream);
    case NmsType::kFloat64: return launch_typed<double, double>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace syncfree
