// Report of a benchmark run: one Result per implementation and
// configuration, the printed header and table with its legend and LOADED
// lines, and the JSON and CSV files. The formats are documented in
// docs/benchmarks.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "load.h"
#include "options.h"

namespace syncfree {
namespace bench {

struct Result {
  int64_t n, batch, k;
  int threads = 0;  // CPU threads the configuration ran with
  std::string impl;
  bool supported = true;
  std::string note;
  int64_t iters = 0;
  double median_ms = 0, p10_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  double syncs_per_call = -1;  // < 0: not counted (CPU)
  double bytes = 0;
  double speedup = 0;  // naive median / this median
  double vs_floor = 0;  // this median / the floor's median (0: floor not run)
  double other_cpus = -1;  // CPUs other processes used while measuring; < 0: unknown
};

// Bytes every implementation must move at least.
double min_bytes(int64_t rows, int64_t n, int64_t k);

// The lines printed before anything is measured: the run's settings, the
// load average at start, and LOADED if it is too high.
void print_header(const Options& o, int threads, const RunLoad& load);

// The table of results and its legend.
void print_table(const std::vector<Result>& results);

// Per thread count and configuration: syncfree against the floor, its gather
// part (syncfree - syncfree-indices) against index-select, and stratified
// against syncfree, each a ratio of medians measured in the same run; the
// columns whose implementations did not run are left out (n/a).
void print_floor_table(const std::vector<Result>& results);

// " N=..,B=.." for each configuration during which other processes used
// more than kOtherCpusLoaded CPUs; empty when there was none.
std::string loaded_configs(const std::vector<Result>& results);

// The lines printed at the end: the load average at end and the LOADED
// verdicts on it and on the configurations (loaded_configs above).
void print_footer(const RunLoad& load, int threads, bool busy, const std::string& loaded_configs);

void write_json(const std::string& path, const std::vector<Result>& results, const Options& o,
                int threads, const RunLoad& load);
void write_csv(const std::string& path, const std::vector<Result>& results);

}  // namespace bench
}  // namespace syncfree
