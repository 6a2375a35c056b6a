// Benchmark CLI: syncfree against the naive and topk samplers.
//
//   syncfree_bench [--full] [--device cpu|cuda] [--sizes N,N,...] [--batch-sizes N,N,...]
//                  [--batch B] [--min-time S] [--max-iters I] [--warmup W]
//                  [--threads T,T,...] [--rounds R] [--impls a,b,...] [--json FILE]
//                  [--csv FILE] [--glibc-malloc-defaults] [--busy-core[=CPU]]
//
// Workload (the reference experiments): labels in {0, 1} (int64, half
// positive), K = N / 10, half positives, features [.., N, 16] float32, the
// sampled features and labels gathered. Single rows use N in --sizes, batches
// of --batch rows use N in --batch-sizes.
//
// Defaults on the CPU: the headline table, a run of one to two minutes on a
// quiet machine: single rows N = 1e4, 1e5, 1e6 and batches of 32 with
// N = 1e4, 1e5; naive, topk, syncfree and floor; one thread count, torch's
// default (at::get_num_threads(): every CPU unless OMP_NUM_THREADS says
// otherwise).
// --full: the whole sweep, single rows N = 1e3..1e6 and batches of 32 with
// N = 1e3..1e5, every implementation but the graph variants, each
// configuration with 1 thread and then every CPU. On CUDA, with or without
// --full: single rows N = 1e3..1e7, batches of 32 with N = 1e3..1e6, naive,
// topk, syncfree and CUDA-graph-captured variants of the static samplers,
// every CPU. --sizes, --batch-sizes, --impls and --threads replace the
// defaults they name.
//
// Implementations (--impls): naive, topk, syncfree (balanced_sample_gather),
// syncfree-indices (balanced_sample alone), stratified
// (stratified_sample_gather with two classes, quotas K/2 and K/2 and fill:
// the same quotas on the same rows), floor (the least any sampler must do:
// count_nonzero over all the labels, then index_select of K random feature
// rows per row, the random indices drawn before timing, other rows at each
// call: kFloorRowSets sets taken in turn; count_nonzero
// without a dim, ATen's fastest read of the labels: with dim=-1, per row, it
// takes about 4x as long in torch 2.13), index-select (that
// index_select alone), and on CUDA topk-graph and syncfree-graph (defaults
// above).
//
// Every configuration runs with each thread count of --threads, all
// implementations with the same count. Every implementation is warmed up,
// then timed call by call (device events on CUDA) in --rounds rounds (default
// 3): in each round every implementation in turn is timed until --min-time /
// rounds has passed or --max-iters / rounds calls were made, and the rounds'
// calls are pooled, so that a slow spell of a shared machine falls on all of
// them. The table
// gives the median, the 10th..90th percentile spread, the 99th percentile and
// the maximum, the speedup over the naive sampler measured in the same run, the
// time over the floor's measured in the same run (vs floor), the
// host syncs per call (counted on CUDA with the sync debug mode; n/a on the
// CPU), the achieved bandwidth: the bytes that must move (labels read, features
// of the sample read, sampled features, labels, indices and mask written) over
// the median time, and the CPUs that other processes used while the
// configuration was measured (from /proc/stat, less this process and its busy
// process). A p99
// needs a few thousand calls to mean much: raise --max-iters and --min-time.
//
// Tail latency under CPU contention: --busy-core starts, before anything is
// measured, a process that spins on one CPU until the benchmark ends, as a
// DataLoader worker does beside the training loop; --busy-core=CPU pins it to
// that CPU (unpinned by default).
//
// Load: the 1-, 5- and 15-minute load averages (/proc/loadavg) are printed at
// start and at end. The results are flagged LOADED when other processes
// compete for the CPUs the benchmark uses: the 1-minute load average at start
// (before the busy process exists) exceeds the CPUs the benchmark's threads
// leave free by more than half a CPU, or the one at end does so once this
// benchmark's own threads and busy process are taken off it (a benchmark run
// in the minute before counts as load too), or other processes used more than
// half a CPU on average while a configuration was measured (the "others"
// column).
//
// Unless --glibc-malloc-defaults is given, glibc's malloc keeps freed memory in
// the process (no mmap for large blocks, no trimming), as long-running
// training processes effectively do, so that CPU timings measure the samplers
// rather than the kernel's page-fault path.
//
// This file is the command line and the run loop; timing.h times the calls,
// load.h accounts for the machine's load and runs the busy process, and
// report.h prints the tables (the second: syncfree against the floor, its
// gather part against index_select, stratified against syncfree, per thread
// count) and writes the JSON and CSV files.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <malloc.h>
#include <sched.h>
#include <syncfree/syncfree.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "baselines.h"
#include "load.h"
#include "options.h"
#include "report.h"
#include "timing.h"

