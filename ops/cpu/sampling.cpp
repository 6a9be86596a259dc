// CPU kernel of poisson (ops/sampling.cpp): each sample is random_transform::poisson of its
// own Philox words (ops/random_transform.hpp), the same function the CUDA kernel runs, so a
// seed gives the same samples on both backends. Parallel over chunks of elements.
module;
#include <cstdint>
#include <string>
#include "backend/contract.hpp"
#include "ops/random_transform.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

void CpuBackend::poisson(const Operand& out, const Operand& rates, std::uint64_t seed, std::uint64_t offset) {
  if (out.numel == 0) return;
  if (!is_floating_point(out.dtype) || rates.dtype != out.dtype || rates.numel != out.numel)
    throw Error(ErrorKind::value, std::string("CpuBackend::poisson: invalid operands (out ") + to_string(out.dtype) + ", rates " +
                                      to_string(rates.dtype) + ")");
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      const auto* r = static_cast<const T*>(rates.data);
      auto* o = static_cast<T*>(out.data);
      // Checked before any sample is written (PyTorch: "invalid Poisson rate, expected rate to
      // be non-negative"); NaN is refused too.
      for (std::int64_t i = 0; i < rates.numel; ++i)
        if (!(widen(r[i]) >= 0))
          throw Error(ErrorKind::value, "poisson: rates must be non-negative, got " + std::to_string(widen(r[i])) +
                                            " at element " + std::to_string(i) + " of " +
                                            std::to_string(rates.numel));
      parallel_for(out.numel, 256, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          random_transform::PoissonWords words(seed, offset, static_cast<std::uint64_t>(i));
          o[i] = narrow_to<T>(random_transform::poisson(widen(r[i]), words));
        }
      });
    }
  });
}

}  // namespace brrr::backend
