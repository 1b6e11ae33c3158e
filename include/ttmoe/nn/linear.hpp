#pragma once
// nn.Linear: y = x W^T + b with W stored [out, in] (torch layout, so checkpoints load unchanged).
// One GEMM over all leading dims of x with the bias fused in (ops/linear.hpp). An optional unmerged
// low-rank update (LoRA adapters, models/peft_adapter.hpp) adds two thin GEMMs, its sum riding on
// the second GEMM's store.

#include <cstdint>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/callable.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/ops/linear.hpp"

namespace ttmoe::nn {

/// A fully connected layer; `bias` is undefined when constructed without one.
template <class T = float, class D = cpu>
struct Linear : Callable<Linear<T, D>> {
  Tensor<T, DynShape<2>, D> weight;  ///< [out, in]
  Tensor<T, DynShape<1>, D> bias;    ///< [out] or undefined
  /// Unmerged low-rank update, off while undefined: y += (x delta_A^T) delta_B^T with delta_A
  /// [R, in] (adapter scales folded in) and delta_B [out, R], e.g. moe::stack_lora's factors of
  /// several adapters at once. Not a parameter of the layer (adapters are saved apart from it).
  Tensor<T, DynShape<2>, D> delta_A, delta_B;

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
    return with_delta(x, linear(x, weight, bias));
  }
  /// residual + x W^T + b: the residual (the output's shape) is added as the GEMM stores.
  template <class S, class R>
  Tensor<T, DynShape<S::rank>, D> forward(const Tensor<T, S, D>& x, const Tensor<T, R, D>& residual) const {
    return with_delta(x, linear(x, weight, bias, residual));
  }
  /// Whether a low-rank update is attached.
  bool has_delta() const { return delta_A.defined(); }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }

 private:
  /// y + (x delta_A^T) delta_B^T, or y when no update is attached.
  template <class S>
  Tensor<T, DynShape<S::rank>, D> with_delta(const Tensor<T, S, D>& x, Tensor<T, DynShape<S::rank>, D> y) const {
    if (!delta_A.defined()) return y;
    const Tensor<T, DynShape<1>, D> none;
    return linear(linear(x, delta_A, none), delta_B, none, y);
  }
};

}  // namespace ttmoe::nn
