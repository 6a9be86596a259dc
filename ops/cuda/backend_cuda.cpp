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

void CudaBackend::fill(const Operand& out, double value) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::fill(out, value, current_stream(out.device)->handle));
}

void CudaBackend::copy(const Operand& dst, const Operand& src) {
  DeviceGuard g(dst.device);
  BRRR_CUDA_CHECK(kernels::copy(dst, src, current_stream(dst.device)->handle));
}

void CudaBackend::arange(const Operand& out, double start, double step) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::arange(out, start, step, current_stream(out.device)->handle));
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
  std::uint64_t n = random_words(dist, out.dtype, out.numel);
  // The words live in a stream-ordered scratch block: released when this scope ends, reused
  // by later work on the same stream only after the transform kernel has read them.
  Storage words = allocate_device(n * sizeof(std::uint32_t), dev, stream);
  curandGenerator_t gen = device_generator(dev);
  BRRR_CURAND_CHECK(curandSetStream(gen, static_cast<cudaStream_t>(stream->handle)));
  BRRR_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(gen, seed));
  BRRR_CURAND_CHECK(curandSetGeneratorOffset(gen, offset));
  BRRR_CURAND_CHECK(curandGenerate(gen, static_cast<std::uint32_t*>(words.data()), n));
  BRRR_CUDA_CHECK(kernels::random_transform(out, static_cast<const std::uint32_t*>(words.data()), dist, low, high,
                                            stream->handle));
}

void CudaBackend::dropout(const Operand& out, const Operand& noise, const Operand& in, const AttentionDropout& d) {
  if (in.numel == 0) return;
  DeviceGuard g(in.device);
  BRRR_CUDA_CHECK(kernels::dropout(out, noise, in, d, current_stream(in.device)->handle));
}

Backend& cuda_backend() {
  static auto* b = new CudaBackend;  // never destroyed: tensors may outlive static destruction
  return *b;
}

}  // namespace brrr::backend
