#include "report.h"

#include <algorithm>
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
  std::string thread_list;
  for (int t : o.threads) thread_list += (thread_list.empty() ? "" : ",") + std::to_string(t);
  std::printf("syncfree benchmark | device %s | CPU threads %s | K = N/10, F = %lld, "
              "labels in {0,1} | malloc: %s | %lld rounds\n",
              o.device.c_str(), thread_list.c_str(), static_cast<long long>(kFeatureDim),
              o.malloc_defaults ? "glibc defaults" : "freed memory kept",
              static_cast<long long>(o.rounds));
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
  std::printf("\n%3s %9s %4s %7s  %-16s %10s %23s %10s %10s %8s %8s %6s %10s %6s\n", "thr",
              "N", "B", "K", "impl", "median ms", "p10..p90 ms", "p99 ms", "max ms", "vs naive",
              "vs floor", "syncs", "GB/s", "others");
  for (const Result& r : results) {
    if (!r.supported) {
      std::printf("%3d %9lld %4lld %7lld  %-16s %10s  (%s)\n", r.threads, static_cast<long long>(r.n),
                  static_cast<long long>(r.batch), static_cast<long long>(r.k), r.impl.c_str(),
                  "-", r.note.c_str());
      continue;
    }
    const double gbps = r.bytes / (r.median_ms * 1e6);
    std::printf("%3d %9lld %4lld %7lld  %-16s %10.4f %11.4f..%-11.4f %10.4f %10.4f %8s %8s %6s "
                "%10.2f %6s\n",
                r.threads, static_cast<long long>(r.n), static_cast<long long>(r.batch),
                static_cast<long long>(r.k), r.impl.c_str(), r.median_ms, r.p10_ms, r.p90_ms,
                r.p99_ms, r.max_ms,
                r.speedup > 0 ? fmt(r.speedup, "%.1fx").c_str() : "n/a",  // n/a: naive not run
                r.vs_floor > 0 ? fmt(r.vs_floor, "%.2fx").c_str() : "n/a",  // n/a: floor not run
                r.syncs_per_call < 0 ? "n/a" : fmt(r.syncs_per_call, "%.1f").c_str(),
                gbps,
                r.other_cpus < 0 ? "n/a" : fmt(r.other_cpus, "%.2f").c_str());
  }
  std::printf("\nvs floor: this median over the floor's (count_nonzero over the labels + "
              "index_select of K random feature rows per row, other rows at each call), measured in this run. "
              "GB/s: bytes that must move (labels read, sampled features read and written, "
              "labels, indices, mask written) / median time; others: CPUs used on "
              "average by other processes while the configuration ran (this benchmark and its "
              "busy process excluded; n/a: measured for under %.2f s, too short to tell).\n",
              OtherLoad::kMinSeconds);
}

