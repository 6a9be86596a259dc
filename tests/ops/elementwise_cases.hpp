// The cases and helpers of the CPU elementwise suites (tests/ops/test_elementwise.cpp: values;
// test_promotion.cpp: dtypes, errors and NaN/inf; test_elementwise_grad.cpp: gradients):
// float64 references element by element with <cmath>, the unary/binary/scalar/comparison
// cases, input domains and layouts. Include after `import brrr;`, tests/tensor/helpers.hpp and
// tests/tolerances.hpp, in a file that has included <doctest/doctest.h>, <cmath>, <cstdint>,
// <cstdlib>, <functional>, <limits>, <memory>, <optional>, <random>, <sstream>, <string> and
// <vector>.
#pragma once

namespace elementwise_test {

using namespace brrr;

using test::numel_of;

using V = std::vector<double>;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
using Ref1 = std::function<double(double)>;
using Ref2 = std::function<double(double, double)>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Every element of `t` (any dtype, any layout), row-major, as f64.
inline V host(const Tensor& t) { return t.to(DType::f64).to_host<double>(); }

/// A CPU tensor of `dtype` holding `v` (0-d when shape is empty).
inline Tensor make(DType dtype, const V& v, const Shape& shape) {
  Tensor t = shape.empty() ? full({}, v.at(0), {.dtype = DType::f64}) : Tensor::from_vector(v, shape);
  return t.to(dtype);
}
inline Tensor make(DType dtype, const V& v) { return make(dtype, v, Shape{static_cast<std::int64_t>(v.size())}); }

/// `x` as `dtype` holds it (the reference is rounded to the output's dtype before comparing).
inline double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::f32: return static_cast<double>(static_cast<float>(x));
    case DType::bf16: return static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(x))));
    case DType::f16: return static_cast<double>(static_cast<float>(half(static_cast<float>(x))));
    case DType::f64: case DType::i32: case DType::i64: case DType::boolean: return x;
  }
  return x;
}

using test::Tol;
/// Correctly rounded ops and transcendental functions (tests/tolerances.hpp).
inline Tol exact_tol(DType d) { return test::tolerance(test::Computed::rounded, d); }
inline Tol math_tol(DType d) { return test::tolerance(test::Computed::math, d); }

/// Compares every element of `out` with the reference `expected` (rounded to out's dtype).
/// NaN matches NaN only; an infinity matches only itself.
inline void expect_values(const Tensor& out, const V& expected, Tol tol, const std::string& what = "") {
  INFO(what);
  V got = host(out);
  REQUIRE(got.size() == expected.size());
  std::int64_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = round_to(out.dtype(), expected[i]), g = got[i];
    bool ok;
    if (std::isnan(e)) ok = std::isnan(g);
    else if (std::isinf(e)) ok = g == e;
    else ok = std::isfinite(g) && std::fabs(g - e) <= tol.atol + tol.rtol * std::fabs(e);
    if (!ok && bad++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << "flat element " << i << ": got " << g << ", expected " << e;
      first = os.str();
    }
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " elements differ; " << first);
}

/// NumPy's broadcast of two shapes, written independently of brrr.
inline Shape ref_broadcast(const Shape& a, const Shape& b) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    std::int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Row-major index into a tensor of shape `in` of element `flat` of its broadcast to `out`.
inline std::int64_t source_index(std::int64_t flat, const Shape& out, const Shape& in) {
  std::int64_t idx = 0, stride = 1;
  std::size_t lead = out.size() - in.size();
  for (std::size_t d = out.size(); d-- > 0;) {
    std::int64_t c = flat % out[d];
    flat /= out[d];
    if (d >= lead) {
      std::int64_t size = in[d - lead];
      if (size != 1) idx += c * stride;
      stride *= size;
    }
  }
  return idx;
}

inline void check_unary(const Tensor& out, const Tensor& x, const Ref1& f, Tol tol, DType dtype, const std::string& what) {
  INFO(what);
  CHECK(out.shape() == x.shape());
  CHECK(out.dtype() == dtype);
  CHECK(out.is_contiguous());
  V xv = host(x), e(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) e[i] = f(xv[i]);
  expect_values(out, e, tol);
}

inline void check_binary(const Tensor& out, const Tensor& a, const Tensor& b, const Ref2& f, Tol tol, DType dtype,
                  const std::string& what) {
  INFO(what);
  Shape s = ref_broadcast(a.shape(), b.shape());
  REQUIRE(out.shape() == s);
  CHECK(out.dtype() == dtype);
  CHECK(out.is_contiguous());
  V av = host(a), bv = host(b), e(static_cast<std::size_t>(numel_of(s)));
  for (std::int64_t i = 0; i < numel_of(s); ++i)
    e[static_cast<std::size_t>(i)] = f(av[static_cast<std::size_t>(source_index(i, s, a.shape()))],
                                       bv[static_cast<std::size_t>(source_index(i, s, b.shape()))]);
  expect_values(out, e, tol);
}

