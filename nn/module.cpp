// Module and ModuleImpl: registration of parameters, buffers and children; traversal
// (depth-first, registration order, this module's own entries first, as torch.nn.Module);
// train/eval; in-place device and dtype moves through Tensor::set_data (so optimizers built
// before .to() keep updating the moved parameters); state dicts; printing.
module;
#include <cxxabi.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

namespace {

const std::shared_ptr<ModuleImpl>& checked(const std::shared_ptr<ModuleImpl>& impl, const char* op) {
  if (!impl) throw Error(ErrorKind::value, std::string("Module::") + op + ": the module handle is empty");
  return impl;
}

void check_name(const char* op, const std::string& name, ModuleImpl& m) {
  if (name.empty()) throw Error(ErrorKind::value, std::string(op) + ": the name is empty (in " + m.name() + ")");
  if (name.find('.') != std::string::npos)
    throw Error(ErrorKind::value, std::string(op) + ": name '" + name + "' must not contain '.' (in " + m.name() + ")");
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  if (taken(m.own_parameters()) || taken(m.own_buffers()) || taken(m.own_children()))
    throw Error(ErrorKind::value, std::string(op) + ": name '" + name + "' is already registered in " + m.name());
}

using Named = std::vector<std::pair<std::string, Tensor>>;

// Every (name, tensor) of parameters (buffers when !params), depth-first, no deduplication.
void collect(ModuleImpl& m, const std::string& prefix, bool params, Named& out) {
  for (const auto& [n, t] : params ? m.own_parameters() : m.own_buffers()) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : m.own_children()) collect(*child, prefix + n + ".", params, out);
}

// Drops repeated handles (tied weights), keeping the first name, as PyTorch does.
Named dedupe(Named all) {
  Named out;
  for (auto& entry : all) {
    bool seen = false;
    for (const auto& kept : out)
      if (kept.second.is_same(entry.second)) {
        seen = true;
        break;
      }
    if (!seen) out.push_back(std::move(entry));
  }
  return out;
}

void set_training(ModuleImpl& m, bool on) {
  m.training = on;
  for (const auto& [_, child] : m.own_children()) set_training(*child, on);
}

// "Linear(in_features=2)" -> {"Linear", "in_features=2"}; "Sequential" -> {"Sequential", ""}.
std::pair<std::string, std::string> split_name(const std::string& name) {
  auto open = name.find('(');
  if (open == std::string::npos || name.empty() || name.back() != ')') return {name, ""};
  return {name.substr(0, open), name.substr(open + 1, name.size() - open - 2)};
}

void print_tree(ModuleImpl& m, const std::string& indent, std::ostringstream& os) {
  if (m.own_children().empty()) {
    std::string name = m.name();
    os << name << (name.find('(') == std::string::npos ? "()" : "");  // "Sequential()" when empty
    return;
  }
  auto [head, args] = split_name(m.name());
  os << head << "(\n";
  if (!args.empty()) os << indent << "  " << args << "\n";
  for (const auto& [n, child] : m.own_children()) {
    os << indent << "  (" << n << "): ";
    print_tree(*child, indent + "  ", os);
    os << "\n";
  }
  os << indent << ")";
}

}  // namespace

// --- ModuleImpl -----------------------------------------------------------------------------

Tensor ModuleImpl::forward(const Tensor&) {
  throw Error(ErrorKind::value, name() + ": this module has no forward(const Tensor&) (call its own forward "
                                         "through its holder: net(a, b))");
}

std::string ModuleImpl::name() const {
  // The dynamic type's demangled name, without namespaces, template arguments and "Impl".
  const char* raw = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : raw;
  std::free(demangled);
  if (auto lt = full.find('<'); lt != std::string::npos) full.resize(lt);
  if (auto colon = full.rfind("::"); colon != std::string::npos) full = full.substr(colon + 2);
  if (full.size() > 4 && full.ends_with("Impl")) full.resize(full.size() - 4);
  return full.empty() ? "Module" : full;
}

Tensor& ModuleImpl::register_parameter(const std::string& name, Tensor tensor) {
  check_name("register_parameter", name, *this);
  if (!tensor.defined())
    throw Error(ErrorKind::value, "register_parameter: parameter '" + name + "' is an undefined tensor");
  if (!is_floating_point(tensor.dtype()))
    throw Error(ErrorKind::dtype, "register_parameter: parameter '" + name + "' must be floating point, got " +
                                      std::string(to_string(tensor.dtype())));
  if (!tensor.is_leaf()) tensor = tensor.detach();
  tensor.requires_grad_(true);
  parameters_.emplace_back(name, std::move(tensor));
  return parameters_.back().second;
}

Tensor& ModuleImpl::register_buffer(const std::string& name, Tensor tensor) {
  check_name("register_buffer", name, *this);
  if (!tensor.defined())
    throw Error(ErrorKind::value, "register_buffer: buffer '" + name + "' is an undefined tensor");
  buffers_.emplace_back(name, std::move(tensor));
  return buffers_.back().second;
}

void ModuleImpl::register_module(const std::string& name, std::shared_ptr<ModuleImpl> child) {
  check_name("register_module", name, *this);
  if (!child) throw Error(ErrorKind::value, "register_module: child '" + name + "' is an empty module handle");
  if (child.get() == this)
    throw Error(ErrorKind::value, "register_module: " + this->name() + " cannot be its own child '" + name + "'");
  children_.emplace_back(name, std::move(child));
}

// --- Module ---------------------------------------------------------------------------------

