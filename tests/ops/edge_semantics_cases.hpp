// The cases of the edge-semantics suites (issue 9; docs/semantics.md), written once and run
// on a given device: tests/ops/test_edge_semantics.cpp runs them on the CPU,
// tests/gpu/test_edge_semantics_parity.cpp on CUDA, where it also compares what they return
// with the CPU's results. Each case checks PyTorch 2.11's values: hand-computed ones, or a
// float64 reference computed here from the input's host values (after rounding to the
// dtype). The random cases return their outputs and gradients (Results) for that comparison.
//
// Include AFTER `import brrr;` and tests/tensor/helpers.hpp, in a doctest file that has
// already included <doctest/doctest.h>, <algorithm>, <array>, <cmath>, <cstdint>,
// <functional>, <limits>, <memory>, <random>, <sstream>, <string> and <vector>.
#pragma once

namespace edge {

using namespace brrr;
using namespace test;
using V = std::vector<double>;

inline constexpr double inf = std::numeric_limits<double>::infinity();
inline constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
inline constexpr DType float_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

struct Tol {
  double rtol = 0, atol = 0;
};
inline constexpr Tol exact{};

/// Rounding of one result in `d` (the CPU computes in double and rounds once; CUDA computes
/// bf16/f16/f32 in f32).
inline Tol tol_of(DType d) {
  switch (d) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f32: return {2e-5, 2e-6};
    case DType::f16: return {2e-3, 2e-3};
    case DType::bf16: return {1.6e-2, 1e-2};
    case DType::i32: case DType::i64: case DType::boolean: break;
  }
  return exact;
}

/// NaN matches only NaN, an infinity only the same infinity, finite values within tolerance.
inline bool same_value(double got, double want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (!std::isfinite(got)) return false;
  return std::abs(got - want) <= t.atol + t.rtol * std::abs(want);
}

inline void expect(const V& got, const V& want, Tol t, const std::string& what) {
  INFO(what);
  CHECK(got.size() == want.size());
  if (got.size() != want.size()) return;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (same_value(got[i], want[i], t)) continue;
    if (++bad <= 4) CHECK_MESSAGE(false, "element " << i << ": got " << got[i] << ", want " << want[i]);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " elements differ");
}

inline void expect(const Tensor& got, const V& want, Tol t, const std::string& what) {
  expect(values(got), want, t, what);
}

/// make() for any shape, 0-d included (make() reads an empty shape as 1-D).
inline Tensor make_as(DType dt, const V& v, const Shape& shape) {
  return shape.empty() ? make(dt, v).reshape({}) : make(dt, v, shape);
}

/// A fresh leaf requiring grad on `dev` holding `v` rounded to `dt`.
inline Tensor leaf(DType dt, const V& v, const Shape& shape, Device dev) {
  Tensor t = make_as(dt, v, shape).to(dev);
  t.requires_grad_();
  return t;
}

inline V normal(std::mt19937_64& rng, std::size_t n, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  V v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

using test::numel_of;

inline std::string name_of(DType d) { return to_string(d); }

/// Named tensors a random case produced (outputs and gradients), for the CPU/GPU comparison.
struct Result {
  std::string what;
  Tensor value;
};
using Results = std::vector<Result>;

// ===========================================================================================
// 1. softmax / log_softmax with infinities
// ===========================================================================================

/// PyTorch's softmax of one row in double: NaN or +inf anywhere, or every element -inf,
/// makes the row NaN; -inf elements of a row with a finite max give exactly 0 (-inf).
inline V softmax_row_ref(const V& row, bool log) {
  double m = -inf;
  bool poisoned = false;
  for (double v : row) {
    if (std::isnan(v) || v == inf) poisoned = true;
    m = std::max(m, v);
  }
  if (poisoned || m == -inf) return V(row.size(), nan_v);
  double s = 0;
  for (double v : row) s += std::exp(v - m);
  V out(row.size());
  for (std::size_t c = 0; c < row.size(); ++c) out[c] = log ? row[c] - m - std::log(s) : std::exp(row[c] - m) / s;
  return out;
}

inline V softmax_ref(const V& x, std::int64_t cols, bool log) {
  V out;
  for (std::size_t r = 0; r * static_cast<std::size_t>(cols) < x.size(); ++r) {
    auto first = x.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(cols));
    V row(first, first + cols);
    V y = softmax_row_ref(row, log);
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

/// The values, every floating dtype, along the last dim and along dim 0, with the
/// gradients of the [0, -inf] row.
inline void softmax_exact_values(Device dev) {
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    Tensor all_neg = make(dt, {-inf, -inf, -inf}, {3}).to(dev);
    expect(softmax(all_neg, 0), {nan_v, nan_v, nan_v}, exact, "softmax([-inf, -inf, -inf])");
    expect(log_softmax(all_neg, 0), {nan_v, nan_v, nan_v}, exact, "log_softmax([-inf, -inf, -inf])");
    Tensor one_neg = make(dt, {0, -inf}, {2}).to(dev);
    expect(softmax(one_neg), {1, 0}, exact, "softmax([0, -inf])");
    expect(log_softmax(one_neg), {0, -inf}, exact, "log_softmax([0, -inf])");
    Tensor pos = make(dt, {0, inf}, {2}).to(dev);
    expect(softmax(pos), {nan_v, nan_v}, exact, "softmax([0, inf])");
    expect(log_softmax(pos), {nan_v, nan_v}, exact, "log_softmax([0, inf])");
    // The same rows as the columns of a [2, 3] tensor, reduced along dim 0.
    Tensor cols = make(dt, {0, 0, -inf, -inf, inf, -inf}, {2, 3}).to(dev);
    expect(softmax(cols, 0), {1, nan_v, nan_v, 0, nan_v, nan_v}, exact, "softmax along dim 0");
    expect(log_softmax(cols, 0), {0, nan_v, nan_v, -inf, nan_v, nan_v}, exact, "log_softmax along dim 0");
    // Gradients at [0, -inf] with g = [0.5, 2]: softmax y (g - <g, y>) = [0, 0];
    // log_softmax g - exp(y) sum(g) = [-2, 2]. Exact in every dtype.
    for (bool log : {false, true}) {
      Tensor x = leaf(dt, {0, -inf}, {2}, dev);
      Tensor g = make(dt, {0.5, 2}, {2}).to(dev);
      (log ? log_softmax(x) : softmax(x)).backward(g);
      expect(x.grad(), log ? V{-2, 2} : V{0, 0}, exact, log ? "log_softmax'([0, -inf])" : "softmax'([0, -inf])");
    }
  }
}

/// Rows with -inf at random positions (and a row of all -inf, one with +inf, one with NaN)
/// against the float64 reference: softmax and log_softmax along dim 1 and (through a
/// transposed view) along dim 0; -inf gives exactly 0 (-inf); for f32/f64 the gradients too.
inline Results softmax_random_rows(Device dev, DType dt, std::int64_t cols, std::uint64_t seed) {
  INFO("dtype ", name_of(dt), ", cols ", cols, " on ", dev.str());
  std::mt19937_64 rng(seed);
  const std::int64_t rows = 8;
  const auto ucols = static_cast<std::size_t>(cols);
  V x = normal(rng, static_cast<std::size_t>(rows) * ucols, 3.0);
  std::uniform_int_distribution<std::size_t> pick(0, ucols - 1);
  std::bernoulli_distribution half(0.5);
  auto at = [&](std::int64_t r, std::size_t c) -> double& { return x[static_cast<std::size_t>(r) * ucols + c]; };
  for (std::size_t c = 0; c < ucols; ++c) at(0, c) = -inf;                        // all -inf: NaN
  for (std::size_t c = 0; c < ucols; ++c) if (half(rng)) at(1, c) = -inf;         // random -inf
  at(1, pick(rng)) = 0.25;                                                        // at least one finite
  for (std::size_t c = 0; c < ucols; ++c) at(2, c) = -inf;                        // a single finite
  at(2, pick(rng)) = -3.0;
  at(3, pick(rng)) = -inf;                                                        // one -inf
  at(4, pick(rng)) = inf;                                                         // +inf: NaN row
  at(5, pick(rng)) = nan_v;                                                       // NaN row
  for (std::size_t c = 0; c < ucols; ++c) at(7, c) = half(rng) ? -inf : at(7, c) + 300;  // large + -inf
  at(7, pick(rng)) = 300;
  Tensor xt = make(dt, x, {rows, cols});
  const V xr = values(xt);  // the inputs as rounded to dt
  Tensor xd = xt.to(dev);
  Results out;
  for (bool log : {false, true}) {
    const std::string op = log ? "log_softmax" : "softmax";
    const V want = softmax_ref(xr, cols, log);
    Tensor y = log ? log_softmax(xd, 1) : softmax(xd, 1);
    const V got = values(y);
    expect(got, want, tol_of(dt), op + " dim 1");
    // Exact zeros (-inf) where the input is -inf in a row with a finite max.
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < xr.size(); ++i)
      if (xr[i] == -inf && !std::isnan(want[i]) && got[i] != (log ? -inf : 0.0)) ++wrong;
    CHECK_MESSAGE(wrong == 0, (op + ": " + std::to_string(wrong) + " elements at -inf are not exactly " + (log ? "-inf" : "0")));
    Tensor yt = log ? log_softmax(xd.transpose(0, 1), 0) : softmax(xd.transpose(0, 1), 0);
    expect(values(yt.transpose(0, 1).contiguous()), want, tol_of(dt), op + " dim 0 of the transpose");
    out.push_back({op + " forward", y});
  }
  if (dt == DType::f32 || dt == DType::f64) {
    const V g = normal(rng, xr.size());
    for (bool log : {false, true}) {
      const std::string op = log ? "log_softmax'" : "softmax'";
      Tensor xl = leaf(dt, xr, {rows, cols}, dev);
      (log ? log_softmax(xl, 1) : softmax(xl, 1)).backward(make(dt, g, {rows, cols}).to(dev));
      const V y = softmax_ref(xr, cols, log);
      V want(y.size());
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::size_t b = static_cast<std::size_t>(r) * ucols;
        double s = 0;
        for (std::size_t c = 0; c < ucols; ++c) s += log ? g[b + c] : g[b + c] * y[b + c];
        for (std::size_t c = 0; c < ucols; ++c)
          want[b + c] = log ? g[b + c] - std::exp(y[b + c]) * s : y[b + c] * (g[b + c] - s);
      }
      expect(xl.grad(), want, dt == DType::f64 ? Tol{1e-10, 1e-12} : Tol{1e-4, 2e-6}, op);
      out.push_back({op, xl.grad()});
    }
  }
  return out;
}

