// The containers without a forward of their own: ModuleList, ModuleDict, ParameterList
// (torch.nn's). Each registers its entries with its Impl, so traversal, state dicts, to() and
// printing see them like any children or parameters.
module;
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

namespace {

class ModuleListImpl final : public ModuleImpl {
public:
  std::string name() const override { return "ModuleList"; }
};
class ModuleDictImpl final : public ModuleImpl {
public:
  std::string name() const override { return "ModuleDict"; }
};
class ParameterListImpl final : public ModuleImpl {
public:
  std::string name() const override { return "ParameterList"; }
};

ModuleImpl& checked(const std::shared_ptr<ModuleImpl>& impl, const char* what) {
  if (!impl) throw Error(ErrorKind::value, std::string(what) + ": the handle is empty (moved from)");
  return *impl;
}

}  // namespace

// --- ModuleList -----------------------------------------------------------------------------

ModuleList::ModuleList() : items_(std::make_shared<std::vector<Module>>()) {
  impl_ = std::make_shared<ModuleListImpl>();
}
ModuleList::ModuleList(std::initializer_list<Module> modules) : ModuleList() {
  for (const Module& m : modules) push_back(m);
}
ModuleList& ModuleList::push_back(const Module& module) {
  ModuleImpl& impl = checked(impl_, "ModuleList::push_back");
  if (!module.defined()) throw Error(ErrorKind::value, "ModuleList::push_back: the module handle is empty");
  impl.register_module(std::to_string(items_->size()), module.impl());
  items_->push_back(module);
  return *this;
}
ModuleList& ModuleList::extend(const ModuleList& other) {
  std::vector<Module> copy(other.begin(), other.end());  // other may be *this
  for (const Module& m : copy) push_back(m);
  return *this;
}
std::size_t ModuleList::size() const { return items_ ? items_->size() : 0; }
Module ModuleList::operator[](std::size_t index) const {
  if (index >= size())
    throw Error(ErrorKind::index, "ModuleList: index " + std::to_string(index) + " is out of range for " +
                                      std::to_string(size()) + " modules");
  return (*items_)[index];
}
std::vector<Module>::const_iterator ModuleList::begin() const {
  checked(impl_, "ModuleList::begin");
  return items_->cbegin();
}
std::vector<Module>::const_iterator ModuleList::end() const {
  checked(impl_, "ModuleList::end");
  return items_->cend();
}

// --- ModuleDict -----------------------------------------------------------------------------

ModuleDict::ModuleDict() { impl_ = std::make_shared<ModuleDictImpl>(); }
ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, Module>> modules) : ModuleDict() {
  for (const auto& [k, m] : modules) insert(k, m);
}
ModuleDict& ModuleDict::insert(const std::string& key, const Module& module) {
  ModuleImpl& impl = checked(impl_, "ModuleDict::insert");
  if (!module.defined())
    throw Error(ErrorKind::value, "ModuleDict::insert: the module handle for '" + key + "' is empty");
  impl.register_module(key, module.impl());
  return *this;
}
Module ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, child] : checked(impl_, "ModuleDict").own_children())
    if (k == key) return Module(child);
  throw Error(ErrorKind::index, "ModuleDict: no module under the key '" + key + "'");
}
bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, _] : checked(impl_, "ModuleDict::contains").own_children())
    if (k == key) return true;
  return false;
}
std::size_t ModuleDict::size() const { return impl_ ? impl_->own_children().size() : 0; }
std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, _] : checked(impl_, "ModuleDict::keys").own_children()) out.push_back(k);
  return out;
}
std::vector<Module> ModuleDict::values() const {
  std::vector<Module> out;
  for (const auto& [_, m] : checked(impl_, "ModuleDict::values").own_children()) out.emplace_back(m);
  return out;
}
std::vector<std::pair<std::string, Module>> ModuleDict::items() const { return named_children(); }

// --- ParameterList --------------------------------------------------------------------------

ParameterList::ParameterList() { impl_ = std::make_shared<ParameterListImpl>(); }
ParameterList::ParameterList(std::initializer_list<Tensor> parameters) : ParameterList() {
  for (const Tensor& p : parameters) append(p);
}
ParameterList& ParameterList::append(const Tensor& parameter) {
  ModuleImpl& impl = checked(impl_, "ParameterList::append");
  impl.register_parameter(std::to_string(impl.own_parameters().size()), parameter);
  return *this;
}
std::size_t ParameterList::size() const { return impl_ ? impl_->own_parameters().size() : 0; }
Tensor ParameterList::operator[](std::size_t index) const {
  const auto& params = checked(impl_, "ParameterList").own_parameters();
  if (index >= params.size())
    throw Error(ErrorKind::index, "ParameterList: index " + std::to_string(index) + " is out of range for " +
                                      std::to_string(params.size()) + " parameters");
  return params[index].second;
}

}  // namespace brrr::nn
