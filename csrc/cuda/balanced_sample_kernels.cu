// CUDA kernels of balanced sampling (framework-free: no torch header).
#include "cuda/balanced_sample_kernels.h"

#include <new>

#include "core/label_compaction.h"
#include "core/labels.h"
#include "core/row_plan.h"

namespace syncfree {
namespace cuda {

namespace {

constexpr int kCompactThreads = 512;  // compact_kernel; the most row_kernel takes
constexpr int kMaxWarps = kCompactThreads / kWarp;
constexpr int kCompactItems = 16;     // labels per thread and round
constexpr int kRowMinThreads = 64;    // row_kernel: two warps at least (occupancy)
constexpr int kSlotThreads = 256;
constexpr int kPlanThreads = 128;
constexpr int64_t kMaxSlotBlocks = int64_t{1} << 20;

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Workspace of the three-launch path: the compacted rows (2 bytes per
// label), each class's per-row chunk prefix sums, and each row's plan.
struct Layout {
  uint16_t* work;
  int64_t* pos_prefix;
  int64_t* neg_prefix;
  core::RowPlan* plans;
  int64_t chunks;
};

Layout layout(void* workspace, int64_t rows, int64_t n) {
  Layout l;
  l.chunks = core::num_chunks(n, kCompactChunk);
  char* base = static_cast<char*>(workspace);
  const size_t work_bytes = align16(static_cast<size_t>(rows * n) * 2);
  const size_t prefix_bytes = align16(2 * static_cast<size_t>(rows * (l.chunks + 1)) * 8);
  l.work = reinterpret_cast<uint16_t*>(base);
  l.pos_prefix = reinterpret_cast<int64_t*>(base + work_bytes);
  l.neg_prefix = l.pos_prefix + rows * (l.chunks + 1);
  l.plans = reinterpret_cast<core::RowPlan*>(base + work_bytes + prefix_bytes);
  return l;
}

size_t layout_bytes(int64_t rows, int64_t n) {
  const int64_t chunks = core::num_chunks(n, kCompactChunk);
  return align16(static_cast<size_t>(rows * n) * 2) +
         align16(2 * static_cast<size_t>(rows * (chunks + 1)) * 8) +
         static_cast<size_t>(rows) * sizeof(core::RowPlan);
}

// Block-wide, order-preserving compaction of row[0..len) (len <= 65536: uint16 offsets)
// into work[0..len) (global or shared memory): positives' offsets at the
// front, negatives' at the back in reverse, the layout the CPU writes
// (core/label_compaction.h). Every thread gets the class counts; the block
// ends synchronized (work is complete). blockDim.x must be a multiple of 32,
// at most kCompactThreads; warp_counts holds kMaxWarps entries.
//
// A round covers blockDim.x * kCompactItems consecutive labels, warp w the
// w-th run of 32 * kCompactItems of them, in kCompactItems steps of 32
// consecutive labels, one per lane: each warp load is one contiguous
// segment. A label's rank within its class is the count in the earlier
// rounds, in the round's earlier warps (a scan of one word per warp), in the
// warp's earlier steps and in the step's lower lanes (warp ballots): the
// same ranks as a serial pass.
template <typename T>
__device__ void compact_block(const T* __restrict__ row, int64_t len, int64_t negative_label,
                              uint16_t* work, uint32_t* warp_counts, int64_t* num_pos,
                              int64_t* num_neg) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int64_t warp_span = int64_t{kWarp} * kCompactItems;
  int64_t pos_total = 0;
  int64_t neg_total = 0;
  for (int64_t round = 0; round < len; round += warp_span * warps) {
    const int64_t base = round + warp * warp_span;  // the warp's first label of the round
    // Pass 1: load and classify (all loads independent), count per warp.
    uint32_t pos_bits = 0, neg_bits = 0;  // bit i: this lane's label of step i
#pragma unroll
    for (int i = 0; i < kCompactItems; ++i) {
      const int64_t x = base + i * kWarp + lane;
      bool pos = false, neg = false;
      if (x < len) core::classify(row[x], negative_label, &pos, &neg);
      pos_bits |= static_cast<uint32_t>(pos) << i;
      neg_bits |= static_cast<uint32_t>(neg) << i;
    }
    // Per-warp counts are at most 512 and per-round ones at most 8192, below
    // 2^16: both classes travel in one word.
    const BlockPrefix counts = block_scan(static_cast<uint32_t>(__popc(pos_bits)) |
                                              (static_cast<uint32_t>(__popc(neg_bits)) << 16),
                                          warp_counts);
    const uint32_t total = counts.total;
    const uint32_t before = counts.before;
    // Pass 2: write the offsets, step by step, lanes in order.
    int64_t p = pos_total + (before & 0xFFFFu);
    int64_t q = neg_total + (before >> 16);
#pragma unroll
    for (int i = 0; i < kCompactItems; ++i) {
      if (base + i * kWarp >= len) break;  // the same for the whole warp
      const bool pos = (pos_bits >> i) & 1u;
      const bool neg = (neg_bits >> i) & 1u;
      const uint32_t pos_lanes = __ballot_sync(0xFFFFFFFFu, pos);
      const uint32_t neg_lanes = __ballot_sync(0xFFFFFFFFu, neg);
      const uint16_t offset = static_cast<uint16_t>(base + i * kWarp + lane);
      if (pos) work[p + __popc(pos_lanes & lanes_below)] = offset;
      if (neg) work[len - 1 - (q + __popc(neg_lanes & lanes_below))] = offset;
      p += __popc(pos_lanes);
      q += __popc(neg_lanes);
    }
    pos_total += total & 0xFFFFu;
    neg_total += total >> 16;
    __syncthreads();  // warp_counts is reused by the next round; work is complete
  }
  *num_pos = pos_total;
  *num_neg = neg_total;
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

// Shared memory of row_kernel beyond its fixed part, for rows of n labels:
// the keys of up to three small permutations (each of at most min(n, 128)
// elements: a row's permutations have at most n elements), the compacted
// row, the tabulated permutations.
struct RowShared {
  int64_t small;  // elements per permutation table: min(n, kSmallDomain)
  size_t keys_offset, work_offset, table_offset, bytes;

  __host__ __device__ explicit RowShared(int64_t n) {
    small = n < core::kSmallDomain ? n : core::kSmallDomain;
    keys_offset = 0;
    work_offset = keys_offset + 3 * static_cast<size_t>(small) * sizeof(uint64_t);
    table_offset = work_offset + static_cast<size_t>(n) * sizeof(uint16_t);
    bytes = table_offset + 3 * static_cast<size_t>(small);
  }
};

// Element e of three tables laid end to end (sizes size[0..2]): returns the
// table and leaves the element's index within it in *e.
__device__ __forceinline__ int split_element(const int64_t size[3], int64_t* e) {
  if (*e < size[0]) return 0;
  *e -= size[0];
  if (*e < size[1]) return 1;
  *e -= size[1];
  return 2;
}

// Tabulates the used small permutations of a row into table + p * stride
// (p = 0, 1, 2: slots, positives, negatives): the keys first, then each
// element's rank, one element per thread over the three tables together.
// Every thread of the block calls it (it synchronizes).
__device__ void tabulate_small(const core::Permutation* const perms[3], const bool tabulate[3],
                               int64_t stride, uint64_t* keys, uint8_t* table) {
  const int64_t size[3] = {tabulate[0] ? perms[0]->size() : 0,
                           tabulate[1] ? perms[1]->size() : 0,
                           tabulate[2] ? perms[2]->size() : 0};
  const int64_t total = size[0] + size[1] + size[2];
  if (total == 0) return;  // the same for the whole block
  for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
    int64_t j = e;
    const int p = split_element(size, &j);
    const core::Permutation* perm = p == 0 ? perms[0] : p == 1 ? perms[1] : perms[2];
    keys[p * stride + j] = perm->small_key(j);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
    int64_t x = e;
    const int p = split_element(size, &x);
    const int64_t n = p == 0 ? size[0] : p == 1 ? size[1] : size[2];
    table[p * stride + x] =
        static_cast<uint8_t>(core::small_rank_from_keys(keys + p * stride, n, x));
  }
  __syncthreads();
}

// Room for one RowPlan in shared memory (built by one thread, read by all).
struct alignas(core::RowPlan) PlanStorage {
  unsigned char bytes[sizeof(core::RowPlan)];
};

// Threads of row_kernel for rows of n labels and k slots: enough for one
// compaction round, one element of a tabulated permutation and one slot per
// thread, in whole warps, at least kRowMinThreads and at most
// kCompactThreads.
int row_threads(int64_t n, int64_t k) {
  int64_t t = (n + kCompactItems - 1) / kCompactItems;
  const int64_t small = n < core::kSmallDomain ? n : core::kSmallDomain;
  if (t < small) t = small;
  if (t < k) t = k;
  if (t < kRowMinThreads) t = kRowMinThreads;
  if (t > kCompactThreads) t = kCompactThreads;
  return static_cast<int>((t + kWarp - 1) / kWarp * kWarp);
}

// One launch for rows of n <= kOneLaunchMaxN labels: block r compacts row r
// into shared memory; its first thread builds the row's plan into shared
// memory; the block tabulates the row's small permutations, then its
// threads fill the row's slots. Dynamic shared memory: RowShared(n).bytes.
template <typename T>
__global__ void __launch_bounds__(kCompactThreads)
    row_kernel(const T* __restrict__ labels, int64_t n, core::BalancedParams params,
               RandomSource random, int64_t* __restrict__ indices, bool* __restrict__ valid) {
  extern __shared__ uint64_t row_shared[];
  __shared__ uint32_t warp_counts[kMaxWarps];
  __shared__ PlanStorage plan_storage;
  const RowShared smem(n);
  char* const shared = reinterpret_cast<char*>(row_shared);
  uint64_t* const keys = reinterpret_cast<uint64_t*>(shared + smem.keys_offset);
  uint16_t* const work = reinterpret_cast<uint16_t*>(shared + smem.work_offset);
  uint8_t* const table = reinterpret_cast<uint8_t*>(shared + smem.table_offset);
  const int64_t r = blockIdx.x;
  int64_t pos_prefix[2] = {0, 0};
  int64_t neg_prefix[2] = {0, 0};
  compact_block(labels + r * n, n, params.negative_label, work, warp_counts, &pos_prefix[1],
                &neg_prefix[1]);  // ends with __syncthreads(): work is complete
  if (threadIdx.x == 0) {
    set_random(random, &params);
    new (plan_storage.bytes)
        core::RowPlan(core::make_row_plan(params, r, pos_prefix[1], neg_prefix[1]));
  }
  __syncthreads();
  const core::RowPlan& plan = *reinterpret_cast<const core::RowPlan*>(plan_storage.bytes);
  const core::CompactRow row{work, pos_prefix, neg_prefix, n, 1};
  const core::Permutation* const perms[3] = {&plan.slots, &plan.positives, &plan.negatives};
  const bool used[3] = {plan.permute_slots, plan.pick_positives, plan.pick_negatives};
  bool tabulate[3];
  BlockPermutation bp[3];
  for (int p = 0; p < 3; ++p) {
    tabulate[p] = used[p] && perms[p]->is_small();
    bp[p] = {perms[p], tabulate[p] ? table + p * smem.small : nullptr};
  }
  tabulate_small(perms, tabulate, smem.small, keys, table);
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
  __shared__ uint32_t warp_counts[kMaxWarps];
  const int64_t unit = blockIdx.x;
  const int64_t r = unit / chunks;
  const int64_t c = unit % chunks;
  const int64_t start = c * kCompactChunk;
  const int64_t len = (n - start) < kCompactChunk ? (n - start) : kCompactChunk;
  int64_t pos_total, neg_total;
  compact_block(labels + r * n + start, len, negative_label, out.work + r * n + start,
                warp_counts, &pos_total, &neg_total);
  if (threadIdx.x == 0) {
    out.pos_prefix[r * (chunks + 1) + c + 1] = pos_total;
    out.neg_prefix[r * (chunks + 1) + c + 1] = neg_total;
  }
}

// One thread per row: chunk counts -> exclusive prefix sums, then the row's
// plan, built once for all its slots.
__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(int64_t rows, core::BalancedParams params, RandomSource random, Layout out) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  set_random(random, &params);
  int64_t* const pos = out.pos_prefix + r * (out.chunks + 1);
  int64_t* const neg = out.neg_prefix + r * (out.chunks + 1);
  core::counts_to_prefix(pos, out.chunks);
  core::counts_to_prefix(neg, out.chunks);
  new (&out.plans[r])
      core::RowPlan(core::make_row_plan(params, r, pos[out.chunks], neg[out.chunks]));
}

// One thread per output slot (grid-stride): the pick from the row's plan.
// Index arithmetic in Index (32 bits when every slot index fits).
template <typename Index>
__global__ void __launch_bounds__(kSlotThreads)
    slots_kernel(int64_t rows, int64_t n, int64_t k, Layout in,
                 const core::RowPlan* __restrict__ plans, int64_t* __restrict__ indices,
                 bool* __restrict__ valid) {
  const Index total = static_cast<Index>(rows * k);
  const Index slots = static_cast<Index>(k);
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index g = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const Index r = g / slots;
    int64_t index = -1;
    if (n > 0) {  // n == 0: no compaction ran; every slot is invalid
      const core::CompactRow row{in.work + static_cast<int64_t>(r) * n,
                                 in.pos_prefix + static_cast<int64_t>(r) * (in.chunks + 1),
                                 in.neg_prefix + static_cast<int64_t>(r) * (in.chunks + 1), n,
                                 in.chunks, kCompactChunk};
      const core::RowPlan& plan = plans[r];
      index = slot_index(plan, plan.slots, plan.positives, plan.negatives, row,
                         static_cast<int64_t>(g - r * slots));
    }
    indices[g] = index;
    valid[g] = index >= 0;
  }
}

bool one_launch(const BalancedSampleArgs& a) {
  return a.n <= kOneLaunchMaxN && a.params.num_samples <= kOneLaunchMaxK &&
         !a.force_multi_launch;
}

template <typename T>
cudaError_t launch_typed(const BalancedSampleArgs& a, cudaStream_t stream) {
  const int64_t k = a.params.num_samples;
  if (one_launch(a)) {
    row_kernel<T><<<static_cast<unsigned>(a.rows), row_threads(a.n, k), RowShared(a.n).bytes,
                    stream>>>(static_cast<const T*>(a.labels), a.n, a.params, a.random, a.indices,
                              a.valid);
    return cudaGetLastError();
  }
  const Layout l = layout(a.workspace, a.rows, a.n);
  if (a.n > 0) {
    compact_kernel<T><<<static_cast<unsigned>(a.rows * l.chunks), kCompactThreads, 0, stream>>>(
        static_cast<const T*>(a.labels), a.n, l.chunks, a.params.negative_label, l);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    plan_kernel<<<static_cast<unsigned>((a.rows + kPlanThreads - 1) / kPlanThreads), kPlanThreads,
                  0, stream>>>(a.rows, a.params, a.random, l);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const int64_t total = a.rows * k;
  int64_t blocks = (total + kSlotThreads - 1) / kSlotThreads;
  if (blocks > kMaxSlotBlocks) blocks = kMaxSlotBlocks;
  if (total <= 0x7FFFFFFF) {
    slots_kernel<uint32_t><<<static_cast<unsigned>(blocks), kSlotThreads, 0, stream>>>(
        a.rows, a.n, k, l, l.plans, a.indices, a.valid);
  } else {
    slots_kernel<int64_t><<<static_cast<unsigned>(blocks), kSlotThreads, 0, stream>>>(
        a.rows, a.n, k, l, l.plans, a.indices, a.valid);
  }
  return cudaGetLastError();
}

}  // namespace

bool balanced_sample_shape_supported(int64_t rows, int64_t n) {
  // One block per row (one-launch path) or per (row, chunk).
  const int64_t chunks = n == 0 ? 1 : core::num_chunks(n, kCompactChunk);
  return rows <= 0x7FFFFFFF / chunks;
}

size_t balanced_sample_workspace_bytes(const BalancedSampleArgs& a) {
  if (one_launch(a)) return 0;
  return layout_bytes(a.rows, a.n);
}

cudaError_t launch_balanced_sample(const BalancedSampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.params.num_samples == 0) return cudaSuccess;
  if (!balanced_sample_shape_supported(a.rows, a.n)) return cudaErrorInvalidConfiguration;
  return with_label_type(a.label_type,
                         [&](auto label) { return launch_typed<decltype(label)>(a, stream); });
}

}  // namespace cuda
}  // namespace syncfree
