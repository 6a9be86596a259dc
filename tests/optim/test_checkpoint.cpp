// Full checkpoints on the CPU: a tiny MLP trained 2000 steps, saved (module, optimizer and
// scheduler state dicts in one safetensors file), loaded into freshly made (differently
// initialised) objects and trained 1000 more steps equals 3000 steps straight, bit for bit,
// for Adam + cosine warmup, SGD (nesterov momentum, weight decay) + StepLR, and AdamW with
// amsgrad. Also: PyTorch's key layout, load errors (count, shape, unexpected keys), and
// Module::load_state_dict(strict = false) returning missing and unexpected keys.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

struct Run {
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
  std::function<void()> sched_step;
  std::function<optim::StateDict()> sched_state;
  std::function<void(const optim::StateDict&)> sched_load;
};

// kind 0: Adam + CosineWithWarmup; 1: SGD + StepLR; 2: AdamW (amsgrad) + StepLR.
std::unique_ptr<Run> make_run(int kind, std::uint64_t init_seed) {
  manual_seed(init_seed);
  auto r = std::make_unique<Run>();
  r->model = nn::Sequential{nn::Linear(4, 8), nn::Tanh(), nn::Linear(8, 1)};
  if (kind == 0) {
    r->opt = std::make_unique<optim::Adam>(r->model.parameters(), optim::AdamOptions{.lr = 3e-3, .weight_decay = 1e-4});
    auto s = std::make_shared<optim::CosineWithWarmup>(*r->opt, 100, 3000, 1e-5);
    r->sched_step = [s] { s->step(); };
    r->sched_state = [s] { return s->state_dict(); };
    r->sched_load = [s](const optim::StateDict& d) { s->load_state_dict(d); };
  } else {
    if (kind == 1)
      r->opt = std::make_unique<optim::SGD>(r->model.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9,
                                                                                        .weight_decay = 1e-4,
                                                                                        .nesterov = true});
    else
      r->opt = std::make_unique<optim::AdamW>(r->model.parameters(),
                                              optim::AdamOptions{.lr = 2e-3, .weight_decay = 0.01, .amsgrad = true});
    auto s = std::make_shared<optim::StepLR>(*r->opt, 700, 0.5);
    r->sched_step = [s] { s->step(); };
    r->sched_state = [s] { return s->state_dict(); };
    r->sched_load = [s](const optim::StateDict& d) { s->load_state_dict(d); };
  }
  return r;
}

// Steps [from, to): batch s is drawn from seed 1000 + s, so both runs see the same data.
void train(Run& r, int from, int to) {
  Tensor w_true = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 0.5f, 1.0f}, {4, 1});
  for (int s = from; s < to; ++s) {
    manual_seed(1000 + static_cast<std::uint64_t>(s));
    Tensor x = randn({16, 4});
    Tensor y = tanh(matmul(x, w_true)) + randn({16, 1}) * 0.05;
    Tensor loss = mse_loss(r.model(x), y);
    r.opt->zero_grad();
    loss.backward();
    r.opt->step();
    r.sched_step();
  }
}

std::vector<std::vector<float>> snapshot(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_host<float>());
  return out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("brrr_ckpt_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void save_checkpoint(const std::string& path, Run& r) {
  io::TensorMap all;
  for (const auto& [k, v] : r.model.state_dict()) all["model." + k] = v;
  for (const auto& [k, v] : r.opt->state_dict()) all["optimizer." + k] = v;
  for (const auto& [k, v] : r.sched_state()) all["scheduler." + k] = v;
  io::save_safetensors(path, all);
}

void load_checkpoint(const std::string& path, Run& r) {
  std::map<std::string, optim::StateDict> parts;
  for (const auto& [k, v] : io::load_safetensors(path)) {
    auto dot = k.find('.');
    parts[k.substr(0, dot)][k.substr(dot + 1)] = v;
  }
  r.model.load_state_dict(nn::StateDict(parts["model"].begin(), parts["model"].end()));
  r.opt->load_state_dict(parts["optimizer"]);
  r.sched_load(parts["scheduler"]);
}

}  // namespace

