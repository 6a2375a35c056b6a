// CPU backend of syncfree::balanced_sample: the torch adapter around the
// framework-free core. Three parallel phases over a uint16 workspace of one
// entry per label (core/compact.h):
//   1. compact every (row, chunk) pair, recording per-chunk class counts;
//   2. turn each row's counts into prefix sums;
//   3. fill every (row, block of slots) pair from the row's plan.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <mutex>

#include "core/compact.h"
#include "core/host_sampler.h"
#include "core/row_plan.h"
#include "ops/balanced_sample.h"

namespace syncfree {
namespace ops {

namespace {

constexpr int64_t kSlotBlock = 4096;

// Element offset of row r's first label, for any strides of the leading dims.
int64_t row_offset(const at::Tensor& labels, int64_t r) {
  int64_t offset = 0;
  for (int64_t d = labels.dim() - 2; d >= 0; --d) {
    const int64_t size = labels.size(d);
    offset += (r % size) * labels.stride(d);
    r /= size;
  }
  return offset;
}

// seed/offset of a call: the user's seed with offset 0, or one 64-bit draw
// from the generator (advancing it by exactly one random64() per call).
void draw_seed(const c10::optional<int64_t>& seed, const c10::optional<at::Generator>& generator,
               core::SampleParams* p) {
  p->offset = 0;
  if (seed.has_value()) {
    p->seed = static_cast<uint64_t>(*seed);
    return;
  }
  if (generator.has_value() && generator->defined()) {
    TORCH_CHECK(generator->device().type() == at::kCPU,
                "syncfree.balanced_sample: generator must be a CPU generator for labels on cpu, "
                "got a generator on ",
                generator->device());
  }
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
      generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  p->seed = gen->random64();
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> balanced_sample_cpu(const at::Tensor& labels,
                                                       int64_t num_samples,
                                                       double positive_fraction,
                                                       int64_t negative_label, bool fill_positives,
                                                       c10::optional<int64_t> seed,
                                                       c10::optional<at::Generator> generator) {
  core::SampleParams params = check_sample_args(labels, num_samples, positive_fraction,
                                                negative_label, fill_positives, seed, generator);
  draw_seed(seed, generator, &params);

  const auto sizes = output_sizes(labels, num_samples);
  at::Tensor indices = at::empty(sizes, labels.options().dtype(at::kLong));
  at::Tensor valid = at::empty(sizes, labels.options().dtype(at::kBool));
  const int64_t rows = num_rows(labels);
  const int64_t n = labels.size(-1);
  const int64_t k = num_samples;
  if (rows == 0 || k == 0) return {indices, valid};
  if (n == 0) {
    indices.fill_(-1);
    valid.fill_(false);
    return {indices, valid};
  }

  const int64_t chunks = core::num_chunks(n);
  const int64_t prefix_len = chunks + 1;
  at::Tensor work_t = at::empty({rows * n}, labels.options().dtype(at::kShort));
  at::Tensor prefix_t = at::empty({2, rows, prefix_len}, labels.options().dtype(at::kLong));
  auto* work = reinterpret_cast<uint16_t*>(work_t.data_ptr<int16_t>());
  int64_t* pos_prefix = prefix_t.data_ptr<int64_t>();
  int64_t* neg_prefix = pos_prefix + rows * prefix_len;
  const int64_t stride = labels.stride(-1);

  AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, labels.scalar_type(), "balanced_sample_cpu", [&] {
    const scalar_t* data = labels.data_ptr<scalar_t>();
    at::parallel_for(0, rows * chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t r = u / chunks;
        const int64_t c = u % chunks;
        const int64_t start = c * core::kChunk;
        const int64_t len = std::min(core::kChunk, n - start);
        core::compact_chunk(data + row_offset(labels, r) + start * stride, stride, len,
                            negative_label, work + r * n + start,
                            &pos_prefix[r * prefix_len + c + 1],
                            &neg_prefix[r * prefix_len + c + 1]);
      }
    });
  });

  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t* prefix : {pos_prefix + r * prefix_len, neg_prefix + r * prefix_len}) {
        prefix[0] = 0;
        for (int64_t c = 1; c < prefix_len; ++c) prefix[c] += prefix[c - 1];
      }
    }
  });

  int64_t* out_indices = indices.data_ptr<int64_t>();
  bool* out_valid = valid.data_ptr<bool>();
  const int64_t blocks = (k + kSlotBlock - 1) / kSlotBlock;
  at::parallel_for(0, rows * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t r = u / blocks;
      const int64_t b = u % blocks;
      const core::CompactRow row{work + r * n, pos_prefix + r * prefix_len,
                                 neg_prefix + r * prefix_len, n, chunks};
      const core::RowPlan plan =
          core::make_row_plan(params, r, row.num_positive(), row.num_negative());
      core::fill_row_slots(plan, row, b * kSlotBlock, std::min(k, (b + 1) * kSlotBlock),
                           out_indices + r * k, out_valid + r * k);
    }
  });
  return {indices, valid};
}

}  // namespace ops
}  // namespace syncfree
