// CUDA kernels of the elementwise ops. Math: ops/elementwise_math.hpp (shared with the CPU).
// Layout handling: dims contiguous in every operand are merged on the host; fully
// contiguous operands with 16-byte aligned pointers take a vectorised path (16-byte loads
// and stores per thread); everything else computes each operand's offset from the
// row-major index with 64-bit arithmetic, in a grid-stride loop.
#include "ops/cuda/common.cuh"
#include "ops/elementwise_math.hpp"

namespace brrr::kernels {

namespace {
namespace ew = ::brrr::elementwise;

template <class T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<std::uint8_t> { using type = std::int64_t; };
template <class T> using acc_t = typename Acc<T>::type;

template <class T> __device__ __forceinline__ acc_t<T> load(T v) {
  if constexpr (is_half_like<T>) return static_cast<float>(v);
  else if constexpr (std::is_same_v<T, std::uint8_t>) return v != 0;
  else return v;
}

// Merges dims that are contiguous in all operands; drops size-1 dims. Operands share sizes.
template <int N> void coalesce(Strided* (&ops)[N]) {
  Strided& s0 = *ops[0];
  int nd = 0;
  std::int64_t sizes[max_dims];
  std::int64_t strides[N][max_dims];
  for (int d = 0; d < s0.ndim; ++d) {
    std::int64_t size = s0.sizes[d];
    if (size == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = strides[k][nd - 1] == ops[k]->strides[d] * size;
    if (merge) {
      sizes[nd - 1] *= size;
      for (int k = 0; k < N; ++k) strides[k][nd - 1] = ops[k]->strides[d];
    } else {
      sizes[nd] = size;
      for (int k = 0; k < N; ++k) strides[k][nd] = ops[k]->strides[d];
      ++nd;
    }
  }
  for (int k = 0; k < N; ++k) {
    ops[k]->ndim = nd;
    for (int d = 0; d < nd; ++d) {
      ops[k]->sizes[d] = sizes[d];
      ops[k]->strides[d] = strides[k][d];
    }
  }
}

template <int N> bool vectorizable(Strided* (&ops)[N]) {
  for (int k = 0; k < N; ++k) {
    const Strided& s = *ops[k];
    if (s.ndim > 1 || (s.ndim == 1 && s.strides[0] != 1)) return false;
    if (reinterpret_cast<std::uintptr_t>(s.data) % 16 != 0) return false;
  }
  return true;
}

template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements per thread on the vector path: 16 bytes of the widest operand type.
template <class In, class Out> constexpr int vec_width() {
  constexpr int w = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  return w < 1 ? 1 : w;
}

// ---- kernels ----

template <class F, class O, class I, int V>
__global__ void map1_vec(O* out, const I* in, std::int64_t n, F f) {
  std::int64_t stride = std::int64_t(blockDim.x) * gridDim.x * V;
  std::int64_t i = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) * V;
  for (; i + V <= n; i += stride) {
    Pack<I, V> a = *reinterpret_cast<const Pack<I, V>*>(in + i);
    Pack<O, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = f(a.v[j]);
    *reinterpret_cast<Pack<O, V>*>(out + i) = r;
  }
  if (i < n)  // the tail: fewer than V elements, in the one thread whose pack it starts
    for (; i < n; ++i) out[i] = f(in[i]);
}

template <class F, class O, class I>
__global__ void map1_strided(Strided out, Strided in, F f) {
  O* o = static_cast<O*>(out.data);
  const I* x = static_cast<const I*>(in.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    o[offset_of(out, i)] = f(x[offset_of(in, i)]);
}

template <class F, class O, class I, int V>
__global__ void map2_vec(O* out, const I* a, const I* b, std::int64_t n, F f) {
  std::int64_t stride = std::int64_t(blockDim.x) * gridDim.x * V;
  std::int64_t i = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) * V;
  for (; i + V <= n; i += stride) {
    Pack<I, V> pa = *reinterpret_cast<const Pack<I, V>*>(a + i);
    Pack<I, V> pb = *reinterpret_cast<const Pack<I, V>*>(b + i);
    Pack<O, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = f(pa.v[j], pb.v[j]);
    *reinterpret_cast<Pack<O, V>*>(out + i) = r;
  }
  if (i < n)
    for (; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <class F, class O, class I>
__global__ void map2_strided(Strided out, Strided a, Strided b, F f) {
  O* o = static_cast<O*>(out.data);
  const I* pa = static_cast<const I*>(a.data);
  const I* pb = static_cast<const I*>(b.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    o[offset_of(out, i)] = f(pa[offset_of(a, i)], pb[offset_of(b, i)]);
}

template <class T>
__global__ void where_strided(Strided out, Strided cond, Strided a, Strided b) {
  T* o = static_cast<T*>(out.data);
  const std::uint8_t* c = static_cast<const std::uint8_t*>(cond.data);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    o[offset_of(out, i)] = c[offset_of(cond, i)] ? pa[offset_of(a, i)] : pb[offset_of(b, i)];
}

// ---- functors ----

template <ew::Unary OP, class T> struct UnaryF {
  acc_t<T> lo, hi;
  __device__ __forceinline__ T operator()(T x) const { return narrow_to<T>(ew::unary<OP, acc_t<T>>(load(x), lo, hi)); }
};

// Integer rounding divisions store `code` into the deferred error flag on a zero divisor.
template <ew::Binary OP, class A> __device__ __forceinline__ void check_divisor(A b, int* flag, int code) {
  if constexpr (ew::is_integer_division(OP) && std::is_integral_v<A>)
    if (b == 0 && flag) *reinterpret_cast<volatile int*>(flag) = code;
}

template <ew::Binary OP, class T, class O> struct BinaryF {
  int* flag;
  int code;
  __device__ __forceinline__ O operator()(T a, T b) const {
    check_divisor<OP>(load(b), flag, code);
    auto r = ew::binary<OP, acc_t<T>>(load(a), load(b));
    if constexpr (ew::is_comparison(OP)) return static_cast<O>(r != 0);
    else return narrow_to<O>(r);
  }
};

template <ew::Binary OP, class T, class O> struct BinaryScalarF {
  acc_t<T> s;
  bool scalar_first;
  int* flag;
  int code;
  __device__ __forceinline__ O operator()(T a) const {
    auto x = load(a);
    check_divisor<OP>(scalar_first ? x : s, flag, code);
    auto r = scalar_first ? ew::binary<OP, acc_t<T>>(s, x) : ew::binary<OP, acc_t<T>>(x, s);
    if constexpr (ew::is_comparison(OP)) return static_cast<O>(r != 0);
    else return narrow_to<O>(r);
  }
};

// ---- launchers ----

template <class O, class I, class F> void launch1(Strided out, Strided in, F f, cudaStream_t s) {
  Strided* ops[2] = {&out, &in};
  coalesce(ops);
  if (vectorizable(ops)) {
    constexpr int V = vec_width<I, O>();
    std::int64_t threads_needed = (out.numel + V - 1) / V;
    map1_vec<F, O, I, V><<<blocks_for(threads_needed), 256, 0, s>>>(static_cast<O*>(out.data),
                                                                  static_cast<const I*>(in.data), out.numel, f);
  } else {
    map1_strided<F, O, I><<<blocks_for(out.numel), 256, 0, s>>>(out, in, f);
  }
}

template <class O, class I, class F> void launch2(Strided out, Strided a, Strided b, F f, cudaStream_t s) {
  Strided* ops[3] = {&out, &a, &b};
  coalesce(ops);
  if (vectorizable(ops)) {
    constexpr int V = vec_width<I, O>();
    std::int64_t threads_needed = (out.numel + V - 1) / V;
    map2_vec<F, O, I, V><<<blocks_for(threads_needed), 256, 0, s>>>(
        static_cast<O*>(out.data), static_cast<const I*>(a.data), static_cast<const I*>(b.data), out.numel, f);
  } else {
    map2_strided<F, O, I><<<blocks_for(out.numel), 256, 0, s>>>(out, a, b, f);
  }
}

template <class E, E... Ops, class F> void with_op(E op, F&& f) {
  ((op == Ops ? (f.template operator()<Ops>(), 0) : 0), ...);
}
#define BRRR_UNARY_OPS                                                                                          \
  ew::Unary::neg, ew::Unary::abs, ew::Unary::exp, ew::Unary::log, ew::Unary::log1p, ew::Unary::sqrt,              \
      ew::Unary::rsqrt, ew::Unary::tanh, ew::Unary::sigmoid, ew::Unary::relu, ew::Unary::gelu_tanh,               \
      ew::Unary::gelu_erf, ew::Unary::silu, ew::Unary::sin, ew::Unary::cos, ew::Unary::erf, ew::Unary::sign,      \
      ew::Unary::clamp
#define BRRR_BINARY_OPS                                                                                          \
  ew::Binary::add, ew::Binary::sub, ew::Binary::mul, ew::Binary::div, ew::Binary::pow, ew::Binary::maximum,       \
      ew::Binary::minimum, ew::Binary::eq, ew::Binary::ne, ew::Binary::lt, ew::Binary::le, ew::Binary::gt,        \
      ew::Binary::ge, ew::Binary::floor_divide, ew::Binary::trunc_divide, ew::Binary::remainder, ew::Binary::fmod, \
      ew::Binary::relu_backward

template <class A> A clamp_bound(double v, bool upper) {
  if constexpr (std::is_floating_point_v<A>) {
    return static_cast<A>(v);
  } else {
    constexpr A min = std::numeric_limits<A>::lowest(), max = std::numeric_limits<A>::max();
    // saturate on both sides: a bound past the type's range must not reach the cast
    if (upper) return v >= static_cast<double>(max) ? max : v <= static_cast<double>(min) ? min : static_cast<A>(floor(v));
    return v <= static_cast<double>(min) ? min : v >= static_cast<double>(max) ? max : static_cast<A>(ceil(v));
  }
}

// The scalar as the tensor's dtype holds it, in the arithmetic type.
template <class T> acc_t<T> scalar_as(double s) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__float2half_rn(static_cast<float>(s)));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(__float2bfloat16_rn(static_cast<float>(s)));
  else if constexpr (std::is_same_v<T, std::uint8_t>) return s != 0;
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(s);
  else return clamp_bound<T>(s >= 0 ? floor(s) : ceil(s), s >= 0);
}

}  // namespace

int unary(int op, const Strided& out, const Strided& in, double lo, double hi, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  with_op<ew::Unary, BRRR_UNARY_OPS>(static_cast<ew::Unary>(op), [&]<ew::Unary OP>() {
    dispatch(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      UnaryF<OP, T> f{clamp_bound<acc_t<T>>(lo, false), clamp_bound<acc_t<T>>(hi, true)};
      launch1<T, T>(out, in, f, s);
    });
  });
  return static_cast<int>(cudaGetLastError());
}

int binary(int op, const Strided& out, const Strided& a, const Strided& b, int* error_flag, int error_code,
           void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  with_op<ew::Binary, BRRR_BINARY_OPS>(static_cast<ew::Binary>(op), [&]<ew::Binary OP>() {
    dispatch(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (ew::is_comparison(OP))
        launch2<std::uint8_t, T>(out, a, b, BinaryF<OP, T, std::uint8_t>{error_flag, error_code}, s);
      else launch2<T, T>(out, a, b, BinaryF<OP, T, T>{error_flag, error_code}, s);
    });
  });
  return static_cast<int>(cudaGetLastError());
}

int binary_scalar(int op, const Strided& out, const Strided& a, double sc, bool scalar_first, int* error_flag,
                  int error_code, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  with_op<ew::Binary, BRRR_BINARY_OPS>(static_cast<ew::Binary>(op), [&]<ew::Binary OP>() {
    dispatch(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (ew::is_comparison(OP))
        launch1<std::uint8_t, T>(out, a, BinaryScalarF<OP, T, std::uint8_t>{scalar_as<T>(sc), scalar_first, error_flag, error_code}, s);
      else
        launch1<T, T>(out, a, BinaryScalarF<OP, T, T>{scalar_as<T>(sc), scalar_first, error_flag, error_code}, s);
    });
  });
  return static_cast<int>(cudaGetLastError());
}

int where(const Strided& out, const Strided& cond, const Strided& a, const Strided& b, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  Strided o = out, c = cond, pa = a, pb = b;
  Strided* ops[4] = {&o, &c, &pa, &pb};
  coalesce(ops);
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    where_strided<T><<<blocks_for(o.numel), 256, 0, st>>>(o, c, pa, pb);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