// ===========================================================================================
// 2. Empty means and all-ignored cross_entropy
// ===========================================================================================

/// mean of zero elements is NaN, sum 0, for every floating dtype and several shapes/dims;
/// integer and bool sums of nothing are i64 0; mse_loss of nothing is NaN (mean) and 0 (sum).
inline void empty_means_and_sums(Device dev) {
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    TensorOptions o{.dtype = dt, .device = dev};
    Tensor e = zeros({0}, o);
    Tensor m = mean(e), s = sum(e);
    CHECK(m.dim() == 0);
    CHECK(m.dtype() == dt);
    CHECK(s.dtype() == dt);
    expect(m, {nan_v}, exact, "mean([])");
    expect(s, {0}, exact, "sum([])");
    Tensor e2 = zeros({3, 0}, o);
    CHECK(mean(e2, {1}).shape() == Shape{3});
    expect(mean(e2, {1}), {nan_v, nan_v, nan_v}, exact, "mean([3, 0], dim 1)");
    expect(sum(e2, {1}), {0, 0, 0}, exact, "sum([3, 0], dim 1)");
    CHECK(mean(e2, {1}, true).shape() == Shape{3, 1});
    CHECK(mean(e2, {0}).shape() == Shape{0});
    expect(mean(e2), {nan_v}, exact, "mean([3, 0])");
    Tensor e3 = zeros({2, 0, 4}, o);
    expect(mean(e3, {0, 1}), V(4, nan_v), exact, "mean([2, 0, 4], dims 0, 1)");
    expect(sum(e3, {0, 1}), V(4, 0.0), exact, "sum([2, 0, 4], dims 0, 1)");
    CHECK(mean(e3, {2}).shape() == Shape{2, 0});
    expect(mse_loss(e, e), {nan_v}, exact, "mse_loss mean of nothing");
    expect(mse_loss(e, e, Reduction::sum), {0}, exact, "mse_loss sum of nothing");
    // The gradient of an empty mean is an empty gradient.
    Tensor l = leaf(dt, {}, {3, 0}, dev);
    mean(l, {1}).sum().backward();
    CHECK(l.grad().shape() == Shape{3, 0});
  }
  for (DType dt : {DType::i32, DType::i64, DType::boolean}) {
    INFO("dtype ", name_of(dt));
    Tensor s = sum(zeros({0}, {.dtype = dt, .device = dev}));
    CHECK(s.dtype() == DType::i64);
    CHECK(s.item<std::int64_t>() == 0);
    CHECK(values(sum(zeros({3, 0}, {.dtype = dt, .device = dev}), {1})) == V{0, 0, 0});
  }
}

