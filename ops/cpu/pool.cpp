// CPU max pooling (max_pool2d, adaptive_max_pool2d and the 1-D pools, which are H = 1 views):
// the max of each window with its argmax, and the backward scatter through that argmax.
// Planes (n, c) are independent, so both kernels split them over the intra-op pool.
module;
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>
#include "backend/contract.hpp"
#include "ops/cpu/isa/kernels.hpp"  // max_pool2x2_f32
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

// Planes per parallel chunk: about 32K input cells of work each.
std::int64_t plane_grain(const Window2d& g) { return std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(1, g.h * g.w)); }

// The input rows [lo, hi) step `step` that output row `o` reads (columns alike).
struct Span {
  std::int64_t lo, hi, step;
};
Span window_span(std::int64_t o, std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
  std::int64_t lo = o * s - p, hi = std::min(lo + (k - 1) * d + 1, in);
  while (lo < 0) lo += d;  // padding cells never win: skip them
  return {lo, hi, d};
}
// PyTorch's adaptive bins: [floor(o in / out), ceil((o + 1) in / out)).
Span bin_span(std::int64_t o, std::int64_t in, std::int64_t out) { return {o * in / out, ((o + 1) * in + out - 1) / out, 1}; }

}  // namespace

void CpuBackend::max_pool2d(const Operand& out, const Operand& indices, const Operand& in, const Window2d& g,
                            bool adaptive) {
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using A = accumulate_t<T>;
      const T* x = static_cast<const T*>(in.data);
      T* o = static_cast<T*>(out.data);
      std::int64_t* idx = static_cast<std::int64_t*>(indices.data);
      // Locals, not g's fields or in.strides: the i64 index stores could alias those.
      const std::int64_t C = g.c, H = g.h, W = g.w, OH = g.out_h, OW = g.out_w, L = OH * OW;
      const std::int64_t s0 = in.strides[0], s1 = in.strides[1], s2 = in.strides[2], s3 = in.strides[3];
      const Window2d geo = g;
      // The 2x2 / stride-2 window over contiguous rows (every window whole): the vectorised
      // row kernel of ops/cpu/isa, the same results as the loop below.
      if constexpr (std::is_same_v<T, float>) {
        if (!adaptive && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 &&
            g.dw == 1 && s3 == 1 && 2 * OH <= H && 2 * OW <= W) {
          const auto row_kernel = isa().max_pool2x2_f32;
          parallel_for(g.n * C, plane_grain(g), [=](std::int64_t p0, std::int64_t p1) {
            for (std::int64_t p = p0; p < p1; ++p) {
              const T* plane = x + (p / C) * s0 + (p % C) * s1;
              for (std::int64_t oy = 0; oy < OH; ++oy)
                row_kernel(plane + 2 * oy * s2, plane + (2 * oy + 1) * s2, o + p * L + oy * OW, idx + p * L + oy * OW, OW,
                           2 * oy * W, W);
            }
          });
          return;
        }
      }
      parallel_for(g.n * C, plane_grain(g), [=](std::int64_t p0, std::int64_t p1) {
        std::vector<Span> cols(static_cast<std::size_t>(OW));
        for (std::int64_t ox = 0; ox < OW; ++ox)
          cols[static_cast<std::size_t>(ox)] = adaptive ? bin_span(ox, W, OW) : window_span(ox, W, geo.kw, geo.sw, geo.pw, geo.dw);
        for (std::int64_t p = p0; p < p1; ++p) {
          const T* plane = x + (p / C) * s0 + (p % C) * s1;
          T* op = o + p * L;
          std::int64_t* ip = idx + p * L;
          for (std::int64_t oy = 0; oy < OH; ++oy) {
            const Span ys = adaptive ? bin_span(oy, H, OH) : window_span(oy, H, geo.kh, geo.sh, geo.ph, geo.dh);
            for (std::int64_t ox = 0; ox < OW; ++ox) {
              const Span xs = cols[static_cast<std::size_t>(ox)];
              // PyTorch's loop: start from -inf at the first real cell, take v when v > max or
              // v is NaN (so the last NaN wins). Written so that clang emits maxss and cmov (the
              // outcome is data, a branch mispredicts): `best` is the max of the numbers, `nan`
              // whether a NaN was seen, after which only NaNs move the index.
              A best = -std::numeric_limits<A>::infinity();
              bool nan = false;
              std::int64_t at = ys.lo < ys.hi && xs.lo < xs.hi ? ys.lo * W + xs.lo : -1;
              for (std::int64_t y = ys.lo; y < ys.hi; y += ys.step)
                for (std::int64_t xx = xs.lo; xx < xs.hi; xx += xs.step) {
                  const A v = load_acc(plane[y * s2 + xx * s3]);
                  const bool is_nan = v != v, greater = v > best;
                  at = ((greater & !nan) | is_nan) ? y * W + xx : at;
                  best = greater ? v : best;
                  nan |= is_nan;
                }
              op[oy * OW + ox] = nan ? plane[(at / W) * s2 + (at % W) * s3] : narrow_to<T>(best);
              ip[oy * OW + ox] = at;
            }
          }
        }
      });
    }
  });
}

// Sums in accumulate_t (float for the 16-bit types: one rounding per cell), adding each cell's
// contributions in output order, as the CUDA kernel's gather does: both give the same bits.
void CpuBackend::max_pool2d_backward(const Operand& grad_in, const Operand& grad_out, const Operand& indices,
                                     const Window2d& g, bool /*adaptive*/) {
  dispatch(grad_in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using A = accumulate_t<T>;
      T* gi = static_cast<T*>(grad_in.data);
      const T* go = static_cast<const T*>(grad_out.data);
      const std::int64_t* idx = static_cast<const std::int64_t*>(indices.data);
      const std::int64_t C = g.c, OH = g.out_h, OW = g.out_w, L = OH * OW, HW = g.h * g.w;
      const std::int64_t s0 = grad_out.strides[0], s1 = grad_out.strides[1], s2 = grad_out.strides[2],
                         s3 = grad_out.strides[3];
      parallel_for(g.n * C, plane_grain(g), [=](std::int64_t p0, std::int64_t p1) {
        std::vector<A> sums(std::is_same_v<A, T> ? 0 : static_cast<std::size_t>(HW));
        for (std::int64_t p = p0; p < p1; ++p) {
          A* acc = std::is_same_v<A, T> ? reinterpret_cast<A*>(gi + p * HW) : sums.data();
          std::fill(acc, acc + HW, A(0));
          const T* gp = go + (p / C) * s0 + (p % C) * s1;
          const std::int64_t* ip = idx + p * L;
          for (std::int64_t oy = 0; oy < OH; ++oy)
            for (std::int64_t ox = 0; ox < OW; ++ox) {
              const std::int64_t at = ip[oy * OW + ox];
              if (at >= 0) acc[at] += load_acc(gp[oy * s2 + ox * s3]);  // -1: a window with no input cell
            }
          if constexpr (!std::is_same_v<A, T>)
            for (std::int64_t i = 0; i < HW; ++i) gi[p * HW + i] = narrow_to<T>(acc[i]);
        }
      });
    }
  });
}

}  // namespace brrr::backend
