// CUDA kernels of the elementwise ops. Math: ops/elementwise_math.hpp (shared with the CPU).
// Layout handling: dims contiguous in every operand are merged on the host; fully
// contiguous operands with 16-byte aligned pointers take a vectorised path (16-byte loads
// and stores per thread); binary ops whose innermost dim is contiguous or broadcast take a
// row path (offsets once per row); everything else computes each operand's offset from the
// row-major index with 64-bit arithmetic, in a grid-stride loop. add/sub/mul/div of f32 with
// bf16/f16 read each operand in its own dtype (mixed_float_binary): no cast kernel first.
#include "ops/cuda/common.cuh"
#include "ops/cuda/pack.cuh"
#include "ops/elementwise_math.hpp"

namespace brrr::kernels {

namespace {
namespace ew = ::brrr::elementwise;

template <int N> bool vectorizable(Operand* (&ops)[N]) {
  for (int k = 0; k < N; ++k) {
    const Operand& s = *ops[k];
    if (s.ndim > 1 || (s.ndim == 1 && s.strides[0] != 1)) return false;
    if (reinterpret_cast<std::uintptr_t>(s.data) % 16 != 0) return false;
  }
  return true;
}

// Elements per thread on the vector path: 16 bytes of the widest operand type.
template <class In, class Out> constexpr int vec_width() {
  constexpr int w = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  return w < 1 ? 1 : w;
}

// ---- kernels ----

template <class F, class O, class I, int V>
__global__ void map1_vec(O* out, const I* in, std::int64_t n, F f) {
  pdl_begin();
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
__global__ void map1_strided(Operand out, Operand in, F f) {
  pdl_begin();
  O* o = static_cast<O*>(out.data);
  const I* x = static_cast<const I*>(in.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    o[offset_of(out, i)] = f(x[offset_of(in, i)]);
}

// Binary kernels read a as IA and b as IB: one dtype, or f32 with bf16/f16 (mixed_float_binary).
template <class F, class O, class IA, class IB, int V>
__global__ void map2_vec(O* out, const IA* a, const IB* b, std::int64_t n, F f) {
  pdl_begin();
  std::int64_t stride = std::int64_t(blockDim.x) * gridDim.x * V;
  std::int64_t i = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) * V;
  for (; i + V <= n; i += stride) {
    Pack<IA, V> pa = *reinterpret_cast<const Pack<IA, V>*>(a + i);
    Pack<IB, V> pb = *reinterpret_cast<const Pack<IB, V>*>(b + i);
    Pack<O, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = f(pa.v[j], pb.v[j]);
    *reinterpret_cast<Pack<O, V>*>(out + i) = r;
  }
  if (i < n)
    for (; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <class F, class O, class IA, class IB>
__global__ void map2_strided(Operand out, Operand a, Operand b, F f) {
  pdl_begin();
  O* o = static_cast<O*>(out.data);
  const IA* pa = static_cast<const IA*>(a.data);
  const IB* pb = static_cast<const IB*>(b.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    o[offset_of(out, i)] = f(pa[offset_of(a, i)], pb[offset_of(b, i)]);
}

// Rows: the innermost dim is contiguous in out and, in a and b, contiguous or broadcast
// (stride 0: a per-row value, e.g. a bias [1, C, 1, 1] added to [N, C, H, W]). A block takes
// a segment of `seg` elements of a row at a time (segs of them a row: few long rows, e.g. a
// position embedding [T, C] added to [B, T, C], which coalesces to B rows of T C, still fill
// the GPU): the operands' row offsets are computed once per segment, then the threads walk it
// (V elements at a time with 16-byte accesses where `packed`; seg is a multiple of V).
template <class F, class O, class IA, class IB, int V>
__global__ void map2_rows(Operand out, Operand a, Operand b, std::int64_t rows, std::int64_t inner, std::int64_t seg,
                          std::int64_t segs, bool packed, F f) {
  pdl_begin();
  const int last = out.ndim - 1;
  const bool a_row = a.strides[last] == 0, b_row = b.strides[last] == 0;
  for (std::int64_t blk = blockIdx.x; blk < rows * segs; blk += gridDim.x) {
    const std::int64_t r = blk / segs, i0 = (blk % segs) * seg;
    const std::int64_t i1 = i0 + seg < inner ? i0 + seg : inner;
    const std::int64_t base = r * inner;
    O* o = static_cast<O*>(out.data) + offset_of(out, base);
    const IA* pa = static_cast<const IA*>(a.data) + offset_of(a, base);
    const IB* pb = static_cast<const IB*>(b.data) + offset_of(b, base);
    const IA a0 = a_row ? pa[0] : IA();
    const IB b0 = b_row ? pb[0] : IB();
    if (packed) {
      for (std::int64_t i = i0 + std::int64_t(threadIdx.x) * V; i < i1; i += std::int64_t(blockDim.x) * V) {
        Pack<IA, V> va;
        Pack<IB, V> vb;
        if (a_row) {
#pragma unroll
          for (int j = 0; j < V; ++j) va.v[j] = a0;
        } else {
          va = *reinterpret_cast<const Pack<IA, V>*>(pa + i);
        }
        if (b_row) {
#pragma unroll
          for (int j = 0; j < V; ++j) vb.v[j] = b0;
        } else {
          vb = *reinterpret_cast<const Pack<IB, V>*>(pb + i);
        }
        Pack<O, V> vr;
#pragma unroll
        for (int j = 0; j < V; ++j) vr.v[j] = f(va.v[j], vb.v[j]);
        *reinterpret_cast<Pack<O, V>*>(o + i) = vr;
      }
    } else {
      for (std::int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
        o[i] = f(a_row ? a0 : pa[i], b_row ? b0 : pb[i]);
    }
  }
}

template <class T>
__global__ void where_strided(Operand out, Operand cond, Operand a, Operand b) {
  pdl_begin();
  T* o = static_cast<T*>(out.data);
  const std::uint8_t* c = static_cast<const std::uint8_t*>(cond.data);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    o[offset_of(out, i)] = c[offset_of(cond, i)] ? pa[offset_of(a, i)] : pb[offset_of(b, i)];
}

// ---- functors ----

template <UnaryOp OP, class T> struct UnaryF {
  compute_t<T> lo, hi;
  __device__ __forceinline__ T operator()(T x) const { return narrow_to<T>(ew::unary<OP, compute_t<T>>(load(x), lo, hi)); }
};

// Integer rounding divisions store `code` into the deferred error flag on a zero divisor.
template <BinaryOp OP, class A> __device__ __forceinline__ void check_divisor(A b, int* flag, int code) {
  if constexpr (is_rounding_division(OP) && std::is_integral_v<A>)
    if (b == 0 && flag) *reinterpret_cast<volatile int*>(flag) = code;
}

template <BinaryOp OP, class T, class O> struct BinaryF {
  int* flag;
  int code;
  __device__ __forceinline__ O operator()(T a, T b) const {
    check_divisor<OP>(load(b), flag, code);
    auto r = ew::binary<OP, compute_t<T>>(load(a), load(b));
    if constexpr (is_comparison(OP)) return static_cast<O>(r != 0);
    else return narrow_to<O>(r);
  }
};

// f32 with bf16/f16 (mixed_float_binary): each operand widened to f32 as it is read.
template <BinaryOp OP, class IA, class IB> struct MixedBinaryF {
  __device__ __forceinline__ float operator()(IA a, IB b) const {
    return ew::binary<OP, float>(static_cast<float>(load(a)), static_cast<float>(load(b)));
  }
};

template <BinaryOp OP, class T, class O> struct BinaryScalarF {
  compute_t<T> s;
  bool scalar_first;
  int* flag;
  int code;
  __device__ __forceinline__ O operator()(T a) const {
    auto x = load(a);
    check_divisor<OP>(scalar_first ? x : s, flag, code);
    auto r = scalar_first ? ew::binary<OP, compute_t<T>>(s, x) : ew::binary<OP, compute_t<T>>(x, s);
    if constexpr (is_comparison(OP)) return static_cast<O>(r != 0);
    else return narrow_to<O>(r);
  }
};

// ---- launchers ----

// The row length for map2_rows (0: not that layout): after coalescing, at least two dims, the
// innermost contiguous in out and contiguous or broadcast in the others, and long enough
// (>= 64 elements) that a row keeps a block's threads busy.
template <int N> std::int64_t rows_inner(Operand* (&ops)[N]) {
  const Operand& out = *ops[0];
  if (out.ndim < 2 || out.strides[out.ndim - 1] != 1 || out.sizes[out.ndim - 1] < 64) return 0;
  for (int k = 1; k < N; ++k) {
    const std::int64_t st = ops[k]->strides[out.ndim - 1];
    if (st != 0 && st != 1) return 0;
  }
  return out.sizes[out.ndim - 1];
}

template <class O, class I, class F> void launch1(Operand out, Operand in, F f, cudaStream_t s) {
  Operand* ops[2] = {&out, &in};
  coalesce(ops);
  if (vectorizable(ops)) {
    constexpr int V = vec_width<I, O>();
    std::int64_t threads_needed = (out.numel + V - 1) / V;
    launch_pdl(map1_vec<F, O, I, V>, blocks_for(threads_needed), 256, 0, s, static_cast<O*>(out.data),
               static_cast<const I*>(in.data), out.numel, f);
  } else {
    launch_pdl(map1_strided<F, O, I>, blocks_for(out.numel), 256, 0, s, out, in, f);
  }
}

template <class O, class IA, class IB = IA, class F>
void launch2(Operand out, Operand a, Operand b, F f, cudaStream_t s) {
  Operand* ops[3] = {&out, &a, &b};
  coalesce(ops);
  using Wide = std::conditional_t<(sizeof(IA) > sizeof(IB)), IA, IB>;
  constexpr int V = vec_width<Wide, O>();  // a pack of each operand is at most 16 bytes
  if (vectorizable(ops)) {
    std::int64_t threads_needed = (out.numel + V - 1) / V;
    launch_pdl(map2_vec<F, O, IA, IB, V>, blocks_for(threads_needed), 256, 0, s, static_cast<O*>(out.data),
               static_cast<const IA*>(a.data), static_cast<const IB*>(b.data), out.numel, f);
  } else if (const std::int64_t inner = rows_inner(ops); inner > 0) {
    const std::int64_t rows = out.numel / inner;
    // Packed accesses when every row starts aligned to its pack in each operand it is read from
    bool packed = inner % V == 0;
    const std::int64_t bytes[3] = {std::int64_t(sizeof(O)), std::int64_t(sizeof(IA)), std::int64_t(sizeof(IB))};
    for (int k = 0; k < 3; ++k) {
      const Operand* op = ops[k];
      if (op->strides[op->ndim - 1] == 0) continue;
      const std::int64_t pack = bytes[k] * V;
      packed = packed && reinterpret_cast<std::uintptr_t>(op->data) % pack == 0;
      for (int d = 0; d + 1 < op->ndim; ++d) packed = packed && (op->strides[d] * bytes[k]) % pack == 0;
    }
    // a block's threads cover a row (up to 256 of them), whole warps; rows split into
    // segments of at least 4 passes of a block when there are fewer than 1024 of them
    const std::int64_t per_row = packed ? inner / V : inner;
    const int threads = static_cast<int>(per_row >= 256 ? 256 : (per_row + 31) / 32 * 32);
    const std::int64_t step = std::int64_t(threads) * (packed ? V : 1);
    std::int64_t segs = rows >= 1024 ? 1 : (1024 + rows - 1) / rows;
    const std::int64_t max_segs = (inner + 4 * step - 1) / (4 * step);
    if (segs > max_segs) segs = max_segs > 0 ? max_segs : 1;
    const std::int64_t seg = ((inner + segs - 1) / segs + V - 1) / V * V;
    segs = (inner + seg - 1) / seg;
    const std::int64_t blocks = rows * segs, grid = blocks < 65535 ? blocks : 65535;
    launch_pdl(map2_rows<F, O, IA, IB, V>, static_cast<unsigned>(grid), threads, 0, s, out, a, b, rows, inner, seg,
               segs, packed, f);
  } else {
    launch_pdl(map2_strided<F, O, IA, IB>, blocks_for(out.numel), 256, 0, s, out, a, b, f);
  }
}

// add/sub/mul/div of f32 with bf16/f16 into f32 (mixed_float_binary; anything else: refused).
template <BinaryOp OP> void launch_mixed(const Operand& out, const Operand& a, const Operand& b, cudaStream_t s) {
  const auto half_case = [&]<class H>(H*) {
    if (a.dtype == DType::f32) launch2<float, float, H>(out, a, b, MixedBinaryF<OP, float, H>{}, s);
    else launch2<float, H, float>(out, a, b, MixedBinaryF<OP, H, float>{}, s);
  };
  const DType h = a.dtype == DType::f32 ? b.dtype : a.dtype;
  if (h == DType::bf16) half_case(static_cast<__nv_bfloat16*>(nullptr));
  else half_case(static_cast<__half*>(nullptr));
}

int mixed_binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b, cudaStream_t s) {
  if (!mixed_float_binary(op, a.dtype, b.dtype) || out.dtype != DType::f32) return static_cast<int>(cudaErrorInvalidValue);
  switch (op) {
    case BinaryOp::add: launch_mixed<BinaryOp::add>(out, a, b, s); break;
    case BinaryOp::sub: launch_mixed<BinaryOp::sub>(out, a, b, s); break;
    case BinaryOp::mul: launch_mixed<BinaryOp::mul>(out, a, b, s); break;
    case BinaryOp::div: launch_mixed<BinaryOp::div>(out, a, b, s); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int unary(UnaryOp op, const Operand& out, const Operand& in, double lo, double hi, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  bool ok = true;
  with_op(op, [&]<UnaryOp OP>() {
    dispatch(out.dtype, [&]<class T>(T*) {
      if constexpr (ew::has_unary_kernel<OP, T>) {
        UnaryF<OP, T> f{ew::clamp_bound<compute_t<T>>(lo, false), ew::clamp_bound<compute_t<T>>(hi, true)};
        launch1<T, T>(out, in, f, s);
      } else {
        ok = false;  // the op layer converts first
      }
    });
  });
  return ok ? static_cast<int>(cudaGetLastError()) : static_cast<int>(cudaErrorInvalidValue);
}

int binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b, int* error_flag, int error_code,
           void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.dtype != b.dtype) return mixed_binary(op, out, a, b, s);
  bool ok = true;
  with_op(op, [&]<BinaryOp OP>() {
    dispatch(a.dtype, [&]<class T>(T*) {
      if constexpr (!ew::has_binary_kernel<OP, T>)
        ok = false;  // the op layer converts first
      else if constexpr (is_comparison(OP))
        launch2<std::uint8_t, T>(out, a, b, BinaryF<OP, T, std::uint8_t>{error_flag, error_code}, s);
      else launch2<T, T>(out, a, b, BinaryF<OP, T, T>{error_flag, error_code}, s);
    });
  });
  return ok ? static_cast<int>(cudaGetLastError()) : static_cast<int>(cudaErrorInvalidValue);
}

int binary_scalar(BinaryOp op, const Operand& out, const Operand& a, double sc, bool scalar_first, int* error_flag,
                  int error_code, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  bool ok = true;
  with_op(op, [&]<BinaryOp OP>() {
    dispatch(a.dtype, [&]<class T>(T*) {
      const compute_t<T> sv = load(narrow_to<T>(sc));  // the scalar as the tensor's dtype holds it
      if constexpr (!ew::has_binary_kernel<OP, T>)
        ok = false;
      else if constexpr (is_comparison(OP))
        launch1<std::uint8_t, T>(out, a, BinaryScalarF<OP, T, std::uint8_t>{sv, scalar_first, error_flag, error_code}, s);
      else
        launch1<T, T>(out, a, BinaryScalarF<OP, T, T>{sv, scalar_first, error_flag, error_code}, s);
    });
  });
  return ok ? static_cast<int>(cudaGetLastError()) : static_cast<int>(cudaErrorInvalidValue);
}

int where(const Operand& out, const Operand& cond, const Operand& a, const Operand& b, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  Operand o = out, c = cond, pa = a, pb = b;
  Operand* ops[4] = {&o, &c, &pa, &pb};
  coalesce(ops);
  dispatch(out.dtype,
           [&]<class T>(T*) { launch_pdl(where_strided<T>, blocks_for(o.numel), 256, 0, st, o, c, pa, pb); });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
