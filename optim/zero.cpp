// optim::ZeroRedundancyOptimizer: ZeRO stage 1 (Rajbhandari et al. 2020). The parameters
// become views of one flat buffer of N * S elements (padded); each step reduce-scatters the
// flat gradient (average), lets an ordinary AdamW or SGD update this rank's S elements, and
// all-gathers the flat buffer in place, which updates every parameter on every rank.
module;
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
module brrr.dist;
import brrr.tensor;
import brrr.optim;

namespace brrr::optim {

namespace {

// AdamW over the shard, with its moments readable for optimizer_state_bytes().
class ShardAdamW final : public Adam {
public:
  ShardAdamW(std::vector<Tensor> params, AdamOptions options)
      : Adam(std::move(params), options, true, "ZeroRedundancyOptimizer(AdamW)") {}
  std::uint64_t state_bytes() const {
    std::uint64_t n = 0;
    for (const auto* list : {&exp_avg_, &exp_avg_sq_, &max_exp_avg_sq_})
      for (const Tensor& t : *list)
        if (t.defined()) n += t.nbytes();
    return n;
  }
};

}  // namespace

struct ZeroRedundancyOptimizer::State {
  dist::ProcessGroup group = dist::world_group();
  Tensor flat_params, flat_grads;  // [N * S]
  Tensor shard, shard_grad;        // this rank's [S]: a view of flat_params, and its gradient
  std::vector<std::int64_t> offsets;
  std::int64_t shard_numel = 0;
  std::unique_ptr<ShardAdamW> adam;
  std::unique_ptr<SGD> sgd;
  double momentum = 0;
  Optimizer& inner() const { return adam ? static_cast<Optimizer&>(*adam) : static_cast<Optimizer&>(*sgd); }
};


std::unique_ptr<ZeroRedundancyOptimizer::State> ZeroRedundancyOptimizer::make_state(const std::vector<Tensor>& params,
                                                                                   const ZeroOptions& zero) {
  const char* name = "ZeroRedundancyOptimizer";
  auto s = std::make_unique<ZeroRedundancyOptimizer::State>();
  if (zero.process_group) s->group = *zero.process_group;
  if (!s->group.is_member())
    throw Error(ErrorKind::value, std::string(name) + ": this rank is not a member of " + s->group.name());
  if (params.empty()) throw Error(ErrorKind::value, std::string(name) + ": got an empty parameter list");
  const Tensor& first = params[0];
  std::int64_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined()) throw Error(ErrorKind::value, std::string(name) + ": parameter " + std::to_string(i) + " is undefined");
    if (p.device() != first.device() || p.dtype() != first.dtype())
      throw Error(ErrorKind::value, std::string(name) + ": parameter " + std::to_string(i) + " (" + describe(p) +
                                        ") differs in device or dtype from parameter 0 (" + describe(first) +
                                        "); one ZeroRedundancyOptimizer per device and dtype");
    s->offsets.push_back(total);
    total += p.numel();
  }
  const std::int64_t n = s->group.size();
  s->shard_numel = (total + n - 1) / n;
  NoGradGuard no_grad;
  TensorOptions o{.dtype = first.dtype(), .device = first.device()};
  s->flat_params = zeros({n * s->shard_numel}, o);
  s->flat_grads = zeros({n * s->shard_numel}, o);
  for (std::size_t i = 0; i < params.size(); ++i)
    s->flat_params.slice(0, s->offsets[i], s->offsets[i] + params[i].numel()).copy_(params[i].reshape({-1}));
  // Every rank starts from rank 0's values; then each parameter becomes a view of the buffer.
  dist::broadcast(s->flat_params, 0, {.group = s->group});
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i].set_data(s->flat_params.slice(0, s->offsets[i], s->offsets[i] + params[i].numel()).view(params[i].shape()));
  std::int64_t r = s->group.rank();
  s->shard = s->flat_params.slice(0, r * s->shard_numel, (r + 1) * s->shard_numel);
  s->shard_grad = zeros({s->shard_numel}, o);
  return s;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, std::unique_ptr<State> state)
    : Optimizer(std::move(params), 0.0, "ZeroRedundancyOptimizer"), state_(std::move(state)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, AdamOptions options, ZeroOptions zero)
    : ZeroRedundancyOptimizer(params, make_state(params, zero)) {
  lr_ = options.lr;
  state_->adam = std::make_unique<ShardAdamW>(std::vector<Tensor>{state_->shard}, options);
}

std::unique_ptr<ZeroRedundancyOptimizer> ZeroRedundancyOptimizer::with_sgd(std::vector<Tensor> params,
                                                                           SGDOptions options, ZeroOptions zero) {
  auto state = make_state(params, zero);
  std::unique_ptr<ZeroRedundancyOptimizer> z(new ZeroRedundancyOptimizer(std::move(params), std::move(state)));
  z->lr_ = options.lr;
  z->state_->momentum = options.momentum;
  z->state_->sgd = std::make_unique<SGD>(std::vector<Tensor>{z->state_->shard}, options);
  return z;
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::step() {
  State& s = *state_;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor slot = s.flat_grads.slice(0, s.offsets[i], s.offsets[i] + p.numel());
    Tensor g = p.grad();
    if (g.defined()) slot.copy_(g.reshape({-1}));
    else slot.fill_(0.0);
  }
  dist::reduce_scatter(s.shard_grad, s.flat_grads, dist::ReduceOp::avg, {.group = s.group});
  s.shard.set_grad(s.shard_grad);
  Optimizer& inner = s.inner();
  inner.set_lr(lr_);
  inner.step();
  dist::all_gather(s.flat_params, s.shard, {.group = s.group});  // in place: the shard is part of the output
  ++steps_;
}

std::int64_t ZeroRedundancyOptimizer::shard_numel() const { return state_->shard_numel; }

std::uint64_t ZeroRedundancyOptimizer::optimizer_state_bytes() const {
  const State& s = *state_;
  if (s.adam) return s.adam->state_bytes();
  // SGD keeps one momentum buffer of the shard's size once it has stepped with momentum.
  return s.momentum > 0 && steps_ > 0 ? static_cast<std::uint64_t>(s.shard_numel) * s.shard.itemsize() : 0;
}

StateDict ZeroRedundancyOptimizer::state_dict() const {
  const State& s = *state_;
  StateDict out = s.inner().state_dict();
  auto integer = [](std::int64_t v) { return full({}, static_cast<double>(v), {.dtype = DType::i64}); };
  out["brrr.zero.world_size"] = integer(s.group.size());
  out["brrr.zero.rank"] = integer(s.group.rank());
  out["brrr.zero.shard_numel"] = integer(s.shard_numel);
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& state) {
  State& s = *state_;
  StateDict rest = state;
  auto take = [&](const std::string& key, std::int64_t expected) {
    auto it = rest.find(key);
    if (it == rest.end())
      throw Error(ErrorKind::value, "ZeroRedundancyOptimizer.load_state_dict: missing key " + key);
    const std::int64_t got = it->second.to(Device::cpu()).item<std::int64_t>();
    if (got != expected)
      throw Error(ErrorKind::value, "ZeroRedundancyOptimizer.load_state_dict: " + key + " is " + std::to_string(got) +
                                        " in the state, " + std::to_string(expected) + " here");
    rest.erase(it);
  };
  take("brrr.zero.world_size", s.group.size());
  take("brrr.zero.rank", s.group.rank());
  take("brrr.zero.shard_numel", s.shard_numel);
  Optimizer& inner = s.inner();
  inner.load_state_dict(rest);
  lr_ = inner.lr();
  steps_ = inner.step_count();
}

}  // namespace brrr::optim
