// Gradients against central differences for CPU f64 ops with several inputs and outputs,
// shared by the op suites (join/views, matmul). Include after tests/tensor/helpers.hpp (it
// uses test::values) and after `import brrr;`; needs <algorithm>, <functional> and <random>.
#pragma once

namespace test {

/// A CPU f64 tensor of `shape` holding `v` (0-d when shape is empty).
inline Tensor f64_tensor(const std::vector<double>& v, const Shape& shape) {
  if (shape.empty()) return full({}, v.at(0), {.dtype = DType::f64});
  return Tensor::from_vector(v, shape);
}

using MultiFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Checks the gradients backward() computes for L(x) = sum_i <R_i, f(x)_i> (R_i random,
/// one per output of f) against central differences, for f64 leaves of `shapes` filled with
/// normal values. Returns the largest difference relative to the largest numeric derivative
/// (CHECKed against tol unless `check` is false).
inline double check_gradients(const MultiFn& f, const std::vector<Shape>& shapes, std::mt19937_64& rng,
                              double eps = 1e-6, double tol = 1e-7, bool check = true) {
  std::vector<std::vector<double>> xs;
  std::vector<Tensor> leaves;
  for (const Shape& s : shapes) {
    xs.push_back(normal_values(rng, numel_of(s)));
    Tensor t = f64_tensor(xs.back(), s);
    t.requires_grad_();
    leaves.push_back(t);
  }
  std::vector<Tensor> outs = f(leaves);
  std::vector<std::vector<double>> rv;
  std::vector<Tensor> rs;
  for (const Tensor& o : outs) {
    rv.push_back(normal_values(rng, o.numel()));
    rs.push_back(f64_tensor(rv.back(), o.shape()));
  }
  autograd::backward(outs, rs);

  auto loss = [&](const std::vector<std::vector<double>>& values) {
    NoGradGuard no_grad;
    std::vector<Tensor> ts;
    for (std::size_t i = 0; i < shapes.size(); ++i) ts.push_back(f64_tensor(values[i], shapes[i]));
    std::vector<Tensor> o = f(ts);
    double l = 0;
    for (std::size_t i = 0; i < o.size(); ++i) {
      std::vector<double> ov = test::values(o[i]);
      for (std::size_t j = 0; j < ov.size(); ++j) l += ov[j] * rv[i][j];
    }
    return l;
  };
  double worst = 0, scale = 1;
  std::string where;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Tensor g = leaves[i].grad();
    std::vector<double> analytic = g.defined() ? test::values(g) : std::vector<double>(xs[i].size(), 0.0);
    if (g.defined()) CHECK(g.shape() == shapes[i]);
    for (std::size_t j = 0; j < xs[i].size(); ++j) {
      auto xp = xs, xm = xs;
      xp[i][j] += eps;
      xm[i][j] -= eps;
      double fd = (loss(xp) - loss(xm)) / (2 * eps);
      double err = std::abs(fd - analytic.at(j));
      scale = std::max(scale, std::abs(fd));
      if (err > worst) {
        worst = err;
        where = "input " + std::to_string(i) + " element " + std::to_string(j) + ": analytic " +
                std::to_string(analytic.at(j)) + " vs numeric " + std::to_string(fd);
      }
    }
  }
  INFO("worst: ", where);
  if (check) CHECK(worst <= tol * scale);
  return worst / scale;
}

}  // namespace test
