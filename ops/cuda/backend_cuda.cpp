// The CUDA backend's core kernels (fill, copy, arange, random): each launches an ops/cuda
// kernel on the current stream of the operands' device and returns at once; the launch
// status is checked here. Other op families define their CudaBackend members in
// ops/cuda/<family>_launch.cpp.
module;
#include <cuda_runtime.h>
#include <curand.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

static_assert(int(kernels::ScalarType::f32) == int(DType::f32) && int(kernels::ScalarType::f64) == int(DType::f64) &&
              int(kernels::ScalarType::bf16) == int(DType::bf16) && int(kernels::ScalarType::f16) == int(DType::f16) &&
              int(kernels::ScalarType::i32) == int(DType::i32) && int(kernels::ScalarType::i64) == int(DType::i64) &&
              int(kernels::ScalarType::boolean) == int(DType::boolean));
static_assert(kernels::max_dims == max_dims);

kernels::Strided strided(const Operand& o) {
  kernels::Strided s{};
  s.data = o.data;
  s.dtype = static_cast<kernels::ScalarType>(o.dtype);
  s.ndim = o.ndim;
  s.numel = o.numel;
  for (int i = 0; i < o.ndim; ++i) {
    s.sizes[i] = o.sizes[i];
    s.strides[i] = o.strides[i];
  }
  return s;
}

void CudaBackend::fill(const Operand& out, double value) {
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  note_access(*stream, {&out}, {});
  BRRR_CUDA_CHECK(kernels::fill(strided(out), value, stream->handle));
}

void CudaBackend::copy(const Operand& dst, const Operand& src) {
  DeviceGuard g(dst.device);
  StreamPtr stream = current_stream(dst.device);
  note_access(*stream, {&dst}, {&src});
  BRRR_CUDA_CHECK(kernels::copy(strided(dst), strided(src), stream->handle));
}

void CudaBackend::arange(const Operand& out, double start, double step) {
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  note_access(*stream, {&out}, {});
  BRRR_CUDA_CHECK(kernels::arange(strided(out), start, step, stream->handle));
}

namespace {
std::mutex generator_mutex;
curandGenerator_t device_generator(int device) {
  static std::unordered_map<int, curandGenerator_t> generators;
  std::lock_guard lock(generator_mutex);
  auto it = generators.find(device);
  if (it != generators.end()) return it->second;
  curandGenerator_t gen;
  BRRR_CURAND_CHECK(curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  generators[device] = gen;
  return gen;
}
}  // namespace

void CudaBackend::random(const Operand& out, Distribution dist, std::uint64_t seed, std::uint64_t offset,
                         std::int64_t low, std::int64_t high) {
  int dev = out.device;
  DeviceGuard g(dev);
  StreamPtr stream = current_stream(dev);
  note_access(*stream, {&out}, {});
  std::uint64_t n = random_words(dist, out.dtype, out.numel);
  // The words live in a stream-ordered scratch block: released when this scope ends, reused
  // by later work on the same stream only after the transform kernel has read them.
  Storage words = allocate_device(n * sizeof(std::uint32_t), dev, stream);
  curandGenerator_t gen = device_generator(dev);
  BRRR_CURAND_CHECK(curandSetStream(gen, static_cast<cudaStream_t>(stream->handle)));
  BRRR_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(gen, seed));
  BRRR_CURAND_CHECK(curandSetGeneratorOffset(gen, offset));
  BRRR_CURAND_CHECK(curandGenerate(gen, static_cast<std::uint32_t*>(words.data()), n));
  int kind = 0;
  switch (dist) {
    case Distribution::uniform: kind = 0; break;
    case Distribution::normal: kind = 1; break;
    case Distribution::integer: kind = 2; break;
  }
  BRRR_CUDA_CHECK(kernels::random_transform(strided(out), static_cast<const std::uint32_t*>(words.data()), kind, low,
                                            high, stream->handle));
}

Backend& cuda_backend() {
  static auto* b = new CudaBackend;  // never destroyed: tensors may outlive static destruction
  return *b;
}

}  // namespace brrr::backend
