// Shared helpers of every suite (CPU and GPU). Include AFTER `import brrr;`, in a file that
// has already included <doctest/doctest.h>, <cmath>, <cstdint>, <cstdlib>, <random>,
// <sstream>, <string> and <vector> (before the import: clang wants every std header ahead of
// the import). Tolerances are in tests/tolerances.hpp.
#pragma once

// doctest prints std::vector operands of CHECK(a == b) with their values.
namespace doctest {
template <class T> struct StringMaker<std::vector<T>> {
  static String convert(const std::vector<T>& v) {
    std::ostringstream os;
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i == 24 && v.size() > 30) {
        os << ", ... (" << v.size() << " elements)";
        break;
      }
      if (i) os << ", ";
      if constexpr (std::is_same_v<T, bool>) os << (v[i] ? "true" : "false");
      else if constexpr (std::is_arithmetic_v<T>) os << +v[i];
      else os << v[i];
    }
    os << ']';
    return os.str().c_str();
  }
};
// ... and a `const char*` (to_string(dtype), a case's name) as its text: by default INFO and
// CHECK print the pointer ("dtype 0x557c..."). doctest's own switch for this,
// DOCTEST_CONFIG_TREAT_CHAR_STAR_AS_STRING, also turns CHECK(vector == vector) into a
// compile error.
template <> struct StringMaker<const char*> {
  static String convert(const char* s) { return s ? String(s) : String("(null)"); }
};
template <> struct StringMaker<char*> : StringMaker<const char*> {};
}  // namespace doctest

// doctest prints enums as their underlying integer; these overloads (found by ADL) print names.
namespace brrr {
inline doctest::String toString(DType d) { return to_string(d); }
inline doctest::String toString(ErrorKind k) { return to_string(k); }
}  // namespace brrr

