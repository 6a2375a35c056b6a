#include "report.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace syncfree {
namespace bench {
namespace {

std::string fmt(double v, const char* spec) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

}  // namespace

double min_bytes(int64_t rows, int64_t n, int64_t k) {
  const double labels_read = static_cast<double>(rows * n) * 8;
  const double per_slot = kFeatureDim * 4.0 /*read*/ + kFeatureDim * 4.0 /*write*/ +
                          8 /*label*/ + 8 /*index*/ + 1 /*valid*/;
  return labels_read + static_cast<double>(rows * k) * per_slot;
}

void print_header(const Options& o, int threads, const RunLoad& load) {
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
}

void print_table(const std::vector<Result>& results) {
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
}

std::string loaded_configs(const std::vector<Result>& results) {
  std::string configs;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    if (r.other_cpus > kOtherCpusLoaded && (i == 0 || results[i - 1].n != r.n ||
                                            results[i - 1].batch != r.batch))
      configs += " N=" + std::to_string(r.n) + ",B=" + std::to_string(r.batch);
  }
  return configs;
}

void print_footer(const RunLoad& load, int threads, bool busy,
                  const std::string& loaded_configs) {
  std::printf("load average at end: %s (includes this benchmark's %d threads%s)\n",
              load.end.str().c_str(), threads, busy ? " and its busy process" : "");
  if (load.loaded_end) {
    std::printf("LOADED: the 1-minute load average at end, %.2f, less %.0f for this benchmark, "
                "exceeds %.1f: other processes competed for the CPUs during the run\n",
                load.end.min1, load.own, load.threshold);
  }
  if (!loaded_configs.empty()) {
    std::printf("LOADED: other processes used more than %.1f CPUs on average while these "
                "configurations ran:%s\n",
                kOtherCpusLoaded, loaded_configs.c_str());
  }
}

void write_json(const std::string& path, const std::vector<Result>& results, const Options& o,
                int threads, const RunLoad& load) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"threads\": %d,\n  \"date\": \"%s\",\n",
               o.device.c_str(), threads, date);
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

}  // namespace bench
}  // namespace syncfree
