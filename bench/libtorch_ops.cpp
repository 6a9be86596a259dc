// libtorch_ops: the workloads of bench/bench_ops.cpp in LibTorch C++, with the same sizes and
// the same timing method (warm-up, CUDA events around each repeat, the host clock in batches
// for host-side costs, median of the repeats). bench/compare.sh compiles it on the GPU machine
// against the PyTorch install there (which ships LibTorch's headers and libraries) and runs
// it next to brrr and PyTorch eager. Every key names its unit. Prints a table, then one JSON
// object on the last line.
//
// usage: libtorch_ops [--data DIR]   Fashion-MNIST IDX files; default $FASHION_MNIST_DIR,
//        else /usr/share/datasets/fashion-mnist. Each file is read as NAME.gz through
//        `gzip -dc` (the GPU machine need not have zlib's headers), or as plain NAME.
//
// LibTorch's optimizers (torch::optim::SGD, AdamW) update one parameter at a time: there is
// no foreach or fused implementation in the C++ API.
#include <torch/torch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Results = std::map<std::string, double>;

const torch::Device cuda0(torch::kCUDA, 0);

// Waits for the device, checking the status (an earlier asynchronous error surfaces here).
void device_sync() { C10_CUDA_CHECK(cudaDeviceSynchronize()); }

// As bench/common.hpp: mean of the two middle values for an even count.
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_ms(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    at::cuda::CUDAEvent s(cudaEventDefault), e(cudaEventDefault);  // the default flags disable timing
    s.record();
    f();
    e.record();
    e.synchronize();
    ms.push_back(s.elapsed_time(e));
  }
  return median(ms);
}

double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

// Host ns per call of f: one sample per batch of calls, median of the batches.
double host_ns_per_call(long warmup, long batches, long batch, const std::function<void()>& f,
                        const std::function<void()>& after_batch = {}) {
  using Clock = std::chrono::steady_clock;
  for (long i = 0; i < warmup; ++i) f();
  if (after_batch) after_batch();
  std::vector<double> ns;
  for (long b = 0; b < batches; ++b) {
    auto t0 = Clock::now();
    for (long i = 0; i < batch; ++i) f();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(batch));
    if (after_batch) after_batch();
  }
  return median(ns);
}

torch::TensorOptions on_gpu() { return torch::TensorOptions().device(cuda0); }

void host_costs(Results& r) {
  auto a = torch::randn({1024}, on_gpu()), b = torch::randn({1024}, on_gpu());
  r["enqueue_add_1024_us"] = host_ns_per_call(2000, 50, 200, [&] { auto c = a + b; }, device_sync) / 1e3;
  auto ag = torch::randn({1024}, on_gpu().requires_grad(true));
  r["enqueue_add_1024_autograd_us"] = host_ns_per_call(2000, 50, 200, [&] { auto c = ag + b; }, device_sync) / 1e3;
  const std::int64_t n_1mib = (1 << 20) / 4;
  r["alloc_free_1MiB_ns"] = host_ns_per_call(10000, 100, 1000, [&] { auto t = torch::empty({n_1mib}, on_gpu()); });
}

void bandwidth(Results& r) {
  {
    const std::int64_t n = std::int64_t(1) << 28;
    auto a = torch::randn({n}, on_gpu()), b = torch::randn({n}, on_gpu());
    r["add_256M_f32_GBps"] = gbps(3.0 * n * 4, time_ms(3, 20, [&] { auto c = a + b; }));
    r["sum_256M_f32_GBps"] = gbps(1.0 * n * 4, time_ms(3, 20, [&] { auto s = a.sum(); }));
  }
  {
    const std::int64_t rows = 65536, cols = 4096;
    auto x = torch::randn({rows, cols}, on_gpu());
    r["softmax_65536x4096_f32_GBps"] = gbps(2.0 * rows * cols * 4, time_ms(3, 20, [&] { auto y = torch::softmax(x, -1); }));
  }
}

void scans_sorts(Results& r) {
  {
    const std::int64_t rows = 65536, cols = 4096;
    auto x = torch::randn({rows, cols}, on_gpu());
    r["cumsum_65536x4096_f32_GBps"] = gbps(2.0 * rows * cols * 4, time_ms(3, 20, [&] { auto y = torch::cumsum(x, -1); }));
    r["topk_65536x4096_k16_f32_ms"] = time_ms(2, 10, [&] { auto t = torch::topk(x, 16, -1); });
  }
  {
    const std::int64_t n = std::int64_t(1) << 26;
    auto v = torch::randn({n}, on_gpu());
    r["cumsum_64M_f32_GBps"] = gbps(2.0 * n * 4, time_ms(3, 20, [&] { auto y = torch::cumsum(v, 0); }));
    r["topk_64M_k1024_f32_ms"] = time_ms(2, 10, [&] { auto t = torch::topk(v, 1024); });
  }
}

