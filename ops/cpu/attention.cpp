// CPU kernels of the fused attention contract (attention_forward / attention_backward): the
// same computation as the CUDA flash kernels (ops/cuda/attention.cu) without the tiling, in
// double, so the CUDA kernels and the op layer's saved log-sum-exp have a reference on a
// machine without a GPU. Per (batch, head) and query row i, with s_ij = scale q_i . k_j over
// the kept keys (all, or j <= i when causal):
//   forward:  lse_i = log sum_j exp(s_ij),  p_ij = exp(s_ij - lse_i),  out_i = sum_j p_ij v_j
//   backward: delta_i = dout_i . out_i,  dp_ij = dout_i . v_j,  ds_ij = p_ij (dp_ij - delta_i),
//             dv_j = sum_i p_ij dout_i,  dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i
// (Dao 2023, "FlashAttention-2", algorithm 2: delta from the stored output).
// With dropout (AttentionDropout, backend/contract.hpp) z_ij = keep_ij / (1 - p), the keep bit
// from the Philox words rand() draws for element ((b H + h) L + i) S + j:
//   forward:  out_i = sum_j p_ij z_ij v_j (lse unchanged)
//   backward: dv_j = sum_i p_ij z_ij dout_i,  dp_ij = z_ij dout_i . v_j,  ds_ij as above.
module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>
#include "backend/contract.hpp"
#include "ops/random_transform.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

// Element (b, h, t, d) of a 4-D operand.
template <class T> T* at(const Operand& o, std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t d) {
  return static_cast<T*>(o.data) + b * o.strides[0] + h * o.strides[1] + t * o.strides[2] + d * o.strides[3];
}

template <class F> void dispatch_floating(const char* op, DType dtype, F&& f) {
  dispatch(dtype, [&]<class T>(T* tag) {
    if constexpr (is_floating<T>) f(tag);
    else throw Error(ErrorKind::dtype, std::string(op) + ": expected a floating-point tensor, got " + to_string(dtype));
  });
}

// The scaled scores of row i against keys [0, kept).
template <class T>
void scores(std::vector<double>& s, const Operand& q, const Operand& k, std::int64_t b, std::int64_t h, std::int64_t i,
            std::int64_t kept, std::int64_t dim, double scale) {
  for (std::int64_t j = 0; j < kept; ++j) {
    double dot = 0;
    for (std::int64_t d = 0; d < dim; ++d)
      dot += static_cast<double>(load(*at<const T>(q, b, h, i, d))) * static_cast<double>(load(*at<const T>(k, b, h, j, d)));
    s[j] = dot * scale;
  }
}

// z_ij of row i for keys [0, kept): 1 / (1 - p) where kept by the dropout mask, else 0; all 1
// without dropout. `row` is the element index of (b, h, i, 0).
template <class T>
void dropout_row(std::vector<double>& z, const AttentionDropout& d, std::int64_t row, std::int64_t kept) {
  namespace rt = random_transform;
  if (!(d.p > 0)) {
    std::fill(z.begin(), z.begin() + kept, 1.0);
    return;
  }
  if (d.seed_offset)
    throw Error(ErrorKind::device, "scaled_dot_product_flash_attention: a CUDA graph's dropout state on the CPU");
  const double keep_scale = 1.0 / (1.0 - d.p);
  for (std::int64_t j = 0; j < kept; ++j) {
    const auto e = static_cast<std::uint64_t>(row + j);
    bool keep;
    if constexpr (std::is_same_v<T, double>) {
      const std::uint64_t w = d.offset + 2 * e;
      keep = rt::uniform53(rt::philox_word(d.seed, w), rt::philox_word(d.seed, w + 1)) >= d.p;
    } else {
      keep = rt::uniform_bits(rt::philox_word(d.seed, d.offset + e), 24) >= static_cast<float>(d.p);
    }
    z[j] = keep ? keep_scale : 0.0;
  }
}

}  // namespace

