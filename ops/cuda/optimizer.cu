// CUDA kernel of the fused optimizer updates: a multi-tensor kernel in the manner of
// PyTorch's multi_tensor_apply / apex. Up to 48 tensors' pointers and sizes travel by value in
// the kernel's parameter struct (under the 4 KB kernel-parameter limit); each block owns one
// (tensor, chunk of optimizer_chunk elements) pair, found from the prefix sums of chunk
// counts, and its threads stride through the chunk. So every parameter of a (device, dtype)
// group is updated in ceil(count / 48) launches. Arithmetic in f32 (f32/bf16/f16 tensors) or
// f64 (f64 tensors), with the CPU backend's formulas in the same order
// (ops/cpu/optimizer.cpp); derived coefficients are computed once on the host in double.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {

constexpr int optimizer_max_tensors = 48;
constexpr int optimizer_threads = 256;
constexpr std::int64_t optimizer_chunk = 8192;  // elements per block (32 per thread)

// The tensors of one launch, by value.
struct TensorList {
  void* param[optimizer_max_tensors];
  const void* grad[optimizer_max_tensors];
  void* state1[optimizer_max_tensors];
  void* state2[optimizer_max_tensors];
  void* state3[optimizer_max_tensors];
  std::int64_t numel[optimizer_max_tensors];
  std::int64_t chunk_begin[optimizer_max_tensors + 1];  // first chunk (block) of each tensor
  int count;
};

// Hyperparameters in the compute type A, derived on the host in double (as the CPU does).
template <class A> struct Coeffs {
  A lr, wd, mu, one_minus_damp, decay, b1, b2, one_minus_b1, one_minus_b2, step_size, bc2_sqrt, eps;
  bool weight_decay, momentum, nesterov, first_step, amsgrad, maximize, decoupled;
};

static_assert(sizeof(TensorList) + sizeof(Coeffs<double>) <= 4000, "kernel parameters must stay under 4 KB");

// `device_c`, when set, holds the coefficients in device memory (a captured step whose
// learning rate and bias corrections a replay hook rewrites); else they are `arg`.
template <class T, bool Adam>
__global__ void __launch_bounds__(optimizer_threads)
    multi_tensor_step(TensorList list, Coeffs<compute_t<T>> arg, const Coeffs<compute_t<T>>* device_c) {
  pdl_begin();
  using A = compute_t<T>;
  const Coeffs<A> c = device_c ? *device_c : arg;
  // The tensor whose chunk this block updates: the last t with chunk_begin[t] <= blockIdx.x
  // (tensors without elements own no chunk and are skipped). Uniform across the block.
  const std::int64_t chunk = blockIdx.x;
  int t = 0;
  while (t + 1 < list.count && list.chunk_begin[t + 1] <= chunk) ++t;
  const std::int64_t n = list.numel[t];
  const std::int64_t begin = (chunk - list.chunk_begin[t]) * optimizer_chunk;
  const std::int64_t end = begin + optimizer_chunk < n ? begin + optimizer_chunk : n;

  T* __restrict__ p = static_cast<T*>(list.param[t]);
  const T* __restrict__ gp = static_cast<const T*>(list.grad[t]);
  T* __restrict__ s1 = static_cast<T*>(list.state1[t]);
  T* __restrict__ s2 = static_cast<T*>(list.state2[t]);
  T* __restrict__ s3 = static_cast<T*>(list.state3[t]);

  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    A g = load(gp[i]);
    A x = load(p[i]);
    if (c.maximize) g = -g;
    if constexpr (!Adam) {
      if (c.weight_decay) g = g + c.wd * x;
      if (c.momentum) {
        A b = c.first_step ? g : c.mu * load(s1[i]) + c.one_minus_damp * g;
        s1[i] = narrow_to<T>(b);
        g = c.nesterov ? g + c.mu * b : b;
      }
      p[i] = narrow_to<T>(x - c.lr * g);
    } else {
      if (c.decoupled) x = x * c.decay;
      else if (c.weight_decay) g = g + c.wd * x;
      A m = c.b1 * load(s1[i]) + c.one_minus_b1 * g;
      A v = c.b2 * load(s2[i]) + c.one_minus_b2 * (g * g);
      s1[i] = narrow_to<T>(m);
      s2[i] = narrow_to<T>(v);
      if (c.amsgrad) {
        A vm = load(s3[i]);
        v = (vm > v || vm != vm) ? vm : v;  // NaN in either propagates (torch.maximum)
        s3[i] = narrow_to<T>(v);
      }
      A root;
      if constexpr (std::is_same_v<A, float>) root = sqrtf(v);
      else root = ::sqrt(v);
      A denom = root / c.bc2_sqrt + c.eps;
      p[i] = narrow_to<T>(x - c.step_size * (m / denom));
    }
  }
}

