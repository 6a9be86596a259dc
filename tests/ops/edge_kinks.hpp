// Edge-semantics cases of kinks and ties (relu, abs, clamp, max/min, maximum/minimum, pow at
// 0) and where with NaN in the branch not taken.
#pragma once

#include "tests/ops/edge_common.hpp"

namespace edge {

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

}  // namespace edge
