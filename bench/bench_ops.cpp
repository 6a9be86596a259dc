// bench_ops: brrr's side of the side-by-side comparison (bench/compare.sh runs the same
// workloads in PyTorch eager, bench/torch_ops.py, and LibTorch C++, bench/libtorch_ops.cpp,
// in one invocation). Every key names its unit; docs/benchmarks.md says what each measures.
//   enqueue_add_1024[_autograd]_us   host time to enqueue one 1024-element f32 add
//   alloc_free_1MiB_ns               host time of a cached 1 MiB device alloc + free pair
//   add_256M_f32_GBps, sum_256M_f32_GBps, softmax_65536x4096_f32_GBps   bandwidth
//   cumsum_{65536x4096,64M}_f32_GBps  topk_65536x4096_k16_f32_ms  topk_64M_k1024_f32_ms  (issue 17)
//   sdpa_64x6x256x64_bf16_causal_{fwd,fwd_bwd}_ms   scaled_dot_product_attention at the GPT's
//                                    shape (issue 19), q, k, v [64, 6, 256, 64] requiring grad
//   sdpa_64x6x256x64_bf16_causal_dropout_fwd_bwd_ms   the same with dropout_p 0.2 (training)
//   sdpa_64x6x256x64_f32[_tf32]_causal_dropout_fwd_bwd_ms   the same in f32, TF32 off [on]
//   sdpa_64x6x256x64_f32_tf32_causal_dropout_fwd_ms   its forward alone (TF32 on)
//   gemm_8192_{fp32,tf32,bf16}_TFLOPs                                   8192^3 matmul
//   gpt_gemm_{tf32,bf16}_NxK_{fwd,dx,dw}_us   the GPT's linear GEMMs (issue 19), 16384 tokens,
//                                    weight [N, K]: x w^T, dy w, dy^T x as linear's backward runs
//                                    them; gpt_gemms_{tf32,bf16}_layer_us the sum over one layer
//   mlp_step_784_1024_1024_10_b256_sgd_ms   one SGD-momentum training step (TF32 off)
//   mlp_step_peak_MiB                peak allocated during that step minus allocated before it
//   mlp_step_total_MiB               that peak minus allocated before the MLP's tensors existed
//   fashion_mnist_mlp_epoch_ms       one epoch of the main job's MLP, AdamW, batch 128
//   h2d_256MiB_{pinned,pageable}_GBps   host-to-device copy of 256 MiB
//   batch_norm_32x64x56x56_f32_{train_fwd,train_fwd_bwd,eval_fwd}_ms   F.batch_norm with weight,
//                                    bias and running stats (training updates them)
//   conv_transpose2d_64x256x16x16_k4s2p1_f32_{fwd,fwd_bwd}_ms   DCGAN's upsampling layer
//                                    (-> [64, 128, 32, 32], bias), TF32 off
// Timing: warm-up, then CUDA events around each repeat (host clock for the host-side
// costs), median of the repeats. Prints a table, then one JSON object on the last line.
//
// usage: bench_ops [--data DIR] [--only NAMES]
//        --data: Fashion-MNIST IDX files (.gz or plain); default $FASHION_MNIST_DIR, else
//        /usr/share/datasets/fashion-mnist. A missing directory skips that workload (reported
//        on stderr); the others still run.
//        --only: run just the workloads whose names contain one of the comma-separated NAMES
//        (the names of main()'s run() calls, e.g. --only "scans,norm conv").
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include "common.hpp"

using namespace brrr;

