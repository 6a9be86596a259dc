// The soak (tools/soak, docs/reliability.md): trains the Fashion-MNIST CNN for many steps and
// checks that a long run stays healthy:
//   - the loss is finite throughout (a device-side running sum, read at each checkpoint: a
//     NaN or Inf at any step makes it non-finite, and cross-entropy is never negative);
//   - every --checkpoint-every steps, nn::save writes a checkpoint that round-trips exactly:
//     loaded into a second model, every parameter and buffer is bitwise equal and the two
//     models give bitwise equal outputs on the current batch;
//   - after --warmup steps, memory is flat: the process's RSS grows by at most --rss-bound-mib;
//     on CUDA the caching allocator makes no cudaMalloc and its reserved bytes do not move,
//     allocated bytes stay within (prefetch + 1) batches, and the pinned host allocator makes
//     no cudaHostAlloc and its reserved bytes do not move.
// Prints one line per checkpoint and a verdict; exits 1 when a check fails. Run on the CPU
// under AddressSanitizer (build/fuzz, tools/soak) LeakSanitizer checks the exit too.
#include <CLI/CLI.hpp>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string device = "cpu";
  std::string size = "small";
  std::int64_t steps = 10000;
  std::int64_t batch_size = 0;  // 0: 16 for small, 128 for full
  std::int64_t warmup = 1000;
  std::int64_t checkpoint_every = 1000;
  std::int64_t sample_every = 100;
  double rss_bound_mib = 0;  // 0: the size's default
  std::string data = data::default_fashion_mnist_dir;
  std::string dir;  // checkpoint folder (default: a fresh one under TMPDIR)
  std::uint64_t seed = 0;
};

constexpr double pixel_mean = 0.2860, pixel_std = 0.3530;

