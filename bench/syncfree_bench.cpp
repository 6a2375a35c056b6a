// Benchmark CLI: syncfree against the naive and topk samplers.
//
//   syncfree_bench [--device cpu|cuda] [--sizes N,N,...] [--batch-sizes N,N,...]
//                  [--batch B] [--min-time S] [--max-iters I] [--warmup W]
//                  [--threads T] [--impls a,b,...] [--json FILE] [--csv FILE]
//                  [--glibc-malloc-defaults]
//
// Workload (the reference experiments): labels in {0, 1} (int64, half
// positive), K = N / 10, half positives, features [.., N, 16] float32, the
// sampled features and labels gathered. Single rows use N in --sizes, batches
// of --batch rows use N in --batch-sizes. Defaults: CPU, single rows
// N = 1e3..1e6, batches of 32 with N = 1e3..1e5; --device cuda adds N = 1e7 and
// B = 32 x N = 1e6, and CUDA-graph-captured variants of the static samplers.
//
// All implementations run with the same number of CPU threads (--threads;
// default: every CPU). Every implementation is warmed up, then timed call by call (device events on
// CUDA) until --min-time has passed or --max-iters calls were made; the table
// gives the median, the 10th..90th percentile spread, the speedup over the
// naive sampler measured in the same run, the host syncs per call (counted on
// CUDA with the sync debug mode; n/a on the CPU), and the achieved bandwidth:
// the bytes that must move (labels read, features of the sample read, sampled
// features, labels, indices and mask written) over the median time, beside a
// plain copy of the same number of bytes on the same device.
//
// Unless --glibc-malloc-defaults is given, glibc's malloc keeps freed memory in
// the process (no mmap for large blocks, no trimming), as long-running
// training processes effectively do, so that CPU timings measure the samplers
// rather than the kernel's page-fault path.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <malloc.h>
#include <syncfree/syncfree.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "baselines.h"

#ifdef SYNCFREE_BENCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#endif

namespace {

constexpr int64_t kFeatureDim = 16;

struct Options {
  std::string device = "cpu";
  std::vector<int64_t> sizes;
  std::vector<int64_t> batch_sizes;
  int64_t batch = 32;
  double min_time = 0.5;
  int64_t max_iters = 1000;
  int64_t warmup = 3;
  int threads = 0;
  std::vector<std::string> impls = {"naive", "topk", "syncfree"};
  std::string json, csv;
  bool malloc_defaults = false;
};

struct Result {
  int64_t n, batch, k;
  std::string impl;
  bool supported = true;
  std::string note;
  int64_t iters = 0;
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  double syncs_per_call = -1;  // < 0: not counted (CPU)
  double bytes = 0;
  double copy_ms = 0;  // plain copy of the same bytes, same device
  double speedup = 0;  // naive median / this median
};

[[noreturn]] void usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", argv0, why.c_str());
  std::fprintf(stderr,
               "usage: %s [--device cpu|cuda] [--sizes N,..] [--batch-sizes N,..] [--batch B]\n"
               "       [--min-time S] [--max-iters I] [--warmup W] [--threads T]\n"
               "       [--impls naive,topk,syncfree,syncfree-indices,topk-graph,syncfree-graph]\n"
               "       [--json FILE] [--csv FILE] [--glibc-malloc-defaults]\n",
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
    if (a == "--device") {
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
      o.threads = static_cast<int>(parse_size(argv[0], value(i)));
    } else if (a == "--impls") {
      o.impls = split(value(i));
    } else if (a == "--json") {
      o.json = value(i);
    } else if (a == "--csv") {
      o.csv = value(i);
    } else if (a == "--glibc-malloc-defaults") {
      o.malloc_defaults = true;
    } else {
      usage(argv[0], "unknown argument " + a);
    }
  }
  const bool cuda = o.device == "cuda";
  if (!sizes_set) {
    o.sizes = {1000, 10000, 100000, 1000000};
    if (cuda) o.sizes.push_back(10000000);
  }
  if (!batch_sizes_set) {
    o.batch_sizes = {1000, 10000, 100000};
    if (cuda) o.batch_sizes.push_back(1000000);
  }
  if (cuda && o.impls == std::vector<std::string>{"naive", "topk", "syncfree"}) {
    o.impls.push_back("topk-graph");
    o.impls.push_back("syncfree-graph");
  }
  return o;
}