namespace {

using Results = std::map<std::string, double>;

void host_costs(Device dev, Results& r) {
  auto drain = [&] { cuda::synchronize(dev); };  // keep the launch queue short between batches
  Tensor a = randn({1024}, {.device = dev}), b = randn({1024}, {.device = dev});
  r["enqueue_add_1024_us"] = bench::host_ns_per_call(2000, 50, 200, [&] { Tensor c = a + b; }, drain).median_ns / 1e3;
  Tensor ag = randn({1024}, {.device = dev, .requires_grad = true});
  r["enqueue_add_1024_autograd_us"] =
      bench::host_ns_per_call(2000, 50, 200, [&] { Tensor c = ag + b; }, drain).median_ns / 1e3;
  // The first pair made the allocator's segment during the warm-up: from then on, pure cache.
  const std::int64_t n_1mib = (1 << 20) / 4;
  r["alloc_free_1MiB_ns"] =
      bench::host_ns_per_call(10000, 100, 1000, [&] { Tensor t = empty({n_1mib}, {.device = dev}); }).median_ns;
}

void bandwidth(Device dev, Results& r) {
  {
    const std::int64_t n = std::int64_t(1) << 28;
    Tensor a = randn({n}, {.device = dev}), b = randn({n}, {.device = dev});
    r["add_256M_f32_GBps"] = bench::gbps(3.0 * n * 4, bench::time_ms(dev, 3, 20, [&] { Tensor c = a + b; }));
    r["sum_256M_f32_GBps"] = bench::gbps(1.0 * n * 4, bench::time_ms(dev, 3, 20, [&] { Tensor s = sum(a); }));
  }
  {
    // One read of the input and one write of the output: the minimum traffic.
    const std::int64_t rows = 65536, cols = 4096;
    Tensor x = randn({rows, cols}, {.device = dev});
    r["softmax_65536x4096_f32_GBps"] =
        bench::gbps(2.0 * rows * cols * 4, bench::time_ms(dev, 3, 20, [&] { Tensor y = softmax(x, -1); }));
  }
  {
    // Transposed copies (x.t().contiguous()): a GPT weight (the TF32 GEMMs' K-major copy), 20
    // per CUDA-event pair (us per copy), and a large matrix (GB/s of one read and one write).
    Tensor w = randn({1536, 384}, {.device = dev});
    r["transpose_1536x384_f32_us"] = 1e3 / 20 * bench::time_ms(dev, 3, 20, [&] {
      for (int i = 0; i < 20; ++i) Tensor t = w.t().contiguous();
    });
    const std::int64_t n = 8192;
    Tensor x = randn({n, n}, {.device = dev});
    r["transpose_8192x8192_f32_GBps"] =
        bench::gbps(2.0 * n * n * 4, bench::time_ms(dev, 3, 20, [&] { Tensor t = x.t().contiguous(); }));
  }
}

// Issue 17's scans and sorts: cumsum (bandwidth: one read, one write) along rows of a
// matrix and along one long vector; topk along rows and of one long vector (ms).
// Issue 19: causal attention at nanoGPT shakespeare-char's shape, forward and forward +
// backward (the gradients of q, k and v).
void attention(Device dev, Results& r) {
  const TensorOptions o{.dtype = DType::bf16, .device = dev, .requires_grad = true};
  Tensor q = randn({64, 6, 256, 64}, o), k = randn({64, 6, 256, 64}, o), v = randn({64, 6, 256, 64}, o);
  Tensor g = randn({64, 6, 256, 64}, {.dtype = DType::bf16, .device = dev});
  const SdpaOptions causal{.is_causal = true};
  r["sdpa_64x6x256x64_bf16_causal_fwd_ms"] = bench::time_ms(dev, 3, 20, [&] {
    NoGradGuard no_grad;
    Tensor y = scaled_dot_product_attention(q, k, v, causal);
  });
  r["sdpa_64x6x256x64_bf16_causal_fwd_bwd_ms"] = bench::time_ms(dev, 3, 20, [&] {
    Tensor y = scaled_dot_product_attention(q, k, v, causal);
    y.backward(g);
  });
  const SdpaOptions dropout{.dropout_p = 0.2, .is_causal = true};  // the GPT's training step
  r["sdpa_64x6x256x64_bf16_causal_dropout_fwd_bwd_ms"] = bench::time_ms(dev, 3, 20, [&] {
    Tensor y = scaled_dot_product_attention(q, k, v, dropout);
    y.backward(g);
  });
  // f32 (the GPT's --dtype tf32 step): SIMT kernels with TF32 off, tensor cores with it on.
  const TensorOptions f32{.device = dev, .requires_grad = true};
  Tensor qf = randn({64, 6, 256, 64}, f32), kf = randn({64, 6, 256, 64}, f32), vf = randn({64, 6, 256, 64}, f32);
  Tensor gf = randn({64, 6, 256, 64}, {.device = dev});
  const bool tf32_before = allow_tf32();
  for (bool tf32 : {false, true}) {
    set_allow_tf32(tf32);
    if (tf32)
      r["sdpa_64x6x256x64_f32_tf32_causal_dropout_fwd_ms"] = bench::time_ms(dev, 3, 20, [&] {
        NoGradGuard no_grad;
        Tensor y = scaled_dot_product_attention(qf, kf, vf, dropout);
      });
    r[tf32 ? "sdpa_64x6x256x64_f32_tf32_causal_dropout_fwd_bwd_ms" : "sdpa_64x6x256x64_f32_causal_dropout_fwd_bwd_ms"] =
        bench::time_ms(dev, 3, 20, [&] {
          Tensor y = scaled_dot_product_attention(qf, kf, vf, dropout);
          y.backward(gf);
        });
  }
  set_allow_tf32(tf32_before);
}

void scans_sorts(Device dev, Results& r) {
  {
    const std::int64_t rows = 65536, cols = 4096;
    Tensor x = randn({rows, cols}, {.device = dev});
    r["cumsum_65536x4096_f32_GBps"] =
        bench::gbps(2.0 * rows * cols * 4, bench::time_ms(dev, 3, 20, [&] { Tensor y = cumsum(x, -1); }));
    r["topk_65536x4096_k16_f32_ms"] = bench::time_ms(dev, 2, 10, [&] { ValuesIndices t = topk(x, 16, -1); });
  }
  {
    const std::int64_t n = std::int64_t(1) << 26;
    Tensor v = randn({n}, {.device = dev});
    r["cumsum_64M_f32_GBps"] = bench::gbps(2.0 * n * 4, bench::time_ms(dev, 3, 20, [&] { Tensor y = cumsum(v, 0); }));
    r["topk_64M_k1024_f32_ms"] = bench::time_ms(dev, 2, 10, [&] { ValuesIndices t = topk(v, 1024); });
  }
}

void gemm(Device dev, Results& r) {
  const std::int64_t n = 8192;
  Tensor a = randn({n, n}, {.device = dev}), b = randn({n, n}, {.device = dev});
  const double tflop = 2.0 * n * n * n / 1e12;
  auto tflops = [&](const Tensor& x, const Tensor& y) {
    return tflop / (bench::time_ms(dev, 2, 10, [&] { Tensor c = matmul(x, y); }) * 1e-3);
  };
  set_allow_tf32(false);
  r["gemm_8192_fp32_TFLOPs"] = tflops(a, b);
  set_allow_tf32(true);
  r["gemm_8192_tf32_TFLOPs"] = tflops(a, b);
  set_allow_tf32(false);
  r["gemm_8192_bf16_TFLOPs"] = tflops(a.to(DType::bf16), b.to(DType::bf16));
}

// The GEMMs of one GPT layer (6 layers, 384 wide, 64 x 256 tokens): qkv, proj, fc, fc2, each
// forward (x w^T), input gradient (dy w) and weight gradient (dy^T x), in the layouts linear
// and its backward hand to matmul.
void gpt_gemms(Device dev, Results& r) {
  const std::int64_t m = 64 * 256;
  const bool tf32_before = allow_tf32();
  for (DType dt : {DType::f32, DType::bf16}) {
    set_allow_tf32(dt == DType::f32);
    const std::string tag = dt == DType::f32 ? "tf32" : "bf16";
    double layer = 0;
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}}) {
      Tensor x = randn({m, k}, {.device = dev}).to(dt), w = randn({n, k}, {.device = dev}).to(dt);
      Tensor dy = randn({m, n}, {.device = dev}).to(dt);
      const std::string shape = std::to_string(n) + "x" + std::to_string(k);
      // 10 products per timed repeat: the launches queue up, so the events time the GPU's work.
      auto us = [&](const std::function<Tensor()>& f) {
        return 1e3 / 10 * bench::time_ms(dev, 2, 10, [&] {
          for (int i = 0; i < 10; ++i) Tensor c = f();
        });
      };
      const double fwd = us([&] { return matmul(x, w.t()); });
      const double dx = us([&] { return matmul(dy, w); });
      const double dw = us([&] { return matmul(dy.t(), x); });
      r["gpt_gemm_" + tag + "_" + shape + "_fwd_us"] = fwd;
      r["gpt_gemm_" + tag + "_" + shape + "_dx_us"] = dx;
      r["gpt_gemm_" + tag + "_" + shape + "_dw_us"] = dw;
      layer += fwd + dx + dw;
    }
    r["gpt_gemms_" + tag + "_layer_us"] = layer;
  }
  set_allow_tf32(tf32_before);
}

