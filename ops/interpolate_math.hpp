// The index and weight math of interpolate (ops/interpolate.cpp), compiled by both backends
// (host C++ and CUDA device code) so that CPU and GPU read the same source elements with the
// same weights. T is the kernels' compute type (float for f32/f16/bf16, double for f64), as
// PyTorch's opmath/accscalar type, so the rounding of the source positions matches PyTorch's.
// Formulas: PyTorch's aten/src/ATen/native/UpSample.h (area_pixel_compute_scale,
// area_pixel_compute_source_index, nearest_idx, nearest_exact_idx, guard_index_and_lambda,
// get_cubic_upsample_coefficients), re-derived here:
//   scale    = align_corners ? (in - 1) / (out - 1) (0 when out == 1)
//                            : 1 / scale_factor when one is given, else in / out
//   nearest:       src = min(floor(dst * scale), in - 1), scale and product in f32
//   nearest-exact: src = min(floor((dst + 0.5) * scale), in - 1), scale in f32, the product
//                  in f64 rounded to f32 before the floor (PyTorch's floorf of a double)
//   linear:  src = align_corners ? dst * scale : max(scale * (dst + 0.5) - 0.5, 0);
//            i0 = floor(src), i1 = min(i0 + 1, in - 1), weight of i1 = src - i0; out == in
//            is the identity whatever the scale (PyTorch's compute_source_index_and_lambda)
//   cubic:   src = align_corners ? dst * scale : scale * (dst + 0.5) - 0.5 (not clamped at 0);
//            i = min(floor(src), in - 1), t = clamp(src - i, 0, 1); taps i - 1 .. i + 2, each
//            clamped to [0, in - 1], weighted by Keys' cubic convolution kernel with A = -0.75
//            (R. Keys, "Cubic convolution interpolation for digital image processing", IEEE
//            Trans. ASSP 29(6), 1981; A = -0.75 as PyTorch and OpenCV):
//              |x| <= 1:     ((A + 2) |x| - (A + 3)) x^2 + 1
//              1 < |x| < 2:  ((A |x| - 5A) |x| + 8A) |x| - 4A
//            at the distances t + 1, t, 1 - t, 2 - t of the four taps.
// An axis with in == out == 1 (the missing D of 4-D inputs, D and H of 3-D ones) is one tap of
// weight 1 in every mode, so that the fake dims cost nothing and pass infinities through.
// Plain header, no module.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/contract.hpp"