// Times fn call by call; returns per-call milliseconds.
class Timer {
 public:
  explicit Timer(bool cuda) : cuda_(cuda) {}
  std::vector<double> run(const std::function<void()>& fn, const Options& o) {
    std::vector<double> ms;
    const auto start = std::chrono::steady_clock::now();
    while (static_cast<int64_t>(ms.size()) < o.max_iters &&
           (ms.size() < 5 || seconds_since(start) < o.min_time)) {
      ms.push_back(time_one(fn));
    }
    return ms;
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double time_one(const std::function<void()>& fn) {
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
  bool cuda_;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

#ifdef SYNCFREE_BENCH_CUDA
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

// Bytes every implementation must move at least.
double min_bytes(int64_t rows, int64_t n, int64_t k) {
  const double labels_read = static_cast<double>(rows * n) * 8;
  const double per_slot = kFeatureDim * 4.0 /*read*/ + kFeatureDim * 4.0 /*write*/ +
                          8 /*label*/ + 8 /*index*/ + 1 /*valid*/;
  return labels_read + static_cast<double>(rows * k) * per_slot;
}

double copy_ms(const at::Tensor& like, double bytes, bool cuda, const Options& o) {
  const int64_t numel = static_cast<int64_t>(bytes / 2);  // read + write
  const at::Tensor src = at::ones({numel}, like.options().dtype(at::kByte));
  at::Tensor dst = at::empty_like(src);
  Timer timer(cuda);
  for (int i = 0; i < 2; ++i) dst.copy_(src);
  return percentile(timer.run([&] { dst.copy_(src); }, o), 0.5);
}

std::string fmt(double v, const char* spec) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

void write_json(const std::string& path, const std::vector<Result>& results, const Options& o) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"threads\": %d,\n  \"date\": \"%s\",\n",
               o.device.c_str(), at::get_num_threads(), date);
  std::fprintf(f, "  \"feature_dim\": %lld,\n  \"results\": [\n",
               static_cast<long long>(kFeatureDim));
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f,
                 "    {\"n\": %lld, \"batch\": %lld, \"k\": %lld, \"impl\": \"%s\", "
                 "\"supported\": %s, \"note\": \"%s\", \"iters\": %lld, \"median_ms\": %.6f, "
                 "\"p10_ms\": %.6f, \"p90_ms\": %.6f, \"speedup_vs_naive\": %.4f, "
                 "\"syncs_per_call\": %s, \"bytes\": %.0f, \"copy_ms\": %.6f}%s\n",
                 static_cast<long long>(r.n), static_cast<long long>(r.batch),
                 static_cast<long long>(r.k), r.impl.c_str(), r.supported ? "true" : "false",
                 r.note.c_str(), static_cast<long long>(r.iters), r.median_ms, r.p10_ms, r.p90_ms,
                 r.speedup,
                 r.syncs_per_call < 0 ? "null" : fmt(r.syncs_per_call, "%.2f").c_str(), r.bytes,
                 r.copy_ms, i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

void write_csv(const std::string& path, const std::vector<Result>& results) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fprintf(f, "n,batch,k,impl,supported,iters,median_ms,p10_ms,p90_ms,speedup_vs_naive,"
                  "syncs_per_call,bytes,copy_ms\n");
  for (const Result& r : results) {
    std::fprintf(f, "%lld,%lld,%lld,%s,%d,%lld,%.6f,%.6f,%.6f,%.4f,%s,%.0f,%.6f\n",
                 static_cast<long long>(r.n), static_cast<long long>(r.batch),
                 static_cast<long long>(r.k), r.impl.c_str(), r.supported ? 1 : 0,
                 static_cast<long long>(r.iters), r.median_ms, r.p10_ms, r.p90_ms, r.speedup,
                 r.syncs_per_call < 0 ? "" : fmt(r.syncs_per_call, "%.2f").c_str(), r.bytes,
                 r.copy_ms);
  }
  std::fclose(f);
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
  if (!o.malloc_defaults) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, -1);
  }
  // All implementations share one thread count: every CPU by default.
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : static_cast<int>(std::thread::hardware_concurrency()));
  const at::Device device(cuda ? at::kCUDA : at::kCPU);

  std::printf("syncfree benchmark | device %s | %d CPU threads | K = N/10, F = %lld, "
              "labels in {0,1} | malloc: %s\n",
              o.device.c_str(), at::get_num_threads(), static_cast<long long>(kFeatureDim),
              o.malloc_defaults ? "glibc defaults" : "freed memory kept");
  std::vector<Result> results;
  std::vector<std::pair<int64_t, int64_t>> configs;  // (batch, n); batch 0 = single row
  for (int64_t n : o.sizes) configs.push_back({0, n});
  for (int64_t n : o.batch_sizes) configs.push_back({o.batch, n});

  for (const auto& cfg : configs) {
    const int64_t batch = cfg.first, n = cfg.second, k = n / 10;
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
    const double copy = copy_ms(labels, bytes, cuda, o);

    std::vector<Result> cfg_results;
    for (const std::string& impl : o.impls) {
      Result r;
      r.n = n;
      r.batch = rows;
      r.k = k;
      r.impl = impl;
      r.bytes = bytes;
      r.copy_ms = copy;
      std::function<void()> fn;
      at::Tensor keep;  // keeps the last output alive between calls
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
      } else if (impl == "topk-graph" || impl == "syncfree-graph") {
        if (!cuda) {
          r.supported = false;
          r.note = "CUDA graphs need --device cuda";
        }
      } else {
        usage(argv[0], "unknown implementation " + impl);
      }
#ifdef SYNCFREE_BENCH_CUDA
      std::unique_ptr<at::cuda::CUDAGraph> graph;
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
        fn = [&] { graph->replay(); };
      }
