// CUDA kernels of stratified sampling (framework-free: no torch header).
#include "cuda/stratified_sample_kernels.h"

#include <cub/block/block_radix_sort.cuh>

#include "core/permutation.h"
#include "core/stratified.h"

namespace syncfree {
namespace cuda {

namespace {

constexpr int kCountThreads = 256;
constexpr int kCountItems = 16;  // labels per thread of count_kernel
constexpr int64_t kCountTile = int64_t{kCountThreads} * kCountItems;
constexpr int kPlanThreads = 128;
constexpr int kSortThreads = 256;
constexpr int kSortItems = static_cast<int>(kSortTile / kSortThreads);  // 8
constexpr int kSlotThreads = 256;
constexpr int64_t kMaxSlotBlocks = int64_t{1} << 20;
static_assert(kSortTile == int64_t{kSortThreads} * kSortItems, "sort tile = threads x items");

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

bool order_is_32_bit(int64_t n) { return n <= 0x7FFFFFFF; }

// Workspace: the class counts (then each class's cursor into the sorted
// row), the take and leftover prefix sums, each row's plan, and the rows
// sorted by class (int32 indices below 2^31 labels, else int64).
struct Layout {
  int64_t* counts;       // [rows, C]
  int64_t* take_prefix;  // [rows, C + 1]
  int64_t* left_prefix;  // [rows, C + 1]
  core::StratifiedPlan* plans;  // [rows]
  void* order;           // [rows, n] of int32_t or int64_t
};

struct LayoutBytes {
  size_t counts, prefix, plans, order;
  size_t total() const { return counts + 2 * prefix + plans + order; }
};

LayoutBytes layout_bytes(int64_t rows, int64_t n, int64_t num_classes) {
  LayoutBytes b;
  b.counts = align16(static_cast<size_t>(rows * num_classes) * sizeof(int64_t));
  b.prefix = align16(static_cast<size_t>(rows * (num_classes + 1)) * sizeof(int64_t));
  b.plans = align16(static_cast<size_t>(rows) * sizeof(core::StratifiedPlan));
  b.order = align16(static_cast<size_t>(rows * n) *
                    (order_is_32_bit(n) ? sizeof(int32_t) : sizeof(int64_t)));
  return b;
}

Layout layout(void* workspace, int64_t rows, int64_t n, int64_t num_classes) {
  const LayoutBytes b = layout_bytes(rows, n, num_classes);
  char* base = static_cast<char*>(workspace);
  Layout l;
  l.counts = reinterpret_cast<int64_t*>(base);
  l.take_prefix = reinterpret_cast<int64_t*>(base + b.counts);
  l.left_prefix = reinterpret_cast<int64_t*>(base + b.counts + b.prefix);
  l.plans = reinterpret_cast<core::StratifiedPlan*>(base + b.counts + 2 * b.prefix);
  l.order = base + b.counts + 2 * b.prefix + b.plans;
  return l;
}

// Step 1: block b counts the labels of tile b % tiles of row b / tiles per
// class into counts[row] (labels of no class are not counted). With
// use_shared, a block histogram of num_classes 32-bit counters in dynamic
// shared memory, then one global atomic per non-empty class; otherwise one
// global atomic per label.
template <typename T>
__global__ void __launch_bounds__(kCountThreads)
    count_kernel(const T* __restrict__ labels, int64_t n, int64_t tiles, int64_t num_classes,
                 bool use_shared, unsigned long long* counts) {
  extern __shared__ uint32_t hist[];
  const int64_t r = blockIdx.x / tiles;
  const int64_t base = (blockIdx.x - r * tiles) * kCountTile;
  const T* row = labels + r * n + base;
  const int64_t len = n - base < kCountTile ? n - base : kCountTile;
  unsigned long long* row_counts = counts + r * num_classes;
  if (use_shared) {
    for (int64_t c = threadIdx.x; c < num_classes; c += blockDim.x) hist[c] = 0;
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kCountItems; ++i) {
    const int64_t x = int64_t{i} * kCountThreads + threadIdx.x;  // coalesced
    if (x < len) {
      const int64_t c = core::stratum_bucket(row[x], num_classes);
      if (c < num_classes) {
        if (use_shared) {
          atomicAdd(&hist[c], 1u);
        } else {
          atomicAdd(&row_counts[c], 1ull);
        }
      }
    }
  }
  if (use_shared) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < num_classes; c += blockDim.x) {
      const uint32_t h = hist[c];
      if (h != 0) atomicAdd(&row_counts[c], static_cast<unsigned long long>(h));
    }
  }
}

// Step 2: one block per row. Thread 0 builds the row's plan with the core's
// make_stratified_plan (on shared copies of the counts and quotas when they
// fit, else in place in global memory) and stores it with the take and
// leftover prefix sums; then the block turns the counts into cursors: class
// c's elements start at take_prefix[c] + left_prefix[c] in the sorted row.
__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(core::StratifiedParams params, RandomSource random, const int64_t* quota,
                int64_t quota_row_stride, bool use_shared, Layout l) {
  extern __shared__ int64_t plan_shared[];
  const int64_t r = blockIdx.x;
  const int64_t C = params.num_classes;
  int64_t* counts = l.counts + r * C;
  const int64_t* row_quota = quota + r * quota_row_stride;
  int64_t* take = l.take_prefix + r * (C + 1);
  int64_t* left = l.left_prefix + r * (C + 1);
  if (use_shared) {
    int64_t* s_counts = plan_shared;       // C
    int64_t* s_quota = s_counts + C;       // C
    int64_t* s_take = s_quota + C;         // C + 1
    int64_t* s_left = s_take + (C + 1);    // C + 1
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      s_counts[c] = counts[c];
      s_quota[c] = row_quota[c];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      set_random(random, &params);
      l.plans[r] = core::make_stratified_plan(params, r, s_counts, s_quota, s_take, s_left);
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c <= C; c += blockDim.x) {
      take[c] = s_take[c];
      left[c] = s_left[c];
      if (c < C) counts[c] = s_take[c] + s_left[c];
    }
  } else {
    // The whole block first asks for the row's counts and quotas in L1 (a
    // hint: one prefetch per 128-byte line), so that thread 0's serial pass
    // mostly hits L1 rather than waiting on L2 for every class.
    for (int64_t c = int64_t{threadIdx.x} * 16; c < C; c += int64_t{blockDim.x} * 16) {
      asm volatile("prefetch.global.L1 [%0];" ::"l"(counts + c));
      asm volatile("prefetch.global.L1 [%0];" ::"l"(row_quota + c));
    }
    if (threadIdx.x == 0) {
      set_random(random, &params);
      l.plans[r] = core::make_stratified_plan(params, r, counts, row_quota, take, left);
    }
    __syncthreads();  // thread 0's reads of the counts and writes of the prefix sums are done
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) counts[c] = take[c] + left[c];
  }
}

