// Optimizers: the shared Optimizer state, SGD, Adam and AdamW. The host side lives here:
// argument checks, lazy state (zeros_like(param) on a parameter's first update), grouping of
// the parameters by (device, dtype) and one Backend::optimizer_step per group; the per-element
// update is the backend's (ops/cpu/optimizer.cpp; ops/cuda/optimizer.cu, a multi-tensor
// kernel: all parameters of a group in one launch per 48 tensors). Hyperparameters are host
// numbers passed by value each step, so a step never makes the host wait. Under a CUDA graph
// capture they are read from device memory instead, which a replay hook rewrites before every
// replay from the optimizer's learning rate and step count at that time (enqueue below).
module;
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
module brrr.optim;
import brrr.tensor;
import brrr.ops;
import brrr.backend;

namespace brrr::optim {

namespace {

// Error(value) unless `value` is finite and >= 0 (`name` of `op`: learning rate, eps, ...).
void require_non_negative(const std::string& op, const char* name, double value) {
  if (!(std::isfinite(value) && value >= 0)) throw Error::bad_value(op, name, value, "finite and >= 0");
}

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorKind::value, message);
}

// The checks every step makes on one parameter with a gradient; returns the gradient as the
// kernels want it: the parameter's dtype, contiguous (a copy only when needed).
Tensor prepared_grad(const char* op, std::size_t index, const Tensor& p) {
  Tensor g = p.grad();
  if (!p.is_contiguous())
    throw Error(ErrorKind::value, std::string(op) + ": parameter " + std::to_string(index) + " (" + describe(p) +
                                      ") is not contiguous; optimizers update contiguous parameters in place");
  if (g.device() != p.device())
    throw Error(ErrorKind::device, std::string(op) + ": gradient " + describe(g) + " of parameter " +
                                       std::to_string(index) + " (" + describe(p) + ") is on another device");
  if (g.shape() != p.shape())
    throw Error(ErrorKind::shape, std::string(op) + ": gradient " + describe(g) + " of parameter " +
                                      std::to_string(index) + " (" + describe(p) + ") has another shape");
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  if (!g.is_contiguous()) g = g.contiguous();
  return g;
}

// One fused update per (device, dtype, flag) group; `flag` separates SGD parameters whose
// momentum buffer is new (first_step) from the others.
using GroupKey = std::tuple<int, int, int, bool>;  // device type, device index, dtype, flag
GroupKey key_of(const Tensor& p, bool flag) {
  return {static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.dtype()), flag};
}

struct Group {
  backend::OptimizerStep step;
  Device device;
};

void add_to(Group& g, const Tensor& p, const Tensor& grad, const Tensor& s1, const Tensor& s2, const Tensor& s3) {
  g.step.params.push_back(backend::output_data(p, "optimizer step"));
  g.step.grads.push_back(backend::input_data(grad, "optimizer step"));
  g.step.state1.push_back(s1.defined() ? backend::output_data(s1, "optimizer step") : nullptr);
  g.step.state2.push_back(s2.defined() ? backend::output_data(s2, "optimizer step") : nullptr);
  g.step.state3.push_back(s3.defined() ? backend::output_data(s3, "optimizer step") : nullptr);
  g.step.numels.push_back(p.numel());
}

// A state buffer for `p`: zeros on first use (or when the parameter's shape changed), moved
// or converted along when set_data() gave the parameter another device or dtype. Sets
// `created` when the buffer is new.
void ensure_state(Tensor& state, const Tensor& p, bool& created) {
  if (!state.defined() || state.shape() != p.shape()) {
    state = zeros_like(p);
    created = true;
    return;
  }
  if (state.dtype() != p.dtype()) state = state.to(p.dtype());
  if (state.device() != p.device()) state = state.to(p.device());
}

bool captured(const Tensor& p) { return p.device().is_cuda() && backend::capture_underway(p.device().index()); }

// Under capture a new state buffer would be zeroed by every replay: refuse it.
void require_state_outside_capture(const char* op, std::size_t index, const Tensor& p, bool created) {
  if (created && captured(p))
    throw Error(ErrorKind::stream, std::string(op) + ": parameter " + std::to_string(index) + " (" + describe(p) +
                                       ") has no optimizer state yet, and a CUDA graph capture would zero it at every "
                                       "replay; run one step eagerly (a warm-up) before capturing");
}