TEST_CASE("train 2000 steps, save, resume 1000 == 3000 straight, bit for bit") {
  for (int kind = 0; kind < 3; ++kind) {
    INFO("kind = ", kind, " (0 Adam + cosine, 1 SGD nesterov + StepLR, 2 AdamW amsgrad + StepLR)");
    auto straight = make_run(kind, 7);
    train(*straight, 0, 3000);

    auto first = make_run(kind, 7);
    train(*first, 0, 2000);
    std::string path = temp_path(std::to_string(kind) + ".safetensors");
    save_checkpoint(path, *first);
    first.reset();

    auto resumed = make_run(kind, 12345);  // other initial weights: everything must come from the file
    bool differs = snapshot(resumed->model) != snapshot(straight->model);
    CHECK(differs);
    load_checkpoint(path, *resumed);
    CHECK(resumed->opt->step_count() == 2000);
    train(*resumed, 2000, 3000);
    std::filesystem::remove(path);

    CHECK(resumed->opt->step_count() == 3000);
    CHECK(resumed->opt->lr() == straight->opt->lr());
    bool equal = snapshot(resumed->model) == snapshot(straight->model);
    CHECK(equal);
    // The optimizer states agree too.
    auto a = straight->opt->state_dict(), b = resumed->opt->state_dict();
    REQUIRE(a.size() == b.size());
    for (const auto& [k, v] : a) {
      INFO("key ", k);
      REQUIRE(b.count(k) == 1);
      CHECK(values(v) == values(b.at(k)));
    }
  }
}

TEST_CASE("optimizer state dicts use PyTorch's keys; bad ones are refused") {
  auto r = make_run(0, 3);
  train(*r, 0, 3);
  optim::StateDict s = r->opt->state_dict();
  for (const char* key : {"param_groups.0.lr", "param_groups.0.betas", "param_groups.0.eps", "param_groups.0.params",
                          "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.3.exp_avg"})
    CHECK_MESSAGE(s.count(key) == 1, key);
  CHECK(s.at("state.0.step").item<double>() == 3);
  CHECK(values(s.at("param_groups.0.params")) == std::vector<double>{0, 1, 2, 3});
  CHECK(s.at("param_groups.0.lr").item<double>() == r->opt->lr());
  auto sgd = make_run(1, 3);
  train(*sgd, 0, 2);
  CHECK(sgd->opt->state_dict().count("state.2.momentum_buffer") == 1);
  CHECK(sgd->sched_state().at("last_epoch").item<std::int64_t>() == 2);

  optim::StateDict extra = s;
  extra["state.0.exp_avgg"] = zeros({1});
  CHECK_BRRR_ERROR(r->opt->load_state_dict(extra), ErrorKind::value, "unexpected", "state.0.exp_avgg");
  optim::StateDict bad_shape = s;
  bad_shape["state.1.exp_avg"] = zeros({3});
  CHECK_BRRR_ERROR(r->opt->load_state_dict(bad_shape), ErrorKind::shape, "state.1.exp_avg");
  optim::StateDict missing = s;
  missing.erase("param_groups.0.eps");
  CHECK_BRRR_ERROR(r->opt->load_state_dict(missing), ErrorKind::value, "param_groups.0.eps");
  optim::Adam small({zeros({2}, {.requires_grad = true})});
  CHECK_BRRR_ERROR(small.load_state_dict(s), ErrorKind::value, "4 parameters", "has 1");
  // A refused load leaves the optimizer as it was.
  CHECK(r->opt->step_count() == 3);
}

TEST_CASE("Module::load_state_dict(strict = false) returns missing and unexpected keys") {
  nn::Sequential a{nn::Linear(2, 3), nn::ReLU(), nn::Linear(3, 1)};
  nn::Sequential b{nn::Linear(2, 3)};
  nn::StateDict sd = b.state_dict();
  sd["extra.weight"] = zeros({1});
  auto result = a.load_state_dict(sd, false);
  bool missing_ok = result.missing_keys == std::vector<std::string>{"2.bias", "2.weight"};
  bool unexpected_ok = result.unexpected_keys == std::vector<std::string>{"extra.weight"};
  CHECK(missing_ok);
  CHECK(unexpected_ok);
  CHECK(values(a.state_dict().at("0.weight")) == values(b.state_dict().at("0.weight")));  // the rest loaded
  CHECK_BRRR_ERROR(a.load_state_dict(sd, true), ErrorKind::value, "missing", "2.bias", "unexpected", "extra.weight");
  auto clean = a.load_state_dict(a.state_dict());
  CHECK(clean.missing_keys.empty());
  CHECK(clean.unexpected_keys.empty());
}
