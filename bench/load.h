// Load accounting of a benchmark run: the load averages at start and end, the
// CPU time other processes take while a configuration is measured, and the
// busy process of --busy-core. Linux only (/proc); no torch.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace syncfree {
namespace bench {

// Other processes using more CPUs than this while a configuration is measured
// flag it LOADED.
constexpr double kOtherCpusLoaded = 0.5;

// The 1-, 5- and 15-minute load averages; all negative where /proc/loadavg
// cannot be read.
struct LoadAvg {
  double min1 = -1, min5 = -1, min15 = -1;
  static LoadAvg read();
  bool known() const { return min1 >= 0; }
  std::string str() const;
};

// Seconds of CPU time the whole machine spent busy (user, nice, system, irq,
// softirq and steal: time a virtual machine's CPUs were taken away), from
// /proc/stat; negative where it cannot be read.
double machine_busy_seconds();

// Seconds of CPU time (user + system) of this process, all threads.
double own_cpu_seconds();

// Seconds process pid has run on a CPU, from /proc/PID/schedstat (in
// nanoseconds); 0 where it cannot be read.
double process_cpu_seconds(pid_t pid);

// A process that keeps one CPU busy, spinning, from construction to
// destruction (as a DataLoader worker does beside the training loop); pinned
// to cpu when cpu >= 0. Forked before the benchmark allocates its tensors, so
// that its copy-on-write sharing does not touch them.
class BusyCore {
 public:
  explicit BusyCore(int cpu);
  ~BusyCore();
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;
  // False when the process has already exited (e.g. the CPU it was pinned to
  // is not one this process may use).
  bool running();
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
  double other_cpus() const;
  static constexpr double kMinSeconds = 0.25;

 private:
  void mark();
  const BusyCore* busy_;
  std::chrono::steady_clock::time_point wall0_;
  double machine0_ = -1, own0_ = 0, busy0_ = 0;
};

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

}  // namespace bench
}  // namespace syncfree
