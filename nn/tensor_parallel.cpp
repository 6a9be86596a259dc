// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, section 3): the four conjugate
// communication ops as autograd nodes (f: identity forward / all-reduce backward; g:
// all-reduce forward / identity backward; gather along the last dim / split; split / gather),
// and the column- and row-parallel linear layers and the MLP block built from them.
module;
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
module brrr.dist;
import brrr.tensor;
import brrr.ops;
import brrr.nn;

namespace brrr::nn {

namespace {

dist::ProcessGroup group_or_world(const std::optional<dist::ProcessGroup>& g) {
  return g ? *g : dist::world_group();
}

// This rank's block [r k, (r+1) k) of the last dim of x.
Tensor own_block(const Tensor& x, const dist::ProcessGroup& g) {
  std::int64_t k = x.size(-1) / g.size();
  return x.slice(-1, g.rank() * k, (g.rank() + 1) * k).contiguous();
}

// Every rank's x, concatenated along the last dim.
Tensor gather_last_dim(const Tensor& x, const dist::ProcessGroup& g) {
  if (g.size() == 1) return x.clone();
  Tensor c = x.contiguous();
  std::vector<Tensor> parts;
  for (int r = 0; r < g.size(); ++r) parts.push_back(empty_like(c));
  dist::all_gather(parts, c, {.group = g});
  return cat(parts, -1);
}

Tensor all_reduced(const Tensor& x, const dist::ProcessGroup& g) {
  Tensor c = x.contiguous().clone();  // never reduce a tensor someone else may hold
  dist::all_reduce(c, dist::ReduceOp::sum, {.group = g});
  return c;
}

// The four ops: forward on the tensors, backward the conjugate collective.
enum class Region : std::uint8_t { copy, reduce, gather, scatter };

const char* backward_name(Region r) {
  switch (r) {
    case Region::copy: return "CopyToTensorParallelRegionBackward";
    case Region::reduce: return "ReduceFromTensorParallelRegionBackward";
    case Region::gather: return "GatherFromTensorParallelRegionBackward";
    case Region::scatter: return "ScatterToTensorParallelRegionBackward";
  }
  return "TensorParallelBackward";
}

Tensor region(Region r, const Tensor& x, const dist::ProcessGroup& g) {
  Tensor out;
  {
    NoGradGuard no_grad;
    switch (r) {
      case Region::copy: out = x.detach(); break;
      case Region::reduce: out = all_reduced(x, g); break;
      case Region::gather: out = gather_last_dim(x, g); break;
      case Region::scatter: out = own_block(x, g); break;
    }
  }
  if (autograd::any_requires_grad({x}))
    autograd::record(backward_name(r), {x}, {out}, [r, group = g](const autograd::Backward& ctx) mutable {
      const Tensor& grad = ctx.grad();
      if (!grad.defined()) return autograd::Grads{Tensor()};
      switch (r) {
        case Region::copy: return autograd::Grads{all_reduced(grad, group)};
        case Region::reduce: return autograd::Grads{grad};
        case Region::gather: return autograd::Grads{own_block(grad, group)};
        case Region::scatter: return autograd::Grads{gather_last_dim(grad, group)};
      }
      return autograd::Grads{Tensor()};
    });
  return out;
}

void require_divisible(const char* layer, const char* what, std::int64_t n, const dist::ProcessGroup& g) {
  if (n % g.size() != 0)
    throw Error(ErrorKind::value, std::string(layer) + ": " + what + " = " + std::to_string(n) +
                                      " is not divisible by the " + std::to_string(g.size()) + " ranks of " + g.name());
}

Tensor shard_param(ModuleImpl& m, const std::string& name, const Tensor& full_slice) {
  NoGradGuard no_grad;
  return m.register_parameter(name, full_slice.contiguous().clone());
}

class ColumnParallelImpl final : public ModuleImpl {
public:
  ColumnParallelImpl(const Linear& full, ColumnParallelLinearOptions o) : options_(std::move(o)), group_(group_or_world(options_.group)) {
    Tensor w = full.weight();
    in_ = w.size(1);
    out_ = w.size(0);
    require_divisible("ColumnParallelLinear", "out_features", out_, group_);
    std::int64_t k = out_ / group_.size(), r = group_.rank();
    shard_param(*this, "weight", w.slice(0, r * k, (r + 1) * k));
    if (options_.bias) {
      if (!full.bias().defined()) throw Error(ErrorKind::value, "ColumnParallelLinear: the full layer has no bias");
      shard_param(*this, "bias", full.bias().slice(0, r * k, (r + 1) * k));
    }
  }
  Tensor forward(const Tensor& x) override {
    if (!x.defined() || x.dim() < 1 || x.size(-1) != in_)
      throw Error(ErrorKind::shape, "ColumnParallelLinear: input " + describe(x) + " must end in in_features = " +
                                        std::to_string(in_));
    Tensor y = matmul(region(Region::copy, x, group_), own_parameters()[0].second.t());
    if (options_.bias) y = add(y, own_parameters()[1].second);
    return options_.gather_output ? region(Region::gather, y, group_) : y;
  }
  std::string name() const override {
    return "ColumnParallelLinear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
           ", ranks=" + std::to_string(group_.size()) + (options_.gather_output ? ", gather_output" : "") + ")";
  }

private:
  ColumnParallelLinearOptions options_;
  dist::ProcessGroup group_;
  std::int64_t in_ = 0, out_ = 0;
};

class RowParallelImpl final : public ModuleImpl {
public:
  RowParallelImpl(const Linear& full, RowParallelLinearOptions o) : options_(std::move(o)), group_(group_or_world(options_.group)) {
    Tensor w = full.weight();
    in_ = w.size(1);
    out_ = w.size(0);
    require_divisible("RowParallelLinear", "in_features", in_, group_);
    std::int64_t k = in_ / group_.size(), r = group_.rank();
    shard_param(*this, "weight", w.slice(1, r * k, (r + 1) * k));
    if (options_.bias) {
      if (!full.bias().defined()) throw Error(ErrorKind::value, "RowParallelLinear: the full layer has no bias");
      shard_param(*this, "bias", full.bias());
    }
  }
  Tensor forward(const Tensor& x) override {
    std::int64_t want = options_.input_is_parallel ? in_ / group_.size() : in_;
    if (!x.defined() || x.dim() < 1 || x.size(-1) != want)
      throw Error(ErrorKind::shape, "RowParallelLinear: input " + describe(x) + " must end in " +
                                        (options_.input_is_parallel ? "in_features / ranks = " : "in_features = ") +
                                        std::to_string(want));
    Tensor xr = options_.input_is_parallel ? x : region(Region::scatter, x, group_);
    Tensor y = region(Region::reduce, matmul(xr, own_parameters()[0].second.t()), group_);
    return options_.bias ? add(y, own_parameters()[1].second) : y;
  }
  std::string name() const override {
    return "RowParallelLinear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
           ", ranks=" + std::to_string(group_.size()) + (options_.input_is_parallel ? ", input_is_parallel" : "") + ")";
  }

private:
  RowParallelLinearOptions options_;
  dist::ProcessGroup group_;
  std::int64_t in_ = 0, out_ = 0;
};

class ParallelMLPImpl final : public ModuleImpl {
public:
  ParallelMLPImpl(std::int64_t embed, std::int64_t hidden, const std::optional<dist::ProcessGroup>& g)
      : fc_(embed, hidden, {.gather_output = false, .group = g}), proj_(hidden, embed, {.input_is_parallel = true, .group = g}) {
    register_module("fc", fc_.impl());
    register_module("proj", proj_.impl());
  }
  Tensor forward(const Tensor& x) override { return proj_(gelu(fc_(x))); }
  std::string name() const override { return "ParallelMLP"; }

private:
  ColumnParallelLinear fc_;
  RowParallelLinear proj_;
};

Tensor named(const std::shared_ptr<ModuleImpl>& impl, const std::string& name) {
  for (const auto& [n, t] : impl->own_parameters())
    if (n == name) return t;
  return {};
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(std::int64_t in, std::int64_t out, ColumnParallelLinearOptions o)
    : ColumnParallelLinear(from_linear(Linear(in, out, o.bias), o)) {}
ColumnParallelLinear ColumnParallelLinear::from_linear(const Linear& full, ColumnParallelLinearOptions o) {
  return ColumnParallelLinear(std::make_shared<ColumnParallelImpl>(full, std::move(o)));
}
Tensor ColumnParallelLinear::weight() const { return named(impl_, "weight"); }
Tensor ColumnParallelLinear::bias() const { return named(impl_, "bias"); }

RowParallelLinear::RowParallelLinear(std::int64_t in, std::int64_t out, RowParallelLinearOptions o)
    : RowParallelLinear(from_linear(Linear(in, out, o.bias), o)) {}
RowParallelLinear RowParallelLinear::from_linear(const Linear& full, RowParallelLinearOptions o) {
  return RowParallelLinear(std::make_shared<RowParallelImpl>(full, std::move(o)));
}
Tensor RowParallelLinear::weight() const { return named(impl_, "weight"); }
Tensor RowParallelLinear::bias() const { return named(impl_, "bias"); }

ParallelMLP::ParallelMLP(std::int64_t embed, std::int64_t hidden, std::optional<dist::ProcessGroup> group) {
  impl_ = std::make_shared<ParallelMLPImpl>(embed, hidden, group);
}

}  // namespace brrr::nn
