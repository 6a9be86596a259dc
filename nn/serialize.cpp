// nn::save / nn::load: a module's state dict as a safetensors file (brrr.io), so checkpoints
// interoperate with Hugging Face's safetensors and PyTorch's load_state_dict.
module;
#include <map>
#include <string>
module brrr.nn;
import brrr.tensor;
import brrr.io;

namespace brrr::nn {

void save(const Module& module, const std::string& path) {
  if (!module.defined()) throw Error(ErrorKind::value, "nn::save(" + path + "): the module handle is empty");
  StateDict state = module.state_dict();
  io::save_safetensors(path, io::TensorMap(state.begin(), state.end()));
}

void load(const Module& module, const std::string& path) {
  if (!module.defined()) throw Error(ErrorKind::value, "nn::load(" + path + "): the module handle is empty");
  io::TensorMap tensors = io::load_safetensors(path);
  try {
    module.load_state_dict(StateDict(tensors.begin(), tensors.end()), true);
  } catch (const Error& e) {
    throw Error(e.kind(), "nn::load(" + path + "): " + e.what());
  }
}

}  // namespace brrr::nn
