// How the CPU kernels split work over threads: one rule for every op.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace syncfree {
namespace ops {

// Work estimates are in units of about one label compacted (about 1 ns on the
// benchmark machine; measured on one thread: compaction 1.0 ns per label, the
// slots 10 to 14 ns each, the gather of 64-byte feature rows 4 to 7 ns per
// slot while the features fit in the caches, up to 25 ns beyond).
//
// A phase runs in parallel only when it holds more than kParallelWork, so
// that every task gets at least half of it: at::parallel_for runs a range of
// at most `grain` units on the calling thread, and splits a larger one into
// tasks of at least grain / 2 units. Twice ATen's own grain (32768 elements of
// an elementwise kernel), as one unit here costs about as much as a few
// elements of a vectorized elementwise kernel: tasks of at least about 30 us
// on the benchmark machine. Below that, a parallel region costs more than it
// saves: waking the pool's threads costs microseconds, and when another process
// keeps a core busy (a DataLoader worker) a thread of the pool that is not
// scheduled holds the call up for a scheduler time slice, milliseconds.
constexpr int64_t kParallelWork = 2 * at::internal::GRAIN_SIZE;

// The at::parallel_for grain for units of about unit_work units of work each.
inline int64_t parallel_grain(int64_t unit_work) {
  unit_work = std::max<int64_t>(unit_work, 1);
  return std::max<int64_t>(1, (kParallelWork + unit_work - 1) / unit_work);
}

}  // namespace ops
}  // namespace syncfree
