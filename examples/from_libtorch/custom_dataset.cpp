// pytorch/examples cpp/custom-dataset, ported: a Dataset of one's own that defines only
// size() and get(i), batched by the DataLoader, with torchvision-style transforms applied to
// each batch on its device, and a small convnet trained on it. LibTorch's reads image files
// listed in a text file with OpenCV; this port makes its images (horizontal or vertical
// stripes with noise, 3 x 32 x 32) in get(i) so it runs anywhere, the shape of the code
// being the same.
//   custom_dataset [--epochs N] [--size N]
//   exits 0 when the last epoch's mean loss is below the first's
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>
import brrr;

#include "nn/module_holder.hpp"

using namespace brrr;

// Example i: stripes of period 4, horizontal for label 0, vertical for 1, with a phase and
// noise drawn from a generator seeded by i (so get(i) always returns the same example).
class StripesDataset : public data::Dataset {
public:
  explicit StripesDataset(std::int64_t size) : size_(size) {}
  std::int64_t size() const override { return size_; }
  std::vector<Tensor> get(std::int64_t index) const override {
    std::int64_t label = index % 2;
    std::vector<float> pixels(3 * 32 * 32);
    std::uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(index + 1);
    auto uniform = [&] {  // splitmix64 to [0, 1)
      state += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return static_cast<float>((z ^ (z >> 31)) >> 40) / 16777216.0f;
    };
    int phase = static_cast<int>(uniform() * 4);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) {
          int t = (label == 0 ? y : x) + phase;
          pixels[static_cast<std::size_t>((c * 32 + y) * 32 + x)] = ((t / 2) % 2 ? 0.8f : 0.2f) + 0.3f * (uniform() - 0.5f);
        }
    return {Tensor::from_vector(pixels, {3, 32, 32}), tensor(label)};
  }

private:
  std::int64_t size_;
};

struct NetworkImpl : nn::ModuleImpl {
  NetworkImpl()
      : conv1(register_module("conv1", nn::Conv2d(3, 8, 3, {.padding = 1}))),
        conv2(register_module("conv2", nn::Conv2d(8, 16, 3, {.padding = 1}))),
        fc(register_module("fc", nn::Linear(16 * 7 * 7, 2))) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = max_pool2d(conv1(x).relu(), 2);  // [N, 8, 14, 14]
    h = max_pool2d(conv2(h).relu(), 2);         // [N, 16, 7, 7]
    return fc(h.flatten(1));
  }
  nn::Conv2d conv1, conv2;
  nn::Linear fc;
};
BRRR_MODULE(Network);

int main(int argc, char** argv) {
  int epochs = 3;
  std::int64_t size = 512;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--epochs") epochs = std::atoi(argv[i + 1]);
    if (a == "--size") size = std::atoll(argv[i + 1]);
  }
  manual_seed(1);
  Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  auto dataset = std::make_shared<StripesDataset>(size);
  data::transforms::Compose augment{data::transforms::RandomCrop(28, 2), data::transforms::RandomHorizontalFlip(),
                                    data::transforms::Normalize({0.5, 0.5, 0.5}, {0.25, 0.25, 0.25})};
  data::DataLoader loader(dataset, {.batch_size = 32, .shuffle = true, .seed = 7, .device = device,
                                    .transform = augment});
  Network net;
  net.to(device);
  optim::Adam optimizer(net.parameters(), {.lr = 1e-3});
  std::vector<double> epoch_loss;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total = 0;
    std::int64_t batches = 0, correct = 0, seen = 0;
    for (const data::Batch& batch : loader) {
      Tensor logits = net(batch[0]);
      Tensor loss = cross_entropy(logits, batch[1]);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      total += loss.item<double>();
      ++batches;
      correct += (logits.argmax(1) == batch[1]).sum().item<std::int64_t>();
      seen += batch[1].size(0);
    }
    epoch_loss.push_back(total / static_cast<double>(batches));
    std::printf("Epoch %d: mean loss %.4f, accuracy %.3f\n", epoch + 1, epoch_loss.back(),
                static_cast<double>(correct) / static_cast<double>(seen));
  }
  return epoch_loss.size() >= 2 && epoch_loss.back() < epoch_loss.front() ? 0 : 1;
}
