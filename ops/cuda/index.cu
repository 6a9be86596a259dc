// CUDA kernels of the indexing ops: gather and scatter_add (the kernels behind gather,
// scatter_add, index_select, embedding and one_hot; ops/index.cpp).
//  - gather: one thread per output element in a grid-stride loop; 64-bit offsets; elements
//    moved as raw 1/2/4/8-byte words (no conversion). Whole-row gathers (index_select along
//    dim 0 of a matrix, embedding) take up to a warp per row instead, in 16-byte words where
//    aligned.
//  - scatter_add, default: one thread per source element, atomicAdd into the destination
//    (native float/double/half/bfloat16/int32/int64 atomics on sm_90).
//  - scatter_add, deterministic: cub::DeviceRadixSort of (destination, position) pairs (a
//    stable sort: equal destinations stay in position order), then one thread per distinct
//    destination sums its sources sequentially in position order, rounding to the element
//    type after every addition like the CPU loop. Reproducible to the bit, and equal to the
//    CPU backend's result for f32/f64/bf16/f16.
//  - scatter_reduce (assign, prod, amax, amin): one thread per source element; assign
//    stores, the others replace the destination by combine(destination, source) with a
//    compare-and-swap loop on its aligned word (ops/scatter_math.hpp).
// Out-of-range indices never read or write outside the operands: they are clamped into the
// valid range and reported through the deferred device error flag (cuda/device_errors.cpp):
// a plain store of the op's code into mapped host memory, read by the host after its next
// sync. (A plain store rather than atomicExch: any writer's code is a correct report, and
// system-scope atomics on mapped memory are not guaranteed over every host link.)
#include <cub/device/device_radix_sort.cuh>

#include <cstring>

#include "ops/cuda/common.cuh"
#include "ops/scatter_math.hpp"

