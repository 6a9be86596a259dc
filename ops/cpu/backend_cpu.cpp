// The CPU backend: plain C++ loops over strided operands (Eigen joins with the math ops).
// Also the backend registry, operand building and the generator states.
module;
#include <curand.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ops/random_transform.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

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
  return o;
}

namespace {

// --- element types and conversions -----------------------------------------------------

// bool tensors hold one byte, 0 or 1.
template <class T> using storage_t = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

template <class F> void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(static_cast<float*>(nullptr));
    case DType::f64: return f(static_cast<double*>(nullptr));
    case DType::bf16: return f(static_cast<bfloat16*>(nullptr));
    case DType::f16: return f(static_cast<half*>(nullptr));
    case DType::i32: return f(static_cast<std::int32_t*>(nullptr));
    case DType::i64: return f(static_cast<std::int64_t*>(nullptr));
    case DType::boolean: return f(static_cast<bool*>(nullptr));
  }
}

// Widest value of each type: double for floats, int64 for integers.
template <class T> auto widen(storage_t<T> v) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, half>) return static_cast<double>(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>) return static_cast<std::int64_t>(v != 0);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(v);
  else return static_cast<std::int64_t>(v);
}

// float -> integer: truncate toward zero, NaN -> 0, saturate at the type's range (defined
// where C++ leaves it undefined; CUDA's cvt.rzi.sat does the same).
template <class I> I float_to_int(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

template <class T, class W> storage_t<T> narrow_to(W v) {
  if constexpr (std::is_same_v<T, bool>) return static_cast<std::uint8_t>(v != 0);
  else if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, half>) {
    // double -> float -> 16-bit would round twice; for values from f32/f16/bf16/int sources
    // the first step is exact, and from f64 the double rounding matches PyTorch's CPU path.
    return T(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else if constexpr (std::is_floating_point_v<W>) return float_to_int<T>(v);
  else return static_cast<T>(v);
}

// Calls f(offset_a, offset_b, i) for each element in row-major order of two same-shape
// operands, in elements.
template <class F> void for_each2(const Operand& a, const Operand& b, F&& f) {
  std::int64_t n = a.numel;
  bool a_cont = true, b_cont = true;
  {
    std::int64_t expect = 1;
    for (int d = a.ndim - 1; d >= 0; --d) {
      if (a.sizes[d] != 1 && a.strides[d] != expect) a_cont = false;
      if (b.sizes[d] != 1 && b.strides[d] != expect) b_cont = false;
      expect *= a.sizes[d];
    }
  }
  if (a_cont && b_cont) {
    for (std::int64_t i = 0; i < n; ++i) f(i, i, i);
    return;
  }
  std::int64_t idx[max_dims] = {};
  std::int64_t oa = 0, ob = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(oa, ob, i);
    for (int d = a.ndim - 1; d >= 0; --d) {
      if (++idx[d] < a.sizes[d]) {
        oa += a.strides[d];
        ob += b.strides[d];
        break;
      }
      oa -= (a.sizes[d] - 1) * a.strides[d];
      ob -= (a.sizes[d] - 1) * b.strides[d];
      idx[d] = 0;
    }
  }
}

// --- cuRAND's host generator: the same Philox words as the device generator ---------------

std::vector<std::uint32_t> host_words(std::uint64_t seed, std::uint64_t offset, std::size_t n) {
  static std::mutex mutex;
  static curandGenerator_t gen = nullptr;
  std::lock_guard lock(mutex);
  if (!gen) check_curand(curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10),
                         "curandCreateGeneratorHost", __FILE__, __LINE__);
  check_curand(curandSetPseudoRandomGeneratorSeed(gen, seed), "curandSetPseudoRandomGeneratorSeed", __FILE__, __LINE__);
  check_curand(curandSetGeneratorOffset(gen, offset), "curandSetGeneratorOffset", __FILE__, __LINE__);
  std::vector<std::uint32_t> words((n + 3) / 4 * 4);
  check_curand(curandGenerate(gen, words.data(), words.size()), "curandGenerate (host)", __FILE__, __LINE__);
  return words;
}

class CpuBackend final : public Backend {
public:
  void fill(const Operand& out, double value) override {
    dispatch(out.dtype, [&]<class T>(T*) {
      auto* p = static_cast<storage_t<T>*>(out.data);
      storage_t<T> v = narrow_to<T>(value);
      for_each2(out, out, [&](std::int64_t o, std::int64_t, std::int64_t) { p[o] = v; });
    });
  }

  void copy(const Operand& dst, const Operand& src) override {
    dispatch(dst.dtype, [&]<class D>(D*) {
      dispatch(src.dtype, [&]<class S>(S*) {
        auto* d = static_cast<storage_t<D>*>(dst.data);
        const auto* s = static_cast<const storage_t<S>*>(src.data);
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

  void arange(const Operand& out, double start, double step) override {
    dispatch(out.dtype, [&]<class T>(T*) {
      auto* p = static_cast<storage_t<T>*>(out.data);
      for (std::int64_t i = 0; i < out.numel; ++i) p[i] = narrow_to<T>(start + static_cast<double>(i) * step);
    });
  }

  void random(const Operand& out, Distribution dist, std::uint64_t seed, std::uint64_t offset, std::int64_t low,
              std::int64_t high) override {
    namespace rt = random_transform;
    std::uint64_t n = random_words(dist, out.dtype, out.numel);
    std::vector<std::uint32_t> w = host_words(seed, offset, n);
    dispatch(out.dtype, [&]<class T>(T*) {
      auto* p = static_cast<storage_t<T>*>(out.data);
      for (std::int64_t i = 0; i < out.numel; ++i) {
        std::size_t k = static_cast<std::size_t>(i);
        switch (dist) {
          case Distribution::uniform:
            if constexpr (std::is_same_v<T, double>) p[i] = rt::uniform53(w[2 * k], w[2 * k + 1]);
            else if constexpr (std::is_same_v<T, float>) p[i] = rt::uniform_bits(w[k], 24);
            else if constexpr (std::is_same_v<T, half>) p[i] = T(rt::uniform_bits(w[k], 11));
            else if constexpr (std::is_same_v<T, bfloat16>) p[i] = T(rt::uniform_bits(w[k], 8));
            break;
          case Distribution::normal:
            if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float> || std::is_same_v<T, half> ||
                          std::is_same_v<T, bfloat16>)
              p[i] = narrow_to<T>(rt::normal(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]));
            break;
          case Distribution::integer:
            p[i] = narrow_to<T>(rt::integer(w[2 * k], w[2 * k + 1], low, high));
            break;
        }
      }
    });
  }
};

}  // namespace

std::uint64_t random_words(Distribution dist, DType dtype, std::int64_t numel) {
  namespace rt = random_transform;
  std::uint64_t per = 0;
  switch (dist) {
    case Distribution::uniform: per = dtype == DType::f64 ? rt::words_uniform_f64 : rt::words_uniform; break;
    case Distribution::normal: per = rt::words_normal; break;
    case Distribution::integer: per = rt::words_integer; break;
  }
  // Whole Philox blocks (4 words) keep every draw aligned to a block.
  return (per * static_cast<std::uint64_t>(numel) + 3) / 4 * 4;
}

Backend& cuda_backend();  // ops/cuda/backend_cuda.cpp

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
