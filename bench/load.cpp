#include "load.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace syncfree {
namespace bench {

LoadAvg LoadAvg::read() {
  LoadAvg l;
  std::ifstream f("/proc/loadavg");
  if (!(f >> l.min1 >> l.min5 >> l.min15)) l = LoadAvg();
  return l;
}

std::string LoadAvg::str() const {
  if (!known()) return "unknown (no /proc/loadavg)";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f (1, 5, 15 min)", min1, min5, min15);
  return buf;
}

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

double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double process_cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/schedstat");
  unsigned long long ns = 0;
  if (!(f >> ns)) return 0;
  return 1e-9 * static_cast<double>(ns);
}

BusyCore::BusyCore(int cpu) {
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

BusyCore::~BusyCore() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

bool BusyCore::running() {
  if (!reaped_ && waitpid(pid_, nullptr, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

double OtherLoad::other_cpus() const {
  const double machine = machine_busy_seconds();
  if (machine < 0 || machine0_ < 0) return -1;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
  const double others = (machine - machine0_) - (own_cpu_seconds() - own0_) -
                        (busy_ ? busy_->cpu_seconds() - busy0_ : 0.0);
  return wall >= kMinSeconds ? std::max(0.0, others / wall) : -1;
}

void OtherLoad::mark() {
  wall0_ = std::chrono::steady_clock::now();
  machine0_ = machine_busy_seconds();
  own0_ = own_cpu_seconds();
  busy0_ = busy_ ? busy_->cpu_seconds() : 0.0;
}

}  // namespace bench
}  // namespace syncfree