namespace brrr::kernels {

namespace {

constexpr int threads = 256;

std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

__device__ __forceinline__ void report(int* flag, int code) {
  if (flag) *reinterpret_cast<volatile int*>(flag) = code;
}

// An index value clamped into [0, size): `size` > 0 is guaranteed by the launchers.
__device__ __forceinline__ std::int64_t checked_index(std::int64_t k, std::int64_t size, int* flag, int code) {
  if (k < 0 || k >= size) {
    report(flag, code);
    k = k < 0 ? 0 : size - 1;
  }
  return k;
}

// ---- gather ----

template <class E, class I>
__global__ void gather_kernel(Operand out, Operand in, int dim, Operand index, int* flag, int code) {
  pdl_begin();
  E* o = static_cast<E*>(out.data);
  const E* x = static_cast<const E*>(in.data);
  const I* ix = static_cast<const I*>(index.data);
  const std::int64_t n = out.numel;
  const std::int64_t size = in.sizes[dim];
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    std::int64_t r = i, oo = 0, oi = 0, ox = 0;
    for (int d = out.ndim - 1; d >= 0; --d) {
      const std::int64_t c = r % out.sizes[d];
      r /= out.sizes[d];
      oo += c * out.strides[d];
      oi += c * index.strides[d];
      if (d != dim) ox += c * in.strides[d];
    }
    const std::int64_t k = checked_index(static_cast<std::int64_t>(ix[oi]), size, flag, code);
    o[oo] = x[ox + k * in.strides[dim]];
  }
}

// Whole rows: out [n, C] contiguous, index [n, C] constant along its rows (stride 0: the
// expanded index of index_select(x, 0, i) and embedding), in [V, C] with contiguous rows. A
// group of `lanes` threads (a power of two <= 32, about the row's words, so narrow rows keep
// the warp busy) per row reads its index once and copies the row in W-byte words (16 where
// every row start is aligned) instead of an offset computation per element.
template <class W, class I>
__global__ void gather_rows_kernel(char* out, const char* in, std::int64_t in_row_bytes, std::int64_t n,
                                   std::int64_t size, const I* ix, std::int64_t ix_stride, std::int64_t words,
                                   int lanes, int* flag, int code) {
  pdl_begin();
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const std::int64_t groups = std::int64_t(gridDim.x) * (blockDim.x / lanes);
  for (std::int64_t r = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / lanes; r < n; r += groups) {
    const std::int64_t k = checked_index(static_cast<std::int64_t>(ix[r * ix_stride]), size, flag, code);
    const W* src = reinterpret_cast<const W*>(in + k * in_row_bytes);
    W* dst = reinterpret_cast<W*>(out) + r * words;
    for (std::int64_t w = lane; w < words; w += lanes) dst[w] = src[w];
  }
}

// ---- scatter_add with atomics ----

// Element offsets of position i (row-major over index's shape) in index, in src, and in out
// without the dim coordinate (which the index value gives).
struct ScatterAt {
  std::int64_t index = 0, src = 0, out = 0;
};
__device__ __forceinline__ ScatterAt scatter_at(const Operand& out, int dim, const Operand& index, const Operand& src,
                                                std::int64_t i) {
  ScatterAt a;
  for (int d = index.ndim - 1; d >= 0; --d) {
    const std::int64_t c = i % index.sizes[d];
    i /= index.sizes[d];
    a.index += c * index.strides[d];
    a.src += c * src.strides[d];
    if (d != dim) a.out += c * out.strides[d];
  }
  return a;
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(std::int32_t* p, std::int32_t v) { atomicAdd(reinterpret_cast<int*>(p), v); }
__device__ __forceinline__ void atomic_add(std::int64_t* p, std::int64_t v) {
  // Two's complement: adding the unsigned image is adding the signed value (mod 2^64).
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <class T, class I>
__global__ void scatter_atomic_kernel(Operand out, int dim, Operand index, Operand src, int* flag, int code) {
  pdl_begin();
  T* o = static_cast<T*>(out.data);
  const T* s = static_cast<const T*>(src.data);
  const I* ix = static_cast<const I*>(index.data);
  const std::int64_t n = index.numel;
  const std::int64_t size = out.sizes[dim];
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const ScatterAt a = scatter_at(out, dim, index, src, i);
    const std::int64_t k = checked_index(static_cast<std::int64_t>(ix[a.index]), size, flag, code);
    atomic_add(o + a.out + k * out.strides[dim], s[a.src]);
  }
}

// ---- scatter_reduce ----

template <std::size_t N> struct Bits;
template <> struct Bits<1> { using type = std::uint8_t; };
template <> struct Bits<2> { using type = std::uint16_t; };
template <> struct Bits<4> { using type = std::uint32_t; };
template <> struct Bits<8> { using type = unsigned long long; };

// *p = f(*p), atomically: a compare-and-swap loop on the aligned word that holds the element
// (for 1- and 2-byte elements the 32-bit word around it: the neighbours are written back with
// the bits read, and a concurrent change to them fails the swap, which is then retried).
// Storage is at least 256-byte aligned and allocated in whole 512-byte blocks, so the word
// never leaves the allocation.
template <class T, class F> __device__ void atomic_update(T* p, F f) {
  using B = typename Bits<sizeof(T)>::type;
  if constexpr (sizeof(T) == 8) {
    auto* w = reinterpret_cast<unsigned long long*>(p);
    unsigned long long old = *w, assumed;
    do {
      assumed = old;
      T cur;
      memcpy(&cur, &assumed, sizeof(T));
      const T next = f(cur);
      unsigned long long bits;
      memcpy(&bits, &next, sizeof(T));
      if (bits == assumed) return;
      old = atomicCAS(w, assumed, bits);
    } while (old != assumed);
  } else {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    auto* w = reinterpret_cast<unsigned*>(addr & ~std::uintptr_t(3));
    const unsigned shift = static_cast<unsigned>(addr & 3) * 8;
    constexpr unsigned mask = sizeof(T) == 4 ? 0xffffffffu : sizeof(T) == 2 ? 0xffffu : 0xffu;
    unsigned old = *w, assumed;
    do {
      assumed = old;
      const B cur_bits = static_cast<B>((assumed >> shift) & mask);
      T cur;
      memcpy(&cur, &cur_bits, sizeof(T));
      const T next = f(cur);
      B next_bits;
      memcpy(&next_bits, &next, sizeof(T));
      const unsigned updated = (assumed & ~(mask << shift)) | (static_cast<unsigned>(next_bits) << shift);
      if (updated == assumed) return;
      old = atomicCAS(w, assumed, updated);
    } while (old != assumed);
  }
}

template <ScatterOp OP, class T, class I>
__global__ void scatter_reduce_kernel(Operand out, int dim, Operand index, Operand src, int* flag, int code) {
  pdl_begin();
  T* o = static_cast<T*>(out.data);
  const T* s = static_cast<const T*>(src.data);
  const I* ix = static_cast<const I*>(index.data);
  const std::int64_t n = index.numel;
  const std::int64_t size = out.sizes[dim];
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const ScatterAt a = scatter_at(out, dim, index, src, i);
    const std::int64_t k = checked_index(static_cast<std::int64_t>(ix[a.index]), size, flag, code);
    T* p = o + a.out + k * out.strides[dim];
    const T v = s[a.src];
    if constexpr (OP == ScatterOp::assign) {
      *p = v;
    } else {
      atomic_update(p, [v](T cur) { return narrow_to<T>(::brrr::scatter_math::combine<OP>(load(cur), load(v))); });
    }
  }
}

// ---- scatter_add in a fixed order ----

// keys[p] = row-major linear index (in out's shape) of the destination of position p;
// vals[p] = p.
template <class K, class I>
__global__ void scatter_keys_kernel(Operand out, int dim, Operand index, K* keys, K* vals, int* flag, int code) {
  pdl_begin();
  const I* ix = static_cast<const I*>(index.data);
  const std::int64_t n = index.numel;
  const std::int64_t size = out.sizes[dim];
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    std::int64_t r = i, oi = 0, key = 0, mult = 1, dim_mult = 1;
    for (int d = index.ndim - 1; d >= 0; --d) {
      const std::int64_t c = r % index.sizes[d];
      r /= index.sizes[d];
      oi += c * index.strides[d];
      if (d != dim) key += c * mult;
      else dim_mult = mult;
      mult *= out.sizes[d];
    }
    const std::int64_t k = checked_index(static_cast<std::int64_t>(ix[oi]), size, flag, code);
    keys[i] = static_cast<K>(key + k * dim_mult);
    vals[i] = static_cast<K>(i);
  }
}

