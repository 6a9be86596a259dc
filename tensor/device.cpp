module;
#include <ostream>
#include <string>
module brrr.tensor;
import brrr.backend;

namespace brrr {

Device Device::cuda(int index) {
  int count = backend::device_count();
  if (count == 0)
    throw Error(ErrorKind::device, "Device::cuda(" + std::to_string(index) +
                                       "): no CUDA device is available (cuda::is_available() is false)");
  if (index < 0 || index >= count)
    throw Error(ErrorKind::device, "Device::cuda(" + std::to_string(index) + "): index out of range, " +
                                       std::to_string(count) + " CUDA device(s) present");
  return Device(DeviceType::cuda, index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() < 9) {
    int index = 0;
    for (char c : text.substr(5)) {
      if (c < '0' || c > '9') goto bad;
      index = index * 10 + (c - '0');
    }
    return cuda(index);
  }
bad:
  throw Error(ErrorKind::value, "Device::parse: '" + text + "' is not a device (cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  switch (type_) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda:" + std::to_string(index_);
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, Device device) { return os << device.str(); }

}  // namespace brrr
