// The main job until the Fashion-MNIST trainer lands: creates tensors on the best available
// device, runs views, conversions and random draws, and prints what ran where and how
// many times the host waited for the device.
#include <cstdio>
#include <iostream>
import brrr;

using namespace brrr;

int main() {
  Device dev = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  std::cout << "brrr: running on " << dev << (dev.is_cpu() ? " (no CUDA device found)" : "") << "\n\n";

  manual_seed(42);
  Tensor x = randn({4, 6}, {.device = dev});
  std::cout << "x = randn({4, 6}) on " << x.device() << ":\n" << x << "\n\n";

  Tensor xt = x.transpose(0, 1);
  std::cout << "x.transpose(0, 1): shape " << to_string(xt.shape()) << ", strides " << to_string(xt.strides())
            << ", contiguous " << std::boolalpha << xt.is_contiguous() << " (a view: same storage "
            << xt.storage().is_same(x.storage()) << ")\n";
  Tensor xs = x.slice(1, 0, 6, 2);
  std::cout << "x.slice(1, 0, 6, 2): shape " << to_string(xs.shape()) << ", strides " << to_string(xs.strides()) << "\n";
  Tensor c = xt.contiguous();
  std::cout << "xt.contiguous(): strides " << to_string(c.strides()) << " (a copy made on " << c.device() << ")\n";
  Tensor h = x.to(DType::bf16);
  std::cout << "x.to(bf16)[0, :3] = " << h.select(0, 0).slice(0, 0, 3) << "\n";
  Tensor r = arange(12, {.dtype = DType::f32, .device = dev}).view({3, 4}).permute({1, 0});
  std::cout << "arange(12).view({3, 4}).permute({1, 0}) =\n" << r << "\n";
  Tensor back = r.to(Device::cpu());
  std::cout << "copied to the host: " << to_string(back.shape()) << " on " << back.device() << "\n";

  if (dev.is_cuda()) {
    cuda::synchronize(dev);
    auto stats = cuda::memory_stats(dev);
    std::cout << "\nhost syncs so far: " << cuda::sync_count() << "; cudaMalloc calls: " << stats.num_cuda_malloc
              << ", bytes in tensors: " << stats.allocated_bytes << ", reserved: " << stats.reserved_bytes << "\n";
  }
  std::cout << "\ndone.\n";
  return 0;
}
