// Learning-rate schedulers: host arithmetic on the optimizer's lr (Optimizer::set_lr); the
// new value reaches the kernels by value at the next step, so nothing here touches a device.
module;
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
module brrr.optim;
import brrr.tensor;

namespace brrr::optim {

// StepLR (PyTorch's torch.optim.lr_scheduler.StepLR, closed form):
// lr = base_lr * gamma^floor(count / step_size), count = calls of step() so far.
StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : opt_(&optimizer), step_size_(step_size), gamma_(gamma), base_lr_(optimizer.lr()) {
  if (step_size <= 0)
    throw Error(ErrorKind::value, "StepLR: step_size must be positive, got " + std::to_string(step_size));
  if (!std::isfinite(gamma) || gamma < 0) throw Error::bad_value("StepLR", "gamma", gamma, "finite and >= 0");
}

void StepLR::step() {
  ++count_;
  opt_->set_lr(last_lr());
}

double StepLR::last_lr() const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(count_ / step_size_));
}

// CosineWithWarmup: for s = count of step() calls,
//   s < warmup:          lr = base_lr * s / warmup                      (linear from 0)
//   warmup <= s < total: lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2,
//                        p = (s - warmup) / (total - warmup)
//   s >= total:          lr = min_lr.
// As Hugging Face's get_cosine_schedule_with_warmup (with a floor min_lr): the constructor
// already sets lr_at(0) on the optimizer (0 when warmup > 0), as PyTorch's LambdaLR does.
CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                                   double min_lr)
    : opt_(&optimizer), warmup_(warmup_steps), total_(total_steps), base_lr_(optimizer.lr()), min_lr_(min_lr) {
  if (warmup_steps < 0)
    throw Error(ErrorKind::value, "CosineWithWarmup: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  if (total_steps < warmup_steps || total_steps <= 0)
    throw Error(ErrorKind::value, "CosineWithWarmup: total_steps (" + std::to_string(total_steps) +
                                      ") must be positive and >= warmup_steps (" + std::to_string(warmup_steps) + ")");
  if (!std::isfinite(min_lr) || min_lr < 0 || min_lr > base_lr_)
    throw Error::bad_value("CosineWithWarmup", "min_lr", min_lr, "in [0, base lr " + number_text(base_lr_) + "]");
  opt_->set_lr(lr_at(0));
}

double CosineWithWarmup::lr_at(std::int64_t step) const {
  if (step < warmup_) return base_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + (base_lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

void CosineWithWarmup::step() {
  ++count_;
  opt_->set_lr(lr_at(count_));
}

double CosineWithWarmup::last_lr() const { return lr_at(count_); }

}  // namespace brrr::optim