// One thread per run of equal keys (found at its first element): out[key] += each source
// of the run in position order, rounded to T after every addition (the CPU's loop).
template <class T, class K>
__global__ void scatter_segments_kernel(Operand out, Operand src, const K* keys, const K* vals, std::int64_t n) {
  pdl_begin();
  T* o = static_cast<T*>(out.data);
  const T* s = static_cast<const T*>(src.data);
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const K key = keys[i];
    if (i > 0 && keys[i - 1] == key) continue;  // not the head of its run
    T* dst = o + offset_of(out, static_cast<std::int64_t>(key));
    auto acc = load_acc(*dst);  // integers: exact in int64, then narrowed
    for (std::int64_t j = i; j < n && keys[j] == key; ++j) {
      const T v = s[offset_of(src, static_cast<std::int64_t>(vals[j]))];
      acc = load_acc(narrow_to<T>(acc + load_acc(v)));
    }
    *dst = narrow_to<T>(acc);
  }
}

// Which key type a sorted scatter uses, and how many key bits the radix sort looks at.
struct SortPlan {
  bool wide = false;  // 64-bit keys and positions (else 32-bit)
  int end_bit = 1;
  std::int64_t n = 0;
};

SortPlan sort_plan(const Operand& out, const Operand& index) {
  SortPlan p;
  p.n = index.numel;
  const std::uint64_t max_key = out.numel > 0 ? static_cast<std::uint64_t>(out.numel - 1) : 0;
  const std::uint64_t max_pos = p.n > 0 ? static_cast<std::uint64_t>(p.n - 1) : 0;
  p.wide = max_key > 0xffffffffull || max_pos > 0xffffffffull;
  int bits = 0;
  while (bits < 64 && (max_key >> bits) != 0) ++bits;
  p.end_bit = bits > 0 ? bits : 1;
  return p;
}

template <class K> std::size_t cub_sort_bytes(const SortPlan& p) {
  std::size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
                                  static_cast<const K*>(nullptr), static_cast<K*>(nullptr), p.n, 0, p.end_bit);
  return bytes > 0 ? bytes : 1;
}

