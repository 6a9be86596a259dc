// CPU kernels of interpolate (ops/interpolate.cpp): nearest and (bi)linear resampling of
// contiguous [N, C, H, W] planes and the adjoint, with the taps of ops/interpolate_math.hpp
// (computed once per output row and column). Parallel over the N*C planes, which the adjoint
// writes disjointly, so both are deterministic.
module;
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>
#include "backend/contract.hpp"
#include "ops/interpolate_math.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

void check_operands(const char* what, const Operand& big, const Operand& small) {
  if (big.ndim != 4 || small.ndim != 4 || big.dtype != small.dtype || !is_floating_point(big.dtype) ||
      big.sizes[0] != small.sizes[0] || big.sizes[1] != small.sizes[1])
    throw Error(ErrorKind::value, std::string("CpuBackend::") + what + ": invalid operands (" +
                                      std::to_string(big.ndim) + "-d " + to_string(big.dtype) + ", " +
                                      std::to_string(small.ndim) + "-d " + to_string(small.dtype) + ")");
}

template <class C> struct PlaneTaps {
  std::vector<interpolate_math::Taps<C>> h, w;
  PlaneTaps(const Upsample2d& g, std::int64_t ih, std::int64_t iw, std::int64_t oh, std::int64_t ow) {
    const interpolate_math::Axis<C> ah(g.mode, g.align_corners, ih, oh, g.scale_factor_h),
        aw(g.mode, g.align_corners, iw, ow, g.scale_factor_w);
    for (std::int64_t y = 0; y < oh; ++y) h.push_back(ah.taps(y));
    for (std::int64_t x = 0; x < ow; ++x) w.push_back(aw.taps(x));
  }
};

}  // namespace

void CpuBackend::upsample(const Operand& out, const Operand& in, const Upsample2d& g) {
  check_operands("upsample", out, in);
  if (out.numel == 0) return;
  const std::int64_t planes = in.sizes[0] * in.sizes[1], ih = in.sizes[2], iw = in.sizes[3];
  const std::int64_t oh = out.sizes[2], ow = out.sizes[3];
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using C = compute_t<T>;
      const PlaneTaps<C> t(g, ih, iw, oh, ow);
      const auto* x = static_cast<const T*>(in.data);
      auto* o = static_cast<T*>(out.data);
      parallel_for(planes, 1, [&](std::int64_t p0, std::int64_t p1) {
        for (std::int64_t p = p0; p < p1; ++p) {
          const T* xp = x + p * ih * iw;
          T* op = o + p * oh * ow;
          for (std::int64_t y = 0; y < oh; ++y) {
            const auto& th = t.h[static_cast<std::size_t>(y)];
            const T* r0 = xp + th.i0 * iw;
            const T* r1 = xp + th.i1 * iw;
            for (std::int64_t xo = 0; xo < ow; ++xo) {
              const auto& tw = t.w[static_cast<std::size_t>(xo)];
              if (g.mode == UpsampleMode::nearest) {
                op[y * ow + xo] = r0[tw.i0];
                continue;
              }
              const C top = (C(1) - tw.w1) * load(r0[tw.i0]) + tw.w1 * load(r0[tw.i1]);
              const C bottom = (C(1) - tw.w1) * load(r1[tw.i0]) + tw.w1 * load(r1[tw.i1]);
              op[y * ow + xo] = narrow_to<T>((C(1) - th.w1) * top + th.w1 * bottom);
            }
          }
        }
      });
    }
  });
}

void CpuBackend::upsample_backward(const Operand& grad_in, const Operand& grad_out, const Upsample2d& g) {
  check_operands("upsample_backward", grad_out, grad_in);
  if (grad_out.numel == 0 || grad_in.numel == 0) return;
  const std::int64_t planes = grad_in.sizes[0] * grad_in.sizes[1], ih = grad_in.sizes[2], iw = grad_in.sizes[3];
  const std::int64_t oh = grad_out.sizes[2], ow = grad_out.sizes[3];
  dispatch(grad_in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using C = compute_t<T>;
      const PlaneTaps<C> t(g, ih, iw, oh, ow);
      const auto* go = static_cast<const T*>(grad_out.data);
      auto* gi = static_cast<T*>(grad_in.data);
      parallel_for(planes, 1, [&](std::int64_t p0, std::int64_t p1) {
        // One plane of sums in the compute type, rounded once at the end.
        std::vector<C> acc(static_cast<std::size_t>(ih * iw));
        for (std::int64_t p = p0; p < p1; ++p) {
          std::fill(acc.begin(), acc.end(), C(0));
          const T* gp = go + p * oh * ow;
          for (std::int64_t y = 0; y < oh; ++y) {
            const auto& th = t.h[static_cast<std::size_t>(y)];
            C* r0 = acc.data() + th.i0 * iw;
            C* r1 = acc.data() + th.i1 * iw;
            for (std::int64_t xo = 0; xo < ow; ++xo) {
              const auto& tw = t.w[static_cast<std::size_t>(xo)];
              const C v = load(gp[y * ow + xo]);
              if (g.mode == UpsampleMode::nearest) {
                r0[tw.i0] += v;
                continue;
              }
              const C top = (C(1) - th.w1) * v, bottom = th.w1 * v;
              r0[tw.i0] += (C(1) - tw.w1) * top;
              r0[tw.i1] += tw.w1 * top;
              r1[tw.i0] += (C(1) - tw.w1) * bottom;
              r1[tw.i1] += tw.w1 * bottom;
            }
          }
          T* ip = gi + p * ih * iw;
          for (std::int64_t k = 0; k < ih * iw; ++k) ip[k] = narrow_to<T>(load(ip[k]) + acc[static_cast<std::size_t>(k)]);
        }
      });
    }
  });
}

}  // namespace brrr::backend
