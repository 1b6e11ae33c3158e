#pragma once
// RMSNorm, Llama convention: weight * (x * rsqrt(mean(x^2) + eps)), computed in the input dtype.

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/callable.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::nn {

/// Functional RMSNorm over the last axis; `weight` may be undefined.
template <class T, class S, class D, class SW>
Tensor<T, DynShape<S::rank>, D> rms_norm(const Tensor<T, S, D>& x, const Tensor<T, SW, D>& weight, T eps = T(1e-6)) {
  auto inv = rsqrt(mean<-1, true>(square(x)) + eps);
  if (weight.defined()) return weight * (x * inv);
  return x * inv;
}

/// LlamaRMSNorm(dim, eps); weight initialised to 1.
template <class T = float, class D = cpu>
struct RMSNorm : Callable<RMSNorm<T, D>> {
  Tensor<T, DynShape<1>, D> weight;
  T eps = T(1e-6);

  RMSNorm() = default;
  explicit RMSNorm(index_t dim, T eps_ = T(1e-6))
      : weight(Tensor<T, DynShape<1>, D>::full(DynShape<1>(dim), T(1))), eps(eps_) {
    weight.set_requires_grad();
  }

  template <class S>
  auto forward(const Tensor<T, S, D>& x) const {
    return rms_norm(x, weight, eps);
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
  }
};

}  // namespace ttmoe::nn
