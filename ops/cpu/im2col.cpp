// CPU im2col / col2im: the window sweep behind conv2d (ops/conv_gemm.cpp), unfold/fold and
// the pools. Both split the (sample, channel) planes over the intra-op pool: every plane's
// rows (im2col) or cells (col2im) are written by one thread only, so the result does not
// depend on the thread count. Along a row the in-bounds window starts are found once, so
// the inner loop is a plain strided copy (a contiguous one at stride 1) with no bounds test.
module;
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>
#include "backend/contract.hpp"
#include "ops/cpu/loops.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

// Output columns [lo, hi) whose input column ox * s - p + j * d lies in [0, w).
struct Span {
  std::int64_t lo, hi;
};
Span inside(std::int64_t out, std::int64_t s, std::int64_t p, std::int64_t offset, std::int64_t w) {
  const std::int64_t a = p - offset;  // ox * s >= a and ox * s <= w - 1 + a
  const std::int64_t lo = a <= 0 ? 0 : (a + s - 1) / s;
  const std::int64_t hi = w - 1 + a < 0 ? 0 : (w - 1 + a) / s + 1;
  return {std::min(lo, out), std::clamp(hi, std::min(lo, out), out)};
}

// Planes per task: at least ~32K elements of work each.
std::int64_t plane_grain(const Window2d& g) {
  return std::max<std::int64_t>(1, elementwise_grain / std::max<std::int64_t>(1, g.kh * g.kw * g.out_h * g.out_w));
}

}  // namespace

// out[n, (c*kh + i)*kw + j, oy*out_w + ox] = in[n, c, oy*sh - ph + i*dh, ox*sw - pw + j*dw]
// (pad_value outside the input). `in` may be strided; `out` is contiguous.
void CpuBackend::im2col(const Operand& out, const Operand& in, const Window2d& g, double pad_value) {
  dispatch(in.dtype, [&]<class T>(T*) {
    const T* x = static_cast<const T*>(in.data);
    T* o = static_cast<T*>(out.data);
    const T pad = narrow_to<T>(pad_value);
    const std::int64_t L = g.out_h * g.out_w;
    const std::int64_t* st = in.strides;
    cpu::parallel_for(g.n * g.c, plane_grain(g), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n = p / g.c, c = p % g.c;
        const T* plane = x + n * st[0] + c * st[1];
        for (std::int64_t i = 0; i < g.kh; ++i)
          for (std::int64_t j = 0; j < g.kw; ++j) {
            T* row = o + (p * g.kh * g.kw + i * g.kw + j) * L;
            const Span s = inside(g.out_w, g.sw, g.pw, j * g.dw, g.w);
            const std::int64_t x0 = j * g.dw - g.pw;  // input column of ox = 0
            for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
              T* r = row + oy * g.out_w;
              const std::int64_t y = oy * g.sh - g.ph + i * g.dh;
              if (y < 0 || y >= g.h) {
                std::fill(r, r + g.out_w, pad);
                continue;
              }
              const T* line = plane + y * st[2];
              std::fill(r, r + s.lo, pad);
              if (g.sw == 1 && st[3] == 1) {
                if (s.hi > s.lo) std::copy(line + (x0 + s.lo), line + (x0 + s.hi), r + s.lo);  // a memmove
              } else {
                for (std::int64_t ox = s.lo; ox < s.hi; ++ox) r[ox] = line[(ox * g.sw + x0) * st[3]];
              }
              std::fill(r + s.hi, r + g.out_w, pad);
            }
          }
      }
    });
  });
}

// The adjoint: every column entry is added back to the input cell it was read from. f32 and
// f64 sum in place; the other dtypes in a double plane, rounded once.
void CpuBackend::col2im(const Operand& out, const Operand& in, const Window2d& g) {
  dispatch(out.dtype, [&]<class T>(T*) {
    constexpr bool in_place = std::is_same_v<T, float> || std::is_same_v<T, double>;
    using Acc = std::conditional_t<in_place, T, double>;
    const T* col = static_cast<const T*>(in.data);
    T* o = static_cast<T*>(out.data);  // contiguous [N, C, H, W], every cell written here
    const std::int64_t* cs = in.strides;  // [N, C*kh*kw, L]
    const std::int64_t hw = g.h * g.w;
    cpu::parallel_for(g.n * g.c, plane_grain(g), [&](std::int64_t p0, std::int64_t p1) {
      std::vector<Acc> scratch(in_place ? 0 : static_cast<std::size_t>(hw));
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n = p / g.c, c = p % g.c;
        Acc* cell = nullptr;
        if constexpr (in_place) {
          cell = o + p * hw;
        } else {
          cell = scratch.data();
        }
        std::fill(cell, cell + hw, Acc(0));
        for (std::int64_t i = 0; i < g.kh; ++i)
          for (std::int64_t j = 0; j < g.kw; ++j) {
            const T* src = col + n * cs[0] + ((c * g.kh + i) * g.kw + j) * cs[1];
            const Span s = inside(g.out_w, g.sw, g.pw, j * g.dw, g.w);
            const std::int64_t x0 = j * g.dw - g.pw;
            for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
              const std::int64_t y = oy * g.sh - g.ph + i * g.dh;
              if (y < 0 || y >= g.h) continue;
              const T* r = src + oy * g.out_w * cs[2];
              Acc* line = cell + y * g.w;
              if (g.sw == 1 && cs[2] == 1) {  // distinct buffers: let the loop vectorise
                if (s.hi <= s.lo) continue;
                Acc* __restrict dst = line + (x0 + s.lo);
                const T* __restrict src = r + s.lo;
                for (std::int64_t k = 0; k < s.hi - s.lo; ++k) dst[k] += load<T>(src[k]);
              } else {
                for (std::int64_t ox = s.lo; ox < s.hi; ++ox) line[ox * g.sw + x0] += load<T>(r[ox * cs[2]]);
              }
            }
          }
        if constexpr (!in_place)
          for (std::int64_t k = 0; k < hw; ++k) o[p * hw + k] = narrow_to<T>(scratch[k]);
      }
    });
  });
}

}  // namespace brrr::backend
