#pragma once
// Shared pieces of the optimisers: the parameter list, options and step count they own (Optimizer)
// and the serialisable state format (named flat host vectors, like torch's optimizer.state_dict()
// keyed by parameter name).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/nn/module.hpp"

namespace ttmoe::nn {

/// Optimiser state: named flat buffers ("<param>.<buffer>") plus the number of step() calls.
template <class T>
struct OptimizerState {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, std::vector<T>>> tensors;

  /// The buffer called `name` (throws if absent).
  const std::vector<T>& at(const std::string& name) const {
    for (auto& [n, v] : tensors)
      if (n == name) return v;
    throw std::out_of_range("OptimizerState: no buffer '" + name + "'");
  }
  /// True if a buffer called `name` exists.
  bool contains(const std::string& name) const {
    for (auto& [n, v] : tensors)
      if (n == name) return true;
    return false;
  }
};

namespace detail {
/// A lazily allocated per-parameter buffer (empty until the parameter first gets a gradient, as in
/// torch, so a frozen-then-unfrozen parameter starts clean).
template <class T, class D>
using FlatBuf = Tensor<T, Shape<dyn>, D>;

template <class T, class D>
std::vector<T> to_host(const FlatBuf<T, D>& t) {
  return t.defined() ? t.to_vector() : std::vector<T>{};
}
template <class T, class D>
FlatBuf<T, D> from_host(const std::vector<T>& v, index_t expected, const std::string& name) {
  if (v.empty()) return {};
  if (index_t(v.size()) != expected) throw std::runtime_error("optimizer state '" + name + "' has the wrong size");
  return FlatBuf<T, D>::from_host(Shape<dyn>(expected), std::span<const T>(v));
}
}  // namespace detail

/// What every optimiser owns and shows: its parameters, its options and the number of step() calls.
/// SGD and Adam derive from it and add their update rule and per-parameter buffers.
template <class T, class D, class Options>
class Optimizer {
 public:
  /// Clears every parameter's gradient.
  void zero_grad() {
    for (auto& p : params_) p.flat.zero_grad();
  }
  std::int64_t steps() const { return steps_; }
  Options& options() { return opt_; }
  const std::vector<ParamRef<T, D>>& params() const { return params_; }

 protected:
  Optimizer(std::vector<ParamRef<T, D>> params, Options opt) : params_(std::move(params)), opt_(opt) {}

  std::vector<ParamRef<T, D>> params_;
  Options opt_;
  std::int64_t steps_ = 0;
};

}  // namespace ttmoe::nn