#ifdef SYNCFREE_BENCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

using namespace syncfree::bench;

namespace {

[[noreturn]] void usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", argv0, why.c_str());
  std::fprintf(stderr,
               "usage: %s [--full] [--device cpu|cuda] [--sizes N,..] [--batch-sizes N,..] [--batch B]\n"
               "       [--min-time S] [--max-iters I] [--warmup W] [--threads T,..] [--rounds R]\n"
               "       [--impls naive,topk,syncfree,syncfree-indices,stratified,floor,\n"
               "                index-select,topk-graph,syncfree-graph]\n"
               "       [--json FILE] [--csv FILE] [--glibc-malloc-defaults] [--busy-core[=CPU]]\n",
               argv0);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int64_t parse_size(const char* argv0, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);  // accepts 1e6
  if (end == s.c_str() || *end != '\0' || !(v >= 1) || v > 1e12 || v != std::floor(v))
    usage(argv0, "bad size '" + s + "' (expected a positive integer such as 1000 or 1e6)");
  return static_cast<int64_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  bool sizes_set = false, batch_sizes_set = false;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage(argv[0], std::string("missing value for ") + argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--full") {
      o.full = true;
    } else if (a == "--device") {
      o.device = value(i);
      if (o.device != "cpu" && o.device != "cuda") usage(argv[0], "--device must be cpu or cuda");
    } else if (a == "--sizes") {
      o.sizes.clear();
      for (const auto& s : split(value(i))) o.sizes.push_back(parse_size(argv[0], s));
      sizes_set = true;
    } else if (a == "--batch-sizes") {
      o.batch_sizes.clear();
      for (const auto& s : split(value(i))) o.batch_sizes.push_back(parse_size(argv[0], s));
      batch_sizes_set = true;
    } else if (a == "--batch") {
      o.batch = parse_size(argv[0], value(i));
    } else if (a == "--min-time") {
      o.min_time = std::atof(value(i).c_str());
    } else if (a == "--max-iters") {
      o.max_iters = parse_size(argv[0], value(i));
    } else if (a == "--warmup") {
      o.warmup = std::atoll(value(i).c_str());
    } else if (a == "--threads") {
      o.threads.clear();
      for (const auto& t : split(value(i))) o.threads.push_back(static_cast<int>(parse_size(argv[0], t)));
    } else if (a == "--rounds") {
      o.rounds = parse_size(argv[0], value(i));
    } else if (a == "--impls") {
      o.impls = split(value(i));
    } else if (a == "--json") {
      o.json = value(i);
    } else if (a == "--csv") {
      o.csv = value(i);
    } else if (a == "--glibc-malloc-defaults") {
      o.malloc_defaults = true;
    } else if (a == "--busy-core") {
      o.busy = true;
    } else if (a.rfind("--busy-core=", 0) == 0) {
      const std::string cpu = a.substr(std::strlen("--busy-core="));
      char* end = nullptr;
      const long v = std::strtol(cpu.c_str(), &end, 10);
      if (cpu.empty() || *end != '\0' || v < 0 || v >= CPU_SETSIZE)
        usage(argv[0], "bad CPU '" + cpu + "' for --busy-core (expected a CPU number such as 0)");
      o.busy = true;
      o.busy_cpu = static_cast<int>(v);
    } else {
      usage(argv[0], "unknown argument " + a);
    }
  }
  for (const std::string& impl : o.impls) {
    static const char* const known[] = {"naive",      "topk",         "syncfree",
                                        "syncfree-indices", "stratified", "floor",
                                        "index-select", "topk-graph", "syncfree-graph"};
    if (std::find(std::begin(known), std::end(known), impl) == std::end(known))
      usage(argv[0], "unknown implementation " + impl);
  }
  // The defaults (documented at the top of this file): the headline table on
  // the CPU, the whole sweep with --full and on CUDA.
  const bool cuda = o.device == "cuda";
  const bool headline = !cuda && !o.full;
  if (!sizes_set) {
    o.sizes = {10000, 100000, 1000000};
    if (!headline) o.sizes.insert(o.sizes.begin(), 1000);
    if (cuda) o.sizes.push_back(10000000);
  }
  if (!batch_sizes_set) {
    o.batch_sizes = {10000, 100000};
    if (!headline) o.batch_sizes.insert(o.batch_sizes.begin(), 1000);
    if (cuda) o.batch_sizes.push_back(1000000);
  }
  if (o.impls.empty()) {
    o.impls = {"naive", "topk", "syncfree"};
    if (cuda) {
      o.impls.push_back("topk-graph");
      o.impls.push_back("syncfree-graph");
    } else if (headline) {
      o.impls.push_back("floor");
    } else {
      for (const char* impl : {"syncfree-indices", "stratified", "floor", "index-select"})
        o.impls.push_back(impl);
    }
  }
  if (o.threads.empty()) {
    if (headline) {
      o.threads.push_back(at::get_num_threads());
    } else {
      const int all = static_cast<int>(std::thread::hardware_concurrency());
      if (!cuda && all > 1) o.threads.push_back(1);
      o.threads.push_back(all);
    }
  }
  return o;
}

