// multi_scale_roi_align: the schemas (the public op, and the internal pooling
// and backward ops the backends implement), the argument checks, the level
// of each box, the Meta kernels, the autograd kernel and the C++ API. The
// CPU kernels live in csrc/cpu/multi_scale_roi_align_cpu.cpp, the CUDA ones
// in csrc/cuda/multi_scale_roi_align_cuda.cpp, the rule in csrc/core/roi_align.h.
#include "ops/multi_scale_roi_align.h"

#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <string>

#include "ops/common.h"
#include "syncfree/syncfree.h"

namespace syncfree {
namespace ops {

namespace {

bool is_roi_feature_dtype(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble;
}

}  // namespace

void check_roi_align_args(const char* op, at::TensorList features, const at::Tensor& boxes,
                          at::IntArrayRef output_size, at::ArrayRef<double> spatial_scales,
                          int64_t sampling_ratio, const c10::optional<at::Tensor>& valid) {
  const int64_t levels = static_cast<int64_t>(features.size());
  TORCH_CHECK(levels >= 1 && levels <= kMaxRoiLevels, "syncfree.", op,
              ": features must hold 1 to ", kMaxRoiLevels,
              " feature maps [B, C, H, W] (one per level, finest first), got ", levels);
  for (int64_t l = 0; l < levels; ++l) {
    const at::Tensor& f = features[l];
    TORCH_CHECK(f.defined(), "syncfree.", op, ": features[", l, "] must be a defined tensor");
    TORCH_CHECK(f.dim() == 4, "syncfree.", op, ": features[", l,
                "] must have shape [B, C, H, W], got shape ", f.sym_sizes());
    if (l == 0) {
      TORCH_CHECK(is_roi_feature_dtype(f.scalar_type()), "syncfree.", op,
                  ": features must be float16, bfloat16, float32 or float64, got dtype ",
                  f.scalar_type());
      continue;
    }
    const at::Tensor& f0 = features[0];
    TORCH_CHECK(f.scalar_type() == f0.scalar_type(), "syncfree.", op, ": features[", l,
                "] must have features[0]'s dtype ", f0.scalar_type(), ", got dtype ",
                f.scalar_type());
    TORCH_CHECK(f.device() == f0.device(), "syncfree.", op, ": features[", l,
                "] must be on features[0]'s device ", f0.device(), ", got ", f.device());
    TORCH_CHECK(f.sym_size(0) == f0.sym_size(0) && f.sym_size(1) == f0.sym_size(1), "syncfree.",
                op, ": features[", l, "] must have features[0]'s batch size and channels [",
                f0.sym_size(0), ", ", f0.sym_size(1), "], got shape ", f.sym_sizes());
  }
  const at::Tensor& f0 = features[0];
  TORCH_CHECK(boxes.defined(), "syncfree.", op, ": boxes must be a defined tensor [B, K, 4]");
  TORCH_CHECK(boxes.dim() == 3 && boxes.sym_size(0) == f0.sym_size(0) && boxes.sym_size(2) == 4,
              "syncfree.", op, ": boxes must have shape [B, K, 4] (x1, y1, x2, y2) with B = ",
              f0.sym_size(0), " (the features' batch size), got shape ", boxes.sym_sizes());
  TORCH_CHECK(at::isFloatingType(boxes.scalar_type()), "syncfree.", op,
              ": boxes must be a floating-point tensor, got dtype ", boxes.scalar_type());
  TORCH_CHECK(boxes.device() == f0.device(), "syncfree.", op,
              ": boxes must be on the features' device ", f0.device(), ", got ", boxes.device());
  TORCH_CHECK(output_size.size() == 2 && output_size[0] >= 1 && output_size[1] >= 1, "syncfree.",
              op, ": output_size must be two sizes (h, w) of at least 1, got ", output_size);
  TORCH_CHECK(static_cast<int64_t>(spatial_scales.size()) == levels, "syncfree.", op,
              ": spatial_scales must hold one scale per level (", levels, "), got ",
              spatial_scales.size(), " scales");
  for (size_t l = 0; l < spatial_scales.size(); ++l) {
    TORCH_CHECK(std::isfinite(spatial_scales[l]) && spatial_scales[l] > 0, "syncfree.", op,
                ": spatial_scales must be finite and positive, got spatial_scales[", l, "] = ",
                spatial_scales[l]);
  }
  TORCH_CHECK(sampling_ratio >= 1, "syncfree.", op,
              ": sampling_ratio must be at least 1 (sampling_ratio x sampling_ratio points per "
              "bin); adaptive sampling (sampling_ratio <= 0) takes a number of points that "
              "depends on each box's size, which static shapes cannot do, got ",
              sampling_ratio);
  // In double: the product of four int64 factors of up to 2^20 each would overflow.
  TORCH_CHECK(static_cast<double>(output_size[0]) * static_cast<double>(output_size[1]) *
                      static_cast<double>(sampling_ratio) * static_cast<double>(sampling_ratio) <=
                  static_cast<double>(kMaxRoiSamples),
              "syncfree.", op,
              ": output_size[0] * output_size[1] * sampling_ratio^2 (the samples per box) must "
              "be at most ",
              kMaxRoiSamples, ", got output_size ", output_size, " and sampling_ratio ",
              sampling_ratio);
  if (valid.has_value() && valid->defined()) {
    TORCH_CHECK(valid->scalar_type() == at::kBool, "syncfree.", op,
                ": valid must be a bool tensor, got dtype ", valid->scalar_type());
    TORCH_CHECK(valid->dim() == 2 && valid->sym_size(0) == boxes.sym_size(0) &&
                    valid->sym_size(1) == boxes.sym_size(1),
                "syncfree.", op, ": valid must have shape boxes.shape[:2] = [", boxes.sym_size(0),
                ", ", boxes.sym_size(1), "], got shape ", valid->sym_sizes());
    TORCH_CHECK(valid->device() == boxes.device(), "syncfree.", op,
                ": valid must be on the boxes' device ", boxes.device(), ", got ",
                valid->device());
  }
}

void check_roi_levels(const char* op, const at::Tensor& boxes, const at::Tensor& levels) {
  TORCH_CHECK(levels.defined() && levels.scalar_type() == at::kLong && levels.dim() == 1 &&
                  levels.sym_size(0) == boxes.sym_size(0) * boxes.sym_size(1) &&
                  levels.device() == boxes.device(),
              "syncfree.", op, ": levels must be an int64 tensor [B * K] on the boxes' device");
}

void check_roi_backward_args(const char* op, const at::Tensor& grad, const at::Tensor& boxes,
                             const at::Tensor& levels, c10::SymIntArrayRef feature_sizes,
                             at::IntArrayRef output_size, at::ArrayRef<double> spatial_scales) {
  check_roi_levels(op, boxes, levels);
  TORCH_CHECK(feature_sizes.size() == 2 + 2 * spatial_scales.size(), "syncfree.", op,
              ": feature_sizes must hold B, C and (H, W) per level");
  const int64_t rois = boxes.size(0) * boxes.size(1);
  const int64_t channels = feature_sizes[1].expect_int();
  TORCH_CHECK(grad.dim() == 4 && grad.size(0) == rois && grad.size(1) == channels &&
                  grad.size(2) == output_size[0] && grad.size(3) == output_size[1],
              "syncfree.", op, ": grad must have the output's shape [", rois, ", ", channels,
              ", ", output_size[0], ", ", output_size[1], "], got ", grad.sizes());
}

at::Tensor empty_roi_align_output(const char* op, at::TensorList features,
                                  const at::Tensor& boxes, at::IntArrayRef output_size) {
  const at::Tensor& f0 = features[0];
  const auto subject = [&] {
    return shape_subject("boxes", boxes) + " and " + shape_subject("features[0]", f0);
  };
  return allocate(op, subject, "the pooled features",
                  {boxes.sym_size(0) * boxes.sym_size(1), f0.sym_size(1),
                   c10::SymInt(output_size[0]), c10::SymInt(output_size[1])},
                  f0.options());
}

std::vector<at::Tensor> zero_roi_align_grads(const char* op, c10::SymIntArrayRef feature_sizes,
                                             const at::TensorOptions& options) {
  TORCH_CHECK(feature_sizes.size() >= 4 && feature_sizes.size() % 2 == 0, "syncfree.", op,
              ": feature_sizes must be [B, C, H_0, W_0, ...], got ", feature_sizes);
  std::vector<at::Tensor> grads;
  for (size_t i = 2; i < feature_sizes.size(); i += 2) {
    grads.push_back(at::zeros_symint(
        {feature_sizes[0], feature_sizes[1], feature_sizes[i], feature_sizes[i + 1]}, options));
  }
  return grads;
}

namespace {

constexpr const char* kOp = "multi_scale_roi_align";

// Each box's level index, or -1 when it is not pooled (a slot that is not
// valid, a non-finite coordinate, or a level that is NaN: with several
// levels, a box of negative area; or a level without a feature map: scales
// that skip a power of two give the mapper more levels than maps; in both
// cases torchvision's MultiScaleRoIAlign pools no level).
// torchvision's LevelMapper, with the same tensor operations in the same
// order (its log2 and its division are ATen's on every backend), on the
// boxes in their own dtype (float16 and bfloat16 upcast to float32, as
// torchvision's box_area does).
at::Tensor roi_levels(int64_t num_levels, const at::Tensor& boxes,
                      const c10::optional<at::Tensor>& valid, at::ArrayRef<double> scales,
                      double canonical_scale, int64_t canonical_level, double eps) {
  at::NoGradGuard no_grad;
  const at::Tensor flat = boxes.reshape_symint({boxes.sym_size(0) * boxes.sym_size(1), 4});
  at::Tensor usable = at::isfinite(flat).all(1);
  if (valid.has_value() && valid->defined()) usable = usable.logical_and(valid->reshape(-1));
  if (num_levels == 1) {  // torchvision pools every box from the one level, no mapper
    return at::zeros_like(usable, usable.options().dtype(at::kLong)).masked_fill_(
        usable.logical_not(), -1);
  }
  const at::ScalarType t = flat.scalar_type();
  const at::Tensor b = (t == at::kHalf || t == at::kBFloat16) ? flat.to(at::kFloat) : flat;
  // torchvision: int(-log2(scales[0])), int(-log2(scales[-1])) from float32 tensors.
  const int64_t k_min = static_cast<int64_t>(-std::log2(static_cast<float>(scales.front())));
  const int64_t k_max = static_cast<int64_t>(-std::log2(static_cast<float>(scales.back())));
  const at::Tensor area = (b.select(1, 2) - b.select(1, 0)) * (b.select(1, 3) - b.select(1, 1));
  const at::Tensor s = at::sqrt(area);
  const at::Tensor target =
      at::clamp(at::floor(at::log2(s / canonical_scale).add(canonical_level).add(eps)), k_min,
                k_max);
  const at::Tensor level = target.to(at::kLong) - k_min;
  const at::Tensor pooled =
      usable.logical_and(target.isnan().logical_not()).logical_and(level.lt(num_levels));
  return level.masked_fill_(pooled.logical_not(), -1);
}

using PoolFn = at::Tensor(at::TensorList, const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                          at::ArrayRef<double>, int64_t, bool);
using BackwardFn = std::vector<at::Tensor>(const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&, c10::SymIntArrayRef,
                                           at::IntArrayRef, at::ArrayRef<double>, int64_t, bool);

at::Tensor call_pool(at::TensorList features, const at::Tensor& boxes, const at::Tensor& levels,
                     at::IntArrayRef output_size, at::ArrayRef<double> scales,
                     int64_t sampling_ratio, bool aligned) {
  static auto op = find_op<PoolFn>("syncfree::_multi_scale_roi_align");
  return op.call(features, boxes, levels, output_size, scales, sampling_ratio, aligned);
}

std::vector<at::Tensor> call_backward(const at::Tensor& grad, const at::Tensor& boxes,
                                      const at::Tensor& levels,
                                      c10::SymIntArrayRef feature_sizes,
                                      at::IntArrayRef output_size, at::ArrayRef<double> scales,
                                      int64_t sampling_ratio, bool aligned) {
  static auto op = find_op<BackwardFn>("syncfree::_multi_scale_roi_align_backward");
  return op.call(grad, boxes, levels, feature_sizes, output_size, scales, sampling_ratio,
                 aligned);
}

struct PublicArgs {
  at::TensorList features;
  const at::Tensor& boxes;
  at::IntArrayRef output_size;
  at::ArrayRef<double> scales;
  int64_t sampling_ratio;
  bool aligned;
  const c10::optional<at::Tensor>& valid;
  double canonical_scale;
  int64_t canonical_level;
  double eps;
};

void check_public(const PublicArgs& a) {
  check_roi_align_args(kOp, a.features, a.boxes, a.output_size, a.scales, a.sampling_ratio,
                       a.valid);
  TORCH_CHECK(std::isfinite(a.canonical_scale) && a.canonical_scale > 0, "syncfree.", kOp,
              ": canonical_scale must be finite and positive, got ", a.canonical_scale);
  TORCH_CHECK(std::isfinite(a.eps), "syncfree.", kOp, ": eps must be finite, got ", a.eps);
  TORCH_CHECK(std::abs(a.canonical_level) <= 1024, "syncfree.", kOp,
              ": canonical_level must be in [-1024, 1024], got ", a.canonical_level);
}

at::Tensor levels_of(const PublicArgs& a) {
  return roi_levels(static_cast<int64_t>(a.features.size()), a.boxes, a.valid, a.scales,
                    a.canonical_scale, a.canonical_level, a.eps);
}

// Below autograd (inference, Meta, any backend).
at::Tensor multi_scale_roi_align_forward(at::TensorList features, const at::Tensor& boxes,
                                         at::IntArrayRef output_size,
                                         at::ArrayRef<double> spatial_scales,
                                         int64_t sampling_ratio, bool aligned,
                                         const c10::optional<at::Tensor>& valid,
                                         double canonical_scale, int64_t canonical_level,
                                         double eps) {
  const PublicArgs a{features, boxes,  output_size,     spatial_scales,  sampling_ratio,
                     aligned,  valid,  canonical_scale, canonical_level, eps};
  check_public(a);
  return call_pool(features, boxes, levels_of(a), output_size, spatial_scales, sampling_ratio,
                   aligned);
}

// d output / d features: the internal backward op, which scatters each
// pooled bin's gradient into its box's level (nothing for boxes that were not
// pooled). Boxes get no gradient, as in torchvision's roi_align.
class RoiAlignFunction : public torch::autograd::Function<RoiAlignFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList features,
                                                const at::Tensor& boxes,
                                                const at::Tensor& levels,
                                                at::IntArrayRef output_size,
                                                at::ArrayRef<double> scales,
                                                int64_t sampling_ratio, bool aligned) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = call_pool(features, boxes, levels, output_size, scales, sampling_ratio,
                               aligned);
    ctx->save_for_backward({boxes, levels});
    std::vector<c10::SymInt> sizes{features[0].sym_size(0), features[0].sym_size(1)};
    for (const at::Tensor& f : features) {
      sizes.push_back(f.sym_size(2));
      sizes.push_back(f.sym_size(3));
    }
    ctx->saved_data["feature_sizes"] = c10::IValue(sizes);
    ctx->saved_data["output_size"] = output_size.vec();
    ctx->saved_data["scales"] = scales.vec();
    ctx->saved_data["sampling_ratio"] = sampling_ratio;
    ctx->saved_data["aligned"] = aligned;
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const std::vector<c10::SymInt> sizes = ctx->saved_data["feature_sizes"].toSymIntVector();
    const std::vector<int64_t> output_size = ctx->saved_data["output_size"].toIntVector();
    const std::vector<double> scales = ctx->saved_data["scales"].toDoubleVector();
    const size_t num_levels = (sizes.size() - 2) / 2;
    torch::autograd::variable_list out;
    if (grads[0].defined()) {
      out = call_backward(grads[0], saved[0], saved[1], sizes, output_size, scales,
                          ctx->saved_data["sampling_ratio"].toInt(),
                          ctx->saved_data["aligned"].toBool());
    } else {
      out.resize(num_levels);
    }
    // boxes, levels, output_size, scales, sampling_ratio, aligned: no gradient.
    for (int i = 0; i < 6; ++i) out.emplace_back();
    return out;
  }
};