// Enqueues each group's update. A CUDA group under a graph capture gets its derived
// hyperparameters from device memory the graph keeps, rewritten by a replay hook before each
// replay from `refresh` (which sets lr, bias corrections, ... from the optimizer as it is
// then: a scheduler's new learning rate takes effect without re-capture); a last hook calls
// `advance` (the step count). Returns whether the step was captured: then the step count
// advances at each replay instead of now. Error(device) when a capture would take only some
// of the groups (parameters on the CPU or another device would be updated once, now).
bool enqueue(std::map<GroupKey, Group>& groups, const char* op,
             const std::function<void(backend::OptimizerStep&)>& refresh, const std::function<void()>& advance) {
  int capture_device = -1;
  std::size_t captured_groups = 0;
  for (auto& [key, grp] : groups)
    if (grp.device.is_cuda() && backend::capture_underway(grp.device.index())) {
      capture_device = grp.device.index();
      ++captured_groups;
    }
  if (captured_groups == 0) {
    for (auto& [key, grp] : groups) backend::backend_for(grp.device).optimizer_step(grp.step);
    return false;
  }
  if (captured_groups != groups.size())
    throw Error(ErrorKind::device, std::string(op) + ": under the CUDA graph capture on cuda:" +
                                       std::to_string(capture_device) +
                                       " every parameter must be on that device (others would be updated once, now)");
  for (auto& [key, grp] : groups) {
    const int dev = grp.device.index();
    void* dst = backend::capture_hook_buffer(dev, backend::optimizer_coeffs_bytes());
    grp.step.device_coeffs = dst;
    backend::OptimizerStep scalars = grp.step;  // the hyperparameters; pointers are not needed
    scalars.params.clear();
    scalars.grads.clear();
    scalars.state1.clear();
    scalars.state2.clear();
    scalars.state3.clear();
    scalars.numels.clear();
    scalars.device_coeffs = nullptr;
    // Rewritten only when they changed (an SGD step at a constant lr costs no launch).
    backend::capture_add_replay_hook(dev, [scalars, dst, refresh, written = false](
                                              const backend::StreamState& stream) mutable {
      backend::OptimizerStep next = scalars;
      refresh(next);
      if (written && next.lr == scalars.lr && next.bias_correction1 == scalars.bias_correction1 &&
          next.bias_correction2 == scalars.bias_correction2 && next.first_step == scalars.first_step)
        return;
      scalars = next;
      written = true;
      backend::optimizer_write_coeffs(scalars, dst, stream);
    });
    backend::backend_for(grp.device).optimizer_step(grp.step);
  }
  backend::capture_add_replay_hook(capture_device, [advance](const backend::StreamState&) { advance(); });
  return true;
}

void check_floating(const char* op, std::size_t index, const Tensor& p) {
  if (!is_floating_point(p.dtype()))
    throw Error(ErrorKind::dtype, std::string(op) + ": parameter " + std::to_string(index) + " (" + describe(p) +
                                      ") is not of a floating dtype");
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Optimizer
// ---------------------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char* name) : params_(std::move(params)), lr_(lr) {
  std::string op = name;
  require(!params_.empty(), op + ": got an empty parameter list");
  require_non_negative(op, "learning rate", lr);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    require(p.defined(), op + ": parameter " + std::to_string(i) + " is an undefined tensor");
    check_floating(name, i, p);
    if (!p.is_contiguous())
      throw Error(ErrorKind::value, op + ": parameter " + std::to_string(i) + " (" + describe(p) +
                                        ") is not contiguous; optimizers update contiguous parameters in place");
    for (std::size_t j = 0; j < i; ++j)
      require(!params_[j].is_same(p), op + ": parameter " + std::to_string(i) + " (" + describe(p) +
                                          ") appears more than once (also at " + std::to_string(j) + ")");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
      continue;
    }
    // A gradient recorded under create_graph is cut from its graph first (PyTorch's detach_).
    if (g.grad_fn() || g.requires_grad()) {
      g = g.detach();
      p.set_grad(g);
    }
    NoGradGuard no_grad;
    g.fill_(0.0);
  }
}

// ---------------------------------------------------------------------------------------
// SGD
// ---------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options) {
  const SGDOptions& o = options_;
  require_non_negative("SGD", "momentum", o.momentum);
  if (!std::isfinite(o.dampening)) throw Error::bad_value("SGD", "dampening", o.dampening, "finite");
  require_non_negative("SGD", "weight_decay", o.weight_decay);
  require(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
          "SGD: nesterov momentum requires a momentum > 0 and zero dampening (got momentum " +
              number_text(o.momentum) + ", dampening " + number_text(o.dampening) + ")");
  momentum_.resize(params_.size());
}

