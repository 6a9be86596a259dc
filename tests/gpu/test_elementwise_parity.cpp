// Elementwise ops on cuda:0 against the CPU on the same random inputs (testing::assert_close):
// every unary, binary, scalar, comparison and where op; every dtype where it applies;
// contiguous with an unaligned tail (2^20 + 3 elements), offset slices whose pointers are not
// 16-byte aligned, transposes, steps, permutations, broadcasts (stride 0), zero-size, single
// element and 0-d; backward parity for every differentiable op; a forward + backward under
// SyncPolicy::error with zero host syncs; one tensor of more than 2^31 elements (the 64-bit
// indexing path). Outputs are poisoned (the caching allocator hands back a block just filled
// with NaN) so that a skipped element shows. Without a CUDA device the suite exits 77.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

// StringMaker for vectors, toString for DType/ErrorKind, CHECK_BRRR_ERROR.
#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

namespace {

using V = std::vector<double>;
using View = std::function<Tensor(const Tensor&)>;
using Un = std::function<Tensor(const Tensor&)>;
using Bin = std::function<Tensor(const Tensor&, const Tensor&)>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using test::gpu;

V host(const Tensor& t) { return t.to(DType::f64).to(Device::cpu()).to_host<double>(); }

/// Fills the caching allocator's next block of about `bytes` on the GPU with NaN bytes and
/// frees it: the op that runs next most likely gets it back, so an element a kernel skips
/// reads as NaN (or as a non-0/1 byte for bool, a huge value for integers).
void poison(std::int64_t bytes) {
  if (bytes <= 0) return;
  Tensor p = full({bytes / 4 + 1}, kNaN, {.dtype = DType::f32, .device = gpu()});
}

using test::check_parity;

enum class Domain { normal, positive, above_minus_one, integers };

/// CPU random values of `dtype` in `domain` (integers: randint in [-50, 50]).
Tensor draw(const Shape& shape, DType dtype, Domain d) {
  if (!is_floating_point(dtype)) {
    if (dtype == DType::boolean) return gt(randn(shape), 0.0);
    return randint(-50, 51, shape, {.dtype = dtype});
  }
  switch (d) {
    case Domain::normal: return mul(randn(shape, {.dtype = DType::f64}), 2).to(dtype);
    case Domain::positive: return add(mul(rand(shape, {.dtype = DType::f64}), 3), 0.05).to(dtype);
    case Domain::above_minus_one: return sub(mul(rand(shape, {.dtype = DType::f64}), 3), 0.9).to(dtype);
    case Domain::integers: return randint(-50, 51, shape, {.dtype = DType::i64}).to(dtype);
  }
  return {};
}

struct ViewCase {
  std::string name;
  Shape base;
  View view;
};

const std::int64_t kBig = (std::int64_t{1} << 20) + 3;

/// Layouts of an operand: the base is drawn (CPU), copied to the GPU, and viewed the same
/// way on both sides.
std::vector<ViewCase> layouts() {
  return {
      {"contiguous 2^20+3", {kBig}, [](const Tensor& t) { return t; }},
      {"offset 1 (not 16-byte aligned)", {kBig + 1}, [](const Tensor& t) { return t.slice(0, 1, kBig + 1); }},
      {"offset 3, [513, 257]", {513 * 257 + 3},
       [](const Tensor& t) { return t.slice(0, 3, 513 * 257 + 3).view({513, 257}); }},
      {"transposed", {129, 67}, [](const Tensor& t) { return t.t(); }},
      {"rows step 3 from 1", {301, 65}, [](const Tensor& t) { return t.slice(0, 1, 301, 3); }},
      {"cols step 2 from 1", {64, 131}, [](const Tensor& t) { return t.slice(1, 1, 131, 2); }},
      {"permuted 3-d", {5, 7, 9}, [](const Tensor& t) { return t.permute({2, 0, 1}); }},
      {"expanded (stride 0)", {1, 257}, [](const Tensor& t) { return t.expand({63, 257}); }},
      {"zero-size", {0, 5}, [](const Tensor& t) { return t; }},
      {"single element", {1}, [](const Tensor& t) { return t; }},
      {"0-d", {}, [](const Tensor& t) { return t; }},
  };
}

struct Operand {
  Tensor cpu, gpu;
};

Operand operand(const ViewCase& l, DType dtype, Domain d) {
  Tensor base = draw(l.base, dtype, d);
  return {l.view(base), l.view(base.to(gpu()))};
}

/// Default assert_close tolerances, a little wider for bf16/f16 results of transcendental
/// functions (CUDA's and glibc's f32 functions differ by an ulp or two, which can flip the
/// final rounding to 16 bits).
testing::CloseOptions tol_for(DType d, bool math) {
  return math ? test::close_options(test::Computed::math_parity, d) : testing::CloseOptions{};
}

struct UnaryCase {
  std::string name;
  Un op;
  Domain domain;
  bool math;
  bool integers;  // defined for integer dtypes too (keeps them)
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, Domain::normal, false, true},
      {"operator-", [](const Tensor& x) { return -x; }, Domain::normal, false, true},
      {"abs", [](const Tensor& x) { return abs(x); }, Domain::normal, false, true},
      {"exp", [](const Tensor& x) { return exp(x); }, Domain::normal, true, false},
      {"log", [](const Tensor& x) { return log(x); }, Domain::positive, true, false},
      {"log1p", [](const Tensor& x) { return log1p(x); }, Domain::above_minus_one, true, false},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, Domain::positive, false, false},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, Domain::positive, true, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, Domain::normal, true, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, Domain::normal, true, false},
      {"relu", [](const Tensor& x) { return relu(x); }, Domain::normal, false, true},
      {"gelu(none)", [](const Tensor& x) { return gelu(x); }, Domain::normal, true, false},
      {"gelu(tanh)", [](const Tensor& x) { return gelu(x, "tanh"); }, Domain::normal, true, false},
      {"silu", [](const Tensor& x) { return silu(x); }, Domain::normal, true, false},
      {"sin", [](const Tensor& x) { return sin(x); }, Domain::normal, true, false},
      {"cos", [](const Tensor& x) { return cos(x); }, Domain::normal, true, false},
      {"erf", [](const Tensor& x) { return erf(x); }, Domain::normal, true, false},
      {"sign", [](const Tensor& x) { return sign(x); }, Domain::normal, false, true},
      {"clamp(-0.5, 0.7)", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, Domain::normal, false, false},
      {"clamp(-10, 20)", [](const Tensor& x) { return clamp(x, -10, 20); }, Domain::normal, false, true},
      {"clamp_min(0.25)", [](const Tensor& x) { return clamp_min(x, 0.25); }, Domain::normal, false, false},
      {"clamp_max(-3)", [](const Tensor& x) { return clamp_max(x, -3); }, Domain::normal, false, true},
      {"a * 2.5", [](const Tensor& x) { return x * 2.5; }, Domain::normal, false, true},
      {"a + 3", [](const Tensor& x) { return x + 3; }, Domain::normal, false, true},
      {"a - 1.25", [](const Tensor& x) { return x - 1.25; }, Domain::normal, false, true},
      {"1.25 - a", [](const Tensor& x) { return 1.25 - x; }, Domain::normal, false, true},
      {"a * -3", [](const Tensor& x) { return x * -3; }, Domain::normal, false, true},
      {"a / 4", [](const Tensor& x) { return x / 4; }, Domain::normal, false, true},
      {"2 / a", [](const Tensor& x) { return 2.0 / x; }, Domain::positive, false, true},
      {"pow(a, 2.0)", [](const Tensor& x) { return pow(x, 2.0); }, Domain::normal, true, false},
      {"pow(a, 3)", [](const Tensor& x) { return pow(x, 3); }, Domain::normal, true, true},
      {"pow(a, -1.5)", [](const Tensor& x) { return pow(x, -1.5); }, Domain::positive, true, false},
      {"pow(2.0, a)", [](const Tensor& x) { return pow(2.0, x); }, Domain::normal, true, false},
      {"eq(a, 1)", [](const Tensor& x) { return eq(x, 1); }, Domain::integers, false, true},
      {"ne(a, 1)", [](const Tensor& x) { return ne(x, 1); }, Domain::integers, false, true},
      {"lt(a, 0.5)", [](const Tensor& x) { return lt(x, 0.5); }, Domain::normal, false, true},
      {"le(a, 2)", [](const Tensor& x) { return le(x, 2); }, Domain::integers, false, true},
      {"gt(a, -1.5)", [](const Tensor& x) { return gt(x, -1.5); }, Domain::normal, false, true},
      {"ge(a, 0)", [](const Tensor& x) { return ge(x, 0); }, Domain::integers, false, true},
  };
}