at::Tensor multi_scale_roi_align_autograd(at::TensorList features, const at::Tensor& boxes,
                                          at::IntArrayRef output_size,
                                          at::ArrayRef<double> spatial_scales,
                                          int64_t sampling_ratio, bool aligned,
                                          const c10::optional<at::Tensor>& valid,
                                          double canonical_scale, int64_t canonical_level,
                                          double eps) {
  const PublicArgs a{features, boxes,  output_size,     spatial_scales,  sampling_ratio,
                     aligned,  valid,  canonical_scale, canonical_level, eps};
  check_public(a);  // before a node
  const at::Tensor levels = levels_of(a);
  bool needs_grad = false;
  for (const at::Tensor& f : features) needs_grad = needs_grad || f.requires_grad();
  if (!(needs_grad && at::GradMode::is_enabled())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_pool(features, boxes, levels, output_size, spatial_scales, sampling_ratio,
                     aligned);
  }
  return RoiAlignFunction::apply(features, boxes, levels, output_size, spatial_scales,
                                 sampling_ratio, aligned)[0];
}

// Meta kernels of the internal ops: checks and shapes.
at::Tensor pool_meta(at::TensorList features, const at::Tensor& boxes, const at::Tensor& levels,
                     at::IntArrayRef output_size, at::ArrayRef<double> scales,
                     int64_t sampling_ratio, bool aligned) {
  check_roi_align_args(kOp, features, boxes, output_size, scales, sampling_ratio, c10::nullopt);
  check_roi_levels(kOp, boxes, levels);
  return empty_roi_align_output(kOp, features, boxes, output_size);
}

