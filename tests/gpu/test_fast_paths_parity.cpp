// The CUDA fast paths of issue 17's slow rows against the CPU: topk's radix select (the rows
// path: one block per row; the passes path: rows split over blocks; the sort path: very short
// rows or k > 1024) with ties, NaN, -0.0, k = 1 and k = n, every dtype; the chunked scans
// (cumsum, cumprod, logcumsumexp along long rows, a vector over 2^24); batch norm's statistics
// split over blocks (N*M not a multiple of the split, M = 1, M below the block); im2col /
// col2im (unfold / fold, conv_transpose2d) with strides, dilations and paddings whose taps
// skip. Where the summation order differs from the CPU's, within its tolerance; everything
// is also checked to give the same bits twice. Without a CUDA device the suite exits 77.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/scan_bound.hpp"
#include "tests/tolerances.hpp"

namespace {

using test::gpu;
using In = std::vector<Tensor>;

// topk selects and copies elements, integer scans are exact: nothing may differ.
const testing::CloseOptions exact{.rtol = 0, .atol = 0, .equal_nan = true};

// Reductions (batch norm's statistics, col2im's sums) and GEMMs on CUDA against the CPU.
testing::CloseOptions tol(DType d) { return test::close_options(test::Computed::conv_parity, d); }

// Bit-for-bit the same tensor (the GPU kernels must not depend on timing).
void check_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  INFO(what, ": two runs");
  CHECK_NOTHROW(testing::assert_close(a, b, exact));
}

// topk on the GPU against the CPU, values and indices exactly, both directions; and a second
// GPU run against the first.
void check_topk(const std::string& what, const Tensor& x, std::int64_t k, std::int64_t dim = -1) {
  for (bool largest : {true, false}) {
    const std::string w = what + (largest ? " largest" : " smallest") + " k=" + std::to_string(k);
    INFO(w);
    ValuesIndices c = topk(x, k, dim, largest);
    Tensor xg = x.to(gpu());
    ValuesIndices g = topk(xg, k, dim, largest);
    test::check_parity(g.values, c.values, w + " values", exact);
    test::check_parity(g.indices, c.indices, w + " indices", exact);
    ValuesIndices again = topk(xg, k, dim, largest);
    check_same_bits(again.indices, g.indices, w);
  }
}

Tensor normal(Shape s, DType d = DType::f32) { return randn(std::move(s), {.dtype = DType::f64}).to(d); }

}  // namespace

TEST_CASE("topk rows path (one block per row): every dtype, k = 1, 16, 256, rows of 129, 4097 and 8192") {
  FRESH_SEED();
  for (DType dt : test::all_dtypes) {
    const std::string name = to_string(dt);
    // Few distinct values: ties cut by k (the ballot ranking in position order).
    Tensor ties = randint(-5, 5, {40, 4097}).to(dt);
    check_topk("ties [40, 4097] " + name, ties, 16);
    check_topk("ties [40, 4097] " + name, ties, 1);
    if (dt == DType::boolean) continue;
    Tensor x = normal({300, 4097}).to(dt);  // f64/i64 rows of 4097 take the passes path
    check_topk("[300, 4097] " + name, x, 16);
    check_topk("[64, 129] " + name, normal({64, 129}).to(dt), 7);
    check_topk("[8, 8192] " + name, normal({8, 8192}).to(dt), 256);
  }
  // k = n on the rows path (n <= 256).
  check_topk("k = n [50, 200]", normal({50, 200}), 200);
}

