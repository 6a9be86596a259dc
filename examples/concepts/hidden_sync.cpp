// Concept 3 — hidden synchronisation: item() in the loop.
//
// loss.item<float>() copies one number to the host, so the host must wait until every
// kernel enqueued before it has run. Called every step, it drains the GPU's queue each
// time: the host can no longer run ahead, and the GPU idles while the host enqueues the
// next step. Keeping the running loss on the device (running = running + loss.detach())
// and reading it once after the loop keeps the queue full.
//
// What to look for: cuda::sync_count() grows by one per step in the first loop and by one
// in total in the second, and the second loop's wall time is lower. Same numbers in both.
// The step is sized so that the GPU's time per step (~0.1 ms) is close to the host's time to
// enqueue it: then the per-step wait costs the most, since host and GPU take turns instead
// of overlapping (wall ~ host + GPU per step instead of max(host, GPU)). With a tiny step
// the GPU is idle anyway and the sync costs little; with a huge one the host is idle anyway.
#include <chrono>
#include <cstdint>
#include <cstdio>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

constexpr int steps = 300;

// One training-like step: forward, backward, SGD update. Returns the (device) loss.
static Tensor step(const Tensor& w, const Tensor& x, const Tensor& y) {
  Tensor loss = mse_loss(relu(matmul(x, w)), y);
  loss.backward();
  {
    NoGradGuard no_grad;
    add_(w, w.grad(), -0.01);
  }
  w.set_grad({});
  return loss.detach();
}

struct Run {
  double wall_ms;
  std::uint64_t syncs;
  double total;
};

template <class Loop> static Run measure(Device dev, Loop&& loop) {
  cuda::synchronize(dev);
  std::uint64_t syncs0 = cuda::sync_count();
  auto t0 = Clock::now();
  double total = loop();  // ends with the value on the host: the work is done
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return {wall, cuda::sync_count() - syncs0, total};
}

int main() {
  if (!cuda::is_available()) {
    std::printf(
        "concept_hidden_sync: no CUDA device here, so nothing to measure.\n"
        "On a GPU it runs %d training steps ([512, 1024] x [1024, 1024] matmul, relu, mse_loss,\n"
        "backward,"
        " SGD) twice and prints:\n"
        "  item() every step          host syncs %d, wall time T1\n"
        "  running loss on the device host syncs 1,   wall time T2 < T1\n"
        "RESULT: n/a (no CUDA device)\n",
        steps, steps);
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  Tensor x = randn({512, 1024}, {.device = dev});
  Tensor y = randn({512, 1024}, {.device = dev});
  Tensor w0 = randn({1024, 1024}, {.device = dev}) * 0.03;
  for (int i = 0; i < 5; ++i) (void)step(w0.clone().requires_grad_(), x, y);  // warm-up

  Run every_step = measure(dev, [&] {
    Tensor w = w0.clone().requires_grad_();
    double total = 0;
    for (int i = 0; i < steps; ++i) total += step(w, x, y).item<float>();  // a sync per step
    return total;
  });
  Run once = measure(dev, [&] {
    Tensor w = w0.clone().requires_grad_();
    Tensor running = zeros({}, {.device = dev});
    for (int i = 0; i < steps; ++i) running = running + step(w, x, y);  // stays on the device
    return static_cast<double>(running.item<float>());  // the one sync
  });

  std::printf("%d training-like steps on %s\n", steps, dev.str().c_str());
  std::printf("  %-28s host syncs %5llu  wall %9.3f ms  mean loss %.6f\n", "item() every step",
              static_cast<unsigned long long>(every_step.syncs), every_step.wall_ms, every_step.total / steps);
  std::printf("  %-28s host syncs %5llu  wall %9.3f ms  mean loss %.6f\n", "running loss on the device",
              static_cast<unsigned long long>(once.syncs), once.wall_ms, once.total / steps);
  std::printf("RESULT: %.2fx faster without the per-step item() (%llu vs %llu host syncs)\n",
              every_step.wall_ms / once.wall_ms, static_cast<unsigned long long>(every_step.syncs),
              static_cast<unsigned long long>(once.syncs));
  return 0;
}
