// Ranks 4 — data parallelism. Every rank holds the whole CNN of examples/fashion_mnist.cpp and
// trains on its own shard of each epoch (DistributedSampler); DistributedDataParallel averages
// the gradients during backward, bucket by bucket, so every rank takes the same optimizer step
// and the models stay identical. With N ranks and --batch-size B per rank, a step sees N x B
// examples.
//
//   brrr-run --nproc-per-node 2 build/release/examples/ranks/ddp_fashion_mnist [--epochs 1]
//
// What to look for: the same accuracy as one process with batch N x B in about 1/N of the
// time per epoch (on N GPUs); the RESULT line gives the step time and the accuracy.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>
import brrr;

#include "examples/ranks/common.hpp"

using namespace brrr;
using Clock = std::chrono::steady_clock;

namespace {
constexpr double pixel_mean = 0.2860, pixel_std = 0.3530;

nn::Sequential cnn() {
  return nn::Sequential{nn::Conv2d(1, 32, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Dropout(0.25), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                        nn::Dropout(0.25), nn::Linear(128, 10)};
}
}  // namespace

int main(int argc, char** argv) {
  int epochs = 1;
  std::int64_t batch = 64, limit = 0;
  std::string dir = data::default_fashion_mnist_dir;
  CLI::App app{"DDP training of the Fashion-MNIST CNN, one process per device (start it with brrr-run)."};
  app.add_option("--epochs", epochs, "epochs")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--batch-size", batch, "examples per rank per step")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--limit", limit, "use only the first N training and test examples (0: all)")->capture_default_str();
  app.add_option("--data", dir, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  Device dev = ranks::device_of_rank();
  std::shared_ptr<const data::Dataset> train = data::fashion_mnist(dir, true);
  std::shared_ptr<const data::Dataset> test = data::fashion_mnist(dir, false);
  auto first = [](std::shared_ptr<const data::Dataset> d, std::int64_t k) -> std::shared_ptr<const data::Dataset> {
    if (k <= 0 || k >= d->size()) return d;
    std::vector<std::int64_t> idx(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < k; ++i) idx[static_cast<std::size_t>(i)] = i;
    return std::make_shared<data::Subset>(d, idx);
  };
  train = first(train, limit);
  test = first(test, limit);

  manual_seed(0);
  nn::Sequential model = cnn();
  model.to(dev);
  nn::DistributedDataParallel ddp(model);  // rank 0's weights everywhere, gradient buckets
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true});
  if (r == 0)
    std::printf("%d ranks on %s..., %lld parameters in %zu buckets, batch %lld per rank (%lld per step)\n", n,
                dev.str().c_str(), static_cast<long long>(model.num_parameters()), ddp.bucket_parameter_names().size(),
                static_cast<long long>(batch), static_cast<long long>(batch * n));

  data::DistributedSampler sampler(train->size(), {.shuffle = true, .seed = 0, .drop_last = true});
  double step_ms = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    data::DataLoader loader(std::make_shared<data::Subset>(train, sampler.indices()),
                            {.batch_size = batch, .drop_last = true, .device = dev});
    Tensor loss_sum = zeros({}, {.device = dev});
    dist::barrier();
    auto t0 = Clock::now();
    for (const data::Batch& b : loader) {
      Tensor loss = cross_entropy(ddp((b[0] - pixel_mean) / pixel_std), b[1]);
      opt.zero_grad();
      loss.backward();  // the buckets' all-reduces overlap the rest of backward
      opt.step();
      NoGradGuard no_grad;
      loss_sum = loss_sum + loss.detach();
    }
    dist::all_reduce(loss_sum, dist::ReduceOp::avg);
    double train_loss = loss_sum.to(Device::cpu()).item<float>() / static_cast<double>(loader.num_batches());
    step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / loader.num_batches();
    // Test accuracy: each rank scores its shard, one all_reduce adds the counts.
    NoGradGuard no_grad;
    model.eval();
    data::DistributedSampler test_shard(test->size(), {.shuffle = false, .drop_last = true});
    data::DataLoader test_loader(std::make_shared<data::Subset>(test, test_shard.indices()),
                                 {.batch_size = 500, .device = dev});
    Tensor counts = zeros({2}, {.dtype = DType::i64, .device = dev});  // correct, total
    for (const data::Batch& b : test_loader) {
      Tensor correct = sum(eq(argmax(model((b[0] - pixel_mean) / pixel_std), 1), b[1]));
      counts = counts + stack({correct, full({}, b[1].size(0), {.dtype = DType::i64, .device = dev})});
    }
    model.train();
    dist::all_reduce(counts);
    auto c = counts.to(Device::cpu()).to_host<std::int64_t>();
    if (r == 0)
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%% (%lld examples), %.2f ms per step\n", epoch + 1,
                  train_loss, 100.0 * c[0] / std::max<std::int64_t>(c[1], 1), static_cast<long long>(c[1]), step_ms);
    if (epoch + 1 == epochs && r == 0)
      std::printf("RESULT: test accuracy %.2f%% after %d epoch%s on %d ranks, %.2f ms per step (batch %lld per rank)\n",
                  100.0 * c[0] / std::max<std::int64_t>(c[1], 1), epochs, epochs == 1 ? "" : "s", n, step_ms,
                  static_cast<long long>(batch));
  }
  dist::destroy_process_group();
  return 0;
}