struct BinaryCase {
  std::string name;
  Bin op;
  bool positive_a;
  bool math;
  bool integers;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, false, false, true},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, false, false, true},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, false, false, true},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, false, false, true},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true, true, false},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false, false, true},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false, false, true},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, false, false, true},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, false, false, true},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, false, false, true},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, false, false, true},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, false, false, true},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, false, false, true},
      {"where(a > b, a, b)", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); }, false, false,
       true},
  };
}

constexpr DType kFloat[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
constexpr DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64};

std::int64_t out_bytes(const Tensor& t) { return t.numel() * static_cast<std::int64_t>(itemsize(t.dtype())) + 512; }

}  // namespace

TEST_CASE("gpu elementwise: unary and scalar ops, every dtype and layout") {
  FRESH_SEED();
  for (DType dtype : kAll) {
    for (const UnaryCase& c : unary_cases()) {
      if (!is_floating_point(dtype) && !c.integers) continue;
      for (const ViewCase& l : layouts()) {
        std::string what = c.name + " " + to_string(dtype) + " " + l.name;
        Operand x = operand(l, dtype, c.domain);
        Tensor rc = c.op(x.cpu);
        poison(out_bytes(rc));
        Tensor rg = c.op(x.gpu);
        check_parity(rg, rc, what, tol_for(rc.dtype(), c.math));
      }
    }
  }
  // bool inputs: comparisons and floating functions (computed in f32)
  for (const ViewCase& l : layouts()) {
    Operand p = operand(l, DType::boolean, Domain::normal);
    check_parity(eq(p.gpu, 1), eq(p.cpu, 1), "eq(bool, 1) " + l.name);
    check_parity(p.gpu + 1, p.cpu + 1, "bool + 1 " + l.name);
    check_parity(exp(p.gpu), exp(p.cpu), "exp(bool) " + l.name, tol_for(DType::f32, true));
  }
  // integers promoted by floating scalars and functions
  for (const ViewCase& l : layouts()) {
    Operand i = operand(l, DType::i32, Domain::integers);
    check_parity(i.gpu + 2.5, i.cpu + 2.5, "i32 + 2.5 " + l.name);
    check_parity(i.gpu / 3, i.cpu / 3, "i32 / 3 " + l.name);
    check_parity(sigmoid(i.gpu), sigmoid(i.cpu), "sigmoid(i32) " + l.name, tol_for(DType::f32, true));
    check_parity(clamp(i.gpu, -10.5, 20.5), clamp(i.cpu, -10.5, 20.5), "clamp(i32, fractional) " + l.name);
  }
}