template <class A> Coeffs<A> coeffs_of(const OptimizerStep& h) {
  Coeffs<A> c;
  c.lr = static_cast<A>(h.lr);
  c.wd = static_cast<A>(h.weight_decay);
  c.mu = static_cast<A>(h.momentum);
  c.one_minus_damp = static_cast<A>(1.0 - h.dampening);
  c.decay = static_cast<A>(1.0 - h.lr * h.weight_decay);
  c.b1 = static_cast<A>(h.beta1);
  c.b2 = static_cast<A>(h.beta2);
  c.one_minus_b1 = static_cast<A>(1.0 - h.beta1);
  c.one_minus_b2 = static_cast<A>(1.0 - h.beta2);
  c.step_size = static_cast<A>(h.lr / h.bias_correction1);
  c.bc2_sqrt = static_cast<A>(std::sqrt(h.bias_correction2));
  c.eps = static_cast<A>(h.eps);
  c.weight_decay = h.weight_decay != 0;
  c.momentum = h.momentum != 0;
  c.nesterov = h.nesterov;
  c.first_step = h.first_step;
  c.amsgrad = h.amsgrad;
  c.maximize = h.maximize;
  c.decoupled = h.kind == OptimizerKind::adamw;
  return c;
}

template <class T> int launch_all(const OptimizerStep& h, cudaStream_t stream) {
  using A = compute_t<T>;
  const Coeffs<A> c = coeffs_of<A>(h);
  const std::size_t count = h.params.size();
  std::size_t k = 0;
  while (k < count) {
    TensorList list{};
    std::int64_t chunks = 0;
    int m = 0;
    for (; k < count && m < optimizer_max_tensors; ++k) {
      if (h.numels[k] <= 0) continue;  // nothing to update
      list.param[m] = h.params[k];
      list.grad[m] = h.grads[k];
      list.state1[m] = h.state1[k];
      list.state2[m] = h.state2[k];
      list.state3[m] = h.state3[k];
      list.numel[m] = h.numels[k];
      list.chunk_begin[m] = chunks;
      chunks += (h.numels[k] + optimizer_chunk - 1) / optimizer_chunk;
      ++m;
    }
    if (m == 0) break;
    list.chunk_begin[m] = chunks;
    list.count = m;
    if (chunks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    const dim3 grid(static_cast<unsigned>(chunks));
    auto* dc = static_cast<const Coeffs<A>*>(h.device_coeffs);
    if (h.kind == OptimizerKind::sgd)
      launch_pdl(multi_tensor_step<T, false>, grid, optimizer_threads, 0, stream, list, c, dc);
    else
      launch_pdl(multi_tensor_step<T, true>, grid, optimizer_threads, 0, stream, list, c, dc);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return static_cast<int>(cudaSuccess);
}

template <class A>
__global__ void store_coeffs(Coeffs<A> c, Coeffs<A>* dst) {
  pdl_begin();
  *dst = c;
}

}  // namespace

std::size_t optimizer_coeffs_bytes() { return sizeof(Coeffs<double>) > sizeof(Coeffs<float>) ? sizeof(Coeffs<double>) : sizeof(Coeffs<float>); }

int optimizer_write_coeffs(const OptimizerStep& step, void* dst, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(step.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using A = compute_t<T>;
      launch_pdl(store_coeffs<A>, 1, 1, 0, s, coeffs_of<A>(step), static_cast<Coeffs<A>*>(dst));
      status = static_cast<int>(cudaGetLastError());
    }
  });
  return status;
}

int optimizer_step(const OptimizerStep& step, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);  // integer dtypes have no update
  dispatch(step.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) status = launch_all<T>(step, s);
  });
  return status;
}

}  // namespace brrr::kernels
