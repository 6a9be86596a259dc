// nn::DistributedDataParallel: gradient buckets filled by post-accumulate-grad hooks, each
// bucket's all-reduce started as soon as its last gradient is in (overlapping the rest of
// backward), and the end of backward waiting for them (device-side for CUDA). The design
// follows PyTorch's reducer (Li et al. 2020, VLDB), smaller: buckets are fixed at
// construction (no rebuild in the observed gradient order), and unused parameters are found
// at the end of backward rather than by walking the graph at forward.
module;
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>
module brrr.dist;
import brrr.tensor;
import brrr.ops;
import brrr.autograd;
import brrr.nn;

namespace brrr::nn {

namespace {

struct Bucket {
  Tensor buffer;                     // flat, contiguous: the gradients of its parameters
  std::vector<std::size_t> params;   // indices into DdpImpl::params_
  std::size_t pending = 0;           // parameters whose gradient has not arrived this pass
  dist::Work work;
  bool launched = false;
};

class DdpImpl final : public ModuleImpl {
public:
  DdpImpl(Module module, DistributedDataParallelOptions options) : module_(std::move(module)), options_(std::move(options)) {
    if (!module_.defined()) throw Error(ErrorKind::value, "DistributedDataParallel: the module is empty");
    if (options_.bucket_cap_mb <= 0 || options_.first_bucket_cap_mb <= 0)
      throw Error(ErrorKind::value, "DistributedDataParallel: bucket sizes must be positive");
    register_module("module", module_.impl());
    group_ = options_.process_group ? *options_.process_group : dist::world_group();
    if (!group_.is_member())
      throw Error(ErrorKind::value, "DistributedDataParallel: this rank is not a member of " + group_.name());
    sync_module_states();
    for (auto& [name, p] : module_.named_parameters())
      if (p.requires_grad()) {
        names_.push_back("module." + name);
        params_.push_back(p);
      }
    make_buckets();
    for (std::size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(params_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(i); }));
  }
  ~DdpImpl() override {
    for (auto& h : hooks_) h.remove();
  }

  Tensor forward(const Tensor& input) override {
    if (in_backward_) reset_pass();  // a backward that threw half-way: start clean
    if (options_.broadcast_buffers && group_.size() > 1) {
      NoGradGuard no_grad;
      for (auto& [name, b] : module_.named_buffers()) dist::broadcast(b, 0, {.group = group_});
    }
    // Only a backward through a forward of this wrapper communicates (as in PyTorch): the
    // module used on its own, or under no_sync, accumulates locally.
    expect_backward_ = autograd::is_grad_enabled() && !*no_sync_;
    return module_(input);
  }
  std::string name() const override { return "DistributedDataParallel"; }

  Module module_;
  DistributedDataParallelOptions options_;
  dist::ProcessGroup group_ = dist::world_group();
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::vector<autograd::RemovableHandle> hooks_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<std::size_t, Tensor>> views_;  // per parameter: its bucket, its view
  std::vector<bool> ready_;
  std::size_t next_bucket_ = 0;  // buckets launch in index order, the same on every rank
  bool in_backward_ = false;
  bool expect_backward_ = false;  // the last forward went through this wrapper, synced
  std::shared_ptr<bool> no_sync_ = std::make_shared<bool>(false);

private:
  // Rank 0's parameters and buffers on every rank.
  void sync_module_states() {
    if (group_.size() == 1) return;
    NoGradGuard no_grad;
    for (auto& [name, p] : module_.named_parameters()) dist::broadcast(p, 0, {.group = group_});
    for (auto& [name, b] : module_.named_buffers()) dist::broadcast(b, 0, {.group = group_});
  }

