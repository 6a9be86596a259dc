// Size checks shared by the window sweeps of ops/conv.cpp and ops/pool.cpp. Included inside
// the module purview of brrr.ops units, after `import brrr.tensor;` (it needs Error), with
// <cstdint>, <initializer_list> and <string> in the global module fragment.
#pragma once

namespace brrr::ops_detail {

// Error(value) "`op`: `what()` give more than 2^63 window cells" unless the product of the
// nonzero `factors` (a sweep's positions times its kernel cells: the columns' size and the
// work) fits int64. Sizes near 2^63 (a huge kernel, padding, dilation or stride) must be
// refused, not wrapped or swept for ever. `what` builds its text only on failure: the check
// runs on every call of the op.
template <class What>
void check_sweep_fits(const char* op, std::initializer_list<std::int64_t> factors, What&& what) {
  std::int64_t n = 1;
  for (std::int64_t f : factors)
    if (f != 0 && __builtin_mul_overflow(n, f, &n))
      throw Error(ErrorKind::value, std::string(op) + ": " + what() + " give more than 2^63 window cells");
}

}  // namespace brrr::ops_detail