template <class K> std::size_t sorted_bytes(const SortPlan& p) {
  return 4 * align_up(static_cast<std::size_t>(p.n) * sizeof(K)) + cub_sort_bytes<K>(p);
}

bool same_sizes(const Operand& a, const Operand& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.sizes[d] != b.sizes[d]) return false;
  return true;
}

bool valid_index_type(DType t) { return t == DType::i32 || t == DType::i64; }

template <class F> void with_index_type(DType t, F&& f) {
  if (t == DType::i32) f(std::int32_t{});
  else f(std::int64_t{});
}

// Operands scatter_add accepts: index and src of one shape, out of their ndim, a non-empty
// dim when there is anything to add, no bool.
bool valid_scatter(const Operand& out, int dim, const Operand& index, const Operand& src) {
  return valid_index_type(index.dtype) && same_sizes(index, src) && out.ndim == index.ndim && dim >= 0 &&
         dim < (out.ndim > 0 ? out.ndim : 1) && out.dtype == src.dtype && out.dtype != DType::boolean &&
         (index.numel == 0 || (out.ndim > 0 && out.sizes[dim] > 0));
}

template <class K, class T, class I>
cudaError_t run_sorted(const SortPlan& p, const Operand& out, int dim, const Operand& index, const Operand& src,
                       void* workspace, int* flag, int code, cudaStream_t st) {
  const std::size_t slot = align_up(static_cast<std::size_t>(p.n) * sizeof(K));
  char* w = static_cast<char*>(workspace);
  K* keys_in = reinterpret_cast<K*>(w);
  K* keys_out = reinterpret_cast<K*>(w + slot);
  K* vals_in = reinterpret_cast<K*>(w + 2 * slot);
  K* vals_out = reinterpret_cast<K*>(w + 3 * slot);
  void* temp = w + 4 * slot;
  std::size_t temp_bytes = cub_sort_bytes<K>(p);
  const unsigned blocks = blocks_for(p.n, threads);
  launch_pdl(scatter_keys_kernel<K, I>, blocks, threads, 0, st, out, dim, index, keys_in, vals_in, flag, code);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out, p.n, 0, p.end_bit, st);
  if (e != cudaSuccess) return e;
  launch_pdl(scatter_segments_kernel<T, K>, blocks, threads, 0, st, out, src, keys_out, vals_out, p.n);
  return cudaGetLastError();
}

}  // namespace

int gather(const Operand& out, const Operand& in, int dim, const Operand& index, int* error_flag, int error_code,
           void* stream) {
  if (out.numel == 0) return static_cast<int>(cudaSuccess);
  if (!valid_index_type(index.dtype) || !same_sizes(out, index) || in.ndim != out.ndim || dim < 0 ||
      dim >= out.ndim || in.sizes[dim] <= 0 || in.dtype != out.dtype)
    return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned blocks = blocks_for(out.numel, threads);
  const std::size_t item = itemsize(out.dtype);
  const bool rows = dim == 0 && out.ndim == 2 && index.strides[1] == 0 && out.strides[1] == 1 &&
                    out.strides[0] == out.sizes[1] && in.strides[1] == 1;
  if (rows) {
    const auto row_bytes = static_cast<std::int64_t>(out.sizes[1] * item);
    const std::int64_t in_row_bytes = in.strides[0] * static_cast<std::int64_t>(item);
    const bool aligned16 = row_bytes % 16 == 0 && in_row_bytes % 16 == 0 &&
                           reinterpret_cast<std::uintptr_t>(out.data) % 16 == 0 &&
                           reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0;
    with_index_type(index.dtype, [&](auto i) {
      using I = decltype(i);
      const auto copy = [&]<class W>(W*) {
        const std::int64_t words = row_bytes / static_cast<std::int64_t>(sizeof(W));
        int lanes = 1;
        while (lanes < 32 && lanes < words) lanes *= 2;
        launch_pdl(gather_rows_kernel<W, I>, blocks_for(out.sizes[0] * lanes, threads), threads, 0, st,
                   static_cast<char*>(out.data), static_cast<const char*>(in.data), in_row_bytes, out.sizes[0],
                   in.sizes[0], static_cast<const I*>(index.data), index.strides[0], words, lanes, error_flag,
                   error_code);
      };
      if (aligned16) copy(static_cast<uint4*>(nullptr));
      else if (item == 8) copy(static_cast<std::uint64_t*>(nullptr));
      else if (item == 4) copy(static_cast<std::uint32_t*>(nullptr));
      else if (item == 2) copy(static_cast<std::uint16_t*>(nullptr));
      else copy(static_cast<std::uint8_t*>(nullptr));
    });
    return static_cast<int>(cudaGetLastError());
  }
  with_index_type(index.dtype, [&](auto i) {
    using I = decltype(i);
    switch (item) {
      case 1:
        launch_pdl(gather_kernel<std::uint8_t, I>, blocks, threads, 0, st, out, in, dim, index, error_flag, error_code);
        break;
      case 2:
        launch_pdl(gather_kernel<std::uint16_t, I>, blocks, threads, 0, st, out, in, dim, index, error_flag,
                   error_code);
        break;
      case 4:
        launch_pdl(gather_kernel<std::uint32_t, I>, blocks, threads, 0, st, out, in, dim, index, error_flag,
                   error_code);
        break;
      default:
        launch_pdl(gather_kernel<std::uint64_t, I>, blocks, threads, 0, st, out, in, dim, index, error_flag,
                   error_code);
        break;
    }
  });
  return static_cast<int>(cudaGetLastError());
}