std::vector<at::Tensor> backward_meta(const at::Tensor& grad, const at::Tensor& boxes,
                                      const at::Tensor& levels,
                                      c10::SymIntArrayRef feature_sizes,
                                      at::IntArrayRef output_size, at::ArrayRef<double> scales,
                                      int64_t sampling_ratio, bool aligned) {
  check_roi_levels(kOp, boxes, levels);
  std::vector<at::Tensor> grads;
  for (size_t i = 2; i + 1 < feature_sizes.size(); i += 2) {
    grads.push_back(at::empty_symint(
        {feature_sizes[0], feature_sizes[1], feature_sizes[i], feature_sizes[i + 1]},
        grad.options()));
  }
  return grads;
}

}  // namespace
}  // namespace ops

at::Tensor multi_scale_roi_align(at::TensorList features, const at::Tensor& boxes,
                                 at::IntArrayRef output_size,
                                 at::ArrayRef<double> spatial_scales, int64_t sampling_ratio,
                                 const RoiAlignOptions& o) {
  using Fn = at::Tensor(at::TensorList, const at::Tensor&, at::IntArrayRef, at::ArrayRef<double>,
                        int64_t, bool, const c10::optional<at::Tensor>&, double, int64_t, double);
  static auto op = ops::find_op<Fn>("syncfree::multi_scale_roi_align");
  return op.call(features, boxes, output_size, spatial_scales, sampling_ratio, o.aligned_,
                 o.valid_, o.canonical_scale_, o.canonical_level_, o.eps_);
}

}  // namespace syncfree

