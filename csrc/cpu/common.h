// csrc/cpu: the CPU backend.
//   <op>_cpu.cpp  the op's CPU kernels around the framework-free core
//                 (csrc/core); each file registers its own kernels
//                 (TORCH_LIBRARY_IMPL(syncfree, CPU)).
//   common.h      (this file) what every CPU kernel shares: the draw of a
//                 call's (seed, offset), the split of work over threads, the
//                 offset of a row of labels.
// A new op adds <op>_cpu.cpp (and lists it in CMakeLists.txt).
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <ATen/core/Generator.h>
#include <c10/util/Optional.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <immintrin.h>  // _mm_pause
#endif

#include "core/label_compaction.h"  // PositiveBits
#include "core/labels.h"           // negative_value
#include "core/platform.h"         // prefetch
#include "ops/common.h"            // check_generator_device
#include "ops/gather_sampled.h"    // SampleGatherOutputs

namespace syncfree {
namespace ops {

// --- randomness ------------------------------------------------------------------

// seed/offset of a call into p (any params struct with seed and offset): the
// user's seed with offset 0, or one 64-bit draw from the generator (the given
// one or the default CPU generator), advancing it by exactly one random64()
// per call, whatever the data.
template <typename Params>
void draw_seed(const char* op, const c10::optional<int64_t>& seed,
               const c10::optional<at::Generator>& generator, Params* p) {
  p->offset = 0;
  if (seed.has_value()) {
    p->seed = static_cast<uint64_t>(*seed);
    return;
  }
  check_generator_device(op, generator, at::Device(at::kCPU));
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
      generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  p->seed = gen->random64();
}

// --- threads -----------------------------------------------------------------------

// Work estimates are in units of about one label compacted (about 1 ns on the
// benchmark machine; measured on one thread: compaction 1.0 ns per label, the
// slots 10 to 14 ns each, the gather of 64-byte feature rows 4 to 7 ns per
// slot while the features fit in the caches, up to 25 ns beyond). The
// AVX-512 paths (core/host_simd.h) have since made compaction of int64
// labels about 0.45 ns per label and a slot 10 to 12 ns.
//
// A phase runs in parallel only when it holds more than kParallelWork, so
// that every task gets about half of it at least: at::parallel_for runs a
// range of at most `grain` units on the calling thread, and splits a larger
// one into tasks of at least grain / 2 units, the grain being the most whole
// units that hold at most kParallelWork (rounded up instead, a phase of a
// few large units needed up to twice as much work: the gather of one row's
// 1e4 slots, four units of 2500, ran on one thread). ATen's own grain (32768
// elements of an elementwise kernel): tasks of at least about 15 us on the
// benchmark machine. Below that, a parallel region costs more than it saves:
// waking the pool's threads costs microseconds, and when another process
// keeps a core busy (a DataLoader worker) a thread of the pool that is not
// scheduled holds the call up for a scheduler time slice, milliseconds.
//
// Measured on two threads (docs/benchmarks.md, "Threading: where two threads
// pay", and "The parallel threshold halved"): against 8 x and 32 x this
// value, the calls it splits took 0.45x to 0.95x of one thread's time, and
// the larger values gave those gains up; against 2 x this value, the calls
// that now split (one row of 2e4 to 5e4 labels, a few rows of 1e4, compact of
// one row of 1e5, nms of a few images of hundreds of boxes) took 0.53x to
// 0.95x of the time in most processes, up to 1.17x in some (balanced_sample
// alone at one row of 3e4); a quarter of it gained at one row of 1e4 in some
// processes and lost in others.
constexpr int64_t kParallelWork = at::internal::GRAIN_SIZE;

// The at::parallel_for grain for units of about unit_work units of work each:
// the most whole units within kParallelWork (at least one).
inline int64_t parallel_grain(int64_t unit_work) {
  unit_work = std::max<int64_t>(unit_work, 1);
  return std::max<int64_t>(1, kParallelWork / unit_work);
}

// A phase of `units` units shared by the tasks of one parallel region as
// they come: each task that calls run() takes units one at a time while any
// is left; the task that finishes the last unit runs `last` (what needs
// every unit done: a row's prefix sums); and every task returns once `last`
// has run, having seen all that the units and `last` wrote. A task waits
// only for units that running tasks took, so the phase ends whether the
// region's tasks run at once, one after another on the calling thread
// (at::parallel_for inside a parallel region), or any mix of the two. A
// waiting task spins (a pause an iteration) for kSpins iterations, then
// yields its core at every iteration (more threads than cores). The units
// and `last` must not throw: the other tasks would wait for them forever.
class ClaimedPhase {
 public:
  explicit ClaimedPhase(int64_t units) : units_(units) {
    TORCH_INTERNAL_ASSERT(units > 0, "a claimed phase needs a unit, got ", units);
  }
  ClaimedPhase(const ClaimedPhase&) = delete;
  ClaimedPhase& operator=(const ClaimedPhase&) = delete;

