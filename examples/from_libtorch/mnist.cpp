// pytorch/examples cpp/mnist, ported: LeNet-style convnet, SGD with momentum, nll_loss of
// log_softmax. Reads MNIST-format IDX files (MNIST or Fashion-MNIST) from --data DIR (default:
// the Debian dataset-fashion-mnist directory); --synthetic trains on generated digits-like
// images instead (what ctest runs, at a tiny size). One difference from LibTorch's: brrr has
// no feature dropout (Dropout2d), so plain dropout stands in for it.
//   mnist [--data DIR | --synthetic] [--epochs N] [--train-batches N]
//   exits 0 when the training loss fell (last batches' mean below the first's)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
import brrr;

#include "nn/module_holder.hpp"

using namespace brrr;

struct NetImpl : nn::ModuleImpl {
  NetImpl()
      : conv1(register_module("conv1", nn::Conv2d(1, 10, /*kernel_size=*/5))),
        conv2(register_module("conv2", nn::Conv2d(10, 20, /*kernel_size=*/5))),
        fc1(register_module("fc1", nn::Linear(320, 50))),
        fc2(register_module("fc2", nn::Linear(50, 10))) {}

  Tensor forward(const Tensor& input) override {
    Tensor x = max_pool2d(conv1(input), 2).relu();
    x = max_pool2d(dropout(conv2(x), 0.5, training), 2).relu();
    x = x.view({-1, 320});
    x = fc1(x).relu();
    x = dropout(x, 0.5, training);
    x = fc2(x);
    return log_softmax(x, /*dim=*/1);
  }

  nn::Conv2d conv1, conv2;
  nn::Linear fc1, fc2;
};
BRRR_MODULE(Net);

// Digit-like synthetic images: class k is a bright 6x6 square at one of ten places, plus noise.
std::shared_ptr<data::TensorDataset> synthetic(std::int64_t n) {
  Tensor labels = randint(0, 10, {n});
  Tensor images = rand({n, 1, 28, 28}) * 0.3;
  std::vector<std::int64_t> l = labels.to_host<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t k = l[static_cast<std::size_t>(i)], r = 2 + (k / 5) * 12, c = 2 + (k % 5) * 5;
    images.index_put_({i, 0, indexing::Slice(r, r + 6), indexing::Slice(c, c + 6)}, 1.0);
  }
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{images, labels});
}

int main(int argc, char** argv) {
  std::string dir = data::default_fashion_mnist_dir;
  bool use_synthetic = false;
  int epochs = 1;
  std::int64_t train_batches = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--synthetic") use_synthetic = true;
    else if (a == "--data" && i + 1 < argc) dir = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--train-batches" && i + 1 < argc) train_batches = std::atoll(argv[++i]);
  }
  manual_seed(1);
  Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  if (!use_synthetic && !std::filesystem::exists(dir)) {
    std::printf("no dataset at %s: using synthetic images (pass --data DIR for MNIST)\n", dir.c_str());
    use_synthetic = true;
  }
  auto train_set = use_synthetic ? synthetic(64 * 40) : data::fashion_mnist(dir, true);
  auto test_set = use_synthetic ? synthetic(1000) : data::fashion_mnist(dir, false);

  Net model;
  model.to(device);
  optim::SGD optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.5});
  data::DataLoader train_loader(train_set, {.batch_size = 64, .shuffle = true, .seed = 1, .device = device});
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .device = device});

  std::vector<float> losses;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model.train();
    std::int64_t batch_idx = 0;
    for (const data::Batch& batch : train_loader) {
      if (train_batches >= 0 && batch_idx >= train_batches) break;
      optimizer.zero_grad();
      Tensor output = model(batch[0]);
      Tensor loss = nll_loss(output, batch[1]);
      loss.backward();
      optimizer.step();
      losses.push_back(loss.item<float>());
      if (batch_idx++ % 10 == 0)
        std::printf("Train Epoch: %d [%lld] Loss: %.4f\n", epoch, static_cast<long long>(batch_idx), losses.back());
    }
    model.eval();
    NoGradGuard no_grad;
    double test_loss = 0;
    std::int64_t correct = 0, seen = 0;
    for (const data::Batch& batch : test_loader) {
      Tensor output = model(batch[0]);
      test_loss += nll_loss(output, batch[1], {.reduction = Reduction::sum}).item<double>();
      correct += output.argmax(1).eq(batch[1]).sum().item<std::int64_t>();
      seen += batch[0].size(0);
    }
    std::printf("Test set: Average loss: %.4f | Accuracy: %.3f\n", test_loss / static_cast<double>(seen),
                static_cast<double>(correct) / static_cast<double>(seen));
  }
  if (losses.size() < 10) return 1;
  auto mean = [&](std::size_t from, std::size_t to) {
    double s = 0;
    for (std::size_t i = from; i < to; ++i) s += losses[i];
    return s / static_cast<double>(to - from);
  };
  double first = mean(0, 5), last = mean(losses.size() - 5, losses.size());
  std::printf("loss (mean of 5 batches): first %.4f, last %.4f\n", first, last);
  return last < first ? 0 : 1;
}
