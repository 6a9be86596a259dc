// bench_softmax: bandwidth of the fused row softmax on the GPU.
//   softmax_65536x4096_f32_GBps      softmax over the last dim of [65536, 4096] f32
//   log_softmax_65536x4096_f32_GBps  the same for log_softmax
//   softmax_65536x4096_bf16_GBps     bf16 (f32 arithmetic)
//   softmax_16384x50257_f32_GBps     a vocabulary-sized row (generic kernel, rows read twice)
//   layer_norm_65536x4096_f32_GBps   layer_norm with weight and bias
// GB/s count one read of the input and one write of the output (the minimum traffic).
// Timing: 3 warm-up runs, then CUDA events around each of 20 runs; the median is reported.
// Prints a table, then one JSON object (workload -> number) on the last line. PyTorch's
// counterpart: torch.softmax(x, -1) on x = torch.randn(65536, 4096, device="cuda"); the
// f32 65536x4096 case is also in bench_ops, next to PyTorch and LibTorch.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include "common.hpp"

using namespace brrr;
using bench::gbps, bench::time_ms;

int main() {
  if (!cuda::is_available()) {
    std::puts("bench_softmax: no CUDA device; nothing to measure");
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  std::map<std::string, double> r;
  {
    const std::int64_t rows = 65536, cols = 4096;
    Tensor x = randn({rows, cols}, {.device = dev});
    const double bytes = 2.0 * rows * cols * 4;
    r["softmax_65536x4096_f32_GBps"] = gbps(bytes, time_ms(dev, 3, 20, [&] { Tensor y = softmax(x, -1); }));
    r["log_softmax_65536x4096_f32_GBps"] = gbps(bytes, time_ms(dev, 3, 20, [&] { Tensor y = log_softmax(x, -1); }));
    Tensor w = randn({cols}, {.device = dev}), b = randn({cols}, {.device = dev});
    r["layer_norm_65536x4096_f32_GBps"] =
        gbps(bytes, time_ms(dev, 3, 20, [&] { Tensor y = layer_norm(x, {cols}, w, b); }));
    Tensor xh = x.to(DType::bf16);
    r["softmax_65536x4096_bf16_GBps"] =
        gbps(2.0 * rows * cols * 2, time_ms(dev, 3, 20, [&] { Tensor y = softmax(xh, -1); }));
  }
  {
    const std::int64_t rows = 16384, cols = 50257;
    Tensor x = randn({rows, cols}, {.device = dev});
    r["softmax_16384x50257_f32_GBps"] =
        gbps(2.0 * rows * cols * 4, time_ms(dev, 3, 20, [&] { Tensor y = softmax(x, -1); }));
  }

  for (auto& [k, v] : r) std::printf("%-36s %10.1f\n", k.c_str(), v);
  bench::print_json(r, 1);
  return 0;
}
