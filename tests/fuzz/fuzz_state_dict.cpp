// libFuzzer target: nn::load, the state-dict loader, on arbitrary safetensors bytes loaded
// into a fixed model: Sequential{Linear(4, 3), ReLU, LayerNorm(3), Linear(3, 2)} plus two
// buffers, "steps" (i64, 0-d) and "mask" (bool [3]); tests/fuzz/make_seeds.py writes the
// matching checkpoints and their mismatched variants (missing, unexpected and renamed keys,
// wrong shapes, other dtypes). Oracles beyond "no crash, no sanitizer report, only
// brrr::Error":
//   - a load that fails leaves every parameter and buffer as it was (checks come first);
//   - a load that succeeds leaves each one equal to the file's tensor converted to its dtype,
//     with dtype, shape and device unchanged.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
import brrr;

using namespace brrr;

namespace {

nn::Sequential make_model() {
  manual_seed(0);
  nn::Sequential m{nn::Linear(4, 3), nn::ReLU(), nn::LayerNorm({3}), nn::Linear(3, 2)};
  m.impl()->register_buffer("steps", zeros({}, {.dtype = DType::i64}));
  m.impl()->register_buffer("mask", ones({3}, {.dtype = DType::boolean}));
  return m;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<unsigned char> b(t.nbytes());
  if (!b.empty()) std::memcpy(b.data(), t.contiguous().data_ptr(), b.size());
  return b;
}

struct Snapshot {
  std::vector<std::pair<std::string, Tensor>> tensors;  // clones
  explicit Snapshot(const nn::Module& m) {
    for (auto& [name, t] : m.state_dict()) tensors.emplace_back(name, t.clone());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemFile input("state_dict");
  static nn::Sequential model = make_model();
  static const Snapshot initial(model);
  {
    // Every input starts from the same weights.
    NoGradGuard no_grad;
    nn::StateDict s = model.state_dict();
    for (const auto& [name, t] : initial.tensors) s.at(name).copy_(t);
  }
  const std::string& path = input.write(data, size);
  try {
    nn::load(model, path);
  } catch (const Error&) {
    nn::StateDict s = model.state_dict();
    for (const auto& [name, t] : initial.tensors)
      if (bytes_of(s.at(name)) != bytes_of(t)) fuzz::violated("a failed load changed \"" + name + "\"");
    return 0;
  }
  io::TensorMap file = io::load_safetensors(path);  // loaded once already: must load again
  nn::StateDict s = model.state_dict();
  if (s.size() != initial.tensors.size() || file.size() != s.size()) fuzz::violated("a strict load changed the key set");
  for (const auto& [name, before] : initial.tensors) {
    const Tensor& now = s.at(name);
    if (now.dtype() != before.dtype() || now.shape() != before.shape() || !now.device().is_cpu())
      fuzz::violated("a load changed the dtype, shape or device of \"" + name + "\"");
    if (bytes_of(now) != bytes_of(file.at(name).to(before.dtype())))
      fuzz::violated("\"" + name + "\" does not hold the file's values after a load");
  }
  return 0;
}
