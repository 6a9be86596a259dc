// Helpers of the brrr.nn suites (tests/nn/test_modules.cpp, test_layers.cpp,
// test_attention.cpp): float64 references and small custom modules. Include after
// `import brrr;` and tests/tensor/helpers.hpp.
#pragma once

namespace modules_test {

using namespace brrr;
using namespace test;

using V = std::vector<double>;

inline void check_close(const V& actual, const V& expected, double atol, double rtol = 0) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("element ", i, ": ", actual[i], " vs ", expected[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

// y[r][o] = sum_i x[r][i] w[o][i] + b[o] in float64.
inline V ref_linear(const V& x, const V& w, const V& b, std::int64_t rows, std::int64_t in, std::int64_t out) {
  V y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i)
        acc += x[static_cast<std::size_t>(r * in + i)] * w[static_cast<std::size_t>(o * in + i)];
      y[static_cast<std::size_t>(r * out + o)] = acc;
    }
  return y;
}

// Names joined with ", " (doctest prints strings, not vectors of them).
inline std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

inline std::string names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, _] : named) out.push_back(n);
  return join(out);
}

// A custom layer: a scale parameter and a running-count buffer, y = x * scale.
class ScaleImpl final : public nn::ModuleImpl {
public:
  explicit ScaleImpl(std::int64_t n) {
    scale = register_parameter("scale", ones({n}));
    register_buffer("count", zeros({1}));
    register_buffer("steps", zeros({1}, {.dtype = DType::i64}));
  }
  Tensor forward(const Tensor& x) override { return mul(x, scale); }
  std::string name() const override { return "Scale()"; }
  Tensor scale;
};

class Scale : public nn::Module {
public:
  explicit Scale(std::int64_t n) { impl_ = std::make_shared<ScaleImpl>(n); }
};

inline std::filesystem::path temp_file(const std::string& stem) {
  return std::filesystem::temp_directory_path() /
         (stem + "_" + std::to_string(fresh_seed() % 1000000007ULL) + ".safetensors");
}

}  // namespace modules_test
