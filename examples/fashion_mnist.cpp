// The main job: train an MLP or a small CNN on Fashion-MNIST, on the GPU when there is one.
//
// The loop is written so that the host never waits for the device inside a training step:
// batches arrive through brrr::data::DataLoader (pinned host batches, non_blocking copies on
// a transfer stream, an event per batch), the running loss and the correct-prediction count
// stay on the device, and the host reads them back only at logging points. The summary
// reports how many host syncs each training step cost (cuda::sync_count()).
//
// Defaults (chosen to reach the accuracy targets within 10 epochs, see docs/fashion_mnist.md):
// AdamW, batch 128, a cosine schedule with one epoch of linear warmup, dropout, label
// smoothing 0.1, seed 0.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string model = "mlp";
  int epochs = 10;
  std::int64_t batch_size = 128;
  std::optional<double> lr;  // default per optimizer
  std::string optimizer = "adamw";
  std::string device = "auto";
  std::string data = data::default_fashion_mnist_dir;
  std::uint64_t seed = 0;
  std::string save, eval, metrics;
  int log_every = 50;
  bool stream_check = false;
};

// Fashion-MNIST's pixel mean and standard deviation (of the training images in [0, 1]).
constexpr double pixel_mean = 0.2860, pixel_std = 0.3530;

