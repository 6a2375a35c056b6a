// What a benchmark run measures: the workload's fixed feature width and the
// options of the command line (parsed in syncfree_bench.cpp, which documents
// them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace syncfree {
namespace bench {

// Features are [.., N, kFeatureDim] float32.
constexpr int64_t kFeatureDim = 16;

// The floor's sets of random rows, taken in turn, one a call (bench.py's
// FLOOR_ROW_SETS): enough that the sets a call does not read hold more rows
// than a core's L2 cache where a set's rows are a sizeable part of it (one
// row of 1e5: 640 kB of rows a set; the features of smaller rows fit the
// caches whole). With the same rows at every call, the
// floor read them from the caches, where a sampler reads other rows at each
// call (docs/benchmarks.md, 2026-12-04).
constexpr int kFloorRowSets = 16;

struct Options {
  std::string device = "cpu";
  std::vector<int64_t> sizes;
  std::vector<int64_t> batch_sizes;
  int64_t batch = 32;
  double min_time = 0.5;
  int64_t max_iters = 1000;
  int64_t warmup = 3;
  // Thread counts to run every configuration with; empty: the device's
  // defaults (syncfree_bench.cpp).
  std::vector<int> threads;
  // Each configuration's implementations are timed in this many rounds, in
  // turn (about min_time / rounds each per round), so that a slow spell of
  // the machine falls on all of them.
  int64_t rounds = 3;
  // Empty: the device's defaults (syncfree_bench.cpp).
  std::vector<std::string> impls;
  // --full: on the CPU, the whole sweep (every size, implementation and both
  // thread counts) instead of the headline table.
  bool full = false;
  std::string json, csv;
  bool malloc_defaults = false;
  bool busy = false;  // --busy-core: one process spinning on a CPU while measuring
  int busy_cpu = -1;  // --busy-core=CPU: pinned to that CPU; -1: not pinned
};

}  // namespace bench
}  // namespace syncfree