// allow_tf32 is CUDA's: the CPU computes in f64 (f32 products are exact there).
void CpuBackend::attention_forward(const Operand& out, const Operand& lse, const Operand& q, const Operand& k,
                                   const Operand& v, double scale, bool causal, const AttentionDropout& dropout,
                                   bool /*allow_tf32*/) {
  const std::int64_t nb = q.sizes[0], nh = q.sizes[1], nl = q.sizes[2], dim = q.sizes[3], ns = k.sizes[2];
  dispatch_floating("scaled_dot_product_flash_attention", q.dtype, [&]<class T>(T*) {
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::vector<double> s(ns), z(ns), acc(dim);
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t h = 0; h < nh; ++h)
        for (std::int64_t i = 0; i < nl; ++i) {
          const std::int64_t kept = causal ? std::min(ns, i + 1) : ns;
          scores<T>(s, q, k, b, h, i, kept, dim, scale);
          dropout_row<T>(z, dropout, ((b * nh + h) * nl + i) * ns, kept);
          double m = -std::numeric_limits<double>::infinity();
          for (std::int64_t j = 0; j < kept; ++j) m = std::fmax(m, s[j]);
          double l = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t j = 0; j < kept; ++j) {
            const double p = std::exp(s[j] - m);
            l += p;
            for (std::int64_t d = 0; d < dim; ++d)
              acc[d] += p * z[j] * static_cast<double>(load(*at<const T>(v, b, h, j, d)));
          }
          for (std::int64_t d = 0; d < dim; ++d) *at<T>(out, b, h, i, d) = narrow_to<T>(acc[d] / l);
          static_cast<L*>(lse.data)[(b * nh + h) * nl + i] = static_cast<L>(m + std::log(l));
        }
  });
}

void CpuBackend::attention_backward(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout,
                                    const Operand& q, const Operand& k, const Operand& v, const Operand& out,
                                    const Operand& lse, double scale, bool causal,
                                    const AttentionDropout& dropout, bool /*allow_tf32*/,
                                    bool /*deterministic: always, a fixed order*/) {
  const std::int64_t nb = q.sizes[0], nh = q.sizes[1], nl = q.sizes[2], dim = q.sizes[3], ns = k.sizes[2];
  dispatch_floating("scaled_dot_product_flash_attention", q.dtype, [&]<class T>(T*) {
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    auto get = [](const Operand& o, std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t d) {
      return static_cast<double>(load(*at<const T>(o, b, h, t, d)));
    };
    std::vector<double> s(ns), z(ns), dqi(dim), dk_acc(ns * dim), dv_acc(ns * dim);
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t h = 0; h < nh; ++h) {
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
        for (std::int64_t i = 0; i < nl; ++i) {
          const std::int64_t kept = causal ? std::min(ns, i + 1) : ns;
          scores<T>(s, q, k, b, h, i, kept, dim, scale);
          dropout_row<T>(z, dropout, ((b * nh + h) * nl + i) * ns, kept);
          const double lse_i = static_cast<double>(static_cast<const L*>(lse.data)[(b * nh + h) * nl + i]);
          double delta = 0;
          for (std::int64_t d = 0; d < dim; ++d) delta += get(dout, b, h, i, d) * get(out, b, h, i, d);
          std::fill(dqi.begin(), dqi.end(), 0.0);
          for (std::int64_t j = 0; j < kept; ++j) {
            const double p = std::exp(s[j] - lse_i);
            double dp = 0;
            for (std::int64_t d = 0; d < dim; ++d) {
              const double g = get(dout, b, h, i, d);
              dv_acc[j * dim + d] += p * z[j] * g;
              dp += g * get(v, b, h, j, d);
            }
            const double ds = p * (dp * z[j] - delta) * scale;
            for (std::int64_t d = 0; d < dim; ++d) {
              dqi[d] += ds * get(k, b, h, j, d);
              dk_acc[j * dim + d] += ds * get(q, b, h, i, d);
            }
          }
          for (std::int64_t d = 0; d < dim; ++d) *at<T>(dq, b, h, i, d) = narrow_to<T>(dqi[d]);
        }
        for (std::int64_t j = 0; j < ns; ++j)
          for (std::int64_t d = 0; d < dim; ++d) {
            *at<T>(dk, b, h, j, d) = narrow_to<T>(dk_acc[j * dim + d]);
            *at<T>(dv, b, h, j, d) = narrow_to<T>(dv_acc[j * dim + d]);
          }
      }
  });
}

}  // namespace brrr::backend
