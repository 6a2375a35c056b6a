// CPU backend of syncfree::multi_scale_roi_align (the internal ops
// _multi_scale_roi_align and its backward): the torch adapter around the
// framework-free rule (core/roi_align.h), compiled without floating-point
// contraction so that every value is torchvision's CPU roi_align's.
//
// Forward: boxes in parallel; each box computes its samples' taps once and
// pools every channel of its level (torchvision's loop). Backward: (image,
// block of channels) in parallel; each task walks its image's boxes in
// increasing order and adds each bin's gradient in torchvision's order
// (box, bin, sample, corner), so every element of a level's gradient receives
// the same additions in the same order as torchvision's per-level backward.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "core/roi_align.h"
#include "cpu/common.h"
#include "ops/common.h"
#include "ops/multi_scale_roi_align.h"

namespace syncfree {
namespace ops {

namespace {

constexpr const char* kOp = "multi_scale_roi_align";

// float for float16, bfloat16 and float32 (the computation torchvision's
// autocast does for the two narrow types), double for float64.
template <typename In>
using ComputeType = at::opmath_type<In>;

struct Level {
  int64_t height, width;
  double scale;
};

std::vector<Level> levels_from(c10::SymIntArrayRef sizes, at::ArrayRef<double> scales) {
  std::vector<Level> out;
  for (size_t l = 0; l < scales.size(); ++l) {
    out.push_back({sizes[2 + 2 * l].expect_int(), sizes[3 + 2 * l].expect_int(), scales[l]});
  }
  return out;
}

// Whether a box of this level index is pooled: -1 is "not pooled", a level
// that does not exist is not pooled either (the internal op may be called
// directly), and a level without pixels has nothing to sample (zeros).
bool pooled(const std::vector<Level>& geo, int64_t level) {
  return level >= 0 && level < static_cast<int64_t>(geo.size()) &&
         geo[static_cast<size_t>(level)].height > 0 && geo[static_cast<size_t>(level)].width > 0;
}

// Box r's coordinates in T (any floating dtype, any strides).
template <typename T>
void read_box(const at::Tensor& boxes, int64_t r, T* out) {
  const int64_t k = boxes.size(1);
  const int64_t b = r / k, j = r % k;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, boxes.scalar_type(), "read_box", [&] {
    const scalar_t* p =
        boxes.const_data_ptr<scalar_t>() + b * boxes.stride(0) + j * boxes.stride(1);
    for (int c = 0; c < 4; ++c) out[c] = static_cast<T>(p[c * boxes.stride(2)]);
  });
}

template <typename T>
core::RoiGeometry<T> geometry_of(const T* box, const Level& level, int64_t ph, int64_t pw,
                                 int64_t sampling_ratio, bool aligned) {
  return core::roi_geometry<T>(box[0], box[1], box[2], box[3], static_cast<T>(level.scale),
                               static_cast<int>(ph), static_cast<int>(pw),
                               static_cast<int>(sampling_ratio), aligned);
}

template <typename In>
void pool_forward(const std::vector<at::Tensor>& features, const at::Tensor& boxes,
                  const int64_t* levels, const std::vector<Level>& geo, int64_t ph, int64_t pw,
                  int64_t sampling_ratio, bool aligned, In* out) {
  using T = ComputeType<In>;
  const int64_t rois = boxes.size(0) * boxes.size(1);
  const int64_t k = boxes.size(1);
  const int64_t channels = features[0].size(1);
  const int64_t bins = ph * pw;
  const int samples = static_cast<int>(sampling_ratio * sampling_ratio);
  // A box's work: every channel's bins, 4 samples' taps each.
  const int64_t per_roi = channels * bins * samples * 4 + bins * samples * 16;
  at::parallel_for(0, rois, parallel_grain(per_roi), [&](int64_t begin, int64_t end) {
    std::vector<core::BilinearTap<T>> taps(static_cast<size_t>(bins * samples));
    for (int64_t r = begin; r < end; ++r) {
      In* o = out + r * channels * bins;
      const int64_t level = levels[r];
      if (!pooled(geo, level)) {
        std::fill(o, o + channels * bins, In(0));
        continue;
      }
      T box[4];
      read_box<T>(boxes, r, box);
      const Level& lv = geo[static_cast<size_t>(level)];
      const core::RoiGeometry<T> g = geometry_of<T>(box, lv, ph, pw, sampling_ratio, aligned);
      core::roi_taps<T>(g, lv.height, lv.width, static_cast<int>(ph), static_cast<int>(pw),
                        taps.data());
      const int64_t plane = lv.height * lv.width;
      const In* base = features[static_cast<size_t>(level)].const_data_ptr<In>() +
                       (r / k) * channels * plane;
      // Four channels at a time: each tap is loaded once for four
      // independent sums, each in torchvision's order (the same bits).
      int64_t c = 0;
      for (; c + 4 <= channels; c += 4) {
        const In* p0 = base + c * plane;
        const In* p1 = p0 + plane;
        const In* p2 = p1 + plane;
        const In* p3 = p2 + plane;
        for (int64_t bin = 0; bin < bins; ++bin) {
          const core::BilinearTap<T>* t = taps.data() + bin * samples;
          T v0 = 0., v1 = 0., v2 = 0., v3 = 0.;
          for (int s = 0; s < samples; ++s) {
            const core::BilinearTap<T>& q = t[s];
            v0 += core::tap_value<T, In>(q, p0);
            v1 += core::tap_value<T, In>(q, p1);
            v2 += core::tap_value<T, In>(q, p2);
            v3 += core::tap_value<T, In>(q, p3);
          }
          v0 /= g.count;
          v1 /= g.count;
          v2 /= g.count;
          v3 /= g.count;
          o[c * bins + bin] = static_cast<In>(v0);
          o[(c + 1) * bins + bin] = static_cast<In>(v1);
          o[(c + 2) * bins + bin] = static_cast<In>(v2);
          o[(c + 3) * bins + bin] = static_cast<In>(v3);
        }
      }
      for (; c < channels; ++c) {
        const In* p = base + c * plane;
        for (int64_t bin = 0; bin < bins; ++bin) {
          o[c * bins + bin] =
              static_cast<In>(core::pool_bin<T, In>(taps.data() + bin * samples, samples, p,
                                                    g.count));
        }
      }
    }
  });
}

// Channel blocks of the backward: enough tasks for the threads, each block
// long enough to amortize its boxes' taps.
int64_t channel_block(int64_t batch, int64_t channels) {
  const int64_t threads = at::get_num_threads();
  const int64_t blocks = std::max<int64_t>(1, (2 * threads + batch - 1) / std::max<int64_t>(batch, 1));
  return std::max<int64_t>(16, (channels + blocks - 1) / blocks);
}

// Adds into acc (T per element: float for the narrow dtypes) per level.
template <typename In>
void pool_backward(const at::Tensor& grad, const at::Tensor& boxes, const int64_t* levels,
                   const std::vector<Level>& geo, int64_t ph, int64_t pw, int64_t sampling_ratio,
                   bool aligned, const std::vector<ComputeType<In>*>& acc, int64_t channels) {
  using T = ComputeType<In>;
  const int64_t batch = boxes.size(0), k = boxes.size(1);
  const int64_t bins = ph * pw;
  const int samples = static_cast<int>(sampling_ratio * sampling_ratio);
  const int64_t block = std::min<int64_t>(std::max<int64_t>(channels, 1), channel_block(batch, channels));
  const int64_t blocks = (channels + block - 1) / block;
  const In* g_base = grad.const_data_ptr<In>();
  const int64_t gn = grad.stride(0), gc = grad.stride(1), gh = grad.stride(2), gw = grad.stride(3);
  const int64_t per_task = k * block * bins * samples * 8;
  at::parallel_for(0, batch * blocks, parallel_grain(per_task), [&](int64_t begin, int64_t end) {
    std::vector<core::BilinearTap<T>> taps(static_cast<size_t>(bins * samples));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / blocks;
      const int64_t c0 = (task % blocks) * block, c1 = std::min(channels, c0 + block);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = b * k + j;
        const int64_t level = levels[r];
        if (!pooled(geo, level)) continue;
        T box[4];
        read_box<T>(boxes, r, box);
        const Level& lv = geo[static_cast<size_t>(level)];
        const core::RoiGeometry<T> g = geometry_of<T>(box, lv, ph, pw, sampling_ratio, aligned);
        core::roi_taps<T>(g, lv.height, lv.width, static_cast<int>(ph), static_cast<int>(pw),
                          taps.data());
        // torchvision's backward divides by grid_h * grid_w (never 0 here).
        const T count = static_cast<T>(g.grid_h * g.grid_w);
        const int64_t plane = lv.height * lv.width;
        for (int64_t c = c0; c < c1; ++c) {
          T* dst = acc[static_cast<size_t>(level)] + (b * channels + c) * plane;
          const auto add = [dst](int64_t pos, T v) { dst[pos] += v; };
          for (int64_t y = 0; y < ph; ++y) {
            for (int64_t x = 0; x < pw; ++x) {
              const T go = static_cast<T>(g_base[r * gn + c * gc + y * gh + x * gw]);
              const core::BilinearTap<T>* t = taps.data() + (y * pw + x) * samples;
              for (int s = 0; s < samples; ++s) core::scatter_tap<T>(t[s], go, count, add);
            }
          }
        }
      }
    }
  });
}

}  // namespace