TEST_CASE("gpu elementwise: binary ops, every dtype, same layouts and broadcasts") {
  FRESH_SEED();
  for (DType dtype : kAll) {
    for (const BinaryCase& c : binary_cases()) {
      if (!is_floating_point(dtype) && !c.integers) continue;
      // the same layout on both sides
      for (const ViewCase& l : layouts()) {
        std::string what = c.name + " " + to_string(dtype) + " " + l.name;
        Operand a = operand(l, dtype, c.positive_a ? Domain::positive : Domain::normal);
        Operand b = operand(l, dtype, Domain::normal);
        Tensor rc = c.op(a.cpu, b.cpu);
        poison(out_bytes(rc));
        check_parity(c.op(a.gpu, b.gpu), rc, what, tol_for(rc.dtype(), c.math));
      }
      // mixed layouts and broadcasts
      struct Mix {
        std::string name;
        ViewCase a, b;
      };
      std::vector<Mix> mixes = {
          {"contiguous with transposed",
           {"", {67, 129}, [](const Tensor& t) { return t; }},
           {"", {129, 67}, [](const Tensor& t) { return t.t(); }}},
          {"[65, 1] with [1, 129]",
           {"", {65, 1}, [](const Tensor& t) { return t; }},
           {"", {1, 129}, [](const Tensor& t) { return t; }}},
          {"[5, 4, 3] with [3]", {"", {5, 4, 3}, [](const Tensor& t) { return t; }},
           {"", {3}, [](const Tensor& t) { return t; }}},
          {"2^20+3 with 0-d", {"", {kBig}, [](const Tensor& t) { return t; }},
           {"", {}, [](const Tensor& t) { return t; }}},
          {"0-d with offset 2^20+3", {"", {}, [](const Tensor& t) { return t; }},
           {"", {kBig + 1}, [](const Tensor& t) { return t.slice(0, 1, kBig + 1); }}},
          {"[0, 1] with [1, 4]", {"", {0, 1}, [](const Tensor& t) { return t; }},
           {"", {1, 4}, [](const Tensor& t) { return t; }}},
          {"[1] with [1, 1, 1]", {"", {1}, [](const Tensor& t) { return t; }},
           {"", {1, 1, 1}, [](const Tensor& t) { return t; }}},
          {"step slice with broadcast column", {"", {64, 131}, [](const Tensor& t) { return t.slice(1, 1, 131, 2); }},
           {"", {64, 1}, [](const Tensor& t) { return t; }}},
          // the row path (innermost dim contiguous or broadcast): a per-channel bias, rows
          // broadcast over a middle dim, rows whose starts are not 16-byte aligned
          {"[8, 16, 256] with a bias [1, 16, 1]", {"", {8, 16, 256}, [](const Tensor& t) { return t; }},
           {"", {1, 16, 1}, [](const Tensor& t) { return t; }}},
          {"[6, 3, 128] with [6, 1, 128]", {"", {6, 3, 128}, [](const Tensor& t) { return t; }},
           {"", {6, 1, 128}, [](const Tensor& t) { return t; }}},
          {"offset rows [8, 257][:, 1:] with [1, 256]", {"", {8, 257}, [](const Tensor& t) { return t.slice(1, 1, 257); }},
           {"", {1, 256}, [](const Tensor& t) { return t; }}},
          {"[5, 100] with [5, 1]", {"", {5, 100}, [](const Tensor& t) { return t; }},
           {"", {5, 1}, [](const Tensor& t) { return t; }}},
          // few long rows, split into segments across blocks: a position embedding [T, C] added
          // to [B, T, C] (3 rows of 257 * 384), and an odd row length (unpacked)
          {"[3, 257, 384] with [257, 384]", {"", {3, 257, 384}, [](const Tensor& t) { return t; }},
           {"", {257, 384}, [](const Tensor& t) { return t; }}},
          {"[2, 50001] with [1, 50001]", {"", {2, 50001}, [](const Tensor& t) { return t; }},
           {"", {1, 50001}, [](const Tensor& t) { return t; }}},
          {"[2, 65536] with [2, 1]", {"", {2, 65536}, [](const Tensor& t) { return t; }},
           {"", {2, 1}, [](const Tensor& t) { return t; }}},
      };
      for (const Mix& m : mixes) {
        std::string what = c.name + " " + to_string(dtype) + " " + m.name;
        Operand a = operand(m.a, dtype, c.positive_a ? Domain::positive : Domain::normal);
        Operand b = operand(m.b, dtype, Domain::normal);
        Tensor rc = c.op(a.cpu, b.cpu);
        poison(out_bytes(rc));
        check_parity(c.op(a.gpu, b.gpu), rc, what, tol_for(rc.dtype(), c.math));
      }
    }
  }
  // bool with bool
  Operand p = operand(layouts()[0], DType::boolean, Domain::normal);
  Operand q = operand(layouts()[0], DType::boolean, Domain::normal);
  check_parity(p.gpu + q.gpu, p.cpu + q.cpu, "bool + bool");
  check_parity(p.gpu * q.gpu, p.cpu * q.cpu, "bool * bool");
  check_parity(where(p.gpu, q.gpu, p.gpu), where(p.cpu, q.cpu, p.cpu), "where bool");
}