void print_floor_table(const std::vector<Result>& results) {
  auto find = [&](const Result& like, const char* impl) -> const Result* {
    for (const Result& r : results)
      if (r.threads == like.threads && r.n == like.n && r.batch == like.batch && r.impl == impl &&
          r.supported)
        return &r;
    return nullptr;
  };
  auto ratio = [](double a, double b) { return a > 0 && b > 0 ? fmt(a / b, "%.2fx") : "n/a"; };
  auto ms = [](const Result* r) { return r ? fmt(r->median_ms, "%.4f") : "n/a"; };
  bool header = false;
  for (const Result& r : results) {
    if (r.impl != "syncfree" || !r.supported) continue;
    const Result* floor = find(r, "floor");
    const Result* indices = find(r, "syncfree-indices");
    const Result* select = find(r, "index-select");
    const Result* strat = find(r, "stratified");
    if (!floor && !(indices && select) && !strat) continue;
    if (!header) {
      std::printf("\nsyncfree against the floor (medians in ms, ratios of medians of this run)\n"
                  "%3s %9s %4s  %10s %10s %8s  %10s %10s %8s  %10s %8s\n",
                  "thr", "N", "B", "syncfree", "floor", "x floor", "gather", "idx_select",
                  "x select", "stratified", "x sf");
      header = true;
    }
    const double gather = indices ? r.median_ms - indices->median_ms : -1;
    std::printf("%3d %9lld %4lld  %10.4f %10s %8s  %10s %10s %8s  %10s %8s\n", r.threads,
                static_cast<long long>(r.n), static_cast<long long>(r.batch), r.median_ms,
                ms(floor).c_str(), ratio(r.median_ms, floor ? floor->median_ms : 0).c_str(),
                indices ? fmt(gather, "%.4f").c_str() : "n/a", ms(select).c_str(),
                ratio(gather, select ? select->median_ms : 0).c_str(), ms(strat).c_str(),
                ratio(strat ? strat->median_ms : 0, r.median_ms).c_str());
  }
  if (header) {
    std::printf("x floor: syncfree (balanced_sample_gather) over the floor; gather: its gather "
                "part, syncfree - syncfree-indices (balanced_sample alone); x select: that over "
                "index_select of as many random rows, other rows at each call; x sf: stratified_sample_gather (two "
                "classes, the same quotas) over syncfree.\n");
  }
}

std::string loaded_configs(const std::vector<Result>& results) {
  std::string configs;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    if (r.other_cpus > kOtherCpusLoaded &&
        (i == 0 || results[i - 1].n != r.n || results[i - 1].batch != r.batch ||
         results[i - 1].threads != r.threads))
      configs += " N=" + std::to_string(r.n) + ",B=" + std::to_string(r.batch) +
                 ",threads=" + std::to_string(r.threads);
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
                 "    {\"n\": %lld, \"batch\": %lld, \"k\": %lld, \"threads\": %d, \"impl\": \"%s\", "
                 "\"supported\": %s, \"note\": \"%s\", \"iters\": %lld, \"median_ms\": %.6f, "
                 "\"p10_ms\": %.6f, \"p90_ms\": %.6f, \"p99_ms\": %.6f, \"max_ms\": %.6f, "
                 "\"speedup_vs_naive\": %.4f, \"vs_floor\": %.4f, \"syncs_per_call\": %s, \"bytes\": %.0f, "
                 "\"other_cpus\": %s}%s\n",
                 static_cast<long long>(r.n), static_cast<long long>(r.batch),
                 static_cast<long long>(r.k), r.threads, r.impl.c_str(),
                 r.supported ? "true" : "false", r.note.c_str(), static_cast<long long>(r.iters),
                 r.median_ms, r.p10_ms, r.p90_ms, r.p99_ms, r.max_ms, r.speedup, r.vs_floor,
                 r.syncs_per_call < 0 ? "null" : fmt(r.syncs_per_call, "%.2f").c_str(), r.bytes,
                 r.other_cpus < 0 ? "null" : fmt(r.other_cpus, "%.3f").c_str(),
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
                  "syncs_per_call,bytes,p99_ms,max_ms,other_cpus,threads,vs_floor\n");
  for (const Result& r : results) {
    std::fprintf(f, "%lld,%lld,%lld,%s,%d,%lld,%.6f,%.6f,%.6f,%.4f,%s,%.0f,%.6f,%.6f,%s,%d,%.4f\n",
                 static_cast<long long>(r.n), static_cast<long long>(r.batch),
                 static_cast<long long>(r.k), r.impl.c_str(), r.supported ? 1 : 0,
                 static_cast<long long>(r.iters), r.median_ms, r.p10_ms, r.p90_ms, r.speedup,
                 r.syncs_per_call < 0 ? "" : fmt(r.syncs_per_call, "%.2f").c_str(), r.bytes,
                 r.p99_ms, r.max_ms,
                 r.other_cpus < 0 ? "" : fmt(r.other_cpus, "%.3f").c_str(), r.threads, r.vs_floor);
  }
  std::fclose(f);
}

}  // namespace bench
}  // namespace syncfree
