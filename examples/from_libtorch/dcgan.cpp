// pytorch/examples cpp/dcgan, ported: a DCGAN (Radford et al. 2016) on 28x28 images. It was
// written before brrr had nn::ConvTranspose2d and nn::BatchNorm2d (they exist now) and keeps
// its own as user modules, to show how one writes them: ConvTranspose2d as a matmul and
// fold (col2im), BatchNorm2d with batch statistics and running buffers. The discriminator
// returns logits and the losses use binary_cross_entropy_with_logits (LibTorch's ends in
// Sigmoid + binary_cross_entropy: the same loss, computed stably). Images: MNIST-format IDX
// from --data DIR, or generated blobs with --synthetic (what ctest runs, with --tiny).
//   dcgan [--data DIR | --synthetic] [--tiny] [--steps N]
//   exits 0 when the discriminator's loss fell (its last steps' mean below its first's)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
import brrr;

#include "nn/module_holder.hpp"

using namespace brrr;

// Transposed convolution [N, Cin, H, W] -> [N, Cout, (H-1)s - 2p + k, ...]: every input pixel
// scatters weight[cin] (a [Cout, k, k] patch) into the output; fold sums the overlaps.
struct ConvTranspose2dImpl : nn::ModuleImpl {
  ConvTranspose2dImpl(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride = 1,
                      std::int64_t padding = 0, bool bias = true)
      : out_(out), k_(kernel), s_(stride), p_(padding) {
    weight = register_parameter("weight", empty({in, out, kernel, kernel}));
    nn::init::kaiming_uniform_(weight, std::sqrt(5.0));  // fan_in = out * k * k, as PyTorch
    if (bias) bias_ = register_parameter("bias", zeros({out}));
  }
  Tensor forward(const Tensor& x) override {
    const std::int64_t n = x.size(0), h = x.size(2), w = x.size(3);
    const std::int64_t oh = (h - 1) * s_ - 2 * p_ + k_, ow = (w - 1) * s_ - 2 * p_ + k_;
    Tensor cols = weight.view({weight.size(0), -1}).t().matmul(x.reshape({n, x.size(1), h * w}));
    Tensor y = fold(cols, {oh, ow}, {k_, k_}, {1, 1}, {p_, p_}, {s_, s_});
    return bias_.defined() ? y + bias_.view({1, out_, 1, 1}) : y;
  }
  std::string name() const override { return "ConvTranspose2d"; }
  Tensor weight, bias_;
  std::int64_t out_, k_, s_, p_;
};
BRRR_MODULE(ConvTranspose2d);

// Batch normalisation (Ioffe & Szegedy 2015) over dims 0, 2, 3: batch statistics in
// training (running averages updated with momentum 0.1, unbiased variance), running ones in
// evaluation, as torch.nn.BatchNorm2d.
struct BatchNorm2dImpl : nn::ModuleImpl {
  explicit BatchNorm2dImpl(std::int64_t channels) : c_(channels) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
    running_mean = register_buffer("running_mean", zeros({channels}));
    running_var = register_buffer("running_var", ones({channels}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor mean, var;
    if (training) {
      mean = x.mean({0, 2, 3}, true);
      var = brrr::var(x, {0, 2, 3}, /*correction=*/0, /*keepdim=*/true);
      NoGradGuard no_grad;
      double n = static_cast<double>(x.numel() / c_);
      running_mean *= 0.9;
      running_mean += mean.detach().view({c_}) * 0.1;
      running_var *= 0.9;
      running_var += var.detach().view({c_}) * (0.1 * n / std::max(n - 1, 1.0));
    } else {
      mean = running_mean.view({1, c_, 1, 1});
      var = running_var.view({1, c_, 1, 1});
    }
    return (x - mean) / (var + 1e-5).sqrt() * weight.view({1, c_, 1, 1}) + bias.view({1, c_, 1, 1});
  }
  std::string name() const override { return "BatchNorm2d(" + std::to_string(c_) + ")"; }
  Tensor weight, bias, running_mean, running_var;
  std::int64_t c_;
};
BRRR_MODULE(BatchNorm2d);


struct DCGANGeneratorImpl : nn::ModuleImpl {
  DCGANGeneratorImpl(std::int64_t noise, std::int64_t w)
      : conv1(register_module("conv1", ConvTranspose2d(noise, w * 4, 4, 1, 0, false))),
        batch_norm1(register_module("batch_norm1", BatchNorm2d(w * 4))),
        conv2(register_module("conv2", ConvTranspose2d(w * 4, w * 2, 3, 2, 1, false))),
        batch_norm2(register_module("batch_norm2", BatchNorm2d(w * 2))),
        conv3(register_module("conv3", ConvTranspose2d(w * 2, w, 4, 2, 1, false))),
        batch_norm3(register_module("batch_norm3", BatchNorm2d(w))),
        conv4(register_module("conv4", ConvTranspose2d(w, 1, 4, 2, 1, false))) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = batch_norm1(conv1(x)).relu();  // [N, 4w, 4, 4]
    h = batch_norm2(conv2(h)).relu();         // [N, 2w, 7, 7]
    h = batch_norm3(conv3(h)).relu();         // [N, w, 14, 14]
    return conv4(h).tanh();                   // [N, 1, 28, 28]
  }
  ConvTranspose2d conv1, conv2, conv3, conv4;
  BatchNorm2d batch_norm1, batch_norm2, batch_norm3;
};
BRRR_MODULE(DCGANGenerator);

