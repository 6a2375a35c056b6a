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
constexpr int kGatherThreads = 256;
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

using BlockScan = cub::BlockScan<uint32_t, kCompactThreads>;

// Block-wide, order-preserving compaction of row[0..len) (len <= kChunk)
// into work[0..len) (global or shared memory): positives' offsets at the
// front, negatives' at the back in reverse, the layout the CPU writes. Every
// thread gets the class counts.
template <typename T>
__device__ void compact_block(const T* __restrict__ row, int64_t len, int64_t negative_label,
                              uint16_t* work, BlockScan::TempStorage& temp, int64_t* num_pos,
                              int64_t* num_neg) {
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
    BlockScan(temp).ExclusiveSum(np | (nq << 16), before, total);
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
  *num_pos = pos_total;
  *num_neg = neg_total;
}

// The call's seed and offset: from the arguments, or (inside a CUDA graph)
// read on the device.
__device__ void set_random(const RandomSource& random, core::SampleParams* params) {
  if (random.seed_ptr != nullptr) {
    params->seed = static_cast<uint64_t>(*random.seed_ptr);
    params->offset = static_cast<uint64_t>(*random.offset_ptr) + random.offset_extra;
  } else {
    params->seed = random.seed;
    params->offset = random.offset;
  }
}

// Index held by slot s of a row (-1 when the slot is invalid), with the
// row's three permutations evaluated by `Perm` (see core::pick_slot).
template <typename Perm>
__device__ int64_t slot_index(const core::RowPlan& plan, const Perm& slots, const Perm& positives,
                              const Perm& negatives, const core::CompactRow& row, int64_t s) {
  if (s >= plan.quota.valid()) return -1;
  const core::Pick pick = core::pick_slot(plan, slots, positives, negatives, s);
  return row.index_of(pick.rank, pick.positive);
}

// A row permutation as the one-launch kernel evaluates it: small ones
// (exact construction, O(n) per evaluation) are tabulated in shared memory
// once per block; the others evaluate the Feistel network.
struct BlockPermutation {
  const core::Permutation* perm;
  const uint8_t* table;  // perm(x) = table[x] when not null (n <= 128)
  __device__ int64_t operator()(int64_t x) const { return table ? table[x] : (*perm)(x); }
};

// Tabulates the permutations marked in `tabulate` (small ones the row uses)
// into table[p][0..n): keys first, then each element's rank, one thread per
// element. Every thread of the block calls it (it synchronizes).
__device__ void tabulate_small(const core::Permutation* const perms[3], const bool tabulate[3],
                               uint64_t (*keys)[core::kSmallDomain],
                               uint8_t (*table)[core::kSmallDomain]) {
  for (int p = 0; p < 3; ++p) {
    if (!tabulate[p]) continue;
    for (int64_t j = threadIdx.x; j < perms[p]->size(); j += blockDim.x)
      keys[p][j] = perms[p]->small_key(j);
  }
  __syncthreads();
  for (int p = 0; p < 3; ++p) {
    if (!tabulate[p]) continue;
    const int64_t n = perms[p]->size();
    for (int64_t x = threadIdx.x; x < n; x += blockDim.x)
      table[p][x] = static_cast<uint8_t>(core::small_rank_from_keys(keys[p], n, x));
  }
  __syncthreads();
}

// One launch for rows of n <= kOneLaunchMaxN labels: block r compacts row r
// into shared memory, tabulates the row's small permutations, then its
// threads fill the row's slots.
template <typename T>
__global__ void __launch_bounds__(kCompactThreads)
    row_kernel(const T* __restrict__ labels, int64_t n, core::SampleParams params,
               RandomSource random, int64_t* __restrict__ indices, bool* __restrict__ valid) {
  __shared__ BlockScan::TempStorage temp;
  __shared__ uint16_t work[kOneLaunchMaxN];
  __shared__ uint64_t keys[3][core::kSmallDomain];
  __shared__ uint8_t table[3][core::kSmallDomain];
  const int64_t r = blockIdx.x;
  int64_t pos_prefix[2] = {0, 0};
  int64_t neg_prefix[2] = {0, 0};
  compact_block(labels + r * n, n, params.negative_label, work, temp, &pos_prefix[1],
                &neg_prefix[1]);  // ends with __syncthreads(): work is complete
  set_random(random, &params);
  const core::CompactRow row{work, pos_prefix, neg_prefix, n, 1};
  // Every thread builds the same plan (no divergence in tabulate_small).
  const core::RowPlan plan = core::make_row_plan(params, r, pos_prefix[1], neg_prefix[1]);
  const core::Permutation* const perms[3] = {&plan.slots, &plan.positives, &plan.negatives};
  const bool used[3] = {plan.permute_slots, plan.pick_positives, plan.pick_negatives};
  bool tabulate[3];
  BlockPermutation bp[3];
  for (int p = 0; p < 3; ++p) {
    tabulate[p] = used[p] && perms[p]->is_small();
    bp[p] = {perms[p], tabulate[p] ? table[p] : nullptr};
  }
  tabulate_small(perms, tabulate, keys, table);
  const int64_t k = params.num_samples;
  for (int64_t s = threadIdx.x; s < k; s += blockDim.x) {
    const int64_t index = slot_index(plan, bp[0], bp[1], bp[2], row, s);
    indices[r * k + s] = index;
    valid[r * k + s] = index >= 0;
  }
}