void gemm(Results& r) {
  const std::int64_t n = 8192;
  auto a = torch::randn({n, n}, on_gpu()), b = torch::randn({n, n}, on_gpu());
  const double tflop = 2.0 * n * n * n / 1e12;
  auto tflops = [&](const torch::Tensor& x, const torch::Tensor& y) {
    return tflop / (time_ms(2, 10, [&] { auto c = torch::matmul(x, y); }) * 1e-3);
  };
  at::globalContext().setAllowTF32CuBLAS(false);
  r["gemm_8192_fp32_TFLOPs"] = tflops(a, b);
  at::globalContext().setAllowTF32CuBLAS(true);
  r["gemm_8192_tf32_TFLOPs"] = tflops(a, b);
  at::globalContext().setAllowTF32CuBLAS(false);
  r["gemm_8192_bf16_TFLOPs"] = tflops(a.to(torch::kBFloat16), b.to(torch::kBFloat16));
}

// bench::MlpStep (bench/common.hpp): MLP 784-1024-1024-10, batch 256, raw weights [in, out]
// from nn.Linear's default range, addmm(b, x, W) + relu, cross_entropy, SGD momentum 0.9 lr 0.01.
class MlpStep {
public:
  MlpStep()
      : p_{uniform({784, 1024}, 784), uniform({1024}, 784),  uniform({1024, 1024}, 1024),
           uniform({1024}, 1024),     uniform({1024, 10}, 1024), uniform({10}, 1024)},
        x_(torch::randn({256, 784}, on_gpu())),
        y_(torch::randint(0, 10, {256}, on_gpu().dtype(torch::kLong))),
        opt_(p_, torch::optim::SGDOptions(0.01).momentum(0.9)) {}

  torch::Tensor operator()() {
    opt_.zero_grad();
    auto h = torch::relu(torch::addmm(p_[1], x_, p_[0]));
    h = torch::relu(torch::addmm(p_[3], h, p_[2]));
    auto loss = torch::nn::functional::cross_entropy(torch::addmm(p_[5], h, p_[4]), y_);
    loss.backward();
    opt_.step();
    return loss;
  }

private:
  static torch::Tensor uniform(std::vector<std::int64_t> shape, std::int64_t fan_in) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return (torch::rand(shape, on_gpu()) * (2 * bound) - bound).requires_grad_(true);
  }

  std::vector<torch::Tensor> p_;
  torch::Tensor x_, y_;
  torch::optim::SGD opt_;
};

void mlp_step(Results& r) {
  at::globalContext().setAllowTF32CuBLAS(false);
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  device_sync();
  const std::int64_t base = alloc::getDeviceStats(0).allocated_bytes[aggregate].current;  // before the MLP
  MlpStep step;
  r["mlp_step_784_1024_1024_10_b256_sgd_ms"] = time_ms(10, 50, [&] { auto loss = step(); });
  // Peak during one steady-state step minus what was allocated just before it (as bench_ops).
  device_sync();
  const std::int64_t before = alloc::getDeviceStats(0).allocated_bytes[aggregate].current;
  alloc::resetPeakStats(0);
  auto loss = step();
  device_sync();
  const std::int64_t peak = alloc::getDeviceStats(0).allocated_bytes[aggregate].peak;
  r["mlp_step_peak_MiB"] = static_cast<double>(peak - before) / (1 << 20);
  r["mlp_step_total_MiB"] = static_cast<double>(peak - base) / (1 << 20);
  std::printf("mlp step: loss after 61 steps %.4f\n", loss.item<float>());
}

// The bytes of `path`.gz (through gzip -dc) or of plain `path`.
std::vector<std::uint8_t> read_maybe_gz(const std::string& path) {
  std::vector<std::uint8_t> bytes;
  std::uint8_t buf[1 << 16];
  const bool gz = std::filesystem::exists(path + ".gz");
  FILE* f = gz ? popen(("gzip -dc '" + path + ".gz'").c_str(), "r") : std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path + "[.gz]");
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
  const int status = gz ? pclose(f) : std::fclose(f);
  if (status != 0) throw std::runtime_error("reading " + path + (gz ? ".gz: gzip failed" : ": read failed"));
  return bytes;
}

// An unsigned-byte IDX file (magic 0x000008NN, big-endian dims) as a CPU uint8 tensor.
torch::Tensor read_idx(const std::string& path) {
  std::vector<std::uint8_t> b = read_maybe_gz(path);
  if (b.size() < 4 || b[0] != 0 || b[1] != 0 || b[2] != 0x08) throw std::runtime_error(path + ": not a ubyte IDX file");
  const std::size_t ndim = b[3];
  std::vector<std::int64_t> dims;
  std::size_t numel = 1, off = 4 + 4 * ndim;
  for (std::size_t i = 0; i < ndim && 4 + 4 * i + 4 <= b.size(); ++i) {
    const std::uint8_t* d = &b[4 + 4 * i];
    dims.push_back((std::int64_t(d[0]) << 24) | (d[1] << 16) | (d[2] << 8) | d[3]);
    numel *= static_cast<std::size_t>(dims.back());
  }
  if (dims.size() != ndim || b.size() != off + numel) throw std::runtime_error(path + ": size does not match its dims");
  return torch::from_blob(b.data() + off, dims, torch::kUInt8).clone();
}