TEST_CASE("gpu elementwise: type promotion matches the CPU") {
  FRESH_SEED();
  const DType all[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean};
  for (DType da : all) {
    for (DType db : all) {
      Operand a = operand({"", {33, 17}, [](const Tensor& t) { return t; }}, da, Domain::integers);
      Operand b = operand({"", {17}, [](const Tensor& t) { return t; }}, db, Domain::integers);
      std::string what = std::string(to_string(da)) + " with " + to_string(db);
      check_parity(a.gpu + b.gpu, a.cpu + b.cpu, "add " + what);
      check_parity(a.gpu * b.gpu, a.cpu * b.cpu, "mul " + what);
      check_parity(a.gpu / b.gpu, a.cpu / b.cpu, "div " + what);
      check_parity(lt(a.gpu, b.gpu), lt(a.cpu, b.cpu), "lt " + what);
      check_parity(maximum(a.gpu, b.gpu), maximum(a.cpu, b.cpu), "maximum " + what);
      Tensor cc = gt(a.cpu, 0.0);
      check_parity(where(cc.to(gpu()), a.gpu, b.gpu), where(cc, a.cpu, b.cpu), "where " + what);
    }
  }
}

TEST_CASE("gpu elementwise: NaN, infinities, signed zeros and integer edge cases as on the CPU") {
  for (DType dtype : kFloat) {
    Tensor x = Tensor::from_vector(V{kNaN, 1.0, -2.0, kInf, -kInf, 0.0, -0.0, 1000.0, -1000.0}).to(dtype);
    Tensor y = Tensor::from_vector(V{1.0, kNaN, -3.0, 0.0, 0.0, -0.0, 0.0, -1.0, 0.5}).to(dtype);
    Tensor xg = x.to(gpu()), yg = y.to(gpu());
    std::string dn = to_string(dtype);
    for (const UnaryCase& c : unary_cases())
      check_parity(c.op(xg), c.op(x), c.name + " edge " + dn, tol_for(dtype, c.math));
    for (const BinaryCase& c : binary_cases())
      check_parity(c.op(xg, yg), c.op(x, y), c.name + " edge " + dn, tol_for(dtype, c.math));
    // abs(-0.0) is +0.0 on both
    V za = host(abs(xg));
    CHECK_FALSE(std::signbit(za[6]));
  }
  // integer clamp bounds beyond the dtype's range saturate
  Tensor i = Tensor::from_vector(std::vector<std::int32_t>{-7, 7, 2147483647, -2147483647 - 1});
  Tensor ig = i.to(gpu());
  using Bounds = std::pair<std::optional<double>, std::optional<double>>;
  const std::vector<Bounds> bounds = {{3.0e9, std::nullopt}, {std::nullopt, -3.0e9}, {-1e12, 1e12}, {-2.5, 2.5}};
  for (const Bounds& bd : bounds)
    check_parity(clamp(ig, bd.first, bd.second), clamp(i, bd.first, bd.second), "clamp i32 with extreme bounds");
  Tensor l = Tensor::from_vector(std::vector<std::int64_t>{-7, 7});
  check_parity(clamp(l.to(gpu()), 1e19, std::nullopt), clamp(l, 1e19, std::nullopt), "clamp i64 lower bound 1e19");
  check_parity(pow(l.to(gpu()), -1), pow(l, -1), "i64 ^ -1");
  // true division by zero
  Tensor n = Tensor::from_vector(std::vector<std::int32_t>{7, -7, 0});
  Tensor z = Tensor::from_vector(std::vector<std::int32_t>{0, 0, 0});
  check_parity(n.to(gpu()) / z.to(gpu()), n / z, "i32 / 0");
}

