// The CPU backend: plain C++ loops over strided operands (Eigen joins with the math ops).
// Also the backend registry, operand building and the generator states.
module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ops/cpu/isa/kernels.hpp"
#include "ops/random_transform.hpp"
#include "backend/contract.hpp"
#include "backend/stream_check.hpp"
#include "ops/cpu/loops.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {
Operand operand(const Tensor& t, const char* op) {
  Operand o;
  if (t.dim() > max_dims)
    throw Error(ErrorKind::shape, std::string(op) + ": tensors of more than " + std::to_string(max_dims) +
                                      " dims are not supported, got shape " + to_string(t.shape()));
  o.data = t.data_ptr();
  o.dtype = t.dtype();
  o.device = t.device().is_cuda() ? t.device().index() : -1;
  o.ndim = static_cast<int>(t.dim());
  o.numel = t.numel();
  for (int i = 0; i < o.ndim; ++i) {
    o.sizes[i] = t.shape()[i];
    o.strides[i] = t.strides()[i];
  }
  o.log = t.storage().access_log();
  o.op = op;
  // A CPU kernel is a host access: never under an async copy into pinned memory.
  if (o.device < 0 && o.log && o.log->host_pending()) wait_host_pending(t.storage(), op);
  return o;
}
}  // namespace

// Every kernel launch's tensors pass here, read vs write: CUDA tensors are announced to the
// stream bookkeeping on the stream the launch will use, the device's current one.
namespace {
void announce(const Operand& o, stream_check::AccessKind kind) {
  if (o.device >= 0) note_access(current_stream_state(o.device), o, kind);
}
}  // namespace
Operand input(const Tensor& t, const char* op) {
  Operand o = operand(t, op);
  announce(o, stream_check::AccessKind::read);
  return o;
}
Operand output(const Tensor& t, const char* op) {
  Operand o = operand(t, op);
  announce(o, stream_check::AccessKind::write);
  return o;
}
const void* input_data(const Tensor& t, const char* op) {
  announce(tracked(t, op), stream_check::AccessKind::read);
  return t.data_ptr();
}
void* output_data(const Tensor& t, const char* op) {
  announce(tracked(t, op), stream_check::AccessKind::write);
  return t.data_ptr();
}

void CpuBackend::fill(const Operand& out, double value) {
  dispatch(out.dtype, [&]<class T>(T*) {
    auto* p = static_cast<T*>(out.data);
    T v = narrow_to<T>(value);
    for_each2(out, out, [&](std::int64_t o, std::int64_t, std::int64_t) { p[o] = v; });
  });
}

// Copies whose innermost dim is contiguous on both sides (the permuted copies behind
// contiguous() and the convolutions' layout changes) go row by row, rows split over the
// intra-op pool; the others walk every element.
void CpuBackend::copy(const Operand& dst, const Operand& src) {
  const int nd = dst.ndim;
  const std::int64_t len = nd > 0 ? dst.sizes[nd - 1] : 0;
  bool by_rows = nd >= 2 && len >= 16 && dst.strides[nd - 1] == 1 && src.strides[nd - 1] == 1;
  for (int k = 0; by_rows && k < nd - 1; ++k)  // a broadcast destination keeps the sequential walk
    if (dst.sizes[k] > 1 && dst.strides[k] == 0) by_rows = false;
  dispatch(dst.dtype, [&]<class D>(D*) {
    dispatch(src.dtype, [&]<class S>(S*) {
      auto* d = static_cast<D*>(dst.data);
      const auto* s = static_cast<const S*>(src.data);
      if (by_rows) {
        cpu::parallel_for(dst.numel / len, std::max<std::int64_t>(1, elementwise_grain / len), [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            std::int64_t od = 0, os = 0;
            for (std::int64_t d_ = nd - 2, rest = r; d_ >= 0; --d_) {
              const std::int64_t i = rest % dst.sizes[d_];
              rest /= dst.sizes[d_];
              od += i * dst.strides[d_];
              os += i * src.strides[d_];
            }
            D* out = d + od;
            const S* in = s + os;
            if constexpr (std::is_same_v<D, S>) std::memmove(out, in, static_cast<std::size_t>(len) * sizeof(D));
            else for (std::int64_t k = 0; k < len; ++k) out[k] = narrow_to<D>(widen<S>(in[k]));
          }
        });
        return;
      }
      if constexpr (std::is_same_v<D, S>) {
        for_each2(dst, src, [&](std::int64_t od, std::int64_t os, std::int64_t) { d[od] = s[os]; });
      } else {
        for_each2(dst, src, [&](std::int64_t od, std::int64_t os, std::int64_t) {
          d[od] = narrow_to<D>(widen<S>(s[os]));
        });
      }
    });
  });
}

