// Optimizer and scheduler state dicts, in torch.optim's layout flattened with dots (one
// parameter group, "param_groups.0."; per-parameter state under "state.<index>."), so that a
// checkpoint resumes a run exactly: the buffers, hyperparameters, learning rate and step
// counts a step reads are all here.
module;
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>
module brrr.optim;
import brrr.tensor;
import brrr.ops;

namespace brrr::optim {

namespace {

Tensor number(double v) { return full({}, v, {.dtype = DType::f64}); }
Tensor flag(bool v) { return full({}, v ? 1.0 : 0.0, {.dtype = DType::boolean}); }

// Reads a state dict, remembering which keys it used, so that keys nobody read are reported.
class Reader {
public:
  Reader(const StateDict& state, std::string op) : state_(state), op_(std::move(op)) {}
  const Tensor* find(const std::string& key) {
    auto it = state_.find(key);
    if (it == state_.end()) return nullptr;
    if (!it->second.defined()) throw Error(ErrorKind::value, op_ + ": the entry '" + key + "' is undefined");
    used_.insert(key);
    return &it->second;
  }
  const Tensor& at(const std::string& key) {
    if (const Tensor* t = find(key)) return *t;
    throw Error(ErrorKind::value, op_ + ": the state dict has no '" + key + "'");
  }
  double number(const std::string& key) {
    const Tensor& t = at(key);
    if (t.numel() != 1) throw Error(ErrorKind::value, op_ + ": '" + key + "' must hold one number, got " + describe(t));
    return t.item<double>();
  }
  std::int64_t integer(const std::string& key) {
    const Tensor& t = at(key);
    if (t.numel() != 1) throw Error(ErrorKind::value, op_ + ": '" + key + "' must hold one number, got " + describe(t));
    return t.item<std::int64_t>();
  }
  bool boolean(const std::string& key) { return number(key) != 0; }
  /// Error(value) listing every key that was not read.
  void finish() const {
    std::string extra;
    for (const auto& [k, _] : state_)
      if (!used_.count(k)) extra += (extra.empty() ? "'" : ", '") + k + "'";
    if (!extra.empty()) throw Error(ErrorKind::value, op_ + ": unexpected key(s) " + extra);
  }

private:
  const StateDict& state_;
  std::string op_;
  std::set<std::string> used_;
};

void write_common(StateDict& out, double lr, std::size_t n, std::int64_t steps) {
  out["param_groups.0.lr"] = number(lr);
  out["param_groups.0.params"] = arange(static_cast<std::int64_t>(n));
  out["brrr.step_count"] = full({}, static_cast<double>(steps), {.dtype = DType::i64});
}

void read_common(Reader& r, const std::vector<Tensor>& params, double& lr, std::int64_t& steps, const char* op) {
  const Tensor& ids = r.at("param_groups.0.params");
  if (ids.numel() != static_cast<std::int64_t>(params.size()))
    throw Error(ErrorKind::value, std::string(op) + ": the state dict is for " + std::to_string(ids.numel()) +
                                      " parameters, the optimizer has " + std::to_string(params.size()));
  lr = r.number("param_groups.0.lr");
  steps = r.integer("brrr.step_count");
}

// state.<i>.<name> into `buffer` (a new tensor like parameter i), or undefined when absent.
void read_buffer(Reader& r, std::size_t i, const char* name, const Tensor& p, Tensor& buffer, const char* op) {
  std::string key = "state." + std::to_string(i) + "." + name;
  const Tensor* t = r.find(key);
  if (!t) {
    buffer = Tensor();
    return;
  }
  if (t->shape() != p.shape())
    throw Error::shape_mismatch(op, t->shape(), p.shape(),
                                "differ: '" + key + "' (first) does not match parameter " + std::to_string(i));
  NoGradGuard no_grad;
  buffer = empty_like(p);
  buffer.copy_(*t);
}

}  // namespace

StateDict SGD::state_dict() const {
  StateDict out;
  write_common(out, lr_, params_.size(), steps_);
  out["param_groups.0.momentum"] = number(options_.momentum);
  out["param_groups.0.dampening"] = number(options_.dampening);
  out["param_groups.0.weight_decay"] = number(options_.weight_decay);
  out["param_groups.0.nesterov"] = flag(options_.nesterov);
  out["param_groups.0.maximize"] = flag(options_.maximize);
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (momentum_[i].defined()) out["state." + std::to_string(i) + ".momentum_buffer"] = momentum_[i];
  return out;
}

void SGD::load_state_dict(const StateDict& state) {
  Reader r(state, "SGD.load_state_dict");
  double lr;
  std::int64_t steps;
  read_common(r, params_, lr, steps, "SGD.load_state_dict");
  SGDOptions o = options_;
  o.lr = lr;
  o.momentum = r.number("param_groups.0.momentum");
  o.dampening = r.number("param_groups.0.dampening");
  o.weight_decay = r.number("param_groups.0.weight_decay");
  o.nesterov = r.boolean("param_groups.0.nesterov");
  o.maximize = r.boolean("param_groups.0.maximize");
  std::vector<Tensor> momentum(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    read_buffer(r, i, "momentum_buffer", params_[i], momentum[i], "SGD.load_state_dict");
  r.finish();
  SGD check(params_, o);  // the constructor's argument checks
  options_ = o;
  lr_ = lr;
  steps_ = steps;
  momentum_ = std::move(momentum);
}

StateDict Adam::state_dict() const {
  StateDict out;
  write_common(out, lr_, params_.size(), steps_);
  out["param_groups.0.betas"] = Tensor::from_vector(std::vector<double>{options_.betas.first, options_.betas.second});
  out["param_groups.0.eps"] = number(options_.eps);
  out["param_groups.0.weight_decay"] = number(options_.weight_decay);
  out["param_groups.0.amsgrad"] = flag(options_.amsgrad);
  out["param_groups.0.maximize"] = flag(options_.maximize);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    std::string prefix = "state." + std::to_string(i) + ".";
    // PyTorch keeps a step per parameter (an f32 tensor); brrr's is the optimizer's count.
    out[prefix + "step"] = full({}, static_cast<double>(steps_));
    out[prefix + "exp_avg"] = exp_avg_[i];
    out[prefix + "exp_avg_sq"] = exp_avg_sq_[i];
    if (max_exp_avg_sq_[i].defined()) out[prefix + "max_exp_avg_sq"] = max_exp_avg_sq_[i];
  }
  return out;
}

void Adam::load_state_dict(const StateDict& state) {
  const char* op = decoupled_ ? "AdamW.load_state_dict" : "Adam.load_state_dict";
  Reader r(state, op);
  double lr;
  std::int64_t steps;
  read_common(r, params_, lr, steps, op);
  AdamOptions o = options_;
  o.lr = lr;
  const Tensor& betas = r.at("param_groups.0.betas");
  if (betas.numel() != 2) throw Error(ErrorKind::value, std::string(op) + ": 'param_groups.0.betas' must hold 2 numbers");
  std::vector<double> b = betas.to(DType::f64).to_host<double>();
  o.betas = {b[0], b[1]};
  o.eps = r.number("param_groups.0.eps");
  o.weight_decay = r.number("param_groups.0.weight_decay");
  o.amsgrad = r.boolean("param_groups.0.amsgrad");
  o.maximize = r.boolean("param_groups.0.maximize");
  std::vector<Tensor> m(params_.size()), v(params_.size()), vmax(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    read_buffer(r, i, "exp_avg", params_[i], m[i], op);
    read_buffer(r, i, "exp_avg_sq", params_[i], v[i], op);
    read_buffer(r, i, "max_exp_avg_sq", params_[i], vmax[i], op);
    if (m[i].defined() != v[i].defined())
      throw Error(ErrorKind::value, std::string(op) + ": parameter " + std::to_string(i) +
                                        " has only one of exp_avg and exp_avg_sq");
    if (r.find("state." + std::to_string(i) + ".step") && !m[i].defined())
      throw Error(ErrorKind::value, std::string(op) + ": parameter " + std::to_string(i) + " has a step but no moments");
  }
  r.finish();
  Adam check(params_, o);  // the constructor's argument checks
  options_ = o;
  lr_ = lr;
  steps_ = steps;
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
  max_exp_avg_sq_ = std::move(vmax);
}

StateDict StepLR::state_dict() const {
  return {{"last_epoch", full({}, static_cast<double>(count_), {.dtype = DType::i64})},
          {"base_lrs", Tensor::from_vector(std::vector<double>{base_lr_})},
          {"_last_lr", Tensor::from_vector(std::vector<double>{last_lr()})},
          {"step_size", full({}, static_cast<double>(step_size_), {.dtype = DType::i64})},
          {"gamma", number(gamma_)}};
}

void StepLR::load_state_dict(const StateDict& state) {
  Reader r(state, "StepLR.load_state_dict");
  std::int64_t count = r.integer("last_epoch"), step_size = r.integer("step_size");
  double base = r.number("base_lrs"), gamma = r.number("gamma");
  r.find("_last_lr");  // derived: recomputed
  r.finish();
  StepLR check(*opt_, step_size, gamma);
  if (count < 0) throw Error::bad_value("StepLR.load_state_dict", "last_epoch", static_cast<double>(count), ">= 0");
  count_ = count;
  step_size_ = step_size;
  base_lr_ = base;
  gamma_ = gamma;
}

StateDict CosineWithWarmup::state_dict() const {
  return {{"last_epoch", full({}, static_cast<double>(count_), {.dtype = DType::i64})},
          {"base_lrs", Tensor::from_vector(std::vector<double>{base_lr_})},
          {"_last_lr", Tensor::from_vector(std::vector<double>{last_lr()})},
          {"warmup_steps", full({}, static_cast<double>(warmup_), {.dtype = DType::i64})},
          {"total_steps", full({}, static_cast<double>(total_), {.dtype = DType::i64})},
          {"min_lr", number(min_lr_)}};
}

void CosineWithWarmup::load_state_dict(const StateDict& state) {
  Reader r(state, "CosineWithWarmup.load_state_dict");
  std::int64_t count = r.integer("last_epoch"), warmup = r.integer("warmup_steps"), total = r.integer("total_steps");
  double base = r.number("base_lrs"), min_lr = r.number("min_lr");
  r.find("_last_lr");
  r.finish();
  if (count < 0)
    throw Error::bad_value("CosineWithWarmup.load_state_dict", "last_epoch", static_cast<double>(count), ">= 0");
  if (warmup < 0 || total < warmup || total <= 0 || min_lr < 0 || min_lr > base)
    throw Error(ErrorKind::value, "CosineWithWarmup.load_state_dict: inconsistent warmup_steps, total_steps, "
                                  "base_lrs or min_lr");
  count_ = count;
  warmup_ = warmup;
  total_ = total;
  base_lr_ = base;
  min_lr_ = min_lr;
}

}  // namespace brrr::optim