// One block per (row, chunk): compaction of the chunk into its part of the
// workspace, and the chunk's class counts at prefix[c + 1].
template <typename T>
__global__ void __launch_bounds__(kCompactThreads)
    compact_kernel(const T* __restrict__ labels, int64_t n, int64_t chunks, int64_t negative_label,
                   Layout out) {
  __shared__ BlockScan::TempStorage temp;
  const int64_t unit = blockIdx.x;
  const int64_t r = unit / chunks;
  const int64_t c = unit % chunks;
  const int64_t start = c * core::kChunk;
  const int64_t len = (n - start) < core::kChunk ? (n - start) : core::kChunk;
  int64_t pos_total, neg_total;
  compact_block(labels + r * n + start, len, negative_label, out.work + r * n + start, temp,
                &pos_total, &neg_total);
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
  set_random(random, &params);
  const int64_t k = params.num_samples;
  const int64_t total = rows * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const int64_t r = g / k;
    int64_t index = -1;
    if (n > 0) {  // n == 0: no compaction ran; every slot is invalid
      const core::CompactRow row{in.work + r * n, in.pos_prefix + r * (in.chunks + 1),
                                 in.neg_prefix + r * (in.chunks + 1), n, in.chunks};
      const core::RowPlan plan =
          core::make_row_plan(params, r, row.num_positive(), row.num_negative());
      index = slot_index(plan, plan.slots, plan.positives, plan.negatives, row, g % k);
    }
    indices[g] = index;
    valid[g] = index >= 0;
  }
}

bool one_launch(const SampleArgs& a) {
  return a.n <= kOneLaunchMaxN && a.params.num_samples <= kOneLaunchMaxK &&
         !a.force_multi_launch;
}

template <typename T>
cudaError_t launch_typed(const SampleArgs& a, cudaStream_t stream) {
  if (one_launch(a)) {
    row_kernel<T><<<static_cast<unsigned>(a.rows), kCompactThreads, 0, stream>>>(
        static_cast<const T*>(a.labels), a.n, a.params, a.random, a.indices, a.valid);
    return cudaGetLastError();
  }
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
  if (blocks > kMaxSlotBlocks) blocks = kMaxSlotBlocks;
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

// f(T{}) for the C++ type T of a label type.
template <typename F>
cudaError_t with_label_type(LabelType type, const F& f) {
  switch (type) {
    case LabelType::kBool: return f(bool{});
    case LabelType::kUInt8: return f(uint8_t{});
    case LabelType::kInt8: return f(int8_t{});
    case LabelType::kInt16: return f(int16_t{});
    case LabelType::kInt32: return f(int32_t{});
    case LabelType::kInt64: return f(int64_t{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool shape_supported(int64_t rows, int64_t n) {
  // One block per row (one-launch path) or per (row, chunk).
  const int64_t chunks = n == 0 ? 1 : core::num_chunks(n);
  return rows <= 0x7FFFFFFF / chunks;
}

size_t workspace_bytes(const SampleArgs& a) {
  if (one_launch(a)) return 0;
  const int64_t rows = a.rows, n = a.n;
  const int64_t chunks = core::num_chunks(n);
  return align16(static_cast<size_t>(rows * n) * 2) +
         2 * static_cast<size_t>(rows * (chunks + 1)) * sizeof(int64_t);
}

cudaError_t launch_balanced_sample(const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.params.num_samples == 0) return cudaSuccess;
  if (!shape_supported(a.rows, a.n)) return cudaErrorInvalidConfiguration;
  return with_label_type(a.label_type,
                         [&](auto label) { return launch_typed<decltype(label)>(a, stream); });
}

cudaError_t launch_gather(const GatherArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.k == 0) return cudaSuccess;
  return with_label_type(a.label_type,
                         [&](auto label) { return launch_gather_unit<decltype(label)>(a, stream); });
}

}  // namespace cuda
}  // namespace syncfree
