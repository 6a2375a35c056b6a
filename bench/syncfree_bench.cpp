// Benchmark CLI: syncfree against the naive and topk samplers.
//
//   syncfree_bench [--device cpu|cuda] [--sizes N,N,...] [--batch-sizes N,N,...]
//                  [--batch B] [--min-time S] [--max-iters I] [--warmup W]
//                  [--threads T] [--impls a,b,...] [--json FILE] [--csv FILE]
//                  [--glibc-malloc-defaults] [--busy-core[=CPU]]
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
// gives the median, the 10th..90th percentile spread, the 99th percentile and
// the maximum, the speedup over the naive sampler measured in the same run, the
// host syncs per call (counted on CUDA with the sync debug mode; n/a on the
// CPU), the achieved bandwidth: the bytes that must move (labels read, features
// of the sample read, sampled features, labels, indices and mask written) over
// the median time, beside a plain copy of the same number of bytes on the same
// device, and the CPUs that other processes used while the configuration was
// measured (from /proc/stat, less this process and its busy process). A p99
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
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <syncfree/syncfree.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
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
// Other processes using more CPUs than this while a configuration is measured
// flag it LOADED.
constexpr double kOtherCpusLoaded = 0.5;

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
  bool busy = false;  // --busy-core: one process spinning on a CPU while measuring
  int busy_cpu = -1;  // --busy-core=CPU: pinned to that CPU; -1: not pinned
};

struct Result {
  int64_t n, batch, k;
  std::string impl;
  bool supported = true;
  std::string note;
  int64_t iters = 0;
  double median_ms = 0, p10_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  double syncs_per_call = -1;  // < 0: not counted (CPU)
  double bytes = 0;
  double copy_ms = 0;  // plain copy of the same bytes, same device
  double speedup = 0;  // naive median / this median
  double other_cpus = -1;  // CPUs other processes used while measuring; < 0: unknown
};

[[noreturn]] void usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", argv0, why.c_str());
  std::fprintf(stderr,
               "usage: %s [--device cpu|cuda] [--sizes N,..] [--batch-sizes N,..] [--batch B]\n"
               "       [--min-time S] [--max-iters I] [--warmup W] [--threads T]\n"
               "       [--impls naive,topk,syncfree,syncfree-indices,topk-graph,syncfree-graph]\n"
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
    static const char* const known[] = {"naive",           "topk",       "syncfree",
                                        "syncfree-indices", "topk-graph", "syncfree-graph"};
    if (std::find(std::begin(known), std::end(known), impl) == std::end(known))
      usage(argv[0], "unknown implementation " + impl);
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

// The 1-, 5- and 15-minute load averages; all negative where /proc/loadavg
// cannot be read.
struct LoadAvg {
  double min1 = -1, min5 = -1, min15 = -1;
  static LoadAvg read() {
    LoadAvg l;
    std::ifstream f("/proc/loadavg");
    if (!(f >> l.min1 >> l.min5 >> l.min15)) l = LoadAvg();
    return l;
  }
  bool known() const { return min1 >= 0; }
  std::string str() const {
    if (!known()) return "unknown (no /proc/loadavg)";
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f (1, 5, 15 min)", min1, min5, min15);
    return buf;
  }
};

// Seconds of CPU time the whole machine spent busy (user, nice, system, irq,
// softirq and steal: time a virtual machine's CPUs were taken away), from
// /proc/stat; negative where it cannot be read.
double machine_busy_seconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long user, nice, system, idle, iowait, irq, softirq, steal = 0;
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq) || cpu != "cpu")
    return -1;
  f >> steal;  // absent on old kernels
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Seconds of CPU time (user + system) of this process, all threads.
double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Seconds process pid has run on a CPU, from /proc/PID/schedstat (in
// nanoseconds); 0 where it cannot be read.
double process_cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/schedstat");
  unsigned long long ns = 0;
  if (!(f >> ns)) return 0;
  return 1e-9 * static_cast<double>(ns);
}

