// The normalisation modules beyond LayerNorm (nn/layers.cpp): BatchNorm1d/2d with
// PyTorch's buffers (running_mean, running_var, num_batches_tracked) and momentum rules,
// InstanceNorm1d/2d, GroupNorm and RMSNorm. Parameters and buffers are read from the
// registered lists at every forward, so Module::to() and load_state_dict() are seen.
module;
#include <cstdint>
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

Tensor named(const std::vector<std::pair<std::string, Tensor>>& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return t;
  return {};
}

// Batch and instance norm: parameters weight/bias when affine, buffers when tracking.
class StatsNormImpl : public ModuleImpl {
public:
  StatsNormImpl(std::string kind, std::int64_t features, NormOptions o) : kind_(std::move(kind)), features_(features), o_(o) {
    if (features <= 0)
      throw Error(ErrorKind::value, kind_ + ": num_features must be > 0, got " + std::to_string(features));
    if (o.momentum && !(*o.momentum >= 0.0 && *o.momentum <= 1.0))
      throw Error::bad_value(kind_, "momentum", *o.momentum, "in [0, 1]");
    if (o.affine) {
      register_parameter("weight", ones({features}));
      register_parameter("bias", zeros({features}));
    }
    if (o.track_running_stats) {
      register_buffer("running_mean", zeros({features}));
      register_buffer("running_var", ones({features}));
      register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
    }
  }
  Tensor param(const char* name) { return named(own_parameters(), name); }
  Tensor buffer(const char* name) { return named(own_buffers(), name); }

  std::string name() const override {
    std::string s = kind_ + "(" + std::to_string(features_) + ", eps=" + number_text(o_.eps) + ", momentum=" +
                    (o_.momentum ? number_text(*o_.momentum) : std::string("None"));
    return s + ", affine=" + bool_str(o_.affine) + ", track_running_stats=" + bool_str(o_.track_running_stats) + ")";
  }

protected:
  // PyTorch's _BatchNorm.forward: count the batch and pick the momentum in training.
  double momentum_for_step() {
    double factor = o_.momentum.value_or(0.0);
    if (training && o_.track_running_stats) {
      NoGradGuard no_grad;
      Tensor nbt = buffer("num_batches_tracked");
      add_(nbt, ones({}, {.dtype = DType::i64, .device = nbt.device()}));
      if (!o_.momentum) factor = 1.0 / static_cast<double>(nbt.item<std::int64_t>());
    }
    return factor;
  }
  void check_channels(const Tensor& x, std::int64_t dim) const {
    if (x.size(dim) != features_)
      throw Error(ErrorKind::shape, kind_ + ": expected " + std::to_string(features_) + " channels (dim " +
                                        std::to_string(dim) + ") in input " + describe(x));
  }

  std::string kind_;
  std::int64_t features_;
  NormOptions o_;
};

class BatchNormImpl final : public StatsNormImpl {
public:
  BatchNormImpl(std::string kind, std::int64_t features, NormOptions o, std::vector<std::int64_t> ranks)
      : StatsNormImpl(std::move(kind), features, o), ranks_(std::move(ranks)) {}
  Tensor forward(const Tensor& x) override {
    if (!x.defined()) throw Error(ErrorKind::value, kind_ + ": the input is undefined");
    bool ok = false;
    for (auto r : ranks_) ok = ok || x.dim() == r;
    if (!ok)
      throw Error(ErrorKind::shape, kind_ + ": expected a " + std::to_string(ranks_.front()) + "-D" +
                                        (ranks_.size() > 1 ? " or " + std::to_string(ranks_.back()) + "-D" : "") +
                                        " input, got " + describe(x));
    check_channels(x, 1);
    const double factor = momentum_for_step();
    Tensor rm = buffer("running_mean"), rv = buffer("running_var");
    const bool use_batch = training || !rm.defined();
    // In training without tracking no buffers are passed; in eval without them, batch stats.
    return batch_norm(x, use_batch && !o_.track_running_stats ? Tensor() : rm,
                      use_batch && !o_.track_running_stats ? Tensor() : rv, param("weight"), param("bias"), use_batch,
                      factor, o_.eps);
  }

private:
  std::vector<std::int64_t> ranks_;
};

class InstanceNormImpl final : public StatsNormImpl {
public:
  InstanceNormImpl(std::string kind, std::int64_t features, NormOptions o, std::int64_t rank)
      : StatsNormImpl(std::move(kind), features, o), rank_(rank) {}
  Tensor forward(const Tensor& x) override {
    if (!x.defined()) throw Error(ErrorKind::value, kind_ + ": the input is undefined");
    if (x.dim() != rank_ && x.dim() != rank_ - 1)
      throw Error(ErrorKind::shape, kind_ + ": expected a " + std::to_string(rank_ - 1) + "-D (unbatched) or " +
                                        std::to_string(rank_) + "-D input, got " + describe(x));
    const bool unbatched = x.dim() == rank_ - 1;
    Tensor xb = unbatched ? x.unsqueeze(0) : x;
    check_channels(xb, 1);
    const double factor = momentum_for_step();
    Tensor rm = buffer("running_mean"), rv = buffer("running_var");
    const bool use_input_stats = training || !o_.track_running_stats;
    Tensor y = instance_norm(xb, rm, rv, param("weight"), param("bias"), use_input_stats, factor, o_.eps);
    return unbatched ? y.squeeze(0) : y;
  }

private:
  std::int64_t rank_;
};

