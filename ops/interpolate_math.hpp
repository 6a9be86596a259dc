// The index and weight math of interpolate (ops/interpolate.cpp), compiled by both backends
// (host C++ and CUDA device code) so that CPU and GPU read the same source elements with the
// same weights. T is the kernels' compute type (float for f32/f16/bf16, double for f64), as
// PyTorch's opmath/accscalar type, so the rounding of the source positions matches PyTorch's.
// Formulas: PyTorch's aten/src/ATen/native/UpSample.h (area_pixel_compute_scale,
// area_pixel_compute_source_index, nearest_idx), re-derived here:
//   scale    = align_corners ? (in - 1) / (out - 1) (0 when out == 1)
//                            : 1 / scale_factor when one is given, else in / out
//   nearest: src = min(floor(dst * scale), in - 1)
//   linear:  src = align_corners ? dst * scale : max(scale * (dst + 0.5) - 0.5, 0);
//            i0 = floor(src), i1 = min(i0 + 1, in - 1), weight of i1 = src - i0.
// Plain header, no module.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/contract.hpp"

namespace brrr::interpolate_math {

/// Two source positions along one dim and the weight of the second (the first weighs 1 - w1).
template <class T> struct Taps {
  std::int64_t i0 = 0, i1 = 0;
  T w1 = 0;
};

/// One spatial dim of a resampling: in -> out elements and its precomputed scales.
template <class T> struct Axis {
  backend::UpsampleMode mode = backend::UpsampleMode::nearest;
  bool align_corners = false;
  std::int64_t in = 1, out = 1;
  T scale = 1;         ///< linear
  float nearest = 1;   ///< nearest: PyTorch computes it in float whatever the dtype

  BRRR_HD Axis(backend::UpsampleMode m, bool align, std::int64_t in_, std::int64_t out_, double scale_factor)
      : mode(m), align_corners(align), in(in_), out(out_) {
    if (align) scale = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
    else scale = scale_factor > 0 ? static_cast<T>(1.0 / scale_factor) : static_cast<T>(in) / static_cast<T>(out);
    nearest = scale_factor > 0 ? static_cast<float>(1.0 / scale_factor)
                               : static_cast<float>(in) / static_cast<float>(out);
  }

  /// The taps of output position dst.
  BRRR_HD Taps<T> taps(std::int64_t dst) const {
    Taps<T> t;
    if (mode == backend::UpsampleMode::nearest) {
      // PyTorch's CPU nearest_idx: same size and exact doubling are special-cased.
      std::int64_t i = out == in ? dst
                       : out == 2 * in ? dst >> 1
                                       : static_cast<std::int64_t>(floorf(static_cast<float>(dst) * nearest));
      t.i0 = t.i1 = i < in - 1 ? i : in - 1;
      return t;
    }
    T src = align_corners ? scale * static_cast<T>(dst) : scale * (static_cast<T>(dst) + T(0.5)) - T(0.5);
    if (src < T(0)) src = T(0);
    t.i0 = static_cast<std::int64_t>(src);
    if (t.i0 > in - 1) t.i0 = in - 1;
    t.i1 = t.i0 < in - 1 ? t.i0 + 1 : t.i0;
    const T w = src - static_cast<T>(t.i0);
    t.w1 = w < T(0) ? T(0) : (w > T(1) ? T(1) : w);
    return t;
  }
};

}  // namespace brrr::interpolate_math