nn::Sequential make_model(const std::string& kind) {
  if (kind == "mlp")
    return nn::Sequential{nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Dropout(0.2),
                          nn::Linear(512, 256), nn::ReLU(), nn::Dropout(0.2), nn::Linear(256, 10)};
  // conv 32 + pool, conv 64 + pool, dropout, FC 128: the reference model of docs/benchmarks.md
  return nn::Sequential{nn::Conv2d(1, 32, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Dropout(0.25), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                        nn::Dropout(0.25), nn::Linear(128, 10)};
}

Device pick_device(const std::string& text) {
  if (text == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  return Device::parse(text);  // validates cuda:N
}

std::uint64_t syncs(Device dev) { return dev.is_cuda() ? cuda::sync_count() : 0; }

// A one-line progress bar on a terminal; plain lines every log interval otherwise.
class Progress {
public:
  Progress(int epoch, int epochs, std::int64_t steps) : epoch_(epoch), epochs_(epochs), steps_(steps) {}
  void update(std::int64_t step, std::int64_t samples, double seconds, double loss) {
    double rate = seconds > 0 ? samples / seconds : 0;
    if (tty_) {
      int width = 30, filled = static_cast<int>(width * step / std::max<std::int64_t>(steps_, 1));
      std::printf("\repoch %d/%d [%s%s] %5lld/%lld  loss %.4f  %8.0f samples/s", epoch_, epochs_,
                  std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                  static_cast<long long>(step), static_cast<long long>(steps_), loss, rate);
      std::fflush(stdout);
    } else {
      std::printf("epoch %d/%d step %lld/%lld loss %.4f %.0f samples/s\n", epoch_, epochs_,
                  static_cast<long long>(step), static_cast<long long>(steps_), loss, rate);
    }
  }
  void done() {
    if (tty_) std::printf("\n");
  }

private:
  int epoch_, epochs_;
  std::int64_t steps_;
  bool tty_ = isatty(fileno(stdout));
};

// Accuracy on a dataset: predictions compared on the device, one read-back at the end.
double evaluate(const nn::Module& model, data::DataLoader& loader, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  Tensor correct = zeros({}, {.dtype = DType::i64, .device = dev});
  std::int64_t total = 0;
  for (const data::Batch& b : loader) {
    Tensor x = (b[0] - pixel_mean) / pixel_std;
    correct = correct + sum(eq(argmax(model(x), 1), b[1]));
    total += b[1].size(0);
  }
  model.train();
  return static_cast<double>(correct.item<std::int64_t>()) / static_cast<double>(total);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train an MLP or CNN on Fashion-MNIST with brrr (GPU when available)."};
  app.add_option("--model", cfg.model, "mlp (784-512-256-10) or cnn (conv32-pool-conv64-pool-fc128)")
      ->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "training epochs")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch-size", cfg.batch_size, "examples per step")->check(CLI::Range(1, 60000))->capture_default_str();
  app.add_option("--lr", cfg.lr, "peak learning rate (default: 2e-3 for adamw, 0.05 for sgd)")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", cfg.optimizer, "sgd (momentum 0.9, nesterov) or adamw (weight decay 0.05)")
      ->check(CLI::IsMember({"sgd", "adamw"}))->capture_default_str();
  app.add_option("--device", cfg.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--data", cfg.data, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--seed", cfg.seed, "seed of weights, dropout and shuffling")->capture_default_str();
  app.add_option("--save", cfg.save, "write the trained weights to FILE.safetensors");
  app.add_option("--eval", cfg.eval, "skip training: load FILE.safetensors and report test accuracy");
  app.add_option("--metrics", cfg.metrics, "write per-epoch metrics to FILE.csv");
  app.add_option("--log-every", cfg.log_every, "steps between progress updates (each reads the loss: one sync)")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_flag("--stream-check", cfg.stream_check,
               "run under cuda::set_stream_check(true): any unordered cross-stream access is an error "
               "(a test mode: exits 77 without a CUDA device)");
  CLI11_PARSE(app, argc, argv);
  if (cfg.stream_check && !cuda::is_available()) {
    std::printf("--stream-check: no CUDA device, skipped\n");
    return 77;
  }
  if (cfg.stream_check) cuda::set_stream_check(true);
  if (cuda::stream_check_enabled()) std::printf("stream check: on (every cross-stream access is checked)\n");

  try {
    Device dev = pick_device(cfg.device);
    double lr = cfg.lr.value_or(cfg.optimizer == "adamw" ? 2e-3 : 0.05);
    std::printf("brrr fashion_mnist: model %s on %s, %d epochs, batch %lld, %s lr %g, seed %llu\n", cfg.model.c_str(),
                dev.str().c_str(), cfg.epochs, static_cast<long long>(cfg.batch_size), cfg.optimizer.c_str(), lr,
                static_cast<unsigned long long>(cfg.seed));

    auto train_set = data::fashion_mnist(cfg.data, true);
    auto test_set = data::fashion_mnist(cfg.data, false);
    data::DataLoader test_loader(test_set, {.batch_size = 1000, .device = dev});

    manual_seed(cfg.seed);
    nn::Sequential model = make_model(cfg.model);  // initialised on the CPU: identical on every device
    model.to(dev);
    std::printf("%lld parameters\n", static_cast<long long>(model.num_parameters()));

    if (!cfg.eval.empty()) {
      nn::load(model, cfg.eval);
      std::printf("test accuracy %.2f%%\n", 100 * evaluate(model, test_loader, dev));
      return 0;
    }

    data::DataLoader train_loader(train_set, {.batch_size = cfg.batch_size, .shuffle = true, .seed = cfg.seed,
                                              .drop_last = true, .device = dev});
    std::unique_ptr<optim::Optimizer> opt;
    if (cfg.optimizer == "adamw")
      opt = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamOptions{.lr = lr, .weight_decay = 0.05});
    else
      opt = std::make_unique<optim::SGD>(model.parameters(),
                                         optim::SGDOptions{.lr = lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
    std::int64_t steps_per_epoch = train_loader.num_batches();
    optim::CosineWithWarmup schedule(*opt, steps_per_epoch, steps_per_epoch * cfg.epochs);

    std::ofstream metrics;
    if (!cfg.metrics.empty()) {
      metrics.open(cfg.metrics);
      if (!metrics) throw Error(ErrorKind::io, "--metrics: cannot write " + cfg.metrics);
      metrics << "epoch,train_loss,test_accuracy,epoch_seconds,samples_per_second,lr\n";
    }

    auto start = Clock::now();
    std::int64_t total_steps = 0, total_samples = 0;
    std::uint64_t train_syncs = 0;
    double best = 0;
    for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
      auto epoch_start = Clock::now();
      Progress progress(epoch, cfg.epochs, steps_per_epoch);
      Tensor loss_sum = zeros({}, {.device = dev});  // stays on the device
      std::int64_t step = 0, samples = 0;
      std::uint64_t syncs_before = syncs(dev);
      for (const data::Batch& b : train_loader) {
        Tensor x = (b[0] - pixel_mean) / pixel_std;
        Tensor loss = cross_entropy(model(x), b[1], {.label_smoothing = 0.1});
        opt->zero_grad();
        loss.backward();
        opt->step();
        schedule.step();
        {
          NoGradGuard no_grad;
          loss_sum = loss_sum + loss.detach();
        }
        ++step;
        samples += b[1].size(0);
        if (step % cfg.log_every == 0 || step == steps_per_epoch) {  // a logging point: one sync
          double seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
          progress.update(step, samples, seconds, loss_sum.item<float>() / static_cast<double>(step));
        }
      }
      progress.done();
      train_syncs += syncs(dev) - syncs_before;
      double train_loss = loss_sum.item<float>() / static_cast<double>(std::max<std::int64_t>(step, 1));
      double seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      double acc = evaluate(model, test_loader, dev);
      best = std::max(best, acc);
      total_steps += step;
      total_samples += samples;
      std::printf("epoch %2d  train loss %.4f  test accuracy %.2f%%  %.1f s  %.0f samples/s  lr %.2e\n", epoch,
                  train_loss, 100 * acc, seconds, samples / seconds, opt->lr());
      if (metrics.is_open())
        metrics << epoch << ',' << train_loss << ',' << acc << ',' << seconds << ',' << samples / seconds << ','
                << opt->lr() << '\n';
    }
    double wall = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("\nsummary: %d epochs in %.1f s (%.0f training samples/s), best test accuracy %.2f%%\n", cfg.epochs,
                wall, total_samples / wall, 100 * best);
    if (dev.is_cuda())
      std::printf("host syncs per training step: %.4f (%llu syncs in %lld steps, all at logging points)\n",
                  static_cast<double>(train_syncs) / static_cast<double>(total_steps),
                  static_cast<unsigned long long>(train_syncs), static_cast<long long>(total_steps));
    if (!cfg.save.empty()) {
      nn::save(model, cfg.save);
      std::printf("saved weights to %s\n", cfg.save.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
