#pragma once
// Shared helpers for the MoE parity tests: the fixture loss (sum of out * upstream over the
// metadata's loss_outputs) and gradient lookups that treat "no gradient reached" as zeros.
#include <filesystem>

#include <sstream>
#include <string>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fixture.hpp"

namespace ttmoe::test {

/// Splits a comma-separated metadata list.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// sum(out * upstream.<name>) as a rank-0 tensor (recorded).
template <std::size_t R, class T, class S>
Tensor<T, Shape<>> upstream_term(const Fixture& f, const std::string& name, const Tensor<T, S>& out) {
  auto up = f.get<R, T>("upstream." + name);
  Tensor<T, S> u = up.reshape(out.shape());
  return sum_all(out * u);
}

/// The gradient of `t`, or zeros when nothing reached it (an unused expert).
template <class T, class S>
Tensor<T, S> grad_or_zero(const Tensor<T, S>& t) {
  auto g = t.grad();
  return g.defined() ? g : Tensor<T, S>::zeros(t.shape());
}

/// Integer outputs must match exactly.
template <std::size_t R, class S>
void require_equal_ints(const Fixture& f, const std::string& name, const Tensor<std::int64_t, S>& actual) {
  auto ref = f.get<R, std::int64_t>(name);
  INFO(name);
  REQUIRE(actual.to_vector() == ref.to_vector());
}

/// Loads a fixture tensor as a trainable leaf.
template <std::size_t R, class T = double>
Tensor<T, DynShape<R>> leaf(const Fixture& f, const std::string& name, bool trainable = true) {
  auto t = f.get<R, T>(name);
  if (trainable) t.set_requires_grad();
  return t;
}

}  // namespace ttmoe::test

namespace ttmoe::test {
/// require_close that also prints the error when TTMOE_PARITY_VERBOSE is set (for reports).
template <std::size_t R, class T, class S>
void check_close(const Fixture& f, const std::string& name, const Tensor<T, S>& actual, double tol) {
  if (std::getenv("TTMOE_PARITY_VERBOSE")) {
    auto ref = f.get<R, double>(name);
    if (ref.extents() == actual.extents())
      std::fprintf(stderr, "parity %-28s %-36s max rel err %.3e\n",
                   std::filesystem::path(f.path()).stem().string().c_str(), name.c_str(), max_rel_error(actual, ref));
  }
  require_close<R>(f, name, actual, tol);
}
}  // namespace ttmoe::test