/// `x` with every element closer than `margin` to `point` pushed `2 margin` away (kinks, ties,
/// singularities), rebuilt from its host values.
inline Tensor away_from(const Tensor& x, double point, double margin) {
  V v = host(x);
  for (double& e : v)
    if (std::fabs(e - point) < margin) e += e >= point ? 2 * margin : -2 * margin;
  return make(x.dtype(), v, x.shape());
}

/// Values of `x` rounded to whole numbers on the host (so comparisons see ties).
inline Tensor rounded(const Tensor& x) {
  V v = host(x);
  for (double& e : v) e = std::round(e);
  return make(x.dtype(), v, x.shape());
}

/// Runs gradcheck, turning its Error into a failed CHECK with the message.
inline void check_grad(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs,
                autograd::GradcheckOptions options = {}) {
  INFO(what);
  std::string error;
  try {
    CHECK(autograd::gradcheck(f, inputs, options));
  } catch (const Error& e) {
    error = e.what();
  }
  CHECK_MESSAGE(error.empty(), error);
}

/// gradcheck of the first derivative of sum(f(x)) (computed with create_graph): checks that
/// the backward rule is itself differentiable and right. Inputs enter the result with weight
/// 0 as well, so that a first derivative that does not depend on them (relu, x + s) gives a
/// second derivative of 0 instead of a result that does not require grad.
inline void check_gradgrad(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs) {
  Fn first = [f](const std::vector<Tensor>& in) {
    GradModeGuard on(true);  // gradcheck evaluates f under NoGradGuard for the differences
    std::vector<Tensor> g = autograd::grad({f(in).sum()}, in, {}, false, /*create_graph=*/true, true);
    Tensor total = mul(in[0], 0.0).sum();
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (i > 0) total = add(total, mul(in[i], 0.0).sum());
      if (g[i].defined()) total = add(total, mul(g[i], static_cast<double>(i + 1)).sum());
    }
    return total;
  };
  check_grad(what + " (second derivative)", first, inputs);
}

// --- float64 references ----------------------------------------------------------------

inline double ref_gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
inline double ref_gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double ref_sign(double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }
inline double ref_clamp(double x, double lo, double hi) { return std::isnan(x) ? x : std::min(std::max(x, lo), hi); }

enum class Domain { normal, positive, above_minus_one };

/// Random inputs of `dtype` for a unary op: 2 * randn, or values in [0.05, 3.05), or in
/// (-0.9, 2.1).
inline Tensor domain_input(Domain d, const Shape& shape, DType dtype) {
  switch (d) {
    case Domain::normal: return mul(randn(shape, {.dtype = dtype}), 2);
    case Domain::positive: return add(mul(rand(shape, {.dtype = dtype}), 3), 0.05);
    case Domain::above_minus_one: return sub(mul(rand(shape, {.dtype = dtype}), 3), 0.9);
  }
  return {};
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  Ref1 ref;
  Domain domain;
  bool math;  // transcendental: math_tol; else exact_tol
};

inline std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, Domain::normal, false},
      {"operator-", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, Domain::normal, false},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, Domain::normal, false},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, Domain::normal, true},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, Domain::positive, true},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); },
       Domain::above_minus_one, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, Domain::positive,
       false},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
       Domain::positive, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, Domain::normal, true},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, Domain::normal, true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, Domain::normal,
       false},
      {"gelu(none)", [](const Tensor& x) { return gelu(x); }, ref_gelu_erf, Domain::normal, true},
      {"gelu(tanh)", [](const Tensor& x) { return gelu(x, "tanh"); }, ref_gelu_tanh, Domain::normal, true},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * ref_sigmoid(x); },
       Domain::normal, true},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, Domain::normal, true},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, Domain::normal, true},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, Domain::normal, true},
      {"sign", [](const Tensor& x) { return sign(x); }, ref_sign, Domain::normal, false},
      {"clamp(-0.5, 0.7)", [](const Tensor& x) { return clamp(x, -0.5, 0.7); },
       [](double x) { return ref_clamp(x, -0.5, 0.7); }, Domain::normal, false},
      {"clamp_min(0.25)", [](const Tensor& x) { return clamp_min(x, 0.25); },
       [](double x) { return std::max(x, 0.25); }, Domain::normal, false},
      {"clamp_max(-0.75)", [](const Tensor& x) { return clamp_max(x, -0.75); },
       [](double x) { return std::min(x, -0.75); }, Domain::normal, false},
  };
}

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  Ref2 ref;
  bool positive_a;  // pow: a base in [0.05, 3.05)
  bool math;
};

inline std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; },
       false, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; },
       false, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; },
       false, false},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; },
       false, false},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; },
       false, false},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; },
       false, false},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; },
       false, false},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; },
       false, false},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, false, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, false, false},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, true, true},
  };
}

struct ScalarCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  Ref1 ref;
  bool positive;
  bool math;
};