TEST_CASE("gpu elementwise: errors") {
  Tensor c = randn({2, 3});
  Tensor g = randn({2, 3}, {.device = gpu()});
  CHECK_BRRR_ERROR(add(c, g), ErrorKind::device, "add", "cpu", "cuda:0");
  CHECK_BRRR_ERROR(g * c, ErrorKind::device, "mul", "cuda:0");
  CHECK_BRRR_ERROR(where(gt(c, 0.0), g, g), ErrorKind::device, "where", "cpu", "cuda:0");
  CHECK_BRRR_ERROR(maximum(g, c), ErrorKind::device, "maximum");
  CHECK_BRRR_ERROR(add(g, randn({4}, {.device = gpu()})), ErrorKind::shape, "[2, 3]", "[4]");
  CHECK_BRRR_ERROR(where(g, g, g), ErrorKind::dtype, "condition must be bool");
  CHECK_BRRR_ERROR(gelu(g, "fast"), ErrorKind::value, "\"fast\"");
}

TEST_CASE("gpu elementwise: backward parity for every differentiable op") {
  FRESH_SEED();
  struct Grad1 {
    std::string name;
    Un op;
    Domain domain;
  };
  std::vector<Grad1> unary;
  for (const UnaryCase& c : unary_cases())
    if (c.op(zeros({1})).dtype() != DType::boolean) unary.push_back({c.name, c.op, c.domain});  // no comparisons
  const Shape shapes[] = {{(1 << 16) + 3}, {37, 29}, {}};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    testing::CloseOptions o = dtype == DType::f64   ? testing::CloseOptions{.rtol = 1e-10, .atol = 1e-12}
                              : dtype == DType::f32 ? testing::CloseOptions{.rtol = 1e-5, .atol = 1e-5}
                                                    : testing::CloseOptions{.rtol = 3e-2, .atol = 1e-2};
    for (const Grad1& c : unary) {
      for (const Shape& s : shapes) {
        std::string what = c.name + " backward " + to_string(dtype) + " " + to_string(s);
        Tensor xc = draw(s, dtype, c.domain), xg = xc.to(gpu());
        xc.requires_grad_();
        xg.requires_grad_();
        Tensor yc = c.op(xc);
        Tensor r = draw(yc.shape(), dtype, Domain::normal);
        yc.backward(r);
        c.op(xg).backward(r.to(gpu()));
        REQUIRE(xg.grad().defined());
        check_parity(xg.grad(), xc.grad(), what, o);
      }
    }
    // binary ops, same shapes and broadcasts (gradients summed back on the GPU)
    struct Pair {
      Shape a, b;
    };
    const Pair pairs[] = {{{(1 << 16) + 3}, {(1 << 16) + 3}}, {{65, 1}, {1, 129}}, {{5, 4, 3}, {3}}, {{}, {31, 7}}};
    for (const BinaryCase& c : binary_cases()) {
      if (c.op(zeros({1}), zeros({1})).dtype() == DType::boolean) continue;  // comparisons
      for (const Pair& p : pairs) {
        std::string what = c.name + " backward " + to_string(dtype) + " " + to_string(p.a) + " " + to_string(p.b);
        Tensor ac = draw(p.a, dtype, c.positive_a ? Domain::positive : Domain::normal), ag = ac.to(gpu());
        Tensor bc = draw(p.b, dtype, Domain::normal), bg = bc.to(gpu());
        for (Tensor* t : {&ac, &ag, &bc, &bg}) t->requires_grad_();
        Tensor yc = c.op(ac, bc);
        Tensor r = draw(yc.shape(), dtype, Domain::normal);
        yc.backward(r);
        c.op(ag, bg).backward(r.to(gpu()));
        REQUIRE(ag.grad().defined());
        REQUIRE(bg.grad().defined());
        CHECK(ag.grad().shape() == p.a);
        CHECK(bg.grad().shape() == p.b);
        // pow's d/db = a^b log(a) sums terms up to ~|a|^|b| over broadcast dims: a 1-ulp
        // difference between CUDA's and the CPU's powf grows with the exponent (seen: 1.1e-5
        // relative at 461 after a 65-term sum), so f32 gets a wider relative tolerance there.
        testing::CloseOptions ob = o;
        if (c.name == "pow" && dtype == DType::f32) ob.rtol = 5e-5;
        // A gradient summed over broadcast dims adds n terms in a different order on each
        // device: in f32 its error grows with n and the terms' size, not the element's (seen:
        // 1.5e-5 on an element of 0.34 of a 65-term sum whose largest element was ~20), so
        // atol is n * 1e-6 (16 f32 units per term) of the largest reference gradient.
        auto reduced = [&](const Tensor& want, const Shape& own) {
          testing::CloseOptions r = ob;
          const std::int64_t n = yc.numel() / std::max<std::int64_t>(1, want.numel());
          if (dtype == DType::f32 && n > 1 && own != yc.shape()) {
            double big = 0;
            for (double v : host(want)) big = std::max(big, std::abs(v));
            r.atol = std::max(*r.atol, 1e-6 * static_cast<double>(n) * big);
          }
          return r;
        };
        check_parity(ag.grad(), ac.grad(), what + " d/da", reduced(ac.grad(), p.a));
        check_parity(bg.grad(), bc.grad(), what + " d/db", reduced(bc.grad(), p.b));
      }
    }
  }
  // mixed dtypes: each gradient in its input's dtype, on the GPU
  Tensor a = randn({7, 1}, {.device = gpu(), .requires_grad = true});
  Tensor b = randn({5}, {.dtype = DType::f64, .device = gpu(), .requires_grad = true});
  (a * b).sum().backward();
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f64);
  CHECK(a.grad().device() == gpu());
}

