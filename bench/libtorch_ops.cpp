// The workloads of bench_ops.cpp in LibTorch C++ (built on the GPU machine against the
// PyTorch install there by bench/compare.sh). Prints one JSON line.
#include <torch/torch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

static double time_ms(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    at::cuda::CUDAEvent s(cudaEventDefault), e(cudaEventDefault);
    s.record();
    f();
    e.record();
    e.synchronize();
    ms.push_back(s.elapsed_time(e));
  }
  return median(ms);
}

static double enqueue_us(const std::function<void()>& op) {
  for (int i = 0; i < 2000; ++i) op();
  torch::cuda::synchronize();
  std::vector<double> us;
  for (int b = 0; b < 50; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) op();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 200);
    torch::cuda::synchronize();
  }
  return median(us);
}

int main() {
  auto opt = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(0);
  std::map<std::string, double> r;
  {
    auto a = torch::randn({1024}, opt), b = torch::randn({1024}, opt);
    r["enqueue_add_1024_us"] = enqueue_us([&] { auto c = a + b; });
    auto ag = torch::randn({1024}, opt.requires_grad(true));
    r["enqueue_add_1024_autograd_us"] = enqueue_us([&] { auto c = ag + b; });
  }
  {
    int64_t n = int64_t(1) << 28;
    auto a = torch::randn({n}, opt), b = torch::randn({n}, opt);
    r["add_256M_f32_GBps"] = 3.0 * n * 4 / (time_ms(3, 20, [&] { auto c = a + b; }) * 1e-3) / 1e9;
    r["sum_256M_f32_GBps"] = 1.0 * n * 4 / (time_ms(3, 20, [&] { auto s = a.sum(); }) * 1e-3) / 1e9;
  }
  {
    int64_t n = 8192;
    auto a = torch::randn({n, n}, opt), b = torch::randn({n, n}, opt);
    double flop = 2.0 * n * n * n;
    at::globalContext().setAllowTF32CuBLAS(false);
    r["gemm_8192_fp32_TFLOPs"] = flop / (time_ms(2, 10, [&] { auto c = torch::matmul(a, b); }) * 1e-3) / 1e12;
    at::globalContext().setAllowTF32CuBLAS(true);
    r["gemm_8192_tf32_TFLOPs"] = flop / (time_ms(2, 10, [&] { auto c = torch::matmul(a, b); }) * 1e-3) / 1e12;
    at::globalContext().setAllowTF32CuBLAS(false);
    auto ah = a.to(torch::kBFloat16), bh = b.to(torch::kBFloat16);
    r["gemm_8192_bf16_TFLOPs"] = flop / (time_ms(2, 10, [&] { auto c = torch::matmul(ah, bh); }) * 1e-3) / 1e12;
  }
  std::printf("{");
  bool first = true;
  for (auto& [k, v] : r) {
    std::printf("%s\"%s\": %.4f", first ? "" : ", ", k.c_str(), v);
    first = false;
  }
  std::printf("}\n");
}
