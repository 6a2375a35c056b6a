// Timing table of syncfree::balanced_sample_gather on the CPU.
//
//   syncfree_bench [--min-time SECONDS] [--max-n N] [--glibc-malloc-defaults]
//
// By default the benchmark asks glibc's malloc to keep freed memory in the
// process (mallopt: no mmap for large blocks, no trimming), as long-running
// training processes effectively do, so that the timings measure the
// operators rather than the kernel's page-fault path (which costs about 11 us
// per 4 KiB page on the virtual machines used for docs/benchmarks.md).
// --glibc-malloc-defaults measures with glibc's defaults instead.
//
// For N in {1e3, 1e4, 1e5, 1e6} and batch B in {1, 32}: labels in {0, 1}
// (int64, half positive), K = N / 10, features [B, N, 16] float32. Each
// configuration is warmed up, then timed until --min-time has passed (at
// least 5 calls); the table reports the median and the spread (min..max).
#include <ATen/Parallel.h>
#include <malloc.h>
#include <syncfree/syncfree.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  double min_time = 0.5;
  int64_t max_n = 1000000;
  bool malloc_defaults = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--min-time") && i + 1 < argc) {
      min_time = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--max-n") && i + 1 < argc) {
      max_n = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--glibc-malloc-defaults")) {
      malloc_defaults = true;
    } else {
      std::fprintf(stderr, "usage: %s [--min-time SECONDS] [--max-n N] [--glibc-malloc-defaults]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!malloc_defaults) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, -1);
  }
  std::printf("syncfree %s | balanced_sample_gather on CPU | %d threads | K = N/10, F = 16\n",
              "0.1.0", at::get_num_threads());
  std::printf("malloc: %s\n", malloc_defaults ? "glibc defaults" : "freed memory kept in the process");
  std::printf("%9s %4s %7s %7s %11s %23s %12s\n", "N", "B", "K", "calls", "median ms",
              "spread ms (min..max)", "Mlabels/s");
  for (int64_t b : {1, 32}) {
    for (int64_t n = 1000; n <= max_n; n *= 10) {
      const int64_t k = n / 10;
      at::manual_seed(0);
      const at::Tensor labels = at::randint(0, 2, {b, n}, at::kLong);
      const at::Tensor features = at::randn({b, n, 16}, at::kFloat);
      for (int w = 0; w < 3; ++w) syncfree::balanced_sample_gather(features, labels, k);
      std::vector<double> times;
      const auto start = std::chrono::steady_clock::now();
      while (times.size() < 5 || seconds_since(start) < min_time) {
        const auto t0 = std::chrono::steady_clock::now();
        auto out = syncfree::balanced_sample_gather(features, labels, k);
        times.push_back(seconds_since(t0) * 1e3);
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      std::printf("%9lld %4lld %7lld %7zu %11.4f %11.4f..%-11.4f %12.1f\n",
                  static_cast<long long>(n), static_cast<long long>(b),
                  static_cast<long long>(k), times.size(), median, times.front(), times.back(),
                  static_cast<double>(b * n) / (median * 1e3));
      std::fflush(stdout);
    }
  }
  return 0;
}