void SGD::step() {
  require_non_negative("SGD.step", "learning rate", lr_);
  NoGradGuard no_grad;
  const SGDOptions& o = options_;
  std::map<GroupKey, Group> groups;
  std::vector<Tensor> keep;  // converted gradients live until their kernels are enqueued
  std::vector<std::size_t> updated;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    check_floating("SGD.step", i, p);
    Tensor g = prepared_grad("SGD.step", i, p);
    keep.push_back(g);
    bool first = false;
    if (o.momentum != 0) {
      require_state_outside_capture("SGD.step", i, p, !momentum_[i].defined() || momentum_[i].shape() != p.shape());
      ensure_state(momentum_[i], p, first);
    }
    updated.push_back(i);
    if (p.numel() == 0) continue;
    Group& grp = groups[key_of(p, first)];
    if (grp.step.params.empty()) {
      grp.device = p.device();
      backend::OptimizerStep& s = grp.step;
      s.kind = backend::OptimizerKind::sgd;
      s.dtype = p.dtype();
      s.device = p.device().is_cuda() ? p.device().index() : -1;
      s.lr = lr_;
      s.weight_decay = o.weight_decay;
      s.momentum = o.momentum;
      s.dampening = o.dampening;
      s.nesterov = o.nesterov;
      s.first_step = first;
      s.maximize = o.maximize;
    }
    add_to(grp, p, g, o.momentum != 0 ? momentum_[i] : Tensor(), Tensor(), Tensor());
  }
  // The optimizer must outlive a graph that captured its step (the hooks read it).
  auto refresh = [this](backend::OptimizerStep& s) {
    s.lr = lr_;
    s.first_step = false;
  };
  bool in_graph = enqueue(groups, "SGD.step", refresh, [this] { ++steps_; });
  for (std::size_t i : updated) params_[i].storage().bump_version();
  if (!in_graph) ++steps_;
}

// ---------------------------------------------------------------------------------------
// Adam, AdamW
// ---------------------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, const char* name)
    : Optimizer(std::move(params), options.lr, name), options_(options), decoupled_(decoupled) {
  std::string op = name;
  const AdamOptions& o = options_;
  auto [b1, b2] = o.betas;
  if (!(b1 >= 0 && b1 < 1)) throw Error::bad_value(op, "beta1", b1, "in [0, 1)");
  if (!(b2 >= 0 && b2 < 1)) throw Error::bad_value(op, "beta2", b2, "in [0, 1)");
  require_non_negative(op, "eps", o.eps);
  require_non_negative(op, "weight_decay", o.weight_decay);
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  max_exp_avg_sq_.resize(params_.size());
}

void Adam::step() {
  const char* op = decoupled_ ? "AdamW.step" : "Adam.step";
  require_non_negative(op, "learning rate", lr_);
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  // t counts this optimizer's steps (see the class comment).
  const double t = static_cast<double>(steps_ + 1);
  const double bc1 = 1.0 - std::pow(o.betas.first, t);
  const double bc2 = 1.0 - std::pow(o.betas.second, t);
  std::map<GroupKey, Group> groups;
  std::vector<Tensor> keep;
  std::vector<std::size_t> updated;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    check_floating(op, i, p);
    Tensor g = prepared_grad(op, i, p);
    keep.push_back(g);
    bool created = false;
    require_state_outside_capture(op, i, p, !exp_avg_[i].defined() || exp_avg_[i].shape() != p.shape() ||
                                                (o.amsgrad && !max_exp_avg_sq_[i].defined()));
    ensure_state(exp_avg_[i], p, created);
    ensure_state(exp_avg_sq_[i], p, created);
    if (o.amsgrad) ensure_state(max_exp_avg_sq_[i], p, created);
    updated.push_back(i);
    if (p.numel() == 0) continue;
    Group& grp = groups[key_of(p, false)];
    if (grp.step.params.empty()) {
      grp.device = p.device();
      backend::OptimizerStep& s = grp.step;
      s.kind = decoupled_ ? backend::OptimizerKind::adamw : backend::OptimizerKind::adam;
      s.dtype = p.dtype();
      s.device = p.device().is_cuda() ? p.device().index() : -1;
      s.lr = lr_;
      s.weight_decay = o.weight_decay;
      s.beta1 = o.betas.first;
      s.beta2 = o.betas.second;
      s.eps = o.eps;
      s.bias_correction1 = bc1;
      s.bias_correction2 = bc2;
      s.amsgrad = o.amsgrad;
      s.maximize = o.maximize;
    }
    add_to(grp, p, g, exp_avg_[i], exp_avg_sq_[i], o.amsgrad ? max_exp_avg_sq_[i] : Tensor());
  }
  // As in SGD::step; t and the bias corrections come from the step count at each replay.
  auto refresh = [this](backend::OptimizerStep& s) {
    const double tr = static_cast<double>(steps_ + 1);
    s.lr = lr_;
    s.bias_correction1 = 1.0 - std::pow(options_.betas.first, tr);
    s.bias_correction2 = 1.0 - std::pow(options_.betas.second, tr);
  };
  bool in_graph = enqueue(groups, op, refresh, [this] { ++steps_; });
  for (std::size_t i : updated) params_[i].storage().bump_version();
  if (!in_graph) ++steps_;
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, true, "AdamW") {}

}  // namespace brrr::optim