// A process that keeps one CPU busy, spinning, from construction to
// destruction (as a DataLoader worker does beside the training loop); pinned
// to cpu when cpu >= 0. Forked before the benchmark allocates its tensors, so
// that its copy-on-write sharing does not touch them.
class BusyCore {
 public:
  explicit BusyCore(int cpu) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) {
      std::perror("fork");
      std::exit(1);
    }
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark
      if (getppid() != parent) _exit(0);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(1);
      }
      volatile uint64_t spins = 0;
      for (;;) spins = spins + 1;
    }
  }
  ~BusyCore() {
    if (reaped_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;
  // False when the process has already exited (e.g. the CPU it was pinned to
  // is not one this process may use).
  bool running() {
    if (!reaped_ && waitpid(pid_, nullptr, WNOHANG) == pid_) reaped_ = true;
    return !reaped_;
  }
  double cpu_seconds() const { return process_cpu_seconds(pid_); }

 private:
  pid_t pid_;
  bool reaped_ = false;
};

// CPUs used on average by processes other than this one and its busy process
// between construction and other_cpus(); negative where unknown, or where
// under kMinSeconds passed (/proc/stat counts in clock ticks, 10 ms).
class OtherLoad {
 public:
  explicit OtherLoad(const BusyCore* busy) : busy_(busy) { mark(); }
  double other_cpus() const {
    const double machine = machine_busy_seconds();
    if (machine < 0 || machine0_ < 0) return -1;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
    const double others = (machine - machine0_) - (own_cpu_seconds() - own0_) -
                          (busy_ ? busy_->cpu_seconds() - busy0_ : 0.0);
    return wall >= kMinSeconds ? std::max(0.0, others / wall) : -1;
  }
  static constexpr double kMinSeconds = 0.25;

 private:
  void mark() {
    wall0_ = std::chrono::steady_clock::now();
    machine0_ = machine_busy_seconds();
    own0_ = own_cpu_seconds();
    busy0_ = busy_ ? busy_->cpu_seconds() : 0.0;
  }
  const BusyCore* busy_;
  std::chrono::steady_clock::time_point wall0_;
  double machine0_ = -1, own0_ = 0, busy0_ = 0;
};

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

// Machine state of a run: load averages, and whether other processes
// competed for the benchmark's CPUs.
struct RunLoad {
  int cpus = 0;  // online CPUs of the machine
  LoadAvg start, end;
  double threshold = 0;  // a 1-minute load above this, from others, flags LOADED
  double own = 0;        // this benchmark's threads and busy process
  bool loaded_start = false, loaded_end = false;
  bool loaded_configs = false;  // others used over kOtherCpusLoaded during a configuration
};

void write_json(const std::string& path, const std::vector<Result>& results, const Options& o,
                const RunLoad& load) {
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
  auto loadavg = [](const LoadAvg& l) {
    return l.known() ? fmt(l.min1, "[%.2f, ") + fmt(l.min5, "%.2f, ") + fmt(l.min15, "%.2f]")
                     : std::string("null");
  };
  std::fprintf(f,
               "  \"cpus\": %d,\n  \"busy_core\": %s,\n  \"loadavg_start\": %s,\n"
               "  \"loadavg_end\": %s,\n  \"loaded\": %s,\n",
               load.cpus,
               !o.busy ? "null" : o.busy_cpu < 0 ? "\"unpinned\"" : fmt(o.busy_cpu, "%.0f").c_str(),
               loadavg(load.start).c_str(), loadavg(load.end).c_str(),
               load.loaded_start || load.loaded_end || load.loaded_configs ? "true" : "false");
  std::fprintf(f, "  \"feature_dim\": %lld,\n  \"results\": [\n",
               static_cast<long long>(kFeatureDim));
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f,
                 "    {\"n\": %lld, \"batch\": %lld, \"k\": %lld, \"impl\": \"%s\", "
                 "\"supported\": %s, \"note\": \"%s\", \"iters\": %lld, \"median_ms\": %.6f, "
                 "\"p10_ms\": %.6f, \"p90_ms\": %.6f, \"p99_ms\": %.6f, \"max_ms\": %.6f, "
                 "\"speedup_vs_naive\": %.4f, \"syncs_per_call\": %s, \"bytes\": %.0f, "
                 "\"copy_ms\": %.6f, \"other_cpus\": %s}%s\n",
                 static_cast<long long>(r.n), static_cast<long long>(r.batch),
                 static_cast<long long>(r.k), r.impl.c_str(), r.supported ? "true" : "false",
                 r.note.c_str(), static_cast<long long>(r.iters), r.median_ms, r.p10_ms, r.p90_ms,
                 r.p99_ms, r.max_ms, r.speedup,
                 r.syncs_per_call < 0 ? "null" : fmt(r.syncs_per_call, "%.2f").c_str(), r.bytes,
                 r.copy_ms, r.other_cpus < 0 ? "null" : fmt(r.other_cpus, "%.3f").c_str(),
                 i + 1 < results.size() ? "," : "");
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
                  "syncs_per_call,bytes,copy_ms,p99_ms,max_ms,other_cpus\n");
  for (const Result& r : results) {
    std::fprintf(f, "%lld,%lld,%lld,%s,%d,%lld,%.6f,%.6f,%.6f,%.4f,%s,%.0f,%.6f,%.6f,%.6f,%s\n",
                 static_cast<long long>(r.n), static_cast<long long>(r.batch),
                 static_cast<long long>(r.k), r.impl.c_str(), r.supported ? 1 : 0,
                 static_cast<long long>(r.iters), r.median_ms, r.p10_ms, r.p90_ms, r.speedup,
                 r.syncs_per_call < 0 ? "" : fmt(r.syncs_per_call, "%.2f").c_str(), r.bytes,
                 r.copy_ms, r.p99_ms, r.max_ms,
                 r.other_cpus < 0 ? "" : fmt(r.other_cpus, "%.3f").c_str());
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
  // All implementations share one thread count: every CPU by default.
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : static_cast<int>(std::thread::hardware_concurrency()));
  const at::Device device(cuda ? at::kCUDA : at::kCPU);
  const int threads = at::get_num_threads();
  // Others loading the machine by more than half a CPU beyond what the
  // benchmark's threads leave free slow it down.
  load.threshold = std::max(0, load.cpus - threads) + 0.5;
  load.own = threads + (o.busy ? 1 : 0);
  load.loaded_start = load.start.known() && load.start.min1 > load.threshold;

  std::printf("syncfree benchmark | device %s | %d CPU threads | K = N/10, F = %lld, "
              "labels in {0,1} | malloc: %s\n",
              o.device.c_str(), threads, static_cast<long long>(kFeatureDim),
              o.malloc_defaults ? "glibc defaults" : "freed memory kept");
  if (o.busy) {
    std::printf("busy core: one process spinning on %s for the whole run\n",
                o.busy_cpu < 0 ? std::string("a CPU (not pinned)").c_str()
                               : ("CPU " + std::to_string(o.busy_cpu) + " (pinned)").c_str());
  }
  std::printf("load average at start: %s | %d CPUs\n", load.start.str().c_str(), load.cpus);
  if (load.loaded_start) {
    std::printf("LOADED: the 1-minute load average at start, %.2f, exceeds %.1f (the CPUs that "
                "%d benchmark threads leave free, plus 0.5): other processes (or a run that "
                "ended less than a few minutes ago) compete for the CPUs, and timings are "
                "slower and noisier than on a quiet machine; see the others column\n",
                load.start.min1, load.threshold, threads);
  }
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
    const OtherLoad others(busy.get());
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
        r.p99_ms = percentile(ms, 0.99);
        r.max_ms = *std::max_element(ms.begin(), ms.end());
