// Seeded random factories. Both backends draw cuRAND Philox4x32-10 words at the same
// (seed, offset) and apply the same transform, so CPU and GPU give the same numbers.
module;
#include <cstdint>
#include <string>
module brrr.tensor;
import brrr.backend;

namespace brrr {

void manual_seed(std::uint64_t seed) { backend::seed_all(seed); }

namespace {
Tensor draw(const char* op, Shape shape, TensorOptions options, backend::Distribution dist, std::int64_t low,
            std::int64_t high) {
  checked_numel(shape, op);  // shape errors name the op the user called
  DType dtype = *options.dtype;  // resolved by the callers
  bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(std::move(shape), options);
  if (t.numel() > 0 && options.device.is_cuda() && backend::capture_underway(options.device.index())) {
    // Under a CUDA graph capture: offsets from device memory each replay sets (cuda/graph.cpp).
    backend::capture_random(backend::output(t, op), dist, low, high);
  } else if (t.numel() > 0) {
    backend::GeneratorState& gen = backend::generator(options.device);
    backend::backend_for(options.device).random(backend::output(t, op), dist, gen.seed, gen.offset, low, high);
    gen.offset += backend::random_words(dist, dtype, t.numel());
  }
  if (rg) t.requires_grad_(true);
  return t;
}

void require_float(const char* op, DType dtype) {
  if (!is_floating_point(dtype))
    throw Error(ErrorKind::dtype, std::string(op) + ": needs a floating-point dtype, got " + to_string(dtype));
}
}  // namespace

Tensor rand(Shape shape, TensorOptions options) {
  options.dtype = options.dtype.value_or(DType::f32);
  require_float("rand", *options.dtype);
  return draw("rand", std::move(shape), options, backend::Distribution::uniform, 0, 0);
}

Tensor randn(Shape shape, TensorOptions options) {
  options.dtype = options.dtype.value_or(DType::f32);
  require_float("randn", *options.dtype);
  return draw("randn", std::move(shape), options, backend::Distribution::normal, 0, 0);
}

Tensor randint(std::int64_t low, std::int64_t high, Shape shape, TensorOptions options) {
  if (high <= low)
    throw Error(ErrorKind::value, "randint: high (" + std::to_string(high) + ") must be greater than low (" +
                                      std::to_string(low) + ")");
  options.dtype = options.dtype.value_or(DType::i64);
  if (*options.dtype == DType::boolean)
    throw Error(ErrorKind::dtype, "randint: bool is not an integer dtype here; use rand() < p");
  // Every value of [low, high) must be exact in the dtype, or a draw could land outside it
  // (wrapped integers, rounded floats). Floats hold every integer up to 2^(significand bits).
  std::int64_t lo = INT64_MIN, hi = INT64_MAX;
  switch (*options.dtype) {
    case DType::f32: hi = std::int64_t{1} << 24; lo = -hi; break;
    case DType::f64: hi = std::int64_t{1} << 53; lo = -hi; break;
    case DType::bf16: hi = std::int64_t{1} << 8; lo = -hi; break;
    case DType::f16: hi = std::int64_t{1} << 11; lo = -hi; break;
    case DType::i32: hi = INT32_MAX; lo = INT32_MIN; break;
    case DType::i64: break;
    case DType::boolean: hi = 1; lo = 0; break;
  }
  if (low < lo || high - 1 > hi)
    throw Error(ErrorKind::value, "randint: [" + std::to_string(low) + ", " + std::to_string(high) +
                                      ") does not fit in " + to_string(*options.dtype) + ", whose exact integers are [" +
                                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return draw("randint", std::move(shape), options, backend::Distribution::integer, low, high);
}

}  // namespace brrr