/// Every target equal to ignore_index: mean NaN with an all-zero gradient, sum 0, none zeros;
/// for every floating dtype, i32/i64 targets, [N, C], [1, C], [N, C, d], [C] with a 0-d
/// target, an empty batch, a custom ignore_index inside [0, C), with and without label
/// smoothing. Then partly ignored batches against the float64 reference.
inline Results cross_entropy_ignored(Device dev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  struct Case {
    Shape logits, target;
  };
  const std::vector<Case> cases = {{{4, 5}, {4}}, {{1, 5}, {1}}, {{2, 5, 3}, {2, 3}}, {{5}, {}}, {{0, 5}, {0}}};
  for (DType dt : float_dtypes) {
    for (DType tdt : {DType::i64, DType::i32}) {
      for (std::int64_t ignore : {std::int64_t{-100}, std::int64_t{2}}) {
        for (double smoothing : {0.0, 0.1}) {
          for (const Case& c : cases) {
            INFO("dtype ", name_of(dt), ", target ", name_of(tdt), ", ignore_index ", ignore, ", smoothing ",
                 smoothing, ", logits ", to_string(c.logits), " on ", dev.str());
            const std::size_t n = static_cast<std::size_t>(numel_of(c.logits));
            const V lv = normal(rng, n, 2.0);
            Tensor target = full(c.target, static_cast<double>(ignore), {.dtype = tdt, .device = dev});
            for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
              Tensor x = leaf(dt, lv, c.logits, dev);
              Tensor l = cross_entropy(x, target, {.reduction = red, .ignore_index = ignore, .label_smoothing = smoothing});
              CHECK(l.dtype() == dt);
              if (red == Reduction::none) {
                CHECK(l.shape() == c.target);
                expect(l, V(static_cast<std::size_t>(numel_of(c.target)), 0.0), exact, "none: zeros");
                l.backward(ones_like(l));
              } else {
                CHECK(l.dim() == 0);
                expect(l, {red == Reduction::mean ? nan_v : 0.0}, exact, red == Reduction::mean ? "mean: NaN" : "sum: 0");
                l.backward();
              }
              CHECK(x.grad().shape() == c.logits);
              expect(x.grad(), V(n, 0.0), exact, "gradient: all zeros, no NaN");
            }
          }
        }
      }
    }
  }
  // Partly ignored: mean over the non-ignored targets only, ignored rows get no gradient.
  Results out;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype ", name_of(dt), " partly ignored on ", dev.str());
    const std::int64_t N = 37, C = 11, ignore = 3;
    const V lv = normal(rng, static_cast<std::size_t>(N * C), 2.0);
    std::vector<double> tv(static_cast<std::size_t>(N));
    std::uniform_int_distribution<int> cls(0, static_cast<int>(C) - 1);
    for (auto& t : tv) t = cls(rng);
    tv[0] = ignore;
    const V lr = values(make(dt, lv, {N, C}));
    double total = 0, count = 0;
    V grad(lr.size(), 0.0);
    for (std::int64_t i = 0; i < N; ++i) {
      const auto b = static_cast<std::size_t>(i * C);
      V row(lr.begin() + static_cast<std::ptrdiff_t>(b), lr.begin() + static_cast<std::ptrdiff_t>(b + C));
      V lp = softmax_row_ref(row, true);
      const auto t = static_cast<std::int64_t>(tv[static_cast<std::size_t>(i)]);
      if (t == ignore) continue;
      total -= lp[static_cast<std::size_t>(t)];
      count += 1;
      for (std::int64_t k = 0; k < C; ++k)
        grad[b + static_cast<std::size_t>(k)] = std::exp(lp[static_cast<std::size_t>(k)]) - (k == t ? 1.0 : 0.0);
    }
    for (auto& g : grad) g /= count;
    Tensor x = leaf(dt, lr, {N, C}, dev);
    Tensor target = make(DType::i64, tv, {N}).to(dev);
    Tensor l = cross_entropy(x, target, {.ignore_index = ignore});
    expect(l, {total / count}, dt == DType::f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-6}, "partly ignored mean");
    l.backward();
    expect(x.grad(), grad, dt == DType::f64 ? Tol{1e-10, 1e-12} : Tol{1e-4, 1e-6}, "partly ignored gradient");
    expect(values(x.grad().select(0, 0)), V(static_cast<std::size_t>(C), 0.0), exact, "ignored row gets 0");
    out.push_back({"cross_entropy partly ignored " + name_of(dt), l});
    out.push_back({"cross_entropy partly ignored grad " + name_of(dt), x.grad()});
  }
  return out;
}

// ===========================================================================================
// 3. var / std: correction
// ===========================================================================================

/// One element per reduction: the default correction 1 gives NaN, correction 0 gives 0
/// (var and std), over all dims, given dims, 0-d inputs, keepdim; the gradients are NaN
/// with correction 1 and 0 with correction 0, as PyTorch's.
inline void var_std_single_element(Device dev) {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> dims;
  };
  const std::vector<Case> cases = {{{1}, {}}, {{}, {}}, {{5, 1}, {1}}, {{1, 4}, {0}}, {{2, 1, 3}, {1}}, {{3, 1}, {-1}},
                                   {{1, 1}, {0, 1}}};
  std::mt19937_64 rng(5);
  for (DType dt : float_dtypes) {
    for (const Case& c : cases) {
      for (bool keepdim : {false, true}) {
        INFO("dtype ", name_of(dt), ", shape ", to_string(c.shape), ", keepdim ", keepdim, " on ", dev.str());
        const std::size_t n = static_cast<std::size_t>(numel_of(c.shape));
        V v = normal(rng, n);
        auto input = [&] { return leaf(dt, v, c.shape, dev); };
        for (bool is_std : {false, true}) {
          for (double correction : {1.0, 0.0}) {
            INFO(std::string(is_std ? "std" : "var"), ", correction ", correction);
            Tensor x = input();
            Tensor r = is_std ? brrr::std(x, c.dims, correction, keepdim) : var(x, c.dims, correction, keepdim);
            CHECK(r.dtype() == dt);
            const std::size_t outs = static_cast<std::size_t>(r.numel());
            expect(r, V(outs, correction == 1 ? nan_v : 0.0), exact, "value");
            r.sum().backward();
            // Correction 0: var's 2 / 1 * (x - mean) = 0, and std's gradient is 0 where std is 0
            // (PyTorch's std_backward). Correction 1: NaN (0 * inf in var_backward).
            const bool zero = correction == 0;
            expect(x.grad(), V(n, zero ? 0.0 : nan_v), exact, "gradient");
          }
        }
      }
    }
  }
}

/// N - correction <= 0 with unequal values divides by 0: inf (NaN when the values are
/// equal); fractional corrections; PyTorch's gradients there (all dims: g * (x == mean ?
/// NaN : inf); given dims: 2 / (N - correction) * g * (x - mean)).
inline void var_std_degrees_of_freedom(Device dev) {
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    Tensor x = make(dt, {1, 5}, {2}).to(dev);
    expect(var(x, {}, 2), {inf}, exact, "var([1, 5], correction 2)");
    expect(var(x, {}, 3), {inf}, exact, "var([1, 5], correction 3)");
    expect(brrr::std(x, {}, 2), {inf}, exact, "std([1, 5], correction 2)");
    expect(var(x.view({1, 2}), {1}, 2), {inf}, exact, "var([[1, 5]], dim 1, correction 2)");
    expect(var(make(dt, {2, 2}, {2}).to(dev), {}, 2), {nan_v}, exact, "var([2, 2], correction 2)");
    expect(var(make(dt, {2, 2}, {2}).to(dev), {}, 5), {nan_v}, exact, "var([2, 2], correction 5)");
    Tensor y = make(dt, {1, 2, 3, 4}, {4}).to(dev);
    expect(var(y, {}, 0.5), {5.0 / 3.5}, tol_of(dt), "var([1, 2, 3, 4], correction 0.5)");
    expect(brrr::std(y, {}, 1.5), {std::sqrt(5.0 / 2.5)}, tol_of(dt), "std([1, 2, 3, 4], correction 1.5)");
    expect(var(y, {}, -1), {5.0 / 5}, tol_of(dt), "var([1, 2, 3, 4], correction -1)");

    // Gradients.
    Tensor a = leaf(dt, {1, 5}, {2}, dev);
    var(a, {}, 2).backward();
    expect(a.grad(), {inf, inf}, exact, "var'([1, 5], all dims, correction 2)");
    Tensor b = leaf(dt, {1, 3, 5}, {3}, dev);
    var(b, {}, 3).backward();
    expect(b.grad(), {inf, nan_v, inf}, exact, "var'([1, 3, 5], all dims, correction 3)");
    Tensor c = leaf(dt, {1, 5}, {1, 2}, dev);
    var(c, {1}, 2).sum().backward();
    expect(c.grad(), {-inf, inf}, exact, "var'([[1, 5]], dim 1, correction 2)");
    Tensor d = leaf(dt, {1, 5}, {1, 2}, dev);
    var(d, {1}, 3).sum().backward();
    expect(d.grad(), {4, -4}, exact, "var'([[1, 5]], dim 1, correction 3): 2 / (2 - 3) (x - mean)");
    Tensor e = leaf(dt, {1, 2, 3, 4}, {4}, dev);
    var(e, {}, 0.5).backward();
    expect(e.grad(), {-1.5 / 1.75, -0.5 / 1.75, 0.5 / 1.75, 1.5 / 1.75}, tol_of(dt), "var'([1, 2, 3, 4], correction 0.5)");
  }
  CHECK_BRRR_ERROR(var(ones({3}, {.device = dev}), {}, nan_v), ErrorKind::value, "var", "correction");
  CHECK_BRRR_ERROR(brrr::std(ones({3}, {.device = dev}), {}, inf), ErrorKind::value, "var", "correction");
}