TORCH_LIBRARY_FRAGMENT(syncfree, m) {
  m.def(
      "multi_scale_roi_align(Tensor[] features, Tensor boxes, int[2] output_size, "
      "float[] spatial_scales, int sampling_ratio, bool aligned=False, *, Tensor? valid=None, "
      "float canonical_scale=224., int canonical_level=4, float eps=1e-6) -> Tensor");
  // Internal: the pooling and its backward below autograd, which the backends
  // implement; levels [B * K] from the public op (-1: not pooled).
  m.def(
      "_multi_scale_roi_align(Tensor[] features, Tensor boxes, Tensor levels, int[2] "
      "output_size, float[] spatial_scales, int sampling_ratio, bool aligned) -> Tensor");
  m.def(
      "_multi_scale_roi_align_backward(Tensor grad, Tensor boxes, Tensor levels, "
      "SymInt[] feature_sizes, int[2] output_size, float[] spatial_scales, int sampling_ratio, "
      "bool aligned) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(syncfree, Meta, m) {
  m.impl("_multi_scale_roi_align", TORCH_FN(syncfree::ops::pool_meta));
  m.impl("_multi_scale_roi_align_backward", TORCH_FN(syncfree::ops::backward_meta));
}

TORCH_LIBRARY_IMPL(syncfree, CompositeExplicitAutograd, m) {
  m.impl("multi_scale_roi_align", TORCH_FN(syncfree::ops::multi_scale_roi_align_forward));
}

TORCH_LIBRARY_IMPL(syncfree, Autograd, m) {
  m.impl("multi_scale_roi_align", TORCH_FN(syncfree::ops::multi_scale_roi_align_autograd));
}
