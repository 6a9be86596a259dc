// Data parallelism, ZeRO-1 and tensor parallelism against one process doing the same work
// unsharded, on any device and world size: every rank also computes the single-process
// reference itself (same seed, the whole batch) and compares. Shared by the CPU suite
// (Gloo, 1-3 ranks) and the GPU suite (NCCL, one rank).
// Include after <doctest/doctest.h>, `import brrr;` and tests/tensor/helpers.hpp.
#pragma once

namespace parallel_cases {

using namespace brrr;

// One seed for every rank: rank 0's fresh one.
inline std::uint64_t shared_seed() {
  Tensor s = full({1}, 0, {.dtype = DType::i64});
  if (dist::rank() == 0) s.fill_(static_cast<double>(test::fresh_seed() % (1ull << 40)));
  dist::broadcast(s, 0);
  return static_cast<std::uint64_t>(s.item<std::int64_t>());
}

inline nn::Sequential mlp() {
  return nn::Sequential{nn::Linear(6, 12), nn::Tanh(), nn::Linear(12, 12), nn::Tanh(), nn::Linear(12, 3)};
}
inline nn::Sequential cnn() {
  return nn::Sequential{nn::Conv2d(1, 4, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(4 * 3 * 3, 3)};
}

struct Data {
  Tensor x, y;  // [steps * batch, ...], labels [steps * batch]
};
inline Data make_data(std::int64_t rows, Shape example, Device dev) {
  Shape shape{rows};
  shape.insert(shape.end(), example.begin(), example.end());
  return {randn(shape).to(dev), randint(0, 3, {rows}).to(dev)};
}
// Rows [step * batch, (step + 1) * batch) of the global batch, and this rank's part of them.
inline Tensor batch(const Tensor& t, std::int64_t step, std::int64_t global) {
  return t.slice(0, step * global, (step + 1) * global);
}
inline Tensor local(const Tensor& t, int r, int n) {
  std::int64_t k = t.size(0) / n;
  return t.slice(0, r * k, (r + 1) * k);
}

inline void check_same_parameters(const nn::Module& got, const nn::Module& want, double rtol, double atol) {
  auto a = got.named_parameters(), b = want.named_parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("parameter ", a[i].first);
    CHECK_NOTHROW(testing::assert_close(a[i].second, b[i].second, {.rtol = rtol, .atol = atol}));
  }
}

// DDP over N ranks with batch B / N each == one process with batch B, after 20 SGD steps.
inline void ddp_equals_one_big_batch(Device dev, bool conv, double bucket_mb) {
  const int r = dist::rank(), n = dist::world_size();
  manual_seed(shared_seed());
  const std::int64_t B = 12, steps = 20;
  Data d = make_data(B * steps, conv ? Shape{1, 6, 6} : Shape{6}, dev);
  std::uint64_t init_seed = shared_seed();
  manual_seed(init_seed);
  nn::Sequential ref = conv ? cnn() : mlp();
  manual_seed(init_seed + static_cast<std::uint64_t>(r));  // different on each rank: DDP must broadcast rank 0's
  nn::Sequential model = conv ? cnn() : mlp();
  ref.to(dev);
  model.to(dev);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = bucket_mb, .first_bucket_cap_mb = bucket_mb});
  optim::SGD ref_opt(ref.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (std::int64_t s = 0; s < steps; ++s) {
    Tensor xb = batch(d.x, s, B), yb = batch(d.y, s, B);
    ref_opt.zero_grad();
    cross_entropy(ref(xb), yb).backward();
    ref_opt.step();
    opt.zero_grad();
    cross_entropy(ddp(local(xb, r, n)), local(yb, r, n)).backward();
    opt.step();
  }
  check_same_parameters(ddp.module(), ref, 1e-4, 2e-5);
}

