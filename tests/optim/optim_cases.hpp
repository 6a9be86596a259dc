// Helpers of the optimizer suites (tests/optim/test_optim.cpp, test_schedulers_clip.cpp):
// float64 references of the update formulas. Include after `import brrr;` and
// tests/tensor/helpers.hpp.
#pragma once

namespace optim_test {

using namespace brrr;
using namespace test;
using namespace brrr::optim;

using V = std::vector<double>;

inline V host(const Tensor& t) { return t.to(DType::f64).contiguous().to_host<double>(); }

// Random f64 values for a parameter (fresh: manual_seed + randn).
inline Tensor param(Shape shape, DType dtype = DType::f64) {
  Tensor p = randn(std::move(shape), {.dtype = DType::f64}).to(dtype);
  p.requires_grad_(true);
  return p;
}
inline Tensor grad_like(const Tensor& p) { return randn(p.shape(), {.dtype = DType::f64}).to(p.dtype()); }

inline void check_values(const V& actual, const V& expected, double rtol, double atol) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("element ", i, ": actual ", actual[i], " expected ", expected[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

// --- float64 references -------------------------------------------------------------------

struct RefSGD {
  SGDOptions o;
  V buf;
  bool has_buf = false;
  void step(V& p, V g) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (o.maximize) g[i] = -g[i];
      g[i] += o.weight_decay * p[i];
    }
    if (o.momentum != 0) {
      if (!has_buf) {
        buf = g;
        has_buf = true;
      } else {
        for (std::size_t i = 0; i < p.size(); ++i) buf[i] = o.momentum * buf[i] + (1 - o.dampening) * g[i];
      }
      for (std::size_t i = 0; i < p.size(); ++i) g[i] = o.nesterov ? g[i] + o.momentum * buf[i] : buf[i];
    }
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= o.lr * g[i];
  }
};

struct RefAdam {
  AdamOptions o;
  bool decoupled = false;
  V m, v, vmax;
  int t = 0;
  void step(V& p, V g) {
    if (m.empty()) m = v = vmax = V(p.size(), 0.0);
    ++t;
    double b1 = o.betas.first, b2 = o.betas.second;
    double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (o.maximize) g[i] = -g[i];
      if (decoupled) p[i] *= 1 - o.lr * o.weight_decay;
      else g[i] += o.weight_decay * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double vh = v[i];
      if (o.amsgrad) {
        vmax[i] = std::max(vmax[i], v[i]);
        vh = vmax[i];
      }
      double denom = std::sqrt(vh) / std::sqrt(bc2) + o.eps;
      p[i] -= o.lr / bc1 * m[i] / denom;
    }
  }
};

// Runs `steps` steps of `opt` on `params` with fresh random gradients and the same steps of
// the references, comparing after each step.
template <class Opt, class Ref>
inline void run_against(Opt& opt, std::vector<Tensor> params, std::vector<Ref> refs, int steps, double rtol, double atol) {
  std::vector<V> values;
  for (const Tensor& p : params) values.push_back(host(p));
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < params.size(); ++k) params[k].set_grad(grad_like(params[k]));
    for (std::size_t k = 0; k < params.size(); ++k) refs[k].step(values[k], host(params[k].grad()));
    opt.step();
    CHECK(opt.step_count() == s + 1);
    for (std::size_t k = 0; k < params.size(); ++k) {
      INFO("step ", s + 1, ", parameter ", k);
      check_values(host(params[k]), values[k], rtol, atol);
    }
  }
}

}  // namespace optim_test
