#include <iostream>
#include <vector>  // modules do not re-export std: include what you use
import brrr;

int main() {
  using namespace brrr;
  Device dev = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  Tensor x = arange(6, {.dtype = DType::f32, .device = dev}).view({2, 3}).t();
  std::cout << x << "\n";
  return x.contiguous().to_host<float>() == std::vector<float>{0, 3, 1, 4, 2, 5} ? 0 : 1;
}