inline void ddp_buckets_and_views(Device dev) {
  manual_seed(1);
  nn::Sequential model = mlp();
  model.to(dev);
  nn::DistributedDataParallel one(model);
  auto names = one.bucket_parameter_names();
  REQUIRE(names.size() == 1);  // 12 + 12 + 3 columns of a tiny MLP: far below 1 MiB
  CHECK(names[0] == std::vector<std::string>{"module.4.bias", "module.4.weight", "module.2.bias", "module.2.weight",
                                             "module.0.bias", "module.0.weight"});
  Tensor x = randn({6, 6}).to(dev);
  cross_entropy(one(x), zeros({6}, {.dtype = DType::i64}).to(dev)).backward();
  auto params = one.parameters();
  for (const auto& p : params) CHECK(p.grad().storage().is_same(params[0].grad().storage()));  // one bucket

  // Caps of 400 bytes, in reverse order: 4.bias (12 B), 4.weight (144 B) and 2.bias (48 B)
  // fill the first bucket; 2.weight (576 B) is over the cap and alone; 0.bias (48 B) and
  // 0.weight (288 B) share the last.
  nn::Sequential other = mlp();
  other.to(dev);
  nn::DistributedDataParallel small(other, {.bucket_cap_mb = 400.0 / (1 << 20), .first_bucket_cap_mb = 400.0 / (1 << 20)});
  auto b = small.bucket_parameter_names();
  REQUIRE(b.size() == 3);
  CHECK(b[0] == std::vector<std::string>{"module.4.bias", "module.4.weight", "module.2.bias"});
  CHECK(b[1] == std::vector<std::string>{"module.2.weight"});
  CHECK(b[2] == std::vector<std::string>{"module.0.bias", "module.0.weight"});
  cross_entropy(small(x), zeros({6}, {.dtype = DType::i64}).to(dev)).backward();
  auto q = small.named_parameters();  // module.0.weight, module.0.bias, module.2.weight, ...
  CHECK(q[0].second.grad().storage().is_same(q[1].second.grad().storage()));
  CHECK_FALSE(q[2].second.grad().storage().is_same(q[1].second.grad().storage()));
}

// k micro-batches under no_sync (the last one synced) == one batch k times as large.
inline void no_sync_accumulation(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  manual_seed(shared_seed());
  const std::int64_t micro = 4, k = 3, steps = 5, B = micro * k * n;
  Data d = make_data(B * steps, {6}, dev);
  std::uint64_t seed = shared_seed();
  manual_seed(seed);
  nn::Sequential ref = mlp();
  manual_seed(seed);
  nn::Sequential model = mlp();
  ref.to(dev);
  model.to(dev);
  nn::DistributedDataParallel ddp(model);
  optim::SGD ref_opt(ref.parameters(), {.lr = 0.2});
  optim::SGD opt(ddp.parameters(), {.lr = 0.2});
  for (std::int64_t s = 0; s < steps; ++s) {
    Tensor xb = batch(d.x, s, B), yb = batch(d.y, s, B);
    ref_opt.zero_grad();
    cross_entropy(ref(xb), yb).backward();
    ref_opt.step();
    opt.zero_grad();
    for (std::int64_t j = 0; j < k; ++j) {
      // Micro-batch j of this rank: rows of the j-th slice of the global batch.
      Tensor xm = local(xb.slice(0, j * micro * n, (j + 1) * micro * n), r, n);
      Tensor ym = local(yb.slice(0, j * micro * n, (j + 1) * micro * n), r, n);
      auto loss = [&] { return cross_entropy(ddp(xm), ym) * (1.0 / k); };
      if (j + 1 < k) {
        auto guard = ddp.no_sync();
        loss().backward();
      } else {
        loss().backward();
      }
    }
    opt.step();
  }
  check_same_parameters(ddp.module(), ref, 1e-4, 2e-5);
}

// A module whose second layer takes no part in the loss.
class TwoHeads final : public nn::ModuleImpl {
public:
  TwoHeads() {
    register_module("used", used_.impl());
    register_module("unused", unused_.impl());
  }
  Tensor forward(const Tensor& x) override { return used_(x); }
  std::string name() const override { return "TwoHeads"; }

private:
  nn::Linear used_{6, 3}, unused_{6, 3};
};

inline void unused_parameters(Device dev) {
  manual_seed(7);
  nn::Module model(std::make_shared<TwoHeads>());
  model.to(dev);
  nn::DistributedDataParallel strict(model);
  Tensor x = randn({6, 6}).to(dev), y = randint(0, 3, {6}).to(dev);
  CHECK_BRRR_ERROR(cross_entropy(strict(x), y).backward(), ErrorKind::value, "DistributedDataParallel",
                   "module.unused.weight, module.unused.bias", "find_unused_parameters");

  manual_seed(7);
  nn::Module again(std::make_shared<TwoHeads>());
  again.to(dev);
  nn::DistributedDataParallel lenient(again, {.find_unused_parameters = true});
  Tensor loss = cross_entropy(lenient(x), y);
  loss.backward();
  // Every rank had the same batch: the averaged gradient is the local one.
  Tensor local = autograd::grad({cross_entropy(again(x), y)}, {again.named_parameters()[0].second})[0];
  for (auto& [name, p] : lenient.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    if (name.find("unused") != std::string::npos) CHECK(test::values(p.grad()) == std::vector<double>(p.numel(), 0.0));
  }
  CHECK_NOTHROW(testing::assert_close(lenient.named_parameters()[0].second.grad(), local, {.rtol = 1e-5, .atol = 1e-6}));
}

