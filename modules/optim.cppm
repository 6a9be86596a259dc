// brrr.optim — optimizers, learning-rate schedulers and gradient clipping. On CUDA every
// optimizer updates all parameters with a few fused launches (not one launch per tensor per
// formula term), and nothing here makes the host wait.
module;
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>
export module brrr.optim;
import brrr.tensor;

export namespace brrr::optim {

/// The state every optimizer shares: parameters, per-parameter state, the learning rate.
class Optimizer {
public:
  virtual ~Optimizer() = default;
  /// Applies one update from the parameters' .grad() (parameters without a gradient are
  /// skipped), in place. Not recorded by autograd.
  virtual void step() = 0;
  /// Clears gradients: set to none (undefined) by default, as PyTorch 2; zeroes them in place
  /// when set_to_none is false.
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  /// Used by schedulers.
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor>& parameters() const { return params_; }
  /// Completed steps.
  std::int64_t step_count() const { return steps_; }

protected:
  Optimizer(std::vector<Tensor> params, double lr, const char* name);
  std::vector<Tensor> params_;
  double lr_;
  std::int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};
/// Stochastic gradient descent with momentum (Sutskever et al. 2013), PyTorch's formulation:
/// g += wd p; b = mu b + (1 - dampening) g (b = g on the first step); g = nesterov ? g + mu b :
/// b; p -= lr g. Error(value) for nesterov without momentum or with dampening.
class SGD final : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;

private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
};
/// Adam (Kingma & Ba 2015) with PyTorch's order: g += wd p; m = b1 m + (1-b1) g;
/// v = b2 v + (1-b2) g^2; amsgrad: vmax = max(vmax, v) and vmax replaces v;
/// p -= lr / (1-b1^t) * m / (sqrt(v / (1-b2^t)) + eps).
class Adam : public Optimizer {
public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;

protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, const char* name);
  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;
};

/// AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay p *= 1 - lr wd before
/// the Adam update. Default weight_decay 0.01 as in PyTorch.
class AdamW final : public Adam {
public:
  AdamW(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 0.01});
};

/// Multiplies the learning rate by gamma every step_size calls of step().
class StepLR {
public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  void step();
  double last_lr() const;

private:
  Optimizer* opt_;
  std::int64_t step_size_, count_ = 0;
  double gamma_, base_lr_;
};

/// Linear warmup from 0 to the base lr over warmup_steps, then cosine decay to min_lr at
/// total_steps (Loshchilov & Hutter 2017, SGDR, without restarts); call step() once per
/// optimizer step.
class CosineWithWarmup {
public:
  CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps, double min_lr = 0);
  void step();
  double last_lr() const;

private:
  double lr_at(std::int64_t step) const;
  Optimizer* opt_;
  std::int64_t warmup_, total_, count_ = 0;
  double base_lr_, min_lr_;
};

/// Scales gradients in place so that their joint norm is at most max_norm: total =
/// (sum ||g||^p)^(1/p) (p = norm_type, 2 or inf), coef = min(1, max_norm / (total + 1e-6)).
/// Computed and applied on the device: returns the total norm as a 0-d tensor (f32, on the
/// gradients' device) without a host sync.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace brrr::optim
