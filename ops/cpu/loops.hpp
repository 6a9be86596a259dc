// Loop helpers shared by CPU kernel files (plain header: no module interface change).
// pairwise_sum: error O(log n) ulps
// instead of O(n) (Higham, "The accuracy of floating point summation", SIAM J. Sci.
// Comput. 14(4), 1993), the leaves keeping 8 independent partial sums so they vectorise.
#pragma once
#include <cstdint>

#include "backend/contract.hpp"

namespace brrr::backend::cpu {

template <class A> A pairwise_sum(const A* x, std::int64_t n) {
  constexpr std::int64_t leaf = 256;
  if (n > leaf) {
    std::int64_t h = (n / 2 + 7) / 8 * 8;
    return pairwise_sum(x, h) + pairwise_sum(x + h, n - h);
  }
  A p[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += x[i + j];
  for (int j = 0; i < n; ++i, ++j) p[j] += x[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/// True when o's elements lie row-major without gaps (dims of size 1 ignored).
inline bool is_contiguous(const Operand& o) {
  std::int64_t expect = 1;
  for (int d = o.ndim - 1; d >= 0; --d) {
    if (o.sizes[d] != 1 && o.strides[d] != expect) return false;
    expect *= o.sizes[d];
  }
  return true;
}

/// Elementwise work per parallel chunk (elements).
inline constexpr std::int64_t elementwise_grain = std::int64_t{1} << 15;

}  // namespace brrr::backend::cpu
