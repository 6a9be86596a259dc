module;
#include <stdexcept>
#include <string>
module brrr.tensor;

namespace brrr {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::shape: return "shape";
    case ErrorKind::dtype: return "dtype";
    case ErrorKind::device: return "device";
    case ErrorKind::index: return "index";
    case ErrorKind::value: return "value";
    case ErrorKind::io: return "io";
    case ErrorKind::cuda: return "cuda";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::sync: return "sync";
    case ErrorKind::autograd: return "autograd";
    case ErrorKind::distributed: return "distributed";
  }
  return "?";
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(message), kind_(kind) {}

}  // namespace brrr
