// Internal declarations of compact shared by the operator registration
// (compact.cpp) and the backends (cpu/compact_cpu.cpp, cuda/compact_cuda.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>

namespace syncfree {
namespace ops {

// The one set of argument checks of compact, run by every backend (CPU,
// CUDA, Meta): mask defined, [..., N] with at least one dimension, bool or
// an integer dtype; size >= 0; rows * size within int64.
void check_compact_args(const at::Tensor& mask, int64_t size);

// Uninitialized outputs of compact for mask [..., N]: indices int64 and
// valid bool of shape mask.shape[:-1] + [size], count int64 of shape
// mask.shape[:-1] (sizes may be symbolic).
std::tuple<at::Tensor, at::Tensor, at::Tensor> empty_compact_outputs(const at::Tensor& mask,
                                                                     int64_t size);

// Number of rows of mask [..., N]: the product of mask.shape[:-1] (concrete
// sizes: the backend kernels).
int64_t compact_rows(const at::Tensor& mask);

}  // namespace ops
}  // namespace syncfree
