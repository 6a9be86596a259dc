// The pooling layers of brrr.nn: each holds its options and calls the pool of brrr.ops
// (ops/pool.cpp); the max pools also give their indices (forward_with_indices), which
// MaxUnpool2d takes.
module;
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

namespace {

std::string bool_str(bool b) { return b ? "true" : "false"; }
std::string pair_str(const std::array<std::int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// A parameterless layer: a forward with fixed options and its description; the max pools'
// forward_with_indices too (`with_indices`, else unset).
class PoolImpl final : public ModuleImpl {
public:
  PoolImpl(std::function<Tensor(const Tensor&)> fn, std::function<ValuesIndices(const Tensor&)> with_indices,
           std::string name)
      : fn_(std::move(fn)), with_indices_(std::move(with_indices)), name_(std::move(name)) {}
  Tensor forward(const Tensor& x) override { return fn_(x); }
  ValuesIndices forward_with_indices(const Tensor& x) const { return with_indices_(x); }
  std::string name() const override { return name_; }

private:
  std::function<Tensor(const Tensor&)> fn_;
  std::function<ValuesIndices(const Tensor&)> with_indices_;
  std::string name_;
};

ValuesIndices with_indices(const std::shared_ptr<ModuleImpl>& impl, const char* layer, const Tensor& x) {
  if (!impl) throw Error(ErrorKind::value, std::string(layer) + ": the module handle is empty (made from nullptr?)");
  return static_cast<const PoolImpl&>(*impl).forward_with_indices(x);
}

std::string max_pool2d_name(const Pool2dOptions& o) {
  return "MaxPool2d(kernel_size=" + pair_str(o.kernel_size) + ", stride=" + pair_str(o.stride.value_or(o.kernel_size)) +
         ", padding=" + pair_str(o.padding) + ", dilation=" + pair_str(o.dilation) +
         ", ceil_mode=" + bool_str(o.ceil_mode) + ")";
}
std::string max_pool1d_name(const Pool1dOptions& o) {
  return "MaxPool1d(kernel_size=" + std::to_string(o.kernel_size) +
         ", stride=" + std::to_string(o.stride.value_or(o.kernel_size)) + ", padding=" + std::to_string(o.padding) +
         ", dilation=" + std::to_string(o.dilation) + ", ceil_mode=" + bool_str(o.ceil_mode) + ")";
}
std::string avg_pool2d_name(const Pool2dOptions& o) {
  std::string s = "AvgPool2d(kernel_size=" + pair_str(o.kernel_size) +
                  ", stride=" + pair_str(o.stride.value_or(o.kernel_size)) + ", padding=" + pair_str(o.padding);
  if (o.ceil_mode) s += ", ceil_mode=true";
  if (!o.count_include_pad) s += ", count_include_pad=false";
  if (o.divisor_override) s += ", divisor_override=" + std::to_string(*o.divisor_override);
  return s + ")";
}
std::string avg_pool1d_name(const Pool1dOptions& o) {
  std::string s = "AvgPool1d(kernel_size=" + std::to_string(o.kernel_size) +
                  ", stride=" + std::to_string(o.stride.value_or(o.kernel_size)) +
                  ", padding=" + std::to_string(o.padding);
  if (o.ceil_mode) s += ", ceil_mode=true";
  if (!o.count_include_pad) s += ", count_include_pad=false";
  return s + ")";
}

}  // namespace

MaxPool2d::MaxPool2d(Pool2dOptions o) {
  impl_ = std::make_shared<PoolImpl>([o](const Tensor& x) { return max_pool2d(x, o); },
                                     [o](const Tensor& x) { return max_pool2d_with_indices(x, o); }, max_pool2d_name(o));
}
MaxPool2d::MaxPool2d(std::int64_t kernel_size) : MaxPool2d(Pool2dOptions{.kernel_size = {kernel_size, kernel_size}}) {}
ValuesIndices MaxPool2d::forward_with_indices(const Tensor& x) const { return with_indices(impl_, "MaxPool2d", x); }

MaxPool1d::MaxPool1d(Pool1dOptions o) {
  impl_ = std::make_shared<PoolImpl>([o](const Tensor& x) { return max_pool1d(x, o); },
                                     [o](const Tensor& x) { return max_pool1d_with_indices(x, o); }, max_pool1d_name(o));
}
MaxPool1d::MaxPool1d(std::int64_t kernel_size) : MaxPool1d(Pool1dOptions{.kernel_size = kernel_size}) {}
ValuesIndices MaxPool1d::forward_with_indices(const Tensor& x) const { return with_indices(impl_, "MaxPool1d", x); }

AvgPool2d::AvgPool2d(Pool2dOptions o) {
  impl_ = std::make_shared<PoolImpl>([o](const Tensor& x) { return avg_pool2d(x, o); }, nullptr, avg_pool2d_name(o));
}
AvgPool2d::AvgPool2d(std::int64_t kernel_size) : AvgPool2d(Pool2dOptions{.kernel_size = {kernel_size, kernel_size}}) {}

AvgPool1d::AvgPool1d(Pool1dOptions o) {
  impl_ = std::make_shared<PoolImpl>([o](const Tensor& x) { return avg_pool1d(x, o); }, nullptr, avg_pool1d_name(o));
}
AvgPool1d::AvgPool1d(std::int64_t kernel_size) : AvgPool1d(Pool1dOptions{.kernel_size = kernel_size}) {}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(ExpandingArray<2> size) {
  impl_ = std::make_shared<PoolImpl>([size](const Tensor& x) { return adaptive_avg_pool2d(x, size); }, nullptr,
                                     "AdaptiveAvgPool2d(output_size=" + pair_str(size) + ")");
}
AdaptiveAvgPool1d::AdaptiveAvgPool1d(std::int64_t size) {
  impl_ = std::make_shared<PoolImpl>([size](const Tensor& x) { return adaptive_avg_pool1d(x, size); }, nullptr,
                                     "AdaptiveAvgPool1d(output_size=" + std::to_string(size) + ")");
}
AdaptiveMaxPool2d::AdaptiveMaxPool2d(ExpandingArray<2> size) {
  impl_ = std::make_shared<PoolImpl>([size](const Tensor& x) { return adaptive_max_pool2d(x, size); },
                                     [size](const Tensor& x) { return adaptive_max_pool2d_with_indices(x, size); },
                                     "AdaptiveMaxPool2d(output_size=" + pair_str(size) + ")");
}
ValuesIndices AdaptiveMaxPool2d::forward_with_indices(const Tensor& x) const {
  return with_indices(impl_, "AdaptiveMaxPool2d", x);
}
AdaptiveMaxPool1d::AdaptiveMaxPool1d(std::int64_t size) {
  impl_ = std::make_shared<PoolImpl>([size](const Tensor& x) { return adaptive_max_pool1d(x, size); },
                                     [size](const Tensor& x) { return adaptive_max_pool1d_with_indices(x, size); },
                                     "AdaptiveMaxPool1d(output_size=" + std::to_string(size) + ")");
}
ValuesIndices AdaptiveMaxPool1d::forward_with_indices(const Tensor& x) const {
  return with_indices(impl_, "AdaptiveMaxPool1d", x);
}

// --- MaxUnpool2d: two inputs, so its forward is the handle's own -------------------------------

namespace {

class MaxUnpool2dImpl final : public ModuleImpl {
public:
  explicit MaxUnpool2dImpl(MaxUnpool2dOptions o) : o_(std::move(o)) {}
  Tensor unpool(const Tensor& x, const Tensor& indices, std::vector<std::int64_t> output_size) const {
    MaxUnpool2dOptions o = o_;
    o.output_size = std::move(output_size);
    return max_unpool2d(x, indices, o);
  }
  std::string name() const override {
    return "MaxUnpool2d(kernel_size=" + pair_str(o_.kernel_size) +
           ", stride=" + pair_str(o_.stride.value_or(o_.kernel_size)) + ", padding=" + pair_str(o_.padding) + ")";
  }

private:
  MaxUnpool2dOptions o_;
};

}  // namespace

MaxUnpool2d::MaxUnpool2d(MaxUnpool2dOptions options) { impl_ = std::make_shared<MaxUnpool2dImpl>(std::move(options)); }
MaxUnpool2d::MaxUnpool2d(std::int64_t kernel_size)
    : MaxUnpool2d(MaxUnpool2dOptions{.kernel_size = {kernel_size, kernel_size}}) {}
Tensor MaxUnpool2d::operator()(const Tensor& x, const Tensor& indices, std::vector<std::int64_t> output_size) const {
  if (!impl_) throw Error(ErrorKind::value, "MaxUnpool2d: the module handle is empty (made from nullptr?)");
  return static_cast<const MaxUnpool2dImpl&>(*impl_).unpool(x, indices, std::move(output_size));
}

}  // namespace brrr::nn