int scatter_add_atomic(const Operand& out, int dim, const Operand& index, const Operand& src, int* error_flag,
                       int error_code, void* stream) {
  if (index.numel == 0) return static_cast<int>(cudaSuccess);
  if (!valid_scatter(out, dim, index, src)) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned blocks = blocks_for(index.numel, threads);
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (!is_bool_storage<T>) {
      with_index_type(index.dtype, [&](auto i) {
        using I = decltype(i);
        launch_pdl(scatter_atomic_kernel<T, I>, blocks, threads, 0, st, out, dim, index, src, error_flag, error_code);
      });
    }
  });
  return static_cast<int>(cudaGetLastError());
}

int scatter_reduce(ScatterOp op, const Operand& out, int dim, const Operand& index, const Operand& src,
                   int* error_flag, int error_code, void* stream) {
  if (index.numel == 0) return static_cast<int>(cudaSuccess);
  if (!valid_index_type(index.dtype) || !same_sizes(index, src) || out.ndim != index.ndim || dim < 0 ||
      dim >= out.ndim || out.dtype != src.dtype || out.sizes[dim] <= 0)
    return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned blocks = blocks_for(index.numel, threads);
  with_op(op, [&]<ScatterOp OP>() {
    dispatch(out.dtype, [&]<class T>(T*) {
      with_index_type(index.dtype, [&](auto i) {
        using I = decltype(i);
        launch_pdl(scatter_reduce_kernel<OP, T, I>, blocks, threads, 0, st, out, dim, index, src, error_flag,
                   error_code);
      });
    });
  });
  return static_cast<int>(cudaGetLastError());
}

std::size_t scatter_add_sorted_workspace_bytes(const Operand& out, const Operand& index) {
  if (index.numel == 0) return 0;
  SortPlan p = sort_plan(out, index);
  return p.wide ? sorted_bytes<std::uint64_t>(p) : sorted_bytes<std::uint32_t>(p);
}

int scatter_add_sorted(const Operand& out, int dim, const Operand& index, const Operand& src, void* workspace,
                       std::size_t workspace_bytes, int* error_flag, int error_code, void* stream) {
  if (index.numel == 0) return static_cast<int>(cudaSuccess);
  if (!valid_scatter(out, dim, index, src) || !workspace) return static_cast<int>(cudaErrorInvalidValue);
  SortPlan p = sort_plan(out, index);
  if (workspace_bytes < (p.wide ? sorted_bytes<std::uint64_t>(p) : sorted_bytes<std::uint32_t>(p)))
    return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (!is_bool_storage<T>) {
      with_index_type(index.dtype, [&](auto i) {
        using I = decltype(i);
        e = p.wide ? run_sorted<std::uint64_t, T, I>(p, out, dim, index, src, workspace, error_flag, error_code, st)
                   : run_sorted<std::uint32_t, T, I>(p, out, dim, index, src, workspace, error_flag, error_code, st);
      });
    }
  });
  return static_cast<int>(e);
}

}  // namespace brrr::kernels