namespace brrr::interpolate_math {

/// Up to four source positions along one dim and their weights: nearest modes use 1
/// (weight 1), linear 2, cubic 4. Kernels sum weight[k] * x[index[k]] for k < n, the first
/// term first, so the linear path rounds as (1 - w) x0 + w x1.
inline constexpr int max_taps = 4;
template <class T> struct Taps {
  int n = 1;
  std::int64_t index[max_taps] = {};
  T weight[max_taps] = {T(1), T(0), T(0), T(0)};
};

/// Keys' kernel on |x| <= 1 and 1 < |x| < 2 (PyTorch's cubic_convolution1 / 2).
template <class T> BRRR_HD T cubic_near(T x) {
  constexpr T a = T(-0.75);
  return ((a + T(2)) * x - (a + T(3))) * x * x + T(1);
}
template <class T> BRRR_HD T cubic_far(T x) {
  constexpr T a = T(-0.75);
  return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a;
}

/// One spatial dim of a resampling: in -> out elements and its precomputed scales.
template <class T> struct Axis {
  backend::UpsampleMode mode = backend::UpsampleMode::nearest;
  bool align_corners = false;
  std::int64_t in = 1, out = 1;
  T scale = 1;         ///< linear and cubic
  float nearest = 1;   ///< nearest modes: PyTorch computes it in float whatever the dtype

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
    if (in == 1 && out == 1) return t;  // index 0, weight 1
    switch (mode) {
      case backend::UpsampleMode::nearest: {
        // PyTorch's CPU nearest_idx: same size and exact doubling are special-cased.
        const std::int64_t i = out == in ? dst
                               : out == 2 * in ? dst >> 1
                                               : static_cast<std::int64_t>(floorf(static_cast<float>(dst) * nearest));
        t.index[0] = i < in - 1 ? i : in - 1;
        return t;
      }
      case backend::UpsampleMode::nearest_exact: {
        const double p = (static_cast<double>(dst) + 0.5) * static_cast<double>(nearest);
        const std::int64_t i = static_cast<std::int64_t>(floorf(static_cast<float>(p)));
        t.index[0] = i < in - 1 ? i : in - 1;
        return t;
      }
      case backend::UpsampleMode::linear: {
        if (out == in) {  // PyTorch: the identity, even when a scale_factor says otherwise
          t.index[0] = dst;
          return t;
        }
        t.n = 2;
        T src = align_corners ? scale * static_cast<T>(dst) : scale * (static_cast<T>(dst) + T(0.5)) - T(0.5);
        if (src < T(0)) src = T(0);
        std::int64_t i0 = static_cast<std::int64_t>(src);
        if (i0 > in - 1) i0 = in - 1;
        t.index[0] = i0;
        t.index[1] = i0 < in - 1 ? i0 + 1 : i0;
        const T w = src - static_cast<T>(i0);
        const T w1 = w < T(0) ? T(0) : (w > T(1) ? T(1) : w);
        t.weight[0] = T(1) - w1;
        t.weight[1] = w1;
        return t;
      }
      case backend::UpsampleMode::cubic: {
        t.n = 4;
        const T src = align_corners ? scale * static_cast<T>(dst) : scale * (static_cast<T>(dst) + T(0.5)) - T(0.5);
        std::int64_t i = static_cast<std::int64_t>(src);  // floor: src may be negative
        if (static_cast<T>(i) > src) --i;
        if (i > in - 1) i = in - 1;
        T f = src - static_cast<T>(i);
        f = f < T(0) ? T(0) : (f > T(1) ? T(1) : f);
        t.weight[0] = cubic_far(f + T(1));
        t.weight[1] = cubic_near(f);
        const T g = T(1) - f;
        t.weight[2] = cubic_near(g);
        t.weight[3] = cubic_far(g + T(1));
        for (int k = 0; k < 4; ++k) {
          const std::int64_t j = i - 1 + k;
          t.index[k] = j < 0 ? 0 : (j > in - 1 ? in - 1 : j);
        }
        return t;
      }
    }
    return t;
  }
};

/// The resampled value of one output position from the volume xp [*, ih, iw] (contiguous)
/// and the taps of its three dims: sum_a wd[a] sum_b wh[b] sum_c ww[c] x[d_a, h_b, w_c] in the
/// compute type C, the innermost sum first and each sum started from its first term, the
/// order both backends share (so linear rounds as (1 - w) x0 + w x1).
template <class C, class T>
BRRR_HD C resample_at(const T* xp, std::int64_t ih, std::int64_t iw, const Taps<C>& td, const Taps<C>& th,
                      const Taps<C>& tw) {
  C vd = 0;
  for (int a = 0; a < td.n; ++a) {
    C vh = 0;
    for (int b = 0; b < th.n; ++b) {
      const T* r = xp + (td.index[a] * ih + th.index[b]) * iw;
      C vw = tw.weight[0] * backend::load(r[tw.index[0]]);
      for (int c = 1; c < tw.n; ++c) vw += tw.weight[c] * backend::load(r[tw.index[c]]);
      vh = b == 0 ? th.weight[0] * vw : vh + th.weight[b] * vw;
    }
    vd = a == 0 ? td.weight[0] * vh : vd + td.weight[a] * vh;
  }
  return vd;
}

}  // namespace brrr::interpolate_math
