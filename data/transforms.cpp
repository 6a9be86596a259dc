// Batched image transforms on the batch's device (torchvision's Normalize, RandomCrop,
// RandomHorizontalFlip, Compose): made of brrr ops, so they run as kernels wherever the
// batch is, and the random ones draw offsets and coin flips from the device's seeded
// generator as tensors (no host round trip). The crop gathers each image's window with
// index tensors (one offset per image), the flip selects between the image and its mirror.
module;
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
module brrr.data;
import brrr.tensor;
import brrr.ops;

namespace brrr::data::transforms {

using indexing::Slice;

namespace {
void require_images(const char* op, const Tensor& x) {
  if (!x.defined() || x.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a batch of images [N, C, H, W], got " +
                                      (x.defined() ? describe(x) : std::string("an undefined tensor")));
  if (!is_floating_point(x.dtype()))
    throw Error::dtype_not_supported(op, "expected floating-point images", x, "convert first, e.g. x.to(DType::f32)");
}
}  // namespace

Normalize::Normalize(std::vector<double> mean, std::vector<double> std)
    : mean_(std::move(mean)), std_(std::move(std)), cache_(std::make_shared<std::map<std::pair<int, int>, std::pair<Tensor, Tensor>>>()) {
  if (mean_.empty() || mean_.size() != std_.size())
    throw Error(ErrorKind::value, "Normalize: mean and std need the same positive length, got " +
                                      std::to_string(mean_.size()) + " and " + std::to_string(std_.size()));
  for (double s : std_)
    if (!(s > 0)) throw Error::bad_value("Normalize", "std", s, "> 0");
}

Tensor Normalize::operator()(const Tensor& x) const {
  require_images("Normalize", x);
  const auto c = static_cast<std::int64_t>(mean_.size());
  if (c != 1 && x.size(1) != c)
    throw Error(ErrorKind::shape, "Normalize: " + std::to_string(c) + " channel means for images " + describe(x));
  // Keyed by device and dtype; made once (a small host-to-device copy), then reused.
  std::pair<int, int> key{x.device().is_cpu() ? -1 : x.device().index(), static_cast<int>(x.dtype())};
  auto it = cache_->find(key);
  if (it == cache_->end()) {
    Tensor m = Tensor::from_vector(mean_, {1, c, 1, 1}).to(x.dtype()).to(x.device());
    Tensor s = Tensor::from_vector(std_, {1, c, 1, 1}).to(x.dtype()).to(x.device());
    it = cache_->emplace(key, std::make_pair(m, s)).first;
  }
  return (x - it->second.first) / it->second.second;
}

RandomCrop::RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  if (height <= 0 || width <= 0)
    throw Error(ErrorKind::value, "RandomCrop: the size must be positive, got " + std::to_string(height) + " x " +
                                      std::to_string(width));
  if (padding < 0) throw Error(ErrorKind::value, "RandomCrop: padding must be >= 0, got " + std::to_string(padding));
}

Tensor RandomCrop::operator()(const Tensor& x) const {
  require_images("RandomCrop", x);
  const std::int64_t n = x.size(0), c = x.size(1), p = padding_;
  const std::int64_t hp = x.size(2) + 2 * p, wp = x.size(3) + 2 * p;
  if (hp < height_ || wp < width_)
    throw Error(ErrorKind::shape, "RandomCrop: images " + describe(x) + " padded by " + std::to_string(p) +
                                      " are smaller than the crop " + std::to_string(height_) + " x " +
                                      std::to_string(width_));
  Tensor padded = x;
  if (p > 0) {
    padded = zeros({n, c, hp, wp}, {.dtype = x.dtype(), .device = x.device()});
    padded.index({Slice(), Slice(), Slice(p, p + x.size(2)), Slice(p, p + x.size(3))}).copy_(x);
  }
  const TensorOptions idx{.dtype = DType::i64, .device = x.device()};
  Tensor top = randint(0, hp - height_ + 1, {n, 1, 1}, idx);
  Tensor left = randint(0, wp - width_ + 1, {n, 1, 1}, idx);
  Tensor rows = top + arange(height_, idx).view({1, height_, 1});  // [N, h, 1]
  Tensor cols = left + arange(width_, idx).view({1, 1, width_});   // [N, 1, w]
  Tensor batch = arange(n, idx).view({n, 1, 1});
  // Separated index tensors: their broadcast [N, h, w] goes first, then the channel dim.
  return padded.index({batch, Slice(), rows, cols}).permute({0, 3, 1, 2}).contiguous();
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  if (!(p >= 0 && p <= 1)) throw Error::bad_value("RandomHorizontalFlip", "p", p, "in [0, 1]");
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x) const {
  require_images("RandomHorizontalFlip", x);
  const std::int64_t w = x.size(3);
  Tensor reversed = arange(static_cast<double>(w - 1), -1.0, -1.0, {.dtype = DType::i64, .device = x.device()});
  Tensor mirrored = index_select(x, 3, reversed);
  Tensor flip = lt(rand({x.size(0), 1, 1, 1}, {.device = x.device()}), p_);
  return where(flip, mirrored, x);
}

}  // namespace brrr::data::transforms
