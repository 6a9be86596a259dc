// pytorch/examples cpp/regression, ported: fit a degree-4 polynomial with one Linear layer.
// LibTorch's original differs only in spelling (docs/from_libtorch.md shows both).
//   regression [--max-steps N]   exits 0 once the loss is below 1e-3, 1 if it never gets there
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

constexpr std::int64_t kDegree = 4;

// Builds features from a batch of scalars: [x, x^2, x^3, x^4].
Tensor make_features(const Tensor& x) {
  Tensor col = x.unsqueeze(1);
  std::vector<Tensor> cols;
  for (std::int64_t i = 1; i <= kDegree; ++i) cols.push_back(col.pow(i));
  return cat(cols, 1);
}

// The polynomial: x W + b.
Tensor f(const Tensor& x, const Tensor& w, const Tensor& b) { return x.mm(w) + b.item<float>(); }

std::string poly_desc(const Tensor& w, const Tensor& b) {
  std::vector<float> ws = w.to_host<float>();
  std::string s = "y = ";
  for (std::size_t i = 0; i < ws.size(); ++i) s += std::to_string(ws[i]) + " x^" + std::to_string(i + 1) + " + ";
  return s + std::to_string(b.item<float>());
}

// torch::smooth_l1_loss (beta 1, mean), which brrr does not have as one op: written with ops.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target) {
  Tensor d = (input - target).abs();
  return where(d < 1.0, d * d * 0.5, d - 0.5).mean();
}

// A batch (x, f(x)).
std::pair<Tensor, Tensor> get_batch(const Tensor& w, const Tensor& b, std::int64_t batch_size = 32) {
  Tensor x = make_features(randn({batch_size}));
  return {x, f(x, w, b)};
}

int main(int argc, char** argv) {
  std::int64_t max_steps = 20000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--max-steps") == 0) max_steps = std::atoll(argv[i + 1]);
  manual_seed(1);
  Tensor w_target = randn({kDegree, 1}) * 0.5;
  Tensor b_target = randn({1}) * 0.5;

  nn::Linear fc(w_target.size(0), 1);
  optim::SGD optimizer(fc.parameters(), {.lr = 0.1});
  float loss = 0, first_loss = -1;
  std::int64_t batch_idx = 0;
  while (++batch_idx <= max_steps) {
    auto [batch_x, batch_y] = get_batch(w_target, b_target);
    optimizer.zero_grad();
    Tensor output = smooth_l1_loss(fc(batch_x), batch_y);
    output.backward();
    optimizer.step();
    loss = output.item<float>();
    if (first_loss < 0) first_loss = loss;
    if (loss < 1e-3f) break;
  }
  std::printf("Loss: %g after %lld batches (first %g)\n", loss, static_cast<long long>(batch_idx), first_loss);
  std::printf("==> Learned function:\t%s\n", poly_desc(fc.weight().t(), fc.bias()).c_str());
  std::printf("==> Actual function:\t%s\n", poly_desc(w_target, b_target).c_str());
  return loss < 1e-3f ? 0 : 1;
}
