// brrr.optim — optimizers, learning-rate schedulers and gradient clipping. On CUDA every
// optimizer updates all parameters with a few fused launches (not one launch per tensor per
// formula term), and nothing here makes the host wait.
module;
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
export module brrr.optim;
import brrr.tensor;

export namespace brrr::optim {

/// An optimizer's or scheduler's state by name, in PyTorch's layout flattened with dots (the
/// nested dicts of torch.optim's state_dict(): "state.<i>.exp_avg", "param_groups.0.lr"),
/// ready for io::save_safetensors (a checkpoint holds the module's, the optimizer's and the
/// scheduler's under three prefixes: docs/api.md, "Checkpoints").
using StateDict = std::map<std::string, Tensor>;

/// The state every optimizer shares: parameters, per-parameter state, the learning rate.
/// Parameters must be defined, floating, contiguous and distinct (Error otherwise); each
/// step groups them by (device, dtype) and updates each group with one fused backend call
/// (on CUDA one multi-tensor launch per 48 tensors), with the hyperparameters passed by
/// value: no host sync. State buffers are zeros_like(param), made on a parameter's first
/// update. Each updated parameter's storage version is bumped.
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

  /// Everything a resumed run needs to continue bit for bit: "param_groups.0.<hyperparameter>"
  /// (0-d f64 numbers and bools; "param_groups.0.params" the indices 0..n-1 as PyTorch writes
  /// them), "state.<i>.<buffer>" for each parameter i (by position in parameters()) that has
  /// state, with PyTorch's names (SGD: momentum_buffer; Adam: step, exp_avg, exp_avg_sq,
  /// max_exp_avg_sq), and "brrr.step_count". The state tensors are the optimizer's own
  /// buffers (later steps update them in place): save them, or clone() for a snapshot.
  virtual StateDict state_dict() const = 0;
  /// Restores state_dict()'s contents (any device or dtype converts to the parameters'):
  /// hyperparameters, learning rate, step count and state buffers. Error(value) when the
  /// number of parameters differs, a key is missing or not one of the optimizer's; Error(shape)
  /// naming the key when a buffer's shape is not its parameter's.
  virtual void load_state_dict(const StateDict& state) = 0;

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
/// b; p -= lr g (maximize: g = -g first). Error(value) for nesterov without momentum or with
/// dampening, lr < 0, momentum < 0, weight_decay < 0.
class SGD final : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

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
/// p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps). t = step_count() + 1, one count
/// for all parameters (PyTorch keeps one per parameter: they differ only for a parameter that
/// had no gradient in earlier steps). Error(value) for lr < 0, betas outside [0, 1), eps < 0,
/// weight_decay < 0.
class Adam : public Optimizer {
public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

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

/// Multiplies the learning rate by gamma every step_size calls of step(): lr = base *
/// gamma^floor(calls / step_size), base = the optimizer's lr at construction. Error(value)
/// for step_size <= 0 or gamma < 0.
class StepLR {
public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  void step();
  double last_lr() const;
  /// PyTorch's keys: "last_epoch" (calls of step()), "base_lrs", "_last_lr", "step_size",
  /// "gamma" (0-d or [1] tensors).
  StateDict state_dict() const;
  /// Restores them (not the optimizer's lr: the optimizer's own state dict holds it).
  /// Error(value) for a missing key or bad value.
  void load_state_dict(const StateDict& state);

private:
  Optimizer* opt_;
  std::int64_t step_size_, count_ = 0;
  double gamma_, base_lr_;
};

/// Linear warmup from 0 to the base lr over warmup_steps, then cosine decay to min_lr at
/// total_steps (Loshchilov & Hutter 2017, SGDR, without restarts); call step() once per
/// optimizer step. After s calls: s < warmup: base * s / warmup; then min_lr + (base - min_lr)
/// (1 + cos(pi (s - warmup) / (total - warmup))) / 2; min_lr from total on. The constructor
/// sets lr_at(0) (0 with a warmup), as PyTorch's LambdaLR does. Error(value) for warmup < 0,
/// total < warmup or total <= 0, min_lr outside [0, base lr].
class CosineWithWarmup {
public:
  CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps, double min_lr = 0);
  void step();
  double last_lr() const;
  /// "last_epoch", "base_lrs", "_last_lr" (PyTorch's), "warmup_steps", "total_steps", "min_lr".
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

private:
  double lr_at(std::int64_t step) const;
  Optimizer* opt_;
  std::int64_t warmup_, total_, count_ = 0;
  double base_lr_, min_lr_;
};

/// Scales gradients in place so that their joint norm is at most max_norm: total =
/// (sum ||g||_p^p)^(1/p) (p = norm_type > 0, or inf: max |g|), coef = min(1, max_norm /
/// (total + 1e-6)) (PyTorch's clip_grad_norm_). Computed and applied on the device: returns
/// the total norm as a 0-d tensor (f32, on the gradients' device; 0 when no parameter has a
/// gradient) without a host sync. A gradient that is not contiguous (e.g. an expanded view)
/// or shares its storage with another gradient of the list is replaced by a scaled copy
/// (scaling it in place could scale an element more than once). The contiguous gradients of
/// each dtype take two multi-tensor kernels (norms, scaling; computed in f32, f64 for f64).
/// Error(device) for gradients on several devices, Error(value) for max_norm < 0 or
/// norm_type <= 0.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace brrr::optim
