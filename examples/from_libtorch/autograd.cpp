// pytorch/examples cpp/autograd, ported: basic autograd, gradients of gradients, and custom
// autograd functions (LinearFunction, MulConstant) with autograd::Function. It ends with a
// small fit through the custom LinearFunction whose loss must fall (the ctest check).
//   autograd [--steps N]   exits 0 when every printed check holds and the loss fell
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
import brrr;

using namespace brrr;
using namespace brrr::autograd;

namespace {

bool ok = true;
void expect(bool condition, const char* what) {
  std::printf("%s: %s\n", condition ? "ok" : "FAILED", what);
  ok = ok && condition;
}

// y = x w^T + b, with its backward written by hand (LibTorch's LinearFunction).
struct LinearFunction : Function<LinearFunction> {
  static constexpr const char* name = "LinearFunction";
  static Tensor forward(AutogradContext* ctx, Tensor input, Tensor weight, Tensor bias = Tensor()) {
    ctx->save_for_backward({input, weight, bias});
    Tensor output = input.mm(weight.t());
    if (bias.defined()) output += bias;  // broadcast over the batch (LibTorch: bias.unsqueeze(0).expand_as(output))
    return output;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    Tensor input = saved[0], weight = saved[1], bias = saved[2];
    Tensor grad_output = grad_outputs[0];
    Tensor grad_input = grad_output.mm(weight);
    Tensor grad_weight = grad_output.t().mm(input);
    Tensor grad_bias;
    if (bias.defined()) grad_bias = grad_output.sum(0);
    return {grad_input, grad_weight, grad_bias};
  }
};

// y = x * constant (a non-tensor argument kept in saved_data).
struct MulConstant : Function<MulConstant> {
  static Tensor forward(AutogradContext* ctx, Tensor tensor, double constant) {
    ctx->saved_data["constant"] = constant;
    return tensor * constant;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    // One gradient per forward argument: the double gets none.
    return {grad_outputs[0] * ctx->saved_data["constant"].toDouble(), Tensor()};
  }
};

}  // namespace

int main(int argc, char** argv) {
  int steps = 300;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  manual_seed(0);

  std::puts("====== Running: \"Basic autograd operations\" ======");
  Tensor x = ones({2, 2}, {.requires_grad = true});
  Tensor y = x + 2;
  Tensor z = y * y * 3;
  Tensor out = z.mean();
  out.backward();
  expect(testing::allclose(x.grad(), full({2, 2}, 4.5)), "d(mean(3 (x + 2)^2))/dx = 4.5 at x = 1");

  std::puts("====== Running \"Computing higher-order gradients in C++\" ======");
  Tensor model = nn::Linear(4, 3).weight().detach().requires_grad_();
  Tensor input = randn({3, 4}, {.requires_grad = true});
  Tensor output = input.mm(model.t()).relu().sum();
  Tensor grad_input = autograd::grad({output}, {input}, {}, true, true)[0];
  // The gradient of the gradient norm: it is differentiable again.
  Tensor penalty = grad_input.pow(2).sum();
  penalty.backward();
  expect(model.grad().defined() && model.grad().shape() == Shape{3, 4}, "second-order gradient reaches the weight");

  std::puts("====== Running \"Using custom autograd function in C++\" ======");
  {
    Tensor xi = randn({2, 3}, {.dtype = DType::f64, .requires_grad = true});
    Tensor w = randn({4, 3}, {.dtype = DType::f64, .requires_grad = true});
    Tensor b = randn({4}, {.dtype = DType::f64, .requires_grad = true});
    Tensor yl = LinearFunction::apply(xi, w, b);
    yl.sum().backward();
    expect(testing::allclose(w.grad(), ones({2, 4}, {.dtype = DType::f64}).t().mm(xi.detach())), "LinearFunction dW");
    expect(testing::allclose(b.grad(), full({4}, 2.0, {.dtype = DType::f64})), "LinearFunction db");
    expect(gradcheck([](const std::vector<Tensor>& in) { return LinearFunction::apply(in[0], in[1], in[2]); },
                     {xi.detach(), w.detach(), b.detach()}),
           "LinearFunction passes gradcheck");
    Tensor xm = randn({5}, {.requires_grad = true});
    MulConstant::apply(xm, 5.5).sum().backward();
    expect(testing::allclose(xm.grad(), full({5}, 5.5)), "MulConstant gradient is the constant");
  }

  std::puts("====== Training through LinearFunction ======");
  Tensor w_true = randn({1, 3});
  Tensor w = zeros({1, 3}, {.requires_grad = true});
  Tensor b = zeros({1}, {.requires_grad = true});
  optim::SGD opt({w, b}, {.lr = 0.1});
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    Tensor xb = randn({16, 3});
    Tensor target = xb.mm(w_true.t()) + 0.3;
    Tensor loss = mse_loss(LinearFunction::apply(xb, w, b), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    last = loss.item<float>();
    if (s == 0) first = last;
  }
  std::printf("loss %g -> %g\n", first, last);
  expect(last < first * 0.01f, "the loss fell a hundredfold");
  return ok ? 0 : 1;
}
