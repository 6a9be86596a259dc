// CUDA kernels over many tensors at once (clip_grad_norm_'s norms and scaling), in the
// manner of the optimizer's multi-tensor kernel (ops/cuda/optimizer.cu): up to 64 tensors'
// pointers and sizes travel by value in the kernel's parameters, each block owns one
// (tensor, chunk of mt_chunk elements) pair found from the prefix sums of chunk counts.
//   - multi_tensor_norm: each block reduces its chunk to one partial value (sum of |x|^p, or
//     max |x|) in the workspace; then one thread per tensor combines its chunks' partials in
//     chunk order. No atomics: every run gives the same bits.
//   - multi_tensor_scale: x *= scale[0] in place, the scale read from device memory (so it
//     may be computed on the device: no host sync).
// Arithmetic in f32 (f64 for f64 tensors).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/row_reduce.cuh"

namespace brrr::kernels {

namespace {

constexpr int mt_max_tensors = 64;
constexpr int mt_threads = 256;
constexpr std::int64_t mt_chunk = 16384;  // elements per block (64 per thread)

struct Chunks {
  void* data[mt_max_tensors];
  std::int64_t numel[mt_max_tensors];
  std::int64_t chunk_begin[mt_max_tensors + 1];  // first chunk (block) of each tensor
  int count;
};
static_assert(sizeof(Chunks) <= 3000, "kernel parameters must stay under 4 KB");

// The tensor whose chunk block `chunk` covers: the last t with chunk_begin[t] <= chunk.
__device__ __forceinline__ int tensor_of(const Chunks& list, std::int64_t chunk) {
  int t = 0;
  while (t + 1 < list.count && list.chunk_begin[t + 1] <= chunk) ++t;
  return t;
}

enum class NormKind { one, two, inf, p };

template <class A> __device__ __forceinline__ A nan_max(A a, A b) {
  return (a != a || b > a || b != b) ? (a != a ? a : b) : a;  // NaN sticks
}

template <class A, NormKind K> __device__ __forceinline__ A norm_term(A v, A p) {
  if constexpr (K == NormKind::two) return v * v;
  else if constexpr (K == NormKind::one || K == NormKind::inf) return v < A(0) ? -v : v;
  else return pow(v < A(0) ? -v : v, p);
}

template <class T, NormKind K>
__global__ void __launch_bounds__(mt_threads) mt_norm_chunks(Chunks list, racc_t<T>* __restrict__ partial, racc_t<T> p) {
  pdl_begin();
  using A = racc_t<T>;
  __shared__ A red[33];
  const std::int64_t chunk = blockIdx.x;
  const int t = tensor_of(list, chunk);
  const std::int64_t n = list.numel[t];
  const std::int64_t begin = (chunk - list.chunk_begin[t]) * mt_chunk;
  const std::int64_t end = begin + mt_chunk < n ? begin + mt_chunk : n;
  const T* x = static_cast<const T*>(list.data[t]);
  A acc = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const A term = norm_term<A, K>(to_acc<A>(x[i]), p);
    acc = K == NormKind::inf ? nan_max(acc, term) : acc + term;
  }
  if constexpr (K == NormKind::inf) {
    // A warp/block max that keeps NaN: reduce (is NaN) and the max separately.
    A nan_flag = acc != acc ? A(1) : A(0);
    nan_flag = block_reduce<A, true>(nan_flag, red);
    acc = block_reduce<A, true>(acc != acc ? A(0) : acc, red);
    if (nan_flag != A(0)) acc = nan_flag * std::numeric_limits<A>::quiet_NaN();
  } else {
    acc = block_reduce<A, false>(acc, red);
  }
  if (threadIdx.x == 0) partial[chunk] = acc;
}

// out[t] = the combination of tensor t's chunk partials, in chunk order (thread t).
template <class A, NormKind K>
__global__ void mt_norm_combine(Chunks list, const A* __restrict__ partial, float* __restrict__ out) {
  pdl_begin();
  const int t = threadIdx.x;
  if (t >= list.count) return;
  A acc = 0;
  for (std::int64_t c = list.chunk_begin[t]; c < list.chunk_begin[t + 1]; ++c)
    acc = K == NormKind::inf ? nan_max(acc, partial[c]) : acc + partial[c];
  out[t] = static_cast<float>(acc);
}

template <class T>
__global__ void __launch_bounds__(mt_threads) mt_scale(Chunks list, const racc_t<T>* __restrict__ scale) {
  pdl_begin();
  using A = racc_t<T>;
  const std::int64_t chunk = blockIdx.x;
  const int t = tensor_of(list, chunk);
  const std::int64_t n = list.numel[t];
  const std::int64_t begin = (chunk - list.chunk_begin[t]) * mt_chunk;
  const std::int64_t end = begin + mt_chunk < n ? begin + mt_chunk : n;
  T* x = static_cast<T*>(list.data[t]);
  const A s = *scale;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = narrow_to<T>(to_acc<A>(x[i]) * s);
}

// Calls f(list, first, chunks) for each group of up to mt_max_tensors tensors (tensors
// first, first + 1, ...; every tensor has elements). Returns the first error.
template <class F> int for_each_group(const MultiTensor& m, F&& f) {
  const std::size_t count = m.data.size();
  std::size_t k = 0;
  while (k < count) {
    Chunks list{};
    const std::size_t first = k;
    std::int64_t chunks = 0;
    int g = 0;
    for (; k < count && g < mt_max_tensors; ++k, ++g) {
      if (m.numels[k] <= 0) return static_cast<int>(cudaErrorInvalidValue);
      list.data[g] = m.data[k];
      list.numel[g] = m.numels[k];
      list.chunk_begin[g] = chunks;
      chunks += (m.numels[k] + mt_chunk - 1) / mt_chunk;
    }
    list.chunk_begin[g] = chunks;
    list.count = g;
    if (chunks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    const int e = f(list, first, chunks);
    if (e != static_cast<int>(cudaSuccess)) return e;
  }
  return static_cast<int>(cudaSuccess);
}

template <class T, NormKind K> int norm_typed(float* out, const MultiTensor& m, double p, void* workspace, cudaStream_t st) {
  using A = racc_t<T>;
  A* partial = static_cast<A*>(workspace);  // the chunks of one group at a time (stream order)
  return for_each_group(m, [&](const Chunks& list, std::size_t first, std::int64_t chunks) {
    launch_pdl(mt_norm_chunks<T, K>, static_cast<unsigned>(chunks), mt_threads, 0, st, list, partial,
               static_cast<A>(p));
    launch_pdl(mt_norm_combine<A, K>, 1, mt_max_tensors, 0, st, list, partial, out + first);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace

std::size_t multi_tensor_norm_workspace_bytes(const MultiTensor& tensors) {
  // One partial value (at most 8 bytes) per chunk of the largest group; all chunks is enough.
  std::int64_t chunks = 0;
  for (std::int64_t n : tensors.numels) chunks += n > 0 ? (n + mt_chunk - 1) / mt_chunk : 0;
  return static_cast<std::size_t>(chunks > 0 ? chunks : 1) * 8;
}

int multi_tensor_norm(void* out, const MultiTensor& tensors, double norm_type, void* workspace, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  auto* o = static_cast<float*>(out);
  dispatch(tensors.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      if (norm_type == 2.0) status = norm_typed<T, NormKind::two>(o, tensors, norm_type, workspace, st);
      else if (norm_type == 1.0) status = norm_typed<T, NormKind::one>(o, tensors, norm_type, workspace, st);
      else if (std::isinf(norm_type)) status = norm_typed<T, NormKind::inf>(o, tensors, norm_type, workspace, st);
      else status = norm_typed<T, NormKind::p>(o, tensors, norm_type, workspace, st);
    }
  });
  return status;
}

int multi_tensor_scale(const MultiTensor& tensors, const void* scale, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(tensors.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using A = racc_t<T>;
      status = for_each_group(tensors, [&](const Chunks& list, std::size_t, std::int64_t chunks) {
        launch_pdl(mt_scale<T>, static_cast<unsigned>(chunks), mt_threads, 0, st, list, static_cast<const A*>(scale));
        return static_cast<int>(cudaGetLastError());
      });
    }
  });
  return status;
}

}  // namespace brrr::kernels
