// bench_ops: the core-op workloads of the side-by-side comparison (bench/compare.py runs
// the same workloads in PyTorch eager in the same invocation):
//   enqueue_add_1024[_autograd]  host time to enqueue one 1024-element f32 add (µs/op)
//   add_256M_f32                 bandwidth of a + b over 2^28 f32, counting 3 tensors (GB/s)
//   sum_256M_f32                 bandwidth of sum over 2^28 f32 (GB/s)
//   gemm_8192_{fp32,tf32,bf16}   8192^3 matrix product (TFLOP/s)
// Timing: warm-up, then CUDA events around each repeat; the median is reported. Prints one
// JSON object (workload -> number) on the last line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median device milliseconds of `f` over `reps` runs (events on the current stream).
double time_ms(Device dev, int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cuda::Event start, stop;
    start.record(dev);
    f();
    stop.record(dev);
    stop.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  return median(ms);
}

// Host microseconds to enqueue one op, median of batches of `batch` ops.
double enqueue_us(Device dev, const std::function<void()>& op) {
  constexpr int batch = 200, batches = 50;
  for (int i = 0; i < 2000; ++i) op();
  cuda::synchronize(dev);
  std::vector<double> us;
  for (int b = 0; b < batches; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) op();
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / batch);
    cuda::synchronize(dev);  // keep the launch queue short between batches
  }
  return median(us);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::puts("bench_ops: no CUDA device; nothing to measure");
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  std::map<std::string, double> r;

  {
    Tensor a = randn({1024}, {.device = dev}), b = randn({1024}, {.device = dev});
    r["enqueue_add_1024_us"] = enqueue_us(dev, [&] { Tensor c = a + b; });
    Tensor ag = randn({1024}, {.device = dev, .requires_grad = true});
    r["enqueue_add_1024_autograd_us"] = enqueue_us(dev, [&] { Tensor c = ag + b; });
  }
  {
    const std::int64_t n = std::int64_t(1) << 28;
    Tensor a = randn({n}, {.device = dev}), b = randn({n}, {.device = dev});
    double ms = time_ms(dev, 3, 20, [&] { Tensor c = a + b; });
    r["add_256M_f32_GBps"] = 3.0 * n * 4 / (ms * 1e-3) / 1e9;
    ms = time_ms(dev, 3, 20, [&] { Tensor s = sum(a); });
    r["sum_256M_f32_GBps"] = 1.0 * n * 4 / (ms * 1e-3) / 1e9;
  }
  {
    const std::int64_t n = 8192;
    Tensor a = randn({n, n}, {.device = dev}), b = randn({n, n}, {.device = dev});
    double flop = 2.0 * n * n * n;
    set_allow_tf32(false);
    r["gemm_8192_fp32_TFLOPs"] = flop / (time_ms(dev, 2, 10, [&] { Tensor c = matmul(a, b); }) * 1e-3) / 1e12;
    set_allow_tf32(true);
    r["gemm_8192_tf32_TFLOPs"] = flop / (time_ms(dev, 2, 10, [&] { Tensor c = matmul(a, b); }) * 1e-3) / 1e12;
    set_allow_tf32(false);
    Tensor ah = a.to(DType::bf16), bh = b.to(DType::bf16);
    r["gemm_8192_bf16_TFLOPs"] = flop / (time_ms(dev, 2, 10, [&] { Tensor c = matmul(ah, bh); }) * 1e-3) / 1e12;
  }

  for (auto& [k, v] : r) std::printf("%-32s %10.3f\n", k.c_str(), v);
  std::printf("{");
  bool first = true;
  for (auto& [k, v] : r) {
    std::printf("%s\"%s\": %.4f", first ? "" : ", ", k.c_str(), v);
    first = false;
  }
  std::printf("}\n");
  return 0;
}
