// RoI Align: the rule, framework-free (no torch), shared by the CPU kernel
// and the CUDA kernels of multi_scale_roi_align.
//
// The rule is torchvision.ops.roi_align's, written the way its CPU kernel
// computes it, operation by operation in the compute type T (float for
// float16, bfloat16 and float32 features, double for float64), so that the
// pooled values are equal, not merely close (the files that use it are
// compiled without floating-point contraction):
//   start  = coordinate * spatial_scale - offset       (offset 0.5 if aligned)
//   size   = end - start, at least 1 unless aligned
//   bin    = size / pooled
//   sample = start + p * bin + (i + 0.5) * bin / grid  (grid = sampling_ratio)
//   value  = sum over the bin's grid x grid samples, in row-major order, of
//            the bilinear tap w1 v1 + w2 v2 + w3 v3 + w4 v4, divided by
//            max(grid * grid, 1)
// A sample outside [-1, H] x [-1, W] (or with a NaN coordinate) contributes
// nothing: in the forward its weights are zero (0 * v, as torchvision), in
// the backward it adds nothing.
//
// Level of a RoI: torchvision's LevelMapper is computed with the same tensor
// operations as torchvision's in the torch layer (ops/multi_scale_roi_align.cpp),
// not here: its log2 is ATen's, whose bits a scalar libm need not reproduce.
#pragma once

#include <cstdint>

#include "core/platform.h"