// First index in sorted[0..j] holding `key` (sorted is ascending and
// sorted[j] == key).
__device__ __forceinline__ int run_start(const uint32_t* sorted, int j, uint32_t key) {
  int lo = 0, hi = j;  // sorted[hi] == key
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (sorted[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Step 3: one block per row with a valid slot (rows without one are never
// read). The row's labels go through in tiles of kSortTile, in order. A
// tile is sorted by class with a stable block radix sort (keys: the class,
// num_classes for labels of no class and past the row's end; values: the
// position in the tile, loaded in a blocked arrangement so that ties keep
// index order). The element at sorted position j of class c has rank
// j - (first sorted position of c) among the tile's elements of class c, so
// it goes to cursor[c] + that rank; the last element of each run then
// advances cursor[c] by the run's length (one writer per class). Every
// class's elements end up in index order: the CPU's counting sort.
template <typename T, typename Index>
__global__ void __launch_bounds__(kSortThreads)
    sort_kernel(const T* __restrict__ labels, int64_t n, int64_t num_classes, int key_bits,
                Layout l) {
  using Sort = cub::BlockRadixSort<uint32_t, kSortThreads, kSortItems, uint32_t>;
  __shared__ typename Sort::TempStorage sort_storage;
  __shared__ uint32_t sorted[kSortTile];
  const int64_t r = blockIdx.x;
  if (l.plans[r].valid() == 0) return;  // the same for the whole block
  const T* row = labels + r * n;
  int64_t* cursor = l.counts + r * num_classes;
  Index* order = static_cast<Index*>(l.order) + r * n;
  const uint32_t none = static_cast<uint32_t>(num_classes);
  const int first = static_cast<int>(threadIdx.x) * kSortItems;
  for (int64_t base = 0; base < n; base += kSortTile) {
    uint32_t key[kSortItems];
    uint32_t pos[kSortItems];
#pragma unroll
    for (int i = 0; i < kSortItems; ++i) {
      const int64_t x = base + first + i;
      key[i] = x < n ? static_cast<uint32_t>(core::stratum_bucket(row[x], num_classes)) : none;
      pos[i] = static_cast<uint32_t>(first + i);
    }
    Sort(sort_storage).Sort(key, pos, 0, key_bits);
#pragma unroll
    for (int i = 0; i < kSortItems; ++i) sorted[first + i] = key[i];
    __syncthreads();
    int run[kSortItems];  // > 0: this element ends its class's run (the run's length)
#pragma unroll
    for (int i = 0; i < kSortItems; ++i) {
      const int j = first + i;
      run[i] = 0;
      if (key[i] < none) {
        const int start = run_start(sorted, j, key[i]);
        order[cursor[key[i]] + (j - start)] = static_cast<Index>(base + pos[i]);
        if (j + 1 == kSortTile || sorted[j + 1] != key[i]) run[i] = j - start + 1;
      }
    }
    __syncthreads();  // every cursor read; sort_storage and sorted free again
#pragma unroll
    for (int i = 0; i < kSortItems; ++i) {
      if (run[i] > 0) cursor[key[i]] += run[i];
    }
    __syncthreads();  // the cursors advanced before the next tile reads them
  }
}

// Step 4: thread g fills slot g % k of row g / k (grid-stride), with the
// core's one-slot pick and one read of the sorted row. Index arithmetic in
// Loop (32 bits when everything fits).
template <typename Index, typename Loop>
__global__ void __launch_bounds__(kSlotThreads)
    slots_kernel(int64_t rows, int64_t n, int64_t k, int64_t num_classes, Layout l,
                 int64_t* __restrict__ indices, bool* __restrict__ valid) {
  const Loop total = static_cast<Loop>(rows * k);
  const Loop stride = static_cast<Loop>(gridDim.x) * blockDim.x;
  const Loop slots = static_cast<Loop>(k);
  for (Loop g = blockIdx.x * static_cast<Loop>(blockDim.x) + threadIdx.x; g < total;
       g += stride) {
    const Loop r = g / slots;
    const int64_t s = static_cast<int64_t>(g - r * slots);
    int64_t index = -1;
    if (n > 0) {  // n == 0: nothing was counted or planned; every slot is invalid
      const core::StratifiedPlan& plan = l.plans[r];
      if (s < plan.valid()) {
        const int64_t* take = l.take_prefix + static_cast<int64_t>(r) * (num_classes + 1);
        const int64_t* left = l.left_prefix + static_cast<int64_t>(r) * (num_classes + 1);
        const core::StratifiedPick pick = core::pick_stratified_slot(plan, take, left, s);
        const Index* order = static_cast<const Index*>(l.order) + static_cast<int64_t>(r) * n;
        index = static_cast<int64_t>(
            order[take[pick.stratum] + left[pick.stratum] + pick.position]);
      }
    }
    indices[g] = index;
    valid[g] = index >= 0;
  }
}

// Bits of the sort keys: classes 0..C (C for labels of no class).
int key_bits_for(int64_t num_classes) {
  int bits = 0;
  while ((int64_t{1} << bits) <= num_classes) ++bits;
  return bits;
}

template <typename T, typename Index>
cudaError_t launch_typed(const StratifiedArgs& a, const Layout& l, cudaStream_t stream) {
  const int64_t C = a.params.num_classes;
  const int64_t k = a.params.num_samples;
  if (a.n > 0) {
    cudaError_t err = cudaMemsetAsync(l.counts, 0, static_cast<size_t>(a.rows * C) * 8, stream);
    if (err != cudaSuccess) return err;
    const int64_t tiles = (a.n + kCountTile - 1) / kCountTile;
    const bool shared_counts = C <= kSharedCountClasses;
    count_kernel<T><<<static_cast<unsigned>(a.rows * tiles), kCountThreads,
                      shared_counts ? static_cast<size_t>(C) * sizeof(uint32_t) : 0, stream>>>(
        static_cast<const T*>(a.labels), a.n, tiles, C, shared_counts,
        reinterpret_cast<unsigned long long*>(l.counts));
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    const bool shared_plan = C <= kSharedPlanClasses;
    plan_kernel<<<static_cast<unsigned>(a.rows), kPlanThreads,
                  shared_plan ? static_cast<size_t>(4 * C + 2) * sizeof(int64_t) : 0, stream>>>(
        a.params, a.random, a.quota, a.quota_row_stride, shared_plan, l);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    sort_kernel<T, Index><<<static_cast<unsigned>(a.rows), kSortThreads, 0, stream>>>(
        static_cast<const T*>(a.labels), a.n, C, key_bits_for(C), l);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const int64_t total = a.rows * k;
  int64_t blocks = (total + kSlotThreads - 1) / kSlotThreads;
  if (blocks > kMaxSlotBlocks) blocks = kMaxSlotBlocks;
  if (total <= 0x7FFFFFFF) {
    slots_kernel<Index, uint32_t><<<static_cast<unsigned>(blocks), kSlotThreads, 0, stream>>>(
        a.rows, a.n, k, C, l, a.indices, a.valid);
  } else {
    slots_kernel<Index, int64_t><<<static_cast<unsigned>(blocks), kSlotThreads, 0, stream>>>(
        a.rows, a.n, k, C, l, a.indices, a.valid);
  }
  return cudaGetLastError();
}

}  // namespace

bool stratified_shape_supported(int64_t rows, int64_t n, int64_t num_classes) {
  constexpr int64_t kMaxBlocks = 0x7FFFFFFF;
  if (rows < 0 || n < 0 || num_classes < 1) return false;
  if (rows > kMaxBlocks || num_classes >= kMaxBlocks) return false;
  const int64_t tiles = n == 0 ? 1 : (n + kCountTile - 1) / kCountTile;
  if (rows > 0 && tiles > kMaxBlocks / rows) return false;
  // Workspace words per row: 3 C + 2 + n + the plan; the total must fit in
  // int64 bytes (a double estimate, with room to spare).
  const double bytes =
      static_cast<double>(rows) *
      (8.0 * (3.0 * static_cast<double>(num_classes) + 2.0 + static_cast<double>(n)) +
       static_cast<double>(sizeof(core::StratifiedPlan)));
  return bytes < 0x1p62;
}

size_t stratified_workspace_bytes(const StratifiedArgs& a) {
  return layout_bytes(a.rows, a.n, a.params.num_classes).total();
}

cudaError_t launch_stratified_sample(const StratifiedArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.params.num_samples == 0) return cudaSuccess;
  if (!stratified_shape_supported(a.rows, a.n, a.params.num_classes))
    return cudaErrorInvalidConfiguration;
  const Layout l = layout(a.workspace, a.rows, a.n, a.params.num_classes);
  return with_label_type(a.label_type, [&](auto label) {
    using T = decltype(label);
    return order_is_32_bit(a.n) ? launch_typed<T, int32_t>(a, l, stream)
                                : launch_typed<T, int64_t>(a, l, stream);
  });
}

}  // namespace cuda
}  // namespace syncfree
