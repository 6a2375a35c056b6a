// Timing of a benchmark run: call-by-call timers (host clock on the CPU,
// CUDA events on the GPU), percentiles and, on CUDA, the count of host syncs
// per call.
#pragma once

#include <functional>
#include <vector>

#include "options.h"

namespace syncfree {
namespace bench {

// Times fn call by call; returns per-call milliseconds.
class Timer {
 public:
  explicit Timer(bool cuda) : cuda_(cuda) {}
  // At least 5 calls, then until o.min_time seconds have passed or
  // o.max_iters calls were made.
  std::vector<double> run(const std::function<void()>& fn, const Options& o);

 private:
  double time_one(const std::function<void()>& fn);
  bool cuda_;
};

// The q-quantile of v (0 <= q <= 1), interpolated linearly; v not empty.
double percentile(std::vector<double> v, double q);

#ifdef SYNCFREE_BENCH_CUDA
// Host syncs per call of fn over calls calls, counted from the warnings of
// CUDA's sync debug mode.
double count_syncs(const std::function<void()>& fn, int calls);
#endif

}  // namespace bench
}  // namespace syncfree