Tensor Module::operator()(const Tensor& input) const { return checked(impl_, "forward")->forward(input); }

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  Named all;
  collect(*checked(impl_, "named_parameters"), "", true, all);
  return dedupe(std::move(all));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  Named all;
  collect(*checked(impl_, "named_buffers"), "", false, all);
  return dedupe(std::move(all));
}

std::vector<std::pair<std::string, Module>> Module::named_children() const {
  std::vector<std::pair<std::string, Module>> out;
  for (const auto& [n, child] : checked(impl_, "named_children")->own_children()) out.emplace_back(n, Module(child));
  return out;
}

std::vector<Module> Module::children() const {
  std::vector<Module> out;
  for (const auto& [_, child] : checked(impl_, "children")->own_children()) out.emplace_back(child);
  return out;
}

const Module& Module::train(bool on) const {
  set_training(*checked(impl_, "train"), on);
  return *this;
}

bool Module::is_training() const { return checked(impl_, "is_training")->training; }

const Module& Module::to(Device device) const {
  checked(impl_, "to");
  NoGradGuard no_grad;
  for (const auto& [_, t] : named_parameters())
    if (t.device() != device) t.set_data(t.to(device));
  for (const auto& [_, t] : named_buffers())
    if (t.device() != device) t.set_data(t.to(device));
  return *this;
}

const Module& Module::to(DType dtype) const {
  checked(impl_, "to");
  if (!is_floating_point(dtype))
    throw Error(ErrorKind::dtype, std::string("Module::to: modules convert only to floating dtypes, got ") +
                                      brrr::to_string(dtype));
  NoGradGuard no_grad;
  for (const auto& [_, t] : named_parameters())
    if (t.dtype() != dtype) t.set_data(t.to(dtype));
  for (const auto& [_, t] : named_buffers())
    if (is_floating_point(t.dtype()) && t.dtype() != dtype) t.set_data(t.to(dtype));
  return *this;
}

StateDict Module::state_dict() const {
  StateDict out;
  Named all;
  collect(*checked(impl_, "state_dict"), "", true, all);
  collect(*impl_, "", false, all);
  for (auto& [n, t] : all) out.emplace(n, t.detach());
  return out;
}

Module::IncompatibleKeys Module::load_state_dict(const StateDict& state, bool strict) const {
  Named all;
  collect(*checked(impl_, "load_state_dict"), "", true, all);
  collect(*impl_, "", false, all);
  std::vector<std::string> missing, unexpected;
  std::string mismatched;  // every shape mismatch, reported together
  std::map<std::string, Tensor> own;
  for (const auto& [n, t] : all) own.emplace(n, t);
  for (const auto& [n, t] : own) {
    auto it = state.find(n);
    if (it == state.end()) {
      missing.push_back(n);
      continue;
    }
    if (!it->second.defined())
      throw Error(ErrorKind::value, "load_state_dict: the entry for '" + n + "' is an undefined tensor");
    if (it->second.shape() != t.shape())
      mismatched += std::string(mismatched.empty() ? "" : "; ") + "shape mismatch for '" + n +
                    "': the state dict has " + brrr::to_string(it->second.shape()) + " but the module has " +
                    brrr::to_string(t.shape());
  }
  if (!mismatched.empty()) throw Error(ErrorKind::shape, "load_state_dict: " + mismatched);
  for (const auto& [n, _] : state)
    if (!own.count(n)) unexpected.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "load_state_dict: error(s) loading the state dict into " + impl_->name() + ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      msg += std::string(" ") + what + " key(s):";
      for (std::size_t i = 0; i < keys.size(); ++i) msg += (i ? ", '" : " '") + keys[i] + "'";
      msg += ".";
    };
    list("missing", missing);
    list("unexpected", unexpected);
    throw Error(ErrorKind::value, msg);
  }
  NoGradGuard no_grad;
  for (const auto& [n, t] : own) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    Tensor dst = t;
    dst.copy_(it->second);  // converts dtype, crosses devices (a counted sync from pageable memory)
  }
  return {std::move(missing), std::move(unexpected)};
}

void Module::zero_grad(bool set_to_none) const {
  NoGradGuard no_grad;
  for (const auto& [_, t] : named_parameters()) {
    Tensor g = t.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      t.set_grad({});
    else
      g.fill_(0.0);
  }
}

namespace {
void apply_post_order(Module& m, const std::function<void(Module&)>& fn) {
  for (auto& child : m.children()) apply_post_order(child, fn);
  fn(m);
}
void collect_modules(const Module& m, const std::string& prefix, std::vector<std::pair<std::string, Module>>& out) {
  out.emplace_back(prefix, m);
  for (const auto& [n, child] : m.named_children()) collect_modules(child, prefix.empty() ? n : prefix + "." + n, out);
}
}  // namespace

const Module& Module::apply(const std::function<void(Module&)>& fn) const {
  checked(impl_, "apply");
  if (!fn) throw Error(ErrorKind::value, "Module::apply: the function is empty");
  Module self = *this;
  apply_post_order(self, fn);
  return *this;
}

std::vector<std::pair<std::string, Module>> Module::named_modules() const {
  checked(impl_, "named_modules");
  std::vector<std::pair<std::string, Module>> out;
  collect_modules(*this, "", out);
  return out;
}

std::string Module::type_name() const {
  std::string n = checked(impl_, "type_name")->name();
  return n.substr(0, n.find('('));
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& [_, t] : named_parameters()) n += t.numel();
  return n;
}

std::string Module::to_string() const {
  std::ostringstream os;
  print_tree(*checked(impl_, "to_string"), "", os);
  return os.str();
}

}  // namespace brrr::nn
