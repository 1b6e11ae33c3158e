#pragma once
// Helpers shared by the layer / optimiser parity tests: loading fixture tensors of any rank as flat
// vectors, writing fixture parameters into a module by dotted name, the upstream-weighted loss of
// the fixture convention, and comparisons that remember the worst error per component (printed so
// that the figures can be quoted).

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "ttmoe/nn/nn.hpp"

namespace ttmoe::test {

/// Tolerance relative to max(1, |ref|): 1e-10 in double (fixture README), `loose` in float.
template <class T>
double tol(double loose = 1e-4) {
  return std::is_same_v<T, double> ? 1e-10 : loose;
}

/// Fixture tensor `name` (any rank up to 6) as a flat vector of T.
template <class T>
std::vector<T> load_flat(const Fixture& f, const std::string& name) {
  switch (f.shape(name).size()) {
    case 0: return f.get<0, T>(name).to_vector();
    case 1: return f.get<1, T>(name).to_vector();
    case 2: return f.get<2, T>(name).to_vector();
    case 3: return f.get<3, T>(name).to_vector();
    case 4: return f.get<4, T>(name).to_vector();
    case 5: return f.get<5, T>(name).to_vector();
    case 6: return f.get<6, T>(name).to_vector();
  }
  throw std::runtime_error("load_flat: rank too large for " + name);
}

/// Copies every `param.<name>` of the fixture into the module's parameter of the same dotted name.
template <class T, class M>
void load_params(const Fixture& f, M& module) {
  for (auto& p : nn::named_parameters<T>(module)) {
    const std::string key = "param." + p.name;
    INFO("loading " << key);
    REQUIRE(f.has(key));
    REQUIRE(f.shape(key) == p.shape);
    auto v = load_flat<T>(f, key);
    std::copy(v.begin(), v.end(), p.flat.data());
  }
}

/// Worst relative error seen per component (for the report); printed by record_error.
inline std::map<std::string, double>& worst_errors() {
  static std::map<std::string, double> m;
  return m;
}

/// Compares `actual` (flat, with extents) to fixture tensor `name` within `tolerance`.
template <class T>
void check_flat(const Fixture& f, const std::string& component, const std::string& name, const std::vector<index_t>& shape,
                const std::vector<T>& actual, double tolerance) {
  INFO(component << ": " << name);
  REQUIRE(f.has(name));
  REQUIRE(shape == f.shape(name));
  const auto ref = load_flat<double>(f, name);
  REQUIRE(ref.size() == actual.size());
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::abs(double(actual[i]) - ref[i]) / std::max(1.0, std::abs(ref[i])));
  const std::string key = component + (std::is_same_v<T, double> ? " [double]" : " [float]");
  worst_errors()[key] = std::max(worst_errors()[key], worst);
  std::printf("[parity] %-28s %-26s max_rel_err %.3e (tol %.0e)\n", key.c_str(), name.c_str(), worst, tolerance);
  INFO("max relative error " << worst << " (tolerance " << tolerance << ")");
  REQUIRE(worst <= tolerance);
}

/// Compares a tensor to fixture tensor `name`.
template <class T, class S, class D>
void check(const Fixture& f, const std::string& component, const std::string& name, const Tensor<T, S, D>& t,
           double tolerance) {
  INFO(component << ": " << name << " defined");
  REQUIRE(t.defined());
  const auto e = t.extents();
  check_flat<T>(f, component, name, std::vector<index_t>(e.begin(), e.end()), t.to_vector(), tolerance);
}

/// Compares every `grad.param.<name>` listed in the fixture with the module's parameter gradients.
template <class T, class M>
void check_param_grads(const Fixture& f, const std::string& component, M& module, double tolerance) {
  for (auto& p : nn::named_parameters<T>(module)) {
    const std::string key = "grad.param." + p.name;
    if (!f.has(key)) continue;
    auto g = p.flat.grad();
    INFO(key << " has a gradient");
    REQUIRE(g.defined());
    check_flat<T>(f, component, key, p.shape, g.to_vector(), tolerance);
  }
}

/// Loads `in.<name>` as Tensor<T, DynShape<R>>, optionally as a leaf that requires grad.
template <std::size_t R, class T>
Tensor<T, DynShape<R>> input(const Fixture& f, const std::string& name, bool requires_grad = true) {
  auto t = f.get<R, T>("in." + name);
  if (requires_grad) t.set_requires_grad();
  return t;
}

/// Integer input `in.<name>`.
template <std::size_t R>
IndexTensor<DynShape<R>> index_input(const Fixture& f, const std::string& name) {
  return f.get<R, std::int64_t>("in." + name);
}

/// sum(out * upstream.<name>) as a rank-0 tensor (one term of the fixture loss).
template <class T, class S>
auto loss_term(const Fixture& f, const std::string& name, const Tensor<T, S>& out) {
  auto up = f.get<S::rank, T>("upstream." + name);
  return sum_all(out * up);
}

/// The names in metadata `loss_outputs`.
inline std::vector<std::string> loss_outputs(const Fixture& f) {
  std::vector<std::string> out;
  std::stringstream ss(f.meta("loss_outputs"));
  for (std::string s; std::getline(ss, s, ',');)
    if (!s.empty()) out.push_back(s);
  return out;
}

}  // namespace ttmoe::test