TEST_CASE("gpu elementwise: forward + backward under SyncPolicy::error, zero host syncs") {
  FRESH_SEED();
  Tensor xc = randn({64, 33}), wc = randn({33}), bc = randn({64, 1});
  Tensor x = xc.to(gpu()), w = wc.to(gpu()), b = bc.to(gpu());
  for (Tensor* t : {&x, &w, &b, &xc, &wc, &bc}) t->requires_grad_();
  cuda::synchronize();
  std::uint64_t syncs = cuda::sync_count();
  {
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    Tensor h = gelu(x * w + b);
    Tensor loss = pow(h, 2.0).sum();
    Tensor extra = (where(gt(x, 0.0), tanh(x), sigmoid(x) * 0.5) + maximum(x, b) / (exp(w) + 1) +
                    clamp(silu(x), -0.2, 0.8) - log1p(abs(x)) * erf(w) + sqrt(abs(b) + 0.1))
                       .sum();
    (loss + extra).backward();
  }
  CHECK(cuda::sync_count() == syncs);
  {
    Tensor h = gelu(xc * wc + bc);
    Tensor loss = pow(h, 2.0).sum();
    Tensor extra = (where(gt(xc, 0.0), tanh(xc), sigmoid(xc) * 0.5) + maximum(xc, bc) / (exp(wc) + 1) +
                    clamp(silu(xc), -0.2, 0.8) - log1p(abs(xc)) * erf(wc) + sqrt(abs(bc) + 0.1))
                       .sum();
    (loss + extra).backward();
  }
  testing::CloseOptions o{.rtol = 1e-4, .atol = 1e-4};
  check_parity(x.grad(), xc.grad(), "d/dx", o);
  check_parity(w.grad(), wc.grad(), "d/dw", o);
  check_parity(b.grad(), bc.grad(), "d/db", o);
}