// ZeRO-1 over N ranks (batch B / N each, no DDP) == AdamW (or SGD) on batch B, 20 steps; the
// optimizer state per rank is 1/N of AdamW's (up to the padding).
inline void zero_equals_plain(Device dev, bool sgd) {
  const int r = dist::rank(), n = dist::world_size();
  manual_seed(shared_seed());
  const std::int64_t B = 12, steps = 20;
  Data d = make_data(B * steps, {6}, dev);
  std::uint64_t seed = shared_seed();
  manual_seed(seed);
  nn::Sequential ref = mlp();
  manual_seed(seed);
  nn::Sequential model = mlp();
  ref.to(dev);
  model.to(dev);
  std::unique_ptr<optim::Optimizer> ref_opt;
  std::unique_ptr<optim::ZeroRedundancyOptimizer> zero;
  if (sgd) {
    ref_opt = std::make_unique<optim::SGD>(ref.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    zero = optim::ZeroRedundancyOptimizer::with_sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  } else {
    ref_opt = std::make_unique<optim::AdamW>(ref.parameters(), optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
    zero = std::make_unique<optim::ZeroRedundancyOptimizer>(model.parameters(), optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    Tensor xb = batch(d.x, s, B), yb = batch(d.y, s, B);
    ref_opt->zero_grad();
    cross_entropy(ref(xb), yb).backward();
    ref_opt->step();
    zero->zero_grad();
    cross_entropy(model(local(xb, r, n)), local(yb, r, n)).backward();
    zero->step();
  }
  check_same_parameters(model, ref, 1e-4, 2e-5);
  const std::int64_t total = model.num_parameters();
  CHECK(zero->shard_numel() == (total + n - 1) / n);
  const std::uint64_t plain = (sgd ? 1 : 2) * static_cast<std::uint64_t>(total) * 4;  // momentum, or m and v
  const std::uint64_t mine = zero->optimizer_state_bytes();
  CHECK(mine == (sgd ? 1 : 2) * static_cast<std::uint64_t>(zero->shard_numel()) * 4);
  CHECK(mine * n >= plain);
  CHECK(mine * n < plain + (sgd ? 1 : 2) * 4 * static_cast<std::uint64_t>(n));  // 1/N, plus the padding
}

// ZeRO's per-rank state_dict: 10 steps, save, 10 more == a fresh model and optimizer loaded
// from the save and run the same 10, bit for bit; a state of another rank is refused.
inline void zero_resumes_exactly(Device dev, bool sgd) {
  const int r = dist::rank(), n = dist::world_size();
  const std::int64_t B = 12, steps = 20, save_at = 10;
  manual_seed(shared_seed());
  Data d = make_data(B * steps, {6}, dev);
  const std::uint64_t seed = shared_seed();
  auto make = [&](nn::Sequential& m) {
    return sgd ? optim::ZeroRedundancyOptimizer::with_sgd(m.parameters(), {.lr = 0.1, .momentum = 0.9})
               : std::make_unique<optim::ZeroRedundancyOptimizer>(m.parameters(), optim::AdamOptions{.lr = 1e-2});
  };
  auto train = [&](nn::Sequential& m, optim::ZeroRedundancyOptimizer& z, std::int64_t from, std::int64_t to) {
    for (std::int64_t s = from; s < to; ++s) {
      z.zero_grad();
      cross_entropy(m(local(batch(d.x, s, B), r, n)), local(batch(d.y, s, B), r, n)).backward();
      z.step();
    }
  };
  manual_seed(seed);
  nn::Sequential a = mlp();
  a.to(dev);
  auto za = make(a);
  train(a, *za, 0, save_at);
  optim::StateDict saved_opt;
  for (const auto& [k, v] : za->state_dict()) saved_opt[k] = v.clone();
  std::vector<Tensor> saved_params;
  for (const Tensor& p : a.parameters()) saved_params.push_back(p.detach().clone());
  train(a, *za, save_at, steps);

  manual_seed(seed + 99);  // other initial values: everything must come from the save
  nn::Sequential b = mlp();
  b.to(dev);
  auto zb = make(b);
  {
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < saved_params.size(); ++i) b.parameters()[i].copy_(saved_params[i]);
  }
  zb->load_state_dict(saved_opt);
  CHECK(zb->step_count() == save_at);
  train(b, *zb, save_at, steps);
  for (std::size_t i = 0; i < saved_params.size(); ++i)
    CHECK(max(abs(a.parameters()[i] - b.parameters()[i])).item<double>() == 0.0);

  optim::StateDict other = saved_opt;
  other["brrr.zero.rank"] = full({}, static_cast<double>(r + 1), {.dtype = DType::i64});
  CHECK_THROWS_WITH_AS(zb->load_state_dict(other), doctest::Contains("brrr.zero.rank"), Error);
}

// Column-, row-parallel layers and the MLP block == the unsharded layers, values and gradients
// (world sizes that divide 6 and 12).
inline void tensor_parallel_equals_unsharded(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  std::uint64_t seed = shared_seed();
  manual_seed(seed + 1);
  Tensor x_data = randn({5, 6}).to(dev);
  Tensor probe = randn({5, 12}).to(dev);  // the loss weights the outputs with fixed numbers
  auto leaf = [&] {
    Tensor t = x_data.clone();
    t.requires_grad_();
    return t;
  };
  const testing::CloseOptions tol{.rtol = 1e-5, .atol = 1e-6};

  {  // Column-parallel, gathered output
    manual_seed(seed);
    nn::Linear full(6, 12);
    nn::ColumnParallelLinear col = nn::ColumnParallelLinear::from_linear(full, {.gather_output = true});
    full.to(dev);
    col.to(dev);
    Tensor xf = leaf(), xc = leaf();
    Tensor yf = full(xf), yc = col(xc);
    CHECK_NOTHROW(testing::assert_close(yc, yf, tol));
    (yf * probe).sum().backward();
    (yc * probe).sum().backward();
    std::int64_t k = 12 / n;
    CHECK_NOTHROW(testing::assert_close(col.weight().grad(), full.weight().grad().slice(0, r * k, (r + 1) * k), tol));
    CHECK_NOTHROW(testing::assert_close(col.bias().grad(), full.bias().grad().slice(0, r * k, (r + 1) * k), tol));
    CHECK_NOTHROW(testing::assert_close(xc.grad(), xf.grad(), tol));
    // The same layer built from the seed directly.
    manual_seed(seed);
    nn::ColumnParallelLinear direct(6, 12);
    CHECK_NOTHROW(testing::assert_close(direct.weight().to(dev), col.weight(), {.rtol = 0, .atol = 0}));
  }
  {  // Row-parallel, splitting a full input
    manual_seed(seed + 2);
    nn::Linear full(6, 12);
    nn::RowParallelLinear row = nn::RowParallelLinear::from_linear(full, {.input_is_parallel = false});
    full.to(dev);
    row.to(dev);
    Tensor xf = leaf(), xr = leaf();
    Tensor yf = full(xf), yr = row(xr);
    CHECK_NOTHROW(testing::assert_close(yr, yf, tol));
    (yf * probe).sum().backward();
    (yr * probe).sum().backward();
    std::int64_t k = 6 / n;
    CHECK_NOTHROW(testing::assert_close(row.weight().grad(), full.weight().grad().slice(1, r * k, (r + 1) * k), tol));
    CHECK_NOTHROW(testing::assert_close(row.bias().grad(), full.bias().grad(), tol));
    CHECK_NOTHROW(testing::assert_close(xr.grad(), xf.grad(), tol));
  }
  {  // The MLP block
    manual_seed(seed + 3);
    nn::Sequential full{nn::Linear(6, 12), nn::GELU(), nn::Linear(12, 6)};
    manual_seed(seed + 3);
    nn::ParallelMLP tp(6, 12);
    full.to(dev);
    tp.to(dev);
    Tensor xf = leaf(), xt = leaf();
    Tensor yf = full(xf), yt = tp(xt);
    CHECK_NOTHROW(testing::assert_close(yt, yf, tol));
    Tensor p6 = probe.slice(1, 0, 6);
    (yf * p6).sum().backward();
    (yt * p6).sum().backward();
    CHECK_NOTHROW(testing::assert_close(xt.grad(), xf.grad(), tol));
    auto fp = full.named_parameters();
    auto tpp = tp.named_parameters();
    REQUIRE(tpp.size() == 4);
    std::int64_t k = 12 / n;
    CHECK_NOTHROW(testing::assert_close(tpp[0].second.grad(), fp[0].second.grad().slice(0, r * k, (r + 1) * k), tol));
    CHECK_NOTHROW(testing::assert_close(tpp[1].second.grad(), fp[1].second.grad().slice(0, r * k, (r + 1) * k), tol));
    CHECK_NOTHROW(testing::assert_close(tpp[2].second.grad(), fp[2].second.grad().slice(1, r * k, (r + 1) * k), tol));
    CHECK_NOTHROW(testing::assert_close(tpp[3].second.grad(), fp[3].second.grad(), tol));
  }
}

}  // namespace parallel_cases