// Measures every implementation of o.impls on one configuration: rows of n
// labels, batch of them (0: a single row [n]), K = n / 10.
std::vector<Result> run_config(const Options& o, int64_t batch, int64_t n,
                               const at::Device& device, const BusyCore* busy,
                               const char* argv0) {
  const bool cuda = o.device == "cuda";
  const int64_t k = n / 10;
  const int64_t rows = batch == 0 ? 1 : batch;
  std::fprintf(stderr, "[bench] N=%lld B=%lld K=%lld ...\n", static_cast<long long>(n),
               static_cast<long long>(rows), static_cast<long long>(k));
  at::manual_seed(0);
  std::vector<int64_t> lshape = {n}, fshape = {n, kFeatureDim};
  if (batch > 0) {
    lshape.insert(lshape.begin(), batch);
    fshape.insert(fshape.begin(), batch);
  }
  const at::Tensor labels = at::randint(0, 2, lshape, at::TensorOptions(device).dtype(at::kLong));
  const at::Tensor features = at::randn(fshape, at::TensorOptions(device).dtype(at::kFloat));
  const double bytes = min_bytes(rows, n, k);
  // The floor's random rows: kFloorRowSets sets of K per row, drawn once, as
  // flat row numbers of features viewed as [rows * N, F]; each call of the
  // floor (and of index-select) takes the next set, so that it reads other
  // rows than the call before it, as a sampler's calls do.
  const auto index_opts = at::TensorOptions(device).dtype(at::kLong);
  const at::Tensor first = at::arange(rows, index_opts).unsqueeze(1) * n;
  std::vector<at::Tensor> row_sets;
  for (int s = 0; s < kFloorRowSets; ++s) {
    row_sets.push_back((at::randint(0, n, {rows, k}, index_opts) + first).reshape({rows * k}));
  }
  size_t next_set = 0;
  const auto flat_rows = [&]() -> const at::Tensor& {
    const at::Tensor& set = row_sets[next_set];
    next_set = (next_set + 1) % row_sets.size();
    return set;
  };
  const at::Tensor flat_features = features.reshape({rows * n, kFeatureDim});
  // stratified_sample_gather's quotas: K / 2 for each class, as balanced_sample's.
  const at::Tensor class_quota = at::full({2}, k / 2, index_opts);

  std::vector<Result> cfg_results;
  std::vector<std::function<void()>> fns;
  std::vector<at::Tensor> keeps(o.impls.size());  // the last output of each, alive between calls
#ifdef SYNCFREE_BENCH_CUDA
  // The captured graphs, alive as long as the calls that replay them.
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs(o.impls.size());
#endif
  const OtherLoad others(busy);
  for (size_t impl_i = 0; impl_i < o.impls.size(); ++impl_i) {
    const std::string& impl = o.impls[impl_i];
    Result r;
    r.n = n;
    r.batch = rows;
    r.k = k;
    r.threads = at::get_num_threads();
    r.impl = impl;
    r.bytes = bytes;
    std::function<void()> fn;
    at::Tensor& keep = keeps[impl_i];
    if (impl == "naive") {
      fn = [&] {
        keep = (batch == 0 ? syncfree::baselines::naive_sample(features, labels, k)
                           : syncfree::baselines::naive_sample_batched(features, labels, k))
                   .features;
      };
    } else if (impl == "topk") {
      fn = [&] { keep = syncfree::baselines::topk_sample(features, labels, k).features; };
    } else if (impl == "syncfree") {
      fn = [&] { keep = std::get<0>(syncfree::balanced_sample_gather(features, labels, k)); };
    } else if (impl == "syncfree-indices") {  // sampling alone, no gather
      fn = [&] { keep = std::get<0>(syncfree::balanced_sample(labels, k)); };
    } else if (impl == "stratified") {
      fn = [&] {
        keep = std::get<0>(syncfree::stratified_sample_gather(features, labels, k, class_quota));
      };
    } else if (impl == "floor") {  // count the labels, gather K random rows per row
      fn = [&] {
        keep = at::count_nonzero(labels);  // one reduction: 4x faster than per row (dim=-1)
        keep = flat_features.index_select(0, flat_rows());
      };
    } else if (impl == "index-select") {
      fn = [&] { keep = flat_features.index_select(0, flat_rows()); };
    } else if (impl == "topk-graph" || impl == "syncfree-graph") {
      if (!cuda) {
        r.supported = false;
        r.note = "CUDA graphs need --device cuda";
      }
    } else {
      usage(argv0, "unknown implementation " + impl);
    }
#ifdef SYNCFREE_BENCH_CUDA
    std::unique_ptr<at::cuda::CUDAGraph>& graph = graphs[impl_i];
    if (cuda && (impl == "topk-graph" || impl == "syncfree-graph")) {
      const bool topk = impl == "topk-graph";
      auto body = [&, topk] {
        keep = topk ? syncfree::baselines::topk_sample(features, labels, k).features
                    : std::get<0>(syncfree::balanced_sample_gather(features, labels, k));
      };
      {
        // Warm up on a side stream, then capture one call.
        c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
        c10::cuda::CUDAStreamGuard guard(side);
        for (int i = 0; i < 3; ++i) body();
        graph = std::make_unique<at::cuda::CUDAGraph>();
        graph->capture_begin();
        body();
        graph->capture_end();
      }
      c10::cuda::device_synchronize();
      fn = [replayed = graph.get()] { replayed->replay(); };
    }
#endif
    if (r.supported) {
      for (int64_t i = 0; i < o.warmup; ++i) fn();
    }
    fns.push_back(fn);
    cfg_results.push_back(r);
  }
  // Rounds: every implementation in turn, each round a share of the time.
  Options share = o;
  share.min_time = o.min_time / static_cast<double>(o.rounds);
  share.max_iters = std::max<int64_t>(1, o.max_iters / o.rounds);
  std::vector<std::vector<double>> times(o.impls.size());
  for (int64_t round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < o.impls.size(); ++i) {
      if (!cfg_results[i].supported) continue;
      const std::vector<double> ms = Timer(cuda).run(fns[i], share);
      times[i].insert(times[i].end(), ms.begin(), ms.end());
    }
  }
  for (size_t i = 0; i < o.impls.size(); ++i) {
    Result& r = cfg_results[i];
    if (!r.supported) continue;
    const std::vector<double>& ms = times[i];
    r.iters = static_cast<int64_t>(ms.size());
    r.median_ms = percentile(ms, 0.5);
    r.p10_ms = percentile(ms, 0.1);
    r.p90_ms = percentile(ms, 0.9);
    r.p99_ms = percentile(ms, 0.99);
    r.max_ms = *std::max_element(ms.begin(), ms.end());
#ifdef SYNCFREE_BENCH_CUDA
    if (cuda) r.syncs_per_call = count_syncs(fns[i], 3);
#endif
  }
  // Over the whole configuration: /proc/stat counts in clock ticks (10 ms).
  const double other_cpus = others.other_cpus();
  for (Result& r : cfg_results) r.other_cpus = other_cpus;
  double naive_ms = 0, floor_ms = 0;
  for (const Result& r : cfg_results) {
    if (r.impl == "naive" && r.supported) naive_ms = r.median_ms;
    if (r.impl == "floor" && r.supported) floor_ms = r.median_ms;
  }
  for (Result& r : cfg_results) {
    if (r.supported && naive_ms > 0) r.speedup = naive_ms / r.median_ms;
    if (r.supported && floor_ms > 0) r.vs_floor = r.median_ms / floor_ms;
  }
  return cfg_results;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const bool cuda = o.device == "cuda";