// Scalars are exactly representable in bf16/f16 (the kernels use the scalar as the tensor's
// dtype holds it).
inline std::vector<ScalarCase> scalar_cases() {
  return {
      {"add(a, 2.5)", [](const Tensor& a) { return add(a, 2.5); }, [](double a) { return a + 2.5; }, false, false},
      {"add(a, 3)", [](const Tensor& a) { return add(a, 3); }, [](double a) { return a + 3; }, false, false},
      {"sub(a, 1.25)", [](const Tensor& a) { return sub(a, 1.25); }, [](double a) { return a - 1.25; }, false, false},
      {"sub(1.25, a)", [](const Tensor& a) { return sub(1.25, a); }, [](double a) { return 1.25 - a; }, false, false},
      {"mul(a, -3.5)", [](const Tensor& a) { return mul(a, -3.5); }, [](double a) { return a * -3.5; }, false, false},
      {"div(a, 4.0)", [](const Tensor& a) { return div(a, 4.0); }, [](double a) { return a / 4.0; }, false, false},
      {"div(a, 3)", [](const Tensor& a) { return div(a, 3); }, [](double a) { return a / 3; }, false, false},
      {"div(2.0, a)", [](const Tensor& a) { return div(2.0, a); }, [](double a) { return 2.0 / a; }, false, false},
      {"pow(a, 2.0)", [](const Tensor& a) { return pow(a, 2.0); }, [](double a) { return a * a; }, false, true},
      {"pow(a, 3)", [](const Tensor& a) { return pow(a, 3); }, [](double a) { return a * a * a; }, false, true},
      {"pow(a, 0.5)", [](const Tensor& a) { return pow(a, 0.5); }, [](double a) { return std::sqrt(a); }, true,
       true},
      {"pow(a, -1.5)", [](const Tensor& a) { return pow(a, -1.5); }, [](double a) { return std::pow(a, -1.5); },
       true, true},
      {"pow(2.0, a)", [](const Tensor& a) { return pow(2.0, a); }, [](double a) { return std::pow(2.0, a); }, false,
       true},
      {"pow(0.5, a)", [](const Tensor& a) { return pow(0.5, a); }, [](double a) { return std::pow(0.5, a); }, false,
       true},
      {"a + 2", [](const Tensor& a) { return a + 2; }, [](double a) { return a + 2; }, false, false},
      {"2 + a", [](const Tensor& a) { return 2 + a; }, [](double a) { return 2 + a; }, false, false},
      {"a - 0.5", [](const Tensor& a) { return a - 0.5; }, [](double a) { return a - 0.5; }, false, false},
      {"0.5 - a", [](const Tensor& a) { return 0.5 - a; }, [](double a) { return 0.5 - a; }, false, false},
      {"a * 2", [](const Tensor& a) { return a * 2; }, [](double a) { return a * 2; }, false, false},
      {"2.5 * a", [](const Tensor& a) { return 2.5 * a; }, [](double a) { return 2.5 * a; }, false, false},
      {"a / 8", [](const Tensor& a) { return a / 8; }, [](double a) { return a / 8; }, false, false},
      {"3.0 / a", [](const Tensor& a) { return 3.0 / a; }, [](double a) { return 3.0 / a; }, false, false},
  };
}

struct CompareCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<Tensor(const Tensor&, Scalar)> op_scalar;
  std::function<bool(double, double)> ref;
};

inline std::vector<CompareCase> compare_cases() {
  return {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](const Tensor& a, Scalar s) { return eq(a, s); },
       [](double a, double b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](const Tensor& a, Scalar s) { return ne(a, s); },
       [](double a, double b) { return a != b; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](const Tensor& a, Scalar s) { return lt(a, s); },
       [](double a, double b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](const Tensor& a, Scalar s) { return le(a, s); },
       [](double a, double b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](const Tensor& a, Scalar s) { return gt(a, s); },
       [](double a, double b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](const Tensor& a, Scalar s) { return ge(a, s); },
       [](double a, double b) { return a >= b; }},
  };
}

/// The same [4, 5] random values of `dtype` in six layouts: contiguous, transposed, rows
/// sliced with a step (offset 1), columns sliced with a step, and two expanded (stride 0).
inline std::vector<std::pair<std::string, Tensor>> layouts(DType dtype, bool positive = false) {
  auto draw = [&](const Shape& s) {
    return positive ? add(mul(rand(s, {.dtype = dtype}), 3), 0.05) : mul(randn(s, {.dtype = dtype}), 2);
  };
  std::vector<std::pair<std::string, Tensor>> r;
  r.emplace_back("contiguous", draw({4, 5}));
  r.emplace_back("transposed", draw({5, 4}).t());
  r.emplace_back("rows step 2", draw({9, 5}).slice(0, 1, 9, 2));
  r.emplace_back("cols step 2", draw({4, 11}).slice(1, 1, 11, 2));
  r.emplace_back("expanded rows", draw({1, 5}).expand({4, 5}));
  r.emplace_back("expanded cols", draw({4, 1}).expand({4, 5}));
  return r;
}

}  // namespace elementwise_test
