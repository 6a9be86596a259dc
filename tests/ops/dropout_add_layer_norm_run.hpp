// Runs dropout_add_layer_norm or the composite it replaces (dropout, add, layer_norm, to) with
// gradients of both outputs: shared by the CPU tests and the GPU parity suite. Included after
// `import brrr;`.
#pragma once

namespace dropout_add_ln_test {

using namespace brrr;

struct Run {
  Tensor out, sum;
  std::vector<Tensor> grads;  // of the defined ones of x0, residual, weight, bias
};

// out and sum, and the gradients of sum(out * g_out) + sum(sum * g_sum) (g_out, g_sum f64 on
// x0's device), by the fused op or by the composite, from generator seed `seed`.
inline Run run(bool fused, const Tensor& x0, const Tensor& res, const Tensor& w, const Tensor& b, double p,
               bool training, std::uint64_t seed, const Tensor& g_out, const Tensor& g_sum) {
  std::vector<Tensor> in;
  auto leaf = [&](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor l = t.detach().clone().requires_grad_();
    in.push_back(l);
    return l;
  };
  Tensor xx = leaf(x0), rr = leaf(res), ww = leaf(w), bb = leaf(b);
  manual_seed(seed);
  Tensor out, s;
  if (fused) {
    std::tie(out, s) = dropout_add_layer_norm(xx, rr, ww, bb, p, 1e-5, training);
  } else {
    Tensor t = dropout(xx, p, training);
    s = rr.defined() ? add(rr, t) : t;
    out = layer_norm(s, {s.size(-1)}, ww, bb, 1e-5).to(x0.dtype());
  }
  Tensor loss = add(sum(mul(out.to(DType::f64), g_out)), sum(mul(s.to(DType::f64), g_sum)));
  std::vector<Tensor> g = autograd::grad({loss}, in);
  for (Tensor& t : g) t = t.detach();
  return {out.detach(), s.detach(), g};
}

}  // namespace dropout_add_ln_test
