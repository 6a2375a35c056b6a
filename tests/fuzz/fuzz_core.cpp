// libFuzzer target over the framework-free core: arbitrary labels, dtype, N,
// K, positive_fraction, negative_label, fill mode and seed. Every invariant of
// the contract is checked; any violation aborts (a crash for the fuzzer).
//
// Input layout (missing bytes read as 0): [0] dtype, [1..2] N/2, [3] N scale,
// [4..5] K, [6] fraction, [7] negative_label, [8] flags, [9..16] seed,
// [17] rows, then label bytes (repeated cyclically to fill rows * N labels).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "core/host_sampler.h"

using namespace syncfree::core;

namespace {

[[noreturn]] void fail(const char* what, int64_t a, int64_t b) {
  std::fprintf(stderr, "invariant violated: %s (%lld, %lld)\n", what, static_cast<long long>(a),
               static_cast<long long>(b));
  std::abort();
}

#define CHECK(cond, a, b) \
  if (!(cond)) fail(#cond, (a), (b))

struct Reader {
  const uint8_t* data;
  size_t size, pos = 0;
  uint64_t next(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | (pos < size ? data[pos++] : 0);
    return v;
  }
};

template <typename T>
void run(Reader& in) {
  const int64_t n_raw = static_cast<int64_t>(in.next(2));
  const int scale = static_cast<int>(in.next(1) % 4);  // N up to 2^16 * 2^3: several chunks
  const int64_t n = scale == 3 ? n_raw * 3 + 1 : n_raw >> (3 * (2 - scale));
  const int64_t k = static_cast<int64_t>(in.next(2)) % 3000;
  BalancedParams p;
  p.num_samples = k;
  p.positive_fraction = static_cast<double>(in.next(1)) / 255.0;
  p.negative_label = static_cast<int64_t>(in.next(1) % 4);
  const uint64_t flags = in.next(1);
  p.fill_positives = flags & 1;
  p.seed = in.next(8);
  p.offset = flags >> 1;
  const int64_t rows = static_cast<int64_t>(in.next(1) % 3) + 1;

  const size_t count = static_cast<size_t>(rows * n);
  std::unique_ptr<T[]> labels(new T[count + 1]);  // not std::vector: vector<bool> is packed
  const size_t start = in.pos;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t b = in.size > start ? in.data[start + i % (in.size - start)] : 0;
    labels[i] = static_cast<T>(static_cast<int8_t>(b) % 5);  // -4..4: ignored, neg, pos
  }
  std::vector<int64_t> indices(static_cast<size_t>(rows * k));
  std::unique_ptr<bool[]> valid(new bool[static_cast<size_t>(rows * k) + 1]);
  sample_rows_serial(labels.get(), rows, n, p, indices.data(), valid.get());

  for (int64_t r = 0; r < rows; ++r) {
    int64_t P = 0, Q = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool pos, neg;
      classify(labels[static_cast<size_t>(r * n + i)], p.negative_label, &pos, &neg);
      P += pos;
      Q += neg;
    }
    const Quota q = balanced_quota(P, Q, k, p.positive_fraction, p.fill_positives);
    CHECK(q.num_pos >= 0 && q.num_pos <= P && q.num_neg >= 0 && q.num_neg <= Q, q.num_pos, q.num_neg);
    CHECK(q.valid() <= k, q.valid(), k);
    std::set<int64_t> seen;
    int64_t got_pos = 0, got_neg = 0;
    const RowPlan plan = make_row_plan(p, r, P, Q);
    for (int64_t s = 0; s < k; ++s) {
      const int64_t idx = indices[static_cast<size_t>(r * k + s)];
      const bool ok = valid[static_cast<size_t>(r * k + s)];
      CHECK(ok == (s < q.valid()), s, q.valid());  // valid slots first
      if (!ok) {
        CHECK(idx == -1, s, idx);  // -1 padding
        continue;
      }
      CHECK(idx >= 0 && idx < n, idx, n);  // index range
      CHECK(seen.insert(idx).second, s, idx);  // uniqueness
      bool pos, neg;
      classify(labels[static_cast<size_t>(r * n + idx)], p.negative_label, &pos, &neg);
      CHECK(pos || neg, s, idx);  // never an ignored label
      got_pos += pos;
      got_neg += neg;
      // The one-slot evaluation (what device code does) gives the same class.
      CHECK(pick_slot(plan, s).positive == pos, s, idx);
    }
    CHECK(got_pos == q.num_pos && got_neg == q.num_neg, got_pos, got_neg);  // quotas
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  switch (in.next(1) % 6) {
    case 0: run<bool>(in); break;
    case 1: run<uint8_t>(in); break;
    case 2: run<int8_t>(in); break;
    case 3: run<int16_t>(in); break;
    case 4: run<int32_t>(in); break;
    default: run<int64_t>(in); break;
  }
  return 0;
}