void CpuBackend::arange(const Operand& out, double start, double step) {
  dispatch(out.dtype, [&]<class T>(T*) {
    auto* p = static_cast<T*>(out.data);
    for (std::int64_t i = 0; i < out.numel; ++i) p[i] = narrow_to<T>(start + static_cast<double>(i) * step);
  });
}

// Element i consumes words [per * i, per * (i + 1)) of the draw (normals: pairs of elements
// share their pair's words), so any range of elements can make its own words: chunks of 4096
// elements run on the intra-op pool, each with a small buffer, and the numbers do not depend
// on the thread count.
void CpuBackend::random(const Operand& out, Distribution dist, std::uint64_t seed, std::uint64_t offset,
                        std::int64_t low, std::int64_t high) {
  namespace rt = random_transform;
  std::uint64_t words_per = 0;
  switch (dist) {
    case Distribution::uniform: words_per = out.dtype == DType::f64 ? rt::words_uniform_f64 : rt::words_uniform; break;
    case Distribution::normal: words_per = out.dtype == DType::f64 ? rt::words_normal_f64 : rt::words_normal; break;
    case Distribution::integer: words_per = rt::words_integer; break;
  }
  constexpr std::int64_t chunk = 4096;  // a multiple of 4 (whole blocks) and of 2 (whole normal pairs)
  const auto philox = cpu::isa().philox_blocks;
  const auto normal_f32 = cpu::isa().normal_f32;
  const auto normal_f64 = cpu::isa().normal_f64;
  dispatch(out.dtype, [&]<class T>(T*) {
    auto* p = static_cast<T*>(out.data);
    cpu::parallel_for((out.numel + chunk - 1) / chunk, 4, [&](std::int64_t c0, std::int64_t c1) {
      std::vector<std::uint32_t> w(static_cast<std::size_t>(chunk * words_per + 4));
      constexpr bool direct = std::is_same_v<T, float> || std::is_same_v<T, double>;
      using Z = std::conditional_t<std::is_same_v<T, double>, double, float>;  // a normal's compute type
      std::vector<Z> z(dist == Distribution::normal ? static_cast<std::size_t>(chunk) : 0);
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t e0 = c * chunk, e1 = std::min(out.numel, e0 + chunk);
        // A normal draw of odd length: the last element's pair needs one more element's words.
        const std::int64_t len = dist == Distribution::normal ? (e1 - e0 + 1) / 2 * 2 : e1 - e0;
        const std::uint64_t first = offset + static_cast<std::uint64_t>(e0) * words_per,
                            count = static_cast<std::uint64_t>(len) * words_per;
        if (first % 4 == 0)  // whole blocks (every draw starts at one): the vectorised kernel
          philox(seed, first / 4, w.data(), static_cast<std::int64_t>((count + 3) / 4));
        else
          rt::philox_words(seed, first, w.data(), count);
        if (dist == Distribution::normal) {  // Box-Muller pairs, vectorised (ops/cpu/isa)
          if constexpr (is_floating<T>) {
            // Whole pairs straight into a float or double output; the rest through z.
            Z* dst = direct && len == e1 - e0 ? reinterpret_cast<Z*>(p + e0) : z.data();
            if constexpr (std::is_same_v<Z, double>) normal_f64(w.data(), dst, len / 2);
            else normal_f32(w.data(), dst, len / 2);
            if (dst == z.data())
              for (std::int64_t i = e0; i < e1; ++i) p[i] = narrow_to<T>(z[static_cast<std::size_t>(i - e0)]);
          }
          continue;
        }
        for (std::int64_t i = e0; i < e1; ++i) {
          const std::size_t k = static_cast<std::size_t>(i - e0);
          switch (dist) {
            case Distribution::uniform:
              if constexpr (std::is_same_v<T, double>) p[i] = rt::uniform53(w[2 * k], w[2 * k + 1]);
              else if constexpr (std::is_same_v<T, float>) p[i] = rt::uniform_bits(w[k], 24);
              else if constexpr (std::is_same_v<T, half>) p[i] = T(rt::uniform_bits(w[k], 11));
              else if constexpr (std::is_same_v<T, bfloat16>) p[i] = T(rt::uniform_bits(w[k], 8));
              break;
            case Distribution::normal: break;  // above
            case Distribution::integer:
              p[i] = narrow_to<T>(rt::integer(w[2 * k], w[2 * k + 1], low, high));
              break;
          }
        }
      }
    });
  });
}

