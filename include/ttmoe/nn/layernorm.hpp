#pragma once
// LayerNorm over the last axis with biased variance (torch.nn.functional.layer_norm): nn::layer_norm
// and the module nn::LayerNorm both run the fused single-pass op (ops/layer_norm.hpp, one tape node
// "layer_norm"), the spelling a PyTorch user expects. The grouped form, where rows share per-group
// affine parameters (MoE-LayerNorm), is ttmoe::layer_norm_rows in ops/.

#include "ttmoe/nn/callable.hpp"
#include "ttmoe/ops/layer_norm.hpp"

namespace ttmoe::nn {

/// LayerNorm: y = (x - mean) * rstd * weight + bias over the last axis (rstd = 1 / sqrt(var + eps),
/// biased variance), as one op on any device. `weight` / `bias` are [D] or undefined (no affine part).
/// The output keeps x's shape type (a static Shape<dyn, 197, 768> stays static).
template <class T, ShapeType S, class D, ShapeType SW>
Tensor<T, S, D> layer_norm(const Tensor<T, S, D>& x, const Tensor<T, SW, D>& weight, const Tensor<T, SW, D>& bias,
                           T eps = T(1e-6)) {
  static_assert(SW::rank == 1, "layer_norm: weight / bias are [D]");
  const index_t dim = x.extent(S::rank - 1);
  const index_t rows = dim ? x.numel() / dim : 0;
  return layer_norm_rows(x, weight, bias, rows ? rows : 1, eps, "layer_norm");  // one group: all rows
}

/// nn.LayerNorm(dim, eps) with elementwise affine (weight 1, bias 0 at init). eps defaults to 1e-6
/// (timm ViT), not torch's 1e-5.
template <class T = float, class D = cpu>
struct LayerNorm : Callable<LayerNorm<T, D>> {
  Tensor<T, DynShape<1>, D> weight;
  Tensor<T, DynShape<1>, D> bias;
  T eps = T(1e-6);

  LayerNorm() = default;
  explicit LayerNorm(index_t dim, T eps_ = T(1e-6))
      : weight(Tensor<T, DynShape<1>, D>::full(DynShape<1>(dim), T(1))),
        bias(Tensor<T, DynShape<1>, D>::zeros(DynShape<1>(dim))),
        eps(eps_) {
    weight.set_requires_grad();
    bias.set_requires_grad();
  }

  /// Normalises over the last axis with the fused op; the result keeps x's shape type.
  template <class S>
  Tensor<T, S, D> forward(const Tensor<T, S, D>& x) const {
    return layer_norm(x, weight, bias, eps);
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }
};

}  // namespace ttmoe::nn