#ifndef SYNCFREE_BENCH_CUDA
  if (cuda) {
    std::fprintf(stderr, "%s: this build's torch has no CUDA support; --device cuda needs one\n",
                 argv[0]);
    return 2;
  }
#endif
  // The machine's load before this benchmark adds any (its busy process included).
  RunLoad load;
  load.start = LoadAvg::read();
  load.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (o.busy && o.busy_cpu >= 0) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && !CPU_ISSET(o.busy_cpu, &allowed))
      usage(argv[0], "--busy-core=" + std::to_string(o.busy_cpu) +
                         ": not a CPU this process may run on");
  }
  std::unique_ptr<BusyCore> busy;
  if (o.busy) busy = std::make_unique<BusyCore>(o.busy_cpu);

  if (!o.malloc_defaults) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, -1);
  }
  // All implementations of a configuration share one thread count; the load
  // tests take the largest of the run.
  const at::Device device(cuda ? at::kCUDA : at::kCPU);
  const int threads = *std::max_element(o.threads.begin(), o.threads.end());
  // Others loading the machine by more than half a CPU beyond what the
  // benchmark's threads leave free slow it down.
  load.threshold = std::max(0, load.cpus - threads) + 0.5;
  load.own = threads + (o.busy ? 1 : 0);
  load.loaded_start = load.start.known() && load.start.min1 > load.threshold;
  print_header(o, threads, load);

  std::vector<Result> results;
  std::vector<std::pair<int64_t, int64_t>> configs;  // (batch, n); batch 0 = single row
  for (int64_t n : o.sizes) configs.push_back({0, n});
  for (int64_t n : o.batch_sizes) configs.push_back({o.batch, n});
  for (int t : o.threads) {
    at::set_num_threads(t);
    for (const auto& cfg : configs) {
      for (const Result& r : run_config(o, cfg.first, cfg.second, device, busy.get(), argv[0]))
        results.push_back(r);
    }
  }

  if (busy && !busy->running()) {
    std::fprintf(stderr, "%s: the busy process stopped early\n", argv[0]);
    return 1;
  }
  busy.reset();
  load.end = LoadAvg::read();
  load.loaded_end = load.end.known() && load.end.min1 - load.own > load.threshold;

  print_table(results);
  print_floor_table(results);
  const std::string busy_configs = loaded_configs(results);
  print_footer(load, threads, o.busy, busy_configs);
  load.loaded_configs = !busy_configs.empty();
  if (!o.json.empty()) write_json(o.json, results, o, threads, load);
  if (!o.csv.empty()) write_csv(o.csv, results);
  return 0;
}