namespace test {

using namespace brrr;

/// Checks that `expr` throws brrr::Error of `kind_` whose what() contains every string of the
/// trailing list (op name, shapes, dtypes ...). Fails if it throws nothing.
#define CHECK_BRRR_ERROR(expr, kind_, ...)                                                      \
  do {                                                                                          \
    bool thrown_ = false;                                                                       \
    try {                                                                                       \
      (void)(expr);                                                                             \
    } catch (const ::brrr::Error& e_) {                                                         \
      thrown_ = true;                                                                           \
      std::string what_ = e_.what();                                                            \
      INFO("what(): ", what_);                                                                  \
      CHECK(std::string(::brrr::to_string(e_.kind())) == std::string(::brrr::to_string(kind_))); \
      for (std::string part_ : std::initializer_list<std::string>{__VA_ARGS__})                \
        CHECK_MESSAGE(what_.find(part_) != std::string::npos, "missing \"" << part_ << "\"");   \
    }                                                                                           \
    CHECK_MESSAGE(thrown_, #expr " threw no brrr::Error");                                      \
  } while (0)

/// The device of the GPU suites (they run only where it exists: tests/gpu/gpu_main.cpp).
inline Device gpu() { return Device::cuda(0); }

/// Sets allow_tf32 for the scope and restores the previous setting.
struct Tf32Guard {
  bool previous = allow_tf32();
  explicit Tf32Guard(bool allow) { set_allow_tf32(allow); }
  ~Tf32Guard() { set_allow_tf32(previous); }
  Tf32Guard(const Tf32Guard&) = delete;
  Tf32Guard& operator=(const Tf32Guard&) = delete;
};

/// CHECKs that a GPU result matches its (CPU) reference: defined, on cuda:0, the same dtype
/// and shape, elements close under `o` (NaN equal to NaN). Used by the GPU parity suites.
inline void check_parity(const Tensor& g, const Tensor& c, const std::string& what, testing::CloseOptions o = {}) {
  INFO(what);
  REQUIRE(g.defined());
  CHECK(g.device() == gpu());
  CHECK(g.dtype() == c.dtype());
  REQUIRE(g.shape() == c.shape());
  o.equal_nan = true;
  std::string err;
  try {
    testing::assert_close(g, c, o);
  } catch (const Error& e) {
    err = e.what();
  }
  CHECK_MESSAGE(err.empty(), err);
}

/// GPU against CPU for one op: `f` runs on fresh leaves made from `cpu_in` (detached copies,
/// and their GPU copies; floating ones require grad when `grads`), the outputs are compared,
/// then the gradients of sum(out * r) of the floating inputs. Fresh leaves: a tensor moved by
/// to() records ToBackward (only leaves take requires_grad_), and marking the caller's tensors
/// would let their gradients accumulate over cases that share an input. `tol_of(dtype)` gives
/// the tolerance when `o` sets no rtol.
template <class F>
void parity(const std::string& what, F&& f, const std::vector<Tensor>& cpu_in, bool grads, testing::CloseOptions o,
            testing::CloseOptions (*tol_of)(DType) = nullptr) {
  std::vector<Tensor> c, g;
  for (const Tensor& t : cpu_in) {
    Tensor tc = t.detach(), tg = t.detach().to(gpu());
    if (grads && is_floating_point(t.dtype())) {
      tc.requires_grad_();
      tg.requires_grad_();
    }
    c.push_back(tc);
    g.push_back(tg);
  }
  Tensor oc = f(c), og = f(g);
  if (!o.rtol && tol_of) o = tol_of(oc.dtype());
  check_parity(og, oc, what, o);
  if (!grads || !oc.requires_grad()) return;
  Tensor r = randn(oc.shape(), {.dtype = oc.dtype()});
  autograd::backward({oc}, {r});
  autograd::backward({og}, {r.to(gpu())});
  for (std::size_t i = 0; i < c.size(); ++i)
    if (c[i].grad().defined()) check_parity(g[i].grad(), c[i].grad(), what + " grad " + std::to_string(i), o);
}

inline constexpr DType all_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::boolean};

/// A CPU tensor of `dtype` holding `values`, each converted by the test (not by brrr's
/// conversion kernels): floats by C++ casts and the half/bfloat16 constructors, integers by
/// static_cast (callers pass whole numbers), bool as v != 0.
inline Tensor make(DType dtype, const std::vector<double>& values, Shape shape = {}) {
  switch (dtype) {
    case DType::f32: {
      std::vector<float> v;
      for (double x : values) v.push_back(static_cast<float>(x));
      return Tensor::from_vector(v, std::move(shape));
    }
    case DType::f64: return Tensor::from_vector(values, std::move(shape));
    case DType::bf16: {
      std::vector<bfloat16> v;
      for (double x : values) v.push_back(bfloat16(static_cast<float>(x)));
      return Tensor::from_vector(v, std::move(shape));
    }
    case DType::f16: {
      std::vector<half> v;
      for (double x : values) v.push_back(half(static_cast<float>(x)));
      return Tensor::from_vector(v, std::move(shape));
    }
    case DType::i32: {
      std::vector<std::int32_t> v;
      for (double x : values) v.push_back(static_cast<std::int32_t>(x));
      return Tensor::from_vector(v, std::move(shape));
    }
    case DType::i64: {
      std::vector<std::int64_t> v;
      for (double x : values) v.push_back(static_cast<std::int64_t>(x));
      return Tensor::from_vector(v, std::move(shape));
    }
    case DType::boolean: {
      std::vector<bool> v;
      for (double x : values) v.push_back(x != 0);
      return Tensor::from_vector(v, std::move(shape));
    }
  }
  return {};
}

/// Every element of `t` (any dtype, any layout), row-major, widened to double.
inline std::vector<double> values(const Tensor& t) {
  auto widen = [](const auto& v) {
    std::vector<double> out;
    out.reserve(v.size());
    for (auto x : v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, bfloat16> ||
                    std::is_same_v<std::decay_t<decltype(x)>, half>)
        out.push_back(static_cast<float>(x));
      else
        out.push_back(static_cast<double>(x));
    }
    return out;
  };
  switch (t.dtype()) {
    case DType::f32: return widen(t.to_host<float>());
    case DType::f64: return t.to_host<double>();
    case DType::bf16: return widen(t.to_host<bfloat16>());
    case DType::f16: return widen(t.to_host<half>());
    case DType::i32: return widen(t.to_host<std::int32_t>());
    case DType::i64: return widen(t.to_host<std::int64_t>());
    case DType::boolean: return widen(t.to_host<bool>());
  }
  return {};
}

/// 0, 1, ..., n-1 as doubles (the expected contents of arange-based tensors).
inline std::vector<double> iota(std::int64_t n, double start = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = start + static_cast<double>(i);
  return v;
}

/// A fresh seed per run (random inputs each time); tests INFO() it so a failure can be
/// replayed: with BRRR_TEST_SEED set, that seed instead.
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("BRRR_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

/// Seeds brrr's generators with a fresh seed; INFO prints it with any failure of the scope.
#define FRESH_SEED()                                  \
  const std::uint64_t seed_ = ::test::fresh_seed();   \
  ::brrr::manual_seed(seed_);                         \
  INFO("seed = ", seed_, " (replay with BRRR_TEST_SEED)")

/// Random whole numbers in [lo, hi], as doubles.
inline std::vector<double> random_ints(std::mt19937_64& rng, std::size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// n normal values, mean 0 and standard deviation `scale`.
inline std::vector<double> normal_values(std::mt19937_64& rng, std::int64_t n, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::int64_t numel_of(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace test