TEST_CASE("topk passes path (rows split over blocks): long rows, several radix passes, ties across blocks") {
  FRESH_SEED();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
    const std::string name = to_string(dt);
    Tensor v = normal({1, 300001}, dt);
    check_topk("[1, 300001] " + name, v, 1);
    check_topk("[1, 300001] " + name, v, 1024);
    check_topk("[3, 100003] " + name, normal({3, 100003}, dt), 300);
  }
  // Ties straddling the k-th over many blocks: the per-block tie counts and their scan.
  check_topk("ties [2, 500000] i32", randint(-3, 3, {2, 500000}, {.dtype = DType::i32}), 1000);
  check_topk("ties [1, 600000] f32", randint(0, 2, {1, 600000}).to(DType::f32), 777);
  // Values equal in their top 24 bits: every radix pass of f32 runs (1 + j * 2^-23).
  Tensor close = add(mul(randint(0, 64, {1, 70000}).to(DType::f64), std::ldexp(1.0, -23)), 1.0).to(DType::f32);
  check_topk("top bits shared [1, 70000] f32", close, 500);
  check_topk("top bits shared [16, 3000] f32 (rows path)", close.reshape({-1}).narrow(0, 0, 48000).reshape({16, 3000}), 100);
  // 256 < k <= 1024 on short rows: the passes path with one block per row; k = n there.
  check_topk("k = n [20, 600]", normal({20, 600}), 600);
  check_topk("[500, 2000] k = 1000", normal({500, 2000}), 1000);
  // bool rows: one 8-bit pass, nearly everything tied.
  check_topk("bool [4, 20000]", randint(0, 2, {4, 20000}).to(DType::boolean), 700);
}

TEST_CASE("topk sort path and edges: rows of 1 and 128, k > 1024, k = 0, dims other than the last") {
  FRESH_SEED();
  check_topk("rows of 1", normal({64, 1}), 1);
  check_topk("rows of 128", normal({300, 128}), 128);
  check_topk("k = 2000 of 100000", normal({2, 100000}), 2000);
  check_topk("dim 0 of [5000, 7]", normal({5000, 7}), 9, 0);
  check_topk("dim 1 of [3, 5000, 2]", normal({3, 5000, 2}), 50, 1);
  ValuesIndices none = topk(normal({10, 300}).to(gpu()), 0);
  CHECK(none.values.shape() == Shape{10, 0});
  CHECK(none.indices.shape() == Shape{10, 0});
  CHECK(none.values.device() == gpu());
}

TEST_CASE("topk with NaN, +-inf and -0.0: sort's order (NaN largest, -0.0 == 0.0, ties by position)") {
  FRESH_SEED();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (std::int64_t n : {std::int64_t(5000), std::int64_t(150000)}) {  // the rows and passes paths
    Tensor x = normal({n}, DType::f64);
    Tensor pick = rand({n}, {.dtype = DType::f64});
    x = where(lt(pick, 0.05), full({}, nan, {.dtype = DType::f64}), x);
    x = where(logical_and(ge(pick, 0.05), lt(pick, 0.1)), full({}, -0.0, {.dtype = DType::f64}), x);
    x = where(logical_and(ge(pick, 0.1), lt(pick, 0.15)), full({}, 0.0, {.dtype = DType::f64}), x);
    x = where(logical_and(ge(pick, 0.15), lt(pick, 0.17)), full({}, inf, {.dtype = DType::f64}), x);
    x = where(logical_and(ge(pick, 0.17), lt(pick, 0.19)), full({}, -inf, {.dtype = DType::f64}), x);
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const std::string name = "n=" + std::to_string(n) + " " + to_string(dt);
      Tensor xt = x.to(dt);
      check_topk("specials " + name, xt, 10);                // inside the NaN run (largest)
      check_topk("specials " + name, xt, n / 20 + 40);       // past it
      check_topk("specials " + name, xt, n < 10000 ? 256 : 1024);
    }
  }
  // The zeros straddling k: -0.0 and 0.0 are one value, so the first by position win.
  Tensor z = Tensor::from_vector(std::vector<double>(3000, 0.0));
  z = where(lt(rand({3000}, {.dtype = DType::f64}), 0.5), full({}, -0.0, {.dtype = DType::f64}), z).to(DType::f32);
  check_topk("signed zeros", z, 100);
}

TEST_CASE("topk gradient through the new paths") {
  FRESH_SEED();
  for (Shape s : {Shape{30, 3000}, Shape{2, 50000}})
    test::parity("topk grad " + to_string(s), [](const In& i) { return topk(i[0], 40, 1).values; },
                 {normal(s, DType::f64)}, true, exact);
}

