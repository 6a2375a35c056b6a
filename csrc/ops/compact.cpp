// compact: schema (written once), argument checks, the Meta kernel and the
// C++ API. The CPU kernel lives in csrc/cpu/compact_cpu.cpp, the CUDA one in
// csrc/cuda/compact_cuda.cpp, the rule in csrc/core/compact.h.
#include "ops/compact.h"

#include "ops/common.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <limits>
#include <vector>

#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

void check_compact_args(const at::Tensor& mask, int64_t size) {
  TORCH_CHECK(mask.defined(), "syncfree.compact: mask must be a defined tensor");
  TORCH_CHECK(mask.dim() >= 1,
              "syncfree.compact: mask must have at least 1 dimension (shape [..., N]), got a "
              "0-dim tensor");
  // The dtypes of labels (ops/common.h), read the same way by the kernels.
  TORCH_CHECK(is_supported_label_dtype(mask.scalar_type()),
              "syncfree.compact: mask must be bool or an integer tensor (uint8, int8, int16, "
              "int32, int64, uint16, uint32, uint64; nonzero counts as true), got dtype ",
              mask.scalar_type());
  TORCH_CHECK(size >= 0, "syncfree.compact: size must be >= 0, got ", size);
  // Checked on concrete sizes only: a symbolic batch (torch.compile tracing)
  // would get a guard for nothing, and the real kernel checks again.
  const c10::optional<int64_t> rows = num_rows(mask).maybe_as_int();
  TORCH_CHECK(size == 0 || !rows.has_value() ||
                  *rows <= std::numeric_limits<int64_t>::max() / size,
              "syncfree.compact: the output would have ", rows.value_or(0), " x ", size,
              " elements, more than int64 can index");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> empty_compact_outputs(const at::Tensor& mask,
                                                                     int64_t size) {
  const auto mask_sizes = mask.sym_sizes();
  std::vector<c10::SymInt> lead(mask_sizes.begin(), mask_sizes.end() - 1);
  std::vector<c10::SymInt> slots = lead;
  slots.push_back(size);
  const auto subject = [&] {
    return "size = " + std::to_string(size) + " for " + shape_subject("mask", mask);
  };
  return {allocate("compact", subject, "indices", slots, mask.options().dtype(at::kLong)),
          allocate("compact", subject, "valid", slots, mask.options().dtype(at::kBool)),
          allocate("compact", subject, "count", lead, mask.options().dtype(at::kLong))};
}

int64_t compact_rows(const at::Tensor& mask) { return num_rows(mask).expect_int(); }

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_meta(const at::Tensor& mask,
                                                            int64_t size) {
  check_compact_args(mask, size);
  return empty_compact_outputs(mask, size);
}

using CompactFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, int64_t);

}  // namespace
}  // namespace ops

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact(const at::Tensor& mask, int64_t size) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::compact", "")
                       .typed<ops::CompactFn>();
  return op.call(mask, size);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def("compact(Tensor mask, int size) -> (Tensor indices, Tensor valid, Tensor count)");
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("compact", TORCH_FN(syncfree::ops::compact_meta));
}

// No differentiable output: autograd passes straight through.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("compact", torch::CppFunction::makeFallthrough());
}
