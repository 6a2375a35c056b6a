// CPU backend of syncfree::nms: the torch adapter around the framework-free
// rule and row algorithm (core/nms.h: core::nms_row). Rows run in parallel;
// each task keeps one workspace for its rows, sized by N only.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/nms.h"
#include "cpu/common.h"
#include "ops/common.h"
#include "ops/nms.h"

namespace syncfree {
namespace ops {

namespace {

// float for float16, bfloat16 and float32 (exact conversions), double for float64.
template <typename In>
using ComputeType = typename std::conditional<std::is_same<In, double>::value, double, float>::type;

struct Inputs {
  const at::Tensor& boxes;
  const at::Tensor& scores;
  const at::Tensor* idxs;   // int64, or null
  const at::Tensor* valid;  // bool, or null
};

template <typename In, typename I>
void nms_one_row(const Inputs& in, int64_t r, int64_t n, ComputeType<In> threshold,
                 int64_t max_output, core::NmsWorkspace<ComputeType<In>, I>& ws,
                 int64_t* out_index, bool* out_valid) {
  using T = ComputeType<In>;
  const int64_t lead = in.scores.dim() - 1;
  const In* boxes = in.boxes.data_ptr<In>() + row_offset(in.boxes, lead, r);
  const int64_t bn = in.boxes.stride(-2), bc = in.boxes.stride(-1);
  const In* scores = in.scores.data_ptr<In>() + row_offset(in.scores, lead, r);
  const int64_t sn = in.scores.stride(-1);
  const int64_t* ids = nullptr;
  int64_t idn = 0;
  if (in.idxs) {
    ids = in.idxs->data_ptr<int64_t>() + row_offset(*in.idxs, lead, r);
    idn = in.idxs->stride(-1);
  }
  const bool* valid = nullptr;
  int64_t vn = 0;
  if (in.valid) {
    valid = in.valid->data_ptr<bool>() + row_offset(*in.valid, lead, r);
    vn = in.valid->stride(-1);
  }
  const int64_t count = core::nms_row<T, I>(
      n, [&](int64_t j) { return static_cast<T>(scores[j * sn]); },
      [&](int64_t j, int c) { return static_cast<T>(boxes[j * bn + c * bc]); },
      [&](int64_t j) { return ids[j * idn]; },
      [&](int64_t j) { return valid == nullptr || valid[j * vn]; }, ids != nullptr, threshold,
      max_output, ws, out_index);
  for (int64_t k = 0; k < count; ++k) out_valid[k] = true;
  for (int64_t k = count; k < max_output; ++k) {
    out_index[k] = -1;
    out_valid[k] = false;
  }
}

template <typename In, typename I>
void nms_rows(const Inputs& in, int64_t rows, int64_t n, double iou_threshold, int64_t max_output,
              int64_t* out_index, bool* out_valid) {
  using T = ComputeType<In>;
  const T threshold = core::nms_threshold<T>(iou_threshold);
  // A row's work (units: cpu/common.h): reading and sorting its boxes,
  // about 20 units each, and the greedy passes, at least as much.
  const int64_t per_row = 40 * std::max<int64_t>(n, 1) + max_output;
  at::parallel_for(0, rows, parallel_grain(per_row), [&](int64_t begin, int64_t end) {
    core::NmsWorkspace<T, I> ws(n);
    for (int64_t r = begin; r < end; ++r) {
      nms_one_row<In, I>(in, r, n, threshold, max_output, ws, out_index + r * max_output,
                         out_valid + r * max_output);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> nms_cpu(const at::Tensor& boxes, const at::Tensor& scores,
                                           double iou_threshold, int64_t max_output,
                                           const c10::optional<at::Tensor>& idxs,
                                           const c10::optional<at::Tensor>& valid) {
  check_nms_args(boxes, scores, iou_threshold, max_output, idxs, valid);
  at::Tensor indices, out_valid;
  std::tie(indices, out_valid) = empty_nms_outputs(scores, max_output);
  const int64_t rows = num_rows(scores).expect_int();
  const int64_t n = scores.size(-1);
  if (rows == 0 || max_output == 0) return {indices, out_valid};
  // idxs as int64 (a copy only for other integer dtypes).
  at::Tensor ids;
  if (nms_has(idxs)) ids = idxs->to(at::kLong);
  const Inputs in{boxes, scores, nms_has(idxs) ? &ids : nullptr,
                  nms_has(valid) ? &*valid : nullptr};
  int64_t* out_index = indices.data_ptr<int64_t>();
  bool* out_ok = out_valid.data_ptr<bool>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, boxes.scalar_type(), "nms_cpu", [&] {
    if (n <= std::numeric_limits<int32_t>::max()) {
      nms_rows<scalar_t, int32_t>(in, rows, n, iou_threshold, max_output, out_index, out_ok);
    } else {
      nms_rows<scalar_t, int64_t>(in, rows, n, iou_threshold, max_output, out_index, out_ok);
    }
  });
  return {indices, out_valid};
}

}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("nms", TORCH_FN(syncfree::ops::nms_cpu));
}