TEST_CASE("chunked scans: long rows, a vector over 2^24, within the rounding bound and the same bits twice") {
  FRESH_SEED();
  struct Case {
    Shape shape;
    DType dtype;
  };
  const std::vector<Case> cases = {{{1, (1 << 24) + 3}, DType::f32}, {{3, 70001}, DType::f32},
                                   {{3, 70001}, DType::bf16},        {{2, 50000}, DType::f64},
                                   {{1000, 1024}, DType::f32},       {{17, 4097}, DType::f16},
                                   {{5, 300}, DType::f32}};
  for (const Case& c : cases) {
    Tensor x = normal(c.shape, c.dtype);
    Tensor xg = x.to(gpu());
    for (test::ScanKind kind : {test::ScanKind::cumsum, test::ScanKind::logcumsumexp}) {
      const bool sum = kind == test::ScanKind::cumsum;
      const std::string what = (sum ? "cumsum " : "logcumsumexp ") + to_string(c.shape) + " " + to_string(c.dtype);
      INFO(what);
      Tensor g = sum ? cumsum(xg, 1) : logcumsumexp(xg, 1);
      REQUIRE(g.shape() == c.shape);
      CHECK(g.dtype() == c.dtype);
      const std::string err = test::scan_bound_violation(g, x, 1, kind);
      CHECK_MESSAGE(err.empty(), err);
      check_same_bits(sum ? cumsum(xg, 1) : logcumsumexp(xg, 1), g, what);
    }
  }
  // cumprod of values near 1 (f64: the CPU's sequential product and the GPU's tree).
  Tensor p = add(mul(rand({4, 30000}, {.dtype = DType::f64}), 2e-4), 1.0 - 1e-4);
  test::parity("cumprod [4, 30000] f64", [](const In& i) { return cumprod(i[0], 1); }, {p}, false,
               test::close_options(test::Computed::accumulated, DType::f64));
  // Integers are exact in any order.
  test::parity("cumsum i64 [2, 3000001]", [](const In& i) { return cumsum(i[0], 1); },
               {randint(-1000, 1000, {2, 3000001}, {.dtype = DType::i64})}, false, exact);
  // -0.0 stays -0.0 (the scan starts from -0.0, cumsum's identity, not from 0.0).
  Tensor negz = full({5000}, -0.0);
  Tensor sg = cumsum(negz.to(gpu()), 0).to(Device::cpu());
  const std::vector<float> h = sg.to_host<float>();
  CHECK(std::signbit(h.front()));
  CHECK(std::signbit(h.back()));
}

TEST_CASE("batch_norm split statistics: N*M not a multiple of the split, M = 1, M below the block, same bits twice") {
  FRESH_SEED();
  const std::vector<Shape> shapes = {{7, 3, 3001}, {50000, 3}, {300, 4, 37}, {32, 64, 56, 56}, {2, 5, 4097}};
  for (const Shape& s : shapes)
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      if (s.size() == 4 && dt != DType::f32) continue;  // the benchmark's shape: f32 only
      const std::string what = to_string(s) + " " + to_string(dt);
      INFO(what);
      const std::int64_t c = s[1];
      // An offset from 0: the one-pass variance must not cancel. (Not much larger: the f32
      // mean itself rounds to ulp(offset), and that difference reaches the output.)
      Tensor x = add(normal(s, DType::f64), 4.0).to(dt);
      Tensor w = normal({c}, dt), b = normal({c}, dt);
      const DType st = dt == DType::f64 ? DType::f64 : DType::f32;
      Tensor rm_c = normal({c}, st), rv_c = add(abs(normal({c}, st)), 0.5);
      Tensor rm_g = rm_c.to(gpu()), rv_g = rv_c.to(gpu());
      test::parity(
          "batch_norm train " + what,
          [&](const In& in) {
            const bool on_gpu = in[0].device() == gpu();
            return batch_norm(in[0], on_gpu ? rm_g : rm_c, on_gpu ? rv_g : rv_c, in[1], in[2], true, 0.2);
          },
          {x, w, b}, true, {}, tol);
      test::check_parity(rm_g, rm_c, "running_mean " + what, tol(st));
      test::check_parity(rv_g, rv_c, "running_var " + what, tol(st));
      Tensor xg = x.to(gpu()), wg = w.to(gpu()), bg = b.to(gpu());
      check_same_bits(batch_norm(xg, {}, {}, wg, bg, true), batch_norm(xg, {}, {}, wg, bg, true), what);
    }
}

