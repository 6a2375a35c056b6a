// CUDA kernels of compact (framework-free: no torch header).
#include "cuda/compact_kernels.h"

#include "core/compact.h"

namespace syncfree {
namespace cuda {

namespace {

constexpr int kBlockThreads = 512;  // chunk kernels; the most row_kernel takes
constexpr int kMaxWarps = kBlockThreads / kWarp;
constexpr int kItems = 16;          // elements per thread and round
constexpr int kRowMinThreads = 64;  // row_kernel: two warps at least
constexpr int kScanThreads = 128;   // scan_kernel: one warp per row
constexpr int kFinishThreads = 256;
constexpr int64_t kMaxFinishBlocks = int64_t{1} << 20;

static_assert(kBlockThreads * kItems == kCompactChunkN, "a chunk is one round of a full block");

int64_t num_chunks(int64_t n) { return (n + kCompactChunkN - 1) / kCompactChunkN; }

bool one_launch(const CompactArgs& a) {
  return a.n == 0 || (a.n <= kCompactOneLaunchMaxN && !a.force_multi_launch);
}

// Block-wide, order-preserving compaction of row[0..len) (elements `stride`
// apart): the position first + x of the true element of rank j (j < room)
// goes to out[j]. Returns the number of true elements of the range to every
// thread; the block ends synchronized. blockDim.x is a multiple of 32, at
// most kBlockThreads; warp_counts holds kMaxWarps entries.
//
// A round covers blockDim.x * kItems consecutive elements, warp w the w-th
// run of 32 * kItems of them, in kItems steps of 32 consecutive elements,
// one per lane. An element's rank is the count in the earlier rounds, in the
// round's earlier warps (a scan of one word per warp), in the warp's earlier
// steps and in the step's lower lanes (warp ballots): the ranks of a serial
// pass. Once the room is used up, rounds only count.
template <typename T>
__device__ int64_t block_compact(const T* __restrict__ row, int64_t stride, int64_t len,
                                 int64_t first, int64_t* __restrict__ out, int64_t room,
                                 uint32_t* warp_counts) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int64_t warp_span = int64_t{kWarp} * kItems;
  int64_t total = 0;
  for (int64_t round = 0; round < len; round += warp_span * warps) {
    const int64_t base = round + warp * warp_span;  // the warp's first element of the round
    uint32_t bits = 0;  // bit i: this lane's element of step i is true
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t x = base + i * kWarp + lane;
      const bool on = x < len && core::mask_true(row[x * stride]);
      bits |= static_cast<uint32_t>(on) << i;
    }
    const BlockPrefix counts = block_scan(static_cast<uint32_t>(__popc(bits)), warp_counts);
    const uint32_t round_count = counts.total;
    const uint32_t before = counts.before;
    if (total < room) {  // the same for the whole block
      int64_t p = total + before;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        if (base + i * kWarp >= len || p >= room) break;  // the same for the whole warp
        const bool on = (bits >> i) & 1u;
        const uint32_t on_lanes = __ballot_sync(0xFFFFFFFFu, on);
        const int64_t rank = p + __popc(on_lanes & lanes_below);
        if (on && rank < room) out[rank] = first + base + i * kWarp + lane;
        p += __popc(on_lanes);
      }
    }
    total += round_count;
    __syncthreads();  // warp_counts is reused by the next round
  }
  return total;
}

int row_threads(int64_t n) {
  int64_t t = (n + kItems - 1) / kItems;
  t = (t + kWarp - 1) / kWarp * kWarp;
  if (t < kRowMinThreads) t = kRowMinThreads;
  if (t > kBlockThreads) t = kBlockThreads;
  return static_cast<int>(t);
}

// One launch: block r compacts row r into its slots, then finishes them.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads) row_kernel(CompactArgs a) {
  __shared__ uint32_t warp_counts[kMaxWarps];
  const int64_t r = blockIdx.x;
  const T* row = static_cast<const T*>(a.mask) + r * a.row_stride;
  int64_t* indices = a.indices + r * a.k;
  bool* valid = a.valid + r * a.k;
  const int64_t count = block_compact(row, a.item_stride, a.n, 0, indices, a.k, warp_counts);
  if (threadIdx.x == 0) a.count[r] = count;
  const int64_t used = count < a.k ? count : a.k;
  for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x) {
    if (j < used) {
      valid[j] = true;
    } else {
      indices[j] = -1;
      valid[j] = false;
    }
  }
}