struct DiscriminatorImpl : nn::ModuleImpl {
  explicit DiscriminatorImpl(std::int64_t w)
      : conv1(register_module("conv1", nn::Conv2d(1, w, 4, {.stride = 2, .padding = 1}, false))),
        conv2(register_module("conv2", nn::Conv2d(w, w * 2, 4, {.stride = 2, .padding = 1}, false))),
        bn2(register_module("bn2", BatchNorm2d(w * 2))),
        conv3(register_module("conv3", nn::Conv2d(w * 2, w * 4, 4, {.stride = 2, .padding = 1}, false))),
        bn3(register_module("bn3", BatchNorm2d(w * 4))),
        conv4(register_module("conv4", nn::Conv2d(w * 4, 1, 3, {}, false))) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = leaky_relu(conv1(x), 0.2);    // [N, w, 14, 14]
    h = leaky_relu(bn2(conv2(h)), 0.2);      // [N, 2w, 7, 7]
    h = leaky_relu(bn3(conv3(h)), 0.2);      // [N, 4w, 3, 3]
    return conv4(h).view({-1});         // logits [N]
  }
  nn::Conv2d conv1, conv2;
  BatchNorm2d bn2;
  nn::Conv2d conv3;
  BatchNorm2d bn3;
  nn::Conv2d conv4;
};
BRRR_MODULE(Discriminator);

// Real images for --synthetic: a bright Gaussian blob at a random place, in [-1, 1].
Tensor synthetic_batch(std::int64_t n) {
  Tensor grid = arange(28, {.dtype = DType::f32});
  Tensor cy = rand({n, 1, 1, 1}) * 14 + 7, cx = rand({n, 1, 1, 1}) * 14 + 7;
  Tensor dy = grid.view({1, 1, 28, 1}) - cy, dx = grid.view({1, 1, 1, 28}) - cx;
  return (-(dy * dy + dx * dx) / 18.0).exp() * 2.0 - 1.0;
}

int main(int argc, char** argv) {
  std::string dir = data::default_fashion_mnist_dir;
  bool use_synthetic = false, tiny = false;
  std::int64_t steps = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--synthetic") use_synthetic = true;
    else if (a == "--tiny") tiny = true;
    else if (a == "--data" && i + 1 < argc) dir = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::atoll(argv[++i]);
  }
  const std::int64_t noise = tiny ? 16 : 100, width = tiny ? 8 : 64, batch_size = tiny ? 16 : 64;
  if (steps < 0) steps = tiny ? 40 : 1000;
  manual_seed(1);
  Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  if (!use_synthetic && !std::filesystem::exists(dir)) {
    std::printf("no dataset at %s: using synthetic images\n", dir.c_str());
    use_synthetic = true;
  }
  std::shared_ptr<data::TensorDataset> images;
  if (!use_synthetic) images = data::fashion_mnist(dir, true);

  DCGANGenerator generator(noise, width);
  Discriminator discriminator(width);
  generator.to(device);
  discriminator.to(device);
  optim::Adam g_opt(generator.parameters(), {.lr = 2e-4, .betas = {0.5, 0.999}});
  optim::Adam d_opt(discriminator.parameters(), {.lr = 2e-4, .betas = {0.5, 0.999}});

  std::vector<float> d_losses;
  std::int64_t step = 0;
  while (step < steps) {
    std::vector<Tensor> batches;
    if (use_synthetic) {
      batches.push_back(synthetic_batch(batch_size).to(device));
    } else {
      data::DataLoader loader(images, {.batch_size = batch_size, .shuffle = true, .seed = static_cast<std::uint64_t>(step),
                                       .drop_last = true, .device = device});
      for (const data::Batch& b : loader) {
        batches.push_back(b[0] * 2.0 - 1.0);  // [0, 1] -> [-1, 1], as the original's Normalize(0.5, 0.5)
        if (static_cast<std::int64_t>(batches.size()) + step >= steps) break;
      }
    }
    for (const Tensor& real_images : batches) {
      // Train the discriminator on real (labels in [0.8, 1], the original's smoothing) and fake.
      d_opt.zero_grad();
      Tensor real_labels = rand({batch_size}, {.device = device}) * 0.2 + 0.8;
      Tensor d_loss_real = binary_cross_entropy_with_logits(discriminator(real_images), real_labels);
      d_loss_real.backward();
      Tensor fake_images = generator(randn({batch_size, noise, 1, 1}, {.device = device}));
      Tensor fake_labels = zeros({batch_size}, {.device = device});
      Tensor d_loss_fake = binary_cross_entropy_with_logits(discriminator(fake_images.detach()), fake_labels);
      d_loss_fake.backward();
      Tensor d_loss = d_loss_real + d_loss_fake;
      d_opt.step();
      // Train the generator to make the discriminator say "real".
      g_opt.zero_grad();
      fake_labels.fill_(1.0);
      Tensor g_loss = binary_cross_entropy_with_logits(discriminator(fake_images), fake_labels);
      g_loss.backward();
      g_opt.step();
      d_losses.push_back(d_loss.item<float>());
      if (step % 10 == 0) std::printf("[%lld/%lld] D_loss: %.4f | G_loss: %.4f\n", static_cast<long long>(step),
                                      static_cast<long long>(steps), d_losses.back(), g_loss.item<float>());
      if (++step >= steps) break;
    }
  }
  const std::size_t k = std::min<std::size_t>(5, d_losses.size() / 2);
  if (k == 0) return 1;
  double first = 0, last = 0;
  for (std::size_t i = 0; i < k; ++i) {
    first += d_losses[i] / static_cast<double>(k);
    last += d_losses[d_losses.size() - 1 - i] / static_cast<double>(k);
  }
  std::printf("discriminator loss (mean of %zu steps): first %.4f, last %.4f\n", k, first, last);
  return last < first ? 0 : 1;
}
