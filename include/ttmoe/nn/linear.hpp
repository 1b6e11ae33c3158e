#pragma once
// nn.Linear: y = x W^T + b with W stored [out, in] (torch layout, so checkpoints load unchanged).
// One GEMM over all leading dims of x with the bias fused in (ops/linear.hpp).

#include <cstdint>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/ops/linear.hpp"

namespace ttmoe::nn {

/// A fully connected layer; `bias` is undefined when constructed without one.
template <class T = float, class D = cpu>
struct Linear {
  Tensor<T, DynShape<2>, D> weight;  ///< [out, in]
  Tensor<T, DynShape<1>, D> bias;    ///< [out] or undefined

  Linear() = default;
  /// Kaiming-uniform init like torch (bound 1/sqrt(in) for weight and bias); parameters trainable.
  Linear(index_t in_features, index_t out_features, bool with_bias = true, std::uint64_t seed = 0)
      : weight(DynShape<2>(out_features, in_features)) {
    const double b = kaiming_uniform_bound(in_features);
    uniform_(weight, b, seed);
    weight.set_requires_grad();
    if (with_bias) {
      bias = Tensor<T, DynShape<1>, D>(DynShape<1>(out_features));
      uniform_(bias, b, seed ^ 0x9E3779B97F4A7C15ull);
      bias.set_requires_grad();
    }
  }

  index_t in_features() const { return weight.extent(1); }
  index_t out_features() const { return weight.extent(0); }

  /// x [..., in] -> [..., out] (rank >= 2).
  template <class S>
  Tensor<T, DynShape<S::rank>, D> forward(const Tensor<T, S, D>& x) const {
    return linear(x, weight, bias);
  }
  /// residual + x W^T + b: the residual (the output's shape) is added as the GEMM stores.
  template <class S, class R>
  Tensor<T, DynShape<S::rank>, D> forward(const Tensor<T, S, D>& x, const Tensor<T, R, D>& residual) const {
    return linear(x, weight, bias, residual);
  }
  template <class S>
  auto operator()(const Tensor<T, S, D>& x) const {
    return forward(x);
  }
  template <class S, class R>
  auto operator()(const Tensor<T, S, D>& x, const Tensor<T, R, D>& residual) const {
    return forward(x, residual);
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }
};

}  // namespace ttmoe::nn
