// Edge-semantics cases of the pools' ceil_mode, embedding's padding_idx and Adam's amsgrad.
#pragma once

#include "tests/ops/edge_common.hpp"

namespace edge {

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
