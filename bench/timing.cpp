#include "timing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#ifdef SYNCFREE_BENCH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#endif

namespace syncfree {
namespace bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<double> Timer::run(const std::function<void()>& fn, const Options& o) {
  std::vector<double> ms;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int64_t>(ms.size()) < o.max_iters &&
         (ms.size() < 5 || seconds_since(start) < o.min_time)) {
    ms.push_back(time_one(fn));
  }
  return ms;
}

double Timer::time_one(const std::function<void()>& fn) {
#ifdef SYNCFREE_BENCH_CUDA
  if (cuda_) {
    // Plain CUDA events: ATen's CUDAEvent header pulls in cuBLAS and
    // cuSPARSE headers, which a torch wheel does not ship.
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    cudaEvent_t begin, end;
    C10_CUDA_CHECK(cudaEventCreate(&begin));
    C10_CUDA_CHECK(cudaEventCreate(&end));
    C10_CUDA_CHECK(cudaEventRecord(begin, stream));
    fn();
    C10_CUDA_CHECK(cudaEventRecord(end, stream));
    C10_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    C10_CUDA_CHECK(cudaEventDestroy(begin));
    C10_CUDA_CHECK(cudaEventDestroy(end));
    return ms;
  }
#endif
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return seconds_since(t0) * 1e3;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

#ifdef SYNCFREE_BENCH_CUDA
namespace {

// Counts the warnings that CUDA's sync debug mode emits for synchronizing calls.
class SyncCounter : public c10::WarningHandler {
 public:
  using Guard = c10::WarningUtils::WarningHandlerGuard;
  void process(const c10::Warning& w) override { record(w.msg()); }
  void record(const std::string& msg) {
    if (msg.find("synchroniz") != std::string::npos) ++count;
  }
  int64_t count = 0;
};

}  // namespace

double count_syncs(const std::function<void()>& fn, int calls) {
  SyncCounter counter;
  SyncCounter::Guard guard(&counter);
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  for (int i = 0; i < calls; ++i) fn();
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  c10::cuda::device_synchronize();
  return static_cast<double>(counter.count) / calls;
}
#endif

}  // namespace bench
}  // namespace syncfree