TEST_CASE("gpu elementwise: more than 2^31 elements (64-bit indexing)") {
  const std::int64_t n = (std::int64_t{1} << 31) + 7;
  manual_seed(test::fresh_seed());
  Tensor a = rand({n}, {.dtype = DType::bf16, .device = gpu()});     // 4 GiB
  Tensor s = randn({1}, {.dtype = DType::bf16, .device = gpu()});
  // windows at the start, across 2^31 and at the end (the unaligned tail)
  const std::int64_t starts[] = {0, (std::int64_t{1} << 31) - 40, n - 64};
  auto check_windows = [&](const Tensor& out_g, const std::function<Tensor(const Tensor&)>& ref_on_cpu_window,
                           std::int64_t shift, const std::string& what) {
    for (std::int64_t st : starts) {
      std::int64_t len = std::min<std::int64_t>(64, out_g.numel() - st);
      Tensor in = a.slice(0, st + shift, st + shift + len).to(Device::cpu());
      check_parity(out_g.slice(0, st, st + len), ref_on_cpu_window(in), what + " window at " + std::to_string(st));
    }
  };
  Tensor sc = s.to(Device::cpu());
  {
    // contiguous, scalar: the vectorised path
    poison(n * 2);
    Tensor d = a * 2.0;
    check_windows(d, [](const Tensor& w) { return w * 2.0; }, 0, "a * 2 (vector path)");
  }
  {
    // broadcast operand with stride 0: the strided path with 64-bit offsets
    poison(n * 2);
    Tensor c = a + s.expand({n});
    check_windows(c, [&](const Tensor& w) { return w + sc.expand({w.numel()}); }, 0, "a + s (strided path)");
  }
  {
    // offset by one element: not 16-byte aligned, n - 1 elements
    poison(n * 2);
    Tensor e = exp(a.slice(0, 1, n));
    check_windows(e, [](const Tensor& w) { return exp(w); }, 1, "exp(a[1:]) (unaligned)");
  }
  {
    // a comparison writing 2^31 + 7 bools
    poison(n);
    Tensor m = gt(a, 0.5);
    CHECK(m.dtype() == DType::boolean);
    check_windows(m, [](const Tensor& w) { return gt(w, 0.5); }, 0, "a > 0.5");
  }
}
