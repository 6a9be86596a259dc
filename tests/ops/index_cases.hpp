// Helpers of the CPU indexing suites (tests/ops/test_index.cpp, test_masks_dropout.cpp):
// row-major references and index tensors. Include after `import brrr;` and
// tests/tensor/helpers.hpp.
#pragma once

namespace index_test {

using namespace brrr;
using namespace test;

using V = std::vector<double>;
using Idx = std::vector<std::int64_t>;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

inline Shape coords(std::int64_t flat, const Shape& s) {
  Shape c(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    c[d] = flat % s[d];
    flat /= s[d];
  }
  return c;
}

inline std::int64_t flat_of(const Shape& c, const Shape& s) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + c[d];
  return f;
}

inline std::size_t wrap(std::int64_t dim, std::size_t nd) {
  return static_cast<std::size_t>(dim < 0 ? dim + static_cast<std::int64_t>(nd) : dim);
}

inline V ref_gather(const V& x, const Shape& xs, std::int64_t dim, const Idx& idx, const Shape& is) {
  std::size_t d = wrap(dim, xs.size());
  V out(static_cast<std::size_t>(numel_of(is)));
  for (std::int64_t p = 0; p < numel_of(is); ++p) {
    Shape c = coords(p, is);
    c[d] = idx[static_cast<std::size_t>(p)];
    out[static_cast<std::size_t>(p)] = x[static_cast<std::size_t>(flat_of(c, xs))];
  }
  return out;
}

inline V ref_scatter_add(V x, const Shape& xs, std::int64_t dim, const Idx& idx, const Shape& is, const V& src,
                  const Shape& ss) {
  std::size_t d = wrap(dim, xs.size());
  for (std::int64_t p = 0; p < numel_of(is); ++p) {
    Shape c = coords(p, is);
    double s = src[static_cast<std::size_t>(flat_of(c, ss))];
    c[d] = idx[static_cast<std::size_t>(p)];
    x[static_cast<std::size_t>(flat_of(c, xs))] += s;
  }
  return x;
}

inline Idx random_index(std::mt19937_64& rng, std::int64_t n, std::int64_t lo, std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> dist(lo, hi);
  Idx v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Tensor index_tensor(const Idx& v, const Shape& shape, DType dtype = DType::i64) {
  V d(v.begin(), v.end());
  if (shape.empty()) return full({}, d.at(0), {.dtype = dtype});
  return make(dtype, d, shape);
}

inline Idx host_index(const Tensor& t) {
  Idx out;
  for (double v : values(t)) out.push_back(static_cast<std::int64_t>(v));
  return out;
}

inline void check_values(const V& got, const V& want, double tol = 0) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

inline void check_grad(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs) {
  INFO(what);
  std::string error;
  try {
    CHECK(autograd::gradcheck(f, inputs));
  } catch (const Error& e) {
    error = e.what();
  }
  CHECK_MESSAGE(error.empty(), error);
}

struct GatherCase {
  Shape x, index;
  std::int64_t dim;
};

const GatherCase gather_cases[] = {
    {{4, 5}, {3, 5}, 0},    {{4, 5}, {4, 7}, 1},    {{4, 5}, {2, 3}, -1},      {{2, 3, 4}, {2, 5, 4}, 1},
    {{2, 3, 4}, {1, 2, 6}, 2}, {{2, 3, 4}, {2, 3, 3}, -3}, {{6}, {9}, 0}, {{3, 1, 2, 2}, {2, 1, 2, 5}, -1},
};

}  // namespace index_test