/// Random [4, 3, 5] inputs, several dims sets and corrections (some with N - correction <= 0),
/// against the float64 reference, values and gradients.
inline Results var_std_random(Device dev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Shape shape{4, 3, 5};
  Results out;
  const std::vector<std::vector<std::int64_t>> dims_sets = {{}, {1}, {0, 2}, {0, 1, 2}, {-1}};
  for (DType dt : {DType::f64, DType::f32}) {
    const V xv = values(make(dt, normal(rng, 60, 2.0), shape));
    for (const auto& dims : dims_sets) {
      std::uint32_t mask = 0;
      for (auto d : dims) mask |= 1u << ((d + 3) % 3);
      if (dims.empty()) mask = 7;
      for (double correction : {0.0, 1.0, 2.5, 3.0, 4.0, 5.0, 60.0, 61.0}) {
        INFO("dtype ", name_of(dt), ", dims mask ", mask, ", correction ", correction, " on ", dev.str());
        // Reference: group the elements by output position (row-major over kept dims).
        const std::int64_t sz[3] = {4, 3, 5};
        std::int64_t n = 1;
        for (int d = 0; d < 3; ++d)
          if (mask & (1u << d)) n *= sz[d];
        auto out_index = [&](std::int64_t i, std::int64_t j, std::int64_t k) {
          std::int64_t idx[3] = {i, j, k}, o = 0;
          for (int d = 0; d < 3; ++d)
            if (!(mask & (1u << d))) o = o * sz[d] + idx[d];
          return static_cast<std::size_t>(o);
        };
        const std::size_t outs = static_cast<std::size_t>(60 / n);
        V mean_v(outs, 0.0), ss(outs, 0.0);
        for (std::int64_t i = 0, f = 0; i < 4; ++i)
          for (std::int64_t j = 0; j < 3; ++j)
            for (std::int64_t k = 0; k < 5; ++k, ++f) mean_v[out_index(i, j, k)] += xv[static_cast<std::size_t>(f)] / static_cast<double>(n);
        for (std::int64_t i = 0, f = 0; i < 4; ++i)
          for (std::int64_t j = 0; j < 3; ++j)
            for (std::int64_t k = 0; k < 5; ++k, ++f) {
              double dlt = xv[static_cast<std::size_t>(f)] - mean_v[out_index(i, j, k)];
              ss[out_index(i, j, k)] += dlt * dlt;
            }
        const double dof = static_cast<double>(n) - correction;
        V want(outs);
        for (std::size_t o = 0; o < outs; ++o) want[o] = ss[o] / (dof > 0 ? dof : 0.0);
        const V gout = normal(rng, outs);
        V want_grad(60);
        for (std::int64_t i = 0, f = 0; i < 4; ++i)
          for (std::int64_t j = 0; j < 3; ++j)
            for (std::int64_t k = 0; k < 5; ++k, ++f) {
              const std::size_t o = out_index(i, j, k);
              const double dx = xv[static_cast<std::size_t>(f)] - mean_v[o];
              if (dims.empty() && dof <= 0) want_grad[static_cast<std::size_t>(f)] = gout[o] * (dx == 0 ? nan_v : inf);
              else want_grad[static_cast<std::size_t>(f)] = (dof == 0 ? inf : 2.0 / dof) * gout[o] * dx;
            }
        Tensor x = leaf(dt, xv, shape, dev);
        Tensor v = var(x, dims, correction);
        const Tol t = dt == DType::f64 ? Tol{1e-11, 1e-12} : Tol{5e-5, 5e-6};
        expect(v, want, t, "var");
        V want_std(outs);
        for (std::size_t o = 0; o < outs; ++o) want_std[o] = std::sqrt(want[o]);
        expect(brrr::std(x.detach(), dims, correction), want_std, t, "std");
        v.backward(make_as(dt, gout, v.shape()).to(dev));
        expect(x.grad(), want_grad, t, "var'");
        out.push_back({"var " + name_of(dt), v});
        out.push_back({"var' " + name_of(dt), x.grad()});
      }
    }
  }
  return out;
}

// ===========================================================================================
// 5. Gradients at kinks; ties of max/amax and max with indices
// ===========================================================================================

/// The values at x = 0 (and at the bounds), every floating dtype, plus NaN inputs
/// (gradient 0 for relu/abs/clamp) and clamp's odd bounds.
inline void kinks_exact(Device dev) {
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    auto grad_of = [&](const V& v, const std::function<Tensor(const Tensor&)>& f) {
      Tensor x = leaf(dt, v, {static_cast<std::int64_t>(v.size())}, dev);
      f(x).sum().backward();
      return values(x.grad());
    };
    const V x = {-1, 0, 2};
    expect(grad_of(x, [](const Tensor& t) { return relu(t); }), {0, 0, 1}, exact, "relu'");
    expect(grad_of(x, [](const Tensor& t) { return abs(t); }), {-1, 0, 1}, exact, "abs'");
    expect(grad_of(x, [](const Tensor& t) { return clamp_min(t, 0.0); }), {0, 1, 1}, exact, "clamp_min(x, 0)'");
    expect(grad_of({-1, 0, 3, 6, 7}, [](const Tensor& t) { return clamp(t, 0.0, 6.0); }), {0, 1, 1, 1, 0}, exact,
           "clamp(x, 0, 6)'");
    expect(grad_of({5, 6, 7}, [](const Tensor& t) { return clamp_max(t, 6.0); }), {1, 1, 0}, exact, "clamp_max(x, 6)'");
    // maximum(x, 0) with the zero a tensor of x's shape and a 0-d tensor (broadcast).
    for (bool zero_d : {false, true}) {
      for (bool is_max : {true, false}) {
        INFO((std::string(is_max ? "maximum" : "minimum") + (zero_d ? " with a 0-d zero" : " with zeros")));
        Tensor a = leaf(dt, x, {3}, dev);
        Tensor z = zero_d ? full({}, 0.0, {.dtype = dt, .device = dev}) : zeros({3}, {.dtype = dt, .device = dev});
        z.requires_grad_();
        (is_max ? maximum(a, z) : minimum(a, z)).sum().backward();
        expect(a.grad(), is_max ? V{0, 0.5, 1} : V{1, 0.5, 0}, exact, "d/dx");
        expect(z.grad(), zero_d ? V{1.5} : (is_max ? V{1, 0.5, 0} : V{0, 0.5, 1}), exact, "d/dzero");
      }
    }
    // Ties: full max / amax / min / amin split evenly; max/min over a dim -> the returned index.
    const V t = {1, 3, 3};
    expect(grad_of(t, [](const Tensor& v) { return max(v); }), {0, 0.5, 0.5}, exact, "max()'");
    expect(grad_of(t, [](const Tensor& v) { return amax(v, {0}); }), {0, 0.5, 0.5}, exact, "amax'");
    expect(grad_of({3, 1, 1}, [](const Tensor& v) { return min(v); }), {0, 0.5, 0.5}, exact, "min()'");
    expect(grad_of({3, 1, 1}, [](const Tensor& v) { return amin(v, {0}); }), {0, 0.5, 0.5}, exact, "amin'");
    expect(grad_of(t, [](const Tensor& v) { return max(v, 0).values; }), {0, 1, 0}, exact, "max(x, 0)'");
    expect(grad_of({3, 1, 1}, [](const Tensor& v) { return min(v, 0).values; }), {0, 1, 0}, exact, "min(x, 0)'");
    CHECK(max(make(dt, t, {3}).to(dev), 0).indices.item<std::int64_t>() == 1);
    // NaN inputs: abs and clamp pass no gradient (as PyTorch's masks), clamp with an explicit
    // infinite bound too; relu passes it (PyTorch's threshold_backward tests x <= 0).
    const V with_nan = {nan_v, -1, 1};
    expect(grad_of(with_nan, [](const Tensor& v) { return relu(v); }), {1, 0, 1}, exact, "relu'(NaN)");
    expect(grad_of(with_nan, [](const Tensor& v) { return abs(v); }), {0, -1, 1}, exact, "abs'(NaN)");
    expect(grad_of(with_nan, [](const Tensor& v) { return clamp(v, 0.0, 6.0); }), {0, 0, 1}, exact, "clamp'(NaN)");
    expect(grad_of(with_nan, [](const Tensor& v) { return clamp_min(v, -5.0); }), {0, 1, 1}, exact, "clamp_min'(NaN)");
    expect(grad_of(with_nan, [](const Tensor& v) { return clamp_max(v, 5.0); }), {0, 1, 1}, exact, "clamp_max'(NaN)");
    expect(grad_of(with_nan, [](const Tensor& v) { return clamp(v, -inf, inf); }), {0, 1, 1}, exact,
           "clamp(x, -inf, inf)'");
    // min > max: the value is max everywhere and the gradient 0 everywhere (PyTorch).
    Tensor odd = leaf(dt, {-1, 1.5, 3}, {3}, dev);
    Tensor oc = clamp(odd, 2.0, 1.0);
    expect(oc, {1, 1, 1}, exact, "clamp(x, 2, 1)");
    oc.sum().backward();
    expect(odd.grad(), {0, 0, 0}, exact, "clamp(x, 2, 1)'");
    // A min of +inf (max of -inf) is compared like any bound.
    expect(grad_of({1, inf}, [](const Tensor& v) { return clamp_min(v, inf); }), {0, 1}, exact, "clamp_min(x, inf)'");
    expect(grad_of({-inf, 1}, [](const Tensor& v) { return clamp_max(v, -inf); }), {1, 0}, exact,
           "clamp_max(x, -inf)'");
    expect(grad_of({-1, 1}, [](const Tensor& v) { return clamp(v, inf, 5.0); }), {0, 0}, exact, "clamp(x, inf, 5)'");
  }
}

