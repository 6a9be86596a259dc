// CPU im2col / col2im: the window sweep behind conv2d (unfold + GEMM) and the pools.
module;
#include <cstdint>
#include "backend/contract.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

// out[n, (c*kh + i)*kw + j, oy*out_w + ox] = in[n, c, oy*sh - ph + i*dh, ox*sw - pw + j*dw]
// (pad_value outside the input). `in` may be strided; `out` is contiguous.
void CpuBackend::im2col(const Operand& out, const Operand& in, const Window2d& g, double pad_value) {
  dispatch(in.dtype, [&]<class T>(T*) {
    using S = T;
    const S* x = static_cast<const S*>(in.data);
    S* o = static_cast<S*>(out.data);
    const S pad = narrow_to<T>(pad_value);
    const std::int64_t L = g.out_h * g.out_w;
    const std::int64_t* st = in.strides;
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t c = 0; c < g.c; ++c)
        for (std::int64_t i = 0; i < g.kh; ++i)
          for (std::int64_t j = 0; j < g.kw; ++j) {
            S* row = o + ((n * g.c + c) * g.kh * g.kw + i * g.kw + j) * L;
            for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
              std::int64_t y = oy * g.sh - g.ph + i * g.dh;
              for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
                std::int64_t xx = ox * g.sw - g.pw + j * g.dw;
                bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
                row[oy * g.out_w + ox] = inside ? x[n * st[0] + c * st[1] + y * st[2] + xx * st[3]] : pad;
              }
            }
          }
  });
}

// The adjoint: every column entry is added back to the input cell it was read from.
void CpuBackend::col2im(const Operand& out, const Operand& in, const Window2d& g) {
  dispatch(out.dtype, [&]<class T>(T*) {
    using S = T;
    const S* col = static_cast<const S*>(in.data);
    S* o = static_cast<S*>(out.data);  // contiguous [N, C, H, W], zeroed by the caller
    const std::int64_t* cs = in.strides;  // [N, C*kh*kw, L]
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t c = 0; c < g.c; ++c)
        for (std::int64_t i = 0; i < g.kh; ++i)
          for (std::int64_t j = 0; j < g.kw; ++j) {
            std::int64_t r = (c * g.kh + i) * g.kw + j;
            for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
              std::int64_t y = oy * g.sh - g.ph + i * g.dh;
              if (y < 0 || y >= g.h) continue;
              for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
                std::int64_t xx = ox * g.sw - g.pw + j * g.dw;
                if (xx < 0 || xx >= g.w) continue;
                S& cell = o[((n * g.c + c) * g.h + y) * g.w + xx];
                cell = narrow_to<T>(load<T>(cell) + load<T>(col[n * cs[0] + r * cs[1] + (oy * g.out_w + ox) * cs[2]]));
              }
            }
          }
  });
}

}  // namespace brrr::backend
