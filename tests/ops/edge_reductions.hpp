// Edge-semantics cases of softmax, means and sums of zero elements, cross_entropy with
// ignored targets, var/std at every number of degrees of freedom.
#pragma once

#include "tests/ops/edge_common.hpp"

namespace edge {

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
      // f32: the row sum of g (4100 terms) carries ~1e-5 of rounding, which a row whose max
      // holds most of the probability passes on almost whole: the absolute tolerance grows
      // with the row (BRRR_NUM_THREADS=16, seed 1040140727: 7.8e-6 off at 4100 columns).
      const double f32_atol = 2e-6 + 5e-9 * static_cast<double>(cols);
      expect(xl.grad(), want, dt == DType::f64 ? Tol{1e-10, 1e-12} : Tol{1e-4, f32_atol}, op);
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

}  // namespace edge