/// Integer-valued random inputs (many ties): amax/amin over dims and max()/min() split the
/// gradient evenly among ties, max/min along a dim send it to the first index; maximum /
/// minimum split ties in half; every floating dtype.
inline Results ties_random(Device dev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Results out;
  const std::int64_t R = 6, C = 9;
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    const V xv = random_ints(rng, static_cast<std::size_t>(R * C), 0, 2);
    const V yv = random_ints(rng, static_cast<std::size_t>(R * C), 0, 2);
    const Tol t = tol_of(dt);
    auto at = [&](const V& v, std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>(r * C + c)]; };
    for (bool is_max : {true, false}) {
      auto better = [&](double a, double b) { return is_max ? a > b : a < b; };
      // over dim 1 (rows), dim 0 (columns) and all elements, with the upstream gradient g.
      for (int which = 0; which < 3; ++which) {
        INFO((std::string(is_max ? "amax" : "amin") + " over " + (which == 0 ? "dim 1" : which == 1 ? "dim 0" : "all dims")));
        const std::int64_t outs = which == 0 ? R : which == 1 ? C : 1;
        const V g = random_ints(rng, static_cast<std::size_t>(outs), 1, 4);
        auto out_of = [&](std::int64_t r, std::int64_t c) { return which == 0 ? r : which == 1 ? c : 0; };
        V best(static_cast<std::size_t>(outs), is_max ? -inf : inf), count(static_cast<std::size_t>(outs), 0.0);
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t c = 0; c < C; ++c) {
            auto o = static_cast<std::size_t>(out_of(r, c));
            if (better(at(xv, r, c), best[o])) best[o] = at(xv, r, c), count[o] = 0;
            if (at(xv, r, c) == best[o]) count[o] += 1;
          }
        V want(static_cast<std::size_t>(R * C), 0.0);
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t c = 0; c < C; ++c) {
            auto o = static_cast<std::size_t>(out_of(r, c));
            if (at(xv, r, c) == best[o]) want[static_cast<std::size_t>(r * C + c)] = g[o] / count[o];
          }
        Tensor x = leaf(dt, xv, {R, C}, dev);
        Tensor y = which == 2 ? (is_max ? max(x) : min(x))
                              : (is_max ? amax(x, {which == 0 ? 1 : 0}) : amin(x, {which == 0 ? 1 : 0}));
        expect(y, best, exact, "value");
        y.backward(make_as(dt, g, y.shape()).to(dev));
        expect(x.grad(), want, t, "gradient shared by ties");
        out.push_back({std::string(is_max ? "amax' " : "amin' ") + name_of(dt), x.grad()});
      }
      // Along a dim with indices: the first extreme gets all of g.
      for (std::int64_t dim : {0, 1}) {
        INFO(std::string(is_max ? "max" : "min"), " along dim ", dim);
        const std::int64_t outs = dim == 1 ? R : C, len = dim == 1 ? C : R;
        const V g = random_ints(rng, static_cast<std::size_t>(outs), 1, 4);
        V want(static_cast<std::size_t>(R * C), 0.0), want_idx(static_cast<std::size_t>(outs));
        for (std::int64_t o = 0; o < outs; ++o) {
          std::int64_t arg = 0;
          for (std::int64_t i = 1; i < len; ++i) {
            double cand = dim == 1 ? at(xv, o, i) : at(xv, i, o), cur = dim == 1 ? at(xv, o, arg) : at(xv, arg, o);
            if (better(cand, cur)) arg = i;
          }
          want_idx[static_cast<std::size_t>(o)] = static_cast<double>(arg);
          want[static_cast<std::size_t>(dim == 1 ? o * C + arg : arg * C + o)] = g[static_cast<std::size_t>(o)];
        }
        Tensor x = leaf(dt, xv, {R, C}, dev);
        ValuesIndices vi = is_max ? max(x, dim) : min(x, dim);
        CHECK(values(vi.indices) == want_idx);
        vi.values.backward(make_as(dt, g, vi.values.shape()).to(dev));
        expect(x.grad(), want, exact, "gradient to the returned index only");
        out.push_back({std::string(is_max ? "max(dim)' " : "min(dim)' ") + name_of(dt), x.grad()});
      }
      // maximum/minimum: the winner gets g, ties half each.
      {
        INFO(std::string(is_max ? "maximum" : "minimum"));
        Tensor x = leaf(dt, xv, {R, C}, dev), y = leaf(dt, yv, {R, C}, dev);
        (is_max ? maximum(x, y) : minimum(x, y)).sum().backward();
        V wx(xv.size()), wy(xv.size());
        for (std::size_t i = 0; i < xv.size(); ++i) {
          wx[i] = xv[i] == yv[i] ? 0.5 : better(xv[i], yv[i]) ? 1.0 : 0.0;
          wy[i] = 1.0 - wx[i];
        }
        expect(x.grad(), wx, exact, "d/dx");
        expect(y.grad(), wy, exact, "d/dy");
      }
    }
  }
  return out;
}