  // Reverse registration order, split by (device, dtype) and by the size caps.
  void make_buckets() {
    const double mib = 1024.0 * 1024.0;
    std::map<std::tuple<int, int, int>, std::size_t> open;  // (device type, index, dtype) -> bucket
    std::vector<std::vector<std::size_t>> members;
    std::vector<std::int64_t> bytes;
    views_.resize(params_.size());
    for (std::size_t k = params_.size(); k-- > 0;) {
      const Tensor& p = params_[k];
      if (!p.is_contiguous())
        throw Error(ErrorKind::value, "DistributedDataParallel: parameter " + names_[k] + " (" + describe(p) +
                                          ") is not contiguous");
      auto key = std::make_tuple(static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.dtype()));
      auto it = open.find(key);
      std::int64_t size = static_cast<std::int64_t>(p.nbytes());
      if (it != open.end()) {
        double cap = (it->second == 0 ? options_.first_bucket_cap_mb : options_.bucket_cap_mb) * mib;
        if (static_cast<double>(bytes[it->second] + size) > cap) open.erase(it), it = open.end();
      }
      if (it == open.end()) {
        it = open.emplace(key, members.size()).first;
        members.emplace_back();
        bytes.push_back(0);
      }
      members[it->second].push_back(k);
      bytes[it->second] += size;
    }
    NoGradGuard no_grad;
    for (std::size_t b = 0; b < members.size(); ++b) {
      std::int64_t numel = 0;
      for (std::size_t k : members[b]) numel += params_[k].numel();
      const Tensor& first = params_[members[b][0]];
      Bucket bucket;
      bucket.buffer = zeros({numel}, {.dtype = first.dtype(), .device = first.device()});
      bucket.params = members[b];
      std::int64_t at = 0;
      for (std::size_t k : members[b]) {
        std::int64_t n = params_[k].numel();
        views_[k] = {b, bucket.buffer.slice(0, at, at + n).view(params_[k].shape())};
        at += n;
      }
      buckets_.push_back(std::move(bucket));
    }
    reset_pass();
  }

  void reset_pass() {
    ready_.assign(params_.size(), false);
    for (auto& b : buckets_) {
      b.pending = b.params.size();
      b.launched = false;
      b.work = dist::Work();
    }
    next_bucket_ = 0;
    in_backward_ = false;
  }

  // A parameter's gradient has been accumulated: into its bucket, and launch what is full.
  void on_gradient(std::size_t k) {
    if (*no_sync_ || !expect_backward_) return;  // accumulating locally
    if (!in_backward_) {
      in_backward_ = true;
      autograd::queue_callback([this] { finish_pass(); });
    }
    if (ready_[k])
      throw Error(ErrorKind::autograd, "DistributedDataParallel: parameter " + names_[k] +
                                           " received a second gradient in one backward pass (it is used by "
                                           "two backward calls without a forward in between)");
    into_bucket(k);
    ready_[k] = true;
    Bucket& b = buckets_[views_[k].first];
    if (--b.pending == 0) launch_ready();
  }

  void into_bucket(std::size_t k) {
    const Tensor& p = params_[k];
    Tensor& view = views_[k].second;
    Tensor g = p.grad();
    NoGradGuard no_grad;
    if (!g.defined()) view.fill_(0.0);
    else if (!g.is_same(view)) view.copy_(g.detach());
    p.set_grad(view);  // the gradient lives in the bucket from now on
  }

  void launch_ready() {
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
      Bucket& b = buckets_[next_bucket_++];
      b.work = dist::all_reduce(b.buffer, dist::ReduceOp::avg, {.async_op = true, .group = group_});
      b.launched = true;
    }
  }

  // End of backward: unused parameters, then the current stream waits for every bucket.
  void finish_pass() {
    std::vector<std::string> unused;
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (!ready_[k]) unused.push_back(names_[k]);
    if (!unused.empty()) {
      if (!options_.find_unused_parameters) {
        std::string list;
        for (const auto& n : unused) list += (list.empty() ? "" : ", ") + n;
        reset_pass();
        throw Error(ErrorKind::value,
                    "DistributedDataParallel: parameters that received no gradient in this backward pass: " + list +
                        ". Make every parameter take part in the loss, or pass .find_unused_parameters = true");
      }
      for (std::size_t k = 0; k < params_.size(); ++k)
        if (!ready_[k]) {
          {
            NoGradGuard no_grad;
            views_[k].second.fill_(0.0);
          }
          params_[k].set_grad(views_[k].second);
          ready_[k] = true;
          --buckets_[views_[k].first].pending;
        }
      launch_ready();
    }
    for (auto& b : buckets_) b.work.wait();  // CUDA: the current stream waits; Gloo: the host
    reset_pass();
    expect_backward_ = false;
  }
};

DdpImpl& ddp_impl(const std::shared_ptr<ModuleImpl>& impl) { return static_cast<DdpImpl&>(*impl); }

}  // namespace

DistributedDataParallel::DistributedDataParallel(Module module, DistributedDataParallelOptions options) {
  impl_ = std::make_shared<DdpImpl>(std::move(module), std::move(options));
}

Module DistributedDataParallel::module() const { return ddp_impl(impl_).module_; }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  auto& d = ddp_impl(impl_);
  std::vector<std::vector<std::string>> out;
  for (const auto& b : d.buckets_) {
    out.emplace_back();
    for (std::size_t k : b.params) out.back().push_back(d.names_[k]);
  }
  return out;
}

DistributedDataParallel::NoSyncGuard DistributedDataParallel::no_sync() const {
  return NoSyncGuard(ddp_impl(impl_).no_sync_);
}

}  // namespace brrr::nn