at::Tensor multi_scale_roi_align_cpu(at::TensorList features, const at::Tensor& boxes,
                                     const at::Tensor& levels, at::IntArrayRef output_size,
                                     at::ArrayRef<double> spatial_scales, int64_t sampling_ratio,
                                     bool aligned) {
  check_roi_align_args(kOp, features, boxes, output_size, spatial_scales, sampling_ratio,
                       c10::nullopt);
  check_roi_levels(kOp, boxes, levels);
  at::Tensor out = empty_roi_align_output(kOp, features, boxes, output_size);
  if (out.numel() == 0) return out;
  std::vector<at::Tensor> maps;
  std::vector<c10::SymInt> sizes{features[0].sym_size(0), features[0].sym_size(1)};
  for (const at::Tensor& f : features) {
    maps.push_back(f.contiguous());
    sizes.push_back(f.sym_size(2));
    sizes.push_back(f.sym_size(3));
  }
  const std::vector<Level> geo = levels_from(sizes, spatial_scales);
  const at::Tensor lv = levels.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "roi_align_cpu",
                                  [&] {
                                    pool_forward<scalar_t>(maps, boxes, lv.const_data_ptr<int64_t>(),
                                                           geo, output_size[0], output_size[1],
                                                           sampling_ratio, aligned,
                                                           out.mutable_data_ptr<scalar_t>());
                                  });
  return out;
}