/// Random inputs away from the kinks (|x - kink| >= 0.05) with exact kink values at random
/// positions: relu, abs, clamp, clamp_min, maximum against their derivative, elementwise.
inline Results kinks_random(Device dev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Results out;
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    const std::size_t n = 200;
    V xv = normal(rng, n, 2.0);
    for (auto& v : xv) {
      for (double k : {0.0, -0.5, 0.5})
        if (std::abs(v - k) < 0.05) v = k + (v < k ? -0.05 : 0.05);
    }
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    for (int i = 0; i < 12; ++i) xv[pick(rng)] = (i % 3 == 0) ? 0.0 : (i % 3 == 1 ? -0.5 : 0.5);
    xv = values(make(dt, xv, {static_cast<std::int64_t>(n)}));
    const Shape s{10, 20};
    struct Op {
      const char* name;
      std::function<Tensor(const Tensor&)> f;
      std::function<double(double)> d;
    };
    const std::vector<Op> ops = {
        {"relu", [](const Tensor& t) { return relu(t); }, [](double v) { return v > 0 ? 1.0 : 0.0; }},
        {"abs", [](const Tensor& t) { return abs(t); }, [](double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }},
        {"clamp(-0.5, 0.5)", [](const Tensor& t) { return clamp(t, -0.5, 0.5); },
         [](double v) { return v >= -0.5 && v <= 0.5 ? 1.0 : 0.0; }},
        {"clamp_min(0.5)", [](const Tensor& t) { return clamp_min(t, 0.5); }, [](double v) { return v >= 0.5 ? 1.0 : 0.0; }},
        {"maximum(x, 0)", [](const Tensor& t) { return maximum(t, zeros_like(t)); },
         [](double v) { return v > 0 ? 1.0 : v == 0 ? 0.5 : 0.0; }},
    };
    const V g = values(make(dt, normal(rng, n), s));
    for (const Op& op : ops) {
      Tensor x = leaf(dt, xv, s, dev);
      op.f(x).backward(make(dt, g, s).to(dev));
      V want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = g[i] * op.d(xv[i]);
      expect(x.grad(), want, tol_of(dt), std::string(op.name) + "'");
      out.push_back({std::string(op.name) + "' " + name_of(dt), x.grad()});
    }
  }
  return out;
}

// ===========================================================================================
// 6. where() and NaN in the branch not taken
// ===========================================================================================

/// The example, the class (sqrt and log branches over random inputs with exact
/// zeros: NaN exactly where the untaken branch's derivative is infinite or NaN), and the
/// idiom that masks the input instead, whose gradient is finite everywhere.
inline Results where_nan(Device dev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Results out;
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    {
      Tensor x = leaf(dt, {-1, -4}, {2}, dev);
      Tensor y = where(gt(x, 0.0), sqrt(x), x);
      expect(y, {-1, -4}, exact, "where(x > 0, sqrt(x), x): no NaN forward");
      y.sum().backward();
      expect(x.grad(), {nan_v, nan_v}, exact, "its gradient: [nan, nan] (PyTorch)");
      Tensor z = leaf(dt, {-1, -4}, {2}, dev);
      Tensor ok = where(gt(z, 0.0), sqrt(where(gt(z, 0.0), z, 1.0)), z);
      expect(ok, {-1, -4}, exact, "masked input: same forward");
      ok.sum().backward();
      expect(z.grad(), {1, 1}, exact, "masked input: finite gradient");
    }
    const std::size_t n = 120;
    V xv = normal(rng, n, 2.0);
    for (auto& v : xv)  // 1 / x must stay finite in f16
      if (std::abs(v) < 0.05) v = std::copysign(0.05, v);
    for (std::size_t i = 0; i < n; i += 7) xv[i] = 0.0;
    xv = values(make(dt, xv, {static_cast<std::int64_t>(n)}));
    const Shape s{static_cast<std::int64_t>(n)};
    // sqrt branch: d/dx = 1 / (2 sqrt x) where x > 0, NaN where x <= 0 (0 / NaN or 0 / 0).
    {
      Tensor x = leaf(dt, xv, s, dev);
      Tensor y = where(gt(x, 0.0), sqrt(x), x);
      V yv = values(y);
      CHECK(std::none_of(yv.begin(), yv.end(), [](double v) { return std::isnan(v); }));
      y.sum().backward();
      V want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = xv[i] > 0 ? 0.5 / std::sqrt(xv[i]) : nan_v;
      expect(x.grad(), want, tol_of(dt), "where(x > 0, sqrt(x), x)'");
      out.push_back({"where sqrt' " + name_of(dt), x.grad()});
    }
    // log branch: d/dx = 1 / x where x > 0; 0 / x = -0 where x < 0 (finite); 0 / 0 = NaN at 0.
    {
      Tensor x = leaf(dt, xv, s, dev);
      where(gt(x, 0.0), log(x), 0.0).sum().backward();
      V want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = xv[i] > 0 ? 1.0 / xv[i] : xv[i] < 0 ? 0.0 : nan_v;
      expect(x.grad(), want, tol_of(dt), "where(x > 0, log(x), 0)'");
    }
    // Mask the input, not the output: finite everywhere.
    {
      Tensor x = leaf(dt, xv, s, dev);
      Tensor pos = gt(x, 0.0);
      add(where(pos, sqrt(where(pos, x, 1.0)), x), where(pos, log(where(pos, x, 1.0)), 0.0)).sum().backward();
      V want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = xv[i] > 0 ? 0.5 / std::sqrt(xv[i]) + 1.0 / xv[i] : 1.0;
      expect(x.grad(), want, tol_of(dt), "masked input'");
      out.push_back({"where masked' " + name_of(dt), x.grad()});
    }
  }
  return out;
}

// ===========================================================================================
// 7. max_pool2d / avg_pool2d with padding and ceil_mode
// ===========================================================================================

/// PyTorch's pooling_output_shape (Pool.h), written out here: floor or ceil of
/// (in + 2p - d (k - 1) - 1) / s, plus 1; with ceil_mode the last window must start inside
/// the input or the left padding.
inline std::int64_t torch_pool_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d,
                                   bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  auto out = static_cast<std::int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolCase {
  std::int64_t h, w, k, s, p, d;
  bool ceil_mode, count_include_pad;
};

/// max_pool2d over [planes, H, W] host values: the max of the real cells of each window
/// (-inf when there is none, possible only with dilation).
inline V max_pool_ref(const V& x, std::int64_t planes, const PoolCase& c, std::int64_t oh, std::int64_t ow) {
  V out;
  for (std::int64_t q = 0; q < planes; ++q)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        double m = -inf;
        for (std::int64_t a = 0; a < c.k; ++a)
          for (std::int64_t b = 0; b < c.k; ++b) {
            std::int64_t r = i * c.s - c.p + a * c.d, col = j * c.s - c.p + b * c.d;
            if (r >= 0 && r < c.h && col >= 0 && col < c.w)
              m = std::max(m, x[static_cast<std::size_t>((q * c.h + r) * c.w + col)]);
          }
        out.push_back(m);
      }
  return out;
}

/// avg_pool2d with PyTorch's divisor: the window clipped to the padded bounds (its area with
/// count_include_pad) or to the input (its real cells).
inline V avg_pool_ref(const V& x, std::int64_t planes, const PoolCase& c, std::int64_t oh, std::int64_t ow) {
  V out;
  for (std::int64_t q = 0; q < planes; ++q)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        std::int64_t h0 = i * c.s - c.p, w0 = j * c.s - c.p;
        std::int64_t h1 = std::min(h0 + c.k, c.h + c.p), w1 = std::min(w0 + c.k, c.w + c.p);
        const double padded = static_cast<double>((h1 - h0) * (w1 - w0));
        h0 = std::max<std::int64_t>(h0, 0), w0 = std::max<std::int64_t>(w0, 0);
        h1 = std::min(h1, c.h), w1 = std::min(w1, c.w);
        double s = 0;
        for (std::int64_t r = h0; r < h1; ++r)
          for (std::int64_t col = w0; col < w1; ++col) s += x[static_cast<std::size_t>((q * c.h + r) * c.w + col)];
        out.push_back(s / (c.count_include_pad ? padded : static_cast<double>((h1 - h0) * (w1 - w0))));
      }
  return out;
}