// Four launches. 1: the true elements of each (row, chunk) at counts[unit].
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    count_kernel(CompactArgs a, int64_t chunks, int64_t* __restrict__ counts) {
  __shared__ uint32_t warp_counts[kMaxWarps];
  const int64_t unit = blockIdx.x;
  const int64_t r = unit / chunks;
  const int64_t c = unit % chunks;
  const int64_t start = c * kCompactChunkN;
  const int64_t len = (a.n - start) < kCompactChunkN ? (a.n - start) : kCompactChunkN;
  const T* chunk = static_cast<const T*>(a.mask) + r * a.row_stride + start * a.item_stride;
  const int64_t count = block_compact(chunk, a.item_stride, len, start, a.indices, 0, warp_counts);
  if (threadIdx.x == 0) counts[unit] = count;
}

// 2: one warp per row: the chunk counts -> exclusive prefix sums in place,
// the row's total -> count[r].
__global__ void __launch_bounds__(kScanThreads)
    scan_kernel(int64_t rows, int64_t chunks, int64_t* __restrict__ prefix,
                int64_t* __restrict__ count) {
  const int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (r >= rows) return;  // the whole warp
  int64_t* row = prefix + r * chunks;
  int64_t carry = 0;
  for (int64_t c0 = 0; c0 < chunks; c0 += kWarp) {
    const int64_t c = c0 + lane;
    const int64_t v = c < chunks ? row[c] : 0;
    const int64_t scan = warp_inclusive_scan(v, lane);
    if (c < chunks) row[c] = carry + scan - v;
    carry += __shfl_sync(0xFFFFFFFFu, scan, kWarp - 1);
  }
  if (lane == 0) count[r] = carry;
}

// 3: each (row, chunk) whose prefix is below K writes its positions there.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    write_kernel(CompactArgs a, int64_t chunks, const int64_t* __restrict__ prefix) {
  __shared__ uint32_t warp_counts[kMaxWarps];
  const int64_t unit = blockIdx.x;
  const int64_t before = prefix[unit];
  if (before >= a.k) return;  // the whole block: its positions come after slot K
  const int64_t r = unit / chunks;
  const int64_t c = unit % chunks;
  const int64_t start = c * kCompactChunkN;
  const int64_t len = (a.n - start) < kCompactChunkN ? (a.n - start) : kCompactChunkN;
  const T* chunk = static_cast<const T*>(a.mask) + r * a.row_stride + start * a.item_stride;
  block_compact(chunk, a.item_stride, len, start, a.indices + r * a.k + before, a.k - before,
                warp_counts);
}

// 4: one thread per slot (grid-stride): valid below the row's count, -1 past it.
__global__ void __launch_bounds__(kFinishThreads) finish_kernel(CompactArgs a) {
  const int64_t total = a.rows * a.k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const int64_t r = g / a.k;
    const int64_t j = g - r * a.k;
    const bool ok = j < a.count[r];
    if (!ok) a.indices[g] = -1;
    a.valid[g] = ok;
  }
}

template <typename T>
cudaError_t launch_typed(const CompactArgs& a, cudaStream_t stream) {
  if (one_launch(a)) {
    row_kernel<T><<<static_cast<unsigned>(a.rows), row_threads(a.n), 0, stream>>>(a);
    return cudaGetLastError();
  }
  const int64_t chunks = num_chunks(a.n);
  const unsigned units = static_cast<unsigned>(a.rows * chunks);
  int64_t* prefix = static_cast<int64_t*>(a.workspace);
  count_kernel<T><<<units, kBlockThreads, 0, stream>>>(a, chunks, prefix);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t rows_per_block = kScanThreads / kWarp;
  scan_kernel<<<static_cast<unsigned>((a.rows + rows_per_block - 1) / rows_per_block),
                kScanThreads, 0, stream>>>(a.rows, chunks, prefix, a.count);
  err = cudaGetLastError();
  if (err != cudaSuccess || a.k == 0) return err;
  write_kernel<T><<<units, kBlockThreads, 0, stream>>>(a, chunks, prefix);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  int64_t blocks = (a.rows * a.k + kFinishThreads - 1) / kFinishThreads;
  if (blocks > kMaxFinishBlocks) blocks = kMaxFinishBlocks;
  finish_kernel<<<static_cast<unsigned>(blocks), kFinishThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool compact_shape_supported(int64_t rows, int64_t n) {
  const int64_t chunks = n == 0 ? 1 : num_chunks(n);
  return rows <= 0x7FFFFFFF / chunks;
}

size_t compact_workspace_bytes(const CompactArgs& a) {
  if (a.rows == 0 || one_launch(a)) return 0;
  return static_cast<size_t>(a.rows * num_chunks(a.n)) * sizeof(int64_t);
}

cudaError_t launch_compact(const CompactArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (!compact_shape_supported(a.rows, a.n)) return cudaErrorInvalidConfiguration;
  if (!one_launch(a) && a.workspace == nullptr) return cudaErrorInvalidValue;
  return with_label_type(a.mask_type, [&](auto type) {
    return launch_typed<decltype(type)>(a, stream);
  });
}

}  // namespace cuda
}  // namespace syncfree
