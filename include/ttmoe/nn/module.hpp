#pragma once
// Modules are plain structs holding parameter tensors and sub-modules. Each exposes
//   template <class V> void visit_parameters(V& v) { v("weight", weight); v.sub("attn", attn); }
// and everything generic (named parameter lists with timm / Hugging Face dotted names, freezing by
// pattern, optimisers, checkpoint loading) walks that visitor. No virtual functions, no registry:
// a module is usable on any device and element type its tensors use.

#include <fnmatch.h>

#include <string>
#include <vector>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::nn {

/// A named parameter, type-erased over rank: the flat view shares storage and gradient with the
/// module's tensor.
template <class T, class D = cpu>
struct ParamRef {
  std::string name;
  Tensor<T, Shape<dyn>, D> flat;
  std::vector<index_t> shape;
  bool trainable() const { return flat.requires_grad(); }
};

/// Walks a module tree calling `fn(dotted_name, tensor&)` on every parameter.
template <class Fn>
class ParameterVisitor {
 public:
  explicit ParameterVisitor(Fn& fn, std::string prefix = "") : fn_(fn), prefix_(std::move(prefix)) {}
  /// Visits one parameter tensor (skipped while undefined, e.g. an absent bias).
  template <class Tn>
  void operator()(const std::string& name, Tn& tensor) {
    if (tensor.defined()) fn_(join(name), tensor);
  }
  /// Visits a sub-module under `name`.
  template <class M>
  void sub(const std::string& name, M& mod) {
    ParameterVisitor child(fn_, join(name));
    mod.visit_parameters(child);
  }

 private:
  std::string join(const std::string& name) const { return prefix_.empty() ? name : prefix_ + "." + name; }
  Fn& fn_;
  std::string prefix_;
};

/// Calls fn(name, tensor&) for every parameter of `mod`, names dotted from `prefix`.
template <class M, class Fn>
void for_each_parameter(M& mod, Fn&& fn, const std::string& prefix = "") {
  ParameterVisitor<std::remove_reference_t<Fn>> v(fn, prefix);
  mod.visit_parameters(v);
}

/// All parameters of element type T as named flat views (in visiting order).
template <class T, class D = cpu, class M>
std::vector<ParamRef<T, D>> named_parameters(M& mod, const std::string& prefix = "") {
  std::vector<ParamRef<T, D>> out;
  for_each_parameter(
      mod,
      [&](const std::string& name, auto& t) {
        using Tn = std::remove_cvref_t<decltype(t)>;
        if constexpr (std::is_same_v<typename Tn::value_type, T> && std::is_same_v<typename Tn::device_type, D>) {
          auto e = t.extents();
          out.push_back({name, t.flat_view(), std::vector<index_t>(e.begin(), e.end())});
        }
      },
      prefix);
  return out;
}

/// Only the trainable parameters.
template <class T, class D = cpu, class M>
std::vector<ParamRef<T, D>> trainable_parameters(M& mod) {
  auto all = named_parameters<T, D>(mod);
  std::vector<ParamRef<T, D>> out;
  for (auto& p : all)
    if (p.trainable()) out.push_back(p);
  return out;
}

/// Sets every parameter whose dotted name matches the glob `pattern` (fnmatch: `*`, `?`, `[..]`)
/// trainable (`on`) or frozen. Returns how many matched.
template <class M>
std::size_t set_trainable(M& mod, const std::string& pattern, bool on) {
  std::size_t n = 0;
  for_each_parameter(mod, [&](const std::string& name, auto& t) {
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) {
      t.set_requires_grad(on);
      ++n;
    }
  });
  return n;
}

/// Freezes every parameter.
template <class M>
void freeze(M& mod) {
  set_trainable(mod, "*", false);
}

/// Clears every parameter's gradient.
template <class M>
void zero_grad(M& mod) {
  for_each_parameter(mod, [](const std::string&, auto& t) { t.zero_grad(); });
}

/// Total number of parameter elements (all, or trainable only).
template <class M>
index_t parameter_count(M& mod, bool trainable_only = false) {
  index_t n = 0;
  for_each_parameter(mod, [&](const std::string&, auto& t) {
    if (!trainable_only || t.requires_grad()) n += t.numel();
  });
  return n;
}

}  // namespace ttmoe::nn