/// The three sizes with their values, every floating dtype, max and avg.
inline void pool_ceil_exact(Device dev) {
  for (DType dt : float_dtypes) {
    INFO("dtype ", name_of(dt), " on ", dev.str());
    // kernel 1, stride 2, ceil: every other cell, 6x7 -> 3x4 and 32x32 -> 16x16.
    for (auto [h, w, oh, ow] : {std::array<std::int64_t, 4>{6, 7, 3, 4}, std::array<std::int64_t, 4>{32, 32, 16, 16}}) {
      INFO("input ", h, "x", w);
      V xv = iota(h * w, -50.0);
      Tensor x = make(dt, xv, {1, 1, h, w}).to(dev);
      const V xr = values(x);
      V want;
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) want.push_back(xr[static_cast<std::size_t>(2 * i * w + 2 * j)]);
      Pool2dOptions o{.kernel_size = {1, 1}, .stride = std::array<std::int64_t, 2>{2, 2}, .ceil_mode = true};
      Tensor mp = max_pool2d(x, o), ap = avg_pool2d(x, o);
      CHECK(mp.shape() == Shape{1, 1, oh, ow});
      CHECK(ap.shape() == Shape{1, 1, oh, ow});
      expect(mp, want, exact, "max_pool2d");
      expect(ap, want, exact, "avg_pool2d");
    }
    // 5x5, kernel 2, stride 2, padding 1, ceil -> 3x3: windows rows/cols [-1, 1), [1, 3), [3, 5).
    V xv(25);
    for (std::size_t i = 0; i < 25; ++i) xv[i] = -1.0 - static_cast<double>((i * 7) % 25);  // all negative
    Tensor x = make(dt, xv, {1, 1, 5, 5}).to(dev);
    const V xr = values(x);
    Pool2dOptions o{.kernel_size = {2, 2}, .stride = std::array<std::int64_t, 2>{2, 2}, .padding = {1, 1}, .ceil_mode = true};
    const PoolCase pc{5, 5, 2, 2, 1, 1, true, true};
    Tensor mp = max_pool2d(x, o);
    CHECK(mp.shape() == Shape{1, 1, 3, 3});
    expect(mp, max_pool_ref(xr, 1, pc, 3, 3), exact, "max_pool2d 5x5 k2 s2 p1 ceil");
    V mv = values(mp);
    CHECK(std::none_of(mv.begin(), mv.end(), [](double v) { return std::isinf(v); }));
    for (bool include : {true, false}) {
      INFO("count_include_pad ", include);
      Pool2dOptions oa = o;
      oa.count_include_pad = include;
      PoolCase pa = pc;
      pa.count_include_pad = include;
      Tensor ap = avg_pool2d(x, oa);
      CHECK(ap.shape() == Shape{1, 1, 3, 3});
      expect(ap, avg_pool_ref(xr, 1, pa, 3, 3), tol_of(dt), "avg_pool2d 5x5 k2 s2 p1 ceil");
    }
  }
}

/// Many sizes, kernels, strides, paddings, dilations, both rounding modes: output sizes equal
/// PyTorch's formula (or the op throws Error(shape) when it gives < 1), values equal the
/// references, and no output is -inf unless a dilated window lies wholly in the padding.
inline Results pool_ceil_random(Device dev, DType dt, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> size(1, 11);
  Results out;
  std::int64_t checked = 0;
  for (std::int64_t k = 1; k <= 4; ++k)
    for (std::int64_t s = 1; s <= 3; ++s)
      for (std::int64_t p = 0; 2 * p <= k; ++p)
        for (std::int64_t d = 1; d <= 2; ++d)
          for (bool ceil_mode : {false, true}) {
            const PoolCase c{size(rng), size(rng), k, s, p, d, ceil_mode, std::bernoulli_distribution(0.5)(rng)};
            INFO("dtype ", name_of(dt), ", input ", c.h, "x", c.w, ", k ", k, ", s ", s, ", p ", p, ", d ", d,
                 ", ceil ", ceil_mode, ", count_include_pad ", c.count_include_pad, " on ", dev.str());
            const std::int64_t oh = torch_pool_out(c.h, k, s, p, d, ceil_mode);
            const std::int64_t ow = torch_pool_out(c.w, k, s, p, d, ceil_mode);
            const std::int64_t planes = 3;
            V xv = normal(rng, static_cast<std::size_t>(planes * c.h * c.w));
            for (auto& v : xv) v = -2.0 - std::abs(v);  // all negative: a -inf pad leak would show
            Tensor x = make(dt, xv, {1, planes, c.h, c.w}).to(dev);
            const V xr = values(x);
            Pool2dOptions o{.kernel_size = {k, k},
                            .stride = std::array<std::int64_t, 2>{s, s},
                            .padding = {p, p},
                            .dilation = {d, d},
                            .ceil_mode = ceil_mode,
                            .count_include_pad = c.count_include_pad};
            if (oh < 1 || ow < 1) {
              CHECK_BRRR_ERROR(max_pool2d(x, o), ErrorKind::shape, "max_pool2d", "too small");
              continue;
            }
            ++checked;
            Tensor mp = max_pool2d(x, o);
            CHECK(mp.shape() == Shape{1, planes, oh, ow});
            const V want = max_pool_ref(xr, planes, c, oh, ow);
            expect(mp, want, exact, "max_pool2d");
            if (d == 1) CHECK(std::none_of(want.begin(), want.end(), [](double v) { return std::isinf(v); }));
            out.push_back({"max_pool2d", mp});
            if (d == 1) {
              o.dilation = {1, 1};
              Tensor ap = avg_pool2d(x, o);
              CHECK(ap.shape() == Shape{1, planes, oh, ow});
              expect(ap, avg_pool_ref(xr, planes, c, oh, ow), tol_of(dt), "avg_pool2d");
              out.push_back({"avg_pool2d", ap});
            }
          }
  CHECK(checked > 30);
  return out;
}

// ===========================================================================================
// 8. embedding with padding_idx
// ===========================================================================================

/// Embedding(3, 2, padding_idx 0) on [0, 1, 0, 2] with loss = sum: weight.grad [[0, 0],
/// [1, 1], [1, 1]]; the same with padding_idx -3; the forward still reads the padding row.
inline void embedding_padding_exact(Device dev) {
  for (DType dt : float_dtypes) {
    for (DType it : {DType::i64, DType::i32}) {
      for (std::int64_t pad : {0, -3}) {
        INFO("dtype ", name_of(dt), ", indices ", name_of(it), ", padding_idx ", pad, " on ", dev.str());
        Tensor w = leaf(dt, {0.5, -1, 2, 3, -4, 0.25}, {3, 2}, dev);
        Tensor idx = make(it, {0, 1, 0, 2}, {4}).to(dev);
        Tensor y = embedding(w, idx, pad);
        expect(y, {0.5, -1, 2, 3, 0.5, -1, -4, 0.25}, exact, "forward (the padding row is read as it is)");
        y.sum().backward();
        expect(w.grad(), {0, 0, 1, 1, 1, 1}, exact, "weight.grad");
      }
    }
  }
}

