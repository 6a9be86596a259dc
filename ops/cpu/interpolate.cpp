// CPU kernels of interpolate (ops/interpolate.cpp): nearest, nearest-exact, (bi/tri)linear and
// cubic resampling of contiguous [N, C, D, H, W] volumes and the adjoint, with the taps of
// ops/interpolate_math.hpp (computed once per output index of each dim). One loop serves every
// mode: out = sum_a wd[a] sum_b wh[b] sum_c ww[c] x[d_a, h_b, w_c], the innermost sum first,
// each sum started from its first term (1 tap for nearest, 2 for linear, 4 for cubic); the
// nearest modes copy. Parallel over the N*C volumes, which the adjoint writes disjointly, so
// both are deterministic.
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
  if (big.ndim != 5 || small.ndim != 5 || big.dtype != small.dtype || !is_floating_point(big.dtype) ||
      big.sizes[0] != small.sizes[0] || big.sizes[1] != small.sizes[1])
    throw Error(ErrorKind::value, std::string("CpuBackend::") + what + ": invalid operands (" +
                                      std::to_string(big.ndim) + "-d " + to_string(big.dtype) + ", " +
                                      std::to_string(small.ndim) + "-d " + to_string(small.dtype) + ")");
}

bool is_nearest(UpsampleMode m) { return m == UpsampleMode::nearest || m == UpsampleMode::nearest_exact; }

// Sizes of one [N, C, D, H, W] resampling (in, out) and the taps of every output index.
template <class C> struct VolumeTaps {
  std::int64_t planes, id, ih, iw, od, oh, ow;
  std::vector<interpolate_math::Taps<C>> d, h, w;
  VolumeTaps(const Upsample& g, const Operand& in, const Operand& out)
      : planes(in.sizes[0] * in.sizes[1]), id(in.sizes[2]), ih(in.sizes[3]), iw(in.sizes[4]), od(out.sizes[2]),
        oh(out.sizes[3]), ow(out.sizes[4]) {
    const interpolate_math::Axis<C> ad(g.mode, g.align_corners, id, od, g.scale_factor_d),
        ah(g.mode, g.align_corners, ih, oh, g.scale_factor_h), aw(g.mode, g.align_corners, iw, ow, g.scale_factor_w);
    for (std::int64_t z = 0; z < od; ++z) d.push_back(ad.taps(z));
    for (std::int64_t y = 0; y < oh; ++y) h.push_back(ah.taps(y));
    for (std::int64_t x = 0; x < ow; ++x) w.push_back(aw.taps(x));
  }
  std::int64_t in_volume() const { return id * ih * iw; }
  std::int64_t out_volume() const { return od * oh * ow; }
};

}  // namespace

void CpuBackend::upsample(const Operand& out, const Operand& in, const Upsample& g) {
  check_operands("upsample", out, in);
  if (out.numel == 0) return;
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using C = compute_t<T>;
      const VolumeTaps<C> t(g, in, out);
      const bool nearest = is_nearest(g.mode);
      const auto* x = static_cast<const T*>(in.data);
      auto* o = static_cast<T*>(out.data);
      parallel_for(t.planes, 1, [&](std::int64_t p0, std::int64_t p1) {
        for (std::int64_t p = p0; p < p1; ++p) {
          const T* xp = x + p * t.in_volume();
          T* op = o + p * t.out_volume();
          for (std::int64_t z = 0; z < t.od; ++z) {
            const auto& td = t.d[static_cast<std::size_t>(z)];
            for (std::int64_t y = 0; y < t.oh; ++y) {
              const auto& th = t.h[static_cast<std::size_t>(y)];
              T* orow = op + (z * t.oh + y) * t.ow;
              if (nearest) {
                const T* r = xp + (td.index[0] * t.ih + th.index[0]) * t.iw;
                for (std::int64_t xo = 0; xo < t.ow; ++xo) orow[xo] = r[t.w[static_cast<std::size_t>(xo)].index[0]];
                continue;
              }
              for (std::int64_t xo = 0; xo < t.ow; ++xo)
                orow[xo] = narrow_to<T>(
                    interpolate_math::resample_at(xp, t.ih, t.iw, td, th, t.w[static_cast<std::size_t>(xo)]));
            }
          }
        }
      });
    }
  });
}

void CpuBackend::upsample_backward(const Operand& grad_in, const Operand& grad_out, const Upsample& g) {
  check_operands("upsample_backward", grad_out, grad_in);
  if (grad_out.numel == 0 || grad_in.numel == 0) return;
  dispatch(grad_in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using C = compute_t<T>;
      const VolumeTaps<C> t(g, grad_in, grad_out);
      const bool nearest = is_nearest(g.mode);
      const auto* go = static_cast<const T*>(grad_out.data);
      auto* gi = static_cast<T*>(grad_in.data);
      parallel_for(t.planes, 1, [&](std::int64_t p0, std::int64_t p1) {
        // One volume of sums in the compute type, rounded once at the end.
        std::vector<C> acc(static_cast<std::size_t>(t.in_volume()));
        for (std::int64_t p = p0; p < p1; ++p) {
          std::fill(acc.begin(), acc.end(), C(0));
          const T* gp = go + p * t.out_volume();
          for (std::int64_t z = 0; z < t.od; ++z) {
            const auto& td = t.d[static_cast<std::size_t>(z)];
            for (std::int64_t y = 0; y < t.oh; ++y) {
              const auto& th = t.h[static_cast<std::size_t>(y)];
              const T* grow = gp + (z * t.oh + y) * t.ow;
              if (nearest) {
                C* r = acc.data() + (td.index[0] * t.ih + th.index[0]) * t.iw;
                for (std::int64_t xo = 0; xo < t.ow; ++xo) r[t.w[static_cast<std::size_t>(xo)].index[0]] += load(grow[xo]);
                continue;
              }
              for (std::int64_t xo = 0; xo < t.ow; ++xo) {
                const auto& tw = t.w[static_cast<std::size_t>(xo)];
                const C v = load(grow[xo]);
                for (int a = 0; a < td.n; ++a) {
                  const C vd = td.weight[a] * v;
                  for (int b = 0; b < th.n; ++b) {
                    const C vh = th.weight[b] * vd;
                    C* r = acc.data() + (td.index[a] * t.ih + th.index[b]) * t.iw;
                    for (int c = 0; c < tw.n; ++c) r[tw.index[c]] += tw.weight[c] * vh;
                  }
                }
              }
            }
          }
          T* ip = gi + p * t.in_volume();
          for (std::int64_t k = 0; k < t.in_volume(); ++k)
            ip[k] = narrow_to<T>(load(ip[k]) + acc[static_cast<std::size_t>(k)]);
        }
      });
    }
  });
}

}  // namespace brrr::backend