// The epoch's shuffle, identical to bench_ops.cpp: Fisher-Yates driven by splitmix64.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  std::uint64_t state = seed;
  for (std::int64_t i = n - 1; i > 0; --i) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(z % static_cast<std::uint64_t>(i + 1))]);
  }
  return p;
}

// One epoch of the main job's MLP (784-512-256-10, dropout 0.2) on the training set resident
// on the GPU (f32 / 255), as bench_ops.cpp: batches of 128 by index_select through the epoch's
// permutation (drop_last), AdamW lr 1e-3 (weight decay 0.01); one warm-up epoch, median of 3.
void fashion_mnist_epoch(const std::string& dir, Results& r) {
  auto images = (read_idx(dir + "/train-images-idx3-ubyte").to(torch::kFloat) / 255).unsqueeze(1).to(cuda0);
  auto labels = read_idx(dir + "/train-labels-idx1-ubyte").to(torch::kLong).to(cuda0);
  const std::int64_t n = images.size(0), batch = 128, steps = n / batch;
  torch::manual_seed(0);
  namespace nn = torch::nn;
  nn::Sequential model(nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Dropout(0.2), nn::Linear(512, 256),
                       nn::ReLU(), nn::Dropout(0.2), nn::Linear(256, 10));
  model->to(cuda0);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  std::vector<double> ms;
  torch::Tensor loss;
  for (int epoch = 0; epoch < 4; ++epoch) {
    std::vector<std::int64_t> p = permutation(n, static_cast<std::uint64_t>(epoch));
    auto perm = torch::from_blob(p.data(), {n}, torch::kLong).to(cuda0);
    device_sync();
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    for (std::int64_t s = 0; s < steps; ++s) {
      auto idx = perm.slice(0, s * batch, (s + 1) * batch);
      loss = torch::nn::functional::cross_entropy(model->forward(images.index_select(0, idx)), labels.index_select(0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    stop.record();
    stop.synchronize();
    if (epoch > 0) ms.push_back(start.elapsed_time(stop));
  }
  r["fashion_mnist_mlp_epoch_ms"] = median(ms);
  std::printf("fashion_mnist: %lld steps per epoch, last loss %.4f\n", static_cast<long long>(steps), loss.item<float>());
}

void h2d(Results& r) {
  const std::int64_t n = (256 << 20) / 4;
  const double bytes = 256.0 * (1 << 20);
  auto pinned = torch::full({n}, 1.5, torch::TensorOptions().pinned_memory(true)), pageable = torch::full({n}, 2.5);
  r["h2d_256MiB_pinned_GBps"] =
      gbps(bytes, time_ms(1, 10, [&] { auto d = pinned.to(cuda0, torch::kFloat, /*non_blocking=*/true); }));
  r["h2d_256MiB_pageable_GBps"] = gbps(bytes, time_ms(1, 10, [&] { auto d = pageable.to(cuda0); }));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::getenv("FASHION_MNIST_DIR") ? std::getenv("FASHION_MNIST_DIR") : "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--data") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: libtorch_ops [--data DIR]\n");
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::puts("libtorch_ops: no CUDA device; nothing to measure");
    return 0;
  }
  torch::manual_seed(0);
  Results r;
  int failed = 0;
  auto run = [&](const char* name, const std::function<void()>& f) {  // one failure does not stop the rest
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "libtorch_ops: %s failed: %s\n", name, e.what());
      ++failed;
    }
  };
  run("host costs", [&] { host_costs(r); });
  run("bandwidth", [&] { bandwidth(r); });
  run("scans and sorts", [&] { scans_sorts(r); });
  run("gemm", [&] { gemm(r); });
  run("mlp step", [&] { mlp_step(r); });
  if (std::filesystem::is_directory(dir))
    run("fashion_mnist epoch", [&] { fashion_mnist_epoch(dir, r); });
  else
    std::fprintf(stderr, "libtorch_ops: fashion_mnist epoch skipped: no directory %s (--data DIR)\n", dir.c_str());
  run("h2d", [&] { h2d(r); });
  run("final device check", [] { device_sync(); });

  for (const auto& [k, v] : r) std::printf("%-40s %12.3f\n", k.c_str(), v);
  std::printf("{");
  bool first = true;
  for (const auto& [k, v] : r) {
    std::printf("%s\"%s\": %.4f", first ? "" : ", ", k.c_str(), v);
    first = false;
  }
  std::printf("}\n");
  return failed ? 1 : 0;
}