std::vector<at::Tensor> multi_scale_roi_align_backward_cpu(
    const at::Tensor& grad, const at::Tensor& boxes, const at::Tensor& levels,
    c10::SymIntArrayRef feature_sizes, at::IntArrayRef output_size,
    at::ArrayRef<double> spatial_scales, int64_t sampling_ratio, bool aligned) {
  check_roi_backward_args(kOp, grad, boxes, levels, feature_sizes, output_size, spatial_scales);
  const int64_t rois = boxes.size(0) * boxes.size(1);
  const int64_t channels = feature_sizes[1].expect_int();
  const at::ScalarType t = grad.scalar_type();
  const bool narrow = t == at::kHalf || t == at::kBFloat16;
  // The narrow dtypes accumulate in float32 and are rounded once at the end
  // (torchvision's autocast computes their backward in float32).
  std::vector<at::Tensor> acc =
      zero_roi_align_grads(kOp, feature_sizes, grad.options().dtype(narrow ? at::kFloat : t));
  if (rois > 0 && channels > 0) {
    const std::vector<Level> geo = levels_from(feature_sizes, spatial_scales);
    const at::Tensor lv = levels.contiguous();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "roi_align_backward_cpu", [&] {
      using T = ComputeType<scalar_t>;
      std::vector<T*> dst;
      for (at::Tensor& a : acc) dst.push_back(a.mutable_data_ptr<T>());
      pool_backward<scalar_t>(grad, boxes, lv.const_data_ptr<int64_t>(), geo, output_size[0],
                              output_size[1], sampling_ratio, aligned, dst, channels);
    });
  }
  if (narrow) {
    for (at::Tensor& a : acc) a = a.to(t);
  }
  return acc;
}

}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CPU, m) {
  m.impl("_multi_scale_roi_align", TORCH_FN(syncfree::ops::multi_scale_roi_align_cpu));
  m.impl("_multi_scale_roi_align_backward",
         TORCH_FN(syncfree::ops::multi_scale_roi_align_backward_cpu));
}
