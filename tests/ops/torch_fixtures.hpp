// Replays the PyTorch fixtures of tests/ops/fixtures/ (make_torch_fixtures.py): a case
// `name` holds name.in0, name.in1, ..., name.grad_out, name.out and name.grad_inI (float64).
// Include after `import brrr;` and tests/tensor/helpers.hpp; needs BRRR_OPS_FIXTURES (the
// folder), <functional>, <string>, <vector>.
#pragma once

namespace test {

using FixtureFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline const io::TensorMap& fixtures(const std::string& file) {
  static std::map<std::string, io::TensorMap> cache;
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, io::load_safetensors(std::string(BRRR_OPS_FIXTURES) + "/" + file)).first;
  return it->second;
}

/// Runs f on the case's inputs converted to `dtype` on `device` (leaves requiring grad),
/// backpropagates its grad_out and compares the output and every recorded input gradient
/// with PyTorch's (float64) within `tol`.
inline void replay(const std::string& file, const std::string& name, const FixtureFn& f, DType dtype = DType::f64,
                   Device device = Device::cpu(), testing::CloseOptions tol = {.rtol = 1e-10, .atol = 1e-12}) {
  INFO("fixture ", file, ": ", name, " in ", std::string(to_string(dtype)));
  const io::TensorMap& m = fixtures(file);
  std::vector<Tensor> inputs;
  for (int i = 0; m.count(name + ".in" + std::to_string(i)); ++i)
    inputs.push_back(m.at(name + ".in" + std::to_string(i)).to(dtype).to(device).clone().requires_grad_());
  REQUIRE(!inputs.empty());
  Tensor y = f(inputs);
  testing::assert_close(y.to(Device::cpu()).to(DType::f64), m.at(name + ".out"), tol);
  autograd::backward({y}, {m.at(name + ".grad_out").to(dtype).to(device)});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto it = m.find(name + ".grad_in" + std::to_string(i));
    if (it == m.end()) continue;
    INFO("gradient of input ", i);
    REQUIRE(inputs[i].grad().defined());
    testing::assert_close(inputs[i].grad().to(Device::cpu()).to(DType::f64), it->second, tol);
  }
}

}  // namespace test
