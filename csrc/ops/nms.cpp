// nms: schema (written once), argument checks, the Meta kernel and the C++
// API. The CPU kernel lives in csrc/cpu/nms_cpu.cpp, the CUDA one in
// csrc/cuda/nms_cuda.cpp, the rule in csrc/core/nms.h.
#include "ops/nms.h"

#include "ops/common.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

namespace {

bool is_nms_box_dtype(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble;
}

bool is_nms_idxs_dtype(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong;
}

// The same shape as scores (symbolic sizes compare symbolically).
bool same_shape(const at::Tensor& t, const at::Tensor& scores) {
  return t.sym_sizes() == scores.sym_sizes();
}

}  // namespace

void check_nms_args(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold,
                    int64_t max_output, const c10::optional<at::Tensor>& idxs,
                    const c10::optional<at::Tensor>& valid) {
  TORCH_CHECK(boxes.defined(), "syncfree.nms: boxes must be a defined tensor of shape [..., N, 4]");
  TORCH_CHECK(scores.defined(), "syncfree.nms: scores must be a defined tensor of shape [..., N]");
  TORCH_CHECK(boxes.dim() >= 2 && boxes.sym_size(-1) == 4,
              "syncfree.nms: boxes must have shape [..., N, 4] (x1, y1, x2, y2 in the last "
              "dimension), got shape ",
              boxes.sym_sizes());
  TORCH_CHECK(is_nms_box_dtype(boxes.scalar_type()),
              "syncfree.nms: boxes must be float16, bfloat16, float32 or float64, got dtype ",
              boxes.scalar_type());
  TORCH_CHECK(scores.scalar_type() == boxes.scalar_type(),
              "syncfree.nms: scores must have the boxes' dtype ", boxes.scalar_type(),
              ", got dtype ", scores.scalar_type());
  const auto box_sizes = boxes.sym_sizes();
  TORCH_CHECK(scores.dim() == boxes.dim() - 1 &&
                  scores.sym_sizes() == box_sizes.slice(0, box_sizes.size() - 1),
              "syncfree.nms: scores must have shape boxes.shape[:-1] = ",
              box_sizes.slice(0, box_sizes.size() - 1), ", got shape ", scores.sym_sizes());
  TORCH_CHECK(scores.device() == boxes.device(),
              "syncfree.nms: scores must be on the boxes' device ", boxes.device(), ", got ",
              scores.device());
  TORCH_CHECK(!std::isnan(iou_threshold),
              "syncfree.nms: iou_threshold must be a number (any value, compared with a strict "
              "`iou > iou_threshold`), got nan");
  TORCH_CHECK(max_output >= 0, "syncfree.nms: max_output must be >= 0, got ", max_output);
  if (nms_has(idxs)) {
    TORCH_CHECK(is_nms_idxs_dtype(idxs->scalar_type()),
                "syncfree.nms: idxs must be an integer tensor (uint8, int8, int16, int32, int64), "
                "got dtype ",
                idxs->scalar_type());
    TORCH_CHECK(same_shape(*idxs, scores), "syncfree.nms: idxs must have the scores' shape ",
                scores.sym_sizes(), ", got shape ", idxs->sym_sizes());
    TORCH_CHECK(idxs->device() == boxes.device(), "syncfree.nms: idxs must be on the boxes' device ",
                boxes.device(), ", got ", idxs->device());
  }
  if (nms_has(valid)) {
    TORCH_CHECK(valid->scalar_type() == at::kBool,
                "syncfree.nms: valid must be a bool tensor, got dtype ", valid->scalar_type());
    TORCH_CHECK(same_shape(*valid, scores), "syncfree.nms: valid must have the scores' shape ",
                scores.sym_sizes(), ", got shape ", valid->sym_sizes());
    TORCH_CHECK(valid->device() == boxes.device(),
                "syncfree.nms: valid must be on the boxes' device ", boxes.device(), ", got ",
                valid->device());
  }
  const c10::optional<int64_t> rows = num_rows(scores).maybe_as_int();
  TORCH_CHECK(max_output == 0 || !rows.has_value() ||
                  *rows <= std::numeric_limits<int64_t>::max() / max_output,
              "syncfree.nms: max_output must leave the output indexable by int64, got ",
              max_output, " slots for ", rows.value_or(0), " rows");
}

std::tuple<at::Tensor, at::Tensor> empty_nms_outputs(const at::Tensor& scores,
                                                     int64_t max_output) {
  std::vector<c10::SymInt> sizes(scores.sym_sizes().begin(), scores.sym_sizes().end());
  sizes.back() = max_output;
  const auto subject = [&] {
    return "max_output = " + std::to_string(max_output) + " for " + shape_subject("scores", scores);
  };
  return {allocate("nms", subject, "indices", sizes, scores.options().dtype(at::kLong)),
          allocate("nms", subject, "valid", sizes, scores.options().dtype(at::kBool))};
}

namespace {

std::tuple<at::Tensor, at::Tensor> nms_meta(const at::Tensor& boxes, const at::Tensor& scores,
                                            double iou_threshold, int64_t max_output,
                                            const c10::optional<at::Tensor>& idxs,
                                            const c10::optional<at::Tensor>& valid) {
  check_nms_args(boxes, scores, iou_threshold, max_output, idxs, valid);
  return empty_nms_outputs(scores, max_output);
}

using NmsFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double,
                                                 int64_t, const c10::optional<at::Tensor>&,
                                                 const c10::optional<at::Tensor>&);

}  // namespace
}  // namespace ops

std::tuple<at::Tensor, at::Tensor> nms(const at::Tensor& boxes, const at::Tensor& scores,
                                       double iou_threshold, int64_t max_output,
                                       const NmsOptions& o) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("syncfree::nms", "")
                       .typed<ops::NmsFn>();
  return op.call(boxes, scores, iou_threshold, max_output, o.idxs_, o.valid_);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def(
      "nms(Tensor boxes, Tensor scores, float iou_threshold, int max_output, *, "
      "Tensor? idxs=None, Tensor? valid=None) -> (Tensor indices, Tensor valid)");
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("nms", TORCH_FN(syncfree::ops::nms_meta));
}

// No differentiable output: autograd passes straight through.
TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("nms", torch::CppFunction::makeFallthrough());
}