/// The CNN of examples/fashion_mnist.cpp (conv-pool-conv-pool-fc-fc); "small" narrows it
/// (4 and 8 channels, 32 hidden) so that 10 000 CPU steps fit in CI under sanitizers.
nn::Sequential make_model(const std::string& size) {
  const bool full = size == "full";
  const std::int64_t c1 = full ? 32 : 4, c2 = full ? 64 : 8, hidden = full ? 128 : 32;
  return nn::Sequential{nn::Conv2d(1, c1, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(c1, c2, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Dropout(0.25), nn::Linear(c2 * 7 * 7, hidden), nn::ReLU(),
                        nn::Dropout(0.25), nn::Linear(hidden, 10)};
}

/// Resident set size of this process, from /proc/self/statm.
std::uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

struct Sample {
  std::int64_t step = 0;
  std::uint64_t rss = 0;
  cuda::MemoryStats device;  // zero on the CPU
  cuda::PinnedStats pinned;
};

Sample sample(std::int64_t step, Device dev) {
  Sample s;
  s.step = step;
  s.rss = rss_bytes();
  if (dev.is_cuda()) {
    s.device = cuda::memory_stats(dev);  // host-side counters: no sync
    s.pinned = cuda::pinned_memory_stats();
  }
  return s;
}

std::vector<unsigned char> host_bytes(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<unsigned char> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

/// Saves `model`, loads it into `reload`, and compares both bitwise. Returns the problem, or "".
std::string checkpoint_round_trip(const nn::Module& model, const nn::Module& reload, const std::string& path,
                                  const Tensor& batch) {
  nn::save(model, path);
  nn::load(reload, path);
  nn::StateDict a = model.state_dict(), b = reload.state_dict();
  if (a.size() != b.size()) return "the reloaded model has a different number of tensors";
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return "\"" + name + "\" is missing after reloading";
    if (host_bytes(t) != host_bytes(it->second) || t.dtype() != it->second.dtype())
      return "\"" + name + "\" differs after reloading";
  }
  NoGradGuard no_grad;
  model.eval();
  reload.eval();
  const bool same = host_bytes(model(batch)) == host_bytes(reload(batch));
  model.train();
  return same ? "" : "the reloaded model gives different outputs";
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/// CPU time of this process (all threads), in ms: less sensitive than wall time to other
/// work on a shared machine, so a per-step cost that grows shows here.
double cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"brrr soak: train the Fashion-MNIST CNN for many steps; check memory, loss and checkpoints."};
  app.add_option("--device", cfg.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--size", cfg.size, "small (CNN 4-8-32, batch 16) or full (32-64-128, batch 128)")
      ->check(CLI::IsMember({"small", "full"}))->capture_default_str();
  app.add_option("--steps", cfg.steps, "training steps")->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--batch-size", cfg.batch_size, "examples per step (default: 16 small, 128 full)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--warmup", cfg.warmup, "steps before memory must be flat")->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--checkpoint-every", cfg.checkpoint_every, "steps between checkpoint round trips and loss checks")
      ->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--sample-every", cfg.sample_every, "steps between memory samples")->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--rss-bound-mib", cfg.rss_bound_mib, "allowed RSS growth after warm-up (default: 8 small, 32 full)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--data", cfg.data, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--dir", cfg.dir, "folder for the checkpoint (default: a fresh one in TMPDIR, removed)");
  app.add_option("--seed", cfg.seed, "seed of weights, dropout and shuffling")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cfg.batch_size == 0) cfg.batch_size = cfg.size == "full" ? 128 : 16;
  if (cfg.rss_bound_mib == 0) cfg.rss_bound_mib = cfg.size == "full" ? 32 : 8;
  cfg.warmup = std::min(cfg.warmup, cfg.steps);

  namespace fs = std::filesystem;
  const bool own_dir = cfg.dir.empty();
  if (own_dir) cfg.dir = (fs::temp_directory_path() / ("brrr_soak_" + std::to_string(::getpid()))).string();
  int failures = 0;
  auto failed = [&](const std::string& what) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  };
  try {
    fs::create_directories(cfg.dir);
    const std::string ckpt = (fs::path(cfg.dir) / "soak.safetensors").string();
    Device dev = Device::parse(cfg.device);
    const data::DataLoaderOptions loader_options{.batch_size = cfg.batch_size, .shuffle = true, .seed = cfg.seed,
                                                 .drop_last = true, .device = dev};
    std::printf("brrr soak: %s CNN, batch %lld, %lld steps on %s; warm-up %lld, checkpoint every %lld\n",
                cfg.size.c_str(), static_cast<long long>(cfg.batch_size), static_cast<long long>(cfg.steps),
                dev.str().c_str(), static_cast<long long>(cfg.warmup), static_cast<long long>(cfg.checkpoint_every));
    auto train_set = data::fashion_mnist(cfg.data, true);
    data::DataLoader loader(train_set, loader_options);

    manual_seed(cfg.seed);
    nn::Sequential model = make_model(cfg.size), reload = make_model(cfg.size);
    model.to(dev);
    reload.to(dev);
    optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 0.01});

    std::vector<Sample> samples;
    Sample baseline;  // at the end of warm-up
    Tensor loss_sum = zeros({}, {.device = dev});
    std::int64_t step = 0, interval_start = 0;
    std::uint64_t checkpoint_syncs = 0;
    const std::uint64_t syncs_at_start = dev.is_cuda() ? cuda::sync_count() : 0;
    auto start = Clock::now(), interval_clock = start;
    double interval_cpu = cpu_ms();
    std::printf("%7s %9s %9s %10s %10s %8s %10s %7s %8s %8s\n", "step", "loss", "RSS MiB", "alloc MiB", "resv MiB",
                "mallocs", "pinned MiB", "hostalc", "ms/step", "cpu ms");
    while (step < cfg.steps) {
      for (const data::Batch& b : loader) {
        Tensor x = (b[0] - pixel_mean) / pixel_std;
        Tensor loss = cross_entropy(model(x), b[1]);
        opt.zero_grad();
        loss.backward();
        opt.step();
        {
          NoGradGuard no_grad;
          loss_sum = loss_sum + loss.detach();
        }
        ++step;
        const bool checkpoint = step % cfg.checkpoint_every == 0 || step == cfg.steps;
        if (checkpoint) {
          const std::uint64_t syncs_before = dev.is_cuda() ? cuda::sync_count() : 0;
          const double mean_loss = loss_sum.item<float>() / static_cast<double>(step - interval_start);
          if (!std::isfinite(mean_loss))
            failed("the loss was not finite in steps " + std::to_string(interval_start + 1) + ".." + std::to_string(step));
          std::string problem = checkpoint_round_trip(model, reload, ckpt, x);
          if (!problem.empty()) failed("checkpoint at step " + std::to_string(step) + ": " + problem);
          if (dev.is_cuda()) {
            cuda::synchronize(dev);
            checkpoint_syncs += cuda::sync_count() - syncs_before;
          }
          const auto now = Clock::now();
          const double steps_done = static_cast<double>(step - interval_start);
          const double ms = std::chrono::duration<double, std::milli>(now - interval_clock).count() / steps_done;
          const double cpu = (cpu_ms() - interval_cpu) / steps_done;
          Sample s = sample(step, dev);
          std::printf("%7lld %9.4f %9.1f %10.2f %10.2f %8llu %10.2f %7llu %8.2f %8.2f\n", static_cast<long long>(step),
                      mean_loss, mib(s.rss), mib(s.device.allocated_bytes), mib(s.device.reserved_bytes),
                      static_cast<unsigned long long>(s.device.num_cuda_malloc), mib(s.pinned.reserved_bytes),
                      static_cast<unsigned long long>(s.pinned.num_host_alloc), ms, cpu);
          std::fflush(stdout);
          loss_sum = zeros({}, {.device = dev});
          interval_start = step;
          interval_clock = Clock::now();
          interval_cpu = cpu_ms();
        }
        if (step % cfg.sample_every == 0 || checkpoint || step == cfg.warmup) {
          samples.push_back(sample(step, dev));
          if (step == cfg.warmup) baseline = samples.back();
        }
        if (step == cfg.steps) break;
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::error_code ec;
    if (own_dir) fs::remove_all(cfg.dir, ec);

    // Flatness after warm-up.
    std::uint64_t max_rss = baseline.rss, min_alloc = UINT64_MAX, max_alloc = 0;
    for (const Sample& s : samples) {
      if (s.step < cfg.warmup) continue;
      max_rss = std::max(max_rss, s.rss);
      min_alloc = std::min(min_alloc, s.device.allocated_bytes);
      max_alloc = std::max(max_alloc, s.device.allocated_bytes);
    }
    const Sample& last = samples.back();
    const double rss_growth = mib(static_cast<double>(max_rss) - static_cast<double>(baseline.rss));
    std::printf("\n%lld steps in %.1f s (%.2f ms/step); %zu memory samples, baseline at step %lld\n",
                static_cast<long long>(step), seconds, 1000 * seconds / static_cast<double>(step), samples.size(),
                static_cast<long long>(baseline.step));
    std::printf("RSS: %.1f MiB at the baseline, at most %.1f MiB after it (growth %.2f MiB, bound %.1f MiB)\n",
                mib(baseline.rss), mib(max_rss), rss_growth, cfg.rss_bound_mib);
    if (rss_growth > cfg.rss_bound_mib) failed("RSS grew by more than the bound after warm-up");
    if (dev.is_cuda()) {
      const std::uint64_t batch_bytes = static_cast<std::uint64_t>(cfg.batch_size) * (28 * 28 * 4 + 8);
      const std::uint64_t alloc_bound = static_cast<std::uint64_t>(loader_options.prefetch + 1) * batch_bytes;
      std::printf("device: allocated %.2f..%.2f MiB after warm-up (spread bound %.2f MiB), reserved %.2f -> %.2f MiB, "
                  "cudaMalloc %llu -> %llu, cudaFree %llu -> %llu\n",
                  mib(min_alloc), mib(max_alloc), mib(alloc_bound), mib(baseline.device.reserved_bytes),
                  mib(last.device.reserved_bytes), static_cast<unsigned long long>(baseline.device.num_cuda_malloc),
                  static_cast<unsigned long long>(last.device.num_cuda_malloc),
                  static_cast<unsigned long long>(baseline.device.num_cuda_free),
                  static_cast<unsigned long long>(last.device.num_cuda_free));
      std::printf("pinned: reserved %.2f -> %.2f MiB, allocated %.2f -> %.2f MiB, cudaHostAlloc %llu -> %llu\n",
                  mib(baseline.pinned.reserved_bytes), mib(last.pinned.reserved_bytes),
                  mib(baseline.pinned.allocated_bytes), mib(last.pinned.allocated_bytes),
                  static_cast<unsigned long long>(baseline.pinned.num_host_alloc),
                  static_cast<unsigned long long>(last.pinned.num_host_alloc));
      const std::uint64_t syncs = cuda::sync_count() - syncs_at_start;
      std::printf("host syncs: %llu, all at checkpoints (%llu); in training steps: %llu\n",
                  static_cast<unsigned long long>(syncs), static_cast<unsigned long long>(checkpoint_syncs),
                  static_cast<unsigned long long>(syncs - checkpoint_syncs));
      if (max_alloc - min_alloc > alloc_bound) failed("allocated device bytes spread beyond the bound after warm-up");
      if (last.device.num_cuda_malloc != baseline.device.num_cuda_malloc) failed("cudaMalloc was called after warm-up");
      if (last.device.reserved_bytes != baseline.device.reserved_bytes) failed("reserved device bytes moved after warm-up");
      if (last.pinned.num_host_alloc != baseline.pinned.num_host_alloc) failed("cudaHostAlloc was called after warm-up");
      if (last.pinned.reserved_bytes != baseline.pinned.reserved_bytes) failed("reserved pinned bytes moved after warm-up");
    }
  } catch (const Error& e) {
    std::error_code ec;
    if (own_dir) fs::remove_all(cfg.dir, ec);
    std::fprintf(stderr, "soak: %s\n", e.what());
    return 1;
  }
  if (failures) {
    std::printf("soak: FAILED (%d checks)\n", failures);
    return 1;
  }
  std::printf("soak: passed\n");
  return 0;
}
