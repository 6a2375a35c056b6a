// CUDA kernels of balanced sampling (framework-free: no torch header).
#include "cuda/sampler.h"

#include <cub/block/block_scan.cuh>

#include "core/compact.h"
#include "core/labels.h"
#include "core/row_plan.h"

namespace syncfree {
namespace cuda {

namespace {

constexpr int kCompactThreads = 512;
constexpr int kCompactItems = 16;  // per thread and round: 8192 labels a round
constexpr int kSlotThreads = 256;
constexpr int64_t kMaxSlotBlocks = int64_t{1} << 20;

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

struct Layout {
  uint16_t* work;
  int64_t* pos_prefix;
  int64_t* neg_prefix;
  int64_t chunks;
};

Layout layout(void* workspace, int64_t rows, int64_t n) {
  Layout l;
  l.chunks = core::num_chunks(n);
  char* base = static_cast<char*>(workspace);
  l.work = reinterpret_cast<uint16_t*>(base);
  l.pos_prefix = reinterpret_cast<int64_t*>(base + align16(static_cast<size_t>(rows * n) * 2));
  l.neg_prefix = l.pos_prefix + rows * (l.chunks + 1);
  return l;
}

// One block per (row, chunk): order-preserving compaction of the chunk into
// its part of the workspace (positives' offsets at the front, negatives' at
// the back in reverse), the same layout the CPU writes, and the chunk's
// class counts at prefix[c + 1].
template <typename T>
__global__ void __launch_bounds__(kCompactThreads)
    compact_kernel(const T* __restrict__ labels, int64_t n, int64_t chunks, int64_t negative_label,
                   Layout out) {
  using Scan = cub::BlockScan<uint32_t, kCompactThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int64_t unit = blockIdx.x;
  const int64_t r = unit / chunks;
  const int64_t c = unit % chunks;
  const int64_t start = c * core::kChunk;
  const int64_t len = (n - start) < core::kChunk ? (n - start) : core::kChunk;
  const T* row = labels + r * n + start;
  uint16_t* work = out.work + r * n + start;

  int64_t pos_total = 0;
  int64_t neg_total = 0;
  for (int64_t round = 0; round < len; round += kCompactThreads * kCompactItems) {
    const int64_t first = round + static_cast<int64_t>(threadIdx.x) * kCompactItems;
    uint32_t pos_bits = 0, neg_bits = 0, np = 0, nq = 0;
#pragma unroll
    for (int i = 0; i < kCompactItems; ++i) {
      bool pos = false, neg = false;
      if (first + i < len) core::classify(row[first + i], negative_label, &pos, &neg);
      pos_bits |= static_cast<uint32_t>(pos) << i;
      neg_bits |= static_cast<uint32_t>(neg) << i;
      np += pos;
      nq += neg;
    }
    // Per-round counts are below 2^16: scan both classes in one word.
    uint32_t before, total;
    Scan(temp).ExclusiveSum(np | (nq << 16), before, total);
    int64_t p = pos_total + (before & 0xFFFF);
    int64_t q = neg_total + (before >> 16);
#pragma unroll
    for (int i = 0; i < kCompactItems; ++i) {
      if (pos_bits >> i & 1) work[p++] = static_cast<uint16_t>(first + i);
      if (neg_bits >> i & 1) work[len - 1 - q++] = static_cast<uint16_t>(first + i);
    }
    pos_total += total & 0xFFFF;
    neg_total += total >> 16;
    __syncthreads();  // temp is reused by the next round
  }
  if (threadIdx.x == 0) {
    out.pos_prefix[r * (chunks + 1) + c + 1] = pos_total;
    out.neg_prefix[r * (chunks + 1) + c + 1] = neg_total;
  }
}

// One thread per row: chunk counts -> exclusive prefix sums.
__global__ void prefix_kernel(int64_t rows, Layout out) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  core::counts_to_prefix(out.pos_prefix + r * (out.chunks + 1), out.chunks);
  core::counts_to_prefix(out.neg_prefix + r * (out.chunks + 1), out.chunks);
}

// One thread per output slot (grid-stride): the row plan, then the pick.
__global__ void __launch_bounds__(kSlotThreads)
    slots_kernel(int64_t rows, int64_t n, core::SampleParams params, RandomSource random,
                 Layout in, int64_t* __restrict__ indices, bool* __restrict__ valid) {
  if (random.seed_ptr != nullptr) {
    params.seed = static_cast<uint64_t>(*random.seed_ptr);
    params.offset = static_cast<uint64_t>(*random.offset_ptr) + random.offset_extra;
  } else {
    params.seed = random.seed;
    params.offset = random.offset;
  }
  const int64_t k = params.num_samples;
  const int64_t total = rows * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const int64_t r = g / k;
    const int64_t s = g % k;
    int64_t index = -1;
    if (n > 0) {
      const core::CompactRow row{in.work + r * n, in.pos_prefix + r * (in.chunks + 1),
                                 in.neg_prefix + r * (in.chunks + 1), n, in.chunks};
      const core::RowPlan plan =
          core::make_row_plan(params, r, row.num_positive(), row.num_negative());
      if (s < plan.quota.valid()) {
        const core::Pick pick = core::pick_slot(plan, s);
        index = row.index_of(pick.rank, pick.positive);
      }
    }
    indices[g] = index;
    valid[g] = index >= 0;
  }
}

template <typename T>
cudaError_t launch_typed(const SampleArgs& a, cudaStream_t stream) {
  const Layout l = layout(a.workspace, a.rows, a.n);
  if (a.n > 0) {
    compact_kernel<T><<<static_cast<unsigned>(a.rows * l.chunks), kCompactThreads, 0, stream>>>(
        static_cast<const T*>(a.labels), a.n, l.chunks, a.params.negative_label, l);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    prefix_kernel<<<static_cast<unsigned>((a.rows + 255) / 256), 256, 0, stream>>>(a.rows, l);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const int64_t total = a.rows * a.params.num_samples;
  int64_t blocks = (total + kSlotThreads - 1) / kSlotThreads;
  if (blocks > kMaxSlotBlocks) blocks = kMaxSlotBlocks;
  slots_kernel<<<static_cast<unsigned>(blocks), kSlotThreads, 0, stream>>>(
      a.rows, a.n, a.params, a.random, l, a.indices, a.valid);
  return cudaGetLastError();
}

}  // namespace

bool shape_supported(int64_t rows, int64_t n) {
  return n == 0 || rows * core::num_chunks(n) <= 0x7FFFFFFF;
}

size_t workspace_bytes(int64_t rows, int64_t n) {
  const int64_t chunks = core::num_chunks(n);
  return align16(static_cast<size_t>(rows * n) * 2) +
         2 * static_cast<size_t>(rows * (chunks + 1)) * sizeof(int64_t);
}

cudaError_t launch_balanced_sample(const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.params.num_samples == 0) return cudaSuccess;
  if (!shape_supported(a.rows, a.n)) return cudaErrorInvalidConfiguration;
  switch (a.label_type) {
    case LabelType::kBool: return launch_typed<bool>(a, stream);
    case LabelType::kUInt8: return launch_typed<uint8_t>(a, stream);
    case LabelType::kInt8: return launch_typed<int8_t>(a, stream);
    case LabelType::kInt16: return launch_typed<int16_t>(a, stream);
    case LabelType::kInt32: return launch_typed<int32_t>(a, stream);
    case LabelType::kInt64: return launch_typed<int64_t>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace syncfree
