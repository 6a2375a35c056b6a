// Internal declarations of nms shared by the operator registration
// (ops/nms.cpp) and the backends (cpu/nms_cpu.cpp, cuda/nms_cuda.cpp).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace syncfree {
namespace ops {

// The one set of argument checks of nms, run by every backend (CPU, CUDA,
// Meta): boxes [..., N, 4] float16, bfloat16, float32 or float64; scores
// [..., N] of the boxes' dtype; iou_threshold not NaN; max_output >= 0;
// idxs (if given) an integer tensor [..., N]; valid (if given) a bool tensor
// [..., N]; every tensor on the boxes' device. Values are data and are not
// checked (a check would synchronize with the device).
void check_nms_args(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold,
                    int64_t max_output, const c10::optional<at::Tensor>& idxs,
                    const c10::optional<at::Tensor>& valid);

// An optional tensor that is given and defined.
inline bool nms_has(const c10::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// Uninitialized (indices int64, valid bool) of shape scores.shape[:-1] +
// [max_output] (sizes may be symbolic).
std::tuple<at::Tensor, at::Tensor> empty_nms_outputs(const at::Tensor& scores, int64_t max_output);

std::tuple<at::Tensor, at::Tensor> nms_cpu(const at::Tensor& boxes, const at::Tensor& scores,
                                           double iou_threshold, int64_t max_output,
                                           const c10::optional<at::Tensor>& idxs,
                                           const c10::optional<at::Tensor>& valid);

}  // namespace ops
}  // namespace syncfree