// The words of dropout's uniforms in chunks of whole Philox blocks (split over the intra-op
// pool; each element's words depend only on its index, so not on the thread count).
void CpuBackend::dropout(const Operand& out, const Operand& noise, const Operand& in, const AttentionDropout& d) {
  namespace rt = random_transform;
  if (in.numel == 0) return;
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (!is_floating<T>) {
      throw Error(ErrorKind::dtype, std::string("dropout: expected a floating-point tensor, got ") + to_string(in.dtype));
    } else {
      constexpr std::int64_t words_per = std::is_same_v<T, double> ? 2 : 1;
      const T keep = narrow_to<T>(1.0 / (1.0 - d.p)), zero = narrow_to<T>(0.0);
      const float p32 = static_cast<float>(d.p);
      const auto* x = static_cast<const T*>(in.data);
      auto* z = static_cast<T*>(noise.data);
      auto* y = static_cast<T*>(out.data);
      constexpr std::int64_t chunk = 4096;  // elements
      cpu::parallel_for((in.numel + chunk - 1) / chunk, 4, [&](std::int64_t c0, std::int64_t c1) {
        std::vector<std::uint32_t> w(static_cast<std::size_t>(chunk * words_per));
        for (std::int64_t c = c0; c < c1; ++c) {
          const std::int64_t e0 = c * chunk, e1 = std::min(in.numel, e0 + chunk);
          rt::philox_words(d.seed, d.offset + static_cast<std::uint64_t>(e0 * words_per), w.data(),
                           static_cast<std::uint64_t>((e1 - e0) * words_per));
          for (std::int64_t i = e0; i < e1; ++i) {
            const std::size_t k = static_cast<std::size_t>(i - e0);
            bool kept;
            if constexpr (std::is_same_v<T, double>) kept = rt::uniform53(w[2 * k], w[2 * k + 1]) >= d.p;
            else kept = rt::uniform_bits(w[k], 24) >= p32;
            z[i] = kept ? keep : zero;
            y[i] = narrow_to<T>(load<T>(x[i]) * load<T>(z[i]));
          }
        }
      });
    }
  });
}

std::uint64_t random_words(Distribution dist, DType dtype, std::int64_t numel) {
  namespace rt = random_transform;
  std::uint64_t per = 0;
  switch (dist) {
    case Distribution::uniform: per = dtype == DType::f64 ? rt::words_uniform_f64 : rt::words_uniform; break;
    case Distribution::normal: per = dtype == DType::f64 ? rt::words_normal_f64 : rt::words_normal; break;
    case Distribution::integer: per = rt::words_integer; break;
  }
  // Whole Philox blocks (4 words; they also hold an odd-length normal draw's last pair) (4 words) keep every draw aligned to a block.
  return (per * static_cast<std::uint64_t>(numel) + 3) / 4 * 4;
}

Backend& backend_for(Device device) {
  static CpuBackend cpu;
  switch (device.type()) {
    case DeviceType::cpu: return cpu;
    case DeviceType::cuda: return cuda_backend();
  }
  return cpu;
}

namespace {
constexpr std::uint64_t default_seed = 67280421310721ull;  // PyTorch's default seed
std::mutex generator_mutex;
GeneratorState cpu_generator{default_seed, 0};
std::unordered_map<int, GeneratorState>& cuda_generators() {
  static std::unordered_map<int, GeneratorState> g;
  return g;
}
}  // namespace

GeneratorState& generator(Device device) {
  std::lock_guard lock(generator_mutex);
  if (device.is_cpu()) return cpu_generator;
  auto [it, inserted] = cuda_generators().try_emplace(device.index(), GeneratorState{default_seed, 0});
  return it->second;
}

void seed_all(std::uint64_t seed) {
  std::lock_guard lock(generator_mutex);
  cpu_generator = {seed, 0};
  for (int d = 0; d < device_count(); ++d) cuda_generators()[d] = {seed, 0};
}

}  // namespace brrr::backend
