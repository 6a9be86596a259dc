// CUDA kernel of poisson (ops/sampling.cpp): one thread per sample in a grid-stride loop, each
// computing its own Philox words where it uses them (random_transform::PoissonWords) and the
// CPU backend's function of them (random_transform::poisson), so a seed gives the same
// samples on both backends. A negative or NaN rate writes NaN and reports through the
// deferred device error flag (cuda/device_errors.cpp), as the index kernels do.
#include "ops/cuda/common.cuh"
#include "ops/random_transform.hpp"

namespace brrr::kernels {

namespace {

template <class T>
__global__ void poisson_kernel(T* out, const T* rates, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                               int* flag, int code) {
  pdl_begin();
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const double lambda = widen(rates[i]);
    if (!(lambda >= 0)) {
      if (flag) *reinterpret_cast<volatile int*>(flag) = code;
      out[i] = narrow_to<T>(__longlong_as_double(0x7ff8000000000000ll));
      continue;
    }
    random_transform::PoissonWords words(seed, offset, static_cast<std::uint64_t>(i));
    out[i] = narrow_to<T>(random_transform::poisson(lambda, words));
  }
}

}  // namespace

int poisson(const Operand& out, const Operand& rates, std::uint64_t seed, std::uint64_t offset, int* error_flag,
            int error_code, void* stream) {
  const std::int64_t n = out.numel;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>)
      launch_pdl(poisson_kernel<T>, blocks_for(n, 128), 128, 0, s, static_cast<T*>(out.data),
                 static_cast<const T*>(rates.data), n, seed, offset, error_flag, error_code);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