#ifdef SYNCFREE_BENCH_CUDA
        if (cuda) r.syncs_per_call = count_syncs(fn, 3);
#endif
      }
      cfg_results.push_back(r);
    }
    // Over the whole configuration: /proc/stat counts in clock ticks (10 ms).
    const double other_cpus = others.other_cpus();
    for (Result& r : cfg_results) r.other_cpus = other_cpus;
    double naive_ms = 0;
    for (const Result& r : cfg_results)
      if (r.impl == "naive" && r.supported) naive_ms = r.median_ms;
    for (Result& r : cfg_results) {
      if (r.supported && naive_ms > 0) r.speedup = naive_ms / r.median_ms;
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

  std::printf("\n%9s %4s %7s  %-15s %10s %23s %10s %10s %8s %6s %10s %9s %6s\n", "N", "B", "K",
              "impl", "median ms", "p10..p90 ms", "p99 ms", "max ms", "vs naive", "syncs", "GB/s",
              "% of copy", "others");
  for (const Result& r : results) {
    if (!r.supported) {
      std::printf("%9lld %4lld %7lld  %-15s %10s  (%s)\n", static_cast<long long>(r.n),
                  static_cast<long long>(r.batch), static_cast<long long>(r.k), r.impl.c_str(),
                  "-", r.note.c_str());
      continue;
    }
    const double gbps = r.bytes / (r.median_ms * 1e6);
    const double copy_gbps = r.bytes / (r.copy_ms * 1e6);
    std::printf("%9lld %4lld %7lld  %-15s %10.4f %11.4f..%-11.4f %10.4f %10.4f %8s %6s %10.2f "
                "%8.0f%% %6s\n",
                static_cast<long long>(r.n), static_cast<long long>(r.batch),
                static_cast<long long>(r.k), r.impl.c_str(), r.median_ms, r.p10_ms, r.p90_ms,
                r.p99_ms, r.max_ms,
                r.speedup > 0 ? fmt(r.speedup, "%.1fx").c_str() : "n/a",  // n/a: naive not run
                r.syncs_per_call < 0 ? "n/a" : fmt(r.syncs_per_call, "%.1f").c_str(),
                gbps, 100.0 * gbps / copy_gbps,
                r.other_cpus < 0 ? "n/a" : fmt(r.other_cpus, "%.2f").c_str());
  }
  std::printf("\nGB/s: bytes that must move (labels read, sampled features read and written, "
              "labels, indices, mask written) / median time; %% of copy: against a plain copy of "
              "as many bytes on the same device, measured in this run; others: CPUs used on "
              "average by other processes while the configuration ran (this benchmark and its "
              "busy process excluded; n/a: measured for under %.2f s, too short to tell).\n",
              OtherLoad::kMinSeconds);
  std::printf("load average at end: %s (includes this benchmark's %d threads%s)\n",
              load.end.str().c_str(), threads, o.busy ? " and its busy process" : "");
  if (load.loaded_end) {
    std::printf("LOADED: the 1-minute load average at end, %.2f, less %.0f for this benchmark, "
                "exceeds %.1f: other processes competed for the CPUs during the run\n",
                load.end.min1, load.own, load.threshold);
  }
  std::string busy_configs;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    if (r.other_cpus > kOtherCpusLoaded && (i == 0 || results[i - 1].n != r.n ||
                                            results[i - 1].batch != r.batch))
      busy_configs += " N=" + std::to_string(r.n) + ",B=" + std::to_string(r.batch);
  }
  if (!busy_configs.empty()) {
    std::printf("LOADED: other processes used more than %.1f CPUs on average while these "
                "configurations ran:%s\n",
                kOtherCpusLoaded, busy_configs.c_str());
  }
  load.loaded_configs = !busy_configs.empty();
  if (!o.json.empty()) write_json(o.json, results, o, load);
  if (!o.csv.empty()) write_csv(o.csv, results);
  return 0;
}