void mlp_step(Device dev, Results& r) {
  set_allow_tf32(false);
  cuda::synchronize(dev);
  const std::uint64_t base = cuda::memory_stats(dev).allocated_bytes;  // before the MLP's tensors
  bench::MlpStep step(dev);
  r["mlp_step_784_1024_1024_10_b256_sgd_ms"] = bench::time_ms(dev, 10, 50, [&] { Tensor loss = step(); });
  // Peak memory of one steady-state step (momentum buffers exist, the previous step's
  // gradients are still held): the allocator's peak during the step minus what was allocated
  // just before it, so tensors of other workloads and library workspaces do not count.
  cuda::synchronize(dev);
  const std::uint64_t before = cuda::memory_stats(dev).allocated_bytes;
  cuda::reset_peak_memory_stats(dev);
  Tensor loss = step();
  cuda::synchronize(dev);
  const std::uint64_t peak = cuda::memory_stats(dev).peak_allocated_bytes;
  r["mlp_step_peak_MiB"] = static_cast<double>(peak - before) / (1 << 20);
  // The whole working set: weights, batch, momentum, gradients and the step's temporaries.
  r["mlp_step_total_MiB"] = static_cast<double>(peak - base) / (1 << 20);
  std::printf("mlp step: loss after %d steps %.4f\n", 61, loss.item<float>());
}

