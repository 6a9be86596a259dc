// The Philox stream position of a launch's draw (dropout, the fused attention's dropout).
#pragma once
#include <cstdint>

namespace brrr::kernels {

/// Seed and first word of a draw described by `d` (any struct with seed_offset, seed and
/// offset, e.g. AttentionDropout): under a CUDA graph capture seed_offset points at the
/// device's {seed, offset}, advanced before each replay, and d.offset is this draw's place
/// after it; otherwise (seed, offset) are used as given.
template <class D> __device__ __forceinline__ void philox_state(const D& d, std::uint64_t& seed, std::uint64_t& offset) {
  if (d.seed_offset) {
    seed = d.seed_offset[0];
    offset = d.seed_offset[1] + d.offset;
  } else {
    seed = d.seed;
    offset = d.offset;
  }
}

}  // namespace brrr::kernels