#endif
      if (r.supported) {
        for (int64_t i = 0; i < o.warmup; ++i) fn();
        const std::vector<double> ms = Timer(cuda).run(fn, o);
        r.iters = static_cast<int64_t>(ms.size());
        r.median_ms = percentile(ms, 0.5);
        r.p10_ms = percentile(ms, 0.1);
        r.p90_ms = percentile(ms, 0.9);
#ifdef SYNCFREE_BENCH_CUDA
        if (cuda) r.syncs_per_call = count_syncs(fn, 3);
#endif
      }
      cfg_results.push_back(r);
    }
    double naive_ms = 0;
    for (const Result& r : cfg_results)
      if (r.impl == "naive" && r.supported) naive_ms = r.median_ms;
    for (Result& r : cfg_results) {
      if (r.supported && naive_ms > 0) r.speedup = naive_ms / r.median_ms;
      results.push_back(r);
    }
  }

  std::printf("\n%9s %4s %7s  %-15s %10s %23s %8s %6s %10s %9s\n", "N", "B", "K", "impl",
              "median ms", "p10..p90 ms", "vs naive", "syncs", "GB/s", "% of copy");
  for (const Result& r : results) {
    if (!r.supported) {
      std::printf("%9lld %4lld %7lld  %-15s %10s  (%s)\n", static_cast<long long>(r.n),
                  static_cast<long long>(r.batch), static_cast<long long>(r.k), r.impl.c_str(),
                  "-", r.note.c_str());
      continue;
    }
    const double gbps = r.bytes / (r.median_ms * 1e6);
    const double copy_gbps = r.bytes / (r.copy_ms * 1e6);
    std::printf("%9lld %4lld %7lld  %-15s %10.4f %11.4f..%-11.4f %8s %6s %10.2f %8.0f%%\n",
                static_cast<long long>(r.n), static_cast<long long>(r.batch),
                static_cast<long long>(r.k), r.impl.c_str(), r.median_ms, r.p10_ms, r.p90_ms,
                r.speedup > 0 ? fmt(r.speedup, "%.1fx").c_str() : "n/a",  // n/a: naive not run
                r.syncs_per_call < 0 ? "n/a" : fmt(r.syncs_per_call, "%.1f").c_str(),
                gbps, 100.0 * gbps / copy_gbps);
  }
  std::printf("\nGB/s: bytes that must move (labels read, sampled features read and written, "
              "labels, indices, mask written) / median time; %% of copy: against a plain copy of "
              "as many bytes on the same device, measured in this run.\n");
  if (!o.json.empty()) write_json(o.json, results, o);
  if (!o.csv.empty()) write_csv(o.csv, results);
  return 0;
}