// The epoch's shuffle, identical in all three programs: Fisher-Yates driven by splitmix64
// (Steele et al. 2014) seeded with `seed`. Made on the host before the epoch's clock starts.
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

// One epoch of examples/fashion_mnist's MLP (784-512-256-10 with dropout 0.2) on the whole
// training set resident on the GPU (f32 / 255, as brrr::data reads it): batches of 128
// gathered by index_select through a per-epoch permutation (drop_last: 468 steps),
// cross_entropy, AdamW lr 1e-3 (weight decay 0.01, the default). No normalisation, schedule
// or label smoothing: the workload is the step loop, not the accuracy. One warm-up epoch,
// then the median of 3 epochs timed with events (the host reads nothing inside an epoch).
void fashion_mnist_epoch(Device dev, const std::string& dir, Results& r) {
  auto train = data::fashion_mnist(dir, true);
  Tensor images = train->columns()[0].to(dev), labels = train->columns()[1].to(dev);
  const std::int64_t n = images.size(0), batch = 128, steps = n / batch;
  manual_seed(0);
  nn::Sequential model{nn::Flatten(),        nn::Linear(784, 512), nn::ReLU(), nn::Dropout(0.2),
                       nn::Linear(512, 256), nn::ReLU(),           nn::Dropout(0.2), nn::Linear(256, 10)};
  model.to(dev);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  std::vector<double> ms;
  Tensor loss;
  for (int epoch = 0; epoch < 4; ++epoch) {
    Tensor perm = Tensor::from_vector(permutation(n, static_cast<std::uint64_t>(epoch))).to(dev);
    cuda::synchronize(dev);
    cuda::Event start, stop;
    start.record(dev);
    for (std::int64_t s = 0; s < steps; ++s) {
      Tensor idx = perm.slice(0, s * batch, (s + 1) * batch);
      loss = cross_entropy(model(index_select(images, 0, idx)), index_select(labels, 0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    stop.record(dev);
    stop.synchronize();
    if (epoch > 0) ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  r["fashion_mnist_mlp_epoch_ms"] = bench::median(ms);
  std::printf("fashion_mnist: %lld steps per epoch, last loss %.4f\n", static_cast<long long>(steps),
              loss.item<float>());
}

void h2d(Device dev, Results& r) {
  const std::int64_t n = (256 << 20) / 4;
  const double bytes = 256.0 * (1 << 20);
  Tensor pinned = full({n}, 1.5, {.pinned = true}), pageable = full({n}, 2.5);
  r["h2d_256MiB_pinned_GBps"] =
      bench::gbps(bytes, bench::time_ms(dev, 1, 10, [&] { Tensor d = pinned.to(dev, {.non_blocking = true}); }));
  r["h2d_256MiB_pageable_GBps"] = bench::gbps(bytes, bench::time_ms(dev, 1, 10, [&] { Tensor d = pageable.to(dev); }));
}

// Forward, or forward + backward of sum(y * g) into the input and parameters.
double fwd_bwd_ms(Device dev, const std::vector<Tensor>& leaves, const std::function<Tensor()>& f, bool backward) {
  Tensor g;
  return bench::time_ms(dev, 5, 30, [&] {
    for (const Tensor& t : leaves) t.set_grad({});
    Tensor y = f();
    if (!backward) return;
    if (!g.defined()) g = randn(y.shape(), {.device = dev});
    y.backward(g);
  });
}

void norm_conv(Device dev, Results& r) {
  set_allow_tf32(false);
  {
    Tensor x = randn({32, 64, 56, 56}, {.device = dev, .requires_grad = true});
    Tensor w = randn({64}, {.device = dev, .requires_grad = true}), b = randn({64}, {.device = dev, .requires_grad = true});
    Tensor rm = zeros({64}, {.device = dev}), rv = ones({64}, {.device = dev});
    auto train = [&] { return batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5); };
    r["batch_norm_32x64x56x56_f32_train_fwd_ms"] = fwd_bwd_ms(dev, {x, w, b}, train, false);
    r["batch_norm_32x64x56x56_f32_train_fwd_bwd_ms"] = fwd_bwd_ms(dev, {x, w, b}, train, true);
    NoGradGuard no_grad;
    r["batch_norm_32x64x56x56_f32_eval_fwd_ms"] =
        fwd_bwd_ms(dev, {}, [&] { return batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5); }, false);
  }
  {
    Tensor x = randn({64, 256, 16, 16}, {.device = dev, .requires_grad = true});
    Tensor w = mul(randn({256, 128, 4, 4}, {.device = dev}), 0.02).detach().requires_grad_();
    Tensor b = zeros({128}, {.device = dev, .requires_grad = true});
    auto f = [&] { return conv_transpose2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}}); };
    r["conv_transpose2d_64x256x16x16_k4s2p1_f32_fwd_ms"] = fwd_bwd_ms(dev, {x, w, b}, f, false);
    r["conv_transpose2d_64x256x16x16_k4s2p1_f32_fwd_bwd_ms"] = fwd_bwd_ms(dev, {x, w, b}, f, true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::getenv("FASHION_MNIST_DIR") ? std::getenv("FASHION_MNIST_DIR") : data::default_fashion_mnist_dir;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--data") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      const std::string names = argv[++i];
      for (std::size_t at = 0; at <= names.size();) {
        const std::size_t comma = std::min(names.find(',', at), names.size());
        if (comma > at) only.push_back(names.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_ops [--data DIR] [--only NAMES]\n");
      return 2;
    }
  }
  auto wanted = [&](const std::string& name) {
    if (only.empty()) return true;
    for (const std::string& o : only)
      if (name.find(o) != std::string::npos) return true;
    return false;
  };
  if (!cuda::is_available()) {
    std::puts("bench_ops: no CUDA device; nothing to measure");
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  Results r;
  int failed = 0;
  // Each workload in its own scope (its tensors go back to the cache before the next); one
  // that throws is reported and the others still run.
  auto run = [&](const char* name, const std::function<void()>& f) {
    if (!wanted(name)) return;
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_ops: %s failed: %s\n", name, e.what());
      ++failed;
    }
  };
  run("host costs", [&] { host_costs(dev, r); });
  run("bandwidth", [&] { bandwidth(dev, r); });
  run("scans and sorts", [&] { scans_sorts(dev, r); });
  run("attention", [&] { attention(dev, r); });
  run("gemm", [&] { gemm(dev, r); });
  run("gpt gemms", [&] { gpt_gemms(dev, r); });
  run("mlp step", [&] { mlp_step(dev, r); });
  if (std::filesystem::is_directory(dir))
    run("fashion_mnist epoch", [&] { fashion_mnist_epoch(dev, dir, r); });
  else if (wanted("fashion_mnist epoch"))
    std::fprintf(stderr, "bench_ops: fashion_mnist epoch skipped: no directory %s (--data DIR)\n", dir.c_str());
  run("h2d", [&] { h2d(dev, r); });
  run("norm conv", [&] { norm_conv(dev, r); });

  for (const auto& [k, v] : r) std::printf("%-40s %12.3f\n", k.c_str(), v);
  bench::print_json(r);
  return failed ? 1 : 0;
}