  template <typename Unit, typename Last>
  void run(const Unit& unit, const Last& last) {
    for (int64_t u = next_.fetch_add(1, std::memory_order_relaxed); u < units_;
         u = next_.fetch_add(1, std::memory_order_relaxed)) {
      unit(u);
      // acq_rel: the task that finishes the last unit has seen every
      // unit's writes, and publishes them with its own through open_.
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == units_) {
        last();
        open_.store(true, std::memory_order_release);
      }
    }
    for (int64_t spins = 0; !open_.load(std::memory_order_acquire); ++spins) {
      if (spins < kSpins) {
        pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static constexpr int64_t kSpins = 1024;
  static void pause() {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  const int64_t units_;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<bool> open_{false};
};

// Blocks of each row's k slots for a phase of rows x blocks units, slot_work
// units of work per slot, blocks of at most `cap` slots; where the phase can
// run in parallel over its blocks (`by_block`: the caller shares the (row,
// block) units, not whole rows, among the threads; more than one thread; and
// more than kParallelWork of slot work in all), of at most kParallelWork / 2
// of work too, so that the slots of a few rows still split over the threads
// (elsewhere more blocks would only cost their passes, where the caller
// makes one a block: the gather's; the sampler fills a task's run of a
// row's blocks in one pass). The blocks are of equal size, and, where the
// phase splits and a row has several, as many as the pool's threads share
// evenly (rows x blocks a multiple of the thread count).
// at::parallel_for hands each thread a run of consecutive units: when the
// blocks were not made even (2026-12-02), blocks of 4096, 4096 and 1808
// slots of one row of 1e5 (K = 1e4) over two threads left one thread 82% of
// the work; four blocks of 2500 leave each half. Every unit writes its own
// slots, so the results do not depend on the blocks.
struct SlotBlocks {
  int64_t count;  // blocks per row
  int64_t size;   // slots per block (a row's last blocks may hold fewer, or none)
  int64_t begin(int64_t k, int64_t b) const { return std::min(k, b * size); }
  int64_t end(int64_t k, int64_t b) const { return std::min(k, (b + 1) * size); }
};

inline SlotBlocks slot_blocks(int64_t rows, int64_t k, int64_t slot_work, int64_t cap,
                              bool by_block = true) {
  const int64_t threads = std::max(1, at::get_num_threads());
  slot_work = std::max<int64_t>(slot_work, 1);
  // In double: the outputs' rows x k fit in int64, times slot_work may not.
  const bool splits = by_block && threads > 1 &&
                      static_cast<double>(rows) * static_cast<double>(k) * static_cast<double>(slot_work) >
                          static_cast<double>(kParallelWork);
  const int64_t max_block = splits ? std::clamp<int64_t>(kParallelWork / 2 / slot_work, 1, cap) : cap;
  int64_t count = std::max<int64_t>(1, (k + max_block - 1) / max_block);
  if (splits && count > 1) {
    while ((rows * count) % threads != 0) ++count;  // fewer than `threads` steps
  }
  return {count, std::max<int64_t>(1, (k + count - 1) / count)};
}

// --- the gather of sampled slots -----------------------------------------------------
// Shared by the gather (gather_sampled_cpu.cpp) and the fused samplers
// (balanced_sample_gather, stratified_sample_gather, through FusedGather
// below), which gather their slots as they sample them: each batch of 256
// slots one batch behind (balanced), each row after sampling it
// (stratified).

// Work of one gathered slot (units above), besides its bytes / 16.
constexpr int64_t kGatherSlotWork = 4;

// Calls body(copy) with a row-copy function for rows of row_bytes bytes:
// fixed-size (inlined) for the common widths, memcpy otherwise.
template <typename Body>
void with_row_copy(int64_t row_bytes, const Body& body) {
  auto fixed = [&](auto width) {
    body([](char* dst, const char* src) { std::memcpy(dst, src, decltype(width)::value); });
  };
  switch (row_bytes) {
    case 4: return fixed(std::integral_constant<size_t, 4>());
    case 8: return fixed(std::integral_constant<size_t, 8>());
    case 16: return fixed(std::integral_constant<size_t, 16>());
    case 32: return fixed(std::integral_constant<size_t, 32>());
    case 64: return fixed(std::integral_constant<size_t, 64>());
    case 128: return fixed(std::integral_constant<size_t, 128>());
    default:
      body([row_bytes](char* dst, const char* src) {
        std::memcpy(dst, src, static_cast<size_t>(row_bytes));
      });
  }
}

// Software prefetch distance of the gather, in slots: the feature row and
// label of slot j + kGatherAhead are requested while slot j is copied. On
// an AMD EPYC 8, 16 and 32 did about equally well (64 and 128
// were slower at one row of 1e6); requesting a batch of 256 rows, then
// copying them, was 15 to 25% slower where the features outgrow the caches.
// A fused sampler requests each batch's rows into the L2 cache a batch
// ahead, one as each slot of the batch before is copied (`next` below):
// on an Intel Xeon (2026-12-04, docs/benchmarks.md) the same requests in
// one burst of 256 took the fused call at one row of 3e4 to 1e6 labels
// 1.04x to 1.14x the time, a quarter of the process's samples at 1e6 on
// the burst's prefetch instructions.
constexpr int64_t kGatherAhead = 16;

// One row's slots [0, count): slot j gets item indices[j]'s feature row
// (row_bytes bytes from row_features) and label (as int64) when valid[j],
// zero features and label -1 otherwise. A valid slot whose index is outside
// [0, n) gets nothing read: it is reported (returns false, *bad_index set)
// and left as an invalid slot. The feature row (its first 256 bytes) and the
// label of the slot kGatherAhead ahead are prefetched, so that many random
// loads are in flight at once. Without read_labels the valid slots' labels
// are left to the caller (a fused sampler, which knows each slot's class).
// next[0, next_count): items (in [0, n)) whose feature rows (their first 64
// bytes) are requested into the L2 cache, one as each slot is copied, the
// rest after the last (a fused sampler's next batch).
template <typename T, typename Copy>
bool gather_slots(const Copy& copy, const char* row_features, int64_t row_bytes,
                  const T* row_labels, int64_t label_stride, int64_t n, const int64_t* indices,
                  const bool* valid, int64_t count, char* out_features, int64_t* out_labels,
                  int64_t* bad_index, bool read_labels = true,
                  const int64_t* next = nullptr, int64_t next_count = 0) {
  const int64_t prefetch_bytes = std::min<int64_t>(row_bytes, 256);
  const auto source = [&](int64_t j) -> int64_t {  // the slot's item, or -1: nothing to read
    const int64_t i = indices[j];
    return valid[j] && static_cast<uint64_t>(i) < static_cast<uint64_t>(n) ? i : -1;
  };
  const auto prefetch_slot = [&](int64_t j) {
    const int64_t i = source(j);
    if (i < 0) return;
    const char* row = row_features + i * row_bytes;
    for (int64_t b = 0; b < prefetch_bytes; b += 64) core::prefetch(row + b);
    if (read_labels) core::prefetch(row_labels + i * label_stride);
  };
  const auto request_next = [&](int64_t j) {
    core::prefetch_l2(row_features + next[j] * row_bytes);
  };
  for (int64_t j = 0; j < std::min(kGatherAhead, count); ++j) prefetch_slot(j);
  bool ok = true;
  for (int64_t j = 0; j < count; ++j) {
    if (j + kGatherAhead < count) prefetch_slot(j + kGatherAhead);
    if (j < next_count) request_next(j);
    char* dst = out_features + j * row_bytes;
    const int64_t i = source(j);
    if (i >= 0) {
      copy(dst, row_features + i * row_bytes);
      if (read_labels) out_labels[j] = static_cast<int64_t>(row_labels[i * label_stride]);
    } else {
      if (valid[j]) {  // valid, but out of range
        *bad_index = indices[j];
        ok = false;
      }
      std::memset(dst, 0, static_cast<size_t>(row_bytes));
      out_labels[j] = -1;
    }
  }
  for (int64_t j = count; j < next_count; ++j) request_next(j);
  return ok;
}

// --- labels --------------------------------------------------------------------------

// Element offset of row r of a tensor whose first `lead` dimensions are the
// rows (flat row index r over them), for any strides.
inline int64_t row_offset(const at::Tensor& t, int64_t lead, int64_t r) {
  int64_t offset = 0;
  for (int64_t d = lead - 1; d >= 0; --d) {
    const int64_t size = t.size(d);
    offset += (r % size) * t.stride(d);
    r /= size;
  }
  return offset;
}

// Element offset of row r's first label of labels [..., N]: every dimension
// but the last is a row dimension.
inline int64_t row_offset(const at::Tensor& labels, int64_t r) {
  return row_offset(labels, labels.dim() - 1, r);
}

// A fused gather's part in one row (the gather argument of
// core::fill_row_slots): the row's feature rows and labels, and its slots'
// outputs (each pointer at the row's slot 0). Sampler indices are always in
// [0, n): nothing is reported.
template <typename T, typename Copy>
struct RowGather {
  static constexpr bool kGathers = true;
  const Copy* copy;
  const char* features;  // the row's n feature rows
  int64_t bytes;         // per feature row
  const T* labels;       // the row's first label
  int64_t label_stride;
  // A negative's label as the balanced sampler outputs it (int64), which
  // classes() writes, and its row's positives' labels folded
  // (core::PositiveBits; the empty fold where the row was not folded):
  // where they are one label, classes() writes it too. The stratified
  // sampler, which gathers each row after sampling it (the two-argument
  // gather), leaves both unused.
  int64_t negative_value;
  core::PositiveBits fold;
  int64_t n;
  const int64_t* indices;
  const bool* valid;
  char* out_features;
  int64_t* out_labels;

  // Requests item i's feature row (its first 64 bytes) into the L2 cache,
  // ahead of the gather.
  void prefetch_row(int64_t i) const { core::prefetch_l2(features + i * bytes); }
  // The balanced sampler reads its labels by class. A batch's slots by
  // class, as their indices are written: a negative's label is the
  // negative label, written now and never read; a positive's is requested
  // into the L2 cache, a batch of slots ahead, as its feature row is, and
  // read after the batch's rows are copied (the five-argument gather). The
  // negatives' share of the random label reads is saved, and the rest are
  // requested a batch ahead rather than kGatherAhead slots: with the caches
  // as other work leaves them (another sampler's call before each), one row
  // of 1e5 int64 labels took 0.89x to 0.98x the time this way, one row of
  // 1e4 to 5e4 0.96x to 1.01x, 32 rows of 1e4 0.95x to 0.99x (one and two
  // threads, half the slots negative, an Intel Xeon, 2026-12-05,
  // docs/benchmarks.md; two threads at 32 rows of 1e5: 0.90x). Rows up to
  // 1 MiB of labels used to read every label as its row was copied: on an
  // AMD EPYC, reading 32 rows of 1e5 by class had taken 1.04x to 1.06x the
  // time (2026-12-04, after 64 MB written and back to back alike; not
  // measured again). Other gathers read every label as its slot's row is
  // copied.
  //
  // Where the row's positives all carry one label (fold.one_label():
  // the compaction folded their labels, rows beyond kFoldLabelBytes that a
  // vector path compacts), a positive's label is written too, never read:
  // the rest of the random label reads are saved. With the caches as
  // another sampler's call leaves them, one row of 1e6 int64 labels 0 and 1
  // took 0.85x to 0.89x the time on one thread and two, int32, int16 and
  // uint8 ones 0.88x, 0.91x and 0.93x (an Intel Xeon, 2026-12-05,
  // docs/benchmarks.md).
  void classes(const int64_t* pos_slots, int64_t np, const int64_t* neg_slots,
               int64_t nn) const {
    if (fold.one_label()) {
      for (int64_t i = 0; i < np; ++i) out_labels[pos_slots[i]] = fold.any;
    } else {
      for (int64_t i = 0; i < np; ++i)
        core::prefetch_l2(labels + indices[pos_slots[i]] * label_stride);
    }
    for (int64_t i = 0; i < nn; ++i) out_labels[neg_slots[i]] = negative_value;
  }
  // Valid slots [first, last), the np positives among them pos_slots: every
  // feature row, and the positives' labels unless classes() wrote them (it
  // wrote the negatives'); the feature rows of the `ahead` slots after them
  // requested as they go.
  void operator()(int64_t first, int64_t last, const int64_t* pos_slots, int64_t np,
                  int64_t ahead) const {
    int64_t unused;
    gather_slots(*copy, features, bytes, labels, label_stride, n, indices + first, valid + first,
                 last - first, out_features + first * bytes, out_labels + first, &unused,
                 /*read_labels=*/false, indices + last, ahead);
    if (fold.one_label()) return;
    for (int64_t i = 0; i < np; ++i) {
      const int64_t s = pos_slots[i];
      out_labels[s] = static_cast<int64_t>(labels[indices[s] * label_stride]);
    }
  }
  // Slots [first, last), each label read (or -1 for an invalid slot).
  void operator()(int64_t first, int64_t last) const {
    int64_t unused;
    gather_slots(*copy, features, bytes, labels, label_stride, n, indices + first, valid + first,
                 last - first, out_features + first * bytes, out_labels + first, &unused);
  }
};

// The start of a fused *_gather CPU kernel, after its checks and before its
// seed is drawn (a call that runs out of memory has not drawn): its outputs
// (empty_sample_gather_outputs) and the features its gather reads, in place
// when contiguous, else a contiguous copy (none for a call that gathers
// nothing).
struct FusedCall {
  FusedCall(const char* op, const at::Tensor& features_in, const at::Tensor& labels,
            int64_t num_samples)
      : out(empty_sample_gather_outputs(op, features_in, labels, num_samples)),
        rows(num_rows(labels).expect_int()),
        n(labels.size(-1)),
        k(num_samples),
        // Only for a call that gathers: features of no elements may have a
        // width whose bytes overflow int64.
        row_bytes(gathers() ? feature_width(features_in, labels.dim()).expect_int() *
                                  static_cast<int64_t>(features_in.element_size())
                            : 0),
        features(!gathers() || features_in.is_contiguous() ? features_in
                                                           : features_in.contiguous()) {}

  // Whether the outputs have a slot.
  bool has_slots() const { return rows > 0 && k > 0; }
  // Whether there is something to gather: slots, and labels to fill them from.
  bool gathers() const { return has_slots() && n > 0; }
  // The outputs, moved out of the call (its last use).
  SampleGatherOutputs take() { return std::move(out); }
  // The outputs with every slot invalid (for rows of no labels: indices and
  // labels -1, zero features), moved out of the call.
  SampleGatherOutputs take_all_invalid() {
    std::get<3>(out).fill_(-1);
    std::get<2>(out).fill_(false);
    std::get<0>(out).zero_();
    std::get<1>(out).fill_(-1);
    return take();
  }
  int64_t* indices() { return std::get<3>(out).data_ptr<int64_t>(); }
  bool* valid() { return std::get<2>(out).data_ptr<bool>(); }

  SampleGatherOutputs out;  // (sampled features, sampled labels, valid, indices)
  int64_t rows, n, k;
  int64_t row_bytes;        // bytes per item's feature row (0 when nothing is gathered)
  at::Tensor features;      // contiguous when the call gathers
};

// A fused call's gather over all its rows (the CPU counterpart of
// DeviceGather, cuda/adapter.h): the call's features (contiguous, row_bytes
// bytes per item) and outputs, and the labels (any strides); row(r) is row
// r's RowGather.
template <typename T, typename Copy>
class FusedGather {
 public:
  // negative_label: a balanced sampler's (RowGather::negative_value).
  FusedGather(const Copy& copy, FusedCall& call, const at::Tensor& labels,
              int64_t negative_label = 0)
      : copy_(&copy),
        features_(static_cast<const char*>(call.features.data_ptr())),
        labels_(labels),
        label_data_(static_cast<const T*>(labels.data_ptr())),
        row_bytes_(call.row_bytes),
        negative_value_(core::negative_value<T>(negative_label)),
        n_(call.n),
        k_(call.k),
        out_features_(static_cast<char*>(std::get<0>(call.out).data_ptr())),
        out_labels_(std::get<1>(call.out).data_ptr<int64_t>()),
        valid_(call.valid()),
        indices_(call.indices()) {}

  // fold: row r's positives' labels folded (a balanced sampler's rows
  // beyond kFoldLabelBytes that a vector path compacts); the default, the
  // empty fold, has every sampled positive's label read.
  RowGather<T, Copy> row(int64_t r, const core::PositiveBits& fold = {}) const {
    return {copy_,
            features_ + r * n_ * row_bytes_,
            row_bytes_,
            label_data_ + row_offset(labels_, r),
            labels_.stride(-1),
            negative_value_,
            fold,
            n_,
            indices_ + r * k_,
            valid_ + r * k_,
            out_features_ + r * k_ * row_bytes_,
            out_labels_ + r * k_};
  }

 private:
  const Copy* copy_;
  const char* features_;
  const at::Tensor& labels_;
  const T* label_data_;
  int64_t row_bytes_;
  int64_t negative_value_;
  int64_t n_;
  int64_t k_;
  char* out_features_;
  int64_t* out_labels_;
  const bool* valid_;
  const int64_t* indices_;
};

}  // namespace ops
}  // namespace syncfree

// Runs the lambda (a [&] { ... } body) with scalar_t the C++ type of the
// label dtype TYPE: every dtype of ops::is_supported_label_dtype (bool, the
// integer dtypes, and the unsigned ones that ATen calls barebones).
#define SYNCFREE_DISPATCH_LABEL_TYPES(TYPE, NAME, ...)                                 \
  AT_DISPATCH_V2(TYPE, NAME, AT_WRAP(__VA_ARGS__), AT_EXPAND(AT_INTEGRAL_TYPES),       \
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES), at::kBool)