/// n random indices with many duplicates, i32/i64, padding_idx positive and negative,
/// against the float64 reference (forward rows exactly; gradient rows summed, the padding
/// row 0).
inline Results embedding_padding_random(Device dev, DType dt, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Results out;
  const std::int64_t V_ = 40;
  for (std::int64_t D : {5, 64}) {
    for (DType it : {DType::i64, DType::i32}) {
      const std::int64_t pad = std::uniform_int_distribution<std::int64_t>(0, 4)(rng);
      const std::int64_t pad_arg = std::bernoulli_distribution(0.5)(rng) ? pad - V_ : pad;
      INFO("dtype ", name_of(dt), ", n ", n, ", D ", D, ", indices ", name_of(it), ", padding_idx ", pad_arg, " on ",
           dev.str());
      // Most indices from [0, 5) (the padding row among them), the rest from the whole table.
      std::uniform_int_distribution<int> hot(0, 4), any(0, static_cast<int>(V_) - 1);
      std::bernoulli_distribution is_hot(0.7);
      V iv(static_cast<std::size_t>(n));
      for (auto& i : iv) i = is_hot(rng) ? hot(rng) : any(rng);
      iv[0] = static_cast<double>(pad);
      const V wv = values(make(dt, normal(rng, static_cast<std::size_t>(V_ * D)), {V_, D}));
      const V gv = values(make(dt, normal(rng, static_cast<std::size_t>(n * D)), {n, D}));
      Tensor w = leaf(dt, wv, {V_, D}, dev);
      Tensor y = embedding(w, make(it, iv, {n}).to(dev), pad_arg);
      V want_y, want_g(static_cast<std::size_t>(V_ * D), 0.0);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto row = static_cast<std::int64_t>(iv[static_cast<std::size_t>(i)]);
        for (std::int64_t j = 0; j < D; ++j) {
          want_y.push_back(wv[static_cast<std::size_t>(row * D + j)]);
          if (row != pad) want_g[static_cast<std::size_t>(row * D + j)] += gv[static_cast<std::size_t>(i * D + j)];
        }
      }
      expect(y, want_y, exact, "forward rows");
      y.backward(make(dt, gv, {n, D}).to(dev));
      // Sums of up to ~0.7 n / 5 values in the dtype (rounded after each addition).
      const Tol t = dt == DType::f64 ? Tol{1e-12, 1e-11} : Tol{1e-5, 1e-5 * std::sqrt(static_cast<double>(n))};
      expect(w.grad(), want_g, t, "weight.grad");
      expect(values(w.grad().select(0, pad)), V(static_cast<std::size_t>(D), 0.0), exact, "padding row");
      out.push_back({"embedding forward", y});
      out.push_back({"embedding weight.grad", w.grad()});
    }
  }
  return out;
}

// ===========================================================================================
// 9. Adam / AdamW with amsgrad
// ===========================================================================================

/// PyTorch's single-tensor Adam/AdamW step (torch/optim/adam.py, 2.11) in float64, in its
/// order: maximize negates g; AdamW multiplies p by 1 - lr wd, Adam adds wd p to g;
/// exp_avg.lerp_(g, 1 - b1); exp_avg_sq = b2 v + (1 - b2) g^2; amsgrad: vmax = max(vmax,
/// exp_avg_sq) (raw second moments), then denom = sqrt(vmax) / sqrt(1 - b2^t) + eps;
/// p -= lr / (1 - b1^t) * m / denom.
struct TorchAdam {
  optim::AdamOptions o;
  bool decoupled = false;
  V m, v, vmax;
  int t = 0;
  void step(V& p, V g) {
    if (m.empty()) m = v = vmax = V(p.size(), 0.0);
    ++t;
    const double b1 = o.betas.first, b2 = o.betas.second;
    const double step_size = o.lr / (1 - std::pow(b1, t));
    const double bc2_sqrt = std::sqrt(1 - std::pow(b2, t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (o.maximize) g[i] = -g[i];
      if (decoupled) p[i] *= 1 - o.lr * o.weight_decay;
      else g[i] += o.weight_decay * p[i];
      const double w = 1 - b1;  // torch.lerp: start + w (end - start), computed from the nearer end
      m[i] = w < 0.5 ? m[i] + w * (g[i] - m[i]) : g[i] - (g[i] - m[i]) * (1 - w);
      v[i] = v[i] * b2 + g[i] * g[i] * (1 - b2);
      double second = v[i];
      if (o.amsgrad) second = vmax[i] = std::max(vmax[i], v[i]);
      p[i] += -step_size * (m[i] / (std::sqrt(second) / bc2_sqrt + o.eps));
    }
  }
};

/// p = 0, lr = 1, eps = 0, default betas, gradients 1, 0, 0: amsgrad -1, -1.669723,
/// -2.187162; plain -1, -1.670058, -2.188015 (PyTorch 2.11). AdamW with weight_decay 0 is
/// the same; f32 and f64 parameters.
inline void amsgrad_exact(Device dev) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (bool decoupled : {false, true}) {
      for (bool ams : {false, true}) {
        INFO("dtype ", name_of(dt), std::string(decoupled ? " AdamW" : " Adam"), ", amsgrad ", ams, " on ", dev.str());
        Tensor p = zeros({1}, {.dtype = dt, .device = dev, .requires_grad = true});
        optim::AdamOptions o{.lr = 1, .eps = 0, .weight_decay = 0, .amsgrad = ams};
        std::unique_ptr<optim::Adam> opt;
        if (decoupled) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o);
        else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
        const V want = ams ? V{-1, -1.669723, -2.187162} : V{-1, -1.670058, -2.188015};
        TorchAdam ref{o, decoupled};
        V rp = {0.0};
        const double g[3] = {1, 0, 0};
        for (int s = 0; s < 3; ++s) {
          p.set_grad(full({1}, g[s], {.dtype = dt, .device = dev}));
          opt->step();
          ref.step(rp, {g[s]});
          INFO("step ", s + 1);
          // The values are rounded to 6 decimals (5e-7); f32 adds a few ulps of 2.
          expect(p, {want[static_cast<std::size_t>(s)]}, Tol{0, dt == DType::f64 ? 5e-7 : 1.5e-6}, "the issue's 6 decimals");
          expect(p, rp, dt == DType::f64 ? Tol{1e-14, 0} : Tol{1e-6, 0}, "the float64 reference");
        }
      }
    }
  }
}

/// Several settings, Adam and AdamW, amsgrad on and off, gradients whose magnitude falls
/// and spikes (so vmax differs from v), six steps against TorchAdam after each step.
inline Results amsgrad_random(Device dev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Results out;
  const std::vector<optim::AdamOptions> settings = {
      {.lr = 1, .eps = 0, .amsgrad = true},
      {.lr = 0.1, .amsgrad = true},
      {.lr = 0.05, .betas = {0.5, 0.9}, .eps = 1e-3, .weight_decay = 0.1, .amsgrad = true},
      {.lr = 0.02, .betas = {0.0, 0.99}, .weight_decay = 0.05, .amsgrad = true, .maximize = true},
      {.lr = 0.3, .betas = {0.95, 0.5}, .eps = 1e-6, .weight_decay = 0.01, .amsgrad = false},
  };
  const std::size_t n = 7;
  for (DType dt : {DType::f64, DType::f32}) {
    for (std::size_t k = 0; k < settings.size(); ++k) {
      for (bool decoupled : {false, true}) {
        INFO("dtype ", name_of(dt), ", setting ", k, std::string(decoupled ? ", AdamW" : ", Adam"), " on ", dev.str());
        const optim::AdamOptions& o = settings[k];
        V p0 = values(make(dt, normal(rng, n), {static_cast<std::int64_t>(n)}));
        Tensor p = leaf(dt, p0, {static_cast<std::int64_t>(n)}, dev);
        std::unique_ptr<optim::Adam> opt;
        if (decoupled) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o);
        else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
        TorchAdam ref{o, decoupled};
        for (int s = 0; s < 6; ++s) {
          const double scale = s == 3 ? 4.0 : std::pow(0.3, s);  // falling, with a spike at step 4
          V g = values(make(dt, normal(rng, n, scale), {static_cast<std::int64_t>(n)}));
          p.set_grad(make(dt, g, {static_cast<std::int64_t>(n)}).to(dev));
          opt->step();
          ref.step(p0, g);
          INFO("step ", s + 1);
          expect(p, p0, dt == DType::f64 ? Tol{1e-12, 1e-13} : Tol{2e-5, 2e-6}, "parameters");
        }
        out.push_back({"Adam parameters", p.detach()});
      }
    }
  }
  return out;
}

}  // namespace edge