class GroupNormImpl final : public ModuleImpl {
public:
  GroupNormImpl(std::int64_t groups, std::int64_t channels, double eps, bool affine)
      : groups_(groups), channels_(channels), eps_(eps), affine_(affine) {
    if (groups <= 0 || channels <= 0 || channels % groups != 0)
      throw Error(ErrorKind::value, "GroupNorm: num_channels (" + std::to_string(channels) +
                                        ") must be a positive multiple of num_groups (" + std::to_string(groups) + ")");
    if (affine) {
      register_parameter("weight", ones({channels}));
      register_parameter("bias", zeros({channels}));
    }
  }
  Tensor forward(const Tensor& x) override {
    return group_norm(x, groups_, named(own_parameters(), "weight"), named(own_parameters(), "bias"), eps_);
  }
  std::string name() const override {
    return "GroupNorm(" + std::to_string(groups_) + ", " + std::to_string(channels_) + ", eps=" + number_text(eps_) +
           ", affine=" + bool_str(affine_) + ")";
  }

private:
  std::int64_t groups_, channels_;
  double eps_;
  bool affine_;
};

class RMSNormImpl final : public ModuleImpl {
public:
  RMSNormImpl(Shape shape, std::optional<double> eps, bool affine) : shape_(std::move(shape)), eps_(eps), affine_(affine) {
    if (shape_.empty()) throw Error(ErrorKind::shape, "RMSNorm: normalized_shape must not be empty");
    for (auto s : shape_)
      if (s <= 0) throw Error(ErrorKind::shape, "RMSNorm: normalized_shape " + to_string(shape_) + " must be > 0");
    if (affine) register_parameter("weight", ones(shape_));
  }
  Tensor forward(const Tensor& x) override { return rms_norm(x, shape_, named(own_parameters(), "weight"), eps_); }
  std::string name() const override {
    std::string s = to_string(shape_);
    s = "(" + s.substr(1, s.size() - 2) + (shape_.size() == 1 ? ",)" : ")");
    return "RMSNorm(" + s + ", eps=" + (eps_ ? number_text(*eps_) : std::string("None")) +
           ", elementwise_affine=" + bool_str(affine_) + ")";
  }

private:
  Shape shape_;
  std::optional<double> eps_;
  bool affine_;
};

Tensor own(const std::shared_ptr<ModuleImpl>& impl, const char* name, bool buffer) {
  return named(buffer ? impl->own_buffers() : impl->own_parameters(), name);
}

}  // namespace

BatchNorm1d::BatchNorm1d(std::int64_t num_features, NormOptions options) {
  impl_ = std::make_shared<BatchNormImpl>("BatchNorm1d", num_features, options, std::vector<std::int64_t>{2, 3});
}
Tensor BatchNorm1d::weight() const { return own(impl_, "weight", false); }
Tensor BatchNorm1d::bias() const { return own(impl_, "bias", false); }
Tensor BatchNorm1d::running_mean() const { return own(impl_, "running_mean", true); }
Tensor BatchNorm1d::running_var() const { return own(impl_, "running_var", true); }
Tensor BatchNorm1d::num_batches_tracked() const { return own(impl_, "num_batches_tracked", true); }

BatchNorm2d::BatchNorm2d(std::int64_t num_features, NormOptions options) {
  impl_ = std::make_shared<BatchNormImpl>("BatchNorm2d", num_features, options, std::vector<std::int64_t>{4});
}
Tensor BatchNorm2d::weight() const { return own(impl_, "weight", false); }
Tensor BatchNorm2d::bias() const { return own(impl_, "bias", false); }
Tensor BatchNorm2d::running_mean() const { return own(impl_, "running_mean", true); }
Tensor BatchNorm2d::running_var() const { return own(impl_, "running_var", true); }
Tensor BatchNorm2d::num_batches_tracked() const { return own(impl_, "num_batches_tracked", true); }

InstanceNorm1d::InstanceNorm1d(std::int64_t num_features, NormOptions options) {
  impl_ = std::make_shared<InstanceNormImpl>("InstanceNorm1d", num_features, options, 3);
}
InstanceNorm2d::InstanceNorm2d(std::int64_t num_features, NormOptions options) {
  impl_ = std::make_shared<InstanceNormImpl>("InstanceNorm2d", num_features, options, 4);
}

GroupNorm::GroupNorm(std::int64_t num_groups, std::int64_t num_channels, double eps, bool affine) {
  impl_ = std::make_shared<GroupNormImpl>(num_groups, num_channels, eps, affine);
}
Tensor GroupNorm::weight() const { return own(impl_, "weight", false); }
Tensor GroupNorm::bias() const { return own(impl_, "bias", false); }

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine) {
  impl_ = std::make_shared<RMSNormImpl>(std::move(normalized_shape), eps, elementwise_affine);
}
Tensor RMSNorm::weight() const { return own(impl_, "weight", false); }

}  // namespace brrr::nn