namespace syncfree {
namespace core {

// Where one RoI samples its level: torchvision's roi_align, before the loops.
template <typename T>
struct RoiGeometry {
  T start_h, start_w;  // top-left corner on the level, in level pixels
  T bin_h, bin_w;      // size of one output bin
  int grid_h, grid_w;  // samples per bin along each axis (the sampling ratio)
  T count;             // the forward's divisor: max(grid_h * grid_w, 1)
};

// box (x1, y1, x2, y2) in image coordinates, already in T.
template <typename T>
SYNCFREE_HD RoiGeometry<T> roi_geometry(T x1, T y1, T x2, T y2, T spatial_scale,
                                        int pooled_h, int pooled_w, int sampling_ratio,
                                        bool aligned) {
  RoiGeometry<T> g;
  // No rounding: torchvision's "implementation detail [that] is critical".
  const T offset = aligned ? (T)0.5 : (T)0.0;
  g.start_w = x1 * spatial_scale - offset;
  g.start_h = y1 * spatial_scale - offset;
  const T end_w = x2 * spatial_scale - offset;
  const T end_h = y2 * spatial_scale - offset;
  T width = end_w - g.start_w;
  T height = end_h - g.start_h;
  if (!aligned) {  // malformed RoIs are forced to 1 x 1 (as std::max: a NaN size stays NaN)
    width = width < (T)1. ? (T)1. : width;
    height = height < (T)1. ? (T)1. : height;
  }
  g.bin_h = static_cast<T>(height) / static_cast<T>(pooled_h);
  g.bin_w = static_cast<T>(width) / static_cast<T>(pooled_w);
  g.grid_h = sampling_ratio;
  g.grid_w = sampling_ratio;
  g.count = static_cast<T>(g.grid_h * g.grid_w < 1 ? 1 : g.grid_h * g.grid_w);
  return g;
}

// The sample (iy, ix) of bin (ph, pw), as torchvision computes it.
template <typename T>
SYNCFREE_HD T roi_sample_y(const RoiGeometry<T>& g, int ph, int iy) {
  return g.start_h + ph * g.bin_h +
         static_cast<T>(iy + .5f) * g.bin_h / static_cast<T>(g.grid_h);
}

template <typename T>
SYNCFREE_HD T roi_sample_x(const RoiGeometry<T>& g, int pw, int ix) {
  return g.start_w + pw * g.bin_w +
         static_cast<T>(ix + .5f) * g.bin_w / static_cast<T>(g.grid_w);
}

// One bilinear tap: four positions in a [height, width] plane and their weights.
template <typename T>
struct BilinearTap {
  int64_t pos1, pos2, pos3, pos4;
  T w1, w2, w3, w4;
  bool inside;  // false: the sample lies outside (or is NaN), weights zero, positions 0
};

template <typename T>
SYNCFREE_HD BilinearTap<T> bilinear_tap(int64_t height, int64_t width, T y, T x) {
  BilinearTap<T> t;
  // Written as !(in range), so that a NaN coordinate takes this branch
  // instead of reaching the integer conversions below.
  if (!(y >= -1.0 && y <= height && x >= -1.0 && x <= width)) {
    t.pos1 = t.pos2 = t.pos3 = t.pos4 = 0;
    t.w1 = t.w2 = t.w3 = t.w4 = 0;
    t.inside = false;
    return t;
  }
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  int64_t y_low = static_cast<int64_t>(y);
  int64_t x_low = static_cast<int64_t>(x);
  int64_t y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = (T)y_low;
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = (T)x_low;
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - y_low;
  const T lx = x - x_low;
  // `1.` is a double, as in torchvision: the difference is rounded to T once.
  const T hy = 1. - ly, hx = 1. - lx;
  t.w1 = hy * hx;
  t.w2 = hy * lx;
  t.w3 = ly * hx;
  t.w4 = ly * lx;
  t.pos1 = y_low * width + x_low;
  t.pos2 = y_low * width + x_high;
  t.pos3 = y_high * width + x_low;
  t.pos4 = y_high * width + x_high;
  t.inside = true;
  return t;
}

// The taps of every sample of a RoI, bin by bin (row-major), then sample by
// sample (row-major) within the bin: pooled_h * pooled_w * grid_h * grid_w
// entries written to `taps`.
template <typename T>
inline void roi_taps(const RoiGeometry<T>& g, int64_t height, int64_t width, int pooled_h,
                     int pooled_w, BilinearTap<T>* taps) {
  int64_t k = 0;
  for (int ph = 0; ph < pooled_h; ++ph) {
    for (int pw = 0; pw < pooled_w; ++pw) {
      for (int iy = 0; iy < g.grid_h; ++iy) {
        const T y = roi_sample_y(g, ph, iy);
        for (int ix = 0; ix < g.grid_w; ++ix) {
          taps[k++] = bilinear_tap<T>(height, width, y, roi_sample_x(g, pw, ix));
        }
      }
    }
  }
}

// One sample's bilinear value over one channel plane, in torchvision's
// order: ((w1 v1 + w2 v2) + w3 v3) + w4 v4.
template <typename T, typename In>
SYNCFREE_HD T tap_value(const BilinearTap<T>& t, const In* plane) {
  return t.w1 * static_cast<T>(plane[t.pos1]) + t.w2 * static_cast<T>(plane[t.pos2]) +
         t.w3 * static_cast<T>(plane[t.pos3]) + t.w4 * static_cast<T>(plane[t.pos4]);
}

// One pooled value: the bin's taps (grid_h * grid_w of them, from roi_taps)
// over one channel plane, summed in torchvision's order. In is the features'
// storage type, converted to T on load.
template <typename T, typename In>
SYNCFREE_HD T pool_bin(const BilinearTap<T>* taps, int samples, const In* plane, T count) {
  T value = 0.;
  for (int s = 0; s < samples; ++s) value += tap_value<T, In>(taps[s], plane);
  value /= count;
  return value;
}

// The backward's four additions of one sample's tap (torchvision's
// `grad * w / count` per corner; the count here is grid_h * grid_w).
template <typename T, typename Add>
SYNCFREE_HD void scatter_tap(const BilinearTap<T>& t, T grad, T count, const Add& add) {
  if (!t.inside) return;
  add(t.pos1, grad * t.w1 / count);
  add(t.pos2, grad * t.w2 / count);
  add(t.pos3, grad * t.w3 / count);
  add(t.pos4, grad * t.w4 / count);
}

}  // namespace core
}  // namespace syncfree
