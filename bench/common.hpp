// bench/common.hpp — what the brrr benchmark programs share: medians, CUDA-event timing,
// host time per call measured in batches, the one-line JSON they all print last, and the MLP
// training step that bench_ops and bench_mlp_step both time. bench/torch_ops.py and
// bench/libtorch_ops.cpp repeat the same methods for PyTorch and LibTorch, so a change to a
// method here must be made there too.
//
// Include it after the standard headers a program uses: it imports brrr, and a standard
// header included after that import may clash with the module's copy of it.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>
import brrr;

namespace bench {

/// The median (mean of the two middle values for an even count, as Python's
/// statistics.median, so all three systems report the same statistic).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

/// Device milliseconds of `f`: `warmup` untimed runs, then `reps` runs each bracketed by
/// events on the current stream of `dev` and waited for; returns the median.
inline double time_ms(brrr::Device dev, int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    brrr::cuda::Event start, stop;
    start.record(dev);
    f();
    stop.record(dev);
    stop.synchronize();
    ms.push_back(brrr::cuda::Event::elapsed_ms(start, stop));
  }
  return median(ms);
}

/// Bytes per second of `bytes` moved in `ms`, in GB/s (1e9 bytes).
inline double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

struct HostTiming {
  double median_ns = 0, p10_ns = 0, p90_ns = 0;
  long calls = 0;  // timed calls
};

/// Host nanoseconds per call of `f`: `warmup` untimed calls, then `batches` batches of
/// `batch` calls; one sample per batch (a clock read per call would add its own 20-40 ns).
/// `after_batch` (optional, untimed) runs after each batch, e.g. to drain the launch queue.
inline HostTiming host_ns_per_call(long warmup, long batches, long batch, const std::function<void()>& f,
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
  return {median(ns), quantile(ns, 0.1), quantile(ns, 0.9), batches * batch};
}

/// Prints `r` as one JSON object on one line (the line compare.py reads).
inline void print_json(const std::map<std::string, double>& r, int decimals = 4) {
  std::printf("{");
  bool first = true;
  for (const auto& [k, v] : r) {
    std::printf("%s\"%s\": %.*f", first ? "" : ", ", k.c_str(), decimals, v);
    first = false;
  }
  std::printf("}\n");
}

/// One training step of an MLP 784-1024-1024-10 on a fixed batch of 256 (f32): forward
/// built from raw weight tensors (addmm(bias, x, W): the bias fused into the GEMM, + relu,
/// no nn module), cross_entropy,
/// backward, SGD momentum 0.9 (lr 0.01). Weights [in, out] drawn from nn.Linear's default
/// range U(-1/sqrt(in), 1/sqrt(in)). The caller sets TF32 off. The same step is written in
/// torch_ops.py and libtorch_ops.cpp.
class MlpStep {
public:
  static constexpr std::int64_t batch = 256, d_in = 784, d_h = 1024, d_out = 10;

  explicit MlpStep(brrr::Device dev)
      : params_{uniform({d_in, d_h}, d_in, dev), uniform({d_h}, d_in, dev),   uniform({d_h, d_h}, d_h, dev),
                uniform({d_h}, d_h, dev),        uniform({d_h, d_out}, d_h, dev), uniform({d_out}, d_h, dev)},
        x_(brrr::randn({batch, d_in}, {.device = dev})),
        y_(brrr::randint(0, d_out, {batch}, {.device = dev})),
        opt_(params_, {.lr = 0.01, .momentum = 0.9}) {}

  /// Enqueues one step and returns its loss (a 0-d device tensor; reading it is a sync).
  brrr::Tensor operator()() {
    using brrr::addmm, brrr::relu;
    opt_.zero_grad();
    brrr::Tensor h = relu(addmm(params_[1], x_, params_[0]));
    h = relu(addmm(params_[3], h, params_[2]));
    brrr::Tensor loss = brrr::cross_entropy(addmm(params_[5], h, params_[4]), y_);
    loss.backward();
    opt_.step();
    return loss;
  }

private:
  static brrr::Tensor uniform(brrr::Shape shape, std::int64_t fan_in, brrr::Device dev) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    brrr::Tensor w = brrr::rand(std::move(shape), {.device = dev}) * (2 * bound) - bound;
    w.requires_grad_(true);
    return w;
  }

  std::vector<brrr::Tensor> params_;
  brrr::Tensor x_, y_;
  brrr::optim::SGD opt_;
};

}  // namespace bench