TEST_CASE("im2col / col2im: unfold, fold and conv_transpose2d with skipping taps (stride, dilation, padding)") {
  FRESH_SEED();
  struct Case {
    std::array<std::int64_t, 2> k, d, p, s;
  };
  const std::vector<Case> cases = {
      {{4, 4}, {1, 1}, {1, 1}, {2, 2}}, {{3, 5}, {2, 1}, {2, 0}, {2, 3}}, {{3, 3}, {3, 2}, {1, 2}, {2, 4}},
      {{5, 2}, {2, 3}, {0, 1}, {3, 2}}, {{1, 1}, {1, 1}, {0, 0}, {1, 1}}, {{2, 3}, {1, 2}, {0, 1}, {1, 1}},
  };
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::f64}) {
      const std::string what = "k " + std::to_string(c.k[0]) + "x" + std::to_string(c.k[1]) + " d " +
                                std::to_string(c.d[0]) + "," + std::to_string(c.d[1]) + " p " + std::to_string(c.p[0]) +
                                "," + std::to_string(c.p[1]) + " s " + std::to_string(c.s[0]) + "," +
                                std::to_string(c.s[1]) + " " + to_string(dt);
      Tensor x = normal({3, 5, 17, 13}, dt);
      // unfold's backward is fold (col2im), fold's is unfold (im2col).
      test::parity("unfold " + what, [c](const In& i) { return unfold(i[0], c.k, c.d, c.p, c.s); }, {x}, true, {}, tol);
      Tensor cols = unfold(x, c.k, c.d, c.p, c.s);
      test::parity("fold " + what, [c](const In& i) { return fold(i[0], {17, 13}, c.k, c.d, c.p, c.s); }, {cols}, true,
                   {}, tol);
      // A column operand that is a transposed view (col2im reads any strides).
      Tensor tcols = cols.transpose(1, 2).contiguous().transpose(1, 2);
      test::parity("fold strided " + what, [c](const In& i) { return fold(i[0], {17, 13}, c.k, c.d, c.p, c.s); },
                   {tcols}, false, {}, tol);
    }
  // DCGAN's upsampling layer at a smaller batch, and one with groups and output_padding.
  test::parity(
      "conv_transpose2d k4s2p1",
      [](const In& i) { return conv_transpose2d(i[0], i[1], i[2], {.stride = {2, 2}, .padding = {1, 1}}); },
      {normal({4, 32, 16, 16}), mul(normal({32, 16, 4, 4}), 0.1), normal({16})}, true, tol(DType::f32));
  test::parity(
      "conv_transpose2d groups, output_padding, dilation",
      [](const In& i) {
        return conv_transpose2d(i[0], i[1], {},
                                {.stride = {3, 2}, .padding = {2, 1}, .output_padding = {1, 0}, .groups = 2,
                                 .dilation = {2, 2}});
      },
      {normal({2, 4, 9, 7}, DType::f64), normal({4, 3, 3, 4}, DType::f64)}, true, {}, tol);
  Tensor big = normal({8, 64, 16, 16}).to(gpu()), wt = mul(normal({64, 32, 4, 4}), 0.05).to(gpu());
  check_same_bits(conv_transpose2d(big, wt, {}, {.stride = {2, 2}, .padding = {1, 1}}),
                  conv_transpose2d(big, wt, {}, {.stride = {2, 2}, .padding = {1, 1}}), "conv_transpose2d");
}
